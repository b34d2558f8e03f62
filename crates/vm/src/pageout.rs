//! The page daemon (FreeBSD vm_pageout.c): keeps enough pages free by
//! aging the active queue, freeing clean inactive pages, laundering dirty
//! ones (to swap for anonymous memory, back to the file for file pages),
//! and, when memory and swap are both exhausted, killing the largest
//! process (vm_pageout_oom).
//!
//! The queues (`page::PageQueues`, kept by the allocator in `Phys`):
//! - active: pages used lately. Every fault puts its page here
//!   (vm_page_activate). A scan tests each page's reference bits through
//!   the pmap (pmap_ts_referenced) and raises or decays its activity
//!   count; a page whose count reaches 0 moves to the inactive queue, or
//!   straight to the laundry if it is dirty and memory is short.
//! - inactive: candidates for freeing, oldest first. A referenced page is
//!   reactivated; a clean one is unmapped (pmap_remove_all, which demotes
//!   a superpage holding it) and freed; a dirty one goes to the laundry.
//!   When every page of a fully populated reservation is clean and
//!   unreferenced, the superpage is dropped whole instead: its mappings go
//!   in one step (no demotion) and the reservation is freed whole.
//! - laundry: dirty pages to be written. Laundering writes a cluster of
//!   neighbouring dirty pages of one object (vm_pageout_cluster), clears
//!   their modified state through the pmap (pmap_clear_modify, which
//!   demotes a writable superpage and write-protects the page, so a dirty
//!   superpage is demoted before part of it is paged out), and puts them,
//!   now clean, at the head of the inactive queue to be freed next.
//! - unswappable: dirty anonymous pages that found swap full; retried when
//!   slots are free again.
//!
//! How the daemon runs: FreeBSD's daemon is a thread woken by the
//! allocator. Here the allocator sets a flag (`Phys::pagedaemon_wakeup`)
//! when free pages fall below the wake-up threshold, and the next fault
//! runs one pass (`pageout_pass`) before it does anything else. A fault
//! whose allocation fails waits for the daemon as vm_wait does
//! (`vm_wait`): it runs passes until enough is free, and when passes stop
//! making progress (nothing freed, laundered, deactivated or aged) the
//! largest process is killed and the fault retried. The daemon's work is
//! counted in `KernelEvents` and so charged, by the timing model, to the
//! CPU whose fault waited for it. In one pass the laundry's output is
//! freed at once (FreeBSD's laundry thread runs beside the daemon and its
//! pages are freed by the next inactive scan).

use crate::kernel::{Pid, Kernel};
use crate::map::eflags;
use crate::object::ObjKind;
use crate::kernel::OomKill;
use crate::page::{pflags, pq, ObjId, ACT_MAX};
use splab_hw::machine::Machine;
use splab_hw::Pfn;

/// Added to the activity count of a referenced page (ACT_ADVANCE).
pub const ACT_ADVANCE: u8 = 3;
/// Taken from the activity count of an unreferenced page (ACT_DECLINE).
pub const ACT_DECLINE: u8 = 1;
/// How much more a clean page counts than a dirty one towards the
/// shortage in an active scan (act_scan_laundry_weight).
const ACT_SCAN_LAUNDRY_WEIGHT: u64 = 3;
/// Passes without progress before the largest process is killed
/// (vm_pageout_oom_seq is 12 scans at 10 a second; a waiting fault here
/// has no time passing between passes, so two idle passes say the same).
const OOM_SEQ: u32 = 2;
/// Most passes one wait may run (each pass that makes progress can only
/// age pages so far: the activity count is at most ACT_MAX).
const MAX_WAIT_PASSES: u32 = 4 * ACT_MAX as u32;




/// What one pass did; any of it is progress.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pass {
    pub freed: u64,
    pub laundered: u64,
    pub deactivated: u64,
    /// Activity counts lowered (pages on their way to the inactive queue).
    pub aged: u64,
}

impl Pass {
    fn progress(&self) -> bool {
        self.freed + self.laundered + self.deactivated + self.aged > 0
    }
}

/// How a wait for free pages ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Pages were freed (possibly by killing another process): retry.
    Retry,
    /// The waiting process itself was killed.
    Killed,
    /// Nothing can be freed and no process can be killed.
    Exhausted,
}

impl Kernel {
    /// Whether the daemon has been asked to run.
    pub fn pageout_wanted(&self) -> bool {
        self.phys.pageout.wanted
    }

