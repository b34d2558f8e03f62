//! System calls that change no memory (`System::syscalls`): counted with
//! the others and charged the profile's `syscall` cost on the CPU asked.

use splab_hw::profile::Profile;
use splab_sim::{Config, System};

#[test]
fn syscalls_are_counted_and_charged_to_their_cpu() {
    let mut c = Config::new(Profile::load("sapphire-rapids").unwrap());
    c.memory = 64 << 20;
    let cost = c.profile.costs.syscall as f64;
    let mut s = System::new(c).unwrap();
    let before = (s.events().syscalls, s.breakdown().kernel, s.cycles(0), s.cycles(1));
    s.syscalls(1, 7);
    assert_eq!(s.events().syscalls - before.0, 7);
    assert_eq!(s.breakdown().kernel - before.1, 7.0 * cost);
    assert_eq!(s.cycles(1) - before.3, 7.0 * cost, "charged to CPU 1");
    assert_eq!(s.cycles(0), before.2, "and not to CPU 0");
}
