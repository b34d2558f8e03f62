//! System settings a native run changes, and the promise that they are put
//! back: the THP mode (`/sys/kernel/mm/transparent_hugepage/enabled`), the
//! multi-size THP sizes (`hugepages-*kB/enabled` beside it) and the
//! hugetlb pools (`/sys/kernel/mm/hugepages/hugepages-*/nr_hugepages`).
//!
//! Every change goes through `set`, which first writes the value it found
//! to a state file (`/run/splab/state.json`, on a tmpfs, so a reboot, which
//! resets the settings too, also forgets it) and only then writes the new
//! value. The change is undone by `restore` (or `restore_all`), by the
//! drop of whatever owns it on an error or a panic, by the signal thread
//! on SIGINT/SIGTERM/SIGHUP/SIGQUIT, and, when splab itself was killed
//! (SIGKILL, a crash), by the next splab to start (`recover`, called first
//! thing by the front end), which also kills the program's process group a
//! killed run left behind.
//!
//! Two splabs (two developers, two tests) must not interleave their
//! changes, or the second would save the first one's value as "found":
//! a process holds an exclusive flock on `/run/splab/lock` for as long as
//! it has anything changed, and a state file whose writer no longer holds
//! the lock belongs to a dead process. `exclusive` holds the lock for a
//! whole test.
//!
//! Invariant: whenever a setting differs from the value it had because
//! this process wrote it, the state file lists it with that value, and
//! this process holds the lock.

use serde::{Deserialize, Serialize};
use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

/// Where the state file and the lock live.
pub const STATE_DIR: &str = "/run/splab";
/// The THP directory.
pub const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";

fn state_dir() -> PathBuf {
    PathBuf::from(STATE_DIR)
}

/// One setting changed: the file and the value found in it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Setting {
    pub path: String,
    pub old: String,
}

/// A program's process group a run started, to be killed if the run is.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Leftover {
    pub pgid: i32,
    /// Start time of the group's leader (clock ticks since boot, field 22
    /// of /proc/PID/stat): processes started before it are not the run's.
    pub start_ticks: u64,
}

/// The state file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Saved {
    pid: u32,
    boot_id: String,
    settings: Vec<Setting>,
    programs: Vec<Leftover>,
}

struct Inner {
    saved: Saved,
    /// The lock file, flocked while anything is changed or a hold is on.
    lock: Option<fs::File>,
    holds: u32,
}

static INNER: Mutex<Inner> = Mutex::new(Inner { saved: Saved { pid: 0, boot_id: String::new(), settings: Vec::new(), programs: Vec::new() }, lock: None, holds: 0 });

fn inner() -> MutexGuard<'static, Inner> {
    // A panic while holding it leaves consistent data (every step writes
    // the file before the setting): go on with it.
    INNER.lock().unwrap_or_else(|e| e.into_inner())
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The value of a sysfs setting: the bracketed word of a choice file
/// (`always [madvise] never`), or the trimmed text.
pub fn read_value(path: &str) -> Result<String, String> {
    let t = fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    Ok(bracketed(&t).unwrap_or_else(|| t.trim().to_string()))
}

fn bracketed(t: &str) -> Option<String> {
    let a = t.find('[')?;
    let b = t[a..].find(']')?;
    Some(t[a + 1..a + b].to_string())
}

fn write_value(path: &str, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("writing {value:?} to {path}: {e}"))
}

fn flock(f: &fs::File, how: libc::c_int) -> bool {
    // SAFETY: a valid descriptor owned by `f`.
    unsafe { libc::flock(f.as_raw_fd(), how) == 0 }
}

fn open_lock() -> Result<fs::File, String> {
    let dir = state_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let p = dir.join("lock");
    fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&p).map_err(|e| format!("opening {}: {e}", p.display()))
}

