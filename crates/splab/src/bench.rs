//! `splab bench`: how fast the simulator runs and how much host memory it
//! needs. Each part runs in a child process (this executable, hidden
//! subcommand `bench-part`) so that its peak RSS (VmHWM) belongs to that
//! part alone and not to whatever ran before it in the same process.

use crate::error::{input, Fail};
use crate::formats::Formats;
use crate::output::{emit, json, num};
use crate::progress::Progress;
use crate::rss::peak_rss_bytes;
use splab_sim::ThreadBalance;
use crate::setup;
use crate::simulate::{self, RunOpts, SimRun};
use crate::spec::{RunSpec, SystemSpec, WorkloadName};
use splab_defs::WorkloadKind;
use splab_hw::size;
use clap::Args;
use serde::{Deserialize, Serialize};
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// The machine, policy and tunables of every part; `--memory` is the
    /// footprint test's modelled memory [default: 20G].
    #[command(flatten)]
    pub system: SystemSpec,
    /// GUPS table size (log2 of 64-bit words).
    #[arg(long, value_name = "N", default_value_t = 24)]
    pub log2_table: u32,
    /// Modelled memory of the GUPS runs.
    #[arg(long, value_name = "SIZE", default_value = "8G")]
    pub gups_memory: String,
    /// Anonymous memory the footprint test maps and touches.
    #[arg(long, value_name = "SIZE", default_value = "16G")]
    pub footprint: String,
    /// References of the generated binary trace the trace part replays.
    #[arg(long, value_name = "N", default_value_t = 48_000_000)]
    pub trace_refs: u64,
    /// Runs of each part, interleaved (all parts once, then again); the
    /// report gives the median run of each and the range of its rate.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: u32,
    /// Bytes of generated text the program part compresses with `xz -6
    /// -T1` (natively, then online in full detail, then sampled).
    #[arg(long, value_name = "SIZE", default_value = "8M")]
    pub program_text: String,
    /// The program part's `--sample`.
    #[arg(long, value_name = "DETAIL:PERIOD[:WARM]", default_value = "1M:10M")]
    pub program_sample: String,
    /// What runs the program part's program in the model, as `sim
    /// --frontend`.
    #[arg(long, value_name = "valgrind|dynamorio", default_value = "valgrind", env = "SPLAB_FRONTEND", value_parser = splab_trace::online::Frontend::parse)]
    pub frontend: splab_trace::online::Frontend,
    /// Leave the program part out (it needs valgrind and xz, and takes
    /// minutes).
    #[arg(long, conflicts_with = "only_program")]
    pub no_program: bool,
    /// Run the program part alone.
    #[arg(long)]
    pub only_program: bool,
    /// Another splab binary (an older build) to run the same parts with,
    /// interleaved with this one's (this, that, this, that...): the report
    /// sets the two medians side by side with the median of the runs'
    /// ratios. The program part is not run for it.
    #[arg(long, value_name = "SPLAB")]
    pub baseline: Option<std::path::PathBuf>,
}

/// One part's result, as the child prints it and the parent reads it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct GupsPart {
    pub refs: u64,
    pub host_seconds: f64,
    pub refs_per_second: f64,
    pub peak_rss_bytes: Option<u64>,
    /// Which of the two threads bounded the run (none from a build
    /// without it, as a baseline may be).
    #[serde(default)]
    pub host_threads: Option<ThreadBalance>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct FootprintPart {
    /// Bytes mapped and touched (one store per 4 KB page).
    pub bytes: u64,
    pub refs: u64,
    /// Wall time of the touching loop.
    pub host_seconds: f64,
    /// Wall time of building the system.
    pub host_setup_seconds: f64,
    pub peak_rss_bytes: Option<u64>,
    pub model_host_bytes: u64,
    pub promotions: Option<i64>,
}

