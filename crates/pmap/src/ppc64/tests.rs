//! Direct tests of the ppc64-hpt pmap, with the hardware search of
//! splab_hw::ppc64 standing for the MMU: the HPT's size and place, entry
//! insertion and the hash, segment faults, eviction from a full pair of
//! PTEGs and re-insertion on the fault, promotion and each reason it
//! fails, demotion, removal and protection of whole and partial
//! superpages, direct 16 MB mappings, tlbie reaching every CPU, and the
//! reference and change operations of the page daemon (ts_referenced,
//! clear_modify, remove_all_superpage) on superpages and 4 KB pages.

use super::native::pteg_count;
use splab_hw::VirtAddr;
use splab_hw::ppc64::SEGMENT_SIZE;
use super::*;
use crate::refbits;
use crate::testrig::{rw_access, Rig};
use splab_hw::mmu::{perm, Access, Translation, WalkFault, WalkRefs, WalkReq};
use splab_hw::ppc64::hpt::{ctx_lookup, HptWalker, CTX_HTAB};
use splab_hw::ppc64::pte::{Hpte, HpteLo};
use splab_hw::pwc::PwcLevelConfig;
use splab_hw::tlb::TlbArrayConfig;
use splab_vm::page::pflags;
use splab_vm::pmap::{prot, EnterFlags, Pmap};

/// A 16 MB-aligned user address, at the start of segment 0x100.
const VA: u64 = 0x10_0000_0000;

/// A machine of `npages` with 16 MB reservations, an ERAT-like TLB for
/// 4 KB and 16 MB pages, and an 8-entry SLB.
fn rig(npages: u64) -> Rig<PmapPpc64> {
    let tlb = [TlbArrayConfig { sizes: vec!["4K".into(), "16M".into()], entries: 64, ways: 64, level: 1, index: Default::default(), side: None }];
    let slb = [PwcLevelConfig { shift: SEGMENT_SHIFT as u8, entries: 8 }];
    Rig::with_mmu(PmapPpc64::new(npages, true), npages, &tlb, &[12, 24], &slb, 12)
}

/// A new address space, running on CPU 0.
fn space(r: &mut Rig<PmapPpc64>) -> PmapId {
    let pm = r.pinit();
    r.activate(pm, 0);
    pm
}

/// The hardware's search for `va` on `cpu`, as a TLB miss makes it.
fn walk(r: &mut Rig<PmapPpc64>, cpu: usize, pm: PmapId, va: u64, acc: Access) -> Result<Translation, WalkFault> {
    let (root, asid) = (r.pmap.root(pm), r.pmap.asid(pm));
    let mut refs = WalkRefs::default();
    HptWalker.walk(&mut r.mem, &mut r.mmu[cpu].pwc, WalkReq::new(root, asid, VirtAddr(va), acc), &mut refs)
}

/// An access by the program on `cpu`: walks, and gives faults to the
/// pmap's fault handler, which must resolve them; fills the TLB.
fn touch(r: &mut Rig<PmapPpc64>, cpu: usize, pm: PmapId, va: u64, acc: Access) -> Translation {
    for _ in 0..3 {
        match walk(r, cpu, pm, va, acc) {
            Ok(t) => {
                r.mmu[cpu].tlb.fill(va, pm as u16, t);
                return t;
            }
            Err(f) => {
                let want = if acc == Access::Write { prot::WRITE } else { prot::READ };
                assert!(r.fault(pm, va & !0xfff, want), "{va:#x}: {f:?} not resolved by the pmap");
            }
        }
    }
    panic!("{va:#x}: still faulting");
}

fn enter(r: &mut Rig<PmapPpc64>, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) {
    r.enter(pm, va, m, pr, flags).unwrap();
}

fn modified(r: &mut Rig<PmapPpc64>, m: Pfn) -> bool {
    r.is_modified(m)
}

fn mapped(r: &mut Rig<PmapPpc64>, m: Pfn) -> bool {
    let (p, env) = r.env();
    p.page_is_mapped(&env, m)
}

fn pvo(r: &Rig<PmapPpc64>, pm: PmapId, va: u64) -> Pvo {
    *r.pmap.0.pvo(pm, va).expect("mapped")
}

/// The HPT entry of the mapping at `va`.
fn hpte(r: &Rig<PmapPpc64>, pm: PmapId, va: u64) -> Hpte {
    let p = pvo(r, pm, va);
    assert!(p.in_table(), "{va:#x} is not in the HPT");
    let pa = r.pmap.0.geom().slot_pa(p.slot as u64);
    Hpte { hi: r.mem.read_u64(PhysAddr(pa)), lo: r.mem.read_u64(PhysAddr(pa + 8)) }
}

