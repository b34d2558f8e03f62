//! `splab report FILE.json... -o report.html`: one self-contained HTML
//! page from the `--json` documents of any of sim, compare, native,
//! validate, bench and reproduce. Each document gets a section titled
//! with the command line that made it, a table of its main figures and
//! its plots as inline SVG (`plot::all`). The page loads nothing: no scripts, no
//! fonts, no images from elsewhere, and its Content-Security-Policy
//! forbids them, so it reads the same offline, attached to a mail or
//! checked into a repository.

use crate::doc::{Bench, Compare, Doc, Native, Reproduce, Sim, Validate};
use crate::error::Fail;
use crate::output::{change, emit, json, num};
use clap::Args;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct ReportArgs {
    /// JSON documents, as `splab sim|compare|native|validate|bench|reproduce
    /// --json` print them.
    #[arg(value_name = "FILE.json", required_unless_present = "sweep")]
    pub files: Vec<PathBuf>,
    /// A sweep of the run store to draw: its figure against each of its
    /// axes, a line per policy (or architecture), one plot per workload.
    #[arg(long, value_name = "NAME")]
    pub sweep: Option<String>,
    /// The run store the sweep is in.
    #[arg(long, value_name = "PATH", default_value = crate::store::DEFAULT)]
    pub store: PathBuf,
    /// The HTML page to write.
    #[arg(short = 'o', long = "output", value_name = "FILE.html", default_value = "report.html")]
    pub output: PathBuf,
    /// Print one JSON document (what was written, each source's command
    /// and plots) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `--json` prints.
#[derive(Serialize)]
struct Written {
    output: String,
    documents: Vec<Source>,
}

#[derive(Serialize)]
struct Source {
    file: String,
    command: String,
    plots: usize,
    /// Plots that could not be drawn, and why.
    notes: Vec<String>,
}

impl Source {
    /// Writes a plot into the page as a figure, or the reason there is
    /// none as a note.
    fn figure(&mut self, o: &mut String, plot: Result<crate::plot::Plot, String>) {
        match plot {
            Ok(p) => {
                self.plots += 1;
                let _ = writeln!(o, "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>", p.svg, esc(&p.title));
            }
            Err(e) => {
                let _ = writeln!(o, "<p class=\"note\">no plot: {}</p>", esc(&e));
                self.notes.push(e);
            }
        }
    }
}

/// Text for HTML, with its special characters escaped.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn table(o: &mut String, head: &[&str], rows: &[Vec<String>]) {
    o.push_str("<table>\n<tr>");
    for h in head {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr>\n");
    for r in rows {
        o.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let _ = write!(o, "<td{}>{}</td>", if i == 0 { " class=\"name\"" } else { "" }, esc(c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n");
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{:+.1}%", 100.0 * v))
}

fn times(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.3}x"))
}

fn superpage_events(s: &Sim) -> impl Iterator<Item = (&String, i64)> {
    s.sysctl
        .iter()
        .filter(|(k, _)| k.starts_with("vm.pmap.") && [".promotions", ".demotions", ".p_failures", ".mappings"].iter().any(|e| k.ends_with(e)))
        .filter_map(|(k, v)| v.as_i64().map(|v| (k, v)))
}

fn sim_table(o: &mut String, s: &Sim) {
    let f = &s.figure;
    let mut rows = vec![
        vec![f.name.clone(), f.value.map(num).unwrap_or_default()],
        vec!["simulated seconds (timed)".into(), num(s.sim_seconds)],
        vec!["TLB misses".into(), s.tlb.total_misses.to_string()],
        vec!["page walks".into(), s.hw.walks.to_string()],
    ];
    rows.extend(superpage_events(s).filter(|(_, v)| *v != 0).map(|(k, v)| vec![k.clone(), v.to_string()]));
    let _ = writeln!(o, "<p>{} on {} ({}), superpages {}</p>", esc(&s.workload_detail), esc(&s.machine), esc(&s.arch), if s.superpages { "on" } else { "off" });
    table(o, &["", "value"], &rows);
}

fn compare_table(o: &mut String, c: &Compare) {
    let (a, b) = (&c.off, &c.on);
    let r = |name: &str, x: f64, y: f64| vec![name.to_string(), num(x), num(y), change(x, y)];
    let mut rows = vec![
        r(&a.figure.name, a.figure.value.unwrap_or(f64::NAN), b.figure.value.unwrap_or(f64::NAN)),
        r("simulated seconds (timed)", a.sim_seconds, b.sim_seconds),
        r("TLB misses", a.tlb.total_misses as f64, b.tlb.total_misses as f64),
        r("page walks", a.hw.walks as f64, b.hw.walks as f64),
        r("walk memory refs", a.hw.walk_mem_refs as f64, b.hw.walk_mem_refs as f64),
    ];
    for (k, v) in superpage_events(b) {
        let off = a.sysctl.get(k).and_then(|x| x.as_i64()).unwrap_or(0);
        if off != 0 || v != 0 {
            rows.push(r(k, off as f64, v as f64));
        }
    }
    let _ = writeln!(o, "<p>{} on {} ({})</p>", esc(&a.workload_detail), esc(&a.machine), esc(&a.arch));
    table(o, &["", "superpages off", "superpages on", "change"], &rows);
}

fn native_table(o: &mut String, n: &Native) {
    let mut rows = Vec::new();
    for l in &n.layouts {
        let Some(f) = l.figures.first() else {
            rows.push(vec![l.pages.clone(), "skipped".into(), String::new(), String::new()]);
            continue;
        };
        let s = &f.spread;
        rows.push(vec![
            l.pages.clone(),
            l.seconds.as_ref().map(|s| num(s.median)).unwrap_or_default(),
            format!("{} [{} .. {}] {}", num(s.median), num(s.min), num(s.max), f.unit),
            f.speedup_vs_4k.map(|x| format!("{x:.2}x")).unwrap_or_default(),
        ]);
    }
    let _ = writeln!(o, "<p>{} natively, {} runs per layout, interleaved</p>", esc(&n.detail), n.repeat);
    table(o, &["layout", "timed seconds (median)", "figure: median [min .. max]", "vs 4k"], &rows);
}

fn validate_table(o: &mut String, v: &Validate) {
    let s = &v.summary;
    let abs = |x: Option<f64>| pct(x).trim_start_matches('+').to_string();
    let _ = writeln!(
        o,
        "<p>Native runs (median of {}) against the model on profile <code>{}</code>{}. Speedup over 4k, {} cells: mean absolute error {}, largest {}; within the range measured in {}. Time, {} cells: mean absolute error {}, largest {}.</p>",
        v.repeat,
        esc(&v.machine),
        if v.quick { " (--quick sizes)" } else { "" },
        s.speedup_cells,
        abs(s.speedup_mean_abs_error),
        abs(s.speedup_max_abs_error),
        s.speedup_cells_within_rounds,
        s.time_cells,
        abs(s.time_mean_abs_error),
        abs(s.time_max_abs_error)
    );
    let rows: Vec<Vec<String>> = v
        .rows
        .iter()
        .map(|r| {
            vec![
                format!("{} {}", r.workload, r.layout),
                r.measured.as_ref().map(|m| num(m.median)).unwrap_or_else(|| "skipped".into()),
                num(r.predicted_seconds),
                pct(r.time_error),
                times(r.measured_speedup),
                times(r.predicted_speedup),
                if r.layout == "4k" { String::new() } else { pct(r.speedup_error) },
            ]
        })
        .collect();
    table(o, &["cell", "measured s", "predicted s", "time err", "measured x", "predicted x", "x err"], &rows);
}

fn bench_table(o: &mut String, b: &Bench) {
    let rows: Vec<Vec<String>> = b
        .parts()
        .iter()
        .map(|(name, m, all)| {
            let r: Vec<f64> = all.iter().map(|p| p.rate()).collect();
            let (lo, hi) = r.iter().fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
            vec![
                name.to_string(),
                num(m.rate().round()),
                if r.is_empty() { String::new() } else { format!("{} .. {}", num(lo.round()), num(hi.round())) },
                m.peak_rss_bytes.map(|b| format!("{:.1}", b as f64 / (1u64 << 20) as f64)).unwrap_or_default(),
            ]
        })
        .collect();
    let _ = writeln!(o, "<p>median run of {} of each part</p>", b.repeat);
    table(o, &["part", "refs/s", "refs/s, all runs", "peak RSS MiB"], &rows);
}

const STYLE: &str = "body{font-family:sans-serif;max-width:800px;margin:2em auto;padding:0 1em;color:#222;line-height:1.4}\
h1{font-size:1.6em}h2{font-size:1.15em;margin-top:2.5em;border-top:1px solid #ccc;padding-top:1em}\
code{font-size:0.92em;background:#f3f3f3;padding:1px 3px}\
table{border-collapse:collapse;font-size:13px;margin:0.8em 0}th,td{padding:2px 10px;text-align:right;border-bottom:1px solid #e4e4e4}\
td.name{text-align:left}th{background:#f3f3f3}figure{margin:1.2em 0}figure svg{max-width:100%;height:auto}\
figcaption{font-size:12px;color:#555}p.note{color:#a33}";

/// A reproduction's summary and every published figure beside the
/// model's; the headline figures numbered as the plot numbers them.
fn reproduce_table(o: &mut String, r: &Reproduce) {
    if r.quick {
        o.push_str("<p class=\"note\">--quick: each experiment at a tiny size; the predictions are not comparable to the published figures</p>\n");
    }
    if let Some(s) = &r.summary {
        let _ = writeln!(o, "<p>{} of {} headline changes agree (within half the published change, the same sign); {} of {} in all</p>", s.headline_agree, s.headline_of, s.agree, s.of);
    }
    let headline = r.headline();
    let opt = |x: Option<f64>| x.map(num).unwrap_or_else(|| "-".into());
    let chg = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{v:+.1}%"));
    let rows: Vec<Vec<String>> = r
        .published
        .iter()
        .map(|p| {
            let n = headline.iter().position(|h| std::ptr::eq(*h, p)).map(|i| (i + 1).to_string()).unwrap_or_default();
            let published_change = match (p.published_change_percent, p.published_fell) {
                (Some(c), _) => format!("{c:+.1}%"),
                (None, Some(true)) => "fell".into(),
                (None, Some(false)) => "rose".into(),
                _ => "-".into(),
            };
            let agrees = match p.agrees {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            };
            let figure = if p.unit.is_empty() { p.figure.clone() } else { format!("{} [{}]", p.figure, p.unit) };
            let pair = |off: Option<f64>, on: Option<f64>| if off.is_none() && on.is_none() { "-".to_string() } else { format!("{} → {}", opt(off), opt(on)) };
            vec![format!("{n} {}", p.experiment).trim().to_string(), figure, p.seed.clone(), pair(p.published_off, p.published_on), published_change, pair(p.predicted_off, p.predicted_on), chg(p.predicted_change_percent), chg(p.error_change_percent), agrees.into()]
        })
        .collect();
    table(o, &["# experiment", "figure", "seed", "published, off → on", "change", "predicted, off → on", "change", "error of change", "agrees"], &rows);
}

/// The median of `v` (None for none).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (n > 0).then(|| if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// A sweep's section: a table of its runs and, per workload, its figure
/// against each axis, one line per policy (or architecture) where that is
/// an axis too, each value the median over the sweep's other axes.
fn sweep_section(o: &mut String, store: &std::path::Path, name: &str, index: usize) -> Result<Source, Fail> {
    let s = crate::store::Store::open(store)?;
    let axes = s.sweep_axes(name)?;
    let t = s.query(Some(name), Some("status = 'ok'"), None, false)?;
    let col = |c: &str| t.columns.iter().position(|x| x == c);
    let text = |row: &[rusqlite::types::Value], c: &str| col(c).map(|i| crate::store::text(&row[i])).unwrap_or_default();
    let figure = col("figure").ok_or_else(|| Fail::Run("run store: no figure column".into()))?;
    let title = format!("splab sweep {name} (store {})", store.display());
    let _ = writeln!(o, "<section id=\"doc{index}\">\n<h2><code>{}</code></h2>\n<p>{} runs over {} axes ({}); each plot's values are medians over the axes not drawn.</p>", esc(&title), t.rows.len(), axes.len(), esc(&axes.join(", ")));
    let mut src = Source { file: store.display().to_string(), command: title.clone(), plots: 0, notes: Vec::new() };
    let mut workloads: Vec<String> = Vec::new();
    for r in &t.rows {
        let w = text(r, "workload");
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    let series_axis = ["policy", "arch"].into_iter().find(|s| axes.iter().any(|a| a == s));
    let mut rows = Vec::new();
    for w in &workloads {
        let runs: Vec<&Vec<rusqlite::types::Value>> = t.rows.iter().filter(|r| text(r, "workload") == *w).collect();
        let Some(first) = runs.first() else { continue };
        let y_desc = crate::output::labelled(&text(first, "figure_name"), &text(first, "figure_unit"));
        for a in axes.iter().filter(|a| a.as_str() != "workload") {
            let key = format!("axis.{a}");
            let mut cats: Vec<String> = Vec::new();
            for r in &runs {
                let c = text(r, &key);
                if !cats.contains(&c) {
                    cats.push(c);
                }
            }
            let skey = series_axis.filter(|s| s != a).map(|s| format!("axis.{s}"));
            let mut labels: Vec<String> = Vec::new();
            for r in &runs {
                let l = skey.as_deref().map(|k| text(r, k)).unwrap_or_default();
                if !labels.contains(&l) {
                    labels.push(l);
                }
            }
            let series: Vec<crate::plot::Series> = labels
                .iter()
                .map(|l| crate::plot::Series {
                    label: l.clone(),
                    values: cats
                        .iter()
                        .map(|c| {
                            let v = runs.iter().filter(|r| text(r, &key) == *c && skey.as_deref().map(|k| text(r, k)).unwrap_or_default() == *l).filter_map(|r| crate::store::json(&r[figure]).as_f64()).collect();
                            median(v)
                        })
                        .collect(),
                })
                .collect();
            for (l, s) in labels.iter().zip(&series) {
                for (c, v) in cats.iter().zip(&s.values) {
                    rows.push(vec![w.clone(), a.clone(), c.clone(), l.clone(), v.map(num).unwrap_or_else(|| "-".into()), y_desc.clone()]);
                }
            }
            let by = skey.as_ref().map(|_| format!(", a line per {}", series_axis.unwrap_or(""))).unwrap_or_default();
            let ptitle = format!("sweep {name}: {w}, {y_desc} against {a}{by}");
            src.figure(o, crate::plot::axis_lines(&ptitle, a, &y_desc, &cats, &series));
        }
    }
    table(o, &["workload", "axis", "value", series_axis.unwrap_or(""), "median figure", "unit"], &rows);
    o.push_str("</section>\n");
    Ok(src)
}

/// The page of `docs` (each with the file it came from).
fn page(docs: &[(String, Doc)]) -> (String, Vec<Source>) {
    let mut o = String::new();
    let mut sources = Vec::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>splab report</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>splab report</h1>\n"
    );
    let _ = writeln!(o, "<p>{} document{}, each titled with the command line that made it:</p>\n<ul>", docs.len(), if docs.len() == 1 { "" } else { "s" });
    for (i, (file, d)) in docs.iter().enumerate() {
        let _ = writeln!(o, "<li><a href=\"#doc{i}\"><code>{}</code></a> ({})</li>", esc(&d.command()), esc(file));
    }
    o.push_str("</ul>\n");
    for (i, (file, d)) in docs.iter().enumerate() {
        let command = d.command();
        let _ = writeln!(o, "<section id=\"doc{i}\">\n<h2><code>{}</code></h2>\n<p>from {}</p>", esc(&command), esc(file));
        match d {
            Doc::Sim(s) => sim_table(&mut o, s),
            Doc::Compare(c) => compare_table(&mut o, c),
            Doc::Native(n) => native_table(&mut o, n),
            Doc::Validate(v) => validate_table(&mut o, v),
            Doc::Bench(b) => bench_table(&mut o, b),
            Doc::Reproduce(r) => reproduce_table(&mut o, r),
        }
        let mut src = Source { file: file.clone(), command, plots: 0, notes: Vec::new() };
        for p in crate::plot::all(d) {
            src.figure(&mut o, p);
        }
        o.push_str("</section>\n");
        sources.push(src);
    }
    (o, sources)
}

/// The page's end.
const END: &str = "</body>\n</html>\n";

/// Reads one document; bad input names the file (and, for JSON that does
/// not parse, the line and column).
fn read(path: &PathBuf) -> Result<Doc, Fail> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Fail::Input(format!("{shown}: cannot read it: {e}")))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Fail::Input(format!("{shown}: not JSON ({e})")))?;
    Doc::from_value(v, &shown).map_err(Fail::Input)
}

