#!/usr/bin/env bash
# The whole default test suite: what CI runs (.ci/run) and what README.md
# names. Installs what it needs on Debian, then: formatting, lints, every
# crate's tests (unit, property, crash, fuzz-corpus, I/O-count, FUSE
# integration), and the benchmarks' quick modes (cargo tests in bench/) so
# they cannot rot.
# Long soaks and full benchmarks are separate (see README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n=== %s\n' "$*"; }

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # postmark, fsmark and linux-source-6.1 are the benchmark's inputs: the
    # harness's quick run (below, in cargo test) must run every workload.
    pkgs=(fuse3 libfuse3-dev pkg-config gcc rsync git e2fsprogs btrfs-progs xfsprogs python3
        postmark fsmark linux-source-6.1)
    missing=()
    for p in "${pkgs[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        log "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    fi
fi

# The machine's rustup toolchain (Debian's rustc is too old).
if [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
cargo --version

log "cargo fmt --check"
cargo fmt --all --check

log "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

log "cargo test (profile ci: optimized, debug assertions on)"
cargo test --workspace --profile ci

if [ "$(id -u)" = 0 ] && [ -e /dev/fuse ]; then
    log "pjdfstest (Rust port) on a wodfs mount"
    cargo build --profile ci -p wodfs-cli
    bash conformance/run-pjdfstest.sh "$PWD/target/ci/wodfs"
else
    echo "skipping pjdfstest: it needs root and /dev/fuse"
fi

log "all tests passed"
