//! The workload registry: one `WorkloadDef` per workload splab knows, with
//! what it models, the figure it reports, whether it runs in the model,
//! natively or both, and its parameters with their defaults on each side.
//! Nothing outside this file names a workload by a string; everything
//! else holds a `WorkloadKind`.
//!
//! The parameters of every workload are one struct, `WorkloadParams`: the
//! command line builds it from flags (it is a clap argument group), a
//! sweep file or Python from data (it is serde-serialisable). Each field
//! is optional; `resolve` keeps the fields a workload takes and fills the
//! ones not given from that workload's defaults, so that two descriptions
//! of the same run resolve to the same value.

use clap::Args;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A workload, simulated, native or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    Gups,
    GupsMp,
    Lat,
    Bw,
    Transpose,
    Stream,
    Index,
    Build,
    Forkbomb,
    Stress,
    Realloc,
    Sparse,
    Arenas,
    Requests,
    Misses,
}

/// Where a workload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// In the model (`splab sim`, `compare`).
    Sim,
    /// On this host (`splab native`).
    Native,
}

/// One workload as the registry knows it.
pub struct WorkloadDef {
    pub kind: WorkloadKind,
    /// The name commands take and reports show.
    pub name: &'static str,
    /// What it models.
    pub about: &'static str,
    /// Its parameters in the model, in the order a command line gives
    /// them (empty when it does not run there).
    pub sim: &'static [&'static str],
    /// Its parameters natively (empty when it does not run natively).
    pub native: &'static [&'static str],
    /// Whether the model lays its data out by `--pages` (4k, 2m,
    /// hugepage, mix:F).
    pub pages: bool,
}

use WorkloadKind as K;

/// Every workload, in the order help and errors list them.
pub static WORKLOADS: [WorkloadDef; 15] = [
    WorkloadDef { kind: K::Gups, name: "gups", about: "HPCC RandomAccess: random read-modify-write updates to a table (GUP/s)", sim: &["log2_table", "updates", "verify"], native: &["log2_table", "verify"], pages: true },
    WorkloadDef { kind: K::GupsMp, name: "gups-mp", about: "HPCC RandomAccess, one process with a table of its own per CPU (GUP/s)", sim: &["log2_table", "procs"], native: &[], pages: false },
    WorkloadDef { kind: K::Lat, name: "lat", about: "lmbench lat_mem_rd: a dependent pointer chase over a sweep of sizes (ns/load)", sim: &["max_size", "stride", "pattern", "loads"], native: &["max_size", "stride", "pattern", "loads"], pages: true },
    WorkloadDef { kind: K::Bw, name: "bw", about: "lmbench bw_mem and bw_mmap_rd (MB/s)", sim: &["tests", "size"], native: &[], pages: false },
    WorkloadDef { kind: K::Transpose, name: "transpose", about: "a matrix transpose with strided loads or stores (MB/s)", sim: &["sizes"], native: &["sizes"], pages: true },
    WorkloadDef { kind: K::Stream, name: "stream", about: "STREAM Copy, Scale, Add, Triad (Triad MB/s)", sim: &["n", "ntimes"], native: &["n", "ntimes"], pages: true },
    WorkloadDef { kind: K::Index, name: "index", about: "pgbench -S: B-tree lookups through shared buffers (tps)", sim: &["scale", "clients", "transactions", "insns_per_txn", "round_trip"], native: &["scale", "transactions"], pages: true },
    WorkloadDef { kind: K::Build, name: "build", about: "make -jN: forks, exec, compilers, a multi-threaded link (build time)", sim: &["units", "jobs", "insns_per_source_byte"], native: &[], pages: false },
    WorkloadDef { kind: K::Forkbomb, name: "forkbomb", about: "a process tree grown by fork to a limit (completion time)", sim: &["procs", "fanout", "touch", "inherited"], native: &[], pages: false },
    WorkloadDef { kind: K::Stress, name: "stress", about: "stress --vm: workers mapping, writing and freeing memory (completion time)", sim: &["vm", "vm_bytes", "loops", "verify"], native: &[], pages: false },
    WorkloadDef { kind: K::Realloc, name: "realloc", about: "one allocation doubled until the kernel runs out of memory (fill rate)", sim: &["start_size", "always_move"], native: &[], pages: false },
    WorkloadDef { kind: K::Sparse, name: "sparse", about: "a slab allocator's partly used 2 MB slabs, freed with MADV_DONTNEED (peak MiB)", sim: &["size", "fraction", "rounds"], native: &["size", "fraction", "rounds"], pages: false },
    WorkloadDef { kind: K::Arenas, name: "arenas", about: "a many-threaded allocator, an arena per thread (resident / live bytes)", sim: &["threads", "live", "ops", "heap"], native: &[], pages: false },
    WorkloadDef { kind: K::Requests, name: "requests", about: "a key-value server timing each request, with a forked snapshot (requests/s)", sim: &["keys", "requests", "value_size", "snapshots"], native: &[], pages: false },
    WorkloadDef { kind: K::Misses, name: "misses", about: "independent random misses under several loop shapes (native only)", sim: &[], native: &["log2_table"], pages: false },
];

