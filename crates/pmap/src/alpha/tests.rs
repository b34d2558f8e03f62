//! The Alpha pmap on a test machine of 8 KB pages with 4 MB reservations.

use super::PmapAlpha;
use splab_hw::VirtAddr;
use crate::testrig::{rw_access, Rig};
use splab_hw::alpha::{AlphaWalker, PteFlags};
use splab_hw::mmu::{Access, Translation, WalkFault, WalkRefs, WalkReq, Walker};
use splab_hw::pwc::PwcLevelConfig;
use splab_hw::tlb::TlbArrayConfig;
use splab_vm::pmap::{prot, EnterFlags, Pmap, PmapId};

const VA: u64 = 0x1_0000_0000;
const PAGE: u64 = 8192;

fn rig() -> Rig<PmapAlpha> {
    let tlb = [TlbArrayConfig { sizes: ["8K", "64K", "512K", "4M"].map(String::from).to_vec(), entries: 128, ways: 128, level: 1, index: Default::default(), side: None }];
    Rig::with_mmu(PmapAlpha::new(4096, true), 4096, &tlb, &[13, 16, 19, 22], &[PwcLevelConfig { shift: 23, entries: 4 }], 9)
}

fn walk(r: &mut Rig<PmapAlpha>, pm: PmapId, va: u64, a: Access) -> Result<Translation, WalkFault> {
    let root = r.pmap.root(pm);
    let asn = r.pmap.asid(pm);
    AlphaWalker.walk(&mut r.mem, &mut r.mmu[0].pwc, WalkReq::new(root, asn, VirtAddr(va), a), &mut WalkRefs::default())
}

/// Filling a reservation promotes every 64 KB block as its 8th page
/// comes, every 512 KB block at its 64th, and the 4 MB block at the last;
/// the walk then gives one 4 MB translation.
#[test]
fn promotion_is_incremental_at_three_sizes() {
    let mut r = rig();
    let pm = r.pinit();
    let pages = r.superpage_run();
    assert_eq!(pages.len(), 512);
    r.enter_all(pm, VA, &pages[..8], |_| rw_access());
    assert_eq!(r.stat("vm.pmap.gh.64k.promotions"), 1);
    assert_eq!(walk(&mut r, pm, VA + 3 * PAGE, Access::Write).unwrap().shift, 16);
    r.enter_all(pm, VA, &pages, |_| rw_access());
    assert_eq!((r.stat("vm.pmap.gh.64k.promotions"), r.stat("vm.pmap.gh.512k.promotions"), r.stat("vm.pmap.gh.4m.promotions")), (64, 8, 1));
    let t = walk(&mut r, pm, VA + 300 * PAGE + 0x123, Access::Write).unwrap();
    assert_eq!((t.shift, t.pa(VA + 300 * PAGE + 0x123).0), (22, ((pages[300].0 as u64) << 13) + 0x123));
    r.check();
}

/// Removing one page demotes one block at each level: the other blocks
/// stay superpages of the next smaller size.
#[test]
fn demotion_goes_one_level_at_a_time() {
    let mut r = rig();
    let pm = r.pinit();
    let pages = r.superpage_run();
    r.enter_all(pm, VA, &pages, |_| rw_access());
    r.remove(pm, VA + 100 * PAGE, VA + 101 * PAGE);
    assert_eq!((r.stat("vm.pmap.gh.4m.demotions"), r.stat("vm.pmap.gh.512k.demotions"), r.stat("vm.pmap.gh.64k.demotions")), (1, 1, 1));
    assert_eq!(walk(&mut r, pm, VA + 300 * PAGE, Access::Read).unwrap().shift, 19);
    assert_eq!(walk(&mut r, pm, VA + 70 * PAGE, Access::Read).unwrap().shift, 16);
    assert_eq!(walk(&mut r, pm, VA + 101 * PAGE, Access::Read).unwrap().shift, 13);
    assert_eq!(walk(&mut r, pm, VA + 100 * PAGE, Access::Read), Err(WalkFault::NotPresent { level: 2 }));
    r.check();
    // Unmapping the rest frees the tables.
    r.remove(pm, VA, VA + 512 * PAGE);
    r.check();
    assert!(r.pmap.0.pm(pm).l3.is_empty() && r.pmap.0.pm(pm).l2.is_empty());
}

/// FOW emulates the modified bit: a page entered for a read faults on the
/// first write until pmap_emulate_reference clears FOW in its block; a
/// mix of clean and dirty pages does not promote.
#[test]
fn fault_on_write_emulates_modify() {
    let mut r = rig();
    let pm = r.pinit();
    let pages = r.superpage_run();
    let read = EnterFlags { access: prot::READ, ..Default::default() };
    r.enter_all(pm, VA, &pages[..8], |i| if i == 0 { read } else { rw_access() });
    assert_eq!(r.stat("vm.pmap.gh.64k.promotions"), 0);
    assert!(r.stat("vm.pmap.gh.64k.p_failures") >= 1);
    assert_eq!(walk(&mut r, pm, VA, Access::Write), Err(WalkFault::AccessedDirty));
    assert!(r.fault(pm, VA, prot::WRITE));
    assert!(walk(&mut r, pm, VA, Access::Write).is_ok());
    assert!(r.is_modified(pages[0]));
    // Re-entering page 7 now finds all eight dirty: a 64 KB block.
    r.enter_all(pm, VA + 7 * PAGE, &pages[7..8], |_| rw_access());
    assert_eq!(r.stat("vm.pmap.gh.64k.promotions"), 1);
    // clear_modify on one page demotes and makes only that page clean.
    r.clear_modify(pages[3]);
    let (_, e) = r.pmap.0.find(&r.mem, pm, VA + 3 * PAGE).unwrap();
    assert!(e.has(PteFlags::FOW));
    assert!(r.is_modified(pages[4]));
    r.check();
}
