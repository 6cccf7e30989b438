package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// ProtocolVersion is bumped on any incompatible change to the messages
// below. The worker refuses an agent that reports another version, so an
// image built with an old agent is discarded instead of misread.
const ProtocolVersion = 6

// MaxFrame caps one frame (its JSON body and bulk bytes; see Encoder).
// Output is capped by the agent long before this, so a larger frame means
// a broken peer.
const MaxFrame = 256 << 20

// bulkFlag, set in a frame's length, says that the JSON body is followed
// by a second length and that many bulk bytes (see Encoder).
const bulkFlag = 1 << 31

// Ops the worker sends.
const (
	OpRun = "run" // run the steps of one job
	// OpEgress carries a connection's data both ways (Request.Egress,
	// Response.Egress) during a run that asked for Egress.
	OpEgress = "egress"
	OpCancel = "cancel" // kill the running job (ID names the run request)
	OpScrub  = "scrub"  // kill everything, empty writable mounts, verify
	OpPing   = "ping"   // liveness, answered with Ready

	// Sessions (Request.Session, .Cell, .File, .Path): a live interpreter
	// in the container, run cell by cell. OpCancel with a cell's request
	// ID interrupts the cell (SIGINT) instead of killing it.
	OpSessionStart = "session_start" // start the driver; answered OpSessionReady or OpError
	OpCell         = "cell"          // run a cell; OpLive frames, then OpCellResult
	OpPutFile      = "put_file"      // write Request.File into the work dir; OpFileDone
	OpGetFile      = "get_file"      // read Request.Path; OpFileDone with Response.File
	OpListFiles    = "list_files"    // list Request.Path recursively; OpFileDone with Response.Files
)

// Ops the agent sends.
const (
	OpReady     = "ready"      // once at start and in answer to ping
	OpRunResult = "run_result" // the outcome of OpRun
	OpScrubbed  = "scrubbed"   // the outcome of a scrub (requested or after a run)
	OpArtifact  = "artifact"   // a chunk of a collected file, before its run's result
	OpOutput    = "output"     // a chunk of a step's kept output, before its run's result
	OpLive      = "live"       // live output of a running step (Step.Live)
	OpError     = "error"      // the request could not be carried out at all

	OpSessionReady = "session_ready" // the driver is up
	OpCellResult   = "cell_result"   // the outcome of OpCell
	OpFileDone     = "file_done"     // the outcome of a file op
)

// Request is a message from the worker to the agent.
type Request struct {
	// ID correlates a request with its answers. The worker numbers them.
	ID      uint64        `json:"id"`
	Op      string        `json:"op"`
	Run     *RunRequest   `json:"run,omitempty"`
	Egress  *EgressFrame  `json:"egress,omitempty"`
	Session *SessionStart `json:"session,omitempty"`
	Cell    *CellRequest  `json:"cell,omitempty"`
	File    *File         `json:"file,omitempty"`
	Path    string        `json:"path,omitempty"`
}

// Response is a message from the agent to the worker.
type Response struct {
	ID       uint64         `json:"id"`
	Op       string         `json:"op"`
	Error    string         `json:"error,omitempty"`
	Ready    *Ready         `json:"ready,omitempty"`
	Run      *RunResult     `json:"run,omitempty"`
	Scrub    *ScrubResult   `json:"scrub,omitempty"`
	Artifact *ArtifactChunk `json:"artifact,omitempty"`
	Output   *OutputChunk   `json:"output,omitempty"`
	Live     *LiveChunk     `json:"live,omitempty"`
	Egress   *EgressFrame   `json:"egress,omitempty"`
	Cell     *CellResult    `json:"cell,omitempty"`
	File     *File          `json:"file,omitempty"`
	Files    []FileInfo     `json:"files,omitempty"`
}

