//! `splab sim|compare|validate -- PROG` on short programs under valgrind:
//! forks and execs followed, standard input and exit status passed
//! through, the program's output kept out of the report (`--output`), another architecture, sampling, and bad input (a program not
//! found, one that crashes, a stream that breaks off). Each test fails,
//! saying what is missing, where valgrind or splab's tool is (`needs`).
//! Nothing here checks a timing.

mod needs;

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn splab_pid(args: &[&str], stdin: &[u8]) -> (Output, u32) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_splab")).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run splab");
    let pid = c.id();
    c.stdin.take().unwrap().write_all(stdin).unwrap();
    (c.wait_with_output().unwrap(), pid)
}

fn splab_in(args: &[&str], stdin: &[u8]) -> Output {
    splab_pid(args, stdin).0
}

fn splab(args: &[&str]) -> Output {
    splab_in(args, b"")
}


/// The JSON document that is all of splab's standard output.
fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}\nstderr: {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("splab-online-test-{}-{name}", std::process::id()))
}

/// A temporary file of `n` lines, each a number below 7919 in a fixed
/// scrambled order (text for xz to compress).
fn numbers(name: &str, n: u32) -> std::path::PathBuf {
    let path = temp(name);
    std::fs::write(&path, (0..n).map(|i| format!("{}\n", i.wrapping_mul(2654435761) % 7919)).collect::<String>()).unwrap();
    path
}

/// What a run of splab with pid `pid` left in the shared-memory and
/// temporary directories (its run directories, its spooled input).
fn left_behind(pid: u32) -> Vec<String> {
    let mut v = Vec::new();
    for (dir, prefix) in [(std::path::PathBuf::from("/dev/shm"), format!("splab-online-{pid}-")), (std::env::temp_dir(), format!("splab-online-{pid}-")), (std::env::temp_dir(), format!("splab-stdin-{pid}"))] {
        if let Ok(d) = std::fs::read_dir(&dir) {
            v.extend(d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(&prefix)));
        }
    }
    v
}

#[test]
fn a_shell_that_forks_and_execs_is_simulated_process_by_process() {
    needs::online();
    let (out, pid) = splab_pid(&["sim", "--json", "--memory", "512M", "--", "sh", "-c", "ls / > /dev/null; echo done"], b"");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The program's output goes nowhere by default: the report is alone.
    let v = report(&out);
    let p = &v["program"];
    assert_eq!(p["exit_status"], 0);
    assert!(p["forks"].as_u64().unwrap() >= 1 && p["execs"].as_u64().unwrap() >= 1, "{p}");
    assert!(p["processes"].as_u64().unwrap() >= 3, "{p}");
    assert!(p["refs"].as_u64().unwrap() > 10_000 && p["instructions"].as_u64().unwrap() > p["refs"].as_u64().unwrap(), "{p}");
    assert!(v["sim_seconds"].as_f64().unwrap() > 0.0);
    // Every simulated process has exited: all memory is free again.
    assert_eq!(v["sysctl"]["vm.stats.vm.v_free_count"], v["sysctl"]["vm.stats.vm.v_page_count"]);
    assert_eq!(left_behind(pid), Vec::<String>::new());
}

