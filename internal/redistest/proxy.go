package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy to a Redis server that counts the bytes Redis
// sends: what a client's commands cost on the wire, whatever else the
// shared server serves meanwhile.
type Proxy struct {
	Addr string
	out  atomic.Int64
}

// FromRedis returns the bytes Redis has sent through the proxy so far.
func (p *Proxy) FromRedis() int64 { return p.out.Load() }

// StartProxy starts a proxy to target on a loopback port, closed when the
// test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				r, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer r.Close()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(r, c)
					_ = r.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(counter{c, &p.out}, r)
				_ = c.Close()
				<-done
			})
		}
	})
	return p
}

// counter counts what passes through to w.
type counter struct {
	w io.Writer
	n *atomic.Int64
}

func (c counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}
