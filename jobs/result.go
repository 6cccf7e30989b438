package jobs

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Result is the outcome of a job, stored as JSON under
// "<prefix>:result:<id>" (see [Store]). While the job waits or runs the
// stored Result has status "queued" or "running"; the first final Result
// written is never replaced.
type Result struct {
	// ID is the job ID.
	ID string `json:"id"`

	// Status is where the job stands; see [Status] for each value.
	Status Status `json:"status"`

	// ExitCode is the run step's exit code; nil if the program did not exit
	// by itself (killed by a signal, never started, still running).
	ExitCode *int `json:"exit_code,omitempty"`

	// Signal names the signal that ended the program, such as "SIGKILL";
	// empty if none.
	Signal string `json:"signal,omitempty"`

	// Reason says why, in words, for statuses that need it: rejected
	// (which rule), internal_error (which fault), canceled (who, when),
	// timeout (which limit). Empty for plain succeeded/failed.
	Reason string `json:"reason,omitempty"`

	// Output holds the run step's stdout and stderr.
	Output

	// Install is the installation of the job's libraries; nil when it
	// lists none. A failed install ends the job "failed" with the
	// installer's output here, and the program does not run.
	Install *InstallResult `json:"install,omitempty"`

	// Compile is the compile step, for compiled languages; nil when there
	// was none.
	Compile *StepResult `json:"compile,omitempty"`

	// Usage is what the run step consumed.
	Usage Usage `json:"usage,omitzero"`

	// Network is what the run asked of its network policy's egress proxy
	// (Job.Network): one entry per destination and outcome, in the order
	// first asked, at most [MaxNetworkEntries]. Empty for a run without a
	// network policy, or one that made no connection.
	Network []NetworkUse `json:"network,omitempty"`

	// Attempts counts the attempts a worker started, this one included; 0
	// while queued. More than 1 only after infrastructure faults.
	Attempts int `json:"attempts,omitempty"`

	// Worker identifies the worker that wrote this Result; empty if a
	// client wrote it (queued, or canceled while queued).
	Worker string `json:"worker,omitempty"`

	// Tenant is the job's owner ([Job].Tenant): every read, cancel,
	// stream and artifact lookup of a tenant's caller checks it. Empty
	// for the anonymous tenant.
	Tenant string `json:"tenant,omitempty"`

	// Lang is the job's canonical language name.
	Lang string `json:"lang,omitempty"`

	// Queue is the logical queue the job was enqueued on.
	Queue Queue `json:"queue,omitempty"`

	// Tags are the job's tags, copied.
	Tags map[string]string `json:"tags,omitempty"`

	// EnqueuedAt is when the job was enqueued (RFC 3339 with nanoseconds in
	// JSON); zero (omitted) if unknown.
	EnqueuedAt time.Time `json:"enqueued_at,omitzero"`

	// StartedAt is when the current or last attempt started; zero (omitted)
	// while queued.
	StartedAt time.Time `json:"started_at,omitzero"`

	// FinishedAt is when the job reached its final status; zero (omitted)
	// until then.
	FinishedAt time.Time `json:"finished_at,omitzero"`

	// Artifacts are the files returned by the run: plots and the job's
	// output_files matches, stored in the artifact store.
	Artifacts []Artifact `json:"artifacts,omitempty"`

	// ArtifactErrors describes artifacts that matched but could not be
	// stored, one message each.
	ArtifactErrors []string `json:"artifact_errors,omitempty"`

	// DroppedArtifacts names files that matched but were left out, with
	// the reason: a count or size cap was reached, or the file's name
	// could not be its own artifact's (not valid UTF-8, under the
	// reserved ".sandq/", or colliding with another artifact's name).
	DroppedArtifacts []string `json:"dropped_artifacts,omitempty"`

	// Verdict is a judged job's verdict (a job with Tests): accepted when
	// every case is, else the first failed case's (compile_error when the
	// program did not compile). Status follows it ([Verdict.Status]).
	Verdict Verdict `json:"verdict,omitempty"`

	// Score is the share of a judged job's cases accepted (0 to 1).
	Score *float64 `json:"score,omitempty"`

	// Cases are a judged job's cases' outcomes, in the order of its Tests.
	Cases []CaseResult `json:"cases,omitempty"`

	// Provenance is what a judged job ran on.
	Provenance *Provenance `json:"provenance,omitempty"`
}

