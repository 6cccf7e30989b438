// Command agent is PID 1 of every sandq sandbox container. See package
// github.com/sandq/sandq/agent for what it does and the protocol it speaks.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandq/sandq/agent"
)

func main() {
	if filepath.Base(os.Args[0]) == agent.LaunchArg0 {
		os.Exit(agent.Launch(os.Args))
	}
	if err := agent.Serve(os.Stdin, os.Stdout, agent.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
