//! Machine profiles: a TOML file naming a real machine and giving the sizes
//! and latencies of its TLBs, page-walk caches, caches and memory, and the
//! cycle costs of kernel events. Built-in profiles are compiled in; any
//! other is read from a path.

use crate::cache::CacheConfig;
use crate::mmu::AdUpdate;
use crate::nested::VirtConfig;
use crate::pwc::PwcLevelConfig;
use crate::tlb::TlbArrayConfig;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Caches {
    /// The first-level instruction cache: the core fetches each block's
    /// code lines through it (and the second-level TLB's instruction side).
    pub l1i: CacheConfig,
    pub l1d: CacheConfig,
    pub l2: CacheConfig,
    pub l3: CacheConfig,
    /// The first of the model's cache levels (1, 2 or 3) that the
    /// hardware walker's reads of page-table entries look up, or 4 for
    /// none: how the operating system set up its tables decides it. 1
    /// where walks are coherent with the first-level data cache; on an
    /// ARMv7 core whose walks are not (ID_MMFR3.CohWalk = 0), FreeBSD's
    /// pmap-v6 marks the tables inner non-cacheable, outer write-back in
    /// TTBR, so the walker reads the outer cache only; 4 where TTBR says
    /// inner and outer non-cacheable, so every walk reference reads
    /// memory and no cache holds page-table entries for the walker.
    /// Absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk_level: Option<u8>,
    /// Whether the last level (`l3`) is write-through: a line a store
    /// dirtied goes to memory when the core's own levels drop it (the
    /// second level evicts it), and the last level only ever holds clean
    /// copies, rather than when the last level evicts it. Where the
    /// operating system forces it, as FreeBSD does on the Armada XP's
    /// shared L2. Absent: false (write-back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_level_write_through: Option<bool>,
    /// The line size in bytes, the same at every level (each level's
    /// `size_kb` and `ways` stay as given, so a longer line means fewer
    /// sets): 32 (the Armada XP's), 64, or 128 (POWER8's and POWER9's).
    /// With 32-byte lines the workloads' line-at-a-time loops step a line
    /// of the machine's (`line_step`), and a trace's references, the
    /// kernel's 64-byte copy words and the tool's 64-byte code granules
    /// are made on each line they cover. Not below 32: the bandwidth
    /// loops' 16-byte word steps would then be line steps; not above 128:
    /// the simulator keeps a run of accesses within one line as a byte
    /// step (an i8). Absent: 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_bytes: Option<u64>,
}

/// `Caches::walk_level` for walks that read memory and look up no cache
/// (TTBR's walk attributes non-cacheable).
pub const WALK_MEMORY: u8 = 4;

impl Caches {
    /// `walk_level`, 1 when absent.
    pub fn walk_level(&self) -> u8 {
        self.walk_level.unwrap_or(1)
    }

    /// `last_level_write_through`, false when absent.
    pub fn last_level_write_through(&self) -> bool {
        self.last_level_write_through.unwrap_or(false)
    }

