fn main() {
    let ops: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20000);
    let seed: u64 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let cfg = splab_sim::check::CheckConfig {
        ops, seed, arch: "amd64".into(),
        profile: splab_hw::profile::Profile::load("sapphire-rapids").unwrap(),
        memory: 256 << 20, superpages: true, max_procs: 4,
    };
    let t = std::time::Instant::now();
    let r = splab_sim::check::run(&cfg, &mut |_| {}).unwrap();
    println!("{:?} {:?}", t.elapsed(), r.op_counts);
    println!("ops {} refs {} mism {} stale {} fresh {} inv {}/{} faultdis {}", r.ops, r.refs, r.mismatches, r.stale_translations, r.nonzero_fresh_reads, r.invariant_failures, r.invariant_checks, r.fault_disagreements);
    for (k, v) in &r.sysctl { if !k.contains("partpopq") { println!("{k}: {v}"); } }
    for p in &r.first_problems { println!("PROBLEM {p}"); }
}
