//! The superpage mechanisms the eager policies share (`policy/`): which
//! block sizes the pmap can map in one entry, whether a block fits a fault,
//! allocating and zero-filling a block, mapping it, collapsing a range of
//! base pages into one block, and giving the pages of a block back. The
//! policies choose; these do, and count what they did in the kernel's
//! events, so that the timing model charges the zeroing and copying.

use crate::fault::FaultError;
use crate::kernel::{Kernel, Pid};
use crate::map::eflags;
use crate::object::ObjKind;
use crate::page::{pflags, ObjId};
use crate::pmap::{prot, EnterFlags, PmapId, Prot, Psind};
use crate::policy::ZeroFill;
use splab_hw::machine::Machine;
use splab_hw::{Pfn, VirtAddr};

/// A block size the pmap maps in one entry: its order (log2 of its base
/// pages) and its index in `pagesizes()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSize {
    pub order: u32,
    pub psind: Psind,
}

impl Kernel {
    /// The superpage sizes a fault may map, smallest first: the pmap's
    /// sizes up to the reservation's (the larger ones, such as 1 GB, are
    /// explicit only).
    pub fn superpage_sizes(&self) -> Vec<BlockSize> {
        let sizes = self.pmap.pagesizes();
        let top = self.pmap.reserv_psind().index().min(sizes.len() - 1);
        (1..=top).map(|i| BlockSize { order: (sizes[i] / sizes[0]).trailing_zeros(), psind: Psind::new(i as u8) }).collect()
    }

    /// Whether the aligned block of 2^`order` base pages around the
    /// faulting address lies inside its map entry with nothing of it
    /// resident or on swap, so that it can be allocated whole.
    pub fn block_fits(&self, f: &ZeroFill, order: u32) -> bool {
        let n = 1u64 << order;
        let bytes = n << self.page_shift();
        let va0 = f.va & !(bytes - 1);
        if va0 < f.entry.start || va0 + bytes > f.entry.end {
            return false;
        }
        let p0 = f.entry.pindex(va0, self.page_shift());
        if p0 + n > u32::MAX as u64 {
            return false;
        }
        let o = self.objects.get(f.object);
        let r = p0 as u32..(p0 + n) as u32;
        o.pages.range(r.clone()).next().is_none() && o.swblk.range(r).next().is_none()
    }

    /// Allocates the block of 2^`order` pages for the object range around
    /// `f`'s page, zero-fills every page of it (the cost an eager policy
    /// pays at the fault), and puts the pages in the object, dirty (an
    /// anonymous page the program may write has no backing copy) and
    /// active. None when no free block of that order exists.
    pub fn fill_block(&mut self, hw: &mut Machine, f: &ZeroFill, order: u32) -> Option<Pfn> {
        let n = 1u32 << order;
        let bytes = (n as u64) << self.page_shift();
        let p0 = f.entry.pindex(f.va & !(bytes - 1), self.page_shift()) as u32;
        let info = self.objects.get(f.object).info(f.object);
        let base = self.phys.alloc_block(&info, p0, order)?;
        for i in 0..n {
            let m = Pfn(base.0 + i);
            hw.mem.zero_frame(m);
            self.objects.get_mut(f.object).pages.insert(p0 + i, m);
            self.phys.pages.get_mut(m).flags |= pflags::DIRTY;
            self.phys.activate(m);
        }
        self.phys.pages.get_mut(Pfn(base.0 + (f.pindex - p0))).flags |= pflags::REFERENCED;
        self.ev.zero_fills += n as u64;
        self.stats.v_zfod += n as u64;
        Some(base)
    }

    /// Maps a block of 2^`order` pages at `va0` (aligned): with one
    /// superpage entry when the pmap has a page of that size (`psind`),
    /// else page by page. The pages are dirty, so a writable mapping is
    /// made modified at once.
    #[allow(clippy::too_many_arguments)]
    pub fn map_block(&mut self, hw: &mut Machine, pm: PmapId, va0: u64, base: Pfn, order: u32, psind: Option<Psind>, pr: Prot, access: Prot) -> Result<(), FaultError> {
        let access = if pr & prot::WRITE != 0 { access | prot::WRITE } else { access };
        let (pmap, mut env) = self.pmap_env(hw);
        if let Some(psind) = psind {
            let flags = EnterFlags { access, psind, ..Default::default() };
            if pmap.enter(&mut env, pm, VirtAddr(va0), base, pr, flags).is_ok() {
                return Ok(());
            }
        }
        let page = 1u64 << self.page_shift();
        for i in 0..1u64 << order {
            let (pmap, mut env) = self.pmap_env(hw);
            let flags = EnterFlags { access, ..Default::default() };
            pmap.enter(&mut env, pm, VirtAddr(va0 + i * page), Pfn(base.0 + i as u32), pr, flags).map_err(|_| FaultError::NoMemory(va0))?;
        }
        Ok(())
    }

