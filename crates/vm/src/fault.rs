//! Page faults (FreeBSD vm_fault.c): find the page for a faulting address
//! through the map entry and its chain of shadow objects, zero-fill,
//! page in from a file or from swap, or copy on write as needed, and enter
//! the mapping into the pmap (which may then promote). When the page's
//! reservation is already fully populated and the whole aligned superpage
//! lies inside the entry, the whole superpage is mapped at once
//! (vm_fault_soft_fast). Every fault puts its page on the active queue
//! (vm_page_activate). A fault first runs the page daemon if it has been
//! woken; one that cannot get a page waits for it (vm_wait) and starts
//! over, and may find its process killed for lack of memory and swap.

use crate::kernel::{Pid, Kernel};
use crate::map::eflags;
use crate::object::{file_word, ObjKind};
use crate::page::{pflags, ObjId};
use crate::pmap::{prot, EnterFlags, Prot, Psind};
use crate::policy::{Handled, ZeroFill};
use crate::reserv::MAX_RESERV_NPAGES;
use splab_hw::machine::Machine;
use splab_hw::{Pfn, PhysAddr, VirtAddr};

/// Why a fault could not be resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize)]
pub enum FaultError {
    /// SIGSEGV/SEGV_MAPERR: no mapping at the address.
    #[error("segmentation fault: address {0:#x} is not mapped")]
    Unmapped(u64),
    /// SIGSEGV/SEGV_ACCERR: the mapping does not allow the access.
    #[error("segmentation fault: access not permitted at {0:#x}")]
    Protection(u64),
    /// SIGBUS: a file mapping beyond the end of the file.
    #[error("bus error: {0:#x} is beyond the end of the mapped file")]
    Bus(u64),
    /// No free memory could be found for the page or a page table.
    #[error("out of memory handling a fault at {0:#x}")]
    NoMemory(u64),
    #[error("no such process {0}")]
    NoProcess(u32),
    /// The process was killed because memory and swap were exhausted
    /// (`Kernel::oom_kills` says why).
    #[error("process {0} was killed: out of memory and swap")]
    Killed(u32),
}

impl Kernel {
    /// A page fault trap at `va` for `access` in process `pid`: the pmap
    /// first (pmap_fault, for accessed/dirty bits the hardware leaves to
    /// software), then the VM (vm_fault), as FreeBSD's riscv trap handler
    /// does.
    pub fn trap(&mut self, hw: &mut Machine, pid: Pid, va: u64, access: Prot) -> Result<(), FaultError> {
        let pm = self.proc(pid).ok_or(FaultError::NoProcess(pid))?.pmap;
        let page = self.page_size();
        let (pmap, mut env) = self.pmap_env(hw);
        if pmap.fault(&mut env, pm, VirtAddr(va & !(page - 1)), access) {
            self.ev.pmap_faults += 1;
            return Ok(());
        }
        self.fault(hw, pid, va, access)
    }

    /// A fault on an address no page table can translate (outside the
    /// architecture's canonical range): a segmentation fault, counted as
    /// one.
    pub fn trap_bad_address(&mut self, va: u64) -> FaultError {
        self.stats.segfaults += 1;
        FaultError::Unmapped(va)
    }

    /// Resolves a fault at `va` for `access` in process `pid` (vm_fault).
    pub fn fault(&mut self, hw: &mut Machine, pid: Pid, va: u64, access: Prot) -> Result<(), FaultError> {
        self.ev.faults += 1;
        self.stats.v_vm_faults += 1;
        if self.pageout_wanted() {
            self.pageout_pass(hw);
        }
        let r = loop {
            match self.fault_once(hw, pid, va, access) {
                Err(FaultError::NoMemory(_)) => match self.vm_wait(hw, Some(pid)) {
                    crate::pageout::Wait::Retry => continue,
                    crate::pageout::Wait::Killed => break Err(FaultError::Killed(pid)),
                    crate::pageout::Wait::Exhausted => break Err(FaultError::NoMemory(va)),
                },
                r => break r,
            }
        };
        self.busy.clear();
        r
    }

