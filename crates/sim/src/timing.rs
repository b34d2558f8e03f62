//! The timing model: caches for data and page-table lines, and the cycles
//! each CPU has spent, from the machine profile. It only consumes the
//! physical addresses the access path produces; nothing the access path
//! decides depends on it, which is what lets a batch's references be timed
//! after (and on another thread than) their translation.

use crate::system::CycleBreakdown;
use splab_hw::cache::Cache;
use splab_hw::profile::Profile;

/// A translated reference awaiting the cache model: its data address, the
/// fixed cycles of its TLB lookups and assists, and the range of its walk
/// references in the accompanying walk list.
#[derive(Clone, Copy, Debug)]
pub struct BatchRef {
    pub pa: u64,
    pub xlat: u32,
    pub walks_start: u32,
    pub walks_end: u32,
}

pub struct Timing {
    l1: Vec<Cache>,
    l2: Vec<Cache>,
    l3: Cache,
    dram: u32,
    inv_walk_mlp: f64,
    inv_data_mlp: f64,
    /// Cycles per CPU of translation and data access (kernel work is
    /// counted by the system beside these).
    pub cycles: Vec<f64>,
    pub breakdown: CycleBreakdown,
    pub cache_hits: [u64; 3],
    pub dram_accesses: u64,
    /// Scratch for batches: each access's address and latency, and the
    /// accesses that reach the second and third levels.
    scratch: Vec<(u64, u32)>,
    to_l2: Vec<u32>,
    to_l3: Vec<u32>,
    to_dram: Vec<u32>,
}

impl Timing {
    pub fn new(p: &Profile) -> Result<Timing, String> {
        let mut l1 = Vec::new();
        let mut l2 = Vec::new();
        for _ in 0..p.cpus {
            l1.push(Cache::new(&p.cache.l1d)?);
            l2.push(Cache::new(&p.cache.l2)?);
        }
        Ok(Timing {
            l1,
            l2,
            l3: Cache::new(&p.cache.l3)?,
            dram: p.dram_cycles(),
            inv_walk_mlp: 1.0 / p.overlap.walk_mlp,
            inv_data_mlp: 1.0 / p.overlap.data_mlp,
            cycles: vec![0.0; p.cpus],
            breakdown: CycleBreakdown::default(),
            cache_hits: [0; 3],
            dram_accesses: 0,
            scratch: Vec::new(),
            to_l2: Vec::new(),
            to_l3: Vec::new(),
            to_dram: Vec::new(),
        })
    }

    /// Latency of one access to physical address `pa` through the caches.
    #[inline]
    pub fn mem_latency(&mut self, cpu: usize, pa: u64) -> u32 {
        if self.l1[cpu].access(pa) {
            self.cache_hits[0] += 1;
            return self.l1[cpu].latency;
        }
        if self.l2[cpu].access(pa) {
            self.cache_hits[1] += 1;
            return self.l2[cpu].latency;
        }
        if self.l3.access(pa) {
            self.cache_hits[2] += 1;
            return self.l3.latency;
        }
        self.dram_accesses += 1;
        self.dram
    }

    /// Charges one access: its translation cycles, its walk references and
    /// its data reference through the caches, overlapped as the profile
    /// says unless the access depends on the previous one.
    #[inline]
    pub fn charge(&mut self, cpu: usize, xlat: u32, walks: &[u64], pa: u64, dependent: bool) {
        let mut xlat = xlat;
        for &w in walks {
            xlat += self.mem_latency(cpu, w);
        }
        let data = self.mem_latency(cpu, pa);
        let (xc, dc) = if dependent {
            (xlat as f64, data as f64)
        } else {
            (xlat as f64 * self.inv_walk_mlp, data as f64 * self.inv_data_mlp)
        };
        let cyc = (xc + dc).max(1.0);
        self.cycles[cpu] += cyc;
        self.breakdown.translation += xc;
        self.breakdown.data += cyc - xc;
    }

    /// The cheap case of `charge`: no translation cycles, no walk, and the
    /// same line as the CPU's last access (a certain first-level hit).
    /// Returns false, changing nothing, when that is not the case.
    #[inline]
    pub fn charge_same_line(&mut self, cpu: usize, pa: u64, dependent: bool) -> bool {
        let l1 = &mut self.l1[cpu];
        if !l1.is_last(pa) {
            return false;
        }
        l1.access(pa);
        self.cache_hits[0] += 1;
        let lat = l1.latency as f64;
        let cyc = if dependent { lat } else { (lat * self.inv_data_mlp).max(1.0) };
        self.cycles[cpu] += cyc;
        self.breakdown.data += cyc;
        true
    }


