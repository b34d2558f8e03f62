//! Calibration: this host measured with microbenchmarks only, as the
//! inputs a machine profile needs.
//!
//! What is measured, and how:
//! - the core clock, from a chain of dependent additions (one cycle each);
//! - load latency against working-set size, by a random dependent chase
//!   over every line of a prefix of a region in 2 MB pages (so that TLB
//!   misses stay out of it), fitted to three cache levels and memory;
//! - the cost of TLB misses: a chase touching one line in each of N pages,
//!   against a control chase over the same number of lines packed together
//!   (no TLB misses), in guest 4 KB and 2 MB pages, and in a 1 GB page when
//!   one can be had; the steps of the difference against N give the TLB
//!   capacities, its level past the last step the cost of a miss;
//! - overlap: k independent chases at once over memory (misses in flight),
//!   and over 4 KB pages against the control (page walks in flight);
//! - kernel and memory events: zeroing and copying a 4 KB page, a
//!   demand-zero fault round trip, a null system call;
//! - whether a hypervisor is present (CPUID, /proc/cpuinfo, /sys/hypervisor,
//!   DMI), and then, from the TLB curves, the page size it backs the guest
//!   with.
//!
//! Every measurement is repeated in rounds that interleave all the points
//! of a curve (a round visits every point once), and the median is kept;
//! the spread of the repeats and the share of time this process was on a
//! CPU are reported, because other work on a shared host moves them.
//!
//! Nothing here runs the validation workloads (gups, transpose, stream,
//! index): calibration must not see them.

use crate::infer::{self, Edge, Hierarchy, HostPage, Point};
use crate::probe::{self, Sample};
use crate::{cpu, reference};
use serde::{Deserialize, Serialize};
use splab_native::hugetlb::{self, Pool};
use splab_native::pages::{Pages, SIZE_1G, SIZE_2M};
use splab_native::region::Region;
use splab_native::suite::{self, Host, Spread};

/// Samples of the overlap probes a round (each over chains linked afresh),
/// against one of every other probe: their medians are over
/// rounds x OVERLAP_SAMPLES samples.
pub const OVERLAP_SAMPLES: usize = 3;

/// How much to measure.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    pub quick: bool,
    /// Rounds over every curve (repeats of each point).
    pub rounds: usize,
    /// Wall time aimed at for one timed chase, in ms.
    pub target_ms: f64,
    /// Points per octave of the size and page-count sweeps.
    pub per_octave: u32,
    /// The region in 2 MB pages: the latency sweep runs to half of it.
    pub huge_bytes: u64,
    /// The region in 4 KB pages: the TLB sweep runs to all its pages.
    pub small_bytes: u64,
    /// May the hugetlb pool be grown (as root) for 2 MB and 1 GB pages.
    pub grow_hugetlb: bool,
}

impl Plan {
    /// The default: about two minutes on an idle machine.
    pub fn full() -> Plan {
        Plan { quick: false, rounds: 5, target_ms: 3.0, per_octave: 4, huge_bytes: 1 << 30, small_bytes: 256 << 20, grow_hugetlb: true }
    }

    /// `--quick`: fewer rounds and points, smaller regions.
    pub fn quick() -> Plan {
        Plan { quick: true, rounds: 2, target_ms: 0.6, per_octave: 2, huge_bytes: 512 << 20, small_bytes: 64 << 20, grow_hugetlb: true }
    }

    /// A tiny plan for tests: seconds, not minutes, numbers not meant to
    /// be right.
    pub fn tiny() -> Plan {
        Plan { quick: true, rounds: 1, target_ms: 0.05, per_octave: 1, huge_bytes: 16 << 20, small_bytes: 4 << 20, grow_hugetlb: false }
    }
}

/// One point of a measured curve with its repeats.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measured {
    /// Bytes of working set, pages touched or chases at once.
    pub x: u64,
    /// ns per load (or the measured unit), over the rounds.
    pub ns: Spread,
}

/// The TLB measurements and what follows from them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Tlb {
    /// Extra ns per load of one line in each of N 4 KB frames over the
    /// control, by N: in guest 4 KB pages (`pages_4k`) and in guest 2 MB
    /// pages (`frames_in_2m`).
    pub pages_4k: Vec<Point>,
    pub frames_in_2m: Vec<Point>,
    /// The same for one line in each of N 2 MB frames, in guest 2 MB pages
    /// (`pages_2m`) and inside one 1 GB page (`frames_in_1g`, when one
    /// could be had).
    pub pages_2m: Vec<Point>,
    pub frames_in_1g: Option<Vec<Point>>,
    /// The steps of `pages_4k` and `pages_2m`.
    pub steps_4k: Vec<Edge>,
    pub steps_2m: Vec<Edge>,
    /// Inferred capacities (entries), where a step showed them.
    pub l1_4k_entries: Option<u64>,
    pub l2_entries: Option<u64>,
    pub l1_2m_entries: Option<u64>,
    /// Extra ns of an L1 TLB miss that hits the second level.
    pub stlb_hit_ns: Option<f64>,
    /// Extra ns per load on the plateau past the L2 TLB's step: a miss
    /// whose walk finds the page tables in the caches.
    pub miss_4k_walk_ns: Option<f64>,
    /// Extra ns per load at the largest N: a full TLB miss and walk with
    /// 4 KB pages (page tables farther out), and what was reached with
    /// 2 MB and 1 GB pages.
    pub miss_4k_ns: Option<f64>,
    pub miss_2m_ns: Option<f64>,
    pub miss_1g_ns: Option<f64>,
    /// Why the 1 GB measurement was not made.
    pub skipped_1g: Option<String>,
    /// The threshold used for steps (ns): a few times the noise.
    pub threshold_ns: f64,
    /// The second level fitted to the whole 4 KB curve by the model's TLB
    /// (filled in by the caller, which has the model: `infer::fit_stlb`);
    /// where present, `l2_entries`, `stlb_hit_ns` and `l1_4k_entries` are
    /// its.
    pub stlb_fit: Option<infer::StlbFit>,
}

