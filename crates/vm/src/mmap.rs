//! The memory syscalls over a process's map (FreeBSD's vm_mmap.c: mmap,
//! munmap, mprotect, madvise) and the address space's life cycle
//! (vmspace_fork and vmspace_exit, from vm_map.c): clipping entries,
//! creating and shadowing their objects, and telling the pmap.

use crate::kernel::{Kernel, Pid, Proc};
use crate::map::{eflags, Backing, Errno, Inherit, MapEntry, MmapReq, VmMap, MMAP_BASE};
use crate::object::{oflags, ObjKind};
use crate::page::{pflags, ObjId};
use crate::pmap::{prot, Advice, Prot};
use crate::reserv::MAX_RESERV_NPAGES;
use splab_hw::machine::Machine;
use splab_hw::{Pfn, VirtAddr};

fn check_range(addr: u64, len: u64, max: u64, page: u64) -> Result<(u64, u64), Errno> {
    if !addr.is_multiple_of(page) || len == 0 {
        return Err(Errno::EINVAL);
    }
    let end = addr.checked_add(len.div_ceil(page) * page).ok_or(Errno::EINVAL)?;
    if end > max {
        return Err(Errno::EINVAL);
    }
    Ok((addr, end))
}

impl Kernel {
    /// Creates a process with an empty address space. Short of memory for
    /// its page tables, it waits for the page daemon (vm_wait).
    pub fn spawn(&mut self, hw: &mut Machine) -> Result<Pid, Errno> {
        let pm = loop {
            let (pmap, mut env) = self.pmap_env(hw);
            match pmap.pinit(&mut env) {
                Ok(pm) => break pm,
                Err(_) => {
                    if self.vm_wait(hw, None) == crate::pageout::Wait::Exhausted {
                        return Err(Errno::ENOMEM);
                    }
                }
            }
        };
        let max = self.pmap.max_user_address();
        let pid = self.procs.len() as Pid;
        self.procs.push(Some(Proc { pid, map: VmMap::new(max, self.page_size()), pmap: pm }));
        Ok(pid)
    }

    fn map_of(&mut self, pid: Pid) -> Result<&mut Proc, Errno> {
        self.proc_mut(pid).ok_or(Errno::ESRCH)
    }

    /// Splits the entry containing `va` so that one starts at `va`
    /// (vm_map_clip_start / clip_end). Both halves refer to the object.
    fn clip(&mut self, pid: Pid, va: u64) {
        let p = self.proc_mut(pid).expect("live process");
        let Some(e) = p.map.lookup(va) else { return };
        if e.start == va {
            return;
        }
        let mut tail = e.clone();
        let head_start = e.start;
        tail.offset += (va - e.start) / p.map.page;
        tail.start = va;
        p.map.entries.get_mut(&head_start).unwrap().end = va;
        let obj = tail.object;
        p.map.entries.insert(va, tail);
        self.object_reference(obj);
    }

    /// Creates the object of an entry not yet backed (vm_map_entry_back).
    pub(crate) fn entry_back(&mut self, pid: Pid, key: u64) -> ObjId {
        let e = self.proc(pid).unwrap().map.entries[&key].clone();
        if e.object != 0 {
            return e.object;
        }
        let size = (e.end - e.start) / self.page_size();
        let color = ((e.start / self.page_size()).wrapping_sub(e.offset) % MAX_RESERV_NPAGES as u64) as u32;
        let obj = self.objects.allocate(ObjKind::Anon, size + e.offset, color);
        self.proc_mut(pid).unwrap().map.entries.get_mut(&key).unwrap().object = obj;
        obj
    }

