package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sandq/sandq/langs"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/internal/tracing"
	"github.com/sandq/sandq/jobs"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a [Client]. The zero value is the default: Redis at
// 127.0.0.1:6379, prefix "sandq", unprefixed queues, 24 h result TTL and
// the default [Policy].
type Config struct {
	// Redis is an existing client to share. The Client does not close it.
	// If nil, the Client makes its own from RedisOptions and closes it in
	// Close.
	Redis redis.UniversalClient

	// RedisOptions configures the Client's own Redis client when Redis is
	// nil. If nil, the default is a single server at 127.0.0.1:6379, DB 0.
	RedisOptions *redis.UniversalOptions

	// Prefix namespaces sandq's Redis keys and channels (see [Store]).
	// Default "sandq".
	Prefix string

	// QueuePrefix is prepended to the asynq queue names (see
	// [AsynqQueue]); workers must use the same (see [ServerQueues]).
	// Default "" (queues "critical", "default", "batch").
	QueuePrefix string

	// ResultTTL is how long results are kept. Default 24 h.
	ResultTTL time.Duration

	// Policy is what Enqueue validates jobs against. Default: the zero
	// Policy, whose defaults are documented on its fields, offering the
	// languages of sandq's registry (langs.Catalog) when it names none.
	Policy jobs.Policy
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Redis == nil && c.RedisOptions == nil {
		c.RedisOptions = &redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}}
	}
	c.Prefix = cmp.Or(c.Prefix, store.DefaultPrefix)
	c.ResultTTL = cmp.Or(c.ResultTTL, store.DefaultResultTTL)
	c.Policy = langs.Policy(c.Policy).WithDefaults()
	return c
}

func (c Config) validate() error {
	if err := (store.Config{Prefix: c.Prefix, ResultTTL: c.ResultTTL}).Check(); err != nil {
		return err
	}
	if c.QueuePrefix != "" {
		if err := jobs.CheckName(c.QueuePrefix, 64); err != "" {
			return fmt.Errorf("client: config: QueuePrefix %s", err)
		}
	}
	return c.Policy.Check()
}

// EnqueueInfo describes the outcome of enqueueing one job.
type EnqueueInfo struct {
	// ID is the job ID, generated if the job had none.
	ID string
	// Queue is the logical queue of the job.
	Queue jobs.Queue
	// Existing is true when a job with this ID was already known, queued,
	// running or finished; nothing new was enqueued and the existing job
	// is unchanged. Exactly one of concurrent enqueues of one ID reports
	// false.
	Existing bool
	// Status is the job's status as found: queued for a new job, the
	// stored status for an existing one.
	Status jobs.Status
	// Err is this job's error in [Client.EnqueueBatch], nil on success.
	// Enqueue returns it as its error instead.
	Err error
}

// Client is the producer's handle on sandq: it enqueues jobs and reads,
// awaits and cancels them. It is safe for concurrent use.
type Client struct {
	cfg       Config
	rdb       redis.UniversalClient
	ownsRedis bool
	store     *store.Store
	asynq     *asynq.Client
	inspector *asynq.Inspector

	// waitBlocking, if set, is called by Wait when it has subscribed and
	// found no final Result, just before it blocks. Tests use it to
	// store a result at exactly that point, without sleeping.
	waitBlocking func(id string)
	// getBetweenReads, if set, is called by Get between its read of the
	// stored Result and its read of asynq's task. Tests use it to finish
	// the job at exactly that point.
	getBetweenReads func(id string)
	// fleet caches the workers' job slots, for admissions.
	fleet fleetCache
	// waitRecheck is how often a blocked Wait reads the job again
	// ([waitRecheck] unless a test sets it).
	waitRecheck time.Duration
	// wakes tells idle workers a task was enqueued, unless the wake went
	// out with the task (wakeInline: store.WithWake), which an enqueue
	// does when no other is under way (enqueuing counts them): a lone job
	// gains the round trip, and a flood of enqueues keeps the waker's
	// coalescing (one wake for the tasks of many, not one each for every
	// worker to receive).
	wakes      *waker
	wakeInline bool
	enqueuing  atomic.Int64
	// waiters is the Waits' shared pub/sub connection.
	waiters *doneHub
}

