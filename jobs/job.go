package jobs

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
)

// Job is one request to run untrusted code. It is the JSON payload of an
// asynq task of type [TypeExec] and the unit a producer enqueues.
//
// Zero values mean "use the default": an empty ID is generated, an empty
// Queue is [QueueDefault], an empty Isolation is [IsolationReuse] and a zero
// limit is the operator's default for that limit (see [Policy]). Use
// [Policy.Validate] then [Policy.Normalize] before handing a Job to anything
// that runs it; [Client.Enqueue] does both.
type Job struct {
	// ID identifies the job and its result. It is the asynq task ID, so
	// enqueueing twice with one ID runs the job once. Allowed characters are
	// [A-Za-z0-9_.:-], 1 to 128 of them, and neither "." nor "..". Optional
	// at enqueue: if empty, a random 128-bit hex ID is generated ([NewID]).
	ID string `json:"id,omitempty"`

	// Lang names the language: a canonical name or an alias listed in
	// [Policy.Languages] (matched case-insensitively). Normalize replaces an
	// alias with the canonical name. Required.
	Lang string `json:"lang"`

	// Code is the program's source text. Required, at most
	// [Policy.MaxCodeBytes] bytes (default 1 MiB).
	Code string `json:"code"`

	// Stdin is written to the program's standard input, which is then
	// closed. Empty means the program reads EOF at once.
	Stdin string `json:"stdin,omitempty"`

	// Args are extra command-line arguments for the program, after the
	// language's own argv. No element may contain a NUL byte.
	Args []string `json:"args,omitempty"`

	// Env holds extra environment variables for the program. Keys match
	// [A-Za-z_][A-Za-z0-9_]*; values may not contain NUL. The worker's own
	// environment is never passed through.
	Env map[string]string `json:"env,omitempty"`

	// Files are written into the work dir before the program starts.
	Files []File `json:"files,omitempty"`

	// OutputFiles are glob patterns (path.Match syntax, relative to the
	// work dir; "*" does not cross "/") of files to return as artifacts when
	// the program ends.
	OutputFiles []string `json:"output_files,omitempty"`

	// Libraries are packages to install before the run, in the language's
	// package manager syntax (for Python, pip requirement specifiers such as
	// "numpy==2.1"; see langs.Installer for each grammar, checked by
	// Validate). Installation runs in its own container with network
	// access, once per set of libraries and engine (see Result.Install);
	// the run step never has network.
	Libraries []string `json:"libraries,omitempty"`

	// PlotFormats are the formats captured plots are written in: "png"
	// (the default) and "svg". Plotly figures are always HTML.
	PlotFormats []string `json:"plot_formats,omitempty"`

	// Limits caps the resources of the run. Zero fields take the operator's
	// defaults; no field may exceed the operator's cap.
	Limits Limits `json:"limits,omitzero"`

	// Isolation selects container reuse: "reuse" (default) or "fresh".
	Isolation Isolation `json:"isolation,omitempty"`

	// Environment runs the job in another image than its language's:
	// "NAME" for an environment built from a recipe (docs/environments.md),
	// "image:REF" for an image present on the engine that the operator's
	// --image-allow admits. Empty: the language's own image.
	Environment string `json:"environment,omitempty"`

	// Network lets the run reach the listed destinations through the
	// worker's egress proxy; nil (the default): no network at all.
	Network *NetworkPolicy `json:"network,omitempty"`

	// Queue selects the priority queue: "critical", "default" (default) or
	// "batch".
	Queue Queue `json:"queue,omitempty"`

	// Tags are free-form labels copied into the Result, for the producer's
	// bookkeeping. At most [Policy.MaxTags] entries.
	Tags map[string]string `json:"tags,omitempty"`

	// Stream sends the job's output live while it runs, to the Redis
	// Stream "<prefix>:stream:<id>", where [Client.Stream] (and `enqueue
	// run --follow`, `enqueue logs`) read it. The final Result is the same
	// either way.
	Stream bool `json:"stream,omitempty"`

	// Tenant names the owner of the job. Jobs of different tenants never
	// share a container. Same charset as ID, at most 64 bytes; empty is the
	// anonymous tenant.
	Tenant string `json:"tenant,omitempty"`

	// MaxRetry is how many times an infrastructure fault (never a user-code
	// outcome) may be retried. Nil means [Policy.DefaultMaxRetry] (default
	// 3); at most [Policy.MaxRetryCap] (default 10).
	MaxRetry *int `json:"max_retry,omitempty"`

	// Tests make the job a judged one (see [TestCase]): the program is
	// compiled once and run once per case, and the Result has a verdict.
	// At most [Policy.MaxTests].
	Tests []TestCase `json:"tests,omitempty"`

	// Judge says how the cases are judged; nil is line comparison,
	// stopping at the first failed case.
	Judge *JudgeSpec `json:"judge,omitempty"`

	// TraceParent and TraceState are the W3C trace context
	// (https://www.w3.org/TR/trace-context/) of the producer's span that
	// enqueued the job: the worker's spans of the job are its children.
	// The producer clients fill them from their context (the API from
	// the request's traceparent header); set them by hand only to join a
	// trace of your own. See [MaxTraceParentBytes], [MaxTraceStateBytes].
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// File is an input file written into the work dir before the run. Its
// content comes from exactly one of ContentB64 and Key; with neither, the
// file is created empty.
type File struct {
	// Path is relative to the work dir, slash-separated, at most 1024 bytes
	// with components of at most 255 bytes. It may not be absolute, leave
	// the work dir, contain NUL or control characters, or name the same file
	// as another entry.
	Path string `json:"path"`

	// ContentB64 is the inline content, base64 in JSON (standard encoding,
	// as encoding/json writes []byte). All inline files of a job together
	// are at most [Policy.MaxInlineFileBytes] bytes (default 10 MiB).
	ContentB64 []byte `json:"content_b64,omitempty"`

	// Key names an input object to copy in instead of inline content,
	// relative to the job's inputs area in the artifact store: object
	// "<inputs prefix>/tenants/<tenant>/<key>" for a job of a tenant,
	// "<inputs prefix>/shared/<key>" otherwise (the worker's
	// --inputs-prefix, default "sandq-inputs"). A clean relative path of at
	// most 1024 bytes: no leading "/", no empty, "." or ".." component. A
	// job can read neither another tenant's inputs nor any job's
	// artifacts; a key with no object ends the job rejected.
	Key string `json:"key,omitempty"`

	// Mode is the file's permission bits (0 to 0o777; write 493 in JSON for
	// 0o755). Zero means 0o644. Setuid, setgid and sticky bits are refused.
	Mode uint32 `json:"mode,omitempty"`
}

// Queue is a logical priority queue. The asynq queue name is derived from
// it by [AsynqQueue].
type Queue string

// The queues, highest priority first.
const (
	QueueCritical Queue = "critical"
	QueueDefault  Queue = "default"
	QueueBatch    Queue = "batch"
)

// Queues lists the queues, highest priority first.
func Queues() []Queue { return []Queue{QueueCritical, QueueDefault, QueueBatch} }

// Isolation selects how a job's container is shared.
type Isolation string

const (
	// IsolationReuse (the default) runs the job in a pooled container that
	// served earlier jobs of the same pool key and is scrubbed and verified
	// between jobs.
	IsolationReuse Isolation = "reuse"
	// IsolationFresh runs the job in a container that no other job has used
	// or will use.
	IsolationFresh Isolation = "fresh"
)

// Status is the state of a job as stored in its [Result].
type Status string

// Final statuses: the job has ended and its Result will not change.
const (
	// StatusSucceeded: the program exited 0.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: the program exited non-zero or was killed by a signal
	// it did not get from the limits.
	StatusFailed Status = "failed"
	// StatusCompileError: the compile step failed; the run step did not run.
	StatusCompileError Status = "compile_error"
	// StatusTimeout: the wall-clock limit expired and the program was killed.
	StatusTimeout Status = "timeout"
	// StatusOOM: the kernel's OOM killer killed the program (read from the
	// cgroup, never inferred from exit code 137 alone).
	StatusOOM Status = "oom"
	// StatusOutputLimit: the program was stopped for exceeding an output
	// limit.
	StatusOutputLimit Status = "output_limit"
	// StatusRejected: the job was invalid or refused by policy, or its
	// payload could not be decoded. It never ran.
	StatusRejected Status = "rejected"
	// StatusCanceled: a producer canceled the job.
	StatusCanceled Status = "canceled"
	// StatusInternalError: infrastructure failed and retries are spent.
	StatusInternalError Status = "internal_error"
)

// Non-final statuses.
const (
	// StatusQueued: the job waits in its queue (or in asynq's retry set).
	StatusQueued Status = "queued"
	// StatusRunning: a worker has taken the job.
	StatusRunning Status = "running"
)

// finalStatuses lists every final status: Final and the store's Lua
// script both read it, so the two cannot disagree.
var finalStatuses = []Status{
	StatusSucceeded, StatusFailed, StatusCompileError, StatusTimeout, StatusOOM,
	StatusOutputLimit, StatusRejected, StatusCanceled, StatusInternalError,
}

// FinalStatuses returns every final status.
func FinalStatuses() []Status { return slices.Clone(finalStatuses) }

// Final reports whether s is a final status, after which a job's Result
// never changes. Unknown statuses are not final.
func (s Status) Final() bool { return slices.Contains(finalStatuses, s) }

// NewID returns a random 128-bit job ID as 32 lowercase hex digits, from
// crypto/rand.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read crashes the program instead.
	return hex.EncodeToString(b[:])
}

// NetworkPolicy is what a run may reach (Job.Network, SessionSpec.Network).
type NetworkPolicy struct {
	// Allow lists destinations as "host:port", a host being a DNS name, a
	// "*." wildcard of a name's subdomains or an IP literal. The operator's
	// --run-allow-hosts and the key caps bound what may be listed.
	Allow []string `json:"allow,omitempty"`
}
