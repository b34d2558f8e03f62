//! Promotion when populated, live: FreeBSD's superpage policy for
//! unmodified Linux programs.
//!
//! FreeBSD maps a 2 MB range with one page-table entry only once every
//! one of its 512 base pages is populated (the reservation is full and the
//! page-table page is full), so nothing is resident that the program did
//! not touch. Linux's THP instead gives a 2 MB page at the first fault of
//! a range ("always"), and khugepaged collapses ranges with as few as one
//! page present (max_ptes_none = 511). The monitor here brings FreeBSD's
//! rule to Linux from the outside: at an interval it reads each process's
//! page tables through /proc/PID/pagemap and asks the kernel to collapse
//! (process_madvise(pidfd, MADV_COLLAPSE), Linux 6.1+) every 2 MB-aligned
//! range of a private anonymous mapping whose 512 pages are all present,
//! none the shared zero page, none shared with another process.
//!
//! The program must not get 2 MB pages at fault, or there is nothing left
//! to promote: under THP mode `madvise` nothing is needed (MADV_COLLAPSE
//! works on mappings without MADV_HUGEPAGE), under `always` the program
//! runs with PR_SET_THP_DISABLE's "except advised" flag (Linux 6.18),
//! which makes it behave as under `madvise`; plain PR_SET_THP_DISABLE
//! would make MADV_COLLAPSE fail with EINVAL.
//!
//! Reading the page tables: PAGEMAP_SCAN (an ioctl on the pagemap file,
//! Linux 6.7+) returns runs of pages with the same flags (present, zero
//! page, PMD-mapped), so a scan of a gigabyte is a few runs; without it
//! the pagemap entries are read, 8 bytes a page. A candidate range's 512
//! entries are read before its collapse to check that no page is shared
//! (PM_MMAP_EXCLUSIVE): collapsing a range still shared after fork would
//! copy it and add memory.
//!
//! A collapse that fails is counted with its reason
//! (`vm.pmap.pde.p_failures`, as FreeBSD counts failed promotions), and
//! the range is left alone for 2, 4, ... up to 64 passes.
//!
//! What a pass costs: the kernel walks every base-page entry of the
//! scanned mappings (about 70 ns a page on the development VM, 18 ms a
//! gigabyte), while a range already in a 2 MB page is one entry. So the
//! monitor does not scan blindly at an interval: every `interval` it reads
//! the processes' resident sizes (/proc/PID/statm, a counter), and makes a
//! pass only when they grew by 2 MB (a range can only fill as pages
//! arrive), a process appeared (the tree is walked every tenth look), or
//! a quiet spell ran out; and after a
//! pass it waits until that pass's scanning, projected to what is left in
//! base pages, fits in `budget` of one CPU. The monitor's own CPU time is
//! measured on its thread (CLOCK_THREAD_CPUTIME_ID), split into scanning
//! and collapsing (copying 512 pages into a 2 MB page: work the layout
//! itself costs, which Linux's THP pays instead at fault by zeroing).

use crate::pages::{SIZE_2M, SIZE_4K};
use crate::proctree::{self, Vma};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// MADV_COLLAPSE (Linux 6.1+).
pub const MADV_COLLAPSE: libc::c_int = 25;

const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;
const PAGE_IS_PFNZERO: u64 = 1 << 5;
const PAGE_IS_HUGE: u64 = 1 << 6;

#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// _IOWR('f', 16, struct pm_scan_arg).
const PAGEMAP_SCAN: libc::c_ulong = (3 << 30) | ((std::mem::size_of::<PmScanArg>() as libc::c_ulong) << 16) | ((b'f' as libc::c_ulong) << 8) | 16;

/// pagemap entry bits.
const PM_PRESENT: u64 = 1 << 63;
const PM_FILE_OR_SHARED: u64 = 1 << 61;
const PM_EXCLUSIVE: u64 = 1 << 56;
const PM_PFN: u64 = (1 << 55) - 1;

/// Whose memory the monitor watches.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// Every descendant of this process (a program's tree under a
    /// subreaper).
    Descendants(i32),
    /// This process, only [start, end) (a native workload's region).
    OwnRange { start: u64, end: u64 },
}

