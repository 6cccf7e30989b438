# sandq cpp sandbox image (without the agent; scripts/images.sh adds it on top).
# Same conventions as python.Dockerfile: built FROM sandq/base:<hash> by `make images`, Debian
# packages only, job uid 1000, read-only rootfs at run time (only /work and /tmp are writable).
#
# G++ 12 (C++17 by default in the compile command); libssl-dev so that programs can include
# <openssl/md5.h> and link with -lcrypto (HumanEvalPack CPP/162); libboost-dev for the header-only
# Boost libraries (<boost/any.hpp> in HumanEvalPack CPP/22 and CPP/137).
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends \
        g++ \
        libboost-dev \
        libssl-dev; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old; \
    find /var/log -type f -delete; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin \
        --comment 'sandq job' sandbox; \
    mkdir -p /work /sandq

ENV LANG=C.UTF-8 \
    HOME=/tmp

WORKDIR /work
