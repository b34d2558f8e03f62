//! `splab reproduce`: the published superpage experiments, each on the
//! profile of the machine it was measured on, with superpages off and on
//! (and, for the Alpha transposes, under FreeBSD's and Shimizu's
//! policies), printed in each original tool's units with the promotion
//! counters. The published results themselves are not here: the
//! comparison with them is kept outside the project, so that nothing in
//! the model can be fitted to it.
//!
//! Each experiment is a `splab compare` command line; where the stated
//! size cannot be simulated in the time the whole list is allowed (half
//! an hour on a 2-core host), the row says what was scaled and why the
//! figure survives it.

use crate::error::Fail;
use crate::output::{self, change};
use crate::simulate::{self, RunOpts};
use crate::spec::RunSpec;
use clap::Args;
use serde::Serialize;
use splab_defs::workload::Side;
use splab_defs::{WorkloadKind, WorkloadParams};
use splab_vm::policy::{PolicyKind, PolicySpec};
use splab_vm::sysctl::SysctlValue;
use splab_workloads::Figure;
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Args, Clone, Debug)]
pub struct ReproduceArgs {
    /// Experiments to run, by name (default: all of them; `--list` names
    /// them).
    pub names: Vec<String>,
    /// List the experiments with their machines, the published parameters
    /// and the commands that run them; run nothing.
    #[arg(long)]
    pub list: bool,
    /// Run each experiment at a tiny size instead, to check that it runs
    /// (its figures say nothing about the machine).
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One published experiment and the `splab compare` run that models it.
#[derive(Clone, Copy, Debug)]
pub struct Experiment {
    pub name: &'static str,
    /// Who measured it, on what, with which tool and parameters.
    pub published: &'static str,
    pub machine: &'static str,
    pub workload: WorkloadKind,
    /// Its parameters, at the experiment's size or, `quick`, at a small
    /// one (a check that the experiment runs, whose figures mean
    /// nothing).
    pub params: fn(quick: bool) -> WorkloadParams,
    pub policy: PolicyKind,
    /// What the workload models of the original and what it leaves out.
    pub models: &'static str,
    /// What was scaled from the published size, and why the figure
    /// survives it; empty when nothing was.
    pub scaled: &'static str,
}

const GUPS_MODELS: &str = "HPCC RandomAccess's update loop (XOR of a random word), the table in one anonymous mapping";
const BW_MODELS: &str = "lmbench bw_mem's loop over the buffer; the instruction work of the copy loops is not timed";
const BUILD_MODELS: &str = "make -jN forking compilers that map text, data, heap and files, then a threaded link; each compile does GCC's measured instructions, but the compiler's real footprint and memory references are not modelled (one compiler model for GCC and clang)";
const TRANSPOSE_MODELS: &str = "the naive double loop B = A^T, strided loads (load) or strided stores (store); MB/s of 2 x 8 x N^2 bytes";

/// An lmbench bw_mem (or bw_mmap_rd) test on the Armada XP: `bw --tests
/// TEST` over 128 MB, 2 MB for `--quick`.
macro_rules! bw {
    ($name:literal, $published:literal, $test:literal, $models:expr) => {
        Experiment {
            name: $name,
            published: $published,
            machine: "armada-xp",
            workload: WorkloadKind::Bw,
            params: |quick| if quick { WorkloadParams { tests: Some(vec![$test.to_string()]), size: Some("2M".into()), ..WorkloadParams::default() } } else { WorkloadParams { tests: Some(vec![$test.to_string()]), size: Some("128M".into()), ..WorkloadParams::default() } },
            policy: PolicyKind::FreeBsd,
            models: $models,
            scaled: "",
        }
    };
}

/// Every experiment of the publications, in the order they are printed.
pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "armada-gups",
        published: "FreeBSD armv7 on Armada XP: GUPS, table 2^27 64-bit words, 2^29 updates",
        machine: "armada-xp",
        workload: WorkloadKind::Gups,
        params: |quick| if quick { WorkloadParams { log2_table: Some(18), updates: Some(4096), ..WorkloadParams::default() } } else { WorkloadParams { log2_table: Some(27), updates: Some(33554432), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: GUPS_MODELS,
        scaled: "2^25 of the 2^29 updates timed (the table is full size): GUP/s is the loop's steady rate",
    },
    Experiment {
        name: "armada-lat",
        published: "FreeBSD armv7 on Armada XP: lmbench lat_mem_rd, random chase, stride 64",
        machine: "armada-xp",
        workload: WorkloadKind::Lat,
        params: |quick| if quick { WorkloadParams { max_size: Some("2M".into()), stride: Some(vec![64]), pattern: Some("random".into()), loads: Some(1000), ..WorkloadParams::default() } } else { WorkloadParams { max_size: Some("256M".into()), stride: Some(vec![64]), pattern: Some("random".into()), loads: Some(20000), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: "lat_mem_rd's dependent pointer chase in one random cycle; figure: ns a load at the largest size",
        scaled: "20000 timed loads a size (lat_mem_rd times more): the figure is a mean latency",
    },
    bw!("armada-bw-rd", "FreeBSD armv7 on Armada XP: lmbench bw_mem rd", "rd", BW_MODELS),
    bw!("armada-bw-wr", "FreeBSD armv7 on Armada XP: lmbench bw_mem wr", "wr", BW_MODELS),
    bw!("armada-bw-bcopy-libc", "FreeBSD armv7 on Armada XP: lmbench bw_mem bcopy (libc)", "bcopy_libc", BW_MODELS),
    bw!("armada-bw-bcopy-hand", "FreeBSD armv7 on Armada XP: lmbench bw_mem bcopy (hand-unrolled)", "bcopy_hand", BW_MODELS),
    bw!("armada-bw-mmap-rd", "FreeBSD armv7 on Armada XP: lmbench bw_mmap_rd (re-read of a mapped file)", "mmap_rd", "bw_mmap_rd: a file in the page cache mapped and read"),
    Experiment {
        name: "armada-buildworld",
        published: "FreeBSD armv7 on Armada XP: self-hosted buildworld, with GCC and with clang",
        machine: "armada-xp",
        workload: WorkloadKind::Build,
        params: |quick| if quick { WorkloadParams { units: Some(4), jobs: Some(2), ..WorkloadParams::default() } } else { WorkloadParams { units: Some(128), jobs: Some(4), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: BUILD_MODELS,
        scaled: "128 compilation units, not a whole world: build time is the run's, not a world's",
    },
    Experiment {
        name: "armada-forkbomb",
        published: "FreeBSD armv7 on Armada XP: forkbomb",
        machine: "armada-xp",
        workload: WorkloadKind::Forkbomb,
        params: |quick| if quick { WorkloadParams { procs: Some(16), fanout: Some(2), touch: Some("16K".into()), inherited: Some("64K".into()), ..WorkloadParams::default() } } else { WorkloadParams { procs: Some(2048), fanout: Some(2), touch: Some("128K".into()), inherited: Some("1M".into()), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: "a process tree grown by fork, two children a process, each writing 128 KB of its own and every fourth page of 1 MB it inherited copy-on-write, then waiting for its children and exiting; figure: the time until the whole tree has exited",
        scaled: "a tree of 2048 processes (a fork bomb forks until fork fails, at the process limit or out of memory): the limit keeps the pair of runs to seconds",
    },
    Experiment {
        name: "armada-stress",
        published: "FreeBSD armv7 on Armada XP: stress",
        machine: "armada-xp",
        workload: WorkloadKind::Stress,
        params: |quick| if quick { WorkloadParams { vm: Some(2), vm_bytes: Some("4M".into()), loops: Some(1), ..WorkloadParams::default() } } else { WorkloadParams { vm: Some(4), vm_bytes: Some("256M".into()), loops: Some(4), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: "stress --vm: workers mapping, writing and freeing memory",
        scaled: "4 rounds a worker (stress runs until stopped): the figure is the completion time of these",
    },
    Experiment {
        name: "power8-randomaccess",
        published: "FreeBSD powerpc64 (HPT) on POWER8: HPCC RandomAccess",
        machine: "power8",
        workload: WorkloadKind::Gups,
        params: |quick| if quick { WorkloadParams { log2_table: Some(21), updates: Some(4096), ..WorkloadParams::default() } } else { WorkloadParams { log2_table: Some(28), updates: Some(33554432), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: GUPS_MODELS,
        scaled: "table 2^28 words (2 GiB; HPCC sizes it from memory), 2^25 of its 2^30 updates timed",
    },
    Experiment {
        name: "power9-randomaccess",
        published: "FreeBSD powerpc64 (HPT) on POWER9 Talos II: HPCC RandomAccess",
        machine: "power9",
        workload: WorkloadKind::Gups,
        params: |quick| if quick { WorkloadParams { log2_table: Some(21), updates: Some(4096), ..WorkloadParams::default() } } else { WorkloadParams { log2_table: Some(28), updates: Some(33554432), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: GUPS_MODELS,
        scaled: "table 2^28 words (2 GiB; HPCC sizes it from memory), 2^25 of its 2^30 updates timed",
    },
    Experiment {
        name: "power8-pgbench",
        published: "FreeBSD powerpc64 (HPT) on POWER8: pgbench -S -T 5, scale 150, 1 client, 1 thread",
        machine: "power8",
        workload: WorkloadKind::Index,
        params: |quick| if quick { WorkloadParams { scale: Some(1), clients: Some(1), transactions: Some(100), ..WorkloadParams::default() } } else { WorkloadParams { scale: Some(150), clients: Some(1), transactions: Some(20000), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: "a select-only transaction: the index lookup's memory references (B-tree descent and heap fetch through shared buffers), the backend's and pgbench's instructions and the round trip's system calls as measured on PostgreSQL 15; the memory references and code fetches of that work are not modelled",
        scaled: "20000 transactions instead of 5 seconds' worth: tps is a steady rate",
    },
    Experiment {
        name: "power9-buildworld",
        published: "FreeBSD powerpc64 (HPT) on POWER9 Talos II (32 threads, 32 GB): buildworld -j32",
        machine: "power9",
        workload: WorkloadKind::Build,
        params: |quick| if quick { WorkloadParams { units: Some(4), jobs: Some(4), ..WorkloadParams::default() } } else { WorkloadParams { units: Some(128), jobs: Some(32), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: BUILD_MODELS,
        scaled: "128 compilation units on the profile's 8 CPUs, not a world on 32 threads",
    },
    Experiment {
        name: "alpha-transpose-freebsd",
        published: "Shimizu's Linux superpages on an Alpha: matrix transpose, load and store variants, N = 3000 to 3300",
        machine: "alpha-21264",
        workload: WorkloadKind::Transpose,
        params: |quick| if quick { WorkloadParams { sizes: Some(vec![300]), ..WorkloadParams::default() } } else { WorkloadParams { sizes: Some(vec![3000,3100,3200,3300]), ..WorkloadParams::default() } },
        policy: PolicyKind::FreeBsd,
        models: TRANSPOSE_MODELS,
        scaled: "four sizes of the range",
    },
    Experiment {
        name: "alpha-transpose-shimizu",
        published: "Shimizu's Linux superpages on an Alpha: matrix transpose, load and store variants, N = 3000 to 3300",
        machine: "alpha-21264",
        workload: WorkloadKind::Transpose,
        params: |quick| if quick { WorkloadParams { sizes: Some(vec![300]), ..WorkloadParams::default() } } else { WorkloadParams { sizes: Some(vec![3000,3100,3200,3300]), ..WorkloadParams::default() } },
        policy: PolicyKind::Shimizu,
        models: TRANSPOSE_MODELS,
        scaled: "four sizes of the range",
    },
];

/// The experiments `names` asks for, in the list's order (all for none).
pub fn select(names: &[String]) -> Result<Vec<&'static Experiment>, Fail> {
    if let Some(bad) = names.iter().find(|n| !EXPERIMENTS.iter().any(|e| e.name == n.as_str())) {
        let known: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
        return Err(Fail::Input(format!("unknown experiment {bad:?} (known: {})", known.join(", "))));
    }
    Ok(EXPERIMENTS.iter().filter(|e| names.is_empty() || names.iter().any(|n| n == e.name)).collect())
}

impl Experiment {
    /// The run, superpages on (`compare` runs it off too).
    pub fn spec(&self, quick: bool) -> RunSpec {
        let mut spec = RunSpec::workload(self.workload);
        spec.params = (self.params)(quick);
        spec.system.machine.machine = Some(self.machine.to_string());
        spec.system.policy = PolicySpec { kind: self.policy, mode: None };
        spec
    }

    /// The `splab compare` command line that runs it.
    pub fn command(&self, quick: bool) -> String {
        self.spec(quick).command_line("compare")
    }
}

/// What `--json` shows of an experiment: its fields, and the workload with
/// its options as `splab compare` takes them (`args`).
impl Serialize for Experiment {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            name: &'a str,
            published: &'a str,
            machine: &'a str,
            args: Vec<String>,
            policy: &'a str,
            models: &'a str,
            scaled: &'a str,
        }
        let mut args = vec![self.workload.name().to_string()];
        args.extend((self.params)(false).flags(self.workload.params(Side::Sim)));
        Shown { name: self.name, published: self.published, machine: self.machine, args, policy: self.policy.name(), models: self.models, scaled: self.scaled }.serialize(s)
    }
}

/// One figure of one experiment, off and on.
#[derive(Serialize)]
pub struct Row {
    pub figure: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub off: f64,
    pub on: f64,
    pub change_percent: Option<f64>,
}

/// One experiment's result.
#[derive(Serialize)]
pub struct Outcome {
    pub experiment: Experiment,
    pub command: String,
    pub rows: Vec<Row>,
    pub sim_seconds_off: f64,
    pub sim_seconds_on: f64,
    /// Superpage counters of the superpages-on run that are not zero:
    /// promotions and failed attempts, superpage mappings, and the
    /// policy's superpages made at fault.
    pub counters_on: BTreeMap<String, i64>,
    pub host_seconds: f64,
}

#[derive(Serialize)]
pub struct Reproduction {
    /// Whether these are `--quick` runs: tiny sizes, figures not
    /// comparable to the published ones.
    pub quick: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<&'static str>,
    pub outcomes: Vec<Outcome>,
}

/// What `--quick` figures are.
const QUICK_NOTE: &str = "--quick: each experiment at a tiny size (the commands above), to check that it runs; these figures are not comparable to the published ones nor to a full `splab reproduce`";

fn figure_rows(off: &[Figure], on: &[Figure]) -> Vec<Row> {
    off.iter()
        .zip(on)
        .map(|(a, b)| Row {
            figure: a.name.clone(),
            unit: a.unit.clone(),
            higher_is_better: a.higher_is_better,
            off: a.value,
            on: b.value,
            change_percent: simulate::change_percent(a.value, b.value),
        })
        .collect()
}

fn run_one(e: &Experiment, quick: bool, quiet: bool) -> Result<Outcome, Fail> {
    let t0 = std::time::Instant::now();
    let c = simulate::compare(&e.spec(quick), &RunOpts { quiet, ..RunOpts::default() })?;
    let rows = if c.off.details.is_empty() {
        figure_rows(std::slice::from_ref(&c.off.figure), std::slice::from_ref(&c.on.figure))
    } else {
        figure_rows(&c.off.details, &c.on.details)
    };
    let counters_on = c
        .on
        .sysctl
        .iter()
        .filter(|(k, _)| splab_vm::sysctl::is_superpage_counter(k))
        .filter_map(|(k, v)| match v {
            SysctlValue::Int(n) if *n != 0 => Some((k.clone(), *n)),
            _ => None,
        })
        .collect();
    Ok(Outcome {
        experiment: *e,
        command: e.command(quick),
        rows,
        sim_seconds_off: c.off.sim_seconds,
        sim_seconds_on: c.on.sim_seconds,
        counters_on,
        host_seconds: t0.elapsed().as_secs_f64(),
    })
}

pub fn cmd(a: &ReproduceArgs) -> Result<i32, Fail> {
    let chosen = select(&a.names)?;
    if a.list {
        if a.json {
            #[derive(Serialize)]
            struct List<'a> {
                experiments: &'a [&'static Experiment],
            }
            output::emit(&output::json(&List { experiments: &chosen }));
        } else {
            output::emit(&list_text(&chosen));
        }
        return Ok(0);
    }
    let quiet = a.json;
    let mut outcomes = Vec::new();
    for (i, e) in chosen.iter().enumerate() {
        if !quiet {
            eprintln!("[{}/{}] {}: {}", i + 1, chosen.len(), e.name, e.command(a.quick));
        }
        outcomes.push(run_one(e, a.quick, quiet)?);
    }
    let r = Reproduction { quick: a.quick, note: a.quick.then_some(QUICK_NOTE), outcomes };
    output::emit(&if a.json { output::json(&r) } else { table(&r) });
    Ok(0)
}

fn list_text(chosen: &[&Experiment]) -> String {
    let mut s = String::new();
    for e in chosen {
        writeln!(s, "{:<24} {}", e.name, e.published).unwrap();
        writeln!(s, "{:<24}   run: {}", "", e.command(false)).unwrap();
        if !e.scaled.is_empty() {
            writeln!(s, "{:<24}   scaled: {}", "", e.scaled).unwrap();
        }
    }
    s
}

/// The counters in a short form: promotions, failures, superpages made
/// at fault, summed over sizes.
fn counters_short(c: &BTreeMap<String, i64>) -> String {
    let sum = |f: &dyn Fn(&str) -> bool| c.iter().filter(|(k, _)| f(k)).map(|(_, v)| *v).sum::<i64>();
    let mut parts = Vec::new();
    let promo = sum(&|k| k.ends_with(".promotions"));
    let fail = sum(&|k| k.ends_with(".p_failures"));
    let alloc = sum(&|k| k.starts_with("vm.superpages.alloc."));
    if promo != 0 || fail != 0 {
        parts.push(format!("promo {promo} fail {fail}"));
    }
    if alloc != 0 {
        parts.push(format!("sp-alloc {alloc}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

pub fn table(r: &Reproduction) -> String {
    let mut s = String::new();
    let what = if r.quick { "at --quick sizes, NOT comparable to the published figures" } else { "each on its machine's profile" };
    writeln!(s, "splab reproduce: {} experiment(s) {what}; splab build {}\n", r.outcomes.len(), output::BUILD).unwrap();
    writeln!(s, "{:<24} {:<26} {:>12} {:>12} {:>8}  {:<6} counters (sp on)", "experiment", "figure", "sp off", "sp on", "change", "unit").unwrap();
    for o in &r.outcomes {
        for (i, row) in o.rows.iter().enumerate() {
            let name = if i == 0 { o.experiment.name } else { "" };
            let counters = if i == 0 { counters_short(&o.counters_on) } else { String::new() };
            writeln!(s, "{:<24} {:<26} {:>12} {:>12} {:>8}  {:<6} {}", name, row.figure, num(row.off), num(row.on), change(row.off, row.on), row.unit, counters).unwrap();
        }
    }
    writeln!(s).unwrap();
    for o in &r.outcomes {
        writeln!(s, "{}: {} ({} with superpages on)", o.experiment.name, o.command, o.experiment.policy).unwrap();
        if !o.experiment.scaled.is_empty() && !r.quick {
            writeln!(s, "  scaled: {}", o.experiment.scaled).unwrap();
        }
    }
    if r.quick {
        writeln!(s, "\n{QUICK_NOTE}.").unwrap();
    }
    s
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.5}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every experiment's runs build, on a known profile, and names are
    /// unique.
    #[test]
    fn every_experiment_builds() {
        for (i, e) in EXPERIMENTS.iter().enumerate() {
            for quick in [false, true] {
                let spec = e.spec(quick);
                let cfg = crate::setup::run_config(&spec).unwrap_or_else(|f| panic!("{} {quick}: {}", e.name, f.message()));
                crate::workload::build(&spec, &cfg, &Default::default()).unwrap_or_else(|f| panic!("{} {quick}: {}", e.name, f.message()));
            }
            assert!(!EXPERIMENTS[..i].iter().any(|f| f.name == e.name), "{} twice", e.name);
        }
    }

    #[test]
    fn unknown_names_are_refused_with_the_known_ones() {
        let Err(Fail::Input(m)) = select(&["armada-gups".into(), "nope".into()]) else { panic!("accepted") };
        assert!(m.contains("\"nope\"") && m.contains("armada-lat"), "{m}");
        assert_eq!(select(&[]).map(|v| v.len()).ok(), Some(EXPERIMENTS.len()));
    }
}
