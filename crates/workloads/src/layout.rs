//! Page-size layouts of a workload's memory, the simulated side of
//! `splab native --pages`: with a layout, the workload puts all its data
//! in one region whose 2 MB chunks are counted from the region's
//! (2 MB-aligned) start exactly as the native region's are, and the chunks
//! that must stay in 4 KB pages are advised out of superpages
//! (`System::madvise_superpages`, splab's counterpart of Linux's
//! MADV_NOHUGEPAGE): faults there allocate without a reservation, so they
//! are never promoted. The other chunks fault into reservations as usual
//! and are promoted when full. Which chunks are which comes from
//! `splab_defs::pages::mix_chunks`, so a simulated `mix:F` and a native
//! one are the same chunk for chunk.
//!
//! Without a layout (`None`), workloads map their memory as they always
//! have (one mapping per array), and nothing here runs.

use serde::Serialize;
use splab_defs::pages::{mix_chunks, Pages, SIZE_2M};
use splab_sim::System;
use splab_vm::kernel::Pid;
use splab_vm::map::MmapReq;
use splab_vm::pmap::prot;
use std::fmt;

/// A layout asked for with `--pages`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PageLayout {
    /// Every chunk advised out of superpages (native `4k`:
    /// MADV_NOHUGEPAGE).
    FourK,
    /// Every chunk left to reservations and promotion (native `thp`).
    TwoM,
    /// Every chunk advised MADV_HUGEPAGE, as a program that asks for huge
    /// pages does: what Linux THP in `madvise` mode (and khugepaged
    /// there) acts on; FreeBSD's and Shimizu's policies ignore the advice.
    Hugepage,
    /// A fraction of the chunks left to reservations, spread as
    /// `mix_chunks` spreads them (native `mix:F`).
    Mix(f64),
}

impl PageLayout {
    /// Parses `4k`, `2m` (or `thp`, its native name) or `mix:F`; the error
    /// names the text.
    pub fn parse(text: &str) -> Result<PageLayout, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "4k" => Ok(PageLayout::FourK),
            "2m" | "thp" => Ok(PageLayout::TwoM),
            "hugepage" => Ok(PageLayout::Hugepage),
            t if t.starts_with("mix:") => match Pages::parse(t)? {
                Pages::Mix(f) => Ok(PageLayout::Mix(f)),
                _ => unreachable!("mix: parses to a mix"),
            },
            _ => Err(format!("--pages {text:?}: expected 4k, 2m, hugepage or mix:F (F from 0 to 1)")),
        }
    }

    /// The fraction of the region asked to be in 2 MB pages.
    pub fn fraction(self) -> f64 {
        match self {
            PageLayout::FourK => 0.0,
            PageLayout::TwoM | PageLayout::Hugepage => 1.0,
            PageLayout::Mix(f) => f,
        }
    }

    /// Which of `chunks` 2 MB chunks may be in 2 MB pages.
    pub fn chunks(self, chunks: u64) -> Vec<bool> {
        mix_chunks(chunks, self.fraction())
    }
}

impl fmt::Display for PageLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageLayout::FourK => f.write_str("4k"),
            PageLayout::TwoM => f.write_str("2m"),
            PageLayout::Hugepage => f.write_str("hugepage"),
            PageLayout::Mix(v) => write!(f, "mix:{v}"),
        }
    }
}

/// The layout a run got, read back from the page tables at the end of its
/// timed part.
#[derive(Clone, Debug, Serialize)]
pub struct LayoutObtained {
    /// The layout asked for, as `--pages` names it.
    pub pages: String,
    /// The region's length (the data rounded up to 2 MB) and its chunks.
    pub region_bytes: u64,
    pub chunks: u64,
    /// Chunks asked to be in 2 MB pages (`mix_chunks`).
    pub chunks_2m_asked: u64,
    /// Chunks mapped entirely by pages of 2 MB or more (on armv7, by 1 MB
    /// sections; on ppc64-hpt, by 16 MB pages, which a mix rarely makes).
    pub chunks_2m_obtained: u64,
    /// Chunks asked to be in 2 MB pages that are not.
    pub short: u64,
    /// Chunks asked to be in 4 KB pages that are mapped by superpages
    /// (never expected: the advice keeps them out of reservations).
    pub unexpected: u64,
}

impl LayoutObtained {
    /// One line for a report.
    pub fn line(&self) -> String {
        let verdict = if self.short == 0 && self.unexpected == 0 { "as asked".to_string() } else { format!("NOT AS ASKED: {} short, {} unexpected", self.short, self.unexpected) };
        format!(
            "--pages {}: {} of {} 2 MB chunks in 2 MB pages, {} asked ({verdict})",
            self.pages, self.chunks_2m_obtained, self.chunks, self.chunks_2m_asked
        )
    }
}

