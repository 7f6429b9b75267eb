#!/usr/bin/env bash
# scripts/test.sh: the README's test command, and what .ci/run calls.
# Installs what the tests need (scripts/install-deps.sh: mariadb-server, sysbench,
# libtcmalloc-minimal4, libjemalloc2, gcc...), checks the lints (rustfmt, clippy with warnings
# as errors, across the workspace), builds the release shim and the mallocshim command, then runs
# every test of every crate. Tests never skip: a missing tool fails them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
command -v cargo >/dev/null || { echo "test.sh: cargo is required (rustup)" >&2; exit 1; }
if command -v rustup >/dev/null; then
    rustup component add rustfmt clippy >/dev/null
fi
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo build --release --workspace
cargo test --release --workspace --no-fail-fast "$@"
