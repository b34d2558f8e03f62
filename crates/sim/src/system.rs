//! A running system: the kernel's VM and the architecture's pmap on the
//! modelled machine. Programs (workloads, the checker) drive it through
//! processes: syscalls, and loads and stores issued on a CPU.
//!
//! The access path is the hardware's: TLB lookup; on a miss, the walker
//! reads the page tables from modelled memory; a write through a clean TLB
//! entry re-walks to set the dirty bit; a walk that faults enters the
//! kernel's fault handler and the access is retried. Each step is charged
//! in cycles from the machine profile.
//!
//! Under memory pressure the kernel pages out to a swap device
//! (`Config::swap`) and, when memory and swap are exhausted, kills the
//! largest process. A killed process's CPUs stop running it: its pending
//! and later accesses fail with `FaultError::Killed`, and `oom_kills`
//! says who was killed and why.

use std::collections::BTreeMap;
use serde::Serialize;
use crate::block::{Block, BlockSpec};
use crate::core::{CoreParts, CoreStats};
use crate::timing::{BatchRef, CycleBreakdown, Mark, Timing, Worker};
use std::sync::Arc;
use splab_hw::machine::Machine;
use splab_pmap::Arch;
use splab_hw::nested::HostWalk;
use splab_hw::physmem::PhysMem;
use splab_hw::profile::Profile;
use splab_hw::tlb::size_name;
use splab_hw::{PhysAddr, VirtAddr};
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::physalloc::Phys;
use splab_vm::pmap::{Advice, KernelEvents};
use splab_vm::{Errno, Kernel};

/// How a system is built.
#[derive(Clone, Debug)]
pub struct Config {
    pub arch: Arch,
    pub profile: Profile,
    /// Modelled physical memory in bytes.
    pub memory: u64,
    /// Swap device size in bytes (0: no swap).
    pub swap: u64,
    pub superpages: bool,
    /// Keep the value of every written word (needed to check contents).
    pub track_contents: bool,
    /// Check every TLB hit against the page tables (stale translations).
    pub check_tlb: bool,
    /// Fraction of free 2 MB blocks broken up at start.
    pub fragment: f64,
    /// Fraction of free 2 MB blocks aged at start (half their pages in use
    /// elsewhere, the rest scattered free frames; `Phys::age`), None for
    /// the profile's `[memory] aged` (0 where it has none).
    pub age: Option<f64>,
    pub seed: u64,
    pub domains: usize,
    /// The superpage policy, as `--policy` names it (`freebsd`,
    /// `shimizu`, `linux-thp:always`, ...).
    pub policy: String,
    /// Tunables of the pmap and of the policy set before the system
    /// starts (name, value), as a loader.conf or sysfs writes would.
    pub tunables: Vec<(String, String)>,
    /// Run the cache model of large batches on a second host thread while
    /// the next batch is translated (the results are the same either way).
    /// Off, the simulation uses one host core, for running many at once.
    pub timing_thread: bool,
    /// The parts of the core model in use (all but for `--core-off`).
    pub core_parts: CoreParts,
}

impl Config {
    pub fn new(profile: Profile) -> Config {
        Config {
            arch: splab_pmap::arch::default_for_machine(&profile.arch).unwrap_or(&splab_pmap::ARCHES[0]),
            profile,
            memory: 8 << 30,
            swap: 0,
            superpages: true,
            track_contents: false,
            check_tlb: false,
            fragment: 0.0,
            age: None,
            seed: 1,
            domains: 1,
            timing_thread: true,
            core_parts: CoreParts::default(),
            policy: "freebsd".into(),
            tunables: Vec::new(),
        }
    }

    /// The fraction of free 2 MB blocks aged at start: `age`, else the
    /// profile's `[memory] aged`, else none.
    pub fn age(&self) -> f64 {
        self.age.or(self.profile.memory.aged).unwrap_or(0.0)
    }
}

/// Counts of what the hardware did, summed over CPUs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HwStats {
    pub refs: u64,
    pub loads: u64,
    pub stores: u64,
    /// Instruction fetches of code lines (not counted in `refs`).
    #[serde(skip_serializing_if = "is_zero")]
    pub fetches: u64,
    pub walks: u64,
    /// Memory references of walks, host table references of nested walks
    /// included.
    pub walk_mem_refs: u64,
    /// Of those, references to the host's table (nested paging only).
    #[serde(skip_serializing_if = "is_zero")]
    pub nested_refs: u64,
    pub dirty_assists: u64,
    pub faults_taken: u64,
    pub stale_translations: u64,
    pub cache_hits: [u64; 3],
    pub dram_accesses: u64,
    /// Misses in L2 the stream prefetcher covered (profiles with
    /// `[prefetch]` only).
    #[serde(skip_serializing_if = "is_zero")]
    pub prefetched: u64,
    /// Dirty lines the last-level cache wrote back to memory (profiles
    /// with `memory.writeback_ns` only).
    #[serde(skip_serializing_if = "is_zero")]
    pub writebacks: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