/// Overlap of misses.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Overlap {
    /// ns per load with k chases over memory at once.
    pub data: Vec<Measured>,
    /// Extra ns per load over the control with k chases over 4 KB pages.
    pub walk: Vec<Point>,
    /// Extra ns per load over the control of independent loads over the
    /// same lines (`probe::time_loads`), as a loop over an array issues
    /// them.
    pub walk_loads_ns: Option<f64>,
    pub data_mlp: Option<f64>,
    /// How many walks overlap: one chase's extra (a walk alone) over the
    /// independent loads' extra.
    pub walk_mlp: Option<f64>,
    /// Whether `walk_mlp` came from the independent loads (else from the
    /// chases).
    pub walk_mlp_from_loads: bool,
    /// The same from the most chases at once instead of independent loads
    /// (reported: chains of loads overlap their walks further).
    pub walk_mlp_chases: Option<f64>,
    /// ns per load of one chase, and of the most chases at once, over
    /// every line of the 4 KB-page region in random order (each load a
    /// walk and a data miss), with the same for the data-only chases.
    pub both: Vec<Point>,
    /// The two predictions and the measurement, ns per load; the nearer
    /// sets the profile's `[core] far_walk_reads_in_mshrs`
    /// (`SlotFit::far_reads_free`).
    pub slot_fit: Option<infer::SlotFit>,
    /// Loops of independent misses with known instructions and stores
    /// between them (`probe::WindowShape`), and the window fitted to them.
    pub window: Vec<WindowPoint>,
    pub window_fit: Option<infer::WindowFit>,
    pub notes: Vec<String>,
}

/// One loop of `probe::WindowShape`: ns an iteration over the rounds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WindowPoint {
    pub shape: String,
    pub instructions: u32,
    pub stores: u32,
    pub ns: Spread,
}



/// Kernel and memory events, ns each.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Costs {
    pub zero_4k_ns: Spread,
    pub copy_4k_ns: Spread,
    /// A demand-zero fault round trip per page (mmap, write, munmap),
    /// zeroing included.
    pub fault_4k_ns: Spread,
    pub syscall_ns: Spread,
    /// A sequential copy over memory, per line read or written
    /// (`probe::copy_lines`).
    pub stream_line_ns: Spread,
    /// Bytes that copy moved each round.
    pub stream_bytes: u64,
    /// ns per line read with 1, 2, 3 and 4 sequential read streams at
    /// once over `stream_bytes` (`probe::read_streams`).
    pub read_streams_ns: Vec<Spread>,
    /// ns per line of reading the 2 MB-page region's 4 KB pages whole, in
    /// address order and in a random order (`probe::read_pages`): where
    /// address order is faster, streams go on across the edges of
    /// physically contiguous frames.
    pub pages_in_order_ns: Option<Spread>,
    pub pages_shuffled_ns: Option<Spread>,
    /// How the 4 KB-page region's frames lie (`probe::frame_runs`). None
    /// without the frame numbers (they need root).
    pub frames_4k: Option<probe::FrameRuns>,
    /// ns per access of independent loads, and of independent stores, to
    /// random lines over both halves of the copy's region
    /// (`probe::random_lines`).
    pub random_load_ns: Option<Spread>,
    pub random_store_ns: Option<Spread>,
}

/// How noisy the measurements were.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Noise {
    /// Median over the points of (quartile range / median) of the
    /// repeats.
    pub median_rel_iqr: f64,
    /// The largest such value.
    pub max_rel_iqr: f64,
    /// Share of the timed wall time this process was on a CPU: median and
    /// lowest over all timed probes.
    pub median_on_cpu: f64,
    pub min_on_cpu: f64,
    /// Chases and loads timed again for being on a CPU for less than
    /// `suite::ON_CPU_MIN` of their time (see `Meter::best`), and how
    /// many samples were set aside.
    pub taken_again: u64,
    pub set_aside: u64,
}

/// Everything calibration measured and inferred.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Calibration {
    pub plan: Plan,
    pub host: Host,
    pub cpu_brand: String,
    pub root: bool,
    pub virt: cpu::Virt,
    pub cpuid_caches: Vec<cpu::CacheLeaf>,
    pub cpuid_tlbs: Vec<cpu::TlbLeaf>,
    /// CPUID leaf 0x16 base and maximum MHz (zeros when hidden).
    pub cpuid_mhz: (u32, u32),
    /// Core clock from dependent additions, GHz over the rounds.
    pub clock_ghz: Option<Spread>,
    /// What the core probes measured (`CoreProbes`).
    #[serde(default)]
    pub core: CoreProbes,
    /// How the region for the latency sweep and the 2 MB TLB curves was
    /// made, and its share in 2 MB pages.
    pub huge_layout: String,
    pub huge_share: f64,
    /// Latency by working-set size (bytes), and the fitted hierarchy.
    pub latency: Vec<Measured>,
    pub hierarchy: Option<Hierarchy>,
    pub tlb: Tlb,
    /// Under a hypervisor: the host page size inferred, or why not.
    pub host_page: Option<HostPage>,
    pub overlap: Overlap,
    pub costs: Costs,
    pub noise: Noise,
    /// The quick memory probes (`reference::measure`), medians over the
    /// rounds; None where the 2 MB-page region is too small for them.
    pub reference: Option<reference::Reference>,
    /// Things a reader should know (fallbacks, skipped parts).
    pub notes: Vec<String>,
    /// Wall seconds the calibration took.
    pub seconds: f64,
}

/// The progress of a calibration: points measured so far, of how many, and
/// the phase.
/// What the core probes measured, medians over the rounds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CoreProbes {
    /// Instructions a cycle of the best loop of independent chains of
    /// additions (`probe::width_ns`), at the measured clock.
    pub width: Option<f64>,
    /// ns a 64-bit multiply and a 64-bit divide of a dependent chain (the
    /// divide's one-cycle `or` taken off).
    pub mul_ns: Option<f64>,
    pub div_ns: Option<f64>,
    /// ns a branch on random bits costs beyond one on clear bits
    /// (`probe::mispredict_ns`): half a misprediction.
    pub mispredict_ns: Option<f64>,
}

