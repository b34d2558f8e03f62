//! The machine profile a calibration gives: the measured values with how
//! they were had, the rest from the built-in profile of this host's
//! architecture (`Base`), each marked as not measured, in the schema
//! `splab_hw::profile` parses.

use crate::cpu;
use crate::fit::tlb_ways;
use crate::measure::{self, Calibration};
use crate::figures::{cycles, frames, host_page_choice, less_tlb, next_page, stores, taken_again, writeback};
use splab_hw::profile::{default_for_arch, Profile};
use splab_hw::size;
use std::fmt::Write as _;

/// The built-in profile of this host's architecture: what calibration
/// cannot measure from user space comes from it, and says so.
pub struct Base {
    /// Its name, e.g. sapphire-rapids (the comments name BASE.toml).
    pub name: String,
    pub profile: Profile,
}

impl Base {
    /// The built-in profile for machines of architecture `arch` (a
    /// profile's `arch` value, e.g. amd64).
    pub fn for_arch(arch: &str) -> Result<Base, String> {
        let name = default_for_arch(arch).ok_or_else(|| format!("this host's architecture ({arch}) has no built-in profile to take unmeasured values from"))?;
        Base::named(name)
    }

    /// The built-in profile `name`.
    pub fn named(name: &str) -> Result<Base, String> {
        Ok(Base { name: name.to_string(), profile: Profile::load(name)? })
    }

    /// The comment of a value taken from it.
    pub(crate) fn not_measured(&self) -> String {
        format!("{NOT_MEASURED} {}.toml", self.name)
    }
}

/// A cache level's size to write: the size inferred from the latency
/// steps, or CPUID leaf 4's exact size when that lies within a factor 2
/// of it (the steps fix a size only to a quarter octave, and on a shared
/// or busy host a cache holds less of one program's data than it has).
/// Returns KB and the comment.
fn cache_size_kb(inferred: f64, leaf: Option<&cpu::CacheLeaf>) -> (u64, String) {
    let kb = (inferred / 1024.0).round().max(1.0) as u64;
    match leaf {
        Some(l) if (l.size_bytes as f64 / inferred).max(inferred / l.size_bytes as f64) <= 2.0 => {
            (l.size_bytes / 1024, format!("latency steps: about {} KB; CPUID leaf 4 gives {} KB exactly (used)", kb, l.size_bytes / 1024))
        }
        Some(l) => (kb, format!("latency steps: {kb} KB (CPUID leaf 4 says {} KB; the steps were used)", l.size_bytes / 1024)),
        None => (kb, format!("latency steps: {kb} KB")),
    }
}

/// Rounds `kb` to a size a cache of `ways` ways can have in the model
/// (lines divisible by the ways).
fn fit_ways(kb: u64, ways: usize) -> u64 {
    // 16 lines a KB: kb x 16 must be a multiple of the ways.
    let w = ways.max(1) as u64;
    let (mut a, mut b) = (w, 16u64);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let step = w / a;
    kb.max(1).div_ceil(step) * step
}

const NOT_MEASURED: &str = "not measured: from";

