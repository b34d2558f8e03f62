//! `splab`: run workloads on a simulated machine with FreeBSD-style
//! transparent, reservation-based superpages, compare superpages off and
//! on, read the system's sysctls, check the system against a reference
//! model, benchmark the simulator, run the workloads natively on this host
//! in chosen page sizes, and calibrate a machine profile for this host.
//!
//! This file holds the commands and the one place that turns a command's
//! result into an exit status: 0 success, 1 a failed run (or a check that
//! found problems), 2 bad input. Each command's options are its own
//! module's.

use crate::error::Fail;
use crate::formats::Formats;
use crate::{bench, calibrate, check, native, output, program, report, reproduce, runs, sim, sweep, trace, validate};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "splab", version = output::VERSION, about = "Simulator of transparent, reservation-based superpages")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Run a workload once and report it, with every sysctl.
    Sim(sim::SimArgs),
    /// Run a workload with superpages off, then on, and compare: the
    /// workload's figure, times, TLB misses and walks, and the sysctls
    /// that say what happened.
    Compare(sim::CompareArgs),
    /// Print the sysctls of a freshly booted system.
    Sysctl(sim::SysctlArgs),
    /// Run random operations against a reference model and report problems.
    Check {
        #[command(flatten)]
        args: check::CheckArgs,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure simulated references per second and host memory use.
    Bench {
        #[command(flatten)]
        args: bench::BenchArgs,
        #[command(flatten)]
        out: Formats,
    },
    /// Run a workload, or any program after `--`, for real on this host in
    /// chosen page layouts (4 KB, THP, MADV_COLLAPSE, promotion when
    /// populated, multi-size THP, hugetlb 2 MB/1 GB, mixes), and report the
    /// layout really obtained, times, memory and the speedup over 4 KB.
    Native {
        #[command(flatten)]
        args: native::NativeArgs,
        #[command(flatten)]
        out: Formats,
    },
    /// Run a program (and every process it starts) under the promotion
    /// monitor: each 2 MB range of its anonymous memory is collapsed into a
    /// huge page once all 512 of its pages are present (FreeBSD's policy),
    /// nothing earlier. The counters go to stderr; the exit status is the
    /// program's.
    Promote {
        #[command(flatten)]
        args: program::PromoteArgs,
        /// Print the report as one JSON document (on stderr) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure this host with microbenchmarks (latencies, TLBs, overlap,
    /// kernel event costs, hypervisor) and write a machine profile.
    Calibrate {
        #[command(flatten)]
        args: calibrate::CalibrateArgs,
        /// Print one JSON document (the measurements and the profile)
        /// instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Set the model's predictions beside this host: each workload run
    /// natively and simulated in the same page layouts (4 KB, 2 MB, mixes),
    /// measured and predicted times and speedups over 4 KB, and the errors.
    Validate {
        #[command(flatten)]
        args: validate::ValidateArgs,
        #[command(flatten)]
        out: Formats,
    },
    /// Record, convert and describe memory-reference traces (replay one
    /// with `splab sim trace:FILE`).
    Trace {
        #[command(subcommand)]
        cmd: trace::TraceCmd,
    },
    /// Run the published superpage experiments, each on the profile of the
    /// machine it was measured on, superpages off and on: the figures in
    /// each original tool's units, their change and the promotion counters.
    Reproduce(reproduce::ReproduceArgs),
    /// Write one self-contained HTML page with the plots and tables of
    /// the --json documents of sim, compare, native, validate and bench.
    Report(report::ReportArgs),
    /// Run every point of a sweep (a base spec and axes over its fields,
    /// in a TOML file) in parallel, here or on a Ray cluster, into the run
    /// store; points already in the store with this build are not run
    /// again.
    Sweep(sweep::SweepArgs),
    /// List and export the runs in the run store.
    Runs(runs::RunsArgs),
    /// One run from a JSON spec on standard input, its JSON document on
    /// standard output (internal: what a sweep runs).
    #[command(hide = true)]
    RunSpec(sweep::RunSpecArgs),
    /// One part of `splab bench`, run in its own process (internal).
    #[command(hide = true)]
    BenchPart(bench::PartArgs),
}

fn dispatch(cmd: Cmd) -> Result<i32, Fail> {
    match cmd {
        Cmd::Sim(a) => sim::sim(&a),
        Cmd::Compare(a) => sim::compare(&a),
        Cmd::Sysctl(a) => sim::sysctl(&a),
        Cmd::Sweep(a) => sweep::cmd(&a),
        Cmd::Runs(a) => runs::cmd(&a),
        Cmd::RunSpec(a) => sweep::run_spec_cmd(&a),
        Cmd::Check { args, json } => check::cmd(&args, json),
        Cmd::Bench { args, out } => bench::cmd(&args, &out),
        Cmd::BenchPart(p) => bench::part(&p),
        Cmd::Trace { cmd } => trace::cmd(cmd),
        Cmd::Native { args, out } => native::cmd(&args, &out),
        Cmd::Promote { args, json } => program::promote_cmd(&args, json),
        Cmd::Calibrate { args, json } => calibrate::cmd(&args, json),
        Cmd::Validate { args, out } => validate::cmd(&args, &out),
        Cmd::Report(args) => report::cmd(&args),
        Cmd::Reproduce(args) => reproduce::cmd(&args),
    }
}

/// Runs the command line `args` (the program's name first) and returns
/// its exit status; clap's own help and usage errors exit here.
pub fn run<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> i32 {
    let args: Vec<std::ffi::OsString> = args.into_iter().collect();
    output::set_command_line(args.iter().skip(1).map(|a| a.to_string_lossy().to_string()).collect());
    // What a killed splab left changed (THP mode, mTHP sizes, hugetlb
    // pools) is put back before anything else.
    for m in splab_native::sysstate::recover() {
        eprintln!("splab: {m}");
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        // A value a parser refused (an unknown workload or policy) is bad
        // input like any other: one line naming it, exit 2.
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("").trim_start_matches("error: ");
            eprintln!("splab: {first}");
            return 2;
        }
        Err(e) => e.exit(),
    };
    match dispatch(cli.cmd) {
        Ok(s) => s,
        Err(f) => {
            eprintln!("splab: {}", f.message());
            f.status()
        }
    }
}

/// The command line of this process: runs it and exits with its status.
pub fn main() {
    std::process::exit(run(std::env::args_os()));
}
