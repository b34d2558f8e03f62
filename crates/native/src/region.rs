//! A workload's memory, mapped and touched in the page sizes a layout
//! asks for, and unmapped when dropped.
//!
//! Ordinary layouts (4k, thp, collapse, mix) are carved out of a larger
//! PROT_NONE reservation, 2 MB-aligned, with at least one inaccessible page
//! on each side: the guards keep the kernel from merging the region's VMA
//! with a neighbour (a heap arena, say), which would mix another mapping's
//! pages into the smaps counts. Hugetlb layouts are their own mapping.
//!
//! Every page is touched (written) during setup, so the layout is settled
//! before the workload initialises its data and before anything is timed.

use crate::hugetlb::Pool;
use crate::pages::{mix_chunks, Pages, SIZE_1G, SIZE_2M, SIZE_4K};
use crate::promote::{self, Monitor, Target};
use crate::smaps::{self, Obtained};
use std::ptr;

/// MADV_COLLAPSE (Linux 6.1+); not in every libc crate version.
pub const MADV_COLLAPSE: libc::c_int = 25;

pub struct Region {
    /// The whole mapping (guards included) to unmap.
    map: *mut u8,
    map_len: usize,
    /// The region itself: `len` bytes at `start`, aligned to the layout's
    /// page size.
    start: *mut u8,
    len: usize,
    pub pages: Pages,
    /// Things worth saying about the setup (a partial collapse, say).
    pub notes: Vec<String>,
    /// The promotion monitor watching the region (`promote`).
    monitor: Option<Monitor>,
    /// Whether this region set PR_SET_THP_DISABLE "except advised" on the
    /// process (`promote` under THP mode always), to be cleared on drop.
    undo_prctl: bool,
    /// Promotions by the end of the setup (`promote`).
    setup_promotions: u64,
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// The transparent_hugepage mode in force (`enabled` or `defrag`): the
/// bracketed word of its sysfs file, or None without THP.
pub fn thp_mode(file: &str) -> Option<String> {
    let t = std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{file}")).ok()?;
    let a = t.find('[')?;
    let b = t[a..].find(']')?;
    Some(t[a + 1..a + b].to_string())
}

impl Region {
    /// Maps at least `bytes` bytes in layout `pages`, growing the hugetlb
    /// pool through `pool` if needed, and touches every page. The error
    /// says why the layout cannot be had.
    pub fn new(bytes: u64, pages: Pages, pool: &mut Pool) -> Result<Region, String> {
        let g = pages.granule();
        let len = bytes.max(1).div_ceil(g) * g;
        let len = usize::try_from(len).map_err(|_| format!("{len} bytes do not fit this address space"))?;
        let mut r = match pages {
            Pages::Hugetlb2m | Pages::Hugetlb1g => Self::hugetlb(len, pages, pool)?,
            _ => Self::guarded(len, pages)?,
        };
        r.lay_out()?;
        Ok(r)
    }

