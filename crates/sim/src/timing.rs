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

    /// Asks the host to start fetching the model's tag sets for `pa`.
    #[inline]
    pub fn prefetch(&self, cpu: usize, pa: u64) {
        self.l1[cpu].prefetch(pa);
        self.l2[cpu].prefetch(pa);
        self.l3.prefetch(pa);
    }

    /// Times a batch of references in order.
    pub fn run_batch(&mut self, cpu: usize, refs: &[BatchRef], walks: &[u64]) {
        // Have the host fetch the tag sets a few references ahead.
        const AHEAD: usize = 24;
        for r in refs.iter().take(AHEAD) {
            self.l2[cpu].prefetch(r.pa);
            self.l3.prefetch(r.pa);
        }
        for (i, r) in refs.iter().enumerate() {
            if let Some(n) = refs.get(i + AHEAD) {
                self.l2[cpu].prefetch(n.pa);
                self.l3.prefetch(n.pa);
            }
            let w = &walks[r.walks_start as usize..r.walks_end as usize];
            self.charge(cpu, r.xlat, w, r.pa, false);
        }
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

/// A thread that runs the timing model for batches while the caller
/// translates the next one (the machine's second core).
pub struct Worker {
    tx: Option<std::sync::mpsc::Sender<Job>>,
    rx: std::sync::mpsc::Receiver<Job>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    pub fn spawn() -> Worker {
        let (tx, jobs) = std::sync::mpsc::channel::<Job>();
        let (done, rx) = std::sync::mpsc::channel::<Job>();
        let handle = std::thread::Builder::new()
            .name("splab-timing".into())
            .spawn(move || {
                for mut job in jobs {
                    job.timing.run_batch(job.cpu, &job.refs, &job.walks);
                    if done.send(job).is_err() {
                        break;
                    }
                }
            })
            .expect("spawning the timing thread");
        Worker { tx: Some(tx), rx, handle: Some(handle) }
    }

    pub fn send(&self, job: Job) {
        self.tx.as_ref().expect("worker running").send(job).expect("timing thread alive");
    }

    pub fn recv(&self) -> Job {
        self.rx.recv().expect("timing thread alive")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
