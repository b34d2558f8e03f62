use splab_hw::cache::{Cache, CacheConfig};
fn main() {
    for (kb, ways) in [(48u64, 12usize), (2048, 16), (107520, 15)] {
        let mut c = Cache::new(&CacheConfig { size_kb: kb, ways, latency: 1 }).unwrap();
        let mut x = 12345u64;
        let n = 20_000_000u64;
        let t = std::time::Instant::now();
        let mut h = 0;
        for _ in 0..n {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            if c.access(x % (128 << 20)) { h += 1; }
        }
        let e = t.elapsed().as_secs_f64();
        println!("{kb} KB {ways}-way: {:.1} ns/access, hits {h}", e * 1e9 / n as f64);
    }
}
