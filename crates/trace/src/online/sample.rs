//!
//! Sampling (`Sample`, SMARTS-style): the tool counts each process's
//! references, opens a window at the first slot that starts at or past the
//! start of each period, keeps its slots in detail for `detail` references
//! and the others in functional warming, and begins every slot with a word
//! that says which. A slot in detail is measured: what the system's
//! counters gained over it goes to the process's current window. In
//! warming, TLBs, page-walk caches, page tables, caches and the kernel
//! (faults, reservations, promotion) evolve as in full detail but nothing
//! is measured (under DynamoRIO, whose warm-ups are short stretches before
//! the windows, as functional warming: `System::set_functional`, the core
//! not timed, its predictor trained and its instructions counted), and the
//! tool leaves out (and counts) a reference that a direct-mapped filter
//! (`warm_filter`) of virtual lines, of the machine's line size, finds:
//! the last reference to that filter set touched the same line, so the
//! line is the most recently used of its first-level set and the access
//! would hit there, changing no replacement state at any level (the filter
//! has no more sets than the first-level cache and no more than a page has
//! lines, so its sets split the physically indexed cache's sets the same
//! way). A store to a line last only loaded is kept, for the dirty bits;
//! the filter starts empty when warming starts and after every map, unmap
//! and fork. What stays approximate: the TLB's recency order (the line's
//! page was used recently, not necessarily last in its TLB set), and
//! page-walk or kernel accesses to the cache between two references to a
//! line. Every figure is estimated from the measured windows with a 95 %
//! confidence interval (`estimate`: a process's first window, its start,
//! counts once; the later windows stand for the rest).
//! `splab bench --only-program` prints the full-detail figure beside the
//! sampled one.


use serde::Serialize;

/// `--sample DETAIL:PERIOD[:WARM]`, in references. WARM, the functional
/// warming before each window, is the DynamoRIO front end's (under
/// valgrind every reference between windows warms); both front ends
/// leave out of warming what the line filter finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sample {
    pub detail: u64,
    pub period: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm: Option<u64>,
}

impl Sample {
    /// Parses `DETAIL:PERIOD` with optional K, M, G suffixes (powers of
    /// ten: reference counts).
    pub fn parse(s: &str) -> Result<Sample, String> {
        let count = |t: &str| -> Result<u64, String> {
            let t = t.trim();
            let (num, mul) = match t.char_indices().last() {
                Some((i, 'k' | 'K')) => (&t[..i], 1_000),
                Some((i, 'm' | 'M')) => (&t[..i], 1_000_000),
                Some((i, 'g' | 'G')) => (&t[..i], 1_000_000_000),
                _ => (t, 1),
            };
            let n: f64 = num.parse().map_err(|_| format!("{t:?} is not a count (e.g. 10M)"))?;
            if !(n.is_finite() && n >= 1.0) {
                return Err(format!("{t:?}: a count of at least 1"));
            }
            Ok((n * mul as f64) as u64)
        };
        let Some((d, rest)) = s.split_once(':') else {
            return Err(format!("--sample {s:?}: expected DETAIL:PERIOD or DETAIL:PERIOD:WARM, e.g. 1M:10M"));
        };
        let (p, w) = match rest.split_once(':') {
            Some((p, w)) => (p, Some(w)),
            None => (rest, None),
        };
        let (detail, period) = (count(d).map_err(|e| format!("--sample {s:?}: {e}"))?, count(p).map_err(|e| format!("--sample {s:?}: {e}"))?);
        if detail >= period {
            return Err(format!("--sample {s:?}: the period must be longer than the detail"));
        }
        let warm = match w {
            // A warm-up of none is allowed.
            Some(w) if w.trim() == "0" => Some(0),
            Some(w) => Some(count(w).map_err(|e| format!("--sample {s:?}: {e}"))?),
            None => None,
        };
        if warm.is_some_and(|w| w + detail > period) {
            return Err(format!("--sample {s:?}: the warm-up and the detail must fit in the period"));
        }
        Ok(Sample { detail, period, warm })
    }
}

/// References of warm-up a line of the last-level cache gets by default
/// (`default_warm`).
pub const WARM_REFS_PER_LINE: u64 = 32;