    /// mmap(2).
    pub fn mmap(&mut self, hw: &mut Machine, pid: Pid, req: MmapReq) -> Result<VirtAddr, Errno> {
        self.ev.syscalls += 1;
        let max = self.proc(pid).ok_or(Errno::ESRCH)?.map.max;
        let page = self.page_size();
        if req.len == 0 || !req.addr.is_multiple_of(page) || req.prot & !prot::ALL != 0 {
            return Err(Errno::EINVAL);
        }
        let len = req.len.checked_add(page - 1).ok_or(Errno::ENOMEM)? / page * page;
        if len / page > u32::MAX as u64 {
            return Err(Errno::ENOMEM);
        }
        let (object, offset_pages, max_prot, align) = match req.backing {
            Backing::Anon => {
                let sp = self.phys.reserv.npages() as u64 * page;
                let align = if len >= sp { sp } else { page };
                (0, 0u64, prot::ALL, align)
            }
            Backing::File { file, offset } => {
                if offset % page != 0 {
                    return Err(Errno::EINVAL);
                }
                let f = self.files.get(file as usize).ok_or(Errno::EBADF)?;
                let obj = f.object;
                (obj, offset / page, prot::ALL, self.phys.reserv.npages() as u64 * page)
            }
            Backing::LargePage { shm } => {
                // Large-page memory is shared memory: no private copies.
                if !req.shared {
                    return Err(Errno::EINVAL);
                }
                let f = self.files.get(shm as usize).ok_or(Errno::EBADF)?;
                let obj = f.object;
                if !matches!(self.objects.get(obj).kind, ObjKind::LargePage { .. }) || len != self.objects.get(obj).size * page {
                    return Err(Errno::EINVAL);
                }
                let big = *self.pmap.pagesizes().last().unwrap();
                (obj, 0, prot::ALL, big)
            }
        };
        let phase = (offset_pages * page) % align;
        let start = {
            let p = self.map_of(pid)?;
            if req.fixed {
                check_range(req.addr, len, max, page)?;
                req.addr
            } else {
                let hint = if req.addr != 0 { req.addr } else { MMAP_BASE };
                p.map.find_space(hint, len, align, phase).or_else(|| p.map.find_space(page, len, align, phase)).ok_or(Errno::ENOMEM)?
            }
        };
        if req.fixed {
            self.map_delete(hw, pid, start, start + len);
        }
        if matches!(req.backing, Backing::Anon) && !req.shared && self.coalesce(hw, pid, start, len, req.prot) {
            return Ok(VirtAddr(start));
        }
        // Anonymous shared memory gets its object now, so that fork shares it.
        let mut object = object;
        if object == 0 && req.shared {
            let color = ((start / page) % MAX_RESERV_NPAGES as u64) as u32;
            object = self.objects.allocate(ObjKind::Anon, len / page, color);
            self.objects.get_mut(object).flags &= !oflags::ONEMAPPING;
        } else if object != 0 {
            self.object_reference(object);
        }
        let cow = !req.shared && object != 0;
        let entry = MapEntry {
            start,
            end: start + len,
            object,
            offset: offset_pages,
            prot: req.prot,
            max_prot,
            inherit: if req.shared { Inherit::Share } else { Inherit::Copy },
            eflags: if cow { eflags::COW | eflags::NEEDS_COPY } else { 0 },
            shared: req.shared,
        };
        self.map_of(pid)?.map.entries.insert(start, entry);
        if req.prefault && object != 0 {
            self.map_pmap_enter(hw, pid, start);
        }
        Ok(VirtAddr(start))
    }