// SessionStart starts a session's driver: a long-lived interpreter run as
// the job uid, in its own session, that reads cells on fd 3 and answers on
// fd 4 (see langs/session). DriverFiles are written, root-owned and
// read-only to the job, into DriverDir; Files into the work dir.
type SessionStart struct {
	Driver      Step   `json:"driver"` // Timeout bounds the start
	DriverDir   string `json:"driver_dir"`
	DriverFiles []File `json:"driver_files"`
	Files       []File `json:"files,omitempty"`
	// MemoryLimit is as RunRequest's, for the session's whole life.
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// InterruptEvery, when set, makes an interrupt a SIGINT to the
	// driver's process group repeated at this interval until the cell
	// answers (or InterruptGrace ends the session); zero: one SIGINT.
	// See langs/session.Driver.
	InterruptEvery time.Duration `json:"interrupt_every,omitempty"`
	// InterruptNudge, when set with InterruptEvery, is the signal the
	// repeats send, to the driver process alone, instead of SIGINT to its
	// group (see langs/session.Driver). SIGURG, SIGWINCH, SIGUSR1 or
	// SIGUSR2.
	InterruptNudge int `json:"interrupt_nudge,omitempty"`
}

// CellRequest is one cell of code for the session's driver.
type CellRequest struct {
	Code        string        `json:"code"`
	Timeout     time.Duration `json:"timeout"`
	OutputLimit int           `json:"output_limit,omitempty"`
	Live        bool          `json:"live,omitempty"`
}

// CellResult is what a cell did. Reply is the driver's JSON reply line
// (langs/session.Reply), passed through; empty when the driver gave none.
// Ended is set when the interpreter is gone: the session is over.
type CellResult struct {
	Reply    json.RawMessage `json:"reply,omitempty"`
	Stdout   Output          `json:"stdout"`
	Stderr   Output          `json:"stderr"`
	TimedOut bool            `json:"timed_out,omitempty"`
	// Interrupted: the cell was interrupted (timeout or OpCancel).
	Interrupted bool  `json:"interrupted,omitempty"`
	WallNs      int64 `json:"wall_ns"`
	CPUNs       int64 `json:"cpu_ns"`
	MaxRSSKB    int64 `json:"max_rss_kb"`
	// Ended says why the session is over, when it is.
	Ended     string `json:"ended,omitempty"`
	OOMKilled bool   `json:"oom_killed,omitempty"`
}

