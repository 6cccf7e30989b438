package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/langs"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandq/sandq/jobs"
)

// Exit statuses of the session commands, besides exitOK, exitCLI,
// exitRejected and the interruption's.
const (
	exitCellError    = 1   // the cell raised an error (or was interrupted)
	exitSessionEnded = 3   // the session has ended, before or during the cell
	exitSessionBusy  = 75  // a cell is running; no free session slot
	exitCellTimeout  = 124 // the cell timed out, as timeout(1)
	exitSessionOOM   = 137 // the session ended oom during the cell
)

// sessionExitHelp documents the session commands' exit statuses.
const sessionExitHelp = `Exit status:
  0    done; for exec: the cell ran to the end (status ok)
  1    exec: the cell raised an error (status error; the traceback is on
       stderr), or was interrupted
  124  exec: the cell timed out (status timeout): it was interrupted and the
       session lives on
  137  exec: the interpreter was killed for memory during the cell: the
       session has ended (oom)
  3    the session has ended: during the cell (the interpreter died:
       status session_ended) or before (closed, expired, lost, oom)
  75   try again later: a cell is running in the session (one at a time),
       or (create) every worker is at its --max-sessions
  64   invalid input: a spec or cell the policy refuses, a path outside the
       work dir, a file over the cap
  2    usage error, unknown session, Redis unreachable
  130  interrupted by Ctrl-C (143 for SIGTERM); exec interrupts the cell
       too, and the session lives on`

// sessionFlags are the flags a session is created with (session create,
// repl).
type sessionFlags struct {
	lang, tenant, id           string
	memoryMB                   int64
	timeout, idleTTL, lifetime time.Duration
	libs, files, env           []string
}