/// Replay of a generated binary trace (`splab sim trace:FILE`).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct TracePart {
    /// What the trace is.
    pub pattern: String,
    /// References in the trace.
    pub refs: u64,
    pub trace_bytes: u64,
    /// Wall time of the replay: reading, decoding and simulating.
    pub host_seconds: f64,
    pub refs_per_second: f64,
    pub peak_rss_bytes: Option<u64>,
    #[serde(default)]
    pub host_threads: Option<ThreadBalance>,
}

/// A real program natively and online (`splab sim -- PROG`), in one
/// invocation: host times and their ratios to the native time.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ProgramPart {
    pub program_command: String,
    /// The front end that ran it online ("valgrind" or "dynamorio").
    #[serde(default)]
    pub frontend: String,
    pub text_bytes: u64,
    /// Wall and CPU seconds of the native run.
    pub native_seconds: f64,
    pub native_cpu_seconds: f64,
    /// Wall seconds of the online run in full detail (valgrind and the
    /// simulator together, system setup included), and over native.
    pub online_seconds: f64,
    pub online_ratio: f64,
    /// The same sampled.
    pub sample: String,
    pub sampled_seconds: f64,
    pub sampled_ratio: f64,
    pub refs: u64,
    pub instructions: u64,
    /// Simulated seconds in full detail, and the sampled estimate with its
    /// 95 % half-width.
    pub sim_seconds: f64,
    pub sampled_sim_seconds: f64,
    pub sampled_plus_minus: f64,
    pub peak_rss_bytes: Option<u64>,
}

/// Each part's median run (by rate), and every run in the order made.
#[derive(Serialize, Deserialize)]
struct Bench {
    repeat: u32,
    gups_off: Option<GupsPart>,
    gups_on: Option<GupsPart>,
    trace: Option<TracePart>,
    footprint: Option<FootprintPart>,
    program: Option<ProgramPart>,
    runs: Runs,
    /// With `--baseline`: the other binary, its runs, and per part the
    /// two medians and the median of this run's rate over the baseline's
    /// run next to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    baseline: Option<Baseline>,
}

#[derive(Serialize, Deserialize)]
struct Baseline {
    binary: String,
    runs: Runs,
    parts: Vec<PartVsBaseline>,
}

#[derive(Serialize, Deserialize)]
struct PartVsBaseline {
    part: String,
    refs_per_second: f64,
    baseline_refs_per_second: f64,
    /// Median over the interleaved pairs of this rate / the baseline's.
    median_ratio: f64,
}

/// The medians of two lists of rates and the median of their pairwise
/// ratios.
fn versus(part: &str, this: &[f64], that: &[f64]) -> PartVsBaseline {
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0.0)
    };
    let ratios: Vec<f64> = this.iter().zip(that).map(|(a, b)| a / b.max(1e-9)).collect();
    PartVsBaseline { part: part.into(), refs_per_second: med(this), baseline_refs_per_second: med(that), median_ratio: med(&ratios) }
}

#[derive(Serialize, Deserialize, Default)]
struct Runs {
    gups_off: Vec<GupsPart>,
    gups_on: Vec<GupsPart>,
    trace: Vec<TracePart>,
    footprint: Vec<FootprintPart>,
    program: Vec<ProgramPart>,
}

impl FootprintPart {
    fn refs_per_second(&self) -> f64 {
        self.refs as f64 / self.host_seconds.max(1e-9)
    }
}

/// The run with the median rate (the lower middle one of an even count).
fn median<T: Clone>(runs: &[T], rate: impl Fn(&T) -> f64) -> Option<T> {
    let mut v: Vec<&T> = runs.iter().collect();
    v.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    v.get(v.len().saturating_sub(1) / 2).map(|t| (*t).clone())
}

/// "min .. max" of the runs' rates.
fn range<T>(runs: &[T], rate: impl Fn(&T) -> f64) -> String {
    let r: Vec<f64> = runs.iter().map(rate).collect();
    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = r.iter().copied().fold(0.0, f64::max);
    format!("{} .. {}", num(lo.round()), num(hi.round()))
}

