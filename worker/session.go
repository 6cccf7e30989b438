package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandq/sandq/internal/store"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs/session"
	"github.com/sandq/sandq/sandbox"
)

// SessionPool is what sessions need of a container pool.
type SessionPool interface {
	Acquire(ctx context.Context, spec sandbox.Spec) (*sandbox.Container, error)
	Release(c *sandbox.Container, healthy bool)
}

// SessionsConfig configures a worker's sessions.
type SessionsConfig struct {
	// Handler lends its policy, image prefix, library installs and live
	// output settings. Required.
	Handler *Handler
	// Pool holds the sessions' containers, apart from the jobs'. Required.
	Pool SessionPool
	// Owner is this worker's ID in the session registry. Required.
	Owner string
	// Max is --max-sessions: how many sessions this worker holds at once.
	Max int
	// DrainTimeout bounds the wait for running cells at shutdown.
	// Default 30 s.
	DrainTimeout time.Duration
	Logger       zerolog.Logger
}

// Sessions serves one worker's sessions: it reads the worker's command
// list, runs each session's cells one at a time in the session's own
// container, and keeps the session records and the worker's free slots
// and heartbeat in Redis (see jobs/session.go).
type Sessions struct {
	cfg   SessionsConfig
	store *store.Store
	log   zerolog.Logger

	mu     sync.Mutex
	live   map[string]*liveSession
	active int // sessions held or starting
	wg     sync.WaitGroup
}

type liveSession struct {
	mu     sync.Mutex
	info   jobs.SessionInfo
	c      *sandbox.Container
	lim    Limits
	busy   bool
	cancel context.CancelFunc // interrupts the running cell
	ended  bool
	idle   *time.Timer
	life   *time.Timer
	// ops counts file operations in flight (they may run beside a cell).
	ops sync.WaitGroup
}

// NewSessions checks cfg.
func NewSessions(cfg SessionsConfig) (*Sessions, error) {
	if cfg.Handler == nil || cfg.Pool == nil || cfg.Owner == "" || cfg.Max <= 0 {
		return nil, errors.New("worker: SessionsConfig needs Handler, Pool, Owner and Max > 0")
	}
	cfg.DrainTimeout = cmp.Or(cfg.DrainTimeout, 30*time.Second)
	return &Sessions{cfg: cfg, store: cfg.Handler.cfg.Store, log: cfg.Logger, live: map[string]*liveSession{}}, nil
}

// Run registers the worker's slots and serves commands until ctx ends;
// then it leaves the registry, lets running cells finish (up to
// DrainTimeout), and closes every session with the reason.
func (m *Sessions) Run(ctx context.Context) error {
	if err := m.Register(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	hbCtx, stopHB := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(sessionBeat)
		defer t.Stop()
		last := time.Now() // the last heartbeat that Redis took
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				if ctx.Err() != nil { // shutting down: alive, but no slots
					_ = m.store.SessionAlive(hbCtx, m.cfg.Owner)
					continue
				}
				last = m.beat(hbCtx, last)
			}
		}
	}()
	for ctx.Err() == nil {
		cmd, err := m.store.NextSessionCommand(ctx, m.cfg.Owner, 2*time.Second)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn().Err(err).Msg("read session commands")
				time.Sleep(time.Second)
			}
			continue
		}
		if cmd != nil {
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.handle(ctx, *cmd)
			}()
		}
	}
	// Shutdown: no new claims (the heartbeat stays until the end, so
	// callers of running cells keep waiting); answer what is queued;
	// drain; close.
	bg := context.Background()
	_ = m.store.WithdrawSessionSlots(bg, m.cfg.Owner)
	for {
		cmd, err := m.store.NextSessionCommand(bg, m.cfg.Owner, 10*time.Millisecond)
		if err != nil || cmd == nil {
			break
		}
		m.reply(*cmd, store.SessionReply{Code: store.ReplyEnded, Error: "the worker is shutting down"})
	}
	m.drain(m.cfg.DrainTimeout)
	m.closeAll("the worker shut down")
	stopHB()
	<-hbDone
	_ = m.store.SessionServiceGone(bg, m.cfg.Owner)
	return nil
}

// Register puts the worker's free slots in the registry, with its
// heartbeat: sessions may be created on it from then on (Run serves
// them). A worker calls it before it says it has started.
func (m *Sessions) Register(ctx context.Context) error {
	return m.heartbeat(ctx, true)
}

