# sandq r sandbox image (without the agent; scripts/images.sh adds it on top).
# Same conventions as python.Dockerfile: built FROM sandq/base:<hash> by `make images`, Debian
# packages only, job uid 1000, read-only rootfs at run time (only /work and /tmp are writable).
#
# R 4.2 (r-base-core) with ggplot2 and its dependencies from Debian's r-cran-* packages. Left
# out (recommends): r-recommended (lattice, Matrix, nlme, survival, ...; MASS comes with
# ggplot2), r-base-dev (compilers, for installing packages from source) and the HTML docs.
#
# Plots: langs/overlay/r/ holds sandq's site profile (R_PROFILE below), which makes the default
# graphics device a PNG writer into $SANDQ_PLOTS_DIR (default /tmp/sandq-plots), so base
# graphics and printed ggplot2 charts become plot-001.png, plot-002.png, ... unchanged.
# fontconfig's cache is built here, after the font directories' times are set to whole seconds:
# image layers keep no sub-second times, and a cache made against the original ones would be
# stale in the image, so that every R process that plots would rescan the fonts and write a
# cache of its own under $HOME (/tmp/.cache).
#
# r/sigint.c is compiled in a build stage of its own (the final image has no compiler) into
# /usr/lib/sandq/r/sigint.so, which the session driver loads: it puts R's SIGINT handling back
# after each cell (see the file for the R bug it works around).
ARG BASE=debian:bookworm-slim
FROM ${BASE} AS sigint
ARG DEBIAN_FRONTEND=noninteractive
COPY sigint.c /src/sigint.c
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends gcc libc6-dev; \
    gcc -O2 -Wall -Werror -shared -fPIC -o /src/sigint.so /src/sigint.c

FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends \
        fontconfig \
        fonts-dejavu-core \
        r-base-core \
        r-cran-ggplot2; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old; \
    find /var/log -type f -delete; \
    find /usr/share/fonts /usr/local/share/fonts -type d -exec touch -d "@$(date +%s)" {} +; \
    fc-cache -s; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin \
        --comment 'sandq job' sandbox; \
    mkdir -p /work /sandq
COPY --from=sigint /src/sigint.so /usr/lib/sandq/r/sigint.so

ENV LANG=C.UTF-8 \
    HOME=/tmp \
    R_PROFILE=/usr/lib/sandq/r/Rprofile.site \
    SANDQ_PLOTS_DIR=/tmp/sandq-plots

WORKDIR /work
