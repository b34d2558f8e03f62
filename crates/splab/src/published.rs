//! The published measurements `splab reproduce` sets beside its
//! predictions: every figure in the seed documents (../shared/seeds/, 000
//! to 004, beside the project's directory) that one of the experiments
//! can express, as the seed prints it, with the place it stands and a
//! short verbatim quote (whitespace aside) that a test finds in the seed.
//!
//! This is data only, read after the runs: nothing in the model, the
//! profiles or the experiments' parameters is taken from it.
//!
//! What is always true of an entry: its experiment is one of
//! `reproduce::EXPERIMENTS`; its seed is one of `SEEDS`; its values are
//! finite, and off figures are not zero; a change is per cent of the off
//! figure, (on - off) / off, in the figure's own unit (a time that fell
//! is a negative change, a rate that rose a positive one).

use serde::Serialize;

/// One seed document.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Seed {
    /// The file's number, "000" to "004".
    pub id: &'static str,
    /// Its file name in the seeds directory.
    pub file: &'static str,
    pub title: &'static str,
}

pub const SEEDS: &[Seed] = &[
    Seed { id: "000", file: "000_b3e021cd688d7ae1.txt", title: "Z. Bodek, \"HEADS UP: Superpages support for ARMv6/v7\", freebsd-arm, 26 Aug 2013 (Armada XP)" },
    Seed { id: "001", file: "001_aeb320d0d627c9cd.txt", title: "Z. Bodek, \"Transparent Superpages for FreeBSD on ARM\" (Armada XP)" },
    Seed { id: "002", file: "002_b438ee69b0067f1c.txt", title: "Gelato@UNSW wiki, ShimizuSuperPages (Shimizu's patch on an Alpha)" },
    Seed { id: "003", file: "003_503db9ef865a1616.txt", title: "FreeBSD D25237, superpages for powerpc64 with a hashed page table (POWER8, POWER9 Talos II)" },
    Seed { id: "004", file: "004_2359face930a49d8.txt", title: "S. Bennett, \"FreeBSD tweak may yield better performance\", tor-talk, 3 Jan 2010 (no figure the model expresses)" },
];

/// Which of an experiment's predicted figures an entry is set beside.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pick {
    /// The experiment's one figure (GUP/s, ns a load, MB/s, build time,
    /// tps).
    Figure,
    /// The simulated seconds of the timed part.
    Seconds,
    /// One transpose: size and variant ("load" or "store").
    Transpose(u64, &'static str),
    /// The mean of the transposes of one variant at these sizes.
    TransposeMean(&'static [u64], &'static str),
    /// A counter of the run with superpages on (absent: 0).
    Counter(&'static str),
}

/// What the seed gives of a figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// Both figures.
    OffOn { off: f64, on: f64 },
    /// Only the change, per cent of the off figure.
    Change(f64),
    /// Only the direction of the change: `true` if the figure fell.
    Fell(bool),
    /// A counter's count in the run with superpages on.
    Count(f64),
}

impl Value {
    pub fn off(&self) -> Option<f64> {
        match *self {
            Value::OffOn { off, .. } => Some(off),
            _ => None,
        }
    }

    pub fn on(&self) -> Option<f64> {
        match *self {
            Value::OffOn { on, .. } | Value::Count(on) => Some(on),
            _ => None,
        }
    }

    /// The change in per cent, where the seed gives it or both figures.
    pub fn change_percent(&self) -> Option<f64> {
        match *self {
            Value::OffOn { off, on } => Some(change_percent(off, on)),
            Value::Change(c) => Some(c),
            _ => None,
        }
    }
}

