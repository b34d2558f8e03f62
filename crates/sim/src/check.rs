//! `splab check`: random sequences of mmap, munmap, mprotect, madvise,
//! fork, exit, reads and writes over several processes, run on the
//! simulated system and on a plain reference model side by side.
//!
//! With little memory and a swap device (`memory`, `swap`), the same
//! sequences run under memory pressure: pages are reclaimed, laundered to
//! swap and read back, and nothing may change what a read returns. When
//! memory and swap are both exhausted, the system kills a process; the
//! checker then drops it from the model too (its shared-memory writes up
//! to then stay) and carries on.

use serde::Serialize;
use splab_hw::profile::Profile;
use crate::refmodel::{Expect, Kind, RefProc, Store, PAGE};
use crate::access::AccessError;
use crate::system::{Config, System};
use splab_pmap::Arch;
use splab_vm::kernel::Pid;
use splab_vm::map::{Backing, MmapReq};
use splab_vm::{prot, Advice, Errno, FaultError};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

#[derive(Clone, Debug)]
pub struct CheckConfig {
    pub ops: u64,
    pub seed: u64,
    pub arch: Arch,
    pub profile: Profile,
    pub memory: u64,
    /// Swap device size in bytes (0: none).
    pub swap: u64,
    pub superpages: bool,
    /// Most processes alive at once.
    pub max_procs: usize,
    /// The superpage policy (`Config::policy`).
    pub policy: String,
    /// Pmap and policy tunables (name, value) set at boot.
    pub tunables: Vec<(String, String)>,
    /// Most bytes one process maps with 2 MB superpages (times
    /// `size_scale` for larger ones); with `max_procs`, the footprint.
    pub max_mapped: u64,
}

/// The default per-process mapping cap (`CheckConfig::max_mapped`).
pub const DEFAULT_MAX_MAPPED: u64 = 48 << 20;

#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub ops: u64,
    pub mismatches: u64,
    pub stale_translations: u64,
    pub nonzero_fresh_reads: u64,
    /// Invariant checks run, and how many failed.
    pub invariant_checks: u64,
    pub invariant_failures: u64,
    /// Accesses the reference model expected to fault but the system did
    /// not, or the other way round.
    pub fault_disagreements: u64,
    /// Operations by kind.
    pub op_counts: BTreeMap<String, u64>,
    /// Processes the system killed because memory and swap ran out, and
    /// why (vm_pageout_oom's victims).
    pub oom_kills: Vec<splab_vm::OomKill>,
    /// Accesses that failed because their process had been killed.
    pub killed_accesses: u64,
    /// The final sysctls, keyed by name.
    pub sysctl: BTreeMap<String, splab_vm::sysctl::SysctlValue>,
    /// The first few problems found, for diagnosis.
    pub first_problems: Vec<String>,
    pub refs: u64,
}

impl CheckReport {
    /// Whether the run found nothing wrong.
    pub fn clean(&self) -> bool {
        self.mismatches == 0
            && self.stale_translations == 0
            && self.nonzero_fresh_reads == 0
            && self.invariant_failures == 0
            && self.fault_disagreements == 0
    }
}

pub use splab_hw::rng::Rng;

/// The operations and their weights.
const OPS: &[(&str, u64)] = &[
    ("read", 30),
    ("write", 30),
    ("fill", 6),
    ("scan", 3),
    ("mmap_anon", 4),
    ("mmap_shared", 1),
    ("mmap_file", 2),
    ("munmap", 3),
    ("mprotect", 3),
    ("madvise", 2),
    ("fork", 1),
    ("exit", 1),
];

/// With a policy other than FreeBSD's, also MADV_COLLAPSE and
/// MADV_HUGEPAGE/NOHUGEPAGE over random ranges (FreeBSD's runs keep the
/// operation sequence they have always had).
const POLICY_OPS: &[(&str, u64)] = &[("collapse", 1), ("hugepage", 1)];

/// Pages of a 2 MB superpage: the unit the checker's sizes were chosen in.
const SP_2M_PAGES: u64 = 512;