// waitRecheck is how often a blocked Wait reads its job again through
// Get, to notice a job that ended without a final Result being published:
// asynq archives a task whose worker died on its last attempt, and no
// waiter hears of it otherwise.
const waitRecheck = 10 * time.Second

// New returns a Client for cfg. It does not contact Redis.
func New(cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, rdb: cfg.Redis, waitRecheck: waitRecheck}
	if c.rdb == nil {
		c.rdb = redis.NewUniversalClient(cfg.RedisOptions)
		c.ownsRedis = true
	}
	store, err := store.New(c.rdb, store.Config{Prefix: cfg.Prefix, ResultTTL: cfg.ResultTTL})
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	c.store = store
	c.wakes = newWaker(store.Wake)
	c.waiters = newDoneHub(store.PubSub)
	// Both share c.rdb's connections and leave closing them to us. On a
	// single Redis (or a Sentinel set) asynq's enqueues go through a client
	// of their own with the store's WakeHook: a task's wake goes out in its
	// enqueue's round trip. A Cluster client has no such clone (and a
	// PUBLISH in its pipeline could reach another node before the task):
	// there the waker publishes after the enqueue.
	enq := c.rdb
	if rc, ok := c.rdb.(*redis.Client); ok {
		own := rc.WithTimeout(rc.Options().ReadTimeout)
		own.AddHook(store.WakeHook())
		enq, c.wakeInline = own, true
	}
	c.asynq = asynq.NewClientFromRedisClient(enq)
	c.inspector = asynq.NewInspectorFromRedisClient(c.rdb)
	return c, nil
}

// Store returns the Client's result store.
func (c *Client) Store() *store.Store { return c.store }

// Close publishes the idle workers' wake for the last tasks enqueued, if
// one is pending, and releases the Client's Redis connections if it made
// them; a shared Config.Redis is left open.
func (c *Client) Close() error {
	c.wakes.close()
	if c.waiters != nil {
		c.waiters.close()
	}
	if c.ownsRedis {
		return c.rdb.Close()
	}
	return nil
}

// Validate checks j against the Client's policy, as Enqueue does, without
// touching Redis or j: a producer that checks many jobs before enqueueing
// any (a batch) uses it rather than a copy of the policy.
func (c *Client) Validate(j *jobs.Job) error { return c.cfg.Policy.Validate(j) }

// Policy returns the policy the Client validates with, its defaults
// filled: its size caps bound what a producer reads for a job.
func (c *Client) Policy() jobs.Policy { return c.cfg.Policy }

// Admission limits an enqueue (see the store's ledger): caps on the job's
// tenant's jobs not yet final and their held bytes (jobs.Job.HeldBytes) (0: none), and the
// tenant's own cap of released jobs (0: a fair share of the workers'
// slots). A refused job's error is a *QuotaError.
type Admission struct {
	MaxJobs    int
	MaxBytes   int64
	MaxRunning int
}

// QuotaError is an enqueue refused by its Admission.
type QuotaError = store.QuotaError

// Enqueue validates j, fills its defaults and enqueues it, with no caps on
// its tenant (EnqueueWith takes them).
//
// An invalid job returns the *ValidationError and Redis is not touched.
// Enqueue is idempotent by ID: if a job with j's ID is already known
// (queued, running, or finished and its result not yet expired), nothing
// is enqueued and the info reports Existing with the job's status.
//
// How: Enqueue first claims the ID by creating a queued Result (SET NX
// semantics) and counting the job in its tenant's ledger, in one script;
// the job is then enqueued in asynq with TaskID = ID, or held in its
// tenant's lane while the tenant has its fair share of the workers (the
// worker that ends one of the tenant's jobs enqueues it). A claim that
// exists but is still queued and not held is re-enqueued into the claim's
// queue, where asynq's task-ID check decides: this repairs a claim whose
// enqueuer died before reaching asynq, and makes concurrent enqueues of one
// ID end with one task. If asynq fails for any other reason, the claim is
// rolled back.
func (c *Client) Enqueue(ctx context.Context, j jobs.Job) (EnqueueInfo, error) {
	return c.EnqueueWith(ctx, j, Admission{})
}

