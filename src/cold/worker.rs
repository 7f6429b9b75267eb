//! The shim's own thread: created with every signal blocked, it sleeps in poll() on a pipe and
//! runs three jobs: a dump when woken (by the dump signal's handler, which only writes one byte:
//! async-signal-safe) and every `MALLOCSHIM_DUMP_INTERVAL_S`; a trim every
//! `MALLOCSHIM_TRIM_INTERVAL_MS` (`trim::periodic`); a memlog line every
//! `MALLOCSHIM_MEMLOG_INTERVAL_MS`; a memory-history row every `MALLOCSHIM_HISTORY_MS`
//! (`history`) and a held-bytes checkpoint every twelfth of its span for a span after someone
//! asked (`held_history`); the
//! ceiling and pressure checks (`trim::watch`) every `trim::WATCH_MS` when
//! `MALLOCSHIM_TRIM_ABOVE_RSS` or `MALLOCSHIM_TRIM_ON_PRESSURE` is set; the Prometheus textfile every `MALLOCSHIM_PROM_INTERVAL_S` (`textfile`); each second, until fd 2
//! is seen reopened onto another file, the check that writes the start-up lines again there
//! (`diag::replay_if_stderr_moved`); the control channel (`ctl`: its listener, opened at the thread's
//! start and again when the pipe brings an `a`, is polled beside the pipe). A burst of wake-ups while
//! a dump runs is drained into one more dump, at most one per `MALLOCSHIM_DUMP_MIN_INTERVAL_MS`
//! (`dumpbound`; a request inside the interval is written at its end). Its allocations bypass
//! recording (its guard is always set).
//! The thread starts when the program creates its first thread (the shim interposes
//! `pthread_create`), never in a single-threaded process: a second thread would make glibc's
//! fork take every arena lock, and a fork from a signal handler that interrupted malloc would
//! then deadlock. Until then a dump request waits in `dump`'s mailbox and is written by the
//! requesting thread at its next sampled allocator call (or at exit); trims and memlog lines
//! start with the worker. The worker registers its pipe with `dump::set_waker`, so `dump` never
//! calls back into this module.
//! Fork: a child is a new program. Its handler (async-signal-safe) closes the inherited pipe and
//! memlog (a signal to the child must not dump the parent), resets the dump flag and numbering,
//! and starts no thread: the child's worker starts as a new program's does, when the child
//! creates its first thread, and until then its dump requests go through `dump`'s mailbox. (The
//! child used to start its worker in the handler: a `clone` and the start-up handshake in every
//! child before it could exec or exit, which made fork+wait several times slower and livelocked
//! a program forking from a 300 µs SIGALRM handler: the interrupted fork, restarted, never
//! finished within the timer's period.) The worker holds no lock across fork and its handler is
//! a child handler only (the backend's prepare handlers are `atfork`'s).
//! Start-up handshake: `spawn` waits (at most `READY_WAIT_NS`) until the new worker has made its
//! first allocator calls, so that the backend's per-thread set-up for it (jemalloc's tsd, thread
//! cache and arena choice, which may create an arena) happens while the program that created
//! it still has memory. Without the wait the program's thread could exhaust an address-space
//! limit first, and jemalloc 5.3 dereferences NULL when a new thread's arena cannot be created
//! (`arena_choose_impl` after `arena_choose_hard` fails): a crash the program did not cause. The
//! worker is a plain POSIX thread, not a `std::thread` (whose start takes the loader's lock, held
//! by a program creating its first thread from a library constructor), and the wait is bounded
//! all the same.
//! Long because: the thread's start, its own stack, its fork handler and its one loop share its statics (pipe, started, ready); its duties live in their own modules, and the interposed `pthread_create` in `thread_start`.

use crate::hot::tls::{self, Reentry};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};