    /// The entries of `pid` that may hold transparent superpages: private
    /// anonymous memory with no backing object, readable (a pmap never
    /// maps an inaccessible page), not advised out of them
    /// (`eflags::NORESERV`). As (start, end, object, entry flags).
    pub fn anon_ranges(&self, pid: Pid) -> Vec<(u64, u64, ObjId, u8)> {
        let Some(p) = self.proc(pid) else { return Vec::new() };
        p.map
            .entries
            .values()
            .filter(|e| !e.shared && e.object != 0 && e.prot & prot::READ != 0 && e.eflags & (eflags::NORESERV | eflags::NEEDS_COPY) == 0)
            .filter(|e| {
                let o = self.objects.get(e.object);
                matches!(o.kind, ObjKind::Anon) && o.backing == 0
            })
            .map(|e| (e.start, e.end, e.object, e.eflags))
            .collect()
    }

    /// Collapses the aligned block of 2^`order` pages at `va0` of `pid`'s
    /// entry into one newly allocated block (khugepaged's and
    /// MADV_COLLAPSE's collapse_huge_page): pages on swap are read back,
    /// resident pages copied, absent ones zero-filled, the old pages
    /// freed, and the block mapped with one entry. The caller checked the
    /// range (present, swapped, shared counts). Returns the new block, or
    /// None when no free block of that order exists.
    pub fn collapse_block(&mut self, hw: &mut Machine, pid: Pid, va0: u64, order: u32, psind: Option<Psind>) -> Option<Pfn> {
        let p = self.proc(pid)?;
        let pm = p.pmap;
        let e = p.map.lookup(va0)?.clone();
        let obj = e.object;
        let n = 1u32 << order;
        let p0 = e.pindex(va0, self.page_shift()) as u32;
        let info = self.objects.get(obj).info(obj);
        let base = self.phys.alloc_block(&info, p0, order)?;
        // The old pages, unmapped first so that no translation survives.
        let page = 1u64 << self.page_shift();
        {
            let (pmap, mut env) = self.pmap_env(hw);
            pmap.remove(&mut env, pm, VirtAddr(va0), VirtAddr(va0 + (n as u64) * page));
        }
        for i in 0..n {
            let new = Pfn(base.0 + i);
            let pindex = p0 + i;
            let o = self.objects.get(obj);
            if let Some(&old) = o.pages.get(&pindex) {
                hw.mem.copy_frame(new, old);
                self.ev.collapse_copies += 1;
                self.free_object_page(hw, obj, pindex, old);
            } else if let Some(&slot) = o.swblk.get(&pindex) {
                match self.swap.read(slot) {
                    Some(data) => hw.mem.set_frame(new, data),
                    None => hw.mem.zero_frame(new),
                }
                self.swap.stats.v_swapin += 1;
                self.swap.stats.v_swappgsin += 1;
                self.ev.swap_ins += 1;
                self.swap_pager_freespace(obj, pindex, pindex + 1);
            } else {
                hw.mem.zero_frame(new);
                self.ev.zero_fills += 1;
            }
            self.phys.pages.get_mut(new).flags |= pflags::DIRTY;
            self.objects.get_mut(obj).pages.insert(pindex, new);
            self.phys.activate(new);
        }
        let pr = e.prot;
        self.map_block(hw, pm, va0, base, order, psind, pr, prot::READ).ok()?;
        Some(base)
    }

    /// Splits nothing but the pages: frees the pages of [va0, va0 + len)
    /// of `pid` that `drop` selects, unmapping them first (the pmap
    /// demotes a superpage mapping it cuts). A freed page reads as zeros
    /// again at its next fault. Returns how many were freed.
    pub fn drop_pages(&mut self, hw: &mut Machine, pid: Pid, va0: u64, len: u64, drop: impl Fn(&Machine, Pfn) -> bool) -> u64 {
        let Some(p) = self.proc(pid) else { return 0 };
        let pm = p.pmap;
        let Some(e) = p.map.lookup(va0).cloned() else { return 0 };
        let page = 1u64 << self.page_shift();
        let mut freed = 0;
        for va in (va0..va0 + len).step_by(page as usize) {
            let pindex = e.pindex(va, self.page_shift()) as u32;
            let Some(&m) = self.objects.get(e.object).pages.get(&pindex) else { continue };
            if !drop(hw, m) {
                continue;
            }
            {
                let (pmap, mut env) = self.pmap_env(hw);
                pmap.remove(&mut env, pm, VirtAddr(va), VirtAddr(va + page));
            }
            self.free_object_page(hw, e.object, pindex, m);
            freed += 1;
        }
        freed
    }
}

