//! A program run `repeat` times in each of several page layouts, the runs
//! interleaved round robin as `suite` does for the built-in workloads (L1
//! L2 L3 L1 L2 L3 ...), after `warmup` runs of each that are not counted,
//! and summarised as hyperfine summarises commands: mean ± σ, median,
//! [min … max] of wall, user and system time; then each layout's speedup
//! over `4k` (the median over the rounds of the ratio within a round, as
//! `suite::round_speedups`, ± the standard deviation of those ratios), its
//! peak resident memory, and, for `promote`, the monitor's counters and
//! its CPU time.
//!
//! Figures come from finished runs only. A run is failed, with its reason,
//! and left out of every figure (times, speedups, memory, the monitor's
//! counters) when it was interrupted (splab got SIGINT or SIGTERM during
//! it), was killed by a signal, or exited with another status or wrote
//! another standard output (CRC-32) than the reference: what most of
//! 4k's finished runs did (of all layouts' where 4k did not run). A layout
//! with a run failed for any reason but an interruption has an `error`
//! naming the runs, and `splab native` exits 1.

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
    /// Runs counted in the figures (finished as the reference did), and
    /// runs failed (their `failed` says why).
    pub counted: u32,
    pub failed: u32,
    /// Runs of this layout that failed other than by an interruption: the
    /// layout's output or exit differs from the reference, or it was killed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
    /// The reference the runs are judged against: the exit status and
    /// standard output most of 4k's finished runs had, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Each failed run, with why, in words.
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
            // A signal between two runs (`sysstate::defer_signals`).
            if let Some(sig) = sysstate::received() {
                interrupted = Some(sysstate::signal_name(sig));
                break 'rounds;
            }
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
    let (reference, flags) = judge(&plan.layouts, &mut runs);
    let layouts = plan.layouts.iter().zip(setups).zip(runs).map(|((&p, s), r)| summarise(p, s, r)).collect::<Vec<_>>();
    let mut rep = ProgramsReport {
        command: prog.command_line(),
        program: prog.clone(),
        host,
        repeat: plan.repeat,
        warmup: plan.warmup,
        layouts,
        reference,
        flags,
        promote_target: None,
        hugetlb_pools,
        interrupted_by: interrupted,
    };
    compare(&mut rep);
    rep
}

/// What a run did that the reference is made of: its exit and its output.
type Outcome = (Exit, u32, u64);

fn outcome(r: &RunRecord) -> Outcome {
    (r.exit.clone(), r.stdout_crc32, r.stdout_bytes)
}

/// Whether a run ran to its own end: started, not interrupted, not
/// killed by a signal.
fn finished(r: &RunRecord) -> bool {
    r.interrupted_by.is_none() && matches!(r.exit, Exit::Code(_))
}

/// Marks each run that is not to be counted with why (`failed`), and
/// returns the reference in words and a line per failed run. The
/// reference is the outcome most of 4k's finished runs had (the earliest
/// of equally common ones), or of every layout's where 4k has none.
fn judge(layouts: &[Pages], runs: &mut [Vec<RunRecord>]) -> (Option<String>, Vec<String>) {
    let base = layouts.iter().position(|&p| p == Pages::FourK).filter(|&k| runs[k].iter().any(finished));
    let pool: Vec<&RunRecord> = match base {
        Some(k) => runs[k].iter().filter(|r| finished(r)).collect(),
        None => runs.iter().flatten().filter(|r| finished(r)).collect(),
    };
    let mut counts: Vec<(Outcome, usize)> = Vec::new();
    for r in &pool {
        let o = outcome(r);
        match counts.iter_mut().find(|(x, _)| *x == o) {
            Some(c) => c.1 += 1,
            None => counts.push((o, 1)),
        }
    }
    let best = counts.iter().map(|c| c.1).max().unwrap_or(0);
    let reference = counts.into_iter().find(|c| c.1 == best).map(|c| c.0);
    let whose = if base.is_some() { "4k's runs" } else { "most runs" };
    let mut flags = Vec::new();
    for (k, rs) in runs.iter_mut().enumerate() {
        for r in rs.iter_mut() {
            let why = if let Exit::NotStarted(e) = &r.exit {
                Some(format!("not started: {e}"))
            } else if let Some(sig) = r.interrupted_by {
                Some(format!("interrupted: splab got {} during this run ({})", sysstate::signal_name(sig), r.exit.text()))
            } else if let Exit::Signal(_) = r.exit {
                Some(r.exit.text())
            } else {
                match &reference {
                    Some((e, _, _)) if r.exit != *e => Some(format!("{} where {whose} had {}", r.exit.text(), e.text())),
                    Some((_, c, n)) if r.stdout_crc32 != *c => Some(format!(
                        "standard output differs: CRC-32 {} ({} bytes) where {whose} wrote {} ({n} bytes)",
                        crc_text(r.stdout_crc32),
                        r.stdout_bytes,
                        crc_text(*c)
                    )),
                    _ => None,
                }
            };
            if let Some(w) = &why {
                flags.push(format!("--pages {} round {}: {w}; left out of every figure", layouts[k], r.round + 1));
            }
            r.failed = why;
        }
    }
    let words = reference.map(|(e, c, n)| format!("{}, standard output CRC-32 {} ({n} bytes), as {whose} had", e.text(), crc_text(c)));
    (words, flags)
}

/// Runs of a layout that failed other than by an interruption or a
/// program that could not start, in words: the layout's error.
fn layout_error(runs: &[RunRecord]) -> Option<String> {
    let bad: Vec<String> = runs
        .iter()
        .filter(|r| r.failed.is_some() && r.interrupted_by.is_none() && !matches!(r.exit, Exit::NotStarted(_)))
        .map(|r| format!("round {}: {}", r.round + 1, r.failed.as_deref().unwrap_or("")))
        .collect();
    (!bad.is_empty()).then(|| format!("{} of {} runs failed ({})", bad.len(), runs.len(), bad.join("; ")))
}

fn summarise(pages: Pages, setup: Result<Setup, String>, runs: Vec<RunRecord>) -> LayoutResult {
    let (method, skip_reason) = match setup {
        Ok(s) => (s.method, None),
        Err(e) => (String::new(), Some(e)),
    };
    let counted: Vec<&RunRecord> = runs.iter().filter(|r| r.failed.is_none()).collect();
    let stat = |f: &dyn Fn(&RunRecord) -> f64| Stat::of(&counted.iter().map(|r| f(r)).collect::<Vec<_>>());
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
        let ps: Vec<(&RunRecord, &crate::promote::Counters)> = counted.iter().filter_map(|r| Some((*r, r.promote.as_ref()?))).collect();
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
        counted: counted.len() as u32,
        failed: (runs.len() - counted.len()) as u32,
        error: layout_error(&runs),
        exits,
        stdout_crc32: crcs,
        thp_fault_alloc: allocs,
        promote,
        runs,
    }
}

/// Per-round ratios `f(base) / f(other)` over the rounds in which both
/// have a counted run.
fn round_ratios(base: &[RunRecord], other: &[RunRecord], f: impl Fn(&RunRecord) -> f64) -> Vec<f64> {
    other
        .iter()
        .filter(|o| o.failed.is_none())
        .filter_map(|o| {
            let b = base.iter().find(|b| b.round == o.round && b.failed.is_none())?;
            let r = f(b) / f(o);
            r.is_finite().then_some(r)
        })
        .collect()
}

/// Speedups and RSS ratios over 4k, and the promote target.
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
