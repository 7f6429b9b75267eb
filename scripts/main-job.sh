#!/usr/bin/env bash
# scripts/main-job.sh: the README's main job. Installs what is missing (scripts/install-deps.sh),
# builds the shim and the harness in release, and runs mallocshim-main-job
# (crates/mallocshim-mariadb/src/bin/mallocshim-main-job.rs): a throwaway mariadbd under the shim
# for each backend, sysbench oltp_read_only, a dump with kill -USR1 half-way, a clean shutdown;
# one screen of what it tells (per backend qps, errors, exit status, the RSS account and the
# memory verdict of `mallocshim diagnose`, then one recommendation line), the rest in
# target/main-job/details.txt and target/main-job/<backend>/. Exits non-zero when
# anything went wrong. Environment: MAIN_BACKENDS ("glibc jemalloc tcmalloc mimalloc"), MAIN_SECONDS (8),
# MAIN_THREADS (4), MAIN_OUT (target/main-job), MAIN_SKIP_BUILD=1 (use the existing build),
# MALLOCSHIM_ALLOW_NO_SUMMARY=1, MDB_KEEP=1 (keep the instance directory and its logs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if [[ ${MAIN_SKIP_BUILD:-0} != 1 ]]; then
    cargo build --release
    cargo build --release -p mallocshim-mariadb --bin mallocshim-main-job
    cargo build --release -p mallocshim-cli
fi
target=${CARGO_TARGET_DIR:-target}
exec "$target/release/mallocshim-main-job" --shim "$target/release/libmallocshim.so"
