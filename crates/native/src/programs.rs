//! A program run `repeat` times in each of several page layouts, the runs
//! interleaved round robin as `suite` does for the built-in workloads (L1
//! L2 L3 L1 L2 L3 ...), after `warmup` runs of each that are not counted,
//! and summarised as hyperfine summarises commands: mean ± σ, median,
//! [min … max] of wall, user and system time; then each layout's speedup
//! over `4k` (the median over the rounds of the ratio within a round, as
//! `suite::round_speedups`, ± the standard deviation of those ratios), its
//! peak resident memory, and, for `promote`, the monitor's counters and
//! its CPU time. Runs whose exit status or standard-output checksum
//! differ from the first run's are flagged.

use crate::hugetlb::Pool;
use crate::pages::Pages;
use crate::program::{self, Exit, Program, RunOpts, RunRecord, Setup};
use crate::suite::{self, Host, PoolChange, Spread};
use crate::sysstate;
use serde::Serialize;
use std::collections::BTreeMap;

/// Mean, standard deviation (n - 1, as hyperfine), median and extremes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stat {
    pub mean: f64,
    pub stddev: f64,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stat {
    pub fn of(v: &[f64]) -> Option<Stat> {
        let s = Spread::of(v)?;
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let stddev = if v.len() > 1 { (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { 0.0 };
        Some(Stat { mean, stddev, median: s.median, min: s.min, max: s.max })
    }
}

/// What the promotion monitor did over a layout's runs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PromoteSummary {
    /// vm.pmap.pde.promotions, median over the runs.
    pub promotions: f64,
    /// vm.pmap.pde.p_failures, median over the runs.
    pub p_failures: f64,
    /// Failures by reason, summed over the runs.
    pub failure_reasons: BTreeMap<String, u64>,
    pub not_exclusive: u64,
    /// Monitor CPU seconds, median; of them scanning and collapsing.
    pub cpu_seconds: f64,
    pub scan_cpu_seconds: f64,
    pub collapse_cpu_seconds: f64,
    /// Monitor CPU over the program's (user + system), median over runs.
    pub cpu_share: f64,
    pub scanner: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gave_up: Option<String>,
}

/// Everything about one layout.
#[derive(Clone, Debug, Serialize)]
pub struct LayoutResult {
    pub pages: Pages,
    /// "ran" or "skipped".
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    /// How the layout was had, in words.
    pub method: String,
    pub runs: Vec<RunRecord>,
    pub wall: Option<Stat>,
    pub user: Option<Stat>,
    pub sys: Option<Stat>,
    /// Largest resident set of one process (ru_maxrss), bytes.
    pub peak_rss: Option<Stat>,
    /// Largest sampled sums over the tree.
    pub tree_rss: Option<Stat>,
    pub anon_huge: Option<Stat>,
    pub hugetlb: Option<Stat>,
    /// Speedup of wall time over 4k: median of the per-round ratios.
    pub speedup_vs_4k: Option<Stat>,
    /// The same for CPU time (user + system): steadier than wall time
    /// when other work on the host takes the CPUs, though it misses what
    /// a layout saves in waiting.
    pub cpu_speedup_vs_4k: Option<Stat>,
    /// Peak RSS over 4k's: per-round ratios.
    pub rss_vs_4k: Option<Stat>,
    /// Exit statuses seen, in words, with how many runs had each.
    pub exits: BTreeMap<String, u32>,
    /// Standard-output checksums seen (CRC-32, hex), with counts.
    pub stdout_crc32: BTreeMap<String, u32>,
    /// Sum over the runs of THP fault allocations by size (system-wide).
    pub thp_fault_alloc: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promote: Option<PromoteSummary>,
}

/// The promote target, from the medians.
#[derive(Clone, Debug, Serialize)]
pub struct PromoteTarget {
    pub thp_speedup: f64,
    pub promote_speedup: f64,
    /// (promote speedup - 1) / (thp speedup - 1): the share of thp's gain
    /// over 4k that promote got; None when thp gained nothing.
    pub share_of_thp_gain: Option<f64>,
    /// The same from CPU time (user + system).
    pub thp_cpu_speedup: f64,
    pub promote_cpu_speedup: f64,
    pub cpu_share_of_thp_gain: Option<f64>,
    /// promote's peak RSS over 4k's (median of per-round ratios).
    pub rss_ratio: f64,
    /// Monitor CPU over the program's CPU (median over runs).
    pub monitor_cpu_share: f64,
    /// Targets: share >= 0.9, RSS ratio <= 1.05, monitor share <= 0.02.
    pub speed_met: bool,
    pub rss_met: bool,
    pub cpu_met: bool,
}

/// A whole comparison.
#[derive(Clone, Debug, Serialize)]
pub struct ProgramsReport {
    pub program: Program,
    pub command: String,
    pub host: Host,
    pub repeat: u32,
    pub warmup: u32,
    pub layouts: Vec<LayoutResult>,
    /// Differences in exit status or output between runs, in words.
    pub flags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promote_target: Option<PromoteTarget>,
    pub hugetlb_pools: Vec<PoolChange>,
    /// The signal that stopped the runs early, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub layouts: Vec<Pages>,
    pub repeat: u32,
    pub warmup: u32,
    pub grow_hugetlb: bool,
    pub opts: RunOpts,
}

fn crc_text(c: u32) -> String {
    format!("{c:08x}")
}

/// Runs `prog` as `plan` says. `progress` is called before each run with
/// (runs done, runs in all, layout).
pub fn run(prog: &Program, plan: &Plan, progress: &mut dyn FnMut(u64, u64, &str)) -> ProgramsReport {
    let host = Host::read();
    let mut pool = Pool::new(plan.grow_hugetlb);
    let before = suite::pools_now();
    let mut setups: Vec<Result<Setup, String>> = plan.layouts.iter().map(|&p| Setup::new(p)).collect();
    let mut runs: Vec<Vec<RunRecord>> = vec![Vec::new(); plan.layouts.len()];
    let total = (plan.repeat + plan.warmup) as u64 * plan.layouts.len() as u64;
    let mut done = 0;
    let mut opts = plan.opts.clone();
    let mut interrupted = None;
    'rounds: for round in 0..plan.warmup + plan.repeat {
        for (k, setup) in setups.iter_mut().enumerate() {
            done += 1;
            let Ok(s) = setup.as_ref() else { continue };
            progress(done - 1, total, &s.pages.to_string());
            // hugetlb pages for the largest resident set seen so far, with
            // a quarter more (1 GB before any run has been seen).
            let seen = runs.iter().flatten().map(|r| r.peak_rss).max().unwrap_or(0);
            if seen > 0 {
                opts.hugetlb_bytes = seen + seen / 4 + (16 << 20);
            }
            match program::run(prog, s, round.saturating_sub(plan.warmup), &opts, &mut pool) {
                Ok(r) => {
                    let stop = r.interrupted_by;
                    if round >= plan.warmup {
                        runs[k].push(r);
                    }
                    if let Some(sig) = stop {
                        interrupted = Some(sysstate::signal_name(sig));
                        break 'rounds;
                    }
                }
                Err(e) => {
                    let n = runs[k].len();
                    *setup = Err(if n == 0 { e } else { format!("after {n} runs: {e}") });
                }
            }
        }
    }
    progress(total, total, "");
    let hugetlb_pools = suite::pools_put_back(pool, &before).unwrap_or_else(|e| {
        eprintln!("splab: {e}");
        Vec::new()
    });
    let layouts = plan.layouts.iter().zip(setups).zip(runs).map(|((&p, s), r)| summarise(p, s, r)).collect::<Vec<_>>();
    let mut rep = ProgramsReport {
        command: prog.command_line(),
        program: prog.clone(),
        host,
        repeat: plan.repeat,
        warmup: plan.warmup,
        layouts,
        flags: Vec::new(),
        promote_target: None,
        hugetlb_pools,
        interrupted_by: interrupted,
    };
    compare(&mut rep);
    rep
}

