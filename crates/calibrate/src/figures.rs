//! Figures read off a calibration that both the profile and the report
//! give: cycles at the measured clock, how the 4 KB frames lay, whether
//! streams go on into the next frame, what a writeback and a store cost,
//! the host's page size, the samples timed again.

use crate::measure::{self, Calibration};
use crate::probe::FrameRuns;

/// Cycles from ns at the measured clock.
pub fn cycles(ns: f64, ghz: f64) -> u32 {
    (ns * ghz).round().max(1.0) as u32
}

/// What the levels were read without, where the latency chase's 2 MB
/// pages were cached as 4 KB pieces.
pub fn less_tlb(h: &crate::infer::Hierarchy) -> String {
    match h.less_first_tlb_miss_ns {
        Some(ns) => format!(", less {ns:.2} ns for each load past the first TLB level's reach, since the host's 4 KB pages splinter the chase's 2 MB pages"),
        None => String::new(),
    }
}

/// How a fresh 4 KB-page region's frames lay (`probe::frame_runs`).
#[derive(Debug, PartialEq)]
pub struct Frames(pub FrameRuns);

impl Frames {
    /// Pages after the first.
    pub fn steps(&self) -> u64 {
        self.0.pages - 1
    }
    /// Pages to a line of page-table entries (eight frames' entries): 8
    /// where the frames are packed, 1 where no two share a line.
    pub fn per_line(&self) -> f64 {
        self.0.pages as f64 / self.0.lines.max(1) as f64
    }
    /// The runs the model ages its memory into (`[memory] aged_run`), so
    /// that its 4 KB pages share lines of entries as the host's did: the
    /// pages to a line, to the nearest power of two on a log scale. None
    /// where that is eight, a whole line, as on a freshly booted machine.
    /// (Under nested paging with 4 KB host pages each line is one the
    /// walk reads for a frame's host entry: the model's walks cost what
    /// the host's do only if its frames spread over as many lines.)
    pub fn aged_run(&self) -> Option<u32> {
        let run = 1u32 << self.per_line().max(1.0).log2().round().min(3.0) as u32;
        (run < 8).then_some(run)
    }
    pub fn scattered(&self) -> bool {
        self.aged_run().is_some()
    }
    /// What was measured, for the profile's comments and the report.
    pub fn measured(&self) -> String {
        let f = &self.0;
        format!(
            "{} 4 KB pages of a fresh region lay in {} groups of eight frames ({:.1} pages to a line of page-table entries, 8 if packed) and {} 2 MB regions ({} if packed); {} of {} had the frame after the previous page's",
            f.pages,
            f.lines,
            self.per_line(),
            f.regions,
            f.pages.div_ceil(512),
            f.followed,
            self.steps()
        )
    }
}

pub fn frames(k: &measure::Costs) -> Option<Frames> {
    k.frames_4k.filter(|f| f.pages > 1).map(Frames)
}

/// Reading contiguous 4 KB pages in address order against a random order.
#[derive(Debug, PartialEq)]
pub struct NextPage {
    pub in_order_ns: f64,
    pub shuffled_ns: f64,
}

/// A random order this much slower means streams go on into the next
/// frame (on an Intel Xeon guest whose streams do, a random order reads
/// 26 to 35 % slower in calibrate's probe, and 6.5 % slower in a C loop
/// summing one word a line).
pub const NEXT_PAGE_GAIN: f64 = 0.03;

impl NextPage {
    pub fn gain(&self) -> f64 {
        self.shuffled_ns / self.in_order_ns - 1.0
    }
    pub fn follows(&self) -> bool {
        self.gain() > NEXT_PAGE_GAIN
    }
}

pub fn next_page(k: &measure::Costs) -> Option<NextPage> {
    let (a, b) = (k.pages_in_order_ns.as_ref()?.median, k.pages_shuffled_ns.as_ref()?.median);
    (a > 0.0 && b > 0.0).then_some(NextPage { in_order_ns: a, shuffled_ns: b })
}

/// What a line written back to memory costs, from the streaming probes.
#[derive(Debug, PartialEq)]
pub struct Writeback {
    pub ns: f64,
    /// A line copied: read from one stream, written to another.
    pub copy_ns: f64,
    /// Two lines read, one from each of two streams at once: what the
    /// model charges a copy's line without writebacks (the store's line
    /// is fetched as the load's is, and two streams run at once).
    pub reads_ns: f64,
    /// The copy was the faster (noise, or stores that skip the fetch):
    /// no charge.
    pub clamped: bool,
}

/// `Writeback` from the copy and the two-stream read, if both were
/// measured.
pub fn writeback(k: &measure::Costs) -> Option<Writeback> {
    let copy_ns = 2.0 * k.stream_line_ns.median;
    let reads_ns = 2.0 * k.read_streams_ns.get(1)?.median;
    if !(copy_ns > 0.0 && reads_ns > 0.0 && copy_ns.is_finite() && reads_ns.is_finite()) {
        return None;
    }
    let d = copy_ns - reads_ns;
    Some(Writeback { ns: d.max(0.0), copy_ns, reads_ns, clamped: d < 0.0 })
}

/// Independent stores against independent loads, from the random-line
/// probes.
#[derive(Debug, PartialEq)]
pub struct Stores {
    pub load_ns: f64,
    pub store_ns: f64,
    /// data_mlp x load / store, where stores were the slower (else None:
    /// as many overlap as loads); at least 1.
    pub mlp: Option<f64>,
}

/// `Stores` where both probes ran.
pub fn stores(c: &Calibration, data_mlp: f64) -> Option<Stores> {
    let (load_ns, store_ns) = (c.costs.random_load_ns.as_ref()?.median, c.costs.random_store_ns.as_ref()?.median);
    if !(load_ns > 0.0 && store_ns > 0.0 && load_ns.is_finite() && store_ns.is_finite()) {
        return None;
    }
    let mlp = (store_ns > load_ns).then(|| (data_mlp * load_ns / store_ns).max(1.0));
    Some(Stores { load_ns, store_ns, mlp })
}

/// The host page size to write and why, and whether it was assumed.
pub fn host_page_choice(c: &Calibration) -> (String, String, bool) {
    match c.host_page.as_ref() {
        Some(h) => match &h.size {
            Some(s) => (s.clone(), h.reason.clone(), false),
            None => ("2M".into(), format!("the TLB curves did not tell ({}); 2M is the common choice of cloud hosts", h.reason), true),
        },
        None => ("2M".into(), "no TLB measurement; 2M is the common choice of cloud hosts".into(), true),
    }
}

/// The sentence on the chases and loads timed again (`Noise::taken_again`),
/// after `lead`; empty where there were none.
pub fn taken_again(n: &measure::Noise, lead: &str) -> String {
    if n.taken_again == 0 {
        return String::new();
    }
    format!(
        "{lead}Chases and loads timed again for being on a CPU less than {:.0}% of their time: {} ({} sample{} set aside).",
        100.0 * splab_native::suite::ON_CPU_MIN,
        n.taken_again,
        n.set_aside,
        if n.set_aside == 1 { "" } else { "s" }
    )
}