/// Maps a whole reservation read/write at VA and returns its pages.
fn promoted(r: &mut Rig<PmapPpc64>, pm: PmapId) -> Vec<Pfn> {
    let pages = r.superpage_run();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.sp.promotions"), 1);
    pages
}

/// A rig of 32768 pages and an address space active on CPU 0 with a
/// promoted superpage at VA: the rig, the address space and its pages.
fn promoted_space() -> (Rig<PmapPpc64>, PmapId, Vec<Pfn>) {
    let mut r = rig(32768);
    let pm = space(&mut r);
    let pages = promoted(&mut r, pm);
    (r, pm, pages)
}

#[test]
fn hpt_is_sized_from_memory_and_described_in_each_context_page() {
    let mut r = rig(32768);
    let pm = r.pinit();
    let g = r.pmap.0.geom();
    assert_eq!(g.pteg_count, pteg_count(32768));
    assert_eq!(g.pteg_count, 16384, "half a PTEG per page");
    assert_eq!(g.htaborg % g.bytes(), 0, "aligned to its size");
    let first = PhysAddr(g.htaborg).pfn_4k();
    assert!((0..g.bytes() / 4096).all(|i| r.phys.pages.get(Pfn(first.0 + i as u32)).has(pflags::INUSE)));
    assert_eq!(r.mem.read_u64(PhysAddr(r.pmap.root(pm).0 + CTX_HTAB)), g.to_pate());
    assert_eq!(r.stat("splab.pmap.hpt.ptegs"), 16384);
    assert_eq!(r.stat("vm.pmap.superpages_enabled"), 1);
    r.check();
}

#[test]
fn entered_page_is_found_by_the_hash_and_the_hardware_sets_r_and_c() {
    let mut r = rig(8192);
    let pm = space(&mut r);
    let m = r.phys.alloc_noobj().unwrap();
    let va = VA + 0x1234_5000;
    enter(&mut r, pm, va, m, prot::RW, rw_access());
    let vsid = r.pmap.0.vsid_of(pm, va);
    let e = hpte(&r, pm, va);
    // The entry is in the PTEG the hash of VSID and page index names.
    let slot = pvo(&r, pm, va).slot as u64;
    assert_eq!(slot / 8, r.pmap.0.geom().groups(vsid, va, 12)[e.hid() as usize]);
    assert!(e.matches(vsid, va, 12) && !e.large());
    assert_eq!((e.frame(12), e.lo & HpteLo::PP.bits()), (m.addr_4k().0, HpteLo::PP_RW.bits()));
    assert!(e.lo_flags().contains(HpteLo::N | HpteLo::M), "not executable, coherent memory");
    assert_eq!(ctx_lookup(&r.mem, r.pmap.root(pm).0, va >> 28).unwrap().vsid(), vsid);
    // The segment was set up by pmap_enter; the SLB gets it at the fault.
    let t = touch(&mut r, 0, pm, va + 8, Access::Read);
    assert_eq!((t.pa(va + 8), t.shift), (PhysAddr(m.addr_4k().0 + 8), 12));
    assert_eq!(t.perm & perm::DIRTY, 0);
    assert!(hpte(&r, pm, va).lo_flags().contains(HpteLo::R) && !hpte(&r, pm, va).lo_flags().contains(HpteLo::C));
    touch(&mut r, 0, pm, va, Access::Write);
    assert!(hpte(&r, pm, va).lo_flags().contains(HpteLo::C));
    assert!(modified(&mut r, m));
    assert_eq!(r.stat("machdep.moea64_pte_valid"), 1);
    r.check();
}

#[test]
fn a_new_segment_faults_once_then_the_page_fault_goes_to_the_vm() {
    let mut r = rig(8192);
    let pm = space(&mut r);
    let va = VA + 0x5000;
    assert_eq!(walk(&mut r, 0, pm, va, Access::Read), Err(WalkFault::Segment));
    assert!(r.fault(pm, va, prot::READ), "handle_user_slb_spill");
    assert_eq!(r.stat("splab.pmap.slb.spills"), 1);
    assert_eq!(r.stat("splab.pmap.slb.vsids"), 1);
    assert_eq!(walk(&mut r, 0, pm, va, Access::Read), Err(WalkFault::NotPresent { level: 0 }));
    assert!(!r.fault(pm, va, prot::READ), "nothing mapped: vm_fault's business");
    // The other CPU does not run the address space: its SLB stays empty.
    assert_eq!(walk(&mut r, 1, pm, va, Access::Read), Err(WalkFault::Segment));
    // A second address space gets another VSID for the same segment.
    let pm2 = r.pinit();
    let (p, mut env) = r.env();
    let v2 = p.0.vsid(&mut env, pm2, va).unwrap();
    assert_ne!(v2, r.pmap.0.vsid_of(pm, va));
    r.check();
    // Exit: the VSIDs go back.
    let (p, mut env) = r.env();
    p.release(&mut env, pm2);
    assert_eq!(r.stat("splab.pmap.slb.vsids"), 1);
}

