//! Native runs on small regions: the workloads' own checks pass in every
//! layout that can be had, the layouts that do not depend on the kernel's
//! luck are what was asked, and a layout that cannot be had is refused
//! with its reason. Nothing here is timed.

use splab_native::hugetlb::{self, Pool};
use splab_native::pages::{Pages, SIZE_2M};
use splab_native::region::Region;
use splab_native::suite::{self, Plan};
use splab_native::{gups, index, lat, misses, stream, transpose, Native};

#[test]
fn gups_passes_hpcc_verification() {
    let g = gups::Gups::new(16, true).unwrap();
    let mut pool = Pool::new(false);
    let mut r = Region::new(g.bytes(), Pages::FourK, &mut pool).unwrap();
    let out = g.run(&mut r).unwrap();
    assert!(out.report.contains("Found 0 errors in 65536 locations (passed)."), "{}", out.report);
    assert!(out.report.contains("Main table size   = 2^16 = 65536 words"));
    assert_eq!(out.figures[0].name, "GUP/s");
    assert!(out.figures[0].value > 0.0);
}

/// Every loop shape runs, in order, and the table ends as its updates
/// make it: the three read-modify-write shapes xor each index's count in
/// three times (once, net), then `hpcc` makes GUPS's updates.
#[test]
fn misses_runs_every_shape_over_the_same_words() {
    assert!(misses::Misses::new(15).unwrap_err().contains("--log2-table 15"));
    assert!(misses::Misses::new(33).is_err());
    let m = misses::Misses::new(16).unwrap();
    let mut pool = Pool::new(false);
    let mut r = Region::new(m.bytes(), Pages::FourK, &mut pool).unwrap();
    let out = m.run(&mut r).unwrap();
    let names: Vec<&str> = out.figures.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, misses::SHAPES);
    assert!(out.figures.iter().all(|f| f.value > 0.0 && f.unit == "ns" && !f.higher_is_better));
    assert!(out.report.contains("4194304 independent accesses to random words of a table of 2^16 words"), "{}", out.report);
    let mut want: Vec<u64> = (0..1u64 << 16).collect();
    for (k, &i) in misses::indices(16).iter().enumerate() {
        want[i as usize] ^= k as u64;
    }
    gups::update_n(&mut want, misses::ACCESSES as u64);
    assert!(r.words()[..1 << 16] == want[..], "the table differs from its updates'");
}

#[test]
fn four_k_layout_has_no_huge_pages_and_is_resident() {
    let mut pool = Pool::new(false);
    let r = Region::new(3 * SIZE_2M + 5, Pages::FourK, &mut pool).unwrap();
    assert_eq!(r.len() as u64, 4 * SIZE_2M, "rounded up to 2 MB");
    let o = r.obtained().unwrap();
    assert_eq!((o.bytes_4k, o.bytes_2m, o.bytes_1g), (4 * SIZE_2M, 0, 0));
    assert_eq!(o.vmas, 1);
    assert!(!o.spills_over, "the guards keep neighbours out");
}

#[test]
fn mix_splits_the_region_by_chunk() {
    let mut pool = Pool::new(false);
    let r = Region::new(8 * SIZE_2M, Pages::Mix(0.5), &mut pool).unwrap();
    let o = r.obtained().unwrap();
    // Alternating advice: one VMA per chunk. Whether the kernel found 2 MB
    // pages for the huge ones is its affair; at most half can be.
    assert_eq!(o.vmas, 8);
    assert!(o.bytes_2m <= 4 * SIZE_2M);
    assert_eq!(o.resident(), 8 * SIZE_2M);
}

#[test]
fn hugetlb_without_pages_is_refused_with_the_reason() {
    // More pages than the pool has free, and no growing it.
    let free = hugetlb::counters(SIZE_2M).map(|c| c.available()).unwrap_or(0);
    let mut pool = Pool::new(false);
    let e = Region::new((free + 1) * SIZE_2M, Pages::Hugetlb2m, &mut pool).err().expect("refused");
    assert!(e.contains("hugetlb"), "{e}");
    assert!(pool.changes.is_empty(), "the pool was not touched");
}

#[test]
fn every_workload_checks_out_small() {
    let ws: Vec<Box<dyn Native>> = vec![
        Box::new(lat::Lat::new(64 << 10, vec![64, 4096], lat::Pattern::Random, 1000).unwrap()),
        Box::new(transpose::Transpose::new(vec![100, 128]).unwrap()),
        Box::new(stream::Stream::new(10_000, 3).unwrap()),
        Box::new(index::Index::new(1, 2000).unwrap()),
    ];
    for w in ws {
        let mut pool = Pool::new(false);
        let mut r = Region::new(w.bytes(), Pages::FourK, &mut pool).unwrap();
        let out = w.run(&mut r).unwrap_or_else(|e| panic!("{}: {e}", w.name()));
        assert!(!out.figures.is_empty() && out.figures.iter().all(|f| f.value > 0.0), "{}", w.name());
    }
}

#[test]
fn suite_runs_round_robin_and_skips_what_cannot_be_had() {
    let g = gups::Gups::new(12, true).unwrap();
    let free = hugetlb::counters(SIZE_2M).map(|c| c.available()).unwrap_or(0);
    // A table too large for the free hugetlb pages.
    let log2 = (64 - (free + 1).leading_zeros() + 18).max(12);
    let big = gups::Gups::new(log2, false).unwrap();
    let plan = Plan { layouts: vec![Pages::FourK, Pages::Hugetlb2m, Pages::Thp], repeat: 3, grow_hugetlb: false };
    let mut order = Vec::new();
    let r = suite::run("gups", &g, &plan, &mut |_, _, l| order.push(l.to_string())).unwrap();
    assert_eq!(r.layouts[0].runs.len(), 3);
    assert_eq!(r.layouts[0].figures[0].speedup_vs_4k, Some(1.0));
    assert!(r.layouts[0].as_asked);
    let ran: Vec<&String> = order.iter().filter(|l| !l.is_empty()).collect();
    assert_eq!(&ran[..2], &["4k", "hugetlb-2m"]);
    if free < 1 {
        assert_eq!(r.layouts[1].status, "skipped");
        assert_eq!(ran, vec!["4k", "hugetlb-2m", "thp", "4k", "thp", "4k", "thp"]);
    }
    let plan = Plan { layouts: vec![Pages::Hugetlb2m], repeat: 1, grow_hugetlb: false };
    let r = suite::run("gups", &big, &plan, &mut |_, _, _| {}).unwrap();
    assert_eq!(r.layouts[0].status, "skipped");
    assert!(r.layouts[0].skip_reason.as_deref().unwrap_or("").contains("not allowed"), "{:?}", r.layouts[0].skip_reason);
    assert!(r.hugetlb_pools.is_empty());
}
