//! `splab native -- PROG` and `splab promote -- PROG` on short programs:
//! every layout, the report's shape, a layout whose output differs from
//! 4k's (an error naming its runs), runs killed or interrupted left out of
//! the figures, programs that fail or cannot be found, bad input, and the
//! system settings put back, also after splab is killed in the middle of a
//! `thp` run. Tests that change system settings need root and a kernel
//! with THP (and the kernel's multi-size THP and hugetlb pages); they fail,
//! saying so, where one is missing. They hold one
//! lock (`serial`) so that no two of them change settings at once, and
//! each checks that what it changed is back. Nothing here checks a timing.

mod needs;

use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).stdin(Stdio::null()).output().expect("run splab")
}

fn json(args: &[&str]) -> Value {
    let out = splab(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}\n{}", String::from_utf8_lossy(&out.stdout)))
}

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time in this file: each starts splab, and every splab
/// start restores what a killed one left, which the kill test watches.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn mode() -> Option<String> {
    let t = std::fs::read_to_string(THP).ok()?;
    let a = t.find('[')?;
    let b = t[a..].find(']')?;
    Some(t[a + 1..a + b].to_string())
}

fn nr_hugepages() -> Option<u64> {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").ok()?.trim().parse().ok()
}

/// Allocates and writes 64 MB (one malloc, so one anonymous mapping),
/// holds it for half a second, and prints its length.
const PERL_64M: &str = "$x = \"a\" x (64 << 20); select(undef, undef, undef, 0.5); print length($x), \"\\n\"";

fn layout<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["layouts"].as_array().unwrap().iter().find(|l| l["pages"] == name).unwrap_or_else(|| panic!("no layout {name}"))
}

#[test]
fn every_layout_on_a_short_program() {
    let _s = serial();
    needs::root_and_thp();
    let (mode0, pool0) = (mode(), nr_hugepages());
    let v = json(&["native", "--pages", "4k,thp,promote,mthp:64k,hugetlb-2m", "--repeat", "1", "--json", "--", "perl", "-e", PERL_64M]);
    assert_eq!(mode(), mode0, "THP mode put back");
    assert_eq!(nr_hugepages(), pool0, "hugetlb pool put back");
    assert!(v["flags"].as_array().unwrap().is_empty(), "{}", v["flags"]);
    for l in v["layouts"].as_array().unwrap() {
        assert_eq!(l["status"], "ran", "{} was not run: {}", l["pages"], l["skip_reason"]);
        let r = &l["runs"][0];
        assert_eq!(r["exit"]["code"], 0, "{}: {r}", l["pages"]);
        assert_eq!(r["stdout_bytes"], 9, "{}: 67108864 and a newline", l["pages"]);
        // hugetlb pages are not in the resident set (ru_maxrss, Rss).
        let held = r["peak_rss"].as_u64().unwrap() + r["sampled"]["hugetlb"].as_u64().unwrap();
        assert!(held > 64 << 20, "{}: {r}", l["pages"]);
        assert!(r["wall"].as_f64().unwrap() > 0.4, "{}", l["pages"]);
        assert!(!l["method"].as_str().unwrap().is_empty());
    }
    assert_eq!(layout(&v, "4k")["runs"][0]["sampled"]["anon_huge"], 0, "no THP under PR_SET_THP_DISABLE");
    assert_eq!(layout(&v, "4k")["speedup_vs_4k"]["median"], 1.0);
    let thp = layout(&v, "thp");
    assert!(thp["method"].as_str().unwrap().contains("enabled=always"), "{}", thp["method"]);
    assert!(thp["runs"][0]["sampled"]["anon_huge"].as_u64().unwrap() > 0, "THP under always: {}", thp["runs"][0]);
    let pro = layout(&v, "promote");
    let c = &pro["runs"][0]["promote"];
    assert!(c["promotions"].as_u64().unwrap() > 0, "the 64 MB string is promoted: {c}");
    assert!(pro["runs"][0]["sampled"]["anon_huge"].as_u64().unwrap() > 0, "{}", pro["runs"][0]);
    assert!(c["cpu_seconds"].as_f64().unwrap() > 0.0);
    let m = layout(&v, "mthp:64k");
    assert!(m["thp_fault_alloc"]["64kB"].as_u64().unwrap_or(0) > 0, "64 KB THPs at fault: {}", m["thp_fault_alloc"]);
    assert_eq!(m["runs"][0]["sampled"]["anon_huge"], 0, "no 2 MB THP when only 64 KB is on");
    let h = layout(&v, "hugetlb-2m");
    assert!(h["runs"][0]["sampled"]["hugetlb"].as_u64().unwrap() >= 64 << 20, "glibc's malloc from the pool: {}", h["runs"][0]);
    assert!(v["promote_target"]["rss_ratio"].as_f64().unwrap() > 0.5);
}

