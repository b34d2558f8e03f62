//! `splab native -- PROG ARGS...` and `splab promote -- PROG ARGS...`:
//! an unmodified program run in each page layout and reported as hyperfine
//! reports commands (and exported in its file formats), or just run under
//! the promotion monitor.

use crate::formats::Formats;
use crate::error::{input, Fail};
use crate::output::{emit, json};
use crate::progress::Progress;
use clap::{Args, ValueEnum};
use splab_hw::size;
use splab_native::hugetlb::Pool;
use splab_native::pages::Pages;
use splab_native::program::{self, Program, RunOpts, Setup};
use splab_native::programs::{self, LayoutResult, Plan, ProgramsReport, Stat};
use splab_native::promote;
use splab_native::sysstate;
use std::fmt::Write as _;
use std::time::Duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PoolMode {
    /// Grow the hugetlb pool as root when it has too few free pages, and
    /// put it back afterwards.
    Grow,
    /// Use only pages already in the pool.
    Keep,
}

/// The options of `splab native -- PROG` beside the layouts and repeats.
#[derive(Args, Clone, Debug)]
pub struct ProgramArgs {
    /// Programs: runs of each layout before the counted ones (warm the
    /// page cache), not counted.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warmup: u32,
    /// Programs: standard input from this file [default: /dev/null].
    #[arg(long, value_name = "FILE")]
    pub input: Option<std::path::PathBuf>,
    /// Programs: also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<std::path::PathBuf>,
    /// Programs: write a CSV summary (one row per layout) to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<std::path::PathBuf>,
    /// Programs: write a Markdown table to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<std::path::PathBuf>,
    /// Programs under promote: how often the monitor looks at the program's resident size,
    /// milliseconds; it scans the page tables when that grew by 2 MB, at
    /// most as often as keeps scanning under 1% of a CPU.
    #[arg(long, value_name = "MS", default_value_t = 20)]
    pub interval: u64,
}

/// A time as hyperfine shows it: seconds, or milliseconds below one.
fn t(v: f64) -> String {
    if v.abs() >= 1.0 {
        format!("{v:.3} s")
    } else {
        format!("{:.1} ms", v * 1e3)
    }
}

fn b(v: f64) -> String {
    if v <= 0.0 {
        "0".into()
    } else {
        size::show(v.round() as u64)
    }
}

fn ratio(s: &Option<Stat>) -> String {
    match s {
        Some(s) if s.stddev > 0.0 => format!("{:.2} ± {:.2}", s.median, s.stddev),
        Some(s) => format!("{:.2}", s.median),
        None => "-".into(),
    }
}

