#!/usr/bin/env bash
# scripts/test.sh: the README's test command, and what .ci/run calls.
# Installs what the tests need (scripts/install-deps.sh: mariadb-server, sysbench,
# libtcmalloc-minimal4, libjemalloc2, gcc...), builds the release shim, then runs every test.
# Tests never skip: a missing tool fails them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
command -v cargo >/dev/null || { echo "test.sh: cargo is required (rustup)" >&2; exit 1; }
cargo build --release
cargo test --release --no-fail-fast "$@"
