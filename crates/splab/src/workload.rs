//! Turning a workload name and its options into a runnable workload.
//! Adding a workload is one line in `WORKLOADS` (plus its options, if it
//! has new ones, in `WorkloadArgs`).

use crate::error::Fail;
use crate::size;
use clap::{Args, Parser};
use splab_sim::Config;
use splab_workloads::build::Build;
use splab_workloads::bw::Bw;
use splab_workloads::forkbomb::Forkbomb;
use splab_workloads::gups::Gups;
use splab_workloads::gups_mp::GupsMp;
use splab_workloads::index::Index;
use splab_workloads::lat::{Lat, Pattern};
use splab_workloads::realloc::Realloc;
use splab_workloads::stream::Stream;
use splab_workloads::stress::Stress;
use splab_workloads::transpose::Transpose;
use splab_workloads::layout::PageLayout;
use splab_workloads::Workload;

/// Options of the workloads; each workload reads the ones it has.
#[derive(Args, Clone, Debug)]
pub struct WorkloadArgs {
    /// gups, gups-mp: log2 of the table size in 64-bit words, per process
    /// for gups-mp [default: 24 for gups, 21 for gups-mp].
    #[arg(long, value_name = "N")]
    pub log2_table: Option<u32>,
    /// gups: updates to time, fewer than HPCC's 4 x the table (the rate
    /// is a steady state that fewer updates reach as well).
    #[arg(long, value_name = "N")]
    pub updates: Option<u64>,
    /// gups: run the HPCC verification pass; stress: read every page back
    /// and check it before freeing it (both imply --track-contents).
    #[arg(long)]
    pub verify: bool,
    /// gups-mp: processes, each with a table of its own [default: one per
    /// CPU of the machine]; forkbomb: processes the tree grows to, the
    /// first included [default: 256].
    #[arg(long, value_name = "N")]
    pub procs: Option<usize>,
    /// forkbomb: children each process forks (the shell's fork bomb
    /// forks two).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub fanout: usize,
    /// forkbomb: bytes each process maps and writes of its own.
    #[arg(long, value_name = "SIZE", default_value = "128K")]
    pub touch: String,
    /// forkbomb: bytes of data the first process writes and every other
    /// inherits copy-on-write (each writes every fourth page of it).
    #[arg(long, value_name = "SIZE", default_value = "1M")]
    pub inherited: String,
    /// lat: largest array of the size sweep (which starts at 4K).
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
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub loads: u64,
    /// bw: bytes each test moves (bcopy tests map twice this); sparse:
    /// bytes of the arena (a multiple of 2 MB).
    #[arg(long, value_name = "SIZE", default_value = "128M")]
    pub size: String,
    /// bw: tests to run, comma-separated, from rd, wr, rdwr, bcopy_libc,
    /// bcopy_hand, mmap_rd; the figure is the first one's.
    #[arg(long, value_name = "TEST,...", value_delimiter = ',', default_value = "rd,wr,rdwr,bcopy_libc,bcopy_hand,mmap_rd")]
    pub tests: Vec<String>,
    /// transpose: matrix sizes N (N x N doubles), comma-separated.
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_value = "3000,3072,3300")]
    pub sizes: Vec<u64>,
    /// stream: elements per array (STREAM_ARRAY_SIZE).
    #[arg(long, value_name = "N", default_value_t = 10_000_000)]
    pub n: u64,
    /// stream: times each kernel runs (NTIMES; the first is not counted).
    /// STREAM's own default is 10; runs here are deterministic, so later
    /// runs differ only by the caches the first one warmed.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub ntimes: u32,
    /// index: pgbench scaling factor (100000 accounts each).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub scale: u64,
    /// index: clients, each a backend process on a CPU of its own.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub clients: usize,
    /// index: transactions per client (pgbench -t).
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub transactions: u64,
    /// index: the backend's instructions per transaction beside the
    /// lookup's memory references (parsing, planning, the executor),
    /// priced at the profile's `[core] cycles_per_instruction`; 0: none
    /// [default: 101713, measured on a PostgreSQL 15 backend].
    #[arg(long, value_name = "N")]
    pub insns_per_txn: Option<u64>,
    /// index: the round trip to pgbench: its instructions, the system calls
    /// on both sides and, where pgbench shares a backend's CPU, the switches
    /// to it and back (false: the backends alone).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub round_trip: bool,
    /// build: compiler instructions (gcc, cc1 and as) per byte of a unit's
    /// source, priced at the profile's `[core] cycles_per_instruction`; 0:
    /// none [default: 36879, measured with GCC 12 at -O2].
    #[arg(long, value_name = "N")]
    pub insns_per_source_byte: Option<u64>,
    /// build: compilation units (source files), one compiler process each.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub units: usize,
    /// build: compilers running at once (make -j) [default: one per CPU].
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// stress: vm workers, forked from one parent [default: one per CPU].
    #[arg(long, value_name = "N")]
    pub vm: Option<usize>,
    /// stress: bytes each worker maps, touches and unmaps per loop.
    #[arg(long, value_name = "SIZE", default_value = "256M")]
    pub vm_bytes: String,
    /// stress: rounds of mmap, touch, munmap per worker.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub loops: u64,
    /// sparse: share of each 2 MB slab's pages live (the arena is --size).
    #[arg(long, value_name = "F", default_value_t = 0.25)]
    pub fraction: f64,
    /// sparse: rounds of freeing and rewriting a quarter of the live pages.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub rounds: u32,
    /// arenas: threads, each with an arena of its own [default: one per
    /// CPU of the machine].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// arenas: bytes the threads hold together after growing (they end
    /// holding a quarter of it).
    #[arg(long, value_name = "SIZE", default_value = "256M")]
    pub live: String,
    /// arenas: objects each thread frees and replaces after growing.
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    pub ops: u64,
    /// arenas: bytes of each heap an arena maps (glibc's HEAP_MAX_SIZE).
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    pub heap: String,
    /// requests: keys loaded before the timed requests.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub keys: u64,
    /// requests: timed requests (80% GET, 20% SET, half of those new keys).
    #[arg(long, value_name = "N", default_value_t = 400_000)]
    pub requests: u64,
    /// requests: mean value size in bytes (values from half to one and a
    /// half times it).
    #[arg(long, value_name = "SIZE", default_value = "512")]
    pub value_size: String,
    /// requests: forks of the server for a snapshot (Redis's BGSAVE)
    /// during the timed requests, evenly spaced.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub snapshots: u32,
    /// realloc: size of the first allocation (then doubled until memory
    /// runs out).
    #[arg(long, value_name = "SIZE", default_value = "1M")]
    pub start_size: String,
    /// realloc: always move and copy (the default grows in place when the
    /// range after the allocation is free, as jemalloc does).
    #[arg(long)]
    pub always_move: bool,
    /// gups, lat, transpose, stream, index: lay the workload's data out
    /// as `splab native --pages` does, in one 2 MB-aligned region whose
    /// 2 MB chunks are all in 4 KB pages (4k), all left to reservations
    /// and promotion (2m), all advised MADV_HUGEPAGE as a program asking
    /// for huge pages does (hugepage: what linux-thp:madvise acts on), or
    /// a fraction F of them, spread as the native mix spreads them
    /// (mix:F); the 4 KB chunks are advised out of superpages (a splab
    /// extension after Linux's MADV_NOHUGEPAGE). The report says how many
    /// chunks were promoted. Without it, the data are mapped as before,
    /// one mapping per array.
    #[arg(long, value_name = "4k|2m|hugepage|mix:F")]
    pub pages: Option<String>,
}