impl CoreProbes {
    fn of(clock_ghz: &[f64], width_per_ns: &[f64], mul: &[f64], div: &[f64], missed: &[f64], predicted: &[f64]) -> CoreProbes {
        let med = |v: &[f64]| Spread::of(v).map(|s| s.median);
        let ghz = med(clock_ghz).filter(|g| *g > 0.1);
        let cycle = ghz.map(|g| 1.0 / g);
        let extra: Vec<f64> = missed.iter().zip(predicted).map(|(m, p)| m - p).collect();
        CoreProbes {
            width: med(width_per_ns).zip(ghz).map(|(w, g)| w / g),
            mul_ns: med(mul),
            div_ns: med(div).zip(cycle).map(|(d, c)| (d - c).max(c)),
            mispredict_ns: med(&extra).filter(|x| *x > 0.0),
        }
    }
}

pub type ProgressFn<'a> = dyn FnMut(u64, u64, &str) + 'a;

/// Counts probes for the progress bar and keeps their on-CPU shares.
struct Meter<'a, 'b> {
    done: u64,
    total: u64,
    on_cpu: Vec<f64>,
    taken_again: u64,
    set_aside: u64,
    rel_iqr: Vec<f64>,
    target_ns: f64,
    progress: &'a mut ProgressFn<'b>,
}

impl Meter<'_, '_> {
    fn tick(&mut self, phase: &str, s: Sample) {
        self.on_cpu.push(s.on_cpu);
        self.step(phase);
    }

    /// Counts a probe that keeps no sample of its own.
    fn step(&mut self, phase: &str) {
        self.done += 1;
        (self.progress)(self.done.min(self.total), self.total, phase);
    }

    /// Times a chase from `start` over a chain of `n` elements: a warm-up
    /// (the whole chain, or two million loads), a short pilot for the
    /// latency, then enough loads for the target time.
    ///
    /// # Safety
    /// As for `probe::time_chase`.
    unsafe fn chase(&mut self, phase: &str, start: *const usize, n: u64) -> f64 {
        let (pilot, mut at) = probe::time_chase(start, n.min(2_000_000), 2000);
        let loads = (self.target_ns / pilot.ns.max(0.1)).clamp(2000.0, 50_000_000.0) as u64;
        // On from where the pilot stopped: restarting at `start` would
        // find the pilot's lines still in the L1 and L2 caches.
        self.best(phase, || {
            let (s, end) = probe::time_chase(at, 0, loads);
            at = end;
            s
        })
    }

    /// Takes the sample `time` gives, and where its thread was on a CPU
    /// for less than `suite::ON_CPU_MIN` of the time (the host's other
    /// work took the CPU, and with it the caches and TLBs), times it
    /// again at once, as the native suite does its runs
    /// (`suite::most_on_cpu`): the sample most on a CPU counts.
    fn best(&mut self, phase: &str, mut time: impl FnMut() -> Sample) -> f64 {
        let first = time();
        let Ok((s, aside)) = suite::most_on_cpu(first, |s: &Sample| s.on_cpu, || Ok::<_, std::convert::Infallible>(time()));
        self.taken_again += !aside.is_empty() as u64;
        self.set_aside += aside.len() as u64;
        self.tick(phase, s);
        s.ns
    }

    /// Times `starts.len()` chases at once along a chain of `n` elements
    /// (see `probe::time_chases`), warmed up over the whole chain (or a
    /// million steps).
    ///
    /// # Safety
    /// As for `probe::time_chases`.
    unsafe fn chases(&mut self, phase: &str, starts: &[*const usize], n: u64) -> f64 {
        let warm = (n / starts.len() as u64).min(1_000_000);
        let mut at = starts.to_vec();
        let pilot = probe::time_chases(&mut at, warm, 500);
        let steps = (self.target_ns / (pilot.ns.max(0.1) * starts.len() as f64)).clamp(500.0, 50_000_000.0) as u64;
        self.best(phase, || probe::time_chases(&mut at, 0, steps))
    }

    /// Times independent loads of every element of `order` in turn (see
    /// `probe::time_loads`): a pass to warm up and a pilot, then enough
    /// passes for the target time.
    ///
    /// # Safety
    /// As for `probe::time_loads`.
    unsafe fn loads(&mut self, phase: &str, order: &[*const usize]) -> f64 {
        let pilot = probe::time_loads(order, 1);
        let passes = (self.target_ns / (pilot.ns.max(0.1) * order.len() as f64)).clamp(1.0, 100_000.0) as u64;
        self.best(phase, || probe::time_loads(order, passes))
    }
}

/// Sizes from `lo` to `hi` (inclusive), `per_octave` to an octave, each a
/// multiple of `unit`, without repeats.
pub fn sweep(lo: u64, hi: u64, per_octave: u32, unit: u64) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    let mut k = 0u32;
    loop {
        let x = lo as f64 * 2f64.powf(k as f64 / per_octave as f64);
        if x > hi as f64 * 1.0001 {
            break;
        }
        let x = ((x / unit as f64).round() as u64).max(1) * unit;
        if v.last() != Some(&x) {
            v.push(x);
        }
        k += 1;
    }
    v
}

/// Counts from `lo` to `hi` at 1, 1.25, 1.5 and 1.75 times each power of
/// two (`per_octave` 4; 1 and 1.5 for 2; powers of two for 1): TLB sizes
/// are such numbers (64, 96, 1536, 2048), so a step lands on the grid.
pub fn counts_grid(lo: u64, hi: u64, per_octave: u32) -> Vec<u64> {
    let mults: &[u64] = match per_octave {
        0 | 1 => &[4],
        2 | 3 => &[4, 6],
        _ => &[4, 5, 6, 7],
    };
    let mut v = Vec::new();
    let mut p = 1u64;
    while p <= hi {
        for &m in mults {
            let x = p * m / 4;
            if x >= lo && x <= hi && (p * m).is_multiple_of(4) && v.last() != Some(&x) {
                v.push(x);
            }
        }
        p *= 2;
    }
    if v.last() != Some(&hi) && hi >= lo {
        v.push(hi);
    }
    v
}