/// 17 pages whose entries all belong to one pair of PTEGs: 2048 PTEGs
/// (11 hash bits), so pages 8 MB apart in a segment share the hash.
fn crowd(r: &mut Rig<PmapPpc64>, pm: PmapId) -> (Vec<u64>, Vec<Pfn>) {
    let vas: Vec<u64> = (0..17).map(|j| VA + j * (8 << 20)).collect();
    let (p, mut env) = r.env();
    let vsid = p.0.vsid(&mut env, pm, VA).unwrap();
    let g = r.pmap.0.geom();
    assert_eq!(g.pteg_count, 2048);
    assert!(vas.iter().all(|&v| g.groups(vsid, v, 12) == g.groups(vsid, VA, 12)));
    let pages = (0..17).map(|_| r.phys.alloc_noobj().unwrap()).collect();
    (vas, pages)
}

#[test]
fn a_full_pteg_pair_evicts_an_unreferenced_entry_and_the_fault_puts_it_back() {
    let mut r = rig(4096);
    let pm = space(&mut r);
    let (vas, pages) = crowd(&mut r, pm);
    for i in 0..16 {
        enter(&mut r, pm, vas[i], pages[i], prot::RW, rw_access());
    }
    let (p, s) = (pvo(&r, pm, vas[0]).slot / 8, pvo(&r, pm, vas[15]).slot / 8);
    assert_ne!(p, s, "8 went to the primary PTEG, 8 to the secondary");
    // Every page but number 9 is referenced, and number 9 dirty first.
    touch(&mut r, 0, pm, vas[9], Access::Write);
    let rc9 = hpte(&r, pm, vas[9]).lo_flags();
    assert!(rc9.contains(HpteLo::R | HpteLo::C));
    let slot9 = pvo(&r, pm, vas[9]).slot;
    let pa9 = r.pmap.0.geom().slot_pa(slot9 as u64);
    r.mem.write_u64(PhysAddr(pa9 + 8), r.mem.read_u64(PhysAddr(pa9 + 8)) & !HpteLo::R.bits());
    for i in (0..16).filter(|&i| i != 9) {
        touch(&mut r, 0, pm, vas[i], Access::Read);
    }
    assert!(r.mmu[0].tlb.lookup(vas[9], pm as u16).is_some());
    enter(&mut r, pm, vas[16], pages[16], prot::RW, rw_access());
    assert_eq!(pvo(&r, pm, vas[16]).slot, slot9, "the unreferenced entry made room");
    let out = pvo(&r, pm, vas[9]);
    assert!(!out.in_table());
    assert_eq!(out.refchg, rc::CHG, "its C bit is kept with the PVO");
    assert!(r.mmu[0].tlb.lookup(vas[9], pm as u16).is_none(), "tlbie");
    assert_eq!((r.stat("machdep.moea64_pte_overflow"), r.stat("splab.pmap.hpt.evictions")), (1, 1));
    r.check();
    // The next access misses in the HPT; the fault hook puts it back
    // (evicting another) without vm_fault.
    assert_eq!(walk(&mut r, 0, pm, vas[9], Access::Read), Err(WalkFault::NotPresent { level: 0 }));
    let t = touch(&mut r, 0, pm, vas[9], Access::Read);
    assert_eq!(t.pa_base, pages[9].addr_4k().0);
    assert_eq!((r.stat("splab.pmap.hpt.reinserts"), r.stat("splab.pmap.hpt.evictions")), (1, 2));
    assert_eq!(r.stat("machdep.moea64_pte_overflow"), 1);
    assert!(modified(&mut r, pages[9]), "the change bit survived the eviction");
    // Removing an evicted mapping hands its kept bits to the page.
    let evicted = vas.iter().copied().find(|&v| !pvo(&r, pm, v).in_table()).unwrap();
    r.remove(pm, evicted, evicted + 4096);
    assert_eq!(r.stat("machdep.moea64_pte_overflow"), 0);
    r.check();
}

#[test]
fn wired_entries_are_never_evicted() {
    let mut r = rig(4096);
    let pm = space(&mut r);
    let (vas, pages) = crowd(&mut r, pm);
    let wired = EnterFlags { wired: true, ..rw_access() };
    for i in 0..16 {
        enter(&mut r, pm, vas[i], pages[i], prot::RW, if i == 4 { rw_access() } else { wired });
    }
    for &v in &vas[..16] {
        touch(&mut r, 0, pm, v, Access::Read);
    }
    enter(&mut r, pm, vas[16], pages[16], prot::RW, wired);
    assert!(!pvo(&r, pm, vas[4]).in_table(), "the one unwired entry went, referenced or not");
    assert!(vas.iter().enumerate().all(|(i, &v)| i == 4 || pvo(&r, pm, v).in_table()));
    assert!(hpte(&r, pm, vas[16]).wired());
    r.check();
}

