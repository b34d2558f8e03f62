//! A key-value server's request loop that times every request, the way
//! Redis users see THP's latency spikes (its latency monitor, `redis-cli
//! --latency`, redis-benchmark's percentiles).
//!
//! One server process on CPU 0. Its dataset is a hash table (an array of
//! 8-byte bucket pointers, sized at start for every key the run will
//! have, so it never rehashes) and a heap that grows upwards as keys are
//! added: each key is a 64-byte entry (dictEntry and key string) and a
//! value, both taken from the top of the heap, so new keys fault in fresh
//! pages as the heap grows. Before the timed part the server loads `keys`
//! keys. Then it serves `requests` requests, each for a uniformly random
//! key: 80 % GET (load the bucket, the entry, every line of the value, and
//! write every line of it into the reply buffer), 20 % SET, half of them
//! to an existing key (read the value from the query buffer, overwrite the
//! value in place) and half adding a new key. `snapshots` times, evenly
//! spaced, a request forks the server for a snapshot (Redis's BGSAVE): the
//! child, on CPU 1, reads the table and every line of the heap as it was
//! at the fork, then exits, while the server goes on serving; until it
//! exits the server's writes are copy-on-write faults.
//!
//! Each request is timed on the server's CPU clock (`System::cycles`),
//! from before its first reference to after its last, so a request that
//! faults pays for the fault (a zero-fill of a base page, of a whole
//! superpage, a copy-on-write copy, a fork). Only memory references and
//! the kernel's work are timed, not the parsing and networking of a real
//! server, so the rate is far above a real server's and the percentiles
//! are the memory system's part of them. The figure is requests per
//! simulated second of the server's CPU; the percentiles of request
//! latency are the details.

use crate::common::{exit, fault, line_step, map, mib, size_text, step_of, Batch, Rng, LINE};
use crate::sched::{Quanta, Sched, Spawn, Step, Task};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::rc::Rc;

/// A key's entry: dictEntry (key, value, next pointers) and the key.
const ENTRY: u64 = 64;
/// The query and reply buffers' size (a client's).
const BUFFER: u64 = 64 << 10;

#[derive(Debug)]
pub struct Requests {
    /// Keys loaded before the timed part.
    pub keys: u64,
    pub requests: u64,
    /// Mean value size in bytes (values are from half to one and a half
    /// times it).
    pub value_size: u64,
    /// Forks for a snapshot during the timed part.
    pub snapshots: u32,
    pub quanta: Quanta,
    pub seed: u64,
}

impl Requests {
    pub fn new(keys: u64, requests: u64, value_size: u64, snapshots: u32) -> Result<Requests, String> {
        if !(1..=1 << 26).contains(&keys) {
            return Err(format!("--keys {keys} is out of range (1 to 2^26)"));
        }
        if !(1..=1 << 32).contains(&requests) {
            return Err(format!("--requests {requests} is out of range (1 to 2^32)"));
        }
        if !(16..=BUFFER / 2).contains(&value_size) {
            return Err(format!("--value-size {} is out of range (16 to {})", size_text(value_size), size_text(BUFFER / 2)));
        }
        if snapshots > 64 {
            return Err(format!("--snapshots {snapshots} is out of range (0 to 64)"));
        }
        Ok(Requests { keys, requests, value_size, snapshots, quanta: Quanta::default(), seed: 1 })
    }

    /// Keys at most: those loaded and those the requests may add.
    fn max_keys(&self) -> u64 {
        self.keys + self.requests / 10 + 1
    }

    /// Bytes of the table and of the heap.
    pub fn footprint(&self) -> u64 {
        self.max_keys().next_power_of_two() * 8 + self.max_keys() * (ENTRY + (self.value_size * 3 / 2).div_ceil(LINE) * LINE)
    }
}

/// Where a key lives.
#[derive(Clone, Copy)]
struct Key {
    entry: u64,
    value: u64,
    len: u64,
}

/// What one timed request did.
#[derive(Clone, Copy)]
struct Done {
    ns: f64,
    faults: u64,
    /// Base pages the kernel zero-filled during it.
    zeroed: u64,
    fork: bool,
}

/// The server's state, shared by its task and the run.
struct Server {
    pid: Pid,
    table: u64,
    buckets: u64,
    heap: u64,
    top: u64,
    heap_len: u64,
    qbuf: u64,
    rbuf: u64,
    keys: Vec<Key>,
    rng: Rng,
    value_size: u64,
}

impl Server {
    fn bucket(&self, k: usize) -> u64 {
        // SplitMix's finaliser as the hash.
        let mut z = k as u64 ^ 0x9E37_79B9_7F4A_7C15;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.table + ((z ^ (z >> 31)) & (self.buckets - 1)) * 8
    }

