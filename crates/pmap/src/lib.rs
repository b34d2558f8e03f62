//! Machine-dependent page-table code: one pmap per architecture, each
//! implementing `splab_vm::Pmap` over that architecture's real descriptor
//! format in modelled physical memory.

pub mod amd64;
pub mod arm64;
pub mod invariants;
pub mod ptp;
pub mod pv;
pub mod shootdown;
pub mod spaces;
#[cfg(test)]
mod testrig;

use splab_vm::Pmap;

/// Architectures with a pmap.
pub const ARCHES: &[&str] = &["amd64", "arm64"];

/// Builds the pmap of an architecture by name.
pub fn new_pmap(arch: &str, npages: u64, superpages: bool) -> Result<Box<dyn Pmap>, String> {
    match arch {
        "amd64" => Ok(Box::new(amd64::PmapAmd64::new(npages, superpages))),
        "arm64" => Ok(Box::new(arm64::PmapArm64::new(npages, superpages))),
        _ => Err(format!("unknown architecture {arch:?} (known: {})", ARCHES.join(", "))),
    }
}

/// The architecture's hardware walker.
pub fn new_walker(arch: &str) -> Result<Box<dyn splab_hw::mmu::Walker>, String> {
    match arch {
        "amd64" => Ok(Box::new(splab_hw::amd64::Amd64Walker)),
        "arm64" => Ok(Box::new(splab_hw::arm64::Arm64Walker)),
        _ => Err(format!("unknown architecture {arch:?} (known: {})", ARCHES.join(", "))),
    }
}
