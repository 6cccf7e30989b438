#!/usr/bin/env bash
# minio.sh: make sure the MinIO server binary is at /usr/local/bin/minio (tests start private
# MinIO instances from it). `go install` of MinIO takes minutes on a fresh machine, so the binary
# is cached in $SANDQ_CACHE/minio/minio-<version>: the version below is the recipe; change it to
# upgrade. Quiet and instant when the binary is in place.
set -euo pipefail
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
CACHE=${SANDQ_CACHE:-$HOME/.cache/sandq}
GO=${GO:-go}
if ! command -v "$GO" >/dev/null && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
DEST=/usr/local/bin/minio
CACHED=$CACHE/minio/minio-$MINIO_VERSION

say() { printf 'minio: %s\n' "$*" >&2; }

if [ -x "$DEST" ] && cmp -s "$DEST" "$CACHED" 2>/dev/null; then
	exit 0
fi
if [ ! -x "$CACHED" ]; then
	mkdir -p "$CACHE/minio"
	tmp=$(mktemp -d "$CACHE/minio/build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	say "building MinIO $MINIO_VERSION with go install (minutes the first time; cached after)"
	if ! GOBIN=$tmp "$GO" install "github.com/minio/minio@$MINIO_VERSION" >"$tmp/log" 2>&1; then
		tail -n 30 "$tmp/log" >&2
		say "FAIL: go install github.com/minio/minio@$MINIO_VERSION"
		exit 1
	fi
	mv "$tmp/minio" "$CACHED"
	find "$CACHE/minio" -maxdepth 1 -name 'minio-*' ! -name "minio-$MINIO_VERSION" -delete
fi
install -m 0755 "$CACHED" "$DEST"
"$DEST" --version >/dev/null || { say "FAIL: $DEST does not run"; exit 1; }