    /// log2 of `line_bytes` (6, 64 bytes, when absent).
    pub fn line_shift(&self) -> u32 {
        self.line_bytes.map_or(crate::cache::LINE_SHIFT, |b| b.trailing_zeros())
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub dram_latency_ns: f64,
    /// Time a dirty line costs when the last-level cache evicts it and
    /// writes it back to memory, as an independent access sees it (the
    /// write is buffered: a dependent one does not wait for it). Absent:
    /// writebacks are not charged, and lines are not tracked as dirty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writeback_ns: Option<f64>,
    /// Peak bandwidth of the memory interface in GB/s (10^9 bytes a
    /// second): its transfer rate times its width, from the memory
    /// controller's datasheet (DDR3-1600 on a 64-bit bus: 12.8). Every
    /// line a reference moves between the last-level cache and memory
    /// (its fill, and the writeback of a dirty line the fill evicts)
    /// holds the interface for a line's time at this rate, so an
    /// independent reference costs at least that time for each: a stream
    /// whose misses overlap faster than the interface carries its fills
    /// and writebacks runs at the interface's rate, and one that waits on
    /// latency (fewer misses in flight than the interface could carry)
    /// hides its writebacks in the interface's idle time. A dependent
    /// reference waits its latency, which is longer. The bound is per
    /// CPU: several CPUs' streams do not yet share one interface. Absent:
    /// the interface bounds nothing, and lines are not tracked as dirty
    /// for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_gbs: Option<f64>,
    /// The state of the host's free memory rather than its hardware: the
    /// fraction of free 2 MB blocks the model ages at boot (half their
    /// frames held by others, the rest free runs of `aged_run` frames
    /// given out in no address order), so that 4 KB pages get scattered
    /// frames, as on a
    /// host that has run for a while, and superpages come from the other
    /// blocks. Scattered frames crowd some colours of a physically indexed
    /// cache and break the physical runs a prefetcher may follow. Absent:
    /// a freshly booted machine, whose 4 KB pages come from large free
    /// blocks, close together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aged: Option<f64>,
    /// The runs an aged block's free memory lies in, in base pages (a
    /// power of two): each aligned pair of runs has one held by others
    /// and one free, so 4 KB pages come this many in a row from scattered
    /// places. Absent: 1, single frames, never two adjacent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aged_run: Option<u32>,
}

/// `[prefetch]`: a hardware stream prefetcher of the kind that watches
/// second-level cache misses within each 4 KB physical page (Intel's L2
/// streamer; Arm's and AMD's are alike) and, once two misses in a page
/// step the same way, fetches the lines ahead of the stream, so that the
/// stream runs at the memory's sequential rate instead of its latency
/// (across a page's edge into the adjacent frame too, with `next_page`).
/// Absent: no prefetcher.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Prefetch {
    /// 4 KB pages tracked at once (least recently used replaced).
    pub streams: usize,
    /// Lines ahead of the last miss a stream covers.
    #[serde(default = "default_prefetch_distance")]
    pub distance: u32,
    /// Core cycles per line of a sequential stream at the memory's rate
    /// (line bytes / sequential bandwidth of one core): what a covered
    /// miss costs, unless the caches would have answered sooner.
    pub line_cycles: f64,
    /// Core cycles per line when k streams are followed at once, the k-th
    /// value (the last for more): each stream keeps only so many lines in
    /// flight, so one stream alone runs slower than several together until
    /// they reach the core's limit. Empty: `line_cycles` however many.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub line_cycles_by_streams: Vec<f64>,
    /// Whether a stream that runs off the end of a 4 KB page goes on into
    /// the physically next page without starting over (two misses to
    /// learn its direction). Where it does, memory whose frames are
    /// contiguous (2 MB pages, a freshly booted machine's 4 KB pages)
    /// streams without a restart at each 4 KB page, and scattered 4 KB
    /// frames restart at every one. Absent or false: every page starts over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub next_page: bool,
}

impl Prefetch {
    /// Cycles per line with `k` (at least 1) streams followed at once.
    pub fn line_cycles_at(&self, k: usize) -> f64 {
        match self.line_cycles_by_streams.len() {
            0 => self.line_cycles,
            n => self.line_cycles_by_streams[k.clamp(1, n) - 1],
        }
    }
}

fn default_prefetch_distance() -> u32 {
    16
}

/// Cycle costs of events that are not plain memory references.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    pub stlb_hit: u32,
    pub dirty_assist: u32,
    pub fault: u32,
    pub zero_4k: u32,
    pub copy_4k: u32,
    pub promotion: u32,
    pub demotion: u32,
    pub pt_page_alloc: u32,
    pub invlpg: u32,
    pub tlb_flush: u32,
    pub shootdown_ipi: u32,
    pub syscall: u32,
    pub context_switch: u32,
    /// A page fault the pmap resolves alone, by setting an accessed or
    /// dirty bit (FreeBSD's riscv pmap_fault): trap entry and exit, one
    /// PTE update, a local SFENCE.VMA. Defaults to `fault`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmap_fault: Option<u32>,
    /// What a walk costs beyond the latencies of its memory references,
    /// charged on every walk after a second-level TLB miss: a hardware
    /// walker's own pipeline, its lookups of the paging-structure caches
    /// and under a hypervisor the nested TLB's; on machines without a
    /// hardware walker, the trap into the software that handles the miss
    /// (the Alpha's PALcode TB-miss handler). Absent: 0. `walk_trap` is
    /// read as another name for it.
    #[serde(default, alias = "walk_trap", skip_serializing_if = "Option::is_none")]
    pub walk: Option<u32>,
    /// What a promotion attempt that fails costs per base-page mapping it
    /// examined before it found the one that stops it (a PVO tree step
    /// and its checks on powerpc64, moea64_sp_promote). Absent: 0, a
    /// failed attempt costs nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion_scan: Option<u32>,
    /// Page daemon work per page it examines (queue move, reference and
    /// dirty tests through the pmap).
    #[serde(default = "default_pageout_scan")]
    pub pageout_scan: u32,
    /// CPU work to write one 4 KB page to swap or back to its file (the
    /// write itself proceeds asynchronously, as FreeBSD's laundry does).
    #[serde(default = "default_swap_out_4k")]
    pub swap_out_4k: u32,
    /// A fault's wait for one 4 KB page read from swap (device latency
    /// plus the kernel's work).
    #[serde(default = "default_swap_in_4k")]
    pub swap_in_4k: u32,
}

