//! What glibc's `malloc_trim(0)` can give back, estimated from `malloc_info(3)`'s XML (per arena:
//! the free chunks of each bin as count, total, smallest and largest size; the fast chunks; the
//! top chunk as `rest` minus the bins). `malloc_trim` (glibc 2.26+ `mtrim`) consolidates the fast
//! chunks, then `madvise(MADV_DONTNEED)`s the whole pages strictly inside each free chunk (past
//! the chunk's first 48 bytes, `sizeof(struct malloc_chunk)`), and gives back the main arena's
//! top chunk (`systrim`); it never touches another arena's top chunk (only `free` shrinks those,
//! above `M_TRIM_THRESHOLD`). Free bytes that share a page with a live block, or lie in a chunk
//! smaller than about two pages, stay resident whatever trims. Owns the parse and the
//! arithmetic (pure, unit-tested) and the one `malloc_info` call; must not run on the hot path
//! or in a signal handler (malloc_info takes every arena's lock and allocates for its stream):
//! worker, dump or control channel only, under the reentrancy guard.
//! The stream: one `fopencookie` stream with a static buffer, made by [`prepare`] on the thread
//! that starts the worker and kept for the life of the process, whose writes go to a buffer of
//! the reader's (on the worker: its own heap). So the worker's readings make no allocation in
//! glibc (an `open_memstream` allocates its FILE and buffer there, and the worker's first one
//! would give it an arena). A reading that finds the stream in use (a dump on another thread)
//! uses an `open_memstream` of its own.

use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering::*};

/// The estimate, in bytes, from one `malloc_info` reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimEstimate {
    /// Whole pages inside free chunks of the bins (expected count at the chunks' page
    /// alignment: `size - 48 - page` per chunk of at least that), plus the main arena's top
    /// chunk down to a page boundary, less 33 bytes (`systrim`): what `malloc_trim(0)` gives back if all of it is resident.
    pub releasable: u64,
    /// Free bytes the trim keeps: the parts of free chunks outside whole pages, the fast chunks,
    /// and the top chunks of the arenas other than the main one.
    pub kept: u64,
    /// Of `kept`, the other arenas' top chunks.
    pub arena_tops: u64,
    /// Arenas, the main one included (`<heap nr=...>` elements).
    pub arenas: u64,
    /// Free bytes in the arenas other than the main one: their bins (fast chunks included) and
    /// top chunks.
    pub other_free: u64,
}

/// `sizeof(struct malloc_chunk)` on 64-bit: mtrim's first candidate page starts past it.
const CHUNK_HDR: u64 = 48;

/// Expected whole pages (bytes) in one `<size>`/`<unsorted>` line of `count` chunks totalling
/// `total`, the smallest `from` and the largest `to`: exact in expectation when every chunk is
/// at least `page + 48`; otherwise at least the largest chunk's share.
fn whole_pages(from: u64, to: u64, total: u64, count: u64, page: u64) -> u64 {
    let min = page + CHUNK_HDR;
    if to <= min {
        0
    } else if from >= min {
        total.saturating_sub(count * min)
    } else {
        total.saturating_sub(count * min).max(to - min)
    }
}

/// The value of `key="N"` in one XML tag line.
fn attr(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!(" {key}=\""))? + key.len() + 3;
    let rest = &line[at..];
    rest[..rest.find('"')?].parse().ok()
}

