//! The swap device and the swap pager (FreeBSD swap_pager.c): slots of
//! 4 KB on a device of configurable size, and, per anonymous object, the
//! map from page index to slot (`VmObject::swblk`, FreeBSD's swblk trie).
//!
//! The device hands out the lowest free slot (FreeBSD's blist allocates
//! runs for clusters; one slot per page keeps every run deterministic).
//! When the machine keeps the contents of memory (`--track-contents`,
//! `splab check`), a written slot keeps a copy of the page, so a page read
//! back from swap holds exactly what was written; otherwise only the
//! bookkeeping is modelled. All-zero pages are kept as "no data".
//!
//! What is always true (checked by `Kernel::check_invariants`): a slot is in
//! use iff exactly one object's `swblk` names it; `used` counts them; a
//! slot not in use has no stored contents.
//!
//! The object side lives in `Kernel` (swap_pager_putpages, _getpages,
//! _freespace, _copy): see `pageout.rs` (page-out), `fault.rs` (page-in)
//! and `kernel.rs` (object termination and collapse).

use crate::bittree::BitTree;
use std::collections::HashMap;

/// A page's contents as the swap device stores them.
pub type SwapPage = Box<[u64]>;

/// Counters of the swap pager (exported under vm.stats.vm).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SwapStats {
    /// v_swapout: page-out operations (one per cluster written).
    pub v_swapout: u64,
    /// v_swappgsout: pages written to swap.
    pub v_swappgsout: u64,
    /// v_swapin: page-in operations.
    pub v_swapin: u64,
    /// v_swappgsin: pages read from swap.
    pub v_swappgsin: u64,
    /// Page-outs refused because no slot was free (swap_pager_full).
    pub full: u64,
}

pub struct SwapDevice {
    nslots: u32,
    /// Free slots.
    free: BitTree,
    used: u32,
    /// Contents of written slots that are not all zero (tracking only).
    data: HashMap<u32, SwapPage>,
    keep_data: bool,
    pub stats: SwapStats,
}

impl SwapDevice {
    /// A device of `nslots` 4 KB slots; `keep_data` stores page contents.
    pub fn new(nslots: u64, keep_data: bool) -> SwapDevice {
        let nslots = nslots.min(u32::MAX as u64 - 1) as u32;
        let mut free = BitTree::new(nslots as usize);
        for s in 0..nslots as usize {
            free.set(s);
        }
        SwapDevice { nslots, free, used: 0, data: HashMap::new(), keep_data, stats: SwapStats::default() }
    }

    /// Total slots (vm.swap_total / 4096).
    pub fn nslots(&self) -> u32 {
        self.nslots
    }

    /// Slots in use.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Whether any slot is free (!swap_pager_full).
    pub fn has_free(&self) -> bool {
        self.used < self.nslots
    }

    /// Allocates the lowest free slot (swp_pager_getswapspace).
    pub fn alloc(&mut self) -> Option<u32> {
        let s = self.free.first_set()? as u32;
        self.free.clear(s as usize);
        self.used += 1;
        Some(s)
    }

    /// Frees a slot and forgets its contents (swp_pager_freeswapspace).
    pub fn free(&mut self, slot: u32) {
        debug_assert!(!self.free.get(slot as usize), "swap slot {slot} freed twice");
        self.free.set(slot as usize);
        self.used -= 1;
        self.data.remove(&slot);
    }

    /// Whether `slot` is allocated.
    pub fn in_use(&self, slot: u32) -> bool {
        slot < self.nslots && !self.free.get(slot as usize)
    }

    /// Stores a page's contents in `slot` (the write of swap_pager_putpages);
    /// `None` means all zeros.
    pub fn write(&mut self, slot: u32, contents: Option<&[u64]>) {
        debug_assert!(self.in_use(slot));
        match contents {
            Some(c) if self.keep_data && c.iter().any(|&w| w != 0) => {
                self.data.insert(slot, c.into());
            }
            _ => {
                self.data.remove(&slot);
            }
        }
    }

    /// The contents of `slot` (the read of swap_pager_getpages); `None`
    /// means all zeros (or contents not kept).
    pub fn read(&self, slot: u32) -> Option<&[u64]> {
        debug_assert!(self.in_use(slot));
        self.data.get(&slot).map(|b| &**b)
    }

    /// Verifies that `refs` (every slot named by some object, possibly with
    /// repeats) are exactly the slots in use, each named once.
    pub fn check(&self, refs: &mut [u32]) -> Result<(), String> {
        refs.sort_unstable();
        if let Some(w) = refs.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("swap slot {} named by two pages", w[0]));
        }
        if let Some(s) = refs.iter().find(|&&s| !self.in_use(s)) {
            return Err(format!("swap slot {s} named by a page but free"));
        }
        if refs.len() != self.used as usize || self.free.count() != (self.nslots - self.used) as usize {
            return Err(format!("{} swap slots named, {} in use, {} free of {}", refs.len(), self.used, self.free.count(), self.nslots));
        }
        if let Some(s) = self.data.keys().find(|&&s| !self.in_use(s)) {
            return Err(format!("free swap slot {s} still holds data"));
        }
        Ok(())
    }

    /// Host bytes: the free-slot tree and stored contents.
    pub fn host_bytes(&self) -> u64 {
        self.nslots as u64 / 4 + self.data.len() as u64 * (4096 + 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_lowest_first_and_keep_contents() {
        let mut d = SwapDevice::new(4, true);
        let a = d.alloc().unwrap();
        let b = d.alloc().unwrap();
        assert_eq!((a, b), (0, 1));
        let mut page = [0u64; 512];
        page[7] = 99;
        d.write(b, Some(&page));
        d.write(a, Some(&[0; 512]));
        assert_eq!(d.read(b).map(|p| p[7]), Some(99));
        assert!(d.read(a).is_none(), "zero pages are not stored");
        d.free(a);
        assert_eq!(d.alloc(), Some(0), "the freed slot is reused first");
        assert!(d.alloc().is_some() && d.alloc().is_some());
        assert!(!d.has_free() && d.alloc().is_none());
        d.check(&mut [0, 1, 2, 3]).unwrap();
        assert!(d.check(&mut [0, 1, 2, 2]).is_err());
    }
}