#[link_section = ".data.mallocshim_fork"]
static WAKE_RD: AtomicI32 = AtomicI32::new(-1);
#[link_section = ".data.mallocshim_fork"]
static WAKE_WR: AtomicI32 = AtomicI32::new(-1);
#[link_section = ".data.mallocshim_fork"]
static STARTED: AtomicBool = AtomicBool::new(false);
static ATFORK: AtomicBool = AtomicBool::new(false);
/// The pid of the process whose constructor armed the worker: a process with another pid is a
/// forked child (its memlog needs `%p` in the path, see `memlog`). Compared when the worker
/// starts, not flagged by the fork handler: a flag's page would be one more copy per child.
static LOADED_PID: AtomicI32 = AtomicI32::new(0);
/// Set by the worker once its first allocator calls are done (see the module doc).
static READY: AtomicBool = AtomicBool::new(false);
/// How long `spawn` waits for `READY`: far above a thread's start (tens of µs), short enough
/// to be harmless when the creator holds a lock the worker's start needs.
const READY_WAIT_NS: u64 = 100_000_000;
/// The program is creating a thread (`pthread_create`): start the worker first.
pub fn on_thread_create() {
    if STARTED.load(Relaxed) || !LOADED.load(Relaxed) || !wanted() || STARTED.swap(true, AcqRel) {
        return;
    }
    spawn();
}

/// Set once the library constructor has run (the configuration is read).
static LOADED: AtomicBool = AtomicBool::new(false);

/// True when the configuration gives the worker anything to do.
fn wanted() -> bool {
    let c = crate::hot::config::get();
    c.dump_signal != 0
        || c.dump_interval_s != 0
        || c.trim_interval_ms != 0
        || c.trim_above_rss != 0
        || c.trim_on_pressure != 0
        || c.history_ms != 0
        || !crate::hot::config::cstr_bytes(&c.memlog).is_empty()
        || crate::cold::textfile::active()
        || crate::base::diag::replay_pending()
        || crate::cold::record::configured()
}

/// From the library constructor, after initialisation: arms the worker, which starts with the
/// program's first thread.
pub fn start() {
    // SAFETY: getpid has no preconditions.
    LOADED_PID.store(unsafe { libc::getpid() }, Relaxed);
    LOADED.store(true, Release);
    if !ATFORK.swap(true, AcqRel) {
        // Registered after the backend's own handlers, so it runs after they have unlocked the
        // child's heap.
        crate::backend::atfork::register_child(after_fork_child);
    }
}

fn spawn() {
    let _g = Reentry::enter();
    crate::backend::active().prepare_for_worker();
    let threshold = crate::hot::config::current().glibc_trim_threshold;
    if threshold != 0 {
        // Again in a forked child's worker (mallopt's setting is inherited; harmless), said once.
        static SAID: AtomicBool = AtomicBool::new(false);
        if let Err(e) = crate::backend::active().set_trim_threshold(threshold) {
            if !SAID.swap(true, Relaxed) {
                crate::base::diag::warn!("MALLOCSHIM_GLIBC_TRIM_THRESHOLD={threshold}: {e}; ignored");
            }
        }
    }
    let mut fds = [0; 2];
    // SAFETY: a valid two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        crate::base::diag::warn!("cannot create the worker's pipe: no dumps on signal, no trims");
        return;
    }
    WAKE_RD.store(fds[0], Relaxed);
    WAKE_WR.store(fds[1], Relaxed);
    crate::cold::dump::set_waker(fds[1]);
    // SAFETY: getpid has no preconditions.
    crate::cold::memlog::open(unsafe { libc::getpid() } != LOADED_PID.load(Relaxed));
    // SAFETY: sigset operations on local, initialised sets; the old mask is restored below.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        READY.store(false, Relaxed);
        let r = create_detached();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        if r != 0 {
            crate::base::diag::warn!("cannot start the worker thread: no dumps on signal, no trims");
            return;
        }
    }
    wait_ready();
}

/// Stack of the worker thread (std's default for its threads).
const STACK_BYTES: usize = crate::base::region::WORKER_STACK_BYTES;
/// The worker's stack (its lowest usable byte; null until mapped): mapped once, never unmapped,
/// wipe-on-fork, so a fork copies none of it (a child has no worker; a child's own worker reuses
/// the range). glibc keeps the thread's descriptor and static TLS at its top, which nothing in a
/// child reads: glibc forgets a child's user-stack threads, and the backends' child handlers
/// drop the other threads' caches (jemalloc's `arena_postfork_child` empties the arena's list of
/// thread caches) without reading them.
static STACK: core::sync::atomic::AtomicPtr<c_void> =
    core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// The worker's own stack, mapped at its first start (null when mapping failed: glibc's then).
