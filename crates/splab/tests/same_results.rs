//! `tools/same-results` in its short form: every deterministic key of a
//! small matrix of runs (compare on three architectures, check, a trace
//! replay) must come out the same twice, and, when
//! `SPLAB_SAME_RESULTS_OLD` names an older splab binary, the same as that
//! binary's. Fails, saying so, where python3 is missing.

mod needs;

use std::path::Path;
use std::process::Command;

#[test]
fn same_results_quick() {
    needs::program("python3", "python3");
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/same-results");
    let new = env!("CARGO_BIN_EXE_splab");
    let old = std::env::var("SPLAB_SAME_RESULTS_OLD").unwrap_or_else(|_| new.to_string());
    let out = Command::new("python3").arg(&tool).args([&old, new, "--quick", "--jobs", "2"]).output().expect("run tools/same-results");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "same-results {old} {new} --quick:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(" 0 differing, 0 runs failed"), "{text}");
}

#[test]
fn same_results_names_a_bad_binary() {
    needs::program("python3", "python3");
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/same-results");
    let out = Command::new("python3").arg(&tool).args(["/nonexistent/splab", env!("CARGO_BIN_EXE_splab"), "--quick"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'/nonexistent/splab' is not an executable splab binary"));
}
