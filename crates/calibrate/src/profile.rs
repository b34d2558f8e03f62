//! The machine profile a calibration gives: the measured values with how
//! they were had, the rest from the built-in profile of this host's
//! architecture (`Base`), each marked as not measured, in the schema
//! `splab_hw::profile` parses.

use crate::cpu;
use crate::figures::{cycles, frames, host_page_choice, less_tlb, next_page, taken_again, writeback};
use crate::fit::tlb_ways;
use crate::measure::{self, Calibration};
use crate::notes::Notes;
use splab_hw::cache::CacheConfig;
use splab_hw::nested::VirtConfig;
use splab_hw::profile::{default_for_arch, Caches, Core, Costs, Memory, Prefetch, Profile, Reference};
use splab_hw::pwc::PwcLevelConfig;
use splab_hw::size;
use splab_hw::tlb::{TlbArrayConfig, TlbIndex};

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

    /// The built-in profile of the machines most like this host
    /// (`cpu::closest_profile` by its CPUID signature), else the one for
    /// its architecture.
    pub fn for_host(arch: &str) -> Result<Base, String> {
        match crate::cpu::signature().and_then(|(v, f, m)| crate::cpu::closest_profile(&v, f, m)) {
            Some(name) => Base::named(name),
            None => Base::for_arch(arch),
        }
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

/// Cache level `k` (0 for the first) as the latency curve's hierarchy
/// `h` gives it: its size from the steps (or CPUID leaf 4's, `leaf`),
/// fitted to `ways`, and its latency in cycles at `f` GHz; with the
/// comments of its size, ways and latency.
pub(crate) fn measured_level(h: &crate::infer::Hierarchy, k: usize, leaf: Option<&cpu::CacheLeaf>, (ways, ways_why): (usize, String), f: f64) -> (CacheConfig, [String; 3]) {
    let (kb, why) = if h.step_seen[k] {
        cache_size_kb(h.size_bytes[k], leaf)
    } else {
        let kb = (h.size_bytes[k] / 1024.0).round() as u64;
        (kb, format!("no latency step to measure (the next level is within 8% as slow); CPUID leaf 4's {kb} KB"))
    };
    let kb2 = fit_ways(kb, ways);
    let rounded = if kb2 != kb { format!(", rounded to {kb2} KB for {ways} ways") } else { String::new() };
    let notes = [format!("{why}{rounded}"), ways_why, format!("measured: {:.2} ns load to use ({})", h.latency_ns[k], method(h, false))];
    (CacheConfig { size_kb: kb2, ways, latency: cycles(h.latency_ns[k], f) }, notes)
}

const NOT_MEASURED: &str = "not measured: from";

/// A calibrated profile: the value, and the text written from it with
/// where each value came from.
pub struct Written {
    pub profile: Profile,
    pub text: String,
}

/// The profile of `c`, named `name`: the measured values with how they
/// were had, the rest from `b` marked `# not measured: from BASE.toml`.
/// On a guest, `virt_section` writes the `[virt]` section (nested paging,
/// the host page size), else leaves it as comments, so that the model
/// walks as on bare metal. The text is checked to read back as the
/// profile.
pub fn write(c: &Calibration, b: &Base, name: &str, virt_section: bool) -> Result<Written, String> {
    let mut w = Writer { c, b, virt_section, n: Notes::default(), f: clock(c).unwrap_or(b.profile.freq_ghz) };
    let profile = w.profile(name);
    let text = w.n.render(&profile)?;
    // What is written must load, as what was meant.
    match Profile::parse(&text, "the calibrated profile") {
        Ok(back) if back == profile => Ok(Written { profile, text }),
        Ok(_) => Err("internal error: the calibrated profile does not read back as it was written".into()),
        Err(e) => Err(format!("internal error: {e}")),
    }
}

/// The core clock measured, GHz, where it is believable.
fn clock(c: &Calibration) -> Option<f64> {
    c.clock_ghz.as_ref().map(|s| s.median).filter(|g| *g > 0.1 && *g < 100.0)
}

/// `x` as it reads with `places` decimals: what the profile holds of a
/// measured value is what its text shows.
fn rounded(x: f64, places: usize) -> f64 {
    format!("{x:.places$}").parse().unwrap_or(x)
}

/// Builds the profile section by section, noting where each value came
/// from.
struct Writer<'a> {
    c: &'a Calibration,
    b: &'a Base,
    virt_section: bool,
    n: Notes,
    /// GHz that cycles are counted at: the measured clock, else the base's.
    f: f64,
}

