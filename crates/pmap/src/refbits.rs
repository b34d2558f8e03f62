//! What every pmap's reference-bit sampling (pmap_ts_referenced) shares:
//! how many references it counts before stopping, and which base page of
//! a superpage mapping may clear the mapping's one accessed bit.
//!
//! A superpage mapping has one accessed bit for all its base pages. The
//! page daemon tests pages one at a time, so if every test cleared the
//! bit, the first page tested would hide the references to all the
//! others. FreeBSD's pmaps instead let only one base page in each
//! superpage clear it, chosen by hashing the physical page number, the
//! virtual superpage number and the address space; every other page just
//! counts the reference.

use splab_hw::Pfn;
use splab_vm::pmap::PmapId;

/// Most references pmap_ts_referenced counts before it stops
/// (PMAP_TS_REFERENCED_MAX).
pub const TS_REFERENCED_MAX: u32 = 5;

/// Whether testing `m` may clear the accessed bit of the superpage
/// mapping at (pm, va) of 2^`sp_shift` bytes made of `npages` base pages
/// (a power of two): one page in `npages`.
pub fn selected_for_clearing(m: Pfn, pm: PmapId, va: u64, sp_shift: u32, npages: u64) -> bool {
    debug_assert!(npages.is_power_of_two());
    ((m.0 as u64) ^ (va >> sp_shift) ^ pm as u64) & (npages - 1) == 0
}
