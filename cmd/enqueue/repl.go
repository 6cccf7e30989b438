package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chzyer/readline"
	"github.com/spf13/cobra"

	"github.com/sandq/sandq/jobs"
)

func (a *app) newReplCmd() *cobra.Command {
	var f sessionFlags
	cmd := &cobra.Command{
		Use:   "repl [--lang python]",
		Short: "An interactive session: type cells, see what they print",
		Long: `Open a session (the flags are "session create"'s) and run what you type in
it, cell by cell, printing each cell's output as it runs, its displayed
results and its traceback, as "session exec --follow" does. The state
carries over from cell to cell. The session is closed when the REPL ends.

Input: a line ending in ":" or "\", or with a bracket or a triple-quoted
string left open, continues on the next line ("... "); a line that ends a
block started by ":" is a blank one, as in Python's REPL. Lines have
editing and history (kept in the user's cache directory, sandq/repl_history).

Keys: Ctrl-D closes the session and exits 0. Ctrl-C while a cell runs
interrupts the cell (KeyboardInterrupt in Python; a third Ctrl-C in the
same cell gives up: the session is closed and the REPL exits 130); at the
prompt it discards the lines typed, and on an empty prompt closes the
session and exits 130.

When stdin is not a terminal, its lines are read the same way, without
prompts or editing, and the session is closed at the end of the input
(exit 0, whatever the cells did) or on SIGINT.

Exit status: 0 at the end of the input; 3 when the session ended under the
REPL (its interpreter died: 137 for oom; expired; its worker stopped); 75
when no worker has a free session slot; 64 for an invalid spec; 2 for usage
errors and when Redis cannot be reached; 130 when interrupted.`,
		Example: `  enqueue repl
  enqueue repl --lang python --lib pandas --memory 1024 --file data.csv
  printf 'x = 6\nprint(x * 7)\n' | enqueue repl`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return a.repl(cmd, &f) },
	}
	f.register(cmd.Flags(), "python")
	return cmd
}

// lineResult is one line of the REPL's input.
type lineResult struct {
	line string
	err  error
}

// errPromptInterrupt is a Ctrl-C typed at the prompt.
var errPromptInterrupt = errors.New("interrupted at the prompt")

// lineSource reads the REPL's input lines, without their line ends:
// io.EOF at the end (Ctrl-D), errPromptInterrupt with the line typed so
// far for Ctrl-C.
type lineSource interface {
	readLine(prompt string) (string, error)
	close() error
}

// scanSource reads lines from a stream that is not a terminal.
type scanSource struct{ r *bufio.Reader }

func (s *scanSource) readLine(string) (string, error) {
	line, err := s.r.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"), nil
}

func (s *scanSource) close() error { return nil }

// readlineSource reads lines from a terminal, with editing and history.
type readlineSource struct{ rl *readline.Instance }

func newReadlineSource(stdin *os.File, stdout io.Writer) (*readlineSource, error) {
	cfg := &readline.Config{Prompt: ">>> ", InterruptPrompt: "^C", EOFPrompt: "", Stdin: stdin, Stdout: stdout,
		HistoryFile: historyFile(), HistorySearchFold: true}
	rl, err := readline.NewEx(cfg)
	if err != nil {
		return nil, err
	}
	return &readlineSource{rl: rl}, nil
}

// historyFile is the REPL's history, in the user's cache directory; ""
// (no history kept) when there is none.
func historyFile() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	dir = filepath.Join(dir, "sandq")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	return filepath.Join(dir, "repl_history")
}

func (r *readlineSource) readLine(prompt string) (string, error) {
	r.rl.SetPrompt(prompt)
	line, err := r.rl.Readline()
	if errors.Is(err, readline.ErrInterrupt) {
		return line, errPromptInterrupt
	}
	return line, err
}

func (r *readlineSource) close() error { return r.rl.Close() }

