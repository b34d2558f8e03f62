//! The run store: every run a sweep made, in one SQLite file (default
//! `splab-runs.db`). A run is one row of `runs`, keyed by its resolved
//! spec (`setup::resolved`, as canonical JSON), the build that ran it and
//! its repeat: a flat column for each field of the spec and each headline
//! figure, the host, and the full JSON document the run printed. A sweep
//! is a row of `sweeps` (its definition and axes) and a row of `points`
//! per point, naming the run that point is; a run two sweeps share is
//! stored once.
//!
//! Each run is written in one transaction, so a sweep killed at any
//! moment leaves every finished run in the file and no half-written one
//! (SQLite's journal sees to it), and a run already stored with the same
//! spec and build is not run again. Only the process that drives a sweep
//! writes; readers (`splab runs`, pandas, DuckDB) may read meanwhile
//! (write-ahead log).

use crate::error::Fail;
use rusqlite::types::Value as Sql;
use rusqlite::{params, Connection, OptionalExtension, ToSql};
use serde_json::Value;
use splab_defs::workload::PARAMS;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The store's default file.
pub const DEFAULT: &str = "splab-runs.db";

/// The spec's fields with a column of their own (beside the workload
/// parameters, `PARAMS`), as `RunSpec`'s flat table names them.
pub const SPEC_COLUMNS: &[&str] = &[
    "workload", "program", "input", "sample", "pages", "machine", "arch", "core_off", "memory", "swap", "sysctl", "policy", "fragment", "age", "seed", "superpages", "track_contents", "check_tlb",
];

/// The headline figures with a column of their own, read off a run's
/// document: (column, where in the document).
pub const FIGURE_COLUMNS: &[(&str, &str)] = &[
    ("figure", "/figure/value"),
    ("figure_name", "/figure/name"),
    ("figure_unit", "/figure/unit"),
    ("higher_is_better", "/figure/higher_is_better"),
    ("workload_detail", "/workload_detail"),
    ("sim_seconds", "/sim_seconds"),
    ("refs", "/refs"),
    ("tlb_misses", "/tlb/total_misses"),
    ("walks", "/hw/walks"),
    ("walk_mem_refs", "/hw/walk_mem_refs"),
    ("memory_bytes", "/memory_bytes"),
    ("resident_peak_bytes", "/memory/resident_peak_bytes"),
    ("bloat_peak_bytes", "/memory/bloat_peak_bytes"),
    ("fault_p99_ns", "/memory/fault_p99_ns"),
    ("host_seconds", "/host_seconds"),
];

/// Columns about the run itself.
const RUN_COLUMNS: &[(&str, &str)] = &[
    ("id", "INTEGER PRIMARY KEY"),
    ("key", "TEXT NOT NULL"),
    ("build", "TEXT NOT NULL"),
    ("repeat", "INTEGER NOT NULL"),
    ("sweep", "TEXT"),
    ("host", "TEXT"),
    ("finished", "TEXT"),
    ("status", "TEXT NOT NULL"),
    ("error", "TEXT"),
    ("promotions", "INTEGER"),
];

/// What one run left: its spec (resolved), repeat, the document it
/// printed (or why it failed), where and when.
pub struct Finished {
    pub key: String,
    pub spec: Value,
    pub repeat: u32,
    pub sweep: Option<String>,
    pub host: String,
    /// The run's JSON document, or the error that ended it.
    pub outcome: Result<Value, String>,
}

/// A table read back: its column names and rows.
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Sql>>,
}

pub struct Store {
    conn: Connection,
    pub path: PathBuf,
}

fn db_err(path: &Path) -> impl Fn(rusqlite::Error) -> Fail + '_ {
    move |e| Fail::Run(format!("run store {}: {e}", path.display()))
}

/// Every column of `runs` in order, with its type.
fn run_columns() -> Vec<(String, &'static str)> {
    let mut v: Vec<(String, &str)> = RUN_COLUMNS.iter().map(|(n, t)| (n.to_string(), *t)).collect();
    v.extend(SPEC_COLUMNS.iter().chain(PARAMS).map(|n| (n.to_string(), "")));
    v.extend(FIGURE_COLUMNS.iter().map(|(n, _)| (n.to_string(), "")));
    v.extend([("spec".to_string(), "TEXT NOT NULL"), ("result".to_string(), "TEXT")]);
    v
}

