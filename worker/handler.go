package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandq/sandq/internal/store"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// Sandbox is what the handler needs of the container pool: run a job's
// steps in a container of a spec, install a library set, and read an
// image's ID (part of a set's key). *sandbox.Pool implements it; unit tests
// fake exactly this seam.
type Sandbox interface {
	Run(ctx context.Context, spec sandbox.Spec, req *agent.RunRequest, opts ...sandbox.RunOption) (agent.RunResult, error)
	RunSeq(ctx context.Context, spec sandbox.Spec, fn func(run sandbox.RunFunc) error, opts ...sandbox.RunOption) error
	Install(ctx context.Context, req sandbox.InstallRequest) (sandbox.InstallResult, error)
	ImageID(ctx context.Context, image string) (string, error)
}

var _ Sandbox = (*sandbox.Pool)(nil)

// Cancel causes of a handler's context, so the handler can tell them
// apart (context.Cause).
var (
	// ErrShutdown is the cancel cause a worker gives its handlers' base
	// context when it shuts down. A handler stopped by it writes no
	// result: asynq has put the task back on its queue, and another worker
	// will run it.
	ErrShutdown = errors.New("worker: shutting down")
	// ErrCanceled is the cause when a producer canceled the job (the
	// cancel channel, see Handler.WatchCancels).
	ErrCanceled = errors.New("worker: job canceled by request")
)

// Releaser releases a tenant's jobs held in its lanes.
type Releaser interface {
	Release(ctx context.Context, tenant string) (int, error)
}

// Config configures a Handler.
type Config struct {
	// Sandbox runs the programs. Required.
	Sandbox Sandbox
	// Store receives results. Required.
	Store *store.Store
	// Lanes releases a tenant's held jobs (client.Client.Release) when
	// one of its jobs ends and it has jobs waiting. Default none: the
	// sweep of every worker releases them within a second.
	Lanes Releaser
	// Policy re-validates every job (a producer may not have used our
	// client) and fills its defaults. Zero fields use the Policy defaults.
	Policy jobs.Policy
	// ImagePrefix names the language images: <prefix><lang>:latest.
	// Default langs.DefaultImagePrefix ("sandq/").
	ImagePrefix string
	// Worker names this worker in results. Default host-pid.
	Worker string
	// Logger gets one line per job. Default: discard.
	Logger zerolog.Logger
	// Observe, if set, is called with every final result this worker writes.
	Observe func(jobs.Result)
	// Artifacts stores plots and output files, and serves input files by
	// key. Nil disables both: jobs asking for them are rejected.
	Artifacts artifacts.Store
	// ArtifactPrefix starts every artifact key: <prefix>/<job id>/<name>.
	// Default "sandq".
	ArtifactPrefix string
	// InputsPrefix starts every input file's key (see
	// artifacts.InputKey); it may not overlap ArtifactPrefix. Default
	// artifacts.DefaultInputsPrefix.
	InputsPrefix string
	// MaxArtifacts caps the files kept per job. Default 32.
	MaxArtifacts int
	// MaxArtifactBytes caps their total size per job. Default 32 MiB.
	MaxArtifactBytes int64
	// UploadAttempts is how often an upload is tried, with exponential
	// backoff from UploadBackoff up to artifacts.MaxRetryDelay. Defaults
	// 16 and 500 ms: a store that is down for up to a minute (a restart,
	// a failover) delays the job's result instead of losing its files.
	UploadAttempts int
	// NoPrestart turns off interpreter prestart (langs.Lang.Prestart):
	// every job starts its interpreter cold.
	NoPrestart    bool
	UploadBackoff time.Duration
	// Install configures library installs (mirrors, CA bundle, limits).
	Install InstallConfig
	// MaxResultBytes caps a stored Result's JSON: larger outputs move to
	// the artifact store (see boundResult). Default
	// DefaultMaxResultBytes (1 MiB); at least MinMaxResultBytes.
	MaxResultBytes int
	// StreamAll streams every job's output live, not only the jobs that
	// ask for it (jobs.Job.Stream).
	StreamAll bool
	// StreamTTL is how long a job's live output stays in Redis after its
	// last write. Default store.DefaultStreamTTL (1 h).
	StreamTTL time.Duration
	// EngineUp, if set, reports whether the container engine answers.
	// An attempt that starts while it does not waits for it, up to
	// EngineWait (default 2 minutes), holding its task: a worker whose
	// engine restarts stops taking jobs instead of spending every queued
	// job's retries on it. An answer vouches for the engine for
	// engineFresh: the jobs that start within it do not ask again.
	EngineUp   func(context.Context) error
	EngineWait time.Duration
	// ObservePhase, if set, gets how long each phase of a job took:
	// queue_wait (enqueued to taken), start (its running result stored),
	// install (its libraries made available), plan, acquire (a container
	// taken from the pool, or started), agent (files written, steps run,
	// files collected: the agent's round trip), run (the steps' own wall
	// time, within agent), upload (artifacts stored), store_result (the
	// final result stored and published).
	ObservePhase func(phase string, d time.Duration)
	// ObserveTenant, if set, gets each job's tenant and queue wait (from
	// admission, a wait in the tenant's lane included, to taken) when it
	// starts, and the tenant again when it ends (wait < 0): the metrics'
	// per-tenant queue wait and running jobs.
	ObserveTenant func(tenant string, wait time.Duration)
	// CompileCache, if set, lets judged jobs and their checkers reuse an
	// identical earlier compile of the same tenant (compilecache.go).
	CompileCache *CompileCache
	// TracerProvider, if set, records each attempt's spans (trace.go):
	// the job's, a child of the producer's span it carries, and its
	// phases'. Nil: no spans at all.
	TracerProvider trace.TracerProvider
}

