package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/internal/measure"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
	"github.com/sandq/sandq/worker"
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

// benchPool is a pool of size containers, all kept warm, on backend's
// engine, closed when the benchmark ends.
func benchPool(b *testing.B, backend string, size int) *sandbox.Pool {
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Runtime: newRuntime(b, backend), MinIdle: size, MaxTotal: size,
		ReconcileInterval: -1, OCIRuntime: ociRuntime(backend)})
	require.NoError(b, err)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = pool.Close(ctx)
	})
	return pool
}

// BenchmarkPrint1 measures trivial print(1) jobs, in one run: through the
// warm pool of each backend (SANDQ_TEST_BACKENDS, default docker and
// podman) at concurrency 1 and 4, bare host fork-exec of python3 at the
// same concurrency, and `docker run --rm` per job; it prints the ratios.
// Run it with -benchtime 1x (make bench); SANDQ_BENCH_JOBS sets the job
// count per phase (default 400). gVisor's phases get half (its jobs take
// three to four times as long: 200 still give its p50 and p99, and they
// were a third of make bench), docker run a twentieth.
func BenchmarkPrint1(b *testing.B) {
	n := envInt("SANDQ_BENCH_JOBS", 400)
	type backendPool struct {
		name string
		n    int
		job  func() error
	}
	var pools []backendPool
	for _, backend := range backends() {
		pool := benchPool(b, backend, 4)
		spec, job := measure.Print1(pool)
		nb := n
		if backend == "gvisor" {
			nb = max(n/2, 1)
		}
		pools = append(pools, backendPool{backend, nb, func() error {
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
		plan = append(plan, phase{"pool " + bp.name, bp.n, 1, bp.job}, phase{"pool " + bp.name, bp.n, 4, bp.job})
	}
	plan = append(plan, phase{"docker run --rm", max(n/20, 5), 1, dockerRun})

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
	// Docker's runc pool at c=4, when it was measured: the others' baseline.
	var runc4 *measure.Phase
	if i := slices.IndexFunc(pools, func(bp backendPool) bool { return bp.name == "docker" }); i >= 0 {
		runc4 = &phases[3+2*i]
	}
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
			// Issue 34's names: this runtime against the host at c=1 and
			// against Docker's runc pool at c=4.
			b.ReportMetric(float64(pool1.Pct(0.5))/float64(host1.Pct(0.5)), bp.name+"_pool_p50/host_p50_c1")
			if runc4 != nil {
				b.ReportMetric(pool4.Rate()/runc4.Rate(), bp.name+"/runc_c4")
			}
			b.ReportMetric(pool4.Rate(), bp.name+"_pool_c4_jobs/s")
			b.ReportMetric(pool4.Rate()/host4.Rate(), bp.name+"_pool/host_c4")
			b.ReportMetric(float64(pool1.Pct(0.5).Microseconds())/1000, bp.name+"_pool_c1_p50_ms")
			b.ReportMetric(float64(pool1.Pct(0.99).Microseconds())/1000, bp.name+"_pool_c1_p99_ms")
		}
	}
}

// BenchmarkNodeStart measures console.log jobs in one warm javascript
// container of each backend, started cold (the baseline) and from the
// process started on a FIFO ahead of them (Step.Prestart): back to back,
// and 200 ms apart (the gap not counted), the way interactive jobs come.
// It prints each p50 and the prestart's ratio to the cold start's.
func BenchmarkNodeStart(b *testing.B) {
	benchFIFOStart(b, "javascript", "node", "console.log(1)", 10, oneStep("node", "main.js", "console.log(1)"))
}

// BenchmarkRubyStart is BenchmarkNodeStart for puts jobs in the ruby
// image: the process started ahead was fed the script's first byte and has
// loaded RubyGems.
func BenchmarkRubyStart(b *testing.B) {
	benchFIFOStart(b, "ruby", "ruby", "puts 1", 10, oneStep("ruby", "main.rb", "puts 1"))
}

// BenchmarkTSCStart is BenchmarkNodeStart for TypeScript jobs, compile and
// run as the worker asks: the compiler started ahead has booted its
// snapshot; the program runs cold after it.
func BenchmarkTSCStart(b *testing.B) {
	lang, _ := langs.Lookup("typescript")
	code := "const n: number = 1;\nconsole.log(n);\n"
	benchFIFOStart(b, "typescript", "tsc", code, 40, func(lim worker.Limits, prestart bool) *agent.RunRequest {
		return &agent.RunRequest{
			Files: []agent.File{{Path: lang.Source, Data: []byte(code)}},
			Steps: []agent.Step{
				{Name: "compile", Argv: lang.Compile, Timeout: lim.Timeout, Rlimits: lim.Rlimits, Prestart: prestart, StopOnFailure: true},
				{Name: "run", Argv: lang.Run, Timeout: lim.Timeout, Rlimits: lim.Rlimits},
			},
		}
	})
}

// oneStep returns the request of a job that runs code in file with interp.
func oneStep(interp, file, code string) func(worker.Limits, bool) *agent.RunRequest {
	return func(lim worker.Limits, prestart bool) *agent.RunRequest {
		return &agent.RunRequest{
			Files: []agent.File{{Path: file, Data: []byte(code)}},
			Steps: []agent.Step{{Name: "run", Argv: []string{interp, file}, Timeout: lim.Timeout, Rlimits: lim.Rlimits, Prestart: prestart}},
		}
	}
}

// benchFIFOStart is BenchmarkNodeStart for lang: the jobs of request,
// whose code prints "1", their first step started ahead by the agent when
// prestart (named what in the figures); SANDQ_BENCH_JOBS/per jobs a phase
// back to back, half that apart.
func benchFIFOStart(b *testing.B, lang, what, code string, per int, request func(lim worker.Limits, prestart bool) *agent.RunRequest) {
	n := envInt("SANDQ_BENCH_JOBS", 400) / per
	spec, _ := worker.WarmSpec(jobs.Policy{}, lang, langs.DefaultImagePrefix)
	lim := worker.LimitsOf(jobs.Policy{}.WithDefaults().DefaultLimits)
	for _, backend := range backends() {
		pool := benchPool(b, backend, 1)
		var asked, warm atomic.Int64 // jobs that asked for a prestart, and ran in one
		job := func(prestart bool) func() error {
			return func() error {
				if prestart {
					asked.Add(1)
				}
				res, err := pool.Run(context.Background(), spec, request(lim, prestart))
				if err != nil {
					return err
				}
				first := res.Steps[0]
				if got := string(res.Last().Stdout.Bytes()); got != "1\n" || (first.Prestarted && !prestart) {
					return fmt.Errorf("printed %q (prestarted %v): %s", got, first.Prestarted, res.Last().Stderr.Bytes())
				}
				if first.Prestarted {
					warm.Add(1)
				}
				return nil
			}
		}
		// spaced runs job n times, gap apart; the gap is not measured.
		spaced := func(name string, n int, gap time.Duration, job func() error) (measure.Phase, error) {
			p := measure.Phase{Name: name, Conc: 1}
			for range n {
				time.Sleep(gap)
				t := time.Now()
				if err := job(); err != nil {
					return p, err
				}
				p.Lat = append(p.Lat, time.Since(t))
				p.Wall += p.Lat[len(p.Lat)-1]
			}
			slices.Sort(p.Lat)
			return p, nil
		}
		_, err := measure.Run("warmup", 5, 1, job(true))
		require.NoError(b, err)
		asked.Store(0)
		warm.Store(0)
		var phases []measure.Phase
		for range b.N {
			phases = phases[:0]
			for _, ph := range []struct {
				name     string
				prestart bool
				gap      time.Duration
			}{{"cold, back to back", false, 0}, {"prestarted, back to back", true, 0},
				{"cold, 200 ms apart", false, 200 * time.Millisecond}, {"prestarted, 200 ms apart", true, 200 * time.Millisecond}} {
				_, err := measure.Run("warmup", 2, 1, job(ph.prestart)) // the first prestarted job follows a cold one
				require.NoError(b, err)
				var p measure.Phase
				if ph.gap == 0 {
					p, err = measure.Run(ph.name, n, 1, job(ph.prestart))
				} else {
					p, err = spaced(ph.name, n/2, ph.gap, job(ph.prestart))
				}
				require.NoError(b, err)
				phases = append(phases, p)
			}
		}
		measure.Table(os.Stdout, backend+": "+strings.TrimSpace(strings.ReplaceAll(code, "\n", " "))+" jobs, "+lang, phases...)
		b2b := float64(phases[1].Pct(0.5)) / float64(phases[0].Pct(0.5))
		apart := float64(phases[3].Pct(0.5)) / float64(phases[2].Pct(0.5))
		fmt.Printf("%s: %s prestart p50/cold p50: back to back %.2f, 200 ms apart %.2f (%d of %d jobs asking ran prestarted)\n",
			backend, what, b2b, apart, warm.Load(), asked.Load())
		b.ReportMetric(b2b, backend+"_"+what+"_prestart/cold_p50")
		b.ReportMetric(apart, backend+"_"+what+"_prestart/cold_p50_apart")
	}
}
