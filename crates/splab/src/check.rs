//! `splab check`: the randomized checker (the simulated system against a
//! plain reference model), with a progress bar and a readable verdict. The
//! exit status is 1 when anything was found, so it can gate CI.

use crate::error::Fail;
use crate::output::{emit, json};
use crate::progress::Progress;
use crate::setup::{self, MachineArgs, OnOff};
use clap::Args;
use serde::Serialize;
use splab_sim::check::{self, CheckConfig, CheckReport};
use std::fmt::Write as _;
use std::time::Instant;

#[derive(Args, Clone, Debug)]
pub struct CheckArgs {
    /// Operations to run.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub ops: u64,
    /// Seed of the operation sequence.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Modelled physical memory (small, so that memory runs out and
    /// reservations get broken) [default: 256M, times the superpage size
    /// over 2 MB: 2G with 16 MB superpages].
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Most processes alive at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub procs: usize,
    /// Transparent superpages (vm.pmap.pg_ps_enabled on amd64,
    /// vm.pmap.superpages_enabled on riscv, arm64 and ppc64-hpt).
    #[arg(long, value_enum, value_name = "on|off", default_value = "on")]
    pub superpages: OnOff,
    /// Set a pmap tunable at boot, e.g. vm.pmap.lp_enabled=1 (repeatable).
    #[arg(long = "sysctl", value_name = "NAME=VALUE", value_parser = setup::tunable)]
    pub tunables: Vec<(String, i64)>,
}

#[derive(Serialize)]
struct CheckOut<'a> {
    #[serde(flatten)]
    report: &'a CheckReport,
    host_seconds: f64,
}

/// Sysctls shown in the human summary, when the architecture has them.
const SHOWN: &[&str] = &[
    "vm.pmap.pde.promotions",
    "vm.pmap.pde.p_failures",
    "vm.pmap.pde.demotions",
    "vm.pmap.pde.mappings",
    "vm.pmap.l2.promotions",
    "vm.pmap.l2.p_failures",
    "vm.pmap.l2.demotions",
    "vm.pmap.l2.mappings",
    "vm.pmap.l3c.promotions",
    "vm.pmap.l3c.p_failures",
    "vm.pmap.l3c.demotions",
    "vm.pmap.l3c.mappings",
    "splab.pmap.ad_faults",
    "vm.pmap.section.promotions",
    "vm.pmap.section.p_failures",
    "vm.pmap.section.demotions",
    "vm.pmap.section.mappings",
    "vm.pmap.largepage.promotions",
    "vm.pmap.largepage.p_failures",
    "vm.pmap.largepage.demotions",
    "vm.pmap.largepage.mappings",
    "vm.pmap.sp.promotions",
    "vm.pmap.sp.p_failures",
    "vm.pmap.sp.demotions",
    "vm.pmap.sp.mappings",
    "splab.pmap.hpt.evictions",
    "splab.pmap.hpt.reinserts",
    "vm.reserv.broken",
    "vm.reserv.freed",
    "vm.reserv.reclaimed",
    "vm.stats.vm.v_cow_faults",
];

pub fn cmd(a: &CheckArgs, as_json: bool) -> Result<i32, Fail> {
    let mut cfg = setup::config(&a.machine, a.memory.as_deref().unwrap_or("256M"))?;
    if a.memory.is_none() {
        cfg.memory = (256 << 20) * check::size_scale(&cfg.arch).map_err(Fail::Input)?;
    }
    if a.procs == 0 {
        return Err(Fail::Input("--procs 0: at least one process is needed".into()));
    }
    setup::check_tunables(&cfg.arch, &a.tunables)?;
    let ccfg = CheckConfig {
        ops: a.ops,
        seed: a.seed,
        arch: cfg.arch,
        profile: cfg.profile,
        memory: cfg.memory,
        superpages: a.superpages.on(),
        max_procs: a.procs,
        tunables: a.tunables.clone(),
    };
    let mut bar = Progress::new(a.ops, "check", "ops", as_json);
    let t0 = Instant::now();
    let r = check::run(&ccfg, &mut |n| bar.update(n));
    let host_seconds = t0.elapsed().as_secs_f64();
    bar.finish();
    let report = r.map_err(|e| Fail::Run(format!("check: {e}")))?;
    if as_json {
        emit(&json(&CheckOut { report: &report, host_seconds }));
    } else {
        emit(&human(&report, host_seconds));
    }
    Ok(if report.clean() { 0 } else { 1 })
}

fn human(r: &CheckReport, host_seconds: f64) -> String {
    let mut o = String::new();
    // A name of 28 characters or more still gets a space before its value.
    let line = |o: &mut String, k: &str, v: &dyn std::fmt::Display| {
        let _ = writeln!(o, "  {:<28}{v}", format!("{k} "));
    };
    let verdict = if r.clean() { "clean" } else { "PROBLEMS FOUND" };
    let _ = writeln!(o, "check: {verdict}");
    line(&mut o, "operations", &r.ops);
    line(&mut o, "memory references", &r.refs);
    line(&mut o, "host seconds", &crate::output::num(host_seconds));
    line(&mut o, "content mismatches", &r.mismatches);
    line(&mut o, "stale translations", &r.stale_translations);
    line(&mut o, "non-zero fresh reads", &r.nonzero_fresh_reads);
    line(&mut o, "invariant checks", &format!("{} ({} failed)", r.invariant_checks, r.invariant_failures));
    line(&mut o, "fault disagreements", &r.fault_disagreements);
    let _ = writeln!(o, "operations by kind:");
    for (k, v) in &r.op_counts {
        line(&mut o, k, v);
    }
    let _ = writeln!(o, "sysctls:");
    for k in SHOWN {
        if let Some(v) = r.sysctl.get(*k) {
            line(&mut o, k, v);
        }
    }
    if !r.first_problems.is_empty() {
        let _ = writeln!(o, "first problems:");
        for p in &r.first_problems {
            let _ = writeln!(o, "  {p}");
        }
    }
    o
}
