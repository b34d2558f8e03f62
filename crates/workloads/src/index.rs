//! A database's read-only index lookups, after `pgbench -S` (select-only)
//! on PostgreSQL: each transaction looks up one random account by primary
//! key, `SELECT abalance FROM pgbench_accounts WHERE aid = :aid`, which
//! descends the B-tree index from the root to a leaf and then reads the
//! row from its heap page.
//!
//! Everything lives in one shared anonymous mapping made by a "postmaster"
//! process, as PostgreSQL's shared buffers do, sized so that the whole
//! database is cached (the usual in-memory select-only setup):
//! - buffer-mapping partition locks (128, one cache line each),
//! - buffer descriptors (64 bytes each),
//! - the buffer-mapping hash table (bucket array and entries),
//! - the buffers: 8 KB pages.
//!
//! The pages have PostgreSQL's layout: a 24-byte page header, then 4-byte
//! line pointers growing up, tuples growing down from the end, and on index
//! pages 16 bytes of B-tree special space. Index tuples are 16 bytes (tuple
//! header with the heap pointer or downlink, then the int4 key); leaves are
//! filled to 90% and inner pages to 70% as a bottom-up index build does;
//! pages other than the rightmost of their level start with a high key.
//! Heap pages hold 61 pgbench_accounts rows (the real density).
//!
//! A lookup does what the server's memory does: for each page, the
//! buffer-mapping lock is taken, the hash bucket and entry are read, the
//! buffer is pinned (a read-modify-write of its descriptor), the page is
//! binary-searched (each probe reads a line pointer, then the key it points
//! to: dependent loads), the downlink or heap pointer is read, and the
//! buffer is unpinned. The heap fetch reads the row's line pointer, tuple
//! header and balance. Every load depends on the one before.
//!
//! The tree's shape and the keys are computed on the host (they follow
//! from the bottom-up build), so the values need not be kept in modelled
//! memory; the references are those of the real structure.
//!
//! The rest of the transaction is work measured on a real PostgreSQL 15
//! backend and pgbench client (`BACKEND_INSNS_PER_TXN` and the constants
//! after it say how): the backend's instructions (parsing, planning, the
//! executor, the protocol; the lookup's own instructions among them) are
//! dispatched at the profile's `[core] width` (`System::instructions`),
//! and the round trip is what it is on the real system: the backend's
//! and the client's system calls (recv, send, poll; the planner's
//! lseeks), each at the profile's `syscall` cost, and, where the client
//! shares the backend's CPU, a switch to the client and back
//! (`System::run_on`, with its TLB effects). The client's instructions
//! are charged to its backend's CPU too: the round trip is synchronous,
//! so a backend waits while its client works whichever CPU that runs on.
//! Not modelled: the memory references of that work (the measured
//! backend makes some 47600 a transaction,
//! against the lookup's hundred or so here), the instruction fetches of
//! its code, and the idle switches and wake-ups of a backend and client on
//! CPUs of their own. What those references cover, from the `Referenced:`
//! lines of a warmed-up backend's /proc/PID/smaps after `echo 1 >
//! /proc/PID/clear_refs` and one `SELECT abalance FROM pgbench_accounts
//! WHERE aid = N` (psql, same server): 1604 kB of the postgres binary,
//! 1076 kB of shared libraries, 204 kB of heap, 116 kB of other anonymous
//! memory, 16 kB of stack, 120 kB of shared memory; 3204 kB in all, most
//! of it code.
//! `--insns-per-txn 0 --round-trip false` times the lookup alone.
//!
//! pgbench's clients are backends forked from the postmaster, each on a
//! CPU of its own (more clients than CPUs share them). Long-lived backends
//! have touched all of shared memory; so do these, before timing. pgbench
//! itself is one process on the CPU after the backends' (the first one's
//! when every CPU has a backend).

use crate::common::{between, exit, fault, map, spawn_on, touch_pages, Batch, Rng};
use crate::sched::{Quanta, Sched, Spawn, Step, Task};
use crate::layout::{Layout, LayoutObtained, Region};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::{Op, System};
use splab_vm::kernel::Pid;
use splab_vm::map::{Backing, MmapReq};
use splab_vm::prot;
use std::fmt::Write as _;
use std::rc::Rc;