    fn bump(&mut self, bytes: u64) -> Result<u64, String> {
        let b = bytes.div_ceil(LINE) * LINE;
        if self.top + b > self.heap_len {
            return Err(format!("requests: the heap ({}) is full", size_text(self.heap_len)));
        }
        self.top += b;
        Ok(self.heap + self.top - b)
    }

    /// Stores (or loads) every line of [va, va + len).
    fn lines(sys: &mut System, b: &mut Batch, va: u64, len: u64, store: bool) -> Result<(), String> {
        let (mut a, step) = (va, line_step(sys));
        while a < va + len {
            if store { b.store(sys, a, 1) } else { b.load(sys, a) }.map_err(fault("requests: the dataset"))?;
            a += step;
        }
        Ok(())
    }

    /// SET of a new key: entry and value from the heap's top, the bucket
    /// pointed at the entry.
    fn add(&mut self, sys: &mut System, b: &mut Batch) -> Result<(), String> {
        let len = self.value_size / 2 + self.rng.below(self.value_size + 1);
        let entry = self.bump(ENTRY)?;
        let value = self.bump(len)?;
        let k = self.keys.len();
        self.keys.push(Key { entry, value, len });
        Self::lines(sys, b, self.qbuf, len, false)?;
        Self::lines(sys, b, entry, ENTRY, true)?;
        Self::lines(sys, b, value, len, true)?;
        b.store(sys, self.bucket(k), entry).map_err(fault("requests: the table"))?;
        Ok(())
    }

    /// One request's references.
    fn request(&mut self, sys: &mut System, b: &mut Batch) -> Result<(), String> {
        let r = self.rng.below(100);
        if r >= 90 {
            return self.add(sys, b);
        }
        let k = self.rng.below(self.keys.len() as u64) as usize;
        let key = self.keys[k];
        b.load(sys, self.bucket(k)).map_err(fault("requests: the table"))?;
        b.load(sys, key.entry).map_err(fault("requests: an entry"))?;
        if r < 80 {
            Self::lines(sys, b, key.value, key.len, false)?;
            Self::lines(sys, b, self.rbuf, key.len, true)
        } else {
            Self::lines(sys, b, self.qbuf, key.len, false)?;
            Self::lines(sys, b, key.value, key.len, true)
        }
    }
}

/// The server serving its requests, a quantum at a time.
struct Serve {
    s: Rc<RefCell<Server>>,
    left: u64,
    total: u64,
    /// Requests at which a snapshot is forked.
    forks: Vec<u64>,
    child_alive: Rc<Cell<bool>>,
    skipped: Rc<Cell<u32>>,
    done: Rc<RefCell<Vec<Done>>>,
    /// The server CPU's clock at its first request and after its last.
    span: Rc<Cell<(f64, f64)>>,
}

impl Task for Serve {
    fn pid(&self) -> Pid {
        self.s.borrow().pid
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, spawned: &mut Vec<Spawn>) -> Result<Step, String> {
        let mut s = self.s.borrow_mut();
        let mut b = Batch::new(cpu);
        if self.left == self.total {
            self.span.set((sys.cycles(cpu), 0.0));
        }
        while self.left > 0 && b.refs < budget {
            let i = self.total - self.left;
            let t0 = sys.cycles(cpu);
            let (f0, z0) = (sys.vm_stats().v_vm_faults, sys.events().zero_fills);
            let mut fork = false;
            if self.forks.first() == Some(&i) {
                self.forks.remove(0);
                if self.child_alive.get() {
                    self.skipped.set(self.skipped.get() + 1);
                } else {
                    let child = sys.fork(s.pid).map_err(|e| format!("requests: fork for a snapshot: {e}"))?;
                    self.child_alive.set(true);
                    let lines = [(s.table, s.buckets * 8), (s.heap, s.top)];
                    spawned.push(Spawn { cpu: Some(1 % sys.ncpus()), task: Box::new(Snapshot { pid: child, lines, pos: 0, alive: self.child_alive.clone() }) });
                    fork = true;
                }
            }
            s.request(sys, &mut b)?;
            b.flush(sys).map_err(fault("requests: a request"))?;
            let c = sys.cycles(cpu) - t0;
            let ns = sys.cycles_to_seconds(c) * 1e9;
            let (f1, z1) = (sys.vm_stats().v_vm_faults, sys.events().zero_fills);
            self.done.borrow_mut().push(Done { ns, faults: f1 - f0, zeroed: z1 - z0, fork });
            self.left -= 1;
        }
        if self.left == 0 {
            let (t0, _) = self.span.get();
            self.span.set((t0, sys.cycles(cpu)));
        }
        Ok(Step { refs: b.refs.max(1), done: self.left == 0 })
    }
}

