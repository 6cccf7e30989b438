package jobs

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// ErrShutdown is the cancel cause a worker gives its handlers' base context
// when it shuts down. A handler stopped by it writes no result: asynq has
// put the task back on its queue, and another worker will run it.
var ErrShutdown = errors.New("jobs: worker shutting down")

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Pool runs the programs. Required.
	Pool *sandbox.Pool
	// Store receives results. Required.
	Store *Store
	// Policy re-validates every job: a producer may not have used our
	// client. Zero fields use the Policy defaults.
	Policy Policy
	// ImagePrefix names the language images: <prefix><lang>:latest.
	// Default "sandq/".
	ImagePrefix string
	// Worker names this worker in results. Default host-pid.
	Worker string
	// Logger gets one line per job. Default: discard.
	Logger zerolog.Logger
	// Observe, if set, is called with every final result this worker writes.
	Observe func(Result)
	// Artifacts stores plots and output files, and serves input files by
	// key. Nil disables both: jobs asking for them are rejected.
	Artifacts artifacts.Store
	// ArtifactPrefix starts every artifact key: <prefix>/<job id>/<name>.
	// Default "sandq".
	ArtifactPrefix string
	// MaxArtifacts caps the files kept per job. Default 32.
	MaxArtifacts int
	// MaxArtifactBytes caps their total size per job. Default 32 MiB.
	MaxArtifactBytes int64
	// UploadAttempts is how often an upload is tried, with exponential
	// backoff from UploadBackoff. Defaults 4 and 500 ms.
	UploadAttempts int
	UploadBackoff  time.Duration
	// Install configures library installs (mirrors, CA bundle, limits).
	Install InstallConfig
}

// PlotsDir is where language hooks write captured plots inside the
// sandbox; the agent returns its files as plot artifacts.
const PlotsDir = "/tmp/sandq-plots"

// Handler is the asynq handler for TypeExec tasks: it turns a task into a
// sandbox run and the run into a Result.
type Handler struct {
	cfg      HandlerConfig
	lim      sandbox.Policy
	imageIDs imageIDs
}

var _ asynq.Handler = (*Handler)(nil)

// NewHandler checks cfg and returns a Handler.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Pool == nil || cfg.Store == nil {
		return nil, errors.New("jobs: HandlerConfig needs Pool and Store")
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	cfg.ImagePrefix = cmp.Or(cfg.ImagePrefix, "sandq/")
	cfg.ArtifactPrefix = cmp.Or(cfg.ArtifactPrefix, "sandq")
	cfg.MaxArtifacts = cmp.Or(cfg.MaxArtifacts, 32)
	cfg.MaxArtifactBytes = cmp.Or(cfg.MaxArtifactBytes, 32*MiB)
	cfg.UploadAttempts = cmp.Or(cfg.UploadAttempts, 4)
	cfg.UploadBackoff = cmp.Or(cfg.UploadBackoff, 500*time.Millisecond)
	cfg.Install = cfg.Install.withDefaults()
	if err := cfg.Install.Mirrors.Validate(); err != nil {
		return nil, err
	}
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		cfg.Worker = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return &Handler{cfg: cfg, lim: SandboxPolicy(cfg.Policy)}, nil
}

// SandboxPolicy converts job-level defaults and caps to the sandbox's.
func SandboxPolicy(p Policy) sandbox.Policy {
	p = p.WithDefaults()
	return sandbox.Policy{Defaults: p.DefaultLimits.Sandbox(), Caps: p.MaxLimits.Sandbox()}
}

// Sandbox converts job limits (JSON units) to sandbox limits.
func (l Limits) Sandbox() sandbox.Limits {
	return sandbox.Limits{
		Timeout:       time.Duration(l.TimeoutMS) * time.Millisecond,
		MemoryBytes:   l.MemoryMB * MiB,
		CPUs:          l.CPUs,
		Pids:          l.Pids,
		WorkDirBytes:  l.DiskMB * MiB,
		TmpBytes:      l.TmpMB * MiB,
		OutputBytes:   int(l.OutputBytes),
		NoFile:        uint64(max(l.Nofile, 0)),
		FileSizeBytes: uint64(max(l.FileSizeMB, 0) * MiB),
	}
}

