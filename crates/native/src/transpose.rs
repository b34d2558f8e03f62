//! Matrix transpose B = A^T of N x N doubles stored row by row, natively,
//! as the simulated `transpose`: the naive double loop in two variants,
//! `load` (B[i][j] = A[j][i]: strided loads, row-wise stores) and `store`
//! (B[j][i] = A[i][j]: row-wise loads, strided stores). Both matrices are
//! written before timing. The rate counts bytes read and written,
//! 2 x 8 x N^2, in MB of 10^6 bytes per second. The matrices of every size
//! are the first bytes of one region sized for the largest.

use crate::region::Region;
use crate::{Figure, Native, Outcome, Timer};
use std::fmt::Write as _;
use std::hint::black_box;

pub struct Transpose {
    pub sizes: Vec<u64>,
}

/// Bytes of one N x N matrix of doubles, rounded up to 4 KB pages.
fn matrix_bytes(n: u64) -> u64 {
    (n * n * 8).div_ceil(4096) * 4096
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
        Ok(Transpose { sizes })
    }
}

#[inline(never)]
fn transpose(a: &[f64], b: &mut [f64], n: usize, strided_loads: bool) {
    for i in 0..n {
        for j in 0..n {
            if strided_loads {
                b[i * n + j] = a[j * n + i];
            } else {
                b[j * n + i] = a[i * n + j];
            }
        }
    }
}

impl Native for Transpose {
    fn name(&self) -> String {
        let s: Vec<String> = self.sizes.iter().map(|n| n.to_string()).collect();
        format!("transpose({})", s.join(","))
    }

    fn bytes(&self) -> u64 {
        self.sizes.iter().map(|&n| 2 * matrix_bytes(n)).max().unwrap_or(0)
    }

    fn run(&self, mem: &mut Region) -> Result<Outcome, String> {
        let mut report = String::new();
        let _ = writeln!(report, "# matrix transpose B = A^T, N x N doubles (native); MB/s counts reads and writes, MB = 10^6 bytes");
        let _ = writeln!(report, "{:>6}  {:<7}  {:<34}  {:>10}  {:>10}", "N", "variant", "access pattern", "time (s)", "MB/s");
        let (mut bytes, mut timer) = (0.0, Timer::default());
        let all = mem.doubles();
        for &n in &self.sizes {
            let words = (matrix_bytes(n) / 8) as usize;
            let (a, rest) = all.split_at_mut(words);
            let b = &mut rest[..words];
            let nn = (n * n) as usize;
            for (k, x) in a[..nn].iter_mut().enumerate() {
                *x = k as f64;
            }
            b.fill(0.0);
            for (variant, strided_loads, pattern) in
                [("load", true, "column-wise loads, row-wise stores"), ("store", false, "row-wise loads, column-wise stores")]
            {
                timer.start();
                transpose(&a[..nn], &mut b[..nn], n as usize, strided_loads);
                let t = timer.stop();
                black_box(&b[..nn]);
                let moved = 2.0 * (n * n * 8) as f64;
                let _ = writeln!(report, "{n:>6}  {variant:<7}  {pattern:<34}  {t:>10.6}  {:>10.1}", moved / t / 1e6);
                bytes += moved;
            }
            // B is A^T after either variant.
            let (i, j) = ((n / 3) as usize, (n / 2) as usize);
            if b[i * n as usize + j] != a[j * n as usize + i] {
                return Err(format!("transpose {n}: B[{i}][{j}] is not A[{j}][{i}]"));
            }
        }
        let secs = timer.wall;
        let rate = bytes / secs / 1e6;
        let _ = writeln!(report, "all transposes: {:.1} MB in {secs:.6} s = {rate:.1} MB/s", bytes / 1e6);
        Ok(Outcome { seconds: secs, cpu_seconds: timer.cpu, figures: vec![Figure::new("transpose MB/s (all)", rate, "MB/s", true)], report })
    }
}
