//! `splab sweep FILE.toml`: many runs of the model from one file. The
//! file has a base spec and axes over any of its fields; every
//! combination of one value of each axis is a point, run `repeats` times.
//! Points run in parallel, each in its own process (`splab run-spec`, so
//! that a crash or an out-of-memory ends one run and not the sweep), on
//! this machine (`--jobs`) or as Ray tasks on a cluster (`--ray`, `ray`).
//! Every finished run goes into the run store at once (`store`), keyed by
//! its resolved spec and the build; a point whose run is already there is
//! not run again, so an interrupted sweep continues where it stopped.
//!
//! ```toml
//! name = "tlb-reach"          # default: the file's name
//! repeats = 1                 # runs of each point (default 1)
//! seeds = [1, 2]              # an axis over `seed`
//!
//! [base]                      # fields every point starts from
//! memory = "1G"
//!
//! [axes]                      # in this order; a value is one field's, or
//! workload = ["gups", "lat"]  # a table of several (`label` names it)
//! arch = ["amd64", "arm64"]
//! policy = ["freebsd", "shimizu"]
//! log2_table = { from = 16, to = 20, step = 2 }   # or times = 2
//! size = [{ label = "small", max_size = "1M" }, { label = "large", max_size = "8M" }]
//! ```

use crate::error::Fail;
use crate::output::{self, BUILD};
use crate::progress::Progress;
use crate::setup;
use crate::simulate::{self, RunOpts};
use crate::spec::RunSpec;
use crate::store::{self, Finished, Store};
use crate::workers::{self, Outcome, Running};
use clap::Args;
use serde::Serialize;
use serde_json::{Map, Value};
use splab_defs::workload::PARAMS;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::Duration;

#[derive(Args, Clone, Debug)]
pub struct SweepArgs {
    /// The sweep: a TOML file with a [base] spec and [axes] over its
    /// fields (docs/sweeps.md).
    #[arg(value_name = "FILE.toml")]
    pub file: PathBuf,
    /// Runs at once on this machine, each its own process [default: one
    /// per CPU].
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// The run store (SQLite).
    #[arg(long, value_name = "PATH", default_value = store::DEFAULT)]
    pub store: PathBuf,
    /// List the points (and which are already in the store); run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run each point as a Ray task on the cluster at ADDRESS (e.g.
    /// 127.0.0.1:6379, or auto), through the Python that has Ray
    /// (--python); results come back to the store here.
    #[arg(long, value_name = "ADDRESS")]
    pub ray: Option<String>,
    /// The Python with Ray installed, for --ray.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
    /// The command a Ray worker runs a point with, its words separated by
    /// spaces [default: this splab's own path; every worker needs the
    /// same build there].
    #[arg(long, value_name = "COMMAND")]
    pub worker: Option<String>,
    /// Print one JSON document (the points and what became of them)
    /// instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `splab run-spec`.
#[derive(Args, Clone, Debug)]
pub struct RunSpecArgs {
    /// Use one host thread (the results are the same).
    #[arg(long)]
    pub single_thread: bool,
}

/// One axis: its name and values, each a label and the fields it sets.
#[derive(Clone, Debug)]
pub struct Axis {
    pub name: String,
    pub values: Vec<(String, Map<String, Value>)>,
}

/// A sweep as its file defines it.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub name: String,
    pub base: Map<String, Value>,
    pub axes: Vec<Axis>,
    pub repeats: u32,
    /// The definition as given, stored with the sweep.
    pub definition: Value,
}

/// One point: its index, repeat, its axes' values and its resolved spec.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub point: usize,
    pub repeat: u32,
    /// Each axis's label for this point, in the axes' order.
    pub axes: Vec<(String, String)>,
    /// The spec every default written out: what the run store keys it by.
    pub spec: Value,
    /// The point it repeats, when its spec resolves to an earlier one's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_as: Option<usize>,
    #[serde(skip)]
    pub key: String,
}

impl Point {
    fn axes_value(&self) -> Value {
        Value::Object(self.axes.iter().map(|(a, l)| (a.clone(), Value::from(l.clone()))).collect())
    }
}