// PlotsDir is where language hooks write captured plots inside the
// sandbox ($SANDQ_PLOTS_DIR); the agent makes it afresh for each job, in a
// root-owned directory the job cannot replace, and returns its files as
// plot artifacts.
const PlotsDir = "/tmp/.sandq/plots"

// Handler is the asynq handler for store.TypeExec tasks: it turns a task
// into a sandbox run and the run into a Result.
type Handler struct {
	cfg      Config
	imageIDs imageIDs
	running  runningJobs
	egress   *Egress
	network  *Network
	envs     envBuilds // environment images built from recipes (recipes.go)
	// envHashes maps an environment image's ID to its recipe's hash, for
	// provenance (one entry per image a job used).
	envHashes sync.Map
	// live holds the live output of the jobs running now, by job ID,
	// until their final result is stored.
	live sync.Map
	// engineOK is when the engine last answered EngineUp (Unix ns), 0
	// after an infrastructure fault.
	engineOK atomic.Int64
}

// engineFresh is how long the engine's answer to EngineUp vouches for it:
// an attempt starting within it does not ask again. Asking is a round
// trip to the engine on every job's path (0.5 ms at p50 on a 2-core
// machine, more at p99) for a fault that a job starting in the window
// still meets as an infrastructure fault and a retry, as before the
// hold; the retry asks.
const engineFresh = 250 * time.Millisecond

var _ asynq.Handler = (*Handler)(nil)

