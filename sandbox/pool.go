package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/agent"
)

// Mode is a pool's isolation mode.
type Mode string

const (
	// ModeReuse: a container serves successive jobs of the same pool key,
	// scrubbed and verified between jobs, recycled after MaxJobs jobs or
	// any anomaly (an agent error, an OOM kill, a failed scrub).
	ModeReuse Mode = "reuse"
	// ModeFresh: one container per job, never reused; containers are
	// started ahead of time so latency stays low.
	ModeFresh Mode = "fresh"
)

// Spec says what kind of container a job needs. Equal specs share
// containers; it is the pool key.
type Spec struct {
	Image  string
	Limits ContainerLimits
	// Tenant keeps tenants' containers apart even in reuse mode.
	Tenant string
	// Mode defaults to ModeReuse.
	Mode Mode
	// Volume is a library set's volume (see Pool.Install), mounted
	// read-only at LibsDir; empty for none. Containers with a volume are
	// started on demand only: MinIdle does not apply to them.
	Volume string
}

type poolKey = Spec

func (s Spec) name() string {
	n := fmt.Sprintf("%s-%s", s.Image, formatBytes(s.Limits.MemoryBytes))
	if s.Tenant != "" {
		n += "-" + s.Tenant
	}
	if s.Mode == ModeFresh {
		n += "-fresh"
	}
	if s.Volume != "" {
		n += "-" + strings.TrimPrefix(s.Volume, "sandq-libs-")
	}
	return sanitizeName(n)
}

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Runtime is the container engine. Required.
	Runtime Runtime
	// Owner labels every container; the reconciler of another owner never
	// removes a live owner's containers. Default NewOwnerID().
	Owner string
	// MinIdle containers per pool key are kept started and waiting.
	// Default 1; negative means none.
	MinIdle int
	// MaxTotal bounds the containers per pool key, idle and busy. Default 4.
	MaxTotal int
	// MaxJobs recycles a container after this many jobs. Default 500.
	MaxJobs int
	// StartTimeout bounds creating a container and waiting for its agent.
	// Default 60 s.
	StartTimeout time.Duration
	// OCIRuntime is passed to every ContainerSpec. Default: the engine's.
	OCIRuntime string
	// ReconcileGrace is how long a container of another, dead owner is left
	// alone before it is removed. Default 1 min.
	ReconcileGrace time.Duration
	// Alive, when set, tells the reconciler which other owners are alive
	// (see Reconcile); their containers are never removed. Default: none
	// known, only state and age decide.
	Alive func(ctx context.Context, owner string) (bool, error)
	// ReconcileInterval runs the reconciler this often, and once at start.
	// Default 1 min; negative disables it.
	ReconcileInterval time.Duration
	// LibsIdleTimeout removes an idle container of a library set's pool
	// key (Spec.Volume) after this long unused: there may be many sets,
	// each used now and then. Default 5 min.
	LibsIdleTimeout time.Duration
	// JobUIDs is the inclusive range of uids the pool's containers run
	// their steps as, one per container. Default DefaultJobUIDs.
	JobUIDs [2]int
	// Logger is used for the pool's and the containers' logs. Default: discard.
	Logger zerolog.Logger
}

// WithDefaults returns a copy with zero fields set to their defaults.
func (c PoolConfig) WithDefaults() PoolConfig {
	c.Owner = cmp.Or(c.Owner, NewOwnerID())
	c.MinIdle = cmp.Or(c.MinIdle, 1)
	c.MaxTotal = cmp.Or(c.MaxTotal, 4)
	c.MaxJobs = cmp.Or(c.MaxJobs, 500)
	c.StartTimeout = cmp.Or(c.StartTimeout, 60*time.Second)
	c.ReconcileGrace = cmp.Or(c.ReconcileGrace, time.Minute)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, time.Minute)
	c.LibsIdleTimeout = cmp.Or(c.LibsIdleTimeout, 5*time.Minute)
	if c.JobUIDs == [2]int{} {
		c.JobUIDs = DefaultJobUIDs
	}
	return c
}

func (c PoolConfig) validate() error {
	switch {
	case c.Runtime == nil:
		return errors.New("sandbox: PoolConfig.Runtime is required")
	case c.MaxTotal < 1:
		return fmt.Errorf("sandbox: PoolConfig.MaxTotal = %d, want >= 1", c.MaxTotal)
	case c.MinIdle > c.MaxTotal:
		return fmt.Errorf("sandbox: PoolConfig.MinIdle = %d is above MaxTotal = %d", c.MinIdle, c.MaxTotal)
	case c.MaxJobs < 1:
		return fmt.Errorf("sandbox: PoolConfig.MaxJobs = %d, want >= 1", c.MaxJobs)
	case c.JobUIDs[0] < 1 || c.JobUIDs[1] < c.JobUIDs[0] || c.JobUIDs[1] >= 1<<31-1:
		return fmt.Errorf("sandbox: PoolConfig.JobUIDs = %v, want 1 <= first <= last < 2^31-1", c.JobUIDs)
	}
	return nil
}

