package store_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// FuzzTaskCodec: any payload on a queue goes through the worker's
// DecodeTask:
//   - a payload DecodeTask refuses is poison (ErrPoison, asynq.SkipRetry:
//     archived, never retried); one it takes is a single valid JSON object,
//     and the same bytes under another task type are poison;
//   - a job that validates, normalized, survives NewTask → DecodeTask
//     unchanged, and the decoded copy validates and normalizes to itself.
//
// What Validate promises of the jobs it accepts is fuzzed by the jobs
// package's FuzzDecodeAndValidate.
func FuzzTaskCodec(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","lang":"python","code":"print(1)"}`,
		`{"lang":"py","code":"x","files":[{"path":"d/a.txt","content_b64":"aGk="}],"output_files":["out/*.csv","**/*.png"]}`,
		`{"lang":"python","code":"x","files":[{"path":"../etc/passwd"}]}`,
		`{"lang":"python","code":"x","files":[{"path":"/abs"}]}`,
		`{"lang":"python","code":"x","files":[{"path":"a\u0000b"}]}`,
		`{"lang":"python","code":"x","files":[{"path":"d","content_b64":"eA=="},{"path":"d/e"}]}`,
		`{"lang":"python","code":"x","files":[{"path":"d/e/f"},{"path":"./d/e"}]}`,
		`{"lang":"python","code":"x","files":[{"path":"main.py"}]}`,
		`{"lang":"python","code":"x","output_files":["../*"]}`,
		`{"lang":"python","code":"x","output_files":["a//*"]}`,
		`{"lang":"python","code":"x","limits":{"timeout_ms":-1,"memory_mb":99999999}}`,
		`{"lang":"python","code":"x","limits":{"cpus":1e308}}`,
		`{"lang":"python","code":"x","env":{"A B":"1"},"args":["a\u0000"]}`,
		`{"lang":"python","code":"x","libraries":["numpy==2.1","--index-url=http://evil"]}`,
		`{"lang":"python","code":"x","max_retry":-1}`,
		`{"lang":"python","code":"x","tenant":"t:1","tags":{"k":"v"},"queue":"batch","isolation":"fresh"}`,
		"{\"lang\":\"python\",\"code\":\"\xff\xfe\",\"files\":[{\"path\":\"\xc0\xaf\"}]}",
		`{"lang":"python","code":"x"} trailing`,
		`{"lang":"python","code":"x"}{"lang":"python","code":"y"}`,
		`{"lang":"python","code":"x","unknown":1}`,
		`[]`, ``, `null`, `{"lang":"python","code":"x","files":[{"path":"a","key":"k/../x"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		j, err := store.DecodeTask(asynq.NewTask(store.TypeExec, payload))
		if err != nil {
			if !errors.Is(err, store.ErrPoison) || !errors.Is(err, asynq.SkipRetry) {
				t.Fatalf("DecodeTask error %v does not wrap ErrPoison and asynq.SkipRetry", err)
			}
			return
		}
		if !json.Valid(payload) {
			t.Fatalf("DecodeTask took a payload that is not one JSON value: %q", payload)
		}
		if _, err := store.DecodeTask(asynq.NewTask(store.TypeExec+"x", payload)); !errors.Is(err, store.ErrPoison) {
			t.Fatalf("DecodeTask took the payload under another task type: %v", err)
		}
		p := langs.Policy(jobs.Policy{})
		if p.Validate(&j) != nil {
			return
		}
		p.Normalize(&j)
		once := mustJSON(t, j)
		task, opts := store.NewTask(j)
		if len(opts) == 0 || store.TaskTimeout(j.Limits) <= store.TaskGrace {
			t.Fatalf("NewTask: %d options, timeout %v", len(opts), store.TaskTimeout(j.Limits))
		}
		back, err := store.DecodeTask(task)
		if err != nil {
			t.Fatalf("re-decode of our own task: %v", err)
		}
		if b := mustJSON(t, back); b != once {
			t.Fatalf("the task codec changed the job:\n%s\n%s", once, b)
		}
		if err := p.Validate(&back); err != nil {
			t.Fatalf("the re-decoded job no longer validates: %v", err)
		}
		p.Normalize(&back)
		if b := mustJSON(t, back); b != once {
			t.Fatalf("the re-decoded job normalizes to another job:\n%s\n%s", once, b)
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