// NewHandler checks cfg and returns a Handler.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Sandbox == nil || cfg.Store == nil {
		return nil, errors.New("worker: Config needs Sandbox and Store")
	}
	cfg.Policy = langs.Policy(cfg.Policy).WithDefaults()
	if err := cfg.Policy.Check(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	cfg.ImagePrefix = cmp.Or(cfg.ImagePrefix, langs.DefaultImagePrefix)
	cfg.ArtifactPrefix = cmp.Or(cfg.ArtifactPrefix, "sandq")
	cfg.InputsPrefix = cmp.Or(cfg.InputsPrefix, artifacts.DefaultInputsPrefix)
	if artifacts.Overlap(cfg.ArtifactPrefix, cfg.InputsPrefix) {
		return nil, fmt.Errorf("worker: the inputs prefix %q overlaps the artifact prefix %q: jobs could read artifacts, and the retention sweeper would delete inputs", cfg.InputsPrefix, cfg.ArtifactPrefix)
	}
	cfg.MaxArtifacts = cmp.Or(cfg.MaxArtifacts, 32)
	cfg.MaxArtifactBytes = cmp.Or(cfg.MaxArtifactBytes, 32*jobs.MiB)
	cfg.UploadAttempts = cmp.Or(cfg.UploadAttempts, 16)
	cfg.UploadBackoff = cmp.Or(cfg.UploadBackoff, 500*time.Millisecond)
	cfg.Install = cfg.Install.withDefaults()
	cfg.MaxResultBytes = cmp.Or(cfg.MaxResultBytes, DefaultMaxResultBytes)
	cfg.StreamTTL = cmp.Or(cfg.StreamTTL, store.DefaultStreamTTL)
	cfg.EngineWait = cmp.Or(cfg.EngineWait, 2*time.Minute)
	if cfg.MaxResultBytes < MinMaxResultBytes {
		return nil, fmt.Errorf("worker: MaxResultBytes %d is below the minimum %d", cfg.MaxResultBytes, MinMaxResultBytes)
	}
	if err := cfg.Install.Mirrors.Validate(); err != nil {
		return nil, err
	}
	egress, err := NewEgress(cfg.Install.Mirrors, cfg.Install.AllowHosts, cfg.Logger)
	if err != nil {
		return nil, err
	}
	network, err := NewNetwork(cfg.Policy.NetworkAllow, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		cfg.Worker = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return &Handler{cfg: cfg, running: runningJobs{m: map[string]*runningJob{}}, egress: egress, network: network}, nil
}

// attempt is what asynq says about the task being handled.
type attempt struct {
	id              string
	retry, maxRetry int
}

// ProcessTask implements asynq.Handler. User-code outcomes (failures,
// timeouts, OOM kills) are results and return nil. Invalid jobs end
// rejected, once. Infrastructure faults return an error so asynq retries
// with backoff; the last attempt writes internal_error with the reason.
//
// Once a final Result is stored, whatever it says, ProcessTask returns nil:
// asynq then deletes the task (no Retention is set), so a rejected or
// internal_error job's payload is not kept in asynq's archive for 90 days.
// Only a task whose final Result could not be stored returns an error to
// the end and is archived; every worker's Server settles archived tasks
// (archive.go).
func (h *Handler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var a attempt
	a.id, _ = asynq.GetTaskID(ctx)
	a.retry, _ = asynq.GetRetryCount(ctx)
	a.maxRetry, _ = asynq.GetMaxRetry(ctx)
	return h.process(ctx, a, t)
}

// process handles one attempt of task t.
func (h *Handler) process(ctx context.Context, a attempt, t *asynq.Task) (err error) {
	log := h.cfg.Logger.With().Str("job_id", a.id).Logger()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer h.running.remove(a.id, h.running.add(a.id, cancel))
	defer func() {
		if p := recover(); p != nil {
			err = h.infraFailure(ctx, a, jobs.Result{ID: a.id}, fmt.Errorf("worker: handler panic: %v\n%s", p, debug.Stack()), log)
		}
	}()

	defer func() {
		// An attempt that ends without a final result (a retry, a
		// shutdown) stops its live output without an end entry.
		if lo, ok := h.live.LoadAndDelete(a.id); ok {
			lo.(*liveOutput).finish("")
		}
	}()

	job, err := h.decode(a, t)
	if err != nil {
		log.Info().Err(err).Msg("job rejected")
		// Retried only if the rejection could not be stored; done otherwise.
		return h.final(ctx, jobs.Result{ID: a.id, Status: jobs.StatusRejected, Reason: err.Error(),
			Attempts: a.retry + 1, Worker: h.cfg.Worker}, log)
	}
	h.cfg.Policy.Normalize(&job)
	ctx, jt := h.traceJob(ctx, a, job)
	defer func() { jt.end(err) }()
	log = log.With().Str("lang", job.Lang).Logger()
	if err := h.awaitEngine(ctx, log); err != nil {
		return h.infraFailure(ctx, a, jobs.Result{ID: a.id, Lang: job.Lang, Queue: job.Queue, Tags: job.Tags, Tenant: job.Tenant,
			Attempts: a.retry + 1, Worker: h.cfg.Worker}, err, log)
	}

	started := time.Now()
	res, run, err := h.start(ctx, a, job)
	h.since(ctx, "start", started)
	if !res.EnqueuedAt.IsZero() {
		h.observe("queue_wait", res.StartedAt.Sub(res.EnqueuedAt))
		jt.queued(res.EnqueuedAt)
	}
	if run && h.cfg.ObserveTenant != nil {
		var wait time.Duration // unknown without a queued Result: 0
		if !res.EnqueuedAt.IsZero() {
			wait = max(res.StartedAt.Sub(res.EnqueuedAt), 0)
		}
		h.cfg.ObserveTenant(job.Tenant, wait)
		defer h.cfg.ObserveTenant(job.Tenant, -1)
	}
	if err != nil || !run {
		if err != nil {
			return h.infraFailure(ctx, a, res, err, log)
		}
		return nil
	}
	out, outcome, err := h.execute(ctx, job, &res)
	defer out.RemoveFiles()
	switch outcome {
	case outcomeRequeued:
		return err
	case outcomeInfra:
		return h.infraFailure(ctx, a, res, err, log)
	case outcomeRejected:
		res.Status, res.Reason = jobs.StatusRejected, err.Error()
		return h.final(ctx, res, log)
	case outcomeFinal:
		return h.final(ctx, res, log)
	}
	fill(&res, job, out)
	if len(out.Artifacts) > 0 {
		started = time.Now()
		h.upload(ctx, &res, out, log)
		h.since(ctx, "upload", started)
	}
	return h.final(ctx, res, log)
}

// observe reports a phase's duration (Config.ObservePhase).
func (h *Handler) observe(phase string, d time.Duration) {
	if h.cfg.ObservePhase != nil && d >= 0 {
		h.cfg.ObservePhase(phase, d)
	}
}

// since reports the phase that began at start: to the metrics, and to
// ctx's trace.
func (h *Handler) since(ctx context.Context, phase string, start time.Time) {
	now := time.Now()
	h.observe(phase, now.Sub(start))
	traceOf(ctx).phase(phase, start, now)
}

// awaitEngine returns at once when the engine answered within engineFresh
// and no infrastructure fault came since, when it answers now, or when
// EngineUp is unset; otherwise it waits for it, up to EngineWait, and
// returns an infrastructure fault if it stays down.
func (h *Handler) awaitEngine(ctx context.Context, log zerolog.Logger) error {
	if h.cfg.EngineUp == nil {
		return nil
	}
	if ok := h.engineOK.Load(); ok != 0 && time.Since(time.Unix(0, ok)) < engineFresh {
		return nil
	}
	up := func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := h.cfg.EngineUp(pctx)
		if err == nil {
			h.engineOK.Store(time.Now().UnixNano())
		}
		return err
	}
	err := up()
	if err == nil {
		return nil
	}
	log.Warn().Err(err).Dur("max_wait", h.cfg.EngineWait).Msg("the container engine does not answer: holding the job until it does")
	deadline := time.NewTimer(h.cfg.EngineWait)
	defer deadline.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the container engine: %v", errInfra, context.Cause(ctx))
		case <-deadline.C:
			return fmt.Errorf("%w: the container engine did not answer for %s: %v", errInfra, h.cfg.EngineWait, err)
		case <-tick.C:
			if err = up(); err == nil {
				log.Info().Msg("the container engine answers again")
				return nil
			}
		}
	}
}

