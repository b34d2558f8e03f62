//! The timing model alone, for profiling it: GUPS-like batches (a random
//! load and a store to the same word, over a TABLE_MB table, 1024 pairs a
//! batch) through `Timing::run_batch` on one thread. Prints the thread's
//! CPU time per reference, which a busy host disturbs less than wall time.
//! `timingloop [BATCHES] [TABLE_MB]`, profile from PROFILE.
use splab_sim::timing::{BatchRef, Timing};

fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let batches: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20000);
    let table_mb: u64 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(128);
    let name = std::env::var("PROFILE").unwrap_or("sapphire-rapids".into());
    let p = splab_hw::profile::Profile::load(&name).unwrap();
    let mut t = Timing::new(&p).unwrap();
    if std::env::var("LOOP").is_ok() {
        // A GUPS-like loop: a load and a store of its line, ten
        // instructions an update.
        use splab_sim::block::{Block, BlockSpec, Dep, RefKind, Src, ALU, NONE};
        let mut b = BlockSpec::looped(0x1000, 10);
        let l = b.reference(4, RefKind::Load, &[Dep::new(Src::Dispatch, [5, 0, 0, 0, 0, 0])], &[]);
        b.reference(4, RefKind::Store, &[Dep::new(Src::Dispatch, NONE)], &[Dep::new(Src::Ref(l), ALU)]);
        (b.other_loads, b.other_stores) = (1, 1);
        t.add_blocks([std::sync::Arc::new(Block::compile(&b, &p.core.latency).unwrap())]);
        t.set_loop(0, Some(0));
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut refs = Vec::with_capacity(2048);
    let t0 = thread_cpu_seconds();
    for _ in 0..batches {
        refs.clear();
        for _ in 0..1024 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pa = (1 << 30) + ((x % (table_mb << 20)) & !7);
            refs.push(BatchRef::data(pa, 1, 0, 0, false));
            refs.push(BatchRef::data(pa, 1, 0, 0, true));
        }
        t.run_batch(0, &refs, &[], &[]);
    }
    let cpu = thread_cpu_seconds() - t0;
    let n = (batches * 2048) as f64;
    println!("{:.2} ns/ref (thread CPU), {:.1} M refs/s; cycles {:.0} dram {}", cpu / n * 1e9, n / cpu / 1e6, t.cycles(0), t.dram_accesses);
}
