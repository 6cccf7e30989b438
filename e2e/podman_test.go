package e2e

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// forEachBackend runs f as a subtest for each of backends (docker, podman,
// gvisor) that SANDQ_TEST_BACKENDS selects (space or comma separated; unset
// or empty: all). A backend a run leaves out on purpose (`make test
// BACKEND=docker` leaves Podman out) gets no subtest; one that is selected
// but not running fails its subtest.
func forEachBackend(t *testing.T, backends []string, f func(t *testing.T, backend string)) {
	v := os.Getenv("SANDQ_TEST_BACKENDS")
	selected := strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ',' })
	for _, b := range backends {
		if len(selected) > 0 && !slices.Contains(selected, b) {
			continue
		}
		t.Run(b, func(t *testing.T) { f(t, b) })
	}
}

// startWorkerOn starts a worker whose sandboxes run on backend: docker,
// podman (--backend podman) or gvisor (--oci-runtime runsc, on Docker).
func (e *env) startWorkerOn(t *testing.T, backend string, args ...string) *worker {
	t.Helper()
	switch backend {
	case "podman":
		return e.startPodmanWorker(podmanEngine(t), args...)
	case "gvisor":
		requireGVisor(t)
		return e.startWorker(append(args, "--oci-runtime", "runsc")...)
	}
	return e.startWorker(args...)
}

// podmanEngine connects to the Podman service as a --backend podman worker
// does (CONTAINER_HOST, else the default socket). A missing service fails
// the test.
func podmanEngine(t testing.TB) *sandbox.Podman {
	t.Helper()
	pm, err := sandbox.NewPodman(sandbox.PodmanConfig{})
	require.NoError(t, err, "e2e tests need the Podman service (make setup)")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, pm.Ping(ctx), "e2e tests need the Podman service (make setup)")
	t.Cleanup(func() { _ = pm.Close() })
	return pm
}

// podmanContainers lists a worker's containers on Podman.
func podmanContainers(t testing.TB, pm *sandbox.Podman, owner string) []sandbox.ContainerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := pm.List(ctx, map[string]string{sandbox.LabelOwner: owner})
	require.NoError(t, err)
	return cs
}

// startPodmanWorker starts a worker with --backend podman. The harness
// removes a killed worker's Docker containers; this removes its Podman
// ones, in a cleanup registered first so that it runs after the harness
// has killed the worker (cleanups run last in, first out).
func (e *env) startPodmanWorker(pm *sandbox.Podman, args ...string) *worker {
	e.t.Helper()
	var w *worker
	e.t.Cleanup(func() {
		if w == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		left, _ := pm.List(ctx, map[string]string{sandbox.LabelOwner: w.owner})
		for _, c := range left {
			_ = pm.Remove(ctx, c.ID)
		}
	})
	w = e.startWorker(append([]string{"--backend", "podman"}, args...)...)
	return w
}

// TestPodmanWorkerEndToEnd: a worker started with --backend podman serves
// jobs through Redis, with the same statuses as on Docker, its containers
// are Podman's, and it removes them when it stops.
func TestPodmanWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	forEachBackend(t, []string{"podman"}, testPodmanWorkerEndToEnd)
}

func testPodmanWorkerEndToEnd(t *testing.T, _ string) {
	e := newEnv(t)
	pm := podmanEngine(t)
	w := e.startPodmanWorker(pm, "--concurrency", "2")

	r := e.wait(e.enqueue(py("import sys, os\nprint('hello from', sys.argv[1:], os.getuid() >= 1000000)")), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Reason)
	require.Equal(t, "hello from [] True\n", r.Stdout, "a job uid of the container's own")
	require.Equal(t, 1, r.Attempts)

	e.checkUserOutcomes(t)

	cs := podmanContainers(t, pm, w.owner)
	require.NotEmpty(t, cs, "the worker's containers are on Podman")
	for _, c := range cs {
		require.Equal(t, "podman", c.Labels[sandbox.LabelBackend])
	}
	require.Empty(t, e.containers(w.owner), "and none on Docker")

	w.signal(syscall.SIGTERM)
	require.NoError(t, w.wait(time.Minute))
	require.Empty(t, podmanContainers(t, pm, w.owner), "a stopped worker leaves no containers")
}