// decode decodes and validates the task's job. Its error wraps
// store.ErrPoison: the job can never run.
func (h *Handler) decode(a attempt, t *asynq.Task) (jobs.Job, error) {
	job, err := store.DecodeTask(t)
	if err != nil {
		return jobs.Job{}, err
	}
	if job.ID != a.id {
		return jobs.Job{}, fmt.Errorf("%w: payload id %q does not match task id %q", store.ErrPoison, job.ID, a.id)
	}
	if err := h.cfg.Policy.Validate(&job); err != nil {
		return jobs.Job{}, fmt.Errorf("%w: %w", store.ErrPoison, err)
	}
	return job, nil
}

// start stores the attempt's running Result. run is false when the job
// must not run: it is final already (canceled, or finished by another
// worker), or it was canceled before it started (its canceled Result is
// then stored). Storing is tried as final tries (a Redis restart or
// failover as the job starts must not cost it an attempt); an error after
// that is an infrastructure fault.
func (h *Handler) start(ctx context.Context, a attempt, job jobs.Job) (res jobs.Result, run bool, err error) {
	res = jobs.Result{
		ID: a.id, Status: jobs.StatusRunning, Lang: job.Lang, Queue: job.Queue, Tags: job.Tags, Tenant: job.Tenant,
		StartedAt: time.Now().UTC(), Attempts: a.retry + 1, Worker: h.cfg.Worker,
	}
	log := h.cfg.Logger.With().Str("job_id", a.id).Logger()
	var out store.PutOutcome
	err = artifacts.Retry(ctx, finalAttempts, 500*time.Millisecond, func() (err error) {
		out, err = h.cfg.Store.Start(ctx, res) // one round trip: the claim's EnqueuedAt, a cancel
		return err
	})
	if err != nil {
		return res, false, err
	} else if !out.Written {
		log.Info().Msg("job already final; not run again")
		return res, false, nil
	}
	res.EnqueuedAt = out.Stored.EnqueuedAt
	if out.Canceled {
		res.Status, res.Reason = jobs.StatusCanceled, "canceled before it started"
		return res, false, h.final(ctx, res, log)
	}
	return res, true, nil
}

