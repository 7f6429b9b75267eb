//! The allocation trace (`MALLOCSHIM_RECORD`, `mallocshim record`): every allocator call of
//! every thread in a window, typed and versioned, one schema for the writer (the shim's cold
//! path, `src/cold/record/`) and every reader (`mallocshim replay`, the tests). See
//! docs/trace-format.md for the byte layout.
//!
//! A file is 8 bytes of magic ([`MAGIC`]), the version as a little-endian u32 ([`VERSION`]),
//! then one zstd frame (content checksum on) holding the [`Header`], then records: events
//! ([`Event`], varints and deltas, about 4-7 bytes before compression), thread records (a
//! [`Thread`] before its first event), and last the [`Footer`]. The reader checks magic,
//! version, every length and value it decodes, the footer's event count and the frame's
//! checksum: a truncated or corrupt file gives one [`TraceError`], never a panic.
//!
//! Block ids are dense and never reused within a trace: the n-th successful allocation of the
//! window has id n (from 1); the writer checks it and the encoding leaves it out. A free or a
//! realloc of a block allocated before the window names a pre-window id ([`PRE_WINDOW`] | n,
//! dense from 1 in order of first use) and carries the block's usable size.
//! Owns nothing else; no global state, no I/O but through the `Read`/`Write` it is given.
//!
//! Long because: the trace format's types with their writer and reader, which must agree record by
//! record.

mod codec;
mod error;

use std::io::{Read, Write};

pub use codec::{MAX_NAME, MAX_STRING};
pub use error::TraceError;

/// First 8 bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"MSHTRACE";
/// The format version this crate writes and reads. A change a version-1 reader cannot read bumps it.
pub const VERSION: u32 = 1;
/// The flag of a pre-window block id (a block live when the window opened).
pub const PRE_WINDOW: u64 = 1 << 63;
/// Default zstd level of [`TraceWriter`] (measured: see docs/trace-format.md).
pub const DEFAULT_LEVEL: i32 = 1;

/// What the call was. The aligned family (posix_memalign, aligned_alloc, memalign, valloc,
/// pvalloc) is `Memalign` with its alignment; reallocarray is `Realloc`; free_sized and
/// free_aligned_sized are `Free`. Same order as the dump's ops (`classes::OP_NAMES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TraceOp {
    Malloc = 0,
    Calloc = 1,
    Realloc = 2,
    Free = 3,
    Memalign = 4,
}

impl TraceOp {
    pub const ALL: [TraceOp; 5] =
        [TraceOp::Malloc, TraceOp::Calloc, TraceOp::Realloc, TraceOp::Free, TraceOp::Memalign];

    /// The op of its number (the shim's `Op` order), None past the last.
    pub fn from_u8(v: u8) -> Option<TraceOp> {
        TraceOp::ALL.get(v as usize).copied()
    }

    /// Its name, as in the dump (`classes::OP_NAMES`).
    pub fn name(self) -> &'static str {
        crate::classes::OP_NAMES[self as usize]
    }

    /// Whether the call takes a block (free, realloc).
    pub fn takes_block(self) -> bool {
        matches!(self, TraceOp::Free | TraceOp::Realloc)
    }

    /// Whether the call returns a block (every op but free).
    pub fn allocates(self) -> bool {
        self != TraceOp::Free
    }
}

/// One call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// When, in ns since the window opened: an allocation's after the backend returned, a
    /// free's before it was called (so an address freed by one thread and reused by another
    /// orders free first). Non-decreasing along the file.
    pub t_ns: u64,
    /// Trace-local thread index, dense from 0 in order of first call (see [`Thread`]).
    pub thread: u32,
    pub op: TraceOp,
    /// Bytes requested (calloc: nmemb × size; realloc: the new size). A free: 0.
    pub size: u64,
    /// Alignment requested (Memalign; valloc and pvalloc: the page size); 0 for other ops.
    pub align: u32,
    /// The block returned: 0 when the call returned NULL (failed, or realloc to 0 bytes).
    pub id: u64,
    /// The block given (free, realloc): 0 for NULL; [`PRE_WINDOW`] set for a pre-window block.
    pub old_id: u64,
    /// The usable size of a pre-window block given (free, realloc), so that a replay gives
    /// back one of its pre-allocated blocks of that size class; 0 otherwise.
    pub old_size: u64,
}

/// A thread of the trace.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Thread {
    /// Its [`Event::thread`] index.
    pub index: u32,
    /// Kernel thread id (0 when unknown).
    pub tid: u32,
    /// `/proc/PID/task/TID/comm` when it was read ("" otherwise), at most [`MAX_NAME`] bytes.
    pub name: String,
}

/// Blocks of one size class live when the window opened (from the shim's counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClassLive {
    /// Size-class index as in [`crate::classes::class_of`].
    pub class: u8,
    pub count: u64,
    pub bytes: u64,
}