impl Store {
    /// Opens the store at `path`, creating it (and any column a newer
    /// build added) as needed.
    pub fn open(path: &Path) -> Result<Store, Fail> {
        let e = db_err(path);
        if path.is_dir() {
            return Err(Fail::Input(format!("--store {}: a directory, not a file", path.display())));
        }
        let conn = Connection::open(path).map_err(|x| Fail::Input(format!("--store {}: cannot open it: {x}", path.display())))?;
        conn.busy_timeout(std::time::Duration::from_secs(30)).map_err(&e)?;
        conn.pragma_update(None, "journal_mode", "wal").map_err(&e)?;
        conn.pragma_update(None, "synchronous", "full").map_err(&e)?;
        let cols = run_columns();
        let body: Vec<String> = cols.iter().map(|(n, t)| format!("\"{n}\" {t}")).collect();
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS runs ({}, UNIQUE(key, build, repeat));
             CREATE TABLE IF NOT EXISTS sweeps (name TEXT PRIMARY KEY, axes TEXT NOT NULL, definition TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS points (sweep TEXT NOT NULL, point INTEGER NOT NULL, repeat INTEGER NOT NULL, key TEXT NOT NULL, build TEXT NOT NULL, axes TEXT NOT NULL, PRIMARY KEY (sweep, point, repeat, build));",
            body.join(", ")
        ))
        .map_err(|x| Fail::Input(format!("--store {}: not a run store ({x})", path.display())))?;
        // Columns a newer build has that this file lacks.
        let have: HashSet<String> = {
            let mut st = conn.prepare("SELECT name FROM pragma_table_info('runs')").map_err(&e)?;
            let names = st.query_map([], |r| r.get::<_, String>(0)).map_err(&e)?;
            names.collect::<Result<_, _>>().map_err(&e)?
        };
        for (n, _) in cols.iter().filter(|(n, _)| !have.contains(n)) {
            conn.execute(&format!("ALTER TABLE runs ADD COLUMN \"{n}\""), []).map_err(&e)?;
        }
        Ok(Store { conn, path: path.to_path_buf() })
    }

    /// Whether a run of `key` by `build` (repeat `repeat`) finished.
    pub fn done(&self, key: &str, build: &str, repeat: u32) -> Result<bool, Fail> {
        let n: Option<i64> = self
            .conn
            .query_row("SELECT id FROM runs WHERE key = ?1 AND build = ?2 AND repeat = ?3 AND status = 'ok'", params![key, build, repeat], |r| r.get(0))
            .optional()
            .map_err(db_err(&self.path))?;
        Ok(n.is_some())
    }

    /// Records a sweep's definition and its points (which runs they are),
    /// replacing what an earlier run of the same sweep recorded.
    pub fn add_sweep(&self, name: &str, axes: &[String], definition: &Value, points: &[(usize, u32, String, Value)], build: &str) -> Result<(), Fail> {
        let e = db_err(&self.path);
        let tx = self.conn.unchecked_transaction().map_err(&e)?;
        tx.execute("INSERT OR REPLACE INTO sweeps (name, axes, definition) VALUES (?1, ?2, ?3)", params![name, serde_json::to_string(axes).unwrap_or_default(), definition.to_string()]).map_err(&e)?;
        tx.execute("DELETE FROM points WHERE sweep = ?1 AND build = ?2", params![name, build]).map_err(&e)?;
        {
            let mut st = tx.prepare("INSERT INTO points (sweep, point, repeat, key, build, axes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)").map_err(&e)?;
            for (point, repeat, key, axes) in points {
                st.execute(params![name, *point as i64, repeat, key, build, axes.to_string()]).map_err(&e)?;
            }
        }
        tx.commit().map_err(&e)
    }

    /// Stores one finished (or failed) run, in one transaction; a failed
    /// run of the same key is replaced.
    pub fn insert(&self, build: &str, f: &Finished) -> Result<(), Fail> {
        let cols = run_columns();
        let names: Vec<&str> = cols.iter().map(|(n, _)| n.as_str()).filter(|n| *n != "id").collect();
        let mut values: Vec<Sql> = Vec::with_capacity(names.len());
        let doc = f.outcome.as_ref().ok();
        for n in &names {
            values.push(match *n {
                "key" => Sql::Text(f.key.clone()),
                "build" => Sql::Text(build.to_string()),
                "repeat" => Sql::Integer(f.repeat as i64),
                "sweep" => f.sweep.clone().map_or(Sql::Null, Sql::Text),
                "host" => Sql::Text(f.host.clone()),
                "finished" => Sql::Text(now_text()),
                "status" => Sql::Text(if doc.is_some() { "ok" } else { "failed" }.into()),
                "error" => f.outcome.as_ref().err().map_or(Sql::Null, |e| Sql::Text(e.clone())),
                "promotions" => doc.map_or(Sql::Null, |d| Sql::Integer(promotions(d))),
                "spec" => Sql::Text(f.spec.to_string()),
                "result" => doc.map_or(Sql::Null, |d| Sql::Text(d.to_string())),
                other => match FIGURE_COLUMNS.iter().find(|(c, _)| *c == other) {
                    Some((_, at)) => doc.and_then(|d| d.pointer(at)).map_or(Sql::Null, sql),
                    None => f.spec.get(other).map_or(Sql::Null, sql),
                },
            });
        }
        let marks: Vec<String> = (1..=names.len()).map(|i| format!("?{i}")).collect();
        let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
        let e = db_err(&self.path);
        let tx = self.conn.unchecked_transaction().map_err(&e)?;
        tx.execute(&format!("INSERT OR REPLACE INTO runs ({}) VALUES ({})", quoted.join(", "), marks.join(", ")), rusqlite::params_from_iter(values.iter())).map_err(&e)?;
        tx.commit().map_err(&e)
    }

    /// The runs, those of sweep `sweep` only if given (with its axes'
    /// values as columns `axis.NAME`), filtered by the SQL condition
    /// `filter` (`--where`); the columns `columns` if given, else every
    /// one but the full spec and document.
    pub fn query(&self, sweep: Option<&str>, filter: Option<&str>, columns: Option<&[String]>, full: bool) -> Result<Table, Fail> {
        let mut axes: Vec<String> = Vec::new();
        if let Some(s) = sweep {
            axes = self.sweep_axes(s)?;
        }
        let all = run_columns();
        let mut select: Vec<String> = all.iter().map(|(n, _)| n.clone()).filter(|n| full || (n != "spec" && n != "result")).map(|n| format!("r.\"{n}\"")).collect();
        if sweep.is_some() {
            select.insert(1, "p.point AS point".into());
            for a in &axes {
                select.push(format!("json_extract(p.axes, '$.\"{}\"') AS \"axis.{a}\"", a.replace('"', "")));
            }
        }
        let mut sql = format!("SELECT * FROM (SELECT {} FROM runs r", select.join(", "));
        if sweep.is_some() {
            sql.push_str(" JOIN points p ON p.key = r.key AND p.build = r.build AND p.repeat = r.repeat WHERE p.sweep = ?1");
        }
        sql.push(')');
        if let Some(w) = filter {
            sql.push_str(&format!(" WHERE ({w})"));
        }
        sql.push_str(if sweep.is_some() { " ORDER BY point, repeat" } else { " ORDER BY id" });
        let bad_where = |x: rusqlite::Error| match filter {
            Some(w) => Fail::Input(format!("--where {w:?}: {x}")),
            None => Fail::Run(format!("run store {}: {x}", self.path.display())),
        };
        let mut st = self.conn.prepare(&sql).map_err(bad_where)?;
        let names: Vec<String> = st.column_names().iter().map(|s| s.to_string()).collect();
        let keep: Vec<usize> = match columns {
            None => (0..names.len()).collect(),
            Some(want) => want
                .iter()
                .map(|c| names.iter().position(|n| n == c).ok_or_else(|| Fail::Input(format!("--columns {c}: no such column (known: {})", names.join(", ")))))
                .collect::<Result<_, _>>()?,
        };
        let n = names.len();
        let params: Vec<&dyn ToSql> = match &sweep {
            Some(s) => vec![s as &dyn ToSql],
            None => Vec::new(),
        };
        let rows = st
            .query_map(params.as_slice(), |r| (0..n).map(|i| r.get::<_, Sql>(i)).collect::<Result<Vec<_>, _>>())
            .map_err(|x| Fail::Input(format!("--where: {x}")))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|x| Fail::Run(format!("run store {}: {x}", self.path.display())))?;
        let rows = rows.into_iter().map(|r| keep.iter().map(|&i| r[i].clone()).collect()).collect();
        Ok(Table { columns: keep.iter().map(|&i| names[i].clone()).collect(), rows })
    }

    /// The axes of sweep `name`, in its file's order; an error names the
    /// sweeps the store has.
    pub fn sweep_axes(&self, name: &str) -> Result<Vec<String>, Fail> {
        let e = db_err(&self.path);
        let axes: Option<String> = self.conn.query_row("SELECT axes FROM sweeps WHERE name = ?1", params![name], |r| r.get(0)).optional().map_err(&e)?;
        match axes {
            Some(a) => serde_json::from_str(&a).map_err(|x| Fail::Run(format!("run store {}: sweep {name}: {x}", self.path.display()))),
            None => {
                let mut st = self.conn.prepare("SELECT name FROM sweeps ORDER BY name").map_err(&e)?;
                let known: Vec<String> = st.query_map([], |r| r.get(0)).map_err(&e)?.collect::<Result<_, _>>().map_err(&e)?;
                Err(Fail::Input(format!("--sweep {name}: no such sweep in {} (it has: {})", self.path.display(), if known.is_empty() { "none".into() } else { known.join(", ") })))
            }
        }
    }
}

