package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/eval"
	"github.com/sandq/sandq/jobs"
)

// The judge's problem for the verdict tests: read n, then n integers;
// print their sum.
var sumTests = []jobs.TestCase{
	{Name: "small", Stdin: "3\n1 2 3\n", ExpectedStdout: "6\n"},
	{Name: "negative", Stdin: "2\n-5 2\n", ExpectedStdout: "-3\n"},
	{Name: "big", Stdin: "2\n2000000000 2000000000\n", ExpectedStdout: "4000000000\n"},
}

// sumPrograms are a correct program and its twins, each failing one way,
// per language: wrong answer, CPU time, memory, runtime error, output.
var sumPrograms = map[string]map[jobs.Verdict]string{
	"python": {
		jobs.VerdictAccepted:     "n = int(input())\nprint(sum(map(int, input().split())))\n",
		jobs.VerdictWrongAnswer:  "n = int(input())\nprint(sum(map(int, input().split())) + 1)\n",
		jobs.VerdictTimeLimit:    "n = int(input())\nwhile True:\n    n += 1\n",
		jobs.VerdictMemoryLimit:  "n = int(input())\nx = [bytearray(1 << 20) for _ in range(4096)]\nprint(len(x))\n",
		jobs.VerdictRuntimeError: "n = int(input())\nraise ValueError('boom')\n",
		jobs.VerdictOutputLimit:  "n = int(input())\nimport sys\nsys.stdout.write('x' * (1 << 20))\n",
	},
	"cpp": {
		jobs.VerdictAccepted:     "#include <iostream>\nint main(){long long n,s=0,x;std::cin>>n;while(n--){std::cin>>x;s+=x;}std::cout<<s<<\"\\n\";}\n",
		jobs.VerdictWrongAnswer:  "#include <iostream>\nint main(){int n,s=0,x;std::cin>>n;while(n--){std::cin>>x;s+=x;}std::cout<<s<<\"\\n\";}\n", // int overflow
		jobs.VerdictTimeLimit:    "int main(){volatile unsigned long x=0;for(;;)x++;}\n",
		jobs.VerdictMemoryLimit:  "#include <vector>\n#include <cstdio>\nint main(){std::vector<std::vector<char>> v;for(;;)v.emplace_back(1<<20,1);}\n",
		jobs.VerdictRuntimeError: "int main(){int *p=nullptr;return *p;}\n",
		jobs.VerdictOutputLimit:  "#include <cstdio>\nint main(){for(int i=0;i<(1<<20);i++)putchar('x');}\n",
	},
	"java": {
		jobs.VerdictAccepted:     "import java.util.*;\npublic class Main{public static void main(String[] a){Scanner s=new Scanner(System.in);int n=s.nextInt();long t=0;while(n-->0)t+=s.nextLong();System.out.println(t);}}\n",
		jobs.VerdictWrongAnswer:  "import java.util.*;\npublic class Main{public static void main(String[] a){Scanner s=new Scanner(System.in);int n=s.nextInt();long t=0;while(n-->0)t+=s.nextLong();System.out.println(t-1);}}\n",
		jobs.VerdictTimeLimit:    "public class Main{public static void main(String[] a){long x=0;while(true){x++;if(x==-1)System.out.println(x);}}}\n",
		jobs.VerdictMemoryLimit:  "import java.util.*;\npublic class Main{public static void main(String[] a){List<long[]> l=new ArrayList<>();while(true)l.add(new long[1<<17]);}}\n",
		jobs.VerdictRuntimeError: "public class Main{public static void main(String[] a){throw new RuntimeException(\"boom\");}}\n",
		jobs.VerdictOutputLimit:  "public class Main{public static void main(String[] a){StringBuilder b=new StringBuilder();for(int i=0;i<(1<<20);i++)b.append('x');System.out.print(b);}}\n",
	},
}

