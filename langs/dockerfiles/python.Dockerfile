# sandq Python sandbox image (without the agent; scripts/images.sh adds it on top).
#
# `make images` builds this FROM sandq/base:<hash>, a Debian bookworm minbase rootfs made with
# debootstrap, because no registry is needed that way. With a registry it builds unchanged:
#   docker build -f langs/dockerfiles/python.Dockerfile langs/dockerfiles
# Any change to this file changes the image hash and so rebuilds the image.
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
        python3-plotly \
        python3-scipy \
        python3-seaborn \
        python3-sklearn; \
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
# MPLCONFIGDIR points into /tmp (a tmpfs at run time) and sandq_mplseed, loaded by a .pth file
# at every Python start, copies the baked cache there when that dir does not exist yet (one
# stat otherwise).
RUN set -eux; \
    chown 1000:1000 /etc/sandq/mpl; \
    setpriv --reuid 1000 --regid 1000 --clear-groups env MPLCONFIGDIR=/etc/sandq/mpl \
        python3 -c 'import matplotlib.pyplot, numpy, pandas, scipy, seaborn, sklearn, plotly'; \
    chown -R 0:0 /etc/sandq/mpl; \
    chmod -R a+rX,go-w /etc/sandq/mpl; \
    ls /etc/sandq/mpl/fontlist-*.json; \
    site=/usr/lib/python3/dist-packages; \
    printf '%s\n' \
        '"""sandq: copy the matplotlib cache baked into /etc/sandq/mpl to $MPLCONFIGDIR (see the Dockerfile)."""' \
        'import os' \
        '' \
        '' \
        'def _seed(src="/etc/sandq/mpl"):' \
        '    dst = os.environ.get("MPLCONFIGDIR")' \
        '    if not dst or os.path.isdir(dst) or not os.path.isdir(src):' \
        '        return' \
        '    try:' \
        '        os.makedirs(dst, mode=0o700, exist_ok=True)' \
        '        for name in os.listdir(src):' \
        '            tmp = os.path.join(dst, ".%s.%d" % (name, os.getpid()))' \
        '            with open(os.path.join(src, name), "rb") as f, open(tmp, "wb") as g:' \
        '                g.write(f.read())' \
        '            os.replace(tmp, os.path.join(dst, name))' \
        '    except OSError:' \
        '        pass' \
        '' \
        '' \
        '_seed()' \
        > "$site/sandq_mplseed.py"; \
    echo 'import sandq_mplseed' > "$site/sandq-mplseed.pth"; \
    python3 -m py_compile "$site/sandq_mplseed.py"; \
    test -z "$(setpriv --reuid 1000 --regid 1000 --clear-groups env MPLCONFIGDIR=/tmp/sandq-check \
        python3 -c 'import matplotlib.pyplot' 2>&1)"; \
    test -f /tmp/sandq-check/fontlist-*.json; \
    rm -rf /tmp/sandq-check

WORKDIR /work
