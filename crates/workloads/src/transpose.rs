//! Matrix transpose, B = A^T, of N x N doubles stored row by row: the
//! kernel whose strided side touches a new page on almost every access
//! once a row is longer than a few hundred bytes, so its speed is bound by
//! the TLB. Sizes around 3000 (rows of ~24 KB, matrices of ~72 MB, more
//! pages than a 4 KB-page TLB covers) are the usual test.
//!
//! Two variants, both the naive double loop a compiler turns into scalar
//! loads and stores (one access per element on each side):
//! - `load`: B[i][j] = A[j][i]: column-wise (strided) loads, row-wise
//!   stores.
//! - `store`: B[j][i] = A[i][j]: row-wise loads, column-wise (strided)
//!   stores.
//!
//! Both matrices are written once before timing (initialisation, which
//! faults them in). The rate counts the bytes read and written,
//! 2 x 8 x N^2, in MB of 10^6 bytes per second.

use crate::kernels::Kernel;
use crate::common::{exit, fault, line_step, map, page_round, spawn_on, step_of, unmap, Batch};
use crate::layout::{Layout, LayoutObtained, Region};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::fmt::Write as _;

pub const DEFAULT_SIZES: &[u64] = &[3000, 3072, 3300];

pub struct Transpose {
    pub sizes: Vec<u64>,
    pub cpu: usize,
    /// `--pages`: one region for the largest A and B, reused by every
    /// size with B right after A, as the native run has them, laid out as
    /// asked.
    pub pages: Layout,
}

impl Transpose {
    pub fn new(sizes: Vec<u64>) -> Result<Transpose, String> {
        if sizes.is_empty() {
            return Err("--sizes: give at least one matrix size".into());
        }
        for &n in &sizes {
            if !(2..=65536).contains(&n) {
                return Err(format!("--sizes {n}: matrix size out of range (2 to 65536)"));
            }
        }
        Ok(Transpose { sizes, cpu: 0, pages: Layout::default() })
    }

    /// Bytes both matrices of the largest size take.
    pub fn footprint(&self) -> u64 {
        self.sizes.iter().map(|&n| 2 * page_round(n * n * 8)).max().unwrap_or(0)
    }
}

/// One transpose; `strided_loads` picks the `load` variant.
fn transpose(sys: &mut System, b: &mut Batch, a: u64, bm: u64, n: u64, strided_loads: bool) -> Result<(), String> {
    let err = fault("transpose");
    b.switch(sys, Kernel::Transpose).map_err(&err)?;
    for i in 0..n {
        for j in 0..n {
            let (from, to) = if strided_loads { (a + (j * n + i) * 8, bm + (i * n + j) * 8) } else { (a + (i * n + j) * 8, bm + (j * n + i) * 8) };
            b.load(sys, from).map_err(&err)?;
            b.store(sys, to, 0).map_err(&err)?;
        }
    }
    b.switch(sys, Kernel::Sweep).map_err(&err)
}

impl Workload for Transpose {
    fn name(&self) -> String {
        let s: Vec<String> = self.sizes.iter().map(|n| n.to_string()).collect();
        format!("transpose({})", s.join(","))
    }

    fn estimated_refs(&self, line: u64) -> u64 {
        self.sizes.iter().map(|&n| 4 * n * n + 2 * n * n * 8 / step_of(line)).sum()
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let cpu = self.cpu;
        let pid = spawn_on(sys, cpu)?;
        let mut report = String::new();
        let _ = writeln!(report, "# matrix transpose B = A^T, N x N doubles (simulated); MB/s counts reads and writes, MB = 10^6 bytes");
        let _ = writeln!(report, "{:>6}  {:<7}  {:<34}  {:>10}  {:>10}", "N", "variant", "access pattern", "time (s)", "MB/s");
        let mut b = Batch::new(cpu);
        let (mut bytes, mut cycles, mut done) = (0.0, 0.0, 0);
        let mut details = Vec::new();
        let region = match self.pages.asked {
            Some(l) => Some(Region::map(sys, pid, cpu, self.footprint(), false, l, "the matrices")?),
            None => None,
        };
        for &n in &self.sizes {
            let len = n * n * 8;
            let (a, bm) = match region {
                Some(r) => (r.va, r.va + page_round(len)),
                None => (map(sys, pid, MmapReq::anon(len, prot::RW), "matrix A")?, map(sys, pid, MmapReq::anon(len, prot::RW), "matrix B")?),
            };
            let step = line_step(sys);
            for m in [a, bm] {
                for off in (0..len).step_by(step as usize) {
                    b.store(sys, m + off, 0).map_err(fault("matrix initialisation"))?;
                }
            }
            b.flush(sys).map_err(fault("matrix initialisation"))?;
            done += 2 * len / step;
            for (variant, strided_loads, pattern) in
                [("load", true, "column-wise loads, row-wise stores"), ("store", false, "row-wise loads, column-wise stores")]
            {
                let t0 = sys.cycles(cpu);
                transpose(sys, &mut b, a, bm, n, strided_loads)?;
                let c = sys.cycles(cpu) - t0;
                let moved = 2.0 * len as f64;
                let secs = sys.cycles_to_seconds(c);
                let _ = writeln!(report, "{n:>6}  {variant:<7}  {pattern:<34}  {secs:>10.6}  {:>10.1}", moved / secs / 1e6);
                details.push(Figure { name: format!("{n} {variant} MB/s"), value: moved / secs / 1e6, unit: "MB/s".into(), higher_is_better: true });
                bytes += moved;
                cycles += c;
                done += 2 * n * n;
                progress(done);
            }
            if region.is_none() {
                unmap(sys, pid, a, len, "matrix A")?;
                unmap(sys, pid, bm, len, "matrix B")?;
            }
        }
        self.pages.obtained = region.map(|r| r.obtained(sys, pid));
        exit(sys, pid)?;
        let secs = sys.cycles_to_seconds(cycles);
        let rate = bytes / secs / 1e6;
        let _ = writeln!(report, "all transposes: {:.1} MB in {secs:.6} s = {rate:.1} MB/s", bytes / 1e6);
        Ok(WorkloadResult {
            details,
            figure: Figure { name: "transpose MB/s (all)".into(), value: rate, unit: "MB/s".into(), higher_is_better: true },
            report,
            timed_seconds: secs,
        })
    }
    fn layout(&self) -> Option<&LayoutObtained> {
        self.pages.obtained.as_ref()
    }
}