/// The warm-up before each window when `--sample` gives none (under
/// DynamoRIO, where the program runs natively between windows): 32
/// references for each line of the profile's last-level cache, at most
/// what the period leaves beside the window. A window reuses the lines
/// the program used natively before it, as far back as the last level
/// holds them, and the warm-up has to bring those back into the model:
/// the larger the last level, the longer that takes. The count per line
/// is measured against full detail (docs/real-programs.md, "Sampling
/// under DynamoRIO"): a warm-up of the window's length read high.
pub fn default_warm(c: &splab_hw::profile::Caches, s: &Sample) -> u64 {
    let last_kb = if c.l3.size_kb > 0 { c.l3.size_kb } else { c.l2.size_kb };
    let lines = (last_kb * 1024) >> c.line_shift();
    (WARM_REFS_PER_LINE * lines).min(s.period - s.detail)
}

/// Functional warming's line filter (the tool's `--filter-sets` and
/// `--filter-line`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmFilter {
    pub sets: usize,
    /// Bytes a line.
    pub line: u64,
}

/// The filter for caches `c` and pages of `page` bytes: lines of the
/// machine's size, so that a reference it finds is to the line the last
/// one of its set touched on the machine too (with a longer line a
/// shorter machine line's neighbour would be left out unwarmed); as many
/// sets as the first-level data cache has, but no more than a page has
/// lines, rounded down to a power of two, so that each filter set covers
/// whole sets of the physically indexed cache.
pub fn warm_filter(c: &splab_hw::profile::Caches, page: u64) -> WarmFilter {
    let line = 1u64 << c.line_shift();
    let cache_sets = (c.l1d.size_kb * 1024 / line / c.l1d.ways.max(1) as u64).max(1);
    let s = cache_sets.min((page / line).max(1));
    WarmFilter { sets: 1 << (63 - s.leading_zeros()), line }
}

impl WarmFilter {
    /// The tool's options for it.
    pub fn args(&self) -> [String; 2] {
        [format!("--filter-sets={}", self.sets), format!("--filter-line={}", self.line)]
    }
}

/// One measured window: its references and what they cost.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Window {
    /// The process's first window: its start, measured whole.
    pub first: bool,
    pub refs: u64,
    pub instructions: u64,
    pub cycles: f64,
    pub data: f64,
    pub translation: f64,
    pub kernel: f64,
    pub core: f64,
    pub branch: f64,
    pub fetch: f64,
    pub tlb_misses: u64,
    pub dram: u64,
}

/// An estimate from the measured windows: the mean and the half-width of
/// its 95 % confidence interval.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub plus_minus: f64,
}

impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rel = if self.value != 0.0 { 100.0 * self.plus_minus / self.value.abs() } else { 0.0 };
        write!(f, "{} ± {} ({rel:.1} %)", sig(self.value), sig(self.plus_minus))
    }
}

fn sig(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.4}")
    }
}

/// Two-sided 95 % quantile of Student's t with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        _ => 1.96 + 2.4 / df as f64,
    }
}

/// The total over `total_refs` references of a quantity measured per
/// window as `f(window)`, in two strata. Each process's first window (its
/// start: cold caches, first-touch faults, which happen once) is measured
/// whole and counts as itself. The rest of the references are estimated
/// from the other windows by the ratio estimator (their quantity over
/// their references, times the references they stand for), with a 95 %
/// interval from the spread of those windows about that ratio (they
/// differ a little in length: they end at slot boundaries). With fewer
/// than two later windows, every window is taken alike; with every
/// reference measured, the estimate is their total.
pub fn estimate(windows: &[Window], total_refs: u64, f: impl Fn(&Window) -> f64) -> Estimate {
    if !windows.is_empty() && windows.iter().map(|w| w.refs).sum::<u64>() >= total_refs {
        // Everything measured.
        return Estimate { value: windows.iter().map(&f).sum(), plus_minus: 0.0 };
    }
    let later = windows.iter().filter(|w| !w.first && w.refs > 0).count();
    let (census, rest): (Vec<&Window>, Vec<&Window>) = if later >= 2 { windows.iter().partition(|w| w.first) } else { (Vec::new(), windows.iter().collect()) };
    let known: f64 = census.iter().map(|w| f(w)).sum();
    let known_refs: u64 = census.iter().map(|w| w.refs).sum();
    let left = total_refs.saturating_sub(known_refs) as f64;
    let w: Vec<(f64, f64)> = rest.iter().filter(|w| w.refs > 0).map(|w| (f(w), w.refs as f64)).collect();
    let n = w.len();
    if n == 0 {
        return Estimate { value: known, plus_minus: if left == 0.0 { 0.0 } else { f64::INFINITY } };
    }
    let (sy, sr) = w.iter().fold((0.0, 0.0), |(a, b), (y, r)| (a + y, b + r));
    let ratio = sy / sr;
    let mean_r = sr / n as f64;
    let var = if n > 1 { w.iter().map(|(y, r)| (y - ratio * r).powi(2)).sum::<f64>() / (n - 1) as f64 } else { f64::INFINITY };
    let half = t95(n - 1) * (var / n as f64).sqrt() / mean_r;
    Estimate { value: known + ratio * left, plus_minus: half * left }
}