/// Offsets of one line in each of `n` frames of `frame` bytes (4 KB or
/// more). The lines must spread over the cache sets as packed lines do,
/// or the chase measures set conflicts instead of the TLB: in physically
/// contiguous memory (a 2 MB page) frame i's line sits at bits 6-16 (the
/// set index of a 2048-set L2) as 4 KB page (i mod 32) of the frame and
/// line (i + i/32) mod 64 of that page, which covers all 2048 pairs for
/// every 2048 consecutive frames (33 is prime to 64).
fn sparse(n: u64, frame: u64) -> Vec<usize> {
    (0..n).map(|i| (i * frame + ((i % 32) * 4096) % frame + ((i + i / 32) % 64) * 64) as usize).collect()
}

/// Offsets of `n` consecutive lines.
fn dense(n: u64) -> Vec<usize> {
    (0..n).map(|i| (i * 64) as usize).collect()
}

fn spread(v: &[f64]) -> Spread {
    Spread::of(v).unwrap_or(Spread { median: f64::NAN, q1: f64::NAN, q3: f64::NAN, min: f64::NAN, max: f64::NAN })
}

/// Gets a region of `bytes` in 2 MB pages: THP first, hugetlb 2 MB (which
/// may need root) when THP gives less than 90%, else the better of what
/// was had. Returns the region, its layout name and its 2 MB share.
fn huge_region(bytes: u64, pool: &mut Pool, notes: &mut Vec<String>) -> Result<(Region, String, f64), String> {
    let share = |r: &Region| r.obtained().map(|o| o.bytes_2m as f64 / r.len().max(1) as f64).unwrap_or(0.0);
    let thp = Region::new(bytes, Pages::Thp, pool);
    let thp_share = thp.as_ref().map(share).unwrap_or(0.0);
    if thp_share >= 0.9 {
        return Ok((thp?, "thp".into(), thp_share));
    }
    match Region::new(bytes, Pages::Hugetlb2m, pool) {
        Ok(r) => {
            drop(thp);
            let s = share(&r);
            notes.push(format!("THP gave {:.0}% of the 2 MB-page region in 2 MB pages; hugetlb 2 MB pages used instead", 100.0 * thp_share));
            Ok((r, "hugetlb-2m".into(), s))
        }
        Err(e) => {
            notes.push(format!("THP gave only {:.0}% of the 2 MB-page region in 2 MB pages, and hugetlb 2 MB pages could not be had ({e}): latencies and 2 MB TLB figures include some 4 KB TLB misses", 100.0 * thp_share));
            let r = thp?;
            Ok((r, "thp (partial)".into(), thp_share))
        }
    }
}

/// The median y of a set of repeated points, as curve points.
fn points(xs: &[u64], samples: &[Vec<f64>]) -> Vec<Point> {
    xs.iter()
        .zip(samples)
        .map(|(&x, s)| {
            let sp = spread(s);
            Point { x: x as f64, y: sp.median, iqr: sp.q3 - sp.q1 }
        })
        .collect()
}

/// Point-by-point difference of two curves over the same xs (the
/// quartile ranges add).
fn minus(a: &[Point], b: &[Point]) -> Vec<Point> {
    a.iter().zip(b).map(|(p, q)| Point { x: p.x, y: p.y - q.y, iqr: p.iqr + q.iqr }).collect()
}