fn layout_block(o: &mut String, l: &LayoutResult) {
    let _ = writeln!(o, "Layout {}: {}", l.pages, if l.method.is_empty() { "-" } else { &l.method });
    if let Some(why) = &l.skip_reason {
        let _ = writeln!(o, "  {}: {why}", if l.runs.is_empty() { "SKIPPED" } else { "then stopped" });
        if l.runs.is_empty() {
            return;
        }
    }
    let failed: Vec<String> = l.runs.iter().filter_map(|r| Some(format!("round {}: {}", r.round + 1, r.failed.as_ref()?))).collect();
    let (Some(w), Some(u), Some(s)) = (&l.wall, &l.user, &l.sys) else {
        let _ = writeln!(o, "  no run finished: {}", failed.join("; "));
        if let Some(e) = &l.error {
            let _ = writeln!(o, "  ERROR: {e}");
        }
        return;
    };
    let left_out = if l.failed > 0 { format!(" ({} failed, left out)", l.failed) } else { String::new() };
    let _ = writeln!(o, "  Time (median):       {}", t(w.median));
    let _ = writeln!(o, "  Time (mean ± σ):     {} ± {}    [User: {}, System: {}]", t(w.mean), t(w.stddev), t(u.mean), t(s.mean));
    let _ = writeln!(o, "  Range (min … max):   {} … {}    {} runs{left_out}", t(w.min), t(w.max), l.counted);
    if let Some(r) = &l.peak_rss {
        let tree = l.tree_rss.as_ref().map(|x| format!("; whole tree, sampled: {}", b(x.median))).unwrap_or_default();
        let _ = writeln!(o, "  Peak RSS:            {} [{} … {}] (largest process, ru_maxrss){tree}", b(r.median), b(r.min), b(r.max));
    }
    let huge = l.anon_huge.as_ref().map_or(0.0, |x| x.median);
    let tlb = l.hugetlb.as_ref().map_or(0.0, |x| x.median);
    let mut mem = format!("  Huge pages (peak):   AnonHugePages {}, hugetlb {}", b(huge), b(tlb));
    let small: Vec<String> = l.thp_fault_alloc.iter().filter(|(k, _)| k.as_str() != "2048kB").map(|(k, v)| format!("{k} {v}")).collect();
    if !small.is_empty() {
        let _ = write!(mem, "; mTHP faults (system-wide, all runs): {}", small.join(", "));
    }
    let _ = writeln!(o, "{mem}");
    if let Some(p) = &l.promote {
        let _ = writeln!(o, "  Promotion:           vm.pmap.pde.promotions {}, vm.pmap.pde.p_failures {} (medians of the runs)", p.promotions, p.p_failures);
        for (r, n) in &p.failure_reasons {
            let _ = writeln!(o, "                       p_failures, {r}: {n} (all runs)");
        }
        if p.not_exclusive > 0 {
            let _ = writeln!(o, "                       full ranges left alone, shared with another process: {} (all runs)", p.not_exclusive);
        }
        let _ = writeln!(
            o,
            "  Monitor CPU:         {} ({:.2}% of the program's user + system time; scanning {}, collapsing {}; {}, medians)",
            t(p.cpu_seconds),
            100.0 * p.cpu_share,
            t(p.scan_cpu_seconds),
            t(p.collapse_cpu_seconds),
            p.scanner
        );
        if let Some(g) = &p.gave_up {
            let _ = writeln!(o, "  Monitor gave up:     {g}");
        }
    }
    let exits: Vec<String> = l.exits.iter().map(|(e, n)| format!("{e} ({n} run{})", if *n == 1 { "" } else { "s" })).collect();
    let out: Vec<String> = l.stdout_crc32.keys().cloned().collect();
    let bytes = l.runs.first().map_or(0, |r| r.stdout_bytes);
    let _ = writeln!(o, "  Exit:                {}; stdout {} bytes, CRC-32 {}", exits.join(", "), bytes, out.join(" / "));
    if let Some(r) = l.runs.iter().find(|r| !r.exit.success() && !r.stderr_tail.is_empty()) {
        let tail: Vec<&str> = r.stderr_tail.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
        let _ = writeln!(o, "  stderr (end):        {}", tail.join(" | "));
    }
    for f in &failed {
        let _ = writeln!(o, "  Failed:              {f}; left out of every figure");
    }
    if let Some(e) = &l.error {
        let _ = writeln!(o, "  ERROR:               this layout's runs did not do what the reference did: {e}");
    }
    let left: u64 = l.runs.iter().map(|r| r.killed_leftovers).sum();
    if left > 0 {
        let _ = writeln!(o, "  note: {left} process(es) still running when the program's first process exited were killed");
    }
}

/// The text report.
pub fn text(r: &ProgramsReport) -> String {
    let mut o = String::new();
    let h = &r.host;
    let _ = writeln!(
        o,
        "{}: {} runs per layout, interleaved{}, on Linux {} (transparent_hugepage enabled={} defrag={}, {} CPUs); splab build {}\n",
        r.command,
        r.repeat,
        if r.warmup > 0 { format!(", after {} warm-up run(s) of each", r.warmup) } else { String::new() },
        h.kernel,
        h.thp_enabled.as_deref().unwrap_or("none"),
        h.thp_defrag.as_deref().unwrap_or("none"),
        h.cpus,
        crate::output::BUILD
    );
    for l in &r.layouts {
        layout_block(&mut o, l);
        o.push('\n');
    }
    for p in &r.hugetlb_pools {
        let _ = writeln!(o, "hugetlb {} pool: nr_hugepages {} before, {} during the runs, {} after", size::show(p.page_bytes), p.nr_before, p.nr_during, p.nr_after);
    }
    summary(&mut o, r);
    o
}