/// A JSON value as a column value: arrays as their items joined by
/// commas (as the command line writes them), tables as JSON text.
fn sql(v: &Value) -> Sql {
    match v {
        Value::Null => Sql::Null,
        Value::Bool(b) => Sql::Integer(*b as i64),
        Value::Number(n) => n.as_i64().map(Sql::Integer).unwrap_or_else(|| Sql::Real(n.as_f64().unwrap_or(f64::NAN))),
        Value::String(s) => Sql::Text(s.clone()),
        Value::Array(a) => Sql::Text(a.iter().map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string())).collect::<Vec<_>>().join(",")),
        Value::Object(_) => Sql::Text(v.to_string()),
    }
}

/// Promotions of every superpage size in a run's document
/// (`vm.pmap.*.promotions`).
fn promotions(doc: &Value) -> i64 {
    doc.get("sysctl").and_then(Value::as_object).map_or(0, |m| m.iter().filter(|(k, _)| k.starts_with("vm.pmap.") && k.ends_with(".promotions")).filter_map(|(_, v)| v.as_i64()).sum())
}

/// Now, as seconds since the epoch (UTC), for `finished`.
fn now_text() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{:.3}", t.as_secs_f64())
}

/// A column value as text, for tables and CSV.
pub fn text(v: &Sql) -> String {
    match v {
        Sql::Null => String::new(),
        Sql::Integer(i) => i.to_string(),
        Sql::Real(r) => r.to_string(),
        Sql::Text(t) => t.clone(),
        Sql::Blob(b) => format!("<{} bytes>", b.len()),
    }
}

