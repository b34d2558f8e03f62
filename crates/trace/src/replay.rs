//! The replay workload (`splab sim trace:FILE`): one process on CPU 0 makes
//! the trace's loads and stores on the simulated system, in order.
//!
//! Address space: the header's layout is mapped before the timed part; the
//! trace's map and unmap events are replayed where they occur (mmap with
//! MAP_FIXED, munmap), timed like the program's own syscalls. Every region
//! is mapped private, anonymous, readable, writable and executable (the
//! core fetches code from any of them), file mappings included (the
//! trace has no file contents; a page of either kind costs the same fault
//! and zeroing here); a heap region (brk) is mapped to the end of its 2 MB
//! block (`Run::map_region` says why). Memory the trace touches outside any mapped region
//! (a trace without layout, the stack and image under valgrind) is mapped
//! when first touched: the free parts of the 2 MB-aligned block around the
//! address, as an anonymous mmap would place a large mapping, so touched
//! pages that fill a block can be promoted; these mmap calls are not timed.
//!
//! References: loads and stores as they are; a modify is a load then a
//! store; recorded instruction fetches are counted and skipped; a
//! reference that crosses into the next line of the caches (the profile's
//! line size) also touches that line, an access of the same kind on each
//! line it covers, as a split load or store reads or writes both lines
//! (and, across a page, translates both pages). Where the trace has splabtrace's
//! instruction stream (its blocks' tables and their entries and exits,
//! `block.rs`), each table becomes a block of the system's core model
//! (`System::define_block`), each entry a mark before the block's
//! references and the fetches of its code lines (through the instruction
//! TLB and cache; a line fetched by the block just before is not fetched
//! again), and each data reference gets its place in its block; without
//! them, each reference is an instruction of its own. They go to the
//! system in batches through `System::stream_pieces`, which gives the
//! same results as one access at a time, however the batches are cut (a
//! policy's background work, khugepaged's, is done at the start of each
//! batch of a flush, a point the trace alone decides).

use crate::fold::Fold;
use crate::{open, Event, Format, Kind, Opened, Origin, Ref, Region, Source, Step, TraceError};
use serde::Serialize;
use splab_sim::timing::{Mark, MarkKind, NO_PLACE};
use splab_sim::{Op, System};
use splab_vm::map::{Backing, MmapReq};
use splab_sim::AccessError;
use splab_vm::{prot, FaultError, Pid};
use splab_workloads::{Figure, Workload, WorkloadResult};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The traced program's page size (x86-64 and arm64 Linux hosts), for the
/// count of references that crossed one (`page_crossing`).
const HOST_PAGE: u64 = 4096;
const BLOCK: u64 = 2 << 20;
/// The code lines the tool's block tables name: 64-byte granules.
const CODE_GRANULE: u64 = 64;
/// References read and replayed per batch.
pub const BATCH: usize = 4096;
/// Entries of the cache of blocks known to be mapped (a power of two).
const READY: usize = 1024;

/// What a replay did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReplayStats {
    pub refs: u64,
    pub instr_skipped: u64,
    pub loads: u64,
    pub stores: u64,
    pub modifies: u64,
    /// References that crossed into the next line of the caches and
    /// touched it too (a load or store is made on each line it covers).
    pub line_crossing: u64,
    /// Of those, the references that crossed into the next 4 KB page.
    pub page_crossing: u64,
    /// Loads and stores made on the system.
    pub accesses: u64,
    pub header_regions: u64,
    pub maps: u64,
    pub unmaps: u64,
    /// 2 MB blocks mapped because the trace touched them outside its layout.
    pub inferred_blocks: u64,
    /// mmap calls those took (one per free range of a block).
    pub inferred_mmaps: u64,
    /// Simulated cycles of those calls, left out of the timed part.
    pub inferred_cycles: f64,
    /// Blocks of the instruction stream defined and entered, and the
    /// instruction fetches of their code lines made.
    pub blocks: u64,
    pub block_entries: u64,
    pub fetches: u64,
}

pub struct Replay {
    path: PathBuf,
    format: Option<Format>,
    estimate: u64,
    bad_input: bool,
    pub cpu: usize,
    pub stats: ReplayStats,
}

