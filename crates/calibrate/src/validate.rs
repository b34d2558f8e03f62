//! Validation: the model's predictions set beside the machine. Each
//! workload runs natively on this host in each page layout (repeats
//! interleaved, medians), and is simulated with the same sizes and the
//! same layout, chunk for chunk, on a machine profile of this host (as
//! calibration writes it from microbenchmarks only, so the profile has
//! never seen these runs). The report gives measured and predicted times,
//! measured and predicted speedups over all-4 KB pages, and the errors;
//! then the mean and largest errors.
//!
//! What runs is the front end's (`Runner`): it builds a workload from its
//! options and runs it natively or in the model. This module plans the
//! runs (`Setup`), reads the host's memory around each workload's native
//! runs and moves the profile by it, pairs each layout's native runs with
//! its prediction and scores them (`run`), and writes the text report.

use crate::reference;
use serde::{Deserialize, Serialize};
use splab_defs::workload::Side;
use splab_defs::{WorkloadKind, WorkloadParams};
use splab_hw::profile::{Profile, Reference};
use splab_native::hugetlb::Pool;
use splab_native::pages::Pages;
use splab_native::region::Region;
use splab_native::suite::{self, Plan, Spread, SuiteReport};
use std::fmt::Write as _;

/// The host's memory around one workload's native runs, against the
/// calibration's (`[reference]`).
#[derive(Clone, Debug, Serialize)]
pub struct MemoryMoved {
    pub workload: String,
    pub calibrated: Reference,
    pub before: Reference,
    pub after: Reference,
    /// The median of before and after.
    pub now: Reference,
    /// Now over the calibration's:
    /// memory latency, overlapped random loads, streaming.
    pub ratios: [f64; 3],
    /// Whether the model ran on the profile moved by these.
    pub applied: bool,
}


/// One layout as both sides name it: `native` for the host, `sim` as
/// the model's `--pages` takes it.
#[derive(Clone, Debug)]
pub struct Layout {
    pub name: String,
    pub native: Pages,
    pub sim: String,
}

impl Layout {
    /// `4k`, `2m` or `mix:F`: the layouts both the host and the model can
    /// have.
    pub fn parse(text: &str) -> Result<Layout, String> {
        let t = text.trim();
        let (native, sim) = match t {
            "4k" => (Pages::FourK, "4k".to_string()),
            "2m" => (Pages::Thp, "2m".to_string()),
            other => match Pages::parse(other)? {
                Pages::Mix(f) => (Pages::Mix(f), format!("mix:{f}")),
                _ => return Err(format!("--layouts {other:?}: expected 4k, 2m or mix:F (the layouts both the host and the model can have)")),
            },
        };
        Ok(Layout { name: t.to_string(), native, sim })
    }
}

/// The workloads validation knows.
pub const WORKLOADS: &[WorkloadKind] = &[WorkloadKind::Gups, WorkloadKind::Lat, WorkloadKind::Stream, WorkloadKind::Index, WorkloadKind::Transpose];

/// The parameters that size `workload` alike natively and in the model:
/// large enough that a 4 KB layout misses in the host's TLBs, small enough
/// that the whole validation runs in minutes.
pub fn params(workload: WorkloadKind, quick: bool) -> Result<WorkloadParams, String> {
    let mut p = WorkloadParams::default();
    let s = |t: &str| Some(t.to_string());
    match (workload, quick) {
        (WorkloadKind::Gups, false) => p.log2_table = Some(24),
        (WorkloadKind::Gups, true) => p.log2_table = Some(20),
        (WorkloadKind::Lat, false) => (p.max_size, p.stride, p.pattern, p.loads) = (s("256M"), Some(vec![64]), s("random"), Some(200_000)),
        (WorkloadKind::Lat, true) => (p.max_size, p.stride, p.pattern, p.loads) = (s("16M"), Some(vec![64]), s("random"), Some(20_000)),
        (WorkloadKind::Stream, false) => (p.n, p.ntimes) = (Some(4_000_000), Some(5)),
        (WorkloadKind::Stream, true) => (p.n, p.ntimes) = (Some(200_000), Some(2)),
        (WorkloadKind::Index, false) => (p.scale, p.transactions) = (Some(20), Some(200_000)),
        (WorkloadKind::Index, true) => (p.scale, p.transactions) = (Some(2), Some(5000)),
        (WorkloadKind::Transpose, false) => p.sizes = Some(vec![3000]),
        (WorkloadKind::Transpose, true) => p.sizes = Some(vec![300]),
        (other, _) => return Err(format!("--workloads {other}: expected {}", known())),
    }
    Ok(p)
}

