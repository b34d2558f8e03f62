//! Shimizu's superpage patch for Linux 2.5/2.6 (Alpha: 8 KB base pages,
//! 64 KB, 512 KB and 4 MB superpages by granularity hint, orders 0, 3, 6,
//! 9; i386: 4 KB and 4 MB). At a fault on private anonymous memory it
//! allocates the largest page order whose aligned block fits inside the
//! mapping's virtual range with nothing of the block resident yet, zeroes
//! it whole, and maps it with one entry; when no free contiguous block of
//! an order exists it falls back to the next smaller order, and when no
//! page at all is left it calls the swapper (the fault waits for the page
//! daemon, as every fault here does). A superpage is downgraded to base
//! pages before part of it is unmapped or protected (adj_sp_range: the
//! pmap's demotion). There is no promotion of base pages and no
//! reservation: what was not allocated big at the fault stays small.
//!
//! Its cost is the eager allocation: a fault zeroes the whole block,
//! whether or not the program touches it, and memory the program never
//! uses is resident.
//!
//! Tunables (splab's names for the patch's sysctl switches):
//! `vm.superpages.enabled` (0 or 1) and `vm.superpages.max_order` (the
//! largest order tried). Counters per order: `vm.superpages.alloc.SIZE`
//! (blocks allocated at faults) and `vm.superpages.fallback.SIZE` (blocks
//! of that size that fitted but found no free block); downgrades are the
//! pmap's demotion counters.

use super::{Handled, Policy, ZeroFill};
use crate::fault::FaultError;
use crate::kernel::{Kernel, Pid};
use crate::sysctl::Sysctls;
use splab_hw::machine::Machine;
use std::collections::BTreeMap;

pub struct Shimizu {
    enabled: bool,
    /// The largest order tried (None: every size the pmap maps).
    max_order: Option<u32>,
    /// Per order: blocks allocated at faults, and fallbacks from it.
    alloc: BTreeMap<u32, u64>,
    fallback: BTreeMap<u32, u64>,
    /// Per process and order, blocks allocated (the procfs view).
    per_proc: BTreeMap<(Pid, u32), u64>,
}

impl Default for Shimizu {
    fn default() -> Shimizu {
        Shimizu { enabled: true, max_order: None, alloc: BTreeMap::new(), fallback: BTreeMap::new(), per_proc: BTreeMap::new() }
    }
}

/// A block size as the counters name it (64k, 512k, 4m).
fn size_name(k: &Kernel, order: u32) -> String {
    let bytes = k.page_size() << order;
    if bytes >= 1 << 20 {
        format!("{}m", bytes >> 20)
    } else {
        format!("{}k", bytes >> 10)
    }
}

impl Policy for Shimizu {
    fn kind(&self) -> super::PolicyKind {
        super::PolicyKind::Shimizu
    }

    fn reservations(&self) -> bool {
        false
    }

    /// The patch is Linux's, whose MADV_DONTNEED has freed private
    /// anonymous pages at once (zap_page_range) since before 2.6.
    fn dontneed_frees(&self) -> bool {
        true
    }

    fn zero_fill(&mut self, k: &mut Kernel, hw: &mut Machine, f: &ZeroFill) -> Result<Handled, FaultError> {
        if !self.enabled || !k.pmap.superpages_enabled() {
            return Ok(Handled::No);
        }
        for size in k.superpage_sizes().into_iter().rev() {
            if self.max_order.is_some_and(|m| size.order > m) || !k.block_fits(f, size.order) {
                continue;
            }
            let Some(base) = k.fill_block(hw, f, size.order) else {
                *self.fallback.entry(size.order).or_default() += 1;
                continue;
            };
            let bytes = k.page_size() << size.order;
            k.map_block(hw, f.pm, f.va & !(bytes - 1), base, size.order, Some(size.psind), f.prot, f.access)?;
            *self.alloc.entry(size.order).or_default() += 1;
            *self.per_proc.entry((f.pid, size.order)).or_default() += 1;
            return Ok(Handled::Yes);
        }
        Ok(Handled::No)
    }

    fn set_tunable(&mut self, name: &str, value: &str) -> Option<Result<(), String>> {
        let int = || value.parse::<i64>().map_err(|_| format!("{name} takes a number, not {value:?}"));
        Some(match name {
            "vm.superpages.enabled" => super::switch(name, value).map(|on| self.enabled = on),
            "vm.superpages.max_order" => int().and_then(|v| match u32::try_from(v) {
                Ok(o) if o <= 20 => {
                    self.max_order = Some(o);
                    Ok(())
                }
                _ => Err(format!("{name} must be an order from 0 to 20, not {v}")),
            }),
            _ => return None,
        })
    }

    fn tunable_names(&self) -> Vec<String> {
        vec!["vm.superpages.enabled".into(), "vm.superpages.max_order".into()]
    }

    fn sysctls(&self, k: &Kernel, out: &mut Sysctls) {
        out.int("vm.superpages.enabled", self.enabled as u64, "Shimizu: superpages allocated at faults");
        let top = k.superpage_sizes().last().map_or(0, |s| s.order);
        out.int("vm.superpages.max_order", self.max_order.unwrap_or(top) as u64, "Shimizu: largest page order tried at a fault");
        for s in k.superpage_sizes() {
            let n = size_name(k, s.order);
            out.int(&format!("vm.superpages.alloc.{n}"), self.alloc.get(&s.order).copied().unwrap_or(0), "Shimizu: superpages of this size allocated at faults");
            out.int(&format!("vm.superpages.fallback.{n}"), self.fallback.get(&s.order).copied().unwrap_or(0), "Shimizu: faults that fell back from this size for want of a free block");
        }
    }

    fn procfs(&self, k: &Kernel, pid: Pid) -> Option<String> {
        if !self.per_proc.keys().any(|&(p, _)| p == pid) {
            return None;
        }
        let mut s = format!("/proc/{pid}/superpages\nsize       allocated\n");
        for size in k.superpage_sizes().into_iter().rev() {
            let n = self.per_proc.get(&(pid, size.order)).copied().unwrap_or(0);
            s.push_str(&format!("{:<10} {n}\n", size_name(k, size.order)));
        }
        Some(s)
    }
}
