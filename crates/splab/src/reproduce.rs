//! `splab reproduce`: the published superpage experiments, each on the
//! profile of the machine it was measured on, with superpages off and on
//! (and, for the Alpha transposes, under FreeBSD's and Shimizu's
//! policies), printed in each original tool's units with the promotion
//! counters, and beside them every published figure they express
//! (`published::MEASUREMENTS`), with the error of each prediction and
//! whether its change agrees: within half the published change, of the
//! same sign. The published figures are read after the runs and set
//! nothing in them.
//!
//! Each experiment is a `splab compare` command line; where the stated
//! size cannot be simulated in the time the whole list is allowed (about
//! 40 minutes on a 2-core host, most of it the real programs run online),
//! the row says what was scaled and why the figure survives it.

use crate::error::Fail;
use crate::output::{self, change};
use crate::published::{self, Measurement, Pick, Value};
use crate::realprog::{self, Real};
use crate::simulate::{self, RunOpts};
use crate::spec::RunSpec;
use clap::Args;
use serde::{Deserialize, Serialize};
use splab_defs::workload::Side;
use splab_defs::{WorkloadKind, WorkloadParams};
use splab_vm::policy::{PolicyKind, PolicySpec};
use splab_vm::sysctl::SysctlValue;
use splab_workloads::Figure;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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
    /// Experiments run at once, each in a process of its own (default:
    /// this host's CPUs); with more than one, each simulation keeps to
    /// one thread. The figures are the same however many run at once.
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// One host thread a simulation (`--jobs` gives it to the
    /// experiments it runs at once).
    #[arg(long, hide = true)]
    pub single_thread: bool,
}

/// What an experiment runs, at the experiment's size or, `quick`, at a
/// small one (a check that the experiment runs, whose figures mean
/// nothing).
#[derive(Clone, Copy, Debug)]
pub enum Run {
    /// A workload with its parameters.
    Workload(WorkloadKind, fn(quick: bool) -> WorkloadParams),
    /// A real program online (`realprog.rs`).
    Program(fn(quick: bool) -> Real),
}

/// One published experiment and the `splab compare` run that models it.
#[derive(Clone, Copy, Debug)]
pub struct Experiment {
    pub name: &'static str,
    /// Who measured it, on what, with which tool and parameters.
    pub published: &'static str,
    pub machine: &'static str,
    pub run: Run,
    pub policy: PolicyKind,
    /// The tunables that make the model's kernel the one the experiment
    /// ran on, where it differs from today's (`--sysctl`).
    pub kernel: &'static [(&'static str, &'static str)],
    /// The machine's memory where the seed gives it (`--memory`; not for
    /// `--quick` runs): what the kernel sizes from it (POWER's hashed
    /// page table) is then as on the machine.
    pub memory: Option<&'static str>,
    /// What the workload models of the original and what it leaves out.
    pub models: &'static str,
    /// What was scaled from the published size, and why the figure
    /// survives it; empty when nothing was.
    pub scaled: &'static str,
}

/// The FreeBSD of the Armada XP seeds (HEAD at r254918, August 2013):
/// a fault maps the faulting page alone, whatever its reservation, and
/// superpages come from promotion. vm_fault_soft_fast, which today maps a
/// fully populated reservation's superpage at a fault, came in 2014 and
/// did so on arm by FreeBSD 12.1 (release 10.4 and releng/11.0 pass
/// pmap_enter psind 0).
const FREEBSD_2013: &[(&str, &str)] = &[(splab_vm::policy::freebsd::SOFT_FAULT_SUPERPAGES, "0")];

/// The Talos II of the POWER9 measurements had 32 GB (003: "a POWER9
/// machine (Talos II) with 32GB RAM"); FreeBSD's moea64 sizes its hashed
/// page table from physical memory, half a PTEG a page.
const TALOS_II_MEMORY: &str = "32G";

const GUPS_MODELS: &str = "HPCC RandomAccess's update loop (XOR of a random word), the table in one anonymous mapping";
const BW_MODELS: &str = "lmbench bw_mem's loop over the buffer; the instruction work of the copy loops is not timed";
const BUILD_MODELS: &str = "GCC (Debian's gcc 12, x86-64) compiling a real C unit, tools/nested-chase.c, with gcc -O2 -c: the driver forking cc1 and as, several compilations at once (xargs -P, as make -jN), run online with their own data references and instruction fetches; the x86-64 compiler's code and data stand in for the machine's own (one compiler for GCC and clang)";
const PGBENCH_MODELS: &str = "a real PostgreSQL 15 backend (x86-64) in single-user mode serving pgbench -S's statement, SELECT abalance FROM pgbench_accounts WHERE aid = N with N uniform over the accounts, from standard input, run online with its own data references and instruction fetches, on a warm server: the table and then its index read into the shared buffers first (pg_prewarm), which fills every one of them, as the seed's earlier runs had; no client, socket or round trip; tps = statements / (the run's time - the time of the same backend warming up and serving none), pgbench's tps without the connection time";
const TRANSPOSE_MODELS: &str = "the naive double loop B = A^T, strided loads (load) or strided stores (store); MB/s of 2 x 8 x N^2 bytes";

