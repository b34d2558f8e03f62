//! The access path: how a load or store by the process running on a CPU
//! reaches memory. TLB lookup; on a miss the machine's walker reads the
//! page tables from modelled memory; a write through a clean TLB entry
//! re-walks to set the dirty bit; a walk that faults traps to the kernel,
//! which resolves the fault (or kills the process, or reports a
//! segmentation fault) and the access is retried. The references the walk
//! made and the access itself then go to the timing model, one at a time
//! or in batches (`Timing`), which only charges what this path produced.
//!
//! `translate_slow` is the path read top to bottom; `access`, `translate`
//! and `translate_lookup` are its fast cases (a recent TLB hit, a hit that
//! permits the access), kept inline because nearly every reference ends
//! there, and each computes exactly what the slow path would.

use crate::system::System;
use crate::timing::{BatchRef, Job, Mark, Worker, NO_PLACE};
use splab_hw::mmu::{perm, Access, Translation, WalkFault};
use splab_hw::tlb::{size_name, TlbHit};
use splab_hw::{PhysAddr, VirtAddr};
use splab_vm::pmap::prot;
use splab_vm::FaultError;

/// Why an access did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// The kernel did not resolve the page fault: a segmentation fault, a
    /// bus error, no memory, or the process is gone (killed for lack of
    /// memory and swap, or none runs on the CPU).
    #[error(transparent)]
    Fault(#[from] FaultError),
    /// The hardware kept faulting after the kernel resolved the fault: a
    /// translation the pmap failed to invalidate.
    #[error("fault at {0:#x} not resolved after repeated tries (stale translation?)")]
    Unresolved(u64),
}

/// Batches of fewer references than this are timed on the calling thread;
/// larger ones go to the timing thread. Callers that stream many short
/// batches on a busy host (where the hand-off's spinning competes with
/// other work for the cores) can stay below it.
pub const BATCH_THREAD_MIN: usize = 512;

/// One memory access to perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Load,
    Store(u64),
    /// An instruction fetch of the code line at the address (through the
    /// instruction TLB and cache).
    Fetch,
}

/// The TLB permission bits an access needs to use an entry as it is (a
/// write through an entry whose dirty bit is clear needs an assist).
#[inline(always)]
fn need(acc: Access) -> u8 {
    match acc {
        Access::Read => perm::READ,
        Access::Write => perm::WRITE | perm::DIRTY,
        Access::Exec => perm::EXEC,
    }
}

fn op_access(op: Op) -> Access {
    match op {
        Op::Load => Access::Read,
        Op::Store(_) => Access::Write,
        Op::Fetch => Access::Exec,
    }
}

fn access_prot(a: Access) -> u8 {
    match a {
        Access::Read => prot::READ,
        Access::Write => prot::WRITE,
        Access::Exec => prot::EXEC,
    }
}

impl System {
    /// Walks the page tables for `va` on `cpu`. The walk's memory
    /// references are appended to `pending_walks`; the caller charges them
    /// through the caches (now, or later in a batch).
    fn walk(&mut self, cpu: usize, root: PhysAddr, asid: u16, va: u64, acc: Access) -> Result<Translation, WalkFault> {
        let r = self.machine.walk(cpu, root, asid, VirtAddr(va), acc, &mut self.pending_walks);
        if let Ok(t) = &r {
            if self.cfg.check_tlb || cfg!(debug_assertions) {
                self.check_walk(cpu, va, t);
            }
        }
        r
    }

    /// The hardware walk must agree with the pmap's own view of the address
    /// (pmap_extract): same physical address, same write permission.
    fn check_walk(&mut self, cpu: usize, va: u64, t: &Translation) {
        let Some(pid) = self.cpus[cpu].running else { return };
        let pm = self.kernel.proc(pid).expect("running process").pmap;
        let view = self.kernel.pmap.extract(&self.machine.mem, pm, VirtAddr(va));
        let agree = view.is_some_and(|m| m.pa == t.pa(va) && (m.prot & prot::WRITE != 0) == t.allows(Access::Write));
        if !agree {
            self.hw.stale_translations += 1;
            if self.stale_samples.len() < 10 {
                self.stale_samples.push(format!("va {va:#x}: walker gives {:?}, pmap says {view:?}", t.pa(va)));
            }
            debug_assert!(agree, "walker and pmap disagree at {va:#x}: {t:?} vs {view:?}");
        }
    }