// StepResult is the outcome of a step before the run, such as compile.
type StepResult struct {
	// ExitCode is the step's exit code; nil if it was killed by a signal.
	ExitCode *int `json:"exit_code,omitempty"`

	// Signal names the signal that ended the step; empty if none.
	Signal string `json:"signal,omitempty"`

	// Output holds the step's stdout and stderr.
	Output

	// Usage is what the step consumed.
	Usage Usage `json:"usage,omitzero"`

	// Cached reports that the step did not run for this job: a judged
	// job's compile whose result and work dir came from the worker's
	// compile cache (an identical compile of the same tenant's), as that
	// compile left them.
	Cached bool `json:"cached,omitempty"`
}

// InstallResult is the outcome of installing a job's libraries.
type InstallResult struct {
	// Cached reports that this set of libraries was installed before (for
	// an earlier job, on this worker's engine): no installer ran.
	Cached bool `json:"cached"`

	// TookMS is how long making the libraries available took, in
	// milliseconds: the whole install, or the check that found it done.
	TookMS int64 `json:"took_ms"`

	// Volume names the engine volume that holds the installed set.
	Volume string `json:"volume,omitempty"`

	// Step is the installer's last step: on failure the one that failed,
	// with its output. Nil when Cached.
	Step *StepResult `json:"step,omitempty"`
}

