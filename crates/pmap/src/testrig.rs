//! A test machine for pmap unit tests: physical memory, two CPUs with
//! small TLBs and walk caches, and one pmap of any architecture.

use splab_hw::machine::Mmu;
use splab_hw::mmu::{perm, Translation};
use splab_hw::physmem::PhysMem;
use splab_hw::pwc::{Pwc, PwcLevelConfig};
use splab_hw::tlb::{Tlb, TlbArrayConfig};
use splab_hw::{Pfn, VirtAddr};
use splab_vm::page::pflags;
use splab_vm::physalloc::{ObjInfo, Phys};
use splab_vm::pmap::{prot, Advice, EnterFlags, KernelEvents, Mapping, Pmap, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;

pub struct Rig<P: Pmap> {
    pub pmap: P,
    pub phys: Phys,
    pub mem: PhysMem,
    pub mmu: Vec<Mmu>,
    pub curpmap: Vec<Option<PmapId>>,
    pub ev: KernelEvents,
}

/// The object the rig's pages belong to.
const OBJ: ObjInfo = ObjInfo { id: 1, size: 1 << 20, color: 0, anon: true, colored: true };

impl<P: Pmap> Rig<P> {
    /// A machine of `npages` 4 KB pages running `pmap`, with 2 MB
    /// reservations, whose walk cache keeps pointers to last-level tables
    /// (shift 21).
    pub fn new(pmap: P, npages: u64) -> Rig<P> {
        Rig::with_reservations(pmap, npages, 9, 21)
    }

    /// The same with reservations of 2^`order` pages and a walk cache
    /// keyed by virtual-address bits above `pwc_shift`. The TLBs hold every
    /// page size any architecture has.
    pub fn with_reservations(pmap: P, npages: u64, order: u32, pwc_shift: u8) -> Rig<P> {
        let tlb = vec![
            TlbArrayConfig { sizes: vec!["4K".into()], entries: 64, ways: 4, level: 1, index: Default::default(), side: None },
            TlbArrayConfig { sizes: ["64K", "1M", "2M", "16M", "1G"].map(String::from).to_vec(), entries: 32, ways: 4, level: 1, index: Default::default(), side: None },
        ];
        Rig::build(pmap, npages, &tlb, &[12, 16, 20, 21, 24, 30], &[PwcLevelConfig { shift: pwc_shift, entries: 4 }], order)
    }

    /// As `new`, with each CPU's TLB made of the arrays `tlb` for the
    /// architecture's page sizes `shifts`.
    pub fn with_tlb(pmap: P, npages: u64, tlb: &[TlbArrayConfig], shifts: &[u8]) -> Rig<P> {
        Rig::build(pmap, npages, tlb, shifts, &[PwcLevelConfig { shift: 21, entries: 4 }], 9)
    }

    /// A machine whose CPUs have the given TLB arrays (for page sizes
    /// `shifts`) and walk caches (powerpc64 uses the walk cache as its
    /// SLB), with reservations of 2^`order` pages.
    pub fn with_mmu(pmap: P, npages: u64, tlb: &[TlbArrayConfig], shifts: &[u8], pwc: &[PwcLevelConfig], order: u32) -> Rig<P> {
        Rig::build(pmap, npages, tlb, shifts, pwc, order)
    }

    fn build(pmap: P, npages: u64, tlb: &[TlbArrayConfig], shifts: &[u8], pwc: &[PwcLevelConfig], order: u32) -> Rig<P> {
        let mmu = (0..2).map(|_| Mmu { tlb: Tlb::new(tlb, shifts).unwrap(), pwc: Pwc::new(pwc) }).collect();
        let phys = Phys::with_reservation_order(npages, 1, order);
        // Frames are the architecture's base pages (8 KB on the Alpha).
        let mem = PhysMem::with_page_shift(npages, pmap.pagesizes()[0].trailing_zeros(), false);
        Rig { pmap, phys, mem, mmu, curpmap: vec![None; 2], ev: KernelEvents::default() }
    }

    pub fn env(&mut self) -> (&mut P, PmapEnv<'_>) {
        (&mut self.pmap, PmapEnv { phys: &mut self.phys, mem: &mut self.mem, mmu: &mut self.mmu, curpmap: &mut self.curpmap, ev: &mut self.ev })
    }

    pub fn pinit(&mut self) -> PmapId {
        let (p, mut env) = self.env();
        p.pinit(&mut env).unwrap()
    }

    /// Page `pindex` of the rig's object (the one `superpage_run` maps),
    /// from its reservation.
    pub fn page(&mut self, pindex: u32) -> Pfn {
        self.phys.alloc_page(&OBJ, pindex).unwrap()
    }

    /// The pages of one object filling one reservation (512 with 2 MB
    /// reservations), all from that reservation.
    pub fn superpage_run(&mut self) -> Vec<Pfn> {
        let base = self.page(0);
        let mut v = vec![base];
        for i in 1..self.phys.reserv.npages() {
            v.push(self.page(i));
        }
        assert!(v.windows(2).all(|w| w[1].0 == w[0].0 + 1), "reservation gives contiguous frames");
        assert_eq!(self.phys.reserv.level_iffullpop(base), 0);
        v
    }

    /// Maps `pages` read/write from `va` on, one pmap_enter each, with the
    /// flags `flags(i)` gives page i.
    pub fn enter_all(&mut self, pm: PmapId, va: u64, pages: &[Pfn], flags: impl Fn(usize) -> EnterFlags) {
        let page = self.pmap.pagesizes()[0];
        for (i, &m) in pages.iter().enumerate() {
            let (p, mut env) = self.env();
            p.enter(&mut env, pm, VirtAddr(va + i as u64 * page), m, prot::RW, flags(i)).unwrap();
        }
    }

    /// A new address space with a fully populated reservation mapped at
    /// `va`, one pmap_enter per page with the flags `flags(i)` gives
    /// page i: its pages and the address space.
    pub fn mapped_run(&mut self, va: u64, flags: impl Fn(usize) -> EnterFlags) -> (Vec<Pfn>, PmapId) {
        let n = self.phys.reserv.npages() as usize;
        self.mapped_first(va, n, flags)
    }

    /// The same with only the first `n` pages of the reservation mapped
    /// (all of them are allocated).
    pub fn mapped_first(&mut self, va: u64, n: usize, flags: impl Fn(usize) -> EnterFlags) -> (Vec<Pfn>, PmapId) {
        let pages = self.superpage_run();
        let pm = self.pinit();
        self.enter_all(pm, va, &pages[..n], flags);
        (pages, pm)
    }

    /// pmap_enter.
    pub fn enter(&mut self, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        let (p, mut env) = self.env();
        p.enter(&mut env, pm, VirtAddr(va), m, pr, flags)
    }

    /// pmap_enter of a mapping of page size `psind`, entered for an
    /// access `access`.
    pub fn enter_psind(&mut self, pm: PmapId, va: u64, m: Pfn, pr: Prot, access: Prot, psind: Psind) -> Result<(), PmapError> {
        self.enter(pm, va, m, pr, EnterFlags { access, psind, ..Default::default() })
    }

    /// pmap_enter_object of [va, end) over the object pages `pages` maps
    /// from `va` on.
    pub fn enter_object(&mut self, pm: PmapId, va: u64, end: u64, pages: &[Pfn], pr: Prot) {
        let page = self.pmap.pagesizes()[0];
        let lookup = |v: VirtAddr| pages.get(((v.0 - va) / page) as usize).copied();
        let (p, mut env) = self.env();
        p.enter_object(&mut env, pm, VirtAddr(va), VirtAddr(end), &lookup, pr);
    }

    /// pmap_remove of [va, end).
    pub fn remove(&mut self, pm: PmapId, va: u64, end: u64) {
        let (p, mut env) = self.env();
        p.remove(&mut env, pm, VirtAddr(va), VirtAddr(end));
    }

    /// pmap_protect of [va, end).
    pub fn protect(&mut self, pm: PmapId, va: u64, end: u64, pr: Prot) {
        let (p, mut env) = self.env();
        p.protect(&mut env, pm, VirtAddr(va), VirtAddr(end), pr);
    }

    /// pmap_advise of [va, end).
    pub fn advise(&mut self, pm: PmapId, va: u64, end: u64, advice: Advice) {
        let (p, mut env) = self.env();
        p.advise(&mut env, pm, VirtAddr(va), VirtAddr(end), advice);
    }

    /// pmap_activate.
    pub fn activate(&mut self, pm: PmapId, cpu: usize) {
        let (p, mut env) = self.env();
        p.activate(&mut env, pm, cpu);
    }

    /// pmap_fault.
    pub fn fault(&mut self, pm: PmapId, va: u64, access: Prot) -> bool {
        let (p, mut env) = self.env();
        p.fault(&mut env, pm, VirtAddr(va), access)
    }

    /// pmap_remove_all.
    pub fn remove_all(&mut self, m: Pfn) {
        let (p, mut env) = self.env();
        p.remove_all(&mut env, m);
    }

    /// pmap_remove_write.
    pub fn remove_write(&mut self, m: Pfn) {
        let (p, mut env) = self.env();
        p.remove_write(&mut env, m);
    }

    /// The whole-superpage removal of the run holding `m`.
    pub fn remove_all_superpage(&mut self, m: Pfn) {
        let (p, mut env) = self.env();
        p.remove_all_superpage(&mut env, m);
    }

    /// pmap_ts_referenced.
    pub fn ts_referenced(&mut self, m: Pfn) -> u32 {
        let (p, mut env) = self.env();
        p.ts_referenced(&mut env, m)
    }

    /// pmap_clear_modify.
    pub fn clear_modify(&mut self, m: Pfn) {
        let (p, mut env) = self.env();
        p.clear_modify(&mut env, m);
    }

    /// pmap_is_modified.
    pub fn is_modified(&mut self, m: Pfn) -> bool {
        let (p, env) = self.env();
        p.is_modified(&env, m)
    }

    /// pmap_is_referenced.
    pub fn is_referenced(&mut self, m: Pfn) -> bool {
        let (p, env) = self.env();
        p.is_referenced(&env, m)
    }

    /// pmap_extract of `va`.
    /// A new address space active on both CPUs with the first `n` pages
    /// of a fully populated reservation mapped read/write at `va`, each
    /// entered with a read/write access: its pages and the address space.
    pub fn mapped_on_both_cpus(&mut self, va: u64, n: usize) -> (Vec<Pfn>, PmapId) {
        let pages = self.superpage_run();
        let pm = self.pinit();
        self.activate(pm, 0);
        self.activate(pm, 1);
        self.enter_all(pm, va, &pages[..n], |_| rw_access());
        (pages, pm)
    }

    pub fn extract(&self, pm: PmapId, va: u64) -> Option<Mapping> {
        self.pmap.extract(&self.mem, pm, VirtAddr(va))
    }

    /// Every CPU's TLB holds the translation `t` of `va` tagged `asid`.
    pub fn fill_tlbs(&mut self, va: u64, asid: u16, t: Translation) {
        for c in &mut self.mmu {
            c.tlb.fill(va, asid, t);
        }
    }

    /// Whether some CPU's TLB holds a translation of `va` tagged `asid`.
    pub fn tlb_holds(&mut self, va: u64, asid: u16) -> bool {
        self.mmu.iter_mut().any(|c| c.tlb.lookup(va, asid).is_some())
    }

    /// For a pmap without ASIDs: switching CPU 1 to another address space
    /// drops the translation `t` of `va` it held for `pm`, and both
    /// address spaces have the one tag `asid`.
    pub fn assert_switch_flushes(&mut self, pm: PmapId, va: u64, asid: u16, t: Translation) {
        let other = self.pinit();
        self.mmu[1].tlb.fill(va, asid, t);
        self.activate(other, 1);
        assert!(self.mmu[1].tlb.lookup(va, asid).is_none(), "a switch kept the old address space's translation");
        assert_eq!((self.pmap.asid(pm), self.pmap.asid(other)), (asid, asid));
    }

    /// Breaks the pmap's state behind its back with `corrupt`; the checker
    /// must then fail saying `what`.
    pub fn assert_check_finds(&mut self, what: &str, corrupt: impl FnOnce(&mut P, &mut PmapEnv)) {
        let (p, mut env) = self.env();
        corrupt(p, &mut env);
        let e = p.check(&env).unwrap_err();
        assert!(e.contains(what), "{e}");
    }

    /// 1 GB of contiguous, 1 GB-aligned frames taken as large-page shared
    /// memory (in use, unmanaged): the first of them.
    pub fn large_page_memory(&mut self) -> Pfn {
        let base = self.phys.buddy.alloc_contig(1 << 18, 1 << 18).unwrap();
        for i in 0..1u32 << 18 {
            self.phys.pages.get_mut(Pfn(base.0 + i)).flags = pflags::INUSE | pflags::UNMANAGED | pflags::LARGEPAGE;
        }
        base
    }

    /// Takes every free page, so that nothing more can be allocated.
    pub fn exhaust_memory(&mut self) {
        while self.phys.alloc_noobj().is_some() {}
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
/// The translation a TLB holds for a user-readable 4 KB mapping of `m`.
pub fn user_read_4k(m: Pfn) -> Translation {
    Translation { pa_base: m.addr_4k().0, shift: 12, perm: perm::READ | perm::USER }
}

pub fn rw_access() -> EnterFlags {
    EnterFlags { access: prot::READ | prot::WRITE, ..Default::default() }
}

/// The flags of a mapping entered for a read fault.
pub fn read_access() -> EnterFlags {
    EnterFlags { access: prot::READ, ..Default::default() }
}