/// The snapshot child: reads every line of the table and of the heap as
/// they were at the fork, then exits.
struct Snapshot {
    pid: Pid,
    lines: [(u64, u64); 2],
    pos: u64,
    alive: Rc<Cell<bool>>,
}

impl Task for Snapshot {
    fn pid(&self) -> Pid {
        self.pid
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, _: &mut Vec<Spawn>) -> Result<Step, String> {
        let mut b = Batch::new(cpu);
        let step = line_step(sys);
        let total: u64 = self.lines.iter().map(|r| r.1 / step).sum();
        let end = (self.pos + budget).min(total);
        for i in self.pos..end {
            let first = self.lines[0].1 / step;
            let va = if i < first { self.lines[0].0 + i * step } else { self.lines[1].0 + (i - first) * step };
            b.load(sys, va).map_err(fault("requests: the snapshot's read"))?;
        }
        b.flush(sys).map_err(fault("requests: the snapshot's read"))?;
        let refs = end - self.pos;
        self.pos = end;
        if end == total {
            exit(sys, self.pid)?;
            self.alive.set(false);
        }
        Ok(Step { refs: refs.max(1), done: end == total })
    }
}

/// The value at quantile `q` of sorted `v` (nearest rank).
fn pct(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v[((v.len() - 1) as f64 * q).round() as usize]
    }
}

impl Workload for Requests {
    fn name(&self) -> String {
        format!("requests({} keys, {} requests, {} B values, {} snapshots)", self.keys, self.requests, self.value_size, self.snapshots)
    }