    /// Extends the private anonymous entry ending at `start` over a new
    /// anonymous range (vm_map_insert with vm_object_coalesce): its object
    /// grows instead of a new one being made, so neighbouring small
    /// mappings share reservations and can be promoted together. Returns
    /// whether the new range was taken care of.
    fn coalesce(&mut self, hw: &mut Machine, pid: Pid, start: u64, len: u64, prot: Prot) -> bool {
        let Some(p) = self.proc(pid) else { return false };
        let Some((&pk, prev)) = p.map.entries.range(..start).next_back() else { return false };
        if prev.end != start || prev.eflags != 0 || prev.shared || prev.inherit != Inherit::Copy {
            return false;
        }
        let prev = prev.clone();
        let pages = len / self.page_size();
        let next_pindex = prev.offset + (prev.end - prev.start) / self.page_size();
        if prev.object != 0 {
            // vm_object_coalesce.
            let obj = prev.object;
            if !self.objects.get(obj).is_anon() {
                return false;
            }
            self.object_collapse(hw, obj);
            let o = self.objects.get(obj);
            if o.backing != 0 || (o.ref_count > 1 && o.size != next_pindex && o.flags & oflags::ONEMAPPING == 0) {
                return false;
            }
            if next_pindex + pages > u32::MAX as u64 {
                return false;
            }
            // Pages left from an earlier mapping of that range go.
            if next_pindex < o.size {
                self.object_page_remove(hw, obj, next_pindex as u32, (next_pindex + pages) as u32);
            }
            let o = self.objects.get_mut(obj);
            o.size = o.size.max(next_pindex + pages);
        }
        let p = self.proc_mut(pid).unwrap();
        if prev.prot == prot && prev.max_prot == prot::ALL {
            p.map.entries.get_mut(&pk).unwrap().end = start + len;
        } else {
            // The object grew but the entry cannot: a new entry on the
            // same object, continuing where the previous one ends.
            let e = MapEntry { start, end: start + len, offset: next_pindex, prot, ..prev.clone() };
            p.map.entries.insert(start, e);
            self.object_reference(prev.object);
        }
        true
    }

    /// Maps an entry's resident pages at once (vm_map_pmap_enter), which
    /// lets the pmap create superpage mappings directly.
    fn map_pmap_enter(&mut self, hw: &mut Machine, pid: Pid, key: u64) {
        let p = self.proc(pid).unwrap();
        let e = p.map.entries[&key].clone();
        let pm = p.pmap;
        let mut pr = e.prot;
        if e.eflags & eflags::NEEDS_COPY != 0 {
            pr &= !prot::WRITE;
        }
        let obj = self.objects.get(e.object);
        let pages = &obj.pages;
        let ps = self.page_shift();
        let lookup = |va: VirtAddr| -> Option<Pfn> { pages.get(&(e.pindex(va.0, ps) as u32)).copied() };
        let env_pmap = self.pmap.as_mut();
        let mut env = crate::pmap::PmapEnv { phys: &mut self.phys, mem: &mut hw.mem, mmu: &mut hw.mmu, curpmap: &mut self.curpmap, ev: &mut self.ev };
        env_pmap.enter_object(&mut env, pm, VirtAddr(e.start), VirtAddr(e.end), &lookup, pr);
    }

    /// Removes [start, end) from the map (vm_map_delete): unmaps it, and
    /// frees the object pages of ranges no other mapping can see.
    pub(crate) fn map_delete(&mut self, hw: &mut Machine, pid: Pid, start: u64, end: u64) {
        self.clip(pid, start);
        self.clip(pid, end);
        let p = self.proc(pid).unwrap();
        let pm = p.pmap;
        let keys = p.map.range_keys(start, end);
        for k in keys {
            let e = self.proc_mut(pid).unwrap().map.entries.remove(&k).unwrap();
            {
                let (pmap, mut env) = self.pmap_env(hw);
                pmap.remove(&mut env, pm, VirtAddr(e.start), VirtAddr(e.end));
            }
            if e.object != 0 {
                let o = self.objects.get(e.object);
                // vm_map_entry_delete: a private anonymous object whose every
                // range is mapped once loses the pages of the deleted range,
                // also when other entries still map other ranges of it (a
                // clipped or coalesced mapping partly unmapped); otherwise
                // they would stay until the whole object goes.
                if o.is_anon() && o.flags & oflags::ONEMAPPING != 0 {
                    let s = e.offset as u32;
                    let n = ((e.end - e.start) / self.page_size()) as u32;
                    self.object_page_remove(hw, e.object, s, s + n);
                }
                self.object_deallocate(hw, e.object);
            }
        }
    }

    /// munmap(2).
    pub fn munmap(&mut self, hw: &mut Machine, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        self.ev.syscalls += 1;
        let max = self.proc(pid).ok_or(Errno::ESRCH)?.map.max;
        let (s, e) = check_range(addr, len, max, self.page_size())?;
        self.map_delete(hw, pid, s, e);
        Ok(())
    }

