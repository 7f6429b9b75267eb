# shellcheck shell=bash
# scripts/mariadb.sh: a sourceable bash library to run a throwaway MariaDB server (Debian's
# mariadb-server 10.11) under an arbitrary environment prefix (typically LD_PRELOAD of
# libmallocshim.so) and drive it with sysbench. It is the single place the MariaDB logic lives:
# scripts/main-job.sh, scripts/mariadb-check.sh and (through the latter) tests/mariadb.rs use it.
#
# Usage:
#   source scripts/mariadb.sh
#   mdb_create                                   # temp dir + datadir; installs the cleanup trap
#   mdb_clean_env base                           # base=(env -u LD_PRELOAD -u MALLOCSHIM_...)
#   mdb_start env LD_PRELOAD=/abs/libmallocshim.so MALLOCSHIM_BACKEND=jemalloc
#   mdb_sysbench_prepare                         # database sbtest, 4 tables x 10000 rows
#   mdb_sysbench_run oltp_read_only 8 4          # sets SB_QPS SB_TPS SB_ERRORS SB_P95 ...
#   mdb_stop; echo "mariadbd exit status $?"
#   mdb_crash_report "$MDB_ERRLOG" && echo crashed
#
# Call mdb_start / mdb_stop from the same shell (not inside $(...) or a pipeline): mdb_stop
# collects mariadbd's exit status with `wait`, which only works in the shell that started it.
# Functions return non-zero on failure (they never `exit`), after printing why on stderr.
#
# Tunables (environment, read by mdb_create):
#   MDB_BUFFER_POOL   innodb_buffer_pool_size            (default 256M)
#   MDB_SB_TABLES     sysbench --tables                  (default 4)
#   MDB_SB_ROWS       sysbench --table-size              (default 10000)
#   MDB_START_TIMEOUT seconds to wait for `ping`         (default 60)
#   MDB_STOP_TIMEOUT  seconds to wait for exit after shutdown (default 120)
#   MDB_KEEP=1        keep the temp directory at exit (it is printed)
#   MDB_TMPROOT       where the temp directory is created (default /tmp; keep it short: the
#                     unix socket path must stay under 108 bytes)

MDB_BUFFER_POOL=${MDB_BUFFER_POOL:-256M}
MDB_SB_TABLES=${MDB_SB_TABLES:-4}
MDB_SB_ROWS=${MDB_SB_ROWS:-10000}
MDB_START_TIMEOUT=${MDB_START_TIMEOUT:-60}
MDB_STOP_TIMEOUT=${MDB_STOP_TIMEOUT:-120}

MDB_DIR=           # the instance's temp directory
MDB_DATADIR=       # $MDB_DIR/data
MDB_SOCKET=        # $MDB_DIR/mysqld.sock
MDB_PORT=          # free loopback TCP port (bound on 127.0.0.1 only)
MDB_PIDFILE=       # $MDB_DIR/mysqld.pid
MDB_ERRLOG=        # error log of the current (or last) mariadbd run: $MDB_DIR/mariadbd.N.err
MDB_PID=           # pid of the running mariadbd (empty when none)
MDB_RUN=0          # how many times mdb_start was called on this instance
MDB_OPTS=()        # mariadbd options (without the per-run --log-error)
MDB_SB_PREPARED=0  # 1 once mdb_sysbench_prepare succeeded on this datadir

# mdb_log MSG...: prints a message on stderr, prefixed with the library's name.
mdb_log() {
    printf 'mariadb.sh: %s\n' "$*" >&2
}

