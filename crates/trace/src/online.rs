//! A real program run online (`splab sim -- PROG ARGS`): the program runs
//! under splab's valgrind tool (tools/vgtrace, `--ring`), or under
//! DynamoRIO with splab's client (crates/drclient, `--frontend
//! dynamorio`: the same rings and words, fewer kinds of them), and its
//! references go straight into the simulated system as it runs; no trace
//! file is written.
//!
//! The crossing: every real process (the program, each child it forks,
//! each program a process execs, valgrind following them with
//! `--trace-children=yes`) writes its stream of words (`vgraw.rs`
//! documents them) into a ring of its own in shared memory: a file of 32
//! slots of 2 MiB that the tool creates in a private directory, maps, and
//! announces with one line on the FIFO `ctl` there. This module maps each
//! ring as it is announced (and unlinks its file at once, so nothing is
//! left behind however the run ends) and consumes published slots in
//! place: one counter update and at most one futex wake per slot of 256 K
//! references, no copy, no text. The tool fills the next slots meanwhile,
//! so recording and simulating overlap; a full ring makes the tool wait,
//! so the host memory used is bounded by the rings and the model, not by
//! the program's length.
//!
//! One simulated process per real one: the first is spawned, a fork word
//! in the parent's stream forks the parent's simulated process (copy on
//! write, as the real fork), and an exec (a new ring announced under a pid
//! already running) ends the old simulated process and spawns a new one
//! (a child that execs before its parent's fork word is read waits for
//! it: its own stream comes first).
//! Processes are placed on the modelled CPUs in turn. Each stream's words
//! become loads and stores, map and unmap events, as the replay makes them
//! (`replay::Run`, whose comment says how x86-64 addresses land in the
//! modelled address space); instruction counts are charged at the
//! profile's cost per instruction (`System::instructions`).
//!
//! The order of the processes' slots is a function of the streams alone,
//! never of how the host ran them (`drive`): each process has a clock,
//! the references of its stream so far (a child starts at its parent's
//! at the fork, a program exec'd at the old one's), and the next slot is
//! always the one of the process whose clock is lowest (the lower
//! simulated pid on a tie). A process alone runs freely and splab waits
//! for its slots. Once there are several, the real processes run in
//! lockstep, so that each one's own stream is the same on every run too
//! (what `xz -d` finds when it reads a pipe is what the writer did
//! before, not how far the host let it get): the tool stops each at
//! gates, points of its own stream (before every slot and every system
//! call that can touch another process), and splab lets one go at a
//! time, only when the whole tree under valgrind is still (every task
//! asleep, each process at a gate, in a system call it passed a gate
//! for, or exited; `State::still`), to the process at a gate whose clock
//! is lowest (`State::lockstep_step`). A process in a system call then is
//! blocked in the kernel on another (a pipe's reader, a shell waiting for
//! its child); its clock follows the clock of the one granted. What stays
//! host-dependent: a process's threads (one stream, ordered by
//! valgrind's scheduler and the host's), a timer ending beside other
//! processes, and a process alone polling what comes from outside. The
//! tool marks them, and such a run is reported not deterministic
//! (docs/real-programs.md).
//!
//! Sampling (`Sample`, SMARTS-style): the tool counts each process's
//! references, opens a window at the first slot that starts at or past
//! the start of each period, keeps its slots in detail for `detail`
//! references and the others in functional warming, and begins every slot
//! with a word that says which. A slot in detail is
//! measured: what the system's counters gained over it goes to the
//! process's current window. In warming, TLBs, page-walk caches, page
//! tables, caches and the kernel (faults, reservations, promotion) evolve
//! as in full detail but nothing is measured, and the tool leaves out (and
//! counts) a reference that a direct-mapped filter of `warm_filter_sets`
//! virtual lines finds: the last reference to that filter set touched the
//! same line, so the line is the most recently used of its first-level
//! set and the access would hit there, changing no replacement state at
//! any level (the filter has no more sets than the first-level cache and
//! no more than a page has lines, so its sets split the physically indexed
//! cache's sets the same way). A store to a line last only loaded is kept,
//! for the dirty bits; the filter starts empty when warming starts and
//! after every map, unmap and fork. What stays approximate: the TLB's
//! recency order (the line's page was used recently, not necessarily last
//! in its TLB set), and page-walk or kernel accesses to the cache between
//! two references to a line. Every figure is estimated from the measured
//! windows with a 95 % confidence interval (`estimate`: a process's first
//! window, its start, counts once; the later windows stand for the rest).
//! `splab bench --only-program` prints the full-detail figure beside the
//! sampled one.

use crate::record::{find_program, mkfifo, splabtrace_lib, valgrind_version, which};
use crate::replay::{Failure, Run};
use crate::{vgraw, Event, Kind, Origin, Ref, Region, MAX_NAME};
use serde::Serialize;
use splab_sim::timing::CycleBreakdown;
use splab_sim::System;
use splab_vm::Pid;
use splab_workloads::{Figure, Workload, WorkloadResult};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// The ring, as tools/vgtrace/vt_main.c lays it out (RING_* there).
const RING_MAGIC: u64 = u64::from_le_bytes(*b"SPLRING2");
const R_SLOTS: usize = 1;
const R_SLOT_WORDS: usize = 2;
const R_PID: usize = 3;
const R_PUBLISHED: usize = 4;
const R_CONSUMED: usize = 5;
const R_TOOL_WAITS: usize = 6;
const R_ENDED: usize = 7;
const R_GRANTED: usize = 8;
const R_GATE: usize = 9;
const R_AT_GATE: usize = 10;
const R_IN_CALL: usize = 11;
const R_LENS: usize = 16;
/// `R_GRANTED` for a process alone: every gate.
const ALL_GATES: u64 = u64::MAX;
const RING_HEADER: usize = 512;

const W_MAP: u8 = 0x80;
const W_UNMAP: u8 = 0x81;
const W_INSN: u8 = 0x82;
const W_FORK: u8 = 0x83;
const W_SKIP: u8 = 0x84;
const W_MODE: u8 = 0x85;
const W_BLOCK: u8 = 0x86;
const W_ENTER: u8 = 0x87;
const W_EXIT: u8 = 0x88;
const W_THREAD: u8 = 0x89;
const W_AGAIN: u8 = 0x8a;
const W_TIMED: u8 = 0x8b;
/// Set in a `W_AGAIN` word the tool wrote in lockstep.
const AGAIN_IN_LOCKSTEP: u64 = 1 << 8;
const W_END: u8 = 0xfe;
const W_NOP: u8 = 0xff;

/// Where the program's standard input or output goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Io {
    /// splab's own.
    Inherit,
    /// /dev/null.
    Null,
    /// A file (standard input read from it).
    File(PathBuf),
    /// Output: a pipe that splab reads and throws away (for programs that
    /// behave otherwise when writing to /dev/null).
    Pipe,
    /// Output: splab's standard error, so that it never mixes with the
    /// report on standard output.
    Stderr,
}

impl Io {
    fn stdio(&self, write: bool) -> Result<Stdio, String> {
        Ok(match self {
            Io::Inherit => Stdio::inherit(),
            Io::Null => Stdio::null(),
            Io::Pipe => Stdio::piped(),
            Io::Stderr => Stdio::from(std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned().map_err(|e| format!("standard error: {e}"))?),
            Io::File(p) => {
                let f = if write { File::create(p) } else { File::open(p) };
                Stdio::from(f.map_err(|e| format!("{}: {e}", p.display()))?)
            }
        })
    }
}

/// `--sample DETAIL:PERIOD`, in references.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sample {
    pub detail: u64,
    pub period: u64,
}

impl Sample {
    /// Parses `DETAIL:PERIOD` with optional K, M, G suffixes (powers of
    /// ten: reference counts).
    pub fn parse(s: &str) -> Result<Sample, String> {
        let count = |t: &str| -> Result<u64, String> {
            let t = t.trim();
            let (num, mul) = match t.char_indices().last() {
                Some((i, 'k' | 'K')) => (&t[..i], 1_000),
                Some((i, 'm' | 'M')) => (&t[..i], 1_000_000),
                Some((i, 'g' | 'G')) => (&t[..i], 1_000_000_000),
                _ => (t, 1),
            };
            let n: f64 = num.parse().map_err(|_| format!("{t:?} is not a count (e.g. 10M)"))?;
            if !(n.is_finite() && n >= 1.0) {
                return Err(format!("{t:?}: a count of at least 1"));
            }
            Ok((n * mul as f64) as u64)
        };
        let Some((d, p)) = s.split_once(':') else {
            return Err(format!("--sample {s:?}: expected DETAIL:PERIOD, e.g. 1M:10M"));
        };
        let (detail, period) = (count(d).map_err(|e| format!("--sample {s:?}: {e}"))?, count(p).map_err(|e| format!("--sample {s:?}: {e}"))?);
        if detail >= period {
            return Err(format!("--sample {s:?}: the period must be longer than the detail"));
        }
        Ok(Sample { detail, period })
    }
}

