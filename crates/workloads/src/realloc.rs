//! A program that grows one allocation with realloc until memory runs out,
//! touching what it gets: it starts with 1 MB and doubles. Like a large
//! allocation in jemalloc (FreeBSD's malloc), each realloc first tries to
//! grow in place, by mapping the range right after the allocation (the
//! kernel extends the same anonymous object, so the old and new parts can
//! share reservations); if that range is taken it maps a new region of the
//! new size, copies the old contents a line at a time, and unmaps the old
//! one (`in_place` false: always so). The new part is written a page at a
//! time. It stops cleanly at the
//! first "out of memory" (a failed mmap, or a fault the kernel cannot give
//! a page), exits, and reports how far it got and how fast memory was
//! filled (MB per simulated second, higher is better).

use crate::common::{exit, fault, line_step, map, mib, since, size_text, spawn_on, touch_pages, unmap, Batch};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::map::MmapReq;
use splab_sim::AccessError;
use splab_vm::{prot, Errno, FaultError};
use std::fmt::Write as _;

pub struct Realloc {
    pub start: u64,
    /// Try to grow in place before moving (jemalloc's huge realloc);
    /// false: always move and copy.
    pub in_place: bool,
    pub cpu: usize,
}

impl Realloc {
    /// Checks the first allocation's size (the error does not name the
    /// option).
    pub fn check_start(start: u64) -> Result<(), String> {
        if start < 4096 || !start.is_multiple_of(4096) {
            return Err("must be a positive multiple of 4 KB".into());
        }
        Ok(())
    }

    pub fn new(start: u64) -> Result<Realloc, String> {
        Self::check_start(start).map_err(|e| format!("--start-size {start} bytes: {e}"))?;
        Ok(Realloc { start, in_place: true, cpu: 0 })
    }
}

/// How the growth ended.
enum Stop {
    Mmap(Errno),
    /// Out of memory writing the new part, at this address.
    Fault(u64),
    /// Out of memory copying into a moved allocation, at this offset.
    Copy(u64),
}

impl Workload for Realloc {
    fn name(&self) -> String {
        format!("realloc(from {}, doubling, {})", size_text(self.start), if self.in_place { "in place when possible" } else { "always moving" })
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        // One store per page of memory, roughly: the size is the system's.
        2 << 20
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let cpu = self.cpu;
        let pid = spawn_on(sys, cpu)?;
        let t0 = sys.cycles(cpu);
        let mut b = Batch::new(cpu);
        let mut cur = map(sys, pid, MmapReq::anon(self.start, prot::RW), "the first allocation")?;
        let mut size = 0;
        let mut grow_to = self.start;
        let (mut steps, mut in_place, mut moved, mut copied) = (0u64, 0u64, 0u64, 0u64);
        let mut touched;
        let stop = loop {
            // Write the new part, page by page.
            match touch_pages(sys, &mut b, cur + size, grow_to - size, Some(1)) {
                Ok(()) => touched = grow_to,
                Err(AccessError::Fault(FaultError::NoMemory(va))) => {
                    touched = (va - cur) & !4095;
                    break Stop::Fault(va);
                }
                // When memory (and swap, if any) runs out, the OOM killer
                // kills this process, the largest: out of memory too. Its
                // pages then (resident and on swap) are the ones written.
                Err(AccessError::Fault(FaultError::Killed(_))) => {
                    let pages = sys.oom_kills().iter().rev().find(|k| k.pid == pid).map_or(0, |k| k.size_pages);
                    touched = (pages * 4096).clamp(size, grow_to);
                    break Stop::Fault(cur + touched);
                }
                Err(e) => return Err(format!("realloc: touching the allocation: {e}")),
            }
            size = grow_to;
            progress(b.refs);
            steps += 1;
            grow_to = size.checked_mul(2).ok_or("realloc: size overflow")?;
            // realloc: grow in place if the range after the allocation is
            // free (and allowed), else move.
            if self.in_place {
                let more = grow_to - size;
                match sys.mmap(pid, MmapReq { addr: cur + size, ..MmapReq::anon(more, prot::RW) }) {
                    Ok(va) if va.0 == cur + size => {
                        in_place += 1;
                        continue;
                    }
                    Ok(va) => unmap(sys, pid, va.0, more, "the misplaced extension")?,
                    Err(e) => break Stop::Mmap(e),
                }
            }
            let new = match sys.mmap(pid, MmapReq::anon(grow_to, prot::RW)) {
                Ok(v) => v.0,
                Err(e) => break Stop::Mmap(e),
            };
            let copy = |sys: &mut System, b: &mut Batch| -> Result<(), AccessError> {
                for off in (0..size).step_by(line_step(sys) as usize) {
                    b.load(sys, cur + off)?;
                    b.store(sys, new + off, 1)?;
                }
                b.flush(sys)
            };
            match copy(sys, &mut b) {
                Ok(()) => {}
                Err(AccessError::Fault(FaultError::NoMemory(va))) => break Stop::Copy(va - new),
                // Killed by the OOM killer: its pages beyond the old
                // allocation's are the part copied.
                Err(AccessError::Fault(FaultError::Killed(_))) => {
                    let pages = sys.oom_kills().iter().rev().find(|k| k.pid == pid).map_or(0, |k| k.size_pages);
                    break Stop::Copy((pages * 4096).saturating_sub(size).min(size));
                }
                Err(e) => return Err(fault("realloc: copying")(e)),
            }
            unmap(sys, pid, cur, size, "the old allocation")?;
            cur = new;
            moved += 1;
            copied += size;
        };
        let secs = since(sys, cpu, t0);
        // A process the OOM killer took is already gone.
        if sys.alive(pid) {
            exit(sys, pid)?;
        }
        let rate = mib(touched) / secs;
        let mut r = String::new();
        let _ = writeln!(r, "realloc: one allocation from {}, doubling, written page by page (simulated)", size_text(self.start));
        let _ = writeln!(r, "steps {steps}: {in_place} grown in place, {moved} moved ({:.1} MB copied)", mib(copied));
        match stop {
            Stop::Mmap(e) => {
                let _ = writeln!(r, "stopped: mmap of {:.1} MB failed: {e}", mib(grow_to));
            }
            Stop::Fault(va) => {
                let _ = writeln!(r, "stopped: out of memory writing offset {:.1} MB of a {:.1} MB allocation", mib(va - cur), mib(grow_to));
            }
            Stop::Copy(off) => {
                let _ = writeln!(r, "stopped: out of memory copying offset {:.1} MB into a new {:.1} MB allocation", mib(off), mib(grow_to));
            }
        }
        let _ = writeln!(r, "memory written: {:.1} MB in {secs:.6} s = {rate:.1} MB/s", mib(touched));
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: "fill rate MB/s".into(), value: rate, unit: "MB/s".into(), higher_is_better: true },
            report: r,
            timed_seconds: secs,
        })
    }
}
