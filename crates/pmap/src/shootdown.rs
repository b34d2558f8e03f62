//! Reaching the TLBs of the CPUs that may cache an address space's
//! translations, the two ways the modelled architectures do it.
//!
//! - `Reach::Ipi` (x86, FreeBSD's pmap_invalidate_* with PCIDs): the
//!   initiating CPU interrupts every other CPU running the address space,
//!   each invalidates locally; CPUs not running it are marked stale and
//!   flush the address space's tag when they next switch to it.
//! - `Reach::Broadcast` (Arm's TLBI ...IS instructions, FreeBSD's
//!   pmap_s1_invalidate_*): one instruction on the initiating CPU
//!   invalidates the matching entries in every CPU of the inner-shareable
//!   domain, running the address space or not; no interrupts, nothing
//!   left stale.

use splab_hw::mmu::Mmu;
use splab_vm::pmap::{PmapEnv, PmapId};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    Ipi,
    Broadcast,
}

/// What a shootdown did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Shot {
    /// CPUs whose MMU ran the invalidation.
    pub ran: u64,
    /// With `Reach::Ipi`, the CPUs (bit per CPU) that must flush the
    /// address space before running it again.
    pub stale: u64,
}

/// Runs `f(mmu, asid)` on the MMUs `reach` covers for address space `pm`
/// tagged `asid`, counting the interrupts it takes.
pub fn shootdown(env: &mut PmapEnv, pm: PmapId, asid: u16, reach: Reach, f: impl Fn(&mut Mmu, u16)) -> Shot {
    let mut shot = Shot::default();
    for (c, cpu) in env.cpus.iter_mut().enumerate() {
        if reach == Reach::Broadcast || cpu.curpmap == Some(pm) {
            f(&mut cpu.mmu, asid);
            shot.ran += 1;
        } else {
            shot.stale |= 1 << c;
        }
    }
    if reach == Reach::Ipi {
        env.ev.shootdown_ipis += shot.ran.saturating_sub(1);
    }
    shot
}
