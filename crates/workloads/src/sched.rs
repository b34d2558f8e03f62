//! A deterministic scheduler for workloads of several processes (or
//! threads) on several CPUs.
//!
//! The modelled CPUs have no common clock: each counts its own cycles. The
//! scheduler interleaves them the way a trace of a real multiprocessor
//! interleaves: in rounds, each CPU in turn runs its current task for one
//! *quantum* of memory references. So the CPUs share the last-level cache
//! and see each other's page-table changes (TLB shootdowns, stale PCIDs)
//! a few thousand references apart, as on real hardware. Each CPU has a run
//! queue; a task keeps its CPU for a *slice* of references (the time
//! slice), then goes to the back of the queue and the next ready task is
//! switched in with `System::run_on` (pmap_activate: a context switch,
//! charged by the system). A task that is waiting (`ready()` false) is
//! passed over without a switch.
//!
//! A phase ends when every task has finished. Its length is that of the
//! busiest CPU: the CPUs run in parallel, so the phase takes as long as the
//! CPU that had the most work (`Phase::seconds`).
//!
//! Everything is decided by counts of references, never by host time, so a
//! run is the same on every host.

use splab_sim::System;
use splab_vm::kernel::Pid;
use std::collections::VecDeque;

/// What a task did in one turn.
pub struct Step {
    /// Memory references made.
    pub refs: u64,
    /// The task has finished (it has exited its process, if it was the
    /// last thread of it).
    pub done: bool,
}

/// A task started by another one (a forked child, a new thread), with the
/// CPU it must run on, if any (otherwise the least loaded).
pub struct Spawn {
    pub cpu: Option<usize>,
    pub task: Box<dyn Task>,
}

/// One thread of execution of a process. Several tasks with the same pid
/// are threads of one process sharing its address space.
pub trait Task {
    fn pid(&self) -> Pid;
    /// False while the task waits for others (a `make` with every job slot
    /// taken); it is then not switched in.
    fn ready(&self) -> bool {
        true
    }
    /// Runs on `cpu` (already running this task's process) for about
    /// `budget` references; may stop early at a syscall, and may start
    /// other tasks by pushing them on `spawned`.
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, spawned: &mut Vec<Spawn>) -> Result<Step, String>;
}

/// How finely the CPUs are interleaved and how long a task keeps its CPU.
#[derive(Clone, Copy, Debug)]
pub struct Quanta {
    /// References each CPU makes per round.
    pub quantum: u64,
    /// References a task runs before the next task on its CPU's queue gets
    /// a turn (a multiple of `quantum` is sensible).
    pub slice: u64,
}

impl Default for Quanta {
    fn default() -> Quanta {
        // 4096 references is a few microseconds to tens of microseconds of
        // simulated time; 256 quanta (~1M references) is of the order of a
        // millisecond or more, the order of a real time slice.
        Quanta { quantum: 4096, slice: 4096 * 256 }
    }
}

struct Running {
    task: Box<dyn Task>,
    /// References made since it last got its CPU.
    used: u64,
}

pub struct Sched {
    queues: Vec<VecDeque<Running>>,
    q: Quanta,
    /// Where the last task without a fixed CPU went (ties go round-robin).
    last_placed: usize,
}

/// The outcome of a phase.
#[derive(Clone, Debug)]
pub struct Phase {
    /// Cycles each CPU spent during the phase.
    pub busy_cycles: Vec<f64>,
    pub refs: u64,
    /// Tasks that ran to completion.
    pub finished: u64,
    /// Times a CPU switched from one task to another.
    pub switches: u64,
}

impl Phase {
    /// Simulated length of the phase: the busiest CPU's cycles.
    pub fn seconds(&self, sys: &System) -> f64 {
        sys.cycles_to_seconds(self.busy_cycles.iter().copied().fold(0.0, f64::max))
    }
}

impl Sched {
    pub fn new(ncpus: usize, q: Quanta) -> Result<Sched, String> {
        if ncpus == 0 {
            return Err("the machine has no CPUs".into());
        }
        if q.quantum == 0 || q.slice < q.quantum {
            return Err(format!("scheduler quantum {} and slice {} must be positive, slice >= quantum", q.quantum, q.slice));
        }
        Ok(Sched { queues: (0..ncpus).map(|_| VecDeque::new()).collect(), q, last_placed: ncpus - 1 })
    }

    pub fn ncpus(&self) -> usize {
        self.queues.len()
    }

    /// Queues a task on `cpu`, or on the CPU with the fewest tasks (ties
    /// broken round-robin from the last placement).
    pub fn add(&mut self, cpu: Option<usize>, task: Box<dyn Task>) -> Result<(), String> {
        let n = self.queues.len();
        let c = match cpu {
            Some(c) if c < n => c,
            Some(c) => return Err(format!("task placed on CPU {c}, but the machine has {n}")),
            None => {
                let order = (1..=n).map(|k| (self.last_placed + k) % n);
                let c = order.min_by_key(|&c| self.queues[c].len()).expect("at least one CPU");
                self.last_placed = c;
                c
            }
        };
        self.queues[c].push_back(Running { task, used: 0 });
        Ok(())
    }

