//! The address spaces one pmap serves, named by `PmapId`, and the tags
//! (x86 PCIDs, Arm ASIDs) their TLB entries carry. A freed slot, and a
//! freed tag once the caller has flushed it from every TLB, go to the
//! next address space created.

use splab_vm::pmap::PmapId;

/// Inside an architecture's `impl`: `pm` and `pm_mut`, the state of
/// address space `pm` among those `self.$field` (a `Spaces<Pm>`) keeps.
macro_rules! pm_accessors {
    ($field:ident) => {
        pub(crate) fn pm(&self, pm: PmapId) -> &Pm {
            self.$field.get(pm)
        }
        pub(crate) fn pm_mut(&mut self, pm: PmapId) -> &mut Pm {
            self.$field.get_mut(pm)
        }
    };
}
pub(crate) use pm_accessors;

pub struct Spaces<T> {
    slots: Vec<Option<T>>,
    next_asid: u16,
    free_asids: Vec<u16>,
}

impl<T> Default for Spaces<T> {
    fn default() -> Self {
        Spaces { slots: Vec::new(), next_asid: 1, free_asids: Vec::new() }
    }
}

impl<T> Spaces<T> {
    /// A tag no live address space has (tag 0 is never given); None when
    /// all are taken.
    pub fn alloc_asid(&mut self) -> Option<u16> {
        self.free_asids.pop().or_else(|| {
            let a = self.next_asid;
            self.next_asid = self.next_asid.checked_add(1)?;
            Some(a)
        })
    }

    /// Returns a tag no TLB holds entries of any more.
    pub fn free_asid(&mut self, asid: u16) {
        self.free_asids.push(asid);
    }

    /// Adds an address space in the first free slot.
    pub fn insert(&mut self, t: T) -> PmapId {
        match self.slots.iter().position(|s| s.is_none()) {
            Some(i) => {
                self.slots[i] = Some(t);
                i as PmapId
            }
            None => {
                self.slots.push(Some(t));
                (self.slots.len() - 1) as PmapId
            }
        }
    }

    /// Takes an address space out, freeing its slot.
    pub fn remove(&mut self, id: PmapId) -> T {
        self.slots[id as usize].take().expect("live pmap")
    }

    pub fn get(&self, id: PmapId) -> &T {
        self.slots[id as usize].as_ref().expect("live pmap")
    }

    pub fn get_mut(&mut self, id: PmapId) -> &mut T {
        self.slots[id as usize].as_mut().expect("live pmap")
    }

    /// The live address spaces.
    pub fn iter(&self) -> impl Iterator<Item = (PmapId, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| Some((i as PmapId, s.as_ref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_tags_are_reused() {
        let mut s = Spaces::default();
        let (a, b) = (s.alloc_asid().unwrap(), s.alloc_asid().unwrap());
        assert_eq!((a, b), (1, 2));
        assert_eq!((s.insert('x'), s.insert('y')), (0, 1));
        assert_eq!(s.remove(0), 'x');
        s.free_asid(a);
        assert_eq!(s.alloc_asid(), Some(1));
        assert_eq!(s.insert('z'), 0);
        assert_eq!(s.iter().map(|(i, &c)| (i, c)).collect::<Vec<_>>(), vec![(0, 'z'), (1, 'y')]);
    }
}
