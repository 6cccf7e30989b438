// Command enqueue is sandq's producer CLI. It enqueues a program as a job
// (run), prints a job's Result (status), waits for a job and mirrors its
// outcome in its own exit status (wait, run --wait), and cancels a job
// (cancel). It also opens and drives sessions, live interpreters run cell
// by cell (session, repl). It is wiring only: every Redis access goes
// through client.Client.
//
// Configuration comes from global flags, each with a SANDQ_* environment
// variable; a flag wins over its variable, the variable over the default.
// The exit statuses are documented in exitStatusHelp and decided in one
// place, exitCode.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/internal/tracing"
)

func main() {
	// The CLI reports Redis errors itself, once; go-redis would also log
	// every failed dial.
	client.QuietRedisLogs()
	a := &app{
		stdin:      os.Stdin,
		stdout:     os.Stdout,
		stderr:     os.Stderr,
		getenv:     os.Getenv,
		notify:     func(c chan<- os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) },
		stopNotify: signal.Stop,
	}
	// Spans go out over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set; a
	// job joins the trace of TRACEPARENT either way.
	ctx := tracing.ExtractEnv(context.Background(), os.Getenv)
	_, stopTracing, err := tracing.Setup(ctx, "sandq-enqueue")
	if err != nil {
		fmt.Fprintln(os.Stderr, "enqueue: tracing is off:", err)
	}
	code := a.run(ctx, os.Args[1:])
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = stopTracing(sctx)
	cancel()
	os.Exit(code)
}

// app is one invocation of the CLI with its environment injected, so
// tests run the real command tree in-process.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	// notify and stopNotify subscribe a channel to SIGINT and SIGTERM and
	// unsubscribe it (signal.Notify, signal.Stop). Nil notify: no signal
	// handling.
	notify     func(chan<- os.Signal)
	stopNotify func(chan<- os.Signal)

	// waitHook, if set, is called just before the CLI blocks waiting for
	// job id, or for a cell of session id. Tests deliver a fake Ctrl-C
	// from it.
	waitHook func(id string)

	// promptHook, if set, is called each time the REPL is idle and asks
	// for a line (no cell running). Tests deliver an idle Ctrl-C from it.
	promptHook func()

	// globals holds the resolved global flags once the root command's
	// PersistentPreRunE has run.
	globals config.Redis

	// onSignal, when set (under sigMu), is offered each SIGINT and SIGTERM
	// first: a signal it takes (returning true) does not cancel the
	// command. The REPL interrupts a running cell with it.
	sigMu    sync.Mutex
	onSignal func(os.Signal) bool
}

// setSignalHandler sets (nil: removes) app.onSignal.
func (a *app) setSignalHandler(h func(os.Signal) bool) {
	a.sigMu.Lock()
	defer a.sigMu.Unlock()
	a.onSignal = h
}

// consumeSignal offers s to app.onSignal; it reports whether it took it.
func (a *app) consumeSignal(s os.Signal) bool {
	a.sigMu.Lock()
	h := a.onSignal
	a.sigMu.Unlock()
	return h != nil && h(s)
}

// run executes the command line args and returns the process exit status.
//
// The first SIGINT or SIGTERM cancels ctx with an *interruptedError cause
// and unsubscribes, so a second one gets the default action (the process
// dies at once); a signal app.onSignal takes does neither.
func (a *app) run(ctx context.Context, args []string) int {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if a.notify != nil {
		sigc := make(chan os.Signal, 1)
		a.notify(sigc)
		done := make(chan struct{})
		defer func() {
			close(done)
			a.stopNotify(sigc)
		}()
		go func() {
			for {
				select {
				case s := <-sigc:
					if a.consumeSignal(s) {
						continue
					}
					a.stopNotify(sigc)
					cancel(&interruptedError{sig: s})
				case <-done:
				}
				return
			}
		}()
	}
	root := a.newRootCmd()
	root.SetArgs(args)
	return a.report(root.ExecuteContext(ctx))
}

// report prints err, if it has a message, and returns the exit status it
// carries: an *exitError's code, otherwise exitCLI.
func (a *app) report(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(a.stderr, "enqueue: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(a.stderr, "enqueue: %v\n", err)
	return exitCLI
}

// exitError carries an exit status out of a command. A nil err means
// everything has been said already (the job's outcome was printed).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// interruptedError is the cancel cause when the user interrupts the CLI.
type interruptedError struct{ sig os.Signal }

func (e *interruptedError) Error() string { return "interrupted by " + signalName(e.sig) }

// code is the shell's convention for death by signal: 128 + signo (130 for
// SIGINT).
func (e *interruptedError) code() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitCanceled
}

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// interrupted returns the exit error for an interrupted command, or nil if
// ctx was not interrupted.
func interrupted(ctx context.Context) error {
	var ie *interruptedError
	if errors.As(context.Cause(ctx), &ie) {
		return &exitError{code: ie.code(), err: ie}
	}
	return nil
}
