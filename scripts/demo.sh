#!/usr/bin/env bash
# demo.sh (make demo): run sandq end to end on local defaults. Expects `make images` done (the
# Makefile's demo target depends on it): builds the worker and the CLI, starts one worker, enqueues
# a success, a failure, a timeout and an out-of-memory job, prints each result, and stops the
# worker, which removes its containers.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GO=${GO:-go}
if ! command -v "$GO" >/dev/null && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
CACHE=${SANDQ_CACHE:-$HOME/.cache/sandq}
mkdir -p "$CACHE" bin
LOG=$CACHE/demo-worker.log

"$GO" build -o bin/worker ./cmd/worker
"$GO" build -o bin/enqueue ./cmd/enqueue

OWNER=demo-$$
bin/worker --owner "$OWNER" --metrics-addr 127.0.0.1:9464 >"$LOG" 2>&1 &
WORKER=$!
stop_worker() {
	if kill -0 "$WORKER" 2>/dev/null; then
		kill -TERM "$WORKER"
		wait "$WORKER" || true
	fi
}
trap stop_worker EXIT
for _ in $(seq 300); do
	grep -q '"worker started"' "$LOG" && break
	kill -0 "$WORKER" 2>/dev/null || { cat "$LOG" >&2; echo "demo: the worker exited" >&2; exit 1; }
	sleep 0.1
done
grep -q '"worker started"' "$LOG" || { cat "$LOG" >&2; echo "demo: the worker did not start" >&2; exit 1; }
echo "demo: worker running (pid $WORKER, log $LOG, metrics http://127.0.0.1:9464/metrics)"

run() {
	local title=$1
	shift
	echo
	echo "== $title"
	echo "\$ enqueue $*"
	local rc=0
	bin/enqueue "$@" || rc=$?
	echo "(exit status $rc)"
}

run "success" run --lang python --wait --stdin 'sandq' - <<'PY'
import sys, platform
name = sys.stdin.read()
print(f"hello from {name} on Python {platform.python_version()}, uid {__import__('os').getuid()}")
PY
run "failure" run --lang python --wait - <<'PY'
print("about to fail")
raise ValueError("the program's own error")
PY
run "timeout (2 s limit)" run --lang python --timeout 2s --wait - <<'PY'
while True:
    pass
PY
run "out of memory (64 MiB limit)" run --lang python --memory 64 --wait - <<'PY'
data = b"x" * (1 << 30)
PY

ID=$(echo 'print(6 * 7)' | bin/enqueue run --lang python -)
bin/enqueue wait "$ID" >/dev/null 2>&1
echo
echo "== the stored result, as JSON (redis-cli GET sandq:result:$ID gives the same)"
bin/enqueue status "$ID"

echo
echo "demo: stopping the worker"
stop_worker
trap - EXIT
left=$(docker ps -aq --filter "label=sandq.worker=$OWNER" | wc -l)
echo "demo: done; containers left by the demo worker: $left"
[ "$left" = 0 ]