fn bad(file: &str, what: impl std::fmt::Display) -> Fail {
    Fail::Input(format!("{file}: {what}"))
}

/// The fields a spec's flat table may have.
fn is_field(name: &str) -> bool {
    PARAMS.contains(&name) || crate::store::SPEC_COLUMNS.contains(&name)
}

/// A range's values: `{ from, to, step }` (inclusive, arithmetic) or
/// `{ from, to, times }` (geometric); sizes (`"1G"`) as text.
fn range(file: &str, axis: &str, t: &Map<String, Value>) -> Result<Vec<Value>, Fail> {
    let bad = |w: String| bad(file, format!("axis {axis}: {w}"));
    let num = |k: &str| -> Result<(f64, bool), Fail> {
        match t.get(k) {
            Some(Value::Number(n)) => Ok((n.as_f64().unwrap_or(f64::NAN), false)),
            Some(Value::String(s)) => splab_hw::size::parse(s).map(|b| (b as f64, true)).map_err(|e| bad(format!("{k}: {e}"))),
            Some(v) => Err(bad(format!("{k} = {v}: expected a number or a size"))),
            None => Err(bad(format!("a range needs {k}"))),
        }
    };
    let ((from, size), (to, _)) = (num("from")?, num("to")?);
    let step = t.get("step").and_then(Value::as_f64);
    let times = t.get("times").and_then(Value::as_f64);
    let integer = t.values().all(|v| v.as_i64().is_some() || v.is_string());
    let mut v = Vec::new();
    let mut x = from;
    while x <= to * (1.0 + 1e-12) {
        v.push(if size {
            Value::from(setup::size_text(x.round() as u64))
        } else if integer {
            Value::from(x.round() as i64)
        } else {
            Value::from(x)
        });
        if v.len() > 100_000 {
            return Err(bad("more than 100000 values".into()));
        }
        x = match (step, times) {
            (Some(s), None) if s > 0.0 => x + s,
            (None, Some(m)) if m > 1.0 => x * m,
            _ => return Err(bad("give step (above 0) or times (above 1), one of them".into())),
        };
    }
    if v.is_empty() {
        return Err(bad(format!("from {from} is above to {to}")));
    }
    Ok(v)
}

/// A value's label: its text, or for a table its `label`, else its
/// fields as `name=value` joined by commas.
fn label(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(label).collect::<Vec<_>>().join(","),
        Value::Object(m) => match m.get("label") {
            Some(l) => label(l),
            None => m.iter().map(|(k, v)| format!("{k}={}", label(v))).collect::<Vec<_>>().join(","),
        },
        other => other.to_string(),
    }
}

