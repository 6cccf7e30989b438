package e2e

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/judge"
)

// BenchmarkJudge is `make bench-judge`: judged throughput, in cases a
// second, for Python (the CodeContests sample's reference solutions that
// the host judge accepts, up to 100 problems) and C++ (100 generated
// problems: sum n numbers, times the problem's own constant, ten cases
// each), three ways at a parallelism of 2 (the machine's cores): judged
// jobs through the queue (one job a problem, compiled once); one plain
// job a case through the queue (the program compiled every time, the
// output compared by the client; C++ on 20 problems, its rate is what
// counts); and the host judge, unsandboxed, compiling once and running
// cases as subprocesses. It prints judge/per_case_jobs (target >= 5) and
// judge_time/host_time (target <= 1.3) per language, and judges the C++
// problems a second time, their compiles from the worker's compile cache
// (judge_cached/judge). Then it judges the
// Python problems again while two host processes spin on both cores, and
// prints how many got time_limit (target 0) and how many cases were rerun.
func BenchmarkJudge(b *testing.B) {
	for range b.N {
		e := newEnv(b)
		e.startWorker("--concurrency", "2")
		const cpu = 5 * time.Second
		py := benchPythonProblems(b, 100, cpu)
		cpp := benchCppProblems(100)
		fmt.Printf("\njudge benchmark: %d Python problems (%d cases), %d C++ problems (%d cases), parallelism 2\n",
			len(py), casesOf(py), len(cpp), casesOf(cpp))
		for _, set := range []struct {
			lang     string
			programs []hostProgram
			perCase  int // problems run as one job a case
		}{{"python", py, len(py)}, {"cpp", cpp, 20}} {
			start := time.Now()
			verdicts := hostJudgeAll(b, set.programs, 2)
			host := time.Since(start)
			for i, v := range verdicts {
				require.Equal(b, jobs.VerdictAccepted, v, "host: %s problem %d", set.lang, i)
			}
			start = time.Now()
			var caseCPU, caseWall int64 // the programs' own, over every case
			for _, r := range judgeThrough(b, e, set.programs) {
				require.Equal(b, jobs.VerdictAccepted, r.Verdict, "%s: %s %+v", set.lang, r.Reason, r.Cases)
				for _, c := range r.Cases {
					caseCPU, caseWall = caseCPU+c.CPUMS, caseWall+c.WallMS
				}
			}
			judged := time.Since(start)
			start = time.Now()
			perCaseCases := perCaseJobs(b, e, set.programs[:set.perCase])
			perCase := time.Since(start)

			n := float64(casesOf(set.programs))
			judgedRate, hostRate := n/judged.Seconds(), n/host.Seconds()
			perCaseRate := float64(perCaseCases) / perCase.Seconds()
			fmt.Printf("%s: judged %.1f cases/s (%s), one job a case %.1f cases/s (%d cases, %s), host %.1f cases/s (%s)\n",
				set.lang, judgedRate, judged.Round(time.Millisecond), perCaseRate, perCaseCases, perCase.Round(time.Millisecond),
				hostRate, host.Round(time.Millisecond))
			// What the judge cannot take off: the programs' own run time.
			// The per-case jobs pay it too, so it bounds their ratio.
			fmt.Printf("%s: a case's program used %.1f ms CPU, %.1f ms wall on average; judged, a slot spent %.1f ms a case in all\n",
				set.lang, float64(caseCPU)/n, float64(caseWall)/n, 2*judged.Seconds()*1000/n)
			fmt.Printf("%s judge/per_case_jobs %.2f (target >= 5)\n", set.lang, judgedRate/perCaseRate)
			fmt.Printf("%s judge_time/host_time %.2f (target <= 1.3)\n", set.lang, judged.Seconds()/host.Seconds())
			b.ReportMetric(judgedRate/perCaseRate, set.lang+"_judge/per_case")
			b.ReportMetric(judged.Seconds()/host.Seconds(), set.lang+"_judge/host")
			if set.lang == "cpp" {
				// The same programs again, the same tenant: each compile
				// comes from the worker's compile cache.
				start = time.Now()
				cached := 0
				for _, r := range judgeThrough(b, e, set.programs) {
					require.Equal(b, jobs.VerdictAccepted, r.Verdict, "%s: %s %+v", set.lang, r.Reason, r.Cases)
					if r.Compile != nil && r.Compile.Cached {
						cached++
					}
				}
				again := time.Since(start)
				fmt.Printf("%s: judged again, %d of %d compiles from the cache: %.1f cases/s (%s); judge_cached/judge %.2f, judge_cached/host_time %.2f\n",
					set.lang, cached, len(set.programs), n/again.Seconds(), again.Round(time.Millisecond), judged.Seconds()/again.Seconds(), again.Seconds()/host.Seconds())
				b.ReportMetric(judged.Seconds()/again.Seconds(), set.lang+"_judge_cached/judge")
			}
		}

		// Under a CPU hog on every core: no time_limit; reruns counted.
		hog := startHog(b, 2)
		results := judgeThrough(b, e, py)
		hog()
		tle, reruns := 0, 0
		for _, r := range results {
			if r.Verdict == jobs.VerdictTimeLimit {
				tle++
				b.Logf("time_limit under the hog: %s %+v", r.Reason, r.Cases)
			}
			for _, c := range r.Cases {
				if c.Rerun {
					reruns++
				}
			}
		}
		fmt.Printf("under a CPU hog on both cores: %d of %d problems time_limit (target 0), %d cases rerun\n", tle, len(results), reruns)
		if tle > 0 {
			b.Errorf("%d reference solutions got time_limit under the hog", tle)
		}
	}
}

