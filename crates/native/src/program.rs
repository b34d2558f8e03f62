//! One run of an unmodified program, and every process it starts, in a
//! page layout.
//!
//! How each layout is had (`Setup::new` says it in words, and a layout
//! that cannot be had is refused with the reason):
//! - `4k`: PR_SET_THP_DISABLE in the child before exec; the kernel keeps
//!   it across fork and exec, so no process of the tree gets a THP.
//! - `thp`: as if THP were `always` for the program. As root the system's
//!   THP mode is set to `always` for the run and put back after it
//!   (`sysstate`): every anonymous mapping of every process in the tree is
//!   covered, whatever its allocator, exactly as a machine set to
//!   `always` would run it, with no code injected into the program. It is
//!   system-wide for the run's length, which is why it is set and restored
//!   around each run, not held across rounds. Without root the fallback is
//!   glibc's own tunable `glibc.malloc.hugetlb=1` (malloc advises its heap
//!   MADV_HUGEPAGE), which covers only glibc malloc's memory; the run
//!   reports which one it used.
//! - `mthp:SIZES`: as root, `hugepages-<size>kB/enabled` set to `always`
//!   for the sizes asked and `never` for the others, restored after.
//! - `promote`: base pages at fault (under mode `always`, with
//!   PR_SET_THP_DISABLE's "except advised" flag) and the `promote`
//!   monitor collapsing every fully populated 2 MB range live.
//! - `hugetlb-2m`, `hugetlb-1g`: glibc's `glibc.malloc.hugetlb=<page size>`
//!   (what libhugetlbfs's malloc hook did, now in glibc 2.35+): malloc's
//!   mmap'd blocks and thread arenas come from the hugetlb pool, which is
//!   grown for the run as root and restored; the main heap (brk), the
//!   program's own mmaps and other allocators stay in 4 KB pages.
//!
//! The child runs in a process group of its own (signals splab receives
//! are passed to it, see `sysstate::install_signals`) and dies with splab
//! (PR_SET_PDEATHSIG). splab is a child subreaper, so processes whose
//! parent exits stay in the tree; when the program's first process has
//! exited, what is left of the tree is killed. Every process is reaped
//! with wait4, whose rusage gives user and system time (of the process
//! and the children it reaped) and the largest resident set. A sampler
//! reads /proc/PID/smaps_rollup of the whole tree during the run for the
//! resident, THP and hugetlb memory summed over the processes.

use crate::hugetlb::{self, Pool};
use crate::pages::{Pages, SIZE_1G, SIZE_2M, SIZE_4K};
use crate::promote::{self, Monitor, Target};
use crate::smaps::{self, Rollup};
use crate::sysstate::{self, THP_DIR};
use crate::{now, proctree};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// PR_SET_THP_DISABLE's flag (Linux 6.18) that leaves THP on where a
/// mapping asked for it (MADV_HUGEPAGE) or a collapse is asked for.
pub const PR_THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;

/// A program to run.
#[derive(Clone, Debug, Serialize)]
pub struct Program {
    pub argv: Vec<String>,
    /// Standard input from this file (else /dev/null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<PathBuf>,
}

