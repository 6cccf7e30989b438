#!/usr/bin/env bash
# minio.sh: make sure the MinIO server binary is at /usr/local/bin/minio (tests start private
# MinIO instances from it). `go install` of MinIO takes minutes on a fresh machine: goinstall.sh
# caches the binary by the version below, the recipe; change it to upgrade.
set -euo pipefail
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
exec "$(dirname "${BASH_SOURCE[0]}")/goinstall.sh" minio "github.com/minio/minio@$MINIO_VERSION"