# mdb_require_tools: fails (returns 1, naming what is missing) unless the MariaDB server and
# client programs and sysbench are installed. scripts/install-deps.sh installs them.
mdb_require_tools() {
    local t missing=()
    for t in mariadbd mariadb-install-db mariadb-admin mariadb sysbench; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    if ((${#missing[@]})); then
        mdb_log "missing programs: ${missing[*]} (run scripts/install-deps.sh)"
        return 1
    fi
}

# mdb_free_port: prints a TCP port on 127.0.0.1 that nothing listens on (random in 20000-59999).
mdb_free_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        # connecting fails when nobody listens; also check ss for sockets in other states
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            if ! command -v ss >/dev/null 2>&1 || ! ss -Htan "( sport = :$p )" 2>/dev/null | grep -q .; then
                echo "$p"
                return 0
            fi
        fi
    done
    mdb_log "no free loopback port found"
    return 1
}

# mdb_tail_log [FILE] [N]: prints the last N (default 40) lines of the error log on stderr.
mdb_tail_log() {
    local f=${1:-$MDB_ERRLOG} n=${2:-40}
    if [[ -n $f && -f $f ]]; then
        printf -- '----- last %s lines of %s -----\n' "$n" "$f" >&2
        tail -n "$n" "$f" >&2
        printf -- '----- end of %s -----\n' "$f" >&2
    else
        mdb_log "no error log to show (${f:-unset})"
    fi
}

# mdb_clean_env NAME: sets the array NAME to an `env` prefix that drops LD_PRELOAD and every
# MALLOCSHIM_* variable of the caller's environment, so that only what a configuration adds
# applies, e.g.  mdb_clean_env base; mdb_start "${base[@]}" LD_PRELOAD=/abs/libmallocshim.so
mdb_clean_env() {
    local -n mdb_clean_env_out=$1
    mdb_clean_env_out=(env -u LD_PRELOAD)
    local k
    while IFS='=' read -r k _; do
        [[ $k == MALLOCSHIM_* ]] && mdb_clean_env_out+=(-u "$k")
    done < <(env)
}

# mdb_create [DIR]: creates a throwaway instance: a fresh temp directory (or DIR, which must not
# exist yet) with a datadir made by `mariadb-install-db --no-defaults` (root with an empty
# password, "normal" authentication), and sets MDB_DIR, MDB_DATADIR, MDB_SOCKET, MDB_PORT,
# MDB_PIDFILE and MDB_OPTS. Installs the EXIT/INT/TERM trap that stops mariadbd and removes
# the directory (mdb_cleanup). Prints nothing on success; on failure shows the install log.
mdb_create() {
    mdb_require_tools || return 1
    if [[ -n $MDB_DIR ]]; then
        mdb_log "mdb_create: an instance already exists in $MDB_DIR (call mdb_cleanup first)"
        return 1
    fi
    if [[ -n ${1:-} ]]; then
        mkdir -p -- "$1" || return 1
        MDB_DIR=$(cd -- "$1" && pwd) || return 1
    else
        MDB_DIR=$(mktemp -d "${MDB_TMPROOT:-/tmp}/mallocshim-mdb.XXXXXX") || { mdb_log "mktemp failed"; return 1; }
    fi
    mdb_install_trap
    MDB_DATADIR=$MDB_DIR/data
    MDB_SOCKET=$MDB_DIR/mysqld.sock
    MDB_PIDFILE=$MDB_DIR/mysqld.pid
    MDB_RUN=0
    MDB_SB_PREPARED=0
    mkdir -p "$MDB_DIR/tmp" || return 1
    MDB_PORT=$(mdb_free_port) || return 1
    # --no-defaults must come first. Root only because CI runs as root (mariadbd refuses to
    # run as root without --user=root).
    MDB_OPTS=(
        --no-defaults
        --user=root
        --datadir="$MDB_DATADIR"
        --tmpdir="$MDB_DIR/tmp"
        --socket="$MDB_SOCKET"
        --port="$MDB_PORT"
        --bind-address=127.0.0.1
        --pid-file="$MDB_PIDFILE"
        --skip-name-resolve
        --innodb-buffer-pool-size="$MDB_BUFFER_POOL"
        --innodb-log-file-size=64M
        --innodb-flush-log-at-trx-commit=2
        --max-connections=200
    )
    local t0=$SECONDS
    if ! mariadb-install-db --no-defaults --auth-root-authentication-method=normal \
        --user=root --datadir="$MDB_DATADIR" --skip-test-db --skip-name-resolve \
        --innodb-log-file-size=64M >"$MDB_DIR/install-db.log" 2>&1; then
        mdb_log "mariadb-install-db failed"
        mdb_tail_log "$MDB_DIR/install-db.log" 60
        return 1
    fi
    mdb_log "instance in $MDB_DIR (port $MDB_PORT) installed in $((SECONDS - t0)) s"
}

# mdb_install_trap: makes the current shell run mdb_cleanup at EXIT, and on INT/TERM (then exit
# 130/143), so no mariadbd outlives the script. mdb_create calls it; it replaces earlier traps
# on those signals, so a caller with its own cleanup should call mdb_cleanup from it instead.
mdb_install_trap() {
    trap 'mdb_cleanup' EXIT
    trap 'mdb_cleanup; trap - EXIT; exit 130' INT
    trap 'mdb_cleanup; trap - EXIT; exit 143' TERM
}

# mdb_alive [PID]: true while the process (default: the running mariadbd) exists and is not a zombie.
mdb_alive() {
    local pid=${1:-$MDB_PID} st
    [[ -n $pid ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ $st != Z ]]
}

# mdb_admin ARGS...: runs mariadb-admin against the instance (as root, over its socket).
mdb_admin() {
    mariadb-admin --no-defaults --socket="$MDB_SOCKET" --user=root --connect-timeout=5 "$@"
}

# mdb_sql SQL: runs SQL with the mariadb client against the instance; prints the result (batch mode).
mdb_sql() {
    mariadb --no-defaults --socket="$MDB_SOCKET" --user=root --batch -e "$1"
}

# mdb_start [PREFIX...]: starts mariadbd in the background as `PREFIX... mariadbd <options>`,
# e.g. `mdb_start env LD_PRELOAD=/abs/libmallocshim.so MALLOCSHIM_BACKEND=jemalloc`. The prefix
# must exec mariadbd (env, nice, numactl, taskset...) so that its pid is mariadbd's. A new error
# log $MDB_DIR/mariadbd.N.err (MDB_ERRLOG) is used for each start; mariadbd's own stdout and
# stderr go there too, so whatever a preloaded library prints before mariadbd opens its log
# (and after) lands in it. Waits until `mariadb-admin ping` answers (MDB_START_TIMEOUT s); if it
# does not, or mariadbd dies, prints the error log tail, kills it and returns 1.
mdb_start() {
    if [[ -z $MDB_DIR ]]; then
        mdb_log "mdb_start: no instance (call mdb_create first)"
        return 1
    fi
    if mdb_alive; then
        mdb_log "mdb_start: mariadbd (pid $MDB_PID) is already running"
        return 1
    fi
    MDB_RUN=$((MDB_RUN + 1))
    MDB_ERRLOG=$MDB_DIR/mariadbd.$MDB_RUN.err
    : >"$MDB_ERRLOG"
    rm -f "$MDB_PIDFILE"
    printf '%q ' "$@" mariadbd "${MDB_OPTS[@]}" --log-error="$MDB_ERRLOG" >"$MDB_DIR/mariadbd.$MDB_RUN.cmd"
    "$@" mariadbd "${MDB_OPTS[@]}" --log-error="$MDB_ERRLOG" </dev/null >>"$MDB_ERRLOG" 2>&1 &
    MDB_PID=$!
    local deadline=$((SECONDS + MDB_START_TIMEOUT))
    while ! mdb_admin ping >/dev/null 2>&1; do
        if ! mdb_alive; then
            local rc=0
            wait "$MDB_PID" 2>/dev/null || rc=$?
            mdb_log "mariadbd (pid $MDB_PID, started as: $*) died during startup with status $rc"
            MDB_PID=
            mdb_tail_log
            return 1
        fi
        if ((SECONDS >= deadline)); then
            mdb_log "mariadbd (pid $MDB_PID) did not answer ping within $MDB_START_TIMEOUT s"
            mdb_tail_log
            mdb_kill
            return 1
        fi
        sleep 0.2
    done
    mdb_log "mariadbd pid $MDB_PID ready (run $MDB_RUN, log $MDB_ERRLOG)"
}

# mdb_stop: stops the running mariadbd cleanly with `mariadb-admin shutdown`, waits for the
# process to exit (MDB_STOP_TIMEOUT s, then SIGKILL) and returns mariadbd's own exit status
# (128+N when killed by signal N; 0 for a clean shutdown). Also sets MDB_EXIT to that status.
mdb_stop() {
    MDB_EXIT=
    if [[ -z $MDB_PID ]]; then
        mdb_log "mdb_stop: no mariadbd running"
        return 1
    fi
    if ! mdb_admin shutdown >"$MDB_DIR/shutdown.out" 2>&1; then
        mdb_log "mariadb-admin shutdown failed: $(cat "$MDB_DIR/shutdown.out")"
        # fall through: the process may have died already; wait reports how
    fi
    local deadline=$((SECONDS + MDB_STOP_TIMEOUT))
    while mdb_alive; do
        if ((SECONDS >= deadline)); then
            mdb_log "mariadbd (pid $MDB_PID) still running $MDB_STOP_TIMEOUT s after shutdown; killing it"
            mdb_tail_log
            kill -KILL "$MDB_PID" 2>/dev/null
            break
        fi
        sleep 0.1
    done
    local rc=0
    wait "$MDB_PID" 2>/dev/null || rc=$?
    MDB_PID=
    MDB_EXIT=$rc
    if ((rc != 0)); then
        mdb_log "mariadbd exited with status $rc"
        mdb_tail_log
    fi
    return "$rc"
}

# mdb_kill: forcefully ends the running mariadbd, if any (SIGTERM, then SIGKILL after 30 s).
# For cleanup paths only; use mdb_stop for a clean shutdown.
mdb_kill() {
    [[ -n $MDB_PID ]] || return 0
    if mdb_alive; then
        kill -TERM "$MDB_PID" 2>/dev/null
        local i
        for ((i = 0; i < 300; i++)); do
            mdb_alive || break
            sleep 0.1
        done
        mdb_alive && kill -KILL "$MDB_PID" 2>/dev/null
    fi
    wait "$MDB_PID" 2>/dev/null
    MDB_PID=
}

# mdb_cleanup: kills a mariadbd still running and removes the temp directory (unless MDB_KEEP=1,
# then prints where it is). Safe to call more than once.
mdb_cleanup() {
    mdb_kill
    if [[ -n $MDB_DIR && -d $MDB_DIR ]]; then
        if [[ ${MDB_KEEP:-0} == 1 ]]; then
            mdb_log "keeping $MDB_DIR"
        else
            rm -rf -- "$MDB_DIR"
        fi
    fi
    MDB_DIR=
}

# Patterns of a crash in mariadbd's error log: its own signal handler's report, InnoDB
# assertions, and the fatal messages of glibc malloc, jemalloc, tcmalloc and a Rust panic.
MDB_CRASH_RE='got signal [0-9]|got exception|Attempting backtrace|This could be because you hit a bug|Assertion .*failed|Assertion failure|InnoDB: Failing assertion|double free or corruption|free\(\): invalid|malloc\(\): |corrupted size vs|munmap_chunk\(\)|realloc\(\): invalid|malloc_consolidate\(\)|<jemalloc>:|Attempt to free invalid pointer|tcmalloc: large alloc.*failed|panicked at|Fatal glibc error|stack smashing detected|Segmentation fault'

# A line of the shim itself that reports a fatal problem (its option table and summary lines
# mention malloc and are otherwise ignored by the crash patterns).
MDB_SHIM_FATAL_RE='^mallocshim:.*(panicked|fatal|FATAL|abort(ing|ed))'

# mdb_crash_report [FILE]: prints the crash lines found in the error log (default MDB_ERRLOG) and
# returns 0 when there is a crash report, 1 when there is none.
mdb_crash_report() {
    local f=${1:-$MDB_ERRLOG} lines
    lines=$({
        grep -E -- "$MDB_CRASH_RE" "$f" | grep -v '^mallocshim:'
        grep -E -- "$MDB_SHIM_FATAL_RE" "$f"
    })
    [[ -n $lines ]] || return 1
    printf '%s\n' "$lines"
}

# mdb_error_lines [FILE]: prints the error log's "[ERROR]" lines (not all are crashes).
mdb_error_lines() {
    grep -F -- '[ERROR]' "${1:-$MDB_ERRLOG}"
}

# mdb_sysbench_common: prints the sysbench connection/dataset options, one per line.
mdb_sysbench_common() {
    printf '%s\n' --db-driver=mysql --mysql-socket="$MDB_SOCKET" --mysql-user=root \
        --mysql-password= --mysql-db=sbtest --tables="$MDB_SB_TABLES" --table-size="$MDB_SB_ROWS"
}

# mdb_sysbench_prepare: creates database sbtest and sysbench's dataset (MDB_SB_TABLES tables
# of MDB_SB_ROWS rows, the oltp_* layout) on the running instance; once per datadir.
mdb_sysbench_prepare() {
    local -a common
    mapfile -t common < <(mdb_sysbench_common)
    mdb_sql 'CREATE DATABASE IF NOT EXISTS sbtest' || { mdb_log "CREATE DATABASE sbtest failed"; return 1; }
    local t0=$SECONDS threads=$((MDB_SB_TABLES < 4 ? MDB_SB_TABLES : 4))
    if ! sysbench oltp_read_only "${common[@]}" --threads="$threads" prepare >"$MDB_DIR/sysbench-prepare.out" 2>&1; then
        mdb_log "sysbench prepare failed:"
        tail -n 30 "$MDB_DIR/sysbench-prepare.out" >&2
        return 1
    fi
    MDB_SB_PREPARED=1
    mdb_log "sysbench dataset ($MDB_SB_TABLES x $MDB_SB_ROWS rows) prepared in $((SECONDS - t0)) s"
}

# mdb_sysbench_parse FILE: parses sysbench 1.0's report in FILE and sets SB_QPS, SB_TPS,
# SB_ERRORS (ignored errors + FATAL lines + reconnects), SB_RECONNECTS and SB_P95 (ms). Missing
# figures become "n/a" (SB_ERRORS then counts at least 1). Prints nothing.
mdb_sysbench_parse() {
    local f=$1 ignored fatal
    SB_TPS=$(sed -nE 's/^ *transactions: *[0-9]+ +\( *([0-9.]+) per sec\.\).*/\1/p' "$f" | head -n1)
    SB_QPS=$(sed -nE 's/^ *queries: *[0-9]+ +\( *([0-9.]+) per sec\.\).*/\1/p' "$f" | head -n1)
    ignored=$(sed -nE 's/^ *ignored errors: *([0-9]+).*/\1/p' "$f" | head -n1)
    SB_RECONNECTS=$(sed -nE 's/^ *reconnects: *([0-9]+).*/\1/p' "$f" | head -n1)
    SB_P95=$(sed -nE 's/^ *95th percentile: *([0-9.]+).*/\1/p' "$f" | head -n1)
    fatal=$(grep -c 'FATAL' "$f")
    SB_TPS=${SB_TPS:-n/a} SB_QPS=${SB_QPS:-n/a} SB_P95=${SB_P95:-n/a}
    if [[ -z $ignored || -z $SB_RECONNECTS ]]; then
        SB_ERRORS=$((${ignored:-0} + ${SB_RECONNECTS:-0} + fatal))
        ((SB_ERRORS > 0)) || SB_ERRORS=1 # no report at all: count that as an error
        SB_RECONNECTS=${SB_RECONNECTS:-n/a}
    else
        SB_ERRORS=$((ignored + SB_RECONNECTS + fatal))
    fi
}

# mdb_sysbench_run WORKLOAD SECONDS THREADS [SYSBENCH-ARGS...]: runs a sysbench lua workload
# (oltp_read_only, oltp_point_select, a path to a .lua...) on the prepared dataset for SECONDS at
# THREADS threads, keeps the report in $MDB_DIR/sysbench-<N>.out (SB_OUT), parses it with
# mdb_sysbench_parse and sets SB_EXIT. Returns sysbench's exit status (errors can still be > 0
# with status 0: check SB_ERRORS).
mdb_sysbench_run() {
    local workload=$1 secs=$2 threads=$3
    shift 3 || { mdb_log "usage: mdb_sysbench_run WORKLOAD SECONDS THREADS [ARGS...]"; return 2; }
    local -a common
    mapfile -t common < <(mdb_sysbench_common)
    SB_OUT=$MDB_DIR/sysbench-$MDB_RUN-$(basename -- "$workload" .lua).out
    SB_EXIT=0
    sysbench "$workload" "${common[@]}" --threads="$threads" --time="$secs" --events=0 \
        --report-interval=0 --histogram=off --percentile=95 "$@" run >"$SB_OUT" 2>&1 || SB_EXIT=$?
    mdb_sysbench_parse "$SB_OUT"
    if ((SB_EXIT != 0)); then
        mdb_log "sysbench $workload exited with status $SB_EXIT:"
        tail -n 20 "$SB_OUT" >&2
    fi
    return "$SB_EXIT"
}

# mdb_shim_summary [FILE]: prints the last `mallocshim: summary ...` line of the error log
# (default MDB_ERRLOG); returns 1 when there is none.
mdb_shim_summary() {
    local line
    line=$(grep -E '^mallocshim: summary ' "${1:-$MDB_ERRLOG}" | tail -n 1)
    [[ -n $line ]] || return 1
    printf '%s\n' "$line"
}

# mdb_kv LINE KEY: prints the value of KEY=VALUE in a space-separated line (empty if absent).
mdb_kv() {
    local w
    for w in $1; do
        if [[ $w == "$2="* ]]; then
            printf '%s\n' "${w#*=}"
            return 0
        fi
    done
    return 1
}

# The count fields of the shim's summary line, in its order.
MDB_SHIM_COUNTS=(malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign
    valloc pvalloc malloc_usable_size free_sized free_aligned_sized)

# mdb_shim_total LINE: prints the sum of the call counts in a summary line (all MDB_SHIM_COUNTS).
mdb_shim_total() {
    local k v total=0
    for k in "${MDB_SHIM_COUNTS[@]}"; do
        v=$(mdb_kv "$1" "$k") || v=0
        [[ $v =~ ^[0-9]+$ ]] || v=0
        total=$((total + v))
    done
    echo "$total"
}