pub(crate) struct CpuHw {
    pub(crate) running: Option<Pid>,
    /// The process this CPU was running when it was killed for lack of
    /// memory, until another is put on the CPU.
    pub(crate) killed: Option<Pid>,
    /// Page-table root and ASID of the running process (fixed for its life).
    pub(crate) space: (PhysAddr, u16),
}

/// The two threads' host times: when the last batch went to the timing
/// thread and how long this thread has waited for it since, and the
/// totals over the run (`System::thread_balance`).
pub(crate) struct Pace {
    sent: std::time::Instant,
    waited: f64,
    balance: ThreadBalance,
}

/// Where a run's host time went between its two threads, summed over the
/// batches handed to the timing thread: which of them bounds the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThreadBalance {
    /// Batches handed over.
    pub batches: u64,
    /// The translating thread's work between handing batches over, its
    /// waits for the timing thread left out, and those waits.
    pub translate_seconds: f64,
    pub waited_seconds: f64,
    /// The timing thread's passes (the caches' and the core's).
    pub timing_seconds: f64,
}

/// A returned batch's buffers: references, walk references, marks and
/// list of accesses.
pub(crate) type Spare = (Vec<BatchRef>, Vec<u64>, Vec<Mark>, Vec<(u64, u32)>);

/// What a batch's return tells: its buffers for later batches (a few
/// kept), and the timing thread's host time for it.
fn returned(pace: &mut Pace, spares: &mut Vec<Spare>, d: crate::timing::Done) {
    pace.balance.timing_seconds += d.busy_seconds;
    if spares.len() < crate::timing::IN_FLIGHT + 1 {
        spares.push((d.refs, d.walks, d.marks, d.acc));
    }
}

impl Pace {
    pub(crate) fn new() -> Pace {
        Pace { sent: std::time::Instant::now(), waited: 0.0, balance: ThreadBalance::default() }
    }

    /// Whether the timing thread's passes have taken longer so far than
    /// this thread's work between handing batches over.
    pub(crate) fn timing_busier(&self) -> bool {
        self.balance.timing_seconds > self.balance.translate_seconds
    }

    /// A batch went to the timing thread.
    pub(crate) fn sent(&mut self) {
        let b = &mut self.balance;
        b.batches += 1;
        b.translate_seconds += (self.sent.elapsed().as_secs_f64() - self.waited).max(0.0);
        b.waited_seconds += self.waited;
        self.sent = std::time::Instant::now();
        self.waited = 0.0;
    }
}

/// The kernel running on the machine, the CPUs' schedule, and the timing
/// model. The kernel and the machine are private: programs reach them
/// through processes (syscalls, loads and stores on a CPU) and read them
/// through the reports below.
pub struct System {
    pub(crate) kernel: Kernel,
    pub(crate) machine: Machine,
    pub cfg: Config,
    pub(crate) cpus: Vec<CpuHw>,
    /// The timing model; None while a batch is with the timing thread.
    pub(crate) timing: Option<Box<Timing>>,
    pub(crate) worker: Option<Worker>,
    /// Where the two threads' host time goes.
    pub(crate) pace: Pace,
    /// Buffers for the batches to build (references, walks, marks, list
    /// of accesses), returned by the worker.
    pub(crate) spares: Vec<Spare>,
    /// The stream's marks between the batch's references.
    pub(crate) marks: Vec<Mark>,
    /// The blocks defined (`define_block`), and those the timing model
    /// has not been given yet.
    blocks: Vec<Arc<Block>>,
    pub(crate) new_blocks: Vec<Arc<Block>>,
    /// Blocks defined by name (`named_block`), and the loop each CPU runs.
    named: std::collections::HashMap<&'static str, u32>,
    loops: Vec<Option<u32>>,
    /// Cycles of kernel work per CPU.
    pub(crate) kernel_cycles: Vec<f64>,
    /// Walk references of translations not yet charged to the caches.
    pub(crate) pending_walks: Vec<u64>,
    /// References of a batch awaiting the cache model.
    pub(crate) batch: Vec<BatchRef>,
    pub(crate) hw: HwStats,
    /// The first few stale translations seen, for diagnosis.
    pub stale_samples: Vec<String>,
    /// Page faults' kernel times in simulated ns, as a count per distinct
    /// time (keyed by the f32's bits, which order as the times do): exact
    /// percentiles in memory that does not grow with the run's length,
    /// since the times come from a few event costs.
    pub(crate) fault_ns: BTreeMap<u32, u64>,
    /// The most resident memory never touched so far, in pages.
    bloat_peak_pages: u64,
    /// Resident and touched pages when the last process began to exit:
    /// the run's end as its programs saw it.
    end_pages: Option<(u64, u64)>,
    /// Cycles of the policy's background work (khugepaged), on no
    /// program's CPU.
    background_cycles: f64,
    /// When the policy's background work is next due, in simulated ns.
    pub(crate) next_background_ns: Option<f64>,
    /// Functional warming (`set_functional`): batches update the caches
    /// and the predictor, and time nothing.
    pub(crate) functional: bool,
    /// log2 of the caches' line size (`Caches::line_bytes`).
    pub(crate) line_shift: u32,
}

