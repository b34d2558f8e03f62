//! The architecture registry: one `ArchSpec` per architecture splab
//! models, with everything the rest of the system needs to know about it
//! before (or without) building a machine: its name and the machine
//! profiles it runs on, its page sizes and the size its reservations
//! cover, its user address limit and the physical memory it can address,
//! its superpage tunables, whether it can run under nested paging, and the
//! constructors of its pmap and hardware walker. Nothing outside this file
//! names an architecture by a string.

use splab_hw::mmu::{AdUpdate, Walker};
use splab_hw::profile::Profile;
use splab_hw::riscv::Mode;
use splab_vm::pmap::Psind;
use splab_vm::policy::PolicyKind;
use splab_vm::Pmap;
use std::fmt;

/// A boolean pmap tunable (a loader tunable on FreeBSD): 0 or 1.
#[derive(Clone, Copy, Debug)]
pub struct Tunable {
    pub name: &'static str,
    /// What setting it to 1 turns on.
    pub enables: &'static str,
}

/// One architecture as splab models it.
pub struct ArchSpec {
    /// The name `--arch` takes and reports show.
    pub name: &'static str,
    /// The `arch` a machine profile for it says (`riscv` for both RISC-V
    /// translation modes, `powerpc64` for the hashed page table).
    pub machine: &'static str,
    /// What Rust's `target_arch` says on a host of this machine.
    pub target_arch: &'static str,
    /// One line on the translation scheme.
    pub about: &'static str,
    /// Page sizes in bytes, base first (FreeBSD's pagesizes[]).
    pub page_sizes: &'static [u64],
    /// Index in `page_sizes` of the size a reservation covers (the
    /// machine-dependent VM_LEVEL_0_ORDER); smaller superpage sizes fill
    /// and promote inside a reservation.
    pub reserv_psind: Psind,
    /// Highest user virtual address + 1.
    pub user_limit: u64,
    /// Most physical memory the pmap addresses, where that is below what
    /// the model supports.
    pub max_memory: Option<u64>,
    /// The tunables that turn transparent superpages on and off (`--superpages off`
    /// sets them all to 0), and any others the pmap has.
    pub superpage_tunables: &'static [Tunable],
    pub other_tunables: &'static [Tunable],
    /// Whether the model can run it as a guest under nested paging
    /// (`[virt] nested = true`); a hashed page table belongs to the
    /// hypervisor.
    pub nested_paging: bool,
    /// The superpage policies (`--policy`) modelled on it: FreeBSD's
    /// everywhere; Shimizu's wherever there are superpage sizes to
    /// allocate; Linux THP on the 4 KB-page architectures with a 2 MB PMD.
    pub policies: &'static [PolicyKind],
    new_pmap: fn(npages: u64, superpages: bool) -> Result<Box<dyn Pmap>, String>,
    new_walker: fn(&Profile) -> Result<Box<dyn Walker>, String>,
}

impl ArchSpec {
    /// Its pmap, for `npages` of physical memory (an error if it cannot
    /// address that much).
    pub fn new_pmap(&self, npages: u64, superpages: bool) -> Result<Box<dyn Pmap>, String> {
        (self.new_pmap)(npages, superpages)
    }

    /// Its hardware walker, as the machine profile configures it (who
    /// updates accessed and dirty bits).
    pub fn new_walker(&self, profile: &Profile) -> Result<Box<dyn Walker>, String> {
        (self.new_walker)(profile)
    }

    /// log2 of the base page size (PAGE_SHIFT).
    pub fn page_shift(&self) -> u32 {
        self.page_sizes[0].trailing_zeros()
    }

    /// The size a reservation covers, the largest transparent superpage.
    pub fn superpage_size(&self) -> u64 {
        self.page_sizes[self.reserv_psind.index()]
    }

    /// Every tunable of the pmap.
    pub fn tunables(&self) -> impl Iterator<Item = &Tunable> {
        self.superpage_tunables.iter().chain(self.other_tunables)
    }

    /// Checks a `--sysctl NAME=VALUE` setting against the pmap's tunables.
    pub fn check_tunable(&self, name: &str, value: i64) -> Result<(), String> {
        if !self.tunables().any(|t| t.name == name) {
            let known: Vec<&str> = self.tunables().map(|t| t.name).collect();
            return Err(format!("unknown {} tunable {name:?} (known: {})", self.name, known.join(", ")));
        }
        if value != 0 && value != 1 {
            return Err(format!("{name} must be 0 or 1, not {value}"));
        }
        Ok(())
    }