// TestJudgeVerdicts: a correct program is accepted, and each of its twins
// gets the verdict it deserves, in Python, C++ and Java, through the
// queue and the real containers; every case is a fresh process that
// cannot leave a file for the next.
func TestJudgeVerdicts(t *testing.T) {
	t.Parallel()
	for lang := range sumPrograms {
		requireImage(t, lang)
	}
	e := newEnv(t)
	e.startWorker("--concurrency", "2")
	type sent struct {
		lang string
		want jobs.Verdict
		id   string
	}
	var all []sent
	for lang, programs := range sumPrograms {
		for want, code := range programs {
			limits := jobs.Limits{CPUMS: 2000, MemoryMB: 256, OutputBytes: 64 << 10}
			if lang == "java" {
				limits.MemoryMB, limits.CPUMS = 512, 4000 // the JVM's own threads and heap
			}
			j := jobs.Job{Lang: lang, Code: code, Tests: sumTests, Limits: limits}
			all = append(all, sent{lang, want, e.enqueue(j)})
		}
	}
	for _, s := range all {
		r := e.wait(s.id, 5*time.Minute)
		msg := fmt.Sprintf("%s %s: %s %s %s %+v", s.lang, s.want, r.Status, r.Verdict, r.Reason, r.Cases)
		require.Equal(t, s.want, r.Verdict, msg)
		require.Equal(t, s.want.Status(), r.Status, msg)
		require.Len(t, r.Cases, len(sumTests), msg)
		require.NotNil(t, r.Provenance, msg)
		require.NotEmpty(t, r.Provenance.Image, msg)
		if s.want == jobs.VerdictAccepted {
			require.Equal(t, 1.0, *r.Score, msg)
			for _, c := range r.Cases {
				require.Equal(t, jobs.VerdictAccepted, c.Verdict, msg)
				require.Positive(t, c.WallMS+c.CPUMS, msg)
			}
			continue
		}
		// The first case that fails has the verdict; the rest are skipped
		// (stop_on_first_failure). The C++ twin with an int overflows only
		// on the big case.
		first := slices.IndexFunc(r.Cases, func(c jobs.CaseResult) bool { return c.Verdict != jobs.VerdictAccepted })
		require.GreaterOrEqual(t, first, 0, msg)
		if s.want == jobs.VerdictWrongAnswer && s.lang == "cpp" {
			require.Equal(t, 2, first, "int is enough for the small cases: %s", msg)
		} else {
			require.Equal(t, 0, first, "the first case fails: %s", msg)
		}
		require.Equal(t, s.want, r.Cases[first].Verdict, msg)
		for _, c := range r.Cases[first+1:] {
			require.Equal(t, jobs.VerdictSkipped, c.Verdict, "stop_on_first_failure: %s", msg)
		}
	}

	// A case cannot leave a file for the next, in /tmp or the work dir,
	// nor a process: each case sees a fresh container.
	probe := "import os, subprocess\n" +
		"print(os.path.exists('/tmp/mark'), os.access('.', os.W_OK))\n" +
		"open('/tmp/mark', 'w').write('x')\n" +
		"try:\n    open('left.txt', 'w')\nexcept OSError:\n    pass\n" +
		"subprocess.Popen(['sleep', '60'])\n"
	tc := jobs.TestCase{Stdin: "", ExpectedStdout: "False False\n"}
	r := e.wait(e.enqueue(jobs.Job{Lang: "python", Code: probe, Tests: []jobs.TestCase{tc, tc, tc}}), 2*time.Minute)
	require.Equal(t, jobs.VerdictAccepted, r.Verdict, "%s %+v", r.Reason, r.Cases)
}

