//! A real program in the simulator (`splab sim|compare [options] -- PROG
//! ARGS`): the front end's part of `splab_trace::online`, which runs the
//! program under splab's valgrind tool and feeds its references to the
//! simulated system as it runs.

use crate::error::Fail;
use crate::run::{self, Comparison, RunArgs};
use splab_trace::online::{Io, Online, Sample};
use std::io::IsTerminal;

/// The workload of `a`'s program.
pub fn workload(a: &RunArgs) -> Result<Online, Fail> {
    if a.workload_args.pages.is_some() {
        return Err(Fail::Input("--pages: a program takes the layout the kernel gives it (compare runs superpages off and on)".into()));
    }
    let mut w = Online::new(a.program.clone(), a.valgrind.clone()).map_err(Fail::Input)?;
    w.sample = a.sample.as_deref().map(Sample::parse).transpose().map_err(Fail::Input)?;
    w.stdout = a.output.clone();
    if let Some((i, o)) = &a.program_io {
        w.stdin = i.clone();
        w.stdout = o.clone();
    }
    Ok(w)
}

/// Standard input for runs of a program more than once: a file holding
/// what splab's standard input gives (a terminal is left to the program).
pub struct Spool {
    pub io: Io,
    path: Option<std::path::PathBuf>,
}

impl Spool {
    pub fn stdin() -> Result<Spool, Fail> {
        if std::io::stdin().is_terminal() {
            return Ok(Spool { io: Io::Inherit, path: None });
        }
        splab_trace::online::sweep(&std::env::temp_dir(), "splab-stdin-");
        let path = std::env::temp_dir().join(format!("splab-stdin-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).map_err(|e| Fail::Run(format!("{}: {e}", path.display())))?;
        let spool = Spool { io: Io::File(path.clone()), path: Some(path.clone()) };
        std::io::copy(&mut std::io::stdin().lock(), &mut f).map_err(|e| Fail::Run(format!("reading standard input into {}: {e}", path.display())))?;
        Ok(spool)
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `splab compare -- PROG`: the program runs twice, superpages off and on,
/// on the same input, each writing its output where --output says
/// (`inherit`: the on run's shown, the off run's dropped).
pub fn compare(a: &RunArgs, quiet: bool) -> Result<Comparison, Fail> {
    workload(a)?;
    let spool = Spool::stdin()?;
    let mut off_args = a.clone();
    off_args.program_io = Some((spool.io.clone(), if a.output == Io::Stderr { Io::Null } else { a.output.clone() }));
    let mut on_args = a.clone();
    on_args.program_io = Some((spool.io.clone(), a.output.clone()));
    let off = run::simulate(&off_args, false, quiet)?;
    let on = run::simulate(&on_args, true, quiet)?;
    Ok(run::comparison(crate::workload::label(a), off, on))
}

/// The exit status splab takes from the program it ran (as a shell gives
/// it: 128 + the signal that ended it), None when it exited 0 or no
/// program ran.
pub fn exit_status(program: Option<&serde_json::Value>) -> Option<i32> {
    let p = program?;
    if let Some(c) = p.get("exit_status").and_then(|v| v.as_i64()) {
        return (c != 0).then_some(c as i32);
    }
    p.get("signal").and_then(|v| v.as_i64()).map(|s| 128 + s as i32)
}