// ErrPoolClosed is returned by Acquire after Close.
var ErrPoolClosed = errors.New("sandbox: pool closed")

// Pool keeps warm containers per Spec and hands them to jobs.
type Pool struct {
	cfg PoolConfig
	log zerolog.Logger
	seq atomic.Uint64

	ctx    context.Context // background work; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	subs   map[poolKey]*subpool
	all    map[*Container]struct{}

	// Library sets (libs.go): volumes known to hold an installed set, and
	// the installs under way.
	libsReady map[string]string
	installs  map[string]*installCall

	// uids holds the job uids of the pool's containers; nextUID is where
	// the search for a free one starts.
	uids    map[int]bool
	nextUID int

	// noOOMPin is set once the engine refused OOMPinCap.
	noOOMPin atomic.Bool
}

type subpool struct {
	key      poolKey
	idle     []*Container
	total    int // idle, busy and starting
	starting int
	changed  chan struct{} // closed and replaced whenever idle or total changes
	failedAt time.Time     // last failed start; refill backs off
	lastErr  error
}

// NewPool returns a pool. It starts the reconciler unless disabled; no
// container is started until the first Acquire or Warm for a Spec.
func NewPool(cfg PoolConfig) (*Pool, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{cfg: cfg, ctx: ctx, cancel: cancel,
		log:  cfg.Logger.With().Str("owner", cfg.Owner).Logger(),
		subs: map[poolKey]*subpool{}, all: map[*Container]struct{}{},
		libsReady: map[string]string{}, installs: map[string]*installCall{}, uids: map[int]bool{}}
	// Start at a point that depends on the owner, so that the workers
	// sharing an engine draw mostly different uids.
	h := fnv.New32a()
	h.Write([]byte(cfg.Owner))
	p.nextUID = int(h.Sum32() % uint32(cfg.JobUIDs[1]-cfg.JobUIDs[0]+1))
	if cfg.ReconcileInterval > 0 {
		p.wg.Add(1)
		go p.reconcileLoop()
	}
	p.wg.Add(1)
	go p.sweepLoop()
	return p, nil
}

// Owner returns the owner ID on this pool's containers.
func (p *Pool) Owner() string { return p.cfg.Owner }

// Runtime returns the pool's container engine.
func (p *Pool) Runtime() Runtime { return p.cfg.Runtime }

// ImageID returns the ID of a local image on the pool's engine.
func (p *Pool) ImageID(ctx context.Context, image string) (string, error) {
	return p.cfg.Runtime.ImageID(ctx, image)
}

func (p *Pool) sub(key poolKey) *subpool {
	sp := p.subs[key]
	if sp == nil {
		sp = &subpool{key: key, changed: make(chan struct{})}
		p.subs[key] = sp
	}
	return sp
}

func (sp *subpool) notify() {
	close(sp.changed)
	sp.changed = make(chan struct{})
}

func normalize(spec Spec) Spec {
	spec.Mode = cmp.Or(spec.Mode, ModeReuse)
	return spec
}

// Warm starts MinIdle containers for spec in the background.
func (p *Pool) Warm(spec Spec) {
	spec = normalize(spec)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.refillLocked(p.sub(spec))
	}
}

// Acquire returns a clean container for spec, starting one if none is idle
// and the pool key is below MaxTotal, else waiting for one.
func (p *Pool) Acquire(ctx context.Context, spec Spec) (*Container, error) {
	spec = normalize(spec)
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		sp := p.sub(spec)
		if n := len(sp.idle); n > 0 {
			c := sp.idle[n-1]
			sp.idle = sp.idle[:n-1]
			if c.gone() { // died while idle (engine restart, OOM of the agent)
				delete(p.all, c)
				sp.total--
				p.refillLocked(sp)
				p.mu.Unlock()
				c.log.Warn().Err(c.deadErr).Msg("idle container died; discarded")
				c.remove(ctx)
				continue
			}
			p.refillLocked(sp)
			p.mu.Unlock()
			return c, nil
		}
		if sp.total < p.cfg.MaxTotal {
			sp.total++
			p.mu.Unlock()
			c, err := p.start(ctx, spec)
			p.mu.Lock()
			if err != nil {
				sp.total--
				sp.notify()
				p.mu.Unlock()
				return nil, err
			}
			p.refillLocked(sp)
			p.mu.Unlock()
			return c, nil
		}
		wait := sp.changed
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("sandbox: acquire: %w", context.Cause(ctx))
		}
	}
}

