//! `splab sim`, `splab compare` and `splab sysctl`: their options and
//! what each prints. The runs themselves are `simulate`'s.

use crate::error::Fail;
use crate::formats::Formats;
use crate::output;
use crate::setup;
use crate::simulate::{self, RunOptArgs};
use crate::spec::{OnOff, RunSpec, SystemSpec};
use crate::workload::check_params;
use crate::text;
use clap::Args;

/// `--superpages on|off`, for the commands that run one setting.
#[derive(Args, Clone, Debug)]
pub struct SuperpagesArg {
    #[arg(long, value_enum, value_name = "on|off", default_value = "on", help = setup::superpages_help())]
    pub superpages: OnOff,
}

#[derive(Args, Clone, Debug)]
pub struct SimArgs {
    #[command(flatten)]
    pub spec: RunSpec,
    #[command(flatten)]
    pub superpages: SuperpagesArg,
    #[command(flatten)]
    pub run: RunOptArgs,
    #[command(flatten)]
    pub out: Formats,
}

#[derive(Args, Clone, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub spec: RunSpec,
    #[command(flatten)]
    pub run: RunOptArgs,
    /// Show every sysctl, also those 0 in both runs and the settings
    /// alike in both.
    #[arg(long)]
    pub all: bool,
    /// Compare superpage policies instead of superpages off and on: one
    /// run each, e.g. freebsd,shimizu,linux-thp:always,linux-thp:madvise.
    /// --sysctl settings apply to every run; POLICY/NAME=VALUE to that
    /// run alone, e.g. linux-thp:madvise/khugepaged.scan_sleep_millisecs=100.
    #[arg(long, value_name = "POLICY,...")]
    pub policies: Option<String>,
    #[command(flatten)]
    pub out: Formats,
}

#[derive(Args, Clone, Debug)]
pub struct SysctlArgs {
    /// Names to print (default: all).
    pub names: Vec<String>,
    #[command(flatten)]
    pub system: SystemSpec,
    #[command(flatten)]
    pub superpages: SuperpagesArg,
    /// Also print each one's description (as `sysctl -d` gives it).
    #[arg(short = 'd', long)]
    pub describe: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A program run online passes its exit status on (said on stderr too).
fn program_status(p: Option<&serde_json::Value>) -> i32 {
    match simulate::exit_status(p) {
        Some(s) => {
            eprintln!("splab: the program exited with status {s}");
            s
        }
        None => 0,
    }
}

/// `splab sim`.
pub fn sim(a: &SimArgs) -> Result<i32, Fail> {
    check_params(&a.spec)?;
    a.run.check_for(&a.spec)?;
    a.out.check()?;
    let mut spec = a.spec.clone();
    spec.superpages = a.superpages.superpages.on();
    let r = simulate::simulate(&spec, &a.run.opts(a.out.machine_readable()))?;
    a.out.emit(&r, text::sim)?;
    Ok(program_status(r.program.as_ref()))
}

/// `splab compare`.
pub fn compare(a: &CompareArgs) -> Result<i32, Fail> {
    check_params(&a.spec)?;
    a.run.check_for(&a.spec)?;
    let opts = a.run.opts(a.out.machine_readable());
    if let Some(list) = &a.policies {
        if a.out.csv || a.out.plot.is_some() {
            return Err(Fail::Input("--policies: the table is printed as text or --json; --csv and --plot are for off/on comparisons".into()));
        }
        let list = simulate::policy_list(list).map_err(Fail::Input)?;
        let c = simulate::compare_policies(&a.spec, &list.0, &opts)?;
        a.out.emit(&c, |c| text::policies(c, a.all))?;
        return Ok(0);
    }
    a.out.check()?;
    let c = simulate::compare(&a.spec, &opts)?;
    a.out.emit(&c, |c| text::compare(c, a.all))?;
    Ok(program_status(c.on.program.as_ref()))
}

/// `splab sysctl`.
pub fn sysctl(a: &SysctlArgs) -> Result<i32, Fail> {
    let mut s = simulate::fresh_sysctls(&a.system, a.superpages.superpages.on())?;
    if !a.names.is_empty() {
        if let Some(bad) = a.names.iter().find(|n| !s.values.contains_key(*n)) {
            return Err(Fail::Input(format!("unknown sysctl {bad:?}")));
        }
        s.values.retain(|k, _| a.names.contains(k));
    }
    output::emit(&if a.json { output::sysctls_json(&s, a.describe) } else { output::sysctls(&s, a.describe) });
    Ok(0)
}