/// Functional warming's line filter (the tool's, `--filter-sets`): as
/// many sets as the first-level data cache has, but no more than a page
/// has lines (`page` bytes), rounded down to a power of two, so that each
/// filter set covers whole sets of the physically indexed cache.
pub fn warm_filter_sets(l1d: &splab_hw::cache::CacheConfig, page: u64) -> usize {
    let line = 1u64 << splab_hw::cache::LINE_SHIFT;
    let cache_sets = (l1d.size_kb * 1024 / line / l1d.ways.max(1) as u64).max(1);
    let s = cache_sets.min((page / line).max(1));
    1 << (63 - s.leading_zeros())
}

/// One measured window: its references and what they cost.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Window {
    /// The process's first window: its start, measured whole.
    pub first: bool,
    pub refs: u64,
    pub instructions: u64,
    pub cycles: f64,
    pub data: f64,
    pub translation: f64,
    pub kernel: f64,
    pub core: f64,
    pub branch: f64,
    pub fetch: f64,
    pub tlb_misses: u64,
    pub dram: u64,
}

/// An estimate from the measured windows: the mean and the half-width of
/// its 95 % confidence interval.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub plus_minus: f64,
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rel = if self.value != 0.0 { 100.0 * self.plus_minus / self.value.abs() } else { 0.0 };
        write!(f, "{} ± {} ({rel:.1} %)", sig(self.value), sig(self.plus_minus))
    }
}

fn sig(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.4}")
    }
}

/// Two-sided 95 % quantile of Student's t with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        _ => 1.96 + 2.4 / df as f64,
    }
}

/// The total over `total_refs` references of a quantity measured per
/// window as `f(window)`, in two strata. Each process's first window (its
/// start: cold caches, first-touch faults, which happen once) is measured
/// whole and counts as itself. The rest of the references are estimated
/// from the other windows by the ratio estimator (their quantity over
/// their references, times the references they stand for), with a 95 %
/// interval from the spread of those windows about that ratio (they
/// differ a little in length: they end at slot boundaries). With fewer
/// than two later windows, every window is taken alike; with every
/// reference measured, the estimate is their total.
pub fn estimate(windows: &[Window], total_refs: u64, f: impl Fn(&Window) -> f64) -> Estimate {
    if !windows.is_empty() && windows.iter().map(|w| w.refs).sum::<u64>() >= total_refs {
        // Everything measured.
        return Estimate { value: windows.iter().map(&f).sum(), plus_minus: 0.0 };
    }
    let later = windows.iter().filter(|w| !w.first && w.refs > 0).count();
    let (census, rest): (Vec<&Window>, Vec<&Window>) = if later >= 2 { windows.iter().partition(|w| w.first) } else { (Vec::new(), windows.iter().collect()) };
    let known: f64 = census.iter().map(|w| f(w)).sum();
    let known_refs: u64 = census.iter().map(|w| w.refs).sum();
    let left = total_refs.saturating_sub(known_refs) as f64;
    let w: Vec<(f64, f64)> = rest.iter().filter(|w| w.refs > 0).map(|w| (f(w), w.refs as f64)).collect();
    let n = w.len();
    if n == 0 {
        return Estimate { value: known, plus_minus: if left == 0.0 { 0.0 } else { f64::INFINITY } };
    }
    let (sy, sr) = w.iter().fold((0.0, 0.0), |(a, b), (y, r)| (a + y, b + r));
    let ratio = sy / sr;
    let mean_r = sr / n as f64;
    let var = if n > 1 { w.iter().map(|(y, r)| (y - ratio * r).powi(2)).sum::<f64>() / (n - 1) as f64 } else { f64::INFINITY };
    let half = t95(n - 1) * (var / n as f64).sqrt() / mean_r;
    Estimate { value: known + ratio * left, plus_minus: half * left }
}

/// Below this many later windows the report warns that the interval may
/// not hold.
const FEW_WINDOWS: usize = 10;

/// The estimates `--sample` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Sampled {
    pub sample: Sample,
    /// References measured in full detail, and all references.
    pub measured_refs: u64,
    pub total_refs: u64,
    /// References simulated as functional warming, those of them the tool
    /// left out, and its filter's sets (`warm_filter_sets`).
    pub warming_refs: u64,
    pub warming_skipped: u64,
    pub warming_filter_sets: usize,
    pub windows: usize,
    /// Windows after each process's first: those the rest is estimated
    /// from.
    pub later_windows: usize,
    pub sim_seconds: Estimate,
    pub cycles: Estimate,
    pub data_cycles: Estimate,
    pub translation_cycles: Estimate,
    pub kernel_cycles: Estimate,
    pub core_cycles: Estimate,
    pub branch_cycles: Estimate,
    pub fetch_cycles: Estimate,
    pub tlb_misses: Estimate,
    pub dram_accesses: Estimate,
}

/// What an online run did, beyond the system's own counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProgramRun {
    pub program: Vec<String>,
    /// The program's exit status, or None when a signal ended it.
    pub exit_status: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// References, memory accesses made on the system, instructions.
    pub refs: u64,
    pub accesses: u64,
    /// Instructions, blocks entered, branches predicted (conditional,
    /// indirect, returns) and mispredicted, as the core counted them.
    pub instructions: u64,
    pub blocks: u64,
    pub branches: u64,
    pub mispredicted: u64,
    /// Processes simulated (the program and every child and exec).
    pub processes: u64,
    pub forks: u64,
    pub execs: u64,
    pub maps: u64,
    pub unmaps: u64,
    /// 2 MB blocks mapped where a process touched memory no event mapped
    /// (the stack and image valgrind set up), and the cycles of those
    /// mmaps, left out of the simulated time.
    pub inferred_blocks: u64,
    pub inferred_cycles: f64,
    /// Bytes of the reference stream that crossed through the rings.
    pub stream_bytes: u64,
    /// Slots consumed.
    pub batches: u64,
    /// Threads the processes created (valgrind runs them one at a time
    /// in one stream, in an order the host decides).
    pub threads: u64,
    /// Reads and writes that found a pipe empty or full and would have
    /// blocked (EAGAIN). In lockstep (`drive`) each happens at the same
    /// point of the stream on every run; outside it (a process alone,
    /// polling what comes from outside the program) a program that polls
    /// runs as often as the host's timing makes it.
    pub would_block: u64,
    /// Of those, the ones outside lockstep.
    #[serde(skip)]
    pub would_block_unordered: u64,
    /// Waits that a timer ended (a sleep, or a poll or select that timed
    /// out) while other processes ran: where a timer ends among the
    /// others' steps is the host's timing.
    #[serde(skip_serializing_if = "is_zero")]
    pub timed_waits: u64,
    /// Go-aheads given in lockstep: the real processes ran one at a time,
    /// in the order of the model (`drive`); 0 when one process ran alone.
    #[serde(skip_serializing_if = "is_zero")]
    pub lockstep_grants: u64,
    /// Of those, the ones given while another process was blocked in the
    /// kernel (`State::lockstep_step`).
    pub blocked_waits: u64,
    /// Whether a rerun gives the same results; when not, why.
    pub deterministic: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nondeterministic_because: Option<String>,
    /// Simulated seconds: the longest CPU's cycles, inferred mappings
    /// left out.
    pub sim_seconds: f64,
    pub valgrind: String,
    /// With `--sample`: the estimates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled: Option<Sampled>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What runs the program and writes its stream into the rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Frontend {
    /// splab's valgrind tool (tools/vgtrace): every word the reader
    /// knows, block tables included.
    #[default]
    Valgrind,
    /// splab's DynamoRIO client (crates/drclient/client/ring.c): loads,
    /// stores, counts of instructions, forks, execs and ends; no block
    /// tables and no map events.
    DynamoRio,
}

impl Frontend {
    pub fn parse(s: &str) -> Result<Frontend, String> {
        match s {
            "valgrind" => Ok(Frontend::Valgrind),
            "dynamorio" => Ok(Frontend::DynamoRio),
            _ => Err(format!("--frontend {s:?}: expected valgrind or dynamorio")),
        }
    }
}

/// The workload: a program run online.
pub struct Online {
    pub program: Vec<OsString>,
    pub valgrind: PathBuf,
    pub frontend: Frontend,
    pub stdin: Io,
    pub stdout: Io,
    pub sample: Option<Sample>,
    /// The user and group ids the program runs as (none: splab's own);
    /// the run's directory and its FIFO are handed to them.
    pub user: Option<(u32, u32)>,
    bad_input: bool,
    pub result: Option<ProgramRun>,
}

impl Online {
    /// Checks that the program exists and the front end (valgrind and the
    /// tool, or DynamoRIO and the client) is there, so that a bad request
    /// is reported before the system is built.
    pub fn new(program: Vec<OsString>, valgrind: PathBuf, frontend: Frontend) -> Result<Online, String> {
        let Some(prog) = program.first() else {
            return Err("no program after `--` (usage: splab sim [OPTIONS] -- PROG ARGS...)".into());
        };
        if !find_program(Path::new(prog)) {
            return Err(format!("program {prog:?} not found"));
        }
        match frontend {
            Frontend::Valgrind => {
                valgrind_version(&valgrind)?;
                splabtrace_lib()?;
            }
            Frontend::DynamoRio => {
                splab_drclient::dynamorio()?;
            }
        }
        Ok(Online { program, valgrind, frontend, stdin: Io::Inherit, stdout: Io::Inherit, sample: None, user: None, bad_input: false, result: None })
    }
}

