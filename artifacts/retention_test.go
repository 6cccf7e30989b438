package artifacts_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/internal/miniotest"
)

func put(t *testing.T, s artifacts.Store, keys ...string) {
	t.Helper()
	for _, k := range keys {
		require.NoError(t, s.Put(context.Background(), k, strings.NewReader(k), int64(len(k)), ""), k)
	}
}

// keys lists the store's keys under dir, sorted.
func keys(t *testing.T, s artifacts.Store, dir string) []string {
	t.Helper()
	var ks []string
	require.NoError(t, s.List(context.Background(), dir, func(o artifacts.Object) error {
		require.False(t, o.ModTime.IsZero(), o.Key)
		require.EqualValues(t, len(o.Key), o.Size, o.Key) // put stores the key as the body
		ks = append(ks, o.Key)
		return nil
	}))
	slices.Sort(ks)
	return ks
}

func newS3(t *testing.T, bucket string) (*artifacts.S3, *minio.Client) {
	t.Helper()
	m := miniotest.Start(t)
	s, err := artifacts.NewS3(artifacts.S3Config{
		Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: bucket, URLExpiry: time.Minute,
	})
	require.NoError(t, err)
	cli, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	require.NoError(t, err)
	return s, cli
}

// sweepContract: objects under the prefix stored before the cutoff go,
// later ones stay, and nothing outside the prefix is touched. MinIO's
// LastModified cannot be backdated: the cutoff is a recorded time between
// two groups of uploads, then a time in the future.
func sweepContract(t *testing.T, s artifacts.Store) {
	ctx := context.Background()
	require.NoError(t, s.List(ctx, "p", func(artifacts.Object) error { return errors.New("no objects yet") }),
		"an empty store (no bucket yet) lists nothing")
	n, err := artifacts.Sweep(ctx, s, "p", time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, n)

	old := []string{"p/j1/a.txt", "p/j1/plots/plot-001.png", "p/j2/out/deep/b.csv"}
	outside := []string{"other/j3/c.txt", "px/j4/d.txt", "inputs/e.txt"}
	put(t, s, old...)
	put(t, s, outside...)
	time.Sleep(1100 * time.Millisecond) // S3 LastModified may count whole seconds
	mid := time.Now()
	time.Sleep(1100 * time.Millisecond)
	put(t, s, "p/j5/new.txt", "p/j1/late.txt")

	require.Equal(t, []string{"p/j1/a.txt", "p/j1/late.txt", "p/j1/plots/plot-001.png", "p/j2/out/deep/b.csv", "p/j5/new.txt"}, keys(t, s, "p"))
	require.Equal(t, []string{"p/j1/a.txt", "p/j1/late.txt", "p/j1/plots/plot-001.png", "p/j2/out/deep/b.csv", "p/j5/new.txt"}, keys(t, s, "/p/"))
	require.Len(t, keys(t, s, ""), 8)

	n, err = artifacts.Sweep(ctx, s, "p", mid)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, []string{"p/j1/late.txt", "p/j5/new.txt"}, keys(t, s, "p"), "newer objects stay")
	require.Equal(t, outside, append(keys(t, s, "other"), append(keys(t, s, "px"), keys(t, s, "inputs")...)...))
	_, err = s.Get(ctx, "p/j1/a.txt")
	require.ErrorIs(t, err, artifacts.ErrNotFound)
	rc, err := s.Get(ctx, "p/j1/late.txt")
	require.NoError(t, err)
	rc.Close()

	// A Sweeper's SweepOnce at a "now" past every object's TTL.
	sw := &artifacts.Sweeper{Store: s, Prefix: "p", TTL: time.Hour}
	r := sw.SweepOnce(ctx, time.Now().Add(time.Hour+time.Minute))
	require.NoError(t, r.Err)
	require.Equal(t, 2, r.Removed)
	require.Empty(t, keys(t, s, "p"))
	require.Len(t, keys(t, s, ""), 3, "other prefixes untouched")

	// Delete: a missing key is no error.
	require.NoError(t, s.Delete(ctx, "other/j3/c.txt", "other/j3/missing"))
	require.NoError(t, s.Delete(ctx))
	require.Equal(t, []string{"inputs/e.txt", "px/j4/d.txt"}, keys(t, s, ""))
}