/// What a run did with memory, whatever the policy.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MemoryReport {
    /// Pages of the programs' objects (anonymous memory, page cache) at
    /// the end (when the last process began to exit, or now if one still
    /// runs) and at most, in bytes.
    pub resident_bytes: u64,
    pub resident_peak_bytes: u64,
    /// Of the resident pages at the end, those the programs accessed since
    /// they were filled, in bytes; the rest is bloat.
    pub touched_bytes: u64,
    pub bloat_bytes: u64,
    /// The most bloat at any kernel entry.
    pub bloat_peak_bytes: u64,
    /// Bytes the kernel zeroed (zero-fill faults, eager blocks, the empty
    /// pages of a collapse) and copied (copy-on-write, collapses,
    /// compaction).
    pub zeroed_bytes: u64,
    pub copied_bytes: u64,
    /// Page faults and their latency in simulated ns (the kernel's time
    /// for the fault, zeroing and compaction included): median, 99th
    /// percentile, largest.
    pub faults: u64,
    pub fault_p50_ns: f64,
    pub fault_p99_ns: f64,
    pub fault_max_ns: f64,
    /// Simulated seconds of the policy's background work (khugepaged).
    pub background_seconds: f64,
}






impl System {
    pub fn new(cfg: Config) -> Result<System, String> {
        let p = &cfg.profile;
        let arch = cfg.arch;
        if p.arch != arch.machine {
            return Err(format!("machine profile {:?} is an {} machine, not {}", p.name, p.arch, arch));
        }
        let npages = cfg.memory >> arch.page_shift();
        if !(16 << 20..=256 << 30).contains(&cfg.memory) {
            return Err(format!("memory size {} bytes is out of range (16 MiB to 256 GiB)", cfg.memory));
        }
        if cfg.swap > 256 << 30 {
            return Err(format!("swap size {} bytes is out of range (0 to 256 GiB)", cfg.swap));
        }
        if !(0.0..=1.0).contains(&cfg.fragment) {
            return Err(format!("fragmentation {} is out of range (0 to 1)", cfg.fragment));
        }
        let age = cfg.age();
        if !(0.0..=1.0).contains(&age) {
            return Err(format!("aged fraction {age} is out of range (0 to 1)"));
        }
        let walker = arch.new_walker(p)?;
        if p.nested().is_some() && !arch.nested_paging {
            return Err(format!("machine profile {:?}: nested paging ([virt] nested = true) is not modelled for {arch}, whose hashed page table belongs to the hypervisor", p.name));
        }
        let mut pmap = arch.new_pmap(npages, cfg.superpages)?;
        let mut policy = splab_vm::policy::by_name(&cfg.policy)?;
        if !arch.policies.contains(&policy.kind()) {
            return Err(format!("policy {:?} is not modelled on {arch}, which has {} (policies for {arch}: {})", cfg.policy, arch.size_names(), arch.policy_names()));
        }
        for (name, value) in &cfg.tunables {
            if let Some(r) = policy.set_tunable(name, value) {
                r?;
                continue;
            }
            let v = value.parse::<i64>().map_err(|_| format!("{name}={value}: {value:?} is not an integer"))?;
            pmap.set_tunable(name, v).map_err(|e| {
                let extra = policy.tunable_names();
                if extra.is_empty() || !e.starts_with("unknown") {
                    e
                } else {
                    format!("{e}; the {} policy's: {}", policy.name(), extra.join(", "))
                }
            })?;
        }
        // Reservations are the size the architecture reserves
        // (VM_LEVEL_0_ORDER, `Pmap::reserv_psind`); without superpage
        // sizes, amd64's 2 MB.
        let sizes = pmap.pagesizes();
        let order = match sizes.get(pmap.reserv_psind().index()) {
            Some(sp) if sizes.len() > 1 => (sp / sizes[0]).trailing_zeros(),
            _ => splab_vm::phys::VM_LEVEL_0_ORDER as u32,
        };
        let page_shift = sizes[0].trailing_zeros();
        let mut machine = Machine::new(p, walker, cfg.memory, page_shift, cfg.track_contents)?;
        let phys = Phys::with_reservation_order(npages, cfg.domains.max(1), order);
        let timing = Box::new(Timing::with_parts(p, cfg.core_parts)?);
        let mut kernel = Kernel::new(phys, p.cpus, pmap);
        kernel.set_policy(policy);
        let next_background_ns = kernel.policy().and_then(|p| p.next_background_ns());
        // The pmap takes its boot-time memory before anything fragments it.
        let (pmap, mut env) = kernel.pmap_env(&mut machine);
        pmap.bootstrap(&mut env);
        if cfg.fragment > 0.0 {
            kernel.phys.fragment(cfg.fragment, cfg.seed);
        }
        if age > 0.0 {
            // Runs of `[memory] aged_run` base pages (the profile checked
            // it is a power of two); they must leave a region two runs.
            let run = p.memory.aged_run.unwrap_or(1);
            if run >= 1 << order {
                return Err(format!("machine profile {:?}: memory.aged_run = {run} pages is not less than the {}-page reservation it ages", p.name, 1u32 << order));
            }
            kernel.phys.age(age, cfg.seed, run.trailing_zeros() as usize);
        }
        kernel.swap = splab_vm::swap::SwapDevice::new(cfg.swap / kernel.page_size(), cfg.track_contents);
        let cpus = (0..p.cpus).map(|_| CpuHw { running: None, killed: None, space: (PhysAddr(0), 0) }).collect();
        Ok(System {
            kernel,
            machine,
            cpus,
            timing: Some(timing),
            line_shift: p.cache.line_shift(),
            worker: None,
            pace: Pace::new(),
            spares: Vec::new(),
            marks: Vec::new(),
            blocks: Vec::new(),
            new_blocks: Vec::new(),
            named: std::collections::HashMap::new(),
            loops: vec![None; p.cpus],
            kernel_cycles: vec![0.0; p.cpus],
            pending_walks: Vec::new(),
            batch: Vec::new(),
            hw: HwStats::default(),
            stale_samples: Vec::new(),
            fault_ns: BTreeMap::new(),
            bloat_peak_pages: 0,
            end_pages: None,
            background_cycles: 0.0,
            next_background_ns,
            functional: false,
            cfg,
        })
    }

