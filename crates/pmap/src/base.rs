//! The pmap(9) interface written once for every architecture.
//!
//! Each architecture's pmap is split into files the way FreeBSD's pmaps
//! are read, and each file implements one of the traits here: the address
//! spaces and the one-function operations (`Core`, mod.rs), entering
//! mappings (`Enter`, enter.rs), removing and changing them (`Remove`,
//! remove.rs), referenced and modified state for the page daemon
//! (`RefMod`, refmod.rs) and the invariants (`Check`, check.rs). `Md` makes
//! any type with all five the machine-independent VM's `Pmap`: the typed
//! addresses of the interface, the tunables and counters as sysctls, and
//! pmap_page_is_mapped from the PV lists are here, not in each
//! architecture.
//!
//! Inside a pmap, virtual addresses are plain `u64`s, as the descriptor
//! arithmetic wants them.

use crate::counters::SizeCounters;
use crate::pv::PvTable;
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::pmap::{prot, Advice, EnterFlags, Mapping, Pmap, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;

/// An architecture's pmap as the machine-independent VM sees it.
pub struct Md<A>(pub A);

/// A tunable that turns something on or off, with its sysctl name and
/// description (vm.pmap.pg_ps_enabled, vm.pmap.superpages_enabled, ...).
#[derive(Clone, Copy, Debug)]
pub struct Tunable {
    pub name: &'static str,
    pub descr: &'static str,
    pub on: bool,
}

impl Tunable {
    pub const fn new(name: &'static str, descr: &'static str, on: bool) -> Tunable {
        Tunable { name, descr, on }
    }
}

/// What an architecture's pmap is, as fixed facts.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Architecture name as splab spells it (amd64, ...).
    pub arch: &'static str,
    /// Page sizes in bytes, base first (FreeBSD's pagesizes[]).
    pub pagesizes: &'static [u64],
    /// The page size a reservation covers (see `Pmap::reserv_psind`).
    pub reserv_psind: Psind,
    /// Highest user virtual address + 1.
    pub max_user_address: u64,
}

/// pmap_enter_object's loop: at each address of [start, end) with an
/// object page (`pages`), `map` maps it, perhaps with the pages after it,
/// and says how many bytes it mapped, or None to stop; addresses without
/// a page are passed a base page (`page` bytes) at a time.
pub fn each_resident(start: u64, end: u64, page: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, mut map: impl FnMut(u64, Pfn) -> Option<u64>) {
    let mut va = start;
    while va < end {
        va += match pages(VirtAddr(va)) {
            Some(m) => match map(va, m) {
                Some(mapped) => mapped,
                None => return,
            },
            None => page,
        };
    }
}

/// The `Core` methods of an architecture that has one tunable, `$field`,
/// turning its superpages on and off, and its PV lists in `self.pv`.
macro_rules! one_superpage_tunable {
    ($field:ident) => {
        fn superpages_enabled(&self) -> bool {
            self.$field.on
        }
        fn tunables(&self) -> Vec<&$crate::base::Tunable> {
            vec![&self.$field]
        }
        fn tunables_mut(&mut self) -> Vec<&mut $crate::base::Tunable> {
            vec![&mut self.$field]
        }
        fn pv(&self) -> &$crate::pv::PvTable {
            &self.pv
        }
    };
}
pub(crate) use one_superpage_tunable;

/// The address spaces of an architecture and the operations that are one
/// function each (mod.rs).
pub trait Core: Send {
    /// The architecture's fixed facts.
    fn params(&self) -> Params;
    /// Whether transparent superpages are enabled.
    fn superpages_enabled(&self) -> bool;
    /// The tunables, as sysctls show them.
    fn tunables(&self) -> Vec<&Tunable>;
    fn tunables_mut(&mut self) -> Vec<&mut Tunable>;
    /// Adds the counters (everything but the tunables) to `out`.
    fn counters(&self, out: &mut Sysctls);
    /// The counters of superpage size `psind`, where it has them.
    fn size_counters(&self, _psind: Psind) -> Option<&SizeCounters> {
        None
    }
    /// The PV lists.
    fn pv(&self) -> &PvTable;
    /// Host bytes used by the pmap's own structures.
    fn host_bytes(&self) -> u64 {
        self.pv().host_bytes()
    }

