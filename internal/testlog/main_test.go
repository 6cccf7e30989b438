package main

import (
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
		`{"Action":"pass","Package":"p/a","Test":"TestOK","Elapsed":0.1}`,
		`{"Action":"run","Package":"p/a","Test":"TestData"}`,
		`{"Action":"output","Package":"p/a","Test":"TestData","Output":"=== RUN   TestData\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestData","Output":"    x_test.go:9: ../shared/data is absent\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestData","Output":"--- SKIP: TestData (0.00s)\n"}`,
		`{"Action":"skip","Package":"p/a","Test":"TestData"}`,
		`{"Action":"pass","Package":"p/a","Elapsed":1.5}`,
		`{"Action":"start","Package":"p/b"}`,
		`{"Action":"output","Package":"p/b","Test":"TestBad","Output":"    b_test.go:3: want 1, got 2\n"}`,
		`{"Action":"fail","Package":"p/b","Test":"TestBad"}`,
		`{"Action":"fail","Package":"p/b","Elapsed":0.2}`,
		`{"Action":"start","Package":"p/c"}`,
		`{"Action":"output","Package":"p/c","Test":"TestHang","Output":"panic: test timed out\n"}`,
	}, "\n")
	var out strings.Builder
	require.Equal(t, 1, render(strings.NewReader(in), &out))
	got := out.String()
	require.Contains(t, got, "ok  \tp/a\t1.5s\n")
	require.Contains(t, got, "want 1, got 2")
	require.Contains(t, got, "FAIL\tp/b\t0.2s\n")
	require.Contains(t, got, "FAIL\tp/c\t(no result: the test binary died)\npanic: test timed out\n")
	require.Contains(t, got, "1 tests skipped:\n  p/a TestData: x_test.go:9: ../shared/data is absent\n")
	require.Contains(t, got, "1 tests failed:\n  p/b TestBad\n")

	out.Reset()
	require.Equal(t, 0, render(strings.NewReader(`{"Action":"start","Package":"p/a"}`+"\n"+`{"Action":"pass","Package":"p/a","Elapsed":1}`), &out))
	require.Contains(t, out.String(), "0 tests skipped\n")
}
