//! Stacks from the CFI: the callers of a sampled allocation unwound from each module's
//! `.eh_frame_hdr`/`.eh_frame` with framehop, so code built without frame pointers (most
//! distribution binaries, libstdc++'s `operator new`) keeps its callers. [`super::unwind`]
//! walks the shim's own frames by frame pointer and hands the first frame outside the shim
//! (its return address, stack pointer and %rbp) to [`walk`].
//!
//! Owns the published unwind state (a framehop unwinder over copies of the modules' unwind
//! sections, and the identity of each module it holds), the pool of unwind caches, and the
//! registration of a module. Must not: allocate, lock or call into the loader while unwinding;
//! read a module's mapped memory except while a live return address points into it.
//!
//! - Module lookup per frame is glibc's `_dl_find_object` (2.35+, lock-free, never takes the
//!   loader's lock; resolved with dlsym at initialisation — without it, frame pointers only).
//!   A frame whose module the state does not hold, or holds with another identity (start, end,
//!   load bias, `.eh_frame_hdr` address: a dlclose'd module replaced at the same place),
//!   registers that module at this sample (under the reentrancy guard: copies its two sections
//!   out of the mapping, which stays mapped while a return address on this thread's stack
//!   points into it) and unwinds again, at most [`PASSES`] times per sample. Copies are never
//!   read from the mapping afterwards, so a dlclose can never make the unwinder fault.
//! - Publication is read-copy-update: a registration builds a new state (framehop's unwinder is
//!   cheap to clone: shared module data) and swaps the pointer; the old state is freed when no
//!   reader is inside (a global reader count), else parked and freed by a later registration.
//!   One registration at a time (try-lock: a sampler that finds it busy falls back to frame
//!   pointers for that frame). What a registration allocates (the state, the section copies)
//!   and the cache pool come from the profiler's heap (`base::tables_heap`), never the backend. Readers never wait: safe from a signal handler's nested malloc,
//!   an exiting thread, and a forked child (the fork handler resets the counts).
//! - Unwinding takes one of [`BANKS`] banks of [`BANK`] framehop caches
//!   (`MustNotAllocateDuringUnwind`: the CFI evaluation stack is preallocated) by atomic swap;
//!   none free falls back to frame pointers. A frame's rule is kept in the bank's cache
//!   `(address / 509) % BANK` (framehop's cache holds 509 rules, direct-mapped by address
//!   modulo 509), so a bank is one direct-mapped rule cache of `BANK × 509` entries: mariadbd's
//!   sampled stacks overflowed a single cache (about one CFI evaluation, ~3,000+ instructions, per
//!   sample). Rules are keyed by the state's generation (framehop's), so a registration
//!   invalidates them all. In front of them, the bank's [`super::memo`] replays a frame whose
//!   effect it learnt from framehop under the same state (about a third of the instructions
//!   of a framehop call), and in front of the memo the bank's [`super::walks`] give a stack
//!   walked before at the same depth its frames back when the words that walk read are the
//!   same (one load and compare a word, no module lookup). A kept walk's first check interns
//!   its frames in [`super::stacks`] (one shard lock, bank held, never across an unwind) and
//!   remembers the id; later checks hand out the id and write no frames.
//! - Within one walk, a frame inside the module the previous frame was checked in needs no
//!   lookup: its return address is live on this stack, so that module stays mapped (and the
//!   same) for the whole walk. Nothing about modules is kept from one walk to the next.
//!   Every stack read is bounds-checked against this thread's stack ([`walk`]'s `lo..hi`).
//! - A walk ends where the stack pointer reaches `hi`: for a thread the shim started, the
//!   trampoline's frame that calls the start routine (`heapprof::thread_started`, passed down by
//!   [`super::unwind::capture`]): the trampoline, `start_thread` and `clone3` are not unwound.

use super::ehframe::{find, Key, FIND};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering::*};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind, Unwinder};

type Policy = MustNotAllocateDuringUnwind;
type Cache = CacheX86_64<Policy>;
/// One sampler's caches: framehop's, the memo of effects in front of them, and whole walks.
struct Bank {
    caches: [Cache; BANK],
    memo: Box<super::memo::Memo>,
    walks: Box<super::walks::Walks<{ super::unwind::MAX_FRAMES }>>,
}

