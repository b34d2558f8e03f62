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

use serde::Serialize;
use crate::timing::{BatchRef, Job, Timing, Worker};
use splab_hw::mmu::{perm, Access, Mmu, Translation, WalkFault, WalkRefs, Walker};
use splab_hw::nested::HostWalk;
use splab_hw::physmem::PhysMem;
use splab_hw::profile::{LoopShape, Profile};
use splab_hw::pwc::Pwc;
use splab_hw::tlb::{size_name, Tlb, TlbHit};
use splab_hw::{PhysAddr, VirtAddr};
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::physalloc::Phys;
use splab_vm::pmap::{prot, Advice, CpuState, KernelEvents};
use splab_vm::{Errno, FaultError, Vm};

/// How a system is built.
#[derive(Clone, Debug)]
pub struct Config {
    pub arch: String,
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
    /// Pmap tunables set before the system starts (sysctl name, value),
    /// as a loader.conf would.
    pub tunables: Vec<(String, i64)>,
    /// Run the cache model of large batches on a second host thread while
    /// the next batch is translated (the results are the same either way).
    /// Off, the simulation uses one host core, for running many at once.
    pub timing_thread: bool,
}

impl Config {
    pub fn new(profile: Profile) -> Config {
        Config {
            arch: splab_pmap::default_arch(&profile.arch).to_string(),
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

/// Where the time went, in cycles, summed over CPUs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CycleBreakdown {
    pub data: f64,
    pub translation: f64,
    pub kernel: f64,
}

struct CpuHw {
    running: Option<Pid>,
    /// The process this CPU was running when it was killed for lack of
    /// memory, until another is put on the CPU.
    killed: Option<Pid>,
    /// Page-table root and ASID of the running process (fixed for its life).
    space: (PhysAddr, u16),
}

pub struct System {
    pub vm: Vm,
    pub cfg: Config,
    walker: Box<dyn Walker>,
    cpus: Vec<CpuHw>,
    /// The timing model; None while a batch is with the timing thread.
    timing: Option<Box<Timing>>,
    worker: Option<Worker>,
    /// Buffers of the batch being built, and spares returned by the worker.
    spare_refs: Vec<BatchRef>,
    spare_walks: Vec<u64>,
    /// Cycles of kernel work per CPU.
    kernel_cycles: Vec<f64>,
    refs: WalkRefs,
    /// Per CPU, the host walk of nested paging (empty on a native
    /// machine).
    nested: Vec<HostWalk>,
    /// Walk references of translations not yet charged to the caches.
    pending_walks: Vec<u64>,
    /// References of a batch awaiting the cache model.
    batch: Vec<BatchRef>,
    hw: HwStats,
    /// The first few stale translations seen, for diagnosis.
    pub stale_samples: Vec<String>,
}

/// Batches of fewer references than this are timed on the calling thread;
/// larger ones go to the timing thread. Callers that stream many short
/// batches on a busy host (where the hand-off's spinning competes with
/// other work for the cores) can stay below it.
pub const BATCH_THREAD_MIN: usize = 512;

/// One memory access to perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Load,
    Store(u64),
}

/// The TLB permission bits an access needs to use an entry as it is (a
/// write through an entry whose dirty bit is clear needs an assist).
fn need(acc: Access) -> u8 {
    match acc {
        Access::Read => perm::READ,
        Access::Write => perm::WRITE | perm::DIRTY,
        Access::Exec => perm::EXEC,
    }
}

fn op_access(op: Op) -> Access {
    match op {
        Op::Load => Access::Read,
        Op::Store(_) => Access::Write,
    }
}

fn access_prot(a: Access) -> u8 {
    match a {
        Access::Read => prot::READ,
        Access::Write => prot::WRITE,
        Access::Exec => prot::EXEC,
    }
}

impl System {
    pub fn new(cfg: Config) -> Result<System, String> {
        let p = &cfg.profile;
        if p.arch != splab_pmap::machine_arch(&cfg.arch) {
            return Err(format!("machine profile {:?} is an {} machine, not {}", p.name, p.arch, cfg.arch));
        }
        let npages = cfg.memory >> splab_pmap::page_shift(&cfg.arch)?;
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
        let walker = splab_pmap::new_walker(&cfg.arch, p)?;
        let mut nested = Vec::new();
        if let Some(v) = p.nested() {
            // POWER's hashed page table has no two-dimensional walk: under
            // a hypervisor the HPT is the hypervisor's.
            if cfg.arch == "ppc64-hpt" {
                return Err(format!("machine profile {:?}: nested paging ([virt] nested = true) is not modelled for ppc64-hpt, whose hashed page table belongs to the hypervisor", p.name));
            }
            for _ in 0..p.cpus {
                nested.push(HostWalk::new(v, &p.pwc, cfg.memory).map_err(|e| format!("machine profile {:?}: {e}", p.name))?);
            }
        }
        let mut pmap = splab_pmap::new_pmap(&cfg.arch, npages, cfg.superpages)?;
        for (name, value) in &cfg.tunables {
            pmap.set_tunable(name, *value)?;
        }
        let mut cpus_vm = Vec::new();
        let mut cpus = Vec::new();
        for _ in 0..p.cpus {
            let tlb = Tlb::new(&p.tlb, walker.page_shifts())?;
            cpus_vm.push(CpuState { mmu: Mmu { tlb, pwc: Pwc::new(&p.pwc) }, curpmap: None });
            cpus.push(CpuHw { running: None, killed: None, space: (PhysAddr(0), 0) });
        }
        // Reservations are the size the architecture reserves
        // (VM_LEVEL_0_ORDER, `Pmap::reserv_psind`); without superpage
        // sizes, amd64's 2 MB.
        let sizes = pmap.pagesizes();
        let order = match sizes.get(pmap.reserv_psind()) {
            Some(sp) if sizes.len() > 1 => (sp / sizes[0]).trailing_zeros(),
            _ => splab_vm::phys::VM_LEVEL_0_ORDER as u32,
        };
        let phys = Phys::with_reservation_order(npages, cfg.domains.max(1), order);
        let mem = PhysMem::with_page_shift(npages, sizes[0].trailing_zeros(), cfg.track_contents);
        let timing = Box::new(Timing::new(p)?);
        let mut vm = Vm::new(phys, mem, cpus_vm, pmap);
        // The pmap takes its boot-time memory before anything fragments it.
        let (pmap, mut env) = vm.pmap_env();
        pmap.bootstrap(&mut env);
        if cfg.fragment > 0.0 {
            vm.phys.fragment(cfg.fragment, cfg.seed);
        }
        if age > 0.0 {
            // Runs of `[memory] aged_run` base pages (the profile checked
            // it is a power of two); they must leave a region two runs.
            let run = p.memory.aged_run.unwrap_or(1);
            if run >= 1 << order {
                return Err(format!("machine profile {:?}: memory.aged_run = {run} pages is not less than the {}-page reservation it ages", p.name, 1u32 << order));
            }
            vm.phys.age(age, cfg.seed, run.trailing_zeros() as usize);
        }
        vm.swap = splab_vm::swap::SwapDevice::new(cfg.swap / vm.page_size(), cfg.track_contents);
        Ok(System {
            vm,
            walker,
            cpus,
            timing: Some(timing),
            worker: None,
            spare_refs: Vec::new(),
            spare_walks: Vec::new(),
            kernel_cycles: vec![0.0; p.cpus],
            refs: WalkRefs::default(),
            nested,
            pending_walks: Vec::new(),
            batch: Vec::new(),
            hw: HwStats::default(),
            stale_samples: Vec::new(),
            cfg,
        })
    }