/// The profile text: the measured values with how they were had, the rest
/// from `base` marked `# not measured: from BASE.toml`.
pub fn profile_toml(c: &Calibration, b: &Base, name: &str, virt_section: bool) -> String {
    let (base, base_name) = (&b.profile, b.name.as_str());
    let nm = format!("# {}", b.not_measured());
    let mut o = String::new();
    let ghz = c.clock_ghz.as_ref().map(|s| s.median).filter(|g| *g > 0.1 && *g < 100.0);
    let f = ghz.unwrap_or(base.freq_ghz);
    let guest = c.virt.guest;
    let _ = writeln!(o, "# Measured on this host by `splab calibrate{}` in {:.0} s (microbenchmarks only:", if c.plan.quick { " --quick" } else { "" }, c.seconds);
    let _ = writeln!(o, "# pointer chases, dependent additions, page zero/copy, faults, system calls).");
    let _ = writeln!(o, "# Repeats: {} rounds, interleaved (the overlap probes {} times a round); medians. Noise: the quartile range of a point's", c.plan.rounds, measure::OVERLAP_SAMPLES);
    let _ = writeln!(o, "# repeats was {:.1}% of its median (median over points, worst {:.0}%); the process was on a", 100.0 * c.noise.median_rel_iqr, 100.0 * c.noise.max_rel_iqr);
    let _ = writeln!(o, "# CPU for {:.0}% of the timed time (median; lowest {:.0}%).{}", 100.0 * c.noise.median_on_cpu, 100.0 * c.noise.min_on_cpu, taken_again(&c.noise, " "));
    let _ = writeln!(o, "# Values that cannot be measured from user space come from {base_name}.toml and say so.");
    let _ = writeln!(o, "name = \"{name}\"");
    let desc = format!(
        "{}{}, {} CPUs, measured by splab calibrate",
        if c.cpu_brand.is_empty() { "unknown processor".to_string() } else { c.cpu_brand.clone() },
        if guest { format!(" (guest of {})", c.virt.cpuid_vendor.as_deref().unwrap_or("a hypervisor")) } else { String::new() },
        c.host.cpus
    );
    let _ = writeln!(o, "description = \"{}\"", desc.replace(['"', '\\'], ""));
    let _ = writeln!(o, "arch = \"{}\"", base.arch);
    match ghz {
        Some(g) => {
            let s = c.clock_ghz.as_ref();
            let _ = writeln!(
                o,
                "freq_ghz = {:.2}   # measured: dependent additions, {:.2} .. {:.2} GHz over the rounds{}",
                g,
                s.map(|s| s.min).unwrap_or(g),
                s.map(|s| s.max).unwrap_or(g),
                if c.cpuid_mhz.0 > 0 { format!(" (CPUID 0x16: base {} MHz)", c.cpuid_mhz.0) } else { String::new() }
            );
        }
        None => {
            let _ = writeln!(o, "freq_ghz = {}   {nm}", base.freq_ghz);
        }
    }
    let _ = writeln!(o, "cpus = {}   # this host's CPUs", c.host.cpus);

    // TLBs: the base's arrays, with entries replaced where a step showed
    // them, and ways from CPUID leaf 0x18 where it describes the array.
    let host4k = c.host_page.as_ref().and_then(|h| h.size.as_deref()) == Some("4K");
    let t = &c.tlb;
    for arr in &base.tlb {
        let has = |s: &str| arr.sizes.iter().any(|x| x == s);
        let measured = match (arr.level, arr.sizes.len()) {
            (1, 1) if has("4K") => t.l1_4k_entries.map(|e| (e, "4K")),
            (1, 1) if has("2M") && !host4k => t.l1_2m_entries.map(|e| (e, "2M")),
            (2, _) if has("4K") => t.l2_entries.map(|e| (e, "4K")),
            _ => None,
        };
        let _ = writeln!(o, "\n[[tlb]]");
        let _ = writeln!(o, "level = {}", arr.level);
        let sizes: Vec<String> = arr.sizes.iter().map(|s| format!("\"{s}\"")).collect();
        let _ = writeln!(o, "sizes = [{}]", sizes.join(", "));
        let fit = t.stlb_fit.as_ref().filter(|_| arr.level == 2 && has("4K"));
        match (measured, fit) {
            (Some(_), Some(f)) => {
                let _ = writeln!(
                    o,
                    "entries = {}   # measured: the model's TLB fitted to the 4 KB curve from {} to {} pages ({} points): {:.2} ns rms",
                    f.entries, f.from_pages, f.to_pages, f.points, f.rms_ns
                );
                let _ = writeln!(o, "ways = {}   # {}", f.ways, tlb_ways(arr.entries, arr, &c.cpuid_tlbs, b).1);
                let other = if f.other_entries > 0 {
                    format!("; the best {} array ({} entries) {:.2} ns", f.other_index(), f.other_entries, f.other_rms_ns)
                } else {
                    String::new()
                };
                if f.hashed {
                    let _ = writeln!(o, "index = \"hashed\"   # measured: the misses rise gradually around the capacity, as sets overflowing unevenly make them{other}");
                } else {
                    let _ = writeln!(o, "# index = \"modulo\" (the default)   measured: the misses step up at the capacity{other}");
                }
            }
            (Some((e, sz)), None) => {
                let (ways, why) = tlb_ways(e as usize, arr, &c.cpuid_tlbs, b);
                let curve = if sz == "2M" { &t.pages_2m } else { &t.pages_4k };
                let next = curve.iter().map(|p| p.x).find(|&x| x > e as f64);
                let how = match next {
                    Some(x) => format!("measured: extra latency of one line a page steps up between {e} and {x} {sz} pages"),
                    None => format!("measured: extra latency of one line a page steps up past {e} {sz} pages"),
                };
                let _ = writeln!(o, "entries = {e}   # {how}");
                let _ = writeln!(o, "ways = {ways}   # {why}");
            }
            (None, _) => {
                let _ = writeln!(o, "entries = {}   {nm}", arr.entries);
                let _ = writeln!(o, "ways = {}   {nm}", arr.ways);
            }
        }
    }
    for p in &base.pwc {
        let _ = writeln!(o, "\n[[pwc]]   {nm}");
        let _ = writeln!(o, "shift = {}", p.shift);
        let _ = writeln!(o, "entries = {}", p.entries);
    }

    // Caches.
    let leaf = |level: u8| c.cpuid_caches.iter().find(|l| l.level == level && l.kind != "instruction");
    let bases = [&base.cache.l1d, &base.cache.l2, &base.cache.l3];
    for (k, name) in ["l1d", "l2", "l3"].iter().enumerate() {
        let _ = writeln!(o, "\n[cache.{name}]");
        let lf = leaf(k as u8 + 1);
        let (ways, ways_why) = match lf {
            Some(l) if l.ways <= 64 => (l.ways as usize, "CPUID leaf 4".to_string()),
            _ => (bases[k].ways, b.not_measured()),
        };
        match &c.hierarchy {
            Some(h) => {
                let (kb, why) = if h.step_seen[k] {
                    cache_size_kb(h.size_bytes[k], lf)
                } else {
                    let kb = (h.size_bytes[k] / 1024.0).round() as u64;
                    (kb, format!("no latency step to measure (the next level is within 8% as slow); CPUID leaf 4's {kb} KB"))
                };
                let kb2 = fit_ways(kb, ways);
                let note = if kb2 != kb { format!(", rounded to {kb2} KB for {ways} ways") } else { String::new() };
                let _ = writeln!(o, "size_kb = {kb2}   # {why}{note}");
                let _ = writeln!(o, "ways = {ways}   # {ways_why}");
                let _ = writeln!(o, "latency = {}   # measured: {:.2} ns load to use ({})", cycles(h.latency_ns[k], f), h.latency_ns[k], method(h, false));
            }
            None => {
                let _ = writeln!(o, "size_kb = {}   {nm}", bases[k].size_kb);
                let _ = writeln!(o, "ways = {}   {nm}", bases[k].ways);
                let _ = writeln!(o, "latency = {}   {nm}", bases[k].latency);
            }
        }
    }

    let _ = writeln!(o, "\n[memory]");
    match &c.hierarchy {
        Some(h) => {
            let _ = writeln!(o, "dram_latency_ns = {:.1}   # measured: latency curve up to {} ({}; {:.1}% rms from the points)", h.memory_ns, size::show(c.plan.huge_bytes / 2), method(h, true), 100.0 * h.rms_rel_error);
        }
        None => {
            let _ = writeln!(o, "dram_latency_ns = {}   {nm}", base.memory.dram_latency_ns);
        }
    }
    if let Some(w) = writeback(&c.costs) {
        let _ = writeln!(
            o,
            "writeback_ns = {:.2}   # measured: a sequential copy's line read and written, {:.2} ns, less two lines of two read streams at once, {:.2} ns{}",
            w.ns,
            w.copy_ns,
            w.reads_ns,
            if w.clamped { " (the copy ran faster: 0)" } else { "" }
        );
    }
    match frames(&c.costs) {
        Some(f) => match f.aged_run() {
            Some(run) => {
                let _ = writeln!(o, "aged = {AGED}   # measured: {} (/proc/self/pagemap), so free frames are scattered; not measured: how much of memory, here half the free 2 MB blocks", f.measured());
                let _ = writeln!(o, "aged_run = {run}   # measured: the pages to a line, {:.1}, to a power of two: the aged blocks give out 4 KB pages {run} frames in a row from scattered places", f.per_line());
            }
            None => {
                let _ = writeln!(o, "# aged: none; measured: {} (/proc/self/pagemap), as on a freshly booted machine", f.measured());
            }
        },
        None => {
            let _ = writeln!(o, "# aged: not measured (/proc/self/pagemap shows frame numbers to root only); absent, 4 KB pages get frames close together, as on a freshly booted machine");
        }
    }

    let _ = writeln!(o, "\n[overlap]");
    let ov = &c.overlap;
    match ov.data_mlp {
        Some(m) => {
            let _ = writeln!(o, "data_mlp = {m:.2}   # measured: best speedup of k independent chases over memory over one");
        }
        None => {
            let _ = writeln!(o, "data_mlp = {}   {nm}", base.overlap.data_mlp);
        }
    }
    match ov.walk_mlp {
        Some(m) => {
            let one = ov.walk.first().map_or(0.0, |p| p.y);
            let why = match ov.walk_loads_ns {
                Some(x) if ov.walk_mlp_from_loads => format!(
                    "a walk alone (one chase over 8192 4 KB pages, data in L2) {one:.2} ns, over what walks add to independent loads of the same lines, {x:.2} ns"
                ),
                _ => format!(
                    "a walk alone (one chase over 8192 4 KB pages, data in L2) {one:.2} ns, over what walks add with {} chases at once",
                    ov.walk.last().map_or(0.0, |p| p.x)
                ),
            };
            let _ = writeln!(o, "walk_mlp = {m:.2}   # measured: {why}");
        }
        None => {
            let _ = writeln!(o, "walk_mlp = {}   {nm}", base.overlap.walk_mlp);
        }
    }
    match (&ov.slot_fit, ov.walk_holds_slot) {
        (Some(fit), Some(h)) => {
            let _ = writeln!(
                o,
                "walk_holds_slot = {h}   # measured: {} chases over every line of {} of 4 KB pages (walks and misses) took {:.2} ns a load; walks adding to data predict {:.2}, walks holding a miss slot {:.2}",
                fit.chases,
                size::show(c.plan.small_bytes),
                fit.measured_ns,
                fit.adding_ns,
                fit.holding_ns
            );
        }
        _ => {
            if let Some(h) = base.overlap.walk_holds_slot {
                let _ = writeln!(o, "walk_holds_slot = {h}   {nm}");
            }
        }
    }
    if let Some(st) = stores(c, ov.data_mlp.unwrap_or(base.overlap.data_mlp)) {
        let why = format!(
            "measured: independent stores to random lines over {} took {:.2} ns each, loads {:.2}",
            size::show(2 * c.costs.stream_bytes),
            st.store_ns,
            st.load_ns
        );
        match st.mlp {
            Some(m) => {
                let _ = writeln!(o, "store_mlp = {m:.2}   # {why}: data_mlp scaled by loads / stores");
            }
            None => {
                let _ = writeln!(o, "# store_mlp not written: {why}, so stores overlap as loads do");
            }
        }
    }

    match &ov.window_fit {
        Some(w) => {
            let loops: Vec<String> = ov.window.iter().map(|p| format!("{} {:.2}", p.shape, p.ns.median)).collect();
            let _ = writeln!(
                o,
                "window = {:.1}   # measured: loops of independent misses over {} (2 MB pages), ns a miss: {}; instructions one chase's latency over the same lines ({:.1} ns) holds, from the nop loops' slope",
                w.entries,
                size::show(2 * c.costs.stream_bytes),
                loops.join(", "),
                w.latency_ns
            );
            let _ = writeln!(o, "window_per_miss = {:.2}   # measured: what the nop loops took beyond their instructions", w.per_miss);
            let _ = writeln!(o, "window_per_store = {:.2}   # measured: what the store loops took beyond that and their instructions, a store (the mean of the two)", w.per_store);
        }
        None => {
            if let Some(w) = base.overlap.window {
                let _ = writeln!(o, "window = {w}   {nm}");
                let _ = writeln!(o, "window_per_miss = {}   {nm}", base.overlap.window_per_miss);
                let _ = writeln!(o, "window_per_store = {}   {nm}", base.overlap.window_per_store);
            }
        }
    }

    let _ = writeln!(o, "\n[costs]");
    let bc = &base.costs;
    match t.stlb_hit_ns {
        Some(ns) if ns > 0.0 => {
            let how = if t.stlb_fit.is_some() { "that misses the first TLB level and hits the second (the L2 TLB fit)" } else { "more past the first TLB step" };
            let _ = writeln!(o, "stlb_hit = {}   # measured: {ns:.2} ns a load {how}", cycles(ns, f));
        }
        _ => {
            let _ = writeln!(o, "stlb_hit = {}   {nm}", bc.stlb_hit);
        }
    }
    // The walk's own cost: what a walk adds to a load in the overlap
    // probe's single chase over 8192 4 KB pages (data lines and
    // page-table lines in L2, as a strided sweep over a large array has
    // them), less what the model charges there already: an L2 TLB lookup
    // and the page-table line the paging-structure caches leave to read,
    // an L2 hit. Where the model walks two-dimensionally, the probe's
    // frames each need the host's entry for their frame too (the nested
    // TLB holds few), another L2 hit the model charges itself: with 4 KB
    // host pages every frame has an entry of its own, and with 2 MB ones
    // where aged memory scatters the frames.
    let host = host_page_choice(c).0;
    let host_entry = guest && virt_section && (host == "4K" || (host == "2M" && frames(&c.costs).is_some_and(|fr| fr.scattered())));
    match c.overlap.walk.first().map(|p| p.y) {
        Some(ns) if ns > 0.0 => {
            let stlb = t.stlb_hit_ns.filter(|&n| n > 0.0).map_or(bc.stlb_hit, |n| cycles(n, f));
            let l2 = c.hierarchy.as_ref().map_or(base.cache.l2.latency, |h| cycles(h.latency_ns[1], f));
            let w = cycles(ns, f).saturating_sub(stlb + l2 * (1 + host_entry as u32));
            let host = match (host_entry, host.as_str()) {
                (false, _) => "",
                (true, "4K") => " and one for the host's entry for the page's frame (nested paging over 4 KB host pages)",
                (true, _) => " and one for the host's entry for the page's frame (scattered frames, nested paging)",
            };
            let _ = writeln!(o, "walk = {w}   # measured: {ns:.2} ns a load more over 8192 4 KB pages than over 2 MB pages (one chase, data in L2), less stlb_hit and an L2 hit for the page-table line{host}");
        }
        _ => {
            if let Some(w) = bc.walk {
                let _ = writeln!(o, "walk = {w}   {nm}");
            }
        }
    }
    let _ = writeln!(o, "dirty_assist = {}   {nm}", bc.dirty_assist);
    let zero = c.costs.zero_4k_ns.median;
    let fault = (c.costs.fault_4k_ns.median - zero).max(1.0);
    let _ = writeln!(
        o,
        "fault = {}   # measured: mmap + write + munmap of 4 KB pages, {:.0} ns a page, less the zeroing",
        cycles(fault, f),
        c.costs.fault_4k_ns.median
    );
    let _ = writeln!(o, "zero_4k = {}   # measured: memset of a 4 KB page, {zero:.0} ns", cycles(zero, f));
    let _ = writeln!(o, "copy_4k = {}   # measured: memcpy of a 4 KB page, {:.0} ns", cycles(c.costs.copy_4k_ns.median, f), c.costs.copy_4k_ns.median);
    for (k, v) in [("promotion", bc.promotion), ("demotion", bc.demotion), ("pt_page_alloc", bc.pt_page_alloc), ("invlpg", bc.invlpg), ("tlb_flush", bc.tlb_flush), ("shootdown_ipi", bc.shootdown_ipi)] {
        let _ = writeln!(o, "{k} = {v}   {nm}");
    }
    let _ = writeln!(o, "syscall = {}   # measured: getppid, {:.0} ns", cycles(c.costs.syscall_ns.median, f), c.costs.syscall_ns.median);
    let _ = writeln!(o, "context_switch = {}   {nm}", bc.context_switch);
    if let Some(p) = bc.pmap_fault {
        let _ = writeln!(o, "pmap_fault = {p}   {nm}");
    }
    for (k, v) in [("pageout_scan", bc.pageout_scan), ("swap_out_4k", bc.swap_out_4k), ("swap_in_4k", bc.swap_in_4k)] {
        let _ = writeln!(o, "{k} = {v}   {nm}");
    }

    let line = c.costs.stream_line_ns.median;
    if line > 0.0 {
        let _ = writeln!(o, "\n[prefetch]");
        let _ = writeln!(o, "streams = 32   # not measured: Intel's L2 streamer follows 32 pages (Intel 64 and IA-32 Architectures Optimization Reference Manual)");
        let _ = writeln!(o, "distance = 20   # not measured: it runs up to 20 lines ahead (same manual)");
        let _ = writeln!(
            o,
            "line_cycles = {:.2}   # measured: sequential copy of {} by one core, {line:.2} ns a line read or written",
            line * f,
            size::show(c.costs.stream_bytes)
        );
        let reads: Vec<f64> = c.costs.read_streams_ns.iter().map(|s| s.median).collect();
        if !reads.is_empty() && reads.iter().all(|&ns| ns > 0.0 && ns.is_finite()) {
            let cyc: Vec<String> = reads.iter().map(|ns| format!("{:.2}", ns * f)).collect();
            let ns: Vec<String> = reads.iter().map(|ns| format!("{ns:.2}")).collect();
            let _ = writeln!(
                o,
                "line_cycles_by_streams = [{}]   # measured: 1 to {} sequential read streams at once over {}, {} ns a line (used instead of line_cycles)",
                cyc.join(", "),
                reads.len(),
                size::show(c.costs.stream_bytes),
                ns.join(", ")
            );
        }
        if let Some(n) = next_page(&c.costs) {
            let _ = writeln!(
                o,
                "next_page = {}   # measured: the 4 KB pages of 2 MB pages read whole in address order, {:.2} ns a line, in a random order {:.2} ({:+.1}%){}",
                n.follows(),
                n.in_order_ns,
                n.shuffled_ns,
                100.0 * n.gain(),
                if n.follows() { ": streams go on across the edges of contiguous frames" } else { "" }
            );
        }
    }

    if guest {
        let (page, why, assumed) = host_page_choice(c);
        let lead = if virt_section { "" } else { "# " };
        let _ = writeln!(o);
        if !virt_section {
            let _ = writeln!(o, "# A hypervisor was detected; --no-virt-section left the [virt] section as");
            let _ = writeln!(o, "# comments, so the model walks page tables as on bare metal.");
        }
        let _ = writeln!(o, "{lead}[virt]");
        let _ = writeln!(o, "{lead}nested = true   # {}; hardware virtualisation on x86-64 uses EPT/NPT (assumed: not visible from the guest)", c.virt.signs().join(", "));
        let _ = writeln!(o, "{lead}host_page = \"{page}\"   # {}{why}", if assumed { "ASSUMED, not measured: " } else { "inferred: " });
    }
    if let Some(r) = &c.reference {
        let _ = writeln!(o, "\n[reference]   # measured: quick probes of this host's memory that splab validate runs again, to see how far the memory moved since (medians of {} rounds); the model does not read them, and validate runs it on this profile moved by the first three", c.plan.rounds);
        let _ = writeln!(o, "chase_ns = {:.2}   # a dependent load, one random chase over every line of 64 MB of 2 MB pages", r.chase_ns);
        let _ = writeln!(o, "chases_ns = {:.3}   # a load, 32 such chases at once", r.chases_ns);
        let _ = writeln!(o, "copy_ns = {:.3}   # a line read or written, copying 64 MB", r.copy_ns);
        if let Some(ns) = r.cache_chase_ns {
            let _ = writeln!(o, "cache_chase_ns = {ns:.2}   # a dependent load, one random chase over 16 MB (in the last-level cache's range: it moves with how much of that cache other tenants take; validate reports it, and does not apply it)");
        }
    }
    o
}