/// Starts `splab native --pages thp -- sleep 30` and waits until it has
/// set the THP mode to always; fails where a thp run would change
/// nothing or cannot change anything. Returns the child and the mode
/// found before.
fn thp_run_under_way(repeat: &str, stdout: Stdio) -> (std::process::Child, String) {
    needs::root_and_thp();
    let mode0 = mode().unwrap();
    assert_ne!(mode0, "always", "this test needs the system THP mode to be madvise or never (a thp run then changes it to always and back); it is always here");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_splab"));
    cmd.args(["native", "--pages", "thp", "--repeat", repeat, "--", "sleep", "30"]).stdin(Stdio::null()).stdout(stdout).stderr(Stdio::null());
    // A test run started in the background by a non-interactive shell
    // inherits SIGINT ignored, and an ignored signal never reaches splab:
    // the run under test gets the default disposition, as from a terminal.
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        })
    };
    let child = cmd.spawn().unwrap();
    let t = Instant::now();
    while mode().as_deref() != Some("always") && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mode().as_deref(), Some("always"), "the thp run set the mode");
    (child, mode0)
}

#[test]
fn killed_mid_thp_run_the_next_splab_restores_the_mode() {
    let _s = serial();
    let (mut child, mode0) = thp_run_under_way("1", Stdio::null());
    // The program is running under it: find the sleep.
    let sleeper = || {
        std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                let ppid = s.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)).and_then(|x| x.parse::<u32>().ok());
                s.contains("(sleep)") && ppid == Some(child.id())
            })
        })
    };
    let t = Instant::now();
    while sleeper().is_none() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let sleep_pid = sleeper().expect("the program started");
    child.kill().unwrap(); // SIGKILL: nothing of splab runs after it
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(mode().as_deref(), Some("always"), "nothing restored it yet");
    assert!(!std::path::Path::new(&format!("/proc/{sleep_pid}")).exists() || std::fs::read_to_string(format!("/proc/{sleep_pid}/stat")).is_ok_and(|s| s.contains(") Z")), "the program died with splab (PR_SET_PDEATHSIG)");
    let out = splab(&["sysctl", "vm.pmap.pg_ps_enabled"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("restored") && err.contains(THP), "{err}");
    assert_eq!(mode().unwrap(), mode0, "the next splab put the mode back");
    assert!(!std::path::Path::new("/run/splab/state.json").exists(), "the state file is gone");
}

