//! A many-threaded allocator with an arena per thread, the way jemalloc
//! and glibc malloc serve threads: the jemalloc "RSS far above what the
//! program holds" complaints.
//!
//! One process, `threads` threads (scheduler tasks sharing the process's
//! address space, one per CPU by default, so an madvise on one CPU shoots
//! down the TLBs of the others). Each thread has its own arena: heaps of
//! `heap` bytes (64 MB, glibc's HEAP_MAX_SIZE on 64-bit systems), each
//! one anonymous mapping that the arena hands out from the bottom up as it
//! grows (so the part above its top is mapped but never touched, as with
//! jemalloc's retained address space), a new heap when none has room.
//! Objects are rounded to size classes (four per doubling, from 16 bytes,
//! as jemalloc's): small ones (up to 8 KB) share slabs, runs of pages of
//! one class; larger ones get runs of whole pages. Runs are taken best fit,
//! lowest address first, from the arena's free runs (coalesced), else from
//! the top of a heap. A freed run is dirty (its pages are still resident);
//! when the dirty pages of an arena exceed an eighth of its active pages
//! (jemalloc 4's `opt.lg_dirty_mult` 3) every dirty run is purged with
//! MADV_DONTNEED, and later reused.
//!
//! Every thread runs three phases, one after the other for all threads
//! (the scheduler interleaves the threads within each): it allocates until
//! it holds its share of `live` bytes; it replaces objects (frees a random
//! one, allocates a new one) `ops` times; it frees random objects until it
//! holds a quarter of its share (a load that drops). Every allocated byte
//! is written (a store per 64-byte line, or per line of a machine whose
//! lines are shorter), every free writes the object's
//! first word (the allocator's free-list link).
//!
//! The figure is the memory resident at the end (pages in memory objects,
//! `MemoryReport`'s resident) over the bytes the program still holds: live
//! objects are scattered over slabs that cannot be returned, and what a
//! policy does with purged pages (Linux frees them at MADV_DONTNEED;
//! FreeBSD's MADV_DONTNEED only lowers their priority, so they stay
//! resident until memory runs short) changes it.

use crate::common::{exit, fault, line_step, map, mib, size_text, spawn_on, step_of, Batch, Rng, LINE};
use crate::sched::{Phase, Quanta, Sched, Spawn, Step, Task};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::pmap::Advice;
use splab_vm::prot;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::rc::Rc;

/// The largest small size class: objects up to it share slabs.
const SMALL_MAX: u64 = 8 << 10;
/// The largest object the workload allocates.
pub const LARGE_MAX: u64 = 256 << 10;
/// Objects per slab, at least (a slab is the least number of pages that
/// holds this many).
const SLAB_OBJECTS: u64 = 16;
/// Purge when dirty pages exceed active pages / 2^this.
const LG_DIRTY_MULT: u32 = 3;

#[derive(Debug)]
pub struct Arenas {
    /// Threads, each with its own arena; None: one per CPU.
    pub threads: Option<usize>,
    /// Bytes the threads hold together after growing.
    pub live: u64,
    /// Replacements (a free and an allocation) per thread.
    pub ops: u64,
    /// Bytes of each heap an arena maps.
    pub heap: u64,
    pub quanta: Quanta,
    pub seed: u64,
}

impl Arenas {
    pub fn new(threads: Option<usize>, live: u64, ops: u64, heap: u64) -> Result<Arenas, String> {
        if let Some(t) = threads {
            if !(1..=256).contains(&t) {
                return Err(format!("--threads {t} is out of range (1 to 256)"));
            }
        }
        if live < 1 << 20 {
            return Err(format!("--live {}: at least 1M", size_text(live)));
        }
        if ops > 1 << 32 {
            return Err(format!("--ops {ops} is out of range (0 to 2^32)"));
        }
        if !(16 * LARGE_MAX..=1 << 40).contains(&heap) {
            return Err(format!("--heap {}: from {} to 1T", size_text(heap), size_text(16 * LARGE_MAX)));
        }
        Ok(Arenas { threads, live, ops, heap, quanta: Quanta::default(), seed: 1 })
    }
}

