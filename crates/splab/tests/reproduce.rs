//! `splab reproduce` as a user runs it: the list, a bad name, and one
//! experiment at its `--quick` size (the full sizes take minutes each).

mod needs;

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
    assert!(v["experiments"][0].get("memory").is_none(), "{v}");
    // The Talos II's 32 GB, which its seed gives: in the command and the
    // JSON, not in a --quick run.
    assert!(text.contains("--machine power9 --memory 32G"), "{text}");
    let out = splab(&["reproduce", "--list", "--json", "power9-randomaccess"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["experiments"][0]["memory"], "32G", "{v}");
    let o = quick("power9-randomaccess");
    let command = o["command"].as_str().unwrap();
    assert!(command.contains("--machine power9") && !command.contains("--memory"), "{command}");
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
    let (o, _, tmp) = quick_in_scratch(name);
    let _ = std::fs::remove_dir_all(tmp);
    o
}

/// `quick`, with what the run wrote to standard error, run with TMPDIR
/// a directory of the test's own, which it returns (the caller removes
/// it).
fn quick_in_scratch(name: &str) -> (Value, String, std::path::PathBuf) {
    let tmp = std::env::temp_dir().join(format!("splab-test-reproduce-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    // Writable by all, as /tmp is: the pgbench experiment's backend runs
    // under valgrind as another user, which keeps its files there too.
    std::fs::set_permissions(&tmp, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o1777)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_splab")).args(["reproduce", "--quick", "--json", name]).env("TMPDIR", &tmp).output().expect("run splab");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let o = v["outcomes"][0].clone();
    let row = &o["rows"][0];
    assert!(row["off"].as_f64().unwrap() > 0.0 && row["on"].as_f64().unwrap() > 0.0, "{row}");
    (o, err, tmp)
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

/// `--quick --json` carries every published figure of the experiments
/// run beside the quick prediction, with the seed and the place, and no
/// errors, agreement or summary (the figures are not comparable).
#[test]
fn quick_json_sets_the_published_figures_beside_the_predictions() {
    let out = splab(&["reproduce", "--quick", "--json", "armada-gups", "power9-randomaccess"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert!(v["note"].as_str().unwrap().contains("not comparable"), "{v}");
    assert!(v["summary"].is_null(), "{v}");
    let p = v["published"].as_array().expect("published");
    let find = |exp: &str, seed: &str, figure: &str| {
        p.iter().find(|a| a["experiment"] == exp && a["seed"] == seed && a["figure"] == figure).unwrap_or_else(|| panic!("{exp} {seed} {figure} missing: {v}")).clone()
    };
    let g = find("armada-gups", "000", "GUP/s");
    assert_eq!(g["published_off"], 0.003685255);
    assert_eq!(g["published_on"], 0.005530048);
    assert!((g["published_change_percent"].as_f64().unwrap() - 50.06).abs() < 0.01, "{g}");
    assert!(g["predicted_off"].as_f64().unwrap() > 0.0 && g["predicted_on"].as_f64().unwrap() > 0.0, "{g}");
    assert!(g["predicted_change_percent"].is_f64(), "{g}");
    assert!(g["seed_file"].as_str().unwrap().starts_with("000_") && g["place"].as_str().unwrap().contains("Exemplary GUPS results"), "{g}");
    assert_eq!((g["unit"].as_str(), g["headline"].as_bool(), g["absolute"].as_bool()), (Some("GUP/s"), Some(true), Some(true)));
    for k in ["error_off_percent", "error_on_percent", "error_change_percent", "agrees"] {
        assert!(g[k].is_null(), "{k} under --quick: {g}");
    }
    // A change alone.
    let t = find("power9-randomaccess", "003", "RandomAccess");
    assert_eq!(t["published_change_percent"], 23.0);
    assert!(t["published_off"].is_null() && t["predicted_on"].as_f64().unwrap() > 0.0, "{t}");
    // The section counters of the run: two 1 MB sections promoted.
    let c = find("armada-gups", "000", "vm.pmap.section.promotions");
    assert_eq!((c["published_on"].as_f64(), c["predicted_on"].as_f64()), (Some(1024.0), Some(2.0)), "{c}");
    let out = splab(&["reproduce", "--quick", "armada-gups"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("published against predicted (--quick: the predictions are not comparable"), "{text}");
    assert!(!text.contains("headline figures (*):"), "no summary under --quick: {text}");
}

/// The buildworld experiments run GCC online: the driver, cc1 and as,
/// through xargs, on the Armada XP (a 32-bit user space: the stack under
/// valgrind moves below its limit) and on POWER9.
#[test]
fn the_buildworld_experiments_run_gcc_online() {
    needs::online();
    needs::program("gcc", "gcc");
    for name in ["armada-buildworld", "power9-buildworld"] {
        let (o, _, tmp) = quick_in_scratch(name);
        let command = o["command"].as_str().unwrap();
        assert!(command.contains(" -- xargs -a DIR/units ") && command.contains(" gcc -O2 -c DIR/unit.c "), "{o}");
        figure_and_inputs_gone(&o, ("build time", "s"), &tmp);
    }
}

/// A program experiment's row has `figure` in its unit, and the inputs
/// made for the run (in a directory in `tmp`, the run's TMPDIR) are gone
/// with it; `tmp` is removed.
fn figure_and_inputs_gone(o: &Value, (figure, unit): (&str, &str), tmp: &std::path::Path) {
    let row = &o["rows"][0];
    assert_eq!((row["figure"].as_str(), row["unit"].as_str()), (Some(figure), Some(unit)), "{row}");
    let left: Vec<String> = std::fs::read_dir(tmp).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("splab-reproduce-")).collect();
    let _ = std::fs::remove_dir_all(tmp);
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
}

/// The pgbench experiments run a PostgreSQL backend online on a
/// database made natively, and report tps; the server's log lines stay
/// out of splab's standard error.
#[test]
fn the_pgbench_experiment_runs_a_postgres_backend_online() {
    needs::online();
    needs::postgres();
    let (o, err, tmp) = quick_in_scratch("power8-pgbench");
    assert!(!err.contains("LOG:"), "{err}");
    let command = o["command"].as_str().unwrap();
    assert!(command.contains("/bin/postgres --single -D DIR/data ") && command.contains("--input DIR/select-"), "{o}");
    figure_and_inputs_gone(&o, ("tps", "transactions/s"), &tmp);
}

/// `--jobs` runs experiments at once, each in a process of its own, and
/// changes none of their figures; `--jobs 0` is refused.
#[test]
fn experiments_run_at_once_give_the_same_figures() {
    let names = ["armada-gups", "armada-lat", "power8-randomaccess"];
    let doc = |jobs: &str| {
        let out = splab(&[&["reproduce", "--quick", "--json", "--jobs", jobs][..], &names[..]].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        v.as_object_mut().unwrap().remove("command");
        for o in v["outcomes"].as_array_mut().unwrap() {
            assert!(o["host_seconds"].as_f64().unwrap() > 0.0, "{o}");
            o.as_object_mut().unwrap().remove("host_seconds");
        }
        v
    };
    let (one, three) = (doc("1"), doc("3"));
    let order: Vec<&str> = three["outcomes"].as_array().unwrap().iter().map(|o| o["experiment"]["name"].as_str().unwrap()).collect();
    assert_eq!(order, names, "the list's order, whichever ends first");
    assert_eq!(one, three);
    let out = splab(&["reproduce", "--quick", "--jobs", "0", "armada-gups"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--jobs 0"), "{}", String::from_utf8_lossy(&out.stderr));
}
