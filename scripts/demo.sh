#!/usr/bin/env bash
# demo.sh (make demo): run sandq end to end on local defaults. Expects `make images` done (the
# Makefile's demo target depends on it): builds the worker, the CLI and the API, starts one worker,
# enqueues a success, a failure, a timeout and an out-of-memory job, prints each result, runs one
# job through the HTTP API with a key made for the demo (revoked after), and stops the worker,
# which removes its containers.
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
"$GO" build -o bin/api ./cmd/api

OWNER=demo-$$
WORKER_FLAGS=()
# An engine whose root lacks CAP_SYS_RESOURCE (a nested container) cannot pin steps' OOM scores,
# and a worker refuses to start there unless told (docs/security.md). The engines run beside this
# script, as root: this process's bounding set is theirs.
capbnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
if (( (16#${capbnd:-0} >> 24) % 2 == 0 )); then
	echo "demo: this engine cannot grant CAP_SYS_RESOURCE: the worker runs with --allow-unpinned-oom"
	WORKER_FLAGS+=(--allow-unpinned-oom)
fi
bin/worker --owner "$OWNER" --metrics-addr 127.0.0.1:9464 "${WORKER_FLAGS[@]}" >"$LOG" 2>&1 &
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
echo "== the same through the HTTP API, with an API key made for the demo"
KEY=$(bin/api keys create --tenant demo 2>/dev/null)
API_LOG=$CACHE/demo-api.log
bin/api --addr 127.0.0.1:0 >"$API_LOG" 2>&1 &
API=$!
stop_api() {
	if kill -TERM "$API" 2>/dev/null; then
		wait "$API" || true
	fi
	bin/api keys revoke "$(echo "$KEY" | cut -d_ -f2)" >/dev/null
}
trap 'stop_api; stop_worker' EXIT
ADDR=
for _ in $(seq 100); do
	ADDR=$(grep -o '"api started"' "$API_LOG" >/dev/null && grep -o '"addr":"[^"]*"' "$API_LOG" | tail -1 | cut -d'"' -f4) && [ -n "$ADDR" ] && break
	kill -0 "$API" 2>/dev/null || { cat "$API_LOG" >&2; echo "demo: the API exited" >&2; exit 1; }
	sleep 0.1
done
[ -n "$ADDR" ] || { cat "$API_LOG" >&2; echo "demo: the API did not start" >&2; exit 1; }
echo "\$ curl -H 'Authorization: Bearer sqk_...' -d '{\"lang\":\"python\",\"code\":\"print(6 * 7)\"}' 'http://$ADDR/v1/jobs?wait=30s'"
curl -sS --fail-with-body -H "Authorization: Bearer $KEY" -d '{"lang":"python","code":"print(6 * 7)"}' "http://$ADDR/v1/jobs?wait=30s"
echo
stop_api

echo
echo "demo: stopping the worker"
stop_worker
trap - EXIT
left=$(docker ps -aq --filter "label=sandq.worker=$OWNER" | wc -l)
echo "demo: done; containers left by the demo worker: $left"
[ "$left" = 0 ]
