package main

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/jobs"
)

func TestBuildJob(t *testing.T) {
	t.Parallel()

	intp := func(n int) *int { return &n }
	strp := func(s string) *string { return &s }
	base := func() *jobs.Job {
		return &jobs.Job{
			ID: "base-1", Lang: "python", Code: "print('base')", Stdin: "in",
			Args: []string{"a"}, Env: map[string]string{"A": "1", "B": "2"},
			Files:  []jobs.File{{Path: "x", ContentB64: []byte("x")}},
			Limits: jobs.Limits{TimeoutMS: 5000, MemoryMB: 64, CPUs: 0.5},
			Queue:  jobs.QueueBatch, Tags: map[string]string{"t": "1"}, MaxRetry: intp(2),
		}
	}
	tests := []struct {
		name    string
		opts    runOptions
		want    jobs.Job
		wantErr string
	}{
		{
			name: "program only",
			opts: runOptions{Source: "hello.py", Code: "print(1)"},
			want: jobs.Job{Lang: "python", Code: "print(1)"},
		},
		{
			name: "stdin program with --lang",
			opts: runOptions{Source: "-", Code: "print(1)", Lang: "py"},
			want: jobs.Job{Lang: "py", Code: "print(1)"},
		},
		{
			name: "--lang wins over the extension",
			opts: runOptions{Source: "prog.txt", Code: "x", Lang: "python3"},
			want: jobs.Job{Lang: "python3", Code: "x"},
		},
		{
			name: "no language to infer is left to validation",
			opts: runOptions{Source: "prog.cob", Code: "DISPLAY 1"},
			want: jobs.Job{Code: "DISPLAY 1"},
		},
		{
			name: "every flag",
			opts: runOptions{
				Source: "p.py", Code: "c", ID: "id-1", Queue: "critical", Isolation: "fresh", Tenant: "acme",
				Timeout: 2 * time.Second, MemoryMB: 128, CPUs: 0.25, Pids: 16, OutputBytes: 4096,
				DiskMB: 10, TmpMB: 5, Nofile: 64, FileSizeMB: 2,
				Stdin: strp("input"), Args: []string{"x", "y z", ""}, Env: []string{"K=V", "EMPTY=", "EQ=a=b"},
				Files:       []jobs.File{{Path: "data.csv", ContentB64: []byte("1,2"), Mode: 0o755}},
				OutputFiles: []string{"out/*.png"}, Libraries: []string{"numpy==2.1"},
				Tags: []string{"team=ml"}, MaxRetry: intp(0),
			},
			want: jobs.Job{
				ID: "id-1", Lang: "python", Code: "c", Stdin: "input", Args: []string{"x", "y z", ""},
				Env:         map[string]string{"K": "V", "EMPTY": "", "EQ": "a=b"},
				Files:       []jobs.File{{Path: "data.csv", ContentB64: []byte("1,2"), Mode: 0o755}},
				OutputFiles: []string{"out/*.png"}, Libraries: []string{"numpy==2.1"},
				Limits: jobs.Limits{
					TimeoutMS: 2000, MemoryMB: 128, CPUs: 0.25, Pids: 16, OutputBytes: 4096,
					DiskMB: 10, TmpMB: 5, Nofile: 64, FileSizeMB: 2,
				},
				Isolation: jobs.IsolationFresh, Queue: jobs.QueueCritical, Tags: map[string]string{"team": "ml"},
				Tenant: "acme", MaxRetry: intp(0),
			},
		},
		{
			name: "timeout rounds up to whole milliseconds",
			opts: runOptions{Source: "p.py", Code: "c", Timeout: 1500 * time.Microsecond},
			want: jobs.Job{Lang: "python", Code: "c", Limits: jobs.Limits{TimeoutMS: 2}},
		},
		{
			name: "explicit empty stdin",
			opts: runOptions{Source: "p.py", Code: "c", Stdin: strp("")},
			want: jobs.Job{Lang: "python", Code: "c"},
		},
		{
			name: "job JSON alone",
			opts: runOptions{Base: base()},
			want: *base(),
		},
		{
			name: "flags override job JSON",
			opts: runOptions{
				Base: base(), Source: "other.py", Code: "print('file')", ID: "id-2", Lang: "py",
				Timeout: time.Second, Pids: 8, Stdin: strp(""), Args: []string{"b"},
				Env: []string{"B=20", "C=3"}, Tags: []string{"u=2"}, MaxRetry: intp(5),
			},
			want: func() jobs.Job {
				j := *base()
				j.ID, j.Lang, j.Code, j.Stdin, j.Args = "id-2", "py", "print('file')", "", []string{"b"}
				j.Limits.TimeoutMS, j.Limits.Pids = 1000, 8
				j.Env = map[string]string{"A": "1", "B": "20", "C": "3"}
				j.Tags = map[string]string{"t": "1", "u": "2"}
				j.MaxRetry = intp(5)
				return j
			}(),
		},
		{
			name:    "negative timeout",
			opts:    runOptions{Source: "p.py", Code: "c", Timeout: -time.Second},
			wantErr: "--timeout -1s is negative",
		},
		{
			name:    "env without =",
			opts:    runOptions{Source: "p.py", Code: "c", Env: []string{"HOME"}},
			wantErr: `--env "HOME": want KEY=VALUE`,
		},
		{
			name:    "tag with empty key",
			opts:    runOptions{Source: "p.py", Code: "c", Tags: []string{"=x"}},
			wantErr: `--tag "=x": the key is empty`,
		},
		{
			name:    "env key twice",
			opts:    runOptions{Source: "p.py", Code: "c", Env: []string{"A=1", "A=2"}},
			wantErr: `--env: key "A" is given twice`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := buildJob(tt.opts)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("buildJob (-want +got):\n%s", diff)
			}
		})
	}
}

