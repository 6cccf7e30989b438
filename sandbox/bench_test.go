package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/measure"
	"github.com/sandq/sandq/sandbox"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// hostPython is Debian's python3, the same build as in the image, so the
// bare rate compares like with like.
func hostPython() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// BenchmarkPrint1 measures trivial print(1) jobs, in one run: through the
// warm pool of each backend (SANDQ_TEST_BACKENDS, default docker and
// podman) at concurrency 1 and 4, bare host fork-exec of python3 at the
// same concurrency, and `docker run --rm` per job; it prints the ratios.
// Run it with -benchtime 1x (make bench); SANDQ_BENCH_JOBS sets the job
// count per phase (default 400; docker run gets a tenth).
func BenchmarkPrint1(b *testing.B) {
	n := envInt("SANDQ_BENCH_JOBS", 400)
	type backendPool struct {
		name string
		job  func() error
	}
	var pools []backendPool
	for _, backend := range backends() {
		rt := newRuntime(b, backend)
		pool, err := sandbox.NewPool(sandbox.PoolConfig{Runtime: rt, MinIdle: 4, MaxTotal: 4, ReconcileInterval: -1, OCIRuntime: ociRuntime(backend)})
		require.NoError(b, err)
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = pool.Close(ctx)
		}()
		spec, job := measure.Print1(pool)
		pools = append(pools, backendPool{backend, func() error {
			if err := job(); err != nil {
				return fmt.Errorf("%s: %w", backend, err)
			}
			return nil
		}})
		// Warm up: start the pool's containers.
		pool.Warm(spec)
	}
	hostJob := func() error {
		out, err := exec.Command(hostPython(), "-c", "print(1)").Output()
		if err == nil && string(out) != "1\n" {
			err = fmt.Errorf("host job printed %q", out)
		}
		return err
	}
	dockerRun := func() error {
		out, err := exec.Command("docker", "run", "--rm", "--network", "none", "--read-only",
			"--entrypoint", "python3", testImage(), "-c", "print(1)").Output()
		if err == nil && string(out) != "1\n" {
			err = fmt.Errorf("docker run printed %q", out)
		}
		return err
	}

	// Warm up the pools and the host's page cache.
	for _, bp := range pools {
		_, err := measure.Run("warmup", 20, 4, bp.job)
		require.NoError(b, err)
	}
	_, err := measure.Run("warmup", 10, 2, hostJob)
	require.NoError(b, err)

	type phase struct {
		name string
		n    int
		conc int
		job  func() error
	}
	plan := []phase{{"host python3 -c", n, 1, hostJob}, {"host python3 -c", n, 4, hostJob}}
	for _, bp := range pools {
		plan = append(plan, phase{"pool " + bp.name, n, 1, bp.job}, phase{"pool " + bp.name, n, 4, bp.job})
	}
	plan = append(plan, phase{"docker run --rm", max(n/10, 5), 1, dockerRun})

	b.ResetTimer()
	var phases []measure.Phase
	for range b.N {
		phases = phases[:0]
		for _, ph := range plan {
			p, err := measure.Run(ph.name, ph.n, ph.conc, ph.job)
			require.NoError(b, err)
			phases = append(phases, p)
		}
	}
	b.StopTimer()

	host1, host4, drun := phases[0], phases[1], phases[len(phases)-1]
	measure.Table(os.Stdout, "print(1) jobs", phases...)
	for i, bp := range pools {
		pool1, pool4 := phases[2+2*i], phases[3+2*i]
		fmt.Printf("%s: ratio pool/host throughput: conc 1 %.2f, conc 4 %.2f (target >= 0.50 at conc 4)\n",
			bp.name, pool1.Rate()/host1.Rate(), pool4.Rate()/host4.Rate())
		fmt.Printf("%s: pool p99 at conc 4 %s, %.2fx the host's %s (target <= 2); pool p50 at conc 1 %.2fx the host's\n",
			bp.name, pool4.Pct(0.99).Round(10*time.Microsecond), float64(pool4.Pct(0.99))/float64(host4.Pct(0.99)),
			host4.Pct(0.99).Round(10*time.Microsecond), float64(pool1.Pct(0.5))/float64(host1.Pct(0.5)))
		fmt.Printf("%s: ratio pool/docker-run throughput at conc 1: %.1fx; pool p50 at conc 1: %s (target < 30ms)\n",
			bp.name, pool1.Rate()/drun.Rate(), pool1.Pct(0.5).Round(10*time.Microsecond))
		if bp.name == "docker" {
			b.ReportMetric(pool4.Rate(), "pool_c4_jobs/s")
			b.ReportMetric(pool4.Rate()/host4.Rate(), "pool/host_c4")
			b.ReportMetric(float64(pool4.Pct(0.99))/float64(host4.Pct(0.99)), "pool_p99/host_p99_c4")
			b.ReportMetric(float64(pool1.Pct(0.5))/float64(host1.Pct(0.5)), "pool_p50/host_p50_c1")
			b.ReportMetric(float64(pool1.Pct(0.5).Microseconds())/1000, "pool_c1_p50_ms")
			b.ReportMetric(float64(pool1.Pct(0.99).Microseconds())/1000, "pool_c1_p99_ms")
			b.ReportMetric(pool1.Rate()/drun.Rate(), "pool/dockerrun_c1")
		} else {
			b.ReportMetric(pool4.Rate(), bp.name+"_pool_c4_jobs/s")
			b.ReportMetric(pool4.Rate()/host4.Rate(), bp.name+"_pool/host_c4")
			b.ReportMetric(float64(pool1.Pct(0.5).Microseconds())/1000, bp.name+"_pool_c1_p50_ms")
			b.ReportMetric(float64(pool1.Pct(0.99).Microseconds())/1000, bp.name+"_pool_c1_p99_ms")
		}
	}
}
