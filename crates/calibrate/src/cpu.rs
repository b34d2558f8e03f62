//! What the processor says about itself through CPUID, and whether it runs
//! under a hypervisor.
//!
//! CPUID is read, not trusted: inside a guest the hypervisor may pass the
//! host's values through, change them or hide leaves. The calibration uses
//! these readings only as cross-checks and for what cannot be measured
//! (associativity), and says which is which.

use serde::{Deserialize, Serialize};

/// One CPUID leaf and subleaf: (eax, ebx, ecx, edx).
#[cfg(target_arch = "x86_64")]
fn cpuid(leaf: u32, sub: u32) -> (u32, u32, u32, u32) {
    // CPUID exists on every x86-64 processor; unknown leaves return zeros
    // or the highest basic leaf's values, never fault.
    let r = std::arch::x86_64::__cpuid_count(leaf, sub);
    (r.eax, r.ebx, r.ecx, r.edx)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid(_leaf: u32, _sub: u32) -> (u32, u32, u32, u32) {
    (0, 0, 0, 0)
}

fn max_basic_leaf() -> u32 {
    cpuid(0, 0).0
}

/// A cache as CPUID leaf 4 (deterministic cache parameters) describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheLeaf {
    pub level: u8,
    /// "data", "instruction" or "unified".
    pub kind: String,
    pub size_bytes: u64,
    pub ways: u32,
    pub line: u32,
}

/// The caches of leaf 4 (Intel) or of leaf 0x8000001D (AMD, the same
/// layout: AMD's manual reserves leaf 4), in subleaf order.
pub fn caches() -> Vec<CacheLeaf> {
    let mut v = Vec::new();
    if !cfg!(target_arch = "x86_64") {
        return v;
    }
    let amd = signature().is_some_and(|s| s.0 == "AuthenticAMD");
    let leaf = if amd { 0x8000_001d } else { 4 };
    if (amd && cpuid(0x8000_0000, 0).0 < leaf) || (!amd && max_basic_leaf() < 4) {
        return v;
    }
    for sub in 0..16 {
        let (a, b, c, _) = cpuid(leaf, sub);
        let kind = match a & 0x1f {
            0 => break,
            1 => "data",
            2 => "instruction",
            3 => "unified",
            _ => continue,
        };
        let ways = (b >> 22) + 1;
        let parts = ((b >> 12) & 0x3ff) + 1;
        let line = (b & 0xfff) + 1;
        let sets = c as u64 + 1;
        v.push(CacheLeaf { level: ((a >> 5) & 7) as u8, kind: kind.into(), size_bytes: ways as u64 * parts as u64 * line as u64 * sets, ways, line });
    }
    v
}

/// A TLB as CPUID leaf 0x18 (deterministic address translation
/// parameters, Intel) describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TlbLeaf {
    pub level: u8,
    /// "data", "instruction", "unified", "load" or "store".
    pub kind: String,
    /// Page sizes it holds: "4K", "2M", "4M", "1G".
    pub sizes: Vec<String>,
    pub entries: u32,
    pub ways: u32,
    pub fully_associative: bool,
}

/// The TLBs of leaf 0x18 (empty where the leaf is absent, as on AMD).
pub fn tlbs() -> Vec<TlbLeaf> {
    let mut v = Vec::new();
    if !cfg!(target_arch = "x86_64") || max_basic_leaf() < 0x18 {
        return v;
    }
    let last = cpuid(0x18, 0).0.min(64);
    for sub in 0..=last {
        let (_, b, c, d) = cpuid(0x18, sub);
        let kind = match d & 0x1f {
            1 => "data",
            2 => "instruction",
            3 => "unified",
            4 => "load",
            5 => "store",
            _ => continue,
        };
        let sizes: Vec<String> = [(0, "4K"), (1, "2M"), (2, "4M"), (3, "1G")].iter().filter(|(bit, _)| b & (1 << bit) != 0).map(|(_, s)| s.to_string()).collect();
        let ways = b >> 16;
        let full = d & (1 << 8) != 0;
        v.push(TlbLeaf { level: ((d >> 5) & 7) as u8, kind: kind.into(), sizes, entries: ways * c, ways, fully_associative: full });
    }
    v
}