// FileInfo is one entry of OpListFiles.
type FileInfo struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Dir     bool      `json:"dir,omitempty"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

// Live output. A step with Live set has its stdout and stderr sent while
// it runs, each stream apart, coalesced: a chunk goes when LiveChunkSize
// bytes are waiting, when LiveFlush has passed since the first of them, or
// when the stream has been quiet for LiveIdle (a program that prints a line
// and then works sends it within LiveIdle; one that prints without pause
// sends 16 KiB chunks at most every 50 ms). The agent never blocks the
// program for it: while the worker reads too slowly the bytes wait in a
// buffer of LiveBuffer per stream, and past that they are dropped and
// counted (the next chunk says how many). A stream stops at the step's
// OutputLimit with a chunk marked Limit; the step's result keeps its head
// and tail as always.
//
// LiveIdle is longer than a short program takes to exit after its last
// write. CPython flushes stdout early in its finalization and takes some
// milliseconds more to exit; at 5 ms the chunk of about half of print(1)'s
// runs went on its own while the program was still exiting, and that
// frame's write and relay (agent, containerd-shim, dockerd, the reader)
// took the CPU from the exit: +0.35 ms at p50 at c=1 through the pool.
// Now such a program's output goes with its result, in one write.
const (
	LiveChunkSize = 16 << 10
	LiveFlush     = 50 * time.Millisecond
	LiveIdle      = 20 * time.Millisecond
	LiveBuffer    = 256 << 10
)

// LiveChunk is live output of a running step (Response.Live). Chunks of one
// stream come in order; Offset is where Data starts in the stream, so a
// reader can tell a gap (Dropped bytes left out before Data) from a
// repeat.
type LiveChunk struct {
	// Step is the step's index in the run; Name its name ("compile", "run").
	Step int    `json:"step"`
	Name string `json:"name"`
	// Stream is "stdout" or "stderr".
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Data   []byte `json:"data,omitempty"`
	// Dropped counts the bytes left out just before Data (the worker read
	// too slowly).
	Dropped int64 `json:"dropped,omitempty"`
	// Limit marks the stream's last chunk: it reached the step's output
	// limit, and no more of it is sent live.
	Limit bool `json:"limit,omitempty"`
}

// OutputChunkSize is the most output bytes one OutputChunk carries.
const OutputChunkSize = 1 << 20

// OutputChunk is a piece of one step's kept output (Response.Output). The
// agent sends a step's output in chunks as soon as the step ends, and its
// RunResult then carries each stream's Total and Truncated without the
// bytes, which the receiver (sandbox.Container) puts back: the agent never
// holds a stream twice nor encodes one whole, so its memory stays within
// the budget the container has for it whatever the output caps.
type OutputChunk struct {
	// Step is the step's index in RunResult.Steps.
	Step int `json:"step"`
	// Stream is "stdout" or "stderr".
	Stream string `json:"stream"`
	// Tail marks a piece of the stream's tail; else of its head. Pieces
	// of each part come in order.
	Tail bool   `json:"tail,omitempty"`
	Data []byte `json:"data"`
}

// EgressFrame is a piece of one connection a step made to the run's
// Egress address: the agent accepts it inside the container (which has no
// network) and the worker, at the other end, decides where it may go.
// A frame with Open starts a connection, one with Close ends it (both
// ways), others carry Data.
type EgressFrame struct {
	Conn  uint64 `json:"conn"`
	Open  bool   `json:"open,omitempty"`
	Close bool   `json:"close,omitempty"`
	Data  []byte `json:"data,omitempty"`
}

// Ready describes the agent; it is the first frame the agent writes.
type Ready struct {
	Version  int    `json:"version"`
	PID      int    `json:"pid"`
	UID      int    `json:"uid"`
	JobUID   int    `json:"job_uid"`
	WorkDir  string `json:"work_dir"`
	CgroupV2 bool   `json:"cgroup_v2"`
	// OOMCounter is false when the agent cannot count OOM kills: no cgroup
	// oom_kill counter to read and no memory watchdog of its own (gVisor);
	// the worker then refuses to trust the container.
	OOMCounter bool `json:"oom_counter"`
	// OOMSource is where the count comes from: "memory.events" (cgroup
	// v2), "memory.oom_control" (v1) or OOMSourceGVisorWatchdog.
	OOMSource string `json:"oom_source,omitempty"`
	// MemoryLimit is the memory limit in bytes the agent enforces on the
	// whole sandbox under gVisor (OOMSourceGVisorWatchdog): the container's
	// limit less GVisorMemoryReserve, or half of it if that is more. 0
	// elsewhere, where the agent enforces each run's MemoryLimit on its
	// processes' memory and the kernel the container's.
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// OOMProtected reports that the agent's oom_score_adj is -1000 and
	// steps' are pinned at 1000 for good (the container granted
	// CAP_SYS_RESOURCE); without it steps' scores are raised to 1000 but a
	// step may lower its own again.
	OOMProtected bool `json:"oom_protected,omitempty"`
	// Seccomp is the agent's seccomp mode (/proc/self/status: 0 none, 2
	// a filter): the container's profile applies to every process of it,
	// the agent's too, so 2 shows the engine applied it (runsc does only
	// with --oci-seccomp).
	Seccomp int `json:"seccomp"`
	// Clean is the verification of the fresh container, as after a scrub.
	Clean ScrubResult `json:"clean"`
	// LibsLink is where LibsLink points when the container starts ("" if
	// it does not exist): a container started for a library set whose
	// volume has gone (an engine makes an empty volume of the name) sees
	// none, and the worker does not run the job in it.
	LibsLink string `json:"libs_link,omitempty"`
}

// LibsLink names, in a library set's volume (mounted at /sandq/libs), the
// directory that holds the installed set; see sandbox.LibsLink.
const LibsLink = "/sandq/libs/current"

// OOMSourceGVisorWatchdog is Ready.OOMSource under gVisor (runsc): there
// is no cgroup oom_kill counter, and the host OOM killer, when the
// container's memory cgroup is full, kills the whole sandbox. So the agent
// kills a step's processes itself when the sandbox's memory usage
// (/proc/meminfo) passes Ready.MemoryLimit, and counts that as an OOM kill.
const OOMSourceGVisorWatchdog = "gvisor-watchdog"

// GVisorMemoryReserve is the part of a gVisor container's memory limit the
// agent's watchdog leaves to what the sandbox's own accounting cannot see
// (the sentry's and gofer's memory, 10 to 20 MiB) and to how far a job
// allocates between two readings. A worker that gives a runsc container
// the job's limit plus this reserve gives the job exactly its limit.
const GVisorMemoryReserve = 48 << 20

// File is an input file written into the work dir before the first step.
type File struct {
	// Path is relative to the work dir; paths escaping it are refused.
	Path string `json:"path"`
	Data []byte `json:"data"`
	// Mode defaults to 0644.
	Mode uint32 `json:"mode,omitempty"`
}

// Rlimits are applied to each step's process with soft = hard = value.
// Zero leaves the container's limit in place.
type Rlimits struct {
	NoFile   uint64 `json:"nofile,omitempty"`
	FileSize uint64 `json:"fsize,omitempty"` // bytes
	CPU      uint64 `json:"cpu,omitempty"`   // seconds; a backstop for the wall timeout
	Stack    uint64 `json:"stack,omitempty"` // bytes
}

// Step is one process run as the job's unprivileged uid.
type Step struct {
	// Name is "install", "compile" or "run"; it is echoed in the result.
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	// Env is added to the image's environment (KEY=VALUE).
	Env   []string `json:"env,omitempty"`
	Stdin []byte   `json:"stdin,omitempty"`
	// Timeout is the wall-clock limit; zero means 10 s.
	Timeout time.Duration `json:"timeout"`
	// OutputLimit is the number of bytes kept per stream (half head, half
	// tail); zero means 1 MiB. The program is not stopped when it prints
	// more: the middle is counted and dropped.
	OutputLimit int     `json:"output_limit,omitempty"`
	Rlimits     Rlimits `json:"rlimits"`
	// StopOnFailure ends the run after this step unless it exits 0.
	StopOnFailure bool `json:"stop_on_failure,omitempty"`
	// Live sends the step's output while it runs (OpLive frames), up to
	// OutputLimit per stream.
	Live bool `json:"live,omitempty"`
	// FreshCase runs the step as a judged job's test case: before it,
	// every job process is killed, the scratch mounts (/tmp, /dev/shm)
	// emptied, SysV IPC objects removed, and the work dir made root's and
	// read-only to the job (from the first such step until the scrub), so a
	// case can leave nothing for the next. Not with Prestart.
	FreshCase bool `json:"fresh_case,omitempty"`
	// Prestart asks the agent to start this step's interpreter again after
	// the run's scrub, for the next run in this container, and to use it
	// if that run is the same step (see prestart_linux.go). Only
	// `python3 <file>.py` qualifies; the agent ignores it otherwise.
	Prestart bool `json:"prestart,omitempty"`
}

// RunRequest is one job: files, then steps in order.
type RunRequest struct {
	Files []File `json:"files,omitempty"`
	Steps []Step `json:"steps"`
	// Collect says which files to return after the last step. Nil
	// collects nothing.
	Collect *Collect `json:"collect,omitempty"`
	// ScrubAfter makes the agent scrub right after sending the result and
	// send a second answer with Op OpScrubbed, so the worker can hand the
	// result on while the container cleans itself.
	ScrubAfter bool `json:"scrub_after,omitempty"`
	// MemoryLimit is the memory the job's processes may use (anonymous
	// memory, cgroup-wide), in bytes; the agent kills the step when they
	// pass it and reports an OOM kill. Zero: only the container's limit.
	// Files in the tmpfs mounts do not count: their sizes bound them.
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// Timeout bounds the steps together: each step ends at its own
	// timeout or when this budget is spent, whichever comes first (timed
	// out either way). Zero: only the steps' own.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Libs installs a library set: the agent prepares its directory before
	// the steps and links it after them, as root (Libs).
	Libs *Libs `json:"libs,omitempty"`
	// Egress, when set, is a TCP address in the container (such as
	// "127.0.0.1:3128") where the agent accepts connections while the run
	// lasts and relays them, as OpEgress frames, to the worker: the only
	// way out of a container that has no network. The worker runs an HTTP
	// proxy there that reaches only allowed hosts (library mirrors).
	Egress string `json:"egress,omitempty"`
}

// Libs is the agent's part of installing a library set into a volume
// mounted at Root (sandbox.Pool.Install). Before the first step the agent
// makes Root root's own (0755: the install may write only its set's
// directory) and Dir, the set's directory, the job uid's; after every step
// has succeeded it measures the whole volume (allocated blocks, so sparse
// files count for what they hold) against MaxBytes and links Link to Dir,
// unless another install linked first (then Dir goes). The outcome is
// RunResult.Libs.
type Libs struct {
	Root     string `json:"root"`
	Dir      string `json:"dir"`
	Link     string `json:"link"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
}

