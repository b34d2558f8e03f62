//! The JSON documents the commands print with `--json`, read back: what
//! `--csv`, `--plot` and `splab report` draw from. Each view holds only
//! the fields those need and ignores the rest, so a document keeps loading
//! when a command adds fields. Every document names the command line that
//! made it (`command`, added by `output::json`); its second word says what
//! kind of document it is, and where a document has none (written by hand)
//! its shape does.

pub use splab_calibrate::validate::{Row, Summary};
use serde::Deserialize;
use serde_json::Value;
pub use splab_native::suite::Spread;
use std::collections::BTreeMap;

/// A document of any command `--csv`, `--plot` and `report` know.
pub enum Doc {
    Sim(Box<Sim>),
    Compare(Box<Compare>),
    Native(Box<Native>),
    Validate(Box<Validate>),
    Bench(Box<Bench>),
    Reproduce(Box<Reproduce>),
}

/// `splab reproduce --json`: each published figure beside the model's.
#[derive(Deserialize, Clone, Debug)]
pub struct Reproduce {
    pub command: Option<String>,
    #[serde(default)]
    pub quick: bool,
    pub published: Vec<Published>,
    pub summary: Option<ReproduceSummary>,
}

/// One published figure and the prediction (reproduce's `Against`).
#[derive(Deserialize, Clone, Debug)]
pub struct Published {
    pub experiment: String,
    pub figure: String,
    #[serde(default)]
    pub unit: String,
    pub seed: String,
    #[serde(default)]
    pub headline: bool,
    pub published_off: Option<f64>,
    pub published_on: Option<f64>,
    pub published_change_percent: Option<f64>,
    pub published_fell: Option<bool>,
    pub predicted_off: Option<f64>,
    pub predicted_on: Option<f64>,
    pub predicted_change_percent: Option<f64>,
    pub error_change_percent: Option<f64>,
    pub agrees: Option<bool>,
}

impl Reproduce {
    /// The headline figures with a published and a predicted change, in
    /// the document's order: the report's plot numbers them 1, 2, ... and
    /// its table says which is which.
    pub fn headline(&self) -> Vec<&Published> {
        self.published.iter().filter(|p| p.headline && p.published_change_percent.is_some() && p.predicted_change_percent.is_some()).collect()
    }
}

#[derive(Deserialize, Clone, Debug)]
pub struct ReproduceSummary {
    pub agree: usize,
    pub of: usize,
    pub headline_agree: usize,
    pub headline_of: usize,
}

#[derive(Deserialize, Clone, Debug)]
pub struct Figure {
    pub name: String,
    pub value: Option<f64>,
    #[serde(default)]
    pub unit: String,
}

#[derive(Deserialize, Clone, Debug, Default)]
pub struct Tlb {
    #[serde(default)]
    pub sizes: Vec<String>,
    #[serde(default)]
    pub misses: Vec<u64>,
    #[serde(default)]
    pub total_misses: u64,
}

#[derive(Deserialize, Clone, Debug, Default)]
pub struct Hw {
    #[serde(default)]
    pub walks: u64,
    #[serde(default)]
    pub walk_mem_refs: u64,
    #[serde(default)]
    pub nested_refs: u64,
    #[serde(default)]
    pub prefetched: u64,
    #[serde(default)]
    pub writebacks: u64,
}

#[derive(Deserialize, Clone, Debug, Default)]
pub struct Cycles {
    #[serde(default)]
    pub data: f64,
    #[serde(default)]
    pub translation: f64,
    #[serde(default)]
    pub kernel: f64,
}

/// One reading of the simulator's own resident memory during a run.
#[derive(Deserialize, Clone, Debug)]
pub struct RssSample {
    pub host_seconds: f64,
    pub bytes: u64,
}

/// `splab sim --json`, and each side of `splab compare --json`.
#[derive(Deserialize, Clone, Debug)]
pub struct Sim {
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub workload_detail: String,
    #[serde(default)]
    pub arch: String,
    #[serde(default)]
    pub machine: String,
    #[serde(default)]
    pub superpages: bool,
    pub figure: Figure,
    #[serde(default)]
    pub report: String,
    #[serde(default)]
    pub sysctl: BTreeMap<String, Value>,
    #[serde(default)]
    pub refs: u64,
    pub sim_seconds: f64,
    #[serde(default)]
    pub sim_seconds_total: f64,
    #[serde(default)]
    pub host_seconds: f64,
    #[serde(default)]
    pub tlb: Tlb,
    #[serde(default)]
    pub hw: Hw,
    #[serde(default)]
    pub cycles: Cycles,
    #[serde(default)]
    pub host_model_bytes: u64,
    #[serde(default)]
    pub host_rss: Vec<RssSample>,
}

