//! Turning a spec's workload and its parameters into a runnable workload
//! of the model. The registry (`splab_defs::workload`) names the
//! workloads and their parameters; `builder` is the one place that maps
//! each to its constructor. Adding a workload is an entry there and an
//! arm here.

use crate::error::Fail;
use crate::spec::{RunSpec, WorkloadName};
use splab_defs::workload::{flag, need, pages_names, unread_by, Side};
use splab_defs::{WorkloadKind, WorkloadParams};
use splab_hw::size;
use splab_sim::Config;
use splab_trace::online::{Io, Online, Sample};
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

type Builder = fn(&WorkloadParams, Option<PageLayout>, &Config) -> Result<Box<dyn Workload>, String>;

/// The constructor of each workload of the model.
fn builder(kind: WorkloadKind) -> Option<Builder> {
    use WorkloadKind as K;
    Some(match kind {
        K::Gups => gups,
        K::GupsMp => gups_mp,
        K::Lat => lat,
        K::Bw => bw,
        K::Transpose => transpose,
        K::Stream => stream,
        K::Index => index,
        K::Build => build_tree,
        K::Forkbomb => forkbomb,
        K::Stress => stress,
        K::Realloc => realloc,
        K::Sparse => sparse,
        K::Arenas => arenas,
        K::Requests => requests,
        K::Misses => return None,
    })
}

/// A size parameter, parsed; errors name the option and the text as typed.
fn size_of(text: &Option<String>, name: &str) -> Result<(u64, String), String> {
    let t = need(text, name)?;
    let bytes = size::parse(&t).map_err(|e| format!("{}: {e}", flag(name)))?;
    Ok((bytes, t))
}

