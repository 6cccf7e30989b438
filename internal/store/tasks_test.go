package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

func optionStrings(opts []asynq.Option) []string {
	s := make([]string, len(opts))
	for i, o := range opts {
		s[i] = o.String()
	}
	return s
}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()

	j := jobs.Job{
		ID: "job-1", Lang: "python", Code: "print(open('a.bin','rb').read())", Stdin: "in\n",
		Args: []string{"x"}, Env: map[string]string{"K": "V"},
		Files:       []jobs.File{{Path: "a.bin", ContentB64: []byte{0, 1, 2, 0xff}, Mode: 0o600}, {Path: "b", Key: "store/b"}},
		OutputFiles: []string{"*.png"}, Libraries: []string{"numpy"},
		Limits: jobs.Limits{TimeoutMS: 2500, CPUs: 0.5}, Isolation: jobs.IsolationFresh, Queue: jobs.QueueBatch,
		Tags: map[string]string{"t": "1"}, Tenant: "acme", MaxRetry: ptr(2),
	}
	langs.Policy(jobs.Policy{}).Normalize(&j)

	task, opts := store.NewTask(j)
	require.Equal(t, store.TypeExec, task.Type())
	require.Equal(t, []string{
		// 2 × 2.5 s + 60 s grace, + 10 min for installing the libraries.
		`TaskID("job-1")`, `Queue("batch")`, `Timeout(11m5s)`, `MaxRetry(2)`,
	}, optionStrings(opts))

	got, err := store.DecodeTask(task)
	require.NoError(t, err)
	if diff := cmp.Diff(j, got); diff != "" {
		t.Fatalf("decoded job (-want +got):\n%s", diff)
	}
}

func TestNewTaskExtraOptionsComeLast(t *testing.T) {
	t.Parallel()

	j := validJob()
	j.ID = "x"
	_, opts := store.NewTask(j, asynq.Queue("ns:default"))
	require.Equal(t, []string{
		`TaskID("x")`, `Queue("default")`, `Timeout(11m0s)`, `MaxRetry(3)`, `Queue("ns:default")`,
	}, optionStrings(opts))
}

func TestTaskTimeout(t *testing.T) {
	t.Parallel()

	require.Equal(t, 11*time.Minute, store.TaskTimeout(jobs.Limits{}), "zero: the worker fills it, up to the 5 min built-in cap")
	require.Equal(t, 62*time.Second, store.TaskTimeout(jobs.Limits{TimeoutMS: 1000}))
	require.Equal(t, 11*time.Minute, store.TaskTimeout(jobs.Limits{TimeoutMS: 300_000}))
}

func TestDecodeTaskPoison(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name    string
		typ     string
		payload string
		want    string // the error, or a prefix of it where the rest is encoding/json's
	}{
		{"NotJSON", store.TypeExec, "print(1)", "jobs: poison payload: skip retry for the task: not a JSON object"},
		{"Empty", store.TypeExec, "", "jobs: poison payload: skip retry for the task: not a JSON object"},
		{"Null", store.TypeExec, "null", "jobs: poison payload: skip retry for the task: not a JSON object"},
		{"Array", store.TypeExec, `[{"lang":"python"}]`, "jobs: poison payload: skip retry for the task: not a JSON object"},
		{"Truncated", store.TypeExec, `{"lang":"python","code":"pri`, "jobs: poison payload: skip retry for the task: unexpected EOF"},
		{"UnknownField", store.TypeExec, `{"lang":"python","code":"x","langauge":"go"}`,
			`jobs: poison payload: skip retry for the task: json: unknown field "langauge"`},
		{"WrongType", store.TypeExec, `{"lang":"python","code":"x","limits":{"timeout_ms":"10s"}}`,
			"jobs: poison payload: skip retry for the task: json: cannot unmarshal string into Go struct field "}, // the rest depends on the Go version,
		{"BadBase64", store.TypeExec, `{"lang":"python","code":"x","files":[{"path":"a","content_b64":"!!"}]}`,
			"jobs: poison payload: skip retry for the task: illegal base64 data at input byte 0"},
		{"TrailingData", store.TypeExec, `{"lang":"python","code":"x"} {"lang":"go"}`,
			"jobs: poison payload: skip retry for the task: unexpected data after the JSON object"},
		{"WrongTaskType", "email:send", `{"lang":"python","code":"x"}`,
			`jobs: poison payload: skip retry for the task: task type "email:send", want "sandq:exec"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			_, err := store.DecodeTask(asynq.NewTask(tt.typ, []byte(tt.payload)))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tt.want), "error %q, want prefix %q", err, tt.want)
			require.ErrorIs(t, err, store.ErrPoison)
			require.True(t, errors.Is(err, asynq.SkipRetry), "poison must make asynq skip retries")
		})
	}
}

func ptr[T any](v T) *T { return &v }

func validJob() jobs.Job { return jobs.Job{Lang: "python", Code: "print(1)"} }