#[derive(Deserialize, Clone, Debug)]
pub struct Compare {
    #[serde(default)]
    pub command: Option<String>,
    pub off: Sim,
    pub on: Sim,
}

#[derive(Deserialize, Clone, Debug)]
pub struct Outcome {
    pub seconds: f64,
    #[serde(default)]
    pub cpu_seconds: f64,
    #[serde(default)]
    pub figures: Vec<Figure>,
    #[serde(default)]
    pub report: String,
}

#[derive(Deserialize, Clone, Debug)]
pub struct NativeRun {
    pub round: u32,
    pub outcome: Outcome,
}

#[derive(Deserialize, Clone, Debug)]
pub struct FigureSummary {
    pub name: String,
    #[serde(default)]
    pub unit: String,
    #[serde(default)]
    pub higher_is_better: bool,
    pub spread: Spread,
    pub speedup_vs_4k: Option<f64>,
}

#[derive(Deserialize, Clone, Debug)]
pub struct Layout {
    pub pages: String,
    #[serde(default)]
    pub runs: Vec<NativeRun>,
    pub seconds: Option<Spread>,
    pub huge_fraction: Option<Spread>,
    #[serde(default)]
    pub figures: Vec<FigureSummary>,
}

/// `splab native --json` (and each workload's suite in validate's).
#[derive(Deserialize, Clone, Debug)]
pub struct Native {
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub repeat: u32,
    pub layouts: Vec<Layout>,
}

/// `splab validate --json`.
#[derive(Deserialize, Clone, Debug)]
pub struct Validate {
    #[serde(default)]
    pub command: Option<String>,
    pub machine: String,
    #[serde(default)]
    pub quick: bool,
    #[serde(default)]
    pub repeat: u32,
    pub rows: Vec<Row>,
    pub summary: Summary,
}

#[derive(Deserialize, Clone, Debug)]
pub struct BenchPart {
    pub refs: u64,
    pub host_seconds: f64,
    #[serde(default)]
    pub refs_per_second: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
}

impl BenchPart {
    pub fn rate(&self) -> f64 {
        self.refs_per_second.unwrap_or(self.refs as f64 / self.host_seconds.max(1e-9))
    }
}

#[derive(Deserialize, Clone, Debug, Default)]
pub struct BenchRuns {
    #[serde(default)]
    pub gups_off: Vec<BenchPart>,
    #[serde(default)]
    pub gups_on: Vec<BenchPart>,
    #[serde(default)]
    pub trace: Vec<BenchPart>,
    #[serde(default)]
    pub footprint: Vec<BenchPart>,
}

/// `splab bench --json`.
#[derive(Deserialize, Clone, Debug)]
pub struct Bench {
    #[serde(default)]
    pub command: Option<String>,
    pub repeat: u32,
    /// Each part that ran (`--only-program` runs none of these).
    #[serde(default)]
    pub gups_off: Option<BenchPart>,
    #[serde(default)]
    pub gups_on: Option<BenchPart>,
    #[serde(default)]
    pub trace: Option<BenchPart>,
    #[serde(default)]
    pub footprint: Option<BenchPart>,
    #[serde(default)]
    pub runs: BenchRuns,
}

impl Bench {
    /// Each simulator part that ran: its name, median run and every run
    /// (the program part's ratios are in the text and JSON only).
    pub fn parts(&self) -> Vec<(&'static str, &BenchPart, &[BenchPart])> {
        [
            ("gups_off", &self.gups_off, &self.runs.gups_off[..]),
            ("gups_on", &self.gups_on, &self.runs.gups_on[..]),
            ("trace", &self.trace, &self.runs.trace[..]),
            ("footprint", &self.footprint, &self.runs.footprint[..]),
        ]
        .into_iter()
        .filter_map(|(n, m, all)| m.as_ref().map(|m| (n, m, all)))
        .collect()
    }
}