/// A size parameter, parsed and checked.
fn size_arg(text: &Option<String>, name: &str, check: fn(u64) -> Result<(), String>) -> Result<(u64, String), String> {
    let (bytes, t) = size_of(text, name)?;
    check(bytes).map_err(|e| format!("{} {t}: {e}", flag(name)))?;
    Ok((bytes, t))
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

fn gups(a: &WorkloadParams, pages: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let log2 = need(&a.log2_table, "log2_table")?;
    let verify = need(&a.verify, "verify")?;
    let mut g = Gups::new(log2)?;
    g.verify = verify;
    if let Some(u) = a.updates {
        if u == 0 || u > 4u64 << log2 {
            return Err(format!("--updates {u} is out of range (1 to 4 x 2^{log2})"));
        }
        if verify {
            return Err("--updates: the verification pass redoes all of HPCC's updates; run --verify without --updates".into());
        }
        g.max_updates = Some(u);
    }
    g.pages.asked = pages;
    fits(&format!("--log2-table {log2}: the GUPS table"), 8u64 << log2, cfg)?;
    Ok(Box::new(g))
}

fn gups_mp(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let log2 = need(&a.log2_table, "log2_table")?;
    let g = GupsMp::new(log2, a.procs)?;
    let procs = a.procs.unwrap_or(cfg.profile.cpus) as u64;
    fits(&format!("--log2-table {log2} with {procs} processes: the tables"), procs * (8u64 << log2), cfg)?;
    Ok(Box::new(g))
}

fn lat(a: &WorkloadParams, pages: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let (max, text) = size_arg(&a.max_size, "max_size", Lat::check_max_size)?;
    let mut l = Lat::new(max, need(&a.stride, "stride")?, Pattern::parse(&need(&a.pattern, "pattern")?)?, need(&a.loads, "loads")?)?;
    l.pages.asked = pages;
    fits(&format!("--max-size {text}: the array"), max, cfg)?;
    Ok(Box::new(l))
}

fn bw(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let (s, text) = size_arg(&a.size, "size", Bw::check_size)?;
    let b = Bw::new(s, need(&a.tests, "tests")?)?;
    // A copy maps twice the size; each mmap_rd file stays in the page cache.
    fits(&format!("--size {text}: the buffers and file"), 3 * s, cfg)?;
    Ok(Box::new(b))
}

fn transpose(a: &WorkloadParams, pages: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let mut t = Transpose::new(need(&a.sizes, "sizes")?)?;
    t.pages.asked = pages;
    fits("--sizes: the two matrices of the largest size", t.footprint(), cfg)?;
    Ok(Box::new(t))
}

fn stream(a: &WorkloadParams, pages: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let n = need(&a.n, "n")?;
    let mut s = Stream::new(n, need(&a.ntimes, "ntimes")?)?;
    s.pages.asked = pages;
    fits(&format!("--n {n}: the three arrays"), 3 * 8 * n, cfg)?;
    Ok(Box::new(s))
}

fn index(a: &WorkloadParams, pages: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let scale = need(&a.scale, "scale")?;
    let mut i = Index::new(scale, need(&a.clients, "clients")?, need(&a.transactions, "transactions")?)?;
    i.pages.asked = pages;
    if let Some(n) = a.insns_per_txn {
        i.set_insns_per_txn(n)?;
    }
    i.round_trip = need(&a.round_trip, "round_trip")?;
    fits(&format!("--scale {scale}: the shared buffers"), i.shared_bytes(), cfg)?;
    Ok(Box::new(i))
}

fn build_tree(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let units = need(&a.units, "units")?;
    let mut b = Build::new(units, a.jobs)?;
    if let Some(n) = a.insns_per_source_byte {
        b.set_insns_per_source_byte(n)?;
    }
    fits(&format!("--units {units} with {} jobs: the tree and the compilers", a.jobs.unwrap_or(cfg.profile.cpus)), b.footprint(cfg.profile.cpus), cfg)?;
    Ok(Box::new(b))
}

fn forkbomb(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let (touch, touch_text) = size_arg(&a.touch, "touch", Forkbomb::check_size)?;
    let (inherited, inherited_text) = size_arg(&a.inherited, "inherited", Forkbomb::check_size)?;
    let f = Forkbomb::new(need(&a.procs, "procs")?, need(&a.fanout, "fanout")?, touch, inherited)?;
    fits(&format!("--procs {} --touch {touch_text} --inherited {inherited_text}: the tree's memory", f.procs), f.footprint(), cfg)?;
    Ok(Box::new(f))
}

fn stress(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let (bytes, text) = size_arg(&a.vm_bytes, "vm_bytes", Stress::check_vm_bytes)?;
    let mut s = Stress::new(a.vm, bytes, need(&a.loops, "loops")?)?;
    s.verify = need(&a.verify, "verify")?;
    let n = a.vm.unwrap_or(cfg.profile.cpus) as u64;
    fits(&format!("--vm {n} --vm-bytes {text}: the workers' memory"), n.saturating_mul(bytes), cfg)?;
    Ok(Box::new(s))
}

fn realloc(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let (start, text) = size_arg(&a.start_size, "start_size", Realloc::check_start)?;
    let mut r = Realloc::new(start)?;
    r.in_place = !need(&a.always_move, "always_move")?;
    fits(&format!("--start-size {text}: the first allocation"), start, cfg)?;
    Ok(Box::new(r))
}

fn sparse(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let (bytes, text) = size_of(&a.size, "size")?;
    let s = splab_workloads::sparse::Sparse::new(bytes, need(&a.fraction, "fraction")?, need(&a.rounds, "rounds")?)?;
    fits(&format!("--size {text}: the arena"), bytes, cfg)?;
    Ok(Box::new(s))
}

fn arenas(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let (live, text) = size_of(&a.live, "live")?;
    let (heap, _) = size_of(&a.heap, "heap")?;
    let w = splab_workloads::arenas::Arenas::new(a.threads, live, need(&a.ops, "ops")?, heap)?;
    fits(&format!("--live {text}: the live objects"), live, cfg)?;
    Ok(Box::new(w))
}

fn requests(a: &WorkloadParams, _: Option<PageLayout>, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let (value, _) = size_of(&a.value_size, "value_size")?;
    let (keys, requests) = (need(&a.keys, "keys")?, need(&a.requests, "requests")?);
    let w = splab_workloads::requests::Requests::new(keys, requests, value, need(&a.snapshots, "snapshots")?)?;
    fits(&format!("--keys {keys} --requests {requests}: the dataset"), w.footprint(), cfg)?;
    Ok(Box::new(w))
}

/// Where a program run online reads its standard input and writes its
/// standard output, and what it runs under (the front end; valgrind's
/// path).
#[derive(Clone, Debug)]
pub struct ProgramIo {
    pub stdin: Io,
    pub stdout: Io,
    pub valgrind: std::path::PathBuf,
    pub frontend: splab_trace::online::Frontend,
}

impl Default for ProgramIo {
    fn default() -> ProgramIo {
        ProgramIo { stdin: Io::Null, stdout: Io::Null, valgrind: "valgrind".into(), frontend: Default::default() }
    }
}

/// The program `spec` runs online, its input from `--input` if given,
/// else `io.stdin`.
pub fn online(spec: &RunSpec, io: &ProgramIo) -> Result<Online, Fail> {
    if spec.pages.is_some() {
        return Err(Fail::Input("--pages: a program takes the layout the kernel gives it (compare runs superpages off and on)".into()));
    }
    let run_as = spec.user.as_deref().map(online_user).transpose().map_err(Fail::Input)?;
    let mut w = Online::new(spec.program.iter().map(Into::into).collect(), io.valgrind.clone(), io.frontend).map_err(Fail::Input)?;
    w.sample = spec.sample.as_deref().map(Sample::parse).transpose().map_err(Fail::Input)?;
    w.stdout = io.stdout.clone();
    w.user = run_as;
    w.stdin = match &spec.input {
        Some(p) if !p.is_file() => return Err(Fail::Input(format!("--input {}: no such file", p.display()))),
        Some(p) => Io::File(p.clone()),
        None => io.stdin.clone(),
    };
    Ok(w)
}

/// The user and group ids of `--user NAME`, which only root may take.
pub(crate) fn user(name: &str) -> Result<(u32, u32), String> {
    let c = std::ffi::CString::new(name).map_err(|_| format!("--user {name:?}: not a user name"))?;
    // SAFETY: `c` is a valid NUL-terminated name; the entry getpwnam returns
    // is read at once, before any other call that could overwrite it.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(format!("--user {name:?}: no such user"));
    }
    // SAFETY: `pw` is non-null and points at getpwnam's entry.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if me != 0 && me != uid {
        return Err(format!("--user {name:?}: only root can run a program as another user (splab runs as uid {me})"));
    }
    Ok((uid, gid))
}

