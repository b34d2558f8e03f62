//! `splab runs`: the runs in the run store, as a table, CSV, JSON or a
//! Parquet file (for pandas, DuckDB, Spark). One row per run: the spec's
//! fields, the headline figures, the build and host; `--sweep` adds the
//! point and each axis's value (`axis.NAME`), `--full` the resolved spec
//! and the whole JSON document.

use crate::error::Fail;
use crate::output::{self, emit};
use crate::store::{self, Store, Table};
use clap::Args;
use parquet::basic::{ConvertedType, Repetition, Type as Physical};
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use rusqlite::types::Value as Sql;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Clone, Debug)]
pub struct RunsArgs {
    /// The run store (SQLite).
    #[arg(long, value_name = "PATH", default_value = store::DEFAULT)]
    pub store: PathBuf,
    /// Only the runs of this sweep, with its points and axes.
    #[arg(long, value_name = "NAME")]
    pub sweep: Option<String>,
    /// Only the runs this SQL condition holds for, over the columns
    /// (e.g. "arch = 'arm64' AND superpages = 1").
    #[arg(long = "where", value_name = "CONDITION")]
    pub filter: Option<String>,
    /// Only these columns, comma-separated, in this order.
    #[arg(long, value_name = "COLUMN,...", value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// Also the resolved spec and the whole JSON document of each run
    /// (columns `spec`, `result`).
    #[arg(long)]
    pub full: bool,
    /// Print CSV (a header, then a row per run).
    #[arg(long, conflicts_with_all = ["json", "parquet"])]
    pub csv: bool,
    /// Print one JSON document: the runs as a list of objects.
    #[arg(long, conflicts_with = "parquet")]
    pub json: bool,
    /// Write the runs to FILE as Parquet (each column typed by its
    /// values: integers, reals or text).
    #[arg(long, value_name = "FILE")]
    pub parquet: Option<PathBuf>,
}

/// The default text table's columns (`--columns` picks others).
const SHOWN: &[&str] = &["id", "workload", "arch", "policy", "superpages", "memory", "figure", "figure_unit", "sim_seconds", "tlb_misses", "promotions", "status"];

/// `splab runs`.
pub fn cmd(a: &RunsArgs) -> Result<i32, Fail> {
    if !a.store.exists() {
        return Err(Fail::Input(format!("--store {}: no such file (a sweep makes it)", a.store.display())));
    }
    let s = Store::open(&a.store)?;
    let t = s.query(a.sweep.as_deref(), a.filter.as_deref(), a.columns.as_deref(), a.full)?;
    if let Some(path) = &a.parquet {
        write_parquet(&t, path)?;
        emit(&format!("wrote {}: {} runs, {} columns\n", path.display(), t.rows.len(), t.columns.len()));
    } else if a.csv {
        emit(&csv(&t)?);
    } else if a.json {
        let runs: Vec<serde_json::Map<String, serde_json::Value>> = t.rows.iter().map(|r| t.columns.iter().cloned().zip(r.iter().map(store::json)).collect()).collect();
        #[derive(serde::Serialize)]
        struct Runs {
            store: String,
            runs: Vec<serde_json::Map<String, serde_json::Value>>,
        }
        emit(&output::json(&Runs { store: a.store.display().to_string(), runs }));
    } else {
        emit(&text(&t, a.columns.is_none(), a.sweep.is_some()));
    }
    Ok(0)
}

fn csv(t: &Table) -> Result<String, Fail> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let e = |x: csv::Error| Fail::Run(format!("writing CSV: {x}"));
    w.write_record(&t.columns).map_err(e)?;
    for r in &t.rows {
        w.write_record(r.iter().map(store::text)).map_err(e)?;
    }
    let bytes = w.into_inner().map_err(|x| Fail::Run(format!("writing CSV: {x}")))?;
    String::from_utf8(bytes).map_err(|x| Fail::Run(format!("writing CSV: {x}")))
}