// outcome says how execute ended when it returns no run to report.
type outcome int

const (
	outcomeRan      outcome = iota // the program ran: report the RunResult
	outcomeFinal                   // res is final already (a failed install, a cancel)
	outcomeRejected                // the job cannot run (the error says why)
	outcomeInfra                   // an infrastructure fault (retried)
	outcomeRequeued                // the worker is shutting down: asynq requeued the task
)

// execute installs the job's libraries, plans its run and runs it. With
// outcomeFinal, res has been filled with its final status.
func (h *Handler) execute(ctx context.Context, job jobs.Job, res *jobs.Result) (agent.RunResult, outcome, error) {
	out, o, err := h.executeOnce(ctx, job, res)
	if o == outcomeInfra && errors.Is(err, sandbox.ErrLibsGone) {
		// A collector removed the set between its install check and the
		// run: install it again, once.
		out, o, err = h.executeOnce(ctx, job, res)
	}
	return out, o, err
}

func (h *Handler) executeOnce(ctx context.Context, job jobs.Job, res *jobs.Result) (agent.RunResult, outcome, error) {
	var set libs
	if len(job.Libraries) > 0 {
		var failed string
		var err error
		started := time.Now()
		set, res.Install, failed, err = h.installLibs(ctx, job)
		h.since(ctx, "install", started)
		switch {
		case errors.Is(err, errInfra):
			return agent.RunResult{}, h.interrupted(ctx, outcomeInfra), err
		case err != nil:
			return agent.RunResult{}, outcomeRejected, err
		case failed != "":
			res.Status, res.Reason = jobs.StatusFailed, failed
			return agent.RunResult{}, outcomeFinal, nil
		}
	}
	if len(job.Tests) > 0 {
		o, err := h.judged(ctx, job, set, res)
		return agent.RunResult{}, o, err
	}
	started := time.Now()
	spec, req, err := h.plan(ctx, job, set)
	h.since(ctx, "plan", started)
	if errors.Is(err, errInfra) {
		return agent.RunResult{}, h.interrupted(ctx, outcomeInfra), err
	}
	if bf := (*buildFailedError)(nil); errors.As(err, &bf) {
		res.Status, res.Reason = jobs.StatusFailed, bf.reason
		return agent.RunResult{}, outcomeFinal, nil
	}
	if err != nil {
		return agent.RunResult{}, outcomeRejected, err
	}
	var opts []sandbox.RunOption
	if h.streams(job) {
		lo := newLiveOutput(h.cfg.Store, job.ID, res.Attempts, h.cfg.StreamTTL, h.cfg.Logger.With().Str("job_id", job.ID).Logger())
		if old, ok := h.live.Swap(job.ID, lo); ok {
			old.(*liveOutput).finish("")
		}
		opts = append(opts, sandbox.WithLive(lo.push))
	}
	opts = append(opts, h.runOptions(ctx)...)
	var egress *netRun
	if job.Network != nil {
		egress = h.network.forJob(job)
		opts = append(opts, sandbox.WithEgress(egress.Serve))
	}
	out, err := h.cfg.Sandbox.Run(ctx, spec, req, opts...)
	traceOf(ctx).steps(out)
	if egress != nil {
		res.Network = egress.finish()
	}
	if err == nil {
		var run time.Duration
		for _, st := range out.Steps {
			run += time.Duration(st.WallNs)
		}
		h.observe("run", run)
	}
	if err != nil {
		o, err := h.runError(ctx, job, res, err)
		return out, o, err
	}
	if job.Environment != "" {
		if msg := unrunnable(out); msg != "" {
			return out, outcomeRejected, fmt.Errorf("environment %s (image %s) cannot run %s jobs: %s", job.Environment, shortImageID(spec.Image), job.Lang, msg)
		}
		res.Provenance = h.provenance(ctx, job, spec)
	}
	if out.Last().Canceled {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, ErrShutdown):
			return out, outcomeRequeued, ErrShutdown
		case errors.Is(cause, ErrCanceled):
		default:
			if canceled, _ := h.cfg.Store.CancelRequested(context.WithoutCancel(ctx), job.ID); !canceled {
				return out, outcomeInfra, fmt.Errorf("worker: run interrupted: %w", cause)
			}
		}
	}
	return out, outcomeRan, nil
}

