//! The output formats as a reader meets them: compare's text short enough
//! to read at a glance, `--csv` as a long-format table (one row per metric
//! per run, as pandas reads it), `--plot` as an SVG, `--json` naming the
//! command line that made it, `splab report`'s page, and errors that name
//! the file, line and field of a bad machine profile.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};

fn splab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab")
}

fn ok(args: &[&str]) -> String {
    let out = splab(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("splab-outputs-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

const SMALL_GUPS: &[&str] = &["compare", "gups", "--log2-table", "18", "--memory", "256M"];

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(more).copied().collect()
}

#[test]
fn compare_text_fits_a_screen_and_all_shows_every_sysctl() {
    let text = ok(SMALL_GUPS);
    let lines = text.lines().count();
    assert!(lines <= 30, "{lines} lines:\n{text}");
    for must in ["GUP/s", "simulated seconds", "TLB misses", "page walks", "vm.pmap.pde.promotions", "vm.pmap.pde.demotions", "vm.pmap.pde.p_failures", "vm.pmap.pg_ps_enabled", "--all"] {
        assert!(text.contains(must), "{must} missing:\n{text}");
    }
    // Zero in both runs: left out; the empty partpopq table too.
    assert!(!text.contains("vm.stats.vm.v_swapin") && !text.contains("partpopq"), "{text}");
    let all = ok(&with(SMALL_GUPS, &["--all"]));
    assert!(all.lines().count() > 60 && all.contains("vm.stats.vm.v_swapin") && all.contains("vm.reserv.partpopq"), "{all}");
}

#[test]
fn compare_csv_is_one_row_per_metric_per_run() {
    let text = ok(&with(SMALL_GUPS, &["--csv"]));
    let mut r = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(r.headers().unwrap().iter().collect::<Vec<_>>(), ["run", "metric", "value", "unit"]);
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut values = BTreeMap::new();
    for rec in r.records() {
        let rec = rec.expect("a well-formed row");
        assert_eq!(rec.len(), 4, "{rec:?}");
        let (run, metric) = (rec[0].to_string(), rec[1].to_string());
        assert!(rec[2].is_empty() || rec[2].parse::<f64>().is_ok(), "{rec:?}");
        assert!(seen.entry(run.clone()).or_default().insert(metric.clone()), "({run}, {metric}) twice");
        values.insert((run, metric), rec[2].to_string());
    }
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["off", "on"]);
    assert_eq!(seen["off"], seen["on"], "both runs have the same metrics");
    for m in ["GUP/s", "sim_seconds", "tlb_misses", "page_walks", "vm.pmap.pde.promotions"] {
        assert!(seen["on"].contains(m), "{m}");
    }
    assert_eq!(values[&("off".to_string(), "vm.pmap.pde.promotions".to_string())], "0");
    assert_ne!(values[&("on".to_string(), "vm.pmap.pde.promotions".to_string())], "0");

    // The same table through pandas (.ci/run installs it).
    let dir = scratch("csv");
    let file = dir.join("compare.csv");
    std::fs::write(&file, &text).unwrap();
    let script = "import sys, pandas as pd\n\
d = pd.read_csv(sys.argv[1])\n\
assert list(d.columns) == ['run', 'metric', 'value', 'unit'], d.columns\n\
assert not d.duplicated(['run', 'metric']).any()\n\
w = d.pivot(index='metric', columns='run', values='value')\n\
assert list(w.columns) == ['off', 'on'] and not w.isna().any().any()\n\
assert w.loc['vm.pmap.pde.promotions', 'on'] > 0 == w.loc['vm.pmap.pde.promotions', 'off']\n\
print(len(d))\n";
    match Command::new("python3").args(["-c", script]).arg(&file).output() {
        Ok(o) if o.status.success() => {
            let n: usize = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
            assert_eq!(n, text.lines().count() - 1);
        }
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named 'pandas'") => {
            panic!("this test needs pandas, which is not installed for python3 here (python3 -m pip install pandas, or apt-get install python3-pandas; .ci/run installs it)")
        }
        Ok(o) => panic!("pandas could not read compare's CSV: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("this test needs python3 ({e}; apt-get install python3; .ci/run installs it)"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sim_json_names_its_command_and_plot_writes_an_svg() {
    let dir = scratch("plot");
    let svg = dir.join("lat.svg");
    let svg_s = svg.to_str().unwrap();
    let out = ok(&["sim", "lat", "--max-size", "1M", "--loads", "500", "--memory", "256M", "--json", "--plot", svg_s]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let command = v["command"].as_str().unwrap();
    assert!(command.starts_with("splab sim lat --max-size 1M"), "{command}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("ns per load") && text.contains("array size") && text.contains("splab sim lat"), "{text}");
    // CSV of a sim run: run "on".
    let csv = ok(&["sim", "gups", "--log2-table", "16", "--memory", "128M", "--csv"]);
    assert!(csv.starts_with("run,metric,value,unit\non,GUP/s,"), "{csv}");
    // A plot file that cannot be written is bad input, found before the run.
    let out = splab(&["compare", "gups", "--log2-table", "16", "--plot", "/nonexistent/dir/x.svg"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/dir/x.svg"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn report_writes_one_page_and_names_bad_files() {
    let dir = scratch("report");
    let cmp = dir.join("cmp.json");
    std::fs::write(&cmp, ok(&with(SMALL_GUPS, &["--json"]))).unwrap();
    let html = dir.join("r.html");
    let out = ok(&["report", cmp.to_str().unwrap(), "-o", html.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["documents"][0]["plots"].as_u64().unwrap() >= 1, "{v}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("splab compare gups --log2-table 18"), "{page}");
    // Nothing is loaded from elsewhere (the SVG namespace is a name, not
    // a fetch).
    for fetch in ["<script", "<link", "src=", "href=\"http", "url(", "@import"] {
        assert!(!page.contains(fetch), "{fetch} in a self-contained page");
    }

    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"command\": \"splab check --json\"}").unwrap();
    for (file, says) in [(bad.clone(), "splab check"), (dir.join("missing.json"), "cannot read")] {
        let out = splab(&["report", file.to_str().unwrap(), "-o", html.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(file.to_str().unwrap()) && e.contains(says), "{e}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_profile_that_does_not_parse_names_the_file_line_and_field() {
    let dir = scratch("profile");
    let text = include_str!("../../../profiles/sapphire-rapids.toml").replacen("freq_ghz = 3.0", "freq_ghz = \"fast\"", 1);
    let line = text.lines().position(|l| l.starts_with("freq_ghz")).unwrap() + 1;
    let file = dir.join("host.toml");
    std::fs::write(&file, text).unwrap();
    let out = splab(&["sim", "gups", "--machine", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains(&format!("{}, line {line}, column 12, field `freq_ghz`", file.display())), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}
