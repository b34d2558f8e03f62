//! GUPS by the HPCC RandomAccess rules: a table of 2^n 64-bit words,
//! initialised to Table[i] = i, then 4 x 2^n updates
//! Table[ran & (2^n - 1)] ^= ran, where ran follows the HPCC stream
//! (x <- x << 1 ^ (x < 0 ? POLY : 0)) started at 128 equally spaced
//! points. Only the update loop is timed, as in HPCC.

use crate::common::{fault, map, spawn_on, Batch};
use crate::{Figure, Workload, WorkloadResult};
use crate::layout::{Layout, LayoutObtained, Region};
use crate::kernels::Kernel;
use splab_sim::System;
use splab_sim::AccessError;
use splab_vm::map::MmapReq;
use splab_vm::prot;

/// The HPCC random stream, defined once for the simulated and the native
/// runs.
pub use splab_defs::gups::{next, starts, PERIOD, POLY};

/// HPCC's update loop over one table, resumable so that a scheduler can
/// run it a quantum at a time: 128 streams, started at equally spaced
/// points of the random sequence, each stepped once per round, and the
/// table word each value selects XORed with it, in HPCC's order.
pub struct Updater {
    table: u64,
    mask: u64,
    ran: [u64; 128],
    /// Rounds (of 128 updates) done and to do.
    round: u64,
    rounds: u64,
    batch: Vec<(u64, u64)>,
}

impl Updater {
    /// The 4 x 2^log2 updates of a table of 2^log2 words at `table`.
    pub fn new(table: u64, log2: u32) -> Updater {
        let n = 1u64 << log2;
        let nupdate = 4 * n;
        let mut ran = [0u64; 128];
        for (i, r) in ran.iter_mut().enumerate() {
            *r = starts((nupdate / 128 * i as u64) as i64);
        }
        Updater { table, mask: n - 1, ran, round: 0, rounds: nupdate / 128, batch: Vec::new() }
    }

    pub fn updates(&self) -> u64 {
        self.rounds * 128
    }

    /// Stops after the first `max` updates (rounded up to whole rounds of
    /// 128): HPCC's rate is a steady state that fewer updates reach too.
    pub fn limit(&mut self, max: u64) {
        self.rounds = self.rounds.min(max.div_ceil(128).max(1));
    }

    pub fn done(&self) -> bool {
        self.round == self.rounds
    }

    /// Runs up to `max_rounds` rounds, `per_batch` rounds to a batch. The
    /// streams do not depend on the table, so the updates of several rounds
    /// are independent and go to the system as one batch, in HPCC's order.
    /// Returns the updates made.
    pub fn run(&mut self, sys: &mut System, cpu: usize, max_rounds: u64, per_batch: usize) -> Result<u64, AccessError> {
        Kernel::Gups.set(sys, cpu);
        self.rounds_of(sys, cpu, max_rounds, per_batch)
    }

    fn rounds_of(&mut self, sys: &mut System, cpu: usize, max_rounds: u64, per_batch: usize) -> Result<u64, AccessError> {
        let end = (self.round + max_rounds).min(self.rounds);
        let first = self.round;
        while self.round < end {
            for r in self.ran.iter_mut() {
                *r = next(*r);
                self.batch.push((self.table + (*r & self.mask) * 8, *r));
            }
            self.round += 1;
            if self.batch.len() >= 128 * per_batch || self.round == end {
                let r = sys.xor_batch(cpu, &self.batch);
                self.batch.clear();
                r?;
            }
        }
        Ok((end - first) * 128)
    }
}

/// Initialises Table[i] = i for i in [from, to) (independent stores).
pub fn init_table(sys: &mut System, b: &mut Batch, table: u64, from: u64, to: u64) -> Result<(), AccessError> {
    for i in from..to {
        b.store(sys, table + i * 8, i)?;
    }
    b.flush(sys)
}

/// HPCC's line for a rate.
pub fn gups_line(gups: f64) -> String {
    format!("{gups:.9} Billion(10^9) Updates    per second [GUP/s]")
}

