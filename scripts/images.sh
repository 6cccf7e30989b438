#!/usr/bin/env bash
# images.sh: build the sandq sandbox images without a container registry.
#
#   scripts/images.sh [LANG...]       (default: every langs/dockerfiles/<lang>.Dockerfile)
#
# Three layers, each skipped when it is already there:
#   sandq/base:<b>          a Debian bookworm minbase rootfs made by debootstrap, `docker import`ed.
#                           <b> hashes base_rootfs below, images/base/ and the architecture.
#                           The rootfs tar is cached as $SANDQ_CACHE/base-<b>.tar.
#   sandq/lang-<lang>:<h>   langs/dockerfiles/<lang>.Dockerfile built FROM sandq/base:<b>.
#                           <h> hashes the Dockerfile and <b>. The build context is empty:
#                           a Dockerfile makes what it needs in RUN steps. Two exceptions, both
#                           part of <h>: the files of langs/dockerfiles/<lang>/, if that
#                           directory exists, are the context (e.g. TypeScript's compiler
#                           driver); and langs/dockerfiles/<lang>.context, if present, is run on
#                           this host as `<lang>.context DIR` to add what RUN steps cannot fetch
#                           (Go modules, npm: the build's containers may not trust a TLS-
#                           intercepting proxy's CA that this host trusts), into the same DIR as
#                           the context dir's files; its text is hashed, so its output must be
#                           fixed by its text. `docker save`d to
#                           $SANDQ_CACHE/lang-<lang>-<h>.tar; an engine that lacks the tag
#                           `docker load`s that file instead of building.
#   sandq/<lang>:latest     the lang image plus langs/overlay/<lang>/ (copied to /) and the agent
#                           (bin/sandq-agent, built here) at /sandq/agent as ENTRYPOINT. Rebuilt
#                           when the agent's sha256, the overlay's hash, <h> or the hash of
#                           ensure_final (the final layer's recipe, label sandq.final) differs
#                           from the image's labels. It also holds /sandq/libs, an empty dir
#                           owned by root, where a job's libraries volume is mounted.
# No file of a final image is setuid or setgid (su, mount, passwd, ... ship with Debian): the
# final layer clears those bits, and a test checks every image.
# The base image is only needed (and only made) when a lang image has to be built.
# Every image is labelled sandq.image=<lang> and sandq.recipe=<hash>; the final one also
# sandq.agent=<sha256 of the agent binary>, sandq.overlay=<hash> and sandq.final=<hash>.
#
# With BACKEND naming podman (e.g. BACKEND=podman or BACKEND="docker podman"), the final images
# are then copied from Docker into Podman's storage (`docker save | podman load`; the image ID, the
# digest of its config, is the same in both engines), skipping those Podman already has by ID.
#
# Environment: SANDQ_CACHE (default ~/.cache/sandq), GO (default go), DOCKER (default docker),
# BACKEND (default docker), PODMAN (default podman).
# Quiet when nothing is to be done; one line per real step; on failure, the step's log tail.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SANDQ_CACHE:-~/.cache/sandq}
GO=${GO:-go}
if ! command -v "$GO" >/dev/null && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
DOCKER=${DOCKER:-docker}
BACKEND=${BACKEND:-docker}
PODMAN=${PODMAN:-podman}
LOGDIR=$CACHE/log
TMPDIRS=()

say() { printf 'images: %s\n' "$*" >&2; }
die() { printf 'images: FAIL: %s\n' "$*" >&2; exit 1; }

cleanup() {
	local d
	for d in "${TMPDIRS[@]}"; do
		unmount_under "$d"
		rm -rf --one-file-system "$d"
	done
}
trap cleanup EXIT