impl Sweep {
    /// A sweep from its definition (a TOML file's table, or Python's
    /// dict); `file` names it in errors, `name` when the definition does
    /// not.
    pub fn from_table(def: toml::Table, file: &str, name: &str) -> Result<Sweep, Fail> {
        let definition = serde_json::to_value(&def).map_err(|e| bad(file, e))?;
        let value = |v: toml::Value| serde_json::to_value(v).map_err(|e| bad(file, e));
        let mut top = def;
        let name = match top.remove("name").map(value).transpose()? {
            Some(Value::String(s)) if !s.is_empty() => s,
            Some(v) => return Err(bad(file, format!("name = {v}: expected a non-empty string"))),
            None => name.to_string(),
        };
        let repeats = match top.remove("repeats").map(value).transpose()? {
            None => 1,
            Some(v) => v.as_u64().filter(|r| (1..=1000).contains(r)).ok_or_else(|| bad(file, format!("repeats = {v}: expected 1 to 1000")))? as u32,
        };
        let base = match top.remove("base").map(value).transpose()? {
            None => Map::new(),
            Some(Value::Object(m)) => m,
            Some(v) => return Err(bad(file, format!("base = {v}: expected a table of spec fields"))),
        };
        let mut axes = Vec::new();
        if let Some(seeds) = top.remove("seeds") {
            axes.push(("seed".to_string(), value(seeds)?));
        }
        // The axes in the definition's order (a TOML table keeps it).
        match top.remove("axes") {
            None => {}
            Some(toml::Value::Table(m)) => {
                for (k, v) in m {
                    axes.push((k, value(v)?));
                }
            }
            Some(v) => return Err(bad(file, format!("axes = {v}: expected a table of axes"))),
        }
        if let Some(k) = top.keys().next() {
            return Err(bad(file, format!("unknown key {k:?} (known: name, repeats, seeds, base, axes)")));
        }
        let mut out = Vec::new();
        for (axis, values) in axes {
            let values = match values {
                Value::Array(a) if !a.is_empty() => a,
                Value::Object(t) => range(file, &axis, &t)?,
                v => return Err(bad(file, format!("axis {axis} = {v}: expected a non-empty list of values or a range {{ from, to, step|times }}"))),
            };
            let mut vals = Vec::new();
            for v in values {
                let l = label(&v);
                let fields = match v {
                    Value::Object(mut m) => {
                        m.remove("label");
                        if let Some(k) = m.keys().find(|k| !is_field(k)) {
                            return Err(bad(file, format!("axis {axis}: {k:?} is not a field of a run spec")));
                        }
                        m
                    }
                    v if is_field(&axis) => Map::from_iter([(axis.clone(), v)]),
                    v => return Err(bad(file, format!("axis {axis}: {axis:?} is not a field of a run spec, so each value must be a table of fields (got {v})"))),
                };
                if vals.iter().any(|(x, _): &(String, _)| *x == l) {
                    return Err(bad(file, format!("axis {axis}: {l} is listed twice")));
                }
                vals.push((l, fields));
            }
            out.push(Axis { name: axis, values: vals });
        }
        Ok(Sweep { name, base, axes: out, repeats, definition })
    }

    /// The sweep in a TOML file.
    pub fn load(path: &Path) -> Result<Sweep, Fail> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Fail::Input(format!("{shown}: cannot read it: {e}")))?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| Fail::Input(format!("{shown}: not TOML: {}", e.to_string().replace('\n', " ").trim())))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "sweep".into());
        Sweep::from_table(table, &shown, &stem)
    }

    /// A sweep from JSON text (Python's dict), its keys in their order.
    pub fn from_json(text: &str, name: &str) -> Result<Sweep, Fail> {
        let table: toml::Table = serde_json::from_str(text).map_err(|e| Fail::Input(format!("sweep: {e}")))?;
        Sweep::from_table(table, "sweep", name)
    }

    pub fn axis_names(&self) -> Vec<String> {
        self.axes.iter().map(|a| a.name.clone()).collect()
    }

    /// Every point, the first axis varying slowest, each resolved (an
    /// error names the point and what is wrong with it).
    pub fn points(&self) -> Result<Vec<Point>, Fail> {
        let n: usize = self.axes.iter().map(|a| a.values.len()).product();
        if n > 1_000_000 {
            return Err(Fail::Input(format!("sweep {}: {n} points is too many (at most 1000000)", self.name)));
        }
        let mut out = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for i in 0..n {
            let mut rest = i;
            let mut pick = vec![0; self.axes.len()];
            for (k, a) in self.axes.iter().enumerate().rev() {
                pick[k] = rest % a.values.len();
                rest /= a.values.len();
            }
            let mut fields = self.base.clone();
            let mut axes = Vec::new();
            for (a, &j) in self.axes.iter().zip(&pick) {
                let (l, f) = &a.values[j];
                fields.extend(f.clone());
                axes.push((a.name.clone(), l.clone()));
            }
            let shown = axes.iter().map(|(a, l)| format!("{a}={l}")).collect::<Vec<_>>().join(" ");
            let at = |m: &str| Fail::Input(format!("sweep {}: point {i} ({shown}): {m}", self.name));
            let spec = RunSpec::from_value(Value::Object(fields)).map_err(|f| at(f.message()))?;
            let resolved = setup::resolved(&spec).map_err(|f| at(f.message()))?;
            let cfg = setup::run_config(&spec).map_err(|f| at(f.message()))?;
            // The workload is built (not run) so that a bad parameter is
            // reported before anything runs.
            crate::workload::build(&spec, &cfg, &Default::default()).map_err(|f| at(f.message()))?;
            let value = resolved.to_value();
            let key = value.to_string();
            let same_as = seen.get(&key).copied();
            seen.entry(key.clone()).or_insert(i);
            for repeat in 0..self.repeats {
                out.push(Point { point: i, repeat, axes: axes.clone(), spec: value.clone(), same_as, key: key.clone() });
            }
        }
        Ok(out)
    }
}