impl Replay {
    /// Opens the trace to check its header now, so that a missing or
    /// malformed file is reported before the system is built.
    pub fn new(path: &Path, format: Option<Format>) -> Result<Replay, String> {
        let src = open(path, format).map_err(|e| format!("trace {}: {e}", path.display()))?;
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        // For the progress bar only: the header's count, or a guess from
        // the size of the file.
        let estimate = src.ref_count().unwrap_or(match src.format() {
            Format::Lackey => bytes / 16,
            Format::ChampSim => bytes / 24,
            Format::Splab => bytes / 3,
        });
        Ok(Replay { path: path.to_path_buf(), format, estimate, bad_input: false, cpu: 0, stats: ReplayStats::default() })
    }
}

/// The ranges this replay has mapped, disjoint, keyed by start.
#[derive(Default, Clone)]
struct Mapped {
    ranges: BTreeMap<u64, u64>,
}

impl Mapped {
    fn add(&mut self, mut start: u64, mut end: u64) {
        // Absorb every range that overlaps or touches [start, end).
        let keys: Vec<u64> = self.ranges.range(..=end).filter(|(_, &e)| e >= start).map(|(&s, _)| s).collect();
        for k in keys {
            let e = self.ranges.remove(&k).unwrap();
            start = start.min(k);
            end = end.max(e);
        }
        self.ranges.insert(start, end);
    }

    fn remove(&mut self, start: u64, end: u64) {
        let keys: Vec<u64> = self.ranges.range(..end).filter(|(_, &e)| e > start).map(|(&s, _)| s).collect();
        for k in keys {
            let e = self.ranges.remove(&k).unwrap();
            if k < start {
                self.ranges.insert(k, start);
            }
            if e > end {
                self.ranges.insert(end, e);
            }
        }
    }

    /// The parts of [start, end) not mapped.
    fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut at = start;
        if let Some((_, &e)) = self.ranges.range(..=start).next_back() {
            at = at.max(e);
        }
        for (&s, &e) in self.ranges.range(start..end) {
            if s > at {
                v.push((at, s));
            }
            at = at.max(e);
        }
        if at < end {
            v.push((at, end));
        }
        v
    }
}

/// How a batch goes to the system. `access_pieces` gives the same results
/// for any split of the references into batches; what differs is the host
/// time. Whole batches (thousands of accesses) go through the system's
/// timing thread, which overlaps the cache model of one batch with the
/// translation of the next: fastest when a second core is free. Pieces
/// below the system's threshold for that thread (512) are timed on this
/// thread: fastest when the host is busy, where two threads that hand
/// batches to each other wait on each other's time slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    OneThread,
    TwoThreads,
}

/// Accesses a batch is cut into for `Mode::OneThread`.
const ONE_THREAD_PIECE: usize = 256;

/// Picks the faster mode from the host time of recent batches, trying the
/// other one now and then since the host's load changes.
struct Pacer {
    /// Seconds per access, smoothed, per mode; 0 until measured.
    cost: [f64; 2],
    batches: u64,
    /// Whether the batch now running is one of the first of a stretch in
    /// the other mode, whose time is not recorded: it pays for the switch
    /// (waking the waiting timing thread, refilling the caches).
    settling: bool,
}

/// Of every this many batches (about a million references), the first
/// `TRY` run in the mode not picked, the first `SETTLE` of them unrecorded.
const PERIOD: u64 = 256;
const TRY: u64 = 8;
const SETTLE: u64 = 2;

impl Pacer {
    fn new() -> Pacer {
        Pacer { cost: [0.0; 2], batches: 0, settling: false }
    }

    fn pick(&mut self) -> Mode {
        self.batches += 1;
        let [one, two] = self.cost;
        let best = if one == 0.0 || (two != 0.0 && one <= two) { Mode::OneThread } else { Mode::TwoThreads };
        let at = self.batches % PERIOD;
        self.settling = at < SETTLE;
        if at < TRY {
            match best {
                Mode::OneThread => Mode::TwoThreads,
                Mode::TwoThreads => Mode::OneThread,
            }
        } else {
            best
        }
    }