/// `WorkloadArgs` as the command line would give them for `args` (the
/// defaults where `args` says nothing), for callers other than the CLI.
pub fn args_from(args: &[&str]) -> Result<WorkloadArgs, String> {
    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        w: WorkloadArgs,
    }
    let argv = std::iter::once("splab").chain(args.iter().copied());
    Only::try_parse_from(argv).map(|o| o.w).map_err(|e| e.to_string())
}

type Builder = fn(&WorkloadArgs, &Config) -> Result<Box<dyn Workload>, String>;

/// Every workload the front end can run, by name.
const WORKLOADS: &[(&str, Builder)] = &[
    ("gups", gups), ("gups-mp", gups_mp), ("lat", lat), ("bw", bw), ("transpose", transpose), ("stream", stream),
    ("index", index),
    ("build", build_tree),
    ("forkbomb", forkbomb),
    ("stress", stress),
    ("realloc", realloc),
    ("sparse", sparse),
    ("arenas", arenas),
    ("requests", requests),
];

fn arenas(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let live = size::parse(&a.live).map_err(|e| format!("--live: {e}"))?;
    let heap = size::parse(&a.heap).map_err(|e| format!("--heap: {e}"))?;
    let w = splab_workloads::arenas::Arenas::new(a.threads, live, a.ops, heap)?;
    fits(&format!("--live {}: the live objects", a.live), live, cfg)?;
    Ok(Box::new(w))
}

fn requests(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let value = size::parse(&a.value_size).map_err(|e| format!("--value-size: {e}"))?;
    let w = splab_workloads::requests::Requests::new(a.keys, a.requests, value, a.snapshots)?;
    fits(&format!("--keys {} --requests {}: the dataset", a.keys, a.requests), w.footprint(), cfg)?;
    Ok(Box::new(w))
}

