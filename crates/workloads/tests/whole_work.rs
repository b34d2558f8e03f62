//! The work of the `index` and `build` workloads beside their memory
//! references: a transaction's backend instructions and client round trip,
//! a compile's instructions, on a machine whose core dispatches one
//! instruction a cycle.

use splab_hw::profile::Profile;
use splab_sim::{Config, System};
use splab_workloads::build::{Build, INSNS_PER_SOURCE_BYTE};
use splab_workloads::index::{Index, BACKEND_INSNS_PER_TXN, BACKEND_SYSCALLS_PER_KTXN, CLIENT_INSNS_PER_TXN, CLIENT_SYSCALLS_PER_KTXN};
use splab_workloads::{Workload, WorkloadResult};

fn system() -> System {
    let mut p = Profile::load("sapphire-rapids").unwrap();
    p.core.width = 1.0;
    let mut c = Config::new(p);
    c.memory = 512 << 20;
    System::new(c).unwrap()
}

fn run(w: &mut dyn Workload, sys: &mut System) -> WorkloadResult {
    w.run(sys, &mut |_| {}).unwrap_or_else(|e| panic!("{}: {e}", w.name()))
}

/// Runs `i` on a fresh system: its figure, and the system calls, context
/// switches and instruction cycles of the run.
fn index(i: &mut Index) -> (WorkloadResult, u64, u64, f64) {
    let mut sys = system();
    let r = run(i, &mut sys);
    let e = sys.events();
    (r, e.syscalls, e.context_switches, sys.breakdown().core)
}

#[test]
fn a_transaction_is_the_lookup_plus_the_backends_work_and_the_round_trip() {
    let n = 300;
    let mut lookup = Index::new(1, 1, n).unwrap();
    lookup.set_insns_per_txn(0).unwrap();
    lookup.round_trip = false;
    let (alone, calls0, _, core0) = index(&mut lookup);
    assert!(alone.report.contains("timed: the lookup's memory references per transaction"), "{}", alone.report);

    let (whole, calls, _, core) = index(&mut Index::new(1, 1, n).unwrap());
    // The lookup's own references are an instruction each in both.
    assert_eq!(core - core0, (n * (BACKEND_INSNS_PER_TXN + CLIENT_INSNS_PER_TXN)) as f64);
    // Whole system calls of the means so far (3.057 x 300 = 917.1: 917),
    // and pgbench's exit.
    let owed = n * BACKEND_SYSCALLS_PER_KTXN / 1000 + n * CLIENT_SYSCALLS_PER_KTXN / 1000;
    assert_eq!(calls - calls0, owed + 1);
    assert!(whole.figure.value < alone.figure.value / 2.0, "tps {} with the whole transaction, {} for the lookup", whole.figure.value, alone.figure.value);
    assert!(whole.report.contains("101713 backend instructions, 6906 client instructions"), "{}", whole.report);
    assert!(!whole.report.contains("context switches"), "pgbench has a CPU of its own: {}", whole.report);
}

#[test]
fn pgbench_on_a_backends_cpu_switches_to_it_and_back_each_transaction() {
    let (n, cpus) = (100, system().ncpus());
    let mut apart = Index::new(1, cpus, n).unwrap();
    apart.round_trip = false;
    let (_, _, switches0, _) = index(&mut apart);
    let (r, _, switches, _) = index(&mut Index::new(1, cpus, n).unwrap());
    assert!(switches >= switches0 + 2 * n, "{switches} context switches, {switches0} without pgbench");
    assert!(r.report.contains("2 context switches for each of the 1 backends on pgbench's CPU"), "{}", r.report);
}

#[test]
fn a_compile_does_its_measured_instruction_work() {
    let mut none = Build::new(3, Some(2)).unwrap();
    none.set_insns_per_source_byte(0).unwrap();
    let mut sys = system();
    let without = run(&mut none, &mut sys);
    // Their references' loops' instructions only.
    let refs_only = sys.breakdown().core;

    let mut sys = system();
    let with = run(&mut Build::new(3, Some(2)).unwrap(), &mut sys);
    let line = with.report.lines().find_map(|l| l.strip_prefix("compiler instructions ")).unwrap();
    let insns: u64 = line.split(' ').next().unwrap().parse().unwrap();
    assert!(line.contains(&format!("({INSNS_PER_SOURCE_BYTE} per source byte)")), "{line}");
    assert_eq!(insns % INSNS_PER_SOURCE_BYTE, 0);
    assert_eq!(sys.breakdown().core - refs_only, insns as f64);
    assert!(with.figure.value > without.figure.value, "build time {} with the compilers' work, {} without", with.figure.value, without.figure.value);
    assert!(Build::new(3, None).unwrap().set_insns_per_source_byte(10_000_001).unwrap_err().contains("10000001"));
}
