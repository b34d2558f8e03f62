//! From measured curves to machine parameters: pure functions on
//! (x, y) points, so they can be tested on synthetic curves.
//!
//! - `fit_hierarchy`: cache sizes and load-to-use latencies of three cache
//!   levels and memory from a latency-vs-size curve;
//! - `edges`: the steps of a curve that rises in plateaus (TLB capacities);
//! - `host_page`: the page size a hypervisor backs a guest with, from
//!   whether guest 2 MB (or 1 GB) pages remove TLB misses;
//! - `overlap`: how many misses proceed at once, from k parallel chases.

use serde::{Deserialize, Serialize};

/// A point of a measured curve: x (bytes or pages), y (ns), and the
/// spread of y over the repeats (ns, quartile range).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub iqr: f64,
}

impl Point {
    pub fn new(x: f64, y: f64) -> Point {
        Point { x, y, iqr: 0.0 }
    }
}

/// Three cache levels and memory fitted to a latency-vs-size curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hierarchy {
    /// Capacity of L1, L2, L3 in bytes (where latency leaves the level's
    /// plateau).
    pub size_bytes: [f64; 3],
    /// Load-to-use latency of a hit in L1, L2, L3, in ns.
    pub latency_ns: [f64; 3],
    /// Latency of a load served by memory, in ns.
    pub memory_ns: f64,
    /// Root mean square of the relative error over the points of the
    /// curve the hierarchy predicts.
    pub rms_rel_error: f64,
    /// "reported sizes" (plateaus placed by CPUID's sizes), "plateaus"
    /// (steps of the curve) or "fit" (least squares on a model of gradual
    /// steps).
    pub method: String,
    /// Whether each level's size was measured: false where the next level
    /// is within 8% of its latency, so no step shows where it ends (the
    /// size is then the reported one).
    pub step_seen: [bool; 3],
    /// Where the curve was read less its first-level TLB misses (4 KB
    /// host pages: see `less_first_tlb_misses`), what each cost.
    pub less_first_tlb_miss_ns: Option<f64>,
}

/// Expected latency at working set `s` of a random chase over caches of
/// capacities `c` (ascending) and hit latencies `l` (then memory, `l[3]`):
/// a level holds a share min(1, C/s) of the working set, the classic
/// model of a random access stream over a cache.
fn model(s: f64, c: &[f64; 3], l: &[f64; 4]) -> f64 {
    let h = |k: usize| (c[k] / s).min(1.0);
    l[0] * h(0) + l[1] * (h(1) - h(0)) + l[2] * (h(2) - h(1)) + l[3] * (1.0 - h(2))
}

