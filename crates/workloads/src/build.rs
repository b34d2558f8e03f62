//! A parallel build of a source tree, `make -jN`: many short-lived
//! processes on several CPUs. The measure is the build's completion time
//! (lower is better), printed the way time(1) prints it.
//!
//! What runs, all deterministic from a seed:
//! - `make` maps its binary and an 8 MB heap, reads the makefiles (touches
//!   the heap), then forks one compiler per source file, at most `jobs` at
//!   a time, updating its job table (writes to its heap) after each fork:
//!   fork write-protects the heap, so these writes take copy-on-write
//!   faults while children still share it.
//! - Each compiler execs (its inherited address space goes), maps the
//!   compiler's text and libc privately, the compiler's data segment
//!   privately writable (copy-on-write on first write), a stack and a heap
//!   (anonymous), its source file and headers shared read-only, and its
//!   object file shared writable; it writes part of its data segment,
//!   reads the source and headers, then grows and works its heap in steps
//!   (first touches, random reads and writes, calls into the hot part of
//!   the compiler's text, and after each step an eighth of the compile's
//!   instruction work), writes the object file and exits. The instruction
//!   work is measured on GCC (`INSNS_PER_SOURCE_BYTE` says how), in
//!   proportion to the unit's source, and dispatched at the profile's `[core]
//!   width`; the memory references of that work are the
//!   heap and text accesses above, far fewer than a real compiler makes.
//!   make's and the linker's own instructions are not modelled.
//! - When every compiler has exited, the link: a process with one thread
//!   per CPU that maps the output file shared writable; each thread maps
//!   its share of the object files, copies them into the output and
//!   unmaps them while the other threads run, so every munmap must reach
//!   the TLBs of the other CPUs (shootdown IPIs).
//!
//! The toolchain, headers and sources are in the page cache when the build
//! starts (read once beforehand, untimed), as on a machine that has built
//! before; object files and the output are new.

use crate::common::{between, exit, fault, file_req, map, spawn_on, touch_pages, unmap, Batch, Rng, PAGE};
use crate::sched::{Quanta, Sched, Spawn};
use crate::script::{Act, Child, End, Job, Parent, Region, Script, ScriptTask};
use crate::{Figure, Workload, WorkloadResult};
use splab_sim::System;
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::prot;
use std::cell::Cell;
use std::fmt::Write as _;
use std::rc::Rc;

pub struct Build {
    pub units: usize,
    /// Jobs at once (make -j); None: one per CPU.
    pub jobs: Option<usize>,
    pub quanta: Quanta,
    pub seed: u64,
    /// `--insns-per-source-byte`: a compile's instructions per byte of its
    /// source (`INSNS_PER_SOURCE_BYTE`; 0: none).
    pub insns_per_source_byte: u64,
}

/// Instructions of a compile (the gcc driver, cc1 and as) per byte of the
/// source file, measured with Debian's GCC 12.2 on x86-64: `valgrind
/// --tool=callgrind --cache-sim=yes --trace-children=yes gcc -O2 -c` of
/// five of liblzma's C files (as liblzma-sys 0.4.9 builds them, with its
/// config.h), the processes' `totals:` Ir summed, over the file's bytes:
///
/// | file                    |  bytes |  instructions | per byte |
/// |-------------------------|--------|---------------|----------|
/// | lz/lz_encoder.c         |  17984 |   403 657 683 |    22445 |
/// | common/index.c          |  39808 | 1 012 151 084 |    25425 |
/// | common/stream_decoder.c |  12990 |   305 849 765 |    23545 |
/// | lzma/lzma_encoder.c     |  22318 | 1 144 481 384 |    51280 |
/// | lzma/lzma_decoder.c     |  33910 | 1 817 903 642 |    53609 |
/// | all five                | 127010 | 4 684 043 558 |    36879 |
///
/// The constant is the last line, the sum of the instructions over the
/// sum of the bytes; per file it is 22445 to 53609 (the coders inline
/// much). cc1 is almost all of it: the driver makes 1.6 million, as 6 to
/// 24 million. The data references (Dr + Dw) are 15101 a source byte, and
/// cc1's peak resident set for these files (`/usr/bin/time -f %M gcc -O2
/// -c`) is 33 to 45 MB.
pub const INSNS_PER_SOURCE_BYTE: u64 = 36_879;

