package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/jobs"
)

// netProbePy is a job's program that tries every way out of its sandbox:
// through the egress proxy (urllib, which follows redirects, and raw
// CONNECTs) to the allowed name, to its address as IP literals, to
// another port, another host and cloud metadata; and directly (TCP to the
// host, UDP, DNS, a raw socket). It prints one line per attempt, then the
// start time of the container's PID 1, which tells containers apart.
const netProbePy = `
import os, socket, urllib.request, urllib.error
P, Q, GW = %d, %d, %q
proxy = os.environ.get("HTTPS_PROXY", "").replace("http://", "")
opener = urllib.request.build_opener(urllib.request.ProxyHandler())
def get(url):
    try:
        with opener.open(url, timeout=20) as r:
            return "%%d %%s" %% (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "%%d" %% e.code
    except Exception as e:
        return "error " + type(e).__name__
def connect(target):
    h, p = proxy.rsplit(":", 1)
    s = socket.create_connection((h, int(p)), timeout=20)
    s.sendall(("CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (target, target)).encode())
    head = s.recv(4096).decode()
    code = head.split(" ")[1]
    if code == "200":
        s.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
        code += " " + data.decode().split("\r\n\r\n", 1)[1]
    s.close()
    return code
def direct(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "CONNECTED"
    except OSError:
        return "fail"
def udp():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53))
        return "SENT"
    except OSError:
        return "fail"
def dns():
    try:
        socket.getaddrinfo("example.com", 80)
        return "RESOLVED"
    except OSError:
        return "fail"
def raw():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        return "OPENED"
    except OSError:
        return "fail"
for url in ["http://localhost:%%d/hello" %% P, "http://127.0.0.1:%%d/hello" %% P, "http://%%s:%%d/hello" %% (GW, P),
            "http://[::1]:%%d/hello" %% P, "http://localhost:%%d/hello" %% Q, "http://example.com/",
            "http://169.254.169.254/latest/meta-data/", "http://localhost:%%d/redirect" %% P]:
    print("get", url, get(url))
for t in ["localhost:%%d" %% P, "127.0.0.1:%%d" %% P, "%%s:%%d" %% (GW, P), "localhost:%%d" %% Q, "example.com:443"]:
    print("connect", t, connect(t))
print("direct 127.0.0.1", direct("127.0.0.1", P))
print("direct", GW, direct(GW, P))
print("udp", udp())
print("dns", dns())
print("raw", raw())
print("container", open("/proc/1/stat").read().rsplit(")", 1)[1].split()[19])
`

// noNetPy is a job without a network policy: it looks for the proxy
// and prints which container it ran in.
const noNetPy = `
import os, socket
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=5).close()
    print("proxy CONNECTED")
except OSError:
    print("proxy fail")
print("env", os.environ.get("HTTPS_PROXY", "none"))
print("container", open("/proc/1/stat").read().rsplit(")", 1)[1].split()[19])
`