// TestJudgeChecker: a problem with several valid answers is accepted only
// through its checker, which runs in a container of its own; a checker
// that crashes is checker_error, not the contestant's wrong answer.
func TestJudgeChecker(t *testing.T) {
	t.Parallel()
	requireImage(t, "python")
	requireImage(t, "cpp")
	e := newEnv(t)
	e.startWorker("--concurrency", "2")
	// Print two positive integers that sum to n.
	tests := []jobs.TestCase{{Stdin: "5\n", ExpectedStdout: "1 4\n"}, {Stdin: "10\n", ExpectedStdout: "1 9\n"}}
	contestant := "#include <iostream>\nint main(){int n;std::cin>>n;std::cout<<n/2<<' '<<n-n/2<<\"\\n\";}\n"
	checker := `import sys
n = int(open(sys.argv[1]).read())
try:
    a, b = map(int, open(sys.argv[2]).read().split())
except ValueError:
    print("not two integers"); sys.exit(1)
if a > 0 and b > 0 and a + b == n:
    print("ok"); sys.exit(0)
print(f"{a} + {b} != {n}"); sys.exit(1)
`
	withChecker := func(code string) *jobs.JudgeSpec {
		return &jobs.JudgeSpec{Checker: &jobs.Checker{Lang: "python", Code: code}}
	}
	plain := e.wait(e.enqueue(jobs.Job{Lang: "cpp", Code: contestant, Tests: tests}), 3*time.Minute)
	require.Equal(t, jobs.VerdictWrongAnswer, plain.Verdict, "another valid answer is not the expected output: %+v", plain.Cases)

	checked := e.wait(e.enqueue(jobs.Job{Lang: "cpp", Code: contestant, Tests: tests, Judge: withChecker(checker)}), 3*time.Minute)
	require.Equal(t, jobs.VerdictAccepted, checked.Verdict, "%s %+v", checked.Reason, checked.Cases)
	require.Equal(t, "ok\n", checked.Cases[0].Checker)

	wrong := e.wait(e.enqueue(jobs.Job{Lang: "cpp", Code: strings.Replace(contestant, "n-n/2", "n-n/2+1", 1), Tests: tests,
		Judge: withChecker(checker)}), 3*time.Minute)
	require.Equal(t, jobs.VerdictWrongAnswer, wrong.Verdict, "%+v", wrong.Cases)
	require.Contains(t, wrong.Cases[0].Checker, "!= 5")

	crash := e.wait(e.enqueue(jobs.Job{Lang: "cpp", Code: contestant, Tests: tests,
		Judge: withChecker("import sys\nsys.exit(open(sys.argv[9]).read())\n")}), 3*time.Minute)
	require.Equal(t, jobs.VerdictCheckerError, crash.Verdict, "%+v", crash.Cases)
	require.Equal(t, jobs.StatusFailed, crash.Status)

	broken := e.wait(e.enqueue(jobs.Job{Lang: "cpp", Code: contestant, Tests: tests,
		Judge: &jobs.JudgeSpec{Checker: &jobs.Checker{Lang: "cpp", Code: "int main( {"}}}), 3*time.Minute)
	require.Equal(t, jobs.VerdictCheckerError, broken.Verdict, "a checker that does not compile: %+v", broken.Cases)
	require.Contains(t, broken.Cases[0].Detail, "the checker did not compile")
}

// TestJudgeCodeContests: the shared CodeContests sample's Python reference
// solutions, judged through the queue, against the same solutions judged
// by the host judge (judge_host_test.go): every solution the host accepts
// is accepted by sandq. The host's failures are the dataset's own defects
// (tests the reference solution fails, problems needing a checker the
// dataset lacks; see ../shared/data/README.md) and are listed.
// SANDQ_JUDGE_PROBLEMS sets how many problems (default 60; 0: all 300,
// as `make judge-sample` runs it).
func TestJudgeCodeContests(t *testing.T) {
	t.Parallel()
	requireImage(t, "python")
	n := 60
	if v, ok := os.LookupEnv("SANDQ_JUDGE_PROBLEMS"); ok {
		n, _ = strconv.Atoi(v)
	}
	problems := codeContests(t, n)
	const cpu = 5 * time.Second
	var programs []hostProgram
	for _, p := range problems {
		require.NotEmpty(t, p.Solutions, p.TaskID)
		programs = append(programs, hostProgram{lang: "python", code: p.Solutions[0].Code, tests: p.Tests, spec: p.Judge, cpu: cpu})
	}
	host := hostJudgeAll(t, programs, 2)

	e := newEnv(t)
	e.startWorker("--concurrency", "2")
	ids := make([]string, len(problems))
	for i, p := range problems {
		ids[i] = e.enqueue(p.Job(eval.Sample{TaskID: p.TaskID, Completion: p.Solutions[0].Code, Lang: p.Solutions[0].Lang},
			eval.JudgeDefaults{Limits: jobs.Limits{CPUMS: cpu.Milliseconds()}}))
	}
	accepted, defects := 0, 0
	for i, p := range problems {
		r := e.wait(ids[i], 10*time.Minute)
		if host[i] != jobs.VerdictAccepted {
			defects++
			t.Logf("dataset defect: %s: the reference is %s on the host, %s in sandq", p.TaskID, host[i], r.Verdict)
			continue
		}
		require.Equal(t, jobs.VerdictAccepted, r.Verdict, "%s: accepted on the host; in sandq %s: %s (%+v)", p.TaskID, r.Status, r.Reason, r.Cases)
		accepted++
	}
	t.Logf("%d problems: %d references accepted, as on the host; %d dataset defects", len(problems), accepted, defects)
	require.Positive(t, accepted)
}

