//! One run as data. A `RunSpec` says everything that decides what a run
//! of the model computes: the workload with its parameters (or a program
//! with its argv, input and sampling), the machine and architecture, the
//! policy with its tunables, memory, swap, fragmentation, ageing, the
//! core-model switches, superpages off or on, and the seed. clap builds
//! it from flags once (it is an argument group), a sweep file and Python
//! from data (it is serde-serialisable as one flat table whose keys are
//! the flags' long names with `_` for `-`), and every runner takes it.
//! How a run is carried out (progress bars, host threads, where a
//! program's output goes) is not part of it: that is `simulate::RunOpts`.
//!
//! `SystemSpec` is the part every command that boots a system shares
//! (`sim`, `compare`, `sysctl`, `check`, `bench`): `--memory`, `--policy`
//! and `--sysctl` are declared there and nowhere else.

use crate::error::Fail;
use clap::{Args, ValueEnum};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use splab_defs::workload::{self, Side, PARAMS};
use splab_defs::{WorkloadKind, WorkloadParams};
use splab_vm::policy::PolicySpec;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// What a simulated run runs: a workload of the registry, or a recorded
/// trace replayed (`trace:FILE`).
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadName {
    Kind(WorkloadKind),
    Trace(PathBuf),
}

impl WorkloadName {
    pub fn parse(text: &str) -> Result<WorkloadName, String> {
        if let Some(path) = text.strip_prefix("trace:") {
            return Ok(WorkloadName::Trace(path.into()));
        }
        WorkloadKind::parse(text, Side::Sim).map(WorkloadName::Kind).map_err(|e| format!("{e}, or trace:FILE"))
    }

    pub fn kind(&self) -> Option<WorkloadKind> {
        match self {
            WorkloadName::Kind(k) => Some(*k),
            WorkloadName::Trace(_) => None,
        }
    }
}

impl fmt::Display for WorkloadName {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            WorkloadName::Kind(k) => f.write_str(k.name()),
            WorkloadName::Trace(p) => write!(f, "trace:{}", p.display()),
        }
    }
}

/// `--superpages on|off`.
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

/// The machine to model: profile, architecture, core model.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MachineArgs {
    /// Machine profile: a built-in name or the path of a TOML file
    /// [default: sapphire-rapids; with --arch, that architecture's own
    /// built-in profile].
    #[arg(long, value_name = "PROFILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    #[arg(long, value_name = "ARCH", help = arch_help())]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Switch parts of the core model off, to see what each moves:
    /// deps (dependences through registers and loaded values), branches
    /// (mispredictions), fetch (instruction fetches that miss), window
    /// (the reorder buffer and load and store queues), mshrs (line-fill
    /// buffers, walkers, and TLB misses that trap), comma-separated
    #[arg(long, value_name = "PARTS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core_off: Option<String>,
}

/// The help of `--arch`: every architecture, from the registry.
pub fn arch_help() -> String {
    format!("Architecture of the pmap and walker: {} [default: the profile's]", splab_pmap::arch::names())
}

/// The system every command that boots one takes: the machine, memory,
/// swap, the superpage policy and the tunables set at boot.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct SystemSpec {
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Modelled physical memory (e.g. 512M, 8G, 8GiB; 16M to 256G)
    /// [default: 8G, or all the architecture addresses if less: 4G on
    /// armv7; check: 256M times the superpage size over 2 MB; bench: the
    /// footprint test's, 20G].
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Swap device size (0 = no swap); under memory pressure the page
    /// daemon pages anonymous memory out to it.
    #[arg(long, value_name = "SIZE", default_value = "0")]
    pub swap: String,
    /// Set a pmap or policy tunable at boot, e.g. vm.pmap.lp_enabled=1 or
    /// transparent_hugepage.khugepaged.max_ptes_none=64 (repeatable).
    /// `compare` applies these to its superpages-on runs only: the off run
    /// has every superpage size off.
    #[arg(long = "sysctl", value_name = "NAME=VALUE", value_parser = tunable)]
    pub sysctl: Vec<(String, String)>,
    #[arg(long, value_name = "POLICY", default_value_t = PolicySpec::DEFAULT, value_parser = policy, help = policy_help())]
    pub policy: PolicySpec,
}

