package jobs_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// FuzzDecodeAndValidate: any job JSON a producer (or anyone with Redis
// access) hands sandq is taken by the worker's path (DecodeJob, then
// Validate and Normalize):
//   - a payload DecodeJob takes is a single valid JSON object;
//   - Validate does not modify the job and refuses with a *ValidationError;
//   - a job Validate accepts has only local, NUL-free, bounded, distinct,
//     non-nested file paths, valid output globs and NUL-free args and env
//     (assertAccepted);
//   - Normalize is idempotent and its result validates again.
//
// The task codec around it (NewTask, DecodeTask) is fuzzed by the store's
// FuzzTaskCodec.
func FuzzDecodeAndValidate(f *testing.F) {
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
		j, err := jobs.DecodeJob(payload)
		if err != nil {
			return
		}
		if !json.Valid(payload) {
			t.Fatalf("DecodeJob took a payload that is not one JSON value: %q", payload)
		}
		p := langs.Policy(jobs.Policy{})
		before := mustJSON(t, j)
		err = p.Validate(&j)
		if after := mustJSON(t, j); after != before {
			t.Fatalf("Validate modified the job:\n%s\n%s", before, after)
		}
		if err != nil {
			if ve := (*jobs.ValidationError)(nil); !errors.As(err, &ve) {
				t.Fatalf("Validate returned %T (%v), not a *ValidationError", err, err)
			}
			return
		}
		assertAccepted(t, p, &j)

		p.Normalize(&j)
		once := mustJSON(t, j)
		p.Normalize(&j)
		if twice := mustJSON(t, j); twice != once {
			t.Fatalf("Normalize is not idempotent:\n%s\n%s", once, twice)
		}
		if err := p.Validate(&j); err != nil {
			t.Fatalf("a normalized valid job no longer validates: %v\n%s", err, once)
		}
		assertAccepted(t, p, &j)
		if !jobs.ValidID(j.ID) {
			t.Fatalf("normalized job has ID %q", j.ID)
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
