//! Memory bandwidth in the manner of lmbench's bw_mem and bw_mmap_rd. Each
//! test allocates its buffers, zeroes them (as bw_mem does before timing,
//! which also faults them in), then times one pass and prints lmbench's
//! line: megabytes (2^20 bytes) and megabytes per second.
//!
//! - `rd`: sums the buffer; like bw_mem's rd it reads one word in four
//!   (every 16 bytes), so every line is brought in.
//! - `wr`: writes a constant to one word in four.
//! - `rdwr`: reads and rewrites one word in four.
//! - `bcopy_libc`: copies the first half of a buffer twice the size to the
//!   second half the way a library memcpy does, a 64-byte line at a time
//!   (one vector load and store per line), or a line of the machine's
//!   where it is shorter (`line_step`).
//! - `bcopy_hand`: the same copy as a hand-written loop, word by word.
//! - `mmap_rd`: re-reads a file that is in the page cache through a fresh
//!   read-only shared mapping, summing it like `rd` (bw_mmap_rd); the
//!   mmap and munmap are part of the timed pass, so the cost of mapping
//!   the file's pages (page faults, or superpage mappings) is counted.
//!
//! lmbench repeats each test and reports the median; the simulation is
//! deterministic, so one timed pass (after the zeroing pass) is reported.

use crate::kernels::Kernel;
use crate::common::{exit, fault, file_req, line_step, map, mib, size_text, spawn_on, step_of, touch_pages, unmap, Batch};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::fmt::Write as _;

/// The tests, in the order they run by default.
pub const TESTS: &[&str] = &["rd", "wr", "rdwr", "bcopy_libc", "bcopy_hand", "mmap_rd"];

pub struct Bw {
    pub size: u64,
    pub tests: Vec<String>,
    pub cpu: usize,
}

impl Bw {
    /// Checks a buffer size (the error does not name the option).
    pub fn check_size(size: u64) -> Result<(), String> {
        if size < 1 << 16 || !size.is_multiple_of(4096) {
            return Err("must be a multiple of 4 KB and at least 64 KB".into());
        }
        Ok(())
    }

    pub fn new(size: u64, tests: Vec<String>) -> Result<Bw, String> {
        Self::check_size(size).map_err(|e| format!("--size {size} bytes: {e}"))?;
        if tests.is_empty() {
            return Err("--tests: give at least one test".into());
        }
        for t in &tests {
            if !TESTS.contains(&t.as_str()) {
                return Err(format!("--tests: unknown test {t:?} (known: {})", TESTS.join(", ")));
            }
        }
        Ok(Bw { size, tests, cpu: 0 })
    }

    /// A test's references where a line-at-a-time loop steps `step`.
    fn refs_of(&self, test: &str, step: u64) -> u64 {
        let (s, zero) = (self.size, self.size / step);
        match test {
            "rd" | "wr" => s / 16 + zero,
            "rdwr" => s / 8 + zero,
            "bcopy_libc" => 2 * s / step + 2 * zero,
            "bcopy_hand" => 2 * s / 8 + 2 * zero,
            _ => s / 16 + s / 4096,
        }
    }
}

/// One test's pass over the buffer(s): what each step of `step` bytes does.
#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
    ReadWrite,
    /// Load from `src + off`, store to `dst + off`.
    Copy,
}

/// Runs one pass of `kind` over `len` bytes, one access (or pair) every
/// `step` bytes.
fn pass(sys: &mut System, b: &mut Batch, kind: Kind, src: u64, dst: u64, len: u64, step: u64) -> Result<(), String> {
    let err = fault("bandwidth pass");
    // lmbench's loops (`kernels`); zeroing is a line at a time.
    let line = step == line_step(sys);
    let kernel = match (kind, line) {
        (Kind::Read, _) => Kernel::BwRead,
        (Kind::Write, true) => Kernel::Sweep,
        (Kind::Write, false) => Kernel::BwWrite,
        (Kind::ReadWrite, _) => Kernel::BwReadWrite,
        (Kind::Copy, true) => Kernel::CopyLine,
        (Kind::Copy, false) => Kernel::CopyWord,
    };
    b.switch(sys, kernel).map_err(&err)?;
    let mut off = 0;
    while off < len {
        match kind {
            Kind::Read => b.load(sys, src + off),
            Kind::Write => b.store(sys, src + off, 1),
            Kind::ReadWrite => b.load(sys, src + off).and_then(|_| b.store(sys, src + off, 1)),
            Kind::Copy => b.load(sys, src + off).and_then(|_| b.store(sys, dst + off, 0)),
        }
        .map_err(&err)?;
        off += step;
    }
    b.flush(sys).map_err(&err)
}

