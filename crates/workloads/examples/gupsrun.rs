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
    c.timing_thread = std::env::var("THREADS").map_or(true, |v| v != "1");
    let mut s = splab_sim::System::new(c).unwrap();
    let mut g = splab_workloads::gups::Gups::new(n).unwrap();
    // UPDATES=N: time only N updates (0: the table's set-up alone).
    g.max_updates = std::env::var("UPDATES").ok().and_then(|v| v.parse().ok());
    let t = std::time::Instant::now();
    let r = g.run(&mut s, &mut |_| {}).unwrap();
    let el = t.elapsed().as_secs_f64();
    let main_cpu = thread_cpu_seconds();
    print!("{}", r.report);
    let refs = s.hw().refs;
    let promotions = s.sysctls().get_int("vm.pmap.pde.promotions").unwrap_or(0);
    println!("refs {refs} host {el:.2}s  {:.1} Mrefs/s  promotions {promotions} tlbmiss {}", refs as f64 / el / 1e6, s.tlb_report().total_misses);
    let b = s.thread_balance();
    println!("balance: batches {} translate {:.2}s waited {:.2}s timing {:.2}s", b.batches, b.translate_seconds, b.waited_seconds, b.timing_seconds);
    // The translating thread's own CPU time (it includes its waits for the
    // timing thread, at most 100 us of spinning each): the rate it alone
    // would allow, whatever else the host runs.
    println!("main thread CPU {main_cpu:.2}s, {:.1} ns/ref", main_cpu / refs as f64 * 1e9);
}

fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