// TestNetworkPolicy: a job whose policy allows localhost:P reaches a test
// server on the host through that name, and nothing else: not the same
// server by its IP literals (loopback, the bridge gateway, IPv6), not the
// host's other port (though the operator allows it), not another host or
// cloud metadata, not where a redirect points; and no direct TCP, UDP,
// DNS or raw socket. localhost is a loopback address: the run reaches it
// because the operator's --run-allow-hosts names localhost:P exactly (the
// escape hatch for a service on the operator's own network). The result
// lists the destinations; the worker logs each connection. A container
// of the policy's jobs never serves another job, with or without it.
func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	requireImage(t, "python")
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	ln2, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	P, Q := ln.Addr().(*net.TCPAddr).Port, ln2.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the host") })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("http://127.0.0.1:%d/hello", P), http.StatusFound)
	})
	for _, l := range []net.Listener{ln, ln2} {
		srv := &http.Server{Handler: mux}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	gw := bridgeGateway(t)
	lp, lq := "localhost:"+strconv.Itoa(P), "localhost:"+strconv.Itoa(Q)
	// A port nobody listens on: the operator of the producer's side allows
	// it, the worker's does not.
	lr := "localhost:" + strconv.Itoa(Q+1)

	e := newEnv(t)
	w := e.startWorker("--warm", "", "--run-allow-hosts", lp+","+lq)
	c, err := client.New(client.Config{Redis: e.rdb, Prefix: e.prefix, QueuePrefix: e.queuePrefix,
		Policy: jobs.Policy{NetworkAllow: []string{lp, lq, lr}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	run := func(j jobs.Job) jobs.Result {
		t.Helper()
		j.Limits.TimeoutMS = 120_000
		info, err := c.Enqueue(context.Background(), j)
		require.NoError(t, err)
		require.NoError(t, info.Err)
		return e.wait(info.ID, 3*time.Minute)
	}
	policy := &jobs.NetworkPolicy{Allow: []string{lp}}

	a := run(jobs.Job{Lang: "python", Network: policy, Code: fmt.Sprintf(netProbePy, P, Q, gw)})
	require.Equal(t, jobs.StatusSucceeded, a.Status, "%s: %s\n%s", a.Status, a.Reason, a.Stderr)
	lines := strings.Split(strings.TrimSpace(a.Stdout), "\n")
	containerA := lines[len(lines)-1]
	want := []string{
		fmt.Sprintf("get http://localhost:%d/hello 200 hello from the host", P),
		fmt.Sprintf("get http://127.0.0.1:%d/hello 403", P),
		fmt.Sprintf("get http://%s:%d/hello 403", gw, P),
		fmt.Sprintf("get http://[::1]:%d/hello 403", P),
		fmt.Sprintf("get http://localhost:%d/hello 403", Q),
		"get http://example.com/ 403",
		"get http://169.254.169.254/latest/meta-data/ 403",
		fmt.Sprintf("get http://localhost:%d/redirect 403", P), // followed to 127.0.0.1:P
		fmt.Sprintf("connect localhost:%d 200 hello from the host", P),
		fmt.Sprintf("connect 127.0.0.1:%d 403", P),
		fmt.Sprintf("connect %s:%d 403", gw, P),
		fmt.Sprintf("connect localhost:%d 403", Q),
		"connect example.com:443 403",
		"direct 127.0.0.1 fail",
		"direct " + gw + " fail",
		"udp fail",
		"dns fail",
		"raw fail",
	}
	require.Equal(t, want, lines[:len(lines)-1], "the probe's lines")

	// The result lists the destinations: the allowed one with its bytes,
	// the refused ones without.
	got := map[string]jobs.NetworkUse{}
	for _, u := range a.Network {
		got[fmt.Sprintf("%s %d %t", u.Host, u.Port, u.Refused)] = u
	}
	allowed, ok := got[fmt.Sprintf("localhost %d false", P)]
	require.True(t, ok, "%+v", a.Network)
	require.Equal(t, 3, allowed.Connections, "two GETs (/hello, /redirect) and a tunnel")
	require.Positive(t, allowed.BytesOut)
	require.Positive(t, allowed.BytesIn)
	for _, refused := range []string{
		fmt.Sprintf("127.0.0.1 %d true", P), fmt.Sprintf("%s %d true", gw, P), fmt.Sprintf("::1 %d true", P),
		fmt.Sprintf("localhost %d true", Q), "example.com 80 true", "example.com 443 true", "169.254.169.254 80 true",
	} {
		u, ok := got[refused]
		require.True(t, ok, "%s in %+v", refused, a.Network)
		require.Zero(t, u.BytesIn+u.BytesOut)
	}
	require.Len(t, a.Network, 8)
	w.waitLog(`"job_id":"`+a.ID+`","host":"localhost","port":`+strconv.Itoa(P), 10*time.Second)

	// A job without a policy, on the same pool otherwise: another
	// container, no proxy, no proxy settings.
	b := run(jobs.Job{Lang: "python", Code: noNetPy})
	require.Equal(t, jobs.StatusSucceeded, b.Status, "%s: %s\n%s", b.Status, b.Reason, b.Stderr)
	require.True(t, strings.HasPrefix(b.Stdout, "proxy fail\nenv none\n"), b.Stdout)
	require.NotEqual(t, containerA, lastLine(b.Stdout), "a container of the policy's jobs served a job without it")
	require.Empty(t, b.Network)

	// The policy's next job: a fresh container too (the agent's scrub
	// does not vouch for a network namespace that had connections), with
	// the proxy.
	c2 := run(jobs.Job{Lang: "python", Network: policy, Code: noNetPy})
	require.Equal(t, jobs.StatusSucceeded, c2.Status, "%s: %s\n%s", c2.Status, c2.Reason, c2.Stderr)
	require.Equal(t, "proxy CONNECTED\nenv http://127.0.0.1:3128\n", strings.TrimSuffix(c2.Stdout, lastLine(c2.Stdout)+"\n"))
	require.NotEqual(t, containerA, lastLine(c2.Stdout), "a container with a network policy is never reused")
	require.NotEqual(t, lastLine(b.Stdout), lastLine(c2.Stdout), "a container without a policy never serves a job with one")

	// The worker's --run-allow-hosts counts, whatever the producer's.
	d := run(jobs.Job{Lang: "python", Network: &jobs.NetworkPolicy{Allow: []string{lr}}, Code: "print(1)"})
	require.Equal(t, jobs.StatusRejected, d.Status)
	require.Contains(t, d.Reason, lr+" is not among the destinations the operator allows")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