/// How much larger the architecture's first superpage (its reservation)
/// is than 2 MB, at least 1: region sizes, the mapped-bytes limit, file
/// sizes and the default memory grow by this, so that superpages of any
/// size fill, promote and demote.
pub fn size_scale(arch: Arch) -> u64 {
    (arch.superpage_size() / PAGE / SP_2M_PAGES).max(1)
}

struct Driver<'a> {
    sys: System,
    rng: Rng,
    /// Live processes: (pid, reference model).
    procs: Vec<(Pid, RefProc)>,
    files: Vec<(u32, Rc<RefCell<Store>>, u64)>,
    rep: CheckReport,
    cfg: &'a CheckConfig,
    next_value: u64,
    /// Pages of a superpage (reservation) of the architecture, 512 if
    /// smaller.
    sp_pages: u64,
    /// sp_pages / 512, at least 1.
    scale: u64,
    /// The system's base page size: every address and length the driver
    /// picks is a multiple of it.
    page: u64,
    /// Whether the policy gives MADV_DONTNEED Linux's meaning.
    dontneed_frees: bool,
}

fn problem(rep: &mut CheckReport, s: String) {
    if rep.first_problems.len() < 20 {
        rep.first_problems.push(s);
    }
}

impl Driver<'_> {
    fn pick_proc(&mut self) -> usize {
        self.rng.below(self.procs.len() as u64) as usize
    }

    /// Runs process `i` on a random CPU (so several CPUs hold its
    /// translations and invalidations must reach all of them).
    fn schedule(&mut self, i: usize) -> usize {
        let cpu = self.rng.below(self.sys.ncpus() as u64) as usize;
        self.sys.run_on(cpu, self.procs[i].0).expect("live process");
        cpu
    }

    /// A random address: usually inside a region, sometimes just outside.
    fn pick_addr(&mut self, i: usize) -> Option<u64> {
        let rp = &self.procs[i].1;
        if rp.regions.is_empty() {
            return None;
        }
        let k = self.rng.below(rp.regions.len() as u64) as usize;
        let (&s, r) = rp.regions.iter().nth(k).unwrap();
        let end = r.end;
        let w = self.rng.below(self.page / 8) * 8;
        if self.rng.chance(2) {
            return Some(end + w); // maybe unmapped
        }
        let pages = (end - s) / self.page;
        Some(s + self.rng.below(pages) * self.page + w)
    }

    fn value(&mut self) -> u64 {
        self.next_value += 1;
        (self.next_value << 20) | (self.rng.next_u64() & 0xf_ffff) | 1
    }

    /// One load or store by process `i`, checked against the model.
    /// Returns false if the process was killed (it is gone from the model).
    fn access(&mut self, i: usize, cpu: usize, va: u64, write: bool) -> bool {
        let pid = self.procs[i].0;
        let undo = if write { self.procs[i].1.shared_word(va) } else { None };
        let (expect, got) = if write {
            let v = self.value();
            let e = self.procs[i].1.write(va, v);
            (e, self.sys.store(cpu, va, v))
        } else {
            (self.procs[i].1.read(va), self.sys.load(cpu, va))
        };
        if let Err(AccessError::Fault(FaultError::Killed(p))) = got {
            if p == pid && self.sys.oom_kills().iter().any(|k| k.pid == pid) {
                // The store never happened: other sharers must not see it.
                if let Some((store, pg, w, old)) = undo {
                    store.borrow_mut().write(pg, w, old);
                }
                self.rep.killed_accesses += 1;
                self.sync_kills();
                return false;
            }
        }
        match (&expect, got) {
            (Expect::FreshZero, Ok(0)) => {}
            (Expect::FreshZero, Ok(g)) => {
                self.rep.nonzero_fresh_reads += 1;
                problem(&mut self.rep, format!("pid {pid} read {g:#x} from fresh anonymous memory at {va:#x}"));
            }
            (Expect::Value(_) | Expect::ValueOrZero(_), Ok(g)) if expect.accepts(g) => {
                if !write {
                    self.procs[i].1.observe(va, g);
                }
            }
            (Expect::Value(v) | Expect::ValueOrZero(v), Ok(g)) => {
                self.rep.mismatches += 1;
                let or_zero = if matches!(expect, Expect::ValueOrZero(_)) { " or 0" } else { "" };
                problem(&mut self.rep, format!("pid {pid} {} at {va:#x}: expected {v:#x}{or_zero}, got {g:#x}", if write { "write" } else { "read" }));
            }
            (Expect::Unmapped, Err(AccessError::Fault(FaultError::Unmapped(_)))) | (Expect::Protection, Err(AccessError::Fault(FaultError::Protection(_)))) => {}
            (e, g) => {
                self.rep.fault_disagreements += 1;
                problem(&mut self.rep, format!("pid {pid} {} at {va:#x}: model expects {e:?}, system gave {g:?}", if write { "write" } else { "read" }));
            }
        }
        true
    }

    /// Drops processes the system killed for lack of memory from the
    /// model; keeps at least one process alive.
    fn sync_kills(&mut self) {
        let kills = self.sys.oom_kills();
        if kills.len() == self.rep.oom_kills.len() {
            return;
        }
        let new: Vec<splab_vm::OomKill> = kills[self.rep.oom_kills.len()..].to_vec();
        for k in new {
            self.procs.retain(|(p, _)| *p != k.pid);
            self.rep.oom_kills.push(k);
        }
        if self.procs.is_empty() {
            let pid = self.sys.spawn().expect("spawn");
            self.procs.push((pid, RefProc::new(self.page)));
        }
    }

    fn mapped_bytes(&self, i: usize) -> u64 {
        self.procs[i].1.regions.iter().map(|(s, r)| r.end - s).sum()
    }

    /// A region size: a few pages, one or two superpages, a superpage and
    /// a part, three and a bit, or anything up to four.
    fn region_len(&mut self) -> u64 {
        let sp = self.sp_pages;
        let pages = match self.rng.below(6) {
            0 => 1 + self.rng.below(16),
            1 => sp,
            2 => 2 * sp,
            3 => sp + self.rng.below(sp),
            4 => 3 * sp + self.rng.below(600 * self.scale),
            _ => 1 + self.rng.below(4 * sp),
        };
        pages * self.page
    }

    /// Where an mmap goes: anywhere, at a hint, or fixed over an existing
    /// region (replacing it).
    fn placement(&mut self, i: usize, len: u64) -> (u64, bool) {
        let rp = &self.procs[i].1;
        match self.rng.below(10) {
            0 if !rp.regions.is_empty() => {
                let k = self.rng.below(rp.regions.len() as u64) as usize;
                let (&s, _) = rp.regions.iter().nth(k).unwrap();
                let off = self.rng.below(4) * self.page;
                let _ = len;
                (s + off, true)
            }
            1 => {
                // A hint well inside the user address space: at 64 GB on
                // 64-bit address spaces, at a quarter of a smaller one
                // (armv7's 3 GB), spread over up to 4 GB.
                let max = self.sys.kernel.pmap.max_user_address();
                let base = (max / 4).min(0x10_0000_0000) & !(self.page - 1);
                let span = (1u64 << 20).min(max / 4 / self.page);
                (base + self.rng.below(span) * self.page, false)
            }
            _ => (0, false),
        }
    }

    fn do_mmap(&mut self, i: usize, kind: &str) {
        if self.mapped_bytes(i) > self.cfg.max_mapped * self.scale {
            return self.do_munmap(i, true);
        }
        let pid = self.procs[i].0;
        let p = [prot::READ, prot::RW, prot::RW, prot::RW][self.rng.below(4) as usize];
        let (req_backing, len, rkind, shared, prefault) = match kind {
            "mmap_anon" => (Backing::Anon, self.region_len(), Kind::PrivAnon, false, false),
            "mmap_shared" => {
                let len = self.region_len();
                (Backing::Anon, len, Kind::Shared { store: Rc::new(RefCell::new(Store::default())), off: 0 }, true, false)
            }
            _ => {
                let f = self.rng.below(self.files.len() as u64) as usize;
                let (file, store, size) = self.files[f].clone();
                let fpages = size.div_ceil(self.page);
                let off = if self.rng.chance(50) { 0 } else { self.rng.below(fpages) };
                let len = (1 + self.rng.below(fpages - off)) * self.page;
                let shared = self.rng.chance(50);
                // The model counts the file in its own 4 KB units.
                let moff = off * (self.page / PAGE);
                let k = if shared { Kind::Shared { store, off: moff } } else { Kind::PrivFile { store, off: moff } };
                (Backing::File { file, offset: off * self.page }, len, k, shared, self.rng.chance(30))
            }
        };
        let (addr, fixed) = self.placement(i, len);
        let req = MmapReq { addr, len, prot: p, shared, fixed, backing: req_backing, prefault };
        match self.sys.mmap(pid, req) {
            Ok(va) => self.procs[i].1.map(va.0, len, p, rkind),
            Err(e) => problem(&mut self.rep, format!("pid {pid} mmap {req:?} failed: {e}")),
        }
    }

    /// A random subrange of a random region: whole, a tail, or a few pages
    /// (often inside a superpage).
    fn pick_range(&mut self, i: usize) -> Option<(u64, u64)> {
        let rp = &self.procs[i].1;
        if rp.regions.is_empty() {
            return None;
        }
        let k = self.rng.below(rp.regions.len() as u64) as usize;
        let (&s, r) = rp.regions.iter().nth(k).unwrap();
        let pages = (r.end - s) / self.page;
        Some(match self.rng.below(4) {
            0 => (s, r.end),
            1 => {
                let a = self.rng.below(pages);
                (s + a * self.page, r.end)
            }
            _ => {
                let a = self.rng.below(pages);
                let n = 1 + self.rng.below(8.min(pages - a));
                (s + a * self.page, s + (a + n) * self.page)
            }
        })
    }

    fn do_munmap(&mut self, i: usize, whole: bool) {
        let Some((mut a, mut b)) = self.pick_range(i) else { return };
        if whole {
            let (s, r) = self.procs[i].1.region(a).unwrap();
            a = s;
            b = r.end;
        }
        let pid = self.procs[i].0;
        match self.sys.munmap(pid, a, b - a) {
            Ok(()) => self.procs[i].1.unmap(a, b),
            Err(e) => problem(&mut self.rep, format!("pid {pid} munmap({a:#x}, {}) failed: {e}", b - a)),
        }
    }

    fn do_mprotect(&mut self, i: usize) {
        let Some((a, b)) = self.pick_range(i) else { return };
        let p = [prot::NONE, prot::READ, prot::RW, prot::RW][self.rng.below(4) as usize];
        let pid = self.procs[i].0;
        let want_ok = self.procs[i].1.covered(a, b);
        match (self.sys.mprotect(pid, a, b - a, p), want_ok) {
            (Ok(()), true) => self.procs[i].1.protect(a, b, p),
            (Err(Errno::ENOMEM), false) => {}
            (r, _) => {
                self.rep.fault_disagreements += 1;
                problem(&mut self.rep, format!("pid {pid} mprotect({a:#x}, {}) gave {r:?}, model expected ok={want_ok}", b - a));
            }
        }
    }

    fn do_madvise(&mut self, i: usize) {
        let Some((a, b)) = self.pick_range(i) else { return };
        let adv = if self.rng.chance(50) { Advice::DontNeed } else { Advice::Free };
        let pid = self.procs[i].0;
        // FreeBSD semantics: DONTNEED never changes what reads return; FREE
        // lets the page daemon discard private anonymous pages until they
        // are written again.
        match self.sys.madvise(pid, a, b - a, adv) {
            // FreeBSD's MADV_FREE, and Linux's MADV_DONTNEED, may discard
            // private anonymous contents: a read returns them or zeros.
            Ok(()) if adv == Advice::Free || self.dontneed_frees => self.procs[i].1.madv_free(a, b),
            Ok(()) => {}
            Err(e) => problem(&mut self.rep, format!("pid {pid} madvise({a:#x}, {}, {adv:?}) failed: {e}", b - a)),
        }
    }

    /// MADV_COLLAPSE over a random range: contents do not change; a policy
    /// without collapse answers EINVAL, one that finds no huge page ENOMEM.
    fn do_collapse(&mut self, i: usize) {
        let Some((a, b)) = self.pick_range(i) else { return };
        let pid = self.procs[i].0;
        match self.sys.madvise_collapse(pid, a, b - a) {
            Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOMEM) => {}
            Err(e) => problem(&mut self.rep, format!("pid {pid} madvise({a:#x}, {}, MADV_COLLAPSE) failed: {e}", b - a)),
        }
        self.sync_kills();
    }

    /// MADV_HUGEPAGE or MADV_NOHUGEPAGE over a random range: contents do not
    /// change.
    fn do_hugepage(&mut self, i: usize) {
        let Some((a, b)) = self.pick_range(i) else { return };
        let pid = self.procs[i].0;
        let on = self.rng.chance(50);
        if let Err(e) = self.sys.madvise_superpages(pid, a, b - a, on) {
            problem(&mut self.rep, format!("pid {pid} madvise({a:#x}, {}, {}) failed: {e}", b - a, if on { "MADV_HUGEPAGE" } else { "MADV_NOHUGEPAGE" }));
        }
    }

    /// Writes one word in every page of a range (or reads every page): the
    /// pattern that fills reservations and triggers promotion.
    fn do_fill(&mut self, i: usize, write: bool) {
        let rp = &self.procs[i].1;
        if rp.regions.is_empty() {
            return;
        }
        let k = self.rng.below(rp.regions.len() as u64) as usize;
        let (&s, r) = rp.regions.iter().nth(k).unwrap();
        let end = r.end;
        let cpu = self.schedule(i);
        let w = self.rng.below(self.page / 8) * 8;
        let mut va = s;
        while va < end {
            if !self.access(i, cpu, va + w, write) {
                return;
            }
            va += self.page;
        }
    }

    fn do_fork(&mut self, i: usize) {
        if self.procs.len() >= self.cfg.max_procs {
            return self.do_exit();
        }
        let pid = self.procs[i].0;
        match self.sys.fork(pid) {
            Ok(child) => {
                let m = self.procs[i].1.clone();
                self.procs.push((child, m));
            }
            // Waiting for memory, the parent was killed.
            Err(Errno::ESRCH) if self.sys.oom_kills().iter().any(|k| k.pid == pid) => {}
            Err(e) => problem(&mut self.rep, format!("fork of {pid} failed: {e}")),
        }
    }

    fn do_exit(&mut self) {
        let i = self.pick_proc();
        let pid = self.procs[i].0;
        if let Err(e) = self.sys.exit(pid) {
            problem(&mut self.rep, format!("exit of {pid} failed: {e}"));
        }
        self.procs.swap_remove(i);
        if self.procs.is_empty() {
            let pid = self.sys.spawn().expect("spawn");
            self.procs.push((pid, RefProc::new(self.page)));
        }
    }

    fn check_invariants(&mut self) {
        self.rep.invariant_checks += 1;
        if let Err(e) = self.sys.check_invariants() {
            self.rep.invariant_failures += 1;
            problem(&mut self.rep, format!("invariant: {e}"));
        }
    }

    fn step(&mut self) {
        let freebsd = splab_vm::policy::PolicySpec::parse(&self.cfg.policy).is_ok_and(|p| p.kind == splab_vm::policy::PolicyKind::FreeBsd);
        let extra = if freebsd { &[][..] } else { POLICY_OPS };
        let total: u64 = OPS.iter().chain(extra).map(|o| o.1).sum();
        let mut x = self.rng.below(total);
        let op = OPS.iter().chain(extra).find(|o| {
            if x < o.1 {
                true
            } else {
                x -= o.1;
                false
            }
        });
        let op = op.unwrap().0;
        *self.rep.op_counts.entry(op.to_string()).or_default() += 1;
        let i = self.pick_proc();
        match op {
            "read" | "write" => {
                if let Some(va) = self.pick_addr(i) {
                    let cpu = self.schedule(i);
                    self.access(i, cpu, va, op == "write");
                }
            }
            "fill" => self.do_fill(i, true),
            "scan" => self.do_fill(i, false),
            "mmap_anon" | "mmap_shared" | "mmap_file" => self.do_mmap(i, op),
            "munmap" => self.do_munmap(i, false),
            "mprotect" => self.do_mprotect(i),
            "collapse" => self.do_collapse(i),
            "hugepage" => self.do_hugepage(i),
            "madvise" => self.do_madvise(i),
            "fork" => self.do_fork(i),
            "exit" => self.do_exit(),
            _ => unreachable!(),
        }
        self.sync_kills();
    }
}

