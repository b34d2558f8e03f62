//! `splab calibrate`: measures this host with microbenchmarks and writes
//! a machine profile (splab-calibrate does both; this is its options,
//! progress bar and output).

use crate::error::{input, Fail};
use crate::output::{emit, json};
use crate::progress::Progress;
use clap::Args;
use serde::Serialize;
use splab_calibrate::measure::{self, Calibration, Plan};
use splab_calibrate::profile::{self, Base};
use splab_calibrate::{fit, report};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct CalibrateArgs {
    /// Write the profile to FILE (default: print it after the report).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// About 20 seconds instead of one and a half to two minutes: fewer repeats and
    /// points, smaller regions, no 1 GB page.
    #[arg(long)]
    pub quick: bool,
    /// A plan of a second or two whose numbers mean nothing (tests).
    #[arg(long, hide = true)]
    pub tiny: bool,
    /// The profile's name [default: calibrated-HOSTNAME].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// On a guest, write the [virt] section (nested paging, the host page
    /// size) as comments only, so that the model walks as on bare metal.
    #[arg(long)]
    pub no_virt_section: bool,
    /// hugetlb pool: grow it (as root) for 2 MB and 1 GB pages and restore
    /// it, or use only pages already in it.
    #[arg(long, value_name = "grow|keep", default_value = "grow")]
    pub hugetlb_pool: String,
    /// Measure nothing: make FILE, a profile an older splab calibrate
    /// wrote, one this splab loads (the interval core's [core] from its
    /// [overlap], the instruction cache and TLB, the memory interface),
    /// each added value saying where it came from; written to --output or
    /// printed.
    #[arg(long, value_name = "FILE")]
    pub upgrade: Option<PathBuf>,
    /// With --upgrade: the text report of the same calibration, whose
    /// latency curve the cache levels are read from again.
    #[arg(long, value_name = "FILE", requires = "upgrade")]
    pub report: Option<PathBuf>,
    /// With --upgrade: the built-in profile that what the old profile does
    /// not measure comes from [default: the one its header names].
    #[arg(long, value_name = "NAME", requires = "upgrade")]
    pub base: Option<String>,
}

/// What `--upgrade --json` prints.
#[derive(Serialize)]
struct UpgradeReport<'a> {
    upgraded: String,
    changes: &'a [String],
    profile: &'a str,
    written_to: Option<String>,
}

/// `splab calibrate --upgrade FILE`.
fn upgrade(a: &CalibrateArgs, old: &std::path::Path, as_json: bool) -> Result<i32, Fail> {
    let read = |p: &std::path::Path, what: &str| std::fs::read_to_string(p).map_err(|e| Fail::Input(format!("{what} {}: cannot read it: {e}", p.display())));
    let text = read(old, "--upgrade")?;
    let report = a.report.as_deref().map(|p| read(p, "--report").map(|t| (t, p.display().to_string()))).transpose()?;
    let origin = old.display().to_string();
    let u = splab_calibrate::upgrade::upgrade(&text, &origin, a.base.as_deref(), report.as_ref().map(|(t, p)| (t.as_str(), p.as_str()))).map_err(Fail::Input)?;
    if let Some(p) = &a.output {
        std::fs::write(p, &u.text).map_err(|e| Fail::Input(format!("--output {}: cannot write it: {e}", p.display())))?;
    }
    let written_to = a.output.as_ref().map(|p| p.display().to_string());
    if as_json {
        emit(&json(&UpgradeReport { upgraded: origin, changes: &u.changes, profile: &u.text, written_to }));
    } else {
        let mut o = format!("upgraded {origin}:\n");
        for c in &u.changes {
            let _ = writeln!(o, "  {c}");
        }
        match &written_to {
            Some(p) => {
                let _ = writeln!(o, "\nprofile written to {p} (use it with --machine {p})");
            }
            None => {
                let _ = writeln!(o, "\nprofile:\n");
                o.push_str(&u.text);
            }
        }
        emit(&o);
    }
    Ok(0)
}

/// What `--json` prints.
#[derive(Serialize)]
struct Report<'a> {
    measurements: &'a Calibration,
    profile: &'a str,
    written_to: Option<String>,
}

/// `splab calibrate`.
pub fn cmd(a: &CalibrateArgs, as_json: bool) -> Result<i32, Fail> {
    if let Some(old) = &a.upgrade {
        return upgrade(a, old, as_json);
    }
    let grow = match a.hugetlb_pool.as_str() {
        "grow" => true,
        "keep" => false,
        other => return Err(Fail::Input(format!("--hugetlb-pool {other:?}: expected grow or keep"))),
    };
    if let Some(n) = &a.name {
        if n.is_empty() || n.contains(['"', '\\', '\n']) {
            return Err(Fail::Input(format!("--name {n:?}: give a non-empty name without quotes, backslashes or newlines")));
        }
    }
    let base = input(Base::for_host(splab_pmap::arch::host_machine()))?;
    // Open the output first, so that a bad path fails before two minutes
    // of measuring, not after.
    let mut file = match &a.output {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| Fail::Input(format!("--output {}: cannot write it: {e}", p.display())))?),
        None => None,
    };
    let mut plan = if a.tiny {
        Plan::tiny()
    } else if a.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    plan.grow_hugetlb = grow;
    let mut bar: Option<Progress> = None;
    let r = measure::run(&plan, &mut |done, total, phase| {
        let b = bar.get_or_insert_with(|| Progress::new(total, "calibrate", "probes", as_json));
        let _ = phase;
        b.update(done);
    });
    if let Some(b) = bar {
        b.finish();
    }
    let c = match r {
        Ok(c) => c,
        Err(e) => {
            if let Some(p) = &a.output {
                drop(file.take());
                let _ = std::fs::remove_file(p);
            }
            return Err(Fail::Run(format!("calibration failed: {e}")));
        }
    };
    let mut c = c;
    fit::second_level(&mut c, &base);
    let name = a.name.clone().unwrap_or_else(|| format!("calibrated-{}", hostname()));
    let text = match profile::write(&c, &base, &name, !a.no_virt_section) {
        Ok(w) => w.text,
        Err(e) => {
            emit(&crate::output::with_build(report::text(&c, &base)));
            if let Some(p) = &a.output {
                drop(file.take());
                let _ = std::fs::remove_file(p);
            }
            return Err(Fail::Run(format!("{e}; nothing written")));
        }
    };
    if let (Some(f), Some(p)) = (file.as_mut(), &a.output) {
        f.write_all(text.as_bytes()).and_then(|_| f.flush()).map_err(|e| Fail::Run(format!("--output {}: writing failed: {e}", p.display())))?;
    }
    let written_to = a.output.as_ref().map(|p| p.display().to_string());
    if as_json {
        emit(&json(&Report { measurements: &c, profile: &text, written_to }));
    } else {
        let mut o = crate::output::with_build(report::text(&c, &base));
        match &written_to {
            Some(p) => {
                let _ = writeln!(o, "\nprofile written to {p} (use it with --machine {p})");
            }
            None => {
                let _ = writeln!(o, "\nprofile:\n");
                o.push_str(&text);
            }
        }
        emit(&o);
    }
    Ok(0)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).ok().filter(|s| !s.is_empty() && !s.contains('"')).unwrap_or_else(|| "host".into())
}
