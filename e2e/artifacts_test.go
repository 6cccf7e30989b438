package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/internal/miniotest"
	"github.com/sandq/sandq/jobs"
)

// s3Worker starts a private MinIO and a worker storing artifacts in it.
func (e *env) s3Worker(extra ...string) (*miniotest.Server, *worker) {
	e.t.Helper()
	m := miniotest.Start(e.t)
	args := append([]string{"--s3-endpoint", m.Endpoint, "--s3-access-key", m.AccessKey,
		"--s3-secret-key", m.SecretKey, "--s3-bucket", "artifacts", "--artifact-prefix", e.prefix}, extra...)
	return m, e.startWorker(args...)
}

func fetchURL(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

func artifactNames(r jobs.Result) []string {
	var names []string
	for _, a := range r.Artifacts {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	return names
}

func TestPlotCapture(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.s3Worker()
	// matplotlib, numpy and plotly imports plus a 4 MB HTML write take
	// seconds of CPU; on a busy 2-core machine that nears the default 10 s.
	slow := func(j jobs.Job) jobs.Job { j.Limits.TimeoutMS = 60_000; return j }
	r := e.wait(e.enqueue(slow(py(`
import matplotlib.pyplot as plt
import numpy as np
x = np.linspace(0, 2 * np.pi, 100)
plt.figure(figsize=(6, 4), dpi=100)
plt.plot(x, np.sin(x))
plt.title("sine")
plt.show()
fig = plt.figure(figsize=(3, 2), dpi=100)
plt.plot([1, 2, 3])
plt.savefig("a.png")
plt.figure(figsize=(5, 5), dpi=50)
plt.bar([1, 2], [3, 4])
import plotly.graph_objects as go
go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2])).show()
print("only this")
`))), 2*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Stderr)
	require.Equal(t, "only this\n", r.Stdout)
	require.Empty(t, r.Stderr)
	require.Empty(t, r.ArtifactErrors)
	// plot-001: the shown sine; plot-002: the savefig copy; plot-003: the
	// plotly HTML; plot-004: the bar chart still open at exit (the saved
	// figure is not captured twice).
	require.Equal(t, []string{"plots/plot-001.png", "plots/plot-002.png", "plots/plot-003.html", "plots/plot-004.png"}, artifactNames(r))
	sizes := map[string][2]int{"plots/plot-001.png": {600, 400}, "plots/plot-002.png": {300, 200}, "plots/plot-004.png": {250, 250}}
	for _, a := range r.Artifacts {
		require.Equal(t, "plot", a.Kind)
		require.True(t, strings.HasPrefix(a.Key, e.prefix+"/"+r.ID+"/plots/"), a.Key)
		body := fetchURL(t, a.URL)
		require.EqualValues(t, a.Size, len(body))
		if want, ok := sizes[a.Name]; ok {
			require.Equal(t, "image/png", a.ContentType)
			cfg, err := png.DecodeConfig(bytes.NewReader(body))
			require.NoError(t, err, a.Name)
			require.Equal(t, want, [2]int{cfg.Width, cfg.Height}, a.Name)
		} else {
			require.Equal(t, "text/html; charset=utf-8", a.ContentType)
			require.Contains(t, string(body), "<html>")
			require.Contains(t, string(body), "plotly", "self-contained: plotly.js is inlined")
			require.Greater(t, len(body), 1<<20, "plotly.js is inlined, not loaded from a CDN")
		}
	}

	// SVG when asked.
	job := slow(py("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"))
	job.PlotFormats = []string{"png", "svg"}
	r = e.wait(e.enqueue(job), 2*time.Minute)
	require.Equal(t, []string{"plots/plot-001.png", "plots/plot-001.svg"}, artifactNames(r))
}

func TestOutputFilesAndDownload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.s3Worker()
	job := py(`
import os
os.makedirs("out/deep")
open("result.csv", "w").write("a,b\n1,2\n")
open("notes.txt", "w").write("not asked for")
open("out/deep/data.bin", "wb").write(bytes(range(256)))
`)
	job.OutputFiles = []string{"*.csv", "out/**"}
	r := e.wait(e.enqueue(job), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Stderr)
	require.Equal(t, []string{"out/deep/data.bin", "result.csv"}, artifactNames(r))
	for _, a := range r.Artifacts {
		require.Equal(t, "file", a.Kind)
		require.Equal(t, e.prefix+"/"+r.ID+"/"+a.Name, a.Key)
	}
	require.Equal(t, "a,b\n1,2\n", string(fetchURL(t, r.Artifacts[1].URL)))

	out := t.TempDir()
	cmd := exec.Command(bins.enqueue, "--prefix", e.prefix, "--queue-prefix", e.queuePrefix, "artifacts", r.ID, "--out", out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	got, err := os.ReadFile(filepath.Join(out, "out/deep/data.bin"))
	require.NoError(t, err)
	require.Len(t, got, 256)
	require.Equal(t, byte(255), got[255])
	got, err = os.ReadFile(filepath.Join(out, "result.csv"))
	require.NoError(t, err)
	require.Equal(t, "a,b\n1,2\n", string(got))
}

func TestCollectorNeverLeavesWorkDir(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.s3Worker()
	job := py(`
import os
os.symlink("/etc/passwd", "passwd")
os.symlink("/sandq/agent", "agent")
os.symlink("/etc", "etcdir")
for src in ("/etc/passwd", "/sandq/agent", "/tmp"):
    try:
        os.link(src, "hard-" + os.path.basename(src))
        print("linked", src)
    except OSError as e:
        print("no hard link to", src, e.strerror)
open("mine.txt", "w").write("mine")
`)
	job.OutputFiles = []string{"*", "**/*"}
	r := e.wait(e.enqueue(job), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Stderr)
	require.NotContains(t, r.Stdout, "linked")
	require.Equal(t, []string{"main.py", "mine.txt"}, artifactNames(r))
	for _, a := range r.Artifacts {
		body := fetchURL(t, a.URL)
		require.NotContains(t, string(body), "root:x:0:0")
	}
	dropped := strings.Join(r.DroppedArtifacts, "\n")
	for _, name := range []string{"passwd", "agent", "etcdir"} {
		require.Contains(t, dropped, name+": not a regular file")
	}
}

func TestInputFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m, _ := e.s3Worker()
	store, err := artifacts.NewS3(artifacts.S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: "artifacts"})
	require.NoError(t, err)
	put := func(tenant, key, body string) {
		k, err := artifacts.InputKey(artifacts.DefaultInputsPrefix, tenant, key)
		require.NoError(t, err)
		require.NoError(t, store.Put(context.Background(), k, strings.NewReader(body), int64(len(body)), "text/plain"))
	}
	put("", "data/big.txt", "from the shared inputs")
	put("acme", "data/big.txt", "from acme's inputs")

	job := py("print(open('data/inline.txt').read(), open('stored.txt').read())")
	job.Files = []jobs.File{
		{Path: "data/inline.txt", ContentB64: []byte("inline")},
		{Path: "stored.txt", Key: "data/big.txt"},
	}
	r := e.wait(e.enqueue(job), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Stderr)
	require.Equal(t, "inline from the shared inputs\n", r.Stdout)

	// The same key for a tenant's job reads the tenant's own inputs, and
	// another tenant has none under it.
	job.Tenant = "acme"
	r = e.wait(e.enqueue(job), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, r.Stderr)
	require.Equal(t, "inline from acme's inputs\n", r.Stdout)
	job.Tenant = "globex"
	r = e.wait(e.enqueue(job), time.Minute)
	require.Equal(t, jobs.StatusRejected, r.Status)
	require.Equal(t, `input file "stored.txt": no input "data/big.txt" (object "sandq-inputs/tenants/globex/data/big.txt") in the artifact store`, r.Reason)
	require.Equal(t, 1, r.Attempts, "not retried")

	missing := py("print(1)")
	missing.Files = []jobs.File{{Path: "x", Key: "missing"}}
	r = e.wait(e.enqueue(missing), time.Minute)
	require.Equal(t, jobs.StatusRejected, r.Status)
	require.Contains(t, r.Reason, `no input "missing"`)

	for _, bad := range []string{"../x", "/etc/x", "a/../../x"} {
		job := py("print(1)")
		job.Files = []jobs.File{{Path: bad, ContentB64: []byte("x")}}
		_, err := e.client.Enqueue(context.Background(), job)
		var verr *jobs.ValidationError
		require.True(t, errors.As(err, &verr), "%s: %v", bad, err)
		require.Contains(t, verr.Error(), "files[0].path")
	}
}

