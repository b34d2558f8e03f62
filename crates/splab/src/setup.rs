//! Building a system from command-line options: which machine profile,
//! which architecture, how much memory. Every value is checked here, before
//! any work starts, so that a typo is reported at once (exit 2) and never
//! reaches code that would panic on it.

use crate::error::{input, Fail};
use crate::size;
use clap::{Args, ValueEnum};
use splab_hw::profile::{default_for_arch, Profile, DEFAULT_PROFILE};
use splab_pmap::Arch;
use splab_sim::{Config, System};

/// The range the model accepts (`System::new` enforces the same).
pub const MIN_MEMORY: u64 = 16 << 20;
pub const MAX_MEMORY: u64 = 256 << 30;

/// Modelled memory when none is given, unless the architecture addresses
/// less (see `config_or_default`).
pub const DEFAULT_MEMORY: &str = "8G";

/// The machine to model; shared by every command that builds a system.
#[derive(Args, Clone, Debug)]
pub struct MachineArgs {
    /// Machine profile: a built-in name or the path of a TOML file
    /// [default: sapphire-rapids; with --arch, that architecture's own
    /// built-in profile].
    #[arg(long, value_name = "PROFILE")]
    pub machine: Option<String>,
    #[arg(long, value_name = "ARCH", help = arch_help())]
    pub arch: Option<String>,
    /// Switch parts of the core model off, to see what each moves:
    /// deps (dependences through registers and loaded values), branches
    /// (mispredictions), fetch (instruction fetches that miss), window
    /// (the reorder buffer and load and store queues), mshrs (line-fill
    /// buffers and walkers), comma-separated
    #[arg(long, value_name = "PARTS")]
    pub core_off: Option<String>,
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

impl MachineArgs {
    /// The profile to load: the one named, else the built-in profile of
    /// the architecture named, else the default.
    fn profile_name(&self) -> Result<String, Fail> {
        if let Some(m) = &self.machine {
            return Ok(m.clone());
        }
        let Some(name) = &self.arch else { return Ok(DEFAULT_PROFILE.to_string()) };
        let arch = lookup_arch(name)?;
        let machine = arch.machine;
        default_for_arch(machine)
            .map(str::to_string)
            .ok_or_else(|| Fail::Input(format!("--arch {arch}: no built-in profile of a {machine} machine; name one with --machine")))
    }
}

/// The help of `--superpages`: the tunables it sets on each architecture,
/// from the registry.
pub fn superpages_help() -> String {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for a in &splab_pmap::ARCHES {
        let t = a.superpage_tunable_names();
        match groups.iter_mut().find(|(names, _)| *names == t) {
            Some((_, arches)) => arches.push(a.name),
            None => groups.push((t, vec![a.name])),
        }
    }
    let each: Vec<String> = groups.iter().map(|(t, arches)| format!("{} on {}", t, arches.join(", "))).collect();
    format!("Transparent superpages: sets the architecture's tunables ({})", each.join("; "))
}

/// The help of `--arch`: every architecture, from the registry.
pub fn arch_help() -> String {
    format!("Architecture of the pmap and walker: {} [default: the profile's]", splab_pmap::arch::names())
}

/// The architecture `--arch` names.
pub fn lookup_arch(name: &str) -> Result<Arch, Fail> {
    splab_pmap::arch::lookup(name).map_err(Fail::Input)
}

/// A swap size option: 0 (no swap) up to the largest memory size.
pub fn swap(text: &str, what: &str) -> Result<u64, Fail> {
    let bytes = input(size::parse(text)).map_err(|e| Fail::Input(format!("{what}: {}", e.message())))?;
    if bytes > MAX_MEMORY {
        return Err(Fail::Input(format!("{what} {text} is out of range (0 to {})", size::show(MAX_MEMORY))));
    }
    Ok(bytes)
}

/// A system configuration with the given machine and memory; everything
/// else at its default (superpages on, no swap, no fragmentation, seed 1).
pub fn config(m: &MachineArgs, memory_text: &str) -> Result<Config, Fail> {
    let mut cfg = machine_config(m)?;
    cfg.memory = memory(memory_text, "--memory")?;
    if let Some(limit) = cfg.arch.max_memory.filter(|&l| cfg.memory > l) {
        return Err(Fail::Input(format!(
            "--memory {memory_text}: {} addresses at most {} of physical memory",
            cfg.arch,
            size::show(limit)
        )));
    }
    Ok(cfg)
}

/// As `config`, with no memory size meaning `DEFAULT_MEMORY`, or all the
/// architecture addresses if that is less (4G on armv7).
pub fn config_or_default(m: &MachineArgs, memory_text: Option<&str>) -> Result<Config, Fail> {
    if let Some(t) = memory_text {
        return config(m, t);
    }
    let mut cfg = config(m, "16M")?;
    let default = memory(DEFAULT_MEMORY, "--memory")?;
    cfg.memory = cfg.arch.max_memory.map_or(default, |l| l.min(default));
    Ok(cfg)
}

/// The machine profile and architecture, checked against each other.
fn machine_config(m: &MachineArgs) -> Result<Config, Fail> {
    let profile = input(Profile::load(&m.profile_name()?))?;
    let arch = match &m.arch {
        Some(name) => lookup_arch(name)?,
        None => splab_pmap::arch::default_for_machine(&profile.arch).ok_or_else(|| {
            Fail::Input(format!("machine profile {:?}: no architecture runs on an {} machine (known: {})", profile.name, profile.arch, splab_pmap::arch::machines().join(", ")))
        })?,
    };
    if arch.machine != profile.arch {
        return Err(Fail::Input(format!(
            "--arch {arch}: machine profile {:?} is an {} machine; choose a profile of that architecture",
            profile.name, profile.arch
        )));
    }
    let mut cfg = Config::new(profile);
    cfg.arch = arch;
    if let Some(off) = &m.core_off {
        cfg.core_parts = splab_sim::core::CoreParts::without(off).map_err(Fail::Input)?;
    }
    Ok(cfg)
}

/// Checks a `--policy` against the architecture and the `--sysctl`
/// settings against the pmap's and the policy's tunables, so that a bad
/// one is reported before any work starts.
pub fn check_tunables(arch: Arch, policy: &str, tunables: &[(String, String)]) -> Result<(), Fail> {
    let mut p = check_policy(arch, policy)?;
    for (name, value) in tunables {
        let bad = |e: String| Fail::Input(format!("--sysctl {name}={value}: {e}"));
        if let Some(r) = p.set_tunable(name, value) {
            r.map_err(bad)?;
            continue;
        }
        // A name neither the pmap nor the policy has is reported as such,
        // whatever its value.
        let v = value.parse::<i64>().unwrap_or(0);
        arch.check_tunable(name, v).map_err(|e| {
            let extra = p.tunable_names();
            bad(if extra.is_empty() { e } else { format!("{e}; the {} policy's: {}", p.name(), extra.join(", ")) })
        })?;
        value.parse::<i64>().map_err(|_| bad(format!("{value:?} is not an integer")))?;
    }
    Ok(())
}

/// The policy `--policy` names, checked against the architecture.
pub fn check_policy(arch: Arch, spec: &str) -> Result<Box<dyn splab_vm::policy::Policy>, Fail> {
    let p = splab_vm::policy::by_name(spec).map_err(|e| Fail::Input(format!("--policy {spec}: {e}")))?;
    if !arch.policies.contains(&p.kind()) {
        return Err(Fail::Input(format!("--policy {spec}: not modelled on {arch}, which has {} (policies for {arch}: {})", arch.size_names(), arch.policy_names())));
    }
    Ok(p)
}

/// The help of `--policy`: every policy, from the VM's list.
pub fn policy_help() -> String {
    let each: Vec<String> = splab_vm::policy::POLICIES.iter().map(|p| format!("{}: {}", p.name, p.about)).collect();
    format!("Superpage policy [default: freebsd]. {}. linux-thp takes a mode: linux-thp:always (the default), linux-thp:madvise, linux-thp:never", each.join(". "))
}

/// Parses a `--sysctl NAME=VALUE` setting of a tunable. Whether the name
/// is a tunable of the architecture or the policy, and the value one it
/// takes, is checked when the system is built.
pub fn tunable(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("--sysctl {text:?}: expected NAME=VALUE"))?;
    let (name, value) = (name.trim(), value.trim());
    if name.is_empty() || value.is_empty() {
        return Err(format!("--sysctl {text:?}: expected NAME=VALUE"));
    }
    Ok((name.to_string(), value.to_string()))
}

/// Builds the system. Its own checks repeat ours, so an error here is still
/// about the configuration the user asked for.
pub fn system(cfg: Config) -> Result<System, Fail> {
    input(System::new(cfg))
}

/// Peak resident memory of this process so far (VmHWM), in bytes, where
/// the host reports it (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// A size line of /proc/self/status (`VmRSS:`, `VmHWM:`), in bytes.
pub fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
