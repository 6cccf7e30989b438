# sandq Python sandbox image (without the agent; scripts/images.sh adds it on top).
#
# `make images` builds this FROM sandq/base:<hash>, a Debian bookworm minbase rootfs made with
# debootstrap, because no registry is needed that way. With a registry it builds unchanged:
#   docker build -f langs/dockerfiles/python.Dockerfile langs/dockerfiles
# Any change to this file changes the image hash and so rebuilds the image.
#
# pip (with setuptools and wheel, which --no-install-recommends leaves out, for source
# distributions) is only for the networked install step of a job's libraries: it runs
# `python3 -m pip install --target /sandq/libs/<dir>/python ...` into the libraries volume, and the
# run step finds them through PYTHONPATH. Debian's EXTERNALLY-MANAGED marker (PEP 668) does not
# apply to --target, and the system site-packages stay untouched (the rootfs is read-only anyway).
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends \
        python3 \
        python3-matplotlib \
        python3-numpy \
        python3-pandas \
        python3-pip \
        python3-plotly \
        python3-scipy \
        python3-seaborn \
        python3-setuptools \
        python3-sklearn \
        python3-wheel; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old; \
    find /var/log -type f -delete; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin \
        --comment 'sandq job' sandbox; \
    mkdir -p /work /sandq /etc/sandq/mpl

ENV LANG=C.UTF-8 \
    HOME=/tmp \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/.matplotlib \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# matplotlib's font cache, built at image build time as the job uid into /etc/sandq/mpl.
# The rootfs is read-only when jobs run, and matplotlib only uses a *writable* config dir: on a
# read-only one it warns on stderr and rebuilds the cache in a temp dir in every process. So
# MPLCONFIGDIR points into /tmp (a tmpfs at run time), and sandq's start-up hook (added by
# scripts/images.sh from langs/overlay/python/) copies the baked cache there when, and only when,
# a program first imports matplotlib: other programs find /tmp empty.
#
# matplotlib's -nspkg.pth is removed: it imports importlib.util at every interpreter start
# (about 5 ms) to declare mpl_toolkits a namespace package, which it is not in Debian (it has an
# __init__.py).
RUN set -eux; \
    chown 1000:1000 /etc/sandq/mpl; \
    setpriv --reuid 1000 --regid 1000 --clear-groups env MPLCONFIGDIR=/etc/sandq/mpl \
        python3 -c 'import matplotlib.pyplot, numpy, pandas, scipy, seaborn, sklearn, plotly'; \
    chown -R 0:0 /etc/sandq/mpl; \
    chmod -R a+rX,go-w /etc/sandq/mpl; \
    ls /etc/sandq/mpl/fontlist-*.json; \
    rm -f /usr/lib/python3/dist-packages/matplotlib-*-nspkg.pth; \
    python3 -c 'import mpl_toolkits.mplot3d'

WORKDIR /work
