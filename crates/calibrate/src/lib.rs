//! Calibration and validation: this host measured with microbenchmarks
//! into the inputs a machine profile needs, and the model's predictions on
//! such a profile set beside native runs.
//!
//! - `measure`: the plan and the run of every probe, and what it measured
//!   and inferred (`Calibration`);
//! - `probe`: the microbenchmarks (pointer chases, dependent additions,
//!   page zeroing and copying, faults, system calls, streams);
//! - `infer`: cache levels, TLB steps, overlap and the host's page size
//!   read off the measured curves;
//! - `cpu`: what CPUID and the system say (caches, TLBs, clock, hypervisor);
//! - `reference`: the quick memory probes validation runs again, to see how
//!   far the host's memory moved since;
//! - `fit`: the second-level TLB fitted with the model's own TLB;
//! - `figures`: what both the profile and the report read off a
//!   calibration;
//! - `profile`: the machine profile written from a calibration, every value
//!   with where it came from;
//! - `notes`: comments attached to a TOML document serde writes;
//! - `report`: the text report of a calibration;
//! - `upgrade`: a profile an older calibrate wrote, made one this splab
//!   loads;
//! - `validate`: the workloads run natively and in the model in the same
//!   page layouts, paired and scored (the front end runs them);
//! - `program`: any program run natively in each page layout and online in
//!   the model, superpages off and on (the front end runs the model).
//!
//! This crate sits between the native runs (splab-native, whose regions,
//! chains and suites it uses) and the command line, which only parses
//! options, shows progress and prints.

pub mod cpu;
pub mod figures;
pub mod fit;
pub mod infer;
pub mod measure;
pub mod notes;
pub mod probe;
pub mod profile;
pub mod program;
pub mod reference;
pub mod report;
pub mod upgrade;
pub mod validate;
