package main

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/sandq/sandq/client"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandq/sandq/internal/config"
)

func (a *app) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "enqueue",
		Short: "Enqueue programs on sandq and read, await and cancel their results",
		Long: `enqueue is sandq's producer CLI. It puts programs on sandq's Redis queues
for workers to run in hardened containers, and reads, awaits and cancels
their results by job ID.

Every global flag has an environment variable; a flag given on the command
line wins over its variable, the variable over the default. Workers must use
the same Redis, --prefix and --queue-prefix to see the jobs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without a subcommand cobra prints the help and exits 0.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.ApplyEnv(cmd.Flags(), a.getenv); err != nil {
				return usageError(cmd, err)
			}
			if err := a.globals.Check(); err != nil {
				return usageError(cmd, err)
			}
			return nil
		},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(usageError)

	pf := root.PersistentFlags()
	pf.SortFlags = false
	a.globals.Register(pf, "how long the results this command writes (queued, canceled) are kept; workers set their own")
	// The help names each flag's variable.
	pf.VisitAll(func(f *pflag.Flag) { f.Usage += " (env " + config.EnvName(f) + ")" })

	root.AddCommand(a.newRunCmd(), a.newStatusCmd(), a.newWaitCmd(), a.newLogsCmd(), a.newCancelCmd(), a.newArtifactsCmd())
	root.AddCommand(a.newBatchCmd(), a.newEvalCmd(), a.newLangsCmd())
	root.AddCommand(a.newSessionCmd(), a.newReplCmd(), a.newMCPCmd(), a.newEnvCmd())
	return root
}

// newClient returns a client.Client for the global options. It does not
// contact Redis.
func (a *app) newClient() (*client.Client, error) { return a.newClientAllowing(nil) }

// newClientAllowing is newClient whose policy lets jobs' network policies
// list the destinations allow admits (run --run-allow-hosts): the
// workers' own list is the one that counts.
func (a *app) newClientAllowing(allow []string) (*client.Client, error) {
	cc := a.globals.ClientConfig()
	cc.Policy.NetworkAllow = allow
	c, err := client.New(cc)
	if err != nil {
		return nil, &exitError{code: exitCLI, err: err}
	}
	return c, nil
}

// failure turns an error from a client.Client call into the command's
// error: the interruption if the user interrupted it, otherwise exitCLI
// with a hint when Redis could not be reached.
func (a *app) failure(cmd *cobra.Command, err error) error {
	if ie := interrupted(cmd.Context()); ie != nil {
		return ie
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		err = fmt.Errorf("cannot reach Redis at %s (--redis, SANDQ_REDIS_ADDR): %w", a.globals.Addr, err)
	}
	return &exitError{code: exitCLI, err: err}
}

// usageError marks err as a usage error (exitCLI) and points at the help.
func usageError(cmd *cobra.Command, err error) error {
	//lint:ignore ST1005 the CLI prints it as it is: a sentence after the error
	return &exitError{code: exitCLI, err: fmt.Errorf("%w\nRun '%s --help' for usage.", err, cmd.CommandPath())}
}

// usageArgs wraps a cobra positional-argument check so its error is a
// usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError(cmd, err)
		}
		return nil
	}
}

// resumeCommand returns the shell command that runs sub (such as "wait")
// on job id with the global flags given on this command line, so it
// reaches the same Redis and namespace. Variables from the environment
// are not repeated: they are still set in the user's shell.
func resumeCommand(cmd *cobra.Command, sub, id string) string {
	parts := []string{"enqueue"}
	// Changed is set on the flag the command parsed, which cobra shares
	// with the root's persistent flag set (whose Visit sees nothing).
	cmd.Root().PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			parts = append(parts, "--"+f.Name+"="+shellQuote(f.Value.String()))
		}
	})
	parts = append(parts, sub, shellQuote(id))
	return strings.Join(parts, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