/// What the trace is of. Written first; fields may be appended in later versions of the same
/// [`VERSION`] (a reader skips what it does not know).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// The file's format version (set by the reader; the writer writes [`VERSION`]).
    pub version: u32,
    /// The recorded process.
    pub pid: u32,
    /// The backend that served it (`MALLOCSHIM_BACKEND` names).
    pub backend: String,
    /// When the window opened, ns since the epoch (CLOCK_REALTIME).
    pub start_unix_ns: u64,
    /// Unit of [`Event::t_ns`] in ns (always 1 in version 1).
    pub tick_ns: u32,
    /// Blocks live when the window opened, per size class, from the shim's per-class counts of
    /// allocations minus frees (empty when profiling was off: the shim kept no counts).
    pub preexisting: Vec<ClassLive>,
    /// The window's byte budget (`--max-bytes`), 0 = none.
    pub max_bytes: u64,
    /// The window's planned length in seconds, 0 = until exit or stop.
    pub seconds: u64,
    /// The shim's version.
    pub shim_version: String,
}

/// Why the window ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EndReason {
    /// Its planned seconds passed.
    Seconds = 0,
    /// The file reached its byte budget.
    MaxBytes = 1,
    /// The process exited.
    Exit = 2,
    /// The process forked (reserved: the parent's trace goes on, the child records nothing).
    Fork = 3,
    /// Stopped on request.
    Stopped = 4,
    /// The writer failed (disk full, ...): the trace ends at the last event written.
    Error = 5,
}

impl EndReason {
    pub fn from_u8(v: u8) -> Option<EndReason> {
        use EndReason::*;
        [Seconds, MaxBytes, Exit, Fork, Stopped, Error].get(v as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            EndReason::Seconds => "seconds",
            EndReason::MaxBytes => "max-bytes",
            EndReason::Exit => "exit",
            EndReason::Fork => "fork",
            EndReason::Stopped => "stopped",
            EndReason::Error => "error",
        }
    }
}

/// The end of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Footer {
    /// Events in the file (the reader checks it).
    pub events: u64,
    /// Calls made in the window but not in the file (a thread's buffer was full, or the call
    /// came after its thread's slot was released at exit).
    pub dropped: u64,
    /// Dropped calls per thread index, where known (threads with none left out).
    pub dropped_per_thread: Vec<(u32, u64)>,
    /// Calls whose order the drain could not restore: a call read after later ones were
    /// written (timed at the last event written; a free of a block already taken as freed is
    /// left out), and each block taken as freed because its address was allocated again and
    /// no free came within 250 ms of trace time (written then, on the thread served it again).
    pub reordered: u64,
    pub ended: EndReason,
    /// Length of the window, ns.
    pub window_ns: u64,
}

impl Default for Footer {
    fn default() -> Footer {
        Footer {
            events: 0,
            dropped: 0,
            dropped_per_thread: Vec::new(),
            reordered: 0,
            ended: EndReason::Stopped,
            window_ns: 0,
        }
    }
}

/// Writes a trace: [`TraceWriter::new`] with the header, [`TraceWriter::thread`] before a
/// thread's first event, [`TraceWriter::write`] per event in time order, [`TraceWriter::finish`].
pub struct TraceWriter<W: Write> {
    enc: zstd::stream::write::Encoder<'static, codec::Counting<W>>,
    st: codec::State,
    buf: Vec<u8>,
    events: u64,
    /// Encoded bytes given to zstd since the last flush (not yet surely on the writer).
    unflushed: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace on `w` at [`DEFAULT_LEVEL`].
    pub fn new(w: W, header: &Header) -> Result<TraceWriter<W>, TraceError> {
        TraceWriter::with_level(w, header, DEFAULT_LEVEL)
    }

    /// Starts a trace on `w` at zstd level `level`.
    pub fn with_level(w: W, header: &Header, level: i32) -> Result<TraceWriter<W>, TraceError> {
        let mut c = codec::Counting { w, n: 0 };
        c.write_all(&MAGIC)?;
        c.write_all(&VERSION.to_le_bytes())?;
        let mut enc = zstd::stream::write::Encoder::new(c, level)?;
        enc.include_checksum(true)?;
        let mut buf = Vec::with_capacity(1 << 16);
        codec::put_header(&mut buf, header);
        Ok(TraceWriter { enc, st: codec::State::default(), buf, events: 0, unflushed: 0 })
    }

    /// Declares a thread (before its first event).
    pub fn thread(&mut self, t: &Thread) -> Result<(), TraceError> {
        codec::put_thread(&mut self.buf, t);
        self.spill()
    }

    /// Appends one event. Rejects (`Invalid`) an event out of time order, an allocation whose
    /// id is not the next one, or a pre-window id out of sequence.
    pub fn write(&mut self, e: &Event) -> Result<(), TraceError> {
        self.st.put_event(&mut self.buf, e)?;
        self.events += 1;
        self.spill()
    }