/// Runs the check; `progress` is called with the number of operations done.
pub fn run(cfg: &CheckConfig, progress: &mut dyn FnMut(u64)) -> Result<CheckReport, String> {
    let mut sc = Config::new(cfg.profile.clone());
    sc.arch = cfg.arch;
    sc.memory = cfg.memory;
    sc.swap = cfg.swap;
    sc.superpages = cfg.superpages;
    sc.track_contents = true;
    sc.check_tlb = true;
    sc.seed = cfg.seed;
    sc.tunables = cfg.tunables.clone();
    sc.policy = cfg.policy.clone();
    if cfg.max_procs == 0 {
        return Err("--procs must be at least 1".into());
    }
    let mut sys = System::new(sc)?;
    // Sizes stay those chosen for 2 MB superpages unless the
    // architecture's are larger (armv7's 1 MB sections keep them).
    let scale = (sys.superpage_size() / sys.page_size() / SP_2M_PAGES).max(1);
    let sp_pages = SP_2M_PAGES * scale;
    let mut files = Vec::new();
    for (k, size) in [(4u64 << 20) * scale, ((6 << 20) * scale) + 123, (2 << 20) * scale].into_iter().enumerate() {
        let f = sys.create_file(size);
        let store = Store { file: Some((f, size)), ..Default::default() };
        let _ = k;
        files.push((f, Rc::new(RefCell::new(store)), size));
    }
    let pid = sys.spawn().map_err(|e| format!("spawn: {e}"))?;
    let rep = CheckReport {
        ops: 0,
        mismatches: 0,
        stale_translations: 0,
        nonzero_fresh_reads: 0,
        invariant_checks: 0,
        invariant_failures: 0,
        fault_disagreements: 0,
        op_counts: BTreeMap::new(),
        oom_kills: Vec::new(),
        killed_accesses: 0,
        sysctl: BTreeMap::new(),
        first_problems: Vec::new(),
        refs: 0,
    };
    let page = sys.page_size();
    let dontneed_frees = sys.kernel().policy().is_some_and(|p| p.dontneed_frees());
    let mut d = Driver { sys, rng: Rng::new(cfg.seed), procs: vec![(pid, RefProc::new(page))], files, rep, cfg, next_value: 0, sp_pages, scale, page, dontneed_frees };
    let every = (cfg.ops / 50).clamp(1000, 20000);
    for n in 0..cfg.ops {
        d.step();
        d.rep.ops += 1;
        if (n + 1) % every == 0 {
            d.check_invariants();
            progress(n + 1);
        }
    }
    // Everything exits; then nothing may be left mapped or reserved.
    while let Some((pid, _)) = d.procs.pop() {
        if let Err(e) = d.sys.exit(pid) {
            problem(&mut d.rep, format!("final exit of {pid}: {e}"));
        }
    }
    d.check_invariants();
    progress(cfg.ops);
    d.rep.stale_translations = d.sys.hw().stale_translations;
    for s in d.sys.stale_samples.clone() {
        problem(&mut d.rep, format!("stale translation: {s}"));
    }
    d.rep.refs = d.sys.hw().refs;
    d.rep.sysctl = d.sys.sysctls().values;
    Ok(d.rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arch(name: &str) -> Arch {
        splab_pmap::arch::lookup(name).unwrap()
    }

    fn cfg(ops: u64, seed: u64, superpages: bool) -> CheckConfig {
        CheckConfig {
            ops,
            seed,
            arch: arch("amd64"),
            profile: Profile::load("sapphire-rapids").unwrap(),
            memory: 256 << 20,
            swap: 0,
            superpages,
            max_procs: 4,
            policy: "freebsd".into(),
            tunables: Vec::new(),
            max_mapped: DEFAULT_MAX_MAPPED,
        }
    }

    fn int(r: &CheckReport, name: &str) -> u64 {
        r.sysctl.get(name).map(|v| v.to_string().parse::<u64>().unwrap()).unwrap_or_else(|| panic!("no sysctl {name}"))
    }

    #[test]
    fn short_runs_are_clean_and_exercise_superpages() {
        let mut promotions = 0;
        let mut demotions = 0;
        for seed in 1..=3 {
            let r = run(&cfg(4000, seed, true), &mut |_| {}).unwrap();
            assert!(r.clean(), "seed {seed}: {:#?}", r.first_problems);
            promotions += r.sysctl.get("vm.pmap.pde.promotions").map(|v| v.to_string().parse::<u64>().unwrap()).unwrap();
            demotions += r.sysctl.get("vm.pmap.pde.demotions").map(|v| v.to_string().parse::<u64>().unwrap()).unwrap();
        }
        assert!(promotions > 0 && demotions > 0, "promotions {promotions}, demotions {demotions}");
    }

    /// The riscv system (Sv39, accessed and dirty bits by pmap_fault)
    /// under the same random operations.
    #[test]
    fn riscv_short_runs_are_clean_and_exercise_superpages_and_pmap_fault() {
        let (mut promotions, mut demotions, mut ad_faults) = (0, 0, 0);
        for seed in 1..=2 {
            let c = CheckConfig { arch: arch("riscv"), profile: Profile::load("sifive-u74").unwrap(), ..cfg(4000, seed, true) };
            let r = run(&c, &mut |_| {}).unwrap();
            assert!(r.clean(), "seed {seed}: {:#?}", r.first_problems);
            promotions += int(&r, "vm.pmap.l2.promotions");
            demotions += int(&r, "vm.pmap.l2.demotions");
            ad_faults += int(&r, "splab.pmap.ad_faults");
        }
        assert!(promotions > 0 && demotions > 0 && ad_faults > 0, "promotions {promotions}, demotions {demotions}, ad_faults {ad_faults}");
    }

    /// alpha: 8 KB pages, promotion and demotion at all three
    /// granularity hints, reference and modify by FOR/FOW faults.
    #[test]
    fn alpha_short_runs_are_clean_at_three_superpage_sizes() {
        let c = CheckConfig { arch: arch("alpha"), profile: Profile::load("alpha-21264").unwrap(), ..cfg(4000, 1, true) };
        let r = run(&c, &mut |_| {}).unwrap();
        assert!(r.clean(), "{:#?}", r.first_problems);
        for g in ["64k", "512k", "4m"] {
            let (p, d) = (int(&r, &format!("vm.pmap.gh.{g}.promotions")), int(&r, &format!("vm.pmap.gh.{g}.demotions")));
            assert!(p > 0 && d > 0, "{g}: promotions {p}, demotions {d}");
        }
        assert!(int(&r, "splab.pmap.fow_faults") > 0);
    }

    fn sysctl(r: &CheckReport, name: &str) -> u64 {
        r.sysctl.get(name).map(|v| v.to_string().parse::<u64>().unwrap()).unwrap_or_else(|| panic!("no {name}"))
    }

    /// armv7: sections, then both levels, in a 32-bit address space (debug
    /// builds also check every layer's invariants at each exit).
    #[test]
    fn armv7_short_runs_are_clean_at_both_superpage_sizes() {
        let mut total = [0u64; 3];
        for (seed, lp) in [(1, 0), (2, 1)] {
            let mut c = cfg(4000, seed, true);
            c.arch = arch("armv7");
            c.profile = Profile::load("armada-xp").unwrap();
            c.tunables = vec![("vm.pmap.lp_enabled".into(), lp.to_string())];
            let r = run(&c, &mut |_| {}).unwrap();
            assert!(r.clean(), "seed {seed}: {:#?}", r.first_problems);
            total[0] += sysctl(&r, "vm.pmap.section.promotions");
            total[1] += sysctl(&r, "vm.pmap.section.demotions");
            let large = sysctl(&r, "vm.pmap.largepage.promotions");
            assert_eq!(large > 0, lp == 1, "seed {seed}: {large} 64KB promotions with lp_enabled={lp}");
            total[2] += large;
        }
        assert!(total[0] > 0 && total[1] > 0, "sections: {total:?}");
    }

    /// The same on arm64, where both superpage sizes must be exercised.
    #[test]
    fn short_arm64_runs_are_clean_and_exercise_64k_and_2m_superpages() {
        let mut n = std::collections::BTreeMap::<&str, u64>::new();
        for seed in 1..=2 {
            let c = CheckConfig { arch: arch("arm64"), profile: Profile::load("neoverse-n1").unwrap(), ..cfg(4000, seed, true) };
            let r = run(&c, &mut |_| {}).unwrap();
            assert!(r.clean(), "seed {seed}: {:#?}", r.first_problems);
            for k in ["vm.pmap.l2.promotions", "vm.pmap.l2.demotions", "vm.pmap.l3c.promotions", "vm.pmap.l3c.demotions"] {
                *n.entry(k).or_default() += int(&r, k);
            }
        }
        assert!(n.values().all(|&v| v > 0), "{n:?}");
    }

    /// With 16 MB superpages the checker's sizes grow eightfold, and a
    /// short run still fills, promotes and demotes them, cleanly.
    #[test]
    fn short_ppc64_hpt_run_is_clean_and_exercises_16mb_superpages() {
        assert_eq!((size_scale(arch("amd64")), size_scale(arch("ppc64-hpt"))), (1, 8));
        let c = CheckConfig { arch: arch("ppc64-hpt"), profile: Profile::load("power9").unwrap(), memory: 2 << 30, ..cfg(1000, 1, true) };
        let r = run(&c, &mut |_| {}).unwrap();
        assert!(r.clean(), "{:#?}", r.first_problems);
        let (p, d) = (int(&r, "vm.pmap.sp.promotions"), int(&r, "vm.pmap.sp.demotions"));
        assert!(p > 0 && d > 0, "promotions {p}, demotions {d}");
    }

    /// Under memory pressure the same random sequences stay clean while
    /// pages go to swap and come back, superpages are demoted for
    /// page-out, and reservations are broken to find free pages.
    #[test]
    fn runs_under_memory_pressure_are_clean_and_page() {
        let mut c = cfg(3000, 1, true);
        c.memory = 32 << 20;
        c.swap = 64 << 20;
        let r = run(&c, &mut |_| {}).unwrap();
        assert!(r.clean(), "{:#?}", r.first_problems);
        for k in ["vm.stats.vm.v_swappgsout", "vm.stats.vm.v_swappgsin", "vm.pmap.pde.demotions", "vm.reserv.broken", "vm.stats.vm.v_dfree"] {
            assert!(sysctl(&r, k) > 0, "{k} is 0");
        }
        assert!(r.oom_kills.is_empty(), "{:?}", r.oom_kills);
    }

    #[test]
    fn clean_with_superpages_off() {
        let r = run(&cfg(3000, 7, false), &mut |_| {}).unwrap();
        assert!(r.clean(), "{:#?}", r.first_problems);
    }
}
