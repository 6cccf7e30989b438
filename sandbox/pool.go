package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
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
	// Network is the canonical network policy of the jobs the container
	// serves (jobs.NetworkPolicy.Key), "" for none. The container itself
	// has no network either way (a run reaches its policy's destinations
	// through the egress relay, WithEgress); the policy is part of the key
	// so that a container never serves jobs of two policies.
	Network string
	// Agent, for a foreign image (Pool.ForeignImage; Image is then its
	// ID), is the agent volume its containers run the agent from.
	Agent string
}

// onDemand reports whether containers of the key are started only when
// a job asks for one (no MinIdle).
func (s Spec) onDemand() bool { return s.Volume != "" }

type poolKey = Spec

// uniqueName is name with a hash of the whole key: two keys that differ in
// any field (a limit, the tenant) have two names, as metrics need.
func (s Spec) uniqueName() string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%+v", s)
	return fmt.Sprintf("%s-%08x", s.name(), h.Sum32())
}

func (s Spec) name() string {
	img := s.Image
	if s.Agent != "" {
		img = "image-" + shortID(strings.TrimPrefix(img, "sha256:"))
	}
	n := fmt.Sprintf("%s-%s", img, formatBytes(s.Limits.MemoryBytes))
	if s.Tenant != "" {
		n += "-" + s.Tenant
	}
	if s.Mode == ModeFresh {
		n += "-fresh"
	}
	if s.Volume != "" {
		n += "-" + strings.TrimPrefix(s.Volume, "sandq-libs-")
	}
	if s.Network != "" {
		n += "-net"
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
	// MinIdle containers are kept started and waiting for each warm pool
	// key (Warm) and each key used within IdleTimeout. Default 1;
	// negative means none.
	MinIdle int
	// MaxTotal bounds the containers per pool key, idle and busy. Default 4.
	MaxTotal int
	// MaxContainers bounds the pool's containers over every key, idle,
	// busy and starting, install containers included: a job that needs a
	// container of a new key when the pool is full evicts the idle
	// container unused longest, or waits. Default 2 × MaxTotal + 2.
	MaxContainers int
	// IdleTimeout removes an idle container that has not been used for
	// this long, beyond the MinIdle of a warm key; a key with no container
	// left is forgotten. Default 2 min.
	IdleTimeout time.Duration
	// MaxJobs recycles a container after this many jobs. Default 500.
	MaxJobs int
	// PrestartHold is how long an idle container keeps the interpreter it
	// started for its next job (Python's fork server, ~3 MB): past it, the
	// memory goes back and the next job starts cold. Default
	// agent.DefaultPrestartHold (1 min); negative keeps it.
	PrestartHold time.Duration
	// NoOOMPin starts containers without OOMPinCap from the first: the
	// engine is known to refuse it (another pool's probe found so). Else
	// the pool learns it from the first refusal, a failed start.
	NoOOMPin bool
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
	// JobUIDs is the inclusive range of uids the pool's containers run
	// their steps as, one per container. Default DefaultJobUIDs.
	JobUIDs [2]int
	// Logger is used for the pool's and the containers' logs. Default: discard.
	Logger zerolog.Logger
	// Name tells this pool's containers from those of the owner's other
	// pools (container names must be unique on the engine), such as
	// "sessions". Default none.
	Name string
	// PinCPUs are the host CPUs the pool pins its containers to, each
	// container of at most one CPU's quota to the one of them running the
	// fewest of the pool's containers (ContainerSpec.CPUSet). Nil: the
	// CPUs this process may run on (the engine is taken to be local);
	// empty and non-nil: no pinning.
	//
	// Why: the tail. Each container is a CPU cgroup of its own; with more
	// busy containers than CPUs, the scheduler splits each group's weight
	// across CPUs by its recent load, and a program just woken in a group
	// that ran on another CPU waits behind the others: print(1) jobs at
	// concurrency 4 on 2 cores had a p99 of 200-300 ms, their schedstat
	// showing 100-290 ms runnable but not running, for 10 ms of CPU.
	// Pinned, the same run's p99 is that of bare host processes.
	PinCPUs []int
	// ObserveScrub, if set, gets how long each scrub between two jobs took
	// (after the job's result, off its path) and whether the container was
	// kept.
	ObserveScrub func(d time.Duration, kept bool)
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
	c.MaxContainers = cmp.Or(c.MaxContainers, 2*c.MaxTotal+2)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 2*time.Minute)
	if c.JobUIDs == [2]int{} {
		c.JobUIDs = DefaultJobUIDs
	}
	if c.PinCPUs == nil {
		c.PinCPUs = allowedCPUs()
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
	case c.MaxContainers < c.MaxTotal:
		return fmt.Errorf("sandbox: PoolConfig.MaxContainers = %d is below MaxTotal = %d", c.MaxContainers, c.MaxTotal)
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
	// count is the containers of every key, idle, busy and starting, and
	// the install containers: at most MaxContainers.
	count int
	// changed is closed and replaced whenever a container is counted out
	// or goes idle, for acquirers waiting on the cap.
	changed chan struct{}

	// Library sets (libs.go): volumes known to hold an installed set, and
	// the installs under way.
	libsReady map[string]string
	installs  map[string]*installCall

	// uids holds the job uids of the pool's containers; nextUID is where
	// the search for a free one starts.
	uids    map[int]bool
	cpus    map[int]int // pinned containers per CPU
	nextUID int

	// noOOMPin is set once the engine refused OOMPinCap.
	noOOMPin atomic.Bool

	// foreign: the foreign images checked, the agent volumes filled
	// (environment.go).
	foreign foreignState
}

type subpool struct {
	key      poolKey
	idle     []*Container
	total    int // idle, busy and starting
	starting int
	failedAt time.Time // last failed start; refill backs off
	lastErr  error
	warm     bool      // declared by Warm: keeps MinIdle for good
	lastUsed time.Time // last Acquire
	name     string    // unique among the pool's keys, for metrics
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
		subs: map[poolKey]*subpool{}, all: map[*Container]struct{}{}, changed: make(chan struct{}),
		libsReady: map[string]string{}, installs: map[string]*installCall{}, uids: map[int]bool{}}
	// Start at a point that depends on the owner, so that the workers
	// sharing an engine draw mostly different uids.
	h := fnv.New32a()
	h.Write([]byte(cfg.Owner))
	p.nextUID = int(h.Sum32() % uint32(cfg.JobUIDs[1]-cfg.JobUIDs[0]+1))
	p.noOOMPin.Store(cfg.NoOOMPin)
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
		sp = &subpool{key: key, name: key.uniqueName()}
		// Unique for sure, hash collision or not.
		for base, n := sp.name, 2; slices.ContainsFunc(slices.Collect(maps.Values(p.subs)), func(o *subpool) bool { return o.name == sp.name }); n++ {
			sp.name = fmt.Sprintf("%s-%d", base, n)
		}
		p.subs[key] = sp
	}
	return sp
}