/// Blocks direct compaction looks at in one attempt, from where the last
/// attempt stopped (Linux's migration scanner keeps its position too).
const COMPACT_WINDOW: u64 = 64;

impl Kernel {
    /// Direct compaction for one free block of 2^`order` pages (Linux's
    /// compact_zone for a high-order allocation at a fault): among the next
    /// aligned blocks from the scanner's position, the one with the fewest
    /// pages in use, all of them movable (pages of objects, not page
    /// tables, frames held outside the model, large pages or pages a fault
    /// is working on), has each of those pages moved to a new frame (the
    /// contents copied, the page's mappings removed, so the next access
    /// maps the new frame), and is left free. Returns whether a block was
    /// freed.
    pub fn compact(&mut self, hw: &mut Machine, order: u32) -> bool {
        let n = 1u64 << order;
        let blocks = self.phys.buddy.npages() / n;
        if blocks == 0 {
            return false;
        }
        let mut best: Option<(u64, u64)> = None;
        for k in 0..COMPACT_WINDOW.min(blocks) {
            let b = (self.compact_cursor + k) % blocks;
            let mut used = 0;
            let mut movable = true;
            for i in 0..n {
                let m = Pfn((b * n + i) as u32);
                if self.phys.buddy.is_free(m) {
                    continue;
                }
                let p = self.phys.pages.get(m);
                if !p.pageable() || p.has(pflags::LARGEPAGE) || self.busy.contains(&m) || self.phys.reserv.of_page(m).is_some() {
                    movable = false;
                    break;
                }
                used += 1;
            }
            if movable && used > 0 && best.is_none_or(|(u, _)| used < u) {
                best = Some((used, b));
            }
        }
        self.compact_cursor = (self.compact_cursor + COMPACT_WINDOW) % blocks;
        let Some((used, b)) = best else { return false };
        if self.phys.free_count() < self.phys.targets.free_reserved + used + n {
            return false;
        }
        // Take the block's free frames out of the free lists so that no
        // page moved out lands inside it.
        let mut held = Vec::new();
        for i in 0..n {
            let m = Pfn((b * n + i) as u32);
            if self.phys.buddy.is_free(m) && self.phys.buddy.unfree_page(m) {
                held.push(m);
            }
        }
        let mut moved = true;
        for i in 0..n {
            let m = Pfn((b * n + i) as u32);
            if held.contains(&m) {
                continue;
            }
            if !self.migrate_page(hw, m) {
                moved = false;
                break;
            }
        }
        for m in held {
            self.phys.buddy.free_pages(m, 0);
        }
        moved
    }

    /// Moves an object page to a new frame (migrate_pages for one page):
    /// its mappings are removed (their referenced and modified state goes
    /// to the page), its contents and state copied, and the old frame
    /// freed. Returns false when no frame could be had.
    fn migrate_page(&mut self, hw: &mut Machine, m: Pfn) -> bool {
        let (obj, pindex) = {
            let p = self.phys.pages.get(m);
            (p.object, p.pindex)
        };
        let info = self.objects.get(obj).info(obj);
        let Some(new) = self.phys.alloc_page_in(&info, pindex, false) else { return false };
        {
            let (pmap, mut env) = self.pmap_env(hw);
            if pmap.page_is_mapped(&env, m) {
                pmap.remove_all(&mut env, m);
            }
        }
        let (touched, written) = (hw.mem.touched(m), hw.mem.written(m));
        hw.mem.copy_frame(new, m);
        if touched {
            hw.mem.note_access(hw.mem.addr(new).0, written);
        }
        hw.mem.forget(m);
        let keep = self.phys.pages.get(m).flags & (pflags::DIRTY | pflags::REFERENCED);
        self.phys.pages.get_mut(new).flags |= keep;
        self.objects.get_mut(obj).pages.insert(pindex, new);
        self.phys.activate(new);
        self.phys.free_page(m);
        self.ev.migrations += 1;
        true
    }
}