    /// One attempt at resolving a fault (RetryFault in vm_fault). Pages it
    /// allocated before failing for lack of memory stay in their objects,
    /// where the next attempt finds them.
    fn fault_once(&mut self, hw: &mut Machine, pid: Pid, va: u64, access: Prot) -> Result<(), FaultError> {
        let va = va & !(self.page_size() - 1);
        let proc = self.proc(pid).ok_or(FaultError::NoProcess(pid))?;
        let pm = proc.pmap;
        // vm_map_lookup.
        let Some(e) = proc.map.lookup(va) else {
            self.stats.segfaults += 1;
            return Err(FaultError::Unmapped(va));
        };
        if access & !e.prot != 0 {
            self.stats.segfaults += 1;
            return Err(FaultError::Protection(va));
        }
        let key = e.start;
        let mut fprot = e.prot;
        if e.eflags & eflags::NEEDS_COPY != 0 {
            if access & prot::WRITE != 0 {
                self.entry_shadow(pid, key);
            } else {
                fprot &= !prot::WRITE;
            }
        }
        let first_object = self.entry_back(pid, key);
        let e = self.proc(pid).unwrap().map.entries[&key].clone();
        let first_pindex = e.pindex(va, self.page_shift());
        if first_pindex > u32::MAX as u64 {
            return Err(FaultError::Unmapped(va));
        }
        let first_pindex = first_pindex as u32;
        // Pages for an entry advised out of superpages come from no
        // reservation (`eflags::NORESERV`).
        let reserv = e.eflags & eflags::NORESERV == 0;

        if let ObjKind::LargePage { base } = self.objects.get(first_object).kind {
            return self.fault_largepage(hw, pid, &e, va, base, fprot, access);
        }

        // Soft fast path: the page is resident in the first object.
        if let Some(m) = self.objects.lookup(first_object, first_pindex) {
            if self.try_map_superpage(hw, pid, &e, first_object, va, m, fprot, access) {
                return Ok(());
            }
            return self.finish(hw, pm, va, m, fprot, access);
        }

        // Slow path: search the shadow chain (vm_fault_object / vm_fault_next).
        let mut obj = first_object;
        let mut pindex = first_pindex as u64;
        let found: (ObjId, Pfn) = loop {
            if let Some(m) = self.objects.lookup(obj, pindex as u32) {
                break (obj, m);
            }
            let o = self.objects.get(obj);
            if let Some(&slot) = o.swblk.get(&(pindex as u32)) {
                let m = self.swap_in(hw, obj, pindex as u32, slot, reserv).ok_or(FaultError::NoMemory(va))?;
                break (obj, m);
            }
            if let ObjKind::Vnode { file } = o.kind {
                if pindex >= o.size {
                    return Err(FaultError::Bus(va));
                }
                let m = self.page_in(hw, obj, file, pindex as u32, reserv).ok_or(FaultError::NoMemory(va))?;
                break (obj, m);
            }
            if o.backing == 0 {
                // An eager policy may allocate a whole block around the
                // page of private anonymous memory with no backing object.
                if self.eager() && obj == first_object && matches!(o.kind, ObjKind::Anon) && !e.shared {
                    let f = ZeroFill { pid, pm, va, entry: e.clone(), object: first_object, pindex: first_pindex, prot: fprot, access };
                    if let Some(r) = self.with_policy(|p, k| p.zero_fill(k, hw, &f)) {
                        if r? == Handled::Yes {
                            return Ok(());
                        }
                    }
                }
                // Zero fill in the first object.
                let m = self.alloc_object_page(first_object, first_pindex, reserv).ok_or(FaultError::NoMemory(va))?;
                hw.mem.zero_frame(m);
                self.ev.zero_fills += 1;
                self.stats.v_zfod += 1;
                break (first_object, m);
            }
            pindex += o.backing_offset;
            obj = o.backing;
        };
        let (obj, mut m) = found;
        if obj != first_object {
            if access & prot::WRITE != 0 {
                // Copy on write into the first object (vm_fault_cow).
                let copy = self.alloc_object_page(first_object, first_pindex, reserv).ok_or(FaultError::NoMemory(va))?;
                hw.mem.copy_frame(copy, m);
                self.ev.cow_copies += 1;
                self.stats.v_cow_faults += 1;
                // The source is no longer needed by this fault: it stays
                // where the page daemon can find it (vm_fault_page_release
                // deactivates it).
                self.phys.deactivate(m);
                m = copy;
            } else {
                fprot &= !prot::WRITE;
            }
        }
        self.finish(hw, pm, va, m, fprot, access)
    }

    /// Enters the 4 KB mapping, marks the page dirty on a write, and
    /// activates it.
    fn finish(&mut self, hw: &mut Machine, pm: u32, va: u64, m: Pfn, fprot: Prot, access: Prot) -> Result<(), FaultError> {
        if access & prot::WRITE != 0 {
            self.dirty_on_write(m);
        }
        self.phys.pages.get_mut(m).flags |= pflags::REFERENCED;
        self.phys.activate(m);
        let (pmap, mut env) = self.pmap_env(hw);
        let flags = EnterFlags { access, ..Default::default() };
        pmap.enter(&mut env, pm, VirtAddr(va), m, fprot, flags).map_err(|_| FaultError::NoMemory(va))
    }

