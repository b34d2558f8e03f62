//! `splab calibrate`: measures this host with microbenchmarks
//! (splab-native's `calibrate`) and writes a machine profile in the schema
//! `splab_hw::profile` parses. What cannot be measured from user space is
//! taken from the built-in profile of the same architecture, and every such
//! line says so in a comment.

use crate::error::{input, Fail};
use crate::output::{emit, json, num};
use crate::progress::Progress;
use crate::size;
use clap::Args;
use serde::Serialize;
use splab_hw::profile::{default_for_arch, Profile};
use splab_hw::tlb::{self, TlbArrayConfig, TlbIndex};
use splab_native::calibrate::probe::FrameRuns;
use splab_native::calibrate::{self, cpu, Calibration, Plan};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct CalibrateArgs {
    /// Write the profile to FILE (default: print it after the report).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// About 20 seconds instead of one and a half to two minutes: fewer repeats and
    /// points, smaller regions, no 1 GB page.
    #[arg(long)]
    pub quick: bool,
    /// A plan of a second or two whose numbers mean nothing (tests).
    #[arg(long, hide = true)]
    pub tiny: bool,
    /// The profile's name [default: calibrated-HOSTNAME].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// On a guest, write the [virt] section (nested paging, the host page
    /// size) as comments only, so that the model walks as on bare metal.
    #[arg(long)]
    pub no_virt_section: bool,
    /// hugetlb pool: grow it (as root) for 2 MB and 1 GB pages and restore
    /// it, or use only pages already in it.
    #[arg(long, value_name = "grow|keep", default_value = "grow")]
    pub hugetlb_pool: String,
}

/// What `--json` prints.
#[derive(Serialize)]
struct Report<'a> {
    measurements: &'a Calibration,
    profile: &'a str,
    written_to: Option<String>,
}

/// `splab calibrate`.
pub fn cmd(a: &CalibrateArgs, as_json: bool) -> Result<i32, Fail> {
    let grow = match a.hugetlb_pool.as_str() {
        "grow" => true,
        "keep" => false,
        other => return Err(Fail::Input(format!("--hugetlb-pool {other:?}: expected grow or keep"))),
    };
    if let Some(n) = &a.name {
        if n.is_empty() || n.contains(['"', '\\', '\n']) {
            return Err(Fail::Input(format!("--name {n:?}: give a non-empty name without quotes, backslashes or newlines")));
        }
    }
    let arch = splab_pmap::arch::host_machine();
    let base_name = default_for_arch(arch).ok_or_else(|| Fail::Input(format!("this host's architecture ({arch}) has no built-in profile to take unmeasured values from")))?;
    let base = input(Profile::load(base_name))?;
    // Open the output first, so that a bad path fails before two minutes
    // of measuring, not after.
    let mut file = match &a.output {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| Fail::Input(format!("--output {}: cannot write it: {e}", p.display())))?),
        None => None,
    };
    let mut plan = if a.tiny {
        Plan::tiny()
    } else if a.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    plan.grow_hugetlb = grow;
    let mut bar: Option<Progress> = None;
    let r = calibrate::run(&plan, &mut |done, total, phase| {
        let b = bar.get_or_insert_with(|| Progress::new(total, "calibrate", "probes", as_json));
        let _ = phase;
        b.update(done);
    });
    if let Some(b) = bar {
        b.finish();
    }
    let c = match r {
        Ok(c) => c,
        Err(e) => {
            if let Some(p) = &a.output {
                drop(file.take());
                let _ = std::fs::remove_file(p);
            }
            return Err(Fail::Run(format!("calibration failed: {e}")));
        }
    };
    let mut c = c;
    fit_second_level(&mut c, &base, base_name);
    let name = a.name.clone().unwrap_or_else(|| format!("calibrated-{}", hostname()));
    let text = profile_toml(&c, &base, base_name, &name, !a.no_virt_section);
    // What is written must load: check before writing it.
    if let Err(e) = Profile::parse(&text, "the calibrated profile") {
        emit(&report(&c, base_name));
        eprintln!("{text}");
        if let Some(p) = &a.output {
            drop(file.take());
            let _ = std::fs::remove_file(p);
        }
        return Err(Fail::Run(format!("internal error, nothing written: {e}")));
    }
    if let (Some(f), Some(p)) = (file.as_mut(), &a.output) {
        f.write_all(text.as_bytes()).and_then(|_| f.flush()).map_err(|e| Fail::Run(format!("--output {}: writing failed: {e}", p.display())))?;
    }
    let written_to = a.output.as_ref().map(|p| p.display().to_string());
    if as_json {
        emit(&json(&Report { measurements: &c, profile: &text, written_to }));
    } else {
        let mut o = report(&c, base_name);
        match &written_to {
            Some(p) => {
                let _ = writeln!(o, "\nprofile written to {p} (use it with --machine {p})");
            }
            None => {
                let _ = writeln!(o, "\nprofile:\n");
                o.push_str(&text);
            }
        }
        emit(&o);
    }
    Ok(0)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).ok().filter(|s| !s.is_empty() && !s.contains('"')).unwrap_or_else(|| "host".into())
}