    /// Checks a TLB hit against the page tables: a translation used after
    /// the pmap changed or removed it, or pointing at a freed frame.
    fn check_hit(&mut self, root: PhysAddr, va: u64, t: &Translation, acc: Access) {
        let now = self.machine.probe(root, VirtAddr(va));
        let pa = t.pa(va);
        let bad = match now {
            None => Some("page tables have no mapping".to_string()),
            Some(n) if n.pa(va) != pa => Some(format!("page tables map {:?}", n.pa(va))),
            Some(n) if acc == Access::Write && !n.allows(Access::Write) => Some("page tables forbid the write".into()),
            _ if self.kernel.phys.buddy.is_free(self.machine.mem.pfn(pa)) => Some("frame is free".into()),
            _ => None,
        };
        if let Some(why) = bad {
            self.hw.stale_translations += 1;
            if self.stale_samples.len() < 10 {
                self.stale_samples.push(format!("va {va:#x} -> {pa:?} ({} TLB entry, {acc:?}): {why}", size_name(t.shift)));
            }
        }
    }

    /// Performs one access by the process running on `cpu`. `dependent`
    /// means the access waits for the previous one (a pointer chase), so
    /// its latency is not overlapped. Returns the value read (or written);
    /// values are only kept when content tracking is on.
    #[inline]
    pub fn access(&mut self, cpu: usize, va: u64, op: Op, dependent: bool) -> Result<u64, AccessError> {
        // Fast path: the same page as the last TLB hit, permitted without a
        // dirty-bit assist, on the line of the last cache access. Its result
        // is what the general path would compute.
        if let (false, false, false, Some(timing)) = (self.cfg.check_tlb, self.machine.mem.tracks_data(), op == Op::Fetch, self.timing.as_mut()) {
            let asid = self.cpus[cpu].space.1;
            let tlb = &mut self.machine.mmu[cpu].tlb;
            if let Some((t, m)) = tlb.memo(va, asid) {
                let need = need(op_access(op));
                let pa = t.pa(va).0;
                if t.perm & need == need && timing.charge_same_line(cpu, pa, dependent, matches!(op, Op::Store(_))) {
                    tlb.count_memo_hit(m);
                    self.hw.refs += 1;
                    return Ok(match op {
                        Op::Store(v) => {
                            self.hw.stores += 1;
                            self.machine.mem.note_write(pa);
                            v
                        }
                        _ => {
                            self.hw.loads += 1;
                            0
                        }
                    });
                }
            }
        }
        self.access_general(cpu, va, op, dependent)
    }

    /// The hardware's translation of `va` for `acc`: TLB lookup, walk on a
    /// miss, dirty-bit assist, and page faults resolved by the kernel, until
    /// a usable translation is found. Returns the physical address with the
    /// fixed cycles of TLB lookups and assists; walk references are left in
    /// `pending_walks`. (The address, not the translation: the recent hit's
    /// path then gives it in a register, where a translation, joined with
    /// the other paths', would go through memory.)
    #[inline(always)]
    fn translate(&mut self, cpu: usize, va: u64, acc: Access) -> Result<(u64, u32), AccessError> {
        let pa = |(t, xlat): (Translation, u32)| (t.pa(va).0, xlat);
        if acc == Access::Exec {
            return self.translate_fetch(cpu, va).map(pa);
        }
        // The most common case, inline: the page of a recent first-level
        // hit (see `Tlb::memo`), permitted as it is. `lookup` makes the same
        // check first, so the outcome and the counts are its own.
        let asid = self.cpus[cpu].space.1;
        let tlb = &mut self.machine.mmu[cpu].tlb;
        let memo = tlb.memo(va, asid);
        if let Some((t, m)) = memo {
            let need = need(acc);
            if t.perm & need == need && !self.cfg.check_tlb {
                tlb.count_memo_hit(m);
                return Ok((t.pa(va).0, 0));
            }
        }
        self.translate_lookup(cpu, va, acc, memo.is_some()).map(pa)
    }