// notify wakes the acquirers waiting for a container.
func (p *Pool) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// countOut forgets a container of sp that is gone (or never started).
func (p *Pool) countOutLocked(sp *subpool) {
	sp.total--
	p.count--
	p.notifyLocked()
}

// reserve counts a container outside the keys (an install or one-off
// container) under MaxContainers, evicting an idle container or waiting
// for room; release gives the slot back.
func (p *Pool) reserve(ctx context.Context) error {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return ErrPoolClosed
		}
		if room, ok := p.roomLocked(nil); ok {
			p.mu.Unlock()
			return p.awaitRoom(ctx, room, func() { p.count--; p.notifyLocked() })
		}
		wait := p.changed
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("sandbox: wait for room: %w", context.Cause(ctx))
		}
	}
}

func (p *Pool) release() {
	p.mu.Lock()
	p.count--
	p.notifyLocked()
	p.mu.Unlock()
}

// closedChan is a closed channel: room available at once.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// roomLocked counts one more container under MaxContainers: at once when
// the pool is below the cap, else by evicting the idle container unused
// longest of any key but keep (first of the keys not declared warm, then
// of the warm ones, which the sweep refills once there is room) and taking
// over its place in the count. The new container may start only once room
// is closed: the evicted one is then gone from the engine, so the engine
// never holds more than MaxContainers of the pool's. ok is false when
// there is no room (every container busy).
func (p *Pool) roomLocked(keep *subpool) (room <-chan struct{}, ok bool) {
	if p.count < p.cfg.MaxContainers {
		p.count++
		return closedChan, true
	}
	var victim *subpool
	var at int
	for _, warm := range []bool{false, true} {
		for _, sp := range p.subs {
			if sp == keep || sp.warm != warm {
				continue
			}
			for i, c := range sp.idle {
				if victim == nil || c.idleSince.Before(victim.idle[at].idleSince) {
					victim, at = sp, i
				}
			}
		}
		if victim != nil {
			break
		}
	}
	if victim == nil {
		return nil, false
	}
	c := victim.idle[at]
	victim.idle = slices.Delete(victim.idle, at, at+1)
	delete(p.all, c)
	victim.total-- // its place in p.count passes to the new container
	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(done)
		c.log.Debug().Str("pool", victim.name).Msg("idle container evicted: the pool is at its container cap")
		c.remove(p.ctx)
	}()
	return done, true
}