// TestInputKeyCannotReadArtifacts: files[].key naming another job's
// artifact (its exact key, or a path climbing out of the inputs area) is
// refused: at enqueue when the key is not a clean relative path, by the
// worker (rejected, once) when it names nothing in the job's inputs area.
func TestInputKeyCannotReadArtifacts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.s3Worker()
	secret := py("open('secret.txt', 'w').write('the other job secret')")
	secret.OutputFiles = []string{"secret.txt"}
	victim := e.wait(e.enqueue(secret), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, victim.Status, victim.Stderr)
	require.Len(t, victim.Artifacts, 1)
	key := victim.Artifacts[0].Key
	require.Equal(t, e.prefix+"/"+victim.ID+"/secret.txt", key)

	for _, k := range []string{"../" + key, "../../" + key, "/" + key, "./" + key, "shared/../../" + key} {
		thief := py("print(open('loot').read())")
		thief.Files = []jobs.File{{Path: "loot", Key: k}}
		_, err := e.client.Enqueue(context.Background(), thief)
		var verr *jobs.ValidationError
		require.True(t, errors.As(err, &verr), "%s: %v", k, err)
		require.Contains(t, verr.Error(), "files[0].key", k)
	}

	// The exact key is a clean path: it names an object in the job's
	// inputs area, where there is none.
	thief := py("print(open('loot').read())")
	thief.Files = []jobs.File{{Path: "loot", Key: key}}
	r := e.wait(e.enqueue(thief), time.Minute)
	require.Equal(t, jobs.StatusRejected, r.Status)
	require.Equal(t, fmt.Sprintf(`input file "loot": no input %q (object "sandq-inputs/shared/%s") in the artifact store`, key, key), r.Reason)
	require.Empty(t, r.Stdout)
}

func TestArtifactCaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.s3Worker("--max-artifacts", "2", "--max-artifact-bytes", "100000")
	job := py(`
for i in range(4):
    open("f%d.txt" % i, "w").write("x" * 10)
open("huge.bin", "wb").write(b"y" * 200000)
`)
	job.OutputFiles = []string{"*.txt", "*.bin"}
	r := e.wait(e.enqueue(job), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status)
	require.Equal(t, []string{"f0.txt", "f1.txt"}, artifactNames(r))
	dropped := strings.Join(r.DroppedArtifacts, "\n")
	require.Contains(t, dropped, "f2.txt: over the cap of 2 files")
	require.Contains(t, dropped, "f3.txt: over the cap of 2 files")
	require.Contains(t, dropped, "huge.bin")
}

func TestStoreDownKeepsStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m, _ := e.s3Worker("--upload-attempts", "4")
	m.Stop()
	job := py("open('out.txt', 'w').write('kept?')\nprint('ran')")
	job.OutputFiles = []string{"out.txt"}
	r := e.wait(e.enqueue(job), 2*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, "the program's status stands")
	require.Equal(t, "ran\n", r.Stdout)
	require.Empty(t, r.Artifacts)
	require.Len(t, r.ArtifactErrors, 1)
	require.Contains(t, r.ArtifactErrors[0], "out.txt")
	require.Contains(t, r.ArtifactErrors[0], "after 4 attempts")
}

