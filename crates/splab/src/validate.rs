//! `splab validate`: the model's predictions set beside this host
//! (splab-calibrate's `validate`). This is its options, the workloads it
//! runs natively (`splab native`) and in the model (`splab sim`), built
//! from the options both take, its progress bar and its output.

use crate::error::{input, Fail};
use crate::formats::Formats;
use crate::native;
use crate::progress::Progress;
use crate::simulate::{self, RunOpts};
use crate::spec::{MachineArgs, RunSpec};
use crate::validate_program;
use clap::Args;
use splab_calibrate::validate::{self, Layout, Prediction, Setup};
use splab_defs::{WorkloadKind, WorkloadParams};
use splab_hw::profile::Profile;
use splab_native::Native;
use splab_native::suite::{self, Plan, SuiteReport};
use std::collections::BTreeMap;

/// Options of `splab validate`.
#[derive(Args, Clone, Debug)]
pub struct ValidateArgs {
    /// Machine profile of this host to predict with: a TOML file as
    /// `splab calibrate -o FILE` writes it (or a built-in name).
    #[arg(long, value_name = "PROFILE")]
    pub machine: String,
    /// Switch parts of the core model off in the model's runs (as
    /// `sim --core-off`)
    #[arg(long, value_name = "PARTS")]
    pub core_off: Option<String>,
    /// Workloads, comma-separated, from gups, lat, stream, index,
    /// transpose.
    #[arg(long, value_name = "W,...", value_delimiter = ',', default_value = "gups,lat,stream,index,transpose")]
    pub workloads: Vec<String>,
    /// Page layouts, comma-separated: 4k (all base pages), 2m (all 2 MB
    /// pages: THP natively, promoted superpages in the model), mix:F (a
    /// fraction F of the 2 MB chunks in 2 MB pages, the rest in 4 KB). The
    /// first must be 4k: speedups are over it.
    #[arg(long, value_name = "LAYOUT,...", value_delimiter = ',', default_value = "4k,2m,mix:0.25,mix:0.5,mix:0.75")]
    pub layouts: Vec<String>,
    /// Native runs per layout, interleaved across the layouts (the model
    /// is deterministic and runs once).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: u32,
    /// Small sizes (seconds, not minutes), for trying the command out;
    /// too small for the caches and TLBs to matter as they do at full size.
    #[arg(long)]
    pub quick: bool,
    /// Predict on the profile as calibrated. By default, where the profile
    /// has a `[reference]` (calibrate writes one), the quick memory probes
    /// run again before and after each workload's native runs, and the
    /// model runs on the profile with its memory moved as the host's moved
    /// since the calibration (memory latency, overlapped misses,
    /// streaming; `Profile::moved`).
    #[arg(long)]
    pub as_calibrated: bool,
    /// Instead of the workloads, any program and its arguments after `--`:
    /// run natively in --pages and online in the model, superpages off and
    /// on (`validate_program.rs`).
    #[arg(last = true, value_name = "PROG ARGS")]
    pub program: Vec<String>,
    /// Programs: native layouts, comma-separated, from 4k, thp, promote;
    /// the first must be 4k [default: 4k,thp,promote; promote, FreeBSD's
    /// policy on Linux, is the one the model's superpages-on run models].
    #[arg(long, value_name = "LAYOUT,...")]
    pub pages: Vec<String>,
    /// Programs: standard input from this file [default: /dev/null].
    #[arg(long, value_name = "FILE")]
    pub input: Option<std::path::PathBuf>,
    /// Programs: simulate them sampled (`splab sim --sample`).
    #[arg(long, value_name = "DETAIL:PERIOD[:WARM]")]
    pub sample: Option<String>,
    /// Programs: what runs them in the model, as `sim --frontend`.
    #[arg(long, value_name = "valgrind|dynamorio", default_value = "valgrind", env = "SPLAB_FRONTEND", value_parser = splab_trace::online::Frontend::parse)]
    pub frontend: splab_trace::online::Frontend,
}

/// The model's run of `workload` sized by `params`, laid out as `pages`.
/// The native index runs the lookups alone, without a server's other work
/// or a client, so the modelled transactions are the lookups alone too.
fn sim_spec(workload: WorkloadKind, params: &WorkloadParams, machine: &MachineArgs, pages: &str) -> RunSpec {
    let mut spec = RunSpec::workload(workload);
    spec.params = params.clone();
    if workload == WorkloadKind::Index {
        spec.params.insns_per_txn = Some(0);
        spec.params.round_trip = Some(false);
    }
    spec.pages = Some(pages.to_string());
    spec.system.machine = machine.clone();
    spec
}

/// One workload natively, and in the model by layout.
type Sides = (Box<dyn Native>, BTreeMap<String, RunSpec>);