fn known() -> String {
    WORKLOADS.iter().map(|w| w.name()).collect::<Vec<_>>().join(", ")
}

/// What to validate: the workloads, each in every layout, the native
/// runs repeated; checked before anything runs.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The profile predicted with, as the user named it (reported).
    pub machine: String,
    pub workloads: Vec<WorkloadKind>,
    /// The first is 4k: speedups are over it.
    pub layouts: Vec<Layout>,
    /// Native runs per layout, interleaved across the layouts.
    pub repeat: u32,
    /// `--quick` sizes (reported; the runner sizes the workloads).
    pub quick: bool,
    /// Predict on the profile as calibrated, without reading how far the
    /// host's memory moved since.
    pub as_calibrated: bool,
}

impl Setup {
    /// Errors name the bad value as the command line gives it
    /// (`--layouts`, `--repeat`, `--workloads`).
    pub fn new(machine: &str, workloads: &[String], layouts: &[String], repeat: u32, quick: bool, as_calibrated: bool) -> Result<Setup, String> {
        let parsed: Vec<Layout> = layouts.iter().map(|l| Layout::parse(l)).collect::<Result<_, _>>()?;
        if parsed.first().map(|l| l.name.as_str()) != Some("4k") {
            return Err(format!("--layouts {:?}: the first layout must be 4k (speedups are over it)", layouts.join(",")));
        }
        if !(1..=100).contains(&repeat) {
            return Err(format!("--repeat {repeat} is out of range (1 to 100)"));
        }
        if workloads.is_empty() {
            return Err(format!("--workloads: name at least one of {}", known()));
        }
        let mut kinds = Vec::new();
        for w in workloads {
            let kind = WorkloadKind::parse(w, Side::Native).ok().filter(|k| WORKLOADS.contains(k)).ok_or_else(|| format!("--workloads {w:?}: expected {}", known()))?;
            kinds.push(kind);
        }
        Ok(Setup { machine: machine.to_string(), workloads: kinds, layouts: parsed, repeat, quick, as_calibrated })
    }

    /// The runs `run` reports progress in: every native run and every
    /// simulation.
    pub fn runs(&self) -> u64 {
        self.workloads.len() as u64 * self.layouts.len() as u64 * (self.repeat as u64 + 1)
    }
}

/// What the model predicted for one workload in one layout.
#[derive(Clone, Debug)]
pub struct Prediction {
    /// Simulated seconds of the workload's timed part.
    pub seconds: f64,
    /// Share of its region in promoted 2 MB pages, where the workload
    /// laid it out by layout.
    pub huge_fraction: Option<f64>,
}

/// The front end's part: building a workload and running it, natively
/// and in the model.
pub trait Runner {
    type Error;
    /// Runs `workload` natively in every layout of `plan`, interleaved
    /// (`suite::run`), telling `progress` how many runs are done.
    fn measure(&mut self, workload: WorkloadKind, plan: &Plan, progress: &mut dyn FnMut(u64)) -> Result<SuiteReport, Self::Error>;
    /// Simulates `workload` laid out as `layout` on `profile`.
    fn predict(&mut self, workload: WorkloadKind, layout: &Layout, profile: &Profile) -> Result<Prediction, Self::Error>;
}

/// Why a validation stopped: the runner failed, or the memory probes did.
#[derive(Debug)]
pub enum Error<E> {
    Runner(E),
    Memory(String),
}

