//! `splab native`: the workloads run for real on this host, in the page-
//! size layouts `--pages` names, with the layout each run really got, the
//! median and spread of each figure, and the speedup over 4 KB pages.

use crate::error::{input, Fail};
use crate::formats::Formats;
use crate::output::{labelled, num};
use crate::progress::Progress;
use crate::program::{self, PoolMode, ProgramArgs};
use clap::Args;
use splab_defs::workload::{names, need, Side};
use splab_defs::{WorkloadKind, WorkloadParams};
use splab_hw::size;
use splab_native::pages::Pages;
use splab_native::suite::{self, LayoutReport, Plan, Spread, SuiteReport};
use splab_native::Native;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// Options of `splab native`: a workload's parameters are the model's
/// (`WorkloadParams`), with defaults for a real machine.
#[derive(Args, Clone, Debug)]
pub struct NativeArgs {
    /// Workload to run: gups, lat, transpose, stream, index, sparse (a slab
    /// allocator's arena, where THP costs memory), or misses (independent
    /// random misses under several loop shapes; native only). Or, instead,
    /// a program after `--`.
    #[arg(value_name = "WORKLOAD", value_parser = native_workload)]
    pub workload: Option<WorkloadKind>,
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
    /// hugetlb pool: grow it (as root) for the run and restore it, or keep
    /// it as it is.
    #[arg(long, value_enum, value_name = "grow|keep", default_value = "grow")]
    pub hugetlb_pool: PoolMode,
    #[command(flatten)]
    pub programs: ProgramArgs,
    #[command(flatten)]
    pub params: WorkloadParams,
}

/// The positional workload of `splab native`.
fn native_workload(text: &str) -> Result<WorkloadKind, String> {
    WorkloadKind::parse(text, Side::Native)
}

/// The native workload `kind` with its parameters (each not given at its
/// native default).
pub fn build(kind: WorkloadKind, given: &WorkloadParams) -> Result<Box<dyn Native>, Fail> {
    use splab_native::{gups, index, lat, misses, sparse, stream, transpose};
    use WorkloadKind as K;
    let a = kind.resolve(Side::Native, given);
    let size = |t: &Option<String>, name: &str| -> Result<u64, Fail> { input(size::parse(&input(need(t, name))?).map_err(|e| format!("{}: {e}", splab_defs::workload::flag(name)))) };
    Ok(match kind {
        K::Gups => Box::new(input(gups::Gups::new(input(need(&a.log2_table, "log2_table"))?, input(need(&a.verify, "verify"))?))?),
        K::Lat => {
            let max = size(&a.max_size, "max_size")?;
            let pattern = input(lat::Pattern::parse(&input(need(&a.pattern, "pattern"))?))?;
            Box::new(input(lat::Lat::new(max, input(need(&a.stride, "stride"))?, pattern, input(need(&a.loads, "loads"))?))?)
        }
        K::Transpose => Box::new(input(transpose::Transpose::new(input(need(&a.sizes, "sizes"))?))?),
        K::Stream => Box::new(input(stream::Stream::new(input(need(&a.n, "n"))?, input(need(&a.ntimes, "ntimes"))?))?),
        K::Index => Box::new(input(index::Index::new(input(need(&a.scale, "scale"))?, input(need(&a.transactions, "transactions"))?))?),
        K::Misses => Box::new(input(misses::Misses::new(input(need(&a.log2_table, "log2_table"))?))?),
        K::Sparse => Box::new(input(sparse::Sparse::new(size(&a.size, "size")?, input(need(&a.fraction, "fraction"))?, input(need(&a.rounds, "rounds"))?))?),
        other => return Err(Fail::Input(format!("workload {other:?} runs only in the simulator (known natively: {})", names(Side::Native).join(", ")))),
    })
}

/// `splab native`.
pub fn cmd(a: &NativeArgs, out: &Formats) -> Result<i32, Fail> {
    match (&a.workload, a.program.is_empty()) {
        (Some(w), false) => return Err(Fail::Input(format!("give a workload ({:?}) or a program after --, not both", w.name()))),
        (None, true) => return Err(Fail::Input(format!("give a workload ({}) or a program after -- (e.g. splab native -- xz -9 -c FILE)", names(Side::Native).join(", ")))),
        (None, false) => {
            if let Some(m) = splab_defs::workload::unread_by("a program run", &a.params) {
                return Err(Fail::Input(m));
            }
            return program::cmd(&a.program, &a.pages, a.repeat, a.hugetlb_pool, &a.programs, out);
        }
        (Some(_), true) => {}
    }
    let kind = a.workload.ok_or_else(|| Fail::Input("give a workload".into()))?;
    let pages = if a.pages.is_empty() { vec!["4k,thp".to_string()] } else { a.pages.clone() };
    let layouts = input(Pages::parse_list(&pages))?;
    if !(1..=1000).contains(&a.repeat) {
        return Err(Fail::Input(format!("--repeat {} is out of range (1 to 1000)", a.repeat)));
    }
    if let Some(m) = kind.foreign_param(Side::Native, &a.params) {
        return Err(Fail::Input(m));
    }
    let w = build(kind, &a.params)?;
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
    let r = suite::run_with(kind.name(), w.as_ref(), &plan, &mut |done, _, _| bar.update(done), &mut |s| {
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