impl Build {
    pub fn new(units: usize, jobs: Option<usize>) -> Result<Build, String> {
        if !(1..=100_000).contains(&units) {
            return Err(format!("--units {units} is out of range (1 to 100000)"));
        }
        if let Some(j) = jobs {
            if !(1..=1024).contains(&j) {
                return Err(format!("--jobs {j} is out of range (1 to 1024)"));
            }
        }
        Ok(Build { units, jobs, quanta: Quanta::default(), seed: 1, insns_per_source_byte: INSNS_PER_SOURCE_BYTE })
    }

    /// `--insns-per-source-byte`, checked.
    pub fn set_insns_per_source_byte(&mut self, n: u64) -> Result<(), String> {
        if n > 10_000_000 {
            return Err(format!("--insns-per-source-byte {n} is out of range (0 to 10000000)"));
        }
        self.insns_per_source_byte = n;
        Ok(())
    }

    /// Memory the build needs at most (page cache of the tree plus the
    /// compilers running at once), for a check before it starts.
    pub fn footprint(&self, ncpus: usize) -> u64 {
        let jobs = self.jobs.unwrap_or(ncpus) as u64;
        let tree = 64 << 20;
        tree + self.units as u64 * (3 * (128 << 10)) + jobs * (MAX_HEAP + (4 << 20))
    }
}

/// Sizes of the toolchain files.
const CC_TEXT: u64 = 32 << 20;
const CC_DATA: u64 = 2 << 20;
const LIBC: u64 = 2 << 20;
const LD_TEXT: u64 = 8 << 20;
const MAKE_TEXT: u64 = 512 << 10;
const MAKE_HEAP: u64 = 8 << 20;
const STACK: u64 = 1 << 20;
const HEADERS: usize = 64;
const HEADERS_PER_UNIT: usize = 16;
/// A compiler's heap: 256 bytes per source byte, within these bounds.
const MIN_HEAP: u64 = 2 << 20;
const MAX_HEAP: u64 = 32 << 20;
/// Steps in which a compiler grows and works its heap.
const HEAP_STEPS: u64 = 8;

/// A file: its id and size.
#[derive(Clone, Copy)]
struct File {
    id: u32,
    size: u64,
}

struct Unit {
    src: File,
    obj: File,
    heap: u64,
    headers: Vec<usize>,
}

/// The source tree and toolchain as files.
struct Tree {
    cc: File,
    cc_data: File,
    libc: File,
    ld: File,
    make: File,
    headers: Vec<File>,
    units: Vec<Unit>,
    out: File,
    /// Offsets of each object in the output.
    out_off: Vec<u64>,
    hot_cc: Rc<Vec<u32>>,
    hot_libc: Rc<Vec<u32>>,
    hot_ld: Rc<Vec<u32>>,
}

/// A quarter of a text's pages, chosen at random: the part a run uses.
fn hot_pages(rng: &mut Rng, size: u64) -> Rc<Vec<u32>> {
    let pages = (size / PAGE) as u32;
    Rc::new((0..pages).filter(|_| rng.below(4) == 0).collect())
}