const PARTS: &[&str] = &["gups-off", "gups-on", "trace", "footprint", "program"];
/// Each of the triad's three arrays.
const TRIAD_ARRAY: u64 = 64 << 20;

/// The footprint test's modelled memory.
fn footprint_memory(a: &BenchArgs) -> &str {
    a.system.memory.as_deref().unwrap_or("20G")
}

/// The GUPS runs: the table of `--log2-table` on `--gups-memory`.
fn gups_spec(a: &BenchArgs) -> RunSpec {
    let mut spec = RunSpec::workload(WorkloadKind::Gups);
    spec.params.log2_table = Some(a.log2_table);
    spec.system = a.system.clone();
    spec.system.memory = Some(a.gups_memory.clone());
    spec
}

/// Checks every option before any child starts, so a typo is reported
/// once, by the parent, with exit status 2.
fn validate(a: &BenchArgs) -> Result<u64, Fail> {
    if a.repeat == 0 {
        return Err(Fail::Input("--repeat 0: at least one run of each part is needed".into()));
    }
    if let Some(b) = &a.baseline {
        if !b.is_file() {
            return Err(Fail::Input(format!("--baseline {}: no such file (the path of another splab binary)", b.display())));
        }
    }
    let g = gups_spec(a);
    let cfg = setup::run_config(&g)?;
    crate::workload::build(&g, &cfg, &Default::default())?;
    if !a.no_program {
        input(size::parse(&a.program_text)).map_err(|e| Fail::Input(format!("--program-text: {}", e.message())))?;
        splab_trace::online::Sample::parse(&a.program_sample).map_err(Fail::Input)?;
    }
    let memory = setup::config(&a.system.machine, footprint_memory(a))?.memory;
    let footprint = input(size::parse(&a.footprint)).map_err(|e| Fail::Input(format!("--footprint: {}", e.message())))?;
    if footprint == 0 || footprint >= memory {
        return Err(Fail::Input(format!(
            "--footprint {} must be more than 0 and less than --memory {}",
            a.footprint,
            footprint_memory(a)
        )));
    }
    Ok(footprint)
}

/// The options a child needs to repeat this run's configuration.
fn child_args(a: &BenchArgs) -> Vec<String> {
    let mut v = vec![
        "--log2-table".to_string(),
        a.log2_table.to_string(),
        "--gups-memory".into(),
        a.gups_memory.clone(),
        "--footprint".into(),
        a.footprint.clone(),
        "--memory".into(),
        footprint_memory(a).to_string(),
        "--trace-refs".into(),
        a.trace_refs.to_string(),
    ];
    let sys = &a.system;
    if let Some(machine) = &sys.machine.machine {
        v.extend(["--machine".to_string(), machine.clone()]);
    }
    if let Some(arch) = &sys.machine.arch {
        v.extend(["--arch".to_string(), arch.clone()]);
    }
    // Options older builds (a --baseline) may not have, passed only when set.
    if let Some(off) = &sys.machine.core_off {
        v.extend(["--core-off".to_string(), off.clone()]);
    }
    if sys.policy != SystemSpec::default().policy {
        v.extend(["--policy".to_string(), sys.policy.to_string()]);
    }
    for (n, x) in &sys.sysctl {
        v.extend(["--sysctl".to_string(), format!("{n}={x}")]);
    }
    if sys.swap != SystemSpec::default().swap {
        v.extend(["--swap".to_string(), sys.swap.clone()]);
    }
    v
}

/// The program part's options for a child, the front end included (the
/// child would otherwise take its default, or `SPLAB_FRONTEND`, and
/// measure another front end than the one asked for).
fn program_args(a: &BenchArgs) -> Vec<String> {
    ["--program-text", &a.program_text, "--program-sample", &a.program_sample, "--frontend", a.frontend.flag()].map(String::from).to_vec()
}