// takeUID reserves a job uid no other container of the pool runs as.
// Every uid in use means more containers than uids: they share.
func (p *Pool) takeUID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	lo, n := p.cfg.JobUIDs[0], p.cfg.JobUIDs[1]-p.cfg.JobUIDs[0]+1
	for range n {
		uid := lo + p.nextUID
		p.nextUID = (p.nextUID + 1) % n
		if !p.uids[uid] {
			p.uids[uid] = true
			return uid
		}
	}
	return lo + p.nextUID
}

// PinsOOM reports whether the pool's containers get OOMPinCap: false once
// the engine has refused it.
func (p *Pool) PinsOOM() bool { return !p.noOOMPin.Load() }

// capsRefused reports whether a start failed because the OCI runtime could
// not apply the container's capabilities.
func capsRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "apply caps") || strings.Contains(msg, "capabilities") && strings.Contains(msg, "operation not permitted")
}

// releaseUID frees a container's uid for another container.
func (p *Pool) releaseUID(uid int) {
	p.mu.Lock()
	delete(p.uids, uid)
	p.mu.Unlock()
}

func (p *Pool) start(ctx context.Context, spec Spec) (*Container, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	name := spec.name()
	uid := p.takeUID()
	cs := ContainerSpec{
		Name:  containerName(p.cfg.Owner, name, p.seq.Add(1)),
		Image: spec.Image,
		Labels: map[string]string{
			LabelManaged: "true", LabelOwner: p.cfg.Owner, LabelPool: name,
			LabelBackend: p.cfg.Runtime.Name(),
		},
		Limits:     spec.Limits,
		OCIRuntime: p.cfg.OCIRuntime,
		Volume:     spec.Volume,
		JobUID:     uid,
		PinOOM:     !p.noOOMPin.Load(),
	}
	c, err := startContainer(ctx, p.cfg.Runtime, cs, p.log)
	if err != nil && cs.PinOOM && capsRefused(err) {
		// The engine's own root lacks the capability (a nested container):
		// do without, from now on.
		p.noOOMPin.Store(true)
		p.log.Warn().Err(err).Msg("the engine cannot grant CAP_SYS_RESOURCE: steps' OOM scores are raised but not pinned")
		cs.PinOOM = false
		c, err = startContainer(ctx, p.cfg.Runtime, cs, p.log)
	}
	if err != nil {
		p.releaseUID(uid)
		return nil, err
	}
	if cs.PinOOM && !c.ready.OOMProtected {
		// Granted without an error but not applied (Podman drops what
		// its own root lacks): do without, from now on.
		p.noOOMPin.Store(true)
	}
	c.key = spec
	c.onRemove = func() { p.releaseUID(uid) }
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.remove(ctx)
		return nil, ErrPoolClosed
	}
	p.all[c] = struct{}{}
	p.mu.Unlock()
	return c, nil
}

// refillLocked starts containers in the background until MinIdle are idle
// or starting. After a failed start it waits a second before trying again.
func (p *Pool) refillLocked(sp *subpool) {
	if time.Since(sp.failedAt) < time.Second {
		return
	}
	minIdle := p.cfg.MinIdle
	if sp.key.Volume != "" {
		minIdle = 0
	}
	for len(sp.idle)+sp.starting < minIdle && sp.total < p.cfg.MaxTotal {
		sp.total++
		sp.starting++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			c, err := p.start(p.ctx, sp.key)
			p.mu.Lock()
			defer p.mu.Unlock()
			sp.starting--
			if err != nil {
				sp.total--
				if !errors.Is(err, ErrPoolClosed) && p.ctx.Err() == nil {
					sp.failedAt, sp.lastErr = time.Now(), err
					p.log.Error().Err(err).Str("pool", sp.key.name()).Msg("start container")
				}
			} else {
				sp.idle = append(sp.idle, c)
			}
			sp.notify()
		}()
	}
}

