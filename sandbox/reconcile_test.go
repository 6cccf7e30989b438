package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

type runtimeMem struct{ totalAlloc uint64 }

func (m *runtimeMem) read() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.totalAlloc = ms.TotalAlloc
}

func TestMain(m *testing.M) {
	if owner := os.Getenv("SANDQ_HELPER_OWNER"); owner != "" {
		helperOwner(owner, os.Getenv("SANDQ_HELPER_BACKEND"))
		return
	}
	if err := checkBackends(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox tests:", err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "sandbox tests: backends %s\n", strings.Join(backends(), ", "))
	// A variable of this process that no sandbox may see: the "Env" case
	// of TestRoundTrip checks that the host's environment stays out.
	os.Setenv("SANDQ_SECRET", "host-secret")
	os.Exit(m.Run())
}

// helperOwner makes this process a pool owner with two containers on
// backend, says READY, and blocks until TestReconcileRemovesDeadOwners
// kills it.
func helperOwner(owner, backend string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper owner:", err)
		os.Exit(2)
	}
	rt, err := openRuntime(backend, zerolog.Nop())
	if err != nil {
		fail(err)
	}
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Runtime: rt, Owner: owner, MinIdle: 1, MaxTotal: 2, ReconcileInterval: -1, OCIRuntime: ociRuntime(backend)})
	if err != nil {
		fail(err)
	}
	lim := testLimits(jobs.Limits{})
	spec := sandbox.Spec{Image: testImage(), Limits: lim.Container}
	// One busy container and one idle one.
	if _, err := pool.Acquire(context.Background(), spec); err != nil {
		fail(err)
	}
	if _, err := pool.Acquire(context.Background(), spec); err != nil {
		fail(err)
	}
	os.Stdout.WriteString("READY\n")
	select {}
}

func TestReconcileRemovesDeadOwners(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		rt := newRuntime(t, backend)
		ctx := context.Background()

		// A live owner whose containers must survive.
		live := setup(t, backend, setupOpts{minIdle: 1})
		c, err := live.pool.Acquire(ctx, live.spec)
		require.NoError(t, err)
		defer live.pool.Release(c, true)

		dead := sandbox.NewOwnerID() + "-dead"
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "SANDQ_HELPER_OWNER="+dead, "SANDQ_HELPER_BACKEND="+backend)
		var helperErr bytes.Buffer
		cmd.Stderr = &helperErr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(out)
		ready := false
		for !ready && sc.Scan() {
			ready = strings.Contains(sc.Text(), "READY")
		}
		if !ready {
			_ = cmd.Wait()
			t.Fatalf("helper owner did not get ready: %s", helperErr.String())
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()

		left, err := rt.List(ctx, map[string]string{sandbox.LabelOwner: dead})
		require.NoError(t, err)
		require.Len(t, left, 2, "SIGKILL leaves the owner's labelled containers behind")

		// The reconciler knows every owner but the dead one alive (as the
		// workers' heartbeats tell it), so it never touches other tests'
		// containers, whatever their state.
		alive := func(_ context.Context, owner string) (bool, error) { return owner != dead, nil }

		// Within the grace period nothing is removed.
		removed, err := sandbox.Reconcile(ctx, rt, "reconciler", time.Hour, alive)
		require.NoError(t, err)
		for _, id := range removed {
			require.NotContains(t, []string{left[0].ID, left[1].ID}, id)
		}

		// An owner the registry says is alive keeps its containers, old
		// and stopped as they are.
		grace := time.Second
		time.Sleep(time.Until(left[0].Created.Add(2 * grace)))
		removed, err = sandbox.Reconcile(ctx, rt, "reconciler", grace, func(context.Context, string) (bool, error) { return true, nil })
		require.NoError(t, err)
		for _, id := range removed {
			require.NotContains(t, []string{left[0].ID, left[1].ID}, id, "a live owner's container was removed")
		}

		// A new owner with a short grace removes the dead owner's containers
		// once they are older than the grace period.
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err = sandbox.Reconcile(ctx, rt, "reconciler", grace, alive)
			require.NoError(t, err)
			left, err = rt.List(ctx, map[string]string{sandbox.LabelOwner: dead})
			require.NoError(t, err)
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		require.Empty(t, left, "dead owner's containers must be removed")

		// The live owner's containers are untouched and still work.
		mine, err := rt.List(ctx, map[string]string{sandbox.LabelOwner: live.pool.Owner()})
		require.NoError(t, err)
		require.NotEmpty(t, mine)
		st := live.runIn(t, c, "print('alive')")
		require.Equal(t, "alive\n", stdout(st))
	})
}