fn own_stack() -> *mut c_void {
    let p = STACK.load(Relaxed);
    if !p.is_null() {
        return p;
    }
    // In the shim's reservation, where the ring above it shares its wipe-on-fork mapping.
    let p = crate::base::region::worker_stack();
    if p.is_null() {
        return p;
    }
    STACK.store(p, Relaxed);
    p
}

/// Creates the worker as a detached POSIX thread named `mallocshim`; returns pthread_create's
/// error number (0 on success). Not `std::thread`: std's start-up registers a thread-local
/// destructor (`__cxa_thread_atexit_impl`, which takes the loader's lock) before the thread's
/// function runs, and the start-up handshake must not wait on a lock the creator may hold.
///
/// # Safety
/// Called with the signal mask the worker must inherit (every signal blocked).
unsafe fn create_detached() -> c_int {
    extern "C" fn start(_: *mut c_void) -> *mut c_void {
        // SAFETY: naming the calling thread (prctl for the thread itself: no file, no allocation).
        unsafe { libc::pthread_setname_np(libc::pthread_self(), c"mallocshim".as_ptr()) };
        run();
        core::ptr::null_mut()
    }
    // SAFETY: a local attribute object, initialised, used for one pthread_create, destroyed.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_attr_init(&mut attr) != 0 {
            return libc::EAGAIN;
        }
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        let stack = own_stack();
        if stack.is_null() || libc::pthread_attr_setstack(&mut attr, stack, STACK_BYTES) != 0 {
            libc::pthread_attr_setstacksize(&mut attr, STACK_BYTES);
        }
        let mut t: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut t, &attr, start, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        rc
    }
}

/// Gives the worker its own heap (`worker_heap`) when it runs on its own stack in the process
/// that loaded the shim; a forked child's worker uses the backend (the heap is the parent's).
fn adopt_heap() {
    let lo = STACK.load(Relaxed) as usize;
    // SAFETY: getpid has no preconditions.
    if lo != 0 && unsafe { libc::getpid() } == LOADED_PID.load(Relaxed) {
        crate::base::worker_heap::adopt(lo, STACK_BYTES);
    }
}

/// Waits, at most `READY_WAIT_NS`, for the new worker's `READY`.
fn wait_ready() {
    let deadline = crate::base::clock::mono_ns().saturating_add(READY_WAIT_NS);
    while !READY.load(Acquire) && crate::base::clock::mono_ns() < deadline {
        let ts = libc::timespec { tv_sec: 0, tv_nsec: 20_000 };
        // SAFETY: a valid timespec; an interrupted sleep just loops.
        unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
    }
}

/// Fork child handler: async-signal-safe (loads, stores, close). A child is a new program: it
/// closes the parent's pipe and memlog and starts no thread here; its worker starts, as a new
/// program's does, when it creates its first thread. Writes only what changes: each page it
/// writes costs the child a copy, and most children exec or exit at once.
#[link_section = ".text.mallocshim_fork"]
unsafe extern "C" fn after_fork_child() {
    // Two calls, not a loop over `[&WAKE_RD, &WAKE_WR]`: that array is a constant in .rodata,
    // one more page for every child to fault in.
    close_in_child(&WAKE_RD);
    close_in_child(&WAKE_WR);
    crate::cold::memlog::after_fork_child();
    crate::cold::history::after_fork_child();
    crate::cold::dump::after_fork_child();
    crate::cold::textfile::after_fork_child();
    crate::cold::ctl::after_fork_child();
    crate::cold::record::after_fork_child();
    crate::base::worker_heap::disown();
    if STARTED.load(Relaxed) {
        STARTED.store(false, Relaxed);
    }
    // A request the parent had not answered yet is the child's to answer too: through the
    // mailbox (the child's next recorded call, or its worker once it has one).
    crate::cold::dump::repost_pending();
}

#[inline(always)]
fn close_in_child(a: &AtomicI32) {
    if a.load(Relaxed) >= 0 {
        // The system call itself: libc's `close` is a page of libc's code the child would fault
        // in for this alone.
        crate::base::sys::close_raw(a.swap(-1, Relaxed));
    }
}

/// One periodic job: its period (0 = off) and next deadline, in ms of CLOCK_MONOTONIC.
struct Job {
    every: u64,
    next: u64,
}

impl Job {
    fn new(every: u64, now: u64) -> Job {
        Job { every, next: now + every }
    }