/// Runs the calibration.
pub fn run(plan: &Plan, progress: &mut ProgressFn<'_>) -> Result<Calibration, String> {
    let t0 = splab_native::now();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut notes = Vec::new();
    let mut pool = Pool::new(plan.grow_hugetlb);
    let (huge, huge_layout, huge_share) = huge_region(plan.huge_bytes, &mut pool, &mut notes)?;
    let small = Region::new(plan.small_bytes, Pages::FourK, &mut pool)?;
    let mut skipped_1g = None;
    let giga = if plan.huge_bytes < SIZE_1G {
        skipped_1g = Some(format!("this plan maps at most {} MB (--quick or a test)", plan.huge_bytes >> 20));
        None
    } else if !root && plan.grow_hugetlb && hugetlb::counters(SIZE_1G).map(|c| c.available()).unwrap_or(0) == 0 {
        skipped_1g = Some("no free 1 GB hugetlb page, and reserving one needs root".into());
        None
    } else {
        match Region::new(SIZE_1G, Pages::Hugetlb1g, &mut pool) {
            Ok(r) => Some(r),
            Err(e) => {
                skipped_1g = Some(e);
                None
            }
        }
    };
    let (huge_base, small_base) = (huge.start_ptr(), small.start_ptr());
    let giga_base = giga.as_ref().map(|g| g.start_ptr());

    // The sweeps.
    let sizes = sweep(4096, plan.huge_bytes / 2, plan.per_octave, 64);
    let small_pages = plan.small_bytes / 4096;
    let pages = counts_grid(8, small_pages, plan.per_octave);
    let frames_2m = counts_grid(4, plan.huge_bytes / SIZE_2M, plan.per_octave);
    let counts = probe::CHAIN_COUNTS;
    let data_counts = probe::DATA_CHAIN_COUNTS;
    let both_counts = [counts[0], counts[counts.len() - 1]];
    let per_round = 1
        + sizes.len()
        + 3 * pages.len()
        + frames_2m.len() * (2 + giga.is_some() as usize)
        + OVERLAP_SAMPLES * (data_counts.len() + 2 * counts.len() + 2 + both_counts.len())
        + 2
        + 4
        + 2
        + 2
        + probe::WindowShape::ALL.len()
        + 1;
    let total = (per_round * plan.rounds) as u64;
    let mut m = Meter { done: 0, total, on_cpu: Vec::new(), taken_again: 0, set_aside: 0, rel_iqr: Vec::new(), target_ns: plan.target_ms * 1e6, progress };

    // Overlap chains, built afresh each round (the sweeps reuse the same
    // lines): a random cycle over the first half of the 2 MB-page region
    // (up to 256 MB, well past the caches) for data misses; one over every
    // 4 KB page of the small region for walks, with a control of as many
    // packed lines in the 2 MB-page region's second half.
    let mlp_bytes = (plan.huge_bytes / 2).min(256 << 20);
    // The walk chains touch one line in each of 8192 4 KB pages (32 MB):
    // four times the reach of any second-level TLB of 2048 entries, and a
    // chain repeats its order, so nearly every load walks, but only 512 KB
    // of data lines and 64 KB of page-table lines, which stay in a 2 MB
    // L2. Then the walks' overlap is not hidden behind data misses that
    // overlap on their own. (At 16384 pages an Intel Xeon guest's TLB
    // curve already climbs its next step, where the probe varies from 29
    // to 115 ns a load between runs; at 8192 it sits on the plateau past
    // the L2 TLB, within 2 ns between runs.)
    let walk_pages = small_pages.min(8192);
    let ctrl_off = (plan.huge_bytes / 2) as usize;
    // Walks and data misses together: every line of the 4 KB-page region
    // (256 MB, past the caches) in one random cycle.
    let both_lines = plan.small_bytes / 64;
    // The sequential copy: from the 2 MB-page region's first half to its
    // second, up to 128 MB each way (past the caches), so walks play no
    // part.
    let stream_bytes = (plan.huge_bytes / 2).min(128 << 20) as usize;

    let mut clock = Vec::new();
    let (mut width, mut mul, mut div, mut missed, mut predicted) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut lat = vec![Vec::new(); sizes.len()];
    let (mut s4, mut s2, mut c4) = (vec![Vec::new(); pages.len()], vec![Vec::new(); pages.len()], vec![Vec::new(); pages.len()]);
    let (mut g2, mut g1, mut cg) = (vec![Vec::new(); frames_2m.len()], vec![Vec::new(); frames_2m.len()], vec![Vec::new(); frames_2m.len()]);
    let (mut kd, mut kw, mut kc) = (vec![Vec::new(); data_counts.len()], vec![Vec::new(); counts.len()], vec![Vec::new(); counts.len()]);
    let mut kb = vec![Vec::new(); both_counts.len()];
    // Independent loads of the walk chain's lines, and of the control's.
    let mut kl = vec![Vec::new(); 2];
    let (mut zero, mut copy, mut fault, mut sys, mut stream) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut reads = vec![Vec::new(); 4];
    // The 2 MB-page region's first `stream_bytes` read a 4 KB page at a
    // time, in address order and in a random order.
    let (mut in_order, mut shuffled) = (Vec::new(), Vec::new());
    let page_order: Vec<usize> = (0..stream_bytes / 4096).collect();
    let mut page_shuffled = page_order.clone();
    splab_native::Rng::new(0x5eed).shuffle(&mut page_shuffled);
    let (mut rnd_loads, mut rnd_stores) = (Vec::new(), Vec::new());
    let mut win = vec![Vec::new(); probe::WindowShape::ALL.len()];
    let mut refs = Vec::new();
    let seed = |r: usize, i: usize| (r as u64) << 32 | i as u64;

    for r in 0..plan.rounds {
        if let Some(w) = probe::width_ns(plan.target_ms / 3.0) {
            // Instructions a ns: the best of the loops.
            width.push(w.iter().map(|(_, s)| 1.0 / s.ns).fold(0.0, f64::max));
        }
        if let Some((m, d)) = probe::long_ops_ns(plan.target_ms / 2.0) {
            mul.push(m.ns);
            div.push(d.ns);
        }
        if let Some((r, z)) = probe::mispredict_ns(plan.target_ms / 2.0) {
            missed.push(r.ns);
            predicted.push(z.ns);
        }
        if let Some(c) = probe::clock_ghz(20.0 * plan.target_ms / 3.0) {
            clock.push(c.ns);
            m.tick("clock", Sample { ns: c.ns, on_cpu: c.on_cpu });
        } else {
            m.tick("clock", Sample { ns: 0.0, on_cpu: 1.0 });
        }
        // SAFETY (all chases below): every offset lies inside the region it
        // is linked in (sizes <= huge/2, pages <= the small region, frames
        // <= the huge region or 1 GB), the regions live to the end of this
        // function, and each chain is timed right after it is linked,
        // before any other chain overwrites its lines.
        for (i, &s) in sizes.iter().enumerate() {
            let offs = dense(s / 64);
            let ns = unsafe { m.chase("latency", probe::link(huge_base, &offs, seed(r, i)), offs.len() as u64) };
            lat[i].push(ns);
        }
        for (i, &n) in pages.iter().enumerate() {
            let offs = sparse(n, 4096);
            let a = unsafe { m.chase("TLB 4K", probe::link(small_base, &offs, seed(r, i)), n) };
            let b = unsafe { m.chase("TLB 4K", probe::link(huge_base, &offs, seed(r, i)), n) };
            let c = unsafe { m.chase("TLB 4K", probe::link(huge_base, &dense(n), seed(r, i)), n) };
            s4[i].push(a);
            s2[i].push(b);
            c4[i].push(c);
        }
        for (i, &n) in frames_2m.iter().enumerate() {
            let offs = sparse(n, SIZE_2M);
            let a = unsafe { m.chase("TLB 2M", probe::link(huge_base, &offs, seed(r, i)), n) };
            let c = unsafe { m.chase("TLB 2M", probe::link(huge_base, &dense(n), seed(r, i)), n) };
            g2[i].push(a);
            cg[i].push(c);
            if let Some(gb) = giga_base {
                g1[i].push(unsafe { m.chase("TLB 1G", probe::link(gb, &offs, seed(r, i)), n) });
            }
        }
        // The overlap probes, OVERLAP_SAMPLES times a round over fresh
        // chains: data_mlp, walk_mlp and the walkers' hold each compare two
        // of their medians, so one disturbed sample on either side moves
        // them, and the model's predictions of independent misses follow
        // data_mlp closely.
        for s in 0..OVERLAP_SAMPLES {
            let seed = |r: usize, i: usize| seed(r, i + 100 * s);
            let data = unsafe { probe::link_in_order(huge_base, &dense(mlp_bytes / 64), seed(r, 99)) };
            let walk = unsafe { probe::link_in_order(small_base, &sparse(walk_pages, 4096), seed(r, 98)) };
            let ctrl = unsafe { probe::link_in_order(huge_base.add(ctrl_off), &dense(walk_pages), seed(r, 97)) };
            let starts = |o: &[*const usize], k: usize| -> Vec<*const usize> { (0..k).map(|q| o[q * o.len() / k]).collect() };
            for (j, &k) in data_counts.iter().enumerate() {
                kd[j].push(unsafe { m.chases("overlap", &starts(&data, k), data.len() as u64) });
            }
            for (j, &k) in counts.iter().enumerate() {
                kw[j].push(unsafe { m.chases("overlap", &starts(&walk, k), walk.len() as u64) });
                kc[j].push(unsafe { m.chases("overlap", &starts(&ctrl, k), ctrl.len() as u64) });
            }
            // The same lines in the same order, as independent loads.
            kl[0].push(unsafe { m.loads("overlap", &walk) });
            kl[1].push(unsafe { m.loads("overlap", &ctrl) });
            let both = unsafe { probe::link_in_order(small_base, &dense(both_lines), seed(r, 96)) };
            for (j, &k) in both_counts.iter().enumerate() {
                let starts: Vec<*const usize> = (0..k).map(|q| both[q * both.len() / k]).collect();
                kb[j].push(unsafe { m.chases("overlap", &starts, both.len() as u64) });
            }
        }
        // SAFETY: both halves lie inside the 2 MB-page region, do not
        // overlap (stream_bytes <= huge/2), and no chain is in use.
        let st = unsafe { probe::copy_lines(huge_base, huge_base.add(stream_bytes), stream_bytes) };
        stream.push(st.ns);
        m.tick("stream", st);
        for (k, v) in reads.iter_mut().enumerate() {
            // SAFETY: inside the 2 MB-page region, u64-aligned (a page
            // boundary), and nothing else touches it meanwhile.
            if let Some(rs) = unsafe { probe::read_streams(huge_base, stream_bytes, k + 1) } {
                v.push(rs.ns);
                m.tick("stream", rs);
            }
        }
        for (order, v) in [(&page_order, &mut in_order), (&page_shuffled, &mut shuffled)] {
            // SAFETY: every page lies inside the 2 MB-page region's first
            // stream_bytes, and nothing else touches it meanwhile.
            let s = unsafe { probe::read_pages(huge_base, order) };
            v.push(s.ns);
            m.tick("stream", s);
        }
        // Random independent loads, then stores, over both halves (past
        // the caches, in 2 MB pages: no walks).
        let n = if plan.quick { 1 << 18 } else { 1 << 21 };
        for (store, v) in [(false, &mut rnd_loads), (true, &mut rnd_stores)] {
            // SAFETY: inside the 2 MB-page region, u64-aligned, and no
            // chain is in use.
            let s = unsafe { probe::random_lines(huge_base, 2 * stream_bytes, n, seed(r, 97), store) };
            v.push(s.ns);
            m.tick("stream", s);
        }
        // Loops of independent misses with more in the core's window
        // between them, over the same lines (see `Overlap::window`).
        for (j, &shape) in probe::WindowShape::ALL.iter().enumerate() {
            // SAFETY: as for the random lines.
            match unsafe { probe::window_loop(huge_base, 2 * stream_bytes, n, seed(r, 90 + j), shape) } {
                Some(s) => {
                    win[j].push(s.ns);
                    m.tick("overlap", s);
                }
                None => m.step("overlap"),
            }
        }
        let (z, c) = probe::zero_copy_4k(1)?;
        let f = probe::fault_4k(if plan.quick { 8 } else { 32 })?;
        let s = probe::syscall(if plan.quick { 20_000 } else { 100_000 });
        zero.push(z.ns);
        copy.push(c.ns);
        fault.push(f.ns);
        sys.push(s.ns);
        m.tick("costs", f);
        // The quick memory probes validate runs again, last in the round
        // (they link a chain of their own over the region's start).
        if huge.len() as u64 >= reference::BYTES {
            refs.push(reference::measure(&huge)?);
        }
        m.step("reference");
    }
    // The 4 KB region's frames, while it is still mapped.
    let frames_4k = probe::frame_runs(small_base, plan.small_bytes as usize);
    // The mappings go before the pool is put back.
    drop((huge, small, giga));
    drop(pool);

    // Noise: the relative quartile range of every point of every curve.
    for set in [&lat, &s4, &s2, &c4, &g2, &cg, &kd, &kw, &kc, &kl] {
        for v in set.iter() {
            if let Some(sp) = Spread::of(v) {
                if sp.median > 0.0 {
                    m.rel_iqr.push((sp.q3 - sp.q1) / sp.median);
                }
            }
        }
    }
    let mut noise = Noise::default();
    if let (Some(r), Some(c)) = (Spread::of(&m.rel_iqr), Spread::of(&m.on_cpu)) {
        noise = Noise { median_rel_iqr: r.median, max_rel_iqr: r.max, median_on_cpu: c.median, min_on_cpu: c.min, ..noise };
    }
    (noise.taken_again, noise.set_aside) = (m.taken_again, m.set_aside);

    let latency: Vec<Measured> = sizes.iter().zip(&lat).map(|(&x, v)| Measured { x, ns: spread(v) }).collect();
    // Levels placed by the sizes CPUID reports, where it reports all three
    // and the sweep reaches past the last; else by the curve alone.
    let cpuid_caches = cpu::caches();
    let reported: Vec<f64> = (1..=3).filter_map(|lv| cpuid_caches.iter().find(|c| c.level == lv && c.kind != "instruction").map(|c| c.size_bytes as f64)).collect();

    // TLB.
    let control = points(&pages, &c4);
    let d4 = minus(&points(&pages, &s4), &control);
    let d2 = minus(&points(&pages, &s2), &control);
    let gctrl = points(&frames_2m, &cg);
    let e2 = minus(&points(&frames_2m, &g2), &gctrl);
    let e1 = giga_base.map(|_| minus(&points(&frames_2m, &g1), &gctrl));
    // A step must stand clear of the noise of the quiet points (the lower
    // quartile of the points' spreads: the largest page counts, all walks,
    // are always noisy), but the smallest one worth finding, an L1 TLB
    // miss that hits the L2 TLB, is a few ns.
    let quiet_iqr = Spread::of(&d4.iter().map(|p| p.iqr).collect::<Vec<_>>()).map(|s| s.q1).unwrap_or(0.0);
    let threshold = (2.0 * quiet_iqr).clamp(0.5, 2.0);
    let steps_4k = infer::edges(&d4, threshold);
    let steps_2m = infer::edges(&e2, threshold);
    let mut tlb = Tlb { threshold_ns: threshold, skipped_1g, ..Tlb::default() };
    let levels = infer::tlb_levels(&d4, threshold);
    tlb.l1_4k_entries = levels.l1_entries.map(|x| x as u64);
    tlb.stlb_hit_ns = levels.l2_hit_ns.filter(|&ns| ns > 0.0 && ns < 20.0);
    tlb.l2_entries = levels.l2_entries.map(|x| x as u64);
    tlb.miss_4k_walk_ns = levels.walk_ns;
    if let Some(e) = steps_2m.first() {
        tlb.l1_2m_entries = Some(e.capacity_x as u64);
    }
    tlb.miss_4k_ns = d4.last().map(|p| p.y);
    tlb.miss_2m_ns = e2.last().map(|p| p.y);
    tlb.miss_1g_ns = e1.as_ref().and_then(|v| v.last().map(|p| p.y));
    let host_page = if virt_guest() { Some(infer::host_page(&d4, &d2, &e2, e1.as_deref(), threshold)) } else { None };
    // The caches' levels, read once the TLB's are known: with 4 KB host
    // pages the latency chase's 2 MB pages are cached as 4 KB pieces, and
    // its loads past the first TLB level's reach pay a second-level hit
    // that the model adds itself.
    let mut curve = points(&sizes, &lat);
    let mut less = None;
    if let (Some(h), Some(n), Some(hit)) = (&host_page, levels.l1_entries, tlb.stlb_hit_ns) {
        if h.size.as_deref() == Some("4K") {
            curve = infer::less_first_tlb_misses(&curve, n, hit);
            less = Some(hit);
        }
    }
    let reported3 = match reported[..] {
        [a, b, c] => Some([a, b, c]),
        _ => None,
    };
    let hierarchy = infer::hierarchy_of(&curve, reported3).map(|h| infer::Hierarchy { less_first_tlb_miss_ns: less, ..h });
    if hierarchy.is_none() {
        notes.push("the latency curve could not be fitted to three cache levels and memory".into());
    }
    tlb.pages_4k = d4;
    tlb.frames_in_2m = d2;
    tlb.pages_2m = e2;
    tlb.frames_in_1g = e1;
    tlb.steps_4k = steps_4k;
    tlb.steps_2m = steps_2m;

    // Overlap.
    let mut ov = Overlap::default();
    let med = |v: &Vec<f64>| spread(v).median;
    ov.data = data_counts.iter().zip(&kd).map(|(&k, v)| Measured { x: k as u64, ns: spread(v) }).collect();
    let per_load: Vec<(usize, f64)> = data_counts.iter().zip(&kd).map(|(&k, v)| (k, med(v))).collect();
    ov.data_mlp = infer::overlap(&per_load).map(|(m, _)| m.max(1.0));
    ov.walk = counts.iter().zip(kw.iter().zip(&kc)).map(|(&k, (w, c))| Point { x: k as f64, y: med(w) - med(c), iqr: 0.0 }).collect();
    // One chase over the walk pages is the TLB sweep's point at as many
    // pages too (the same random cycle over one line a page, against as
    // many packed lines in 2 MB pages): the walk alone is the median of
    // both probes' samples, since everything walks are charged is read
    // against it.
    if let (Some(i), Some(one)) = (pages.iter().position(|&n| n == walk_pages), ov.walk.first_mut()) {
        one.y = infer::pooled_extra([&kw[0], &s4[i]], [&kc[0], &c4[i]]);
    }
    ov.walk_loads_ns = Spread::of(&kl[0]).zip(Spread::of(&kl[1])).map(|(w, c)| w.median - c.median);
    let walk_one = ov.walk.first().map(|p| p.y).unwrap_or(0.0);
    if walk_one > threshold {
        // With many loads at once the data misses of the control are
        // overlapped as far as they go; what the walks still add per load,
        // against a walk alone, is how far walks overlap.
        let data = ov.data_mlp.unwrap_or(1.0);
        let chases = ov.walk.last().map_or(0.0, |p| p.x);
        let mut overlap = |extra: f64, how: &str| {
            let (w, note) = infer::walk_overlap(walk_one, extra, data, how);
            ov.notes.extend(note);
            w
        };
        ov.walk_mlp_chases = overlap(ov.walk.last().map_or(0.0, |p| p.y), &format!("{chases} chases"));
        // The profile's: a program's loop issues independent loads, and on
        // this kind of host their walks overlap less than chains' do.
        let loads = ov.walk_loads_ns.and_then(|x| overlap(x, "independent loads"));
        ov.walk_mlp_from_loads = loads.is_some();
        ov.walk_mlp = loads.or(ov.walk_mlp_chases);
    } else {
        ov.notes.push(format!("a chase over one line in each of {} 4 KB pages cost only {walk_one:.2} ns a load more than the control: no walks to measure overlap on", walk_pages));
    }

    // Walks with data misses, many at once, against the two ways the model
    // can hold a walker (see `SlotFit`), from the one-chase costs: data
    // alone, and the walk's extra.
    let kmax = both_counts[1];
    ov.both = both_counts.iter().zip(&kb).map(|(&k, v)| Point { x: k as f64, y: med(v), iqr: 0.0 }).collect();
    if let (Some(d1), Some(dm), Some(wm)) = (kd.first().map(med), ov.data_mlp, ov.walk_mlp) {
        let (b1, bk) = (ov.both[0].y, ov.both[1].y);
        match infer::slot_fit(kmax, d1, b1, bk, walk_one, dm, wm, threshold) {
            Some(fit) => ov.slot_fit = Some(fit),
            None => ov.notes.push(format!(
                "a chase over every line of 4 KB pages cost only {:.2} ns a load more than over 2 MB pages: no walks to tell the overlap models apart",
                b1 - d1
            )),
        }
    }
    // The core's window, from the loops of misses against the latency of
    // one chase over the same lines (the latency sweep's point nearest
    // their region: the same 2 MB pages, with whatever the host adds to
    // them), as data_mlp is k chases against one: the model charges the
    // window's share of its own latency for the reference.
    ov.window = probe::WindowShape::ALL
        .iter()
        .zip(&win)
        .filter_map(|(&shape, v)| Spread::of(v).map(|ns| WindowPoint { shape: shape.name(), instructions: shape.instructions(), stores: shape.stores(), ns }))
        .collect();
    let region = (2 * stream_bytes) as f64;
    let chase = latency.iter().min_by(|a, b| (a.x as f64 / region).ln().abs().total_cmp(&(b.x as f64 / region).ln().abs()));
    if let (Some(l), Some(dm)) = (chase, ov.data_mlp) {
        let nops: Vec<(f64, f64)> = ov.window.iter().filter(|p| p.stores == 0).map(|p| (p.instructions as f64, p.ns.median)).collect();
        let stores: Vec<(f64, f64, f64)> = ov.window.iter().filter(|p| p.stores > 0).map(|p| (p.instructions as f64, p.stores as f64, p.ns.median)).collect();
        match nops[..] {
            [a, b] => match infer::window(l.ns.median, dm, [a, b], &stores) {
                Ok(w) => ov.window_fit = Some(w),
                Err(e) => ov.notes.push(format!("the core's window was not fitted: {e}")),
            },
            _ => ov.notes.push("the core's window was not measured (its loops are written for x86-64)".into()),
        }
    } else {
        ov.notes.push("the core's window was not fitted: no data_mlp or latency point to read its loops against".into());
    }
    let costs = Costs {
        zero_4k_ns: spread(&zero),
        copy_4k_ns: spread(&copy),
        fault_4k_ns: spread(&fault),
        syscall_ns: spread(&sys),
        stream_line_ns: spread(&stream),
        stream_bytes: stream_bytes as u64,
        read_streams_ns: reads.iter().map(|v| spread(v)).collect(),
        pages_in_order_ns: Spread::of(&in_order),
        pages_shuffled_ns: Spread::of(&shuffled),
        frames_4k,
        random_load_ns: Spread::of(&rnd_loads),
        random_store_ns: Spread::of(&rnd_stores),
    };
    Ok(Calibration {
        plan: plan.clone(),
        host: Host::read(),
        cpu_brand: cpu::brand(),
        root,
        virt: cpu::detect_virt(),
        cpuid_caches,
        cpuid_tlbs: cpu::tlbs(),
        cpuid_mhz: cpu::frequency_leaf(),
        clock_ghz: Spread::of(&clock),
        core: CoreProbes::of(&clock, &width, &mul, &div, &missed, &predicted),
        huge_layout,
        huge_share,
        latency,
        hierarchy,
        tlb,
        host_page,
        overlap: ov,
        costs,
        reference: reference::median(&refs),
        noise,
        notes,
        seconds: splab_native::now() - t0,
    })
}