    /// `translate` past the recent hits: `memo` says whether `va` is in
    /// the page of one (which did not permit the access).
    #[inline(never)]
    fn translate_lookup(&mut self, cpu: usize, va: u64, acc: Access, memo: bool) -> Result<(Translation, u32), AccessError> {
        // The common case: a TLB hit that permits the access as it is.
        let asid = self.cpus[cpu].space.1;
        let tlb = &mut self.machine.mmu[cpu].tlb;
        let hit = if memo { tlb.lookup(va, asid) } else { tlb.lookup_past_memos(va, asid) };
        if let Some((t, lvl)) = hit {
            let need = need(acc);
            if t.perm & need == need && !self.cfg.check_tlb {
                let x = if lvl == TlbHit::L2 { self.cfg.profile.costs.stlb_hit } else { 0 };
                return Ok((t, x));
            }
        }
        self.translate_slow(cpu, va, acc, hit)
    }

    /// `translate` of an instruction fetch, through the instruction side
    /// of the TLBs (`Tlb::lookup_fetch`).
    #[inline(never)]
    fn translate_fetch(&mut self, cpu: usize, va: u64) -> Result<(Translation, u32), AccessError> {
        let asid = self.cpus[cpu].space.1;
        let hit = self.machine.mmu[cpu].tlb.lookup_fetch(va, asid);
        if let Some((t, lvl)) = hit {
            if t.perm & perm::EXEC != 0 && !self.cfg.check_tlb {
                let x = if lvl == TlbHit::L2 { self.cfg.profile.costs.stlb_hit } else { 0 };
                return Ok((t, x));
            }
        }
        self.translate_slow(cpu, va, Access::Exec, hit)
    }

    #[inline(never)]
    fn translate_slow(&mut self, cpu: usize, va: u64, acc: Access, first: Option<(Translation, TlbHit)>) -> Result<(Translation, u32), AccessError> {
        let fetch = acc == Access::Exec;
        let Some(pid) = self.cpus[cpu].running else {
            return Err(AccessError::Fault(match self.cpus[cpu].killed {
                Some(k) => FaultError::Killed(k),
                None => FaultError::NoProcess(u32::MAX),
            }));
        };
        let (root, asid) = self.cpus[cpu].space;
        let mut xlat: u32 = 0;
        let mut tries = 0;
        let mut first = Some(first);
        loop {
            tries += 1;
            let hit = match first.take() {
                Some(h) => h,
                None if fetch => self.machine.mmu[cpu].tlb.lookup_fetch(va, asid),
                None => self.machine.mmu[cpu].tlb.lookup(va, asid),
            };
            let res = match hit {
                Some((t, lvl)) => {
                    if lvl == TlbHit::L2 {
                        xlat += self.cfg.profile.costs.stlb_hit;
                    }
                    if !t.allows(acc) {
                        // A fault drops the entry; the handler decides.
                        self.machine.mmu[cpu].tlb.invalidate_page(va, asid);
                        Err(WalkFault::Protection)
                    } else if acc == Access::Write && t.perm & perm::DIRTY == 0 {
                        // The processor re-walks to set the dirty bit.
                        self.hw.dirty_assists += 1;
                        xlat += self.cfg.profile.costs.dirty_assist;
                        let r = self.walk(cpu, root, asid, va, acc);
                        self.machine.mmu[cpu].tlb.invalidate_page(va, asid);
                        if let Ok(n) = r {
                            self.machine.fill_walked(cpu, VirtAddr(va), asid, n);
                        }
                        r
                    } else {
                        // The entry is used as it is: it must still be right.
                        if self.cfg.check_tlb {
                            self.check_hit(root, va, &t, acc);
                        }
                        Ok(t)
                    }
                }
                None => {
                    let c = &self.cfg.profile.costs;
                    xlat += c.stlb_hit + c.walk.unwrap_or(0);
                    let r = self.walk(cpu, root, asid, va, acc);
                    if let Ok(t) = r {
                        if fetch {
                            self.machine.mmu[cpu].tlb.count_fetch_miss(t.shift);
                            self.machine.fill_fetched(cpu, VirtAddr(va), asid, t);
                        } else {
                            self.machine.mmu[cpu].tlb.count_miss(t.shift);
                            self.machine.fill_walked(cpu, VirtAddr(va), asid, t);
                        }
                    }
                    r
                }
            };
            match res {
                Ok(t) => return Ok((t, xlat)),
                Err(WalkFault::BadAddress) => return Err(self.kernel.trap_bad_address(va).into()),
                Err(_) => {
                    if tries > 4 {
                        return Err(AccessError::Unresolved(va));
                    }
                    // A page fault drops the TLB and paging-structure cache
                    // entries the processor used for the address.
                    let mmu = &mut self.machine.mmu[cpu];
                    mmu.tlb.invalidate_page(va, asid);
                    mmu.pwc.invalidate_asid(asid);
                    self.hw.faults_taken += 1;
                    let before = self.kernel.ev.clone();
                    let r = self.kernel.trap(&mut self.machine, pid, va, access_prot(acc));
                    let cyc = self.charge_events(cpu, &before);
                    *self.fault_ns.entry(((cyc / self.cfg.profile.freq_ghz) as f32).max(0.0).to_bits()).or_insert(0) += 1;
                    if !self.kernel.oom_kills.is_empty() {
                        self.reap_killed();
                        if self.cpus[cpu].running != Some(pid) {
                            return Err(FaultError::Killed(pid).into());
                        }
                    }
                    r?;
                }
            }
        }
    }

