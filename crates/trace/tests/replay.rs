//! The replay workload on the simulated system: the same outcome as making
//! the accesses one at a time, promotion of fully touched blocks, regions
//! inferred for memory outside the layout, events replayed, and malformed
//! traces reported as bad input.

use splab_hw::profile::Profile;
use splab_sim::Op;
use splab_sim::{Config, System};
use splab_trace::replay::Replay;
use splab_trace::synth;
use splab_vm::map::{Backing, MmapReq};
use splab_vm::prot;
use splab_workloads::Workload;
use std::path::{Path, PathBuf};

fn system(superpages: bool) -> System {
    let mut c = Config::new(Profile::load("sapphire-rapids").unwrap());
    c.memory = 256 << 20;
    c.superpages = superpages;
    System::new(c).unwrap()
}

fn sysctl(s: &System, name: &str) -> i64 {
    s.sysctls().get_int(name).unwrap_or_else(|| panic!("no sysctl {name}"))
}

/// A file in the test's own temporary directory.
fn temp(name: &str) -> PathBuf {
    let dir = test_dir();
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The test's own temporary directory, named by the thread the test runs
/// on (the test's name), so that tests running at once keep apart and
/// each removes its own (`clean`); a failed test leaves its files.
fn test_dir() -> PathBuf {
    let test = std::thread::current().name().unwrap_or("main").replace("::", "-");
    std::env::temp_dir().join(format!("splab-trace-test-{}-{test}", std::process::id()))
}

fn clean() {
    let _ = std::fs::remove_dir_all(test_dir());
}

fn replay(path: &Path, sys: &mut System) -> Result<Replay, (String, bool)> {
    let mut r = Replay::new(path, None).map_err(|e| (e, true))?;
    match r.run(sys, &mut |_| {}) {
        Ok(_) => Ok(r),
        Err(e) => Err((e, r.failed_on_input())),
    }
}

#[test]
fn replay_equals_single_accesses_and_promotes() {
    let path = temp("triad.trace");
    let array = 2u64 << 20;
    let n = 3 * (array / 8);
    synth::triad(&path, n, array).unwrap();
    for sp in [false, true] {
        let mut a = system(sp);
        let r = replay(&path, &mut a).unwrap();
        assert_eq!(r.stats.refs, n);
        assert_eq!(r.stats.accesses, n);
        assert_eq!(r.stats.inferred_blocks, 0, "the layout covers the arrays");
        // The same accesses, one at a time, on a fresh system.
        let mut b = system(sp);
        let pid = b.spawn().unwrap();
        b.run_on(0, pid).unwrap();
        let req = MmapReq { addr: synth::BASE, len: 3 * array, prot: prot::RW, shared: false, fixed: true, backing: Backing::Anon, prefault: false };
        b.mmap(pid, req).unwrap();
        for k in 0..n {
            let i = (k / 3) % (array / 8);
            let (base, op) = [(synth::BASE + array, Op::Load), (synth::BASE + 2 * array, Op::Load), (synth::BASE, Op::Store(0))][(k % 3) as usize];
            b.access(0, base + 8 * i, op, false).unwrap();
        }
        b.exit(pid).unwrap();
        let (ha, hb) = (a.hw(), b.hw());
        assert_eq!((ha.refs, ha.loads, ha.stores, ha.walks, ha.dram_accesses), (hb.refs, hb.loads, hb.stores, hb.walks, hb.dram_accesses));
        assert_eq!(a.cycles(0), b.cycles(0));
        assert_eq!(sysctl(&a, "vm.pmap.pde.promotions"), if sp { 3 } else { 0 });
    }
    clean();
}

#[test]
fn memory_outside_the_layout_is_mapped_by_block() {
    // Lackey text has no layout: three blocks are touched, one page twice.
    let path = temp("nolayout.lackey");
    let text = "==1== x\n L 7f0000001000,8\n S 7f0000001008,8\n M 7f0000200ff8,16\nI  400000,4\n L 10000,8\n";
    std::fs::write(&path, text).unwrap();
    let mut s = system(true);
    let r = replay(&path, &mut s).unwrap();
    let st = &r.stats;
    assert_eq!((st.refs, st.loads, st.stores, st.modifies, st.instr_skipped), (5, 2, 1, 1, 1));
    // The modify crosses into the next page: a load and a store on each.
    assert_eq!((st.line_crossing, st.page_crossing), (1, 1));
    assert_eq!(st.accesses, 2 + 1 + 4);
    assert_eq!(st.inferred_blocks, 3);
    clean();
}

#[test]
fn a_reference_is_made_on_each_line_it_covers() {
    // Lines of 64 bytes (sapphire-rapids) and of 128 (power9): a 16-byte
    // load at byte 56 of a 128-byte line crosses a 64-byte line only; one
    // at byte 120 crosses both; a 200-byte store from byte 8 covers four
    // 64-byte lines and two 128-byte ones; an aligned 64-byte load, one
    // line of either.
    let path = temp("lines.lackey");
    let text = "==1== x\n L 7f0000001038,16\n L 7f0000001078,16\n S 7f0000002008,200\n L 7f0000003040,64\n";
    std::fs::write(&path, text).unwrap();
    for (machine, crossing, accesses) in [("sapphire-rapids", 3, 2 + 2 + 4 + 1), ("power9", 2, 1 + 2 + 2 + 1)] {
        let mut c = Config::new(Profile::load(machine).unwrap());
        c.memory = 256 << 20;
        let mut s = System::new(c).unwrap();
        let r = replay(&path, &mut s).unwrap();
        let st = &r.stats;
        assert_eq!((st.refs, st.line_crossing, st.page_crossing, st.accesses), (4, crossing, 0, accesses), "{machine}");
    }
    clean();
}

#[test]
fn events_are_replayed_in_order() {
    use splab_trace::binary::Writer;
    use splab_trace::{Event, Kind, Origin, Ref, Region};
    let path = temp("events.trace");
    let region = Region { start: 0x5000_0000, len: 4 << 20, prot: 3, origin: Origin::Anon, name: String::new() };
    let mut w = Writer::new(std::fs::File::create(&path).unwrap(), &[]).unwrap();
    w.write_event(&Event::Map(region.clone())).unwrap();
    for p in 0..1024u64 {
        w.write_ref(&Ref { addr: region.start + p * 4096, size: 8, kind: Kind::Store }).unwrap();
    }
    w.write_event(&Event::Unmap { start: region.start, len: 2 << 20 }).unwrap();
    // Touching the unmapped half again maps it afresh (an inferred block).
    w.write_ref(&Ref { addr: region.start, size: 8, kind: Kind::Load }).unwrap();
    w.finish().unwrap();
    let mut s = system(true);
    let r = replay(&path, &mut s).unwrap();
    assert_eq!((r.stats.maps, r.stats.unmaps, r.stats.inferred_blocks), (1, 1, 1));
    assert_eq!(sysctl(&s, "vm.pmap.pde.promotions"), 2);
    clean();
}

#[test]
fn malformed_traces_are_bad_input() {
    let path = temp("bad.lackey");
    std::fs::write(&path, " L 1000,8\n L 2000,8\nthis is not lackey\n").unwrap();
    let mut s = system(true);
    let (msg, input) = replay(&path, &mut s).err().unwrap();
    assert!(input);
    assert!(msg.contains("line 3: expected a lackey line"), "{msg}");
    let (msg, input) = replay(&temp("missing.trace"), &mut s).err().unwrap();
    assert!(input && msg.contains("cannot open"), "{msg}");
    // An address beyond the user address space.
    std::fs::write(&path, " L ffff800000000000,8\n").unwrap();
    let mut s = system(true);
    let (msg, input) = replay(&path, &mut s).err().unwrap();
    assert!(input && msg.contains("beyond the modelled user address space"), "{msg}");
    clean();
}