/// An lmbench bw_mem (or bw_mmap_rd) test on the Armada XP: `bw --tests
/// TEST` over 128 MB, 2 MB for `--quick`.
macro_rules! bw {
    ($name:literal, $published:literal, $test:literal, $models:expr) => {
        Experiment {
            name: $name,
            published: $published,
            machine: "armada-xp",
            run: Run::Workload(WorkloadKind::Bw, |quick| if quick { WorkloadParams { tests: Some(vec![$test.to_string()]), size: Some("2M".into()), ..WorkloadParams::default() } } else { WorkloadParams { tests: Some(vec![$test.to_string()]), size: Some("128M".into()), ..WorkloadParams::default() } }),
            policy: PolicyKind::FreeBsd,
            kernel: FREEBSD_2013,
            memory: None,
            models: $models,
            scaled: "",
        }
    };
}

/// pgbench -S on POWER8 and POWER9: 5000 statements at the seed's scale
/// 150, or 200 at scale 1 with --quick.
fn pgbench(quick: bool) -> Real {
    if quick {
        Real::Pgbench { scale: 1, transactions: 200 }
    } else {
        Real::Pgbench { scale: 150, transactions: 5000 }
    }
}

/// A build: two compilations of tools/nested-chase.c two at a time, or
/// one of a one-line unit with --quick.
fn build(quick: bool) -> Real {
    if quick {
        Real::Gcc { units: 1, jobs: 1, small: true }
    } else {
        Real::Gcc { units: 2, jobs: 2, small: false }
    }
}

const BUILD_SCALED: &str = "two compilations of one unit, two at a time, not a world: build time is the run's, so only the change compares";
const PGBENCH_SCALED: &str = "5000 statements instead of 5 seconds' worth: tps is a steady rate";