#[test]
fn a_full_reservation_promotes_to_16mb_entries() {
    let (mut r, pm, pages) = promoted_space();
    // Every enter before the last found some page unmapped.
    assert_eq!(r.stat("vm.pmap.sp.p_failures"), 4095);
    assert_eq!(r.stat("splab.pmap.sp.p_fail_unmapped"), 4095);
    // The k-th of them walked the k PVOs there were and one step more.
    assert_eq!(r.ev.promotion_scanned, (1..4096u64).map(|k| k + 1).sum::<u64>());
    assert_eq!((r.stat("vm.pmap.sp.mappings"), r.ev.promotions), (1, 1));
    for i in [0u64, 1, 2047, 4095] {
        let p = pvo(&r, pm, VA + i * 4096);
        assert!(p.large() && p.pa == pages[i as usize].addr_4k().0);
        let e = hpte(&r, pm, VA + i * 4096);
        assert!(e.large() && e.actual_shift(12) == Some(24) && e.frame(24) == pages[0].addr_4k().0, "{e:?}");
    }
    let m = r.extract(pm, VA + 5 * 4096 + 8).unwrap();
    assert_eq!((m.shift, m.pa.0), (24, pages[5].addr_4k().0 + 8));
    // One TLB entry, from any page's HPT entry, covers all 16 MB.
    let t = touch(&mut r, 0, pm, VA + 77 * 4096, Access::Write);
    assert_eq!((t.shift, t.pa_base), (24, pages[0].addr_4k().0));
    let (hit, _) = r.mmu[0].tlb.lookup(VA + SP_SIZE - 8, pm as u16).unwrap();
    assert_eq!(hit.pa(VA + SP_SIZE - 8), PhysAddr(pages[4095].addr_4k().0 + 4088));
    // A writable superpage counts as referenced and modified, all of it.
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY) && r.phys.pages.get(m).has(pflags::REFERENCED)));
    assert!(modified(&mut r, pages[3000]));
    assert_eq!(r.pmap.0.pv.live(), 4096, "one PVO per page still");
    r.check();
}

#[test]
fn promotion_fails_on_other_frames_protection_flags_and_wimg() {
    // Two frames swapped: the PAs do not follow.
    let mut r = rig(32768);
    let pm = space(&mut r);
    let mut pages = r.superpage_run();
    pages.swap(10, 11);
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!((r.stat("vm.pmap.sp.promotions"), r.stat("vm.pmap.sp.p_fail_pa")), (0, 1));

    // One page read-only.
    let mut r = rig(32768);
    let pm = space(&mut r);
    let pages = r.superpage_run();
    for (i, &m) in pages.iter().enumerate() {
        let pr = if i == 100 { prot::READ } else { prot::RW };
        enter(&mut r, pm, VA + i as u64 * 4096, m, pr, rw_access());
    }
    assert_eq!((r.stat("vm.pmap.sp.promotions"), r.stat("vm.pmap.sp.p_fail_prot")), (0, 1));
    assert_eq!(r.stat("vm.pmap.sp.p_failures"), 4096);

    // One page wired.
    let mut r = rig(32768);
    let pm = space(&mut r);
    let pages = r.superpage_run();
    r.enter_all(pm, VA, &pages, |i| EnterFlags { wired: i == 7, ..rw_access() });
    assert_eq!((r.stat("vm.pmap.sp.promotions"), r.stat("vm.pmap.sp.p_fail_flags")), (0, 1));

    // One page with other storage attributes (as pmap_page_set_memattr
    // would leave it): write-through.
    let mut r = rig(32768);
    let pm = space(&mut r);
    let pages = r.superpage_run();
    r.enter_all(pm, VA, &pages[..4095], |_| rw_access());
    r.pmap.0.pvo_mut(pm, VA + 300 * 4096).wimg |= HpteLo::W.bits() as u8;
    enter(&mut r, pm, VA + 4095 * 4096, pages[4095], prot::RW, rw_access());
    assert_eq!((r.stat("vm.pmap.sp.promotions"), r.stat("vm.pmap.sp.p_fail_wimg")), (0, 1));
    assert!(!pvo(&r, pm, VA).large());
}