func casesOf(ps []hostProgram) int {
	n := 0
	for _, p := range ps {
		n += len(p.tests)
	}
	return n
}

// benchPythonProblems returns up to n CodeContests problems whose Python
// reference the host judge accepts.
func benchPythonProblems(b *testing.B, n int, cpu time.Duration) []hostProgram {
	var all []hostProgram
	for _, p := range codeContests(b, 0) {
		all = append(all, hostProgram{lang: "python", code: p.Solutions[0].Code, tests: p.Tests, spec: p.Judge, cpu: cpu})
	}
	verdicts := hostJudgeAll(b, all, 2)
	var out []hostProgram
	for i, p := range all {
		if verdicts[i] == jobs.VerdictAccepted && len(out) < n {
			out = append(out, p)
		}
	}
	return out
}

// benchCppProblems generates n C++ problems: sum n numbers, times the
// problem's constant, modulo 1000003; ten cases each.
func benchCppProblems(n int) []hostProgram {
	rng := rand.New(rand.NewPCG(1, 2))
	var out []hostProgram
	for k := 1; k <= n; k++ {
		code := fmt.Sprintf("#include <iostream>\nint main(){long long n,x,s=0;std::cin>>n;while(n--){std::cin>>x;s=(s+x)%%1000003;}std::cout<<(s*%d)%%1000003<<\"\\n\";}\n", k)
		var tests []jobs.TestCase
		for range 10 {
			m := 1 + rng.IntN(1000)
			var in strings.Builder
			fmt.Fprintf(&in, "%d\n", m)
			s := int64(0)
			for range m {
				x := rng.Int64N(1_000_000_000)
				fmt.Fprintf(&in, "%d ", x)
				s = (s + x) % 1000003
			}
			in.WriteString("\n")
			tests = append(tests, jobs.TestCase{Stdin: in.String(), ExpectedStdout: fmt.Sprintf("%d\n", s*int64(k)%1000003)})
		}
		out = append(out, hostProgram{lang: "cpp", code: code, tests: tests, cpu: 2 * time.Second})
	}
	return out
}

// judgeThrough runs programs as judged jobs through the queue and returns
// their Results in order.
func judgeThrough(b *testing.B, e *env, programs []hostProgram) []jobs.Result {
	ids := make([]string, len(programs))
	for i, p := range programs {
		ids[i] = e.enqueue(jobs.Job{Lang: p.lang, Code: p.code, Tests: p.tests, Judge: p.spec, Limits: jobs.Limits{CPUMS: p.cpu.Milliseconds()}})
	}
	out := make([]jobs.Result, len(ids))
	for i, id := range ids {
		out[i] = e.wait(id, 20*time.Minute)
	}
	return out
}

// perCaseJobs runs every case of programs as a plain job of its own
// (the program compiled each time), compares each output like the judge,
// and returns how many cases ran.
func perCaseJobs(b *testing.B, e *env, programs []hostProgram) int {
	type sent struct {
		tc   jobs.TestCase
		spec *jobs.JudgeSpec
		id   string
	}
	var all []sent
	for _, p := range programs {
		for _, tc := range p.tests {
			id := e.enqueue(jobs.Job{Lang: p.lang, Code: p.code, Stdin: tc.Stdin, Limits: jobs.Limits{TimeoutMS: (2*p.cpu + time.Second).Milliseconds()}})
			all = append(all, sent{tc, p.spec, id})
		}
	}
	for _, s := range all {
		r := e.wait(s.id, 20*time.Minute)
		require.Equal(b, jobs.StatusSucceeded, r.Status, "%s", r.Reason)
		abs, rel := s.spec.Tolerances()
		ok, detail := judge.Compare(s.spec.Mode(), []byte(r.Stdout), []byte(s.tc.ExpectedStdout), abs, rel)
		require.True(b, ok, detail)
	}
	return len(all)
}

// startHog starts n host processes that spin, and returns their stop.
func startHog(b *testing.B, n int) func() {
	var cmds []*exec.Cmd
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(b, c.Start())
		cmds = append(cmds, c)
	}
	return func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
}