    fn spill(&mut self) -> Result<(), TraceError> {
        if self.buf.len() >= 1 << 15 {
            self.enc.write_all(&self.buf)?;
            self.unflushed += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Compressed bytes on the writer so far (grows by zstd blocks; see [`TraceWriter::flush`]).
    pub fn bytes_written(&self) -> u64 {
        self.enc.get_ref().n
    }

    /// Compresses and writes everything given so far (ends a zstd block: a little larger
    /// file; a reader of a file cut after it reads every event up to here).
    pub fn flush(&mut self) -> Result<(), TraceError> {
        self.enc.write_all(&self.buf)?;
        self.buf.clear();
        self.enc.flush()?;
        self.unflushed = 0;
        Ok(())
    }

    /// An upper bound of the file's size if it were flushed now (zstd never expands data by
    /// more than its block headers): [`TraceWriter::bytes_written`] plus the encoded bytes not
    /// flushed yet plus 64. A hard size budget compares this, and flushes when it comes close.
    pub fn size_bound(&self) -> u64 {
        self.bytes_written() + self.unflushed + self.buf.len() as u64 + 64
    }

    /// Writes the footer (its `events` set to the count written) and ends the frame; returns
    /// the file's size in bytes and the writer.
    pub fn finish(mut self, footer: &Footer) -> Result<(u64, W), TraceError> {
        let mut f = footer.clone();
        f.events = self.events;
        codec::put_footer(&mut self.buf, &f);
        self.enc.write_all(&self.buf)?;
        let mut c = self.enc.finish()?;
        c.flush()?;
        Ok((c.n, c.w))
    }
}

/// Reads a trace: the header at [`TraceReader::new`], events by iteration (threads as they
/// come, in [`TraceReader::threads`]), then [`TraceReader::footer`]. After the first error the
/// iterator ends.
pub struct TraceReader<R: Read> {
    src: codec::Source<zstd::stream::read::Decoder<'static, std::io::BufReader<R>>>,
    header: Header,
    st: codec::State,
    threads: Vec<Thread>,
    footer: Option<Footer>,
    events: u64,
    done: bool,
}

impl<R: Read> TraceReader<R> {
    /// Opens a trace: checks magic and version, reads the header.
    pub fn new(mut r: R) -> Result<TraceReader<R>, TraceError> {
        let mut head = [0u8; 12];
        codec::read_exact(&mut r, &mut head)?;
        if head[..8] != MAGIC {
            return Err(TraceError::BadMagic);
        }
        let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if version != VERSION {
            return Err(TraceError::Version { found: version, expected: VERSION });
        }
        let dec = zstd::stream::read::Decoder::new(r)?;
        let mut src = codec::Source::new(dec);
        let mut header = codec::get_header(&mut src)?;
        header.version = version;
        Ok(TraceReader {
            src,
            header,
            st: codec::State::default(),
            threads: Vec::new(),
            footer: None,
            events: 0,
            done: false,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The threads declared so far (all of them once the iterator has ended), by index.
    pub fn threads(&self) -> &[Thread] {
        &self.threads
    }

    /// The footer, once the iterator has ended without error.
    pub fn footer(&self) -> Option<&Footer> {
        self.footer.as_ref()
    }

    /// Reads every event into a vector (the footer then in [`TraceReader::footer`]).
    pub fn read_all(&mut self) -> Result<Vec<Event>, TraceError> {
        self.by_ref().collect()
    }

    fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            match codec::get_record(&mut self.src, &mut self.st)? {
                codec::Record::Event(e) => {
                    if e.thread as usize >= self.threads.len() {
                        return Err(TraceError::Corrupt { what: "event of an undeclared thread" });
                    }
                    self.events += 1;
                    return Ok(Some(e));
                }
                codec::Record::Thread(t) => {
                    if t.index as usize != self.threads.len() {
                        return Err(TraceError::Corrupt { what: "thread index out of sequence" });
                    }
                    self.threads.push(t);
                }
                codec::Record::Footer(f) => {
                    if f.events != self.events {
                        return Err(TraceError::Corrupt { what: "footer's event count" });
                    }
                    // The frame must end here: reading on checks its checksum.
                    if !self.src.at_end()? {
                        return Err(TraceError::Corrupt { what: "data after the footer" });
                    }
                    self.footer = Some(f);
                    return Ok(None);
                }
            }
        }
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_event() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Reads a whole trace file: header, threads, events, footer.
pub fn read_file(path: &std::path::Path) -> Result<(Header, Vec<Thread>, Vec<Event>, Footer), TraceError> {
    let f = std::fs::File::open(path)?;
    let mut r = TraceReader::new(std::io::BufReader::new(f))?;
    let events = r.read_all()?;
    let footer = r.footer().cloned().ok_or(TraceError::Truncated)?;
    Ok((r.header().clone(), r.threads().to_vec(), events, footer))
}

#[cfg(test)]
mod tests;
