//! RISC-V page-based virtual memory, Sv39 and Sv48 (RISC-V Privileged
//! Architecture, "Supervisor-Level ISA", sections on Sv39 and Sv48): the
//! page-table entry format and the hardware walk.
//!
//! Levels are numbered as the privileged spec numbers them: level 0 tables
//! hold entries mapping 4 KB, level 1 entries map 2 MB (a megapage when a
//! leaf), level 2 entries map 1 GB (a gigapage), and Sv48 adds level 3
//! (512 GB). FreeBSD's riscv pmap names the same tables from the top: its
//! L3 is level 0, L2 level 1, L1 level 2 and L0 level 3.

pub mod pte;
pub mod walk;

pub use pte::{Pte, PteFlags};
pub use walk::RiscvWalker;

use crate::radix::VaRange;

/// Entries per table (each table is one 4 KB page of 8-byte PTEs).
pub const LN_ENTRIES: u64 = 512;
/// Bytes mapped by one entry at level 0 (L3), 1 (L2) and 2 (L1).
pub const L3_SIZE: u64 = 1 << L3_SHIFT;
pub const L2_SIZE: u64 = 1 << L2_SHIFT;
pub const L1_SIZE: u64 = 1 << L1_SHIFT;
/// Shifts of each level's index field (FreeBSD's L*_SHIFT).
pub const L0_SHIFT: u32 = 39;
pub const L1_SHIFT: u32 = 30;
pub const L2_SHIFT: u32 = 21;
pub const L3_SHIFT: u32 = 12;

/// The translation scheme satp.MODE selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Three levels, 39-bit virtual addresses (FreeBSD's default).
    Sv39,
    /// Four levels, 48-bit virtual addresses.
    Sv48,
}

impl Mode {
    /// Index-field shifts of the tables, root first.
    pub fn shifts(self) -> &'static [u32] {
        match self {
            Mode::Sv39 => &[L1_SHIFT, L2_SHIFT, L3_SHIFT],
            Mode::Sv48 => &[L0_SHIFT, L1_SHIFT, L2_SHIFT, L3_SHIFT],
        }
    }

    /// Number of levels of the walk (LEVELS in the spec).
    pub fn levels(self) -> usize {
        self.shifts().len()
    }

    /// Width of a virtual address; bits above must copy the top bit.
    pub const fn va_bits(self) -> u32 {
        match self {
            Mode::Sv39 => 39,
            Mode::Sv48 => 48,
        }
    }

    /// Highest user address + 1: the lower half of the address space
    /// (FreeBSD's VM_MAXUSER_ADDRESS_SV39 and _SV48).
    pub const fn max_user_address(self) -> u64 {
        1 << (self.va_bits() - 1)
    }

    /// Whether `va` is a valid address of this mode: bits 63 down to
    /// va_bits() all equal to bit va_bits() - 1.
    pub fn canonical(self, va: u64) -> bool {
        VaRange::Canonical(self.va_bits()).contains(va)
    }

    /// FreeBSD's vm.pmap.mode value (0 = SV39, 1 = SV48).
    pub fn sysctl_value(self) -> u64 {
        match self {
            Mode::Sv39 => 0,
            Mode::Sv48 => 1,
        }
    }
}

/// Index of `va` in a table whose entries map 2^shift bytes.
#[inline]
pub fn index(va: u64, shift: u32) -> u64 {
    (va >> shift) & (LN_ENTRIES - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(Mode::Sv39.max_user_address(), 0x40_0000_0000);
        assert_eq!(Mode::Sv48.max_user_address(), 0x8000_0000_0000);
        assert!(Mode::Sv39.canonical(0x3f_ffff_f000));
        assert!(!Mode::Sv39.canonical(0x40_0000_0000));
        assert!(Mode::Sv39.canonical(0xffff_ffc0_0000_0000));
        assert!(Mode::Sv48.canonical(0x40_0000_0000));
        assert!(!Mode::Sv48.canonical(0x8000_0000_0000));
        assert_eq!(Mode::Sv48.levels(), 4);
    }
}