// sessionBeat is how often a worker refreshes its session heartbeat: three
// times within its TTL.
const sessionBeat = jobs.SessionHeartbeatTTL / 3

// beat refreshes the heartbeat and returns when Redis last took one: now,
// or last when this one failed. A heartbeat more than two beats after the
// last brings the TTL near; it is logged with how late it came and how
// long it took, to find what it waited on.
func (m *Sessions) beat(ctx context.Context, last time.Time) time.Time {
	start := time.Now()
	if err := m.heartbeat(ctx, false); err != nil {
		if ctx.Err() == nil {
			m.log.Warn().Err(err).Dur("since_last", time.Since(last)).Msg("session heartbeat")
		}
		return last
	}
	if gap := time.Since(last); gap > 2*sessionBeat {
		m.log.Warn().Dur("since_last", gap).Dur("took", time.Since(start)).Dur("ttl", jobs.SessionHeartbeatTTL).
			Msg("session heartbeat late")
	}
	return time.Now()
}

// heartbeat refreshes the worker's heartbeat and, first or when its
// registry entry is gone, its free slot count.
func (m *Sessions) heartbeat(ctx context.Context, first bool) error {
	m.mu.Lock()
	free := m.cfg.Max - m.active
	m.mu.Unlock()
	return m.store.SessionHeartbeat(ctx, m.cfg.Owner, free, first)
}

// drain waits until no cell runs, at most d.
func (m *Sessions) drain(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		busy := false
		m.mu.Lock()
		for _, s := range m.live {
			s.mu.Lock()
			busy = busy || s.busy
			s.mu.Unlock()
		}
		m.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *Sessions) closeAll(reason string) {
	m.mu.Lock()
	all := make([]*liveSession, 0, len(m.live))
	for _, s := range m.live {
		all = append(all, s)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() { m.end(s, jobs.SessionClosed, reason) })
	}
	wg.Wait()
}

func (m *Sessions) reply(cmd store.SessionCommand, r store.SessionReply) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.store.ReplySession(ctx, cmd.ReqID, r); err != nil {
		m.log.Warn().Err(err).Str("session", cmd.Session).Msg("session reply")
	}
}

func errReply(code, format string, args ...any) store.SessionReply {
	return store.SessionReply{Code: code, Error: fmt.Sprintf(format, args...)}
}

// handle carries out one command and replies.
func (m *Sessions) handle(ctx context.Context, cmd store.SessionCommand) {
	if !cmd.Deadline.IsZero() && time.Now().After(cmd.Deadline) {
		if cmd.Op == store.SessionOpCreate {
			// The creator gave up: give the slot back, end the record.
			_ = m.store.ReleaseSessionSlot(context.Background(), m.cfg.Owner)
			m.record(jobs.SessionInfo{ID: cmd.Session}, jobs.SessionLost, "the create request expired before the worker read it")
		}
		return
	}
	if cmd.Op == store.SessionOpCreate {
		m.reply(cmd, m.create(ctx, cmd))
		return
	}
	m.mu.Lock()
	s := m.live[cmd.Session]
	m.mu.Unlock()
	if s == nil {
		info, err := m.store.GetSession(context.Background(), cmd.Session)
		if err == nil && info.State.Final() {
			m.reply(cmd, store.SessionReply{Code: store.ReplyEnded, Error: info.Reason, Info: &info})
		} else {
			m.reply(cmd, errReply(store.ReplyNotFound, "no session %s on worker %s", cmd.Session, m.cfg.Owner))
		}
		return
	}
	switch cmd.Op {
	case store.SessionOpExec:
		m.exec(ctx, s, cmd) // it replies
	case store.SessionOpInterrupt:
		s.mu.Lock()
		if s.cancel != nil {
			s.cancel()
		}
		info := s.info
		s.mu.Unlock()
		m.reply(cmd, store.SessionReply{Info: &info})
	case store.SessionOpUpload, store.SessionOpDownload, store.SessionOpFiles:
		m.reply(cmd, m.file(ctx, s, cmd))
	case store.SessionOpClose:
		info := m.end(s, jobs.SessionClosed, "closed by request")
		m.reply(cmd, store.SessionReply{Info: &info})
	default:
		m.reply(cmd, errReply(store.ReplyInvalid, "unknown session operation %q", cmd.Op))
	}
}

