//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A session: the driver process (an interpreter reading cells on fd 3 and
// replying on fd 4, see langs/session) and the readers of its output. The
// container serves one session for its life; the worker discards it after.

// Session limits.
const (
	// InterruptGrace is how long an interrupted cell's driver has to
	// answer before the session is declared lost and everything killed.
	InterruptGrace = 3 * time.Second
	// markerWait bounds the wait for a cell's end markers on stdout and
	// stderr once its reply came (the driver writes them before it).
	markerWait = time.Second
	// pendingCap bounds output written between cells (background
	// processes), handed to the next cell.
	pendingCap = 64 << 10
	// MaxFileBytes caps one file of OpPutFile/OpGetFile.
	MaxFileBytes = 16 << 20
	// maxReplyBytes caps a driver's reply line (displayed results).
	maxReplyBytes  = 64 << 20
	maxListEntries = 10000
)

type session struct {
	pid      int
	exited   <-chan exitInfo
	exitInfo *exitInfo // set once reaped
	cmd      *os.File  // the driver's fd 3, our end
	replies  chan []byte
	out, err *markedStream
	stopMem  func()
	// intrEvery repeats an interrupt (SessionStart.InterruptEvery), with
	// nudge to the driver if set, else SIGINT to its group.
	intrEvery time.Duration
	nudge     syscall.Signal

	mu        sync.Mutex
	busy      uint64        // request ID of the running cell, 0 if none
	interrupt chan struct{} // closed to interrupt it
	ended     string        // why the session is over; "" while live
	oom       bool
}

// markedStream reads one of the driver's output streams and hands its
// bytes to the running cell, up to the cell's end marker.
type markedStream struct {
	mu      sync.Mutex
	sink    io.Writer
	marker  []byte
	hold    []byte // the end of what was read, which may start a marker
	found   chan struct{}
	pending []byte
	eof     chan struct{}
}

func newMarkedStream(r io.Reader) *markedStream {
	m := &markedStream{eof: make(chan struct{})}
	go func() {
		defer close(m.eof)
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				m.feed(buf[:n])
			}
			if err != nil {
				m.mu.Lock()
				if m.sink != nil && len(m.hold) > 0 {
					_, _ = m.sink.Write(m.hold)
				}
				m.hold = nil
				m.mu.Unlock()
				return
			}
		}
	}()
	return m
}

// begin starts a cell: its output goes to sink until marker.
func (m *markedStream) begin(marker []byte, sink io.Writer) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sink, m.marker, m.found = sink, marker, make(chan struct{})
	if len(m.pending) > 0 {
		_, _ = sink.Write(m.pending)
		m.pending = nil
	}
	return m.found
}

// end stops handing bytes to the cell's sink (marker found or not).
func (m *markedStream) end() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sink != nil && len(m.hold) > 0 {
		_, _ = m.sink.Write(m.hold)
	}
	m.sink, m.marker, m.hold = nil, nil, nil
}

func (m *markedStream) feed(b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marker == nil {
		if room := pendingCap - len(m.pending); room > 0 {
			m.pending = append(m.pending, b[:min(len(b), room)]...)
		}
		return
	}
	data := b
	if len(m.hold) > 0 {
		data = append(m.hold, b...)
		m.hold = nil
	}
	if i := bytes.Index(data, m.marker); i >= 0 {
		_, _ = m.sink.Write(data[:i])
		rest := data[i+len(m.marker):]
		close(m.found)
		m.sink, m.marker = nil, nil
		if len(rest) > 0 {
			m.pending = append(m.pending, rest[:min(len(rest), pendingCap)]...)
		}
		return
	}
	// Hold back only a tail that could begin the marker.
	k := min(len(data), len(m.marker)-1)
	for ; k > 0; k-- {
		if bytes.HasSuffix(data, m.marker[:k]) {
			break
		}
	}
	_, _ = m.sink.Write(data[:len(data)-k])
	m.hold = append([]byte(nil), data[len(data)-k:]...)
}

// cellMarker is langs/session.Marker.
func cellMarker(nonce string) []byte { return []byte("\x1esandq-cell-end:" + nonce + "\x1e") }

func newNonce() string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(b)
}

