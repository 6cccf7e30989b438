package jobs

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sessions: a live interpreter in one container, run cell by cell. The
// routing through Redis (a registry of free slots per worker, a command
// list per worker, replies, records) is the store's (internal/store); the
// client opens and drives them.

// SessionState is where a session is in its life.
type SessionState string

const (
	SessionStarting SessionState = "starting" // claimed, the container is starting
	SessionReady    SessionState = "ready"    // waiting for a cell
	SessionClosed   SessionState = "closed"   // closed by its owner, or at shutdown
	SessionExpired  SessionState = "expired"  // idle TTL or lifetime reached
	SessionLost     SessionState = "lost"     // the interpreter or its worker died
	SessionOOM      SessionState = "oom"      // the interpreter was killed for memory
)

// finalSessionStates lists every end state: Final and the store's Lua
// script both read it, so the two cannot disagree.
var finalSessionStates = []SessionState{SessionClosed, SessionExpired, SessionLost, SessionOOM}

// Final reports whether s is an end state.
func (s SessionState) Final() bool { return slices.Contains(finalSessionStates, s) }

// FinalSessionStates returns every end state.
func FinalSessionStates() []SessionState { return slices.Clone(finalSessionStates) }

// Session defaults and bounds.
const (
	DefaultSessionIdleTTL  = 10 * time.Minute
	DefaultSessionLifetime = time.Hour
	MaxSessionLifetime     = 24 * time.Hour
	// SessionRetention is how long an ended session's record stays.
	SessionRetention = time.Hour
	// SessionHeartbeatTTL is the life of a worker's session heartbeat.
	SessionHeartbeatTTL = 6 * time.Second
	// MaxSessionFileBytes caps one uploaded or downloaded file.
	MaxSessionFileBytes = 16 * MiB
)

// SessionSpec is what a session is created with.
type SessionSpec struct {
	// ID is optional; one is generated. Same charset as a job ID.
	ID string `json:"id,omitempty"`
	// Lang must have a session driver: python, javascript, r or bash.
	Lang string `json:"lang"`
	// Limits bound the container, as a job's; TimeoutMS is each cell's
	// default timeout.
	Limits Limits `json:"limits,omitzero"`
	// Libraries are installed before the interpreter starts, as a job's.
	Libraries []string `json:"libraries,omitempty"`
	// Files are written into the work dir before the interpreter starts
	// (inline content only; upload more later).
	Files []File `json:"files,omitempty"`
	// Env is added to the interpreter's environment.
	Env map[string]string `json:"env,omitempty"`
	// Environment and Network are as a Job's.
	Environment string         `json:"environment,omitempty"`
	Network     *NetworkPolicy `json:"network,omitempty"`
	// Tenant owns the session; only its own callers may reach it.
	Tenant string `json:"tenant,omitempty"`
	// IdleTTLSeconds closes the session when no cell ran for this long
	// (default 600). LifetimeSeconds closes it this long after creation
	// (default 3600, at most 86400).
	IdleTTLSeconds  int `json:"idle_ttl_seconds,omitempty"`
	LifetimeSeconds int `json:"lifetime_seconds,omitempty"`
}

// SessionInfo is a session's record.
type SessionInfo struct {
	ID     string       `json:"id"`
	Tenant string       `json:"tenant,omitempty"`
	Lang   string       `json:"lang"`
	State  SessionState `json:"state"`
	// Reason says why a session ended (or why it is lost).
	Reason         string    `json:"reason,omitempty"`
	Worker         string    `json:"worker,omitempty"`
	ExecutionCount int       `json:"execution_count"`
	CreatedAt      time.Time `json:"created_at"`
	LastUsedAt     time.Time `json:"last_used_at,omitzero"`
	// ExpiresAt is the end of the lifetime; IdleTTLSeconds applies too.
	ExpiresAt      time.Time `json:"expires_at"`
	EndedAt        time.Time `json:"ended_at,omitzero"`
	IdleTTLSeconds int       `json:"idle_ttl_seconds"`
	Limits         Limits    `json:"limits,omitzero"`
}