    /// Its page sizes as people write them (4K, 64K, 2M, ...).
    pub fn size_names(&self) -> String {
        let name = |b: u64| if b >= 1 << 30 { format!("{}G", b >> 30) } else if b >= 1 << 20 { format!("{}M", b >> 20) } else { format!("{}K", b >> 10) };
        self.page_sizes.iter().map(|&b| name(b)).collect::<Vec<_>>().join(", ") + " pages"
    }

    /// The policies modelled on it, by name, comma-separated.
    pub fn policy_names(&self) -> String {
        self.policies.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
    }

    /// The tunables `--superpages` sets, as help text names them.
    pub fn superpage_tunable_names(&self) -> String {
        self.superpage_tunables.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Debug for ArchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl fmt::Display for ArchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for ArchSpec {
    fn eq(&self, other: &ArchSpec) -> bool {
        self.name == other.name
    }
}

/// An architecture, by its spec in the registry.
pub type Arch = &'static ArchSpec;

const SUPERPAGES: &str = "transparent superpages";

/// Every policy; and those that need no 4 KB base page with a 2 MB PMD.
const ALL_POLICIES: &[PolicyKind] = &[PolicyKind::FreeBsd, PolicyKind::Shimizu, PolicyKind::LinuxThp];
const EAGER_BLOCKS: &[PolicyKind] = &[PolicyKind::FreeBsd, PolicyKind::Shimizu];

fn riscv_walker(mode: Mode, profile: &Profile) -> Result<Box<dyn Walker>, String> {
    // The privileged spec lets hardware fault on A/D until Svadu.
    let ad = profile.ad_update.unwrap_or(AdUpdate::Fault);
    Ok(Box::new(splab_hw::riscv::RiscvWalker::new(mode, ad)))
}

/// Refuses an accessed/dirty-bit behaviour the architecture does not have.
fn refuse_ad(profile: &Profile, refused: AdUpdate, why: &str) -> Result<(), String> {
    if profile.ad_update == Some(refused) {
        return Err(format!("machine profile {:?}: ad_update = \"{}\" {why}", profile.name, match refused {
            AdUpdate::Fault => "fault",
            AdUpdate::Hardware => "hardware",
        }));
    }
    Ok(())
}

/// Every architecture, in the order help texts list them.
pub static ARCHES: [ArchSpec; 7] = [
    ArchSpec {
        name: "amd64",
        machine: "amd64",
        target_arch: "x86_64",
        about: "x86-64 4-level page tables; 2 MB transparent superpages, 1 GB explicit",
        page_sizes: &[4 << 10, 2 << 20, 1 << 30],
        reserv_psind: Psind::new(1),
        user_limit: splab_hw::amd64::VM_MAXUSER_ADDRESS,
        max_memory: None,
        superpage_tunables: &[Tunable { name: "vm.pmap.pg_ps_enabled", enables: SUPERPAGES }],
        other_tunables: &[],
        nested_paging: true,
        policies: ALL_POLICIES,
        new_pmap: |n, sp| Ok(Box::new(crate::amd64::PmapAmd64::new(n, sp))),
        new_walker: |p| {
            refuse_ad(p, AdUpdate::Fault, "is not an x86-64 behaviour (its walker always sets A and D)")?;
            Ok(Box::new(splab_hw::amd64::Amd64Walker))
        },
    },
    ArchSpec {
        name: "riscv",
        machine: "riscv",
        target_arch: "riscv64",
        about: "RISC-V Sv39 (FreeBSD's default); 2 MB transparent superpages, 1 GB explicit",
        page_sizes: &[4 << 10, 2 << 20, 1 << 30],
        reserv_psind: Psind::new(1),
        user_limit: Mode::Sv39.max_user_address(),
        max_memory: None,
        superpage_tunables: &[Tunable { name: "vm.pmap.superpages_enabled", enables: SUPERPAGES }],
        other_tunables: &[],
        nested_paging: true,
        policies: ALL_POLICIES,
        new_pmap: |n, sp| Ok(Box::new(crate::riscv::PmapRiscv::new(Mode::Sv39, n, sp))),
        new_walker: |p| riscv_walker(Mode::Sv39, p),
    },
    ArchSpec {
        name: "riscv-sv48",
        machine: "riscv",
        target_arch: "riscv64",
        about: "RISC-V Sv48 (FreeBSD's vm.pmap.mode=1); 2 MB transparent superpages, 1 GB explicit",
        page_sizes: &[4 << 10, 2 << 20, 1 << 30],
        reserv_psind: Psind::new(1),
        user_limit: Mode::Sv48.max_user_address(),
        max_memory: None,
        superpage_tunables: &[Tunable { name: "vm.pmap.superpages_enabled", enables: SUPERPAGES }],
        other_tunables: &[],
        nested_paging: true,
        policies: ALL_POLICIES,
        new_pmap: |n, sp| Ok(Box::new(crate::riscv::PmapRiscv::new(Mode::Sv48, n, sp))),
        new_walker: |p| riscv_walker(Mode::Sv48, p),
    },
    ArchSpec {
        name: "arm64",
        machine: "arm64",
        target_arch: "aarch64",
        about: "AArch64 4 KB granule, 4 levels; 64 KB contiguous runs and 2 MB blocks transparent, 1 GB explicit",
        page_sizes: &[4 << 10, 64 << 10, 2 << 20, 1 << 30],
        reserv_psind: Psind::new(2),
        user_limit: splab_hw::arm64::VM_MAXUSER_ADDRESS,
        max_memory: None,
        superpage_tunables: &[Tunable { name: "vm.pmap.superpages_enabled", enables: SUPERPAGES }],
        other_tunables: &[],
        nested_paging: true,
        policies: ALL_POLICIES,
        new_pmap: |n, sp| Ok(Box::new(crate::arm64::PmapArm64::new(n, sp))),
        new_walker: |p| {
            refuse_ad(p, AdUpdate::Fault, "is not modelled for arm64 (its walker manages the access flag and dirty state, FEAT_HAFDBS)")?;
            Ok(Box::new(splab_hw::arm64::Arm64Walker))
        },
    },
    ArchSpec {
        name: "armv7",
        machine: "armv7",
        target_arch: "arm",
        about: "ARMv7-A short descriptors (LPAE off); 1 MB sections transparent, 64 KB large pages as a second level",
        page_sizes: &[4 << 10, 1 << 20],
        reserv_psind: Psind::new(1),
        user_limit: crate::armv7::VM_MAXUSER_ADDRESS,
        max_memory: Some(crate::armv7::MAX_PHYS_BYTES),
        superpage_tunables: &[
            Tunable { name: "vm.pmap.sp_enabled", enables: "1 MB section promotion" },
            Tunable { name: "vm.pmap.lp_enabled", enables: "64 KB large-page promotion" },
        ],
        other_tunables: &[],
        nested_paging: true,
        policies: EAGER_BLOCKS,
        new_pmap: |n, sp| Ok(Box::new(crate::armv7::PmapArmv7::new(n, sp)?)),
        // FreeBSD's pmap-v6 keeps the access flag in software (SCTLR.HA
        // clear): with hardware updates, the 16 entries of a large page
        // would stop being identical.
        new_walker: |p| {
            refuse_ad(p, AdUpdate::Hardware, "(SCTLR.HA) is not modelled for armv7; FreeBSD's pmap-v6 emulates the access flag in software")?;
            Ok(Box::new(splab_hw::armv7::Armv7Walker::freebsd()))
        },
    },
    ArchSpec {
        name: "ppc64-hpt",
        machine: "powerpc64",
        target_arch: "powerpc64",
        about: "powerpc64 hashed page table (FreeBSD's moea64); 16 MB superpages, off by default on FreeBSD",
        page_sizes: &[4 << 10, 16 << 20],
        reserv_psind: Psind::new(1),
        user_limit: splab_hw::ppc64::USER_VA_LIMIT,
        max_memory: None,
        superpage_tunables: &[Tunable { name: "vm.pmap.superpages_enabled", enables: SUPERPAGES }],
        other_tunables: &[],
        nested_paging: false,
        policies: EAGER_BLOCKS,
        new_pmap: |n, sp| Ok(Box::new(crate::ppc64::PmapPpc64::new(n, sp))),
        new_walker: crate::ppc64::walker,
    },
    ArchSpec {
        name: "alpha",
        machine: "alpha",
        target_arch: "alpha",
        about: "Alpha 8 KB pages, 3 levels; 64 KB, 512 KB and 4 MB superpages by granularity hint",
        page_sizes: &[8 << 10, 64 << 10, 512 << 10, 4 << 20],
        reserv_psind: Psind::new(3),
        user_limit: splab_hw::alpha::MAX_USER_ADDRESS,
        max_memory: None,
        superpage_tunables: &[
            Tunable { name: "vm.pmap.superpages_enabled", enables: "4 MB granularity-hint superpages" },
            Tunable { name: "vm.pmap.gh.64k.enabled", enables: "64 KB granularity-hint superpages" },
            Tunable { name: "vm.pmap.gh.512k.enabled", enables: "512 KB granularity-hint superpages" },
        ],
        other_tunables: &[],
        nested_paging: true,
        policies: EAGER_BLOCKS,
        // No hardware updates reference or modify state on the Alpha.
        new_pmap: |n, sp| Ok(Box::new(crate::alpha::PmapAlpha::new(n, sp))),
        new_walker: |p| {
            refuse_ad(p, AdUpdate::Hardware, "is not an Alpha behaviour (the OS emulates reference and modify with FOR/FOW faults)")?;
            Ok(Box::new(splab_hw::alpha::AlphaWalker))
        },
    },
];

/// The names of every architecture, comma-separated (for messages).
pub fn names() -> String {
    ARCHES.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
}

/// The architecture named `name`.
pub fn lookup(name: &str) -> Result<Arch, String> {
    ARCHES.iter().find(|a| a.name == name).ok_or_else(|| format!("unknown architecture {name:?} (known: {})", names()))
}

/// The architecture used on machines whose profile says `machine` when
/// none is named: the first listed for it (the one of the same name, or
/// for powerpc64 the hashed page table).
pub fn default_for_machine(machine: &str) -> Option<Arch> {
    ARCHES.iter().find(|a| a.machine == machine)
}

/// The machine architecture of the host splab runs on, as profiles name
/// it (`std::env::consts::ARCH` where no architecture here has it).
pub fn host_machine() -> &'static str {
    let host = std::env::consts::ARCH;
    ARCHES.iter().find(|a| a.target_arch == host).map_or(host, |a| a.machine)
}

/// Every machine architecture a profile may name.
pub fn machines() -> Vec<&'static str> {
    let mut m: Vec<&str> = ARCHES.iter().map(|a| a.machine).collect();
    m.dedup();
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use splab_vm::sysctl::Sysctls;

