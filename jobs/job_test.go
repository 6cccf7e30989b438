package jobs_test

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestStatusFinal(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		status jobs.Status
		final  bool
	}{
		{jobs.StatusSucceeded, true},
		{jobs.StatusFailed, true},
		{jobs.StatusCompileError, true},
		{jobs.StatusTimeout, true},
		{jobs.StatusOOM, true},
		{jobs.StatusOutputLimit, true},
		{jobs.StatusRejected, true},
		{jobs.StatusCanceled, true},
		{jobs.StatusInternalError, true},
		{jobs.StatusQueued, false},
		{jobs.StatusRunning, false},
		{"", false},
		{"bogus", false},
	} {
		require.Equal(t, tt.final, tt.status.Final(), "status %q", tt.status)
	}
}

func TestNewID(t *testing.T) {
	t.Parallel()

	a, b := jobs.NewID(), jobs.NewID()
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), a)
	require.NotEqual(t, a, b)
	require.True(t, jobs.ValidID(a))
}

func TestServerQueues(t *testing.T) {
	t.Parallel()

	require.Equal(t, map[string]int{"critical": 6, "default": 3, "batch": 1}, store.ServerQueues(""))
	require.Equal(t, map[string]int{"t1:critical": 6, "t1:default": 3, "t1:batch": 1}, store.ServerQueues("t1"))
}

func TestEncodeOutput(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name    string
		in      []byte
		wantS   string
		wantEnc jobs.Encoding
	}{
		{"Empty", nil, "", ""},
		{"ASCII", []byte("hello\n"), "hello\n", ""},
		{"UTF8AndHTML", []byte("héllo <b>&</b> \x00"), "héllo <b>&</b> \x00", ""},
		{"InvalidUTF8", []byte{'o', 'k', 0xff, 0xfe}, "b2v//g==", jobs.EncodingBase64},
		{"CutRune", []byte("é")[:1], "ww==", jobs.EncodingBase64},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			s, enc := jobs.EncodeOutput(tt.in)
			require.Equal(t, tt.wantS, s)
			require.Equal(t, tt.wantEnc, enc)

			// Through JSON and back, byte-exact.
			var r jobs.Result
			r.ID, r.Status = "x", jobs.StatusSucceeded
			r.SetStdout(tt.in)
			r.SetStderr(tt.in)
			b, err := jobs.EncodeJSON(r)
			require.NoError(t, err)
			var back jobs.Result
			require.NoError(t, json.Unmarshal(b, &back))
			for _, get := range []func() ([]byte, error){back.StdoutBytes, back.StderrBytes} {
				got, err := get()
				require.NoError(t, err)
				require.Equal(t, string(tt.in), string(got))
			}
		})
	}
}

func TestDecodeOutput(t *testing.T) {
	t.Parallel()

	b, err := jobs.DecodeOutput("text", jobs.EncodingUTF8)
	require.NoError(t, err)
	require.Equal(t, "text", string(b))

	_, err = jobs.DecodeOutput("!!", jobs.EncodingBase64)
	require.ErrorContains(t, err, "jobs: decode output: illegal base64")

	_, err = jobs.DecodeOutput("x", "rot13")
	require.EqualError(t, err, `jobs: decode output: unknown encoding "rot13"`)
}

// TestResultJSON pins the wire names of Result, which non-Go clients read.
func TestResultJSON(t *testing.T) {
	t.Parallel()

	code := 1
	r := jobs.Result{
		ID: "j1", Status: jobs.StatusFailed, ExitCode: &code, Reason: "exit status 1",
		Output: jobs.Output{Stdout: "out", Stderr: "err", StderrTruncated: true, StdoutTotalBytes: 3, StderrTotalBytes: 9},
		Compile: &jobs.StepResult{
			ExitCode: &code,
			Output:   jobs.Output{Stdout: "", StderrEncoding: jobs.EncodingBase64, Stderr: "/w=="},
		},
		Usage: jobs.Usage{WallMS: 12, CPUMS: 10, MaxRSSKB: 9000}, Attempts: 1, Worker: "w1", Lang: "python",
		Queue: jobs.QueueDefault, Tags: map[string]string{"k": "v"},
	}
	b, err := jobs.EncodeJSON(r)
	require.NoError(t, err)
	want := `{"id":"j1","status":"failed","exit_code":1,"reason":"exit status 1",` +
		`"stdout":"out","stdout_total_bytes":3,"stderr":"err","stderr_truncated":true,"stderr_total_bytes":9,` +
		`"compile":{"exit_code":1,"stdout":"","stderr":"/w==","stderr_encoding":"base64"},` +
		`"usage":{"wall_ms":12,"cpu_ms":10,"max_rss_kb":9000},"attempts":1,"worker":"w1","lang":"python",` +
		`"queue":"default","tags":{"k":"v"}}`
	require.JSONEq(t, want, string(b))

	var back jobs.Result
	require.NoError(t, json.Unmarshal(b, &back))
	if diff := cmp.Diff(r, back); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

func TestHeldBytes(t *testing.T) {
	t.Parallel()
	// A job that does not stream holds its payload; one that streams holds
	// its live output's bound too: four streams of output_bytes.
	require.Equal(t, int64(500), jobs.Job{}.HeldBytes(500))
	require.Equal(t, int64(500+4<<20), jobs.Job{Stream: true}.HeldBytes(500))
	require.Equal(t, int64(500+4*1000), jobs.Job{Stream: true, Limits: jobs.Limits{OutputBytes: 1000}}.HeldBytes(500))
}
