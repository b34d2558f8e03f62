//! `splab sim --frontend dynamorio -- PROG`: the program runs under
//! splab's DynamoRIO client (crates/drclient) instead of the valgrind
//! tool. Its stream has every load and store and a block table for every
//! basic block, with the blocks' entries and taken exits (no map
//! events), so the checks are the program's status, its processes,
//! references and instructions in the same range as valgrind's (the two
//! split instructions into references differently) and that the core
//! got blocks and branches. Nothing here checks a timing.

mod needs;

use serde_json::Value;
use std::process::{Command, Output};

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab")
}

/// The `program` object of a successful run's JSON.
fn program(args: &[&str]) -> Value {
    let out = splab(args);
    assert!(out.status.success(), "splab {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    v["program"].clone()
}

fn num(p: &Value, k: &str) -> f64 {
    p[k].as_u64().unwrap_or_else(|| panic!("no {k} in {p}")) as f64
}

/// The C program `src` compiled with gcc -O2 as `name` in a directory of
/// its own (removed by the caller): the directory and the program's path.
fn compiled(name: &str, src: &str) -> (std::path::PathBuf, String) {
    needs::program("gcc", "gcc");
    let dir = std::env::temp_dir().join(format!("splab-dynamorio-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let exe = dir.join(name);
    let cc = Command::new("gcc").args(["-O2", "-o"]).arg(&exe).arg(&c).output().unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let exe = exe.to_str().unwrap().to_string();
    (dir, exe)
}

/// A file of `n` lines, each a number below 7919 in a fixed scrambled
/// order (text for xz to compress), named by `test` (the tests run at
/// once).
fn numbers(test: &str, n: u32) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("splab-dynamorio-{test}-{}", std::process::id()));
    std::fs::write(&path, (0..n).map(|i| format!("{}\n", i.wrapping_mul(2654435761) % 7919)).collect::<String>()).unwrap();
    path
}

#[test]
fn true_and_a_short_xz_give_references_near_valgrinds() {
    needs::online();
    let file = numbers("near", 20_000);
    let f = file.to_str().unwrap();
    for prog in [&["true"][..], &["xz", "-6", "-T1", "-c", f][..]] {
        let run = |fe: &str| program(&[&["sim", "--json", "--memory", "512M", "--frontend", fe, "--"][..], prog].concat());
        let (dr, vg) = (run("dynamorio"), run("valgrind"));
        assert_eq!(dr["exit_status"], 0, "{dr}");
        assert_eq!(dr["processes"], 1, "{dr}");
        let ratio = num(&dr, "refs") / num(&vg, "refs");
        assert!((0.8..1.25).contains(&ratio), "{prog:?}: references {} under DynamoRIO, {} under valgrind", dr["refs"], vg["refs"]);
        let ratio = num(&dr, "instructions") / num(&vg, "instructions");
        assert!((0.8..1.25).contains(&ratio), "{prog:?}: instructions {} under DynamoRIO, {} under valgrind", dr["instructions"], vg["instructions"]);
    }
    std::fs::remove_file(file).unwrap();
}

#[test]
fn xz_runs_in_blocks_with_branches_predicted() {
    needs::online();
    let file = numbers("blocks", 20_000);
    let p = program(&["sim", "--json", "--memory", "512M", "--frontend", "dynamorio", "--", "xz", "-6", "-T1", "-c", file.to_str().unwrap()]);
    assert_eq!(p["exit_status"], 0, "{p}");
    assert!(num(&p, "blocks") > 0.0 && num(&p, "branches") > 0.0 && num(&p, "mispredicted") > 0.0, "{p}");
    assert!(num(&p, "mispredicted") < num(&p, "branches"), "{p}");
    std::fs::remove_file(file).unwrap();
}

/// xz's second thread compresses while the first feeds it, both
/// instrumented at once: an application register the instrumentation
/// loses (ring.c's insert_exit says how drreg can) shows here as a
/// crash.
#[test]
fn a_multi_threaded_xz_runs_to_its_end() {
    needs::online();
    let file = numbers("threads", 20_000);
    let p = program(&["sim", "--json", "--memory", "512M", "--frontend", "dynamorio", "--", "xz", "-6", "-T2", "-c", file.to_str().unwrap()]);
    assert_eq!(p["exit_status"], 0, "{p}");
    assert!(p["signal"].is_null(), "{p}");
    assert_eq!(p["threads"], 1, "{p}");
    assert_eq!(p["deterministic"], false, "{p}");
    std::fs::remove_file(file).unwrap();
}

#[test]
fn a_shell_that_forks_and_execs_is_followed() {
    needs::online();
    let p = program(&["sim", "--json", "--memory", "512M", "--frontend", "dynamorio", "--", "sh", "-c", "ls / > /dev/null; echo done"]);
    assert_eq!(p["exit_status"], 0, "{p}");
    assert!(num(&p, "forks") >= 1.0 && num(&p, "execs") >= 1.0 && num(&p, "processes") >= 3.0, "{p}");
    assert!(num(&p, "refs") > 10_000.0, "{p}");
}

#[test]
fn the_exit_status_passes_through_and_bad_requests_exit_2() {
    needs::online();
    let out = splab(&["sim", "--memory", "256M", "--frontend", "dynamorio", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    let out = splab(&["sim", "--frontend", "pin", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pin"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_rerun_gives_the_same_simulated_results() {
    // The program runs with the same addresses and the same environment
    // size every time (`Online::dynamorio_command`), so its stream, and
    // everything simulated from it, repeats exactly, as under valgrind.
    // (A shell waiting on a pipeline's two children is not used: under
    // load its SIGCHLD handler ran in some runs and not others, 4
    // references and 19 instructions: docs/real-programs.md.)
    needs::online();
    let file = numbers("rerun", 20_000);
    let f = file.to_str().unwrap();
    let run = || {
        let out = splab(&["sim", "--json", "--memory", "512M", "--frontend", "dynamorio", "--", "xz", "-6", "-T1", "-c", f]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["program"]["deterministic"], true, "{}", v["program"]);
        (v["program"]["refs"].clone(), v["program"]["instructions"].clone(), v["events"].clone(), v["hw"].clone(), v["cycles"].clone())
    };
    assert_eq!(run(), run());
    std::fs::remove_file(file).unwrap();
}

#[test]
fn reading_the_clock_through_the_vdso_repeats() {
    // The vDSO's clock_gettime reads again when the host updated the
    // clock meanwhile, so its own blocks run a varying number of times;
    // the client writes only the return that leaves it.
    needs::online();
    let (dir, exe) = compiled(
        "clock",
        "#include <time.h>\nint main(void) { struct timespec t; long s = 0; for (int i = 0; i < 100000; i++) { clock_gettime(CLOCK_MONOTONIC, &t); s += t.tv_nsec > 0; } return s < 0; }\n",
    );
    let run = || {
        let p = program(&["sim", "--json", "--memory", "256M", "--frontend", "dynamorio", "--", &exe]);
        assert_eq!(p["deterministic"], true, "{p}");
        (p["refs"].clone(), p["instructions"].clone(), p["predictor"].clone())
    };
    let first = run();
    // Each call is a call and a return that the return stack predicts.
    assert!(first.2["returns"].as_u64().unwrap() >= 100_000, "{}", first.2);
    assert!(first.2["returns_missed"].as_u64().unwrap() < 100, "{}", first.2);
    for _ in 0..3 {
        assert_eq!(run(), first);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_program_shorter_than_the_warm_up_is_measured() {
    // A process's first window starts with its first reference (nothing
    // was left out before it to warm), so `true`, 35 thousand references,
    // is measured at a schedule whose warm-up is 100 thousand.
    needs::online();
    let run = |sample: &[&str]| -> Value {
        let mut args = vec!["sim", "--json", "--memory", "256M", "--frontend", "dynamorio"];
        args.extend(sample);
        args.extend(["--", "true"]);
        let out = splab(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let full = run(&[]);
    let sampled = run(&["--sample", "100k:10M"]);
    let s = &sampled["program"]["sampled"];
    assert_eq!(s["windows"], 1, "{s}");
    assert_eq!(s["measured_refs"], s["total_refs"], "{s}");
    let (a, b) = (sampled["sim_seconds"].as_f64().unwrap(), full["sim_seconds"].as_f64().unwrap());
    assert!(b > 0.0 && (a - b).abs() <= 0.05 * b, "{a} against full detail's {b}");
}

#[test]
fn a_timers_signal_marks_the_run_not_deterministic_and_a_signal_to_itself_or_from_a_waited_child_does_not() {
    // A timer's signal lands wherever the host's timing puts it in the
    // program's stream; one the program raises lands after its own call.
    needs::online();
    let (dir, timer) = compiled(
        "alarm",
        "#include <signal.h>\n#include <unistd.h>\nstatic volatile int got;\nstatic void on(int s) { (void)s; got++; }\nint main(void) { signal(SIGALRM, on); ualarm(20000, 0); volatile long y = 0; for (long i = 0; i < 4000000000L && !got; i++) y += i; return got ? 0 : 1; }\n",
    );
    let p = program(&["sim", "--json", "--memory", "256M", "--frontend", "dynamorio", "--", &timer]);
    assert_eq!(p["exit_status"], 0, "{p}");
    assert_eq!(p["outside_signals"], 1, "{p}");
    assert_eq!(p["deterministic"], false, "{p}");
    assert!(p["nondeterministic_because"].as_str().unwrap().contains("signal from outside"), "{p}");
    std::fs::remove_dir_all(dir).unwrap();
    let (dir, own) = compiled(
        "raise",
        "#include <signal.h>\nstatic volatile int got;\nstatic void on(int s) { (void)s; got++; }\nint main(void) { signal(SIGUSR1, on); for (int i = 0; i < 3; i++) raise(SIGUSR1); return got == 3 ? 0 : 1; }\n",
    );
    let p = program(&["sim", "--json", "--memory", "256M", "--frontend", "dynamorio", "--", &own]);
    assert_eq!(p["exit_status"], 0, "{p}");
    assert!(p.get("outside_signals").is_none(), "{p}");
    assert_eq!(p["deterministic"], true, "{p}");
    std::fs::remove_dir_all(dir).unwrap();
    // A child's exit reaches the shell that waits for it in the gated
    // wait, the same on every run.
    let p = program(&["sim", "--json", "--memory", "256M", "--frontend", "dynamorio", "--", "sh", "-c", "ls / > /dev/null; ls / > /dev/null"]);
    assert_eq!(p["exit_status"], 0, "{p}");
    assert!(num(&p, "processes") >= 3.0, "{p}");
    assert!(p.get("outside_signals").is_none(), "{p}");
    assert_eq!(p["deterministic"], true, "{p}");
}

#[test]
fn a_sampled_run_counts_what_runs_natively_and_brings_in_the_pages_it_touched() {
    // Between windows the program runs with its blocks counted, not
    // traced; the pages it touched meanwhile reach the model from the
    // kernel (PAGEMAP_SCAN) before the next window and at the end.
    needs::online();
    let file = numbers("sampled", 40_000);
    let f = file.to_str().unwrap();
    let xz = ["xz", "-3", "-T1", "-c", f];
    let run = |sample: Option<&str>| -> Value {
        let mut args = vec!["sim", "--json", "--memory", "512M", "--frontend", "dynamorio"];
        if let Some(s) = sample {
            args.extend(["--sample", s]);
        }
        args.push("--");
        args.extend(xz);
        let out = splab(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let full = run(None);
    let close = |a: &Value, b: &Value, tol: f64| {
        let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
        assert!((a - b).abs() <= tol * b, "{a} against {b}");
    };
    // One window at the start, then natively to the end.
    let one = run(Some("10k:100G"));
    let s = &one["program"]["sampled"];
    assert_eq!(s["native_between"], true, "{s}");
    assert_eq!(s["windows"], 1, "{s}");
    assert!(s["warming_skipped"].as_u64().unwrap() > 10 * s["measured_refs"].as_u64().unwrap(), "{s}");
    close(&one["program"]["refs"], &full["program"]["refs"], 0.02);
    close(&one["program"]["instructions"], &full["program"]["instructions"], 0.02);
    // The anonymous pages arrive; file pages read between windows only
    // at their next reference in a window (858 of 1008 here when
    // written).
    close(&one["events"]["zero_fills"], &full["events"]["zero_fills"], 0.2);
    close(&one["memory"]["resident_peak_bytes"], &full["memory"]["resident_peak_bytes"], 0.2);
    // Windows all through: the same counts, and the same run again.
    let many = run(Some("20k:400k:20k"));
    let s = &many["program"]["sampled"];
    assert!(s["later_windows"].as_u64().unwrap() >= 5, "{s}");
    assert_eq!(s["sample"]["warm"], 20_000, "{s}");
    // Shorter than the default (32 references a line of sapphire-rapids'
    // 105 MB last level, at most the period less the window): said so.
    assert_eq!(s["default_warm"], 380_000, "{s}");
    assert!(many["report"].as_str().unwrap().contains("shorter than the default 380000"), "{}", many["report"]);
    // The warm-ups go through the line filter: most of their references
    // repeat a line the thread just used and are left out (about a
    // quarter of them simulated here).
    let asked = 20_000 * s["later_windows"].as_u64().unwrap();
    assert!(s["warming_refs"].as_u64().unwrap() < asked / 2, "{s}");
    close(&many["program"]["refs"], &full["program"]["refs"], 0.02);
    close(&many["events"]["zero_fills"], &full["events"]["zero_fills"], 0.2);
    let again = run(Some("20k:400k:20k"));
    assert_eq!(again["program"]["sampled"], many["program"]["sampled"]);
    // A warm-up under valgrind is refused, naming it.
    let out = splab(&["sim", "--sample", "20k:400k:20k", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("20000:400000:20000"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(file).unwrap();
}

#[test]
fn pages_a_sampled_run_unmaps_between_windows_still_reach_the_model() {
    // 8 MB mapped, written and unmapped, four times, all between windows:
    // the client reads the range's pages before each munmap.
    needs::online();
    let (dir, exe) = compiled(
        "unmap",
        "#include <sys/mman.h>\nint main(void) { for (int r = 0; r < 4; r++) { char *p = mmap(0, 8 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); if (p == MAP_FAILED) return 1; for (long i = 0; i < (8 << 20); i += 4096) p[i] = (char)i; munmap(p, 8 << 20); } return 0; }\n",
    );
    let faults = |sample: Option<&str>| -> u64 {
        let mut args = vec!["sim", "--json", "--memory", "512M", "--frontend", "dynamorio"];
        if let Some(s) = sample {
            args.extend(["--sample", s]);
        }
        args.extend(["--", &exe]);
        let out = splab(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["events"]["zero_fills"].as_u64().unwrap()
    };
    let full = faults(None);
    let sampled = faults(Some("1k:1G"));
    // Each round maps the same addresses again, which the model (given
    // no unmaps under DynamoRIO) still has: 2048 pages at least.
    assert!(full >= 2048, "{full}");
    assert!(sampled as f64 >= 0.9 * full as f64, "sampled {sampled}, full detail {full}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn validate_runs_the_model_under_dynamorio_when_asked() {
    needs::online();
    let out = splab(&["validate", "--json", "--machine", "sapphire-rapids", "--frontend", "dynamorio", "--pages", "4k", "--repeat", "1", "--", "true"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["frontend"], "DynamoRIO", "{v}");
    assert!(v["model_off"]["refs"].as_u64().is_some_and(|r| r > 10_000), "{v}");
    let out = splab(&["validate", "--machine", "sapphire-rapids", "--frontend", "pin", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pin"));
}

#[test]
fn trace_record_writes_a_trace_the_replay_runs() {
    needs::online();
    let file = numbers("record", 5_000);
    let trace = std::env::temp_dir().join(format!("splab-dynamorio-record-{}.trace", std::process::id()));
    let (f, t) = (file.to_str().unwrap(), trace.to_str().unwrap());
    let out = splab(&["trace", "record", "--json", "--frontend", "dynamorio", "-o", t, "--", "xz", "-3", "-c", f]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tool"], "dynamorio", "{v}");
    assert_eq!(v["exit_status"], 0, "{v}");
    assert!(v["refs"].as_u64().is_some_and(|r| r > 100_000), "{v}");
    let out = splab(&["sim", "--json", "--memory", "256M", &format!("trace:{t}")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s["refs"].as_u64().is_some_and(|r| r >= v["refs"].as_u64().unwrap()), "{s}");
    for bad in [&["--tool", "lackey"][..], &["--ifetch"]] {
        let out = splab(&[&["trace", "record", "--frontend", "dynamorio", "-o", t][..], bad, &["--", "true"]].concat());
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(bad[0]), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_file(trace);
    std::fs::remove_file(file).unwrap();
}

#[test]
fn bench_runs_its_program_under_the_front_end_asked_for() {
    needs::online();
    needs::program("xz", "xz-utils");
    // The part runs in a child process, which must be told the front end
    // (and not take the default, or SPLAB_FRONTEND, instead).
    for (env, asked, named) in [(None, "dynamorio", "DynamoRIO"), (Some("dynamorio"), "valgrind", "valgrind")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_splab"));
        cmd.args(["bench", "--only-program", "--program-text", "32k", "--program-sample", "1M:4M", "--repeat", "1", "--frontend", asked, "--json"]);
        match env {
            Some(e) => cmd.env("SPLAB_FRONTEND", e),
            None => cmd.env_remove("SPLAB_FRONTEND"),
        };
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["program"]["frontend"], named, "--frontend {asked}: {}", v["program"]);
    }
}
