//! Nested paging (Intel EPT, AMD NPT, Arm stage 2, RISC-V G-stage): the
//! machine is a guest under a hypervisor, and every guest-physical address
//! the hardware uses, each guest page-table entry a walk reads and the
//! data address the walk ends with, is itself translated through the
//! host's table. A 4-level guest walk then costs up to 4 x (4 + 1) + 4 =
//! 24 memory references with 4 KB host pages (Bhargava et al., ASPLOS
//! 2008, "Accelerating two-dimensional page walks for virtualized
//! systems", Figure 2); 2 MB and 1 GB host pages shorten each host walk by
//! one and two levels.
//!
//! The host table is a 4-level radix table (EPT's and NPT's shape: 512
//! entries of 8 bytes per 4 KB table, levels covering bits 47..39, 38..30,
//! 29..21 and 20..12) mapping guest-physical to host-physical memory one
//! to one, as a hypervisor backing a guest with one contiguous block does.
//! Its contents are therefore computed, not stored, but its entries have
//! real addresses, in host memory just above the guest's, laid out as the
//! hypervisor's tables would be (one table per aligned range of its
//! level), so the cache model sees every reference with the locality it
//! has on the machine: eight neighbouring entries share a line.
//!
//! What the hardware caches of host translations, per CPU:
//! - a nested TLB of guest-physical to host-physical translations at the
//!   host page size (Intel SDM vol. 3C, "Information That May Be Cached
//!   When EPT Is in Use": guest-physical mappings; the NTLB of Bhargava et
//!   al.), fully associative, LRU;
//! - host paging-structure caches (the SDM's guest-physical
//!   paging-structure-cache entries), one per non-leaf host level, keyed
//!   by the guest-physical address bits above the level.
//!
//! Neither size is published for any processor; the profile gives them
//! (`[virt]`), and the defaults are estimates: a 16-entry nested TLB and
//! host paging-structure caches as large as the guest's.
//!
//! The guest's own paging-structure caches keep what they keep natively,
//! the host-physical address of a guest table (the SDM's combined
//! paging-structure-cache entries): a walk that starts below the guest
//! root skips the host walks of the levels it skips too. The guest TLB
//! holds combined guest-virtual to host-physical translations, so nothing
//! here runs on a TLB hit.

use crate::pwc::{Pwc, PwcLevelConfig};
use crate::tlb::parse_size_shift;
use serde::{Deserialize, Serialize};

/// The `[virt]` section of a machine profile.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VirtConfig {
    /// The machine is a guest under a hypervisor with nested paging (EPT,
    /// NPT): walks are two-dimensional.
    #[serde(default)]
    pub nested: bool,
    /// The page size the host backs guest memory with: "4K", "2M" or "1G".
    #[serde(default = "default_host_page")]
    pub host_page: String,
    /// Entries of the per-CPU nested TLB (guest-physical to host-physical
    /// at the host page size); 0 for none.
    #[serde(default = "default_ntlb_entries")]
    pub ntlb_entries: usize,
    /// Host paging-structure caches, as `[[pwc]]` but keyed by
    /// guest-physical address (shift 39, 30 and 21 for the host PML4E,
    /// PDPTE and PDE); absent means the guest's `[[pwc]]` sizes. Levels at
    /// or below the host page size are never used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pwc: Option<Vec<PwcLevelConfig>>,
}

/// What a `[virt]` section without keys gives.
impl Default for VirtConfig {
    fn default() -> VirtConfig {
        VirtConfig { nested: false, host_page: default_host_page(), ntlb_entries: default_ntlb_entries(), host_pwc: None }
    }
}

fn default_host_page() -> String {
    "4K".into()
}

fn default_ntlb_entries() -> usize {
    16
}

/// Level shifts of the host table, root first.
const HOST_LEVELS: [u8; 4] = [39, 30, 21, 12];

/// Addresses the cache model takes exactly (`cache::SetMap`): below 2^38.
pub const MAX_HOST_ADDRESS: u64 = 1 << 38;