    /// The word at `pa` as modelled memory holds it (0 when values are not
    /// kept).
    #[inline]
    fn read_word(&self, pa: u64) -> u64 {
        if self.machine.mem.tracks_data() {
            self.machine.mem.read_u64(PhysAddr(pa & !7))
        } else {
            0
        }
    }

    /// Performs the load or store itself on modelled memory.
    #[inline(always)]
    fn do_op(&mut self, pa: u64, op: Op) -> u64 {
        let word = PhysAddr(pa & !7);
        match op {
            Op::Load => {
                self.hw.loads += 1;
                self.machine.mem.note_access(pa, false);
                self.read_word(pa)
            }
            Op::Fetch => {
                self.hw.fetches += 1;
                0
            }
            Op::Store(v) => {
                self.hw.stores += 1;
                self.machine.mem.note_access(pa, true);
                self.machine.mem.store_data(word, v);
                v
            }
        }
    }

    #[inline(never)]
    fn access_general(&mut self, cpu: usize, va: u64, op: Op, dependent: bool) -> Result<u64, AccessError> {
        let acc = op_access(op);
        self.hw.refs += (op != Op::Fetch) as u64;
        self.pending_walks.clear();
        let (pa, xlat) = self.translate(cpu, va, acc)?;
        let walks = std::mem::take(&mut self.pending_walks);
        self.timing().charge(cpu, xlat, &walks, pa, dependent, acc == Access::Write);
        self.pending_walks = walks;
        self.pending_walks.clear();
        Ok(self.do_op(pa, op))
    }

    /// Runs a batch of independent accesses by the process on `cpu`, in
    /// order, with the same results as calling `access` for each. Each
    /// `(va, x)` is a read-modify-write: a load of the word at va, then a
    /// store of (value ^ x), as in GUPS's update. The batch is executed in
    /// two passes: first every translation in order (TLB, walks, faults,
    /// values), then the timing model over the recorded references in the
    /// same order (`Timing::run_batch`, on the timing thread for large
    /// batches). Neither model reads the other's state, so the outcome is
    /// the same as one access at a time.
    pub fn xor_batch(&mut self, cpu: usize, ops: &[(u64, u64)]) -> Result<(), AccessError> {
        self.begin_batch();
        for &(va, x) in ops {
            let n = self.batch.len();
            let pa = self.batch_one(cpu, va, false, false, NO_PLACE, |_| 0)?;
            if self.batch.len() == n + 1 {
                self.store_after_load(cpu, va, pa, x)?;
            } else {
                self.batch_one(cpu, va, true, false, NO_PLACE, |old| old ^ x)?;
            }
        }
        self.finish_batch(cpu);
        Ok(())
    }

