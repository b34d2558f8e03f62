//! A fork bomb held to a limit: a process tree that grows by fork until it
//! has `procs` processes, every process forking `fanout` children (the
//! shell's `:(){ :|:& };:` forks two), each touching a little memory of
//! its own and writing part of what it inherited, then waiting for its
//! children and exiting. The measure is the time until the whole tree has
//! exited (lower is better); the report gives forks per second and the
//! superpage counters the run moved.
//!
//! What runs, all deterministic:
//! - The first process maps `inherited` bytes of anonymous memory (its
//!   data) and writes every page of it, then maps and writes `touch` bytes
//!   of its own.
//! - Every process after it starts as a fork of its parent, so it shares
//!   all of its parent's memory copy-on-write: it reads every page of the
//!   inherited data and writes every fourth (copy-on-write faults, and
//!   where the data was promoted, demotions), then maps `touch` bytes of
//!   its own and writes every page.
//! - Processes are numbered breadth-first: process i forks processes
//!   fanout * i + 1 to fanout * i + fanout, those below `procs`, all at
//!   once, and exits when they have exited, so the tree fills level by
//!   level to depth about log_fanout(procs).
//!
//! A real fork bomb runs until fork fails (the process limit, or memory
//! exhausted); here the limit is `procs`, a number of forks the run states.

use crate::common::{size_text, spawn_on, PAGE};
use crate::sched::{Quanta, Sched, Spawn, Step, Task};
use crate::script::{Act, Child, Job, Parent, Region, Script};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;

pub struct Forkbomb {
    /// Processes the tree grows to, the first included.
    pub procs: usize,
    /// Children each process forks (fewer at the tree's last level).
    pub fanout: usize,
    /// Bytes each process maps and writes of its own.
    pub touch: u64,
    /// Bytes of data the first process writes and every other inherits.
    pub inherited: u64,
    pub quanta: Quanta,
}

/// Every this many pages of the inherited data a process writes.
const WRITE_EVERY: u64 = 4;

impl Forkbomb {
    /// Checks a size option (the error does not name the option).
    pub fn check_size(bytes: u64) -> Result<(), String> {
        if bytes < PAGE || !bytes.is_multiple_of(PAGE) || bytes > 1 << 30 {
            return Err("must be a multiple of 4 KB from 4 KB to 1 GB".into());
        }
        Ok(())
    }

    pub fn new(procs: usize, fanout: usize, touch: u64, inherited: u64) -> Result<Forkbomb, String> {
        if !(1..=65_536).contains(&procs) {
            return Err(format!("--procs {procs} is out of range (1 to 65536)"));
        }
        if !(1..=64).contains(&fanout) {
            return Err(format!("--fanout {fanout} is out of range (1 to 64)"));
        }
        Self::check_size(touch).map_err(|e| format!("--touch {touch} bytes: {e}"))?;
        Self::check_size(inherited).map_err(|e| format!("--inherited {inherited} bytes: {e}"))?;
        Ok(Forkbomb { procs, fanout, touch, inherited, quanta: Quanta::default() })
    }

    /// Memory the tree needs at most: every process alive at once with its
    /// own memory, its copies of a quarter of the inherited data and its
    /// page tables (16 KB of first-level table on ARMv7, a few table pages
    /// elsewhere), and the inherited data once.
    pub fn footprint(&self) -> u64 {
        let per = self.touch + self.inherited / WRITE_EVERY + (32 << 10);
        self.inherited + self.procs as u64 * per
    }

    /// Depth of the tree: levels below the first process.
    pub fn depth(&self) -> u32 {
        let (mut depth, mut level, mut total) = (0, 1u64, 1u64);
        while total < self.procs as u64 {
            level *= self.fanout as u64;
            total += level;
            depth += 1;
        }
        depth
    }
}

/// What every process of the tree shares: the tree's shape and sizes, and
/// where the inherited data is.
struct Shape {
    procs: usize,
    fanout: usize,
    touch: u64,
    data: Region,
}

/// No bookkeeping of the parent's between forks.
fn nothing() -> Vec<Act> {
    Vec::new()
}

