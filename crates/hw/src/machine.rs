//! The machine as one value: physical memory, and per CPU the translation
//! hardware (TLBs, page-walk caches, under nested paging the host walk),
//! with the architecture's page-table walker. It owns no operating-system
//! state: the kernel (crates/vm) borrows memory and the MMUs to write
//! descriptors and invalidate translations, and the simulator's access
//! path (crates/sim) asks it to look up, walk and fill.
//!
//! What is always true: `mmu` and `nested` have one element per CPU
//! (`nested` none on a native machine); physical memory's frames are the
//! architecture's base pages.

use crate::mmu::{Access, Translation, WalkFault, WalkRefs, WalkReq, Walker};
use crate::nested::HostWalk;
use crate::physmem::PhysMem;
use crate::profile::Profile;
use crate::pwc::Pwc;
use crate::tlb::Tlb;
use crate::{PhysAddr, VirtAddr};
use serde::Serialize;

/// One CPU's translation hardware: its TLBs and page-walk caches.
pub struct Mmu {
    pub tlb: Tlb,
    pub pwc: Pwc,
}

/// Counts of the page-table walks the machine made, summed over CPUs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WalkStats {
    pub walks: u64,
    /// Memory references of walks, host table references of nested walks
    /// included.
    pub walk_mem_refs: u64,
    /// Of those, references to the host's table (nested paging only).
    pub nested_refs: u64,
}

pub struct Machine {
    /// Modelled physical memory (page tables and, when tracked, data).
    pub mem: PhysMem,
    /// Per CPU: TLBs and page-walk caches.
    pub mmu: Vec<Mmu>,
    walker: Box<dyn Walker>,
    /// Per CPU, the host walk of nested paging (empty on a native machine).
    nested: Vec<HostWalk>,
    refs: WalkRefs,
    pub walk_stats: WalkStats,
}

impl Machine {
    /// A machine of `profile`'s CPUs, TLBs and walk caches with `memory`
    /// bytes of physical memory in frames of 2^`page_shift` bytes,
    /// translating with `walker`.
    pub fn new(profile: &Profile, walker: Box<dyn Walker>, memory: u64, page_shift: u32, track_contents: bool) -> Result<Machine, String> {
        let npages = memory >> page_shift;
        let mut mmu = Vec::with_capacity(profile.cpus);
        for _ in 0..profile.cpus {
            mmu.push(Mmu { tlb: Tlb::new(&profile.tlb, walker.page_shifts())?, pwc: Pwc::new(&profile.pwc) });
        }
        let mut nested = Vec::new();
        if let Some(v) = profile.nested() {
            for _ in 0..profile.cpus {
                nested.push(HostWalk::new(v, &profile.pwc, memory).map_err(|e| format!("machine profile {:?}: {e}", profile.name))?);
            }
        }
        Ok(Machine {
            mem: PhysMem::with_page_shift(npages, page_shift, track_contents),
            mmu,
            walker,
            nested,
            refs: WalkRefs::default(),
            walk_stats: WalkStats::default(),
        })
    }

    pub fn ncpus(&self) -> usize {
        self.mmu.len()
    }

    /// Page sizes (log2) the TLBs can hold, base first.
    pub fn page_shifts(&self) -> &[u8] {
        self.walker.page_shifts()
    }

    /// The host walks of nested paging, one per CPU (none natively).
    pub fn nested(&self) -> &[HostWalk] {
        &self.nested
    }

    /// The hardware walk of `va` on `cpu` in the address space rooted at
    /// `root` and tagged `asid`. Appends the physical addresses it read to
    /// `refs` for the timing model: under nested paging each guest table
    /// entry's guest-physical address is first translated through the
    /// host's table (those references come before it), and so is the data
    /// address the walk ends with.
    pub fn walk(&mut self, cpu: usize, root: PhysAddr, asid: u16, va: VirtAddr, acc: Access, refs: &mut Vec<u64>) -> Result<Translation, WalkFault> {
        self.refs.clear();
        let r = self.walker.walk(&mut self.mem, &mut self.mmu[cpu].pwc, WalkReq::new(root, asid, va, acc), &mut self.refs);
        self.walk_stats.walks += 1;
        self.walk_stats.walk_mem_refs += self.refs.n as u64;
        if let Some(host) = self.nested.get_mut(cpu) {
            let mut n = 0;
            for &g in self.refs.as_slice() {
                n += host.translate(g, refs);
                refs.push(g);
            }
            if let Ok(t) = &r {
                n += host.translate(t.pa(va.0).0, refs);
            }
            self.walk_stats.walk_mem_refs += n as u64;
            self.walk_stats.nested_refs += n as u64;
        } else {
            refs.extend_from_slice(self.refs.as_slice());
        }
        r
    }

    /// Enters a walk's translation in the TLB of `cpu`, which has just
    /// missed `va`. Under nested paging the entry is no larger than the
    /// host's page: a guest superpage over 4 KB host pages is cached as 4
    /// KB pieces, so it shortens walks but does not widen the TLB's reach.
    pub fn fill_walked(&mut self, cpu: usize, va: VirtAddr, asid: u16, t: Translation) {
        let host = self.nested.get(cpu).map_or(t.shift, |h| h.page_shift());
        self.mmu[cpu].tlb.fill_missed_splintered(va.0, asid, t, host);
    }

    /// `fill_walked` for an instruction fetch: the translation goes into
    /// the instruction side of the TLB.
    pub fn fill_fetched(&mut self, cpu: usize, va: VirtAddr, asid: u16, t: Translation) {
        let host = self.nested.get(cpu).map_or(t.shift, |h| h.page_shift());
        self.mmu[cpu].tlb.fill_fetch_missed_splintered(va.0, asid, t, host);
    }

    /// What the page tables say of `va` now, without side effects.
    pub fn probe(&self, root: PhysAddr, va: VirtAddr) -> Option<Translation> {
        self.walker.probe(&self.mem, root, va)
    }
}