    /// True (and re-armed) when due.
    fn due(&mut self, now: u64) -> bool {
        if self.every == 0 || now < self.next {
            return false;
        }
        // Skip missed periods instead of running a backlog, staying on the grid; a late run
        // also skips a grid point less than half a period away (a run 19 ms late on a 20 ms
        // period would otherwise be followed 1 ms later by a line with the same figures).
        self.next += self.every * ((now - self.next) / self.every + 1);
        if self.next - now < self.every.div_ceil(2) {
            self.next += self.every;
        }
        true
    }

    fn wait(&self, now: u64) -> Option<u64> {
        (self.every != 0).then(|| self.next.saturating_sub(now))
    }
}

fn now_ms() -> u64 {
    crate::base::clock::mono_ms()
}

/// The periodic jobs, their periods from the table in effect (`config::current`, which the
/// control channel's `set` may change: [`Jobs::retune`]).
struct Jobs {
    dump: Job,
    trim: Job,
    memlog: Job,
    history: Job,
    /// Held-bytes checkpoints (`held_history`).
    held: Job,
    watch: Job,
    textfile: Job,
    /// The table the periods were taken from.
    from: *const crate::hot::config::Config,
}

impl Jobs {
    fn new(now: u64) -> Jobs {
        let cfg = crate::hot::config::current();
        let watching = cfg.trim_above_rss != 0 || cfg.trim_on_pressure != 0;
        let prom = crate::cold::textfile::active();
        Jobs {
            dump: Job::new(cfg.dump_interval_s.saturating_mul(1000), now),
            trim: Job::new(cfg.trim_interval_ms, now),
            memlog: Job::new(if crate::cold::memlog::active() { cfg.memlog_interval_ms } else { 0 }, now),
            history: Job::new(crate::cold::history::period_ms(), now),
            held: Job::new(crate::cold::held_history::period_ms(), now),
            watch: Job::new(if watching { crate::cold::trim::WATCH_MS } else { 0 }, now),
            textfile: Job::new(if prom { cfg.prom_interval_s.saturating_mul(1000) } else { 0 }, now),
            from: cfg,
        }
    }

    /// After a `set`: each job whose period changed restarts from now; a memlog or textfile
    /// just turned on writes at once.
    fn retune(&mut self, now: u64) {
        if core::ptr::eq(self.from, crate::hot::config::current()) {
            return;
        }
        let n = Jobs::new(now);
        let (memlog_on, prom_on) = (self.memlog.every == 0, self.textfile.every == 0);
        for (old, new) in [
            (&mut self.dump, n.dump),
            (&mut self.trim, n.trim),
            (&mut self.memlog, n.memlog),
            (&mut self.history, n.history),
            (&mut self.held, n.held),
            (&mut self.watch, n.watch),
            (&mut self.textfile, n.textfile),
        ] {
            if old.every != new.every {
                *old = new;
            }
        }
        self.from = n.from;
        if memlog_on && self.memlog.every != 0 {
            crate::cold::memlog::sample();
        }
        if prom_on && self.textfile.every != 0 {
            crate::cold::textfile::write();
        }
    }
}

