package jobs_test

import (
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
)

func validJob() jobs.Job {
	return jobs.Job{Lang: "python", Code: "print(1)"}
}

func ptr[T any](v T) *T { return &v }

func TestPolicyValidate(t *testing.T) {
	t.Parallel()

	type testCase struct {
		name   string
		policy jobs.Policy
		mutate func(j *jobs.Job)
		want   string // full error text; "" means valid
	}
	cases := []testCase{
		{name: "Minimal", mutate: func(j *jobs.Job) {}},
		{name: "Full", mutate: func(j *jobs.Job) {
			*j = jobs.Job{
				ID: "batch-7:job_1.a", Lang: "PY", Code: "print(1)", Stdin: "in", Args: []string{"-v", ""},
				Env:         map[string]string{"HOME_DIR": "/x", "_A1": ""},
				Files:       []jobs.File{{Path: "data/a.csv", ContentB64: []byte("a,b")}, {Path: "data/b.bin", Key: "in/b", Mode: 0o755}, {Path: "empty"}},
				OutputFiles: []string{"out/*.png", "result.json", "data/[ab].csv"},
				Libraries:   []string{"numpy==2.1", "requests[socks]>=2"},
				Limits: jobs.Limits{TimeoutMS: 300_000, MemoryMB: 4096, CPUs: 0.5, Pids: 512, OutputBytes: 16 * jobs.MiB,
					DiskMB: 1024, TmpMB: 4, Nofile: 64, FileSizeMB: 1},
				Isolation: jobs.IsolationFresh, Queue: jobs.QueueBatch, Tags: map[string]string{"user": "u1"},
				Tenant: "acme", MaxRetry: ptr(10),
			}
		}},

		// Trace context: size and characters only.
		{name: "TraceParent", mutate: func(j *jobs.Job) {
			j.TraceParent, j.TraceState = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE"
		}},
		{name: "TraceParentTooLong", mutate: func(j *jobs.Job) { j.TraceParent = strings.Repeat("a", 129) },
			want: `jobs: invalid job: traceparent: is 129 bytes; the cap is 128`},
		{name: "TraceStateTooLong", mutate: func(j *jobs.Job) { j.TraceState = strings.Repeat("a", 513) },
			want: `jobs: invalid job: tracestate: is 513 bytes; the cap is 512`},
		{name: "TraceStateControl", mutate: func(j *jobs.Job) { j.TraceState = "a=b\nc" },
			want: `jobs: invalid job: tracestate: has a byte 0x0a at 3; only printable ASCII is allowed`},

		// Identity.
		{name: "IDCharset", mutate: func(j *jobs.Job) { j.ID = "a b" },
			want: `jobs: invalid job: id: "a b" has character ' ' at byte 1; allowed are A-Z a-z 0-9 _ . : -`},
		{name: "IDNonASCII", mutate: func(j *jobs.Job) { j.ID = "jé" },
			want: `jobs: invalid job: id: "jé" has character 'é' at byte 1; allowed are A-Z a-z 0-9 _ . : -`},
		{name: "IDSlash", mutate: func(j *jobs.Job) { j.ID = "a/b" },
			want: `jobs: invalid job: id: "a/b" has character '/' at byte 1; allowed are A-Z a-z 0-9 _ . : -`},
		{name: "IDTooLong", mutate: func(j *jobs.Job) { j.ID = strings.Repeat("a", 129) },
			want: `jobs: invalid job: id: is 129 bytes; the cap is 128`},
		{name: "IDMaxLength", mutate: func(j *jobs.Job) { j.ID = strings.Repeat("a", 128) }},
		{name: "IDDotDot", mutate: func(j *jobs.Job) { j.ID = ".." },
			want: `jobs: invalid job: id: ".." is reserved`},
		{name: "Tenant", mutate: func(j *jobs.Job) { j.Tenant = "acme corp" },
			want: `jobs: invalid job: tenant: "acme corp" has character ' ' at byte 4; allowed are A-Z a-z 0-9 _ . : -`},

		// Language and code.
		{name: "UnknownLanguage", mutate: func(j *jobs.Job) { j.Lang = "cobol" },
			want: `jobs: invalid job: lang: unknown language "cobol"; supported: bash, c, c++, cc, cpp, cxx, go, golang, java, javascript, js, node, nodejs, py, python, python3, r, rb, rs, ruby, rust, sh, shell, ts, typescript`},
		{name: "EmptyLanguage", mutate: func(j *jobs.Job) { j.Lang = "" },
			want: `jobs: invalid job: lang: is empty; supported: bash, c, c++, cc, cpp, cxx, go, golang, java, javascript, js, node, nodejs, py, python, python3, r, rb, rs, ruby, rust, sh, shell, ts, typescript`},
		{name: "PolicyLanguages", policy: jobs.Policy{Languages: []jobs.Language{{Name: "go", Aliases: []string{"golang"}}, {Name: "c"}}},
			mutate: func(j *jobs.Job) { j.Lang = "python" },
			want:   `jobs: invalid job: lang: unknown language "python"; supported: c, go, golang`},
		{name: "EmptyCode", mutate: func(j *jobs.Job) { j.Code = "" },
			want: `jobs: invalid job: code: is empty`},
		{name: "BlankCode", mutate: func(j *jobs.Job) { j.Code = " \n\t" },
			want: `jobs: invalid job: code: is empty`},
		{name: "CodeOverCap", mutate: func(j *jobs.Job) { j.Code = strings.Repeat("x", jobs.MiB+1) },
			want: `jobs: invalid job: code: is 1048577 bytes; the cap is 1 MiB (1048576 bytes)`},
		{name: "CodeAtCap", mutate: func(j *jobs.Job) { j.Code = strings.Repeat("x", jobs.MiB) }},
		{name: "CodeOverOperatorCap", policy: langs.Policy(jobs.Policy{MaxCodeBytes: 100}),
			mutate: func(j *jobs.Job) { j.Code = strings.Repeat("x", 101) },
			want:   `jobs: invalid job: code: is 101 bytes; the cap is 100 bytes`},
		{name: "StdinOverCap", mutate: func(j *jobs.Job) { j.Stdin = strings.Repeat("x", jobs.MiB+1) },
			want: `jobs: invalid job: stdin: is 1048577 bytes; the cap is 1 MiB (1048576 bytes)`},

		// Queue, isolation, retries.
		{name: "Queue", mutate: func(j *jobs.Job) { j.Queue = "urgent" },
			want: `jobs: invalid job: queue: unknown queue "urgent"; use critical, default or batch`},
		{name: "Isolation", mutate: func(j *jobs.Job) { j.Isolation = "shared" },
			want: `jobs: invalid job: isolation: unknown isolation "shared"; use reuse or fresh`},
		{name: "MaxRetryNegative", mutate: func(j *jobs.Job) { j.MaxRetry = ptr(-1) },
			want: `jobs: invalid job: max_retry: is -1; must be >= 0`},
		{name: "MaxRetryOverCap", mutate: func(j *jobs.Job) { j.MaxRetry = ptr(11) },
			want: `jobs: invalid job: max_retry: 11 exceeds the operator cap 10`},
		{name: "MaxRetryZero", mutate: func(j *jobs.Job) { j.MaxRetry = ptr(0) }},

		// Limits.
		{name: "MemoryOverCap", mutate: func(j *jobs.Job) { j.Limits.MemoryMB = 8192 },
			want: `jobs: invalid job: limits.memory_mb: 8192 MiB exceeds the operator cap 4096 MiB`},
		{name: "TimeoutOverCap", mutate: func(j *jobs.Job) { j.Limits.TimeoutMS = 300_001 },
			want: `jobs: invalid job: limits.timeout_ms: 300001 ms exceeds the operator cap 300000 ms`},
		{name: "TimeoutOverOperatorCap", policy: langs.Policy(jobs.Policy{MaxLimits: jobs.Limits{TimeoutMS: 5000}}),
			mutate: func(j *jobs.Job) { j.Limits.TimeoutMS = 6000 },
			want:   `jobs: invalid job: limits.timeout_ms: 6000 ms exceeds the operator cap 5000 ms`},
		{name: "PidsOverCap", mutate: func(j *jobs.Job) { j.Limits.Pids = 513 },
			want: `jobs: invalid job: limits.pids: 513 processes exceeds the operator cap 512 processes`},
		{name: "OutputOverCap", mutate: func(j *jobs.Job) { j.Limits.OutputBytes = 16*jobs.MiB + 1 },
			want: `jobs: invalid job: limits.output_bytes: 16777217 bytes exceeds the operator cap 16777216 bytes`},
		{name: "DiskOverCap", mutate: func(j *jobs.Job) { j.Limits.DiskMB = 2048 },
			want: `jobs: invalid job: limits.disk_mb: 2048 MiB exceeds the operator cap 1024 MiB`},
		{name: "NegativePids", mutate: func(j *jobs.Job) { j.Limits.Pids = -1 },
			want: `jobs: invalid job: limits.pids: is -1; must be >= 0 (0 means the operator default, 128 processes)`},
		{name: "NegativeTimeout", mutate: func(j *jobs.Job) { j.Limits.TimeoutMS = -5 },
			want: `jobs: invalid job: limits.timeout_ms: is -5; must be >= 0 (0 means the operator default, 10000 ms)`},
		{name: "MemoryBelowMinimum", mutate: func(j *jobs.Job) { j.Limits.MemoryMB = 4 },
			want: `jobs: invalid job: limits.memory_mb: 4 MiB is below the minimum 16 MiB`},
		{name: "PidsBelowMinimum", mutate: func(j *jobs.Job) { j.Limits.Pids = 1 },
			want: `jobs: invalid job: limits.pids: 1 processes is below the minimum 8 processes`},
		{name: "NofileBelowMinimum", mutate: func(j *jobs.Job) { j.Limits.Nofile = 1 },
			want: `jobs: invalid job: limits.nofile: 1 files is below the minimum 32 files`},
		{name: "DiskBelowMinimum", mutate: func(j *jobs.Job) { j.Limits.DiskMB = 1 },
			want: `jobs: invalid job: limits.disk_mb: 1 MiB is below the minimum 4 MiB`},
		{name: "TmpBelowMinimum", mutate: func(j *jobs.Job) { j.Limits.TmpMB = 3 },
			want: `jobs: invalid job: limits.tmp_mb: 3 MiB is below the minimum 4 MiB`},
		{name: "CPUsBelowMinimum", mutate: func(j *jobs.Job) { j.Limits.CPUs = 0.05 },
			want: `jobs: invalid job: limits.cpus: 0.05 cores is below the minimum 0.1 cores`},
		{name: "CPUsOverCap", mutate: func(j *jobs.Job) { j.Limits.CPUs = 4.5 },
			want: `jobs: invalid job: limits.cpus: 4.5 cores exceeds the operator cap 4 cores`},
		{name: "CPUsNegative", mutate: func(j *jobs.Job) { j.Limits.CPUs = -1 },
			want: `jobs: invalid job: limits.cpus: is -1; must be >= 0 (0 means the operator default, 1 cores)`},
		{name: "CPUsNaN", mutate: func(j *jobs.Job) { j.Limits.CPUs = math.NaN() },
			want: `jobs: invalid job: limits.cpus: is NaN; must be >= 0 (0 means the operator default, 1 cores)`},
		{name: "CPUsTiny", mutate: func(j *jobs.Job) { j.Limits.CPUs = 0.001 },
			want: `jobs: invalid job: limits.cpus: 0.001 cores is below the minimum 0.1 cores`},

		// Args and env.
		{name: "ArgNUL", mutate: func(j *jobs.Job) { j.Args = []string{"ok", "a\x00b"} },
			want: `jobs: invalid job: args[1]: contains a NUL byte`},
		{name: "EnvKey", mutate: func(j *jobs.Job) { j.Env = map[string]string{"1X": "v"} },
			want: `jobs: invalid job: env: key "1X" is not a valid name ([A-Za-z_][A-Za-z0-9_]*)`},
		{name: "EnvKeyEquals", mutate: func(j *jobs.Job) { j.Env = map[string]string{"A=B": "v"} },
			want: `jobs: invalid job: env: key "A=B" is not a valid name ([A-Za-z_][A-Za-z0-9_]*)`},
		{name: "EnvValueNUL", mutate: func(j *jobs.Job) { j.Env = map[string]string{"A": "\x00"} },
			want: `jobs: invalid job: env.A: contains a NUL byte`},
		{name: "RustRandUnknown", mutate: func(j *jobs.Job) { j.Lang = "rs"; j.Env = map[string]string{"SANDQ_RUST_RAND": "0.4"} },
			want: `jobs: invalid job: env.SANDQ_RUST_RAND: is "0.4"; rust accepts 0.8 or 0.7`},
		{name: "ArgEnvOverCap", policy: langs.Policy(jobs.Policy{MaxArgEnvBytes: 10}),
			mutate: func(j *jobs.Job) { j.Args = []string{"123456"}; j.Env = map[string]string{"AB": "cde"} },
			want:   `jobs: invalid job: args: args and env total 11 bytes; the cap is 10 bytes`},

		// Files.
		{name: "PathAbsolute", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "/etc/passwd"}} },
			want: `jobs: invalid job: files[0].path: "/etc/passwd" is absolute; paths are relative to the work dir`},
		{name: "PathEscape", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "../x"}} },
			want: `jobs: invalid job: files[0].path: "../x" escapes the work dir`},
		{name: "PathEscapeInner", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a/../../x"}} },
			want: `jobs: invalid job: files[0].path: "a/../../x" escapes the work dir`},
		{name: "PathDotDotOnly", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: ".."}} },
			want: `jobs: invalid job: files[0].path: ".." escapes the work dir`},
		{name: "PathInnerDotDotStaysInside", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a/../b"}} }},
		{name: "PathWorkDir", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "./"}} },
			want: `jobs: invalid job: files[0].path: "./" names the work dir itself`},
		{name: "PathEmpty", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a"}, {Path: ""}} },
			want: `jobs: invalid job: files[1].path: is empty`},
		{name: "PathNUL", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a\x00b"}} },
			want: `jobs: invalid job: files[0].path: "a\x00b" contains a NUL byte`},
		{name: "PathControl", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a\nb"}} },
			want: `jobs: invalid job: files[0].path: "a\nb" contains a control character`},
		{name: "PathInvalidUTF8", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a\xffb"}} },
			want: `jobs: invalid job: files[0].path: "a\xffb" is not valid UTF-8`},
		{name: "PathTooLong", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: strings.Repeat("a/", 512) + "b"}} },
			want: `jobs: invalid job: files[0].path: is 1025 bytes; the cap is 1024`},
		{name: "PathComponentTooLong", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "d/" + strings.Repeat("n", 256)}} },
			want: `jobs: invalid job: files[0].path: "d/` + strings.Repeat("n", 256) + `" has a component of 256 bytes; the cap is 255`},
		{name: "PathDuplicate", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a/b"}, {Path: "c"}, {Path: "a//b"}} },
			want: `jobs: invalid job: files[2].path: "a//b" names the same file as files[0].path "a/b"`},
		{name: "PathInsideFile", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a"}, {Path: "a/b"}} },
			want: `jobs: invalid job: files[1].path: "a/b" is inside files[0].path "a", which is a file`},
		{name: "PathIsDirectory", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a/b/c"}, {Path: "a/b"}} },
			want: `jobs: invalid job: files[1].path: "a/b" is a directory of files[0].path "a/b/c"`},
		{name: "FileBothSources", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a", ContentB64: []byte("x"), Key: "k"}} },
			want: `jobs: invalid job: files[0]: sets both content_b64 and key; set one`},
		{name: "FileMode", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a", Mode: 0o4755}} },
			want: `jobs: invalid job: files[0].mode: 0o4755 has bits outside 0o777 (setuid, setgid and sticky are refused)`},
		{name: "FileKeyNUL", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a", Key: "k\x00"}} },
			want: `jobs: invalid job: files[0].key: "k\x00" contains a NUL byte`},
		{name: "FileKeyAbsolute", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a", Key: "/sandq/job/out.txt"}} },
			want: `jobs: invalid job: files[0].key: "/sandq/job/out.txt" is absolute; keys are relative to the job's inputs area`},
		{name: "FileKeyEscapes", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a", Key: "../../sandq/job/out.txt"}} },
			want: `jobs: invalid job: files[0].key: "../../sandq/job/out.txt" is not a clean relative path (no empty, "." or ".." components): keys name objects in the job's inputs area only`},
		{name: "FileKeyDotInside", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a", Key: "data/./x"}} },
			want: `jobs: invalid job: files[0].key: "data/./x" is not a clean relative path (no empty, "." or ".." components): keys name objects in the job's inputs area only`},
		{name: "FileKeyTrailingSlash", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a", Key: "data/"}} },
			want: `jobs: invalid job: files[0].key: "data/" is not a clean relative path (no empty, "." or ".." components): keys name objects in the job's inputs area only`},
		{name: "TooManyFiles", policy: langs.Policy(jobs.Policy{MaxFiles: 1}), mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a"}, {Path: "b"}} },
			want: `jobs: invalid job: files: has 2 entries; the cap is 1`},
		{name: "InlineFilesOverCap", mutate: func(j *jobs.Job) {
			big := make([]byte, 6*jobs.MiB)
			j.Files = []jobs.File{{Path: "a", ContentB64: big}, {Path: "b", ContentB64: big}}
		}, want: `jobs: invalid job: files: inline content totals 12582912 bytes; the cap is 10 MiB (10485760 bytes)`},

		// Output globs.
		{name: "GlobBad", mutate: func(j *jobs.Job) { j.OutputFiles = []string{"*.png", "out/[a-"} },
			want: `jobs: invalid job: output_files[1]: "out/[a-" is not a valid glob: syntax error in pattern`},
		{name: "GlobAbsolute", mutate: func(j *jobs.Job) { j.OutputFiles = []string{"/etc/*"} },
			want: `jobs: invalid job: output_files[0]: "/etc/*" is absolute; paths are relative to the work dir`},
		{name: "GlobEscape", mutate: func(j *jobs.Job) { j.OutputFiles = []string{"../*"} },
			want: `jobs: invalid job: output_files[0]: "../*" escapes the work dir`},
		{name: "GlobEmpty", mutate: func(j *jobs.Job) { j.OutputFiles = []string{""} },
			want: `jobs: invalid job: output_files[0]: is empty`},

		// Libraries and tags.
		{name: "LibraryOption", mutate: func(j *jobs.Job) { j.Libraries = []string{"numpy", "--index-url=http://evil"} },
			want: `jobs: invalid job: libraries[1]: "--index-url=http://evil" starts with '-'; options are not accepted`},
		{name: "LibraryEmpty", mutate: func(j *jobs.Job) { j.Libraries = []string{""} },
			want: `jobs: invalid job: libraries[0]: is empty`},
		{name: "LibrarySpace", mutate: func(j *jobs.Job) { j.Libraries = []string{"numpy scipy"} },
			want: `jobs: invalid job: libraries[0]: "numpy scipy" contains whitespace, control characters or invalid UTF-8`},
		{name: "LibraryShell", mutate: func(j *jobs.Job) { j.Libraries = []string{"numpy;rm"} },
			want: `jobs: invalid job: libraries[0]: "numpy;rm" is not a valid pip library: want name[extras] with optional version specifiers (numpy, requests[socks]>=2.31)`},
		{name: "LibraryURL", mutate: func(j *jobs.Job) { j.Libraries = []string{"https://evil.example/x.whl"} },
			want: `jobs: invalid job: libraries[0]: "https://evil.example/x.whl" is not a valid pip library: want name[extras] with optional version specifiers (numpy, requests[socks]>=2.31)`},
		{name: "LibraryNpmGit", mutate: func(j *jobs.Job) { j.Lang, j.Libraries = "js", []string{"github:evil/x"} },
			want: `jobs: invalid job: libraries[0]: "github:evil/x" is not a valid npm library: want [@scope/]name[@version] (lodash, @types/node@20, js-md5@^0.8)`},
		{name: "LibraryNoInstaller", mutate: func(j *jobs.Job) { j.Lang, j.Libraries = "rust", []string{"serde"} },
			want: `jobs: invalid job: libraries: rust has no package manager in sandq; libraries are not supported for it`},
		{name: "TagValueTooLong", mutate: func(j *jobs.Job) { j.Tags = map[string]string{"k": strings.Repeat("v", 257)} },
			want: `jobs: invalid job: tags.k: is 257 bytes; the cap is 256`},
		{name: "TagEmptyKey", mutate: func(j *jobs.Job) { j.Tags = map[string]string{"": "v"} },
			want: `jobs: invalid job: tags: has an empty key`},

		// An input file may not take the program's own source name.
		{name: "FileNamedLikeSource", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "a.txt"}, {Path: "./main.py"}} },
			want: `jobs: invalid job: files[1].path: "./main.py" is where python jobs' code is written; give the file another name`},
		{name: "FileNamedLikeJavaSource", mutate: func(j *jobs.Job) { j.Lang, j.Files = "java", []jobs.File{{Path: "Main.java"}} },
			want: `jobs: invalid job: files[0].path: "Main.java" is where java jobs' code is written; give the file another name`},
		{name: "FileNamedLikeOtherLanguageSource", mutate: func(j *jobs.Job) { j.Files = []jobs.File{{Path: "main.js"}} }},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			j := validJob()
			tt.mutate(&j)
			before := cloneJob(j)
			err := langs.Policy(tt.policy).Validate(&j)
			if diff := cmp.Diff(before, j, cmpopts.EquateNaNs()); diff != "" {
				t.Fatalf("Validate modified the job (-before +after):\n%s", diff)
			}
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
			var verr *jobs.ValidationError
			require.True(t, errors.As(err, &verr), "error is %T, want *ValidationError", err)
			require.Equal(t, tt.want, verr.Error())
		})
	}
}

