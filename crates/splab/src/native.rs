//! `splab native`: the workloads run for real on this host, in the page-
//! size layouts `--pages` names, with the layout each run really got, the
//! median and spread of each figure, and the speedup over 4 KB pages.

use crate::error::{input, Fail};
use crate::formats::Formats;
use crate::output::{labelled, num};
use crate::progress::Progress;
use crate::size;
use clap::{Args, ValueEnum};
use splab_native::pages::Pages;
use splab_native::suite::{self, LayoutReport, Plan, Spread, SuiteReport};
use splab_native::Native;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PoolMode {
    /// Grow the hugetlb pool as root when it has too few free pages, and
    /// put it back afterwards.
    Grow,
    /// Use only pages already in the pool.
    Keep,
}

/// Options of `splab native`; sizes are the simulated workloads' options,
/// with defaults for a real machine.
#[derive(Args, Clone, Debug)]
pub struct NativeArgs {
    /// Workload to run: gups, lat, transpose, stream, index, sparse (a slab
    /// allocator's arena, where THP costs memory), or misses (independent
    /// random misses under several loop shapes; native only). Or, instead,
    /// a program after `--`.
    pub workload: Option<String>,
    /// Any program and its arguments, after `--` (e.g. `-- xz -9 -c
    /// FILE`): run with every process it starts in each layout.
    #[arg(last = true, value_name = "PROG ARGS")]
    pub program: Vec<String>,
    /// Page layouts, run in turn (repeatable or comma-separated). For
    /// workloads [default: 4k,thp]: 4k (MADV_NOHUGEPAGE), thp (MADV_HUGEPAGE
    /// before touching), collapse (touched in 4 KB pages, then
    /// MADV_COLLAPSE), promote (touched in 4 KB pages while the promotion
    /// monitor collapses full 2 MB ranges), hugetlb-2m, hugetlb-1g
    /// (MAP_HUGETLB), mix:F (a fraction F of the 2 MB chunks MADV_HUGEPAGE,
    /// spread evenly, the rest MADV_NOHUGEPAGE). For programs [default:
    /// 4k,thp,promote]: 4k (PR_SET_THP_DISABLE), thp (system THP mode
    /// always for the run, as root), mthp:SIZES (e.g. mthp:16k+64k, as
    /// root), promote (the promotion monitor, as root), hugetlb-2m,
    /// hugetlb-1g (glibc.malloc.hugetlb).
    #[arg(long, value_name = "LAYOUT,...")]
    pub pages: Vec<String>,
    /// Runs per layout, interleaved round robin across the layouts. A
    /// workload's run on a CPU for less than 90% of its time (other work on
    /// the host took it) is taken again at once, up to twice, keeping the
    /// attempt most on a CPU
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub repeat: u32,
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
    /// sparse: bytes of the arena (a multiple of 2 MB).
    #[arg(long, value_name = "SIZE", default_value = "1G")]
    pub size: String,
    /// sparse: share of each 2 MB slab's pages live.
    #[arg(long, value_name = "F", default_value_t = 0.25)]
    pub fraction: f64,
    /// sparse: rounds of freeing and rewriting a quarter of the live pages.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub rounds: u32,
    /// hugetlb pool: grow it (as root) for the run and restore it, or keep
    /// it as it is.
    #[arg(long, value_enum, value_name = "grow|keep", default_value = "grow")]
    pub hugetlb_pool: PoolMode,
    /// gups, misses: log2 of the table size in 64-bit words (27: 1 GiB).
    #[arg(long, value_name = "N", default_value_t = 27)]
    pub log2_table: u32,
    /// gups: run HPCC's verification pass after each run (untimed).
    #[arg(long)]
    pub verify: bool,
    /// lat: largest array of the size sweep (which doubles from 4K).
    #[arg(long, value_name = "SIZE", default_value = "256M")]
    pub max_size: String,
    /// lat: strides in bytes between chain elements, comma-separated; the
    /// figure is for the first.
    #[arg(long, value_name = "BYTES,...", value_delimiter = ',', default_value = "64,4096")]
    pub stride: Vec<u64>,
    /// lat: chase order, random (one random cycle) or seq (ascending).
    #[arg(long, value_name = "random|seq", default_value = "random")]
    pub pattern: String,
    /// lat: timed dependent loads per array size.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub loads: u64,
    /// transpose: matrix sizes N (N x N doubles), comma-separated.
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_value = "3000,3072,3300")]
    pub sizes: Vec<u64>,
    /// stream: elements per array (STREAM_ARRAY_SIZE).
    #[arg(long, value_name = "N", default_value_t = 10_000_000)]
    pub n: u64,
    /// stream: times each kernel runs (NTIMES; the first is not counted).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub ntimes: u32,
    /// index: pgbench scaling factor (100000 accounts each).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub scale: u64,
    /// index: lookups (select-only transactions) per run.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub transactions: u64,
}

