#!/usr/bin/env bash
# inspector.sh: make sure the MCP Inspector (@modelcontextprotocol/inspector, an independent MCP
# client; the e2e tests drive sandq's MCP server with its --cli mode) is installed under
# $SANDQ_CACHE/npm/inspector-<version>, from the npm registry. The version below is the recipe;
# change it to upgrade. Quiet and instant when it is in place. Needs node and npm (installed from
# Debian when missing).
set -euo pipefail
INSPECTOR_VERSION=2.12.0
CACHE=${SANDQ_CACHE:-$HOME/.cache/sandq}
DIR=$CACHE/npm/inspector-$INSPECTOR_VERSION
BIN=$DIR/node_modules/.bin/mcp-inspector

say() { printf 'inspector: %s\n' "$*" >&2; }

if [ -x "$BIN" ]; then
	exit 0
fi
if ! command -v npm >/dev/null; then
	say "installing nodejs and npm"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
mkdir -p "$CACHE/npm"
tmp=$(mktemp -d "$CACHE/npm/install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
say "installing @modelcontextprotocol/inspector@$INSPECTOR_VERSION from npm (cached after)"
if ! (cd "$tmp" && npm install --no-audit --no-fund --loglevel=error "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" >"$tmp/log" 2>&1); then
	tail -n 30 "$tmp/log" >&2
	say "FAIL: npm install @modelcontextprotocol/inspector@$INSPECTOR_VERSION"
	exit 1
fi
rm -rf "$DIR"
mv "$tmp" "$DIR"
trap - EXIT
find "$CACHE/npm" -maxdepth 1 -name 'inspector-*' ! -name "inspector-$INSPECTOR_VERSION" -exec rm -rf {} +
[ -x "$BIN" ] || { say "FAIL: $BIN missing after the install"; exit 1; }