/// A ring mapped from its file.
struct Ring {
    base: *mut u64,
    bytes: usize,
    slots: u64,
    slot_words: usize,
    /// Real pid, as the tool wrote it.
    pid: u32,
    /// Slots consumed so far.
    next: u64,
    ended: bool,
}

impl Ring {
    fn open(path: &Path) -> Result<Ring, String> {
        use std::os::fd::AsRawFd;
        let f = OpenOptions::new().read(true).write(true).open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
        let bytes = f.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len() as usize;
        if bytes < RING_HEADER * 8 {
            return Err(format!("ring {}: {bytes} bytes, shorter than its header", path.display()));
        }
        // SAFETY: a shared mapping of the whole file, which stays valid
        // after the file is closed and unlinked; unmapped in Drop.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0) };
        let _ = std::fs::remove_file(path);
        if p == libc::MAP_FAILED {
            return Err(format!("mmap {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        let mut r = Ring { base: p as *mut u64, bytes, slots: 0, slot_words: 0, pid: 0, next: 0, ended: false };
        if r.word(0) != RING_MAGIC {
            return Err(format!("ring {}: no splabtrace ring magic", path.display()));
        }
        r.slots = r.word(R_SLOTS);
        r.slot_words = r.word(R_SLOT_WORDS) as usize;
        r.pid = r.word(R_PID) as u32;
        if r.slots == 0 || r.slots > (RING_HEADER - R_LENS) as u64 || RING_HEADER + r.slots as usize * r.slot_words > bytes / 8 {
            return Err(format!("ring {}: {} slots of {} words do not fit its {bytes} bytes", path.display(), r.slots, r.slot_words));
        }
        Ok(r)
    }

    fn atomic(&self, i: usize) -> &AtomicU64 {
        // SAFETY: `i` is inside the header page of the live mapping; u64
        // words are 8-aligned; the tool updates them atomically too.
        unsafe { &*(self.base.add(i) as *const AtomicU64) }
    }

    fn word(&self, i: usize) -> u64 {
        self.atomic(i).load(Ordering::Acquire)
    }

    fn published(&self) -> u64 {
        self.word(R_PUBLISHED)
    }

    /// The next published slot's words, if there is one.
    fn slot(&self) -> Option<&[u64]> {
        if self.published() <= self.next {
            return None;
        }
        let i = (self.next % self.slots) as usize;
        let len = (self.word(R_LENS + i) as usize).min(self.slot_words);
        // SAFETY: the slot lies inside the mapping (checked in `open`);
        // the tool does not write it again until `release` frees it.
        Some(unsafe { std::slice::from_raw_parts(self.base.add(RING_HEADER + i * self.slot_words), len) })
    }

    /// Hands the slot back to the tool.
    fn release(&mut self) {
        self.next += 1;
        self.atomic(R_CONSUMED).store(self.next, Ordering::Release);
        if self.atomic(R_TOOL_WAITS).load(Ordering::SeqCst) != 0 {
            // SAFETY: a futex wake on the low half of a shared word.
            unsafe { libc::syscall(libc::SYS_futex, self.base.add(R_CONSUMED), libc::FUTEX_WAKE, i32::MAX, 0, 0, 0) };
        }
    }

    /// Whether the tool waits at a gate it has not been granted (the ring
    /// header's comment in tools/vgtrace/vt_main.c). A process that forked
    /// waits at its gates even while it still holds `ALL_GATES`.
    fn at_gate(&self) -> bool {
        if self.word(R_AT_GATE) != 1 {
            return false;
        }
        let granted = self.word(R_GRANTED);
        granted == ALL_GATES || granted <= self.word(R_GATE)
    }

    /// Whether the process is in a system call it passed a gate for (it
    /// may block there on another).
    fn in_call(&self) -> bool {
        self.word(R_IN_CALL) == 1
    }

    /// Lets the tool past the gate it waits at (`all`: past every gate,
    /// for a process alone).
    fn grant(&self, all: bool) {
        let g = if all { ALL_GATES } else { self.word(R_GATE) + 1 };
        self.atomic(R_GRANTED).store(g, Ordering::SeqCst);
        // SAFETY: a futex wake on the low half of a shared word.
        unsafe { libc::syscall(libc::SYS_futex, self.base.add(R_GRANTED), libc::FUTEX_WAKE, i32::MAX, 0, 0, 0) };
    }

    /// Waits up to `timeout` for the tool to reach a gate (it wakes us
    /// there).
    fn wait_gate(&self, timeout: Duration) {
        if self.word(R_AT_GATE) != 0 {
            return;
        }
        let ts = libc::timespec { tv_sec: 0, tv_nsec: timeout.as_nanos().min(999_999_999) as i64 };
        // SAFETY: a futex wait on the low half of a shared word, with a
        // timeout.
        unsafe { libc::syscall(libc::SYS_futex, self.base.add(R_AT_GATE), libc::FUTEX_WAIT, 0u32, &ts as *const libc::timespec, 0, 0) };
    }

    /// Waits up to `timeout` for the tool to publish a slot.
    fn wait(&self, timeout: Duration) {
        let seen = self.published();
        if seen > self.next {
            return;
        }
        let ts = libc::timespec { tv_sec: 0, tv_nsec: timeout.as_nanos().min(999_999_999) as i64 };
        // SAFETY: a futex wait on the low half of a shared word, with a
        // timeout; the tool never wakes it (it does not know we wait), so
        // the timeout bounds the wait.
        unsafe { libc::syscall(libc::SYS_futex, self.base.add(R_PUBLISHED), libc::FUTEX_WAIT, seen as u32, &ts as *const libc::timespec, 0, 0) };
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, not used after this.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.bytes) };
    }
}

/// A simulated process and the stream that feeds it.
struct Proc {
    run: Run,
    /// The real process's pid.
    rpid: u32,
    ring: Option<Ring>,
    /// Rings of the programs it exec'd, in order: the next starts when
    /// this stream is drained.
    execs: VecDeque<Ring>,
    refs: u64,
    /// References of its stream so far, from its parent's at the fork:
    /// the scheduling clock (`drive`).
    clock: u64,
    /// The stream has ended (its end word, or an exec replaced it).
    done: bool,
    /// With `--sample`: the measured window this process is in, and
    /// whether one has been closed before.
    window: Option<Window>,
    measured: bool,
}

/// The state of one online run.
struct State<'a> {
    sys: &'a mut System,
    dir: PathBuf,
    ctl: File,
    ctl_buf: Vec<u8>,
    /// By real pid: the live simulated processes (a forked child's ring
    /// is None until the child announces it). Never iterated in its own
    /// order: real pids differ from run to run (`order`).
    procs: HashMap<u32, Proc>,
    /// Rings announced by forked children whose fork word has not been
    /// read yet.
    orphans: HashMap<u32, Ring>,
    /// Programs that such a child exec'd: their rings wait, in order,
    /// until the fork word makes the child a process.
    execs: HashMap<u32, VecDeque<Ring>>,
    /// Finished processes' stats.
    out: ProgramRun,
    next_cpu: usize,
    /// Per CPU, cycles of mappings inferred (left out of the time).
    inferred: Vec<f64>,
    sample: Option<Sample>,
    windows: Vec<Window>,
    warming_refs: u64,
    measured_refs: u64,
    /// References the tool left out of functional warming.
    skipped: u64,
    filter_sets: usize,
    /// References so far, over every process.
    total_refs: u64,
    /// The processes run in lockstep (a second one exists or existed).
    lockstep: bool,
    /// Valgrind has exited: whatever still runs is let go.
    released: bool,
    /// The process granted last in lockstep.
    runner: Option<u32>,
    /// Real pids whose stream ended and that have not yet exited.
    exiting: Vec<u32>,
    /// When one of them was last seen gone (`still`), and those seen so.
    exited: Option<Instant>,
    dead: HashSet<u32>,
    /// Looks in a row that found the tree asleep but not every process
    /// stopped at a point of its stream (`still`).
    unsure: u32,
}

fn fail(msg: impl Into<String>) -> Failure {
    Failure { msg: msg.into(), input: false }
}

