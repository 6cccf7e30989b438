// Command agent is PID 1 of every sandq sandbox container. See package
// github.com/sandq/sandq/agent for what it does and the protocol it speaks.
//
// Usage: agent [--job-uid N] (the worker gives each container a uid of
// its own; default 1000). As agent.LaunchArg0 it is the step launcher.
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
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *uid <= 0 {
		fmt.Fprintln(os.Stderr, "agent: --job-uid must be positive")
		os.Exit(2)
	}
	if err := agent.Serve(os.Stdin, os.Stdout, agent.Config{JobUID: *uid, JobGID: *uid}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