// EnqueueWith is Enqueue under an Admission.
func (c *Client) EnqueueWith(ctx context.Context, j jobs.Job, a Admission) (info EnqueueInfo, err error) {
	ctx, span := tracing.Tracer().Start(ctx, "sandq.enqueue", trace.WithSpanKind(trace.SpanKindProducer))
	defer func() { endEnqueueSpan(span, info, err) }()
	if err := c.cfg.Policy.Validate(&j); err != nil {
		return EnqueueInfo{ID: j.ID, Queue: j.Queue}, err
	}
	c.cfg.Policy.NormalizeEnvelope(&j)
	tracing.Inject(ctx, &j)
	claim := c.claimed(ctx, j, time.Now(), a)
	cl := c.store.Admit(ctx, claim)
	if cl.Err != nil {
		return EnqueueInfo{ID: j.ID, Queue: j.Queue}, fmt.Errorf("client: enqueue %s: %w", j.ID, cl.Err)
	}
	return c.enqueueClaimed(ctx, j, claim.Result, cl)
}

// EnqueueBatch enqueues every job like [Client.Enqueue], claiming all IDs
// in one pipelined round trip, then enqueueing the asynq tasks one by one
// (asynq has no batch enqueue). It is not all-or-nothing: infos[i]
// reports jobs[i], with infos[i].Err set if that job failed. The error is
// nil if every job was enqueued or found existing, and otherwise joins
// the per-job errors.
func (c *Client) EnqueueBatch(ctx context.Context, js []jobs.Job) ([]EnqueueInfo, error) {
	return c.EnqueueBatchWith(ctx, js, Admission{})
}

// EnqueueBatchWith is EnqueueBatch under an Admission, checked job by job:
// the jobs past a cap fail with a *QuotaError, the others are enqueued.
func (c *Client) EnqueueBatchWith(ctx context.Context, js []jobs.Job, a Admission) (_ []EnqueueInfo, err error) {
	ctx, span := tracing.Tracer().Start(ctx, "sandq.enqueue_batch", trace.WithSpanKind(trace.SpanKindProducer))
	defer func() { endBatchSpan(span, len(js), err) }()
	infos := make([]EnqueueInfo, len(js))
	var (
		normalized []jobs.Job
		claims     []store.Claimed
		at         []int
	)
	now := time.Now()
	for i, j := range js {
		if err := c.cfg.Policy.Validate(&j); err != nil {
			infos[i] = EnqueueInfo{ID: j.ID, Queue: j.Queue, Err: err}
			continue
		}
		c.cfg.Policy.NormalizeEnvelope(&j)
		tracing.Inject(ctx, &j)
		normalized, claims, at = append(normalized, j), append(claims, c.claimed(ctx, j, now, a)), append(at, i)
	}
	// Claim every ID in one round trip.
	for k, cl := range c.store.AdmitMany(ctx, claims) {
		i, err := at[k], cl.Err
		if err == nil {
			infos[i], err = c.enqueueClaimed(ctx, normalized[k], claims[k].Result, cl)
		}
		if err != nil {
			infos[i] = EnqueueInfo{ID: normalized[k].ID, Queue: normalized[k].Queue, Err: err}
		}
	}
	var errs []error
	for i := range infos {
		if infos[i].Err != nil {
			errs = append(errs, fmt.Errorf("jobs[%d]: %w", i, infos[i].Err))
		}
	}
	if len(errs) > 0 {
		return infos, fmt.Errorf("client: enqueue batch: %d of %d failed: %w", len(errs), len(js), errors.Join(errs...))
	}
	return infos, nil
}

