//! Superpage policies: three designs of the same mechanism.
//!
//! A policy decides what a fault allocates (one page; a page from a
//! reservation; an eager block of some order, falling back order by
//! order), when base pages become a superpage (at full population, by a
//! background scan with a threshold, on request, never), and when a
//! superpage is split (partial unmap or protect, underuse, memory
//! pressure). The mechanisms it uses are the kernel's (`superpage.rs`:
//! allocate and fill a block, map it, collapse a range, split one) and the
//! pmap's (promotion on full population, demotion, direct superpage
//! mappings); the policy only chooses.
//!
//! - `freebsd`: reservations, promotion when populated (the default).
//! - `shimizu`: Shimizu's Linux patch, the largest order that fits at the
//!   fault, eagerly allocated and zeroed, falling back order by order.
//! - `linux`: Linux THP today: a huge page (or an mTHP size) at the fault
//!   where the VMA allows it, khugepaged collapsing in the background,
//!   MADV_COLLAPSE, deferred splitting of partially unmapped huge pages,
//!   and the shrinker that splits underused ones.
//!
//! The kernel holds its policy as a `Box<dyn Policy>` and lends itself to
//! it for each decision (`Kernel::with_policy`).

pub mod freebsd;
pub mod linux;
pub mod shimizu;

use crate::fault::FaultError;
use crate::kernel::{Kernel, Pid};
use crate::map::{Errno, MapEntry};
use crate::page::ObjId;
use crate::pmap::{PmapId, Prot};
use crate::sysctl::Sysctls;
use splab_hw::machine::Machine;

/// A fault that needs a new zero-filled page in private anonymous memory
/// with no backing object: where an eager policy may allocate more.
#[derive(Clone, Debug)]
pub struct ZeroFill {
    pub pid: Pid,
    pub pm: PmapId,
    /// The faulting address, rounded down to its base page.
    pub va: u64,
    pub entry: MapEntry,
    pub object: ObjId,
    /// The object offset of `va`.
    pub pindex: u32,
    /// The protection to map with, and the access that faulted.
    pub prot: Prot,
    pub access: Prot,
}

/// What a policy did with a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// Mapped (a block around the faulting page).
    Yes,
    /// Nothing: the fault takes one page (from a reservation if the
    /// policy uses them).
    No,
}

/// A policy tunable that is a switch: 1 on, 0 off.
pub(crate) fn switch(name: &str, value: &str) -> Result<bool, String> {
    match value.parse::<i64>() {
        Ok(0) => Ok(false),
        Ok(1) => Ok(true),
        Ok(v) => Err(format!("{name} must be 0 or 1, not {v}")),
        Err(_) => Err(format!("{name} takes a number, not {value:?}")),
    }
}

/// One policy behind one interface.
pub trait Policy: Send {
    /// Which policy of the registry it is.
    fn kind(&self) -> PolicyKind;

    /// The name `--policy` takes.
    fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Whether object pages come from reservations (and so whether the
    /// pmap can promote them when they are fully populated).
    fn reservations(&self) -> bool;

    /// A fault needs a new zero-filled anonymous page (`f`): the policy
    /// may allocate, fill and map a block around it instead.
    fn zero_fill(&mut self, _k: &mut Kernel, _hw: &mut Machine, _f: &ZeroFill) -> Result<Handled, FaultError> {
        Ok(Handled::No)
    }

    /// Background work (khugepaged) due by simulated time `now_ns`.
    fn background(&mut self, _k: &mut Kernel, _hw: &mut Machine, _now_ns: f64) {}

    /// The simulated time of the next background work, if any is planned.
    fn next_background_ns(&self) -> Option<f64> {
        None
    }

    /// Memory is short (the page daemon runs): split what the policy
    /// splits under pressure.
    fn reclaim(&mut self, _k: &mut Kernel, _hw: &mut Machine) {}

    /// MADV_COLLAPSE on [start, end) of `pid`'s address space.
    fn collapse(&mut self, _k: &mut Kernel, _hw: &mut Machine, _pid: Pid, _start: u64, _end: u64) -> Result<(), Errno> {
        Err(Errno::EINVAL)
    }

    /// Whether a fault on a resident page of a fully populated
    /// reservation maps the whole superpage at once (`fault.rs`,
    /// vm_fault_soft_fast's superpage case).
    fn soft_fault_superpages(&self) -> bool {
        true
    }

    /// Whether MADV_DONTNEED frees private anonymous pages at once, so
    /// that they read as zeros afterwards (Linux), rather than lowering
    /// their priority (FreeBSD).
    fn dontneed_frees(&self) -> bool {
        false
    }

    /// Sets one of the policy's tunables; None if it has no tunable of
    /// that name.
    fn set_tunable(&mut self, _name: &str, _value: &str) -> Option<Result<(), String>> {
        None
    }

    /// The names of the policy's tunables (for messages).
    fn tunable_names(&self) -> Vec<String> {
        Vec::new()
    }

    /// Its tunables and counters, under its system's names.
    fn sysctls(&self, _k: &Kernel, _out: &mut Sysctls) {}

    /// A per-process view of its superpages, in the shape of its
    /// system's procfs file.
    fn procfs(&self, _k: &Kernel, _pid: Pid) -> Option<String> {
        None
    }

    /// Checks the policy's own invariants against the kernel's state.
    fn check(&self, _k: &Kernel) -> Result<(), String> {
        Ok(())
    }
}

/// A policy of the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    FreeBsd,
    Shimizu,
    LinuxThp,
}

