//! `splab validate [--machine PROFILE] -- PROG ARGS`: a real program set
//! beside the model (splab-calibrate's `program`). This is the runner that
//! simulates the program online (`splab sim -- PROG`'s options, built
//! from validate's), its progress bar and its output.

use crate::error::{input, Fail};
use crate::formats::Formats;
use crate::progress::Progress;
use crate::simulate::{self, RunOpts, SimRun};
use crate::spec::{MachineArgs, RunSpec};
use crate::workload::ProgramIo;
use splab_calibrate::program::{self, Prediction, Setup};
use splab_hw::profile::Profile;
use splab_native::program::Program;
use splab_trace::online::{Frontend, Io};

/// What `splab validate -- PROG` was asked for.
pub struct Validation {
    /// The profile predicted with (and core-model switches).
    pub machine: MachineArgs,
    pub program: Vec<String>,
    /// Native layouts.
    pub pages: Vec<String>,
    pub repeat: u32,
    /// Standard input from this file [default: /dev/null].
    pub input: Option<std::path::PathBuf>,
    /// Simulate sampled (`splab sim --sample`).
    pub sample: Option<String>,
    /// What runs the program in the model.
    pub frontend: Frontend,
}

/// The model's run of the program: online, with its output dropped.
fn sim_spec(v: &Validation) -> RunSpec {
    RunSpec { program: v.program.clone(), input: v.input.clone(), sample: v.sample.clone(), system: crate::spec::SystemSpec { machine: v.machine.clone(), ..Default::default() }, ..RunSpec::default() }
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
struct Online(RunSpec, Frontend);

impl program::Runner for Online {
    type Error = Fail;

    fn predict(&mut self, on: bool, profile: &Profile) -> Result<Prediction, Fail> {
        let mut spec = self.0.clone();
        spec.superpages = on;
        let opts = RunOpts { quiet: true, profile: Some(profile.clone()), io: ProgramIo { stdin: Io::Null, frontend: self.1, ..ProgramIo::default() }, ..RunOpts::default() };
        let s = simulate::simulate(&spec, &opts)?;
        if let Some(status) = simulate::exit_status(s.program.as_ref()) {
            return Err(Fail::Run(format!("{}: under {} the program ended with status {status}, natively it did not", spec.label(), self.1.name())));
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

    fn frontend(&self) -> String {
        self.1.name().into()
    }
}

/// `splab validate -- PROG ARGS`.
pub fn cmd(a: &Validation, out: &Formats) -> Result<i32, Fail> {
    if out.csv || out.plot.is_some() {
        return Err(Fail::Input("validate -- PROG: the table is printed as text or --json; --csv and --plot are for the workloads' validation".into()));
    }
    let machine = a.machine.machine.clone().unwrap_or_default();
    let setup = input(Setup::new(&machine, Program { argv: a.program.clone(), input: a.input.clone() }, &a.pages, a.repeat))?;
    // Every input is checked before anything runs, the profile first.
    let spec = sim_spec(a);
    let profile = crate::setup::config_or_default(&spec.system.machine, None)?.profile;
    crate::workload::online(&spec, &ProgramIo { frontend: a.frontend, ..ProgramIo::default() })?;

    splab_native::sysstate::install_signals();
    let mut bar = Progress::new(setup.runs(), &setup.program.argv[0], "native runs", out.machine_readable());
    let native = program::measure(&setup, &mut |done| bar.update(done));
    bar.finish();
    if let Some(sig) = splab_native::sysstate::received() {
        splab_native::sysstate::die_by(sig);
    }
    let r = program::predict(&setup, native, &profile, &mut Online(spec, a.frontend))?;
    out.emit(&r, |r| crate::output::with_build(program::text(r)))?;
    if !r.measured_any() {
        return Err(Fail::Run("no layout ran natively (see the reasons above)".into()));
    }
    Ok(0)
}