    fn record(&mut self, mode: Mode, seconds: f64, accesses: usize) {
        if accesses < 1024 || self.settling {
            return;
        }
        let c = &mut self.cost[mode as usize];
        let x = seconds / accesses as f64;
        *c = if *c == 0.0 { x } else { 0.75 * *c + 0.25 * x };
    }
}

/// An error of the run: the trace's fault (`input`) or the system's.
pub(crate) struct Failure {
    pub(crate) msg: String,
    pub(crate) input: bool,
}

impl From<TraceError> for Failure {
    fn from(e: TraceError) -> Failure {
        Failure { msg: e.to_string(), input: true }
    }
}

/// The state of one process of a run: its simulated pid and CPU, what it
/// has mapped, and the accesses not yet made. Shared by the replay and the
/// online run (`online/procs.rs`, one per real process).
pub(crate) struct Run {
    pub(crate) pid: Pid,
    pub(crate) cpu: usize,
    mapped: Mapped,
    /// Blocks (address >> 21, plus one) known to be mapped throughout.
    ready: Box<[u64; READY]>,
    max_addr: u64,
    /// Where host addresses beyond `max_addr` go (`fold.rs`).
    fold: Fold,
    ops: Vec<(u64, Op)>,
    /// Each op's place in its block (`NO_PLACE`: none), and the marks of
    /// the instruction stream between the ops (`Mark::at` an op index).
    places: Vec<u16>,
    marks: Vec<Mark>,
    /// The system's index of each block the stream defined, by the tool's
    /// id (u32::MAX: none).
    blocks: Vec<u32>,
    /// The block the stream is in (its references, counted) and the place
    /// of its next reference; none outside blocks.
    block_refs: Option<u16>,
    place: u16,
    /// Whether references get their places: false while an online stream
    /// warms (its filter leaves references out, so their places are not
    /// the stream's).
    pub(crate) placing: bool,
    /// The code line fetched last.
    last_fetch: u64,
    /// Bytes in a line of the system's caches: a reference is made on
    /// each line it covers.
    line: u64,
    pacer: Pacer,
    /// References by kind (`Kind as usize`) since the last flush, which
    /// adds them to `stats`.
    kinds: [u64; 4],
    pub(crate) stats: ReplayStats,
}

impl Run {
    /// A run of process `pid` (already spawned and put on `cpu`).
    pub(crate) fn new(sys: &System, pid: Pid, cpu: usize) -> Run {
        let max_addr = sys.max_user_address(pid).expect("a live process");
        Run {
            pid,
            cpu,
            mapped: Mapped::default(),
            ready: Box::new([0; READY]),
            max_addr,
            fold: Fold::new(max_addr),
            ops: Vec::with_capacity(4 * BATCH),
            places: Vec::with_capacity(4 * BATCH),
            marks: Vec::new(),
            blocks: Vec::new(),
            block_refs: None,
            place: 0,
            placing: true,
            last_fetch: u64::MAX,
            line: sys.line_bytes(),
            pacer: Pacer::new(),
            kinds: [0; 4],
            stats: ReplayStats::default(),
        }
    }

    /// The run of `pid`, a fork of this run's process: the same mappings
    /// and the blocks defined so far.
    pub(crate) fn forked(&self, pid: Pid, cpu: usize) -> Run {
        Run {
            pid,
            cpu,
            mapped: self.mapped.clone(),
            ready: self.ready.clone(),
            max_addr: self.max_addr,
            fold: self.fold.clone(),
            ops: Vec::with_capacity(4 * BATCH),
            places: Vec::with_capacity(4 * BATCH),
            marks: Vec::new(),
            blocks: self.blocks.clone(),
            block_refs: None,
            place: 0,
            placing: self.placing,
            last_fetch: u64::MAX,
            line: self.line,
            pacer: Pacer::new(),
            kinds: [0; 4],
            stats: ReplayStats::default(),
        }
    }

    /// Maps modelled range [start, end).
    fn mmap(&mut self, sys: &mut System, start: u64, end: u64) -> Result<(), Failure> {
        self.fold.place(start, end).map_err(|msg| Failure { msg, input: true })?;
        let req = MmapReq { addr: start, len: end - start, prot: prot::ALL, shared: false, fixed: true, backing: Backing::Anon, prefault: false };
        sys.mmap(self.pid, req).map_err(|e| Failure { msg: format!("mmap of [{start:#x}, {end:#x}): {e}"), input: false })?;
        self.mapped.add(start, end);
        Ok(())
    }

