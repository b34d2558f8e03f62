//! `splab validate [--machine PROFILE] -- PROG ARGS`: a real program set
//! beside the model (splab-calibrate's `program`). This is the runner that
//! simulates the program online (`splab sim -- PROG`'s options, built
//! from validate's), its progress bar and its output.

use crate::error::{input, Fail};
use crate::formats::Formats;
use crate::progress::Progress;
use crate::run::{self, RunArgs, SimRun};
use crate::validate::ValidateArgs;
use clap::Parser;
use splab_calibrate::program::{self, Prediction, Setup};
use splab_hw::profile::Profile;
use splab_native::program::Program;
use splab_trace::online::Io;

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
    if let Some(o) = &a.core_off {
        argv.push("--core-off".into());
        argv.push(o.into());
    }
    argv.push("--".into());
    argv.extend(a.program.iter().map(Into::into));
    let mut r = Only::try_parse_from(argv).map(|o| o.a).map_err(|e| e.to_string())?;
    let stdin = a.input.clone().map_or(Io::Null, Io::File);
    r.program_io = Some((stdin, Io::Null));
    Ok(r)
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

/// The program run online, quietly, with its output dropped.
struct Online(RunArgs);

impl program::Runner for Online {
    type Error = Fail;

    fn predict(&mut self, on: bool, profile: &Profile) -> Result<Prediction, Fail> {
        let s = run::simulate_on(&self.0, on, true, Some(profile))?;
        if let Some(status) = crate::online::exit_status(s.program.as_ref()) {
            return Err(Fail::Run(format!("{}: under valgrind the program ended with status {status}, natively it did not", crate::workload::label(&self.0))));
        }
        let get = |k: &str| s.program.as_ref().and_then(|p| p.get(k)).and_then(|x| x.as_u64()).unwrap_or(0);
        Ok(Prediction {
            seconds: s.sim_seconds,
            refs: get("refs"),
            instructions: get("instructions"),
            tlb_misses: s.tlb.total_misses,
            promotions: promotions(&s),
            host_seconds: s.host_seconds,
        })
    }
}

/// `splab validate -- PROG ARGS`.
pub fn cmd(a: &ValidateArgs, out: &Formats) -> Result<i32, Fail> {
    if out.csv || out.plot.is_some() {
        return Err(Fail::Input("validate -- PROG: the table is printed as text or --json; --csv and --plot are for the workloads' validation".into()));
    }
    let setup = input(Setup::new(&a.machine, Program { argv: a.program.clone(), input: a.input.clone() }, &a.pages, a.repeat))?;
    // Every input is checked before anything runs, the profile first.
    let args = input(sim_args(a))?;
    let profile = crate::setup::config_or_default(&args.machine, None)?.profile;
    crate::online::workload(&args)?;

    splab_native::sysstate::install_signals();
    let mut bar = Progress::new(setup.runs(), &setup.program.argv[0], "native runs", out.machine_readable());
    let native = program::measure(&setup, &mut |done| bar.update(done));
    bar.finish();
    if let Some(sig) = splab_native::sysstate::received() {
        splab_native::sysstate::die_by(sig);
    }
    let r = program::predict(&setup, native, &profile, &mut Online(args))?;
    out.emit(&r, |r| crate::output::with_build(program::text(r)))?;
    if !r.measured_any() {
        return Err(Fail::Run("no layout ran natively (see the reasons above)".into()));
    }
    Ok(0)
}
