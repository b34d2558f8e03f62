//! Page-size layouts a native run can ask Linux for, as `--pages` names
//! them, and which 2 MB chunks of a region a mix puts in 2 MB pages.

use serde::Serialize;
use std::fmt;

/// 2 MB: the x86-64 PMD page size, the unit of THP and of `mix:F`.
pub const SIZE_2M: u64 = 2 << 20;
/// 1 GB: the x86-64 PUD page size (hugetlb only).
pub const SIZE_1G: u64 = 1 << 30;
/// 4 KB: the base page.
pub const SIZE_4K: u64 = 4096;

/// How a region's memory is laid out in page sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pages {
    /// mmap, then MADV_NOHUGEPAGE: base pages only.
    FourK,
    /// 2 MB-aligned mmap, MADV_HUGEPAGE before the first touch: THP at
    /// fault time.
    Thp,
    /// Touched with base pages, then MADV_COLLAPSE (Linux 6.1+): the
    /// synchronous form of khugepaged's collapse.
    Collapse,
    /// MAP_HUGETLB | MAP_HUGE_2MB from the hugetlb pool.
    Hugetlb2m,
    /// MAP_HUGETLB | MAP_HUGE_1GB from the hugetlb pool.
    Hugetlb1g,
    /// A fraction (0 to 1) of the region's 2 MB chunks MADV_HUGEPAGE,
    /// spread evenly through it, the rest MADV_NOHUGEPAGE.
    Mix(f64),
    /// Base pages at fault; a monitor collapses each 2 MB range once all
    /// its 512 pages are present (FreeBSD's promotion, `promote`).
    Promote,
    /// Multi-size THP at fault in the sizes whose bits are set (bit k:
    /// 4 KB << k, so bit 4 is 64 KB, bit 9 is 2 MB), the others off.
    Mthp(u16),
}

/// The text of an mTHP size set, e.g. `16k+64k`.
fn mthp_text(mask: u16) -> String {
    (1..=9).filter(|k| mask & (1 << k) != 0).map(|k| crate::size_text(SIZE_4K << k)).collect::<Vec<_>>().join("+")
}

/// Parses `16k+64k+2m` (the sizes of multi-size THP, 8 KB to 2 MB, powers
/// of two) into a set of bits.
fn mthp_parse(text: &str, whole: &str) -> Result<u16, String> {
    let mut mask = 0u16;
    for part in text.split('+') {
        let p = part.trim().to_ascii_lowercase();
        let (num, mult) = match p.chars().last() {
            Some('k') => (&p[..p.len() - 1], 1u64 << 10),
            Some('m') => (&p[..p.len() - 1], 1u64 << 20),
            _ => (p.as_str(), 1),
        };
        let bytes = num.parse::<u64>().ok().map(|n| n * mult);
        let k = bytes.filter(|b| b.is_power_of_two() && *b > SIZE_4K && *b <= SIZE_2M).map(|b| (b / SIZE_4K).trailing_zeros());
        let Some(k) = k else {
            return Err(format!("--pages {whole:?}: {part:?} is not a multi-size THP size (a power of two from 8k to 2m, sizes joined with +, e.g. mthp:16k+64k)"));
        };
        mask |= 1 << k;
    }
    Ok(mask)
}

impl Pages {
    /// Parses one `--pages` value; the error names the text.
    pub fn parse(text: &str) -> Result<Pages, String> {
        let t = text.trim();
        Ok(match t.to_ascii_lowercase().as_str() {
            "4k" => Pages::FourK,
            "thp" => Pages::Thp,
            "collapse" => Pages::Collapse,
            "hugetlb-2m" => Pages::Hugetlb2m,
            "hugetlb-1g" => Pages::Hugetlb1g,
            "promote" => Pages::Promote,
            other if other.starts_with("mthp:") => Pages::Mthp(mthp_parse(&t[5..], text)?),
            other => {
                let Some(f) = other.strip_prefix("mix:") else {
                    return Err(format!("--pages {text:?}: expected 4k, thp, collapse, promote, mthp:SIZES (e.g. mthp:16k+64k), hugetlb-2m, hugetlb-1g or mix:F (F from 0 to 1)"));
                };
                let v: f64 = f.parse().map_err(|_| format!("--pages {text:?}: {f:?} is not a number (mix:F takes a fraction from 0 to 1)"))?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(format!("--pages {text:?}: fraction {f} is out of range (0 to 1)"));
                }
                Pages::Mix(v)
            }
        })
    }

    /// Parses a list of `--pages` values, each possibly a comma-separated
    /// list; a layout given twice is run once.
    pub fn parse_list<S: AsRef<str>>(values: &[S]) -> Result<Vec<Pages>, String> {
        let mut out: Vec<Pages> = Vec::new();
        for v in values {
            for part in v.as_ref().split(',') {
                if part.trim().is_empty() {
                    return Err(format!("--pages {:?}: empty layout name", v.as_ref()));
                }
                let p = Pages::parse(part)?;
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        if out.is_empty() {
            return Err("--pages: give at least one layout".into());
        }
        Ok(out)
    }

    /// The page size the region's length and alignment are rounded to.
    pub fn granule(self) -> u64 {
        match self {
            Pages::Hugetlb1g => SIZE_1G,
            _ => SIZE_2M,
        }
    }

    /// The fraction of the region asked to be in huge pages (2 MB or 1 GB).
    pub fn huge_fraction_asked(self) -> f64 {
        match self {
            Pages::FourK => 0.0,
            Pages::Mix(f) => f,
            _ => 1.0,
        }
    }
}

impl fmt::Display for Pages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pages::FourK => f.write_str("4k"),
            Pages::Thp => f.write_str("thp"),
            Pages::Collapse => f.write_str("collapse"),
            Pages::Hugetlb2m => f.write_str("hugetlb-2m"),
            Pages::Hugetlb1g => f.write_str("hugetlb-1g"),
            Pages::Mix(v) => write!(f, "mix:{v}"),
            Pages::Promote => f.write_str("promote"),
            Pages::Mthp(m) => write!(f, "mthp:{}", mthp_text(*m)),
        }
    }
}

