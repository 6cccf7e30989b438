package jobstest

import (
	"context"
	"encoding/base64"
	"github.com/sandq/sandq/internal/store"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandq/sandq/jobs"
)

// FakeSessionWorker stands in for a worker's session service: it takes
// session slots in the namespace's registry, keeps its heartbeat, and
// answers session commands from memory, without containers. A cell's
// outcome is decided by its code:
//
//	"# ERROR"    status error, a ValueError with a traceback
//	"# TIMEOUT"  status timeout
//	"# OOM"      the session ends oom during the cell (session_ended)
//	"# SLEEP"    runs until interrupted, then an error KeyboardInterrupt
//	"# DISPLAY"  ok, with a text/plain and an image/png result
//
// anything else is ok with the code as its stdout. A streamed cell's
// stdout goes to its stream, then the end entry. Files live in a map.
type FakeSessionWorker struct {
	Owner string
	n     *Namespace

	mu       sync.Mutex
	sessions map[string]*fakeSession
}

type fakeSession struct {
	info   jobs.SessionInfo
	files  map[string][]byte
	cancel context.CancelFunc // the running cell's; nil when idle
}

// StartFakeSessionWorker starts a FakeSessionWorker with slots free
// session slots, stopped when the test ends.
func (n *Namespace) StartFakeSessionWorker(t testing.TB, slots int) *FakeSessionWorker {
	t.Helper()
	w := &FakeSessionWorker{Owner: "fake-" + jobs.NewID()[:8], n: n, sessions: map[string]*fakeSession{}}
	ctx, cancel := context.WithCancel(context.Background())
	if err := n.Store.SessionHeartbeat(ctx, w.Owner, slots, true); err != nil {
		t.Fatalf("fake session worker: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(jobs.SessionHeartbeatTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = n.Store.SessionHeartbeat(ctx, w.Owner, slots, false)
			}
		}
	})
	wg.Go(func() {
		for ctx.Err() == nil {
			cmd, err := n.Store.NextSessionCommand(ctx, w.Owner, time.Second)
			if err != nil || cmd == nil {
				continue
			}
			wg.Go(func() {
				_ = n.Store.ReplySession(context.WithoutCancel(ctx), cmd.ReqID, w.handle(ctx, cmd))
			})
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = n.Store.SessionServiceGone(context.Background(), w.Owner)
	})
	return w
}

// Stop makes the worker vanish as a killed one would: no heartbeat, no
// answers. Its sessions read as lost from then on.
func (w *FakeSessionWorker) Stop(ctx context.Context) error {
	return w.n.Store.SessionServiceGone(ctx, w.Owner)
}

// Busy reports whether session id is running a cell.
func (w *FakeSessionWorker) Busy(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.sessions[id]
	return s != nil && s.cancel != nil
}

// Files returns a copy of session id's files.
func (w *FakeSessionWorker) Files(id string) map[string][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.sessions[id]; s != nil {
		return maps.Clone(s.files)
	}
	return nil
}