/// How often to look.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// How often the processes' resident sizes are looked at (a cheap
    /// read of /proc/PID/statm); a pass over the page tables follows when
    /// they grew by 2 MB or more since the last pass, when a process
    /// appeared, or when a quiet spell ran out.
    pub interval: Duration,
    /// Most of one CPU that scanning may use: after a pass, the next waits
    /// until the pass's scanning time (projected to the base pages left
    /// after its collapses) is this share of the time since.
    pub budget: f64,
    /// Longest spell without a pass (ranges can fill without the resident
    /// size growing, as pages are freed elsewhere; backed-off ranges are
    /// due again).
    pub quiet: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { interval: Duration::from_millis(20), budget: 0.01, quiet: Duration::from_secs(1) }
    }
}

/// What the monitor did, with FreeBSD's names for the promotion counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    /// vm.pmap.pde.promotions: 2 MB ranges collapsed.
    pub promotions: u64,
    /// Of them, while a native workload's region was set up (touched
    /// and given one pass), before the workload ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup_promotions: Option<u64>,
    /// vm.pmap.pde.p_failures: collapses the kernel refused.
    pub p_failures: u64,
    /// p_failures by reason.
    pub failure_reasons: BTreeMap<String, u64>,
    /// Fully populated ranges left alone because a page is shared with
    /// another process (after fork) or with a file.
    pub not_exclusive: u64,
    /// Passes over the processes.
    pub passes: u64,
    /// Processes watched.
    pub processes: u64,
    /// CPU seconds of the monitor thread: scanning plus collapsing.
    pub cpu_seconds: f64,
    /// Of them, in the collapses (copying the pages into 2 MB pages).
    pub collapse_cpu_seconds: f64,
    /// How the page tables were read: "PAGEMAP_SCAN" or "pagemap read".
    pub scanner: String,
    /// Of them, in scanning the page tables (and reading /proc).
    pub scan_cpu_seconds: f64,
    /// Ticks at which nothing had grown and no pass was made.
    pub idle_ticks: u64,
    /// Why the monitor stopped early (it cannot collapse at all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gave_up: Option<String>,
}

impl Counters {
    /// The counters as FreeBSD's sysctl prints them.
    pub fn sysctl_lines(&self) -> Vec<String> {
        let mut v = vec![format!("vm.pmap.pde.promotions: {}", self.promotions), format!("vm.pmap.pde.p_failures: {}", self.p_failures)];
        for (r, n) in &self.failure_reasons {
            v.push(format!("  {r}: {n}"));
        }
        v
    }
}

struct Proc {
    start_ticks: u64,
    pidfd: OwnedFd,
    /// Range start -> (failures so far, pass before which it is not tried).
    backoff: HashMap<u64, (u32, u64)>,
}

struct Shared {
    stop: AtomicBool,
    /// Promotions so far.
    promotions: std::sync::atomic::AtomicU64,
    /// Passes finished, and a flag to cut the pause short.
    passes: Mutex<(u64, bool)>,
    cv: Condvar,
}

