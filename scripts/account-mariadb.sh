#!/usr/bin/env bash
# scripts/account-mariadb.sh BACKEND [SECONDS] [THREADS]: the RSS account and thread names of a
# real mariadbd, used by tests/account.rs. In a fresh throwaway instance (scripts/mariadb.sh) it
# starts mariadbd with LD_PRELOAD=<libmallocshim.so> MALLOCSHIM_BACKEND=BACKEND (dumps in JSON and
# text to the instance's dumps/ directory), prepares sysbench's dataset, runs oltp_read_only for
# SECONDS (default 5) at THREADS (default 4), sends `kill -USR1` and waits (up to 10 s) for the
# JSON dump, then shuts mariadbd down with mariadb-admin.
# stdout: `dump=PATH` (a copy outside the instance), `text=PATH`, `mariadbd_exit=N`, `ok=0|1`.
# The shim is $MALLOCSHIM_SO if set, else <repo>/target/release/libmallocshim.so. Serialised with
# the other MariaDB scripts by flock on ${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}.
set -uo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
root=$(cd -- "$here/.." && pwd)
backend=${1:-}
secs=${2:-5}
threads=${3:-4}
if [[ -z $backend || ! $secs =~ ^[0-9]+$ || ! $threads =~ ^[0-9]+$ ]]; then
    echo "usage: $0 glibc|jemalloc|tcmalloc [SECONDS] [THREADS]" >&2
    exit 2
fi
so=${MALLOCSHIM_SO:-$root/target/release/libmallocshim.so}
[[ -f $so ]] || { echo "account-mariadb: shim $so not found" >&2; exit 2; }
out=${ACCOUNT_OUT:-$(mktemp -d)}
mkdir -p "$out"

exec 9>"${MDB_LOCK:-/tmp/mallocshim-mariadb.lock}"
flock -w 900 9 || { echo "account-mariadb: could not take the lock" >&2; exit 2; }
# shellcheck source=scripts/mariadb.sh
source "$here/mariadb.sh"

mdb_create || exit 1
mdb_clean_env prefix
dumpdir=$MDB_DIR/dumps
mkdir -p "$dumpdir"
prefix+=(LD_PRELOAD="$so" MALLOCSHIM_BACKEND="$backend" MALLOCSHIM_DUMP_DIR="$dumpdir"
    MALLOCSHIM_DUMP_FORMATS=json,text)
mdb_start "${prefix[@]}" || { echo "ok=0"; exit 1; }
ok=1
if mdb_sysbench_prepare; then
    mdb_sysbench_run oltp_read_only "$secs" "$threads" || ok=0
else
    ok=0
fi
kill -USR1 "$MDB_PID"
f=
for _ in $(seq 1000); do
    f=$(find "$dumpdir" -name "mallocshim.$MDB_PID.*.text" | head -n 1)
    [[ -n $f ]] && break
    sleep 0.01
done
if [[ -n $f ]]; then
    cp "${f%.text}.json" "$out/$backend.json" && echo "dump=$out/$backend.json"
    cp "$f" "$out/$backend.text" && echo "text=$out/$backend.text"
else
    ok=0
fi
mdb_stop
echo "mariadbd_exit=$MDB_EXIT"
echo "ok=$ok"