// TestJudgeCompileCache: a judged job whose compile is identical to an
// earlier one of the same tenant runs the program that compile left (its
// work dir, modes kept: C++'s binary, Java's several class files) with the
// same verdicts, and says so (compile.cached); another tenant's identical
// job, a changed source and a failed compile compile afresh.
func TestJudgeCompileCache(t *testing.T) {
	t.Parallel()
	requireImage(t, "cpp")
	requireImage(t, "java")
	e := newEnv(t)
	e.startWorker("--concurrency", "2")
	judged := func(tenant, lang, code string) jobs.Result {
		t.Helper()
		r := e.wait(e.enqueue(jobs.Job{Lang: lang, Code: code, Tests: sumTests, Tenant: tenant}), 3*time.Minute)
		require.NotNil(t, r.Compile, "%s: %s", r.Status, r.Reason)
		return r
	}
	verdicts := func(r jobs.Result) []jobs.Verdict {
		var out []jobs.Verdict
		for _, c := range r.Cases {
			out = append(out, c.Verdict)
		}
		return out
	}
	// Java: an anonymous class and a nested interface, three class files.
	java := "import java.util.*;\npublic class Main{interface Op{long ap(long a,long b);}\n" +
		"public static void main(String[] a){Op add=new Op(){public long ap(long x,long y){return x+y;}};" +
		"Scanner s=new Scanner(System.in);int n=s.nextInt();long t=0;while(n-->0)t=add.ap(t,s.nextLong());System.out.println(t);}}\n"
	for _, tt := range []struct{ lang, code, wrong string }{
		{"cpp", sumPrograms["cpp"][jobs.VerdictAccepted], sumPrograms["cpp"][jobs.VerdictWrongAnswer]},
		{"java", java, sumPrograms["java"][jobs.VerdictWrongAnswer]},
	} {
		t.Run(tt.lang, func(t *testing.T) {
			tenant := "cache-" + tt.lang
			first := judged(tenant, tt.lang, tt.code)
			require.Equal(t, jobs.VerdictAccepted, first.Verdict, "%s %+v", first.Reason, first.Cases)
			require.False(t, first.Compile.Cached)

			again := judged(tenant, tt.lang, tt.code)
			require.Equal(t, jobs.VerdictAccepted, again.Verdict, "the cached program runs: %s %+v", again.Reason, again.Cases)
			require.True(t, again.Compile.Cached, "an identical compile of the same tenant is reused")
			require.Equal(t, verdicts(first), verdicts(again))
			require.Equal(t, first.Compile.Usage, again.Compile.Usage, "the compile's record is the first's")

			other := judged(tenant+"-other", tt.lang, tt.code)
			require.Equal(t, jobs.VerdictAccepted, other.Verdict)
			require.False(t, other.Compile.Cached, "another tenant never gets the entry")

			wrong := judged(tenant, tt.lang, tt.wrong)
			require.Equal(t, jobs.VerdictWrongAnswer, wrong.Verdict, "%+v", wrong.Cases)
			require.False(t, wrong.Compile.Cached)
		})
	}
	t.Run("CompileError", func(t *testing.T) {
		for range 2 {
			r := judged("cache-broken", "cpp", "int main( {")
			require.Equal(t, jobs.VerdictCompileError, r.Verdict)
			require.False(t, r.Compile.Cached, "a failed compile is never kept")
		}
	})
}
