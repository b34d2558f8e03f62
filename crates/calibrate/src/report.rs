//! The text report of a calibration: every curve and what was read off
//! it, the figures the profile takes, and how noisy the host was.

use crate::measure::Calibration;
use crate::figures::{cycles, frames, host_page_choice, less_tlb, next_page, stores, taken_again, writeback};
use crate::profile::Base;
use splab_hw::size::{self, num};
use std::fmt::Write as _;

/// The text report of the measurements.
pub fn text(c: &Calibration, b: &Base) -> String {
    let base_name = b.name.as_str();
    let mut o = String::new();
    let v = &c.virt;
    let _ = writeln!(
        o,
        "calibrate: {} on Linux {} ({} CPUs, transparent_hugepage {}){}{}; {} in {:.0} s",
        if c.cpu_brand.is_empty() { "unknown processor" } else { &c.cpu_brand },
        c.host.kernel,
        c.host.cpus,
        c.host.thp_enabled.as_deref().unwrap_or("none"),
        if v.guest { format!(", a guest: {}", v.signs().join("; ")) } else { ", no hypervisor found".into() },
        if c.root { ", as root" } else { ", not root" },
        if c.plan.quick { "quick plan" } else { "full plan" },
        c.seconds
    );
    let ghz = c.clock_ghz.as_ref().map(|s| s.median).unwrap_or(0.0);
    if let Some(s) = &c.clock_ghz {
        let _ = writeln!(o, "  clock         {:.3} GHz [{:.3} .. {:.3}] from dependent additions (CPUID 0x16: base {} MHz, max {} MHz)", s.median, s.min, s.max, c.cpuid_mhz.0, c.cpuid_mhz.1);
    }
    let _ = writeln!(o, "  2 MB region   {} ({:.0}% in 2 MB pages)", c.huge_layout, 100.0 * c.huge_share);
    let _ = writeln!(o, "  latency       bytes: ns per dependent load (median of {} rounds)", c.plan.rounds);
    let row: Vec<String> = c.latency.iter().map(|m| format!("{}:{}", size::show(m.x), num(m.ns.median))).collect();
    for chunk in row.chunks(8) {
        let _ = writeln!(o, "                {}", chunk.join("  "));
    }
    match &c.hierarchy {
        Some(h) => {
            for (k, n) in ["L1", "L2", "L3"].iter().enumerate() {
                let seen = if h.step_seen[k] { "" } else { " (no step to the next level: CPUID's size)" };
                let _ = writeln!(o, "  {n}            {}, {:.2} ns ({} cycles){seen}", size::show(h.size_bytes[k] as u64), h.latency_ns[k], cycles(h.latency_ns[k], ghz));
            }
            let how = match h.method.as_str() {
                "reported sizes" => "from the curve's plateaus between the sizes CPUID reports",
                "plateaus" => "placed by the curve's steps, each latency the median inside its level (memory the plateau past the last step)",
                "plateaus, a shared last level" => "placed by the curve's steps, each latency the median inside its level (memory the plateau past the last step): the curve leaves the last level well before the size CPUID reports, a shared cache of which this machine gets that much",
                _ => "fitted to a model of gradual steps",
            };
            let _ = writeln!(o, "  memory        {:.1} ns ({} cycles); levels {how}{}, which miss the curve by {:.1}% rms (the points on the steps between levels)", h.memory_ns, cycles(h.memory_ns, ghz), less_tlb(h), 100.0 * h.rms_rel_error);
        }
        None => {
            let _ = writeln!(o, "  caches        no fit (see notes)");
        }
    }
    let cc: Vec<String> = c.cpuid_caches.iter().filter(|l| l.kind != "instruction").map(|l| format!("L{} {} {}-way", l.level, size::show(l.size_bytes), l.ways)).collect();
    if !cc.is_empty() {
        let _ = writeln!(o, "  CPUID caches  {}", cc.join(", "));
    }
    let t = &c.tlb;
    let curve = |pts: &[crate::infer::Point]| pts.iter().map(|p| format!("{}:{:+.1}", p.x, p.y)).collect::<Vec<_>>();
    let _ = writeln!(o, "  TLB, 4 KB     pages: extra ns a load over the control (steps above {:.2} ns)", t.threshold_ns);
    for chunk in curve(&t.pages_4k).chunks(10) {
        let _ = writeln!(o, "                {}", chunk.join("  "));
    }
    let _ = writeln!(o, "  TLB, 4 KB frames in 2 MB pages");
    for chunk in curve(&t.frames_in_2m).chunks(10) {
        let _ = writeln!(o, "                {}", chunk.join("  "));
    }
    let _ = writeln!(o, "  TLB, 2 MB     pages: extra ns a load");
    for chunk in curve(&t.pages_2m).chunks(10) {
        let _ = writeln!(o, "                {}", chunk.join("  "));
    }
    if let Some(g) = &t.frames_in_1g {
        let _ = writeln!(o, "  TLB, 2 MB frames in a 1 GB page");
        for chunk in curve(g).chunks(10) {
            let _ = writeln!(o, "                {}", chunk.join("  "));
        }
    }
    let opt = |v: Option<u64>| v.map(|e| e.to_string()).unwrap_or_else(|| "not seen".into());
    let _ = writeln!(
        o,
        "  TLB sizes     L1 4 KB {} entries, L2 {} entries, L1 2 MB {} entries; L1 miss that hits L2 {}",
        opt(t.l1_4k_entries),
        opt(t.l2_entries),
        opt(t.l1_2m_entries),
        t.stlb_hit_ns.map(|n| format!("+{n:.2} ns")).unwrap_or_else(|| "not seen".into())
    );
    if let Some(f) = &t.stlb_fit {
        let other = if f.other_entries > 0 { format!("; best {}: {} entries, {:.2} ns", f.other_index(), f.other_entries, f.other_rms_ns) } else { String::new() };
        let _ = writeln!(
            o,
            "  L2 TLB fit    {} entries, {} ways, {} index: +{:.2} ns a hit, +{:.2} ns a walk, {:.2} ns rms over {} to {} pages{other}",
            f.entries,
            f.ways,
            f.index(),
            f.hit_ns,
            f.walk_ns,
            f.rms_ns,
            f.from_pages,
            f.to_pages
        );
    }
    let ns = |v: Option<f64>| v.map(|n| format!("{n:+.1} ns")).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        o,
        "  TLB misses    4 KB pages {} a load past the L2 TLB, {} at {} pages; 2 MB pages {} at {} pages; 1 GB {}",
        ns(t.miss_4k_walk_ns),
        ns(t.miss_4k_ns),
        t.pages_4k.last().map(|p| p.x).unwrap_or(0.0),
        ns(t.miss_2m_ns),
        t.pages_2m.last().map(|p| p.x).unwrap_or(0.0),
        match (&t.skipped_1g, t.miss_1g_ns) {
            (Some(why), _) => format!("SKIPPED: {why}"),
            (None, v) => format!("{} for 2 MB frames in a 1 GB page", ns(v)),
        }
    );
    let ctl: Vec<String> = c.cpuid_tlbs.iter().map(|l| format!("L{} {} {} {}x{}", l.level, l.kind, l.sizes.join("/"), l.entries, if l.fully_associative { "full".into() } else { l.ways.to_string() })).collect();
    if !ctl.is_empty() {
        let _ = writeln!(o, "  CPUID TLBs    {}", ctl.join(", "));
    }
    if v.guest {
        let (page, why, assumed) = host_page_choice(c);
        let _ = writeln!(o, "  host page     {page} ({}): {why}", if assumed { "ASSUMED" } else { "inferred" });
    }
    let ov = &c.overlap;
    let d: Vec<String> = ov.data.iter().map(|m| format!("{}:{}", m.x, num(m.ns.median))).collect();
    let _ = writeln!(o, "  overlap       k chases over memory, ns a load: {}", d.join("  "));
    let w: Vec<String> = ov.walk.iter().map(|p| format!("{}:{:+.1}", p.x, p.y)).collect();
    let _ = writeln!(o, "                k chases over 8192 4 KB pages (data in L2), extra ns a load: {}", w.join("  "));
    if let Some(x) = ov.walk_loads_ns {
        let _ = writeln!(o, "                independent loads of the same lines, extra ns a load: {x:+.1}");
    }
    let _ = writeln!(
        o,
        "                data misses in flight {}, walks in flight {} (with {} chases {})",
        ov.data_mlp.map(|m| format!("{m:.2}")).unwrap_or_else(|| "-".into()),
        ov.walk_mlp.map(|m| format!("{m:.2}")).unwrap_or_else(|| format!("- (from {base_name})")),
        ov.walk.last().map_or(0.0, |p| p.x),
        ov.walk_mlp_chases.map(|m| format!("{m:.2}")).unwrap_or_else(|| "-".into())
    );
    if let Some(fit) = &ov.slot_fit {
        let _ = writeln!(
            o,
            "                walks with misses: {} chases {:.2} ns a load; walkers held to the walks' end predict {:.2}, free while a walk reads beyond L2 {} ({})",
            fit.chases,
            fit.measured_ns,
            fit.held_ns,
            fit.released(),
            match fit.far_reads_free() {
                Some(true) => "the second is closer: far walk reads wait in line-fill buffers",
                Some(false) => "the first is closer: walkers are held to the walks' end",
                None if fit.released_ns.is_none() => "an older calibration's, not compared: as the base profile",
                None => "too close to tell: as the base profile",
            }
        );
    }
    if !ov.window.is_empty() {
        let loops: Vec<String> = ov.window.iter().map(|p| format!("{} {:.2}", p.shape, p.ns.median)).collect();
        let _ = writeln!(o, "                loops of independent misses, ns a miss: {}", loops.join("  "));
    }
    if let Some(w) = &ov.window_fit {
        let _ = writeln!(
            o,
            "                the core's window: {:.0} instructions over one chase's latency ({:.1} ns); a miss takes {:.1} more, a store {:.1} more",
            w.entries, w.latency_ns, w.per_miss, w.per_store
        );
    }
    for n in &ov.notes {
        let _ = writeln!(o, "                note: {n}");
    }
    let co = &c.core;
    let mut core = Vec::new();
    if let Some(w) = co.width {
        core.push(format!("{w:.2} instructions a cycle (the best loop of independent chains of additions)"));
    }
    if let Some(ns) = co.mispredict_ns {
        core.push(format!("a mispredicted branch {:.2} ns ({:.1} cycles; a branch on random bits {ns:.2} ns over one on constant bits)", 2.0 * ns, 2.0 * ns * ghz));
    }
    if let (Some(m), Some(d)) = (co.mul_ns, co.div_ns) {
        core.push(format!("64-bit multiply {m:.2} ns, divide {d:.2} ns (dependent chains)"));
    }
    if !core.is_empty() {
        let _ = writeln!(o, "  core          {}", core.join("; "));
    }
    let k = &c.costs;
    let _ = writeln!(
        o,
        "  streaming     sequential copy of {}: {:.2} ns a line read or written ({:.1} GB/s each way)",
        size::show(k.stream_bytes),
        k.stream_line_ns.median,
        if k.stream_line_ns.median > 0.0 { 32.0 / k.stream_line_ns.median } else { 0.0 }
    );
    if !k.read_streams_ns.is_empty() {
        let v: Vec<String> = k.read_streams_ns.iter().enumerate().map(|(i, s)| format!("{}:{:.2}", i + 1, s.median)).collect();
        let _ = writeln!(o, "                k sequential read streams at once, ns a line: {}", v.join("  "));
    }
    if let Some(n) = next_page(k) {
        let _ = writeln!(
            o,
            "                4 KB pages of 2 MB pages read whole: {:.2} ns a line in address order, {:.2} in a random order ({:+.1}%; {})",
            n.in_order_ns,
            n.shuffled_ns,
            100.0 * n.gain(),
            if n.follows() { "streams go on into the next frame" } else { "each page starts over" }
        );
    }
    match frames(k) {
        Some(f) => {
            let _ = writeln!(
                o,
                "  4 KB frames   {} ({})",
                f.measured(),
                match f.aged_run() {
                    Some(run) => format!("scattered: the model ages its memory, in runs of {run}"),
                    None => "close together".to_string(),
                }
            );
        }
        None => {
            let _ = writeln!(o, "  4 KB frames   not measured (/proc/self/pagemap shows frame numbers to root only)");
        }
    }
    if let Some(w) = writeback(k) {
        let _ = writeln!(
            o,
            "                a line written back: +{:.2} ns (a line copied {:.2} ns, against two lines of two read streams {:.2} ns)",
            w.ns, w.copy_ns, w.reads_ns
        );
    }
    if let Some(st) = stores(c, c.overlap.data_mlp.unwrap_or(1.0)) {
        let _ = writeln!(
            o,
            "  stores        independent, to random lines over {}: {:.2} ns each, loads {:.2} ns ({:.2}x)",
            size::show(2 * k.stream_bytes),
            st.store_ns,
            st.load_ns,
            st.store_ns / st.load_ns
        );
    }
    let _ = writeln!(
        o,
        "  costs         zero 4 KB {:.0} ns, copy 4 KB {:.0} ns, fault round trip {:.0} ns a page, syscall {:.0} ns (medians)",
        k.zero_4k_ns.median, k.copy_4k_ns.median, k.fault_4k_ns.median, k.syscall_ns.median
    );
    let n = &c.noise;
    let _ = writeln!(
        o,
        "  noise         quartile range of a point's repeats: {:.1}% of its median (median over points; worst {:.0}%); on a CPU {:.0}% of the timed time (median; lowest {:.0}%)",
        100.0 * n.median_rel_iqr,
        100.0 * n.max_rel_iqr,
        100.0 * n.median_on_cpu,
        100.0 * n.min_on_cpu
    );
    if n.taken_again > 0 {
        let _ = writeln!(o, "                {}", taken_again(n, ""));
    }
    if n.min_on_cpu < splab_native::suite::ON_CPU_MIN {
        let _ = writeln!(o, "                note: other work took the CPU during some probes; times are from the thread's CPU clock, but caches and TLBs were shared");
    }
    for n in &c.notes {
        let _ = writeln!(o, "  note          {n}");
    }
    o
}

