//! What the simulated and the native halves of splab both define a
//! workload by, written once: the registry of workloads with their
//! parameters (`workload`), the figure a run reports (`Figure`), and the
//! pieces both halves must draw alike so that a native run and its
//! simulation do the same work: HPCC's random stream (`gups`), lat's
//! sweep and chains (`lat`), the pgbench database's layout (`index`),
//! the slab allocator's schedule (`sparse`) and the page layouts
//! (`pages`).
//!
//! This crate knows neither the simulator nor the host: `splab-workloads`
//! builds simulated workloads from it, `splab-native` native ones.

pub mod gups;
pub mod index;
pub mod lat;
pub mod pages;
pub mod sparse;
pub mod workload;

pub use workload::{WorkloadKind, WorkloadParams};

use serde::{Deserialize, Serialize};

/// A workload's own result, e.g. GUP/s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub higher_is_better: bool,
}

impl Figure {
    pub fn new(name: &str, value: f64, unit: &str, higher_is_better: bool) -> Figure {
        Figure { name: name.into(), value, unit: unit.into(), higher_is_better }
    }
}

/// A size as lmbench's options take it: `64k`, `256m`, `4g`, or bytes.
pub fn size_text(bytes: u64) -> String {
    for (unit, shift) in [("g", 30), ("m", 20), ("k", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}