/// The workloads `splab native` runs.
pub const WORKLOADS: &[&str] = &["gups", "lat", "transpose", "stream", "index", "sparse", "misses"];

pub fn build(a: &NativeArgs) -> Result<Box<dyn Native>, Fail> {
    use splab_native::{gups, index, lat, misses, sparse, stream, transpose};
    let workload = a.workload.as_deref().unwrap_or("");
    Ok(match workload {
        "gups" => Box::new(input(gups::Gups::new(a.log2_table, a.verify))?),
        "lat" => {
            let max = input(size::parse(&a.max_size).map_err(|e| format!("--max-size: {e}")))?;
            let pattern = input(lat::Pattern::parse(&a.pattern))?;
            Box::new(input(lat::Lat::new(max, a.stride.clone(), pattern, a.loads))?)
        }
        "transpose" => Box::new(input(transpose::Transpose::new(a.sizes.clone()))?),
        "stream" => Box::new(input(stream::Stream::new(a.n, a.ntimes))?),
        "index" => Box::new(input(index::Index::new(a.scale, a.transactions))?),
        "misses" => Box::new(input(misses::Misses::new(a.log2_table))?),
        "sparse" => {
            let size = input(size::parse(&a.size).map_err(|e| format!("--size: {e}")))?;
            Box::new(input(sparse::Sparse::new(size, a.fraction, a.rounds))?)
        }
        other => {
            let hint = if crate::workload::names().contains(&other) { " (it runs only in the simulator)" } else { "" };
            return Err(Fail::Input(format!("unknown native workload {other:?}{hint} (known: {})", WORKLOADS.join(", "))));
        }
    })
}

/// `splab native`.
pub fn cmd(a: &NativeArgs, out: &Formats) -> Result<i32, Fail> {
    match (&a.workload, a.program.is_empty()) {
        (Some(w), false) => return Err(Fail::Input(format!("give a workload ({w:?}) or a program after --, not both"))),
        (None, true) => return Err(Fail::Input(format!("give a workload ({}) or a program after -- (e.g. splab native -- xz -9 -c FILE)", WORKLOADS.join(", ")))),
        (None, false) => return crate::program::cmd(a, out),
        (Some(_), true) => {}
    }
    let pages = if a.pages.is_empty() { vec!["4k,thp".to_string()] } else { a.pages.clone() };
    let layouts = input(Pages::parse_list(&pages))?;
    if !(1..=1000).contains(&a.repeat) {
        return Err(Fail::Input(format!("--repeat {} is out of range (1 to 1000)", a.repeat)));
    }
    let w = build(a)?;
    out.check()?;
    let plan = Plan { layouts, repeat: a.repeat, grow_hugetlb: matches!(a.hugetlb_pool, PoolMode::Grow) };
    let total = plan.layouts.len() as u64 * plan.repeat as u64;
    let mut bar = Progress::new(total, &w.name(), "runs", out.machine_readable());
    // A signal during a run stops splab at once; first the report of the
    // runs that finished is written, the one in progress named.
    let latest: Arc<Mutex<Option<SuiteReport>>> = Arc::default();
    {
        let (latest, out) = (latest.clone(), out.clone());
        splab_native::sysstate::on_interrupt(move |sig| {
            if let Some(mut r) = latest.lock().unwrap_or_else(|e| e.into_inner()).take() {
                r.interrupted_by = Some(splab_native::sysstate::signal_name(sig));
                let _ = out.emit(&r, text);
            }
        });
    }
    splab_native::sysstate::install_signals();
    let r = suite::run_with(a.workload.as_deref().unwrap_or(""), w.as_ref(), &plan, &mut |done, _, _| bar.update(done), &mut |s| {
        *latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
    });
    bar.finish();
    let r = r.map_err(Fail::Run)?;
    out.emit(&r, text)?;
    if let Some(sig) = splab_native::sysstate::received() {
        splab_native::sysstate::die_by(sig);
    }
    if r.layouts.iter().all(|l| l.runs.is_empty()) {
        return Err(Fail::Run("no layout could be set up (see the reasons above)".into()));
    }
    Ok(0)
}

