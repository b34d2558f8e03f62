//! Processes described as scripts, for the workloads made of many
//! processes (a build, stress's workers): a list of actions (map, unmap,
//! exec, sweeps and random accesses over a mapping, starting threads) that
//! a scheduler task runs a quantum at a time, and a parent that forks a
//! stream of such children with a limit on how many run at once (make's
//! `-j`), with barriers between groups of them.
//!
//! Regions are numbered slots: `Map` fills a slot with the address and
//! length it got, later actions name the slot.

use crate::common::{exit, fault, map, unmap, Batch, Rng, LINE, PAGE};
use crate::sched::{Spawn, Step, Task};
use splab_sim::{Op, System};
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;

/// A mapped region: address and length.
#[derive(Clone, Copy, Debug, Default)]
pub struct Region {
    pub va: u64,
    pub len: u64,
}

/// Starts threads (or anything else) once the regions they need exist.
pub type Call = Box<dyn FnOnce(&[Region], &mut Vec<Spawn>) -> Result<(), String>>;

pub enum Act {
    /// mmap; the region goes to `slot`.
    Map { slot: usize, req: MmapReq, what: &'static str },
    Unmap { slot: usize },
    /// execve's effect on memory: the whole address space goes.
    Exec,
    /// An access every `stride` bytes over [off, off + len) of a region;
    /// `len` None means to the region's end.
    Seq { slot: usize, off: u64, len: Option<u64>, stride: u64, store: bool },
    /// A load every `stride` bytes over a whole region, each of which must
    /// read `expect` when memory contents are kept (what the sweeps of
    /// `Seq` with `store` leave: the value 1); a different value is an
    /// error naming the address.
    Check { slot: usize, stride: u64, expect: u64 },
    /// `count` accesses to random words of the first `within` bytes of a
    /// region (None: all of it); `stores` of every 256 are stores.
    Random { slot: usize, count: u64, stores: u8, within: Option<u64> },
    /// `count` loads of random lines of the listed pages of a region (the
    /// hot part of a program's text).
    Hot { slot: usize, pages: Rc<Vec<u32>>, count: u64 },
    /// Instructions of the program's own work beside the references the
    /// other actions make (`System::instructions`).
    Work { instructions: u64 },
    Call(Call),
}

impl Act {
    /// A sweep over the whole of a region.
    pub fn sweep(slot: usize, stride: u64, store: bool) -> Act {
        Act::Seq { slot, off: 0, len: None, stride, store }
    }

    /// References the action makes, if known before it runs.
    pub fn refs(&self, region_len: impl Fn(usize) -> u64) -> u64 {
        match self {
            Act::Seq { slot, off, len, stride, .. } => len.unwrap_or_else(|| region_len(*slot).saturating_sub(*off)).div_ceil(*stride),
            Act::Check { slot, stride, .. } => region_len(*slot).div_ceil(*stride),
            Act::Random { count, .. } | Act::Hot { count, .. } => *count,
            _ => 0,
        }
    }
}

/// A script in progress.
pub struct Script {
    acts: VecDeque<Act>,
    pub slots: Vec<Region>,
    /// Accesses done of the action at the head.
    pos: u64,
    rng: Rng,
}

impl Script {
    pub fn new(acts: Vec<Act>, slots: Vec<Region>, seed: u64) -> Script {
        Script { acts: acts.into(), slots, pos: 0, rng: Rng::new(seed) }
    }

    pub fn is_done(&self) -> bool {
        self.acts.is_empty()
    }

    /// Appends actions.
    pub fn extend(&mut self, acts: impl IntoIterator<Item = Act>) {
        self.acts.extend(acts);
    }

    fn slot(&self, s: usize) -> Result<Region, String> {
        self.slots.get(s).copied().filter(|r| r.len > 0).ok_or_else(|| format!("script: region {s} is not mapped"))
    }

