//! `splab sweep` and `splab runs` as a user runs them: a sweep of 3
//! workloads x 3 architectures x 3 policies x 2 sizes (54 runs) with
//! `--jobs 2`, stopped halfway by SIGINT and run again (only the missing
//! runs run), then the same sweep as Ray tasks on a cluster of a head and
//! one worker started here on 127.0.0.1, whose results must be the local
//! ones exactly (every key of every run's document but the host's
//! measurements of itself).

mod needs;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab")
}

fn json(args: &[&str]) -> Value {
    let out = splab(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}"))
}

/// A scratch directory, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("splab-sweep-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn path(&self, f: &str) -> String {
        self.0.join(f).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The sweep of the issue, docs/sweeps.md's example: 3 x 3 x 3 x 2
/// points, small enough for a test.
const SWEEP: &str = include_str!("../../../docs/examples/grid.toml");

/// The stored runs (ok ones) by key: their documents.
fn stored(store: &str) -> BTreeMap<String, Value> {
    let v = json(&["runs", "--store", store, "--sweep", "grid", "--full", "--json"]);
    let mut m = BTreeMap::new();
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["status"], "ok", "{r}");
        let doc: Value = serde_json::from_str(r["result"].as_str().unwrap()).unwrap();
        m.insert(r["spec"].as_str().unwrap().to_string(), doc);
    }
    m
}

/// A document without what measures the host (its seconds, its memory,
/// the host names): what must be the same wherever the run ran.
fn deterministic(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, _| !k.starts_with("host"));
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

fn count(store: &str) -> usize {
    let out = splab(&["runs", "--store", store, "--columns", "id", "--csv"]);
    if !out.status.success() {
        return 0;
    }
    String::from_utf8_lossy(&out.stdout).lines().count().saturating_sub(1)
}

fn sweep_local(dir: &Scratch) -> BTreeMap<String, Value> {
    let file = dir.path("grid.toml");
    std::fs::write(&file, SWEEP).unwrap();
    let store = dir.path("local.db");
    // Every point listed, none run.
    let dry = json(&["sweep", &file, "--store", &store, "--dry-run", "--json"]);
    assert_eq!(dry["points"].as_array().unwrap().len(), 54);
    assert_eq!(count(&store), 0);

    // Stopped by SIGINT with some runs stored.
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_splab")).args(["sweep", &file, "--store", &store, "--jobs", "2"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    while count(&store) < 15 {
        assert!(t0.elapsed() < Duration::from_secs(300), "no 15 runs stored in 300 s");
        assert!(child.try_wait().unwrap().is_none(), "the sweep ended before it was stopped");
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGINT), "{}", String::from_utf8_lossy(&out.stderr));
    let first = count(&store);
    assert!((15..54).contains(&first), "{first} runs stored when stopped");
    let before = stored(&store);
    assert_eq!(before.len(), first, "every stored run finished");

    // Run again: only the missing ones run.
    let s = json(&["sweep", &file, "--store", &store, "--jobs", "2", "--json"]);
    assert_eq!((s["runs"].as_u64(), s["already"].as_u64(), s["ran"].as_u64(), s["failed"].as_u64()), (Some(54), Some(first as u64), Some(54 - first as u64), Some(0)), "{s}");
    let after = stored(&store);
    assert_eq!(after.len(), 54);
    for (k, v) in &before {
        assert_eq!(after[k]["host_seconds"], v["host_seconds"], "a run stored before the stop was run again");
    }
    // And a third time nothing runs.
    let s = json(&["sweep", &file, "--store", &store, "--json"]);
    assert_eq!((s["already"].as_u64(), s["ran"].as_u64()), (Some(54), Some(0)), "{s}");

    // The store's columns: the axes, the spec's fields and the figures.
    let t = json(&["runs", "--store", &store, "--sweep", "grid", "--where", "arch = 'arm64' AND policy = 'shimizu' AND workload = 'gups'", "--json"]);
    let rows = t["runs"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["axis.size"].is_string() && r["figure"].as_f64().unwrap() > 0.0 && r["log2_table"].is_i64()), "{t}");
    let parquet = dir.path("runs.parquet");
    let out = splab(&["runs", "--store", &store, "--parquet", &parquet]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(&std::fs::read(&parquet).unwrap()[..4], b"PAR1");
    after
}

/// A Ray cluster on 127.0.0.1: a head and one worker, each with one CPU;
/// `ray stop` when dropped, whatever happened.
struct Cluster {
    ray: PathBuf,
    address: String,
}

