//! Workloads: programs that run on the simulated system through its
//! process interface (mmap, loads, stores), and report their own figure of
//! merit the way the original benchmark does.
//!
//! One module per benchmark: `gups` and `gups_mp` (HPCC RandomAccess, one
//! and many processes), `lat` and `bw` (lmbench's lat_mem_rd, bw_mem and
//! bw_mmap_rd), `transpose`, `stream`, `index` (pgbench select-only),
//! `build` (make -j), `forkbomb` (a process tree grown by fork to a
//! limit), `stress` (stress --vm), `realloc`, `sparse` (a
//! slab allocator's partly used 2 MB slabs, the native `sparse`'s twin),
//! `arenas` (a many-threaded allocator with an arena per thread) and
//! `requests` (a key-value server's request loop timing each request). What they
//! share: `common` (processes, mappings, batched accesses), `kernels`
//! (the instruction streams of their loops, for the core model), `sched` (several
//! processes on several CPUs, interleaved deterministically) and `script`
//! (processes described as lists of actions, and a forking parent).

pub mod arenas;
pub mod build;
pub mod bw;
pub mod common;
pub mod forkbomb;
pub mod gups;
pub mod gups_mp;
pub mod index;
pub mod kernels;
pub mod lat;
pub mod layout;
pub mod realloc;
pub mod requests;
pub mod sched;
pub mod script;
pub mod sparse;
pub mod stream;
pub mod stress;
pub mod transpose;

use serde::Serialize;
use splab_sim::System;

/// A workload's own result, e.g. GUP/s (defined with the native side's).
pub use splab_defs::Figure;

#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResult {
    pub figure: Figure,
    /// The report in the original benchmark's shape.
    pub report: String,
    /// Simulated seconds of the timed part.
    pub timed_seconds: f64,
    /// The parts of the figure the workload reports separately (each
    /// transpose size and variant, a request loop's percentiles), for
    /// tables that set runs side by side.
    pub details: Vec<Figure>,
}

pub trait Workload {
    fn name(&self) -> String;
    /// Memory references the run will make, for progress reporting, on
    /// a machine whose caches have `line`-byte lines (a loop over every
    /// line of a range steps `common::step_of(line)`).
    fn estimated_refs(&self, line: u64) -> u64;
    /// Runs to completion; `progress` is called now and then with the
    /// number of references made so far.
    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String>;
    /// Whether the last `run` failed because its input (a trace file) is
    /// malformed, not because the run went wrong; the front end exits 2
    /// for such errors, as for any bad input.
    fn failed_on_input(&self) -> bool {
        false
    }
    /// The page-size layout the last `run` got, for the workloads that
    /// take `--pages` (`layout`).
    fn layout(&self) -> Option<&layout::LayoutObtained> {
        None
    }
    /// What the last `run` found beyond the system's counters, for the
    /// JSON output (a real program run online: its exit status,
    /// instructions, processes, sampled estimates).
    fn program_details(&self) -> Option<serde_json::Value> {
        None
    }
}