/// Runs one part in a child process and parses what it prints.
fn spawn_part<T: for<'de> Deserialize<'de>>(a: &BenchArgs, part: &str, quiet: bool) -> Result<T, Fail> {
    spawn_part_of(&crate::workers::own_command()?, a, part, quiet, true)
}

/// Runs one part with `splab`, the command that runs a splab (this one, or
/// a baseline binary); the program part's options are passed only when
/// `program_args` (a baseline may predate them).
fn spawn_part_of<T: for<'de> Deserialize<'de>>(splab: &[String], a: &BenchArgs, part: &str, quiet: bool, program_args: bool) -> Result<T, Fail> {
    let (exe, first) = splab.split_first().ok_or_else(|| Fail::Run("no command to run bench parts with".into()))?;
    let mut cmd = Command::new(exe);
    cmd.args(first);
    let mut args = child_args(a);
    if program_args {
        args.extend(self::program_args(a));
    }
    cmd.arg("bench-part").arg(part).args(args);
    if quiet {
        cmd.arg("--quiet");
    }
    // A part ends with the bench that started it: a signal that ends the
    // bench (a plain `kill`, which reaches only its own process) would
    // otherwise leave the part running on.
    crate::workers::die_with_parent(&mut cmd);
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Fail::Run(format!("bench part {part}: cannot start: {e}")))?;
    if !out.status.success() {
        return Err(Fail::Run(format!("bench part {part} failed ({})", out.status)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| Fail::Run(format!("bench part {part}: unreadable output: {e}")))
}

pub fn cmd(a: &BenchArgs, out: &Formats) -> Result<i32, Fail> {
    validate(a)?;
    out.check()?;
    let as_json = out.machine_readable();
    let mut runs = Runs::default();
    let mut base = Runs::default();
    let baseline = if a.only_program { None } else { a.baseline.as_ref().map(|b| vec![b.display().to_string()]) };
    for _ in 0..a.repeat {
        if !a.only_program {
            runs.gups_off.push(spawn_part(a, "gups-off", as_json)?);
            if let Some(b) = &baseline {
                base.gups_off.push(spawn_part_of(b, a, "gups-off", as_json, false)?);
            }
            runs.gups_on.push(spawn_part(a, "gups-on", as_json)?);
            if let Some(b) = &baseline {
                base.gups_on.push(spawn_part_of(b, a, "gups-on", as_json, false)?);
            }
            runs.trace.push(spawn_part(a, "trace", as_json)?);
            if let Some(b) = &baseline {
                base.trace.push(spawn_part_of(b, a, "trace", as_json, false)?);
            }
            runs.footprint.push(spawn_part(a, "footprint", as_json)?);
            if let Some(b) = &baseline {
                base.footprint.push(spawn_part_of(b, a, "footprint", as_json, false)?);
            }
        }
        if !a.no_program {
            runs.program.push(spawn_part(a, "program", as_json)?);
        }
    }
    let b = Bench {
        repeat: a.repeat,
        gups_off: median(&runs.gups_off, |g| g.refs_per_second),
        gups_on: median(&runs.gups_on, |g| g.refs_per_second),
        trace: median(&runs.trace, |t| t.refs_per_second),
        footprint: median(&runs.footprint, FootprintPart::refs_per_second),
        program: median(&runs.program, |p| -p.online_ratio),
        baseline: baseline.map(|path| {
            let rates = |r: &Runs| -> [Vec<f64>; 4] {
                [
                    r.gups_off.iter().map(|g| g.refs_per_second).collect(),
                    r.gups_on.iter().map(|g| g.refs_per_second).collect(),
                    r.trace.iter().map(|t| t.refs_per_second).collect(),
                    r.footprint.iter().map(FootprintPart::refs_per_second).collect(),
                ]
            };
            let (this, that) = (rates(&runs), rates(&base));
            let names = ["GUPS superpages off", "GUPS superpages on", "trace replay", "footprint"];
            let parts = (0..4).map(|i| versus(names[i], &this[i], &that[i])).collect();
            Baseline { binary: path.join(" "), runs: base, parts }
        }),
        runs,
    };
    out.emit(&b, |b| human(a, b))?;
    Ok(0)
}

fn mib(b: Option<u64>) -> String {
    b.map(|b| format!("{:.1}", b as f64 / (1 << 20) as f64)).unwrap_or_else(|| "?".into())
}

fn human(a: &BenchArgs, b: &Bench) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "splab bench: the simulator's speed on this host; splab build {}\n", crate::output::BUILD);
    let _ = writeln!(
        o,
        "{:<28}{:>12}{:>10}{:>12}{:>24}{:>10}",
        "part", "sim refs", "host s", "refs/s", "refs/s, all runs", "RSS MiB"
    );
    let mut row = |name: &str, refs: u64, secs: f64, rate: f64, all: String, rss: Option<u64>| {
        let _ = writeln!(o, "{:<28}{:>12}{:>10}{:>12}{:>24}{:>10}", name, refs, num(secs), num(rate.round()), all, mib(rss));
    };
    let gr = |g: &GupsPart| g.refs_per_second;
    for (name, g, all) in [("GUPS superpages off", &b.gups_off, &b.runs.gups_off), ("GUPS superpages on", &b.gups_on, &b.runs.gups_on)] {
        if let Some(g) = g {
            row(name, g.refs, g.host_seconds, g.refs_per_second, range(all, gr), g.peak_rss_bytes);
        }
    }
    if let Some(t) = &b.trace {
        row("trace replay, superpages on", t.refs, t.host_seconds, t.refs_per_second, range(&b.runs.trace, |t| t.refs_per_second), t.peak_rss_bytes);
    }
    if let Some(f) = &b.footprint {
        row("footprint, superpages on", f.refs, f.host_seconds, f.refs_per_second(), range(&b.runs.footprint, FootprintPart::refs_per_second), f.peak_rss_bytes);
    }
    if let Some(p) = &b.program {
        row("program online, full detail", p.refs, p.online_seconds, p.refs as f64 / p.online_seconds.max(1e-9), range(&b.runs.program, |p| p.refs as f64 / p.online_seconds.max(1e-9)), p.peak_rss_bytes);
    }
    let _ = writeln!(o, "(median run of {} of each part, run interleaved; peak RSS of that run)", b.repeat);
    let threads = [("GUPS superpages off", b.gups_off.as_ref().and_then(|g| g.host_threads)), ("GUPS superpages on", b.gups_on.as_ref().and_then(|g| g.host_threads)), ("trace replay", b.trace.as_ref().and_then(|t| t.host_threads))];
    if threads.iter().any(|t| t.1.is_some_and(|t| t.batches > 0)) {
        let _ = writeln!(o, "
The two threads of the median runs, host microseconds a batch handed over (the slower one bounds the rate):");
        let _ = writeln!(o, "{:<28}{:>10}{:>14}{:>10}{:>14}", "part", "batches", "translating", "waiting", "timing");
        for (name, t) in threads {
            let Some(t) = t.filter(|t| t.batches > 0) else { continue };
            let us = |s: f64| format!("{:.1}", s / t.batches as f64 * 1e6);
            let _ = writeln!(o, "{:<28}{:>10}{:>14}{:>10}{:>14}", name, t.batches, us(t.translate_seconds), us(t.waited_seconds), us(t.timing_seconds));
        }
    }
    if let Some(base) = &b.baseline {
        let _ = writeln!(o, "\nAgainst {} (its runs interleaved with these):", base.binary);
        let _ = writeln!(o, "{:<28}{:>14}{:>14}{:>22}", "part", "refs/s", "baseline", "median of ratios");
        for p in &base.parts {
            let _ = writeln!(o, "{:<28}{:>14}{:>14}{:>22}", p.part, num(p.refs_per_second.round()), num(p.baseline_refs_per_second.round()), format!("{:.3}", p.median_ratio));
        }
    }
    if let Some(p) = &b.program {
        let _ = writeln!(o, "\nProgram: {} of {} of generated text, natively {} s wall ({} s CPU); superpages on, under {}:", p.program_command, size::show(p.text_bytes), num(p.native_seconds), num(p.native_cpu_seconds), if p.frontend.is_empty() { "valgrind" } else { &p.frontend });
        let ratios = |f: fn(&ProgramPart) -> f64| b.runs.program.iter().map(|p| format!("{:.1}", f(p))).collect::<Vec<_>>().join(", ");
        let _ = writeln!(o, "  online, full detail  {:>9} s  {:>6.1}x native (all runs: {})  simulated {:.4} s", num(p.online_seconds), p.online_ratio, ratios(|p| p.online_ratio), p.sim_seconds);
        let _ = writeln!(
            o,
            "  online, --sample {}  {:>9} s  {:>6.1}x native (all runs: {})  simulated {:.4} ± {:.4} s",
            p.sample,
            num(p.sampled_seconds),
            p.sampled_ratio,
            ratios(|p| p.sampled_ratio),
            p.sampled_sim_seconds,
            p.sampled_plus_minus
        );
        let _ = writeln!(o, "  {} references, {} instructions", p.refs, p.instructions);
    }
    let (Some(t), Some(f)) = (&b.trace, &b.footprint) else { return o };
    let _ = writeln!(o, "\nTrace: {}, a {} binary trace read from a file.", t.pattern, size::show(t.trace_bytes));
    let _ = writeln!(
        o,
        "GUPS: table 2^{} words, {} modelled memory. Footprint: {} touched (one store per 4 KB page) of {} modelled memory;\nmodel's own host memory {} MiB, setup {} s, {} 2MB promotions.",
        a.log2_table,
        a.gups_memory,
        size::show(f.bytes),
        footprint_memory(a),
        mib(Some(f.model_host_bytes)),
        num(f.host_setup_seconds),
        f.promotions.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
    );
    o
}