func TestS3Sweep(t *testing.T) {
	t.Parallel()
	s, _ := newS3(t, "sweep")
	sweepContract(t, s)
}

func TestLocalSweepContract(t *testing.T) {
	t.Parallel()
	s, err := artifacts.NewLocal(t.TempDir())
	require.NoError(t, err)
	sweepContract(t, s)
}

func TestS3SweepManyObjects(t *testing.T) {
	t.Parallel()
	s, _ := newS3(t, "many")
	ctx := context.Background()
	// More than one DeleteObjects batch (1000 keys), uploaded in parallel.
	const n = 1234
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- s.Put(ctx, fmt.Sprintf("p/j%d/f%04d", i%10, i), strings.NewReader("x"), 1, "text/plain")
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	removed, err := artifacts.Sweep(ctx, s, "p", time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, n, removed)
	require.Empty(t, keys(t, s, "p"))
}

func TestS3Lifecycle(t *testing.T) {
	t.Parallel()
	s, cli := newS3(t, "lifecycle")
	ctx := context.Background()

	// Under a day: the sweeper alone; nothing is set (nor the bucket made).
	require.NoError(t, s.SetExpiration(ctx, "sandq", 23*time.Hour))
	ok, err := cli.BucketExists(ctx, "lifecycle")
	require.NoError(t, err)
	require.False(t, ok)

	// Another rule of the operator's is kept.
	require.NoError(t, s.EnsureBucket(ctx))
	theirs := lifecycle.Rule{ID: "operator-tmp", Status: "Enabled", RuleFilter: lifecycle.Filter{Prefix: "tmp/"},
		Expiration: lifecycle.Expiration{Days: 7}}
	require.NoError(t, cli.SetBucketLifecycle(ctx, "lifecycle", &lifecycle.Configuration{Rules: []lifecycle.Rule{theirs}}))

	rules := func() map[string]lifecycle.Rule {
		cfg, err := cli.GetBucketLifecycle(ctx, "lifecycle")
		require.NoError(t, err)
		m := map[string]lifecycle.Rule{}
		for _, r := range cfg.Rules {
			m[r.ID] = r
		}
		return m
	}
	// 36 h rounds up to 2 days; the rule is filtered on "sandq/".
	sw := &artifacts.Sweeper{Store: s, Prefix: "sandq", TTL: 36 * time.Hour}
	require.NoError(t, sw.SetLifecycle(ctx))
	got := rules()
	require.Len(t, got, 2)
	mine := got[artifacts.LifecycleRuleID("sandq")]
	require.Equal(t, "Enabled", mine.Status)
	require.Equal(t, "sandq/", mine.RuleFilter.Prefix)
	require.EqualValues(t, 2, mine.Expiration.Days)
	require.Equal(t, "tmp/", got["operator-tmp"].RuleFilter.Prefix)
	require.EqualValues(t, 7, got["operator-tmp"].Expiration.Days)

	// Again: unchanged. A new TTL replaces the rule, not adds one.
	require.NoError(t, sw.SetLifecycle(ctx))
	require.Len(t, rules(), 2)
	sw.TTL = 72 * time.Hour
	require.NoError(t, sw.SetLifecycle(ctx))
	got = rules()
	require.Len(t, got, 2)
	require.EqualValues(t, 3, got[artifacts.LifecycleRuleID("sandq")].Expiration.Days)

	// Another prefix has its own rule.
	require.NoError(t, s.SetExpiration(ctx, "/other/", 24*time.Hour))
	got = rules()
	require.Len(t, got, 3)
	require.Equal(t, "other/", got[artifacts.LifecycleRuleID("other")].RuleFilter.Prefix)
	require.EqualValues(t, 1, got[artifacts.LifecycleRuleID("other")].Expiration.Days)

	// The local store has no lifecycle: nothing to do.
	l, err := artifacts.NewLocal(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, (&artifacts.Sweeper{Store: l, Prefix: "sandq", TTL: 72 * time.Hour}).SetLifecycle(ctx))
}