// Long because: the worker's one loop — a poll(2) on the wake-up pipe and the control
// channel's listener with the nearest deadline, then each periodic duty in turn (dump, trim,
// ceiling, pressure, memlog, textfile); the deadlines are its locals, shared by the duties.
fn run() {
    // SAFETY: this thread's TLS: everything it allocates goes unrecorded.
    unsafe { (*tls::state()).guard = 1 };
    adopt_heap();
    // The backend's per-thread set-up for this thread, now (module doc: start-up handshake).
    if crate::backend::active().worker_meets_at_start() {
        // SAFETY: a malloc/free pair through the interposed entry points, under this thread's
        // guard (black_box: the compiler removes an unused malloc/free pair).
        unsafe { libc::free(core::hint::black_box(libc::malloc(64))) };
    }
    READY.store(true, Release);
    // From now on this thread drains the trace's rings, not a thread whose ring filled.
    crate::hot::tracebuf::set_inline_drain(None);
    let mut jobs = Jobs::new(now_ms());
    let mut watch_state = crate::cold::trim::Watch::default();
    if jobs.memlog.every != 0 {
        crate::cold::memlog::sample();
    }
    let mut history_state = crate::cold::history::State::default();
    if jobs.history.every != 0 {
        crate::cold::history::sample(&mut history_state);
    }
    // A first checkpoint now: growth is then measured from the start until one span has passed.
    if jobs.held.every != 0 {
        crate::cold::held_history::take();
    }
    if jobs.textfile.every != 0 {
        crate::cold::textfile::write();
    }
    // Start-up lines written again once fd 2 is reopened elsewhere (a server's error log).
    let mut restderr = Job::new(if crate::base::diag::replay_pending() { 1000 } else { 0 }, now_ms());
    // The shim's thread never keeps a process alive once the program's threads have ended.
    let mut alone = Job::new(crate::cold::last_thread::CHECK_MS, now_ms());
    crate::base::diag::replay_if_stderr_moved();
    // Listening from the start: a client then needs no signal (which would interrupt the
    // program's blocking calls).
    let mut ctl = crate::cold::ctl::Channel::default();
    ctl.open();
    // A request made before this thread existed.
    let mut asked = crate::cold::dump::take_waiting();
    loop {
        let rd = WAKE_RD.load(Relaxed);
        if rd < 0 {
            ctl.close();
            return;
        }
        let now = now_ms();
        let j = &jobs;
        let timeout =
            [j.dump.wait(now), j.trim.wait(now), j.memlog.wait(now), j.history.wait(now), j.watch.wait(now)]
                .into_iter()
                .chain([j.held.wait(now), j.textfile.wait(now), restderr.wait(now), alone.wait(now)])
                .chain([
                    crate::cold::dump::deferred_wait(now),
                    crate::cold::record::wait_ms(),
                    asked.then_some(0),
                ])
                .flatten()
                .min()
                .map(|w| w.min(i32::MAX as u64) as i32)
                .unwrap_or(-1);
        let mut p = [
            libc::pollfd { fd: rd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: ctl.fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds (a negative fd is ignored by poll).
        let n = unsafe { libc::poll(p.as_mut_ptr(), 2, timeout) };
        if n > 0 && p[0].revents != 0 {
            let mut buf = [0u8; 256];
            // Drain every pending request: a burst is one dump (`dumpbound` rate-limits them);
            // `a` asks for the control channel instead (`boundary::signals`), `r` for a drain
            // of the trace rings only (`hot::tracebuf`: `record::tick` runs after every wake).
            loop {
                // SAFETY: reading into a local buffer from our non-blocking pipe.
                let r = unsafe { libc::read(rd, buf.as_mut_ptr().cast(), buf.len()) };
                if r <= 0 {
                    break;
                }
                for &b in &buf[..r as usize] {
                    match b {
                        b'a' => ctl.open(),
                        b'r' => {}
                        _ => asked = true,
                    }
                }
            }
        }
        if n > 0 && p[1].revents != 0 && ctl.fd() >= 0 {
            ctl.serve();
            jobs.retune(now_ms());
        }
        if alone.due(now_ms()) && crate::cold::last_thread::only_worker_left() {
            crate::cold::last_thread::exit_as_glibc_would();
        }
        // The trace's drain (every 10 ms while a window is open) first: its rings fill.
        crate::cold::record::tick();
        // Each job reads the clock itself: a trim can take tens of ms, and a job re-armed from a
        // stale time would run again at once.
        if jobs.trim.due(now_ms()) {
            let _ = crate::cold::trim::periodic();
        }
        let t = now_ms();
        if jobs.watch.due(t) {
            crate::cold::trim::watch(&mut watch_state, t);
        }
        if jobs.memlog.due(now_ms()) {
            crate::cold::memlog::sample();
        }
        if jobs.history.due(now_ms()) {
            crate::cold::history::sample(&mut history_state);
        }
        if jobs.held.due(now_ms()) && crate::cold::held_history::armed() {
            crate::cold::held_history::take();
        }
        if jobs.textfile.due(now_ms()) {
            crate::cold::textfile::write();
        }
        if restderr.due(now_ms()) {
            crate::base::diag::replay_if_stderr_moved();
            if !crate::base::diag::replay_pending() {
                restderr.every = 0;
            }
        }
        // A requested dump also stands for a periodic one due at the same time.
        let t = now_ms();
        let periodic = jobs.dump.due(t);
        if crate::cold::dump::requested_due(core::mem::take(&mut asked), t) {
            crate::cold::dump::write_requested(t);
        } else if periodic {
            let _ = crate::cold::dump::write_all();
        }
    }
}