    fn estimated_refs(&self, line: u64) -> u64 {
        let lines = self.value_size.div_ceil(step_of(line));
        let data = self.footprint() / step_of(line);
        self.keys * (2 * lines + 2) + self.requests * (2 * lines + 2) + self.snapshots as u64 * data
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let cpu = 0;
        let pid = crate::common::spawn_on(sys, cpu)?;
        let buckets = self.max_keys().next_power_of_two();
        let sp = sys.superpage_size();
        let heap_len = (self.footprint() - buckets * 8).div_ceil(sp) * sp;
        let table = map(sys, pid, MmapReq::anon(buckets * 8, prot::RW), "the hash table")?;
        let heap = map(sys, pid, MmapReq::anon(heap_len, prot::RW), "the heap")?;
        let qbuf = map(sys, pid, MmapReq::anon(BUFFER, prot::RW), "the query buffer")?;
        let rbuf = map(sys, pid, MmapReq::anon(BUFFER, prot::RW), "the reply buffer")?;
        let mut s = Server { pid, table, buckets, heap, top: 0, heap_len, qbuf, rbuf, keys: Vec::new(), rng: Rng::new(self.seed), value_size: self.value_size };
        let mut b = Batch::new(cpu);
        Server::lines(sys, &mut b, qbuf, BUFFER, true)?;
        Server::lines(sys, &mut b, rbuf, BUFFER, true)?;
        for _ in 0..self.keys {
            s.add(sys, &mut b)?;
        }
        b.flush(sys).map_err(fault("requests: loading the keys"))?;
        progress(b.refs);
        let loaded = s.top;
        let s = Rc::new(RefCell::new(s));
        let forks = (1..=self.snapshots as u64).map(|j| self.requests * j / (self.snapshots as u64 + 1)).collect();
        let done = Rc::new(RefCell::new(Vec::with_capacity(self.requests as usize)));
        let span = Rc::new(Cell::new((0.0, 0.0)));
        let skipped = Rc::new(Cell::new(0));
        let mut sched = Sched::new(sys.ncpus(), self.quanta)?;
        let serve = Serve { s: s.clone(), left: self.requests, total: self.requests, forks, child_alive: Rc::new(Cell::new(false)), skipped: skipped.clone(), done: done.clone(), span: span.clone() };
        sched.add(Some(cpu), Box::new(serve))?;
        sched.run(sys, b.refs, progress)?;
        let (t0, t1) = span.get();
        let secs = sys.cycles_to_seconds(t1 - t0);
        exit(sys, pid)?;
        let done = done.borrow();
        let mut all: Vec<f64> = done.iter().map(|d| d.ns).collect();
        all.sort_by(f64::total_cmp);
        let mut faulted: Vec<f64> = done.iter().filter(|d| d.faults > 0).map(|d| d.ns).collect();
        faulted.sort_by(f64::total_cmp);
        let sp_pages = sp / sys.page_size();
        let big = done.iter().filter(|d| d.zeroed >= sp_pages).count();
        let forked = done.iter().filter(|d| d.fork).count();
        let rate = self.requests as f64 / secs;
        let mean = all.iter().sum::<f64>() / all.len().max(1) as f64;
        let us = |ns: f64| ns / 1e3;
        let s = s.borrow();
        let mut r = String::new();
        let _ = writeln!(r, "====== GET 80%, SET 20% (half of them new keys) ======");
        let _ = writeln!(r, "  {} requests completed in {secs:.6} seconds (simulated, the server's CPU)", self.requests);
        let _ = writeln!(r, "  1 client, {} byte values on average", self.value_size);
        let _ = writeln!(
            r,
            "  dataset: {} keys, heap {:.1} MB after loading, {:.1} MB at the end (of {:.1} MB mapped), table {}",
            s.keys.len(),
            mib(loaded),
            mib(s.top),
            mib(heap_len),
            size_text(buckets * 8)
        );
        let _ = writeln!(r, "  snapshots (fork): {forked} forked, {} skipped (a snapshot still running)", skipped.get());
        let _ = writeln!(r, "\nSummary:\n  throughput summary: {rate:.2} requests per second");
        let _ = writeln!(r, "  latency summary (usec):");
        let _ = writeln!(r, "  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}", "avg", "min", "p50", "p95", "p99", "p99.9", "max");
        let _ = writeln!(
            r,
            "  {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
            us(mean),
            us(pct(&all, 0.0)),
            us(pct(&all, 0.5)),
            us(pct(&all, 0.95)),
            us(pct(&all, 0.99)),
            us(pct(&all, 0.999)),
            us(pct(&all, 1.0))
        );
        let _ = writeln!(
            r,
            "  requests that faulted: {} ({:.2}%), their p50 {:.3} usec, max {:.3} usec; {big} zero-filled a {} superpage or more",
            faulted.len(),
            100.0 * faulted.len() as f64 / all.len().max(1) as f64,
            us(pct(&faulted, 0.5)),
            us(pct(&faulted, 1.0)),
            size_text(sp)
        );
        let d = Figure::new;
        Ok(WorkloadResult {
            figure: d("requests/s", rate, "requests/s", true),
            details: vec![
                d("request p50 (ns)", pct(&all, 0.5), "ns", false),
                d("request p99 (ns)", pct(&all, 0.99), "ns", false),
                d("request p99.9 (ns)", pct(&all, 0.999), "ns", false),
                d("request max (ns)", pct(&all, 1.0), "ns", false),
                d("requests that faulted", faulted.len() as f64, "requests", false),
            ],
            report: r,
            timed_seconds: secs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::test_system;

    fn system(policy: &str) -> System {
        test_system("sapphire-rapids", policy)
    }

    #[test]
    fn bad_options_are_named() {
        assert!(Requests::new(0, 10, 512, 1).unwrap_err().contains("--keys 0"));
        assert!(Requests::new(10, 0, 512, 1).unwrap_err().contains("--requests 0"));
        assert!(Requests::new(10, 10, 8, 1).unwrap_err().contains("--value-size 8"));
        assert!(Requests::new(10, 10, 512, 65).unwrap_err().contains("--snapshots 65"));
    }

    /// Percentiles are ordered; a snapshot forks once; faults happen in
    /// the timed part (new keys, copy-on-write after the fork); the run
    /// is deterministic.
    #[test]
    fn percentiles_and_a_snapshot() {
        let run = |policy: &str| {
            let mut sys = system(policy);
            Requests::new(2000, 4000, 256, 1).unwrap().run(&mut sys, &mut |_| {}).unwrap()
        };
        let r = run("freebsd");
        let v: Vec<f64> = r.details.iter().map(|d| d.value).collect();
        assert!(v[0] > 0.0 && v[0] <= v[1] && v[1] <= v[2] && v[2] <= v[3], "{}", r.report);
        assert!(v[4] > 0.0, "{}", r.report);
        assert!(r.report.contains("1 forked"), "{}", r.report);
        assert!(r.figure.value > 0.0);
        assert_eq!(run("freebsd").report, r.report);
        let t = run("linux-thp:always");
        assert!(t.details[3].value > 0.0, "{}", t.report);
    }

    /// On the Alpha (8 KB pages, 4 MB superpages).
    #[test]
    fn runs_on_8k_pages() {
        let mut sys = test_system("alpha-21264", "shimizu");
        let r = Requests::new(1000, 2000, 512, 1).unwrap().run(&mut sys, &mut |_| {}).unwrap();
        assert!(r.report.contains("a 4m superpage"), "{}", r.report);
        assert!(r.details[3].value > r.details[0].value, "{}", r.report);
    }
}
