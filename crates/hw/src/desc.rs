//! What every descriptor format shares: a newtype over the raw word the
//! hardware reads, with a `bitflags` type naming its flag bits. The flag
//! accessors are the same for every format, so they are written once here;
//! each format's pte.rs keeps its fields, encodings and bit names.

/// Implements, for the descriptor newtype `$desc` over its raw word and its
/// flags type `$flags`: `flags`, `has` (all of), `any` (some of), `with`
/// and `without`; with `valid = FLAG`, `valid` (that bit set); and with
/// `frame = METHOD` as well, `Debug` as `Name(address flags)`, the address
/// being what METHOD returns.
macro_rules! flag_accessors {
    ($desc:ident, $flags:ident, valid = $valid:ident, frame = $frame:ident) => {
        $crate::desc::flag_accessors!($desc, $flags, valid = $valid);
        impl std::fmt::Debug for $desc {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:#x} {:?})", stringify!($desc), self.$frame(), self.flags())
            }
        }
    };
    ($desc:ident, $flags:ident, valid = $valid:ident) => {
        $crate::desc::flag_accessors!($desc, $flags);
        impl $desc {
            /// Whether the descriptor is valid: its valid bit is set.
            #[inline]
            pub fn valid(self) -> bool {
                self.0 & $flags::$valid.bits() != 0
            }
        }
    };
    ($desc:ident, $flags:ident) => {
        impl $desc {
            /// The flag bits set, without the other fields.
            #[inline]
            pub fn flags(self) -> $flags {
                $flags::from_bits_truncate(self.0)
            }
            /// Whether every bit of `f` is set.
            #[inline]
            pub fn has(self, f: $flags) -> bool {
                self.0 & f.bits() == f.bits()
            }
            /// Whether some bit of `f` is set.
            #[inline]
            pub fn any(self, f: $flags) -> bool {
                self.0 & f.bits() != 0
            }
            /// The same descriptor with every bit of `f` set.
            #[inline]
            pub fn with(self, f: $flags) -> $desc {
                $desc(self.0 | f.bits())
            }
            /// The same descriptor with every bit of `f` clear.
            #[inline]
            pub fn without(self, f: $flags) -> $desc {
                $desc(self.0 & !f.bits())
            }
        }
    };
}

pub(crate) use flag_accessors;

/// Asserts that each flag is the single bit the manual puts it at.
#[cfg(test)]
pub(crate) fn assert_bits<F: bitflags::Flags + std::fmt::Debug>(bits: &[(F, u32)])
where
    F::Bits: Into<u64>,
{
    for (f, b) in bits {
        assert_eq!(f.bits().into(), 1u64 << b, "{f:?} is bit {b}");
    }
}