/// PostgreSQL's page size (BLCKSZ).
pub const BLCKSZ: u64 = 8192;
const PAGE_HEADER: u64 = 24;
const ITEM_ID: u64 = 4;
const BT_SPECIAL: u64 = 16;
const INDEX_TUPLE: u64 = 16;
const HEAP_TUPLE: u64 = 128;
const HEAP_PER_PAGE: u64 = 61;
const PARTITIONS: u64 = 128;
const DESC: u64 = 64;
const HASH_ENTRY: u64 = 32;

/// Instructions a PostgreSQL 15 backend executes per pgbench -S
/// transaction, with every page in shared buffers (Debian's postgresql-15
/// on x86-64, scale 1, autovacuum off, the pages read beforehand by an
/// index scan of each table). A backend's count for `pgbench -S -t 2001`
/// less that for `-t 1`, so that connection set-up cancels, over 2000;
/// the postmaster run as `valgrind --tool=callgrind --cache-sim=yes
/// --callgrind-out-file=cg/be.%p postgres -D data` (forked backends stay
/// under valgrind). The backends' `totals:` lines: Ir 245390487 and
/// 41963474, so (245390487 - 41963474) / 2000 = 101713; their data
/// references (Dr + Dw) differ by 47579 a transaction.
pub const BACKEND_INSNS_PER_TXN: u64 = 101_713;

/// Instructions pgbench executes per select-only transaction (one client,
/// one thread), from `valgrind --tool=callgrind --cache-sim=yes pgbench -S
/// -t N` against the same server: "I refs: 24,230,820" at N = 2001 and
/// "10,417,160" at N = 1, so (24230820 - 10417160) / 2000 = 6906 (and
/// 2878 data references).
pub const CLIENT_INSNS_PER_TXN: u64 = 6_906;

/// System calls of the backend per thousand transactions: the postmaster
/// run under `strace -f -ff -o st/s`, the backend's file for `pgbench -S
/// -t 2001` against that for `-t 1`, over 2000: recvfrom 1.923 (0.923 of
/// them EAGAIN), epoll_wait 0.923, sendto 1, lseek 2 (the planner asks the
/// heap's and the index's size), 5.846 in all.
pub const BACKEND_SYSCALLS_PER_KTXN: u64 = 5_846;

/// System calls of pgbench per thousand transactions: `strace -f -c
/// pgbench -S -t N` at N = 2001 against N = 1, over 2000: sendto 1,
/// recvfrom 1.5285 (0.5285 of them EAGAIN), ppoll 0.5285, 3.057 in all.
/// Whether a recv finds the answer there or must wait and poll depends on
/// the timing of the host that was measured (two CPUs, strace attached).
pub const CLIENT_SYSCALLS_PER_KTXN: u64 = 3_057;

/// The database: the index levels, the heap, and where the buffers are:
/// the native index's layout, computed once for both (offsets into the
/// shared segment until `place`).
type Db = splab_defs::index::Layout;

/// What the simulated backends need of the layout beyond its fields.
trait Placed {
    /// Turns the segment offsets into addresses in a segment at `base`.
    fn place(&mut self, base: u64);
    fn height(&self) -> usize;
}

impl Placed for Db {
    fn place(&mut self, base: u64) {
        for a in [&mut self.locks, &mut self.descs, &mut self.buckets, &mut self.entries, &mut self.blocks] {
            *a += base;
        }
    }

    fn height(&self) -> usize {
        self.levels.len()
    }

}

/// A backend: runs its transactions, a quantum at a time.
struct Backend {
    pid: Pid,
    db: Rc<Db>,
    rng: Rng,
    left: u64,
    /// References made so far.
    refs: u64,
    /// The backend's instructions per transaction beside the lookup's
    /// references.
    insns: u64,
    /// The client's process when the round trip is modelled, and whether
    /// it shares this backend's CPU.
    client: Option<(Pid, bool)>,
    /// Thousandths of a system call owed to the backend and the client
    /// (their counts per transaction are means).
    owed: (u64, u64),
}

impl Backend {
    /// A dependent access: every step of a lookup needs the one before.
    #[inline]
    fn access(&mut self, sys: &mut System, cpu: usize, va: u64, op: Op) -> Result<(), String> {
        self.refs += 1;
        sys.access(cpu, va, op, true).map(|_| ()).map_err(fault("index lookup"))
    }

    fn load(&mut self, sys: &mut System, cpu: usize, va: u64) -> Result<(), String> {
        self.access(sys, cpu, va, Op::Load)
    }