pub struct Gups {
    pub log2_table: u32,
    /// Run HPCC's verification pass (needs content tracking).
    pub verify: bool,
    pub cpu: usize,
    /// `--pages`: the table in one region laid out as asked.
    pub pages: Layout,
    /// Time only this many updates instead of HPCC's 4 x the table.
    pub max_updates: Option<u64>,
}

impl Gups {
    pub fn new(log2_table: u32) -> Result<Gups, String> {
        check_log2_table(log2_table)?;
        Ok(Gups { log2_table, verify: false, cpu: 0, pages: Layout::default(), max_updates: None })
    }
    fn table_size(&self) -> u64 {
        1 << self.log2_table
    }
}

/// The table sizes the workloads accept.
pub fn check_log2_table(log2_table: u32) -> Result<(), String> {
    if !(10..=34).contains(&log2_table) {
        return Err(format!("--log2-table {log2_table} is out of range (10 to 34)"));
    }
    Ok(())
}

impl Workload for Gups {
    fn name(&self) -> String {
        format!("gups(2^{})", self.log2_table)
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        let n = self.table_size();
        let updates = self.max_updates.map_or(4 * n, |m| m.min(4 * n));
        n + 2 * updates + if self.verify { 2 * updates + n } else { 0 }
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let n = self.table_size();
        let cpu = self.cpu;
        let pid = spawn_on(sys, cpu)?;
        let region = match self.pages.asked {
            Some(l) => Some(Region::map(sys, pid, cpu, n * 8, false, l, "the GUPS table")?),
            None => None,
        };
        let table = match region {
            Some(r) => r.va,
            None => map(sys, pid, MmapReq::anon(n * 8, prot::RW), "the GUPS table")?,
        };
        let fault = fault("GUPS table access");
        // In batches for the timing thread, as the updates below.
        let mut b = Batch::long(cpu);
        const CHUNK: u64 = 1 << 20;
        for from in (0..n).step_by(CHUNK as usize) {
            init_table(sys, &mut b, table, from, (from + CHUNK).min(n)).map_err(&fault)?;
            progress(from);
        }
        let mut done = n;
        let t0 = sys.cycles(cpu);
        let mut u = Updater::new(table, self.log2_table);
        if let Some(m) = self.max_updates {
            u.limit(m);
        }
        let nupdate = u.updates();
        while !u.done() {
            // Eight rounds (1024 updates) to a batch: large enough for the
            // system's timing thread.
            done += 2 * u.run(sys, cpu, 4096, 8).map_err(&fault)?;
            progress(done);
        }
        let t1 = sys.cycles(cpu);
        self.pages.obtained = region.map(|r| r.obtained(sys, pid));
        let timed = sys.cycles_to_seconds(t1 - t0);
        let gups = nupdate as f64 / timed / 1e9;
        let mut report = format!(
            "Main table size   = 2^{} = {} words\nNumber of updates = {}\nReal time used    = {:.6} seconds (simulated)\n{}\n",
            self.log2_table,
            n,
            nupdate,
            timed,
            gups_line(gups)
        );
        if self.verify {
            // HPCC verification: redo the updates (XOR undoes them) and
            // count words that are not back to their initial value.
            let mut r = 1u64;
            for _ in 0..nupdate {
                r = next(r);
                let va = table + (r & (n - 1)) * 8;
                let v = sys.load(cpu, va).map_err(&fault)?;
                sys.store(cpu, va, v ^ r).map_err(&fault)?;
            }
            let mut errors = 0u64;
            for i in 0..n {
                if sys.load(cpu, table + i * 8).map_err(&fault)? != i {
                    errors += 1;
                }
            }
            done += 2 * nupdate + n;
            let ok = errors as f64 <= 0.01 * n as f64;
            report.push_str(&format!("Found {errors} errors in {n} locations ({}).\n", if ok { "passed" } else { "failed" }));
        }
        progress(done);
        crate::common::exit(sys, pid)?;
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: "GUP/s".into(), value: gups, unit: "GUP/s".into(), higher_is_better: true },
            report,
            timed_seconds: timed,
        })
    }

    fn layout(&self) -> Option<&LayoutObtained> {
        self.pages.obtained.as_ref()
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
