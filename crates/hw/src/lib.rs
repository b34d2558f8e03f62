//! The modelled machine.
//!
//! Everything here is hardware: physical memory contents, per-CPU TLBs and
//! page-walk caches, each architecture's descriptor formats and hardware
//! walk, data caches, and machine profiles. Nothing here knows about
//! objects, reservations or the pmap's bookkeeping.

pub mod addr;
pub mod bpred;
pub mod alpha;
pub mod amd64;
pub mod arm64;
pub mod armv7;
pub mod cache;
mod desc;
pub mod machine;
pub mod mmu;
pub mod nested;
pub mod physmem;
pub mod ppc64;
pub mod profile;
mod profile_error;
pub mod riscv;
pub mod rng;
pub mod size;
pub mod pwc;
pub mod radix;
pub mod tlb;

pub use addr::{Pfn, PhysAddr, VirtAddr, PAGE_SHIFT_4K, PAGE_SIZE_4K};