impl Serialize for Pages {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Which of `chunks` 2 MB chunks a `mix:fraction` puts in 2 MB pages:
/// round(fraction x chunks) of them, spread evenly (Bresenham's line from
/// (0, 0) to (chunks, huge)): chunk i is huge when the running count
/// floor((i + 1) x huge / chunks) steps up at i. So mix:0.5 alternates
/// 4 KB and 2 MB chunks, mix:0.25 makes every fourth chunk huge, and any
/// prefix of the region holds its share to within one chunk.
pub fn mix_chunks(chunks: u64, fraction: f64) -> Vec<bool> {
    debug_assert!((0.0..=1.0).contains(&fraction));
    let huge = ((chunks as f64) * fraction).round() as u64;
    let huge = huge.min(chunks);
    (0..chunks).map(|i| (i + 1) * huge / chunks > i * huge / chunks).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_lists() {
        assert_eq!(Pages::parse("4k"), Ok(Pages::FourK));
        assert_eq!(Pages::parse("THP"), Ok(Pages::Thp));
        assert_eq!(Pages::parse("mix:0.25"), Ok(Pages::Mix(0.25)));
        let l = Pages::parse_list(&["4k,thp", "hugetlb-1g", "4k"]).unwrap();
        assert_eq!(l, vec![Pages::FourK, Pages::Thp, Pages::Hugetlb1g]);
        assert_eq!(Pages::Mix(0.5).to_string(), "mix:0.5");
        assert_eq!(Pages::parse("promote"), Ok(Pages::Promote));
        let m = Pages::parse("mthp:64k+16K+2m").unwrap();
        assert_eq!(m, Pages::Mthp((1 << 2) | (1 << 4) | (1 << 9)));
        assert_eq!(m.to_string(), "mthp:16k+64k+2m");
        assert_eq!(Pages::parse(&m.to_string()), Ok(m));
    }

    #[test]
    fn errors_name_the_value() {
        for bad in ["8k", "mix:1.5", "mix:x", "mix:-0.1", "hugetlb", "mthp:4k", "mthp:48k", "mthp:4m", "mthp:"] {
            let e = Pages::parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(Pages::parse_list(&["4k,,thp"]).is_err());
    }

    #[test]
    fn mix_spreads_chunks_evenly() {
        let m = mix_chunks(8, 0.5);
        assert_eq!(m, vec![false, true, false, true, false, true, false, true]);
        let m = mix_chunks(8, 0.25);
        assert_eq!(m.iter().filter(|&&h| h).count(), 2);
        assert_eq!(m, vec![false, false, false, true, false, false, false, true]);
        assert!(mix_chunks(5, 0.0).iter().all(|&h| !h));
        assert!(mix_chunks(5, 1.0).iter().all(|&h| h));
        // Every prefix holds its share to within one chunk.
        for &f in &[0.1, 0.3, 0.5, 0.7, 0.9] {
            let m = mix_chunks(1000, f);
            let mut n = 0.0;
            for (i, &h) in m.iter().enumerate() {
                n += h as u8 as f64;
                assert!((n - (i + 1) as f64 * f).abs() <= 1.0, "f {f} at {i}");
            }
            assert_eq!(m.iter().filter(|&&h| h).count(), (1000.0 * f).round() as usize);
        }
    }
}