#[test]
fn standard_input_and_exit_status_pass_through_and_output_goes_where_asked() {
    needs::online();
    // inherit: splab's standard error, never the report's stream.
    let out = splab_in(&["sim", "--memory", "256M", "--output", "inherit", "--", "cat"], b"one line\n");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("one line\n"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Program run online: cat"), "{}", String::from_utf8_lossy(&out.stdout));
    // A file, and a pipe splab drains.
    let f = temp("out.txt");
    let out = splab_in(&["sim", "--json", "--memory", "256M", "--output", f.to_str().unwrap(), "--", "cat"], b"to a file\n");
    assert_eq!(report(&out)["program"]["exit_status"], 0);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "to a file\n");
    let _ = std::fs::remove_file(&f);
    let out = splab_in(&["sim", "--json", "--memory", "256M", "--output", "pipe", "--", "sh", "-c", "test -p /dev/stdout && cat"], b"piped\n");
    assert_eq!(report(&out)["program"]["exit_status"], 0, "the program's standard output is a pipe");
    let out = splab(&["sim", "--memory", "256M", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exited with status 3"));
}

#[test]
fn compare_runs_the_program_twice_on_one_input_and_keeps_its_output_apart() {
    needs::online();
    let f = temp("sorted.txt");
    let out = splab_in(&["compare", "--json", "--memory", "256M", "--output", f.to_str().unwrap(), "--", "sort"], b"b\na\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "a\nb\n");
    let _ = std::fs::remove_file(&f);
    assert_eq!(v["off"]["superpages"], false);
    assert_eq!(v["on"]["superpages"], true);
    // The same program on the same input, its output to the same file.
    let (off, on) = (v["off"]["program"]["refs"].as_f64().unwrap(), v["on"]["program"]["refs"].as_f64().unwrap());
    assert!((off / on - 1.0).abs() < 0.01, "{off} {on}");
}

/// What a system call writes into the program's memory (read into a
/// buffer) and reads out of it (write from it) is the kernel's access to
/// the program's pages: dd's 4 MiB buffer, which only read() fills and
/// write() reads, is faulted in page by page, goes through the caches
/// line by line, and fills a 2 MB reservation, which is promoted.
#[test]
fn the_kernels_copies_into_and_out_of_the_program_touch_its_pages() {
    needs::online();
    needs::program("dd", "coreutils");
    let f = temp("dd-input");
    std::fs::write(&f, vec![7u8; 4 << 20]).unwrap();
    let input = format!("if={}", f.display());
    let out = splab(&["sim", "--json", "--memory", "256M", "--", "dd", &input, "of=/dev/null", "bs=4M", "count=1"]);
    let _ = std::fs::remove_file(&f);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    let hw = &v["hw"];
    let lines = (4u64 << 20) / 64;
    assert!(hw["stores"].as_u64().unwrap() >= lines && hw["loads"].as_u64().unwrap() >= lines, "{hw}");
    assert!(hw["faults_taken"].as_u64().unwrap() >= 1024, "{hw}");
    assert!(v["sysctl"]["vm.pmap.pde.promotions"].as_i64().unwrap() >= 1, "{}", v["sysctl"]);
}

#[test]
fn another_architecture_and_sampling() {
    needs::online();
    // Windows of 100k references every 600k: ls's stream of about 1.5 M
    // references (six 2 MiB slots) has slots in detail and in warming.
    let out = splab(&["sim", "--json", "--arch", "arm64", "--memory", "256M", "--sample", "100k:600k", "--", "sh", "-c", "ls /usr/bin > /dev/null"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    assert_eq!(v["arch"], "arm64");
    let s = &v["program"]["sampled"];
    assert!(s["windows"].as_u64().unwrap() >= 2, "{s}");
    assert!(s["measured_refs"].as_u64().unwrap() < s["total_refs"].as_u64().unwrap(), "{s}");
    assert!(s["sim_seconds"]["value"].as_f64().unwrap() > 0.0 && s["sim_seconds"]["plus_minus"].as_f64().is_some(), "{s}");
    // Warming leaves references out in the valgrind tool (arm64's
    // profile: a first-level cache of 64 sets of 64-byte lines, 4 KB
    // pages) and counts them; DynamoRIO's client counts those it runs
    // natively between windows: the run's references are a full run's.
    let skipped = s["warming_skipped"].as_u64().unwrap();
    if s["native_between"] == true {
        assert!(skipped > s["measured_refs"].as_u64().unwrap(), "{s}");
    } else {
        assert_eq!((s["warming_filter_sets"].as_u64(), s["warming_filter_line"].as_u64()), (Some(64), Some(64)), "{s}");
        assert!(skipped > 0 && skipped < s["warming_refs"].as_u64().unwrap(), "{s}");
    }
    assert_eq!(s["total_refs"], v["program"]["refs"]);
    let full = splab(&["sim", "--json", "--arch", "arm64", "--memory", "256M", "--", "sh", "-c", "ls /usr/bin > /dev/null"]);
    assert!(full.status.success(), "{}", String::from_utf8_lossy(&full.stderr));
    let f = report(&full);
    let (a, b) = (f["program"]["refs"].as_f64().unwrap(), v["program"]["refs"].as_f64().unwrap());
    assert!((a / b - 1.0).abs() < 0.01, "full {a}, sampled {b}");
}

#[test]
fn bad_programs_are_reported_with_their_status_and_leave_nothing_behind() {
    needs::online();
    let (out, pid) = splab_pid(&["sim", "--", "no-such-program-splab"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"no-such-program-splab\" not found"));
    assert_eq!(left_behind(pid), Vec::<String>::new());
    let out = splab(&["sim", "gups", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let out = splab(&["sim", "--sample", "10:5", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("10:5"));
    // A non-zero exit, in both of compare's runs: the report, then the
    // program's status; the spooled input is gone.
    let (out, pid) = splab_pid(&["compare", "--memory", "256M", "--", "sh", "-c", "cat > /dev/null; exit 3"], b"input\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("exited with status 3") && String::from_utf8_lossy(&out.stdout).contains("superpages off"), "{err}");
    assert_eq!(left_behind(pid), Vec::<String>::new());
    // A crash: the program's signal is splab's status, as a shell gives it.
    let (out, pid) = splab_pid(&["sim", "--memory", "256M", "--", "sh", "-c", "kill -SEGV $$"], b"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 11), "{err}");
    assert_eq!(left_behind(pid), Vec::<String>::new());
    // Killed outright from outside (valgrind turns a process's SIGKILL to
    // itself into an orderly exit), the tool writes no end: the stream
    // broke off, and the message says after how much.
    let (out, pid) = splab_pid(&["sim", "--memory", "256M", "--", "sh", "-c", "sh -c 'kill -KILL $PPID'; sleep 5"], b"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("broke off") && err.contains("references in"), "{err}");
    assert_eq!(left_behind(pid), Vec::<String>::new());
}

#[test]
fn validate_sets_a_program_beside_its_native_runs() {
    needs::online();
    let out = splab(&["validate", "--machine", "sapphire-rapids", "--repeat", "1", "--pages", "4k", "--json", "--", "sh", "-c", "ls /usr > /dev/null"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["layout"], "4k");
    assert!(rows[0]["measured"]["median"].as_f64().unwrap() > 0.0, "{v}");
    assert!(rows[0]["predicted_seconds"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["model_on"]["refs"].as_u64().unwrap() > 10_000, "{v}");
    // Bad input is refused before anything runs.
    for (args, bad) in [(&["--pages", "thp,4k"][..], "thp,4k"), (&["--input", "/nonexistent/q.sql"], "/nonexistent/q.sql"), (&["--sample", "5:1"], "5:1")] {
        let mut a = vec!["validate", "--machine", "sapphire-rapids"];
        a.extend_from_slice(args);
        a.extend(["--", "true"]);
        let out = splab(&a);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(bad), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = splab(&["validate", "--machine", "sapphire-rapids", "--", "no-such-program-splab"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bench_runs_a_program_natively_in_full_detail_and_sampled() {
    needs::online();
    needs::program("xz", "xz-utils");
    let out = splab(&["bench", "--only-program", "--program-text", "32k", "--program-sample", "1M:4M", "--repeat", "1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    let p = &v["program"];
    for k in ["native_seconds", "online_seconds", "online_ratio", "sampled_seconds", "sampled_ratio", "sim_seconds", "sampled_sim_seconds"] {
        assert!(p[k].as_f64().unwrap() > 0.0, "{k}: {p}");
    }
    assert!(p["refs"].as_u64().unwrap() > 1_000_000, "{p}");
    assert_eq!(v["gups_off"], Value::Null);
    let out = splab(&["bench", "--only-program", "--program-sample", "9:3"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `splab sim --json --memory 512M [MODE] -- sh -c SCRIPT`'s report, for
/// each of `modes`. The shell's own work depends on splab's pid: dash
/// writes its parent's pid in decimal into PPID at start, 4 references a
/// digit. So the runs are compared only if splab's pids had as many
/// digits in each (they climb, so a second try has them).
fn sim_sh_runs(script: &str, modes: &[&[&str]]) -> Vec<Value> {
    for _ in 0..3 {
        let mut digits = Vec::new();
        let runs: Vec<Value> = modes
            .iter()
            .map(|mode| {
                let mut args = vec!["sim", "--json", "--memory", "512M"];
                args.extend_from_slice(mode);
                args.extend_from_slice(&["--", "sh", "-c", script]);
                let (out, pid) = splab_pid(&args, b"");
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                digits.push(pid.to_string().len());
                report(&out)
            })
            .collect();
        if digits.iter().all(|&d| d == digits[0]) {
            return runs;
        }
        eprintln!("splab's pids had {digits:?} digits: running again");
    }
    panic!("splab's pids never had as many digits in every run");
}

/// The deterministic keys whose values differ between two reports.
fn differing(a: &Value, b: &Value) -> Vec<String> {
    let (ka, kb) = (deterministic_keys(a), deterministic_keys(b));
    ka.keys().chain(kb.keys()).filter(|k| ka.get(*k) != kb.get(*k)).map(|k| format!("{k}: {:?} against {:?}", ka.get(k), kb.get(k))).collect()
}

/// Every key of a JSON document, flattened (`a.b[2].c`), without those
/// that measure the host or name the command line (as tools/same-results
/// and tools/soak-determinism leave them out).
fn deterministic_keys(v: &Value) -> std::collections::BTreeMap<String, Value> {
    fn walk(v: &Value, path: String, out: &mut std::collections::BTreeMap<String, Value>) {
        match v {
            Value::Object(m) => m.iter().for_each(|(k, x)| walk(x, if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, out)),
            Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| walk(x, format!("{path}[{i}]"), out)),
            _ => {
                out.insert(path, v.clone());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(v, String::new(), &mut out);
    out.retain(|k, _| !k.split(['.', '[']).any(|part| part.starts_with("host_") || part == "host" || part == "hosts") && k != "build" && !k.starts_with("command"));
    out
}


#[test]
fn processes_that_wait_on_one_another_give_the_same_results_in_both_thread_modes() {
    needs::online();
    needs::program("xz", "xz-utils");
    // Two compressors one after the other under a shell that waits for
    // each: processes on the model's CPUs, caches and memory, the shell
    // blocked in the kernel while the first runs.
    let text = temp("two.txt");
    let words: Vec<String> = (0..2000u64).map(|i| format!("w{:x}", i.wrapping_mul(2654435761) % 4099)).collect();
    std::fs::write(&text, &words.join("\n").as_bytes()[..8192]).unwrap();
    let t = text.display();
    let script = format!("xz -6 -T1 -c {t} > /dev/null; xz -3 -T1 -c {t} > /dev/null");
    let runs = sim_sh_runs(&script, &[&[], &["--single-thread"]]);
    let (a, b) = (&runs[0], &runs[1]);
    std::fs::remove_file(&text).unwrap();
    let p = &a["program"];
    assert_eq!(p["processes"], 5, "{p}");
    assert_eq!(p["deterministic"], true, "{p}");
    let differ = differing(a, b);
    assert!(differ.is_empty(), "{} keys differ:\n{}", differ.len(), differ.join("\n"));
}

#[test]
fn a_pipeline_runs_in_lockstep_and_gives_the_same_results_every_time_in_both_thread_modes() {
    needs::online();
    needs::program("xz", "xz-utils");
    // xz -d sets its standard input non-blocking and polls it: what it
    // finds there is the writer's progress. The processes run one at a
    // time in the model's order, so it finds the same every time.
    let text = numbers("pipeline.txt", 1500);
    let script = format!("xz -6 -T1 -c {} | xz -d > /dev/null", text.display());
    let runs = sim_sh_runs(&script, &[&[], &["--single-thread"], &[], &["--single-thread"]]);
    std::fs::remove_file(&text).unwrap();
    let p = &runs[0]["program"];
    assert_eq!(p["deterministic"], true, "{p}");
    assert!(p["lockstep_grants"].as_u64().unwrap() > 0 && p["processes"].as_u64().unwrap() >= 3, "{p}");
    for (i, r) in runs.iter().enumerate().skip(1) {
        let differ = differing(&runs[0], r);
        assert!(differ.is_empty(), "run {}: {} keys differ:\n{}", i + 1, differ.len(), differ.join("\n"));
    }
}

#[test]
fn a_process_that_sleeps_beside_others_is_marked_not_deterministic() {
    needs::online();
    needs::program("xz", "xz-utils");
    // The writer sleeps first: where its timer ends among the reader's
    // steps is the host's timing. The reader's polls that find the pipe
    // empty happen in lockstep, so they alone would not mark the run.
    let text = numbers("pipe.txt", 2000);
    let script = format!("{{ sleep 0.2; xz -6 -T1 -c {}; }} | xz -d > /dev/null", text.display());
    let out = splab(&["sim", "--memory", "512M", "--json", "--", "sh", "-c", &script]);
    std::fs::remove_file(&text).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = &report(&out)["program"];
    assert!(p["would_block"].as_u64().unwrap() >= 1 && p["timed_waits"].as_u64().unwrap() >= 1, "{p}");
    assert_eq!(p["deterministic"], false, "{p}");
    let why = p["nondeterministic_because"].as_str().unwrap();
    assert!(why.contains("timer") && !why.contains("EAGAIN"), "{p}");
}

#[test]
fn a_program_with_threads_is_marked_not_deterministic() {
    needs::online();
    needs::program("xz", "xz-utils");
    let text = numbers("threads.txt", 20000);
    let path = text.display().to_string();
    let out = splab(&["sim", "--memory", "512M", "--json", "--", "xz", "-2", "-T2", "--block-size=16KiB", "-c", &path]);
    std::fs::remove_file(&text).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = report(&out);
    let p = &v["program"];
    assert!(p["threads"].as_u64().unwrap() >= 1, "{p}");
    assert_eq!(p["deterministic"], false, "{p}");
    assert!(p["nondeterministic_because"].as_str().unwrap().contains("thread"), "{p}");
    assert!(v["report"].as_str().unwrap().contains("not deterministic"), "{}", v["report"]);
}

#[test]
fn a_timers_signal_marks_the_run_not_deterministic_and_signals_to_itself_do_not() {
    needs::online();
    needs::program("perl", "perl");
    // A timer's signal is let in wherever the program is when it comes:
    // the loop runs as long as the host takes to send it.
    let run = |script: &str| {
        let out = splab(&["sim", "--memory", "256M", "--json", "--", "perl", "-e", script]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        report(&out)["program"].clone()
    };
    let p = run("use Time::HiRes qw(ualarm); $SIG{ALRM} = sub { $g = 1 }; ualarm(20000); $i++ until $g");
    assert_eq!(p["outside_signals"], 1, "{p}");
    assert_eq!(p["deterministic"], false, "{p}");
    assert!(p["nondeterministic_because"].as_str().unwrap().contains("signal from outside"), "{p}");
    // Signals the program sends itself land after its own call.
    let p = run("$SIG{USR1} = sub { $g++ }; kill 'USR1', $$ for 1 .. 3; exit($g == 3 ? 0 : 1)");
    assert_eq!(p["exit_status"], 0, "{p}");
    assert!(p.get("outside_signals").is_none(), "{p}");
    assert_eq!(p["deterministic"], true, "{p}");
}

/// Every call pushes its return address on the modelled return stack
/// once and every return pops it: a program of ordinary calls and
/// returns (sort's comparisons) mispredicts almost none of its returns.
/// The valgrind tool marks a call valgrind follows inside a block apart
/// from the call that ends one; counting the second as both pushed its
/// address twice and mispredicted about half the returns.
#[test]
fn returns_are_predicted_by_the_return_stack() {
    needs::online();
    let f = numbers("returns.txt", 20_000);
    let out = splab(&["sim", "--json", "--memory", "256M", "--", "sort", f.to_str().unwrap()]);
    std::fs::remove_file(&f).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = &report(&out)["program"]["predictor"];
    let (returns, missed) = (p["returns"].as_u64().unwrap(), p["returns_missed"].as_u64().unwrap());
    assert!(returns > 10_000 && missed * 100 < returns, "{p}");
}

#[test]
fn where_splab_is_installed_does_not_move_the_programs_results() {
    // A shell exports `_` as the path of the command it runs: splab's,
    // which the program would inherit and find on its stack. splab
    // passes the program's own path there, as a shell running the
    // program would, so a copy of splab at a path of another length
    // gives the same references and times.
    needs::online();
    let file = numbers("installed", 20_000);
    let copy = temp("a-much-longer-name-for-a-copy-of-splab");
    std::fs::copy(env!("CARGO_BIN_EXE_splab"), &copy).unwrap();
    let run = |exe: &std::path::Path| -> Value {
        let out = Command::new(exe).args(["sim", "--json", "--memory", "256M", "--", "xz", "-3", "-T1", "-c", file.to_str().unwrap()]).env("_", exe).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        report(&out)
    };
    let (a, b) = (run(std::path::Path::new(env!("CARGO_BIN_EXE_splab"))), run(&copy));
    assert_eq!(a["program"]["refs"], b["program"]["refs"]);
    assert_eq!(a["program"]["instructions"], b["program"]["instructions"]);
    assert_eq!(a["hw"], b["hw"]);
    assert_eq!(a["sim_seconds"], b["sim_seconds"]);
    std::fs::remove_file(copy).unwrap();
    std::fs::remove_file(file).unwrap();
}