// LibsResult is the outcome of a run's Libs.
type LibsResult struct {
	// Linked is the directory name Link points at (ours, or the one of an
	// install that won the race); empty when the set was not linked.
	Linked string `json:"linked,omitempty"`
	// Bytes is the volume's size as measured.
	Bytes int64 `json:"bytes"`
	// Error says why the set was not linked (over the cap, a step failed,
	// the volume could not be measured).
	Error string `json:"error,omitempty"`
}

// Collect selects the files returned with a run's result. The collector
// runs inside the container, after every process of the job is dead: it
// walks directories through file descriptors, never following a symbolic
// link and never blocking on a special file, takes regular files with one
// link only, and stays within budgets of entries (20 000), depth (32
// levels), path length (1024 bytes), time (10 s), files and bytes. The
// files travel to the worker in chunks (OpArtifact frames) before the
// run's result, never whole in the agent's memory.
type Collect struct {
	// Globs select files by their path relative to the work dir, with
	// path.Match syntax per segment; a "**" segment matches any number of
	// directories ("out/**", "**/*.csv"). Returned with Kind "file".
	Globs []string `json:"globs,omitempty"`
	// PlotsDir is an absolute directory whose every regular file is
	// returned with Kind "plot" (language hooks write captured plots
	// there). The agent makes it afresh before the first step, owned by
	// the job uid, in a directory of its own that the job cannot replace.
	PlotsDir string `json:"plots_dir,omitempty"`
	// MaxFiles caps how many files are returned; zero means 32.
	MaxFiles int `json:"max_files,omitempty"`
	// MaxBytes caps their total size; zero means 32 MiB.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// Artifact is a file returned by the collector.
type Artifact struct {
	// Name is the path relative to the work dir, or "plots/<file>".
	Name string `json:"name"`
	Kind string `json:"kind"` // "plot" or "file"
	Size int64  `json:"size"`
	// Mode is the file's permission bits (0755 for a compiled program).
	Mode uint32 `json:"mode,omitempty"`
	// File is where the receiver (sandbox.Container) put the content: a
	// temporary file, which whoever uses the RunResult removes
	// (RunResult.RemoveFiles). Never sent.
	File string `json:"-"`
}

// ArtifactChunk is one piece of a collected file (Response.Artifact),
// sent in order, each artifact's chunks before the next's, all before the
// run's result.
type ArtifactChunk struct {
	// Index is the artifact's position in RunResult.Artifacts.
	Index int    `json:"index"`
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Size  int64  `json:"size"`
	// Offset is where Data goes in the file.
	Offset int64  `json:"offset"`
	Data   []byte `json:"data,omitempty"`
	// Last marks the final chunk of a whole file; Abort one whose file
	// could not be read to the end (it is dropped: discard its chunks).
	Last  bool `json:"last,omitempty"`
	Abort bool `json:"abort,omitempty"`
}

// Output is what was kept of one stream.
type Output struct {
	// Head and Tail are the first and last bytes written. Tail is empty
	// unless the stream was truncated; then Total-len(Head)-len(Tail)
	// bytes in between were dropped.
	Head      []byte `json:"head,omitempty"`
	Tail      []byte `json:"tail,omitempty"`
	Total     int64  `json:"total"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Bytes joins head and tail with no marker. Callers that show truncated
// output to people add their own marker.
func (o Output) Bytes() []byte {
	if len(o.Tail) == 0 {
		return o.Head
	}
	b := make([]byte, 0, len(o.Head)+len(o.Tail))
	return append(append(b, o.Head...), o.Tail...)
}

// StepResult is what happened to one step. Exit results are values: a
// program killed by the OOM killer has OOMKilled set from the cgroup's
// oom_kill counter; exit code 137 alone never means OOM.
type StepResult struct {
	Name string `json:"name"`
	// Started is false when the program could not be started at all
	// (Error says why).
	Started  bool   `json:"started"`
	ExitCode int    `json:"exit_code"` // -1 when killed by a signal
	Signal   int    `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	Canceled bool   `json:"canceled,omitempty"`
	Error    string `json:"error,omitempty"`
	// OOMKilled is set when the cgroup's oom_kill counter rose during the step.
	OOMKilled bool   `json:"oom_killed,omitempty"`
	WallNs    int64  `json:"wall_ns"`
	CPUNs     int64  `json:"cpu_ns"`
	MaxRSSKB  int64  `json:"max_rss_kb"`
	Stdout    Output `json:"stdout"`
	Stderr    Output `json:"stderr"`
	// Prestarted is set when the step ran in an interpreter started
	// before the run (Step.Prestart).
	Prestarted bool `json:"prestarted,omitempty"`
}

// OK reports a clean exit 0.
func (s StepResult) OK() bool {
	return s.Started && s.ExitCode == 0 && !s.TimedOut && !s.OOMKilled && !s.Canceled
}

// RunResult holds the steps that ran, in order.
type RunResult struct {
	Steps []StepResult `json:"steps"`
	// FilesError is set when an input file could not be written; no step ran.
	FilesError string `json:"files_error,omitempty"`
	// Artifacts are the collected files, plots first, whose chunks were
	// sent before this result.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Dropped names the files the collector left out, with the reason
	// ("big.bin: over the 32 MiB total cap"): the first 20, then a line
	// with the count of the rest.
	Dropped []string `json:"dropped,omitempty"`
	// Libs is the outcome of the request's Libs, when it had one.
	Libs *LibsResult `json:"libs,omitempty"`
}

// RemoveFiles removes the artifacts' received files.
func (r RunResult) RemoveFiles() {
	for _, a := range r.Artifacts {
		if a.File != "" {
			_ = os.Remove(a.File)
		}
	}
}

// Last returns the last step that ran, or a zero result.
func (r RunResult) Last() StepResult {
	if len(r.Steps) == 0 {
		return StepResult{}
	}
	return r.Steps[len(r.Steps)-1]
}

// ScrubResult is the proof that a container is clean: no process but the
// agent, empty writable mounts, no SysV IPC objects left.
type ScrubResult struct {
	Clean    bool     `json:"clean"`
	Problems []string `json:"problems,omitempty"`
	TookNs   int64    `json:"took_ns"`
}

// ErrFrameTooLarge is returned for a frame whose length exceeds MaxFrame.
var ErrFrameTooLarge = errors.New("agent: frame too large")

// Encoder writes length-prefixed JSON frames. It is safe for concurrent use.
//
// A frame is a 4-byte big-endian length and that many bytes of JSON. A
// message with bulk bytes (the data of an artifact chunk, an output or live
// chunk, an egress frame or a session's file: see bulky) sends them raw
// instead of as base64 inside the JSON: its length has bulkFlag set, and
// the JSON (without the data) is followed by a second 4-byte length and
// the data. JSON costs a 32 MiB artifact 0.56 s of CPU to encode and
// decode (5.8 s under the race detector), raw bytes next to nothing.
type Encoder struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: bufio.NewWriterSize(w, 64<<10)} }