/// Every experiment of the publications, in the order they are printed.
pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "armada-gups",
        published: "FreeBSD armv7 on Armada XP: GUPS, table 2^27 64-bit words, 2^29 updates",
        machine: "armada-xp",
        run: Run::Workload(WorkloadKind::Gups, |quick| if quick { WorkloadParams { log2_table: Some(18), updates: Some(4096), ..WorkloadParams::default() } } else { WorkloadParams { log2_table: Some(27), updates: Some(33554432), ..WorkloadParams::default() } }),
        policy: PolicyKind::FreeBsd,
        kernel: FREEBSD_2013,
        memory: None,
        models: GUPS_MODELS,
        scaled: "2^25 of the 2^29 updates timed (the table is full size): GUP/s is the loop's steady rate",
    },
    Experiment {
        name: "armada-lat",
        published: "FreeBSD armv7 on Armada XP: lmbench lat_mem_rd, random chase, stride 64",
        machine: "armada-xp",
        run: Run::Workload(WorkloadKind::Lat, |quick| if quick { WorkloadParams { max_size: Some("2M".into()), stride: Some(vec![64]), pattern: Some("random".into()), loads: Some(1000), ..WorkloadParams::default() } } else { WorkloadParams { max_size: Some("256M".into()), stride: Some(vec![64]), pattern: Some("random".into()), loads: Some(20000), ..WorkloadParams::default() } }),
        policy: PolicyKind::FreeBsd,
        kernel: FREEBSD_2013,
        memory: None,
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
        run: Run::Program(build),
        policy: PolicyKind::FreeBsd,
        kernel: FREEBSD_2013,
        memory: None,
        models: BUILD_MODELS,
        scaled: BUILD_SCALED,
    },
    Experiment {
        name: "armada-forkbomb",
        published: "FreeBSD armv7 on Armada XP: forkbomb",
        machine: "armada-xp",
        run: Run::Workload(WorkloadKind::Forkbomb, |quick| if quick { WorkloadParams { procs: Some(16), fanout: Some(2), touch: Some("16K".into()), inherited: Some("64K".into()), ..WorkloadParams::default() } } else { WorkloadParams { procs: Some(2048), fanout: Some(2), touch: Some("128K".into()), inherited: Some("1M".into()), ..WorkloadParams::default() } }),
        policy: PolicyKind::FreeBsd,
        kernel: FREEBSD_2013,
        memory: None,
        models: "a process tree grown by fork, two children a process, each writing 128 KB of its own and every fourth page of 1 MB it inherited copy-on-write, then waiting for its children and exiting; figure: the time until the whole tree has exited",
        scaled: "a tree of 2048 processes (a fork bomb forks until fork fails, at the process limit or out of memory): the limit keeps the pair of runs to seconds",
    },
    Experiment {
        name: "armada-stress",
        published: "FreeBSD armv7 on Armada XP: stress",
        machine: "armada-xp",
        run: Run::Workload(WorkloadKind::Stress, |quick| if quick { WorkloadParams { vm: Some(2), vm_bytes: Some("4M".into()), loops: Some(1), ..WorkloadParams::default() } } else { WorkloadParams { vm: Some(4), vm_bytes: Some("256M".into()), loops: Some(4), ..WorkloadParams::default() } }),
        policy: PolicyKind::FreeBsd,
        kernel: FREEBSD_2013,
        memory: None,
        models: "stress --vm: workers mapping, writing and freeing memory",
        scaled: "4 rounds a worker (stress runs until stopped): the figure is the completion time of these",
    },
    Experiment {
        name: "power8-randomaccess",
        published: "FreeBSD powerpc64 (HPT) on POWER8: HPCC RandomAccess",
        machine: "power8",
        run: Run::Workload(WorkloadKind::Gups, |quick| if quick { WorkloadParams { log2_table: Some(21), updates: Some(4096), ..WorkloadParams::default() } } else { WorkloadParams { log2_table: Some(28), updates: Some(33554432), ..WorkloadParams::default() } }),
        policy: PolicyKind::FreeBsd,
        kernel: &[],
        memory: None,
        models: GUPS_MODELS,
        scaled: "table 2^28 words (2 GiB; HPCC sizes it from memory), 2^25 of its 2^30 updates timed",
    },
    Experiment {
        name: "power9-randomaccess",
        published: "FreeBSD powerpc64 (HPT) on POWER9 Talos II: HPCC RandomAccess",
        machine: "power9",
        run: Run::Workload(WorkloadKind::Gups, |quick| if quick { WorkloadParams { log2_table: Some(21), updates: Some(4096), ..WorkloadParams::default() } } else { WorkloadParams { log2_table: Some(28), updates: Some(33554432), ..WorkloadParams::default() } }),
        policy: PolicyKind::FreeBsd,
        kernel: &[],
        memory: Some(TALOS_II_MEMORY),
        models: GUPS_MODELS,
        scaled: "table 2^28 words (2 GiB; HPCC sizes it from memory), 2^25 of its 2^30 updates timed",
    },
    Experiment {
        name: "power8-pgbench",
        published: "FreeBSD powerpc64 (HPT) on POWER8: pgbench -S -T 5, scale 150, 1 client, 1 thread",
        machine: "power8",
        run: Run::Program(pgbench),
        policy: PolicyKind::FreeBsd,
        kernel: &[],
        memory: None,
        models: PGBENCH_MODELS,
        scaled: PGBENCH_SCALED,
    },
    Experiment {
        name: "power9-pgbench",
        published: "FreeBSD powerpc64 (HPT) on POWER9 Talos II: pgbench -S -T 5, scale 150, 1 client, 1 thread",
        machine: "power9",
        run: Run::Program(pgbench),
        policy: PolicyKind::FreeBsd,
        kernel: &[],
        memory: Some(TALOS_II_MEMORY),
        models: PGBENCH_MODELS,
        scaled: PGBENCH_SCALED,
    },
    Experiment {
        name: "power9-buildworld",
        published: "FreeBSD powerpc64 (HPT) on POWER9 Talos II (32 threads, 32 GB): buildworld -j32",
        machine: "power9",
        run: Run::Program(build),
        policy: PolicyKind::FreeBsd,
        kernel: &[],
        memory: Some(TALOS_II_MEMORY),
        models: BUILD_MODELS,
        scaled: "two compilations of one unit, two at a time on the profile's 8 CPUs, not a world with 32 jobs: build time is the run's, so only the change compares",
    },
    Experiment {
        name: "alpha-transpose-freebsd",
        published: "Shimizu's Linux superpages on an Alpha: matrix transpose, load and store variants, N = 3000, 3100, 3150, 3175, 3200 and 3300",
        machine: "alpha-21264",
        run: Run::Workload(WorkloadKind::Transpose, |quick| if quick { WorkloadParams { sizes: Some(vec![300]), ..WorkloadParams::default() } } else { WorkloadParams { sizes: Some(vec![3000, 3100, 3150, 3175, 3200, 3300]), ..WorkloadParams::default() } }),
        policy: PolicyKind::FreeBsd,
        kernel: &[],
        memory: None,
        models: TRANSPOSE_MODELS,
        scaled: "",
    },
    Experiment {
        name: "alpha-transpose-shimizu",
        published: "Shimizu's Linux superpages on an Alpha: matrix transpose, load and store variants, N = 3000, 3100, 3150, 3175, 3200 and 3300",
        machine: "alpha-21264",
        run: Run::Workload(WorkloadKind::Transpose, |quick| if quick { WorkloadParams { sizes: Some(vec![300]), ..WorkloadParams::default() } } else { WorkloadParams { sizes: Some(vec![3000, 3100, 3150, 3175, 3200, 3300]), ..WorkloadParams::default() } }),
        policy: PolicyKind::Shimizu,
        kernel: &[],
        memory: None,
        models: TRANSPOSE_MODELS,
        scaled: "",
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

/// Where `--list` and the command lines put a program's inputs.
const DIR: &str = "DIR";

/// What DIR is, under the commands of any program's experiment.
fn dir_note(chosen: &[&Experiment]) -> Option<&'static str> {
    chosen.iter().any(|e| matches!(e.run, Run::Program(_))).then_some(
        "DIR: a directory `splab reproduce` makes for a program's run, with its inputs (the database and its statements, the compiler's source), and removes after it",
    )
}

