//! The counters every pmap keeps for each of its superpage sizes, as
//! FreeBSD keeps them (vm.pmap.pde.promotions, p_failures, mappings,
//! demotions, and powerpc64's vm.pmap.sp.p_fail_*), with the reason of
//! each failed promotion attempt. Each architecture names them as its own
//! sysctls do (`SizeNames`), so the counters are one type and the names
//! stay the architecture's.

use splab_vm::sysctl::Sysctls;

/// Why a promotion attempt failed. FreeBSD's pmaps log the reasons (CTR)
/// or, on powerpc64, count some of them; splab counts each architecture's
/// under the names its `SizeNames` give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromoteFail {
    /// The first entry cannot begin the superpage: it is invalid, or does
    /// not map the first page of an aligned frame of the superpage's size
    /// (armv7 counts an unreferenced first entry here too).
    FirstMisaligned,
    /// Some entry has never been accessed (a speculative mapping).
    NotAccessed,
    /// Some page of the range is not mapped (powerpc64 counts mappings
    /// before looking at them).
    Unmapped,
    /// Some entry is invalid or does not map the next physical page.
    NotContiguous,
    /// Some entry's attributes differ from the first one's.
    Attributes,
    /// Wired or managed differ (powerpc64's p_fail_flags).
    Flags,
    /// Protections differ (powerpc64's p_fail_prot).
    Prot,
    /// Cache attributes differ (powerpc64's p_fail_wimg).
    Wimg,
}

const REASONS: usize = 8;

/// FreeBSD's counters of one superpage size, the failed promotion
/// attempts by reason, and, for a size whose demotion can reuse a stashed
/// page-table page, how demotions went.
#[derive(Clone, Debug, Default)]
pub struct SizeCounters {
    pub promotions: u64,
    pub p_failures: u64,
    pub mappings: u64,
    pub demotions: u64,
    /// Demotions that reused the page-table page stashed at promotion.
    pub ptp_reused: u64,
    /// Demotions that removed the mapping instead (no page-table page,
    /// or a mapping never accessed).
    pub aborts: u64,
    fail: [u64; REASONS],
}

impl SizeCounters {
    /// Counts a failed promotion attempt. Returns false, what the attempt
    /// returns.
    pub fn failed(&mut self, why: PromoteFail) -> bool {
        self.p_failures += 1;
        self.fail[why as usize] += 1;
        false
    }

    /// Failed attempts for `why`.
    pub fn failures(&self, why: PromoteFail) -> u64 {
        self.fail[why as usize]
    }

    /// Adds the counters to `out` under the architecture's names.
    pub fn sysctls(&self, names: &SizeNames, out: &mut Sysctls) {
        let (n, d) = names.promotions;
        out.int(n, self.promotions, d);
        let (n, d) = names.p_failures;
        out.int(n, self.p_failures, d);
        let (n, d) = names.mappings;
        out.int(n, self.mappings, d);
        let (n, d) = names.demotions;
        out.int(n, self.demotions, d);
        for &(why, n, d) in names.reasons {
            out.int(n, self.failures(why), d);
        }
        if let Some([(n1, d1), (n2, d2)]) = names.demotion {
            out.int(n1, self.ptp_reused, d1);
            out.int(n2, self.aborts, d2);
        }
    }
}

/// The `SizeNames` of a superpage size named as most pmaps name theirs:
/// FreeBSD's `vm.pmap.<name>.promotions`, `.p_failures`, `.mappings` and
/// `.demotions`, described as "<size> page promotions" and so on, and the
/// reasons of failed promotions as `splab.pmap.<name>.p_failures.<reason>`.
/// With `demotion: (reused, aborts)`, also the demotion counters,
/// `splab.pmap.<name>.demotion_ptp_reused` and `.demotion_aborts`, so
/// described.
macro_rules! size_names {
    ($name:literal, $size:literal, [$(($why:ident, $reason:literal, $descr:literal)),* $(,)?] $(, demotion: ($reused:literal, $aborts:literal))?) => {
        $crate::counters::SizeNames {
            promotions: (concat!("vm.pmap.", $name, ".promotions"), concat!($size, " page promotions")),
            p_failures: (concat!("vm.pmap.", $name, ".p_failures"), concat!($size, " page promotion failures")),
            mappings: (concat!("vm.pmap.", $name, ".mappings"), concat!($size, " page mappings")),
            demotions: (concat!("vm.pmap.", $name, ".demotions"), concat!($size, " page demotions")),
            reasons: &[$(($crate::counters::PromoteFail::$why, concat!("splab.pmap.", $name, ".p_failures.", $reason), $descr)),*],
            demotion: size_names!(@demotion $name $(, $reused, $aborts)?),
        }
    };
    (@demotion $name:literal) => {
        None
    };
    (@demotion $name:literal, $reused:literal, $aborts:literal) => {
        Some([(concat!("splab.pmap.", $name, ".demotion_ptp_reused"), $reused), (concat!("splab.pmap.", $name, ".demotion_aborts"), $aborts)])
    };
}
pub(crate) use size_names;

/// How an architecture names the counters of one superpage size: sysctl
/// name and description of each.
pub struct SizeNames {
    pub promotions: (&'static str, &'static str),
    pub p_failures: (&'static str, &'static str),
    pub mappings: (&'static str, &'static str),
    pub demotions: (&'static str, &'static str),
    /// The reasons the architecture counts, with their counters' names.
    pub reasons: &'static [(PromoteFail, &'static str, &'static str)],
    /// The names of `ptp_reused` and `aborts`, for a size whose demotion
    /// can reuse a stashed page-table page.
    pub demotion: Option<[(&'static str, &'static str); 2]>,
}