/// One workload in one layout.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub workload: String,
    pub layout: String,
    /// Native timed seconds over the repeats; None when the host could not
    /// give the layout.
    pub measured: Option<Spread>,
    /// Share of the native region in 2 MB pages (median run).
    pub measured_huge_fraction: Option<f64>,
    pub skip_reason: Option<String>,
    /// Simulated seconds of the same timed part.
    pub predicted_seconds: f64,
    /// Share of the simulated region in promoted 2 MB pages.
    pub predicted_huge_fraction: Option<f64>,
    /// The speedup over 4k measured in each round (the 4k run's seconds
    /// over this layout's run of the same round); empty for the 4k row.
    #[serde(skip)]
    pub round_speedups: Vec<f64>,
    /// Median over the rounds of the speedup measured in each (1 for the
    /// 4k row).
    pub measured_speedup: Option<f64>,
    /// The same rounds' speedups: median, quartiles and extremes.
    pub measured_speedup_spread: Option<Spread>,
    pub predicted_speedup: Option<f64>,
    /// predicted / measured - 1, for the speedup and for the time.
    pub speedup_error: Option<f64>,
    pub time_error: Option<f64>,
    /// Whether the predicted speedup lies between the smallest and the
    /// largest speedup measured in one round.
    pub speedup_within_rounds: Option<bool>,
}

/// Means and maxima of the absolute errors.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    /// Rows with a speedup to compare: every layout but 4k itself.
    pub speedup_cells: usize,
    pub speedup_mean_abs_error: Option<f64>,
    pub speedup_max_abs_error: Option<f64>,
    /// Of the speedup cells, those whose prediction lies within the
    /// range the rounds measured.
    pub speedup_cells_within_rounds: usize,
    pub time_cells: usize,
    pub time_mean_abs_error: Option<f64>,
    pub time_max_abs_error: Option<f64>,
}

#[derive(Serialize)]
pub struct Report {
    pub machine: String,
    pub quick: bool,
    pub repeat: u32,
    pub rows: Vec<Row>,
    pub summary: Summary,
    /// The host's memory around each workload's runs (empty where the
    /// profile has no `[reference]`), and why not, where it was not read
    /// or not applied.
    pub memory: Vec<MemoryMoved>,
    pub memory_notes: Vec<String>,
    /// The native suites in full (layouts obtained, every run).
    pub native: Vec<SuiteReport>,
}

fn mean_max(v: &[f64]) -> (Option<f64>, Option<f64>) {
    if v.is_empty() {
        return (None, None);
    }
    let abs: Vec<f64> = v.iter().map(|x| x.abs()).collect();
    (Some(abs.iter().sum::<f64>() / abs.len() as f64), abs.iter().copied().reduce(f64::max))
}

/// Fills in the speedups and errors of one workload's rows (the first is
/// the 4k baseline). The measured speedups are per round (see
/// `suite::round_time_speedups`), the predicted ones of the model's one run.
fn score(rows: &mut [Row]) {
    let base_p = rows[0].predicted_seconds;
    for (k, r) in rows.iter_mut().enumerate() {
        let m = r.measured.as_ref().map(|s| s.median);
        r.time_error = m.map(|m| r.predicted_seconds / m - 1.0);
        r.predicted_speedup = (r.predicted_seconds > 0.0).then(|| base_p / r.predicted_seconds);
        if k == 0 {
            r.measured_speedup = m.map(|_| 1.0);
            continue;
        }
        r.measured_speedup_spread = Spread::of(&r.round_speedups);
        r.measured_speedup = r.measured_speedup_spread.as_ref().map(|s| s.median);
        r.speedup_error = match (r.measured_speedup, r.predicted_speedup) {
            (Some(ms), Some(ps)) => Some(ps / ms - 1.0),
            _ => None,
        };
        r.speedup_within_rounds = match (&r.measured_speedup_spread, r.predicted_speedup) {
            (Some(s), Some(ps)) => Some(s.min <= ps && ps <= s.max),
            _ => None,
        };
    }
}