    fn hugetlb(len: usize, pages: Pages, pool: &mut Pool) -> Result<Region, String> {
        let (page, shift, what) = if pages == Pages::Hugetlb1g { (SIZE_1G, 30, "MAP_HUGE_1GB") } else { (SIZE_2M, 21, "MAP_HUGE_2MB") };
        pool.ensure(page, len as u64 / page)?;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | (shift << libc::MAP_HUGE_SHIFT);
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let p = unsafe { libc::mmap(ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap of {len} bytes with MAP_HUGETLB|{what}: {}", errno()));
        }
        let p = p.cast::<u8>();
        Ok(Region { map: p, map_len: len, start: p, len, pages, notes: Vec::new(), monitor: None, undo_prctl: false, setup_promotions: 0 })
    }

    fn guarded(len: usize, pages: Pages) -> Result<Region, String> {
        let g = SIZE_2M as usize;
        let map_len = len + 3 * g;
        // SAFETY: a fresh anonymous reservation; nothing else refers to it.
        let p = unsafe {
            libc::mmap(ptr::null_mut(), map_len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap of {map_len} bytes: {}", errno()));
        }
        let map = p.cast::<u8>();
        // One 2 MB step past the first 2 MB boundary at or above the
        // reservation's start: at least 2 MB of guard below, and at least
        // 4 KB above.
        let start_addr = (map as usize).div_ceil(g) * g + g;
        // SAFETY: start_addr lies within the reservation, len + 2 MB before
        // its end.
        let start = unsafe { map.add(start_addr - map as usize) };
        let r = Region { map, map_len, start, len, pages, notes: Vec::new(), monitor: None, undo_prctl: false, setup_promotions: 0 };
        // SAFETY: [start, start + len) is inside the reservation.
        if unsafe { libc::mprotect(start.cast(), len, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            return Err(format!("mprotect of {len} bytes read-write: {}", errno()));
        }
        Ok(r)
    }

    fn madvise(&self, off: usize, len: usize, advice: libc::c_int, what: &str) -> Result<(), std::io::Error> {
        debug_assert!(off + len <= self.len);
        // SAFETY: the range is inside the region.
        if unsafe { libc::madvise(self.start.add(off).cast(), len, advice) } != 0 {
            let e = errno();
            return Err(std::io::Error::new(e.kind(), format!("madvise({what}) of {len} bytes: {e}")));
        }
        Ok(())
    }

    /// Writes one byte in every base page, in order, as a program's first
    /// use of fresh memory does.
    fn touch(&mut self) {
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len, the region is mapped read-write.
            unsafe { ptr::write_volatile(self.start.add(off), 0) };
            off += SIZE_4K as usize;
        }
    }

    /// Advises, touches and collapses as the layout says.
    fn lay_out(&mut self) -> Result<(), String> {
        let all = self.len;
        let s = |e: std::io::Error| e.to_string();
        match self.pages {
            Pages::FourK => {
                self.madvise(0, all, libc::MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE").map_err(s)?;
                self.touch();
            }
            Pages::Thp => {
                self.madvise(0, all, libc::MADV_HUGEPAGE, "MADV_HUGEPAGE").map_err(s)?;
                self.touch();
            }
            Pages::Collapse => {
                // Base pages first: under THP "always" a plain touch would
                // already fault 2 MB pages, so the region is kept out of THP
                // while it is touched, then let back in (MADV_COLLAPSE
                // refuses a MADV_NOHUGEPAGE range).
                let always = thp_mode("enabled").as_deref() == Some("always");
                if always {
                    self.madvise(0, all, libc::MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE").map_err(s)?;
                }
                self.touch();
                if always {
                    self.madvise(0, all, libc::MADV_HUGEPAGE, "MADV_HUGEPAGE").map_err(s)?;
                }
                if let Err(e) = self.madvise(0, all, MADV_COLLAPSE, "MADV_COLLAPSE") {
                    match e.raw_os_error() {
                        Some(libc::EINVAL) => {
                            return Err(format!("MADV_COLLAPSE is not supported here ({e}; it needs Linux 6.1 or later)"));
                        }
                        // EAGAIN, ENOMEM: some of it could not be collapsed;
                        // run with what there is, and say so.
                        _ => self.notes.push(format!("{e}: part of the region stayed in 4 KB pages")),
                    }
                }
            }
            Pages::Mix(f) => {
                let chunks = mix_chunks((all as u64) / SIZE_2M, f);
                let g = SIZE_2M as usize;
                let mut i = 0;
                while i < chunks.len() {
                    let mut j = i;
                    while j < chunks.len() && chunks[j] == chunks[i] {
                        j += 1;
                    }
                    let (adv, what) = if chunks[i] { (libc::MADV_HUGEPAGE, "MADV_HUGEPAGE") } else { (libc::MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE") };
                    self.madvise(i * g, (j - i) * g, adv, what).map_err(s)?;
                    i = j;
                }
                self.touch();
            }
            Pages::Promote => {
                // Base pages at fault (under mode always the process is
                // told to fault them so, while collapses stay allowed),
                // and the monitor watching the region as it fills; setup
                // ends after one pass that began once every page was
                // written, as a program's memory gets a pass after it
                // fills.
                if thp_mode("enabled").as_deref() == Some("always") {
                    // SAFETY: prctl with integer arguments.
                    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, crate::program::PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0) } != 0 {
                        return Err(format!("THP mode is always and PR_SET_THP_DISABLE \"except advised\" (Linux 6.18) is refused ({}): promotion needs base pages at fault", errno()));
                    }
                    self.undo_prctl = true;
                }
                let a = self.start as u64;
                let m = Monitor::start(Target::OwnRange { start: a, end: a + all as u64 }, promote::Config::default())?;
                self.touch();
                m.sync();
                self.setup_promotions = m.promotions();
                self.monitor = Some(m);
            }
            Pages::Mthp(_) => {
                return Err(format!("{} runs with programs only (splab native --pages {} -- PROG ARGS...)", self.pages, self.pages));
            }
            Pages::Hugetlb2m | Pages::Hugetlb1g => {
                // A fault the pool cannot serve is SIGBUS; the pool was
                // checked and the mapping reserved its pages at mmap time.
                self.touch();
            }
        }
        Ok(())
    }

    /// Stops the promotion monitor, if one watches the region, and returns
    /// what it did.
    pub fn stop_monitor(&mut self) -> Option<promote::Counters> {
        let at_setup = self.setup_promotions;
        self.monitor.take().map(|m| promote::Counters { setup_promotions: Some(at_setup), ..m.stop() })
    }

    /// What smaps says this region is mapped with now.
    pub fn obtained(&self) -> Result<Obtained, String> {
        let a = self.start as u64;
        smaps::read_self(a, a + self.len as u64)
    }

    /// The region's first byte (page-aligned), for probes that lay out
    /// their own data.
    pub fn start_ptr(&self) -> *mut u8 {
        self.start
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region as bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the region is mapped read-write for its whole length and
        // only reachable through this borrow.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }

    /// The region as 64-bit words (it is page-aligned).
    pub fn words(&mut self) -> &mut [u64] {
        // SAFETY: as for `bytes`; the start is page-aligned and any bit
        // pattern is a u64.
        unsafe { std::slice::from_raw_parts_mut(self.start.cast::<u64>(), self.len / 8) }
    }

    /// The region as doubles (it is page-aligned).
    pub fn doubles(&mut self) -> &mut [f64] {
        // SAFETY: as for `words`; any bit pattern is an f64.
        unsafe { std::slice::from_raw_parts_mut(self.start.cast::<f64>(), self.len / 8) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        drop(self.monitor.take());
        if self.undo_prctl {
            // SAFETY: prctl with integer arguments.
            unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) };
        }
        // SAFETY: the mapping was made by this region and nothing borrows
        // it any more.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}