/// The processor's vendor string (leaf 0) and its display family and
/// model (leaf 1, the extended fields folded in as the vendors' manuals
/// say), or None where there is no CPUID.
pub fn signature() -> Option<(String, u32, u32)> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let (_, b, c, d) = cpuid(0, 0);
    let vendor: String = [b, d, c].iter().flat_map(|r| r.to_le_bytes()).map(char::from).collect();
    let (a, _, _, _) = cpuid(1, 0);
    let base_family = (a >> 8) & 0xf;
    let family = if base_family == 0xf { base_family + ((a >> 20) & 0xff) } else { base_family };
    let model = if base_family == 0xf || base_family == 6 { ((a >> 16) & 0xf) << 4 | ((a >> 4) & 0xf) } else { (a >> 4) & 0xf };
    Some((vendor, family, model))
}

/// The built-in profile of the machines most like a processor of this
/// signature (vendor, family, model), for the values calibrate cannot
/// measure; None where none is known.
pub fn closest_profile(vendor: &str, family: u32, model: u32) -> Option<&'static str> {
    match (vendor, family, model) {
        // Zen 3 and Zen 4 (family 0x19): Zen 4's, the nearer of the two.
        ("AuthenticAMD", 0x19, _) => Some("amd-zen4"),
        ("GenuineIntel", 6, 207) => Some("intel-emerald-rapids"),
        ("GenuineIntel", 6, 143) => Some("sapphire-rapids"),
        // Skylake-SP and Cascade Lake share model 85.
        ("GenuineIntel", 6, 85) => Some("intel-cascade-lake"),
        ("GenuineIntel", 6, 63) => Some("intel-haswell-ex"),
        _ => None,
    }
}

/// Base and maximum frequency in MHz from leaf 0x16 (zeros when the leaf
/// is absent or a hypervisor hides it).
pub fn frequency_leaf() -> (u32, u32) {
    if !cfg!(target_arch = "x86_64") || max_basic_leaf() < 0x16 {
        return (0, 0);
    }
    let (a, b, _, _) = cpuid(0x16, 0);
    (a & 0xffff, b & 0xffff)
}

/// The processor's brand string (leaves 0x80000002..4).
pub fn brand() -> String {
    if !cfg!(target_arch = "x86_64") || cpuid(0x8000_0000, 0).0 < 0x8000_0004 {
        return String::new();
    }
    let mut bytes = Vec::new();
    for leaf in 0x8000_0002..=0x8000_0004u32 {
        let (a, b, c, d) = cpuid(leaf, 0);
        for r in [a, b, c, d] {
            bytes.extend_from_slice(&r.to_le_bytes());
        }
    }
    String::from_utf8_lossy(&bytes).trim_matches(char::from(0)).trim().to_string()
}

/// Each sign of a hypervisor, read independently, and the verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Virt {
    /// CPUID leaf 1 ECX bit 31 ("hypervisor present").
    pub cpuid_bit: bool,
    /// The vendor signature of leaf 0x40000000 ("KVMKVMKVM", "Microsoft Hv",
    /// "VMwareVMware", ...), when the bit is set.
    pub cpuid_vendor: Option<String>,
    /// `hypervisor` among the flags of /proc/cpuinfo.
    pub cpuinfo_flag: bool,
    /// /sys/hypervisor/type, when it exists (Xen).
    pub sys_hypervisor: Option<String>,
    /// /sys/class/dmi/id/product_name and sys_vendor, when they exist.
    pub dmi_product: Option<String>,
    pub dmi_vendor: Option<String>,
    /// Any of the signs above (a DMI product naming a known hypervisor
    /// counts; a bare DMI product does not).
    pub guest: bool,
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// DMI product or vendor names that mean a virtual machine.
const VM_DMI: &[&str] = &["kvm", "qemu", "virtualbox", "vmware", "virtual machine", "hvm domu", "xen", "bochs", "google compute engine", "amazon ec2", "openstack", "firecracker", "cloud hypervisor"];