// ProcessTask implements asynq.Handler. User-code outcomes (failures,
// timeouts, OOM kills) are results and return nil. Invalid jobs end
// rejected, once. Infrastructure faults return an error so asynq retries
// with backoff; the last attempt writes internal_error with the reason.
func (h *Handler) ProcessTask(ctx context.Context, t *asynq.Task) (err error) {
	id, _ := asynq.GetTaskID(ctx)
	log := h.cfg.Logger.With().Str("job_id", id).Logger()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("jobs: handler panic: %v\n%s", p, debug.Stack())
			err = h.infraFailure(ctx, id, Result{ID: id}, err, log)
		}
	}()

	job, err := DecodeTask(t)
	if err == nil {
		if job.ID != id {
			err = fmt.Errorf("%w: payload id %q does not match task id %q", ErrPoison, job.ID, id)
		} else if verr := h.cfg.Policy.Validate(&job); verr != nil {
			err = fmt.Errorf("%w: %w", ErrPoison, verr)
		}
	}
	if err != nil {
		h.final(ctx, Result{ID: id, Status: StatusRejected, Reason: err.Error()}, log)
		log.Info().Err(err).Msg("job rejected")
		return err // wraps asynq.SkipRetry: archived once, never retried
	}
	if l, ok := langs.Lookup(job.Lang); ok {
		langDefaults(&job.Limits, l.Limits)
	}
	h.cfg.Policy.Normalize(&job)
	log = log.With().Str("lang", job.Lang).Logger()

	base, _ := h.cfg.Store.Get(ctx, id)
	retry, _ := asynq.GetRetryCount(ctx)
	res := Result{
		ID: id, Status: StatusRunning, Lang: job.Lang, Queue: job.Queue, Tags: job.Tags,
		EnqueuedAt: base.EnqueuedAt, StartedAt: time.Now().UTC(), Attempts: retry + 1, Worker: h.cfg.Worker,
	}
	if _, written, err := h.cfg.Store.Put(ctx, res); err != nil {
		return h.infraFailure(ctx, id, res, err, log)
	} else if !written {
		log.Info().Msg("job already final; not run again")
		return nil
	}
	if canceled, _ := h.cfg.Store.CancelRequested(ctx, id); canceled {
		res.Status, res.Reason = StatusCanceled, "canceled before it started"
		h.final(ctx, res, log)
		return nil
	}

	var set libs
	if len(job.Libraries) > 0 {
		lang, _ := langs.Lookup(job.Lang)
		var failed string
		set, res.Install, failed, err = h.installLibs(ctx, job, lang)
		switch {
		case errors.Is(err, errInfra) && errors.Is(context.Cause(ctx), ErrShutdown):
			return err // requeued by asynq; no result
		case errors.Is(err, errInfra):
			return h.infraFailure(ctx, id, res, err, log)
		case err != nil:
			res.Status, res.Reason = StatusRejected, err.Error()
			h.final(ctx, res, log)
			return fmt.Errorf("%w: %w", ErrPoison, err)
		case failed != "":
			res.Status, res.Reason, res.FinishedAt = StatusFailed, failed, time.Now().UTC()
			h.final(ctx, res, log)
			return nil
		}
	}
	spec, req, err := h.plan(ctx, job, set)
	if errors.Is(err, errInfra) {
		return h.infraFailure(ctx, id, res, err, log)
	}
	if err != nil {
		res.Status, res.Reason = StatusRejected, err.Error()
		h.final(ctx, res, log)
		return fmt.Errorf("%w: %w", ErrPoison, err)
	}
	out, err := h.cfg.Pool.Run(ctx, spec, req)
	if err != nil {
		if errors.Is(context.Cause(ctx), ErrShutdown) {
			return err // requeued by asynq; no result
		}
		return h.infraFailure(ctx, id, res, err, log)
	}
	last := out.Last()
	if last.Canceled {
		switch canceled, _ := h.cfg.Store.CancelRequested(context.WithoutCancel(ctx), id); {
		case errors.Is(context.Cause(ctx), ErrShutdown):
			log.Info().Msg("job interrupted by shutdown; requeued")
			return ErrShutdown
		case !canceled:
			return h.infraFailure(ctx, id, res, fmt.Errorf("jobs: run interrupted: %w", context.Cause(ctx)), log)
		}
	}
	h.fill(&res, job, out)
	h.upload(ctx, &res, out, log)
	h.final(ctx, res, log)
	return nil
}