impl VirtConfig {
    /// log2 of the host page size, or the error naming the bad value.
    pub fn host_shift(&self) -> Result<u8, String> {
        match parse_size_shift(&self.host_page) {
            Some(s @ (12 | 21 | 30)) => Ok(s),
            _ => Err(format!("[virt] host_page = {:?}: expected \"4K\", \"2M\" or \"1G\"", self.host_page)),
        }
    }
}

/// One CPU's nested-paging hardware: the host walk, its nested TLB and its
/// paging-structure caches, over a guest of `guest_bytes` of memory.
pub struct HostWalk {
    shift: u8,
    /// Host-physical address of the first host table page, and of the
    /// first table of each level (root first).
    level_base: [u64; 4],
    ntlb_keys: Vec<u64>,
    ntlb_lru: Vec<u32>,
    clock: u32,
    pwc: Pwc,
    /// Host page-table references made (the walks' extra references).
    pub refs: u64,
    pub ntlb_hits: u64,
    /// Host walks (nested TLB misses).
    pub walks: u64,
}

const INVALID: u64 = u64::MAX;

impl HostWalk {
    /// The host walk hardware for a guest of `guest_bytes`, whose guest
    /// paging-structure caches are `guest_pwc` (the default size of the
    /// host ones). The host tables sit at the first 1 GB boundary above
    /// the guest's memory.
    pub fn new(cfg: &VirtConfig, guest_pwc: &[PwcLevelConfig], guest_bytes: u64) -> Result<HostWalk, String> {
        let shift = cfg.host_shift()?;
        let base = guest_bytes.next_multiple_of(1 << 30);
        // One table per aligned range of each level: 1 PML4, a PDPT per
        // 512 GB, a PD per GB, a PT per 2 MB of guest memory.
        let tables = |lvl_shift: u8| guest_bytes.div_ceil(1u64 << (lvl_shift + 9)).max(1);
        let mut level_base = [0u64; 4];
        let mut at = base;
        for (i, &s) in HOST_LEVELS.iter().enumerate() {
            level_base[i] = at;
            at += tables(s) * 4096;
        }
        if at > MAX_HOST_ADDRESS {
            return Err(format!("nested paging: {} bytes of guest memory and the host tables do not fit the modelled host ({} bytes)", guest_bytes, MAX_HOST_ADDRESS));
        }
        let pwc_cfg: Vec<PwcLevelConfig> = cfg
            .host_pwc
            .clone()
            .unwrap_or_else(|| guest_pwc.to_vec())
            .into_iter()
            .filter(|c| c.shift > shift && HOST_LEVELS.contains(&c.shift))
            .collect();
        Ok(HostWalk {
            shift,
            level_base,
            ntlb_keys: vec![INVALID; cfg.ntlb_entries],
            ntlb_lru: vec![0; cfg.ntlb_entries],
            clock: 0,
            pwc: Pwc::new(&pwc_cfg),
            refs: 0,
            ntlb_hits: 0,
            walks: 0,
        })
    }

    /// log2 of the host page size: translations the guest's TLB caches
    /// are no larger (`Tlb::fill_missed_splintered`).
    pub fn page_shift(&self) -> u8 {
        self.shift
    }

    /// Host-physical address of the host table entry of level `lvl` (index
    /// into `HOST_LEVELS`) that translates `gpa`.
    #[inline]
    fn entry(&self, lvl: usize, gpa: u64) -> u64 {
        let s = HOST_LEVELS[lvl];
        let table = self.level_base[lvl] + (gpa >> (s as u32 + 9)) * 4096;
        table + ((gpa >> s) & 511) * 8
    }

