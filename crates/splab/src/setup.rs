//! Building a system from command-line options: which machine profile,
//! which architecture, how much memory. Every value is checked here, before
//! any work starts, so that a typo is reported at once (exit 2) and never
//! reaches code that would panic on it.

use crate::error::{input, Fail};
use crate::size;
use clap::{Args, ValueEnum};
use splab_hw::profile::{Profile, DEFAULT_PROFILE};
use splab_sim::{Config, System};

/// The range the model accepts (`System::new` enforces the same).
pub const MIN_MEMORY: u64 = 16 << 20;
pub const MAX_MEMORY: u64 = 256 << 30;

/// The machine to model; shared by every command that builds a system.
#[derive(Args, Clone, Debug)]
pub struct MachineArgs {
    /// Machine profile: a built-in name or the path of a TOML file.
    #[arg(long, value_name = "PROFILE", default_value = DEFAULT_PROFILE)]
    pub machine: String,
    /// Architecture of the pmap and walker [default: the profile's].
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn on(self) -> bool {
        self == OnOff::On
    }
}

/// A memory size option (`what` is the option's name, for messages),
/// parsed and checked against what the model accepts.
pub fn memory(text: &str, what: &str) -> Result<u64, Fail> {
    let bytes = input(size::parse(text)).map_err(|e| Fail::Input(format!("{what}: {}", e.message())))?;
    if !(MIN_MEMORY..=MAX_MEMORY).contains(&bytes) {
        return Err(Fail::Input(format!(
            "{what} {text} is out of range ({} to {})",
            size::show(MIN_MEMORY),
            size::show(MAX_MEMORY)
        )));
    }
    Ok(bytes)
}

/// A system configuration with the given machine and memory; everything
/// else at its default (superpages on, no fragmentation, seed 1).
pub fn config(m: &MachineArgs, memory_text: &str) -> Result<Config, Fail> {
    let profile = input(Profile::load(&m.machine))?;
    let arch = m.arch.clone().unwrap_or_else(|| splab_pmap::default_arch(&profile.arch).to_string());
    if !splab_pmap::ARCHES.contains(&arch.as_str()) {
        return Err(Fail::Input(format!("unknown architecture {arch:?} (known: {})", splab_pmap::ARCHES.join(", "))));
    }
    if splab_pmap::machine_arch(&arch) != profile.arch {
        return Err(Fail::Input(format!(
            "--arch {arch}: machine profile {:?} is an {} machine; choose a profile of that architecture",
            profile.name, profile.arch
        )));
    }
    let mut cfg = Config::new(profile);
    cfg.arch = arch;
    cfg.memory = memory(memory_text, "--memory")?;
    Ok(cfg)
}

/// Builds the system. Its own checks repeat ours, so an error here is still
/// about the configuration the user asked for.
pub fn system(cfg: Config) -> Result<System, Fail> {
    input(System::new(cfg))
}

/// Peak resident memory of this process so far (VmHWM), in bytes, where
/// the host reports it (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
