//! The `splab` binary as a user runs it: JSON shapes, the superpage effect
//! showing up in the counters, and exit status 2 with a message naming the
//! value for every kind of bad input.
//!
//! GUPS runs use a 2^18-word table: 2 MiB, the smallest table that fills a
//! whole 2 MB reservation and so can be promoted (2^16 words is 512 KiB,
//! which never can).

use serde_json::Value;
use std::process::{Command, Output};

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab")
}

/// Runs a command that must succeed and print exactly one JSON document.
fn json(args: &[&str]) -> Value {
    let out = splab(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}"))
}

fn promotions(run: &Value) -> i64 {
    run["sysctl"]["vm.pmap.pde.promotions"].as_i64().expect("vm.pmap.pde.promotions is a number")
}

#[test]
fn sim_json_has_required_keys_and_promotes() {
    let v = json(&["sim", "gups", "--log2-table", "18", "--json"]);
    for k in [
        "workload", "arch", "machine", "superpages", "figure", "report", "sysctl", "refs", "sim_seconds", "sim_seconds_total",
        "host_seconds", "tlb", "hw", "events", "cycles", "host_model_bytes",
    ] {
        assert!(v.get(k).is_some(), "missing key {k}");
    }
    assert!(v.get("stale_samples").is_none(), "stale_samples only with --check-tlb");
    assert_eq!(v["workload"], "gups");
    assert_eq!(v["superpages"], true);
    assert_eq!(v["figure"]["name"], "GUP/s");
    assert!(v["report"].as_str().unwrap().contains("GUP/s"));
    assert!(promotions(&v) > 0, "{}", v["sysctl"]);
    assert!(v["refs"].as_u64().unwrap() > 0);
    assert!(v["sysctl"]["vm.reserv.partpopq"].is_string());
}

#[test]
fn sim_with_superpages_off_never_promotes() {
    let v = json(&["sim", "gups", "--log2-table", "18", "--superpages", "off", "--check-tlb", "--json"]);
    assert_eq!(promotions(&v), 0);
    assert_eq!(v["sysctl"]["vm.pmap.pg_ps_enabled"], 0);
    assert_eq!(v["stale_samples"].as_array().map(|a| a.len()), Some(0));
}

#[test]
fn sim_verify_passes() {
    let out = splab(&["sim", "gups", "--log2-table", "18", "--verify"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(passed)"), "{text}");
    assert!(text.contains("vm.pmap.pg_ps_enabled: 1"), "{text}");
}

#[test]
fn compare_shows_superpages_help_gups() {
    let v = json(&["compare", "gups", "--log2-table", "18", "--json"]);
    assert_eq!(v["workload"], "gups");
    let (off, on) = (&v["off"], &v["on"]);
    assert_eq!(off["superpages"], false);
    assert_eq!(on["superpages"], true);
    let f = |r: &Value| r["figure"]["value"].as_f64().unwrap();
    assert!(f(on) > f(off), "on {} vs off {}", f(on), f(off));
    assert_eq!(promotions(off), 0);
    assert!(promotions(on) > 0);
    assert!(v["change_percent"]["figure"].as_f64().unwrap() > 0.0);
}

#[test]
fn sysctl_lists_tunable_and_counters() {
    let out = splab(&["sysctl"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for line in ["vm.pmap.pg_ps_enabled: 1", "vm.reserv.broken: 0"] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    for c in ["promotions", "p_failures", "mappings", "demotions"] {
        let name = format!("vm.pmap.pde.{c}: ");
        assert!(text.lines().any(|l| l.starts_with(&name)), "no {name:?} in\n{text}");
    }
    let v = json(&["sysctl", "--superpages", "off", "vm.pmap.pg_ps_enabled", "--json"]);
    assert_eq!(v, serde_json::json!({ "vm.pmap.pg_ps_enabled": 0 }));
}

/// powerpc64 with a hashed page table: the POWER9 profile picks ppc64-hpt,
/// superpages follow --superpages, and a 2^21-word table (16 MiB, one
/// 16 MB reservation) is promoted.
#[test]
fn ppc64_hpt_on_power9_promotes_a_16mb_superpage() {
    let v = json(&["sysctl", "--machine", "power9", "--superpages", "off", "vm.pmap.superpages_enabled", "vm.pmap.sp.promotions", "--json"]);
    assert_eq!(v, serde_json::json!({ "vm.pmap.superpages_enabled": 0, "vm.pmap.sp.promotions": 0 }));
    let v = json(&["sim", "gups", "--arch", "ppc64-hpt", "--machine", "power9", "--log2-table", "21", "--memory", "256M", "--json"]);
    assert_eq!((v["arch"].as_str(), v["machine"].as_str()), (Some("ppc64-hpt"), Some("power9")));
    assert_eq!(v["sysctl"]["vm.pmap.sp.promotions"], 1);
    assert_eq!(v["sysctl"]["vm.pmap.sp.p_failures"], 0);
}

#[test]
fn sysctl_unknown_name_exits_2() {
    let out = splab(&["sysctl", "vm.reserv.broken", "vm.no.such"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("vm.no.such"));
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_input_exits_2_and_names_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["sim", "gups", "--memory", "12Q"], "12Q"),
        (&["sim", "gups", "--memory", "1T"], "1T"),
        (&["sim", "gups", "--arch", "vax"], "vax"),
        (&["sim", "gups", "--arch", "ppc64-hpt"], "ppc64-hpt"),
        (&["sim", "gups", "--machine", "nosuch"], "nosuch"),
        (&["sim", "gups", "--fragment", "2"], "2"),
        (&["sim", "gups", "--log2-table", "99"], "99"),
        (&["sim", "nosuchload"], "nosuchload"),
        (&["compare", "gups", "--memory", "12Q", "--json"], "12Q"),
        (&["sysctl", "--memory", "8X"], "8X"),
        (&["check", "--arch", "vax"], "vax"),
        (&["bench", "--footprint", "30G"], "30G"),
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

#[test]
fn check_small_run_is_clean() {
    let v = json(&["check", "--ops", "2000", "--json"]);
    assert_eq!(v["ops"], 2000);
    for k in ["mismatches", "stale_translations", "nonzero_fresh_reads", "invariant_failures", "fault_disagreements"] {
        assert_eq!(v[k], 0, "{k}: {v}");
    }
    assert!(v["host_seconds"].as_f64().is_some());
    assert!(v["sysctl"]["vm.pmap.pde.promotions"].is_number());
}

#[test]
fn bench_small_runs_each_part_in_a_child() {
    let v = json(&["bench", "--log2-table", "18", "--footprint", "64M", "--memory", "128M", "--json"]);
    for part in ["gups_off", "gups_on"] {
        assert!(v[part]["refs"].as_u64().unwrap() > 0, "{v}");
        assert!(v[part]["refs_per_second"].as_f64().unwrap() > 0.0, "{v}");
    }
    assert_eq!(v["footprint"]["bytes"], 64u64 << 20);
    assert!(v["footprint"]["model_host_bytes"].as_u64().unwrap() > 0);
    if cfg!(target_os = "linux") {
        assert!(v["footprint"]["peak_rss_bytes"].as_u64().unwrap() > 0);
    }
}
