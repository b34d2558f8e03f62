//! The simulated twin of the native `sparse` workload: a slab allocator's
//! arena of 2 MB slabs, a fraction of each slab's pages live, a quarter of
//! them freed (MADV_DONTNEED) and as many others written each round. It
//! draws its pages from the same schedule as the native run
//! (`splab_defs::sparse::Schedule`), so both touch and free the same
//! pages in the same order.
//!
//! The figure is the peak of the memory mapped into the process, read
//! after the first fill and after each round: a PV entry per 4 KB mapping
//! (`splab.pmap.pv_entries`), a 2 MB mapping counted whole. With
//! reservations, a slab's unused pages are never mapped and no slab is
//! promoted (none fills), so it is the live pages with superpages on as
//! off. The report also gives the memory the run holds out of the buddy
//! allocator (`v_page_count - v_free_count`): reservations take whole 2 MB
//! blocks from it, whose unused pages the kernel can take back when memory
//! runs short (by breaking the reservation).

use crate::common::{exit, fault, map, mib, since, size_text, spawn_on, Batch, PAGE};
use crate::{Figure, Workload, WorkloadResult};
use splab_defs::sparse::{Schedule, SEED, SLAB_PAGES};
use splab_sim::System;
use splab_vm::map::MmapReq;
use splab_vm::pmap::Advice;
use splab_vm::prot;
use std::fmt::Write as _;

const SLAB: u64 = SLAB_PAGES * PAGE;

pub struct Sparse {
    pub size: u64,
    pub fraction: f64,
    pub rounds: u32,
    pub cpu: usize,
}

impl Sparse {
    pub fn new(size: u64, fraction: f64, rounds: u32) -> Result<Sparse, String> {
        splab_defs::sparse::check(size, fraction, rounds)?;
        Ok(Sparse { size, fraction, rounds, cpu: 0 })
    }
}

/// Pages out of the buddy allocator now, and bytes mapped (base pages
/// by their PV entries, 2 MB mappings whole).
fn in_use(sys: &System) -> (u64, u64) {
    let s = sys.sysctls();
    let get = |n: &str| s.get_int(n).unwrap_or(0).max(0) as u64;
    let held = get("vm.stats.vm.v_page_count").saturating_sub(get("vm.stats.vm.v_free_count"));
    let supers = (get("vm.pmap.pde.promotions") + get("vm.pmap.pde.mappings")).saturating_sub(get("vm.pmap.pde.demotions"));
    (held, get("splab.pmap.pv_entries").saturating_sub(supers) * PAGE + supers * SLAB)
}

impl Workload for Sparse {
    fn name(&self) -> String {
        format!("sparse({}, {:.0}% of each 2 MB slab live, {} rounds)", size_text(self.size), self.fraction * 100.0, self.rounds)
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        let live = (SLAB_PAGES as f64 * self.fraction).round().max(1.0) as u64;
        (self.size / SLAB) * live * (1 + self.rounds as u64 / 4)
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let cpu = self.cpu;
        let pid = spawn_on(sys, cpu)?;
        let base_pages = in_use(sys).0;
        let va = map(sys, pid, MmapReq::anon(self.size, prot::RW), "the arena")?;
        let slabs = (self.size / SLAB) as usize;
        let mut sch = Schedule::new(slabs as u64, self.fraction, SEED);
        let t0 = sys.cycles(cpu);
        let mut b = Batch::new(cpu);
        let page_va = |s: usize, p: u16| va + s as u64 * SLAB + p as u64 * PAGE;
        for s in 0..slabs {
            for p in sch.fill(s) {
                b.store(sys, page_va(s, p), 1).map_err(fault("sparse: writing a page"))?;
            }
        }
        b.flush(sys).map_err(fault("sparse: writing a page"))?;
        progress(b.refs);
        let held = |sys: &System| {
            let (h, m) = in_use(sys);
            (h.saturating_sub(base_pages) * PAGE, m)
        };
        let mut lines = vec![(0u32, held(sys))];
        let (mut writes, mut frees) = (b.refs, 0u64);
        for round in 1..=self.rounds {
            for s in 0..slabs {
                let (freed, written) = sch.churn(s);
                for p in freed {
                    sys.madvise(pid, page_va(s, p), PAGE, Advice::DontNeed).map_err(|e| format!("sparse: madvise(MADV_DONTNEED): {e}"))?;
                    frees += 1;
                }
                for p in written {
                    b.store(sys, page_va(s, p), 1).map_err(fault("sparse: writing a page"))?;
                    writes += 1;
                }
                b.flush(sys).map_err(fault("sparse: writing a page"))?;
            }
            progress(b.refs);
            lines.push((round, held(sys)));
        }
        let secs = since(sys, cpu, t0);
        let peak = lines.iter().map(|l| l.1 .1).max().unwrap_or(0);
        let peak_held = lines.iter().map(|l| l.1 .0).max().unwrap_or(0);
        let live = slabs as u64 * sch.live() as u64 * PAGE;
        let sysctls = sys.sysctls();
        let promotions = sysctls.get_int("vm.pmap.pde.promotions").unwrap_or(0);
        exit(sys, pid)?;
        let mut r = String::new();
        let _ = writeln!(r, "sparse: {slabs} slabs of 2 MB, {} of 512 pages live in each ({} live of {} mapped) (simulated)", sch.live(), splab_hw::size::show(live), splab_hw::size::show(self.size));
        let _ = writeln!(r, "{:>6} {:>12} {:>10} {:>16}", "round", "mapped MiB", "vs live", "held MiB (buddy)");
        for (round, (h, m)) in &lines {
            let _ = writeln!(r, "{round:>6} {:>12.1} {:>9.2}x {:>16.1}", mib(*m), *m as f64 / live as f64, mib(*h));
        }
        let _ = writeln!(
            r,
            "peak mapped {:.1} MiB ({:.2}x the live pages), peak held {:.1} MiB; {writes} page writes, {frees} pages freed with MADV_DONTNEED; vm.pmap.pde.promotions {promotions}; {secs:.4} s (simulated)",
            mib(peak),
            peak as f64 / live as f64,
            mib(peak_held)
        );
        Ok(WorkloadResult { details: Vec::new(), figure: Figure { name: "peak mapped".into(), value: mib(peak), unit: "MiB".into(), higher_is_better: false }, report: r, timed_seconds: secs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use splab_sim::Config;

    fn system(superpages: bool) -> System {
        let mut c = Config::new(splab_hw::profile::Profile::load("sapphire-rapids").unwrap());
        c.memory = 256 << 20;
        c.superpages = superpages;
        System::new(c).unwrap()
    }

    /// The first fill maps exactly the live pages; MADV_DONTNEED keeps
    /// pages mapped (FreeBSD's meaning: it only lowers their priority), so
    /// rounds add to what is mapped; no slab fills, none is promoted.
    #[test]
    fn live_pages_mapped_and_nothing_promoted() {
        for sp in [false, true] {
            let mut sys = system(sp);
            let r = Sparse::new(16 << 20, 0.25, 0).unwrap().run(&mut sys, &mut |_| {}).unwrap();
            assert_eq!(r.figure.value, 4.0, "8 slabs x 128 pages of 4 KB: {}", r.report);
            let mut sys = system(sp);
            let r = Sparse::new(16 << 20, 0.25, 4).unwrap().run(&mut sys, &mut |_| {}).unwrap();
            assert!(r.figure.value > 4.0 && r.figure.value < 16.0, "{}", r.report);
            assert!(r.report.contains("vm.pmap.pde.promotions 0;"), "{}", r.report);
        }
    }
}
