//! HPCC RandomAccess's random stream (x <- x << 1 ^ (x < 0 ? POLY : 0)),
//! defined once for the native GUPS and the simulated one, so that both
//! update the same words in the same order.

/// The stream's primitive polynomial and period.
pub const POLY: u64 = 0x7;
pub const PERIOD: i64 = 1_317_624_576_693_539_401;

#[inline(always)]
pub fn next(x: u64) -> u64 {
    (x << 1) ^ if (x as i64) < 0 { POLY } else { 0 }
}

/// The n-th value of the HPCC random stream (HPCC_starts): square-and-
/// multiply in GF(2)[x] modulo POLY.
pub fn starts(n: i64) -> u64 {
    let mut n = n;
    while n < 0 {
        n += PERIOD;
    }
    while n > PERIOD {
        n -= PERIOD;
    }
    if n == 0 {
        return 1;
    }
    let mut m2 = [0u64; 64];
    let mut t = 1u64;
    for m in m2.iter_mut() {
        *m = t;
        t = next(next(t));
    }
    let mut i = 62;
    while i >= 0 && (n >> i) & 1 == 0 {
        i -= 1;
    }
    let mut ran: u64 = 2;
    while i > 0 {
        let mut tmp = 0;
        for (j, m) in m2.iter().enumerate() {
            if (ran >> j) & 1 != 0 {
                tmp ^= m;
            }
        }
        ran = tmp;
        i -= 1;
        if (n >> i) & 1 != 0 {
            ran = next(ran);
        }
    }
    ran
}