    /// Maps a region of the trace (rounded out to pages), where the fold
    /// puts it.
    ///
    /// The heap grows by brk in small steps, each reported as a region. A
    /// kernel extends one mapping (one object) for them, so a superpage-
    /// sized range of heap can fill one reservation; a mapping per step
    /// would split it into objects no reservation spans. So a heap region
    /// is mapped to the end of its 2 MB block, and a later step maps only
    /// what is not mapped yet.
    pub(crate) fn map_region(&mut self, sys: &mut System, r: &Region) -> Result<(), Failure> {
        let page = sys.page_size();
        let start = r.start & !(page - 1);
        let end = r.end().checked_add(page - 1).map(|e| e & !(page - 1)).unwrap_or(!(page - 1));
        let end = end.max(start + page);
        for (s, e) in self.fold.range(start, end).map_err(|msg| Failure { msg, input: true })? {
            self.map_piece(sys, s, e, r.origin)?;
        }
        Ok(())
    }

    fn map_piece(&mut self, sys: &mut System, start: u64, end: u64, origin: Origin) -> Result<(), Failure> {
        if origin == Origin::Brk {
            let block_end = end.checked_add(BLOCK - 1).map_or(end, |e| e & !(BLOCK - 1)).min(self.max_addr).max(end);
            for (s, e) in self.mapped.gaps(start, block_end) {
                self.mmap(sys, s, e)?;
            }
            return Ok(());
        }
        self.mmap(sys, start, end)
    }

    pub(crate) fn unmap(&mut self, sys: &mut System, start: u64, len: u64) -> Result<(), Failure> {
        let page = sys.page_size();
        let s = start & !(page - 1);
        let e = start.saturating_add(len).saturating_add(page - 1) & !(page - 1);
        for (s, e) in self.fold.known(s, e) {
            if s < e {
                sys.munmap(self.pid, s, e - s).map_err(|er| Failure { msg: format!("munmap of [{s:#x}, {e:#x}): {er}"), input: false })?;
                self.mapped.remove(s, e);
            }
        }
        // A cached block may have lost part of its mapping.
        self.ready.fill(0);
        Ok(())
    }

    /// Makes sure the whole 2 MB block containing `addr` is mapped, mapping
    /// its free parts (untimed). Returns whether anything was mapped.
    #[inline(never)]
    fn ensure_block(&mut self, sys: &mut System, addr: u64) -> Result<bool, Failure> {
        let start = addr & !(BLOCK - 1);
        let end = (start + BLOCK).min(self.max_addr);
        if addr >= end {
            return Err(Failure {
                msg: format!("the trace touches {addr:#x}, beyond the modelled user address space (below {:#x})", self.max_addr),
                input: true,
            });
        }
        let gaps = self.mapped.gaps(start, end);
        let mapped_any = !gaps.is_empty();
        if mapped_any {
            let c0 = sys.cycles(self.cpu);
            for (s, e) in gaps {
                self.mmap(sys, s, e)?;
                self.stats.inferred_mmaps += 1;
            }
            self.stats.inferred_blocks += 1;
            self.stats.inferred_cycles += sys.cycles(self.cpu) - c0;
        }
        self.ready[((addr >> 21) as usize) & (READY - 1)] = (addr >> 21) + 1;
        Ok(mapped_any)
    }

    /// One access at host address `addr`, where the fold puts it.
    #[inline]
    fn push(&mut self, sys: &mut System, addr: u64, op: Op, place: u16) -> Result<(), Failure> {
        let addr = if self.fold.high(addr) { self.fold.to_model(addr).map_err(|msg| Failure { msg, input: true })? } else { addr };
        let block = addr >> 21;
        if self.ready[(block as usize) & (READY - 1)] != block + 1 {
            self.ensure_block(sys, addr)?;
        }
        self.ops.push((addr, op));
        self.places.push(place);
        Ok(())
    }

