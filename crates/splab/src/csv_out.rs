//! `--csv`: long-format tables, one row per (run, metric, value, unit),
//! the shape perf stat's `-x,` output and pandas' `read_csv` expect, so
//! that a script pivots or filters them without knowing each command's
//! JSON. Within a document every (run, metric) pair is one row.
//!
//! - sim, compare: run `off` or `on` (superpages); the workload's figure
//!   first, under its own name, then times, references, TLB misses (in
//!   all and per page size), walks, cycles by kind, and every integer
//!   sysctl under its name.
//! - native: run `LAYOUT#N` for the N-th run of a layout (seconds, CPU
//!   seconds, every figure), and run `LAYOUT` for its summary (median,
//!   quartiles and extremes, speedup over 4k, huge-page share).
//! - validate: run `WORKLOAD/LAYOUT` for each cell, and `summary`.
//! - bench: run `PART` for each part's median run and `PART#N` for each
//!   run.

use crate::doc::{Bench, Compare, Doc, Native, Sim, Spread, Validate};

/// One row.
pub struct Row {
    pub run: String,
    pub metric: String,
    pub value: f64,
    pub unit: String,
}

fn push(rows: &mut Vec<Row>, run: &str, metric: &str, value: f64, unit: &str) {
    rows.push(Row { run: run.into(), metric: metric.into(), value, unit: unit.into() });
}

fn sim_rows(rows: &mut Vec<Row>, run: &str, s: &Sim) {
    let f = &s.figure;
    push(rows, run, &f.name, f.value.unwrap_or(f64::NAN), &f.unit);
    push(rows, run, "sim_seconds", s.sim_seconds, "s");
    push(rows, run, "sim_seconds_total", s.sim_seconds_total, "s");
    push(rows, run, "host_seconds", s.host_seconds, "s");
    push(rows, run, "memory_refs", s.refs as f64, "refs");
    push(rows, run, "tlb_misses", s.tlb.total_misses as f64, "misses");
    for (size, m) in s.tlb.sizes.iter().zip(&s.tlb.misses) {
        push(rows, run, &format!("tlb_misses.{size}"), *m as f64, "misses");
    }
    push(rows, run, "page_walks", s.hw.walks as f64, "walks");
    push(rows, run, "walk_mem_refs", s.hw.walk_mem_refs as f64, "refs");
    push(rows, run, "walk_host_table_refs", s.hw.nested_refs as f64, "refs");
    push(rows, run, "prefetched_l2_misses", s.hw.prefetched as f64, "lines");
    push(rows, run, "writebacks", s.hw.writebacks as f64, "lines");
    push(rows, run, "cycles.data", s.cycles.data, "cycles");
    push(rows, run, "cycles.translation", s.cycles.translation, "cycles");
    push(rows, run, "cycles.kernel", s.cycles.kernel, "cycles");
    push(rows, run, "host_model_bytes", s.host_model_bytes as f64, "bytes");
    for (k, v) in &s.sysctl {
        if let Some(x) = v.as_i64() {
            push(rows, run, k, x as f64, "");
        }
    }
}

fn spread_rows(rows: &mut Vec<Row>, run: &str, metric: &str, s: &Spread, unit: &str) {
    for (part, v) in [("median", s.median), ("q1", s.q1), ("q3", s.q3), ("min", s.min), ("max", s.max)] {
        push(rows, run, &format!("{metric}.{part}"), v, unit);
    }
}

fn native_rows(rows: &mut Vec<Row>, n: &Native) {
    for l in &n.layouts {
        for (i, r) in l.runs.iter().enumerate() {
            let run = format!("{}#{}", l.pages, i + 1);
            push(rows, &run, "round", (r.round + 1) as f64, "");
            push(rows, &run, "seconds", r.outcome.seconds, "s");
            push(rows, &run, "cpu_seconds", r.outcome.cpu_seconds, "s");
            for f in &r.outcome.figures {
                push(rows, &run, &f.name, f.value.unwrap_or(f64::NAN), &f.unit);
            }
        }
        if let Some(s) = &l.seconds {
            spread_rows(rows, &l.pages, "seconds", s, "s");
        }
        if let Some(h) = &l.huge_fraction {
            spread_rows(rows, &l.pages, "huge_fraction", h, "fraction");
        }
        for f in &l.figures {
            spread_rows(rows, &l.pages, &f.name, &f.spread, &f.unit);
            if let Some(x) = f.speedup_vs_4k {
                push(rows, &l.pages, &format!("{}.speedup_vs_4k", f.name), x, "x");
            }
        }
    }
}

