//! A native suite: one workload run `repeat` times in each of several
//! layouts, the repeats interleaved round robin (L1 L2 L3 L1 L2 L3 ...) so
//! that drift in the machine (other tenants, thermal state, page cache)
//! falls on every layout alike. Each run gets a fresh region; the layout it
//! really got is read back before the timed part and judged against the
//! one asked for. A layout that cannot be had is skipped with the reason
//! and the others still run.

use crate::hugetlb::{self, Counters, Pool};
use crate::pages::{Pages, SIZE_1G, SIZE_2M};
use crate::region::{thp_mode, Region};
use crate::smaps::Obtained;
use crate::{Figure, Native, Outcome};
use serde::{Deserialize, Serialize};

/// Median, quartiles and extremes of a set of measurements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub q1: f64,
    pub q3: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// None for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        // Linear interpolation between closest ranks.
        let q = |p: f64| {
            let x = p * (v.len() - 1) as f64;
            let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
        };
        Some(Spread { median: q(0.5), q1: q(0.25), q3: q(0.75), min: v[0], max: v[v.len() - 1] })
    }
}

/// One figure over a layout's runs.
#[derive(Clone, Debug, Serialize)]
pub struct FigureSummary {
    pub name: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub spread: Spread,
    /// How many times better than the 4k layout (above 1 is better,
    /// whichever way the figure runs): the median over the rounds of the
    /// speedup within each round (`round_speedups`); None without a 4k
    /// layout.
    pub speedup_vs_4k: Option<f64>,
}

/// One run of a layout.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// Round (0-based) it ran in.
    pub round: u32,
    pub obtained: Obtained,
    pub outcome: Outcome,
    /// The shares of their time on a CPU of the attempts taken again
    /// before this one (`ON_CPU_MIN`), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taken_again: Vec<f64>,
    /// The promotion monitor's counters (`promote`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promote: Option<crate::promote::Counters>,
}

/// A run whose thread was on a CPU for less than this share of its timed
/// time measured the host's other work as much as the workload (another
/// guest's, under a hypervisor): it is taken again, at once and in the same
/// region, up to `AGAIN_MAX` times, and the attempt with the largest share
/// is kept.
pub const ON_CPU_MIN: f64 = 0.9;
pub const AGAIN_MAX: usize = 2;

/// The share of its timed time an outcome's thread was on a CPU.
pub fn on_cpu(o: &Outcome) -> f64 {
    o.cpu_seconds / o.seconds.max(1e-12)
}

/// Keeps `first`, or, while the one kept was on a CPU for less than
/// `ON_CPU_MIN` of its time (`share`), takes up to `AGAIN_MAX` more from
/// `again` and keeps the one most on a CPU. Returns it and the shares of
/// those set aside, in order. Native runs and calibration samples alike.
pub fn most_on_cpu<T, E>(first: T, share: impl Fn(&T) -> f64, mut again: impl FnMut() -> Result<T, E>) -> Result<(T, Vec<f64>), E> {
    let mut kept = first;
    let mut aside = Vec::new();
    while share(&kept) < ON_CPU_MIN && aside.len() < AGAIN_MAX {
        let next = again()?;
        let set_aside = if share(&next) > share(&kept) { std::mem::replace(&mut kept, next) } else { next };
        aside.push(share(&set_aside));
    }
    Ok((kept, aside))
}

/// Everything about one layout.
#[derive(Clone, Debug, Serialize)]
pub struct LayoutReport {
    pub pages: Pages,
    /// "ran" or "skipped".
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    /// Bytes of the region (the working set rounded to the layout's page
    /// size).
    pub region_bytes: u64,
    /// Share of the region asked for in huge pages.
    pub huge_fraction_asked: f64,
    /// Whether every run got the layout asked for.
    pub as_asked: bool,
    /// What was obtained, in words, when it was not what was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortfall: Option<String>,
    /// Other things worth knowing about the setup.
    pub notes: Vec<String>,
    pub runs: Vec<Run>,
    /// Seconds of the timed part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<Spread>,
    /// Share of the timed wall time this thread was on a CPU: well below 1
    /// means other work on the host took the CPU, and the times are
    /// longer than the machine's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_cpu: Option<Spread>,
    /// Share of the region in huge pages, over the runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub huge_fraction: Option<Spread>,
    /// Runs that did not get the layout asked for.
    pub runs_short: u32,
    /// The headline figure first.
    pub figures: Vec<FigureSummary>,
}

