//! Memory latency by pointer chasing, natively, in the manner of lmbench's
//! lat_mem_rd: the array of the largest size is mapped once; for each size
//! of the sweep its first bytes are laid out as a chain of pointers, one
//! every `stride` bytes, and the time of a run of dependent loads (each
//! address read from the previous element) gives ns per load. Output: a
//! `"stride=N` line, then `size_MB ns` lines, as lat_mem_rd prints.
//!
//! The sweep doubles from 4 KB (the simulated `lat` steps by quarter
//! octaves; each native size costs real time). Orders as in the simulated
//! `lat`: `random` is one cycle through a random permutation (Sattolo's
//! shuffle), so consecutive loads land on unrelated lines and pages;
//! `seq` links each element to the next one up.

use crate::region::Region;
use crate::{size_text, Figure, Native, Outcome, Timer};

pub use splab_defs::lat::{chain, sweep, Pattern, MIN_SIZE};
use std::fmt::Write as _;
use std::hint::black_box;

pub struct Lat {
    pub max_size: u64,
    pub strides: Vec<u64>,
    pub pattern: Pattern,
    /// Timed loads per size (after a warm-up pass over the chain).
    pub loads: u64,
}

impl Lat {
    pub fn new(max_size: u64, strides: Vec<u64>, pattern: Pattern, loads: u64) -> Result<Lat, String> {
        if max_size < MIN_SIZE {
            return Err(format!("--max-size {max_size} bytes is below the sweep's smallest size ({MIN_SIZE} bytes)"));
        }
        if strides.is_empty() {
            return Err("--stride: give at least one stride".into());
        }
        for &s in &strides {
            if s < 8 || !s.is_multiple_of(8) || s > max_size {
                return Err(format!("--stride {s} must be a multiple of 8 bytes, at least 8 and at most --max-size"));
            }
        }
        if !(100..=10_000_000_000).contains(&loads) {
            return Err(format!("--loads {loads} is out of range (100 to 10000000000)"));
        }
        Ok(Lat { max_size, strides, pattern, loads })
    }

    /// The sweep: 4 KB, 8 KB, ... doubling, then the largest size.
    pub fn sizes(&self) -> Vec<u64> {
        sweep(self.max_size)
    }
}

/// Follows the chain from `p` for `count` loads; returns where it ended.
///
/// # Safety
/// `p` must be an element of a chain whose every element holds the
/// address of another element of it, all mapped.
#[inline(never)]
pub unsafe fn chase(mut p: *const usize, count: u64) -> *const usize {
    for _ in 0..count {
        // SAFETY: every element holds the address of another element of
        // the chain, all inside the region.
        p = unsafe { std::ptr::read_volatile(p) } as *const usize;
    }
    p
}

impl Native for Lat {
    fn name(&self) -> String {
        format!("lat({} chase up to {})", self.pattern.name(), size_text(self.max_size))
    }

    fn bytes(&self) -> u64 {
        self.max_size
    }

    fn run(&self, mem: &mut Region) -> Result<Outcome, String> {
        let mut report = String::new();
        let _ = writeln!(
            report,
            "# memory latency, lat_mem_rd style: {} chase, {} timed dependent loads per size (native, CLOCK_MONOTONIC)",
            self.pattern.name(),
            self.loads
        );
        let (mut timer, mut figure) = (Timer::default(), None);
        let bytes = mem.bytes();
        let base = bytes.as_mut_ptr();
        for &stride in &self.strides {
            let _ = writeln!(report, "\"stride={stride}");
            for size in self.sizes() {
                let n = (size / stride) as usize;
                if n == 0 {
                    continue;
                }
                let next = chain(n, self.pattern, 0x5EED ^ n as u64);
                let at = |e: usize| e * stride as usize;
                for (e, &f) in next.iter().enumerate() {
                    // SAFETY: n x stride <= size <= the region's length;
                    // the offset is 8-aligned (stride is a multiple of 8).
                    unsafe { base.add(at(e)).cast::<usize>().write(base.add(at(f)) as usize) };
                }
                drop(next);
                let start = base as *const usize;
                // Warm up over the chain (at most as many loads as timed).
                // SAFETY: `start` is the chain just linked over the region.
                let p = unsafe { chase(start, (n as u64).min(self.loads)) };
                timer.start();
                // SAFETY: `p` is an element of the same chain.
                let p = unsafe { chase(p, self.loads) };
                let t = timer.stop();
                black_box(p);
                let ns = t / self.loads as f64 * 1e9;
                let _ = writeln!(report, "{:.5} {:.3}", size as f64 / (1u64 << 20) as f64, ns);
                if size == self.max_size && figure.is_none() {
                    figure = Some((stride, ns));
                }
            }
            report.push('\n');
        }
        let (stride, ns) = figure.ok_or("no size of the sweep holds an element")?;
        let name = format!("ns/load at {}, stride {stride}", size_text(self.max_size));
        Ok(Outcome { seconds: timer.wall, cpu_seconds: timer.cpu, figures: vec![Figure::new(&name, ns, "ns", false)], report })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_is_one_cycle() {
        for pat in [Pattern::Seq, Pattern::Random] {
            for n in [1usize, 2, 7, 1000] {
                let next = chain(n, pat, 3);
                let (mut e, mut steps) = (0, 0);
                loop {
                    e = next[e];
                    steps += 1;
                    if e == 0 {
                        break;
                    }
                }
                assert_eq!(steps, n, "{pat:?} n {n}");
            }
        }
    }

    #[test]
    fn sweep_steps_four_times_an_octave_to_the_largest() {
        let l = Lat::new(40 << 10, vec![64], Pattern::Seq, 1000).unwrap();
        let b: Vec<u64> = l.sizes().iter().map(|s| s >> 9).collect();
        // In 512-byte units: 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40 KB.
        assert_eq!(b, vec![8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80]);
        // The largest is always the last, once, even off the steps.
        let l = Lat::new(33 << 10, vec![64], Pattern::Seq, 1000).unwrap();
        assert_eq!(l.sizes().last(), Some(&(33 << 10)));
        assert_eq!(l.sizes().iter().filter(|&&s| s == 33 << 10).count(), 1);
    }
}