/// One published figure and where it stands.
#[derive(Clone, Copy, Debug)]
pub struct Measurement {
    /// The `splab reproduce` experiment that models it.
    pub experiment: &'static str,
    /// What the seed calls the figure.
    pub figure: &'static str,
    pub pick: Pick,
    /// The seed's id (`SEEDS`).
    pub seed: &'static str,
    /// Section, table or figure of the seed.
    pub place: &'static str,
    /// Verbatim from the seed (runs of whitespace as one space): the
    /// figures themselves or the sentence that gives them.
    pub quotes: &'static [&'static str],
    pub unit: &'static str,
    pub value: Value,
    /// Whether the experiment's absolute figures can be set beside the
    /// seed's (false where the run is a scaled part of the original, so
    /// only its change compares).
    pub absolute: bool,
    /// One of the seeds' headline results, one a machine and experiment:
    /// GUPS, lat_mem_rd, bw_mem rd and wr, buildworld with GCC on the
    /// Armada XP; RandomAccess, pgbench -S on POWER8 and POWER9 and
    /// buildworld on POWER9; the Alpha's load and store averages.
    pub headline: bool,
    /// How the figure is read, where that needs saying.
    pub note: &'static str,
}

/// (on - off) / off, per cent.
pub fn change_percent(off: f64, on: f64) -> f64 {
    (on - off) / off * 100.0
}

/// The error of a predicted figure against the published one, per cent
/// of the published (a published 0 matched exactly is 0; otherwise none).
pub fn error_percent(published: f64, predicted: f64) -> Option<f64> {
    if published != 0.0 {
        Some((predicted - published) / published.abs() * 100.0)
    } else {
        (predicted == 0.0).then_some(0.0)
    }
}

/// The agreement criterion: the predicted change has the published
/// change's sign and lies within half of it, |predicted - published| <=
/// |published| / 2. A published change of 0 has no sign to agree with.
pub fn agrees(published_change: f64, predicted_change: f64) -> bool {
    published_change != 0.0
        && predicted_change.signum() == published_change.signum()
        && (predicted_change - published_change).abs() <= published_change.abs() / 2.0
}

/// Hours and minutes as seconds.
const fn hm(h: u32, m: u32) -> f64 {
    (h * 3600 + m * 60) as f64
}

const ARMADA_BW_T1: &[&str] = &["645,4 305,4 432,3", "660,0 312,4 446,9"];
const ARMADA_BW_T2: &[&str] = &["681 3043 238,8", "696 3300 148,4"];
const BUILD_T4: &[&str] = &["6h 36min 6h 16min", "5h 14min 6h 15min"];
const GUPS_000: &[&str] = &["0.003685255 Billion(10^9) Updates per second [GUP/s]", "0.005530048 Billion(10^9) Updates per second [GUP/s]"];
const SECTION_COUNTERS: &str = "the counters printed before and after the run with superpages on; the figure is the difference, the run's own";
const ALPHA_SIZES: &[u64] = &[3000, 3100, 3150, 3175, 3200];
const ALPHA_TABLE_1: &str = "Testing Results, first Matrix Transpose table (\"before the final problems were solved\")";
const ALPHA_TABLE_2: &str = "Testing Results, second Matrix Transpose table";
const ALPHA_ROW: &str = "mean of several runs under Shimizu's patch, superpages on and off (the seed's columns: on, then off)";

/// One row of an Alpha transpose table: size, variant, the seed's on and
/// off figures (in that order, as the seed has them) and its quote.
macro_rules! alpha {
    ($place:expr, $n:literal, $variant:literal, $on:literal, $off:literal, $quote:literal) => {
        Measurement {
            experiment: "alpha-transpose-shimizu",
            figure: concat!(stringify!($n), " ", $variant),
            pick: Pick::Transpose($n, $variant),
            seed: "002",
            place: $place,
            quotes: &[$quote],
            unit: "MB/s",
            value: Value::OffOn { off: $off, on: $on },
            absolute: true,
            headline: false,
            note: ALPHA_ROW,
        }
    };
}

/// A section counter around the Armada XP's GUPS run.
macro_rules! section {
    ($name:literal, $count:literal, $quotes:expr) => {
        Measurement {
            experiment: "armada-gups",
            figure: $name,
            pick: Pick::Counter($name),
            seed: "000",
            place: "Exemplary GUPS results, superpages enabled",
            quotes: $quotes,
            unit: "count",
            value: Value::Count($count),
            absolute: true,
            headline: false,
            note: SECTION_COUNTERS,
        }
    };
}

