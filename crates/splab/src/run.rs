//! `splab sim` and `splab compare`: run a workload on a fresh system and
//! collect everything worth reporting about the run into one record, which
//! is both what the JSON output serialises and what the tables are drawn
//! from.

use crate::error::Fail;
use crate::progress::Progress;
use crate::rss::{RssSample, Sampler};
use crate::setup::{self, MachineArgs};
use crate::workload::{self, WorkloadArgs};
use clap::Args;
use serde::Serialize;
use splab_hw::profile::Profile;
use splab_sim::system::{HwStats, MemoryReport, TlbReport};
use splab_sim::timing::CycleBreakdown;
use splab_vm::pmap::KernelEvents;
use splab_vm::sysctl::SysctlValue;
use splab_workloads::Figure;
use std::collections::BTreeMap;
use std::time::Instant;

/// Options of a run, shared by `sim` and `compare` (which adds no others
/// but runs both superpage settings).
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Workload to run: gups, gups-mp, lat, bw, transpose, stream, index,
    /// build, forkbomb, stress, realloc, sparse, arenas, requests, or trace:FILE to
    /// replay a memory trace. Or, instead, a program after `--`.
    pub workload: Option<String>,
    /// Any program and its arguments, after `--` (e.g. `-- xz -6 -T1 -c
    /// FILE`): run under splab's valgrind tool with every process it
    /// starts, its references simulated as it runs (no trace file). Its
    /// standard input and exit status are splab's; its standard output
    /// goes where --output says.
    #[arg(last = true, value_name = "PROG ARGS")]
    pub program: Vec<std::ffi::OsString>,
    /// Programs: where their standard output goes, never into splab's
    /// report: null (/dev/null), pipe (a pipe splab reads and throws away,
    /// for programs that behave otherwise on /dev/null), inherit (splab's
    /// standard error; with compare, of the superpages-on run only), or a
    /// FILE (each run writes it anew).
    #[arg(long, value_name = "null|pipe|inherit|FILE", default_value = "null", value_parser = output_io)]
    pub output: splab_trace::online::Io,
    /// Programs: simulate DETAIL references in full in every PERIOD of
    /// each process's (e.g. 1M:10M), the rest with functional warming
    /// only, and estimate every figure with a 95 % confidence interval.
    #[arg(long, value_name = "DETAIL:PERIOD")]
    pub sample: Option<String>,
    /// Programs: the valgrind to run them under.
    #[arg(long, value_name = "PATH", default_value = "valgrind")]
    pub valgrind: std::path::PathBuf,
    /// Programs: where their standard input and output go in this run
    /// (set by `compare`, which runs a program twice).
    #[arg(skip)]
    pub program_io: Option<(splab_trace::online::Io, splab_trace::online::Io)>,
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Modelled physical memory (e.g. 512M, 8G, 8GiB; 16M to 256G)
    /// [default: 8G, or all the architecture addresses if less: 4G on
    /// armv7].
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Swap device size (0 = no swap); under memory pressure the page
    /// daemon pages anonymous memory out to it.
    #[arg(long, value_name = "SIZE", default_value = "0")]
    pub swap: String,
    #[command(flatten)]
    pub workload_args: WorkloadArgs,
    /// Fraction (0 to 1) of free 2 MB blocks broken up at start.
    #[arg(long, value_name = "F", default_value_t = 0.0, allow_negative_numbers = true)]
    pub fragment: f64,
    /// Fraction (0 to 1) of free 2 MB blocks aged at start: half their
    /// frames held elsewhere, the rest free runs of the profile's
    /// `[memory] aged_run` frames (else single frames) handed out in no
    /// address order, so that 4 KB pages get scattered frames as on a host
    /// that has run for a while. Default: the profile's `[memory] aged`
    /// (a calibrated profile's, where the host's frames were scattered),
    /// else 0, a freshly booted machine.
    #[arg(long, value_name = "F", allow_negative_numbers = true)]
    pub age: Option<f64>,
    /// Seed for the fragmentation and ageing patterns.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Keep the values of written words.
    #[arg(long)]
    pub track_contents: bool,
    /// Check every TLB hit against the page tables.
    #[arg(long)]
    pub check_tlb: bool,
    /// Use one host thread (by default the cache model of large batches
    /// runs on a second one); the results are the same. For running many
    /// simulations at once.
    #[arg(long)]
    pub single_thread: bool,
    /// Set a pmap or policy tunable at boot, e.g. vm.pmap.lp_enabled=1 or
    /// transparent_hugepage.khugepaged.max_ptes_none=64 (repeatable).
    /// `compare` applies these to its superpages-on runs only: the off run
    /// has every superpage size off.
    #[arg(long = "sysctl", value_name = "NAME=VALUE", value_parser = setup::tunable)]
    pub tunables: Vec<(String, String)>,
    #[arg(long, value_name = "POLICY", default_value = "freebsd", help = setup::policy_help())]
    pub policy: String,
}

