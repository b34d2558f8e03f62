//! `splab`: run workloads on a simulated machine with FreeBSD-style
//! transparent, reservation-based superpages, compare superpages off and
//! on, read the system's sysctls, check the system against a reference
//! model, benchmark the simulator, run the workloads natively on this host
//! in chosen page sizes, and calibrate a machine profile for this host.
//!
//! This file holds the command-line definitions and the one place that
//! turns a command's result into an exit status: 0 success, 1 a failed run
//! (or a check that found problems), 2 bad input.

mod bench;
mod calibrate;
mod check;
mod csv_out;
mod doc;
mod error;
mod formats;
mod native;
mod online;
mod output;
mod program;
mod plot;
mod progress;
mod report;
mod reproduce;
mod rss;
mod run;
mod setup;
mod trace;
mod validate;
mod validate_program;
mod workload;

use clap::{Parser, Subcommand};
use splab_hw::size;
use error::Fail;
use formats::Formats;
use setup::{MachineArgs, OnOff};

#[derive(Parser)]
#[command(name = "splab", version = output::VERSION, about = "Simulator of transparent, reservation-based superpages")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a workload once and report it, with every sysctl.
    Sim {
        #[command(flatten)]
        run: run::RunArgs,
        #[arg(long, value_enum, value_name = "on|off", default_value = "on", help = setup::superpages_help())]
        superpages: OnOff,
        #[command(flatten)]
        out: Formats,
    },
    /// Run a workload with superpages off, then on, and compare: the
    /// workload's figure, times, TLB misses and walks, and the sysctls
    /// that say what happened.
    Compare {
        #[command(flatten)]
        run: run::RunArgs,
        /// Show every sysctl, also those 0 in both runs and the settings
        /// alike in both.
        #[arg(long)]
        all: bool,
        /// Compare superpage policies instead of superpages off and on: one
        /// run each, e.g. freebsd,shimizu,linux-thp:always,linux-thp:madvise.
        /// --sysctl settings apply to every run; POLICY/NAME=VALUE to that
        /// run alone, e.g. linux-thp:madvise/khugepaged.scan_sleep_millisecs=100.
        #[arg(long, value_name = "POLICY,...")]
        policies: Option<String>,
        #[command(flatten)]
        out: Formats,
    },
    /// Print the sysctls of a freshly booted system.
    Sysctl {
        /// Names to print (default: all).
        names: Vec<String>,
        #[command(flatten)]
        machine: MachineArgs,
        /// Modelled physical memory [default: 8G, or 4G on armv7].
        #[arg(long, value_name = "SIZE")]
        memory: Option<String>,
        /// Set a pmap or policy tunable at boot, e.g. vm.pmap.lp_enabled=1
        /// (repeatable).
        #[arg(long = "sysctl", value_name = "NAME=VALUE", value_parser = setup::tunable)]
        tunables: Vec<(String, String)>,
        #[arg(long, value_enum, value_name = "on|off", default_value = "on", help = setup::superpages_help())]
        superpages: OnOff,
        #[arg(long, value_name = "POLICY", default_value = "freebsd", help = setup::policy_help())]
        policy: String,
        /// Also print each one's description (as `sysctl -d` gives it).
        #[arg(short = 'd', long)]
        describe: bool,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
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
    /// One part of `splab bench`, run in its own process (internal).
    #[command(hide = true)]
    BenchPart(bench::PartArgs),
}

#[allow(clippy::too_many_arguments)]
fn sysctl_cmd(names: &[String], m: &MachineArgs, memory: Option<&str>, sp: OnOff, policy: &str, tunables: &[(String, String)], describe: bool, as_json: bool) -> Result<i32, Fail> {
    let mut s = run::fresh_sysctls(m, memory, sp.on(), policy, tunables)?;
    if !names.is_empty() {
        if let Some(bad) = names.iter().find(|n| !s.values.contains_key(*n)) {
            return Err(Fail::Input(format!("unknown sysctl {bad:?}")));
        }
        s.values.retain(|k, _| names.contains(k));
    }
    output::emit(&if as_json { output::sysctls_json(&s, describe) } else { output::sysctls(&s, describe) });
    Ok(0)
}

/// A program run online passes its exit status on (said on stderr too).
fn program_status(p: Option<&serde_json::Value>) -> i32 {
    match online::exit_status(p) {
        Some(s) => {
            eprintln!("splab: the program exited with status {s}");
            s
        }
        None => 0,
    }
}

fn dispatch(cmd: Cmd) -> Result<i32, Fail> {
    match cmd {
        Cmd::Sim { run, superpages, out } => {
            out.check()?;
            let r = run::simulate(&run, superpages.on(), out.machine_readable())?;
            out.emit(&r, output::sim)?;
            Ok(program_status(r.program.as_ref()))
        }
        Cmd::Compare { run, all, policies: Some(list), out } => {
            if out.csv || out.plot.is_some() {
                return Err(Fail::Input("--policies: the table is printed as text or --json; --csv and --plot are for off/on comparisons".into()));
            }
            let list = run::policy_list(&list).map_err(Fail::Input)?;
            let c = run::compare_policies(&run, &list.0, out.machine_readable())?;
            out.emit(&c, |c| output::policies(c, all))?;
            Ok(0)
        }
        Cmd::Compare { run, all, policies: None, out } => {
            out.check()?;
            let c = run::compare(&run, out.machine_readable())?;
            out.emit(&c, |c| output::compare(c, all))?;
            Ok(program_status(c.on.program.as_ref()))
        }
        Cmd::Sysctl { names, machine, memory, superpages, tunables, policy, describe, json } => {
            sysctl_cmd(&names, &machine, memory.as_deref(), superpages, &policy, &tunables, describe, json)
        }
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

fn main() {
    // What a killed splab left changed (THP mode, mTHP sizes, hugetlb
    // pools) is put back before anything else.
    for m in splab_native::sysstate::recover() {
        eprintln!("splab: {m}");
    }
    let cli = Cli::parse();
    let status = match dispatch(cli.cmd) {
        Ok(s) => s,
        Err(f) => {
            eprintln!("splab: {}", f.message());
            f.status()
        }
    };
    std::process::exit(status);
}
