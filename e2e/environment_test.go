package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// testImage builds (once per content: the tag hashes the Dockerfile and
// its base's ID) a test image FROM sandq's offline base image, and returns
// its tag, sandq-test/NAME:HASH. Its steps may use the Debian mirror.
func testImage(t *testing.T, name, dockerfile string) string {
	t.Helper()
	base, err := exec.Command("docker", "images", "sandq/base", "--format", "{{.Repository}}:{{.Tag}}").Output()
	require.NoError(t, err)
	baseRef, _, _ := strings.Cut(strings.TrimSpace(string(base)), "\n")
	require.NotEmpty(t, baseRef, "no sandq/base image (make images builds it)")
	baseID, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", baseRef).Output()
	require.NoError(t, err)
	df := "FROM " + baseRef + "\n" + dockerfile
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(baseID)) + "\n" + df))
	tag := "sandq-test/" + name + ":" + hex.EncodeToString(sum[:6])
	if exec.Command("docker", "image", "inspect", tag).Run() == nil {
		return tag
	}
	cmd := exec.Command("docker", "build", "-q", "-t", tag, "-")
	cmd.Stdin = strings.NewReader(df)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docker build %s:\n%s", tag, out)
	return tag
}

func imageID(t *testing.T, ref string) string {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", ref).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// debianPython is a plain Debian image with python3 and no sandq file.
const debianPython = `RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*
`

// hostileImage's config tries to change the sandbox: entrypoint, command,
// user, working dir, environment (the agent's Go runtime too), a health
// check that writes as root where jobs run, ports, labels of sandq's, a
// stop signal; and it holds an /sandq/agent of its own.
const hostileImage = debianPython + `RUN mkdir -p /sandq /etc/evil && printf '#!/bin/sh\necho PWNED\n' > /sandq/agent && chmod 755 /sandq/agent && touch /sandq/evil
ENV GODEBUG=panicnil=1 GOMAXPROCS=64 GOGC=off HOME=/root SANDQ_IMAGE_ENV=kept
USER 1234:1234
WORKDIR /etc/evil
EXPOSE 80
STOPSIGNAL SIGTERM
LABEL sandq.worker=someone-else sandq.managed=false
HEALTHCHECK --interval=1s CMD ["/bin/sh", "-c", "touch /work/HEALTH /tmp/HEALTH; echo x > /proc/1/comm"]
ENTRYPOINT ["/bin/sh", "-c", "echo PWNED"]
CMD ["--job-uid", "0"]
`

// TestEnvironmentImage: a job names a plain Debian image with python3
// ("image:REF", admitted by --image-allow) and runs in it as in sandq's
// Python image: output, timeout, OOM kill, scrub, and the hostile suite's
// jobs but the two that need matplotlib, each followed by the clean
// check, on Docker with runc and with gVisor (Podman refuses such jobs,
// naming the image). The image's config cannot change the
// sandbox; images and references that must not be used are rejected,
// naming the image.
func TestEnvironmentImage(t *testing.T) {
	t.Parallel()
	plain := testImage(t, "debian-python", debianPython)
	hostile := testImage(t, "hostile", hostileImage)
	noPython := testImage(t, "no-python", "LABEL sandq-test=no-python\n")
	linkAtSandq := testImage(t, "link-sandq", "RUN ln -s /tmp /sandq\n")
	withVolume := testImage(t, "volume", "VOLUME /data\n")
	plainID := imageID(t, plain)

	forEachBackend(t, []string{"docker", "gvisor", "podman"}, func(t *testing.T, backend string) {
		e := newEnv(t)
		e.startWorkerOn(t, backend, "--concurrency", "1", "--max-per-pool", "1", "--warm", "", "--image-allow", "sandq-test/*")
		env := "image:" + plain
		inEnv := func(j jobs.Job) jobs.Job { j.Environment = env; return j }
		run := func(j jobs.Job) jobs.Result {
			t.Helper()
			return e.wait(e.enqueue(j), 3*time.Minute)
		}
		if backend == "podman" {
			// Not yet: refused, clearly, never run otherwise.
			r := run(inEnv(py(`print("hi")`)))
			require.Equal(t, jobs.StatusRejected, r.Status, r.Reason)
			require.Contains(t, r.Reason, "runs only sandq's own images")
			require.Contains(t, r.Reason, plain)
			return
		}

		t.Run("Runs", func(t *testing.T) {
			r := run(inEnv(py(`
import os, sys
print(sys.version_info[:2] >= (3, 11), os.getuid() >= 1000000, os.getcwd(), os.environ['HOME'])
print(sorted(os.listdir('/sandq')))
print(os.path.exists('/usr/lib/python3/dist-packages/numpy'))
`)))
			require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
			require.Equal(t, "True True /work /tmp\n['agent', 'libs', 'pyfork.so']\nFalse\n", r.Stdout, "no numpy: not sandq's python image")
			require.NotNil(t, r.Provenance)
			require.Equal(t, env, r.Provenance.Environment)
			require.Equal(t, plainID, r.Provenance.Image)
			require.False(t, r.Usage.Prestarted)
		})
		t.Run("Timeout", func(t *testing.T) {
			j := inEnv(py(`import time; print("sleeping", flush=True); time.sleep(60)`))
			j.Limits.TimeoutMS = 10_000 // the interpreter starts cold here (no prestart): room for a loaded machine
			r := run(j)
			require.Equal(t, jobs.StatusTimeout, r.Status, r.Reason)
			require.Equal(t, "sleeping\n", r.Stdout)
			j.Code = cleanCheck
			j.Limits.TimeoutMS = 0
			r = run(j)
			require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
			require.Equal(t, "CLEAN\n", r.Stdout)
		})
		t.Run("Scrubbed", func(t *testing.T) {
			r := run(inEnv(py(`
import os, subprocess
open('/tmp/left', 'w').write('x'); open('left', 'w').write('x'); open('/dev/shm/left', 'w').write('x')
subprocess.Popen(['sleep', '600'], start_new_session=True)
print('left')
`)))
			require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
			r = run(inEnv(py(cleanCheck)))
			require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
			require.Equal(t, "CLEAN\n", r.Stdout)
		})
		t.Run("HostileJobs", func(t *testing.T) {
			for _, tc := range hostileCases(backend) {
				if strings.Contains(tc.job.Code, "matplotlib") || tc.job.Lang != "python" && tc.job.Lang != "bash" {
					continue // not in a plain Debian image with python3
				}
				t.Run(tc.name, func(t *testing.T) {
					j := inEnv(tc.job)
					r := run(j)
					require.Equal(t, tc.status, r.Status, "reason %q, stderr %q", r.Reason, r.Stderr)
					require.Equal(t, 1, r.Attempts)
					if tc.check != nil {
						tc.check(t, r)
					}
					if tc.clean == "-" {
						return
					}
					next := j
					next.ID, next.OutputFiles, next.Code = "", nil, cleanCheck
					if tc.clean == "bash" {
						next.Code = bashCleanCheck
					}
					r = run(next)
					require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
					require.Equal(t, "CLEAN\n", r.Stdout, "after %s", tc.name)
				})
			}
		})
		t.Run("HostileConfig", func(t *testing.T) {
			j := py(`
import os, time
time.sleep(3)  # the health check would have run twice
print(os.getuid() >= 1000000, os.getcwd(), os.environ['HOME'], os.environ.get('SANDQ_IMAGE_ENV'))
print(repr(os.environ.get('GODEBUG')), repr(os.environ.get('GOGC')), open('/proc/1/comm').read().strip())
print(sorted(os.listdir('/sandq')), sorted(os.listdir('.')), sorted(os.listdir('/tmp')))
`)
			j.Environment = "image:" + hostile
			r := run(j)
			require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
			require.Equal(t, "True /work /tmp kept\n'' '' agent\n['agent', 'libs', 'pyfork.so'] ['main.py'] ['.sandq']\n", r.Stdout)
			// The image's /sandq never reached the agent volume other images share.
			r = run(inEnv(py(`import os; print(sorted(os.listdir('/sandq')))`)))
			require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s", r.Reason, r.Stderr)
			require.Equal(t, "['agent', 'libs', 'pyfork.so']\n", r.Stdout)
		})
		t.Run("Refused", func(t *testing.T) {
			for _, tc := range []struct{ env, reason string }{
				{"image:" + noPython, "cannot run python jobs"},
				{"image:" + linkAtSandq, "has /sandq as a symbolic link to /tmp"},
				{"image:" + withVolume, `declares volumes \(/data\)`},
				{"image:sandq/python:latest", "not allowed"},
				{"image:sandq-test/absent:1", "is not on this worker's container engine"},
				// Some engines resolve NAME@sha256:<ID> to the image of that
				// ID whatever NAME says (an allowed name on sandq's image);
				// this Docker finds no such image.
				{"image:sandq-test/debian-python@" + imageID(t, "sandq/python:latest"), `is not on this worker's container engine|is not a tag or digest of the image`},
			} {
				j := py(`print("ran")`)
				j.Environment = tc.env
				r := run(j)
				require.Equal(t, jobs.StatusRejected, r.Status, "%s: %s %s", tc.env, r.Reason, r.Stdout)
				require.Regexp(t, tc.reason, r.Reason, tc.env)
				ref, _ := jobs.ImageRef(tc.env)
				require.Contains(t, r.Reason, ref, "the reason names the image")
				require.Equal(t, 1, r.Attempts)
			}
		})
	})
}
