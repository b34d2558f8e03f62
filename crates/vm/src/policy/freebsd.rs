//! FreeBSD's policy (sys/vm/vm_reserv.c with the pmaps' promotion): at a
//! fault the page comes from a reservation, an aligned superpage-sized
//! block set aside for the object range on its first fault; the pmap
//! promotes the range once the reservation and its page-table page are
//! full; nothing is resident that the program did not touch. Splits are
//! the pmap's demotions (partial unmap or protect, page-out), and memory
//! pressure breaks partially populated reservations. Everything it does is
//! in the reservation code and the pmaps; this module only says so.

use super::Policy;

pub struct FreeBsd;

impl Policy for FreeBsd {
    fn kind(&self) -> super::PolicyKind {
        super::PolicyKind::FreeBsd
    }

    fn reservations(&self) -> bool {
        true
    }
}
