//! The simulator's own resident memory over a run, read from the host
//! (`VmRSS`) as the run reports progress: how much host memory a run of
//! that size needs, and when it needs it. At most `MAX` readings are kept;
//! when they fill, every other one goes and the interval doubles, so a
//! long run is covered end to end at a coarser step.

use serde::Serialize;
use std::time::Instant;

/// One reading.
#[derive(Clone, Debug, Serialize)]
pub struct RssSample {
    /// Host seconds since the workload started.
    pub host_seconds: f64,
    /// Simulated memory references done by then.
    pub refs: u64,
    pub bytes: u64,
}

const MAX: usize = 512;

pub struct Sampler {
    start: Instant,
    every: f64,
    next: f64,
    pub samples: Vec<RssSample>,
}

impl Sampler {
    pub fn new() -> Sampler {
        let mut s = Sampler { start: Instant::now(), every: 0.1, next: 0.0, samples: Vec::new() };
        s.take(0);
        s
    }

    /// Takes a reading if the interval has passed.
    pub fn tick(&mut self, refs: u64) {
        if self.start.elapsed().as_secs_f64() >= self.next {
            self.take(refs);
        }
    }

    /// Takes a reading now (the end of the run).
    pub fn take(&mut self, refs: u64) {
        let t = self.start.elapsed().as_secs_f64();
        if let Some(bytes) = crate::setup::status_bytes("VmRSS:") {
            self.samples.push(RssSample { host_seconds: t, refs, bytes });
        }
        self.next = t + self.every;
        if self.samples.len() >= MAX {
            let kept: Vec<RssSample> = self.samples.iter().step_by(2).cloned().collect();
            self.samples = kept;
            self.every *= 2.0;
        }
    }
}