impl LayoutReport {
    /// The run whose headline figure is the median (the lower middle one
    /// for an even count), for showing its report.
    pub fn median_run(&self) -> Option<&Run> {
        let mut v: Vec<&Run> = self.runs.iter().collect();
        v.sort_by(|a, b| a.outcome.figures[0].value.total_cmp(&b.outcome.figures[0].value));
        v.get(v.len().saturating_sub(1) / 2).copied()
    }
}

/// A hugetlb pool the suite grew, and what it was put back to.
#[derive(Clone, Debug, Serialize)]
pub struct PoolChange {
    pub page_bytes: u64,
    pub nr_before: u64,
    pub nr_during: u64,
    pub nr_after: u64,
}

/// What the host was.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Host {
    pub kernel: String,
    pub thp_enabled: Option<String>,
    pub thp_defrag: Option<String>,
    pub cpus: usize,
}

impl Host {
    pub fn read() -> Host {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into());
        Host {
            kernel,
            thp_enabled: thp_mode("enabled"),
            thp_defrag: thp_mode("defrag"),
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        }
    }
}

/// A whole suite.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteReport {
    pub workload: String,
    /// The workload's description of itself, e.g. `gups(2^27)`.
    pub detail: String,
    pub working_set_bytes: u64,
    pub repeat: u32,
    pub host: Host,
    pub layouts: Vec<LayoutReport>,
    pub hugetlb_pools: Vec<PoolChange>,
    /// The signal that stopped the runs early (`sysstate::defer_signals`),
    /// and the run it came during, left out of every figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_run: Option<String>,
}

/// The hugetlb pools' counters now, by page size.
pub fn pools_now() -> Vec<(u64, Option<Counters>)> {
    [SIZE_2M, SIZE_1G].iter().map(|&s| (s, hugetlb::counters(s).ok())).collect()
}

/// Puts back the pools `pool` grew and says what each was before (as
/// `pools_now` read it), during and after; the error names a pool left
/// changed.
pub fn pools_put_back(mut pool: Pool, before: &[(u64, Option<Counters>)]) -> Result<Vec<PoolChange>, String> {
    let restore = pool.restore();
    let changes = pool.changes.clone();
    drop(pool);
    restore.map_err(|e| format!("hugetlb pool not restored: {e}"))?;
    Ok(changes
        .iter()
        .map(|&(page, old, during)| PoolChange {
            page_bytes: page,
            nr_before: before.iter().find(|b| b.0 == page).and_then(|b| b.1).map(|c| c.nr).unwrap_or(old),
            nr_during: during,
            nr_after: hugetlb::counters(page).map(|c| c.nr).unwrap_or(u64::MAX),
        })
        .collect())
}