// Encode writes v as one frame and flushes it, with any frames queued
// before it, in one write.
func (e *Encoder) Encode(v any) error { return e.write(v, true) }

// Queue writes v as one frame without flushing: it goes with the next
// Encode (or sooner, when the buffer fills). For frames another follows at
// once: a step's output before its run's result goes in one write, not
// one per frame, and the engine relays one message, not several.
func (e *Encoder) Queue(v any) error { return e.write(v, false) }

func (e *Encoder) write(v any, flush bool) error {
	var data []byte
	switch m := v.(type) {
	case Response:
		v, data = detachBulk(m)
	case Request:
		v, data = detachBulk(m)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("agent: encode frame: %w", err)
	}
	if len(body)+len(data) > MaxFrame {
		return ErrFrameTooLarge
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(body)))
	h := hdr[:4]
	if len(data) > 0 {
		hdr[0] |= bulkFlag >> 24
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(data)))
		h = hdr[:]
	}
	if _, err := e.w.Write(h); err != nil {
		return fmt.Errorf("agent: write frame: %w", err)
	}
	if _, err := e.w.Write(body); err != nil {
		return fmt.Errorf("agent: write frame: %w", err)
	}
	if _, err := e.w.Write(data); err != nil {
		return fmt.Errorf("agent: write frame: %w", err)
	}
	if !flush {
		return nil
	}
	if err := e.w.Flush(); err != nil {
		return fmt.Errorf("agent: write frame: %w", err)
	}
	return nil
}