    /// One pass of the page daemon (the body of vm_pageout_worker): the
    /// inactive scan for the free-page shortage, laundering what it could
    /// not free, then the active scan to refill the inactive queue.
    pub fn pageout_pass(&mut self, hw: &mut Machine) -> Pass {
        self.phys.pageout.wanted = false;
        self.pd.passes += 1;
        // The policy splits what it splits under pressure first (Linux's
        // THP shrinkers run with the others at reclaim).
        if self.eager() {
            self.with_policy(|p, k| p.reclaim(k, hw));
        }
        let t = self.phys.targets;
        let deficit = std::mem::take(&mut self.phys.pageout.deficit);
        let shortage = t.free_target.saturating_sub(self.phys.free_count()) + deficit;
        let mut pass = Pass::default();
        if shortage > 0 {
            let left = self.scan_inactive(hw, shortage, &mut pass);
            if left > 0 {
                // Shortfall: the laundry thread launders what is missing
                // (vm_pageout_laundry_worker in shortfall), and the pages
                // it cleaned, now at the head of the inactive queue, are
                // freed by another inactive scan.
                self.pd.v_pdshortfalls += 1;
                if self.launder(hw, left, &mut pass) > 0 {
                    self.scan_inactive(hw, left, &mut pass);
                }
            }
        }
        // vm_pageout_active_target.
        let paging_target = t.free_target.saturating_sub(self.phys.free_count());
        let have = self.phys.queues.count(pq::INACTIVE) + self.phys.queues.count(pq::LAUNDRY) / ACT_SCAN_LAUNDRY_WEIGHT;
        let want = t.inactive_target + paging_target;
        if want > have {
            self.scan_active(hw, (want - have) * ACT_SCAN_LAUNDRY_WEIGHT, &mut pass);
        }
        pass
    }

    /// Waits for free pages as a fault or allocation that failed does
    /// (vm_wait): runs the daemon until an object page could be had, and
    /// when it stops making progress kills the largest process
    /// (vm_pageout_mightbe_oom, vm_pageout_oom). `waiter` is the process
    /// that is waiting, if any.
    pub fn vm_wait(&mut self, hw: &mut Machine, waiter: Option<Pid>) -> Wait {
        let mut idle = 0;
        for _ in 0..MAX_WAIT_PASSES {
            let pass = self.pageout_pass(hw);
            if self.phys.free_count() > self.phys.targets.free_reserved {
                return Wait::Retry;
            }
            idle = if pass.progress() { 0 } else { idle + 1 };
            if idle >= OOM_SEQ {
                break;
            }
        }
        match self.pageout_oom(hw, waiter) {
            Some(v) if Some(v) == waiter => Wait::Killed,
            Some(_) => Wait::Retry,
            None => Wait::Exhausted,
        }
    }

    /// Counts a page's references since the last test and clears them: the
    /// pmap's reference bits (pmap_ts_referenced) and the page's own flag
    /// (PGA_REFERENCED, set when a mapping was removed while referenced).
    fn page_referenced(&mut self, hw: &mut Machine, m: Pfn) -> u32 {
        self.pd.v_pdpages += 1;
        self.ev.pd_scanned += 1;
        let (pmap, mut env) = self.pmap_env(hw);
        let mut delta = if pmap.page_is_mapped(&env, m) { pmap.ts_referenced(&mut env, m) } else { 0 };
        let p = self.phys.pages.get_mut(m);
        if p.has(pflags::REFERENCED) {
            p.flags &= !pflags::REFERENCED;
            delta += 1;
        }
        delta
    }

    /// Whether the page, or any mapping of it, is modified; the mapping's
    /// state is moved to the page (vm_page_test_dirty).
    fn test_dirty(&mut self, hw: &mut Machine, m: Pfn) -> bool {
        if !self.phys.pages.get(m).has(pflags::DIRTY) {
            let (pmap, env) = self.pmap_env(hw);
            if pmap.is_modified(&env, m) {
                self.phys.pages.get_mut(m).flags |= pflags::DIRTY;
            }
        }
        self.phys.pages.get(m).has(pflags::DIRTY)
    }

    /// Reactivates a page found referenced, raising its activity count.
    fn reactivate(&mut self, m: Pfn, delta: u32) {
        self.pd.v_reactivated += 1;
        self.phys.activate(m);
        let p = self.phys.pages.get_mut(m);
        let a = (p.act_count() as u32 + delta + ACT_ADVANCE as u32).min(ACT_MAX as u32);
        p.set_act_count(a as u8);
    }