fn summary(o: &mut String, r: &ProgramsReport) {
    let ran: Vec<&LayoutResult> = r.layouts.iter().filter(|l| l.wall.is_some()).collect();
    let _ = writeln!(o, "Summary (medians; ratios are medians of the per-round ratios ± their standard deviation):");
    let _ = writeln!(o, "  {:<16}{:>11}{:>11}{:>11}{:>14}{:>14}{:>12}{:>12}{:>11}", "layout", "wall", "user", "sys", "vs 4k (wall)", "vs 4k (CPU)", "peak RSS", "RSS vs 4k", "THP peak");
    for l in &ran {
        let med = |s: &Option<Stat>| s.as_ref().map_or(0.0, |x| x.median);
        let _ = writeln!(
            o,
            "  {:<16}{:>11}{:>11}{:>11}{:>14}{:>14}{:>12}{:>12}{:>11}",
            l.pages.to_string(),
            t(med(&l.wall)),
            t(med(&l.user)),
            t(med(&l.sys)),
            ratio(&l.speedup_vs_4k),
            ratio(&l.cpu_speedup_vs_4k),
            b(med(&l.peak_rss)),
            ratio(&l.rss_vs_4k),
            b(med(&l.anon_huge))
        );
    }
    for l in &ran {
        if l.pages == Pages::FourK {
            continue;
        }
        if let Some(s) = &l.speedup_vs_4k {
            let (word, v) = if s.median >= 1.0 { ("faster", s.median) } else { ("slower", 1.0 / s.median) };
            let sd = if s.median >= 1.0 { s.stddev } else { s.stddev / (s.median * s.median) };
            let _ = writeln!(o, "  {} ran {v:.2} ± {sd:.2} times {word} than 4k", l.pages);
        }
    }
    if let Some(p) = &r.promote_target {
        let ok = |m: bool| if m { "met" } else { "NOT met" };
        let share = match p.share_of_thp_gain {
            Some(s) => format!("{:.0}% of thp's gain over 4k (speedups {:.3} and {:.3}; target 90%): {}", 100.0 * s, p.promote_speedup, p.thp_speedup, ok(p.speed_met)),
            None => format!("thp gained nothing over 4k (speedup {:.3}); promote {:.3}", p.thp_speedup, p.promote_speedup),
        };
        let cpu = match p.cpu_share_of_thp_gain {
            Some(s) => format!("{:.0}% by CPU time (speedups {:.3} and {:.3})", 100.0 * s, p.promote_cpu_speedup, p.thp_cpu_speedup),
            None => format!("by CPU time thp gained nothing (speedup {:.3}; promote {:.3})", p.thp_cpu_speedup, p.promote_cpu_speedup),
        };
        let _ = writeln!(
            o,
            "  promote target: {share}; {cpu}; peak RSS {:.3}x 4k's (target <= 1.05): {}; monitor CPU {:.2}% of the program's (target <= 2%): {}",
            p.rss_ratio,
            ok(p.rss_met),
            100.0 * p.monitor_cpu_share,
            ok(p.cpu_met)
        );
    }
    if let Some(x) = &r.reference {
        let _ = writeln!(o, "  runs are counted when they finished as the reference: {x}");
    }
    for f in &r.flags {
        let _ = writeln!(o, "  FAILED: {f}");
    }
    if let Some(s) = &r.interrupted_by {
        let _ = writeln!(o, "  interrupted by {s}: the runs stopped early; the figures are of the runs that finished");
    }
}