fn bytes(b: u64) -> String {
    if b == 0 {
        "0".into()
    } else {
        size::show(b)
    }
}

fn spread(s: &Spread) -> String {
    format!("{} [{} .. {}]", num(s.median), num(s.min), num(s.max))
}

/// The obtained-layout table: one row per layout, from its first run.
fn layout_table(o: &mut String, r: &SuiteReport) {
    let _ = writeln!(o, "Layout obtained (read back from /proc/self/smaps after setup; pages of the first run, huge share over all runs):");
    let _ = writeln!(o, "  {:<12}{:>10}{:>12}{:>12}{:>12}{:>16}  verdict", "layout", "region", "4 KB pages", "2 MB pages", "1 GB pages", "huge");
    for l in &r.layouts {
        let Some(first) = l.runs.first() else {
            let _ = writeln!(o, "  {:<12}SKIPPED: {}", l.pages.to_string(), l.skip_reason.as_deref().unwrap_or("?"));
            continue;
        };
        let ob = &first.obtained;
        let verdict = match &l.shortfall {
            None => "as asked".to_string(),
            Some(s) => format!("NOT AS ASKED in {} of {} runs; {s}", l.runs_short, l.runs.len()),
        };
        let huge = match &l.huge_fraction {
            Some(h) if h.min != h.max => format!("{:.1}..{:.1}%", 100.0 * h.min, 100.0 * h.max),
            _ => format!("{:.1}%", 100.0 * ob.huge_fraction()),
        };
        let _ = writeln!(
            o,
            "  {:<12}{:>10}{:>12}{:>12}{:>12}{huge:>16}  {verdict}",
            l.pages.to_string(),
            bytes(l.region_bytes),
            bytes(ob.bytes_4k),
            bytes(ob.bytes_2m),
            bytes(ob.bytes_1g),
        );
        if let Some(s) = &l.skip_reason {
            let _ = writeln!(o, "  {:<12}then skipped: {s}", "");
        }
        for n in &l.notes {
            let _ = writeln!(o, "  {:<12}note: {n}", "");
        }
        if let Some(c) = first.promote.as_ref() {
            let _ = writeln!(
                o,
                "  {:<12}promotion monitor (first run): vm.pmap.pde.promotions {} ({} while setting up), vm.pmap.pde.p_failures {}, monitor CPU {:.3} s (scanning {:.3}, collapsing {:.3}), {:.2}% of the run's timed CPU time",
                "",
                c.promotions,
                c.setup_promotions.unwrap_or(0),
                c.p_failures,
                c.cpu_seconds,
                c.scan_cpu_seconds,
                c.collapse_cpu_seconds,
                100.0 * c.cpu_seconds / first.outcome.cpu_seconds.max(1e-9)
            );
        }
    }
}

