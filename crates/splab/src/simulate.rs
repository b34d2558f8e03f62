//! `splab sim` and `splab compare`: run a workload on a fresh system and
//! collect everything worth reporting about the run into one record, which
//! is both what the JSON output serialises and what the tables are drawn
//! from.

use crate::error::Fail;
use crate::progress::Progress;
use crate::rss::{RssSample, Sampler};
use crate::setup;
use crate::spec::{RunSpec, SystemSpec};
use crate::workload::{self, ProgramIo};
use clap::Args;
use serde::Serialize;
use splab_trace::online::Io;
use std::io::IsTerminal;
use splab_hw::profile::Profile;
use splab_sim::system::{HwStats, MemoryReport, TlbReport};
use splab_sim::timing::CycleBreakdown;
use splab_vm::pmap::KernelEvents;
use splab_vm::policy::{PolicyKind, PolicySpec};
use splab_vm::sysctl::SysctlValue;
use splab_workloads::Figure;
use std::collections::BTreeMap;
use std::time::Instant;

/// How a run is carried out, beside what it computes (the spec): none of
/// these changes a simulated figure.
#[derive(Clone, Debug, Default)]
pub struct RunOpts {
    /// No progress bar.
    pub quiet: bool,
    /// One host thread (by default the cache model of large batches runs
    /// on a second one).
    pub single_thread: bool,
    /// A program's standard input and output, and its valgrind.
    pub io: ProgramIo,
    /// The profile to run on instead of the one the spec names (of the
    /// same architecture: validate's profile with its memory moved).
    pub profile: Option<Profile>,
}

/// The command-line options of a run that are not part of its spec.
#[derive(Args, Clone, Debug)]
pub struct RunOptArgs {
    /// Programs: where their standard output goes, never into splab's
    /// report: null (/dev/null), pipe (a pipe splab reads and throws away,
    /// for programs that behave otherwise on /dev/null), inherit (splab's
    /// standard error; with compare, of the superpages-on run only), or a
    /// FILE (each run writes it anew) [default: null].
    #[arg(long, value_name = "null|pipe|inherit|FILE", value_parser = output_io)]
    pub output: Option<Io>,
    /// Programs: the valgrind to run them under [default: valgrind, from
    /// PATH].
    #[arg(long, value_name = "PATH")]
    pub valgrind: Option<std::path::PathBuf>,
    /// Programs: what runs them and writes their references: splab's
    /// valgrind tool, or its DynamoRIO client (loads and stores in full
    /// detail, block tables, no map events, no --sample yet).
    #[arg(long, value_name = "valgrind|dynamorio", default_value = "valgrind", env = "SPLAB_FRONTEND", value_parser = splab_trace::online::Frontend::parse)]
    pub frontend: splab_trace::online::Frontend,
    /// Use one host thread (by default the cache model of large batches
    /// runs on a second one); the results are the same. For running many
    /// simulations at once.
    #[arg(long)]
    pub single_thread: bool,
}

impl RunOptArgs {
    /// The options of a run with a progress bar unless `quiet`, a
    /// program's input splab's own.
    pub fn opts(&self, quiet: bool) -> RunOpts {
        let d = ProgramIo::default();
        let io = ProgramIo { stdin: Io::Inherit, stdout: self.output.clone().unwrap_or(d.stdout), valgrind: self.valgrind.clone().unwrap_or(d.valgrind), frontend: self.frontend };
        RunOpts { quiet, single_thread: self.single_thread, io, profile: None }
    }

    /// The options that only a program run reads, given for a run of a
    /// workload or a trace: an error naming the first, not a run that
    /// ignores it.
    pub fn check_for(&self, spec: &RunSpec) -> Result<(), Fail> {
        if !spec.program.is_empty() {
            return Ok(());
        }
        if self.output.is_some() {
            return Err(Fail::Input("--output: only a program after -- has output to send".into()));
        }
        if let Some(v) = &self.valgrind {
            return Err(Fail::Input(format!("--valgrind {}: only a program after -- runs under valgrind", v.display())));
        }
        Ok(())
    }
}

