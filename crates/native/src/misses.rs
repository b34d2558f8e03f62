//! Independent random misses under different loop shapes, natively: how
//! much of the core's overlap of misses a loop's own instructions leave.
//!
//! The model's overlap of independent misses (`data_mlp`, from calibrate's
//! chases) is the most the core reaches. A real loop reaches less when it
//! puts more in the core's window between misses, and the workloads' own
//! loops differ in that (GUPS's generator, a loop over an array of
//! indices); the model bounds a loop that declares its shape by the
//! window calibrate fits to loops of its own (`Overlap::window`,
//! `splab_calibrate::probe::WindowShape`, in assembly so that their counts are
//! exact). These shapes are compiled Rust, to see the same on any
//! machine, and to set GUPS's own loop beside them. Every shape here makes the same accesses to the
//! same random words of one table, in the same order, so that only the
//! loop differs:
//!
//! - `load`: the index read from a precomputed array, the word summed;
//! - `load+8nop`, `load+16nop`: the same with 8 or 16 `nop`s between
//!   loads (instructions that occupy the window and nothing else);
//! - `rmw`: the word xored in place (a read-modify-write);
//! - `rmw+1store`, `rmw+2stores`: the same with one or two stores to a
//!   small buffer that stays in the first-level cache;
//! - `xorshift`: the index computed by a serial xorshift generator
//!   instead of read from an array, the word summed;
//! - `hpcc`: GUPS's loop (`gups::update_n`: 128 streams of HPCC's
//!   generator, `t[r & mask] ^= r`), for as many updates.
//!
//! The shapes other than `hpcc` share one index sequence (the xorshift
//! generator's), so they touch the same words. The figures are ns an
//! access, `load` first. The shapes run in turn over one table, so where
//! the caches hold it the first warms them for the rest: the figures are
//! meant for tables well past the last level.

use crate::region::Region;
use crate::{gups, Figure, Native, Outcome, Timer};
use std::hint::black_box;

/// Accesses each shape makes.
pub const ACCESSES: usize = 1 << 22;

/// The shapes, in the order of their figures.
pub const SHAPES: &[&str] = &["load", "load+8nop", "load+16nop", "rmw", "rmw+1store", "rmw+2stores", "xorshift", "hpcc"];

#[derive(Debug)]
pub struct Misses {
    pub log2_table: u32,
}

impl Misses {
    pub fn new(log2_table: u32) -> Result<Misses, String> {
        // 32-bit indices: the array of them is half the size.
        if !(16..=32).contains(&log2_table) {
            return Err(format!("--log2-table {log2_table} is out of range for misses (16 to 32)"));
        }
        Ok(Misses { log2_table })
    }
}

/// Marsaglia's xorshift64: three dependent shift-and-xor steps.
#[inline(always)]
fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

const SEED: u64 = 88_172_645_463_325_252;

/// The words every shape but `hpcc` accesses, in order: the xorshift
/// generator's first `ACCESSES` values from `SEED`, masked to a table of
/// 2^`log2_table` words (what `xorshift` computes as it goes).
pub fn indices(log2_table: u32) -> Vec<u32> {
    let mask = (1u64 << log2_table) - 1;
    let mut x = SEED;
    (0..ACCESSES)
        .map(|_| {
            x = xorshift(x);
            (x & mask) as u32
        })
        .collect()
}

/// Eight `nop`s: instructions that take room in the core's window and do
/// nothing else.
macro_rules! nop8 {
    () => {
        // SAFETY: nops touch no memory, registers or flags.
        unsafe { std::arch::asm!("nop", "nop", "nop", "nop", "nop", "nop", "nop", "nop", options(nomem, nostack, preserves_flags)) }
    };
}

// The table is a power of two long and every index is masked to it, so
// that no access carries a bounds check (as in GUPS's loop).