    /// The store of an update (`old ^ x` to the word at `va`) whose load
    /// `batch_one` has just entered as a reference of its own, at `load_pa`:
    /// what `batch_one` makes of it, a repeat of the load where it would
    /// be one, decided from what is known of the load's entry (it is no
    /// repeat, no fetch and in no place) rather than by reading back the
    /// entry just written: the loads of its fields were the hottest
    /// samples of GUPS's translating loop, and without them that thread
    /// takes 7 % less time.
    #[inline(always)]
    fn store_after_load(&mut self, cpu: usize, va: u64, load_pa: u64, x: u64) -> Result<(), AccessError> {
        let (pa, xlat, w0) = self.batch_translate(cpu, va, true, false, |old| old ^ x)?;
        let n = self.batch.len();
        if pa >> self.line_shift == load_pa >> self.line_shift && xlat == 0 && self.pending_walks.len() == w0 && self.marks.last().is_none_or(|m| m.at as usize != n) {
            let last = self.batch.last_mut().expect("the load's entry");
            last.stride = pa.wrapping_sub(load_pa) as i64 as i8;
            last.repeat_write = true;
            last.repeats = 1;
            self.machine.mem.note_write(pa);
            return Ok(());
        }
        self.batch_push(pa, xlat, w0, true, false, NO_PLACE);
        Ok(())
    }

    /// Runs a batch of independent loads and stores by the process on
    /// `cpu` (a trace, a streaming kernel), in order, two-pass as
    /// `xor_batch` does, with the same results as calling `access` with
    /// `dependent` false for each. On a fault the accesses before it have
    /// been made and timed; the error tells which failed.
    pub fn access_batch(&mut self, cpu: usize, ops: &[(u64, Op)]) -> Result<(), (usize, AccessError)> {
        self.begin_batch();
        for (i, &(va, op)) in ops.iter().enumerate() {
            self.batch_op(cpu, va, op, NO_PLACE).map_err(|e| (i, e))?;
        }
        self.finish_batch(cpu);
        Ok(())
    }

    fn begin_batch(&mut self) {
        self.pending_walks.clear();
        self.batch.clear();
        self.marks.clear();
    }

    #[inline(always)]
    fn batch_op(&mut self, cpu: usize, va: u64, op: Op, place: u16) -> Result<(), AccessError> {
        let (write, fetch, v) = match op {
            Op::Load => (false, false, 0),
            Op::Store(v) => (true, false, v),
            Op::Fetch => (false, true, 0),
        };
        self.batch_one(cpu, va, write, fetch, place, |_| v).map(|_| ())
    }