/// A workload's `--pages` layout, if one was asked for, and what the last
/// run got.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub asked: Option<PageLayout>,
    pub obtained: Option<LayoutObtained>,
}

/// A workload's region under a layout.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    pub va: u64,
    pub len: u64,
    pub layout: PageLayout,
}

impl Region {
    /// Maps `bytes` of private (or, with `shared`, shared) anonymous
    /// memory rounded up to 2 MB, 2 MB-aligned, in `pid` (running on
    /// `cpu`), advises the chunks the layout keeps in 4 KB pages out of
    /// superpages, and touches every page with a store of zero, as the
    /// native region is touched before the workload starts (so that the
    /// tail of the last chunk, beyond the data, is populated too).
    pub fn map(sys: &mut System, pid: Pid, cpu: usize, bytes: u64, shared: bool, layout: PageLayout, what: &str) -> Result<Region, String> {
        let len = bytes.max(1).div_ceil(SIZE_2M) * SIZE_2M;
        // mmap aligns large mappings to the reservation size, which is not
        // 2 MB everywhere (1 MB on armv7): map 2 MB more and unmap what
        // lies outside the first 2 MB-aligned stretch, as the native region
        // is carved out of a larger mapping.
        let req = MmapReq { shared, ..MmapReq::anon(len + SIZE_2M, prot::RW) };
        let at = crate::common::map(sys, pid, req, what)?;
        let va = at.next_multiple_of(SIZE_2M);
        if va > at {
            crate::common::unmap(sys, pid, at, va - at, what)?;
        }
        if at + SIZE_2M > va {
            crate::common::unmap(sys, pid, va + len, at + SIZE_2M - va, what)?;
        }
        let chunks = layout.chunks(len / SIZE_2M);
        let mut i = 0;
        while i < chunks.len() {
            let mut j = i;
            while j < chunks.len() && chunks[j] == chunks[i] {
                j += 1;
            }
            if !chunks[i] {
                let (a, n) = (va + i as u64 * SIZE_2M, (j - i) as u64 * SIZE_2M);
                sys.madvise_superpages(pid, a, n, false).map_err(|e| format!("{what}: advising {n} bytes at {a:#x} out of superpages: {e}"))?;
            }
            i = j;
        }
        if layout == PageLayout::Hugepage {
            sys.madvise_superpages(pid, va, len, true).map_err(|e| format!("{what}: advising {len} bytes at {va:#x} MADV_HUGEPAGE: {e}"))?;
        }
        let mut b = crate::common::Batch::new(cpu);
        crate::common::touch_pages(sys, &mut b, va, len, Some(0)).map_err(crate::common::fault(what))?;
        Ok(Region { va, len, layout })
    }

    /// What the page tables of `pid` say the region is mapped with now.
    pub fn obtained(&self, sys: &System, pid: Pid) -> LayoutObtained {
        let asked = self.layout.chunks(self.len / SIZE_2M);
        // The superpage the reservation makes (1 MB on armv7), up to 2 MB:
        // every such piece of a chunk must be mapped by a page at least
        // that large.
        let piece = sys.superpage_size().min(SIZE_2M);
        let big = |va: u64| -> bool { sys.mapping(pid, va).is_some_and(|m| 1u64 << m.shift >= piece) };
        let (mut got, mut short, mut unexpected) = (0, 0, 0);
        for (i, &want) in asked.iter().enumerate() {
            let c = self.va + i as u64 * SIZE_2M;
            let huge = (0..SIZE_2M / piece).all(|k| big(c + k * piece));
            got += huge as u64;
            short += (want && !huge) as u64;
            unexpected += (!want && huge) as u64;
        }
        LayoutObtained {
            pages: self.layout.to_string(),
            region_bytes: self.len,
            chunks: asked.len() as u64,
            chunks_2m_asked: asked.iter().filter(|&&h| h).count() as u64,
            chunks_2m_obtained: got,
            short,
            unexpected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_layouts() {
        assert_eq!(PageLayout::parse("4K"), Ok(PageLayout::FourK));
        assert_eq!(PageLayout::parse("2m"), Ok(PageLayout::TwoM));
        assert_eq!(PageLayout::parse("thp"), Ok(PageLayout::TwoM));
        assert_eq!(PageLayout::parse("mix:0.25"), Ok(PageLayout::Mix(0.25)));
        for bad in ["8k", "mix:2", "hugetlb-2m"] {
            assert!(PageLayout::parse(bad).unwrap_err().contains(bad), "{bad}");
        }
        assert_eq!(PageLayout::Mix(0.5).to_string(), "mix:0.5");
    }
}