#[test]
fn a_partial_protect_demotes_and_keeps_every_page_mapped() {
    let (mut r, pm, pages) = promoted_space();
    r.activate(pm, 1);
    touch(&mut r, 0, pm, VA + 4096, Access::Read);
    touch(&mut r, 1, pm, VA + 4096, Access::Read);
    r.protect(pm, VA + 4096, VA + 3 * 4096, prot::READ);
    assert_eq!((r.stat("vm.pmap.sp.demotions"), r.ev.demotions), (1, 1));
    for c in 0..2 {
        assert!(r.mmu[c].tlb.lookup(VA + 4096, pm as u16).is_none(), "tlbie reaches CPU {c}");
    }
    let ro = r.extract(pm, VA + 4096).unwrap();
    let rw = r.extract(pm, VA + 3 * 4096).unwrap();
    assert_eq!((ro.shift, ro.prot & prot::WRITE, rw.shift, rw.prot & prot::WRITE), (12, 0, 12, prot::WRITE));
    assert!((0..SP_PAGES).all(|i| !pvo(&r, pm, VA + i * 4096).large()));
    assert!(!hpte(&r, pm, VA + 4096).large());
    assert_eq!(hpte(&r, pm, VA + 4096).lo & HpteLo::PP.bits(), HpteLo::PP_RO.bits());
    assert_eq!(walk(&mut r, 0, pm, VA + 2 * 4096, Access::Write), Err(WalkFault::Protection));
    assert_eq!(walk(&mut r, 0, pm, VA + 5 * 4096, Access::Write).unwrap().shift, 12);
    assert_eq!(r.ev.pt_page_allocs, 1, "demotion needs no memory (the one page is the context page)");
    let _ = pages;
    r.check();
}

#[test]
fn removal_of_whole_and_partial_superpages() {
    let (mut r, pm, _) = promoted_space();
    // A page in the middle: demote, then remove it alone.
    r.remove(pm, VA + 40 * 4096, VA + 41 * 4096);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 1);
    assert!(r.extract(pm, VA + 40 * 4096).is_none());
    assert_eq!(r.pmap.0.pv.live(), 4095);
    r.check();
    // Fill the hole again: the reservation is full, so it promotes again.
    let m = PhysAddr(pvo(&r, pm, VA).pa + 40 * 4096).pfn_4k();
    enter(&mut r, pm, VA + 40 * 4096, m, prot::RW, rw_access());
    assert_eq!(r.stat("vm.pmap.sp.promotions"), 2);
    // The whole range: removed as a superpage, no demotion.
    r.remove(pm, VA - SP_SIZE, VA + 2 * SP_SIZE);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 1);
    assert_eq!((r.pmap.0.pv.live(), r.stat("machdep.moea64_pte_valid")), (0, 0));
    assert!(r.mmu[0].tlb.lookup(VA, pm as u16).is_none());
    r.check();
    let (p, mut env) = r.env();
    p.release(&mut env, pm);
    r.check();
}

#[test]
fn direct_16mb_mapping_then_remove_write_and_remove_all_demote() {
    let mut r = rig(32768);
    let pm = space(&mut r);
    let pages = r.superpage_run();
    r.enter(pm, VA, pages[0], prot::RW, EnterFlags { access: prot::RW, psind: Psind::new(1), ..Default::default() }).unwrap();
    assert_eq!((r.stat("vm.pmap.sp.mappings"), r.stat("vm.pmap.sp.promotions")), (1, 0));
    assert!(pvo(&r, pm, VA + 1234 * 4096).large());
    assert_eq!(touch(&mut r, 0, pm, VA + 99, Access::Write).shift, 24);
    r.check();
    // Write protection of one page demotes; the written entry's C bit
    // counts for the whole superpage.
    r.remove_write(pages[9]);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 1);
    assert_eq!(pvo(&r, pm, VA + 9 * 4096).prot, prot::READ);
    assert_eq!(pvo(&r, pm, VA + 10 * 4096).prot, prot::RW);
    assert!(r.phys.pages.get(pages[2000]).has(pflags::DIRTY));
    // Repromotion is not tried by protection changes; enter page 9
    // writable again and it is.
    enter(&mut r, pm, VA + 9 * 4096, pages[9], prot::RW, rw_access());
    assert_eq!(r.stat("vm.pmap.sp.promotions"), 1);
    // remove_all of one page: demote, then that mapping goes.
    r.remove_all(pages[100]);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 2);
    assert!(!mapped(&mut r, pages[100]));
    assert!(mapped(&mut r, pages[101]));
    r.check();
    // Without superpages the VM's psind 1 request is refused.
    r.pmap.set_tunable("vm.pmap.superpages_enabled", 0).unwrap();
    assert_eq!(r.enter(pm, VA + SP_SIZE, pages[0], prot::RW, EnterFlags { psind: Psind::new(1), ..Default::default() }), Err(PmapError::BadPsind));
    assert!(r.pmap.set_tunable("vm.pmap.superpages_enabled", 2).is_err());
}

