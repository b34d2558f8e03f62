//! Memory latency by pointer chasing, in the manner of lmbench's
//! lat_mem_rd: an array is laid out as a chain of pointers, one every
//! `stride` bytes, and the time of a dependent load (each address comes
//! from the previous load) is measured for a sweep of array sizes. As
//! lat_mem_rd does, the array of the largest size is allocated once, each
//! size uses its first bytes, the chain is written before it is timed, and
//! the output is a `"stride=N` line followed by `size_MB ns` lines.
//!
//! Orders: `seq` links each element to the next one up (wrapping), the
//! order hardware prefetchers follow; `random` links them in one cycle
//! through a pseudo-random permutation, so that consecutive loads land on
//! unrelated lines and pages (lat_mem_rd's `-t`).
//!
//! The chain's pointers are written to modelled memory and followed from
//! it when the system keeps contents; otherwise the host computes the next
//! address (the timing model does not depend on values) and the chain is
//! written with the same stores, so the caches and page tables see the
//! same thing either way.

use crate::common::{exit, fault, map, size_text, spawn_on, Batch};
use crate::layout::{Layout, LayoutObtained, Region};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::{Op, System};
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::fmt::Write as _;

/// The chase order, shared with the native runs.
pub use splab_defs::lat::Pattern;

pub struct Lat {
    pub max_size: u64,
    pub strides: Vec<u64>,
    pub pattern: Pattern,
    /// Timed loads per size (after a warm-up of up to as many).
    pub loads: u64,
    pub cpu: usize,
    /// `--pages`: the data in one region laid out as asked.
    pub pages: Layout,
}

/// Smallest size of the sweep.
pub const MIN_SIZE: u64 = 4096;

impl Lat {
    /// Checks a largest size (the error does not name the option).
    pub fn check_max_size(max_size: u64) -> Result<(), String> {
        if max_size < MIN_SIZE {
            return Err(format!("below the sweep's smallest size ({MIN_SIZE} bytes)"));
        }
        Ok(())
    }

    pub fn new(max_size: u64, strides: Vec<u64>, pattern: Pattern, loads: u64) -> Result<Lat, String> {
        Self::check_max_size(max_size).map_err(|e| format!("--max-size {max_size} bytes: {e}"))?;
        if strides.is_empty() {
            return Err("--stride: give at least one stride".into());
        }
        for &s in &strides {
            if s < 8 || !s.is_multiple_of(8) || s > max_size {
                return Err(format!("--stride {s} must be a multiple of 8 bytes, at least 8 and at most --max-size"));
            }
        }
        if !(100..=100_000_000).contains(&loads) {
            return Err(format!("--loads {loads} is out of range (100 to 100000000)"));
        }
        Ok(Lat { max_size, strides, pattern, loads, cpu: 0, pages: Layout::default() })
    }

    /// The sweep: four sizes per doubling (x1, x1.25, x1.5, x1.75) from
    /// 4 KB, as lat_mem_rd steps through sizes, up to and including the
    /// largest.
    pub fn sizes(&self) -> Vec<u64> {
        splab_defs::lat::sweep(self.max_size)
    }
}

/// A pseudo-random permutation of [0, n): a four-round Feistel network on
/// the smallest even number of bits that covers n, walked until the value
/// falls inside [0, n) (cycle walking keeps it a permutation of [0, n)).
/// Needs no table, so a chain of billions of elements costs no host memory.
pub struct Perm {
    n: u64,
    half: u32,
    keys: [u64; 4],
}

impl Perm {
    pub fn new(n: u64, seed: u64) -> Perm {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let half = bits.div_ceil(2);
        let mut r = crate::common::Rng::new(seed);
        Perm { n, half, keys: [r.next_u64(), r.next_u64(), r.next_u64(), r.next_u64()] }
    }

    fn round(&self, x: u64, k: u64) -> u64 {
        let mut z = (x ^ k).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z ^= z >> 29;
        z = z.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        (z ^ (z >> 32)) & ((1 << self.half) - 1)
    }

    fn once(&self, x: u64) -> u64 {
        let m = (1u64 << self.half) - 1;
        let (mut l, mut r) = (x >> self.half, x & m);
        for &k in &self.keys {
            (l, r) = (r, l ^ self.round(r, k));
        }
        (l << self.half) | r
    }

    fn once_inv(&self, x: u64) -> u64 {
        let m = (1u64 << self.half) - 1;
        let (mut l, mut r) = (x >> self.half, x & m);
        for &k in self.keys.iter().rev() {
            (l, r) = (r ^ self.round(l, k), l);
        }
        (l << self.half) | r
    }

    pub fn apply(&self, x: u64) -> u64 {
        let mut y = self.once(x);
        while y >= self.n {
            y = self.once(y);
        }
        y
    }

    pub fn invert(&self, y: u64) -> u64 {
        let mut x = self.once_inv(y);
        while x >= self.n {
            x = self.once_inv(x);
        }
        x
    }
}

/// The chain over n elements: which element comes i-th, and which follows
/// a given element.
struct Chain {
    n: u64,
    perm: Option<Perm>,
}

