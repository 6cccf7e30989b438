//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
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
	// JobUID and JobGID run every step. Default 1000:1000; never 0.
	JobUID, JobGID int
	// KillGrace bounds how long killing every process may take before the
	// container is declared dirty. Default 2 s.
	KillGrace time.Duration
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
		c.JobGID = 1000
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
	oomPath string

	mu      sync.Mutex
	running uint64        // ID of the run in progress, 0 if none
	cancel  chan struct{} // closed to cancel it
}

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
	warmThreads(8)
	s := &Server{cfg: cfg, self: self, enc: NewEncoder(out), reaper: newReaper()}
	s.baseEnv = baseEnv(os.Environ())
	s.oomPath = findOOMCounter()

	clean := s.scrub()
	_, oomErr := readOOMKills(s.oomPath)
	ready := &Ready{
		Version: ProtocolVersion, PID: os.Getpid(), UID: os.Getuid(), JobUID: cfg.JobUID,
		WorkDir: cfg.WorkDir, CgroupV2: strings.HasSuffix(s.oomPath, "memory.events"),
		OOMCounter: oomErr == nil, Clean: clean,
	}
	if oomErr == nil {
		ready.OOMSource, ready.MemoryLimit = oomSource(s.oomPath), memoryLimit(s.oomPath)
	}
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
			case OpPing:
				_ = s.enc.Encode(Response{ID: req.ID, Op: OpReady, Ready: ready})
			default:
				reqs <- req
			}
		}
	}()

	for req := range reqs {
		switch req.Op {
		case OpRun:
			s.serveRun(req)
		case OpScrub:
			sc := s.scrub()
			_ = s.enc.Encode(Response{ID: req.ID, Op: OpScrubbed, Scrub: &sc})
		default:
			_ = s.enc.Encode(Response{ID: req.ID, Op: OpError, Error: "unknown op " + strconv.Quote(req.Op)})
		}
	}
	killAll(cfg.KillGrace)
	return nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// rlimitsInherited reports whether the agent's own limits (the container's
// ulimits, inherited by every child) already satisfy want.
func rlimitsInherited(want Rlimits) bool {
	if want.CPU != 0 || want.Stack != 0 {
		return false
	}
	for res, v := range map[int]uint64{syscall.RLIMIT_NOFILE: want.NoFile, syscall.RLIMIT_FSIZE: want.FileSize} {
		if v == 0 {
			continue
		}
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(res, &cur); err != nil || cur.Max > v || cur.Cur > v {
			return false
		}
	}
	return true
}

// lookPath resolves argv[0] like execvp, with the step's PATH; relative
// names with a slash are resolved against the work dir.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("cannot run %s: not found in PATH", name)
}

// warmThreads makes the Go runtime start n OS threads now, while the
// container's pids limit has room. The runtime keeps idle threads for reuse,
// so when a fork bomb later exhausts the limit the agent still has threads
// to kill it with, instead of dying on a failed clone.
func warmThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.NsecToTimespec(int64(20 * time.Millisecond))
			_, _, _ = syscall.Syscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
		}()
	}
	wg.Wait()
}

func (s *Server) cancelRun(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == id && s.cancel != nil {
		close(s.cancel)
		s.cancel = nil
	}
}

func (s *Server) serveRun(req Request) {
	if req.Run == nil {
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpError, Error: "run request without body"})
		return
	}
	cancel := make(chan struct{})
	s.mu.Lock()
	s.running, s.cancel = req.ID, cancel
	s.mu.Unlock()

	var res RunResult
	if err := s.writeFiles(req.Run.Files); err != nil {
		res.FilesError = err.Error()
	} else {
		for _, st := range req.Run.Steps {
			sr := s.runStep(st, cancel)
			res.Steps = append(res.Steps, sr)
			if sr.Canceled || (st.StopOnFailure && !sr.OK()) {
				break
			}
		}
	}

	if c := req.Run.Collect; c != nil && res.FilesError == "" && !res.Last().Canceled {
		res.Artifacts, res.Dropped = collect(s.cfg.WorkDir, c)
	}
	s.mu.Lock()
	s.running, s.cancel = 0, nil
	s.mu.Unlock()
	_ = s.enc.Encode(Response{ID: req.ID, Op: OpRunResult, Run: &res})
	if req.Run.ScrubAfter {
		sc := s.scrub()
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpScrubbed, Scrub: &sc})
	}
}