#[derive(Args, Clone, Debug)]
pub struct PartArgs {
    /// gups-off, gups-on or footprint.
    pub part: String,
    #[command(flatten)]
    pub bench: BenchArgs,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The child side: runs one part and prints its JSON.
pub fn part(p: &PartArgs) -> Result<i32, Fail> {
    let a = &p.bench;
    let footprint = validate(a)?;
    let text = match p.part.as_str() {
        "gups-off" | "gups-on" => {
            let mut spec = gups_spec(a);
            spec.superpages = p.part == "gups-on";
            let r = simulate::simulate(&spec, &quiet(p.quiet))?;
            json(&GupsPart {
                refs: r.refs,
                host_seconds: r.host_seconds,
                refs_per_second: r.refs_per_second(),
                peak_rss_bytes: peak_rss_bytes(),
                host_threads: Some(r.host_threads),
            })
        }
        "footprint" => json(&touch(a, footprint, p.quiet)?),
        "trace" => json(&trace_replay(a, p.quiet)?),
        "program" => json(&program(a, p.quiet)?),
        other => return Err(Fail::Input(format!("unknown bench part {other:?} (known: {})", PARTS.join(", ")))),
    };
    emit(&text);
    Ok(0)
}

/// The footprint test: one process maps `bytes` of anonymous memory and
/// stores one word to every 4 KB page of it, superpages on.
fn touch(a: &BenchArgs, bytes: u64, quiet: bool) -> Result<FootprintPart, Fail> {
    let sys = SystemSpec { memory: Some(footprint_memory(a).to_string()), ..a.system.clone() };
    let cfg = setup::system_config(&sys, true)?;
    let t0 = Instant::now();
    let mut sys = setup::system(cfg)?;
    let host_setup_seconds = t0.elapsed().as_secs_f64();
    let run = |e: String| Fail::Run(format!("footprint test: {e}"));
    let pid = sys.spawn().map_err(|e| run(format!("spawn: {e}")))?;
    sys.run_on(0, pid).map_err(|e| run(format!("run: {e}")))?;
    let base = sys.mmap(pid, MmapReq::anon(bytes, prot::RW)).map_err(|e| run(format!("mmap of {bytes} bytes: {e}")))?.0;
    let pages = bytes / 4096;
    let mut bar = Progress::new(pages, "footprint", "pages", quiet);
    let t1 = Instant::now();
    for i in 0..pages {
        sys.store(0, base + i * 4096, i).map_err(|e| run(format!("store to page {i}: {e}")))?;
        if i & 0xffff == 0 {
            bar.update(i);
        }
    }
    let host_seconds = t1.elapsed().as_secs_f64();
    bar.finish();
    Ok(FootprintPart {
        bytes: pages * 4096,
        refs: sys.hw().refs,
        host_seconds,
        host_setup_seconds,
        peak_rss_bytes: peak_rss_bytes(),
        model_host_bytes: sys.model_host_bytes(),
        // The 2 MB counter by its amd64 or riscv/arm64 name (arm64's
        // event count also includes its 64 KB promotions).
        promotions: ["vm.pmap.pde.promotions", "vm.pmap.l2.promotions"].iter().find_map(|n| sys.sysctls().get_int(n)),
    })
}

/// A temporary file of this run's, `splab-bench-PID-NAME`, after removing
/// those of benches no longer running (a part killed by a signal, or with
/// its bench, cannot remove its own).
fn temp_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir();
    splab_trace::online::sweep(&dir, "splab-bench-");
    dir.join(format!("splab-bench-{}-{name}", std::process::id()))
}

