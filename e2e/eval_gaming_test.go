package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/eval"
	"github.com/sandq/sandq/jobs"
)

// earlyExits are completions of each language's first HumanEvalPack task
// (has_close_elements) that exit with status 0 before the tests have run
// to the end: at module level, from a static initializer or a global
// constructor (before any test), or from the function under test (in the
// middle of the first test). Each names how it exits.
var earlyExits = map[string]map[string]string{
	"python": {
		"os._exit(0) at module level": "    return True\n\nimport os\nos._exit(0)\n",
		"sys.exit(0) in the function": "    import sys\n    sys.exit(0)\n",
	},
	"js": {
		"process.exit(0) at module level": "  return true\n}\nprocess.exit(0)\n",
		"process.exit(0) in the function": "  process.exit(0)\n}\n",
	},
	"java": {
		"System.exit(0) in a static initializer": "        return true;\n    }\n    static { System.exit(0); }\n}\n",
		"System.exit(0) in the method":           "        System.exit(0);\n        return true;\n    }\n}\n",
	},
	"cpp": {
		"exit(0) in a global constructor":  "    return true;\n}\nstruct SandqExitEarly { SandqExitEarly() { exit(0); } } sandq_exit_early;\n",
		"_exit(0) in a global initializer": "    return true;\n}\n#include <unistd.h>\nstatic int sandq_exit_early = (_exit(0), 0);\n",
	},
	// A Go completion cannot import os (it sits after the import blocks),
	// but the eval harness imports it as sandqos, and testing.Main exits 0
	// itself when it has no tests to run.
	"go": {
		"os.Exit(0) in init":         "    return true\n}\n\nfunc init() {\n    sandqos.Exit(0)\n}\n",
		"testing.Main in init":       "    return true\n}\n\nfunc init() {\n    testing.Main(func(string, string) (bool, error) { return true, nil }, nil, nil, nil)\n}\n",
		"os.Exit(0) in the function": "    sandqos.Exit(0)\n    return true\n}\n",
	},
	"rust": {
		"std::process::exit(0) in the function": "    std::process::exit(0);\n}\n",
		"std::process::exit(0) from .init_array, before main": "    true\n}\n\n#[used]\n#[link_section = \".init_array\"]\n" +
			"static SANDQ_EXIT_EARLY: extern \"C\" fn() = {\n    extern \"C\" fn exit_early() { std::process::exit(0) }\n    exit_early\n};\n",
	},
}

// Issue 13 item 9: in every language, a completion that exits 0 before the
// tests have run to the end is judged failed ("tests did not run to the
// end"), counted in n, while the canonical solution of the same task
// passes and its buggy solution fails its tests. Every job runs through
// the queue, a real worker and Docker.
func TestEvalGamingByExitingEarly(t *testing.T) {
	data := dataDir(t)
	e := newEnv(t)
	w := e.startWorker("--concurrency", "4", "--warm", "")
	defer func() {
		w.signal(syscall.SIGTERM)
		require.NoError(t, w.wait(time.Minute))
	}()
	for _, lang := range []string{"python", "js", "java", "cpp", "go", "rust"} {
		t.Run(lang, func(t *testing.T) {
			problems := filepath.Join(data, "humanevalpack", lang+".jsonl.gz")
			ps, err := eval.LoadProblems(problems)
			require.NoError(t, err)
			requireImage(t, string(ps.Lang))
			p := ps.List[0]

			// The samples: the canonical solution, the buggy one, then
			// the early exits.
			dir := t.TempDir()
			completions := []string{p.CanonicalSolution, p.BuggySolution}
			how := map[string]string{}
			for name, c := range earlyExits[lang] {
				completions = append(completions, c)
				how[c] = name
			}
			var in bytes.Buffer
			for _, c := range completions {
				b, err := json.Marshal(eval.Sample{TaskID: p.TaskID, Completion: c})
				require.NoError(t, err)
				in.Write(append(b, '\n'))
			}
			samples := filepath.Join(dir, "samples.jsonl")
			require.NoError(t, os.WriteFile(samples, in.Bytes(), 0o644))

			out := filepath.Join(dir, "results.jsonl")
			start := time.Now()
			cmd := e.enqueueCmd("eval", "--problems", problems, "--samples", samples, "--k", "1", "--json", "--out", out, "--progress", "none")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), stderr.String())
			var sum eval.Summary
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum), stdout.String())

			byCompletion := map[string]eval.SampleResult{}
			for _, line := range readLines(t, out) {
				var r eval.SampleResult
				require.NoError(t, json.Unmarshal([]byte(line), &r))
				byCompletion[r.Completion] = r
			}
			require.Len(t, byCompletion, len(completions))
			canonical, buggy := byCompletion[p.CanonicalSolution], byCompletion[p.BuggySolution]
			require.Equal(t, "passed", canonical.Result, "canonical solution")
			require.True(t, canonical.Passed)
			require.False(t, buggy.Passed, "buggy solution")
			require.True(t, strings.HasPrefix(buggy.Result, "failed: "), buggy.Result)
			require.NotEqual(t, "failed: "+eval.NotToTheEnd, buggy.Result, "the buggy solution fails its tests, it does not stop them")
			for c, name := range how {
				r := byCompletion[c]
				t.Logf("%s, %s: %s (job %s)", p.TaskID, name, r.Result, r.JobID)
				// The program exited 0: without the marker it would have passed.
				require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", name, r.Result)
				require.Equal(t, "failed: tests did not run to the end", r.Result, name)
				require.False(t, r.Passed, name)
				require.False(t, r.Excluded, name)
			}
			// Every sample counts in n: pass@1 is 1 of them all.
			require.Equal(t, len(completions), sum.Samples)
			require.Equal(t, 1, sum.Passed)
			require.Equal(t, len(completions)-1, sum.Failed)
			require.Zero(t, sum.Excluded)
			require.InDelta(t, 1/float64(len(completions)), sum.PassAt["pass@1"], 1e-9)
			t.Logf("%s: canonical passed, buggy %q, %d early exits failed; %s", lang, buggy.Result, len(how), time.Since(start).Round(time.Millisecond))
		})
	}
}