impl Experiment {
    /// The run, superpages on (`compare` runs it off too); a program's
    /// inputs in `dir`, made by `realprog::prepare`.
    pub fn spec(&self, quick: bool, dir: &Path) -> RunSpec {
        let mut spec = match self.run {
            Run::Workload(kind, params) => {
                let mut spec = RunSpec::workload(kind);
                spec.params = params(quick);
                spec
            }
            Run::Program(real) => {
                let r = real(quick);
                let bin = realprog::postgres_bin().unwrap_or_else(|_| PathBuf::from("/usr/lib/postgresql/VERSION/bin"));
                let mut spec = RunSpec { program: realprog::program(&r, dir, &bin), user: realprog::user(&r), ..RunSpec::default() };
                if let Real::Pgbench { transactions, .. } = r {
                    spec.input = Some(realprog::statements(dir, transactions));
                }
                spec
            }
        };
        spec.system.machine.machine = Some(self.machine.to_string());
        spec.system.policy = PolicySpec { kind: self.policy, mode: None };
        spec.system.sysctl = self.kernel.iter().map(|&(n, v)| (n.to_string(), v.to_string())).collect();
        if !quick {
            spec.system.memory = self.memory.map(str::to_string);
        }
        spec
    }

    /// The `splab compare` command line that runs it (a program's inputs
    /// in `dir`).
    pub fn command_in(&self, quick: bool, dir: &Path) -> String {
        self.spec(quick, dir).command_line("compare")
    }

    /// The command line, a program's inputs in DIR.
    pub fn command(&self, quick: bool) -> String {
        self.command_in(quick, Path::new(DIR))
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
            /// `--sysctl` settings of the experiment's kernel.
            sysctl: Vec<String>,
            /// `--memory`, where the seed gives the machine's.
            #[serde(skip_serializing_if = "Option::is_none")]
            memory: Option<&'a str>,
            models: &'a str,
            scaled: &'a str,
        }
        let args = match self.run {
            Run::Workload(kind, params) => {
                let mut args = vec![kind.name().to_string()];
                args.extend(params(false).flags(kind.params(Side::Sim)));
                args
            }
            Run::Program(_) => {
                let spec = self.spec(false, Path::new(DIR));
                std::iter::once("--".to_string()).chain(spec.program).collect()
            }
        };
        let sysctl = self.kernel.iter().map(|(n, v)| format!("{n}={v}")).collect();
        Shown { name: self.name, published: self.published, machine: self.machine, args, policy: self.policy.name(), sysctl, memory: self.memory, models: self.models, scaled: self.scaled }.serialize(s)
    }
}

/// One figure of one experiment, off and on.
#[derive(Serialize, Deserialize)]
pub struct Row {
    pub figure: String,
    pub unit: String,
    pub higher_is_better: bool,
    pub off: f64,
    pub on: f64,
    pub change_percent: Option<f64>,
}

/// An experiment read back from its JSON (a child's outcome under
/// `--jobs`): by its name, from the list.
impl<'de> Deserialize<'de> for Experiment {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Named {
            name: String,
        }
        let n = Named::deserialize(d)?;
        EXPERIMENTS.iter().find(|e| e.name == n.name).copied().ok_or_else(|| serde::de::Error::custom(format!("unknown experiment {:?}", n.name)))
    }
}

/// One experiment's result.
#[derive(Serialize, Deserialize)]
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
    /// Every published figure of the experiments run, beside the
    /// prediction.
    pub published: Vec<Against>,
    /// How many changes agree; none for `--quick`.
    pub summary: Option<Summary>,
}

/// One published figure beside the model's. Errors are (predicted -
/// published) / |published|, per cent; none where either side lacks the
/// figure, where the run is a scaled part of the original (absolute
/// figures), or for `--quick` runs.
#[derive(Serialize)]
pub struct Against {
    pub experiment: &'static str,
    /// What the seed calls the figure.
    pub figure: &'static str,
    pub unit: &'static str,
    pub seed: &'static str,
    pub seed_file: &'static str,
    pub place: &'static str,
    pub quotes: &'static [&'static str],
    pub note: &'static str,
    pub headline: bool,
    /// Whether the absolute figures compare (not a scaled run).
    pub absolute: bool,
    pub published_off: Option<f64>,
    pub published_on: Option<f64>,
    pub published_change_percent: Option<f64>,
    /// Where the seed gives only the direction: whether the figure fell.
    pub published_fell: Option<bool>,
    pub predicted_off: Option<f64>,
    pub predicted_on: Option<f64>,
    pub predicted_change_percent: Option<f64>,
    pub error_off_percent: Option<f64>,
    pub error_on_percent: Option<f64>,
    pub error_change_percent: Option<f64>,
    /// The predicted change within half the published change and of the
    /// same sign (`published::agrees`); where only the direction is
    /// published, the same direction; none for counters and `--quick`.
    pub agrees: Option<bool>,
}

/// The agreement over the published changes (entries with a change, off
/// and on or the change alone; not directions nor counters).
#[derive(Serialize, Debug, PartialEq)]
pub struct Summary {
    pub agree: usize,
    pub of: usize,
    pub headline_agree: usize,
    pub headline_of: usize,
}

