package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/internal/netguard"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// Network is the egress proxy of runs with a network policy
// (jobs.Job.Network). Such a run's container has no network, as every
// run's: its steps reach sandbox.EgressProxy (HTTP_PROXY and HTTPS_PROXY
// point there), the agent relays each connection to the worker, and the
// job's netRun serves it as an HTTP proxy: CONNECT for tunnels (https),
// absolute-form requests for plain http, one request per connection.
//
// A connection goes through when:
//   - its destination, host and port as asked, is one the job's policy
//     lists (a "*." wildcard matches names, never an IP literal); the
//     worker's Policy.NetworkAllow (--run-allow-hosts) has bounded the
//     policy at validation;
//   - the proxy resolves the name (once) to an address the run may reach,
//     and dials that address: a public one; or a loopback or private one
//     (10/8, 172.16/12, 192.168/16, fc00::/7) when the operator's list
//     names this very host and port, no wildcard (an operator's escape
//     hatch for a service on its own network); or any address the
//     operator's list names as an IP literal with this port. Every other
//     special address (link-local and cloud metadata, "this network",
//     CGNAT, multicast, NAT64, 6to4, ...) is refused, as webhooks'
//     (internal/netguard).
//
// A refusal is answered 403, an allowed destination that cannot be
// reached 502. Every connection is logged with the job's ID, its
// destination (and the address dialled) and bytes, and counted in the
// job's Result.Network.
type Network struct {
	// exact are the operator's entries without a wildcard, by "host:port".
	exact map[string]bool
	// literal are the operator's IP-literal entries' addresses, by port.
	literal map[netip.AddrPort]bool
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	log     zerolog.Logger
}

// Bounds of a run's egress.
const (
	// netMaxConns caps a run's connections open at once; more are
	// refused (503).
	netMaxConns = 64
	// netHeaderTimeout bounds reading a proxy request's head.
	netHeaderTimeout = 30 * time.Second
	// netDialTimeout bounds resolving and dialling a destination.
	netDialTimeout = 10 * time.Second
	// netCloseWait bounds waiting for a run's connections to end once
	// its steps have.
	netCloseWait = 5 * time.Second
)

// NewNetwork returns the proxy for the operator's allow list (the
// worker's Policy.NetworkAllow, already checked).
func NewNetwork(allow []string, log zerolog.Logger) (*Network, error) {
	ops, err := jobs.ParseAllowList(allow)
	if err != nil {
		return nil, fmt.Errorf("worker: --run-allow-hosts: %w", err)
	}
	n := &Network{exact: map[string]bool{}, literal: map[netip.AddrPort]bool{}, log: log,
		dial: (&net.Dialer{Timeout: netDialTimeout}).DialContext,
		resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}}
	for _, d := range ops {
		if ip, err := netip.ParseAddr(d.Host); err == nil {
			n.literal[netip.AddrPortFrom(ip, uint16(d.Port))] = true
		} else if !d.IsWildcard() {
			n.exact[d.String()] = true
		}
	}
	return n, nil
}

// permitted reports whether the run may reach addr, which host (as
// asked) resolved to, on port.
func (n *Network) permitted(host string, port int, addr netip.Addr) bool {
	addr = addr.Unmap()
	switch {
	case n.literal[netip.AddrPortFrom(addr, uint16(port))]:
		return true
	case !netguard.Special(addr):
		return true
	case addr.IsLoopback() || addr.IsPrivate():
		return n.exact[jobs.Destination{Host: host, Port: port}.String()]
	}
	return false
}

// forJob returns the proxy of one run of job, which must have a policy.
// The caller ends it with finish once the run is over.
func (n *Network) forJob(job jobs.Job) *netRun {
	ctx, cancel := context.WithCancel(context.Background())
	return &netRun{n: n, allow: job.Network.Destinations(), ctx: ctx, cancel: cancel,
		log:   n.log.With().Str("job_id", job.ID).Logger(),
		index: map[useKey]int{}, open: map[net.Conn]struct{}{}}
}

// netRun is the egress of one run: its policy, its open connections and
// what they did.
type netRun struct {
	n      *Network
	allow  []jobs.Destination
	ctx    context.Context
	cancel context.CancelFunc
	log    zerolog.Logger
	active atomic.Int32
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	open    map[net.Conn]struct{} // both ends of every connection being served
	uses    []jobs.NetworkUse
	index   map[useKey]int
	dropped int
}

type useKey struct {
	host    string
	port    int
	refused bool
}

var _ sandbox.EgressHandler = (*netRun)(nil).Serve

// Serve is the run's sandbox.EgressHandler: one connection a step made
// to the proxy.
func (r *netRun) Serve(_ context.Context, conn net.Conn) {
	defer conn.Close()
	if !r.begin(conn) {
		return
	}
	defer r.wg.Done()
	defer r.untrack(conn)
	c := &connLog{started: time.Now()}
	defer r.record(c)
	if r.active.Add(1) > netMaxConns {
		defer r.active.Add(-1)
		c.refuse(fmt.Errorf("more than %d connections at once", netMaxConns))
		reply(conn, http.StatusServiceUnavailable, c.err)
		return
	}
	defer r.active.Add(-1)

	_ = conn.SetReadDeadline(time.Now().Add(netHeaderTimeout))
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		c.refuse(fmt.Errorf("not a proxy request: %v", err))
		reply(conn, http.StatusBadRequest, c.err)
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	target, plain, err := proxyTarget(req)
	var dest jobs.Destination
	if err == nil {
		dest, err = jobs.ParseDestination(target, false)
		if err == nil && dest.IsWildcard() {
			err = fmt.Errorf("%s is not a host", target)
		}
	}
	if err != nil {
		c.refuse(err)
		reply(conn, http.StatusBadRequest, c.err)
		return
	}
	c.host, c.port = dest.Host, dest.Port
	if !slices.ContainsFunc(r.allow, func(d jobs.Destination) bool { return d.Matches(dest.Host, dest.Port) }) {
		c.refuse(fmt.Errorf("%s is not in the job's network policy", dest))
		reply(conn, http.StatusForbidden, c.err)
		return
	}
	up, err := r.dial(dest, c)
	if err != nil {
		reply(conn, c.status, err)
		return
	}
	if !r.track(up) {
		up.Close()
		return
	}
	defer r.untrack(up)
	defer up.Close()
	forward(conn, br, req, plain, &countingConn{Conn: up, in: &c.in, out: &c.out})
}

