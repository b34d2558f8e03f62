//! What every workload needs from the system, said once: starting a process
//! on a CPU, mapping memory, streaming independent accesses in batches,
//! touching pages, a deterministic random generator, and error text that
//! names what failed.

use crate::kernels::Kernel;
use splab_sim::access::BATCH_THREAD_MIN;
use splab_sim::{Op, System};
use splab_vm::kernel::Pid;
use splab_vm::map::{Backing, MmapReq};
use splab_sim::AccessError;

/// 4 KB: the page the modelled programs were written for (sizes, strides
/// of page-by-page sweeps). The system's own base page, which is larger on
/// the Alpha, is `sys.page_size()`.
pub const PAGE: u64 = 4096;
/// A cache line, the unit of vectorised loops and of `memcpy`.
pub const LINE: u64 = 64;

/// The step of a loop that touches every line of a range (zeroing,
/// copying, streaming): a 64-byte `LINE`, or the machine's line where it
/// is shorter (the Armada XP's 32 bytes), so that every line of its
/// caches is touched; each step is one iteration of the loop's kernel
/// either way. On machines with 128-byte lines two steps touch a line.
pub fn line_step(sys: &System) -> u64 {
    step_of(sys.line_bytes())
}

/// `line_step` on a machine whose lines are `line` bytes.
pub fn step_of(line: u64) -> u64 {
    LINE.min(line)
}

/// Creates a process and puts it on `cpu`.
pub fn spawn_on(sys: &mut System, cpu: usize) -> Result<Pid, String> {
    let pid = sys.spawn().map_err(|e| format!("spawn: {e}"))?;
    sys.run_on(cpu, pid).map_err(|e| format!("running process {pid} on CPU {cpu}: {e}"))?;
    Ok(pid)
}

/// mmap(2); the error says what the mapping was for.
pub fn map(sys: &mut System, pid: Pid, req: MmapReq, what: &str) -> Result<u64, String> {
    sys.mmap(pid, req).map(|va| va.0).map_err(|e| format!("mmap of {} bytes for {what}: {e}", req.len))
}

/// A mapping of the first `len` bytes of a file.
pub fn file_req(file: u32, len: u64, prot: u8, shared: bool) -> MmapReq {
    MmapReq { addr: 0, len, prot, shared, fixed: false, backing: Backing::File { file, offset: 0 }, prefault: false }
}

/// munmap(2); the error says what the mapping was for.
pub fn unmap(sys: &mut System, pid: Pid, va: u64, len: u64, what: &str) -> Result<(), String> {
    sys.munmap(pid, va, len).map_err(|e| format!("munmap of {what}: {e}"))
}

/// exit(2).
pub fn exit(sys: &mut System, pid: Pid) -> Result<(), String> {
    sys.exit(pid).map_err(|e| format!("exit of process {pid}: {e}"))
}

/// Simulated seconds CPU `cpu` has spent since it was at `t0` cycles.
pub fn since(sys: &mut System, cpu: usize, t0: f64) -> f64 {
    let c = sys.cycles(cpu) - t0;
    sys.cycles_to_seconds(c)
}