// startSession starts the driver and waits for its ready line.
func (s *Server) startSession(req Request) Response {
	fail := func(format string, args ...any) Response {
		return Response{ID: req.ID, Op: OpError, Error: fmt.Sprintf(format, args...)}
	}
	st := req.Session
	if st == nil {
		return fail("session start without body")
	}
	if s.sess != nil {
		return fail("this container already has a session")
	}
	switch syscall.Signal(st.InterruptNudge) {
	case 0, syscall.SIGURG, syscall.SIGWINCH, syscall.SIGUSR1, syscall.SIGUSR2:
	default:
		return fail("interrupt nudge: signal %d is not one a driver may ignore", st.InterruptNudge)
	}
	if err := s.writeDriver(st.DriverDir, st.DriverFiles); err != nil {
		return fail("driver files: %v", err)
	}
	if err := s.writeFiles(st.Files); err != nil {
		return fail("files: %v", err)
	}
	p, err := s.prepareStep(st.Driver)
	if err != nil {
		return fail("driver: %v", err)
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		p.closeAll()
		return fail("pipe: %v", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		p.closeAll()
		closeAll(cmdR, cmdW)
		return fail("pipe: %v", err)
	}
	// The driver's ends are the job uid's: a driver may reopen them
	// through /dev/fd (node, R), which a root-owned 0600 pipe refuses.
	_ = syscall.Fchown(int(cmdR.Fd()), s.cfg.JobUID, s.cfg.JobGID)
	_ = syscall.Fchown(int(repW.Fd()), s.cfg.JobUID, s.cfg.JobGID)
	p.attr.Files = append(p.attr.Files, cmdR.Fd(), repW.Fd())
	pid, exited, err := s.reaper.spawn(p.argv0, p.argv, p.attr)
	p.closeChildEnds()
	closeAll(cmdR, repW)
	if err != nil {
		closeAll(p.outR, p.errR, cmdW, repR)
		return fail("cannot run %s: %v", st.Driver.Argv[0], err)
	}
	pinOOM(pid)
	sess := &session{pid: pid, exited: exited, cmd: cmdW, replies: make(chan []byte, 1), intrEvery: st.InterruptEvery, nudge: syscall.Signal(st.InterruptNudge),
		out: newMarkedStream(p.outR), err: newMarkedStream(p.errR), stopMem: s.mem.watch(st.MemoryLimit)}
	go func() {
		defer close(sess.replies)
		defer repR.Close()
		br := bufio.NewReaderSize(repR, 64<<10)
		for {
			line, err := readLine(br, maxReplyBytes)
			if err != nil {
				return
			}
			sess.replies <- line
		}
	}()
	s.mu.Lock()
	s.sess = sess
	s.mu.Unlock()
	timeout := st.Driver.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	// Start-up output waits (bounded) for the first cell.
	select {
	case line, ok := <-sess.replies:
		var r struct {
			Ready bool `json:"ready"`
		}
		if ok && json.Unmarshal(line, &r) == nil && r.Ready {
			return Response{ID: req.ID, Op: OpSessionReady}
		}
		s.endSession("the interpreter did not start: " + s.driverExit(sess))
	case ei := <-exited:
		sess.exitInfo = &ei
		s.endSession("the interpreter exited at start: " + describeExit(ei))
	case <-time.After(timeout):
		s.endSession(fmt.Sprintf("the interpreter did not start within %s", timeout))
	}
	return fail("%s", sess.ended)
}

// readLine reads a line of at most limit bytes (without its newline).
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, fmt.Errorf("reply line over %d bytes", limit)
		}
		if err == nil {
			return bytes.TrimSuffix(line, []byte("\n")), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

func describeExit(ei exitInfo) string {
	switch ws := ei.status; {
	case ws.Exited():
		return fmt.Sprintf("exit code %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by signal " + ws.Signal().String()
	}
	return "ended"
}

// driverExit waits a moment for the driver's exit and describes it.
func (s *Server) driverExit(sess *session) string {
	if sess.exitInfo == nil {
		select {
		case ei := <-sess.exited:
			sess.exitInfo = &ei
		case <-time.After(s.cfg.KillGrace):
			return "it did not exit"
		}
	}
	return describeExit(*sess.exitInfo)
}

// endSession kills every job process and marks the session over.
func (s *Server) endSession(reason string) {
	sess := s.sess
	sess.mu.Lock()
	if sess.ended != "" {
		sess.mu.Unlock()
		return
	}
	sess.ended = reason
	sess.mu.Unlock()
	killAll(s.cfg.KillGrace)
	sess.stopMem()
	sess.cmd.Close()
}

// serveCell starts a cell unless one runs or the session is over.
func (s *Server) serveCell(req Request) {
	sess := s.sess
	if sess == nil || req.Cell == nil {
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpError, Error: "no session, or a cell without code"})
		return
	}
	sess.mu.Lock()
	switch {
	case sess.ended != "":
		sess.mu.Unlock()
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpCellResult, Cell: &CellResult{Ended: sess.ended, OOMKilled: sess.oom}})
		return
	case sess.busy != 0:
		sess.mu.Unlock()
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpError, Error: "busy: a cell is running"})
		return
	}
	sess.busy, sess.interrupt = req.ID, make(chan struct{})
	sess.mu.Unlock()
	go s.runCell(req)
}

