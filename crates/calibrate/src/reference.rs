//! The host's memory as it is now, in two to three seconds: how long one
//! dependent load to memory takes, how long a load takes when 32 chases
//! run at once, how long a sequential copy takes a line, and how long a
//! dependent load takes over 16 MB, about the reach of the last-level
//! cache a guest gets of a shared one. `splab calibrate` records these in
//! the profile's `[reference]`; `splab validate` measures them again
//! around each workload's native runs. On a shared host the memory's
//! speed moves with other tenants' load (on an AMD EPYC guest two
//! validations a quarter of an hour apart ran native STREAM in 0.0482 s
//! and 0.0379 s, after calibrations whose copies read 2.05 and 2.07 ns a
//! line), and the model, which runs on the calibration's figures,
//! cannot know it; this shows how far the host moved, and lets validate
//! run the model on the memory as it was during the runs.
//!
//! The probes are those of the calibration proper, smaller: a random
//! cycle over every line of 64 MB of 2 MB pages (past the last-level
//! cache here), chased alone and 32 at once; copies of 64 MB; and a
//! random cycle over 16 MB.

use crate::probe;
use splab_native::region::Region;
use splab_native::suite::Spread;
pub use splab_hw::profile::Reference;

/// The bytes of 2 MB pages the probes need.
pub const BYTES: u64 = 192 << 20;

/// The chain's bytes, and the copy's each way.
const CHAIN_BYTES: usize = 64 << 20;

/// The chain in the last-level cache's range.
const CACHE_BYTES: usize = 16 << 20;

/// Chases at once for the overlapped figure: where calibrate's overlap
/// probe levels off on an AMD Zen 5 guest (5.7 ns a load at 32 and at 48).
const CHASES: usize = 32;

/// Readings taken, the median kept (a whole measurement takes 2 to 3 s
/// on an AMD Zen 5 guest, the region's mapping included).
pub const ROUNDS: usize = 5;

/// Copies timed in a reading.
const COPIES: usize = 4;

/// Measures the reference figures `ROUNDS` times over `region` (at least
/// `BYTES` long, in 2 MB pages where the host gives them) and keeps the
/// medians.
pub fn measure(region: &Region) -> Result<Reference, String> {
    if (region.len() as u64) < BYTES {
        return Err(format!("the reference probe needs {} MB, the region has {}", BYTES >> 20, region.len() >> 20));
    }
    let base = region.start_ptr();
    let offs: Vec<usize> = (0..CHAIN_BYTES / 64).map(|i| i * 64).collect();
    let mut v = Vec::new();
    for r in 0..ROUNDS {
        // SAFETY: the 64 MB chain lies in the region's first 64 MB and
        // the 16 MB one at the start of its second, which nothing else
        // uses while they are chased; the copies read the second 64 MB
        // (after its chain is chased) and write the third (BYTES is three
        // times CHAIN_BYTES, and the region is at least BYTES long).
        unsafe {
            let order = probe::link_in_order(base, &offs, 0x7ef0_0000 + r as u64);
            let (one, _) = probe::time_chase(order[0], 100_000, 1_000_000);
            let mut starts: Vec<*const usize> = (0..CHASES).map(|q| order[q * order.len() / CHASES]).collect();
            let many = probe::time_chases(&mut starts, 20_000, 125_000);
            // A chase over 16 MB, in the copy's source (read-only to the
            // copy), a last-level cache's share of which hits.
            let cache = probe::link(base.add(CHAIN_BYTES), &offs[..CACHE_BYTES / 64], 0x7ef1_0000 + r as u64);
            let (in_cache, _) = probe::time_chase(cache, (CACHE_BYTES / 64) as u64, 500_000);
            // Four copies, so that the copy is timed over about as long
            // as the 32 chases (some 30 ms).
            let copy: f64 = (0..COPIES).map(|_| probe::copy_lines(base.add(CHAIN_BYTES), base.add(2 * CHAIN_BYTES), CHAIN_BYTES).ns).sum::<f64>() / COPIES as f64;
            v.push(Reference { chase_ns: one.ns, chases_ns: many.ns, copy_ns: copy, cache_chase_ns: Some(in_cache.ns) });
        }
    }
    median(&v).ok_or_else(|| "no reference reading".to_string())
}

/// The median of each figure over `v` (None for none; the 16 MB chase
/// only where every reading has it).
pub fn median(v: &[Reference]) -> Option<Reference> {
    let m = |x: Vec<f64>| Spread::of(&x).map(|s| s.median);
    let cache: Option<Vec<f64>> = v.iter().map(|r| r.cache_chase_ns).collect();
    Some(Reference {
        chase_ns: m(v.iter().map(|r| r.chase_ns).collect())?,
        chases_ns: m(v.iter().map(|r| r.chases_ns).collect())?,
        copy_ns: m(v.iter().map(|r| r.copy_ns).collect())?,
        cache_chase_ns: cache.and_then(m),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ratios are now over then; medians are taken figure by figure.
    #[test]
    fn ratios_are_now_over_then_and_medians_figure_by_figure() {
        let then = Reference { chase_ns: 150.0, chases_ns: 6.0, copy_ns: 2.0, cache_chase_ns: Some(20.0) };
        let now = Reference { chase_ns: 120.0, chases_ns: 6.0, copy_ns: 2.5, cache_chase_ns: Some(30.0) };
        assert_eq!(then.ratios(&now), Some([0.8, 1.0, 1.25]));
        assert_eq!(then.ratios(&Reference { chase_ns: 0.0, ..now }), None);
        let m = median(&[then, now, Reference { chase_ns: 130.0, chases_ns: 7.0, copy_ns: 1.0, cache_chase_ns: Some(10.0) }]).unwrap();
        assert_eq!(m, Reference { chase_ns: 130.0, chases_ns: 6.0, copy_ns: 2.0, cache_chase_ns: Some(20.0) });
        assert_eq!(median(&[then, Reference { cache_chase_ns: None, ..now }]).unwrap().cache_chase_ns, None);
        assert_eq!(median(&[then, now]).unwrap().copy_ns, 2.25);
        assert_eq!(median(&[]), None);
    }
}
