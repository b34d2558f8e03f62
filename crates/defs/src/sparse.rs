//! A slab allocator's arena, as the native `sparse` and its simulated twin
//! both draw it: which pages of which 2 MB slab are live, freed and
//! written, round by round.

use crate::pages::{SIZE_2M, SIZE_4K};
use splab_hw::rng::Rng;

/// Pages in a slab.
pub const SLAB_PAGES: u64 = SIZE_2M / SIZE_4K;

/// Which pages of which slab are written and freed, round by round.
pub struct Schedule {
    rng: Rng,
    /// Per slab: live pages first (`live` of them), then the free ones.
    slabs: Vec<Vec<u16>>,
    live: usize,
}

impl Schedule {
    /// A schedule for `slabs` slabs with `fraction` of each slab's pages
    /// live (at least one page).
    pub fn new(slabs: u64, fraction: f64, seed: u64) -> Schedule {
        let live = ((SLAB_PAGES as f64 * fraction).round() as usize).clamp(1, SLAB_PAGES as usize);
        Schedule { rng: Rng::new(seed), slabs: vec![Vec::new(); slabs as usize], live }
    }

    /// Live pages per slab.
    pub fn live(&self) -> usize {
        self.live
    }

    /// The pages of slab `s` to write first (its first live set).
    pub fn fill(&mut self, s: usize) -> Vec<u16> {
        let mut pages: Vec<u16> = (0..SLAB_PAGES as u16).collect();
        self.rng.shuffle(&mut pages);
        let first = pages[..self.live].to_vec();
        self.slabs[s] = pages;
        first
    }

    /// One round for slab `s`: (pages freed, pages written), a quarter of
    /// the live set each (at least one).
    pub fn churn(&mut self, s: usize) -> (Vec<u16>, Vec<u16>) {
        let live = self.live;
        let pages = &mut self.slabs[s];
        let free_n = pages.len() - live;
        let k = (live / 4).max(1).min(free_n);
        // k distinct live pages to the front of the live part and k
        // distinct free ones to the front of the free part (a partial
        // Fisher-Yates shuffle of each), then they trade places.
        for i in 0..k {
            let a = i + self.rng.below((live - i) as u64) as usize;
            pages.swap(i, a);
            let b = live + i + self.rng.below((free_n - i) as u64) as usize;
            pages.swap(live + i, b);
        }
        let freed = pages[..k].to_vec();
        let written = pages[live..live + k].to_vec();
        for i in 0..k {
            pages.swap(i, live + i);
        }
        (freed, written)
    }
}

/// The seed both twins draw their pages with.
pub const SEED: u64 = 0x5_1ab;

/// Checks an arena of `size` bytes with `fraction` of each slab live over
/// `rounds` rounds; errors name the option as the command line gives it.
pub fn check(size: u64, fraction: f64, rounds: u32) -> Result<(), String> {
        if size < SIZE_2M || !size.is_multiple_of(SIZE_2M) {
            return Err(format!("--size {size} bytes: must be a positive multiple of 2 MB"));
        }
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(format!("--fraction {fraction}: must be above 0 and at most 1"));
        }
        if rounds > 1000 {
            return Err(format!("--rounds {rounds} is out of range (0 to 1000)"));
        }
    Ok(())
}
