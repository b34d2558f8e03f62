//! Host cost of the cache model: random accesses to a modelled cache of
//! each size, without and with prefetch hints.
use splab_hw::cache::{Cache, CacheConfig};

fn main() {
    let n = 10_000_000usize;
    let mut x = 12345u64;
    let addrs: Vec<u64> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % (128 << 20)
        })
        .collect();
    for kb in [1920u64, 30720, 107520] {
        let mut c = Cache::new(&CacheConfig { size_kb: kb, ways: 15, latency: 1 }, splab_hw::cache::LINE_SHIFT).unwrap();
        for ahead in [0usize, 16] {
            let t = std::time::Instant::now();
            let mut hits = 0u64;
            for i in 0..n {
                if ahead > 0 && i + ahead < n {
                    c.prefetch(addrs[i + ahead]);
                }
                hits += c.access(addrs[i]) as u64;
            }
            let ns = t.elapsed().as_secs_f64() * 1e9 / n as f64;
            println!("{kb:>6} KB cache ({:>5} KB of tags), prefetch {ahead:>2} ahead: {ns:5.1} ns/access, {hits} hits", c.host_bytes() / 1024);
        }
    }
}
