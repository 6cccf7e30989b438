package jobs_test

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// FuzzJobPaths fuzzes the path rules of a job (checkRelPath through
// Validate) directly, without the JSON around them: two input file paths
// and one output glob.
//   - A file path Validate accepts is local (filepath.IsLocal), has no NUL
//     or control character, is valid UTF-8 and within the length caps, and
//     joined to a work dir stays strictly below it; ValidSessionPath
//     accepts it too (one rule for jobs and sessions), and the normalized
//     job (its path cleaned) validates again.
//   - Two paths each accepted alone are refused together exactly when
//     they name the same file or one lies below the other.
//   - An output glob Validate accepts is accepted by ValidGlob, is
//     relative, has no "", "." or ".." segment and every segment is a valid
//     path.Match pattern.
func FuzzJobPaths(f *testing.F) {
	for _, s := range [][3]string{
		{"a.txt", "b.txt", "*.csv"},
		{"d/a.txt", "d/b/c.txt", "out/**"},
		{"d", "d/e", "**/*.png"},
		{"d/e", "./d/e", "d/[a-z]?.txt"},
		{"a/", "a", "a/"},
		{"..", "a/../..", "../*"},
		{"/etc/passwd", "a/../../b", "/tmp/*"},
		{"a\x00b", "a\nb", "a\x00*"},
		{"\xff\xfe", "\xc0\xaf", "\xff*"},
		{"main.py", "./main.py", "[a-"},
		{".", "a/..", "."},
		{strings.Repeat("a", 256), strings.Repeat("a/", 513), "**/" + strings.Repeat("b", 300)},
		{"\u202etxt.exe", "a b/c d", "a//b"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, p1, p2, glob string) {
		p := langs.Policy(jobs.Policy{})
		job := func(files ...string) *jobs.Job {
			j := &jobs.Job{Lang: "python", Code: "x"}
			for _, fp := range files {
				j.Files = append(j.Files, jobs.File{Path: fp})
			}
			return j
		}
		ok1 := checkPathRule(t, p, job(p1), p1)
		ok2 := checkPathRule(t, p, job(p2), p2)

		pair := job(p1, p2)
		err := p.Validate(pair)
		if err == nil {
			assertAccepted(t, p, pair)
		}
		if ok1 && ok2 {
			c1, c2 := path.Clean(p1), path.Clean(p2)
			collide := c1 == c2 || strings.HasPrefix(c1, c2+"/") || strings.HasPrefix(c2, c1+"/")
			if collide != (err != nil) {
				t.Fatalf("files %q and %q: collide=%v, but Validate says %v", p1, p2, collide, err)
			}
		} else if err == nil {
			t.Fatalf("files %q and %q accepted together, but not each alone", p1, p2)
		}

		gj := &jobs.Job{Lang: "python", Code: "x", OutputFiles: []string{glob}}
		if err := p.Validate(gj); err != nil {
			assertValidationError(t, err)
			return
		}
		assertLocalGlob(t, glob)
	})
}

// checkPathRule validates j, whose only file has path fp, and checks what
// an accepted path must satisfy. It reports whether fp was accepted.
func checkPathRule(t *testing.T, p jobs.Policy, j *jobs.Job, fp string) bool {
	t.Helper()
	if err := p.Validate(j); err != nil {
		assertValidationError(t, err)
		return false
	}
	assertAccepted(t, p, j)
	if err := jobs.ValidSessionPath(fp, false); err != nil {
		t.Fatalf("job file path %q accepted, but not as a session path: %v", fp, err)
	}
	p.Normalize(j)
	if j.Files[0].Path != path.Clean(fp) {
		t.Fatalf("Normalize made %q of %q", j.Files[0].Path, fp)
	}
	if err := p.Validate(j); err != nil {
		t.Fatalf("path %q: the normalized job no longer validates: %v", fp, err)
	}
	return true
}

func assertValidationError(t *testing.T, err error) {
	t.Helper()
	if ve := (*jobs.ValidationError)(nil); !errors.As(err, &ve) {
		t.Fatalf("Validate returned %T (%v), not a *ValidationError", err, err)
	}
}

