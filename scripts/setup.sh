#!/usr/bin/env bash
# setup.sh: bring up what sandq's tests and demo need on this machine, installing what is
# missing. Idempotent; quiet and fast (well under a second) when all is already up.
#
#   - packages (apt-get, one `apt-get update` only when something is missing): docker.io,
#     redis-server, debootstrap, docker-compose (unless `docker compose` works), podman, and
#     jq (local engine only), Debian's python3 with venv, setuptools, wheel and mypy (the
#     Python client's offline install and type check), and cgroupfs-mount when no cgroup
#     hierarchy is mounted;
#   - the Docker engine: started by hand (no systemd here) when `docker info` fails, logging to
#     /var/log/sandq-dockerd.log, waited on for up to 60 s;
#   - gVisor's runsc, built from gVisor's Go source at a pinned version and cached
#     (scripts/runsc.sh: Debian's is from 2022 and has no systrap platform), at
#     /usr/local/bin/runsc, registered as the engine's "runsc" runtime (`--oci-runtime runsc`):
#     merged into /etc/docker/daemon.json's "runtimes" (when not there already) with runtimeArgs
#     --platform=systrap (no KVM needed: works in a VM) and --network=none (without it runsc
#     refuses to start here, "cannot run with network enabled in root network namespace"; so
#     runsc containers have loopback only: fine for sandboxes, not for install containers),
#     --oci-seccomp (without it runsc ignores the container's seccomp profile, sandq's
#     sandbox/seccomp.json: the worker refuses such an engine), and
#     when `docker info` does not list it so, dockerd is reloaded with SIGHUP and waited on.
#     Podman is not set up for runsc: Podman 4.3's API ignores a container's OCI runtime;
#   - Redis on 127.0.0.1:6379, daemonized, durable (append-only file fsync'd every second, in
#     $SANDQ_REDIS_DIR, default /var/lib/sandq/redis), when `redis-cli -p 6379 ping` fails; one
#     already running without persistence gets its AOF turned on;
#   - the Podman API service (`podman system service --time=0`) on unix:///run/podman/podman.sock,
#     which sandq's podman backend talks to, when it does not answer a ping there; started by
#     hand (no systemd here), logging to /var/log/sandq-podman.log, waited on for up to 30 s;
#   - the MinIO server binary at /usr/local/bin/minio (scripts/minio.sh; tests and the demo start
#     their own instances from it);
#   - the MCP Inspector (an independent MCP client the e2e tests use) under $SANDQ_CACHE/npm
#     (scripts/inspector.sh).
#
# Knobs:
#   SANDQ_SETUP_SKIP_REDIS=1   leave Redis alone (one elsewhere is used)
#   SANDQ_SETUP_SKIP_PODMAN=1  do not install podman nor start its service
#   SANDQ_SETUP_SKIP_RUNSC=1   do not build runsc nor register it with dockerd
#   SANDQ_SETUP_FOR=demo       only what `make demo` needs: Docker, Redis, debootstrap, a C compiler
#                              and curl (no Podman, runsc, docker-compose, Chromium, the Python
#                              client's tools, MinIO or the MCP Inspector: the tests' own)
#   SANDQ_PODMAN_WAIT=30       seconds to wait for the Podman service to answer
#   CONTAINER_HOST             when set to anything but the socket above, the Podman service is
#                              elsewhere: none is started here
#   SANDQ_DOCKERD_WAIT=60      seconds to wait for the engine to answer
#   DOCKER_HOST                when set to anything but the local socket, the engine is remote:
#                              it must answer, and none is started here
set -euo pipefail

DOCKERD_LOG=/var/log/sandq-dockerd.log
REDIS_LOG=/var/log/sandq-redis.log
REDIS_DIR=${SANDQ_REDIS_DIR:-/var/lib/sandq/redis}
PODMAN_LOG=/var/log/sandq-podman.log
SERVICE_DIR=/var/lib/sandq/services # the daemons' working directory
PODMAN_SOCK=/run/podman/podman.sock
PODMAN_WAIT=${SANDQ_PODMAN_WAIT:-30}
DOCKERD_WAIT=${SANDQ_DOCKERD_WAIT:-60}
POLICY_RC=/usr/sbin/policy-rc.d
DAEMON_JSON=/etc/docker/daemon.json
RUNSC=/usr/local/bin/runsc # built by scripts/runsc.sh
RUNSC_ARGS='["--platform=systrap","--network=none","--oci-seccomp"]'
RUNSC_WAIT=15 # seconds for dockerd to list runsc after SIGHUP

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: FAIL: %s\n' "$*" >&2; exit 1; }
show_log() { # show_log FILE: its last lines, indented, if it exists
	[ -f "$1" ] || return 0
	printf 'setup: last lines of %s:\n' "$1" >&2
	tail -n 30 "$1" | sed 's/^/  | /' >&2 || true
}
need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root; run as root (or do it by hand)"; }