// buildJob does not modify the job read with --job-json.
func TestBuildJobKeepsBase(t *testing.T) {
	t.Parallel()

	b := &jobs.Job{Lang: "py", Code: "c", Env: map[string]string{"A": "1"}, Tags: map[string]string{"t": "1"}}
	_, err := buildJob(runOptions{Base: b, Env: []string{"A=2"}, Tags: []string{"t=2"}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"A": "1"}, b.Env)
	require.Equal(t, map[string]string{"t": "1"}, b.Tags)
}

func TestInferLang(t *testing.T) {
	t.Parallel()

	tests := []struct {
		source, want string
	}{
		{"hello.py", "python"},
		{"dir.d/hello.PY", "python"},
		{"/abs/x.python3", "python"},
		{"x.python", "python"},
		{"hello.rb", "ruby"},
		{"hello.cob", ""},
		{"Makefile", ""},
		{"dir.py/noext", ""},
		{"trailing.", ""},
		{"-", ""},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, inferLang(tt.source))
		})
	}
}

func TestParseKV(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		in      []string
		want    map[string]string
		wantErr string
	}{
		{name: "none", in: nil, want: nil},
		{name: "pairs", in: []string{"A=1", "B="}, want: map[string]string{"A": "1", "B": ""}},
		{name: "value with =", in: []string{"URL=a=b=c"}, want: map[string]string{"URL": "a=b=c"}},
		{name: "value with spaces", in: []string{"K= v "}, want: map[string]string{"K": " v "}},
		{name: "no =", in: []string{"A"}, wantErr: `--env "A": want KEY=VALUE`},
		{name: "empty", in: []string{""}, wantErr: `--env "": want KEY=VALUE`},
		{name: "empty key", in: []string{"=1"}, wantErr: `--env "=1": the key is empty`},
		{name: "repeated key", in: []string{"A=1", "B=2", "A=3"}, wantErr: `--env: key "A" is given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseKV("--env", tt.in)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestParseFileSpec(t *testing.T) {
	t.Parallel()

	tests := []struct {
		spec, local, remote, wantErr string
	}{
		{spec: "data.csv", local: "data.csv", remote: "data.csv"},
		{spec: "/tmp/in/data.csv", local: "/tmp/in/data.csv", remote: "data.csv"},
		{spec: "data.csv:in/d.csv", local: "data.csv", remote: "in/d.csv"},
		{spec: "a:b:c", local: "a", remote: "b:c"},
		{spec: ":x", wantErr: `--file ":x": the local path is empty; want LOCAL[:REMOTE]`},
		{spec: "x:", wantErr: `--file "x:": the remote path after ':' is empty; want LOCAL[:REMOTE]`},
		{spec: "", wantErr: `--file "": the local path is empty; want LOCAL[:REMOTE]`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			local, remote, err := parseFileSpec(tt.spec)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.local, local)
			require.Equal(t, tt.remote, remote)
		})
	}
}

func TestDescribeInvalid(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		ve   jobs.ValidationError
		job  jobs.Job
		opts runOptions
		want string
	}{
		{
			name: "names the flag",
			ve:   jobs.ValidationError{Field: "limits.memory_mb", Msg: "9999 MiB exceeds the operator cap 4096 MiB"},
			want: "invalid job: limits.memory_mb (--memory): 9999 MiB exceeds the operator cap 4096 MiB",
		},
		{
			name: "indexed field",
			ve:   jobs.ValidationError{Field: "files[1].path", Msg: `"../x" escapes the work dir`},
			want: `invalid job: files[1].path (--file): "../x" escapes the work dir`,
		},
		{
			name: "map field",
			ve:   jobs.ValidationError{Field: "env.A", Msg: "contains a NUL byte"},
			want: "invalid job: env.A (--env): contains a NUL byte",
		},
		{
			name: "from --job-json: no flag",
			ve:   jobs.ValidationError{Field: "limits.pids", Msg: "too many"},
			opts: runOptions{Base: &jobs.Job{}},
			want: "invalid job: limits.pids: too many",
		},
		{
			name: "language not inferred",
			ve:   jobs.ValidationError{Field: "lang", Msg: "is empty; supported: py, python, python3"},
			opts: runOptions{Source: "/src/prog.cob"},
			want: `invalid job: lang (--lang): is empty; supported: py, python, python3; pass --lang (none could be inferred from "prog.cob")`,
		},
		{
			name: "language missing on stdin",
			ve:   jobs.ValidationError{Field: "lang", Msg: "is empty"},
			opts: runOptions{Source: "-"},
			want: "invalid job: lang (--lang): is empty; pass --lang",
		},
		{
			name: "whole job",
			ve:   jobs.ValidationError{Msg: "no good"},
			want: "invalid job: no good",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.EqualError(t, describeInvalid(&tt.ve, tt.job, tt.opts), tt.want)
		})
	}
}

// Every field a ValidationError can name maps to a flag that exists.
func TestFieldFlagsExist(t *testing.T) {
	t.Parallel()

	a := &app{getenv: func(string) string { return "" }}
	run := a.newRunCmd()
	for _, field := range slices.Sorted(maps.Keys(fieldFlags)) {
		for flag := range strings.SplitSeq(fieldFlags[field], ", ") {
			if flag == "FILE" {
				continue
			}
			require.NotNil(t, run.Flags().Lookup(strings.TrimPrefix(flag, "--")), "%s → %s", field, flag)
		}
	}
}

func TestStatusLine(t *testing.T) {
	t.Parallel()

	code := func(n int) *int { return &n }
	tests := []struct {
		name string
		r    jobs.Result
		want string
	}{
		{
			name: "succeeded",
			r:    jobs.Result{ID: "j1", Status: jobs.StatusSucceeded, ExitCode: code(0), Usage: jobs.Usage{WallMS: 23}},
			want: "sandq: job j1 succeeded (exit 0, 23 ms wall)\n",
		},
		{
			name: "timeout",
			r: jobs.Result{ID: "j2", Status: jobs.StatusTimeout, Signal: "SIGKILL", Usage: jobs.Usage{WallMS: 2004},
				Reason: "wall-clock limit of 2000 ms", Attempts: 2},
			want: "sandq: job j2 timeout (signal SIGKILL, 2004 ms wall, attempt 2): wall-clock limit of 2000 ms\n",
		},
		{
			name: "canceled while queued",
			r:    jobs.Result{ID: "j3", Status: jobs.StatusCanceled, Reason: "canceled while queued"},
			want: "sandq: job j3 canceled: canceled while queued\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, statusLine(tt.r))
		})
	}
}

// A flag beats its environment variable, which beats the default.
func TestApplyEnv(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    config.Redis
		wantErr string
	}{
		{
			name: "defaults",
			want: config.Redis{Addr: "127.0.0.1:6379", Prefix: "sandq", ResultTTL: 24 * time.Hour},
		},
		{
			name: "env over default",
			env: map[string]string{
				"SANDQ_REDIS_ADDR": "redis:6380", "SANDQ_REDIS_DB": "3", "SANDQ_PREFIX": "p",
				"SANDQ_QUEUE_PREFIX": "q", "SANDQ_RESULT_TTL": "1h",
			},
			want: config.Redis{Addr: "redis:6380", DB: 3, Prefix: "p", QueuePrefix: "q", ResultTTL: time.Hour},
		},
		{
			name: "flag over env",
			args: []string{"--redis", "flag:1", "--redis-db=0", "--prefix", "fp", "--result-ttl", "2m"},
			env:  map[string]string{"SANDQ_REDIS_ADDR": "env:1", "SANDQ_REDIS_DB": "5", "SANDQ_PREFIX": "ep"},
			want: config.Redis{Addr: "flag:1", Prefix: "fp", ResultTTL: 2 * time.Minute},
		},
		{
			name:    "bad env value",
			env:     map[string]string{"SANDQ_RESULT_TTL": "forever"},
			wantErr: `SANDQ_RESULT_TTL="forever" (for --result-ttl)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &app{}
			root := a.newRootCmd()
			fs := root.PersistentFlags()
			require.NoError(t, fs.Parse(tt.args))
			err := config.ApplyEnv(fs, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, a.globals); diff != "" {
				t.Errorf("globals (-want +got):\n%s", diff)
			}
			// Values from the environment are not marked as given, so the
			// resume hint repeats only what was typed.
			var changed []string
			fs.Visit(func(f *pflag.Flag) { changed = append(changed, f.Name) })
			require.Len(t, changed, countFlags(tt.args))
		})
	}
}