func TestLocalStoreWhenNoS3(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	e.startWorker("--artifact-dir", dir, "--artifact-prefix", e.prefix)
	job := py("open('out.txt', 'w').write('local')")
	job.OutputFiles = []string{"out.txt"}
	r := e.wait(e.enqueue(job), time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status)
	require.Len(t, r.Artifacts, 1)
	require.Equal(t, filepath.Join(dir, e.prefix, r.ID, "out.txt"), r.Artifacts[0].URL)
	b, err := os.ReadFile(r.Artifacts[0].URL)
	require.NoError(t, err)
	require.Equal(t, "local", string(b))
}

// TestArtifactNamesDistinct: files whose names would merge on their way to
// the store are left out with the reason, never stored over one another.
// Names travel as JSON, where bytes that are not UTF-8 become U+FFFD, so
// b"\xff.csv", b"\xfe.csv" and "\ufffd.csv" would share one name and one
// key; and a job's own .sandq/stdout would share the key of its stdout
// moved out of a large result. Every artifact listed has its own key, and
// the stored object holds the bytes it lists (local store, as reported).
func TestArtifactNamesDistinct(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	e.startWorker("--artifact-dir", dir, "--artifact-prefix", e.prefix, "--max-result-bytes", "262144")
	stored := func(t *testing.T, r jobs.Result, want map[string]string) {
		t.Helper()
		keys := map[string]bool{}
		for _, a := range r.Artifacts {
			require.False(t, keys[a.Key], "key %s listed twice", a.Key)
			keys[a.Key] = true
			w, ok := want[a.Name]
			require.True(t, ok, "unexpected artifact %q", a.Name)
			require.EqualValues(t, len(w), a.Size, a.Name)
			b, err := os.ReadFile(a.URL)
			require.NoError(t, err)
			require.True(t, string(b) == w, "%q holds what it lists", a.Name)
		}
		require.Len(t, r.Artifacts, len(want), "artifacts %q", artifactNames(r))
	}

	t.Run("NamesNotUTF8", func(t *testing.T) {
		t.Parallel()
		job := py(`
open(b'\xff.csv','wb').write(b'AAAA'); open(b'\xfe.csv','wb').write(b'BBBBBB'); open('\ufffd.csv','w').write('CCCCCCCC')
`)
		job.OutputFiles = []string{"*.csv"}
		r := e.wait(e.enqueue(job), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Stderr)
		stored(t, r, map[string]string{"\ufffd.csv": "CCCCCCCC"})
		require.ElementsMatch(t, []string{
			`"\xfe.csv": name is not valid UTF-8; not collected`,
			`"\xff.csv": name is not valid UTF-8; not collected`,
		}, r.DroppedArtifacts)
		require.Empty(t, r.ArtifactErrors)
	})

	t.Run("ReservedSandqDir", func(t *testing.T) {
		t.Parallel()
		job := py(`
import os, sys
os.makedirs('.sandq')
open('.sandq/stdout', 'w').write('job file 14 B')
open('.sandq/stdout', 'a').write('\n')
open('mine.txt', 'w').write('mine')
sys.stdout.write('x' * (1 << 20))
`)
		job.OutputFiles = []string{"**"}
		r := e.wait(e.enqueue(job), time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, r.Stderr)
		require.Equal(t, ".sandq/stdout", r.StdoutArtifact, "the stream moved out")
		stored(t, r, map[string]string{
			"main.py":       job.Code,
			"mine.txt":      "mine",
			".sandq/stdout": strings.Repeat("x", 1<<20),
		})
		for _, a := range r.Artifacts {
			if a.Name == ".sandq/stdout" {
				require.Equal(t, "output", a.Kind, "the job's file is never listed as the stream")
			}
		}
		require.Equal(t, []string{".sandq/stdout: name is reserved for sandq's own artifacts (.sandq/); not collected"}, r.DroppedArtifacts)
		require.Empty(t, r.ArtifactErrors)
	})
}