/// A running monitor; `stop` ends it and gives its counters.
pub struct Monitor {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<Counters>>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn thread_cpu() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec; the clock always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; a non-negative result is a
    // new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: fd is a fresh descriptor nobody else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Asks the kernel to collapse [va, va + 2 MB) of the process behind
/// `pidfd`; the errno when it refuses.
pub fn collapse(pidfd: &OwnedFd, va: u64) -> Result<(), i32> {
    let iov = libc::iovec { iov_base: va as *mut libc::c_void, iov_len: SIZE_2M as usize };
    // SAFETY: one iovec describing a range of the other process (not
    // dereferenced here); the kernel checks it.
    let r = unsafe { libc::syscall(libc::SYS_process_madvise, pidfd.as_raw_fd(), &iov as *const libc::iovec, 1usize, MADV_COLLAPSE, 0u32) };
    if r == SIZE_2M as i64 {
        Ok(())
    } else if r < 0 {
        Err(errno())
    } else {
        Err(libc::EAGAIN)
    }
}

/// The PFN of the shared zero page, as pagemap shows it (0 where PFNs are
/// hidden, without CAP_SYS_ADMIN).
fn zero_pfn() -> u64 {
    static Z: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *Z.get_or_init(|| {
        // SAFETY: a fresh private page, read once (which maps the zero
        // page) and unmapped.
        unsafe {
            let p = libc::mmap(std::ptr::null_mut(), SIZE_4K as usize, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            if p == libc::MAP_FAILED {
                return 0;
            }
            std::ptr::read_volatile(p as *const u8);
            let e = File::open("/proc/self/pagemap").ok().and_then(|f| {
                let mut b = [0u8; 8];
                f.read_exact_at(&mut b, p as u64 / SIZE_4K * 8).ok().map(|_| u64::from_ne_bytes(b))
            });
            libc::munmap(p, SIZE_4K as usize);
            e.map(|e| e & PM_PFN).unwrap_or(0)
        }
    })
}

/// The 512 pagemap entries of the 2 MB range at `va`.
fn entries(pagemap: &File, va: u64) -> Option<Vec<u64>> {
    let mut buf = vec![0u8; 512 * 8];
    pagemap.read_exact_at(&mut buf, va / SIZE_4K * 8).ok()?;
    Some(buf.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]))).collect())
}

/// What the 512 entries of a range say: populated (every page present,
/// none the zero page) and whether every page is the process's alone.
fn judge_entries(e: &[u64], zero: u64) -> (bool, bool) {
    let populated = e.iter().all(|&x| x & PM_PRESENT != 0 && (zero == 0 || x & PM_PFN != zero));
    let exclusive = e.iter().all(|&x| x & PM_EXCLUSIVE != 0 && x & PM_FILE_OR_SHARED == 0);
    (populated, exclusive)
}

/// The 2 MB-aligned ranges wholly inside [start, end).
fn aligned(start: u64, end: u64) -> impl Iterator<Item = u64> {
    let a = start.div_ceil(SIZE_2M) * SIZE_2M;
    let b = end / SIZE_2M * SIZE_2M;
    (a..b.max(a)).step_by(SIZE_2M as usize)
}

struct Scanner {
    /// PAGEMAP_SCAN works here (None: not tried yet).
    ioctl: Option<bool>,
    regions: Vec<PageRegion>,
    /// Bytes present in base pages seen by the current pass: what the
    /// kernel walks entry by entry, so what a pass costs.
    base_bytes: u64,
}

impl Scanner {
    /// Ranges of [a, b) fully populated in base pages (not already huge).
    fn candidates(&mut self, pagemap: &File, a: u64, b: u64, out: &mut Vec<u64>) {
        if self.ioctl != Some(false) {
            match self.scan_ioctl(pagemap, a, b, out) {
                Ok(()) => {
                    self.ioctl = Some(true);
                    return;
                }
                Err(_) if self.ioctl == Some(true) => return,
                Err(_) => self.ioctl = Some(false),
            }
        }
        let zero = zero_pfn();
        for va in aligned(a, b) {
            if let Some(e) = entries(pagemap, va) {
                // A range already in one 2 MB page reads as present too;
                // the kernel's collapse of it is a cheap no-op success, so
                // those are left out by their PFNs running on.
                let (populated, _) = judge_entries(&e, zero);
                let contiguous = e.windows(2).all(|w| w[1] & PM_PFN == (w[0] & PM_PFN) + 1) && e[0] & PM_PFN != 0 && (e[0] & PM_PFN).is_multiple_of(512);
                if !contiguous {
                    self.base_bytes += e.iter().filter(|&&x| x & PM_PRESENT != 0).count() as u64 * SIZE_4K;
                }
                if populated && !contiguous {
                    out.push(va);
                }
            }
        }
    }

