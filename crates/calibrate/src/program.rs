//! Validation of any program (`splab validate -- PROG ARGS`): the program
//! runs natively in each page layout (`splab_native::programs`: repeats
//! interleaved, medians), and online in the model with superpages off
//! (beside native `4k`) and on (beside `thp` and `promote`), on a machine
//! profile that prices its instructions too (`[core]`). The report gives
//! measured and predicted times and speedups over 4 KB pages, and the
//! errors.
//!
//! The model's superpages-on run is FreeBSD's policy: reservations
//! promoted once populated, which on Linux `promote` (the promotion
//! monitor) imitates; `thp` stands beside it as the layout Linux gives by
//! itself. The model runs on the profile as calibrated: unlike the
//! workloads' validation (`validate`), the quick memory probes do not move
//! it, as a program's runs are not bracketed by them.
//!
//! What runs in the model is the front end's (`Runner`): it runs the
//! program under the valgrind tool or DynamoRIO and simulates it.

use serde::Serialize;
use splab_hw::profile::Profile;
use splab_native::pages::Pages;
use splab_native::program::{Program, RunOpts};
use splab_native::programs::{self, Plan, ProgramsReport, Stat};
use std::fmt::Write as _;

/// What to validate, checked before anything runs.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The profile predicted with, as the user named it (reported).
    pub machine: String,
    pub program: Program,
    /// The first is 4k: speedups are over it.
    pub layouts: Vec<Pages>,
    /// Native runs per layout, interleaved across the layouts.
    pub repeat: u32,
}

/// The native layouts a program is validated in by default.
pub const DEFAULT_LAYOUTS: &str = "4k,thp,promote";

impl Setup {
    /// Errors name the bad value as the command line gives it (`--pages`,
    /// `--repeat`, `--input`).
    pub fn new(machine: &str, program: Program, pages: &[String], repeat: u32) -> Result<Setup, String> {
        if program.argv.is_empty() {
            return Err("give a program after -- (e.g. splab validate --machine PROFILE -- xz -6 -T1 -c FILE)".into());
        }
        let text = if pages.is_empty() { vec![DEFAULT_LAYOUTS.to_string()] } else { pages.to_vec() };
        let layouts = Pages::parse_list(&text)?;
        if layouts.first() != Some(&Pages::FourK) {
            return Err(format!("--pages {:?}: the first layout must be 4k (speedups are over it)", text.join(",")));
        }
        if let Some(p) = layouts.iter().find(|p| !matches!(p, Pages::FourK | Pages::Thp | Pages::Promote)) {
            return Err(format!("--pages {p}: a program is validated in 4k, thp and promote (the layouts the model has: superpages off, and on)"));
        }
        if !(1..=100).contains(&repeat) {
            return Err(format!("--repeat {repeat} is out of range (1 to 100)"));
        }
        if let Some(p) = program.input.as_ref().filter(|p| !p.is_file()) {
            return Err(format!("--input {}: no such file", p.display()));
        }
        Ok(Setup { machine: machine.to_string(), program, layouts, repeat })
    }

    /// The native runs `run` reports progress in (a warm-up run of each
    /// layout included).
    pub fn runs(&self) -> u64 {
        self.layouts.len() as u64 * (self.repeat as u64 + 1)
    }
}

/// What the model predicted for the program with superpages off or on.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    /// Simulated seconds of the whole program (its instructions included
    /// where the profile has a `[core]`).
    pub seconds: f64,
    pub refs: u64,
    pub instructions: u64,
    pub tlb_misses: u64,
    /// Promotions of every superpage size.
    pub promotions: i64,
    /// Host seconds the online run took.
    pub host_seconds: f64,
}

/// The front end's part: the program run online in the model.
pub trait Runner {
    type Error;
    /// Simulates the program with superpages `on` or off on `profile`.
    fn predict(&mut self, on: bool, profile: &Profile) -> Result<Prediction, Self::Error>;
    /// What runs the program for the model (reported).
    fn frontend(&self) -> String;
}

/// One layout: the native runs and the model's run beside them.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub layout: String,
    /// The model's superpage setting beside it.
    pub superpages: bool,
    /// Native wall and CPU (user + system) seconds over the repeats.
    pub measured: Option<Stat>,
    pub measured_cpu: Option<Stat>,
    pub skip_reason: Option<String>,
    /// Simulated seconds of the whole program.
    pub predicted_seconds: f64,
    /// Median of the per-round wall and CPU time speedups over 4k (1 for
    /// 4k).
    pub measured_speedup: Option<f64>,
    pub measured_cpu_speedup: Option<f64>,
    pub predicted_speedup: f64,
    /// predicted / measured - 1: time against wall and CPU time, speedup
    /// against the wall-time speedup.
    pub time_error: Option<f64>,
    pub cpu_time_error: Option<f64>,
    pub speedup_error: Option<f64>,
}

#[derive(Serialize)]
pub struct Report {
    pub machine: String,
    /// The program's command line as a shell shows it.
    pub program_command: String,
    pub repeat: u32,
    pub rows: Vec<Row>,
    /// What ran the program for the model (valgrind or DynamoRIO).
    pub frontend: String,
    /// The model's runs, superpages off and on.
    pub model_off: Prediction,
    pub model_on: Prediction,
    /// The native runs in full.
    pub native: ProgramsReport,
}

impl Report {
    /// Whether any layout ran natively.
    pub fn measured_any(&self) -> bool {
        self.rows.iter().any(|r| r.measured.is_some())
    }
}

fn error(p: f64, m: Option<f64>) -> Option<f64> {
    m.filter(|m| *m > 0.0).map(|m| p / m - 1.0)
}

