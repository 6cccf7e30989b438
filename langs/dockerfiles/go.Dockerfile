# sandq Go sandbox image (without the agent; scripts/images.sh adds it on top).
# Same conventions as python.Dockerfile: built FROM sandq/base:<hash> by `make images`.
#
# Go 1.23 from bookworm-backports (bookworm's own is 1.19, too old for today's code: no
# slices/maps packages, no min/max builtins, no range over int).
#
# Speed: since Go 1.20 the standard library is not shipped compiled, so with an empty build
# cache every job would compile the packages it imports (fmt alone pulls in ~40), tens of
# seconds. The image carries a build cache, warmed here for the whole standard library and for
# testify, at /usr/lib/sandq/go/cache, and the Go command uses it read-only (GOCACHE): a hit is
# just read, and the job's own package, compiled anew, cannot be stored (the write fails
# quietly). See langs.Lang for the compile command.
#
# Offline modules: github.com/stretchr/testify v1.8.0 (HumanEvalPack's Go tests use it) and the
# modules its build graph needs come from the build context (langs/dockerfiles/go.context makes
# it on the host; build by hand with `mkdir ctx && go.context ctx && docker build -f ... ctx`).
# They are served offline by GOPROXY=file:///usr/lib/sandq/go/proxy and already extracted in the
# read-only module cache /usr/lib/sandq/go/mod. /usr/lib/sandq/go/template holds a go.mod and
# go.sum requiring testify that the compile step copies into a work dir that has none.
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
        'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
        >/etc/apt/sources.list.d/backports.sources; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends -t bookworm-backports golang-1.23-go; \
    rm /etc/apt/sources.list.d/backports.sources; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old; \
    find /var/log -type f -delete; \
    ln -s /usr/lib/go-1.23/bin/go /usr/lib/go-1.23/bin/gofmt /usr/local/bin/; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin \
        --comment 'sandq job' sandbox; \
    mkdir -p /work /sandq /usr/lib/sandq/go/template /etc/sandq/xdg/go/telemetry

# GOTOOLCHAIN=local: never look for another toolchain. XDG_CONFIG_HOME holds Go's telemetry
# mode ("off"), so the go command writes nothing under $HOME.
ENV LANG=C.UTF-8 \
    HOME=/tmp \
    CGO_ENABLED=0 \
    GOTOOLCHAIN=local \
    GOCACHE=/usr/lib/sandq/go/cache \
    GOMODCACHE=/usr/lib/sandq/go/mod \
    GOPROXY=file:///usr/lib/sandq/go/proxy \
    GOSUMDB=off \
    GOFLAGS=-mod=mod \
    XDG_CONFIG_HOME=/etc/sandq/xdg

COPY goproxy /usr/lib/sandq/go/proxy

# Warm the build cache for the whole standard library and for testify, as the job would use
# it (same environment), then make everything read-only for the job uid.
#
# trim.txt: the go command keeps in it the time of its last cache trim and, a day later, writes
# it again before it trims; in a read-only cache that write fails and fails the build ("go:
# failed to trim cache: ... permission denied"), so a day after the image was built every Go job
# would be a compile error. It is a link to a file in the job's /tmp, which the compile step
# (langs.go) writes with the current time just before `go build`: the trim is then never due.
RUN set -eux; \
    echo off >/etc/sandq/xdg/go/telemetry/mode; \
    d=$(mktemp -d); cd "$d"; \
    printf '%s\n' 'module sandq/job' '' 'go 1.23' '' 'require github.com/stretchr/testify v1.8.0' >go.mod; \
    printf '%s\n' 'package main' '' 'import (' '	"testing"' '' '	"github.com/stretchr/testify/assert"' \
        '	"github.com/stretchr/testify/require"' ')' '' \
        'func TestX(t *testing.T) { assert.True(t, true); require.True(t, true) }' >main_test.go; \
    printf '%s\n' 'package main' '' 'import "fmt"' '' 'func main() { fmt.Println("hello") }' >main.go; \
    go mod download all; \
    cp go.mod go.sum /usr/lib/sandq/go/template/; \
    go build std; \
    go build -ldflags='-s -w' -o main . && ./main; \
    go test -count=1 .; \
    go vet .; \
    cd /; rm -rf "$d"; \
    ln -sf /tmp/.sandq-go-trim.txt /usr/lib/sandq/go/cache/trim.txt; \
    chmod -R a+rX,go-w /usr/lib/sandq/go /etc/sandq; \
    du -sh /usr/lib/sandq/go/*

WORKDIR /work
