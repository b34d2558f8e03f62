//! A test machine for pmap unit tests: physical memory, two CPUs with
//! small TLBs and walk caches, and one pmap of any architecture.

use splab_hw::mmu::Mmu;
use splab_hw::physmem::PhysMem;
use splab_hw::pwc::{Pwc, PwcLevelConfig};
use splab_hw::tlb::{Tlb, TlbArrayConfig};
use splab_hw::{Pfn, VirtAddr};
use splab_vm::physalloc::{ObjInfo, Phys};
use splab_vm::pmap::{prot, CpuState, EnterFlags, KernelEvents, Pmap, PmapEnv, PmapId};
use splab_vm::sysctl::Sysctls;

pub struct Rig<P: Pmap> {
    pub pmap: P,
    pub phys: Phys,
    pub mem: PhysMem,
    pub cpus: Vec<CpuState>,
    pub ev: KernelEvents,
}

impl<P: Pmap> Rig<P> {
    /// A machine of `npages` 4 KB pages running `pmap`, whose walk cache
    /// keeps pointers to last-level tables (shift 21).
    pub fn new(pmap: P, npages: u64) -> Rig<P> {
        let tlb = vec![
            TlbArrayConfig { sizes: vec!["4K".into()], entries: 64, ways: 4, level: 1 },
            TlbArrayConfig { sizes: vec!["2M".into(), "1G".into()], entries: 32, ways: 4, level: 1 },
        ];
        Self::with_mmu(pmap, npages, &tlb, &[12, 21, 30], &[PwcLevelConfig { shift: 21, entries: 4 }], 9)
    }

    /// A machine whose CPUs have the given TLB arrays (for page sizes
    /// `shifts`) and walk caches, with reservations of 2^`order` pages.
    pub fn with_mmu(pmap: P, npages: u64, tlb: &[TlbArrayConfig], shifts: &[u8], pwc: &[PwcLevelConfig], order: u32) -> Rig<P> {
        let cpus = (0..2).map(|_| CpuState { mmu: Mmu { tlb: Tlb::new(tlb, shifts).unwrap(), pwc: Pwc::new(pwc) }, curpmap: None }).collect();
        Rig { pmap, phys: Phys::with_reservation_order(npages, 1, order), mem: PhysMem::new(npages, false), cpus, ev: KernelEvents::default() }
    }

    pub fn env(&mut self) -> (&mut P, PmapEnv<'_>) {
        (&mut self.pmap, PmapEnv { phys: &mut self.phys, mem: &mut self.mem, cpus: &mut self.cpus, ev: &mut self.ev })
    }

    pub fn pinit(&mut self) -> PmapId {
        let (p, mut env) = self.env();
        p.pinit(&mut env).unwrap()
    }

    /// The pages of one object that fill one reservation (512 with 2 MB
    /// reservations), in order.
    pub fn superpage_run(&mut self) -> Vec<Pfn> {
        let o = ObjInfo { id: 1, size: 1 << 20, color: 0, anon: true, colored: true };
        let base = self.phys.alloc_page(&o, 0).unwrap();
        let mut v = vec![base];
        for i in 1..self.phys.reserv.npages() {
            v.push(self.phys.alloc_page(&o, i).unwrap());
        }
        assert!(v.windows(2).all(|w| w[1].0 == w[0].0 + 1), "reservation gives contiguous frames");
        assert_eq!(self.phys.reserv.level_iffullpop(base), 0);
        v
    }

    /// Maps `pages` read/write from `va` on, one pmap_enter each, with the
    /// flags `flags(i)` gives page i.
    pub fn enter_all(&mut self, pm: PmapId, va: u64, pages: &[Pfn], flags: impl Fn(usize) -> EnterFlags) {
        for (i, &m) in pages.iter().enumerate() {
            let (p, mut env) = self.env();
            p.enter(&mut env, pm, VirtAddr(va + i as u64 * 4096), m, prot::RW, flags(i)).unwrap();
        }
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

/// The flags of a mapping entered for a write fault.
pub fn rw_access() -> EnterFlags {
    EnterFlags { access: prot::READ | prot::WRITE, ..Default::default() }
}
