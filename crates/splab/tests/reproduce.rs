//! `splab reproduce` as a user runs it: the list, a bad name, and one
//! experiment at its `--quick` size (the full sizes take minutes each).

use serde_json::Value;
use std::process::{Command, Output};

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab")
}

#[test]
fn list_names_every_experiment_with_its_command() {
    let out = splab(&["reproduce", "--list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["armada-gups", "armada-lat", "power8-pgbench", "power9-buildworld", "alpha-transpose-shimizu"] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    assert!(text.contains("splab compare gups --log2-table 27"), "{text}");
    let out = splab(&["reproduce", "--list", "--json", "armada-lat"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["experiments"].as_array().map(|a| a.len()), Some(1), "{v}");
    assert_eq!(v["experiments"][0]["machine"], "armada-xp");
}

#[test]
fn an_unknown_experiment_exits_2_naming_it_and_the_known_ones() {
    let out = splab(&["reproduce", "armada-gups", "no-such-run"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"no-such-run\"") && err.contains("alpha-transpose-freebsd"), "{err}");
    assert!(out.stdout.is_empty());
}

/// The outcome of one experiment run `--quick --json`, whose first row
/// has a positive figure off and on.
fn quick(name: &str) -> Value {
    let out = splab(&["reproduce", "--quick", "--json", name]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let o = v["outcomes"][0].clone();
    let row = &o["rows"][0];
    assert!(row["off"].as_f64().unwrap() > 0.0 && row["on"].as_f64().unwrap() > 0.0, "{row}");
    o
}

#[test]
fn a_quick_experiment_reports_its_figure_off_and_on_with_counters() {
    let o = quick("armada-gups");
    assert_eq!(o["experiment"]["name"], "armada-gups");
    assert_eq!(o["rows"][0]["unit"], "GUP/s");
    // The 2 MiB table fills two 1 MB sections, which are promoted.
    assert_eq!(o["counters_on"]["vm.pmap.section.promotions"], 2, "{o}");
    assert!(o["command"].as_str().unwrap().starts_with("splab compare gups --log2-table 18"));
}

#[test]
fn the_forkbomb_experiment_runs_the_forkbomb_workload() {
    let o = quick("armada-forkbomb");
    assert!(o["command"].as_str().unwrap().starts_with("splab compare forkbomb --procs 16"), "{o}");
    let row = &o["rows"][0];
    assert_eq!((row["figure"].as_str(), row["unit"].as_str()), (Some("completion time (s)"), Some("s")), "{row}");
}

/// `--quick` says what it really ran and that its figures are not the
/// published experiment's, and leaves out the full run's scaling notes.
#[test]
fn quick_says_what_it_ran_and_that_its_figures_are_not_comparable() {
    let out = splab(&["reproduce", "--quick", "armada-gups"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("splab reproduce: 1 experiment(s) at --quick sizes, NOT comparable to the published figures; splab build "), "{text}");
    assert!(text.contains("armada-gups: splab compare gups --log2-table 18 --updates 4096 --machine armada-xp"), "{text}");
    assert!(text.contains("these figures are not comparable to the published ones"), "{text}");
    assert!(!text.contains("of the 2^29 updates timed"), "the full run's scaling is not this run's: {text}");
    let out = splab(&["reproduce", "--quick", "--json", "armada-gups"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["quick"], true);
    assert!(v["note"].as_str().unwrap().contains("not comparable"), "{v}");
}
