//! Host addresses in a smaller modelled address space.
//!
//! A program traced on a 64-bit host uses addresses a 32-bit machine's
//! user space does not have: under valgrind on x86-64 the program's
//! image, libraries, heap and mappings lie low (below a few GB), but the
//! main stack lies near 128 GB. A run on such a machine (armv7, user
//! space below 0xbfc00000) moves every host granule of `GRANULE` bytes at
//! or above the modelled limit to a granule of its own below the limit,
//! handed out downward from the top; addresses below the limit stay
//! where they are. Offsets within a granule are kept, so a range that was
//! aligned to any superpage size up to `GRANULE` stays aligned. A region
//! that spans several high granules gets consecutive ones, in the same
//! order.
//!
//! Where the modelled space is as large as the host's (64-bit machines),
//! nothing is ever moved and each address costs one comparison.
//!
//! What is always true: the granules handed out lie in [floor, limit) and
//! are each one host granule's; every address left where it was lies
//! below `low_top`, and `low_top <= floor`: the two never meet (a run
//! where they would fails, naming both).

/// The unit moved: 16 MB, a multiple of every superpage size of the
/// modelled architectures up to POWER's 16 MB (ARMv7's 1 MB section and
/// 64 KB large page among them).
pub const GRANULE: u64 = 16 << 20;

/// The end of a host's user address space (48-bit virtual addresses, as
/// x86-64 and arm64 Linux give user space at most): an address at or
/// above it was no program's, and is refused.
pub const HOST_END: u64 = 1 << 48;

#[derive(Clone, Debug)]
pub struct Fold {
    /// The modelled user space's end.
    limit: u64,
    /// Host granule (address / GRANULE) to modelled granule, in the order
    /// handed out.
    moved: Vec<(u64, u64)>,
    /// The lowest granule handed out (as an address).
    floor: u64,
    /// The end of the highest range left in place so far.
    low_top: u64,
    /// The entry of `moved` used last.
    last: usize,
}

impl Fold {
    pub fn new(limit: u64) -> Fold {
        Fold { limit, moved: Vec::new(), floor: limit & !(GRANULE - 1), low_top: 0, last: 0 }
    }

    /// Whether `addr` needs moving.
    #[inline]
    pub fn high(&self, addr: u64) -> bool {
        addr >= self.limit
    }

    /// Where the model puts host address `addr` (below the limit: where
    /// it is); a high granule seen first here is handed out.
    #[inline]
    pub fn to_model(&mut self, addr: u64) -> Result<u64, String> {
        if !self.high(addr) {
            return Ok(addr);
        }
        if addr >= HOST_END {
            return Err(format!("the trace touches {addr:#x}, beyond the modelled user address space (below {:#x}) and any host's user space (below {HOST_END:#x})", self.limit));
        }
        let g = addr / GRANULE;
        if let Some(&(h, m)) = self.moved.get(self.last) {
            if h == g {
                return Ok(m * GRANULE + addr % GRANULE);
            }
        }
        self.granule(g).map(|m| m * GRANULE + addr % GRANULE)
    }

    /// The modelled pieces of host range [start, end): the part below the
    /// limit as it is, then one piece per high granule (handed out here
    /// when new, the range's granules consecutive and in order).
    pub fn range(&mut self, start: u64, end: u64) -> Result<Vec<(u64, u64)>, String> {
        let mut v = Vec::new();
        if start < self.limit {
            v.push((start, end.min(self.limit)));
        }
        let s = start.max(self.limit);
        if end > HOST_END {
            return Err(format!("the trace uses [{start:#x}, {end:#x}), beyond the modelled user address space (below {:#x}) and any host's user space (below {HOST_END:#x})", self.limit));
        }
        if s < end {
            // New granules from the top of the range down, so that they
            // come out consecutive and ascending.
            let (first, last) = (s / GRANULE, (end - 1) / GRANULE);
            for g in (first..=last).rev() {
                self.granule(g)?;
            }
            for g in first..=last {
                let (gs, ge) = ((g * GRANULE).max(s), ((g + 1) * GRANULE).min(end));
                let m = self.granule(g)? * GRANULE;
                v.push((m + gs % GRANULE, m + (ge - 1) % GRANULE + 1));
            }
        }
        Ok(v)
    }