/// Process `i`'s script (slots: 0 the inherited data, 1 its own memory).
fn script(s: &Shape, i: usize) -> Vec<Act> {
    let mut a = Vec::new();
    if i == 0 {
        a.push(Act::sweep(0, PAGE, true));
    } else {
        a.push(Act::sweep(0, PAGE, false));
        a.push(Act::sweep(0, WRITE_EVERY * PAGE, true));
    }
    a.push(Act::Map { slot: 1, req: MmapReq::anon(s.touch, prot::RW), what: "a forkbomb process's memory" });
    a.push(Act::sweep(1, PAGE, true));
    a
}

/// Process `i` of the tree, once its pid is known: its script, then its
/// children, forked at once.
fn node(s: &Rc<Shape>, i: usize, pid: Pid, up: Option<Rc<Cell<usize>>>) -> Node {
    let first = s.fanout * i + 1;
    let jobs: Vec<Job> = (first..(first + s.fanout).min(s.procs)).map(|c| Job::Fork(child(s.clone(), c))).collect();
    let script = Script::new(script(s, i), vec![s.data], i as u64);
    Node { inner: Parent::new(pid, script, jobs, s.fanout, nothing), up }
}

fn child(s: Rc<Shape>, i: usize) -> Child {
    Box::new(move |pid: Pid, running: Rc<Cell<usize>>| vec![Spawn { cpu: None, task: Box::new(node(&s, i, pid, Some(running))) }])
}

/// A process of the tree: a parent that forks its children and waits for
/// them (`Parent`), and tells its own parent when it has exited.
struct Node {
    inner: Parent,
    up: Option<Rc<Cell<usize>>>,
}

impl Task for Node {
    fn pid(&self) -> Pid {
        self.inner.pid
    }
    fn ready(&self) -> bool {
        self.inner.ready()
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, spawned: &mut Vec<Spawn>) -> Result<Step, String> {
        let s = self.inner.step(sys, cpu, budget, spawned)?;
        if s.done {
            if let Some(u) = &self.up {
                u.set(u.get() - 1);
            }
        }
        Ok(s)
    }
}

/// The superpage counters (`is_superpage_counter`) that moved between
/// `before` and `after`.
fn superpage_counters(before: &splab_vm::sysctl::Sysctls, after: &splab_vm::sysctl::Sysctls) -> BTreeMap<String, i64> {
    after
        .values
        .keys()
        .filter(|k| splab_vm::sysctl::is_superpage_counter(k))
        .filter_map(|k| {
            let d = after.get_int(k)? - before.get_int(k).unwrap_or(0);
            (d != 0).then(|| (k.clone(), d))
        })
        .collect()
}

