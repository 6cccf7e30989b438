package jobs

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hibiken/asynq"
)

// FuzzDecodeAndValidate: any payload a producer (or an attacker with
// Redis access) puts on a queue either fails to decode or validate, or is
// a job whose every path is local, which normalizes to a fixed point and
// survives a round trip through the task codec unchanged.
func FuzzDecodeAndValidate(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","lang":"python","code":"print(1)"}`,
		`{"lang":"py","code":"x","files":[{"path":"d/a.txt","content_b64":"aGk="}],"output_files":["out/*.csv","**/*.png"]}`,
		`{"lang":"python","code":"x","files":[{"path":"../etc/passwd"}]}`,
		`{"lang":"python","code":"x","files":[{"path":"/abs"}]}`,
		`{"lang":"python","code":"x","files":[{"path":"a\u0000b"}]}`,
		`{"lang":"python","code":"x","output_files":["../*"]}`,
		`{"lang":"python","code":"x","limits":{"timeout_ms":-1,"memory_mb":99999999}}`,
		`{"lang":"python","code":"x","env":{"A B":"1"},"args":["a\u0000"]}`,
		`{"lang":"python","code":"x","libraries":["numpy==2.1","--index-url=http://evil"]}`,
		`{"lang":"python","code":"x"} trailing`,
		`{"lang":"python","code":"x","unknown":1}`,
		`[]`, ``, `{"lang":"python","code":"x","files":[{"path":"a","key":"k/../x"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		j, err := DecodeTask(asynq.NewTask(TypeExec, payload))
		if err != nil {
			return
		}
		var p Policy
		if err := p.Validate(&j); err != nil {
			return
		}
		for _, file := range j.Files {
			if !filepath.IsLocal(file.Path) || strings.ContainsRune(file.Path, 0) {
				t.Fatalf("validated file path %q is not local", file.Path)
			}
		}
		for _, g := range j.OutputFiles {
			if strings.HasPrefix(g, "/") || g == ".." || strings.HasPrefix(g, "../") || strings.Contains(g, "/../") || strings.ContainsRune(g, 0) {
				t.Fatalf("validated output glob %q leaves the work dir", g)
			}
		}
		if !ValidID(j.ID) && j.ID != "" {
			t.Fatalf("validated job has invalid ID %q", j.ID)
		}
		p.Normalize(&j)
		once := j
		p.Normalize(&j)
		if !reflect.DeepEqual(once, j) {
			t.Fatalf("Normalize is not idempotent:\n%+v\n%+v", once, j)
		}
		if err := p.Validate(&j); err != nil {
			t.Fatalf("a normalized valid job no longer validates: %v", err)
		}
		if j.ID == "" {
			j.ID = "fuzz"
		}
		task, _ := NewTask(j)
		back, err := DecodeTask(task)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		a, _ := json.Marshal(j)
		b, _ := json.Marshal(back)
		if string(a) != string(b) {
			t.Fatalf("round trip changed the job:\n%s\n%s", a, b)
		}
	})
}

// FuzzSessionPath: a path ValidSessionPath accepts stays in the work dir.
func FuzzSessionPath(f *testing.F) {
	for _, s := range []string{"a.txt", "d/e/f", "../x", "/etc/passwd", "a/../../b", "a\x00b", ".", "", "a//b", "./a", "a/./b", "\u202e", strings.Repeat("a/", 600)} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p string, dir bool) {
		if ValidSessionPath(p, dir) != nil {
			return
		}
		if p == "" || p == "." {
			if !dir {
				t.Fatalf("%q accepted as a file", p)
			}
			return
		}
		if !filepath.IsLocal(p) || strings.ContainsRune(p, 0) || !utf8.ValidString(p) || len(p) > 1024 {
			t.Fatalf("accepted %q, which is not a local, clean, bounded path", p)
		}
	})
}