fn summarise(pages: Pages, setup: Result<Setup, String>, runs: Vec<RunRecord>) -> LayoutResult {
    let (method, skip_reason) = match setup {
        Ok(s) => (s.method, None),
        Err(e) => (String::new(), Some(e)),
    };
    let stat = |f: &dyn Fn(&RunRecord) -> f64| Stat::of(&runs.iter().filter(|r| !matches!(r.exit, Exit::NotStarted(_))).map(f).collect::<Vec<_>>());
    let mut exits = BTreeMap::new();
    let mut crcs = BTreeMap::new();
    let mut allocs: BTreeMap<String, u64> = BTreeMap::new();
    for r in &runs {
        *exits.entry(r.exit.text()).or_insert(0) += 1;
        *crcs.entry(crc_text(r.stdout_crc32)).or_insert(0) += 1;
        for (k, v) in &r.thp_fault_alloc {
            *allocs.entry(k.clone()).or_default() += v;
        }
    }
    let promote = {
        let ps: Vec<(&RunRecord, &crate::promote::Counters)> = runs.iter().filter_map(|r| Some((r, r.promote.as_ref()?))).collect();
        (!ps.is_empty()).then(|| {
            let med = |f: &dyn Fn(&(&RunRecord, &crate::promote::Counters)) -> f64| Spread::of(&ps.iter().map(f).collect::<Vec<_>>()).map_or(0.0, |s| s.median);
            let mut reasons = BTreeMap::new();
            for (_, c) in &ps {
                for (k, v) in &c.failure_reasons {
                    *reasons.entry(k.clone()).or_insert(0) += v;
                }
            }
            PromoteSummary {
                promotions: med(&|p| p.1.promotions as f64),
                p_failures: med(&|p| p.1.p_failures as f64),
                failure_reasons: reasons,
                not_exclusive: ps.iter().map(|p| p.1.not_exclusive).sum(),
                cpu_seconds: med(&|p| p.1.cpu_seconds),
                scan_cpu_seconds: med(&|p| p.1.scan_cpu_seconds),
                collapse_cpu_seconds: med(&|p| p.1.collapse_cpu_seconds),
                cpu_share: med(&|p| p.1.cpu_seconds / (p.0.user + p.0.sys).max(1e-9)),
                scanner: ps[0].1.scanner.clone(),
                gave_up: ps.iter().find_map(|p| p.1.gave_up.clone()),
            }
        })
    };
    LayoutResult {
        pages,
        status: if runs.is_empty() { "skipped" } else { "ran" },
        skip_reason,
        method,
        wall: stat(&|r| r.wall),
        user: stat(&|r| r.user),
        sys: stat(&|r| r.sys),
        peak_rss: stat(&|r| r.peak_rss as f64),
        tree_rss: stat(&|r| r.sampled.rss as f64),
        anon_huge: stat(&|r| r.sampled.anon_huge as f64),
        hugetlb: stat(&|r| r.sampled.hugetlb as f64),
        speedup_vs_4k: None,
        cpu_speedup_vs_4k: None,
        rss_vs_4k: None,
        exits,
        stdout_crc32: crcs,
        thp_fault_alloc: allocs,
        promote,
        runs,
    }
}