    /// The modelled pieces of host range [start, end) that were ever
    /// handed out or lie below the limit (for an unmap: a high granule
    /// never seen was never mapped).
    pub fn known(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        if start < self.limit {
            v.push((start, end.min(self.limit)));
        }
        let s = start.max(self.limit);
        if s < end {
            for g in s / GRANULE..=(end - 1) / GRANULE {
                if let Some(&(_, m)) = self.moved.iter().find(|&&(h, _)| h == g) {
                    let (gs, ge) = ((g * GRANULE).max(s), ((g + 1) * GRANULE).min(end));
                    v.push((m * GRANULE + gs % GRANULE, m * GRANULE + (ge - 1) % GRANULE + 1));
                }
            }
        }
        v
    }

    /// Granules moved so far.
    pub fn moved(&self) -> usize {
        self.moved.len()
    }

    /// Records modelled range [start, end) as mapped: one handed out
    /// (at or above the floor) or one left in place, which must end
    /// below the floor.
    pub fn place(&mut self, start: u64, end: u64) -> Result<(), String> {
        if start < self.floor && end > self.low_top {
            if end > self.floor {
                return Err(self.collision(start, end));
            }
            self.low_top = end;
        }
        Ok(())
    }

    fn granule(&mut self, g: u64) -> Result<u64, String> {
        if let Some(i) = self.moved.iter().position(|&(h, _)| h == g) {
            self.last = i;
            return Ok(self.moved[i].1);
        }
        let m = self.floor / GRANULE - 1;
        if self.floor < GRANULE || m * GRANULE < self.low_top {
            return Err(self.collision(g * GRANULE, (g + 1) * GRANULE));
        }
        self.floor = m * GRANULE;
        self.moved.push((g, m));
        self.last = self.moved.len() - 1;
        Ok(m)
    }

    fn collision(&self, start: u64, end: u64) -> String {
        format!(
            "the program's addresses do not fit the modelled user address space (below {:#x}): [{start:#x}, {end:#x}) meets the host addresses above it moved to [{:#x}, {:#x}), while the program's own reach {:#x}",
            self.limit, self.floor, self.limit, self.low_top
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: u64 = 0xbfc0_0000;

    #[test]
    fn low_addresses_stay_and_64_bit_spaces_move_nothing() {
        let mut f = Fold::new(LIMIT);
        assert_eq!(f.to_model(0x10_8000), Ok(0x10_8000));
        let mut wide = Fold::new(1 << 47);
        assert_eq!(wide.to_model(0x1f_feff_f000), Ok(0x1f_feff_f000));
        assert_eq!(wide.moved(), 0);
    }

    /// The stack near 128 GB lands under the limit, offsets in its
    /// granule kept, a range across two granules consecutive.
    #[test]
    fn a_high_range_lands_below_the_limit_consecutive_and_aligned() {
        let mut f = Fold::new(LIMIT);
        let (s, e) = (0x1f_feff_f000_u64, 0x1f_ff00_1000_u64);
        let v = f.range(s, e).unwrap();
        assert_eq!(v.len(), 2, "{v:x?}");
        let top = LIMIT & !(GRANULE - 1);
        assert_eq!(v[1].1, top - GRANULE + 0x1000, "{v:x?}");
        assert_eq!(v[0].1, v[1].0, "consecutive: {v:x?}");
        assert_eq!(v[0].0 % GRANULE, s % GRANULE);
        assert_eq!(f.to_model(s + 8).unwrap(), v[0].0 + 8);
        assert_eq!(f.to_model(e - 8).unwrap(), v[1].1 - 8);
        assert_eq!(f.known(s, e), v);
        assert!(f.known(0x2f_0000_0000, 0x2f_0000_1000).is_empty());
    }

    #[test]
    fn low_and_moved_ranges_that_meet_are_refused_naming_both() {
        let mut f = Fold::new(LIMIT);
        let m = f.to_model(0x1f_ff00_0000).unwrap();
        f.place(m, m + 0x1000).unwrap();
        f.place(0x40_0000, 0x50_0000).unwrap();
        let e = f.place(LIMIT - 2 * GRANULE, LIMIT - GRANULE + 0x1000).unwrap_err();
        assert!(e.contains("0xbfc00000") && e.contains("meets"), "{e}");
        let mut g = Fold::new(LIMIT);
        let top = LIMIT & !(GRANULE - 1);
        g.place(0x1000, top + 0x1000).unwrap_err();
        g.place(0x1000, top - GRANULE + 0x1000).unwrap();
        let e = g.to_model(0x1f_ff00_0000).unwrap_err();
        assert!(e.contains("meets"), "{e}");
    }
}
