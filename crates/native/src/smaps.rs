//! The page sizes a region really got, read back from /proc/self/smaps.
//!
//! Each mapping (VMA) in smaps has a header line `start-end perms ...` and
//! then `Name: value kB` lines. What they say about page sizes:
//! - `KernelPageSize`: 4 kB for ordinary memory, 2048 kB or 1048576 kB for
//!   a hugetlb mapping;
//! - `Rss`: resident bytes of an ordinary mapping (hugetlb pages are not
//!   in it);
//! - `AnonHugePages`, `ShmemPmdMapped`, `FilePmdMapped`: the part of Rss
//!   mapped by 2 MB (PMD) entries: THP;
//! - `Private_Hugetlb`, `Shared_Hugetlb`: resident hugetlb bytes.
//!
//! A region can be several VMAs (a mix's madvise splits it); all those that
//! overlap the region are added up.

use crate::pages::{SIZE_1G, SIZE_2M};
use serde::Serialize;

/// Bytes of a region by the page size that maps them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Obtained {
    /// Resident in 4 KB pages (Rss minus the PMD-mapped part; multi-size
    /// THP smaller than 2 MB, if the kernel uses it, counts here).
    pub bytes_4k: u64,
    /// Resident in 2 MB pages: THP (PMD-mapped) and hugetlb 2 MB.
    pub bytes_2m: u64,
    /// Of `bytes_2m`, those from the hugetlb pool.
    pub bytes_2m_hugetlb: u64,
    /// Resident in 1 GB hugetlb pages.
    pub bytes_1g: u64,
    /// VMAs the region spans.
    pub vmas: u32,
    /// Whether a VMA reaches outside the region (its counts then include
    /// memory that is not the region's).
    pub spills_over: bool,
}

impl Obtained {
    pub fn resident(&self) -> u64 {
        self.bytes_4k + self.bytes_2m + self.bytes_1g
    }

    /// Share of the resident bytes in 2 MB or 1 GB pages (0 when nothing is
    /// resident).
    pub fn huge_fraction(&self) -> f64 {
        let r = self.resident();
        if r == 0 {
            0.0
        } else {
            (self.bytes_2m + self.bytes_1g) as f64 / r as f64
        }
    }
}

/// The value in bytes of a `Name:   123 kB` line.
fn kb_field(line: &str) -> Option<(&str, u64)> {
    let (name, rest) = line.split_once(':')?;
    let mut it = rest.split_whitespace();
    let v: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some("kB") => Some((name, v * 1024)),
        _ => None,
    }
}

/// `start-end` of a VMA header line.
fn header_range(line: &str) -> Option<(u64, u64)> {
    let range = line.split_whitespace().next()?;
    let (a, b) = range.split_once('-')?;
    Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
}

/// The counts of one VMA, as far as they matter here.
#[derive(Default)]
struct Vma {
    rss: u64,
    pmd: u64,
    hugetlb: u64,
    kernel_page: u64,
}

impl Vma {
    fn add_to(&self, o: &mut Obtained) {
        match self.kernel_page {
            SIZE_2M => {
                o.bytes_2m += self.hugetlb.max(self.rss);
                o.bytes_2m_hugetlb += self.hugetlb.max(self.rss);
            }
            SIZE_1G => o.bytes_1g += self.hugetlb.max(self.rss),
            _ => {
                let pmd = self.pmd.min(self.rss);
                o.bytes_2m += pmd;
                o.bytes_4k += self.rss - pmd;
            }
        }
    }
}

/// What smaps text says about the region [start, end).
pub fn parse(text: &str, start: u64, end: u64) -> Obtained {
    let mut o = Obtained::default();
    let mut cur: Option<Vma> = None;
    for line in text.lines() {
        if let Some((a, b)) = header_range(line) {
            if let Some(v) = cur.take() {
                v.add_to(&mut o);
            }
            if a < end && b > start {
                o.vmas += 1;
                o.spills_over |= a < start || b > end;
                cur = Some(Vma::default());
            }
            continue;
        }
        let (Some(v), Some((name, bytes))) = (cur.as_mut(), kb_field(line)) else { continue };
        match name {
            "Rss" => v.rss = bytes,
            "AnonHugePages" | "ShmemPmdMapped" | "FilePmdMapped" => v.pmd += bytes,
            "Private_Hugetlb" | "Shared_Hugetlb" => v.hugetlb += bytes,
            "KernelPageSize" => v.kernel_page = bytes,
            _ => {}
        }
    }
    if let Some(v) = cur.take() {
        v.add_to(&mut o);
    }
    o
}

/// What this process's smaps says about [start, end).
pub fn read_self(start: u64, end: u64) -> Result<Obtained, String> {
    let text = std::fs::read_to_string("/proc/self/smaps").map_err(|e| format!("reading /proc/self/smaps: {e}"))?;
    Ok(parse(&text, start, end))
}