    /// Translates guest-physical `gpa` to host-physical (the same address:
    /// the mapping is one to one), appending to `out` the host table
    /// entries read, root first. Returns how many.
    pub fn translate(&mut self, gpa: u64, out: &mut Vec<u64>) -> usize {
        let key = gpa >> self.shift;
        self.clock = self.clock.wrapping_add(1);
        if let Some(i) = self.ntlb_keys.iter().position(|&k| k == key) {
            self.ntlb_lru[i] = self.clock;
            self.ntlb_hits += 1;
            return 0;
        }
        self.walks += 1;
        // Start below the deepest host paging-structure cache hit.
        let first = match self.pwc.lookup(gpa, 0) {
            Some((s, _)) => HOST_LEVELS.iter().position(|&l| l == s).map_or(0, |i| i + 1),
            None => 0,
        };
        let last = HOST_LEVELS.iter().position(|&l| l == self.shift).expect("host page is a level");
        for (lvl, &s) in HOST_LEVELS.iter().enumerate().take(last + 1).skip(first) {
            out.push(self.entry(lvl, gpa));
            if lvl < last {
                // The entry points to the next level's table.
                let next = self.entry(lvl + 1, gpa) & !4095;
                self.pwc.fill(gpa, 0, s, next);
            }
        }
        let n = last + 1 - first;
        self.refs += n as u64;
        if !self.ntlb_keys.is_empty() {
            let clock = self.clock;
            let i = self
                .ntlb_keys
                .iter()
                .position(|&k| k == INVALID)
                .unwrap_or_else(|| (0..self.ntlb_keys.len()).max_by_key(|&i| clock.wrapping_sub(self.ntlb_lru[i])).unwrap_or(0));
            self.ntlb_keys[i] = key;
            self.ntlb_lru[i] = clock;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(host_page: &str, ntlb: usize, pwc: Option<Vec<PwcLevelConfig>>) -> VirtConfig {
        VirtConfig { nested: true, host_page: host_page.into(), ntlb_entries: ntlb, host_pwc: pwc }
    }

    /// Without caches a host walk reads 4, 3 or 2 entries for 4 KB, 2 MB
    /// and 1 GB host pages, one per level, each inside its level's table.
    #[test]
    fn host_walk_reads_one_entry_per_level() {
        let gpa = 0x1_2345_6789u64;
        for (page, n) in [("4K", 4), ("2M", 3), ("1G", 2)] {
            let mut h = HostWalk::new(&cfg(page, 0, Some(vec![])), &[], 8 << 30).unwrap();
            let mut out = Vec::new();
            assert_eq!(h.translate(gpa, &mut out), n, "{page}");
            assert_eq!(out.len(), n);
            assert_eq!(out[0], (8u64 << 30) + 8 * ((gpa >> 39) & 511), "root entry");
            assert!(out.iter().all(|&a| a >= 8 << 30 && a % 8 == 0));
            // Neighbouring 4 KB pages share the last-level line.
            let mut out2 = Vec::new();
            h.translate(gpa + 4096, &mut out2);
            assert_eq!(out[n - 1] / 64, out2[n - 1] / 64);
        }
        assert!(HostWalk::new(&cfg("64K", 0, None), &[], 1 << 30).is_err());
    }

    #[test]
    fn nested_tlb_and_host_pwc_cut_host_walks() {
        let pwc = vec![PwcLevelConfig { shift: 39, entries: 2 }, PwcLevelConfig { shift: 30, entries: 2 }, PwcLevelConfig { shift: 21, entries: 4 }];
        let mut h = HostWalk::new(&cfg("4K", 4, Some(pwc)), &[], 8 << 30).unwrap();
        let mut out = Vec::new();
        assert_eq!(h.translate(0x4000_0000, &mut out), 4);
        assert_eq!(h.translate(0x4000_0008, &mut out), 0, "nested TLB hit");
        assert_eq!(h.translate(0x4000_1000, &mut out), 1, "PDE cached: only the PTE");
        assert_eq!(h.translate(0x4020_0000, &mut out), 2, "PDPTE cached: PDE and PTE");
        assert_eq!((h.ntlb_hits, h.walks, h.refs), (1, 3, 7));
    }
}
