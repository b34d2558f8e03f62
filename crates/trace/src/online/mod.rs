//! A real program run online (`splab sim -- PROG ARGS`): the program runs
//! under splab's valgrind tool (tools/vgtrace, `--ring`), or under
//! DynamoRIO with splab's client (crates/drclient, `--frontend
//! dynamorio`: the same rings and words, fewer kinds of them), and its
//! references go straight into the simulated system as it runs; no trace
//! file is written.
//!
//! By mechanism:
//! - `ring`: the crossing, one ring of slots in shared memory for each
//!   real process, and the words the front ends write into it;
//! - `procs`: one simulated process per real one, the order in which
//!   their slots go, and the lockstep that makes that order the streams'
//!   own;
//! - `stream`: a slot's words made loads, stores, blocks, instructions and
//!   map, unmap and fork events of the simulated system;
//! - `sample`: `--sample`, its windows and their estimates;
//! - this module: the workload, which starts the front end, drives the
//!   run and reports it.

mod procs;
mod ring;
mod sample;
mod stream;

pub use sample::{default_warm, estimate, warm_filter, Estimate, Sample, Sampled, WarmFilter, Window};

use crate::record::{dynamorio_command, find_program, mkfifo, splabtrace_lib, valgrind_version, DYNAMORIO_VERSION};
use crate::replay::Failure;
use procs::{drive, fail, State};
use serde::Serialize;
use splab_sim::System;
use splab_workloads::{Figure, Workload, WorkloadResult};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

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
    /// The same branches and mispredictions by kind.
    pub predictor: splab_hw::bpred::PredictorStats,
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
    /// Signals from outside the receiving process (another process's
    /// kill, a child's SIGCHLD, a timer) delivered where the host's timing
    /// puts them in the receiver's stream: under DynamoRIO all of them,
    /// under valgrind those not delivered as a gated system call returns.
    /// (Faults, SIGPIPE and a process's signals to itself come from its
    /// own instructions and are not counted.)
    #[serde(skip_serializing_if = "is_zero")]
    pub outside_signals: u64,
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
    /// stores, block tables with their entries and exits, forks, execs
    /// and ends; no map events.
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

    /// The value of `--frontend` that selects it.
    pub fn flag(self) -> &'static str {
        match self {
            Frontend::Valgrind => "valgrind",
            Frontend::DynamoRio => "dynamorio",
        }
    }

    /// What runs the program, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Frontend::Valgrind => "valgrind",
            Frontend::DynamoRio => "DynamoRIO",
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
        if let Some(s) = &mut self.sample {
            match self.frontend {
                Frontend::Valgrind if s.warm.is_some() => {
                    return Err(Failure { msg: format!("--sample {}:{}:{}: a warm-up (WARM) is the DynamoRIO front end's; under valgrind every reference between windows warms (use DETAIL:PERIOD)", s.detail, s.period, s.warm.unwrap_or(0)), input: true });
                }
                Frontend::Valgrind => {}
                Frontend::DynamoRio => s.warm = Some(s.warm.unwrap_or_else(|| default_warm(&sys.cfg.profile.cache, s)).min(s.period - s.detail)),
            }
        }
        let (version, lib) = match self.frontend {
            Frontend::Valgrind => (
                valgrind_version(&self.valgrind).map_err(|e| Failure { msg: e, input: true })?,
                splabtrace_lib().map_err(|e| Failure { msg: e, input: true })?,
            ),
            Frontend::DynamoRio => (DYNAMORIO_VERSION.to_string(), PathBuf::new()),
        };
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        sweep(&base, DIR_PREFIX);
        // Of one length whatever the pid and time: under DynamoRIO the
        // directory is in the program's environment
        // (`record::dynamorio_command`).
        let dir = base.join(format!("{DIR_PREFIX}{:010}-{nanos:020}", std::process::id()));
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
                    .arg(crate::record::vgdb_prefix(dir))
                    .arg(ring_arg)
                    .arg(format!("--reader={}", std::process::id()))
                    .args(self.sample.map(|s| {
                        let [sets, line] = warm_filter(&sys.cfg.profile.cache, sys.page_size()).args();
                        [format!("--detail={}", s.detail), format!("--period={}", s.period), sets, line]
                    }).into_iter().flatten())
                    .arg("--")
                    .args(&self.program);
                crate::record::shell_underscore(&mut cmd, &self.program);
                cmd
            }
            Frontend::DynamoRio => self.dynamorio_command(dir, warm_filter(&sys.cfg.profile.cache, sys.page_size()))?,
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
        st.functional_warming = self.frontend == Frontend::DynamoRio;
        let r = drive(&mut st, &mut child, progress);
        st.sys.set_functional(false);
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

    /// The program under DynamoRIO (`record::dynamorio_command`), its
    /// client writing into the rings announced in `dir` and, sampling,
    /// leaving out of warming what `filter` finds (`warm_filter`); the
    /// directory's name and the reader's pid have fixed lengths (`go`).
    fn dynamorio_command(&self, dir: &Path, filter: WarmFilter) -> Result<Command, Failure> {
        let mut args = vec![format!("--ring={}", dir.display()), format!("--reader={:010}", std::process::id())];
        if let Some(s) = self.sample {
            args.extend([format!("--detail={}", s.detail), format!("--period={}", s.period), format!("--warm={}", s.warm.unwrap_or(0))]);
            args.extend(filter.args());
        }
        dynamorio_command(&self.program, &args, true).map_err(|e| Failure { msg: e, input: true })
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
        out.predictor = core.predictor;
        out.branches = core.predictor.conditional + core.predictor.indirect + core.predictor.returns;
        out.exit_status = status.code();
        out.signal = status.signal();
        out.sim_seconds = st.sys.cycles_to_seconds(longest);
        out.deterministic = out.threads == 0 && out.would_block_unordered == 0 && out.timed_waits == 0 && out.outside_signals == 0;
        let mut why = Vec::new();
        if out.threads > 0 {
            why.push(format!(
                "the program created {} thread{}: {}, so a rerun interleaves them differently",
                out.threads,
                if out.threads == 1 { "" } else { "s" },
                match self.frontend {
                    Frontend::Valgrind => "valgrind runs a process's threads one at a time in one stream, switching where the host's scheduling and the threads' waits fall",
                    Frontend::DynamoRio => "under DynamoRIO a process's threads run at once and share one stream, each thread's buffer copied in whole when it fills, in the order the host's scheduling gives",
                }
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
        if out.outside_signals > 0 {
            let n = out.outside_signals;
            why.push(format!(
                "{n} signal{} from outside the process that received {} (another process, a child's exit, a timer): {}, so where {} among its steps is the host's timing",
                if n == 1 { "" } else { "s" },
                if n == 1 { "it" } else { "them" },
                match self.frontend {
                    Frontend::Valgrind => "valgrind lets in one that arrives while the program runs at its next poll (each timeslice of blocks, some system calls)",
                    Frontend::DynamoRio => "DynamoRIO delivers one at the receiver's next block boundary, wherever the receiver is when it arrives",
                },
                if n == 1 { "it lands" } else { "they land" }
            ));
        }
        if !why.is_empty() {
            out.nondeterministic_because = Some(why.join("; "));
        }
        if let Some(s) = st.sample {
            let native_between = self.frontend == Frontend::DynamoRio;
            let mut sampled = Sampled::new(s, &st.windows, out.refs, st.sys.cfg.profile.freq_ghz, (st.measured_refs, st.warming_refs, st.skipped), st.filter, native_between);
            if native_between {
                sampled.default_warm = Some(default_warm(&st.sys.cfg.profile.cache, &s));
            }
            out.sampled = Some(sampled);
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
        let p = &o.predictor;
        let _ = writeln!(
            report,
            "  {:<20}conditional {} of {}, indirect {} of {}, returns {} of {} mispredicted",
            "  by kind", p.conditional_missed, p.conditional, p.indirect_missed, p.indirect, p.returns_missed, p.returns
        );
        let _ = writeln!(report, "  {:<20}{} map and {} unmap events; {} 2 MB blocks mapped where memory was touched outside them (not timed)", "layout", o.maps, o.unmaps, o.inferred_blocks);
        let _ = writeln!(report, "  {:<20}{:.1} MB in {} batches through shared-memory rings", "stream", o.stream_bytes as f64 / 1e6, o.batches);
        if let Some(why) = &o.nondeterministic_because {
            let _ = writeln!(report, "  {:<20}not deterministic: {why}", "note");
        }
        let (fig, timed) = match &o.sampled {
            Some(s) => {
                s.write(&mut report);
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

impl Workload for Online {
    fn name(&self) -> String {
        let prog = self.program.first().map(|p| Path::new(p).file_name().unwrap_or(p).to_string_lossy().into_owned()).unwrap_or_default();
        format!("program({prog})")
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
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
}