// bulky is a message that may carry bulk bytes, sent raw after its JSON.
type bulky interface {
	// bulk returns the field that holds them, nil if the message has
	// none. With own, the struct that holds the field is copied first, so
	// that changing the field leaves the sender's struct alone.
	bulk(own bool) *[]byte
}

// detachBulk returns m without its bulk bytes, and the bytes.
func detachBulk[M any, P interface {
	*M
	bulky
}](m M) (M, []byte) {
	p := P(&m).bulk(true)
	if p == nil || len(*p) == 0 {
		return m, nil
	}
	data := *p
	*p = nil
	return m, data
}

// copied returns a copy of *p when own is set, else p.
func copied[T any](p *T, own bool) *T {
	if !own {
		return p
	}
	c := *p
	return &c
}

func (r *Response) bulk(own bool) *[]byte {
	switch {
	case r.Artifact != nil:
		r.Artifact = copied(r.Artifact, own)
		return &r.Artifact.Data
	case r.Output != nil:
		r.Output = copied(r.Output, own)
		return &r.Output.Data
	case r.Live != nil:
		r.Live = copied(r.Live, own)
		return &r.Live.Data
	}
	return egressOrFile(&r.Egress, &r.File, own)
}

func (r *Request) bulk(own bool) *[]byte { return egressOrFile(&r.Egress, &r.File, own) }