/// hyperfine's CSV, a row per layout, with the memory and promotion
/// columns after its own.
pub fn csv(r: &ProgramsReport) -> String {
    let mut o = String::from("layout,mean,stddev,median,user,system,min,max,speedup_vs_4k,speedup_stddev,cpu_speedup_vs_4k,peak_rss_bytes,rss_vs_4k,anon_huge_peak_bytes,hugetlb_peak_bytes,promotions,p_failures,monitor_cpu_seconds,monitor_cpu_share,exit,method\n");
    for l in &r.layouts {
        let Some(w) = &l.wall else { continue };
        let med = |s: &Option<Stat>| s.as_ref().map_or(String::new(), |x| format!("{}", x.median));
        let mean = |s: &Option<Stat>| s.as_ref().map_or(String::new(), |x| format!("{}", x.mean));
        let p = l.promote.as_ref();
        let exits: Vec<String> = l.exits.keys().cloned().collect();
        let _ = writeln!(
            o,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},\"{}\"",
            l.pages,
            w.mean,
            w.stddev,
            w.median,
            mean(&l.user),
            mean(&l.sys),
            w.min,
            w.max,
            med(&l.speedup_vs_4k),
            l.speedup_vs_4k.as_ref().map_or(String::new(), |x| x.stddev.to_string()),
            med(&l.cpu_speedup_vs_4k),
            med(&l.peak_rss),
            med(&l.rss_vs_4k),
            med(&l.anon_huge),
            med(&l.hugetlb),
            p.map_or(String::new(), |p| p.promotions.to_string()),
            p.map_or(String::new(), |p| p.p_failures.to_string()),
            p.map_or(String::new(), |p| p.cpu_seconds.to_string()),
            p.map_or(String::new(), |p| p.cpu_share.to_string()),
            exits.join("; "),
            l.method.replace('"', "\"\"")
        );
    }
    o
}

/// hyperfine's Markdown table, with peak RSS.
pub fn markdown(r: &ProgramsReport) -> String {
    let mut o = String::from("| Layout | Mean [s] | Min [s] | Max [s] | Relative | Peak RSS | RSS vs 4k |\n|:---|---:|---:|---:|---:|---:|---:|\n");
    for l in &r.layouts {
        let Some(w) = &l.wall else {
            let _ = writeln!(o, "| `{}` | skipped: {} | | | | | |", l.pages, l.skip_reason.as_deref().unwrap_or("-").replace('|', "\\|"));
            continue;
        };
        let rel = l.speedup_vs_4k.as_ref().map_or("-".into(), |s| format!("{:.2} ± {:.2}", s.median, s.stddev));
        let _ = writeln!(
            o,
            "| `{}` | {:.3} ± {:.3} | {:.3} | {:.3} | {rel} | {} | {} |",
            l.pages,
            w.mean,
            w.stddev,
            w.min,
            w.max,
            b(l.peak_rss.as_ref().map_or(0.0, |x| x.median)),
            l.rss_vs_4k.as_ref().map_or("-".into(), |s| format!("{:.3}", s.median))
        );
    }
    o
}

fn write_file(path: &std::path::Path, text: &str) -> Result<(), Fail> {
    std::fs::write(path, text).map_err(|e| Fail::Run(format!("writing {}: {e}", path.display())))
}

/// `splab native -- PROG ARGS...`: `program` in the layouts `pages`,
/// `repeat` runs of each.
pub fn cmd(program: &[String], pages: &[String], repeat: u32, pool: PoolMode, a: &ProgramArgs, out: &Formats) -> Result<i32, Fail> {
    if out.csv || out.plot.is_some() {
        return Err(Fail::Input("--csv and --plot are for the built-in workloads; for a program use --json, --export-csv or --export-markdown".into()));
    }
    let as_json = out.json;
    let pages = if pages.is_empty() { vec!["4k,thp,promote".to_string()] } else { pages.to_vec() };
    let layouts = input(Pages::parse_list(&pages))?;
    if !(1..=1000).contains(&repeat) {
        return Err(Fail::Input(format!("--repeat {repeat} is out of range (1 to 1000)")));
    }
    if a.warmup > 100 {
        return Err(Fail::Input(format!("--warmup {} is out of range (0 to 100)", a.warmup)));
    }
    if !(1..=10_000).contains(&a.interval) {
        return Err(Fail::Input(format!("--interval {} is out of range (1 to 10000 ms)", a.interval)));
    }
    if let Some(p) = &a.input {
        if !p.is_file() {
            return Err(Fail::Input(format!("--input {}: no such file", p.display())));
        }
    }
    for p in &layouts {
        if matches!(p, Pages::Collapse | Pages::Mix(_)) {
            return Err(Fail::Input(format!("--pages {p}: lays out a built-in workload's region; for a program use 4k, thp, mthp:SIZES, promote, hugetlb-2m or hugetlb-1g")));
        }
    }
    sysstate::install_signals();
    sysstate::defer_signals();
    let prog = Program { argv: program.to_vec(), input: a.input.clone() };
    let mut opts = RunOpts::default();
    opts.monitor.interval = Duration::from_millis(a.interval);
    let plan = Plan { layouts, repeat, warmup: a.warmup, grow_hugetlb: matches!(pool, PoolMode::Grow), opts };
    let total = plan.layouts.len() as u64 * (plan.repeat + plan.warmup) as u64;
    let mut bar = Progress::new(total, &prog.argv[0], "runs", as_json);
    let r = programs::run(&prog, &plan, &mut |done, _, _| bar.update(done));
    bar.finish();
    let j = json(&r);
    emit(&if as_json { j.clone() } else { text(&r) });
    if let Some(p) = &a.export_json {
        write_file(p, &j)?;
    }
    if let Some(p) = &a.export_csv {
        write_file(p, &csv(&r))?;
    }
    if let Some(p) = &a.export_markdown {
        write_file(p, &markdown(&r))?;
    }
    if let Some(sig) = sysstate::received() {
        sysstate::die_by(sig);
    }
    let errors: Vec<String> = r.layouts.iter().filter_map(|l| Some(format!("--pages {}: {}", l.pages, l.error.as_ref()?))).collect();
    if !errors.is_empty() {
        return Err(Fail::Run(errors.join("; ")));
    }
    if r.layouts.iter().all(|l| l.wall.is_none()) {
        return Err(Fail::Run("no layout ran (see the reasons above)".into()));
    }
    Ok(0)
}