    /// What the registry says of each architecture is what its pmap says
    /// of itself: page sizes, reservation size, address limit, tunables.
    #[test]
    fn the_registry_agrees_with_every_pmap() {
        for a in &ARCHES {
            let mut p = a.new_pmap(1 << 12, true).unwrap();
            assert_eq!(p.pagesizes(), a.page_sizes, "{a}");
            assert_eq!(p.reserv_psind(), a.reserv_psind, "{a}");
            assert_eq!(p.max_user_address(), a.user_limit, "{a}");
            let mut s = Sysctls::default();
            p.sysctls(&mut s);
            for t in a.tunables() {
                assert!(s.values.contains_key(t.name), "{a}: {} is not among its sysctls", t.name);
                p.set_tunable(t.name, 0).unwrap();
                assert!(a.check_tunable(t.name, 2).is_err());
            }
            for t in a.superpage_tunables {
                p.set_tunable(t.name, 0).unwrap();
            }
            assert!(!p.superpages_enabled(), "{a}: every superpage tunable at 0 turns superpages off");
            assert!(p.set_tunable("vm.pmap.no_such", 1).is_err() && a.check_tunable("vm.pmap.no_such", 1).is_err());
            let off = a.new_pmap(1 << 12, false).unwrap();
            assert!(!off.superpages_enabled(), "{a}");
            assert_eq!(lookup(a.name).unwrap(), a);
            assert!(default_for_machine(a.machine).is_some());
        }
        assert_eq!(default_for_machine("powerpc64").unwrap().name, "ppc64-hpt");
        assert_eq!(default_for_machine("riscv").unwrap().name, "riscv");
        assert!(lookup("vax").unwrap_err().contains("known: amd64, riscv"));
    }
}