/// Takes the lock (waiting for another splab that holds it, and saying
/// so), then recovers what a dead splab left.
fn acquire(i: &mut Inner) -> Result<(), String> {
    if i.lock.is_some() {
        return Ok(());
    }
    let f = open_lock()?;
    if !flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
        eprintln!("splab: waiting for another splab run that has system settings changed ({}/lock)", state_dir().display());
        if !flock(&f, libc::LOCK_EX) {
            return Err(format!("locking {}/lock: {}", state_dir().display(), std::io::Error::last_os_error()));
        }
    }
    i.lock = Some(f);
    for m in recover_locked()? {
        eprintln!("splab: {m}");
    }
    i.saved = Saved { pid: std::process::id(), boot_id: boot_id(), settings: Vec::new(), programs: Vec::new() };
    Ok(())
}

fn release_if_idle(i: &mut Inner) {
    if i.holds == 0 && i.saved.settings.is_empty() && i.saved.programs.is_empty() {
        let _ = fs::remove_file(state_dir().join("state.json"));
        i.lock = None; // closing the descriptor drops the flock
    }
}

fn save(s: &Saved) -> Result<(), String> {
    let dir = state_dir();
    let tmp = dir.join(format!("state.json.{}", std::process::id()));
    let text = serde_json::to_string_pretty(s).map_err(|e| e.to_string())?;
    let f = fs::File::create(&tmp).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    use std::io::Write;
    (&f).write_all(text.as_bytes()).and_then(|_| f.sync_all()).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    fs::rename(&tmp, dir.join("state.json")).map_err(|e| format!("renaming {} into place: {e}", tmp.display()))
}

/// Sets `path` to `value`, having saved the value it had (once: a second
/// change keeps the first value found). The error says why it could not.
pub fn set(path: &str, value: &str) -> Result<(), String> {
    let mut i = inner();
    acquire(&mut i)?;
    let old = match read_value(path) {
        Ok(v) => v,
        Err(e) => {
            release_if_idle(&mut i);
            return Err(e);
        }
    };
    if !i.saved.settings.iter().any(|s| s.path == path) {
        if old == value {
            release_if_idle(&mut i);
            return Ok(());
        }
        i.saved.settings.push(Setting { path: path.into(), old });
        if let Err(e) = save(&i.saved) {
            i.saved.settings.pop();
            release_if_idle(&mut i);
            return Err(e);
        }
    }
    install_signals();
    write_value(path, value)
}

/// Puts `path` back to the value it had before this process changed it
/// (nothing to do if it did not).
pub fn restore(path: &str) -> Result<(), String> {
    let mut i = inner();
    let Some(k) = i.saved.settings.iter().position(|s| s.path == path) else { return Ok(()) };
    let s = i.saved.settings[k].clone();
    write_value(&s.path, &s.old)?;
    i.saved.settings.remove(k);
    let r = save(&i.saved);
    release_if_idle(&mut i);
    r
}

/// Puts back everything this process changed; the errors of those it
/// could not.
pub fn restore_all() -> Vec<String> {
    let mut i = inner();
    let mut bad = Vec::new();
    let settings = std::mem::take(&mut i.saved.settings);
    for s in settings.into_iter().rev() {
        if let Err(e) = write_value(&s.path, &s.old) {
            bad.push(e);
            i.saved.settings.push(s);
        }
    }
    if i.lock.is_some() {
        let _ = save(&i.saved);
    }
    release_if_idle(&mut i);
    bad
}

/// What this process has changed now.
pub fn changed() -> Vec<Setting> {
    inner().saved.settings.clone()
}

/// Start time (clock ticks since boot) of a process, from /proc/PID/stat.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let t = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields
    // count from the last ')'.
    let rest = &t[t.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Notes a program's process group in the state file, so that a splab
/// killed while it runs has it killed by the next one. Only where the
/// state directory can be written (as root); elsewhere a no-op.
pub fn watch_program(pgid: i32) {
    let Some(start) = start_ticks(pgid) else { return };
    let mut i = inner();
    if acquire(&mut i).is_err() {
        return;
    }
    i.saved.programs.push(Leftover { pgid, start_ticks: start });
    if save(&i.saved).is_err() {
        i.saved.programs.pop();
        release_if_idle(&mut i);
    }
}

/// Forgets a program group noted by `watch_program` (it has ended).
pub fn forget_program(pgid: i32) {
    let mut i = inner();
    let n = i.saved.programs.len();
    i.saved.programs.retain(|p| p.pgid != pgid);
    if i.saved.programs.len() != n && i.lock.is_some() {
        let _ = save(&i.saved);
    }
    release_if_idle(&mut i);
}

/// A hold on the lock: no other splab changes a setting while it lives
/// (for tests that change settings or expect them unchanged).
pub struct Hold(());

/// Takes the lock for the life of the returned hold.
pub fn exclusive() -> Result<Hold, String> {
    let mut i = inner();
    acquire(&mut i)?;
    i.holds += 1;
    Ok(Hold(()))
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut i = inner();
        i.holds -= 1;
        release_if_idle(&mut i);
    }
}