/// Every published figure an experiment expresses, in the experiments'
/// order.
pub const MEASUREMENTS: &[Measurement] = &[
    // Armada XP (FreeBSD armv7, 1 MB sections).
    Measurement {
        experiment: "armada-gups",
        figure: "GUP/s",
        pick: Pick::Figure,
        seed: "000",
        place: "Exemplary GUPS results (./gups, 2^27 words, 536870912 updates)",
        quotes: GUPS_000,
        unit: "GUP/s",
        value: Value::OffOn { off: 0.003685255, on: 0.005530048 },
        absolute: true,
        headline: true,
        note: "CPU time 145.68 s off, 97.09 s on, the same rates; the model times 2^25 of the 2^29 updates on the full table",
    },
    Measurement {
        experiment: "armada-gups",
        figure: "updates a second",
        pick: Pick::Figure,
        seed: "001",
        place: "5.1 GUPS",
        quotes: &["Number of updates performed in the same amount of time has increased by 52%"],
        unit: "GUP/s",
        value: Value::Change(52.0),
        absolute: true,
        headline: false,
        note: "the paper's change; the announcement's own figures (000) give +50.1 %",
    },
    Measurement {
        experiment: "armada-gups",
        figure: "CPU time",
        pick: Pick::Seconds,
        seed: "001",
        place: "5.1 GUPS",
        quotes: &["measured CPU time usage and real time duration dropped by 34%"],
        unit: "s",
        value: Value::Change(-34.0),
        absolute: false,
        headline: false,
        note: "predicted: the simulated seconds of the timed updates (2^25 of the 2^29)",
    },
    section!("vm.pmap.section.promotions", 1024.0, &["vm.pmap.section.promotions: 1024", "vm.pmap.section.promotions: 2048"]),
    section!("vm.pmap.section.p_failures", 0.0, &["vm.pmap.section.p_failures: 58"]),
    section!("vm.pmap.section.mappings", 0.0, &["vm.pmap.section.mappings: 0"]),
    section!("vm.pmap.section.demotions", 0.0, &["vm.pmap.section.demotions: 0"]),
    Measurement {
        experiment: "armada-lat",
        figure: "Mem latency",
        pick: Pick::Figure,
        seed: "001",
        place: "5.2 LMBench, Table 2, \"Mem latency [ns]\"",
        quotes: ARMADA_BW_T2,
        unit: "ns",
        value: Value::OffOn { off: 238.8, on: 148.4 },
        absolute: true,
        headline: true,
        note: "Table 3 calls it \"Rand mem latency\" (-37.85 %); the seed names neither size nor stride: predicted at 256 MB, stride 64, random chase",
    },
    Measurement {
        experiment: "armada-bw-rd",
        figure: "Mem read",
        pick: Pick::Figure,
        seed: "001",
        place: "5.2 LMBench, Table 2, \"Mem read [MB/s]\"",
        quotes: ARMADA_BW_T2,
        unit: "MB/s",
        value: Value::OffOn { off: 681.0, on: 696.0 },
        absolute: true,
        headline: true,
        note: "the buffer size is not given; the paper says the bandwidth tests used floating point, which FreeBSD/arm did not yet support",
    },
    Measurement {
        experiment: "armada-bw-wr",
        figure: "Mem write",
        pick: Pick::Figure,
        seed: "001",
        place: "5.2 LMBench, Table 2, \"Mem write [MB/s]\"",
        quotes: ARMADA_BW_T2,
        unit: "MB/s",
        value: Value::OffOn { off: 3043.0, on: 3300.0 },
        absolute: true,
        headline: true,
        note: "Table 3: +8.44 %; the machine wrote at 4.5 times the rate it read",
    },
    Measurement {
        experiment: "armada-bw-bcopy-libc",
        figure: "Bcopy (libc)",
        pick: Pick::Figure,
        seed: "001",
        place: "5.2 LMBench, Table 1, \"Bcopy (libc) [MB/s]\"",
        quotes: ARMADA_BW_T1,
        unit: "MB/s",
        value: Value::OffOn { off: 305.4, on: 312.4 },
        absolute: true,
        headline: false,
        note: "",
    },
    Measurement {
        experiment: "armada-bw-bcopy-hand",
        figure: "Bcopy (hand)",
        pick: Pick::Figure,
        seed: "001",
        place: "5.2 LMBench, Table 1, \"Bcopy (hand) [MB/s]\"",
        quotes: ARMADA_BW_T1,
        unit: "MB/s",
        value: Value::OffOn { off: 432.3, on: 446.9 },
        absolute: true,
        headline: false,
        note: "",
    },
    Measurement {
        experiment: "armada-bw-mmap-rd",
        figure: "Mmap reread",
        pick: Pick::Figure,
        seed: "001",
        place: "5.2 LMBench, Table 1, \"Mmap reread [MB/s]\"",
        quotes: ARMADA_BW_T1,
        unit: "MB/s",
        value: Value::OffOn { off: 645.4, on: 660.0 },
        absolute: true,
        headline: false,
        note: "the text gives +2.26 %",
    },
    Measurement {
        experiment: "armada-buildworld",
        figure: "buildworld, GCC",
        pick: Pick::Figure,
        seed: "001",
        place: "5.3 Self-hosted world build, Table 4, \"GCC\"",
        quotes: BUILD_T4,
        unit: "s",
        value: Value::OffOn { off: hm(6, 36), on: hm(5, 14) },
        absolute: false,
        headline: true,
        note: "6h 36min and 5h 14min (also in 000); predicted: two compilations by GCC, not a world, so only the change compares",
    },
    Measurement {
        experiment: "armada-buildworld",
        figure: "buildworld, clang",
        pick: Pick::Figure,
        seed: "001",
        place: "5.3 Self-hosted world build, Table 4, \"CLANG\"",
        quotes: BUILD_T4,
        unit: "s",
        value: Value::OffOn { off: hm(6, 16), on: hm(6, 15) },
        absolute: false,
        headline: false,
        note: "6h 16min and 6h 15min, \"no significant change\": half of a minute in six hours is a strict bound; the model has one compiler for GCC and clang",
    },
    // POWER8 and POWER9 (FreeBSD powerpc64, hashed page table, 16 MB).
    Measurement {
        experiment: "power8-randomaccess",
        figure: "RandomAccess",
        pick: Pick::Figure,
        seed: "003",
        place: "the description, HPC Challenge RandomAccess",
        quotes: &["With superpages enabled, a 60% boost on a POWER8 machine and 23% on Talos was measured."],
        unit: "GUP/s",
        value: Value::Change(60.0),
        absolute: true,
        headline: true,
        note: "table size and update count not given",
    },
    Measurement {
        experiment: "power9-randomaccess",
        figure: "RandomAccess",
        pick: Pick::Figure,
        seed: "003",
        place: "the description, HPC Challenge RandomAccess",
        quotes: &["With superpages enabled, a 60% boost on a POWER8 machine and 23% on Talos was measured."],
        unit: "GUP/s",
        value: Value::Change(23.0),
        absolute: true,
        headline: true,
        note: "Talos II (POWER9)",
    },
    Measurement {
        experiment: "power8-pgbench",
        figure: "pgbench -S tps",
        pick: Pick::Figure,
        seed: "003",
        place: "the description, pgbench",
        quotes: &["Running pgbench showed about 5% boost on POWER8 and 8.4% on Talos, when taking the average TPS (transactions per second) from 10 select-only runs of 5 seconds (pgbench -S -T 5)."],
        unit: "transactions/s",
        value: Value::Change(5.0),
        absolute: true,
        headline: true,
        note: "mean of 10 runs of pgbench -S -T 5, scale 150, one client and thread",
    },
    Measurement {
        experiment: "power9-pgbench",
        figure: "pgbench -S tps",
        pick: Pick::Figure,
        seed: "003",
        place: "the description, pgbench",
        quotes: &["Running pgbench showed about 5% boost on POWER8 and 8.4% on Talos, when taking the average TPS (transactions per second) from 10 select-only runs of 5 seconds (pgbench -S -T 5)."],
        unit: "transactions/s",
        value: Value::Change(8.4),
        absolute: true,
        headline: true,
        note: "Talos II (POWER9); mean of 10 runs of pgbench -S -T 5, scale 150, one client and thread",
    },
    Measurement {
        experiment: "power9-buildworld",
        figure: "buildworld -j32",
        pick: Pick::Figure,
        seed: "003",
        place: "the description, buildworld times on a Talos II, 32 GB, r366072, GENERIC64",
        quotes: &["With D25237 and vm.pmap.superpages_enabled=0: >>> World built in 7781 seconds", "With D25237 and vm.pmap.superpages_enabled=1: >>> World built in 7996 seconds"],
        unit: "s",
        value: Value::OffOn { off: 7781.0, on: 7996.0 },
        absolute: false,
        headline: true,
        note: "off: the change applied, superpages disabled (the kernel without it: 7850 s); predicted: two compilations by GCC, not a world, so only the change compares",
    },
    // Alpha 21264 (Shimizu's patch on Linux 2.6.0: 8 KB pages; 64 KB, 512 KB, 4 MB).
    alpha!(ALPHA_TABLE_1, 3000, "store", 25.30, 19.93, "3000 Store 25.30MB/sec 0.02 19.93MB/sec"),
    alpha!(ALPHA_TABLE_1, 3000, "load", 29.32, 21.72, "3000 Load 29.32MB/sec 0.00 21.72MB/sec"),
    alpha!(ALPHA_TABLE_1, 3100, "store", 25.19, 19.68, "3100 Store 25.19MB/sec 0.02 19.68MB/sec"),
    alpha!(ALPHA_TABLE_1, 3100, "load", 26.64, 20.14, "3100 Load 26.64MB/sec 0.00 20.14MB/sec"),
    alpha!(ALPHA_TABLE_1, 3150, "store", 24.87, 19.43, "3150 Store 24.87MB/sec 0.02 19.43MB/sec"),
    alpha!(ALPHA_TABLE_1, 3150, "load", 25.56, 19.35, "3150 Load 25.56MB/sec 0.01 19.35MB/sec"),
    alpha!(ALPHA_TABLE_1, 3175, "store", 25.41, 19.66, "3175 Store 25.41MB/sec 0.02 19.66MB/sec"),
    alpha!(ALPHA_TABLE_1, 3175, "load", 29.41, 21.50, "3175 Load 29.41MB/sec 0.01 21.50MB/sec"),
    alpha!(ALPHA_TABLE_1, 3200, "store", 22.91, 20.82, "3200 Store 22.91MB/sec 0.01 20.82MB/sec"),
    alpha!(ALPHA_TABLE_1, 3200, "load", 29.23, 22.76, "3200 Load 29.23MB/sec 0.00 22.76MB/sec"),
    Measurement {
        experiment: "alpha-transpose-shimizu",
        figure: "Store Average",
        pick: Pick::TransposeMean(ALPHA_SIZES, "store"),
        seed: "002",
        place: ALPHA_TABLE_1,
        quotes: &["Store Average 23.76MB/sec 0.00 19.75MB/sec"],
        unit: "MB/s",
        value: Value::OffOn { off: 19.75, on: 23.76 },
        absolute: true,
        headline: false,
        note: "the seed's average, not its rows' mean (24.74 on, 19.90 off); predicted: the mean of the five sizes",
    },
    Measurement {
        experiment: "alpha-transpose-shimizu",
        figure: "Load Average",
        pick: Pick::TransposeMean(ALPHA_SIZES, "load"),
        seed: "002",
        place: ALPHA_TABLE_1,
        quotes: &["Load Average 26.79MB/sec 0.00 20.67MB/sec"],
        unit: "MB/s",
        value: Value::OffOn { off: 20.67, on: 26.79 },
        absolute: true,
        headline: false,
        note: "the seed's average, not its rows' mean (28.03 on, 21.09 off); predicted: the mean of the five sizes",
    },
    alpha!(ALPHA_TABLE_2, 3000, "store", 25.46, 20.03, "3000 Store 25.46MB/sec 0.02 20.03MB/sec"),
    alpha!(ALPHA_TABLE_2, 3000, "load", 29.47, 21.86, "3000 Load 29.47MB/sec 0.01 21.86MB/sec"),
    alpha!(ALPHA_TABLE_2, 3100, "store", 25.32, 19.83, "3100 Store 25.32MB/sec 0.02 19.83MB/sec"),
    alpha!(ALPHA_TABLE_2, 3100, "load", 26.87, 20.19, "3100 Load 26.87MB/sec 0.00 20.19MB/sec"),
    alpha!(ALPHA_TABLE_2, 3150, "store", 24.97, 19.55, "3150 Store 24.97MB/sec 0.01 19.55MB/sec"),
    alpha!(ALPHA_TABLE_2, 3150, "load", 25.68, 19.42, "3150 Load 25.68MB/sec 0.00 19.42MB/sec"),
    alpha!(ALPHA_TABLE_2, 3175, "store", 25.52, 19.99, "3175 Store 25.52MB/sec 0.03 19.99MB/sec"),
    alpha!(ALPHA_TABLE_2, 3175, "load", 29.51, 21.62, "3175 Load 29.51MB/sec 0.00 21.62MB/sec"),
    alpha!(ALPHA_TABLE_2, 3200, "store", 22.94, 20.82, "3200 Store 22.94MB/sec 0.01 20.82MB/sec"),
    alpha!(ALPHA_TABLE_2, 3200, "load", 29.30, 22.86, "3200 Load 29.30MB/sec 0.00 22.86MB/sec"),
    Measurement {
        experiment: "alpha-transpose-shimizu",
        figure: "Store Average",
        pick: Pick::TransposeMean(ALPHA_SIZES, "store"),
        seed: "002",
        place: ALPHA_TABLE_2,
        quotes: &["Store Average 24.84MB/sec 0.77 19.92MB/sec"],
        unit: "MB/s",
        value: Value::OffOn { off: 19.92, on: 24.84 },
        absolute: true,
        headline: true,
        note: "the seed's average (its rows' mean on; off, the rows' mean is 20.04); the text: \"approximately 20% on the store strobe\"; predicted: the mean of the five sizes",
    },
    Measurement {
        experiment: "alpha-transpose-shimizu",
        figure: "Load Average",
        pick: Pick::TransposeMean(ALPHA_SIZES, "load"),
        seed: "002",
        place: ALPHA_TABLE_2,
        quotes: &["Load Average 28.17MB/sec 1.51 20.86MB/sec"],
        unit: "MB/s",
        value: Value::OffOn { off: 20.86, on: 28.17 },
        absolute: true,
        headline: true,
        note: "the seed's average (its rows' mean on; off, the rows' mean is 21.19); the text: \"approximately 26% on the load strobe\"; predicted: the mean of the five sizes",
    },
    Measurement {
        experiment: "alpha-transpose-shimizu",
        figure: "3300 store",
        pick: Pick::Transpose(3300, "store"),
        seed: "002",
        place: "Testing Results, the paragraph after the tables",
        quotes: &["the throughput of the store strobe is less for a kernel with SuperPages than that of a non-Superpage kernel"],
        unit: "MB/s",
        value: Value::Fell(true),
        absolute: true,
        headline: false,
        note: "its figures are in the \"extended results\", not in the seed: only the direction compares",
    },
];