    pub fn ncpus(&self) -> usize {
        self.cpus.len()
    }

    /// Charges the cycle cost of kernel events since `before` to `cpu`,
    /// and returns it; then samples memory and runs background work that
    /// is due.
    pub(crate) fn charge_events(&mut self, cpu: usize, before: &KernelEvents) -> f64 {
        let cyc = self.event_cycles(before);
        self.kernel_cycles[cpu] += cyc;
        let resident = self.kernel.phys.object_pages;
        self.bloat_peak_pages = self.bloat_peak_pages.max(resident.saturating_sub(self.machine.mem.touched_frames()));
        self.maybe_background();
        cyc
    }

    /// Runs the policy's background work (khugepaged) if it is due by the
    /// simulated time of the busiest CPU, when the timing model is at hand
    /// (not with the timing thread). Its cycles go to no program.
    pub(crate) fn maybe_background(&mut self) {
        let Some(next) = self.next_background_ns else { return };
        let Some(t) = self.timing.as_ref() else { return };
        let busiest = (0..self.cpus.len()).map(|i| t.cycles(i) + self.kernel_cycles[i]).fold(0.0, f64::max);
        let now = busiest / self.cfg.profile.freq_ghz;
        if now < next {
            return;
        }
        let before = self.kernel.ev.clone();
        let hw = &mut self.machine;
        self.kernel.with_policy(|p, k| p.background(k, hw, now));
        self.background_cycles += self.event_cycles(&before);
        self.next_background_ns = self.kernel.policy().and_then(|p| p.next_background_ns());
        self.reap_killed();
    }

    /// The cycle cost of the kernel events since `before`.
    fn event_cycles(&self, before: &KernelEvents) -> f64 {
        let c = &self.cfg.profile.costs;
        let e = &self.kernel.ev;
        let d = |a: u64, b: u64| (a - b) as f64;
        d(e.faults, before.faults) * c.fault as f64
            + d(e.pmap_faults, before.pmap_faults) * c.pmap_fault_cycles() as f64
            + d(e.zero_fills, before.zero_fills) * c.zero_4k as f64
            + d(e.cow_copies, before.cow_copies) * c.copy_4k as f64
            + d(e.page_ins, before.page_ins) * c.copy_4k as f64
            + d(e.pt_page_allocs, before.pt_page_allocs) * (c.pt_page_alloc + c.zero_4k) as f64
            + d(e.invlpg, before.invlpg) * c.invlpg as f64
            + d(e.tlb_flushes, before.tlb_flushes) * c.tlb_flush as f64
            + d(e.shootdown_ipis, before.shootdown_ipis) * c.shootdown_ipi as f64
            + d(e.promotions, before.promotions) * c.promotion as f64
            + d(e.demotions, before.demotions) * c.demotion as f64
            + d(e.syscalls, before.syscalls) * c.syscall as f64
            + d(e.context_switches, before.context_switches) * c.context_switch as f64
            + d(e.pd_scanned, before.pd_scanned) * c.pageout_scan as f64
            + d(e.swap_outs + e.vnode_outs, before.swap_outs + before.vnode_outs) * c.swap_out_4k as f64
            + d(e.swap_ins, before.swap_ins) * c.swap_in_4k as f64
            + d(e.collapse_copies + e.migrations, before.collapse_copies + before.migrations) * c.copy_4k as f64
            + d(e.khugepaged_scanned, before.khugepaged_scanned) * c.pageout_scan as f64
            + d(e.promotion_scanned, before.promotion_scanned) * c.promotion_scan.unwrap_or(0) as f64
    }