impl Costs {
    /// Cycles of a fault resolved by the pmap alone.
    pub fn pmap_fault_cycles(&self) -> u32 {
        self.pmap_fault.unwrap_or(self.fault)
    }
}

// Defaults for profiles written before page-out existed: the Sapphire
// Rapids figures (3 GHz; an NVMe random 4 KB read of about 80 us).
fn default_pageout_scan() -> u32 {
    250
}
fn default_swap_out_4k() -> u32 {
    9000
}
fn default_swap_in_4k() -> u32 {
    240000
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// The architecture this machine is (amd64, riscv, ...).
    pub arch: String,
    /// Who sets accessed and dirty bits: "hardware" (the walker) or
    /// "fault" (the walker page-faults and the OS sets them). Absent means
    /// the architecture's baseline: hardware on amd64; fault on riscv,
    /// whose privileged spec lets hardware fault until Svadu.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ad_update: Option<AdUpdate>,
    pub freq_ghz: f64,
    pub cpus: usize,
    pub tlb: Vec<TlbArrayConfig>,
    pub pwc: Vec<PwcLevelConfig>,
    pub cache: Caches,
    pub memory: Memory,
    pub costs: Costs,
    /// `[virt]`: the machine is a guest under a hypervisor (nested
    /// paging, the host page size). Absent means native.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virt: Option<VirtConfig>,
    /// `[prefetch]`: a stream prefetcher. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<Prefetch>,
    /// `[reference]`: what calibrate's quick memory probes read (see
    /// `Reference`). Absent: a profile not written by calibrate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Reference>,
    /// `[core]`: the core the interval model runs instruction streams on.
    pub core: Core,
}

/// `[core]`: the core's microarchitecture, as the interval model
/// (`splab_sim::core`) runs every instruction stream on it: between miss
/// events instructions dispatch at `width` a cycle into a window of `rob`
/// entries, slowed by the dependences the stream states; a mispredicted
/// branch, a fetch that misses, and a long load or walk at the window's
/// head cost what they cost there, and misses within the window's reach
/// of each other overlap, up to `mshrs` (and `walkers`) at once.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Core {
    /// Instructions dispatched into the window a cycle, at most.
    pub width: f64,
    /// Reorder-buffer entries: instructions in flight.
    pub rob: u32,
    /// Loads in flight (load-queue entries): a load holds one from
    /// dispatch until it retires.
    pub load_queue: u32,
    /// Stores not yet written to the first-level cache: a store holds
    /// one from dispatch until it drains, in program order, after it
    /// retires and once its line is owned.
    pub store_queue: u32,
    /// First-level data-cache misses in flight (line-fill buffers): a
    /// miss holds one from its issue until its line arrives.
    pub mshrs: u32,
    /// Hardware page walks in flight (1 where software walks).
    pub walkers: u32,
    /// A walk's page-table reads from beyond the second-level cache wait
    /// in a line-fill buffer (one of `mshrs`), as a data miss does, and
    /// leave its walker free for another walk meanwhile: a walker is held
    /// only for the walk's lookups and its reads up to the second level.
    /// Calibrate's chases that walk and miss at once tell the two apart
    /// (docs/calibration.md). False (the default): a walker is held to
    /// its walk's end, whatever its reads wait for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub far_walk_reads_in_mshrs: bool,
    /// A TLB miss traps to a software handler (Alpha's PALcode): the
    /// pipeline aborts at the missing reference and the instructions
    /// after it are fetched again once the handler returns, so nothing
    /// younger dispatches while it runs and no later miss overlaps it.
    /// False (the default): a hardware walker translates while the
    /// window goes on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub walk_traps: bool,
    /// Cycles a mispredicted branch costs once its operands are ready:
    /// the front end's refill, as published measurements give it. A
    /// branch that waits on a slow operand resolves later and costs more.
    pub mispredict: f64,
    /// Latencies of the operations whose chains the stream states.
    pub latency: Latency,
    /// The branch predictor.
    pub predictor: crate::bpred::PredictorConfig,
}

/// `[core.latency]`: cycles from operands ready to result.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    pub alu: f64,
    pub mul: f64,
    pub div: f64,
    pub fp_add: f64,
    pub fp_mul: f64,
    pub fp_div: f64,
}

/// The operations a dependence chain counts, in the order of
/// `Latency::by_class` (and of the class counts the instruction streams
/// carry, `splab_sim::block`).
pub const OP_CLASSES: [&str; 6] = ["alu", "mul", "div", "fp_add", "fp_mul", "fp_div"];

impl Latency {
    /// The latencies by class, in the order of `OP_CLASSES`.
    pub fn by_class(&self) -> [f64; 6] {
        [self.alu, self.mul, self.div, self.fp_add, self.fp_mul, self.fp_div]
    }
}