    /// Runs every queued task (and those they start) to completion.
    /// `progress` gets `base_refs` plus the references made so far.
    pub fn run(&mut self, sys: &mut System, base_refs: u64, progress: &mut dyn FnMut(u64)) -> Result<Phase, String> {
        let n = self.queues.len();
        if sys.ncpus() < n {
            return Err(format!("scheduler for {n} CPUs on a machine with {}", sys.ncpus()));
        }
        let start: Vec<f64> = (0..n).map(|c| sys.cycles(c)).collect();
        let mut ph = Phase { busy_cycles: vec![0.0; n], refs: 0, finished: 0, switches: 0 };
        let mut spawned = Vec::new();
        let mut idle_rounds = 0;
        while self.queues.iter().any(|q| !q.is_empty()) {
            let mut moved = false;
            for cpu in 0..n {
                let q = &mut self.queues[cpu];
                // The task at the head keeps the CPU until its slice is used
                // or it waits; then the next ready one is switched in.
                let Some(pos) = q.iter().position(|r| r.task.ready()) else { continue };
                if pos != 0 {
                    let r = q.remove(pos).expect("position is in the queue");
                    q.push_front(r);
                }
                let mut r = q.pop_front().expect("a ready task");
                let pid = r.task.pid();
                if sys.running(cpu) != Some(pid) {
                    if sys.running(cpu).is_some() {
                        ph.switches += 1;
                    }
                    sys.run_on(cpu, pid).map_err(|e| format!("switching CPU {cpu} to process {pid}: {e}"))?;
                }
                let budget = self.q.quantum.min(self.q.slice - r.used).max(1);
                let step = r.task.step(sys, cpu, budget, &mut spawned)?;
                ph.refs += step.refs;
                r.used += step.refs;
                moved |= step.refs > 0 || step.done || !spawned.is_empty();
                // New tasks are placed while this one is off its queue, so
                // that its own CPU counts as free if nothing else waits there
                // (a parent that forks and then waits leaves its CPU idle).
                for s in spawned.drain(..) {
                    self.add(s.cpu, s.task)?;
                }
                let q = &mut self.queues[cpu];
                if step.done {
                    ph.finished += 1;
                } else if r.used >= self.q.slice {
                    r.used = 0;
                    q.push_back(r);
                } else {
                    q.push_front(r);
                }
            }
            if moved {
                idle_rounds = 0;
            } else {
                idle_rounds += 1;
                if idle_rounds > 16 {
                    let waiting: usize = self.queues.iter().map(|q| q.len()).sum();
                    return Err(format!("scheduler: {waiting} tasks left and none can make progress"));
                }
            }
            progress(base_refs + ph.refs);
        }
        for (c, b) in ph.busy_cycles.iter_mut().enumerate() {
            *b = sys.cycles(c) - start[c];
        }
        Ok(ph)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::{map, spawn_on, Batch, PAGE};
    use splab_vm::map::MmapReq;
    use splab_vm::prot;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Touches `pages` pages of its own buffer, `budget` at a time, and
    /// logs (cpu, pid) for each turn.
    struct Toucher {
        pid: Pid,
        va: u64,
        next: u64,
        pages: u64,
        log: Rc<RefCell<Vec<(usize, Pid)>>>,
    }

    impl Task for Toucher {
        fn pid(&self) -> Pid {
            self.pid
        }
        fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, _: &mut Vec<Spawn>) -> Result<Step, String> {
            self.log.borrow_mut().push((cpu, self.pid));
            let mut b = Batch::new(cpu);
            let end = (self.next + budget).min(self.pages);
            for p in self.next..end {
                b.store(sys, self.va + p * PAGE, 1).map_err(|e| e.to_string())?;
            }
            b.flush(sys).map_err(|e| e.to_string())?;
            let refs = end - self.next;
            self.next = end;
            Ok(Step { refs, done: self.next == self.pages })
        }
    }

    fn system() -> System {
        let mut c = splab_sim::Config::new(splab_hw::profile::Profile::load("sapphire-rapids").unwrap());
        c.memory = 256 << 20;
        System::new(c).unwrap()
    }

    #[test]
    fn round_robin_is_deterministic_and_switches_on_slices() {
        let run = || {
            let mut sys = system();
            let log = Rc::new(RefCell::new(Vec::new()));
            let mut s = Sched::new(2, Quanta { quantum: 10, slice: 20 }).unwrap();
            for _ in 0..3 {
                let pid = spawn_on(&mut sys, 0).unwrap();
                let va = map(&mut sys, pid, MmapReq::anon(40 * PAGE, prot::RW), "test").unwrap();
                s.add(None, Box::new(Toucher { pid, va, next: 0, pages: 40, log: log.clone() })).unwrap();
            }
            let ph = s.run(&mut sys, 0, &mut |_| {}).unwrap();
            let l = log.borrow().clone();
            (ph, l)
        };
        let (ph, log) = run();
        assert_eq!(ph.refs, 120);
        assert_eq!(ph.finished, 3);
        // Tasks went to CPUs 0, 1, 0; the two on CPU 0 alternate every
        // slice (two quanta), the CPUs alternate every quantum.
        let cpu0: Vec<Pid> = log.iter().filter(|(c, _)| *c == 0).map(|(_, p)| *p).collect();
        assert_eq!(&cpu0[..6], &[0, 0, 2, 2, 0, 0]);
        assert!(ph.switches >= 3, "{ph:?}");
        assert!(ph.busy_cycles.iter().all(|&c| c > 0.0));
        let (ph2, log2) = run();
        assert_eq!(log, log2);
        assert_eq!(ph.busy_cycles, ph2.busy_cycles);
    }

    #[test]
    fn bad_placement_is_an_error() {
        let mut s = Sched::new(2, Quanta::default()).unwrap();
        struct Nop;
        impl Task for Nop {
            fn pid(&self) -> Pid {
                0
            }
            fn step(&mut self, _: &mut System, _: usize, _: u64, _: &mut Vec<Spawn>) -> Result<Step, String> {
                Ok(Step { refs: 0, done: false })
            }
        }
        assert!(s.add(Some(5), Box::new(Nop)).unwrap_err().contains("CPU 5"));
        assert!(Sched::new(2, Quanta { quantum: 0, slice: 1 }).is_err());
    }
}