    /// A read-modify-write of a shared word (a lock or a pin count).
    fn update(&mut self, sys: &mut System, cpu: usize, va: u64) -> Result<(), String> {
        self.access(sys, cpu, va, Op::Load)?;
        self.access(sys, cpu, va, Op::Store(1))
    }

    /// ReadBuffer for a block that is in the pool: the mapping lookup under
    /// its partition lock, then the pin. Returns the page's address.
    fn pin(&mut self, sys: &mut System, cpu: usize, buf: u64) -> Result<u64, String> {
        let db = self.db.clone();
        let h = Db::hash(buf);
        let lock = db.locks + (h % PARTITIONS) * 64;
        self.update(sys, cpu, lock)?;
        self.load(sys, cpu, db.buckets + (h & (db.nbuckets - 1)) * 8)?;
        self.load(sys, cpu, db.entries + buf * HASH_ENTRY)?;
        self.access(sys, cpu, lock, Op::Store(0))?;
        self.update(sys, cpu, db.descs + buf * DESC)?;
        Ok(db.blocks + buf * BLCKSZ)
    }

    fn unpin(&mut self, sys: &mut System, cpu: usize, buf: u64) -> Result<(), String> {
        let desc = self.db.descs + buf * DESC;
        self.access(sys, cpu, desc, Op::Store(0))
    }

    /// The work of a transaction beside the lookup: the client's query and
    /// the backend's parsing, planning and reply.
    fn round_trip(&mut self, sys: &mut System, cpu: usize) -> Result<(), String> {
        if let Some((client, shared)) = self.client {
            if shared {
                sys.run_on(cpu, client).map_err(|e| format!("switching CPU {cpu} to pgbench: {e}"))?;
            }
            sys.instructions(cpu, CLIENT_INSNS_PER_TXN);
            self.owed.1 += CLIENT_SYSCALLS_PER_KTXN;
            sys.syscalls(cpu, self.owed.1 / 1000);
            self.owed.1 %= 1000;
            if shared {
                sys.run_on(cpu, self.pid).map_err(|e| format!("switching CPU {cpu} back to backend {}: {e}", self.pid))?;
            }
            self.owed.0 += BACKEND_SYSCALLS_PER_KTXN;
            sys.syscalls(cpu, self.owed.0 / 1000);
            self.owed.0 %= 1000;
        }
        sys.instructions(cpu, self.insns);
        Ok(())
    }

    /// One select-only transaction.
    fn transaction(&mut self, sys: &mut System, cpu: usize) -> Result<(), String> {
        self.round_trip(sys, cpu)?;
        let db = self.db.clone();
        let aid = between(&mut self.rng, 1, db.rows);
        let key = aid - 1;
        // Descend from the root: at each level, the page under which the
        // key lies, and the binary search within it.
        for lv in (0..db.height()).rev() {
            let l = &db.levels[lv];
            let page = key / l.span;
            let buf = l.first_block + page;
            let pa = self.pin(sys, cpu, buf)?;
            // Data items on the page, each covering `child` keys.
            let (n, child) = match lv {
                0 => ((db.rows - page * l.span).min(l.per), 1),
                _ => ((db.levels[lv - 1].pages - page * l.per).min(l.per), db.levels[lv - 1].span),
            };
            let first = if page + 1 == l.pages { 1 } else { 2 };
            let key_of = |j: u64| page * l.span + j * child;
            // Leaves: the first item with key >= the key sought; inner
            // pages: the last item with key <= it (the first item of an
            // inner page is minus infinity and never compared).
            let (mut low, mut high) = (if lv == 0 { 0 } else { 1 }, n);
            while low < high {
                let mid = low + (high - low) / 2;
                let off = first + mid;
                self.load(sys, cpu, pa + PAGE_HEADER + (off - 1) * ITEM_ID)?;
                self.load(sys, cpu, pa + BLCKSZ - BT_SPECIAL - INDEX_TUPLE * off + 8)?;
                let past = if lv == 0 { key_of(mid) >= key } else { key_of(mid) > key };
                if past {
                    high = mid;
                } else {
                    low = mid + 1;
                }
            }
            let j = if lv == 0 { low } else { low - 1 };
            debug_assert!(j < n && key_of(j) <= key && key < key_of(j) + child, "key {aid}: level {lv} page {page} item {j}");
            // The heap pointer or downlink of the item found.
            self.load(sys, cpu, pa + BLCKSZ - BT_SPECIAL - INDEX_TUPLE * (first + j))?;
            self.unpin(sys, cpu, buf)?;
        }
        // The heap fetch: line pointer, tuple header (visibility), balance.
        let buf = db.heap_first_block + key / HEAP_PER_PAGE;
        let off = key % HEAP_PER_PAGE + 1;
        let pa = self.pin(sys, cpu, buf)?;
        self.load(sys, cpu, pa + PAGE_HEADER + (off - 1) * ITEM_ID)?;
        let tuple = pa + BLCKSZ - HEAP_TUPLE * off;
        self.load(sys, cpu, tuple)?;
        self.load(sys, cpu, tuple + 32)?;
        self.unpin(sys, cpu, buf)
    }
}