    /// Takes processes killed for lack of memory off their CPUs, so that
    /// nothing of theirs is used again (their page tables are gone and
    /// their address-space tag may be reused).
    pub(crate) fn reap_killed(&mut self) {
        for c in &mut self.cpus {
            if let Some(pid) = c.running {
                if self.kernel.proc(pid).is_none() {
                    c.running = None;
                    c.killed = Some(pid);
                    c.space = (PhysAddr(0), 0);
                }
            }
        }
    }

    fn syscall_cpu(&self, pid: Pid) -> usize {
        self.cpus.iter().position(|c| c.running == Some(pid)).unwrap_or(0)
    }

    /// Runs `f` as a syscall of `pid`, charging its kernel work.
    fn syscall<T>(&mut self, pid: Pid, f: impl FnOnce(&mut Kernel, &mut Machine) -> T) -> T {
        let cpu = self.syscall_cpu(pid);
        let before = self.kernel.ev.clone();
        let r = f(&mut self.kernel, &mut self.machine);
        self.charge_events(cpu, &before);
        self.reap_killed();
        r
    }

    // The process interface: what a program can ask of the kernel.

    /// Creates a process with an empty address space.
    pub fn spawn(&mut self) -> Result<Pid, Errno> {
        let r = self.kernel.spawn(&mut self.machine);
        self.reap_killed();
        r
    }
    pub fn mmap(&mut self, pid: Pid, req: MmapReq) -> Result<VirtAddr, Errno> {
        self.syscall(pid, |k, hw| k.mmap(hw, pid, req))
    }
    pub fn munmap(&mut self, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        self.syscall(pid, |k, hw| k.munmap(hw, pid, addr, len))
    }
    pub fn mprotect(&mut self, pid: Pid, addr: u64, len: u64, p: u8) -> Result<(), Errno> {
        self.syscall(pid, |k, hw| k.mprotect(hw, pid, addr, len, p))
    }
    pub fn madvise(&mut self, pid: Pid, addr: u64, len: u64, a: Advice) -> Result<(), Errno> {
        self.syscall(pid, |k, hw| k.madvise(hw, pid, addr, len, a))
    }
    /// Per-range superpage advice (`Kernel::madvise_superpages`, a splab
    /// extension after Linux's MADV_NOHUGEPAGE / MADV_HUGEPAGE).
    pub fn madvise_superpages(&mut self, pid: Pid, addr: u64, len: u64, allow: bool) -> Result<(), Errno> {
        self.syscall(pid, |k, _| k.madvise_superpages(pid, addr, len, allow))
    }
    pub fn fork(&mut self, pid: Pid) -> Result<Pid, Errno> {
        self.syscall(pid, |k, hw| k.fork(hw, pid))
    }
    pub fn exit(&mut self, pid: Pid) -> Result<(), Errno> {
        if self.alive(pid) && !(0..self.kernel.procs.len() as Pid).any(|p| p != pid && self.alive(p)) {
            let resident = self.kernel.phys.object_pages;
            self.end_pages = Some((resident, self.machine.mem.touched_frames().min(resident)));
        }
        let r = self.syscall(pid, |k, hw| k.exit(hw, pid));
        // Debug builds check every layer's invariants whenever a process
        // goes (buddy lists, reservations, objects, PV lists, page tables).
        if cfg!(debug_assertions) {
            if let Err(e) = self.check_invariants() {
                panic!("invariant broken after exit of {pid}: {e}");
            }
        }
        for c in &mut self.cpus {
            if c.running == Some(pid) {
                c.running = None;
            }
        }
        r
    }

    /// Creates a file of `size` bytes (its pages are read from it on
    /// first touch); the returned id names it in `Backing::File`.
    pub fn create_file(&mut self, size: u64) -> u32 {
        self.kernel.create_file(size)
    }

    /// Creates a large-page shared memory object of `size` bytes (the
    /// explicit, non-transparent path: shm_create_largepage).
    pub fn shm_create_largepage(&mut self, size: u64) -> Result<u32, Errno> {
        self.kernel.shm_create_largepage(&mut self.machine, size)
    }

    /// Bytes in a line of the caches (the profile's `[cache] line_bytes`).
    pub fn line_bytes(&self) -> u64 {
        1 << self.line_shift
    }

    /// Bytes in a base page (PAGE_SIZE): 4 KB, or 8 KB on the Alpha.
    pub fn page_size(&self) -> u64 {
        self.kernel.page_size()
    }