impl WorkloadKind {
    pub fn def(self) -> &'static WorkloadDef {
        // The registry is in the enum's order (a test checks it).
        &WORKLOADS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// Its parameters on `side`, in command-line order.
    pub fn params(self, side: Side) -> &'static [&'static str] {
        match side {
            Side::Sim => self.def().sim,
            Side::Native => self.def().native,
        }
    }

    pub fn runs_on(self, side: Side) -> bool {
        match side {
            Side::Sim => !self.def().sim.is_empty(),
            Side::Native => !self.def().native.is_empty(),
        }
    }

    /// The workload called `name` that runs on `side`; the error lists the
    /// ones that do.
    pub fn parse(name: &str, side: Side) -> Result<WorkloadKind, String> {
        match WORKLOADS.iter().find(|w| w.name == name) {
            Some(w) if w.kind.runs_on(side) => Ok(w.kind),
            Some(w) => Err(match side {
                Side::Sim => format!("workload {name:?} runs only natively (splab native {})", w.name),
                Side::Native => format!("workload {name:?} runs only in the simulator (splab sim {})", w.name),
            }),
            None => Err(format!("unknown workload {name:?} (known: {})", names(side).join(", "))),
        }
    }

    /// Its parameters' defaults on `side`; a parameter left None here is
    /// the workload's own choice (one per CPU, a measured constant).
    pub fn defaults(self, side: Side) -> WorkloadParams {
        let s = |t: &str| Some(t.to_string());
        let mut p = WorkloadParams::default();
        match (self, side) {
            (K::Gups, Side::Sim) => (p.log2_table, p.verify) = (Some(24), Some(false)),
            (K::Gups, Side::Native) => (p.log2_table, p.verify) = (Some(27), Some(false)),
            (K::GupsMp, _) => p.log2_table = Some(21),
            (K::Lat, _) => {
                (p.max_size, p.stride, p.pattern) = (s("256M"), Some(vec![64, 4096]), s("random"));
                p.loads = Some(if side == Side::Sim { 20_000 } else { 1_000_000 });
            }
            (K::Bw, _) => (p.tests, p.size) = (Some(["rd", "wr", "rdwr", "bcopy_libc", "bcopy_hand", "mmap_rd"].map(String::from).to_vec()), s("128M")),
            (K::Transpose, _) => p.sizes = Some(vec![3000, 3072, 3300]),
            (K::Stream, _) => (p.n, p.ntimes) = (Some(10_000_000), Some(if side == Side::Sim { 5 } else { 10 })),
            (K::Index, Side::Sim) => (p.scale, p.clients, p.transactions, p.round_trip) = (Some(100), Some(1), Some(20_000), Some(true)),
            (K::Index, Side::Native) => (p.scale, p.transactions) = (Some(100), Some(1_000_000)),
            (K::Build, _) => p.units = Some(64),
            (K::Forkbomb, _) => (p.procs, p.fanout, p.touch, p.inherited) = (Some(256), Some(2), s("128K"), s("1M")),
            (K::Stress, _) => (p.vm_bytes, p.loops, p.verify) = (s("256M"), Some(4), Some(false)),
            (K::Realloc, _) => (p.start_size, p.always_move) = (s("1M"), Some(false)),
            (K::Sparse, _) => (p.size, p.fraction, p.rounds) = (s(if side == Side::Sim { "128M" } else { "1G" }), Some(0.25), Some(8)),
            (K::Arenas, _) => (p.live, p.ops, p.heap) = (s("256M"), Some(50_000), s("64M")),
            (K::Requests, _) => (p.keys, p.requests, p.value_size, p.snapshots) = (Some(100_000), Some(400_000), s("512"), Some(1)),
            (K::Misses, _) => p.log2_table = Some(27),
        }
        p
    }

    /// Why `given` does not fit this workload on `side`: the first
    /// parameter it sets that the workload does not take (which would be
    /// left unread), named as its flag, with the ones it takes.
    pub fn foreign_param(self, side: Side, given: &WorkloadParams) -> Option<String> {
        let takes = self.params(side);
        let (name, _) = given.set().into_iter().find(|(n, _)| !takes.contains(n))?;
        let flags = takes.iter().map(|t| flag(t)).collect::<Vec<_>>().join(", ");
        let here = match side {
            Side::Sim => "",
            Side::Native => " natively",
        };
        let others = WORKLOADS.iter().filter(|w| w.kind.params(side).contains(&name)).map(|w| w.name).collect::<Vec<_>>();
        let whose = match (others.is_empty(), side) {
            (false, _) => format!("; it is for {}", others.join(", ")),
            (true, Side::Native) if self.params(Side::Sim).contains(&name) => format!("; it is for the model's run, splab sim {}", self.name()),
            (true, _) => String::new(),
        };
        Some(format!("{} does not apply to {}{here} (it takes {}{whose})", flag(name), self.name(), if flags.is_empty() { "none".into() } else { flags }))
    }

    /// `given` with only this workload's parameters on `side`, each not
    /// given taken from its defaults.
    pub fn resolve(self, side: Side, given: &WorkloadParams) -> WorkloadParams {
        given.keep(self.params(side), &self.defaults(side))
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parameter's flag: `log2_table` is `--log2-table`.
pub fn flag(name: &str) -> String {
    format!("--{}", name.replace('_', "-"))
}

/// Why `given` does not fit a run that takes no workload parameters
/// (`what`: a program run, a trace replay): the first one it sets.
pub fn unread_by(what: &str, given: &WorkloadParams) -> Option<String> {
    given.set().first().map(|(n, _)| format!("{} does not apply to {what} (it takes no workload parameters)", flag(n)))
}

/// The names of the workloads that run on `side`.
pub fn names(side: Side) -> Vec<&'static str> {
    WORKLOADS.iter().filter(|w| w.kind.runs_on(side)).map(|w| w.name).collect()
}

