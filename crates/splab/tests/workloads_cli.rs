//! The benchmark workloads through the `splab` binary: each runs with its
//! own options at a small size and prints its report and figure, `compare`
//! shows superpages helping the latency chase, and bad workload options
//! exit 2 naming the value.

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

#[test]
fn every_workload_runs_small_from_the_command_line() {
    // (arguments, memory, figure, a line of the report)
    let cases: &[(&[&str], &str, &str, &str)] = &[
        (&["gups-mp", "--log2-table", "12", "--procs", "3"], "64M", "aggregate GUP/s", "[GUP/s] (aggregate of 3)"),
        (&["lat", "--max-size", "64K", "--stride", "64", "--loads", "200", "--pattern", "seq"], "64M", "ns/load at 64k, stride 64", "\"stride=64"),
        (&["bw", "--size", "64K", "--tests", "wr,mmap_rd"], "64M", "wr MB/s", "# mmap_rd: bw_mmap_rd 64k FILE"),
        (&["transpose", "--sizes", "40,50"], "64M", "transpose MB/s (all)", "all transposes:"),
        (&["stream", "--n", "4000", "--ntimes", "2"], "64M", "Triad MB/s", "Function    Best Rate MB/s"),
        (&["index", "--scale", "1", "--transactions", "100", "--clients", "2"], "64M", "tps", "number of transactions actually processed: 200/200"),
        (&["build", "--units", "3", "--jobs", "2"], "256M", "build time (s)", " real "),
        (&["stress", "--vm", "2", "--vm-bytes", "2M", "--loops", "2"], "64M", "completion time (s)", "successful run completed in"),
        (&["realloc"], "64M", "fill rate MB/s", "stopped: out of memory"),
    ];
    for (args, memory, figure, in_report) in cases {
        let mut a = vec!["sim"];
        a.extend_from_slice(args);
        a.extend(["--memory", memory, "--json"]);
        let v = json(&a);
        assert_eq!(v["workload"], args[0]);
        assert_eq!(v["figure"]["name"], *figure, "{args:?}");
        assert!(v["figure"]["value"].as_f64().unwrap() > 0.0, "{args:?}: {}", v["figure"]);
        let report = v["report"].as_str().unwrap();
        assert!(report.contains(in_report), "{args:?}: no {in_report:?} in\n{report}");
    }
}

#[test]
fn compare_lat_shows_superpages_shortening_the_chase() {
    // 16 MB with a 4 KB stride: 4096 pages, twice what the STLB holds.
    let v = json(&["compare", "lat", "--max-size", "16M", "--stride", "4096", "--loads", "2000", "--memory", "128M", "--json"]);
    let f = |r: &Value| r["figure"]["value"].as_f64().unwrap();
    assert!(f(&v["on"]) < f(&v["off"]), "on {} vs off {}", f(&v["on"]), f(&v["off"]));
    assert_eq!(v["on"]["figure"]["higher_is_better"], false);
    assert!(v["change_percent"]["figure"].as_f64().unwrap() < 0.0);
    assert!(v["on"]["sysctl"]["vm.pmap.pde.promotions"].as_i64().unwrap() > 0);
    // The text form has the figure's row with its change.
    let out = splab(&["compare", "lat", "--max-size", "16M", "--stride", "4096", "--loads", "2000", "--memory", "128M"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().find(|l| l.starts_with("ns/load at 16m, stride 4096")).unwrap_or_else(|| panic!("{text}"));
    assert!(row.trim_end().ends_with('%'), "{row}");
}

#[test]
fn bad_workload_options_exit_2_and_name_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["lat", "--pattern", "zigzag"], "zigzag"),
        (&["lat", "--max-size", "1K"], "1K"),
        (&["lat", "--stride", "12"], "12"),
        (&["bw", "--tests", "rd,nosuch"], "nosuch"),
        (&["bw", "--size", "12Q"], "12Q"),
        (&["transpose", "--sizes", "3000,1"], "1"),
        (&["stream", "--ntimes", "1"], "1"),
        (&["index", "--scale", "0"], "0"),
        (&["index", "--scale", "9000"], "9000"),
        (&["build", "--jobs", "0"], "0"),
        (&["stress", "--vm-bytes", "100G"], "100G"),
        (&["realloc", "--start-size", "3K"], "3K"),
        (&["gups-mp", "--procs", "999"], "999"),
    ];
    for (args, named) in cases {
        let mut a = vec!["sim"];
        a.extend_from_slice(args);
        let out = splab(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: message does not name {named:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
