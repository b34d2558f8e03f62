//! The core's time: an interval model (Genbrugge, Eyerman and Eeckhout,
//! "Interval simulation", HPCA 2010; Sniper's default core) that runs
//! every instruction stream on the profile's `[core]`.
//!
//! Instructions dispatch in program order at `width` a cycle into a
//! window of `rob` entries and retire in order once complete. Between
//! miss events nothing else holds them up. The events:
//! - a memory reference issues once its address is ready (the block
//!   states what it depends on: registers as the block found them, values
//!   loaded before it) and its translation is done (a walk waits for one
//!   of `walkers`); it completes after its latency, a first-level miss
//!   holding one of `mshrs` line-fill buffers until its line arrives. A
//!   long miss at the window's head stops dispatch once the window is
//!   full, so misses within `rob` instructions of each other overlap and
//!   a dependent one waits: memory-level parallelism follows from where
//!   the misses fall, not from a factor. Loads hold load-queue entries
//!   until they retire, stores store-queue entries until they drain to
//!   the cache in program order;
//! - a mispredicted branch (the profile's predictor, told what the branch
//!   did) stops dispatch until it resolves (its operands ready) and the
//!   front end refills (`mispredict` cycles);
//! - an instruction fetch that misses the first-level instruction cache
//!   or TLB stops dispatch for its latency.
//!
//! Register values carry the time they are ready from block to block
//! (`ready`), so a chain through registers (a pointer chase, a checksum
//! loop) runs at its latency whatever the width. The time a CPU has spent
//! is when its last instruction retired or its next dispatches, whichever
//! is later; every cycle the dispatch clock waits is put down to the event
//! that held it (`Stack`), so the stack sums to the time.
//!
//! Timing only consumes what the access path produced (the latencies of
//! each reference, the blocks and exits the stream named): nothing here
//! changes what is translated, cached or faulted.

use crate::block::{Block, Span, FROM_REF, FROM_REG};
use serde::Serialize;
use splab_hw::bpred::{Predictor, PredictorStats};
use splab_hw::profile::Core;

/// The parts of the core model that can be switched off to see what each
/// moves (`--core-off`); all on is the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CoreParts {
    /// Dependences through registers and loaded values (off: every
    /// address and result is ready when its instruction dispatches).
    pub deps: bool,
    /// Branch mispredictions (off: every branch predicted).
    pub branches: bool,
    /// Instruction fetch through the instruction TLB and cache (off: a
    /// fetch never stops dispatch).
    pub fetch: bool,
    /// The window and the load and store queues (off: unbounded).
    pub window: bool,
    /// Line-fill buffers and walkers (off: unbounded).
    pub mshrs: bool,
}

impl Default for CoreParts {
    fn default() -> CoreParts {
        CoreParts { deps: true, branches: true, fetch: true, window: true, mshrs: true }
    }
}

/// The names `--core-off` takes.
pub const PART_NAMES: [&str; 5] = ["deps", "branches", "fetch", "window", "mshrs"];

impl CoreParts {
    /// All parts but those named (comma-separated).
    pub fn without(names: &str) -> Result<CoreParts, String> {
        let mut p = CoreParts::default();
        for n in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match n {
                "deps" => p.deps = false,
                "branches" => p.branches = false,
                "fetch" => p.fetch = false,
                "window" => p.window = false,
                "mshrs" => p.mshrs = false,
                _ => return Err(format!("--core-off {n:?}: not a part of the core model (parts: {})", PART_NAMES.join(", "))),
            }
        }
        Ok(p)
    }

    /// The parts switched off, comma-separated ("" for none).
    pub fn off(&self) -> String {
        let on = [self.deps, self.branches, self.fetch, self.window, self.mshrs];
        PART_NAMES.iter().zip(on).filter(|(_, o)| !o).map(|(n, _)| *n).collect::<Vec<_>>().join(",")
    }
}

/// Where a CPU's cycles went, as the dispatch clock waited.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Stack {
    /// Dispatching instructions at the core's width.
    pub base: f64,
    /// Waiting for mispredicted branches to resolve and the front end to
    /// refill.
    pub branch: f64,
    /// Waiting for instruction fetches that missed.
    pub fetch: f64,
    /// Waiting on data: a full window behind a data access, full load or
    /// store queues.
    pub data: f64,
    /// Waiting on translation: a full window behind an access's TLB miss
    /// and walk.
    pub translation: f64,
}

impl Stack {
    pub fn total(&self) -> f64 {
        self.base + self.branch + self.fetch + self.data + self.translation
    }
}

/// What the core counted.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct CoreStats {
    pub instructions: u64,
    pub blocks: u64,
    pub predictor: PredictorStats,
    /// Instruction fetches that missed the first-level instruction cache.
    pub fetch_misses: u64,
}

impl CoreStats {
    pub fn add(&mut self, o: &CoreStats) {
        self.instructions += o.instructions;
        self.blocks += o.blocks;
        self.predictor.add(&o.predictor);
        self.fetch_misses += o.fetch_misses;
    }
}

/// What the caches and the TLB made of one reference, for the core.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RefTime {
    /// TLB cycles beyond the first level (second-level lookup, assists,
    /// a walk's own cost) and the walk's references in sequence.
    pub xlat: u32,
    pub walked: bool,
    /// The part of `xlat` its walk's page-table reads spent beyond the
    /// second-level cache (each read's latency less a second-level hit).
    pub walk_far: u32,
    /// The data access's latency, and whether it missed the first level
    /// (and so holds a line-fill buffer).
    pub data: u32,
    pub missed: bool,
    /// The stream prefetcher covered the miss (the line time it delivers
    /// lines at), or 0.
    pub stream_line: f32,
    /// Lines it read from memory (its walk's and its data's).
    pub dram_lines: u8,
    /// Dirty lines its fills evicted to memory.
    pub writebacks: u8,
}

/// What the stream says of a reference beyond its latency: its place in
/// the block and whether it loads or stores.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RefPlace {
    /// The `i`-th reference of the current block (loop or entered).
    Block(u16),
    /// No block: one instruction, its address ready at dispatch or, if
    /// `dependent`, when the previous load's value is.
    Free { dependent: bool },
}

/// A control transfer whose target the next block's entry tells.
#[derive(Clone, Copy, Debug)]
enum Pending {
    None,
    Ret { resolve: f64 },
    Indirect { pc: u64, resolve: f64 },
}

#[derive(Clone, Copy)]
enum Cause {
    Branch,
    Fetch,
    /// Memory, with the share of it due to translation.
    Mem(f32),
}

/// The memory system's numbers the core needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemCfg {
    pub l1: u32,
    pub l1i: u32,
    pub l2: u32,
    /// The second-level TLB's lookup (`costs.stlb_hit`), which a walk's
    /// translation time begins with: a walker is taken only once it has
    /// missed there.
    pub stlb: u32,
    /// Cycles the memory interface is held by a line read, and by a
    /// writeback (0: it bounds nothing).
    pub chan_read: f64,
    pub chan_wb: f64,
}