/// The names of the workloads the model lays out by `--pages`.
pub fn pages_names() -> Vec<&'static str> {
    WORKLOADS.iter().filter(|w| w.pages).map(|w| w.name).collect()
}

/// A value a parameter holds, as a command line gives it.
pub trait FlagValue {
    fn flag_text(&self) -> String;
}

macro_rules! flag_value {
    ($($t:ty),*) => {$(impl FlagValue for $t {
        fn flag_text(&self) -> String {
            self.to_string()
        }
    })*};
}
flag_value!(u32, u64, usize, f64, bool, String);

impl<T: FlagValue> FlagValue for Vec<T> {
    fn flag_text(&self) -> String {
        self.iter().map(FlagValue::flag_text).collect::<Vec<_>>().join(",")
    }
}

/// Parameters that are switches on the command line (`--verify`), given a
/// value nowhere else.
const SWITCHES: &[&str] = &["verify", "always_move"];

macro_rules! params {
    ($( $(#[$meta:meta])* $field:ident : $ty:ty, )*) => {
        /// Every workload's parameters; each workload reads the ones it
        /// has (`WorkloadDef::sim`, `::native`).
        #[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct WorkloadParams {
            $( $(#[$meta])* #[serde(skip_serializing_if = "Option::is_none")] pub $field: Option<$ty>, )*
        }

        /// The names of `WorkloadParams`' fields, as a sweep file and
        /// Python name them (the flag is the name with `-` for `_`).
        pub const PARAMS: &[&str] = &[$(stringify!($field)),*];

        impl WorkloadParams {
            /// The fields named in `names`, each from `self` or else from
            /// `defaults`; the others None.
            pub fn keep(&self, names: &[&str], defaults: &WorkloadParams) -> WorkloadParams {
                WorkloadParams { $( $field: if names.contains(&stringify!($field)) { self.$field.clone().or_else(|| defaults.$field.clone()) } else { None }, )* }
            }

            /// The fields set, in the struct's order, as a command line
            /// gives their values.
            pub fn set(&self) -> Vec<(&'static str, String)> {
                vec![$( (stringify!($field), self.$field.as_ref().map(FlagValue::flag_text)), )*]
                    .into_iter()
                    .filter_map(|(n, v)| Some((n, v?)))
                    .collect()
            }
        }
    };
}

params! {
    /// gups, gups-mp, misses: log2 of the table size in 64-bit words, per
    /// process for gups-mp [default: 24 for gups, 21 for gups-mp; natively
    /// 27, a 1 GiB table].
    #[arg(long, value_name = "N")]
    log2_table: u32,
    /// gups: updates to time, fewer than HPCC's 4 x the table (the rate
    /// is a steady state that fewer updates reach as well).
    #[arg(long, value_name = "N")]
    updates: u64,
    /// gups: run the HPCC verification pass; stress: read every page back
    /// and check it before freeing it (in the model both imply
    /// --track-contents).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    verify: bool,
    /// gups-mp: processes, each with a table of its own [default: one per
    /// CPU of the machine]; forkbomb: processes the tree grows to, the
    /// first included [default: 256].
    #[arg(long, value_name = "N")]
    procs: usize,
    /// forkbomb: children each process forks (the shell's fork bomb forks
    /// two) [default: 2].
    #[arg(long, value_name = "N")]
    fanout: usize,
    /// forkbomb: bytes each process maps and writes of its own [default:
    /// 128K].
    #[arg(long, value_name = "SIZE")]
    touch: String,
    /// forkbomb: bytes of data the first process writes and every other
    /// inherits copy-on-write (each writes every fourth page of it)
    /// [default: 1M].
    #[arg(long, value_name = "SIZE")]
    inherited: String,
    /// lat: largest array of the size sweep (which starts at 4K) [default:
    /// 256M].
    #[arg(long, value_name = "SIZE")]
    max_size: String,
    /// lat: strides in bytes between chain elements, comma-separated; the
    /// figure is for the first [default: 64,4096].
    #[arg(long, value_name = "BYTES,...", value_delimiter = ',')]
    stride: Vec<u64>,
    /// lat: chase order, random (one random cycle) or seq (ascending)
    /// [default: random].
    #[arg(long, value_name = "random|seq")]
    pattern: String,
    /// lat: timed dependent loads per array size [default: 20000; natively
    /// 1000000].
    #[arg(long, value_name = "N")]
    loads: u64,
    /// bw: tests to run, comma-separated, from rd, wr, rdwr, bcopy_libc,
    /// bcopy_hand, mmap_rd; the figure is the first one's [default: all,
    /// in that order].
    #[arg(long, value_name = "TEST,...", value_delimiter = ',')]
    tests: Vec<String>,
    /// bw: bytes each test moves (bcopy tests map twice this) [default:
    /// 128M]; sparse: bytes of the arena, a multiple of 2 MB [default:
    /// 128M; natively 1G].
    #[arg(long, value_name = "SIZE")]
    size: String,
    /// transpose: matrix sizes N (N x N doubles), comma-separated [default:
    /// 3000,3072,3300].
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    sizes: Vec<u64>,
    /// stream: elements per array (STREAM_ARRAY_SIZE) [default: 10000000].
    #[arg(long, value_name = "N")]
    n: u64,
    /// stream: times each kernel runs (NTIMES; the first is not counted)
    /// [default: 5; natively 10, STREAM's own]. Runs in the model are
    /// deterministic, so later runs differ only by the caches the first
    /// one warmed.
    #[arg(long, value_name = "N")]
    ntimes: u32,
    /// index: pgbench scaling factor (100000 accounts each) [default: 100].
    #[arg(long, value_name = "N")]
    scale: u64,
    /// index: clients, each a backend process on a CPU of its own
    /// [default: 1].
    #[arg(long, value_name = "N")]
    clients: usize,
    /// index: transactions per client (pgbench -t) [default: 20000;
    /// natively 1000000].
    #[arg(long, value_name = "N")]
    transactions: u64,
    /// index: the backend's instructions per transaction beside the
    /// lookup's memory references (parsing, planning, the executor),
    /// dispatched at the profile's `[core] width`; 0: none
    /// [default: 101713, measured on a PostgreSQL 15 backend].
    #[arg(long, value_name = "N")]
    insns_per_txn: u64,
    /// index: the round trip to pgbench: its instructions, the system calls
    /// on both sides and, where pgbench shares a backend's CPU, the switches
    /// to it and back (false: the backends alone) [default: true].
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    round_trip: bool,
    /// build: compiler instructions (gcc, cc1 and as) per byte of a unit's
    /// source, dispatched at the profile's `[core] width`; 0: none
    /// [default: 36879, measured with GCC 12 at -O2].
    #[arg(long, value_name = "N")]
    insns_per_source_byte: u64,
    /// build: compilation units (source files), one compiler process each
    /// [default: 64].
    #[arg(long, value_name = "N")]
    units: usize,
    /// build: compilers running at once (make -j) [default: one per CPU].
    #[arg(long, value_name = "N")]
    jobs: usize,
    /// stress: vm workers, forked from one parent [default: one per CPU].
    #[arg(long, value_name = "N")]
    vm: usize,
    /// stress: bytes each worker maps, touches and unmaps per loop
    /// [default: 256M].
    #[arg(long, value_name = "SIZE")]
    vm_bytes: String,
    /// stress: rounds of mmap, touch, munmap per worker [default: 4].
    #[arg(long, value_name = "N")]
    loops: u64,
    /// sparse: share of each 2 MB slab's pages live (the arena is --size)
    /// [default: 0.25].
    #[arg(long, value_name = "F")]
    fraction: f64,
    /// sparse: rounds of freeing and rewriting a quarter of the live pages
    /// [default: 8].
    #[arg(long, value_name = "N")]
    rounds: u32,
    /// arenas: threads, each with an arena of its own [default: one per
    /// CPU of the machine].
    #[arg(long, value_name = "N")]
    threads: usize,
    /// arenas: bytes the threads hold together after growing (they end
    /// holding a quarter of it) [default: 256M].
    #[arg(long, value_name = "SIZE")]
    live: String,
    /// arenas: objects each thread frees and replaces after growing
    /// [default: 50000].
    #[arg(long, value_name = "N")]
    ops: u64,
    /// arenas: bytes of each heap an arena maps (glibc's HEAP_MAX_SIZE)
    /// [default: 64M].
    #[arg(long, value_name = "SIZE")]
    heap: String,
    /// requests: keys loaded before the timed requests [default: 100000].
    #[arg(long, value_name = "N")]
    keys: u64,
    /// requests: timed requests (80% GET, 20% SET, half of those new keys)
    /// [default: 400000].
    #[arg(long, value_name = "N")]
    requests: u64,
    /// requests: mean value size in bytes (values from half to one and a
    /// half times it) [default: 512].
    #[arg(long, value_name = "SIZE")]
    value_size: String,
    /// requests: forks of the server for a snapshot (Redis's BGSAVE)
    /// during the timed requests, evenly spaced [default: 1].
    #[arg(long, value_name = "N")]
    snapshots: u32,
    /// realloc: size of the first allocation (then doubled until memory
    /// runs out) [default: 1M].
    #[arg(long, value_name = "SIZE")]
    start_size: String,
    /// realloc: always move and copy (the default grows in place when the
    /// range after the allocation is free, as jemalloc does).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    always_move: bool,
}

impl WorkloadParams {
    /// The fields set as command-line flags, in `order` first (a
    /// workload's parameter order), then the rest by name.
    pub fn flags(&self, order: &[&str]) -> Vec<String> {
        let mut set = self.set();
        set.sort_by_key(|(n, _)| (order.iter().position(|o| o == n).unwrap_or(order.len()), *n));
        let mut out = Vec::new();
        for (name, value) in set {
            let flag = flag(name);
            match (SWITCHES.contains(&name), value.as_str()) {
                (true, "true") => out.push(flag),
                (true, _) => {}
                (false, _) => out.extend([flag, value]),
            }
        }
        out
    }
}

/// A resolved parameter, or an error naming it (resolution fills every
/// parameter that has a default, so this is never expected to fail).
pub fn need<T: Clone>(v: &Option<T>, name: &str) -> Result<T, String> {
    v.clone().ok_or_else(|| format!("{}: no value and no default", flag(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_in_the_enums_order_and_names_real_parameters() {
        for (i, w) in WORKLOADS.iter().enumerate() {
            assert_eq!(w.kind as usize, i, "{}", w.name);
            for p in w.sim.iter().chain(w.native) {
                assert!(PARAMS.contains(p), "{}: no parameter {p}", w.name);
            }
            assert!(w.kind.runs_on(Side::Sim) || w.kind.runs_on(Side::Native));
        }
        // Every parameter belongs to some workload.
        for p in PARAMS {
            assert!(WORKLOADS.iter().any(|w| w.sim.contains(p) || w.native.contains(p)), "{p} is no workload's");
        }
    }

    #[test]
    fn resolving_keeps_the_workloads_own_parameters_with_defaults() {
        let given = WorkloadParams { log2_table: Some(16), max_size: Some("1M".into()), ..Default::default() };
        let g = WorkloadKind::Gups.resolve(Side::Sim, &given);
        assert_eq!((g.log2_table, g.verify, g.max_size.as_deref()), (Some(16), Some(false), None));
        let l = WorkloadKind::Lat.resolve(Side::Sim, &given);
        assert_eq!((l.log2_table, l.max_size.as_deref(), l.loads), (None, Some("1M"), Some(20_000)));
        assert_eq!(WorkloadKind::Lat.resolve(Side::Native, &given).loads, Some(1_000_000));
        // Defaults only, given or not: the same value.
        let d = WorkloadKind::Gups.resolve(Side::Sim, &WorkloadParams::default());
        assert_eq!(WorkloadKind::Gups.resolve(Side::Sim, &d), d);
    }

    #[test]
    fn names_parse_by_side() {
        assert_eq!(WorkloadKind::parse("gups-mp", Side::Sim), Ok(WorkloadKind::GupsMp));
        assert!(WorkloadKind::parse("misses", Side::Sim).unwrap_err().contains("only natively"));
        assert!(WorkloadKind::parse("build", Side::Native).unwrap_err().contains("only in the simulator"));
        assert!(WorkloadKind::parse("nope", Side::Sim).unwrap_err().contains("\"nope\""));
    }

    #[test]
    fn flags_follow_the_workloads_order() {
        let p = WorkloadParams { loads: Some(20000), max_size: Some("256M".into()), stride: Some(vec![64]), pattern: Some("random".into()), verify: Some(false), ..Default::default() };
        assert_eq!(p.flags(WorkloadKind::Lat.params(Side::Sim)).join(" "), "--max-size 256M --stride 64 --pattern random --loads 20000");
        let v = WorkloadParams { verify: Some(true), round_trip: Some(false), ..Default::default() };
        assert_eq!(v.flags(&[]).join(" "), "--round-trip false --verify");
    }
}
