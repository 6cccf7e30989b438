package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRender(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`{"Action":"start","Package":"p/a"}`,
		`{"Action":"run","Package":"p/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"p/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"pass","Package":"p/a","Test":"TestOK/sub","Elapsed":0.05}`,
		`{"Action":"pass","Package":"p/a","Test":"TestOK","Elapsed":0.1}`,
		`{"Action":"run","Package":"p/a","Test":"TestData"}`,
		`{"Action":"output","Package":"p/a","Test":"TestData","Output":"=== RUN   TestData\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestData","Output":"    x_test.go:9: ../shared/data is absent\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestData","Output":"--- SKIP: TestData (0.00s)\n"}`,
		`{"Action":"skip","Package":"p/a","Test":"TestData"}`,
		`{"Action":"pass","Package":"p/a","Elapsed":1.5}`,
		`{"Action":"start","Package":"p/b"}`,
		`{"Action":"output","Package":"p/b","Test":"TestBad","Output":"    b_test.go:3: want 1, got 2\n"}`,
		`{"Action":"fail","Package":"p/b","Test":"TestBad","Elapsed":0.3}`,
		`{"Action":"fail","Package":"p/b","Elapsed":0.2}`,
		`{"Action":"start","Package":"p/c"}`,
		`{"Action":"output","Package":"p/c","Test":"TestHang","Output":"panic: test timed out\n"}`,
	}, "\n")
	var out strings.Builder
	require.Equal(t, 1, render(strings.NewReader(in), &out, selection{}))
	got := out.String()
	require.Contains(t, got, "ok  \tp/a\t1.5s\n")
	require.Contains(t, got, "want 1, got 2")
	require.Contains(t, got, "FAIL\tp/b\t0.2s\n")
	require.Contains(t, got, "FAIL\tp/c\t(no result: the test binary died)\npanic: test timed out\n")
	require.Contains(t, got, "1 tests skipped:\n  p/a TestData: x_test.go:9: ../shared/data is absent\n")
	require.Contains(t, got, "1 tests failed:\n  p/b TestBad\n")
	require.Contains(t, got, "\nslowest tests:\n      0.3s p/b TestBad\n      0.1s p/a TestOK\n\n")
	require.True(t, strings.HasSuffix(got, "\ntests: 2 passed, 1 failed, 1 skipped\n"), got)

	out.Reset()
	in = `{"Action":"start","Package":"p/a"}` + "\n" +
		`{"Action":"pass","Package":"p/a","Test":"TestOK"}` + "\n" +
		`{"Action":"pass","Package":"p/a","Elapsed":1}`
	require.Equal(t, 0, render(strings.NewReader(in), &out, selection{}))
	require.Contains(t, out.String(), "0 tests skipped\n")
}

// TestRecorded renders streams recorded from real `go test -json` runs of
// the module in testdata/fixture, each recorded there as
//
//	go test -json ARGS > ../NAME.json 2>&1
//
// with the ARGS of its case.
func TestRecorded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		args   string // what the stream was recorded with
		sel    selection
		status int
		// want are lines (or parts of lines) of the output, in order.
		want    []string
		notWant []string
	}{
		{
			// The compiler's messages reach the terminal, before the
			// package's FAIL line, and the end names the package.
			name: "build_failed", args: "./broken ./pass", sel: selection{pkg: "./broken ./pass"}, status: 1,
			want: []string{
				"# example.com/fixture/broken [example.com/fixture/broken.test]\n",
				`broken/broken_test.go:6:14: cannot use "three" (untyped string constant) as int value in variable declaration` + "\n",
				"FAIL\texample.com/fixture/broken [build failed]\n",
				"ok  \texample.com/fixture/pass\t0.0s\n",
				"1 packages did not build (the compiler's messages are above):\n  example.com/fixture/broken\n",
			},
		},
		{
			name: "run_typo", args: "-run NoSuchTest ./pass ./dataskip", sel: selection{run: "NoSuchTest", pkg: "./pass ./dataskip"}, status: 1,
			want: []string{
				"ok  \texample.com/fixture/pass\t0.0s [no tests to run]\n",
				"FAIL: RUN=NoSuchTest matched no test in ./pass ./dataskip (a run that tests nothing fails)\n",
				"tests: 0 passed, 0 failed, 0 skipped\n",
			},
			notWant: []string{"testing: warning"},
		},
		{
			// TestSub runs, but none of the subtests -run names: go test
			// says there were no tests to run.
			name: "subtest_typo", args: "-run TestSub/three ./pass", sel: selection{run: "TestSub/three", pkg: "./pass"}, status: 1,
			want: []string{"FAIL: RUN=TestSub/three matched no test in ./pass"},
		},
		{
			// The same under a parallel test, to which test2json gives the
			// warning.
			name: "parallel_subtest_typo", args: "-run TestPar/three ./parallel", sel: selection{run: "TestPar/three", pkg: "./parallel"}, status: 1,
			want: []string{"ok  \texample.com/fixture/parallel\t0.0s [no tests to run]\n", "FAIL: RUN=TestPar/three matched no test in ./parallel"},
		},
		{
			name: "subtest", args: "-run TestSub/one ./pass", sel: selection{run: "TestSub/one", pkg: "./pass"}, status: 0,
			want:    []string{"ok  \texample.com/fixture/pass\t0.0s\n", "tests: 2 passed, 0 failed, 0 skipped\n"},
			notWant: []string{"FAIL"},
		},
		{
			name: "no_test_files", args: "./notests", sel: selection{pkg: "./notests"}, status: 1,
			want: []string{"?   \texample.com/fixture/notests\t[no test files]\n", "FAIL: PKG=./notests has no test"},
		},
		{
			// The one skip allowed, beside tests that ran: a green run
			// that lists it.
			name: "data_skip", args: "./pass ./dataskip", sel: selection{pkg: "./pass ./dataskip"}, status: 0,
			want: []string{
				"1 tests skipped:\n  example.com/fixture/dataskip TestData: dataskip_test.go:6: benchmark data not found at /nowhere (../shared/data from the repository root)\n",
				"tests: 4 passed, 0 failed, 1 skipped\n",
			},
			notWant: []string{"FAIL"},
		},
		{
			name: "only_skipped", args: "-run TestData ./dataskip", sel: selection{run: "TestData", pkg: "./dataskip"}, status: 1,
			want: []string{"FAIL: RUN=TestData ran no test in ./dataskip: every test it matched skipped (1)"},
		},
		{
			name: "bad_skip", args: "./pass ./badskip", sel: selection{pkg: "./pass ./badskip"}, status: 1,
			want: []string{
				"ok  \texample.com/fixture/badskip\t0.0s\n",
				`1 tests skipped for another reason than missing benchmark data (their message lacks "../shared/data")`,
				"\n  example.com/fixture/badskip TestNeedsDocker: badskip_test.go:5: docker is not running\n",
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := os.Open(filepath.Join("testdata", tt.name+".json"))
			require.NoError(t, err)
			defer f.Close()
			var out strings.Builder
			status := render(f, &out, tt.sel)
			got := out.String()
			require.Equal(t, tt.status, status, "recorded with go test -json %s; output:\n%s", tt.args, got)
			rest := got
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				require.GreaterOrEqual(t, i, 0, "%q missing, or out of order, in:\n%s", w, got)
				rest = rest[i+len(w):]
			}
			for _, w := range tt.notWant {
				require.NotContains(t, got, w)
			}
		})
	}
}