/// Parses `malloc_info`'s XML (glibc 2.36 layout) into the estimate for pages of `page` bytes.
/// None when no `<heap>` is found. Heap 0 is the main arena.
pub fn estimate(xml: &str, page: u64) -> Option<TrimEstimate> {
    let mut e = TrimEstimate::default();
    let mut heap: Option<u64> = None;
    let (mut bins, mut whole, mut fast, mut rest) = (0u64, 0u64, 0u64, 0u64);
    let mut seen = false;
    for line in xml.lines().map(str::trim) {
        if line.starts_with("<heap ") {
            heap = attr(line, "nr");
            e.arenas += 1;
            (bins, whole, fast, rest) = (0, 0, 0, 0);
            seen = true;
        } else if heap.is_none() {
            continue;
        } else if line.starts_with("<size ") || line.starts_with("<unsorted ") {
            let f = |k| attr(line, k).unwrap_or(0);
            bins += f("total");
            whole += whole_pages(f("from"), f("to"), f("total"), f("count"), page);
        } else if line.starts_with("<total type=\"fast\"") {
            fast = attr(line, "size").unwrap_or(0);
        } else if line.starts_with("<total type=\"rest\"") {
            rest = attr(line, "size").unwrap_or(0);
        } else if line == "</heap>" {
            // `<size>` lines include the fast bins; `rest` is the top chunk plus the other bins.
            let top = rest.saturating_sub(bins.saturating_sub(fast));
            let (top_released, top_kept) = if heap == Some(0) {
                // systrim: ALIGN_DOWN(top - MINSIZE - 1, page), MINSIZE 32 on 64-bit.
                let r = top.saturating_sub(33) / page * page;
                (r, top - r)
            } else {
                (0, top)
            };
            e.releasable += whole + top_released;
            e.kept += bins.saturating_sub(whole) + top_kept;
            e.arena_tops += if heap == Some(0) { 0 } else { top };
            e.other_free += if heap == Some(0) { 0 } else { bins + top };
            heap = None;
        }
    }
    seen.then_some(e)
}

/// glibc's own `malloc_info` (found by dlsym in `glibc`, not the shim's export).
pub type MallocInfo = unsafe extern "C" fn(libc::c_int, *mut libc::FILE) -> libc::c_int;

/// Reads `malloc_info(0, ...)` through `info` (glibc's own, which the caller passes so this leaf
/// imports no backend) into memory and estimates from it; None when it is missing or fails.
pub fn read(page: u64, info: Option<MallocInfo>) -> Option<TrimEstimate> {
    let info = info?;
    let text = read_kept(info).or_else(|| read_memstream(info))?;
    core::str::from_utf8(&text).ok().and_then(|s| estimate(s, page))
}

