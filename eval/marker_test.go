package eval

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/batch"
)

// Each assembly draws a nonce; the job's ID, derived from ForID, does not
// depend on it, so the same sample is the same job at every run.
func TestAssembleDrawsANonceOutsideTheID(t *testing.T) {
	t.Parallel()
	p := Problem{TaskID: "HumanEval/0", Prompt: "def f():\n", Test: "def check(c):\n    assert c() == 1\n", EntryPoint: "f"}
	a, err := Assemble(p, "    return 1\n")
	require.NoError(t, err)
	b, err := Assemble(p, "    return 1\n")
	require.NoError(t, err)
	re := regexp.MustCompile(`^sandq-eval-end-[0-9a-f]{32}$`)
	require.Regexp(t, re, a.Marker)
	require.Regexp(t, re, b.Marker)
	require.NotEqual(t, a.Marker, b.Marker)
	require.NotEqual(t, a.Code, b.Code)
	require.Contains(t, a.Code, a.Marker)

	ja, jb := a.Job(), b.Job()
	require.Equal(t, map[string]string{MarkerTag: a.Marker}, ja.Tags)
	ja.Tags["task_id"], jb.Tags["task_id"] = "HumanEval/0", "HumanEval/0"
	require.Equal(t, ForID(ja), ForID(jb))
	require.NotContains(t, ForID(ja).Code, a.Marker)
	require.Equal(t, map[string]string{"task_id": "HumanEval/0"}, ForID(ja).Tags)
	// ForID leaves the job alone.
	require.Contains(t, ja.Code, a.Marker)
	require.Equal(t, a.Marker, ja.Tags[MarkerTag])
	require.Equal(t, batch.NewIDs("").Next(ForID(ja)), batch.NewIDs("").Next(ForID(jb)))
	require.NotEqual(t, batch.NewIDs("").Next(ja), batch.NewIDs("").Next(jb))

	// Another completion is another job.
	c, err := Assemble(p, "    return 2\n")
	require.NoError(t, err)
	require.NotEqual(t, ForID(ja).Code, ForID(c.Job()).Code)

	// A job without the tag is its own ID content.
	plain := ja
	plain.Tags = map[string]string{"x": "y"}
	require.Equal(t, plain, ForID(plain))

	// C++ names the test's main after the nonce, too.
	cp := Problem{TaskID: "CPP/0", Prompt: "int f(){\n", Test: "int main(){ assert(f() == 1); }\n", EntryPoint: "f"}
	x, err := Assemble(cp, "return 1;}\n")
	require.NoError(t, err)
	y, err := Assemble(cp, "return 1;}\n")
	require.NoError(t, err)
	require.Equal(t, ForID(x.Job()), ForID(y.Job()))
	require.NotContains(t, ForID(x.Job()).Code, strings.TrimPrefix(x.Marker, markerPrefix))
}

// before requires that, in code, each of the strings comes after the one
// before it (the first occurrence of the first, then the first of each
// next one after that).
func before(t *testing.T, code string, parts ...string) {
	t.Helper()
	at := 0
	for _, p := range parts {
		i := strings.Index(code[at:], p)
		require.GreaterOrEqual(t, i, 0, "%q is not after the parts before it in:\n%s", p, code)
		at += i + len(p)
	}
}

// A completion that exits with status 0 before the tests have run gets a
// program whose marker print comes only after them: in each language, the
// program the sample runs prints the marker after its last test, as its
// last statement, and the completion's exit comes before any test. The
// e2e tests (e2e/eval_gaming_test.go) run these programs.
func TestAssembleEarlyExitComesBeforeTheMarker(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		lang, completion string
		// order lists fragments of the program in the order they must
		// come: the sample's exit, the tests, the marker's print.
		order []string
		// suffix is how the program ends: nothing runs after the marker.
		suffix string
	}{
		{
			lang:       "python",
			completion: "    return True\n\nimport os\nos._exit(0)\n",
			order:      []string{"os._exit(0)", "check(has_close_elements)", `__import__("sys").stdout.write("\n` + testMarker + `\n")`},
			suffix:     pythonEndText,
		},
		{
			lang:       "js",
			completion: "  return true\n}\nprocess.exit(0)\n",
			order:      []string{"process.exit(0)", "testHasCloseElements()", `;globalThis.process.stdout.write("\n` + testMarker + `\n")`},
			suffix:     jsEndText,
		},
		{
			// The static initializer runs when the test first uses
			// Solution, inside the test's main, which the new main calls
			// before it prints the marker.
			lang:       "java",
			completion: "        return true;\n    }\n    static { System.exit(0); }\n}\n",
			order: []string{"static { System.exit(0); }", "public class Main {",
				"public static void main(String[] args) throws Throwable {\n        sandqTestMain(args);\n        System.out.print(\"\\n" + testMarker + "\\n\");",
				"public static void sandqTestMain(String[] args) {\n        Solution s = new Solution();", "throw new AssertionError();"},
		},
		{
			// The global constructor runs before main; main runs the
			// test's asserts, then prints the marker.
			lang:       "cpp",
			completion: "    return true;\n}\nstruct SandqExitEarly { SandqExitEarly() { exit(0); } } sandq_exit_early;\n",
			order: []string{"int main() {\n    int status = sandq_tests_" + testNonce + "();\n    if (status != 0) return status;\n",
				`fputs("\n` + testMarker + `\n", stdout);`, "// End of sandq's main.",
				"{ exit(0); } } sandq_exit_early;", "int sandq_tests_" + testNonce + "(){", "assert (has_close_elements(a, 0.3)==true);"},
			suffix: "    return 0;\n}\n",
		},
		{
			// init runs before main; the marker is printed when the last
			// test has finished, all passed, in place of testing.Main's
			// own exit.
			lang:       "go",
			completion: "    return true\n}\n\nfunc init() {\n    sandqos.Exit(0)\n}\n",
			order: []string{"func init() {\n    sandqos.Exit(0)\n}", "func TestHasCloseElements(t *testing.T) {",
				"if sandqEvalEnd.finished == sandqEvalTests && sandqEvalEnd.passed == sandqEvalTests {\n\t\t\t\tsandqos.Stdout.WriteString(\"\\n" + testMarker + "\\n\")\n\t\t\t\tsandqos.Exit(0)",
				"\t\ttest(t)\n\t\treturned = true\n", "{Name: \"TestHasCloseElements\", F: sandqEvalTest(TestHasCloseElements)},"},
			suffix: "}, nil, nil)\n}\n",
		},
		{
			lang:       "rust",
			completion: "    std::process::exit(0);\n}\n",
			order:      []string{"std::process::exit(0);", "pub fn test_has_close_elements()", "fn main() {\n    tests::test_has_close_elements();\n" + rustEndText},
			suffix:     rustEndText + "}\n",
		},
	} {
		t.Run(tt.lang, func(t *testing.T) {
			t.Parallel()
			ps := loadPack(t, tt.lang)
			prog := assemble(t, ps.List[0], tt.completion)
			require.Contains(t, prog.Code, tt.completion)
			before(t, prog.Code, tt.order...)
			require.True(t, strings.HasSuffix(prog.Code, tt.suffix), "ends with:\n%s", prog.Code[max(0, len(prog.Code)-300):])
			// The marker is printed once, and is in no other place than
			// its print.
			require.Equal(t, 1, strings.Count(prog.Code, testMarker))
			require.Equal(t, testMarker, prog.Job().Tags[MarkerTag])
		})
	}
}