    pub fn ncpus(&self) -> usize {
        self.cpus.len()
    }

    /// Charges the cycle cost of kernel events since `before` to `cpu`.
    fn charge_events(&mut self, cpu: usize, before: &KernelEvents) {
        let c = &self.cfg.profile.costs;
        let e = &self.vm.ev;
        let d = |a: u64, b: u64| (a - b) as f64;
        let cyc = d(e.faults, before.faults) * c.fault as f64
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
            + d(e.swap_ins, before.swap_ins) * c.swap_in_4k as f64;
        self.kernel_cycles[cpu] += cyc;
    }

    /// Takes processes killed for lack of memory off their CPUs, so that
    /// nothing of theirs is used again (their page tables are gone and
    /// their address-space tag may be reused).
    fn reap_killed(&mut self) {
        for c in &mut self.cpus {
            if let Some(pid) = c.running {
                if self.vm.proc(pid).is_none() {
                    c.running = None;
                    c.killed = Some(pid);
                    c.space = (PhysAddr(0), 0);
                }
            }
        }
    }

    /// Processes killed because memory and swap were exhausted, in order.
    pub fn oom_kills(&self) -> &[splab_vm::OomKill] {
        &self.vm.oom_kills
    }

    fn syscall_cpu(&self, pid: Pid) -> usize {
        self.cpus.iter().position(|c| c.running == Some(pid)).unwrap_or(0)
    }

