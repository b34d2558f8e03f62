//! Linux's transparent huge pages (mm/huge_memory.c, mm/khugepaged.c,
//! mm/memory.c's anonymous fault, mm/compaction.c), as of Linux 6.18.
//!
//! - At a fault on private anonymous memory, where the VMA allows it
//!   (`enabled`: always; madvise: only VMAs advised MADV_HUGEPAGE; never),
//!   the largest allowed size whose aligned range lies inside the VMA with
//!   nothing of it present is allocated as one block, zeroed whole and
//!   mapped: the PMD size (2 MB, `hugepages-2048kB`, which inherits
//!   `enabled`) or a multi-size THP order below it (`hugepages-<N>kB`:
//!   always, inherit, madvise, never; arm64 maps 64 KB with the contiguous
//!   bit, other sizes map as base pages of one block). Failing to find a
//!   free block, the fault compacts memory where `defrag` lets it stall
//!   (always; madvise and defer+madvise for advised VMAs), then falls back
//!   to the next smaller size, finally to one page.
//! - khugepaged wakes every `scan_sleep_millisecs` of simulated time and
//!   scans `pages_to_scan` page-table entries of eligible VMAs; a PMD
//!   range with at most `max_ptes_none` empty entries (and at most
//!   `max_ptes_swap` on swap) is collapsed into a new huge page: present
//!   pages copied, empty ones zero-filled. Its work is charged to no
//!   program, but reported as its CPU time.
//! - MADV_COLLAPSE collapses the advised range now, whatever `enabled`
//!   says and with no threshold.
//! - MADV_DONTNEED frees private anonymous pages at once (they read as
//!   zeros again); a huge page partly freed is split.
//! - Under memory pressure the shrinker splits huge pages with more than
//!   `max_ptes_none` zero-filled subpages (pages never written since their
//!   zero fill) and frees those (`shrink_underused`).
//!
//! Not modelled: the huge zero page (read faults allocate as write faults
//! do, as with use_zero_page = 0), kcompactd and kswapd (deferred
//! compaction only wakes nothing), holding a partly unmapped huge page
//! whole until its deferred split (its unmapped pages are freed at once).
//!
//! Tunables keep Linux's sysfs paths under /sys/kernel/mm/, with `.` for
//! `/`: `transparent_hugepage.enabled`, `transparent_hugepage.defrag`,
//! `transparent_hugepage.shrink_underused`,
//! `transparent_hugepage.khugepaged.max_ptes_none` (and `max_ptes_swap`,
//! `max_ptes_shared`, `pages_to_scan`, `scan_sleep_millisecs`,
//! `alloc_sleep_millisecs`, `defrag`),
//! `transparent_hugepage.hugepages-64kB.enabled`; the
//! `transparent_hugepage.` prefix may be left out. Counters keep
//! /proc/vmstat's names under `vmstat.` and the sysfs statistics' under
//! their paths.

use super::{Handled, Policy, ZeroFill};
use crate::fault::FaultError;
use crate::kernel::{Kernel, Pid};
use crate::map::{eflags, Errno};
use crate::pmap::Psind;
use crate::sysctl::Sysctls;
use crate::superpage::BlockSize;
use splab_hw::machine::Machine;
use splab_hw::{Pfn, VirtAddr};
use std::collections::BTreeMap;

/// `enabled` of THP and of each mTHP size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enabled {
    Always,
    Inherit,
    Madvise,
    Never,
}

impl Enabled {
    fn parse(v: &str, inherit_ok: bool) -> Result<Enabled, String> {
        match v {
            "always" => Ok(Enabled::Always),
            "madvise" => Ok(Enabled::Madvise),
            "never" => Ok(Enabled::Never),
            "inherit" if inherit_ok => Ok(Enabled::Inherit),
            _ => Err(format!("{v:?} is not one of {}", if inherit_ok { "always, inherit, madvise, never" } else { "always, madvise, never" })),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Enabled::Always => "always",
            Enabled::Inherit => "inherit",
            Enabled::Madvise => "madvise",
            Enabled::Never => "never",
        }
    }
    /// Whether a VMA (advised MADV_HUGEPAGE or not) may have this size.
    fn allows(self, top: Enabled, advised: bool) -> bool {
        match if self == Enabled::Inherit { top } else { self } {
            Enabled::Always => true,
            Enabled::Madvise => advised,
            _ => false,
        }
    }
}

