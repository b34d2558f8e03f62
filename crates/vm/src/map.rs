//! Address-space maps (FreeBSD vm_map.c): the entries of a process's
//! address space and the requests that create them. The syscalls that
//! change a map (mmap, munmap, mprotect, madvise, fork, exit) are in
//! mmap.rs.
//!
//! What is always true of a `VmMap`: entries do not overlap, each is
//! page-aligned and non-empty, and an entry's object offset `offset` (in
//! pages) is the object page mapped at `start`. An entry with NEEDS_COPY
//! shares its object with another map copy-on-write; its pages are mapped
//! read-only until a write fault gives it a shadow object of its own.

use crate::page::ObjId;
use crate::pmap::Prot;
use std::collections::BTreeMap;

/// Lowest address mmap hands out without a hint.
pub const MMAP_BASE: u64 = 0x0000_0008_0000_0000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize)]
pub enum Errno {
    #[error("EINVAL: invalid argument")]
    EINVAL,
    #[error("ENOMEM: no memory or address space")]
    ENOMEM,
    #[error("EACCES: protection exceeds what the object allows")]
    EACCES,
    #[error("ESRCH: no such process")]
    ESRCH,
    #[error("EBADF: no such file")]
    EBADF,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inherit {
    Share,
    Copy,
    None,
}

pub mod eflags {
    /// Copy-on-write entry: writes must not reach the shared object.
    pub const COW: u8 = 1 << 0;
    /// The entry still shares its object; the first write shadows it.
    pub const NEEDS_COPY: u8 = 1 << 1;
    /// Faults in this entry allocate their pages without a reservation, so
    /// its range is never promoted (`Kernel::madvise_superpages`). A splab
    /// extension, the counterpart of Linux's VM_NOHUGEPAGE (set by
    /// MADV_NOHUGEPAGE): FreeBSD has no per-range advice of this kind, only
    /// the system-wide tunables. Inherited by fork and kept by clipping.
    pub const NORESERV: u8 = 1 << 2;
    /// The range was advised MADV_HUGEPAGE (Linux's VM_HUGEPAGE): a policy
    /// in madvise mode gives it huge pages. Inherited by fork and kept by
    /// clipping; FreeBSD's policy ignores it.
    pub const HUGEPAGE: u8 = 1 << 3;
}

#[derive(Clone, Debug)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    /// 0 until an anonymous entry is first faulted.
    pub object: ObjId,
    pub offset: u64,
    pub prot: Prot,
    pub max_prot: Prot,
    pub inherit: Inherit,
    pub eflags: u8,
    /// Anonymous shared memory (object created at mmap time).
    pub shared: bool,
}

impl MapEntry {
    /// The object page mapped at `va`, for pages of 2^page_shift bytes.
    pub fn pindex(&self, va: u64, page_shift: u32) -> u64 {
        self.offset + ((va - self.start) >> page_shift)
    }
}

pub struct VmMap {
    pub entries: BTreeMap<u64, MapEntry>,
    pub max: u64,
    /// Bytes in a page: entries start and end on multiples of it.
    pub page: u64,
}

/// What to map.
#[derive(Clone, Copy, Debug)]
pub enum Backing {
    Anon,
    File { file: u32, offset: u64 },
    /// A large-page shared memory object made by `shm_create_largepage`.
    LargePage { shm: u32 },
}

#[derive(Clone, Copy, Debug)]
pub struct MmapReq {
    pub addr: u64,
    pub len: u64,
    pub prot: Prot,
    pub shared: bool,
    pub fixed: bool,
    pub backing: Backing,
    /// MAP_PREFAULT_READ: map resident pages at once.
    pub prefault: bool,
}

impl MmapReq {
    pub fn anon(len: u64, prot: Prot) -> MmapReq {
        MmapReq { addr: 0, len, prot, shared: false, fixed: false, backing: Backing::Anon, prefault: false }
    }
}

impl VmMap {
    pub fn new(max: u64, page: u64) -> VmMap {
        VmMap { entries: BTreeMap::new(), max, page }
    }

    /// The entry containing `va` (vm_map_lookup_entry).
    pub fn lookup(&self, va: u64) -> Option<&MapEntry> {
        let (_, e) = self.entries.range(..=va).next_back()?;
        (va < e.end).then_some(e)
    }

    /// Finds free space of `len` bytes at or above `hint` whose address is
    /// congruent to `phase` modulo `align` (vm_map_find with
    /// VMFS_OPTIMAL_SPACE: superpage-sized requests get superpage-aligned
    /// addresses so that they can be promoted).
    pub fn find_space(&self, hint: u64, len: u64, align: u64, phase: u64) -> Option<u64> {
        let fit = |a: u64| -> u64 {
            let r = (a.wrapping_sub(phase)) % align;
            if r == 0 {
                a
            } else {
                a + (align - r)
            }
        };
        let mut cand = fit(hint.max(self.page));
        for e in self.entries.values() {
            if e.end <= cand {
                continue;
            }
            if cand.checked_add(len)? <= e.start {
                break;
            }
            cand = fit(e.end);
        }
        (cand.checked_add(len)? <= self.max).then_some(cand)
    }

    /// Whether [start, end) is entirely covered by entries.
    pub fn covered(&self, start: u64, end: u64) -> bool {
        let mut at = start;
        for e in self.entries.range(..end).map(|(_, e)| e).filter(|e| e.end > start) {
            if e.start > at {
                return false;
            }
            at = e.end;
        }
        at >= end
    }

    pub fn range_keys(&self, start: u64, end: u64) -> Vec<u64> {
        self.entries.range(..end).filter(|(_, e)| e.end > start).map(|(&k, _)| k).collect()
    }
}