    /// mprotect(2) (vm_map_protect): the whole range must be mapped and the
    /// new protection within each entry's maximum.
    pub fn mprotect(&mut self, hw: &mut Machine, pid: Pid, addr: u64, len: u64, new: Prot) -> Result<(), Errno> {
        self.ev.syscalls += 1;
        let p = self.proc(pid).ok_or(Errno::ESRCH)?;
        let (s, e) = check_range(addr, len, p.map.max, p.map.page)?;
        if new & !prot::ALL != 0 {
            return Err(Errno::EINVAL);
        }
        if !p.map.covered(s, e) {
            return Err(Errno::ENOMEM);
        }
        if p.map.range_keys(s, e).iter().any(|k| new & !p.map.entries[k].max_prot != 0) {
            return Err(Errno::EACCES);
        }
        self.clip(pid, s);
        self.clip(pid, e);
        let pm = self.proc(pid).unwrap().pmap;
        for k in self.proc(pid).unwrap().map.range_keys(s, e) {
            let ent = self.proc_mut(pid).unwrap().map.entries.get_mut(&k).unwrap();
            let old = ent.prot;
            ent.prot = new;
            let mask = if ent.eflags & eflags::COW != 0 { !prot::WRITE } else { prot::ALL };
            let (es, ee) = (ent.start, ent.end);
            if old != new {
                let (pmap, mut env) = self.pmap_env(hw);
                pmap.protect(&mut env, pm, VirtAddr(es), VirtAddr(ee), new & mask);
            }
        }
        Ok(())
    }

    /// The page range of a madvise call, which must be entirely mapped
    /// (EINVAL for a bad range, ENOMEM for a hole).
    fn mapped_range(&self, pid: Pid, addr: u64, len: u64) -> Result<(u64, u64), Errno> {
        let p = self.proc(pid).ok_or(Errno::ESRCH)?;
        let (s, e) = check_range(addr, len, p.map.max, p.map.page)?;
        if !p.map.covered(s, e) {
            return Err(Errno::ENOMEM);
        }
        Ok((s, e))
    }

    /// Per-range superpage advice, Linux's MADV_NOHUGEPAGE (`allow` false)
    /// and MADV_HUGEPAGE (`allow` true): the entries over [addr, addr +
    /// len) are clipped to it and get `eflags::NORESERV` or
    /// `eflags::HUGEPAGE` (dropping the other). Under FreeBSD's policy,
    /// whose reservations are the default, HUGEPAGE only undoes NORESERV;
    /// Linux's in madvise mode gives HUGEPAGE ranges huge pages. Like Linux's advice it changes only later
    /// faults; pages already in reservations stay there. The whole range
    /// must be mapped (ENOMEM otherwise).
    pub fn madvise_superpages(&mut self, pid: Pid, addr: u64, len: u64, allow: bool) -> Result<(), Errno> {
        self.ev.syscalls += 1;
        let (s, e) = self.mapped_range(pid, addr, len)?;
        self.clip(pid, s);
        self.clip(pid, e);
        let p = self.proc_mut(pid).unwrap();
        for k in p.map.range_keys(s, e) {
            let ent = p.map.entries.get_mut(&k).unwrap();
            if allow {
                ent.eflags = (ent.eflags & !eflags::NORESERV) | eflags::HUGEPAGE;
            } else {
                ent.eflags = (ent.eflags & !eflags::HUGEPAGE) | eflags::NORESERV;
            }
        }
        Ok(())
    }

    /// MADV_COLLAPSE: the policy collapses the range's superpage-sized
    /// blocks now (EINVAL where the policy has no collapse).
    pub fn madvise_collapse(&mut self, hw: &mut Machine, pid: Pid, addr: u64, len: u64) -> Result<(), Errno> {
        self.ev.syscalls += 1;
        let (s, e) = self.mapped_range(pid, addr, len)?;
        self.with_policy(|p, k| p.collapse(k, hw, pid, s, e)).unwrap_or(Err(Errno::EINVAL))
    }