/// Unwind passes per sample (each may register one module first).
const PASSES: usize = 4;
/// Banks of unwind caches shared by the sampling threads (one per concurrent sampler).
const BANKS: usize = 2;
/// framehop caches per bank (each ~37 KiB by the types' sizes: 12 KiB of rules, the rest
/// gimli's preallocated CFI evaluation rows).
const BANK: usize = 8;
/// Rules one framehop 0.16 cache holds (its `CACHE_ENTRY_COUNT`, slot = address % 509).
const RULES_PER_CACHE: u64 = 509;
/// Most modules held (a dlopen loop at ever new addresses stops registering there).
const MAX_MODULES: usize = 1024;
/// Retired states waiting for their readers to leave.
const GRAVE: usize = 16;

struct State {
    unwinder: UnwinderX86_64<Vec<u8>, Policy>,
    /// Distinct for each published state (never 0): the memo's key.
    generation: u32,
    /// Sorted by start; one per module held by `unwinder`.
    known: Vec<Key>,
}

static STATE: AtomicPtr<State> = AtomicPtr::new(null_mut());
static READERS: AtomicUsize = AtomicUsize::new(0);
static WRITER: AtomicBool = AtomicBool::new(false);
static GRAVES: [AtomicPtr<State>; GRAVE] = [const { AtomicPtr::new(null_mut()) }; GRAVE];
static POOL: [AtomicPtr<Bank>; BANKS] = [const { AtomicPtr::new(null_mut()) }; BANKS];
static POOL_MADE: AtomicBool = AtomicBool::new(false);
/// The last state's generation.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// Initialisation (under the guard): finds `_dl_find_object`, unless
/// `MALLOCSHIM_PROF_UNWIND=fp` asks for frame pointers only.
pub fn init() {
    if crate::hot::config::get().prof_unwind_fp {
        return;
    }
    // SAFETY: dlsym with a NUL-terminated name; the result is only stored.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
    FIND.store(f as usize, Relaxed);
    crate::backend::atfork::register_child(after_fork_child);
}

#[link_section = ".text.mallocshim_fork"]
unsafe extern "C" fn after_fork_child() {
    // Only the forking thread survives: nobody else reads or registers.
    // Writes only what changes (each page written costs the child a copy).
    if READERS.load(SeqCst) != 0 {
        READERS.store(0, SeqCst);
    }
    if WRITER.load(SeqCst) {
        WRITER.store(false, SeqCst);
    }
    crate::base::tables_heap::after_fork_child();
}

/// Continues the stack of the frame returning to `ret` (stack pointer `sp` after the return,
/// `bp` its %rbp) into `out[n0..]`, reading the stack only in `lo..hi`; frames inside the shim
/// are left out. Returns the new count and, when a kept walk gave the whole stack (`n0` 0), its
/// id in `super::stacks` (then `out` holds no frames: the id stands for them); None when the CFI
/// is unavailable (no `_dl_find_object`, no free bank): the caller walks frame pointers.
pub fn walk(
    ret: usize,
    sp: usize,
    bp: usize,
    lo: usize,
    hi: usize,
    out: &mut [usize; super::unwind::MAX_FRAMES],
    n0: usize,
) -> Option<(usize, Option<u32>)> {
    if FIND.load(Relaxed) == 0 {
        return None;
    }
    if !POOL_MADE.load(Relaxed) {
        make_pool();
    }
    // The last address a read may start at, as an offset from `lo`: one compare per read.
    let Some(span) = hi.checked_sub(lo).and_then(|d| d.checked_sub(8)) else { return Some((n0, None)) };
    let mut read = |a: u64| -> Result<u64, ()> {
        if (a as usize).wrapping_sub(lo) > span {
            return Err(());
        }
        // SAFETY: a..a+8 lies within this thread's stack above its stack pointer (an address
        // the CFI computed from a garbage register may be unaligned: read as such).
        Ok(unsafe { (a as *const u64).read_unaligned() })
    };
    for pass in 0..PASSES {
        match one_pass((ret as u64, sp as u64, bp as u64), &mut read, hi, out, n0) {
            Pass::Done(n, id) => return Some((n, id)),
            Pass::NoCache => return None,
            Pass::Missing(k, mut n, pc, bp) => {
                if pass + 1 == PASSES || !register(k) {
                    // This frame by its return address, its callers by frame pointer.
                    if !super::unwind::in_shim(pc) {
                        out[n] = pc;
                        n += 1;
                    }
                    return Some((super::unwind::fp_walk(bp, lo, hi, out, n), None));
                }
            }
        }
    }
    None
}