// runError maps the error of a sandbox run. What the job did to its
// sandbox is the job's outcome, not a fault to retry: the sandbox killed
// whole for memory, or an agent that stopped answering past every limit
// (the container is discarded either way). A shutdown requeues; a cancel
// is seen by infraFailure; the rest are faults.
func (h *Handler) runError(ctx context.Context, job jobs.Job, res *jobs.Result, err error) (outcome, error) {
	if o := h.interrupted(ctx, outcomeInfra); o != outcomeInfra || ctx.Err() != nil {
		return o, err
	}
	switch {
	case errors.Is(err, sandbox.ErrSandboxOOM):
		res.Status, res.Reason = jobs.StatusOOM, fmt.Sprintf("the sandbox was killed by the OOM killer (memory limit %d MiB)", job.Limits.MemoryMB)
		res.FinishedAt = time.Now().UTC()
		return outcomeFinal, nil
	case errors.Is(err, sandbox.ErrAgentUnresponsive):
		res.Status, res.Reason = jobs.StatusTimeout, "the sandbox stopped answering past the job's time limits; it was removed"
		res.FinishedAt = time.Now().UTC()
		return outcomeFinal, nil
	case errors.Is(err, errInfra):
		return outcomeInfra, err
	}
	var ve *jobs.ValidationError
	if errors.As(err, &ve) {
		return outcomeRejected, err
	}
	return outcomeInfra, err
}

// interrupted turns a fault into outcomeRequeued when it is only the
// worker shutting down: asynq has requeued the task, and no result is
// written.
func (h *Handler) interrupted(ctx context.Context, o outcome) outcome {
	if errors.Is(context.Cause(ctx), ErrShutdown) {
		return outcomeRequeued
	}
	return o
}

// streams reports whether job's output is streamed live.
func (h *Handler) streams(job jobs.Job) bool { return job.Stream || h.cfg.StreamAll }