    /// Times a batch of references. Each cache only ever sees the accesses
    /// that reach it, in program order, so the batch is run one level at a
    /// time: every access through L1, then L1's misses through L2, then
    /// L2's misses through L3. The states and latencies are exactly those of
    /// running each access through all levels in turn; the passes are loops
    /// of independent lookups that the host overlaps.
    pub fn run_batch(&mut self, cpu: usize, refs: &[BatchRef], walks: &[u64]) {
        let mut acc = std::mem::take(&mut self.scratch);
        let mut to_l2 = std::mem::take(&mut self.to_l2);
        let mut to_l3 = std::mem::take(&mut self.to_l3);
        acc.clear();
        to_l2.clear();
        to_l3.clear();
        acc.reserve(refs.len() + walks.len());
        for r in refs {
            if r.walks_start != r.walks_end {
                acc.extend(walks[r.walks_start as usize..r.walks_end as usize].iter().map(|&w| (w, 0)));
            }
            acc.push((r.pa, 0));
        }
        self.l1[cpu].pass(&mut acc, None, &mut to_l2, 0);
        self.cache_hits[0] += (acc.len() - to_l2.len()) as u64;
        self.l2[cpu].pass(&mut acc, Some(&to_l2), &mut to_l3, 0);
        self.cache_hits[1] += (to_l2.len() - to_l3.len()) as u64;
        // The last level's tag store is too big for the host's caches:
        // fetch the sets a few accesses ahead, so that their loads overlap.
        let mut dram = std::mem::take(&mut self.to_dram);
        dram.clear();
        self.l3.pass(&mut acc, Some(&to_l3), &mut dram, 12);
        for &i in &dram {
            acc[i as usize].1 = self.dram;
        }
        self.cache_hits[2] += (to_l3.len() - dram.len()) as u64;
        self.dram_accesses += dram.len() as u64;
        self.to_dram = dram;
        // Cycles, reference by reference, as `charge` computes them (the
        // sums in the same order, so the same to the last bit).
        let (mut cycles, mut tr, mut da) = (self.cycles[cpu], self.breakdown.translation, self.breakdown.data);
        let (wm, dm) = (self.inv_walk_mlp, self.inv_data_mlp);
        let mut k = 0;
        for r in refs {
            let mut xlat = r.xlat;
            let nw = (r.walks_end - r.walks_start) as usize;
            if nw > 0 {
                xlat += acc[k..k + nw].iter().map(|a| a.1).sum::<u32>();
                k += nw;
            }
            let data = acc[k].1;
            k += 1;
            let xc = xlat as f64 * wm;
            let cyc = (xc + data as f64 * dm).max(1.0);
            cycles += cyc;
            tr += xc;
            da += cyc - xc;
        }
        self.cycles[cpu] = cycles;
        self.breakdown.translation = tr;
        self.breakdown.data = da;
        self.scratch = acc;
        self.to_l2 = to_l2;
        self.to_l3 = to_l3;
    }
}

/// A batch of references travelling to the timing thread with the timing
/// state itself, and back.
pub struct Job {
    pub timing: Box<Timing>,
    pub cpu: usize,
    pub refs: Vec<BatchRef>,
    pub walks: Vec<u64>,
}

/// A one-item hand-off between two threads. The waiting side spins for a
/// while before it parks: a batch takes the other thread tens of
/// microseconds, less than a sleep and wake-up costs on a virtual machine,
/// where waking a parked thread means an interrupt to another virtual CPU.
struct Slot<T> {
    item: std::sync::Mutex<Option<T>>,
    full: std::sync::atomic::AtomicBool,
}

impl<T> Slot<T> {
    fn new() -> Slot<T> {
        Slot { item: std::sync::Mutex::new(None), full: std::sync::atomic::AtomicBool::new(false) }
    }

    /// Leaves `v` for the waiter and wakes it if it parked. The slot must be
    /// empty (one item is in flight at a time).
    fn put(&self, v: T, waiter: &std::thread::Thread) {
        *self.item.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        self.full.store(true, std::sync::atomic::Ordering::Release);
        waiter.unpark();
    }