impl Default for SystemSpec {
    fn default() -> SystemSpec {
        SystemSpec { machine: MachineArgs::default(), memory: None, swap: "0".into(), sysctl: Vec::new(), policy: PolicySpec::DEFAULT }
    }
}

/// The help of `--policy`: every policy, from the registry.
pub fn policy_help() -> String {
    let each: Vec<String> = splab_vm::policy::POLICIES
        .iter()
        .map(|p| if p.modes.is_empty() { format!("{}: {}", p.name, p.about) } else { format!("{}[:{}]: {}", p.name, p.modes.join("|"), p.about) })
        .collect();
    format!("Superpage policy [default: freebsd]. {}", each.join(". "))
}

/// Parses `--policy`.
pub fn policy(text: &str) -> Result<PolicySpec, String> {
    PolicySpec::parse(text)
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

/// One run of the model.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct RunSpec {
    /// Workload to run: gups, gups-mp, lat, bw, transpose, stream, index,
    /// build, forkbomb, stress, realloc, sparse, arenas, requests, or
    /// trace:FILE to replay a memory trace. Or, instead, a program after
    /// `--`.
    #[arg(value_name = "WORKLOAD", value_parser = WorkloadName::parse)]
    pub workload: Option<WorkloadName>,
    /// Any program and its arguments, after `--` (e.g. `-- xz -6 -T1 -c
    /// FILE`): run under splab's valgrind tool with every process it
    /// starts, its references simulated as it runs (no trace file). Its
    /// standard input is splab's (or --input) and its exit status splab's;
    /// its standard output goes where --output says.
    #[arg(last = true, value_name = "PROG ARGS")]
    pub program: Vec<String>,
    /// Programs: standard input from this file [default: splab's own; none
    /// in sweeps and from Python].
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Programs: simulate DETAIL references in full in every PERIOD of
    /// each process's (e.g. 1M:10M) and estimate every figure with a 95 %
    /// confidence interval. Under valgrind the rest is functional warming;
    /// under DynamoRIO the program runs natively between windows, each
    /// window preceded by WARM references of functional warming [default
    /// WARM: 32 for each line of the last-level cache, at most PERIOD -
    /// DETAIL] and the pages touched meanwhile (from the kernel).
    #[arg(long, value_name = "DETAIL:PERIOD[:WARM]")]
    pub sample: Option<String>,
    /// Programs: run the program (valgrind and every process under it) as
    /// this user, for programs that refuse to run as root (PostgreSQL's
    /// server); splab must run as root to use it.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    #[command(flatten)]
    pub params: WorkloadParams,
    /// gups, lat, transpose, stream, index: lay the workload's data out
    /// as `splab native --pages` does, in one 2 MB-aligned region whose
    /// 2 MB chunks are all in 4 KB pages (4k), all left to reservations
    /// and promotion (2m), all advised MADV_HUGEPAGE as a program asking
    /// for huge pages does (hugepage: what linux-thp:madvise acts on), or
    /// a fraction F of them, spread as the native mix spreads them
    /// (mix:F); the 4 KB chunks are advised out of superpages (a splab
    /// extension after Linux's MADV_NOHUGEPAGE). The report says how many
    /// chunks were promoted. Without it, the data are mapped as before,
    /// one mapping per array.
    #[arg(long, value_name = "4k|2m|hugepage|mix:F")]
    pub pages: Option<String>,
    #[command(flatten)]
    pub system: SystemSpec,
    /// Fraction (0 to 1) of free 2 MB blocks broken up at start.
    #[arg(long, value_name = "F", default_value_t = 0.0, allow_negative_numbers = true)]
    pub fragment: f64,
    /// Fraction (0 to 1) of free 2 MB blocks aged at start: half their
    /// frames held elsewhere, the rest free runs of the profile's
    /// `[memory] aged_run` frames (else single frames) handed out in no
    /// address order, so that 4 KB pages get scattered frames as on a host
    /// that has run for a while. Default: the profile's `[memory] aged`
    /// (a calibrated profile's, where the host's frames were scattered),
    /// else 0, a freshly booted machine.
    #[arg(long, value_name = "F", allow_negative_numbers = true)]
    pub age: Option<f64>,
    /// Seed for the fragmentation and ageing patterns.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Keep the values of written words.
    #[arg(long)]
    pub track_contents: bool,
    /// Check every TLB hit against the page tables.
    #[arg(long)]
    pub check_tlb: bool,
    /// Superpages on (set by `sim --superpages`; `compare` runs both).
    #[arg(skip = true)]
    pub superpages: bool,
}