    /// Runs `f` as a syscall of `pid`, charging its kernel work.
    fn syscall<T>(&mut self, pid: Pid, f: impl FnOnce(&mut Vm) -> T) -> T {
        let cpu = self.syscall_cpu(pid);
        let before = self.vm.ev.clone();
        let r = f(&mut self.vm);
        self.charge_events(cpu, &before);
        self.reap_killed();
        r
    }

    pub fn spawn(&mut self) -> Result<Pid, Errno> {
        let r = self.vm.spawn();
        self.reap_killed();
        r
    }
    pub fn mmap(&mut self, pid: Pid, req: MmapReq) -> Result<VirtAddr, Errno> {
        self.syscall(pid, |vm| vm.mmap(pid, req))
    }
    pub fn munmap(&mut self, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        self.syscall(pid, |vm| vm.munmap(pid, addr, len))
    }
    pub fn mprotect(&mut self, pid: Pid, addr: u64, len: u64, p: u8) -> Result<(), Errno> {
        self.syscall(pid, |vm| vm.mprotect(pid, addr, len, p))
    }
    pub fn madvise(&mut self, pid: Pid, addr: u64, len: u64, a: Advice) -> Result<(), Errno> {
        self.syscall(pid, |vm| vm.madvise(pid, addr, len, a))
    }
    /// Per-range superpage advice (`Vm::madvise_superpages`, a splab
    /// extension after Linux's MADV_NOHUGEPAGE / MADV_HUGEPAGE).
    pub fn madvise_superpages(&mut self, pid: Pid, addr: u64, len: u64, allow: bool) -> Result<(), Errno> {
        self.syscall(pid, |vm| vm.madvise_superpages(pid, addr, len, allow))
    }
    pub fn fork(&mut self, pid: Pid) -> Result<Pid, Errno> {
        self.syscall(pid, |vm| vm.fork(pid))
    }
    pub fn exit(&mut self, pid: Pid) -> Result<(), Errno> {
        let r = self.syscall(pid, |vm| vm.exit(pid));
        // Debug builds check every layer's invariants whenever a process
        // goes (buddy lists, reservations, objects, PV lists, page tables).
        if cfg!(debug_assertions) {
            if let Err(e) = self.vm.check_invariants() {
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

    /// Puts `pid` on `cpu` (a context switch: pmap_activate).
    pub fn run_on(&mut self, cpu: usize, pid: Pid) -> Result<(), Errno> {
        if cpu >= self.cpus.len() {
            return Err(Errno::EINVAL);
        }
        let pm = self.vm.proc(pid).ok_or(Errno::ESRCH)?.pmap;
        if self.cpus[cpu].running == Some(pid) {
            return Ok(());
        }
        let before = self.vm.ev.clone();
        let (pmap, mut env) = self.vm.pmap_env();
        pmap.activate(&mut env, pm, cpu);
        self.cpus[cpu].running = Some(pid);
        self.cpus[cpu].killed = None;
        self.cpus[cpu].space = (self.vm.pmap.root(pm), self.vm.pmap.asid(pm));
        self.charge_events(cpu, &before);
        Ok(())
    }

    pub fn running(&self, cpu: usize) -> Option<Pid> {
        self.cpus.get(cpu)?.running
    }

    /// Waits for the timing thread to hand the timing model back.
    fn sync(&mut self) {
        if self.timing.is_none() {
            let job = self.worker.as_ref().expect("timing is with the worker").recv();
            self.timing = Some(job.timing);
            self.spare_refs = job.refs;
            self.spare_walks = job.walks;
        }
    }

    /// The timing model, once any batch in flight is done.
    #[inline]
    fn timing(&mut self) -> &mut Timing {
        if self.timing.is_none() {
            self.sync();
        }
        self.timing.as_mut().unwrap()
    }

    /// Walks the page tables for `va`. The walk's memory references are
    /// appended to `pending_walks`; the caller charges them through the
    /// caches (now, or later in a batch).
    fn walk(&mut self, cpu: usize, root: PhysAddr, asid: u16, va: u64, acc: Access) -> Result<Translation, WalkFault> {
        self.refs.clear();
        let mmu = &mut self.vm.cpus[cpu].mmu;
        let r = self.walker.walk(&mut self.vm.mem, &mut mmu.pwc, root, asid, va, acc, &mut self.refs);
        self.hw.walks += 1;
        self.hw.walk_mem_refs += self.refs.n as u64;
        if let Some(host) = self.nested.get_mut(cpu) {
            // Two-dimensional: each guest table entry's guest-physical
            // address is translated through the host table before it is
            // read, and so is the data address the walk ends with.
            let mut n = 0;
            for &g in self.refs.as_slice() {
                n += host.translate(g, &mut self.pending_walks);
                self.pending_walks.push(g);
            }
            if let Ok(t) = &r {
                n += host.translate(t.pa(va).0, &mut self.pending_walks);
            }
            self.hw.walk_mem_refs += n as u64;
            self.hw.nested_refs += n as u64;
        } else {
            self.pending_walks.extend_from_slice(self.refs.as_slice());
        }
        if let Ok(t) = &r {
            if self.cfg.check_tlb || cfg!(debug_assertions) {
                self.check_walk(cpu, va, t);
            }
        }
        r
    }

    /// Enters a walk's translation in the TLB of `cpu`, which has just
    /// missed `va`. Under nested paging the entry is no larger than the
    /// host's page: a guest superpage over 4 KB host pages is cached as 4
    /// KB pieces, so it shortens walks but does not widen the TLB's reach.
    fn fill_walked(&mut self, cpu: usize, va: u64, asid: u16, t: Translation) {
        let host = self.nested.get(cpu).map_or(t.shift, |h| h.page_shift());
        self.vm.cpus[cpu].mmu.tlb.fill_missed_splintered(va, asid, t, host);
    }

    /// The hardware walk must agree with the pmap's own view of the address
    /// (pmap_extract): same physical address, same write permission.
    fn check_walk(&mut self, cpu: usize, va: u64, t: &Translation) {
        let Some(pid) = self.cpus[cpu].running else { return };
        let pm = self.vm.proc(pid).expect("running process").pmap;
        let view = self.vm.pmap.extract(&self.vm.mem, pm, VirtAddr(va));
        let agree = view.is_some_and(|m| m.pa == t.pa(va) && (m.prot & prot::WRITE != 0) == t.allows(Access::Write));
        if !agree {
            self.hw.stale_translations += 1;
            if self.stale_samples.len() < 10 {
                self.stale_samples.push(format!("va {va:#x}: walker gives {:?}, pmap says {view:?}", t.pa(va)));
            }
            debug_assert!(agree, "walker and pmap disagree at {va:#x}: {t:?} vs {view:?}");
        }
    }

    /// Checks a TLB hit against the page tables: a translation used after
    /// the pmap changed or removed it, or pointing at a freed frame.
    fn check_hit(&mut self, root: PhysAddr, va: u64, t: &Translation, acc: Access) {
        let now = self.walker.probe(&self.vm.mem, root, va);
        let pa = t.pa(va);
        let bad = match now {
            None => Some("page tables have no mapping".to_string()),
            Some(n) if n.pa(va) != pa => Some(format!("page tables map {:?}", n.pa(va))),
            Some(n) if acc == Access::Write && !n.allows(Access::Write) => Some("page tables forbid the write".into()),
            _ if self.vm.phys.buddy.is_free(self.vm.mem.pfn(pa)) => Some("frame is free".into()),
            _ => None,
        };
        if let Some(why) = bad {
            self.hw.stale_translations += 1;
            if self.stale_samples.len() < 10 {
                self.stale_samples.push(format!("va {va:#x} -> {pa:?} ({} TLB entry, {acc:?}): {why}", size_name(t.shift)));
            }
        }
    }

    /// Performs one access by the process running on `cpu`. `dependent`
    /// means the access waits for the previous one (a pointer chase), so
    /// its latency is not overlapped. Returns the value read (or written);
    /// values are only kept when content tracking is on.
    #[inline]
    pub fn access(&mut self, cpu: usize, va: u64, op: Op, dependent: bool) -> Result<u64, FaultError> {
        // Fast path: the same page as the last TLB hit, permitted without a
        // dirty-bit assist, on the line of the last cache access. Its result
        // is what the general path would compute.
        if let (false, false, Some(timing)) = (self.cfg.check_tlb, self.vm.mem.tracks_data(), self.timing.as_mut()) {
            let asid = self.cpus[cpu].space.1;
            let tlb = &mut self.vm.cpus[cpu].mmu.tlb;
            if let Some((t, m)) = tlb.memo(va, asid) {
                let need = need(op_access(op));
                let pa = t.pa(va).0;
                if t.perm & need == need && timing.charge_same_line(cpu, pa, dependent, matches!(op, Op::Store(_))) {
                    tlb.count_memo_hit(m);
                    self.hw.refs += 1;
                    return Ok(match op {
                        Op::Load => {
                            self.hw.loads += 1;
                            0
                        }
                        Op::Store(v) => {
                            self.hw.stores += 1;
                            v
                        }
                    });
                }
            }
        }
        self.access_general(cpu, va, op, dependent)
    }

    /// The hardware's translation of `va` for `acc`: TLB lookup, walk on a
    /// miss, dirty-bit assist, and page faults resolved by the kernel, until
    /// a usable translation is found. Returns it with the fixed cycles of
    /// TLB lookups and assists; walk references are left in `pending_walks`.
    #[inline(always)]
    fn translate(&mut self, cpu: usize, va: u64, acc: Access) -> Result<(Translation, u32), FaultError> {
        // The most common case, inline: the page of a recent first-level
        // hit (see `Tlb::memo`), permitted as it is. `lookup` makes the same
        // check first, so the outcome and the counts are its own.
        let asid = self.cpus[cpu].space.1;
        let tlb = &mut self.vm.cpus[cpu].mmu.tlb;
        let memo = tlb.memo(va, asid);
        if let Some((t, m)) = memo {
            let need = need(acc);
            if t.perm & need == need && !self.cfg.check_tlb {
                tlb.count_memo_hit(m);
                return Ok((t, 0));
            }
        }
        self.translate_lookup(cpu, va, acc, memo.is_some())
    }

    /// `translate` past the recent hits: `memo` says whether `va` is in
    /// the page of one (which did not permit the access).
    #[inline(never)]
    fn translate_lookup(&mut self, cpu: usize, va: u64, acc: Access, memo: bool) -> Result<(Translation, u32), FaultError> {
        // The common case: a TLB hit that permits the access as it is.
        let asid = self.cpus[cpu].space.1;
        let tlb = &mut self.vm.cpus[cpu].mmu.tlb;
        let hit = if memo { tlb.lookup(va, asid) } else { tlb.lookup_past_memos(va, asid) };
        if let Some((t, lvl)) = hit {
            let need = need(acc);
            if t.perm & need == need && !self.cfg.check_tlb {
                let x = if lvl == TlbHit::L2 { self.cfg.profile.costs.stlb_hit } else { 0 };
                return Ok((t, x));
            }
        }
        self.translate_slow(cpu, va, acc, hit)
    }

    #[inline(never)]
    fn translate_slow(&mut self, cpu: usize, va: u64, acc: Access, first: Option<(Translation, TlbHit)>) -> Result<(Translation, u32), FaultError> {
        let Some(pid) = self.cpus[cpu].running else {
            return Err(match self.cpus[cpu].killed {
                Some(k) => FaultError::Killed(k),
                None => FaultError::NoProcess(u32::MAX),
            });
        };
        let (root, asid) = self.cpus[cpu].space;
        let mut xlat: u32 = 0;
        let mut tries = 0;
        let mut first = Some(first);
        loop {
            tries += 1;
            let hit = match first.take() {
                Some(h) => h,
                None => self.vm.cpus[cpu].mmu.tlb.lookup(va, asid),
            };
            let res = match hit {
                Some((t, lvl)) => {
                    if lvl == TlbHit::L2 {
                        xlat += self.cfg.profile.costs.stlb_hit;
                    }
                    if !t.allows(acc) {
                        // A fault drops the entry; the handler decides.
                        self.vm.cpus[cpu].mmu.tlb.invalidate_page(va, asid);
                        Err(WalkFault::Protection)
                    } else if acc == Access::Write && t.perm & perm::DIRTY == 0 {
                        // The processor re-walks to set the dirty bit.
                        self.hw.dirty_assists += 1;
                        xlat += self.cfg.profile.costs.dirty_assist;
                        let r = self.walk(cpu, root, asid, va, acc);
                        self.vm.cpus[cpu].mmu.tlb.invalidate_page(va, asid);
                        if let Ok(n) = r {
                            self.fill_walked(cpu, va, asid, n);
                        }
                        r
                    } else {
                        // The entry is used as it is: it must still be right.
                        if self.cfg.check_tlb {
                            self.check_hit(root, va, &t, acc);
                        }
                        Ok(t)
                    }
                }
                None => {
                    let c = &self.cfg.profile.costs;
                    xlat += c.stlb_hit + c.walk.unwrap_or(0);
                    let r = self.walk(cpu, root, asid, va, acc);
                    if let Ok(t) = r {
                        self.vm.cpus[cpu].mmu.tlb.count_miss(t.shift);
                        self.fill_walked(cpu, va, asid, t);
                    }
                    r
                }
            };
            match res {
                Ok(t) => return Ok((t, xlat)),
                Err(WalkFault::BadAddress) => {
                    self.vm.stats.segfaults += 1;
                    return Err(FaultError::Unmapped(va));
                }
                Err(_) => {
                    if tries > 4 {
                        return Err(FaultError::Unresolved(va));
                    }
                    // A page fault drops the TLB and paging-structure cache
                    // entries the processor used for the address.
                    let mmu = &mut self.vm.cpus[cpu].mmu;
                    mmu.tlb.invalidate_page(va, asid);
                    mmu.pwc.invalidate_asid(asid);
                    self.hw.faults_taken += 1;
                    let before = self.vm.ev.clone();
                    let r = self.vm.trap(pid, va, access_prot(acc));
                    self.charge_events(cpu, &before);
                    if !self.vm.oom_kills.is_empty() {
                        self.reap_killed();
                        if self.cpus[cpu].running != Some(pid) {
                            return Err(FaultError::Killed(pid));
                        }
                    }
                    r?;
                }
            }
        }
    }

    /// The word at `pa` as modelled memory holds it (0 when values are not
    /// kept).
    #[inline]
    fn read_word(&self, pa: u64) -> u64 {
        if self.vm.mem.tracks_data() {
            self.vm.mem.read_u64(PhysAddr(pa & !7))
        } else {
            0
        }
    }

    /// Performs the load or store itself on modelled memory.
    #[inline]
    fn do_op(&mut self, pa: u64, op: Op) -> u64 {
        let word = PhysAddr(pa & !7);
        match op {
            Op::Load => {
                self.hw.loads += 1;
                self.read_word(pa)
            }
            Op::Store(v) => {
                self.hw.stores += 1;
                self.vm.mem.store_data(word, v);
                v
            }
        }
    }

    #[inline(never)]
    fn access_general(&mut self, cpu: usize, va: u64, op: Op, dependent: bool) -> Result<u64, FaultError> {
        let acc = op_access(op);
        self.hw.refs += 1;
        self.pending_walks.clear();
        let (t, xlat) = self.translate(cpu, va, acc)?;
        let pa = t.pa(va).0;
        let walks = std::mem::take(&mut self.pending_walks);
        self.timing().charge(cpu, xlat, &walks, pa, dependent, acc == Access::Write);
        self.pending_walks = walks;
        self.pending_walks.clear();
        Ok(self.do_op(pa, op))
    }

    /// Runs a batch of independent accesses by the process on `cpu`, in
    /// order, with the same results as calling `access` for each. Each
    /// `(va, x)` is a read-modify-write: a load of the word at va, then a
    /// store of (value ^ x), as in GUPS's update. The batch is executed in
    /// two passes: first every translation in order (TLB, walks, faults,
    /// values), then the timing model over the recorded references in the
    /// same order (`Timing::run_batch`, on the timing thread for large
    /// batches). Neither model reads the other's state, so the outcome is
    /// the same as one access at a time.
    pub fn xor_batch(&mut self, cpu: usize, ops: &[(u64, u64)]) -> Result<(), FaultError> {
        self.pending_walks.clear();
        self.batch.clear();
        for &(va, x) in ops {
            self.batch_one(cpu, va, Access::Read, |_| None)?;
            self.batch_one(cpu, va, Access::Write, |old| Some(old ^ x))?;
        }
        self.finish_batch(cpu);
        Ok(())
    }

    /// Runs a batch of independent loads and stores by the process on
    /// `cpu` (a trace, a streaming kernel), in order, two-pass as
    /// `xor_batch` does, with the same results as calling `access` with
    /// `dependent` false for each. On a fault the accesses before it have
    /// been made and timed; the error tells which failed.
    pub fn access_batch(&mut self, cpu: usize, ops: &[(u64, Op)]) -> Result<(), (usize, FaultError)> {
        self.pending_walks.clear();
        self.batch.clear();
        for (i, &(va, op)) in ops.iter().enumerate() {
            let r = match op {
                Op::Load => self.batch_one(cpu, va, Access::Read, |_| None),
                Op::Store(v) => self.batch_one(cpu, va, Access::Write, |_| Some(v)),
            };
            r.map_err(|e| (i, e))?;
        }
        self.finish_batch(cpu);
        Ok(())
    }

    /// One access of a batch: translated now, timed when the batch ends.
    /// `store` gets the word's old value and returns the value to store,
    /// or None for a load.
    #[inline]
    fn batch_one(&mut self, cpu: usize, va: u64, acc: Access, store: impl Fn(u64) -> Option<u64>) -> Result<(), FaultError> {
        self.hw.refs += 1;
        let w0 = self.pending_walks.len();
        let (t, xlat) = match self.translate(cpu, va, acc) {
            Ok(r) => r,
            Err(e) => {
                self.finish_batch(cpu);
                return Err(e);
            }
        };
        let pa = t.pa(va).0;
        self.batch.push(BatchRef { pa, xlat, walks_end: self.pending_walks.len() as u32, walks_start: w0 as u32, write: acc == Access::Write });
        let op = match store(self.read_word(pa)) {
            Some(v) => Op::Store(v),
            None => Op::Load,
        };
        self.do_op(pa, op);
        Ok(())
    }

    /// The second pass of a batch: the cache model over the references in
    /// order, on the timing thread when the batch is large enough to be
    /// worth it (the caller goes on translating the next batch meanwhile).
    fn finish_batch(&mut self, cpu: usize) {
        self.sync();
        if self.batch.len() < BATCH_THREAD_MIN || !self.cfg.timing_thread {
            let t = self.timing.as_mut().unwrap();
            t.run_batch(cpu, &self.batch, &self.pending_walks);
            self.batch.clear();
            self.pending_walks.clear();
            return;
        }
        let worker = self.worker.get_or_insert_with(Worker::spawn);
        let refs = std::mem::replace(&mut self.batch, std::mem::take(&mut self.spare_refs));
        let walks = std::mem::replace(&mut self.pending_walks, std::mem::take(&mut self.spare_walks));
        let timing = self.timing.take().unwrap();
        worker.send(Job { timing, cpu, refs, walks });
        self.batch.clear();
        self.pending_walks.clear();
    }

    pub fn load(&mut self, cpu: usize, va: u64) -> Result<u64, FaultError> {
        self.access(cpu, va, Op::Load, false)
    }
    pub fn store(&mut self, cpu: usize, va: u64, v: u64) -> Result<u64, FaultError> {
        self.access(cpu, va, Op::Store(v), false)
    }

    /// Tells the timing model the loop `cpu` runs from now on (None: no
    /// loop in particular), so that its independent references cost at
    /// least the share of their latency the core's window allows it
    /// (`Profile::window_share`; nothing changes where the profile has no
    /// window).
    pub fn set_loop(&mut self, cpu: usize, l: Option<LoopShape>) {
        let share = l.map_or(0.0, |l| self.cfg.profile.window_share(&l));
        self.timing().set_share(cpu, share);
    }

    /// Cycles CPU `cpu` has spent so far (accesses and kernel work).
    pub fn cycles(&mut self, cpu: usize) -> f64 {
        self.timing().cycles[cpu] + self.kernel_cycles[cpu]
    }

    /// Counts of what the hardware did.
    pub fn hw(&mut self) -> HwStats {
        let t = self.timing();
        let (hits, dram, pf, wb) = (t.cache_hits, t.dram_accesses, t.prefetched, t.writebacks);
        let mut h = self.hw.clone();
        h.cache_hits = hits;
        h.dram_accesses = dram;
        h.prefetched = pf;
        h.writebacks = wb;
        h
    }

    /// Every sysctl: the VM's and the pmap's, and with nested paging the
    /// host walk's counters.
    pub fn sysctls(&self) -> splab_vm::sysctl::Sysctls {
        let mut s = self.vm.sysctls();
        if let Some(v) = self.cfg.profile.nested() {
            let sum = |f: fn(&HostWalk) -> u64| self.nested.iter().map(f).sum::<u64>();
            s.text("splab.virt.host_page", v.host_page.clone(), "Page size the host backs guest memory with (nested paging)");
            s.int("splab.walk.nested_refs", sum(|h| h.refs), "Host page-table references made by two-dimensional walks");
            s.int("splab.walk.nested_walks", sum(|h| h.walks), "Host walks (guest-physical addresses the nested TLB missed)");
            s.int("splab.walk.ntlb_hits", sum(|h| h.ntlb_hits), "Guest-physical addresses translated by the nested TLB");
        }
        s
    }

    /// Where the cycles went.
    pub fn breakdown(&mut self) -> CycleBreakdown {
        let mut b = self.timing().breakdown.clone();
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
        let shifts = self.walker.page_shifts().to_vec();
        let mut r = TlbReport { sizes: shifts.iter().map(|&s| size_name(s)).collect(), ..Default::default() };
        let n = shifts.len();
        r.l1_hits = vec![0; n];
        r.l2_hits = vec![0; n];
        r.misses = vec![0; n];
        for c in &self.vm.cpus {
            let s = &c.mmu.tlb.stats;
            for i in 0..n.min(s.l1_hits.len()) {
                r.l1_hits[i] += s.l1_hits[i];
                r.l2_hits[i] += s.l2_hits[i];
                r.misses[i] += s.misses[i];
            }
            r.lookups += s.lookups;
            r.pwc_hits += c.mmu.pwc.hits;
            r.pwc_misses += c.mmu.pwc.misses;
        }
        r.total_misses = r.misses.iter().sum();
        r
    }

    /// Host memory the model holds (page array, reservations, stored
    /// frames, PV entries), not counting caches of the timing model.
    pub fn model_host_bytes(&self) -> u64 {
        self.vm.host_bytes()
    }

    pub fn mem(&self) -> &PhysMem {
        &self.vm.mem
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