// cloneJob copies j deeply: its slices, maps and pointers too.
func cloneJob(j jobs.Job) jobs.Job {
	j.Args = slices.Clone(j.Args)
	j.Env = maps.Clone(j.Env)
	j.Files = slices.Clone(j.Files)
	for i := range j.Files {
		j.Files[i].ContentB64 = slices.Clone(j.Files[i].ContentB64)
	}
	j.OutputFiles = slices.Clone(j.OutputFiles)
	j.Libraries = slices.Clone(j.Libraries)
	j.PlotFormats = slices.Clone(j.PlotFormats)
	j.Tags = maps.Clone(j.Tags)
	if j.MaxRetry != nil {
		j.MaxRetry = ptr(*j.MaxRetry)
	}
	return j
}

func TestPolicyNormalize(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()

		j := jobs.Job{Lang: "Python3", Code: "print(1)", Files: []jobs.File{{Path: "./a//b"}}}
		require.NoError(t, langs.Policy(jobs.Policy{}).Validate(&j))
		langs.Policy(jobs.Policy{}).Normalize(&j)
		require.True(t, jobs.ValidID(j.ID), "generated ID %q", j.ID)
		want := jobs.Job{
			ID: j.ID, Lang: "python", Code: "print(1)", Files: []jobs.File{{Path: "a/b"}},
			Limits: jobs.Limits{TimeoutMS: 10_000, MemoryMB: 256, CPUs: 1, Pids: 128, OutputBytes: jobs.MiB,
				DiskMB: 256, TmpMB: 64, Nofile: 256, FileSizeMB: 64, CPUMS: 2000},
			Isolation: jobs.IsolationReuse, Queue: jobs.QueueDefault, MaxRetry: ptr(3),
		}
		if diff := cmp.Diff(want, j); diff != "" {
			t.Fatalf("normalized job (-want +got):\n%s", diff)
		}
	})

	t.Run("JobLowersLimits", func(t *testing.T) {
		t.Parallel()

		j := jobs.Job{ID: "keep", Lang: "py", Code: "x", Limits: jobs.Limits{TimeoutMS: 500, MemoryMB: 64, CPUs: 0.25},
			Queue: jobs.QueueCritical, Isolation: jobs.IsolationFresh, MaxRetry: ptr(0)}
		langs.Policy(jobs.Policy{}).Normalize(&j)
		require.Equal(t, "keep", j.ID)
		require.Equal(t, int64(500), j.Limits.TimeoutMS)
		require.Equal(t, int64(64), j.Limits.MemoryMB)
		require.Equal(t, 0.25, j.Limits.CPUs)
		require.Equal(t, int64(128), j.Limits.Pids)
		require.Equal(t, jobs.QueueCritical, j.Queue)
		require.Equal(t, jobs.IsolationFresh, j.Isolation)
		require.Equal(t, 0, *j.MaxRetry)
	})

	t.Run("ClampsToCaps", func(t *testing.T) {
		t.Parallel()

		// Normalize without Validate still never exceeds a cap.
		p := langs.Policy(jobs.Policy{MaxLimits: jobs.Limits{TimeoutMS: 5000, CPUs: 2}, MaxRetryCap: 2})
		j := jobs.Job{Lang: "python", Code: "x", Limits: jobs.Limits{TimeoutMS: 9_999_999, CPUs: 64, MemoryMB: 1 << 40}, MaxRetry: ptr(99)}
		p.Normalize(&j)
		require.Equal(t, int64(5000), j.Limits.TimeoutMS)
		require.Equal(t, 2.0, j.Limits.CPUs)
		require.Equal(t, int64(4096), j.Limits.MemoryMB)
		require.Equal(t, 2, *j.MaxRetry)
	})

	t.Run("LanguageDefaults", func(t *testing.T) {
		t.Parallel()

		// C++ has its own memory default; the job's own value wins, and
		// the operator's cap bounds the language's default.
		j := jobs.Job{Lang: "cpp", Code: "int main(){}"}
		langs.Policy(jobs.Policy{}).Normalize(&j)
		require.EqualValues(t, 512, j.Limits.MemoryMB)
		require.EqualValues(t, 128, j.Limits.Pids, "no language default: the operator's")

		j = jobs.Job{Lang: "c++", Code: "int main(){}", Limits: jobs.Limits{MemoryMB: 64}}
		langs.Policy(jobs.Policy{}).Normalize(&j)
		require.EqualValues(t, 64, j.Limits.MemoryMB)

		j = jobs.Job{Lang: "cpp", Code: "int main(){}"}
		langs.Policy(jobs.Policy{MaxLimits: jobs.Limits{MemoryMB: 300}}).Normalize(&j)
		require.EqualValues(t, 300, j.Limits.MemoryMB)
	})

	t.Run("DefaultFollowsLowerCap", func(t *testing.T) {
		t.Parallel()

		p := langs.Policy(jobs.Policy{MaxLimits: jobs.Limits{TimeoutMS: 5000, MemoryMB: 128}}).WithDefaults()
		require.Equal(t, int64(5000), p.DefaultLimits.TimeoutMS)
		require.Equal(t, int64(128), p.DefaultLimits.MemoryMB)
		require.NoError(t, p.Check())
	})
}