/// The size class of a request of `size` bytes, jemalloc's spacing:
/// multiples of 16 up to 128 bytes, then four classes per doubling.
pub fn size_class(size: u64) -> u64 {
    if size <= 16 {
        return 16;
    }
    let k = 63 - (size - 1).leading_zeros();
    let step = (1u64 << (k - 2)).max(16);
    size.div_ceil(step) * step
}

/// A request size from the workload's mix: 80 % small (16 B to 1 KB),
/// 18 % medium (1 KB to 16 KB), 2 % large (16 KB to 256 KB), each
/// log-uniform within its range.
fn request_size(rng: &mut Rng) -> u64 {
    let r = rng.below(100);
    let (lo, hi) = if r < 80 {
        (16.0f64, 1024.0f64)
    } else if r < 98 {
        (1024.0, 16384.0)
    } else {
        (16384.0, LARGE_MAX as f64)
    };
    let u = rng.below(1 << 20) as f64 / (1u64 << 20) as f64;
    ((lo.ln() + u * (hi.ln() - lo.ln())).exp() as u64).clamp(16, LARGE_MAX)
}

/// One heap: a mapping handed out from the bottom up; free runs of pages
/// below its top, coalesced, indexed by place and by size; which of its
/// pages are dirty (freed, not purged).
struct Heap {
    va: u64,
    pages: u64,
    top: u64,
    by_off: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    dirty: Vec<u64>,
}

impl Heap {
    fn new(va: u64, pages: u64) -> Heap {
        Heap { va, pages, top: 0, by_off: BTreeMap::new(), by_size: BTreeSet::new(), dirty: vec![0; pages.div_ceil(64) as usize] }
    }

    fn is_dirty(&self, p: u64) -> bool {
        self.dirty[(p / 64) as usize] & (1 << (p % 64)) != 0
    }

    fn set_dirty(&mut self, p: u64, d: bool) {
        let (w, b) = ((p / 64) as usize, 1u64 << (p % 64));
        if d {
            self.dirty[w] |= b;
        } else {
            self.dirty[w] &= !b;
        }
    }

    fn insert(&mut self, off: u64, n: u64) {
        self.by_off.insert(off, n);
        self.by_size.insert((n, off));
    }

    fn remove(&mut self, off: u64, n: u64) {
        self.by_off.remove(&off);
        self.by_size.remove(&(n, off));
    }

    /// A run of `n` pages, best fit lowest address, else from the top;
    /// returns its first page and how many of its pages were dirty.
    fn alloc(&mut self, n: u64) -> Option<(u64, u64)> {
        let off = if let Some(&(len, off)) = self.by_size.range((n, 0)..).next() {
            self.remove(off, len);
            if len > n {
                self.insert(off + n, len - n);
            }
            off
        } else if self.top + n <= self.pages {
            self.top += n;
            self.top - n
        } else {
            return None;
        };
        let mut dirty = 0;
        for p in off..off + n {
            if self.is_dirty(p) {
                dirty += 1;
                self.set_dirty(p, false);
            }
        }
        Some((off, dirty))
    }

    /// Frees a run: its pages become dirty; it joins its free neighbours.
    fn free(&mut self, off: u64, n: u64) {
        for p in off..off + n {
            self.set_dirty(p, true);
        }
        let (mut s, mut e) = (off, off + n);
        if let Some((&po, &pn)) = self.by_off.range(..off).next_back() {
            if po + pn == off {
                self.remove(po, pn);
                s = po;
            }
        }
        if let Some(&nn) = self.by_off.get(&e) {
            self.remove(e, nn);
            e += nn;
        }
        self.insert(s, e - s);
    }

    /// The dirty stretches of the free runs, as (first page, pages); they
    /// are clean afterwards.
    fn take_dirty(&mut self) -> Vec<(u64, u64)> {
        let runs: Vec<(u64, u64)> = self.by_off.iter().map(|(&o, &n)| (o, n)).collect();
        let mut out = Vec::new();
        for (o, n) in runs {
            let mut p = o;
            while p < o + n {
                if !self.is_dirty(p) {
                    p += 1;
                    continue;
                }
                let s = p;
                while p < o + n && self.is_dirty(p) {
                    self.set_dirty(p, false);
                    p += 1;
                }
                out.push((s, p - s));
            }
        }
        out
    }
}