// awaitRoom waits for room from roomLocked. If ctx ends first, the place
// is given back (by undo, under the lock) once the evicted container is
// gone, and the error returned.
func (p *Pool) awaitRoom(ctx context.Context, room <-chan struct{}, undo func()) error {
	select {
	case <-room:
		return nil
	case <-ctx.Done():
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			<-room
			p.mu.Lock()
			undo()
			p.mu.Unlock()
		}()
		return fmt.Errorf("sandbox: wait for room: %w", context.Cause(ctx))
	}
}

func normalize(spec Spec) Spec {
	spec.Mode = cmp.Or(spec.Mode, ModeReuse)
	return spec
}

// Warm declares spec a warm pool key: MinIdle containers of it are kept
// started, for good, and the first are started now, in the background.
func (p *Pool) Warm(spec Spec) {
	spec = normalize(spec)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		sp := p.sub(spec)
		sp.warm = true
		p.refillLocked(sp)
	}
}

// Acquire returns a clean container for spec: an idle one, or a new one if
// the key is below MaxTotal and the pool below MaxContainers (evicting
// another key's idle container if need be), else it waits.
func (p *Pool) Acquire(ctx context.Context, spec Spec) (*Container, error) {
	spec = normalize(spec)
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		sp := p.sub(spec)
		sp.lastUsed = time.Now()
		if n := len(sp.idle); n > 0 {
			i := pickIdle(sp.idle, time.Now())
			c := sp.idle[i]
			sp.idle = slices.Delete(sp.idle, i, i+1)
			if c.gone() { // died while idle (engine restart, OOM of the agent)
				delete(p.all, c)
				p.mu.Unlock()
				c.log.Warn().Err(c.deadErr).Msg("idle container died; discarded")
				c.remove(ctx)
				p.mu.Lock()
				p.countOutLocked(sp)
				p.refillLocked(sp)
				p.mu.Unlock()
				continue
			}
			p.refillLocked(sp)
			p.mu.Unlock()
			return c, nil
		}
		if sp.total >= p.cfg.MaxTotal {
			goto wait
		}
		if room, ok := p.roomLocked(sp); ok {
			sp.total++
			p.mu.Unlock()
			if err := p.awaitRoom(ctx, room, func() { p.countOutLocked(sp) }); err != nil {
				return nil, err
			}
			c, err := p.start(ctx, spec, sp.name)
			p.mu.Lock()
			if err != nil {
				p.countOutLocked(sp)
				p.mu.Unlock()
				return nil, err
			}
			p.refillLocked(sp)
			p.mu.Unlock()
			return c, nil
		}
	wait:
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
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

// settleTime is how long a container takes, after its scrub, to be fully
// ready: the agent starts the next job's interpreter then (agent prestart),
// and a job that comes sooner waits for the rest of its start-up.
const settleTime = 25 * time.Millisecond

// pickIdle chooses among idle containers (oldest first): the most recently
// used one that has settled, so a lightly loaded key keeps using few
// containers and the rest time out; when none has, the one idle longest,
// the nearest to settled.
func pickIdle(idle []*Container, now time.Time) int {
	for i := len(idle) - 1; i >= 0; i-- {
		if now.Sub(idle[i].idleSince) >= settleTime {
			return i
		}
	}
	return 0
}

// takeCPU picks the CPU to pin a container of limits l to: the pinning
// CPU running the fewest of the pool's containers. -1: not pinned (no
// pinning, or a quota of more than one CPU, or none).
func (p *Pool) takeCPU(l ContainerLimits) int {
	if len(p.cfg.PinCPUs) == 0 || l.NanoCPUs <= 0 || l.NanoCPUs > 1e9 {
		return -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cpus == nil {
		p.cpus = map[int]int{}
	}
	best := p.cfg.PinCPUs[0]
	for _, cpu := range p.cfg.PinCPUs {
		if p.cpus[cpu] < p.cpus[best] {
			best = cpu
		}
	}
	p.cpus[best]++
	return best
}

func (p *Pool) releaseCPU(cpu int) {
	if cpu < 0 {
		return
	}
	p.mu.Lock()
	p.cpus[cpu]--
	p.mu.Unlock()
}

// releaseUID frees a container's uid for another container.
func (p *Pool) releaseUID(uid int) {
	p.mu.Lock()
	delete(p.uids, uid)
	p.mu.Unlock()
}

// start starts a container of spec; key is its key's unique name, for the
// pool label.
func (p *Pool) start(ctx context.Context, spec Spec, key string) (*Container, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	name := spec.name()
	if p.cfg.Name != "" {
		name = p.cfg.Name + "-" + name
	}
	uid := p.takeUID()
	cpu := p.takeCPU(spec.Limits)
	cs := ContainerSpec{
		Name:  containerName(p.cfg.Owner, name, p.seq.Add(1)),
		Image: spec.Image,
		Labels: map[string]string{
			LabelManaged: "true", LabelOwner: p.cfg.Owner, LabelPool: key,
			LabelBackend: p.cfg.Runtime.Name(),
		},
		Limits:       spec.Limits,
		OCIRuntime:   p.cfg.OCIRuntime,
		Volume:       spec.Volume,
		Agent:        spec.Agent,
		JobUID:       uid,
		PrestartHold: p.cfg.PrestartHold,
		PinOOM:       !p.noOOMPin.Load(),
	}
	if cpu >= 0 {
		cs.CPUSet = strconv.Itoa(cpu)
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
		p.releaseCPU(cpu)
		if spec.Agent != "" {
			// The agent volume may be gone: check it again next time.
			p.forgetAgent(spec.Agent)
			err = fmt.Errorf("image %s: %w", spec.Image, err)
		}
		return nil, err
	}
	if cs.PinOOM && !c.ready.OOMProtected {
		// Granted without an error but not applied (Podman drops what
		// its own root lacks): do without, from now on.
		p.noOOMPin.Store(true)
	}
	c.key = spec
	c.onRemove = func() { p.releaseUID(uid); p.releaseCPU(cpu) }
	if spec.Volume != "" && !setName.MatchString(c.ready.LibsLink) {
		// The set's volume was removed since it was found installed, and
		// the engine made an empty one of the name: remove both, so the
		// next Install installs the set again.
		c.remove(ctx)
		p.ForgetLibs(spec.Volume)
		if err := p.cfg.Runtime.RemoveVolume(ctx, spec.Volume, false); err != nil {
			p.log.Debug().Err(err).Str("volume", spec.Volume).Msg("empty library volume kept")
		}
		return nil, fmt.Errorf("%w: %s", ErrLibsGone, spec.Volume)
	}
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
// or starting, for a warm key or one used within IdleTimeout, as long as
// the pool is below MaxContainers (a refill never evicts). After a failed
// start it waits a second before trying again.
func (p *Pool) refillLocked(sp *subpool) {
	if time.Since(sp.failedAt) < time.Second {
		return
	}
	if sp.key.onDemand() || !(sp.warm || time.Since(sp.lastUsed) < p.cfg.IdleTimeout) {
		return
	}
	for len(sp.idle)+sp.starting < p.cfg.MinIdle && sp.total < p.cfg.MaxTotal && p.count < p.cfg.MaxContainers {
		sp.total++
		sp.starting++
		p.count++
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			c, err := p.start(p.ctx, sp.key, sp.name)
			p.mu.Lock()
			defer p.mu.Unlock()
			sp.starting--
			if err != nil {
				p.countOutLocked(sp)
				if !errors.Is(err, ErrPoolClosed) && p.ctx.Err() == nil {
					sp.failedAt, sp.lastErr = time.Now(), err
					p.log.Error().Err(err).Str("pool", sp.name).Msg("start container")
				}
				return
			}
			c.idleSince = time.Now()
			sp.idle = append(sp.idle, c)
			p.notifyLocked()
		}()
	}
}

// sweepLoop removes idle containers unused for IdleTimeout (a warm key
// keeps MinIdle of them), forgets keys with no container left, and refills
// the warm keys.
func (p *Pool) sweepLoop() {
	defer p.wg.Done()
	t := time.NewTicker(min(max(p.cfg.IdleTimeout/4, 10*time.Millisecond), 10*time.Second))
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.sweep()
	}
}

// staleIdle is an idle container taken off its subpool's list, to be
// removed.
type staleIdle struct {
	c  *Container
	sp *subpool
}

// removeStaleLocked removes old's containers, already off their idle
// lists and out of p.all, from the engine (without p.mu, which it
// releases meanwhile), then counts them out and forgets the subpools left
// empty and not warm. Called and returns with p.mu held.
func (p *Pool) removeStaleLocked(old []staleIdle) {
	p.mu.Unlock()
	// Counted out only once gone from the engine.
	for _, o := range old {
		o.c.remove(p.ctx)
	}
	p.mu.Lock()
	for _, o := range old {
		p.countOutLocked(o.sp)
	}
	for key, sp := range p.subs {
		if sp.total == 0 && !sp.warm {
			delete(p.subs, key)
		}
	}
}

func (p *Pool) sweep() {
	var old []staleIdle
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sp := range p.subs {
		keep := 0
		if sp.warm && !sp.key.onDemand() {
			keep = p.cfg.MinIdle
		}
		// The newest idle containers are at the end: the oldest go.
		var kept []*Container
		for i, c := range sp.idle {
			if len(sp.idle)-i > keep && time.Since(c.idleSince) > p.cfg.IdleTimeout {
				old = append(old, staleIdle{c, sp})
				delete(p.all, c)
			} else {
				kept = append(kept, c)
			}
		}
		sp.idle = kept
	}
	p.removeStaleLocked(old)
	// A warm key whose containers were evicted gets them back once there
	// is room.
	for _, sp := range p.subs {
		if sp.warm && !p.closed {
			p.refillLocked(sp)
		}
	}
}

// Release returns a container after a job. healthy is false after any
// anomaly; the container is then removed. A healthy container in reuse mode
// goes back to the idle list once its agent has proved it clean (the scrub
// runs in the background, so the caller is not delayed by it).
func (p *Pool) Release(c *Container, healthy bool) { p.releaseWith(c, healthy, nil) }

// releaseWith is Release, with scrubbed (if set) told of the scrub.
func (p *Pool) releaseWith(c *Container, healthy bool, scrubbed func(time.Duration, bool)) {
	c.jobs++
	keep := healthy && c.key.Mode == ModeReuse && c.jobs < p.cfg.MaxJobs
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if keep {
			ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
			start := time.Now()
			err := c.waitScrub(ctx)
			cancel()
			if err != nil {
				c.log.Warn().Err(err).Msg("container discarded: scrub failed")
				keep = false
			}
			if p.cfg.ObserveScrub != nil {
				p.cfg.ObserveScrub(time.Since(start), keep)
			}
			if scrubbed != nil {
				scrubbed(time.Since(start), keep)
			}
		}
		p.mu.Lock()
		sp := p.sub(c.key)
		if keep && !p.closed {
			c.idleSince = time.Now()
			sp.idle = append(sp.idle, c)
			p.notifyLocked()
			p.mu.Unlock()
			return
		}
		delete(p.all, c)
		p.mu.Unlock()
		c.remove(p.ctx)
		p.mu.Lock()
		p.countOutLocked(sp)
		if !p.closed {
			p.refillLocked(sp)
		}
		p.mu.Unlock()
	}()
}