// create starts a session: its libraries, container, files and
// interpreter.
func (m *Sessions) create(ctx context.Context, cmd store.SessionCommand) store.SessionReply {
	h := m.cfg.Handler
	if cmd.Spec == nil {
		return errReply(store.ReplyInvalid, "create without a spec")
	}
	spec := *cmd.Spec
	spec.ID = cmd.Session
	m.mu.Lock()
	if m.active >= m.cfg.Max {
		m.mu.Unlock()
		_ = m.heartbeat(context.Background(), true)
		m.record(jobs.SessionInfo{ID: spec.ID, Tenant: spec.Tenant, Lang: spec.Lang}, jobs.SessionLost, "the worker is at --max-sessions")
		return errReply(store.ReplyFull, "worker %s holds --max-sessions (%d) sessions", m.cfg.Owner, m.cfg.Max)
	}
	m.active++
	m.mu.Unlock()
	started := false
	defer func() {
		if !started {
			m.mu.Lock()
			m.active--
			m.mu.Unlock()
			_ = m.store.ReleaseSessionSlot(context.Background(), m.cfg.Owner)
		}
	}()
	info, err := m.store.GetSession(ctx, spec.ID)
	if err != nil {
		return errReply(store.ReplyInternal, "read the session record: %v", err)
	}
	fail := func(code, reason string) store.SessionReply {
		info = m.record(info, jobs.SessionLost, reason)
		return store.SessionReply{Code: code, Error: reason, Info: &info}
	}
	// A producer may not have used our client: validate again.
	if err := h.cfg.Policy.ValidateSession(&spec); err != nil {
		return fail(store.ReplyInvalid, err.Error())
	}
	driver, _ := session.For(spec.Lang)
	job := jobs.Job{Lang: spec.Lang, Code: "-", Limits: spec.Limits, Libraries: spec.Libraries, Tenant: spec.Tenant, Env: spec.Env}
	h.cfg.Policy.Normalize(&job)
	var set libs
	if len(job.Libraries) > 0 {
		var failed string
		set, _, failed, err = h.installLibs(ctx, job)
		switch {
		case errors.Is(err, errInfra):
			return fail(store.ReplyInternal, "library install: "+err.Error())
		case err != nil:
			return fail(store.ReplyInvalid, err.Error())
		case failed != "":
			return fail(store.ReplyInvalid, "library install failed: "+failed)
		}
	}
	lim := LimitsOf(job.Limits)
	// A session's container serves it alone and is removed after, so the
	// pool key needs no tenant: an idle container was never used, and a
	// warm one (--warm-sessions) serves any tenant.
	pj := job
	pj.Tenant = ""
	sspec := SpecOf(pj, h.cfg.ImagePrefix, set.volume)
	if err := h.applyEnvironment(ctx, spec.Environment, job.Tenant, job.Lang, &sspec, nil); err != nil {
		if errors.Is(err, errInfra) {
			return fail(store.ReplyInternal, err.Error())
		}
		return fail(store.ReplyInvalid, err.Error())
	}
	c, err := m.cfg.Pool.Acquire(ctx, sspec)
	if err != nil {
		return fail(store.ReplyInternal, "no container: "+err.Error())
	}
	env := slices.Concat(set.env, driver.Env)
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	start := &agent.SessionStart{
		Driver: agent.Step{Name: "session", Argv: driver.Argv, Env: env, Timeout: 30 * time.Second,
			OutputLimit: lim.OutputBytes, Rlimits: lim.Rlimits},
		DriverDir: session.Dir, MemoryLimit: lim.MemoryBytes, InterruptEvery: driver.InterruptEvery,
		InterruptNudge: int(driver.InterruptNudge),
	}
	for _, f := range driver.Files {
		start.DriverFiles = append(start.DriverFiles, agent.File{Path: f.Path, Data: f.Data})
	}
	for _, f := range spec.Files {
		start.Files = append(start.Files, agent.File{Path: f.Path, Data: f.ContentB64, Mode: f.Mode})
	}
	if err := c.StartSession(ctx, start); err != nil {
		m.cfg.Pool.Release(c, false)
		var ae *sandbox.AgentError
		if errors.As(err, &ae) {
			return fail(store.ReplyInvalid, ae.Msg)
		}
		return fail(store.ReplyInternal, err.Error())
	}
	now := time.Now().UTC()
	info.ID, info.Tenant, info.Lang, info.Worker = spec.ID, spec.Tenant, spec.Lang, m.cfg.Owner
	info.State, info.LastUsedAt, info.Limits = jobs.SessionReady, now, job.Limits
	info.IdleTTLSeconds = spec.IdleTTLSeconds
	if info.CreatedAt.IsZero() {
		info.CreatedAt = now
	}
	if info.ExpiresAt.IsZero() {
		info.ExpiresAt = now.Add(time.Duration(spec.LifetimeSeconds) * time.Second)
	}
	s := &liveSession{info: info, c: c, lim: lim}
	s.idle = time.AfterFunc(time.Duration(spec.IdleTTLSeconds)*time.Second, func() { m.expireIdle(s) })
	s.life = time.AfterFunc(time.Until(info.ExpiresAt), func() {
		m.end(s, jobs.SessionExpired, fmt.Sprintf("its lifetime of %s ended", time.Duration(spec.LifetimeSeconds)*time.Second))
	})
	m.mu.Lock()
	m.live[spec.ID] = s
	m.mu.Unlock()
	started = true
	if err := m.store.PutSession(context.Background(), info); err != nil {
		m.log.Warn().Err(err).Str("session", spec.ID).Msg("session record")
	}
	m.log.Info().Str("session", spec.ID).Str("lang", spec.Lang).Str("tenant", spec.Tenant).Msg("session started")
	return store.SessionReply{Info: &info}
}