#[test]
fn whole_superpage_protect_keeps_it_and_entering_inside_demotes() {
    let (mut r, pm, pages) = promoted_space();
    r.protect(pm, VA, VA + SP_SIZE, prot::READ);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 0);
    assert!((0..SP_PAGES).step_by(511).all(|i| pvo(&r, pm, VA + i * 4096).large()));
    assert_eq!(hpte(&r, pm, VA + 4095 * 4096).lo & HpteLo::PP.bits(), HpteLo::PP_RO.bits());
    touch(&mut r, 0, pm, VA, Access::Read);
    assert_eq!(walk(&mut r, 0, pm, VA + 8192, Access::Write), Err(WalkFault::Protection));
    r.check();
    // A copy-on-write style replacement of one page: demote, replace.
    let other = r.phys.alloc_noobj().unwrap();
    enter(&mut r, pm, VA + 8192, other, prot::RW, rw_access());
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 1);
    assert_eq!(r.extract(pm, VA + 8192).unwrap().pa, other.addr_4k());
    assert_eq!(r.extract(pm, VA + 4096).unwrap().pa, pages[1].addr_4k());
    assert!(!mapped(&mut r, pages[2]));
    r.check();
}

#[test]
fn a_superpage_entry_evicted_comes_back_as_a_16mb_entry() {
    let (mut r, pm, pages) = promoted_space();
    // Evict the entry of page 6 by hand, as a crowded PTEG pair would.
    let slot = pvo(&r, pm, VA + 6 * 4096).slot as u64;
    let (p, mut env) = r.env();
    p.0.evict(&mut env, slot);
    assert_eq!(r.stat("machdep.moea64_pte_overflow"), 1);
    r.check();
    let t = touch(&mut r, 0, pm, VA + 6 * 4096 + 16, Access::Read);
    assert_eq!((t.shift, t.pa(VA + 6 * 4096 + 16)), (24, PhysAddr(pages[6].addr_4k().0 + 16)));
    assert!(hpte(&r, pm, VA + 6 * 4096).large());
    assert_eq!(r.stat("splab.pmap.hpt.reinserts"), 1);
    r.check();
}

/// Random entering, removal, protection, clearing of R and C, and
/// accesses by four address spaces sharing 1500 pages through up to 24000
/// virtual pages, in an HPT of 16384 entries: eviction and re-insertion
/// all the time. After every
/// step each TLB entry must agree with what the tables say now, every
/// access must translate as the pmap says, and the invariants must hold.
#[test]
fn random_operations_under_eviction_pressure_keep_tlbs_and_tables_in_step() {
    let mut r = rig(4096);
    let pms: Vec<PmapId> = (0..4).map(|_| r.pinit()).collect();
    let pages: Vec<Pfn> = (0..1500).map(|_| r.phys.alloc_noobj().unwrap()).collect();
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = |n: u64| {
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    };
    for step in 0..10000 {
        let pm = pms[rnd(4) as usize];
        let cpu = rnd(2) as usize;
        // Two segments, 3000 pages used in each.
        let va = VA + rnd(2) * SEGMENT_SIZE + rnd(3000) * 4096;
        r.activate(pm, cpu);
        match rnd(11) {
            0..=4 => {
                let pr = if rnd(3) == 0 { prot::READ } else { prot::RW };
                for k in 0..1 + rnd(16) {
                    enter(&mut r, pm, va + k * 4096, pages[rnd(1500) as usize], pr, rw_access());
                }
            }
            5 => {
                r.remove(pm, va, va + (1 + rnd(8)) * 4096);
            }
            6 => {
                r.protect(pm, va, va + (1 + rnd(8)) * 4096, prot::READ);
            }
            7 => {
                let m = pages[rnd(1500) as usize];
                if rnd(2) == 0 {
                    r.clear_modify(m);
                    assert!(!r.is_modified(m), "step {step}: modified after clear_modify");
                } else {
                    r.ts_referenced(m);
                }
            }
            _ => {
                if let Some(m) = r.extract(pm, va) {
                    let acc = if m.prot & prot::WRITE != 0 && rnd(2) == 0 { Access::Write } else { Access::Read };
                    let t = touch(&mut r, cpu, pm, va, acc);
                    assert_eq!(t.pa(va), m.pa, "step {step}: the walk and the pmap disagree at {va:#x}");
                }
            }
        }
        for c in 0..2 {
            for (tva, asid, t) in r.mmu[c].tlb.entries() {
                let now = HptWalker.probe(&r.mem, r.pmap.root(asid as PmapId), VirtAddr(tva));
                // A TLB entry that lets stores through unrecorded needs C
                // set in the table (clear_modify's tlbie).
                let ok = now.is_some_and(|n| n.pa_base == t.pa_base && (n.perm & perm::WRITE != 0 || t.perm & perm::WRITE == 0) && (n.perm & perm::DIRTY != 0 || t.perm & perm::DIRTY == 0));
                assert!(ok, "step {step}: CPU {c} has a stale TLB entry for {tva:#x}: {t:?}, the tables say {now:?}");
            }
        }
        if step % 1000 == 0 {
            r.check();
        }
    }
    r.check();
    let (ev, re) = (r.stat("splab.pmap.hpt.evictions"), r.stat("splab.pmap.hpt.reinserts"));
    assert!(ev > 1000 && re > 20, "evictions {ev}, re-insertions {re}");
}

