//! The trace's byte encoding inside the zstd frame: LEB128 varints, time and thread as deltas
//! from the previous event, block ids implied by their density. Bounded everywhere: every length
//! is checked against a cap before anything is allocated for it, every varint against 64 bits.

use super::{ClassLive, EndReason, Event, Footer, Header, Thread, TraceError, TraceOp, PRE_WINDOW};
use std::io::{Read, Write};

/// Longest string in a header (backend, version), bytes.
pub const MAX_STRING: usize = 256;
/// Longest thread name, bytes.
pub const MAX_NAME: usize = 64;
/// Longest header or footer body, bytes.
const MAX_BLOB: usize = 1 << 20;

const THREAD_CHANGED: u8 = 1 << 3;
const RESULT_NULL: u8 = 1 << 4;
const OLD_PRE: u8 = 1 << 5;
const OLD_NULL: u8 = 1 << 6;
const REC_THREAD: u8 = 0x81;
const REC_FOOTER: u8 = 0x82;

/// A writer that counts the bytes through it.
pub struct Counting<W> {
    pub w: W,
    pub n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let k = self.w.write(b)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

pub fn put_varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push(v as u8 | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

fn put_str(b: &mut Vec<u8>, s: &str, cap: usize) {
    let mut n = s.len().min(cap);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    put_varint(b, n as u64);
    b.extend_from_slice(&s.as_bytes()[..n]);
}

fn put_blob(b: &mut Vec<u8>, body: &[u8]) {
    put_varint(b, body.len() as u64);
    b.extend_from_slice(body);
}

pub fn put_header(b: &mut Vec<u8>, h: &Header) {
    let mut v = Vec::new();
    put_varint(&mut v, h.pid as u64);
    put_str(&mut v, &h.backend, MAX_STRING);
    put_varint(&mut v, h.start_unix_ns);
    put_varint(&mut v, h.tick_ns.max(1) as u64);
    put_varint(&mut v, h.preexisting.len() as u64);
    for c in &h.preexisting {
        v.push(c.class);
        put_varint(&mut v, c.count);
        put_varint(&mut v, c.bytes);
    }
    put_varint(&mut v, h.max_bytes);
    put_varint(&mut v, h.seconds);
    put_str(&mut v, &h.shim_version, MAX_STRING);
    put_blob(b, &v);
}

pub fn put_thread(b: &mut Vec<u8>, t: &Thread) {
    b.push(REC_THREAD);
    put_varint(b, t.index as u64);
    put_varint(b, t.tid as u64);
    put_str(b, &t.name, MAX_NAME);
}

pub fn put_footer(b: &mut Vec<u8>, f: &Footer) {
    b.push(REC_FOOTER);
    let mut v = Vec::new();
    put_varint(&mut v, f.events);
    put_varint(&mut v, f.dropped);
    put_varint(&mut v, f.dropped_per_thread.len() as u64);
    for (t, n) in &f.dropped_per_thread {
        put_varint(&mut v, *t as u64);
        put_varint(&mut v, *n);
    }
    put_varint(&mut v, f.reordered);
    v.push(f.ended as u8);
    put_varint(&mut v, f.window_ns);
    put_blob(b, &v);
}

/// The delta state shared by encoder and decoder.
#[derive(Default)]
pub struct State {
    last_t: u64,
    last_thread: u32,
    /// Ids assigned so far (the next allocation's id is this plus 1).
    ids: u64,
    /// Pre-window ids assigned so far.
    pre: u64,
}

impl State {
    pub fn put_event(&mut self, b: &mut Vec<u8>, e: &Event) -> Result<(), TraceError> {
        let invalid = |what| Err(TraceError::Invalid { what });
        if e.t_ns < self.last_t {
            return invalid("time goes backwards");
        }
        let mut tag = e.op as u8;
        if e.thread != self.last_thread {
            tag |= THREAD_CHANGED;
        }
        if e.op.allocates() {
            if e.id == 0 {
                tag |= RESULT_NULL;
            } else if e.id != self.ids + 1 {
                return invalid("allocation id is not the next id");
            }
        } else if e.id != 0 {
            return invalid("free with a result id");
        }
        let pre = e.old_id & PRE_WINDOW != 0;
        if e.op.takes_block() {
            if e.old_id == 0 {
                tag |= OLD_NULL;
            } else if pre {
                if e.old_id != PRE_WINDOW | (self.pre + 1) {
                    return invalid("pre-window id is not the next one");
                }
                tag |= OLD_PRE;
            } else if e.old_id > self.ids {
                return invalid("block id not allocated yet");
            }
        } else if e.old_id != 0 {
            return invalid("allocation with an old id");
        }
        b.push(tag);
        if tag & THREAD_CHANGED != 0 {
            put_varint(b, e.thread as u64);
        }
        put_varint(b, e.t_ns - self.last_t);
        if e.op.allocates() {
            put_varint(b, e.size);
        }
        if e.op == TraceOp::Memalign {
            put_varint(b, e.align as u64);
        }
        if e.op.takes_block() && e.old_id != 0 {
            if pre {
                put_varint(b, e.old_size);
                self.pre += 1;
            } else {
                put_varint(b, self.ids + 1 - e.old_id);
            }
        }
        if e.op.allocates() && e.id != 0 {
            self.ids += 1;
        }
        self.last_t = e.t_ns;
        self.last_thread = e.thread;
        Ok(())
    }
}

/// A byte source over the decompressed stream, mapping the decoder's errors to the trace's.
pub struct Source<R> {
    r: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
}

fn map_io(e: std::io::Error) -> TraceError {
    use std::io::ErrorKind::*;
    match e.kind() {
        UnexpectedEof => TraceError::Truncated,
        // zstd reports a bad frame, block or checksum as Other.
        Other | InvalidData | InvalidInput => TraceError::Corrupt { what: "compressed data" },
        _ => TraceError::Io(e),
    }
}

pub fn read_exact(r: &mut impl Read, b: &mut [u8]) -> Result<(), TraceError> {
    r.read_exact(b).map_err(map_io)
}

impl<R: Read> Source<R> {
    pub fn new(r: R) -> Source<R> {
        Source { r, buf: vec![0; 1 << 16].into_boxed_slice(), pos: 0, len: 0 }
    }

    /// Refills; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, TraceError> {
        if self.pos < self.len {
            return Ok(true);
        }
        loop {
            match self.r.read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.pos = 0;
                    self.len = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(map_io(e)),
            }
        }
    }

