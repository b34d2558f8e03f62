//! VM objects (FreeBSD vm_object.c): anonymous memory, files through the
//! page cache, large-page shared memory, and shadow objects for
//! copy-on-write.
//!
//! What is always true:
//! - `pages` maps each resident page's offset to its frame, and the frame's
//!   `VmPage` names this object and offset.
//! - `ref_count` counts map entries and shadow objects referring to the
//!   object (plus one for a file's vnode); `shadows` lists the objects whose
//!   `backing` is this one.
//! - A shadow object's offset p corresponds to its backing object's offset
//!   p + backing_offset; a lookup that misses in an object continues there.
//! - `color` aligns the object with physical superpages: offset p lands at
//!   position (p + color) % 512 within its reservation, which is also the
//!   virtual position of the page within its 2 MB range.
//! - `swblk` (anonymous objects only) maps offsets to swap slots holding
//!   the page's contents as last written out (the swap pager's swblk
//!   trie). A resident page takes precedence over its slot; a resident page
//!   that is clean and has a slot relies on it (it may be freed and read
//!   back), so a slot is only dropped when the page is dirtied by a write
//!   fault, rewritten, or freed for good.

use crate::page::ObjId;
use crate::physalloc::ObjInfo;
use crate::reserv::MAX_RESERV_NPAGES;
use splab_hw::Pfn;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjKind {
    /// Anonymous memory (OBJT_SWAP with OBJ_ANON).
    Anon,
    /// A file's page cache (OBJT_VNODE).
    Vnode { file: u32 },
    /// Explicit large-page shared memory: a physically contiguous run
    /// starting at `base`, mapped with the largest page size that fits.
    LargePage { base: Pfn },
}

pub mod oflags {
    /// Only one map entry maps any given range (OBJ_ONEMAPPING): freed
    /// ranges of it can be freed in the object too.
    pub const ONEMAPPING: u8 = 1 << 0;
    /// Pages may come from reservations (OBJ_COLORED).
    pub const COLORED: u8 = 1 << 1;
}

#[derive(Clone, Debug)]
pub struct VmObject {
    pub kind: ObjKind,
    /// Size in pages.
    pub size: u64,
    pub ref_count: u32,
    pub backing: ObjId,
    pub backing_offset: u64,
    pub shadows: Vec<ObjId>,
    pub pages: BTreeMap<u32, Pfn>,
    /// Swap slots of paged-out pages, by offset (anonymous objects).
    pub swblk: BTreeMap<u32, u32>,
    pub color: u32,
    pub flags: u8,
}

impl VmObject {
    pub fn is_anon(&self) -> bool {
        self.kind == ObjKind::Anon
    }
    pub fn info(&self, id: ObjId) -> ObjInfo {
        ObjInfo {
            id,
            size: self.size,
            color: self.color,
            anon: self.is_anon(),
            colored: self.flags & oflags::COLORED != 0,
        }
    }
}

/// The object table: ids are indices, 0 is never used.
pub struct Objects {
    slab: Vec<Option<VmObject>>,
    free: Vec<ObjId>,
}

impl Default for Objects {
    fn default() -> Self {
        Objects { slab: vec![None], free: Vec::new() }
    }
}

impl Objects {
    /// Creates an object with one reference (vm_object_allocate).
    pub fn allocate(&mut self, kind: ObjKind, size: u64, color: u32) -> ObjId {
        let mut flags = oflags::COLORED;
        if kind == ObjKind::Anon {
            flags |= oflags::ONEMAPPING;
        }
        let o = VmObject {
            kind,
            size,
            ref_count: 1,
            backing: 0,
            backing_offset: 0,
            shadows: Vec::new(),
            pages: BTreeMap::new(),
            swblk: BTreeMap::new(),
            color: color % MAX_RESERV_NPAGES,
            flags,
        };
        match self.free.pop() {
            Some(id) => {
                self.slab[id as usize] = Some(o);
                id
            }
            None => {
                self.slab.push(Some(o));
                (self.slab.len() - 1) as ObjId
            }
        }
    }

    pub fn get(&self, id: ObjId) -> &VmObject {
        self.slab[id as usize].as_ref().expect("dead object")
    }

    pub fn get_mut(&mut self, id: ObjId) -> &mut VmObject {
        self.slab[id as usize].as_mut().expect("dead object")
    }

    pub fn exists(&self, id: ObjId) -> bool {
        self.slab.get(id as usize).is_some_and(|o| o.is_some())
    }

    /// Removes a dead object from the table.
    pub fn destroy(&mut self, id: ObjId) -> VmObject {
        let o = self.slab[id as usize].take().expect("dead object");
        self.free.push(id);
        o
    }

    pub fn lookup(&self, id: ObjId, pindex: u32) -> Option<Pfn> {
        self.get(id).pages.get(&pindex).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (ObjId, &VmObject)> {
        self.slab.iter().enumerate().filter_map(|(i, o)| o.as_ref().map(|o| (i as ObjId, o)))
    }

    pub fn count(&self) -> usize {
        self.slab.iter().filter(|o| o.is_some()).count()
    }
}

/// Contents of files: word `i` of file `f` is a fixed function of (f, i),
/// so a checker can predict what a page-in must deliver.
pub fn file_word(file: u32, byte_off: u64) -> u64 {
    let mut x = (file as u64) << 40 ^ (byte_off >> 3) ^ 0x5DEE_CE66_D1CE_4E5B;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x | 1
}
