//! The kernel's virtual memory state as one value: physical pages and
//! their metadata, objects, processes, which address space each CPU runs,
//! and the architecture's pmap. It owns no hardware: operations that read
//! or write memory or reach the CPUs' TLBs borrow the `Machine` they run on.
//! Object operations that need the pmap (termination, collapse, page
//! removal) live here, with the swap pager's part in them (freeing and
//! moving swap slots); maps and syscalls in map.rs; faults in fault.rs;
//! the page daemon in pageout.rs.

use crate::map::VmMap;
use crate::object::{oflags, ObjKind, Objects};
use crate::page::{pflags, pq, ObjId};
use crate::physalloc::Phys;
use crate::policy::Policy;
use crate::pmap::{KernelEvents, Pmap, PmapEnv, PmapId};
use crate::swap::{SwapDevice, SwapPage};
use crate::sysctl::Sysctls;
use splab_hw::machine::Machine;
use splab_hw::Pfn;
use std::collections::HashMap;

pub type Pid = u32;

pub struct Proc {
    pub pid: Pid,
    pub map: VmMap,
    pub pmap: PmapId,
}

pub struct File {
    pub size: u64,
    pub object: ObjId,
    /// Pages written back by the page daemon, by offset (kept only when
    /// memory contents are tracked); others read as `file_word`.
    pub written: HashMap<u32, SwapPage>,
}

/// The page daemon's counters (vm.stats.vm.*).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PageoutStats {
    /// v_pdpages: pages analysed by the daemon.
    pub v_pdpages: u64,
    /// v_dfree: pages freed by the daemon.
    pub v_dfree: u64,
    /// v_reactivated: pages reactivated by the daemon.
    pub v_reactivated: u64,
    /// v_pdshortfalls: passes whose inactive scan fell short of the target.
    pub v_pdshortfalls: u64,
    /// v_vnodeout / v_vnodepgsout: file write-backs and pages written.
    pub v_vnodeout: u64,
    pub v_vnodepgsout: u64,
    /// Passes run (splab.vm.pageout.passes).
    pub passes: u64,
    /// Clean superpages freed whole, without demotion
    /// (splab.vm.pageout.superpages_freed).
    pub superpages_freed: u64,
    /// Pages moved from the active queue to the inactive or laundry queue.
    pub deactivated: u64,
}

/// A process killed because memory and swap were exhausted
/// (vm_pageout_oom's victim), as the simulator reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OomKill {
    pub pid: Pid,
    /// Its size as vm_pageout_oom compares them: resident pages of the
    /// objects it maps plus their pages on swap.
    pub size_pages: u64,
    pub resident_pages: u64,
    pub swap_pages: u64,
    /// FreeBSD's words: "out of swap space" when swap is full or absent,
    /// "failed to reclaim memory" otherwise.
    pub reason: String,
    /// The process whose allocation could not be satisfied (None for an
    /// allocation outside a process, such as creating one).
    pub trigger: Option<Pid>,
    /// Free pages, and swap slots used of all, when it was chosen.
    pub free_pages: u64,
    pub swap_used: u64,
    pub swap_total: u64,
}

impl std::fmt::Display for OomKill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} killed: {} ({} pages: {} resident, {} on swap; {} free pages, swap {}/{} slots",
            self.pid, self.reason, self.size_pages, self.resident_pages, self.swap_pages, self.free_pages, self.swap_used, self.swap_total
        )?;
        match self.trigger {
            Some(t) => write!(f, "; fault of pid {t} waiting)"),
            None => write!(f, ")"),
        }
    }
}

/// Machine-independent counters of the VM itself (vm.stats.vm.*).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VmStats {
    pub v_vm_faults: u64,
    pub v_cow_faults: u64,
    pub v_zfod: u64,
    pub v_forks: u64,
    pub soft_fast_superpage: u64,
    pub collapses: u64,
    pub segfaults: u64,
    /// v_vnodein / v_vnodepgsin: file page-ins and pages read.
    pub v_vnodein: u64,
    pub v_vnodepgsin: u64,
}