// Output is the captured stdout and stderr of one step. Its fields are
// inlined into the JSON of [Result] and [StepResult].
//
// Each stream is a JSON string: the bytes themselves when they are valid
// UTF-8 (encoding "" or "utf-8"), otherwise their standard base64 (encoding
// "base64"). Use [EncodeOutput] to fill a stream and [Output.StdoutBytes] /
// [Output.StderrBytes] to get the exact bytes back.
type Output struct {
	// Stdout is what was kept of standard output; see StdoutEncoding.
	Stdout string `json:"stdout"`

	// StdoutEncoding is "" (or "utf-8") when Stdout is the text itself,
	// "base64" when the bytes were not valid UTF-8.
	StdoutEncoding Encoding `json:"stdout_encoding,omitempty"`

	// StdoutTruncated reports that bytes were dropped from the middle of
	// standard output because of limits.output_bytes.
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`

	// StdoutTotalBytes is how many bytes the program wrote to standard
	// output, kept or not.
	StdoutTotalBytes int64 `json:"stdout_total_bytes,omitempty"`

	// StdoutArtifact, when set, names the artifact (in Result.Artifacts,
	// kind "output") that holds the whole kept standard output: the Result
	// would have passed the worker's cap on a stored Result's size
	// (--max-result-bytes), so Stdout holds only its first bytes.
	StdoutArtifact string `json:"stdout_artifact,omitempty"`

	// Stderr is what was kept of standard error; see StderrEncoding.
	Stderr string `json:"stderr"`

	// StderrEncoding is "" (or "utf-8") or "base64", as for stdout.
	StderrEncoding Encoding `json:"stderr_encoding,omitempty"`

	// StderrTruncated reports that bytes were dropped from standard error.
	StderrTruncated bool `json:"stderr_truncated,omitempty"`

	// StderrTotalBytes is how many bytes the program wrote to standard
	// error, kept or not.
	StderrTotalBytes int64 `json:"stderr_total_bytes,omitempty"`

	// StderrArtifact is StdoutArtifact for standard error.
	StderrArtifact string `json:"stderr_artifact,omitempty"`
}

// Usage is what one step consumed.
type Usage struct {
	// WallMS is elapsed wall-clock time in milliseconds.
	WallMS int64 `json:"wall_ms,omitempty"`

	// CPUMS is user plus system CPU time in milliseconds, over every process
	// of the step.
	CPUMS int64 `json:"cpu_ms,omitempty"`

	// MaxRSSKB is the peak resident set size in KiB.
	MaxRSSKB int64 `json:"max_rss_kb,omitempty"`

	// Prestarted is set when the program ran in an interpreter started
	// before the job arrived (Python, JavaScript or Ruby in a warm
	// container), or, in the compile step's usage, when the compiler was
	// (TypeScript's); the worker's --no-prestart turns it off. Its
	// start-up is then in CPUMS but not in WallMS.
	Prestarted bool `json:"prestarted,omitempty"`
}

// Artifact is one file a run returned, held in the artifact store.
type Artifact struct {
	// Name is the file's path relative to the work dir, or
	// "plots/plot-NNN.png" (.svg, .html) for a captured plot.
	Name string `json:"name"`

	// Kind is "plot", "file", or "output" for a step's stream moved out of
	// a Result too large to store whole (see Output.StdoutArtifact).
	Kind string `json:"kind"`

	// Key is the object key in the artifact store ("<prefix>/<job id>/<name>").
	Key string `json:"key"`

	// URL is a presigned GET URL for the S3 store, or the file's absolute
	// path for the local directory store.
	URL string `json:"url,omitempty"`

	// Size is the file size in bytes.
	Size int64 `json:"size"`

	// ContentType is the MIME type, such as "image/png".
	ContentType string `json:"content_type,omitempty"`
}

// Encoding says how an output stream's bytes are carried in a JSON string.
type Encoding string

const (
	// EncodingUTF8 marks a stream carried as text. The empty Encoding means
	// the same; [EncodeOutput] returns the empty one so the JSON omits it.
	EncodingUTF8 Encoding = "utf-8"
	// EncodingBase64 marks a stream carried as standard base64, used when
	// the bytes are not valid UTF-8.
	EncodingBase64 Encoding = "base64"
)

// EncodeOutput returns b as a JSON-safe string and its encoding: b itself
// and "" when b is valid UTF-8, standard base64 and [EncodingBase64]
// otherwise. [DecodeOutput] reverses it byte for byte.
func EncodeOutput(b []byte) (string, Encoding) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), EncodingBase64
}

// DecodeOutput returns the bytes that [EncodeOutput] turned into s and enc.
func DecodeOutput(s string, enc Encoding) ([]byte, error) {
	switch enc {
	case "", EncodingUTF8:
		return []byte(s), nil
	case EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("jobs: decode output: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("jobs: decode output: unknown encoding %q", enc)
}

// SetStdout stores b as the kept standard output, choosing its encoding.
// It does not touch StdoutTruncated or StdoutTotalBytes.
func (o *Output) SetStdout(b []byte) { o.Stdout, o.StdoutEncoding = EncodeOutput(b) }

// SetStderr stores b as the kept standard error, choosing its encoding.
func (o *Output) SetStderr(b []byte) { o.Stderr, o.StderrEncoding = EncodeOutput(b) }

// StdoutBytes returns the kept standard output, decoded byte-exact.
func (o *Output) StdoutBytes() ([]byte, error) { return DecodeOutput(o.Stdout, o.StdoutEncoding) }

// StderrBytes returns the kept standard error, decoded byte-exact.
func (o *Output) StderrBytes() ([]byte, error) { return DecodeOutput(o.Stderr, o.StderrEncoding) }

// LangVersion is a language's toolchain version as a worker read it from
// the language's image (see worker.PublishVersions); `enqueue langs` and
// the HTTP API list them.
type LangVersion struct {
	// Lang is the canonical language name.
	Lang string `json:"lang"`
	// Version is the toolchain's version line, such as "Python 3.11.2";
	// empty when it could not be read (Error says why).
	Version string `json:"version,omitempty"`
	// Error says why the version could not be read.
	Error string `json:"error,omitempty"`
	// Image and ImageID name the image it was read from.
	Image   string `json:"image"`
	ImageID string `json:"image_id,omitempty"`
	// Worker is the worker that read it, At when.
	Worker string    `json:"worker"`
	At     time.Time `json:"at"`
}

// EncodeJSON marshals v as one line of JSON without HTML escaping, so "<"
// in program output reads as "<" through redis-cli and in results files.
// Every writer of result JSON uses it.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Head returns s's first n bytes, or fewer when the n-th byte would split
// a UTF-8 character: then it ends before that character, so text cut by
// Head stays valid text. Bytes that are not UTF-8 are cut at n.
func Head[T ~string | ~[]byte](s T, n int) T {
	if len(s) <= n {
		return s
	}
	if n < 0 {
		n = 0
	}
	for start := n; start > 0 && start > n-utf8.UTFMax; start-- {
		if !utf8.RuneStart(s[start]) {
			continue
		}
		// s[start] begins the character that holds byte n, if any.
		if start < n {
			end := min(len(s), start+utf8.UTFMax)
			if r, size := utf8.DecodeRuneInString(string(s[start:end])); !(r == utf8.RuneError && size == 1) && start+size > n {
				return s[:start]
			}
		}
		break
	}
	return s[:n]
}
