package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/store"
)

// readmeBlocks returns the fenced code blocks of README.md's "A first job"
// section, by language ("sh", "python"), in order.
func readmeBlocks(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	s := string(b)
	start := strings.Index(s, "\n## A first job")
	require.Positive(t, start, "README.md has a section \"A first job\"")
	end := strings.Index(s[start+1:], "\n## ")
	require.Positive(t, end)
	section := s[start : start+1+end]
	blocks := map[string][]string{}
	for _, m := range regexp.MustCompile("(?s)```(\\w+)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks[m[1]] = append(blocks[m[1]], m[2])
	}
	return blocks
}

// TestReadmeFirstJob runs the README's "A first job" as a reader would:
// every shell block in order (the worker, the CLI's examples, a key, the
// API and curl), then the Python client's example against that API, in a
// directory holding the files the examples name and bin/ with the
// binaries. The only changes to the text: the API's port (a free one, for
// 8080), the Redis key prefix (the test's namespace, for sandq) and, for
// the Python package, PYTHONPATH at its source rather than a venv.
func TestReadmeFirstJob(t *testing.T) {
	t.Parallel()
	requireImage(t, "python")
	requireImage(t, "rust")
	e := newEnv(t)
	blocks := readmeBlocks(t)
	require.GreaterOrEqual(t, len(blocks["sh"]), 4, "the worker, the CLI, more CLI, HTTP")
	require.NotEmpty(t, blocks["python"])

	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o755))
	for _, name := range []string{"worker", "enqueue", "api"} {
		require.NoError(t, os.Symlink(filepath.Join(bins.dir, name), filepath.Join(dir, "bin", name)))
	}
	files := map[string]string{
		"prog.py":   "print('from prog.py')\n",
		"data.csv":  "x,y\n1,2\n2,4\n3,9\n",
		"report.py": "import csv, os, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nrows = list(csv.DictReader(open('data.csv')))\nos.makedirs('out', exist_ok=True)\nplt.plot([int(r['x']) for r in rows], [int(r['y']) for r in rows]); plt.savefig('out/plot.png')\nprint(len(rows), 'rows')\n",
		"train.py":  "import time\nfor epoch in range(3):\n    print('epoch', epoch, flush=True)\n    time.sleep(0.2)\n",
		"hello.rs":  "fn main() { println!(\"hello from rust\"); }\n",
	}
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}

	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	var script strings.Builder
	script.WriteString("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n")
	for _, block := range blocks["sh"] {
		if strings.Contains(block, "venv") || strings.Contains(block, "pip install") {
			continue // the Python package's install: PYTHONPATH below
		}
		block = strings.ReplaceAll(block, "8080", port)
		block = strings.ReplaceAll(block, "redis-cli GET "+store.DefaultPrefix+":", "redis-cli GET "+e.prefix+":")
		for _, line := range strings.Split(block, "\n") {
			script.WriteString(line + "\n")
			if strings.HasPrefix(line, "bin/api --addr") {
				// A reader types the next line after the API is up.
				fmt.Fprintf(&script, "for _ in $(seq 100); do curl -sf localhost:%s/healthz >/dev/null && break; sleep 0.1; done\n", port)
			}
		}
	}
	py := strings.ReplaceAll(blocks["python"][0], "8080", port)
	py = strings.ReplaceAll(py, `api_key="sqk_..."`, `api_key=os.environ["KEY"]`)
	py = "import os\n" + py
	script.WriteString("export KEY\n")
	fmt.Fprintf(&script, "PYTHONPATH=%s /usr/bin/python3 - <<'PY'\n%sPY\n", filepath.Join(repoRoot(t), "clients", "python", "src"), py)

	cmd := exec.Command("bash", "-c", script.String())
	cmd.Dir = dir
	env := append(os.Environ(), "SANDQ_PREFIX="+e.prefix, "SANDQ_QUEUE_PREFIX="+e.queuePrefix,
		"SANDQ_REDIS_ADDR="+e.redisAddr, "SANDQ_PUBLISH_VERSIONS=false", "SANDQ_ARTIFACT_DIR="+filepath.Join(dir, "artifacts"), "SANDQ_METRICS_ADDR=", "SANDQ_LOG_LEVEL=warn")
	if !engineGrantsSysResource() {
		env = append(env, "SANDQ_ALLOW_UNPINNED_OOM=true")
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("README's first job:\n%s", out)
	require.NoError(t, err)
	got := string(out)
	for _, want := range []string{
		"42\n",                      // echo 'print(6 * 7)' | bin/enqueue run --lang python --wait
		"from prog.py\n",            // prog.py
		"3 rows\n",                  // report.py, with data.csv
		"epoch 2\n",                 // train.py, followed
		"hello from rust\n",         // hello.rs, enqueued then waited on
		`"status": "succeeded"`,     // bin/enqueue status $ID
		`"stdout":"42\n"`,           // curl through the API
		"succeeded 42\n",            // the Python package's example
		`"stdout":"hello from rust`, // redis-cli GET
	} {
		require.Contains(t, got, want)
	}
}

// repoRoot is the repository's root (the e2e package's parent).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return filepath.Dir(wd)
}