impl Program {
    /// The command line as a shell would show it.
    pub fn command_line(&self) -> String {
        self.argv
            .iter()
            .map(|a| {
                if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+%@".contains(c)) {
                    a.clone()
                } else {
                    format!("'{}'", a.replace('\'', "'\\''"))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// How a layout is made for a program.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    pub pages: Pages,
    /// What is done, in words.
    pub method: String,
    /// PR_SET_THP_DISABLE's second and third arguments, if set.
    #[serde(skip)]
    prctl: Option<libc::c_ulong>,
    #[serde(skip)]
    env: Vec<(String, String)>,
    /// sysfs files set for the run, and to what.
    #[serde(skip)]
    sysfs: Vec<(String, String)>,
    /// A hugetlb pool page size the run needs pages of.
    #[serde(skip)]
    hugetlb: Option<u64>,
    #[serde(skip)]
    monitor: bool,
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The anonymous multi-size THP sizes this kernel offers (bytes), from
/// the `hugepages-<size>kB` directories that have an `enabled` file.
pub fn mthp_sizes() -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(THP_DIR)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("enabled").exists())
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse::<u64>().ok())
                .map(|kb| kb << 10)
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn mthp_path(bytes: u64) -> String {
    format!("{THP_DIR}/hugepages-{}kB/enabled", bytes >> 10)
}

impl Setup {
    /// How `pages` is had for a program here, or why it cannot be.
    pub fn new(pages: Pages) -> Result<Setup, String> {
        let mode = crate::region::thp_mode("enabled");
        let mut s = Setup { pages, method: String::new(), prctl: None, env: Vec::new(), sysfs: Vec::new(), hugetlb: None, monitor: false };
        match pages {
            Pages::FourK => {
                s.prctl = Some(0);
                s.method = "PR_SET_THP_DISABLE (kept across fork and exec): no THP in any process of the tree".into();
            }
            Pages::Thp => match mode.as_deref() {
                None => return Err(format!("this kernel has no transparent huge pages ({THP_DIR}/enabled is missing)")),
                Some("always") => s.method = "system THP mode is already enabled=always".into(),
                Some(m) if root() => {
                    s.sysfs.push((format!("{THP_DIR}/enabled"), "always".into()));
                    s.method = format!("system THP mode enabled=always for each run (it was {m}; restored after each run)");
                }
                Some(m) => {
                    s.env.push(("GLIBC_TUNABLES".into(), "glibc.malloc.hugetlb=1".into()));
                    s.method = format!("GLIBC_TUNABLES=glibc.malloc.hugetlb=1: glibc malloc advises its heap MADV_HUGEPAGE (not root, so the system mode {m} is left alone; other allocators and the program's own mmaps are not covered)");
                }
            },
            Pages::Mthp(mask) => {
                if !root() {
                    return Err(format!("multi-size THP is set in {THP_DIR}/hugepages-*kB/enabled, which needs root"));
                }
                let have = mthp_sizes();
                if have.is_empty() {
                    return Err(format!("this kernel has no multi-size THP ({THP_DIR}/hugepages-*kB/enabled missing; Linux 6.8+)"));
                }
                for k in 1..=9u32 {
                    let b = SIZE_4K << k;
                    if mask & (1 << k) != 0 && !have.contains(&b) {
                        return Err(format!("this kernel offers no anonymous multi-size THP of {} ({} is missing)", crate::size_text(b), mthp_path(b)));
                    }
                }
                for &b in &have {
                    let k = (b / SIZE_4K).trailing_zeros();
                    let on = k <= 9 && mask & (1 << k) != 0;
                    s.sysfs.push((mthp_path(b), if on { "always" } else { "never" }.into()));
                }
                let names: Vec<String> = (1..=9u32).filter(|k| mask & (1 << k) != 0).map(|k| crate::size_text(SIZE_4K << k)).collect();
                s.method = format!("hugepages-*kB/enabled=always for {}, never for the other sizes, for each run (restored after each run)", names.join(", "));
            }
            Pages::Promote => {
                if mode.is_none() {
                    return Err(format!("this kernel has no transparent huge pages ({THP_DIR}/enabled is missing)"));
                }
                if !root() {
                    return Err("the monitor collapses another process's memory with process_madvise, which needs CAP_SYS_NICE (run as root)".into());
                }
                s.monitor = true;
                s.method = "4 KB pages at fault; a monitor collapses (process_madvise MADV_COLLAPSE) every 2 MB range of a private anonymous mapping once its 512 pages are present".into();
                if mode.as_deref() == Some("always") {
                    s.prctl = Some(PR_THP_DISABLE_EXCEPT_ADVISED);
                    s.method.push_str("; PR_SET_THP_DISABLE except advised keeps the system's mode always from faulting 2 MB pages");
                }
            }
            Pages::Hugetlb2m | Pages::Hugetlb1g => {
                let page = if pages == Pages::Hugetlb1g { SIZE_1G } else { SIZE_2M };
                hugetlb::counters(page)?;
                s.env.push(("GLIBC_TUNABLES".into(), format!("glibc.malloc.hugetlb={page}")));
                s.hugetlb = Some(page);
                s.method = format!(
                    "GLIBC_TUNABLES=glibc.malloc.hugetlb={page}: glibc malloc's mmap'd blocks and thread arenas from the {} hugetlb pool; its main heap (brk), the program's own mmaps and other allocators stay in 4 KB pages",
                    if page == SIZE_1G { "1 GB" } else { "2 MB" }
                );
            }
            Pages::Collapse | Pages::Mix(_) => {
                return Err(format!("{pages} lays out a built-in workload's region; for a program use 4k, thp, mthp:SIZES, promote, hugetlb-2m or hugetlb-1g"));
            }
        }
        Ok(s)
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// exit(code).
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// The program could not be started (not found, not executable).
    NotStarted(String),
}

impl Exit {
    pub fn text(&self) -> String {
        match self {
            Exit::Code(c) => format!("exit {c}"),
            Exit::Signal(s) => format!("killed by {}", sysstate::signal_name(*s)),
            Exit::NotStarted(e) => format!("not started: {e}"),
        }
    }

    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
    }
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    pub round: u32,
    pub exit: Exit,
    /// Seconds from the start to the exit of the program's first process
    /// (CLOCK_MONOTONIC).
    pub wall: f64,
    /// User and system CPU seconds of every process of the tree (wait4).
    pub user: f64,
    pub sys: f64,
    /// The largest resident set of any one process of the tree
    /// (ru_maxrss), bytes.
    pub peak_rss: u64,
    /// Largest sums over the tree, sampled from smaps_rollup: resident,
    /// in THP (AnonHugePages), in hugetlb pages.
    pub sampled: Rollup,
    pub samples: u64,
    /// Processes reaped (the program and every process it started).
    pub processes: u64,
    /// Processes still running when the first one exited, killed.
    pub killed_leftovers: u64,
    pub stdout_bytes: u64,
    /// CRC-32 of standard output.
    pub stdout_crc32: u32,
    /// The end of standard error (at most 2 KB).
    pub stderr_tail: String,
    /// THPs allocated at fault by size during the run, system-wide
    /// (hugepages-*kB/stats/anon_fault_alloc), where any were.
    pub thp_fault_alloc: BTreeMap<String, u64>,
    /// The promotion monitor's counters (`promote`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promote: Option<promote::Counters>,
    /// The signal that interrupted splab during the run, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<i32>,
    /// Why the run is left out of the figures, if it is (`programs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// Options of a run.
#[derive(Clone, Debug)]
pub struct RunOpts {
    /// Pause between samples of the tree's memory (it grows to keep the
    /// sampler under 1% of a CPU).
    pub sample_every: Duration,
    pub monitor: promote::Config,
    /// Let the program's standard output and error through to splab's
    /// (`splab promote`) instead of capturing them.
    pub passthrough: bool,
    /// hugetlb pages to have free for a hugetlb layout.
    pub hugetlb_bytes: u64,
}

impl Default for RunOpts {
    fn default() -> RunOpts {
        RunOpts { sample_every: Duration::from_millis(50), monitor: promote::Config::default(), passthrough: false, hugetlb_bytes: 1 << 30 }
    }
}

fn fault_allocs() -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(THP_DIR) else { return m };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(size) = name.strip_prefix("hugepages-") else { continue };
        if let Ok(t) = std::fs::read_to_string(e.path().join("stats/anon_fault_alloc")) {
            if let Ok(v) = t.trim().parse::<u64>() {
                m.insert(size.to_string(), v);
            }
        }
    }
    m
}

/// Makes splab a child subreaper (once).
fn subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: prctl with integer arguments.
    ONCE.call_once(|| unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    });
}

