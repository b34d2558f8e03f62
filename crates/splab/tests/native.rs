//! `splab native` as a user runs it, on small sizes: the JSON shape, the
//! HPCC verification of a native GUPS, a layout that cannot be had skipped
//! with its reason while the others run, and exit status 2 with a message
//! naming the value for bad input. Nothing here checks a timing.

use serde_json::Value;
use std::process::{Command, Output};

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab")
}

fn json(args: &[&str]) -> Value {
    let out = splab(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}"))
}

/// Free 2 MB hugetlb pages now (0 without hugetlb).
fn free_2m() -> u64 {
    let d = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    let n = |f: &str| std::fs::read_to_string(format!("{d}/{f}")).ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(0);
    n("free_hugepages").saturating_sub(n("resv_hugepages"))
}

#[test]
fn native_gups_json_shape_and_verification() {
    let v = json(&["native", "gups", "--log2-table", "16", "--verify", "--pages", "4k", "--pages", "thp", "--repeat", "2", "--json"]);
    for k in ["workload", "detail", "working_set_bytes", "repeat", "host", "layouts", "hugetlb_pools"] {
        assert!(v.get(k).is_some(), "missing key {k}");
    }
    assert_eq!(v["workload"], "gups");
    assert_eq!(v["detail"], "gups(2^16)");
    assert_eq!(v["working_set_bytes"], 8 << 16);
    let layouts = v["layouts"].as_array().unwrap();
    assert_eq!(layouts.len(), 2);
    assert_eq!(layouts[0]["pages"], "4k");
    assert_eq!(layouts[1]["pages"], "thp");
    for l in layouts {
        assert_eq!(l["status"], "ran");
        assert_eq!(l["region_bytes"], 2 << 20);
        let runs = l["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        for r in runs {
            assert!(r["outcome"]["report"].as_str().unwrap().contains("(passed)"));
            for k in ["bytes_4k", "bytes_2m", "bytes_1g", "vmas"] {
                assert!(r["obtained"].get(k).is_some(), "obtained lacks {k}");
            }
        }
        for k in ["median", "q1", "q3", "min", "max"] {
            assert!(l["seconds"][k].is_number(), "seconds lacks {k}");
        }
        assert_eq!(l["figures"][0]["name"], "GUP/s");
        assert!(l["figures"][0]["speedup_vs_4k"].is_number());
    }
    // 4 KB pages are what the kernel gives under MADV_NOHUGEPAGE.
    assert_eq!(layouts[0]["as_asked"], true);
    assert_eq!(layouts[0]["runs"][0]["obtained"]["bytes_2m"], 0);
    assert_eq!(layouts[0]["figures"][0]["speedup_vs_4k"], 1.0);
}

#[test]
fn a_layout_that_cannot_be_had_is_skipped_and_the_rest_run() {
    // A table needing more 2 MB pages than the pool has free, and the pool
    // may not grow.
    let need_log2 = 64 - (free_2m() + 1).leading_zeros() + 18;
    let log2 = need_log2.to_string();
    let out = splab(&["native", "gups", "--log2-table", &log2, "--pages", "hugetlb-2m,4k", "--repeat", "1", "--hugetlb-pool", "keep"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("hugetlb-2m  SKIPPED: needs"), "{text}");
    assert!(text.contains("was not allowed"), "{text}");
    assert!(text.contains("GUP/s"), "{text}");
    // Only impossible layouts: the reasons are printed, and it exits 1.
    let out = splab(&["native", "gups", "--log2-table", &log2, "--pages", "hugetlb-2m", "--repeat", "1", "--hugetlb-pool", "keep"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("SKIPPED"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no layout could be set up"));
}

#[test]
fn every_native_workload_runs_small() {
    let cases: &[&[&str]] = &[
        &["lat", "--max-size", "256K", "--loads", "1000"],
        &["transpose", "--sizes", "64,100"],
        &["stream", "--n", "10000", "--ntimes", "2"],
        &["index", "--scale", "1", "--transactions", "1000"],
    ];
    for c in cases {
        let mut args = vec!["native"];
        args.extend_from_slice(c);
        args.extend_from_slice(&["--pages", "4k,mix:0.5", "--repeat", "1", "--json"]);
        let v = json(&args);
        let l = &v["layouts"][0];
        assert_eq!(l["status"], "ran", "{c:?}");
        assert!(l["figures"][0]["spread"]["median"].as_f64().unwrap() > 0.0, "{c:?}");
        assert_eq!(v["layouts"][1]["pages"], "mix:0.5");
    }
}

#[test]
fn native_bad_input_exits_2_and_names_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["native", "gups", "--pages", "8k"], "8k"),
        (&["native", "gups", "--pages", "4k,mix:1.5"], "mix:1.5"),
        (&["native", "gups", "--pages", "mix:half"], "half"),
        (&["native", "gups", "--repeat", "0"], "0"),
        (&["native", "gups", "--log2-table", "99"], "99"),
        (&["native", "gupz"], "gupz"),
        (&["native", "bw"], "bw"),
        (&["native", "lat", "--max-size", "1Q"], "1Q"),
        (&["native", "lat", "--pattern", "zigzag"], "zigzag"),
        (&["native", "stream", "--n", "5"], "5"),
        (&["native", "transpose", "--sizes", "1"], "1"),
        (&["native", "index", "--scale", "0"], "0"),
    ];
    for (args, named) in cases {
        let out = splab(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: message does not name {named:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// The text report: the run shown as the median run has the summary's
/// median figure, and the figure's unit is not doubled.
#[test]
fn the_median_run_shown_is_the_one_whose_figure_is_the_median() {
    let out = splab(&["native", "gups", "--log2-table", "16", "--pages", "4k", "--repeat", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let head = text.lines().find(|l| l.starts_with("== --pages 4k (the median run: round ")).unwrap_or_else(|| panic!("{text}"));
    let figure = head.rsplit("GUP/s ").next().unwrap().trim_end_matches(") ==");
    let row = text.lines().rfind(|l| l.trim_start().starts_with("4k ")).unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(&format!(" {figure} [")), "the median run's GUP/s {figure} is the summary's median: {row}");
    assert!(!text.contains("GUP/s (GUP/s)"), "{text}");
}

/// SIGTERM during a built-in workload's run (in splab's own process):
/// splab stops at once, prints the report of the runs that finished (none
/// here) naming the one it stopped, and ends by the signal.
#[test]
fn a_signal_during_a_workload_run_stops_it_and_reports() {
    let t = std::time::Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_splab"))
        .args(["native", "gups", "--log2-table", "25", "--pages", "4k", "--repeat", "3", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["interrupted_by"], "SIGTERM");
    assert_eq!(v["interrupted_run"], "--pages 4k round 1: stopped by the signal; left out of every figure");
    assert_eq!(v["layouts"][0]["runs"].as_array().unwrap().len(), 0);
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
}