// sweepLoop removes idle containers of library-set pool keys that have
// not been used for LibsIdleTimeout.
func (p *Pool) sweepLoop() {
	defer p.wg.Done()
	t := time.NewTicker(max(p.cfg.LibsIdleTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		var old []*Container
		p.mu.Lock()
		for _, sp := range p.subs {
			if sp.key.Volume == "" {
				continue
			}
			keep := sp.idle[:0]
			for _, c := range sp.idle {
				if time.Since(c.idleSince) > p.cfg.LibsIdleTimeout {
					old = append(old, c)
					delete(p.all, c)
					sp.total--
				} else {
					keep = append(keep, c)
				}
			}
			if len(keep) != len(sp.idle) {
				sp.idle = keep
				sp.notify()
			}
		}
		p.mu.Unlock()
		for _, c := range old {
			c.remove(p.ctx)
		}
	}
}

// Release returns a container after a job. healthy is false after any
// anomaly; the container is then removed. A healthy container in reuse mode
// goes back to the idle list once its agent has proved it clean (the scrub
// runs in the background, so the caller is not delayed by it).
func (p *Pool) Release(c *Container, healthy bool) {
	c.jobs++
	keep := healthy && c.key.Mode == ModeReuse && c.jobs < p.cfg.MaxJobs
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if keep {
			ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
			err := c.waitScrub(ctx)
			cancel()
			if err != nil {
				c.log.Warn().Err(err).Msg("container discarded: scrub failed")
				keep = false
			}
		}
		p.mu.Lock()
		sp := p.sub(c.key)
		if keep && !p.closed {
			c.idleSince = time.Now()
			sp.idle = append(sp.idle, c)
			sp.notify()
			p.mu.Unlock()
			return
		}
		delete(p.all, c)
		p.mu.Unlock()
		c.remove(p.ctx)
		p.mu.Lock()
		sp.total--
		sp.notify()
		if !p.closed {
			p.refillLocked(sp)
		}
		p.mu.Unlock()
	}()
}

// Run acquires a container for spec, runs req, and releases the container.
// The error is an infrastructure fault (no container, agent lost); what the
// program did, including timeouts and OOM kills, is in the result.
func (p *Pool) Run(ctx context.Context, spec Spec, req *agent.RunRequest) (agent.RunResult, error) {
	spec = normalize(spec)
	c, err := p.Acquire(ctx, spec)
	if err != nil {
		return agent.RunResult{}, err
	}
	req.ScrubAfter = spec.Mode == ModeReuse
	res, err := c.Run(ctx, req)
	if errors.Is(err, ErrAgentGone) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if st, serr := p.cfg.Runtime.State(sctx, c.ID); serr == nil && st.OOMKilled {
			err = fmt.Errorf("%w: %w", ErrSandboxOOM, err)
		}
		cancel()
	}
	healthy := err == nil
	for _, st := range res.Steps {
		if st.OOMKilled {
			healthy = false
		}
	}
	p.Release(c, healthy)
	return res, err
}

// RunOnce runs req in a container of spec's kind made for it alone, and
// removes the container after: no pool key is made and nothing is kept
// warm. It suits one-off commands (reading a toolchain's version).
func (p *Pool) RunOnce(ctx context.Context, spec Spec, req *agent.RunRequest) (agent.RunResult, error) {
	spec = normalize(spec)
	c, err := p.start(ctx, spec)
	if err != nil {
		return agent.RunResult{}, err
	}
	defer func() {
		p.mu.Lock()
		delete(p.all, c)
		p.mu.Unlock()
		c.remove(ctx)
	}()
	req.ScrubAfter = false
	return c.Run(ctx, req)
}

// Stats is a snapshot of one pool key.
type Stats struct {
	Pool  string
	Idle  int
	Total int
}

// Stats returns a snapshot per pool key.
func (p *Pool) Stats() []Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Stats, 0, len(p.subs))
	for k, sp := range p.subs {
		out = append(out, Stats{Pool: k.name(), Idle: len(sp.idle), Total: sp.total})
	}
	return out
}

// Close stops background work and removes every container the pool holds,
// busy ones included. It waits for removals until ctx ends.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	all := make([]*Container, 0, len(p.all))
	for c := range p.all {
		all = append(all, c)
	}
	p.all = map[*Container]struct{}{}
	for _, sp := range p.subs {
		sp.idle = nil
		sp.notify()
	}
	p.mu.Unlock()

	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() { defer wg.Done(); c.remove(ctx) }()
	}
	wg.Wait()
	p.cancel()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("sandbox: close pool: %w", ctx.Err())
	}
	// Containers that were starting when Close began are removed by start;
	// a last sweep catches any that raced past it.
	left, err := p.cfg.Runtime.List(ctx, map[string]string{LabelOwner: p.cfg.Owner})
	if err != nil {
		return err
	}
	for _, c := range left {
		_ = p.cfg.Runtime.Remove(ctx, c.ID)
	}
	return nil
}