/// Options of `splab promote`.
#[derive(Args, Clone, Debug)]
pub struct PromoteArgs {
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "PROG ARGS")]
    pub program: Vec<String>,
    /// How often the monitor looks at the program's resident size,
    /// milliseconds; it scans the page tables when that grew by 2 MB, at
    /// most as often as keeps scanning under 1% of a CPU.
    #[arg(long, value_name = "MS", default_value_t = 20)]
    pub interval: u64,
}

/// `splab promote -- PROG ARGS...`: the program with its own standard
/// input, output and error, under the monitor; its exit status is
/// splab's. The report (text, or JSON with `--json`) goes to stderr,
/// since stdout is the program's.
pub fn promote_cmd(a: &PromoteArgs, as_json: bool) -> Result<i32, Fail> {
    if !(1..=10_000).contains(&a.interval) {
        return Err(Fail::Input(format!("--interval {} is out of range (1 to 10000 ms)", a.interval)));
    }
    let setup = Setup::new(Pages::Promote).map_err(|e| Fail::Run(format!("cannot promote: {e}")))?;
    sysstate::install_signals();
    let prog = Program { argv: a.program.clone(), input: None };
    let opts = RunOpts { passthrough: true, monitor: promote::Config { interval: Duration::from_millis(a.interval), ..Default::default() }, ..Default::default() };
    let r = program::run(&prog, &setup, 0, &opts, &mut Pool::new(false)).map_err(Fail::Run)?;
    if as_json {
        eprint!("{}", json(&r));
    } else {
        let c = r.promote.clone().unwrap_or_default();
        let mut o = String::new();
        let _ = writeln!(o, "splab promote: {} ({}), {} wall, {} user, {} sys, peak RSS {}, THP peak {}", prog.command_line(), r.exit.text(), t(r.wall), t(r.user), t(r.sys), b(r.peak_rss as f64), b(r.sampled.anon_huge as f64));
        for l in c.sysctl_lines() {
            let _ = writeln!(o, "  {l}");
        }
        let _ = writeln!(o, "  monitor CPU {} ({:.2}% of the program's), {} passes, {}", t(c.cpu_seconds), 100.0 * c.cpu_seconds / (r.user + r.sys).max(1e-9), c.passes, c.scanner);
        if let Some(g) = &c.gave_up {
            let _ = writeln!(o, "  monitor gave up: {g}");
        }
        eprint!("{o}");
    }
    if let Some(sig) = sysstate::received() {
        sysstate::die_by(sig);
    }
    Ok(match r.exit {
        program::Exit::Code(c) => c,
        program::Exit::Signal(s) => 128 + s,
        program::Exit::NotStarted(e) => return Err(Fail::Run(e)),
    })
}
