//! `splab report` checked in a real browser: the page of a small compare,
//! a lat compare and a validation (a committed fixture, see
//! tests/fixtures/README.md) rendered by headless Chromium. The page must
//! load without a console message (it has no scripts, so any message is an
//! error: a blocked load, a bad element), every plot must have drawn its
//! marks in the DOM, and the screenshot must not be blank. Where Chromium
//! is not installed the test fails saying so; CI installs it (.ci/run). `SPLAB_REPORT_PNG=FILE` keeps a copy of the screenshot.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn splab_json(args: &[&str], to: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_splab")).args(args).output().expect("run splab");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(to, out.stdout).unwrap();
}

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SPLAB_CHROMIUM") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]
        .iter()
        .flat_map(|n| std::env::split_paths(&path).map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

/// Runs Chromium headless on `page` with `args`; its stdout and stderr.
fn run_chromium(exe: &Path, profile: &Path, page: &Path, args: &[&str]) -> (String, String) {
    let dir = profile.to_str().unwrap();
    let mut child = Command::new(exe)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={dir}"))
        .args(["--enable-logging=stderr", "--v=0"])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    // Read both pipes on threads so that a full pipe cannot stall it.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (t_out.join().unwrap(), t_err.join().unwrap())
}

/// The SVG elements of a page, each as its text.
fn svgs(dom: &str) -> Vec<&str> {
    dom.match_indices("<svg").map(|(i, _)| &dom[i..i + dom[i..].find("</svg>").map_or(dom.len() - i, |e| e + 6)]).collect()
}

fn count(s: &str, tag: &str) -> usize {
    s.matches(&format!("<{tag}")).count()
}

#[test]
fn the_report_renders_in_chromium() {
    let dir = std::env::temp_dir().join(format!("splab-report-browser-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cmp, lat) = (dir.join("compare.json"), dir.join("lat.json"));
    splab_json(&["compare", "gups", "--log2-table", "18", "--memory", "256M", "--json"], &cmp);
    splab_json(&["compare", "lat", "--max-size", "4M", "--stride", "64,4096", "--loads", "1000", "--memory", "256M", "--json"], &lat);
    let validate = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/validate-quick.json");
    let html = dir.join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_splab"))
        .arg("report")
        .args([&cmp, &lat, &validate])
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let Some(exe) = chromium() else {
        let _ = std::fs::remove_dir_all(&dir);
        panic!("this test needs Chromium, which is not installed here (apt-get install chromium, or set SPLAB_CHROMIUM to a Chromium executable; .ci/run installs it)");
    };

    // The DOM as the browser built it: every plot, each with its marks.
    let (dom, log) = run_chromium(&exe, &dir.join("profile-dom"), &html, &["--dump-dom"]);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "the page logged to the console:\n{}", console.join("\n"));
    let plots = svgs(&dom);
    assert_eq!(plots.len(), 6, "compare gups: bars and resident memory; lat: curves, bars, resident memory; validate: one");
    for p in &plots {
        assert!(p.contains("splab "), "a plot without its command as title:\n{}", &p[..p.len().min(400)]);
        let marks = ["polyline", "rect", "circle", "polygon", "path", "line"].iter().map(|t| count(p, t)).sum::<usize>();
        assert!(marks >= 10, "a plot with {marks} marks");
    }
    let find = |what: &str| *plots.iter().find(|p| p.contains(what)).unwrap_or_else(|| panic!("no plot with {what:?}"));
    let curves = find("ns per load");
    assert!(curves.contains("splab compare lat") && count(curves, "polyline") >= 4 && count(curves, "circle") >= 40, "four curves with points");
    let bars = find("superpages on, % of off");
    assert!(bars.contains("GUP/s") && count(bars, "rect") >= 10, "five pairs of bars");
    let speedups = find("predicted speedup");
    assert!(count(speedups, "circle") >= 20 && count(speedups, "polygon") >= 1, "20 cells and the band");
    assert!(speedups.contains("splab validate --machine quick.toml --quick"));

    // The picture: not blank, and the bars' blue is there.
    let png = dir.join("report.png");
    let shot = format!("--screenshot={}", png.display());
    let (_, log) = run_chromium(&exe, &dir.join("profile-shot"), &html, &[&shot, "--window-size=1000,5200"]);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "the page logged to the console:\n{}", console.join("\n"));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).expect("chromium wrote the screenshot")));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    assert!(px >= 3 && info.bit_depth == png::BitDepth::Eight, "{:?} {:?}", info.color_type, info.bit_depth);
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let ink = pixels.iter().filter(|p| p[..3].iter().any(|&c| c < 200)).count();
    let blue = pixels.iter().filter(|p| p[0] < 30 && (95..=135).contains(&p[1]) && (160..=200).contains(&p[2])).count();
    assert!(ink * 50 > pixels.len(), "the screenshot is nearly blank: {ink} of {} pixels inked", pixels.len());
    assert!(blue > 500, "the bars' blue is missing ({blue} pixels)");
    eprintln!("report rendered by {}: {} plots; screenshot {}x{}, {:.1}% of its pixels inked", exe.display(), plots.len(), info.width, info.height, 100.0 * ink as f64 / pixels.len() as f64);
    if let Some(keep) = std::env::var_os("SPLAB_REPORT_PNG") {
        std::fs::copy(&png, keep).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