pub fn summarise(rows: &[Row]) -> Summary {
    let sp: Vec<f64> = rows.iter().filter(|r| r.layout != "4k").filter_map(|r| r.speedup_error).collect();
    let tm: Vec<f64> = rows.iter().filter_map(|r| r.time_error).collect();
    let (sm, sx) = mean_max(&sp);
    let (tmn, tmx) = mean_max(&tm);
    let within = rows.iter().filter(|r| r.speedup_within_rounds == Some(true)).count();
    Summary {
        speedup_cells: sp.len(),
        speedup_mean_abs_error: sm,
        speedup_max_abs_error: sx,
        speedup_cells_within_rounds: within,
        time_cells: tm.len(),
        time_mean_abs_error: tmn,
        time_max_abs_error: tmx,
    }
}

/// Validates `setup` on `profile` (the one `setup.machine` names),
/// running through `runner`; `progress` is told how many of
/// `setup.runs()` are done.
pub fn run<R: Runner>(setup: &Setup, profile: &Profile, runner: &mut R, progress: &mut dyn FnMut(u64)) -> Result<Report, Error<R::Error>> {
    let layouts = &setup.layouts;
    // The quick memory probes, over a region of their own.
    let (mut memory, mut memory_notes) = (Vec::new(), Vec::new());
    let calibrated = profile.reference.filter(|_| !setup.as_calibrated);
    let probe_region = match (calibrated, profile.reference) {
        (Some(_), _) => match Region::new(reference::BYTES, Pages::Thp, &mut Pool::new(false)) {
            Ok(r) => Some(r),
            Err(e) => {
                memory_notes.push(format!("the memory probes could not map their {} MB ({e}); the model ran on the profile as calibrated", reference::BYTES >> 20));
                None
            }
        },
        (None, Some(_)) => {
            memory_notes.push("--as-calibrated: the model ran on the profile as calibrated, and the memory probes did not run".into());
            None
        }
        (None, None) => {
            memory_notes.push(format!("profile {} has no [reference] (calibrate writes one): the model ran on it as it is, and the memory probes did not run", setup.machine));
            None
        }
    };
    let read_memory = || probe_region.as_ref().map(reference::measure).transpose().map_err(Error::Memory);

    let mut done = 0u64;
    let mut rows = Vec::new();
    let mut suites = Vec::new();
    for &w in &setup.workloads {
        let plan = Plan { layouts: layouts.iter().map(|l| l.native).collect(), repeat: setup.repeat, grow_hugetlb: false };
        let base = done;
        let before = read_memory()?;
        let report = runner.measure(w, &plan, &mut |k| progress(base + k)).map_err(Error::Runner)?;
        let after = read_memory()?;
        let mut moved = None;
        if let (Some(then), Some(b), Some(e)) = (calibrated, before, after) {
            let now = reference::median(&[b, e]).expect("two readings");
            let ratios = then.ratios(&now);
            let p = ratios.map(|r| profile.moved(r)).transpose();
            let applied = matches!(p, Ok(Some(_)));
            match p {
                Ok(p) => moved = p,
                Err(e) => memory_notes.push(format!("{w}: {e}; the model ran on the profile as calibrated")),
            }
            memory.push(MemoryMoved { workload: w.to_string(), calibrated: then, before: b, after: e, now, ratios: ratios.unwrap_or([f64::NAN; 3]), applied });
        }
        done += layouts.len() as u64 * setup.repeat as u64;
        let mut wrows = Vec::new();
        let base_runs = report.layouts.iter().find(|r| r.pages == layouts[0].native).map(|r| r.runs.as_slice()).unwrap_or(&[]);
        for (k, l) in layouts.iter().enumerate() {
            let sim = runner.predict(w, l, moved.as_ref().unwrap_or(profile)).map_err(Error::Runner)?;
            done += 1;
            progress(done);
            let nl = report.layouts.iter().find(|r| r.pages == l.native);
            let usable = nl.filter(|r| !r.runs.is_empty());
            wrows.push(Row {
                workload: w.to_string(),
                layout: l.name.clone(),
                measured: usable.and_then(|r| r.seconds.clone()),
                measured_huge_fraction: usable.and_then(|r| r.huge_fraction.as_ref().map(|h| h.median)),
                skip_reason: nl.and_then(|r| r.skip_reason.clone().or_else(|| r.shortfall.clone())),
                predicted_seconds: sim.seconds,
                predicted_huge_fraction: sim.huge_fraction,
                round_speedups: match (k, usable) {
                    (1.., Some(r)) => suite::round_time_speedups(base_runs, &r.runs),
                    _ => Vec::new(),
                },
                measured_speedup: None,
                measured_speedup_spread: None,
                predicted_speedup: None,
                speedup_error: None,
                time_error: None,
                speedup_within_rounds: None,
            });
        }
        score(&mut wrows);
        rows.extend(wrows);
        suites.push(report);
    }
    let summary = summarise(&rows);
    Ok(Report { machine: setup.machine.clone(), quick: setup.quick, repeat: setup.repeat, rows, summary, memory, memory_notes, native: suites })
}

fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{:+.1}%", 100.0 * v)).unwrap_or_else(|| "-".into())
}

fn times(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.3}x")).unwrap_or_else(|| "-".into())
}

fn secs(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

/// The text report.
pub fn text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Validation on this host: native runs (median of {} interleaved; a speedup is the median of the speedups measured within each round, the range their smallest and largest) against the model on profile {}{}\n",
        r.repeat,
        r.machine,
        if r.quick { " (--quick sizes)" } else { "" }
    );
    if !r.memory.is_empty() {
        let applied = r.memory.iter().all(|m| m.applied);
        let _ = writeln!(
            o,
            "The host's memory around each workload's native runs (quick probes before and after; the median of the two) against the calibration's [reference]{}:",
            if applied { "; the model ran on the profile with its memory moved by these" } else { "" }
        );
        let c = &r.memory[0].calibrated;
        let ns = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
        let _ = writeln!(
            o,
            "  {:<10}{:>10.1} ns a load over 64 MB, {:>6.2} with 32 chases, {:>6.3} a line copied; {:>5} a load over 16 MB (not applied)",
            "calibrated",
            c.chase_ns,
            c.chases_ns,
            c.copy_ns,
            ns(c.cache_chase_ns)
        );
        for m in &r.memory {
            let now = m.now;
            let [l, k, s] = m.ratios.map(|x| Some(x - 1.0));
            let cache = now.cache_chase_ns.zip(c.cache_chase_ns).map(|(a, b)| a / b - 1.0);
            let _ = writeln!(
                o,
                "  {:<10}{:>10.1} ({}){:>13.2} ({}){:>15.3} ({}){:>10} ({}){}",
                m.workload,
                now.chase_ns,
                pct(l),
                now.chases_ns,
                pct(k),
                now.copy_ns,
                pct(s),
                ns(now.cache_chase_ns),
                pct(cache),
                if m.applied { "" } else { "  not applied" }
            );
        }
        let _ = writeln!(o);
    }
    for n in &r.memory_notes {
        let _ = writeln!(o, "note: {n}\n");
    }
    let _ = writeln!(
        o,
        "{:<10}{:<10}{:>12}{:>12}{:>9}{:>10}{:>13}{:>10}{:>9}{:>8}{:>8}",
        "workload", "layout", "measured s", "predicted s", "time err", "meas. x", "meas. range", "pred. x", "x err", "huge m", "huge p"
    );
    for row in &r.rows {
        let meas = row.measured.as_ref().map(|s| secs(s.median)).unwrap_or_else(|| "skipped".into());
        let hm = row.measured_huge_fraction.map(|h| format!("{:.0}%", 100.0 * h)).unwrap_or_else(|| "-".into());
        let hp = row.predicted_huge_fraction.map(|h| format!("{:.0}%", 100.0 * h)).unwrap_or_else(|| "-".into());
        let range = row.measured_speedup_spread.as_ref().map(|s| format!("{:.2}-{:.2}", s.min, s.max)).unwrap_or_default();
        let _ = writeln!(
            o,
            "{:<10}{:<10}{:>12}{:>12}{:>9}{:>10}{:>13}{:>10}{:>9}{:>8}{:>8}",
            row.workload,
            row.layout,
            meas,
            secs(row.predicted_seconds),
            pct(row.time_error),
            times(row.measured_speedup),
            range,
            times(row.predicted_speedup),
            if row.layout == "4k" { "".into() } else { pct(row.speedup_error) },
            hm,
            hp
        );
        if let Some(why) = &row.skip_reason {
            let _ = writeln!(o, "{:<20}note: {why}", "");
        }
    }
    let s = &r.summary;
    let _ = writeln!(
        o,
        "\nspeedup over 4k, {} cells: mean absolute error {}, largest {}; the prediction within the range measured in {} of them",
        s.speedup_cells,
        pct(s.speedup_mean_abs_error).trim_start_matches('+'),
        pct(s.speedup_max_abs_error).trim_start_matches('+'),
        s.speedup_cells_within_rounds
    );
    let _ = writeln!(
        o,
        "time, {} cells: mean absolute error {}, largest {}",
        s.time_cells,
        pct(s.time_mean_abs_error).trim_start_matches('+'),
        pct(s.time_max_abs_error).trim_start_matches('+')
    );
    let runs = || r.native.iter().flat_map(|n| &n.layouts).flat_map(|l| &l.runs);
    let again = runs().filter(|x| !x.taken_again.is_empty()).count();
    if again > 0 {
        let set_aside: usize = runs().map(|x| x.taken_again.len()).sum();
        let _ = writeln!(
            o,
            "note: {again} of {} native runs {} taken again, on a CPU for less than {:.0}% of their time ({set_aside} attempt{} set aside)",
            runs().count(),
            if again == 1 { "was" } else { "were" },
            100.0 * suite::ON_CPU_MIN,
            if set_aside == 1 { "" } else { "s" }
        );
    }
    let busy = r.native.iter().flat_map(|n| &n.layouts).filter_map(|l| l.on_cpu.as_ref().map(|c| c.median)).fold(1.0f64, f64::min);
    if busy < suite::ON_CPU_MIN {
        let _ = writeln!(o, "note: the host was busy (a native run was on a CPU for only {:.0}% of its wall time); measured times are longer and noisier than the machine's own", 100.0 * busy);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row measured `measured` seconds in each round, whose rounds
    /// measured `rounds` as speedups over 4k.
    fn row(layout: &str, measured: &[f64], rounds: &[f64], predicted: f64) -> Row {
        Row {
            workload: "gups".into(),
            layout: layout.into(),
            measured: Spread::of(measured),
            measured_huge_fraction: None,
            skip_reason: None,
            predicted_seconds: predicted,
            predicted_huge_fraction: None,
            round_speedups: rounds.to_vec(),
            measured_speedup: None,
            measured_speedup_spread: None,
            predicted_speedup: None,
            speedup_error: None,
            time_error: None,
            speedup_within_rounds: None,
        }
    }

    #[test]
    fn speedups_and_errors_are_against_the_4k_row() {
        let mut rows = vec![row("4k", &[2.0], &[], 2.2), row("2m", &[1.0], &[2.0], 1.0), row("mix:0.5", &[1.6], &[1.25], 1.5)];
        score(&mut rows);
        assert_eq!(rows[0].measured_speedup, Some(1.0));
        assert!((rows[1].measured_speedup.unwrap() - 2.0).abs() < 1e-12);
        assert!((rows[1].predicted_speedup.unwrap() - 2.2).abs() < 1e-12);
        assert!((rows[1].speedup_error.unwrap() - 0.1).abs() < 1e-12);
        assert!((rows[0].time_error.unwrap() - 0.1).abs() < 1e-12);
        let s = summarise(&rows);
        // The 4k row's speedup is 1 on both sides by definition: not a cell.
        assert_eq!(s.speedup_cells, 2);
        let e2: f64 = (2.2 / 1.5) / (2.0 / 1.6) - 1.0;
        assert!((s.speedup_mean_abs_error.unwrap() - (0.1 + e2.abs()) / 2.0).abs() < 1e-12);
        assert_eq!(s.time_cells, 3);
        // One round each: neither prediction is within a range of one value.
        assert_eq!(s.speedup_cells_within_rounds, 0);
    }

    #[test]
    fn measured_speedups_are_the_median_of_the_rounds() {
        // The 4k median is 2.0 and the 2m median 1.0, but within each round
        // 2m ran 1.5x: the speedup is the rounds', not the medians' ratio.
        let mut rows = vec![row("4k", &[1.5, 2.0, 3.0], &[], 2.0), row("2m", &[1.0, 1.0, 2.0], &[1.5, 2.0, 1.5], 1.25)];
        score(&mut rows);
        assert_eq!(rows[1].measured_speedup, Some(1.5));
        let sp = rows[1].measured_speedup_spread.as_ref().unwrap();
        assert_eq!((sp.min, sp.max), (1.5, 2.0));
        assert_eq!(rows[1].predicted_speedup, Some(1.6));
        assert!((rows[1].speedup_error.unwrap() - (1.6 / 1.5 - 1.0)).abs() < 1e-12);
        assert_eq!(rows[1].speedup_within_rounds, Some(true));
        assert_eq!(summarise(&rows).speedup_cells_within_rounds, 1);
        // Outside the range; and no rounds to pair, no measured speedup.
        let mut rows = vec![row("4k", &[2.0], &[], 2.0), row("2m", &[1.0], &[1.5, 1.7], 1.0), row("mix:0.5", &[1.0], &[], 1.0)];
        score(&mut rows);
        assert_eq!(rows[1].speedup_within_rounds, Some(false));
        assert_eq!((rows[2].measured_speedup, rows[2].speedup_error, rows[2].speedup_within_rounds), (None, None, None));
        // The host's memory around the runs, against the calibration's.
        let then = Reference { chase_ns: 150.0, chases_ns: 6.0, copy_ns: 2.0, cache_chase_ns: Some(20.0) };
        let (before, after) = (Reference { chase_ns: 110.0, ..then }, Reference { chase_ns: 130.0, chases_ns: 6.6, copy_ns: 2.0, cache_chase_ns: Some(30.0) });
        let now = reference::median(&[before, after]).unwrap();
        let memory = vec![MemoryMoved { workload: "gups".into(), calibrated: then, before, after, now, ratios: then.ratios(&now).unwrap(), applied: true }];
        let text = text(&Report { machine: "m".into(), quick: false, repeat: 2, rows, summary: summarise(&[]), memory, memory_notes: Vec::new(), native: Vec::new() });
        assert!(text.contains("1.50-1.70"), "{text}");
        assert!(text.contains("the model ran on the profile with its memory moved by these"), "{text}");
        assert!(text.contains("  gups           120.0 (-20.0%)         6.30 (+5.0%)          2.000 (+0.0%)      25.0 (+25.0%)\n"), "{text}");
    }

    #[test]
    fn layouts_and_workloads_are_checked() {
        assert!(Layout::parse("2m").is_ok());
        assert!(matches!(Layout::parse("mix:0.25").unwrap().native, Pages::Mix(f) if f == 0.25));
        let e = Layout::parse("hugetlb-1g").unwrap_err();
        assert!(e.contains("hugetlb-1g"), "{e}");
        let e = params(WorkloadKind::Build, false).unwrap_err();
        assert!(e.contains("build"), "{e}");
        let all: Vec<String> = WORKLOADS.iter().map(|w| w.to_string()).collect();
        let layouts = |v: &[&str]| v.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        let s = Setup::new("m", &all, &layouts(&["4k", "2m", "mix:0.5"]), 3, true, false).unwrap();
        assert_eq!(s.runs(), 5 * 3 * 4);
        for (w, l, r, bad) in [(&all[..1], &["2m", "4k"][..], 3, "first layout must be 4k"), (&all[..1], &["4k"], 0, "--repeat 0"), (&[], &["4k"], 3, "--workloads")] {
            let e = Setup::new("m", w, &layouts(l), r, false, false).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        let e = Setup::new("m", &["gups".into(), "build".into()], &layouts(&["4k"]), 1, false, false).unwrap_err();
        assert!(e.contains("\"build\""), "{e}");
    }
}

