#!/usr/bin/env bash
# scripts/install-deps.sh: installs, on Debian 12 (apt), whatever is missing among the packages the
# tests, benches and the MariaDB job need. Idempotent: when everything is installed it only
# checks and prints one line; `apt-get update` runs once, and only when something is missing.
# The system MariaDB service is never left running: while installing, a temporary
# /usr/sbin/policy-rc.d forbids package scripts to start services (unless one already exists),
# and if mariadb-server was installed by this run and its service is up anyway, it is stopped.
# Exits non-zero with a message when something cannot be installed.
set -euo pipefail

PACKAGES=(mariadb-server mariadb-client mariadb-test perl sysbench libtcmalloc-minimal4 libjemalloc2 libmimalloc2.0 gcc g++ make gdb
    pkg-config python3 git procps fonts-dejavu-core valgrind golang-go
    dpkg-dev binutils prometheus prometheus-node-exporter heaptrack tmux util-linux)

say() { printf 'install-deps: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

installed() { # PKG: true when dpkg has it fully installed
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]
}

command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
    die "this script needs a Debian/Ubuntu system with apt-get and dpkg"

missing=()
for p in "${PACKAGES[@]}"; do
    installed "$p" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
    say "all present: ${PACKAGES[*]}"
else
    SUDO=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null 2>&1 || die "missing ${missing[*]}; run as root (or install sudo)"
        SUDO=(sudo)
    fi
    say "installing: ${missing[*]}"

    # Keep package scripts from starting services (the system mariadb in particular).
    POLICY=/usr/sbin/policy-rc.d
    made_policy=0
    if [[ ! -e $POLICY ]]; then
        printf '#!/bin/sh\n# temporary, from mallocshim scripts/install-deps.sh\nexit 101\n' |
            "${SUDO[@]}" tee "$POLICY" >/dev/null
        "${SUDO[@]}" chmod 755 "$POLICY"
        made_policy=1
    fi
    cleanup() {
        if ((made_policy)); then "${SUDO[@]}" rm -f "$POLICY"; fi
    }
    trap cleanup EXIT

    export DEBIAN_FRONTEND=noninteractive
    APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=600
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
    log=$(mktemp /tmp/install-deps.XXXXXX.log)
    if ! "${APT[@]}" update >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        die "apt-get update failed (full log: $log)"
    fi
    if ! "${APT[@]}" install --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "apt-get install ${missing[*]} failed (full log: $log)"
    fi

    # If the package started the system service despite policy-rc.d, stop it and leave it stopped.
    if [[ " ${missing[*]} " == *" mariadb-server "* ]]; then
        if [[ -s /run/mysqld/mysqld.pid ]] && kill -0 "$(cat /run/mysqld/mysqld.pid)" 2>/dev/null; then
            say "the mariadb-server package started the system service; stopping it"
            if command -v service >/dev/null 2>&1; then
                "${SUDO[@]}" service mariadb stop >>"$log" 2>&1 || true
            fi
            if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
                "${SUDO[@]}" systemctl stop mariadb >>"$log" 2>&1 || true
            fi
            if [[ -s /run/mysqld/mysqld.pid ]] && kill -0 "$(cat /run/mysqld/mysqld.pid)" 2>/dev/null; then
                die "could not stop the system mariadb service (pid $(cat /run/mysqld/mysqld.pid))"
            fi
        fi
    fi
    rm -f "$log"

    still=()
    for p in "${missing[@]}"; do installed "$p" || still+=("$p"); done
    ((${#still[@]} == 0)) || die "still not installed after apt-get: ${still[*]}"
    say "installed: ${missing[*]}"
fi

# Check the programs and libraries themselves, not only the package database.
for c in mariadbd mariadb-install-db mariadb-admin mariadb mysqld_safe sysbench gcc g++ make pkg-config python3 git pgrep; do
    command -v "$c" >/dev/null 2>&1 || die "program $c not found after installation (PATH=$PATH)"
done
# mariadb-test's mtr (scripts/mtr.sh, tests/mtr.rs)
[[ -f /usr/share/mysql/mysql-test/mariadb-test-run.pl ]] ||
    die "/usr/share/mysql/mysql-test/mariadb-test-run.pl (package mariadb-test) not found after installation"
for f in /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \
    /usr/lib/x86_64-linux-gnu/libmimalloc.so.2; do
    [[ $(dpkg --print-architecture) != amd64 || -e $f ]] || die "library $f not found after installation"
done
# heaptrack (benches/heap_profilers.rs starts its preload and interpreter itself)
for f in /usr/lib/heaptrack/libheaptrack_preload.so /usr/lib/heaptrack/libexec/heaptrack_interpret; do
    [[ -e $f ]] || die "$f (package heaptrack) not found after installation"
done
