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

impl Default for Sampler {
    fn default() -> Sampler {
        Sampler::new()
    }
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
        if let Some(bytes) = status_bytes("VmRSS:") {
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

/// Peak resident memory of this process so far (VmHWM), in bytes, where
/// the host reports it (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// A size line of /proc/self/status (`VmRSS:`, `VmHWM:`), in bytes.
pub fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
