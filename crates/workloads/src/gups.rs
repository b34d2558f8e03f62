//! GUPS by the HPCC RandomAccess rules: a table of 2^n 64-bit words,
//! initialised to Table[i] = i, then 4 x 2^n updates
//! Table[ran & (2^n - 1)] ^= ran, where ran follows the HPCC stream
//! (x <- x << 1 ^ (x < 0 ? POLY : 0)) started at 128 equally spaced
//! points. Only the update loop is timed, as in HPCC.

use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::map::MmapReq;
use splab_vm::prot;

/// The stream's primitive polynomial and period.
pub const POLY: u64 = 0x7;
pub const PERIOD: i64 = 1_317_624_576_693_539_401;

#[inline]
pub fn next(x: u64) -> u64 {
    (x << 1) ^ if (x as i64) < 0 { POLY } else { 0 }
}

/// The n-th value of the HPCC random stream (HPCC_starts): square-and-
/// multiply in GF(2)[x] modulo POLY.
pub fn starts(n: i64) -> u64 {
    let mut n = n;
    while n < 0 {
        n += PERIOD;
    }
    while n > PERIOD {
        n -= PERIOD;
    }
    if n == 0 {
        return 1;
    }
    // m2[i] = x^(2i) mod POLY.
    let mut m2 = [0u64; 64];
    let mut t = 1u64;
    for m in m2.iter_mut() {
        *m = t;
        t = next(next(t));
    }
    let mut i = 62;
    while i >= 0 && (n >> i) & 1 == 0 {
        i -= 1;
    }
    let mut ran: u64 = 2;
    while i > 0 {
        let mut tmp = 0;
        for (j, m) in m2.iter().enumerate() {
            if (ran >> j) & 1 != 0 {
                tmp ^= m;
            }
        }
        ran = tmp;
        i -= 1;
        if (n >> i) & 1 != 0 {
            ran = next(ran);
        }
    }
    ran
}

pub struct Gups {
    pub log2_table: u32,
    /// Run HPCC's verification pass (needs content tracking).
    pub verify: bool,
    pub cpu: usize,
}

impl Gups {
    pub fn new(log2_table: u32) -> Result<Gups, String> {
        if !(10..=34).contains(&log2_table) {
            return Err(format!("--log2-table {log2_table} is out of range (10 to 34)"));
        }
        Ok(Gups { log2_table, verify: false, cpu: 0 })
    }
    fn table_size(&self) -> u64 {
        1 << self.log2_table
    }
}

impl Workload for Gups {
    fn name(&self) -> String {
        format!("gups(2^{})", self.log2_table)
    }

    fn estimated_refs(&self) -> u64 {
        let n = self.table_size();
        n + 8 * n + if self.verify { 8 * n + n } else { 0 }
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let n = self.table_size();
        let nupdate = 4 * n;
        let cpu = self.cpu;
        let pid = sys.spawn().map_err(|e| format!("spawn: {e}"))?;
        sys.run_on(cpu, pid).map_err(|e| format!("run: {e}"))?;
        let table = sys.mmap(pid, MmapReq::anon(n * 8, prot::RW)).map_err(|e| format!("mmap of {} bytes: {e}", n * 8))?.0;
        let fault = |e: splab_vm::FaultError| format!("GUPS table access: {e}");
        let mut done = 0u64;
        for i in 0..n {
            sys.store(cpu, table + i * 8, i).map_err(fault)?;
            if i & 0xfffff == 0 {
                progress(i);
            }
        }
        done += n;
        let t0 = sys.cycles(cpu);
        let mut ran = [0u64; 128];
        for (i, r) in ran.iter_mut().enumerate() {
            *r = starts((nupdate / 128 * i as u64) as i64);
        }
        // The 128 streams do not depend on the table, so the updates of
        // several rounds are independent and go to the system as one batch,
        // in the same order as HPCC's loop.
        const ROUNDS: usize = 8;
        let mut batch = Vec::with_capacity(128 * ROUNDS);
        for j in 0..nupdate / 128 {
            for r in ran.iter_mut() {
                *r = next(*r);
                batch.push((table + (*r & (n - 1)) * 8, *r));
            }
            if batch.len() == batch.capacity() || j + 1 == nupdate / 128 {
                sys.xor_batch(cpu, &batch).map_err(fault)?;
                batch.clear();
            }
            if j & 0xfff == 0 {
                progress(done + j * 256);
            }
        }
        done += 2 * nupdate;
        let t1 = sys.cycles(cpu);
        let timed = sys.cycles_to_seconds(t1 - t0);
        let gups = nupdate as f64 / timed / 1e9;
        let mut report = format!(
            "Main table size   = 2^{} = {} words\nNumber of updates = {}\nReal time used    = {:.6} seconds (simulated)\n{:.9} Billion(10^9) Updates    per second [GUP/s]\n",
            self.log2_table, n, nupdate, timed, gups
        );
        if self.verify {
            // HPCC verification: redo the updates (XOR undoes them) and
            // count words that are not back to their initial value.
            let mut r = 1u64;
            for _ in 0..nupdate {
                r = next(r);
                let va = table + (r & (n - 1)) * 8;
                let v = sys.load(cpu, va).map_err(fault)?;
                sys.store(cpu, va, v ^ r).map_err(fault)?;
            }
            let mut errors = 0u64;
            for i in 0..n {
                if sys.load(cpu, table + i * 8).map_err(fault)? != i {
                    errors += 1;
                }
            }
            done += 2 * nupdate + n;
            let ok = errors as f64 <= 0.01 * n as f64;
            report.push_str(&format!("Found {errors} errors in {n} locations ({}).\n", if ok { "passed" } else { "failed" }));
        }
        progress(done);
        sys.exit(pid).map_err(|e| format!("exit: {e}"))?;
        Ok(WorkloadResult {
            figure: Figure { name: "GUP/s".into(), value: gups, unit: "GUP/s".into(), higher_is_better: true },
            report,
            timed_seconds: timed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_matches_stepping() {
        let mut x = 1u64;
        for n in 0..300i64 {
            assert_eq!(starts(n), x, "n = {n}");
            x = next(x);
        }
        // Jumping far ahead agrees with stepping from a nearby start.
        let mut y = starts(1 << 20);
        for _ in 0..5 {
            y = next(y);
        }
        assert_eq!(starts((1 << 20) + 5), y);
    }
}