    /// True when the stream ends here (and its frame checked out).
    pub fn at_end(&mut self) -> Result<bool, TraceError> {
        Ok(!self.fill()?)
    }

    fn u8(&mut self) -> Result<u8, TraceError> {
        if !self.fill()? {
            return Err(TraceError::Truncated);
        }
        let v = self.buf[self.pos];
        self.pos += 1;
        Ok(v)
    }

    fn varint(&mut self) -> Result<u64, TraceError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let part = (b & 0x7f) as u64;
            if shift == 63 && part > 1 {
                return Err(TraceError::Corrupt { what: "varint over 64 bits" });
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(TraceError::Corrupt { what: "varint over 64 bits" })
    }

    fn bounded(&mut self, cap: u64, what: &'static str) -> Result<u64, TraceError> {
        let v = self.varint()?;
        if v > cap {
            return Err(TraceError::Corrupt { what });
        }
        Ok(v)
    }

    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, TraceError> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.u8()?);
        }
        Ok(v)
    }

    fn string(&mut self, cap: usize) -> Result<String, TraceError> {
        let n = self.bounded(cap as u64, "string too long")? as usize;
        String::from_utf8(self.bytes(n)?).map_err(|_| TraceError::Corrupt { what: "string not UTF-8" })
    }
}

/// A decoded record.
pub enum Record {
    Event(Event),
    Thread(Thread),
    Footer(Footer),
}

/// Reads a length-prefixed body into a source of its own.
fn blob<R: Read>(s: &mut Source<R>) -> Result<Source<std::io::Cursor<Vec<u8>>>, TraceError> {
    let n = s.bounded(MAX_BLOB as u64, "header or footer too long")? as usize;
    Ok(Source::new(std::io::Cursor::new(s.bytes(n)?)))
}

/// A field of a header or footer body: its end is corruption, not truncation (the body's
/// length was read).
fn field<T>(r: Result<T, TraceError>) -> Result<T, TraceError> {
    r.map_err(|e| match e {
        TraceError::Truncated => TraceError::Corrupt { what: "header or footer shorter than its fields" },
        e => e,
    })
}

fn u32_of(v: u64, what: &'static str) -> Result<u32, TraceError> {
    u32::try_from(v).map_err(|_| TraceError::Corrupt { what })
}

