//! Machine-dependent page-table code: one pmap per architecture, each
//! implementing `splab_vm::Pmap` over that architecture's real descriptor
//! format in modelled physical memory, and the helpers they share (PV
//! lists, page-table pages, TLB shootdown, reference-bit sampling), and
//! the registry of architectures (`arch`).

pub mod alpha;
pub mod base;
pub mod counters;
pub mod amd64;
pub mod arch;
pub mod arm64;
pub mod invariants;
pub mod armv7;
pub mod ppc64;
pub mod ptpage;
pub mod pte;
pub mod pv;
pub mod radix;
pub mod refbits;
pub mod riscv;
pub mod shootdown;
pub mod spaces;
#[cfg(test)]
mod testrig;

pub use arch::{Arch, ArchSpec, ARCHES};