// repl runs the REPL: see newReplCmd's help.
func (a *app) repl(cmd *cobra.Command, f *sessionFlags) error {
	c, err := a.newClient()
	if err != nil {
		return err
	}
	defer c.Close()
	spec, err := f.spec(cmd, c.Policy())
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	var in lineSource = &scanSource{r: bufio.NewReader(a.stdin)}
	interactive := false
	if file, ok := a.stdin.(*os.File); ok && isTerminal(file) {
		if rl, err := newReadlineSource(file, a.stdout); err == nil {
			in, interactive = rl, true
		}
	}
	defer in.close()

	sess, err := a.openSession(cmd, c, spec)
	if err != nil {
		return err
	}
	ended := false // the session ended under the REPL: nothing to close
	defer func() {
		if ended {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := sess.Close(cctx); err != nil {
			fmt.Fprintf(a.stderr, "enqueue: close session %s: %v\n", sess.ID(), err)
		} else if interactive {
			fmt.Fprintf(a.stderr, "sandq: session %s closed\n", sess.ID())
		}
	}()
	if interactive {
		fmt.Fprintf(a.stderr, "sandq: session %s (%s) ready. A blank line ends a block; Ctrl-C interrupts a running cell; Ctrl-D closes the session.\n",
			sess.ID(), spec.Lang)
	}

	// Ctrl-C while a cell runs interrupts it; a third in the same cell
	// (or any SIGTERM, or a Ctrl-C while idle) cancels the REPL.
	var running atomic.Bool
	var hits atomic.Int32
	a.setSignalHandler(func(s os.Signal) bool {
		if s != os.Interrupt || !running.Load() || hits.Add(1) >= 3 {
			return false
		}
		fmt.Fprintln(a.stderr, "sandq: interrupting the cell")
		go func() {
			ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = sess.Interrupt(ictx)
		}()
		return true
	})
	defer a.setSignalHandler(nil)

	// The input is read in its own goroutine, so a signal while the REPL
	// waits for a line ends it.
	prompts, lines := make(chan string), make(chan lineResult, 1)
	defer close(prompts)
	go func() {
		for p := range prompts {
			line, err := in.readLine(p)
			lines <- lineResult{line, err}
		}
	}()

	var split cellSplitter
	for {
		prompt := ">>> "
		if split.pending() {
			prompt = "... "
		}
		prompts <- prompt
		if a.promptHook != nil {
			a.promptHook()
		}
		var lr lineResult
		select {
		case <-ctx.Done():
			return a.replInterrupted(cmd)
		case lr = <-lines:
		}
		var code string
		switch {
		case errors.Is(lr.err, errPromptInterrupt):
			if !split.pending() && strings.TrimSpace(lr.line) == "" {
				return &exitError{code: 130}
			}
			split.reset()
			fmt.Fprintln(a.stderr, "KeyboardInterrupt")
			continue
		case errors.Is(lr.err, io.EOF):
			if !split.pending() {
				return nil
			}
			code = split.take()
		case lr.err != nil:
			return &exitError{code: exitCLI, err: fmt.Errorf("read input: %w", lr.err)}
		case !split.add(lr.line):
			continue
		default:
			code = split.take()
		}

		hits.Store(0)
		running.Store(true)
		r, shown, err := a.execCell(ctx, c, sess, jobs.Cell{Code: code}, true)
		running.Store(false)
		switch {
		case err != nil && ctx.Err() != nil:
			return a.replInterrupted(cmd)
		case errors.Is(err, jobs.ErrSessionEnded), errors.Is(err, jobs.ErrSessionLost):
			ended = true
			return a.sessionFailure(cmd, sess.ID(), "cell", err)
		case errors.Is(err, jobs.ErrSessionNotFound):
			ended = true
			return a.sessionFailure(cmd, sess.ID(), "cell", err)
		case err != nil:
			var ve *jobs.ValidationError
			if errors.Is(err, jobs.ErrSessionBusy) || errors.As(err, &ve) {
				var ee *exitError
				if errors.As(a.sessionFailure(cmd, sess.ID(), "cell", err), &ee) {
					fmt.Fprintf(a.stderr, "enqueue: %v\n", ee.err)
				}
				continue
			}
			return a.failure(cmd, err)
		}
		if err := writeCell(a.stdout, a.stderr, sess.ID(), r, shown); err != nil {
			return err
		}
		if r.Status == jobs.CellSessionEnded {
			ended = true
			return &exitError{code: cellExitCode(r)}
		}
		if errors.Is(lr.err, io.EOF) {
			return nil
		}
	}
}

// replInterrupted is the REPL's end on a signal.
func (a *app) replInterrupted(cmd *cobra.Command) error {
	if ie := interrupted(cmd.Context()); ie != nil {
		return ie
	}
	return &exitError{code: exitCanceled}
}

// cellSplitter gathers input lines into cells: a line ending in ":" or
// "\", or leaving a bracket or a triple-quoted string open, continues the
// cell; after a ":" line the cell ends at a blank line, as in Python's
// REPL. Blank lines between cells are skipped.
type cellSplitter struct {
	lines []string
	block bool // a line ended in ":": the cell ends at a blank line
}

func (s *cellSplitter) pending() bool { return len(s.lines) > 0 }

func (s *cellSplitter) reset() { s.lines, s.block = nil, false }

// take returns the cell gathered, each line ended by "\n", and starts the
// next.
func (s *cellSplitter) take() string {
	code := strings.Join(s.lines, "\n") + "\n"
	s.reset()
	return code
}

// add adds an input line; it reports whether the cell is complete.
func (s *cellSplitter) add(line string) bool {
	blank := strings.TrimSpace(line) == ""
	if blank && !s.pending() {
		return false
	}
	st := scanCode(strings.Join(append(s.lines, line), "\n"))
	if blank && !st.open() {
		return true // the blank line ends the cell and is left out
	}
	s.lines = append(s.lines, line)
	if st.colon {
		s.block = true
	}
	return !s.block && !st.open() && !st.backslash
}

// codeState is what scanCode learns of code typed so far.
type codeState struct {
	depth     int  // brackets open
	inString  bool // in a triple-quoted string, or a string continued by "\"
	colon     bool // the last line ends in ":" (comments aside)
	backslash bool // the last line ends in "\"
}

func (st codeState) open() bool { return st.depth > 0 || st.inString }

// scanCode reads code for brackets, strings ('...', "...", and their
// triple-quoted forms), "#" comments and the last line's last character.
// One-line strings end at their line's end.
func scanCode(code string) codeState {
	var st codeState
	quote := ""
	var last byte // the last significant character of the current line
	for i := 0; i < len(code); i++ {
		c := code[i]
		if quote != "" {
			switch {
			case c == '\\':
				if i+1 >= len(code) {
					st.inString = true // a string continued on the next line
				}
				i++
			case strings.HasPrefix(code[i:], quote):
				i += len(quote) - 1
				quote, last = "", c
			case c == '\n' && len(quote) == 1:
				quote, last = "", 0
			}
			continue
		}
		switch c {
		case '#':
			if j := strings.IndexByte(code[i:], '\n'); j >= 0 {
				i += j - 1
			} else {
				i = len(code)
			}
			continue
		case '\'', '"':
			quote = string(c)
			if strings.HasPrefix(code[i:], strings.Repeat(quote, 3)) {
				quote = strings.Repeat(quote, 3)
				i += 2
			}
		case '(', '[', '{':
			st.depth++
		case ')', ']', '}':
			st.depth = max(st.depth-1, 0)
		case '\n':
			last = 0
			continue
		case ' ', '\t', '\r':
			continue
		}
		last = c
	}
	st.inString = st.inString || len(quote) == 3
	st.colon = last == ':' && quote == ""
	st.backslash = last == '\\' && quote == ""
	return st
}