// egressOrFile is bulky's bulk for a message's Egress or File, the two
// carriers a Request and a Response share.
func egressOrFile(e **EgressFrame, f **File, own bool) *[]byte {
	switch {
	case *e != nil:
		*e = copied(*e, own)
		return &(*e).Data
	case *f != nil:
		*f = copied(*f, own)
		return &(*f).Data
	}
	return nil
}

// Decoder reads frames written by an Encoder.
type Decoder struct{ r *bufio.Reader }

// NewDecoder returns a Decoder reading from r.
func NewDecoder(r io.Reader) *Decoder { return &Decoder{r: bufio.NewReaderSize(r, 64<<10)} }

// Decode reads one frame into v. It returns io.EOF at a clean end of stream
// and io.ErrUnexpectedEOF when the stream ends inside a frame. A frame
// with bulk bytes is decoded into a Request or Response only, and only
// into one whose JSON names where they go (an artifact chunk, ...) and
// holds no data of its own; otherwise, as for a body that is not the
// message's JSON, the frame is read whole, an error returned, and the next
// frame is still aligned.
func (d *Decoder) Decode(v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	hasBulk := n&bulkFlag != 0
	n &^= bulkFlag
	if n > MaxFrame {
		return ErrFrameTooLarge
	}
	var m uint32
	if hasBulk {
		if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
			return unexpected(err)
		}
		if m = binary.BigEndian.Uint32(hdr[:]); m > MaxFrame-n {
			return ErrFrameTooLarge
		}
	}
	body := make([]byte, n+m)
	if _, err := io.ReadFull(d.r, body); err != nil {
		return unexpected(err)
	}
	if err := json.Unmarshal(body[:n], v); err != nil {
		return fmt.Errorf("agent: decode frame: %w", err)
	}
	if !hasBulk {
		return nil
	}
	b, ok := v.(bulky)
	var p *[]byte
	if ok {
		p = b.bulk(false)
	}
	switch {
	case p == nil:
		return errors.New("agent: decode frame: bulk bytes for a message without a place for them")
	case len(*p) > 0:
		return errors.New("agent: decode frame: bulk bytes for a message with data of its own")
	case m == 0:
		return errors.New("agent: decode frame: empty bulk bytes")
	}
	*p = body[n:]
	return nil
}

// unexpected is err for a stream that ended inside a frame.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// TSCSnapshot is sandq-tsc's Node.js startup snapshot in the typescript
// image (langs/dockerfiles/typescript/sandq-tsc.js): TypeScript's compiler
// with its declarations parsed. Its main function reads its file before
// anything else, so that it can be started ahead on a FIFO.
const TSCSnapshot = "/usr/lib/sandq/ts/tsc.blob"