impl Task for Backend {
    fn pid(&self) -> Pid {
        self.pid
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, _: &mut Vec<Spawn>) -> Result<Step, String> {
        let before = self.refs;
        while self.left > 0 && self.refs - before < budget {
            self.transaction(sys, cpu)?;
            self.left -= 1;
        }
        Ok(Step { refs: self.refs - before, done: self.left == 0 })
    }
}

pub struct Index {
    pub scale: u64,
    pub clients: usize,
    /// Transactions per client (pgbench -t).
    pub transactions: u64,
    pub quanta: Quanta,
    /// `--pages`: the shared buffers laid out as asked (the advice is
    /// made in the postmaster and inherited by the backends).
    pub pages: Layout,
    /// `--insns-per-txn`: the backend's instructions per transaction
    /// (`BACKEND_INSNS_PER_TXN`; 0: none).
    pub insns_per_txn: u64,
    /// `--round-trip`: the client's work, the system calls and the switches
    /// of the round trip (false: none).
    pub round_trip: bool,
}

impl Index {
    pub fn new(scale: u64, clients: usize, transactions: u64) -> Result<Index, String> {
        if !(1..=10_000).contains(&scale) {
            return Err(format!("--scale {scale} is out of range (1 to 10000)"));
        }
        if !(1..=256).contains(&clients) {
            return Err(format!("--clients {clients} is out of range (1 to 256)"));
        }
        if !(1..=1_000_000_000).contains(&transactions) {
            return Err(format!("--transactions {transactions} is out of range (1 to 1000000000)"));
        }
        Ok(Index { scale, clients, transactions, quanta: Quanta::default(), pages: Layout::default(), insns_per_txn: BACKEND_INSNS_PER_TXN, round_trip: true })
    }

    /// Bytes of the shared segment.
    pub fn shared_bytes(&self) -> u64 {
        Db::new(self.scale).segment
    }

    /// `--insns-per-txn`, checked.
    pub fn set_insns_per_txn(&mut self, n: u64) -> Result<(), String> {
        if n > 1_000_000_000 {
            return Err(format!("--insns-per-txn {n} is out of range (0 to 1000000000)"));
        }
        self.insns_per_txn = n;
        Ok(())
    }

    /// What a transaction's time is made of, for the report.
    fn timed(&self, ncpus: usize) -> String {
        let mut t = String::from("the lookup's memory references");
        if self.insns_per_txn > 0 {
            let _ = write!(t, ", {} backend instructions", self.insns_per_txn);
        }
        if self.round_trip {
            let ms = |k: u64| format!("{}.{:03}", k / 1000, k % 1000);
            let _ = write!(
                t,
                ", {} client instructions and the round trip's system calls ({} backend, {} client)",
                CLIENT_INSNS_PER_TXN,
                ms(BACKEND_SYSCALLS_PER_KTXN),
                ms(CLIENT_SYSCALLS_PER_KTXN)
            );
            let shared = (0..self.clients).filter(|c| c % ncpus == self.clients % ncpus).count();
            if shared > 0 {
                let _ = write!(t, " and 2 context switches for each of the {shared} backends on pgbench's CPU");
            }
        }
        t + " per transaction"
    }
}