/// `splab report`.
pub fn cmd(a: &ReportArgs) -> Result<i32, Fail> {
    let docs: Vec<(String, Doc)> = a.files.iter().map(|p| read(p).map(|d| (p.display().to_string(), d))).collect::<Result<_, _>>()?;
    if a.sweep.is_some() && !a.store.exists() {
        return Err(Fail::Input(format!("--store {}: no such file", a.store.display())));
    }
    let (mut html, mut documents) = page(&docs);
    if let Some(name) = &a.sweep {
        documents.push(sweep_section(&mut html, &a.store, name, docs.len())?);
    }
    html.push_str(END);
    let out = a.output.display().to_string();
    std::fs::write(&a.output, html).map_err(|e| Fail::Input(format!("--output {out}: cannot write it: {e}")))?;
    if a.json {
        emit(&json(&Written { output: out, documents }));
    } else {
        let plots: usize = documents.iter().map(|d| d.plots).sum();
        let mut o = format!("wrote {out}: {plots} plots from {} documents\n", documents.len());
        for d in &documents {
            let _ = writeln!(o, "  {}: {} ({} plots)", d.file, d.command, d.plots);
            for n in &d.notes {
                let _ = writeln!(o, "    no plot: {n}");
            }
        }
        emit(&o);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reproduction's page: the summary, every published figure beside
    /// the model's with the headline ones numbered, and the plot of the
    /// changes.
    #[test]
    fn a_reproduction_gets_its_table_and_the_plot_of_its_changes() {
        let entry = |exp: &str, figure: &str, headline: bool, published: f64, predicted: f64, agrees: bool| {
            serde_json::json!({"experiment": exp, "figure": figure, "unit": "MB/s", "seed": "001", "headline": headline,
                "published_off": 681.0, "published_on": 696.0, "published_change_percent": published, "published_fell": null,
                "predicted_off": 546.0, "predicted_on": 554.9, "predicted_change_percent": predicted, "error_change_percent": 100.0 * (predicted - published) / published.abs(), "agrees": agrees})
        };
        let v = serde_json::json!({"command": "splab reproduce armada-bw-rd armada-bw-wr --json", "quick": false, "outcomes": [],
            "published": [entry("armada-bw-rd", "Mem read", true, 2.2, 1.6, true), entry("armada-bw-wr", "Mem write", true, 8.4, 1.6, false), entry("armada-bw-rd", "Bcopy", false, 2.3, 0.0, false)],
            "summary": {"agree": 1, "of": 3, "headline_agree": 1, "headline_of": 2}});
        let d = Doc::from_value(v, "r.json").unwrap();
        let (html, sources) = page(&[("r.json".into(), d)]);
        assert!(html.contains("1 of 2 headline changes agree") && html.contains("1 of 3 in all"), "{html}");
        assert!(html.contains("<td class=\"name\">1 armada-bw-rd</td><td>Mem read [MB/s]</td><td>001</td><td>681 → 696</td><td>+2.2%</td>"), "{html}");
        assert!(html.contains("<td class=\"name\">2 armada-bw-wr</td>") && html.contains("<td class=\"name\">armada-bw-rd</td><td>Bcopy"), "{html}");
        assert_eq!((sources[0].plots, sources[0].notes.len()), (1, 0), "{:?}", sources[0].notes);
        assert!(html.contains("<svg") && html.contains("predicted, does not agree"), "{html}");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("a<b & 'c'"), "a&lt;b &amp; &#39;c&#39;");
    }
}
