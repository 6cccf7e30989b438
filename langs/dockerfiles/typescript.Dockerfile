# sandq typescript sandbox image (without the agent; scripts/images.sh adds it on top).
# Same conventions as python.Dockerfile: built FROM sandq/base:<hash> by `make images`, Debian
# packages only, job uid 1000, read-only rootfs at run time (only /work and /tmp are writable).
#
# Node.js 18 and TypeScript 4.8 (tsc), both from bookworm, with Node's type declarations
# (@types/node, shipped by Debian's nodejs). npm as in javascript.Dockerfile (typescript.context
# is a symbolic link to javascript.context; it adds npm.tgz to the context dir typescript/).
#
# Speed: plain tsc spends some 3.5 s of CPU on every run parsing and binding ~55,000 lines of
# declarations (lib.es2022 and @types/node) before it looks at the program. The compile step
# runs typescript/sandq-tsc.js (the build context) instead: the same compiler and options, from
# a Node.js startup snapshot (node --build-snapshot) that holds TypeScript loaded and those
# declarations parsed and bound, so a job pays for its own file only (~0.5 s of CPU).
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends \
        nodejs \
        node-typescript; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old; \
    find /var/log -type f -delete; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin \
        --comment 'sandq job' sandbox; \
    mkdir -p /work /sandq /usr/lib/sandq/ts

ENV LANG=C.UTF-8 \
    HOME=/tmp

COPY sandq-tsc.js /usr/lib/sandq/ts/
RUN set -eux; \
    cd /usr/lib/sandq/ts; \
    node --snapshot-blob tsc.blob --build-snapshot sandq-tsc.js; \
    chmod -R a+rX,go-w /usr/lib/sandq/ts; \
    d=$(mktemp -d); cd "$d"; \
    printf '%s\n' 'export const n: number = 1;' >util.ts; \
    printf '%s\n' 'import { n } from "./util";' 'console.log("hello", n);' >main.ts; \
    node --snapshot-blob /usr/lib/sandq/ts/tsc.blob main.ts; \
    test "$(node main.js)" = 'hello 1'; \
    cd /; rm -rf "$d"

# npm 10.9 from the registry tarball that langs/dockerfiles/javascript.context puts in the build
# context (by hand: `cp -r typescript ctx && javascript.context ctx && docker build -f ... ctx`),
# for the networked install step of a job's libraries only: `npm install --prefix
# /sandq/libs/<dir>/node <name>...` into the libraries volume; the run step finds them through
# NODE_PATH. Its builtin config (npmrc in npm's own directory, the lowest-priority file) turns off
# the update notifier, funding messages and audit, which would only make requests or noise.
# npm writes its cache and logs under $HOME/.npm (/tmp at run time), nothing on the rootfs.
COPY npm.tgz /usr/lib/sandq/npm.tgz
RUN set -eux; \
    mkdir /usr/lib/sandq/npm; \
    tar -xzf /usr/lib/sandq/npm.tgz -C /usr/lib/sandq/npm --strip-components=1 \
        --no-same-owner --no-same-permissions; \
    rm /usr/lib/sandq/npm.tgz; \
    printf '%s\n' 'update-notifier=false' 'fund=false' 'audit=false' >/usr/lib/sandq/npm/npmrc; \
    chmod -R a+rX,go-w /usr/lib/sandq/npm; \
    ln -s /usr/lib/sandq/npm/bin/npm-cli.js /usr/local/bin/npm; \
    ln -s /usr/lib/sandq/npm/bin/npx-cli.js /usr/local/bin/npx; \
    test "$(npm --version)" = "$(node -p 'require("/usr/lib/sandq/npm/package.json").version')"; \
    npx --version; \
    npm config get update-notifier; \
    rm -rf /tmp/.npm /tmp/* /root/.npm

WORKDIR /work