    /// A block table of the stream (the tool's words): the block becomes
    /// one of the system's.
    pub(crate) fn define(&mut self, sys: &mut System, words: &[u64]) -> Result<(), Failure> {
        let (id, spec) = crate::block::decode(words).map_err(|e| Failure { msg: e, input: true })?;
        let sysid = sys.define_block(&spec).map_err(|e| Failure { msg: e, input: true })?;
        let i = usize::try_from(id).ok().filter(|&i| i < 1 << 26).ok_or_else(|| Failure { msg: format!("a block id {id} (at most 2^26)"), input: true })?;
        if self.blocks.len() <= i {
            self.blocks.resize(i + 1, u32::MAX);
        }
        self.blocks[i] = sysid;
        self.stats.blocks += 1;
        Ok(())
    }

    /// The stream enters the block the tool calls `id`: a mark, and the
    /// fetches of its code lines.
    fn enter(&mut self, sys: &mut System, id: u64) -> Result<(), Failure> {
        let sysid = self.blocks.get(id as usize).copied().filter(|&b| b != u32::MAX).ok_or_else(|| Failure { msg: format!("the stream enters block {id} before its table"), input: true })?;
        self.marks.push(Mark { at: self.ops.len() as u32, what: MarkKind::Enter(sysid) });
        self.stats.block_entries += 1;
        let b = sys.block(sysid).expect("a defined block");
        let (n, refs) = (b.lines.len(), b.refs().min(u16::MAX as usize) as u16);
        for k in 0..n {
            let line = sys.block(sysid).expect("a defined block").lines[k].0;
            if line != self.last_fetch {
                self.last_fetch = line;
                self.push(sys, line, Op::Fetch, NO_PLACE)?;
                self.stats.fetches += 1;
                // The tool gives code as 64-byte granules with no
                // instruction addresses: on a machine whose lines are
                // shorter, the block is fetched from each line of it.
                let mut l = line + self.line;
                while l & (CODE_GRANULE - 1) != 0 {
                    self.push(sys, l, Op::Fetch, NO_PLACE)?;
                    self.stats.fetches += 1;
                    l += self.line;
                }
            }
        }
        self.block_refs = Some(refs);
        self.place = 0;
        Ok(())
    }

    /// Turns references into loads and stores (see the module comment).
    fn add_refs(&mut self, sys: &mut System, refs: &[Ref]) -> Result<(), Failure> {
        for r in refs {
            self.add_ref(sys, *r)?;
        }
        Ok(())
    }

    /// A mark of the instruction stream (see the module comment).
    #[inline(never)]
    pub(crate) fn mark(&mut self, sys: &mut System, r: Ref) -> Result<(), Failure> {
        match r.kind {
            Kind::Enter => self.enter(sys, r.addr)?,
            Kind::Exit => {
                self.marks.push(Mark { at: self.ops.len() as u32, what: MarkKind::Exit(r.addr.min(255) as u8) });
                self.block_refs = None;
            }
            _ => self.place = self.place.saturating_add(1),
        }
        Ok(())
    }

    /// `n` instructions the stream counted (with no blocks to say more).
    pub(crate) fn instructions(&mut self, n: u64) {
        self.marks.push(Mark { at: self.ops.len() as u32, what: MarkKind::Instructions(n) });
    }

    /// One reference as loads and stores (see the module comment).
    #[inline]
    pub(crate) fn add_ref(&mut self, sys: &mut System, r: Ref) -> Result<(), Failure> {
        if r.kind.is_mark() {
            return self.mark(sys, r);
        }
        // Loads, stores and modifies come mixed in no predictable order:
        // they are told apart by flags, not by a branch on the kind.
        let k = r.kind as u8;
        self.kinds[k as usize & 3] += 1;
        if k == Kind::Instr as u8 {
            return Ok(());
        }
        let place = match self.block_refs {
            Some(n) if self.placing && self.place < n => self.place,
            _ => NO_PLACE,
        };
        self.place = self.place.saturating_add(1);
        let (store, modify) = (k >= Kind::Store as u8, k == Kind::Modify as u8);
        let op = if store { Op::Store(0) } else { Op::Load };
        if modify {
            self.push(sys, r.addr, Op::Load, place)?;
        }
        self.push(sys, r.addr, op, place)?;
        if (r.addr & (self.line - 1)) + r.size as u64 > self.line {
            self.rest_of_ref(sys, r.addr, r.size, op, modify, place)?;
        }
        Ok(())
    }