impl Core {
    fn validate(&self) -> Result<(), String> {
        if !(self.width >= 1.0 && self.width <= 64.0) {
            return Err(format!("core.width = {} is out of range (1 to 64 instructions a cycle)", self.width));
        }
        for (k, v, lo, hi) in [
            ("rob", self.rob, 1, 65536),
            ("load_queue", self.load_queue, 1, 65536),
            ("store_queue", self.store_queue, 1, 65536),
            ("mshrs", self.mshrs, 1, 1024),
            ("walkers", self.walkers, 1, 64),
        ] {
            if !(lo..=hi).contains(&v) {
                return Err(format!("core.{k} = {v} is out of range ({lo} to {hi})"));
            }
        }
        if !(0.0..=1000.0).contains(&self.mispredict) {
            return Err(format!("core.mispredict = {} is out of range (0 to 1000 cycles)", self.mispredict));
        }
        for (k, v) in OP_CLASSES.iter().zip(self.latency.by_class()) {
            if !(0.0..=1000.0).contains(&v) {
                return Err(format!("core.latency.{k} = {v} is out of range (0 to 1000 cycles)"));
            }
        }
        self.predictor.validate()
    }
}

/// `[reference]`: the host's memory as calibrate found it, by quick
/// probes that `splab validate` runs again around its native runs
/// (`splab_calibrate::reference`), to see how far the host's
/// memory moved since. The model itself does not read it; validate runs
/// it on the profile moved by the first three (`Profile::moved`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// ns a dependent load, one random chase over every line of 64 MB
    /// of 2 MB pages.
    pub chase_ns: f64,
    /// ns a load, 32 such chases at once.
    pub chases_ns: f64,
    /// ns a line read or written, copying 64 MB.
    pub copy_ns: f64,
    /// ns a dependent load, one random chase over 16 MB: about the reach
    /// of the last-level cache a guest gets of a shared one, so it moves
    /// with how much of that cache other tenants take. Reported, not
    /// applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_chase_ns: Option<f64>,
}

impl Reference {
    /// How `now` compares with `self`, figure by figure: now over then
    /// (below 1: faster now). None where a figure is not positive.
    pub fn ratios(&self, now: &Reference) -> Option<[f64; 3]> {
        let r = [now.chase_ns / self.chase_ns, now.chases_ns / self.chases_ns, now.copy_ns / self.copy_ns];
        r.iter().all(|x| x.is_finite() && *x > 0.0).then_some(r)
    }
}

/// Whether `text` has what only an older calibrate's profiles have: an
/// `[overlap]` section or a `[core]` of one flat price per instruction.
fn written_by_older_calibrate(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("[overlap]") || l.starts_with("cycles_per_instruction")
    })
}

/// Profiles compiled into the binary, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("sapphire-rapids", include_str!("../../../profiles/sapphire-rapids.toml")),
    ("sifive-u74", include_str!("../../../profiles/sifive-u74.toml")),
    ("armada-xp", include_str!("../../../profiles/armada-xp.toml")),
    ("neoverse-n1", include_str!("../../../profiles/neoverse-n1.toml")),
    ("power8", include_str!("../../../profiles/power8.toml")),
    ("power9", include_str!("../../../profiles/power9.toml")),
    ("alpha-21264", include_str!("../../../profiles/alpha-21264.toml")),
    ("intel-haswell-ex", include_str!("../../../profiles/intel-haswell-ex.toml")),
    ("intel-cascade-lake", include_str!("../../../profiles/intel-cascade-lake.toml")),
    ("intel-emerald-rapids", include_str!("../../../profiles/intel-emerald-rapids.toml")),
    ("cortex-a53", include_str!("../../../profiles/cortex-a53.toml")),
    ("ampere-altra", include_str!("../../../profiles/ampere-altra.toml")),
    ("amd-zen4", include_str!("../../../profiles/amd-zen4.toml")),
];

/// The profile used when neither a profile nor an architecture is named.
pub const DEFAULT_PROFILE: &str = "sapphire-rapids";

/// The built-in profile used for an architecture when only the
/// architecture is named (`--arch riscv`, `--arch arm64`, `--arch armv7`,
/// `--arch ppc64-hpt`).
pub const DEFAULT_FOR_ARCH: &[(&str, &str)] = &[
    ("amd64", "sapphire-rapids"),
    ("riscv", "sifive-u74"),
    ("arm64", "neoverse-n1"),
    ("armv7", "armada-xp"),
    ("powerpc64", "power9"),
    ("alpha", "alpha-21264"),
];