func TestLifecycleDays(t *testing.T) {
	t.Parallel()
	for ttl, want := range map[time.Duration]int{
		time.Second: 1, 24 * time.Hour: 1, 24*time.Hour + time.Second: 2, 48 * time.Hour: 2, 30 * 24 * time.Hour: 30,
	} {
		require.Equal(t, want, artifacts.LifecycleDays(ttl), ttl)
	}
}

func TestS3LifecycleRefusedIsReportedNotFatal(t *testing.T) {
	t.Parallel()
	m := miniotest.Start(t)
	// Credentials MinIO refuses: the lifecycle rule cannot be set; Run
	// reports that beside the failed sweep and goes on.
	s, err := artifacts.NewS3(artifacts.S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: "wrong", Bucket: "b"})
	require.NoError(t, err)
	sw := &artifacts.Sweeper{Store: s, Prefix: "p", TTL: 48 * time.Hour, Interval: time.Hour}
	reports := make(chan artifacts.SweepReport, 1)
	sw.Report = func(r artifacts.SweepReport) { reports <- r }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sw.Run(ctx); close(done) }()
	r := <-reports
	cancel()
	<-done
	require.Error(t, r.LifecycleErr)
	require.Error(t, r.Err, "the sweep fails too with bad credentials")
}

func TestAttachment(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, ctype string
		want        bool
	}{
		{"plots/plot-003.html", "", true},
		{"a.HTM", "", true},
		{"plots/plot-001.svg", "", true},
		{"x.xhtml", "", true},
		{"feed.xml", "", true},
		{"noext", "text/html", true},
		{"noext", "text/html; charset=utf-8", true},
		{"x.bin", "image/svg+xml", true},
		{"x.bin", "application/xhtml+xml", true},
		{"x.bin", "bad/;;;", true},
		{"plots/plot-001.png", "", false},
		{"out/a.csv", "", false},
		{"a.txt", "", false},
		{"a.json", "", false},
		{"a.bin", "application/octet-stream", false},
	} {
		require.Equal(t, tt.want, artifacts.Attachment(tt.name, tt.ctype), "%s %s", tt.name, tt.ctype)
	}
}

func TestS3HTMLAndSVGAreDownloads(t *testing.T) {
	t.Parallel()
	s, cli := newS3(t, "attach")
	ctx := context.Background()
	for _, tt := range []struct {
		key, ctype, wantType string
		attach               bool
	}{
		{"p/j/plots/plot-003.html", artifacts.ContentType("plot-003.html"), "text/html; charset=utf-8", true},
		{"p/j/plots/plot-001.svg", artifacts.ContentType("plot-001.svg"), "image/svg+xml", true},
		{"p/j/page", "text/html", "text/html", true},
		{"p/j/plots/plot-001.png", "image/png", "image/png", false},
		{"p/j/out.csv", "", "text/csv; charset=utf-8", false},
	} {
		body := "<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>"
		require.NoError(t, s.Put(ctx, tt.key, strings.NewReader(body), int64(len(body)), tt.ctype))
		info, err := cli.StatObject(ctx, "attach", tt.key, minio.StatObjectOptions{})
		require.NoError(t, err)
		require.Equal(t, tt.wantType, info.ContentType, tt.key)
		cd := info.Metadata.Get("Content-Disposition")
		url, err := s.URL(ctx, tt.key)
		require.NoError(t, err)
		resp, err := http.Get(url)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.Equal(t, body, string(b))
		require.Equal(t, tt.wantType, resp.Header.Get("Content-Type"), tt.key)
		if !tt.attach {
			require.Empty(t, cd, tt.key)
			require.Empty(t, resp.Header.Get("Content-Disposition"), tt.key)
			continue
		}
		base := tt.key[strings.LastIndex(tt.key, "/")+1:]
		require.Equal(t, `attachment; filename=`+base, cd, "stored with the object: "+tt.key)
		require.Equal(t, `attachment; filename=`+base, resp.Header.Get("Content-Disposition"), "presigned URL: "+tt.key)
	}

	// An object stored without the header (by an older worker, by hand) is
	// still a download through URL.
	_, err := cli.PutObject(ctx, "attach", "p/j/old.html", strings.NewReader("<p>"), 3, minio.PutObjectOptions{ContentType: "text/html"})
	require.NoError(t, err)
	url, err := s.URL(ctx, "p/j/old.html")
	require.NoError(t, err)
	resp, err := http.Get(url)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "attachment; filename=old.html", resp.Header.Get("Content-Disposition"))
}

