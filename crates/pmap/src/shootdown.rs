//! TLB shootdown: applying an invalidation to every CPU whose current
//! address space is the pmap being changed (FreeBSD's pmap_invalidate_page
//! and pmap_invalidate_all: the local CPU directly, the others by IPI, or on
//! RISC-V by an SBI remote SFENCE.VMA). What a pmap does about the CPUs not
//! running the address space depends on the architecture (amd64 marks its
//! PCID stale on them; riscv without ASIDs flushes at every switch), so the
//! helpers return the mask of those CPUs.
//!
//! A descriptor write that TLBs or page-walk caches may not have seen
//! returns an `Invalidate`, which the compiler insists is used: each pmap
//! consumes it with the invalidation its architecture makes, or adds it to
//! a `Batch` that one later invalidation covers. Where a change needs no
//! invalidation, the call says why and drops the token with `unneeded`.

use splab_hw::machine::Mmu;
use splab_vm::pmap::{PmapEnv, PmapId};

/// A changed descriptor whose old contents a TLB or walk cache may still
/// hold for [va, va + size).
#[must_use = "the TLB may hold the old entry: invalidate or flush"]
#[derive(Debug)]
pub struct Invalidate {
    pub va: u64,
    pub size: u64,
}

impl Invalidate {
    /// A change to what translates [va, va + size).
    pub fn new(va: u64, size: u64) -> Invalidate {
        Invalidate { va, size }
    }

    /// The change needs no invalidation; the caller says why.
    pub fn unneeded(self) {}
}

/// Changes awaiting one invalidation that covers them all: a range, or
/// the whole address space. Dropping a batch that still holds changes is
/// a bug, caught in debug builds.
#[must_use = "the TLB may hold the old entries: flush the batch"]
#[derive(Debug, Default)]
pub struct Batch {
    span: Option<(u64, u64)>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Adds a change for the invalidation to cover.
    pub fn add(&mut self, inv: Invalidate) {
        let (s, e) = (inv.va, inv.va + inv.size);
        self.span = Some(self.span.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
    }

    /// Whether no change waits.
    pub fn is_empty(&self) -> bool {
        self.span.is_none()
    }

    /// Takes the changes out, as the span [start, end) they cover, for
    /// the invalidation the caller makes now; None if there were none.
    pub fn take(&mut self) -> Option<(u64, u64)> {
        self.span.take()
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        debug_assert!(self.span.is_none() || std::thread::panicking(), "TLB invalidations dropped: {:?}", self.span);
    }
}

/// Runs `f` on the MMU of every CPU running `pm` (tagged `asid`). Returns
/// how many ran it and the mask of the CPUs that did not. All but one of
/// the CPUs that ran it needed an IPI; those are counted.
pub fn on_active_cpus(env: &mut PmapEnv, pm: PmapId, asid: u16, f: impl Fn(&mut Mmu, u16)) -> (u64, u64) {
    let mut active = 0u64;
    let mut others = 0u64;
    for (c, mmu) in env.mmu.iter_mut().enumerate() {
        if env.curpmap[c] == Some(pm) {
            f(mmu, asid);
            active += 1;
        } else {
            others |= 1 << c;
        }
    }
    env.ev.shootdown_ipis += active.saturating_sub(1);
    (active, others)
}

/// When `cpu` switches to an address space tagged `asid` that it has been
/// marked in `stale` to hold old translations of (amd64's PCIDs, Alpha's
/// ASNs): it flushes them first, and is no longer marked.
pub fn flush_if_stale(env: &mut PmapEnv, cpu: usize, asid: u16, stale: &mut u64) {
    if *stale & (1 << cpu) != 0 {
        *stale &= !(1 << cpu);
        env.mmu[cpu].tlb.invalidate_asid(asid);
        env.mmu[cpu].pwc.invalidate_asid(asid);
        env.ev.tlb_flushes += 1;
    }
}

/// Drops every translation tagged `asid` from every CPU, before the tag
/// goes to another address space.
pub fn forget_asid(env: &mut PmapEnv, asid: u16) {
    for mmu in env.mmu.iter_mut() {
        mmu.tlb.invalidate_asid(asid);
        mmu.pwc.invalidate_asid(asid);
    }
}

/// Invalidates one address on every CPU running `pm` (INVLPG, SFENCE.VMA
/// with an address). Both also drop the address space's page-walk cache
/// entries: INVLPG does by definition; on RISC-V an address-specific fence
/// need not order non-leaf PTEs, but implementations of the Rocket family
/// flush their PTE caches on any SFENCE.VMA, and the model keeps no walk
/// cache entry a pmap could have made stale. Returns the mask of the other
/// CPUs.
pub fn invalidate_page(env: &mut PmapEnv, pm: PmapId, asid: u16, va: u64) -> u64 {
    let (n, others) = on_active_cpus(env, pm, asid, |mmu, asid| {
        mmu.tlb.invalidate_page(va, asid);
        mmu.pwc.invalidate_asid(asid);
    });
    env.ev.invlpg += n;
    others
}

/// Invalidates every translation of `pm` on every CPU running it; returns
/// the mask of the other CPUs.
pub fn invalidate_all(env: &mut PmapEnv, pm: PmapId, asid: u16) -> u64 {
    let (n, others) = on_active_cpus(env, pm, asid, |mmu, asid| {
        mmu.tlb.invalidate_asid(asid);
        mmu.pwc.invalidate_asid(asid);
    });
    env.ev.tlb_flushes += n;
    others
}

/// Invalidates one address on every CPU running `pm` the way a
/// hardware-broadcast maintenance instruction does (ARMv7's TLBIMVAAIS,
/// arm64's TLBI VAE1IS): the issuing CPU executes one instruction and the
/// interconnect delivers it to the others, so no IPI is sent. TLB entries
/// of any size covering `va` go, and so do the address space's walk-cache
/// entries (by-address maintenance also drops cached table descriptors for
/// the address; the model drops the ASID's). Counted as one `invlpg`.
/// Returns the mask of the CPUs not running `pm`.
pub fn broadcast_invalidate_page(env: &mut PmapEnv, pm: PmapId, asid: u16, va: u64) -> u64 {
    let mut others = 0u64;
    for (c, mmu) in env.mmu.iter_mut().enumerate() {
        if env.curpmap[c] == Some(pm) {
            mmu.tlb.invalidate_page(va, asid);
            mmu.pwc.invalidate_asid(asid);
        } else {
            others |= 1 << c;
        }
    }
    env.ev.invlpg += 1;
    others
}

/// Invalidates with a broadcast instruction (Arm's TLBI ...IS, FreeBSD's
/// pmap_s1_invalidate_*): one instruction on the initiating CPU runs `f`
/// on every CPU of the inner-shareable domain, running the address space
/// or not; no interrupts, nothing left stale. Returns how many ran it.
pub fn broadcast(env: &mut PmapEnv, asid: u16, f: impl Fn(&mut Mmu, u16)) -> u64 {
    for mmu in env.mmu.iter_mut() {
        f(mmu, asid);
    }
    env.mmu.len() as u64
}