    /// One access of a batch: translated now, timed when the batch ends.
    /// A store (`write`) stores `value` of the word's old value; a `fetch`
    /// is an instruction fetch. `place` is its place in the current block
    /// (`NO_PLACE`: none). Loads and stores take one path, told apart by
    /// flags rather than branches: a trace mixes them unpredictably. Returns
    /// the physical address.
    #[inline(always)]
    fn batch_one(&mut self, cpu: usize, va: u64, write: bool, fetch: bool, place: u16, value: impl Fn(u64) -> u64) -> Result<u64, AccessError> {
        let (pa, xlat, w0) = self.batch_translate(cpu, va, write, fetch, value)?;
        // The line of the access before, through a permitting first-level
        // entry with no walk, of the kind of its repeats so far (any, for
        // the first: the core tells loads from stores), with no mark
        // between them and at the next place: a repeat of it
        // (`BatchRef::repeats`), whose frame is touched already (and
        // written, unless this is a store after a load), at the run's
        // stride from the access before.
        let n = self.batch.len();
        let walked = self.pending_walks.len() != w0;
        if let Some(last) = self.batch.last_mut() {
            // (The line first: it decides most often.)
            if last.pa >> self.line_shift == pa >> self.line_shift
                && xlat == 0
                && !walked
                && (last.repeats == 0 || last.repeat_write == write)
                && !fetch
                && !last.fetch
                && self.marks.last().is_none_or(|m| m.at as usize != n)
                && last.repeats < u16::MAX
                && (place == NO_PLACE && last.place == NO_PLACE || place != NO_PLACE && last.place != NO_PLACE && last.place.wrapping_add(last.repeats + 1) == place)
            {
                // Within a line: the step fits.
                let prev = last.pa.wrapping_add_signed(i64::from(last.stride) * i64::from(last.repeats));
                let step = pa.wrapping_sub(prev) as i64 as i8;
                if last.repeats == 0 {
                    last.stride = step;
                    last.repeat_write = write;
                }
                if step == last.stride {
                    last.repeats += 1;
                    if write && !last.write {
                        self.machine.mem.note_write(pa);
                    }
                    return Ok(pa);
                }
            }
        }
        self.batch_push(pa, xlat, w0, write, fetch, place);
        Ok(pa)
    }

    /// The first part of `batch_one`: the access translated (the batch
    /// timed so far on a fault), counted, and a store's value stored.
    /// Returns the physical address, the translation's fixed cycles and
    /// where its walk references start in `pending_walks`.
    #[inline(always)]
    fn batch_translate(&mut self, cpu: usize, va: u64, write: bool, fetch: bool, value: impl Fn(u64) -> u64) -> Result<(u64, u32, usize), AccessError> {
        let acc = if write {
            Access::Write
        } else if fetch {
            Access::Exec
        } else {
            Access::Read
        };
        self.hw.refs += u64::from(!fetch);
        let w0 = self.pending_walks.len();
        let (pa, xlat) = match self.translate(cpu, va, acc) {
            Ok(r) => r,
            Err(e) => {
                self.finish_batch(cpu);
                return Err(e);
            }
        };
        self.hw.loads += u64::from(!write & !fetch);
        self.hw.stores += u64::from(write);
        self.hw.fetches += u64::from(fetch);
        if self.machine.mem.tracks_data() && write {
            let v = value(self.read_word(pa));
            self.machine.mem.store_data(PhysAddr(pa & !7), v);
        }
        Ok((pa, xlat, w0))
    }

    /// The last part of `batch_one`: the access as a reference of its own,
    /// its walk references those from `w0` on.
    #[inline(always)]
    fn batch_push(&mut self, pa: u64, xlat: u32, w0: usize, write: bool, fetch: bool, place: u16) {
        let walks_end = self.pending_walks.len() as u32;
        self.batch.push(BatchRef { pa, xlat, walks_end, walks_start: w0 as u32, write, fetch, place, repeats: 0, stride: 0, repeat_write: write });
        if !fetch {
            self.machine.mem.note_access(pa, write);
        }
    }

    /// `access_batch` over `ops` cut into batches of `piece` accesses,
    /// with the background work due (`maybe_background`) done once, before
    /// the first: the same results for any `piece`, which only changes
    /// the host time (small batches stay on this thread, large ones go to
    /// the timing thread). On a fault the error gives its index in `ops`.
    pub fn access_pieces(&mut self, cpu: usize, ops: &[(u64, Op)], piece: usize) -> Result<(), (usize, AccessError)> {
        self.stream_pieces(cpu, ops, &[], &[], piece)
    }