/// Solves the 4x4 system `a x = b` by Gaussian elimination with partial
/// pivoting; None when it is singular.
fn solve4(mut a: [[f64; 4]; 4], mut b: [f64; 4]) -> Option<[f64; 4]> {
    for col in 0..4 {
        let piv = (col..4).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, piv);
        b.swap(col, piv);
        for r in col + 1..4 {
            let f = a[r][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[r].iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[r] -= f * b[col];
        }
    }
    let mut x = [0.0; 4];
    for r in (0..4).rev() {
        let s: f64 = (r + 1..4).map(|k| a[r][k] * x[k]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

/// Candidate capacities: quarter octaves from 4 KB up to `max`.
fn quarter_octaves(max: f64) -> Vec<f64> {
    let mut v = Vec::new();
    let mut k = 0;
    loop {
        let s = 4096.0 * 2f64.powf(k as f64 / 4.0);
        if s > max {
            return v;
        }
        v.push(s);
        k += 1;
    }
}

/// Fits three cache levels and memory to a latency curve (points sorted
/// by size, x in bytes, y in ns). For every choice of capacities on a
/// quarter-octave grid (each level at least twice the one before) the
/// latencies follow by weighted least squares (relative error); the
/// choice with the smallest error whose latencies rise level by level
/// wins. Then each capacity is moved to the edge of its plateau as the
/// points show it: the largest size whose latency is still within a
/// quarter of the way to the next level. None with too few points or no
/// rising fit.
pub fn fit_hierarchy(points: &[Point]) -> Option<Hierarchy> {
    if points.len() < 8 {
        return None;
    }
    let max = points.iter().map(|p| p.x).fold(0.0, f64::max);
    let grid = quarter_octaves(max / 1.5);
    let mut best: Option<(f64, [f64; 3], [f64; 4])> = None;
    for (i, &c1) in grid.iter().enumerate() {
        for (j, &c2) in grid.iter().enumerate().skip(i + 4) {
            for &c3 in grid.iter().skip(j + 4) {
                let c = [c1, c2, c3];
                let mut a = [[0.0; 4]; 4];
                let mut b = [0.0; 4];
                for p in points {
                    let h = [(c1 / p.x).min(1.0), (c2 / p.x).min(1.0), (c3 / p.x).min(1.0)];
                    let f = [h[0], h[1] - h[0], h[2] - h[1], 1.0 - h[2]];
                    let w = 1.0 / (p.y * p.y);
                    for r in 0..4 {
                        for k in 0..4 {
                            a[r][k] += w * f[r] * f[k];
                        }
                        b[r] += w * f[r] * p.y;
                    }
                }
                let Some(l) = solve4(a, b) else { continue };
                if !(l[0] > 0.0 && l[0] < l[1] && l[1] < l[2] && l[2] < l[3]) {
                    continue;
                }
                let err: f64 = points.iter().map(|p| ((model(p.x, &c, &l) - p.y) / p.y).powi(2)).sum::<f64>() / points.len() as f64;
                if best.as_ref().is_none_or(|b| err < b.0) {
                    best = Some((err, c, l));
                }
            }
        }
    }
    let (err, c, l) = best?;
    let mut size = c;
    for k in 0..3 {
        let limit = l[k] + 0.25 * (l[k + 1] - l[k]);
        let lo = if k == 0 { 0.0 } else { size[k - 1] };
        let edge = points.iter().filter(|p| p.x > lo && p.x >= c[k] / 2.0 && p.x <= c[k] * 2.0).take_while(|p| p.y <= limit).map(|p| p.x).fold(None, |_, x| Some(x));
        if let Some(e) = edge {
            size[k] = e;
        }
    }
    Some(Hierarchy { size_bytes: size, latency_ns: [l[0], l[1], l[2]], memory_ns: l[3], rms_rel_error: err.sqrt(), method: "fit".into(), step_seen: [true; 3], less_first_tlb_miss_ns: None })
}

/// A step of a curve: the last x of the plateau before it and the first
/// x past it, the plateau levels on each side, and the capacity: the
/// largest x still below the midpoint of the two levels (a set-associative
/// structure's curve bends before it breaks, so the step's first point
/// can still be mostly hits).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub last_x: f64,
    pub next_x: f64,
    pub level_before: f64,
    pub level_after: f64,
    pub capacity_x: f64,
    /// Where the rise settled: the first point at the new level.
    pub settle_x: f64,
    /// Points on the plateau after the step (from where it settled to the
    /// next rise, or the end).
    pub plateau_points: usize,
}

/// A step's capacity: the largest x from `from` to `to` (both points of
/// the curve) whose y is at most `mid`, else `from`.
fn capacity(points: &[Point], from: f64, to: f64, mid: f64) -> f64 {
    points.iter().filter(|p| p.x >= from && p.x <= to && p.y <= mid).map(|p| p.x).fold(from, f64::max)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median_y(points: &[Point]) -> f64 {
    median(&mut points.iter().map(|p| p.y).collect::<Vec<_>>())
}

/// Points in a row that must stand above a plateau for a step: one or
/// two high points on a busy host are noise, three are not.
const CONFIRM: usize = 3;

/// Whether the curve rises above `level + threshold` at point `k` and
/// stays there for `CONFIRM` points (or to its end).
fn rises_at(points: &[Point], k: usize, level: f64, threshold: f64) -> bool {
    (k..k + CONFIRM).all(|j| points.get(j).is_none_or(|p| p.y > level + threshold))
}

/// The steps of a curve that rises in plateaus (points sorted by x): a
/// step is where `CONFIRM` points in a row (or all that are left) rise
/// more than `threshold` above the median of the plateau so far. A rise
/// spread over neighbouring points counts as one step. The level after a
/// step is the median of the points up to the next step.
pub fn edges(points: &[Point], threshold: f64) -> Vec<Edge> {
    let mut out = Vec::new();
    let mut s = 0usize;
    let mut i = 1;
    while i < points.len() {
        let level = median_y(&points[s..i]);
        if !rises_at(points, i, level, threshold) {
            i += 1;
            continue;
        }
        let rise = i;
        // The rise goes on while each point climbs by more than the
        // threshold and by a quarter of the way climbed so far: a curve
        // that keeps sloping up gently past a step (walk costs as page
        // tables leave the caches) is a plateau of its own, not more step.
        let mut j = i + 1;
        while j < points.len() && points[j].y > points[j - 1].y + threshold.max(0.25 * (points[j - 1].y - level)) {
            j += 1;
        }
        // The first point at the new level is the last that climbed.
        let settle = j - 1;
        // The new plateau: from where it settled to the next rise.
        let mut k = settle + 1;
        while k < points.len() && !rises_at(points, k, median_y(&points[settle..k]), threshold) {
            k += 1;
        }
        let after = median_y(&points[settle..k.max(settle + 1)]);
        let mid = (level + after) / 2.0;
        let capacity_x = capacity(points, points[rise - 1].x, points[settle].x, mid);
        out.push(Edge { last_x: points[rise - 1].x, next_x: points[rise].x, level_before: level, level_after: after, capacity_x, settle_x: points[settle].x, plateau_points: k.max(settle + 1) - settle });
        s = settle;
        i = settle + 1;
    }
    out
}

/// Relative rise that makes a step of the latency curve (8%: the step
/// from a slow last-level cache to memory can be that small).
const CACHE_STEP: f64 = 0.08;

/// The curve with each inner point replaced by the median of it and its
/// two neighbours: a point that one disturbed repeat after another left
/// far above both (another tenant's burst in a shared last-level cache)
/// goes, where a step, two points or more, stays.
fn despiked(points: &[Point]) -> Vec<Point> {
    (0..points.len())
        .map(|i| {
            if i == 0 || i + 1 == points.len() {
                return points[i];
            }
            Point { y: median(&mut [points[i - 1].y, points[i].y, points[i + 1].y]), ..points[i] }
        })
        .collect()
}

/// Steps whose plateau is a single point joined to the step after: a
/// steep climb (the last level's cache to memory) can pause on one point
/// where the rise rule stops, and that point is no level. The joined
/// step's capacity is found again, halfway between the levels it now
/// joins, over the whole climb: kept from its first part, it would be
/// halfway to the pause (on an AMD Zen 5 guest, a last level placed at
/// 2.8 MB where the climb to memory crosses halfway at 4 MB).
fn joined(points: &[Point], e: Vec<Edge>) -> Vec<Edge> {
    let mut out: Vec<Edge> = Vec::new();
    for x in e {
        match out.last_mut() {
            Some(prev) if prev.plateau_points == 1 => {
                prev.level_after = x.level_after;
                prev.plateau_points = x.plateau_points;
                prev.settle_x = x.settle_x;
                prev.capacity_x = capacity(points, prev.last_x, x.settle_x, (prev.level_before + x.level_after) / 2.0);
            }
            _ => out.push(x),
        }
    }
    out
}

/// The most points the plateau after the step to memory may have and be
/// a pause in the climb rather than memory's level (see `hierarchy`).
const MEMORY_PAUSE: usize = 2;

/// Three cache levels and memory from a latency curve (x bytes, y ns,
/// sorted by x) by its steps: the steps of log latency (the curve
/// despiked, and a climb that pauses on one point one step), the three
/// largest of them in size order, each level's size its step's capacity
/// and its latency the median of the points inside it (else the plateau
/// before its step); memory is the plateau after the third. Where fewer
/// than three steps stand out, `fit_hierarchy`.
pub fn hierarchy(points: &[Point]) -> Option<Hierarchy> {
    let logs: Vec<Point> = points.iter().filter(|p| p.y > 0.0).map(|p| Point { x: p.x, y: p.y.ln(), iqr: 0.0 }).collect();
    let smooth = despiked(&logs);
    let mut e = joined(&smooth, edges(&smooth, (1.0 + CACHE_STEP).ln()));
    if e.len() < 3 {
        return fit_hierarchy(points);
    }
    e.sort_by(|a, b| (b.level_after - b.level_before).total_cmp(&(a.level_after - a.level_before)));
    e.truncate(3);
    e.sort_by(|a, b| a.last_x.total_cmp(&b.last_x));
    let c = [e[0].capacity_x, e[1].capacity_x, e[2].capacity_x];
    // Each level's latency: the median of the (despiked) points well
    // inside it, from 1.5 times the level before to its capacity / 1.5,
    // as `hierarchy_at` reads them; where none lie there, the plateau
    // before its step. A plateau runs up to where the next step rises,
    // so a last level that fills unevenly (or that other tenants share)
    // would lift it.
    let mut model_l = [e[0].level_before.exp(), e[1].level_before.exp(), e[2].level_before.exp(), e[2].level_after.exp()];
    for k in 0..3 {
        let lo = if k == 0 { 0.0 } else { 1.5 * c[k - 1] };
        let mut inside: Vec<f64> = smooth.iter().filter(|p| p.x > lo && p.x < c[k] / 1.5).map(|p| p.y).collect();
        if !inside.is_empty() {
            model_l[k] = median(&mut inside).exp();
        }
    }
    // Memory: where the plateau after its step is only a pause in the
    // climb (`MEMORY_PAUSE` points or fewer, a smaller step after it),
    // every point from where the step settled to the end. Over 4 KB host
    // pages the curve climbs on past the last level with the walks, and
    // on an AMD Zen 5 guest it paused at 119.3 and 115.0 ns (13.5 and 16
    // MB) on its way to 135.6 to 163.8 ns (19 to 512 MB), while a chase
    // over 64 MB read 147.5. (A pause of two points inside a cache's
    // climb is common, and is left as it is.)
    if e[2].plateau_points <= MEMORY_PAUSE {
        let mut past: Vec<f64> = smooth.iter().filter(|p| p.x >= e[2].settle_x).map(|p| p.y).collect();
        model_l[3] = median(&mut past).exp();
    }
    let err = points.iter().map(|p| ((plateau_model(p.x, &c, &model_l) - p.y) / p.y).powi(2)).sum::<f64>() / points.len() as f64;
    Some(Hierarchy { size_bytes: c, latency_ns: [model_l[0], model_l[1], model_l[2]], memory_ns: model_l[3], rms_rel_error: err.sqrt(), method: "plateaus".into(), step_seen: [true; 3], less_first_tlb_miss_ns: None })
}

/// Three cache levels and memory from a latency curve (x bytes, y ns,
/// sorted by x) when the sizes the processor reports (CPUID leaf 4) are
/// known: each level's latency is the median of the points well inside it
/// (above 1.5 times the level before, below the size / 1.5), memory's the
/// median past 1.2 times the last level (the largest sizes); each level's
/// measured capacity is where the curve crosses the geometric mean of its
/// latency and the next, looked for between half and twice the reported
/// size. A noisy or sloping plateau moves a median little, where it would
/// make steps of its own. None when a level has no points inside it.
pub fn hierarchy_at(points: &[Point], reported: [f64; 3]) -> Option<Hierarchy> {
    let inside = |lo: f64, hi: f64| -> Option<f64> {
        let v: Vec<Point> = points.iter().filter(|p| p.x > lo && p.x < hi).copied().collect();
        (!v.is_empty()).then(|| median_y(&v))
    };
    let mut l = [0.0; 4];
    for k in 0..3 {
        let lo = if k == 0 { 0.0 } else { reported[k - 1] * 1.5 };
        l[k] = inside(lo, reported[k] / 1.5)?;
    }
    let max = points.iter().map(|p| p.x).fold(0.0, f64::max);
    l[3] = inside((reported[2] * 1.2).min(max / 1.01), f64::INFINITY)?;
    let mut c = reported;
    let mut seen = [false; 3];
    for k in 0..3 {
        // No step to find where the next level is hardly slower: the
        // reported size stands.
        if l[k + 1] < l[k] * (1.0 + CACHE_STEP) {
            continue;
        }
        seen[k] = true;
        let mid = (l[k] * l[k + 1]).sqrt();
        let near: Vec<&Point> = points.iter().filter(|p| p.x >= reported[k] / 2.0 && p.x <= reported[k] * 2.0).collect();
        // The last point before the first one past the midpoint that the
        // next two confirm.
        if let Some(i) = (0..near.len()).find(|&i| (i..(i + 3).min(near.len())).all(|j| near[j].y > mid)) {
            if i > 0 {
                c[k] = near[i - 1].x;
            }
        }
    }
    let err = points.iter().map(|p| ((plateau_model(p.x, &c, &l) - p.y) / p.y).powi(2)).sum::<f64>() / points.len() as f64;
    Some(Hierarchy { size_bytes: c, latency_ns: [l[0], l[1], l[2]], memory_ns: l[3], rms_rel_error: err.sqrt(), method: "reported sizes".into(), step_seen: seen, less_first_tlb_miss_ns: None })
}

/// The hierarchy of a latency curve, given the sizes CPUID reports where
/// it does (`hierarchy_at`, else `hierarchy`). A last level the curve
/// leaves well before its reported size (its steps place it below half of
/// it, the memory's plateau more than twice its latency) is a shared one
/// of which this machine gets only part (a guest beside other tenants):
/// the levels are then read from the curve's steps, so that the last
/// level's latency is the one inside what this machine gets and what lies
/// past it is memory.
pub fn hierarchy_of(points: &[Point], reported: Option<[f64; 3]>) -> Option<Hierarchy> {
    let Some(r) = reported else { return hierarchy(points) };
    let steps = hierarchy(points);
    if let Some(h) = &steps {
        if h.method == "plateaus" && h.size_bytes[2] < r[2] / 2.0 && h.memory_ns > 2.0 * h.latency_ns[2] && h.size_bytes[1] < h.size_bytes[2] {
            return Some(Hierarchy { method: "plateaus, a shared last level".into(), ..h.clone() });
        }
    }
    hierarchy_at(points, r).or(steps)
}

/// A latency curve (x bytes, y ns) less what its chase pays for missing
/// the first TLB level, where a guest's 2 MB pages are cached as 4 KB
/// pieces (4 KB host pages): a random chase over n 4 KB pages misses an
/// array of `entries` a share 1 - entries / n of its loads, and each pays
/// `hit_ns` in the second level. The model adds that itself when it runs
/// a chase, so the levels are read without it. (The second level's
/// misses, past its reach, are left in: the memory level is read from the
/// plateau before they climb.)
pub fn less_first_tlb_misses(points: &[Point], entries: f64, hit_ns: f64) -> Vec<Point> {
    points
        .iter()
        .map(|p| {
            let miss = (1.0 - entries / (p.x / 4096.0)).max(0.0);
            Point { y: p.y - miss * hit_ns, ..*p }
        })
        .collect()
}

/// The latency a hierarchy of sharp steps predicts at working set `s`.
fn plateau_model(s: f64, c: &[f64; 3], l: &[f64; 4]) -> f64 {
    (0..3).find(|&k| s <= c[k]).map(|k| l[k]).unwrap_or(l[3])
}

/// The two TLB levels in a curve of extra ns per load against pages
/// touched.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TlbLevels {
    /// Entries of the first level, and the extra ns of a miss in it that
    /// hits the second.
    pub l1_entries: Option<f64>,
    pub l2_hit_ns: Option<f64>,
    /// Entries of the second level, and the extra ns past it (a walk
    /// whose page tables are in the caches).
    pub l2_entries: Option<f64>,
    pub walk_ns: Option<f64>,
}

/// Finds the TLB levels in `points` (x pages, y extra ns) from its
/// `edges`. The second level's step is the first big one after the first
/// step (see below); past it the walk cost keeps climbing, in steps of its
/// own, as page tables leave the caches.
/// The first level may rise in more than one step (a set-associative
/// array fills unevenly); its capacity is the last point below half the
/// level of the plateau before the second level's step.
pub fn tlb_levels(points: &[Point], threshold: f64) -> TlbLevels {
    let e = edges(points, threshold);
    let mut t = TlbLevels::default();
    let Some(first) = e.first() else { return t };
    let base = first.level_before;
    // The second level's step: the first after the first step that at
    // least doubles the extra time (plus 2 ns), since a walk costs several
    // times an L2 TLB hit; small steps before it are the first level
    // filling unevenly, later ones page tables leaving the caches. Failing
    // that, the steepest.
    let ratio = |x: &Edge| (x.level_after - base + 1.0) / (x.level_before - base + 1.0);
    let big = |x: &Edge| x.level_after - base >= 2.0 * (x.level_before - base) + 2.0;
    let l2 = e.iter().enumerate().skip(1).find(|(_, x)| big(x)).or_else(|| e.iter().enumerate().skip(1).max_by(|a, b| ratio(a.1).total_cmp(&ratio(b.1))));
    // The hit level: the last plateau of three points or more before that
    // step (else the one just before it). A hashed second level's knee
    // rises over several small steps with a point or two between them, and
    // the plateau just before the big one can lie halfway up the knee
    // (10.2 ns where the hits' plateau was 1.9 to 2.5 on an AMD Zen 5 guest),
    // which would carry the first level's capacity up with it.
    let (hit_level, end_x) = match l2 {
        Some((i, s)) => (e[..i].iter().rev().find(|x| x.plateau_points >= 3).map_or(s.level_before, |x| x.level_after), s.last_x),
        None => (first.level_after, f64::INFINITY),
    };
    let mid = base + (hit_level - base) / 2.0;
    let l1 = points.iter().filter(|p| p.x <= end_x).take_while(|p| p.x <= first.last_x || p.y <= mid).map(|p| p.x).fold(first.capacity_x, f64::max);
    t.l1_entries = Some(l1);
    t.l2_hit_ns = Some(hit_level - base);
    if let Some((_, s)) = l2 {
        t.l2_entries = Some(s.capacity_x);
        t.walk_ns = Some(s.level_after - base);
    }
    t
}

/// The second-level TLB fitted to the whole 4 KB-page curve, rather than
/// read off one step: each candidate array (entries, index) predicts, by
/// the model's own TLB, what share of the probe's loads hit the second
/// level and what share walk at each page count; the extra ns of each
/// (`hit_ns`, `walk_ns`) are fitted by least squares, and the candidate
/// with the smallest error wins. A curve that rises gradually around the
/// capacity (sets that overflow early and late) is then matched as a
/// whole, where a step finder lands anywhere on the ramp.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StlbFit {
    pub entries: u64,
    /// Associativity of every candidate (not fitted).
    pub ways: u64,
    /// The hashed index (`TlbIndex::Hashed`) fitted best.
    pub hashed: bool,
    pub hit_ns: f64,
    pub walk_ns: f64,
    /// Root-mean-square error (ns) over the points fitted.
    pub rms_ns: f64,
    /// The best candidate with the other index: its entries and error.
    pub other_entries: u64,
    pub other_rms_ns: f64,
    /// The page counts fitted: from, to, and how many points.
    pub from_pages: f64,
    pub to_pages: f64,
    pub points: usize,
}

impl StlbFit {
    /// The index fitted, and the other one, as a profile names them.
    pub fn index(&self) -> &'static str {
        if self.hashed { "hashed" } else { "modulo" }
    }
    pub fn other_index(&self) -> &'static str {
        if self.hashed { "modulo" } else { "hashed" }
    }
}

