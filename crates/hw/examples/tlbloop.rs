//! Times TLB lookups the way GUPS makes them (random pages among N 2 MB
//! pages, a load and a store to each address), for tuning the lookup:
//! `tlbloop [PAGES]`.
use splab_hw::mmu::{perm, Translation};
use splab_hw::profile::Profile;
use splab_hw::tlb::Tlb;

fn main() {
    let pages: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let p = Profile::load("sapphire-rapids").unwrap();
    let mut tlb = Tlb::new(&p.tlb, &[12, 21, 30]).unwrap();
    // A few 4 KB entries as a real run has (stack, code).
    for i in 0..8u64 {
        tlb.fill(0x7fff_0000_0000 + (i << 12), 1, Translation { pa_base: i << 12, shift: 12, perm: perm::READ });
    }
    let mut x = 88172645463325252u64;
    let n: u64 = std::env::var("N").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000_000);
    let mut best = f64::MAX;
    let mut sum = 0u64;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let va = 0x8000_0000 + ((x & (pages - 1)) << 21) + (x >> 40 & 0x1f_fff8);
            // A GUPS update: the load's lookup (a walk and fill on a miss),
            // then the store's.
            match tlb.lookup(va, 1) {
                Some((t, _)) => sum = sum.wrapping_add(t.pa_base),
                None => tlb.fill_missed(va, 1, Translation { pa_base: (va >> 21) << 21, shift: 21, perm: perm::READ | perm::WRITE }),
            }
            if let Some((t, _)) = tlb.lookup(va, 1) {
                sum = sum.wrapping_add(t.pa_base);
            }
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("{:.2} ns/update (best of 5), {} pages, checksum {sum:x}", best / n as f64 * 1e9, pages);
}