// claimed is what claiming normalized job j takes: its queued Result, its
// task payload, its admission with the fleet's slots.
func (c *Client) claimed(ctx context.Context, j jobs.Job, now time.Time, a Admission) store.Claimed {
	task, _ := store.NewTask(j)
	return store.Claimed{Result: queuedResult(j, now), Tenant: j.Tenant, Queue: j.Queue, Payload: task.Payload(),
		Bytes:     j.HeldBytes(len(task.Payload())),
		Admission: store.Admission{MaxJobs: a.MaxJobs, MaxBytes: a.MaxBytes, MaxRunning: a.MaxRunning, FleetSlots: c.fleetSlots(ctx)}}
}

// enqueueClaimed finishes an enqueue after the claim step: claim is the
// queued Result Enqueue tried to create, cl what claiming found.
func (c *Client) enqueueClaimed(ctx context.Context, j jobs.Job, claim jobs.Result, cl store.Claim) (EnqueueInfo, error) {
	stored := cl.Stored
	info := EnqueueInfo{ID: j.ID, Queue: j.Queue, Status: stored.Status}
	switch {
	case cl.Created && cl.Held:
		info.Status = jobs.StatusQueued
		return info, nil // its tenant's lane holds it
	case !cl.Created && (stored.Status != jobs.StatusQueued || cl.Held):
		info.Queue, info.Existing = cmp.Or(stored.Queue, j.Queue), true
		return info, nil
	case !cl.Created:
		// Queued but maybe never reached asynq: enqueue into the claim's
		// queue and let asynq's task-ID check decide.
		j.Queue = cmp.Or(stored.Queue, j.Queue)
		info.Queue = j.Queue
	}
	existing, err := c.enqueueTask(ctx, j)
	switch {
	case err == nil:
		info.Status, info.Existing = jobs.StatusQueued, existing
		return info, nil
	case cl.Created:
		// Roll back our claim so a retry of Enqueue is not told the job
		// exists. Detached: the claim must go even if ctx is done.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if derr := c.store.Unclaim(rctx, claim); derr != nil {
			err = errors.Join(err, fmt.Errorf("roll back claim: %w", derr))
		}
	}
	return EnqueueInfo{ID: j.ID, Queue: j.Queue}, fmt.Errorf("client: enqueue %s: %w", j.ID, err)
}

// enqueueTask enqueues j's task in asynq and wakes idle workers; existing
// reports that the task exists already (pending, active, retrying or
// archived): the call added nothing. If a fresh claim's task outlived an
// expired result, the claim stays and the worker overwrites it.
func (c *Client) enqueueTask(ctx context.Context, j jobs.Job) (existing bool, err error) {
	q := store.AsynqQueue(c.cfg.QueuePrefix, j.Queue)
	task, opts := store.NewTask(j, asynq.Queue(q))
	var mark *store.WakeMark
	if n := c.enqueuing.Add(1); c.wakeInline && n == 1 {
		ctx, mark = store.WithWake(ctx)
	}
	defer c.enqueuing.Add(-1)
	_, err = c.asynq.EnqueueContext(ctx, task, opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return true, nil
	}
	if err == nil && !mark.Sent() {
		c.wakes.wake(q)
	}
	return false, err
}

func queuedResult(j jobs.Job, now time.Time) jobs.Result {
	return jobs.Result{
		ID:         j.ID,
		Status:     jobs.StatusQueued,
		Lang:       j.Lang,
		Queue:      j.Queue,
		Tags:       j.Tags,
		Tenant:     j.Tenant,
		EnqueuedAt: now.UTC(),
	}
}

// Get returns job id's Result. The stored Result is authoritative once
// final. While it is not, or if none is stored, asynq's view of the task
// refines it: a pending, scheduled or retrying task reads as queued, an
// active one as running, and an archived one (retries spent without a
// final result, such as a worker killed on its last attempt) as
// internal_error with asynq's last error as reason. A task that is not
// active and whose cancel was requested reads as canceled: asynq fails a
// canceled task at once, before the worker has stored its canceled Result.
// Such synthesized Results are not stored. Get returns an error wrapping
// [ErrNotFound] if neither Redis nor asynq knows the ID.
func (c *Client) Get(ctx context.Context, id string) (jobs.Result, error) {
	if !jobs.ValidID(id) {
		return jobs.Result{}, fmt.Errorf("client: get %q: %w", id, jobs.ErrNotFound)
	}
	stored, err := c.store.Get(ctx, id)
	if err != nil && !errors.Is(err, jobs.ErrNotFound) {
		return jobs.Result{}, err
	}
	return c.getAfterStore(ctx, id, stored, err == nil)
}

