//! splab: run workloads on a simulated machine with FreeBSD-style
//! transparent, reservation-based superpages, compare superpages off and
//! on, read the system's sysctls, check the system against a reference
//! model, benchmark the simulator, run the workloads natively on this host
//! in chosen page sizes, calibrate a machine profile for this host, run
//! sweeps of many runs into a run store.
//!
//! As a library (the `splab` command is `cli::main`; the Python package
//! is built on it): a run is a `spec::RunSpec`, run by
//! `simulate::simulate`; a sweep is `sweep::Sweep`, run by `sweep::run`
//! into a `store::Store`.
//!
//! The modules in the order they build on each other (none imports one
//! after it): `error`, `progress`, `output`, `rss`; `spec` (what a run
//! is), `setup` (a spec into a system), `workload` (a spec's workload
//! built), `simulate` (runs and their records), `text` (their reports);
//! `doc`, `csv_out`, `plot`, `formats` (documents read back, CSV, plots,
//! the output formats); `store` (the run store), `workers` and `ray` (where
//! a sweep's runs happen), `sweep` (many runs); then one module per command: `sim` (sim, compare, sysctl),
//! `check`, `bench`, `program` and `native`, `calibrate`,
//! `validate_program` and `validate`, `published` (the seeds' figures)
//! and `reproduce`, `trace`, `runs`,
//! `report`; `cli` last.

pub mod error;
pub mod output;
pub mod progress;
pub mod rss;

pub mod setup;
pub mod simulate;
pub mod spec;
pub mod text;
pub mod workload;

pub mod csv_out;
pub mod doc;
pub mod formats;
pub mod plot;

pub mod ray;
pub mod store;
pub mod sweep;
pub mod workers;

pub mod bench;
pub mod calibrate;
pub mod check;
pub mod native;
pub mod program;
pub mod published;
pub mod realprog;
pub mod report;
pub mod reproduce;
pub mod runs;
pub mod sim;
pub mod trace;
pub mod validate;
pub mod validate_program;

pub mod cli;

pub use error::Fail;
pub use spec::RunSpec;