/// A slab: a run of pages holding objects of one size class.
struct Slab {
    heap: usize,
    off: u64,
    pages: u64,
    class: u64,
    /// Free slots, the lowest last (taken first).
    free: Vec<u32>,
    slots: u32,
}

#[derive(Clone, Copy)]
enum Where {
    /// In the slab starting at this address, at this slot.
    Slab(u64, u32),
    /// A run of its own: heap, first page, pages.
    Run(usize, u64, u64),
}

struct Obj {
    va: u64,
    size: u64,
    at: Where,
}

/// What an arena has done, summed into the report.
#[derive(Clone, Copy, Default)]
struct Counts {
    allocs: u64,
    frees: u64,
    purges: u64,
    purged_pages: u64,
    reused_dirty_pages: u64,
}

/// One thread's arena and the objects it holds.
struct Arena {
    pid: Pid,
    page: u64,
    heap_bytes: u64,
    heaps: Vec<Heap>,
    slabs: HashMap<u64, Slab>,
    /// Slabs with a free slot, per size class, by address.
    nonfull: BTreeMap<u64, BTreeSet<u64>>,
    live: Vec<Obj>,
    live_bytes: u64,
    active_pages: u64,
    dirty_pages: u64,
    rng: Rng,
    c: Counts,
}

impl Arena {
    fn new(pid: Pid, page: u64, heap_bytes: u64, seed: u64) -> Arena {
        Arena {
            pid,
            page,
            heap_bytes,
            heaps: Vec::new(),
            slabs: HashMap::new(),
            nonfull: BTreeMap::new(),
            live: Vec::new(),
            live_bytes: 0,
            active_pages: 0,
            dirty_pages: 0,
            rng: Rng::new(seed),
            c: Counts::default(),
        }
    }

    /// A run of `n` pages from the first heap with room, mapping a new
    /// heap when none has.
    fn run(&mut self, sys: &mut System, n: u64) -> Result<(usize, u64), String> {
        let mut got = self.heaps.iter_mut().enumerate().find_map(|(i, h)| h.alloc(n).map(|r| (i, r)));
        if got.is_none() {
            let va = map(sys, self.pid, MmapReq::anon(self.heap_bytes, prot::RW), "an arena heap")?;
            let mut h = Heap::new(va, self.heap_bytes / self.page);
            let r = h.alloc(n).ok_or_else(|| format!("arenas: a run of {n} pages does not fit a heap"))?;
            self.heaps.push(h);
            got = Some((self.heaps.len() - 1, r));
        }
        let (i, (off, dirty)) = got.expect("a run");
        self.dirty_pages -= dirty;
        self.c.reused_dirty_pages += dirty;
        self.active_pages += n;
        Ok((i, off))
    }

    fn free_run(&mut self, heap: usize, off: u64, n: u64) {
        self.heaps[heap].free(off, n);
        self.active_pages -= n;
        self.dirty_pages += n;
    }

    /// Purges every dirty run once they exceed the arena's share of its
    /// active pages (the caller has flushed its accesses).
    fn maybe_purge(&mut self, sys: &mut System) -> Result<(), String> {
        if self.dirty_pages <= self.active_pages >> LG_DIRTY_MULT {
            return Ok(());
        }
        self.c.purges += 1;
        for h in &mut self.heaps {
            for (s, n) in h.take_dirty() {
                sys.madvise(self.pid, h.va + s * self.page, n * self.page, Advice::DontNeed).map_err(|e| format!("arenas: madvise(MADV_DONTNEED) of {n} pages: {e}"))?;
                self.c.purged_pages += n;
                self.dirty_pages -= n;
            }
        }
        Ok(())
    }