/// Everything about one run.
#[derive(Serialize)]
pub struct SimRun {
    /// What ran, every default written out (`setup::resolved`).
    pub spec: RunSpec,
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
    /// How the batches kept the simulator's two threads busy: which one
    /// bounds its speed (`System::thread_balance`).
    pub host_threads: splab_sim::ThreadBalance,
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

/// Runs `spec` once.
pub fn simulate(spec: &RunSpec, opts: &RunOpts) -> Result<SimRun, Fail> {
    let mut cfg = setup::run_config(spec)?;
    if let Some(p) = &opts.profile {
        cfg.profile = p.clone();
    }
    cfg.timing_thread = !opts.single_thread;
    let resolved = setup::resolved(spec)?;
    // The workload is built before the system so that its errors come
    // before the (for large memories, slow) setup.
    let mut w = workload::build(spec, &cfg, &opts.io)?;
    let arch = cfg.arch.name.to_string();
    let machine = cfg.profile.name.clone();
    let t0 = Instant::now();
    let mut sys = setup::system(cfg)?;
    let host_setup_seconds = t0.elapsed().as_secs_f64();

    let on = spec.superpages;
    let label = if on { "superpages on" } else { "superpages off" };
    let mut bar = Progress::new(w.estimated_refs(sys.line_bytes()), label, "refs", opts.quiet);
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
        spec: resolved,
        workload: spec.label(),
        policy: spec.system.policy.to_string(),
        workload_detail: w.name(),
        arch,
        machine,
        memory_bytes: sys.cfg.memory,
        swap_bytes: sys.cfg.swap,
        superpages: on,
        fragment: spec.fragment,
        aged: sys.cfg.age(),
        aged_run: sys.cfg.profile.memory.aged_run.unwrap_or(1),
        seed: spec.seed,
        figure: result.figure,
        details: result.details,
        report: result.report,
        sysctl: sys.sysctls().values,
        refs: sys.hw().refs,
        sim_seconds: result.timed_seconds,
        sim_seconds_total: sys.sim_seconds(),
        host_seconds,
        host_setup_seconds,
        host_threads: sys.thread_balance(),
        tlb: sys.tlb_report(),
        hw: sys.hw(),
        events: sys.events().clone(),
        cycles: sys.breakdown(),
        host_model_bytes: sys.model_host_bytes(),
        stale_samples: spec.check_tlb.then(|| sys.stale_samples.clone()),
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
fn output_io(s: &str) -> Result<Io, String> {
    Ok(match s {
        "null" => Io::Null,
        "pipe" => Io::Pipe,
        "inherit" => Io::Stderr,
        "" => return Err("give null, pipe, inherit or a file name".into()),
        f => Io::File(f.into()),
    })
}

/// Runs `spec` superpages off, then on, each on a fresh system. A program
/// runs twice: its standard input is read once (into a file both runs
/// read, unless it has `--input`), and the second run's output is the one
/// shown (`inherit`: the on run's shown, the off run's dropped).
pub fn compare(spec: &RunSpec, opts: &RunOpts) -> Result<Comparison, Fail> {
    let (mut off, mut on) = (spec.clone(), spec.clone());
    off.superpages = false;
    on.superpages = true;
    // Both runs' settings are checked before the first starts.
    setup::run_config(&on)?;
    let (mut off_opts, mut on_opts) = (opts.clone(), opts.clone());
    let _spool;
    if !spec.program.is_empty() {
        workload::online(spec, &opts.io)?;
        let spool = Spool::stdin(&opts.io.stdin)?;
        for o in [&mut off_opts, &mut on_opts] {
            o.io.stdin = spool.io.clone();
        }
        if opts.io.stdout == Io::Stderr {
            off_opts.io.stdout = Io::Null;
        }
        _spool = spool;
    }
    let off = simulate(&off, &off_opts)?;
    let on = simulate(&on, &on_opts)?;
    Ok(comparison(spec.label(), off, on))
}

/// Standard input for runs of a program more than once: a file holding
/// what splab's standard input gives (a terminal, a file or none are left
/// as they are).
pub struct Spool {
    pub io: Io,
    path: Option<std::path::PathBuf>,
}

impl Spool {
    pub fn stdin(io: &Io) -> Result<Spool, Fail> {
        if *io != Io::Inherit || std::io::stdin().is_terminal() {
            return Ok(Spool { io: io.clone(), path: None });
        }
        splab_trace::online::sweep(&std::env::temp_dir(), "splab-stdin-");
        let path = std::env::temp_dir().join(format!("splab-stdin-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).map_err(|e| Fail::Run(format!("{}: {e}", path.display())))?;
        let spool = Spool { io: Io::File(path.clone()), path: Some(path.clone()) };
        std::io::copy(&mut std::io::stdin().lock(), &mut f).map_err(|e| Fail::Run(format!("reading standard input into {}: {e}", path.display())))?;
        Ok(spool)
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The exit status splab takes from the program it ran (as a shell gives
/// it: 128 + the signal that ended it), None when it exited 0 or no
/// program ran.
pub fn exit_status(program: Option<&serde_json::Value>) -> Option<i32> {
    let p = program?;
    if let Some(c) = p.get("exit_status").and_then(|v| v.as_i64()) {
        return (c != 0).then_some(c as i32);
    }
    p.get("signal").and_then(|v| v.as_i64()).map(|s| 128 + s as i32)
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
pub fn compare_policies(spec: &RunSpec, policies: &[String], opts: &RunOpts) -> Result<PolicyComparison, Fail> {
    // Every policy and its settings are checked before the first run starts.
    let cfg = setup::config_or_default(&spec.system.machine, spec.system.memory.as_deref())?;
    let mut plans = Vec::new();
    for entry in policies {
        let (p, own) = policy_entry(entry).map_err(Fail::Input)?;
        let built = setup::check_policy(cfg.arch, &p)?;
        let own = own.into_iter().map(|(n, v)| Ok((full_tunable_name(cfg.arch, built.as_ref(), &n).map_err(|e| Fail::Input(format!("--policies {entry}: {e}")))?, v))).collect::<Result<Vec<_>, Fail>>()?;
        let mut one = spec.clone();
        one.superpages = true;
        one.system.policy = p;
        one.system.sysctl.extend(own);
        setup::run_config(&one)?;
        plans.push(one);
    }
    let mut runs = Vec::new();
    for one in plans {
        runs.push(simulate(&one, opts)?);
    }
    Ok(PolicyComparison { workload: spec.label(), policies: policies.to_vec(), runs })
}

/// One entry of `--policies`: a policy and settings for its run alone,
/// `POLICY[/NAME=VALUE...]`, e.g.
/// `linux-thp:madvise/khugepaged.scan_sleep_millisecs=100`.
fn policy_entry(entry: &str) -> Result<(PolicySpec, Vec<(String, String)>), String> {
    let mut parts = entry.split('/');
    let name = parts.next().unwrap_or_default().trim();
    let spec = PolicySpec::parse(name).map_err(|e| format!("--policies {entry:?}: {e}"))?;
    let settings = parts.map(|t| crate::spec::tunable(t).map_err(|e| format!("--policies {entry}: {e}"))).collect::<Result<Vec<_>, _>>()?;
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
    if per_size(&format!("transparent_hugepage.{name}")) && p.kind() == PolicyKind::LinuxThp {
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
        policy_entry(p)?;
        if v[..i].contains(p) {
            return Err(format!("--policies {text:?}: {p} is listed twice"));
        }
    }
    Ok(PolicyList(v))
}

/// Sysctls of a fresh system, for `splab sysctl`.
pub fn fresh_sysctls(sys: &SystemSpec, on: bool) -> Result<splab_vm::sysctl::Sysctls, Fail> {
    // The tunables are set whatever `on` says: the system as booted.
    let mut cfg = setup::system_config(sys, true)?;
    cfg.superpages = on;
    Ok(setup::system(cfg)?.sysctls())
}