    /// madvise(2) with MADV_DONTNEED or MADV_FREE (vm_map_madvise), with
    /// FreeBSD's meaning: both lower the pages' priority (clean pages to the
    /// head of the inactive queue, dirty ones to the laundry:
    /// vm_page_advise); FREE also lets the system discard the contents of
    /// private anonymous pages mapped once and not shadowing another object
    /// (their dirty state is dropped and their swap slots freed), so that
    /// until the next write a read returns either the old contents or zero,
    /// depending on whether the page daemon reclaimed the page. Elsewhere
    /// FREE acts as DONTNEED, so no modification can be lost.
    pub fn madvise(&mut self, hw: &mut Machine, pid: Pid, addr: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        self.ev.syscalls += 1;
        let (s, e) = self.mapped_range(pid, addr, len)?;
        let p = self.proc(pid).unwrap();
        let pm = p.pmap;
        for k in p.map.range_keys(s, e) {
            let ent = self.proc(pid).unwrap().map.entries[&k].clone();
            let (us, ue) = (ent.start.max(s), ent.end.min(e));
            // vm_object_madvise: MADV_FREE only for private anonymous memory
            // mapped once, with no backing object whose contents a discarded
            // page would otherwise reveal again.
            let free_ok = ent.object != 0 && {
                let o = self.objects.get(ent.object);
                o.is_anon() && o.flags & oflags::ONEMAPPING != 0 && o.backing == 0
            };
            let adv = if advice == Advice::Free && !free_ok { Advice::DontNeed } else { advice };
            // Linux's MADV_DONTNEED (a policy that says so) zaps the range:
            // private anonymous pages are freed and read as zeros again.
            if adv == Advice::DontNeed && free_ok && self.policy().is_some_and(|p| p.dontneed_frees()) {
                {
                    let (pmap, mut env) = self.pmap_env(hw);
                    pmap.remove(&mut env, pm, VirtAddr(us), VirtAddr(ue));
                }
                let lo = ent.pindex(us, self.page_shift()) as u32;
                let hi = ent.pindex(ue, self.page_shift()) as u32;
                self.object_page_remove(hw, ent.object, lo, hi);
                continue;
            }
            {
                let (pmap, mut env) = self.pmap_env(hw);
                pmap.advise(&mut env, pm, VirtAddr(us), VirtAddr(ue), adv);
            }
            if ent.object == 0 {
                continue;
            }
            let lo = ent.pindex(us, self.page_shift()) as u32;
            let hi = ent.pindex(ue, self.page_shift()) as u32;
            let frames: Vec<Pfn> = self.objects.get(ent.object).pages.range(lo..hi).map(|(_, &f)| f).collect();
            for f in frames {
                let m = self.phys.pages.get_mut(f);
                m.flags &= !pflags::REFERENCED;
                if adv == Advice::Free {
                    m.flags &= !pflags::DIRTY;
                } else if !m.has(pflags::DIRTY) {
                    let (pmap, env) = self.pmap_env(hw);
                    if pmap.is_modified(&env, f) {
                        self.phys.pages.get_mut(f).flags |= pflags::DIRTY;
                    }
                }
                // vm_page_advise: clean pages are the first to be reused,
                // dirty ones wait in the laundry.
                if self.phys.pages.get(f).pageable() {
                    if !self.phys.pages.get(f).has(pflags::DIRTY) {
                        self.phys.enqueue(f, crate::page::pq::INACTIVE, true);
                    } else if !matches!(self.phys.pages.get(f).queue(), crate::page::pq::LAUNDRY | crate::page::pq::UNSWAPPABLE) {
                        self.phys.enqueue(f, crate::page::pq::LAUNDRY, false);
                    }
                }
            }
            if adv == Advice::Free {
                self.swap_pager_freespace(ent.object, lo, hi);
            }
        }
        Ok(())
    }

