//! PV entries: for each physical page (and each superpage-sized physical
//! frame), the list of (address space, virtual address) pairs that map it.
//! Every pmap keeps these so that operations on a physical page can find
//! all of its mappings.
//!
//! Entries live in one arena and are linked through `next`; list heads are
//! stored by the owner (the page's `md` field for 4 KB mappings, a per-frame
//! table for superpage mappings). Freed entries are kept on a free list.

use splab_vm::page::NIL;

#[derive(Clone, Copy, Debug)]
struct PvEntry {
    va: u64,
    pmap: u32,
    next: u32,
}

#[derive(Default)]
pub struct PvArena {
    e: Vec<PvEntry>,
    free: u32,
    live: u64,
}

impl PvArena {
    pub fn new() -> PvArena {
        PvArena { e: Vec::new(), free: NIL, live: 0 }
    }

    /// Adds (pmap, va) to the list at `head`.
    pub fn insert(&mut self, head: &mut u32, pmap: u32, va: u64) {
        let ent = PvEntry { va, pmap, next: *head };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.e[i as usize].next;
            self.e[i as usize] = ent;
            i
        } else {
            self.e.push(ent);
            (self.e.len() - 1) as u32
        };
        *head = i;
        self.live += 1;
    }

    /// Removes (pmap, va) from the list at `head`; false if absent.
    pub fn remove(&mut self, head: &mut u32, pmap: u32, va: u64) -> bool {
        let mut prev = NIL;
        let mut cur = *head;
        while cur != NIL {
            let c = self.e[cur as usize];
            if c.pmap == pmap && c.va == va {
                if prev == NIL {
                    *head = c.next;
                } else {
                    self.e[prev as usize].next = c.next;
                }
                self.e[cur as usize].next = self.free;
                self.free = cur;
                self.live -= 1;
                return true;
            }
            prev = cur;
            cur = c.next;
        }
        false
    }

    /// The (pmap, va) pairs on the list at `head`.
    pub fn list(&self, head: u32) -> Vec<(u32, u64)> {
        let mut v = Vec::new();
        let mut cur = head;
        while cur != NIL {
            let c = self.e[cur as usize];
            v.push((c.pmap, c.va));
            cur = c.next;
        }
        v
    }

    pub fn contains(&self, head: u32, pmap: u32, va: u64) -> bool {
        let mut cur = head;
        while cur != NIL {
            let c = self.e[cur as usize];
            if c.pmap == pmap && c.va == va {
                return true;
            }
            cur = c.next;
        }
        false
    }

    /// Entries in use.
    pub fn live(&self) -> u64 {
        self.live
    }

    pub fn host_bytes(&self) -> u64 {
        (self.e.capacity() * std::mem::size_of::<PvEntry>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_reuse() {
        let mut a = PvArena::new();
        let mut h = NIL;
        a.insert(&mut h, 1, 0x1000);
        a.insert(&mut h, 2, 0x2000);
        a.insert(&mut h, 1, 0x3000);
        assert_eq!(a.live(), 3);
        assert!(a.remove(&mut h, 2, 0x2000));
        assert!(!a.remove(&mut h, 2, 0x2000));
        assert_eq!(a.list(h), vec![(1, 0x3000), (1, 0x1000)]);
        a.insert(&mut h, 3, 0x4000);
        assert_eq!(a.host_bytes() / 16, a.e.capacity() as u64);
        assert_eq!(a.e.len(), 3, "freed entry reused");
    }
}