/// Turns a fault into text naming the data structure that was accessed.
pub fn fault(what: &str) -> impl Fn(AccessError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Independent loads and stores of the process on one CPU, handed to the
/// system in batches (`System::access_batch`: same results as one access at
/// a time, much less work per reference). A batch is only made when it is
/// full or flushed, so callers flush before a syscall that changes the
/// mappings the pending accesses use, and before reading the clock.
///
/// Batches stay below `BATCH_THREAD_MIN`, so they are timed on this thread:
/// the streaming patterns here collapse into a few references and their
/// repeats a batch, and handing such batches to the timing thread costs
/// more than it saves on a busy host and for most of them on an idle one
/// (a 2-core guest, build 32b0ab5, `splab sim W`: bw 2.88 s this way
/// against 3.28 in 4096-access batches, transpose 4.38 against 5.26,
/// stream 3.16 against 2.59, and stream 3.26 against 7.63 with a busy
/// loop on the other core). `Batch::long` is for a workload whose main
/// loop goes to the timing thread anyway (GUPS).
pub struct Batch {
    ops: Vec<(u64, Op)>,
    /// Accesses a batch holds before it is made (`LEN`, or `LONG`).
    len: usize,
    pub cpu: usize,
    /// The loop whose references these are (`kernels`): it is the CPU's
    /// loop while they are made.
    pub kernel: Kernel,
    /// References made so far, for progress reports.
    pub refs: u64,
}

impl Batch {
    pub const LEN: usize = BATCH_THREAD_MIN - 1;
    /// Accesses of a batch for the timing thread, even where most are
    /// repeats on one line (sequential words, eight to a line): for a
    /// workload whose main loop goes there already (GUPS's updates).
    pub const LONG: usize = 16 * BATCH_THREAD_MIN;

    /// A batch of a loop that touches memory a reference at a time
    /// (`Kernel::Sweep`).
    pub fn new(cpu: usize) -> Batch {
        Batch::of(cpu, Kernel::Sweep)
    }

    /// A batch of `kernel`'s references.
    pub fn of(cpu: usize, kernel: Kernel) -> Batch {
        Batch { ops: Vec::with_capacity(Self::LEN), len: Self::LEN, cpu, kernel, refs: 0 }
    }

    /// `new`, in batches of `LONG` accesses.
    pub fn long(cpu: usize) -> Batch {
        Batch { len: Self::LONG, ..Batch::new(cpu) }
    }

    /// Makes the pending accesses, and from now on those of `kernel`.
    pub fn switch(&mut self, sys: &mut System, kernel: Kernel) -> Result<(), AccessError> {
        self.flush(sys)?;
        self.kernel = kernel;
        Ok(())
    }

    #[inline]
    pub fn push(&mut self, sys: &mut System, va: u64, op: Op) -> Result<(), AccessError> {
        self.ops.push((va, op));
        if self.ops.len() >= self.len {
            self.flush(sys)?;
        }
        Ok(())
    }

    #[inline]
    pub fn load(&mut self, sys: &mut System, va: u64) -> Result<(), AccessError> {
        self.push(sys, va, Op::Load)
    }

    #[inline]
    pub fn store(&mut self, sys: &mut System, va: u64, v: u64) -> Result<(), AccessError> {
        self.push(sys, va, Op::Store(v))
    }

    /// Accesses queued and not yet made.
    pub fn pending(&self) -> u64 {
        self.ops.len() as u64
    }

    /// Makes the pending accesses. On a fault, the accesses before it have
    /// been made and the rest are dropped.
    pub fn flush(&mut self, sys: &mut System) -> Result<(), AccessError> {
        if self.ops.is_empty() {
            return Ok(());
        }
        self.kernel.set(sys, self.cpu);
        let r = sys.access_batch(self.cpu, &self.ops);
        self.refs += match r {
            Ok(()) => self.ops.len() as u64,
            Err((i, _)) => i as u64 + 1,
        };
        self.ops.clear();
        r.map_err(|(_, e)| e)
    }
}

/// Touches every page of [va, va + len) once, by a store of `value` (the
/// way a program's first use of fresh memory faults it in), or by a load.
pub fn touch_pages(sys: &mut System, b: &mut Batch, va: u64, len: u64, store: Option<u64>) -> Result<(), AccessError> {
    let op = match store {
        Some(v) => Op::Store(v),
        None => Op::Load,
    };
    let page = sys.page_size();
    let mut p = va & !(page - 1);
    while p < va + len {
        b.push(sys, p, op)?;
        p += page;
    }
    b.flush(sys)
}

/// The checker's SplitMix64 generator: small, fast and deterministic, for
/// choosing keys, sizes and orders; the same seed gives the same run on
/// every host.
pub use splab_sim::check::Rng;

/// Uniform in [lo, hi].
pub fn between(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi - lo + 1)
}

/// Bytes in lmbench's megabytes (2^20).
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// A size as lmbench's options take it: `64k`, `256m`, `4g` (the largest
/// unit that divides it), or bytes.
pub fn size_text(bytes: u64) -> String {
    for (unit, shift) in [("g", 30), ("m", 20), ("k", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Rounds up to a whole number of pages.
pub fn page_round(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE) * PAGE
}

/// A system on machine profile `profile` with 256 MB of memory under
/// superpage policy `policy`, for the workloads' tests.
#[cfg(test)]
pub fn test_system(profile: &str, policy: &str) -> splab_sim::System {
    let mut c = splab_sim::Config::new(splab_hw::profile::Profile::load(profile).unwrap());
    c.memory = 256 << 20;
    c.policy = policy.into();
    splab_sim::System::new(c).unwrap()
}