impl Tree {
    fn new(sys: &mut System, units: usize, seed: u64) -> Tree {
        let mut rng = Rng::new(seed);
        let mut file = |size: u64| File { id: sys.create_file(size), size };
        let (cc, cc_data, libc, ld, make) = (file(CC_TEXT), file(CC_DATA), file(LIBC), file(LD_TEXT), file(MAKE_TEXT));
        let headers: Vec<File> = (0..HEADERS).map(|_| file(between(&mut rng, 2, 16) * PAGE)).collect();
        let mut list = Vec::new();
        let mut out_off = Vec::new();
        let mut out = 0;
        for _ in 0..units {
            // Sources of 8 KB to 128 KB, more small ones than large.
            let src = (8 << 10) << rng.below(5);
            let src = src + rng.below(src) / PAGE * PAGE;
            let obj = (src * 3 / 2).div_ceil(PAGE) * PAGE;
            let heap = (src * 256).clamp(MIN_HEAP, MAX_HEAP) / PAGE * PAGE;
            let mut hs: Vec<usize> = Vec::new();
            while hs.len() < HEADERS_PER_UNIT {
                let h = rng.below(HEADERS as u64) as usize;
                if !hs.contains(&h) {
                    hs.push(h);
                }
            }
            out_off.push(out);
            out += obj;
            list.push(Unit { src: file(src), obj: file(obj), heap, headers: hs });
        }
        let out = file(out);
        let (hot_cc, hot_libc, hot_ld) = (hot_pages(&mut rng, CC_TEXT), hot_pages(&mut rng, LIBC), hot_pages(&mut rng, LD_TEXT));
        Tree { cc, cc_data, libc, ld, make, headers, units: list, out, out_off, hot_cc, hot_libc, hot_ld }
    }

    /// Reads the toolchain, headers and sources into the page cache.
    fn warm(&self, sys: &mut System) -> Result<(), String> {
        let pid = spawn_on(sys, 0)?;
        let mut b = Batch::new(0);
        let files = [self.cc, self.cc_data, self.libc, self.ld, self.make].into_iter().chain(self.headers.iter().copied()).chain(self.units.iter().map(|u| u.src));
        for f in files {
            let va = map(sys, pid, file_req(f.id, f.size, prot::READ, false), "warming the page cache")?;
            touch_pages(sys, &mut b, va, f.size, None).map_err(fault("warming the page cache"))?;
            unmap(sys, pid, va, f.size, "warming the page cache")?;
        }
        exit(sys, pid)
    }
}

const TEXT: u8 = prot::READ | prot::EXEC;

/// A compiler's script (slots: 0 text, 1 data, 2 libc, 3 stack, 4 heap,
/// 5 source, 6 object, 7.. headers); `insns`: its instructions.
fn compile(t: &Tree, u: &Unit, insns: u64) -> Vec<Act> {
    let mut a = vec![
        Act::Exec,
        Act::Map { slot: 0, req: file_req(t.cc.id, t.cc.size, TEXT, false), what: "compiler text" },
        Act::Map { slot: 1, req: file_req(t.cc_data.id, t.cc_data.size, prot::RW, false), what: "compiler data" },
        Act::Map { slot: 2, req: file_req(t.libc.id, t.libc.size, TEXT, false), what: "libc" },
        Act::Map { slot: 3, req: MmapReq::anon(STACK, prot::RW), what: "stack" },
        Act::Map { slot: 4, req: MmapReq::anon(u.heap, prot::RW), what: "compiler heap" },
        Act::Map { slot: 5, req: file_req(u.src.id, u.src.size, prot::READ, true), what: "source file" },
        Act::Map { slot: 6, req: file_req(u.obj.id, u.obj.size, prot::RW, true), what: "object file" },
    ];
    for (k, &h) in u.headers.iter().enumerate() {
        let f = t.headers[h];
        a.push(Act::Map { slot: 7 + k, req: file_req(f.id, f.size, prot::READ, true), what: "header" });
    }
    a.push(Act::Hot { slot: 2, pages: t.hot_libc.clone(), count: 512 });
    // Relocations and initialised data: half the data segment written.
    a.push(Act::Seq { slot: 1, off: 0, len: Some(CC_DATA / 2), stride: PAGE, store: true });
    a.push(Act::Seq { slot: 3, off: STACK - (64 << 10), len: None, stride: PAGE, store: true });
    a.push(Act::sweep(5, 64, false));
    for k in 0..u.headers.len() {
        a.push(Act::sweep(7 + k, 64, false));
    }
    let step = u.heap / HEAP_STEPS;
    for s in 0..HEAP_STEPS {
        a.push(Act::Seq { slot: 4, off: s * step, len: Some(step), stride: PAGE, store: true });
        a.push(Act::Random { slot: 4, count: 16 * step / PAGE, stores: 80, within: Some((s + 1) * step) });
        a.push(Act::Hot { slot: 0, pages: t.hot_cc.clone(), count: 1024 });
        let share = insns / HEAP_STEPS + if s + 1 == HEAP_STEPS { insns % HEAP_STEPS } else { 0 };
        if share > 0 {
            a.push(Act::Work { instructions: share });
        }
    }
    a.push(Act::sweep(6, 64, true));
    a
}

