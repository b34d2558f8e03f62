//! STREAM (McCalpin), natively: Copy, Scale, Add and Triad over three
//! arrays of N doubles, each kernel run NTIMES times and timed on its own;
//! the best time of all but the first run gives the rate (MB = 10^6 bytes),
//! beside the average, minimum and maximum, in STREAM's table, followed by
//! STREAM's check of the results. The arrays lie one after another in one
//! region, as STREAM's static arrays do.

use crate::region::Region;
use crate::{now, Figure, Native, Outcome, Timer};
use std::fmt::Write as _;
use std::hint::black_box;

pub struct Stream {
    pub n: u64,
    pub ntimes: u32,
}

const NAMES: [&str; 4] = ["Copy:", "Scale:", "Add:", "Triad:"];
const BYTES_PER: [u64; 4] = [16, 16, 24, 24];

impl Stream {
    pub fn new(n: u64, ntimes: u32) -> Result<Stream, String> {
        if !(1000..=4_000_000_000).contains(&n) {
            return Err(format!("--n {n} is out of range (1000 to 4000000000 elements)"));
        }
        if !(2..=1000).contains(&ntimes) {
            return Err(format!("--ntimes {ntimes} is out of range (2 to 1000; the first run is not counted)"));
        }
        Ok(Stream { n, ntimes })
    }
}

impl Native for Stream {
    fn name(&self) -> String {
        format!("stream(N={})", self.n)
    }

    fn bytes(&self) -> u64 {
        3 * 8 * self.n
    }

    fn run(&self, mem: &mut Region) -> Result<Outcome, String> {
        let n = self.n as usize;
        let all = mem.doubles();
        let (a, rest) = all.split_at_mut(n);
        let (b, rest) = rest.split_at_mut(n);
        let c = &mut rest[..n];
        a.fill(1.0);
        b.fill(2.0);
        c.fill(0.0);
        for x in a.iter_mut() {
            *x *= 2.0;
        }
        let s = 3.0f64;
        let mut times = vec![[0.0f64; 4]; self.ntimes as usize];
        let mut timer = Timer::default();
        for t in times.iter_mut() {
            timer.start();
            let t0 = now();
            c.copy_from_slice(a);
            black_box(&c[0]);
            let t1 = now();
            for (bj, cj) in b.iter_mut().zip(c.iter()) {
                *bj = s * cj;
            }
            black_box(&b[0]);
            let t2 = now();
            for ((cj, aj), bj) in c.iter_mut().zip(a.iter()).zip(b.iter()) {
                *cj = aj + bj;
            }
            black_box(&c[0]);
            let t3 = now();
            for ((aj, bj), cj) in a.iter_mut().zip(b.iter()).zip(c.iter()) {
                *aj = bj + s * cj;
            }
            black_box(&a[0]);
            let t4 = now();
            timer.stop();
            *t = [t1 - t0, t2 - t1, t3 - t2, t4 - t3];
        }

        let mut r = String::new();
        let dash = "-".repeat(61);
        let _ = writeln!(r, "{dash}\nSTREAM-style memory bandwidth (native run in splab)\n{dash}");
        let _ = writeln!(r, "This system uses 8 bytes per array element.\n{dash}");
        let _ = writeln!(r, "Array size = {} (elements), Offset = 0 (elements)", self.n);
        let mib = (8 * self.n) as f64 / (1u64 << 20) as f64;
        let _ = writeln!(r, "Memory per array = {mib:.1} MiB (= {:.1} GiB).", mib / 1024.0);
        let _ = writeln!(r, "Total memory required = {:.1} MiB (= {:.1} GiB).", 3.0 * mib, 3.0 * mib / 1024.0);
        let _ = writeln!(r, "Each kernel will be executed {} times; the best time of all but the first is reported.\n{dash}", self.ntimes);
        let _ = writeln!(r, "Function    Best Rate MB/s  Avg time     Min time     Max time");
        let mut figures = Vec::new();
        let mut timed = 0.0;
        for k in 0..4 {
            let counted: Vec<f64> = times[1..].iter().map(|t| t[k]).collect();
            let avg = counted.iter().sum::<f64>() / counted.len() as f64;
            let min = counted.iter().copied().fold(f64::INFINITY, f64::min);
            let max = counted.iter().copied().fold(0.0, f64::max);
            let rate = 1e-6 * (BYTES_PER[k] * self.n) as f64 / min;
            let _ = writeln!(r, "{:<12}{rate:>11.1}  {avg:>11.6}  {min:>11.6}  {max:>11.6}", NAMES[k]);
            figures.push(Figure::new(&format!("{} MB/s", NAMES[k].trim_end_matches(':')), rate, "MB/s", true));
            timed += times.iter().map(|t| t[k]).sum::<f64>();
        }
        let _ = writeln!(r, "{dash}");
        // STREAM's checkSTREAMresults: the values the kernels must leave.
        let (mut aj, mut bj, mut cj) = (2.0f64, 2.0f64, 0.0f64);
        for _ in 0..self.ntimes {
            cj = aj;
            bj = s * cj;
            cj = aj + bj;
            aj = bj + s * cj;
        }
        let err = |v: &[f64], want: f64| v.iter().map(|x| (x - want).abs()).sum::<f64>() / v.len() as f64 / want.abs();
        let worst = err(a, aj).max(err(b, bj)).max(err(c, cj));
        if worst > 1e-13 {
            return Err(format!("STREAM validation failed: average relative error {worst:e}\n{r}"));
        }
        let _ = writeln!(r, "Solution Validates: avg error less than 1.000000e-13 on all three arrays\n{dash}");
        // The headline is Triad, as in the simulated STREAM.
        figures.rotate_right(1);
        Ok(Outcome { seconds: timed, cpu_seconds: timer.cpu, figures, report: r })
    }
}
