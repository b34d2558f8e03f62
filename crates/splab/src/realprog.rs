//! The real programs behind `splab reproduce`'s buildworld and pgbench -S
//! experiments, and what they need made natively before they run: GCC
//! compiling a C unit shipped with splab, several compilers at once, and
//! a PostgreSQL backend in single-user mode serving pgbench -S's
//! statement on a database populated as `pgbench -i` populates it.
//!
//! Everything made lives in one directory under the temporary directory,
//! named with splab's pid: removed when the experiment ends (`Workdir`'s
//! drop), and, where a run killed by a signal left one, by the next
//! `splab reproduce` (`online::sweep`, for pids no longer alive).

use crate::error::Fail;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What a program experiment runs.
#[derive(Clone, Copy, Debug)]
pub enum Real {
    /// `units` compilations of one C unit by `gcc -O2 -c` (the driver,
    /// which forks cc1 and as), `jobs` at a time, as make -jN runs them
    /// (xargs -P keeps `jobs` running). `small` picks a short unit (for
    /// `--quick`) instead of tools/nested-chase.c.
    Gcc { units: u32, jobs: u32, small: bool },
    /// One PostgreSQL backend (`postgres --single`) reading `transactions`
    /// of pgbench -S's statements from standard input, on a database of
    /// pgbench's scale `scale` (scale * 100000 accounts), after a warm-up
    /// (`write_statements`).
    Pgbench { scale: u32, transactions: u32 },
}

/// The C unit the compilers compile: splab's own tools/nested-chase.c, a
/// real program of 342 lines (a pointer chase with its timing and
/// argument parsing, libc headers only), shipped inside splab so that
/// it is there wherever splab is.
const UNIT: &str = include_str!("../../../tools/nested-chase.c");
/// The `--quick` unit: one function, so that the run is the driver's,
/// cc1's and as's start-up and little else.
const SMALL_UNIT: &str = "int twice(int x) { return 2 * x; }\n";

const DIR_PREFIX: &str = "splab-reproduce-";

/// The directory an experiment's inputs are made in; removed on drop.
pub struct Workdir {
    pub path: PathBuf,
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The user a PostgreSQL server runs as: splab's own, or `nobody` when
/// splab runs as root (the server refuses root).
fn pg_user() -> Option<(&'static str, u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root.then(|| crate::workload::user("nobody").ok().map(|(u, g)| ("nobody", u, g))).flatten()
}

/// The program's user for `--user` (none: splab's own).
pub fn user(r: &Real) -> Option<String> {
    match r {
        Real::Pgbench { .. } => pg_user().map(|(n, _, _)| n.to_string()),
        Real::Gcc { .. } => None,
    }
}

/// The highest installed PostgreSQL's bin directory.
pub fn postgres_bin() -> Result<PathBuf, Fail> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, p)| p.join("postgres").is_file() && p.join("initdb").is_file())
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p).ok_or_else(|| Fail::Input("the pgbench experiments need PostgreSQL's server, /usr/lib/postgresql/VERSION/bin/postgres and initdb, which are not installed here (apt-get install postgresql)".into()))
}

/// The program's command line, its inputs in `dir`.
pub fn program(r: &Real, dir: &Path, bin: &Path) -> Vec<String> {
    let d = |f: &str| dir.join(f).display().to_string();
    match *r {
        Real::Gcc { jobs, .. } => {
            vec!["xargs".into(), "-a".into(), d("units"), "-P".into(), jobs.to_string(), "-I{}".into(), "gcc".into(), "-O2".into(), "-c".into(), d("unit.c"), "-o".into(), d("{}.o")]
        }
        // No checkpoint lines at shutdown: they would share splab's
        // standard error (they are LOG messages, which the server log
        // keeps at any log_min_messages below fatal).
        Real::Pgbench { .. } => vec![bin.join("postgres").display().to_string(), "--single".into(), "-D".into(), d("data"), "-c".into(), "log_checkpoints=off".into(), "postgres".into()],
    }
}

/// The statements file of a pgbench run with `transactions` statements.
pub fn statements(dir: &Path, transactions: u32) -> PathBuf {
    dir.join(format!("select-{transactions}.sql"))
}