impl<'a> State<'a> {
    fn new(sys: &'a mut System, dir: &Path, ctl: File, out: ProgramRun, sample: Option<Sample>) -> State<'a> {
        let ncpus = sys.ncpus();
        let filter_sets = warm_filter_sets(&sys.cfg.profile.cache.l1d, sys.page_size());
        State {
            sys,
            dir: dir.to_path_buf(),
            ctl,
            ctl_buf: Vec::new(),
            procs: HashMap::new(),
            orphans: HashMap::new(),
            execs: HashMap::new(),
            out,
            next_cpu: 0,
            inferred: vec![0.0; ncpus],
            sample,
            windows: Vec::new(),
            warming_refs: 0,
            measured_refs: 0,
            total_refs: 0,
            skipped: 0,
            filter_sets,
            lockstep: false,
            released: false,
            runner: None,
            exiting: Vec::new(),
            exited: None,
            dead: HashSet::new(),
            unsure: 0,
        }
    }

    fn new_cpu(&mut self) -> usize {
        let c = self.next_cpu % self.sys.ncpus();
        self.next_cpu += 1;
        c
    }

    fn spawn(&mut self, rpid: u32) -> Result<Proc, Failure> {
        let cpu = self.new_cpu();
        let pid = self.sys.spawn().map_err(|e| fail(format!("spawn: {e}")))?;
        self.sys.run_on(cpu, pid).map_err(|e| fail(format!("run: {e}")))?;
        self.out.processes += 1;
        Ok(Proc { run: Run::new(self.sys, pid, cpu), rpid, ring: None, execs: VecDeque::new(), refs: 0, clock: 0, done: false, window: None, measured: false })
    }

    /// Reads announcements from `ctl`; true if there was one.
    fn announcements(&mut self) -> Result<bool, Failure> {
        let mut any = false;
        let mut buf = [0u8; 4096];
        loop {
            match self.ctl.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.ctl_buf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(fail(format!("reading the announcements: {e}"))),
            }
        }
        while self.ctl_buf.len() >= 64 {
            let line: Vec<u8> = self.ctl_buf.drain(..64).collect();
            let text = String::from_utf8_lossy(&line);
            let f: Vec<&str> = text.split_whitespace().collect();
            let (Some(how), Some(pid), Some(n)) = (f.first(), f.get(1).and_then(|p| p.parse::<u32>().ok()), f.get(3)) else {
                return Err(fail(format!("a malformed announcement {:?}", text.trim())));
            };
            let ring = Ring::open(&self.dir.join(format!("r.{pid}.{n}"))).map_err(fail)?;
            any = true;
            // A process alone goes through every gate; a forked child
            // starts lockstep (`drive`).
            if self.released || (*how == "S" && !self.lockstep) {
                ring.grant(true);
            } else {
                self.lockstep = true;
            }
            match *how {
                "S" => self.started(pid, ring)?,
                "F" => match self.procs.get_mut(&pid).filter(|p| p.ring.is_none()) {
                    Some(p) => p.ring = Some(ring),
                    None => {
                        self.orphans.insert(pid, ring);
                    }
                },
                _ => return Err(fail(format!("a malformed announcement {:?}", text.trim()))),
            }
        }
        Ok(any)
    }

    /// A new program under `pid`: the first, or an exec. Nothing is
    /// simulated here (announcements come in the host's order): an exec
    /// waits in its process's `execs` until the scheduler drains the old
    /// stream (`advance`).
    fn started(&mut self, pid: u32, ring: Ring) -> Result<(), Failure> {
        if self.orphans.contains_key(&pid) || self.execs.contains_key(&pid) {
            // A forked child exec'd before its parent's fork word was
            // read: the child's own stream comes first.
            self.execs.entry(pid).or_default().push_back(ring);
            return Ok(());
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            // An exec: the old program's stream was published in full
            // before the exec call.
            p.execs.push_back(ring);
            return Ok(());
        }
        let mut p = self.spawn(pid)?;
        p.ring = Some(ring);
        self.procs.insert(pid, p);
        Ok(())
    }