    fn scan_ioctl(&mut self, pagemap: &File, a: u64, b: u64, out: &mut Vec<u64>) -> Result<(), i32> {
        if self.regions.is_empty() {
            self.regions = vec![PageRegion::default(); 256];
        }
        let mut start = a;
        while start < b {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                start,
                end: b,
                vec: self.regions.as_mut_ptr() as u64,
                vec_len: self.regions.len() as u64,
                category_mask: PAGE_IS_PRESENT,
                return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED | PAGE_IS_PFNZERO | PAGE_IS_HUGE,
                ..Default::default()
            };
            // SAFETY: arg points to a valid pm_scan_arg whose vec is our
            // buffer of vec_len page_regions.
            let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg as *mut PmScanArg) };
            if n < 0 {
                return Err(errno());
            }
            for r in &self.regions[..n as usize] {
                if r.categories & PAGE_IS_HUGE == 0 {
                    self.base_bytes += r.end - r.start;
                }
                if r.categories == PAGE_IS_PRESENT {
                    out.extend(aligned(r.start, r.end));
                }
            }
            if (n as usize) < self.regions.len() || arg.walk_end <= start {
                break;
            }
            start = arg.walk_end;
        }
        Ok(())
    }
}

/// A failure's reason, as counted.
fn reason(e: i32, still_mapped: bool) -> String {
    match e {
        libc::EAGAIN => "busy, try later (EAGAIN: a page locked, under writeback or off the LRU)".into(),
        libc::ENOMEM if !still_mapped => "range unmapped before the collapse".into(),
        libc::ENOMEM => "no free 2 MB page (ENOMEM, or the memory cgroup's limit)".into(),
        libc::EINVAL => "not eligible (EINVAL: THP disabled for the process or the mapping)".into(),
        libc::EFAULT => "range unmapped before the collapse (EFAULT)".into(),
        other => format!("errno {other} ({})", std::io::Error::from_raw_os_error(other)),
    }
}

struct Worker {
    promoted: Arc<Shared>,
    /// /proc/PID/statm of each process, kept open.
    statm: HashMap<i32, File>,
    target: Target,
    cfg: Config,
    procs: HashMap<i32, Proc>,
    scanner: Scanner,
    c: Counters,
}

impl Worker {
    fn pids(&self) -> Vec<i32> {
        match self.target {
            Target::Descendants(root) => proctree::descendants(root),
            Target::OwnRange { .. } => vec![std::process::id() as i32],
        }
    }