impl Workload for Index {
    fn name(&self) -> String {
        format!("index(scale {}, {} clients)", self.scale, self.clients)
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        let db = Db::new(self.scale);
        let pages = db.segment / 4096;
        let per_xact = 100 * db.height() as u64;
        pages * (1 + self.clients as u64) + per_xact * self.transactions * self.clients as u64
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let ncpus = sys.ncpus();
        let mut db = Db::new(self.scale);
        // The postmaster makes shared memory and pgbench -i fills it.
        let postmaster = spawn_on(sys, 0)?;
        let req = MmapReq { addr: 0, len: db.segment, prot: prot::RW, shared: true, fixed: false, backing: Backing::Anon, prefault: false };
        let region = match self.pages.asked {
            Some(l) => Some(Region::map(sys, postmaster, 0, db.segment, true, l, "shared buffers")?),
            None => None,
        };
        let base = match region {
            Some(r) => r.va,
            None => map(sys, postmaster, req, "shared buffers")?,
        };
        db.place(base);
        let mut b = Batch::new(0);
        touch_pages(sys, &mut b, base, db.segment, Some(0)).map_err(fault("loading the database"))?;
        let mut done = b.refs;
        progress(done);
        let db = Rc::new(db);
        // pgbench, on the CPU after the backends'.
        let client_cpu = self.clients % ncpus;
        let client = match self.round_trip {
            true => Some(spawn_on(sys, client_cpu)?),
            false => None,
        };
        // The backends, each having touched all of shared memory.
        let mut sched = Sched::new(ncpus, self.quanta)?;
        let mut pids = Vec::new();
        for c in 0..self.clients {
            let cpu = c % ncpus;
            sys.run_on(0, postmaster).map_err(|e| format!("postmaster: {e}"))?;
            let pid = sys.fork(postmaster).map_err(|e| format!("fork of a backend: {e}"))?;
            sys.run_on(cpu, pid).map_err(|e| format!("backend on CPU {cpu}: {e}"))?;
            let mut b = Batch::new(cpu);
            touch_pages(sys, &mut b, base, db.segment, None).map_err(fault("backend warm-up"))?;
            done += b.refs;
            progress(done);
            let rng = Rng::new(0xB7EE ^ c as u64);
            let client = client.map(|p| (p, cpu == client_cpu));
            let backend = Backend { pid, db: db.clone(), rng, left: self.transactions, refs: 0, insns: self.insns_per_txn, client, owed: (0, 0) };
            sched.add(Some(cpu), Box::new(backend))?;
            pids.push(pid);
        }
        let ph = sched.run(sys, done, progress)?;
        self.pages.obtained = region.map(|r| r.obtained(sys, postmaster));
        for pid in pids.into_iter().chain(client) {
            exit(sys, pid)?;
        }
        exit(sys, postmaster)?;

        let total = self.transactions * self.clients as u64;
        let secs = ph.seconds(sys);
        let tps = total as f64 / secs;
        let mut r = String::new();
        let _ = writeln!(r, "transaction type: <builtin: select only>");
        let _ = writeln!(r, "scaling factor: {}", self.scale);
        let _ = writeln!(r, "query mode: simple");
        let _ = writeln!(r, "number of clients: {}", self.clients);
        let _ = writeln!(r, "number of threads: 1");
        let _ = writeln!(r, "number of transactions per client: {}", self.transactions);
        let _ = writeln!(r, "number of transactions actually processed: {total}/{total}");
        let _ = writeln!(r, "number of failed transactions: 0 (0.000%)");
        let _ = writeln!(r, "latency average = {:.6} ms", secs * self.clients as f64 / total as f64 * 1e3);
        let _ = writeln!(r, "tps = {tps:.6} (without initial connection time)");
        let leaves = db.levels[0].pages;
        let _ = writeln!(
            r,
            "# simulated: {} rows in {} heap blocks; index height {}, {} leaf blocks; {} buffers of 8 KB in {:.1} MiB of shared memory; {} memory references per transaction on average; timed: {}",
            db.rows,
            db.heap_pages,
            db.height(),
            leaves,
            db.nbuffers,
            db.segment as f64 / (1u64 << 20) as f64,
            ph.refs / total.max(1),
            self.timed(ncpus)
        );
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: "tps".into(), value: tps, unit: "transactions/s".into(), higher_is_better: true },
            report: r,
            timed_seconds: secs,
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
    fn tree_shape_follows_the_build() {
        let db = Db::new(1);
        assert_eq!(db.rows, 100_000);
        assert_eq!(db.levels[0].per, 366, "index entries a leaf page holds at 90% fill");
        assert_eq!(db.levels[0].pages, 274);
        assert_eq!(db.height(), 2);
        assert_eq!(db.levels[1].pages, 1);
        assert_eq!(db.heap_pages, 1640);
        let big = Db::new(100);
        assert_eq!(big.height(), 3);
        assert!(big.segment > big.nbuffers * BLCKSZ);
    }
}