    /// The live processes by clock, then simulated pid: the order in which
    /// they go (`drive`).
    fn order(&self) -> Vec<u32> {
        let mut v: Vec<(u64, Pid, u32)> = self.procs.values().map(|p| (p.clock, p.run.pid, p.rpid)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, _, r)| r).collect()
    }

    /// Whether process `rpid` can go: a slot is published, or its program
    /// exec'd another and its stream is drained.
    fn ready(&self, rpid: u32) -> bool {
        self.procs.get(&rpid).is_some_and(|p| p.ring.as_ref().is_some_and(|r| r.slot().is_some()) || !p.execs.is_empty())
    }

    /// One step of process `rpid`: its next slot, or the next program it
    /// exec'd once its stream is drained.
    fn advance(&mut self, rpid: u32) -> Result<(), Failure> {
        let Some(mut p) = self.procs.remove(&rpid) else { return Ok(()) };
        if !self.step(&mut p)? {
            if let Some(ring) = p.execs.pop_front() {
                self.finish(&mut p)?;
                self.out.execs += 1;
                let mut n = self.spawn(rpid)?;
                n.clock = p.clock;
                n.ring = Some(ring);
                n.execs = std::mem::take(&mut p.execs);
                self.procs.insert(rpid, n);
                return Ok(());
            }
        }
        if !p.done {
            self.procs.insert(rpid, p);
        }
        Ok(())
    }

    /// Every ring: the live processes', the programs they exec'd, and
    /// those of children whose fork is not read yet.
    fn rings(&self) -> impl Iterator<Item = &Ring> {
        self.procs.values().filter_map(|p| p.ring.as_ref()).chain(self.procs.values().flat_map(|p| p.execs.iter())).chain(self.orphans.values()).chain(self.execs.values().flatten())
    }

    /// One step of lockstep. The process granted last runs to its next
    /// gate, or blocks in the kernel. When the whole tree is still (every
    /// task asleep: at a gate or blocked; `still`), everything published
    /// is consumed, the streams that ended first (an exit comes before
    /// what it woke), then lowest clock first, and the process at a gate whose
    /// clock is lowest (the lower simulated pid on a tie) is let go to
    /// its next gate. The blocked ones' clocks follow its clock: a
    /// process that waited in the kernel resumes at the time of the one
    /// that woke it. Nothing here depends on how the host ran the
    /// processes, only on their streams: each decision is taken with
    /// every process stopped at a point of its own stream.
    fn lockstep_step(&mut self, root: u32) -> Result<(), Failure> {
        let runner = self.runner.and_then(|r| self.procs.get(&r)).and_then(|p| p.ring.as_ref());
        match runner {
            Some(r) if !r.at_gate() => r.wait_gate(Duration::from_millis(1)),
            _ => {}
        }
        if !self.still(root)? {
            std::thread::sleep(Duration::from_micros(100));
            return Ok(());
        }
        // An exit goes first: what it woke (a parent waiting for it, the
        // reader of a pipe it held) ran after it, whether or not the host
        // let that run before this look.
        let ended = |st: &State, t: u32| st.procs[&t].ring.as_ref().is_some_and(|r| r.word(R_ENDED) != 0);
        loop {
            let order = self.order();
            let Some(t) = order.iter().copied().find(|&t| self.ready(t) && ended(self, t)).or_else(|| order.into_iter().find(|&t| self.ready(t))) else { break };
            self.advance(t)?;
        }
        let order = self.order();
        let Some(&next) = order.iter().find(|r| self.procs[*r].ring.as_ref().is_some_and(|g| g.at_gate())) else {
            // Every process is blocked on something outside the program
            // (a timer, input): wait for it.
            std::thread::sleep(Duration::from_millis(1));
            return Ok(());
        };
        let base = self.procs[&next].clock;
        let mut blocked = false;
        for r in &order {
            let p = self.procs.get_mut(r).expect("listed");
            if *r != next && !p.ring.as_ref().is_some_and(|g| g.at_gate()) {
                p.clock = p.clock.max(base);
                blocked = true;
            }
        }
        if blocked {
            self.out.blocked_waits += 1;
        }
        self.procs[&next].ring.as_ref().expect("at a gate").grant(false);
        self.out.lockstep_grants += 1;
        self.runner = Some(next);
        Ok(())
    }

    /// Whether every task of the tree under `root` (valgrind's) sleeps,
    /// at a gate or in the kernel: two looks at the tree give the same
    /// tasks asleep with the same context switches (a task woken between
    /// its two looks ran or is runnable at the second), and no ring
    /// published, reached a gate, or was announced meanwhile. Every task
    /// was then asleep at the instant between the looks, and none can
    /// wake but by splab or from outside.
    fn still(&mut self, root: u32) -> Result<bool, Failure> {
        let rings = |st: &State| st.rings().fold((0u64, 0u64, 0usize), |(p, g, n), r| (p + r.published(), g + r.word(R_GATE) * 4 + r.at_gate() as u64 * 2 + r.in_call() as u64, n + 1));
        let exited = self.exited;
        let settled = exited.is_none_or(|t| t.elapsed() >= EXIT_SETTLE);
        let before = rings(self);
        let Some(a) = tree_asleep(root) else {
            self.unsure = 0;
            return Ok(false);
        };
        let Some(b) = tree_asleep(root) else {
            self.unsure = 0;
            return Ok(false);
        };
        let announced = self.announcements()?;
        if a != b || announced || before != rings(self) {
            self.unsure = 0;
            return Ok(false);
        }
        if self.stopped() {
            self.unsure = 0;
            // Linux shows an exiting task as a zombie before it notifies
            // its parent (kernel/exit.c, exit_notify sets exit_state
            // first): for a while after an exit the parent may sleep yet
            // be about to wake.
            return Ok(settled && self.exited == exited);
        }
        // Asleep, yet some process is neither at a gate nor in a system
        // call: one between two programs (an exec), exiting, or doing
        // what the tool cannot see. It will move; should it not within
        // UNSURE looks, it is taken as blocked so the others go on.
        self.unsure += 1;
        Ok(self.unsure >= UNSURE)
    }

    /// Whether every process stands at a point of its own stream: its
    /// latest program at a gate or in a system call it passed one for;
    /// one whose stream ended gone (or a zombie), so that what its exit
    /// does (closing pipes, waking its parent) is done or, for the
    /// parent's wake-up, under way (`EXIT_SETTLE`).
    fn stopped(&mut self) -> bool {
        fn latest(p: &Proc) -> Option<&Ring> {
            p.execs.back().or(p.ring.as_ref())
        }
        let mut ok = self.procs.values().all(|p| latest(p).is_some_and(|r| r.word(R_ENDED) != 0 || r.at_gate() || r.in_call()));
        ok &= self.orphans.iter().all(|(pid, r)| self.execs.get(pid).and_then(|e| e.back()).unwrap_or(r).at_gate());
        let ended: Vec<u32> = self.rings().filter(|r| r.word(R_ENDED) != 0).map(|r| r.pid).filter(|pid| !self.dead.contains(pid)).collect();
        self.exiting.extend(ended);
        self.exiting.sort_unstable();
        self.exiting.dedup();
        let now_gone: Vec<u32> = self.exiting.iter().copied().filter(|&pid| gone(pid)).collect();
        if !now_gone.is_empty() {
            self.exited = Some(Instant::now());
            self.exiting.retain(|pid| !now_gone.contains(pid));
            self.dead.extend(now_gone);
        }
        ok && self.exiting.is_empty()
    }

    /// Valgrind has exited: the tree can no longer be watched, so every
    /// process left (a child that outlived it) goes through every gate.
    fn release(&mut self) {
        self.released = true;
        for r in self.rings() {
            r.grant(true);
        }
    }

    /// The process is gone: its simulated process exits.
    fn finish(&mut self, p: &mut Proc) -> Result<(), Failure> {
        if p.done {
            return Ok(());
        }
        p.run.flush(self.sys)?;
        p.done = true;
        self.close_window(p);
        let s = &p.run.stats;
        self.out.accesses += s.accesses;
        self.out.maps += s.maps;
        self.out.unmaps += s.unmaps;
        self.out.inferred_blocks += s.inferred_blocks;
        self.out.inferred_cycles += s.inferred_cycles;
        self.inferred[p.run.cpu] += s.inferred_cycles;
        self.out.refs += p.refs;
        p.refs = 0;
        self.sys.exit(p.run.pid).map_err(|e| fail(format!("exit: {e}")))
    }

    /// References so far, over every process.
    fn refs_so_far(&self) -> u64 {
        self.total_refs
    }

    /// Consumes one slot of `p`'s ring; false when none is published.
    fn step(&mut self, p: &mut Proc) -> Result<bool, Failure> {
        if p.done {
            return Ok(false);
        }
        let Some(mut ring) = p.ring.take() else { return Ok(false) };
        let r = match ring.slot() {
            None => Ok(false),
            Some(words) => {
                let n = words.len();
                let r = self.slot(p, ring.pid, words);
                ring.release();
                self.out.batches += 1;
                self.out.stream_bytes += 8 * n as u64;
                r.map(|_| true)
            }
        };
        if ring.word(R_ENDED) != 0 && ring.published() <= ring.next {
            ring.ended = true;
        }
        p.ring = Some(ring);
        r
    }

    fn snapshot(&mut self) -> (CycleBreakdown, u64, u64, u64, u64) {
        let b = self.sys.breakdown();
        let hw = self.sys.hw();
        let tlb = self.sys.tlb_report().total_misses;
        let insns = self.sys.core_stats().instructions;
        (b, hw.dram_accesses, tlb, self.total_refs, insns)
    }

    /// One slot: its words, and with `--sample` what they cost when the
    /// slot is in detail (its mode word says which), added to the
    /// process's window; a slot of warming closes that window.
    fn slot(&mut self, p: &mut Proc, rpid: u32, w: &[u64]) -> Result<(), Failure> {
        if self.sample.is_none() {
            return self.words(p, rpid, w).and_then(|end| if end { self.finish(p) } else { Ok(()) });
        }
        let warming = w.len() >= 2 && w[0] as u8 == W_MODE && w[1] == 1;
        // Warming's filter leaves references out: their places in their
        // blocks are not the stream's.
        p.run.placing = !warming;
        let end = if warming {
            self.close_window(p);
            let before = self.total_refs;
            let end = self.words(p, rpid, w)?;
            self.warming_refs += self.total_refs - before;
            end
        } else {
            let (b0, d0, t0, r0, i0) = self.snapshot();
            let end = self.words(p, rpid, w)?;
            let (b, d, t, r, i) = self.snapshot();
            let first = !p.measured;
            let x = p.window.get_or_insert_with(|| Window { first, ..Default::default() });
            x.data += b.data - b0.data;
            x.translation += b.translation - b0.translation;
            x.kernel += b.kernel - b0.kernel;
            x.core += b.core - b0.core;
            x.branch += b.branch - b0.branch;
            x.fetch += b.fetch - b0.fetch;
            x.dram += d - d0;
            x.tlb_misses += t - t0;
            x.refs += r - r0;
            x.instructions += i - i0;
            end
        };
        if end {
            self.finish(p)?;
        }
        Ok(())
    }

    fn close_window(&mut self, p: &mut Proc) {
        if let Some(mut w) = p.window.take() {
            p.measured = true;
            w.cycles = w.data + w.translation + w.kernel + w.core + w.branch + w.fetch;
            self.measured_refs += w.refs;
            self.windows.push(w);
        }
    }

    /// The words of one slot of the stream of real process `rpid`; true
    /// when they end the stream (the accesses are made either way).
    fn words(&mut self, p: &mut Proc, rpid: u32, w: &[u64]) -> Result<bool, Failure> {
        let sys = &mut *self.sys;
        sys.run_on(p.run.cpu, p.run.pid).map_err(|e| fail(format!("run: {e}")))?;
        let need = |i: usize, k: usize| -> Result<(), Failure> {
            if i + k >= w.len() {
                Err(Failure { msg: format!("the stream of process {rpid} breaks off inside an event (word {i} of a batch of {})", w.len()), input: true })
            } else {
                Ok(())
            }
        };
        let mut i = 0;
        let mut refs = 0u64;
        let mut ended = false;
        while i < w.len() {
            let word = w[i];
            let tag = word as u8;
            if tag < 0x20 {
                let r = vgraw::decode(word);
                refs += 1;
                i += 1;
                p.run.add_ref(sys, r)?;
                continue;
            }
            match tag {
                W_NOP | W_ENTER | W_EXIT => {
                    let kind = match tag {
                        W_NOP => Kind::Skip,
                        W_ENTER => Kind::Enter,
                        _ => Kind::Exit,
                    };
                    p.run.mark(sys, Ref { addr: word >> 8, size: 0, kind })?;
                    i += 1;
                }
                W_BLOCK => {
                    let n = (word >> 8) as usize;
                    if n > vgraw::MAX_TABLE_WORDS {
                        return Err(Failure { msg: format!("process {rpid}: a block table of {n} words (at most {})", vgraw::MAX_TABLE_WORDS), input: true });
                    }
                    need(i, n)?;
                    p.run.define(sys, &w[i + 1..i + 1 + n])?;
                    i += 1 + n;
                }
                W_INSN => {
                    need(i, 1)?;
                    let n = w[i + 1];
                    p.run.instructions(n);
                    i += 2;
                }
                W_MAP => {
                    need(i, 3)?;
                    let (start, len, info) = (w[i + 1], w[i + 2], w[i + 3]);
                    let nlen = (info >> 16) as usize;
                    if len == 0 || start.checked_add(len).is_none() || nlen > MAX_NAME {
                        return Err(Failure { msg: format!("process {rpid}: a map of {len:#x} bytes at {start:#x} (name of {nlen} bytes)"), input: true });
                    }
                    let words = nlen.div_ceil(8);
                    if words > 0 {
                        need(i, 3 + words)?;
                    }
                    let name: Vec<u8> = w[i + 4..i + 4 + words].iter().flat_map(|x| x.to_le_bytes()).take(nlen).collect();
                    let region = Region {
                        start,
                        len,
                        prot: (info & 7) as u8,
                        origin: Origin::from_u8((info >> 8) as u8).unwrap_or(Origin::Unknown),
                        name: String::from_utf8_lossy(&name).into_owned(),
                    };
                    p.run.event(sys, Event::Map(region))?;
                    i += 4 + words;
                }
                W_UNMAP => {
                    need(i, 2)?;
                    let (start, len) = (w[i + 1], w[i + 2]);
                    if len == 0 || start.checked_add(len).is_none() {
                        return Err(Failure { msg: format!("process {rpid}: an unmap of {len:#x} bytes at {start:#x}"), input: true });
                    }
                    p.run.event(sys, Event::Unmap { start, len })?;
                    i += 3;
                }
                W_FORK => {
                    need(i, 1)?;
                    let child = w[i + 1] as u32;
                    p.run.flush(sys)?;
                    let cpid: Pid = sys.fork(p.run.pid).map_err(|e| fail(format!("fork: {e}")))?;
                    let cpu = self.next_cpu % sys.ncpus();
                    self.next_cpu += 1;
                    self.out.forks += 1;
                    self.out.processes += 1;
                    let cp = Proc {
                        run: p.run.forked(cpid, cpu),
                        rpid: child,
                        ring: self.orphans.remove(&child),
                        execs: self.execs.remove(&child).unwrap_or_default(),
                        refs: 0,
                        clock: p.clock + refs,
                        done: false,
                        window: None,
                        measured: false,
                    };
                    self.procs.insert(child, cp);
                    sys.run_on(p.run.cpu, p.run.pid).map_err(|e| fail(format!("run: {e}")))?;
                    i += 2;
                }
                W_THREAD => {
                    self.out.threads += 1;
                    i += 1;
                }
                W_AGAIN => {
                    self.out.would_block += 1;
                    if word & AGAIN_IN_LOCKSTEP == 0 {
                        self.out.would_block_unordered += 1;
                    }
                    i += 1;
                }
                W_TIMED => {
                    self.out.timed_waits += 1;
                    i += 1;
                }
                W_SKIP => {
                    need(i, 1)?;
                    refs += w[i + 1];
                    self.skipped += w[i + 1];
                    i += 2;
                }
                W_MODE => {
                    need(i, 1)?;
                    i += 2;
                }
                W_END => {
                    ended = true;
                    break;
                }
                _ => return Err(Failure { msg: format!("process {rpid}: expected a splabtrace word, found low byte {tag:#04x}"), input: true }),
            }
        }
        p.refs += refs;
        p.clock += refs;
        self.total_refs += refs;
        p.run.flush(self.sys)?;
        Ok(ended)
    }
}

