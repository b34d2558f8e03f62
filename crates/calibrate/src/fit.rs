//! The second-level TLB fitted to the whole 4 KB-page curve with the
//! model's own TLB, and the ways a TLB array is written with.

use crate::measure::Calibration;
use crate::profile::Base;
use crate::{cpu, infer};
use splab_hw::tlb::{self, TlbArrayConfig, TlbIndex};

/// Fits the second-level 4 KB TLB to the whole 4 KB-page curve with the
/// model's own TLB (`infer::fit_stlb` over `tlb::sweep`): candidates of
/// 256 to 4096 entries in steps of eight sets, each with the modulo and
/// the hashed index, over the curve from four times the first step (past
/// the first level) to 8192 pages (past that the walks slow as page
/// tables leave the caches, which the fit does not model). Where it fits,
/// its entries and hit cost replace the step finder's, and the first
/// level's entries are read against that hit cost.
pub fn second_level(c: &mut Calibration, b: &Base) {
    let base = &b.profile;
    let t = &mut c.tlb;
    let Some(l2) = base.tlb.iter().find(|a| a.level == 2 && a.sizes.iter().any(|s| s == "4K")) else { return };
    let Some(l1) = base.tlb.iter().find(|a| a.level == 1 && a.sizes.iter().any(|s| s == "4K")) else { return };
    let Some(first) = t.steps_4k.first().map(|e| e.capacity_x) else { return };
    let ways = tlb_ways(l2.entries, l2, &c.cpuid_tlbs, b).0.max(1);
    let l1_entries = t.l1_4k_entries.map_or(l1.entries, |e| e as usize);
    let l1_ways = if l1.ways > 0 && l1_entries.is_multiple_of(l1.ways) { l1.ways } else { l1_entries };
    let l1_cfg = TlbArrayConfig { sizes: vec!["4K".into()], entries: l1_entries, ways: l1_ways, level: 1, index: TlbIndex::Modulo, side: None };
    let step = ways * 8;
    let cands: Vec<(u64, bool)> = (1..).map(|k| k * step).skip_while(|&e| e < 256).take_while(|&e| e <= 4096).flat_map(|e| [(e as u64, false), (e as u64, true)]).collect();
    let shares = |entries: u64, hashed: bool, pages: u64| -> (f64, f64) {
        let index = if hashed { TlbIndex::Hashed } else { TlbIndex::Modulo };
        let cfgs = [l1_cfg.clone(), TlbArrayConfig { sizes: vec!["4K".into()], entries: entries as usize, ways, level: 2, index, side: None }];
        tlb::sweep(&cfgs, pages, pages).map_or((f64::NAN, f64::NAN), |s| (s.l2, s.miss))
    };
    let Some(mut fit) = infer::fit_stlb(&t.pages_4k, 4.0 * first, 8192.0, &cands, shares) else { return };
    fit.ways = ways as u64;
    t.l2_entries = Some(fit.entries);
    t.stlb_hit_ns = Some(fit.hit_ns).filter(|&ns| ns > 0.0 && ns < 20.0);
    if let Some(e) = infer::l1_entries_below(&t.pages_4k, fit.hit_ns) {
        t.l1_4k_entries = Some(e as u64);
    }
    t.stlb_fit = Some(fit);
}

/// Ways for a TLB array of `entries` entries: CPUID leaf 0x18's for an
/// array of that level and size with as many entries, else the base's when
/// they divide the entries, else the largest power of two up to 16 that
/// does.
pub(crate) fn tlb_ways(entries: usize, arr: &TlbArrayConfig, leaves: &[cpu::TlbLeaf], b: &Base) -> (usize, String) {
    let kinds = ["data", "unified", "load"];
    if let Some(l) = leaves.iter().find(|l| l.level == arr.level && kinds.contains(&l.kind.as_str()) && l.entries as usize == entries && arr.sizes.iter().any(|s| l.sizes.contains(s))) {
        let w = if l.fully_associative { entries } else { l.ways as usize };
        if w > 0 && entries.is_multiple_of(w) {
            return (w, format!("CPUID leaf 0x18 ({} entries{})", l.entries, if l.fully_associative { ", fully associative" } else { "" }));
        }
    }
    if arr.ways > 0 && entries.is_multiple_of(arr.ways) {
        return (arr.ways, b.not_measured());
    }
    let w = (0..=4).rev().map(|k| 1usize << k).find(|&w| entries.is_multiple_of(w)).unwrap_or(1);
    (w, format!("not measured: the largest power of two up to 16 dividing {entries}"))
}