/// Makes `r`'s inputs in a new directory.
pub fn prepare(r: &Real) -> Result<Workdir, Fail> {
    let base = std::env::temp_dir();
    splab_trace::online::sweep(&base, DIR_PREFIX);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let w = Workdir { path: base.join(format!("{DIR_PREFIX}{}-{nanos}", std::process::id())) };
    let io = |what: &str, e: std::io::Error| Fail::Run(format!("{what} in {}: {e}", w.path.display()));
    std::fs::create_dir(&w.path).map_err(|e| io("cannot create the directory", e))?;
    match *r {
        Real::Gcc { units, small, .. } => {
            std::fs::write(w.path.join("unit.c"), if small { SMALL_UNIT } else { UNIT }).map_err(|e| io("unit.c", e))?;
            let list: String = (1..=units).map(|i| format!("{i}\n")).collect();
            std::fs::write(w.path.join("units"), list).map_err(|e| io("units", e))?;
        }
        Real::Pgbench { scale, transactions } => {
            let bin = postgres_bin()?;
            if let Some((name, uid, gid)) = pg_user() {
                // The database is made, and later served, as that user in TMPDIR.
                crate::workload::online_user(name).map_err(Fail::Input)?;
                std::os::unix::fs::chown(&w.path, Some(uid), Some(gid)).map_err(|e| io("chown", e))?;
            }
            populate(&bin, &w.path, scale)?;
            write_statements(&statements(&w.path, transactions), scale, transactions).map_err(|e| io("the statements", e))?;
            write_statements(&statements(&w.path, 0), scale, 0).map_err(|e| io("the statements", e))?;
        }
    }
    Ok(w)
}

/// Runs a PostgreSQL program natively as the server's user, standard
/// input from `input`; fails with its output.
fn pg_native(bin: &Path, dir: &Path, args: &[&str], input: &str) -> Result<(), Fail> {
    let mut c = Command::new(bin.join(args[0]));
    c.args(&args[1..]).current_dir(dir).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some((_, uid, gid)) = pg_user() {
        c.uid(uid).gid(gid);
    }
    let mut child = c.spawn().map_err(|e| Fail::Run(format!("cannot start {}: {e}", args[0])))?;
    let mut stdin = child.stdin.take().expect("piped");
    let text = input.to_string();
    let feed = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, text.as_bytes()));
    let out = child.wait_with_output().map_err(|e| Fail::Run(format!("{}: {e}", args[0])))?;
    let _ = feed.join();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || err.contains("ERROR:") {
        return Err(Fail::Run(format!("{} ({}) in {}: {}\n{}", args.join(" "), out.status, dir.display(), String::from_utf8_lossy(&out.stdout), err)));
    }
    Ok(())
}

/// A database cluster in `dir/data` holding pgbench's accounts table at
/// `scale`, as `pgbench -i -s SCALE` makes it (its schema, fill factor
/// 100, primary key built after the load, then VACUUM ANALYZE); the
/// branches, tellers and history tables, which -S never reads, are left
/// out.
fn populate(bin: &Path, dir: &Path, scale: u32) -> Result<(), Fail> {
    pg_native(bin, dir, &["initdb", "-D", "data", "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"], "")?;
    let accounts = u64::from(scale) * 100_000;
    let sql = format!(
        "CREATE TABLE pgbench_accounts (aid int NOT NULL, bid int, abalance int, filler char(84)) WITH (fillfactor = 100);\n\
         INSERT INTO pgbench_accounts SELECT aid, (aid - 1) / 100000 + 1, 0, '' FROM generate_series(1, {accounts}) AS aid;\n\
         ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid);\n\
         VACUUM ANALYZE pgbench_accounts;\n\
         CREATE EXTENSION pg_prewarm;\n"
    );
    pg_native(bin, dir, &["postgres", "--single", "-D", "data", "-c", "fsync=off", "postgres"], &sql)
}

/// A warm server's state first, then pgbench -S's statement, `SELECT
/// abalance FROM pgbench_accounts WHERE aid = N;`, `transactions` times,
/// N uniform over the accounts from a fixed seed (the same statements in
/// every run). The warm-up reads the table and then its primary key
/// into the shared buffers (pg_prewarm's default mode), as a server
/// that has served lookups for a while holds them: from scale 10 on the
/// two (some 150 MiB there, 2.2 GiB at the seed's 150) are more than the
/// buffers (128 MiB, PostgreSQL's default `shared_buffers`), so every
/// buffer is in use, the index's pages last. The seed's figure is the
/// mean of ten 5-second runs against a server that served the ones
/// before, and at its scale 150 the lookups alone fill the buffers
/// within a run.
fn write_statements(path: &Path, scale: u32, transactions: u32) -> std::io::Result<()> {
    let accounts = u64::from(scale) * 100_000;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut s = String::from("SELECT pg_prewarm('pgbench_accounts');\nSELECT pg_prewarm('pgbench_accounts_pkey');\n");
    for _ in 0..transactions {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let n = x.wrapping_mul(0x2545_f491_4f6c_dd1d) % accounts + 1;
        s.push_str(&format!("SELECT abalance FROM pgbench_accounts WHERE aid = {n};\n"));
    }
    std::fs::write(path, s)
}
