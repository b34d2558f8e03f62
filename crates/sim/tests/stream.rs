//! A program's instruction stream (blocks, the marks that enter them, each
//! reference's place) is timed the same however it is cut into batches and
//! on whichever thread: the core's time depends on the stream alone.

use splab_hw::profile::Profile;
use splab_sim::block::{BlockSpec, Dep, RefKind, Src, ALU};
use splab_sim::timing::{Mark, MarkKind};
use splab_sim::{Config, Op, System};
use splab_vm::map::MmapReq;
use splab_vm::prot;

/// One iteration: a store to word 2 of a line whose value takes a chain
/// of multiplies, loads of words 0, 1 and 2 (a run on one line; the last
/// waits for the stored value), a store to word 5 of what that load read
/// and a load of it back; the next iteration's line depends on the value.
fn block() -> BlockSpec {
    let mut b = BlockSpec::looped(0x40_0000, 14);
    let at = Dep::new(Src::Reg(1), ALU);
    b.reference(0, RefKind::Store, &[at], &[Dep::new(Src::Dispatch, [0, 20, 0, 0, 0, 0])]);
    let mut last = 0;
    for i in 1..4 {
        last = b.reference(i, RefKind::Load, &[at], &[]);
    }
    b.reference(6, RefKind::Store, &[at], &[Dep::new(Src::Ref(last), ALU)]);
    b.reference(7, RefKind::Load, &[at], &[]);
    b.put(1, 9, &[Dep::new(Src::Ref(last), ALU)]);
    b
}

/// Cycles and references of `lines` iterations cut into batches of
/// `piece` accesses.
fn run(piece: usize, timing_thread: bool, lines: u64) -> (f64, u64, u64) {
    let mut c = Config::new(Profile::load("sapphire-rapids").unwrap());
    c.memory = 64 << 20;
    c.timing_thread = timing_thread;
    let mut s = System::new(c).unwrap();
    let pid = s.spawn().unwrap();
    s.run_on(0, pid).unwrap();
    let va = s.mmap(pid, MmapReq::anon(lines * 64, prot::RW)).unwrap().0;
    let id = s.define_block(&block()).unwrap();
    let (mut ops, mut places, mut marks) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..lines {
        // Lines in a scattered order, so that some miss.
        let line = va + (i * 7919 % lines) * 64;
        marks.push(Mark { at: ops.len() as u32, what: MarkKind::Enter(id) });
        for (k, (word, op)) in [(2, Op::Store(i)), (0, Op::Load), (1, Op::Load), (2, Op::Load), (5, Op::Store(i)), (5, Op::Load)].into_iter().enumerate() {
            ops.push((line + word * 8, op));
            places.push(k as u16);
        }
    }
    s.stream_pieces(0, &ops, &places, &marks, piece).unwrap();
    let hw = s.hw();
    (s.cycles(0), hw.refs, hw.cache_hits[0])
}

#[test]
fn a_stream_is_timed_the_same_in_any_batches() {
    let lines = 4096;
    let whole = run(usize::MAX, true, lines);
    assert!(whole.0 > 0.0 && whole.1 == 6 * lines, "{whole:?}");
    for piece in [1, 3, 7, 256, 5000] {
        for thread in [false, true] {
            assert_eq!(run(piece, thread, lines), whole, "batches of {piece}, timing thread {thread}");
        }
    }
}