impl Chain {
    fn new(n: u64, pattern: Pattern) -> Chain {
        Chain { n, perm: (pattern == Pattern::Random).then(|| Perm::new(n, 0x5EED ^ n)) }
    }
    fn at(&self, i: u64) -> u64 {
        let i = i % self.n;
        match &self.perm {
            None => i,
            Some(p) => p.apply(i),
        }
    }
    fn after(&self, e: u64) -> u64 {
        match &self.perm {
            None => (e + 1) % self.n,
            Some(p) => p.apply((p.invert(e) + 1) % self.n),
        }
    }
}

impl Workload for Lat {
    fn name(&self) -> String {
        format!("lat({} chase up to {})", self.pattern.name(), size_text(self.max_size))
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        let sizes = self.sizes();
        self.strides
            .iter()
            .map(|&st| sizes.iter().map(|&s| (s / st) + (s / st).min(self.loads) + self.loads).sum::<u64>())
            .sum()
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let cpu = self.cpu;
        let pid = spawn_on(sys, cpu)?;
        let region = match self.pages.asked {
            Some(l) => Some(Region::map(sys, pid, cpu, self.max_size, false, l, "the pointer-chase array")?),
            None => None,
        };
        let base = match region {
            Some(r) => r.va,
            None => map(sys, pid, MmapReq::anon(self.max_size, prot::RW), "the pointer-chase array")?,
        };
        let tracking = sys.mem().tracks_data();
        let err = fault("pointer chase");
        let freq = sys.cfg.profile.freq_ghz;
        let mut report = String::new();
        let _ = writeln!(
            report,
            "# memory latency, lat_mem_rd style: {} chase, {} timed dependent loads per size (simulated, {})",
            self.pattern.name(),
            self.loads,
            if tracking { "pointers read from modelled memory" } else { "pointers computed on the host" }
        );
        let mut refs = 0u64;
        let mut timed_cycles = 0.0;
        let mut figure = None;
        for &stride in &self.strides {
            let _ = writeln!(report, "\"stride={stride}");
            for size in self.sizes() {
                let n = size / stride;
                if n == 0 {
                    continue;
                }
                let chain = Chain::new(n, self.pattern);
                let addr = |e: u64| base + e * stride;
                // Write the chain in array order, as the benchmark does.
                let mut b = Batch::new(cpu);
                for e in 0..n {
                    let next = if tracking { addr(chain.after(e)) } else { 0 };
                    b.store(sys, addr(e), next).map_err(&err)?;
                }
                b.flush(sys).map_err(&err)?;
                refs += n;
                // Warm up over (part of) the chain, then time as many loads.
                let warm = n.min(self.loads);
                let mut i = 0u64;
                let chase = |sys: &mut System, count: u64, i: &mut u64| -> Result<(), String> {
                    let mut va = addr(chain.at(*i));
                    for _ in 0..count {
                        let v = sys.access(cpu, va, Op::Load, true).map_err(&err)?;
                        *i += 1;
                        let want = addr(chain.at(*i));
                        if tracking && v != want {
                            return Err(format!("pointer chase: {va:#x} holds {v:#x}, the chain says {want:#x}"));
                        }
                        va = if tracking { v } else { want };
                    }
                    Ok(())
                };
                chase(sys, warm, &mut i)?;
                let t0 = sys.cycles(cpu);
                chase(sys, self.loads, &mut i)?;
                let cyc = sys.cycles(cpu) - t0;
                timed_cycles += cyc;
                refs += warm + self.loads;
                let ns = cyc / self.loads as f64 / freq;
                let _ = writeln!(report, "{:.5} {:.3}", size as f64 / (1u64 << 20) as f64, ns);
                if size == self.max_size && figure.is_none() {
                    figure = Some((stride, ns));
                }
                progress(refs);
            }
            report.push('\n');
        }
        self.pages.obtained = region.map(|r| r.obtained(sys, pid));
        exit(sys, pid)?;
        let (stride, ns) = figure.ok_or("no size of the sweep holds an element")?;
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure {
                name: format!("ns/load at {}, stride {stride}", size_text(self.max_size)),
                value: ns,
                unit: "ns".into(),
                higher_is_better: false,
            },
            report,
            timed_seconds: sys.cycles_to_seconds(timed_cycles),
        })
    }
    fn layout(&self) -> Option<&LayoutObtained> {
        self.pages.obtained.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perm_is_a_permutation_and_inverts() {
        for n in [1u64, 2, 3, 7, 64, 1000, 4097] {
            let p = Perm::new(n, 42);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let y = p.apply(i);
                assert!(y < n);
                assert!(!seen[y as usize], "n {n}: {y} twice");
                seen[y as usize] = true;
                assert_eq!(p.invert(y), i);
            }
        }
    }

    #[test]
    fn chain_is_one_cycle() {
        for pat in [Pattern::Seq, Pattern::Random] {
            let c = Chain::new(1000, pat);
            let mut e = c.at(0);
            for i in 1..=1000 {
                e = c.after(e);
                assert_eq!(e, c.at(i));
            }
            assert_eq!(e, c.at(0));
        }
    }

    #[test]
    fn sweep_steps_by_quarter_octaves() {
        let l = Lat::new(64 << 10, vec![64], Pattern::Seq, 1000).unwrap();
        let kb: Vec<u64> = l.sizes().iter().map(|s| s >> 10).collect();
        assert_eq!(kb, vec![4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64]);
        let l = Lat::new(100 << 10, vec![64], Pattern::Seq, 1000).unwrap();
        assert_eq!(l.sizes().last(), Some(&(100 << 10)));
    }
}