#[test]
fn the_walker_needs_the_slb_and_hardware_reference_recording() {
    let p = Profile::load("power9").unwrap();
    assert_eq!(walker(&p).unwrap().page_shifts(), &[12, 24]);
    let err = |q: &Profile| walker(q).err().expect("refused");
    let mut q = p.clone();
    q.pwc.clear();
    assert!(err(&q).contains("no SLB"), "{}", err(&q));
    let mut q = p.clone();
    q.pwc.push(PwcLevelConfig { shift: 21, entries: 4 });
    assert!(err(&q).contains("shift = 21"), "{}", err(&q));
    let mut q = p.clone();
    q.ad_update = Some(AdUpdate::Fault);
    assert!(err(&q).contains("R and C"), "{}", err(&q));
}

/// moea64_clear_modify on one page of a changed superpage: the superpage
/// is demoted (its C goes to all its pages), that page's mapping loses C
/// and write access (its next store must fault), the others keep write
/// access. A 4 KB mapping only loses C, in its entry and in the bits kept
/// from an eviction, and its translation leaves the TLB so the next store
/// sets C again. A superpage with no C set anywhere is left whole.
#[test]
fn clear_modify_demotes_a_changed_superpage_and_write_protects_the_page() {
    let (mut r, pm, pages) = promoted_space();
    assert!(modified(&mut r, pages[5]) && modified(&mut r, pages[4000]));
    for &m in &pages {
        r.phys.pages.get_mut(m).flags &= !pflags::DIRTY;
    }
    r.clear_modify(pages[5]);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 1);
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY)), "the superpage's C went to every page");
    let m5 = r.extract(pm, VA + 5 * 4096).unwrap();
    let m6 = r.extract(pm, VA + 6 * 4096).unwrap();
    assert_eq!((m5.shift, m5.prot, m5.dirty), (12, prot::READ, false));
    assert_eq!((m6.shift, m6.prot), (12, prot::RW));
    assert!(!modified(&mut r, pages[5]), "page 5 is clean in every mapping");
    assert_eq!(walk(&mut r, 0, pm, VA + 5 * 4096, Access::Write), Err(WalkFault::Protection));
    r.check();
    // A 4 KB mapping: a store sets C, clear_modify clears it and the TLB
    // forgets the translation, so the next store is recorded again.
    touch(&mut r, 0, pm, VA + 6 * 4096, Access::Write);
    assert!(modified(&mut r, pages[6]));
    r.clear_modify(pages[6]);
    assert!(!modified(&mut r, pages[6]));
    assert_eq!(pvo(&r, pm, VA + 6 * 4096).prot, prot::RW, "a 4 KB mapping keeps write access");
    assert!(r.mmu[0].tlb.lookup(VA + 6 * 4096, pm as u16).is_none(), "tlbie");
    touch(&mut r, 0, pm, VA + 6 * 4096, Access::Write);
    assert!(modified(&mut r, pages[6]));
    // Evicted with C set: the kept bit is cleared too.
    let slot = pvo(&r, pm, VA + 6 * 4096).slot as u64;
    let (p, mut env) = r.env();
    p.0.evict(&mut env, slot);
    assert!(modified(&mut r, pages[6]), "C kept with the evicted PVO");
    r.clear_modify(pages[6]);
    assert!(!modified(&mut r, pages[6]) && pvo(&r, pm, VA + 6 * 4096).refchg & rc::CHG == 0);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 1);
    r.check();

    // A read-only superpage has no C: it stays whole.
    let mut r = rig(32768);
    let pm = space(&mut r);
    let pages = r.superpage_run();
    r.enter(pm, VA, pages[0], prot::READ, EnterFlags { access: prot::READ, psind: Psind::new(1), ..Default::default() }).unwrap();
    touch(&mut r, 0, pm, VA + 3 * 4096, Access::Read);
    assert!(!modified(&mut r, pages[3]));
    r.clear_modify(pages[3]);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 0);
    assert!(pvo(&r, pm, VA + 3 * 4096).large());
    r.check();
}