/// The indices' words summed, with `NOP8` times eight `nop`s before each
/// load (one function for each count).
#[inline(never)]
fn load<const NOP8: usize>(t: &[u64], idx: &[u32]) -> u64 {
    let mask = t.len() - 1;
    let t = &t[..=mask];
    idx.iter().fold(0u64, |s, &i| {
        for _ in 0..NOP8 {
            nop8!();
        }
        s.wrapping_add(t[i as usize & mask])
    })
}

/// The read-modify-write with `stores` (0 to 2) stores to `sink` beside it.
#[inline(always)]
fn rmw_with<const STORES: usize>(t: &mut [u64], idx: &[u32], sink: &mut [u64; 64]) {
    let mask = t.len() - 1;
    let t = &mut t[..=mask];
    for (k, &i) in idx.iter().enumerate() {
        t[i as usize & mask] ^= k as u64;
        if STORES >= 1 {
            // SAFETY: an index into the 64-word buffer (k & 63).
            unsafe { std::ptr::write_volatile(&mut sink[k & 63], k as u64) };
        }
        if STORES >= 2 {
            // SAFETY: as above.
            unsafe { std::ptr::write_volatile(&mut sink[(k + 7) & 63], k as u64) };
        }
    }
}

#[inline(never)]
fn rmw0(t: &mut [u64], idx: &[u32], sink: &mut [u64; 64]) {
    rmw_with::<0>(t, idx, sink)
}

#[inline(never)]
fn rmw1(t: &mut [u64], idx: &[u32], sink: &mut [u64; 64]) {
    rmw_with::<1>(t, idx, sink)
}

#[inline(never)]
fn rmw2(t: &mut [u64], idx: &[u32], sink: &mut [u64; 64]) {
    rmw_with::<2>(t, idx, sink)
}

#[inline(never)]
fn generated(t: &[u64], n: usize) -> u64 {
    let mask = t.len() - 1;
    let t = &t[..=mask];
    let (mut x, mut s) = (SEED, 0u64);
    for _ in 0..n {
        x = xorshift(x);
        s = s.wrapping_add(t[x as usize & mask]);
    }
    s
}

impl Native for Misses {
    fn name(&self) -> String {
        format!("misses(2^{})", self.log2_table)
    }

    fn bytes(&self) -> u64 {
        8 << self.log2_table
    }

    fn run(&self, mem: &mut Region) -> Result<Outcome, String> {
        let t = gups::table(mem, self.log2_table)?;
        let idx = indices(self.log2_table);
        let mut sink = [0u64; 64];
        let mut total = Timer::default();
        let mut ns = Vec::with_capacity(SHAPES.len());
        for shape in SHAPES {
            let mut timer = Timer::default();
            timer.start();
            total.start();
            match *shape {
                "load" => {
                    black_box(load::<0>(t, black_box(&idx)));
                }
                "load+8nop" => {
                    black_box(load::<1>(t, black_box(&idx)));
                }
                "load+16nop" => {
                    black_box(load::<2>(t, black_box(&idx)));
                }
                "rmw" => rmw0(t, black_box(&idx), &mut sink),
                "rmw+1store" => rmw1(t, black_box(&idx), &mut sink),
                "rmw+2stores" => rmw2(t, black_box(&idx), &mut sink),
                "xorshift" => {
                    black_box(generated(t, ACCESSES));
                }
                _ => gups::update_n(t, ACCESSES as u64),
            }
            let secs = timer.stop();
            total.stop();
            ns.push(secs / ACCESSES as f64 * 1e9);
        }
        black_box(&sink);
        let mut report = format!("{ACCESSES} independent accesses to random words of a table of 2^{} words ({} MB), one pass per loop shape:\n", self.log2_table, (8u64 << self.log2_table) >> 20);
        for (shape, v) in SHAPES.iter().zip(&ns) {
            report.push_str(&format!("  {shape:<12}{v:8.2} ns an access\n"));
        }
        let figures = SHAPES.iter().zip(&ns).map(|(s, &v)| Figure::new(s, v, "ns", false)).collect();
        Ok(Outcome { seconds: total.wall, cpu_seconds: total.cpu, figures, report })
    }
}