/// A plain table; by default the main columns (and a sweep's axes).
fn text(t: &Table, default_columns: bool, sweep: bool) -> String {
    let keep: Vec<usize> = if default_columns {
        let named = |c: &str| t.columns.iter().position(|x| x == c);
        let mut k: Vec<usize> = SHOWN.iter().filter_map(|c| named(c)).collect();
        if sweep {
            k.splice(1..1, (0..t.columns.len()).filter(|&i| t.columns[i] == "point" || t.columns[i].starts_with("axis.")));
        }
        k
    } else {
        (0..t.columns.len()).collect()
    };
    let cells: Vec<Vec<String>> = t.rows.iter().map(|r| keep.iter().map(|&i| short(&store::text(&r[i]))).collect()).collect();
    let widths: Vec<usize> = keep.iter().enumerate().map(|(k, &i)| cells.iter().map(|r| r[k].chars().count()).chain([t.columns[i].len()]).max().unwrap_or(0)).collect();
    let mut o = String::new();
    let line = |o: &mut String, words: Vec<&str>| {
        let l: Vec<String> = words.iter().zip(&widths).map(|(w, n)| format!("{w:<n$}")).collect();
        o.push_str(l.join("  ").trim_end());
        o.push('\n');
    };
    line(&mut o, keep.iter().map(|&i| t.columns[i].as_str()).collect());
    for r in &cells {
        line(&mut o, r.iter().map(String::as_str).collect());
    }
    o.push_str(&format!("({} runs)\n", t.rows.len()));
    o
}

/// A cell short enough for a terminal.
fn short(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(37).collect::<String>())
    } else {
        s.to_string()
    }
}

/// The Parquet type of a column: integers if every value is one (or
/// null), reals if every value is a number, else text.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Int,
    Real,
    Text,
}

fn kind(t: &Table, i: usize) -> Kind {
    let mut k = Kind::Int;
    for r in &t.rows {
        match (&r[i], k) {
            (Sql::Null, _) | (Sql::Integer(_), _) => {}
            (Sql::Real(_), Kind::Int) => k = Kind::Real,
            (Sql::Real(_), _) => {}
            _ => return Kind::Text,
        }
    }
    k
}

/// Writes `t` as one Parquet row group, every column optional.
fn write_parquet(t: &Table, path: &std::path::Path) -> Result<(), Fail> {
    let e = |x: parquet::errors::ParquetError| Fail::Run(format!("writing {}: {x}", path.display()));
    let kinds: Vec<Kind> = (0..t.columns.len()).map(|i| kind(t, i)).collect();
    let fields = t
        .columns
        .iter()
        .zip(&kinds)
        .map(|(name, k)| {
            let b = match k {
                Kind::Int => Type::primitive_type_builder(name, Physical::INT64),
                Kind::Real => Type::primitive_type_builder(name, Physical::DOUBLE),
                Kind::Text => Type::primitive_type_builder(name, Physical::BYTE_ARRAY).with_converted_type(ConvertedType::UTF8),
            };
            b.with_repetition(Repetition::OPTIONAL).build().map(Arc::new)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(e)?;
    let schema = Arc::new(Type::group_type_builder("runs").with_fields(fields).build().map_err(e)?);
    let file = std::fs::File::create(path).map_err(|x| Fail::Input(format!("--parquet {}: cannot write it: {x}", path.display())))?;
    let mut w = SerializedFileWriter::new(file, schema, Arc::new(WriterProperties::builder().build())).map_err(e)?;
    let mut rg = w.next_row_group().map_err(e)?;
    let mut i = 0;
    while let Some(mut col) = rg.next_column().map_err(e)? {
        let present: Vec<i16> = t.rows.iter().map(|r| i16::from(!matches!(r[i], Sql::Null))).collect();
        match kinds[i] {
            Kind::Int => {
                let v: Vec<i64> = t.rows.iter().filter_map(|r| if let Sql::Integer(x) = r[i] { Some(x) } else { None }).collect();
                col.typed::<Int64Type>().write_batch(&v, Some(&present), None).map_err(e)?;
            }
            Kind::Real => {
                let v: Vec<f64> = t.rows.iter().filter_map(|r| match r[i] {
                    Sql::Integer(x) => Some(x as f64),
                    Sql::Real(x) => Some(x),
                    _ => None,
                }).collect();
                col.typed::<DoubleType>().write_batch(&v, Some(&present), None).map_err(e)?;
            }
            Kind::Text => {
                let v: Vec<ByteArray> = t.rows.iter().filter(|r| !matches!(r[i], Sql::Null)).map(|r| ByteArray::from(store::text(&r[i]).into_bytes())).collect();
                col.typed::<ByteArrayType>().write_batch(&v, Some(&present), None).map_err(e)?;
            }
        }
        col.close().map_err(e)?;
        i += 1;
    }
    rg.close().map_err(e)?;
    w.close().map_err(e)?;
    Ok(())
}