// Cell is code to run in a session.
type Cell struct {
	Code string `json:"code"`
	// TimeoutMS bounds the cell (default: the session's limits); at its
	// end the cell is interrupted, and the session kept if the
	// interpreter survives.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// ID names the cell (generated when empty); with Stream, its output is
	// sent live to the stream of ID CellStreamID(session, ID).
	ID     string `json:"id,omitempty"`
	Stream bool   `json:"stream,omitempty"`
}

// CellStreamID is the stream ID ([Client.Stream]) a streamed cell's output
// goes to.
func CellStreamID(session, cell string) string { return session + ".cell." + cell }

// CellStatus is how a cell ended.
type CellStatus string

const (
	CellOK      CellStatus = "ok"      // ran to the end
	CellError   CellStatus = "error"   // raised an error (see CellResult.Error)
	CellTimeout CellStatus = "timeout" // interrupted at its timeout
	// CellSessionEnded: the interpreter died during the cell (OOM, crash,
	// exit); the session is over (SessionState, Reason).
	CellSessionEnded CellStatus = "session_ended"
)

// CellResult is the outcome of one cell.
type CellResult struct {
	ID             string     `json:"id"`
	Status         CellStatus `json:"status"`
	ExecutionCount int        `json:"execution_count,omitempty"`
	Stdout         string     `json:"stdout"`
	Stderr         string     `json:"stderr"`
	// StdoutTruncated / StderrTruncated: the middle was dropped at the
	// output limit.
	StdoutTruncated bool `json:"stdout_truncated,omitempty"`
	StderrTruncated bool `json:"stderr_truncated,omitempty"`
	// Results are the displayed values, in order (see [Display]).
	Results []Display      `json:"results,omitempty"`
	Error   *CellErrorInfo `json:"error,omitempty"`
	// Session is the session's state after the cell; Reason why it ended.
	Session SessionState `json:"session"`
	Reason  string       `json:"reason,omitempty"`
	Usage   Usage        `json:"usage"`
	// Artifacts are results stored in the artifact store (large images).
	Artifacts []Artifact `json:"artifacts,omitempty"`
}

// CellErrorInfo is an error a cell raised.
type CellErrorInfo struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback,omitempty"`
}