    /// Runs actions for about `budget` references; returns the references
    /// made. Stops early at the end of the script.
    pub fn run(&mut self, sys: &mut System, cpu: usize, pid: Pid, budget: u64, spawned: &mut Vec<Spawn>) -> Result<u64, String> {
        let mut b = Batch::new(cpu);
        let mut refs = 0;
        while refs < budget {
            let Some(act) = self.acts.front() else { break };
            let room = budget - refs;
            // (accesses made, action finished)
            let (n, fin) = match act {
                Act::Map { slot, req, what } => {
                    let va = map(sys, pid, *req, what)?;
                    let s = *slot;
                    if self.slots.len() <= s {
                        self.slots.resize(s + 1, Region::default());
                    }
                    self.slots[s] = Region { va, len: req.len };
                    (0, true)
                }
                Act::Unmap { slot } => {
                    let r = self.slot(*slot)?;
                    unmap(sys, pid, r.va, r.len, "a script region")?;
                    self.slots[*slot] = Region::default();
                    (0, true)
                }
                Act::Exec => {
                    let max = sys.max_user_address(pid).ok_or_else(|| format!("exec: no process {pid}"))?;
                    unmap(sys, pid, 0, max, "the address space (exec)")?;
                    self.slots.clear();
                    (0, true)
                }
                Act::Seq { slot, off, len, stride, store } => {
                    let r = self.slot(*slot)?;
                    let end = len.map_or(r.len, |l| off + l).min(r.len);
                    let total = end.saturating_sub(*off).div_ceil(*stride);
                    let n = (total - self.pos).min(room);
                    let op = if *store { Op::Store(1) } else { Op::Load };
                    for k in self.pos..self.pos + n {
                        b.push(sys, r.va + off + k * stride, op).map_err(fault("script sweep"))?;
                    }
                    (n, self.pos + n == total)
                }
                Act::Check { slot, stride, expect } => {
                    let r = self.slot(*slot)?;
                    let total = r.len.div_ceil(*stride);
                    let n = (total - self.pos).min(room);
                    // One at a time: the value read is needed.
                    b.flush(sys).map_err(fault("script access"))?;
                    let check = sys.tracks_contents();
                    for k in self.pos..self.pos + n {
                        let va = r.va + k * stride;
                        let v = sys.load(cpu, va).map_err(fault("script check"))?;
                        if check && v != *expect {
                            return Err(format!("process {pid}: {va:#x} reads {v:#x}, not the {expect:#x} written there"));
                        }
                    }
                    (n, self.pos + n == total)
                }
                Act::Random { slot, count, stores, within } => {
                    let r = self.slot(*slot)?;
                    let n = (count - self.pos).min(room);
                    let words = (within.unwrap_or(r.len).min(r.len) / 8).max(1);
                    for _ in 0..n {
                        let va = r.va + self.rng.below(words) * 8;
                        let op = if (self.rng.next_u64() & 0xff) < *stores as u64 { Op::Store(1) } else { Op::Load };
                        b.push(sys, va, op).map_err(fault("script random access"))?;
                    }
                    (n, self.pos + n == *count)
                }
                Act::Hot { slot, pages, count } => {
                    let r = self.slot(*slot)?;
                    let n = (count - self.pos).min(room);
                    for _ in 0..n {
                        let p = pages[self.rng.below(pages.len() as u64) as usize] as u64;
                        let va = r.va + p * PAGE + self.rng.below(PAGE / LINE) * LINE;
                        b.load(sys, va).map_err(fault("script text access"))?;
                    }
                    (n, self.pos + n == *count)
                }
                Act::Work { instructions } => {
                    sys.instructions(cpu, *instructions);
                    (0, true)
                }
                Act::Call(_) => {
                    let Some(Act::Call(f)) = self.acts.pop_front() else { unreachable!("the head is a call") };
                    f(&self.slots, spawned)?;
                    self.pos = 0;
                    continue;
                }
            };
            refs += n;
            if fin {
                // Accesses go out before the next syscall can change the
                // mappings they use.
                b.flush(sys).map_err(fault("script access"))?;
                self.acts.pop_front();
                self.pos = 0;
            } else {
                self.pos += n;
            }
        }
        b.flush(sys).map_err(fault("script access"))?;
        Ok(refs)
    }
}

/// What happens when a script ends.
pub enum End {
    /// The process exits.
    Exit,
    /// One thread of the process ends; the last of them (the count goes to
    /// zero) exits the process.
    Thread(Rc<Cell<usize>>),
}

/// A process (or thread) running a script.
pub struct ScriptTask {
    pub pid: Pid,
    pub script: Script,
    pub end: End,
    /// Decremented when the process exits (a parent's count of running
    /// children).
    pub running: Option<Rc<Cell<usize>>>,
}

impl Task for ScriptTask {
    fn pid(&self) -> Pid {
        self.pid
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, spawned: &mut Vec<Spawn>) -> Result<Step, String> {
        let refs = self.script.run(sys, cpu, self.pid, budget, spawned)?;
        if !self.script.is_done() {
            return Ok(Step { refs, done: false });
        }
        let last = match &self.end {
            End::Exit => true,
            End::Thread(live) => {
                live.set(live.get() - 1);
                live.get() == 0
            }
        };
        if last {
            exit(sys, self.pid)?;
            if let Some(r) = &self.running {
                r.set(r.get() - 1);
            }
        }
        Ok(Step { refs, done: true })
    }
}

/// A child the parent forks: given the child's pid, the tasks that run it.
pub type Child = Box<dyn FnOnce(Pid, Rc<Cell<usize>>) -> Vec<Spawn>>;

/// What the parent does next.
pub enum Job {
    Fork(Child),
    /// Wait until every child forked so far has exited.
    Wait,
}

/// A parent process (make, stress): runs its own script first, then forks
/// its children in order, at most `max` running at once, running
/// `after_fork` (its own bookkeeping) after each fork, and waits at each
/// `Job::Wait` and at the end before it exits.
pub struct Parent {
    pub pid: Pid,
    pub script: Script,
    pub jobs: VecDeque<Job>,
    pub max: usize,
    pub running: Rc<Cell<usize>>,
    pub after_fork: fn() -> Vec<Act>,
    /// Children forked so far.
    pub forked: u64,
}

impl Parent {
    pub fn new(pid: Pid, script: Script, jobs: Vec<Job>, max: usize, after_fork: fn() -> Vec<Act>) -> Parent {
        Parent { pid, script, jobs: jobs.into(), max, running: Rc::new(Cell::new(0)), after_fork, forked: 0 }
    }
}

impl Task for Parent {
    fn pid(&self) -> Pid {
        self.pid
    }
    fn ready(&self) -> bool {
        if !self.script.is_done() {
            return true;
        }
        let r = self.running.get();
        match self.jobs.front() {
            Some(Job::Fork(_)) => r < self.max,
            Some(Job::Wait) | None => r == 0,
        }
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, spawned: &mut Vec<Spawn>) -> Result<Step, String> {
        let mut refs = self.script.run(sys, cpu, self.pid, budget, spawned)?;
        while self.script.is_done() && refs < budget {
            match self.jobs.front() {
                Some(Job::Fork(_)) if self.running.get() < self.max => {
                    let Some(Job::Fork(child)) = self.jobs.pop_front() else { unreachable!("the head is a fork") };
                    let pid = sys.fork(self.pid).map_err(|e| format!("fork: {e}"))?;
                    self.running.set(self.running.get() + 1);
                    self.forked += 1;
                    spawned.extend(child(pid, self.running.clone()));
                    self.script.extend((self.after_fork)());
                    refs += self.script.run(sys, cpu, self.pid, budget - refs, spawned)?;
                }
                Some(Job::Wait) if self.running.get() == 0 => {
                    self.jobs.pop_front();
                }
                None if self.running.get() == 0 => {
                    exit(sys, self.pid)?;
                    return Ok(Step { refs, done: true });
                }
                _ => break,
            }
        }
        Ok(Step { refs, done: false })
    }
}