// expireIdle ends s if no cell ran for its idle TTL (a running cell
// re-arms it).
func (m *Sessions) expireIdle(s *liveSession) {
	s.mu.Lock()
	ttl := time.Duration(s.info.IdleTTLSeconds) * time.Second
	if s.busy || time.Since(s.info.LastUsedAt) < ttl {
		if !s.ended {
			s.idle.Reset(max(ttl-time.Since(s.info.LastUsedAt), time.Second))
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	m.end(s, jobs.SessionExpired, fmt.Sprintf("idle for %s", ttl))
}

// exec runs one cell and replies.
func (m *Sessions) exec(ctx context.Context, s *liveSession, cmd store.SessionCommand) {
	h := m.cfg.Handler
	if cmd.Cell == nil {
		m.reply(cmd, errReply(store.ReplyInvalid, "exec without a cell"))
		return
	}
	cell := *cmd.Cell
	s.mu.Lock()
	switch {
	case s.ended:
		info := s.info
		s.mu.Unlock()
		m.reply(cmd, store.SessionReply{Code: store.ReplyEnded, Error: info.Reason, Info: &info})
		return
	case s.busy:
		info := s.info
		s.mu.Unlock()
		m.reply(cmd, store.SessionReply{Code: store.ReplyBusy, Error: "a cell is running", Info: &info})
		return
	}
	s.busy = true
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.mu.Unlock()
	defer cancel()

	timeout := s.lim.Timeout
	if cell.TimeoutMS > 0 {
		timeout = min(time.Duration(cell.TimeoutMS)*time.Millisecond, time.Duration(h.cfg.Policy.MaxLimits.TimeoutMS)*time.Millisecond)
	}
	var live *liveOutput
	var push func(agent.LiveChunk)
	if cell.Stream {
		live = newLiveOutput(m.store, jobs.CellStreamID(s.info.ID, cell.ID), 1, h.cfg.StreamTTL, m.log)
		push = live.push
	}
	res, err := s.c.Cell(cctx, &agent.CellRequest{Code: cell.Code, Timeout: timeout, OutputLimit: s.lim.OutputBytes, Live: cell.Stream}, push)
	out := jobs.CellResult{ID: cell.ID}
	if err != nil {
		var ae *sandbox.AgentError
		if errors.As(err, &ae) {
			s.mu.Lock()
			s.busy, s.cancel = false, nil
			s.mu.Unlock()
			if live != nil {
				live.finish(jobs.StatusFailed)
			}
			m.reply(cmd, errReply(store.ReplyBusy, "%s", ae.Msg))
			return
		}
		res = agent.CellResult{Ended: "the container failed: " + err.Error()}
	}
	out.Stdout, out.Stderr = string(res.Stdout.Bytes()), string(res.Stderr.Bytes())
	out.StdoutTruncated, out.StderrTruncated = res.Stdout.Truncated, res.Stderr.Truncated
	out.Usage = jobs.Usage{WallMS: res.WallNs / 1e6, CPUMS: res.CPUNs / 1e6, MaxRSSKB: res.MaxRSSKB}
	var reply session.Reply
	if len(res.Reply) > 0 {
		if jerr := json.Unmarshal(res.Reply, &reply); jerr != nil {
			res.Ended = cmp.Or(res.Ended, "the interpreter's reply is not valid: "+jerr.Error())
		}
	}
	out.ExecutionCount = reply.ExecutionCount
	for _, b := range reply.Results {
		out.Results = append(out.Results, jobs.DisplayOf(b))
	}
	m.spillResults(ctx, s.info.ID, &out)
	if reply.Error != nil {
		out.Error = &jobs.CellErrorInfo{Name: reply.Error.Name, Value: reply.Error.Value, Traceback: reply.Error.Traceback}
	}
	streamStatus := jobs.StatusSucceeded
	switch {
	case res.Ended != "":
		out.Status, streamStatus = jobs.CellSessionEnded, jobs.StatusFailed
	case res.TimedOut:
		out.Status, streamStatus = jobs.CellTimeout, jobs.StatusTimeout
	case reply.Status == "error":
		out.Status, streamStatus = jobs.CellError, jobs.StatusFailed
	default:
		out.Status = jobs.CellOK
	}
	if res.OOMKilled {
		streamStatus = jobs.StatusOOM
	}
	if live != nil {
		live.finish(streamStatus)
	}
	s.mu.Lock()
	s.busy, s.cancel = false, nil
	s.info.LastUsedAt = time.Now().UTC()
	s.info.ExecutionCount = max(s.info.ExecutionCount+1, reply.ExecutionCount)
	info := s.info
	s.mu.Unlock()
	record := &info // written with the reply
	if res.Ended != "" {
		state := jobs.SessionLost
		if res.OOMKilled {
			state = jobs.SessionOOM
		}
		info, record = m.end(s, state, res.Ended), nil
	}
	out.Session, out.Reason = info.State, info.Reason
	// The reply goes with the session's record and its cell history (the
	// dashboard's: heads only, the last store.SessionCellsKept), in one
	// round trip on the cell's path.
	rctx, cancelReply := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelReply()
	answer := store.SessionReply{Cell: &out, Info: &info}
	if err := m.store.ReplyCell(rctx, cmd.ReqID, answer, record, info.ID, store.SessionCellOf(cell.Code, out, time.Now().UTC())); err != nil {
		m.log.Warn().Err(err).Str("session", info.ID).Msg("session reply, record and cell history")
	}
}

// MaxInlineResultBytes is the largest displayed value kept in a cell
// result; a larger one (a big image, a plotly page) goes to the artifact
// store and its bundle names it instead.
const MaxInlineResultBytes = 256 << 10

// spillResults moves displayed values over MaxInlineResultBytes to the
// artifact store: the bundle keeps its small types and gains "artifact"
// (the name) and "url"; without a store, or when the upload fails, the
// value is replaced by a note of its size.
func (m *Sessions) spillResults(ctx context.Context, session string, out *jobs.CellResult) {
	h := m.cfg.Handler
	for i := range out.Results {
		d := &out.Results[i]
		for _, mime := range d.Types() {
			v := d.Data[mime]
			if len(v) <= MaxInlineResultBytes {
				continue
			}
			data := []byte(v)
			if b, err := base64.StdEncoding.DecodeString(v); err == nil && !strings.HasPrefix(mime, "text/") {
				data = b
			}
			name := fmt.Sprintf("cells/%s/result-%d%s", out.ID, i+1, extOf(mime))
			delete(d.Data, mime)
			if h.cfg.Artifacts == nil {
				d.Data["text/plain"] = fmt.Sprintf("[%s, %d bytes: too large to keep inline, and this worker has no artifact store]", mime, len(data))
				continue
			}
			key, err := artifacts.Key(h.cfg.ArtifactPrefix, session, name)
			if err == nil {
				err = artifacts.Retry(ctx, h.cfg.UploadAttempts, h.cfg.UploadBackoff, func() error {
					return h.cfg.Artifacts.Put(ctx, key, bytes.NewReader(data), int64(len(data)), mime)
				})
			}
			var url string
			if err == nil {
				url, err = h.cfg.Artifacts.URL(ctx, key)
			}
			if err != nil {
				d.Data["text/plain"] = fmt.Sprintf("[%s, %d bytes: too large to keep inline, and storing it failed: %v]", mime, len(data), err)
				continue
			}
			d.Artifact, d.URL = name, url
			out.Artifacts = append(out.Artifacts, jobs.Artifact{Name: name, Kind: "result", Key: key, URL: url, Size: int64(len(data)), ContentType: mime})
		}
	}
}

func extOf(mime string) string {
	switch mime {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/svg+xml":
		return ".svg"
	case "text/html":
		return ".html"
	case "application/json":
		return ".json"
	}
	return ".bin"
}

// file carries out an upload, download or listing.
func (m *Sessions) file(ctx context.Context, s *liveSession, cmd store.SessionCommand) store.SessionReply {
	if err := jobs.ValidSessionPath(cmd.Path, cmd.Op == store.SessionOpFiles); err != nil {
		return errReply(store.ReplyInvalid, "%v", err)
	}
	s.mu.Lock()
	if s.ended {
		info := s.info
		s.mu.Unlock()
		return store.SessionReply{Code: store.ReplyEnded, Error: info.Reason, Info: &info}
	}
	s.ops.Add(1)
	s.info.LastUsedAt = time.Now().UTC()
	s.mu.Unlock()
	defer s.ops.Done()
	var r store.SessionReply
	var err error
	switch cmd.Op {
	case store.SessionOpUpload:
		err = s.c.PutFile(ctx, agent.File{Path: cmd.Path, Data: cmd.Data})
	case store.SessionOpDownload:
		r.Data, err = s.c.GetFile(ctx, cmd.Path)
	case store.SessionOpFiles:
		var fs []agent.FileInfo
		fs, err = s.c.ListFiles(ctx, cmd.Path)
		for _, f := range fs {
			r.Files = append(r.Files, jobs.FileEntry{Path: f.Path, Size: f.Size, Dir: f.Dir, Mode: f.Mode, ModTime: f.ModTime})
		}
	}
	var ae *sandbox.AgentError
	switch {
	case errors.As(err, &ae):
		return errReply(store.ReplyInvalid, "%s", ae.Msg)
	case err != nil:
		info := m.end(s, jobs.SessionLost, "the container failed: "+err.Error())
		return store.SessionReply{Code: store.ReplyLost, Error: info.Reason, Info: &info}
	}
	return r
}

// end ends a session once: interrupts its cell, removes its container,
// records the state and gives the slot back. It returns the final record.
func (m *Sessions) end(s *liveSession, state jobs.SessionState, reason string) jobs.SessionInfo {
	s.mu.Lock()
	if s.ended {
		info := s.info
		s.mu.Unlock()
		return info
	}
	s.ended = true
	if s.cancel != nil {
		s.cancel()
	}
	s.idle.Stop()
	s.life.Stop()
	s.mu.Unlock()
	m.mu.Lock()
	delete(m.live, s.info.ID)
	m.active--
	m.mu.Unlock()
	m.cfg.Pool.Release(s.c, false) // never reused
	s.mu.Lock()
	info := m.record(s.info, state, reason)
	s.info = info
	s.mu.Unlock()
	_ = m.store.ReleaseSessionSlot(context.Background(), m.cfg.Owner)
	m.log.Info().Str("session", info.ID).Str("state", string(state)).Str("reason", reason).Msg("session ended")
	return info
}

// record writes info as ended in state for reason.
func (m *Sessions) record(info jobs.SessionInfo, state jobs.SessionState, reason string) jobs.SessionInfo {
	info.State, info.Reason, info.EndedAt = state, reason, time.Now().UTC()
	if info.CreatedAt.IsZero() {
		info.CreatedAt = info.EndedAt
	}
	if err := m.store.PutSession(context.Background(), info); err != nil {
		m.log.Warn().Err(err).Str("session", info.ID).Msg("session record")
	}
	return info
}

// Active returns how many sessions the worker holds.
func (m *Sessions) Active() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active
}