impl Default for RunSpec {
    fn default() -> RunSpec {
        RunSpec {
            workload: None,
            program: Vec::new(),
            input: None,
            sample: None,
            user: None,
            params: WorkloadParams::default(),
            pages: None,
            system: SystemSpec::default(),
            fragment: 0.0,
            age: None,
            seed: 1,
            track_contents: false,
            check_tlb: false,
            superpages: true,
        }
    }
}

impl RunSpec {
    /// A run of `kind` with its default parameters on the default machine.
    pub fn workload(kind: WorkloadKind) -> RunSpec {
        RunSpec { workload: Some(WorkloadName::Kind(kind)), ..RunSpec::default() }
    }

    /// How a run names what it ran: the workload, or the program's command.
    pub fn label(&self) -> String {
        match &self.workload {
            Some(w) => w.to_string(),
            None => self.program.join(" "),
        }
    }

    /// The workload's parameters in the order its command line gives them.
    fn param_order(&self) -> &'static [&'static str] {
        self.workload.as_ref().and_then(WorkloadName::kind).map_or(&[], |k| k.params(Side::Sim))
    }

    /// The `splab COMMAND` line that runs this spec (for people to read and
    /// copy; nothing parses it back): the workload, the parameters set in
    /// its order, then the other fields that differ from their defaults.
    pub fn command_line(&self, command: &str) -> String {
        let d = RunSpec::default();
        let mut w: Vec<String> = vec!["splab".into(), command.into()];
        if let Some(n) = &self.workload {
            w.push(n.to_string());
        }
        w.extend(self.params.flags(self.param_order()));
        let mut opt = |flag: &str, v: Option<String>| {
            if let Some(v) = v {
                w.push(format!("--{flag}"));
                w.push(v);
            }
        };
        opt("pages", self.pages.clone());
        opt("machine", self.system.machine.machine.clone());
        opt("arch", self.system.machine.arch.clone());
        opt("core-off", self.system.machine.core_off.clone());
        opt("memory", self.system.memory.clone());
        opt("swap", (self.system.swap != d.system.swap).then(|| self.system.swap.clone()));
        opt("policy", (self.system.policy != d.system.policy).then(|| self.system.policy.to_string()));
        for (n, v) in &self.system.sysctl {
            opt("sysctl", Some(format!("{n}={v}")));
        }
        opt("fragment", (self.fragment != d.fragment).then(|| self.fragment.to_string()));
        opt("age", self.age.map(|a| a.to_string()));
        opt("seed", (self.seed != d.seed).then(|| self.seed.to_string()));
        opt("superpages", (!self.superpages && command == "sim").then(|| "off".into()));
        opt("input", self.input.as_ref().map(|p| p.display().to_string()));
        opt("sample", self.sample.clone());
        opt("user", self.user.clone());
        if self.track_contents {
            w.push("--track-contents".into());
        }
        if self.check_tlb {
            w.push("--check-tlb".into());
        }
        if !self.program.is_empty() {
            w.push("--".into());
            w.extend(self.program.iter().cloned());
        }
        w.iter().map(|a| crate::output::shell_word(a)).collect::<Vec<_>>().join(" ")
    }

    /// The spec as one flat JSON object with its keys sorted: the form the
    /// store keys runs by.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// `to_value` as text.
    pub fn canonical(&self) -> String {
        self.to_value().to_string()
    }

    /// A spec from a flat table (a sweep file's, Python's dict); errors
    /// name the bad key or value.
    pub fn from_value(v: Value) -> Result<RunSpec, Fail> {
        serde_json::from_value(v).map_err(|e| Fail::Input(e.to_string()))
    }
}