    /// `access_pieces` of a stream whose references have places in its
    /// blocks (`places`, one per op, or empty for none) and `marks` between
    /// them (`Mark::at` an index into `ops`, in order): a real program's,
    /// whose blocks the system has defined (`define_block`).
    pub fn stream_pieces(&mut self, cpu: usize, ops: &[(u64, Op)], places: &[u16], marks: &[Mark], piece: usize) -> Result<(), (usize, AccessError)> {
        if self.next_background_ns.is_some() {
            // Waits for the batch in flight: the background work needs the
            // time it brings.
            self.sync();
            self.maybe_background();
        }
        let piece = piece.max(1);
        let mut m = 0;
        let mut start = 0;
        while start < ops.len() || m < marks.len() {
            let end = (start + piece).min(ops.len());
            self.begin_batch();
            for (i, &(va, op)) in (start..end).zip(&ops[start..end]) {
                while let Some(mk) = marks.get(m).filter(|mk| mk.at as usize <= i) {
                    self.marks.push(Mark { at: self.batch.len() as u32, what: mk.what });
                    m += 1;
                }
                let place = places.get(i).copied().unwrap_or(NO_PLACE);
                self.batch_op(cpu, va, op, place).map_err(|e| (i, e))?;
            }
            if end == ops.len() {
                // Marks after the last reference.
                while let Some(mk) = marks.get(m) {
                    self.marks.push(Mark { at: self.batch.len() as u32, what: mk.what });
                    m += 1;
                }
            }
            self.time_batch(cpu);
            start = end;
            if start == ops.len() && m == marks.len() {
                break;
            }
        }
        Ok(())
    }

    /// The second pass of a batch: the cache model over the references in
    /// order, after any background work due.
    fn finish_batch(&mut self, cpu: usize) {
        if self.next_background_ns.is_some() {
            // The background work needs the time the batches in flight
            // bring.
            self.sync();
            self.maybe_background();
        }
        self.time_batch(cpu);
    }

    /// The cache model over the batch's references in order, on the
    /// timing thread when the batch is large enough to be worth it (the
    /// caller goes on translating the next batches meanwhile, up to
    /// `IN_FLIGHT` ahead).
    fn time_batch(&mut self, cpu: usize) {
        if self.batch.len() < BATCH_THREAD_MIN || !self.cfg.timing_thread {
            self.sync();
            let blocks = std::mem::take(&mut self.new_blocks);
            let t = self.timing.as_mut().unwrap();
            t.add_blocks(blocks);
            if self.functional {
                t.warm_pass(cpu, &self.batch, &self.pending_walks, &self.marks);
            } else {
                t.run_batch(cpu, &self.batch, &self.pending_walks, &self.marks);
            }
            self.batch.clear();
            self.pending_walks.clear();
            self.marks.clear();
            return;
        }
        if self.worker.is_none() {
            self.worker = Some(Worker::spawn());
        }
        self.collect_returns(false);
        let functional = self.functional;
        if !self.worker.as_ref().is_some_and(Worker::has_room) {
            self.collect_returns(true);
        }
        let (r, w, m, mut acc) = self.spares.pop().unwrap_or_default();
        let refs = std::mem::replace(&mut self.batch, r);
        let walks = std::mem::replace(&mut self.pending_walks, w);
        let marks = std::mem::replace(&mut self.marks, m);
        let blocks = std::mem::take(&mut self.new_blocks);
        let timing = self.timing.take();
        // The batch's list of accesses is made here where the timing
        // thread has been the busier of the two so far (GUPS with
        // superpages on), else by the timing thread before its passes.
        let listed = (!functional && self.pace.timing_busier()).then(|| crate::timing::accesses(&refs, &walks, &mut acc));
        let worker = self.worker.as_mut().expect("spawned");
        worker.send(Job { timing, blocks, cpu, refs, walks, marks, acc, listed, functional });
        if !functional {
            self.pace.sent();
        }
        self.batch.clear();
        self.pending_walks.clear();
        self.marks.clear();
    }

    pub fn load(&mut self, cpu: usize, va: u64) -> Result<u64, AccessError> {
        self.access(cpu, va, Op::Load, false)
    }

    pub fn store(&mut self, cpu: usize, va: u64, v: u64) -> Result<u64, AccessError> {
        self.access(cpu, va, Op::Store(v), false)
    }
}