/// How a level's latency (or memory's, `memory`) was read.
fn method(h: &crate::infer::Hierarchy, memory: bool) -> String {
    let how = match (h.method.as_str(), memory) {
        ("reported sizes", false) => "median of the latency curve inside the level",
        ("reported sizes", true) => "median of the latency curve past the last level",
        ("plateaus", false) => "median of the latency curve inside the level, the levels placed by its steps",
        ("plateaus", true) => "plateau of the latency curve past its last step",
        _ => "least-squares fit to the latency curve",
    };
    format!("{how}{}", less_tlb(h))
}

/// The fraction of free 2 MB blocks a profile ages where the host's 4 KB
/// frames came out scattered: a quarter of memory then is scattered free
/// frames, more than any 4 KB region the validation maps.
const AGED: f64 = 0.5;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::{Frames, Stores, Writeback};
    use crate::measure::Plan;
    use crate::probe::FrameRuns;
    use crate::report;

    fn tiny() -> (Calibration, Base) {
        let c = measure::run(&Plan::tiny(), &mut |_, _, _| {}).unwrap();
        (c, Base::named("sapphire-rapids").unwrap())
    }

    #[test]
    fn a_calibrated_profile_parses_and_marks_what_it_did_not_measure() {
        let (mut c, base) = tiny();
        let text = profile_toml(&c, &base, "calibrated-test", false);
        let p = Profile::parse(&text, "calibrated").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(p.name, "calibrated-test");
        assert_eq!(p.arch, "amd64");
        for line in ["promotion = 2500   # not measured: from sapphire-rapids.toml", "[[pwc]]   # not measured: from sapphire-rapids.toml"] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        assert!(text.contains("zero_4k = ") && text.contains("# measured: memset"), "{text}");
        // A guest gets a [virt] section the model walks two-dimensionally
        // with; --no-virt-section leaves it as comments.
        c.virt.guest = true;
        c.virt.cpuid_bit = true;
        let commented = profile_toml(&c, &base, "g", false);
        assert!(commented.contains("# [virt]\n# nested = true"), "{commented}");
        assert!(Profile::parse(&commented, "g").unwrap().nested().is_none());
        let real = profile_toml(&c, &base, "g", true);
        assert!(real.contains("\n[virt]\nnested = true") && real.contains("host_page = \""), "{real}");
        let p = Profile::parse(&real, "g").unwrap_or_else(|e| panic!("{e}\n{real}"));
        assert!(p.nested().is_some(), "{real}");
        // The quick memory probes need more than the tiny plan's 16 MB
        // region; where they ran, the profile keeps what they read.
        assert_eq!((c.reference, p.reference), (None, None));
        let r = splab_hw::profile::Reference { chase_ns: 151.25, chases_ns: 5.75, copy_ns: 2.125, cache_chase_ns: Some(31.5) };
        c.reference = Some(r);
        let text = profile_toml(&c, &base, "g", true);
        assert!(text.contains("\n[reference]   # measured: quick probes") && text.contains("chases_ns = 5.750   # a load, 32 such chases at once") && text.contains("cache_chase_ns = 31.50   # a dependent load"), "{text}");
        assert_eq!(Profile::parse(&text, "g").unwrap().reference, Some(r));
    }

    /// The window's loops run (on x86-64, where they are written), and a
    /// fitted window goes into the profile with the loops it came from; a
    /// calibration without one keeps the base profile's (none here).
    #[test]
    fn the_window_goes_into_the_profile_with_its_loops() {
        use crate::infer::WindowFit;
        let (mut c, base) = tiny();
        if cfg!(target_arch = "x86_64") {
            let shapes: Vec<(&str, u32, u32)> = c.overlap.window.iter().map(|p| (p.shape.as_str(), p.instructions, p.stores)).collect();
            assert_eq!(shapes, [("miss+16 nops", 21, 0), ("miss+32 nops", 37, 0), ("rmw miss+2 stores", 7, 3), ("rmw miss+3 stores", 8, 4)]);
            assert!(c.overlap.window.iter().all(|p| p.ns.median > 0.0));
        }
        c.overlap.window_fit = None;
        let text = profile_toml(&c, &base, "t", false);
        assert!(!text.contains("window"), "{text}");
        c.overlap.window_fit = Some(WindowFit { latency_ns: 177.8, entries: 438.25, per_miss: 6.59, per_store: 2.4 });
        let text = profile_toml(&c, &base, "t", false);
        assert!(text.contains("window = 438.2   # measured: loops of independent misses") && text.contains("(177.8 ns)"), "{text}");
        assert!(text.contains("window_per_miss = 6.59   # measured") && text.contains("window_per_store = 2.40   # measured"), "{text}");
        let p = Profile::parse(&text, "t").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!((p.overlap.window, p.overlap.window_per_miss, p.overlap.window_per_store), (Some(438.2), 6.59, 2.4));
        assert!(report::text(&c, &base).contains("the core's window: 438 instructions over one chase's latency (177.8 ns); a miss takes 6.6 more, a store 2.4 more"));
    }

    /// walk_mlp's comment says which loads it came from, with the two
    /// extras, and the profile takes the value.
    #[test]
    fn walk_mlp_says_which_loads_it_came_from() {
        use crate::infer::Point;
        let (mut c, base) = tiny();
        let ov = &mut c.overlap;
        ov.walk = vec![Point { x: 1.0, y: 19.2, iqr: 0.0 }, Point { x: 16.0, y: 6.0, iqr: 0.0 }];
        (ov.walk_loads_ns, ov.walk_mlp, ov.walk_mlp_chases, ov.walk_mlp_from_loads) = (Some(9.6), Some(2.0), Some(3.2), true);
        let text = profile_toml(&c, &base, "t", false);
        let line = "walk_mlp = 2.00   # measured: a walk alone (one chase over 8192 4 KB pages, data in L2) 19.20 ns, over what walks add to independent loads of the same lines, 9.60 ns";
        assert!(text.contains(line), "{text}");
        assert_eq!(Profile::parse(&text, "t").unwrap().overlap.walk_mlp, 2.0);
        (c.overlap.walk_mlp, c.overlap.walk_mlp_from_loads) = (Some(3.2), false);
        let text = profile_toml(&c, &base, "t", false);
        assert!(text.contains("walk_mlp = 3.20   # measured: a walk alone (one chase over 8192 4 KB pages, data in L2) 19.20 ns, over what walks add with 16 chases at once"), "{text}");
    }

    /// The profile's header and the report say how many chases and loads
    /// were timed again for being off the CPU, and nothing where none were.
    #[test]
    fn samples_timed_again_are_counted_in_the_header_and_the_report() {
        let (mut c, base) = tiny();
        c.noise.taken_again = 0;
        assert!(!profile_toml(&c, &base, "t", false).contains("timed again"));
        assert!(!report::text(&c, &base).contains("timed again"));
        (c.noise.taken_again, c.noise.set_aside) = (3, 4);
        let text = profile_toml(&c, &base, "t", false);
        let line = "Chases and loads timed again for being on a CPU less than 90% of their time: 3 (4 samples set aside).";
        assert!(text.lines().any(|l| l.starts_with("# CPU for") && l.ends_with(line)), "{text}");
        Profile::parse(&text, "t").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(report::text(&c, &base).contains(line));
    }

    /// The walk's own cost leaves out what the model charges itself: with
    /// 4 KB host pages, the host's entry for every frame (an L2 hit), as
    /// with 2 MB host pages over scattered frames only; natively, none.
    #[test]
    fn the_walk_leaves_out_the_host_entry_the_model_reads() {
        use crate::infer::{HostPage, Point};
        let (mut c, base) = tiny();
        c.overlap.walk = vec![Point::new(1.0, 30.0)];
        c.clock_ghz = splab_native::suite::Spread::of(&[2.0]);
        c.costs.frames_4k = Some(PACKED);
        let walk = |c: &Calibration, virt: bool| {
            let text = profile_toml(c, &base, "t", virt);
            let line = text.lines().find(|l| l.starts_with("walk = ")).unwrap_or_else(|| panic!("{text}")).to_string();
            (Profile::parse(&text, "t").unwrap().costs.walk.unwrap(), line)
        };
        c.virt.guest = true;
        c.host_page = Some(HostPage { size: Some("4K".into()), reason: "test".into() });
        let (w4k, line) = walk(&c, true);
        assert!(line.contains("and one for the host's entry for the page's frame (nested paging over 4 KB host pages)"), "{line}");
        c.host_page = Some(HostPage { size: Some("2M".into()), reason: "test".into() });
        let (w2m, line) = walk(&c, true);
        assert!(!line.contains("host's entry"), "frames close together: {line}");
        c.costs.frames_4k = Some(SCATTERED);
        let (w2m_scattered, line) = walk(&c, true);
        assert!(line.contains("(scattered frames, nested paging)"), "{line}");
        let (native, _) = walk(&c, false);
        assert!(w4k < w2m && w4k == w2m_scattered && w2m == native, "{w4k} {w2m} {w2m_scattered} {native}");
    }

    /// 8192 pages as a freshly booted machine gives them; as an AMD EPYC
    /// guest's calibration found them (its 65536 pages scaled: 4.5 pages
    /// to a line, 61 % following on, 118 regions); and none adjacent.
    const PACKED: FrameRuns = FrameRuns { pages: 8192, followed: 8000, lines: 1030, regions: 17 };
    const HOST: FrameRuns = FrameRuns { pages: 8192, followed: 5037, lines: 1812, regions: 118 };
    const SCATTERED: FrameRuns = FrameRuns { pages: 8192, followed: 3, lines: 8150, regions: 900 };

    /// Scattered 4 KB frames age the model's memory, in runs that give its
    /// pages as many to a line of entries as the host's had; frames close
    /// together or unknown ones leave it fresh; the profile says which and
    /// why.
    #[test]
    fn scattered_frames_age_the_model() {
        let (mut c, base) = tiny();
        let aged = |c: &Calibration| {
            let text = profile_toml(c, &base, "t", false);
            let m = Profile::parse(&text, "t").unwrap_or_else(|e| panic!("{e}\n{text}")).memory;
            (m.aged, m.aged_run, text)
        };
        // The probe itself reads the region's frames while it is still
        // mapped (all of it present), where this process may read frame
        // numbers at all (root may; a buffer of its own shows which).
        let own = vec![1u8; 1 << 16];
        let readable = crate::probe::frame_runs(own.as_ptr().wrapping_add(own.as_ptr().align_offset(4096)), 8192).is_some();
        let plan_pages = Plan::tiny().small_bytes / 4096;
        assert_eq!(c.costs.frames_4k.map(|f| f.pages), readable.then_some(plan_pages), "{:?}", c.costs.frames_4k);
        c.costs.frames_4k = Some(SCATTERED);
        let (a, run, text) = aged(&c);
        assert_eq!((a, run), (Some(AGED), Some(1)));
        assert!(text.contains("aged = 0.5   # measured: 8192 4 KB pages of a fresh region lay in 8150 groups of eight frames (1.0 pages to a line of page-table entries, 8 if packed) and 900 2 MB regions (16 if packed); 3 of 8191 had the frame after the previous page's"), "{text}");
        c.costs.frames_4k = Some(HOST);
        let (a, run, text) = aged(&c);
        assert_eq!((a, run), (Some(AGED), Some(4)));
        assert!(text.contains("aged_run = 4   # measured: the pages to a line, 4.5, to a power of two"), "{text}");
        c.costs.frames_4k = Some(PACKED);
        let (a, run, text) = aged(&c);
        assert_eq!((a, run), (None, None));
        assert!(text.contains("# aged: none; measured: 8192 4 KB pages of a fresh region lay in 1030 groups"), "{text}");
        c.costs.frames_4k = None;
        let (a, run, text) = aged(&c);
        assert_eq!((a, run), (None, None));
        assert!(text.contains("# aged: not measured"), "{text}");
        assert!(report::text(&c, &base).contains("4 KB frames   not measured"));
    }

    /// The run is the pages to a line to the nearest power of two on a log
    /// scale (2.83 and 5.66 are the edges); eight, a whole line, is none.
    #[test]
    fn the_aged_run_follows_the_pages_to_a_line() {
        let run = |lines: u64| Frames(FrameRuns { pages: 8192, followed: 0, lines, regions: 16 }).aged_run();
        assert_eq!(run(8192), Some(1));
        assert_eq!(run(5800), Some(1));
        assert_eq!(run(5790), Some(2));
        assert_eq!(run(2900), Some(2));
        assert_eq!(run(2890), Some(4));
        assert_eq!(run(1449), Some(4));
        assert_eq!(run(1447), None);
        assert_eq!(run(1024), None);
        assert_eq!(run(0), None);
    }

    /// Pages read in a random order more than 3% slower than in address
    /// order mean streams go on into the next frame.
    #[test]
    fn next_page_from_reading_pages_in_and_out_of_order() {
        use splab_native::suite::Spread;
        let (mut c, base) = tiny();
        let next = |c: &Calibration| {
            let text = profile_toml(c, &base, "t", false);
            (Profile::parse(&text, "t").unwrap().prefetch.map(|p| p.next_page), text)
        };
        c.costs.stream_line_ns = Spread::of(&[7.0]).unwrap();
        (c.costs.pages_in_order_ns, c.costs.pages_shuffled_ns) = (Spread::of(&[6.0]), Spread::of(&[6.6]));
        let (n, text) = next(&c);
        assert_eq!(n, Some(true));
        assert!(text.contains("next_page = true   # measured: the 4 KB pages of 2 MB pages read whole in address order, 6.00 ns a line, in a random order 6.60 (+10.0%)"), "{text}");
        c.costs.pages_shuffled_ns = Spread::of(&[6.1]);
        assert_eq!(next(&c).0, Some(false));
        c.costs.pages_shuffled_ns = None;
        let (n, text) = next(&c);
        assert_eq!(n, Some(false));
        assert!(!text.contains("next_page"), "{text}");
    }

    /// The writeback cost is a copied line less two lines of two read
    /// streams, written to the profile; a faster copy gives 0 and says so,
    /// and without a two-stream read there is none.
    #[test]
    fn writeback_is_a_copy_less_two_read_streams() {
        use splab_native::suite::Spread;
        let (mut c, base) = tiny();
        c.costs.stream_line_ns = Spread::of(&[7.5]).unwrap();
        c.costs.read_streams_ns = vec![Spread::of(&[8.0]).unwrap(), Spread::of(&[6.25]).unwrap()];
        assert_eq!(writeback(&c.costs), Some(Writeback { ns: 2.5, copy_ns: 15.0, reads_ns: 12.5, clamped: false }));
        let text = profile_toml(&c, &base, "t", false);
        assert!(text.contains("writeback_ns = 2.50   # measured"), "{text}");
        assert_eq!(Profile::parse(&text, "t").unwrap().memory.writeback_ns, Some(2.5));
        c.costs.read_streams_ns[1] = Spread::of(&[8.0]).unwrap();
        let w = writeback(&c.costs).unwrap();
        assert_eq!((w.ns, w.clamped), (0.0, true));
        assert!(profile_toml(&c, &base, "t", false).contains("(the copy ran faster: 0)"));
        c.costs.read_streams_ns.truncate(1);
        assert_eq!(writeback(&c.costs), None);
        assert!(!profile_toml(&c, &base, "t", false).contains("writeback_ns"));
    }

    /// store_mlp is data_mlp scaled by loads over stores where stores are
    /// the slower, and is left out (said why) where they are not.
    #[test]
    fn store_mlp_is_data_mlp_scaled_by_loads_over_stores() {
        use splab_native::suite::Spread;
        let (mut c, base) = tiny();
        c.overlap.data_mlp = Some(10.0);
        c.costs.random_load_ns = Spread::of(&[16.0]);
        c.costs.random_store_ns = Spread::of(&[32.0]);
        assert_eq!(stores(&c, 10.0), Some(Stores { load_ns: 16.0, store_ns: 32.0, mlp: Some(5.0) }));
        let text = profile_toml(&c, &base, "t", false);
        assert!(text.contains("store_mlp = 5.00   # measured"), "{text}");
        assert_eq!(Profile::parse(&text, "t").unwrap().overlap.store_mlp, Some(5.0));
        c.costs.random_store_ns = Spread::of(&[15.0]);
        let text = profile_toml(&c, &base, "t", false);
        assert!(text.contains("# store_mlp not written") && Profile::parse(&text, "t").unwrap().overlap.store_mlp.is_none(), "{text}");
        c.costs.random_store_ns = None;
        assert_eq!(stores(&c, 10.0), None);
    }

    #[test]
    fn cache_sizes_snap_to_cpuid_only_when_close() {
        let leaf = cpu::CacheLeaf { level: 2, kind: "unified".into(), size_bytes: 2 << 20, ways: 16, line: 64 };
        assert_eq!(cache_size_kb(1448.0 * 1024.0, Some(&leaf)).0, 2048);
        assert_eq!(cache_size_kb(1024.0 * 1024.0, Some(&leaf)).0, 2048);
        assert_eq!(cache_size_kb(900.0 * 1024.0, Some(&leaf)).0, 900);
        assert_eq!(cache_size_kb(1000.0 * 1024.0, None).0, 1000);
        assert_eq!(fit_ways(1218, 15), 1230);
        assert_eq!(fit_ways(48, 12), 48);
        assert_eq!(fit_ways(107520, 15), 107520);
    }
}
