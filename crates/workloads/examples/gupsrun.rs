//! A minimal GUPS run without the CLI, for profiling the simulator itself
//! (perf, callgrind): `gupsrun LOG2_TABLE on|off`, machine profile from the
//! PROFILE environment variable (built-in name or TOML path).
use splab_workloads::Workload;

fn main() {
    let n: u32 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(24);
    let sp = std::env::args().nth(2).map(|s| s == "on").unwrap_or(true);
    let name = std::env::var("PROFILE").unwrap_or("sapphire-rapids".into());
    let mut c = splab_sim::Config::new(splab_hw::profile::Profile::load(&name).unwrap());
    c.superpages = sp;
    let mut s = splab_sim::System::new(c).unwrap();
    let mut g = splab_workloads::gups::Gups::new(n).unwrap();
    let t = std::time::Instant::now();
    let r = g.run(&mut s, &mut |_| {}).unwrap();
    let el = t.elapsed().as_secs_f64();
    print!("{}", r.report);
    let refs = s.hw().refs;
    let promotions = s.vm.sysctls().get_int("vm.pmap.pde.promotions").unwrap_or(0);
    println!("refs {refs} host {el:.2}s  {:.1} Mrefs/s  promotions {promotions} tlbmiss {}", refs as f64 / el / 1e6, s.tlb_report().total_misses);
}