/// Per-round ratios `f(base) / f(other)` over the rounds both ran.
fn round_ratios(base: &[RunRecord], other: &[RunRecord], f: impl Fn(&RunRecord) -> f64) -> Vec<f64> {
    other
        .iter()
        .filter_map(|o| {
            let b = base.iter().find(|b| b.round == o.round)?;
            let r = f(b) / f(o);
            r.is_finite().then_some(r)
        })
        .collect()
}

/// Speedups and RSS ratios over 4k, the promote target, and the flags.
fn compare(rep: &mut ProgramsReport) {
    let base: Option<Vec<RunRecord>> = rep.layouts.iter().find(|l| l.pages == Pages::FourK && !l.runs.is_empty()).map(|l| l.runs.clone());
    if let Some(base) = &base {
        for l in rep.layouts.iter_mut() {
            l.speedup_vs_4k = Stat::of(&round_ratios(base, &l.runs, |r| r.wall));
            l.cpu_speedup_vs_4k = Stat::of(&round_ratios(base, &l.runs, |r| r.user + r.sys));
            l.rss_vs_4k = Stat::of(&round_ratios(&l.runs, base, |r| r.peak_rss as f64));
        }
    }
    let find = |p: Pages| rep.layouts.iter().find(|l| l.pages == p && !l.runs.is_empty());
    if let (Some(thp), Some(pro)) = (find(Pages::Thp), find(Pages::Promote)) {
        if let (Some(st), Some(sp), Some(rss), Some(ps), Some(ct), Some(cp)) = (&thp.speedup_vs_4k, &pro.speedup_vs_4k, &pro.rss_vs_4k, &pro.promote, &thp.cpu_speedup_vs_4k, &pro.cpu_speedup_vs_4k) {
            let share = (st.median > 1.0).then(|| (sp.median - 1.0) / (st.median - 1.0));
            let cpu_share = (ct.median > 1.0).then(|| (cp.median - 1.0) / (ct.median - 1.0));
            rep.promote_target = Some(PromoteTarget {
                thp_speedup: st.median,
                promote_speedup: sp.median,
                share_of_thp_gain: share,
                thp_cpu_speedup: ct.median,
                promote_cpu_speedup: cp.median,
                cpu_share_of_thp_gain: cpu_share,
                rss_ratio: rss.median,
                monitor_cpu_share: ps.cpu_share,
                speed_met: share.is_none_or(|s| s >= 0.9),
                rss_met: rss.median <= 1.05,
                cpu_met: ps.cpu_share <= 0.02,
            });
        }
    }
    // Exit status and output against the first run of all.
    let first = rep.layouts.iter().find_map(|l| l.runs.first().map(|r| (l.pages, r.exit.clone(), r.stdout_crc32)));
    if let Some((p0, e0, c0)) = first {
        for l in &rep.layouts {
            let odd_exit: Vec<&RunRecord> = l.runs.iter().filter(|r| r.exit != e0).collect();
            if let Some(r) = odd_exit.first() {
                rep.flags.push(format!("exit status differs: --pages {} round {}: {} where the first run ({p0}) had {}", l.pages, r.round + 1, r.exit.text(), e0.text()));
            }
            let odd_out: Vec<&RunRecord> = l.runs.iter().filter(|r| r.stdout_crc32 != c0).collect();
            if let Some(r) = odd_out.first() {
                rep.flags.push(format!(
                    "standard output differs: --pages {} round {}: CRC-32 {} ({} bytes) where the first run ({p0}) had {} ({} of {} runs of {} differ)",
                    l.pages,
                    r.round + 1,
                    crc_text(r.stdout_crc32),
                    r.stdout_bytes,
                    crc_text(c0),
                    odd_out.len(),
                    l.runs.len(),
                    l.pages
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_as_hyperfine() {
        let s = Stat::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((s.mean, s.median, s.min, s.max), (2.5, 2.5, 1.0, 4.0));
        assert!((s.stddev - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(Stat::of(&[7.0]).unwrap().stddev, 0.0);
        assert!(Stat::of(&[]).is_none());
    }
}