/// Where the runs happen: this machine's processes or a Ray cluster.
pub enum Executor {
    /// `jobs` processes at once running `command` (with `run-spec`).
    Local { jobs: usize, command: Vec<String> },
    /// Ray tasks on the cluster at `address`, through `python`, each
    /// running `command`.
    Ray { address: String, python: PathBuf, command: Vec<String> },
}

/// What a sweep did.
#[derive(Serialize, Default)]
pub struct Summary {
    pub sweep: String,
    pub store: String,
    pub build: String,
    /// Runs of the sweep (points times repeats).
    pub runs: usize,
    /// Already in the store with this build, not run again.
    pub already: usize,
    /// Run now and stored.
    pub ran: usize,
    pub failed: usize,
    /// The failures: the point, its axes and the message.
    pub failures: Vec<String>,
    /// The signal that stopped the sweep, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
    pub host_seconds: f64,
}

/// Runs the points of `sweep` not yet in `store` with `exec`, storing each
/// as it finishes; `stop` is asked now and then whether to stop (a
/// signal), `progress` whether to draw a bar.
pub fn run(sweep: &Sweep, points: &[Point], store: &Store, exec: &Executor, stop: &dyn Fn() -> Option<String>, progress: bool) -> Result<Summary, Fail> {
    let t0 = std::time::Instant::now();
    let recorded: Vec<(usize, u32, String, Value)> = points.iter().map(|p| (p.point, p.repeat, p.key.clone(), p.axes_value())).collect();
    store.add_sweep(&sweep.name, &sweep.axis_names(), &sweep.definition, &recorded, BUILD)?;
    let mut summary = Summary { sweep: sweep.name.clone(), store: store.path.display().to_string(), build: BUILD.to_string(), runs: points.len(), ..Summary::default() };
    // Each distinct run once: points that resolve to the same spec share it.
    let mut todo: Vec<&Point> = Vec::new();
    let mut queued: HashMap<(String, u32), ()> = HashMap::new();
    for p in points {
        if store.done(&p.key, BUILD, p.repeat)? {
            summary.already += 1;
        } else if queued.insert((p.key.clone(), p.repeat), ()).is_none() {
            todo.push(p);
        } else {
            summary.already += 1;
        }
    }
    let mut bar = Progress::new(todo.len() as u64, &sweep.name, "runs", !progress);
    let specs: Vec<String> = todo.iter().map(|p| p.spec.to_string()).collect();
    let (tx, rx) = channel();
    let mut handle = start(exec, &specs, tx)?;
    let mut done = 0usize;
    let mut stopping = false;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(o) => {
                let p = todo[o.index];
                done += 1;
                bar.update(done as u64);
                let outcome = o.result.and_then(|doc| check(&doc, p));
                if stopping && outcome.is_err() {
                    // A run ended by the stop is not a failure to record.
                    continue;
                }
                match &outcome {
                    Ok(_) => summary.ran += 1,
                    Err(e) => {
                        summary.failed += 1;
                        let axes = p.axes.iter().map(|(a, l)| format!("{a}={l}")).collect::<Vec<_>>().join(" ");
                        summary.failures.push(format!("point {} ({axes}): {e}", p.point));
                    }
                }
                let f = Finished { key: p.key.clone(), spec: p.spec.clone(), repeat: p.repeat, sweep: Some(sweep.name.clone()), host: o.host, outcome };
                store.insert(BUILD, &f)?;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if !stopping {
            if let Some(sig) = stop() {
                stopping = true;
                summary.interrupted_by = Some(sig);
                handle.stop();
            }
        }
    }
    handle.wait();
    bar.finish();
    summary.host_seconds = t0.elapsed().as_secs_f64();
    Ok(summary)
}

