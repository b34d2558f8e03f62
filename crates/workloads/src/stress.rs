//! `stress --vm N --vm-bytes B`: N worker processes, forked from one
//! parent and spread over the CPUs, each repeatedly allocating B bytes
//! (malloc of that size is an anonymous mmap), writing one byte in every
//! page (stress's default stride of 4096), and freeing it (munmap).
//! stress runs until stopped; here each worker makes `loops` rounds, and
//! the measure is the time until the last worker is done (lower is
//! better), as stress reports "successful run completed in".

use crate::common::{size_text, spawn_on, PAGE};
use crate::sched::{Quanta, Sched, Spawn};
use crate::script::{Act, End, Job, Parent, Script, ScriptTask};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::cell::Cell;
use std::fmt::Write as _;
use std::rc::Rc;

pub struct Stress {
    /// Workers; None: one per CPU.
    pub vm: Option<usize>,
    pub vm_bytes: u64,
    pub loops: u64,
    /// Read every written byte back and check it before freeing, as
    /// stress's vm workers do (errors need content tracking to be seen).
    pub verify: bool,
    pub quanta: Quanta,
}

impl Stress {
    /// Checks a worker's allocation size (the error does not name the
    /// option).
    pub fn check_vm_bytes(bytes: u64) -> Result<(), String> {
        if bytes < PAGE {
            return Err("less than a page".into());
        }
        Ok(())
    }

    pub fn new(vm: Option<usize>, vm_bytes: u64, loops: u64) -> Result<Stress, String> {
        if let Some(n) = vm {
            if !(1..=1024).contains(&n) {
                return Err(format!("--vm {n} is out of range (1 to 1024)"));
            }
        }
        Self::check_vm_bytes(vm_bytes).map_err(|e| format!("--vm-bytes {vm_bytes} bytes: {e}"))?;
        if !(1..=1_000_000).contains(&loops) {
            return Err(format!("--loops {loops} is out of range (1 to 1000000)"));
        }
        Ok(Stress { vm, vm_bytes, loops, verify: false, quanta: Quanta::default() })
    }
}

/// A worker: `loops` rounds of mmap, touch every page, (with `verify`)
/// read every page back and check it, munmap.
fn worker(bytes: u64, loops: u64, verify: bool) -> Vec<Act> {
    let mut a = Vec::new();
    for _ in 0..loops {
        a.push(Act::Map { slot: 0, req: MmapReq::anon(bytes, prot::RW), what: "a stress allocation" });
        a.push(Act::sweep(0, PAGE, true));
        if verify {
            a.push(Act::Check { slot: 0, stride: PAGE, expect: 1 });
        }
        a.push(Act::Unmap { slot: 0 });
    }
    a
}

impl Workload for Stress {
    fn name(&self) -> String {
        let vm = self.vm.map_or("one per CPU".into(), |n| n.to_string());
        format!("stress(--vm {vm}, --vm-bytes {}, {} loops)", size_text(self.vm_bytes), self.loops)
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        let passes = if self.verify { 2 } else { 1 };
        self.vm.unwrap_or(4) as u64 * self.loops * self.vm_bytes.div_ceil(PAGE) * passes
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let ncpus = sys.ncpus();
        let n = self.vm.unwrap_or(ncpus);
        let parent = spawn_on(sys, 0)?;
        let (bytes, loops, verify) = (self.vm_bytes, self.loops, self.verify);
        let jobs: Vec<Job> = (0..n)
            .map(|_| {
                Job::Fork(Box::new(move |pid: Pid, running: Rc<Cell<usize>>| {
                    let task = ScriptTask { pid, script: Script::new(worker(bytes, loops, verify), Vec::new(), pid as u64), end: End::Exit, running: Some(running) };
                    vec![Spawn { cpu: None, task: Box::new(task) }]
                }))
            })
            .collect();
        let p = Parent::new(parent, Script::new(Vec::new(), Vec::new(), 0), jobs, n, Vec::new);
        let mut sched = Sched::new(ncpus, self.quanta)?;
        sched.add(Some(0), Box::new(p))?;
        let ev0 = sys.events().clone();
        let ph = sched.run(sys, 0, progress)?;
        let secs = ph.seconds(sys);
        let ev = sys.events();
        let mut r = String::new();
        let _ = writeln!(r, "stress: info: [{parent}] dispatching hogs: 0 cpu, 0 io, {n} vm, 0 hdd");
        let check = if verify { ", read it back and check it" } else { "" };
        let _ = writeln!(r, "# each vm worker: {loops} x (mmap {}, write every page{check}, munmap), on {ncpus} CPUs", size_text(bytes));
        let _ = writeln!(r, "{:>4}  {:>14}", "CPU", "busy (s, sim)");
        for (c, &cyc) in ph.busy_cycles.iter().enumerate() {
            let _ = writeln!(r, "{c:>4}  {:>14.6}", sys.cycles_to_seconds(cyc));
        }
        let touched = (n as u64 * loops * bytes) as f64 / (1u64 << 20) as f64;
        let _ = writeln!(
            r,
            "# {touched:.0} MB touched, {:.1} MB/s; page faults {}, zero-fills {}, context switches {}",
            touched / secs,
            ev.faults - ev0.faults,
            ev.zero_fills - ev0.zero_fills,
            ph.switches
        );
        if ev.swap_outs > ev0.swap_outs || ev.swap_ins > ev0.swap_ins {
            let _ = writeln!(r, "# paging: {} pages to swap, {} pages from swap", ev.swap_outs - ev0.swap_outs, ev.swap_ins - ev0.swap_ins);
        }
        let _ = writeln!(r, "stress: info: [{parent}] successful run completed in {secs:.4}s (simulated)");
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: "completion time (s)".into(), value: secs, unit: "s".into(), higher_is_better: false },
            report: r,
            timed_seconds: secs,
        })
    }
}