// TestLocalSweep backdates files: the cutoff to the second, temporary
// files, empty directories, symbolic links.
func TestLocalSweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := artifacts.NewLocal(dir)
	require.NoError(t, err)
	ctx := context.Background()
	now := time.Now()
	age := func(key string, d time.Duration) {
		require.NoError(t, os.Chtimes(filepath.Join(dir, key), now.Add(-d), now.Add(-d)))
	}
	put(t, s, "p/j1/a.txt", "p/j1/plots/x.png", "p/j2/b.txt", "p/j3/new.txt", "other/j4/old.txt", "pp/j5/old.txt")
	for _, k := range []string{"p/j1/a.txt", "p/j1/plots/x.png", "p/j2/b.txt", "other/j4/old.txt", "pp/j5/old.txt"} {
		age(k, 2*time.Hour)
	}
	age("p/j3/new.txt", 59*time.Minute)
	// Put's temporary files: an abandoned one goes, one being written stays.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p/j1/.put-123"), []byte("x"), 0o644))
	age("p/j1/.put-123", 3*time.Hour)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p/j3/.put-456"), []byte("x"), 0o644))
	// Symbolic links are not followed: old files they lead to stay, and
	// so do the links.
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("x"), 0o644))
	require.NoError(t, os.Chtimes(filepath.Join(outside, "victim"), now.Add(-5*time.Hour), now.Add(-5*time.Hour)))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "p/j2/linkdir")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dir, "p/j2/linkfile")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "p/empty/deeper"), 0o755))

	require.Equal(t, []string{"p/j1/a.txt", "p/j1/plots/x.png", "p/j2/b.txt", "p/j3/new.txt"}, keys(t, s, "p"),
		"List: regular files, no temporary files, no links")

	sw := &artifacts.Sweeper{Store: s, Prefix: "p", TTL: time.Hour}
	r := sw.SweepOnce(ctx, now)
	require.NoError(t, r.Err)
	require.Equal(t, 4, r.Removed, "3 artifacts and 1 abandoned temporary file")
	require.Equal(t, now.Add(-time.Hour), r.Cutoff)

	var left []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(dir, p)
		left = append(left, rel)
		return nil
	}))
	require.Equal(t, []string{".", "other", "other/j4", "other/j4/old.txt", "p",
		"p/j2", "p/j2/linkdir", "p/j2/linkfile", "p/j3", "p/j3/.put-456", "p/j3/new.txt",
		"pp", "pp/j5", "pp/j5/old.txt"}, left, "j1 and the empty dirs went; the prefix dir stays")
	_, err = os.Stat(filepath.Join(outside, "victim"))
	require.NoError(t, err)

	// Put into a job directory a sweep removed makes it again.
	put(t, s, "p/j1/again.txt")
	require.Equal(t, []string{"p/j1/again.txt", "p/j3/new.txt"}, keys(t, s, "p"))

	// A bad dir is refused, not swept as the whole store.
	_, err = artifacts.Sweep(ctx, s, "../x", now)
	require.ErrorContains(t, err, "bad dir")
}

func TestLocalGetOnlyRegularFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := artifacts.NewLocal(dir)
	require.NoError(t, err)
	ctx := context.Background()
	put(t, s, "p/j1/a.txt")
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "p/j1/link")))
	require.NoError(t, os.Symlink("a.txt", filepath.Join(dir, "p/j1/inside-link")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "p/j1/outdir")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "p/j1/fifo"), 0o644))
	for _, key := range []string{"p", "p/j1", "p/j1/", "p/j1/link", "p/j1/inside-link", "p/j1/outdir", "p/j1/outdir/secret",
		"p/j1/fifo", "p/j1/a.txt/x", "p/j1/missing"} {
		rc, err := s.Get(ctx, key)
		if rc != nil {
			rc.Close()
		}
		require.ErrorIs(t, err, artifacts.ErrNotFound, key)
	}
	for _, key := range []string{"../x", "/etc/passwd", ""} {
		_, err := s.Get(ctx, key)
		require.ErrorContains(t, err, "bad key", key)
	}
	rc, err := s.Get(ctx, "p/j1/a.txt")
	require.NoError(t, err)
	b, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	require.Equal(t, "p/j1/a.txt", string(b))
}

func TestSweeperRun(t *testing.T) {
	t.Parallel()
	s, err := artifacts.NewLocal(t.TempDir())
	require.NoError(t, err)
	put(t, s, "p/j1/a.txt", "q/j2/b.txt")
	reports := make(chan artifacts.SweepReport, 100)
	sw := &artifacts.Sweeper{Store: s, Prefix: "p", TTL: 50 * time.Millisecond, Interval: 20 * time.Millisecond,
		Report: func(r artifacts.SweepReport) { reports <- r }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sw.Run(ctx); close(done) }()
	removed := 0
	deadline := time.After(10 * time.Second)
	for removed == 0 {
		select {
		case r := <-reports:
			require.NoError(t, r.Err)
			require.NoError(t, r.LifecycleErr)
			removed += r.Removed
		case <-deadline:
			t.Fatal("no sweep removed the file in 10 s")
		}
	}
	require.Equal(t, 1, removed)
	require.Empty(t, keys(t, s, "p"))
	require.Equal(t, []string{"q/j2/b.txt"}, keys(t, s, "q"))
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestDefaultSweepInterval(t *testing.T) {
	t.Parallel()
	require.Equal(t, 10*time.Minute, artifacts.DefaultSweepInterval(24*time.Hour))
	require.Equal(t, 15*time.Second, artifacts.DefaultSweepInterval(time.Minute))
	require.Equal(t, time.Millisecond, artifacts.DefaultSweepInterval(time.Nanosecond))
	r := (&artifacts.Sweeper{}).SweepOnce(context.Background(), time.Now())
	require.ErrorContains(t, r.Err, "TTL must be positive")
}

func TestLimitURLExpiry(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ expiry, ttl, want time.Duration }{
		{24 * time.Hour, 24 * time.Hour, 24 * time.Hour},
		{24 * time.Hour, time.Hour, time.Hour},
		{time.Minute, time.Hour, time.Minute},
		{0, time.Hour, time.Hour},
		{24 * time.Hour, 0, 24 * time.Hour},
		{24 * time.Hour, -1, 24 * time.Hour},
		{24 * time.Hour, time.Millisecond, time.Second},
	} {
		c := artifacts.Config{S3: artifacts.S3Config{URLExpiry: tt.expiry}}
		c.LimitURLExpiry(tt.ttl)
		require.Equal(t, tt.want, c.S3.URLExpiry, "expiry %s, ttl %s", tt.expiry, tt.ttl)
	}
}