    /// The size of a reservation, the superpage size transparent
    /// promotion aims for (2 MB on most architectures, 1 MB on armv7,
    /// 16 MB on ppc64-hpt, 4 MB on the Alpha).
    pub fn superpage_size(&self) -> u64 {
        self.kernel.phys.reserv.npages() as u64 * self.page_size()
    }

    /// Whether `pid` is alive.
    pub fn alive(&self, pid: Pid) -> bool {
        self.kernel.proc(pid).is_some()
    }

    /// The highest user address + 1 of `pid`'s address space.
    pub fn max_user_address(&self, pid: Pid) -> Option<u64> {
        Some(self.kernel.proc(pid)?.map.max)
    }

    /// Where the page holding `va` in `pid`'s address space lives, as the
    /// page tables say now: its physical address and the size of the page
    /// that maps it (None if nothing maps it).
    pub fn mapping(&self, pid: Pid, va: u64) -> Option<splab_vm::pmap::Mapping> {
        let pm = self.kernel.proc(pid)?.pmap;
        self.kernel.pmap.extract(&self.machine.mem, pm, VirtAddr(va))
    }

    /// Whether modelled memory keeps the values written (`--track-contents`).
    pub fn tracks_contents(&self) -> bool {
        self.machine.mem.tracks_data()
    }

    /// Processes killed because memory and swap were exhausted, in order.
    pub fn oom_kills(&self) -> &[splab_vm::OomKill] {
        &self.kernel.oom_kills
    }

    /// The kernel's event counts so far (what the timing model charges).
    pub fn events(&self) -> &KernelEvents {
        &self.kernel.ev
    }

    /// The machine-independent VM's counters (vm.stats.vm.*).
    pub fn vm_stats(&self) -> &splab_vm::kernel::VmStats {
        &self.kernel.stats
    }

    /// Free base pages.
    pub fn free_pages(&self) -> u64 {
        self.kernel.phys.buddy.free_count()
    }

    /// The kernel's state, read-only, for the checker and tests.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Checks the invariants of every layer of the kernel (buddy lists,
    /// reservations, objects, page queues, swap, the pmap's PV lists and
    /// page tables). O(memory).
    pub fn check_invariants(&mut self) -> Result<(), String> {
        self.kernel.check_invariants(&mut self.machine)
    }

    /// Functional warming on or off. On, the references that follow
    /// are translated as ever (TLBs, walks, page tables, faults and the
    /// kernel as in full detail) and go through the caches' pass, and
    /// the stream's blocks through the predictor, their instructions
    /// dispatched at the core's width (`Timing::warm_pass`); nothing
    /// waits on a miss, a dependence, a misprediction or the window. A
    /// sampled run's warm-ups, whose time is not measured, are
    /// simulated this way where the program runs natively between
    /// windows (the model's clock is a count there too).
    pub fn set_functional(&mut self, on: bool) {
        if on != self.functional {
            self.sync();
            self.functional = on;
        }
    }

    /// Puts `pid` on `cpu` (a context switch: pmap_activate).
    pub fn run_on(&mut self, cpu: usize, pid: Pid) -> Result<(), Errno> {
        if cpu >= self.cpus.len() {
            return Err(Errno::EINVAL);
        }
        let pm = self.kernel.proc(pid).ok_or(Errno::ESRCH)?.pmap;
        if self.cpus[cpu].running == Some(pid) {
            return Ok(());
        }
        let before = self.kernel.ev.clone();
        let (pmap, mut env) = self.kernel.pmap_env(&mut self.machine);
        pmap.activate(&mut env, pm, cpu);
        self.cpus[cpu].running = Some(pid);
        self.cpus[cpu].killed = None;
        self.cpus[cpu].space = (self.kernel.pmap.root(pm), self.kernel.pmap.asid(pm));
        self.charge_events(cpu, &before);
        Ok(())
    }

    pub fn running(&self, cpu: usize) -> Option<Pid> {
        self.cpus.get(cpu)?.running
    }

    /// How the run's batches kept its two host threads busy (all zero
    /// where it ran on one).
    pub fn thread_balance(&self) -> ThreadBalance {
        self.pace.balance
    }

    /// Waits for the timing thread to finish the batches in flight and
    /// hand the timing model back.
    pub(crate) fn sync(&mut self) {
        if self.timing.is_none() {
            let t0 = std::time::Instant::now();
            let worker = self.worker.as_mut().expect("timing is with the worker");
            let t = worker.take_back(|d| returned(&mut self.pace, &mut self.spares, d));
            self.pace.waited += t0.elapsed().as_secs_f64();
            self.timing = Some(t);
        }
    }

