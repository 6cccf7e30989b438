#!/usr/bin/env bash
# runsc.sh: make sure gVisor's runsc is at /usr/local/bin/runsc, built from gVisor's source as the
# Go module proxy serves it (its go-buildable branch). Debian's runsc (bookworm: 2022-12) has only
# the ptrace platform, about twice as slow here as systrap, the default of gVisor since 2023, and
# four years of fixes less. The build takes about a minute on a fresh machine, so the binary is
# cached in $SANDQ_CACHE/runsc/runsc-<version>: the version below is the recipe; change it to
# upgrade. Quiet and instant when the binary is in place.
set -euo pipefail
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
CACHE=${SANDQ_CACHE:-$HOME/.cache/sandq}
GO=${GO:-go}
if ! command -v "$GO" >/dev/null && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
DEST=/usr/local/bin/runsc
CACHED=$CACHE/runsc/runsc-$GVISOR_VERSION

say() { printf 'runsc: %s\n' "$*" >&2; }

if [ -x "$DEST" ] && cmp -s "$DEST" "$CACHED" 2>/dev/null; then
	exit 0
fi
if [ ! -x "$CACHED" ]; then
	mkdir -p "$CACHE/runsc"
	tmp=$(mktemp -d "$CACHE/runsc/build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	say "building gVisor's runsc $GVISOR_VERSION with go install (about a minute the first time; cached after)"
	if ! GOBIN=$tmp CGO_ENABLED=0 "$GO" install "gvisor.dev/gvisor/runsc@$GVISOR_VERSION" >"$tmp/log" 2>&1; then
		tail -n 30 "$tmp/log" >&2
		say "FAIL: go install gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
		exit 1
	fi
	mv "$tmp/runsc" "$CACHED"
	find "$CACHE/runsc" -maxdepth 1 -name 'runsc-*' ! -name "runsc-$GVISOR_VERSION" -delete
fi
install -m 0755 "$CACHED" "$DEST"
"$DEST" --version >/dev/null || { say "FAIL: $DEST does not run"; exit 1; }
