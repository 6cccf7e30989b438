package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/agent"
)

// Errors a Container reports. Any of them means the container must be
// discarded; none of them is the job's fault.
var (
	// ErrAgentGone: the agent's stream ended (container died or was removed).
	ErrAgentGone = errors.New("sandbox: agent connection lost")
	// ErrAgentUnresponsive: the agent did not answer within the job's
	// timeout plus grace (the worker's backstop).
	ErrAgentUnresponsive = errors.New("sandbox: agent did not answer in time")
	// ErrNotClean: the agent could not prove the container clean.
	ErrNotClean = errors.New("sandbox: container not clean")
	// ErrNoSeccomp: the container runs without sandq's seccomp profile in
	// force (the engine's runtime ignored it); it is removed unused.
	ErrNoSeccomp = errors.New("sandbox: sandq's seccomp profile is not in force")
	// ErrSandboxOOM: the agent is gone and the engine says the kernel's
	// OOM killer killed the container (gVisor's sandbox dies whole when
	// its cgroup is full): the job's memory, not a fault of the host.
	ErrSandboxOOM = errors.New("sandbox: the container was killed by the OOM killer")
	// ErrLibsGone: the library set's volume was removed (by a collector)
	// after the set was found installed; install it again.
	ErrLibsGone = errors.New("sandbox: the library set's volume is gone")
)

// Container is one running sandbox container and the session with its agent.
type Container struct {
	ID   string
	Name string

	rt      Runtime
	stream  Stream
	enc     *agent.Encoder
	log     zerolog.Logger
	ready   agent.Ready
	created time.Time

	nextID  atomic.Uint64
	mu      sync.Mutex
	pending map[uint64]*pending
	dead    chan struct{}
	deadErr error

	// Owned by the pool.
	key       poolKey
	onRemove  func() // called once the container is removed
	jobs      int
	idleSince time.Time
	scrubCh   chan agent.Response // set after a run with ScrubAfter
	scrubID   uint64
}

// startContainer creates, attaches and starts a container and waits for its
// agent's Ready. On any failure the container is removed.
func startContainer(ctx context.Context, rt Runtime, spec ContainerSpec, log zerolog.Logger) (_ *Container, err error) {
	// Create is not canceled with ctx: the engine may finish creating a
	// container after the client gave up, and we would never learn its ID.
	// With the ID in hand, every failure below removes the container.
	createCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	id, err := rt.Create(createCtx, spec)
	cancel()
	if err != nil {
		return nil, err
	}
	c := &Container{ID: id, Name: spec.Name, rt: rt, created: time.Now(),
		pending: map[uint64]*pending{}, dead: make(chan struct{}),
		log: log.With().Str("container_id", shortID(id)).Logger()}
	defer func() {
		if err != nil {
			c.remove(ctx)
		}
	}()
	if c.stream, err = rt.Attach(ctx, id); err != nil {
		return nil, err
	}
	c.enc = agent.NewEncoder(c.stream)
	readyCh := c.register(0, 1)
	go c.readLoop()
	if err := rt.Start(ctx, id); err != nil {
		return nil, err
	}
	select {
	case resp := <-readyCh:
		if resp.Ready == nil {
			return nil, fmt.Errorf("sandbox: agent's first message is %q, not ready", resp.Op)
		}
		c.ready = *resp.Ready
	case <-c.dead:
		return nil, fmt.Errorf("sandbox: agent exited before ready: %w", c.deadErr)
	case <-ctx.Done():
		return nil, fmt.Errorf("sandbox: wait for agent: %w", ctx.Err())
	}
	switch {
	case c.ready.Version != agent.ProtocolVersion:
		return nil, fmt.Errorf("sandbox: agent speaks protocol %d, want %d (rebuild images)", c.ready.Version, agent.ProtocolVersion)
	case !c.ready.OOMCounter:
		// No cgroup oom_kill counter and, under gVisor, no memory
		// watchdog (agent.OOMSourceGVisorWatchdog): an OOM kill would be
		// indistinguishable from a kill by anything else.
		return nil, errors.New("sandbox: agent cannot count OOM kills (no cgroup oom_kill counter, no gVisor memory watchdog)")
	case c.ready.Seccomp != 2:
		// Every container is created with sandq's profile (seccomp.go):
		// without it in force, a job may unshare namespaces, set up
		// io_uring, renice the agent.
		return nil, fmt.Errorf("%w (seccomp mode %d): gVisor's runsc applies it only with --oci-seccomp in its runtimeArgs (make setup adds it); or the image's agent predates this worker (rebuild images)", ErrNoSeccomp, c.ready.Seccomp)
	case !c.ready.Clean.Clean:
		return nil, fmt.Errorf("%w: %v", ErrNotClean, c.ready.Clean.Problems)
	}
	return c, nil
}