/// Fits the second-level TLB to `points` (x pages, y extra ns per load)
/// between `from` and `to` pages. `shares(entries, hashed, pages)` gives
/// the model's (second-level hit, walk) shares of the probe's loads; a
/// candidate is (entries, hashed). None with fewer than four points, or
/// where no candidate gives a walk dearer than a hit.
pub fn fit_stlb(points: &[Point], from: f64, to: f64, candidates: &[(u64, bool)], shares: impl Fn(u64, bool, u64) -> (f64, f64)) -> Option<StlbFit> {
    let pts: Vec<&Point> = points.iter().filter(|p| p.x >= from && p.x <= to && p.y.is_finite()).collect();
    if pts.len() < 4 {
        return None;
    }
    // (rms, entries, hashed, hit, walk)
    type Fit = (f64, u64, bool, f64, f64);
    let mut best: [Option<Fit>; 2] = [None, None];
    for &(entries, hashed) in candidates {
        let sh: Vec<(f64, f64)> = pts.iter().map(|p| shares(entries, hashed, p.x as u64)).collect();
        let Some((a, b)) = least_squares_2(&sh, &pts) else { continue };
        if !(a >= 0.0 && b > a) {
            continue;
        }
        let sse: f64 = sh.iter().zip(&pts).map(|(&(h, m), p)| (a * h + b * m - p.y).powi(2)).sum();
        let rms = (sse / pts.len() as f64).sqrt();
        let slot = &mut best[hashed as usize];
        if slot.is_none_or(|b| rms < b.0) {
            *slot = Some((rms, entries, hashed, a, b));
        }
    }
    let (win, other) = match best {
        [Some(m), Some(h)] => if h.0 < m.0 { (h, Some(m)) } else { (m, Some(h)) },
        [Some(x), None] | [None, Some(x)] => (x, None),
        [None, None] => return None,
    };
    Some(StlbFit {
        entries: win.1,
        ways: 0,
        hashed: win.2,
        hit_ns: win.3,
        walk_ns: win.4,
        rms_ns: win.0,
        other_entries: other.map_or(0, |o| o.1),
        other_rms_ns: other.map_or(f64::NAN, |o| o.0),
        from_pages: pts[0].x,
        to_pages: pts[pts.len() - 1].x,
        points: pts.len(),
    })
}

/// Least squares for y = a h + b m over (h, m) shares and points; None
/// when the shares do not tell a from b (every point all hits or all
/// walks).
fn least_squares_2(sh: &[(f64, f64)], pts: &[&Point]) -> Option<(f64, f64)> {
    let (mut hh, mut hm, mut mm, mut hy, mut my) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (&(h, m), p) in sh.iter().zip(pts) {
        hh += h * h;
        hm += h * m;
        mm += m * m;
        hy += h * p.y;
        my += m * p.y;
    }
    let det = hh * mm - hm * hm;
    if det.abs() <= 1e-9 * (hh * mm).max(1e-12) {
        return None;
    }
    Some(((hy * mm - my * hm) / det, (my * hh - hy * hm) / det))
}

/// The first level's entries once the second level's hit cost is known:
/// the last page count before the curve first passes half of it.
pub fn l1_entries_below(points: &[Point], hit_ns: f64) -> Option<f64> {
    let i = points.iter().position(|p| p.y > hit_ns / 2.0)?;
    (i > 0).then(|| points[i - 1].x)
}

/// What the TLB curves say about the page size the host backs guest
/// memory with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostPage {
    /// "4K", "2M" or "1G", or None when the curves do not tell.
    pub size: Option<String>,
    pub reason: String,
}

/// Ratio below which guest huge pages count as having removed the TLB
/// misses; at or above it they kept them.
const REMOVED: f64 = 0.35;

