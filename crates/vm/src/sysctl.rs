//! sysctl names and values, in FreeBSD's `name: value` form.

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SysctlValue {
    Int(i64),
    Text(String),
}

impl std::fmt::Display for SysctlValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SysctlValue::Int(v) => write!(f, "{v}"),
            SysctlValue::Text(s) => write!(f, "{s}"),
        }
    }
}

/// Whether a sysctl counts superpage events: a pmap's promotions, failed
/// promotions, demotions and direct mappings of any size, or a policy's
/// superpages allocated at fault (and its fallbacks), or Linux's
/// `thp_fault_alloc`.
pub fn is_superpage_counter(name: &str) -> bool {
    let tail = name.rsplit('.').next().unwrap_or("");
    (name.starts_with("vm.pmap.") && ["promotions", "p_failures", "mappings", "demotions"].contains(&tail))
        || name.starts_with("vm.superpages.alloc.")
        || name.starts_with("vm.superpages.fallback.")
        || name == "thp_fault_alloc"
}

/// An ordered set of sysctls with a one-line description each.
#[derive(Clone, Debug, Default)]
pub struct Sysctls {
    pub values: BTreeMap<String, SysctlValue>,
    pub descr: BTreeMap<String, &'static str>,
}

impl Sysctls {
    pub fn int(&mut self, name: &str, v: u64, descr: &'static str) {
        self.values.insert(name.to_string(), SysctlValue::Int(v as i64));
        self.descr.insert(name.to_string(), descr);
    }
    pub fn text(&mut self, name: &str, v: String, descr: &'static str) {
        self.values.insert(name.to_string(), SysctlValue::Text(v));
        self.descr.insert(name.to_string(), descr);
    }
    pub fn get_int(&self, name: &str) -> Option<i64> {
        match self.values.get(name)? {
            SysctlValue::Int(v) => Some(*v),
            SysctlValue::Text(_) => None,
        }
    }
    /// FreeBSD `sysctl` output: one `name: value` line each.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.values {
            s.push_str(&format!("{k}: {v}\n"));
        }
        s
    }
}