// getAfterStore is Get once the stored Result has been read: stored, if
// found.
func (c *Client) getAfterStore(ctx context.Context, id string, stored jobs.Result, found bool) (jobs.Result, error) {
	if found && stored.Status.Final() {
		return stored, nil
	}
	if c.getBetweenReads != nil {
		c.getBetweenReads(id)
	}
	info, err := c.findTask(ctx, id, stored.Queue)
	if err != nil {
		return jobs.Result{}, fmt.Errorf("client: get %s: %w", id, err)
	}
	if info == nil {
		// The worker stores its final Result before asynq deletes the
		// task (a rejected job, or any job without retention); both may
		// have happened between our two reads: read the store again.
		again, err := c.store.Get(ctx, id)
		switch {
		case err == nil:
			return again, nil
		case !errors.Is(err, jobs.ErrNotFound):
			return jobs.Result{}, err
		case found:
			return stored, nil
		}
		return jobs.Result{}, fmt.Errorf("client: get %s: %w", id, jobs.ErrNotFound)
	}
	if info.State == asynq.TaskStateArchived || info.State == asynq.TaskStateCompleted {
		// The worker stores its final Result before asynq archives or
		// completes the task, but that may have happened between our two
		// reads: read the store again before synthesizing a status.
		again, err := c.store.Get(ctx, id)
		if err != nil && !errors.Is(err, jobs.ErrNotFound) {
			return jobs.Result{}, err
		}
		if err == nil {
			stored, found = again, true
			if stored.Status.Final() {
				return stored, nil
			}
		}
	}
	r := stored
	if !found {
		r = jobs.Result{ID: id, Queue: c.logicalQueue(info.Queue)}
		if j, err := jobs.DecodeJob(info.Payload); err == nil {
			r.Lang, r.Tags, r.Tenant = j.Lang, j.Tags, j.Tenant
		}
	}
	if info.State != asynq.TaskStateActive && info.State != asynq.TaskStateCompleted {
		// Canceling a running task makes asynq fail it at once (to
		// retry or archive) while the worker is still storing the
		// canceled Result: report it as canceled already.
		canceled, err := c.store.CancelRequested(ctx, id)
		if err != nil {
			return jobs.Result{}, fmt.Errorf("client: get %s: %w", id, err)
		}
		if canceled {
			r.Status, r.Reason = jobs.StatusCanceled, "canceled"
			return r, nil
		}
	}
	switch info.State {
	case asynq.TaskStateActive:
		r.Status = jobs.StatusRunning
	case asynq.TaskStateArchived:
		r.Status = jobs.StatusInternalError
		r.Reason = "retries exhausted without a result"
		if info.LastErr != "" {
			r.Reason += ": " + info.LastErr
		}
		r.FinishedAt = info.LastFailedAt.UTC()
	case asynq.TaskStateCompleted:
		// Handled without a stored final result: keep what is stored.
		if !found {
			return jobs.Result{}, fmt.Errorf("client: get %s: %w", id, jobs.ErrNotFound)
		}
	default: // pending, scheduled, retry, aggregating
		r.Status = jobs.StatusQueued
		if info.LastErr != "" {
			r.Reason = "retrying after: " + info.LastErr
		}
	}
	return r, nil
}

// findTask looks for task id in every queue and returns it, or nil. It
// looks in queue first, when set (the queue its stored Result names).
func (c *Client) findTask(ctx context.Context, id string, first jobs.Queue) (*asynq.TaskInfo, error) {
	order := jobs.Queues()
	if slices.Contains(order, first) {
		order = append([]jobs.Queue{first}, slices.DeleteFunc(order, func(q jobs.Queue) bool { return q == first })...)
	}
	for _, q := range order {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		info, err := c.inspector.GetTaskInfo(store.AsynqQueue(c.cfg.QueuePrefix, q), id)
		switch {
		case err == nil:
			return info, nil
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			continue
		default:
			return nil, err
		}
	}
	return nil, nil
}