// writeFiles puts the job's input files into the work dir through an
// os.Root, so no path (or symlink, though none can exist in a scrubbed dir)
// escapes it. Files and the directories made for them belong to the job uid.
func (s *Server) writeFiles(files []File) error {
	if len(files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(s.cfg.WorkDir)
	if err != nil {
		return fmt.Errorf("open work dir: %w", err)
	}
	defer root.Close()
	for _, f := range files {
		name := filepath.Clean(f.Path)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("file %q: path escapes the work dir", f.Path)
		}
		if dir := filepath.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("file %q: %w", f.Path, err)
			}
			for d := dir; d != "."; d = filepath.Dir(d) {
				_ = root.Lchown(d, s.cfg.JobUID, s.cfg.JobGID)
			}
		}
		mode := fs.FileMode(f.Mode & 0o777)
		if mode == 0 {
			mode = 0o644
		}
		fh, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
		_, werr := fh.Write(f.Data)
		cerr := fh.Close()
		if err := errors.Join(werr, cerr); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
		if err := root.Lchown(name, s.cfg.JobUID, s.cfg.JobGID); err != nil {
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
		if err := root.Chmod(name, mode); err != nil { // umask-proof
			return fmt.Errorf("file %q: %w", f.Path, err)
		}
	}
	return nil
}

func (s *Server) runStep(st Step, cancel <-chan struct{}) StepResult {
	res := StepResult{Name: st.Name, ExitCode: -1}
	if len(st.Argv) == 0 {
		res.Error = "empty argv"
		return res
	}
	timeout := st.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}

	var stdinR, stdinW *os.File
	var err error
	if len(st.Stdin) > 0 {
		stdinR, stdinW, err = os.Pipe()
	} else {
		stdinR, err = os.Open(os.DevNull)
	}
	if err != nil {
		res.Error = "stdin: " + err.Error()
		return res
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		res.Error = "stdout pipe: " + err.Error()
		return res
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		res.Error = "stderr pipe: " + err.Error()
		return res
	}

	env := mergeEnv(s.baseEnv, st.Env)
	// The fast path execs the program directly: the container's ulimits
	// (the agent's own) already are the step's. Only a step that asks for
	// tighter rlimits goes through the launcher, which costs a Go runtime
	// start (a few ms).
	argv0, argv := s.self, append([]string{LaunchArg0, encodeRlimits(st.Rlimits)}, st.Argv...)
	if rlimitsInherited(st.Rlimits) {
		path, err := lookPath(st.Argv[0], env, s.cfg.WorkDir)
		if err != nil {
			closeAll(stdinR, stdinW, outR, outW, errR, errW)
			res.Error = err.Error()
			return res
		}
		argv0, argv = path, st.Argv
	}
	attr := &syscall.ProcAttr{
		Dir:   s.cfg.WorkDir,
		Env:   env,
		Files: []uintptr{stdinR.Fd(), outW.Fd(), errW.Fd()},
		Sys: &syscall.SysProcAttr{
			Setsid: true,
			Credential: &syscall.Credential{
				Uid: uint32(s.cfg.JobUID), Gid: uint32(s.cfg.JobGID), Groups: []uint32{},
			},
		},
	}

	oomBefore, _ := readOOMKills(s.oomPath)
	s.reaper.takeOrphanCPU()
	start := time.Now()
	pid, exited, err := s.reaper.spawn(argv0, argv, attr)
	closeAll(stdinR, outW, errW)
	if err != nil {
		closeAll(outR, errR, stdinW)
		res.Error = fmt.Sprintf("cannot run %s: %v", st.Argv[0], err)
		return res
	}
	res.Started = true
	stopWatch := watchMemory(s.oomPath)
	// The OOM killer must take the job, never the agent. Raising a score
	// needs no capability; the launcher path does the same for itself.
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)

	stdout, stderr := newCapture(st.OutputLimit), newCapture(st.OutputLimit)
	var drained sync.WaitGroup
	drained.Add(2)
	go func() { defer drained.Done(); _, _ = io.Copy(stdout, outR) }()
	go func() { defer drained.Done(); _, _ = io.Copy(stderr, errR) }()
	if stdinW != nil {
		go func() { _, _ = stdinW.Write(st.Stdin); stdinW.Close() }()
	}

	timer := time.NewTimer(timeout)
	var ei exitInfo
	select {
	case ei = <-exited:
	case <-timer.C:
		res.TimedOut = true
		killAll(s.cfg.KillGrace)
		ei = <-exited
	case <-cancel:
		res.Canceled = true
		killAll(s.cfg.KillGrace)
		ei = <-exited
	}
	timer.Stop()
	res.WallNs = int64(time.Since(start))
	// Whatever the step started and left behind dies with it.
	killAll(s.cfg.KillGrace)
	stopWatch()

	// Every writer is dead, so the pipes are at EOF; the bound guards only
	// against a process that could not be killed.
	done := make(chan struct{})
	go func() { drained.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		outR.Close()
		errR.Close()
		<-done
	}
	outR.Close()
	errR.Close()

	ws := ei.status
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.Signal = int(ws.Signal())
	}
	if oomAfter, err := readOOMKills(s.oomPath); err == nil && oomAfter > oomBefore {
		res.OOMKilled = true
	}
	res.CPUNs = int64(rusageCPU(&ei.rusage) + s.reaper.takeOrphanCPU())
	res.MaxRSSKB = ei.rusage.Maxrss
	res.Stdout, res.Stderr = stdout.output(), stderr.output()
	return res
}