/// Whether `o` is the layout `p` asked for, over a region of `len` bytes;
/// the error says plainly what was got instead.
pub fn judge(p: Pages, o: &Obtained, len: u64, host: &Host) -> Result<(), String> {
    let pct = |b: u64| 100.0 * b as f64 / len.max(1) as f64;
    let thp = || format!("transparent_hugepage enabled={} defrag={}", host.thp_enabled.as_deref().unwrap_or("?"), host.thp_defrag.as_deref().unwrap_or("?"));
    if o.resident() < len * 99 / 100 {
        return Err(format!("only {:.1}% of the region is resident", pct(o.resident())));
    }
    match p {
        Pages::FourK if o.bytes_2m + o.bytes_1g > 0 => Err(format!("asked for 4 KB pages only, got {:.1}% in huge pages", pct(o.bytes_2m + o.bytes_1g))),
        Pages::Thp | Pages::Collapse | Pages::Promote if o.bytes_2m < len * 95 / 100 => Err(format!(
            "asked for all of it in 2 MB pages, got {:.1}%: THP fell back to 4 KB pages for {:.1}% ({})",
            pct(o.bytes_2m),
            pct(o.bytes_4k),
            thp()
        )),
        Pages::Hugetlb2m if o.bytes_2m_hugetlb < len => Err(format!("asked for hugetlb 2 MB pages, got {:.1}%", pct(o.bytes_2m_hugetlb))),
        Pages::Hugetlb1g if o.bytes_1g < len => Err(format!("asked for hugetlb 1 GB pages, got {:.1}%", pct(o.bytes_1g))),
        Pages::Mix(f) => {
            let chunks = (len / SIZE_2M).max(1) as f64;
            let want = (f * chunks).round() / chunks;
            let got = o.bytes_2m as f64 / len as f64;
            if (got - want).abs() > 0.02_f64.max(1.0 / chunks) {
                Err(format!("asked for {:.1}% in 2 MB pages, got {:.1}% ({})", want * 100.0, got * 100.0, thp()))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// How many times better `x` is than `base`, for a figure that is better
/// higher (or lower).
pub fn speedup(base: f64, x: f64, higher_is_better: bool) -> Option<f64> {
    let r = if higher_is_better { x / base } else { base / x };
    r.is_finite().then_some(r)
}

/// The speedup of `other` over `base` measured round by round: for each
/// round in which both ran, how many times better `other`'s `value` was
/// than `base`'s. The two runs of a round ran one after the other, so drift
/// in the machine over the minutes of a suite falls on both and cancels in
/// the ratio, where it does not in the ratio of two medians taken over
/// different rounds.
pub fn round_speedups(base: &[Run], other: &[Run], value: impl Fn(&Run) -> Option<f64>, higher_is_better: bool) -> Vec<f64> {
    other
        .iter()
        .filter_map(|o| {
            let b = base.iter().find(|b| b.round == o.round)?;
            speedup(value(b)?, value(o)?, higher_is_better)
        })
        .collect()
}

/// `round_speedups` of the timed seconds.
pub fn round_time_speedups(base: &[Run], other: &[Run]) -> Vec<f64> {
    round_speedups(base, other, |r| Some(r.outcome.seconds), false)
}

/// Summaries of each figure over `runs`.
fn summarise(runs: &[Run]) -> Vec<FigureSummary> {
    let Some(first) = runs.first() else { return Vec::new() };
    first
        .outcome
        .figures
        .iter()
        .enumerate()
        .filter_map(|(k, f): (usize, &Figure)| {
            let values: Vec<f64> = runs.iter().filter_map(|r| r.outcome.figures.get(k).map(|g| g.value)).collect();
            Some(FigureSummary {
                name: f.name.clone(),
                unit: f.unit.clone(),
                higher_is_better: f.higher_is_better,
                spread: Spread::of(&values)?,
                speedup_vs_4k: None,
            })
        })
        .collect()
}

/// Each layout's spreads, notes and figures from its runs, and the
/// figures' speedups over 4k.
fn summarise_layouts(reps: &mut [LayoutReport]) {
    for rep in reps.iter_mut() {
        if rep.runs.is_empty() {
            rep.status = "skipped";
            rep.as_asked = false;
            continue;
        }
        let secs: Vec<f64> = rep.runs.iter().map(|r| r.outcome.seconds).collect();
        rep.seconds = Spread::of(&secs);
        let shares: Vec<f64> = rep.runs.iter().map(|r| on_cpu(&r.outcome)).collect();
        rep.on_cpu = Spread::of(&shares);
        let again: Vec<&Run> = rep.runs.iter().filter(|r| !r.taken_again.is_empty()).collect();
        if !again.is_empty() {
            let attempts: usize = again.iter().map(|r| r.taken_again.len()).sum();
            let low = again.iter().flat_map(|r| r.taken_again.iter()).fold(1.0f64, |a, &b| a.min(b));
            rep.notes.push(format!(
                "{} of {} runs taken again ({attempts} attempt{} set aside, on a CPU for as little as {:.0}% of their time, under the {:.0}% a run must have)",
                again.len(),
                rep.runs.len(),
                if attempts == 1 { "" } else { "s" },
                100.0 * low,
                100.0 * ON_CPU_MIN
            ));
        }
        let huge: Vec<f64> = rep.runs.iter().map(|r| r.obtained.huge_fraction()).collect();
        rep.huge_fraction = Spread::of(&huge);
        rep.figures = summarise(&rep.runs);
    }
    let base: Option<Vec<Run>> = reps.iter().find(|r| r.pages == Pages::FourK && !r.runs.is_empty()).map(|r| r.runs.clone());
    if let Some(base) = base {
        for rep in reps.iter_mut() {
            for (k, f) in rep.figures.iter_mut().enumerate() {
                let rounds = round_speedups(&base, &rep.runs, |r| r.outcome.figures.get(k).map(|g| g.value), f.higher_is_better);
                f.speedup_vs_4k = Spread::of(&rounds).map(|s| s.median);
            }
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub layouts: Vec<Pages>,
    /// Runs per layout.
    pub repeat: u32,
    /// Whether the hugetlb pools may be grown (as root) for the run.
    pub grow_hugetlb: bool,
}

/// Runs `w` `plan.repeat` times in each layout, round robin. `progress` is
/// called before each run with (runs done, runs in all, layout). An error
/// is a run that failed (a check of the workload's results); layouts that
/// cannot be set up are skipped, not errors.
pub fn run(workload: &str, w: &dyn Native, plan: &Plan, progress: &mut dyn FnMut(u64, u64, &str)) -> Result<SuiteReport, String> {
    run_with(workload, w, plan, progress, &mut |_| {})
}

/// `run`, handing `snapshot` before each run the report of the runs that
/// finished so far, with `interrupted_run` naming the one about to start:
/// what to print if splab is stopped during it (`sysstate::on_interrupt`).
pub fn run_with(workload: &str, w: &dyn Native, plan: &Plan, progress: &mut dyn FnMut(u64, u64, &str), snapshot: &mut dyn FnMut(SuiteReport)) -> Result<SuiteReport, String> {
    let (layouts, repeat) = (&plan.layouts, plan.repeat);
    let host = Host::read();
    let bytes = w.bytes();
    let mut pool = Pool::new(plan.grow_hugetlb);
    let before = pools_now();
    let mut reps: Vec<LayoutReport> = layouts
        .iter()
        .map(|&p| LayoutReport {
            pages: p,
            status: "ran",
            skip_reason: None,
            region_bytes: bytes.max(1).div_ceil(p.granule()) * p.granule(),
            huge_fraction_asked: p.huge_fraction_asked(),
            as_asked: true,
            shortfall: None,
            notes: Vec::new(),
            runs: Vec::new(),
            seconds: None,
            on_cpu: None,
            huge_fraction: None,
            runs_short: 0,
            figures: Vec::new(),
        })
        .collect();
    let total = repeat as u64 * layouts.len() as u64;
    let mut done = 0;
    let (mut interrupted_by, mut interrupted_run) = (None, None);
    'rounds: for round in 0..repeat {
        for k in 0..reps.len() {
            if reps[k].skip_reason.is_some() {
                done += 1;
                continue;
            }
            if let Some(sig) = crate::sysstate::received() {
                interrupted_by = Some(crate::sysstate::signal_name(sig));
                break 'rounds;
            }
            progress(done, total, &reps[k].pages.to_string());
            done += 1;
            let mut layouts = reps.clone();
            for l in layouts.iter_mut().filter(|l| l.runs.is_empty() && l.skip_reason.is_none()) {
                l.skip_reason = Some("no run of it finished before splab was stopped".into());
            }
            summarise_layouts(&mut layouts);
            snapshot(SuiteReport {
                workload: workload.into(),
                detail: w.name(),
                working_set_bytes: bytes,
                repeat,
                host: host.clone(),
                layouts,
                hugetlb_pools: Vec::new(),
                interrupted_by: None,
                interrupted_run: Some(format!("--pages {} round {}: stopped by the signal; left out of every figure", reps[k].pages, round + 1)),
            });
            let rep = &mut reps[k];
            let mut region = match Region::new(bytes, rep.pages, &mut pool) {
                Ok(r) => r,
                Err(reason) => {
                    rep.skip_reason = Some(if rep.runs.is_empty() { reason } else { format!("after {} runs: {reason}", rep.runs.len()) });
                    continue;
                }
            };
            for n in region.notes.drain(..) {
                if !rep.notes.contains(&n) {
                    rep.notes.push(n);
                }
            }
            let obtained = region.obtained()?;
            if obtained.spills_over {
                let n = "a VMA of the region reaches outside it: the smaps counts include another mapping".to_string();
                if !rep.notes.contains(&n) {
                    rep.notes.push(n);
                }
            }
            if let Err(why) = judge(rep.pages, &obtained, region.len() as u64, &host) {
                rep.as_asked = false;
                rep.runs_short += 1;
                // The first shortfall; `runs_short` counts them all.
                if rep.shortfall.is_none() {
                    rep.shortfall = Some(format!("round {}: {why}", round + 1));
                }
            }
            let mut attempt = || w.run(&mut region).map_err(|e| format!("{} with --pages {}: {e}", w.name(), rep.pages));
            let first = attempt()?;
            let (outcome, taken_again) = most_on_cpu(first, on_cpu, attempt)?;
            let promote = region.stop_monitor();
            drop(region);
            if let Some(sig) = crate::sysstate::received() {
                // A run that a signal came during did not finish as asked.
                interrupted_by = Some(crate::sysstate::signal_name(sig));
                interrupted_run = Some(format!("--pages {} round {}: splab got {} during it; left out of every figure", rep.pages, round + 1, crate::sysstate::signal_name(sig)));
                break 'rounds;
            }
            rep.runs.push(Run { round, obtained, outcome, taken_again, promote });
        }
    }
    progress(total, total, "");
    let hugetlb_pools = pools_put_back(pool, &before)?;
    summarise_layouts(&mut reps);
    Ok(SuiteReport { workload: workload.into(), detail: w.name(), working_set_bytes: bytes, repeat, host, layouts: reps, hugetlb_pools, interrupted_by, interrupted_run })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host { kernel: "test".into(), thp_enabled: Some("madvise".into()), thp_defrag: Some("madvise".into()), cpus: 1 }
    }

    #[test]
    fn spreads() {
        let s = Spread::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.median, s.q1, s.q3, s.min, s.max), (3.0, 2.0, 4.0, 1.0, 5.0));
        assert_eq!(Spread::of(&[1.0, 2.0]).unwrap().median, 1.5);
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn round_speedups_pair_the_runs_of_a_round() {
        let run = |round, seconds| Run {
            round,
            obtained: Obtained::default(),
            outcome: Outcome { seconds, cpu_seconds: seconds, figures: Vec::new(), report: String::new() },
            taken_again: Vec::new(),
            promote: None,
        };
        // The machine slows down by half in round 1: both layouts see it.
        let base = [run(0, 2.0), run(1, 3.0), run(2, 2.0)];
        let other = [run(0, 1.0), run(1, 1.5), run(2, 1.0)];
        assert_eq!(round_time_speedups(&base, &other), vec![2.0, 2.0, 2.0]);
        // Medians over rounds would mix the slow round into one side only.
        let slow_other = [run(0, 1.0), run(1, 1.5), run(2, 1.5)];
        let base_med = Spread::of(&[2.0, 3.0, 2.0]).unwrap().median;
        let other_med = Spread::of(&[1.0, 1.5, 1.5]).unwrap().median;
        assert_eq!(base_med / other_med, 2.0 / 1.5);
        assert_eq!(round_time_speedups(&base, &slow_other), vec![2.0, 2.0, 2.0 / 1.5]);
        // A round the other layout did not run in is left out, as is a
        // round missing from the base.
        assert_eq!(round_time_speedups(&base[..2], &other), vec![2.0, 2.0]);
        assert_eq!(round_time_speedups(&base, &other[1..]), vec![2.0, 2.0]);
        assert_eq!(round_time_speedups(&[run(0, 1.0)], &[run(0, 0.0)]), Vec::<f64>::new());
        // A figure better higher (a rate: here the inverse of the time)
        // gives the same speedups; one the runs do not have gives none.
        let rate = |r: &Run| Some(1.0 / r.outcome.seconds);
        assert_eq!(round_speedups(&base, &other, rate, true), vec![2.0, 2.0, 2.0]);
        assert!(round_speedups(&base, &other, |r| r.outcome.figures.first().map(|f| f.value), true).is_empty());
    }

    /// A workload whose runs take the given (wall, CPU) seconds in turn.
    struct Scripted(std::cell::RefCell<Vec<(f64, f64)>>);

    impl Native for Scripted {
        fn name(&self) -> String {
            "scripted".into()
        }
        fn bytes(&self) -> u64 {
            1 << 16
        }
        fn run(&self, mem: &mut Region) -> Result<Outcome, String> {
            mem.doubles().fill(1.0);
            let (seconds, cpu_seconds) = self.0.borrow_mut().remove(0);
            Ok(Outcome { seconds, cpu_seconds, figures: Vec::new(), report: String::new() })
        }
    }

    #[test]
    fn runs_off_the_cpu_are_taken_again() {
        // Round 1 is fine; round 2's first attempt was on a CPU half its
        // time, the second 80 % (still too little), the third 95 %.
        // Round 3's first attempt was on a CPU 70 % of its time and the
        // two after it less: the first is kept after AGAIN_MAX more.
        let w = Scripted(std::cell::RefCell::new(vec![(1.0, 1.0), (2.0, 1.0), (1.25, 1.0), (1.05, 1.0), (1.2, 0.84), (2.0, 1.0), (4.0, 1.0)]));
        let plan = Plan { layouts: vec![Pages::FourK], repeat: 3, grow_hugetlb: false };
        let r = run("scripted", &w, &plan, &mut |_, _, _| {}).unwrap();
        assert!(w.0.borrow().is_empty(), "every scripted run was used");
        let runs = &r.layouts[0].runs;
        let secs: Vec<f64> = runs.iter().map(|r| r.outcome.seconds).collect();
        assert_eq!(secs, vec![1.0, 1.05, 1.2]);
        assert_eq!(runs[0].taken_again, Vec::<f64>::new());
        assert_eq!(runs[1].taken_again, vec![0.5, 0.8]);
        assert_eq!(runs[2].taken_again, vec![0.5, 0.25]);
        let note = r.layouts[0].notes.iter().find(|n| n.contains("taken again")).expect("a note");
        assert!(note.starts_with("2 of 3 runs taken again (4 attempts"), "{note}");
        assert!(note.contains("as little as 25%"), "{note}");
    }

    /// Before each run the snapshot holds the runs that finished, summed
    /// up, and names the run about to start: what an interrupted splab
    /// prints.
    #[test]
    fn snapshots_hold_the_finished_runs_and_name_the_next() {
        let w = Scripted(std::cell::RefCell::new(vec![(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]));
        let plan = Plan { layouts: vec![Pages::FourK], repeat: 3, grow_hugetlb: false };
        let mut snaps = Vec::new();
        run_with("scripted", &w, &plan, &mut |_, _, _| {}, &mut |s| snaps.push(s)).unwrap();
        assert_eq!(snaps.len(), 3);
        assert!(snaps[0].layouts[0].runs.is_empty() && snaps[0].layouts[0].skip_reason.as_deref().unwrap().contains("before splab was stopped"));
        let last = &snaps[2];
        assert_eq!(last.layouts[0].runs.len(), 2);
        assert_eq!(last.layouts[0].seconds.as_ref().unwrap().max, 2.0, "only the finished runs");
        assert_eq!(last.interrupted_run.as_deref(), Some("--pages 4k round 3: stopped by the signal; left out of every figure"));
    }

    #[test]
    fn speedups_follow_the_direction_of_the_figure() {
        assert_eq!(speedup(2.0, 4.0, true), Some(2.0));
        assert_eq!(speedup(100.0, 50.0, false), Some(2.0));
        assert_eq!(speedup(0.0, 1.0, true), None);
    }

    #[test]
    fn judging_layouts() {
        let mb = 1u64 << 20;
        let len = 64 * mb;
        let thp = Obtained { bytes_2m: len, ..Default::default() };
        let base = Obtained { bytes_4k: len, ..Default::default() };
        assert!(judge(Pages::Thp, &thp, len, &host()).is_ok());
        let e = judge(Pages::Thp, &base, len, &host()).unwrap_err();
        assert!(e.contains("fell back to 4 KB"), "{e}");
        assert!(judge(Pages::FourK, &base, len, &host()).is_ok());
        assert!(judge(Pages::FourK, &thp, len, &host()).is_err());
        let half = Obtained { bytes_2m: len / 2, bytes_4k: len / 2, ..Default::default() };
        assert!(judge(Pages::Mix(0.5), &half, len, &host()).is_ok());
        assert!(judge(Pages::Mix(0.25), &half, len, &host()).is_err());
        // THP is not hugetlb.
        assert!(judge(Pages::Hugetlb2m, &thp, len, &host()).is_err());
        let g = Obtained { bytes_1g: 1 << 30, ..Default::default() };
        assert!(judge(Pages::Hugetlb1g, &g, 1 << 30, &host()).is_ok());
        let none = Obtained::default();
        assert!(judge(Pages::FourK, &none, len, &host()).unwrap_err().contains("resident"));
    }
}
