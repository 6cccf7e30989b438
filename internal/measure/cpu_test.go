package measure

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCPUSub: a process's growth is charged to its command; one that ended
// takes its earlier time off the ancestor that reaped it (its whole life
// came back there as children's time), through ancestors that ended too.
func TestCPUSub(t *testing.T) {
	ms := time.Millisecond
	earlier := CPU{
		1:  {"init", 0, 100 * ms},
		10: {"shim", 1, 20 * ms},
		11: {"agent", 10, 500 * ms},
		20: {"worker", 1, 40 * ms},
	}
	// The container was replaced: agent (500 → 530 ms) and shim (20 → 22)
	// ended, init reaped the shim, whose time held the agent's.
	now := CPU{
		1:  {"init", 0, 100*ms + 22*ms + 530*ms},
		20: {"worker", 1, 55 * ms},
		30: {"agent", 1, 7 * ms}, // the new container's
	}
	got := now.Sub(earlier)
	want := map[string]time.Duration{"init": 32 * ms, "worker": 15 * ms, "agent": 7 * ms}
	if len(got) != len(want) {
		t.Fatalf("Sub = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Sub[%s] = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// TestReadCPU reads this process among the host's, by its command.
func TestReadCPU(t *testing.T) {
	// Reading /proc takes CPU: read until this process shows some.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if x := ReadCPU()[os.Getpid()]; x.used > 0 {
			comm, err := os.ReadFile("/proc/self/comm")
			if err != nil {
				t.Fatal(err)
			}
			if x.comm != strings.TrimSpace(string(comm)) || x.ppid != os.Getppid() {
				t.Fatalf("ReadCPU: this process as %+v, want comm %q ppid %d", x, comm, os.Getppid())
			}
			return
		}
	}
	t.Fatal("ReadCPU: this process never showed CPU time in 10 s")
}

func TestTally(t *testing.T) {
	acc := map[string]time.Duration{"earlier": time.Second}
	spin := func() {
		for start := time.Now(); time.Since(start) < 150*time.Millisecond; {
		}
	}
	Tally(acc, spin)
	Tally(acc, spin)
	require.GreaterOrEqual(t, acc["measure.test"], 200*time.Millisecond, "both turns' CPU, summed: %v", acc)
	require.Equal(t, time.Second, acc["earlier"], "what acc held is kept")
}