/// Everything about one run.
#[derive(Serialize)]
pub struct SimRun {
    pub workload: String,
    /// The superpage policy (`--policy`).
    pub policy: String,
    /// The workload's own description of itself, e.g. `gups(2^24)`.
    pub workload_detail: String,
    pub arch: String,
    pub machine: String,
    pub memory_bytes: u64,
    pub swap_bytes: u64,
    pub superpages: bool,
    pub fragment: f64,
    /// Fraction of free 2 MB blocks aged at start (from --age or the
    /// profile).
    pub aged: f64,
    /// Frames in each free run of the aged blocks (the profile's
    /// `[memory] aged_run`, else 1).
    pub aged_run: u32,
    pub seed: u64,
    pub figure: Figure,
    /// The parts of the figure the workload reports separately.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<Figure>,
    pub report: String,
    pub sysctl: BTreeMap<String, SysctlValue>,
    /// Simulated memory references.
    pub refs: u64,
    /// Simulated seconds of the workload's timed part.
    pub sim_seconds: f64,
    /// Simulated seconds of the whole run, setup included.
    pub sim_seconds_total: f64,
    /// Wall time of the simulation (the workload's run, not building the
    /// system).
    pub host_seconds: f64,
    /// Wall time spent building the system.
    pub host_setup_seconds: f64,
    pub tlb: TlbReport,
    pub hw: HwStats,
    pub events: KernelEvents,
    pub cycles: CycleBreakdown,
    pub host_model_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_samples: Option<Vec<String>>,
    /// Processes killed because memory and swap ran out.
    pub oom_kills: Vec<splab_vm::OomKill>,
    /// With `--pages`: the layout asked for and the one the run got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<splab_workloads::layout::LayoutObtained>,
    /// A program run online: its exit status, instructions, processes and
    /// (with `--sample`) the estimates (`splab_trace::online::ProgramRun`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<serde_json::Value>,
    /// The simulator's own resident memory during the run (`rss`).
    pub host_rss: Vec<RssSample>,
    /// Resident against touched memory, bytes zeroed and copied, fault
    /// latency, background work.
    pub memory: MemoryReport,
    /// The policy's per-process view of superpages (Shimizu's
    /// /proc/PID/superpages), for the processes it has one of.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub procfs: Vec<String>,
}

impl SimRun {
    pub fn refs_per_second(&self) -> f64 {
        self.refs as f64 / self.host_seconds.max(1e-9)
    }
}

/// Runs the workload once with superpages `on` or off. `quiet` hides the
/// progress bar.
pub fn simulate(a: &RunArgs, on: bool, quiet: bool) -> Result<SimRun, Fail> {
    simulate_on(a, on, quiet, None)
}