    /// pmap_bootstrap: memory taken for good at boot (nothing by default).
    fn bootstrap(&mut self, _env: &mut PmapEnv) {}
    /// pmap_pinit.
    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError>;
    /// pmap_release.
    fn release(&mut self, env: &mut PmapEnv, pm: PmapId);
    /// Root of the page tables, as the translation base register holds it.
    fn root(&self, pm: PmapId) -> PhysAddr;
    /// Address-space identifier the TLB tags entries with.
    fn asid(&self, pm: PmapId) -> u16;
    /// What switching `cpu` to `pm` takes on this architecture
    /// (pmap_activate_sw): called on a real switch only. Nothing by
    /// default.
    fn activate_sw(&mut self, _env: &mut PmapEnv, _pm: PmapId, _cpu: usize) {}
    /// pmap_extract with the mapping's size, protection and modified state.
    fn extract(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<Mapping>;
    /// pmap_fault (nothing to do where the hardware sets A and D).
    fn fault(&mut self, _env: &mut PmapEnv, _pm: PmapId, _va: u64, _access: Prot) -> bool {
        false
    }
}

/// Entering mappings (enter.rs).
pub trait Enter {
    /// pmap_enter of a mapping of size `flags.psind`.
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, prot: Prot, flags: EnterFlags) -> Result<(), PmapError>;
    /// pmap_enter_object.
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: u64, end: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, prot: Prot);
}

/// Removing and changing mappings (remove.rs).
pub trait Remove {
    /// pmap_remove of [sva, eva).
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64);
    /// pmap_remove_all.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn);
    /// pmap_protect of [sva, eva).
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, prot: Prot);
    /// pmap_remove_write.
    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn);
    /// pmap_advise of [sva, eva).
    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, advice: Advice);
}

/// pmap_remove_all as the radix pmaps do it: every superpage mapping of
/// `m`'s frame is demoted first (`demote`), then each 4 KB mapping of `m`
/// removed (`remove`, which gathers the page-table pages it frees), then
/// those pages are freed.
pub fn remove_all_demoting<P: Core>(
    p: &mut P,
    env: &mut PmapEnv,
    m: Pfn,
    mut demote: impl FnMut(&mut P, &mut PmapEnv, PmapId, u64) -> bool,
    mut remove: impl FnMut(&mut P, &mut PmapEnv, PmapId, u64, &mut Vec<Pfn>),
) {
    let mut free = Vec::new();
    for (pm, va) in p.pv().list_sp(m.addr_4k().0) {
        demote(p, env, pm, va);
    }
    for (pm, va) in p.pv().list(env, m) {
        remove(p, env, pm, va, &mut free);
    }
    crate::ptpage::free_all(env, free);
}

/// pmap_protect's first steps: protection is only ever reduced, so with
/// read access gone the range is removed, and with write and execute both
/// kept nothing changes. Returns whether that was all (nothing is left to
/// reduce).
pub fn protect_needs_nothing_more<P: Remove>(p: &mut P, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) -> bool {
    if pr & prot::READ == 0 {
        p.remove(env, pm, sva, eva);
        return true;
    }
    pr & (prot::WRITE | prot::EXEC) == prot::WRITE | prot::EXEC
}

/// Referenced and modified state for the page daemon (refmod.rs).
pub trait RefMod {
    /// pmap_is_modified.
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool;
    /// pmap_is_referenced.
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool;
    /// pmap_ts_referenced.
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32;
    /// pmap_clear_modify.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn);
    /// Every mapping of the reservation-sized physical run holding `m`
    /// removed, superpages whole (see `Pmap::remove_all_superpage`).
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn);
}

/// The invariants (check.rs).
pub trait Check {
    /// Verifies the pmap's invariants against the tables and PV lists.
    fn check(&self, env: &PmapEnv) -> Result<(), String>;
}

