package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// Libraries on demand, through the queue: real installs from the npm
// registry and the Go module proxy (both reachable from these machines),
// from a local pip index (PyPI is not), and failures that must end the job
// "failed" with the installer's message.

// buildWheel returns a pure-Python wheel of one module whose hello()
// returns greeting: the zip layout and RECORD that PEP 427 asks for.
func buildWheel(t testing.TB, name, version, greeting string) (string, []byte) {
	t.Helper()
	dist := fmt.Sprintf("%s-%s.dist-info", name, version)
	files := []struct{ path, body string }{
		{name + "/__init__.py", fmt.Sprintf("def hello():\n    return %q\n", greeting)},
		{dist + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: sandq test wheel\n", name, version)},
		{dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: sandq-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.path)
		require.NoError(t, err)
		_, err = w.Write([]byte(f.body))
		require.NoError(t, err)
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(dist + "/RECORD,,\n")
	w, err := zw.Create(dist + "/RECORD")
	require.NoError(t, err)
	_, err = w.Write([]byte(record.String()))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return fmt.Sprintf("%s-%s-py3-none-any.whl", name, version), buf.Bytes()
}

// bridgeGateway is the host's address on Docker's default bridge: what a
// container with a network reaches this host at. It is the bridge
// interface's (docker0's) address: Docker 20.10 (Debian's docker.io) leaves
// the default bridge's IPAM gateway empty.
func bridgeGateway(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("docker", "network", "inspect", "bridge", "--format", `{{index .Options "com.docker.network.bridge.name"}}`).Output()
	require.NoError(t, err)
	name := strings.TrimSpace(string(out))
	ifc, err := net.InterfaceByName(name)
	require.NoError(t, err, "Docker's default bridge interface %q", name)
	addrs, err := ifc.Addrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	t.Fatalf("Docker's default bridge %s has no IPv4 address", name)
	return ""
}

// servePipIndex serves a PEP 503 simple index holding one wheel, on every
// interface, and returns its URL as install containers reach it.
func servePipIndex(t testing.TB, project, file string, wheel []byte) string {
	t.Helper()
	sum := sha256.Sum256(wheel)
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/"+project+"/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`,
			file, hex.EncodeToString(sum[:]), file)
	})
	mux.HandleFunc("/files/"+file, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(wheel) })
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fmt.Sprintf("http://%s:%d/simple", bridgeGateway(t), ln.Addr().(*net.TCPAddr).Port)
}

// runTenant names a tenant no earlier run used. A library set's key
// covers its tenant, so a job of it installs its sets for real even where
// an earlier run's volumes are left on the engine: a test needs to remove
// none, and so never removes a set another test running alongside holds.
func runTenant() string { return "run-" + jobs.NewID()[:12] }

// installTwice enqueues job twice: the first installs (not cached), the
// second finds the set installed. It returns both results.
func installTwice(t *testing.T, e *env, job jobs.Job) (first, second jobs.Result) {
	t.Helper()
	first = e.wait(e.enqueue(job), 10*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, first.Status, "%s: %s\ninstall: %+v\ncompile: %+v\nstderr: %s",
		first.Status, first.Reason, first.Install, first.Compile, first.Stderr)
	require.NotNil(t, first.Install)
	require.False(t, first.Install.Cached, "the first job installs")
	require.NotNil(t, first.Install.Step)
	second = e.wait(e.enqueue(job), 5*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, second.Status, "%s: %s\n%s", second.Status, second.Reason, second.Stderr)
	require.True(t, second.Install.Cached, "the second job with the same libraries skips the install")
	require.Nil(t, second.Install.Step)
	require.Equal(t, first.Install.Volume, second.Install.Volume)
	t.Logf("%s %v: first job install %d ms (installer %d ms), second job install %d ms; run wall %d ms / %d ms",
		job.Lang, job.Libraries, first.Install.TookMS, first.Install.Step.Usage.WallMS, second.Install.TookMS,
		first.Usage.WallMS, second.Usage.WallMS)
	return first, second
}

func TestLibraries(t *testing.T) {
	t.Parallel()
	file, wheel := buildWheel(t, "sandqdemo", "1.0", "hello from a local wheel")
	index := servePipIndex(t, "sandqdemo", file, wheel)
	e := newEnv(t)
	e.startWorker("--concurrency", "2", "--warm", "", "--pip-index-url", index)

	// A tenant of this run: a set's key covers its tenant, so the first
	// install of each set is a real one whatever earlier runs left.
	tenant := runTenant()
	run := func(t *testing.T, job jobs.Job) (first, second jobs.Result) {
		job.Tenant = tenant
		return installTwice(t, e, job)
	}

	t.Run("NpmFromTheRegistry", func(t *testing.T) {
		// The run step has no network even though the install step had one.
		first, second := run(t, jobs.Job{Lang: "javascript", Libraries: []string{"js-md5@0.8.3"}, Code: `
const md5 = require('js-md5');
console.log(md5('hello'));
require('dns').lookup('registry.npmjs.org', (err) => console.log(err ? 'no network' : 'network'));
`})
		for _, r := range []jobs.Result{first, second} {
			require.Equal(t, "5d41402abc4b2a76b9719d911017c592\nno network\n", r.Stdout)
		}
	})

	t.Run("NpmForTypeScript", func(t *testing.T) {
		// tsc type-checks against the package's own declarations.
		first, _ := run(t, jobs.Job{Lang: "typescript", Libraries: []string{"js-md5@0.8.3"}, Code: `
import { md5 } from 'js-md5';
const hex: string = md5('hello');
console.log(hex);
`})
		require.Equal(t, "5d41402abc4b2a76b9719d911017c592\n", first.Stdout)
	})

	t.Run("GoModuleFromTheProxy", func(t *testing.T) {
		first, _ := run(t, jobs.Job{Lang: "go", Libraries: []string{"github.com/google/uuid@v1.6.0"}, Code: `package main

import (
	"fmt"

	"github.com/google/uuid"
)

func main() { fmt.Println(uuid.NewSHA1(uuid.NameSpaceDNS, []byte("sandq.example"))) }
`})
		require.Equal(t, "1cac7c75-3940-5192-955a-eaffcce36eb0\n", first.Stdout)
	})

	t.Run("PipFromALocalIndex", func(t *testing.T) {
		first, _ := run(t, jobs.Job{Lang: "python", Libraries: []string{"sandqdemo==1.0"},
			Code: "import sandqdemo\nprint(sandqdemo.hello())\n"})
		require.Equal(t, "hello from a local wheel\n", first.Stdout)
	})

	t.Run("MissingPackageFails", func(t *testing.T) {
		for _, tt := range []struct {
			job        jobs.Job
			reason     string
			installErr string
		}{
			{jobs.Job{Lang: "javascript", Code: "1", Libraries: []string{"sandq-no-such-package-4f9c2e"}},
				"npm exited with status 1", "404"},
			{jobs.Job{Lang: "python", Code: "1", Libraries: []string{"sandq-no-such-package"}},
				"pip exited with status 1", "No matching distribution found for sandq-no-such-package"},
			{jobs.Job{Lang: "go", Code: "package main\nfunc main() {}\n", Libraries: []string{"example.com/sandq/no-such-module@v1.0.0"}},
				"go exited with status 1", "example.com/sandq/no-such-module"},
		} {
			r := e.wait(e.enqueue(tt.job), 5*time.Minute)
			require.Equal(t, jobs.StatusFailed, r.Status, "%s: %s", r.Status, r.Reason)
			require.Contains(t, r.Reason, "installing libraries failed: "+tt.reason)
			require.NotNil(t, r.Install)
			require.NotNil(t, r.Install.Step)
			require.Contains(t, r.Install.Step.Stdout+r.Install.Step.Stderr, tt.installErr)
			require.Empty(t, r.Stdout, "the program did not run")
		}
	})

	t.Run("HostileNamesRejectedAtEnqueue", func(t *testing.T) {
		for _, tt := range []struct{ lang, name string }{
			{"python", "numpy; rm -rf /"}, {"python", "--index-url=http://evil.example/simple"},
			{"python", "https://evil.example/x.whl"}, {"javascript", "git+https://evil.example/x.git"},
			{"javascript", "../../x"}, {"go", "github.com/x/y@v1;id"}, {"r", "x);system('id')"},
			{"ruby", "rake --source http://evil"}, {"java", "a:b:c:d:../e"}, {"rust", "serde"},
		} {
			_, err := e.client.Enqueue(context.Background(), jobs.Job{Lang: tt.lang, Code: "1", Libraries: []string{tt.name}})
			require.Error(t, err, "%s %q", tt.lang, tt.name)
			require.Contains(t, err.Error(), "libraries", "%s %q", tt.lang, tt.name)
		}
	})
}

// TestLibraryMirrorsUnreachable: R, Ruby and Java install from configurable
// mirrors that are not reachable here; an unreachable one ends the job
// "failed" with the installer's own message, never a silent success.
func TestLibraryMirrorsUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dead := "http://127.0.0.1:9" // nothing listens on the discard port
	e.startWorker("--concurrency", "3", "--warm", "",
		"--cran-mirror", dead, "--rubygems-source", dead+"/", "--maven-repo", dead+"/maven2")
	for _, tt := range []struct {
		job  jobs.Job
		tool string
		msg  string
	}{
		{jobs.Job{Lang: "r", Code: "library(sandqdemo)", Libraries: []string{"sandqdemo"}}, "R", "not installed: sandqdemo"},
		{jobs.Job{Lang: "ruby", Code: "require 'sandqdemo'", Libraries: []string{"sandqdemo"}}, "gem", "127.0.0.1:9"},
		{jobs.Job{Lang: "java", Code: "public class Main { public static void main(String[] a) {} }",
			Libraries: []string{"org.example:sandqdemo:1.0"}}, "maven", "HTTP 502"},
	} {
		t.Run(tt.job.Lang, func(t *testing.T) {
			requireImage(t, tt.job.Lang)
			r := e.wait(e.enqueue(tt.job), 5*time.Minute)
			require.Equal(t, jobs.StatusFailed, r.Status, "%s: %s", r.Status, r.Reason)
			require.Contains(t, r.Reason, "installing libraries failed: "+tt.tool+" exited with status")
			require.Contains(t, r.Install.Step.Stdout+r.Install.Step.Stderr, tt.msg)
		})
	}
}

// buildInImage runs script as root in a throwaway container of image with
// dir mounted at /out: the test's own build tooling (gem, R CMD build,
// javac), not a sandbox.
func buildInImage(t testing.TB, image, dir, script string) {
	t.Helper()
	cmd := exec.Command("docker", "run", "--rm", "--user", "0:0", "--entrypoint", "/bin/sh",
		"-v", dir+":/out", "-e", "HOME=/tmp", image, "-c", "set -eu\n"+script)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build in %s:\n%s", image, out)
}

// serveDir serves dir on every interface and returns its URL as install
// containers reach it.
func serveDir(t testing.TB, dir string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir))}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fmt.Sprintf("http://%s:%d", bridgeGateway(t), ln.Addr().(*net.TCPAddr).Port)
}

// TestLibrariesFromLocalMirrors: R packages, Ruby gems and Java jars
// install for real from mirrors of the kinds the worker is configured
// with (a CRAN-like repository, a gem source, a Maven-layout repository),
// which the test builds with each language's own tools and serves itself:
// CRAN, rubygems.org and Maven Central are not reachable here.
func TestLibrariesFromLocalMirrors(t *testing.T) {
	t.Parallel()
	for _, l := range []string{"r", "ruby", "java"} {
		requireImage(t, l)
	}
	dir := t.TempDir()
	buildInImage(t, "sandq/r:latest", dir, `
mkdir -p /tmp/p/sandqdemo/R && cd /tmp/p
printf 'Package: sandqdemo\nVersion: 1.0\nTitle: Sandq Test\nDescription: A test package.\nLicense: MIT\nAuthor: sandq\nMaintainer: sandq <sandq@example.com>\n' >sandqdemo/DESCRIPTION
printf 'export(hello)\n' >sandqdemo/NAMESPACE
printf 'hello <- function() "hello from a local CRAN"\n' >sandqdemo/R/hello.R
R CMD build --no-build-vignettes --no-manual sandqdemo
mkdir -p /out/cran/src/contrib && cp sandqdemo_1.0.tar.gz /out/cran/src/contrib/
Rscript -e 'tools::write_PACKAGES("/out/cran/src/contrib", type = "source")'`)
	buildInImage(t, "sandq/ruby:latest", dir, `
mkdir -p /tmp/g/lib && cd /tmp/g
printf 'module SandqDemo\n  def self.hello\n    "hello from a local gem source"\n  end\nend\n' >lib/sandqdemo.rb
printf 'Gem::Specification.new do |s|\n  s.name = "sandqdemo"\n  s.version = "1.0.0"\n  s.summary = "sandq test gem"\n  s.authors = ["sandq"]\n  s.license = "MIT"\n  s.files = ["lib/sandqdemo.rb"]\nend\n' >sandqdemo.gemspec
gem build sandqdemo.gemspec
mkdir -p /out/gems/gems && cp sandqdemo-1.0.0.gem /out/gems/gems/
gem generate_index --directory /out/gems`)
	buildInImage(t, "sandq/java:latest", dir, `
mkdir -p /tmp/j/src/org/example && cd /tmp/j
printf 'package org.example;\npublic class SandqDemo {\n  public static String hello() { return "hello from a local Maven repository"; }\n}\n' >src/org/example/SandqDemo.java
javac -d classes src/org/example/SandqDemo.java
d=/out/maven2/org/example/sandqdemo/1.0 && mkdir -p $d
jar cf $d/sandqdemo-1.0.jar -C classes .`)
	base := serveDir(t, dir)

	e := newEnv(t)
	e.startWorker("--concurrency", "2", "--warm", "",
		"--cran-mirror", base+"/cran", "--rubygems-source", base+"/gems/", "--maven-repo", base+"/maven2")
	tenant := runTenant()
	for _, tt := range []struct {
		job  jobs.Job
		want string
	}{
		{jobs.Job{Lang: "r", Libraries: []string{"sandqdemo"}, Code: "library(sandqdemo)\ncat(hello(), \"\\n\")\n"},
			"hello from a local CRAN \n"},
		{jobs.Job{Lang: "ruby", Libraries: []string{"sandqdemo:1.0.0"}, Code: "require 'sandqdemo'\nputs SandqDemo.hello\n"},
			"hello from a local gem source\n"},
		{jobs.Job{Lang: "java", Libraries: []string{"org.example:sandqdemo:1.0"}, Code: `import org.example.SandqDemo;

public class Main {
    public static void main(String[] args) { System.out.println(SandqDemo.hello()); }
}
`}, "hello from a local Maven repository\n"},
	} {
		t.Run(tt.job.Lang, func(t *testing.T) {
			tt.job.Tenant = tenant
			first, second := installTwice(t, e, tt.job)
			require.Equal(t, tt.want, first.Stdout)
			require.Equal(t, tt.want, second.Stdout)
		})
	}
}

// namespaceVolumes lists the library volumes the env's workers made.
func (e *env) namespaceVolumes() []string {
	e.t.Helper()
	vols, err := e.rt.ListVolumes(context.Background(), map[string]string{sandbox.LabelNamespace: e.prefix})
	require.NoError(e.t, err)
	var names []string
	for _, v := range vols {
		names = append(names, v.Name)
	}
	return names
}

// TestLibrarySetBounds: an install script (an npm package's install
// lifecycle script) that writes beside its set directory is refused (the
// volume root is root's) and, writing too much inside it, is measured
// over the whole volume and refused: the job fails saying so, and its
// volume is removed. A tenant's sets past --libs-max-tenant-mb go, its
// least recently used first, not another tenant's older set; sets past
// --libs-max-total-mb go, least recently used first, and sets unused past
// --libs-max-age go, through the worker's collector.
func TestLibrarySetBounds(t *testing.T) {
	t.Parallel()
	requireImage(t, "javascript")
	fill := `require('fs').writeFileSync('data', Buffer.alloc(1536 << 10, 1));`
	registry, _ := serveNpm(t, map[string]string{
		"sandq-hog": `const fs = require('fs');
try {
  fs.writeFileSync('/sandq/libs/beside', 'x'.repeat(4096));
  console.error('WROTE BESIDE THE SET');
  process.exit(3);
} catch (e) {
  if (e.code !== 'EACCES') { console.error('beside: ' + e.code); process.exit(4); }
}
fs.writeFileSync('big', Buffer.alloc(3 << 20, 1));`,
		"sandq-a": fill, "sandq-b": fill, "sandq-c": fill,
	})
	e := newEnv(t)
	e.startWorker("--warm", "", "--npm-registry", registry, "--install-max-mb", "2",
		"--libs-max-total-mb", "4", "--libs-max-tenant-mb", "2", "--libs-max-age", "1h", "--libs-gc-interval", "300ms", "--idle-timeout", "1s")

	hog := e.wait(e.enqueue(jobs.Job{Lang: "javascript", Code: "console.log('ran')", Libraries: []string{"sandq-hog@1.0.0"}}), 5*time.Minute)
	require.Equal(t, jobs.StatusFailed, hog.Status, "%s: %s", hog.Status, hog.Reason)
	require.Regexp(t, `^installing libraries failed: the installed libraries take \d+ KiB on disk, over the cap of 2048 KiB$`, hog.Reason)
	require.Empty(t, hog.Stdout, "the program did not run")
	require.NotContains(t, e.namespaceVolumes(), hog.Install.Volume, "the refused set's volume is removed")

	ok := func(tenant, lib string) jobs.Result {
		r := e.wait(e.enqueue(jobs.Job{Lang: "javascript", Code: "console.log('ran')", Libraries: []string{lib}, Tenant: tenant}), 5*time.Minute)
		require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s\n%+v", r.Status, r.Reason, r.Install)
		return r
	}
	quiet := ok("quiet", "sandq-c@1.0.0")
	a := ok("noisy", "sandq-a@1.0.0")
	b := ok("noisy", "sandq-b@1.0.0")
	require.NotEqual(t, a.Install.Volume, b.Install.Volume)
	// noisy's two sets of over 1.5 MiB each, 2 MiB allowed a tenant: its
	// least recently used goes once no container holds it (idle
	// containers go after 1 s); quiet's set, the oldest, stays.
	require.Eventually(t, func() bool {
		vols := e.namespaceVolumes()
		return !slices.Contains(vols, a.Install.Volume) && slices.Contains(vols, b.Install.Volume)
	}, time.Minute, 200*time.Millisecond, "the tenant's least recently used set is removed for its quota, the other kept")
	require.Contains(t, e.namespaceVolumes(), quiet.Install.Volume, "another tenant's set is not removed for this tenant's quota")
	// A third tenant's set takes the sets past --libs-max-total-mb: the
	// least recently used of all (quiet's) goes.
	other := ok("other", "sandq-a@1.0.0")
	require.Eventually(t, func() bool {
		vols := e.namespaceVolumes()
		return !slices.Contains(vols, quiet.Install.Volume) && slices.Contains(vols, other.Install.Volume) && slices.Contains(vols, b.Install.Volume)
	}, time.Minute, 200*time.Millisecond, "the least recently used set is removed for the total, the others kept")

	// A worker with a short age bound removes the set unused past it.
	e.startWorker("--warm", "", "--npm-registry", registry, "--libs-max-age", "2s", "--libs-gc-interval", "300ms")
	require.Eventually(t, func() bool { return !slices.Contains(e.namespaceVolumes(), b.Install.Volume) },
		time.Minute, 200*time.Millisecond, "the set unused past --libs-max-age is removed")

	// Removed sets install again on demand.
	again := ok("noisy", "sandq-a@1.0.0")
	require.False(t, again.Install.Cached)
}