    /// Frees a clean page the daemon chose: unmapped first (a superpage
    /// mapping holding it is demoted by pmap_remove_all). If unmapping finds
    /// it modified after all, it goes to the laundry instead. Returns
    /// whether it was freed.
    fn pageout_free(&mut self, hw: &mut Machine, m: Pfn) -> bool {
        {
            let (pmap, mut env) = self.pmap_env(hw);
            if pmap.page_is_mapped(&env, m) {
                pmap.remove_all(&mut env, m);
            }
        }
        if self.phys.pages.get(m).has(pflags::DIRTY) {
            self.phys.enqueue(m, pq::LAUNDRY, false);
            return false;
        }
        let p = self.phys.pages.get(m);
        let (obj, pindex) = (p.object, p.pindex);
        self.free_object_page(hw, obj, pindex, m);
        self.pd.v_dfree += 1;
        true
    }

    /// If `m`, clean and unreferenced, is part of a fully populated
    /// reservation whose pages are all clean, unreferenced and idle (on the
    /// active or inactive queue) pages of one object at consecutive
    /// offsets, frees all of them at once: their mappings are removed whole
    /// (a superpage mapping is not demoted) and the reservation is freed
    /// whole. Returns how many pages were freed.
    fn try_free_superpage(&mut self, hw: &mut Machine, m: Pfn) -> Option<u64> {
        let sizes = self.pmap.pagesizes();
        let n = self.phys.reserv.npages();
        if sizes.get(self.pmap.reserv_psind().index()) != Some(&(n as u64 * self.page_size())) {
            return None;
        }
        let m0 = self.phys.to_superpage(m)?;
        let first = *self.phys.pages.get(m0);
        for k in 0..n {
            let p = self.phys.pages.get(Pfn(m0.0 + k));
            let idle = matches!(p.queue(), pq::ACTIVE | pq::INACTIVE) && !self.busy.contains(&Pfn(m0.0 + k));
            if !idle || p.object != first.object || p.pindex != first.pindex + k || p.has(pflags::DIRTY | pflags::REFERENCED) || !p.pageable() {
                return None;
            }
        }
        {
            let (pmap, env) = self.pmap_env(hw);
            if (0..n).any(|k| pmap.is_modified(&env, Pfn(m0.0 + k)) || pmap.is_referenced(&env, Pfn(m0.0 + k))) {
                return None;
            }
        }
        self.pd.v_pdpages += n as u64 - 1;
        self.ev.pd_scanned += n as u64 - 1;
        {
            let (pmap, mut env) = self.pmap_env(hw);
            pmap.remove_all_superpage(&mut env, m0);
        }
        let mut freed = 0;
        for k in 0..n {
            let p = Pfn(m0.0 + k);
            if self.phys.pages.get(p).has(pflags::DIRTY) {
                // Cannot happen with the checks above; stay safe.
                self.phys.enqueue(p, pq::LAUNDRY, false);
                continue;
            }
            self.free_object_page(hw, first.object, first.pindex + k, p);
            freed += 1;
        }
        self.pd.v_dfree += freed;
        self.pd.superpages_freed += 1;
        Some(freed)
    }

    /// The inactive scan (vm_pageout_scan_inactive): from the head, until
    /// `shortage` pages are freed or every page present at the start has
    /// been looked at. Returns the shortage left.
    fn scan_inactive(&mut self, hw: &mut Machine, mut shortage: u64, pass: &mut Pass) -> u64 {
        let maxscan = self.phys.queues.count(pq::INACTIVE);
        let mut scanned = 0;
        while shortage > 0 && scanned < maxscan {
            let Some(m) = self.phys.queues.head(pq::INACTIVE) else { break };
            scanned += 1;
            if self.busy.contains(&m) {
                // The fault in progress allocated it (vm_page_tryxbusy fails).
                self.phys.enqueue(m, pq::INACTIVE, false);
                continue;
            }
            let delta = self.page_referenced(hw, m);
            if delta > 0 {
                self.reactivate(m, delta);
                continue;
            }
            if self.test_dirty(hw, m) {
                self.phys.enqueue(m, pq::LAUNDRY, false);
                continue;
            }
            if let Some(n) = self.try_free_superpage(hw, m) {
                shortage = shortage.saturating_sub(n);
                pass.freed += n;
                continue;
            }
            if self.pageout_free(hw, m) {
                shortage -= 1;
                pass.freed += 1;
            }
        }
        shortage
    }