/// Samples the tree's memory until told to stop; the largest sums.
fn sampler(stop: Arc<AtomicBool>, every: Duration) -> std::thread::JoinHandle<(Rollup, u64)> {
    std::thread::spawn(move || {
        let me = std::process::id() as i32;
        let (mut peak, mut n) = (Rollup::default(), 0u64);
        while !stop.load(Ordering::SeqCst) {
            let t = now();
            let mut sum = Rollup::default();
            for pid in proctree::descendants(me) {
                if let Some(r) = smaps::rollup(pid) {
                    sum.add(&r);
                }
            }
            peak.max(&sum);
            n += 1;
            let cost = now() - t;
            let pause = every.max(Duration::from_secs_f64(cost * 100.0));
            let end = now() + pause.as_secs_f64();
            while !stop.load(Ordering::SeqCst) && now() < end {
                std::thread::sleep(Duration::from_millis(2).min(pause));
            }
        }
        (peak, n)
    })
}

fn tv(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 * 1e-6
}

/// Keeps the last `cap` bytes read.
fn tail_reader<R: Read + Send + 'static>(mut r: R, cap: usize) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut keep: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            keep.extend_from_slice(&buf[..n]);
            if keep.len() > 2 * cap {
                keep.drain(..keep.len() - cap);
            }
        }
        if keep.len() > cap {
            keep.drain(..keep.len() - cap);
        }
        String::from_utf8_lossy(&keep).into_owned()
    })
}