# unmount_under DIR: undo mounts a failed debootstrap may leave (proc, sys, dev binds), deepest
# first, so that removing DIR never reaches into the host.
unmount_under() {
	local m
	[ -d "$1" ] || return 0
	awk -v d="$(realpath "$1")" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts |
		sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

no_mounts_under() {
	local d
	d=$(realpath "$1")
	if awk -v d="$d" '$2 == d || index($2, d "/") == 1 { found = 1 } END { exit !found }' /proc/mounts; then
		echo "mounts left under $d" >&2
		return 1
	fi
}

newtmp() { # newtmp VAR: a fresh directory in the cache (same disk as the cache files)
	local d
	d=$(mktemp -d "$CACHE/tmp.XXXXXX")
	TMPDIRS+=("$d")
	printf -v "$1" '%s' "$d"
}

# run LOG CMD...: run CMD with its output in $LOGDIR/LOG; on failure show the tail and stop.
# CMD runs as a background job so that `set -e` holds inside shell functions too (it would be
# ignored under `if`).
run() {
	local log=$LOGDIR/$1
	shift
	"$@" >"$log" 2>&1 &
	if ! wait $!; then
		printf 'images: FAIL:' >&2
		printf ' %q' "$@" >&2
		printf '\n' >&2
		printf 'images: last lines of %s:\n' "$log" >&2
		tail -n 40 "$log" | sed 's/^/  | /' >&2
		exit 1
	fi
}

have_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

label() { # label IMAGE KEY: the label's value, empty when unset or no such image
	"$DOCKER" image inspect -f "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true
}

# keep_only GLOB KEEP: remove the cache files matching GLOB except KEEP.
keep_only() {
	local f
	for f in $1; do
		[ -e "$f" ] && [ "$f" != "$2" ] && rm -f "$f"
	done
	return 0
}

# untag_others REPO KEEP_TAG: drop older tags of REPO (best effort: one in use by a container
# stays until that container is gone).
untag_others() {
	local ref
	"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' "$1" | while read -r ref; do
		[ "$ref" = "$1:$2" ] || "$DOCKER" rmi "$ref" >/dev/null 2>&1 || true
	done
}

hash12() { sha256sum | cut -c1-12; }

# --- base ---------------------------------------------------------------------------------
# base_rootfs DIR: the recipe of sandq/base (run by `run`, so in a subshell: the cd stays here).
# Its body (via declare -f), the files under images/base/ and the architecture make the base
# hash: edit either and everything rebuilds.
base_rootfs() {
	local root=${1:?} f
	debootstrap --variant=minbase --include=ca-certificates \
		bookworm "$root" http://deb.debian.org/debian
	no_mounts_under "$root"
	cd "$root"
	cp -a "$ROOT/images/base/rootfs/." .
	rm -f etc/apt/sources.list
	# What debian:bookworm-slim leaves out, and what the build left behind.
	rm -rf var/lib/apt/lists/* var/cache/apt/* var/cache/debconf/*-old var/lib/dpkg/*-old \
		var/cache/ldconfig/aux-cache usr/share/man/* usr/share/groff/* usr/share/info/* \
		usr/share/lintian/* usr/share/linda/* usr/share/locale/* \
		debootstrap dev/* run/* tmp/* var/tmp/*
	find usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
	find usr/share/doc -mindepth 1 -type d -empty -delete
	find var/log -type f -delete
	# The engine provides these at run time.
	for f in etc/resolv.conf etc/hostname etc/hosts; do : >"$f"; done
	rm -f etc/machine-id var/lib/dbus/machine-id
}

base_hash() {
	{
		declare -f base_rootfs
		dpkg --print-architecture
		(cd "$ROOT/images/base" && find . -type f -printf '%p %m\n' | LC_ALL=C sort &&
			find . -type f -print0 | LC_ALL=C sort -z | xargs -0 cat)
	} | hash12
}

ensure_base() {
	local img=sandq/base:$BASE_HASH tar=$CACHE/base-$BASE_HASH.tar tmp
	have_image "$img" && return 0
	if [ ! -f "$tar" ]; then
		[ "$(id -u)" = 0 ] || die "building the base rootfs needs root (debootstrap)"
		command -v debootstrap >/dev/null || die "debootstrap missing: run scripts/setup.sh"
		say "debootstrap bookworm minbase (base $BASE_HASH)"
		newtmp tmp
		run base-debootstrap.log base_rootfs "$tmp/rootfs"
		run base-tar.log tar --numeric-owner --xattrs -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
		mv "$tmp/rootfs.tar" "$tar"
		keep_only "$CACHE/base-*.tar" "$tar"
	fi
	run base-import.log "$DOCKER" import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["bash"]' \
		--change 'LABEL sandq.image=base' \
		--change "LABEL sandq.recipe=$BASE_HASH" \
		--message "sandq base $BASE_HASH (debootstrap bookworm minbase)" \
		"$tar" "$img"
	untag_others sandq/base "$BASE_HASH"
}

# --- language images ----------------------------------------------------------------------
lang_hash() { # lang_hash DOCKERFILE: the base, the Dockerfile, its context dir and script
	local dir=${1%.Dockerfile}
	{
		printf 'base %s\n' "$BASE_HASH"
		cat "$1"
		if [ -d "$dir" ]; then
			printf 'context dir\n'
			(cd "$dir" && find . -type f -printf '%p %m\n' | LC_ALL=C sort &&
				find . -type f -print0 | LC_ALL=C sort -z | xargs -0 cat)
		fi
		if [ -f "$dir.context" ]; then printf 'context script\n'; cat "$dir.context"; fi
	} | hash12
}

ensure_lang() { # ensure_lang LANG HASH DOCKERFILE
	local lang=$1 h=$2 df=$3 img=sandq/lang-$1:$2 tar=$CACHE/lang-$1-$2.tar tmp
	have_image "$img" && return 0
	if [ -f "$tar" ]; then
		say "loading $img from $tar"
		run "lang-$lang-load.log" "$DOCKER" load -q -i "$tar"
		have_image "$img" || die "$tar did not hold $img"
		return 0
	fi
	ensure_base
	say "building $img (apt inside the build; a few minutes)"
	newtmp tmp
	mkdir "$tmp/context"
	if [ -d "${df%.Dockerfile}" ]; then
		cp -a "${df%.Dockerfile}/." "$tmp/context/"
	fi
	if [ -f "${df%.Dockerfile}.context" ]; then
		GO=$GO run "lang-$lang-context.log" "${df%.Dockerfile}.context" "$tmp/context"
	fi
	run "lang-$lang-build.log" "$DOCKER" build \
		--build-arg "BASE=sandq/base:$BASE_HASH" \
		--label "sandq.image=$lang" --label "sandq.recipe=$h" \
		-t "$img" -f "$df" "$tmp/context"
	run "lang-$lang-save.log" "$DOCKER" save -o "$tmp/image.tar" "$img"
	mv "$tmp/image.tar" "$tar"
	keep_only "$CACHE/lang-$lang-*.tar" "$tar"
	untag_others "sandq/lang-$lang" "$h"
}

# --- agent layer --------------------------------------------------------------------------
# The final layer holds the agent and langs/overlay/<lang>/ (files copied to / as they are, e.g.
# Python's start-up hooks). Both are small and change often, so they live here, not in the lang
# image: changing them rebuilds this layer in seconds.
overlay_hash() { # overlay_hash LANG: hash of langs/overlay/LANG (empty dir if none)
	local d=$ROOT/langs/overlay/$1
	[ -d "$d" ] || { echo none; return; }
	(cd "$d" && find . -type f -printf '%p %m\n' | LC_ALL=C sort &&
		find . -type f -print0 | LC_ALL=C sort -z | xargs -0 cat) | hash12
}

final_current() { # final_current LANG HASH: sandq/LANG:latest holds this recipe, agent, overlay
	[ "$(label "sandq/$1:latest" sandq.final)" = "$FINAL_HASH" ] &&
		[ "$(label "sandq/$1:latest" sandq.agent)" = "$AGENT_SHA" ] &&
		[ "$(label "sandq/$1:latest" sandq.recipe)" = "$2" ] &&
		[ "$(label "sandq/$1:latest" sandq.overlay)" = "$(overlay_hash "$1")" ]
}

ensure_final() { # ensure_final LANG HASH
	local lang=$1 h=$2 img=sandq/$1:latest tmp ov
	ov=$(overlay_hash "$lang")
	newtmp tmp
	mkdir "$tmp/overlay"
	if [ -d "$ROOT/langs/overlay/$lang" ]; then
		cp -a "$ROOT/langs/overlay/$lang/." "$tmp/overlay/"
	fi
	# One COPY, agent included: with the legacy builder, a COPY that adds nothing (an empty
	# overlay) followed by another COPY fails now and then with "layer does not exist".
	# /sandq/libs is where a job's libraries volume is mounted (read-write for the install step,
	# read-only for the run). It is an empty directory owned by root, 0755: mounting an empty
	# named volume there copies it up, ownership and mode included (Docker and Podman 4.3
	# alike, unless the mount says nocopy), so an install may write only the set's directory,
	# which the agent makes for it. Made by a RUN, not COPY (COPY --chown applies to the whole
	# overlay); exec form.
	mkdir -p "$tmp/overlay/sandq"
	install -m 0755 "$AGENT" "$tmp/overlay/sandq/agent"
	# Python: the agent's fork server (agent/prestart_linux.go) is a library every dynamically
	# linked process loads, through /etc/ld.so.preload: a cold start loads it too, and it stays
	# inert unless the agent started the process as a fork server.
	if [ "$lang" = python ]; then
		install -m 0755 "$PYFORK" "$tmp/overlay/sandq/pyfork.so"
		mkdir -p "$tmp/overlay/etc"
		echo /sandq/pyfork.so >"$tmp/overlay/etc/ld.so.preload"
	fi
	# Python files of the overlay (start-up hooks, imported by every Python process) are byte-
	# compiled here: with PYTHONDONTWRITEBYTECODE and a read-only rootfs nothing else would, and
	# every start would compile them from source (~3.5 ms of a ~20 ms start). The .pyc files are
	# checked by source hash, not mtime. setuptools' distutils-precedence.pth goes too: it imports
	# _distutils_hack at every start (~0.8 ms) for programs that import distutils before
	# setuptools; setuptools still applies it itself when imported.
	local pyrun=""
	local -a py=()
	mapfile -t py < <(cd "$tmp/overlay" && find . -name '*.py' | sed 's|^\.||' | LC_ALL=C sort)
	if [ "${#py[@]}" -gt 0 ]; then
		pyrun="RUN python3 -m compileall -q --invalidation-mode unchecked-hash ${py[*]} \
&& rm -f /usr/lib/python3/dist-packages/distutils-precedence.pth"
	fi
	cat >"$tmp/Dockerfile" <<-EOF
		FROM sandq/lang-$lang:$h
		COPY --chown=0:0 overlay/ /
		RUN ["/usr/bin/install", "-d", "-o", "0", "-g", "0", "-m", "0755", "/sandq/libs"]
		RUN ["/usr/bin/find", "/", "-xdev", "-type", "f", "-perm", "/6000", "-exec", "/bin/chmod", "ug-s", "{}", "+"]
		$pyrun
		LABEL sandq.image=$lang sandq.recipe=$h sandq.agent=$AGENT_SHA sandq.overlay=$ov sandq.final=$FINAL_HASH
		USER 0:0
		ENTRYPOINT ["/sandq/agent"]
		CMD []
	EOF
	run "final-$lang-build.log" "$DOCKER" build -t "$img" "$tmp"
	say "built $img (agent ${AGENT_SHA:0:12}, overlay $ov)"
}

# --- Podman -------------------------------------------------------------------------------
image_id() { # image_id ENGINE IMAGE: the image's ID without "sha256:", empty if none
	local id
	id=$("$1" image inspect -f '{{.Id}}' "$2" 2>/dev/null) || return 0
	echo "${id#sha256:}"
}

to_podman() { # to_podman LANG...: copy sandq/LANG:latest from Docker to Podman where it differs
	local lang img todo=()
	command -v "$PODMAN" >/dev/null || die "$PODMAN missing: run scripts/setup.sh"
	for lang in "$@"; do
		img=sandq/$lang:latest
		[ "$(image_id "$PODMAN" "$img")" = "$(image_id "$DOCKER" "$img")" ] || todo+=("$img")
	done
	[ ${#todo[@]} -gt 0 ] || return 0
	say "copying ${todo[*]} from Docker to Podman"
	# One stream: the layers the images share travel once. ($1 and $2 are the inner bash's.)
	# shellcheck disable=SC2016
	run podman-load.log bash -c 'set -o pipefail; "$1" save "${@:3}" | "$2" load' _ "$DOCKER" "$PODMAN" "${todo[@]}"
	for img in "${todo[@]}"; do
		[ "$(image_id "$PODMAN" "$img")" = "$(image_id "$DOCKER" "$img")" ] ||
			die "$img in Podman does not have Docker's image ID after the copy"
	done
	# The images the copies replaced, now untagged (unless a container uses them).
	"$PODMAN" image prune -f --filter label=sandq.image >/dev/null 2>&1 || true
}

# --- main ---------------------------------------------------------------------------------
main() {
	local langs=("$@") lang df h d
	cd "$ROOT"
	mkdir -p "$CACHE" "$LOGDIR"
	"$DOCKER" version -f '{{.Server.Version}}' >/dev/null 2>&1 ||
		die "no container engine answers ('$DOCKER version'); run scripts/setup.sh"
	# One images.sh at a time per cache.
	exec 9>"$CACHE/.lock"
	flock 9
	for d in "$CACHE"/tmp.*; do # left by a killed run
		[ -d "$d" ] || continue
		unmount_under "$d"
		rm -rf --one-file-system "$d"
	done

	if [ ${#langs[@]} -eq 0 ]; then
		for df in langs/dockerfiles/*.Dockerfile; do
			[ -e "$df" ] || die "no langs/dockerfiles/*.Dockerfile"
			lang=${df##*/}
			langs+=("${lang%.Dockerfile}")
		done
	fi

	AGENT=$ROOT/bin/sandq-agent
	mkdir -p "$ROOT/bin"
	CGO_ENABLED=0 run agent-build.log "$GO" build -trimpath -ldflags '-s -w' -o "$AGENT" ./cmd/agent
	# Python's fork server (agent/pyfork/pyfork.c, preloaded in the Python image), built with this
	# host's C compiler against the same Debian release's libc as the images'. Part of the agent:
	# the label sandq.agent hashes both.
	PYFORK=$ROOT/bin/sandq-pyfork.so
	command -v "${CC:-gcc}" >/dev/null || die "no C compiler (${CC:-gcc}): run scripts/setup.sh"
	run pyfork-build.log "${CC:-gcc}" -O2 -shared -fPIC -Wall -Wextra -Werror -o "$PYFORK" agent/pyfork/pyfork.c
	AGENT_SHA=$(cat "$AGENT" "$PYFORK" | sha256sum | cut -d' ' -f1)

	BASE_HASH=$(base_hash)
	# The final layer's recipe is ensure_final's code (declare -f drops comments): change it and
	# every final image rebuilds.
	FINAL_HASH=$(declare -f ensure_final | hash12)
	for lang in "${langs[@]}"; do
		df=langs/dockerfiles/$lang.Dockerfile
		[ -f "$df" ] || die "no $df"
		h=$(lang_hash "$df")
		final_current "$lang" "$h" && continue # the lang image itself is not needed then
		ensure_lang "$lang" "$h" "$df"
		ensure_final "$lang" "$h"
	done
	# Old sandq/<lang>:latest images the rebuilds left untagged (unless a container uses them).
	# Only those older than an hour: the intermediate images of a build running right now (by
	# an images.sh with another cache, so not behind our lock) are untagged and inherit the
	# sandq.image label too, and removing them fails that build ("layer does not exist").
	"$DOCKER" image prune -f --filter label=sandq.image --filter until=1h >/dev/null 2>&1 || true
	case " $BACKEND " in *" podman "*) to_podman "${langs[@]}" ;; esac
}

main "$@"