/// How long after a process of the tree is seen gone the tree must stay
/// still before it is taken as still: the parent's wake-up is in flight
/// that long at most, even on a virtual CPU the host stopped meanwhile.
const EXIT_SETTLE: Duration = Duration::from_millis(20);

/// Looks (about 0.2 ms apart) after which a process asleep that is
/// neither at a gate nor in a system call is taken as blocked (`still`).
const UNSURE: u32 = 1000;

/// Whether process `pid` has exited (a zombie, or reaped).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()).is_none_or(|c| matches!(c, 'Z' | 'X' | 'x')),
        Err(_) => true,
    }
}

/// Every task of the process tree under `root`, as (tid, context
/// switches), when all are asleep (sleeping, stopped or exited); None
/// when one runs, waits to run or waits uninterruptibly. Two equal
/// answers around an instant mean every task slept throughout it: a task
/// that ran between two looks switched at least once.
fn tree_asleep(root: u32) -> Option<Vec<(u32, u64)>> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        // A process gone since its parent listed it has nothing to say.
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let dir = t.path();
            let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else { continue };
            // The state follows the command, which may hold spaces or
            // parentheses: it is the first field after the last ')'.
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())?;
            if !matches!(state, 'S' | 'Z' | 'T' | 't' | 'X' | 'x') {
                return None;
            }
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let switches: u64 = status
                .lines()
                .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
            out.push((tid, switches));
            if let Ok(children) = std::fs::read_to_string(dir.join("children")) {
                todo.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
    }
    out.sort_unstable();
    Some(out)
}

/// The run directories' names: this prefix, the reader's pid, a dash.
const DIR_PREFIX: &str = "splab-online-";

/// Removes what runs of splab that no longer exist left in `dir` under
/// `prefix` followed by their pid and a dash (a run killed by a signal
/// cannot remove its own; its rings are unlinked already, its directory
/// and FIFO are not).
pub fn sweep(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let p = e.path();
            let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        }
    }
}