impl Writer<'_> {
    fn profile(&mut self, name: &str) -> Profile {
        let (c, b) = (self.c, self.b);
        self.header();
        let desc = format!(
            "{}{}, {} CPUs, measured by splab calibrate",
            if c.cpu_brand.is_empty() { "unknown processor".to_string() } else { c.cpu_brand.clone() },
            if c.virt.guest { format!(" (guest of {})", c.virt.cpuid_vendor.as_deref().unwrap_or("a hypervisor")) } else { String::new() },
            c.host.cpus
        );
        self.n.note("name", "given to splab calibrate (--name; calibrated-HOSTNAME by default)");
        self.n.note("description", "measured: CPUID's processor name, the hypervisor found, this host's CPUs");
        self.n.note("arch", "this host's");
        if b.profile.ad_update.is_some() {
            self.n.note("ad_update", b.not_measured());
        }
        let freq_ghz = match clock(c) {
            Some(g) => {
                let s = c.clock_ghz.as_ref();
                let base = if c.cpuid_mhz.0 > 0 { format!(" (CPUID 0x16: base {} MHz)", c.cpuid_mhz.0) } else { String::new() };
                self.n.note("freq_ghz", format!("measured: dependent additions, {:.2} .. {:.2} GHz over the rounds{base}", s.map_or(g, |s| s.min), s.map_or(g, |s| s.max)));
                rounded(g, 2)
            }
            None => {
                self.n.note("freq_ghz", b.not_measured());
                b.profile.freq_ghz
            }
        };
        self.n.note("cpus", "this host's CPUs");
        Profile {
            name: name.to_string(),
            description: desc.replace(['"', '\\'], ""),
            arch: b.profile.arch.clone(),
            ad_update: b.profile.ad_update,
            freq_ghz,
            cpus: c.host.cpus,
            tlb: self.tlbs(),
            pwc: self.pwc(),
            cache: self.caches(),
            memory: self.memory(),
            costs: self.costs(),
            virt: self.virt(),
            prefetch: self.prefetch(),
            reference: self.reference(),
            core: self.core(),
        }
    }

    fn header(&mut self) {
        let (c, n) = (self.c, &mut self.n);
        n.header(format!("Measured on this host by `splab calibrate{}` in {:.0} s (microbenchmarks only:", if c.plan.quick { " --quick" } else { "" }, c.seconds));
        n.header("pointer chases, dependent additions, page zero/copy, faults, system calls).");
        n.header(format!("Repeats: {} rounds, interleaved (the overlap probes {} times a round); medians. Noise: the quartile range of a point's", c.plan.rounds, measure::OVERLAP_SAMPLES));
        n.header(format!("repeats was {:.1}% of its median (median over points, worst {:.0}%); the process was on a", 100.0 * c.noise.median_rel_iqr, 100.0 * c.noise.max_rel_iqr));
        n.header(format!("CPU for {:.0}% of the timed time (median; lowest {:.0}%).{}", 100.0 * c.noise.median_on_cpu, 100.0 * c.noise.min_on_cpu, taken_again(&c.noise, " ")));
        n.header(format!("Values that cannot be measured from user space come from {}.toml and say so.", self.b.name));
    }

    /// The base's arrays, with entries replaced where a step showed them
    /// (or the second level's fit), and ways from CPUID leaf 0x18 where
    /// it describes the array.
    fn tlbs(&mut self) -> Vec<TlbArrayConfig> {
        let (c, b) = (self.c, self.b);
        let t = &c.tlb;
        let host4k = c.host_page.as_ref().and_then(|h| h.size.as_deref()) == Some("4K");
        let mut out = Vec::new();
        for (i, arr) in b.profile.tlb.iter().enumerate() {
            let at = |k: &str| format!("tlb.{i}.{k}");
            let has = |s: &str| arr.sizes.iter().any(|x| x == s);
            // The probes load data: they measure the data side only.
            let data = arr.side() != splab_hw::tlb::TlbSide::Inst;
            let measured = match (arr.level, arr.sizes.len()) {
                (1, 1) if data && has("4K") => t.l1_4k_entries.map(|e| (e, "4K")),
                (1, 1) if data && has("2M") && !host4k => t.l1_2m_entries.map(|e| (e, "2M")),
                (2, _) if data && has("4K") => t.l2_entries.map(|e| (e, "4K")),
                _ => None,
            };
            self.n.note(&at("level"), b.not_measured());
            self.n.note(&at("sizes"), b.not_measured());
            if arr.side.is_some() {
                self.n.note(&at("side"), b.not_measured());
            }
            let fit = t.stlb_fit.as_ref().filter(|_| data && arr.level == 2 && has("4K"));
            let (entries, ways, index) = match (measured, fit) {
                (Some(_), Some(f)) => {
                    self.n.note(&at("entries"), format!("measured: the model's TLB fitted to the 4 KB curve from {} to {} pages ({} points): {:.2} ns rms", f.from_pages, f.to_pages, f.points, f.rms_ns));
                    self.n.note(&at("ways"), tlb_ways(arr.entries, arr, &c.cpuid_tlbs, b).1);
                    let other = if f.other_entries > 0 { format!("; the best {} array ({} entries) {:.2} ns", f.other_index(), f.other_entries, f.other_rms_ns) } else { String::new() };
                    if f.hashed {
                        self.n.note(&at("index"), format!("measured: the misses rise gradually around the capacity, as sets overflowing unevenly make them{other}"));
                    } else {
                        self.n.lines_after(&at("ways"), vec![format!("# index = \"modulo\" (the default)   measured: the misses step up at the capacity{other}")]);
                    }
                    (f.entries as usize, f.ways as usize, if f.hashed { TlbIndex::Hashed } else { TlbIndex::Modulo })
                }
                (Some((e, sz)), None) => {
                    let (ways, why) = tlb_ways(e as usize, arr, &c.cpuid_tlbs, b);
                    let curve = if sz == "2M" { &t.pages_2m } else { &t.pages_4k };
                    let how = match curve.iter().map(|p| p.x).find(|&x| x > e as f64) {
                        Some(x) => format!("measured: extra latency of one line a page steps up between {e} and {x} {sz} pages"),
                        None => format!("measured: extra latency of one line a page steps up past {e} {sz} pages"),
                    };
                    self.n.note(&at("entries"), how);
                    self.n.note(&at("ways"), why);
                    (e as usize, ways, TlbIndex::Modulo)
                }
                (None, _) => {
                    self.n.note(&at("entries"), b.not_measured());
                    self.n.note(&at("ways"), b.not_measured());
                    (arr.entries, arr.ways, TlbIndex::Modulo)
                }
            };
            out.push(TlbArrayConfig { sizes: arr.sizes.clone(), entries, ways, level: arr.level, index, side: arr.side });
        }
        out
    }

    /// The paging-structure caches: the base's (their comment is on each
    /// header, for the keys under it).
    fn pwc(&mut self) -> Vec<PwcLevelConfig> {
        for i in 0..self.b.profile.pwc.len() {
            self.n.note(&format!("pwc.{i}"), self.b.not_measured());
        }
        self.b.profile.pwc.clone()
    }

    fn caches(&mut self) -> Caches {
        let (c, b, f) = (self.c, self.b, self.f);
        let leaf = |level: u8| c.cpuid_caches.iter().find(|l| l.level == level && l.kind != "instruction");
        let bases = [&b.profile.cache.l1d, &b.profile.cache.l2, &b.profile.cache.l3];
        let mut levels = Vec::new();
        for (k, name) in ["l1d", "l2", "l3"].iter().enumerate() {
            let at = |key: &str| format!("cache.{name}.{key}");
            let lf = leaf(k as u8 + 1);
            let (ways, ways_why) = match lf {
                Some(l) if l.ways <= 64 => (l.ways as usize, "CPUID leaf 4".to_string()),
                _ => (bases[k].ways, b.not_measured()),
            };
            levels.push(match &c.hierarchy {
                Some(h) => {
                    let (level, notes) = measured_level(h, k, lf, (ways, ways_why), f);
                    for (key, note) in ["size_kb", "ways", "latency"].iter().zip(notes) {
                        self.n.note(&at(key), note);
                    }
                    level
                }
                None => {
                    for key in ["size_kb", "ways", "latency"] {
                        self.n.note(&at(key), b.not_measured());
                    }
                    bases[k].clone()
                }
            });
        }
        let [l1d, l2, l3]: [CacheConfig; 3] = levels.try_into().expect("three levels");
        // The instruction cache: its size and ways from CPUID, its
        // latency the base's (a fetch that hits costs the front end
        // nothing the model times).
        let l1i = match c.cpuid_caches.iter().find(|l| l.level == 1 && l.kind == "instruction") {
            Some(l) if l.ways <= 64 && l.ways > 0 => {
                let kb = fit_ways((l.size_bytes / 1024).max(1), l.ways as usize);
                self.n.note("cache.l1i.size_kb", "CPUID leaf 4");
                self.n.note("cache.l1i.ways", "CPUID leaf 4");
                self.n.note("cache.l1i.latency", b.not_measured());
                CacheConfig { size_kb: kb, ways: l.ways as usize, latency: b.profile.cache.l1i.latency }
            }
            _ => {
                for key in ["size_kb", "ways", "latency"] {
                    self.n.note(&format!("cache.l1i.{key}"), b.not_measured());
                }
                b.profile.cache.l1i.clone()
            }
        };
        Caches { l1i, l1d, l2, l3, walk_level: None, last_level_write_through: None, line_bytes: None }
    }

    fn memory(&mut self) -> Memory {
        let (c, b) = (self.c, self.b);
        let dram_latency_ns = match &c.hierarchy {
            Some(h) => {
                self.n.note("memory.dram_latency_ns", format!("measured: latency curve up to {} ({}; {:.1}% rms from the points)", size::show(c.plan.huge_bytes / 2), method(h, true), 100.0 * h.rms_rel_error));
                rounded(h.memory_ns, 1)
            }
            None => {
                self.n.note("memory.dram_latency_ns", b.not_measured());
                b.profile.memory.dram_latency_ns
            }
        };
        let mut last = "memory.dram_latency_ns";
        let writeback_ns = writeback(&c.costs).map(|w| {
            let clamped = if w.clamped { " (the copy ran faster: 0)" } else { "" };
            self.n.note("memory.writeback_ns", format!("measured: a sequential copy's line read and written, {:.2} ns, less two lines of two read streams at once, {:.2} ns{clamped}", w.copy_ns, w.reads_ns));
            last = "memory.writeback_ns";
            rounded(w.ns, 2)
        });
        // The memory interface, as one core sees it: what it moved in the
        // sequential copy, a line read or written at a time. The model's
        // bound is per CPU, and one core of a server reaches far less than
        // its memory controllers' peak: the copy is how much it moves.
        let line = c.costs.stream_line_ns.median;
        let channel_gbs = (line > 0.0 && line.is_finite()).then(|| {
            self.n.note(
                "memory.channel_gbs",
                format!("measured: sequential copy of {} by one core, {line:.2} ns a line read or written: what one core moves between its caches and memory", size::show(c.costs.stream_bytes)),
            );
            last = "memory.channel_gbs";
            rounded(64.0 / line, 2)
        });
        let (aged, aged_run) = match frames(&c.costs) {
            Some(fr) => match fr.aged_run() {
                Some(run) => {
                    self.n.note("memory.aged", format!("measured: {} (/proc/self/pagemap), so free frames are scattered; not measured: how much of memory, here half the free 2 MB blocks", fr.measured()));
                    self.n.note("memory.aged_run", format!("measured: the pages to a line, {:.1}, to a power of two: the aged blocks give out 4 KB pages {run} frames in a row from scattered places", fr.per_line()));
                    (Some(AGED), Some(run))
                }
                None => {
                    self.n.lines_after(last, vec![format!("# aged: none; measured: {} (/proc/self/pagemap), as on a freshly booted machine", fr.measured())]);
                    (None, None)
                }
            },
            None => {
                self.n.lines_after(last, vec!["# aged: not measured (/proc/self/pagemap shows frame numbers to root only); absent, 4 KB pages get frames close together, as on a freshly booted machine".into()]);
                (None, None)
            }
        };
        Memory { dram_latency_ns, writeback_ns, channel_gbs, aged, aged_run }
    }

    fn costs(&mut self) -> Costs {
        let (c, b, f) = (self.c, self.b, self.f);
        let t = &c.tlb;
        let bc = &b.profile.costs;
        let mut k = bc.clone();
        k.stlb_hit = match t.stlb_hit_ns {
            Some(ns) if ns > 0.0 => {
                let how = if t.stlb_fit.is_some() { "that misses the first TLB level and hits the second (the L2 TLB fit)" } else { "more past the first TLB step" };
                self.n.note("costs.stlb_hit", format!("measured: {ns:.2} ns a load {how}"));
                cycles(ns, f)
            }
            _ => {
                self.n.note("costs.stlb_hit", b.not_measured());
                bc.stlb_hit
            }
        };
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
        let host_entry = c.virt.guest && self.virt_section && (host == "4K" || (host == "2M" && frames(&c.costs).is_some_and(|fr| fr.scattered())));
        k.walk = match c.overlap.walk.first().map(|p| p.y) {
            Some(ns) if ns > 0.0 => {
                let stlb = t.stlb_hit_ns.filter(|&n| n > 0.0).map_or(bc.stlb_hit, |n| cycles(n, f));
                let l2 = c.hierarchy.as_ref().map_or(b.profile.cache.l2.latency, |h| cycles(h.latency_ns[1], f));
                let host = match (host_entry, host.as_str()) {
                    (false, _) => "",
                    (true, "4K") => " and one for the host's entry for the page's frame (nested paging over 4 KB host pages)",
                    (true, _) => " and one for the host's entry for the page's frame (scattered frames, nested paging)",
                };
                self.n.note("costs.walk", format!("measured: {ns:.2} ns a load more over 8192 4 KB pages than over 2 MB pages (one chase, data in L2), less stlb_hit and an L2 hit for the page-table line{host}"));
                Some(cycles(ns, f).saturating_sub(stlb + l2 * (1 + host_entry as u32)))
            }
            _ => bc.walk.inspect(|_| self.n.note("costs.walk", b.not_measured())),
        };
        let zero = c.costs.zero_4k_ns.median;
        let fault = (c.costs.fault_4k_ns.median - zero).max(1.0);
        (k.fault, k.zero_4k, k.copy_4k, k.syscall) = (cycles(fault, f), cycles(zero, f), cycles(c.costs.copy_4k_ns.median, f), cycles(c.costs.syscall_ns.median, f));
        self.n.note("costs.fault", format!("measured: mmap + write + munmap of 4 KB pages, {:.0} ns a page, less the zeroing", c.costs.fault_4k_ns.median));
        self.n.note("costs.zero_4k", format!("measured: memset of a 4 KB page, {zero:.0} ns"));
        self.n.note("costs.copy_4k", format!("measured: memcpy of a 4 KB page, {:.0} ns", c.costs.copy_4k_ns.median));
        self.n.note("costs.syscall", format!("measured: getppid, {:.0} ns", c.costs.syscall_ns.median));
        let from_base = ["dirty_assist", "promotion", "demotion", "pt_page_alloc", "invlpg", "tlb_flush", "shootdown_ipi", "context_switch", "pageout_scan", "swap_out_4k", "swap_in_4k"];
        for key in from_base.into_iter().chain(bc.pmap_fault.map(|_| "pmap_fault")) {
            self.n.note(&format!("costs.{key}"), b.not_measured());
        }
        k
    }

    /// A stream prefetcher, where the sequential copy was measured.
    fn prefetch(&mut self) -> Option<Prefetch> {
        let (c, f) = (self.c, self.f);
        let line = c.costs.stream_line_ns.median;
        if line <= 0.0 {
            return None;
        }
        self.n.note("prefetch.streams", "not measured: Intel's L2 streamer follows 32 pages (Intel 64 and IA-32 Architectures Optimization Reference Manual)");
        self.n.note("prefetch.distance", "not measured: it runs up to 20 lines ahead (same manual)");
        self.n.note("prefetch.line_cycles", format!("measured: sequential copy of {} by one core, {line:.2} ns a line read or written", size::show(c.costs.stream_bytes)));
        let reads: Vec<f64> = c.costs.read_streams_ns.iter().map(|s| s.median).collect();
        let mut line_cycles_by_streams = Vec::new();
        if !reads.is_empty() && reads.iter().all(|&ns| ns > 0.0 && ns.is_finite()) {
            let ns: Vec<String> = reads.iter().map(|ns| format!("{ns:.2}")).collect();
            self.n.note(
                "prefetch.line_cycles_by_streams",
                format!("measured: 1 to {} sequential read streams at once over {}, {} ns a line (used instead of line_cycles)", reads.len(), size::show(c.costs.stream_bytes), ns.join(", ")),
            );
            line_cycles_by_streams = reads.iter().map(|ns| rounded(ns * f, 2)).collect();
        }
        let next_page = next_page(&c.costs).is_some_and(|n| {
            let follows = if n.follows() { ": streams go on across the edges of contiguous frames" } else { "" };
            self.n.note("prefetch.next_page", format!("measured: the 4 KB pages of 2 MB pages read whole in address order, {:.2} ns a line, in a random order {:.2} ({:+.1}%){follows}", n.in_order_ns, n.shuffled_ns, 100.0 * n.gain()));
            self.n.keep("prefetch.next_page", n.follows());
            n.follows()
        });
        Some(Prefetch { streams: 32, distance: 20, line_cycles: rounded(line * f, 2), line_cycles_by_streams, next_page })
    }

    /// On a guest, nested paging and the host's page size; with
    /// `--no-virt-section`, the same as comments after the costs.
    fn virt(&mut self) -> Option<VirtConfig> {
        let c = self.c;
        if !c.virt.guest {
            return None;
        }
        let (page, why, assumed) = host_page_choice(c);
        let nested = format!("{}; hardware virtualisation on x86-64 uses EPT/NPT (assumed: not visible from the guest)", c.virt.signs().join(", "));
        let host_page = format!("{}{why}", if assumed { "ASSUMED, not measured: " } else { "inferred: " });
        if !self.virt_section {
            self.n.lines_after(
                "costs.swap_in_4k",
                vec![
                    String::new(),
                    "# A hypervisor was detected; --no-virt-section left the [virt] section as".into(),
                    "# comments, so the model walks page tables as on bare metal.".into(),
                    "# [virt]".into(),
                    format!("# nested = true   # {nested}"),
                    format!("# host_page = \"{page}\"   # {host_page}"),
                ],
            );
            return None;
        }
        self.n.note("virt.nested", nested);
        self.n.note("virt.host_page", host_page);
        self.n.note("virt.ntlb_entries", "not measured: the model's nested TLB as it comes");
        Some(VirtConfig { nested: true, host_page: page, ..VirtConfig::default() })
    }

    /// The core: what the probes measured of it (its width, window,
    /// misses and walks in flight, misprediction penalty, the long
    /// operations' latencies), the rest (queues, the predictor) from the
    /// base profile.
    fn core(&mut self) -> Core {
        let (c, b, f) = (self.c, self.b, self.f);
        let (ov, bc) = (&c.overlap, &b.profile.core);
        let mut k = bc.clone();
        let co = &c.core;
        match co.width {
            Some(w) => {
                self.n.note("core.width", format!("measured: {w:.2} instructions a cycle, the best of loops of 4 to 12 independent chains of additions (one cycle each)"));
                k.width = rounded(w, 1).max(1.0);
            }
            None => self.n.note("core.width", b.not_measured()),
        }
        match &ov.window_fit {
            Some(w) => {
                let loops: Vec<String> = ov.window.iter().map(|p| format!("{} {:.2}", p.shape, p.ns.median)).collect();
                self.n.note(
                    "core.rob",
                    format!(
                        "measured: loops of independent misses over {} (2 MB pages), ns a miss: {}; instructions one chase's latency over the same lines ({:.1} ns) holds, from the nop loops' slope",
                        size::show(2 * c.costs.stream_bytes),
                        loops.join(", "),
                        w.latency_ns
                    ),
                );
                k.rob = (w.entries.round() as u32).max(1);
            }
            None => self.n.note("core.rob", b.not_measured()),
        }
        self.n.note("core.load_queue", b.not_measured());
        self.n.note("core.store_queue", b.not_measured());
        match ov.data_mlp {
            Some(m) => {
                self.n.note("core.mshrs", format!("measured: best speedup of k independent chases over memory over one, {m:.2}, to the nearest whole"));
                k.mshrs = (m.round() as u32).max(1);
            }
            None => self.n.note("core.mshrs", b.not_measured()),
        }
        match ov.walk_mlp {
            Some(m) => {
                let one = ov.walk.first().map_or(0.0, |p| p.y);
                let why = match ov.walk_loads_ns {
                    Some(x) if ov.walk_mlp_from_loads => format!("a walk alone (one chase over 8192 4 KB pages, data in L2) {one:.2} ns, over what walks add to independent loads of the same lines, {x:.2} ns"),
                    _ => format!("a walk alone (one chase over 8192 4 KB pages, data in L2) {one:.2} ns, over what walks add with {} chases at once", ov.walk.last().map_or(0.0, |p| p.x)),
                };
                // The model takes a walker once the second level's lookup
                // has missed and holds it to the walk's end: of the walk
                // alone, the lookup keeps none, so the walks in flight that
                // the probe's pace gives hold a walker for that much less.
                let lookup = c.tlb.stlb_hit_ns.filter(|&n| n > 0.0 && n < one);
                let held = match lookup {
                    Some(l) => m * (one - l) / one,
                    None => m,
                };
                let less = match lookup {
                    Some(l) => format!("; a walker is held for the walk less the second-level TLB's lookup ({l:.2} ns), so {held:.2} walkers"),
                    None => String::new(),
                };
                self.n.note("core.walkers", format!("measured: {why}: {m:.2} at once{less}, to the nearest whole"));
                k.walkers = (held.round() as u32).max(1);
            }
            None => self.n.note("core.walkers", b.not_measured()),
        }
        match ov.slot_fit.as_ref().and_then(|fit| Some((fit.far_reads_free()?, fit))) {
            Some((free, fit)) => {
                k.far_walk_reads_in_mshrs = free;
                self.n.keep("core.far_walk_reads_in_mshrs", free);
                self.n.note(
                    "core.far_walk_reads_in_mshrs",
                    format!(
                        "measured: {} chases over every line of 4 KB pages (a walk and a data miss each) took {:.2} ns a load; walkers held to the walks' end predict {:.2}, walkers free while a walk reads beyond L2 {}",
                        fit.chases,
                        fit.measured_ns,
                        fit.held_ns,
                        fit.released()
                    ),
                );
            }
            None => {
                self.n.keep("core.far_walk_reads_in_mshrs", k.far_walk_reads_in_mshrs);
                self.n.note("core.far_walk_reads_in_mshrs", b.not_measured());
            }
        }
        match co.mispredict_ns {
            Some(ns) => {
                self.n.note("core.mispredict", format!("measured: a loop of a branch on random bits took {ns:.2} ns more a branch than the same loop on constant bits, at half of them mispredicted: twice that"));
                k.mispredict = rounded(2.0 * ns * f, 1);
            }
            None => self.n.note("core.mispredict", b.not_measured()),
        }
        let lat = [("mul", co.mul_ns), ("div", co.div_ns)];
        for (key, ns) in lat {
            match ns {
                Some(ns) => {
                    let what = if key == "mul" { "64-bit multiplies (imul)" } else { "64-bit divides (div)" };
                    self.n.note(&format!("core.latency.{key}"), format!("measured: a chain of dependent {what}, {ns:.2} ns each"));
                    let cyc = rounded(ns * f, 1);
                    if key == "mul" {
                        k.latency.mul = cyc;
                    } else {
                        k.latency.div = cyc;
                    }
                }
                None => self.n.note(&format!("core.latency.{key}"), b.not_measured()),
            }
        }
        for key in ["alu", "fp_add", "fp_mul", "fp_div"] {
            self.n.note(&format!("core.latency.{key}"), b.not_measured());
        }
        self.n.note("core.predictor", format!("{} (a predictor's kind and size cannot be measured from user space)", b.not_measured()));
        k
    }

    /// What the quick memory probes read, for validate to compare with.
    fn reference(&mut self) -> Option<Reference> {
        let c = self.c;
        let r = c.reference.as_ref()?;
        self.n.note(
            "reference",
            format!("measured: quick probes of this host's memory that splab validate runs again, to see how far the memory moved since (medians of {} rounds); the model does not read them, and validate runs it on this profile moved by the first three", c.plan.rounds),
        );
        self.n.note("reference.chase_ns", "a dependent load, one random chase over every line of 64 MB of 2 MB pages");
        self.n.note("reference.chases_ns", "a load, 32 such chases at once");
        self.n.note("reference.copy_ns", "a line read or written, copying 64 MB");
        if r.cache_chase_ns.is_some() {
            self.n.note("reference.cache_chase_ns", "a dependent load, one random chase over 16 MB (in the last-level cache's range: it moves with how much of that cache other tenants take; validate reports it, and does not apply it)");
        }
        Some(Reference { chase_ns: rounded(r.chase_ns, 2), chases_ns: rounded(r.chases_ns, 3), copy_ns: rounded(r.copy_ns, 3), cache_chase_ns: r.cache_chase_ns.map(|ns| rounded(ns, 2)) })
    }
}