    /// fork(2) (vmspace_fork): shared entries share their object; private
    /// ones become copy-on-write in both maps, and the parent's mappings
    /// are write-protected.
    pub fn fork(&mut self, hw: &mut Machine, pid: Pid) -> Result<Pid, Errno> {
        self.ev.syscalls += 1;
        self.stats.v_forks += 1;
        let parent = self.proc(pid).ok_or(Errno::ESRCH)?;
        let ppm = parent.pmap;
        let keys: Vec<u64> = parent.map.entries.keys().copied().collect();
        let child = self.spawn(hw)?;
        if self.proc(pid).is_none() {
            // Waiting for memory for the child's page tables, the parent
            // was chosen as the process to kill.
            self.exit(hw, child)?;
            return Err(Errno::ESRCH);
        }
        for k in keys {
            let e = self.proc(pid).unwrap().map.entries[&k].clone();
            match e.inherit {
                Inherit::None => {}
                Inherit::Share => {
                    let obj = if e.object == 0 { self.entry_back(pid, k) } else { e.object };
                    self.object_reference(obj);
                    self.objects.get_mut(obj).flags &= !oflags::ONEMAPPING;
                    let mut ce = self.proc(pid).unwrap().map.entries[&k].clone();
                    ce.object = obj;
                    self.proc_mut(child).unwrap().map.entries.insert(k, ce);
                }
                Inherit::Copy => {
                    let mut ce = e.clone();
                    if e.object != 0 {
                        if e.eflags & eflags::NEEDS_COPY == 0 {
                            let (pmap, mut env) = self.pmap_env(hw);
                            pmap.protect(&mut env, ppm, VirtAddr(e.start), VirtAddr(e.end), e.prot & !prot::WRITE);
                        }
                        self.object_reference(e.object);
                        self.objects.get_mut(e.object).flags &= !oflags::ONEMAPPING;
                        let pe = self.proc_mut(pid).unwrap().map.entries.get_mut(&k).unwrap();
                        pe.eflags |= eflags::COW | eflags::NEEDS_COPY;
                        ce.eflags |= eflags::COW | eflags::NEEDS_COPY;
                    }
                    self.proc_mut(child).unwrap().map.entries.insert(k, ce);
                }
            }
        }
        Ok(child)
    }

    /// exit(2): the whole address space goes, then the pmap.
    pub fn exit(&mut self, hw: &mut Machine, pid: Pid) -> Result<(), Errno> {
        self.ev.syscalls += 1;
        let p = self.proc(pid).ok_or(Errno::ESRCH)?;
        let (pm, max) = (p.pmap, p.map.max);
        self.map_delete(hw, pid, 0, max);
        for c in self.curpmap.iter_mut() {
            if *c == Some(pm) {
                *c = None;
            }
        }
        let (pmap, mut env) = self.pmap_env(hw);
        pmap.release(&mut env, pm);
        self.procs[pid as usize] = None;
        Ok(())
    }

    /// Creates a large-page shared memory object of `size` bytes, backed by
    /// physically contiguous memory aligned to the largest page size
    /// (shm_create_largepage). Returns its descriptor.
    pub fn shm_create_largepage(&mut self, hw: &mut Machine, size: u64) -> Result<u32, Errno> {
        let big = *self.pmap.pagesizes().last().unwrap();
        if size == 0 || !size.is_multiple_of(big) {
            return Err(Errno::EINVAL);
        }
        let npages = size / self.page_size();
        let base = self.phys.buddy.alloc_contig(npages, big / self.page_size()).ok_or(Errno::ENOMEM)?;
        let id = self.files.len() as u32;
        let obj = self.objects.allocate(ObjKind::LargePage { base }, npages, 0);
        for i in 0..npages as u32 {
            let f = Pfn(base.0 + i);
            *self.phys.pages.get_mut(f) = crate::page::VmPage {
                object: obj,
                pindex: i,
                flags: pflags::INUSE | pflags::UNMANAGED | pflags::LARGEPAGE,
                ..crate::page::VmPage::FREE
            };
            hw.mem.zero_frame(f);
            self.objects.get_mut(obj).pages.insert(i, f);
        }
        self.files.push(crate::kernel::File { size, object: obj, written: Default::default() });
        Ok(id)
    }
}