    /// The lines after the first that a reference covers: each gets the
    /// reference's access (a modify's load and store), as the cache
    /// reads or writes each line a split load or store touches.
    #[inline(never)]
    fn rest_of_ref(&mut self, sys: &mut System, addr: u64, size: u32, op: Op, modify: bool, place: u16) -> Result<(), Failure> {
        let last = addr.saturating_add(size as u64 - 1);
        self.stats.line_crossing += 1;
        if (addr ^ last) & !(HOST_PAGE - 1) != 0 {
            self.stats.page_crossing += 1;
        }
        let mut next = (addr | (self.line - 1)).checked_add(1);
        while let Some(a) = next.filter(|&a| a <= last) {
            if modify {
                self.push(sys, a, Op::Load, place)?;
            }
            self.push(sys, a, op, place)?;
            next = a.checked_add(self.line);
        }
        Ok(())
    }

    /// Makes the accumulated accesses.
    pub(crate) fn flush(&mut self, sys: &mut System) -> Result<(), Failure> {
        let t0 = Instant::now();
        let mode = self.pacer.pick();
        let piece = match mode {
            Mode::OneThread => ONE_THREAD_PIECE,
            Mode::TwoThreads => usize::MAX,
        };
        let mut from = 0;
        let mut marks = std::mem::take(&mut self.marks);
        while from < self.ops.len() || !marks.is_empty() {
            match sys.stream_pieces(self.cpu, &self.ops[from..], &self.places[from..], &marks, piece) {
                Ok(()) => {
                    from = self.ops.len();
                    marks.clear();
                }
                Err((i, AccessError::Fault(FaultError::Unmapped(va)))) => {
                    // Only after an unmap the cache did not see (it is
                    // cleared on every unmap): map the block and go on.
                    self.ready[((va >> 21) as usize) & (READY - 1)] = 0;
                    if !self.ensure_block(sys, va)? {
                        return Err(Failure { msg: format!("access {} of the batch: {}", i, FaultError::Unmapped(va)), input: false });
                    }
                    // The marks up to the failed access were made.
                    marks.retain(|m| m.at as usize > i);
                    marks.iter_mut().for_each(|m| m.at -= i as u32);
                    from += i;
                }
                Err((_, e)) => return Err(Failure { msg: e.to_string(), input: false }),
            }
        }
        marks.clear();
        self.marks = marks;
        self.places.clear();
        self.pacer.record(mode, t0.elapsed().as_secs_f64(), self.ops.len());
        self.stats.accesses += self.ops.len() as u64;
        self.ops.clear();
        let [i, l, st, m] = std::mem::take(&mut self.kinds);
        self.stats.instr_skipped += i;
        self.stats.loads += l;
        self.stats.stores += st;
        self.stats.modifies += m;
        Ok(())
    }

    pub(crate) fn event(&mut self, sys: &mut System, e: Event) -> Result<(), Failure> {
        if let Event::Block(words) = &e {
            // Only later marks name it: nothing waits.
            return self.define(sys, words);
        }
        self.flush(sys)?;
        match e {
            Event::Block(_) => Ok(()),
            Event::Map(r) => {
                self.stats.maps += 1;
                self.map_region(sys, &r)
            }
            Event::Unmap { start, len } => {
                self.stats.unmaps += 1;
                self.unmap(sys, start, len)
            }
        }
    }
}

fn describe(src: &Opened) -> String {
    let f = match src.format() {
        Format::Splab => "splab binary",
        Format::Lackey => "valgrind lackey text",
        Format::ChampSim => "ChampSim records",
    };
    match src.compression {
        crate::Compression::None => f.to_string(),
        c => format!("{f}, {}-compressed", c.name()),
    }
}