func (f *sessionFlags) register(fl *pflag.FlagSet, defaultLang string) {
	fl.SortFlags = false
	fl.StringVarP(&f.lang, "lang", "l", defaultLang, "language: "+strings.Join(langs.Policy(jobs.Policy{}).SessionLangs(), ", ")+" (or an alias)")
	fl.Int64Var(&f.memoryMB, "memory", 0, "memory limit of the session's container in MiB (default 256)")
	fl.DurationVar(&f.timeout, "timeout", 0, "each cell's default wall-clock limit, such as 30s (default 10s); exec --timeout overrides it")
	fl.DurationVar(&f.idleTTL, "idle-ttl", 0, "close the session when no cell ran for this long (default 10m)")
	fl.DurationVar(&f.lifetime, "lifetime", 0, "close the session this long after it was created (default 1h, at most 24h)")
	fl.StringArrayVar(&f.libs, "lib", nil, "library to install before the interpreter starts, such as numpy==2.1 (repeatable)")
	fl.StringArrayVar(&f.files, "file", nil, "LOCAL[:REMOTE] file copied into the work dir; REMOTE defaults to LOCAL's base name (repeatable)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "KEY=VALUE environment variable for the interpreter (repeatable)")
	fl.StringVar(&f.tenant, "tenant", "", "tenant owning the session")
	fl.StringVar(&f.id, "id", "", "session ID, [A-Za-z0-9_.:-]{1,128} (default: random)")
}

// spec builds the session spec the flags describe, reading --file.
func (f *sessionFlags) spec(cmd *cobra.Command, policy jobs.Policy) (jobs.SessionSpec, error) {
	spec := jobs.SessionSpec{ID: f.id, Lang: f.lang, Tenant: f.tenant, Libraries: f.libs,
		Limits: jobs.Limits{MemoryMB: f.memoryMB, TimeoutMS: f.timeout.Milliseconds()}}
	if f.timeout > 0 && spec.Limits.TimeoutMS == 0 {
		spec.Limits.TimeoutMS = 1
	}
	for _, d := range []struct {
		flag string
		d    time.Duration
		out  *int
	}{{"--idle-ttl", f.idleTTL, &spec.IdleTTLSeconds}, {"--lifetime", f.lifetime, &spec.LifetimeSeconds}} {
		if d.d < 0 {
			return spec, usageError(cmd, fmt.Errorf("%s %s is negative", d.flag, d.d))
		}
		*d.out = int((d.d + time.Second - 1) / time.Second) // at least a second
	}
	env, err := parseKV("--env", f.env)
	if err != nil {
		return spec, usageError(cmd, err)
	}
	spec.Env = env
	for _, fileSpec := range f.files {
		local, remote, err := parseFileSpec(fileSpec)
		if err != nil {
			return spec, usageError(cmd, err)
		}
		r, err := os.Open(local)
		if err != nil {
			return spec, &exitError{code: exitCLI, err: fmt.Errorf("--file: %w", err)}
		}
		b, err := readCapped(r, policy.WithDefaults().MaxInlineFileBytes, "--file "+local)
		r.Close()
		if err != nil {
			return spec, err
		}
		file := jobs.File{Path: remote, ContentB64: b}
		if fi, err := os.Stat(local); err == nil && fi.Mode().Perm()&0o111 != 0 {
			file.Mode = 0o755
		}
		spec.Files = append(spec.Files, file)
	}
	return spec, nil
}

// sessionFieldFlags names the flag behind each session spec field.
var sessionFieldFlags = map[string]string{
	"id": "--id", "lang": "--lang", "tenant": "--tenant", "libraries": "--lib", "files": "--file", "env": "--env",
	"limits.memory_mb": "--memory", "limits.timeout_ms": "--timeout", "idle_ttl_seconds": "--idle-ttl",
	"lifetime_seconds": "--lifetime", "timeout_ms": "--timeout", "path": "REMOTE", "data": "LOCAL",
}

// describeSessionInvalid names the flag behind a validation error's field.
func describeSessionInvalid(what string, ve *jobs.ValidationError) error {
	field := ve.Field
	key := field
	if i := strings.IndexAny(key, "[."); i > 0 && sessionFieldFlags[key] == "" {
		key = key[:i]
	}
	if flag := sessionFieldFlags[key]; flag != "" {
		field += " (" + flag + ")"
	}
	if field == "" {
		return fmt.Errorf("invalid %s: %s", what, ve.Msg)
	}
	return fmt.Errorf("invalid %s: %s: %s", what, field, ve.Msg)
}

// sessionFailure turns the error of an operation on session id into the
// command's exit error; what names the input for a validation error.
func (a *app) sessionFailure(cmd *cobra.Command, id, what string, err error) error {
	if ie := interrupted(cmd.Context()); ie != nil {
		return ie
	}
	var se *jobs.SessionError
	errors.As(err, &se)
	switch {
	case errors.Is(err, jobs.ErrSessionNotFound):
		return &exitError{code: exitCLI, err: fmt.Errorf("session %s not found (prefix %q, redis %s db %d); an ended session's record is kept an hour",
			id, a.globals.Prefix, a.globals.Addr, a.globals.DB)}
	case errors.Is(err, jobs.ErrSessionBusy):
		return &exitError{code: exitSessionBusy, err: fmt.Errorf("session %s is running a cell: one runs at a time (interrupt it with: %s)",
			id, resumeCommand(cmd, "session interrupt", id))}
	case errors.Is(err, jobs.ErrSessionEnded), errors.Is(err, jobs.ErrSessionLost):
		return &exitError{code: exitSessionEnded, err: err}
	case errors.Is(err, jobs.ErrNoSessionSlots):
		return &exitError{code: exitSessionBusy, err: err}
	case errors.Is(err, jobs.ErrSessionExists):
		return &exitError{code: exitCLI, err: fmt.Errorf("session %s exists (or existed within the last hour); pick another --id", id)}
	}
	if ve, ok := errors.AsType[*jobs.ValidationError](err); ok {
		return &exitError{code: exitRejected, err: describeSessionInvalid(what, ve)}
	}
	return a.failure(cmd, err)
}

// openSession opens a session of spec; interrupted, it closes the session
// the worker may be starting all the same.
func (a *app) openSession(cmd *cobra.Command, c *client.Client, spec jobs.SessionSpec) (*client.Session, error) {
	spec.ID = cmp.Or(spec.ID, jobs.NewID())
	sess, err := c.OpenSession(cmd.Context(), spec)
	if err == nil {
		return sess, nil
	}
	if ie := interrupted(cmd.Context()); ie != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 10*time.Second)
		defer cancel()
		if s, err := c.Session(ctx, spec.ID); err == nil {
			_ = s.Close(ctx)
		}
		return nil, ie
	}
	return nil, a.sessionFailure(cmd, spec.ID, "session", err)
}

