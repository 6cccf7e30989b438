#!/usr/bin/env bash
# runsc.sh: make sure gVisor's runsc is at /usr/local/bin/runsc, built from gVisor's source as the
# Go module proxy serves it (its go-buildable branch). Debian's runsc (bookworm: 2022-12) has only
# the ptrace platform, about 1.6 times as slow here as systrap, the default of gVisor since 2023,
# and four years of fixes less. The build takes about a minute on a fresh machine: goinstall.sh
# caches the binary by the version below, the recipe; change it to upgrade.
set -euo pipefail
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
GOINSTALL_ENV=CGO_ENABLED=0 exec "$(dirname "${BASH_SOURCE[0]}")/goinstall.sh" runsc "gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