impl Workload for Forkbomb {
    fn name(&self) -> String {
        format!("forkbomb({} processes, fanout {}, touch {})", self.procs, self.fanout, size_text(self.touch))
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        let inherited = self.inherited / PAGE;
        self.procs as u64 * (inherited + inherited / WRITE_EVERY + self.touch / PAGE)
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let ncpus = sys.ncpus();
        let root = spawn_on(sys, 0)?;
        let va = crate::common::map(sys, root, MmapReq::anon(self.inherited, prot::RW), "the forkbomb's inherited data")?;
        let shape = Rc::new(Shape { procs: self.procs, fanout: self.fanout, touch: self.touch, data: Region { va, len: self.inherited } });
        let before = (sys.vm_stats().clone(), sys.events().clone(), sys.sysctls());
        let mut sched = Sched::new(ncpus, self.quanta)?;
        sched.add(Some(0), Box::new(node(&shape, 0, root, None)))?;
        let ph = sched.run(sys, 0, progress)?;
        let secs = ph.seconds(sys);
        let (vm, ev) = (sys.vm_stats().clone(), sys.events().clone());
        let forks = vm.v_forks - before.0.v_forks;
        let counters = superpage_counters(&before.2, &sys.sysctls());

        let mut r = String::new();
        let _ = writeln!(
            r,
            "forkbomb: a tree of {} processes, each forking {} (depth {}), each writing {} of its own and every {}th page of {} inherited, on {ncpus} CPUs (simulated)",
            self.procs,
            self.fanout,
            self.depth(),
            size_text(self.touch),
            WRITE_EVERY,
            size_text(self.inherited)
        );
        let _ = writeln!(r, "{:>4}  {:>14}", "CPU", "busy (s, sim)");
        for (c, &cyc) in ph.busy_cycles.iter().enumerate() {
            let _ = writeln!(r, "{c:>4}  {:>14.6}", sys.cycles_to_seconds(cyc));
        }
        let _ = writeln!(r, "forks {forks}, exits {}, context switches {}", ph.finished, ph.switches);
        let _ = writeln!(
            r,
            "page faults {}, copy-on-write faults {}, zero-fills {}, TLB shootdown IPIs {}",
            ev.faults - before.1.faults,
            vm.v_cow_faults - before.0.v_cow_faults,
            vm.v_zfod - before.0.v_zfod,
            ev.shootdown_ipis - before.1.shootdown_ipis
        );
        let sp: Vec<String> = counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(r, "superpages: {}", if sp.is_empty() { "none".to_string() } else { sp.join(", ") });
        let _ = writeln!(r, "{:.1} forks/s; completed in {secs:.6} s (simulated)", forks as f64 / secs);
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure::new("completion time (s)", secs, "s", false),
            report: r,
            timed_seconds: secs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::test_system;

    fn run(profile: &str, policy: &str, f: &mut Forkbomb) -> (WorkloadResult, System) {
        let mut sys = test_system(profile, policy);
        let r = f.run(&mut sys, &mut |_| {}).unwrap();
        (r, sys)
    }

    /// The tree has exactly `procs` processes: procs - 1 forks, every one
    /// of them exited, and nothing of theirs is left mapped.
    #[test]
    fn the_tree_grows_to_the_limit_and_every_process_exits() {
        let mut f = Forkbomb::new(13, 3, 64 << 10, 256 << 10).unwrap();
        assert_eq!(f.depth(), 2);
        let (r, sys) = run("sapphire-rapids", "freebsd", &mut f);
        assert!(r.report.contains("forks 12, exits 13"), "{}", r.report);
        assert!(r.figure.value > 0.0 && r.report.contains(" forks/s; completed in "), "{}", r.report);
        assert_eq!(sys.vm_stats().v_forks, 12);
        assert!((0..20).all(|p| !sys.alive(p)));
    }

    /// Every process after the first writes every fourth page of what it
    /// inherited: one copy-on-write fault each (the first process's data
    /// is its own); the same run gives the same figure.
    #[test]
    fn inherited_data_is_copied_on_write_by_every_child() {
        let mut f = Forkbomb::new(7, 2, 16 << 10, 64 << 10).unwrap();
        let (r, sys) = run("sapphire-rapids", "freebsd", &mut f);
        assert_eq!(sys.vm_stats().v_cow_faults, 6 * 16 / WRITE_EVERY, "{}", r.report);
        let (r2, _) = run("sapphire-rapids", "freebsd", &mut Forkbomb::new(7, 2, 16 << 10, 64 << 10).unwrap());
        assert_eq!(r.figure.value, r2.figure.value);
    }

    /// With superpages, each process's own 1 MB on ARMv7 fills a section
    /// that is promoted, and the report says so.
    #[test]
    fn own_memory_is_promoted_and_reported() {
        let mut f = Forkbomb::new(3, 2, 1 << 20, 64 << 10).unwrap();
        let (r, sys) = run("armada-xp", "freebsd", &mut f);
        let promoted = sys.sysctls().get_int("vm.pmap.section.promotions").unwrap();
        assert!(promoted >= 3, "{promoted}\n{}", r.report);
        assert!(r.report.contains(&format!("vm.pmap.section.promotions {promoted}")), "{}", r.report);
    }

    #[test]
    fn bad_options_name_the_value() {
        for (args, needle) in [((0, 2, PAGE, PAGE), "--procs 0"), ((4, 0, PAGE, PAGE), "--fanout 0"), ((4, 2, 100, PAGE), "--touch 100"), ((4, 2, PAGE, 2 << 30), "--inherited 2147483648")] {
            let e = Forkbomb::new(args.0, args.1, args.2, args.3).err().unwrap();
            assert!(e.contains(needle), "{e}");
        }
    }
}