    /// Gives a NEEDS_COPY entry its own shadow object, unless nobody else
    /// refers to the object any more (vm_object_shadow's shortcut).
    fn entry_shadow(&mut self, pid: Pid, key: u64) {
        let e = self.proc(pid).unwrap().map.entries[&key].clone();
        let clear = |vm: &mut Kernel| {
            vm.proc_mut(pid).unwrap().map.entries.get_mut(&key).unwrap().eflags &= !eflags::NEEDS_COPY;
        };
        if e.object == 0 {
            clear(self);
            return;
        }
        let o = self.objects.get(e.object);
        if o.ref_count == 1 && o.is_anon() {
            clear(self);
            return;
        }
        let size = (e.end - e.start) / self.page_size();
        let color = ((e.start / self.page_size()) % MAX_RESERV_NPAGES as u64) as u32;
        let s = self.object_shadow(e.object, e.offset, size, color);
        let pe = self.proc_mut(pid).unwrap().map.entries.get_mut(&key).unwrap();
        pe.object = s;
        pe.offset = 0;
        pe.eflags &= !eflags::NEEDS_COPY;
    }

    /// A write fault dirties the page: it is marked dirty now (saving a
    /// pmap_is_modified later) and its copy on swap, now stale, is released
    /// (vm_fault_dirty with vm_pager_page_unswapped).
    fn dirty_on_write(&mut self, m: Pfn) {
        self.phys.pages.get_mut(m).flags |= pflags::DIRTY;
        self.page_unswapped(m);
    }

    /// Reads an anonymous page back from swap (swap_pager_getpages): a new
    /// page in `obj` with the slot's contents. The page is clean and keeps
    /// its slot, which still holds the same contents, until it is
    /// modified.
    fn swap_in(&mut self, hw: &mut Machine, obj: ObjId, pindex: u32, slot: u32, reserv: bool) -> Option<Pfn> {
        let m = self.alloc_object_page(obj, pindex, reserv)?;
        match self.swap.read(slot) {
            Some(data) => hw.mem.set_frame(m, data),
            None => hw.mem.zero_frame(m),
        }
        self.swap.stats.v_swapin += 1;
        self.swap.stats.v_swappgsin += 1;
        self.ev.swap_ins += 1;
        Some(m)
    }

    /// Allocates the page for (obj, pindex) and puts it in the object.
    /// It goes on the inactive queue at once, where the page daemon can
    /// find it even if the fault stops before mapping it (a later
    /// allocation fails and the process is killed while waiting); a fault
    /// that maps it activates it. Until the fault is done it is busy
    /// (`Kernel::busy`): the daemon leaves it alone. With `reserv` false the
    /// page comes from no reservation (an entry with `eflags::NORESERV`).
    pub(crate) fn alloc_object_page(&mut self, obj: ObjId, pindex: u32, reserv: bool) -> Option<Pfn> {
        let info = self.objects.get(obj).info(obj);
        let m = self.phys.alloc_page_in(&info, pindex, reserv)?;
        self.objects.get_mut(obj).pages.insert(pindex, m);
        self.phys.deactivate(m);
        self.busy.push(m);
        Some(m)
    }

    /// Reads a file page into the page cache (vnode_pager_getpages): what
    /// was written back to the file if the page daemon wrote it, else the
    /// file's original contents; the part of the page beyond the end of
    /// the file reads as zero.
    fn page_in(&mut self, hw: &mut Machine, obj: ObjId, file: u32, pindex: u32, reserv: bool) -> Option<Pfn> {
        let m = self.alloc_object_page(obj, pindex, reserv)?;
        self.ev.page_ins += 1;
        self.stats.v_vnodein += 1;
        self.stats.v_vnodepgsin += 1;
        hw.mem.zero_frame(m);
        if hw.mem.tracks_data() {
            let f = &self.files[file as usize];
            let size = f.size;
            let written = f.written.get(&pindex);
            let page = 1u64 << hw.mem.page_shift();
            let base = pindex as u64 * page;
            let pa = hw.mem.addr(m).0;
            for w in 0..page / 8 {
                let off = base + w * 8;
                if off + 8 <= size {
                    let v = written.map_or_else(|| file_word(file, off), |p| p[w as usize]);
                    hw.mem.write_u64(PhysAddr(pa + w * 8), v);
                }
            }
        }
        Some(m)
    }