enum Pass {
    /// The count reached, and the stack's id when a kept walk knows it.
    Done(usize, Option<u32>),
    NoCache,
    /// A module to register first; meanwhile the count reached, and the frame's return address
    /// and %rbp there.
    Missing(Key, usize, usize, usize),
}

fn one_pass<F: FnMut(u64) -> Result<u64, ()>>(
    first: (u64, u64, u64),
    read: &mut F,
    hi: usize,
    out: &mut [usize; super::unwind::MAX_FRAMES],
    n0: usize,
) -> Pass {
    let Some(bank) = take_bank() else { return Pass::NoCache };
    READERS.fetch_add(1, SeqCst);
    let st = STATE.load(SeqCst);
    // SAFETY: a published state is freed only once no reader is inside (module doc).
    let held = (!st.is_null()).then(|| unsafe { &*st });
    // SAFETY: the bank was taken from the pool by this thread alone.
    let bank = unsafe { &mut *bank };
    let kept = held.and_then(|s| bank.walks.check(first, hi as u64, s.generation, out, n0));
    let (mut r, slot) = match kept {
        Some((n, slot)) => (Pass::Done(n, None), Some(slot)),
        None => {
            let regs = UnwindRegsX86_64::new(first.0, first.1, first.2);
            walk_frames(regs, read, hi, out, n0, held, bank)
        }
    };
    if let (Pass::Done(n, id), Some(slot), 0) = (&mut r, slot, n0) {
        *id = bank.walks.stack(slot).or_else(|| {
            // First use of this kept walk: its stack's id, remembered for the next checks.
            let id = super::stacks::intern(&out[..*n])?;
            bank.walks.set_stack(slot, id);
            Some(id)
        });
    }
    READERS.fetch_sub(1, SeqCst);
    put_bank(bank);
    r
}

/// [`one_pass`]'s walk, frame by frame; kept in the bank's walks when a replay can repeat it
/// (its slot returned).
fn walk_frames<F: FnMut(u64) -> Result<u64, ()>>(
    mut regs: UnwindRegsX86_64,
    read: &mut F,
    hi: usize,
    out: &mut [usize; super::unwind::MAX_FRAMES],
    n0: usize,
    held: Option<&State>,
    bank: &mut Bank,
) -> (Pass, Option<usize>) {
    bank.walks.start(regs.ip(), regs.sp(), hi as u64);
    let mut n = n0;
    let mut pc = regs.ip();
    // The module the last lookup found (and `held` holds with the loader's identity), and
    // whether it is the shim's (the same for every frame in it: one test per module).
    let mut same = 0..0u64;
    let mut shim = false;
    let r = loop {
        if n >= out.len() || pc == 0 {
            break Pass::Done(n, None);
        }
        let look = pc - 1;
        if !same.contains(&look) {
            same = 0..0;
            if let Some(k) = find(look) {
                if !held.is_some_and(|s| holds(s, k)) {
                    break Pass::Missing(k, n, pc as usize, regs.bp() as usize);
                }
                same = k.start..k.end;
            }
            shim = super::unwind::in_shim(pc as usize);
        }
        if shim {
            bank.walks.spoil();
        } else {
            out[n] = pc as usize;
            n += 1;
        }
        let Some(s) = held else { break Pass::Done(n, None) };
        let Some(addr) = FrameAddress::from_return_address(pc) else { break Pass::Done(n, None) };
        let next = match super::memo::get(&bank.memo, look, s.generation) {
            Some(e) if e.replayable() => {
                bank.walks.frame(pc, e, regs.sp(), regs.bp());
                let next = e.unwind(&mut regs, read);
                bank.walks.unwound(next, read);
                next
            }
            known => {
                bank.walks.spoil();
                let cache = &mut bank.caches[(look / RULES_PER_CACHE % BANK as u64) as usize];
                let next = s.unwinder.unwind_frame(addr, &mut regs, cache, read).ok().flatten();
                if known.is_none() {
                    super::memo::learn(&mut bank.memo, &s.unwinder, cache, pc, s.generation);
                }
                next
            }
        };
        match next {
            // A frame at or above the top holds nothing the walk may read: the shim's
            // `pthread_create` trampoline, where a thread it started has its top.
            Some(next) if regs.sp() < hi as u64 => pc = next,
            _ => break Pass::Done(n, None),
        }
    };
    let slot = match (&r, held) {
        (Pass::Done(n, _), Some(s)) => bank.walks.keep(n - n0, s.generation),
        _ => None,
    };
    (r, slot)
}