/// A queue of entries held until a time: a ring of the times its entries
/// free, oldest at `head` (0 before any use: free from the start).
struct Queue {
    ring: Vec<f64>,
    head: usize,
}

impl Queue {
    fn new(n: u32) -> Queue {
        Queue { ring: vec![0.0; n.max(1) as usize], head: 0 }
    }

    /// When the entry a new one replaces is free.
    #[inline(always)]
    fn oldest(&self) -> f64 {
        debug_assert!(self.head < self.ring.len());
        // SAFETY: head < ring.len() always (ring is never empty, and push
        // wraps head at its length).
        unsafe { *self.ring.get_unchecked(self.head) }
    }

    /// A new entry, held until `until`.
    #[inline(always)]
    fn push(&mut self, until: f64) {
        debug_assert!(self.head < self.ring.len());
        // SAFETY: as in `oldest`.
        unsafe { *self.ring.get_unchecked_mut(self.head) = until };
        self.head += 1;
        if self.head == self.ring.len() {
            self.head = 0;
        }
    }
}

/// The larger of two times (neither is NaN: `f64::max`'s care for NaN
/// costs instructions on the hottest path).
#[inline(always)]
fn fmax(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// Units (line-fill buffers, walkers) each held until a time. A core's
/// few (up to `FEW_UNITS`) are the leaves of a tournament tree of losers:
/// each node above the leaves keeps the later of the two times that met
/// there, and node 0 the earliest of all with its leaf. A take gives the
/// earliest's leaf its new time and plays it up the path to the root, one
/// comparison a level, without a branch (which unit frees first is
/// unpredictable where misses go to memory at random). Times are never
/// negative, so their bits compare as the times do, in integer registers.
/// Many units (the model's parts switched off) are a ring kept in
/// ascending order from `head`, where a new hold, usually the latest,
/// moves back from the end past the later times it does not reach. Either
/// way a take frees the earliest time and holds a new one, and the times
/// that result are the same.
struct Units {
    ring: Vec<f64>,
    head: usize,
    /// The tree (few units): node 0 the earliest time and its leaf, nodes
    /// 1 to `leaves - 1` the later time of each match and its leaf; leaf
    /// j's parent is node `(leaves + j) / 2`. Leaves past the units hold
    /// a time never reached.
    bits: [u64; FEW_UNITS],
    leaf: [u32; FEW_UNITS],
    leaves: usize,
    levels: u32,
    few: bool,
}

/// Units at most this many are kept in a tree rather than a ring.
const FEW_UNITS: usize = 32;

impl Units {
    fn new(n: usize) -> Units {
        let n = n.max(1);
        let mut u = Units { ring: Vec::new(), head: 0, bits: [0; FEW_UNITS], leaf: [0; FEW_UNITS], leaves: 0, levels: 0, few: n <= FEW_UNITS };
        if u.few {
            // Every unit free at 0: the first leaf wins every match it
            // plays, and each node keeps the winner of its right half.
            let p = n.next_power_of_two();
            let (mut win_bits, mut win_leaf) = (vec![0u64; 2 * p], vec![0u32; 2 * p]);
            for j in 0..p {
                win_bits[p + j] = if j < n { 0f64.to_bits() } else { f64::INFINITY.to_bits() };
                win_leaf[p + j] = j as u32;
            }
            for k in (1..p).rev() {
                let (a, b) = (2 * k, 2 * k + 1);
                let (w, l) = if win_bits[b] < win_bits[a] { (b, a) } else { (a, b) };
                (u.bits[k], u.leaf[k]) = (win_bits[l], win_leaf[l]);
                (win_bits[k], win_leaf[k]) = (win_bits[w], win_leaf[w]);
            }
            (u.bits[0], u.leaf[0]) = (win_bits[1], win_leaf[1]);
            (u.leaves, u.levels) = (p, p.trailing_zeros());
        } else {
            u.ring = vec![0.0; n];
        }
        u
    }

    /// The earliest free unit, at or after `at`, taken until
    /// `hold(start)` (never before `start`); returns that time.
    #[inline(always)]
    fn take(&mut self, at: f64, hold: impl FnOnce(f64) -> f64) -> f64 {
        if self.few {
            self.take_few(at, hold)
        } else {
            self.take_ordered(at, hold)
        }
    }

    /// `take` of a few: the earliest's leaf gets the new time, which
    /// plays its path's matches up to the root: at each node the earlier
    /// of the two goes on and the later stays.
    #[inline(always)]
    fn take_few(&mut self, at: f64, hold: impl FnOnce(f64) -> f64) -> f64 {
        let end = hold(fmax(at, f64::from_bits(self.bits[0])));
        debug_assert!(end >= 0.0 && end.is_sign_positive());
        let (mut cb, mut cl) = (end.to_bits(), self.leaf[0]);
        let mut k = (self.leaves + cl as usize) >> 1;
        for _ in 0..self.levels {
            // SAFETY: k is a node on a leaf's path, below `leaves`, which
            // is at most FEW_UNITS.
            let (sb, sl) = unsafe { (*self.bits.get_unchecked(k), *self.leaf.get_unchecked(k)) };
            // The node's time goes on if it is the earlier.
            let up = sb < cb;
            let (ob, ol) = (if up { cb } else { sb }, if up { cl } else { sl });
            (cb, cl) = (if up { sb } else { cb }, if up { sl } else { cl });
            // SAFETY: as above.
            unsafe {
                *self.bits.get_unchecked_mut(k) = ob;
                *self.leaf.get_unchecked_mut(k) = ol;
            }
            k >>= 1;
        }
        (self.bits[0], self.leaf[0]) = (cb, cl);
        end
    }

    #[inline(always)]
    fn take_ordered(&mut self, at: f64, hold: impl FnOnce(f64) -> f64) -> f64 {
        let n = self.ring.len();
        debug_assert!(self.head < n);
        let r = self.ring.as_mut_ptr();
        // SAFETY: head, i and j are always below n = ring.len() (never 0).
        unsafe {
            let end = hold(fmax(at, *r.add(self.head)));
            // The earliest's slot becomes the last; it moves back past the
            // later times it does not reach.
            let mut i = self.head;
            *r.add(i) = end;
            self.head = if i + 1 == n { 0 } else { i + 1 };
            while i != self.head {
                let j = if i == 0 { n - 1 } else { i - 1 };
                if *r.add(j) <= end {
                    break;
                }
                *r.add(i) = *r.add(j);
                *r.add(j) = end;
                i = j;
            }
            end
        }
    }
}

/// The window's checkpoints (`CoreState::rob_q`): a ring of (position,
/// retire time, translation share), oldest first, whose front's position
/// and back's retire time are kept at hand, so that the usual case (none
/// to pop, none to push) reads no entry.
struct Checkpoints {
    /// A power of two long.
    ring: Vec<(u64, f64, f32)>,
    head: usize,
    len: usize,
    /// The front's position (u64::MAX when empty), the back's retire time
    /// (meaningless when empty).
    front_pos: u64,
    back_r: f64,
}

impl Checkpoints {
    fn new() -> Checkpoints {
        Checkpoints { ring: vec![(0, 0.0, 0.0); 64], head: 0, len: 0, front_pos: u64::MAX, back_r: 0.0 }
    }

    #[inline(always)]
    fn push_back(&mut self, e: (u64, f64, f32)) {
        if self.len == self.ring.len() {
            self.grow();
        }
        let mask = self.ring.len() - 1;
        self.ring[(self.head + self.len) & mask] = e;
        if self.len == 0 {
            self.front_pos = e.0;
        }
        self.len += 1;
        self.back_r = e.1;
    }

    /// The front's retire time and translation share, removed (there is
    /// one: `front_pos` is not u64::MAX).
    #[inline(always)]
    fn pop_front(&mut self) -> (f64, f32) {
        let mask = self.ring.len() - 1;
        let (_, r, x) = self.ring[self.head];
        self.head = (self.head + 1) & mask;
        self.len -= 1;
        self.front_pos = if self.len == 0 { u64::MAX } else { self.ring[self.head].0 };
        (r, x)
    }

    #[cold]
    fn grow(&mut self) {
        let n = self.ring.len();
        let mut ring = Vec::with_capacity(2 * n);
        ring.extend((0..n).map(|i| self.ring[(self.head + i) & (n - 1)]));
        ring.resize(2 * n, (0, 0.0, 0.0));
        self.ring = ring;
        self.head = 0;
    }
}

/// Recent stores whose data a load may wait for (`CoreState::stored`): a
/// direct-mapped table of 8-byte words, more than a store queue holds.
const STORED: usize = 512;

/// One CPU's core.
pub(crate) struct CoreState {
    inv_w: f64,
    rob: u64,
    mispredict: f64,
    parts: CoreParts,
    mem: MemCfg,
    /// Position of the next instruction to dispatch, and when it can.
    pos: u64,
    t: f64,
    /// When everything dispatched so far has completed (in-order retire),
    /// and the translation share of what set it.
    r: f64,
    r_x: f32,
    /// (position, retire time, translation share) after references and
    /// blocks, oldest first; those a window's length behind the next
    /// dispatch are popped into `rob_bound`.
    rob_q: Checkpoints,
    rob_bound: f64,
    rob_x: f32,
    /// When the load queue's and the store queue's oldest entries free
    /// (the last loads' retires, the last stores' drains).
    lq: Queue,
    sq: Queue,
    drain: f64,
    /// When each line-fill buffer and walker is free.
    mshr: Units,
    walker: Units,
    /// A walk is a trap (`Core::walk_traps`): dispatch waits for it.
    walk_traps: bool,
    /// A walk's reads from beyond the second level wait in a line-fill
    /// buffer, its walker free meanwhile (`Core::far_walk_reads_in_mshrs`).
    far_walk_reads: bool,
    /// When the prefetcher's stream delivers its next line, and when the
    /// memory interface is next free.
    stream: f64,
    chan: f64,
    /// When values are ready, by a compiled dependence's source
    /// (`block::FROM_REG`, `FROM_REF`): each register slot's, then each
    /// reference's of the current block.
    vals: Vec<f64>,
    /// The current block (an index into the timing's blocks), where it
    /// started, its side exits already passed.
    block: Option<u32>,
    base: u64,
    block_t0: f64,
    exits_done: usize,
    /// Scratch: the registers a block's end writes.
    out: Vec<(u8, f64)>,
    /// Recent stores by the word they wrote (physical address >> 3), with
    /// when their data was ready.
    stored: Box<[(u64, f64); STORED]>,
    /// The loop a synthetic workload runs (`Timing::set_loop`), and how
    /// far into an iteration its references are.
    pub(crate) looped: Option<u32>,
    loop_ref: usize,
    /// A free reference's value (for the next dependent one).
    last_load: f64,
    pending: Pending,
    pred: Predictor,
    acc: Stack,
    pub(crate) stats: CoreStats,
}

impl CoreState {
    pub fn new(c: &Core, mem: MemCfg, parts: CoreParts) -> CoreState {
        let big = |on: bool, n: u32| if on { n as usize } else { 1 << 20 };
        CoreState {
            inv_w: 1.0 / c.width,
            rob: if parts.window { c.rob as u64 } else { u64::MAX / 4 },
            mispredict: c.mispredict,
            parts,
            mem,
            pos: 0,
            t: 0.0,
            r: 0.0,
            r_x: 0.0,
            rob_q: Checkpoints::new(),
            rob_bound: 0.0,
            rob_x: 0.0,
            lq: Queue::new(if parts.window { c.load_queue } else { 1 }),
            sq: Queue::new(if parts.window { c.store_queue } else { 1 }),
            drain: 0.0,
            mshr: Units::new(big(parts.mshrs, c.mshrs).min(4096)),
            walker: Units::new(big(parts.mshrs, c.walkers).min(4096)),
            walk_traps: c.walk_traps && parts.mshrs,
            far_walk_reads: c.far_walk_reads_in_mshrs && !c.walk_traps,
            stream: 0.0,
            chan: 0.0,
            vals: vec![0.0; FROM_REF as usize],
            block: None,
            base: 0,
            block_t0: 0.0,
            exits_done: 0,
            out: Vec::new(),
            stored: Box::new([(u64::MAX, 0.0); STORED]),
            looped: None,
            loop_ref: 0,
            last_load: 0.0,
            pending: Pending::None,
            pred: Predictor::new(&c.predictor),
            acc: Stack::default(),
            stats: CoreStats::default(),
        }
    }

    /// The cycles the CPU has spent: its last retire or its next
    /// dispatch, whichever is later.
    pub fn time(&self) -> f64 {
        fmax(self.t, self.r)
    }

    /// Where they went: the stack so far, and what the last retire is
    /// past the dispatch clock put down to what held it.
    pub fn stack(&self) -> Stack {
        let mut s = self.acc;
        if self.r > self.t {
            let d = self.r - self.t;
            s.translation += d * self.r_x as f64;
            s.data += d * (1.0 - self.r_x as f64);
        }
        s
    }

    pub fn stats(&self) -> CoreStats {
        let mut s = self.stats;
        s.predictor = self.pred.stats;
        s
    }

    #[inline(always)]
    fn stall_to(&mut self, at: f64, why: Cause) {
        if at > self.t {
            let d = at - self.t;
            match why {
                Cause::Branch => self.acc.branch += d,
                Cause::Fetch => self.acc.fetch += d,
                Cause::Mem(x) => {
                    self.acc.translation += d * x as f64;
                    self.acc.data += d * (1.0 - x as f64);
                }
            }
            self.t = at;
        }
    }

    /// `n` instructions dispatched at the width, waiting on nothing.
    #[inline(always)]
    fn dispatch(&mut self, n: u64) {
        // (Through i64, one instruction: positions stay far below 2^63,
        // where both conversions are the same.)
        let w = (n as i64) as f64 * self.inv_w;
        self.t += w;
        self.acc.base += w;
        self.stats.instructions += n;
        self.pos += n;
    }

    /// Dispatches the instructions before position `p` (`t` is then when
    /// `p` dispatches), no earlier than the window allows.
    #[inline(always)]
    fn advance_to(&mut self, p: u64) {
        if p > self.pos {
            self.dispatch(p - self.pos);
            // The last of them waited for the window's oldest to retire.
            if let Some(limit) = (p - 1).checked_sub(self.rob) {
                // (The front's position is u64::MAX when there is none,
                // above any limit.)
                while self.rob_q.front_pos <= limit {
                    (self.rob_bound, self.rob_x) = self.rob_q.pop_front();
                }
                // Dispatching p - 1 needs the entry of p - 1 - rob free:
                // p dispatches a slot after that.
                self.stall_to(self.rob_bound + self.inv_w, Cause::Mem(self.rob_x));
            }
        }
    }

    /// Everything dispatched so far retires no earlier than `done`, of an
    /// access that issued at `issue` and was translated by `at` (the share
    /// of its time that translation took is what holds the window behind
    /// it on translation).
    #[inline(always)]
    fn completes(&mut self, done: f64, issue: f64, at: f64) {
        if done > self.r {
            self.r = done;
            self.r_x = if at > issue { ((at - issue) / (done - issue)) as f32 } else { 0.0 };
        }
    }

    /// Notes for the window that everything up to the current position
    /// retires no earlier than `r` (once a block, and after a reference
    /// outside blocks: the window is tracked a block at a time).
    #[inline(always)]
    fn checkpoint(&mut self) {
        if self.parts.window && (self.rob_q.len == 0 || self.rob_q.back_r < self.r) {
            self.rob_q.push_back((self.pos, self.r, self.r_x));
        }
    }

    /// When a reference issued at `issue` (its address ready) is
    /// translated: at once from the first-level TLB, else after the
    /// second level's lookup or a walk (which waits for a walker). A walk
    /// takes its walker once the second level's lookup has missed, as a
    /// page miss handler is engaged only by a miss in every TLB level
    /// (Intel's DTLB_LOAD_MISSES events count STLB hits apart from the
    /// walks that keep a PMH busy), and holds it to its end; or, where
    /// the core's far walk reads wait in line-fill buffers, for its part
    /// up to the second-level cache, the time its reads spent beyond it
    /// (returned, with the time the walker is done) left to `data`. A
    /// walk that traps to a software handler stops dispatch until it
    /// returns: the instructions after the reference are fetched again
    /// then.
    #[inline(always)]
    fn translate(&mut self, issue: f64, a: &RefTime) -> (f64, u32) {
        if a.xlat == 0 {
            (issue, 0)
        } else if a.walked {
            let lookup = self.mem.stlb.min(a.xlat);
            let far = if self.far_walk_reads { a.walk_far.min(a.xlat - lookup) } else { 0 };
            let done = self.walker.take(issue + lookup as f64, |s| s + (a.xlat - lookup - far) as f64);
            if self.walk_traps {
                self.stall_to(done, Cause::Mem(1.0));
            }
            (done, far)
        } else {
            (issue + a.xlat as f64, 0)
        }
    }

    /// When an access whose walker was done at `at`, with `far` cycles
    /// of its walk's reads still to go beyond the second level, is
    /// translated, and when its data is there. A first-level hit comes
    /// after its latency, a miss once a line-fill buffer takes it and its
    /// line arrives (from the prefetcher's stream, or from memory through
    /// the interface). Far walk reads hold a line-fill buffer from their
    /// start, and the access keeps it for its miss: one buffer a
    /// reference, as a miss slot that a walk and its miss share.
    #[inline(always)]
    fn data(&mut self, at: f64, far: u32, a: &RefTime) -> (f64, f64) {
        let data = a.data as f64;
        if far == 0 && !a.missed {
            return (at, at + data);
        }
        let mem = self.mem;
        let (stream, chan) = (&mut self.stream, &mut self.chan);
        let line = a.stream_line as f64;
        let far = far as f64;
        let mut xlated = at;
        let done = self.mshr.take(at, |s| {
            let s = s + far;
            if far > 0.0 {
                xlated = s;
            }
            if !a.missed {
                return s + data;
            }
            let mut d = s + data;
            if line > 0.0 {
                // The prefetcher's streams deliver their lines one line
                // time apart, into the second level ahead of the demand
                // where the demand is slower.
                d = fmax(*stream + line, s + mem.l2 as f64);
                *stream = d;
            } else if a.dram_lines > 0 && mem.chan_wb > 0.0 {
                d = fmax(d, *chan + mem.chan_read * a.dram_lines as f64);
                *chan = d;
            }
            if a.writebacks > 0 && mem.chan_wb > 0.0 {
                *chan = fmax(*chan, d - data) + mem.chan_wb * a.writebacks as f64;
            }
            d
        });
        (xlated, done)
    }

    /// The time a dependence list is ready: the latest of its sources
    /// plus the path from each, and no earlier than the instruction's
    /// dispatch plus the path from there.
    #[inline(always)]
    fn deps_ready(&self, b: &Block, span: Span, dispatch: f64) -> f64 {
        if !self.parts.deps {
            return dispatch;
        }
        let mut at = dispatch + span.dispatch as f64;
        for d in &b.deps[span.start as usize..span.end as usize] {
            at = fmax(at, self.vals[d.src as usize] + d.lat as f64);
        }
        at
    }

    /// A reference with its latencies. `write`: the access stores (the
    /// store of a modify comes as its own reference, at the same place).
    #[inline(never)]
    pub fn reference(&mut self, blocks: &[std::sync::Arc<Block>], place: RefPlace, a: &RefTime, write: bool, pa: u64) {
        self.reference_inline(blocks, place, a, write, pa)
    }

    /// `reference`, inlined into the batch's loop.
    #[inline(always)]
    pub fn reference_inline(&mut self, blocks: &[std::sync::Arc<Block>], place: RefPlace, a: &RefTime, write: bool, pa: u64) {
        // A place in no block (none entered, or past its references) is
        // a free reference's, not dependent.
        let in_block = match place {
            RefPlace::Block(i) => self.current().and_then(|bi| {
                let b = &blocks[bi as usize];
                (b.refs.len() > i as usize).then_some((b, i as usize))
            }),
            RefPlace::Free { .. } => None,
        };
        match in_block {
            Some((b, i)) => self.block_reference(b, i, a, write, pa),
            None => self.free_reference(matches!(place, RefPlace::Free { dependent: true }), a, write, pa),
        }
    }

    /// The next reference of a synthetic loop (`loop_place`'s), or a free
    /// reference where the loop has none: `reference_inline` with the
    /// block at hand.
    #[inline(always)]
    pub fn loop_reference(&mut self, blocks: &[std::sync::Arc<Block>], a: &RefTime, write: bool, pa: u64) {
        match self.loop_next(blocks) {
            Some((b, i)) => self.block_reference(b, i, a, write, pa),
            None => self.free_reference(false, a, write, pa),
        }
    }

    /// `loop_reference` where the loop is block `b` (index `l`), a
    /// straight loop with no side exits and at least one reference: the
    /// iteration's next reference, the next iteration entered after its
    /// last.
    #[inline(always)]
    pub fn straight_loop_reference(&mut self, blocks: &[std::sync::Arc<Block>], l: u32, b: &Block, a: &RefTime, write: bool, pa: u64) {
        debug_assert!(self.looped == Some(l) && b.straight_loop && b.exits.is_empty());
        let i = self.loop_index(blocks, l, b);
        self.exits_passed_reference(b, i, a, write, pa);
    }

    /// Reference `i` of the current block `b`.
    #[inline(always)]
    fn block_reference(&mut self, b: &Block, i: usize, a: &RefTime, write: bool, pa: u64) {
        self.pass_exits(b, b.refs[i].insn);
        self.exits_passed_reference(b, i, a, write, pa);
    }

    /// `block_reference` once the side exits before it are passed.
    #[inline(always)]
    fn exits_passed_reference(&mut self, b: &Block, i: usize, a: &RefTime, write: bool, pa: u64) {
        let r = &b.refs[i];
        self.advance_to(self.base + r.insn as u64);
        let d = self.t;
        let addr = self.deps_ready(b, r.addr, d);
        let data = if write { self.deps_ready(b, r.data, d) } else { d };
        self.access(addr, data, Some(i), a, write, pa);
    }

    /// A reference in no block: one instruction, its address ready at
    /// dispatch or, if `dependent`, when the previous load's value is.
    #[inline(always)]
    pub(crate) fn free_reference(&mut self, dependent: bool, a: &RefTime, write: bool, pa: u64) {
        let dep = if dependent && self.parts.deps { self.last_load } else { 0.0 };
        self.access(fmax(self.t, dep), self.t, None, a, write, pa);
    }

    /// The access of a reference whose address is ready at `addr_ready`
    /// (and a store's data at `data_ready`): reference `idx` of the
    /// current block, or a free reference (None).
    #[inline(always)]
    fn access(&mut self, addr_ready: f64, data_ready: f64, idx: Option<usize>, a: &RefTime, write: bool, pa: u64) {
        if write {
            if self.parts.window {
                self.stall_to(self.sq.oldest(), Cause::Mem(0.0));
            }
            let issue = fmax(addr_ready, self.t);
            let (walked, far) = self.translate(issue, a);
            // The line is owned once its fill (if it missed) is done.
            let (addressed, owned) = self.data(walked, far, a);
            self.completes(fmax(addressed, data_ready), issue, addressed);
            self.drain = fmax(fmax(self.drain, self.r), owned);
            self.sq.push(self.drain);
            // A later load of the word reads this store's data.
            let w = pa >> 3;
            self.stored[(w as usize) & (STORED - 1)] = (w, fmax(data_ready, addressed));
        } else {
            if self.parts.window {
                self.stall_to(self.lq.oldest(), Cause::Mem(0.0));
            }
            let issue = fmax(addr_ready, self.t);
            let (walked, far) = self.translate(issue, a);
            let (at, mut done) = self.data(walked, far, a);
            // A load of a word a recent store wrote waits for that store's
            // data (forwarded from the store queue, or read from the cache
            // after the store): a dependence through memory.
            let w = pa >> 3;
            let (sw, ready) = self.stored[(w as usize) & (STORED - 1)];
            if sw == w && self.parts.deps {
                done = fmax(done, ready + self.mem.l1 as f64);
            }
            self.completes(done, issue, at);
            self.lq.push(self.r);
            match idx {
                Some(i) => {
                    if let Some(v) = self.vals.get_mut(FROM_REF as usize + i) {
                        *v = done;
                    }
                }
                None => self.last_load = done,
            }
        }
        if idx.is_none() {
            // A free reference is its own instruction.
            self.checkpoint();
            let p = self.pos;
            self.advance_to(p + 1);
        }
    }

    /// The block a reference belongs to: the one entered, or the loop's
    /// (entered again at each iteration's first reference).
    #[inline(always)]
    fn current(&self) -> Option<u32> {
        self.block
    }

    /// The next reference of a synthetic loop: its place, entering the
    /// next iteration where the last one's references are done.
    #[inline(always)]
    pub fn loop_place(&mut self, blocks: &[std::sync::Arc<Block>]) -> Option<RefPlace> {
        self.loop_next(blocks).map(|(_, i)| RefPlace::Block(i as u16))
    }

    /// `loop_place`'s reference: the loop's block (then the current one)
    /// and the reference's index in it.
    #[inline(always)]
    fn loop_next<'b>(&mut self, blocks: &'b [std::sync::Arc<Block>]) -> Option<(&'b Block, usize)> {
        let l = self.looped?;
        let b = &*blocks[l as usize];
        if b.refs.is_empty() {
            return None;
        }
        Some((b, self.loop_index(blocks, l, b)))
    }

    /// The index in the loop's block `b` (index `l`, with references) of
    /// its next reference, starting an iteration first where the last
    /// one's references are done (the current straight loop's next, inline).
    #[inline(always)]
    fn loop_index(&mut self, blocks: &[std::sync::Arc<Block>], l: u32, b: &Block) -> usize {
        if self.block != Some(l) {
            self.enter_loop(blocks, l);
        } else if self.loop_ref == 0 {
            if b.straight_loop {
                self.next_iteration(b);
            } else {
                self.enter_loop(blocks, l);
            }
        }
        // After the iteration's last reference the next enters again.
        let i = self.loop_ref;
        self.loop_ref = if i + 1 == b.refs.len() { 0 } else { i + 1 };
        i
    }

    /// The loop's block `l` starts an iteration entered as the stream's
    /// next block.
    #[inline(never)]
    fn enter_loop(&mut self, blocks: &[std::sync::Arc<Block>], l: u32) {
        self.enter(blocks, l);
        self.loop_ref = 0;
    }

    /// `finish` and `enter` again of the current block, a loop's iteration
    /// with no side exits, no inner calls and its back edge at the end:
    /// all of its instructions dispatch, its registers are written, and
    /// the next iteration starts (no transfer pending, the block's value
    /// times already in place).
    #[inline(always)]
    fn next_iteration(&mut self, b: &Block) {
        debug_assert!(b.straight_loop && matches!(self.pending, Pending::None));
        self.advance_to(self.base + b.insns as u64);
        self.write_registers(b, 0);
        self.checkpoint();
        self.base = self.pos;
        self.block_t0 = self.t;
        self.exits_done = 0;
        self.stats.blocks += 1;
        self.other_accesses(b);
    }

    /// Side exits of the current block before instruction `insn` were not
    /// taken.
    #[inline(always)]
    fn pass_exits(&mut self, b: &Block, insn: u32) {
        while let Some(e) = b.exits.get(self.exits_done).copied() {
            if e.insn >= insn {
                break;
            }
            self.exits_done += 1;
            if e.branch {
                self.branch(b, e.pc, e.insn, e.cond, false);
            }
        }
    }

    /// The conditional branch at `insn` of block `b` went `taken`; on a
    /// misprediction dispatch resumes once it resolves and the front end
    /// refills.
    fn branch(&mut self, b: &Block, pc: u64, insn: u32, cond: Span, taken: bool) {
        let missed = self.pred.conditional(pc, taken);
        self.advance_to(self.base + insn as u64 + 1);
        if missed && self.parts.branches {
            let d = self.t - self.inv_w;
            let resolve = self.deps_ready(b, cond, d);
            self.stall_to(resolve + self.mispredict, Cause::Branch);
        }
    }

    /// The stream enters block `bi`: the transfer that led here is checked
    /// against the predictor, and the block's state starts.
    pub fn enter(&mut self, blocks: &[std::sync::Arc<Block>], bi: u32) {
        self.finish(blocks, None);
        let b = &blocks[bi as usize];
        if let Some(resolve) = self.check_transfer(b) {
            if self.parts.branches {
                self.stall_to(resolve + self.mispredict, Cause::Branch);
            }
        }
        self.begin_block(bi);
        // Every reference's value is set before a later one reads it (a
        // guarded one that did nothing leaves an older, earlier time).
        if self.vals.len() < FROM_REF as usize + b.refs.len() {
            self.vals.resize(FROM_REF as usize + b.refs.len(), 0.0);
        }
        self.other_accesses(b);
    }

    /// The pending transfer (a return, an indirect jump or call) that
    /// reached block `b`, checked against the predictor: when it
    /// resolves, if it was mispredicted.
    #[inline(always)]
    fn check_transfer(&mut self, b: &Block) -> Option<f64> {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => None,
            Pending::Ret { resolve } => self.pred.ret(b.pc).then_some(resolve),
            Pending::Indirect { pc, resolve } => self.pred.indirect(pc, b.pc).then_some(resolve),
        }
    }

    /// Block `bi` is current from here.
    #[inline(always)]
    fn begin_block(&mut self, bi: u32) {
        self.block = Some(bi);
        self.base = self.pos;
        self.block_t0 = self.t;
        self.exits_done = 0;
        self.stats.blocks += 1;
    }

    /// The loads and stores of block `b` that the stream leaves out take
    /// queue entries too, at its entry.
    #[inline(always)]
    fn other_accesses(&mut self, b: &Block) {
        if self.parts.window && b.other_loads + b.other_stores > 0 {
            for _ in 0..b.other_loads {
                self.stall_to(self.lq.oldest(), Cause::Mem(0.0));
                self.lq.push(fmax(self.r, self.t + self.mem.l1 as f64));
            }
            for _ in 0..b.other_stores {
                self.stall_to(self.sq.oldest(), Cause::Mem(0.0));
                self.drain = fmax(self.drain, self.r);
                self.sq.push(self.drain);
            }
        }
    }

    /// The stream leaves the current block by side exit `k` (taken), or
    /// by its end (None): the exits before were not taken, the registers
    /// it wrote by then are ready when their sources are, and a transfer
    /// whose target the next block tells is left pending.
    pub fn finish(&mut self, blocks: &[std::sync::Arc<Block>], k: Option<usize>) {
        let Some(bi) = self.block.take() else { return };
        let b = &blocks[bi as usize];
        let exits = k.unwrap_or(b.exits.len()).min(b.exits.len());
        let end_insn = b.insns_to(exits);
        // Not-taken exits before the one taken (or the end).
        while self.exits_done < exits {
            let e = b.exits[self.exits_done];
            self.exits_done += 1;
            if e.branch {
                self.branch(b, e.pc, e.insn, e.cond, false);
            }
        }
        if k.is_some() && exits < b.exits.len() && b.exits[exits].branch {
            let e = b.exits[exits];
            self.branch(b, e.pc, e.insn, e.cond, true);
        }
        self.advance_to(self.base + end_insn as u64);
        // Calls followed within the block push their return addresses.
        for &(insn, ret) in &b.calls {
            if insn < end_insn {
                self.pred.call(ret);
            }
        }
        let end_dispatch = self.t - self.inv_w;
        self.write_registers(b, exits);
        self.checkpoint();
        if k.is_none() {
            self.end_transfer(b, |c| c.deps_ready(b, b.end_deps, end_dispatch));
        }
    }

    /// The transfer that ends block `b`: a call's return address pushed,
    /// and a return's or an indirect transfer's target left for the next
    /// block to check, resolved at `resolve`'s time.
    #[inline(always)]
    fn end_transfer(&mut self, b: &Block, resolve: impl FnOnce(&Self) -> f64) {
        match b.end {
            crate::block::End::Jump | crate::block::End::Loop => {}
            crate::block::End::Call { ret, indirect } => {
                self.pred.call(ret);
                if indirect {
                    self.pending = Pending::Indirect { pc: b.end_pc, resolve: resolve(self) };
                }
            }
            crate::block::End::Ret => self.pending = Pending::Ret { resolve: resolve(self) },
            crate::block::End::Indirect => self.pending = Pending::Indirect { pc: b.end_pc, resolve: resolve(self) },
        }
    }

    /// The registers block `b` writes before side exit `exits` (or its
    /// end), each ready when its sources are (a block that writes none
    /// completes nothing more: retire times are never below 0).
    #[inline(always)]
    fn write_registers(&mut self, b: &Block, exits: usize) {
        if b.puts.is_empty() {
            return;
        }
        // Where no register is read after another of the block's writes
        // set it (`Block::puts_in_place`), each is set as it is computed;
        // else all are computed from the entry values first.
        let in_place = b.puts_in_place;
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let mut latest = 0.0f64;
        for p in &b.puts {
            if p.exits as usize > exits {
                break;
            }
            // Its instruction dispatched no earlier than its place at
            // the width from the block's start.
            let dispatch = self.block_t0 + p.insn as f64 * self.inv_w;
            let v = self.deps_ready(b, p.deps, dispatch);
            latest = fmax(latest, v);
            if in_place {
                self.vals[(FROM_REG + p.slot as u16) as usize] = v;
            } else {
                out.push((p.slot, v));
            }
        }
        for &(s, v) in &out {
            self.vals[(FROM_REG + s as u16) as usize] = v;
        }
        self.out = out;
        self.completes(latest, 0.0, 0.0);
    }

    /// An instruction fetch of a code line with its translation and
    /// latency: one that missed holds dispatch for the time beyond a hit.
    pub fn fetch(&mut self, a: &RefTime) {
        let extra = (a.xlat + a.data.saturating_sub(self.mem.l1i)) as f64;
        if a.data > self.mem.l1i {
            self.stats.fetch_misses += 1;
        }
        if extra > 0.0 && self.parts.fetch {
            let at = self.t + extra;
            self.stall_to(at, Cause::Fetch);
        }
    }

    /// `n` instructions with no references the stream describes.
    pub fn instructions(&mut self, blocks: &[std::sync::Arc<Block>], n: u64) {
        self.finish(blocks, None);
        let p = self.pos + n;
        self.advance_to(p);
    }

    /// A mark of functional warming (`Timing::warm_pass`): the blocks'
    /// branches, calls and returns go through the predictor as `enter`
    /// and `finish` take them, and their instructions are counted and
    /// dispatched at the width, as `instructions` does for a stretch the
    /// stream only counts; nothing waits on a reference, a dependence, a
    /// misprediction or the window.
    pub fn warm(&mut self, blocks: &[std::sync::Arc<Block>], what: crate::timing::MarkKind) {
        use crate::timing::MarkKind;
        match what {
            MarkKind::Enter(bi) => {
                self.warm_finish(blocks, None);
                self.check_transfer(&blocks[bi as usize]);
                self.begin_block(bi);
            }
            MarkKind::Exit(k) => self.warm_finish(blocks, Some(k as usize)),
            MarkKind::Instructions(n) => {
                self.warm_finish(blocks, None);
                self.dispatch(n);
            }
        }
    }

    /// `finish` for functional warming (`warm`).
    fn warm_finish(&mut self, blocks: &[std::sync::Arc<Block>], k: Option<usize>) {
        let Some(bi) = self.block.take() else { return };
        let b = &blocks[bi as usize];
        let exits = k.unwrap_or(b.exits.len()).min(b.exits.len());
        let end_insn = b.insns_to(exits);
        for e in &b.exits[self.exits_done.min(exits)..exits] {
            if e.branch {
                self.pred.conditional(e.pc, false);
            }
        }
        if k.is_some() && exits < b.exits.len() && b.exits[exits].branch {
            self.pred.conditional(b.exits[exits].pc, true);
        }
        for &(insn, ret) in &b.calls {
            if insn < end_insn {
                self.pred.call(ret);
            }
        }
        let done = self.pos - self.base;
        self.dispatch((end_insn as u64).saturating_sub(done));
        if k.is_none() {
            self.end_transfer(b, |_| 0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{BlockSpec, Dep, RefKind, Src, ALU, NONE};
    use splab_hw::profile::Profile;

    fn core(p: &Profile) -> CoreState {
        let mem = MemCfg { l1: p.cache.l1d.latency, l1i: p.cache.l1i.latency, l2: p.cache.l2.latency, stlb: p.costs.stlb_hit, chan_read: 0.0, chan_wb: 0.0 };
        CoreState::new(&p.core, mem, CoreParts::default())
    }

    proptest::proptest! {
        /// A few units (merged into) and many (moved back through) free
        /// the same times as taking the least of a plain list each time.
        #[test]
        fn units_take_the_earliest_as_a_list_would(n in 1usize..40, takes in proptest::collection::vec((0u32..500, 0u32..400), 1..300)) {
            let mut u = Units::new(n);
            let mut list = vec![0.0f64; n];
            for (at, hold) in takes {
                let (at, hold) = (at as f64, hold as f64);
                let got = u.take(at, |s| s + hold);
                let (i, &least) = list.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).unwrap();
                let want = at.max(least) + hold;
                list[i] = want;
                proptest::prop_assert_eq!(got, want);
            }
        }
    }

    fn miss(lat: u32) -> RefTime {
        RefTime { data: lat, missed: true, ..RefTime::default() }
    }

    /// A chase (each load's address the last one's value) pays every
    /// latency in full; the same loads independent overlap up to the
    /// line-fill buffers.
    #[test]
    fn a_chase_waits_and_independent_misses_overlap() {
        let p = Profile::load("sapphire-rapids").unwrap();
        let mut chase = BlockSpec::looped(0x1000, 1);
        let l = chase.reference(0, RefKind::Load, &[Dep::new(Src::Reg(0), NONE)], &[]);
        chase.put(0, 0, &[Dep::new(Src::Ref(l), NONE)]);
        let mut indep = BlockSpec::looped(0x2000, 4);
        indep.reference(0, RefKind::Load, &[Dep::new(Src::Reg(0), ALU)], &[]);
        indep.put(0, 1, &[Dep::new(Src::Reg(0), ALU)]);
        for (spec, want) in [(chase, 300.0), (indep, 300.0 / p.core.mshrs as f64)] {
            let blocks = vec![std::sync::Arc::new(Block::compile(&spec, &p.core.latency).unwrap())];
            let mut c = core(&p);
            c.looped = Some(0);
            for _ in 0..10000 {
                let place = c.loop_place(&blocks).unwrap();
                c.reference(&blocks, place, &miss(300), false, 0);
            }
            c.finish(&blocks, None);
            let per = c.time() / 10000.0;
            assert!((per - want).abs() < 0.05 * want, "{per} vs {want}");
            let s = c.stack();
            assert!((s.total() - c.time()).abs() < 1e-6 * c.time(), "{s:?} {}", c.time());
        }
    }

    /// Independent loads, each a walk of 40 cycles up to the second
    /// level and 200 beyond it, then a miss of 300: walkers held to the
    /// walk's end bound them at 240 / walkers a load; walkers free while
    /// the walk reads far leave them to the line-fill buffers, each held
    /// for the far reads and the miss, (200 + 300) / mshrs a load.
    #[test]
    fn far_walk_reads_hold_a_line_fill_buffer_and_free_the_walker() {
        let mut p = Profile::load("sapphire-rapids").unwrap();
        let mut indep = BlockSpec::looped(0x2000, 4);
        indep.reference(0, RefKind::Load, &[Dep::new(Src::Reg(0), ALU)], &[]);
        indep.put(0, 1, &[Dep::new(Src::Reg(0), ALU)]);
        let blocks = vec![std::sync::Arc::new(Block::compile(&indep, &p.core.latency).unwrap())];
        let stlb = p.costs.stlb_hit;
        let a = RefTime { xlat: stlb + 240, walked: true, walk_far: 200, data: 300, missed: true, ..RefTime::default() };
        for free in [false, true] {
            p.core.far_walk_reads_in_mshrs = free;
            let mut c = core(&p);
            c.looped = Some(0);
            for _ in 0..10000 {
                let place = c.loop_place(&blocks).unwrap();
                c.reference(&blocks, place, &a, false, 0);
            }
            c.finish(&blocks, None);
            let per = c.time() / 10000.0;
            let want = if free { 500.0 / p.core.mshrs as f64 } else { 240.0 / p.core.walkers as f64 };
            assert!((per - want).abs() < 0.05 * want, "free {free}: {per} vs {want}");
        }
    }

    /// A straight loop goes from one iteration to the next without an
    /// entry of its block: the same times, to the bit, as the same block
    /// entered each time (ending in a jump, which predicts the same).
    #[test]
    fn a_straight_loop_times_as_its_block_entered_each_time() {
        let p = Profile::load("sapphire-rapids").unwrap();
        let run = |end: crate::block::End| {
            let mut b = BlockSpec::looped(0x5000, 9);
            let addr = Dep::new(Src::Dispatch, [3, 0, 0, 0, 0, 0]);
            let l = b.reference(2, RefKind::Load, &[addr, Dep::new(Src::Reg(1), ALU), Dep::new(Src::Dispatch, ALU)], &[]);
            b.reference(2, RefKind::Store, &[addr], &[Dep::new(Src::Ref(l), ALU)]);
            b.put(1, 6, &[Dep::new(Src::Reg(1), ALU), Dep::new(Src::Ref(l), NONE)]);
            b.other_loads = 1;
            b.other_stores = 1;
            b.end = end;
            let blocks = vec![std::sync::Arc::new(Block::compile(&b, &p.core.latency).unwrap())];
            assert_eq!(blocks[0].straight_loop, end == crate::block::End::Loop);
            let mut c = core(&p);
            c.looped = Some(0);
            for k in 0..5000u64 {
                let lat = if k % 7 == 0 { miss(300) } else { RefTime { data: p.cache.l1d.latency, ..RefTime::default() } };
                c.loop_reference(&blocks, &lat, false, k * 64);
                c.loop_reference(&blocks, &lat, true, k * 64);
            }
            c.finish(&blocks, None);
            (c.time().to_bits(), c.stack(), c.stats())
        };
        assert_eq!(run(crate::block::End::Loop), run(crate::block::End::Jump));
    }

    /// Instructions alone run at the width; a dependent chain of
    /// multiplies through a register runs at its latency.
    #[test]
    fn width_and_chains() {
        let p = Profile::load("sapphire-rapids").unwrap();
        let mut c = core(&p);
        c.instructions(&[], 6000);
        assert!((c.time() - 6000.0 / p.core.width).abs() < 1.0, "{}", c.time());
        let mut mul = BlockSpec::looped(0x3000, 1);
        mul.put(1, 0, &[Dep::new(Src::Reg(1), [0, 1, 0, 0, 0, 0])]);
        let blocks = vec![std::sync::Arc::new(Block::compile(&mul, &p.core.latency).unwrap())];
        let mut c = core(&p);
        for _ in 0..1000 {
            c.enter(&blocks, 0);
        }
        c.finish(&blocks, None);
        assert!((c.time() / 1000.0 - p.core.latency.mul).abs() < 0.1, "{}", c.time());
    }

    /// A branch that goes either way at random costs about half a
    /// misprediction each time; the same branch always taken costs
    /// nothing once learnt.
    #[test]
    fn random_branches_cost_mispredictions() {
        let p = Profile::load("sapphire-rapids").unwrap();
        let mut b = BlockSpec::looped(0x4000, 4);
        b.exits.push(crate::block::ExitSpec { insn: 2, pc: 0x4008, cond: vec![], branch: true });
        b.end = crate::block::End::Jump;
        let blocks = vec![std::sync::Arc::new(Block::compile(&b, &p.core.latency).unwrap())];
        let run = |random: bool| {
            let mut c = core(&p);
            let mut x = 88172645463325252u64;
            for _ in 0..20000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.enter(&blocks, 0);
                let taken = if random { x & 1 == 1 } else { true };
                c.finish(&blocks, if taken { Some(0) } else { None });
            }
            c.time() / 20000.0
        };
        let (r, s) = (run(true), run(false));
        assert!(s < 1.0, "{s}");
        assert!((r - s - p.core.mispredict / 2.0).abs() < 0.15 * p.core.mispredict, "{r} {s}");
    }

    #[test]
    fn warming_counts_and_predicts_as_timing_does_and_takes_no_time_but_the_width() {
        // A block with a conditional side exit, ending in a call, and a
        // second ending in a return: random exits, calls and returns
        // through both paths.
        use crate::timing::MarkKind;
        let p = Profile::load("sapphire-rapids").unwrap();
        let mut a = BlockSpec::looped(0x4000, 6);
        a.exits.push(crate::block::ExitSpec { insn: 2, pc: 0x4008, cond: vec![], branch: true });
        a.end = crate::block::End::Call { ret: 0x4018, indirect: false };
        let mut r = BlockSpec::looped(0x5000, 3);
        r.end = crate::block::End::Ret;
        let blocks: Vec<_> = [a, r].iter().map(|b| std::sync::Arc::new(Block::compile(b, &p.core.latency).unwrap())).collect();
        let mut x = 88172645463325252u64;
        let mut marks = Vec::new();
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            marks.push(MarkKind::Enter(0));
            if x & 1 == 1 {
                marks.push(MarkKind::Exit(0));
            } else {
                marks.push(MarkKind::Enter(1));
            }
            if x & 6 == 0 {
                marks.push(MarkKind::Instructions(7));
            }
        }
        let (mut timed, mut warmed) = (core(&p), core(&p));
        for &m in &marks {
            crate::timing::apply(&mut timed, &blocks, m);
            warmed.warm(&blocks, m);
        }
        timed.finish(&blocks, None);
        warmed.warm(&blocks, MarkKind::Instructions(0));
        assert_eq!(warmed.stats.instructions, timed.stats.instructions);
        assert_eq!(warmed.stats.blocks, timed.stats.blocks);
        assert_eq!(warmed.pred.stats, timed.pred.stats);
        assert!(timed.pred.stats.mispredicted() > 0 && timed.pred.stats.returns > 0, "{:?}", timed.pred.stats);
        // Warming's time is its instructions at the width.
        let at_width = warmed.stats.instructions as f64 / p.core.width;
        assert!((warmed.time() - at_width).abs() < 1e-6 * at_width, "{} against {at_width}", warmed.time());
        assert!(timed.time() > warmed.time());
    }
}