// withSession runs fn on the existing session args[0] with a new client.
func (a *app) withSession(cmd *cobra.Command, id string, fn func(*client.Client, *client.Session) error) error {
	c, err := a.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	sess, err := c.Session(cmd.Context(), id)
	if err != nil {
		return a.sessionFailure(cmd, id, "session", err)
	}
	return fn(c, sess)
}

func (a *app) newSessionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Open, use and close stateful sessions: a live interpreter run cell by cell",
		Long: `A session is a live interpreter (` + strings.Join(langs.Policy(jobs.Policy{}).SessionLangs(), ", ") + `) in one hardened
container on one worker: each cell runs in the state the cells before it
left (variables, imports, files in the work dir). A session ends when it is
closed, after --idle-ttl without a cell (default 10m), at the end of its
--lifetime (default 1h), when its interpreter dies (lost, oom), or when its
worker stops (lost). One cell runs at a time.

  ID=$(enqueue session create --lang python --lib pandas)
  echo 'import pandas as pd; df = pd.DataFrame({"x": [1, 2]})' | enqueue session exec $ID -
  echo 'df.x.sum()' | enqueue session exec $ID -
  enqueue session close $ID

See also "enqueue repl", an interactive session.

` + sessionExitHelp,
	}
	cmd.AddCommand(a.newSessionCreateCmd(), a.newSessionExecCmd(), a.newSessionUploadCmd(), a.newSessionDownloadCmd(),
		a.newSessionFilesCmd(), a.newSessionCloseCmd(), a.newSessionListCmd(), a.newSessionInfoCmd(), a.newSessionInterruptCmd())
	return cmd
}

func (a *app) newSessionCreateCmd() *cobra.Command {
	var f sessionFlags
	cmd := &cobra.Command{
		Use:   "create --lang LANG",
		Short: "Open a session and print its ID",
		Long: `Open a session on a worker with a free session slot and print its ID, alone,
on stdout, once the interpreter is ready: the container has started, the
--lib libraries are installed and the --file files written (this can take
minutes with libraries).

` + sessionExitHelp,
		Example: `  enqueue session create --lang python
  enqueue session create --lang py --memory 512 --timeout 1m --idle-ttl 30m --lib numpy --file data.csv`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			spec, err := f.spec(cmd, c.Policy())
			if err != nil {
				return err
			}
			sess, err := a.openSession(cmd, c, spec)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, sess.ID())
			return err
		},
	}
	f.register(cmd.Flags(), "")
	_ = cmd.MarkFlagRequired("lang")
	return cmd
}

// execFlags are `session exec`'s flags.
type execFlags struct {
	json, follow bool
	timeout      time.Duration
}

