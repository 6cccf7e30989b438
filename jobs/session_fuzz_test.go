package jobs_test

import (
	"encoding/json"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandq/sandq/langs"

	"github.com/sandq/sandq/jobs"
)

// FuzzSessionPath: ValidSessionPath, which checks the paths of a session's
// upload, download and files commands.
//   - A path it accepts (other than the work dir itself, "" or ".", where
//     allowDir) names something strictly inside the work dir: local, no NUL
//     or control character, valid UTF-8, within the length caps.
//   - allowDir only adds "" and ".": the two answers agree on every other
//     path, and "" and "." are refused without it.
//   - A refusal is a *ValidationError about "path".
func FuzzSessionPath(f *testing.F) {
	for _, s := range []string{
		"a.txt", "d/e/f", "../x", "..", "/etc/passwd", "a/../../b", "a/..", "a\x00b", ".", "", "a//b",
		"./a", "a/./b", "d/", "\u202e", "\xff\xfe", "a\x7fb", "a\tb", strings.Repeat("a/", 600),
		strings.Repeat("x", 256), "~root/.ssh", "a\\..\\b",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p string, dir bool) {
		errFile, errDir := jobs.ValidSessionPath(p, false), jobs.ValidSessionPath(p, true)
		err := errFile
		if dir {
			err = errDir
		}
		if p == "" || p == "." {
			if errDir != nil || errFile == nil {
				t.Fatalf("%q: allowDir %v, file %v; want the work dir only where allowDir", p, errDir, errFile)
			}
			return
		}
		if (errFile == nil) != (errDir == nil) {
			t.Fatalf("%q: allowDir changes the answer (%v, %v)", p, errFile, errDir)
		}
		if err != nil {
			var ve *jobs.ValidationError
			if !errors.As(err, &ve) || ve.Field != "path" {
				t.Fatalf("%q: refusal %T %v is not a *ValidationError about path", p, err, err)
			}
			return
		}
		assertLocalPath(t, p)
	})
}

// FuzzValidateSession: a session spec as the API, the producer and the
// worker read it (JSON), through Policy.ValidateSession, which fills its
// defaults.
//   - A refusal is a *ValidationError.
//   - An accepted spec has a canonical language with a session driver,
//     valid ID and tenant, only inline files at local, distinct, non-nested
//     paths, limits within the caps, and 0 < idle TTL <= lifetime <=
//     MaxSessionLifetime.
//   - Validation is idempotent across the wire: the producer validates,
//     sends the spec as JSON, and the worker validates again ("a producer
//     may not have used our client"); the worker must accept it and see the
//     same spec.
func FuzzValidateSession(f *testing.F) {
	for _, s := range []string{
		`{"lang":"python"}`,
		`{"id":"s1","lang":"py","limits":{"memory_mb":512},"files":[{"path":"d/a.csv","content_b64":"eA=="}],"env":{"A":"1"},"idle_ttl_seconds":60,"lifetime_seconds":30}`,
		`{"lang":"bash","idle_ttl_seconds":5000}`,
		`{"lang":"cpp"}`,
		`{"lang":"python","files":[{"path":"../x","content_b64":"eA=="}]}`,
		`{"lang":"python","files":[{"path":"/etc/shadow"}]}`,
		`{"lang":"python","files":[{"path":"a\u0000"}]}`,
		`{"lang":"python","files":[{"path":"a","key":"k"}]}`,
		`{"lang":"python","files":[{"path":"d"},{"path":"d/e"}]}`,
		`{"lang":"python","lifetime_seconds":86401}`,
		`{"lang":"python","idle_ttl_seconds":-1}`,
		`{"lang":"python","id":".."}`,
		`{"lang":"python","tenant":"a/b"}`,
		`{"lang":"python","limits":{"timeout_ms":-5}}`,
		`{"lang":"python","libraries":["-e git+http://x"]}`,
		"{\"lang\":\"python\",\"env\":{\"\xff\":\"1\"}}",
		`{"lang":"PYTHON3","env":{"PATH":"/x"}}`,
	} {
		f.Add([]byte(s))
	}
	sessionLangs := langs.Policy(jobs.Policy{}).SessionLangs()
	f.Fuzz(func(t *testing.T, data []byte) {
		var s jobs.SessionSpec
		if json.Unmarshal(data, &s) != nil {
			return
		}
		p := langs.Policy(jobs.Policy{})
		if err := p.ValidateSession(&s); err != nil {
			assertValidationError(t, err)
			return
		}
		if !slices.Contains(sessionLangs, s.Lang) {
			t.Fatalf("accepted language %q; sessions have %v", s.Lang, sessionLangs)
		}
		if s.ID != "" && !jobs.ValidID(s.ID) || s.Tenant != "" && jobs.CheckName(s.Tenant, jobs.MaxTenantBytes) != "" {
			t.Fatalf("accepted ID %q, tenant %q", s.ID, s.Tenant)
		}
		maxLife := int(jobs.MaxSessionLifetime / time.Second)
		if !(0 < s.IdleTTLSeconds && s.IdleTTLSeconds <= s.LifetimeSeconds && s.LifetimeSeconds <= maxLife) {
			t.Fatalf("accepted idle TTL %d s, lifetime %d s", s.IdleTTLSeconds, s.LifetimeSeconds)
		}
		// The checks a job's files, env and limits get (the lang and code
		// make the job itself valid).
		j := jobs.Job{Lang: s.Lang, Code: "-", Files: s.Files, Env: s.Env, Limits: s.Limits}
		assertAccepted(t, p, &j)
		for _, file := range s.Files {
			if file.Key != "" {
				t.Fatalf("accepted a session file by key: %+v", file)
			}
			if path.Clean(file.Path) == "." {
				t.Fatalf("accepted file path %q", file.Path)
			}
		}

		sent := mustJSON(t, s)
		var w jobs.SessionSpec
		if err := json.Unmarshal([]byte(sent), &w); err != nil {
			t.Fatalf("decode our own spec: %v", err)
		}
		if err := p.ValidateSession(&w); err != nil {
			t.Fatalf("the worker refuses a spec the producer accepted: %v\n%s", err, sent)
		}
		if got := mustJSON(t, w); got != sent {
			t.Fatalf("validating again changed the spec:\n%s\n%s", sent, got)
		}
	})
}
