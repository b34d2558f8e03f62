//! FreeBSD's policy (sys/vm/vm_reserv.c with the pmaps' promotion): at a
//! fault the page comes from a reservation, an aligned superpage-sized
//! block set aside for the object range on its first fault; the pmap
//! promotes the range once the reservation and its page-table page are
//! full; nothing is resident that the program did not touch. Splits are
//! the pmap's demotions (partial unmap or protect, page-out), and memory
//! pressure breaks partially populated reservations. Everything it does is
//! in the reservation code and the pmaps; this module only says so, and
//! holds the one tunable that tells FreeBSD's versions apart here.

use super::Policy;
use crate::kernel::Kernel;
use crate::sysctl::Sysctls;

/// The tunable `soft_fault_superpages` is set by.
pub const SOFT_FAULT_SUPERPAGES: &str = "splab.vm.soft_fault_superpages";

pub struct FreeBsd {
    /// Whether a fault on a resident page of a fully populated
    /// reservation maps the whole superpage at once (vm_fault_soft_fast
    /// passing the reservation's psind to pmap_enter: releng/11.2 does on
    /// amd64, 12.1 also on arm, arm64, i386 and riscv, 13 wherever
    /// reservations are), rather than the page alone, the superpage then
    /// coming from promotion once every page is mapped (release 10.4 and
    /// releng/11.0, whose vm_fault_soft_fast passes psind 0, and the
    /// kernels before 2014, which had no vm_fault_soft_fast).
    pub soft_fault_superpages: bool,
}

impl Default for FreeBsd {
    fn default() -> FreeBsd {
        FreeBsd { soft_fault_superpages: true }
    }
}

impl Policy for FreeBsd {
    fn kind(&self) -> super::PolicyKind {
        super::PolicyKind::FreeBsd
    }

    fn reservations(&self) -> bool {
        true
    }

    fn soft_fault_superpages(&self) -> bool {
        self.soft_fault_superpages
    }

    fn set_tunable(&mut self, name: &str, value: &str) -> Option<Result<(), String>> {
        (name == SOFT_FAULT_SUPERPAGES).then(|| super::switch(name, value).map(|on| self.soft_fault_superpages = on))
    }

    fn tunable_names(&self) -> Vec<String> {
        vec![SOFT_FAULT_SUPERPAGES.to_string()]
    }

    fn sysctls(&self, _k: &Kernel, out: &mut Sysctls) {
        out.int(SOFT_FAULT_SUPERPAGES, self.soft_fault_superpages as u64, "A soft fault maps a fully populated reservation's superpage at once (1: FreeBSD 11.2 on amd64, 12.1 on arm, 13 everywhere) or the page alone (0: FreeBSD 10 and 11.0)");
    }
}