/// Below this many later windows the report warns that the interval may
/// not hold.
const FEW_WINDOWS: usize = 10;

/// The estimates `--sample` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Sampled {
    pub sample: Sample,
    /// References measured in full detail, and all references.
    pub measured_refs: u64,
    pub total_refs: u64,
    /// References simulated as functional warming, those of them the tool
    /// left out, and its filter's sets and line (`warm_filter`).
    pub warming_refs: u64,
    pub warming_skipped: u64,
    pub warming_filter_sets: usize,
    pub warming_filter_line: u64,
    /// Under DynamoRIO: `warming_skipped` are the references the program
    /// ran natively between windows and those the line filter left out
    /// of the warm-ups (counted, not simulated), and `warming_refs` the
    /// warm-ups' references simulated.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub native_between: bool,
    pub windows: usize,
    /// Windows after each process's first: those the rest is estimated
    /// from.
    pub later_windows: usize,
    pub sim_seconds: Estimate,
    pub cycles: Estimate,
    pub data_cycles: Estimate,
    pub translation_cycles: Estimate,
    pub kernel_cycles: Estimate,
    pub core_cycles: Estimate,
    pub branch_cycles: Estimate,
    pub fetch_cycles: Estimate,
    pub tlb_misses: Estimate,
    pub dram_accesses: Estimate,
    /// Under DynamoRIO: the warm-up `default_warm` gives this profile and
    /// schedule (a shorter one asked for tends to read high).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_warm: Option<u64>,
}

impl Sampled {
    /// The estimates from the measured `windows` of a run of `total_refs`
    /// references on a machine of `freq_ghz`; `counts` are the references
    /// measured, simulated as warming and left out by the tool's
    /// `filter`.
    pub(super) fn new(sample: Sample, windows: &[Window], total_refs: u64, freq_ghz: f64, counts: (u64, u64, u64), filter: WarmFilter, native_between: bool) -> Sampled {
        let (measured_refs, warming_refs, warming_skipped) = counts;
        let (w, n) = (windows, total_refs);
        let freq = freq_ghz * 1e9;
        let cycles = estimate(w, n, |w| w.cycles);
        // The words left out come in warming's slots: under DynamoRIO
        // they are not warming.
        let warming_refs = if native_between { warming_refs.saturating_sub(warming_skipped) } else { warming_refs };
        Sampled {
            sample,
            measured_refs,
            total_refs: n,
            warming_refs,
            warming_skipped,
            warming_filter_sets: filter.sets,
            warming_filter_line: filter.line,
            native_between,
            windows: w.len(),
            later_windows: w.iter().filter(|w| !w.first).count(),
            sim_seconds: Estimate { value: cycles.value / freq, plus_minus: cycles.plus_minus / freq },
            cycles,
            data_cycles: estimate(w, n, |w| w.data),
            translation_cycles: estimate(w, n, |w| w.translation),
            kernel_cycles: estimate(w, n, |w| w.kernel),
            core_cycles: estimate(w, n, |w| w.core),
            branch_cycles: estimate(w, n, |w| w.branch),
            fetch_cycles: estimate(w, n, |w| w.fetch),
            tlb_misses: estimate(w, n, |w| w.tlb_misses as f64),
            dram_accesses: estimate(w, n, |w| w.dram as f64),
            default_warm: None,
        }
    }

