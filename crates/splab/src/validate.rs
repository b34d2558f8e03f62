//! `splab validate`: the model's predictions set beside this host
//! (splab-calibrate's `validate`). This is its options, the workloads it
//! runs natively (`splab native`) and in the model (`splab sim`), built
//! from the options both take, its progress bar and its output.

use crate::error::{input, Fail};
use crate::formats::Formats;
use crate::native::{self, NativeArgs};
use crate::progress::Progress;
use crate::run::{self, RunArgs};
use clap::{Args, Parser};
use splab_calibrate::validate::{self, Layout, Prediction, Setup};
use splab_hw::profile::Profile;
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
    #[arg(long, value_name = "DETAIL:PERIOD")]
    pub sample: Option<String>,
}

fn native_args(workload: &str, options: &[&str], repeat: u32) -> Result<NativeArgs, String> {
    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        a: NativeArgs,
    }
    let r = repeat.to_string();
    let argv = ["splab", workload, "--repeat", &r].into_iter().chain(options.iter().copied());
    Only::try_parse_from(argv).map(|o| o.a).map_err(|e| e.to_string())
}

fn sim_args(workload: &str, options: &[&str], machine: &str, pages: &str) -> Result<RunArgs, String> {
    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        a: RunArgs,
    }
    let argv = ["splab", workload, "--machine", machine, "--pages", pages].into_iter().chain(options.iter().copied());
    Only::try_parse_from(argv).map(|o| o.a).map_err(|e| e.to_string())
}

/// Options of the model's side beyond those both sides share: the native
/// index runs the lookups alone, without a server's other work or a
/// client, so the modelled transactions are the lookups alone too.
fn sim_only(workload: &str) -> &'static [&'static str] {
    match workload {
        "index" => &["--insns-per-txn", "0", "--round-trip", "false"],
        _ => &[],
    }
}

/// Each workload's options for `splab native` and, by layout, for
/// `splab sim`: all parsed before anything runs.
struct Workloads(BTreeMap<String, (NativeArgs, BTreeMap<String, RunArgs>)>);

impl Workloads {
    fn new(s: &Setup) -> Result<Workloads, String> {
        let mut m = BTreeMap::new();
        for w in &s.workloads {
            let owned = validate::params(*w, s.quick)?.flags(&[]);
            let o: Vec<&str> = owned.iter().map(String::as_str).collect();
            let w = w.name();
            let so: Vec<&str> = o.iter().chain(sim_only(w)).copied().collect();
            let sims = s.layouts.iter().map(|l| Ok((l.name.clone(), sim_args(w, &so, &s.machine, &l.sim)?))).collect::<Result<_, String>>()?;
            m.insert(w.to_string(), (native_args(w, &o, s.repeat)?, sims));
        }
        Ok(Workloads(m))
    }
}

impl validate::Runner for Workloads {
    type Error = Fail;

    fn measure(&mut self, workload: splab_defs::WorkloadKind, plan: &Plan, progress: &mut dyn FnMut(u64)) -> Result<SuiteReport, Fail> {
        let w = native::build(&self.0[workload.name()].0)?;
        suite::run(workload.name(), w.as_ref(), plan, &mut |k, _, _| progress(k)).map_err(Fail::Run)
    }

    fn predict(&mut self, workload: splab_defs::WorkloadKind, layout: &Layout, profile: &Profile) -> Result<Prediction, Fail> {
        let sim = run::simulate_on(&self.0[workload.name()].1[&layout.name], true, true, Some(profile))?;
        Ok(Prediction { seconds: sim.sim_seconds, huge_fraction: sim.layout.as_ref().map(|o| o.chunks_2m_obtained as f64 / o.chunks.max(1) as f64) })
    }
}

/// `splab validate`.
pub fn cmd(a: &ValidateArgs, out: &Formats) -> Result<i32, Fail> {
    if !a.program.is_empty() {
        return crate::validate_program::cmd(a, out);
    }
    let setup = input(Setup::new(&a.machine, &a.workloads, &a.layouts, a.repeat, a.quick, a.as_calibrated))?;
    // Every input is checked before anything runs, the profile first.
    let probe = input(sim_args("gups", &[], &a.machine, "4k"))?;
    let profile = crate::setup::config_or_default(&probe.machine, None)?.profile;
    let mut workloads = input(Workloads::new(&setup))?;
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

    /// Every workload's options parse for both sides, in every layout.
    #[test]
    fn every_workload_has_options_both_sides_take() {
        let all: Vec<String> = validate::WORKLOADS.iter().map(|w| w.to_string()).collect();
        let layouts: Vec<String> = ["4k", "2m", "mix:0.5"].map(String::from).to_vec();
        for quick in [false, true] {
            let s = Setup::new("sapphire-rapids", &all, &layouts, 2, quick, false).unwrap();
            let w = Workloads::new(&s).unwrap();
            assert_eq!(w.0.len(), all.len());
            assert!(w.0.values().all(|(_, sims)| sims.len() == layouts.len()));
        }
    }

    /// The modelled index does what the native one does: lookups alone.
    #[test]
    fn the_modelled_index_is_the_lookups_alone_as_natively() {
        let s = Setup::new("sapphire-rapids", &["index".to_string()], &["4k".to_string()], 1, true, false).unwrap();
        let w = Workloads::new(&s).unwrap();
        let a = &w.0["index"].1["4k"].workload_args;
        assert_eq!((a.insns_per_txn, a.round_trip), (Some(0), false));
    }
}
