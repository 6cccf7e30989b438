//go:build linux

package agent

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is the agent's fixed layout. Zero values mean the defaults, which
// match the images built by `make images` and the container settings of the
// sandbox package.
type Config struct {
	// WorkDir is the job's working directory, a tmpfs. Default /work.
	WorkDir string
	// ScrubDirs are emptied between jobs. Default WorkDir, /tmp, /dev/shm,
	// /dev/mqueue (those that exist).
	ScrubDirs []string
	// JobUID and JobGID run every step. Default 1000:1000; never 0. The
	// worker gives each container a uid of its own (--job-uid).
	JobUID, JobGID int
	// KillGrace bounds how long killing every process may take before the
	// container is declared dirty. Default 2 s.
	KillGrace time.Duration
	// PrestartHold is how long a fork server (prestart_linux.go) is kept
	// without a request: a container waiting longer gives its memory back
	// and its next run starts cold. 0 keeps it for the container's life.
	PrestartHold time.Duration
}

func (c Config) withDefaults() Config {
	if c.WorkDir == "" {
		c.WorkDir = "/work"
	}
	if c.ScrubDirs == nil {
		c.ScrubDirs = []string{c.WorkDir, "/tmp", "/dev/shm", "/dev/mqueue"}
	}
	if c.JobUID == 0 {
		c.JobUID = 1000
	}
	if c.JobGID == 0 {
		c.JobGID = c.JobUID
	}
	if c.KillGrace == 0 {
		c.KillGrace = 2 * time.Second
	}
	return c
}

// Server answers the worker's requests. One job runs at a time; a cancel
// request may arrive while it runs.
type Server struct {
	cfg     Config
	self    string
	enc     *Encoder
	reaper  *reaper
	baseEnv []string
	mem     *memory
	// tcpOpens is the TCP connection count of the clean namespace; -1
	// until the first clean scrub.
	tcpOpens int64

	mu      sync.Mutex
	running uint64        // ID of the run in progress, 0 if none
	cancel  chan struct{} // closed to cancel it
	egress  *egress       // the run's egress relay, if it asked for one
	sess    *session      // the container's session, once started

	// pre is the fork server for the next runs, preStep the step to
	// prestart after the next scrub (prestart_linux.go). Both belong to
	// the request loop.
	pre     *prestart
	preStep *Step
	// preLead: the first bytes of preStep's script when its interpreter
	// is fed them at start (a Ruby FIFO start, prestart_fifo_linux.go).
	preLead []byte
	// frozen: a test case (Step.FreshCase) has made the work dir root's
	// and read-only, until the next scrub (case_linux.go).
	frozen bool
}

// IdleTrim is how long the agent waits without a request before it
// returns its free heap to the kernel (debug.FreeOSMemory).
const IdleTrim = time.Second

// DefaultPrestartHold is the agent's Config.PrestartHold unless told.
const DefaultPrestartHold = time.Minute