pub fn get_header<R: Read>(s: &mut Source<R>) -> Result<Header, TraceError> {
    let mut b = blob(s)?;
    let b = &mut b;
    let mut h = Header {
        pid: u32_of(field(b.varint())?, "pid")?,
        backend: field(b.string(MAX_STRING))?,
        start_unix_ns: field(b.varint())?,
        tick_ns: u32_of(field(b.varint())?, "tick")?,
        ..Header::default()
    };
    let n = field(b.bounded(crate::classes::CLASSES as u64, "too many size classes"))?;
    for _ in 0..n {
        let class = field(b.u8())?;
        if class as usize >= crate::classes::CLASSES {
            return Err(TraceError::Corrupt { what: "size class" });
        }
        h.preexisting.push(ClassLive { class, count: field(b.varint())?, bytes: field(b.varint())? });
    }
    h.max_bytes = field(b.varint())?;
    h.seconds = field(b.varint())?;
    h.shim_version = field(b.string(MAX_STRING))?;
    if h.tick_ns == 0 {
        return Err(TraceError::Corrupt { what: "tick" });
    }
    Ok(h)
}

fn get_footer<R: Read>(s: &mut Source<R>) -> Result<Footer, TraceError> {
    let mut b = blob(s)?;
    let b = &mut b;
    let events = field(b.varint())?;
    let dropped = field(b.varint())?;
    let n = field(b.bounded(1 << 16, "too many threads in the footer"))?;
    let mut dropped_per_thread = Vec::new();
    for _ in 0..n {
        dropped_per_thread.push((u32_of(field(b.varint())?, "thread index")?, field(b.varint())?));
    }
    let reordered = field(b.varint())?;
    let ended = EndReason::from_u8(field(b.u8())?).ok_or(TraceError::Corrupt { what: "end reason" })?;
    let window_ns = field(b.varint())?;
    Ok(Footer { events, dropped, dropped_per_thread, reordered, ended, window_ns })
}

pub fn get_record<R: Read>(s: &mut Source<R>, st: &mut State) -> Result<Record, TraceError> {
    let tag = s.u8()?;
    match tag {
        REC_THREAD => {
            let index = u32_of(s.varint()?, "thread index")?;
            let tid = u32_of(s.varint()?, "tid")?;
            let name = s.string(MAX_NAME)?;
            Ok(Record::Thread(Thread { index, tid, name }))
        }
        REC_FOOTER => Ok(Record::Footer(get_footer(s)?)),
        t if t & 0x80 != 0 => Err(TraceError::Corrupt { what: "record tag" }),
        t => get_event(s, st, t).map(Record::Event),
    }
}

fn get_event<R: Read>(s: &mut Source<R>, st: &mut State, tag: u8) -> Result<Event, TraceError> {
    let corrupt = |what| Err(TraceError::Corrupt { what });
    let Some(op) = TraceOp::from_u8(tag & 7) else {
        return corrupt("op");
    };
    if op == TraceOp::Free && tag & RESULT_NULL != 0 {
        return corrupt("free with a result flag");
    }
    if !op.takes_block() && tag & (OLD_PRE | OLD_NULL) != 0 {
        return corrupt("allocation with an old-block flag");
    }
    if tag & OLD_PRE != 0 && tag & OLD_NULL != 0 {
        return corrupt("old block both NULL and pre-window");
    }
    let thread =
        if tag & THREAD_CHANGED != 0 { u32_of(s.varint()?, "thread index")? } else { st.last_thread };
    let dt = s.varint()?;
    let t_ns = st.last_t.checked_add(dt).ok_or(TraceError::Corrupt { what: "time overflow" })?;
    let size = if op.allocates() { s.varint()? } else { 0 };
    let align = if op == TraceOp::Memalign { u32_of(s.varint()?, "alignment")? } else { 0 };
    let (mut old_id, mut old_size) = (0, 0);
    if op.takes_block() && tag & OLD_NULL == 0 {
        if tag & OLD_PRE != 0 {
            old_size = s.varint()?;
            st.pre += 1;
            old_id = PRE_WINDOW | st.pre;
        } else {
            let d = s.varint()?;
            if d == 0 || d > st.ids {
                return corrupt("block id");
            }
            old_id = st.ids + 1 - d;
        }
    }
    let mut id = 0;
    if op.allocates() && tag & RESULT_NULL == 0 {
        st.ids += 1;
        id = st.ids;
    }
    st.last_t = t_ns;
    st.last_thread = thread;
    Ok(Event { t_ns, thread, op, size, align, id, old_id, old_size })
}
