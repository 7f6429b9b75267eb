//! The engine's readings of itself and its calls into the shim, without malloc: /proc/self
//! files read with open/read into stack buffers, the clock, getrusage, and the shim's C API
//! (`mallocshim_trim`, `mallocshim_dump`, `mallocshim_backend_name`) found with dlsym.
//!
//! Owns no state; must not allocate (the replay measures every heap byte of the process).

use std::ffi::CStr;

/// Reads `/proc/self/<name>` into `buf`; the bytes read.
fn read_proc<'a>(name: &CStr, buf: &'a mut [u8]) -> &'a [u8] {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return &buf[..0];
    }
    let mut n = 0;
    while n < buf.len() {
        // SAFETY: writes at most `buf.len() - n` bytes into `buf[n..]`.
        let r = unsafe { libc::read(fd, buf[n..].as_mut_ptr().cast(), buf.len() - n) };
        if r <= 0 {
            break;
        }
        n += r as usize;
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    &buf[..n]
}

fn page() -> u64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as u64
}

/// Resident bytes now (`/proc/self/statm`, second field × page size).
pub fn rss_bytes() -> u64 {
    let mut buf = [0u8; 256];
    let s = read_proc(c"/proc/self/statm", &mut buf);
    let field = s.split(|&b| b == b' ').nth(1).unwrap_or(b"0");
    parse(field) * page()
}

/// Peak resident bytes since the last [`reset_peak`] (`/proc/self/status` VmHWM).
pub fn peak_rss_bytes() -> u64 {
    let mut buf = [0u8; 4096];
    let s = read_proc(c"/proc/self/status", &mut buf);
    s.split(|&b| b == b'\n')
        .find(|l| l.starts_with(b"VmHWM:"))
        .map(|l| {
            let digits: &[u8] = l[6..].trim_ascii();
            parse(digits.split(|&b| b == b' ').next().unwrap_or(b"0")) * 1024
        })
        .unwrap_or(0)
}

/// Resets VmHWM to the current RSS (`5` into /proc/self/clear_refs, Linux 4.0+).
pub fn reset_peak() {
    // SAFETY: a NUL-terminated path; one write of a static byte; the descriptor is closed.
    unsafe {
        let fd = libc::open(c"/proc/self/clear_refs".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, b"5".as_ptr().cast(), 1);
            libc::close(fd);
        }
    }
}

fn parse(s: &[u8]) -> u64 {
    s.iter().take_while(|b| b.is_ascii_digit()).fold(0u64, |v, &b| v * 10 + (b - b'0') as u64)
}

/// CLOCK_MONOTONIC in ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until CLOCK_MONOTONIC reaches `t_ns`.
pub fn sleep_until(t_ns: u64) {
    let ts = libc::timespec { tv_sec: (t_ns / 1_000_000_000) as i64, tv_nsec: (t_ns % 1_000_000_000) as i64 };
    // SAFETY: a valid timespec; EINTR just returns early (the caller's next step checks again).
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// User + system CPU seconds of the whole process.
pub fn cpu_s() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The shim's C API, looked up in the process (the shim is preloaded).
pub struct Shim {
    trim: unsafe extern "C" fn(*mut u8) -> libc::c_int,
    dump: extern "C" fn() -> libc::c_int,
    backend: extern "C" fn() -> *const libc::c_char,
}

fn sym(name: &CStr) -> Option<*mut libc::c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

impl Shim {
    /// None when the process runs without the shim.
    pub fn find() -> Option<Shim> {
        let (t, d, b) =
            (sym(c"mallocshim_trim")?, sym(c"mallocshim_dump")?, sym(c"mallocshim_backend_name")?);
        // SAFETY: the shim's exported functions have these C signatures (shim/include/mallocshim.h;
        // `trim` takes a `struct mallocshim_trim_result *`, passed NULL here).
        unsafe {
            Some(Shim {
                trim: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(*mut u8) -> libc::c_int>(
                    t,
                ),
                dump: std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> libc::c_int>(d),
                backend: std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> *const libc::c_char>(b),
            })
        }
    }

    /// Gives free memory back to the OS through the backend (`mallocshim_trim(NULL)`).
    pub fn trim(&self) {
        // SAFETY: NULL is allowed for the result.
        unsafe { (self.trim)(std::ptr::null_mut()) };
    }

    /// Writes one dump now; false when it failed.
    pub fn dump(&self) -> bool {
        (self.dump)() == 0
    }

    /// The backend serving the calls.
    pub fn backend(&self) -> String {
        // SAFETY: the shim returns a static NUL-terminated string, never NULL.
        unsafe { CStr::from_ptr((self.backend)()) }.to_string_lossy().into_owned()
    }
}