// Serve runs the agent until in reaches EOF (the worker is gone), then kills
// every process and returns. It refuses to run unless it is PID 1: killing
// "every process but itself" is only safe in its own PID namespace.
func Serve(in io.Reader, out io.Writer, cfg Config) error {
	if os.Getpid() != 1 {
		return errors.New("agent: must run as PID 1 of a container")
	}
	cfg = cfg.withDefaults()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("agent: find own binary: %w", err)
	}
	// The OOM killer never takes the agent: steps are pinned at 1000.
	protected := protectSelf()
	if err := refuseClone3(); err != nil {
		return err
	}
	warmThreads(8)
	s := &Server{cfg: cfg, self: self, enc: NewEncoder(out), reaper: newReaper(), tcpOpens: -1}
	s.baseEnv = baseEnv(os.Environ())
	s.mem = findMemory()

	clean := s.scrub()
	ready := &Ready{
		Version: ProtocolVersion, PID: os.Getpid(), UID: os.Getuid(), JobUID: cfg.JobUID,
		WorkDir: cfg.WorkDir, CgroupV2: s.mem.v2, OOMCounter: s.mem.ok(), Clean: clean,
		OOMSource: s.mem.source, MemoryLimit: s.mem.sandboxLimit(), OOMProtected: protected, Seccomp: seccompMode(),
	}
	ready.LibsLink, _ = os.Readlink(LibsLink)
	if err := s.enc.Encode(Response{Op: OpReady, Ready: ready}); err != nil {
		return err
	}

	reqs := make(chan Request)
	go func() {
		defer close(reqs)
		dec := NewDecoder(in)
		for {
			var req Request
			if err := dec.Decode(&req); err != nil {
				if !errors.Is(err, io.EOF) {
					fmt.Fprintf(os.Stderr, "agent: read request: %v\n", err)
				}
				return
			}
			switch req.Op {
			case OpCancel:
				s.cancelRun(req.ID)
				s.interruptCell(req.ID)
			case OpEgress:
				s.mu.Lock()
				e := s.egress
				s.mu.Unlock()
				if e != nil && req.Egress != nil && req.ID == e.runID {
					e.deliver(req.Egress)
				}
			case OpPing:
				_ = s.enc.Encode(Response{ID: req.ID, Op: OpReady, Ready: ready})
			default:
				reqs <- req
			}
		}
	}()

	// Waiting, the container gives back memory in two steps: its memory
	// cgroup is charged for it, and a warm container spends most of its
	// life waiting. After IdleTrim the agent's free heap; after
	// PrestartHold the fork server and the process it forked for the next
	// run (together ~3 MB; forking one on a run's path would cost that
	// run 1-2 ms). Under load neither runs.
	holdFor := cfg.PrestartHold
	if holdFor <= 0 {
		holdFor = math.MaxInt64 // kept for the container's life
	}
	trim := time.NewTimer(IdleTrim)
	defer trim.Stop()
	hold := time.NewTimer(holdFor)
	defer hold.Stop()
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				killAll(cfg.KillGrace)
				return nil
			}
			trim.Stop()
			hold.Stop()
			s.handle(req)
			trim.Reset(IdleTrim)
			hold.Reset(holdFor)
		case <-trim.C:
			debug.FreeOSMemory()
		case <-hold.C:
			// The next run starts cold, and a new server after its scrub.
			s.dropPrestart()
			debug.FreeOSMemory()
		}
	}
}

// handle answers one request of the request loop.
func (s *Server) handle(req Request) {
	switch req.Op {
	case OpRun:
		s.serveRun(req)
	case OpSessionStart:
		s.dropPrestart()
		s.preStep = nil
		_ = s.enc.Encode(s.startSession(req))
	case OpCell:
		s.serveCell(req)
	case OpPutFile, OpGetFile, OpListFiles:
		s.serveFile(req)
	case OpScrub:
		if s.sess != nil {
			_ = s.enc.Encode(Response{ID: req.ID, Op: OpError, Error: "a session's container is never scrubbed for reuse"})
			return
		}
		sc := s.scrub()
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpScrubbed, Scrub: &sc})
		if sc.Clean {
			s.startPrestart()
		}
	default:
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpError, Error: "unknown op " + strconv.Quote(req.Op)})
	}
}

func (s *Server) cancelRun(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == id && s.cancel != nil {
		close(s.cancel)
		s.cancel = nil
	}
}