// dial resolves dest once, picks the addresses the run may reach and
// dials them in turn. A refusal sets c's status 403 and does not name the
// address (a job must not learn what a name resolves to inside the
// operator's network; the log has it).
func (r *netRun) dial(dest jobs.Destination, c *connLog) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(r.ctx, netDialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(dest.Host); err == nil {
		addrs = []netip.Addr{ip}
	} else if addrs, err = r.n.resolve(ctx, dest.Host); err != nil {
		c.fail(http.StatusBadGateway, fmt.Errorf("cannot resolve %s", dest.Host), err)
		return nil, c.err
	}
	var errs []error
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		if !r.n.permitted(dest.Host, dest.Port, a) {
			refused = append(refused, a.String())
			continue
		}
		up, err := r.n.dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(dest.Port)).String())
		if err == nil {
			c.addr = a.String()
			return up, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		c.refused = refused
		c.refuse(fmt.Errorf("%s resolves to a loopback, private, link-local or other special address; the operator may allow it by naming %s in --run-allow-hosts", dest.Host, dest))
		c.status = http.StatusForbidden
		return nil, c.err
	}
	c.fail(http.StatusBadGateway, fmt.Errorf("cannot connect to %s", dest), errors.Join(errs...))
	return nil, c.err
}

// begin registers a step's connection, to be closed and waited for by
// finish; false if the run is over. The wait group's Add happens under
// the lock that finish takes before it waits, never beside the Wait.
func (r *netRun) begin(conn net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.open[conn] = struct{}{}
	r.wg.Add(1)
	return true
}

// track registers conn to be closed by finish; false if the run is over.
func (r *netRun) track(conn net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.open[conn] = struct{}{}
	return true
}

func (r *netRun) untrack(conn net.Conn) {
	r.mu.Lock()
	delete(r.open, conn)
	r.mu.Unlock()
}

// record logs one connection and counts it in the run's uses.
func (r *netRun) record(c *connLog) {
	in, out := c.in.Load(), c.out.Load()
	ev := r.log.Info().Str("host", c.host).Int("port", c.port).Int64("bytes_out", out).Int64("bytes_in", in).
		Int64("ms", time.Since(c.started).Milliseconds())
	if c.addr != "" {
		ev = ev.Str("addr", c.addr)
	}
	if len(c.refused) > 0 {
		ev = ev.Strs("refused_addrs", c.refused)
	}
	if c.err != nil {
		ev = ev.Bool("refused", c.isRefused).Str("reason", c.err.Error())
		if c.cause != nil {
			ev = ev.AnErr("cause", c.cause)
		}
	}
	ev.Msg("network connection")

	r.mu.Lock()
	defer r.mu.Unlock()
	k := useKey{host: c.host, port: c.port, refused: c.isRefused}
	i, ok := r.index[k]
	if !ok {
		if len(r.uses) >= jobs.MaxNetworkEntries {
			r.dropped++
			return
		}
		i = len(r.uses)
		r.index[k] = i
		r.uses = append(r.uses, jobs.NetworkUse{Host: c.host, Port: c.port, Refused: k.refused})
	}
	u := &r.uses[i]
	u.Connections++
	u.BytesOut += out
	u.BytesIn += in
	if c.err != nil {
		u.Reason = c.err.Error()
		if !c.isRefused {
			u.Failed++
		}
	}
}

// finish ends the run's egress: it closes every connection still open,
// waits for them (a bounded time) and returns what they did.
func (r *netRun) finish() []jobs.NetworkUse {
	r.mu.Lock()
	r.closed = true
	for c := range r.open {
		c.Close()
	}
	r.mu.Unlock()
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(netCloseWait):
		r.log.Warn().Msg("network connections still open after the run; their bytes are not all counted")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dropped > 0 {
		r.log.Info().Int("destinations_not_listed", r.dropped).Msg("network: more destinations than a result lists")
	}
	return slices.Clone(r.uses)
}

// connLog is one connection's outcome, for the log and the result.
type connLog struct {
	started    time.Time
	host, addr string
	port       int
	in, out    atomic.Int64
	refused    []string
	err        error // what the step was told
	cause      error // what the worker knows besides
	isRefused  bool
	status     int
}

func (c *connLog) refuse(err error) { c.err, c.isRefused, c.status = err, true, http.StatusForbidden }

func (c *connLog) fail(status int, err, cause error) { c.status, c.err, c.cause = status, err, cause }

// countingConn counts the bytes read (in) and written (out) on a
// connection.
type countingConn struct {
	net.Conn
	in, out *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

// CloseWrite half-closes the connection, when it can be.
func (c *countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
