//! A running system: the kernel's VM and the architecture's pmap on the
//! modelled machine. Programs (workloads, the checker) drive it through
//! processes: syscalls, and loads and stores issued on a CPU.
//!
//! The access path is the hardware's: TLB lookup; on a miss, the walker
//! reads the page tables from modelled memory; a write through a clean TLB
//! entry re-walks to set the dirty bit; a walk that faults enters the
//! kernel's fault handler and the access is retried. Each step is charged
//! in cycles from the machine profile.

use serde::Serialize;
use splab_hw::cache::Cache;
use splab_hw::mmu::{perm, Access, Mmu, Translation, WalkFault, WalkRefs, Walker};
use splab_hw::physmem::PhysMem;
use splab_hw::profile::Profile;
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
    pub superpages: bool,
    /// Keep the value of every written word (needed to check contents).
    pub track_contents: bool,
    /// Check every TLB hit against the page tables (stale translations).
    pub check_tlb: bool,
    /// Fraction of free 2 MB blocks broken up at start.
    pub fragment: f64,
    pub seed: u64,
    pub domains: usize,
}

impl Config {
    pub fn new(profile: Profile) -> Config {
        Config {
            arch: profile.arch.clone(),
            profile,
            memory: 8 << 30,
            superpages: true,
            track_contents: false,
            check_tlb: false,
            fragment: 0.0,
            seed: 1,
            domains: 1,
        }
    }
}

/// Counts of what the hardware did, summed over CPUs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HwStats {
    pub refs: u64,
    pub loads: u64,
    pub stores: u64,
    pub walks: u64,
    pub walk_mem_refs: u64,
    pub dirty_assists: u64,
    pub faults_taken: u64,
    pub stale_translations: u64,
    pub cache_hits: [u64; 3],
    pub dram_accesses: u64,
}

/// Where the time went, in cycles, summed over CPUs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CycleBreakdown {
    pub data: f64,
    pub translation: f64,
    pub kernel: f64,
}

struct CpuHw {
    l1: Cache,
    l2: Cache,
    cycles: f64,
    running: Option<Pid>,
    /// Page-table root and ASID of the running process (fixed for its life).
    space: (PhysAddr, u16),
}

pub struct System {
    pub vm: Vm,
    pub cfg: Config,
    walker: Box<dyn Walker>,
    cpus: Vec<CpuHw>,
    l3: Cache,
    dram: u32,
    refs: WalkRefs,
    /// 1 / the profile's overlap factors.
    inv_walk_mlp: f64,
    inv_data_mlp: f64,
    pub hw: HwStats,
    pub breakdown: CycleBreakdown,
    /// The first few stale translations seen, for diagnosis.
    pub stale_samples: Vec<String>,
}