// serveRun runs one job: files, steps, collection, result; then, if asked,
// the scrub. It always answers: whatever the job did, its outcome is in
// the result.
func (s *Server) serveRun(req Request) {
	if req.Run == nil {
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpError, Error: "run request without body"})
		return
	}
	cancel := make(chan struct{})
	s.mu.Lock()
	s.running, s.cancel = req.ID, cancel
	s.mu.Unlock()

	run := req.Run
	var res RunResult
	pre := s.takePrestart(run)
	s.nextPrestart(run)
	files := run.Files
	if pre != nil && pre.kind == fifoStart {
		files = pre.stageFiles(files)
	}
	err := s.writeFiles(files)
	stopEgress := func() {}
	if err == nil && run.Egress != "" {
		var e *egress
		if e, err = startEgress(run.Egress, req.ID, s.enc); err == nil {
			s.mu.Lock()
			s.egress = e
			s.mu.Unlock()
			stopEgress = func() {
				s.mu.Lock()
				s.egress = nil
				s.mu.Unlock()
				e.stop()
			}
		} else {
			err = fmt.Errorf("egress: %w", err)
		}
	}
	if err == nil && run.Libs != nil {
		err = s.prepareLibs(run.Libs)
	}
	if err == nil && run.Collect != nil && run.Collect.PlotsDir != "" {
		if perr := makePlotsDir(run.Collect.PlotsDir, s.cfg.JobUID); perr != nil {
			err = fmt.Errorf("plots dir: %w", perr)
		}
	}
	if err != nil {
		res.FilesError = err.Error()
	} else {
		var deadline time.Time
		if run.Timeout > 0 {
			deadline = time.Now().Add(run.Timeout)
		}
		for _, st := range run.Steps {
			if !deadline.IsZero() {
				st.Timeout = min(cmp.Or(st.Timeout, 10*time.Second), max(time.Until(deadline), time.Millisecond))
			}
			i := len(res.Steps)
			var sr StepResult
			if casePre, err := s.readyStep(st); err != nil {
				sr = StepResult{Name: st.Name, ExitCode: -1, Error: err.Error()}
			} else {
				if casePre != nil {
					pre = casePre
				}
				sr = s.runStep(st, run.MemoryLimit, cancel, func(ch LiveChunk, last bool) {
					ch.Step = i
					s.send(Response{ID: req.ID, Op: OpLive, Live: &ch}, !last)
				}, pre)
			}
			pre = nil
			s.sendOutput(req.ID, i, &sr)
			res.Steps = append(res.Steps, sr)
			if sr.Canceled || (st.StopOnFailure && !sr.OK()) {
				break
			}
		}
		if run.Libs != nil {
			// Every step ran, and every required one succeeded (an
			// optional one, a warm-up, may fail).
			ok := len(res.Steps) == len(run.Steps)
			for i, sr := range res.Steps {
				ok = ok && (sr.OK() || !run.Steps[i].StopOnFailure)
			}
			res.Libs = s.commitLibs(run.Libs, ok)
		}
	}

	if pre != nil && pre.kind == fifoStart {
		s.discardFIFO(pre) // no step took it (the files failed)
	}
	stopEgress() // every step is over: no more connections
	if c := run.Collect; c != nil && res.FilesError == "" && !res.Last().Canceled {
		col := collect(s.cfg.WorkDir, c, s.cfg.JobUID)
		res.Artifacts, _ = col.stream(func(ch ArtifactChunk) error {
			return s.enc.Encode(Response{ID: req.ID, Op: OpArtifact, Artifact: &ch})
		})
		col.close()
		res.Dropped = col.droppedList()
	}
	s.mu.Lock()
	s.running, s.cancel = 0, nil
	s.mu.Unlock()
	_ = s.enc.Encode(Response{ID: req.ID, Op: OpRunResult, Run: &res})
	if pre := s.pre; pre != nil && pre.forCase && !run.ScrubAfter && pre.ready && pre.alive() {
		// The next case's process, forked while the worker judges this
		// one's output; a server this case changed refuses, and goes.
		if err := s.prefork(pre); err != nil {
			s.dropPrestart()
		}
	}
	if run.ScrubAfter {
		sc := s.scrub()
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpScrubbed, Scrub: &sc})
		if sc.Clean {
			s.startPrestart()
		}
	}
}

// readyStep does what st asks before it runs: a test case's fresh state,
// and the fork server its process is to come from, if any.
func (s *Server) readyStep(st Step) (*prestart, error) {
	if !st.FreshCase {
		return nil, nil
	}
	pre, err := s.freshCase(st)
	if err != nil {
		return nil, fmt.Errorf("the container could not be reset for the case: %w", err)
	}
	return pre, nil
}

// send writes resp, at once when flush is set, else queued to go with the
// next frame sent at once (Encoder.Queue).
func (s *Server) send(resp Response, flush bool) {
	if flush {
		_ = s.enc.Encode(resp)
	} else {
		_ = s.enc.Queue(resp)
	}
}

// sendOutput sends step number i's kept output in chunks (OpOutput) and
// drops it from sr, which keeps only the streams' totals and flags. The
// chunks are queued: they go with the next frame sent at once (the run's
// result at the latest).
func (s *Server) sendOutput(id uint64, i int, sr *StepResult) {
	for _, stream := range []struct {
		name string
		out  *Output
	}{{"stdout", &sr.Stdout}, {"stderr", &sr.Stderr}} {
		for _, part := range []struct {
			tail bool
			data []byte
		}{{false, stream.out.Head}, {true, stream.out.Tail}} {
			for b := part.data; len(b) > 0; {
				n := min(len(b), OutputChunkSize)
				_ = s.enc.Queue(Response{ID: id, Op: OpOutput, Output: &OutputChunk{Step: i, Stream: stream.name, Tail: part.tail, Data: b[:n]}})
				b = b[n:]
			}
		}
		stream.out.Head, stream.out.Tail = nil, nil
	}
}

// baseEnv is the image's environment (the agent's, which the engine built
// from the image config alone: the host's never reaches the container), with
// HOME forced to /tmp, the only writable home on a read-only rootfs.
func baseEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOME=") {
			out = append(out, kv)
		}
	}
	return append(out, "HOME=/tmp")
}

// mergeEnv returns base with extra's keys overriding.
func mergeEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	idx := map[string]int{}
	out := append([]string(nil), base...)
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
		} else {
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}