// assertAccepted checks what every job Validate accepted must satisfy.
func assertAccepted(t *testing.T, p jobs.Policy, j *jobs.Job) {
	t.Helper()
	p = p.WithDefaults()
	if j.ID != "" && !jobs.ValidID(j.ID) {
		t.Fatalf("accepted ID %q", j.ID)
	}
	if j.Tenant != "" && jobs.CheckName(j.Tenant, jobs.MaxTenantBytes) != "" {
		t.Fatalf("accepted tenant %q", j.Tenant)
	}
	if len(j.Files) > p.MaxFiles || len(j.OutputFiles) > p.MaxOutputFiles {
		t.Fatalf("accepted %d files and %d output globs", len(j.Files), len(j.OutputFiles))
	}
	clean := make([]string, len(j.Files))
	for i, f := range j.Files {
		assertLocalPath(t, f.Path)
		clean[i] = path.Clean(f.Path)
		if f.Mode&^0o777 != 0 {
			t.Fatalf("accepted mode %O of %q", f.Mode, f.Path)
		}
		if f.Key != "" && (len(f.ContentB64) > 0 || jobs.CheckInputKey(f.Key) != "") {
			t.Fatalf("accepted key %q of %q", f.Key, f.Path)
		}
	}
	for i, a := range clean {
		for k, b := range clean {
			if i != k && (a == b || strings.HasPrefix(b, a+"/")) {
				t.Fatalf("accepted files %q and %q: the same file, or one below the other", j.Files[i].Path, j.Files[k].Path)
			}
		}
	}
	for _, g := range j.OutputFiles {
		assertLocalGlob(t, g)
	}
	for _, a := range j.Args {
		if strings.IndexByte(a, 0) >= 0 {
			t.Fatalf("accepted arg %q", a)
		}
	}
	for k, v := range j.Env {
		if !jobs.IsEnvName(k) || strings.IndexByte(v, 0) >= 0 {
			t.Fatalf("accepted env %q=%q", k, v)
		}
	}
	for _, lim := range jobs.LimitTable {
		v := lim.Get(&j.Limits)
		if !(v >= 0) || v > lim.Get(&p.MaxLimits) || v != 0 && v < lim.Min {
			t.Fatalf("accepted limits.%s = %v", lim.Name, v)
		}
	}
}

// assertLocalPath checks an accepted file path: it names a file strictly
// inside the work dir, whatever the work dir is.
func assertLocalPath(t *testing.T, p string) {
	t.Helper()
	switch {
	case !filepath.IsLocal(p):
		t.Fatalf("accepted path %q is not local", p)
	case strings.IndexByte(p, 0) >= 0, strings.ContainsFunc(p, isControl):
		t.Fatalf("accepted path %q has a NUL or control character", p)
	case !utf8.ValidString(p):
		t.Fatalf("accepted path %q is not valid UTF-8", p)
	case len(p) > jobs.MaxPathBytes:
		t.Fatalf("accepted path of %d bytes", len(p))
	}
	clean := path.Clean(p)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		t.Fatalf("accepted path %q cleans to %q", p, clean)
	}
	for c := range strings.SplitSeq(clean, "/") {
		if len(c) > jobs.MaxPathComponent {
			t.Fatalf("accepted path %q has a component of %d bytes", p, len(c))
		}
	}
	const root = "/sandq/work"
	if full := filepath.Join(root, p); !strings.HasPrefix(full, root+"/") {
		t.Fatalf("accepted path %q resolves to %q, outside %s", p, full, root)
	}
}

// assertLocalGlob checks an accepted output glob.
func assertLocalGlob(t *testing.T, g string) {
	t.Helper()
	if err := jobs.ValidGlob(g); err != nil {
		t.Fatalf("accepted output glob %q, which the agent refuses: %v", g, err)
	}
	if !filepath.IsLocal(g) || strings.IndexByte(g, 0) >= 0 || strings.ContainsFunc(g, isControl) || !utf8.ValidString(g) || len(g) > jobs.MaxPathBytes {
		t.Fatalf("accepted output glob %q is not a local, NUL-free, bounded UTF-8 path", g)
	}
	for seg := range strings.SplitSeq(g, "/") {
		if seg == "" || seg == "." || seg == ".." {
			t.Fatalf("accepted output glob %q has segment %q", g, seg)
		}
		if _, err := path.Match(seg, ""); err != nil {
			t.Fatalf("accepted output glob %q has a bad segment %q: %v", g, seg, err)
		}
	}
}

func isControl(r rune) bool { return r < ' ' || r == 0x7f }
