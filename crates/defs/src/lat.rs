//! lmbench lat_mem_rd's chase, as the native and the simulated `lat` both
//! lay it out: the sweep of array sizes and the order of the chain.

use splab_hw::rng::Rng;

/// Smallest size of the sweep.
pub const MIN_SIZE: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    Seq,
    Random,
}

impl Pattern {
    pub fn parse(s: &str) -> Result<Pattern, String> {
        match s {
            "seq" => Ok(Pattern::Seq),
            "random" => Ok(Pattern::Random),
            _ => Err(format!("--pattern {s:?}: expected random or seq")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Random => "random",
        }
    }
}

/// The array sizes of a sweep up to `max_size`, as lmbench's lat_mem_rd
/// steps them: from 4 KB, four steps an octave (p, 1.25p, 1.5p, 1.75p),
/// then `max_size` itself. The simulated lat sweeps the same sizes, so
/// that native and simulated runs time the same work.
pub fn sweep(max_size: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut p = MIN_SIZE;
    'outer: loop {
        for q in 0..4 {
            let s = p + p / 4 * q;
            if s > max_size {
                break 'outer;
            }
            v.push(s);
        }
        p *= 2;
    }
    if v.last() != Some(&max_size) {
        v.push(max_size);
    }
    v
}

/// The successor of each of `n` elements: one cycle through all of them.
pub fn chain(n: usize, pattern: Pattern, seed: u64) -> Vec<usize> {
    match pattern {
        Pattern::Seq => (0..n).map(|e| (e + 1) % n).collect(),
        Pattern::Random => {
            // Sattolo's algorithm: a uniformly random single cycle.
            let mut order: Vec<usize> = (0..n).collect();
            let mut r = Rng::new(seed);
            for i in (1..n).rev() {
                let j = r.below(i as u64) as usize;
                order.swap(i, j);
            }
            let mut next = vec![0; n];
            for k in 0..n {
                next[order[k]] = order[(k + 1) % n];
            }
            next
        }
    }
}