    /// Allocates `size` bytes and writes every line of them.
    fn alloc(&mut self, sys: &mut System, b: &mut Batch, size: u64) -> Result<(), String> {
        let class = size_class(size);
        let (va, at) = if class <= SMALL_MAX {
            let slab_va = match self.nonfull.get(&class).and_then(|s| s.first().copied()) {
                Some(va) => va,
                None => {
                    let pages = (SLAB_OBJECTS * class).div_ceil(self.page);
                    let (heap, off) = self.run(sys, pages)?;
                    let slots = (pages * self.page / class) as u32;
                    let va = self.heaps[heap].va + off * self.page;
                    self.slabs.insert(va, Slab { heap, off, pages, class, free: (0..slots).rev().collect(), slots });
                    self.nonfull.entry(class).or_default().insert(va);
                    va
                }
            };
            let slab = self.slabs.get_mut(&slab_va).expect("a non-full slab exists");
            let slot = slab.free.pop().expect("a non-full slab has a free slot");
            if slab.free.is_empty() {
                self.nonfull.get_mut(&class).expect("the class has slabs").remove(&slab_va);
            }
            (slab_va + slot as u64 * class, Where::Slab(slab_va, slot))
        } else {
            let pages = class.div_ceil(self.page);
            let (heap, off) = self.run(sys, pages)?;
            (self.heaps[heap].va + off * self.page, Where::Run(heap, off, pages))
        };
        let (mut a, step) = (va, line_step(sys));
        while a < va + size {
            b.store(sys, a, 1).map_err(fault("arenas: writing an object"))?;
            a = (a & !(step - 1)) + step;
        }
        self.live.push(Obj { va, size, at });
        self.live_bytes += size;
        self.c.allocs += 1;
        Ok(())
    }