func (a *app) newSessionExecCmd() *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec ID FILE|-",
		Short: "Run a cell in a session",
		Long: `Run the code in FILE (or on stdin: "-", or no FILE when stdin is not a
terminal) as a cell of session ID, and print what it did: its stdout to
stdout and its stderr to stderr, byte for byte, then its displayed results
on stdout (text/plain as text; other types as a line such as
"[image/png 12345 bytes]"), and, when it raised, the traceback on stderr.
With --json, print the CellResult as JSON on stdout instead, and nothing
else there. With --follow, the output is printed live, as the cell prints
it.

Ctrl-C interrupts the cell (KeyboardInterrupt in Python); the session lives
on.

` + sessionExitHelp,
		Example: `  enqueue session exec $ID cell.py
  echo 'x = 41' | enqueue session exec $ID -
  echo 'print(x + 1)' | enqueue session exec --json $ID -
  enqueue session exec --follow --timeout 5m $ID train.py`,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			source := "-"
			switch {
			case len(args) == 2:
				source = args[1]
			case isTerminal(a.stdin):
				return usageError(cmd, errors.New("no cell: give a FILE, or - to read it from stdin"))
			}
			return a.withSession(cmd, args[0], func(c *client.Client, sess *client.Session) error {
				var r io.Reader = a.stdin
				what := "cell on stdin"
				if source != "-" {
					file, err := os.Open(source)
					if err != nil {
						return &exitError{code: exitCLI, err: err}
					}
					defer file.Close()
					r, what = file, "cell "+source
				}
				code, err := readCapped(r, c.Policy().WithDefaults().MaxCodeBytes, what)
				if err != nil {
					return err
				}
				cell := jobs.Cell{Code: string(code), TimeoutMS: f.timeout.Milliseconds()}
				if f.timeout > 0 && cell.TimeoutMS == 0 {
					cell.TimeoutMS = 1
				}
				res, shown, err := a.execCell(cmd.Context(), c, sess, cell, f.follow)
				if err != nil {
					var ie *exitError
					if errors.As(interrupted(cmd.Context()), &ie) {
						ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 10*time.Second)
						defer cancel()
						_ = sess.Interrupt(ctx)
						return &exitError{code: ie.code, err: fmt.Errorf("%w: the cell was interrupted; the session lives on", ie.err)}
					}
					return a.sessionFailure(cmd, sess.ID(), "cell", err)
				}
				if f.json {
					if err := writeJSON(a.stdout, res); err != nil {
						return err
					}
				} else if err := writeCell(a.stdout, a.stderr, sess.ID(), res, shown); err != nil {
					return err
				}
				return &exitError{code: cellExitCode(res)}
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.json, "json", false, "print the CellResult as JSON on stdout, and nothing else there")
	fl.BoolVarP(&f.follow, "follow", "f", false, "print the cell's output live, as it runs")
	fl.DurationVar(&f.timeout, "timeout", 0, "the cell's wall-clock limit (default: the session's --timeout)")
	cmd.MarkFlagsMutuallyExclusive("follow", "json")
	return cmd
}

// cellExitCode maps a cell's status to the exit status (sessionExitHelp).
func cellExitCode(r jobs.CellResult) int {
	switch r.Status {
	case jobs.CellOK:
		return exitOK
	case jobs.CellError:
		return exitCellError
	case jobs.CellTimeout:
		return exitCellTimeout
	case jobs.CellSessionEnded:
		if r.Session == jobs.SessionOOM {
			return exitSessionOOM
		}
		return exitSessionEnded
	}
	return exitInternal
}

// liveShown is what a follower printed of a cell's output live.
type liveShown struct {
	stdout, stderr int64
	last           byte // the last byte written to stdout
	dropped        int64
}