    fn vmas(&self, pid: i32) -> Option<Vec<Vma>> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let mut v = proctree::anon_vmas(&maps);
        if let Target::OwnRange { start, end } = self.target {
            v = v.into_iter().filter(|m| m.start < end && m.end > start).map(|m| Vma { start: m.start.max(start), end: m.end.min(end) }).collect();
        }
        Some(v)
    }

    /// One pass over every process; the CPU seconds spent in collapses.
    fn pass(&mut self) -> f64 {
        let pids = self.pids();

        self.procs.retain(|p, st| pids.contains(p) && crate::sysstate::start_ticks(*p) == Some(st.start_ticks));
        let mut collapse_cpu = 0.0;
        let pass_no = self.c.passes;
        for pid in pids {
            if let std::collections::hash_map::Entry::Vacant(slot) = self.procs.entry(pid) {
                let (Some(start_ticks), Some(pidfd)) = (crate::sysstate::start_ticks(pid), pidfd_open(pid)) else { continue };
                slot.insert(Proc { start_ticks, pidfd, backoff: HashMap::new() });
                self.c.processes += 1;
            }
            let Some(vmas) = self.vmas(pid) else { continue };
            // Opened afresh each pass: a pagemap file reads the address
            // space the process had when it was opened, and a process
            // seen between fork and exec gets a new one at exec.
            let Ok(pagemap) = File::open(format!("/proc/{pid}/pagemap")) else { continue };
            let Some(st) = self.procs.get_mut(&pid) else { continue };
            let mut cands = Vec::new();
            for v in &vmas {
                self.scanner.candidates(&pagemap, v.start, v.end, &mut cands);
            }
            for va in cands {
                if st.backoff.get(&va).is_some_and(|&(_, until)| pass_no < until) {
                    continue;
                }
                // Populated and the process's alone, page by page.
                let Some(e) = entries(&pagemap, va) else { continue };
                let (populated, exclusive) = judge_entries(&e, zero_pfn());
                if !populated {
                    continue;
                }
                if !exclusive {
                    self.c.not_exclusive += 1;
                    let n = st.backoff.get(&va).map_or(0, |b| b.0) + 1;
                    st.backoff.insert(va, (n, pass_no + (1 << n.min(6))));
                    continue;
                }
                let t = thread_cpu();
                let r = collapse(&st.pidfd, va);
                collapse_cpu += thread_cpu() - t;
                match r {
                    Ok(()) => {
                        self.c.promotions += 1;
                        self.promoted.promotions.fetch_add(1, Ordering::SeqCst);
                        st.backoff.remove(&va);
                    }
                    Err(libc::ESRCH) => break,
                    Err(libc::EPERM) => {
                        self.c.gave_up = Some("process_madvise(MADV_COLLAPSE) on another process needs CAP_SYS_NICE (EPERM): run as root".into());
                        return collapse_cpu;
                    }
                    Err(e) => {
                        let mapped = std::fs::read_to_string(format!("/proc/{pid}/maps"))
                            .map(|m| proctree::anon_vmas(&m).iter().any(|v| v.start <= va && v.end >= va + SIZE_2M))
                            .unwrap_or(false);
                        self.c.p_failures += 1;
                        *self.c.failure_reasons.entry(reason(e, mapped)).or_default() += 1;
                        let n = st.backoff.get(&va).map_or(0, |b| b.0) + 1;
                        st.backoff.insert(va, (n, pass_no + (1 << n.min(6))));
                    }
                }
            }
        }
        collapse_cpu
    }

    /// Resident bytes of the processes (statm), and whether one of them
    /// is new to the monitor.
    /// Reads /proc/PID/statm through a descriptor kept open (one pread a
    /// tick, no path lookup); files of processes not in `pids` are closed.
    fn resident(&mut self, pids: &[i32]) -> (u64, bool) {
        let mut sum = 0;
        let mut new = false;
        self.statm.retain(|p, _| pids.contains(p));
        let mut buf = [0u8; 128];
        for &pid in pids {
            new |= !self.procs.contains_key(&pid);
            if let std::collections::hash_map::Entry::Vacant(e) = self.statm.entry(pid) {
                match File::open(format!("/proc/{pid}/statm")) {
                    Ok(f) => {
                        e.insert(f);
                    }
                    Err(_) => continue,
                }
            }
            let Some(f) = self.statm.get(&pid) else { continue };
            let Ok(n) = f.read_at(&mut buf, 0) else { continue };
            let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
            sum += text.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * SIZE_4K;
        }
        (sum, new)
    }

    fn run(mut self, shared: &Shared) -> Counters {
        let t0 = thread_cpu();
        let clock = crate::now;
        let (mut next_allowed, mut last_pass, mut last_rss) = (0.0f64, f64::NEG_INFINITY, 0u64);
        let mut quiet = self.cfg.quiet.as_secs_f64();
        // The tree is walked again every TREE_TICKS ticks (reading every
        // thread's children file costs far more than the statm reads).
        const TREE_TICKS: u64 = 10;
        let mut pids = Vec::new();
        let mut tick = 0u64;
        loop {
            let forced = {
                let mut g = shared.passes.lock().unwrap_or_else(|e| e.into_inner());
                std::mem::replace(&mut g.1, false)
            };
            if tick.is_multiple_of(TREE_TICKS) || forced {
                pids = self.pids();
            }
            tick += 1;
            let (rss, new) = self.resident(&pids);
            let now = clock();
            let grown = rss >= last_rss + SIZE_2M || new || now - last_pass >= quiet;
            if forced || (now >= next_allowed && grown) {
                let before = thread_cpu();
                self.scanner.base_bytes = 0;
                let promoted0 = self.c.promotions;
                let collapse_cpu = self.pass();
                self.c.collapse_cpu_seconds += collapse_cpu;
                let scan_cpu = (thread_cpu() - before - collapse_cpu).max(0.0);
                self.c.scan_cpu_seconds += scan_cpu;
                // The next pass walks what stays in base pages.
                let base = self.scanner.base_bytes.max(1);
                let left = base.saturating_sub((self.c.promotions - promoted0) * SIZE_2M);
                let next_cost = scan_cpu * left as f64 / base as f64;
                let budget = self.cfg.budget.max(1e-6);
                last_pass = clock();
                next_allowed = last_pass + next_cost / budget;
                quiet = self.cfg.quiet.as_secs_f64().max(next_cost / budget);
                last_rss = rss;
                self.c.passes += 1;
                let mut g = shared.passes.lock().unwrap_or_else(|e| e.into_inner());
                g.0 += 1;
                shared.cv.notify_all();
            } else {
                self.c.idle_ticks += 1;
            }
            if shared.stop.load(Ordering::SeqCst) || self.c.gave_up.is_some() {
                break;
            }
            let g = shared.passes.lock().unwrap_or_else(|e| e.into_inner());
            if !g.1 {
                drop(shared.cv.wait_timeout(g, self.cfg.interval));
            }
            if shared.stop.load(Ordering::SeqCst) {
                break;
            }
        }
        self.c.scanner = match self.scanner.ioctl {
            Some(false) => "pagemap read".into(),
            _ => "PAGEMAP_SCAN".into(),
        };
        self.c.cpu_seconds = thread_cpu() - t0;
        self.c
    }
}