fn sparse(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let bytes = size::parse(&a.size).map_err(|e| format!("--size: {e}"))?;
    let s = splab_workloads::sparse::Sparse::new(bytes, a.fraction, a.rounds)?;
    fits(&format!("--size {}: the arena", a.size), bytes, cfg)?;
    Ok(Box::new(s))
}

/// A size option, parsed and checked; errors name the option and the text
/// as typed.
fn size_arg(text: &str, what: &str, check: fn(u64) -> Result<(), String>) -> Result<u64, String> {
    let bytes = size::parse(text).map_err(|e| format!("{what}: {e}"))?;
    check(bytes).map_err(|e| format!("{what} {text}: {e}"))?;
    Ok(bytes)
}

/// Refuses a run whose data cannot fit in the modelled memory and swap
/// together (the page tables need room too): said now instead of after
/// minutes of simulation.
fn fits(what: &str, bytes: u64, cfg: &Config) -> Result<(), String> {
    // On 32-bit architectures it must also fit the user address space (3 GB
    // on armv7), with room for nothing else mapped.
    let space = cfg.arch.user_limit;
    if bytes >= space {
        return Err(format!("{what} ({}) does not fit in {}'s user address space ({})", size::show(bytes), cfg.arch, size::show(space)));
    }
    if bytes >= cfg.memory + cfg.swap {
        let swap = if cfg.swap > 0 { format!(" and --swap {}", size::show(cfg.swap)) } else { String::new() };
        return Err(format!("{what} ({}) does not fit in --memory {}{swap}", size::show(bytes), size::show(cfg.memory)));
    }
    Ok(())
}

/// The `--pages` layout, for the workloads that take one.
fn pages(a: &WorkloadArgs) -> Result<Option<PageLayout>, String> {
    a.pages.as_deref().map(PageLayout::parse).transpose()
}

fn gups(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let log2 = a.log2_table.unwrap_or(24);
    let mut g = Gups::new(log2)?;
    g.verify = a.verify;
    if let Some(u) = a.updates {
        if u == 0 || u > 4u64 << log2 {
            return Err(format!("--updates {u} is out of range (1 to 4 x 2^{log2})"));
        }
        if a.verify {
            return Err("--updates: the verification pass redoes all of HPCC's updates; run --verify without --updates".into());
        }
        g.max_updates = Some(u);
    }
    g.pages.asked = pages(a)?;
    fits(&format!("--log2-table {log2}: the GUPS table"), 8u64 << log2, cfg)?;
    Ok(Box::new(g))
}

fn gups_mp(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let log2 = a.log2_table.unwrap_or(21);
    let g = GupsMp::new(log2, a.procs)?;
    let procs = a.procs.unwrap_or(cfg.profile.cpus) as u64;
    fits(&format!("--log2-table {log2} with {procs} processes: the tables"), procs * (8u64 << log2), cfg)?;
    Ok(Box::new(g))
}

fn lat(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let max = size_arg(&a.max_size, "--max-size", Lat::check_max_size)?;
    let mut l = Lat::new(max, a.stride.clone(), Pattern::parse(&a.pattern)?, a.loads)?;
    l.pages.asked = pages(a)?;
    fits(&format!("--max-size {}: the array", a.max_size), max, cfg)?;
    Ok(Box::new(l))
}

fn bw(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let s = size_arg(&a.size, "--size", Bw::check_size)?;
    let b = Bw::new(s, a.tests.clone())?;
    // A copy maps twice the size; each mmap_rd file stays in the page cache.
    fits(&format!("--size {}: the buffers and file", a.size), 3 * s, cfg)?;
    Ok(Box::new(b))
}

fn transpose(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let mut t = Transpose::new(a.sizes.clone())?;
    t.pages.asked = pages(a)?;
    fits("--sizes: the two matrices of the largest size", t.footprint(), cfg)?;
    Ok(Box::new(t))
}

fn stream(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let mut s = Stream::new(a.n, a.ntimes)?;
    s.pages.asked = pages(a)?;
    fits(&format!("--n {}: the three arrays", a.n), 3 * 8 * a.n, cfg)?;
    Ok(Box::new(s))
}

fn index(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let mut i = Index::new(a.scale, a.clients, a.transactions)?;
    i.pages.asked = pages(a)?;
    if let Some(n) = a.insns_per_txn {
        i.set_insns_per_txn(n)?;
    }
    i.round_trip = a.round_trip;
    fits(&format!("--scale {}: the shared buffers", a.scale), i.shared_bytes(), cfg)?;
    Ok(Box::new(i))
}

