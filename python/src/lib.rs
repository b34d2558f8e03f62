//! The native module of the `splab` Python package (`splab._splab`):
//! the splab crate's runs, sweeps, run store, published experiments and
//! command line, with specs, sweeps and results crossing as JSON text
//! (the Python side, `splab/__init__.py`, turns them into dicts and
//! DataFrames). Bad input raises `splab.InputError` (a `ValueError`)
//! naming the value, a failed run `splab.RunError` (a `RuntimeError`).

use pyo3::create_exception;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::Value;
use splab::simulate::RunOpts;
use splab::store::Store;
use splab::sweep::{self as sweeps, Executor, Sweep};
use splab::{Fail, RunSpec};
use std::path::PathBuf;

create_exception!(_splab, InputError, PyValueError, "Bad input: a spec, sweep or option value splab refuses; the message names it.");
create_exception!(_splab, RunError, PyRuntimeError, "A run that went wrong.");

fn err(f: Fail) -> PyErr {
    match f {
        Fail::Input(m) => InputError::new_err(m),
        Fail::Run(m) => RunError::new_err(m),
    }
}

fn json(text: &str, what: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| InputError::new_err(format!("{what}: not JSON: {e}")))
}

/// One run of the model in this process: the spec as JSON text, the
/// run's JSON document back.
#[pyfunction]
fn run(py: Python<'_>, spec: &str) -> PyResult<String> {
    let spec = RunSpec::from_value(json(spec, "spec")?).map_err(err)?;
    splab::workload::check_params(&spec).map_err(err)?;
    let opts = RunOpts { quiet: true, ..RunOpts::default() };
    py.detach(|| sweeps::document(&spec, &opts)).map_err(err)
}

/// The resolved form of a spec (every default written out), as JSON.
#[pyfunction]
fn resolve(spec: &str) -> PyResult<String> {
    let spec = RunSpec::from_value(json(spec, "spec")?).map_err(err)?;
    Ok(splab::setup::resolved(&spec).map_err(err)?.to_value().to_string())
}

/// A sweep (its definition as JSON, or the path of its TOML file) run into
/// the store at `store`: `jobs` processes here, or Ray tasks on the
/// cluster at `ray`, each running `worker` (a command, as a JSON list).
/// Returns the summary as JSON; with `dry_run`, the points instead.
#[pyfunction]
#[pyo3(signature = (definition, path, store, worker, jobs=None, ray=None, python=None, dry_run=false))]
#[allow(clippy::too_many_arguments)]
fn sweep(py: Python<'_>, definition: Option<&str>, path: Option<PathBuf>, store: PathBuf, worker: &str, jobs: Option<usize>, ray: Option<String>, python: Option<PathBuf>, dry_run: bool) -> PyResult<String> {
    let s = match (definition, &path) {
        (Some(d), _) => Sweep::from_json(d, "sweep").map_err(err)?,
        (None, Some(p)) => Sweep::load(p).map_err(err)?,
        (None, None) => return Err(InputError::new_err("give a sweep: a dict or the path of a TOML file")),
    };
    let command: Vec<String> = serde_json::from_str(worker).map_err(|e| InputError::new_err(format!("worker: {e}")))?;
    if jobs == Some(0) {
        return Err(InputError::new_err("jobs=0: at least one run at a time"));
    }
    let points = py.detach(|| s.points()).map_err(err)?;
    if dry_run {
        return Ok(serde_json::to_string(&points).unwrap_or_default());
    }
    let exec = match ray {
        Some(address) => Executor::Ray { address, python: python.unwrap_or_else(|| "python3".into()), command },
        None => Executor::Local { jobs: jobs.unwrap_or_else(sweeps::cpus), command },
    };
    // Ctrl-C in Python stops the sweep as a signal stops `splab sweep`.
    let stop = || Python::attach(|py| py.check_signals().err().map(|_| "KeyboardInterrupt".to_string()));
    let summary = py
        .detach(|| {
            let st = Store::open(&store)?;
            sweeps::run(&s, &points, &st, &exec, &stop, false)
        })
        .map_err(err)?;
    if summary.interrupted_by.is_some() {
        return Err(PyKeyboardInterrupt::new_err(format!("sweep {} stopped: {} runs stored, run it again for the rest", summary.sweep, summary.ran)));
    }
    Ok(serde_json::to_string(&summary).unwrap_or_default())
}

/// The published experiments `names` (all for none), `jobs` at once,
/// each in a child running `worker` (a command, as a JSON list); the
/// reproduction as `splab reproduce --json` prints it.
#[pyfunction]
#[pyo3(signature = (names, worker, quick=false, jobs=None))]
fn reproduce(py: Python<'_>, names: Vec<String>, worker: &str, quick: bool, jobs: Option<usize>) -> PyResult<String> {
    let command: Vec<String> = serde_json::from_str(worker).map_err(|e| InputError::new_err(format!("worker: {e}")))?;
    splab::workers::set_own_command(command);
    let chosen = splab::reproduce::select(&names).map_err(err)?;
    // Ctrl-C in Python stops the experiments' children, as in `sweep`.
    let interrupted = std::sync::atomic::AtomicBool::new(false);
    let stop = || {
        let hit = Python::attach(|py| py.check_signals().is_err());
        interrupted.fetch_or(hit, std::sync::atomic::Ordering::SeqCst);
        hit
    };
    let r = py.detach(|| splab::reproduce::reproduce(&chosen, quick, jobs, true, false, &stop));
    if interrupted.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(PyKeyboardInterrupt::new_err("reproduce stopped: its experiments' runs were ended"));
    }
    Ok(splab::output::json(&r.map_err(err)?))
}

/// The runs in the store at `store` (those of `sweep`, where `where`
/// holds), as JSON: {"columns": [...], "rows": [[...], ...]}.
#[pyfunction]
#[pyo3(signature = (store, sweep=None, filter=None, full=false))]
fn runs(store: PathBuf, sweep: Option<&str>, filter: Option<&str>, full: bool) -> PyResult<String> {
    if !store.exists() {
        return Err(InputError::new_err(format!("store {}: no such file (a sweep makes it)", store.display())));
    }
    let t = Store::open(&store).map_err(err)?.query(sweep, filter, None, full).map_err(err)?;
    let rows: Vec<Vec<Value>> = t.rows.iter().map(|r| r.iter().map(splab::store::json).collect()).collect();
    Ok(serde_json::json!({ "columns": t.columns, "rows": rows }).to_string())
}

/// The splab command line with `argv` (the program's name first); returns
/// its exit status. The commands that run splab again in children (a
/// sweep's points, reproduce's experiments, bench's parts) run it as
/// `python -m splab` with this Python: this process is Python, not splab.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let python: String = py.import("sys")?.getattr("executable")?.extract()?;
    splab::workers::set_own_command(vec![python, "-m".into(), "splab".into()]);
    Ok(splab::cli::run(argv.into_iter().map(Into::into)))
}

/// The build of splab this module is (`splab -V` says the same).
#[pyfunction]
fn build() -> &'static str {
    splab::output::BUILD
}

#[pymodule]
fn _splab(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("InputError", m.py().get_type::<InputError>())?;
    m.add("RunError", m.py().get_type::<RunError>())?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(resolve, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(runs, m)?)?;
    m.add_function(wrap_pyfunction!(reproduce, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    Ok(())
}
