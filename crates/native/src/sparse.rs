//! Where THP costs memory: a slab allocator's use of an arena, natively.
//!
//! A key-value store's slab allocator (memcached's, say) carves its arena
//! into 2 MB slabs and keeps only part of each slab's pages in use: items
//! of a size class are spread over many slabs, and pages whose items were
//! all freed go back to the kernel with MADV_DONTNEED. Here each 2 MB slab
//! of the arena has a fraction of its 512 pages live, chosen at random;
//! each round frees a quarter of every slab's live pages (MADV_DONTNEED,
//! page by page) and writes as many pages that were free, so the live
//! share stays the same. The peak resident memory of the arena is the
//! figure (lower is better): under 4 KB pages it is the live share, under
//! THP at fault every slab's first write brings in all 2 MB, and khugepaged
//! (which collapses a range with a single page present) brings freed
//! pages back; promotion when populated never finds a slab full, so
//! nothing is promoted and nothing bloats.
//!
//! The choice of pages (`Schedule`) is shared with the simulated twin
//! (`splab_workloads::sparse`), so both touch and free the same pages.

use crate::pages::{SIZE_2M, SIZE_4K};
use crate::region::Region;
use crate::{Figure, Native, Outcome, Timer};
use std::fmt::Write as _;

pub use splab_defs::sparse::{Schedule, SEED, SLAB_PAGES};

pub struct Sparse {
    /// Bytes of the arena (a whole number of 2 MB slabs).
    pub size: u64,
    /// Share of each slab's pages live.
    pub fraction: f64,
    pub rounds: u32,
}

impl Sparse {
    pub fn new(size: u64, fraction: f64, rounds: u32) -> Result<Sparse, String> {
        splab_defs::sparse::check(size, fraction, rounds)?;
        Ok(Sparse { size, fraction, rounds })
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

impl Native for Sparse {
    fn name(&self) -> String {
        format!("sparse({}, {:.0}% of each 2 MB slab live, {} rounds)", splab_hw::size::show(self.size), self.fraction * 100.0, self.rounds)
    }

    fn bytes(&self) -> u64 {
        self.size
    }

    fn run(&self, mem: &mut Region) -> Result<Outcome, String> {
        let base = mem.start_ptr();
        let len = self.size as usize;
        // The layout's setup touched every page; the arena starts empty,
        // as a fresh mapping does (its advice stays).
        // SAFETY: the arena is the region's first `len` bytes.
        if unsafe { libc::madvise(base.cast(), len, libc::MADV_DONTNEED) } != 0 {
            return Err(format!("madvise(MADV_DONTNEED) of the arena: {}", std::io::Error::last_os_error()));
        }
        let slabs = self.size / SIZE_2M;
        let mut sch = Schedule::new(slabs, self.fraction, SEED);
        let resident = |m: &Region| m.obtained().map(|o| (o.resident(), o.bytes_2m));
        let write = |s: usize, p: u16| {
            let off = s * SIZE_2M as usize + p as usize * SIZE_4K as usize;
            // SAFETY: off < len; the region is mapped read-write.
            unsafe { std::ptr::write_volatile(base.add(off), 1) };
        };
        let mut timer = Timer::default();
        let mut writes = 0u64;
        let mut frees = 0u64;
        timer.start();
        for s in 0..slabs as usize {
            for p in sch.fill(s) {
                write(s, p);
                writes += 1;
            }
        }
        timer.stop();
        let (r0, h0) = resident(mem)?;
        let (mut peak, mut peak_huge, mut last) = (r0, h0, (r0, h0));
        let mut lines = vec![(0u32, r0, h0)];
        for round in 1..=self.rounds {
            timer.start();
            for s in 0..slabs as usize {
                let (freed, written) = sch.churn(s);
                for p in freed {
                    let off = s * SIZE_2M as usize + p as usize * SIZE_4K as usize;
                    // SAFETY: one page inside the arena.
                    if unsafe { libc::madvise(base.add(off).cast(), SIZE_4K as usize, libc::MADV_DONTNEED) } != 0 {
                        return Err(format!("madvise(MADV_DONTNEED) of a page: {}", std::io::Error::last_os_error()));
                    }
                    frees += 1;
                }
                for p in written {
                    write(s, p);
                    writes += 1;
                }
            }
            timer.stop();
            last = resident(mem)?;
            peak = peak.max(last.0);
            peak_huge = peak_huge.max(last.1);
            lines.push((round, last.0, last.1));
        }
        let live = slabs * sch.live() as u64 * SIZE_4K;
        let mut r = String::new();
        let _ = writeln!(r, "sparse: {slabs} slabs of 2 MB, {} of 512 pages live in each ({} live of {} mapped)", sch.live(), splab_hw::size::show(live), splab_hw::size::show(self.size));
        let _ = writeln!(r, "{:>6} {:>14} {:>14} {:>10}", "round", "resident MiB", "in 2 MB pages", "vs live");
        for (round, res, huge) in &lines {
            let _ = writeln!(r, "{round:>6} {:>14.1} {:>14.1} {:>9.2}x", mib(*res), mib(*huge), *res as f64 / live as f64);
        }
        let _ = writeln!(r, "peak resident {:.1} MiB ({:.2}x the live pages), {:.1} MiB of it in 2 MB pages; {writes} page writes, {frees} pages freed with MADV_DONTNEED", mib(peak), peak as f64 / live as f64, mib(peak_huge));
        let _ = last;
        let ops = (writes + frees) as f64 / timer.wall.max(1e-9);
        Ok(Outcome {
            seconds: timer.wall,
            cpu_seconds: timer.cpu,
            figures: vec![Figure::new("peak resident", mib(peak), "MiB", false), Figure::new("page writes and frees per second", ops, "ops/s", true)],
            report: r,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_share_stays_and_pages_stay_distinct() {
        let mut s = Schedule::new(3, 0.25, 7);
        assert_eq!(s.live(), 128);
        let f = s.fill(1);
        assert_eq!(f.len(), 128);
        let mut live: std::collections::BTreeSet<u16> = f.iter().copied().collect();
        assert_eq!(live.len(), 128);
        for _ in 0..10 {
            let (freed, written) = s.churn(1);
            assert_eq!(freed.len(), 32);
            for p in &freed {
                assert!(live.remove(p), "freed {p} was not live");
            }
            for p in &written {
                assert!(live.insert(*p), "wrote {p} twice");
            }
            assert_eq!(live.len(), 128);
        }
        assert!(Sparse::new(3 << 20, 0.5, 1).is_err());
        assert!(Sparse::new(2 << 20, 0.0, 1).is_err());
    }
}