impl Cluster {
    fn start() -> Cluster {
        needs::ray();
        let ray = needs::ray_command();
        let port = 20000 + (std::process::id() % 20000) as u16;
        let address = format!("127.0.0.1:{port}");
        let c = Cluster { ray: ray.clone(), address: address.clone() };
        let run = |args: &[&str]| {
            let out = Command::new(&ray).args(args).env("RAY_USAGE_STATS_ENABLED", "0").output().expect("run ray");
            assert!(out.status.success(), "ray {args:?}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        };
        let p = port.to_string();
        run(&["start", "--head", "--node-ip-address", "127.0.0.1", "--port", &p, "--num-cpus", "1", "--include-dashboard", "false", "--disable-usage-stats"]);
        run(&["start", "--address", &address, "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats"]);
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(&self.ray).args(["stop", "--force"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

fn sweep_ray(dir: &Scratch) -> BTreeMap<String, Value> {
    let file = dir.path("grid.toml");
    std::fs::write(&file, SWEEP).unwrap();
    let store = dir.path("ray.db");
    let cluster = Cluster::start();
    let python = needs::python_with("ray");
    let s = json(&["sweep", &file, "--store", &store, "--ray", &cluster.address, "--python", python.to_str().unwrap(), "--json"]);
    assert_eq!((s["ran"].as_u64(), s["failed"].as_u64()), (Some(54), Some(0)), "{s}");
    drop(cluster);
    stored(&store)
}

#[test]
fn a_sweep_runs_resumes_after_sigint_and_gives_the_same_results_on_ray() {
    let dir = Scratch::new("grid");
    let local = sweep_local(&dir);
    let ray = sweep_ray(&dir);
    assert_eq!(local.len(), ray.len());
    for (k, v) in &local {
        let r = ray.get(k).unwrap_or_else(|| panic!("the Ray store lacks {k}"));
        assert_eq!(deterministic(v.clone()), deterministic(r.clone()), "{k}");
    }
    // A stored run is the run its command line makes, to the last bit.
    let (_, doc) = local.iter().next().unwrap();
    let command = doc["command"].as_str().unwrap();
    let words: Vec<&str> = command.split_whitespace().skip(1).chain(["--json"]).collect();
    assert_eq!(deterministic(json(&words)).get("figure"), deterministic(doc.clone()).get("figure"), "{command}");
    assert_eq!(deterministic(json(&words))["sim_seconds"], doc["sim_seconds"], "{command}");
    // The figures are not all alike: every workload, architecture and
    // size gives its own (policies may agree).
    let figures: std::collections::BTreeSet<String> = local.values().map(|d| d["figure"]["value"].to_string()).collect();
    assert!(figures.len() >= 18, "{} distinct figures", figures.len());
}

#[test]
fn sweep_mistakes_exit_2_naming_the_value() {
    let dir = Scratch::new("bad");
    for (text, named) in [
        ("[axes]\narch = [\"vax\"]\n[base]\nworkload = \"gups\"\n", "vax"),
        ("[base]\nworkload = \"gups\"\nlog2_tabel = 3\n", "log2_tabel"),
        ("[axes]\nsize = [1, 2]\n", "size"),
        ("[axes\n", "not TOML"),
    ] {
        let file = dir.path("bad.toml");
        std::fs::write(&file, text).unwrap();
        let out = splab(&["sweep", &file, "--store", &dir.path("s.db"), "--dry-run"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(named) && err.trim_end().lines().count() == 1, "{text}: {err}");
    }
    let out = splab(&["runs", "--store", &dir.path("none.db")]);
    assert_eq!(out.status.code(), Some(2));
    let out = splab(&["sweep", &dir.path("missing.toml")]);
    assert_eq!(out.status.code(), Some(2));
}

/// A sweep over seeds alone: the axis comes from `seeds`, the name from
/// the file.
#[test]
fn a_sweep_over_seeds_is_stored_and_drawn() {
    let dir = Scratch::new("seeds");
    let file = dir.path("f.toml");
    std::fs::write(&file, "seeds = [1, 2]\n[base]\nworkload = \"gups\"\nlog2_table = 12\nmemory = \"64M\"\nfragment = 0.5\n").unwrap();
    let store = dir.path("f.db");
    let s = json(&["sweep", &file, "--store", &store, "--jobs", "1", "--json"]);
    assert_eq!((s["sweep"].as_str(), s["ran"].as_u64(), s["failed"].as_u64()), (Some("f"), Some(2), Some(0)), "{s}");
    assert_eq!(count(&store), 2);
    report(&dir, &store);
}

/// `splab report --sweep` draws the sweep's figure against its axes.
fn report(dir: &Scratch, store: &str) {
    let html = dir.path("r.html");
    let v = json(&["report", "--store", store, "--sweep", "f", "-o", &html, "--json"]);
    assert_eq!(v["documents"][0]["plots"], 1, "{v}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("against seed"), "no sweep plot");
    let out = splab(&["report", "--store", store, "--sweep", "nope", "-o", &html]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}

/// A sweep killed outright (SIGKILL, which it cannot catch) takes its
/// running points with it: each point's process ends with the sweep.
#[test]
fn a_killed_sweeps_runs_end_with_it() {
    let dir = Scratch::new("killed");
    let file = dir.path("k.toml");
    std::fs::write(&file, "seeds = [1]\n[base]\nworkload = \"gups\"\nlog2_table = 26\nmemory = \"1G\"\n").unwrap();
    let store = dir.path("k.db");
    let mut sweep = Command::new(env!("CARGO_BIN_EXE_splab")).args(["sweep", &file, "--store", &store, "--jobs", "1"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    // The point's process: the sweep's child (its threads' children are
    // listed under the thread that started them).
    let point = loop {
        let kids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", sweep.id()))
            .map(|d| d.flatten().flat_map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>()).collect())
            .unwrap_or_default();
        if let Some(&p) = kids.first() {
            break p;
        }
        assert!(sweep.try_wait().unwrap().is_none(), "the sweep ended before its point started");
        assert!(t0.elapsed() < Duration::from_secs(60), "no point started in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    sweep.kill().unwrap();
    sweep.wait().unwrap();
    let gone = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z"));
    let t1 = Instant::now();
    while !gone(point) && t1.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone(point), "point {point} outlived its sweep");
}
