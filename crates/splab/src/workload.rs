//! Turning a workload name and its options into a runnable workload.
//! Adding a workload is one line in `WORKLOADS` (plus its options, if it
//! has new ones, in `WorkloadArgs`).

use crate::error::Fail;
use clap::Args;
use splab_sim::Config;
use splab_workloads::gups::Gups;
use splab_workloads::Workload;

/// Options of the workloads; each workload reads the ones it has.
#[derive(Args, Clone, Debug)]
pub struct WorkloadArgs {
    /// GUPS: log2 of the table size in 64-bit words.
    #[arg(long, value_name = "N", default_value_t = 24)]
    pub log2_table: u32,
    /// GUPS: run the HPCC verification pass (implies --track-contents).
    #[arg(long)]
    pub verify: bool,
}

type Build = fn(&WorkloadArgs, &Config) -> Result<Box<dyn Workload>, String>;

/// Every workload the front end can run, by name.
const WORKLOADS: &[(&str, Build)] = &[("gups", gups)];

fn gups(a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, String> {
    let mut g = Gups::new(a.log2_table)?;
    g.verify = a.verify;
    // A table as large as memory and swap together cannot be run (the page
    // tables need room too); say so now instead of after minutes of
    // simulation.
    let bytes = 8u64 << a.log2_table;
    if bytes >= cfg.memory + cfg.swap {
        return Err(format!(
            "--log2-table {}: the GUPS table ({}) does not fit in --memory {}{}",
            a.log2_table,
            crate::size::show(bytes),
            crate::size::show(cfg.memory),
            if cfg.swap > 0 { format!(" and --swap {}", crate::size::show(cfg.swap)) } else { String::new() }
        ));
    }
    Ok(Box::new(g))
}

pub fn names() -> Vec<&'static str> {
    WORKLOADS.iter().map(|(n, _)| *n).collect()
}

/// The workload called `name`, built for a system configured as `cfg`.
pub fn build(name: &str, a: &WorkloadArgs, cfg: &Config) -> Result<Box<dyn Workload>, Fail> {
    let Some((_, make)) = WORKLOADS.iter().find(|(n, _)| *n == name) else {
        return Err(Fail::Input(format!("unknown workload {name:?} (known: {})", names().join(", "))));
    };
    make(a, cfg).map_err(Fail::Input)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_library_workload_is_runnable() {
        for w in splab_workloads::WORKLOADS {
            assert!(super::names().contains(w), "workload {w} has no builder");
        }
    }
}