/// Zeroes a buffer a line at a time (bzero), faulting it in.
fn zero(sys: &mut System, b: &mut Batch, va: u64, len: u64) -> Result<(), String> {
    pass(sys, b, Kind::Write, va, 0, len, line_step(sys))
}

impl Bw {
    /// Runs one test in process `pid`; returns its timed cycles.
    fn test(&self, sys: &mut System, pid: Pid, test: &str) -> Result<f64, String> {
        let (cpu, size) = (self.cpu, self.size);
        let mut b = Batch::new(cpu);
        let anon = |sys: &mut System, len| map(sys, pid, MmapReq::anon(len, prot::RW), "a bandwidth buffer");
        let cycles = match test {
            "mmap_rd" => {
                // The file is read once first, so that the timed pass is a
                // re-read from the page cache, as bw_mmap_rd intends.
                let file = sys.create_file(size);
                let req = file_req(file, size, prot::READ, true);
                let va = map(sys, pid, req, "the file")?;
                touch_pages(sys, &mut b, va, size, None).map_err(fault("reading the file into the page cache"))?;
                unmap(sys, pid, va, size, "the file")?;
                let t0 = sys.cycles(cpu);
                let va = map(sys, pid, req, "the file")?;
                pass(sys, &mut b, Kind::Read, va, 0, size, 16)?;
                unmap(sys, pid, va, size, "the file")?;
                sys.cycles(cpu) - t0
            }
            "bcopy_libc" | "bcopy_hand" => {
                let src = anon(sys, 2 * size)?;
                let dst = src + size;
                zero(sys, &mut b, src, 2 * size)?;
                let step = if test == "bcopy_libc" { line_step(sys) } else { 8 };
                let t0 = sys.cycles(cpu);
                pass(sys, &mut b, Kind::Copy, src, dst, size, step)?;
                let c = sys.cycles(cpu) - t0;
                unmap(sys, pid, src, 2 * size, "the copy buffers")?;
                c
            }
            _ => {
                let kind = match test {
                    "rd" => Kind::Read,
                    "wr" => Kind::Write,
                    _ => Kind::ReadWrite,
                };
                let va = anon(sys, size)?;
                zero(sys, &mut b, va, size)?;
                let t0 = sys.cycles(cpu);
                pass(sys, &mut b, kind, va, 0, size, 16)?;
                let c = sys.cycles(cpu) - t0;
                unmap(sys, pid, va, size, "the buffer")?;
                c
            }
        };
        Ok(cycles)
    }
}

impl Workload for Bw {
    fn name(&self) -> String {
        format!("bw({})", size_text(self.size))
    }

    fn estimated_refs(&self, line: u64) -> u64 {
        self.tests.iter().map(|t| self.refs_of(t, step_of(line))).sum()
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let pid = spawn_on(sys, self.cpu)?;
        let mut report = String::from("# memory bandwidth, lmbench bw_mem/bw_mmap_rd style (simulated); MB = 2^20 bytes\n");
        let mut done = 0;
        let mut total = 0.0;
        let mut first = None;
        for t in &self.tests {
            let cyc = self.test(sys, pid, t)?;
            total += cyc;
            let secs = sys.cycles_to_seconds(cyc);
            let mbs = mib(self.size) / secs;
            let what = match t.as_str() {
                "rd" => "bw_mem SIZE rd",
                "wr" => "bw_mem SIZE wr",
                "rdwr" => "bw_mem SIZE rdwr",
                "bcopy_libc" => "bw_mem SIZE bcopy (libc-like memcpy, 64-byte lines)",
                "bcopy_hand" => "bw_mem SIZE bcopy, hand-written (word by word)",
                _ => "bw_mmap_rd SIZE FILE (mmap, read, munmap timed)",
            };
            let _ = writeln!(report, "# {t}: {}", what.replace("SIZE", &size_text(self.size)));
            let _ = writeln!(report, "{:.2} {:.2}", mib(self.size), mbs);
            first.get_or_insert((t.clone(), mbs));
            done += self.refs_of(t, line_step(sys));
            progress(done);
        }
        exit(sys, pid)?;
        let (name, value) = first.ok_or("bw: no test to run")?;
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: format!("{name} MB/s"), value, unit: "MB/s".into(), higher_is_better: true },
            report,
            timed_seconds: sys.cycles_to_seconds(total),
        })
    }
}