    /// vm_fault_soft_fast's superpage case: maps, with one superpage
    /// entry, the largest superpage size up to the reservation's whose
    /// aligned physical run around `m` is fully populated (the whole
    /// reservation: its psind mark; a smaller size, such as arm64's 64 KB:
    /// vm_reserv_is_populated) with exactly the object pages of the
    /// aligned virtual range around `va`, that range lying inside the
    /// entry. As in FreeBSD, a size that does not fit steps down to the
    /// next smaller one. A writable superpage mapping is made only if every
    /// constituent page is already dirty (except the one being written now).
    /// Never where the policy maps the page alone at a soft fault
    /// (`Policy::soft_fault_superpages`, FreeBSD 10 and before).
    #[allow(clippy::too_many_arguments)]
    fn try_map_superpage(&mut self, hw: &mut Machine, pid: Pid, e: &crate::map::MapEntry, obj: ObjId, va: u64, m: Pfn, fprot: Prot, access: Prot) -> bool {
        if !self.soft_fault_superpages || !self.pmap.superpages_enabled() || self.pmap.pagesizes().len() < 2 {
            return false;
        }
        let top = self.pmap.reserv_psind().index().min(self.pmap.pagesizes().len() - 1) as u8;
        (1..=top).rev().any(|i| self.map_superpage(hw, pid, e, obj, va, m, fprot, access, Psind::new(i)))
    }

    /// One size of `try_map_superpage`: page-size index `psind`.
    #[allow(clippy::too_many_arguments)]
    fn map_superpage(&mut self, hw: &mut Machine, pid: Pid, e: &crate::map::MapEntry, obj: ObjId, va: u64, m: Pfn, fprot: Prot, access: Prot, psind: Psind) -> bool {
        let sp = self.pmap.pagesizes()[psind.index()];
        let npages = (sp / self.page_size()) as u32;
        let msuper = if psind == self.pmap.reserv_psind() {
            if npages != self.phys.reserv.npages() {
                return false;
            }
            let Some(msuper) = self.phys.to_superpage(m) else { return false };
            msuper
        } else if npages < self.phys.reserv.npages() && self.phys.reserv.is_populated_run(m, npages) {
            Pfn(m.0 & !(npages - 1))
        } else {
            return false;
        };
        let vsuper = va & !(sp - 1);
        if vsuper < e.start || vsuper + sp > e.end {
            return false;
        }
        let m0 = self.phys.pages.get(msuper);
        let want_pindex = e.pindex(vsuper, self.page_shift());
        if m0.object != obj || m0.pindex as u64 != want_pindex {
            return false;
        }
        let mut writable = fprot & prot::WRITE != 0;
        for i in 0..npages {
            let p = self.phys.pages.get(Pfn(msuper.0 + i));
            if p.object != obj || p.pindex != m0.pindex + i {
                return false;
            }
            if writable && !p.has(pflags::DIRTY) && Pfn(msuper.0 + i) != m {
                writable = false;
            }
        }
        if fprot & prot::WRITE != 0 && !writable {
            // Fall back to a base page (the write must be writable).
            if access & prot::WRITE != 0 {
                return false;
            }
        }
        let mut p = fprot;
        let mut acc = access;
        if !writable {
            p &= !prot::WRITE;
        } else {
            // Preset the modified bit for dirty superpages.
            acc |= prot::WRITE;
            self.dirty_on_write(m);
        }
        self.phys.pages.get_mut(m).flags |= pflags::REFERENCED;
        self.phys.activate(m);
        let pm = self.proc(pid).unwrap().pmap;
        let (pmap, mut env) = self.pmap_env(hw);
        let flags = EnterFlags { access: acc, psind, ..Default::default() };
        if pmap.enter(&mut env, pm, VirtAddr(vsuper), msuper, p, flags).is_ok() {
            self.stats.soft_fast_superpage += 1;
            true
        } else {
            false
        }
    }

    /// Faults on large-page shared memory map the largest page that fits
    /// (vm_fault_populate with the object's page size).
    #[allow(clippy::too_many_arguments)]
    fn fault_largepage(&mut self, hw: &mut Machine, pid: Pid, e: &crate::map::MapEntry, va: u64, base: Pfn, fprot: Prot, access: Prot) -> Result<(), FaultError> {
        let pm = self.proc(pid).unwrap().pmap;
        let sizes = self.pmap.pagesizes().to_vec();
        for psind in (0..sizes.len()).rev() {
            let sz = sizes[psind];
            let vs = va & !(sz - 1);
            if vs < e.start || vs + sz > e.end {
                continue;
            }
            let pidx = e.pindex(vs, self.page_shift());
            let m = Pfn(base.0 + pidx as u32);
            if (hw.mem.addr(m).0 & (sz - 1)) != 0 {
                continue;
            }
            let (pmap, mut env) = self.pmap_env(hw);
            let flags = EnterFlags { access, psind: Psind::new(psind as u8), ..Default::default() };
            return pmap.enter(&mut env, pm, VirtAddr(vs), m, fprot, flags).map_err(|_| FaultError::NoMemory(va));
        }
        Err(FaultError::Bus(va))
    }
}