/// Infers the host page size. `d4` and `d2` are extra ns per load (over
/// the same number of lines with no TLB misses) of a chase touching N
/// distinct 4 KB frames one line each, in guest 4 KB pages and in guest
/// 2 MB pages; `g2` and `g1` of a chase touching N 2 MB frames one line
/// each, in guest 2 MB pages and in a guest 1 GB page (None without a
/// 1 GB page). Under a host that backs the guest with 4 KB pages the TLB
/// holds only 4 KB translations whatever the guest maps, so guest 2 MB
/// pages keep the misses of 4 KB ones, their walks shorter by the guest's
/// last level (`d2` a share of `d4`, the median over the page counts:
/// 86 % on a 2-CPU AMD Zen 4 guest, 56 to 60 % in three calibrations of
/// a 2-CPU Intel Emerald Rapids one, docs/calibration.md); under 2 MB
/// host pages they vanish (1 % on an Emerald Rapids guest whose host
/// uses 2 MB pages, ../shared/measurements: the probe's 4 KB frames lie
/// in at most 128 of the guest's 2 MB pages, whose translations the TLB
/// holds), and likewise 1 GB for `g1` against `g2`. So any clear share
/// kept says the host splinters the guest's pages.
pub fn host_page(d4: &[Point], d2: &[Point], g2: &[Point], g1: Option<&[Point]>, threshold: f64) -> HostPage {
    let ratios: Vec<f64> = d4.iter().filter(|p| p.y > threshold.max(1.0)).filter_map(|p| d2.iter().find(|q| q.x == p.x).map(|q| q.y.max(0.0) / p.y)).collect();
    if ratios.len() < 2 {
        return HostPage { size: None, reason: "guest 4 KB pages showed no TLB misses to compare with".into() };
    }
    let r = median(&mut ratios.clone());
    if r >= REMOVED {
        return HostPage {
            size: Some("4K".into()),
            reason: format!("guest 2 MB pages kept {:.0}% of the TLB miss cost of guest 4 KB pages (median over {} page counts; a host of 2 MB pages or more would leave them none): the TLB holds 4 KB translations, so the host maps the guest with 4 KB pages", 100.0 * r, ratios.len()),
        };
    }
    let why2 = format!("guest 2 MB pages removed {:.0}% of the TLB miss cost of guest 4 KB pages, so the host maps the guest with pages of 2 MB or more", 100.0 * (1.0 - r));
    let Some(g1) = g1 else {
        return HostPage { size: Some("2M".into()), reason: format!("{why2}; without a guest 1 GB page, 2 MB and 1 GB host pages look alike") };
    };
    let r1: Vec<f64> = g2.iter().filter(|p| p.y > threshold.max(1.0)).filter_map(|p| g1.iter().find(|q| q.x == p.x).map(|q| q.y.max(0.0) / p.y)).collect();
    if r1.len() < 2 {
        return HostPage { size: Some("2M".into()), reason: format!("{why2}; guest 2 MB pages showed no TLB misses for a guest 1 GB page to remove, so 1 GB host pages could not be told from 2 MB ones") };
    }
    let q = median(&mut r1.clone());
    if q < REMOVED {
        HostPage { size: Some("1G".into()), reason: format!("{why2}; a guest 1 GB page removed {:.0}% of the 2 MB pages' remaining TLB misses, so the host uses 1 GB pages", 100.0 * (1.0 - q)) }
    } else {
        HostPage { size: Some("2M".into()), reason: format!("{why2}; a guest 1 GB page kept {:.0}% of the 2 MB pages' TLB misses, so the host uses 2 MB pages", 100.0 * q) }
    }
}

/// Overlap from k-chase timings: `per_load` holds (k, ns per load). The
/// overlap is the best speedup over one chase, t(1) / t(k). None without
/// k = 1.
pub fn overlap(per_load: &[(usize, f64)]) -> Option<(f64, usize)> {
    let one = per_load.iter().find(|p| p.0 == 1)?.1;
    per_load.iter().filter(|p| p.1 > 0.0).map(|&(k, t)| (one / t, k)).max_by(|a, b| a.0.total_cmp(&b.0))
}

/// How many chases over walks and misses at once fared against the two
/// ways the model can hold a walker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlotFit {
    pub chases: usize,
    pub measured_ns: f64,
    /// Walkers held to each walk's end (older calibrations' JSON named
    /// it `holding_ns`, the same formula).
    #[serde(alias = "holding_ns")]
    pub held_ns: f64,
    /// Walkers held for each walk's part up to the second-level cache,
    /// its reads from beyond waiting in line-fill buffers
    /// (`far_walk_reads_in_mshrs`); None in older calibrations' JSON.
    #[serde(default)]
    pub released_ns: Option<f64>,
}

impl SlotFit {
    /// `released_ns` to two places, "-" where the calibration had none.
    pub fn released(&self) -> String {
        self.released_ns.map_or_else(|| "-".into(), |r| format!("{r:.2}"))
    }

    /// Whether the measurement says the walks' far reads left their
    /// walkers free: the nearer prediction, or None where the two lie
    /// within a tenth of the measurement of each other.
    pub fn far_reads_free(&self) -> Option<bool> {
        let (m, released) = (self.measured_ns, self.released_ns?);
        if (self.held_ns - released).abs() < 0.1 * m {
            return None;
        }
        Some((m - released).abs() < (m - self.held_ns).abs())
    }
}

/// How many walks overlap: what a walk alone adds to a load (`one` ns, a
/// single chase) over what walks add per load with many under way at once
/// (`extra` ns, `how` says how they were issued). Walks use the same miss
/// buffers as data, so more than `data_mlp` means the two could not be
/// told apart: capped there, with a note. None, with a note, when the
/// walks added nothing measurable.
pub fn walk_overlap(one: f64, extra: f64, data_mlp: f64, how: &str) -> (Option<f64>, Option<String>) {
    if extra <= 0.02 * one {
        return (None, Some(format!("with {how} the walks added nothing measurable: walk overlap not separable from data overlap")));
    }
    let w = one / extra;
    let note = (w > data_mlp).then(|| format!("walks seemed to overlap {w:.1}-fold with {how}, more than data misses do: not separable from the data overlap, capped at data_mlp"));
    (Some(w.clamp(1.0, data_mlp.max(1.0))), note)
}

/// Walks and data misses many at once (`bk` ns a load with `k` chases,
/// `b1` with one) against the two ways the model holds a walker, from
/// the data-only chase (`d1` ns a load alone), a walk alone with its
/// page-table lines in the second level (`one`, the walker probes') and
/// the overlap factors. Each chase has one load under way at a time and
/// it holds a miss slot through its walk and its miss, so the chases
/// take at least b1 / min(k, data_mlp) a load (with fewer chases than
/// data_mlp the slots they hold are k, not data_mlp: divided by data_mlp
/// instead, the prediction for 16 chases on a core that keeps 29 misses
/// in flight, an AMD Zen 5 guest, comes out at about half the
/// measurement). Walkers held to the walk's end also bound them at
/// x / walk_mlp, where x = b1 - d1 is what a walk adds to a lone load;
/// walkers free while the walk reads beyond the second level, at only
/// one / walk_mlp. None when x is within the noise.
#[allow(clippy::too_many_arguments)]
pub fn slot_fit(k: usize, d1: f64, b1: f64, bk: f64, one: f64, data_mlp: f64, walk_mlp: f64, threshold: f64) -> Option<SlotFit> {
    let x = b1 - d1;
    if x <= threshold {
        return None;
    }
    let slots = b1 / data_mlp.min(k as f64);
    Some(SlotFit { chases: k, measured_ns: bk, held_ns: (x / walk_mlp).max(slots), released_ns: Some((one.min(x) / walk_mlp).max(slots)) })
}

/// The core's window for loops of independent misses (see
/// `Overlap::window` in the profile): how many instructions it holds while
/// a miss is under way, and what a miss and a store take of it besides
/// their instructions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WindowFit {
    /// The latency the loops' misses were measured against (one chase
    /// over the same lines), ns.
    pub latency_ns: f64,
    /// Instructions the window holds over that latency.
    pub entries: f64,
    /// What an iteration's miss takes besides its instructions.
    pub per_miss: f64,
    /// What a store takes besides its instruction.
    pub per_store: f64,
}