/// The trace part: writes a STREAM-triad trace (three 64 MiB arrays) of
/// `--trace-refs` references to a temporary file, then replays it with
/// superpages on, as `splab sim trace:FILE` does.
fn trace_replay(a: &BenchArgs, quiet: bool) -> Result<TracePart, Fail> {
    let path = temp_file("triad.trace");
    let written = splab_trace::synth::triad(&path, a.trace_refs, TRIAD_ARRAY)
        .map_err(|e| Fail::Run(format!("writing the bench trace {}: {e}", path.display())));
    let r = written.and_then(|_| {
        let mut spec = gups_spec(a);
        spec.workload = Some(WorkloadName::Trace(path.clone()));
        spec.params = Default::default();
        simulate::simulate(&spec, &self::quiet(quiet))
    });
    let trace_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&path);
    let r = r?;
    Ok(TracePart {
        pattern: format!("STREAM triad a[i] = b[i] + s*c[i] over three {} arrays, 8-byte loads and stores", size::show(TRIAD_ARRAY)),
        refs: a.trace_refs,
        trace_bytes,
        host_seconds: r.host_seconds,
        refs_per_second: a.trace_refs as f64 / r.host_seconds.max(1e-9),
        peak_rss_bytes: peak_rss_bytes(),
        host_threads: Some(r.host_threads),
    })
}

