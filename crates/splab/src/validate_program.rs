//! `splab validate [--machine PROFILE] -- PROG ARGS`: a real program set
//! beside the model. The program runs natively in each page layout
//! (`splab native -- PROG`'s runner: repeats interleaved, medians), then
//! online in the simulator with superpages off (beside native `4k`) and on
//! (beside `thp` and `promote`) on the profile, which prices its
//! instructions too (`[core]`). The table gives measured and predicted
//! times and speedups over 4 KB pages, and the errors.

use crate::error::{input, Fail};
use crate::output::{emit, json};
use crate::progress::Progress;
use crate::run::{self, RunArgs, SimRun};
use crate::validate::ValidateArgs;
use clap::Parser;
use serde::Serialize;
use splab_native::pages::Pages;
use splab_native::program::{Program, RunOpts};
use splab_native::programs::{self, Plan, ProgramsReport, Stat};
use splab_trace::online::Io;
use std::fmt::Write as _;

/// One layout: the native runs and the model's run beside them.
#[derive(Clone, Debug, Serialize)]
pub struct ProgramRow {
    pub layout: String,
    /// The model's superpage setting beside it.
    pub superpages: bool,
    /// Native wall and CPU (user + system) seconds over the repeats.
    pub measured: Option<Stat>,
    pub measured_cpu: Option<Stat>,
    pub skip_reason: Option<String>,
    /// Simulated seconds of the whole program (instructions included where
    /// the profile prices them).
    pub predicted_seconds: f64,
    /// Median of the per-round wall-time speedups over 4k (1 for 4k).
    pub measured_speedup: Option<f64>,
    pub measured_cpu_speedup: Option<f64>,
    pub predicted_speedup: f64,
    /// predicted / measured - 1: time against wall and CPU time, speedup.
    pub time_error: Option<f64>,
    pub cpu_time_error: Option<f64>,
    pub speedup_error: Option<f64>,
}

#[derive(Serialize)]
pub struct ProgramValidation {
    pub machine: String,
    pub command: String,
    pub repeat: u32,
    pub rows: Vec<ProgramRow>,
    /// The model's runs, superpages off and on.
    pub sim_off: SimRun,
    pub sim_on: SimRun,
    /// The native runs in full.
    pub native: ProgramsReport,
}

fn sim_args(a: &ValidateArgs) -> Result<RunArgs, String> {
    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        a: RunArgs,
    }
    let mut argv: Vec<std::ffi::OsString> = ["splab", "--machine", &a.machine].iter().map(Into::into).collect();
    if let Some(s) = &a.sample {
        argv.push("--sample".into());
        argv.push(s.into());
    }
    argv.push("--".into());
    argv.extend(a.program.iter().map(Into::into));
    let mut r = Only::try_parse_from(argv).map(|o| o.a).map_err(|e| e.to_string())?;
    let stdin = a.input.clone().map_or(Io::Null, Io::File);
    r.program_io = Some((stdin, Io::Null));
    Ok(r)
}

fn layouts(a: &ValidateArgs) -> Result<Vec<Pages>, String> {
    let text = if a.pages.is_empty() { vec!["4k,thp,promote".to_string()] } else { a.pages.clone() };
    let v = Pages::parse_list(&text)?;
    if v.first() != Some(&Pages::FourK) {
        return Err(format!("--pages {:?}: the first layout must be 4k (speedups are over it)", text.join(",")));
    }
    if let Some(p) = v.iter().find(|p| !matches!(p, Pages::FourK | Pages::Thp | Pages::Promote)) {
        return Err(format!("--pages {p}: a program is validated in 4k, thp and promote (the layouts the model has: superpages off, and on)"));
    }
    Ok(v)
}

fn ratio(p: f64, m: Option<f64>) -> Option<f64> {
    m.filter(|m| *m > 0.0).map(|m| p / m - 1.0)
}