/// Fits the window to loops of independent misses to memory `mem_ns` away
/// (`probe::WindowShape`): `nops` holds two loops without stores,
/// (instructions an iteration, ns an iteration); `stores` loops with
/// stores, (instructions, stores, ns). Where the window bounds a loop, it
/// keeps entries / (per_miss + instructions + per_store x stores)
/// iterations in flight, so an iteration takes mem_ns / entries ns for
/// each: the two nop loops' slope gives entries, their level per_miss,
/// and the store loops what is left over for each store (the mean).
/// An error when the nop loops ran at the miss slots' pace (`data_mlp`
/// misses at once) rather than the window's, or did not slow with more
/// instructions.
pub fn window(mem_ns: f64, data_mlp: f64, nops: [(f64, f64); 2], stores: &[(f64, f64, f64)]) -> Result<WindowFit, String> {
    let slots_ns = mem_ns / data_mlp.max(1.0);
    let [(u1, t1), (u2, t2)] = nops;
    if t1.min(t2) < 1.1 * slots_ns {
        return Err(format!("loops of {u1} and {u2} instructions a miss took {t1:.2} and {t2:.2} ns: not clearly past the miss slots' {slots_ns:.2} ns a miss, so the window is not what bounds them"));
    }
    let q = (t2 - t1) / (u2 - u1);
    if q.is_nan() || q <= 0.0 {
        return Err(format!("loops of {u1} and {u2} instructions a miss took {t1:.2} and {t2:.2} ns: no slower with more instructions"));
    }
    let per_miss = (t1 / q - u1).max(0.0);
    // A miss takes an entry or a few of the window beyond its own
    // instruction; a fit that gives it more than the loop's instructions
    // is of loops whose time hardly grows with them, bounded elsewhere.
    if per_miss > u1 {
        return Err(format!("loops of {u1} and {u2} instructions a miss took {t1:.2} and {t2:.2} ns: their time hardly grows with their instructions, so the window is not what bounds them"));
    }
    let k: Vec<f64> = stores.iter().filter(|x| x.1 > 0.0).map(|&(u, s, t)| ((t / q - per_miss - u) / s).max(0.0)).collect();
    let per_store = if k.is_empty() { 0.0 } else { k.iter().sum::<f64>() / k.len() as f64 };
    Ok(WindowFit { latency_ns: mem_ns, entries: mem_ns / q, per_miss, per_store })
}