/// Processes whose process group is `pgid` and that started at or after
/// `start` (so not an unrelated group that reused the number).
fn group_members(pgid: i32, start: u64) -> Vec<i32> {
    let Ok(rd) = fs::read_dir("/proc") else { return Vec::new() };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(t) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let Some(rest) = t.rfind(')').map(|k| &t[k + 2..]) else { return false };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) && f.get(19).and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s >= start)
        })
        .collect()
}

/// With the lock held: puts back what a dead splab's state file lists
/// and kills the program groups it left. Returns what was done, in words.
fn recover_locked() -> Result<Vec<String>, String> {
    let p = state_dir().join("state.json");
    let Ok(text) = fs::read_to_string(&p) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let saved: Saved = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => {
            let _ = fs::remove_file(&p);
            return Ok(vec![format!("removed an unreadable state file {} ({e})", p.display())]);
        }
    };
    if saved.boot_id != boot_id() {
        let _ = fs::remove_file(&p);
        return Ok(vec![format!("removed the state file of splab pid {} from before the last boot (settings reset at boot)", saved.pid)]);
    }
    let mut left = saved.clone();
    left.settings.clear();
    for s in &saved.settings {
        match write_value(&s.path, &s.old) {
            Ok(()) => out.push(format!("restored {} to {:?}, left changed by splab pid {} (killed)", s.path, s.old, saved.pid)),
            Err(e) => {
                out.push(format!("could not restore what splab pid {} left: {e}", saved.pid));
                left.settings.push(s.clone());
            }
        }
    }
    for g in &saved.programs {
        let members = group_members(g.pgid, g.start_ticks);
        if !members.is_empty() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-g.pgid, libc::SIGKILL) };
            out.push(format!("killed {} process(es) of the program group {} that splab pid {} left running", members.len(), g.pgid, saved.pid));
        }
    }
    if left.settings.is_empty() {
        let _ = fs::remove_file(&p);
    } else {
        save(&left)?;
    }
    Ok(out)
}

/// Called first thing by the front end: if a state file is there and no
/// live splab holds the lock, restores what it lists. Returns what was
/// done, in words (nothing when there was nothing to do).
pub fn recover() -> Vec<String> {
    let p = state_dir().join("state.json");
    if !Path::new(&p).exists() {
        return Vec::new();
    }
    let mut i = inner();
    if i.lock.is_some() {
        return Vec::new();
    }
    let Ok(f) = open_lock() else { return vec![format!("{} is there but the lock cannot be opened (not root?)", p.display())] };
    if !flock(&f, libc::LOCK_EX | libc::LOCK_NB) {
        // A live splab has it: its settings are its own to restore.
        return Vec::new();
    }
    i.lock = Some(f);
    let r = recover_locked().unwrap_or_else(|e| vec![e]);
    release_if_idle(&mut i);
    r
}

/// The process group signals are forwarded to while a program runs (0:
/// none, the run is in-process).
static FORWARD: AtomicI32 = AtomicI32::new(0);
/// The first signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);
static SIGNALS: Once = Once::new();
/// Whether a first signal that comes while no program runs is only kept
/// (`defer_signals`).
static DEFER: AtomicBool = AtomicBool::new(false);
/// Called with a first signal that ends splab, before the settings are put
/// back (`on_interrupt`).
type Hook = Box<dyn Fn(libc::c_int) + Send>;
static ON_INTERRUPT: Mutex<Option<Hook>> = Mutex::new(None);
const CAUGHT: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