/// glibc's `cookie_io_functions_t` (stdio.h), by value to `fopencookie`.
#[repr(C)]
struct CookieIo {
    read: *const c_void,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize>,
    seek: *const c_void,
    close: *const c_void,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

/// The kept stream (null until [`prepare`] made it, or when it could not).
static KEPT: AtomicPtr<libc::FILE> = AtomicPtr::new(core::ptr::null_mut());
/// Held by the one reading that uses [`KEPT`]; it guards [`SINK`] and [`BUF`] too.
static BUSY: AtomicBool = AtomicBool::new(false);
const BUF_BYTES: usize = 4096;

struct Shared<T>(core::cell::UnsafeCell<T>);
// SAFETY: reached only by the holder of `BUSY`.
unsafe impl<T> Sync for Shared<T> {}
/// The kept stream's buffer (stdio would otherwise allocate one at its first write).
static BUF: Shared<[u8; BUF_BYTES]> = Shared(core::cell::UnsafeCell::new([0; BUF_BYTES]));
/// Where the kept stream's writes go: the current reading's text.
static SINK: Shared<Option<Vec<u8>>> = Shared(core::cell::UnsafeCell::new(None));

/// The kept stream's write function: appends to [`SINK`]; -1 (a write error, so the reading
/// fails) when no memory is left for the text.
unsafe extern "C" fn sink_write(_: *mut c_void, buf: *const c_char, n: usize) -> isize {
    // SAFETY: stdio calls this inside `read_kept`, whose caller holds `BUSY`; `buf` holds `n` bytes.
    unsafe {
        let Some(v) = (*SINK.0.get()).as_mut() else { return -1 };
        if v.try_reserve(n).is_err() {
            return -1;
        }
        v.extend_from_slice(core::slice::from_raw_parts(buf.cast::<u8>(), n));
    }
    n as isize
}

/// Makes the kept stream (once). From the thread that starts the worker, under the reentrancy
/// guard: glibc allocates the FILE on that thread's arena. Idempotent; on failure readings use
/// `open_memstream`.
pub fn prepare() {
    if !KEPT.load(Acquire).is_null() || BUSY.swap(true, Acquire) {
        return;
    }
    let io = CookieIo {
        read: core::ptr::null(),
        write: Some(sink_write),
        seek: core::ptr::null(),
        close: core::ptr::null(),
    };
    // SAFETY: a write-only cookie stream with a valid function table; its buffer is static and
    // used only by the holder of `BUSY` (as we are now).
    unsafe {
        let fp = fopencookie(core::ptr::null_mut(), c"w".as_ptr(), io);
        if !fp.is_null() {
            if libc::setvbuf(fp, BUF.0.get().cast(), libc::_IOFBF, BUF_BYTES) == 0 {
                KEPT.store(fp, Release);
            } else {
                libc::fclose(fp);
            }
        }
    }
    BUSY.store(false, Release);
}

/// `malloc_info`'s text through the kept stream; None when there is none or it is in use.
fn read_kept(info: MallocInfo) -> Option<Vec<u8>> {
    let fp = KEPT.load(Acquire);
    if fp.is_null() || BUSY.swap(true, Acquire) {
        return None;
    }
    // SAFETY: we hold `BUSY`: `SINK` and the stream are ours until it is released.
    let out = unsafe {
        *SINK.0.get() = Some(Vec::with_capacity(16 << 10));
        let ok = info(0, fp) == 0 && libc::fflush(fp) == 0;
        let text = (*SINK.0.get()).take();
        libc::clearerr(fp);
        if ok {
            text
        } else {
            None
        }
    };
    BUSY.store(false, Release);
    out
}

/// `malloc_info`'s text through an `open_memstream` of its own.
fn read_memstream(info: MallocInfo) -> Option<Vec<u8>> {
    let mut buf: *mut libc::c_char = core::ptr::null_mut();
    let mut len: libc::size_t = 0;
    // SAFETY: open_memstream writes the buffer's pointer and length through valid pointers.
    let fp = unsafe { libc::open_memstream(&mut buf, &mut len) };
    if fp.is_null() {
        return None;
    }
    // SAFETY: `fp` is an open stream; glibc's malloc_info (dlsym'd for this exact signature)
    // writes to it and fclose flushes it into `buf`.
    let ok = unsafe { info(0, fp) } == 0;
    // SAFETY: as above; after fclose `buf`/`len` hold the text (NUL-terminated).
    let closed = unsafe { libc::fclose(fp) } == 0;
    if buf.is_null() {
        return None;
    }
    // SAFETY: `buf` holds `len` bytes written by the stream.
    let text = (ok && closed).then(|| unsafe { core::slice::from_raw_parts(buf as *const u8, len) }.to_vec());
    // SAFETY: the stream's buffer was allocated by malloc and is ours to free.
    unsafe { libc::free(buf.cast()) };
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 4096;

    #[test]
    fn main_top_released_other_tops_kept() {
        let xml = "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n<size from=\"33\" to=\"48\" total=\"96\" count=\"2\"/>\n\
<size from=\"20480\" to=\"20480\" total=\"40960\" count=\"2\"/>\n<unsorted from=\"1000\" to=\"9000\" total=\"10000\" count=\"2\"/>\n\
</sizes>\n<total type=\"fast\" count=\"2\" size=\"96\"/>\n<total type=\"rest\" count=\"5\" size=\"60960\"/>\n</heap>\n\
<heap nr=\"1\">\n<sizes>\n</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n<total type=\"rest\" count=\"1\" size=\"100000\"/>\n</heap>\n</malloc>\n";
        let e = estimate(xml, P).unwrap();
        // bins: 40960 - 2*4144 = 32672; unsorted mixed: max(10000-8288, 9000-4144) = 4856;
        // main top: 60960 - 50960 = 10000 -> 8192 released.
        assert_eq!(e.releasable, 32672 + 4856 + 8192);
        assert_eq!(e.arena_tops, 100000);
        assert_eq!((e.arenas, e.other_free), (2, 100000), "two arenas; the other's free is its top");
        assert_eq!(e.kept, (96 + 40960 + 10000 - 32672 - 4856) + (10000 - 8192) + 100000);
    }

    #[test]
    fn no_heap_is_none() {
        assert_eq!(estimate("junk", P), None);
    }
}