/// The default profile for machines of architecture `arch` (a profile's
/// `arch` value, e.g. "riscv" for both Sv39 and Sv48).
pub fn default_for_arch(arch: &str) -> Option<&'static str> {
    DEFAULT_FOR_ARCH.iter().find(|(a, _)| *a == arch).map(|(_, p)| *p)
}

impl Profile {
    /// Parses a profile from TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Profile, String> {
        let p: Profile = toml::from_str(text).map_err(|e| {
            let mut m = crate::profile_error::describe(text, origin, &e);
            if written_by_older_calibrate(text) {
                m.push_str(&format!("\n{origin} was written by an older splab calibrate (it has [overlap] or a flat cycles_per_instruction, not the interval core's [core]): `splab calibrate --upgrade {origin} -o NEW.toml` (with `--report` and the calibration's text report, if kept) makes a profile this splab loads"));
            }
            m
        })?;
        p.validate().map_err(|e| format!("machine profile {origin}: {e}"))?;
        Ok(p)
    }

    /// A built-in profile by name, or else a TOML file at that path.
    pub fn load(name_or_path: &str) -> Result<Profile, String> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Profile::parse(text, name_or_path);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            format!("machine profile {name_or_path:?}: not a built-in profile ({}) and not a readable file: {e}", names.join(", "))
        })?;
        Profile::parse(&text, name_or_path)
    }

    /// This profile with its memory moved as the reference probes found
    /// the host's moved (`Reference::ratios`: memory latency, overlapped
    /// random loads, streaming, each now over then): memory latency
    /// scaled by the first; the misses in flight (`core.mshrs`) by the
    /// first over the second (rounded, at least one), so that an
    /// overlapped miss costs about the second ratio; the prefetcher's line
    /// times and the writeback by the third, and the memory interface's
    /// rate by its inverse. Caches, TLBs, walks, the rest
    /// of the core and kernel costs stay as they are.
    pub fn moved(&self, [latency, overlapped, streaming]: [f64; 3]) -> Result<Profile, String> {
        let mut p = self.clone();
        p.memory.dram_latency_ns *= latency;
        let mshrs = (p.core.mshrs as f64 * latency / overlapped).round();
        if !(1.0..=1024.0).contains(&mshrs) {
            return Err(format!("machine profile {:?} with its memory moved by {latency:.3}, {overlapped:.3}, {streaming:.3}: core.mshrs would be {mshrs} (1 to 1024)", p.name));
        }
        p.core.mshrs = mshrs as u32;
        if let Some(w) = p.memory.writeback_ns.as_mut() {
            *w *= streaming;
        }
        if let Some(c) = p.memory.channel_gbs.as_mut() {
            *c /= streaming;
        }
        if let Some(f) = p.prefetch.as_mut() {
            f.line_cycles *= streaming;
            f.line_cycles_by_streams.iter_mut().for_each(|c| *c *= streaming);
        }
        p.validate().map_err(|e| format!("machine profile {:?} with its memory moved by {latency:.3}, {overlapped:.3}, {streaming:.3}: {e}", p.name))?;
        Ok(p)
    }

    fn validate(&self) -> Result<(), String> {
        if !(1..=WALK_MEMORY).contains(&self.cache.walk_level()) {
            return Err(format!("cache.walk_level = {} is out of range (1, 2 or 3, or {WALK_MEMORY} for memory)", self.cache.walk_level()));
        }
        if let Some(b) = self.cache.line_bytes {
            if b != 32 && b != 64 && b != 128 {
                return Err(format!("cache.line_bytes = {b} is not 32, 64 or 128"));
            }
        }
        if !(self.freq_ghz > 0.0 && self.freq_ghz < 100.0) {
            return Err(format!("freq_ghz = {} is out of range", self.freq_ghz));
        }
        if self.cpus == 0 || self.cpus > 256 {
            return Err(format!("cpus = {} is out of range (1..=256)", self.cpus));
        }
        self.core.validate()?;
        if let Some(w) = self.memory.writeback_ns {
            if !(0.0..10000.0).contains(&w) {
                return Err(format!("memory.writeback_ns = {w} is out of range (0 to 10000 ns)"));
            }
        }
        if let Some(c) = self.memory.channel_gbs {
            if !(0.1..=10000.0).contains(&c) {
                return Err(format!("memory.channel_gbs = {c} is out of range (0.1 to 10000 GB/s)"));
            }
        }
        if let Some(a) = self.memory.aged {
            if !(0.0..=1.0).contains(&a) {
                return Err(format!("memory.aged = {a} is out of range (0 to 1)"));
            }
        }
        if let Some(r) = self.memory.aged_run {
            if !r.is_power_of_two() || r > 256 {
                return Err(format!("memory.aged_run = {r} is not a power of two from 1 to 256 pages"));
            }
        }
        for c in [&self.cache.l1i, &self.cache.l1d, &self.cache.l2, &self.cache.l3] {
            crate::cache::Cache::new(c, self.cache.line_shift())?;
        }
        if let Some(v) = &self.virt {
            v.host_shift()?;
        }
        if let Some(p) = &self.prefetch {
            if !(1..=256).contains(&p.streams) {
                return Err(format!("prefetch.streams = {} is out of range (1..=256)", p.streams));
            }
            let page_lines = 4096u32 >> self.cache.line_shift();
            if !(1..=page_lines).contains(&p.distance) {
                return Err(format!("prefetch.distance = {} is out of range (1..={page_lines} lines, one 4 KB page)", p.distance));
            }
            if !(p.line_cycles > 0.0 && p.line_cycles < 10000.0) {
                return Err(format!("prefetch.line_cycles = {} is out of range (above 0, below 10000)", p.line_cycles));
            }
            if p.line_cycles_by_streams.len() > 64 {
                return Err(format!("prefetch.line_cycles_by_streams has {} values (at most 64)", p.line_cycles_by_streams.len()));
            }
            if let Some(x) = p.line_cycles_by_streams.iter().find(|&&x| !(x > 0.0 && x < 10000.0)) {
                return Err(format!("prefetch.line_cycles_by_streams holds {x}, out of range (above 0, below 10000)"));
            }
        }
        Ok(())
    }

    /// The `[virt]` section if it asks for nested paging.
    pub fn nested(&self) -> Option<&VirtConfig> {
        self.virt.as_ref().filter(|v| v.nested)
    }

    pub fn dram_cycles(&self) -> u32 {
        (self.memory.dram_latency_ns * self.freq_ghz).round() as u32
    }

    /// Core cycles a line holds the memory interface
    /// (`memory.channel_gbs`), if the profile gives its bandwidth.
    pub fn channel_line_cycles(&self) -> Option<f64> {
        self.memory.channel_gbs.map(|gbs| (1u64 << self.cache.line_shift()) as f64 / gbs * self.freq_ghz)
    }

    /// `memory.writeback_ns` in core cycles, if the profile charges
    /// writebacks.
    pub fn writeback_cycles(&self) -> Option<f64> {
        self.memory.writeback_ns.map(|ns| ns * self.freq_ghz)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Moving the memory scales latency, the misses in flight (so that an
    /// overlapped miss moves by about the second ratio), the streams'
    /// line times and the interface's rate, and leaves the rest; a move
    /// that would take the misses in flight below one is refused, naming
    /// the ratios.
    #[test]
    fn moving_the_memory_scales_latency_misses_in_flight_streams_and_the_interface() {
        let mut p = Profile::load("sapphire-rapids").unwrap();
        p.prefetch = Some(Prefetch { streams: 32, distance: 20, line_cycles: 8.0, line_cycles_by_streams: vec![8.0, 6.5], next_page: true });
        p.memory.channel_gbs = Some(10.0);
        let m = p.moved([0.8, 1.1, 1.25]).unwrap();
        assert_eq!(m.memory.channel_gbs, Some(8.0));
        assert!((m.memory.dram_latency_ns - 0.8 * p.memory.dram_latency_ns).abs() < 1e-9);
        assert_eq!(m.core.mshrs as f64, (p.core.mshrs as f64 * 0.8 / 1.1).round());
        let (pf, mf) = (p.prefetch.as_ref().unwrap(), m.prefetch.as_ref().unwrap());
        assert!((mf.line_cycles - 1.25 * pf.line_cycles).abs() < 1e-9);
        assert_eq!(mf.line_cycles_by_streams, vec![10.0, 8.125]);
        assert_eq!(m.cache, p.cache);
        assert_eq!(m.tlb, p.tlb);
        assert_eq!(p.moved([1.0, 1.0, 1.0]).unwrap(), p);
        let e = p.moved([0.01, 100.0, 1.0]).unwrap_err();
        assert!(e.contains("0.010, 100.000, 1.000") && e.contains("core.mshrs"), "{e}");
    }

    /// `[core]` is read whole, and values out of range are refused by name.
    #[test]
    fn the_core_is_read_and_checked() {
        let base = BUILTIN.iter().find(|(n, _)| *n == "sapphire-rapids").unwrap().1;
        let p = Profile::parse(base, "sr").unwrap();
        assert!(p.core.width >= 1.0 && p.core.rob > p.core.width as u32 && p.core.mshrs >= 1);
        let text = toml::to_string(&p).unwrap();
        assert_eq!(Profile::parse(&text, "again").unwrap(), p);
        for (from, to, want) in [
            (format!("rob = {}", p.core.rob), "rob = 0".to_string(), "core.rob = 0"),
            (format!("mshrs = {}", p.core.mshrs), "mshrs = 5000".to_string(), "core.mshrs = 5000"),
            (format!("width = {:?}", p.core.width), "width = 0.5".to_string(), "core.width = 0.5"),
        ] {
            assert!(text.contains(&from), "{from}");
            let e = Profile::parse(&text.replacen(&from, &to, 1), "bad").unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    /// `walk_level` takes 1 to 4 (4: the walks read memory) and refuses
    /// anything else by name; the Armada XP's walks read memory, as its
    /// 2013 kernel set TTBR0.
    #[test]
    fn walk_level_is_one_to_four() {
        let p = Profile::load("armada-xp").unwrap();
        assert_eq!(p.cache.walk_level(), 4);
        let text = toml::to_string(&p).unwrap();
        assert!(text.contains("walk_level = 4"), "{text}");
        for bad in [0, 5] {
            let e = Profile::parse(&text.replacen("walk_level = 4", &format!("walk_level = {bad}"), 1), "bad").unwrap_err();
            assert!(e.contains(&format!("cache.walk_level = {bad}")), "{e}");
        }
    }

    /// `line_bytes` takes 32, 64 or 128 and refuses anything else by
    /// name; POWER8's and POWER9's lines are 128 bytes, the Armada XP's
    /// 32, the others' 64.
    #[test]
    fn line_bytes_is_32_64_or_128() {
        for (n, _) in BUILTIN {
            let p = Profile::load(n).unwrap();
            let want = match (p.arch.as_str(), *n) {
                ("powerpc64", _) => 7,
                (_, "armada-xp") => 5,
                _ => 6,
            };
            assert_eq!(p.cache.line_shift(), want, "{n}");
        }
        let p = Profile::load("power9").unwrap();
        let text = toml::to_string(&p).unwrap();
        assert!(text.contains("line_bytes = 128"), "{text}");
        for good in [32, 64] {
            let p = Profile::parse(&text.replacen("line_bytes = 128", &format!("line_bytes = {good}"), 1), "good").unwrap();
            assert_eq!(1 << p.cache.line_shift(), good);
        }
        for bad in [0, 16, 96, 256] {
            let e = Profile::parse(&text.replacen("line_bytes = 128", &format!("line_bytes = {bad}"), 1), "bad").unwrap_err();
            assert!(e.contains(&format!("cache.line_bytes = {bad}")), "{e}");
        }
    }

    #[test]
    fn builtins_parse() {
        for (n, _) in BUILTIN {
            let p = Profile::load(n).unwrap();
            assert_eq!(&p.name, n);
        }
    }

    #[test]
    fn every_default_for_an_architecture_is_a_builtin_of_it() {
        for (arch, name) in DEFAULT_FOR_ARCH {
            assert_eq!(&Profile::load(name).unwrap().arch, arch);
        }
        assert_eq!(default_for_arch("riscv"), Some("sifive-u74"));
        assert_eq!(default_for_arch("arm64"), Some("neoverse-n1"));
        assert_eq!(default_for_arch("vax"), None);
    }

    #[test]
    fn alpha_profile_has_a_pal_trap_and_one_tlb_of_every_size() {
        let p = Profile::load("alpha-21264").unwrap();
        let data: Vec<_> = p.tlb.iter().filter(|t| t.side() != crate::tlb::TlbSide::Inst).collect();
        assert_eq!((p.arch.as_str(), p.costs.walk, data.len(), data[0].entries), ("alpha", Some(30), 1, 128));
        assert_eq!(data[0].sizes, ["8K", "64K", "512K", "4M"]);
        assert_eq!(Profile::load("sapphire-rapids").unwrap().costs.walk, None);
    }

    #[test]
    fn riscv_profile_reads_its_mmu_options() {
        let p = Profile::load("sifive-u74").unwrap();
        assert_eq!(p.ad_update, Some(AdUpdate::Fault));
        assert!(p.costs.pmap_fault_cycles() < p.costs.fault);
        let amd = Profile::load("sapphire-rapids").unwrap();
        assert_eq!((amd.ad_update, amd.costs.pmap_fault_cycles()), (None, amd.costs.fault));
        let text = BUILTIN[1].1.replace("ad_update = \"fault\"", "ad_update = \"sometimes\"");
        let e = Profile::parse(&text, "u74").unwrap_err();
        assert!(e.contains("sometimes"), "{e}");
    }

    #[test]
    fn virt_section_is_optional_and_checked() {
        let p = Profile::load("sapphire-rapids").unwrap();
        assert!(p.virt.is_none() && p.nested().is_none());
        let text = format!("{}\n[virt]\nnested = true        # EPT\nhost_page = \"2M\"\n", BUILTIN[0].1);
        let v = Profile::parse(&text, "x").unwrap().virt.unwrap();
        assert_eq!((v.nested, v.host_shift(), v.ntlb_entries, v.host_pwc), (true, Ok(21), 16, None));
        let e = Profile::parse(&text.replace("\"2M\"", "\"8M\""), "x").unwrap_err();
        assert!(e.contains("8M"), "{e}");
        let off = format!("{}\n[virt]\nnested = false\nhost_page = \"4K\"\n", BUILTIN[0].1);
        assert!(Profile::parse(&off, "x").unwrap().nested().is_none());
    }

    #[test]
    fn bad_profiles_name_the_problem() {
        let e = Profile::load("no-such-machine").unwrap_err();
        assert!(e.contains("no-such-machine"), "{e}");
        let text = BUILTIN[0].1.replace("freq_ghz = 3.0", "freq_ghz = -1.0");
        let e = Profile::parse(&text, "x").unwrap_err();
        assert!(e.contains("freq_ghz"), "{e}");
        let e = Profile::parse("name = 3", "y.toml").unwrap_err();
        assert!(e.contains("y.toml"), "{e}");
    }

    /// `[prefetch]` and `walk` are read, and a prefetcher out of range is
    /// refused by name.
    #[test]
    fn prefetch_and_walk_costs() {
        let base = BUILTIN.iter().find(|(n, _)| *n == "sapphire-rapids").unwrap().1;
        let p = Profile::parse(base, "sr").unwrap();
        assert_eq!((p.prefetch.as_ref(), p.costs.walk), (None, None));
        let with = base.replace("stlb_hit =", "walk = 40\nstlb_hit =") + "\n[prefetch]\nstreams = 32\nline_cycles = 14.5\n";
        let q = Profile::parse(&with, "with").unwrap();
        assert_eq!(q.prefetch, Some(Prefetch { streams: 32, distance: 16, line_cycles: 14.5, line_cycles_by_streams: vec![], next_page: false }));
        let r = Profile::parse(&(base.to_string() + "\n[prefetch]\nstreams = 32\nline_cycles = 14.5\nline_cycles_by_streams = [24.0, 13.0, 11.0]\n"), "t").unwrap();
        let pf = r.prefetch.unwrap();
        assert_eq!([1, 2, 3, 4, 9].map(|k| pf.line_cycles_at(k)), [24.0, 13.0, 11.0, 11.0, 11.0]);
        assert_eq!(q.prefetch.as_ref().unwrap().line_cycles_at(3), 14.5);
        assert_eq!(q.costs.walk, Some(40));
        // The name older profiles give the cost.
        let old = base.replace("stlb_hit =", "walk_trap = 30\nstlb_hit =");
        assert_eq!(Profile::parse(&old, "old").unwrap().costs.walk, Some(30));
        // A writeback cost is read, in cycles at the profile's clock, and
        // one out of range refused by name.
        assert_eq!(p.writeback_cycles(), None);
        let wb = base.replace("dram_latency_ns =", "writeback_ns = 2.5\ndram_latency_ns =");
        let w = Profile::parse(&wb, "wb").unwrap();
        assert_eq!(w.writeback_cycles(), Some(2.5 * w.freq_ghz));
        let e = Profile::parse(&wb.replace("writeback_ns = 2.5", "writeback_ns = -1.0"), "wb").unwrap_err();
        assert!(e.contains("memory.writeback_ns = -1"), "{e}");
        // A memory interface's bandwidth is read as a line's time in
        // cycles (64 bytes at 12.8 GB/s: 5 ns), and one out of range
        // refused by name.
        assert_eq!(p.channel_line_cycles(), None);
        let ch = base.replace("dram_latency_ns =", "channel_gbs = 12.8\ndram_latency_ns =");
        let c = Profile::parse(&ch, "ch").unwrap();
        assert!((c.channel_line_cycles().unwrap() - 5.0 * c.freq_ghz).abs() < 1e-9);
        let e = Profile::parse(&ch.replace("channel_gbs = 12.8", "channel_gbs = 0.0"), "ch").unwrap_err();
        assert!(e.contains("memory.channel_gbs = 0"), "{e}");
        for (bad, name) in [("streams = 0", "prefetch.streams = 0"), ("line_cycles = -1.0", "prefetch.line_cycles = -1"), ("line_cycles = 14.5\nline_cycles_by_streams = [3.0, 0.0]", "line_cycles_by_streams holds 0")] {
            let t = with.replace(if bad.starts_with("streams") { "streams = 32" } else { "line_cycles = 14.5" }, bad);
            let e = Profile::parse(&t, "bad").unwrap_err();
            assert!(e.contains(name), "{e}");
        }
    }
}
