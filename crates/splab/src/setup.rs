//! Building a system from command-line options: which machine profile,
//! which architecture, how much memory. Every value is checked here, before
//! any work starts, so that a typo is reported at once (exit 2) and never
//! reaches code that would panic on it.

use crate::error::{input, Fail};
use crate::spec::{MachineArgs, RunSpec, SystemSpec};
use splab_hw::profile::{default_for_arch, Profile, DEFAULT_PROFILE};
use splab_hw::size;
use splab_pmap::Arch;
use splab_sim::{Config, System};
use splab_vm::policy::PolicySpec;

/// The range the model accepts (`System::new` enforces the same).
pub const MIN_MEMORY: u64 = 16 << 20;
pub const MAX_MEMORY: u64 = 256 << 30;

/// Modelled memory when none is given, unless the architecture addresses
/// less (see `config_or_default`).
pub const DEFAULT_MEMORY: &str = "8G";

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
    pub fn profile_name(&self) -> Result<String, Fail> {
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
pub fn check_tunables(arch: Arch, policy: &PolicySpec, tunables: &[(String, String)]) -> Result<(), Fail> {
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
pub fn check_policy(arch: Arch, spec: &PolicySpec) -> Result<Box<dyn splab_vm::policy::Policy>, Fail> {
    let p = spec.build().map_err(|e| Fail::Input(format!("--policy {spec}: {e}")))?;
    if !arch.policies.contains(&p.kind()) {
        return Err(Fail::Input(format!("--policy {spec}: not modelled on {arch}, which has {} (policies for {arch}: {})", arch.size_names(), arch.policy_names())));
    }
    Ok(p)
}

/// The configuration of a fresh system as `sys` describes it (memory at
/// `default_memory`'s when none is given, else the architecture's
/// default), superpages `on`; its policy and tunables checked.
pub fn system_config(sys: &SystemSpec, on: bool) -> Result<Config, Fail> {
    let mut cfg = config_or_default(&sys.machine, sys.memory.as_deref())?;
    cfg.superpages = on;
    cfg.swap = swap(&sys.swap, "--swap")?;
    if on {
        cfg.tunables = sys.sysctl.clone();
    }
    check_tunables(cfg.arch, &sys.policy, &cfg.tunables)?;
    cfg.policy = sys.policy.to_string();
    Ok(cfg)
}

/// The configuration of the system `spec` runs on, every value checked.
pub fn run_config(spec: &RunSpec) -> Result<Config, Fail> {
    let mut cfg = system_config(&spec.system, spec.superpages)?;
    if !(0.0..=1.0).contains(&spec.fragment) {
        return Err(Fail::Input(format!("--fragment {} is out of range (0 to 1)", spec.fragment)));
    }
    cfg.fragment = spec.fragment;
    if let Some(f) = spec.age.filter(|f| !(0.0..=1.0).contains(f)) {
        return Err(Fail::Input(format!("--age {f} is out of range (0 to 1)")));
    }
    cfg.age = spec.age;
    cfg.seed = spec.seed;
    cfg.track_contents = spec.track_contents || spec.params.verify == Some(true);
    cfg.check_tlb = spec.check_tlb;
    Ok(cfg)
}

/// `spec` with everything a default stands for written out, so that two
/// specs of the same run are equal: the workload's own parameters only,
/// each given or its default; the machine, architecture and memory as
/// the run resolves them; sizes in one notation; the tunables dropped
/// when superpages are off (they apply to superpages-on runs only); the
/// policy's default mode left out.
pub fn resolved(spec: &RunSpec) -> Result<RunSpec, Fail> {
    let cfg = run_config(spec)?;
    let mut r = spec.clone();
    r.params = match r.workload.as_ref().and_then(|w| w.kind()) {
        Some(k) => k.resolve(splab_defs::workload::Side::Sim, &r.params),
        None => Default::default(),
    };
    if r.workload.as_ref().and_then(|w| w.kind()).is_none_or(|k| !k.def().pages) {
        r.pages = None;
    }
    r.system.machine.machine = Some(r.system.machine.profile_name()?);
    r.system.machine.arch = Some(cfg.arch.name.to_string());
    r.system.memory = Some(size_text(cfg.memory));
    r.system.swap = size_text(cfg.swap);
    if !r.superpages {
        r.system.sysctl.clear();
    }
    r.system.sysctl.sort();
    r.system.sysctl.dedup_by(|b, a| a.0 == b.0);
    if r.system.policy.mode.as_deref() == r.system.policy.kind.def().modes.first().copied() {
        r.system.policy.mode = None;
    }
    Ok(r)
}

/// A size in the largest unit that divides it (`8G`, `1536M`, `0`), as
/// resolved specs write sizes.
pub fn size_text(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Builds the system. Its own checks repeat ours, so an error here is still
/// about the configuration the user asked for.
pub fn system(cfg: Config) -> Result<System, Fail> {
    input(System::new(cfg))
}