func TestPolicyValidatePolicy(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name   string
		policy jobs.Policy
		want   string
	}{
		{"Default", langs.Policy(jobs.Policy{}), ""},
		{"DefaultOverCap", langs.Policy(jobs.Policy{MaxLimits: jobs.Limits{Pids: 10}, DefaultLimits: jobs.Limits{Pids: 20}}),
			"jobs: policy: default limits.pids 20 processes exceeds the cap 10"},
		{"UppercaseAlias", jobs.Policy{Languages: []jobs.Language{{Name: "python", Aliases: []string{"Py"}}}},
			`jobs: policy: language name "Py" is not lowercase`},
		{"SharedAlias", jobs.Policy{Languages: []jobs.Language{{Name: "python", Aliases: []string{"py"}}, {Name: "pypy", Aliases: []string{"py"}}}},
			`jobs: policy: "py" names both python and pypy`},
		{"EmptyLanguages", jobs.Policy{Languages: []jobs.Language{}}, "jobs: policy: Languages is empty (langs.Catalog has sandq's)"},
		{"NoLanguages", jobs.Policy{}, "jobs: policy: Languages is empty (langs.Catalog has sandq's)"},
		{"RetryOverCap", langs.Policy(jobs.Policy{DefaultMaxRetry: 5, MaxRetryCap: 2}), "jobs: policy: DefaultMaxRetry 5 exceeds MaxRetryCap 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := tt.policy.WithDefaults().Check()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
		})
	}
}
