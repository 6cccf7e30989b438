# sandq rust sandbox image (without the agent; scripts/images.sh adds it on top).
# Same conventions as python.Dockerfile: built FROM sandq/base:<hash> by `make images`, Debian
# packages only, job uid 1000, read-only rootfs at run time (only /work and /tmp are writable).
#
# rustc-web from bookworm's updates (Rust 1.9x, kept current for the browsers' builds) rather
# than bookworm's rustc 1.63 (2022), too old for today's code. Jobs are built with rustc
# directly, no cargo.
#
# Crates, offline: rand 0.8, regex 1 and md5 0.7 (HumanEvalPack's Rust declarations use all
# three) from Debian's librust-*-dev source packages, compiled once here with cargo-web against
# Debian's crate directory (/usr/share/cargo/registry as the crates-io replacement, --offline).
# Their rlibs and those of their dependencies stay in /usr/lib/sandq/rust/deps, with stable
# names lib<crate>.rlib for the three, which the compile step passes to rustc with --extern
# (see langs.Lang): a job uses them with `use rand::Rng;` and pays nothing when it does not.
# A second set, in /usr/lib/sandq/rust/rand-0.7, has rand 0.7.3 (with regex 1.3 and md5 0.7) from
# bullseye's packages: rand's API before 0.8 (gen_range(low, high)), which HumanEvalPack's Rust
# tests use; a job picks it with the env SANDQ_RUST_RAND=0.7.
# cargo-web, the crate sources and the bullseye source entry are removed again.
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN set -eux; \
    apt-get update; \
    apt-get -y upgrade; \
    apt-get install -y --no-install-recommends rustc-web; \
    apt-get install -y --no-install-recommends cargo-web \
        'librust-rand+default-dev' 'librust-regex+default-dev' 'librust-md5+default-dev'; \
    d=$(mktemp -d); mkdir -p "$d/src" "$d/.cargo"; cd "$d"; \
    printf '%s\n' '[package]' 'name = "sandq-crates"' 'version = "0.0.0"' 'edition = "2021"' '' \
        '[dependencies]' 'rand = "0.8"' 'regex = "1"' 'md5 = "0.7"' >Cargo.toml; \
    printf '%s\n' '[source.crates-io]' 'replace-with = "debian"' '' '[source.debian]' \
        'directory = "/usr/share/cargo/registry"' >.cargo/config.toml; \
    printf '%s\n' 'use rand::Rng;' 'fn main() {' \
        '    let n: u8 = rand::thread_rng().gen_range(1..2);' \
        '    let re = regex::Regex::new("^a+$").unwrap();' \
        '    println!("{} {} {:x}", n, re.is_match("aa"), md5::compute(b"hello"));' '}' >src/main.rs; \
    CARGO_HOME="$d/home" cargo build --release --offline; \
    test "$(./target/release/sandq-crates)" = "1 true 5d41402abc4b2a76b9719d911017c592"; \
    mkdir -p /usr/lib/sandq/rust/deps; \
    cp target/release/deps/*.rlib /usr/lib/sandq/rust/deps/; \
    for c in rand regex md5; do \
        set -- /usr/lib/sandq/rust/deps/lib$c-*.rlib; test $# -eq 1; \
        ln -s "$(basename "$1")" "/usr/lib/sandq/rust/deps/lib$c.rlib"; \
    done; \
    cd /; rm -rf "$d"; \
    apt-get purge -y --auto-remove $(dpkg-query -W -f '${Package}\n' 'librust-*'); \
    echo 'deb http://deb.debian.org/debian bullseye main' >/etc/apt/sources.list.d/sandq-bullseye.list; \
    printf '%s\n' 'Package: *' 'Pin: release n=bullseye' 'Pin-Priority: 100' >/etc/apt/preferences.d/sandq-bullseye; \
    apt-get update; \
    apt-get install -y --no-install-recommends -t bullseye \
        'librust-rand+default-dev' 'librust-regex+default-dev' 'librust-md5+default-dev'; \
    test -d /usr/share/cargo/registry/rand-0.7.3; \
    d=$(mktemp -d); mkdir -p "$d/src" "$d/.cargo"; cd "$d"; \
    printf '%s\n' '[package]' 'name = "sandq-crates"' 'version = "0.0.0"' 'edition = "2021"' '' \
        '[dependencies]' 'rand = "0.7"' 'regex = "1"' 'md5 = "0.7"' >Cargo.toml; \
    printf '%s\n' '[source.crates-io]' 'replace-with = "debian"' '' '[source.debian]' \
        'directory = "/usr/share/cargo/registry"' >.cargo/config.toml; \
    printf '%s\n' 'use rand::Rng;' 'fn main() {' \
        '    let n: u8 = rand::thread_rng().gen_range(1, 2);' \
        '    let re = regex::Regex::new("^a+$").unwrap();' \
        '    println!("{} {} {:x}", n, re.is_match("aa"), md5::compute(b"hello"));' '}' >src/main.rs; \
    CARGO_HOME="$d/home" cargo build --release --offline; \
    test "$(./target/release/sandq-crates)" = "1 true 5d41402abc4b2a76b9719d911017c592"; \
    mkdir -p /usr/lib/sandq/rust/rand-0.7; \
    cp target/release/deps/*.rlib /usr/lib/sandq/rust/rand-0.7/; \
    for c in rand regex md5; do \
        set -- /usr/lib/sandq/rust/rand-0.7/lib$c-*.rlib; test $# -eq 1; \
        ln -s "$(basename "$1")" "/usr/lib/sandq/rust/rand-0.7/lib$c.rlib"; \
    done; \
    cd /; rm -rf "$d"; \
    apt-get purge -y --auto-remove cargo-web $(dpkg-query -W -f '${Package}\n' 'librust-*'); \
    rm /etc/apt/sources.list.d/sandq-bullseye.list /etc/apt/preferences.d/sandq-bullseye; \
    rustc --version; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/lib/dpkg/*-old; \
    find /var/log -type f -delete; \
    chmod -R a+rX,go-w /usr/lib/sandq; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin \
        --comment 'sandq job' sandbox; \
    mkdir -p /work /sandq

ENV LANG=C.UTF-8 \
    HOME=/tmp

WORKDIR /work