// execCell runs cell in sess; with follow, it prints the cell's output
// live (from its stream) while it runs and says how much it printed.
func (a *app) execCell(ctx context.Context, c *client.Client, sess *client.Session, cell jobs.Cell, follow bool) (jobs.CellResult, liveShown, error) {
	if a.waitHook != nil {
		a.waitHook(sess.ID())
	}
	if !follow {
		r, err := sess.Exec(ctx, cell)
		return r, liveShown{}, err
	}
	cell.ID, cell.Stream = jobs.NewID()[:12], true
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var shown liveShown
	done := make(chan struct{})
	go func() {
		defer close(done)
		shown = a.followCell(fctx, c, jobs.CellStreamID(sess.ID(), cell.ID))
	}()
	r, err := sess.Exec(ctx, cell)
	if err == nil {
		// The worker writes the stream's last chunks and its end just
		// around its reply: let the follower reach the end, briefly.
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	stop()
	<-done
	return r, shown, err
}

// followCell prints the cell stream id's entries until its end entry or
// ctx's end. Client.Stream ends with ErrNotFound when the stream is quiet
// for a while (it then looks for a job of this ID, which a cell is not):
// it is read again from where it stopped.
func (a *app) followCell(ctx context.Context, c *client.Client, id string) liveShown {
	var shown liveShown
	next := map[string]int64{}
	after := ""
	for ctx.Err() == nil {
		for e, err := range c.Stream(ctx, id, after) {
			if err != nil {
				break
			}
			after = cmp.Or(e.ID, after)
			if e.End() {
				return shown
			}
			if e.Offset > next[e.Stream] {
				shown.dropped += e.Offset - next[e.Stream]
			}
			next[e.Stream] = e.Offset + int64(len(e.Data))
			if len(e.Data) == 0 {
				continue
			}
			if e.Stream == "stdout" {
				_, _ = a.stdout.Write(e.Data)
				shown.stdout += int64(len(e.Data))
				shown.last = e.Data[len(e.Data)-1]
			} else {
				_, _ = a.stderr.Write(e.Data)
				shown.stderr += int64(len(e.Data))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return shown
}

// writeCell prints a cell's result for people: its output (unless it was
// shown live), its displayed results, its error, and notes on stderr.
func writeCell(stdout, stderr io.Writer, session string, r jobs.CellResult, shown liveShown) error {
	last := shown.last
	if shown.stdout == 0 && r.Stdout != "" {
		if _, err := io.WriteString(stdout, r.Stdout); err != nil {
			return err
		}
		last = r.Stdout[len(r.Stdout)-1]
	}
	if shown.stderr == 0 && r.Stderr != "" {
		if _, err := io.WriteString(stderr, r.Stderr); err != nil {
			return err
		}
	}
	if len(r.Results) > 0 && last != 0 && last != '\n' {
		fmt.Fprintln(stdout)
	}
	for _, d := range r.Results {
		for _, line := range renderDisplay(d) {
			if _, err := fmt.Fprintln(stdout, line); err != nil {
				return err
			}
		}
	}
	if e := r.Error; e != nil {
		if len(e.Traceback) > 0 {
			fmt.Fprintln(stderr, strings.TrimRight(strings.Join(e.Traceback, "\n"), "\n"))
		} else if e.Value != "" {
			fmt.Fprintf(stderr, "%s: %s\n", e.Name, e.Value)
		} else {
			fmt.Fprintln(stderr, e.Name)
		}
	}
	var notes []string
	if r.StdoutTruncated {
		notes = append(notes, "the cell's stdout reached its output limit: the middle was dropped")
	}
	if r.StderrTruncated {
		notes = append(notes, "the cell's stderr reached its output limit: the middle was dropped")
	}
	if shown.dropped > 0 {
		notes = append(notes, fmt.Sprintf("%d bytes of output were not shown live (the reader or Redis fell behind); --json has the result", shown.dropped))
	}
	switch r.Status {
	case jobs.CellTimeout:
		notes = append(notes, "the cell timed out and was interrupted; the session lives on")
	case jobs.CellSessionEnded:
		notes = append(notes, fmt.Sprintf("session %s ended during the cell (%s): %s", session, r.Session, cmp.Or(r.Reason, "the interpreter died")))
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(stderr, "sandq: "+n); err != nil {
			return err
		}
	}
	return nil
}

// renderDisplay shows a displayed value as text lines: its text/plain,
// then a line per other type with its size ("[image/png 12345 bytes]"),
// or the artifact it was stored as.
func renderDisplay(d jobs.Display) []string {
	var out []string
	if t, ok := d.Text(); ok {
		out = append(out, strings.TrimRight(t, "\n"))
	}
	for _, typ := range d.Types() {
		if typ == "text/plain" {
			continue
		}
		out = append(out, fmt.Sprintf("[%s %d bytes]", typ, d.Size(typ)))
	}
	if d.Artifact != "" {
		out = append(out, fmt.Sprintf("[stored as artifact %s: %s]", d.Artifact, d.URL))
	}
	return out
}

func (a *app) newSessionUploadCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "upload ID LOCAL [REMOTE]",
		Short: "Copy a file into a session's work dir",
		Long: fmt.Sprintf(`Copy LOCAL ("-": stdin) to REMOTE in session ID's work dir (directories are
made as needed; an existing file is replaced). REMOTE defaults to LOCAL's
base name, and must be given for stdin. At most %d bytes.

`, jobs.MaxSessionFileBytes) + sessionExitHelp,
		Args: usageArgs(cobra.RangeArgs(2, 3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, remote := args[1], filepath.Base(args[1])
			if len(args) == 3 {
				remote = args[2]
			} else if local == "-" {
				return usageError(cmd, errors.New("give REMOTE, the path to write stdin to"))
			}
			var r io.Reader = a.stdin
			if local != "-" {
				file, err := os.Open(local)
				if err != nil {
					return &exitError{code: exitCLI, err: err}
				}
				defer file.Close()
				r = file
			}
			data, err := readCapped(r, jobs.MaxSessionFileBytes, local)
			if err != nil {
				return err
			}
			return a.withSession(cmd, args[0], func(_ *client.Client, sess *client.Session) error {
				if err := sess.Upload(cmd.Context(), remote, data); err != nil {
					return a.sessionFailure(cmd, sess.ID(), "upload", err)
				}
				return nil
			})
		},
	}
}

func (a *app) newSessionDownloadCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "download ID REMOTE [LOCAL|-]",
		Short: "Copy a file out of a session's work dir",
		Long: `Copy REMOTE, a regular file of session ID's work dir, to LOCAL ("-":
stdout), byte for byte. LOCAL defaults to REMOTE's base name in the current
directory; an existing file is replaced.

` + sessionExitHelp,
		Args: usageArgs(cobra.RangeArgs(2, 3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote, local := args[1], path.Base(args[1])
			if len(args) == 3 {
				local = args[2]
			}
			return a.withSession(cmd, args[0], func(_ *client.Client, sess *client.Session) error {
				data, err := sess.Download(cmd.Context(), remote)
				if err != nil {
					return a.sessionFailure(cmd, sess.ID(), "download", err)
				}
				if local == "-" {
					_, err = a.stdout.Write(data)
					return err
				}
				if err := os.WriteFile(local, data, 0o644); err != nil {
					return &exitError{code: exitCLI, err: err}
				}
				return nil
			})
		},
	}
}

func (a *app) newSessionFilesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "files ID [DIR]",
		Short: "List a session's files",
		Long: `List the files and directories of session ID's work dir (or of DIR in it),
recursively, sorted by path, as a table: size, mode, modification time
(UTC) and path (a directory's ends in "/"). With --json, print the list as
JSON.

` + sessionExitHelp,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 2 {
				dir = args[1]
			}
			return a.withSession(cmd, args[0], func(_ *client.Client, sess *client.Session) error {
				files, err := sess.Files(cmd.Context(), dir)
				if err != nil {
					return a.sessionFailure(cmd, sess.ID(), "dir", err)
				}
				if asJSON {
					if files == nil {
						files = []jobs.FileEntry{}
					}
					return writeJSON(a.stdout, files)
				}
				return writeFiles(a.stdout, files)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

// writeFiles prints a session's files as a table: size (right-aligned),
// mode, modification time (UTC), path.
func writeFiles(w io.Writer, files []jobs.FileEntry) error {
	width := len("SIZE")
	for _, f := range files {
		width = max(width, len(fmt.Sprint(f.Size)))
	}
	if _, err := fmt.Fprintf(w, "%*s  %-10s  %-20s  %s\n", width, "SIZE", "MODE", "MTIME", "PATH"); err != nil {
		return err
	}
	for _, f := range files {
		mode := fs.FileMode(f.Mode)
		p := f.Path
		if f.Dir {
			mode |= fs.ModeDir
			p += "/"
		}
		if _, err := fmt.Fprintf(w, "%*d  %-10s  %-20s  %s\n", width, f.Size, mode, f.ModTime.UTC().Format(time.RFC3339), p); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) newSessionCloseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "close ID",
		Short: "Close a session",
		Long: `Close session ID: its interpreter stops and its container is removed. Prints
the session's final state. Closing a session that has already ended is not
an error: it says how it ended.

` + sessionExitHelp,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSession(cmd, args[0], func(_ *client.Client, sess *client.Session) error {
				before, err := sess.Info(cmd.Context())
				if err != nil {
					return a.sessionFailure(cmd, sess.ID(), "session", err)
				}
				if before.State.Final() {
					_, err = fmt.Fprintf(a.stdout, "session %s had already ended (%s)\n", sess.ID(), describeEnd(before))
					return err
				}
				if err := sess.Close(cmd.Context()); err != nil {
					return a.sessionFailure(cmd, sess.ID(), "session", err)
				}
				after, err := sess.Info(context.WithoutCancel(cmd.Context()))
				if err == nil && after.State != jobs.SessionClosed && after.State.Final() {
					_, err = fmt.Fprintf(a.stdout, "session %s had already ended (%s)\n", sess.ID(), describeEnd(after))
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "session %s closed\n", sess.ID())
				return err
			})
		},
	}
}

// describeEnd says how an ended session ended: "expired: idle for 10m".
func describeEnd(info jobs.SessionInfo) string {
	if info.Reason == "" {
		return string(info.State)
	}
	return string(info.State) + ": " + info.Reason
}

func (a *app) newSessionListCmd() *cobra.Command {
	var (
		tenant string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's sessions",
		Long: `List the sessions of --tenant (default: the sessions without a tenant),
newest first, ended ones included while their records last (an hour), as a
table: ID, state, language, cells run, created, last used (times UTC) and
why it ended. With --json, print the records as a JSON array.

Exit status: 0; 2 when Redis cannot be reached.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			list, err := c.Sessions(cmd.Context(), tenant)
			if err != nil {
				return a.failure(cmd, err)
			}
			if asJSON {
				if list == nil {
					list = []jobs.SessionInfo{}
				}
				return writeJSON(a.stdout, list)
			}
			return writeSessions(a.stdout, list)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose sessions to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

// writeSessions prints sessions as a table.
func writeSessions(w io.Writer, list []jobs.SessionInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tLANG\tCELLS\tCREATED\tLAST USED\tREASON")
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, s.State, s.Lang, s.ExecutionCount, stamp(s.CreatedAt), stamp(s.LastUsedAt), s.Reason)
	}
	return tw.Flush()
}

func (a *app) newSessionInfoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info ID",
		Short: "Print a session's record as JSON",
		Long: `Print session ID's record as JSON: its state (starting, ready, busy; closed,
expired, lost or oom once it has ended, with the reason), cells run, times,
limits. A session whose worker stopped reads as lost.

Exit status: 0 if the session is known, whatever its state; 2 if not, or
Redis cannot be reached.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClient()
			if err != nil {
				return err
			}
			defer c.Close()
			info, err := c.SessionInfo(cmd.Context(), args[0])
			if err != nil {
				return a.sessionFailure(cmd, args[0], "session", err)
			}
			return writeJSON(a.stdout, info)
		},
	}
}

func (a *app) newSessionInterruptCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "interrupt ID",
		Short: "Interrupt the cell running in a session",
		Long: `Interrupt the cell running in session ID, if any (KeyboardInterrupt in
Python): the cell ends with an error and the session lives on.

` + sessionExitHelp,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withSession(cmd, args[0], func(_ *client.Client, sess *client.Session) error {
				if err := sess.Interrupt(cmd.Context()); err != nil {
					return a.sessionFailure(cmd, sess.ID(), "session", err)
				}
				return nil
			})
		},
	}
}