/// One link thread's share (slots: 0 ld text, 1 output, 2 the object in
/// hand).
fn link_share(t: &Tree, thread: usize, threads: usize) -> Vec<Act> {
    let mut a = Vec::new();
    for (i, u) in t.units.iter().enumerate().filter(|(i, _)| i % threads == thread) {
        a.push(Act::Map { slot: 2, req: file_req(u.obj.id, u.obj.size, prot::READ, false), what: "object file" });
        a.push(Act::sweep(2, 64, false));
        a.push(Act::Seq { slot: 1, off: t.out_off[i], len: Some(u.obj.size), stride: 64, store: true });
        a.push(Act::Hot { slot: 0, pages: t.hot_ld.clone(), count: 256 });
        a.push(Act::Unmap { slot: 2 });
    }
    a
}

/// The link: forked from make, one thread per CPU.
fn link(t: Rc<Tree>, ncpus: usize) -> Child {
    Box::new(move |pid: Pid, running: Rc<Cell<usize>>| {
        let live = Rc::new(Cell::new(ncpus));
        let (tt, lv, rn) = (t.clone(), live.clone(), running.clone());
        // The main thread maps what all threads share, then starts the
        // others with the same regions.
        let start: crate::script::Call = Box::new(move |slots: &[Region], spawned: &mut Vec<Spawn>| {
            for th in 1..ncpus {
                let script = Script::new(link_share(&tt, th, ncpus), slots.to_vec(), 0x11D ^ th as u64);
                let task = ScriptTask { pid, script, end: End::Thread(lv.clone()), running: Some(rn.clone()) };
                spawned.push(Spawn { cpu: Some(th), task: Box::new(task) });
            }
            Ok(())
        });
        let mut acts = vec![
            Act::Exec,
            Act::Map { slot: 0, req: file_req(t.ld.id, t.ld.size, TEXT, false), what: "linker text" },
            Act::Map { slot: 1, req: file_req(t.out.id, t.out.size, prot::RW, true), what: "output file" },
            Act::Call(start),
        ];
        acts.extend(link_share(&t, 0, ncpus));
        let task = ScriptTask { pid, script: Script::new(acts, Vec::new(), 0x11D), end: End::Thread(live), running: Some(running) };
        vec![Spawn { cpu: Some(0), task: Box::new(task) }]
    })
}

/// make's bookkeeping after each fork: its job table and variables.
fn job_table() -> Vec<Act> {
    vec![Act::Random { slot: 1, count: 32, stores: 128, within: None }]
}

impl Workload for Build {
    fn name(&self) -> String {
        match self.jobs {
            Some(j) => format!("build({} units, -j{j})", self.units),
            None => format!("build({} units)", self.units),
        }
    }

    fn estimated_refs(&self, _line: u64) -> u64 {
        self.units as u64 * 80_000
    }