/// `bytes` of text in lines of 4 to 9 words drawn from 50 000 random
/// words of 3 to 10 letters (as docs/native-programs.md makes xz's input),
/// the same for every run.
fn words_text(bytes: u64) -> Vec<u8> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let words: Vec<Vec<u8>> = (0..50_000).map(|_| (0..3 + next(8)).map(|_| b'a' + next(26) as u8).collect()).collect();
    let mut out = Vec::with_capacity(bytes as usize + 128);
    while (out.len() as u64) < bytes {
        let n = 4 + next(6);
        for k in 0..n {
            if k > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(&words[next(words.len() as u64) as usize]);
        }
        out.push(b'\n');
    }
    out.truncate(bytes as usize);
    out
}

/// The program part: `xz -6 -T1 -c` of generated text natively, then
/// online in full detail, then sampled, superpages on.
fn program(a: &BenchArgs, quiet: bool) -> Result<ProgramPart, Fail> {
    use splab_trace::online::Io;
    let bytes = input(size::parse(&a.program_text)).map_err(|e| Fail::Input(format!("--program-text: {}", e.message())))?;
    let path = temp_file("words.txt");
    std::fs::write(&path, words_text(bytes)).map_err(|e| Fail::Run(format!("{}: {e}", path.display())))?;
    let argv: Vec<String> = vec!["xz".into(), "-6".into(), "-T1".into(), "-c".into(), path.display().to_string()];
    let r = (|| {
        let t0 = Instant::now();
        let native = Command::new(&argv[0]).args(&argv[1..]).stdin(Stdio::null()).stdout(Stdio::null()).status();
        let native_seconds = t0.elapsed().as_secs_f64();
        let native_cpu_seconds = children_cpu_seconds();
        match native {
            Ok(s) if s.success() => {}
            Ok(s) => return Err(Fail::Run(format!("{} exited with {s}", argv.join(" ")))),
            Err(e) => return Err(Fail::Input(format!("cannot run {}: {e} (Debian: apt-get install xz-utils)", argv[0]))),
        }
        let mut spec = gups_spec(a);
        spec.workload = None;
        spec.params = Default::default();
        spec.system.memory = None;
        spec.program = argv.clone();
        let opts = RunOpts { io: crate::workload::ProgramIo { stdin: Io::Null, stdout: Io::Null, frontend: a.frontend, ..Default::default() }, ..self::quiet(quiet) };
        let t1 = Instant::now();
        let full = simulate::simulate(&spec, &opts)?;
        let online_seconds = t1.elapsed().as_secs_f64();
        spec.sample = Some(a.program_sample.clone());
        let t2 = Instant::now();
        let sampled = simulate::simulate(&spec, &opts)?;
        let sampled_seconds = t2.elapsed().as_secs_f64();
        let get = |r: &SimRun, k: &str| r.program.as_ref().and_then(|p| p.get(k)).and_then(|v| v.as_u64()).unwrap_or(0);
        let est = |k: &str| sampled.program.as_ref().and_then(|p| p.pointer(&format!("/sampled/sim_seconds/{k}"))).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        Ok(ProgramPart {
            program_command: "xz -6 -T1 -c TEXT".to_string(),
            frontend: a.frontend.name().to_string(),
            text_bytes: bytes,
            native_seconds,
            native_cpu_seconds,
            online_seconds,
            online_ratio: online_seconds / native_seconds,
            sample: a.program_sample.clone(),
            sampled_seconds,
            sampled_ratio: sampled_seconds / native_seconds,
            refs: get(&full, "refs"),
            instructions: get(&full, "instructions"),
            sim_seconds: full.sim_seconds,
            sampled_sim_seconds: est("value"),
            sampled_plus_minus: est("plus_minus"),
            peak_rss_bytes: peak_rss_bytes(),
        })
    })();
    let _ = std::fs::remove_file(&path);
    r
}

/// A run's options: a progress bar unless `quiet`.
fn quiet(quiet: bool) -> RunOpts {
    RunOpts { quiet, ..RunOpts::default() }
}

/// User and system seconds of this process's waited-for children.
fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    s(u.ru_utime) + s(u.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A baseline build that does not report its threads still parses.
    #[test]
    fn parts_from_builds_without_thread_balance_parse() {
        let g: GupsPart = serde_json::from_str(r#"{"refs":1,"host_seconds":1.0,"refs_per_second":1.0,"peak_rss_bytes":null}"#).unwrap();
        assert!(g.host_threads.is_none());
        let t: TracePart = serde_json::from_str(r#"{"pattern":"p","refs":1,"trace_bytes":8,"host_seconds":1.0,"refs_per_second":1.0,"peak_rss_bytes":7}"#).unwrap();
        assert!(t.host_threads.is_none());
    }
}