// scrub kills every process but the agent, empties every writable mount,
// restores the work dir's owner and mode, and then verifies all of it. Any
// problem is reported; the worker discards a container that is not clean.
func (s *Server) scrub() ScrubResult {
	start := time.Now()
	var problems []string
	if left := killAll(s.cfg.KillGrace); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("processes survive SIGKILL: %v", left))
	}
	for _, dir := range s.cfg.ScrubDirs {
		if err := emptyDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, err.Error())
		}
	}
	if err := os.Lchown(s.cfg.WorkDir, s.cfg.JobUID, s.cfg.JobGID); err != nil {
		problems = append(problems, "chown work dir: "+err.Error())
	}
	if err := os.Chmod(s.cfg.WorkDir, 0o700); err != nil {
		problems = append(problems, "chmod work dir: "+err.Error())
	}
	problems = append(problems, s.verify()...)
	return ScrubResult{Clean: len(problems) == 0, Problems: problems, TookNs: int64(time.Since(start))}
}

// verify checks, without changing anything, that the container holds
// nothing a previous job left.
func (s *Server) verify() []string {
	var problems []string
	if pids, err := otherPIDs(); err != nil {
		problems = append(problems, "list processes: "+err.Error())
	} else if len(pids) > 0 {
		problems = append(problems, fmt.Sprintf("processes left: %v", pids))
	}
	for _, dir := range s.cfg.ScrubDirs {
		names, err := readDirNames(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
		} else if len(names) > 0 {
			problems = append(problems, fmt.Sprintf("%s not empty: %v", dir, names))
		}
		if xa := listXattrs(dir); len(xa) > 0 {
			problems = append(problems, fmt.Sprintf("%s has extended attributes: %v", dir, xa))
		}
	}
	if fi, err := os.Lstat(s.cfg.WorkDir); err != nil {
		problems = append(problems, "stat work dir: "+err.Error())
	} else if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != s.cfg.JobUID || fi.Mode() != fs.ModeDir|0o700 {
		problems = append(problems, fmt.Sprintf("work dir owner or mode changed: %v", fi.Mode()))
	}
	for _, kind := range []string{"shm", "sem", "msg"} {
		b, err := os.ReadFile("/proc/sysvipc/" + kind)
		if err != nil {
			// gVisor has SysV IPC but no /proc/sysvipc (sysvipc_linux.go).
			if n, ok := sysvIPCCount(kind); ok && n > 0 {
				problems = append(problems, fmt.Sprintf("SysV %s objects left", kind))
			}
			continue
		}
		if lines := strings.Count(strings.TrimSpace(string(b)), "\n"); lines > 0 {
			problems = append(problems, fmt.Sprintf("%d SysV %s objects left", lines, kind))
		}
	}
	return problems
}

func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// emptyDir removes everything inside dir (not dir itself) and the
// extended attributes a job may have set on it. The agent holds
// CAP_DAC_OVERRIDE and CAP_FOWNER, so modes set by the job cannot stop it.
func emptyDir(dir string) error {
	names, err := readDirNames(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range listXattrs(dir) {
		if err := syscall.Removexattr(dir, a); err != nil {
			errs = append(errs, fmt.Errorf("remove xattr %s on %s: %w", a, dir, err))
		}
	}
	return errors.Join(errs...)
}

func listXattrs(path string) []string {
	buf := make([]byte, 4096)
	n, err := syscall.Listxattr(path, buf)
	if err != nil || n <= 0 {
		return nil
	}
	var out []string
	for _, a := range strings.Split(string(buf[:n]), "\x00") {
		// security.* labels are set by the kernel or engine, not the job.
		if a != "" && !strings.HasPrefix(a, "security.") && !strings.HasPrefix(a, "system.") {
			out = append(out, a)
		}
	}
	return out
}

// findOOMCounter returns the file holding this cgroup's oom_kill counter:
// memory.events on cgroup v2, memory.oom_control on v1; under gVisor, which
// has neither, the agent's own memory watchdog (oom_linux.go).
func findOOMCounter() string {
	for _, p := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		if _, err := readOOMKills(p); err == nil {
			return p
		}
	}
	return findGVisorOOM()
}

func readOOMKills(path string) (int64, error) {
	if path == "" {
		return 0, errors.New("no oom_kill counter")
	}
	if path == gvisorOOMPath {
		return readGVisorOOMKills()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no oom_kill line", path)
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