// errInfra marks a planning error that is not the job's fault (the
// artifact store is down), so the task is retried.
var errInfra = errors.New("infrastructure")

// plan turns a normalized job into a pool spec and an agent request.
func (h *Handler) plan(ctx context.Context, job jobs.Job, set libs) (sandbox.Spec, *agent.RunRequest, error) {
	lang, ok := langs.Lookup(job.Lang)
	if !ok {
		return sandbox.Spec{}, nil, fmt.Errorf("unknown language %q", job.Lang)
	}
	lim := LimitsOf(job.Limits)
	files := []agent.File{{Path: lang.Source, Data: []byte(job.Code)}}
	// Every input file together, inline or fetched, is at most the
	// policy's cap on inline content: a job naming one object a hundred
	// times does not hold a hundred copies here.
	total, budget := int64(0), h.cfg.Policy.MaxInlineFileBytes
	for _, f := range job.Files {
		if f.Key != "" {
			data, err := h.fetch(ctx, job.Tenant, f.Key, budget-total)
			if err != nil {
				return sandbox.Spec{}, nil, fmt.Errorf("input file %q: %w", f.Path, err)
			}
			f.ContentB64 = data
		}
		total += int64(len(f.ContentB64))
		if total > budget {
			return sandbox.Spec{}, nil, fmt.Errorf("input files total more than %d bytes, the cap on a job's input files", budget)
		}
		files = append(files, agent.File{Path: f.Path, Data: f.ContentB64, Mode: f.Mode})
	}
	// The set's environment comes first, then the egress proxy's for a
	// job with a network policy: the job's own env may extend or override
	// them.
	env := slices.Clone(set.env)
	if job.Network != nil {
		env = append(env, proxyEnv(sandbox.EgressProxy)...)
	}
	for k, v := range job.Env {
		env = append(env, k+"="+v)
	}
	if h.cfg.Artifacts != nil {
		env = append(env, langs.PlotsDirEnv+"="+PlotsDir, "SANDQ_PLOT_FORMATS="+strings.Join(job.PlotFormats, ","))
	}
	step := func(name string, argv []string, timeout time.Duration) agent.Step {
		return agent.Step{
			Name: name, Argv: argv, Env: env, Timeout: timeout,
			OutputLimit: lim.OutputBytes, Rlimits: lim.Rlimits, StopOnFailure: name != "run",
		}
	}
	var steps []agent.Step
	for _, argv := range set.prepare {
		steps = append(steps, step("prepare", argv, 30*time.Second))
	}
	// A prestarted interpreter never serves a run with egress (the agent
	// refuses it too): it was started without the proxy's environment.
	prestart := lang.Prestart && !h.cfg.NoPrestart && job.Network == nil
	if len(lang.Compile) > 0 {
		compile := step("compile", lang.Compile, lim.Timeout+30*time.Second)
		compile.Prestart = prestart // the agent starts a compiler it knows ahead (TypeScript's)
		steps = append(steps, compile)
	}
	run := step("run", slices.Concat(lang.Run, job.Args), lim.Timeout)
	run.Stdin = []byte(job.Stdin)
	run.Prestart = prestart
	steps = append(steps, run)
	if h.streams(job) {
		for i := range steps {
			steps[i].Live = steps[i].Name == "compile" || steps[i].Name == "run"
		}
	}

	req := &agent.RunRequest{Files: files, Steps: steps, MemoryLimit: lim.MemoryBytes}
	if job.Network != nil {
		req.Egress = sandbox.EgressProxy
	}
	if h.cfg.Artifacts != nil {
		req.Collect = &agent.Collect{
			Globs: job.OutputFiles, PlotsDir: PlotsDir,
			MaxFiles: h.cfg.MaxArtifacts, MaxBytes: h.cfg.MaxArtifactBytes,
		}
	} else if len(job.OutputFiles) > 0 {
		return sandbox.Spec{}, nil, errors.New("output_files need an artifact store, and this worker has none")
	}
	spec := SpecOf(job, h.cfg.ImagePrefix, set.volume)
	if err := h.applyEnvironment(ctx, job.Environment, job.Tenant, job.Lang, &spec, req); err != nil {
		return sandbox.Spec{}, nil, err
	}
	return spec, req, nil
}