/// `simulate`, on `profile` instead of the one `a` names (which must be
/// of the same architecture: validate's profile with its memory moved).
pub fn simulate_on(a: &RunArgs, on: bool, quiet: bool, profile: Option<&Profile>) -> Result<SimRun, Fail> {
    let mut cfg = setup::config_or_default(&a.machine, a.memory.as_deref())?;
    if let Some(p) = profile {
        cfg.profile = p.clone();
    }
    if on {
        cfg.tunables = a.tunables.clone();
    }
    setup::check_tunables(cfg.arch, &a.policy, &cfg.tunables)?;
    cfg.policy = a.policy.clone();
    if !(0.0..=1.0).contains(&a.fragment) {
        return Err(Fail::Input(format!("--fragment {} is out of range (0 to 1)", a.fragment)));
    }
    cfg.superpages = on;
    cfg.swap = setup::swap(&a.swap, "--swap")?;
    cfg.fragment = a.fragment;
    if let Some(f) = a.age.filter(|f| !(0.0..=1.0).contains(f)) {
        return Err(Fail::Input(format!("--age {f} is out of range (0 to 1)")));
    }
    cfg.age = a.age;
    cfg.seed = a.seed;
    cfg.track_contents = a.track_contents || a.workload_args.verify;
    cfg.check_tlb = a.check_tlb;
    cfg.timing_thread = !a.single_thread;
    // The workload is built before the system so that its errors come
    // before the (for large memories, slow) setup.
    let mut w = workload::build_run(a, &cfg)?;
    let arch = cfg.arch.name.to_string();
    let machine = cfg.profile.name.clone();
    let t0 = Instant::now();
    let mut sys = setup::system(cfg)?;
    let host_setup_seconds = t0.elapsed().as_secs_f64();

    let label = if on { "superpages on" } else { "superpages off" };
    let mut bar = Progress::new(w.estimated_refs(), label, "refs", quiet);
    let mut rss = Sampler::new();
    let t1 = Instant::now();
    let result = w.run(&mut sys, &mut |n| {
        bar.update(n);
        rss.tick(n);
    });
    let host_seconds = t1.elapsed().as_secs_f64();
    bar.finish();
    rss.take(sys.hw().refs);
    let result = result.map_err(|e| {
        let kills: Vec<String> = sys.oom_kills().iter().map(|k| k.to_string()).collect();
        let why = if kills.is_empty() { String::new() } else { format!(" [{}]", kills.join("; ")) };
        let msg = format!("{} ({label}): {e}{why}", w.name());
        if w.failed_on_input() {
            Fail::Input(msg)
        } else {
            Fail::Run(msg)
        }
    })?;

    let procfs = sys.policy_procfs_all();
    Ok(SimRun {
        workload: workload::label(a),
        policy: a.policy.clone(),
        workload_detail: w.name(),
        arch,
        machine,
        memory_bytes: sys.cfg.memory,
        swap_bytes: sys.cfg.swap,
        superpages: on,
        fragment: a.fragment,
        aged: sys.cfg.age(),
        aged_run: sys.cfg.profile.memory.aged_run.unwrap_or(1),
        seed: a.seed,
        figure: result.figure,
        details: result.details,
        report: result.report,
        sysctl: sys.sysctls().values,
        refs: sys.hw().refs,
        sim_seconds: result.timed_seconds,
        sim_seconds_total: sys.sim_seconds(),
        host_seconds,
        host_setup_seconds,
        tlb: sys.tlb_report(),
        hw: sys.hw(),
        events: sys.events().clone(),
        cycles: sys.breakdown(),
        host_model_bytes: sys.model_host_bytes(),
        stale_samples: a.check_tlb.then(|| sys.stale_samples.clone()),
        oom_kills: sys.oom_kills().to_vec(),
        layout: w.layout().cloned(),
        program: w.program_details(),
        host_rss: rss.samples,
        memory: sys.memory_report(),
        procfs,
    })
}

/// (on - off) / off in percent; None when off is zero.
pub fn change_percent(off: f64, on: f64) -> Option<f64> {
    (off != 0.0).then(|| (on - off) / off * 100.0)
}

/// `splab compare` as JSON.
#[derive(Serialize)]
pub struct Comparison {
    pub workload: String,
    pub off: SimRun,
    pub on: SimRun,
    pub change_percent: Changes,
}

#[derive(Serialize)]
pub struct Changes {
    pub figure: Option<f64>,
    pub sim_seconds: Option<f64>,
    pub tlb_misses: Option<f64>,
}

/// `--output`: where a program's standard output goes.
fn output_io(s: &str) -> Result<splab_trace::online::Io, String> {
    use splab_trace::online::Io;
    Ok(match s {
        "null" => Io::Null,
        "pipe" => Io::Pipe,
        "inherit" => Io::Stderr,
        "" => return Err("give null, pipe, inherit or a file name".into()),
        f => Io::File(f.into()),
    })
}

/// Runs superpages off, then on, each on a fresh system. A program runs
/// twice: its standard input is read once (into a file both runs read),
/// and the second run's output is the one shown.
pub fn compare(a: &RunArgs, quiet: bool) -> Result<Comparison, Fail> {
    if !a.program.is_empty() && a.program_io.is_none() {
        return crate::online::compare(a, quiet);
    }
    let off = simulate(a, false, quiet)?;
    let on = simulate(a, true, quiet)?;
    Ok(comparison(workload::label(a), off, on))
}

/// The comparison of two runs of one workload.
pub fn comparison(workload: String, off: SimRun, on: SimRun) -> Comparison {
    let change_percent = Changes {
        figure: change_percent(off.figure.value, on.figure.value),
        sim_seconds: change_percent(off.sim_seconds, on.sim_seconds),
        tlb_misses: change_percent(off.tlb.total_misses as f64, on.tlb.total_misses as f64),
    };
    Comparison { workload, off, on, change_percent }
}

/// `splab compare --policies`: one run per policy, superpages on.
#[derive(Serialize)]
pub struct PolicyComparison {
    pub workload: String,
    pub policies: Vec<String>,
    pub runs: Vec<SimRun>,
}