// Run acquires a container for spec, runs req, and releases the container.
// The error is an infrastructure fault (no container, agent lost); what the
// program did, including timeouts and OOM kills, is in the result.
func (p *Pool) Run(ctx context.Context, spec Spec, req *agent.RunRequest, opts ...RunOption) (agent.RunResult, error) {
	var o runOptions
	for _, f := range opts {
		f(&o)
	}
	phase := func(string, time.Duration) {}
	if o.phase != nil {
		phase = o.phase
	}
	spec = normalize(spec)
	start := time.Now()
	c, err := p.Acquire(ctx, spec)
	if err != nil {
		return agent.RunResult{}, err
	}
	phase("acquire", time.Since(start))
	req.ScrubAfter = spec.Mode == ModeReuse
	start = time.Now()
	res, err := c.Run(ctx, req, opts...)
	phase("agent", time.Since(start))
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
	p.releaseWith(c, healthy, o.scrub)
	return res, err
}

// RunFunc sends one request to a container's agent and waits for its
// result (Pool.RunSeq).
type RunFunc func(ctx context.Context, req *agent.RunRequest) (agent.RunResult, error)

// RunSeq acquires a container for spec and hands fn a RunFunc that runs
// requests in it, one after another, the container's state carried from
// one to the next (a judged job: the compile, then each test case); then
// the container is released, scrubbed (reuse mode) or removed. fn's error
// is returned; an error of the RunFunc is an infrastructure fault, and the
// container is discarded.
func (p *Pool) RunSeq(ctx context.Context, spec Spec, fn func(run RunFunc) error, opts ...RunOption) error {
	spec = normalize(spec)
	c, err := p.Acquire(ctx, spec)
	if err != nil {
		return err
	}
	healthy, broken := true, false
	run := func(ctx context.Context, req *agent.RunRequest) (agent.RunResult, error) {
		if broken {
			return agent.RunResult{}, fmt.Errorf("%w: an earlier request failed", ErrAgentGone)
		}
		req.ScrubAfter = false // the scrub comes at the release
		res, err := c.Run(ctx, req, opts...)
		if err != nil {
			healthy, broken = false, true
			if errors.Is(err, ErrAgentGone) {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				if st, serr := p.cfg.Runtime.State(sctx, c.ID); serr == nil && st.OOMKilled {
					err = fmt.Errorf("%w: %w", ErrSandboxOOM, err)
				}
				cancel()
			}
		}
		for _, st := range res.Steps {
			if st.OOMKilled {
				healthy = false // discarded after, as Run does; the next request may still run
			}
		}
		return res, err
	}
	err = fn(run)
	p.Release(c, healthy)
	return err
}