func (w *FakeSessionWorker) handle(ctx context.Context, cmd *store.SessionCommand) store.SessionReply {
	st := w.n.Store
	if cmd.Op == store.SessionOpCreate {
		info, err := st.GetSession(ctx, cmd.Session)
		if err != nil {
			return store.SessionReply{Code: store.ReplyInternal, Error: err.Error()}
		}
		s := &fakeSession{info: info, files: map[string][]byte{}}
		for _, f := range cmd.Spec.Files {
			s.files[f.Path] = f.ContentB64
		}
		s.info.State = jobs.SessionReady
		w.mu.Lock()
		w.sessions[cmd.Session] = s
		w.mu.Unlock()
		_ = st.PutSession(ctx, s.info)
		return store.SessionReply{Info: &s.info}
	}
	w.mu.Lock()
	s := w.sessions[cmd.Session]
	if s == nil {
		w.mu.Unlock()
		return store.SessionReply{Code: store.ReplyNotFound, Error: "no such session here"}
	}
	info := s.info
	switch {
	case info.State.Final():
		w.mu.Unlock()
		return store.SessionReply{Code: store.ReplyEnded, Error: info.Reason, Info: &info}
	case cmd.Op == store.SessionOpInterrupt:
		if s.cancel != nil {
			s.cancel()
		}
		w.mu.Unlock()
		return store.SessionReply{Info: &info}
	case s.cancel != nil && cmd.Op != store.SessionOpClose:
		w.mu.Unlock()
		return store.SessionReply{Code: store.ReplyBusy, Error: "a cell is running", Info: &info}
	}
	defer w.mu.Unlock()
	switch cmd.Op {
	case store.SessionOpUpload:
		s.files[cmd.Path] = cmd.Data
		return store.SessionReply{Info: &info}
	case store.SessionOpDownload:
		data, ok := s.files[cmd.Path]
		if !ok {
			return store.SessionReply{Code: store.ReplyInvalid, Error: "no file " + cmd.Path, Info: &info}
		}
		return store.SessionReply{Data: data, Info: &info}
	case store.SessionOpFiles:
		var out []jobs.FileEntry
		for _, p := range slices.Sorted(maps.Keys(s.files)) {
			if cmd.Path == "" || cmd.Path == "." || strings.HasPrefix(p, cmd.Path+"/") {
				out = append(out, jobs.FileEntry{Path: p, Size: int64(len(s.files[p])), Mode: 0o644, ModTime: time.Unix(1700000000, 0).UTC()})
			}
		}
		return store.SessionReply{Files: out, Info: &info}
	case store.SessionOpClose:
		if s.cancel != nil {
			s.cancel()
		}
		return store.SessionReply{Info: w.end(ctx, s, jobs.SessionClosed, "closed by its owner")}
	case store.SessionOpExec:
		cctx, cancel := context.WithCancel(ctx)
		s.cancel = cancel
		w.mu.Unlock()
		r := w.exec(cctx, *cmd.Cell)
		cancel()
		w.mu.Lock()
		s.cancel = nil
		s.info.ExecutionCount++
		s.info.LastUsedAt = time.Now().UTC()
		r.ID, r.ExecutionCount = cmd.Cell.ID, s.info.ExecutionCount
		if cmd.Cell.Stream {
			id := jobs.CellStreamID(cmd.Session, cmd.Cell.ID)
			var entries []jobs.StreamEntry
			if r.Stdout != "" {
				entries = append(entries, jobs.StreamEntry{Attempt: 1, Step: "run", Stream: "stdout", Data: []byte(r.Stdout)})
			}
			if r.Stderr != "" {
				entries = append(entries, jobs.StreamEntry{Attempt: 1, Step: "run", Stream: "stderr", Data: []byte(r.Stderr)})
			}
			entries = append(entries, jobs.StreamEntry{Attempt: 1, Status: jobs.StatusSucceeded})
			_ = st.AppendStream(ctx, id, time.Minute, entries)
		}
		if r.Status == jobs.CellSessionEnded {
			info := w.end(ctx, s, jobs.SessionOOM, "the interpreter was killed for memory")
			r.Session, r.Reason = info.State, info.Reason
			return store.SessionReply{Cell: &r, Info: info}
		}
		s.info.State = jobs.SessionReady
		_ = st.PutSession(ctx, s.info)
		r.Session = s.info.State
		info := s.info
		return store.SessionReply{Cell: &r, Info: &info}
	}
	return store.SessionReply{Code: store.ReplyInvalid, Error: "unknown op " + string(cmd.Op)}
}

// end ends s (w.mu held) and gives its slot back.
func (w *FakeSessionWorker) end(ctx context.Context, s *fakeSession, state jobs.SessionState, reason string) *jobs.SessionInfo {
	s.info.State, s.info.Reason, s.info.EndedAt = state, reason, time.Now().UTC()
	_ = w.n.Store.PutSession(ctx, s.info)
	_ = w.n.Store.ReleaseSessionSlot(ctx, w.Owner)
	info := s.info
	return &info
}

// pngHeader is the start of a PNG file, enough to look like one.
var pngHeader = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}

func (w *FakeSessionWorker) exec(ctx context.Context, cell jobs.Cell) jobs.CellResult {
	r := jobs.CellResult{Status: jobs.CellOK, Stdout: cell.Code}
	switch {
	case strings.Contains(cell.Code, "# ERROR"):
		r.Status, r.Stdout = jobs.CellError, ""
		r.Error = &jobs.CellErrorInfo{Name: "ValueError", Value: "bad value",
			Traceback: []string{"Traceback (most recent call last):", `  File "<cell>", line 1, in <module>`, "ValueError: bad value"}}
	case strings.Contains(cell.Code, "# TIMEOUT"):
		r.Status, r.Stdout, r.Stderr = jobs.CellTimeout, "partial\n", ""
	case strings.Contains(cell.Code, "# OOM"):
		r.Status, r.Stdout = jobs.CellSessionEnded, ""
	case strings.Contains(cell.Code, "# SLEEP"):
		<-ctx.Done()
		r.Status, r.Stdout = jobs.CellError, ""
		r.Error = &jobs.CellErrorInfo{Name: "KeyboardInterrupt", Value: ""}
	case strings.Contains(cell.Code, "# DISPLAY"):
		r.Stdout = ""
		r.Results = []jobs.Display{
			{Data: map[string]string{"text/plain": "42"}},
			{Data: map[string]string{"image/png": base64.StdEncoding.EncodeToString(pngHeader), "text/plain": "<Figure size 640x480 with 1 Axes>"}},
		}
	}
	return r
}