/// A process's totals from /proc/PID/smaps_rollup (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Rollup {
    pub rss: u64,
    /// Anonymous memory mapped by 2 MB (PMD) entries: THP.
    pub anon_huge: u64,
    /// Resident hugetlb pages (private and shared).
    pub hugetlb: u64,
}

impl Rollup {
    pub fn add(&mut self, o: &Rollup) {
        self.rss += o.rss;
        self.anon_huge += o.anon_huge;
        self.hugetlb += o.hugetlb;
    }

    /// The larger of each field.
    pub fn max(&mut self, o: &Rollup) {
        self.rss = self.rss.max(o.rss);
        self.anon_huge = self.anon_huge.max(o.anon_huge);
        self.hugetlb = self.hugetlb.max(o.hugetlb);
    }
}

/// What smaps_rollup text says.
pub fn parse_rollup(text: &str) -> Rollup {
    let mut r = Rollup::default();
    for (name, bytes) in text.lines().filter_map(kb_field) {
        match name {
            "Rss" => r.rss = bytes,
            "AnonHugePages" => r.anon_huge = bytes,
            "Private_Hugetlb" | "Shared_Hugetlb" => r.hugetlb += bytes,
            _ => {}
        }
    }
    r
}

/// /proc/PID/smaps_rollup of a process; None when it is gone (or is a
/// zombie, whose file is empty).
pub fn rollup(pid: i32) -> Option<Rollup> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    (!text.is_empty()).then(|| parse_rollup(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
7f0000000000-7f0000200000 ---p 00000000 00:00 0 
Size:               2048 kB
KernelPageSize:        4 kB
Rss:                   0 kB
7f0000200000-7f0000600000 rw-p 00000000 00:00 0 
Size:               4096 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                4096 kB
AnonHugePages:      2048 kB
FilePmdMapped:         0 kB
Private_Hugetlb:       0 kB
THPeligible:    1
VmFlags: rd wr mr mw me ac sd hg 
7f0000600000-7f0000800000 rw-p 00000000 00:00 0 
Size:               2048 kB
KernelPageSize:        4 kB
Rss:                1024 kB
AnonHugePages:         0 kB
VmFlags: rd wr mr mw me ac sd nh 
7f4000000000-7f4040000000 rw-p 00000000 00:0f 1234     /anon_hugepage (deleted)
Size:            1048576 kB
KernelPageSize:  1048576 kB
Rss:                   0 kB
Private_Hugetlb: 1048576 kB
Shared_Hugetlb:        0 kB
7f5000000000-7f5000400000 rw-p 00000000 00:0f 99       /anon_hugepage (deleted)
KernelPageSize:     2048 kB
Rss:                   0 kB
Private_Hugetlb:    4096 kB
";

    #[test]
    fn rollup_fields() {
        let t = "55d0a0000000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]\nRss:              123456 kB\nPss:              100000 kB\nAnonHugePages:     65536 kB\nPrivate_Hugetlb:    2048 kB\nShared_Hugetlb:     4096 kB\n";
        let r = parse_rollup(t);
        assert_eq!(r, Rollup { rss: 123456 << 10, anon_huge: 65536 << 10, hugetlb: 6144 << 10 });
        assert!(rollup(std::process::id() as i32).is_some_and(|r| r.rss > 0));
    }

    #[test]
    fn thp_and_base_pages_of_a_split_region() {
        let o = parse(SAMPLE, 0x7f0000200000, 0x7f0000800000);
        assert_eq!(o.vmas, 2);
        assert_eq!(o.bytes_2m, 2 << 20);
        assert_eq!(o.bytes_4k, 3 << 20);
        assert_eq!(o.bytes_1g, 0);
        assert!(!o.spills_over);
        assert!((o.huge_fraction() - 0.4).abs() < 1e-12);
    }

    #[test]
    fn hugetlb_pages_by_kernel_page_size() {
        let o = parse(SAMPLE, 0x7f4000000000, 0x7f4040000000);
        assert_eq!((o.bytes_1g, o.bytes_2m, o.bytes_4k), (1 << 30, 0, 0));
        let o = parse(SAMPLE, 0x7f5000000000, 0x7f5000400000);
        assert_eq!((o.bytes_2m, o.bytes_2m_hugetlb, o.bytes_4k), (4 << 20, 4 << 20, 0));
        assert_eq!(o.huge_fraction(), 1.0);
    }

    #[test]
    fn a_vma_reaching_outside_is_flagged_and_nothing_is_zero() {
        let o = parse(SAMPLE, 0x7f0000300000, 0x7f0000400000);
        assert!(o.spills_over);
        let o = parse(SAMPLE, 0x1000, 0x2000);
        assert_eq!(o, Obtained::default());
        assert_eq!(o.huge_fraction(), 0.0);
    }
}