    /// Frees a random live object (its first word written: the free list).
    fn free_random(&mut self, sys: &mut System, b: &mut Batch) -> Result<(), String> {
        if self.live.is_empty() {
            return Ok(());
        }
        let i = self.rng.below(self.live.len() as u64) as usize;
        let o = self.live.swap_remove(i);
        self.live_bytes -= o.size;
        self.c.frees += 1;
        b.store(sys, o.va, 0).map_err(fault("arenas: freeing an object"))?;
        let freed = match o.at {
            Where::Slab(slab_va, slot) => {
                let s = self.slabs.get_mut(&slab_va).expect("a live object's slab exists");
                s.free.push(slot);
                let class = s.class;
                if s.free.len() == 1 {
                    self.nonfull.entry(class).or_default().insert(slab_va);
                }
                if s.free.len() as u32 == s.slots {
                    let s = self.slabs.remove(&slab_va).expect("the slab");
                    self.nonfull.get_mut(&class).expect("the class has slabs").remove(&slab_va);
                    Some((s.heap, s.off, s.pages))
                } else {
                    None
                }
            }
            Where::Run(h, off, n) => Some((h, off, n)),
        };
        if let Some((h, off, n)) = freed {
            self.free_run(h, off, n);
            b.flush(sys).map_err(fault("arenas: freeing an object"))?;
            self.maybe_purge(sys)?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Grow,
    Churn,
    Shrink,
}

/// A thread running one stage, a quantum at a time.
struct Thread {
    arena: Rc<RefCell<Arena>>,
    stage: Stage,
    target: u64,
    ops_left: u64,
}

impl Task for Thread {
    fn pid(&self) -> Pid {
        self.arena.borrow().pid
    }
    fn step(&mut self, sys: &mut System, cpu: usize, budget: u64, _: &mut Vec<Spawn>) -> Result<Step, String> {
        let mut a = self.arena.borrow_mut();
        let mut b = Batch::new(cpu);
        let mut done = false;
        while b.refs + b.pending() < budget {
            match self.stage {
                Stage::Grow if a.live_bytes < self.target => {
                    let s = request_size(&mut a.rng);
                    a.alloc(sys, &mut b, s)?;
                }
                Stage::Churn if self.ops_left > 0 => {
                    a.free_random(sys, &mut b)?;
                    let s = request_size(&mut a.rng);
                    a.alloc(sys, &mut b, s)?;
                    self.ops_left -= 1;
                }
                Stage::Shrink if a.live_bytes > self.target => a.free_random(sys, &mut b)?,
                _ => {
                    done = true;
                    break;
                }
            }
        }
        b.flush(sys).map_err(fault("arenas: an object"))?;
        // A stage that is over makes at least one reference's progress.
        Ok(Step { refs: b.refs.max(1), done })
    }
}

/// The state after a stage.
struct Snap {
    stage: &'static str,
    live: u64,
    active: u64,
    dirty: u64,
    resident: u64,
    seconds: f64,
}

impl Workload for Arenas {
    fn name(&self) -> String {
        let t = self.threads.map_or("a thread per CPU".to_string(), |t| format!("{t} threads"));
        format!("arenas({t}, {} live, {} replacements each)", size_text(self.live), self.ops)
    }

    fn estimated_refs(&self, line: u64) -> u64 {
        // About 40 64-byte lines per object on average (the size mix's
        // mean is about 2.4 KB); 4 threads is the default profile's.
        let per = 40 * LINE / step_of(line);
        let objs = self.live / 2400;
        objs * per * 2 + self.threads.unwrap_or(4) as u64 * self.ops * (per + 1)
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let ncpus = sys.ncpus();
        let threads = self.threads.unwrap_or(ncpus);
        let page = sys.page_size();
        if !self.heap.is_multiple_of(page) {
            return Err(format!("--heap {}: not a multiple of the {} page", size_text(self.heap), size_text(page)));
        }
        let resident = |sys: &System| sys.kernel().phys.object_pages * page;
        let base = resident(sys);
        let pid = spawn_on(sys, 0)?;
        let share = self.live / threads as u64;
        let arenas: Vec<Rc<RefCell<Arena>>> =
            (0..threads).map(|i| Rc::new(RefCell::new(Arena::new(pid, page, self.heap, self.seed.wrapping_mul(1000).wrapping_add(i as u64))))).collect();
        let mut snaps = Vec::new();
        let mut refs = 0;
        let mut timed = 0.0;
        for (stage, name, target) in [(Stage::Grow, "grown", share), (Stage::Churn, "churned", share), (Stage::Shrink, "shrunk", share / 4)] {
            let mut s = Sched::new(ncpus, self.quanta)?;
            for (i, a) in arenas.iter().enumerate() {
                s.add(Some(i % ncpus), Box::new(Thread { arena: a.clone(), stage, target, ops_left: self.ops }))?;
            }
            let ph: Phase = s.run(sys, refs, progress)?;
            refs += ph.refs;
            timed += ph.seconds(sys);
            let sum = |f: fn(&Arena) -> u64| arenas.iter().map(|a| f(&a.borrow())).sum::<u64>();
            snaps.push(Snap {
                stage: name,
                live: sum(|a| a.live_bytes),
                active: sum(|a| a.active_pages) * page,
                dirty: sum(|a| a.dirty_pages) * page,
                resident: resident(sys).saturating_sub(base),
                seconds: timed,
            });
        }
        let c = arenas.iter().fold(Counts::default(), |mut c, a| {
            let a = a.borrow().c;
            c.allocs += a.allocs;
            c.frees += a.frees;
            c.purges += a.purges;
            c.purged_pages += a.purged_pages;
            c.reused_dirty_pages += a.reused_dirty_pages;
            c
        });
        let heaps: usize = arenas.iter().map(|a| a.borrow().heaps.len()).sum();
        exit(sys, pid)?;
        let end = snaps.last().expect("three stages");
        let ratio = end.resident as f64 / end.live.max(1) as f64;
        let churned = &snaps[1];
        let mut r = String::new();
        let _ = writeln!(
            r,
            "arenas: {threads} threads on {ncpus} CPUs, an arena each ({heaps} heaps of {} mapped), {} live at most (simulated)",
            size_text(self.heap),
            size_text(self.live)
        );
        let _ = writeln!(r, "{:>8} {:>10} {:>12} {:>10} {:>12} {:>10} {:>10}", "stage", "live MB", "in runs MB", "dirty MB", "resident MB", "res/live", "time (s)");
        for s in &snaps {
            let _ = writeln!(
                r,
                "{:>8} {:>10.1} {:>12.1} {:>10.1} {:>12.1} {:>9.2}x {:>10.4}",
                s.stage,
                mib(s.live),
                mib(s.active),
                mib(s.dirty),
                mib(s.resident),
                s.resident as f64 / s.live.max(1) as f64,
                s.seconds
            );
        }
        let ops = (c.allocs + c.frees) as f64 / timed;
        let _ = writeln!(
            r,
            "{} allocations, {} frees ({:.3} M/s); {} purges returned {} with MADV_DONTNEED; {} of dirty pages reused",
            c.allocs,
            c.frees,
            ops / 1e6,
            c.purges,
            size_text(c.purged_pages * page),
            size_text(c.reused_dirty_pages * page)
        );
        let d = Figure::new;
        Ok(WorkloadResult {
            figure: d("resident / live at the end", ratio, "x", false),
            details: vec![
                d("live MB at the end", mib(end.live), "MB", true),
                d("resident MB at the end", mib(end.resident), "MB", false),
                d("resident / live after churn", churned.resident as f64 / churned.live.max(1) as f64, "x", false),
                d("allocations+frees per s (M)", ops / 1e6, "M/s", true),
                d("purged MB", mib(c.purged_pages * page), "MB", false),
            ],
            report: r,
            timed_seconds: timed,
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
    fn size_classes_are_jemallocs() {
        let classes: Vec<u64> = [1, 16, 17, 33, 40, 48, 49, 64, 65, 100, 1000, 4097].iter().map(|&s| size_class(s)).collect();
        assert_eq!(classes, [16, 16, 32, 48, 48, 48, 64, 64, 80, 112, 1024, 5120]);
    }

    #[test]
    fn heap_runs_coalesce_and_are_reused_best_fit() {
        let mut h = Heap::new(0, 64);
        assert_eq!(h.alloc(4), Some((0, 0)));
        assert_eq!(h.alloc(4), Some((4, 0)));
        assert_eq!(h.alloc(4), Some((8, 0)));
        h.free(0, 4);
        h.free(8, 4);
        h.free(4, 4);
        assert_eq!(h.by_off.len(), 1, "three neighbours make one run");
        assert_eq!(h.alloc(2), Some((0, 2)), "two dirty pages reused");
        assert_eq!(h.take_dirty(), vec![(2, 10)]);
        assert_eq!(h.alloc(70), None);
    }

    #[test]
    fn bad_options_are_named() {
        assert!(Arenas::new(Some(0), 64 << 20, 10, 64 << 20).unwrap_err().contains("--threads 0"));
        assert!(Arenas::new(None, 1000, 10, 64 << 20).unwrap_err().contains("--live"));
        assert!(Arenas::new(None, 64 << 20, 10, 1 << 20).unwrap_err().contains("--heap 1m"));
    }

    /// Linux frees purged pages at once; FreeBSD's MADV_DONTNEED leaves
    /// them resident; either way the program holds a quarter of what it
    /// grew to, and the run is deterministic.
    #[test]
    fn resident_follows_the_policys_dontneed() {
        let run = |policy: &str| {
            let mut sys = system(policy);
            let mut a = Arenas::new(Some(2), 8 << 20, 2000, 64 << 20).unwrap();
            let r = a.run(&mut sys, &mut |_| {}).unwrap();
            (r.figure.value, r.details[0].value, r.details[4].value, r.report)
        };
        let (fb, live, purged, rep) = run("freebsd");
        assert!(live > 1.8 && live <= 2.0, "a quarter of 4 MB per thread, two threads: {rep}");
        assert!(purged > 0.0, "{rep}");
        assert!(fb > 2.0, "freed pages stay resident under FreeBSD's MADV_DONTNEED: {rep}");
        let (never, _, _, rep2) = run("linux-thp:never");
        assert!(never < fb && never > 1.0, "{rep2}");
        assert_eq!(run("freebsd").3, rep);
    }

    /// On the Alpha (8 KB pages, 4 MB superpages) runs are whole 8 KB
    /// pages and Shimizu's eager superpages make more resident at most.
    #[test]
    fn runs_on_8k_pages() {
        let run = |policy: &str| {
            let mut sys = test_system("alpha-21264", policy);
            let r = Arenas::new(Some(1), 4 << 20, 500, 16 << 20).unwrap().run(&mut sys, &mut |_| {}).unwrap();
            (r, sys.memory_report().resident_peak_bytes)
        };
        let ((fb, fb_peak), (sh, sh_peak)) = (run("freebsd"), run("shimizu"));
        assert!(fb.figure.value > 1.0, "{}", fb.report);
        assert!(sh_peak > fb_peak, "{fb_peak} {sh_peak}\n{}\n{}", fb.report, sh.report);
    }
}