    /// The active scan (vm_pageout_scan_active): ages every active page by
    /// its references; pages whose activity count reaches 0 are
    /// deactivated, dirty ones straight to the laundry while `shortage`
    /// lasts (clean ones count ACT_SCAN_LAUNDRY_WEIGHT towards it).
    fn scan_active(&mut self, hw: &mut Machine, shortage: u64, pass: &mut Pass) {
        let mut shortage = shortage as i64;
        let maxscan = self.phys.queues.count(pq::ACTIVE);
        let mut cur = self.phys.queues.head(pq::ACTIVE);
        for _ in 0..maxscan {
            let Some(m) = cur else { break };
            cur = self.phys.queues.next(&self.phys.pages, m);
            let delta = self.page_referenced(hw, m);
            let p = self.phys.pages.get_mut(m);
            let old = p.act_count();
            if delta > 0 {
                p.set_act_count((old as u32 + ACT_ADVANCE as u32 + delta).min(ACT_MAX as u32) as u8);
                continue;
            }
            let a = old.saturating_sub(ACT_DECLINE);
            p.set_act_count(a);
            if a < old {
                pass.aged += 1;
            }
            if a > 0 {
                continue;
            }
            let dirty = p.has(pflags::DIRTY);
            let q = if shortage > 0 && dirty { pq::LAUNDRY } else { pq::INACTIVE };
            if shortage > 0 {
                shortage -= if dirty { 1 } else { ACT_SCAN_LAUNDRY_WEIGHT as i64 };
            }
            self.phys.enqueue(m, q, false);
            self.pd.deactivated += 1;
            pass.deactivated += 1;
        }
    }

    /// The laundry (vm_pageout_launder): writes dirty pages from the head
    /// of the unswappable queue (when swap has room again) and of the
    /// laundry queue until `launder` pages are written. Referenced pages
    /// are reactivated, pages found clean are freed. Returns the number of
    /// pages written.
    fn launder(&mut self, hw: &mut Machine, launder: u64, pass: &mut Pass) -> u64 {
        let mut left = launder;
        let queues: &[u8] = if self.swap.has_free() { &[pq::UNSWAPPABLE, pq::LAUNDRY] } else { &[pq::LAUNDRY] };
        for &q in queues {
            let maxscan = self.phys.queues.count(q);
            let mut scanned = 0;
            while left > 0 && scanned < maxscan {
                let Some(m) = self.phys.queues.head(q) else { break };
                scanned += 1;
                let delta = self.page_referenced(hw, m);
                if delta > 0 {
                    self.reactivate(m, delta);
                    continue;
                }
                if !self.test_dirty(hw, m) {
                    if self.pageout_free(hw, m) {
                        pass.freed += 1;
                    }
                    continue;
                }
                let n = self.pageout_cluster(hw, m);
                left = left.saturating_sub(n);
                pass.laundered += n;
            }
        }
        launder - left
    }

    /// Launders `m` with its dirty neighbours in the laundry
    /// (vm_pageout_cluster, vm_pageout_flush): up to vm_pageout_page_count
    /// pages at consecutive offsets of one object, looking backwards to an
    /// aligned boundary first, then forwards. Returns the pages written; 0
    /// if `m` could not be (swap full: it waits on the unswappable queue).
    fn pageout_cluster(&mut self, hw: &mut Machine, m: Pfn) -> u64 {
        let p = *self.phys.pages.get(m);
        let (obj, pindex) = (p.object, p.pindex);
        let max = self.phys.targets.pageout_page_count as u32;
        let mut run = vec![m];
        let mut lo = pindex;
        while lo > 0 && (run.len() as u32) < max {
            let Some(q) = self.laundry_neighbour(hw, obj, lo - 1) else { break };
            run.insert(0, q);
            lo -= 1;
            if lo % max == 0 {
                break;
            }
        }
        let mut hi = pindex;
        while (run.len() as u32) < max {
            let Some(q) = self.laundry_neighbour(hw, obj, hi + 1) else { break };
            run.push(q);
            hi += 1;
        }
        let is_file = matches!(self.objects.get(obj).kind, ObjKind::Vnode { .. });
        let mut written = 0;
        for q in run {
            let ok = if is_file { self.vnode_putpage(hw, q) } else { self.swap_putpage(hw, q) };
            if !ok {
                // Swap is full: this page and the rest wait.
                self.swap.stats.full += 1;
                self.phys.enqueue(q, pq::UNSWAPPABLE, false);
                continue;
            }
            // The write is done: the page is clean, and any later write
            // through a mapping must be seen (pmap_clear_modify).
            {
                let (pmap, mut env) = self.pmap_env(hw);
                pmap.clear_modify(&mut env, q);
            }
            self.phys.pages.get_mut(q).flags &= !pflags::DIRTY;
            self.phys.enqueue(q, pq::INACTIVE, true);
            written += 1;
        }
        if written > 0 {
            if is_file {
                self.pd.v_vnodeout += 1;
                self.pd.v_vnodepgsout += written;
                self.ev.vnode_outs += written;
            } else {
                self.swap.stats.v_swapout += 1;
                self.swap.stats.v_swappgsout += written;
                self.ev.swap_outs += written;
            }
        }
        written
    }

