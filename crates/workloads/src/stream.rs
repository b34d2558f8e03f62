//! STREAM (McCalpin): four kernels over three arrays of N doubles, each
//! run NTIMES times and timed separately; the best time of all but the
//! first run gives the rate (MB = 10^6 bytes), with the average, minimum and
//! maximum times beside it, in STREAM's table.
//!
//!   Copy:  c[j] = a[j]            16 bytes per element
//!   Scale: b[j] = s * c[j]        16
//!   Add:   c[j] = a[j] + b[j]     24
//!   Triad: a[j] = b[j] + s * c[j] 24
//!
//! The kernels are modelled as the vectorised loops a compiler makes of
//! them: one 64-byte access per array per line of 8 elements (an AVX-512
//! load or store), all independent; a machine whose lines are shorter
//! gets one a line (`line_step`). The arrays are separate allocations,
//! initialised (a = 1, b = 2, c = 0) before timing as STREAM does, which
//! faults them in. Values are not modelled, so STREAM's check of the
//! results is not made.

use crate::kernels::Kernel;
use crate::common::{exit, fault, line_step, map, since, spawn_on, step_of, Batch};
use crate::layout::{Layout, LayoutObtained, Region};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::fmt::Write as _;

pub struct Stream {
    pub n: u64,
    pub ntimes: u32,
    pub cpu: usize,
    /// `--pages`: the three arrays one after another in one region, as
    /// the native run has them, laid out as asked.
    pub pages: Layout,
}

/// The kernels: name, arrays read, array written, bytes per element.
const KERNELS: [(&str, &[usize], usize, u64); 4] =
    [("Copy:", &[0], 2, 16), ("Scale:", &[2], 1, 16), ("Add:", &[0, 1], 2, 24), ("Triad:", &[1, 2], 0, 24)];

impl Stream {
    pub fn new(n: u64, ntimes: u32) -> Result<Stream, String> {
        if !(1000..=4_000_000_000).contains(&n) {
            return Err(format!("--n {n} is out of range (1000 to 4000000000 elements)"));
        }
        if !(2..=1000).contains(&ntimes) {
            return Err(format!("--ntimes {ntimes} is out of range (2 to 1000; the first run is not counted)"));
        }
        Ok(Stream { n, ntimes, cpu: 0, pages: Layout::default() })
    }

    /// An array's steps of `step` bytes.
    fn lines(&self, step: u64) -> u64 {
        (self.n * 8).div_ceil(step)
    }
}

impl Workload for Stream {
    fn name(&self) -> String {
        format!("stream(N={})", self.n)
    }

    fn estimated_refs(&self, line: u64) -> u64 {
        self.lines(step_of(line)) * (3 + 2 + 10 * self.ntimes as u64)
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let cpu = self.cpu;
        let pid = spawn_on(sys, cpu)?;
        let bytes = self.n * 8;
        let mut arrays = [0u64; 3];
        let region = match self.pages.asked {
            Some(l) => Some(Region::map(sys, pid, cpu, 3 * bytes, false, l, "the arrays")?),
            None => None,
        };
        for (k, a) in arrays.iter_mut().enumerate() {
            *a = match region {
                Some(r) => r.va + k as u64 * bytes,
                None => map(sys, pid, MmapReq::anon(bytes, prot::RW), ["array a", "array b", "array c"][k])?,
            };
        }
        let err = fault("STREAM array access");
        let step = line_step(sys);
        let lines = self.lines(step);
        let mut b = Batch::new(cpu);
        // Initialisation, then STREAM's timer-granularity loop (a = 2a).
        for &a in &arrays {
            for l in 0..lines {
                b.store(sys, a + l * step, 0).map_err(&err)?;
            }
        }
        b.switch(sys, Kernel::StreamScale).map_err(&err)?;
        for l in 0..lines {
            b.load(sys, arrays[0] + l * step).map_err(&err)?;
            b.store(sys, arrays[0] + l * step, 0).map_err(&err)?;
        }
        b.flush(sys).map_err(&err)?;
        let mut done = 5 * lines;
        progress(done);
        let mut times = vec![[0.0f64; 4]; self.ntimes as usize];
        for t in times.iter_mut() {
            for (k, (_, reads, write, _)) in KERNELS.iter().enumerate() {
                b.switch(sys, [Kernel::StreamCopy, Kernel::StreamScale, Kernel::StreamAdd, Kernel::StreamTriad][k]).map_err(&err)?;
                let t0 = sys.cycles(cpu);
                for l in 0..lines {
                    for &r in reads.iter() {
                        b.load(sys, arrays[r] + l * step).map_err(&err)?;
                    }
                    b.store(sys, arrays[*write] + l * step, 0).map_err(&err)?;
                }
                b.flush(sys).map_err(&err)?;
                t[k] = since(sys, cpu, t0);
                done += lines * (reads.len() as u64 + 1);
                progress(done);
            }
        }
        self.pages.obtained = region.map(|r| r.obtained(sys, pid));
        exit(sys, pid)?;

        let mut r = String::new();
        let dash = "-".repeat(61);
        let _ = writeln!(r, "{dash}\nSTREAM-style memory bandwidth (simulated in splab)\n{dash}");
        let _ = writeln!(r, "This system uses 8 bytes per array element.\n{dash}");
        let _ = writeln!(r, "Array size = {} (elements), Offset = 0 (elements)", self.n);
        let mib = bytes as f64 / (1u64 << 20) as f64;
        let _ = writeln!(r, "Memory per array = {mib:.1} MiB (= {:.1} GiB).", mib / 1024.0);
        let _ = writeln!(r, "Total memory required = {:.1} MiB (= {:.1} GiB).", 3.0 * mib, 3.0 * mib / 1024.0);
        let _ = writeln!(r, "Each kernel will be executed {} times; the best time of all but the first is reported.\n{dash}", self.ntimes);
        let _ = writeln!(r, "Function    Best Rate MB/s  Avg time     Min time     Max time");
        let mut triad = 0.0;
        let mut timed = 0.0;
        for (k, (name, _, _, per)) in KERNELS.iter().enumerate() {
            let counted: Vec<f64> = times[1..].iter().map(|t| t[k]).collect();
            let avg = counted.iter().sum::<f64>() / counted.len() as f64;
            let min = counted.iter().copied().fold(f64::INFINITY, f64::min);
            let max = counted.iter().copied().fold(0.0, f64::max);
            let rate = 1e-6 * (per * self.n) as f64 / min;
            let _ = writeln!(r, "{name:<12}{rate:>11.1}  {avg:>11.6}  {min:>11.6}  {max:>11.6}");
            if k == 3 {
                triad = rate;
            }
            timed += times.iter().map(|t| t[k]).sum::<f64>();
        }
        let _ = writeln!(r, "{dash}");
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: "Triad MB/s".into(), value: triad, unit: "MB/s".into(), higher_is_better: true },
            report: r,
            timed_seconds: timed,
        })
    }
    fn layout(&self) -> Option<&LayoutObtained> {
        self.pages.obtained.as_ref()
    }
}