    /// Takes in the returns of batches the timing thread has finished;
    /// with `wait`, waits for one (the host time spent waiting counted).
    pub(crate) fn collect_returns(&mut self, wait: bool) {
        let Some(worker) = self.worker.as_mut() else { return };
        let t0 = wait.then(std::time::Instant::now);
        let mut w = wait;
        while let Some(d) = worker.done(w) {
            returned(&mut self.pace, &mut self.spares, d);
            w = false;
        }
        if let Some(t0) = t0 {
            self.pace.waited += t0.elapsed().as_secs_f64();
        }
    }

    /// The timing model, once any batch in flight is done.
    #[inline]
    pub(crate) fn timing(&mut self) -> &mut Timing {
        if self.timing.is_none() {
            self.sync();
        }
        let t = self.timing.as_mut().unwrap();
        if !self.new_blocks.is_empty() {
            t.add_blocks(self.new_blocks.drain(..));
        }
        t
    }

    /// Defines a block of the instruction stream (`block.rs`), compiled
    /// for the profile's core; returns its index, which marks and loops
    /// name.
    pub fn define_block(&mut self, spec: &BlockSpec) -> Result<u32, String> {
        let b = Arc::new(Block::compile(spec, &self.cfg.profile.core.latency)?);
        let id = u32::try_from(self.blocks.len()).map_err(|_| "more than 2^32 blocks".to_string())?;
        self.blocks.push(b.clone());
        self.new_blocks.push(b);
        Ok(id)
    }

    /// The block defined under `name`, defining it from `make` the first
    /// time (a workload's loop, `splab_workloads::kernels`).
    pub fn named_block(&mut self, name: &'static str, make: impl FnOnce() -> BlockSpec) -> Result<u32, String> {
        if let Some(&id) = self.named.get(name) {
            return Ok(id);
        }
        let id = self.define_block(&make())?;
        self.named.insert(name, id);
        Ok(id)
    }

    /// A block defined by `define_block`.
    pub fn block(&self, id: u32) -> Option<&Arc<Block>> {
        self.blocks.get(id as usize)
    }

    /// Tells the timing model the loop `cpu` runs from now on (a block
    /// defined by `define_block`, one iteration of it; None: no loop in
    /// particular): each reference it issues outside any block is the
    /// loop's next, in turn.
    pub fn set_loop(&mut self, cpu: usize, block: Option<u32>) {
        if self.loops[cpu] != block {
            self.loops[cpu] = block;
            self.timing().set_loop(cpu, block);
        }
    }

    /// Cycles CPU `cpu` has spent so far (instructions, their accesses and
    /// kernel work).
    pub fn cycles(&mut self, cpu: usize) -> f64 {
        self.timing().cycles(cpu) + self.kernel_cycles[cpu]
    }

    /// Runs `n` instructions on `cpu` that the stream describes no further
    /// (dispatched at the core's width, after the references before them).
    pub fn instructions(&mut self, cpu: usize, n: u64) {
        self.timing().instructions(cpu, n);
    }

    /// What the cores counted: instructions, blocks, branches predicted
    /// and missed, instruction fetches that missed.
    pub fn core_stats(&mut self) -> CoreStats {
        self.timing().core_stats()
    }

    /// Charges `cpu` for `n` system calls that change no memory (a
    /// socket's send, receive or poll, an lseek): each is counted with the
    /// others and costs the profile's `[costs] syscall`.
    pub fn syscalls(&mut self, cpu: usize, n: u64) {
        let before = self.kernel.ev.clone();
        self.kernel.ev.syscalls += n;
        self.charge_events(cpu, &before);
    }

    /// Counts of what the hardware did.
    pub fn hw(&mut self) -> HwStats {
        let t = self.timing();
        let (hits, dram, pf, wb) = (t.cache_hits, t.dram_accesses, t.prefetched, t.writebacks);
        let mut h = self.hw.clone();
        let w = &self.machine.walk_stats;
        h.walks = w.walks;
        h.walk_mem_refs = w.walk_mem_refs;
        h.nested_refs = w.nested_refs;
        h.cache_hits = hits;
        h.dram_accesses = dram;
        h.prefetched = pf;
        h.writebacks = wb;
        h
    }

    /// Every sysctl: the VM's and the pmap's, and with nested paging the
    /// host walk's counters.
    pub fn sysctls(&self) -> splab_vm::sysctl::Sysctls {
        let mut s = self.kernel.sysctls();
        if let Some(v) = self.cfg.profile.nested() {
            let sum = |f: fn(&HostWalk) -> u64| self.machine.nested().iter().map(f).sum::<u64>();
            s.text("splab.virt.host_page", v.host_page.clone(), "Page size the host backs guest memory with (nested paging)");
            s.int("splab.walk.nested_refs", sum(|h| h.refs), "Host page-table references made by two-dimensional walks");
            s.int("splab.walk.nested_walks", sum(|h| h.walks), "Host walks (guest-physical addresses the nested TLB missed)");
            s.int("splab.walk.ntlb_hits", sum(|h| h.ntlb_hits), "Guest-physical addresses translated by the nested TLB");
        }
        s
    }

