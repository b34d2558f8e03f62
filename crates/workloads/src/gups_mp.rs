//! Multi-process GUPS, after HPCC's "star" RandomAccess: every process
//! runs the single-process benchmark on a table of its own, all at once,
//! each on a CPU of its own (more processes than CPUs share them, time-
//! sliced). As in HPCC, the tables are initialised first and only the
//! update loops are timed; a barrier separates the two, so every process
//! starts updating together. The figure is the aggregate rate: all updates
//! over the time the slowest CPU took.

use crate::common::{exit, fault, map, spawn_on, Batch};
use crate::gups::{check_log2_table, gups_line, init_table, Updater};
use crate::sched::{Phase, Quanta, Sched, Spawn, Step, Task};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::fmt::Write as _;

pub struct GupsMp {
    pub log2_table: u32,
    /// Processes; None means one per CPU of the machine.
    pub procs: Option<usize>,
    pub quanta: Quanta,
}

impl GupsMp {
    pub fn new(log2_table: u32, procs: Option<usize>) -> Result<GupsMp, String> {
        check_log2_table(log2_table)?;
        if let Some(p) = procs {
            if !(1..=256).contains(&p) {
                return Err(format!("--procs {p} is out of range (1 to 256)"));
            }
        }
        Ok(GupsMp { log2_table, procs, quanta: Quanta::default() })
    }
}

/// References per HPCC round: 128 loads and 128 stores.
const ROUND_REFS: u64 = 256;

/// A process initialising its table, a quantum at a time.
struct Init {
    pid: Pid,
    table: u64,
    next: u64,
    n: u64,
}

impl Task for Init {
    fn pid(&self) -> Pid {
        self.pid
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, _: &mut Vec<Spawn>) -> Result<Step, String> {
        let end = (self.next + budget).min(self.n);
        init_table(sys, &mut Batch::new(cpu), self.table, self.next, end).map_err(fault("GUPS table initialisation"))?;
        let refs = end - self.next;
        self.next = end;
        Ok(Step { refs, done: end == self.n })
    }
}

/// A process running its update loop, a quantum at a time.
struct Update {
    pid: Pid,
    u: Updater,
}

impl Task for Update {
    fn pid(&self) -> Pid {
        self.pid
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, _: &mut Vec<Spawn>) -> Result<Step, String> {
        let rounds = (budget / ROUND_REFS).max(1);
        let per_batch = (Batch::LEN as u64 / ROUND_REFS).max(1) as usize;
        let updates = self.u.run(sys, cpu, rounds, per_batch).map_err(fault("GUPS update"))?;
        Ok(Step { refs: 2 * updates, done: self.u.done() })
    }
}

impl Workload for GupsMp {
    fn name(&self) -> String {
        match self.procs {
            Some(p) => format!("gups-mp({p} x 2^{})", self.log2_table),
            None => format!("gups-mp(2^{} per CPU)", self.log2_table),
        }
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        // The CPU count is only known with the system; 4 is the default
        // profile's.
        self.procs.unwrap_or(4) as u64 * 9 * (1u64 << self.log2_table)
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let ncpus = sys.ncpus();
        let procs = self.procs.unwrap_or(ncpus);
        let n = 1u64 << self.log2_table;
        let cpu_of = |i: usize| i % ncpus;
        let mut pids = Vec::new();
        let mut tables = Vec::new();
        for i in 0..procs {
            let pid = spawn_on(sys, cpu_of(i))?;
            tables.push(map(sys, pid, MmapReq::anon(n * 8, prot::RW), "a GUPS table")?);
            pids.push(pid);
        }
        let mut init = Sched::new(ncpus, self.quanta)?;
        for i in 0..procs {
            init.add(Some(cpu_of(i)), Box::new(Init { pid: pids[i], table: tables[i], next: 0, n }))?;
        }
        let init_phase = init.run(sys, 0, progress)?;
        let mut upd = Sched::new(ncpus, self.quanta)?;
        for i in 0..procs {
            upd.add(Some(cpu_of(i)), Box::new(Update { pid: pids[i], u: Updater::new(tables[i], self.log2_table) }))?;
        }
        let ph: Phase = upd.run(sys, init_phase.refs, progress)?;
        for &pid in &pids {
            exit(sys, pid)?;
        }
        let nupdate = 4 * n;
        let timed = ph.seconds(sys);
        let gups = (nupdate * procs as u64) as f64 / timed / 1e9;

        let mut r = String::new();
        let _ = writeln!(r, "Star RandomAccess: {procs} processes on {ncpus} CPUs, each with a table of its own");
        let _ = writeln!(r, "Main table size   = 2^{} = {} words per process", self.log2_table, n);
        let _ = writeln!(r, "Number of updates = {} per process", nupdate);
        let _ = writeln!(r, "{:>4}  {:>9}  {:>14}  {:>12}", "CPU", "processes", "time (s, sim)", "GUP/s");
        for (c, &cyc) in ph.busy_cycles.iter().enumerate() {
            let k = (0..procs).filter(|&i| cpu_of(i) == c).count() as u64;
            if k == 0 {
                continue;
            }
            let t = sys.cycles_to_seconds(cyc);
            let _ = writeln!(r, "{c:>4}  {k:>9}  {t:>14.6}  {:>12.6}", (k * nupdate) as f64 / t / 1e9);
        }
        let _ = writeln!(r, "Context switches  = {}", ph.switches);
        let _ = writeln!(r, "Real time used    = {timed:.6} seconds (simulated, slowest CPU)");
        let _ = writeln!(r, "{} (aggregate of {procs})", gups_line(gups));
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: "aggregate GUP/s".into(), value: gups, unit: "GUP/s".into(), higher_is_better: true },
            report: r,
            timed_seconds: timed,
        })
    }
}