// gone reports whether the agent's stream has ended.
func (c *Container) gone() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// pending is a request awaiting answers: the read loop delivers them on
// ch until done is closed (the requester stopped listening).
type pending struct {
	ch   chan agent.Response
	done chan struct{}
}

func (c *Container) register(id uint64, n int) chan agent.Response {
	p := &pending{ch: make(chan agent.Response, n), done: make(chan struct{})}
	c.mu.Lock()
	c.pending[id] = p
	c.mu.Unlock()
	return p.ch
}

func (c *Container) unregister(id uint64) {
	c.mu.Lock()
	if p := c.pending[id]; p != nil {
		close(p.done)
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// readLoop delivers each frame to its request, waiting for the requester
// to take it (a run's artifact chunks come faster than they are written),
// and drops frames nobody awaits.
func (c *Container) readLoop() {
	dec := agent.NewDecoder(c.stream)
	for {
		var resp agent.Response
		if err := dec.Decode(&resp); err != nil {
			c.deadErr = fmt.Errorf("%w: %v", ErrAgentGone, err)
			close(c.dead)
			return
		}
		c.mu.Lock()
		p := c.pending[resp.ID]
		c.mu.Unlock()
		if p == nil {
			c.log.Warn().Uint64("request", resp.ID).Str("op", resp.Op).Msg("unexpected agent message")
			continue
		}
		select {
		case p.ch <- resp:
		case <-p.done:
		}
	}
}

// Grace is added to a run's timeouts before the worker gives up on the
// agent (the backstop), and bounds how long a cancel may take.
const Grace = 5 * time.Second

// collectBudget is the agent's time for collecting and streaming a run's
// files (its own limit is 10 s).
const collectBudget = 15 * time.Second

// stepBudget is what a step may take beyond its timeout: the agent's
// bounded waits after a kill (three of its 2 s kill graces).
const stepBudget = 6 * time.Second

// EgressHandler serves one connection a step made to its run's egress
// address (agent.RunRequest.Egress): conn is the connection's other end,
// which the handler closes when it is done.
type EgressHandler func(ctx context.Context, conn net.Conn)

// RunOption adds to a run (Container.Run, Pool.Run).
type RunOption func(*runOptions)

type runOptions struct {
	egress EgressHandler
	live   func(agent.LiveChunk)
	phase  func(name string, d time.Duration)
	scrub  func(d time.Duration, kept bool)
}

// WithEgress serves the connections the steps make to req.Egress (the
// agent relays them over its stream; the container has no network).
func WithEgress(h EgressHandler) RunOption { return func(o *runOptions) { o.egress = h } }

// WithLive passes on the live output of the steps that ask for it
// (agent.Step.Live), chunk by chunk, in order per stream. fn is called from
// the container's reader: it must return at once (queue the chunk, or drop
// it), or the run waits for it.
func WithLive(fn func(agent.LiveChunk)) RunOption { return func(o *runOptions) { o.live = fn } }

// WithPhases has Pool.Run report how long its phases took: "acquire" (a
// warm container taken, or one started) and "agent" (the request to the
// agent and its answer: files written, steps run, files collected).
func WithPhases(fn func(name string, d time.Duration)) RunOption {
	return func(o *runOptions) { o.phase = fn }
}

// WithScrubbed has Pool.Run report the scrub of the container after the
// run (reuse mode): how long it took and whether the container was kept.
// fn is called after Run has returned, from another goroutine; not at all
// when the container is not scrubbed (fresh mode, recycled, broken).
func WithScrubbed(fn func(d time.Duration, kept bool)) RunOption {
	return func(o *runOptions) { o.scrub = fn }
}

// Run sends one job to the agent and waits for its result. When ctx ends,
// the agent is told to cancel and the (canceled) result is still returned.
// The collected files arrive before the result and are written to
// temporary files in TempDir (RunResult.Artifacts[i].File), which the
// caller removes (RunResult.RemoveFiles). An error means the container is
// broken and must be discarded.
func (c *Container) Run(ctx context.Context, req *agent.RunRequest, opts ...RunOption) (res agent.RunResult, err error) {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	id := c.nextID.Add(1)
	ch := c.register(id, 2)
	if err := c.enc.Encode(agent.Request{ID: id, Op: agent.OpRun, Run: req}); err != nil {
		c.unregister(id)
		return agent.RunResult{}, fmt.Errorf("%w: send: %v", ErrAgentGone, err)
	}
	var budget time.Duration
	for _, st := range req.Steps {
		budget += max(st.Timeout, time.Second) + stepBudget
	}
	if req.Timeout > 0 {
		budget = min(budget, req.Timeout+time.Duration(len(req.Steps))*stepBudget)
	}
	if req.Collect != nil {
		budget += collectBudget
	}
	backstop := time.NewTimer(budget + Grace)
	defer backstop.Stop()
	files := &receiver{}
	defer func() {
		if err != nil {
			files.discard()
		}
	}()
	outs := outputs{req: req}
	relay := &egressRelay{c: c, run: id, handler: o.egress, ctx: ctx}
	defer relay.closeAll()
	ctxDone := ctx.Done()
	for {
		select {
		case resp := <-ch:
			switch {
			case resp.Op == agent.OpEgress && resp.Egress != nil:
				relay.frame(resp.Egress)
			case resp.Op == agent.OpLive && resp.Live != nil:
				if o.live != nil {
					o.live(*resp.Live)
				}
			case resp.Op == agent.OpOutput && resp.Output != nil:
				if err := outs.add(resp.Output); err != nil {
					c.unregister(id)
					return agent.RunResult{}, fmt.Errorf("sandbox: receive output: %w", err)
				}
			case resp.Op == agent.OpArtifact && resp.Artifact != nil:
				if err := files.write(resp.Artifact); err != nil {
					c.unregister(id)
					return agent.RunResult{}, fmt.Errorf("sandbox: receive artifact: %w", err)
				}
			case resp.Op == agent.OpRunResult && resp.Run != nil:
				if req.ScrubAfter {
					c.scrubCh, c.scrubID = ch, id
				} else {
					c.unregister(id)
				}
				res := *resp.Run
				if err := outs.attach(res.Steps); err != nil {
					return agent.RunResult{}, err
				}
				if err := files.attach(res.Artifacts); err != nil {
					return agent.RunResult{}, err
				}
				return res, nil
			case resp.Op == agent.OpError:
				c.unregister(id)
				return agent.RunResult{}, fmt.Errorf("sandbox: agent refused run: %s", resp.Error)
			}
		case <-ctxDone:
			ctxDone = nil
			_ = c.enc.Encode(agent.Request{ID: id, Op: agent.OpCancel})
			backstop.Reset(Grace + collectBudget)
		case <-c.dead:
			c.unregister(id)
			return agent.RunResult{}, c.deadErr
		case <-backstop.C:
			c.unregister(id)
			return agent.RunResult{}, ErrAgentUnresponsive
		}
	}
}

// outputs collects a run's output chunks (agent.OutputChunk) by step and
// stream, each part within what the step's output limit lets the agent keep.
type outputs struct {
	req   *agent.RunRequest
	parts map[[3]int][]byte // step, stream (0 stdout, 1 stderr), part (0 head, 1 tail)
}

func (o *outputs) add(ch *agent.OutputChunk) error {
	if ch.Step < 0 || ch.Step >= len(o.req.Steps) {
		return fmt.Errorf("chunk of step %d of %d", ch.Step, len(o.req.Steps))
	}
	stream := map[string]int{"stdout": 0, "stderr": 1}
	si, ok := stream[ch.Stream]
	if !ok {
		return fmt.Errorf("chunk of stream %q", ch.Stream)
	}
	limit := o.req.Steps[ch.Step].OutputLimit
	if limit <= 0 {
		limit = 1 << 20 // the agent's default
	}
	k := [3]int{ch.Step, si, 0}
	if ch.Tail {
		k[2], limit = 1, limit/2
	}
	if o.parts == nil {
		o.parts = map[[3]int][]byte{}
	}
	if len(o.parts[k])+len(ch.Data) > limit {
		return fmt.Errorf("step %d %s: more output than its limit of %d bytes", ch.Step, ch.Stream, o.req.Steps[ch.Step].OutputLimit)
	}
	o.parts[k] = append(o.parts[k], ch.Data...)
	return nil
}

// attach puts the received bytes back into the steps' results.
func (o *outputs) attach(steps []agent.StepResult) error {
	for k := range o.parts {
		if k[0] >= len(steps) {
			return fmt.Errorf("sandbox: output of step %d, but the result has %d steps", k[0], len(steps))
		}
	}
	for i := range steps {
		for si, out := range []*agent.Output{&steps[i].Stdout, &steps[i].Stderr} {
			out.Head, out.Tail = o.parts[[3]int{i, si, 0}], o.parts[[3]int{i, si, 1}]
		}
	}
	return nil
}

// egressRelay is the worker's end of a run's egress connections: each is a
// net.Pipe whose one end the handler serves, the other end bridged to the
// agent's frames.
type egressRelay struct {
	c       *Container
	run     uint64
	handler EgressHandler
	ctx     context.Context
	conns   map[uint64]*egressConn
}

// egressConn is one connection: frames from the agent queue for the pipe
// in order, without blocking the container's read loop.
type egressConn struct {
	pipe net.Conn
	in   chan []byte
}

func (r *egressRelay) frame(f *agent.EgressFrame) {
	if r.conns == nil {
		r.conns = map[uint64]*egressConn{}
	}
	ec := r.conns[f.Conn]
	switch {
	case f.Open:
		if r.handler == nil || ec != nil {
			_ = r.c.enc.Encode(agent.Request{ID: r.run, Op: agent.OpEgress, Egress: &agent.EgressFrame{Conn: f.Conn, Close: true}})
			return
		}
		a, b := net.Pipe()
		ec = &egressConn{pipe: b, in: make(chan []byte, 256)}
		r.conns[f.Conn] = ec
		go r.handler(r.ctx, a)
		go func() { // agent → handler
			defer b.Close()
			for data := range ec.in {
				if _, err := b.Write(data); err != nil {
					return
				}
			}
		}()
		go func() { // handler → agent
			buf := make([]byte, 32<<10)
			for {
				n, err := b.Read(buf)
				if n > 0 {
					if r.c.enc.Encode(agent.Request{ID: r.run, Op: agent.OpEgress, Egress: &agent.EgressFrame{Conn: f.Conn, Data: buf[:n]}}) != nil {
						return
					}
				}
				if err != nil {
					_ = r.c.enc.Encode(agent.Request{ID: r.run, Op: agent.OpEgress, Egress: &agent.EgressFrame{Conn: f.Conn, Close: true}})
					return
				}
			}
		}()
	case ec == nil:
	case f.Close:
		close(ec.in)
		delete(r.conns, f.Conn)
	default:
		select {
		case ec.in <- slices.Clone(f.Data):
		default: // the handler does not keep up: drop the connection
			close(ec.in)
			delete(r.conns, f.Conn)
		}
	}
}

func (r *egressRelay) closeAll() {
	for id, ec := range r.conns {
		close(ec.in)
		delete(r.conns, id)
	}
}

// receiver writes a run's artifact chunks into temporary files.
type receiver struct {
	files map[int]*os.File
	done  map[int]string // index → file, complete
}

func (r *receiver) write(ch *agent.ArtifactChunk) error {
	if r.files == nil {
		r.files, r.done = map[int]*os.File{}, map[int]string{}
	}
	f := r.files[ch.Index]
	if ch.Abort {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
			delete(r.files, ch.Index)
		}
		return nil
	}
	if f == nil {
		if ch.Offset != 0 {
			return fmt.Errorf("artifact %d (%s) starts at offset %d", ch.Index, ch.Name, ch.Offset)
		}
		var err error
		if f, err = os.CreateTemp("", "sandq-artifact-*"); err != nil {
			return err
		}
		r.files[ch.Index] = f
	}
	if _, err := f.WriteAt(ch.Data, ch.Offset); err != nil {
		return err
	}
	if ch.Last {
		delete(r.files, ch.Index)
		if err := f.Close(); err != nil {
			os.Remove(f.Name())
			return err
		}
		r.done[ch.Index] = f.Name()
	}
	return nil
}

// attach gives each artifact of the result its received file.
func (r *receiver) attach(as []agent.Artifact) error {
	for i := range as {
		p, ok := r.done[i]
		if !ok {
			r.discard()
			return fmt.Errorf("sandbox: artifact %s listed but not received", as[i].Name)
		}
		as[i].File = p
		delete(r.done, i)
	}
	r.discard() // anything left over
	return nil
}

// discard removes every file received or being received.
func (r *receiver) discard() {
	for _, f := range r.files {
		f.Close()
		os.Remove(f.Name())
	}
	for _, p := range r.done {
		os.Remove(p)
	}
	r.files, r.done = nil, nil
}

// waitScrub waits for the scrub that follows a run with ScrubAfter.
func (c *Container) waitScrub(ctx context.Context) error {
	ch := c.scrubCh
	if ch == nil {
		return c.Scrub(ctx)
	}
	c.scrubCh = nil
	defer c.unregister(c.scrubID)
	for {
		select {
		case resp := <-ch:
			if resp.Op != agent.OpScrubbed {
				continue
			}
			return scrubErr(resp.Scrub)
		case <-c.dead:
			return c.deadErr
		case <-ctx.Done():
			return fmt.Errorf("sandbox: wait for scrub: %w", ctx.Err())
		}
	}
}

// Scrub asks the agent to clean the container and prove it clean.
func (c *Container) Scrub(ctx context.Context) error {
	id := c.nextID.Add(1)
	ch := c.register(id, 1)
	defer c.unregister(id)
	if err := c.enc.Encode(agent.Request{ID: id, Op: agent.OpScrub}); err != nil {
		return fmt.Errorf("%w: send: %v", ErrAgentGone, err)
	}
	select {
	case resp := <-ch:
		return scrubErr(resp.Scrub)
	case <-c.dead:
		return c.deadErr
	case <-ctx.Done():
		return fmt.Errorf("sandbox: scrub: %w", ctx.Err())
	}
}

func scrubErr(sc *agent.ScrubResult) error {
	if sc == nil {
		return fmt.Errorf("%w: no scrub result", ErrNotClean)
	}
	if !sc.Clean {
		return fmt.Errorf("%w: %v", ErrNotClean, sc.Problems)
	}
	return nil
}

// remove detaches and removes the container with a detached, bounded
// context: it must go even when the job's context is already done.
func (c *Container) remove(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if c.stream != nil {
		_ = c.stream.Close()
	}
	if err := c.rt.Remove(ctx, c.ID); err != nil {
		c.log.Error().Err(err).Msg("remove container")
	}
	if c.onRemove != nil {
		c.onRemove()
	}
}