/// Holds a layout's system settings for one run and puts them back when
/// dropped (an error or a panic included).
struct Settings(Vec<String>);

impl Drop for Settings {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            if let Err(e) = sysstate::restore(p) {
                eprintln!("splab: {e}");
            }
        }
    }
}

/// Runs `prog` once in `setup`'s layout. `pool` is grown for hugetlb
/// layouts. An error is something splab could not do (a setting it could
/// not make); the program's own failures are in the record.
pub fn run(prog: &Program, setup: &Setup, round: u32, opts: &RunOpts, pool: &mut Pool) -> Result<RunRecord, String> {
    subreaper();
    let mut settings = Settings(Vec::new());
    for (path, value) in &setup.sysfs {
        sysstate::set(path, value)?;
        settings.0.push(path.clone());
    }
    if let Some(page) = setup.hugetlb {
        pool.ensure(page, opts.hugetlb_bytes.div_ceil(page).max(1))?;
    }
    let Some(argv0) = prog.argv.first() else { return Err("no program given".into()) };
    let mut cmd = Command::new(argv0);
    cmd.args(&prog.argv[1..]);
    for (k, v) in &setup.env {
        cmd.env(k, v);
    }
    match &prog.input {
        Some(p) => {
            let f = std::fs::File::open(p).map_err(|e| format!("--input {}: {e}", p.display()))?;
            cmd.stdin(f);
        }
        None => {
            cmd.stdin(Stdio::null());
        }
    }
    if !opts.passthrough {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let prctl = setup.prctl;
    // SAFETY: the closure runs in the child between fork and exec and
    // makes only async-signal-safe system calls.
    unsafe {
        cmd.pre_exec(move || {
            let empty: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if let Some(flags) = prctl {
                if libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, flags, 0 as libc::c_ulong, 0 as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    // The sampler and the monitor watch splab's descendants, so they can
    // start first and see the program from its first page.
    let stop = Arc::new(AtomicBool::new(false));
    let samp = sampler(stop.clone(), opts.sample_every);
    let monitor = if setup.monitor { Some(Monitor::start(Target::Descendants(std::process::id() as i32), opts.monitor)?) } else { None };
    let allocs0 = fault_allocs();
    let t0 = now();
    sysstate::starting();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            sysstate::forward_to(0);
            stop.store(true, Ordering::SeqCst);
            drop(monitor);
            let _ = samp.join();
            let why = if e.kind() == std::io::ErrorKind::NotFound { format!("{argv0}: command not found") } else { format!("{argv0}: {e}") };
            return Ok(RunRecord {
                round,
                exit: Exit::NotStarted(why),
                wall: 0.0,
                user: 0.0,
                sys: 0.0,
                peak_rss: 0,
                sampled: Rollup::default(),
                samples: 0,
                processes: 0,
                killed_leftovers: 0,
                stdout_bytes: 0,
                stdout_crc32: 0,
                stderr_tail: String::new(),
                thp_fault_alloc: BTreeMap::new(),
                promote: None,
                interrupted_by: sysstate::received(),
                failed: None,
            });
        }
    };
    let pid = child.id() as i32;
    sysstate::forward_to(pid);
    sysstate::watch_program(pid);
    let out = child.stdout.take().map(|mut o| {
        std::thread::spawn(move || {
            let mut h = crc32fast::Hasher::new();
            let mut n = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(k) = o.read(&mut buf) {
                if k == 0 {
                    break;
                }
                h.update(&buf[..k]);
                n += k as u64;
            }
            (n, h.finalize())
        })
    });
    let err = child.stderr.take().map(|e| tail_reader(e, 2048));

    // Reap the whole tree: the first process, then whatever is left.
    let (mut user, mut sys, mut peak_rss, mut processes) = (0.0, 0.0, 0u64, 0u64);
    let mut killed = std::collections::BTreeSet::new();
    let mut exit = None;
    let mut wall = 0.0;
    let me = std::process::id() as i32;
    loop {
        if exit.is_some() {
            // The program's first process is gone: so is the run. What it
            // left running (daemons, stragglers) is killed, again after
            // every reap in case one forked meanwhile.
            for p in proctree::descendants(me) {
                if killed.insert(p) {
                    // SAFETY: kill has no memory-safety preconditions.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
        }
        let mut status = 0;
        // SAFETY: a zeroed rusage is valid for wait4 to fill.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals.
        let r = unsafe { libc::wait4(-1, &mut status, 0, &mut ru) };
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break;
        }
        processes += 1;
        user += tv(ru.ru_utime);
        sys += tv(ru.ru_stime);
        peak_rss = peak_rss.max(ru.ru_maxrss as u64 * 1024);
        if r == pid {
            wall = now() - t0;
            let st = std::process::ExitStatus::from_raw(status);
            exit = Some(match (st.code(), st.signal()) {
                (Some(c), _) => Exit::Code(c),
                (_, Some(s)) => Exit::Signal(s),
                _ => Exit::Code(-1),
            });
            sysstate::forward_to(0);
        }
    }
    sysstate::forward_to(0);
    sysstate::forget_program(pid);
    stop.store(true, Ordering::SeqCst);
    let promote = monitor.map(|m| m.stop());
    let (sampled, samples) = samp.join().unwrap_or_default();
    let (stdout_bytes, stdout_crc32) = out.and_then(|h| h.join().ok()).unwrap_or((0, 0));
    let stderr_tail = err.and_then(|h| h.join().ok()).unwrap_or_default();
    drop(settings);
    let allocs1 = fault_allocs();
    let thp_fault_alloc = allocs1.iter().filter_map(|(k, &v)| Some((k.clone(), v.checked_sub(*allocs0.get(k)?)?))).filter(|(_, d)| *d > 0).collect();
    Ok(RunRecord {
        round,
        exit: exit.unwrap_or(Exit::Code(-1)),
        wall,
        user,
        sys,
        peak_rss,
        sampled,
        samples,
        processes,
        killed_leftovers: killed.len() as u64,
        stdout_bytes,
        stdout_crc32,
        stderr_tail,
        thp_fault_alloc,
        promote,
        interrupted_by: sysstate::received(),
        failed: None,
    })
}