pub struct Kernel {
    pub phys: Phys,
    /// Per CPU, the address space it runs (pc_curpmap).
    pub curpmap: Vec<Option<PmapId>>,
    /// log2 of the base page size (PAGE_SHIFT): the pmap's smallest size.
    page_shift: u32,
    pub objects: Objects,
    pub procs: Vec<Option<Proc>>,
    pub files: Vec<File>,
    pub pmap: Box<dyn Pmap>,
    pub ev: KernelEvents,
    pub stats: VmStats,
    /// The swap device (no slots unless configured).
    pub swap: SwapDevice,
    pub pd: PageoutStats,
    /// Processes killed for lack of memory and swap, in order.
    pub oom_kills: Vec<OomKill>,
    /// Pages the fault in progress allocated (FreeBSD keeps them
    /// exclusive-busied until the fault is done): the page daemon passes
    /// them over, so a fault that waits for memory after paging one in
    /// finds it again instead of having it freed under it and paging it
    /// in again for ever.
    pub(crate) busy: Vec<Pfn>,
    /// The superpage policy; None only while it is deciding (it borrows
    /// the kernel: `with_policy`).
    policy: Option<Box<dyn Policy>>,
    /// Whether the policy allocates eagerly at faults (it does not use
    /// reservations), cached for the fault path.
    eager: bool,
    /// The policy's `soft_fault_superpages`.
    pub(crate) soft_fault_superpages: bool,
    /// Where direct compaction's scan goes on from, in blocks.
    pub(crate) compact_cursor: u64,
}

impl Kernel {
    /// A kernel for `ncpus` CPUs over the pages of `phys`; the base page
    /// size is the pmap's (`pagesizes()[0]`), and the machine it runs on
    /// must have physical frames of that size.
    pub fn new(phys: Phys, ncpus: usize, pmap: Box<dyn Pmap>) -> Kernel {
        let page = pmap.pagesizes()[0];
        // The page daemon's targets, in frames of the base page size.
        let mut phys = phys;
        phys.targets = crate::physalloc::PageoutTargets::for_pages_of(phys.buddy.npages(), page);
        Kernel {
            phys,
            curpmap: vec![None; ncpus],
            page_shift: page.trailing_zeros(),
            objects: Objects::default(),
            procs: Vec::new(),
            files: Vec::new(),
            pmap,
            ev: KernelEvents::default(),
            stats: VmStats::default(),
            swap: SwapDevice::new(0, false),
            pd: PageoutStats::default(),
            oom_kills: Vec::new(),
            busy: Vec::new(),
            policy: Some(Box::<crate::policy::freebsd::FreeBsd>::default()),
            eager: false,
            soft_fault_superpages: true,
            compact_cursor: 0,
        }
    }

    /// log2 of the base page size (PAGE_SHIFT): 12, or 13 on the Alpha.
    #[inline]
    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// Bytes in a base page (PAGE_SIZE).
    #[inline]
    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    /// Installs the superpage policy (before any process runs): FreeBSD's
    /// reservations are used only by a policy that wants them.
    pub fn set_policy(&mut self, p: Box<dyn Policy>) {
        self.phys.reserv.enabled = p.reservations();
        self.eager = !p.reservations();
        self.soft_fault_superpages = p.soft_fault_superpages();
        self.policy = Some(p);
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.as_ref().map_or("", |p| p.name())
    }

    /// Runs `f` with the policy and the kernel it decides for; None if the
    /// policy is already deciding (a call from inside one of its own).
    pub fn with_policy<T>(&mut self, f: impl FnOnce(&mut dyn Policy, &mut Kernel) -> T) -> Option<T> {
        let mut p = self.policy.take()?;
        let r = f(p.as_mut(), self);
        self.policy = Some(p);
        Some(r)
    }

    /// The policy, to read.
    pub fn policy(&self) -> Option<&dyn Policy> {
        self.policy.as_deref()
    }

    /// Whether the policy allocates eagerly at faults.
    pub(crate) fn eager(&self) -> bool {
        self.eager
    }