// errInfra marks a planning error that is not the job's fault (the
// artifact store is down), so the task is retried.
var errInfra = errors.New("infrastructure")

// upload stores the collected files and lists them in the result. A failed
// upload never changes the program's status: it is named in
// ArtifactErrors, and what the collector dropped is named in
// DroppedArtifacts.
func (h *Handler) upload(ctx context.Context, res *Result, out agent.RunResult, log zerolog.Logger) {
	res.DroppedArtifacts = append(res.DroppedArtifacts, out.Dropped...)
	for _, a := range out.Artifacts {
		key, err := artifacts.Key(h.cfg.ArtifactPrefix, res.ID, a.Name)
		if err != nil {
			res.ArtifactErrors = append(res.ArtifactErrors, fmt.Sprintf("%s: %v", a.Name, err))
			continue
		}
		ct := artifacts.ContentType(a.Name)
		err = artifacts.Retry(ctx, h.cfg.UploadAttempts, h.cfg.UploadBackoff, func() error {
			return h.cfg.Artifacts.Put(ctx, key, bytes.NewReader(a.Data), int64(len(a.Data)), ct)
		})
		if err != nil {
			log.Error().Err(err).Str("artifact", a.Name).Msg("upload artifact")
			res.ArtifactErrors = append(res.ArtifactErrors, fmt.Sprintf("%s: %v", a.Name, err))
			continue
		}
		url, err := h.cfg.Artifacts.URL(ctx, key)
		if err != nil {
			res.ArtifactErrors = append(res.ArtifactErrors, fmt.Sprintf("%s: %v", a.Name, err))
		}
		res.Artifacts = append(res.Artifacts, Artifact{
			Name: a.Name, Kind: a.Kind, Key: key, URL: url, Size: int64(len(a.Data)), ContentType: ct,
		})
	}
}

// langDefaults fills the limits a job left zero with its language's own
// defaults, ahead of the operator's (a C++ compiler needs more memory than
// the general default); the operator's caps still bound them.
func langDefaults(l *Limits, d langs.Limits) {
	l.MemoryMB = cmp.Or(l.MemoryMB, d.MemoryMB)
	l.Pids = cmp.Or(l.Pids, d.Pids)
	l.TimeoutMS = cmp.Or(l.TimeoutMS, d.TimeoutMS)
}

// plan turns a job into a pool spec and an agent request.
func (h *Handler) plan(ctx context.Context, job Job, set libs) (sandbox.Spec, *agent.RunRequest, error) {
	lang, ok := langs.Lookup(job.Lang)
	if !ok {
		return sandbox.Spec{}, nil, fmt.Errorf("unknown language %q", job.Lang)
	}
	lim, err := h.lim.Effective(job.Limits.Sandbox())
	if err != nil {
		return sandbox.Spec{}, nil, err
	}
	files := []agent.File{{Path: lang.Source, Data: []byte(job.Code)}}
	for _, f := range job.Files {
		if f.Key != "" {
			data, err := h.fetch(ctx, f.Key)
			if err != nil {
				return sandbox.Spec{}, nil, fmt.Errorf("input file %q: %w", f.Path, err)
			}
			f.ContentB64 = data
		}
		if f.Path == lang.Source {
			return sandbox.Spec{}, nil, fmt.Errorf("input file %q: the program's own source file has this name", f.Path)
		}
		files = append(files, agent.File{Path: f.Path, Data: f.ContentB64, Mode: f.Mode})
	}
	// The set's environment comes first: the job's own env may extend or
	// override it.
	env := slices.Clone(set.env)
	for k, v := range job.Env {
		env = append(env, k+"="+v)
	}
	if h.cfg.Artifacts != nil {
		env = append(env, "SANDQ_PLOTS_DIR="+PlotsDir, "SANDQ_PLOT_FORMATS="+strings.Join(job.PlotFormats, ","))
	}
	step := func(name string, argv []string, timeout time.Duration) agent.Step {
		return agent.Step{
			Name: name, Argv: argv, Env: env, Timeout: timeout,
			OutputLimit: lim.OutputBytes, Rlimits: lim.Rlimits(), StopOnFailure: name != "run",
		}
	}
	var steps []agent.Step
	for _, argv := range set.prepare {
		steps = append(steps, step("prepare", argv, 30*time.Second))
	}
	if len(lang.Compile) > 0 {
		steps = append(steps, step("compile", lang.Compile, lim.Timeout+30*time.Second))
	}
	run := step("run", append(append([]string(nil), lang.Run...), job.Args...), lim.Timeout)
	run.Stdin = []byte(job.Stdin)
	steps = append(steps, run)

	mode := sandbox.ModeReuse
	if job.Isolation == IsolationFresh {
		mode = sandbox.ModeFresh
	}
	spec := sandbox.Spec{Image: lang.Image(h.cfg.ImagePrefix), Limits: lim.Container(), Tenant: job.Tenant, Mode: mode, Volume: set.volume}
	req := &agent.RunRequest{Files: files, Steps: steps}
	if h.cfg.Artifacts != nil {
		req.Collect = &agent.Collect{
			Globs: job.OutputFiles, PlotsDir: PlotsDir,
			MaxFiles: h.cfg.MaxArtifacts, MaxBytes: h.cfg.MaxArtifactBytes,
		}
	} else if len(job.OutputFiles) > 0 {
		return sandbox.Spec{}, nil, errors.New("output_files need an artifact store, and this worker has none")
	}
	return spec, req, nil
}