/// moea64_ts_referenced on a superpage: every 4 KB page of it reports the
/// superpage's reference (R set in any of its 4096 entries), and R is
/// cleared, in all the entries at once, only when the page the hash
/// selects is tested. The cleared translations leave the TLBs, so the
/// next access through the 16 MB TLB entry is recorded again. 4 KB
/// mappings count one reference each.
#[test]
fn ts_referenced_counts_a_superpage_for_each_page_and_clears_it_once() {
    let (mut r, pm, pages) = promoted_space();
    let selected: Vec<usize> = (0..SP_PAGES as usize).filter(|&i| refbits::selected_for_clearing(pages[i], pm, VA, SP_SHIFT, SP_PAGES)).collect();
    assert_eq!(selected.len(), 1, "one page in 4096 clears the bits");
    let k = selected[0];
    let other = (k + 1) % SP_PAGES as usize;
    touch(&mut r, 0, pm, VA + 100 * 4096, Access::Read);
    assert!(r.mmu[0].tlb.lookup(VA + 100 * 4096, pm as u16).is_some());
    r.phys.pages.get_mut(pages[other]).flags &= !pflags::DIRTY;
    assert_eq!(r.ts_referenced(pages[other]), 1);
    assert!(r.is_referenced(pages[k]), "testing another page leaves the bits set");
    assert_eq!(r.ts_referenced(pages[k]), 1);
    assert!(!r.is_referenced(pages[other]), "testing the selected page cleared them for all");
    assert_eq!(r.ts_referenced(pages[other]), 0);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 0);
    assert!(r.phys.pages.get(pages[other]).has(pflags::DIRTY), "a changed writable superpage dirties the page under test");
    assert!(r.mmu[0].tlb.lookup(VA + 100 * 4096, pm as u16).is_none(), "the 16 MB translation left the TLB");
    assert!((0..SP_PAGES).step_by(97).all(|i| !hpte(&r, pm, VA + i * 4096).lo_flags().contains(HpteLo::R)));
    r.check();
    // An access through any page references the whole superpage again.
    touch(&mut r, 0, pm, VA + 3000 * 4096, Access::Read);
    assert!(r.is_referenced(pages[other]));
    assert_eq!(r.ts_referenced(pages[other]), 1);

    // 4 KB mappings of one page in two address spaces.
    let m = r.phys.alloc_noobj().unwrap();
    let b = r.pinit();
    r.activate(b, 1);
    let va = VA + 2 * SP_SIZE;
    enter(&mut r, pm, va, m, prot::READ, EnterFlags { access: prot::READ, ..Default::default() });
    enter(&mut r, b, va, m, prot::READ, EnterFlags { access: prot::READ, ..Default::default() });
    touch(&mut r, 0, pm, va, Access::Read);
    touch(&mut r, 1, b, va, Access::Read);
    assert_eq!(r.ts_referenced(m), 2);
    assert!(!r.is_referenced(m));
    assert_eq!(r.ts_referenced(m), 0);
    assert!(r.mmu[0].tlb.lookup(va, pm as u16).is_none() && r.mmu[1].tlb.lookup(va, b as u16).is_none());
    touch(&mut r, 0, pm, va, Access::Read);
    assert!(r.is_referenced(m), "the next access set R again");
    r.check();
}

/// Dropping a 16 MB run whole removes its superpage mapping without
/// demotion, and the 4 KB mappings other address spaces have of its
/// pages; the superpage's bits go to all its pages. A run mapped by
/// 4 KB pages only goes page by page.
#[test]
fn remove_all_superpage_drops_every_mapping_without_demoting() {
    let (mut r, a, pages) = promoted_space();
    for &m in &pages {
        r.phys.pages.get_mut(m).flags &= !(pflags::DIRTY | pflags::REFERENCED);
    }
    let b = r.pinit();
    enter(&mut r, b, VA + 7 * 4096, pages[7], prot::READ, EnterFlags { access: prot::READ, ..Default::default() });
    r.remove_all_superpage(pages[300]);
    assert_eq!(r.stat("vm.pmap.sp.demotions"), 0);
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert_eq!(r.stat("machdep.moea64_pte_valid"), 0);
    assert!(r.extract(a, VA).is_none());
    assert!(r.extract(b, VA + 7 * 4096).is_none());
    assert!(pages.iter().all(|&m| r.phys.pages.get(m).has(pflags::DIRTY | pflags::REFERENCED)), "the superpage's bits moved to every page");
    assert!(r.mmu[0].tlb.lookup(VA, a as u16).is_none());
    r.check();

    // Without promotion: 4096 4 KB mappings.
    let mut r = rig(32768);
    r.pmap.set_tunable("vm.pmap.superpages_enabled", 0).unwrap();
    let a = space(&mut r);
    let pages = r.superpage_run();
    r.enter_all(a, VA, &pages, |_| rw_access());
    assert_eq!(r.stat("vm.pmap.sp.promotions"), 0);
    touch(&mut r, 0, a, VA + 9 * 4096, Access::Write);
    r.remove_all_superpage(pages[4095]);
    assert_eq!(r.pmap.0.pv.live(), 0);
    assert!(!r.pmap.0.pm(a).pvos.contains_key(&VA));
    assert!(r.phys.pages.get(pages[9]).has(pflags::DIRTY), "the written page's C went to it");
    r.check();
}