#[test]
fn a_layout_whose_output_differs_from_4ks_is_an_error_naming_its_runs() {
    let _s = serial();
    needs::thp();
    let mode0 = mode();
    // /proc/self/status says whether THP is disabled for the process: 0
    // under PR_SET_THP_DISABLE (4k), 1 otherwise.
    let out = splab(&["native", "--pages", "4k,thp", "--repeat", "2", "--json", "--", "grep", "THP_enabled", "/proc/self/status"]);
    assert_eq!(mode(), mode0);
    assert_eq!(out.status.code(), Some(1), "an error for thp");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--pages thp: 2 of 2 runs failed (round 1: standard output differs") && err.contains("round 2: standard output differs"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (base, thp) = (layout(&v, "4k"), layout(&v, "thp"));
    assert_eq!((base["counted"].as_u64(), base["failed"].as_u64()), (Some(2), Some(0)), "{base}");
    assert!(base["error"].is_null());
    assert_eq!((thp["counted"].as_u64(), thp["failed"].as_u64()), (Some(0), Some(2)), "{thp}");
    assert!(thp["wall"].is_null() && thp["speedup_vs_4k"].is_null() && thp["peak_rss"].is_null(), "no figure from runs that failed: {thp}");
    assert!(thp["runs"][0]["failed"].as_str().unwrap().contains("where 4k's runs wrote"), "{}", thp["runs"][0]);
    assert!(v["reference"].as_str().unwrap().starts_with("exit 0, standard output CRC-32"), "{}", v["reference"]);
    let flags: Vec<&str> = v["flags"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
    assert!(flags.iter().any(|f| f.starts_with("--pages thp round 1: standard output differs")), "{flags:?}");
    // The text report says the same, with hyperfine's lines for 4k; an
    // exit status all runs share is the reference's.
    let out = splab(&["native", "--pages", "4k,thp", "--repeat", "2", "--", "sh", "-c", "grep THP_enabled /proc/self/status; exit 3"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["Time (mean ± σ):", "Range (min … max):", "Peak RSS:", "Exit:                exit 3 (2 runs)", "no run finished: round 1: standard output differs", "ERROR: 2 of 2 runs failed", "FAILED: --pages thp round 2: standard output differs", "Summary"] {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
}

/// splab stopped by SIGTERM during the last of three runs: the report of
/// the two that finished, the third marked and left out of the figures,
/// and splab ends by the signal.
#[test]
fn a_run_interrupted_in_the_last_round_is_left_out_of_the_figures() {
    let _s = serial();
    let dir = std::env::temp_dir().join(format!("splab-interrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let starts = dir.join("starts");
    let script = format!("echo x >> {}; sleep 0.4; echo done", starts.display());
    let child = Command::new(env!("CARGO_BIN_EXE_splab"))
        .args(["native", "--pages", "4k", "--repeat", "3", "--json", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let runs = || std::fs::read_to_string(&starts).map_or(0, |s| s.lines().count());
    let t = Instant::now();
    while runs() < 3 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(runs(), 3, "the last round started");
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "splab ends by the signal it got");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["interrupted_by"], "SIGTERM");
    let l = &v["layouts"][0];
    assert_eq!((l["counted"].as_u64(), l["failed"].as_u64()), (Some(2), Some(1)), "{l}");
    assert!(l["error"].is_null(), "an interruption is not the program's error: {l}");
    let last = &l["runs"][2];
    assert_eq!(last["exit"]["signal"], libc::SIGTERM, "{last}");
    assert!(last["failed"].as_str().unwrap().starts_with("interrupted: splab got SIGTERM"), "{last}");
    // Figures of the two finished runs only: each slept 0.4 s and ran to
    // its end; the interrupted one was cut short.
    assert!(l["wall"]["min"].as_f64().unwrap() >= 0.4, "{}", l["wall"]);
    assert_eq!(l["exits"]["exit 0"], 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn programs_that_fail_or_cannot_start_are_reported() {
    let _s = serial();
    let out = splab(&["native", "--pages", "4k", "--repeat", "1", "--json", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(1), "no layout ran");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = v["layouts"][0]["runs"][0]["exit"]["not_started"].as_str().unwrap();
    assert!(e.contains("/nonexistent/program: command not found"), "{e}");
    // A run killed by a signal is failed, and the layout with it.
    let out = splab(&["native", "--pages", "4k", "--repeat", "1", "--json", "--", "sh", "-c", "echo out; echo oops >&2; kill -SEGV $$"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pages 4k: 1 of 1 runs failed (round 1: killed by SIGSEGV)"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["layouts"][0]["runs"][0];
    assert_eq!(r["exit"]["signal"], 11, "{r}");
    assert_eq!(r["failed"], "killed by SIGSEGV");
    assert_eq!(r["stdout_bytes"], 4);
    assert!(r["stderr_tail"].as_str().unwrap().contains("oops"));
    // A child left running when the first process exits is killed.
    let t = Instant::now();
    let v = json(&["native", "--pages", "4k", "--repeat", "1", "--json", "--", "sh", "-c", "sleep 60 & exit 0"]);
    assert!(t.elapsed() < Duration::from_secs(30));
    assert_eq!(v["layouts"][0]["runs"][0]["killed_leftovers"], 1, "{}", v["layouts"][0]["runs"][0]);
}

#[test]
fn exports_in_hyperfine_formats() {
    let _s = serial();
    let dir = std::env::temp_dir().join(format!("splab-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, m, j) = (dir.join("r.csv"), dir.join("r.md"), dir.join("r.json"));
    let out = splab(&[
        "native",
        "--pages",
        "4k",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--export-csv",
        c.to_str().unwrap(),
        "--export-markdown",
        m.to_str().unwrap(),
        "--export-json",
        j.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(&c).unwrap();
    assert!(csv.starts_with("layout,mean,stddev,median,user,system,min,max,"), "{csv}");
    assert!(csv.lines().nth(1).unwrap().starts_with("4k,"), "{csv}");
    let md = std::fs::read_to_string(&m).unwrap();
    assert!(md.starts_with("| Layout | Mean [s] |") && md.contains("| `4k` |"), "{md}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    assert_eq!(v["warmup"], 1);
    assert_eq!(v["layouts"][0]["runs"].as_array().unwrap().len(), 2, "warm-up runs are not counted");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_exits_2_naming_the_value() {
    let _s = serial();
    for (args, want) in [
        (vec!["native", "--pages", "mix:0.5", "--", "true"], "mix:0.5"),
        (vec!["native", "--pages", "mthp:3k", "--", "true"], "\"3k\""),
        (vec!["native", "gups", "--", "true"], "not both"),
        (vec!["native"], "give a workload"),
        (vec!["native", "--repeat", "0", "--", "true"], "--repeat 0"),
        (vec!["native", "--input", "/nonexistent/in", "--", "cat"], "/nonexistent/in"),
        (vec!["promote", "--interval", "0", "--", "true"], "--interval 0"),
    ] {
        let out = splab(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn promote_runs_a_program_under_the_monitor() {
    let _s = serial();
    needs::root_and_thp();
    let out = Command::new(env!("CARGO_BIN_EXE_splab"))
        // The shell is watched before it execs perl, which gets a new
        // address space: the monitor must follow it.
        .args(["promote", "--json", "--", "sh", "-c", &format!("sleep 0.3; exec perl -e '{}; exit 7'", PERL_64M.replace('\'', ""))])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "the program's exit status");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "67108864\n", "the program's own output");
    let v: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert!(v["promote"]["promotions"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["exit"]["code"], 7);
}

#[test]
fn interrupted_thp_run_restores_the_mode_and_passes_the_signal_on() {
    let _s = serial();
    let (child, mode0) = thp_run_under_way("3", Stdio::piped());
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(25), "the program got the signal and the run stopped");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGINT), "splab ends by the signal it got");
    assert_eq!(mode().unwrap(), mode0, "the mode is back");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("killed by SIGINT") && text.contains("interrupted by SIGINT"), "{text}");
}
