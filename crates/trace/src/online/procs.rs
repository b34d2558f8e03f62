//! One simulated process per real one: the first is spawned, a fork word
//! in the parent's stream forks the parent's simulated process (copy on
//! write, as the real fork), and an exec (a new ring announced under a pid
//! already running) ends the old simulated process and spawns a new one
//! (a child that execs before its parent's fork word is read waits for
//! it: its own stream comes first).
//! Processes are placed on the modelled CPUs in turn (`stream` says
//! what their words become).
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

use super::ring::{Ring, R_ENDED, R_GATE};
use super::sample::{warm_filter, Sample, WarmFilter, Window};
use super::ProgramRun;
use crate::replay::{Failure, Run};
use splab_sim::System;
use splab_vm::Pid;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A simulated process and the stream that feeds it.
pub(super) struct Proc {
    pub(super) run: Run,
    /// The real process's pid.
    pub(super) rpid: u32,
    pub(super) ring: Option<Ring>,
    /// Rings of the programs it exec'd, in order: the next starts when
    /// this stream is drained.
    pub(super) execs: VecDeque<Ring>,
    pub(super) refs: u64,
    /// References of its stream so far, from its parent's at the fork:
    /// the scheduling clock (`drive`).
    pub(super) clock: u64,
    /// The stream has ended (its end word, or an exec replaced it).
    pub(super) done: bool,
    /// With `--sample`: the measured window this process is in, and
    /// whether one has been closed before.
    pub(super) window: Option<Window>,
    pub(super) measured: bool,
}

/// The state of one online run.
pub(super) struct State<'a> {
    pub(super) sys: &'a mut System,
    pub(super) dir: PathBuf,
    pub(super) ctl: File,
    pub(super) ctl_buf: Vec<u8>,
    /// By real pid: the live simulated processes (a forked child's ring
    /// is None until the child announces it). Never iterated in its own
    /// order: real pids differ from run to run (`order`).
    pub(super) procs: HashMap<u32, Proc>,
    /// Rings announced by forked children whose fork word has not been
    /// read yet.
    pub(super) orphans: HashMap<u32, Ring>,
    /// Programs that such a child exec'd: their rings wait, in order,
    /// until the fork word makes the child a process.
    pub(super) execs: HashMap<u32, VecDeque<Ring>>,
    /// Finished processes' stats.
    pub(super) out: ProgramRun,
    pub(super) next_cpu: usize,
    /// Per CPU, cycles of mappings inferred (left out of the time).
    pub(super) inferred: Vec<f64>,
    pub(super) sample: Option<Sample>,
    pub(super) windows: Vec<Window>,
    pub(super) warming_refs: u64,
    pub(super) measured_refs: u64,
    /// References the tool left out of functional warming.
    pub(super) skipped: u64,
    pub(super) filter: WarmFilter,
    /// The warm-ups are simulated as functional warming
    /// (`System::set_functional`): under DynamoRIO, where the program
    /// runs natively between windows.
    pub(super) functional_warming: bool,
    /// References so far, over every process.
    pub(super) total_refs: u64,
    /// The processes run in lockstep (a second one exists or existed).
    pub(super) lockstep: bool,
    /// Valgrind has exited: whatever still runs is let go.
    pub(super) released: bool,
    /// The process granted last in lockstep.
    pub(super) runner: Option<u32>,
    /// Real pids whose stream ended and that have not yet exited.
    pub(super) exiting: Vec<u32>,
    /// When one of them was last seen gone (`still`), and those seen so.
    pub(super) exited: Option<Instant>,
    pub(super) dead: HashSet<u32>,
    /// Looks in a row that found the tree asleep but not every process
    /// stopped at a point of its stream (`still`).
    pub(super) unsure: u32,
}

pub(super) fn fail(msg: impl Into<String>) -> Failure {
    Failure { msg: msg.into(), input: false }
}

impl<'a> State<'a> {
    pub(super) fn new(sys: &'a mut System, dir: &Path, ctl: File, out: ProgramRun, sample: Option<Sample>) -> State<'a> {
        let ncpus = sys.ncpus();
        let filter = warm_filter(&sys.cfg.profile.cache, sys.page_size());
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
            filter,
            functional_warming: false,
            lockstep: false,
            released: false,
            runner: None,
            exiting: Vec::new(),
            exited: None,
            dead: HashSet::new(),
            unsure: 0,
        }
    }

    pub(super) fn new_cpu(&mut self) -> usize {
        let c = self.next_cpu % self.sys.ncpus();
        self.next_cpu += 1;
        c
    }

    pub(super) fn spawn(&mut self, rpid: u32) -> Result<Proc, Failure> {
        let cpu = self.new_cpu();
        let pid = self.sys.spawn().map_err(|e| fail(format!("spawn: {e}")))?;
        self.sys.run_on(cpu, pid).map_err(|e| fail(format!("run: {e}")))?;
        self.out.processes += 1;
        Ok(Proc { run: Run::new(self.sys, pid, cpu), rpid, ring: None, execs: VecDeque::new(), refs: 0, clock: 0, done: false, window: None, measured: false })
    }

    /// Reads announcements from `ctl`; true if there was one.
    pub(super) fn announcements(&mut self) -> Result<bool, Failure> {
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
    pub(super) fn started(&mut self, pid: u32, ring: Ring) -> Result<(), Failure> {
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
    pub(super) fn order(&self) -> Vec<u32> {
        let mut v: Vec<(u64, Pid, u32)> = self.procs.values().map(|p| (p.clock, p.run.pid, p.rpid)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, _, r)| r).collect()
    }

    /// Whether process `rpid` can go: a slot is published, or its program
    /// exec'd another and its stream is drained.
    pub(super) fn ready(&self, rpid: u32) -> bool {
        self.procs.get(&rpid).is_some_and(|p| p.ring.as_ref().is_some_and(|r| r.slot().is_some()) || !p.execs.is_empty())
    }

    /// One step of process `rpid`: its next slot, or the next program it
    /// exec'd once its stream is drained.
    pub(super) fn advance(&mut self, rpid: u32) -> Result<(), Failure> {
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
    pub(super) fn rings(&self) -> impl Iterator<Item = &Ring> {
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
    pub(super) fn lockstep_step(&mut self, root: u32) -> Result<(), Failure> {
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
    pub(super) fn still(&mut self, root: u32) -> Result<bool, Failure> {
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
    pub(super) fn stopped(&mut self) -> bool {
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
    pub(super) fn release(&mut self) {
        self.released = true;
        for r in self.rings() {
            r.grant(true);
        }
    }

    /// The process is gone: its simulated process exits.
    pub(super) fn finish(&mut self, p: &mut Proc) -> Result<(), Failure> {
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
    pub(super) fn refs_so_far(&self) -> u64 {
        self.total_refs
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

/// Consumes every stream until the program has exited and its streams
/// are drained; returns valgrind's exit status. The next slot is always
/// that of the process whose clock is lowest (the module comment says
/// why and what it assumes). A process alone runs freely: splab waits
/// for its slots. Once there are several, they run in lockstep
/// (`State::lockstep_step`). When valgrind has exited, whatever is
/// still running is let go and every stream drained.
pub(super) fn drive(st: &mut State, child: &mut Child, progress: &mut dyn FnMut(u64)) -> Result<ExitStatus, Failure> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::online::ring::tests::ring_file;
    use crate::online::ring::{W_END, W_FORK, W_MAP};

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
}