func (c *Client) logicalQueue(asynqQueue string) jobs.Queue {
	for _, q := range jobs.Queues() {
		if store.AsynqQueue(c.cfg.QueuePrefix, q) == asynqQueue {
			return q
		}
	}
	return jobs.Queue(asynqQueue)
}

// Wait blocks until job id has a final Result and returns it, or returns
// when ctx ends (with an error wrapping ctx's cause) or the job is unknown
// ([ErrNotFound]).
//
// It does not poll. It subscribes to the job's done channel (on a pub/sub
// connection the Client's Waits share), waits for Redis to confirm the
// subscription, and only then reads the Result, so a result stored
// between the read and the wait is still seen. A small final Result comes
// whole in its notice and is not read again (store.NoticeResultMax). If
// the pub/sub connection drops and go-redis resubscribes, Wait reads the
// Result again, covering a result published during the gap.
//
// A job that ends without any final Result being stored (asynq archives
// it after its last worker died) wakes no waiter until a worker settles
// it, so a blocked Wait also reads the job every 10 seconds and returns
// the internal_error that Get reports for it.
func (c *Client) Wait(ctx context.Context, id string) (jobs.Result, error) {
	if !jobs.ValidID(id) {
		return jobs.Result{}, fmt.Errorf("client: wait %q: %w", id, jobs.ErrNotFound)
	}
	w, err := c.waiters.join(ctx, c.store.DoneChannel(id))
	if err != nil {
		return jobs.Result{}, fmt.Errorf("client: wait %s: subscribe: %w", id, err)
	}
	defer w.leave()
	check := func() (jobs.Result, bool, error) {
		r, err := c.Get(ctx, id)
		if err != nil {
			return jobs.Result{}, false, err
		}
		return r, r.Status.Final(), nil
	}
	// First the stored Result alone: a job stored and not final is
	// waited for (asynq's view of it is read at the recheck); only a job
	// with no Result stored needs Get's reading of asynq now.
	switch r, err := c.store.Get(ctx, id); {
	case err == nil && r.Status.Final():
		return r, nil
	case errors.Is(err, jobs.ErrNotFound):
		if r, err := c.getAfterStore(ctx, id, jobs.Result{}, false); err != nil || r.Status.Final() {
			return r, err
		}
	case err != nil:
		return jobs.Result{}, err
	}
	recheck := time.NewTicker(c.waitRecheck)
	defer recheck.Stop()
	if c.waitBlocking != nil {
		c.waitBlocking(id)
	}
	for {
		select {
		case <-ctx.Done():
			return jobs.Result{}, fmt.Errorf("client: wait %s: %w", id, context.Cause(ctx))
		case <-recheck.C:
			if r, done, err := check(); err != nil || done {
				return r, err
			}
		case <-w.gone:
			return jobs.Result{}, fmt.Errorf("client: wait %s: %w", id, errHubClosed)
		case payload := <-w.events:
			// A published final Result (a small one travels in its
			// notice), a status (the Result is read), or a subscription
			// confirmed again after a reconnect (a message may have been
			// missed): read the Result.
			if r, ok := c.store.NoticeResult(id, payload); ok {
				return r, nil
			}
			if r, done, err := check(); err != nil || done {
				return r, err
			}
		}
	}
}