// RunOnce runs req in a container of spec's kind made for it alone, and
// removes the container after: no pool key is made and nothing is kept
// warm. It suits one-off commands (reading a toolchain's version).
func (p *Pool) RunOnce(ctx context.Context, spec Spec, req *agent.RunRequest) (agent.RunResult, error) {
	spec = normalize(spec)
	if err := p.reserve(ctx); err != nil {
		return agent.RunResult{}, err
	}
	defer p.release()
	c, err := p.start(ctx, spec, spec.uniqueName()+"-once")
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

// Protections are what the engine applied to a container, as its agent
// reports them.
type Protections struct {
	// Seccomp: sandq's profile is in force (a container without it is
	// refused: ErrNoSeccomp).
	Seccomp bool
	// OOMPinned: the agent's oom_score_adj is -1000 and every step's is
	// pinned at 1000, floor included, so a job cannot lower it; it needs
	// an engine that can grant CAP_SYS_RESOURCE.
	OOMPinned bool
}

// Probe starts a container of spec alone, reads what its agent reports
// and removes it: the protections the engine applies, before any job.
func (p *Pool) Probe(ctx context.Context, spec Spec) (Protections, error) {
	spec = normalize(spec)
	if err := p.reserve(ctx); err != nil {
		return Protections{}, err
	}
	defer p.release()
	c, err := p.start(ctx, spec, spec.uniqueName()+"-probe")
	if err != nil {
		return Protections{}, err
	}
	defer func() {
		p.mu.Lock()
		delete(p.all, c)
		p.mu.Unlock()
		c.remove(context.WithoutCancel(ctx))
	}()
	return Protections{Seccomp: c.ready.Seccomp == 2, OOMPinned: c.ready.OOMProtected}, nil
}

// Stats is a snapshot of one pool key.
type Stats struct {
	// Pool names the key, uniquely among the pool's keys.
	Pool  string
	Idle  int
	Total int
	Warm  bool
}

// Stats returns a snapshot per pool key, and the total of containers.
func (p *Pool) Stats() ([]Stats, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Stats, 0, len(p.subs))
	for _, sp := range p.subs {
		out = append(out, Stats{Pool: sp.name, Idle: len(sp.idle), Total: sp.total, Warm: sp.warm})
	}
	return out, p.count
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
	}
	p.notifyLocked()
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