/// A column value as JSON.
pub fn json(v: &Sql) -> Value {
    match v {
        Sql::Null => Value::Null,
        Sql::Integer(i) => Value::from(*i),
        Sql::Real(r) => Value::from(*r),
        Sql::Text(t) => Value::from(t.clone()),
        Sql::Blob(b) => Value::from(b.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_stored_once_and_read_back_with_its_columns() {
        let dir = std::env::temp_dir().join(format!("splab-store-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let s = Store::open(&dir).ok().unwrap();
        let spec = serde_json::json!({"workload": "gups", "log2_table": 16, "arch": "amd64", "superpages": true, "stride": [64, 4096]});
        let doc = serde_json::json!({"figure": {"value": 0.5, "name": "GUP/s", "unit": "GUP/s", "higher_is_better": true}, "sysctl": {"vm.pmap.pde.promotions": 3}});
        let f = Finished { key: spec.to_string(), spec: spec.clone(), repeat: 0, sweep: Some("t".into()), host: "h".into(), outcome: Ok(doc) };
        assert!(!s.done(&f.key, "b1", 0).ok().unwrap());
        s.insert("b1", &f).ok().unwrap();
        s.insert("b1", &f).ok().unwrap();
        assert!(s.done(&f.key, "b1", 0).ok().unwrap());
        assert!(!s.done(&f.key, "b2", 0).ok().unwrap());
        let t = s.query(None, Some("arch = 'amd64'"), Some(&["workload".into(), "figure".into(), "promotions".into(), "stride".into(), "log2_table".into()]), false).ok().unwrap();
        assert_eq!(t.rows.len(), 1);
        let row: Vec<String> = t.rows[0].iter().map(text).collect();
        assert_eq!(row, ["gups", "0.5", "3", "64,4096", "16"]);
        let Err(Fail::Input(m)) = s.query(None, Some("no_such_column = 1"), None, false) else { panic!() };
        assert!(m.contains("no_such_column"), "{m}");
        // Closed first, so that SQLite folds its write-ahead log back in;
        // then the database and whatever of the log is left.
        drop(s);
        for end in ["", "-wal", "-shm"] {
            let mut p = dir.clone().into_os_string();
            p.push(end);
            let _ = std::fs::remove_file(p);
        }
    }
}