fn caught_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in CAUGHT {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT in the calling thread (and
/// the threads it starts after) and starts a thread that waits for them.
/// While a program runs (`forward_to`), a signal is passed on to its
/// process group (a second one kills the group), and the run ends with it;
/// otherwise every setting is restored and the signal ends splab as it
/// would have. Call it before starting other threads; it runs once.
pub fn install_signals() {
    SIGNALS.call_once(|| {
        let set = caught_set();
        // SAFETY: a valid set; only the signal mask changes.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        std::thread::Builder::new()
            .name("splab-signals".into())
            .spawn(move || loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: waits on a valid set, writing the signal number.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                let first = RECEIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst).is_ok();
                let pg = FORWARD.load(Ordering::SeqCst);
                if pg > 0 {
                    // SAFETY: kill has no memory-safety preconditions.
                    unsafe { libc::kill(-pg, if first { sig } else { libc::SIGKILL }) };
                    continue;
                }
                if pg == STARTING || (first && DEFER.load(Ordering::SeqCst)) {
                    // Kept in RECEIVED: `forward_to` passes it on, or the
                    // runs stop at their next look at `received`.
                    continue;
                }
                if first {
                    if let Some(hook) = ON_INTERRUPT.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                        hook(sig);
                    }
                }
                die_by(sig);
            })
            .ok();
    });
}

/// From now on a first signal that comes between runs (no program
/// running) is only kept: the caller sees it in `received` before its
/// next run, stops, writes the report of the runs that finished, and
/// ends by it (`die_by`). A second signal still ends splab at once,
/// settings restored.
pub fn defer_signals() {
    DEFER.store(true, Ordering::SeqCst);
}

/// Sets what a first signal that ends splab does first (while a built-in
/// workload runs in splab's own process, which a signal cannot stop
/// otherwise): the front end writes the report of the runs that finished.
/// A second signal ends splab at once.
pub fn on_interrupt(hook: impl Fn(libc::c_int) + Send + 'static) {
    *ON_INTERRUPT.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(hook));
}

/// Restores every setting, then ends the process by `sig` with its default
/// action (so the shell sees the signal).
pub fn die_by(sig: libc::c_int) -> ! {
    for e in restore_all() {
        eprintln!("splab: {e}");
    }
    // SAFETY: resets the action and unblocks the signal in this thread
    // before raising it; it ends the process.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut one: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}

/// `FORWARD` while a program is being started.
const STARTING: i32 = -1;

/// A program is about to be started: a signal that comes from now until
/// `forward_to` names its process group is kept for it, not acted on at
/// once (splab would end and the program, started a moment later, would
/// outlive it with the run's output still open).
pub fn starting() {
    FORWARD.store(STARTING, Ordering::SeqCst);
}

/// Passes the signals splab receives to process group `pgid` from now on
/// (0: stop passing them on), starting with one that came while it was
/// being started.
pub fn forward_to(pgid: i32) {
    let was = FORWARD.swap(pgid, Ordering::SeqCst);
    if pgid > 0 && was == STARTING {
        if let Some(sig) = received() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-pgid, sig) };
        }
    }
}

/// The first of the caught signals received since the start, if any.
pub fn received() -> Option<libc::c_int> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The name of a signal, e.g. "SIGINT".
pub fn signal_name(sig: libc::c_int) -> String {
    let n = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGXCPU => "SIGXCPU",
        _ => return format!("signal {sig}"),
    };
    n.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_choice_files_and_numbers() {
        assert_eq!(bracketed("always [madvise] never\n").as_deref(), Some("madvise"));
        assert_eq!(bracketed("always inherit madvise [never]").as_deref(), Some("never"));
        assert_eq!(bracketed("0\n"), None);
    }

    #[test]
    fn start_ticks_of_self() {
        let me = std::process::id() as i32;
        assert!(start_ticks(me).is_some());
        assert!(start_ticks(-5).is_none());
    }
}
