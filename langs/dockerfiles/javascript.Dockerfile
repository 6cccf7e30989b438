# sandq javascript sandbox image (without the agent; scripts/images.sh adds it on top).
# Same conventions as python.Dockerfile: built FROM sandq/base:<hash> by `make images`, Debian
# packages only, job uid 1000, read-only rootfs at run time (only /work and /tmp are writable).
#
# Node.js 18 (bookworm). Debian's npm is left out: it pulls in some 300 Debian node-* packages
# that no program needs at run time; npm comes from its registry tarball instead (below).
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends \
        nodejs; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old; \
    find /var/log -type f -delete; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin \
        --comment 'sandq job' sandbox; \
    mkdir -p /work /sandq /usr/lib/sandq

ENV LANG=C.UTF-8 \
    HOME=/tmp

# npm 10.9 from the registry tarball that langs/dockerfiles/javascript.context puts in the build
# context (build by hand with `mkdir ctx && javascript.context ctx && docker build -f ... ctx`),
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