    /// Where the cycles went.
    pub fn breakdown(&mut self) -> CycleBreakdown {
        let mut b = self.timing().breakdown();
        b.kernel = self.kernel_cycles.iter().sum();
        b
    }

    /// Simulated time so far: the busiest CPU's cycles at the profile's clock.
    pub fn sim_seconds(&mut self) -> f64 {
        let n = self.cpus.len();
        let c = (0..n).map(|i| self.cycles(i)).fold(0.0, f64::max);
        c / (self.cfg.profile.freq_ghz * 1e9)
    }

    pub fn cycles_to_seconds(&self, cycles: f64) -> f64 {
        cycles / (self.cfg.profile.freq_ghz * 1e9)
    }

    /// TLB statistics summed over CPUs, keyed by page size.
    pub fn tlb_report(&self) -> TlbReport {
        let shifts = self.machine.page_shifts().to_vec();
        let mut r = TlbReport { sizes: shifts.iter().map(|&s| size_name(s)).collect(), ..Default::default() };
        let n = shifts.len();
        r.l1_hits = vec![0; n];
        r.l2_hits = vec![0; n];
        r.misses = vec![0; n];
        for mmu in &self.machine.mmu {
            let s = &mmu.tlb.stats;
            for i in 0..n.min(s.l1_hits.len()) {
                r.l1_hits[i] += s.l1_hits[i];
                r.l2_hits[i] += s.l2_hits[i];
                r.misses[i] += s.misses[i];
            }
            r.lookups += s.lookups;
            r.pwc_hits += mmu.pwc.hits;
            r.pwc_misses += mmu.pwc.misses;
        }
        r.total_misses = r.misses.iter().sum();
        r
    }

    /// What the run did with memory: resident against touched (bloat),
    /// bytes zeroed and copied, fault latency, background work.
    pub fn memory_report(&mut self) -> MemoryReport {
        let page = self.page_size();
        let (resident, touched) = self.end_pages.unwrap_or_else(|| {
            let resident = self.kernel.phys.object_pages;
            (resident, self.machine.mem.touched_frames().min(resident))
        });
        let e = &self.kernel.ev;
        let n: u64 = self.fault_ns.values().sum();
        // The time of the fault of rank round((n - 1) q), 0-based.
        let pct = |q: f64| {
            let rank = ((n.max(1) - 1) as f64 * q).round() as u64;
            let mut seen = 0;
            for (&bits, &c) in &self.fault_ns {
                seen += c;
                if seen > rank {
                    return f32::from_bits(bits) as f64;
                }
            }
            0.0
        };
        MemoryReport {
            resident_bytes: resident * page,
            resident_peak_bytes: self.kernel.phys.object_pages_peak * page,
            touched_bytes: touched * page,
            bloat_bytes: (resident - touched) * page,
            bloat_peak_bytes: self.bloat_peak_pages.max(resident - touched) * page,
            zeroed_bytes: e.zero_fills * page,
            copied_bytes: (e.cow_copies + e.collapse_copies + e.migrations) * page,
            faults: n,
            fault_p50_ns: pct(0.5),
            fault_p99_ns: pct(0.99),
            fault_max_ns: self.fault_ns.keys().next_back().map_or(0.0, |&b| f32::from_bits(b) as f64),
            background_seconds: self.background_cycles / (self.cfg.profile.freq_ghz * 1e9),
        }
    }

    /// The policy's per-process view of `pid`'s superpages, where it has
    /// one (Shimizu's /proc/PID/superpages).
    pub fn policy_procfs(&self, pid: Pid) -> Option<String> {
        self.kernel.policy()?.procfs(&self.kernel, pid)
    }

    /// The policy's per-process views of every process it has one of (the
    /// first eight).
    pub fn policy_procfs_all(&self) -> Vec<String> {
        (0..self.kernel.procs.len() as Pid).filter_map(|pid| self.policy_procfs(pid)).take(8).collect()
    }

    /// MADV_COLLAPSE over [addr, addr + len) of `pid` (the policy's
    /// collapse; EINVAL where it has none).
    pub fn madvise_collapse(&mut self, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        self.syscall(pid, |k, hw| k.madvise_collapse(hw, pid, addr, len))
    }

    /// Host memory the model holds (page array, reservations, stored
    /// frames, PV entries), not counting caches of the timing model.
    pub fn model_host_bytes(&self) -> u64 {
        self.kernel.host_bytes() + self.machine.mem.host_bytes()
    }

    pub fn mem(&self) -> &PhysMem {
        &self.machine.mem
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct TlbReport {
    pub sizes: Vec<String>,
    pub l1_hits: Vec<u64>,
    pub l2_hits: Vec<u64>,
    pub misses: Vec<u64>,
    pub total_misses: u64,
    pub lookups: u64,
    pub pwc_hits: u64,
    pub pwc_misses: u64,
}
