//! A small machine for testing a pmap directly: physical memory with 2 MB
//! reservations, two CPUs with TLBs and walk caches, and the pmap.

use splab_hw::mmu::Mmu;
use splab_hw::physmem::PhysMem;
use splab_hw::pwc::{Pwc, PwcLevelConfig};
use splab_hw::tlb::{Tlb, TlbArrayConfig};
use splab_hw::Pfn;
use splab_vm::physalloc::{ObjInfo, Phys};
use splab_vm::pmap::{CpuState, KernelEvents, Pmap, PmapEnv};
use splab_vm::sysctl::Sysctls;

pub struct Rig<P> {
    pub pmap: P,
    pub phys: Phys,
    pub mem: PhysMem,
    pub cpus: Vec<CpuState>,
    pub ev: KernelEvents,
}

/// The object the rig's pages belong to.
const OBJ: ObjInfo = ObjInfo { id: 1, size: 1 << 20, color: 0, anon: true, colored: true };

impl<P: Pmap> Rig<P> {
    /// `npages` of memory; each CPU gets the TLB arrays `tlb` for the
    /// architecture's page sizes `shifts` and a walk cache of L2 tables.
    pub fn new(pmap: P, npages: u64, tlb: &[TlbArrayConfig], shifts: &[u8]) -> Rig<P> {
        let cpus = (0..2)
            .map(|_| CpuState {
                mmu: Mmu { tlb: Tlb::new(tlb, shifts).unwrap(), pwc: Pwc::new(&[PwcLevelConfig { shift: 21, entries: 4 }]) },
                curpmap: None,
            })
            .collect();
        Rig { pmap, phys: Phys::new(npages, 1), mem: PhysMem::new(npages, false), cpus, ev: KernelEvents::default() }
    }

    pub fn env(&mut self) -> (&mut P, PmapEnv<'_>) {
        (&mut self.pmap, PmapEnv { phys: &mut self.phys, mem: &mut self.mem, cpus: &mut self.cpus, ev: &mut self.ev })
    }

    /// Page `pindex` of the rig's object, from its reservation.
    pub fn page(&mut self, pindex: u32) -> Pfn {
        self.phys.alloc_page(&OBJ, pindex).unwrap()
    }

    pub fn stat(&self, name: &str) -> i64 {
        let mut s = Sysctls::default();
        self.pmap.sysctls(&mut s);
        s.get_int(name).unwrap_or_else(|| panic!("no sysctl {name}"))
    }

    pub fn check(&mut self) {
        let (p, env) = self.env();
        p.check(&env).unwrap();
    }
}