func countFlags(args []string) int {
	n := 0
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			n++
		}
	}
	return n
}

func TestShellQuote(t *testing.T) {
	t.Parallel()

	require.Equal(t, "abc-1:2", shellQuote("abc-1:2"))
	require.Equal(t, "''", shellQuote(""))
	require.Equal(t, `'a b'`, shellQuote("a b"))
	require.Equal(t, `'it'\''s'`, shellQuote("it's"))
}

func TestExitErrorUnwrap(t *testing.T) {
	t.Parallel()

	inner := errors.New("inner")
	require.ErrorIs(t, &exitError{code: 2, err: inner}, inner)
	require.Equal(t, "exit status 3", (&exitError{code: 3}).Error())
}

// A program cannot forge the status line: whatever its last bytes, the
// real one starts a line of its own and comes last.
func TestStatusLineCannotBeForged(t *testing.T) {
	t.Parallel()
	exit := 1
	r := jobs.Result{ID: "j1", Status: jobs.StatusFailed, ExitCode: &exit, Reason: "exit status 1"}
	r.SetStderr([]byte("\x1b[8mhidden\nsandq: job j1 succeeded (exit 0)"))
	var stdout, stderr bytes.Buffer
	require.NoError(t, writeOutput(&stdout, &stderr, r))
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	require.Equal(t, "sandq: job j1 succeeded (exit 0)", lines[len(lines)-2], "the program's line stays its own")
	require.Equal(t, statusLine(r), lines[len(lines)-1]+"\n", "ours is last, on a line of its own")

	// Output that ends with a newline gets no blank line.
	r.SetStderr([]byte("oops\n"))
	stderr.Reset()
	require.NoError(t, writeOutput(&stdout, &stderr, r))
	require.Equal(t, "oops\n"+statusLine(r), stderr.String())
}
