//! `splab sweep --ray ADDRESS`: each point a Ray task. Ray is Python, so
//! the driver is a small Python program (`ray/driver.py`, carried in this
//! binary) run with the Python that has Ray: splab writes it the points,
//! it submits one task per point to the cluster at ADDRESS, each task
//! runs `COMMAND run-spec` on a worker with the point's spec, and the
//! driver prints each task's JSON document back as it finishes; splab
//! stores it (`sweep::run`), as it does a local run's (`workers`). A worker needs the same splab build as this
//! one at COMMAND (by default this executable's path), and the documents
//! say which build made them, so a worker with another build is reported,
//! not stored.

use crate::error::Fail;
use crate::workers::{Outcome, Running};
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

/// The driver program.
pub const DRIVER: &str = include_str!("ray/driver.py");

/// One line the driver prints.
#[derive(Deserialize)]
struct Line {
    index: usize,
    returncode: i64,
    stdout: String,
    stderr: String,
    host: String,
}

/// Checks that `python` can import Ray; the error says how to get it.
fn check_python(python: &Path) -> Result<(), Fail> {
    let out = Command::new(python).args(["-c", "import ray"]).stdin(Stdio::null()).output();
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(_) => Err(Fail::Input(format!("--ray: {} cannot import ray (pip install 'ray[default]', or name another --python)", python.display()))),
        Err(e) => Err(Fail::Input(format!("--python {}: cannot run it: {e}", python.display()))),
    }
}

/// Starts the driver on the cluster at `address` with the points' specs;
/// each outcome comes on `tx`, indexed as `specs`.
pub fn start(address: &str, python: &Path, command: &[String], specs: &[String], tx: Sender<Outcome>) -> Result<Running, Fail> {
    check_python(python)?;
    let (stop, pids): (Arc<AtomicBool>, Arc<Mutex<Vec<i32>>>) = Default::default();
    let command_json = serde_json::to_string(command).map_err(|e| Fail::Run(e.to_string()))?;
    let mut child = Command::new(python)
        .args(["-c", DRIVER, address, &command_json])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Fail::Input(format!("--python {}: cannot run it: {e}", python.display())))?;
    pids.lock().unwrap_or_else(|e| e.into_inner()).push(child.id() as i32);
    let mut input = child.stdin.take().ok_or_else(|| Fail::Run("the Ray driver has no standard input".into()))?;
    let stdout = child.stdout.take().ok_or_else(|| Fail::Run("the Ray driver has no standard output".into()))?;
    let mut stderr = child.stderr.take().ok_or_else(|| Fail::Run("the Ray driver has no standard error".into()))?;
    let lines: Vec<String> = specs.iter().enumerate().map(|(index, spec)| serde_json::json!({ "index": index, "spec": spec }).to_string()).collect();
    let n = specs.len();
    let feeder = std::thread::spawn(move || {
        for l in lines {
            if writeln!(input, "{l}").is_err() {
                break;
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let reader = std::thread::spawn(move || {
        let mut seen = vec![false; n];
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(l) = serde_json::from_str::<Line>(&line) else { continue };
            if l.index >= n {
                continue;
            }
            seen[l.index] = true;
            let result = if l.returncode == 0 {
                Ok(l.stdout)
            } else {
                let last = l.stderr.lines().rev().find(|x| !x.trim().is_empty()).unwrap_or("the run failed").trim_start_matches("splab: ").to_string();
                Err(format!("on {}: {last} (exit {})", if l.host.is_empty() { "a Ray worker" } else { &l.host }, l.returncode))
            };
            if tx.send(Outcome { index: l.index, host: l.host, result, bad_input: false }).is_err() {
                break;
            }
        }
        let status = child.wait();
        let _ = feeder.join();
        let err = errors.join().unwrap_or_default();
        // Points the driver never reported: it failed (or was stopped).
        let why = match status {
            Ok(s) if s.success() => "the Ray driver ended without reporting it".to_string(),
            Ok(s) => {
                let last = err.lines().rev().find(|x| !x.trim().is_empty()).unwrap_or("").to_string();
                format!("the Ray driver failed ({s}): {last}")
            }
            Err(e) => format!("the Ray driver: {e}"),
        };
        for (index, _) in seen.iter().enumerate().filter(|(_, s)| !**s) {
            let _ = tx.send(Outcome { index, host: String::new(), result: Err(why.clone()), bad_input: false });
        }
    });
    Ok(Running { stop, pids, threads: vec![reader] })
}