impl<A: Core + Enter + Remove + RefMod + Check> Pmap for Md<A> {
    fn arch(&self) -> &'static str {
        self.0.params().arch
    }
    fn pagesizes(&self) -> &'static [u64] {
        self.0.params().pagesizes
    }
    fn superpages_enabled(&self) -> bool {
        self.0.superpages_enabled()
    }
    fn reserv_psind(&self) -> Psind {
        self.0.params().reserv_psind
    }
    fn bootstrap(&mut self, env: &mut PmapEnv) {
        self.0.bootstrap(env)
    }
    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError> {
        self.0.pinit(env)
    }
    fn release(&mut self, env: &mut PmapEnv, pm: PmapId) {
        self.0.release(env, pm)
    }
    fn root(&self, pm: PmapId) -> PhysAddr {
        self.0.root(pm)
    }
    fn asid(&self, pm: PmapId) -> u16 {
        self.0.asid(pm)
    }
    /// pmap_activate: `pm` becomes the CPU's current address space (a
    /// context switch), if it was not already.
    fn activate(&mut self, env: &mut PmapEnv, pm: PmapId, cpu: usize) {
        if env.curpmap[cpu] == Some(pm) {
            return;
        }
        env.curpmap[cpu] = Some(pm);
        env.ev.context_switches += 1;
        self.0.activate_sw(env, pm, cpu)
    }
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: VirtAddr, m: Pfn, prot: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        self.0.enter(env, pm, va.0, m, prot, flags)
    }
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: VirtAddr, end: VirtAddr, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, prot: Prot) {
        self.0.enter_object(env, pm, start.0, end.0, pages, prot)
    }
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr) {
        self.0.remove(env, pm, sva.0, eva.0)
    }
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.0.remove_all(env, m)
    }
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr, prot: Prot) {
        self.0.protect(env, pm, sva.0, eva.0, prot)
    }
    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.0.remove_write(env, m)
    }
    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr, advice: Advice) {
        self.0.advise(env, pm, sva.0, eva.0, advice)
    }
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.0.is_modified(env, m)
    }
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.0.is_referenced(env, m)
    }
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        self.0.ts_referenced(env, m)
    }
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.0.clear_modify(env, m)
    }
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.0.remove_all_superpage(env, m)
    }
    /// pmap_page_is_mapped: the page has a PV entry, its own or its
    /// superpage frame's.
    fn page_is_mapped(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.0.pv().is_mapped(env, m)
    }
    fn fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: VirtAddr, access: Prot) -> bool {
        self.0.fault(env, pm, va.0, access)
    }
    fn extract(&self, mem: &PhysMem, pm: PmapId, va: VirtAddr) -> Option<Mapping> {
        self.0.extract(mem, pm, va.0)
    }
    fn sysctls(&self, out: &mut Sysctls) {
        for t in self.0.tunables() {
            out.int(t.name, t.on as u64, t.descr);
        }
        self.0.counters(out);
    }
    fn demotions(&self, psind: Psind) -> Option<u64> {
        self.0.size_counters(psind).map(|c| c.demotions)
    }
    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), String> {
        let arch = self.0.params().arch;
        let mut tunables = self.0.tunables_mut();
        let known = tunables.iter().map(|t| t.name).collect::<Vec<_>>().join(", ");
        let Some(t) = tunables.iter_mut().find(|t| t.name == name) else {
            return Err(format!("unknown {arch} tunable {name:?} (known: {known})"));
        };
        if value != 0 && value != 1 {
            return Err(format!("{name} must be 0 or 1, not {value}"));
        }
        t.on = value == 1;
        Ok(())
    }
    fn check(&self, env: &PmapEnv) -> Result<(), String> {
        self.0.check(env)
    }
    fn max_user_address(&self) -> u64 {
        self.0.params().max_user_address
    }
    fn host_bytes(&self) -> u64 {
        self.0.host_bytes()
    }
}
