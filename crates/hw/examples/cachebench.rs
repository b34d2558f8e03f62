use splab_hw::cache::{Cache, CacheConfig};
fn main() {
    let mut c = Cache::new(&CacheConfig { size_kb: 107520, ways: 15, latency: 1 }).unwrap();
    let n = 20_000_000usize;
    let mut addrs = Vec::with_capacity(n);
    let mut x = 12345u64;
    for _ in 0..n { x ^= x << 13; x ^= x >> 7; x ^= x << 17; addrs.push(x % (128 << 20)); }
    for rep in 0..2 {
    for mode in ["none", "prefetch", "load"] {
        for ahead in [8usize, 24, 64] {
            if mode == "none" && ahead != 8 { continue; }
            let t = std::time::Instant::now();
            let mut h = 0; let mut acc = 0u8;
            for i in 0..n {
                if i + ahead < n { match mode { "prefetch" => c.prefetch(addrs[i + ahead]), "load" => acc ^= c.touch_ahead(addrs[i+ahead]), _ => {} } }
                if c.access(addrs[i]) { h += 1; }
            }
            println!("rep {rep} {mode:8} ahead {ahead:2}: {:.1} ns/access ({h} {acc})", t.elapsed().as_secs_f64() * 1e9 / n as f64);
        }
    }}
}
