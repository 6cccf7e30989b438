package e2e

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/jobs"
)

// retentionTTL is the workers' --artifact-ttl in these tests: long enough
// to look at a job's artifacts after its result arrives on a busy machine,
// short enough to wait for.
const retentionTTL = 12 * time.Second

// waitGone polls present until it returns nothing, for at most d.
func waitGone(t *testing.T, d time.Duration, what string, present func() []string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := present()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there %s later: %v", what, d, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// retention runs the scenario both stores share: job 1's artifacts are
// there when its result arrives; job 2 runs half a TTL later; job 1's
// artifacts are gone after the TTL while job 2's, younger, are still
// there; then job 2's go too. present lists a job's artifacts still in the
// store.
func retention(t *testing.T, e *env, w *worker, job1 jobs.Job, check1 func(jobs.Result), present func(jobs.Result) []string) {
	// Job 1's artifacts are uploaded after enqueued (their age counts from
	// then) and before done1 (a loaded machine can put seconds between).
	enqueued1 := time.Now()
	r1 := e.wait(e.enqueue(job1), 2*time.Minute)
	done1 := time.Now()
	require.Equal(t, jobs.StatusSucceeded, r1.Status, r1.Stderr)
	require.Empty(t, r1.ArtifactErrors)
	require.NotEmpty(t, r1.Artifacts)
	require.Len(t, present(r1), len(r1.Artifacts), "all there when the result arrives")
	check1(r1)

	time.Sleep(time.Until(done1.Add(retentionTTL / 2)))
	job2 := py("open('late.txt', 'w').write('late')")
	job2.OutputFiles = []string{"late.txt"}
	r2 := e.wait(e.enqueue(job2), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r2.Status, r2.Stderr)
	require.Len(t, present(r2), 1)

	waitGone(t, retentionTTL+30*time.Second, "job 1's artifacts", func() []string { return present(r1) })
	require.Greater(t, time.Since(enqueued1), retentionTTL-2*time.Second, "not before the TTL")
	require.Len(t, present(r2), 1, "job 2's artifacts, younger than the TTL, stay")
	w.waitLog(`"artifacts swept"`, 10*time.Second)

	waitGone(t, retentionTTL+30*time.Second, "job 2's artifacts", func() []string { return present(r2) })
}

func TestArtifactRetentionS3(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m, w := e.s3Worker("--artifact-ttl", retentionTTL.String(), "--artifact-sweep-interval", "300ms")
	ctx := context.Background()
	cli, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	require.NoError(t, err)
	// An input file outside the artifact prefix is not the sweeper's.
	inputs, err := artifacts.NewS3(artifacts.S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: "artifacts"})
	require.NoError(t, err)
	require.NoError(t, inputs.Put(ctx, "inputs/keep.txt", strings.NewReader("keep"), 4, "text/plain"))

	job := py(`
import matplotlib.pyplot as plt
plt.plot([1, 2])
plt.show()
open("page.html", "w").write("<script>alert(document.domain)</script>")
open("data.csv", "w").write("a\n1\n")
`)
	job.Limits.TimeoutMS = 60_000
	job.PlotFormats = []string{"png", "svg"}
	job.OutputFiles = []string{"*.html", "*.csv"}
	present := func(r jobs.Result) []string {
		var left []string
		for o := range cli.ListObjects(ctx, "artifacts", minio.ListObjectsOptions{Prefix: e.prefix + "/" + r.ID + "/", Recursive: true}) {
			require.NoError(t, o.Err)
			left = append(left, o.Key)
		}
		return left
	}
	var urls []string
	check := func(r jobs.Result) {
		require.Equal(t, []string{"data.csv", "page.html", "plots/plot-001.png", "plots/plot-001.svg"}, artifactNames(r))
		for _, a := range r.Artifacts {
			// HTML and SVG are downloads, not pages of the store's origin:
			// stored so, and so through the presigned URL.
			attach := strings.HasSuffix(a.Name, ".html") || strings.HasSuffix(a.Name, ".svg")
			info, err := cli.StatObject(ctx, "artifacts", a.Key, minio.StatObjectOptions{})
			require.NoError(t, err)
			require.Equal(t, a.ContentType, info.ContentType, a.Name)
			resp, err := http.Get(a.URL)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, a.Name)
			if attach {
				require.True(t, strings.HasPrefix(info.Metadata.Get("Content-Disposition"), "attachment"), a.Name)
				require.True(t, strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment"), a.Name)
			} else {
				require.Empty(t, resp.Header.Get("Content-Disposition"), a.Name)
			}
			// Presigned URLs last no longer than the artifacts.
			u, err := url.Parse(a.URL)
			require.NoError(t, err)
			require.Equal(t, "12", u.Query().Get("X-Amz-Expires"), a.URL)
			urls = append(urls, a.URL)
		}
	}
	retention(t, e, w, job, check, present)

	for _, u := range urls {
		resp, err := http.Get(u)
		require.NoError(t, err)
		resp.Body.Close()
		require.NotEqual(t, http.StatusOK, resp.StatusCode, "a URL of a deleted artifact")
	}
	_, err = cli.StatObject(ctx, "artifacts", "inputs/keep.txt", minio.StatObjectOptions{})
	require.NoError(t, err, "objects outside the artifact prefix stay")

	// A TTL of days also sets the bucket lifecycle rule, the backstop for
	// when no worker runs (rounded up to whole days). A 12 s TTL set none.
	_, err = cli.GetBucketLifecycle(ctx, "artifacts")
	require.Equal(t, "NoSuchLifecycleConfiguration", minio.ToErrorResponse(err).Code, "%v", err)
	e.startWorker("--s3-endpoint", m.Endpoint, "--s3-access-key", m.AccessKey, "--s3-secret-key", m.SecretKey,
		"--s3-bucket", "artifacts", "--artifact-prefix", e.prefix, "--artifact-ttl", "36h", "--warm", "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		cfg, err := cli.GetBucketLifecycle(ctx, "artifacts")
		if err == nil {
			require.Len(t, cfg.Rules, 1)
			rule := cfg.Rules[0]
			require.Equal(t, artifacts.LifecycleRuleID(e.prefix), rule.ID)
			require.Equal(t, "Enabled", rule.Status)
			require.Equal(t, e.prefix+"/", rule.RuleFilter.Prefix)
			require.EqualValues(t, 2, rule.Expiration.Days)
			break
		}
		require.Equal(t, "NoSuchLifecycleConfiguration", minio.ToErrorResponse(err).Code, "%v", err)
		require.True(t, time.Now().Before(deadline), "no lifecycle rule 30 s after the worker started")
		time.Sleep(100 * time.Millisecond)
	}
}