/// A run's document checked against its point: JSON, of this build, of
/// this spec.
fn check(doc: &str, p: &Point) -> Result<Value, String> {
    let v: Value = serde_json::from_str(doc).map_err(|e| format!("the run printed no JSON document ({e})"))?;
    match v.get("build").and_then(Value::as_str) {
        Some(b) if b == BUILD => {}
        other => return Err(format!("the run was made by build {} (this is {BUILD}): every worker needs the same build", other.unwrap_or("?"))),
    }
    if v.get("spec") != Some(&p.spec) {
        return Err("the run's spec is not the point's (a different build?)".into());
    }
    Ok(v)
}

/// Starts the runs of `specs` with `exec`; each outcome comes on `tx`.
fn start(exec: &Executor, specs: &[String], tx: Sender<Outcome>) -> Result<Running, Fail> {
    match exec {
        Executor::Local { jobs, command } => Ok(workers::start_local(*jobs, command, specs, tx)),
        Executor::Ray { address, python, command } => crate::ray::start(address, python, command, specs, tx),
    }
}

/// The JSON document of one run: its record, headed by the command line
/// that would run it alone and the build.
pub fn document(spec: &RunSpec, opts: &RunOpts) -> Result<String, Fail> {
    let r = simulate::simulate(spec, opts)?;
    Ok(output::plain_json(&output::Document { command: spec.command_line("sim"), build: BUILD, body: &r }))
}

/// `splab run-spec`: one run, its spec as JSON on standard input, its
/// document on standard output.
pub fn run_spec_cmd(a: &RunSpecArgs) -> Result<i32, Fail> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).map_err(|e| Fail::Input(format!("reading the spec from standard input: {e}")))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| Fail::Input(format!("the spec on standard input is not JSON: {e}")))?;
    let spec = RunSpec::from_value(v)?;
    let opts = RunOpts { quiet: true, single_thread: a.single_thread, ..RunOpts::default() };
    output::emit(&document(&spec, &opts)?);
    Ok(0)
}

/// Every CPU of this host.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn dry_run_text(sweep: &Sweep, points: &[Point], done: &[bool]) -> String {
    let mut o = format!("sweep {}: {} runs ({} axes: {}), {} already in the store with build {BUILD}\n", sweep.name, points.len(), sweep.axes.len(), sweep.axis_names().join(", "), done.iter().filter(|d| **d).count());
    for (p, d) in points.iter().zip(done) {
        let axes = p.axes.iter().map(|(a, l)| format!("{a}={l}")).collect::<Vec<_>>().join(" ");
        let spec = RunSpec::from_value(p.spec.clone()).map(|s| s.command_line("sim")).unwrap_or_default();
        let state = match (d, p.same_as) {
            (true, _) => "stored".to_string(),
            (false, Some(s)) => format!("same as point {s}"),
            (false, None) => "to run".to_string(),
        };
        o.push_str(&format!("{:>5} r{} {:<10} {axes}\n        {spec}\n", p.point, p.repeat, state));
    }
    o
}

fn summary_text(s: &Summary) -> String {
    let mut o = format!(
        "sweep {}: {} runs; {} already in {} (build {}), {} run now, {} failed; {:.1} s\n",
        s.sweep, s.runs, s.already, s.store, s.build, s.ran, s.failed, s.host_seconds
    );
    for f in &s.failures {
        o.push_str(&format!("  FAILED {f}\n"));
    }
    if let Some(sig) = &s.interrupted_by {
        o.push_str(&format!("  interrupted by {sig}: the runs that finished are stored; run the sweep again to run the rest\n"));
    }
    o
}