/// Runs the workload under each policy, each on a fresh system.
pub fn compare_policies(a: &RunArgs, policies: &[String], quiet: bool) -> Result<PolicyComparison, Fail> {
    // Every policy and its settings are checked before the first run starts.
    let cfg = setup::config_or_default(&a.machine, a.memory.as_deref())?;
    let mut plans = Vec::new();
    for entry in policies {
        let (spec, own) = policy_entry(entry).map_err(Fail::Input)?;
        let p = setup::check_policy(cfg.arch, &spec)?;
        let own = own.into_iter().map(|(n, v)| Ok((full_tunable_name(cfg.arch, p.as_ref(), &n).map_err(|e| Fail::Input(format!("--policies {entry}: {e}")))?, v))).collect::<Result<Vec<_>, Fail>>()?;
        let mut tunables = a.tunables.clone();
        tunables.extend(own);
        setup::check_tunables(cfg.arch, &spec, &tunables)?;
        plans.push((spec, tunables));
    }
    let mut runs = Vec::new();
    for (spec, tunables) in plans {
        let mut one = a.clone();
        one.policy = spec;
        one.tunables = tunables;
        runs.push(simulate(&one, true, quiet)?);
    }
    Ok(PolicyComparison { workload: workload::label(a), policies: policies.to_vec(), runs })
}

/// One entry of `--policies`: a policy and settings for its run alone,
/// `POLICY[/NAME=VALUE...]`, e.g.
/// `linux-thp:madvise/khugepaged.scan_sleep_millisecs=100`.
fn policy_entry(entry: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut parts = entry.split('/');
    let spec = parts.next().unwrap_or_default().trim().to_string();
    let settings = parts.map(|t| setup::tunable(t).map_err(|e| format!("--policies {entry}: {e}"))).collect::<Result<Vec<_>, _>>()?;
    Ok((spec, settings))
}

/// A tunable as an entry of `--policies` names it: its full name, or the
/// end of exactly one of the policy's or the pmap's names
/// (`khugepaged.max_ptes_none` for `transparent_hugepage.khugepaged.max_ptes_none`).
fn full_tunable_name(arch: splab_pmap::Arch, p: &dyn splab_vm::policy::Policy, name: &str) -> Result<String, String> {
    let mut known: Vec<String> = p.tunable_names().into_iter().filter(|n| !n.contains('<')).collect();
    known.extend(arch.tunables().map(|t| t.name.to_string()));
    let per_size = |n: &str| n.starts_with("transparent_hugepage.hugepages-");
    if known.iter().any(|k| k == name) || per_size(name) {
        return Ok(name.to_string());
    }
    if per_size(&format!("transparent_hugepage.{name}")) && p.name() == "linux-thp" {
        return Ok(format!("transparent_hugepage.{name}"));
    }
    let ends: Vec<&String> = known.iter().filter(|k| k.ends_with(&format!(".{name}"))).collect();
    match ends.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(format!("no tunable {name:?} (the {} policy's and the pmap's: {})", p.name(), known.join(", "))),
        many => Err(format!("{name:?} could be any of {}", many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))),
    }
}

/// The policies `--policies` names, in order.
#[derive(Clone, Debug)]
pub struct PolicyList(pub Vec<String>);

/// The list `--policies` takes: comma-separated entries
/// `POLICY[/NAME=VALUE...]`, no repeats.
pub fn policy_list(text: &str) -> Result<PolicyList, String> {
    let v: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
    if v.iter().any(|s| s.is_empty()) {
        return Err(format!("--policies {text:?}: an empty name in the list"));
    }
    for (i, p) in v.iter().enumerate() {
        let (spec, _) = policy_entry(p)?;
        splab_vm::policy::by_name(&spec).map_err(|e| format!("--policies {text:?}: {e}"))?;
        if v[..i].contains(p) {
            return Err(format!("--policies {text:?}: {p} is listed twice"));
        }
    }
    Ok(PolicyList(v))
}

/// Sysctls of a fresh system, for `splab sysctl`.
pub fn fresh_sysctls(m: &MachineArgs, memory: Option<&str>, on: bool, policy: &str, tunables: &[(String, String)]) -> Result<splab_vm::sysctl::Sysctls, Fail> {
    let mut cfg = setup::config_or_default(m, memory)?;
    cfg.superpages = on;
    setup::check_tunables(cfg.arch, policy, tunables)?;
    cfg.policy = policy.to_string();
    cfg.tunables = tunables.to_vec();
    let sys = setup::system(cfg)?;
    Ok(sys.sysctls())
}