/// `splab validate -- PROG ARGS`.
pub fn cmd(a: &ValidateArgs, as_json: bool) -> Result<i32, Fail> {
    let pages = input(layouts(a))?;
    if !(1..=100).contains(&a.repeat) {
        return Err(Fail::Input(format!("--repeat {} is out of range (1 to 100)", a.repeat)));
    }
    if let Some(p) = a.input.as_ref().filter(|p| !p.is_file()) {
        return Err(Fail::Input(format!("--input {}: no such file", p.display())));
    }
    let args = input(sim_args(a))?;
    crate::online::workload(&args)?;
    crate::setup::config_or_default(&args.machine, None)?;

    splab_native::sysstate::install_signals();
    let prog = Program { argv: a.program.clone(), input: a.input.clone() };
    let plan = Plan { layouts: pages.clone(), repeat: a.repeat, warmup: 1, grow_hugetlb: false, opts: RunOpts::default() };
    let total = pages.len() as u64 * (a.repeat as u64 + 1);
    let mut bar = Progress::new(total, &prog.argv[0], "native runs", as_json);
    let native = programs::run(&prog, &plan, &mut |done, _, _| bar.update(done));
    bar.finish();
    if let Some(sig) = splab_native::sysstate::received() {
        splab_native::sysstate::die_by(sig);
    }
    let sim_off = run::simulate(&args, false, as_json)?;
    let sim_on = run::simulate(&args, true, as_json)?;

    let base = sim_off.sim_seconds;
    let mut rows = Vec::new();
    for l in &native.layouts {
        let on = l.pages != Pages::FourK;
        let predicted = if on { sim_on.sim_seconds } else { sim_off.sim_seconds };
        let cpu: Vec<f64> = l.runs.iter().filter(|r| r.exit.success()).map(|r| r.user + r.sys).collect();
        let measured_cpu = Stat::of(&cpu);
        let (measured_speedup, measured_cpu_speedup) = if on {
            (l.speedup_vs_4k.as_ref().map(|s| s.median), l.cpu_speedup_vs_4k.as_ref().map(|s| s.median))
        } else {
            (l.wall.as_ref().map(|_| 1.0), measured_cpu.as_ref().map(|_| 1.0))
        };
        let predicted_speedup = if predicted > 0.0 { base / predicted } else { 0.0 };
        rows.push(ProgramRow {
            layout: l.pages.to_string(),
            superpages: on,
            time_error: ratio(predicted, l.wall.as_ref().map(|s| s.median)),
            cpu_time_error: ratio(predicted, measured_cpu.as_ref().map(|s| s.median)),
            speedup_error: if on { ratio(predicted_speedup, measured_speedup) } else { None },
            measured: l.wall.clone(),
            measured_cpu,
            skip_reason: l.skip_reason.clone(),
            predicted_seconds: predicted,
            measured_speedup,
            measured_cpu_speedup,
            predicted_speedup,
        });
    }
    let v = ProgramValidation { machine: sim_on.machine.clone(), command: native.command.clone(), repeat: a.repeat, rows, sim_off, sim_on, native };
    emit(&if as_json { json(&v) } else { text(&v) });
    if v.rows.iter().all(|r| r.measured.is_none()) {
        return Err(Fail::Run("no layout ran natively (see the reasons above)".into()));
    }
    Ok(0)
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

/// Promotions of every superpage size (`vm.pmap.*.promotions`).
pub fn promotions(s: &SimRun) -> i64 {
    s.sysctl
        .iter()
        .filter(|(k, _)| k.starts_with("vm.pmap.") && k.ends_with(".promotions"))
        .map(|(_, v)| match v {
            splab_vm::sysctl::SysctlValue::Int(n) => *n,
            splab_vm::sysctl::SysctlValue::Text(_) => 0,
        })
        .sum()
}

pub fn text(v: &ProgramValidation) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Validation of {} on {} ({} native runs per layout, medians; the model runs once per superpage setting)", v.command, v.machine, v.repeat);
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
    for (name, s) in [("off", &v.sim_off), ("on", &v.sim_on)] {
        let p = s.program.as_ref();
        let get = |k: &str| p.and_then(|p| p.get(k)).and_then(|x| x.as_u64()).unwrap_or(0);
        let _ = writeln!(
            o,
            "model, superpages {name}: {:.3} s simulated ({} references, {} instructions, {} TLB misses, {} promotions) in {:.1} s of host time",
            s.sim_seconds,
            get("refs"),
            get("instructions"),
            s.tlb.total_misses,
            promotions(s),
            s.host_seconds
        );
    }
    if v.sim_on.cycles.core == 0.0 {
        let _ = writeln!(o, "The profile has no [core]: the predicted times leave the instructions' own work out (splab calibrate measures it).");
    }
    o
}