/// `splab sweep`.
pub fn cmd(a: &SweepArgs) -> Result<i32, Fail> {
    if a.jobs == Some(0) {
        return Err(Fail::Input("--jobs 0: at least one run at a time".into()));
    }
    let sweep = Sweep::load(&a.file)?;
    let points = sweep.points()?;
    let store = Store::open(&a.store)?;
    if a.dry_run {
        let done: Vec<bool> = points.iter().map(|p| store.done(&p.key, BUILD, p.repeat)).collect::<Result<_, _>>()?;
        if a.json {
            #[derive(Serialize)]
            struct DryRun<'a> {
                sweep: &'a str,
                axes: Vec<String>,
                points: Vec<(&'a Point, bool)>,
            }
            output::emit(&output::json(&DryRun { sweep: &sweep.name, axes: sweep.axis_names(), points: points.iter().zip(done).collect() }));
        } else {
            output::emit(&dry_run_text(&sweep, &points, &done));
        }
        return Ok(0);
    }
    let exec = match &a.ray {
        Some(address) => {
            let command = match &a.worker {
                Some(w) => w.split_whitespace().map(str::to_string).collect(),
                None => workers::own_command()?,
            };
            Executor::Ray { address: address.clone(), python: a.python.clone(), command }
        }
        None => Executor::Local { jobs: a.jobs.unwrap_or_else(cpus), command: workers::own_command()? },
    };
    splab_native::sysstate::install_signals();
    splab_native::sysstate::defer_signals();
    let stop = || splab_native::sysstate::received().map(splab_native::sysstate::signal_name);
    let s = run(&sweep, &points, &store, &exec, &stop, !a.json)?;
    output::emit(&if a.json { output::json(&s) } else { summary_text(&s) });
    if let Some(sig) = splab_native::sysstate::received() {
        splab_native::sysstate::die_by(sig);
    }
    Ok(if s.failed > 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(toml: &str) -> Result<Sweep, Fail> {
        let t: toml::Table = toml::from_str(toml).unwrap();
        Sweep::from_table(t, "t.toml", "t")
    }

    #[test]
    fn axes_multiply_in_the_files_order() {
        let s = sweep("repeats = 2\n[base]\nmemory = \"256M\"\nlog2_table = 12\n[axes]\nworkload = [\"gups\", \"stream\"]\narch = [\"amd64\", \"arm64\", \"riscv\"]\nn = { from = 1000, to = 3000, step = 2000 }\n").ok().unwrap();
        assert_eq!(s.axis_names(), ["workload", "arch", "n"]);
        let p = s.points().ok().unwrap();
        assert_eq!(p.len(), 2 * 3 * 2 * 2);
        assert_eq!(p[0].axes, [("workload".into(), "gups".into()), ("arch".into(), "amd64".into()), ("n".into(), "1000".into())]);
        // gups takes no --n: its two n points are one run.
        assert_eq!(p[2].same_as, Some(0));
        assert_eq!(p.last().unwrap().spec["n"], 3000);
    }

    #[test]
    fn tables_set_several_fields_and_ranges_step_geometrically() {
        let s = sweep("[axes]\nsize = [{ label = \"small\", log2_table = 12, max_size = \"1M\" }, { log2_table = 14 }]\nmemory = { from = \"256M\", to = \"1G\", times = 2 }\n").ok().unwrap();
        assert_eq!(s.axes[0].values[0].0, "small");
        assert_eq!(s.axes[0].values[1].0, "log2_table=14");
        assert_eq!(s.axes[1].values.iter().map(|v| v.0.clone()).collect::<Vec<_>>(), ["256M", "512M", "1G"]);
    }

    #[test]
    fn mistakes_are_named() {
        for (t, named) in [
            ("[axes]\narch = [\"vax\"]\n[base]\nworkload = \"gups\"", "vax"),
            ("[axes]\nsize = [1, 2]", "size"),
            ("[axes]\narch = []", "arch"),
            ("colour = 1", "colour"),
            ("[base]\nworkload = \"gups\"\nlog2_tabel = 3", "log2_tabel"),
            ("[base]\nworkload = \"gups\"\nlog2_table = 99", "99"),
        ] {
            let e = sweep(t).and_then(|s| s.points()).err().map(|f| f.message().to_string()).unwrap_or_default();
            assert!(e.contains(named), "{t}: {e}");
        }
    }
}