/// The model's figures an entry picks from an outcome, off and on (off
/// none for a counter); none when the run lacks them (a `--quick` size).
fn predicted(m: &Measurement, o: &Outcome) -> Option<(Option<f64>, f64)> {
    let row = |name: String| o.rows.iter().find(|r| r.figure == name).map(|r| (r.off, r.on));
    let (off, on) = match m.pick {
        Pick::Figure => match o.rows.as_slice() {
            [r] => (r.off, r.on),
            _ => return None,
        },
        Pick::Seconds => (o.sim_seconds_off, o.sim_seconds_on),
        Pick::Transpose(n, v) => row(format!("{n} {v} MB/s"))?,
        Pick::TransposeMean(ns, v) => {
            let rows = ns.iter().map(|n| row(format!("{n} {v} MB/s"))).collect::<Option<Vec<_>>>()?;
            let k = rows.len() as f64;
            (rows.iter().map(|r| r.0).sum::<f64>() / k, rows.iter().map(|r| r.1).sum::<f64>() / k)
        }
        Pick::Counter(name) => return Some((None, o.counters_on.get(name).copied().unwrap_or(0) as f64)),
    };
    Some((Some(off), on))
}

/// An entry beside its outcome.
pub fn against(m: &'static Measurement, o: &Outcome, quick: bool) -> Against {
    let (pred_off, pred_on) = match predicted(m, o) {
        Some((off, on)) => (off, Some(on)),
        None => (None, None),
    };
    let pred_change = match (pred_off, pred_on) {
        (Some(a), Some(b)) => simulate::change_percent(a, b),
        _ => None,
    };
    let v = m.value;
    let err = |p: Option<f64>, q: Option<f64>| match (p, q) {
        (Some(p), Some(q)) if !quick => published::error_percent(p, q),
        _ => None,
    };
    let absolute = |e: Option<f64>| e.filter(|_| m.absolute);
    let agrees = match (v, pred_change) {
        _ if quick => None,
        (Value::OffOn { .. } | Value::Change(_), Some(c)) => Some(published::agrees(v.change_percent().unwrap(), c)),
        (Value::Fell(fell), Some(c)) => Some((c < 0.0) == fell && c != 0.0),
        _ => None,
    };
    Against {
        experiment: m.experiment,
        figure: m.figure,
        unit: m.unit,
        seed: m.seed,
        seed_file: published::seed(m.seed).map_or("", |s| s.file),
        place: m.place,
        quotes: m.quotes,
        note: m.note,
        headline: m.headline,
        absolute: m.absolute,
        published_off: v.off(),
        published_on: v.on(),
        published_change_percent: v.change_percent(),
        published_fell: match v {
            Value::Fell(f) => Some(f),
            _ => None,
        },
        predicted_off: pred_off,
        predicted_on: pred_on,
        predicted_change_percent: pred_change,
        error_off_percent: absolute(err(v.off(), pred_off)),
        error_on_percent: if matches!(v, Value::Count(_)) { err(v.on(), pred_on) } else { absolute(err(v.on(), pred_on)) },
        error_change_percent: err(v.change_percent(), pred_change),
        agrees,
    }
}

/// The published figures of the experiments run, in the list's order.
pub fn published_against(outcomes: &[Outcome], quick: bool) -> Vec<Against> {
    outcomes
        .iter()
        .flat_map(|o| published::MEASUREMENTS.iter().filter(move |m| m.experiment == o.experiment.name).map(move |m| against(m, o, quick)))
        .collect()
}

/// How many published changes the predictions agree with, in all and
/// among the headline figures.
pub fn summary(rows: &[Against]) -> Summary {
    let changes = || rows.iter().filter(|a| a.published_change_percent.is_some());
    let count = |head: bool| {
        let of = changes().filter(|a| !head || a.headline).count();
        let agree = changes().filter(|a| (!head || a.headline) && a.agrees == Some(true)).count();
        (agree, of)
    };
    let (agree, of) = count(false);
    let (headline_agree, headline_of) = count(true);
    Summary { agree, of, headline_agree, headline_of }
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

fn run_one(e: &Experiment, quick: bool, quiet: bool, single_thread: bool) -> Result<Outcome, Fail> {
    let t0 = std::time::Instant::now();
    let real = match e.run {
        Run::Program(real) => Some(real(quick)),
        Run::Workload(..) => None,
    };
    // A program's inputs, made natively first; removed when this returns.
    let work = real.as_ref().map(realprog::prepare).transpose()?;
    let dir = work.as_ref().map_or(Path::new(DIR), |w| w.path.as_path());
    let spec = e.spec(quick, dir);
    let opts = RunOpts { quiet, single_thread, ..RunOpts::default() };
    let c = simulate::compare(&spec, &opts)?;
    let rows = match real {
        Some(Real::Pgbench { transactions, .. }) => {
            // The same backend serving no statement: its start, warm-up
            // and shutdown, taken out of the time as pgbench leaves out
            // the connection's.
            let mut idle = spec.clone();
            idle.input = Some(realprog::statements(dir, 0));
            let c0 = simulate::compare(&idle, &opts)?;
            let tps = |all: f64, idle: f64| f64::from(transactions) / (all - idle);
            let (off, on) = (tps(c.off.sim_seconds, c0.off.sim_seconds), tps(c.on.sim_seconds, c0.on.sim_seconds));
            vec![Row { figure: "tps".into(), unit: "transactions/s".into(), higher_is_better: true, off, on, change_percent: simulate::change_percent(off, on) }]
        }
        Some(Real::Gcc { .. }) => {
            let (off, on) = (c.off.sim_seconds, c.on.sim_seconds);
            vec![Row { figure: "build time".into(), unit: "s".into(), higher_is_better: false, off, on, change_percent: simulate::change_percent(off, on) }]
        }
        None if c.off.details.is_empty() => figure_rows(std::slice::from_ref(&c.off.figure), std::slice::from_ref(&c.on.figure)),
        None => figure_rows(&c.off.details, &c.on.details),
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
        // The inputs' directory is gone when this returns: DIR, as in
        // `--list`, which the text's note explains.
        command: e.command(quick),
        rows,
        sim_seconds_off: c.off.sim_seconds,
        sim_seconds_on: c.on.sim_seconds,
        counters_on,
        host_seconds: t0.elapsed().as_secs_f64(),
    })
}