func TestArtifactRetentionLocal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	// Old files outside the artifact prefix are not the sweeper's.
	old := time.Now().Add(-48 * time.Hour)
	for _, p := range []string{"inputs/keep.txt", e.prefix + "x/j/keep.txt"} {
		p = filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("keep"), 0o644))
		require.NoError(t, os.Chtimes(p, old, old))
	}
	w := e.startWorker("--artifact-dir", dir, "--artifact-prefix", e.prefix,
		"--artifact-ttl", retentionTTL.String(), "--artifact-sweep-interval", "300ms")

	job := py(`
import os
os.makedirs("out/deep")
open("out/deep/data.csv", "w").write("a\n1\n")
open("result.txt", "w").write("result")
`)
	job.OutputFiles = []string{"result.txt", "out/**"}
	present := func(r jobs.Result) []string {
		var left []string
		for _, a := range r.Artifacts {
			if _, err := os.Lstat(a.URL); err == nil {
				left = append(left, a.URL)
			} else {
				require.ErrorIs(t, err, os.ErrNotExist)
			}
		}
		return left
	}
	var jobDir string
	check := func(r jobs.Result) {
		require.Equal(t, []string{"out/deep/data.csv", "result.txt"}, artifactNames(r))
		jobDir = filepath.Join(dir, e.prefix, r.ID)
		for _, a := range r.Artifacts {
			require.Equal(t, filepath.Join(jobDir, a.Name), a.URL)
		}
	}
	retention(t, e, w, job, check, present)

	// The sweep removes the files as it walks, then the directories left
	// empty: the files may be gone a moment before their directories are.
	waitGone(t, 10*time.Second, "the jobs' directories, left empty,", func() []string {
		entries, err := os.ReadDir(filepath.Join(dir, e.prefix))
		require.NoError(t, err, "the prefix directory stays")
		var left []string
		for _, d := range entries {
			left = append(left, d.Name())
		}
		return left
	})
	_, err := os.Lstat(jobDir)
	require.ErrorIs(t, err, os.ErrNotExist, "the job's directories, left empty, are removed")
	for _, p := range []string{"inputs/keep.txt", e.prefix + "x/j/keep.txt"} {
		_, err := os.Stat(filepath.Join(dir, p))
		require.NoError(t, err, "outside the artifact prefix: %s", p)
	}
}
