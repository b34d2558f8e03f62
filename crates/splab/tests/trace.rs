//! `splab trace ...` and `splab sim|compare trace:FILE` as a user runs
//! them: conversion, info, replay, exit status 2 naming the line or byte of
//! a malformed trace, and recording with valgrind where it is installed.

mod needs;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab")
}

fn json(args: &[&str]) -> Value {
    let out = splab(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}"))
}

fn temp(name: &str) -> PathBuf {
    let dir = test_dir();
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The test's own temporary directory, named by the thread the test runs
/// on (the test's name), so that tests running at once keep apart and
/// each removes its own (`clean`); a failed test leaves its files.
fn test_dir() -> PathBuf {
    let test = std::thread::current().name().unwrap_or("main").replace("::", "-");
    std::env::temp_dir().join(format!("splab-cli-trace-{}-{test}", std::process::id()))
}

fn clean() {
    let _ = std::fs::remove_dir_all(test_dir());
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A lackey log that touches every page of a 2 MB block twice (a load then
/// a store of each page's first word), then a few scattered references.
fn lackey_log() -> String {
    let mut t = String::from("==7== Lackey, an example Valgrind tool\n");
    t.push_str("SYSCALL[7,1](9) sys_mmap ( 0x0, 2097152, 3, 34, 4294967295, 0 ) --> [pre-success] Success(0x7f0000000000)\n");
    for p in 0..512u64 {
        t.push_str(&format!("I  00401000,3\n L {:x},8\n S {:x},8\n", 0x7f00_0000_0000u64 + p * 4096, 0x7f00_0000_0000u64 + p * 4096));
    }
    t.push_str(" M 1ffeffe000,4\n==7== \n");
    t
}

#[test]
fn convert_info_and_replay() {
    let log = temp("prog.lackey");
    std::fs::write(&log, lackey_log()).unwrap();
    let bin = temp("prog.trace");
    let c = json(&["trace", "convert", s(&log), s(&bin), "--json"]);
    assert_eq!(c["format"], "Lackey");
    assert_eq!(c["converted"]["refs"], 3 * 512 + 1);
    assert_eq!(c["converted"]["maps"], 1);
    let i = json(&["trace", "info", s(&bin), "--json"]);
    assert_eq!(i["refs"], 3 * 512 + 1);
    assert_eq!(i["by_kind"]["instr"], 512);
    assert_eq!(i["data_pages_4k"], 513);
    assert_eq!(i["data_full_blocks_2m"], 1);
    let text = String::from_utf8(splab(&["trace", "info", s(&bin)]).stdout).unwrap();
    assert!(text.contains("1 maps, 0 unmaps"), "{text}");
    // The binary trace and the log it came from replay alike.
    let a = json(&["sim", &format!("trace:{}", s(&bin)), "--json"]);
    let b = json(&["sim", &format!("trace:{}", s(&log)), "--json"]);
    assert_eq!(a["figure"]["name"], "simulated seconds");
    assert_eq!(a["figure"]["higher_is_better"], false);
    assert_eq!(a["refs"], 2 * 512 + 2);
    assert_eq!(a["sim_seconds"], b["sim_seconds"]);
    assert_eq!(a["sysctl"]["vm.pmap.pde.promotions"], 1);
    assert!(a["report"].as_str().unwrap().contains("512 instruction fetches skipped"));
    let c = json(&["compare", &format!("trace:{}", s(&bin)), "--json"]);
    assert_eq!(c["off"]["sysctl"]["vm.pmap.pde.promotions"], 0);
    assert_eq!(c["on"]["sysctl"]["vm.pmap.pde.promotions"], 1);
    clean();
}

fn fails_with(args: &[&str], needle: &str) {
    let out = splab(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn malformed_traces_exit_2_naming_where() {
    let log = temp("bad.lackey");
    std::fs::write(&log, " L 1000,8\n S 1008,8\n L 10x0,8\n").unwrap();
    let t = format!("trace:{}", s(&log));
    fails_with(&["sim", &t], "line 3: expected a lackey line");
    fails_with(&["compare", &t, "--json"], "line 3");
    fails_with(&["trace", "info", s(&log)], "line 3");
    let out = temp("bad-out.trace");
    fails_with(&["trace", "convert", s(&log), s(&out)], "line 3");
    assert!(!out.exists(), "a failed conversion leaves no output");
    // A binary trace with a byte changed in the body.
    let good = temp("good.lackey");
    std::fs::write(&good, lackey_log()).unwrap();
    let bin = temp("corrupt.trace");
    json(&["trace", "convert", s(&good), s(&bin), "--json"]);
    let mut b = std::fs::read(&bin).unwrap();
    let n = b.len();
    // The header is 21 bytes (no layout); the body starts with the map.
    assert_eq!(b[21], 0x80);
    b[21] = 0x9c;
    std::fs::write(&bin, &b).unwrap();
    fails_with(&["sim", &format!("trace:{}", s(&bin))], "byte 21: expected a record tag");
    fails_with(&["trace", "info", s(&bin)], "byte 21: expected a record tag");
    // Truncated.
    b[21] = 0x80;
    std::fs::write(&bin, &b[..n / 2]).unwrap();
    fails_with(&["trace", "info", s(&bin)], "the data ends");
    fails_with(&["sim", &format!("trace:{}", s(&temp("none.trace")))], "cannot open");
    fails_with(&["trace", "info", s(&log), "--from", "pcap"], "unknown trace format");
    fails_with(&["trace", "convert", s(&good), s(&good)], "both the input and the output");
    fails_with(&["trace", "record", "--out", s(&temp("x.trace")), "--", "/no/such/program"], "not found");
    clean();
}

#[test]
fn record_a_real_program() {
    needs::program("valgrind", "valgrind");
    let out = temp("true.trace");
    let r = json(&["trace", "record", "--tool", "lackey", "--out", s(&out), "--json", "--", "true"]);
    assert_eq!(r["exit_status"], 0);
    assert_eq!(r["tool"], "lackey");
    assert!(r["refs"].as_u64().unwrap() > 10_000, "{r}");
    assert!(r["layout_regions"].as_u64().unwrap() >= 2, "the program and its loader: {r}");
    assert!(r["maps"].as_u64().unwrap() >= 1, "libc is mapped: {r}");
    let i = json(&["trace", "info", s(&out), "--json"]);
    assert_eq!(i["refs"], r["refs"]);
    let v = json(&["sim", &format!("trace:{}", s(&out)), "--json"]);
    assert!(v["refs"].as_u64().unwrap() > 1000);
    clean();
}

/// splab's own valgrind tool against lackey on the same run: gzip of a
/// few KB (gzip's work does not depend on the environment, so the counts
/// differ only by what valgrind itself does differently under each tool).
#[test]
fn splabtrace_agrees_with_lackey() {
    needs::online();
    let input = temp("gzip-input.txt");
    let text: String = (0..400).map(|i| format!("line {i} of the input, {}\n", i * 7919 % 1000)).collect();
    std::fs::write(&input, text).unwrap();
    let vt = temp("gzip.vt.trace");
    let out = splab(&["trace", "record", "--tool", "splabtrace", "--ifetch", "--out", s(&vt), "--json", "--", "gzip", "-c", s(&input)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lk = temp("gzip.lk.trace");
    let b = json(&["trace", "record", "--tool", "lackey", "--out", s(&lk), "--json", "--", "gzip", "-c", s(&input)]);
    assert_eq!(a["tool"], "splabtrace");
    assert_eq!(a["exit_status"], 0);
    for k in ["instr", "load", "store", "modify"] {
        let (x, y) = (a["by_kind"][k].as_u64().unwrap() as f64, b["by_kind"][k].as_u64().unwrap() as f64);
        eprintln!("{k}: splabtrace {x}, lackey {y}");
        assert!(y > 100.0 && (x - y).abs() <= 0.02 * y, "{k}: splabtrace {x}, lackey {y}");
    }
    // The layout: gzip's image, the loader, the stack, as valgrind set them up.
    let i = json(&["trace", "info", s(&vt), "--json"]);
    assert_eq!(i["refs"], a["refs"]);
    let layout = i["layout"].as_array().unwrap();
    let has = |origin: &str, name: &str| layout.iter().any(|r| r["origin"] == origin && r["name"].as_str().unwrap().contains(name));
    assert!(has("Image", "gzip"), "{layout:?}");
    assert!(has("Image", "ld-linux"), "{layout:?}");
    assert!(has("Stack", ""), "{layout:?}");
    assert!(a["maps"].as_u64().unwrap() >= 1, "libc is mapped: {a}");
    // Without fetches: the same data references, and the trace replays.
    let vt2 = temp("gzip.vt2.trace");
    let c = json(&["trace", "record", "--out", s(&vt2), "--json", "--", "gzip", "-c", s(&input)]);
    assert_eq!(c["by_kind"]["instr"], 0);
    assert_eq!(c["by_kind"]["load"], a["by_kind"]["load"]);
    assert_eq!(c["by_kind"]["store"], a["by_kind"]["store"]);
    let v = json(&["sim", &format!("trace:{}", s(&vt2)), "--json"]);
    assert!(v["refs"].as_u64().unwrap() > 1000);
    clean();
}
