//! Where a sweep's runs happen, and what every way of running them
//! shares: each run a child process (`COMMAND run-spec`, the spec on its
//! standard input, its JSON document on its standard output), `jobs` at
//! once on this machine (`start_local`); `ray` runs them as Ray tasks.
//! Each outcome comes back on a channel to `sweep::run`, the one place
//! that writes the store. `reproduce --jobs` runs its experiments the
//! same way, each a child (`start_tasks`).

use std::collections::VecDeque;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

/// How one point's run ended, as an executor reports it.
pub struct Outcome {
    /// Index into the list of points given to the executor.
    pub index: usize,
    pub host: String,
    /// The run's JSON document, or why there is none.
    pub result: Result<String, String>,
    /// Whether the child said its input was bad (splab's exit status 2).
    pub bad_input: bool,
}

/// Why a child printed no document: what it said, and its exit status.
struct Failed {
    msg: String,
    status: Option<i32>,
}

impl From<String> for Failed {
    fn from(msg: String) -> Failed {
        Failed { msg, status: None }
    }
}

/// This host's name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most the buffer's length.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).to_string()
    } else {
        "unknown".into()
    }
}

/// The command that runs this splab's command line where this process is
/// not the splab executable (`set_own_command`).
static OWN_COMMAND: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// Says how to run this splab's command line again, for a process that is
/// not the splab executable: the Python package's `python -m splab`.
pub fn set_own_command(command: Vec<String>) {
    *OWN_COMMAND.lock().unwrap_or_else(|e| e.into_inner()) = Some(command);
}

/// The command that runs this splab's command line in a child (a sweep's
/// points, reproduce's experiments, bench's parts): this executable, or
/// what `set_own_command` said.
pub fn own_command() -> Result<Vec<String>, crate::error::Fail> {
    if let Some(c) = OWN_COMMAND.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        return Ok(c);
    }
    let exe = std::env::current_exe().map_err(|e| crate::error::Fail::Run(format!("cannot find this executable to run its children with: {e}")))?;
    Ok(vec![exe.display().to_string()])
}

/// A running executor: stopped on request, waited for at the end.
pub struct Running {
    pub stop: Arc<AtomicBool>,
    /// The processes to end on a stop: the runs' (local) or the Ray
    /// driver's.
    pub pids: Arc<Mutex<Vec<i32>>>,
    pub threads: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Stops starting runs and ends those running (SIGTERM).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for &pid in self.pids.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }

    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Starts the runs of `specs`, `jobs` processes at once running
/// `command run-spec --single-thread`, each spec on its standard input;
/// each outcome comes on `tx`, indexed as `specs`.
pub fn start_local(jobs: usize, command: &[String], specs: &[String], tx: Sender<Outcome>) -> Running {
    let tasks = specs.iter().map(|spec| Task { args: vec!["run-spec".into(), "--single-thread".into()], stdin: Some(spec.clone()) }).collect();
    start_tasks(jobs, command, tasks, tx)
}

/// One child process's work: `command` with these arguments, and what
/// it reads on its standard input.
pub struct Task {
    pub args: Vec<String>,
    pub stdin: Option<String>,
}

/// Starts `tasks`, `jobs` processes at once running `command`; each
/// outcome (what the child printed) comes on `tx`, indexed as `tasks`.
pub fn start_tasks(jobs: usize, command: &[String], tasks: Vec<Task>, tx: Sender<Outcome>) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let pids: Arc<Mutex<Vec<i32>>> = Arc::default();
    let count = tasks.len();
    let queue: Arc<Mutex<VecDeque<(usize, Task)>>> = Arc::new(Mutex::new(tasks.into_iter().enumerate().collect()));
    let host = hostname();
    let threads = (0..jobs.max(1).min(count.max(1)))
        .map(|_| {
            let (queue, stop, pids, tx, command, host) = (queue.clone(), stop.clone(), pids.clone(), tx.clone(), command.to_vec(), host.clone());
            std::thread::spawn(move || loop {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Some((index, task)) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else { break };
                let (result, bad_input) = match run_child(&command, &task, &pids) {
                    Ok(doc) => (Ok(doc), false),
                    Err(f) => (Err(f.msg), f.status == Some(2)),
                };
                if tx.send(Outcome { index, host: host.clone(), result, bad_input }).is_err() {
                    break;
                }
            })
        })
        .collect();
    Running { stop, pids, threads }
}

/// Makes the child `cmd` starts end (SIGKILL) when this process does, or
/// rather the thread that starts it, which must outlive the child (it
/// waits for it): a signal that ends splab otherwise leaves its runs going
/// on. A child whose parent ended before the request took effect exits.
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe, as a
    // pre_exec closure's calls must be.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Runs one task in a child process (`COMMAND ARGS`, its input on the
/// child's standard input) and returns what it printed.
fn run_child(command: &[String], task: &Task, pids: &Mutex<Vec<i32>>) -> Result<String, Failed> {
    let (exe, args) = command.split_first().ok_or_else(|| "no command to run points with".to_string())?;
    let mut cmd = Command::new(exe);
    die_with_parent(&mut cmd);
    let mut child = cmd
        .args(args)
        .args(&task.args)
        .stdin(if task.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {exe}: {e}"))?;
    let pid = child.id() as i32;
    pids.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
    if let (Some(mut i), Some(input)) = (child.stdin.take(), &task.stdin) {
        let _ = i.write_all(input.as_bytes());
    }
    let out = child.wait_with_output();
    pids.lock().unwrap_or_else(|e| e.into_inner()).retain(|&p| p != pid);
    let out = out.map_err(|e| format!("waiting for {exe}: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8(out.stdout).map_err(|e| format!("output not UTF-8: {e}"))?);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim_start_matches("splab: ");
    Err(Failed { msg: format!("{} ({})", if last.is_empty() { "the run failed" } else { last }, out.status), status: out.status.code() })
}