fn summary_table(o: &mut String, r: &SuiteReport) {
    let ran: Vec<&LayoutReport> = r.layouts.iter().filter(|l| !l.runs.is_empty()).collect();
    let Some(first) = ran.first() else { return };
    let most = ran.iter().map(|l| l.runs.len()).max().unwrap_or(0);
    let runs = if most == r.repeat as usize { format!("{most}") } else { format!("the finished {most} of {}", r.repeat) };
    let _ = writeln!(o, "Summary: median [min .. max] of {runs} runs per layout (interleaved), CLOCK_MONOTONIC:");
    let has_base = r.layouts.iter().any(|l| l.pages == Pages::FourK && !l.runs.is_empty());
    let head = &first.figures[0];
    let _ = writeln!(
        o,
        "  {:<12}{:>34}{:>34}{:>10}{:>8}",
        "layout",
        "timed seconds",
        crate::output::labelled(&head.name, &head.unit),
        if has_base { "vs 4k" } else { "" },
        "on CPU"
    );
    let mut busy = 1.0f64;
    for l in &ran {
        let f = &l.figures[0];
        let speed = f.speedup_vs_4k.map(|s| format!("{s:.2}x")).unwrap_or_default();
        let secs = l.seconds.as_ref().map(spread).unwrap_or_default();
        let cpu = l.on_cpu.as_ref().map(|c| c.median).unwrap_or(1.0);
        busy = busy.min(cpu);
        let _ = writeln!(o, "  {:<12}{secs:>34}{:>34}{speed:>10}{:>7.0}%", l.pages.to_string(), spread(&f.spread), 100.0 * cpu);
    }
    // Further figures (STREAM's other kernels): medians and speedups.
    for k in 1..first.figures.len() {
        let _ = writeln!(o, "  {}:", first.figures[k].name);
        for l in &ran {
            if let Some(f) = l.figures.get(k) {
                let speed = f.speedup_vs_4k.map(|s| format!("{s:.2}x")).unwrap_or_default();
                let _ = writeln!(o, "    {:<10}{:>34}{:>34}{speed:>10}", l.pages.to_string(), "", spread(&f.spread));
            }
        }
    }
    if busy < 0.9 {
        let _ = writeln!(
            o,
            "  note: the host was busy: in the median run of some layout this process was on a CPU for only {:.0}% of the timed wall time, so times are longer and noisier than the machine's own",
            100.0 * busy
        );
    }
    let skipped: Vec<String> = r.layouts.iter().filter(|l| l.runs.is_empty()).map(|l| l.pages.to_string()).collect();
    if !skipped.is_empty() {
        let _ = writeln!(o, "  skipped: {} (reasons above)", skipped.join(", "));
    }

}

/// The text report.
pub fn text(r: &SuiteReport) -> String {
    let mut o = String::new();
    let h = &r.host;
    let _ = writeln!(
        o,
        "{} natively on Linux {} (transparent_hugepage enabled={} defrag={}, {} CPUs); working set {}; {} runs per layout, interleaved; splab build {}\n",
        r.detail,
        h.kernel,
        h.thp_enabled.as_deref().unwrap_or("none"),
        h.thp_defrag.as_deref().unwrap_or("none"),
        h.cpus,
        size::show(r.working_set_bytes),
        r.repeat,
        crate::output::BUILD
    );
    layout_table(&mut o, r);
    for p in &r.hugetlb_pools {
        let _ = writeln!(
            o,
            "  hugetlb {} pool: nr_hugepages {} before, {} during the runs, {} after",
            size::show(p.page_bytes),
            p.nr_before,
            p.nr_during,
            p.nr_after
        );
    }
    for l in &r.layouts {
        if let (Some(run), Some(f)) = (l.median_run(), l.figures.first()) {
            let mine = run.outcome.figures.first().map_or(f64::NAN, |g| g.value);
            let which = if l.runs.len() % 2 == 1 {
                format!("the median run: round {}, {} {}", run.round + 1, labelled(&f.name, &f.unit), num(mine))
            } else {
                format!(
                    "round {}, {} {}, the lower middle one of {} runs, whose median {} is the mean of the two middle ones",
                    run.round + 1,
                    labelled(&f.name, &f.unit),
                    num(mine),
                    l.runs.len(),
                    num(f.spread.median)
                )
            };
            let _ = writeln!(o, "\n== --pages {} ({which}) ==", l.pages);
            o.push_str(&run.outcome.report);
        }
    }
    o.push('\n');
    summary_table(&mut o, r);
    if let Some(s) = &r.interrupted_by {
        let _ = writeln!(o, "  interrupted by {s}: the runs stopped early; the figures are of the runs that finished");
        if let Some(x) = &r.interrupted_run {
            let _ = writeln!(o, "  interrupted: {x}");
        }
    }
    o
}