impl Monitor {
    /// Starts watching `target`.
    pub fn start(target: Target, cfg: Config) -> Result<Monitor, String> {
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), promotions: Default::default(), passes: Mutex::new((0, false)), cv: Condvar::new() });
        let s2 = shared.clone();
        let w = Worker { promoted: shared.clone(), statm: HashMap::new(), target, cfg, procs: HashMap::new(), scanner: Scanner { ioctl: None, regions: Vec::new(), base_bytes: 0 }, c: Counters::default() };
        let handle = std::thread::Builder::new().name("splab-promote".into()).spawn(move || w.run(&s2)).map_err(|e| format!("starting the promotion monitor: {e}"))?;
        Ok(Monitor { shared, handle: Some(handle) })
    }

    /// Waits until a pass that began after this call has ended.
    pub fn sync(&self) {
        let mut g = self.shared.passes.lock().unwrap_or_else(|e| e.into_inner());
        let want = g.0 + 2;
        g.1 = true;
        self.shared.cv.notify_all();
        while g.0 < want && !self.handle.as_ref().is_none_or(|h| h.is_finished()) {
            g = self.shared.cv.wait_timeout(g, Duration::from_millis(50)).map(|r| r.0).unwrap_or_else(|e| e.into_inner().0);
            if g.0 + 1 == want {
                g.1 = true;
                self.shared.cv.notify_all();
            }
        }
    }

    /// Promotions so far.
    pub fn promotions(&self) -> u64 {
        self.shared.promotions.load(Ordering::SeqCst)
    }

    /// Stops the monitor (after the pass under way) and returns what it did.
    pub fn stop(mut self) -> Counters {
        self.finish()
    }

    fn finish(&mut self) -> Counters {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let mut g = self.shared.passes.lock().unwrap_or_else(|e| e.into_inner());
            g.1 = true;
            self.shared.cv.notify_all();
        }
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if self.handle.is_some() {
            self.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_wholly_inside() {
        let m = SIZE_2M;
        assert_eq!(aligned(m / 2, 3 * m).collect::<Vec<_>>(), vec![m, 2 * m]);
        assert_eq!(aligned(m + 4096, 2 * m).count(), 0);
        assert_eq!(aligned(0, m).collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn entries_judged() {
        let ok: Vec<u64> = (0..512).map(|i| PM_PRESENT | PM_EXCLUSIVE | (1000 + i)).collect();
        assert_eq!(judge_entries(&ok, 7), (true, true));
        let mut hole = ok.clone();
        hole[100] = 0;
        assert!(!judge_entries(&hole, 7).0);
        let mut zero = ok.clone();
        zero[3] = PM_PRESENT | 7;
        assert!(!judge_entries(&zero, 7).0);
        let mut shared = ok;
        shared[5] &= !PM_EXCLUSIVE;
        assert_eq!(judge_entries(&shared, 7), (true, false));
    }

    #[test]
    fn ioctl_number_matches_the_kernel_header() {
        // _IOWR('f', 16, struct pm_scan_arg) with the 96-byte struct.
        assert_eq!(PAGEMAP_SCAN, 0xc060_6610);
    }
}