fn build_tree(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let mut b = Build::new(a.units, a.jobs)?;
    if let Some(n) = a.insns_per_source_byte {
        b.set_insns_per_source_byte(n)?;
    }
    fits(&format!("--units {} with {} jobs: the tree and the compilers", a.units, a.jobs.unwrap_or(cfg.profile.cpus)), b.footprint(cfg.profile.cpus), cfg)?;
    Ok(Box::new(b))
}

fn forkbomb(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let touch = size_arg(&a.touch, "--touch", Forkbomb::check_size)?;
    let inherited = size_arg(&a.inherited, "--inherited", Forkbomb::check_size)?;
    let f = Forkbomb::new(a.procs.unwrap_or(256), a.fanout, touch, inherited)?;
    fits(&format!("--procs {} --touch {} --inherited {}: the tree's memory", f.procs, a.touch, a.inherited), f.footprint(), cfg)?;
    Ok(Box::new(f))
}

fn stress(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let bytes = size_arg(&a.vm_bytes, "--vm-bytes", Stress::check_vm_bytes)?;
    let mut s = Stress::new(a.vm, bytes, a.loops)?;
    s.verify = a.verify;
    let n = a.vm.unwrap_or(cfg.profile.cpus) as u64;
    fits(&format!("--vm {n} --vm-bytes {}: the workers' memory", a.vm_bytes), n.saturating_mul(bytes), cfg)?;
    Ok(Box::new(s))
}

fn realloc(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let start = size_arg(&a.start_size, "--start-size", Realloc::check_start)?;
    let mut r = Realloc::new(start)?;
    r.in_place = !a.always_move;
    fits(&format!("--start-size {}: the first allocation", a.start_size), start, cfg)?;
    Ok(Box::new(r))
}

/// The workloads that take `--pages` (those `splab native` runs).
const PAGES_WORKLOADS: &[&str] = &["gups", "lat", "transpose", "stream", "index"];

pub fn names() -> Vec<&'static str> {
    WORKLOADS.iter().map(|(n, _)| *n).collect()
}

/// The workload or program `a` names, built for a system configured as
/// `cfg`.
pub fn build_run(a: &crate::run::RunArgs, cfg: &Config) -> Result<Box<dyn Workload>, Fail> {
    match (&a.workload, a.program.is_empty()) {
        (Some(w), false) => Err(Fail::Input(format!("give a workload ({w:?}) or a program after --, not both"))),
        (None, true) => {
            // The command typed (sim, compare, validate), for the example.
            let cmd = std::env::args().nth(1).unwrap_or_else(|| "sim".into());
            Err(Fail::Input(format!("give a workload ({}, trace:FILE) or a program after -- (e.g. splab {cmd} -- xz -6 -T1 -c FILE)", names().join(", "))))
        }
        (Some(w), true) => {
            if a.sample.is_some() {
                return Err(Fail::Input("--sample: only a program after -- is sampled".into()));
            }
            build(w, &a.workload_args, cfg)
        }
        (None, false) => crate::online::workload(a).map(|w| Box::new(w) as Box<dyn Workload>),
    }
}

/// How a run names what it ran: the workload, or the program's command.
pub fn label(a: &crate::run::RunArgs) -> String {
    match &a.workload {
        Some(w) => w.clone(),
        None => a.program.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join(" "),
    }
}

/// The workload called `name`, built for a system configured as `cfg`.
pub fn build(name: &str, a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, Fail> {
    if let Some(path) = name.strip_prefix("trace:") {
        if a.pages.is_some() {
            return Err(Fail::Input(format!("--pages: a trace replay does not take a layout (these do: {})", PAGES_WORKLOADS.join(", "))));
        }
        let r = splab_trace::replay::Replay::new(std::path::Path::new(path), None).map_err(Fail::Input)?;
        return Ok(Box::new(r));
    }
    let Some((_, make)) = WORKLOADS.iter().find(|(n, _)| *n == name) else {
        return Err(Fail::Input(format!("unknown workload {name:?} (known: {}, trace:FILE)", names().join(", "))));
    };
    if a.pages.is_some() && !PAGES_WORKLOADS.contains(&name) {
        return Err(Fail::Input(format!("--pages: workload {name} does not take a layout (these do: {})", PAGES_WORKLOADS.join(", "))));
    }
    make(a, cfg).map_err(Fail::Input)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_library_workload_is_runnable() {
        for w in splab_defs::workload::names(splab_defs::workload::Side::Sim) {
            assert!(super::names().contains(&w), "workload {w} has no builder");
        }
    }

    #[test]
    fn args_from_gives_defaults_and_overrides() {
        let a = super::args_from(&["--log2-table", "18"]).unwrap();
        assert_eq!(a.log2_table, Some(18));
        assert_eq!(a.stride, vec![64, 4096]);
        assert!(super::args_from(&["--no-such-option"]).is_err());
    }
}
