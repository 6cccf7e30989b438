#!/usr/bin/env bash
# goinstall.sh NAME PACKAGE@VERSION: make sure the binary NAME, built by `go install
# PACKAGE@VERSION` from the Go module proxy, is at /usr/local/bin/NAME. Builds take from a minute
# to several on a fresh machine, so the binary is cached in $SANDQ_CACHE/NAME/NAME-<version>: the
# version is the recipe (the calling script pins it; change it there to upgrade). Quiet and instant
# when the binary is in place. GOINSTALL_ENV may hold VAR=value words for the build (CGO_ENABLED=0).
set -euo pipefail
NAME=$1
PKG=${2%@*}
VERSION=${2##*@}
CACHE=${SANDQ_CACHE:-$HOME/.cache/sandq}
GO=${GO:-go}
if ! command -v "$GO" >/dev/null && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
DEST=/usr/local/bin/$NAME
CACHED=$CACHE/$NAME/$NAME-$VERSION

say() { printf '%s: %s\n' "$NAME" "$*" >&2; }

if [ -x "$DEST" ] && cmp -s "$DEST" "$CACHED" 2>/dev/null; then
	exit 0
fi
if [ ! -x "$CACHED" ]; then
	mkdir -p "$CACHE/$NAME"
	tmp=$(mktemp -d "$CACHE/$NAME/build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	say "building $PKG@$VERSION with go install (minutes the first time; cached after)"
	# shellcheck disable=SC2086 # GOINSTALL_ENV is words on purpose
	if ! env GOBIN="$tmp" ${GOINSTALL_ENV:-} "$GO" install "$PKG@$VERSION" >"$tmp/log" 2>&1; then
		tail -n 30 "$tmp/log" >&2
		say "FAIL: go install $PKG@$VERSION"
		exit 1
	fi
	mv "$tmp/$NAME" "$CACHED"
	find "$CACHE/$NAME" -maxdepth 1 -name "$NAME-*" ! -name "$NAME-$VERSION" -delete
fi
install -m 0755 "$CACHED" "$DEST"
"$DEST" --version >/dev/null || { say "FAIL: $DEST does not run"; exit 1; }