/// The native runs of `setup` (`progress` is told how many of
/// `setup.runs()` are done).
pub fn measure(setup: &Setup, progress: &mut dyn FnMut(u64)) -> ProgramsReport {
    let plan = Plan { layouts: setup.layouts.clone(), repeat: setup.repeat, warmup: 1, grow_hugetlb: false, opts: RunOpts::default() };
    programs::run(&setup.program, &plan, &mut |done, _, _| progress(done))
}

/// The model's two runs of the program on `profile` through `runner`,
/// set beside the native runs `native` of `setup`.
pub fn predict<R: Runner>(setup: &Setup, native: ProgramsReport, profile: &Profile, runner: &mut R) -> Result<Report, R::Error> {
    let off = runner.predict(false, profile)?;
    let on = runner.predict(true, profile)?;
    let rows = native.layouts.iter().map(|l| row(l, &off, &on)).collect();
    Ok(Report {
        machine: setup.machine.clone(),
        program_command: native.command.clone(),
        repeat: setup.repeat,
        rows,
        frontend: runner.frontend(),
        model_off: off,
        model_on: on,
        native,
    })
}

fn row(l: &programs::LayoutResult, off: &Prediction, on: &Prediction) -> Row {
    let sp = l.pages != Pages::FourK;
    let predicted = if sp { on.seconds } else { off.seconds };
    let cpu: Vec<f64> = l.runs.iter().filter(|r| r.exit.success()).map(|r| r.user + r.sys).collect();
    let measured_cpu = Stat::of(&cpu);
    let (measured_speedup, measured_cpu_speedup) = if sp {
        (l.speedup_vs_4k.as_ref().map(|s| s.median), l.cpu_speedup_vs_4k.as_ref().map(|s| s.median))
    } else {
        (l.wall.as_ref().map(|_| 1.0), measured_cpu.as_ref().map(|_| 1.0))
    };
    let predicted_speedup = if predicted > 0.0 { off.seconds / predicted } else { 0.0 };
    Row {
        layout: l.pages.to_string(),
        superpages: sp,
        time_error: error(predicted, l.wall.as_ref().map(|s| s.median)),
        cpu_time_error: error(predicted, measured_cpu.as_ref().map(|s| s.median)),
        speedup_error: if sp { error(predicted_speedup, measured_speedup) } else { None },
        measured: l.wall.clone(),
        measured_cpu,
        skip_reason: l.skip_reason.clone(),
        predicted_seconds: predicted,
        measured_speedup,
        measured_cpu_speedup,
        predicted_speedup,
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |e| format!("{:+.1} %", 100.0 * e))
}

fn secs(s: &Option<Stat>) -> String {
    s.as_ref().map_or("-".into(), |s| format!("{:.3}", s.median))
}

fn num(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.3}"))
}

/// The text report: a Markdown table, then the model's two runs.
pub fn text(v: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Validation of {} on {} ({} native runs per layout, medians; the model runs once per superpage setting)", v.program_command, v.machine, v.repeat);
    let _ = writeln!(o);
    let _ = writeln!(o, "| layout | model | wall s | CPU s | predicted s | error (wall) | error (CPU) | speedup | CPU speedup | predicted speedup | speedup error |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &v.rows {
        let _ = writeln!(
            o,
            "| {} | superpages {} | {} | {} | {:.3} | {} | {} | {} | {} | {:.3} | {} |",
            r.layout,
            if r.superpages { "on" } else { "off" },
            secs(&r.measured),
            secs(&r.measured_cpu),
            r.predicted_seconds,
            pct(r.time_error),
            pct(r.cpu_time_error),
            num(r.measured_speedup),
            num(r.measured_cpu_speedup),
            r.predicted_speedup,
            pct(r.speedup_error)
        );
        if let Some(why) = &r.skip_reason {
            let _ = writeln!(o, "  {}: {why}", r.layout);
        }
    }
    let _ = writeln!(o);
    for (name, s) in [("off", &v.model_off), ("on", &v.model_on)] {
        let _ = writeln!(
            o,
            "model, superpages {name}: {:.3} s simulated ({} references, {} instructions, {} TLB misses, {} promotions) in {:.1} s of host time under {}",
            s.seconds, s.refs, s.instructions, s.tlb_misses, s.promotions, s.host_seconds, v.frontend
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(argv: &[&str]) -> Program {
        Program { argv: argv.iter().map(|s| s.to_string()).collect(), input: None }
    }

    #[test]
    fn layouts_repeats_and_input_are_checked() {
        let s = Setup::new("m", prog(&["true"]), &[], 3).unwrap();
        assert_eq!(s.layouts, vec![Pages::FourK, Pages::Thp, Pages::Promote]);
        assert_eq!(s.runs(), 12);
        for (pages, repeat, bad) in [(&["thp,4k"][..], 3, "first layout must be 4k"), (&["4k,hugetlb-2m"], 3, "hugetlb-2m"), (&["4k"], 0, "--repeat 0")] {
            let pages: Vec<String> = pages.iter().map(|p| p.to_string()).collect();
            let e = Setup::new("m", prog(&["true"]), &pages, repeat).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        let mut p = prog(&["true"]);
        p.input = Some("/nonexistent/splab-input".into());
        assert!(Setup::new("m", p, &[], 1).unwrap_err().contains("/nonexistent/splab-input"));
        assert!(Setup::new("m", prog(&[]), &[], 1).unwrap_err().contains("after --"));
    }

    #[test]
    fn errors_are_predicted_over_measured() {
        assert_eq!(error(1.5, Some(1.0)), Some(0.5));
        assert_eq!(error(1.5, Some(0.0)), None);
        assert_eq!(error(1.5, None), None);
    }
}