/// True when the state holds the module `k` with the loader's identity.
fn holds(s: &State, k: Key) -> bool {
    s.known.binary_search_by_key(&k.start, |x| x.start).is_ok_and(|i| s.known[i] == k)
}

fn take_bank() -> Option<*mut Bank> {
    POOL.iter().map(|p| p.swap(null_mut(), Acquire)).find(|c| !c.is_null())
}

fn put_bank(c: *mut Bank) {
    for p in &POOL {
        if p.compare_exchange(null_mut(), c, Release, Relaxed).is_ok() {
            return;
        }
    }
    // SAFETY: a bank made by `Box::into_raw` in `make_pool`, owned by this thread now.
    drop(unsafe { Box::from_raw(c) });
}

/// Fills the cache pool, once (under the guard; the first sample's thread).
#[cold]
fn make_pool() {
    if WRITER.compare_exchange(false, true, Acquire, Relaxed).is_err() {
        return;
    }
    if !POOL_MADE.load(Relaxed) {
        let _g = crate::hot::tls::Reentry::enter();
        // Kept for the life of the process: from the profiler's heap, not the program's.
        let _t = crate::base::tables_heap::enter();
        for _ in 0..BANKS {
            let memo = super::memo::new_memo();
            put_bank(Box::into_raw(Box::new(Bank {
                caches: core::array::from_fn(|_| Cache::new_in()),
                memo,
                walks: super::walks::new_walks(),
            })));
        }
        POOL_MADE.store(true, Release);
    }
    WRITER.store(false, Release);
}

/// Registers the module `k` (under the guard): copies its unwind sections, publishes a new
/// state. False when another registration runs or the module cannot be read.
fn register(k: Key) -> bool {
    if WRITER.compare_exchange(false, true, Acquire, Relaxed).is_err() {
        return false;
    }
    let _g = crate::hot::tls::Reentry::enter();
    // The new state, the section copies and the states retired: the profiler's heap.
    let _t = crate::base::tables_heap::enter();
    let old = STATE.load(SeqCst);
    // SAFETY: only the writer (this thread) replaces or frees the state.
    let old_ref = (!old.is_null()).then(|| unsafe { &*old });
    let ok = match build(k, old_ref) {
        Some(new) => {
            let prev = STATE.swap(Box::into_raw(Box::new(new)), SeqCst);
            retire(prev);
            true
        }
        None => false,
    };
    WRITER.store(false, Release);
    ok
}

fn build(k: Key, old: Option<&State>) -> Option<State> {
    let len = old.map_or(0, |s| s.known.len());
    if len >= MAX_MODULES {
        return None;
    }
    let mut unwinder = old.map_or_else(UnwinderX86_64::new, |s| s.unwinder.clone());
    let mut known: Vec<Key> = Vec::new();
    known.try_reserve_exact(len + 1).ok()?;
    for x in old.map_or(&[][..], |s| &s.known[..]) {
        if x.start < k.end && k.start < x.end {
            unwinder.remove_module(x.start);
        } else {
            known.push(*x);
        }
    }
    let info = super::ehframe::sections(k.start, k.bias, k.hdr)?;
    unwinder.add_module(Module::new(String::new(), k.start..k.end, k.bias, info));
    let i = known.partition_point(|x| x.start < k.start);
    known.insert(i, k);
    // Wraps after 4 billion registrations (bounded by MAX_MODULES per state, but a dlopen
    // loop at one address may replace forever): skips 0, the memo's empty key.
    let generation = GENERATION.fetch_add(1, Relaxed).wrapping_add(1).max(1);
    Some(State { unwinder, generation, known })
}

/// Frees a replaced state once no reader is inside; parks it otherwise (leaked when the
/// graveyard is full: bounded, and only under a storm of registrations).
fn retire(prev: *mut State) {
    let quiet = READERS.load(SeqCst) == 0;
    let mut todo = [prev];
    if quiet {
        for g in &GRAVES {
            let p = g.swap(null_mut(), AcqRel);
            if !p.is_null() {
                // SAFETY: parked before the last swap; no reader is inside any state.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
    for p in todo.iter_mut().filter(|p| !p.is_null()) {
        if quiet {
            // SAFETY: unpublished, and no reader is inside.
            drop(unsafe { Box::from_raw(*p) });
        } else if let Some(g) = GRAVES.iter().find(|g| g.load(Relaxed).is_null()) {
            g.store(*p, Release);
        }
    }
}

pub(super) type Sections = ExplicitModuleSectionInfo<Vec<u8>>;
