//! The page array: one `VmPage` per 4 KB frame of physical memory, indexed by
//! frame number (FreeBSD's vm_page_array).
//!
//! Kept to 16 bytes per frame so that 256 GiB of modelled memory costs 1 GiB
//! of host memory. The meaning of the fields depends on who owns the frame:
//! - a page of an object: `object` and `pindex` name it;
//! - a page-table page: `object` is 0, `pindex` is the pmap's index of the
//!   table, `ref_count` counts its valid entries;
//! - a free frame: nothing here is meaningful (the buddy bitmaps say it is
//!   free).
//!
//! `md` is the machine-dependent part: the head of the page's PV list.

use splab_hw::Pfn;

/// Object identifier; 0 means "no object".
pub type ObjId = u32;

/// "No entry" value for 32-bit links.
pub const NIL: u32 = u32::MAX;

pub mod pflags {
    /// The page holds data that differs from its backing store (m->dirty).
    pub const DIRTY: u16 = 1 << 0;
    /// Referenced since last scanned (PGA_REFERENCED).
    pub const REFERENCED: u16 = 1 << 1;
    /// A page-table page of some pmap.
    pub const PTPAGE: u16 = 1 << 2;
    /// Allocated and in use (object page, page-table page or pinned).
    pub const INUSE: u16 = 1 << 3;
    /// Not managed: no PV entries are kept (never promoted).
    pub const UNMANAGED: u16 = 1 << 4;
    /// First page of a fully populated reservation (m->psind = 1).
    pub const PSIND1: u16 = 1 << 5;
    /// Part of a large-page shared-memory object (physically contiguous
    /// 1 GB run, mapped explicitly).
    pub const LARGEPAGE: u16 = 1 << 6;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct VmPage {
    pub object: ObjId,
    pub pindex: u32,
    /// Machine-dependent: head of this page's PV list.
    pub md: u32,
    /// Page-table pages: number of valid entries. Object pages: wirings.
    pub ref_count: u16,
    pub flags: u16,
}

const _: () = assert!(std::mem::size_of::<VmPage>() == 16);

impl VmPage {
    pub const FREE: VmPage = VmPage { object: 0, pindex: 0, md: NIL, ref_count: 0, flags: 0 };
    pub fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
}

pub struct PageArray {
    pages: Vec<VmPage>,
}

impl PageArray {
    pub fn new(npages: u64) -> PageArray {
        PageArray { pages: vec![VmPage::FREE; npages as usize] }
    }
    #[inline]
    pub fn get(&self, pfn: Pfn) -> &VmPage {
        &self.pages[pfn.idx()]
    }
    #[inline]
    pub fn get_mut(&mut self, pfn: Pfn) -> &mut VmPage {
        &mut self.pages[pfn.idx()]
    }
    pub fn len(&self) -> usize {
        self.pages.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
    pub fn host_bytes(&self) -> u64 {
        (self.pages.len() * std::mem::size_of::<VmPage>()) as u64
    }
}
