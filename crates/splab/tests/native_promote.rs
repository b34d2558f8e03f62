//! The built-in workloads under `--pages promote` (the promotion monitor
//! watching the workload's own region, which needs no root), and the
//! `sparse` workload, whose memory THP inflates and promotion does not.
//! Nothing here checks a timing.

mod needs;

use serde_json::Value;
use std::process::Command;

fn json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}"))
}

#[test]
fn gups_promoted_when_populated() {
    needs::thp();
    let v = json(&["native", "gups", "--log2-table", "22", "--verify", "--pages", "4k,promote", "--repeat", "1", "--json"]);
    let p = &v["layouts"][1];
    assert_eq!(p["pages"], "promote");
    assert_eq!(p["status"], "ran", "promote needs MADV_COLLAPSE (Linux 6.1): {}", p["skip_reason"]);
    let r = &p["runs"][0];
    assert!(r["outcome"]["report"].as_str().unwrap().contains("(passed)"));
    // 32 MB table: 16 ranges of 2 MB, all collapsed after the touch.
    assert_eq!(r["promote"]["promotions"], 16, "{}", r["promote"]);
    assert_eq!(r["obtained"]["bytes_2m"], 32 << 20, "{}", r["obtained"]);
    assert_eq!(p["as_asked"], true);
}

#[test]
fn sparse_memory_thp_inflates_and_promotion_does_not() {
    needs::thp();
    let v = json(&["native", "sparse", "--size", "64M", "--rounds", "2", "--pages", "4k,thp,promote", "--repeat", "1", "--json"]);
    let peak = |k: usize| v["layouts"][k]["figures"][0]["spread"]["median"].as_f64().unwrap();
    assert_eq!(v["layouts"][0]["figures"][0]["name"], "peak resident");
    // 32 slabs x 128 live pages of 4 KB: 16 MB live.
    let (base, thp, pro) = (peak(0), peak(1), peak(2));
    assert!((15.9..17.0).contains(&base), "4k: {base} MB");
    assert!(thp > 2.0 * base, "thp faults whole 2 MB pages: {thp} MB against {base} MB");
    assert_eq!(v["layouts"][2]["status"], "ran", "promote needs MADV_COLLAPSE (Linux 6.1): {}", v["layouts"][2]["skip_reason"]);
    assert!(pro < 1.05 * base, "promote: {pro} MB against {base} MB");
    let c = &v["layouts"][2]["runs"][0]["promote"];
    assert_eq!(c["promotions"], c["setup_promotions"], "no slab fills once the arena is emptied: {c}");
}
