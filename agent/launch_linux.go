//go:build linux

package agent

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// LaunchArg0 is argv[0] of the agent binary re-executed as a launcher.
//
// Go's ForkExec cannot set rlimits in the child, and setting them on the
// agent would limit the agent too. So each step starts as the agent binary
// in launcher mode, already running as the job's uid in its own session: it
// lowers its rlimits, raises its oom_score_adj (so the OOM killer takes the
// job, never the agent), and execs the program. Both calls only lower
// privileges, so no capability is needed after the uid switch.
const LaunchArg0 = "sandq-launch"

func encodeRlimits(l Rlimits) string {
	return fmt.Sprintf("nofile=%d,fsize=%d,cpu=%d,stack=%d", l.NoFile, l.FileSize, l.CPU, l.Stack)
}

// Launch is the launcher's main: argv is [LaunchArg0, rlimits, program, args...].
// It returns only on failure, with the exit status to use.
func Launch(argv []string) int {
	if len(argv) < 3 {
		fmt.Fprintln(os.Stderr, "sandq: launcher: missing program")
		return 127
	}
	for _, kv := range strings.Split(argv[1], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			continue
		}
		res := map[string]int{
			"nofile": syscall.RLIMIT_NOFILE, "fsize": syscall.RLIMIT_FSIZE,
			"cpu": syscall.RLIMIT_CPU, "stack": syscall.RLIMIT_STACK,
		}[k]
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(res, &cur); err != nil {
			continue
		}
		n = min(n, cur.Max)
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			fmt.Fprintf(os.Stderr, "sandq: launcher: setrlimit %s: %v\n", k, err)
			return 127
		}
	}
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	prog := argv[2]
	path, err := exec.LookPath(prog)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandq: cannot run %s: %v\n", prog, err)
		return 127
	}
	err = syscall.Exec(path, argv[2:], os.Environ())
	fmt.Fprintf(os.Stderr, "sandq: cannot run %s: %v\n", prog, err)
	return 126
}