    /// The page at `pindex` of `obj`, if it is resident, in the laundry
    /// and dirty: a candidate to join a cluster.
    fn laundry_neighbour(&mut self, hw: &mut Machine, obj: ObjId, pindex: u32) -> Option<Pfn> {
        let q = self.objects.lookup(obj, pindex)?;
        if !matches!(self.phys.pages.get(q).queue(), pq::LAUNDRY | pq::UNSWAPPABLE) || !self.test_dirty(hw, q) {
            return None;
        }
        Some(q)
    }

    /// Writes an anonymous page to a new swap slot (swap_pager_putpages):
    /// the object's old slot for that offset, if any, is freed. Returns
    /// false if swap is full.
    fn swap_putpage(&mut self, hw: &mut Machine, m: Pfn) -> bool {
        let Some(slot) = self.swap.alloc() else { return false };
        let p = *self.phys.pages.get(m);
        self.swap.write(slot, hw.mem.frame(m));
        if let Some(old) = self.objects.get_mut(p.object).swblk.insert(p.pindex, slot) {
            self.swap.free(old);
        }
        true
    }

    /// Writes a file page back to its file (vnode_pager_putpages). The
    /// whole page is kept; a later page-in reads the part within the file
    /// and zeroes the rest, as vnode_pager_getpages does.
    fn vnode_putpage(&mut self, hw: &mut Machine, m: Pfn) -> bool {
        let p = *self.phys.pages.get(m);
        let ObjKind::Vnode { file } = self.objects.get(p.object).kind else { return false };
        if hw.mem.tracks_data() {
            let f = &mut self.files[file as usize];
            match hw.mem.frame(m) {
                Some(data) => {
                    f.written.insert(p.pindex, data.into());
                }
                None => {
                    f.written.insert(p.pindex, vec![0; 1 << (hw.mem.page_shift() - 3)].into());
                }
            }
        }
        true
    }

    /// The size vm_pageout_oom compares: resident pages of the objects the
    /// process maps (not counting objects shared copy-on-write with
    /// others), plus their pages on swap (vmspace_swap_count).
    pub fn oom_size(&self, pid: Pid) -> (u64, u64) {
        let Some(p) = self.proc(pid) else { return (0, 0) };
        let (mut res, mut swap) = (0, 0);
        for e in p.map.entries.values() {
            if e.object == 0 {
                continue;
            }
            let o = self.objects.get(e.object);
            if e.eflags & eflags::NEEDS_COPY != 0 && o.ref_count != 1 {
                continue;
            }
            res += o.pages.len() as u64;
            swap += o.swblk.len() as u64;
        }
        (res, swap)
    }

    /// Kills the largest process (vm_pageout_oom) and records it. Returns
    /// the victim, or None if no process holds any memory.
    pub fn pageout_oom(&mut self, hw: &mut Machine, waiter: Option<Pid>) -> Option<Pid> {
        let mut best: Option<(u64, Pid, u64, u64)> = None;
        for p in self.procs.iter().flatten() {
            let (res, swap) = self.oom_size(p.pid);
            let size = res + swap;
            if size > 0 && best.is_none_or(|(s, ..)| size > s) {
                best = Some((size, p.pid, res, swap));
            }
        }
        let (size, pid, res, swap) = best?;
        let swap_full = !self.swap.has_free();
        let kill = OomKill {
            pid,
            size_pages: size,
            resident_pages: res,
            swap_pages: swap,
            reason: if swap_full { "out of swap space" } else { "failed to reclaim memory" }.to_string(),
            trigger: waiter,
            free_pages: self.phys.free_count(),
            swap_used: self.swap.used() as u64,
            swap_total: self.swap.nslots() as u64,
        };
        self.exit(hw, pid).expect("the victim is a live process");
        self.oom_kills.push(kill);
        Some(pid)
    }

    /// The number of pages on each queue, indexed by `pq::*`.
    pub fn queue_counts(&self) -> [u64; pq::COUNT] {
        std::array::from_fn(|q| self.phys.queues.count(q as u8))
    }
}