/// The fields of a spec beside the workload's parameters, as the flat
/// table names them.
#[derive(Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Fields {
    #[serde(skip_serializing_if = "Option::is_none")]
    workload: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    program: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sample: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pages: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    machine: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    core_off: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<String>,
    swap: Option<String>,
    /// Tunables by name; a value may be a number or text.
    sysctl: BTreeMap<String, Scalar>,
    policy: Option<String>,
    fragment: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    age: Option<f64>,
    seed: Option<u64>,
    superpages: Option<OnOffValue>,
    track_contents: bool,
    check_tlb: bool,
}

/// A tunable's value as data gives it: a number, a boolean or text.
#[derive(Serialize, Deserialize, Clone)]
#[serde(untagged)]
enum Scalar {
    Int(i64),
    Bool(bool),
    Text(String),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Scalar::Int(i) => i.to_string(),
            Scalar::Bool(b) => (*b as u8).to_string(),
            Scalar::Text(t) => t.clone(),
        }
    }
}

/// Superpages as data gives them: true/false or "on"/"off".
#[derive(Serialize, Deserialize, Clone, Copy)]
#[serde(untagged)]
enum OnOffValue {
    Bool(bool),
    Text(OnOffText),
}

#[derive(Serialize, Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum OnOffText {
    On,
    Off,
}

impl Serialize for RunSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let f = Fields {
            workload: self.workload.as_ref().map(|w| w.to_string()),
            program: self.program.clone(),
            input: self.input.clone(),
            sample: self.sample.clone(),
            user: self.user.clone(),
            pages: self.pages.clone(),
            machine: self.system.machine.machine.clone(),
            arch: self.system.machine.arch.clone(),
            core_off: self.system.machine.core_off.clone(),
            memory: self.system.memory.clone(),
            swap: Some(self.system.swap.clone()),
            sysctl: self.system.sysctl.iter().map(|(n, v)| (n.clone(), Scalar::Text(v.clone()))).collect(),
            policy: Some(self.system.policy.to_string()),
            fragment: Some(self.fragment),
            age: self.age,
            seed: Some(self.seed),
            superpages: Some(OnOffValue::Bool(self.superpages)),
            track_contents: self.track_contents,
            check_tlb: self.check_tlb,
        };
        let mut m = match serde_json::to_value(&f) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        if let Ok(Value::Object(p)) = serde_json::to_value(&self.params) {
            m.extend(p);
        }
        // serde_json's map keeps its keys sorted: one canonical form.
        Value::Object(m).serialize(s)
    }
}