    fn run(&mut self, sys: &mut System, progress: &mut dyn FnMut(u64)) -> Result<WorkloadResult, String> {
        let ncpus = sys.ncpus();
        let jobs = self.jobs.unwrap_or(ncpus);
        let tree = Rc::new(Tree::new(sys, self.units, self.seed));
        tree.warm(sys)?;
        let make_pid = spawn_on(sys, 0)?;
        let before = (sys.breakdown(), sys.events().clone(), sys.vm_stats().clone());
        let make_script = Script::new(
            vec![
                Act::Map { slot: 0, req: file_req(tree.make.id, tree.make.size, TEXT, false), what: "make text" },
                Act::sweep(0, PAGE, false),
                Act::Map { slot: 1, req: MmapReq::anon(MAKE_HEAP, prot::RW), what: "make heap" },
                Act::sweep(1, PAGE, true),
                Act::Random { slot: 1, count: 20_000, stores: 64, within: None },
            ],
            Vec::new(),
            self.seed ^ 0x3A4E,
        );
        let mut list: Vec<Job> = Vec::new();
        for i in 0..self.units {
            let t = tree.clone();
            let seed = self.seed ^ ((i as u64 + 1) << 20);
            let per_byte = self.insns_per_source_byte;
            list.push(Job::Fork(Box::new(move |pid: Pid, running: Rc<Cell<usize>>| {
                let u = &t.units[i];
                let script = Script::new(compile(&t, u, per_byte * u.src.size), Vec::new(), seed);
                vec![Spawn { cpu: None, task: Box::new(ScriptTask { pid, script, end: End::Exit, running: Some(running) }) }]
            })));
        }
        list.push(Job::Wait);
        list.push(Job::Fork(link(tree.clone(), ncpus)));
        let make = Parent::new(make_pid, make_script, list, jobs, job_table);
        let mut sched = Sched::new(ncpus, self.quanta)?;
        sched.add(Some(0), Box::new(make))?;
        let ph = sched.run(sys, 0, progress)?;
        let secs = ph.seconds(sys);
        let after = (sys.breakdown(), sys.events().clone(), sys.vm_stats().clone());
        let hz = sys.cfg.profile.freq_ghz * 1e9;
        let user = (after.0.data + after.0.translation + after.0.core - before.0.data - before.0.translation - before.0.core) / hz;
        let kern = (after.0.kernel - before.0.kernel) / hz;
        let (ev0, ev1) = (&before.1, &after.1);

        let mut r = String::new();
        let _ = writeln!(r, "make -j{jobs}: {} compiler processes and a {ncpus}-thread link on {ncpus} CPUs (simulated)", self.units);
        let _ = writeln!(r, "{:>4}  {:>14}", "CPU", "busy (s, sim)");
        for (c, &cyc) in ph.busy_cycles.iter().enumerate() {
            let _ = writeln!(r, "{c:>4}  {:>14.6}", sys.cycles_to_seconds(cyc));
        }
        let _ = writeln!(r, "forks {}, tasks finished {}, context switches {}", after.2.v_forks - before.2.v_forks, ph.finished, ph.switches);
        let _ = writeln!(
            r,
            "page faults {}, copy-on-write faults {}, TLB shootdown IPIs {}, TLB flushes {}",
            ev1.faults - ev0.faults,
            after.2.v_cow_faults - before.2.v_cow_faults,
            ev1.shootdown_ipis - ev0.shootdown_ipis,
            ev1.tlb_flushes - ev0.tlb_flushes
        );
        let insns: u64 = tree.units.iter().map(|u| self.insns_per_source_byte * u.src.size).sum();
        let _ = writeln!(r, "compiler instructions {insns} ({} per source byte)", self.insns_per_source_byte);
        let _ = writeln!(r, "{secs:>10.4} real {user:>10.4} user {kern:>10.4} sys");
        Ok(WorkloadResult {
            details: Vec::new(),
            figure: Figure { name: "build time (s)".into(), value: secs, unit: "s".into(), higher_is_better: false },
            report: r,
            timed_seconds: secs,
        })
    }
}