fn virt_guest() -> bool {
    cpu::detect_virt().guest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_off_the_cpu_are_timed_again() {
        let mut ticks = 0;
        let mut progress = |_: u64, _: u64, _: &str| ticks += 1;
        let mut m = Meter { done: 0, total: 3, on_cpu: Vec::new(), taken_again: 0, set_aside: 0, rel_iqr: Vec::new(), target_ns: 1e6, progress: &mut progress };
        let script = |v: Vec<(f64, f64)>| {
            let mut it = v.into_iter();
            move || {
                let (ns, on_cpu) = it.next().expect("no more samples than scripted");
                Sample { ns, on_cpu }
            }
        };
        // On a CPU throughout: one sample.
        assert_eq!(m.best("t", script(vec![(10.0, 1.0)])), 10.0);
        // Half, then 95 %: the second.
        assert_eq!(m.best("t", script(vec![(30.0, 0.5), (11.0, 0.95)])), 11.0);
        // 70 %, then worse twice: the first, after two more.
        assert_eq!(m.best("t", script(vec![(20.0, 0.7), (40.0, 0.3), (50.0, 0.2)])), 20.0);
        assert_eq!((m.taken_again, m.set_aside), (2, 3));
        assert_eq!(m.on_cpu, vec![1.0, 0.95, 0.7]);
        drop(m);
        assert_eq!(ticks, 3, "one tick a measurement, however many samples");
    }

    #[test]
    fn sweeps_are_ascending_multiples() {
        let s = sweep(8, 64, 4, 1);
        assert_eq!(s, vec![8, 10, 11, 13, 16, 19, 23, 27, 32, 38, 45, 54, 64]);
        let s = sweep(4096, 1 << 20, 2, 64);
        assert!(s.windows(2).all(|w| w[0] < w[1]) && s.iter().all(|x| x % 64 == 0));
        assert_eq!((s[0], *s.last().unwrap()), (4096, 1 << 20));
        assert_eq!(sparse(3, 4096), vec![0, 4096 + 64, 8192 + 128]);
        assert_eq!(sparse(34, 4096)[33], 33 * 4096 + 34 * 64);
        assert_eq!(sparse(2, 2 << 20), vec![0, (2 << 20) + 4096 + 64]);
        // In contiguous memory, 2048 frames of 4 KB use all 2048 sets of
        // a 2048-set cache once each.
        let mut sets: Vec<usize> = sparse(2048, 4096).iter().map(|o| (o >> 6) % 2048).collect();
        sets.sort_unstable();
        sets.dedup();
        assert_eq!(sets.len(), 2048);
        assert_eq!(counts_grid(8, 128, 4), vec![8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128]);
        assert_eq!(counts_grid(4, 100, 2), vec![4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 100]);
        assert_eq!(counts_grid(8, 64, 1), vec![8, 16, 32, 64]);
    }

    #[test]
    fn a_tiny_calibration_runs_end_to_end() {
        let mut calls = 0;
        let c = run(&Plan::tiny(), &mut |d, t, _| {
            assert!(d <= t);
            calls += 1;
        })
        .unwrap();
        assert!(calls > 0);
        assert!(!c.latency.is_empty() && c.latency.iter().all(|m| m.ns.median > 0.0));
        assert_eq!(c.overlap.data.len(), probe::DATA_CHAIN_COUNTS.len());
        assert!(c.tlb.skipped_1g.is_some());
        assert!(c.costs.syscall_ns.median > 0.0);
    }
}