/// `--user NAME`'s ids for a program run online, where the front end
/// (valgrind's files) and the program write in TMPDIR as that user:
/// refused here if they cannot, rather than as a front end that does not
/// start.
pub(crate) fn online_user(name: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = user(name)?;
    let tmp = std::env::temp_dir();
    // SAFETY: geteuid has no preconditions.
    if uid != unsafe { libc::geteuid() } && !writable_by(&tmp, uid, gid) {
        return Err(format!("--user {name:?}: uid {uid} cannot write in the temporary directory {} (TMPDIR), where the front end and the program keep their files; give a TMPDIR it can write, as /tmp", tmp.display()));
    }
    Ok((uid, gid))
}

/// Whether `dir`'s mode lets `uid` (group `gid`, no other groups) create
/// files in it.
fn writable_by(dir: &std::path::Path, uid: u32, gid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(dir) else { return false };
    let bits = if m.uid() == uid {
        m.mode() >> 6
    } else if m.gid() == gid {
        m.mode() >> 3
    } else {
        m.mode()
    };
    bits & 0o3 == 0o3
}

/// A workload parameter given for a single run (the command line, Python's
/// `run`) that the run would not read: an error naming it, not a run that
/// silently ignores it. (Sweeps and run specs set options of several
/// workloads and each point keeps its own: `setup::resolved`.)
pub fn check_params(spec: &RunSpec) -> Result<(), Fail> {
    let why = match &spec.workload {
        Some(WorkloadName::Kind(k)) => k.foreign_param(Side::Sim, &spec.params),
        Some(WorkloadName::Trace(_)) => unread_by("a trace replay", &spec.params),
        None => unread_by("a program run", &spec.params),
    };
    why.map_or(Ok(()), |m| Err(Fail::Input(m)))
}

/// The workload or program `spec` names, built for a system configured as
/// `cfg`.
pub fn build(spec: &RunSpec, cfg: &Config, io: &ProgramIo) -> Result<Box<dyn Workload>, Fail> {
    match (&spec.workload, spec.program.is_empty()) {
        (Some(w), false) => Err(Fail::Input(format!("give a workload ({w}) or a program after --, not both"))),
        (None, true) => {
            // The command typed (sim, compare, validate), for the example.
            let cmd = crate::output::args().into_iter().next().filter(|c| !c.starts_with('-')).unwrap_or_else(|| "sim".into());
            Err(Fail::Input(format!("give a workload ({}, trace:FILE) or a program after -- (e.g. splab {cmd} -- xz -6 -T1 -c FILE)", crate::spec::workload_names())))
        }
        (Some(w), true) => {
            if spec.sample.is_some() {
                return Err(Fail::Input("--sample: only a program after -- is sampled".into()));
            }
            if spec.input.is_some() {
                return Err(Fail::Input("--input: only a program after -- reads one".into()));
            }
            if let Some(u) = &spec.user {
                return Err(Fail::Input(format!("--user {u}: only a program after -- runs as another user")));
            }
            workload(w, &spec.params, spec.pages.as_deref(), cfg)
        }
        (None, false) => online(spec, io).map(|w| Box::new(w) as Box<dyn Workload>),
    }
}

/// The workload `name` with its parameters, laid out as `pages` says,
/// built for a system configured as `cfg`.
pub fn workload(name: &WorkloadName, params: &WorkloadParams, pages: Option<&str>, cfg: &Config) -> Result<Box<dyn Workload>, Fail> {
    let kind = match name {
        WorkloadName::Trace(path) => {
            if pages.is_some() {
                return Err(Fail::Input(format!("--pages: a trace replay does not take a layout (these do: {})", pages_names().join(", "))));
            }
            let r = splab_trace::replay::Replay::new(path, None).map_err(Fail::Input)?;
            return Ok(Box::new(r));
        }
        WorkloadName::Kind(k) => *k,
    };
    let Some(make) = builder(kind) else {
        return Err(Fail::Input(format!("workload {kind} runs only natively (known: {}, trace:FILE)", crate::spec::workload_names())));
    };
    if pages.is_some() && !kind.def().pages {
        return Err(Fail::Input(format!("--pages: workload {kind} does not take a layout (these do: {})", pages_names().join(", "))));
    }
    let layout = pages.map(PageLayout::parse).transpose().map_err(Fail::Input)?;
    make(&kind.resolve(Side::Sim, params), layout, cfg).map_err(Fail::Input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_of_the_model_has_a_builder() {
        for w in &splab_defs::workload::WORKLOADS {
            assert_eq!(builder(w.kind).is_some(), w.kind.runs_on(Side::Sim), "{}", w.name);
        }
    }
}
