package sandbox

import (
	"context"
	"errors"
	"fmt"
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
	pending map[uint64]chan agent.Response
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
		pending: map[uint64]chan agent.Response{}, dead: make(chan struct{}),
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

func (c *Container) register(id uint64, n int) chan agent.Response {
	ch := make(chan agent.Response, n)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	return ch
}

func (c *Container) unregister(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

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
		ch := c.pending[resp.ID]
		c.mu.Unlock()
		if ch == nil {
			c.log.Warn().Uint64("request", resp.ID).Str("op", resp.Op).Msg("unexpected agent message")
			continue
		}
		select {
		case ch <- resp:
		default:
			c.log.Warn().Uint64("request", resp.ID).Str("op", resp.Op).Msg("agent message dropped")
		}
	}
}

// Grace is added to a run's timeouts before the worker gives up on the
// agent (the backstop), and bounds how long a cancel may take.
const Grace = 5 * time.Second

// Run sends one job to the agent and waits for its result. When ctx ends,
// the agent is told to cancel and the (canceled) result is still returned.
// An error means the container is broken and must be discarded.
func (c *Container) Run(ctx context.Context, req *agent.RunRequest) (agent.RunResult, error) {
	id := c.nextID.Add(1)
	ch := c.register(id, 2)
	if err := c.enc.Encode(agent.Request{ID: id, Op: agent.OpRun, Run: req}); err != nil {
		c.unregister(id)
		return agent.RunResult{}, fmt.Errorf("%w: send: %v", ErrAgentGone, err)
	}
	var budget time.Duration
	for _, st := range req.Steps {
		budget += max(st.Timeout, time.Second)
	}
	backstop := time.NewTimer(budget + Grace)
	defer backstop.Stop()
	ctxDone := ctx.Done()
	for {
		select {
		case resp := <-ch:
			switch {
			case resp.Op == agent.OpRunResult && resp.Run != nil:
				if req.ScrubAfter {
					c.scrubCh, c.scrubID = ch, id
				} else {
					c.unregister(id)
				}
				return *resp.Run, nil
			case resp.Op == agent.OpError:
				c.unregister(id)
				return agent.RunResult{}, fmt.Errorf("sandbox: agent refused run: %s", resp.Error)
			}
		case <-ctxDone:
			ctxDone = nil
			_ = c.enc.Encode(agent.Request{ID: id, Op: agent.OpCancel})
			backstop.Reset(Grace)
		case <-c.dead:
			c.unregister(id)
			return agent.RunResult{}, c.deadErr
		case <-backstop.C:
			c.unregister(id)
			return agent.RunResult{}, ErrAgentUnresponsive
		}
	}
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
