//! GUPS by the HPCC RandomAccess rules, natively: a table of 2^n 64-bit
//! words, Table[i] = i, then 4 x 2^n updates Table[ran & (2^n - 1)] ^= ran
//! by 128 streams of HPCC's generator (x <- x << 1 ^ (x < 0 ? POLY : 0))
//! started at equally spaced points: the same stream, in the same order,
//! as the simulated `gups` (which takes its stream from here). Only the
//! update loop is timed. With `verify`,
//! HPCC's verification pass follows (untimed): the updates again from one
//! stream (XOR undoes them), and the words not back to their initial value
//! counted; at most 1% may be.

use crate::region::Region;
use crate::{Figure, Native, Outcome, Timer};

pub use splab_defs::gups::{next, starts, PERIOD, POLY};

/// HPCC's update loop over `table` (a power of two long): 4 updates a
/// word.
pub fn update(table: &mut [u64]) {
    update_n(table, 4 * table.len() as u64)
}

/// HPCC's update loop for `nupdate` updates (a multiple of 128), its 128
/// streams started that far apart.
pub fn update_n(table: &mut [u64], nupdate: u64) {
    let n = table.len() as u64;
    debug_assert!(n.is_power_of_two());
    let mask = (n - 1) as usize;
    // A slice of exactly mask + 1 words, so that the compiler knows every
    // masked index is in bounds.
    let table = &mut table[..=mask];
    let mut ran = [0u64; 128];
    for (j, r) in ran.iter_mut().enumerate() {
        *r = starts((nupdate / 128 * j as u64) as i64);
    }
    for _ in 0..nupdate / 128 {
        for r in ran.iter_mut() {
            *r = next(*r);
            table[*r as usize & mask] ^= *r;
        }
    }
}

/// HPCC's verification: undoes the updates and counts the words that are
/// not back to Table[i] = i.
pub fn verify(table: &mut [u64]) -> u64 {
    let n = table.len() as u64;
    let mask = (n - 1) as usize;
    let mut r = 1u64;
    for _ in 0..4 * n {
        r = next(r);
        table[r as usize & mask] ^= r;
    }
    table.iter().enumerate().filter(|&(i, &v)| v != i as u64).count() as u64
}

/// HPCC's table of 2^`log2_table` words at the start of `mem`, each set
/// to its index (Table[i] = i).
pub fn table(mem: &mut Region, log2_table: u32) -> Result<&mut [u64], String> {
    let table = mem.words().get_mut(..1usize << log2_table).ok_or("the region is smaller than the table")?;
    for (i, w) in table.iter_mut().enumerate() {
        *w = i as u64;
    }
    Ok(table)
}

pub struct Gups {
    pub log2_table: u32,
    pub verify: bool,
}

impl Gups {
    pub fn new(log2_table: u32, verify: bool) -> Result<Gups, String> {
        if !(10..=36).contains(&log2_table) {
            return Err(format!("--log2-table {log2_table} is out of range (10 to 36)"));
        }
        Ok(Gups { log2_table, verify })
    }
}

impl Native for Gups {
    fn name(&self) -> String {
        format!("gups(2^{})", self.log2_table)
    }

    fn bytes(&self) -> u64 {
        8 << self.log2_table
    }

    fn run(&self, mem: &mut Region) -> Result<Outcome, String> {
        let table = table(mem, self.log2_table)?;
        let n = table.len();
        let mut timer = Timer::default();
        timer.start();
        update(table);
        let secs = timer.stop();
        let nupdate = 4 * n as u64;
        let gups = nupdate as f64 / secs / 1e9;
        let mut report = format!(
            "Main table size   = 2^{} = {} words\nNumber of updates = {}\nReal time used    = {:.6} seconds\n{:.9} Billion(10^9) Updates    per second [GUP/s]\n",
            self.log2_table, n, nupdate, secs, gups
        );
        if self.verify {
            let errors = verify(table);
            let ok = errors as f64 <= 0.01 * n as f64;
            report.push_str(&format!("Found {errors} errors in {n} locations ({}).\n", if ok { "passed" } else { "failed" }));
            if !ok {
                return Err(format!("HPCC verification failed: {errors} errors in {n} locations\n{report}"));
            }
        }
        Ok(Outcome { seconds: secs, cpu_seconds: timer.cpu, figures: vec![Figure::new("GUP/s", gups, "GUP/s", true)], report })
    }
}