// infraFailure handles a fault that is not the job's: on the last attempt it
// writes internal_error with the reason and ends the task; before that it
// returns the error so asynq retries with backoff.
//
// A fault that is only the task's context ending because the job was
// canceled (Cancel while the handler acquires a container or installs
// libraries) is no fault: the job ends canceled at once, not after a
// retry's backoff.
func (h *Handler) infraFailure(ctx context.Context, a attempt, res jobs.Result, err error, log zerolog.Logger) error {
	h.engineOK.Store(0) // the next attempt asks the engine
	res.ID = a.id
	if ctx.Err() != nil {
		canceled := errors.Is(context.Cause(ctx), ErrCanceled)
		if !canceled {
			canceled, _ = h.cfg.Store.CancelRequested(context.WithoutCancel(ctx), a.id)
		}
		if canceled {
			res.Status, res.Reason = jobs.StatusCanceled, "canceled"
			res.FinishedAt = time.Now().UTC()
			return h.final(ctx, res, log)
		}
	}
	if a.retry < a.maxRetry {
		log.Error().Err(err).Int("attempt", a.retry+1).Int("max_retry", a.maxRetry).Msg("infrastructure fault; will retry")
		return err
	}
	res.Status = jobs.StatusInternalError
	res.Reason = fmt.Sprintf("infrastructure fault after %d attempts: %v", a.retry+1, err)
	res.FinishedAt = time.Now().UTC()
	if ferr := h.final(ctx, res, log); ferr != nil {
		return errors.Join(err, ferr) // asynq archives it, and Get reports that
	}
	return nil
}

// finalAttempts is how often final tries to store a final result before it
// gives up and lets asynq retry the task.
const finalAttempts = 3

// final stores a final result with a detached, bounded context (the task's
// context may already be canceled), trying again with backoff, first
// moving output that would take it past the size cap to the artifact
// store. An error
// means it could not be stored: the caller returns it, so asynq retries
// the task rather than leaving the job without a result.
func (h *Handler) final(ctx context.Context, res jobs.Result, log zerolog.Logger) error {
	spillCtx, cancelSpill := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	h.boundResult(spillCtx, &res, log)
	cancelSpill()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if res.FinishedAt.IsZero() {
		res.FinishedAt = time.Now().UTC()
	}
	var out store.PutOutcome
	started := time.Now()
	err := artifacts.Retry(ctx, finalAttempts, 500*time.Millisecond, func() (err error) {
		out, err = h.cfg.Store.PutFinal(ctx, res)
		return err
	})
	stored, written := out.Stored, out.Written
	h.since(ctx, "store_result", started)
	if err != nil {
		log.Error().Err(err).Str("status", string(res.Status)).Msg("store result")
		return fmt.Errorf("worker: store final result: %w", err)
	}
	if !written {
		log.Info().Str("status", string(stored.Status)).Msg("another final result was stored first")
		return nil
	}
	traceOf(ctx).result(res.Status)
	if lo, ok := h.live.LoadAndDelete(res.ID); ok {
		lo.(*liveOutput).finish(res.Status) // its end entry follows every chunk
	}
	if out.Held > 0 && h.cfg.Lanes != nil {
		// The job's tenant has jobs waiting in its lanes: one of its
		// slots is free now.
		if _, err := h.cfg.Lanes.Release(ctx, out.Tenant); err != nil {
			log.Warn().Err(err).Msg("release the tenant's held jobs (the sweep will)")
		}
	}
	ev := log.Info()
	if res.Status == jobs.StatusInternalError {
		ev = log.Error()
	}
	ev.Str("status", string(res.Status)).Str("reason", res.Reason).Int64("wall_ms", res.Usage.WallMS).Msg("job done")
	if h.cfg.Observe != nil {
		h.cfg.Observe(res)
	}
	return nil
}