/// How a level's latency (or memory's, `memory`) was read.
pub(crate) fn method(h: &crate::infer::Hierarchy, memory: bool) -> String {
    let how = match (h.method.as_str(), memory) {
        ("reported sizes", false) => "median of the latency curve inside the level",
        ("reported sizes", true) => "median of the latency curve past the last level",
        ("plateaus", false) => "median of the latency curve inside the level, the levels placed by its steps",
        ("plateaus", true) => "plateau of the latency curve past its last step",
        ("plateaus, a shared last level", false) => "median of the latency curve inside the level, the levels placed by its steps (the last one well below the size CPUID reports: a shared cache of which this machine gets that much)",
        ("plateaus, a shared last level", true) => "plateau of the latency curve past its last step (well below the last level's reported size: a shared cache of which this machine gets part)",
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

    fn toml(c: &Calibration, b: &Base, name: &str, virt_section: bool) -> String {
        write(c, b, name, virt_section).unwrap_or_else(|e| panic!("{e}")).text
    }

    fn tiny() -> (Calibration, Base) {
        let c = measure::run(&Plan::tiny(), &mut |_, _, _| {}).unwrap();
        (c, Base::named("sapphire-rapids").unwrap())
    }

    #[test]
    fn a_calibrated_profile_parses_and_marks_what_it_did_not_measure() {
        let (mut c, base) = tiny();
        let text = toml(&c, &base, "calibrated-test", false);
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
        let commented = toml(&c, &base, "g", false);
        assert!(commented.contains("# [virt]\n# nested = true"), "{commented}");
        assert!(Profile::parse(&commented, "g").unwrap().nested().is_none());
        let real = toml(&c, &base, "g", true);
        assert!(real.contains("\n[virt]\nnested = true") && real.contains("host_page = \""), "{real}");
        let p = Profile::parse(&real, "g").unwrap_or_else(|e| panic!("{e}\n{real}"));
        assert!(p.nested().is_some(), "{real}");
        // The quick memory probes need more than the tiny plan's 16 MB
        // region; where they ran, the profile keeps what they read.
        assert_eq!((c.reference, p.reference), (None, None));
        let r = splab_hw::profile::Reference { chase_ns: 151.25, chases_ns: 5.75, copy_ns: 2.125, cache_chase_ns: Some(31.5) };
        c.reference = Some(r);
        let text = toml(&c, &base, "g", true);
        assert!(text.contains("\n[reference]   # measured: quick probes") && text.contains("chases_ns = 5.75   # a load, 32 such chases at once") && text.contains("cache_chase_ns = 31.5   # a dependent load"), "{text}");
        assert_eq!(Profile::parse(&text, "g").unwrap().reference, Some(r));
    }

    /// The window's loops run (on x86-64, where they are written), and a
    /// fitted window is the core's reorder buffer with the loops it came
    /// from; a calibration without one keeps the base profile's.
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
        let text = toml(&c, &base, "t", false);
        assert!(text.contains(&format!("rob = {}   # not measured: from sapphire-rapids.toml", base.profile.core.rob)), "{text}");
        c.overlap.window_fit = Some(WindowFit { latency_ns: 177.8, entries: 438.25, per_miss: 6.59, per_store: 2.4 });
        let text = toml(&c, &base, "t", false);
        assert!(text.contains("rob = 438   # measured: loops of independent misses") && text.contains("(177.8 ns)"), "{text}");
        let p = Profile::parse(&text, "t").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(p.core.rob, 438);
        assert!(report::text(&c, &base).contains("the core's window: 438 instructions over one chase's latency (177.8 ns); a miss takes 6.6 more, a store 2.4 more"));
    }

    /// The core probes go into `[core]` in cycles at the measured clock:
    /// the width, the misprediction penalty (twice the half the random
    /// branches cost), the multiply and divide latencies.
    #[test]
    fn the_core_probes_go_into_the_core() {
        let (mut c, base) = tiny();
        c.clock_ghz = splab_native::suite::Spread::of(&[2.0]);
        c.core = measure::CoreProbes { width: Some(3.96), mul_ns: Some(1.5), div_ns: Some(7.0), mispredict_ns: Some(4.5) };
        let text = toml(&c, &base, "t", false);
        let p = Profile::parse(&text, "t").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!((p.core.width, p.core.mispredict, p.core.latency.mul, p.core.latency.div), (4.0, 18.0, 3.0, 14.0));
        assert!(text.contains("mispredict = 18.0   # measured: a loop of a branch on random bits"), "{text}");
        assert_eq!(p.core.predictor, base.profile.core.predictor);
        let report = report::text(&c, &base);
        assert!(
            report.contains("  core          3.96 instructions a cycle (the best loop of independent chains of additions); a mispredicted branch 9.00 ns (18.0 cycles; a branch on random bits 4.50 ns over one on constant bits); 64-bit multiply 1.50 ns, divide 7.00 ns"),
            "{report}"
        );
    }

    /// The walkers' comment says which loads they came from, with the two
    /// extras, and the profile takes the value to the nearest whole.
    #[test]
    fn walk_mlp_says_which_loads_it_came_from() {
        use crate::infer::Point;
        let (mut c, base) = tiny();
        c.tlb.stlb_hit_ns = None;
        let ov = &mut c.overlap;
        ov.walk = vec![Point { x: 1.0, y: 19.2, iqr: 0.0 }, Point { x: 16.0, y: 6.0, iqr: 0.0 }];
        (ov.walk_loads_ns, ov.walk_mlp, ov.walk_mlp_chases, ov.walk_mlp_from_loads) = (Some(9.6), Some(2.0), Some(3.2), true);
        let text = toml(&c, &base, "t", false);
        let line = "walkers = 2   # measured: a walk alone (one chase over 8192 4 KB pages, data in L2) 19.20 ns, over what walks add to independent loads of the same lines, 9.60 ns: 2.00 at once";
        assert!(text.contains(line), "{text}");
        assert_eq!(Profile::parse(&text, "t").unwrap().core.walkers, 2);
        (c.overlap.walk_mlp, c.overlap.walk_mlp_from_loads) = (Some(3.2), false);
        let text = toml(&c, &base, "t", false);
        assert!(text.contains("walkers = 3   # measured: a walk alone (one chase over 8192 4 KB pages, data in L2) 19.20 ns, over what walks add with 16 chases at once"), "{text}");
    }

    /// A walker is held for the walk less the second-level TLB's lookup:
    /// the walks in flight the probe's pace gives are scaled by that
    /// share. The recorded probes of an Intel Emerald Rapids guest (a
    /// walk alone 15.78 ns, 7.30 ns more a load with independent loads,
    /// a lookup 3.08 ns) and of this project's AMD Zen 4 guest (27.42,
    /// 4.60 and 2.00 ns; docs/calibration.md) keep their 2 and 6 walkers.
    #[test]
    fn walkers_hold_the_walk_less_the_second_level_lookup() {
        use crate::infer::Point;
        let (mut c, base) = tiny();
        for (one, loads, lookup, walkers, held) in [(15.78, 7.30, 3.08, 2, "1.74 walkers"), (27.42, 4.60, 2.00, 6, "5.53 walkers")] {
            c.tlb.stlb_hit_ns = Some(lookup);
            let ov = &mut c.overlap;
            ov.walk = vec![Point { x: 1.0, y: one, iqr: 0.0 }, Point { x: 16.0, y: one / 4.0, iqr: 0.0 }];
            (ov.walk_loads_ns, ov.walk_mlp, ov.walk_mlp_from_loads) = (Some(loads), Some(one / loads), true);
            let text = toml(&c, &base, "t", false);
            let line = format!("the walk less the second-level TLB's lookup ({lookup:.2} ns), so {held}, to the nearest whole");
            assert!(text.contains(&line), "{line}\n{text}");
            assert_eq!(Profile::parse(&text, "t").unwrap().core.walkers, walkers);
        }
    }

    /// The walks-with-misses probe sets `far_walk_reads_in_mshrs`, with
    /// its numbers in the comment and the report's line, where it told
    /// the two apart; where it did not, the base profile's value is
    /// written, said to be from it.
    #[test]
    fn far_walk_reads_come_from_the_walks_with_misses_probe() {
        use crate::infer::SlotFit;
        let (mut c, base) = tiny();
        c.overlap.slot_fit = Some(SlotFit { chases: 16, measured_ns: 16.03, held_ns: 33.78, released_ns: Some(15.30) });
        let text = toml(&c, &base, "t", false);
        let line = "far_walk_reads_in_mshrs = true   # measured: 16 chases over every line of 4 KB pages (a walk and a data miss each) took 16.03 ns a load; walkers held to the walks' end predict 33.78, walkers free while a walk reads beyond L2 15.30";
        assert!(text.contains(line), "{text}");
        assert!(Profile::parse(&text, "t").unwrap().core.far_walk_reads_in_mshrs);
        assert!(report::text(&c, &base).contains("16.03 ns a load; walkers held to the walks' end predict 33.78, free while a walk reads beyond L2 15.30 (the second is closer: far walk reads wait in line-fill buffers)"));
        // Predictions within a tenth of the measurement of each other.
        c.overlap.slot_fit = Some(SlotFit { chases: 16, measured_ns: 16.03, held_ns: 33.78, released_ns: Some(33.0) });
        let text = toml(&c, &base, "t", false);
        assert!(text.contains(&format!("far_walk_reads_in_mshrs = {}   # {}", base.profile.core.far_walk_reads_in_mshrs, base.not_measured())), "{text}");
        assert!(report::text(&c, &base).contains("(too close to tell: as the base profile)"));
    }

    /// The profile's header and the report say how many chases and loads
    /// were timed again for being off the CPU, and nothing where none were.
    #[test]
    fn samples_timed_again_are_counted_in_the_header_and_the_report() {
        let (mut c, base) = tiny();
        c.noise.taken_again = 0;
        assert!(!toml(&c, &base, "t", false).contains("timed again"));
        assert!(!report::text(&c, &base).contains("timed again"));
        (c.noise.taken_again, c.noise.set_aside) = (3, 4);
        let text = toml(&c, &base, "t", false);
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
            let text = toml(c, &base, "t", virt);
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
            let text = toml(c, &base, "t", false);
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
            let text = toml(c, &base, "t", false);
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
        let text = toml(&c, &base, "t", false);
        assert!(text.contains("writeback_ns = 2.5   # measured"), "{text}");
        assert_eq!(Profile::parse(&text, "t").unwrap().memory.writeback_ns, Some(2.5));
        c.costs.read_streams_ns[1] = Spread::of(&[8.0]).unwrap();
        let w = writeback(&c.costs).unwrap();
        assert_eq!((w.ns, w.clamped), (0.0, true));
        assert!(toml(&c, &base, "t", false).contains("(the copy ran faster: 0)"));
        c.costs.read_streams_ns.truncate(1);
        assert_eq!(writeback(&c.costs), None);
        assert!(!toml(&c, &base, "t", false).contains("writeback_ns"));
    }

    /// The stores' overlap the report gives is the misses' scaled by loads
    /// over stores where stores are the slower (the core's store queue,
    /// not a factor, bounds them in the model).
    #[test]
    fn stores_overlap_is_data_overlap_scaled_by_loads_over_stores() {
        use crate::figures::stores;
        use splab_native::suite::Spread;
        let (mut c, _) = tiny();
        c.costs.random_load_ns = Spread::of(&[16.0]);
        c.costs.random_store_ns = Spread::of(&[32.0]);
        assert_eq!(stores(&c, 10.0), Some(Stores { load_ns: 16.0, store_ns: 32.0, mlp: Some(5.0) }));
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