    /// The report's lines for the estimates.
    pub(super) fn write(&self, report: &mut String) {
        use std::fmt::Write as _;
        let s = self;
        let measured = format!(
            "{}:{}{} references: {} measured in {} windows ({:.1} %)",
            s.sample.detail,
            s.sample.period,
            s.sample.warm.map(|w| format!(":{w}")).unwrap_or_default(),
            s.measured_refs,
            s.windows,
            100.0 * s.measured_refs as f64 / s.total_refs.max(1) as f64
        );
        if s.native_between {
            let _ = writeln!(
                report,
                "  {:<20}{measured}, {} functional warming before them (the pages first touched between them included), {} counted, not simulated (run natively between them, or left out of the warm-ups by a filter of {} {}-byte lines)",
                "sampled", s.warming_refs, s.warming_skipped, s.warming_filter_sets, s.warming_filter_line
            );
        } else {
            let _ = writeln!(
                report,
                "  {:<20}{measured}, {} functional warming ({} of them left out by a filter of {} {}-byte lines)",
                "sampled", s.warming_refs, s.warming_skipped, s.warming_filter_sets, s.warming_filter_line
            );
        }
        if s.later_windows < FEW_WINDOWS && s.measured_refs < s.total_refs {
            let _ = writeln!(
                report,
                "  {:<20}only {} windows after the processes' first: the intervals take them as a random sample of the rest, which so few may miss (a phase between them); a shorter PERIOD (e.g. 1M:10M) gives more",
                "note",
                s.later_windows
            );
        }
        if let (Some(d), Some(w)) = (s.default_warm, s.sample.warm) {
            if w < d && s.later_windows > 0 {
                let _ = writeln!(
                    report,
                    "  {:<20}a warm-up of {w} references, shorter than the default {d} ({WARM_REFS_PER_LINE} a line of the last-level cache): the windows reuse lines the program used natively before them that a short warm-up leaves out of the model's caches, so the estimates tend to read high (docs/real-programs.md, \"Sampling under DynamoRIO\")",
                    "note"
                );
            }
        }
        let _ = writeln!(report, "  {:<20}{} s (95 % interval; CPU time summed over CPUs)", "simulated time", s.sim_seconds);
        let _ = writeln!(report, "  {:<20}{}", "  data cycles", s.data_cycles);
        let _ = writeln!(report, "  {:<20}{}", "  translation", s.translation_cycles);
        let _ = writeln!(report, "  {:<20}{}", "  kernel", s.kernel_cycles);
        let _ = writeln!(report, "  {:<20}{}", "  dispatch", s.core_cycles);
        let _ = writeln!(report, "  {:<20}{}", "  branches", s.branch_cycles);
        let _ = writeln!(report, "  {:<20}{}", "  fetch", s.fetch_cycles);
        let _ = writeln!(report, "  {:<20}{}", "  TLB misses", s.tlb_misses);
        let _ = writeln!(report, "  {:<20}{}", "  DRAM accesses", s.dram_accesses);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warming_filter_has_the_machines_lines_and_the_first_level_sets_a_page_can_cover() {
        let p = splab_hw::profile::Profile::load("sapphire-rapids").unwrap();
        let with = |size_kb, ways, line_bytes| {
            let mut c = p.cache.clone();
            c.l1d.size_kb = size_kb;
            c.l1d.ways = ways;
            c.line_bytes = line_bytes;
            c
        };
        let f = |c: &splab_hw::profile::Caches, page| {
            let w = warm_filter(c, page);
            (w.sets, w.line)
        };
        // 48 KB, 12 ways: 64 sets of 64-byte lines, a 4 KB page's 64 lines.
        assert_eq!(f(&with(48, 12, None), 4096), (64, 64));
        // 64 KB, 2 ways: 512 sets; an 8 KB page has 128 lines.
        assert_eq!(f(&with(64, 2, Some(64)), 8192), (128, 64));
        // 32 KB, 8 ways, 64 KB pages: the cache's 64 sets.
        assert_eq!(f(&with(32, 8, None), 65536), (64, 64));
        // 24 KB, 4 ways: 96 sets, rounded down.
        assert_eq!(f(&with(24, 4, None), 4096), (64, 64));
        // The Armada XP's 4 KB, 4-way first level of 32-byte lines: 32
        // sets of them (a 64-byte filter line would leave a line's
        // neighbour out unwarmed).
        let axp = splab_hw::profile::Profile::load("armada-xp").unwrap();
        assert_eq!(f(&axp.cache, 4096), (32, 32));
        // POWER9's 32 KB, 8-way first level of 128-byte lines: 32 sets,
        // a 4 KB page's 32 lines.
        let p9 = splab_hw::profile::Profile::load("power9").unwrap();
        assert_eq!(f(&p9.cache, 4096), (32, 128));
        assert_eq!(warm_filter(&p9.cache, 4096).args(), ["--filter-sets=32".to_string(), "--filter-line=128".to_string()]);
    }

    #[test]
    fn the_default_warm_up_is_32_references_a_last_level_line_within_the_period() {
        use splab_hw::cache::CacheConfig;
        use splab_hw::profile::Caches;
        let c = |size_kb| CacheConfig { size_kb, ways: 8, latency: 4 };
        let caches = |l2, l3| Caches { l1i: c(32), l1d: c(48), l2: c(l2), l3: c(l3), walk_level: None, last_level_write_through: None, line_bytes: None };
        let s = |d, p| Sample { detail: d, period: p, warm: None };
        // 8 MB: 131072 lines.
        assert_eq!(default_warm(&caches(2048, 8192), &s(1_000_000, 10_000_000)), 32 * 131_072);
        // No third level: the second is the last.
        assert_eq!(default_warm(&caches(1024, 0), &s(1_000_000, 10_000_000)), 32 * 16_384);
        // 105 MB: more than the period leaves.
        assert_eq!(default_warm(&caches(2048, 107_520), &s(1_000_000, 10_000_000)), 9_000_000);
    }

    #[test]
    fn sample_parses_counts_and_refuses_bad_ones() {
        assert_eq!(Sample::parse("10M:100M").unwrap(), Sample { detail: 10_000_000, period: 100_000_000, warm: None });
        assert_eq!(Sample::parse("500k:2m").unwrap(), Sample { detail: 500_000, period: 2_000_000, warm: None });
        assert_eq!(Sample::parse("1000:5000").unwrap(), Sample { detail: 1000, period: 5000, warm: None });
        assert_eq!(Sample::parse("1M:10M:2M").unwrap(), Sample { detail: 1_000_000, period: 10_000_000, warm: Some(2_000_000) });
        assert_eq!(Sample::parse("1M:10M:0").unwrap().warm, Some(0));
        for bad in ["10M", "x:100M", "10M:10M", "0:10", "100M:10M", ":", "1M:10M:x", "1M:10M:9.5M", "1M:10M:1M:1M"] {
            let e = Sample::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    fn win(refs: u64, cycles: f64) -> Window {
        Window { refs, cycles, ..Default::default() }
    }

    #[test]
    fn the_ratio_estimate_scales_the_windows_and_narrows_with_more_of_them() {
        // Every window at 2 cycles a reference: the estimate is exact.
        let same: Vec<Window> = (0..10).map(|i| win(1000 + i, 2.0 * (1000 + i) as f64)).collect();
        let e = estimate(&same, 1_000_000, |w| w.cycles);
        assert!((e.value - 2e6).abs() < 1e-6 && e.plus_minus < 1e-6, "{e:?}");
        // Rates 1 and 3 alternating: mean 2, and an interval that holds it
        // and shrinks as windows are added.
        let alt = |n: usize| -> Vec<Window> { (0..n).map(|i| win(1000, if i % 2 == 0 { 1000.0 } else { 3000.0 })).collect() };
        let few = estimate(&alt(4), 1_000_000, |w| w.cycles);
        let many = estimate(&alt(40), 1_000_000, |w| w.cycles);
        assert!((few.value - 2e6).abs() < 1e-3 && (many.value - 2e6).abs() < 1e-3);
        assert!(many.plus_minus < few.plus_minus && many.plus_minus > 0.0, "{few:?} {many:?}");
        // One window says nothing about the spread.
        assert!(estimate(&alt(1), 1_000_000, |w| w.cycles).plus_minus.is_infinite());
        assert!(estimate(&[], 10, |w| w.cycles).plus_minus.is_infinite());
    }

    #[test]
    fn a_process_start_counts_once_and_the_later_windows_stand_for_the_rest() {
        // A start of 1000 references at 10 cycles each, then windows at 2:
        // the start is not spread over the references it does not cover.
        let mut w = vec![Window { first: true, ..win(1000, 10_000.0) }];
        w.extend((0..5).map(|_| win(1000, 2000.0)));
        let e = estimate(&w, 100_000, |w| w.cycles);
        assert!((e.value - (10_000.0 + 2.0 * 99_000.0)).abs() < 1e-6 && e.plus_minus < 1e-6, "{e:?}");
        // All of a short process measured: exact.
        let short = [Window { first: true, ..win(500, 900.0) }];
        let e = estimate(&short, 500, |w| w.cycles);
        assert!(e.value == 900.0 && e.plus_minus == 0.0, "{e:?}");
        // With one later window only, all windows are taken alike.
        let two = [Window { first: true, ..win(1000, 1000.0) }, win(1000, 3000.0)];
        let e = estimate(&two, 10_000, |w| w.cycles);
        assert!((e.value - 20_000.0).abs() < 1e-6 && e.plus_minus > 0.0, "{e:?}");
    }


    #[test]
    fn student_t_falls_to_the_normal_quantile() {
        assert!((t95(1) - 12.706).abs() < 1e-9);
        assert!(t95(10) > t95(30) && t95(30) > t95(1000) && (t95(100_000) - 1.96).abs() < 1e-3);
    }
}