cleanup_policy=
cleanup() { [ -z "$cleanup_policy" ] || rm -f "$POLICY_RC"; }
trap cleanup EXIT

local_engine() {
	case ${DOCKER_HOST:-} in
	'' | unix:///var/run/docker.sock | unix:///run/docker.sock) return 0 ;;
	*) return 1 ;;
	esac
}

pid_of() { # pid_of NAME: the pid of a process called NAME (procps may not be installed)
	local f c
	for f in /proc/[0-9]*/comm; do
		{ read -r c <"$f"; } 2>/dev/null || continue
		if [ "$c" = "$1" ]; then
			f=${f#/proc/}
			echo "${f%/comm}"
			return 0
		fi
	done
	return 1
}

for_tests() { [ "${SANDQ_SETUP_FOR:-}" != demo ]; }
want_runsc() { [ "${SANDQ_SETUP_SKIP_RUNSC:-}" != 1 ] && for_tests && local_engine; }
want_podman() { [ "${SANDQ_SETUP_SKIP_PODMAN:-}" != 1 ] && for_tests; }

cgroups_mounted() { awk '$3 == "cgroup" || $3 == "cgroup2" { found = 1 } END { exit !found }' /proc/mounts; }

install_missing() {
	local pkgs=()
	if local_engine; then
		command -v dockerd >/dev/null && command -v docker >/dev/null || pkgs+=(docker.io)
		cgroups_mounted || command -v cgroupfs-mount >/dev/null || pkgs+=(cgroupfs-mount)
	else
		command -v docker >/dev/null || pkgs+=(docker.io)
	fi
	if [ "${SANDQ_SETUP_SKIP_REDIS:-}" != 1 ]; then
		command -v redis-server >/dev/null || pkgs+=(redis-server)
		command -v redis-cli >/dev/null || pkgs+=(redis-tools)
	fi
	command -v debootstrap >/dev/null || pkgs+=(debootstrap)
	if want_runsc; then
		command -v jq >/dev/null || pkgs+=(jq) # edits daemon.json
	fi
	if want_podman; then
		command -v podman >/dev/null || pkgs+=(podman)
	fi
	# Builds the Python image's fork server (agent/pyfork/pyfork.c).
	command -v gcc >/dev/null && [ -e /usr/include/stdio.h ] || pkgs+=(gcc libc6-dev)
	command -v curl >/dev/null || pkgs+=(curl) # pings the Podman service; the demo's API call
	install_test_tools
	[ ${#pkgs[@]} -gt 0 ] || return 0
	apt_install # pkgs, by bash's dynamic scope
}

# install_test_tools adds to pkgs what only the tests need.
install_test_tools() {
	for_tests || return 0
	# docker-compose.yml is checked by a test with `docker compose`, else docker-compose (v1).
	docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null ||
		pkgs+=(docker-compose)
	# The dashboard's browser test and `make screenshots` drive Debian's headless Chromium.
	command -v chromium >/dev/null || pkgs+=(chromium)
	# e2e installs clients/python into a venv offline (Debian's python3: venv, and setuptools and
	# wheel to build it without PyPI); make vet type-checks it with mypy.
	if [ -x /usr/bin/python3 ]; then
		local spec='import importlib.util as u, sys; sys.exit(u.find_spec(sys.argv[1]) is None)'
		/usr/bin/python3 -c "$spec" ensurepip || pkgs+=(python3-venv)
		/usr/bin/python3 -c "$spec" setuptools || pkgs+=(python3-setuptools)
		/usr/bin/python3 -c "$spec" wheel || pkgs+=(python3-wheel)
		/usr/bin/python3 -c "$spec" mypy || pkgs+=(python3-mypy)
	else
		pkgs+=(python3 python3-venv python3-setuptools python3-wheel python3-mypy)
	fi
}

# apt_install installs pkgs.
apt_install() {
	need_root "installing ${pkgs[*]}"
	# Packages must not start their own daemons (with their own config); we start ours below.
	if [ ! -e "$POLICY_RC" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$POLICY_RC"
		chmod 0755 "$POLICY_RC"
		cleanup_policy=1
	fi
	say "installing ${pkgs[*]}"
	local log
	log=$(mktemp /tmp/sandq-apt.XXXXXX)
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${pkgs[@]}"; } >"$log" 2>&1; then
		show_log "$log"
		die "apt-get install ${pkgs[*]} failed (log: $log)"
	fi
	rm -f "$log"
	hash -r
}

start_dockerd() {
	if docker info >/dev/null 2>&1; then
		return 0
	fi
	local_engine || die "the engine at DOCKER_HOST=$DOCKER_HOST does not answer ('docker info')"
	need_root "starting dockerd"
	local pid="" started="already running; not started by setup.sh"
	if ! pid=$(pid_of dockerd); then
		if ! cgroups_mounted; then
			cgroupfs-mount || die "cgroupfs-mount failed: no cgroups for the engine"
		fi
		# A pid file left by a killed dockerd makes the next one refuse to start.
		rm -f /var/run/docker.pid
		say "starting dockerd (log: $DOCKERD_LOG)"
		# fd 9 is our lock: a daemon that inherited it would hold it forever. Daemons start in
		# $SERVICE_DIR, not in the caller's directory (a checkout): Podman's conmon, for one,
		# writes an "oom" file into its working directory when a container is OOM-killed.
		mkdir -p "$SERVICE_DIR"
		(cd "$SERVICE_DIR" && exec setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null 9>&-) &
		pid=$!
		started="started by setup.sh"
	fi
	local deadline=$((SECONDS + DOCKERD_WAIT))
	until docker info >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			show_log "$DOCKERD_LOG"
			die "dockerd (pid $pid, $started) exited (log: $DOCKERD_LOG)"
		fi
		if [ $SECONDS -ge $deadline ]; then
			show_log "$DOCKERD_LOG"
			die "dockerd (pid $pid, $started) did not answer 'docker info' within ${DOCKERD_WAIT}s"
		fi
		sleep 0.2
	done
}

# runsc_entry: daemon.json's entry for runsc, compact JSON.
runsc_entry() {
	[ -x "$RUNSC" ] || die "$RUNSC is not installed (scripts/runsc.sh)"
	jq -cn --arg path "$RUNSC" --argjson args "$RUNSC_ARGS" '{path: $path, runtimeArgs: $args}'
}

# engine_has_runsc ENTRY: the running engine lists runsc with ENTRY's path and arguments.
engine_has_runsc() {
	docker info --format '{{json .Runtimes}}' 2>/dev/null |
		jq -e --argjson want "$1" '.runsc.path == $want.path and (.runsc.runtimeArgs // []) == $want.runtimeArgs' >/dev/null 2>&1
}

# write_daemon_json ENTRY: set "runtimes": {"runsc": ENTRY} in daemon.json, keeping everything
# else in it; written whole to a temporary file and renamed. A file that is not one JSON object
# is left alone: dockerd would not start with it either, and guessing could lose settings.
write_daemon_json() {
	local want=$1 tmp
	if [ -s "$DAEMON_JSON" ]; then
		jq -se 'length <= 1 and ((.[0] // {}) | type == "object")' "$DAEMON_JSON" >/dev/null 2>&1 ||
			die "$DAEMON_JSON is not one JSON object; fix it, or add {\"runtimes\": {\"runsc\": $want}} by hand"
		if jq -se --argjson want "$want" '(.[0] // {}).runtimes.runsc == $want' "$DAEMON_JSON" >/dev/null 2>&1; then
			return 0
		fi
	fi
	need_root "registering runsc in $DAEMON_JSON"
	say "registering runsc in $DAEMON_JSON"
	mkdir -p "${DAEMON_JSON%/*}"
	tmp=$(mktemp "$DAEMON_JSON.XXXXXX")
	# -s reads an empty file as no value at all, and -n a missing one: both start from {}.
	local src=(-n)
	[ -e "$DAEMON_JSON" ] && src=(-s -- "$DAEMON_JSON")
	if ! jq --argjson want "$want" '(if type == "array" then .[0] else . end // {}) | .runtimes.runsc = $want' "${src[@]}" >"$tmp"; then
		rm -f "$tmp"
		die "could not write $DAEMON_JSON"
	fi
	chmod 0644 "$tmp"
	mv -f "$tmp" "$DAEMON_JSON"
}

# register_runsc: make daemon.json hold runsc (gVisor) as set up above and the engine list it.
# dockerd rereads daemon.json's runtimes on SIGHUP; running containers are not touched.
register_runsc() {
	want_runsc || return 0
	local want pid deadline
	want=$(runsc_entry)
	# The file first, even when the engine lists runsc already: a runtime dropped from the file
	# stays in a running dockerd (a reload only applies the keys the file has) until it restarts.
	write_daemon_json "$want"
	engine_has_runsc "$want" && return 0
	pid=$(pid_of dockerd) || die "dockerd does not run on this machine: cannot reload it for runsc"
	say "reloading dockerd (pid $pid, SIGHUP) for the runsc runtime"
	kill -HUP "$pid"
	deadline=$((SECONDS + RUNSC_WAIT))
	until engine_has_runsc "$want"; do
		if [ $SECONDS -ge $deadline ]; then
			show_log "$DOCKERD_LOG"
			die "dockerd (pid $pid) does not list the runsc runtime ($want) ${RUNSC_WAIT}s after SIGHUP; see 'docker info' and $DOCKERD_LOG"
		fi
		sleep 0.2
	done
}

start_redis() {
	[ "${SANDQ_SETUP_SKIP_REDIS:-}" != 1 ] || return 0
	if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
		# One started before persistence was the default: turn the AOF on (in its dir).
		if [ "$(redis-cli -h 127.0.0.1 -p 6379 config get appendonly 2>/dev/null | tail -n 1)" = no ]; then
			say "redis on 127.0.0.1:6379 runs without persistence: turning on its append-only file"
			{ redis-cli -h 127.0.0.1 -p 6379 config set appendfsync everysec >/dev/null &&
				redis-cli -h 127.0.0.1 -p 6379 config set appendonly yes >/dev/null; } ||
				die "cannot turn on redis's append-only file"
		fi
		return 0
	fi
	mkdir -p "$REDIS_DIR"
	say "starting redis-server on 127.0.0.1:6379, append-only file in $REDIS_DIR (log: $REDIS_LOG)"
	redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --save '' --appendonly yes --appendfsync everysec \
		--dir "$REDIS_DIR" --logfile "$REDIS_LOG" --pidfile /var/run/sandq-redis.pid 9>&- ||
		die "redis-server would not start (log: $REDIS_LOG)"
	local _
	for _ in $(seq 50); do
		[ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ] && return 0
		sleep 0.1
	done
	show_log "$REDIS_LOG"
	die "redis on 127.0.0.1:6379 does not answer PING (log: $REDIS_LOG)"
}

podman_answers() { curl -sf --max-time 5 --unix-socket "$PODMAN_SOCK" http://d/_ping >/dev/null 2>&1; }

start_podman() {
	want_podman || return 0
	case ${CONTAINER_HOST:-} in
	'' | "unix://$PODMAN_SOCK") ;;
	*) return 0 ;; # another service: the tests and the worker say if it does not answer
	esac
	podman_answers && return 0
	need_root "starting podman system service"
	mkdir -p "${PODMAN_SOCK%/*}"
	# A socket file left by a killed service would make the new one fail to listen.
	rm -f "$PODMAN_SOCK"
	say "starting podman system service on unix://$PODMAN_SOCK (log: $PODMAN_LOG)"
	mkdir -p "$SERVICE_DIR"
	(cd "$SERVICE_DIR" && exec setsid podman system service --time=0 "unix://$PODMAN_SOCK" >>"$PODMAN_LOG" 2>&1 </dev/null 9>&-) &
	local pid=$! deadline=$((SECONDS + PODMAN_WAIT))
	until podman_answers; do
		if ! kill -0 "$pid" 2>/dev/null; then
			show_log "$PODMAN_LOG"
			die "podman system service (pid $pid) exited (log: $PODMAN_LOG)"
		fi
		if [ $SECONDS -ge $deadline ]; then
			show_log "$PODMAN_LOG"
			die "podman system service (pid $pid) did not answer on $PODMAN_SOCK within ${PODMAN_WAIT}s"
		fi
		sleep 0.2
	done
}

main() {
	# One setup at a time (two would both start daemons); cheap when all is up.
	exec 9>/tmp/sandq-setup.lock
	flock -w 300 9 || die "another setup.sh holds /tmp/sandq-setup.lock for over 300 s"
	install_missing
	start_dockerd
	if want_runsc; then "$(dirname "${BASH_SOURCE[0]}")/runsc.sh"; fi
	register_runsc
	start_redis
	start_podman
	for_tests || return 0
	"$(dirname "${BASH_SOURCE[0]}")/minio.sh"
	"$(dirname "${BASH_SOURCE[0]}")/inspector.sh"
}

main "$@"