// TestBackendLanguages runs every language's hello world, and its compile
// error when it is compiled, on a Podman worker and on a worker whose
// sandboxes run under gVisor (--oci-runtime runsc, on Docker): each image
// works under their mounts and limits (compilers write and execute in /work
// and /tmp). TestLanguages is the full table, on Docker.
func TestBackendLanguages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, []string{"podman", "gvisor"}, func(t *testing.T, backend string) {
		t.Parallel()
		e := newEnv(t)
		e.startWorkerOn(t, backend, "--concurrency", "2", "--warm", "")
		e.checkHellos(t)
	})
}

// requireGVisor fails the test unless dockerd has the runsc runtime
// (make setup registers it).
func requireGVisor(t *testing.T) {
	t.Helper()
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), `"runsc"`, "dockerd has no runsc runtime (make setup registers it)")
}

// checkHellos runs every language's hello world, and its compile error
// when it is compiled, on e's worker.
func (e *env) checkHellos(t *testing.T) {
	const waitFor = 10 * time.Minute // jobs queue behind each other on 2 cores
	for _, tc := range langCases {
		t.Run(tc.lang, func(t *testing.T) {
			t.Parallel()
			hello := e.enqueue(jobs.Job{Lang: tc.lang, Code: tc.hello})
			var compile string
			if tc.compileErr != "" {
				compile = e.enqueue(jobs.Job{Lang: tc.lang, Code: tc.compileErr})
			}
			r := e.wait(hello, waitFor)
			require.Equal(t, jobs.StatusSucceeded, r.Status, "%s\n%s", r.Reason, describe(r))
			require.Equal(t, "hello, world\n", r.Stdout)
			if compile != "" {
				r = e.wait(compile, waitFor)
				require.Equal(t, jobs.StatusCompileError, r.Status, "%s\n%s", r.Reason, describe(r))
				require.Contains(t, r.Compile.Stdout+r.Compile.Stderr, tc.compileWant)
			}
		})
	}
}

// TestPodmanLibraries: libraries install on a Podman worker as on Docker:
// npm from the registry and pip from a local index, in a networked install
// container, then a run with the set read-only and no network.
func TestPodmanLibraries(t *testing.T) {
	t.Parallel()
	forEachBackend(t, []string{"podman"}, testPodmanLibraries)
}

func testPodmanLibraries(t *testing.T, _ string) {
	pm := podmanEngine(t)
	// Install containers have no network: the worker's egress proxy dials
	// the index from the host, so the index's host address will do (not
	// Podman's bridge gateway: that address exists only while a container
	// is attached to the bridge, and none is here).
	file, wheel := buildWheel(t, "sandqdemo", "1.0", "hello from a local wheel on podman")
	index := servePipIndex(t, "sandqdemo", file, wheel)
	e := newEnv(t)
	t.Cleanup(func() { removeNamespaceVolumes(pm, e.prefix) }) // after the worker's cleanup
	e.startPodmanWorker(pm, "--concurrency", "2", "--warm", "", "--pip-index-url", index)

	tenant := runTenant() // the first install of each set is a real one
	first, _ := installTwice(t, e, jobs.Job{Tenant: tenant, Lang: "javascript", Libraries: []string{"js-md5@0.8.3"}, Code: `
console.log(require('js-md5')('hello'));
require('dns').lookup('registry.npmjs.org', (err) => console.log(err ? 'no network' : 'network'));
`})
	require.Equal(t, "5d41402abc4b2a76b9719d911017c592\nno network\n", first.Stdout)
	first, _ = installTwice(t, e, jobs.Job{Tenant: tenant, Lang: "python", Libraries: []string{"sandqdemo"},
		Code: "import sandqdemo\nprint(sandqdemo.hello())\n"})
	require.Equal(t, "hello from a local wheel on podman\n", first.Stdout)
	require.Contains(t, first.Install.Volume, sandbox.VolumePrefix)
	out, err := exec.Command("podman", "volume", "inspect", first.Install.Volume, "--format", "{{.Name}}").CombinedOutput()
	require.NoError(t, err, "the set's volume is Podman's: %s", out)
}