/// Whether DMI text names a hypervisor's virtual hardware.
pub fn dmi_says_vm(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    VM_DMI.iter().any(|k| t.contains(k))
}

/// Whether a /proc/cpuinfo text lists the `hypervisor` flag.
pub fn cpuinfo_has_hypervisor(cpuinfo: &str) -> bool {
    cpuinfo.lines().filter(|l| l.starts_with("flags")).any(|l| l.split_whitespace().any(|w| w == "hypervisor"))
}

/// Looks for a hypervisor every way this host allows.
pub fn detect_virt() -> Virt {
    let mut v = Virt::default();
    if cfg!(target_arch = "x86_64") && max_basic_leaf() >= 1 {
        v.cpuid_bit = cpuid(1, 0).2 & (1 << 31) != 0;
        if v.cpuid_bit {
            let (_, b, c, d) = cpuid(0x4000_0000, 0);
            let mut s = Vec::new();
            for r in [b, c, d] {
                s.extend_from_slice(&r.to_le_bytes());
            }
            let s = String::from_utf8_lossy(&s).trim_matches(char::from(0)).trim().to_string();
            v.cpuid_vendor = Some(s).filter(|s| !s.is_empty());
        }
    }
    v.cpuinfo_flag = std::fs::read_to_string("/proc/cpuinfo").map(|t| cpuinfo_has_hypervisor(&t)).unwrap_or(false);
    v.sys_hypervisor = read_trim("/sys/hypervisor/type");
    v.dmi_product = read_trim("/sys/class/dmi/id/product_name");
    v.dmi_vendor = read_trim("/sys/class/dmi/id/sys_vendor");
    let dmi_vm = [&v.dmi_product, &v.dmi_vendor].iter().any(|d| d.as_deref().is_some_and(dmi_says_vm));
    v.guest = v.cpuid_bit || v.cpuinfo_flag || v.sys_hypervisor.is_some() || dmi_vm;
    v
}

impl Virt {
    /// The signs found, for a report line.
    pub fn signs(&self) -> Vec<String> {
        let mut s = Vec::new();
        if self.cpuid_bit {
            s.push(match &self.cpuid_vendor {
                Some(v) => format!("CPUID.1:ECX[31] set, leaf 0x40000000 vendor {v:?}"),
                None => "CPUID.1:ECX[31] set".into(),
            });
        }
        if self.cpuinfo_flag {
            s.push("/proc/cpuinfo flag \"hypervisor\"".into());
        }
        if let Some(t) = &self.sys_hypervisor {
            s.push(format!("/sys/hypervisor/type {t:?}"));
        }
        for d in [&self.dmi_product, &self.dmi_vendor].into_iter().flatten() {
            if dmi_says_vm(d) {
                s.push(format!("DMI {d:?}"));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_hypervisor_flag_and_dmi_names() {
        assert!(cpuinfo_has_hypervisor("processor : 0\nflags\t\t: fpu vme hypervisor lahf_lm\n"));
        assert!(!cpuinfo_has_hypervisor("flags\t\t: fpu vme hypervisor_x lahf_lm\n"));
        assert!(dmi_says_vm("KVM"));
        assert!(dmi_says_vm("Standard PC (Q35 + ICH9, 2009) QEMU"));
        assert!(dmi_says_vm("Google Compute Engine"));
        assert!(!dmi_says_vm("PowerEdge R750"));
    }

    #[test]
    fn cpuid_readings_are_consistent() {
        for c in caches() {
            assert!(c.size_bytes > 0 && c.ways > 0 && c.line > 0, "{c:?}");
        }
        for t in tlbs() {
            assert!(t.ways > 0 || t.fully_associative, "{t:?}");
        }
        let v = detect_virt();
        assert_eq!(v.guest, v.cpuid_bit || v.cpuinfo_flag || v.sys_hypervisor.is_some() || !v.signs().is_empty());
    }
}