impl Online {
    fn go(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, Failure> {
        if self.frontend == Frontend::DynamoRio && self.sample.is_some() {
            return Err(Failure { msg: "--sample: the DynamoRIO front end writes every reference in detail (no sampling yet); use --frontend valgrind".into(), input: true });
        }
        let (version, lib) = match self.frontend {
            Frontend::Valgrind => (
                valgrind_version(&self.valgrind).map_err(|e| Failure { msg: e, input: true })?,
                splabtrace_lib().map_err(|e| Failure { msg: e, input: true })?,
            ),
            Frontend::DynamoRio => ("DynamoRIO 11.90 (dynamorio-sys)".to_string(), PathBuf::new()),
        };
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        sweep(&base, DIR_PREFIX);
        let dir = base.join(format!("{DIR_PREFIX}{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
        let r = self.hand_over(&dir).and_then(|()| self.in_dir(sys, &dir, &lib, version, progress));
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    /// Gives `path` to the user the program runs as, if another.
    fn hand_over(&self, path: &Path) -> Result<(), Failure> {
        match self.user {
            Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|e| fail(format!("cannot give {} to uid {uid}: {e}", path.display()))),
            None => Ok(()),
        }
    }

    fn in_dir(&mut self, sys: &mut System, dir: &Path, lib: &Path, version: String, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, Failure> {
        let ctl_path = dir.join("ctl");
        mkfifo(&ctl_path).map_err(fail)?;
        self.hand_over(&ctl_path)?;
        // Read and write: the FIFO never reports an end while we hold it,
        // whichever tool instances come and go.
        let ctl = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&ctl_path)
            .map_err(|e| fail(format!("open {}: {e}", ctl_path.display())))?;
        let mut cmd = match self.frontend {
            Frontend::Valgrind => {
                let mut ring_arg = OsString::from("--ring=");
                ring_arg.push(dir);
                let mut cmd = Command::new(&self.valgrind);
                cmd.env("VALGRIND_LIB", lib)
                    .args(["--tool=splabtrace", "-q", "--trace-children=yes", "--ifetch=no"])
                    .arg(ring_arg)
                    .arg(format!("--reader={}", std::process::id()))
                    .args(self.sample.map(|s| {
                        let sets = warm_filter_sets(&sys.cfg.profile.cache.l1d, sys.page_size());
                        [format!("--detail={}", s.detail), format!("--period={}", s.period), format!("--filter-sets={sets}")]
                    }).into_iter().flatten())
                    .arg("--")
                    .args(&self.program);
                cmd
            }
            Frontend::DynamoRio => self.dynamorio_command(dir)?,
        };
        cmd.stdin(self.stdin.stdio(false).map_err(|e| Failure { msg: e, input: true })?)
            .stdout(self.stdout.stdio(true).map_err(|e| Failure { msg: e, input: true })?);
        if let Some((uid, gid)) = self.user {
            // Dropping from root, std also clears the supplementary groups.
            cmd.uid(uid).gid(gid);
        }
        let mut child = cmd.spawn().map_err(|e| fail(format!("cannot start {}: {e}", cmd.get_program().to_string_lossy())))?;
        let drain = child.stdout.take().map(|mut o| std::thread::spawn(move || std::io::copy(&mut o, &mut std::io::sink())));
        let out = ProgramRun { program: self.program.iter().map(|a| a.to_string_lossy().into_owned()).collect(), valgrind: version, ..Default::default() };
        let mut st = State::new(sys, dir, ctl, out, self.sample);
        let r = drive(&mut st, &mut child, progress);
        let status = match r {
            Ok(s) => s,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        if let Some(d) = drain {
            let _ = d.join();
        }
        self.report(st, status)
    }

    /// The program under DynamoRIO: `libdynamorio.so` is executed in its
    /// place, with the program's own arguments (its name as argv[0]) and
    /// its path in `DYNAMORIO_EXE_PATH`, and loads it (DynamoRIO's early
    /// injection, what its `drrun` does); the options, the client among
    /// them, come from `DYNAMORIO_OPTIONS`, which DynamoRIO passes on to
    /// every process it follows into (forks and execs).
    fn dynamorio_command(&self, dir: &Path) -> Result<Command, Failure> {
        use std::os::unix::process::CommandExt;
        let dr = splab_drclient::dynamorio().map_err(|e| Failure { msg: e, input: true })?;
        let prog = &self.program[0];
        let exe = which(Path::new(prog)).ok_or_else(|| Failure { msg: format!("program {prog:?} not found"), input: true })?;
        let client = dr.ring_client();
        for p in [dir, client.as_path()] {
            if p.to_string_lossy().contains(['\'', ';', ' ']) {
                return Err(fail(format!("{}: a path DynamoRIO's options cannot carry (a quote, semicolon or space)", p.display())));
            }
        }
        let options = format!("-code_api -client_lib '{};0;--ring={} --reader={}'", client.display(), dir.display(), std::process::id());
        let mut cmd = Command::new(&dr.library);
        cmd.arg0(prog).args(&self.program[1..]).env("DYNAMORIO_OPTIONS", options).env("DYNAMORIO_EXE_PATH", exe);
        Ok(cmd)
    }

    fn report(&mut self, st: State, status: ExitStatus) -> Result<WorkloadResult, Failure> {
        use std::os::unix::process::ExitStatusExt;
        let ncpus = st.sys.ncpus();
        let mut longest: f64 = 0.0;
        for c in 0..ncpus {
            longest = longest.max(st.sys.cycles(c) - st.inferred[c]);
        }
        let mut out = st.out.clone();
        let core = st.sys.core_stats();
        out.instructions = core.instructions;
        out.blocks = core.blocks;
        out.mispredicted = core.predictor.mispredicted();
        out.branches = core.predictor.conditional + core.predictor.indirect + core.predictor.returns;
        out.exit_status = status.code();
        out.signal = status.signal();
        out.sim_seconds = st.sys.cycles_to_seconds(longest);
        out.deterministic = out.threads == 0 && out.would_block_unordered == 0 && out.timed_waits == 0;
        let mut why = Vec::new();
        if out.threads > 0 {
            why.push(format!(
                "the program created {} thread{}: valgrind runs a process's threads one at a time in one stream, switching where the host's scheduling and the threads' waits fall, so a rerun interleaves them differently",
                out.threads,
                if out.threads == 1 { "" } else { "s" }
            ));
        }
        if out.would_block_unordered > 0 {
            let n = out.would_block_unordered;
            why.push(format!(
                "{n} read{} or write{} found a pipe empty or full and would have blocked (EAGAIN) while the process ran alone: what it polls is fed from outside the program, so it runs as many times as the host's timing makes it find nothing, and its own instructions differ from run to run",
                if n == 1 { "" } else { "s" },
                if n == 1 { "" } else { "s" }
            ));
        }
        if out.timed_waits > 0 {
            let n = out.timed_waits;
            why.push(format!(
                "{n} wait{} ended on a timer (a sleep, or a poll or select that timed out) while other processes ran: where a timer ends among their steps is the host's timing",
                if n == 1 { "" } else { "s" }
            ));
        }
        if !why.is_empty() {
            out.nondeterministic_because = Some(why.join("; "));
        }
        if let Some(s) = st.sample {
            let n = out.refs;
            let freq = st.sys.cfg.profile.freq_ghz * 1e9;
            let w = &st.windows;
            let cycles = estimate(w, n, |w| w.cycles);
            out.sampled = Some(Sampled {
                sample: s,
                measured_refs: st.measured_refs,
                total_refs: n,
                warming_refs: st.warming_refs,
                warming_skipped: st.skipped,
                warming_filter_sets: st.filter_sets,
                windows: w.len(),
                later_windows: w.iter().filter(|w| !w.first).count(),
                sim_seconds: Estimate { value: cycles.value / freq, plus_minus: cycles.plus_minus / freq },
                cycles,
                data_cycles: estimate(w, n, |w| w.data),
                translation_cycles: estimate(w, n, |w| w.translation),
                kernel_cycles: estimate(w, n, |w| w.kernel),
                core_cycles: estimate(w, n, |w| w.core),
                branch_cycles: estimate(w, n, |w| w.branch),
                fetch_cycles: estimate(w, n, |w| w.fetch),
                tlb_misses: estimate(w, n, |w| w.tlb_misses as f64),
                dram_accesses: estimate(w, n, |w| w.dram as f64),
            });
        }
        let mut report = String::new();
        let o = &out;
        let _ = writeln!(report, "Program run online: {}", o.program.join(" "));
        let status_text = match (o.exit_status, o.signal) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "unknown".into(),
        };
        let _ = writeln!(report, "  {:<20}{status_text}", "program");
        let _ = writeln!(report, "  {:<20}{} ({} forks, {} execs)", "processes", o.processes, o.forks, o.execs);
        let _ = writeln!(report, "  {:<20}{} ({} memory accesses; a modify is a load and a store)", "references", o.refs, o.accesses);
        let _ = writeln!(report, "  {:<20}{} in {} blocks; {} branches, {} mispredicted", "instructions", o.instructions, o.blocks, o.branches, o.mispredicted);
        let _ = writeln!(report, "  {:<20}{} map and {} unmap events; {} 2 MB blocks mapped where memory was touched outside them (not timed)", "layout", o.maps, o.unmaps, o.inferred_blocks);
        let _ = writeln!(report, "  {:<20}{:.1} MB in {} batches through shared-memory rings", "stream", o.stream_bytes as f64 / 1e6, o.batches);
        if let Some(why) = &o.nondeterministic_because {
            let _ = writeln!(report, "  {:<20}not deterministic: {why}", "note");
        }
        let (fig, timed) = match &o.sampled {
            Some(s) => {
                let _ = writeln!(
                    report,
                    "  {:<20}{}:{} references: {} measured in {} windows ({:.1} %), {} functional warming ({} of them left out by a {}-set line filter)",
                    "sampled",
                    s.sample.detail,
                    s.sample.period,
                    s.measured_refs,
                    s.windows,
                    100.0 * s.measured_refs as f64 / s.total_refs.max(1) as f64,
                    s.warming_refs,
                    s.warming_skipped,
                    s.warming_filter_sets
                );
                if s.later_windows < FEW_WINDOWS && s.measured_refs < s.total_refs {
                    let _ = writeln!(
                        report,
                        "  {:<20}only {} windows after the processes' first: the intervals take them as a random sample of the rest, which so few may miss (a phase between them); a shorter PERIOD (e.g. 1M:10M) gives more",
                        "note",
                        s.later_windows
                    );
                }
                let _ = writeln!(report, "  {:<20}{} s (95 % interval; CPU time summed over CPUs)", "simulated time", s.sim_seconds);
                let _ = writeln!(report, "  {:<20}{}", "  data cycles", s.data_cycles);
                let _ = writeln!(report, "  {:<20}{}", "  translation", s.translation_cycles);
                let _ = writeln!(report, "  {:<20}{}", "  kernel", s.kernel_cycles);
                let _ = writeln!(report, "  {:<20}{}", "  dispatch", s.core_cycles);
                let _ = writeln!(report, "  {:<20}{}", "  branches", s.branch_cycles);
                let _ = writeln!(report, "  {:<20}{}", "  fetch", s.fetch_cycles);
                let _ = writeln!(report, "  {:<20}{}", "  TLB misses", s.tlb_misses);
                let _ = writeln!(report, "  {:<20}{}", "  DRAM accesses", s.dram_accesses);
                (s.sim_seconds.value, s.sim_seconds.value)
            }
            None => {
                let _ = writeln!(report, "  {:<20}{:.6} s (the longest CPU's cycles)", "simulated time", o.sim_seconds);
                (o.sim_seconds, o.sim_seconds)
            }
        };
        self.result = Some(out);
        Ok(WorkloadResult {
            figure: Figure { name: "simulated seconds".into(), value: fig, unit: "s".into(), higher_is_better: false },
            report,
            timed_seconds: timed,
            details: Vec::new(),
        })
    }
}

/// Consumes every stream until the program has exited and its streams
/// are drained; returns valgrind's exit status. The next slot is always
/// that of the process whose clock is lowest (the module comment says
/// why and what it assumes). A process alone runs freely: splab waits
/// for its slots. Once there are several, they run in lockstep
/// (`State::lockstep_step`). When valgrind has exited, whatever is
/// still running is let go and every stream drained.
fn drive(st: &mut State, child: &mut Child, progress: &mut dyn FnMut(u64)) -> Result<ExitStatus, Failure> {
    let root = child.id();
    let mut status: Option<ExitStatus> = None;
    let mut quiet_passes = 0;
    let mut last_progress = Instant::now();
    loop {
        st.announcements()?;
        if last_progress.elapsed() > Duration::from_millis(100) {
            progress(st.refs_so_far());
            last_progress = Instant::now();
        }
        if st.lockstep && status.is_none() {
            st.lockstep_step(root)?;
            status = child.try_wait().map_err(|e| fail(format!("waiting for valgrind: {e}")))?;
            if status.is_some() {
                st.release();
            }
            continue;
        }
        let order = st.order();
        if let Some(&t) = order.first().filter(|&&t| st.ready(t)) {
            st.advance(t)?;
            quiet_passes = 0;
            continue;
        }
        if status.is_none() {
            status = child.try_wait().map_err(|e| fail(format!("waiting for valgrind: {e}")))?;
            if status.is_some() {
                st.release();
            }
        }
        if let Some(s) = status {
            // Valgrind has exited, so every stream is published in full:
            // the lowest clock with a slot goes. Everything published has
            // been read once two passes find nothing more.
            if let Some(&r) = order.iter().find(|&&r| st.ready(r)) {
                st.advance(r)?;
                quiet_passes = 0;
                continue;
            }
            quiet_passes += 1;
            if quiet_passes < 2 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            return ended(st, s);
        }
        match order.first().and_then(|t| st.procs[t].ring.as_ref()) {
            Some(r) => r.wait(Duration::from_millis(2)),
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// After valgrind exited: every stream must have ended; one that did not
/// broke off (valgrind or the tool was killed, or a child outlived it).
fn ended(st: &mut State, status: ExitStatus) -> Result<ExitStatus, Failure> {
    let mut broken: Vec<String> = Vec::new();
    let mut pids: Vec<u32> = st.procs.keys().copied().collect();
    pids.sort_unstable();
    for pid in pids {
        let mut p = st.procs.remove(&pid).expect("listed");
        if !p.done {
            let batches = p.ring.as_ref().map_or(0, |r| r.next);
            broken.push(format!("process {pid} after {} references in {batches} batches", p.refs));
            st.finish(&mut p)?;
        }
    }
    let mut waiting: Vec<u32> = st.execs.keys().chain(st.orphans.keys()).copied().collect();
    waiting.sort_unstable();
    waiting.dedup();
    for pid in waiting {
        broken.push(format!("process {pid}, forked by a process whose fork was never read"));
    }
    if st.out.processes == 0 {
        return Err(fail(format!("valgrind exited ({status}) before the program started")));
    }
    if !broken.is_empty() {
        return Err(fail(format!("the reference stream broke off ({status}): {}", broken.join("; "))));
    }
    Ok(status)
}

impl Workload for Online {
    fn name(&self) -> String {
        let prog = self.program.first().map(|p| Path::new(p).file_name().unwrap_or(p).to_string_lossy().into_owned()).unwrap_or_default();
        format!("program({prog})")
    }

    fn estimated_refs(&self) -> u64 {
        0
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        self.bad_input = false;
        self.result = None;
        self.go(sys, progress).map_err(|f| {
            self.bad_input = f.input;
            f.msg
        })
    }

    fn failed_on_input(&self) -> bool {
        self.bad_input
    }

    fn program_details(&self) -> Option<serde_json::Value> {
        self.result.as_ref().and_then(|r| serde_json::to_value(r).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warming_filter_has_the_first_level_sets_a_page_can_cover() {
        use splab_hw::cache::CacheConfig;
        let c = |size_kb, ways| CacheConfig { size_kb, ways, latency: 4 };
        // 48 KB, 12 ways: 64 sets of 64-byte lines, a 4 KB page's 64 lines.
        assert_eq!(warm_filter_sets(&c(48, 12), 4096), 64);
        // 64 KB, 2 ways: 512 sets; an 8 KB page has 128 lines.
        assert_eq!(warm_filter_sets(&c(64, 2), 8192), 128);
        // 32 KB, 8 ways, 64 KB pages: the cache's 64 sets.
        assert_eq!(warm_filter_sets(&c(32, 8), 65536), 64);
        // 24 KB, 4 ways: 96 sets, rounded down.
        assert_eq!(warm_filter_sets(&c(24, 4), 4096), 64);
    }

    #[test]
    fn sample_parses_counts_and_refuses_bad_ones() {
        assert_eq!(Sample::parse("10M:100M").unwrap(), Sample { detail: 10_000_000, period: 100_000_000 });
        assert_eq!(Sample::parse("500k:2m").unwrap(), Sample { detail: 500_000, period: 2_000_000 });
        assert_eq!(Sample::parse("1000:5000").unwrap(), Sample { detail: 1000, period: 5000 });
        for bad in ["10M", "x:100M", "10M:10M", "0:10", "100M:10M", ":"] {
            let e = Sample::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    fn win(refs: u64, cycles: f64) -> Window {
        Window { refs, cycles, ..Default::default() }
    }

    #[test]
    fn the_ratio_estimate_scales_the_windows_and_narrows_with_more_of_them() {
        // Every window at 2 cycles a reference: the estimate is exact.
        let same: Vec<Window> = (0..10).map(|i| win(1000 + i, 2.0 * (1000 + i) as f64)).collect();
        let e = estimate(&same, 1_000_000, |w| w.cycles);
        assert!((e.value - 2e6).abs() < 1e-6 && e.plus_minus < 1e-6, "{e:?}");
        // Rates 1 and 3 alternating: mean 2, and an interval that holds it
        // and shrinks as windows are added.
        let alt = |n: usize| -> Vec<Window> { (0..n).map(|i| win(1000, if i % 2 == 0 { 1000.0 } else { 3000.0 })).collect() };
        let few = estimate(&alt(4), 1_000_000, |w| w.cycles);
        let many = estimate(&alt(40), 1_000_000, |w| w.cycles);
        assert!((few.value - 2e6).abs() < 1e-3 && (many.value - 2e6).abs() < 1e-3);
        assert!(many.plus_minus < few.plus_minus && many.plus_minus > 0.0, "{few:?} {many:?}");
        // One window says nothing about the spread.
        assert!(estimate(&alt(1), 1_000_000, |w| w.cycles).plus_minus.is_infinite());
        assert!(estimate(&[], 10, |w| w.cycles).plus_minus.is_infinite());
    }

    #[test]
    fn a_process_start_counts_once_and_the_later_windows_stand_for_the_rest() {
        // A start of 1000 references at 10 cycles each, then windows at 2:
        // the start is not spread over the references it does not cover.
        let mut w = vec![Window { first: true, ..win(1000, 10_000.0) }];
        w.extend((0..5).map(|_| win(1000, 2000.0)));
        let e = estimate(&w, 100_000, |w| w.cycles);
        assert!((e.value - (10_000.0 + 2.0 * 99_000.0)).abs() < 1e-6 && e.plus_minus < 1e-6, "{e:?}");
        // All of a short process measured: exact.
        let short = [Window { first: true, ..win(500, 900.0) }];
        let e = estimate(&short, 500, |w| w.cycles);
        assert!(e.value == 900.0 && e.plus_minus == 0.0, "{e:?}");
        // With one later window only, all windows are taken alike.
        let two = [Window { first: true, ..win(1000, 1000.0) }, win(1000, 3000.0)];
        let e = estimate(&two, 10_000, |w| w.cycles);
        assert!((e.value - 20_000.0).abs() < 1e-6 && e.plus_minus > 0.0, "{e:?}");
    }

    #[test]
    fn a_batch_that_breaks_off_inside_an_event_says_where() {
        use splab_hw::profile::Profile;
        let mut c = splab_sim::Config::new(Profile::load("sapphire-rapids").unwrap());
        c.memory = 64 << 20;
        let mut sys = System::new(c).unwrap();
        let ctl = File::open("/dev/null").unwrap();
        let mut st = State::new(&mut sys, Path::new("/nonexistent"), ctl, ProgramRun::default(), None);
        let Ok(mut p) = st.spawn(77) else { panic!("spawn") };
        // Two references, then a map event that lost its last two words.
        // A reference word: the address above the low byte, an 8-byte size
        // (code 3) and the kind in the low bits (vgraw.rs).
        let load = |a: u64| a << 8 | 3 << 2 | 1;
        let batch = [load(0x1000), load(0x1008), W_MAP as u64, 0x40_0000];
        let Err(e) = st.words(&mut p, 77, &batch) else { panic!("the batch was taken") };
        assert!(e.input && e.msg.contains("process 77") && e.msg.contains("word 2 of a batch of 4"), "{}", e.msg);
        // An instruction count without its count word.
        let Err(e) = st.words(&mut p, 77, &[W_INSN as u64]) else { panic!("the batch was taken") };
        assert!(e.msg.contains("word 0 of a batch of 1"), "{}", e.msg);
    }

    /// A ring file as the tool leaves it: `slots` published, and ended.
    fn ring_file(path: &Path, pid: u32, slots: &[&[u64]]) -> Ring {
        const W: usize = 16;
        let mut words = vec![0u64; RING_HEADER + slots.len() * W];
        words[0] = RING_MAGIC;
        words[R_SLOTS] = slots.len() as u64;
        words[R_SLOT_WORDS] = W as u64;
        words[R_PID] = pid as u64;
        words[R_PUBLISHED] = slots.len() as u64;
        words[R_ENDED] = 1;
        for (i, s) in slots.iter().enumerate() {
            words[R_LENS + i] = s.len() as u64;
            words[RING_HEADER + i * W..RING_HEADER + i * W + s.len()].copy_from_slice(s);
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(path, bytes).unwrap();
        Ring::open(path).unwrap()
    }

    #[test]
    fn a_child_that_execs_before_its_fork_is_read_runs_after_it() {
        use splab_hw::profile::Profile;
        let dir = std::env::temp_dir().join(format!("splab-exec-order-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = splab_sim::Config::new(Profile::load("sapphire-rapids").unwrap());
        c.memory = 64 << 20;
        let mut sys = System::new(c).unwrap();
        let ctl = File::open("/dev/null").unwrap();
        let mut st = State::new(&mut sys, &dir, ctl, ProgramRun::default(), None);
        let map = |a: u64| [W_MAP as u64, a, 0x10000, 3 | 1 << 8];
        let load = |a: u64| a << 8 | 3 << 2 | 1;
        // The parent maps, loads and forks 101; the child loads (its
        // stream stops at the exec); the program it execs maps, loads
        // twice and ends. All three rings are announced before the
        // parent's slot is read.
        let m = map(0x40_0000);
        let parent: Vec<u64> = m.iter().copied().chain([load(0x40_0000), W_FORK as u64, 101, W_END as u64]).collect();
        let child = [load(0x40_0008)];
        let m2 = map(0x50_0000);
        let exec: Vec<u64> = m2.iter().copied().chain([load(0x50_0000), load(0x50_0040), W_END as u64]).collect();
        let r = ring_file(&dir.join("p"), 100, &[&parent]);
        assert!(st.started(100, r).is_ok());
        st.orphans.insert(101, ring_file(&dir.join("c"), 101, &[&child]));
        assert!(st.started(101, ring_file(&dir.join("e"), 101, &[&exec])).is_ok());
        assert!(st.execs.contains_key(&101), "the exec waits for the fork");
        for _ in 0..4 {
            while let Some(&t) = st.order().first().filter(|&&t| st.ready(t)) {
                assert!(st.advance(t).is_ok());
            }
        }
        assert!(st.procs.is_empty() && st.execs.is_empty() && st.orphans.is_empty());
        assert_eq!((st.out.processes, st.out.forks, st.out.execs, st.out.refs), (3, 1, 1, 4));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sweeping_removes_only_what_dead_runs_left() {
        let dir = std::env::temp_dir().join(format!("splab-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // pid_max is at most 2^22: this pid never runs.
        let dead = dir.join("splab-online-4294967-1");
        let mine = dir.join(format!("splab-online-{}-1", std::process::id()));
        let other = dir.join("splab-other-4294967-1");
        for d in [&dead, &mine, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(dir.join("splab-online-4294968-2"), b"").unwrap();
        sweep(&dir, DIR_PREFIX);
        assert!(!dead.exists() && !dir.join("splab-online-4294968-2").exists());
        assert!(mine.exists() && other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn student_t_falls_to_the_normal_quantile() {
        assert!((t95(1) - 12.706).abs() < 1e-9);
        assert!(t95(10) > t95(30) && t95(30) > t95(1000) && (t95(100_000) - 1.96).abs() < 1e-3);
    }
}