/// `defrag`: whether a fault that finds no free huge block may stall to
/// compact memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Defrag {
    Always,
    Defer,
    DeferMadvise,
    Madvise,
    Never,
}

impl Defrag {
    const NAMES: [(&'static str, Defrag); 5] =
        [("always", Defrag::Always), ("defer", Defrag::Defer), ("defer+madvise", Defrag::DeferMadvise), ("madvise", Defrag::Madvise), ("never", Defrag::Never)];
    fn stalls(self, advised: bool) -> bool {
        match self {
            Defrag::Always => true,
            Defrag::Madvise | Defrag::DeferMadvise => advised,
            Defrag::Defer | Defrag::Never => false,
        }
    }
}

/// Linux's /proc/vmstat THP counters and the compaction ones it bumps.
#[derive(Clone, Debug, Default)]
struct Vmstat {
    thp_fault_alloc: u64,
    thp_fault_fallback: u64,
    thp_collapse_alloc: u64,
    thp_collapse_alloc_failed: u64,
    thp_split_page: u64,
    thp_deferred_split_page: u64,
    thp_underused_split_page: u64,
    thp_scan_exceed_none_pte: u64,
    thp_scan_exceed_swap_pte: u64,
    compact_stall: u64,
    compact_success: u64,
    compact_fail: u64,
}

/// Per mTHP size: hugepages-<N>kB/stats.
#[derive(Clone, Debug, Default)]
struct SizeStats {
    anon_fault_alloc: u64,
    anon_fault_fallback: u64,
    split: u64,
}

pub struct LinuxThp {
    enabled: Enabled,
    defrag: Defrag,
    shrink_underused: bool,
    /// Per order below and at the PMD size: hugepages-<N>kB/enabled
    /// (absent means never, the PMD size inherit).
    sizes: BTreeMap<u32, Enabled>,
    // khugepaged.
    khugepaged_defrag: bool,
    max_ptes_none: u32,
    max_ptes_swap: u32,
    max_ptes_shared: u32,
    pages_to_scan: u32,
    scan_sleep_ms: u32,
    alloc_sleep_ms: u32,
    next_wake_ns: f64,
    /// Where the scan goes on from: a process and an address in it.
    cursor: (Pid, u64),
    full_scans: u64,
    pages_collapsed: u64,
    vmstat: Vmstat,
    size_stats: BTreeMap<u32, SizeStats>,
    /// Huge blocks allocated at faults or by collapse and still whole:
    /// base frame to (process, address, order).
    blocks: BTreeMap<u32, (Pid, u64, u32)>,
}

impl LinuxThp {
    /// Linux's defaults with `enabled` from a mode: `always`, `madvise`,
    /// `never`.
    pub fn from_mode(mode: &str) -> Result<LinuxThp, String> {
        let enabled = Enabled::parse(mode, false).map_err(|e| format!("policy linux-thp:{mode}: {e}"))?;
        Ok(LinuxThp {
            enabled,
            defrag: Defrag::Madvise,
            shrink_underused: true,
            sizes: BTreeMap::new(),
            khugepaged_defrag: true,
            max_ptes_none: 511,
            max_ptes_swap: 64,
            max_ptes_shared: 256,
            pages_to_scan: 4096,
            scan_sleep_ms: 10_000,
            alloc_sleep_ms: 60_000,
            next_wake_ns: 10_000.0 * 1e6,
            cursor: (0, 0),
            full_scans: 0,
            pages_collapsed: 0,
            vmstat: Vmstat::default(),
            size_stats: BTreeMap::new(),
            blocks: BTreeMap::new(),
        })
    }

    /// The PMD order (2 MB over 4 KB pages) and its page-size index.
    fn pmd(k: &Kernel) -> Option<BlockSize> {
        k.superpage_sizes().into_iter().last()
    }

    /// `enabled` of the size of `order`: hugepages-<N>kB/enabled.
    fn size_enabled(&self, order: u32, pmd_order: u32) -> Enabled {
        self.sizes.get(&order).copied().unwrap_or(if order == pmd_order { Enabled::Inherit } else { Enabled::Never })
    }

    /// Whether khugepaged or a fault may use a VMA with these flags at the
    /// PMD size.
    fn vma_allows(&self, flags: u8, pmd_order: u32) -> bool {
        flags & eflags::NORESERV == 0 && self.size_enabled(pmd_order, pmd_order).allows(self.enabled, flags & eflags::HUGEPAGE != 0)
    }

    /// The mapping psind of an order, if the pmap has a page of that size.
    fn psind_of(k: &Kernel, order: u32) -> Option<Psind> {
        let sizes = k.pmap.pagesizes();
        sizes.iter().position(|&s| s == sizes[0] << order).map(|i| Psind::new(i as u8))
    }

    fn size_kb(k: &Kernel, order: u32) -> u64 {
        (k.page_size() << order) >> 10
    }

    /// khugepaged's pass over `pages_to_scan` page-table entries.
    fn scan(&mut self, k: &mut Kernel, hw: &mut Machine) {
        let Some(pmd) = Self::pmd(k) else { return };
        let n = 1u64 << pmd.order;
        let bytes = n << k.page_shift();
        let mut budget = self.pages_to_scan as u64;
        let pids: Vec<Pid> = (0..k.procs.len() as Pid).filter(|&p| k.proc(p).is_some()).collect();
        if pids.is_empty() {
            return;
        }
        let mut visited = 0;
        let start = pids.iter().position(|&p| p >= self.cursor.0).unwrap_or(0);
        let mut i = start;
        while budget > 0 && visited <= pids.len() {
            let pid = pids[i % pids.len()];
            let from = if pid == self.cursor.0 { self.cursor.1 } else { 0 };
            for (s, e, _obj, fl) in k.anon_ranges(pid) {
                if !self.vma_allows(fl, pmd.order) {
                    continue;
                }
                let mut va0 = s.div_ceil(bytes) * bytes;
                va0 = va0.max(from.div_ceil(bytes) * bytes);
                while va0 + bytes <= e && budget > 0 {
                    budget = budget.saturating_sub(n);
                    k.ev.khugepaged_scanned += n;
                    self.cursor = (pid, va0 + bytes);
                    if self.try_collapse(k, hw, pid, va0, pmd, false).is_err() {
                        // No huge page to be had: sleep longer (alloc_sleep).
                        self.next_wake_ns += self.alloc_sleep_ms as f64 * 1e6;
                        return;
                    }
                    va0 += bytes;
                }
                if budget == 0 {
                    return;
                }
            }
            i += 1;
            visited += 1;
            if i % pids.len() == 0 {
                self.full_scans += 1;
            }
            self.cursor = (pids[i % pids.len()], 0);
        }
    }

    /// Collapses the PMD range at `va0` if khugepaged's thresholds allow it
    /// (or always, for MADV_COLLAPSE). Err when no huge block could be had.
    fn try_collapse(&mut self, k: &mut Kernel, hw: &mut Machine, pid: Pid, va0: u64, pmd: BlockSize, forced: bool) -> Result<bool, ()> {
        let Some(p) = k.proc(pid) else { return Ok(false) };
        let pm = p.pmap;
        let Some(e) = p.map.lookup(va0) else { return Ok(false) };
        if k.pmap.extract(&hw.mem, pm, VirtAddr(va0)).is_some_and(|m| m.shift as u32 >= k.page_shift() + pmd.order) {
            return Ok(false);
        }
        let n = 1u32 << pmd.order;
        let p0 = e.pindex(va0, k.page_shift()) as u32;
        let o = k.objects.get(e.object);
        let present = o.pages.range(p0..p0 + n).count() as u32;
        let swapped = o.swblk.range(p0..p0 + n).filter(|(p, _)| !o.pages.contains_key(p)).count() as u32;
        let none = n - present - swapped;
        if present == 0 && swapped == 0 {
            return Ok(false);
        }
        if !forced {
            if none > self.max_ptes_none {
                self.vmstat.thp_scan_exceed_none_pte += 1;
                return Ok(false);
            }
            if swapped > self.max_ptes_swap {
                self.vmstat.thp_scan_exceed_swap_pte += 1;
                return Ok(false);
            }
        }
        let mut got = k.collapse_block(hw, pid, va0, pmd.order, Some(pmd.psind));
        if got.is_none() && (forced || self.khugepaged_defrag) {
            self.vmstat.compact_stall += 1;
            if k.compact(hw, pmd.order) {
                self.vmstat.compact_success += 1;
                got = k.collapse_block(hw, pid, va0, pmd.order, Some(pmd.psind));
            } else {
                self.vmstat.compact_fail += 1;
            }
        }
        match got {
            Some(base) => {
                self.vmstat.thp_collapse_alloc += 1;
                self.pages_collapsed += 1;
                self.blocks.insert(base.0, (pid, va0, pmd.order));
                Ok(true)
            }
            None => {
                self.vmstat.thp_collapse_alloc_failed += 1;
                Err(())
            }
        }
    }

    /// Forgets blocks some of whose pages are no longer where the block
    /// put them (freed, moved): they are split (thp_deferred_split_page
    /// for those partly unmapped).
    fn prune(&mut self, k: &Kernel) {
        let gone: Vec<u32> = self
            .blocks
            .iter()
            .filter(|&(&b, &(_, _, order))| {
                let first = k.phys.pages.get(Pfn(b));
                (0..1u32 << order).any(|i| {
                    let p = k.phys.pages.get(Pfn(b + i));
                    p.object == 0 || p.object != first.object || p.pindex != first.pindex + i
                })
            })
            .map(|(&b, _)| b)
            .collect();
        for b in gone {
            self.blocks.remove(&b);
            self.vmstat.thp_deferred_split_page += 1;
            self.vmstat.thp_split_page += 1;
        }
    }
}

impl Policy for LinuxThp {
    fn kind(&self) -> super::PolicyKind {
        super::PolicyKind::LinuxThp
    }

    fn reservations(&self) -> bool {
        false
    }

    fn dontneed_frees(&self) -> bool {
        true
    }

    fn zero_fill(&mut self, k: &mut Kernel, hw: &mut Machine, f: &ZeroFill) -> Result<Handled, FaultError> {
        if !k.pmap.superpages_enabled() || f.entry.eflags & eflags::NORESERV != 0 {
            return Ok(Handled::No);
        }
        let Some(pmd) = Self::pmd(k) else { return Ok(Handled::No) };
        let advised = f.entry.eflags & eflags::HUGEPAGE != 0;
        let mut tried_pmd = false;
        for order in (1..=pmd.order).rev() {
            if !self.size_enabled(order, pmd.order).allows(self.enabled, advised) || !k.block_fits(f, order) {
                continue;
            }
            let mut base = k.fill_block(hw, f, order);
            if base.is_none() && self.defrag.stalls(advised) {
                self.vmstat.compact_stall += 1;
                if k.compact(hw, order) {
                    self.vmstat.compact_success += 1;
                    base = k.fill_block(hw, f, order);
                } else {
                    self.vmstat.compact_fail += 1;
                }
            }
            let st = self.size_stats.entry(order).or_default();
            let Some(base) = base else {
                st.anon_fault_fallback += 1;
                if order == pmd.order {
                    tried_pmd = true;
                }
                continue;
            };
            st.anon_fault_alloc += 1;
            if order == pmd.order {
                self.vmstat.thp_fault_alloc += 1;
            }
            let bytes = k.page_size() << order;
            let va0 = f.va & !(bytes - 1);
            k.map_block(hw, f.pm, va0, base, order, Self::psind_of(k, order), f.prot, f.access)?;
            self.blocks.insert(base.0, (f.pid, va0, order));
            return Ok(Handled::Yes);
        }
        if tried_pmd {
            self.vmstat.thp_fault_fallback += 1;
        }
        Ok(Handled::No)
    }

    fn background(&mut self, k: &mut Kernel, hw: &mut Machine, now_ns: f64) {
        // khugepaged runs only while some size could use it.
        let Some(pmd) = Self::pmd(k) else { return };
        if self.size_enabled(pmd.order, pmd.order) == Enabled::Never || (self.size_enabled(pmd.order, pmd.order) == Enabled::Inherit && self.enabled == Enabled::Never) {
            return;
        }
        let mut passes = 0;
        while now_ns >= self.next_wake_ns && passes < 1000 {
            self.next_wake_ns += self.scan_sleep_ms as f64 * 1e6;
            self.scan(k, hw);
            passes += 1;
        }
    }

    fn next_background_ns(&self) -> Option<f64> {
        Some(self.next_wake_ns)
    }

    fn reclaim(&mut self, k: &mut Kernel, hw: &mut Machine) {
        self.prune(k);
        if !self.shrink_underused {
            return;
        }
        let Some(pmd) = Self::pmd(k) else { return };
        let underused: Vec<(u32, Pid, u64, u32)> = self
            .blocks
            .iter()
            .filter(|(_, &(_, _, order))| order == pmd.order)
            .filter(|(&b, &(_, _, order))| (0..1u32 << order).filter(|&i| !hw.mem.written(Pfn(b + i))).count() as u32 > self.max_ptes_none)
            .map(|(&b, &(pid, va0, order))| (b, pid, va0, order))
            .collect();
        for (b, pid, va0, order) in underused {
            self.blocks.remove(&b);
            let bytes = k.page_size() << order;
            let freed = k.drop_pages(hw, pid, va0, bytes, |hw, m| !hw.mem.written(m));
            if freed > 0 {
                self.vmstat.thp_underused_split_page += 1;
                self.vmstat.thp_split_page += 1;
                self.size_stats.entry(order).or_default().split += 1;
            }
        }
    }

    fn collapse(&mut self, k: &mut Kernel, hw: &mut Machine, pid: Pid, start: u64, end: u64) -> Result<(), Errno> {
        let Some(pmd) = Self::pmd(k) else { return Err(Errno::EINVAL) };
        let bytes = k.page_size() << pmd.order;
        let ranges = k.anon_ranges(pid);
        let mut va0 = start.div_ceil(bytes) * bytes;
        while va0 + bytes <= end {
            if ranges.iter().any(|&(s, e, _, _)| s <= va0 && va0 + bytes <= e) && self.try_collapse(k, hw, pid, va0, pmd, true).is_err() {
                return Err(Errno::ENOMEM);
            }
            va0 += bytes;
        }
        Ok(())
    }

    fn set_tunable(&mut self, name: &str, value: &str) -> Option<Result<(), String>> {
        let name = name.strip_prefix("transparent_hugepage.").unwrap_or(name);
        let num = |lo: u32, hi: u32| -> Result<u32, String> {
            match value.parse::<u32>() {
                Ok(v) if (lo..=hi).contains(&v) => Ok(v),
                _ => Err(format!("transparent_hugepage.{name} must be a number from {lo} to {hi}, not {value:?}")),
            }
        };
        let set = |r: Result<u32, String>, slot: &mut u32| r.map(|v| *slot = v);
        Some(match name {
            "enabled" => Enabled::parse(value, false).map(|e| self.enabled = e).map_err(|e| format!("transparent_hugepage.enabled: {e}")),
            "defrag" => match Defrag::NAMES.iter().find(|(n, _)| *n == value) {
                Some(&(_, d)) => {
                    self.defrag = d;
                    Ok(())
                }
                None => Err(format!("transparent_hugepage.defrag: {value:?} is not one of always, defer, defer+madvise, madvise, never")),
            },
            "shrink_underused" => num(0, 1).map(|v| self.shrink_underused = v == 1),
            "khugepaged.defrag" => num(0, 1).map(|v| self.khugepaged_defrag = v == 1),
            "khugepaged.max_ptes_none" => set(num(0, 511), &mut self.max_ptes_none),
            "khugepaged.max_ptes_swap" => set(num(0, 511), &mut self.max_ptes_swap),
            "khugepaged.max_ptes_shared" => set(num(0, 511), &mut self.max_ptes_shared),
            "khugepaged.pages_to_scan" => set(num(1, 1 << 22), &mut self.pages_to_scan),
            "khugepaged.scan_sleep_millisecs" => num(0, 3_600_000).map(|v| {
                self.next_wake_ns = self.next_wake_ns - self.scan_sleep_ms as f64 * 1e6 + v as f64 * 1e6;
                self.scan_sleep_ms = v;
            }),
            "khugepaged.alloc_sleep_millisecs" => set(num(0, 3_600_000), &mut self.alloc_sleep_ms),
            _ => {
                let size = name.strip_prefix("hugepages-").and_then(|s| s.strip_suffix("kB.enabled"))?;
                let order = match size.parse::<u64>() {
                    Ok(kb) if kb.is_power_of_two() && (8..=2048).contains(&kb) => (kb / 4).trailing_zeros(),
                    _ => return Some(Err(format!("transparent_hugepage.{name}: no such size (8kB to 2048kB, powers of two)"))),
                };
                Enabled::parse(value, true).map(|e| {
                    self.sizes.insert(order, e);
                })
                .map_err(|e| format!("transparent_hugepage.{name}: {e}"))
            }
        })
    }

    fn tunable_names(&self) -> Vec<String> {
        let mut v: Vec<String> = ["enabled", "defrag", "shrink_underused", "khugepaged.defrag", "khugepaged.max_ptes_none", "khugepaged.max_ptes_swap", "khugepaged.max_ptes_shared", "khugepaged.pages_to_scan", "khugepaged.scan_sleep_millisecs", "khugepaged.alloc_sleep_millisecs"]
            .iter()
            .map(|n| format!("transparent_hugepage.{n}"))
            .collect();
        v.push("transparent_hugepage.hugepages-<N>kB.enabled".into());
        v
    }

    fn sysctls(&self, k: &Kernel, out: &mut Sysctls) {
        let t = "transparent_hugepage";
        out.text(&format!("{t}.enabled"), self.enabled.name().into(), "THP at faults: always, madvise (VMAs advised MADV_HUGEPAGE), never");
        let defrag = Defrag::NAMES.iter().find(|(_, d)| *d == self.defrag).map_or("", |(n, _)| n);
        out.text(&format!("{t}.defrag"), defrag.into(), "Whether a THP fault may stall to compact memory");
        out.int(&format!("{t}.shrink_underused"), self.shrink_underused as u64, "Split THPs with more than max_ptes_none zero-filled pages under memory pressure");
        let kh = format!("{t}.khugepaged");
        for (n, x, d) in [
            ("defrag", self.khugepaged_defrag as u64, "khugepaged may compact to get a huge page"),
            ("max_ptes_none", self.max_ptes_none as u64, "Empty PTEs a range may have and still be collapsed"),
            ("max_ptes_swap", self.max_ptes_swap as u64, "PTEs on swap a range may have and still be collapsed"),
            ("max_ptes_shared", self.max_ptes_shared as u64, "Shared PTEs a range may have and still be collapsed"),
            ("pages_to_scan", self.pages_to_scan as u64, "PTEs khugepaged scans each time it wakes"),
            ("scan_sleep_millisecs", self.scan_sleep_ms as u64, "khugepaged's sleep between scans"),
            ("alloc_sleep_millisecs", self.alloc_sleep_ms as u64, "khugepaged's sleep after failing to get a huge page"),
            ("full_scans", self.full_scans, "khugepaged's complete passes over every eligible VMA"),
            ("pages_collapsed", self.pages_collapsed, "Huge pages khugepaged and MADV_COLLAPSE made"),
        ] {
            out.int(&format!("{kh}.{n}"), x, d);
        }
        let v = &self.vmstat;
        for (n, x, d) in [
            ("thp_fault_alloc", v.thp_fault_alloc, "THPs allocated at faults"),
            ("thp_fault_fallback", v.thp_fault_fallback, "Faults that wanted a THP and got base pages"),
            ("thp_collapse_alloc", v.thp_collapse_alloc, "THPs allocated for collapse"),
            ("thp_collapse_alloc_failed", v.thp_collapse_alloc_failed, "Collapses that found no huge page"),
            ("thp_split_page", v.thp_split_page, "THPs split into base pages"),
            ("thp_deferred_split_page", v.thp_deferred_split_page, "THPs partly unmapped, queued for splitting"),
            ("thp_underused_split_page", v.thp_underused_split_page, "THPs split by the shrinker for their zero-filled pages"),
            ("thp_scan_exceed_none_pte", v.thp_scan_exceed_none_pte, "Ranges khugepaged left for more than max_ptes_none empty PTEs"),
            ("thp_scan_exceed_swap_pte", v.thp_scan_exceed_swap_pte, "Ranges khugepaged left for more than max_ptes_swap PTEs on swap"),
            ("compact_stall", v.compact_stall, "Direct compactions"),
            ("compact_success", v.compact_success, "Direct compactions that freed a block"),
            ("compact_fail", v.compact_fail, "Direct compactions that did not"),
        ] {
            out.int(&format!("vmstat.{n}"), x, d);
        }
        // thp_split_pmd: the pmap's demotions of PMD-size mappings.
        let split_pmd = Self::pmd(k).and_then(|pmd| k.pmap.demotions(pmd.psind)).unwrap_or(0);
        out.int("vmstat.thp_split_pmd", split_pmd, "PMD mappings split into PTEs (the pmap's demotions)");
        for (&order, st) in &self.size_stats {
            let kb = Self::size_kb(k, order);
            let p = format!("{t}.hugepages-{kb}kB.stats");
            out.int(&format!("{p}.anon_fault_alloc"), st.anon_fault_alloc, "Blocks of this size allocated at faults");
            out.int(&format!("{p}.anon_fault_fallback"), st.anon_fault_fallback, "Faults that fell back from this size");
            out.int(&format!("{p}.split"), st.split, "Blocks of this size split");
        }
        for (&order, e) in &self.sizes {
            out.text(&format!("{t}.hugepages-{}kB.enabled", Self::size_kb(k, order)), e.name().into(), "mTHP size enabled: always, inherit, madvise, never");
        }
    }
}
