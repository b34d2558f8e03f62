//! Native runs: the workloads splab simulates, run for real on this host
//! with their memory laid out in page sizes chosen per run, so that the
//! simulator's predictions can be set beside what the machine really does.
//!
//! - `pages` (from `splab_defs`, shared with the simulated side): the
//!   layouts (`--pages 4k|thp|collapse|hugetlb-2m|hugetlb-1g|mix:F`) and
//!   which chunks a mix makes huge;
//! - `region`: mapping, advising, touching and collapsing memory for a
//!   layout;
//! - `smaps`: reading back the layout really obtained;
//! - `hugetlb`: the hugetlb pool, grown for a run and always put back;
//! - `gups`, `lat`, `transpose`, `stream`, `index`: the workloads, each
//!   reporting in the shape of its simulated twin;
//! - `misses`: independent random misses under several loop shapes, which
//!   has no twin: it shows how a loop's own instructions cut the overlap
//!   of its misses (what `Overlap::window` in the profile models);
//! - `suite`: repeats interleaved across layouts, medians and spreads;
//! - `program`: any unmodified program (and its children) run in a page
//!   layout: 4 KB pages, THP, multi-size THP, promotion when populated,
//!   hugetlb through glibc's malloc; `programs` repeats it across layouts;
//! - `promote`: the monitor that promotes a program's fully populated
//!   2 MB ranges live (FreeBSD's policy, through MADV_COLLAPSE);
//! - `proctree`: a program's processes and their anonymous mappings;
//! - `sysstate`: system settings a run changes (THP mode, mTHP sizes,
//!   hugetlb pools), saved to a state file first and always put back;
//! - `sparse`: a slab allocator's use of memory (a fraction of each 2 MB
//!   region, freed with MADV_DONTNEED), where THP costs memory;
//!
//! The microbenchmarks that measure this host for a machine profile are
//! splab-calibrate's, built on `lat`'s chains, `region` and `suite`.
//!
//! This crate knows nothing of the simulator; it only uses libc and the
//! kernel's interfaces.

pub mod gups;
pub mod hugetlb;
pub mod index;
pub mod lat;
pub mod misses;
pub mod program;
pub mod programs;
pub mod promote;
pub mod proctree;
pub mod region;
pub mod smaps;
pub mod sparse;
pub mod stream;
pub mod suite;
pub mod sysstate;
pub mod transpose;

use region::Region;
use serde::Serialize;

/// The page layouts, defined with the simulated side's (`splab_defs`).
pub use splab_defs::pages;
/// A workload's figure of merit, e.g. GUP/s.
pub use splab_defs::Figure;

/// One timed run of a workload.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// Seconds of the timed part (CLOCK_MONOTONIC).
    pub seconds: f64,
    /// CPU seconds this thread spent in the timed part
    /// (CLOCK_THREAD_CPUTIME_ID): below `seconds` when other work on the
    /// host took the CPU away.
    pub cpu_seconds: f64,
    /// The headline figure first, then any others (STREAM's four kernels).
    pub figures: Vec<Figure>,
    /// The report in the original benchmark's shape.
    pub report: String,
}

/// A workload that runs natively in a region of memory.
pub trait Native {
    /// E.g. `gups(2^27)`.
    fn name(&self) -> String;
    /// Bytes of memory it needs.
    fn bytes(&self) -> u64;
    /// Initialises its data in `mem` (untimed) and runs (timed).
    fn run(&self, mem: &mut Region) -> Result<Outcome, String>;
}

fn clock(id: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill; both clocks used here always exist.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CLOCK_MONOTONIC in seconds.
pub fn now() -> f64 {
    clock(libc::CLOCK_MONOTONIC)
}

/// Wall and CPU time of the timed parts of a run, added up.
#[derive(Default)]
pub struct Timer {
    pub wall: f64,
    pub cpu: f64,
    started: Option<(f64, f64)>,
}

impl Timer {
    pub fn start(&mut self) {
        self.started = Some((now(), clock(libc::CLOCK_THREAD_CPUTIME_ID)));
    }

    /// Ends a timed part; returns its wall seconds.
    pub fn stop(&mut self) -> f64 {
        let (w, c) = self.started.take().unwrap_or((now(), clock(libc::CLOCK_THREAD_CPUTIME_ID)));
        let wall = now() - w;
        self.wall += wall;
        self.cpu += clock(libc::CLOCK_THREAD_CPUTIME_ID) - c;
        wall
    }
}

/// The simulator's generator (SplitMix64): the same sequence on every host
/// and in the model, so a native run and its simulation draw alike.
pub use splab_hw::rng::Rng;

/// A size as lmbench's options take it (`64k`, `256m`).
pub use splab_defs::size_text;