    /// Splits the borrows: the pmap and what it may touch, of the kernel
    /// and of the machine `m` it runs on.
    pub fn pmap_env<'a>(&'a mut self, m: &'a mut Machine) -> (&'a mut dyn Pmap, PmapEnv<'a>) {
        (
            self.pmap.as_mut(),
            PmapEnv { phys: &mut self.phys, mem: &mut m.mem, mmu: &mut m.mmu, curpmap: &mut self.curpmap, ev: &mut self.ev },
        )
    }

    pub fn proc(&self, pid: Pid) -> Option<&Proc> {
        self.procs.get(pid as usize)?.as_ref()
    }

    pub fn proc_mut(&mut self, pid: Pid) -> Option<&mut Proc> {
        self.procs.get_mut(pid as usize)?.as_mut()
    }


    /// Creates a file of `size` bytes with its (empty) page cache object.
    pub fn create_file(&mut self, size: u64) -> u32 {
        let id = self.files.len() as u32;
        let pages = size.div_ceil(self.page_size());
        let object = self.objects.allocate(ObjKind::Vnode { file: id }, pages, 0);
        self.files.push(File { size, object, written: HashMap::new() });
        id
    }

    /// Frees one page of an object, removing any mappings of it first.
    pub(crate) fn free_object_page(&mut self, hw: &mut Machine, obj: ObjId, pindex: u32, pfn: Pfn) {
        let removed = self.objects.get_mut(obj).pages.remove(&pindex);
        debug_assert_eq!(removed, Some(pfn));
        let (pmap, mut env) = self.pmap_env(hw);
        if pmap.page_is_mapped(&env, pfn) {
            pmap.remove_all(&mut env, pfn);
        }
        if self.phys.pages.get(pfn).has(pflags::LARGEPAGE) {
            return; // freed with its run when the object dies
        }
        hw.mem.forget(pfn);
        self.phys.free_page(pfn);
    }

    /// Frees the object's pages in [start, end) and their swap slots
    /// (vm_object_page_remove with swap_pager_freespace).
    pub fn object_page_remove(&mut self, hw: &mut Machine, obj: ObjId, start: u32, end: u32) {
        let victims: Vec<(u32, Pfn)> = self.objects.get(obj).pages.range(start..end).map(|(&p, &f)| (p, f)).collect();
        for (p, f) in victims {
            self.free_object_page(hw, obj, p, f);
        }
        self.swap_pager_freespace(obj, start, end);
    }

    /// Frees the swap slots of the object's offsets in [start, end)
    /// (swap_pager_freespace).
    pub fn swap_pager_freespace(&mut self, obj: ObjId, start: u32, end: u32) {
        let o = self.objects.get_mut(obj);
        if o.swblk.is_empty() || start >= end {
            return;
        }
        let slots: Vec<u32> = o.swblk.range(start..end).map(|(&p, _)| p).collect();
        for p in slots {
            let s = o.swblk.remove(&p).unwrap();
            self.swap.free(s);
        }
    }

    /// Frees the swap slot of page `m`'s offset, if any: the page is being
    /// modified, so the copy on swap is stale (vm_pager_page_unswapped).
    pub fn page_unswapped(&mut self, m: Pfn) {
        let p = self.phys.pages.get(m);
        let (obj, pindex) = (p.object, p.pindex);
        if obj != 0 {
            if let Some(s) = self.objects.get_mut(obj).swblk.remove(&pindex) {
                self.swap.free(s);
            }
        }
    }

    pub fn object_reference(&mut self, obj: ObjId) {
        if obj != 0 {
            self.objects.get_mut(obj).ref_count += 1;
        }
    }

    /// Drops a reference (vm_object_deallocate). At zero the object is
    /// terminated and its backing object released; when only the single
    /// shadow still refers to a backing object, that shadow absorbs it.
    pub fn object_deallocate(&mut self, hw: &mut Machine, obj: ObjId) {
        let mut obj = obj;
        while obj != 0 {
            let o = self.objects.get_mut(obj);
            debug_assert!(o.ref_count > 0);
            o.ref_count -= 1;
            if o.ref_count == 1 && o.shadows.len() == 1 && o.is_anon() {
                let shadow = o.shadows[0];
                self.object_collapse(hw, shadow);
                return;
            }
            if o.ref_count > 0 {
                return;
            }
            // Terminate (vm_object_terminate).
            let pages: Vec<(u32, Pfn)> = o.pages.iter().map(|(&p, &f)| (p, f)).collect();
            for (p, f) in pages {
                self.free_object_page(hw, obj, p, f);
            }
            // swap_pager_dealloc.
            self.swap_pager_freespace(obj, 0, u32::MAX);
            let dead = self.objects.destroy(obj);
            if let ObjKind::LargePage { base } = dead.kind {
                for i in 0..dead.size {
                    *self.phys.pages.get_mut(Pfn(base.0 + i as u32)) = crate::page::VmPage::FREE;
                }
                self.phys.buddy.free_contig(base, dead.size);
            }
            let b = dead.backing;
            if b != 0 {
                self.objects.get_mut(b).shadows.retain(|&s| s != obj);
            }
            obj = b;
        }
    }

    /// Creates a shadow of `backing` for copy-on-write (vm_object_shadow):
    /// the new object's offset 0 is the backing object's `offset`. The
    /// caller's reference to `backing` moves to the shadow.
    pub fn object_shadow(&mut self, backing: ObjId, offset: u64, size: u64, color: u32) -> ObjId {
        let s = self.objects.allocate(ObjKind::Anon, size, color);
        let so = self.objects.get_mut(s);
        so.backing = backing;
        so.backing_offset = offset;
        self.objects.get_mut(backing).shadows.push(s);
        s
    }

    /// Absorbs backing objects referenced only by `obj` into it
    /// (vm_object_collapse): their pages move, with their reservations, and
    /// their swap slots move too (swap_pager_copy), unless `obj` already
    /// has a page or a slot of its own at that offset.
    pub fn object_collapse(&mut self, hw: &mut Machine, obj: ObjId) {
        loop {
            let o = self.objects.get(obj);
            let b = o.backing;
            if b == 0 {
                return;
            }
            let bo = self.objects.get(b);
            if bo.ref_count != 1 || !bo.is_anon() || bo.shadows.len() != 1 {
                return;
            }
            let off = o.backing_offset;
            let size = o.size;
            let bpages: Vec<(u32, Pfn)> = bo.pages.iter().map(|(&p, &f)| (p, f)).collect();
            let bslots: Vec<(u32, u32)> = bo.swblk.iter().map(|(&p, &s)| (p, s)).collect();
            // Whether the shadow keeps the backing object's page or slot at
            // `bp`: inside its range and not superseded by its own.
            let keeps = |vm: &Kernel, bp: u32| {
                let o = vm.objects.get(obj);
                let np = (bp as u64).wrapping_sub(off);
                (bp as u64) >= off && np < size && !o.pages.contains_key(&(np as u32)) && !o.swblk.contains_key(&(np as u32))
            };
            let keep_page: Vec<bool> = bpages.iter().map(|&(bp, _)| keeps(self, bp)).collect();
            let keep_slot: Vec<bool> = bslots.iter().map(|&(bp, _)| keeps(self, bp)).collect();
            for (&(bp, s), keep) in bslots.iter().zip(keep_slot) {
                self.objects.get_mut(b).swblk.remove(&bp);
                if keep {
                    self.objects.get_mut(obj).swblk.insert((bp as u64 - off) as u32, s);
                } else {
                    self.swap.free(s);
                }
            }
            for (&(bp, f), keep) in bpages.iter().zip(keep_page) {
                if keep {
                    let np = (bp as u64 - off) as u32;
                    self.objects.get_mut(b).pages.remove(&bp);
                    self.phys.rename_page(f, b, obj, np, off.min(u32::MAX as u64) as u32);
                    self.objects.get_mut(obj).pages.insert(np, f);
                } else {
                    self.free_object_page(hw, b, bp, f);
                }
            }
            let dead = self.objects.destroy(b);
            let o = self.objects.get_mut(obj);
            o.backing = dead.backing;
            o.backing_offset = off + dead.backing_offset;
            if dead.backing != 0 {
                let bb = self.objects.get_mut(dead.backing);
                for s in bb.shadows.iter_mut() {
                    if *s == b {
                        *s = obj;
                    }
                }
            }
            self.stats.collapses += 1;
        }
    }

    /// All sysctls: the VM's, the reservation system's and the pmap's.
    pub fn sysctls(&self) -> Sysctls {
        let mut s = Sysctls::default();
        let r = &self.phys.reserv;
        s.int("vm.reserv.broken", r.stats.broken, "Cumulative number of broken reservations");
        s.int("vm.reserv.freed", r.stats.freed, "Cumulative number of freed reservations");
        s.int("vm.reserv.fullpop", r.fullpop(), "Current number of full reservations");
        s.text("vm.reserv.partpopq", r.partpopq_text(self.page_size() >> 10), "Partially populated reservation queues");
        s.int("vm.reserv.reclaimed", r.stats.reclaimed, "Cumulative number of reclaimed reservations");
        s.int("splab.reserv.allocated", r.stats.allocated, "Reservations created");
        s.int("vm.stats.vm.v_vm_faults", self.stats.v_vm_faults, "Address memory faults");
        s.int("vm.stats.vm.v_cow_faults", self.stats.v_cow_faults, "Copy-on-write faults");
        s.int("vm.stats.vm.v_zfod", self.stats.v_zfod, "Pages zero-filled on demand");
        s.int("vm.stats.vm.v_forks", self.stats.v_forks, "Number of fork() calls");
        s.int("vm.stats.vm.v_free_count", self.phys.buddy.free_count(), "Free pages");
        s.int("vm.stats.vm.v_page_count", self.phys.buddy.npages(), "Total number of pages in system");
        s.int("splab.vm.object_collapses", self.stats.collapses, "Shadow objects collapsed into their shadow");
        s.int("splab.vm.superpage_soft_faults", self.stats.soft_fast_superpage, "Faults that mapped a whole superpage directly");
        s.int("splab.vm.segfaults", self.stats.segfaults, "Faults on unmapped or protected addresses");
        s.int("splab.reserv.alloc_failures", self.phys.reserv_alloc_failures, "Object page allocations that found no free superpage-sized block for a new reservation (their range cannot be promoted)");
        self.pageout_sysctls(&mut s);
        self.pmap.sysctls(&mut s);
        if let Some(p) = self.policy.as_ref() {
            if p.kind() != crate::policy::PolicyKind::FreeBsd {
                s.text("splab.policy", p.name().into(), "The superpage policy (--policy)");
            }
            p.sysctls(self, &mut s);
        }
        s
    }

    /// The page daemon's, the page queues' and the swap pager's sysctls.
    fn pageout_sysctls(&self, s: &mut Sysctls) {
        let t = &self.phys.targets;
        let q = self.queue_counts();
        let sw = &self.swap.stats;
        let pd = &self.pd;
        s.int("vm.stats.vm.v_active_count", q[pq::ACTIVE as usize], "Active pages");
        s.int("vm.stats.vm.v_inactive_count", q[pq::INACTIVE as usize], "Inactive pages");
        s.int("vm.stats.vm.v_laundry_count", q[pq::LAUNDRY as usize] + q[pq::UNSWAPPABLE as usize], "Pages eligible for laundering");
        s.int("vm.stats.vm.v_free_reserved", t.free_reserved, "Pages reserved for deadlock");
        s.int("vm.stats.vm.v_free_min", t.free_min, "Minimum low-free-pages threshold");
        s.int("vm.stats.vm.v_free_severe", t.free_severe, "Severe page depletion point");
        s.int("vm.stats.vm.v_free_target", t.free_target, "Pages desired free");
        s.int("vm.stats.vm.v_inactive_target", t.inactive_target, "Desired inactive pages");
        s.int("vm.stats.vm.v_pageout_free_min", t.pageout_free_min, "Min pages reserved for kernel");
        s.int("vm.pageout_wakeup_thresh", t.wakeup_thresh, "Free page threshold for waking up the pageout daemon");
        s.int("vm.stats.vm.v_pdwakeups", self.phys.pageout.wakeups, "Pagedaemon wakeups");
        s.int("vm.stats.vm.v_pdpages", pd.v_pdpages, "Pages analyzed by pagedaemon");
        s.int("vm.stats.vm.v_pdshortfalls", pd.v_pdshortfalls, "Page reclamation shortfalls");
        s.int("vm.stats.vm.v_dfree", pd.v_dfree, "Pages freed by pagedaemon");
        s.int("vm.stats.vm.v_reactivated", pd.v_reactivated, "Pages reactivated by pagedaemon");
        s.int("vm.stats.vm.v_swapout", sw.v_swapout, "Swap pager pageouts");
        s.int("vm.stats.vm.v_swappgsout", sw.v_swappgsout, "Swap pages swapped out");
        s.int("vm.stats.vm.v_swapin", sw.v_swapin, "Swap pager pageins");
        s.int("vm.stats.vm.v_swappgsin", sw.v_swappgsin, "Swap pages swapped in");
        s.int("vm.stats.vm.v_vnodeout", pd.v_vnodeout, "Vnode pager pageouts");
        s.int("vm.stats.vm.v_vnodepgsout", pd.v_vnodepgsout, "Vnode pages paged out");
        s.int("vm.stats.vm.v_vnodein", self.stats.v_vnodein, "Vnode pager pageins");
        s.int("vm.stats.vm.v_vnodepgsin", self.stats.v_vnodepgsin, "Vnode pages paged in");
        s.int("vm.swap_total", self.swap.nslots() as u64 * self.page_size(), "Total amount of available swap storage");
        s.int("splab.vm.swap_used", self.swap.used() as u64 * self.page_size(), "Swap storage in use, in bytes");
        s.int("splab.vm.swap_full", sw.full, "Page-outs refused because swap was full");
        s.int("splab.vm.pageout.passes", pd.passes, "Page daemon passes");
        s.int("splab.vm.pageout.deactivated", pd.deactivated, "Pages moved off the active queue by the page daemon");
        s.int("splab.vm.pageout.superpages_freed", pd.superpages_freed, "Clean superpages freed whole by the page daemon, without demotion");
        s.int("splab.vm.oom_kills", self.oom_kills.len() as u64, "Processes killed because memory and swap were exhausted");
    }

    /// Checks the invariants of every layer; used by debug builds and by
    /// `splab check`. O(memory), so not on any hot path.
    pub fn check_invariants(&mut self, hw: &mut Machine) -> Result<(), String> {
        self.phys.check()?;
        for (id, o) in self.objects.iter() {
            for (&p, &f) in &o.pages {
                let m = self.phys.pages.get(f);
                if m.object != id || m.pindex != p || !m.has(pflags::INUSE) {
                    return Err(format!("object {id} page {p} -> {f:?} but page says object {} pindex {}", m.object, m.pindex));
                }
            }
            if o.backing != 0 && !self.objects.get(o.backing).shadows.contains(&id) {
                return Err(format!("object {id} backed by {} which does not list it", o.backing));
            }
            if o.flags & oflags::COLORED == 0 {
                return Err(format!("object {id} not coloured"));
            }
            if !o.swblk.is_empty() && !o.is_anon() {
                return Err(format!("object {id} is not anonymous but has swap slots"));
            }
        }
        // Every managed object page is on exactly one page queue.
        let mut queued = 0u64;
        for (id, o) in self.objects.iter() {
            for (&p, &f) in &o.pages {
                let m = self.phys.pages.get(f);
                if m.pageable() {
                    if m.queue() == pq::NONE {
                        return Err(format!("object {id} page {p} ({f:?}) is on no page queue"));
                    }
                    queued += 1;
                }
            }
        }
        let on_queues: u64 = self.queue_counts().iter().sum();
        if on_queues != queued {
            return Err(format!("{on_queues} pages on the page queues but {queued} managed object pages"));
        }
        let mut slots: Vec<u32> = self.objects.iter().flat_map(|(_, o)| o.swblk.values().copied()).collect();
        self.swap.check(&mut slots)?;
        let (pmap, env) = self.pmap_env(hw);
        pmap.check(&env)
    }

    pub fn host_bytes(&self) -> u64 {
        self.phys.host_bytes() + self.pmap.host_bytes() + self.swap.host_bytes()
    }
}
