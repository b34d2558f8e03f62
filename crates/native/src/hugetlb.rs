//! The hugetlb pool: its counters, and growing it for a run.
//!
//! MAP_HUGETLB takes its pages from a pool the administrator sizes by
//! writing /sys/kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages. A run
//! that finds too few free pages and runs as root grows the pool, and must
//! leave it as it found it: the write goes through `sysstate::set`, which
//! saves the value found first, and `Pool` writes it back when dropped
//! (also on an error or a panic, which unwind through it); a signal, or
//! the next splab after a killed one, restores it through `sysstate`.

use crate::pages::{SIZE_1G, SIZE_2M};
use serde::Serialize;
use crate::sysstate;

/// The two hugetlb sizes of x86-64, by slot.
const DIRS: [&str; 2] = ["/sys/kernel/mm/hugepages/hugepages-2048kB", "/sys/kernel/mm/hugepages/hugepages-1048576kB"];
/// `nr_hugepages` of each.
const NR_PATHS: [&str; 2] = ["/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"];

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
        let path = NR_PATHS[i];
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
        if let Some(ch) = self.changes.iter_mut().find(|ch| ch.0 == page) {
            ch.2 = want;
        } else {
            self.changes.push((page, c.nr, want));
        }
        sysstate::set(path, &want.to_string())?;
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
        let bad: Vec<String> = self.changes.iter().filter_map(|&(page, _, _)| sysstate::restore(NR_PATHS[slot(page)]).err()).collect();
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
