//! The hugetlb pool: its counters, and growing it for a run.
//!
//! MAP_HUGETLB takes its pages from a pool the administrator sizes by
//! writing /sys/kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages. A run
//! that finds too few free pages and runs as root grows the pool, and must
//! leave it as it found it: `Pool` remembers the value it first saw for each
//! size and writes it back when dropped (also on an error or a panic, which
//! unwind through it), and a handler for SIGINT, SIGTERM, SIGHUP and
//! SIGQUIT writes it back before the signal ends the process (ctrl-c).
//!
//! Invariant: `ARMED[i]` is set exactly while the pool of size `i` holds
//! another value than `OLD[i]` because this process wrote it; whoever
//! clears `ARMED[i]` (the drop or the signal handler, whichever comes
//! first) writes `OLD[i]` back.

use crate::pages::{SIZE_1G, SIZE_2M};
use serde::Serialize;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;

/// The two hugetlb sizes of x86-64, by slot.
const DIRS: [&str; 2] = ["/sys/kernel/mm/hugepages/hugepages-2048kB", "/sys/kernel/mm/hugepages/hugepages-1048576kB"];
/// `nr_hugepages` of each, as C strings for the signal handler.
const NR_PATHS: [&CStr; 2] =
    [c"/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", c"/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"];

static ARMED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
static OLD: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static HANDLER: Once = Once::new();

fn slot(page: u64) -> usize {
    debug_assert!(page == SIZE_2M || page == SIZE_1G, "no hugetlb pool of {page} bytes");
    usize::from(page == SIZE_1G)
}

fn name(page: u64) -> &'static str {
    if page == SIZE_1G {
        "1 GB"
    } else {
        "2 MB"
    }
}

/// A pool's counters, as its sysfs directory gives them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Counters {
    /// nr_hugepages: pages in the pool.
    pub nr: u64,
    /// free_hugepages: pages not mapped (reserved ones included).
    pub free: u64,
    /// resv_hugepages: free pages promised to mappings already made.
    pub resv: u64,
    /// surplus_hugepages: pages above nr_hugepages (overcommit).
    pub surplus: u64,
}

impl Counters {
    /// Pages a new mapping can still have.
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.resv)
    }
}

fn read_u64(path: &str) -> Result<u64, String> {
    let t = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    t.trim().parse().map_err(|_| format!("{path}: {:?} is not a number", t.trim()))
}

/// The counters of the pool of `page`-byte pages.
pub fn counters(page: u64) -> Result<Counters, String> {
    let d = DIRS[slot(page)];
    if !std::path::Path::new(d).exists() {
        return Err(format!("this kernel has no {} hugetlb pages ({d} does not exist)", name(page)));
    }
    Ok(Counters {
        nr: read_u64(&format!("{d}/nr_hugepages"))?,
        free: read_u64(&format!("{d}/free_hugepages"))?,
        resv: read_u64(&format!("{d}/resv_hugepages"))?,
        surplus: read_u64(&format!("{d}/surplus_hugepages"))?,
    })
}

/// Writes `value` to the `nr_hugepages` of slot `i` with nothing but
/// open/write/close, so that the signal handler may call it. Returns
/// whether the whole value was written.
fn write_nr(i: usize, value: u64) -> bool {
    let mut buf = [0u8; 24];
    let mut at = buf.len();
    let mut v = value;
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let digits = &buf[at..];
    // SAFETY: the path is a NUL-terminated constant; the buffer outlives
    // the write; the descriptor is closed on every path.
    unsafe {
        let fd = libc::open(NR_PATHS[i].as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, digits.as_ptr().cast(), digits.len());
        libc::close(fd);
        n == digits.len() as isize
    }
}

/// Writes back every pool value this process changed and has not restored.
/// Returns the slots that could not be restored.
fn restore_armed() -> [bool; 2] {
    let mut failed = [false; 2];
    for (i, f) in failed.iter_mut().enumerate() {
        if ARMED[i].swap(false, Ordering::SeqCst) {
            *f = !write_nr(i, OLD[i].load(Ordering::SeqCst));
        }
    }
    failed
}

extern "C" fn on_signal(sig: libc::c_int) {
    restore_armed();
    // SAFETY: signal and raise are async-signal-safe; with the default
    // action back, the signal ends the process as it would have.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

fn install_handler() {
    HANDLER.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            // SAFETY: a zeroed sigaction with a handler address and an empty
            // mask is a valid argument; the handler only does
            // async-signal-safe work.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// Grows the hugetlb pools as runs need, and puts them back as they were
/// when dropped.
pub struct Pool {
    /// Whether the pool may be grown (otherwise only pages already in it
    /// are used).
    pub grow: bool,
    /// What this pool changed: (page size, value found, value written).
    pub changes: Vec<(u64, u64, u64)>,
}

impl Pool {
    pub fn new(grow: bool) -> Pool {
        Pool { grow, changes: Vec::new() }
    }

    /// Makes sure a mapping of `pages` pages of `page` bytes can be made,
    /// growing the pool when this process is root. The error says why it
    /// cannot.
    pub fn ensure(&mut self, page: u64, pages: u64) -> Result<(), String> {
        let i = slot(page);
        let c = counters(page)?;
        if c.available() >= pages {
            return Ok(());
        }
        let need = pages - c.available();
        let path = NR_PATHS[i].to_string_lossy();
        if !self.grow {
            return Err(format!(
                "needs {pages} free hugetlb pages of {} and {} are free; growing the pool ({path}) was not allowed",
                name(page),
                c.available()
            ));
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(format!(
                "needs {pages} free hugetlb pages of {} and {} are free; growing the pool means writing {path}, which needs root",
                name(page),
                c.available()
            ));
        }
        let want = c.nr + need;
        install_handler();
        if !ARMED[i].load(Ordering::SeqCst) {
            OLD[i].store(c.nr, Ordering::SeqCst);
            ARMED[i].store(true, Ordering::SeqCst);
            self.changes.push((page, c.nr, want));
        } else if let Some(ch) = self.changes.iter_mut().find(|ch| ch.0 == page) {
            ch.2 = want;
        }
        if !write_nr(i, want) {
            return Err(format!("writing {want} to {path} failed: {}", std::io::Error::last_os_error()));
        }
        let after = counters(page)?;
        if after.available() < pages {
            return Err(format!(
                "needs {pages} hugetlb pages of {}: asked the kernel for {need} more ({path} = {want}) and it found {} (not enough free contiguous memory)",
                name(page),
                after.nr.saturating_sub(c.nr)
            ));
        }
        Ok(())
    }

    /// Puts the pools back; the error names a pool left changed.
    pub fn restore(&mut self) -> Result<(), String> {
        let failed = restore_armed();
        let mut bad = Vec::new();
        for &(page, old, _) in &self.changes {
            if failed[slot(page)] {
                bad.push(format!("could not write {old} back to {}", NR_PATHS[slot(page)].to_string_lossy()));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("splab: hugetlb pool: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_leaves_out_reserved_pages() {
        let c = Counters { nr: 10, free: 6, resv: 2, surplus: 0 };
        assert_eq!(c.available(), 4);
        assert_eq!(Counters { nr: 1, free: 0, resv: 1, surplus: 0 }.available(), 0);
    }
}