/// One policy as the registry knows it.
pub struct PolicyDef {
    pub kind: PolicyKind,
    /// The name `--policy` takes.
    pub name: &'static str,
    pub about: &'static str,
    /// The modes it takes after a colon, the default first (none: it
    /// takes no mode).
    pub modes: &'static [&'static str],
}

/// Every policy, in the order help lists them. Nothing outside this
/// registry names a policy by a string: the rest holds a `PolicyKind` or
/// a `PolicySpec`.
pub static POLICIES: [PolicyDef; 3] = [
    PolicyDef { kind: PolicyKind::FreeBsd, name: "freebsd", about: "FreeBSD's reservations: a page from a reservation at each fault, promotion when a reservation is fully populated", modes: &[] },
    PolicyDef { kind: PolicyKind::Shimizu, name: "shimizu", about: "Shimizu's Linux patch: the largest page order that fits at the fault, allocated and zeroed eagerly, falling back order by order", modes: &[] },
    PolicyDef {
        kind: PolicyKind::LinuxThp,
        name: "linux-thp",
        about: "Linux THP: a huge page at the fault where allowed (enabled always|madvise|never), mTHP sizes, khugepaged, MADV_COLLAPSE, deferred split, the underused shrinker",
        modes: &["always", "madvise", "never"],
    },
];

impl PolicyKind {
    pub fn def(self) -> &'static PolicyDef {
        // The registry is in the enum's order (a test checks it).
        &POLICIES[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.def().name
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy with its mode, as `--policy` names it (`freebsd`,
/// `linux-thp:madvise`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicySpec {
    pub kind: PolicyKind,
    /// The text after the colon, if any (`linux::LinuxThp::from_mode`
    /// reads it).
    pub mode: Option<String>,
}

impl PolicySpec {
    pub const DEFAULT: PolicySpec = PolicySpec { kind: PolicyKind::FreeBsd, mode: None };

    /// Parses `name[:mode]`; the error names the text and the known
    /// policies. The policy is built once to check its mode.
    pub fn parse(spec: &str) -> Result<PolicySpec, String> {
        let (name, mode) = match spec.split_once(':') {
            Some((n, m)) => (n, Some(m)),
            None => (spec, None),
        };
        let known = || POLICIES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
        let def = POLICIES.iter().find(|p| p.name == name).ok_or_else(|| format!("unknown policy {spec:?} (known: {})", known()))?;
        if let (Some(m), []) = (mode, def.modes) {
            let with = POLICIES.iter().filter(|p| !p.modes.is_empty()).flat_map(|p| p.modes.iter().map(move |m| format!("{}:{m}", p.name))).collect::<Vec<_>>();
            return Err(format!("policy {spec:?}: {name} has no mode {m:?} (only these take one: {})", with.join(", ")));
        }
        let p = PolicySpec { kind: def.kind, mode: mode.map(str::to_string) };
        p.build()?;
        Ok(p)
    }

    /// A new policy of this kind and mode.
    pub fn build(&self) -> Result<Box<dyn Policy>, String> {
        Ok(match self.kind {
            PolicyKind::FreeBsd => Box::<freebsd::FreeBsd>::default(),
            PolicyKind::Shimizu => Box::new(shimizu::Shimizu::default()),
            PolicyKind::LinuxThp => Box::new(linux::LinuxThp::from_mode(self.mode.as_deref().unwrap_or(self.kind.def().modes[0]))?),
        })
    }
}

impl std::fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match &self.mode {
            Some(m) => write!(f, "{}:{m}", self.kind.name()),
            None => f.write_str(self.kind.name()),
        }
    }
}

/// Builds a policy from its name, with an optional mode after a colon
/// (`linux-thp:always`, `linux-thp:madvise`, `linux-thp:never`: Linux's
/// `enabled`; `linux-thp:madvise+khugepaged`... see `linux::LinuxThp::from_mode`).
pub fn by_name(spec: &str) -> Result<Box<dyn Policy>, String> {
    PolicySpec::parse(spec)?.build()
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    #[test]
    fn the_registry_is_in_the_enums_order_and_names_round_trip() {
        for (i, p) in POLICIES.iter().enumerate() {
            assert_eq!(p.kind as usize, i, "{}", p.name);
            let spec = PolicySpec::parse(p.name).unwrap();
            assert_eq!(spec.build().unwrap().kind(), p.kind);
            assert_eq!(spec.to_string(), p.name);
        }
        assert_eq!(PolicySpec::parse("linux-thp:madvise").unwrap().to_string(), "linux-thp:madvise");
        assert!(PolicySpec::parse("freebsd:always").unwrap_err().contains("no mode"));
        assert!(PolicySpec::parse("nope").unwrap_err().contains("\"nope\""));
        assert!(PolicySpec::parse("linux-thp:sometimes").is_err());
    }
}
