//! Segments of user address spaces (FreeBSD's sys/powerpc/aim/slb.c and
//! moea64_get_unique_vsid): a VSID for each segment an address space
//! touches, allocated on first use (va_to_vsid, allocate_user_vsid) and
//! never reused while the address space lives; the user SLB cache
//! (pm_slb, slb_insert_user) the kernel loads into a CPU's SLB whenever it
//! returns to that address space in user mode.
//!
//! The model's SLB is each CPU's walk cache at SEGMENT_SHIFT (its size is
//! the machine profile's). Loading it is `slb_load`, done at context switch
//! (moea64_activate) and at the end of every page or segment fault.

use super::{Ppc64, Pm};
use splab_hw::ppc64::hpt::{ctx_insert, CTX_SEG_SLOTS};
use splab_hw::ppc64::slb::SlbV;
use splab_hw::ppc64::{esid, SEGMENT_SHIFT};
use splab_vm::pmap::{PmapEnv, PmapError, PmapId};

/// Entries of the user SLB cache: FreeBSD's n_slbs, 64 unless the device
/// tree says fewer. The CPUs' SLBs (32 entries on POWER8 and POWER9) keep
/// the most recently loaded ones.
pub const SLB_CACHE: usize = 64;

/// User VSIDs: 32 bits, as FreeBSD's VSID_HASHMASK allows; 0 is special.
const VSID_USER_MASK: u64 = 0xffff_ffff;

impl Ppc64 {
    /// A VSID no address space has (moea64_get_unique_vsid): a
    /// multiplicative sequence stirred with the timebase, skipping values in
    /// use, so that VSIDs (and so hashes) of address spaces are spread.
    fn unique_vsid(&mut self) -> u64 {
        loop {
            let entropy = self.mftb();
            self.vsid_ctx = self.vsid_ctx.wrapping_mul(0x1105).wrapping_add(entropy);
            let v = self.vsid_ctx & VSID_USER_MASK;
            if v != 0 && !self.vsid_owner.contains_key(&v) {
                return v;
            }
        }
    }

    /// The VSID of the segment holding `va` in `pm`, allocating one if the
    /// segment has none yet (va_to_vsid, allocate_user_vsid). The segment
    /// goes into the context page's segment table and the user SLB cache,
    /// and so into the SLB of the CPUs running `pm`. Fails only when the
    /// segment table is full.
    pub(crate) fn vsid(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<u64, PmapError> {
        let e = esid(va);
        if let Some(&v) = self.pm(pm).segs.get(&e) {
            return Ok(v);
        }
        if self.pm(pm).segs.len() as u64 >= CTX_SEG_SLOTS {
            return Err(PmapError::NoMemory);
        }
        let v = self.unique_vsid();
        let ctx = self.pm(pm).ctx.addr().0;
        let stored = ctx_insert(env.mem, ctx, e, SlbV::user(v));
        debug_assert!(stored, "segment table has room");
        self.vsid_owner.insert(v, (pm, e));
        self.pm_mut(pm).segs.insert(e, v);
        self.slb_insert_user(pm, e);
        // The kernel's return to user space loads it.
        self.slb_load(env, pm, e);
        Ok(v)
    }

    /// Puts segment `esid` into `pm`'s user SLB cache (slb_insert_user):
    /// the next free slot, or once full a random one.
    pub(crate) fn slb_insert_user(&mut self, pm: PmapId, esid: u64) {
        if self.pm(pm).slb_cache.contains(&esid) {
            return;
        }
        let r = self.mftb() as usize;
        let p = self.pm_mut(pm);
        if p.slb_cache.len() < SLB_CACHE {
            p.slb_cache.push(esid);
        } else {
            p.slb_cache[r % SLB_CACHE] = esid;
        }
    }

    fn slb_fill(p: &Pm, env: &mut PmapEnv, pm: PmapId, cpu: usize, esid: u64) {
        let v = SlbV::user(p.segs[&esid]);
        env.mmu[cpu].pwc.fill(esid << SEGMENT_SHIFT, pm as u16, SEGMENT_SHIFT as u8, v.0);
    }

    /// Loads `pm`'s user SLB cache into the SLB of `cpu` (restore_usersrs).
    pub(crate) fn slb_load_cpu(&self, env: &mut PmapEnv, pm: PmapId, cpu: usize) {
        let p = self.pm(pm);
        for &e in &p.slb_cache {
            Self::slb_fill(p, env, pm, cpu, e);
        }
    }

    /// Loads `pm`'s user SLB cache into the SLB of every CPU running it,
    /// `last` last so that it is surely there: what each of them does on
    /// its next return to user space, done at once.
    pub(crate) fn slb_load(&self, env: &mut PmapEnv, pm: PmapId, last: u64) {
        let p = self.pm(pm);
        for cpu in 0..env.mmu.len() {
            if env.curpmap[cpu] == Some(pm) {
                self.slb_load_cpu(env, pm, cpu);
                Self::slb_fill(p, env, pm, cpu, last);
            }
        }
    }
}