// FileEntry is one file or directory of a session's work dir.
type FileEntry struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Dir     bool      `json:"dir,omitempty"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

// Session errors. Every error of a session operation that is about the
// session (not Redis) wraps one of these.
var (
	ErrSessionNotFound = errors.New("session not found")
	ErrSessionBusy     = errors.New("session busy: a cell is running")
	ErrSessionEnded    = errors.New("session ended")
	// ErrSessionLost: the session's worker or interpreter died.
	ErrSessionLost = errors.New("session_lost: its worker or interpreter died")
	// ErrNoSessionSlots: every worker has --max-sessions sessions open (or
	// none takes sessions).
	ErrNoSessionSlots = errors.New("no free session slot: every worker is at --max-sessions, or no worker takes sessions")
)

// SessionError is an error about one session, with its state and reason.
type SessionError struct {
	Err    error // one of the ErrSession* values
	ID     string
	State  SessionState
	Reason string
}

func (e *SessionError) Error() string {
	s := fmt.Sprintf("session %s: %v", e.ID, e.Err)
	if e.State != "" && !errors.Is(e.Err, ErrSessionBusy) {
		s += " (" + string(e.State) + ")"
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

func (e *SessionError) Unwrap() error { return e.Err }

// ValidateSession checks a session spec against p, as Validate checks a
// job, and that the language has sessions ([Language.Session]).
func (p Policy) ValidateSession(s *SessionSpec) error {
	p = p.WithDefaults()
	if s.ID != "" {
		if msg := CheckName(s.ID, maxIDBytes); msg != "" {
			return invalid("id", "%s", msg)
		}
	}
	if s.Tenant != "" {
		if msg := CheckName(s.Tenant, maxTenantBytes); msg != "" {
			return invalid("tenant", "%s", msg)
		}
	}
	if err := p.validateEnvironment(s.Environment); err != nil {
		return err
	}
	if s.Environment != "" && len(s.Libraries) > 0 {
		return invalid("libraries", "are not installed in an environment (%s): the image holds what the session needs", s.Environment)
	}
	if err := p.validateSessionNetwork(s.Network); err != nil {
		return err
	}
	sessionLangs := p.SessionLangs()
	lang, ok := p.lookupLang(s.Lang)
	if !ok {
		return invalid("lang", "unknown language %q; sessions support: %s", s.Lang, strings.Join(sessionLangs, ", "))
	}
	if l, _ := lookup(p.Languages, lang); !l.Session {
		return invalid("lang", "%s has no sessions; sessions support: %s", lang, strings.Join(sessionLangs, ", "))
	}
	s.Lang = lang
	if err := p.validateLimits(&s.Limits); err != nil {
		return err
	}
	for i, f := range s.Files {
		if f.Key != "" {
			return invalid(fmt.Sprintf("files[%d].key", i), "session files are inline (content_b64); upload more with the session's upload")
		}
	}
	if err := p.validateFiles(s.Files); err != nil {
		return err
	}
	if err := p.validateArgsEnv(&Job{Lang: s.Lang, Env: s.Env}); err != nil {
		return err
	}
	if err := p.validateLibraries(s.Lang, s.Libraries); err != nil {
		return err
	}
	if err := p.validateLangOptions(s.Lang, s.Env); err != nil {
		return err
	}
	switch {
	case s.IdleTTLSeconds < 0:
		return invalid("idle_ttl_seconds", "is negative")
	case s.LifetimeSeconds < 0:
		return invalid("lifetime_seconds", "is negative")
	case s.LifetimeSeconds > int(MaxSessionLifetime/time.Second):
		return invalid("lifetime_seconds", "%d exceeds the cap %d", s.LifetimeSeconds, int(MaxSessionLifetime/time.Second))
	}
	if s.IdleTTLSeconds == 0 {
		s.IdleTTLSeconds = int(DefaultSessionIdleTTL / time.Second)
	}
	if s.LifetimeSeconds == 0 {
		s.LifetimeSeconds = int(DefaultSessionLifetime / time.Second)
	}
	s.IdleTTLSeconds = min(s.IdleTTLSeconds, s.LifetimeSeconds)
	return nil
}

// ValidateCell checks a cell against p: its ID (when set: the charset of
// a job ID, at most 64 bytes), the size of its code and its timeout
// (0 to the cap of timeout_ms).
func (p Policy) ValidateCell(c *Cell) error {
	p = p.WithDefaults()
	if c.ID != "" {
		if msg := CheckName(c.ID, 64); msg != "" {
			return invalid("cell.id", "%s", msg)
		}
	}
	if int64(len(c.Code)) > p.MaxCodeBytes {
		return invalid("code", "is %d bytes; the cap is %s", len(c.Code), formatSize(p.MaxCodeBytes))
	}
	if c.TimeoutMS < 0 || c.TimeoutMS > p.MaxLimits.TimeoutMS {
		return invalid("timeout_ms", "%d is outside 0..%d", c.TimeoutMS, p.MaxLimits.TimeoutMS)
	}
	return nil
}

// ValidateSessionFile checks the size of a file uploaded into a session:
// at most [MaxSessionFileBytes].
func ValidateSessionFile(data []byte) error {
	if int64(len(data)) > MaxSessionFileBytes {
		return invalid("data", "is %d bytes; the cap is %s", len(data), formatSize(MaxSessionFileBytes))
	}
	return nil
}

// SessionLangs returns the canonical names of the languages that have
// sessions, sorted.
func (p Policy) SessionLangs() []string {
	var out []string
	for _, l := range p.Languages {
		if l.Session {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}

// ValidSessionPath checks a path in a session's work dir: relative,
// clean, no "..", no NUL or control characters. "" and "." name the
// work dir itself where allowDir.
func ValidSessionPath(p string, allowDir bool) error {
	if (p == "" || p == ".") && allowDir {
		return nil
	}
	if _, msg := checkRelPath(p, false); msg != "" {
		return invalid("path", "%s", msg)
	}
	return nil
}