impl<'de> Deserialize<'de> for RunSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RunSpec, D::Error> {
        use serde::de::Error;
        let Value::Object(mut all) = Value::deserialize(d)? else {
            return Err(D::Error::custom("a run spec is a table of fields (workload, arch, policy, ...)"));
        };
        let mut params = Map::new();
        for name in PARAMS {
            if let Some(v) = all.remove(*name) {
                params.insert(name.to_string(), v);
            }
        }
        let f: Fields = serde_json::from_value(Value::Object(all)).map_err(|e| D::Error::custom(with_params_known(e.to_string())))?;
        let params: WorkloadParams = serde_json::from_value(Value::Object(params)).map_err(D::Error::custom)?;
        let workload = f.workload.as_deref().map(WorkloadName::parse).transpose().map_err(|e| D::Error::custom(format!("workload: {e}")))?;
        let policy = match f.policy.as_deref() {
            Some(p) => PolicySpec::parse(p).map_err(|e| D::Error::custom(format!("policy: {e}")))?,
            None => PolicySpec::DEFAULT,
        };
        let d0 = RunSpec::default();
        Ok(RunSpec {
            workload,
            program: f.program,
            input: f.input,
            sample: f.sample,
            user: f.user,
            params,
            pages: f.pages,
            system: SystemSpec {
                machine: MachineArgs { machine: f.machine, arch: f.arch, core_off: f.core_off },
                memory: f.memory,
                swap: f.swap.unwrap_or(d0.system.swap),
                sysctl: f.sysctl.iter().map(|(n, v)| (n.clone(), v.text())).collect(),
                policy,
            },
            fragment: f.fragment.unwrap_or(d0.fragment),
            age: f.age,
            seed: f.seed.unwrap_or(d0.seed),
            track_contents: f.track_contents,
            check_tlb: f.check_tlb,
            superpages: match f.superpages {
                None => d0.superpages,
                Some(OnOffValue::Bool(b)) => b,
                Some(OnOffValue::Text(t)) => matches!(t, OnOffText::On),
            },
        })
    }
}

/// serde's unknown-field message with the workloads' parameters added to
/// what it lists as expected.
fn with_params_known(e: String) -> String {
    if e.starts_with("unknown field") {
        format!("{e}, or a workload parameter: {}", PARAMS.join(", "))
    } else {
        e
    }
}

/// The names of the workloads, for help and errors.
pub fn workload_names() -> String {
    workload::names(Side::Sim).join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_round_trips_through_its_flat_table() {
        let mut s = RunSpec::workload(WorkloadKind::Gups);
        s.params.log2_table = Some(16);
        s.system.policy = PolicySpec::parse("linux-thp:madvise").unwrap();
        s.system.sysctl = vec![("vm.pmap.pg_ps_enabled".into(), "1".into())];
        s.superpages = false;
        let v = s.to_value();
        assert_eq!(v["log2_table"], 16);
        assert_eq!(v["policy"], "linux-thp:madvise");
        assert_eq!(RunSpec::from_value(v).ok(), Some(s));
    }

    #[test]
    fn data_may_say_it_as_people_do() {
        let v = serde_json::json!({"workload": "lat", "max_size": "1M", "superpages": "off", "sysctl": {"vm.pmap.pg_ps_enabled": 0}});
        let s = RunSpec::from_value(v).ok().unwrap();
        assert!(!s.superpages);
        assert_eq!(s.system.sysctl, vec![("vm.pmap.pg_ps_enabled".to_string(), "0".to_string())]);
        let Err(Fail::Input(e)) = RunSpec::from_value(serde_json::json!({"workload": "gups", "log2_tabel": 3})) else { panic!() };
        assert!(e.contains("log2_tabel"), "{e}");
        let Err(Fail::Input(e)) = RunSpec::from_value(serde_json::json!({"workload": "gupz"})) else { panic!() };
        assert!(e.contains("gupz"), "{e}");
        let Err(Fail::Input(e)) = RunSpec::from_value(serde_json::json!({"policy": "bsd"})) else { panic!() };
        assert!(e.contains("bsd"), "{e}");
    }

    #[test]
    fn the_command_line_says_what_differs() {
        let mut s = RunSpec::workload(WorkloadKind::Lat);
        s.params.max_size = Some("256M".into());
        s.params.loads = Some(20000);
        s.system.machine.machine = Some("armada-xp".into());
        assert_eq!(s.command_line("compare"), "splab compare lat --max-size 256M --loads 20000 --machine armada-xp");
    }
}