impl Replay {
    fn replay(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, Failure> {
        let mut src = open(&self.path, self.format)?;
        let cpu = self.cpu;
        let sysf = |what: &str, e: splab_vm::Errno| Failure { msg: format!("{what}: {e}"), input: false };
        let pid = sys.spawn().map_err(|e| sysf("spawn", e))?;
        sys.run_on(cpu, pid).map_err(|e| sysf("run", e))?;
        let mut run = Run::new(sys, pid, cpu);
        for r in src.layout().to_vec() {
            run.map_region(sys, &r)?;
            run.stats.header_regions += 1;
        }
        let t0 = sys.cycles(cpu);
        let mut refs = Vec::with_capacity(BATCH + 8);
        loop {
            refs.clear();
            let step = src.read(&mut refs, BATCH)?;
            run.stats.refs += refs.len() as u64;
            run.add_refs(sys, &refs)?;
            match step {
                Step::Full => run.flush(sys)?,
                Step::Event(e) => run.event(sys, e)?,
                Step::End => {
                    run.flush(sys)?;
                    break;
                }
            }
            progress(run.stats.refs);
        }
        let cycles = sys.cycles(cpu) - t0 - run.stats.inferred_cycles;
        let timed = sys.cycles_to_seconds(cycles);
        let stats = run.stats;
        sys_exit(sys, pid)?;
        let mut report = String::new();
        let s = &stats;
        let _ = writeln!(report, "Trace replay: {}", self.path.display());
        let _ = writeln!(report, "  {:<20}{}", "format", describe(&src));
        let _ = writeln!(
            report,
            "  {:<20}{} ({} loads, {} stores, {} modifies as a load and a store; {} instruction fetches skipped)",
            "references", s.refs, s.loads, s.stores, s.modifies, s.instr_skipped
        );
        let _ = writeln!(report, "  {:<20}{} ({} references crossed into the next line and touched it too, {} of them into the next page)", "memory accesses", s.accesses, s.line_crossing, s.page_crossing);
        let _ = writeln!(
            report,
            "  {:<20}{} regions from the header, {} map and {} unmap events replayed; all mapped anonymous, readable, writable and executable",
            "layout", s.header_regions, s.maps, s.unmaps
        );
        let _ = writeln!(
            report,
            "  {:<20}{} 2 MB blocks mapped where the trace touched memory outside its layout ({} mmap calls, not timed)",
            "inferred", s.inferred_blocks, s.inferred_mmaps
        );
        let _ = writeln!(report, "  {:<20}{:.6} s (the replay, after mapping the header's layout)", "simulated time", timed);
        self.stats = stats;
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: "simulated seconds".into(), value: timed, unit: "s".into(), higher_is_better: false },
            report,
            timed_seconds: timed,
        })
    }
}

fn sys_exit(sys: &mut System, pid: Pid) -> Result<(), Failure> {
    sys.exit(pid).map_err(|e| Failure { msg: format!("exit: {e}"), input: false })
}

impl Workload for Replay {
    fn name(&self) -> String {
        let file = self.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        format!("trace({file})")
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        self.estimate
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        self.bad_input = false;
        self.replay(sys, progress).map_err(|f| {
            self.bad_input = f.input;
            if f.input {
                format!("trace {}: {}", self.path.display(), f.msg)
            } else {
                f.msg
            }
        })
    }

    fn failed_on_input(&self) -> bool {
        self.bad_input
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use splab_hw::profile::Profile;
    use splab_sim::Config;

    /// A block's 64-byte code granules are fetched whole: once each on
    /// 64- and 128-byte lines, as each of their two lines on 32-byte
    /// lines.
    #[test]
    fn a_code_granule_is_fetched_as_each_line_in_it() {
        for (machine, fetches) in [("sapphire-rapids", 2), ("power9", 2), ("armada-xp", 4)] {
            let mut c = Config::new(Profile::load(machine).unwrap());
            c.memory = 256 << 20;
            let mut sys = System::new(c).unwrap();
            let pid = sys.spawn().unwrap();
            sys.run_on(0, pid).unwrap();
            let mut run = Run::new(&sys, pid, 0);
            assert!(run.define(&mut sys, &crate::block::tests::table()).is_ok());
            assert!(run.enter(&mut sys, 7).is_ok());
            assert_eq!(run.stats.fetches, fetches, "{machine}");
            assert!(run.flush(&mut sys).is_ok());
            assert_eq!(sys.hw().fetches, fetches, "{machine}");
        }
    }
}
