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
use crate::run::{self, RunArgs};
use clap::{Args, Parser};
use serde::Serialize;
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
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Experiment {
    pub name: &'static str,
    /// Who measured it, on what, with which tool and parameters.
    pub published: &'static str,
    pub machine: &'static str,
    /// The workload and its options, as `splab compare` takes them.
    pub args: &'static [&'static str],
    /// The same at a small size, for `--quick` (a check that the
    /// experiment runs, whose figures mean nothing).
    #[serde(skip)]
    pub quick: &'static [&'static str],
    pub policy: &'static str,
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

/// An lmbench bandwidth test on the Armada XP, at its full size (`args`)
/// and `quick`.
/// An lmbench bw_mem (or bw_mmap_rd) test on the Armada XP: `bw --tests
/// TEST` over 128 MB, 2 MB for `--quick`.
macro_rules! bw {
    ($name:literal, $published:literal, $test:literal, $models:expr) => {
        Experiment {
            name: $name,
            published: $published,
            machine: "armada-xp",
            args: &["bw", "--tests", $test, "--size", "128M"],
            quick: &["bw", "--tests", $test, "--size", "2M"],
            policy: "freebsd",
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
        args: &["gups", "--log2-table", "27", "--updates", "33554432"],
        quick: &["gups", "--log2-table", "18", "--updates", "4096"],
        policy: "freebsd",
        models: GUPS_MODELS,
        scaled: "2^25 of the 2^29 updates timed (the table is full size): GUP/s is the loop's steady rate",
    },
    Experiment {
        name: "armada-lat",
        published: "FreeBSD armv7 on Armada XP: lmbench lat_mem_rd, random chase, stride 64",
        machine: "armada-xp",
        args: &["lat", "--max-size", "256M", "--stride", "64", "--pattern", "random", "--loads", "20000"],
        quick: &["lat", "--max-size", "2M", "--stride", "64", "--pattern", "random", "--loads", "1000"],
        policy: "freebsd",
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
        args: &["build", "--units", "128", "--jobs", "4"],
        quick: &["build", "--units", "4", "--jobs", "2"],
        policy: "freebsd",
        models: BUILD_MODELS,
        scaled: "128 compilation units, not a whole world: build time is the run's, not a world's",
    },
    Experiment {
        name: "armada-forkbomb",
        published: "FreeBSD armv7 on Armada XP: forkbomb",
        machine: "armada-xp",
        args: &["forkbomb", "--procs", "2048", "--fanout", "2", "--touch", "128K", "--inherited", "1M"],
        quick: &["forkbomb", "--procs", "16", "--fanout", "2", "--touch", "16K", "--inherited", "64K"],
        policy: "freebsd",
        models: "a process tree grown by fork, two children a process, each writing 128 KB of its own and every fourth page of 1 MB it inherited copy-on-write, then waiting for its children and exiting; figure: the time until the whole tree has exited",
        scaled: "a tree of 2048 processes (a fork bomb forks until fork fails, at the process limit or out of memory): the limit keeps the pair of runs to seconds",
    },
    Experiment {
        name: "armada-stress",
        published: "FreeBSD armv7 on Armada XP: stress",
        machine: "armada-xp",
        args: &["stress", "--vm", "4", "--vm-bytes", "256M", "--loops", "4"],
        quick: &["stress", "--vm", "2", "--vm-bytes", "4M", "--loops", "1"],
        policy: "freebsd",
        models: "stress --vm: workers mapping, writing and freeing memory",
        scaled: "4 rounds a worker (stress runs until stopped): the figure is the completion time of these",
    },
    Experiment {
        name: "power8-randomaccess",
        published: "FreeBSD powerpc64 (HPT) on POWER8: HPCC RandomAccess",
        machine: "power8",
        args: &["gups", "--log2-table", "28", "--updates", "33554432"],
        quick: &["gups", "--log2-table", "21", "--updates", "4096"],
        policy: "freebsd",
        models: GUPS_MODELS,
        scaled: "table 2^28 words (2 GiB; HPCC sizes it from memory), 2^25 of its 2^30 updates timed",
    },
    Experiment {
        name: "power9-randomaccess",
        published: "FreeBSD powerpc64 (HPT) on POWER9 Talos II: HPCC RandomAccess",
        machine: "power9",
        args: &["gups", "--log2-table", "28", "--updates", "33554432"],
        quick: &["gups", "--log2-table", "21", "--updates", "4096"],
        policy: "freebsd",
        models: GUPS_MODELS,
        scaled: "table 2^28 words (2 GiB; HPCC sizes it from memory), 2^25 of its 2^30 updates timed",
    },
    Experiment {
        name: "power8-pgbench",
        published: "FreeBSD powerpc64 (HPT) on POWER8: pgbench -S -T 5, scale 150, 1 client, 1 thread",
        machine: "power8",
        args: &["index", "--scale", "150", "--clients", "1", "--transactions", "20000"],
        quick: &["index", "--scale", "1", "--clients", "1", "--transactions", "100"],
        policy: "freebsd",
        models: "a select-only transaction: the index lookup's memory references (B-tree descent and heap fetch through shared buffers), the backend's and pgbench's instructions and the round trip's system calls as measured on PostgreSQL 15; the memory references and code fetches of that work are not modelled",
        scaled: "20000 transactions instead of 5 seconds' worth: tps is a steady rate",
    },
    Experiment {
        name: "power9-buildworld",
        published: "FreeBSD powerpc64 (HPT) on POWER9 Talos II (32 threads, 32 GB): buildworld -j32",
        machine: "power9",
        args: &["build", "--units", "128", "--jobs", "32"],
        quick: &["build", "--units", "4", "--jobs", "4"],
        policy: "freebsd",
        models: BUILD_MODELS,
        scaled: "128 compilation units on the profile's 8 CPUs, not a world on 32 threads",
    },
    Experiment {
        name: "alpha-transpose-freebsd",
        published: "Shimizu's Linux superpages on an Alpha: matrix transpose, load and store variants, N = 3000 to 3300",
        machine: "alpha-21264",
        args: &["transpose", "--sizes", "3000,3100,3200,3300"],
        quick: &["transpose", "--sizes", "300"],
        policy: "freebsd",
        models: TRANSPOSE_MODELS,
        scaled: "four sizes of the range",
    },
    Experiment {
        name: "alpha-transpose-shimizu",
        published: "Shimizu's Linux superpages on an Alpha: matrix transpose, load and store variants, N = 3000 to 3300",
        machine: "alpha-21264",
        args: &["transpose", "--sizes", "3000,3100,3200,3300"],
        quick: &["transpose", "--sizes", "300"],
        policy: "shimizu",
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
    fn args(&self, quick: bool) -> &'static [&'static str] {
        if quick {
            self.quick
        } else {
            self.args
        }
    }

    /// The `splab compare` command line that runs it.
    pub fn command(&self, quick: bool) -> String {
        let mut c = format!("splab compare {} --machine {}", self.args(quick).join(" "), self.machine);
        if self.policy != "freebsd" {
            write!(c, " --policy {}", self.policy).unwrap();
        }
        c
    }

    fn run_args(&self, quick: bool) -> Result<RunArgs, Fail> {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            run: RunArgs,
        }
        let argv = ["splab"].into_iter().chain(self.args(quick).iter().copied()).chain(["--machine", self.machine, "--policy", self.policy]);
        Only::try_parse_from(argv).map(|o| o.run).map_err(|e| Fail::Run(format!("experiment {}: {e}", self.name)))
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
            change_percent: run::change_percent(a.value, b.value),
        })
        .collect()
}

fn run_one(e: &Experiment, quick: bool, quiet: bool) -> Result<Outcome, Fail> {
    let a = e.run_args(quick)?;
    let t0 = std::time::Instant::now();
    let c = run::compare(&a, quiet)?;
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

    /// Every experiment's command line parses, on a known profile, and
    /// names are unique.
    #[test]
    fn every_experiment_parses() {
        for (i, e) in EXPERIMENTS.iter().enumerate() {
            e.run_args(false).unwrap_or_else(|_| panic!("{}", e.name));
            e.run_args(true).unwrap_or_else(|_| panic!("{} --quick", e.name));
            assert_eq!(e.args[0], e.quick[0], "{}: the same workload", e.name);
            splab_hw::profile::Profile::load(e.machine).unwrap();
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
