// Package redistest starts private Redis topologies for tests from the
// redis-server binary (make setup installs it): a Redis Cluster of three
// masters, and a Sentinel set (a master, a replica, three sentinels) that
// can be made to fail over. Each lives on loopback ports of its own and in
// the test's temporary directory, and is killed when the test ends. A
// missing binary or a topology that does not come up fails the test.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// freePort returns a loopback port with port+10000 free too (a cluster
// node's bus port).
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: listen: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000)); err == nil {
			bus.Close()
			return port
		}
	}
	t.Fatal("redistest: no free port pair")
	return 0
}

// Server is one redis-server process.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	args []string
	t    testing.TB
}

// start runs redis-server with args and waits until it answers PING.
func start(t testing.TB, port int, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server is needed (make setup installs it): %v", err)
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), args: args, t: t}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redistest: start redis-server: %v", err)
	}
	t.Cleanup(func() { s.Kill() })
	s.waitPing(10 * time.Second)
	return s
}

func (s *Server) waitPing(d time.Duration) {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server %s does not answer: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server (SIGKILL) and waits for it.
func (s *Server) Kill() {
	if s.cmd.Process != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
}

// Cluster is a Redis Cluster.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Addr)
	}
	return out
}

// StartCluster starts a Redis Cluster of n masters (no replicas, no
// persistence) and waits until every node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	dir := t.TempDir()
	c := &Cluster{}
	for range n {
		port := freePort(t)
		c.Nodes = append(c.Nodes, start(t, port, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)), "--dir", dir,
			"--save", "", "--appendonly", "no", "--cluster-node-timeout", "2000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, node := range c.Nodes {
		rc := redis.NewClient(&redis.Options{Addr: node.Addr})
		for {
			info, err := rc.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				rc.Close()
				t.Fatalf("redistest: cluster node %s not ok: %v %s", node.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rc.Close()
	}
	return c
}

// Sentinel is a master, its replica, and three sentinels watching them.
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
	// MasterName is the name the sentinels know the master by.
	MasterName string
}

// SentinelAddrs returns the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	var out []string
	for _, n := range s.Sentinels {
		out = append(out, n.Addr)
	}
	return out
}

// StartSentinel starts a Sentinel set that declares the master down after
// one second without an answer (quorum 2 of 3).
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	dir := t.TempDir()
	s := &Sentinel{MasterName: "sandq-master"}
	mp, rp := freePort(t), freePort(t)
	s.Master = start(t, mp, "--port", strconv.Itoa(mp), "--bind", "127.0.0.1", "--dir", dir, "--dbfilename", "m.rdb", "--save", "", "--appendonly", "no")
	s.Replica = start(t, rp, "--port", strconv.Itoa(rp), "--bind", "127.0.0.1", "--dir", dir, "--dbfilename", "r.rdb", "--save", "", "--appendonly", "no",
		"--replicaof", "127.0.0.1", strconv.Itoa(mp))
	for i := range 3 {
		port := freePort(t)
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n", port, dir, s.MasterName, mp, s.MasterName, s.MasterName, s.MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s.Sentinels = append(s.Sentinels, start(t, port, conf, "--sentinel"))
	}
	// Wait until the replica is in sync and every sentinel knows it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, sn := range s.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
			replicas, err := sc.Replicas(context.Background(), s.MasterName).Result()
			sc.Close()
			if err != nil || len(replicas) == 0 {
				ok = false
			}
		}
		if ok {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("redistest: the sentinels do not see the replica in 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Failover kills the master and waits until the sentinels name the
// replica as the new master.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	s.Master.Kill()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0].Addr})
	defer sc.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		addr, err := sc.GetMasterAddrByName(context.Background(), s.MasterName).Result()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == s.Replica.Addr {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no failover to %s in 60 s (sentinels say %v, %v)", s.Replica.Addr, addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
