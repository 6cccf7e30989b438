// Command agent is PID 1 of every sandq sandbox container. See package
// github.com/sandq/sandq/agent for what it does and the protocol it speaks.
//
// Usage: agent [--job-uid N] [--prestart-hold D] (the worker gives each
// container a uid of its own, default 1000; see agent.Config for the hold).
// As agent.LaunchArg0 it is the step launcher.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandq/sandq/agent"
)

func main() {
	if filepath.Base(os.Args[0]) == agent.LaunchArg0 {
		os.Exit(agent.Launch(os.Args))
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	uid := fs.Int("job-uid", 1000, "uid and gid the steps run as; never 0")
	hold := fs.Duration("prestart-hold", agent.DefaultPrestartHold, "how long a waiting container keeps the interpreter it started for the next job; 0 keeps it")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *uid <= 0 {
		fmt.Fprintln(os.Stderr, "agent: --job-uid must be positive")
		os.Exit(2)
	}
	if err := agent.Serve(os.Stdin, os.Stdout, agent.Config{JobUID: *uid, JobGID: *uid, PrestartHold: *hold}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