impl Doc {
    /// Reads a document; `origin` names it in errors.
    pub fn from_value(v: Value, origin: &str) -> Result<Doc, String> {
        let obj = v.as_object().ok_or_else(|| format!("{origin}: not a JSON object (expected the --json output of a splab command)"))?;
        let by_command = obj.get("command").and_then(Value::as_str).and_then(|c| c.split_whitespace().nth(1)).map(str::to_string);
        let has = |k: &str| obj.contains_key(k);
        let kind = match by_command.as_deref() {
            Some(k @ ("sim" | "compare" | "native" | "validate" | "bench" | "reproduce")) => k.to_string(),
            Some(other) => return Err(format!("{origin}: the output of `splab {other}`, which has no plot or table here (known: sim, compare, native, validate, bench, reproduce)")),
            None if has("off") && has("on") => "compare".into(),
            None if has("rows") && has("summary") => "validate".into(),
            None if has("layouts") => "native".into(),
            None if has("gups_off") => "bench".into(),
            None if has("published") && has("outcomes") => "reproduce".into(),
            None if has("figure") && has("sim_seconds") => "sim".into(),
            None => return Err(format!("{origin}: not the --json output of splab sim, compare, native, validate, bench or reproduce")),
        };
        let bad = |e: serde_json::Error| format!("{origin}: a `splab {kind}` document, but {e}");
        Ok(match kind.as_str() {
            "sim" => Doc::Sim(Box::new(serde_json::from_value(v).map_err(bad)?)),
            "compare" => Doc::Compare(Box::new(serde_json::from_value(v).map_err(bad)?)),
            "native" => Doc::Native(Box::new(serde_json::from_value(v).map_err(bad)?)),
            "validate" => Doc::Validate(Box::new(serde_json::from_value(v).map_err(bad)?)),
            "reproduce" => Doc::Reproduce(Box::new(serde_json::from_value(v).map_err(bad)?)),
            _ => Doc::Bench(Box::new(serde_json::from_value(v).map_err(bad)?)),
        })
    }

    /// The command line that made it, or what it is where it does not say.
    pub fn command(&self) -> String {
        let (c, kind) = match self {
            Doc::Sim(d) => (&d.command, "splab sim"),
            Doc::Compare(d) => (&d.command, "splab compare"),
            Doc::Native(d) => (&d.command, "splab native"),
            Doc::Validate(d) => (&d.command, "splab validate"),
            Doc::Bench(d) => (&d.command, "splab bench"),
            Doc::Reproduce(d) => (&d.command, "splab reproduce"),
        };
        c.clone().unwrap_or_else(|| format!("{kind} (command line not recorded)"))
    }
}

/// One lmbench-style latency curve: `"stride=N` then `size_MB ns` lines,
/// as lat prints them natively and in the simulator.
#[derive(Clone, Debug, PartialEq)]
pub struct LatCurve {
    pub stride: u64,
    /// (array size in MB, ns a load)
    pub points: Vec<(f64, f64)>,
}

/// The curves of a lat report, in the order printed; empty for any other
/// report.
pub fn lat_curves(report: &str) -> Vec<LatCurve> {
    let mut out: Vec<LatCurve> = Vec::new();
    for line in report.lines() {
        let l = line.trim();
        if let Some(s) = l.strip_prefix("\"stride=") {
            if let Ok(stride) = s.trim().parse() {
                out.push(LatCurve { stride, points: Vec::new() });
            }
            continue;
        }
        let mut w = l.split_whitespace();
        let (Some(a), Some(b), None) = (w.next(), w.next(), w.next()) else { continue };
        if let (Some(c), Ok(mb), Ok(ns)) = (out.last_mut(), a.parse::<f64>(), b.parse::<f64>()) {
            c.points.push((mb, ns));
        }
    }
    out.retain(|c| !c.points.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lat_reports_are_read_by_stride() {
        let r = "# memory latency\n\"stride=64\n0.00391 1.667\n0.5 5.25\n\n\"stride=4096\n0.00391 1.9\n";
        let c = lat_curves(r);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0], LatCurve { stride: 64, points: vec![(0.00391, 1.667), (0.5, 5.25)] });
        assert_eq!(c[1].stride, 4096);
        assert!(lat_curves("GUP/s 0.3\n").is_empty());
    }

    #[test]
    fn kinds_come_from_the_command_or_the_shape() {
        let e = Doc::from_value(serde_json::json!({"command": "splab check --json"}), "x.json").err().unwrap();
        assert!(e.contains("x.json") && e.contains("splab check"), "{e}");
        let e = Doc::from_value(serde_json::json!([1]), "y.json").err().unwrap();
        assert!(e.contains("y.json"), "{e}");
        let e = Doc::from_value(serde_json::json!({"rows": [], "summary": {}}), "z.json").err().unwrap();
        assert!(e.contains("splab validate"), "{e}");
    }
}