// interruptCell interrupts cell id if it is running.
func (s *Server) interruptCell(id uint64) {
	s.mu.Lock()
	sess := s.sess
	s.mu.Unlock()
	if sess == nil {
		return
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.busy == id && sess.interrupt != nil {
		close(sess.interrupt)
		sess.interrupt = nil
	}
}

// serveFile answers a file op.
func (s *Server) serveFile(req Request) {
	// Files are a session's business; a fork server (and its placeholder
	// script) has no place beside them.
	s.dropPrestart()
	s.preStep = nil
	resp := Response{ID: req.ID, Op: OpFileDone}
	var err error
	switch req.Op {
	case OpPutFile:
		err = s.putFile(req.File)
	case OpGetFile:
		resp.File, err = s.getFile(req.Path)
	case OpListFiles:
		resp.Files, err = s.listFiles(req.Path)
	}
	if err != nil {
		resp = Response{ID: req.ID, Op: OpError, Error: err.Error()}
	}
	_ = s.enc.Encode(resp)
}

// writeDriver writes the driver's files into dir, root-owned, readable
// by all, in a directory the job cannot change.
func (s *Server) writeDriver(dir string, files []File) error {
	if !filepath.IsAbs(dir) || !strings.HasPrefix(filepath.Clean(dir), "/tmp/") {
		return fmt.Errorf("driver dir %q is not under /tmp", dir)
	}
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		name := filepath.Clean(f.Path)
		if !filepath.IsLocal(name) || strings.Contains(name, "/") {
			return fmt.Errorf("driver file %q: not a plain name", f.Path)
		}
		if err := os.WriteFile(filepath.Join(dir, name), f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runCell runs one cell; it is called in its own goroutine and always
// answers.
func (s *Server) runCell(req Request) {
	sess := s.sess
	res := CellResult{}
	// The session is free again before the answer goes: the worker may
	// send the next cell as soon as it has it.
	answer := func() {
		sess.mu.Lock()
		sess.busy, sess.interrupt = 0, nil
		sess.mu.Unlock()
		_ = s.enc.Encode(Response{ID: req.ID, Op: OpCellResult, Cell: &res})
	}
	c := req.Cell
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	stdout, stderr := newCapture(c.OutputLimit), newCapture(c.OutputLimit)
	var outW, errW io.Writer = stdout, stderr
	var lv *live
	if c.Live {
		lv = newLive(0, "cell", c.OutputLimit, func(ch LiveChunk, last bool) {
			s.send(Response{ID: req.ID, Op: OpLive, Live: &ch}, !last)
		})
		outW, errW = io.MultiWriter(stdout, lv.writer(0)), io.MultiWriter(stderr, lv.writer(1))
	}
	nonce := newNonce()
	marker := cellMarker(nonce)
	foundOut, foundErr := sess.out.begin(marker, outW), sess.err.begin(marker, errW)
	finish := func() {
		sess.out.end()
		sess.err.end()
		if lv != nil {
			lv.close()
		}
		res.Stdout, res.Stderr = stdout.output(), stderr.output()
	}
	cpu0 := procCPU(sess.pid)
	oom0 := s.mem.oomKills()
	start := time.Now()

	sent := make(chan error, 1)
	go func() {
		header := nonce + " " + strconv.Itoa(len(c.Code)) + "\n"
		_, err := sess.cmd.Write(append([]byte(header), c.Code...))
		sent <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var grace, again <-chan time.Time
	var repeat *time.Ticker
	defer func() {
		if repeat != nil {
			repeat.Stop()
		}
	}()
	sess.mu.Lock()
	intr := sess.interrupt
	sess.mu.Unlock()
	interrupt := func() {
		res.Interrupted = true
		_ = syscall.Kill(-sess.pid, syscall.SIGINT)
		grace = time.After(InterruptGrace)
		if sess.intrEvery > 0 {
			// Until the reply: a SIGINT can miss (bash loses one that
			// lands between fork and exec of a foreground command,
			// CPython one that lands just before a blocking call).
			repeat = time.NewTicker(sess.intrEvery)
			again = repeat.C
		}
	}
	var reply []byte
wait:
	for {
		select {
		case err := <-sent:
			sent = nil
			if err != nil {
				s.endSession("the interpreter stopped reading: " + err.Error())
				break wait
			}
		case line, ok := <-sess.replies:
			if !ok {
				s.endSession("the interpreter exited: " + s.driverExit(sess))
				break wait
			}
			var r struct {
				Nonce string `json:"nonce"`
			}
			if json.Unmarshal(line, &r) != nil || r.Nonce != nonce {
				continue // a reply the cell forged, or a stale one
			}
			reply = line
			break wait
		case ei := <-sess.exited:
			sess.exitInfo = &ei
			s.endSession("the interpreter exited: " + describeExit(ei))
			break wait
		case <-timer.C:
			res.TimedOut = true
			interrupt()
		case <-intr:
			intr = nil
			if !res.Interrupted {
				interrupt()
			}
		case <-again:
			if sess.nudge != 0 {
				_ = syscall.Kill(sess.pid, sess.nudge)
			} else {
				_ = syscall.Kill(-sess.pid, syscall.SIGINT)
			}
		case <-grace:
			s.endSession("the interpreter did not stop when interrupted")
			break wait
		}
	}
	res.WallNs = int64(time.Since(start))
	if reply != nil {
		res.Reply = reply
		deadline := time.After(markerWait)
		for _, f := range []chan struct{}{foundOut, foundErr} {
			select {
			case <-f:
			case <-deadline:
			}
		}
	} else {
		// The driver is dead: what it wrote is at EOF soon.
		for _, e := range []chan struct{}{sess.out.eof, sess.err.eof} {
			select {
			case <-e:
			case <-time.After(markerWait):
			}
		}
	}
	finish()
	if sess.exitInfo != nil {
		ru := sess.exitInfo.rusage
		res.CPUNs = max(int64(rusageCPU(&ru))-cpu0, 0)
		res.MaxRSSKB = ru.Maxrss
	} else {
		res.CPUNs = max(procCPU(sess.pid)-cpu0, 0)
		res.MaxRSSKB = procHWM(sess.pid)
	}
	if s.mem.oomKills() > oom0 {
		res.OOMKilled = true
		if sess.ended == "" {
			// The OOM killer took a process of the cell; the
			// interpreter may live, but its state is in doubt.
			s.endSession("out of memory")
		}
		sess.oom = true
	}
	sess.mu.Lock()
	res.Ended = sess.ended
	sess.mu.Unlock()
	answer()
}

// procCPU is the CPU time of pid and its reaped children, in ns.
func procCPU(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, _ := strconv.ParseInt(f[k], 10, 64)
		ticks += v
	}
	return ticks * int64(time.Second) / 100
}

// procHWM is pid's peak RSS in KiB.
func procHWM(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// putFile writes one file into the work dir, replacing a file there.
func (s *Server) putFile(f *File) error {
	if f == nil {
		return errors.New("no file")
	}
	if len(f.Data) > MaxFileBytes {
		return fmt.Errorf("%d bytes; the cap is %d", len(f.Data), MaxFileBytes)
	}
	return putBeneath(s.cfg.WorkDir, f.Path, f.Data, f.Mode, s.cfg.JobUID, s.cfg.JobGID)
}

// getFile reads a regular file of the work dir.
func (s *Server) getFile(p string) (*File, error) {
	data, mode, err := getBeneath(s.cfg.WorkDir, p, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	return &File{Path: p, Data: data, Mode: uint32(mode.Perm())}, nil
}

// listFiles lists dir of the work dir recursively, never following a
// symbolic link, at most maxListEntries entries.
func (s *Server) listFiles(dir string) ([]FileInfo, error) {
	return listBeneath(s.cfg.WorkDir, dir, maxListEntries, time.Now().Add(5*time.Second))
}