fn validate_rows(rows: &mut Vec<Row>, v: &Validate) {
    let opt = |rows: &mut Vec<Row>, run: &str, m: &str, x: Option<f64>, unit: &str| {
        if let Some(x) = x {
            push(rows, run, m, x, unit);
        }
    };
    for r in &v.rows {
        let run = format!("{}/{}", r.workload, r.layout);
        let (m, sp) = (r.measured.as_ref(), r.measured_speedup_spread.as_ref());
        for (metric, x, unit) in [
            ("measured_seconds", m.map(|m| m.median), "s"),
            ("measured_seconds.min", m.map(|m| m.min), "s"),
            ("measured_seconds.max", m.map(|m| m.max), "s"),
            ("predicted_seconds", Some(r.predicted_seconds), "s"),
            ("time_error", r.time_error, "fraction"),
            ("measured_speedup", r.measured_speedup, "x"),
            ("measured_speedup.min", sp.map(|s| s.min), "x"),
            ("measured_speedup.max", sp.map(|s| s.max), "x"),
            ("predicted_speedup", r.predicted_speedup, "x"),
            ("speedup_error", r.speedup_error, "fraction"),
            ("huge_fraction.measured", r.measured_huge_fraction, "fraction"),
            ("huge_fraction.predicted", r.predicted_huge_fraction, "fraction"),
        ] {
            opt(rows, &run, metric, x, unit);
        }
    }
    let s = &v.summary;
    push(rows, "summary", "speedup_cells", s.speedup_cells as f64, "cells");
    opt(rows, "summary", "speedup_mean_abs_error", s.speedup_mean_abs_error, "fraction");
    opt(rows, "summary", "speedup_max_abs_error", s.speedup_max_abs_error, "fraction");
    push(rows, "summary", "speedup_cells_within_rounds", s.speedup_cells_within_rounds as f64, "cells");
    push(rows, "summary", "time_cells", s.time_cells as f64, "cells");
    opt(rows, "summary", "time_mean_abs_error", s.time_mean_abs_error, "fraction");
    opt(rows, "summary", "time_max_abs_error", s.time_max_abs_error, "fraction");
}

fn bench_rows(rows: &mut Vec<Row>, b: &Bench) {
    let part = |rows: &mut Vec<Row>, run: &str, p: &crate::doc::BenchPart| {
        push(rows, run, "refs", p.refs as f64, "refs");
        push(rows, run, "host_seconds", p.host_seconds, "s");
        push(rows, run, "refs_per_second", p.rate(), "refs/s");
        if let Some(r) = p.peak_rss_bytes {
            push(rows, run, "peak_rss_bytes", r as f64, "bytes");
        }
    };
    for (name, median, all) in b.parts() {
        part(rows, name, median);
        for (i, p) in all.iter().enumerate() {
            part(rows, &format!("{name}#{}", i + 1), p);
        }
    }
}

/// The rows of a document.
pub fn rows(d: &Doc) -> Vec<Row> {
    let mut rows = Vec::new();
    match d {
        Doc::Sim(s) => sim_rows(&mut rows, if s.superpages { "on" } else { "off" }, s),
        Doc::Compare(c) => {
            let Compare { off, on, .. } = c.as_ref();
            sim_rows(&mut rows, "off", off);
            sim_rows(&mut rows, "on", on);
        }
        Doc::Native(n) => native_rows(&mut rows, n),
        Doc::Validate(v) => validate_rows(&mut rows, v),
        Doc::Bench(b) => bench_rows(&mut rows, b),
        // `reproduce` prints no CSV; its figures are a table of their own.
        Doc::Reproduce(_) => {}
    }
    rows
}

/// A value as a CSV cell: whole numbers without a fraction, others with
/// every digit Rust needs to read them back, and nothing for a value that
/// is not a number (pandas reads it as NaN).
fn cell(v: f64) -> String {
    if !v.is_finite() {
        String::new()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// The CSV text of a document (`--csv`).
pub fn text(d: &Doc) -> Result<String, String> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let err = |e: ::csv::Error| format!("writing CSV: {e}");
    w.write_record(["run", "metric", "value", "unit"]).map_err(err)?;
    for r in rows(d) {
        w.write_record([r.run.as_str(), r.metric.as_str(), cell(r.value).as_str(), r.unit.as_str()]).map_err(err)?;
    }
    let bytes = w.into_inner().map_err(|e| format!("writing CSV: {e}"))?;
    String::from_utf8(bytes).map_err(|e| format!("writing CSV: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_read_back() {
        assert_eq!(cell(3.0), "3");
        assert_eq!(cell(0.125), "0.125");
        assert_eq!(cell(f64::NAN), "");
        assert_eq!(cell(1e20), "100000000000000000000");
    }
}