    fn try_take(&self) -> Option<T> {
        if !self.full.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.full.store(false, std::sync::atomic::Ordering::Relaxed);
        self.item.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Waits for an item; None once `closed()` holds and the slot is empty.
    /// The putter wakes the thread it was given; a waiter on another thread
    /// still sees the item within a millisecond.
    fn take(&self, closed: impl Fn() -> bool) -> Option<T> {
        // Long enough to cover the other thread's batch on an idle host,
        // short enough not to steal a busy host's cores.
        const SPIN: std::time::Duration = std::time::Duration::from_micros(100);
        let mut start: Option<std::time::Instant> = None;
        let mut n = 0u32;
        loop {
            if let Some(v) = self.try_take() {
                return Some(v);
            }
            if closed() {
                return self.try_take();
            }
            n = n.wrapping_add(1);
            if !n.is_multiple_of(32) {
                std::hint::spin_loop();
                continue;
            }
            let t0 = *start.get_or_insert_with(std::time::Instant::now);
            if t0.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                // A put between the check and here leaves the unpark token,
                // so this returns at once.
                std::thread::park_timeout(std::time::Duration::from_millis(1));
            }
        }
    }
}

struct Shared {
    jobs: Slot<Job>,
    done: Slot<Job>,
    closed: std::sync::atomic::AtomicBool,
}

/// A thread that runs the timing model for batches while the caller
/// translates the next one (the machine's second core). One batch is in
/// flight at a time: the timing state travels with it.
pub struct Worker {
    shared: std::sync::Arc<Shared>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    pub fn spawn() -> Worker {
        let shared = std::sync::Arc::new(Shared { jobs: Slot::new(), done: Slot::new(), closed: false.into() });
        let (sh, back) = (shared.clone(), std::thread::current());
        let handle = std::thread::Builder::new()
            .name("splab-timing".into())
            .spawn(move || {
                while let Some(mut job) = sh.jobs.take(|| sh.closed.load(std::sync::atomic::Ordering::Acquire)) {
                    job.timing.run_batch(job.cpu, &job.refs, &job.walks);
                    sh.done.put(job, &back);
                }
            })
            .expect("spawning the timing thread");
        Worker { shared, handle: Some(handle) }
    }

    /// Hands a batch to the timing thread. Called from the thread that
    /// spawned the worker, with no batch in flight.
    pub fn send(&self, job: Job) {
        let h = self.handle.as_ref().expect("worker running");
        self.shared.jobs.put(job, h.thread());
    }

    /// Waits for the batch in flight.
    pub fn recv(&self) -> Job {
        let h = self.handle.as_ref().expect("worker running");
        self.shared.done.take(|| h.is_finished()).expect("timing thread alive")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared.closed.store(true, std::sync::atomic::Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Running a batch level by level gives exactly the state and cycles of
    /// charging each reference through all levels in turn.
    #[test]
    fn level_by_level_batches_match_reference_by_reference() {
        let p = Profile::load("sapphire-rapids").unwrap();
        let mut a = Timing::new(&p).unwrap();
        let mut b = Timing::new(&p).unwrap();
        let mut x = 99u64;
        let mut walks = Vec::new();
        let mut refs = Vec::new();
        for i in 0..5000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let start = walks.len() as u32;
            if i % 7 == 0 {
                walks.push((x % (64 << 20)) & !7);
                walks.push(((x >> 3) % (1 << 20)) & !7);
            }
            // Mostly random, sometimes the same line again.
            let pa = if i % 3 == 0 && i > 0 { refs.last().map(|r: &BatchRef| r.pa + 8).unwrap() } else { x % (512 << 20) };
            refs.push(BatchRef { pa, xlat: i % 11, walks_start: start, walks_end: walks.len() as u32 });
        }
        for chunk in refs.chunks(300) {
            a.run_batch(1, chunk, &walks);
        }
        for r in &refs {
            b.charge(1, r.xlat, &walks[r.walks_start as usize..r.walks_end as usize], r.pa, false);
        }
        assert_eq!(a.cycles, b.cycles);
        assert_eq!((a.cache_hits, a.dram_accesses), (b.cache_hits, b.dram_accesses));
        assert_eq!(a.breakdown.data, b.breakdown.data);
        // And the caches hold the same lines: the same accesses hit or miss next.
        for r in &refs[..500] {
            assert_eq!(a.mem_latency(1, r.pa ^ 0x40), b.mem_latency(1, r.pa ^ 0x40));
        }
    }
}