/// Each workload natively and, by layout, in the model: all built before
/// anything runs.
struct Workloads(BTreeMap<WorkloadKind, Sides>);

impl Workloads {
    fn new(s: &Setup, machine: &MachineArgs) -> Result<Workloads, Fail> {
        let mut m = BTreeMap::new();
        for &w in &s.workloads {
            let params = input(validate::params(w, s.quick))?;
            let sims = s.layouts.iter().map(|l| (l.name.clone(), sim_spec(w, &params, machine, &l.sim))).collect();
            m.insert(w, (native::build(w, &params)?, sims));
        }
        Ok(Workloads(m))
    }

    fn get(&self, w: WorkloadKind) -> Result<&Sides, Fail> {
        self.0.get(&w).ok_or_else(|| Fail::Run(format!("validate: {w} was not planned")))
    }
}

impl validate::Runner for Workloads {
    type Error = Fail;

    fn measure(&mut self, workload: WorkloadKind, plan: &Plan, progress: &mut dyn FnMut(u64)) -> Result<SuiteReport, Fail> {
        let w = &self.get(workload)?.0;
        suite::run(workload.name(), w.as_ref(), plan, &mut |k, _, _| progress(k)).map_err(Fail::Run)
    }

    fn predict(&mut self, workload: WorkloadKind, layout: &Layout, profile: &Profile) -> Result<Prediction, Fail> {
        let spec = self.get(workload)?.1.get(&layout.name).ok_or_else(|| Fail::Run(format!("validate: {workload} in {} was not planned", layout.name)))?;
        let opts = RunOpts { quiet: true, profile: Some(profile.clone()), ..RunOpts::default() };
        let sim = simulate::simulate(spec, &opts)?;
        Ok(Prediction { seconds: sim.sim_seconds, huge_fraction: sim.layout.as_ref().map(|o| o.chunks_2m_obtained as f64 / o.chunks.max(1) as f64) })
    }
}

/// `splab validate`.
pub fn cmd(a: &ValidateArgs, out: &Formats) -> Result<i32, Fail> {
    let machine = MachineArgs { machine: Some(a.machine.clone()), arch: None, core_off: a.core_off.clone() };
    if !a.program.is_empty() {
        let p = validate_program::Validation { machine, program: a.program.clone(), pages: a.pages.clone(), repeat: a.repeat, input: a.input.clone(), sample: a.sample.clone(), frontend: a.frontend };
        return validate_program::cmd(&p, out);
    }
    let setup = input(Setup::new(&a.machine, &a.workloads, &a.layouts, a.repeat, a.quick, a.as_calibrated))?;
    // Every input is checked before anything runs, the profile first.
    let profile = crate::setup::config_or_default(&machine, None)?.profile;
    let mut workloads = Workloads::new(&setup, &machine)?;
    out.check()?;
    let mut bar = Progress::new(setup.runs(), "validate", "runs", out.machine_readable());
    let r = validate::run(&setup, &profile, &mut workloads, &mut |done| bar.update(done));
    bar.finish();
    let r = r.map_err(|e| match e {
        validate::Error::Runner(f) => f,
        validate::Error::Memory(m) => Fail::Run(m),
    })?;
    out.emit(&r, |r| crate::output::with_build(validate::text(r)))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every workload's parameters build both sides, in every layout.
    #[test]
    fn every_workload_has_parameters_both_sides_take() {
        let all: Vec<String> = validate::WORKLOADS.iter().map(|w| w.to_string()).collect();
        let layouts: Vec<String> = ["4k", "2m", "mix:0.5"].map(String::from).to_vec();
        let machine = MachineArgs { machine: Some("sapphire-rapids".into()), ..Default::default() };
        for quick in [false, true] {
            let s = Setup::new("sapphire-rapids", &all, &layouts, 2, quick, false).unwrap();
            let w = Workloads::new(&s, &machine).ok().unwrap();
            assert_eq!(w.0.len(), all.len());
            for (_, sims) in w.0.values() {
                assert_eq!(sims.len(), layouts.len());
                for spec in sims.values() {
                    let cfg = crate::setup::run_config(spec).ok().unwrap();
                    crate::workload::build(spec, &cfg, &Default::default()).ok().unwrap();
                }
            }
        }
    }

    /// The modelled index does what the native one does: lookups alone.
    #[test]
    fn the_modelled_index_is_the_lookups_alone_as_natively() {
        let s = Setup::new("sapphire-rapids", &["index".to_string()], &["4k".to_string()], 1, true, false).unwrap();
        let w = Workloads::new(&s, &MachineArgs::default()).ok().unwrap();
        let p = &w.0[&WorkloadKind::Index].1["4k"].params;
        assert_eq!((p.insns_per_txn, p.round_trip), (Some(0), Some(false)));
    }
}
