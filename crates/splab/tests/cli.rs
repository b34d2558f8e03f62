//! The `splab` binary as a user runs it: JSON shapes, the superpage effect
//! showing up in the counters, and exit status 2 with a message naming the
//! value for every kind of bad input.
//!
//! GUPS runs use a 2^18-word table: 2 MiB, the smallest table that fills a
//! whole 2 MB reservation and so can be promoted (2^16 words is 512 KiB,
//! which never can).

mod needs;

use serde_json::Value;
use std::process::{Command, Output};

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab")
}

/// A `sysctl --json` document's sysctls: all but its `command` and `build`.
fn sysctls(mut v: Value) -> Value {
    let m = v.as_object_mut().unwrap();
    assert!(m.remove("command").is_some() && m.remove("build").is_some(), "{m:?}");
    v
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

/// `--arch riscv` alone runs on the SiFive U74 profile, with FreeBSD's
/// riscv names for the tunable and counters.
#[test]
fn compare_on_riscv_promotes_and_helps_gups() {
    let v = json(&["compare", "gups", "--arch", "riscv", "--log2-table", "18", "--memory", "256M", "--json"]);
    let (off, on) = (&v["off"], &v["on"]);
    assert_eq!((&off["arch"], &off["machine"]), (&Value::from("riscv"), &Value::from("sifive-u74")));
    assert_eq!(off["sysctl"]["vm.pmap.superpages_enabled"], 0);
    assert_eq!(on["sysctl"]["vm.pmap.superpages_enabled"], 1);
    assert_eq!(off["sysctl"]["vm.pmap.l2.promotions"], 0);
    assert!(on["sysctl"]["vm.pmap.l2.promotions"].as_i64().unwrap() > 0, "{}", on["sysctl"]);
    assert!(on["sysctl"].get("vm.pmap.pg_ps_enabled").is_none(), "no amd64 names on riscv");
    let f = |r: &Value| r["figure"]["value"].as_f64().unwrap();
    assert!(f(on) > f(off), "on {} vs off {}", f(on), f(off));
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
    let v = sysctls(json(&["sysctl", "--superpages", "off", "vm.pmap.pg_ps_enabled", "--json"]));
    assert_eq!(v, serde_json::json!({ "vm.pmap.pg_ps_enabled": 0 }));
}

/// `--arch arm64` alone picks the Neoverse N1 profile; both superpage
/// sizes promote and the arm64 names of the tunable and counters appear.
#[test]
fn arm64_runs_on_its_own_profile_and_promotes_both_sizes() {
    let v = json(&["sim", "gups", "--arch", "arm64", "--log2-table", "18", "--check-tlb", "--json"]);
    assert_eq!((v["arch"].as_str(), v["machine"].as_str()), (Some("arm64"), Some("neoverse-n1")));
    let s = &v["sysctl"];
    assert_eq!(s["vm.pmap.superpages_enabled"], 1);
    assert!(s["vm.pmap.l2.promotions"].as_i64().unwrap() > 0, "{s}");
    assert!(s["vm.pmap.l3c.promotions"].as_i64().unwrap() > 0, "{s}");
    assert!(s.get("vm.pmap.pde.promotions").is_none());
    assert_eq!(v["stale_samples"].as_array().map(|a| a.len()), Some(0));
    let out = splab(&["sysctl", "--arch", "arm64", "--superpages", "off"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l == "vm.pmap.superpages_enabled: 0"), "{text}");
}

/// powerpc64 with a hashed page table: the POWER9 profile picks ppc64-hpt,
/// superpages follow --superpages, and a 2^21-word table (16 MiB, one
/// 16 MB reservation) is promoted.
#[test]
fn ppc64_hpt_on_power9_promotes_a_16mb_superpage() {
    let v = sysctls(json(&["sysctl", "--machine", "power9", "--superpages", "off", "vm.pmap.superpages_enabled", "vm.pmap.sp.promotions", "--json"]));
    assert_eq!(v, serde_json::json!({ "vm.pmap.superpages_enabled": 0, "vm.pmap.sp.promotions": 0 }));
    let v = json(&["sim", "gups", "--arch", "ppc64-hpt", "--machine", "power9", "--log2-table", "21", "--memory", "256M", "--json"]);
    assert_eq!((v["arch"].as_str(), v["machine"].as_str()), (Some("ppc64-hpt"), Some("power9")));
    assert_eq!(v["sysctl"]["vm.pmap.sp.promotions"], 1);
    assert_eq!(v["sysctl"]["vm.pmap.sp.p_failures"], 0);
}

/// alpha: the 21264 profile is alpha's own; a 2^19-word table (4 MiB,
/// one reservation) is promoted at all three granularity hints.
#[test]
fn alpha_promotes_at_three_sizes() {
    let v = sysctls(json(&["sysctl", "--arch", "alpha", "vm.pmap.superpages_enabled", "vm.pmap.gh.64k.enabled", "vm.pmap.gh.512k.enabled", "--json"]));
    assert_eq!(v, serde_json::json!({ "vm.pmap.superpages_enabled": 1, "vm.pmap.gh.64k.enabled": 1, "vm.pmap.gh.512k.enabled": 1 }));
    let v = json(&["sim", "gups", "--arch", "alpha", "--log2-table", "19", "--memory", "256M", "--json"]);
    assert_eq!((v["arch"].as_str(), v["machine"].as_str()), (Some("alpha"), Some("alpha-21264")));
    let n = |g: &str| v["sysctl"][format!("vm.pmap.gh.{g}.promotions")].as_u64();
    assert_eq!((n("64k"), n("512k"), n("4m")), (Some(64), Some(8), Some(1)));
}

/// `-V` and every report name the build; every JSON document starts with
/// the command that made it; `sysctl` lists the real system's names before
/// splab's own; a bare command's hint names that command.
#[test]
fn reports_name_their_build_and_command() {
    let out = splab(&["-V"]);
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(v.starts_with("splab 0.1.0 (build ") && v.trim_end().ends_with(')'), "{v}");
    let build = v.trim_end().trim_end_matches(')').rsplit(' ').next().unwrap().to_string();
    assert!(build == "unknown" || build.len() >= 7, "{build}");
    let out = splab(&["sysctl", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&format!("{{\n  \"command\": \"splab sysctl --json\",\n  \"build\": \"{build}\",\n  \"vm.")), "{}", &text[..200]);
    let out = splab(&["sysctl"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text.lines().filter_map(|l| l.split(':').next()).collect();
    let first_own = names.iter().position(|n| n.starts_with("splab.")).unwrap();
    assert!(first_own > 0 && names[first_own..].iter().all(|n| n.starts_with("splab.")), "splab's own names after the real system's: {names:?}");
    let out = splab(&["compare", "gups", "--log2-table", "16", "--memory", "64M"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().ends_with(&format!("; splab build {build}")), "{text}");
    for cmd in ["compare", "sim"] {
        let out = splab(&[cmd]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("(e.g. splab {cmd} -- xz")), "{err}");
    }
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
        (&["sim", "gups", "--machine", "sapphire-rapids", "--arch", "arm64"], "arm64"),
        (&["sim", "gups", "--machine", "power9", "--arch", "amd64"], "amd64"),
        (&["sim", "gups", "--machine", "sapphire-rapids", "--arch", "ppc64-hpt"], "ppc64-hpt"),
        (&["sim", "gups", "--machine", "nosuch"], "nosuch"),
        (&["sim", "gups", "--fragment", "2"], "2"),
        (&["sim", "gups", "--age", "1.5"], "1.5"),
        (&["sim", "gups", "--log2-table", "99"], "99"),
        (&["sim", "nosuchload"], "nosuchload"),
        (&["compare", "gups", "--memory", "12Q", "--json"], "12Q"),
        (&["sysctl", "--memory", "8X"], "8X"),
        (&["check", "--arch", "vax"], "vax"),
        (&["sim", "gups", "--arch", "riscv", "--machine", "sapphire-rapids"], "sapphire-rapids"),
        (&["sim", "gups", "--arch", "amd64", "--machine", "sifive-u74"], "sifive-u74"),
        (&["bench", "--footprint", "30G"], "30G"),
        (&["bench", "--baseline", "/no/such/splab", "--no-program"], "/no/such/splab"),
        (&["sim", "gups", "--policy", "solaris"], "solaris"),
        (&["sim", "gups", "--policy", "linux-thp:sometimes"], "sometimes"),
        (&["sim", "gups", "--policy", "freebsd:always"], "freebsd:always"),
        (&["sim", "gups", "--policy", "linux-thp", "--arch", "alpha"], "alpha"),
        (&["sim", "gups", "--policy", "linux-thp", "--arch", "ppc64-hpt"], "ppc64-hpt"),
        (&["compare", "gups", "--policies", "freebsd,bogus"], "bogus"),
        (&["compare", "gups", "--policies", "freebsd,freebsd"], "freebsd"),
        (&["check", "--policy", "linux-thp:often", "--ops", "10"], "often"),
        (&["check", "--policy", "shimizu", "--arch", "riscv", "--sysctl", "transparent_hugepage.enabled=always"], "transparent_hugepage.enabled"),
        (&["sim", "gups", "--policy", "linux-thp", "--sysctl", "transparent_hugepage.enabled=sometimes"], "sometimes"),
        (&["sim", "gups", "--policy", "linux-thp", "--sysctl", "transparent_hugepage.khugepaged.max_ptes_none=512"], "512"),
        (&["sim", "gups", "--policy", "linux-thp", "--sysctl", "transparent_hugepage.hugepages-48kB.enabled=always"], "48kB"),
        (&["sim", "gups", "--policy", "freebsd", "--sysctl", "transparent_hugepage.enabled=always"], "transparent_hugepage.enabled"),
        (&["sim", "gups", "--policy", "shimizu", "--sysctl", "vm.superpages.max_order=40"], "40"),
        (&["sysctl", "--policy", "nope"], "nope"),
        (&["sim", "--user", "no-such-user", "--", "true"], "no-such-user"),
        // A parameter the run would not read is named, not ignored.
        (&["sim", "gups", "--max-size", "1M"], "--max-size does not apply to gups"),
        (&["compare", "lat", "--log2-table", "12"], "--log2-table does not apply to lat"),
        (&["compare", "stream", "--policies", "freebsd,shimizu", "--sizes", "100"], "--sizes"),
        (&["sim", "trace:/no/such/trace", "--n", "5"], "--n does not apply to a trace replay"),
        (&["sim", "--loads", "5", "--", "true"], "--loads does not apply to a program run"),
        (&["native", "gups", "--updates", "5"], "--updates does not apply to gups natively"),
        (&["native", "--loads", "5", "--", "true"], "--loads does not apply to a program run"),
        (&["sim", "gups", "--user", "nobody"], "--user nobody"),
        (&["sim", "gups", "--output", "pipe"], "--output: only a program"),
        (&["check", "--ops", "0"], "--ops 0"),
        (&["compare", "gups", "--valgrind", "/no/valgrind"], "--valgrind /no/valgrind"),
    ];
    assert_rejected(cases);
}

/// A program run as a user who cannot write in TMPDIR is refused before
/// it starts, naming the user and the directory (the front end would
/// fail to start, saying less).
#[test]
fn a_user_who_cannot_write_in_tmpdir_is_refused() {
    needs::root("runs a program as another user");
    let tmp = std::env::temp_dir().join(format!("splab-test-private-tmp-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::set_permissions(&tmp, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o700)).unwrap();
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_splab")).args(args).env("TMPDIR", &tmp).output().expect("run splab");
    let out = run(&["sim", "--user", "nobody", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--user \"nobody\"") && err.contains(&tmp.display().to_string()) && err.contains("TMPDIR"), "{err}");
    // reproduce's PostgreSQL backend runs as nobody: refused before its
    // database is made, and still bad input from a child of --jobs.
    needs::postgres();
    let out = run(&["reproduce", "--quick", "--jobs", "2", "armada-lat", "power8-pgbench"]);
    let _ = std::fs::remove_dir_all(&tmp);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("power8-pgbench: --user \"nobody\"") && err.contains("TMPDIR"), "{err}");
}

/// Each command must exit 2 with one line on stderr naming the value.
fn assert_rejected(cases: &[(&[&str], &str)]) {
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

/// armv7 on its own profile (picked by --arch): sections promote, and with
/// the 64 KB level on, large pages too; the off run has neither.
#[test]
fn armv7_compare_promotes_at_both_sizes() {
    let v = json(&["compare", "gups", "--arch", "armv7", "--log2-table", "18", "--sysctl", "vm.pmap.lp_enabled=1", "--json"]);
    let (off, on) = (&v["off"], &v["on"]);
    assert_eq!((on["machine"].as_str(), on["arch"].as_str()), (Some("armada-xp"), Some("armv7")));
    assert_eq!(on["memory_bytes"], 4u64 << 30, "the default memory is what armv7 addresses");
    let n = |r: &Value, k: &str| r["sysctl"][k].as_i64().unwrap_or_else(|| panic!("no {k}"));
    assert!(n(on, "vm.pmap.section.promotions") > 0 && n(on, "vm.pmap.largepage.promotions") > 0, "{}", on["sysctl"]);
    assert_eq!((n(off, "vm.pmap.section.promotions"), n(off, "vm.pmap.largepage.promotions")), (0, 0));
    assert_eq!((n(off, "vm.pmap.lp_enabled"), n(on, "vm.pmap.lp_enabled")), (0, 1));
    let f = |r: &Value| r["figure"]["value"].as_f64().unwrap();
    assert!(f(on) > f(off), "on {} vs off {}", f(on), f(off));
}

#[test]
fn armv7_bad_input_exits_2_and_names_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["sim", "gups", "--arch", "armv7", "--memory", "8G"], "8G"),
        (&["sim", "gups", "--arch", "armv7", "--log2-table", "29"], "29"),
        (&["sim", "gups", "--arch", "armv7", "--machine", "sapphire-rapids"], "sapphire-rapids"),
        (&["sim", "gups", "--arch", "armv7", "--sysctl", "vm.pmap.nosuch=1"], "vm.pmap.nosuch"),
        (&["sim", "gups", "--sysctl", "vm.pmap.lp_enabled"], "vm.pmap.lp_enabled"),
        (&["check", "--arch", "armv7", "--sysctl", "vm.pmap.lp_enabled=2"], "lp_enabled"),
    ];
    for (args, named) in cases {
        let out = splab(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: message does not name {named:?}: {err}");
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
    let v = json(&["bench", "--log2-table", "18", "--footprint", "64M", "--memory", "128M", "--trace-refs", "100000", "--repeat", "2", "--no-program", "--json"]);
    for part in ["gups_off", "gups_on"] {
        assert!(v[part]["refs"].as_u64().unwrap() > 0, "{v}");
        assert!(v[part]["refs_per_second"].as_f64().unwrap() > 0.0, "{v}");
    }
    // Which thread bounded each run: batches went to the timing thread,
    // and both threads' time is accounted.
    for part in ["gups_off", "gups_on", "trace"] {
        let t = &v[part]["host_threads"];
        let batches = t["batches"].as_u64().unwrap();
        assert!(batches > 0, "{part}: {v}");
        assert!(t["translate_seconds"].as_f64().unwrap() > 0.0 && t["timing_seconds"].as_f64().unwrap() > 0.0, "{part}: {v}");
    }
    // Two runs of each part, and the one reported is one of them.
    for part in ["gups_off", "gups_on", "trace", "footprint"] {
        let runs = v["runs"][part].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{part}: {v}");
        assert!(runs.contains(&v[part]), "{part}: {v}");
    }
    assert_eq!(v["footprint"]["bytes"], 64u64 << 20);
    assert!(v["footprint"]["model_host_bytes"].as_u64().unwrap() > 0);
    if cfg!(target_os = "linux") {
        assert!(v["footprint"]["peak_rss_bytes"].as_u64().unwrap() > 0);
    }
}

/// `--baseline` runs another binary's parts interleaved with these (here
/// the same binary) and sets the medians side by side.
#[test]
fn bench_against_a_baseline_binary() {
    let me = env!("CARGO_BIN_EXE_splab");
    let v = json(&["bench", "--log2-table", "14", "--footprint", "32M", "--memory", "128M", "--trace-refs", "50000", "--repeat", "1", "--no-program", "--baseline", me, "--json"]);
    let parts = v["baseline"]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 4, "{v}");
    for p in parts {
        assert!(p["baseline_refs_per_second"].as_f64().unwrap() > 0.0, "{v}");
        assert!(p["median_ratio"].as_f64().unwrap() > 0.0, "{v}");
    }
    assert_eq!(v["baseline"]["runs"]["trace"].as_array().unwrap().len(), 1);
}

/// A bench killed by a plain `kill` takes its running part with it, and
/// the next bench removes the temporary files that parts no longer
/// running left.
#[test]
fn bench_parts_end_with_the_bench_and_their_files_are_swept() {
    let tmp = std::env::temp_dir().join(format!("splab-bench-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    // A file as a killed trace part leaves it (pid 4294967 runs nowhere),
    // and one of a live process (this test's), which stays.
    let dead = tmp.join("splab-bench-4294967-triad.trace");
    let live = tmp.join(format!("splab-bench-{}-words.txt", std::process::id()));
    std::fs::write(&dead, b"x").unwrap();
    std::fs::write(&live, b"x").unwrap();
    let mut bench = Command::new(env!("CARGO_BIN_EXE_splab"))
        .args(["bench", "--log2-table", "26", "--memory", "1G", "--footprint", "32M", "--repeat", "1", "--no-program", "--json"])
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let children = format!("/proc/{0}/task/{0}/children", bench.id());
    let t0 = std::time::Instant::now();
    let part: u32 = loop {
        let c = std::fs::read_to_string(&children).unwrap_or_default();
        if let Some(p) = c.split_whitespace().next() {
            break p.parse().unwrap();
        }
        if let Some(st) = bench.try_wait().unwrap() {
            panic!("the bench ended ({st}) before a part was seen");
        }
        assert!(t0.elapsed().as_secs() < 60, "no bench part started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(bench.id() as i32, libc::SIGTERM) };
    bench.wait().unwrap();
    let gone = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z"));
    let t1 = std::time::Instant::now();
    while !gone(part) && t1.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(gone(part), "bench part {part} outlived its bench");
    let v = Command::new(env!("CARGO_BIN_EXE_splab"))
        .args(["bench", "--log2-table", "14", "--footprint", "32M", "--memory", "128M", "--trace-refs", "50000", "--repeat", "1", "--no-program", "--json"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    assert!(!dead.exists(), "the dead part's file was not swept");
    assert!(live.exists(), "a live process's file was removed");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).filter(|n| *n != live.file_name().unwrap()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

// The benchmark workloads (gups-mp, lat, bw, transpose, stream, index,
// build, stress, forkbomb, realloc) at small sizes.

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
        (&["forkbomb", "--procs", "7", "--touch", "16K", "--inherited", "64K"], "64M", "completion time (s)", "forks 6, exits 7"),
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
    assert!(row.contains('%') && row.trim_end().ends_with("better"), "{row}");
}

#[test]
fn bad_workload_options_exit_2_and_name_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["sim", "lat", "--pattern", "zigzag"], "zigzag"),
        (&["sim", "lat", "--max-size", "1K"], "1K"),
        (&["sim", "lat", "--stride", "12"], "12"),
        (&["sim", "bw", "--tests", "rd,nosuch"], "nosuch"),
        (&["sim", "bw", "--size", "12Q"], "12Q"),
        (&["sim", "transpose", "--sizes", "3000,1"], "1"),
        (&["sim", "stream", "--ntimes", "1"], "1"),
        (&["sim", "index", "--scale", "0"], "0"),
        (&["sim", "index", "--scale", "9000"], "9000"),
        (&["sim", "build", "--jobs", "0"], "0"),
        (&["sim", "stress", "--vm-bytes", "100G"], "100G"),
        (&["sim", "forkbomb", "--procs", "0"], "--procs 0"),
        (&["sim", "forkbomb", "--fanout", "65"], "--fanout 65"),
        (&["sim", "forkbomb", "--touch", "5K"], "5K"),
        (&["sim", "forkbomb", "--inherited", "lots"], "lots"),
        (&["sim", "forkbomb", "--procs", "65536", "--touch", "1M", "--memory", "64M"], "--procs 65536"),
        (&["sim", "realloc", "--start-size", "3K"], "3K"),
        (&["sim", "gups-mp", "--procs", "999"], "999"),
    ];
    assert_rejected(cases);
}

/// Memory and swap too small for the footprint: processes are killed, the
/// check says which and why, stays clean and exits 0.
#[test]
fn check_out_of_memory_and_swap_reports_the_killed_processes() {
    let args = ["check", "--ops", "3000", "--memory", "16M", "--swap", "8M"];
    let out = splab(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("check: clean"), "{text}");
    assert!(text.contains("killed: out of swap space"), "{text}");
    let mut j = args.to_vec();
    j.push("--json");
    let v = json(&j);
    let kills = v["oom_kills"].as_array().expect("oom_kills is a list");
    assert!(!kills.is_empty());
    assert!(kills[0]["pid"].is_u64() && kills[0]["size_pages"].as_u64().unwrap() > 0, "{}", kills[0]);
    assert!(v["sysctl"]["vm.stats.vm.v_swappgsout"].as_i64().unwrap() > 0);
}

#[test]
fn bad_swap_sizes_are_input_errors() {
    for args in [&["check", "--swap", "lots"][..], &["sim", "gups", "--swap", "1T"][..], &["check", "--footprint", "10K"][..]] {
        let out = splab(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--swap") || err.contains("--footprint"), "{args:?}: {err}");
    }
}

#[test]
fn calibrate_writes_a_profile_the_simulator_runs_on() {
    let dir = std::env::temp_dir().join(format!("splab-calib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("host.toml");
    let f = file.to_str().unwrap();
    let v = json(&["calibrate", "--tiny", "--json", "-o", f]);
    assert_eq!(v["written_to"], f);
    assert!(v["measurements"]["latency"].as_array().is_some_and(|a| !a.is_empty()));
    assert_eq!(v["profile"].as_str().unwrap(), std::fs::read_to_string(&file).unwrap());
    // The stream prefetcher's line time is always measured (a copy).
    let line = &v["measurements"]["costs"]["stream_line_ns"]["median"];
    assert!(line.as_f64().is_some_and(|x| x > 0.0), "{line}");
    assert!(v["profile"].as_str().unwrap().contains("\n[prefetch]\n"));
    let run = json(&["sim", "gups", "--log2-table", "18", "--machine", f, "--json"]);
    assert!(promotions(&run) > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn calibrate_bad_input_exits_2_and_names_the_value() {
    for (args, needle) in [
        (vec!["calibrate", "--tiny", "-o", "/no/such/dir/x.toml"], "/no/such/dir/x.toml"),
        (vec!["calibrate", "--tiny", "--hugetlb-pool", "lots"], "lots"),
        (vec!["calibrate", "--tiny", "--name", "a\"b"], "--name"),
    ] {
        let out = splab(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `calibrate --upgrade` writes a profile the simulator runs on from one
/// an older calibrate wrote; its bad input exits 2 naming the value.
#[test]
fn calibrate_upgrade_makes_an_older_profile_run() {
    let old = concat!(env!("CARGO_MANIFEST_DIR"), "/../calibrate/tests/fixtures/older/emerald-rapids.toml");
    let report = concat!(env!("CARGO_MANIFEST_DIR"), "/../calibrate/tests/fixtures/older/emerald-rapids.txt");
    let out = splab(&["sim", "gups", "--log2-table", "16", "--machine", old]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--upgrade"), "{}", String::from_utf8_lossy(&out.stderr));
    let file = std::env::temp_dir().join(format!("splab-upgrade-{}.toml", std::process::id()));
    let f = file.to_str().unwrap();
    let v = json(&["calibrate", "--upgrade", old, "--report", report, "-o", f, "--json"]);
    assert_eq!(v["written_to"], f);
    assert!(v["changes"].as_array().is_some_and(|c| c.len() >= 5), "{v}");
    assert_eq!(v["profile"].as_str().unwrap(), std::fs::read_to_string(&file).unwrap());
    let run = json(&["sim", "gups", "--log2-table", "18", "--machine", f, "--json"]);
    assert!(promotions(&run) > 0);
    std::fs::remove_file(&file).unwrap();
    for (args, needle) in [
        (vec!["calibrate", "--upgrade", "/no/such.toml"], "/no/such.toml"),
        (vec!["calibrate", "--upgrade", old, "--base", "nosuch"], "nosuch"),
        (vec!["calibrate", "--report", report], "--upgrade"),
    ] {
        let out = splab(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A compare in which superpages changed nothing says why in one line:
/// ppc64-hpt's 8 MiB table never fills a 16 MB reservation.
#[test]
fn a_compare_that_superpages_did_not_change_says_why() {
    let out = splab(&["compare", "gups", "--arch", "ppc64-hpt", "--log2-table", "20"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\n(superpages changed nothing: none was made; the workload's 8 MiB of memory never fills one 16 MiB reservation)\n"), "{text}");
    let out = splab(&["compare", "gups", "--log2-table", "18", "--memory", "256M"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("changed nothing"));
}