/// Cycles from ns at the measured clock.
fn cycles(ns: f64, ghz: f64) -> u32 {
    (ns * ghz).round().max(1.0) as u32
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
pub fn profile_toml(c: &Calibration, base: &Profile, base_name: &str, name: &str, virt_section: bool) -> String {
    let nm = format!("# {NOT_MEASURED} {base_name}.toml");
    let mut o = String::new();
    let ghz = c.clock_ghz.as_ref().map(|s| s.median).filter(|g| *g > 0.1 && *g < 100.0);
    let f = ghz.unwrap_or(base.freq_ghz);
    let guest = c.virt.guest;
    let _ = writeln!(o, "# Measured on this host by `splab calibrate{}` in {:.0} s (microbenchmarks only:", if c.plan.quick { " --quick" } else { "" }, c.seconds);
    let _ = writeln!(o, "# pointer chases, dependent additions, page zero/copy, faults, system calls).");
    let _ = writeln!(o, "# Repeats: {} rounds, interleaved (the overlap probes {} times a round); medians. Noise: the quartile range of a point's", c.plan.rounds, calibrate::OVERLAP_SAMPLES);
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
                let _ = writeln!(o, "ways = {}   # {}", f.ways, tlb_ways(arr.entries, arr, &c.cpuid_tlbs, base_name).1);
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
                let (ways, why) = tlb_ways(e as usize, arr, &c.cpuid_tlbs, base_name);
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
            _ => (bases[k].ways, format!("{NOT_MEASURED} {base_name}.toml")),
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
    if let (Some(i), Some(g)) = (&c.instruction_ns, ghz) {
        let _ = writeln!(o, "\n[core]   # measured: register-only integer work, apart from memory references (real programs run online)");
        let _ = writeln!(
            o,
            "cycles_per_instruction = {:.3}   # {:.4} ns an instruction of two chains of add/xor/shift/rotate (median of {} rounds) at {g:.2} GHz",
            i.median * g,
            i.median,
            c.plan.rounds
        );
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
fn method(h: &calibrate::infer::Hierarchy, memory: bool) -> String {
    let how = match (h.method.as_str(), memory) {
        ("reported sizes", false) => "median of the latency curve inside the level",
        ("reported sizes", true) => "median of the latency curve past the last level",
        ("plateaus", false) => "median of the latency curve inside the level, the levels placed by its steps",
        ("plateaus", true) => "plateau of the latency curve past its last step",
        _ => "least-squares fit to the latency curve",
    };
    format!("{how}{}", less_tlb(h))
}

/// What the levels were read without, where the latency chase's 2 MB
/// pages were cached as 4 KB pieces.
fn less_tlb(h: &calibrate::infer::Hierarchy) -> String {
    match h.less_first_tlb_miss_ns {
        Some(ns) => format!(", less {ns:.2} ns for each load past the first TLB level's reach, since the host's 4 KB pages splinter the chase's 2 MB pages"),
        None => String::new(),
    }
}

/// The fraction of free 2 MB blocks a profile ages where the host's 4 KB
/// frames came out scattered: a quarter of memory then is scattered free
/// frames, more than any 4 KB region the validation maps.
const AGED: f64 = 0.5;

/// How a fresh 4 KB-page region's frames lay (`probe::frame_runs`).
#[derive(Debug, PartialEq)]
struct Frames(FrameRuns);

impl Frames {
    /// Pages after the first.
    fn steps(&self) -> u64 {
        self.0.pages - 1
    }
    /// Pages to a line of page-table entries (eight frames' entries): 8
    /// where the frames are packed, 1 where no two share a line.
    fn per_line(&self) -> f64 {
        self.0.pages as f64 / self.0.lines.max(1) as f64
    }
    /// The runs the model ages its memory into (`[memory] aged_run`), so
    /// that its 4 KB pages share lines of entries as the host's did: the
    /// pages to a line, to the nearest power of two on a log scale. None
    /// where that is eight, a whole line, as on a freshly booted machine.
    /// (Under nested paging with 4 KB host pages each line is one the
    /// walk reads for a frame's host entry: the model's walks cost what
    /// the host's do only if its frames spread over as many lines.)
    fn aged_run(&self) -> Option<u32> {
        let run = 1u32 << self.per_line().max(1.0).log2().round().min(3.0) as u32;
        (run < 8).then_some(run)
    }
    fn scattered(&self) -> bool {
        self.aged_run().is_some()
    }
    /// What was measured, for the profile's comments and the report.
    fn measured(&self) -> String {
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

fn frames(k: &calibrate::Costs) -> Option<Frames> {
    k.frames_4k.filter(|f| f.pages > 1).map(Frames)
}

/// Reading contiguous 4 KB pages in address order against a random order.
#[derive(Debug, PartialEq)]
struct NextPage {
    in_order_ns: f64,
    shuffled_ns: f64,
}

/// A random order this much slower means streams go on into the next
/// frame (on the development VM it was 26 to 35 % slower in five
/// calibrations, and 6.5 % in a C loop summing one word a line).
const NEXT_PAGE_GAIN: f64 = 0.03;

impl NextPage {
    fn gain(&self) -> f64 {
        self.shuffled_ns / self.in_order_ns - 1.0
    }
    fn follows(&self) -> bool {
        self.gain() > NEXT_PAGE_GAIN
    }
}

fn next_page(k: &calibrate::Costs) -> Option<NextPage> {
    let (a, b) = (k.pages_in_order_ns.as_ref()?.median, k.pages_shuffled_ns.as_ref()?.median);
    (a > 0.0 && b > 0.0).then_some(NextPage { in_order_ns: a, shuffled_ns: b })
}

/// What a line written back to memory costs, from the streaming probes.
#[derive(Debug, PartialEq)]
struct Writeback {
    ns: f64,
    /// A line copied: read from one stream, written to another.
    copy_ns: f64,
    /// Two lines read, one from each of two streams at once: what the
    /// model charges a copy's line without writebacks (the store's line
    /// is fetched as the load's is, and two streams run at once).
    reads_ns: f64,
    /// The copy was the faster (noise, or stores that skip the fetch):
    /// no charge.
    clamped: bool,
}

/// `Writeback` from the copy and the two-stream read, if both were
/// measured.
fn writeback(k: &calibrate::Costs) -> Option<Writeback> {
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
struct Stores {
    load_ns: f64,
    store_ns: f64,
    /// data_mlp x load / store, where stores were the slower (else None:
    /// as many overlap as loads); at least 1.
    mlp: Option<f64>,
}

/// `Stores` where both probes ran.
fn stores(c: &Calibration, data_mlp: f64) -> Option<Stores> {
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

/// Fits the second-level 4 KB TLB to the whole 4 KB-page curve with the
/// model's own TLB (`infer::fit_stlb` over `tlb::sweep`): candidates of
/// 256 to 4096 entries in steps of eight sets, each with the modulo and
/// the hashed index, over the curve from four times the first step (past
/// the first level) to 8192 pages (past that the walks slow as page
/// tables leave the caches, which the fit does not model). Where it fits,
/// its entries and hit cost replace the step finder's, and the first
/// level's entries are read against that hit cost.
pub fn fit_second_level(c: &mut Calibration, base: &Profile, base_name: &str) {
    let t = &mut c.tlb;
    let Some(l2) = base.tlb.iter().find(|a| a.level == 2 && a.sizes.iter().any(|s| s == "4K")) else { return };
    let Some(l1) = base.tlb.iter().find(|a| a.level == 1 && a.sizes.iter().any(|s| s == "4K")) else { return };
    let Some(first) = t.steps_4k.first().map(|e| e.capacity_x) else { return };
    let ways = tlb_ways(l2.entries, l2, &c.cpuid_tlbs, base_name).0.max(1);
    let l1_entries = t.l1_4k_entries.map_or(l1.entries, |e| e as usize);
    let l1_ways = if l1.ways > 0 && l1_entries.is_multiple_of(l1.ways) { l1.ways } else { l1_entries };
    let l1_cfg = TlbArrayConfig { sizes: vec!["4K".into()], entries: l1_entries, ways: l1_ways, level: 1, index: TlbIndex::Modulo };
    let step = ways * 8;
    let cands: Vec<(u64, bool)> = (1..).map(|k| k * step).skip_while(|&e| e < 256).take_while(|&e| e <= 4096).flat_map(|e| [(e as u64, false), (e as u64, true)]).collect();
    let shares = |entries: u64, hashed: bool, pages: u64| -> (f64, f64) {
        let index = if hashed { TlbIndex::Hashed } else { TlbIndex::Modulo };
        let cfgs = [l1_cfg.clone(), TlbArrayConfig { sizes: vec!["4K".into()], entries: entries as usize, ways, level: 2, index }];
        tlb::sweep(&cfgs, pages, pages).map_or((f64::NAN, f64::NAN), |s| (s.l2, s.miss))
    };
    let Some(mut fit) = calibrate::infer::fit_stlb(&t.pages_4k, 4.0 * first, 8192.0, &cands, shares) else { return };
    fit.ways = ways as u64;
    t.l2_entries = Some(fit.entries);
    t.stlb_hit_ns = Some(fit.hit_ns).filter(|&ns| ns > 0.0 && ns < 20.0);
    if let Some(e) = calibrate::infer::l1_entries_below(&t.pages_4k, fit.hit_ns) {
        t.l1_4k_entries = Some(e as u64);
    }
    t.stlb_fit = Some(fit);
}

/// Ways for a TLB array of `entries` entries: CPUID leaf 0x18's for an
/// array of that level and size with as many entries, else the base's when
/// they divide the entries, else the largest power of two up to 16 that
/// does.
fn tlb_ways(entries: usize, arr: &TlbArrayConfig, leaves: &[cpu::TlbLeaf], base_name: &str) -> (usize, String) {
    let kinds = ["data", "unified", "load"];
    if let Some(l) = leaves.iter().find(|l| l.level == arr.level && kinds.contains(&l.kind.as_str()) && l.entries as usize == entries && arr.sizes.iter().any(|s| l.sizes.contains(s))) {
        let w = if l.fully_associative { entries } else { l.ways as usize };
        if w > 0 && entries.is_multiple_of(w) {
            return (w, format!("CPUID leaf 0x18 ({} entries{})", l.entries, if l.fully_associative { ", fully associative" } else { "" }));
        }
    }
    if arr.ways > 0 && entries.is_multiple_of(arr.ways) {
        return (arr.ways, format!("{NOT_MEASURED} {base_name}.toml"));
    }
    let w = (0..=4).rev().map(|k| 1usize << k).find(|&w| entries.is_multiple_of(w)).unwrap_or(1);
    (w, format!("not measured: the largest power of two up to 16 dividing {entries}"))
}

/// The sentence on the chases and loads timed again (`Noise::taken_again`),
/// after `lead`; empty where there were none.
fn taken_again(n: &calibrate::Noise, lead: &str) -> String {
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

/// The text report of the measurements.
pub fn report(c: &Calibration, base_name: &str) -> String {
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
    let curve = |pts: &[splab_native::calibrate::infer::Point]| pts.iter().map(|p| format!("{}:{:+.1}", p.x, p.y)).collect::<Vec<_>>();
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
            "                walks with misses: {} chases {:.2} ns a load; walks adding to data predict {:.2}, holding a miss slot {:.2} (the profile takes the {})",
            fit.chases,
            fit.measured_ns,
            fit.adding_ns,
            fit.holding_ns,
            if ov.walk_holds_slot == Some(true) { "second" } else { "first" }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> (Calibration, Profile) {
        let c = calibrate::run(&Plan::tiny(), &mut |_, _, _| {}).unwrap();
        (c, Profile::load("sapphire-rapids").unwrap())
    }

    #[test]
    fn a_calibrated_profile_parses_and_marks_what_it_did_not_measure() {
        let (mut c, base) = tiny();
        let text = profile_toml(&c, &base, "sapphire-rapids", "calibrated-test", false);
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
        let commented = profile_toml(&c, &base, "sapphire-rapids", "g", false);
        assert!(commented.contains("# [virt]\n# nested = true"), "{commented}");
        assert!(Profile::parse(&commented, "g").unwrap().nested().is_none());
        let real = profile_toml(&c, &base, "sapphire-rapids", "g", true);
        assert!(real.contains("\n[virt]\nnested = true") && real.contains("host_page = \""), "{real}");
        let p = Profile::parse(&real, "g").unwrap_or_else(|e| panic!("{e}\n{real}"));
        assert!(p.nested().is_some(), "{real}");
        // The quick memory probes need more than the tiny plan's 16 MB
        // region; where they ran, the profile keeps what they read.
        assert_eq!((c.reference, p.reference), (None, None));
        let r = splab_hw::profile::Reference { chase_ns: 151.25, chases_ns: 5.75, copy_ns: 2.125, cache_chase_ns: Some(31.5) };
        c.reference = Some(r);
        let text = profile_toml(&c, &base, "sapphire-rapids", "g", true);
        assert!(text.contains("\n[reference]   # measured: quick probes") && text.contains("chases_ns = 5.750   # a load, 32 such chases at once") && text.contains("cache_chase_ns = 31.50   # a dependent load"), "{text}");
        assert_eq!(Profile::parse(&text, "g").unwrap().reference, Some(r));
    }

    /// The window's loops run (on x86-64, where they are written), and a
    /// fitted window goes into the profile with the loops it came from; a
    /// calibration without one keeps the base profile's (none here).
    #[test]
    fn the_window_goes_into_the_profile_with_its_loops() {
        use splab_native::calibrate::infer::WindowFit;
        let (mut c, base) = tiny();
        if cfg!(target_arch = "x86_64") {
            let shapes: Vec<(&str, u32, u32)> = c.overlap.window.iter().map(|p| (p.shape.as_str(), p.instructions, p.stores)).collect();
            assert_eq!(shapes, [("miss+16 nops", 21, 0), ("miss+32 nops", 37, 0), ("rmw miss+2 stores", 7, 3), ("rmw miss+3 stores", 8, 4)]);
            assert!(c.overlap.window.iter().all(|p| p.ns.median > 0.0));
        }
        c.overlap.window_fit = None;
        let text = profile_toml(&c, &base, "sapphire-rapids", "t", false);
        assert!(!text.contains("window"), "{text}");
        c.overlap.window_fit = Some(WindowFit { latency_ns: 177.8, entries: 438.25, per_miss: 6.59, per_store: 2.4 });
        let text = profile_toml(&c, &base, "sapphire-rapids", "t", false);
        assert!(text.contains("window = 438.2   # measured: loops of independent misses") && text.contains("(177.8 ns)"), "{text}");
        assert!(text.contains("window_per_miss = 6.59   # measured") && text.contains("window_per_store = 2.40   # measured"), "{text}");
        let p = Profile::parse(&text, "t").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!((p.overlap.window, p.overlap.window_per_miss, p.overlap.window_per_store), (Some(438.2), 6.59, 2.4));
        assert!(report(&c, "sapphire-rapids").contains("the core's window: 438 instructions over one chase's latency (177.8 ns); a miss takes 6.6 more, a store 2.4 more"));
    }

    /// walk_mlp's comment says which loads it came from, with the two
    /// extras, and the profile takes the value.
    #[test]
    fn walk_mlp_says_which_loads_it_came_from() {
        use splab_native::calibrate::infer::Point;
        let (mut c, base) = tiny();
        let ov = &mut c.overlap;
        ov.walk = vec![Point { x: 1.0, y: 19.2, iqr: 0.0 }, Point { x: 16.0, y: 6.0, iqr: 0.0 }];
        (ov.walk_loads_ns, ov.walk_mlp, ov.walk_mlp_chases, ov.walk_mlp_from_loads) = (Some(9.6), Some(2.0), Some(3.2), true);
        let text = profile_toml(&c, &base, "sapphire-rapids", "t", false);
        let line = "walk_mlp = 2.00   # measured: a walk alone (one chase over 8192 4 KB pages, data in L2) 19.20 ns, over what walks add to independent loads of the same lines, 9.60 ns";
        assert!(text.contains(line), "{text}");
        assert_eq!(Profile::parse(&text, "t").unwrap().overlap.walk_mlp, 2.0);
        (c.overlap.walk_mlp, c.overlap.walk_mlp_from_loads) = (Some(3.2), false);
        let text = profile_toml(&c, &base, "sapphire-rapids", "t", false);
        assert!(text.contains("walk_mlp = 3.20   # measured: a walk alone (one chase over 8192 4 KB pages, data in L2) 19.20 ns, over what walks add with 16 chases at once"), "{text}");
    }

    /// The profile's header and the report say how many chases and loads
    /// were timed again for being off the CPU, and nothing where none were.
    #[test]
    fn samples_timed_again_are_counted_in_the_header_and_the_report() {
        let (mut c, base) = tiny();
        c.noise.taken_again = 0;
        assert!(!profile_toml(&c, &base, "sapphire-rapids", "t", false).contains("timed again"));
        assert!(!report(&c, "sapphire-rapids").contains("timed again"));
        (c.noise.taken_again, c.noise.set_aside) = (3, 4);
        let text = profile_toml(&c, &base, "sapphire-rapids", "t", false);
        let line = "Chases and loads timed again for being on a CPU less than 90% of their time: 3 (4 samples set aside).";
        assert!(text.lines().any(|l| l.starts_with("# CPU for") && l.ends_with(line)), "{text}");
        Profile::parse(&text, "t").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(report(&c, "sapphire-rapids").contains(line));
    }

    /// The walk's own cost leaves out what the model charges itself: with
    /// 4 KB host pages, the host's entry for every frame (an L2 hit), as
    /// with 2 MB host pages over scattered frames only; natively, none.
    #[test]
    fn the_walk_leaves_out_the_host_entry_the_model_reads() {
        use splab_native::calibrate::infer::{HostPage, Point};
        let (mut c, base) = tiny();
        c.overlap.walk = vec![Point::new(1.0, 30.0)];
        c.clock_ghz = splab_native::suite::Spread::of(&[2.0]);
        c.costs.frames_4k = Some(PACKED);
        let walk = |c: &Calibration, virt: bool| {
            let text = profile_toml(c, &base, "sapphire-rapids", "t", virt);
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

    /// 8192 pages as a freshly booted machine gives them; as the AMD
    /// guest gave them (its 65536 pages scaled: 4.5 pages to a line, 61 %
    /// following on, 118 regions); and none adjacent.
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
            let text = profile_toml(c, &base, "sapphire-rapids", "t", false);
            let m = Profile::parse(&text, "t").unwrap_or_else(|e| panic!("{e}\n{text}")).memory;
            (m.aged, m.aged_run, text)
        };
        // The probe itself reads the region's frames while it is still
        // mapped (all of it present), where this process may read frame
        // numbers at all (root may; a buffer of its own shows which).
        let own = vec![1u8; 1 << 16];
        let readable = splab_native::calibrate::probe::frame_runs(own.as_ptr().wrapping_add(own.as_ptr().align_offset(4096)), 8192).is_some();
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
        assert!(report(&c, "sapphire-rapids").contains("4 KB frames   not measured"));
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
            let text = profile_toml(c, &base, "sapphire-rapids", "t", false);
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
        let text = profile_toml(&c, &base, "sapphire-rapids", "t", false);
        assert!(text.contains("writeback_ns = 2.50   # measured"), "{text}");
        assert_eq!(Profile::parse(&text, "t").unwrap().memory.writeback_ns, Some(2.5));
        c.costs.read_streams_ns[1] = Spread::of(&[8.0]).unwrap();
        let w = writeback(&c.costs).unwrap();
        assert_eq!((w.ns, w.clamped), (0.0, true));
        assert!(profile_toml(&c, &base, "sapphire-rapids", "t", false).contains("(the copy ran faster: 0)"));
        c.costs.read_streams_ns.truncate(1);
        assert_eq!(writeback(&c.costs), None);
        assert!(!profile_toml(&c, &base, "sapphire-rapids", "t", false).contains("writeback_ns"));
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
        let text = profile_toml(&c, &base, "sapphire-rapids", "t", false);
        assert!(text.contains("store_mlp = 5.00   # measured"), "{text}");
        assert_eq!(Profile::parse(&text, "t").unwrap().overlap.store_mlp, Some(5.0));
        c.costs.random_store_ns = Spread::of(&[15.0]);
        let text = profile_toml(&c, &base, "sapphire-rapids", "t", false);
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
