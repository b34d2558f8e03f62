//! The output formats of the commands that measure (sim, compare, native,
//! validate, bench): text by default, one JSON document (`--json`), a
//! long-format CSV table (`--csv`), and beside any of them the run's plot
//! as SVG (`--plot FILE.svg`). CSV and the plot are drawn from the JSON
//! document itself (`doc`), so they show what `--json` would have printed.

use crate::doc::Doc;
use crate::error::Fail;
use crate::output::{self, emit};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Args, Clone, Debug, Default)]
pub struct Formats {
    /// Print one JSON document instead of text. It starts with the command
    /// line that made it, which `splab report` titles its plots with.
    #[arg(long)]
    pub json: bool,
    /// Print a long-format CSV table instead of text: a header
    /// `run,metric,value,unit`, then one row per figure of each run, as
    /// perf stat's CSV (for scripts and pandas).
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Also write the run's plot to FILE as SVG (lat: ns per load against
    /// array size; compare: the changes as bars; native: medians with
    /// their spread; validate: predicted against measured speedups).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

impl Formats {
    /// Whether a script is reading stdout (no progress bars then).
    pub fn machine_readable(&self) -> bool {
        self.json || self.csv
    }

    /// Checks that the plot's file can be written, before a run that may
    /// take minutes.
    pub fn check(&self) -> Result<(), Fail> {
        if let Some(p) = &self.plot {
            std::fs::write(p, "").map_err(|e| Fail::Input(format!("--plot {}: cannot write it: {e}", p.display())))?;
        }
        Ok(())
    }

    /// Prints `doc` as asked (`text` draws the text form) and writes its
    /// plot.
    pub fn emit<T: Serialize>(&self, doc: &T, text: impl FnOnce(&T) -> String) -> Result<(), Fail> {
        if self.json {
            emit(&output::json(doc));
        } else if !self.csv {
            emit(&text(doc));
        }
        if !self.csv && self.plot.is_none() {
            return Ok(());
        }
        let value = serde_json::to_value(output::Document::new(doc)).map_err(|e| Fail::Run(format!("internal error: {e}")))?;
        let d = Doc::from_value(value, "this command's document").map_err(|e| Fail::Run(format!("internal error: {e}")))?;
        if self.csv {
            emit(&crate::csv_out::text(&d).map_err(Fail::Run)?);
        }
        if let Some(p) = &self.plot {
            let plot = crate::plot::one(&d).map_err(|e| Fail::Run(format!("--plot {}: {e}", p.display())))?;
            std::fs::write(p, plot.svg).map_err(|e| Fail::Run(format!("--plot {}: writing failed: {e}", p.display())))?;
        }
        Ok(())
    }
}
