//! Machine-dependent page-table code: one pmap per architecture, each
//! implementing `splab_vm::Pmap` over that architecture's real descriptor
//! format in modelled physical memory, and the helpers they share (PV
//! lists, page-table pages, TLB shootdown, reference-bit sampling).

pub mod alpha;
pub mod base;
pub mod counters;
pub mod amd64;
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

use splab_hw::mmu::{AdUpdate, Walker};
use splab_hw::profile::Profile;
use splab_hw::riscv::Mode;
use splab_vm::Pmap;

/// Architectures with a pmap. `riscv` translates with Sv39, as FreeBSD
/// does by default; `riscv-sv48` with Sv48 (FreeBSD's vm.pmap.mode=1).
/// Both run on machine profiles of architecture `riscv`. `armv7` is ARMv7-A
/// with short descriptors (LPAE off), as FreeBSD's pmap-v6 runs it.
/// `ppc64-hpt` is powerpc64 with a hashed page table (FreeBSD's moea64), on
/// profiles of architecture `powerpc64`. `alpha` has 8 KB pages and
/// granularity-hint superpages (64 KB, 512 KB, 4 MB).
pub const ARCHES: &[&str] = &["amd64", "riscv", "riscv-sv48", "arm64", "armv7", "ppc64-hpt", "alpha"];

fn unknown(arch: &str) -> String {
    format!("unknown architecture {arch:?} (known: {})", ARCHES.join(", "))
}

/// The machine architecture a pmap architecture runs on: what a machine
/// profile's `arch` must say (`riscv` for both RISC-V modes).
pub fn machine_arch(arch: &str) -> &str {
    match arch {
        "riscv-sv48" => "riscv",
        "ppc64-hpt" => "powerpc64",
        a => a,
    }
}

/// The pmap architecture used on machines of architecture `machine` when
/// none is named: the one of the same name, or for powerpc64 the hashed
/// page table.
pub fn default_arch(machine: &str) -> &str {
    match machine {
        "powerpc64" => "ppc64-hpt",
        a => a,
    }
}

/// The size of the architecture's reservations: its superpage size
/// `pagesizes[reserv_psind]` (2 MB if it has none).
pub fn superpage_size(arch: &str) -> Result<u64, String> {
    let p = new_pmap(arch, 1 << 12, false)?;
    Ok(p.pagesizes().get(p.reserv_psind().index()).copied().unwrap_or(2 << 20))
}

/// log2 of the architecture's base page size (PAGE_SHIFT): what
/// physical memory is counted in before a system is built.
pub fn page_shift(arch: &str) -> Result<u32, String> {
    Ok(new_pmap(arch, 1 << 12, false)?.pagesizes()[0].trailing_zeros())
}

fn riscv_mode(arch: &str) -> Option<Mode> {
    match arch {
        "riscv" => Some(Mode::Sv39),
        "riscv-sv48" => Some(Mode::Sv48),
        _ => None,
    }
}

/// The highest user address + 1 of an architecture's address spaces, for
/// checking workload sizes before a system is built.
pub fn max_user_address(arch: &str) -> Result<u64, String> {
    Ok(new_pmap(arch, 512, false)?.max_user_address())
}

/// Most physical memory an architecture's pmap addresses, if it has a
/// limit below what the model supports (armv7: 4 GiB).
pub fn max_memory(arch: &str) -> Option<u64> {
    (arch == "armv7").then_some(armv7::MAX_PHYS_BYTES)
}

/// Builds the pmap of an architecture by name, for `npages` of physical
/// memory (an error if the architecture cannot address that much).
pub fn new_pmap(arch: &str, npages: u64, superpages: bool) -> Result<Box<dyn Pmap>, String> {
    if let Some(mode) = riscv_mode(arch) {
        return Ok(Box::new(riscv::PmapRiscv::new(mode, npages, superpages)));
    }
    match arch {
        "amd64" => Ok(Box::new(amd64::PmapAmd64::new(npages, superpages))),
        "arm64" => Ok(Box::new(arm64::PmapArm64::new(npages, superpages))),
        "armv7" => Ok(Box::new(armv7::PmapArmv7::new(npages, superpages)?)),
        "ppc64-hpt" => Ok(Box::new(ppc64::PmapPpc64::new(npages, superpages))),
        "alpha" => Ok(Box::new(alpha::PmapAlpha::new(npages, superpages))),
        _ => Err(unknown(arch)),
    }
}

/// The architecture's hardware walker, as the machine profile configures
/// it (who updates accessed and dirty bits).
pub fn new_walker(arch: &str, profile: &Profile) -> Result<Box<dyn Walker>, String> {
    if let Some(mode) = riscv_mode(arch) {
        // The privileged spec lets hardware fault on A/D until Svadu.
        let ad = profile.ad_update.unwrap_or(AdUpdate::Fault);
        return Ok(Box::new(splab_hw::riscv::RiscvWalker::new(mode, ad)));
    }
    match arch {
        "amd64" if profile.ad_update == Some(AdUpdate::Fault) => Err(format!(
            "machine profile {:?}: ad_update = \"fault\" is not an x86-64 behaviour (its walker always sets A and D)",
            profile.name
        )),
        "amd64" => Ok(Box::new(splab_hw::amd64::Amd64Walker)),
        "arm64" if profile.ad_update == Some(AdUpdate::Fault) => Err(format!(
            "machine profile {:?}: ad_update = \"fault\" is not modelled for arm64 (its walker manages the access flag and dirty state, FEAT_HAFDBS)",
            profile.name
        )),
        "arm64" => Ok(Box::new(splab_hw::arm64::Arm64Walker)),
        // FreeBSD's pmap-v6 keeps the access flag in software (SCTLR.HA
        // clear): with hardware updates, the 16 entries of a large page
        // would stop being identical.
        "armv7" if profile.ad_update == Some(AdUpdate::Hardware) => Err(format!(
            "machine profile {:?}: ad_update = \"hardware\" (SCTLR.HA) is not modelled for armv7; FreeBSD's pmap-v6 emulates the access flag in software",
            profile.name
        )),
        "armv7" => Ok(Box::new(splab_hw::armv7::Armv7Walker::freebsd())),
        "ppc64-hpt" => ppc64::walker(profile),
        // No hardware updates reference or modify state on the Alpha.
        "alpha" if profile.ad_update == Some(AdUpdate::Hardware) => Err(format!(
            "machine profile {:?}: ad_update = \"hardware\" is not an Alpha behaviour (the OS emulates reference and modify with FOR/FOW faults)",
            profile.name
        )),
        "alpha" => Ok(Box::new(splab_hw::alpha::AlphaWalker)),
        _ => Err(unknown(arch)),
    }
}
