package session

import (
	"embed"
	"slices"
	"sort"
	"syscall"
	"time"
)

// Dir is where the agent writes a driver's files (root-owned, read-only to
// the job).
const Dir = "/tmp/.sandq-session"

// File is one file of a driver.
type File struct {
	// Path is relative to Dir: a plain file name.
	Path string
	Data []byte
}

// Driver is how to start one language's session driver (see the package
// documentation for the protocol and what each driver does).
type Driver struct {
	// Lang is the canonical language name (see package langs).
	Lang string
	// Files are the driver's files, to be written into Dir.
	Files []File
	// Argv starts the driver; its program is found on the image's PATH.
	Argv []string
	// Env is KEY=VALUE added to the image's environment.
	Env []string
	// InterruptEvery, when set, asks the agent to repeat an interrupt at
	// this interval until the cell answers: a single SIGINT can be lost.
	// Bash loses one that lands while it forks a foreground command (the
	// child takes it before it execs), and runs its own INT trap only when
	// that command ends, so `echo started; sleep 30` interrupted just after
	// "started" would sleep on. CPython loses one that lands between its
	// last check for signals and a blocking call (time.sleep, read): the
	// handler is pending, but the call it should have woken sleeps on.
	InterruptEvery time.Duration
	// InterruptNudge, when set, is what the repeats send instead of
	// SIGINT, to the driver process alone: a signal the driver handles by
	// doing nothing, which wakes a blocking call so the interpreter runs
	// the SIGINT handler it has pending. Drivers that turn SIGINT into an
	// exception need it: a second SIGINT would interrupt the cell's own
	// handling of the first (an except or finally clause).
	InterruptNudge syscall.Signal
}

//go:embed python.py javascript.js r.R bash.sh
var files embed.FS

func mustRead(name string) []File {
	data, err := files.ReadFile(name)
	if err != nil {
		panic("session: embedded driver missing: " + name)
	}
	return []File{{Path: name, Data: data}}
}

var drivers = map[string]Driver{
	"python": {
		Lang:  "python",
		Files: mustRead("python.py"),
		Argv:  []string{"python3", "-u", Dir + "/python.py"},
		// No SANDQ_PLOTS_DIR: the driver returns plots as results, the
		// image's start-up hook must not also write them to files.
		Env: []string{"PYTHONUNBUFFERED=1", "MPLBACKEND=Agg"},
		// python.py handles SIGURG by doing nothing.
		InterruptEvery: 200 * time.Millisecond,
		InterruptNudge: syscall.SIGURG,
	},
	"javascript": {
		Lang:  "javascript",
		Files: mustRead("javascript.js"),
		Argv:  []string{"node", Dir + "/javascript.js"},
	},
	"r": {
		Lang:  "r",
		Files: mustRead("r.R"),
		Argv:  []string{"Rscript", "--no-save", "--no-restore", Dir + "/r.R"},
	},
	"bash": {
		Lang:  "bash",
		Files: mustRead("bash.sh"),
		Argv:  []string{"bash", "--noprofile", "--norc", Dir + "/bash.sh"},
		// The agent gives a driver InterruptGrace (3 s) to answer.
		InterruptEvery: 200 * time.Millisecond,
	},
}

// For returns the driver of the language with canonical name lang.
func For(lang string) (Driver, bool) {
	d, ok := drivers[lang]
	if !ok {
		return Driver{}, false
	}
	d.Files = slices.Clone(d.Files)
	d.Argv = slices.Clone(d.Argv)
	d.Env = slices.Clone(d.Env)
	return d, true
}

// Langs returns the languages that have a driver, sorted.
func Langs() []string {
	out := make([]string, 0, len(drivers))
	for lang := range drivers {
		out = append(out, lang)
	}
	sort.Strings(out)
	return out
}

// Marker is what a driver writes to fd 1 and fd 2 at the end of a cell.
func Marker(nonce string) []byte {
	return []byte("\x1esandq-cell-end:" + nonce + "\x1e")
}

// Reply is the JSON line a driver writes after each cell, and once at
// start as {"ready":true}.
type Reply struct {
	Ready bool `json:"ready,omitempty"`
	// Nonce is the cell's, from its command.
	Nonce string `json:"nonce,omitempty"`
	// Status is "ok" or "error".
	Status string `json:"status,omitempty"`
	// ExecutionCount numbers the cells from 1, failed ones too.
	ExecutionCount int `json:"execution_count,omitempty"`
	// Results are the cell's displayed values in the order produced, each a
	// MIME bundle: type to data, binary types (image/png) in base64.
	// A bundle has "text/plain" unless it is an image alone.
	Results []map[string]string `json:"results,omitempty"`
	// Error is set when Status is "error".
	Error *CellError `json:"error,omitempty"`
}

// CellError is why a cell failed.
type CellError struct {
	// Name is the exception's or condition's class (python:
	// "KeyboardInterrupt" when interrupted; r: "simpleError", ...,
	// "parseError"), or "Interrupted" (javascript, bash), "interrupt" (r),
	// "Uncaught" (javascript: a thrown value that is not an Error), or
	// "ExitStatus" (bash: the cell's last command, or the one set -e
	// stopped at, failed; Value is its status).
	Name  string `json:"name"`
	Value string `json:"value"`
	// Traceback is the error's trace, one line per element, without the
	// driver's own frames; empty for interrupts of bash and javascript.
	Traceback []string `json:"traceback,omitempty"`
}
