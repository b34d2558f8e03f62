//! `splab check`: the randomized checker (the simulated system against a
//! plain reference model), with a progress bar and a readable verdict. The
//! exit status is 1 when anything was found, so it can gate CI.

use crate::error::Fail;
use crate::output::{emit, json};
use crate::progress::Progress;
use crate::setup;
use crate::sim::SuperpagesArg;
use crate::spec::SystemSpec;
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
    pub system: SystemSpec,
    /// Most memory one process maps at once (the footprint is about
    /// --procs times this), with 2 MB superpages; times the superpage size
    /// over 2 MB for larger ones.
    #[arg(long, value_name = "SIZE", default_value = "48M")]
    pub footprint: String,
    /// Most processes alive at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub procs: usize,
    #[command(flatten)]
    pub superpages: SuperpagesArg,
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
    "vm.pmap.gh.64k.promotions",
    "vm.pmap.gh.64k.p_failures",
    "vm.pmap.gh.64k.demotions",
    "vm.pmap.gh.64k.mappings",
    "vm.pmap.gh.512k.promotions",
    "vm.pmap.gh.512k.p_failures",
    "vm.pmap.gh.512k.demotions",
    "vm.pmap.gh.512k.mappings",
    "vm.pmap.gh.4m.promotions",
    "vm.pmap.gh.4m.p_failures",
    "vm.pmap.gh.4m.demotions",
    "vm.pmap.gh.4m.mappings",
    "splab.pmap.for_faults",
    "splab.pmap.fow_faults",
    "splab.pmap.hpt.evictions",
    "splab.pmap.hpt.reinserts",
    "vm.reserv.broken",
    "vm.reserv.freed",
    "vm.reserv.reclaimed",
    "splab.reserv.alloc_failures",
    "vm.stats.vm.v_cow_faults",
];

/// Sysctls of the page daemon and swap, shown when there was paging.
const SHOWN_PAGING: &[&str] = &[
    "vm.stats.vm.v_pdwakeups",
    "vm.stats.vm.v_pdpages",
    "vm.stats.vm.v_dfree",
    "vm.stats.vm.v_reactivated",
    "vm.stats.vm.v_swapout",
    "vm.stats.vm.v_swappgsout",
    "vm.stats.vm.v_swapin",
    "vm.stats.vm.v_swappgsin",
    "vm.stats.vm.v_vnodepgsout",
    "vm.stats.vm.v_vnodepgsin",
    "splab.vm.pageout.superpages_freed",
    "splab.vm.swap_full",
    "splab.vm.oom_kills",
];

pub fn cmd(a: &CheckArgs, as_json: bool) -> Result<i32, Fail> {
    let sys = &a.system;
    let mut cfg = setup::config(&sys.machine, sys.memory.as_deref().unwrap_or("256M"))?;
    if sys.memory.is_none() {
        cfg.memory = (256 << 20) * check::size_scale(cfg.arch);
    }
    if a.procs == 0 {
        return Err(Fail::Input("--procs 0: at least one process is needed".into()));
    }
    if a.ops == 0 {
        // A check of nothing would print "clean".
        return Err(Fail::Input("--ops 0: at least one operation is needed".into()));
    }
    setup::check_tunables(cfg.arch, &sys.policy, &sys.sysctl)?;
    let max_mapped = setup::swap(&a.footprint, "--footprint")?;
    if max_mapped < 1 << 20 {
        return Err(Fail::Input(format!("--footprint {}: at least 1M is needed", a.footprint)));
    }
    let ccfg = CheckConfig {
        ops: a.ops,
        seed: a.seed,
        arch: cfg.arch,
        profile: cfg.profile,
        memory: cfg.memory,
        swap: setup::swap(&sys.swap, "--swap")?,
        superpages: a.superpages.superpages.on(),
        max_procs: a.procs,
        tunables: sys.sysctl.clone(),
        policy: sys.policy.to_string(),
        max_mapped,
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
    // A name of 36 characters or more still gets a space before its value.
    let line = |o: &mut String, k: &str, v: &dyn std::fmt::Display| {
        let _ = writeln!(o, "  {:<36}{v}", format!("{k} "));
    };
    let verdict = if r.clean() { "clean" } else { "PROBLEMS FOUND" };
    let _ = writeln!(o, "check: {verdict} (splab build {})", crate::output::BUILD);
    line(&mut o, "operations", &r.ops);
    line(&mut o, "memory references", &r.refs);
    line(&mut o, "host seconds", &crate::output::num(host_seconds));
    line(&mut o, "content mismatches", &r.mismatches);
    line(&mut o, "stale translations", &r.stale_translations);
    line(&mut o, "non-zero fresh reads", &r.nonzero_fresh_reads);
    line(&mut o, "invariant checks", &format!("{} ({} failed)", r.invariant_checks, r.invariant_failures));
    line(&mut o, "fault disagreements", &r.fault_disagreements);
    line(&mut o, "processes killed (OOM)", &r.oom_kills.len());
    line(&mut o, "accesses after a kill", &r.killed_accesses);
    let _ = writeln!(o, "operations by kind:");
    for (k, v) in &r.op_counts {
        line(&mut o, k, v);
    }
    let _ = writeln!(o, "sysctls:");
    let paged = r.sysctl.get("vm.stats.vm.v_pdwakeups").is_some_and(|v| v.to_string() != "0");
    let shown = SHOWN.iter().chain(if paged { SHOWN_PAGING } else { &[] });
    for k in shown {
        if let Some(v) = r.sysctl.get(*k) {
            line(&mut o, k, v);
        }
    }
    // The policy's own counters that moved (Linux's vmstat THP counters,
    // khugepaged's, Shimizu's per-size allocations).
    let policy_counter = |k: &str| {
        k.starts_with("vmstat.") || k.starts_with("vm.superpages.alloc.") || k.starts_with("vm.superpages.fallback.") || k.ends_with(".pages_collapsed") || k.contains(".stats.")
    };
    for (k, v) in r.sysctl.iter().filter(|(k, v)| policy_counter(k) && v.to_string() != "0") {
        line(&mut o, k, v);
    }
    if !r.oom_kills.is_empty() {
        let _ = writeln!(o, "processes killed (memory and swap exhausted):");
        for k in r.oom_kills.iter().take(10) {
            let _ = writeln!(o, "  {k}");
        }
        if r.oom_kills.len() > 10 {
            let _ = writeln!(o, "  ... and {} more", r.oom_kills.len() - 10);
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