/// What one probe costs over its control, from two probes of the same
/// thing: the median of both probes' samples less the median of both
/// controls' (`probe`, `control` hold each probe's samples).
pub fn pooled_extra(probe: [&[f64]; 2], control: [&[f64]; 2]) -> f64 {
    median(&mut probe.concat()) - median(&mut control.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loops `probe::WindowShape` times, as a copy of the probes timed
    /// them on an AMD EPYC (Zen 5) KVM guest (medians of 7, 2 MB pages
    /// over 256 MB): 16 and 32 nops 10.66 and 17.14 ns a miss, two
    /// and three stores beside a read-modify-write 7.89 and 9.86. The fit
    /// then predicts HPCC's loop (10.5 instructions, 2 stores an update),
    /// timed at 9.18 ns in the same runs, within 10 %.
    #[test]
    fn the_window_is_fitted_to_loops_of_misses() {
        let w = window(155.0, 30.0, [(21.0, 10.66), (37.0, 17.14)], &[(7.0, 3.0, 7.89), (8.0, 4.0, 9.86)]).unwrap();
        let q: f64 = 6.48 / 16.0;
        assert!((w.entries - 155.0 / q).abs() < 1e-9, "{w:?}");
        assert!((w.per_miss - (10.66 / q - 21.0)).abs() < 1e-9, "{w:?}");
        let k = ((7.89 / q - w.per_miss - 7.0) / 3.0 + (9.86 / q - w.per_miss - 8.0) / 4.0) / 2.0;
        assert!((w.per_store - k).abs() < 1e-9 && w.per_store > 2.0 && w.per_store < 3.0, "{w:?}");
        let hpcc = 155.0 * (w.per_miss + 10.5 + 2.0 * w.per_store) / w.entries;
        assert!((hpcc / 9.18 - 1.0).abs() < 0.10, "{hpcc}");
        // Loops whose time hardly grows with their instructions neither.
        let e = window(184.3, 21.54, [(21.0, 9.58), (37.0, 10.40)], &[]).unwrap_err();
        assert!(e.contains("hardly grows"), "{e}");
        // Loops at the miss slots' pace say nothing of the window.
        let e = window(155.0, 30.0, [(21.0, 5.3), (37.0, 17.14)], &[]).unwrap_err();
        assert!(e.contains("5.30") && e.contains("5.17"), "{e}");
        let e = window(155.0, 30.0, [(21.0, 10.66), (37.0, 10.0)], &[]).unwrap_err();
        assert!(e.contains("no slower"), "{e}");
    }

    #[test]
    fn pooled_extra_outvotes_one_probe_disturbed() {
        // Three of five rounds of the first probe were disturbed; the
        // second probe's five were not.
        let (a, b) = ([60.0, 58.0, 31.0, 62.0, 30.0], [31.0, 30.5, 31.5, 30.0, 31.0]);
        let (ca, cb) = ([8.0, 8.5, 7.5, 8.0, 8.0], [8.0, 8.0, 8.5, 7.5, 8.0]);
        assert!((median(&mut a.to_vec()) - 8.0 - 50.0).abs() < 1e-9, "alone, the first probe says 50");
        assert!((pooled_extra([&a, &b], [&ca, &cb]) - 23.0).abs() < 1e-9, "{}", pooled_extra([&a, &b], [&ca, &cb]));
    }

    fn curve(f: impl Fn(f64) -> f64, xs: &[f64]) -> Vec<Point> {
        xs.iter().map(|&x| Point::new(x, f(x))).collect()
    }

    /// A latency curve `splab calibrate` measured on an AMD EPYC (Zen 5)
    /// KVM guest whose host maps it with 4 KB pages, quarter octaves
    /// from 4 KiB to 512 MiB. Its 2 MB pages are cached as 4 KB pieces, so
    /// past 384 KiB (96 first-level entries) the chase also misses the
    /// first TLB level, and past 16 MiB the second: the curve climbs off
    /// the L2 plateau before the L2 fills, and keeps climbing past the
    /// memory step.
    fn zen5_guest_curve() -> Vec<Point> {
        let ys = [1.072, 1.075, 1.082, 1.075, 1.078, 1.071, 1.077, 1.082, 1.072, 1.083, 1.083, 1.099, 1.092, 1.085, 1.112, 3.830, 3.812, 3.738, 3.760, 3.775, 3.761, 3.764, 3.758, 3.805, 3.746, 3.737, 3.774, 4.006, 4.243, 5.120, 6.945, 7.617, 9.274, 10.11, 11.72, 13.48, 14.41, 16.38, 17.03, 18.04, 18.63, 22.11, 27.96, 50.15, 112.7, 146.9, 145.1, 146.3, 150.2, 150.1, 153.0, 153.0, 153.7, 153.5, 156.6, 157.3, 159.0, 158.7, 158.4, 161.1, 161.9, 161.4, 165.6, 165.1, 166.2, 170.2, 170.3, 175.8, 179.3];
        ys.iter().enumerate().map(|(k, &y)| Point::new(4096.0 * 2f64.powf(k as f64 / 4.0), y)).collect()
    }

    #[test]
    fn a_level_is_read_inside_it_past_one_disturbed_point() {
        // The last level's points between 1.5 MB and 4 MB (13 to 19 ns),
        // then the same curve with its 4 MiB point disturbed to 69.6 ns
        // (as another calibration on that guest had it): the last level's latency is
        // the median of the points inside it either way, not the plateau
        // before the memory step (which climbs as the level fills).
        let clean = less_first_tlb_misses(&zen5_guest_curve(), 96.0, 1.9);
        let mut spiked = clean.clone();
        let at = spiked.iter().position(|p| p.x == 4.0 * 1048576.0).unwrap();
        spiked[at].y = 69.6;
        let (h, g) = (hierarchy(&clean).unwrap(), hierarchy(&spiked).unwrap());
        assert!((12.0..16.5).contains(&h.latency_ns[2]), "{h:?}");
        assert!((g.latency_ns[2] - h.latency_ns[2]).abs() < 1.0, "{g:?} against {h:?}");
        // The capacity may move by a point of the grid (a quarter octave).
        assert!((g.memory_ns - h.memory_ns).abs() < 1.0 && (g.size_bytes[2] / h.size_bytes[2]).log2().abs() <= 0.26, "{g:?} against {h:?}");
    }

    /// The 4 KB TLB curve of a calibration on the same guest: the
    /// first level fills at 96 pages (+1.9 ns), and the hashed second
    /// level's knee climbs in small steps from 2560 pages (+4.7, +4.6,
    /// +7.0, +7.8, +10.2) before the big one. The plateau just before the
    /// big step is halfway up the knee; read as the hits' level it made
    /// the first level 2048 entries.
    #[test]
    fn a_knee_in_small_steps_leaves_the_first_level_alone() {
        let pts: Vec<Point> = [(8.0, 0.0), (10.0, 0.0), (12.0, -0.0), (14.0, -0.0), (16.0, 0.0), (20.0, -0.0), (24.0, 0.0), (28.0, 0.0), (32.0, 0.0), (40.0, -0.0), (48.0, -0.0), (56.0, -0.0), (64.0, 0.0), (80.0, 0.0), (96.0, -0.0), (112.0, 1.9), (128.0, 1.9), (160.0, 1.9), (192.0, 1.9), (224.0, 1.9), (256.0, 1.9), (320.0, 2.3), (384.0, 2.6), (448.0, 2.7), (512.0, 3.0), (640.0, 3.1), (768.0, 3.4), (896.0, 2.5), (1024.0, 2.3), (1280.0, 2.2), (1536.0, 2.5), (1792.0, 2.2), (2048.0, 2.2), (2560.0, 4.7), (3072.0, 4.6), (3584.0, 7.0), (4096.0, 7.8), (5120.0, 10.2), (6144.0, 11.3), (7168.0, 13.3), (8192.0, 14.6), (10240.0, 18.4), (12288.0, 25.0), (14336.0, 28.6), (16384.0, 29.0), (20480.0, 17.7), (24576.0, 47.2), (28672.0, 72.0), (32768.0, 85.5), (40960.0, 137.1), (49152.0, 123.8), (57344.0, 114.6), (65536.0, 123.9)].iter().map(|&(x, y)| Point::new(x, y)).collect();
        let lv = tlb_levels(&pts, 0.5);
        assert_eq!(lv.l1_entries, Some(96.0), "{lv:?}");
        assert!((1.8..2.7).contains(&lv.l2_hit_ns.unwrap()), "{lv:?}");
    }

    #[test]
    fn a_climb_that_pauses_on_one_point_is_one_step() {
        // The last level's step climbs 18 -> 28 -> 50 -> 113 -> 147 ns:
        // the rise rule stops at 113, one point short of memory. Read as
        // memory, 113 ns was the curve's only point there.
        let h = hierarchy(&zen5_guest_curve()).unwrap();
        assert!((145.0..165.0).contains(&h.memory_ns), "{h:?}");
        assert!((4.0..8.0).contains(&(h.size_bytes[2] / 1048576.0)), "{h:?}");
        assert!((h.latency_ns[0] - 1.08).abs() < 0.05, "{h:?}");
    }

    #[test]
    fn first_tlb_misses_are_taken_out_where_host_pages_splinter() {
        let raw = zen5_guest_curve();
        let less = less_first_tlb_misses(&raw, 96.0, 1.9);
        // Within the first level's reach (384 KiB) nothing changes; past it
        // the share missing rises to all but 96 pages' worth.
        assert_eq!(less[..27], raw[..27]);
        let at = |x: f64| raw.iter().zip(&less).find(|(p, _)| (p.x - x).abs() < 1.0).map(|(p, q)| p.y - q.y).unwrap();
        assert!((at(1048576.0) - 1.9 * (1.0 - 96.0 / 256.0)).abs() < 1e-9);
        let h = hierarchy(&less).unwrap();
        let g = hierarchy(&raw).unwrap();
        assert_eq!(h.less_first_tlb_miss_ns, None, "the caller says what it took out");
        // The second level is the plateau the first level's step rises to,
        // 3.8 ns (14 cycles at 3.7 GHz, Zen 5's published L2 latency); the
        // last level and memory lose a second-level TLB hit's share.
        assert!((3.7..3.9).contains(&h.latency_ns[1]), "{h:?}");
        // (Less than the whole share: the curves' second levels end apart,
        // 861 and 724 KiB, so their third levels' medians are over points
        // a little apart.)
        assert!((g.latency_ns[2] - 1.9..g.latency_ns[2] - 0.3).contains(&h.latency_ns[2]), "{h:?} against {g:?}");
        assert!((145.0..160.0).contains(&h.memory_ns) && h.memory_ns < g.memory_ns, "{h:?} against {g:?}");
    }

    #[test]
    fn fits_a_synthetic_hierarchy() {
        let c = [48.0 * 1024.0, 2048.0 * 1024.0, 96.0 * 1048576.0];
        let l = [1.5, 5.0, 30.0, 110.0];
        let xs = quarter_octaves(1024.0 * 1048576.0);
        let h = fit_hierarchy(&curve(|s| model(s, &c, &l), &xs)).unwrap();
        for k in 0..3 {
            assert!((h.size_bytes[k] / c[k] - 1.0).abs() < 0.2, "level {k}: {:?}", h);
            assert!((h.latency_ns[k] / l[k] - 1.0).abs() < 0.1, "level {k}: {:?}", h);
        }
        assert!((h.memory_ns / 110.0 - 1.0).abs() < 0.1, "{h:?}");
        // Sharp cliffs (LRU thrashing) with 2% noise: sizes still found.
        let cliff = |s: f64| {
            let base = if s <= c[0] { l[0] } else if s <= c[1] { l[1] } else if s <= c[2] { l[2] } else { l[3] };
            base * (1.0 + 0.02 * ((s.log2() * 7.0).sin()))
        };
        let h = fit_hierarchy(&curve(cliff, &xs)).unwrap();
        for (k, (got, want)) in h.size_bytes.iter().zip(c).enumerate() {
            assert!((got / want - 1.0).abs() < 0.25, "cliff level {k}: {:?}", h);
        }
        assert!(fit_hierarchy(&xs[..5].iter().map(|&x| Point::new(x, 1.0)).collect::<Vec<_>>()).is_none());
    }

    #[test]
    fn plateaus_of_a_noisy_cliff_curve() {
        // Shaped like an Intel Xeon guest: a slow last-level cache (135 ns)
        // only 15% below memory, and two noisy points on the L2 plateau.
        let c = [48.0 * 1024.0, 2048.0 * 1024.0, 105.0 * 1048576.0];
        let l = [2.3, 7.3, 135.0, 155.0];
        let xs = quarter_octaves(512.0 * 1048576.0);
        let mut pts = curve(|s| plateau_model(s, &c, &l), &xs);
        let k = pts.iter().position(|p| p.x >= 600.0 * 1024.0).unwrap();
        pts[k].y = 9.6;
        pts[k + 1].y = 10.6;
        let h = hierarchy(&pts).unwrap();
        assert_eq!(h.method, "plateaus");
        for k in 0..3 {
            assert!(h.size_bytes[k] <= c[k] && h.size_bytes[k] > c[k] / 1.2, "level {k}: {h:?}");
            assert!((h.latency_ns[k] / l[k] - 1.0).abs() < 0.02, "level {k}: {h:?}");
        }
        assert!((h.memory_ns / 155.0 - 1.0).abs() < 0.02, "{h:?}");
        // With the reported sizes, a sloping, noisy L2 plateau still gives
        // its latency and capacity.
        let mut slope = pts.clone();
        for p in slope.iter_mut().filter(|p| p.x > 64.0 * 1024.0 && p.x < 1024.0 * 1024.0) {
            p.y *= 1.0 + 0.5 * (p.x / (1024.0 * 1024.0)) * if (p.x.log2() * 4.0) as i64 % 2 == 0 { 1.0 } else { -0.4 };
        }
        let h = hierarchy_at(&slope, c).unwrap();
        for k in 0..3 {
            assert!(h.size_bytes[k] <= c[k] && h.size_bytes[k] > c[k] / 1.2, "level {k}: {h:?}");
            assert!((h.latency_ns[k] / l[k] - 1.0).abs() < 0.15, "level {k}: {h:?}");
        }
        assert!((h.memory_ns / 155.0 - 1.0).abs() < 0.02, "{h:?}");
        assert!(hierarchy_at(&slope[..10], c).is_none());
        assert_eq!(h.step_seen, [true; 3]);
        // A last-level cache as slow as memory (an Intel Xeon guest): no step
        // to measure, the reported size stands.
        let flat = curve(|s| plateau_model(s, &c, &[2.3, 7.3, 152.0, 154.0]), &xs);
        let h = hierarchy_at(&flat, c).unwrap();
        assert_eq!((h.step_seen, h.size_bytes[2]), ([true, true, false], c[2]));
        // A gradual curve has no three clear steps: the fit takes over.
        let g = hierarchy(&curve(|s| model(s, &c, &[1.5, 5.0, 30.0, 110.0]), &xs)).unwrap();
        assert!(g.size_bytes.iter().all(|s| s.is_finite()));
    }

    fn pages_grid() -> Vec<f64> {
        let mut v = Vec::new();
        let mut p = 8.0;
        while p <= 65536.0 {
            for m in [1.0, 1.25, 1.5, 1.75] {
                v.push(p * m);
            }
            p *= 2.0;
        }
        v
    }

    /// A curve made by one candidate of the model is fitted back to it,
    /// its costs recovered, and told from the other index.
    #[test]
    fn the_stlb_fit_recovers_the_array_that_made_the_curve() {
        // A stand-in for the model: modulo steps at the capacity, hashed
        // rises over a third of it either side.
        let shares = |e: u64, hashed: bool, n: u64| -> (f64, f64) {
            let m = if hashed { ((n as f64 - e as f64 * 0.67) / (e as f64 * 0.67)).clamp(0.0, 1.0) } else if n > e { 1.0 } else { 0.0 };
            (1.0 - m, m)
        };
        let cands: Vec<(u64, bool)> = (4..=32).flat_map(|k| [(k * 128, false), (k * 128, true)]).collect();
        for truth in [(2048u64, true), (1536, false)] {
            let pts = curve(|n| if n <= 96.0 { 0.0 } else { let (h, m) = shares(truth.0, truth.1, n as u64); 3.0 * h + 20.0 * m }, &pages_grid());
            let f = fit_stlb(&pts, 384.0, 8192.0, &cands, shares).unwrap();
            assert_eq!((f.entries, f.hashed), truth, "{f:?}");
            assert!((f.hit_ns - 3.0).abs() < 1e-6 && (f.walk_ns - 20.0).abs() < 1e-6 && f.rms_ns < 1e-6, "{f:?}");
            assert!(f.other_rms_ns > 0.5, "{f:?}");
            assert_eq!(l1_entries_below(&pts, f.hit_ns), Some(96.0));
        }
        // Too few points, or none that tells a hit from a walk.
        assert!(fit_stlb(&curve(|_| 1.0, &[400.0, 500.0, 600.0]), 384.0, 8192.0, &cands, shares).is_none());
        assert!(fit_stlb(&curve(|_| 1.0, &pages_grid()), 9000.0, 70000.0, &[(512, false)], shares).is_none());
    }

    #[test]
    fn finds_the_two_tlb_steps() {
        let tlb = |n: f64| if n <= 64.0 { 0.0 } else if n <= 1536.0 { 2.3 } else { 20.0 + n / 4096.0 };
        let pts = curve(tlb, &pages_grid());
        let e = edges(&pts, 0.8);
        assert!(e.len() >= 2, "{e:?}");
        assert_eq!((e[0].last_x, e[1].last_x), (64.0, 1536.0), "{e:?}");
        assert_eq!((e[0].capacity_x, e[1].capacity_x), (64.0, 1536.0), "{e:?}");
        assert!((e[0].level_after - 2.3).abs() < 0.01);
        // A long gentle climb after the second step (as on an Intel Xeon
        // guest) does not move the second level's capacity.
        let slope = curve(|n| if n <= 96.0 { 0.0 } else if n <= 1792.0 { 4.0 } else if n <= 2048.0 { 19.0 } else { 25.0 + n / 400.0 }, &pages_grid());
        let lv = tlb_levels(&slope, 0.75);
        assert_eq!(lv.l2_entries, Some(1792.0), "{lv:?}");
        // A small step on the second level's plateau and a steeper one
        // when page tables leave the caches (a run on an Intel Xeon guest).
        let run = |n: f64| if n <= 80.0 { 0.0 } else if n <= 448.0 { 3.5 } else if n <= 1536.0 { 5.0 } else if n <= 8192.0 { 23.0 } else { 130.0 };
        let lv = tlb_levels(&curve(run, &pages_grid()), 0.6);
        assert_eq!((lv.l1_entries, lv.l2_entries), (Some(80.0), Some(1536.0)), "{lv:?}");
        let lv = tlb_levels(&pts, 0.8);
        assert_eq!((lv.l1_entries, lv.l2_entries), (Some(64.0), Some(1536.0)), "{lv:?}");
        assert!((lv.l2_hit_ns.unwrap() - 2.3).abs() < 0.01 && lv.walk_ns.unwrap() > 20.0, "{lv:?}");
        // A first level that fills in two steps (as an Intel Xeon guest
        // shows: +0.9 ns at 80 pages, +1.4 at 96, +3 from 112).
        let two = |n: f64| if n <= 64.0 { 0.0 } else if n <= 80.0 { 0.9 } else if n <= 96.0 { 1.4 } else if n <= 1536.0 { 3.4 } else { 25.0 };
        let lv = tlb_levels(&curve(two, &pages_grid()), 0.5);
        assert_eq!((lv.l1_entries, lv.l2_entries), (Some(96.0), Some(1536.0)), "{lv:?}");
        // A lone spike is not a step.
        let mut spiky = curve(|n| if n <= 64.0 { 0.0 } else { 2.0 }, &pages_grid());
        spiky[3].y = 5.0;
        let e = edges(&spiky, 0.8);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].last_x, 64.0);
        assert!(edges(&curve(|_| 1.0, &pages_grid()), 0.5).is_empty());
        // A step whose first point is still mostly hits: the capacity is
        // that point, below the midpoint of the two levels.
        let bend = curve(|n| if n <= 80.0 { 0.0 } else if n <= 96.0 { 1.2 } else { 3.3 }, &pages_grid());
        let e = edges(&bend, 0.5);
        assert_eq!((e[0].last_x, e[0].capacity_x), (80.0, 96.0), "{e:?}");
    }

    #[test]
    fn tells_host_page_sizes_apart() {
        let xs = pages_grid();
        let d4 = curve(|n| if n <= 64.0 { 0.0 } else { 3.0 + n / 1000.0 }, &xs);
        let none = curve(|_| 0.1, &xs);
        let g2 = curve(|n| if n <= 32.0 { 0.0 } else { 2.0 }, &xs);
        // Host 4 KB: guest 2 MB pages keep the misses.
        let d2 = curve(|n| if n <= 64.0 { 0.0 } else { 2.5 + n / 1000.0 }, &xs);
        assert_eq!(host_page(&d4, &d2, &g2, None, 0.5).size.as_deref(), Some("4K"));
        // Host 2 MB: they vanish; 1 GB cannot be told without a 1 GB page.
        let h = host_page(&d4, &none, &g2, None, 0.5);
        assert_eq!(h.size.as_deref(), Some("2M"));
        assert!(h.reason.contains("1 GB"), "{}", h.reason);
        // Host 1 GB: a guest 1 GB page removes the 2 MB pages' misses too.
        assert_eq!(host_page(&d4, &none, &g2, Some(&none), 0.5).size.as_deref(), Some("1G"));
        assert_eq!(host_page(&d4, &none, &g2, Some(&g2), 0.5).size.as_deref(), Some("2M"));
        // Half the cost kept (walks shortened by the guest's last level,
        // the rest kept): the TLB still holds 4 KB pieces.
        let half = curve(|n| if n <= 64.0 { 0.0 } else { (3.0 + n / 1000.0) / 2.0 }, &xs);
        assert_eq!(host_page(&d4, &half, &g2, None, 0.5).size.as_deref(), Some("4K"));
        // A fifth kept (noise over a 2 MB host's nothing): 2 MB.
        let fifth = curve(|n| if n <= 64.0 { 0.0 } else { (3.0 + n / 1000.0) / 5.0 }, &xs);
        assert_eq!(host_page(&d4, &fifth, &g2, None, 0.5).size.as_deref(), Some("2M"));
        // No TLB misses at all: undecided.
        assert_eq!(host_page(&none, &none, &g2, None, 0.5).size, None);
    }

    #[test]
    fn overlap_is_the_best_speedup() {
        let t = [(1, 100.0), (2, 50.0), (4, 26.0), (8, 14.0), (16, 15.0)];
        let (m, k) = overlap(&t).unwrap();
        assert!((m - 100.0 / 14.0).abs() < 1e-9 && k == 8);
        assert!(overlap(&[(2, 1.0)]).is_none());
    }

    #[test]
    fn walk_overlap_is_a_walk_alone_over_what_walks_add_at_once() {
        let (w, note) = walk_overlap(19.2, 9.6, 11.5, "independent loads");
        assert_eq!((w, note), (Some(2.0), None));
        // More than data misses overlap: capped, and said.
        let (w, note) = walk_overlap(19.2, 1.2, 11.5, "16 chases");
        assert_eq!(w, Some(11.5));
        assert!(note.unwrap().contains("16.0-fold with 16 chases"));
        // Nothing measurable.
        let (w, note) = walk_overlap(19.2, 0.3, 11.5, "independent loads");
        assert_eq!(w, None);
        assert!(note.unwrap().contains("with independent loads the walks added nothing measurable"));
    }

    /// GUPS-like chases: a walk of 60 ns (20 with its page-table lines in
    /// L2) under misses of 150 ns. Held walkers predict 60 / 4 = 15 ns,
    /// against the slots' (60 + 150) / 12 = 17.5 ns; released, 17.5 too:
    /// the two cannot be told apart. A lone walk within the noise tells
    /// nothing.
    #[test]
    fn slot_fit_sets_the_two_walker_models_beside_the_measurement() {
        let f = slot_fit(16, 150.0, 210.0, 18.0, 20.0, 12.0, 4.0, 1.0).unwrap();
        assert!((f.held_ns - 17.5).abs() < 1e-9 && f.released_ns == Some(17.5), "{f:?}");
        assert_eq!((f.chases, f.measured_ns, f.far_reads_free()), (16, 18.0, None));
        assert!(slot_fit(16, 150.0, 150.5, 12.6, 20.0, 12.0, 4.0, 1.0).is_none());
        // Calibrations of three guests (docs/calibration.md): an Intel
        // Emerald Rapids guest over 4 KB host pages, whose walks added 85
        // ns to a lone miss (23.3 with their tables in L2) and overlapped
        // far past its 2.48 walkers; an AMD Zen 4 guest over 4 KB host
        // pages likewise; a 16-CPU Emerald Rapids guest over 2 MB host
        // pages, whose short walks kept their walkers.
        for (d1, b1, bk, one, data, walk, free) in [
            (139.1, 226.6, 16.21, 23.33, 14.27, 2.48, true),
            (183.7, 328.1, 13.92, 27.42, 21.21, 5.96, true),
            (146.5, 174.26, 13.04, 15.78, 22.01, 2.16, false),
        ] {
            let f = slot_fit(16, d1, b1, bk, one, data, walk, 1.0).unwrap();
            assert_eq!(f.far_reads_free(), Some(free), "{f:?}");
        }
        // Where data_mlp exceeds the chases, the slots are the chases':
        // 197.9 / 16, not 197.9 / 29.19.
        let f = slot_fit(16, 169.7, 197.9, 11.39, 20.0, 29.19, 12.2, 1.0).unwrap();
        assert!((f.held_ns - 197.9 / 16.0).abs() < 1e-9, "{f:?}");
    }

    /// Another of the AMD Zen 5 guest's curves (KiB, ns): past the L2 it
    /// climbs to 32 ns at 4 MB (walks, as the host's 4 KB pages splinter
    /// the chase's 2 MB pages), pauses there for a point, and falls off to
    /// memory by 5.7 MB. The pause made a step of its own, joined to the
    /// climb after it; the last level's size is where the whole climb
    /// crosses halfway (4 MB), not where its first part did (2.8 MB). The
    /// second level's climb pauses too (609 to 724 KiB), and is placed at
    /// 1 MB, Zen 5's L2, where its first part gave 861 KiB.
    #[test]
    fn a_joined_climb_is_sized_halfway_over_all_of_it() {
        let kib_ns = [
            (4.0, 1.057), (4.8, 1.06), (5.7, 1.068), (6.8, 1.062), (8.0, 1.072), (9.5, 1.063), (11.3, 1.065), (13.4, 1.075),
            (16.0, 1.065), (19.0, 1.069), (22.6, 1.048), (26.9, 1.061), (32.0, 1.067), (38.1, 1.094), (45.2, 1.103), (53.8, 3.749),
            (64.0, 3.724), (76.1, 3.747), (90.5, 3.732), (107.6, 3.725), (128.0, 3.727), (152.2, 3.797), (181.0, 3.731), (215.2, 3.747),
            (256.0, 3.72), (304.4, 3.768), (362.1, 3.719), (430.6, 3.969), (512.0, 4.22), (608.9, 4.444), (724.1, 5.036), (861.1, 5.789),
            (1024.0, 8.445), (1228.8, 11.52), (1433.6, 13.49), (1740.8, 16.1), (2048.0, 17.81), (2457.6, 18.6), (2867.2, 20.86), (3481.6, 29.0),
            (4096.0, 32.43), (4915.2, 70.82), (5836.8, 145.1), (6860.8, 146.2), (8192.0, 148.7), (9728.0, 147.3), (11571.2, 147.6), (13824.0, 149.4),
            (16384.0, 149.5), (19456.0, 150.8), (23142.4, 152.6), (27545.6, 155.4), (32768.0, 156.7), (39014.4, 158.2), (46387.2, 156.7), (55091.2, 161.0),
            (65536.0, 160.8), (77926.4, 160.0), (92672.0, 159.7), (110182.4, 163.3), (131072.0, 163.7), (155852.8, 163.3), (185344.0, 164.4), (220467.2, 164.7),
            (262144.0, 168.9), (311705.6, 169.9), (370688.0, 178.9), (440832.0, 184.8), (524288.0, 193.3),
        ];
        let pts: Vec<Point> = kib_ns.iter().map(|&(k, ns)| Point::new(k * 1024.0, ns)).collect();
        let h = hierarchy(&pts).unwrap();
        assert_eq!(h.size_bytes.map(|b| (b / 1024.0).round()), [45.0, 1024.0, 4096.0], "{h:?}");
        assert!((h.memory_ns - 156.7).abs() < 0.05, "{h:?}");
    }

    /// A curve calibrate measured on the same guest whose climb to memory
    /// pauses: past an 11.6 MB last level the climb to
    /// memory paused for two points (119.3 and 115.0 ns at 13.5 and 16
    /// MB) and went on to 163.8 at 512 MB, while a chase over 64 MB read
    /// 147.5 in the same calibration. Memory is the median of every point
    /// from where its step settled, not of the pause alone (117.2 ns, which
    /// would put the profile's memory at 114.9).
    #[test]
    fn memory_is_read_past_a_pause_in_its_climb() {
        let ns = [
            0.9872, 0.9917, 0.9874, 1.0, 0.9912, 0.9907, 0.9938, 0.984, 0.9929, 0.9819, 0.9905, 0.9898, 0.9995, 0.9889, 0.9985, 3.481, 3.492, 3.5, 3.433, 3.487,
            3.476, 3.48, 3.468, 3.43, 3.436, 3.467, 3.477, 3.647, 3.914, 4.138, 4.289, 5.677, 7.18, 8.709, 10.73, 11.93, 12.92, 13.33, 13.57, 14.2, 14.92, 15.08,
            15.08, 15.35, 15.34, 19.52, 28.46, 119.3, 115.0, 135.6, 143.6, 141.3, 144.0, 143.8, 143.5, 147.0, 151.3, 150.3, 153.2, 153.9, 153.7, 156.3, 158.1,
            158.5, 162.5, 162.7, 161.9, 163.0, 163.8,
        ];
        // Quarter octaves from 4 KiB.
        let pts: Vec<Point> = ns.iter().enumerate().map(|(i, &y)| Point::new(4096.0 * 2f64.powf(i as f64 / 4.0), y)).collect();
        let h = hierarchy(&pts).unwrap();
        assert_eq!(h.size_bytes.map(|b| (b / 1024.0).round()), [45.0, 1024.0, 11585.0], "{h:?}");
        // The despiked curve's median: that of the two middle points'
        // neighbourhoods, between 150.3 and 153.9.
        assert!(h.memory_ns > 150.0 && h.memory_ns < 154.0, "{h:?}");
    }

    /// A guest's curve whose last level ends near 5 MB of the 32 MB CPUID
    /// reports (other tenants take the rest; the points of an AMD EPYC
    /// guest's calibration): the levels come from the curve's steps, the
    /// last at about 16 ns, memory past it.
    #[test]
    fn a_shared_last_level_is_read_from_the_curves_steps() {
        let pts: Vec<Point> = [
            (4.0, 1.14), (8.0, 1.12), (16.0, 1.13), (32.0, 1.32), (38.1, 4.0), (64.0, 3.86), (128.0, 3.98), (256.0, 3.88), (430.6, 4.82), (512.0, 5.63), (724.1, 7.02),
            (1024.0, 10.77), (1433.6, 12.8), (2048.0, 15.28), (2867.0, 15.3), (4096.0, 16.58), (4915.0, 17.8), (5836.0, 53.5), (6860.0, 111.9), (8192.0, 133.9),
            (11571.0, 141.7), (16384.0, 147.3), (23142.0, 154.3), (32768.0, 159.2), (65536.0, 165.5), (131072.0, 172.6), (262144.0, 181.1), (524288.0, 209.9),
        ]
        .iter()
        .map(|&(kb, ns)| Point { x: kb * 1024.0, y: ns, iqr: 0.0 })
        .collect();
        let h = hierarchy_of(&pts, Some([32768.0, 1048576.0, 33554432.0])).unwrap();
        assert_eq!(h.method, "plateaus, a shared last level");
        assert!(h.size_bytes[2] < 8e6 && (13.0..18.0).contains(&h.latency_ns[2]), "{h:?}");
        assert!(h.memory_ns > 130.0, "{h:?}");
        // Where the last level holds its reported size, CPUID's sizes stand.
        let whole: Vec<Point> = pts.iter().map(|p| Point { y: if p.x > 4096.0 * 1024.0 && p.x <= 33554432.0 { 17.0 } else { p.y }, ..*p }).collect();
        assert_eq!(hierarchy_of(&whole, Some([32768.0, 1048576.0, 33554432.0])).unwrap().method, "reported sizes");
    }

    /// The latency curve `splab calibrate` measured on a 16-CPU Intel
    /// Emerald Rapids KVM guest (shared/measurements/emerald-rapids,
    /// calibrate.txt: ns a load at quarter-octave sizes from 4 KB to 512
    /// MB), where CPUID reports a 300 MB L3: the curve climbs from about
    /// 50 ns (2 to 6.7 MB) to the memory's 135 to 156 ns past 11 MB, so
    /// the guest gets about 10 MB of the L3, and the levels come from the
    /// steps (the calibrate that measured it placed the L3 at 300 MB with
    /// the memory's latency, 137 ns).
    #[test]
    fn an_emerald_rapids_guests_last_level_is_the_part_it_gets() {
        let ns = [
            2.106, 2.065, 2.083, 2.059, 2.072, 2.065, 2.066, 2.148, 2.075, 2.088, 2.070, 2.145,
            2.321, 2.948, 4.769, 6.349, 6.482, 6.561, 6.614, 6.673, 6.741, 6.548, 6.685, 6.860,
            6.945, 6.771, 6.640, 6.946, 6.985, 6.952, 6.905, 6.942, 7.399, 9.950, 26.82, 36.07,
            47.18, 49.57, 49.86, 52.92, 53.71, 59.18, 62.81, 61.48, 79.30, 84.55, 132.3, 136.9,
            145.7, 143.7, 137.8, 134.9, 145.5, 136.0, 146.6, 139.8, 144.0, 136.7, 147.0, 150.6,
            147.0, 139.5, 149.5, 149.8, 139.5, 151.6, 155.8, 142.2, 153.1,
        ];
        let pts: Vec<Point> = ns.iter().enumerate().map(|(i, &y)| Point::new(4096.0 * 2f64.powf(i as f64 / 4.0), y)).collect();
        let h = hierarchy_of(&pts, Some([49152.0, 2097152.0, 314572800.0])).unwrap();
        assert_eq!(h.method, "plateaus, a shared last level");
        assert!((9e6..11e6).contains(&h.size_bytes[2]) && (50.0..56.0).contains(&h.latency_ns[2]), "{h:?}");
        assert!((140.0..150.0).contains(&h.memory_ns), "{h:?}");
    }
}