// fetch reads an input file from the artifact store. A missing key is the
// job's fault; a store that does not answer is not.
func (h *Handler) fetch(ctx context.Context, key string) ([]byte, error) {
	if h.cfg.Artifacts == nil {
		return nil, errors.New("files by object key need an artifact store, and this worker has none")
	}
	var data []byte
	err := artifacts.Retry(ctx, h.cfg.UploadAttempts, h.cfg.UploadBackoff, func() error {
		rc, err := h.cfg.Artifacts.Get(ctx, key)
		if errors.Is(err, artifacts.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = io.ReadAll(io.LimitReader(rc, h.cfg.Policy.MaxInlineFileBytes+1))
		return err
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: artifact store: %v", errInfra, err)
	case data == nil:
		return nil, fmt.Errorf("no object %q in the artifact store", key)
	case int64(len(data)) > h.cfg.Policy.MaxInlineFileBytes:
		return nil, fmt.Errorf("object %q is larger than the %d-byte cap on input files", key, h.cfg.Policy.MaxInlineFileBytes)
	}
	return data, nil
}

// fill sets the final status and output from what the agent reported.
func (h *Handler) fill(res *Result, job Job, out agent.RunResult) {
	res.FinishedAt = time.Now().UTC()
	if out.FilesError != "" {
		res.Status, res.Reason = StatusRejected, "input files: "+out.FilesError
		return
	}
	for _, st := range out.Steps {
		if st.Name == "compile" {
			c := &StepResult{Usage: usage(st)}
			c.ExitCode, c.Signal = exit(st)
			c.Output = output(st)
			res.Compile = c
		}
	}
	last := out.Last()
	if last.Name == "compile" && !last.OK() {
		res.Status, res.Reason = StatusCompileError, "compilation failed"
		res.ExitCode, res.Signal = exit(last)
		switch {
		case last.TimedOut:
			res.Status, res.Reason = StatusTimeout, "compilation timed out"
		case last.OOMKilled:
			res.Status, res.Reason = StatusOOM, "compiler killed: out of memory"
		}
		return
	}
	res.Output = output(last)
	res.Usage = usage(last)
	res.ExitCode, res.Signal = exit(last)
	switch {
	case last.Canceled:
		res.Status, res.Reason = StatusCanceled, "canceled while running"
	case !last.Started:
		res.Status, res.Reason = StatusFailed, last.Error
	case last.OOMKilled && last.ExitCode != 0:
		res.Status, res.Reason = StatusOOM, fmt.Sprintf("killed by the OOM killer (memory limit %d MiB)", job.Limits.MemoryMB)
	case last.TimedOut:
		res.Status, res.Reason = StatusTimeout, fmt.Sprintf("wall-clock limit of %s exceeded; every process was killed", time.Duration(job.Limits.TimeoutMS)*time.Millisecond)
	case last.Stdout.Truncated || last.Stderr.Truncated:
		res.Status, res.Reason = StatusOutputLimit, fmt.Sprintf("output exceeded %d bytes per stream; head and tail kept", job.Limits.OutputBytes)
	case last.ExitCode == 0:
		res.Status = StatusSucceeded
	default:
		res.Status = StatusFailed
		if last.Signal != 0 {
			res.Reason = "killed by " + res.Signal
		} else {
			res.Reason = fmt.Sprintf("exit status %d", last.ExitCode)
		}
	}
}

// TruncationMarker is put between the head and the tail of a truncated
// stream; %d is the number of bytes left out.
const TruncationMarker = "\n[... sandq: %d bytes omitted ...]\n"

func joinOutput(o agent.Output) []byte {
	if !o.Truncated {
		return o.Head
	}
	omitted := o.Total - int64(len(o.Head)) - int64(len(o.Tail))
	b := append([]byte(nil), o.Head...)
	b = fmt.Appendf(b, TruncationMarker, omitted)
	return append(b, o.Tail...)
}

func output(st agent.StepResult) Output {
	var o Output
	o.SetStdout(joinOutput(st.Stdout))
	o.SetStderr(joinOutput(st.Stderr))
	o.StdoutTruncated, o.StdoutTotalBytes = st.Stdout.Truncated, st.Stdout.Total
	o.StderrTruncated, o.StderrTotalBytes = st.Stderr.Truncated, st.Stderr.Total
	return o
}

func usage(st agent.StepResult) Usage {
	return Usage{WallMS: st.WallNs / 1e6, CPUMS: st.CPUNs / 1e6, MaxRSSKB: st.MaxRSSKB}
}

func exit(st agent.StepResult) (*int, string) {
	if !st.Started {
		return nil, ""
	}
	if st.Signal != 0 {
		return nil, signalName(st.Signal)
	}
	code := st.ExitCode
	return &code, ""
}

func signalName(n int) string {
	s := syscall.Signal(n)
	names := map[syscall.Signal]string{
		syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT",
		syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
		syscall.SIGFPE: "SIGFPE", syscall.SIGBUS: "SIGBUS", syscall.SIGILL: "SIGILL",
		syscall.SIGPIPE: "SIGPIPE", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP",
	}
	if name, ok := names[s]; ok {
		return name
	}
	return fmt.Sprintf("signal %d (%s)", n, strings.ToLower(s.String()))
}

// infraFailure handles a fault that is not the job's: on the last attempt it
// writes internal_error with the reason and ends the task; before that it
// returns the error so asynq retries with backoff.
//
// A fault that is only the task's context ending because the job was
// canceled (Cancel while the handler acquires a container or installs
// libraries) is no fault: the job ends canceled at once, not after a
// retry's backoff.
func (h *Handler) infraFailure(ctx context.Context, id string, res Result, err error, log zerolog.Logger) error {
	if ctx.Err() != nil {
		if canceled, _ := h.cfg.Store.CancelRequested(context.WithoutCancel(ctx), id); canceled {
			res.ID = id
			res.Status, res.Reason = StatusCanceled, "canceled"
			res.FinishedAt = time.Now().UTC()
			h.final(ctx, res, log)
			return nil
		}
	}
	retry, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if retry < maxRetry {
		log.Error().Err(err).Int("attempt", retry+1).Int("max_retry", maxRetry).Msg("infrastructure fault; will retry")
		return err
	}
	res.ID = id
	res.Status = StatusInternalError
	res.Reason = fmt.Sprintf("infrastructure fault after %d attempts: %v", retry+1, err)
	res.FinishedAt = time.Now().UTC()
	h.final(ctx, res, log)
	return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
}

// final writes a final result with a detached, bounded context: the task's
// context may already be canceled.
func (h *Handler) final(ctx context.Context, res Result, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if res.FinishedAt.IsZero() {
		res.FinishedAt = time.Now().UTC()
	}
	stored, written, err := h.cfg.Store.Put(ctx, res)
	if err != nil {
		log.Error().Err(err).Msg("store result")
		return
	}
	if !written {
		log.Info().Str("status", string(stored.Status)).Msg("another final result was stored first")
		return
	}
	ev := log.Info()
	if res.Status == StatusInternalError {
		ev = log.Error()
	}
	ev.Str("status", string(res.Status)).Str("reason", res.Reason).Int64("wall_ms", res.Usage.WallMS).Msg("job done")
	if h.cfg.Observe != nil {
		h.cfg.Observe(res)
	}
}