/// The seed with this id.
pub fn seed(id: &str) -> Option<&'static Seed> {
    SEEDS.iter().find(|s| s.id == id)
}

/// Runs of whitespace as one space, ends trimmed: how quotes are matched.
pub fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// The seeds directory: $SPLAB_SEEDS, or `shared/seeds` beside one of
    /// the crate's ancestors (the project's checkouts sit beside it).
    fn seeds_dir() -> Option<PathBuf> {
        if let Some(d) = std::env::var_os("SPLAB_SEEDS") {
            return Some(PathBuf::from(d));
        }
        let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        here.ancestors().map(|a| a.join("shared").join("seeds")).find(|d| d.is_dir())
    }

    #[test]
    fn every_entry_names_a_seed_an_experiment_and_finite_values() {
        for m in MEASUREMENTS {
            let what = format!("{} {} ({} {})", m.experiment, m.figure, m.seed, m.place);
            assert!(seed(m.seed).is_some(), "{what}: no seed {}", m.seed);
            let e = crate::reproduce::EXPERIMENTS.iter().find(|e| e.name == m.experiment).unwrap_or_else(|| panic!("{what}: no such experiment"));
            assert!(!m.quotes.is_empty() && !m.place.is_empty() && !m.unit.is_empty(), "{what}");
            match m.value {
                Value::OffOn { off, on } => assert!(off.is_finite() && on.is_finite() && off != 0.0, "{what}"),
                Value::Change(c) => assert!(c.is_finite() && c != 0.0, "{what}"),
                Value::Count(c) => assert!(c.is_finite() && c >= 0.0 && matches!(m.pick, Pick::Counter(_)), "{what}"),
                Value::Fell(_) => {}
            }
            // A transpose the entry names is one the experiment runs.
            let sizes = match e.run {
                crate::reproduce::Run::Workload(_, params) => params(false).sizes.unwrap_or_default(),
                crate::reproduce::Run::Program(_) => Vec::new(),
            };
            match m.pick {
                Pick::Transpose(n, v) => assert!(sizes.contains(&n) && ["load", "store"].contains(&v), "{what}: size {n} not in {sizes:?}"),
                Pick::TransposeMean(ns, v) => assert!(ns.iter().all(|n| sizes.contains(n)) && ["load", "store"].contains(&v), "{what}: {ns:?} not in {sizes:?}"),
                Pick::Figure | Pick::Seconds => assert!(sizes.is_empty(), "{what}: a transpose experiment has no one figure"),
                Pick::Counter(name) => assert!(splab_vm::sysctl::is_superpage_counter(name), "{what}"),
            }
        }
    }

    /// Each entry's quotes are in its seed, word for word. The seeds are
    /// not in the repository, so this runs when asked for: `cargo test -p
    /// splab published -- --ignored` beside ../shared/seeds, or with
    /// $SPLAB_SEEDS naming them (and fails when neither is there).
    #[test]
    #[ignore = "reads the seed documents, which are outside the repository (../shared/seeds or $SPLAB_SEEDS)"]
    fn every_quote_is_in_its_seed() {
        let dir = seeds_dir().expect("the seeds directory: ../shared/seeds above the checkout, or $SPLAB_SEEDS");
        for s in SEEDS {
            let p = dir.join(s.file);
            assert!(p.is_file(), "seed {} missing: {}", s.id, p.display());
        }
        for m in MEASUREMENTS {
            let s = seed(m.seed).unwrap();
            let text = squeeze(&std::fs::read_to_string(dir.join(s.file)).unwrap());
            for q in m.quotes {
                assert!(text.contains(&squeeze(q)), "{} {}: {q:?} is not in {}", m.experiment, m.figure, s.file);
            }
        }
    }

    /// Twelve headline results: one a machine and experiment.
    #[test]
    fn twelve_headline_figures() {
        let h: Vec<String> = MEASUREMENTS.iter().filter(|m| m.headline).map(|m| format!("{} {}", m.experiment, m.figure)).collect();
        assert_eq!(h.len(), 12, "{h:?}");
    }

    #[test]
    fn the_agreement_criterion() {
        assert!(agrees(50.0, 69.7)); // within 25 points of +50
        assert!(agrees(50.0, 75.0) && agrees(50.0, 25.0)); // the bounds are in
        assert!(!agrees(50.0, 75.1) && !agrees(50.0, 24.9));
        assert!(agrees(-20.7, -15.0) && !agrees(-20.7, -0.5));
        assert!(!agrees(2.76, -0.01)); // POWER9 buildworld got slower
        assert!(!agrees(23.0, -23.0) && !agrees(-37.85, 37.85));
        assert!(!agrees(0.0, 0.0), "a published 0 has no sign");
        assert!(!agrees(60.0, f64::NAN));
        assert!((change_percent(0.003685255, 0.005530048) - 50.06).abs() < 0.01);
        assert_eq!(error_percent(50.0, 75.0), Some(50.0));
        assert_eq!(error_percent(-20.0, -10.0), Some(50.0));
        assert_eq!(error_percent(0.0, 0.0), Some(0.0));
        assert_eq!(error_percent(0.0, 3.0), None);
    }
}