/// One memory access to perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Load,
    Store(u64),
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
        if p.arch != cfg.arch {
            return Err(format!("machine profile {:?} is an {} machine, not {}", p.name, p.arch, cfg.arch));
        }
        let npages = cfg.memory / 4096;
        if !(16 << 20..=256 << 30).contains(&cfg.memory) {
            return Err(format!("memory size {} bytes is out of range (16 MiB to 256 GiB)", cfg.memory));
        }
        if !(0.0..=1.0).contains(&cfg.fragment) {
            return Err(format!("fragmentation {} is out of range (0 to 1)", cfg.fragment));
        }
        let walker = splab_pmap::new_walker(&cfg.arch)?;
        let pmap = splab_pmap::new_pmap(&cfg.arch, npages, cfg.superpages)?;
        let mut cpus_vm = Vec::new();
        let mut cpus = Vec::new();
        for _ in 0..p.cpus {
            let tlb = Tlb::new(&p.tlb, walker.page_shifts())?;
            cpus_vm.push(CpuState { mmu: Mmu { tlb, pwc: Pwc::new(&p.pwc) }, curpmap: None });
            cpus.push(CpuHw { l1: Cache::new(&p.cache.l1d)?, l2: Cache::new(&p.cache.l2)?, cycles: 0.0, running: None, space: (PhysAddr(0), 0) });
        }
        let mut phys = Phys::new(npages, cfg.domains.max(1));
        if cfg.fragment > 0.0 {
            phys.fragment(cfg.fragment, cfg.seed);
        }
        let mem = PhysMem::new(npages, cfg.track_contents);
        let vm = Vm::new(phys, mem, cpus_vm, pmap);
        Ok(System {
            vm,
            walker,
            cpus,
            l3: Cache::new(&p.cache.l3)?,
            dram: p.dram_cycles(),
            refs: WalkRefs::default(),
            inv_walk_mlp: 1.0 / p.overlap.walk_mlp,
            inv_data_mlp: 1.0 / p.overlap.data_mlp,
            hw: HwStats::default(),
            breakdown: CycleBreakdown::default(),
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
            + d(e.context_switches, before.context_switches) * c.context_switch as f64;
        self.cpus[cpu].cycles += cyc;
        self.breakdown.kernel += cyc;
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
        r
    }

    pub fn spawn(&mut self) -> Result<Pid, Errno> {
        self.vm.spawn()
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
    pub fn fork(&mut self, pid: Pid) -> Result<Pid, Errno> {
        self.syscall(pid, |vm| vm.fork(pid))
    }
    pub fn exit(&mut self, pid: Pid) -> Result<(), Errno> {
        let cpu = self.syscall_cpu(pid);
        let r = self.syscall(pid, |vm| vm.exit(pid));
        if self.cpus[cpu].running == Some(pid) {
            self.cpus[cpu].running = None;
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
        self.cpus[cpu].space = (self.vm.pmap.root(pm), self.vm.pmap.asid(pm));
        self.charge_events(cpu, &before);
        Ok(())
    }

    pub fn running(&self, cpu: usize) -> Option<Pid> {
        self.cpus.get(cpu)?.running
    }

    /// Latency of one access to physical address `pa` through the caches.
    #[inline]
    fn mem_latency(&mut self, cpu: usize, pa: u64) -> u32 {
        let c = &mut self.cpus[cpu];
        if c.l1.access(pa) {
            self.hw.cache_hits[0] += 1;
            return c.l1.latency;
        }
        if c.l2.access(pa) {
            self.hw.cache_hits[1] += 1;
            return c.l2.latency;
        }
        if self.l3.access(pa) {
            self.hw.cache_hits[2] += 1;
            return self.l3.latency;
        }
        self.hw.dram_accesses += 1;
        self.dram
    }

    /// Walks the page tables for `va`, charging the walk's memory references.
    fn walk(&mut self, cpu: usize, root: PhysAddr, asid: u16, va: u64, acc: Access) -> (Result<Translation, WalkFault>, u32) {
        self.refs.clear();
        let mmu = &mut self.vm.cpus[cpu].mmu;
        let r = self.walker.walk(&mut self.vm.mem, &mut mmu.pwc, root, asid, va, acc, &mut self.refs);
        self.hw.walks += 1;
        let mut lat = 0;
        for i in 0..self.refs.n {
            let pa = self.refs.pa[i];
            lat += self.mem_latency(cpu, pa);
        }
        self.hw.walk_mem_refs += self.refs.n as u64;
        (r, lat)
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
            _ if self.vm.phys.buddy.is_free(pa.pfn()) => Some("frame is free".into()),
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
    pub fn access(&mut self, cpu: usize, va: u64, op: Op, dependent: bool) -> Result<u64, FaultError> {
        let pid = self.cpus[cpu].running.ok_or(FaultError::NoProcess(u32::MAX))?;
        let (root, asid) = self.cpus[cpu].space;
        let acc = if matches!(op, Op::Load) { Access::Read } else { Access::Write };
        self.hw.refs += 1;
        let mut xlat: u32 = 0;
        let mut tries = 0;
        let t = loop {
            tries += 1;
            let hit = self.vm.cpus[cpu].mmu.tlb.lookup(va, asid);
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
                        let (r, lat) = self.walk(cpu, root, asid, va, acc);
                        xlat += lat;
                        self.vm.cpus[cpu].mmu.tlb.invalidate_page(va, asid);
                        if let Ok(n) = r {
                            self.vm.cpus[cpu].mmu.tlb.fill(va, asid, n);
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
                    xlat += self.cfg.profile.costs.stlb_hit;
                    let (r, lat) = self.walk(cpu, root, asid, va, acc);
                    xlat += lat;
                    if let Ok(t) = r {
                        self.vm.cpus[cpu].mmu.tlb.count_miss(t.shift);
                        self.vm.cpus[cpu].mmu.tlb.fill(va, asid, t);
                    }
                    r
                }
            };
            match res {
                Ok(t) => break t,
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
                    let r = self.vm.fault(pid, va, access_prot(acc));
                    self.charge_events(cpu, &before);
                    r?;
                }
            }
        };
        let pa = t.pa(va);
        let data = self.mem_latency(cpu, pa.0);
        let (xc, dc) = if dependent {
            (xlat as f64, data as f64)
        } else {
            (xlat as f64 * self.inv_walk_mlp, data as f64 * self.inv_data_mlp)
        };
        let cyc = (xc + dc).max(1.0);
        self.cpus[cpu].cycles += cyc;
        self.breakdown.translation += xc;
        self.breakdown.data += cyc - xc;
        let word = PhysAddr(pa.0 & !7);
        match op {
            Op::Load => {
                self.hw.loads += 1;
                Ok(if self.vm.mem.tracks_data() { self.vm.mem.read_u64(word) } else { 0 })
            }
            Op::Store(v) => {
                self.hw.stores += 1;
                self.vm.mem.store_data(word, v);
                Ok(v)
            }
        }
    }

    pub fn load(&mut self, cpu: usize, va: u64) -> Result<u64, FaultError> {
        self.access(cpu, va, Op::Load, false)
    }
    pub fn store(&mut self, cpu: usize, va: u64, v: u64) -> Result<u64, FaultError> {
        self.access(cpu, va, Op::Store(v), false)
    }

    pub fn cycles(&self, cpu: usize) -> f64 {
        self.cpus[cpu].cycles
    }

    /// Simulated time so far: the busiest CPU's cycles at the profile's clock.
    pub fn sim_seconds(&self) -> f64 {
        let c = self.cpus.iter().map(|c| c.cycles).fold(0.0, f64::max);
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