// Cancel cancels job id.
//
//   - Queued (pending, scheduled or waiting to retry): the task is deleted
//     from asynq and a final "canceled" Result is stored, waking waiters.
//     The job never runs.
//   - Running: Cancel marks the job canceled ([Store.RequestCancel]: the
//     cancel key, and the job ID published on "<prefix>:cancel", on which
//     the worker kills the program), and calls asynq's
//     Inspector.CancelProcessing, which cancels the handler's context.
//     Cancel returns at once; the worker stores the final "canceled"
//     Result, with the output so far, when the program is dead. Note that
//     asynq counts a canceled handler as a failed attempt and schedules a
//     retry; that attempt finds the final Result (or the cancel key) and
//     ends without running anything.
//   - Already final: an error wrapping [ErrAlreadyFinal].
//   - Unknown: an error wrapping [ErrNotFound].
//
// Canceling a job twice is not an error.
func (c *Client) Cancel(ctx context.Context, id string) error {
	if !jobs.ValidID(id) {
		return fmt.Errorf("client: cancel %q: %w", id, jobs.ErrNotFound)
	}
	stored, err := c.store.Get(ctx, id)
	found := err == nil
	if err != nil && !errors.Is(err, jobs.ErrNotFound) {
		return err
	}
	if found && stored.Status.Final() {
		return alreadyFinal(id, stored)
	}
	info, err := c.findTask(ctx, id, stored.Queue)
	if err != nil {
		return fmt.Errorf("client: cancel %s: %w", id, err)
	}
	if info == nil && !found {
		return fmt.Errorf("client: cancel %s: %w", id, jobs.ErrNotFound)
	}
	if info != nil && info.State == asynq.TaskStateCompleted {
		return fmt.Errorf("client: cancel %s: %w (task completed)", id, jobs.ErrAlreadyFinal)
	}
	// Mark first, so a worker that takes the task from here on sees it.
	if err := c.store.RequestCancel(ctx, id); err != nil {
		return err
	}
	if info != nil && info.State != asynq.TaskStateActive {
		err := c.inspector.DeleteTask(info.Queue, id)
		if err == nil || errors.Is(err, asynq.ErrTaskNotFound) {
			reason := "canceled while queued"
			if info.State == asynq.TaskStateArchived {
				reason = "canceled after its last attempt failed"
			}
			return c.storeCanceled(ctx, id, stored, found, info, reason)
		}
		// Most likely a worker took it meanwhile (DeleteTask refuses
		// active tasks): cancel it as running.
		if again, ferr := c.findTask(ctx, id, stored.Queue); ferr != nil || again == nil || again.State != asynq.TaskStateActive {
			return fmt.Errorf("client: cancel %s: delete task: %w", id, err)
		}
		info.State = asynq.TaskStateActive
	}
	if info != nil && info.State == asynq.TaskStateActive {
		if err := c.inspector.CancelProcessing(id); err != nil {
			return fmt.Errorf("client: cancel %s: %w", id, err)
		}
		return nil
	}
	// A non-final result but no task: the enqueue has not reached asynq
	// yet, or will never. Store the final result; any later attempt sees it.
	return c.storeCanceled(ctx, id, stored, found, nil, "canceled before it reached a queue")
}

func (c *Client) storeCanceled(ctx context.Context, id string, stored jobs.Result, found bool, info *asynq.TaskInfo, reason string) error {
	r := jobs.Result{ID: id}
	if found {
		r = jobs.Result{ID: id, Lang: stored.Lang, Queue: stored.Queue, Tags: stored.Tags, Tenant: stored.Tenant, EnqueuedAt: stored.EnqueuedAt}
	} else if info != nil {
		r.Queue = c.logicalQueue(info.Queue)
		if j, err := jobs.DecodeJob(info.Payload); err == nil {
			r.Lang, r.Tags, r.Tenant = j.Lang, j.Tags, j.Tenant
		}
	}
	r.Status, r.Reason, r.FinishedAt = jobs.StatusCanceled, reason, time.Now().UTC()
	got, written, err := c.store.Put(ctx, r)
	if err != nil {
		return fmt.Errorf("client: cancel %s: %w", id, err)
	}
	if !written && got.Status != jobs.StatusCanceled {
		return alreadyFinal(id, got)
	}
	return nil
}

func alreadyFinal(id string, r jobs.Result) error {
	if r.Status == jobs.StatusCanceled {
		return nil
	}
	return fmt.Errorf("client: cancel %s: %w (status %s)", id, jobs.ErrAlreadyFinal, r.Status)
}

// QuietRedisLogs turns off go-redis's own log lines (a line per failed
// dial, process-wide), for a command that reports Redis errors itself.
func QuietRedisLogs() { logging.Disable() }