/// What `run_children` reads of a child's document.
#[derive(Deserialize)]
struct ChildDocument {
    outcomes: Vec<Outcome>,
}

/// Runs `chosen` `jobs` at a time, each experiment a child process
/// (`splab reproduce NAME --json --single-thread`) that makes its own
/// inputs; the outcomes in `chosen`'s order. A failed experiment stops the
/// rest, as it does when they run one after another (bad input, exit 2,
/// stays bad input), and so does `stop` answering true (it is asked a few
/// times a second). Unless `quiet`, a bar counts the experiments done and
/// a line names each as it ends.
fn run_children(chosen: &[&'static Experiment], quick: bool, jobs: usize, quiet: bool, stop: &dyn Fn() -> bool) -> Result<Vec<Outcome>, Fail> {
    use std::sync::mpsc::RecvTimeoutError;
    use crate::workers::{self, Task};
    let tasks = chosen
        .iter()
        .map(|e| {
            let mut args = vec!["reproduce".to_string(), e.name.to_string(), "--json".into(), "--single-thread".into(), "--jobs".into(), "1".into()];
            if quick {
                args.push("--quick".into());
            }
            Task { args, stdin: None }
        })
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut running = workers::start_tasks(jobs, &workers::own_command()?, tasks, tx);
    let mut bar = crate::progress::Progress::new(chosen.len() as u64, "reproduce", "experiments", quiet);
    let mut got: Vec<Option<Outcome>> = chosen.iter().map(|_| None).collect();
    let mut failed = None;
    let mut done = 0;
    loop {
        let o = match rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(o) => o,
            Err(RecvTimeoutError::Timeout) if stop() => {
                failed = Some(Fail::Run("stopped before every experiment ended".into()));
                running.stop();
                break;
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        done += 1;
        let e = chosen[o.index];
        let bad_input = o.bad_input;
        let parsed = o.result.and_then(|doc| {
            let d: ChildDocument = serde_json::from_str(&doc).map_err(|err| format!("its output is not a reproduction ({err})"))?;
            d.outcomes.into_iter().next().filter(|c| c.experiment.name == e.name).ok_or_else(|| "it printed no outcome of it".to_string())
        });
        match parsed {
            Ok(c) => {
                if !quiet {
                    bar.line(&format!("[{done}/{}] {}: done in {:.0} s", chosen.len(), e.name, c.host_seconds));
                }
                got[o.index] = Some(c);
                bar.update(done as u64);
            }
            Err(err) => {
                let msg = format!("{}: {err}", e.name);
                failed = Some(if bad_input { Fail::Input(msg) } else { Fail::Run(msg) });
                running.stop();
                break;
            }
        }
    }
    running.wait();
    bar.finish();
    if let Some(f) = failed {
        return Err(f);
    }
    got.into_iter().zip(chosen).map(|(o, e)| o.ok_or_else(|| Fail::Run(format!("{}: no outcome (its run was stopped)", e.name)))).collect()
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
    // A signal ends the command and its children: nothing to ask.
    let r = reproduce(&chosen, a.quick, a.jobs, a.json, a.single_thread, &|| false)?;
    output::emit(&if a.json { output::json(&r) } else { table(&r) });
    Ok(0)
}

/// Runs `chosen` (`select`), `jobs` at once (default: one per CPU), and
/// sets the published figures beside them; progress on stderr unless
/// `quiet`; `stop` answering true (Python's Ctrl-C) stops the runs. The
/// command and the Python package's `reproduce` call it.
pub fn reproduce(chosen: &[&'static Experiment], quick: bool, jobs: Option<usize>, quiet: bool, single_thread: bool, stop: &dyn Fn() -> bool) -> Result<Reproduction, Fail> {
    if jobs == Some(0) {
        return Err(Fail::Input("--jobs 0: at least one experiment at a time".into()));
    }
    let jobs = jobs.unwrap_or_else(crate::sweep::cpus).min(chosen.len());
    let outcomes = if jobs > 1 {
        if !quiet {
            eprintln!("{} experiments, {jobs} at a time, each in a process of its own (--jobs)", chosen.len());
        }
        run_children(chosen, quick, jobs, quiet, stop)?
    } else {
        let mut outcomes = Vec::new();
        for (i, e) in chosen.iter().enumerate() {
            if stop() {
                return Err(Fail::Run("stopped before every experiment ended".into()));
            }
            if !quiet {
                eprintln!("[{}/{}] {}: {}", i + 1, chosen.len(), e.name, e.command(quick));
            }
            outcomes.push(run_one(e, quick, quiet, single_thread)?);
        }
        outcomes
    };
    let published = published_against(&outcomes, quick);
    let summary = (!quick).then(|| summary(&published));
    Ok(Reproduction { quick, note: quick.then_some(QUICK_NOTE), outcomes, published, summary })
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
    if let Some(note) = dir_note(chosen) {
        writeln!(s, "\n{note}").unwrap();
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
    if !r.published.is_empty() {
        writeln!(s).unwrap();
        s.push_str(&published_table(r));
    }
    writeln!(s).unwrap();
    for o in &r.outcomes {
        writeln!(s, "{}: {} ({} with superpages on)", o.experiment.name, o.command, o.experiment.policy).unwrap();
        if !o.experiment.scaled.is_empty() && !r.quick {
            writeln!(s, "  scaled: {}", o.experiment.scaled).unwrap();
        }
    }
    if let Some(note) = dir_note(&r.outcomes.iter().map(|o| &o.experiment).collect::<Vec<_>>()) {
        writeln!(s, "{note}").unwrap();
    }
    if r.quick {
        writeln!(s, "\n{QUICK_NOTE}.").unwrap();
    }
    s
}

/// The published figures beside the predictions: one line each, then
/// the seed, the place and the note; the summary last.
fn published_table(r: &Reproduction) -> String {
    let mut s = String::new();
    let what = if r.quick { " (--quick: the predictions are not comparable; no errors are given)" } else { "" };
    writeln!(s, "published against predicted{what}").unwrap();
    writeln!(s, "  error: (predicted - published) / |published|; agrees: the predicted change within half the published change, same sign; * a headline figure").unwrap();
    writeln!(
        s,
        "{:<23} {:<34} {:>9} {:>9} {:>8} | {:>9} {:>9} {:>8} | {:>8} {:>8} {:>8}  agrees",
        "experiment", "published figure [unit]", "pub off", "pub on", "change", "pred off", "pred on", "change", "err off", "err on", "err chg"
    )
    .unwrap();
    let opt = |v: Option<f64>| v.map_or("-".to_string(), sig);
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |p| format!("{p:+.1}%"));
    let (mut last, mut last_source) = ("", String::new());
    for a in &r.published {
        // The seed, the place and the note head each run of rows that
        // share them, the experiment's name on its first.
        let note = if a.note.is_empty() { String::new() } else { format!("; {}", a.note) };
        let source = format!("[{}] {}{note}", a.seed, a.place);
        if source != last_source || a.experiment != last {
            let name = if a.experiment == last { "" } else { a.experiment };
            writeln!(s, "{name:<23} {source}").unwrap();
        }
        (last, last_source) = (a.experiment, source);
        let pub_change = match (a.published_change_percent, a.published_fell) {
            (Some(c), _) => format!("{c:+.1}%"),
            (None, Some(true)) => "fell".into(),
            (None, Some(false)) => "rose".into(),
            _ => "-".into(),
        };
        let agrees = match (a.agrees, a.published_fell) {
            (Some(true), None) => "yes",
            (Some(false), None) => "no",
            (Some(true), Some(_)) => "same sign",
            (Some(false), Some(_)) => "wrong sign",
            (None, _) => "-",
        };
        let star = if a.headline { " *" } else { "" };
        let figure = format!("{} [{}]", a.figure, a.unit);
        writeln!(
            s,
            "{:<23} {:<34} {:>9} {:>9} {:>8} | {:>9} {:>9} {:>8} | {:>8} {:>8} {:>8}  {agrees}{star}",
            "",
            figure,
            opt(a.published_off),
            opt(a.published_on),
            pub_change,
            opt(a.predicted_off),
            opt(a.predicted_on),
            pct(a.predicted_change_percent),
            pct(a.error_off_percent),
            pct(a.error_on_percent),
            pct(a.error_change_percent)
        )
        .unwrap();
    }
    let unmatched: Vec<&str> = r.outcomes.iter().map(|o| o.experiment.name).filter(|n| !r.published.iter().any(|a| a.experiment == *n)).collect();
    if !unmatched.is_empty() {
        writeln!(s, "no published figure: {}", unmatched.join(", ")).unwrap();
    }
    if let Some(m) = &r.summary {
        writeln!(s, "{} of {} within half the published change, same sign; headline figures (*): {} of {}", m.agree, m.of, m.headline_agree, m.headline_of).unwrap();
    }
    s
}

/// A figure with at least four significant digits below 1, whole
/// numbers as such.
fn sig(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 || !v.is_finite() {
        num(v)
    } else {
        let digits = (3 - v.abs().log10().floor() as i32).max(0) as usize;
        format!("{v:.digits$}")
    }
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
            // A program needs its inputs made and valgrind: the
            // integration tests run those (tests/reproduce.rs).
            if matches!(e.run, Run::Program(_)) {
                continue;
            }
            for quick in [false, true] {
                let spec = e.spec(quick, Path::new(DIR));
                let cfg = crate::setup::run_config(&spec).unwrap_or_else(|f| panic!("{} {quick}: {}", e.name, f.message()));
                crate::workload::build(&spec, &cfg, &Default::default()).unwrap_or_else(|f| panic!("{} {quick}: {}", e.name, f.message()));
            }
            assert!(!EXPERIMENTS[..i].iter().any(|f| f.name == e.name), "{} twice", e.name);
        }
    }

    fn outcome(name: &str, rows: &[(&str, f64, f64)], seconds: (f64, f64), counters: &[(&str, i64)]) -> Outcome {
        let e = EXPERIMENTS.iter().find(|e| e.name == name).unwrap();
        Outcome {
            experiment: *e,
            command: e.command(false),
            rows: rows.iter().map(|&(f, off, on)| Row { figure: f.into(), unit: "u".into(), higher_is_better: true, off, on, change_percent: simulate::change_percent(off, on) }).collect(),
            sim_seconds_off: seconds.0,
            sim_seconds_on: seconds.1,
            counters_on: counters.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
            host_seconds: 0.0,
        }
    }

    /// Each published figure is set beside the figure it names, its
    /// errors and agreement computed from the two; the summary counts
    /// changes only.
    #[test]
    fn published_figures_beside_the_predictions() {
        let gups = outcome("armada-gups", &[("GUP/s", 0.0095, 0.01612)], (2.0, 1.0), &[("vm.pmap.section.promotions", 1024), ("vm.pmap.section.p_failures", 3)]);
        let bw = outcome("armada-bw-wr", &[("wr MB/s", 1000.0, 1000.0)], (1.0, 1.0), &[]);
        let rows = published_against(&[gups, bw], false);
        let find = |fig: &str, seed: &str| rows.iter().find(|a| a.figure == fig && a.seed == seed).unwrap();
        let g = find("GUP/s", "000");
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 0.01);
        assert!(close(g.error_off_percent, (0.0095 / 0.003685255 - 1.0) * 100.0) && close(g.error_on_percent, (0.01612 / 0.005530048 - 1.0) * 100.0));
        let (pred, publ) = ((0.01612 / 0.0095 - 1.0) * 100.0, (0.005530048 / 0.003685255 - 1.0) * 100.0);
        assert!(close(g.predicted_change_percent, pred) && close(g.error_change_percent, (pred / publ - 1.0) * 100.0));
        assert_eq!(g.agrees, Some(true));
        let t = find("CPU time", "001");
        assert!(close(t.predicted_change_percent, -50.0) && t.error_off_percent.is_none(), "a scaled run's seconds have no absolute error");
        assert_eq!(t.agrees, Some(true)); // -50 against -34: within 17
        let p = find("vm.pmap.section.promotions", "000");
        assert_eq!((p.predicted_on, p.error_on_percent, p.agrees), (Some(1024.0), Some(0.0), None));
        let f = find("vm.pmap.section.p_failures", "000");
        assert_eq!((f.predicted_on, f.error_on_percent), (Some(3.0), None));
        assert_eq!(find("vm.pmap.section.mappings", "000").error_on_percent, Some(0.0));
        let w = find("Mem write", "001");
        assert_eq!((w.predicted_change_percent, w.agrees), (Some(0.0), Some(false)));
        // GUPS twice (000 +50.1 %, 001 +52 %), CPU time, the write: 3 of 4; headline GUPS and write: 1 of 2.
        assert_eq!(summary(&rows), Summary { agree: 3, of: 4, headline_agree: 1, headline_of: 2 });
        // Under --quick nothing is judged.
        let q = published_against(&[outcome("armada-gups", &[("GUP/s", 0.0095, 0.01612)], (2.0, 1.0), &[])], true);
        assert!(q.iter().all(|a| a.agrees.is_none() && a.error_off_percent.is_none() && a.error_change_percent.is_none()));
    }

    /// The transposes are picked by size and variant, the averages as the
    /// mean of the five sizes, and the 3300 store by its direction.
    #[test]
    fn transposes_by_size_and_the_average_and_the_direction() {
        let mut rows = Vec::new();
        for n in [3000, 3100, 3150, 3175, 3200, 3300] {
            rows.push((format!("{n} load MB/s"), 20.0, 30.0));
            rows.push((format!("{n} store MB/s"), 20.0, if n == 3300 { 19.0 } else { n as f64 / 100.0 }));
        }
        let rows: Vec<(&str, f64, f64)> = rows.iter().map(|(f, a, b)| (f.as_str(), *a, *b)).collect();
        let o = outcome("alpha-transpose-shimizu", &rows, (1.0, 1.0), &[]);
        let r = published_against(&[o], false);
        let avg = r.iter().find(|a| a.figure == "Store Average" && a.headline).unwrap();
        assert!((avg.predicted_on.unwrap() - (30.0 + 31.0 + 31.5 + 31.75 + 32.0) / 5.0).abs() < 1e-9);
        let s3300 = r.iter().find(|a| a.figure == "3300 store").unwrap();
        assert_eq!((s3300.published_fell, s3300.agrees, s3300.published_change_percent), (Some(true), Some(true), None));
        let s3150 = r.iter().find(|a| a.figure == "3150 store" && a.place.contains("second")).unwrap();
        assert_eq!((s3150.published_on, s3150.predicted_on), (Some(24.97), Some(31.5)));
    }

    #[test]
    fn unknown_names_are_refused_with_the_known_ones() {
        let Err(Fail::Input(m)) = select(&["armada-gups".into(), "nope".into()]) else { panic!("accepted") };
        assert!(m.contains("\"nope\"") && m.contains("armada-lat"), "{m}");
        assert_eq!(select(&[]).map(|v| v.len()).ok(), Some(EXPERIMENTS.len()));
    }
}
