//! The microbenchmarks: dependent pointer chases through chosen lines of a
//! region (one chain, or several independent ones at once), a chain of
//! dependent additions for the clock, and the kernel and memory operations
//! whose cost the profile charges (zeroing and copying a page, a fault, a
//! system call).
//!
//! Every probe is timed with CLOCK_MONOTONIC and reports how much of that
//! time the thread was really on a CPU, so the caller can tell a slow
//! machine from a busy one.

use splab_native::lat::{chain, chase, Pattern};
use splab_native::Timer;
use std::hint::black_box;

/// One timed probe: nanoseconds per operation and the share of the wall
/// time this thread was on a CPU.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub ns: f64,
    pub on_cpu: f64,
}

/// Nanoseconds per operation from the thread's CPU time, which leaves
/// out the time other work on this machine held the CPU (it cannot leave
/// out what that work did to the caches and TLBs), or from the wall time
/// when the CPU clock did not move.
fn sample(timer: &Timer, ops: u64) -> Sample {
    let t = if timer.cpu > 0.0 { timer.cpu.min(timer.wall.max(timer.cpu)) } else { timer.wall };
    Sample { ns: t * 1e9 / ops.max(1) as f64, on_cpu: if timer.wall > 0.0 { (timer.cpu / timer.wall).min(1.0) } else { 1.0 } }
}

/// Links the elements at byte offsets `offs` of `base` into one random
/// cycle (each element holds the address of the next) and returns its
/// first element. Offsets are 8-aligned and inside the mapping.
///
/// # Safety
/// `base + off` must be writable for 8 bytes for every offset, and no
/// other reference to those bytes may be live.
pub unsafe fn link(base: *mut u8, offs: &[usize], seed: u64) -> *const usize {
    write_cycle(base, offs, seed);
    base.add(offs[0]) as *const usize
}

/// Writes a random cycle through the elements (see `link`); returns the
/// successor of each.
///
/// # Safety
/// As for `link`.
unsafe fn write_cycle(base: *mut u8, offs: &[usize], seed: u64) -> Vec<usize> {
    debug_assert!(!offs.is_empty() && offs.iter().all(|o| o % 8 == 0));
    let next = chain(offs.len(), Pattern::Random, seed);
    for (e, &f) in next.iter().enumerate() {
        base.add(offs[e]).cast::<usize>().write(base.add(offs[f]) as usize);
    }
    next
}

/// Times `loads` dependent loads along a chain from `start`, after
/// `warm` untimed ones; returns ns per load and where the chase ended, so
/// that a following measurement goes on from there instead of replaying
/// lines this one has just brought into the caches.
///
/// # Safety
/// `start` must be an element of a cycle made by `link` whose memory is
/// still mapped and unchanged.
pub unsafe fn time_chase(start: *const usize, warm: u64, loads: u64) -> (Sample, *const usize) {
    let p = chase(start, warm);
    let mut t = Timer::default();
    t.start();
    let p = chase(p, loads);
    t.stop();
    (sample(&t, loads), black_box(p))
}

/// Follows `K` chains at once, one load of each per step: the loads of a
/// step do not depend on each other, so their misses can overlap.
#[inline(never)]
fn chase_k<const K: usize>(mut p: [*const usize; K], steps: u64) -> [*const usize; K] {
    for _ in 0..steps {
        for q in p.iter_mut() {
            // SAFETY: every pointer is an element of a cycle made by
            // `link`, and every element holds another element's address.
            *q = unsafe { std::ptr::read_volatile(*q) } as *const usize;
        }
    }
    p
}

fn run_k<const K: usize>(starts: &mut [*const usize], warm: u64, steps: u64) -> Timer {
    let mut p = [std::ptr::null::<usize>(); K];
    p.copy_from_slice(&starts[..K]);
    let p = chase_k(p, warm);
    let mut t = Timer::default();
    t.start();
    let p = chase_k(p, steps);
    t.stop();
    starts[..K].copy_from_slice(&black_box(p));
    t
}

/// The chain counts `time_chases` supports, and that the walk probes
/// run (up to 16: one register each).
pub const CHAIN_COUNTS: &[usize] = &[1, 2, 3, 4, 6, 8, 10, 12, 16];

/// The chain counts the data-miss probe runs: past 16 as well, since an
/// out-of-order core can keep more misses in flight than one chain per
/// register (on an AMD Zen 5 guest calibrate's chases over 256 MB took
/// 10.5 ns a load with 16 chains, 7.1 with 24 and 5.7 with 32 and 48;
/// the chains past the registers live on the stack, in the first-level
/// cache).
pub const DATA_CHAIN_COUNTS: &[usize] = &[1, 2, 3, 4, 6, 8, 10, 12, 16, 24, 32, 48];

/// Times `steps` steps of `starts.len()` independent chases at once (a
/// count from `DATA_CHAIN_COUNTS`); returns ns per load (a step is one load of
/// each chain), and leaves in `starts` where each chase ended.
///
/// # Safety
/// As for `time_chase`, for every start.
pub unsafe fn time_chases(starts: &mut [*const usize], warm: u64, steps: u64) -> Sample {
    let t = match starts.len() {
        1 => run_k::<1>(starts, warm, steps),
        2 => run_k::<2>(starts, warm, steps),
        3 => run_k::<3>(starts, warm, steps),
        4 => run_k::<4>(starts, warm, steps),
        6 => run_k::<6>(starts, warm, steps),
        8 => run_k::<8>(starts, warm, steps),
        10 => run_k::<10>(starts, warm, steps),
        12 => run_k::<12>(starts, warm, steps),
        16 => run_k::<16>(starts, warm, steps),
        24 => run_k::<24>(starts, warm, steps),
        32 => run_k::<32>(starts, warm, steps),
        48 => run_k::<48>(starts, warm, steps),
        k => panic!("time_chases: {k} chains is not one of {DATA_CHAIN_COUNTS:?}"),
    };
    sample(&t, steps * starts.len() as u64)
}

/// The element `k` steps along the chain from `p` (walks it).
///
/// # Safety
/// As for `time_chase`.
pub unsafe fn advance(p: *const usize, k: u64) -> *const usize {
    chase(p, k)
}

/// Like `link`, but returns every element in the order the cycle visits
/// them, so that several chases can start evenly spaced along it.
///
/// # Safety
/// As for `link`.
pub unsafe fn link_in_order(base: *mut u8, offs: &[usize], seed: u64) -> Vec<*const usize> {
    let next = write_cycle(base, offs, seed);
    let mut order = Vec::with_capacity(offs.len());
    let mut e = 0;
    for _ in 0..offs.len() {
        order.push(base.add(offs[e]) as *const usize);
        e = next[e];
    }
    order
}

/// Loads every element of `order` in turn, `passes` times over, and sums
/// what they hold: the loads do not depend on each other (the next
/// address comes from `order`, not from the last load), as a loop over an
/// array issues them, so the core overlaps as many of their misses and
/// walks as it can. Returns ns per load.
///
/// # Safety
/// Every element must be readable for 8 bytes and not written meanwhile.
pub unsafe fn time_loads(order: &[*const usize], passes: u64) -> Sample {
    #[inline(never)]
    fn sum(order: &[*const usize], passes: u64) -> usize {
        let mut s = 0usize;
        for _ in 0..passes {
            for &p in order {
                // SAFETY: the caller's.
                s = s.wrapping_add(unsafe { p.read() });
            }
        }
        s
    }
    let mut t = Timer::default();
    t.start();
    black_box(sum(black_box(order), passes));
    t.stop();
    sample(&t, passes * order.len() as u64)
}

/// Additions per pass of `add_chain`, each depending on the one before.
const ADDS: u64 = 200;

/// `passes` x ADDS dependent register-to-register additions: one cycle
/// each on every x86-64 core since the Pentium Pro, so their rate is the
/// core clock. (Not `add reg, imm`: Golden Cove's renamer folds chains of
/// immediate additions and runs several a cycle.)
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn add_chain(passes: u64, one: u64) -> u64 {
    let mut x = 0u64;
    for _ in 0..passes {
        // SAFETY: register arithmetic only.
        unsafe { std::arch::asm!(".rept 200", "add {x}, {y}", ".endr", x = inout(reg) x, y = in(reg) one, options(nomem, nostack)) };
    }
    x
}

/// The core clock in GHz from a chain of dependent additions taking about
/// `ms` milliseconds, or None where that chain cannot be written
/// (not x86-64).
pub fn clock_ghz(ms: f64) -> Option<Sample> {
    #[cfg(target_arch = "x86_64")]
    {
        // A pass is 200 cycles: about 70 ns at 3 GHz.
        let passes = ((ms * 1e6 / 70.0) as u64).max(1000);
        let mut t = Timer::default();
        t.start();
        black_box(add_chain(black_box(passes), black_box(1)));
        t.stop();
        let s = sample(&t, passes * ADDS);
        Some(Sample { ns: 1.0 / s.ns, on_cpu: s.on_cpu })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ms;
        None
    }
}

/// Independent chains in `chains`' loop: the loop's additions a pass.
const CHAIN_ADDS: u64 = 12;

/// `passes` x 12 additions in `k` independent register chains (k of 4, 6
/// or 12), and the loop's decrement and branch: with enough chains the
/// core dispatches as many a cycle as its width (or its integer ALUs)
/// allows. Register-to-register, not immediate (Golden Cove folds
/// immediate chains).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn chains(k: usize, passes: u64) -> u64 {
    let (mut a, mut b, mut c, mut d, mut e, mut f) = (1u64, 2u64, 3u64, 4u64, 5u64, 6u64);
    let (mut g, mut h, mut i, mut j, mut l, mut m) = (7u64, 8u64, 9u64, 10u64, 11u64, 12u64);
    let one = 1u64;
    let mut n = passes;
    // SAFETY: register arithmetic only; `n` counts down to zero.
    unsafe {
        match k {
            4 => std::arch::asm!(
                "2:",
                "add {a}, {o}", "add {b}, {o}", "add {c}, {o}", "add {d}, {o}",
                "add {a}, {o}", "add {b}, {o}", "add {c}, {o}", "add {d}, {o}",
                "add {a}, {o}", "add {b}, {o}", "add {c}, {o}", "add {d}, {o}",
                "dec {n}", "jnz 2b",
                a = inout(reg) a, b = inout(reg) b, c = inout(reg) c, d = inout(reg) d, o = in(reg) one, n = inout(reg) n,
                options(nomem, nostack)
            ),
            6 => std::arch::asm!(
                "2:",
                "add {a}, {o}", "add {b}, {o}", "add {c}, {o}", "add {d}, {o}", "add {e}, {o}", "add {f}, {o}",
                "add {a}, {o}", "add {b}, {o}", "add {c}, {o}", "add {d}, {o}", "add {e}, {o}", "add {f}, {o}",
                "dec {n}", "jnz 2b",
                a = inout(reg) a, b = inout(reg) b, c = inout(reg) c, d = inout(reg) d, e = inout(reg) e, f = inout(reg) f,
                o = in(reg) one, n = inout(reg) n,
                options(nomem, nostack)
            ),
            _ => std::arch::asm!(
                "2:",
                "add {a}, {o}", "add {b}, {o}", "add {c}, {o}", "add {d}, {o}", "add {e}, {o}", "add {f}, {o}",
                "add {g}, {o}", "add {h}, {o}", "add {i}, {o}", "add {j}, {o}", "add {l}, {o}", "add {m}, {o}",
                "dec {n}", "jnz 2b",
                a = inout(reg) a, b = inout(reg) b, c = inout(reg) c, d = inout(reg) d, e = inout(reg) e, f = inout(reg) f,
                g = inout(reg) g, h = inout(reg) h, i = inout(reg) i, j = inout(reg) j, l = inout(reg) l, m = inout(reg) m,
                o = in(reg) one, n = inout(reg) n,
                options(nomem, nostack)
            ),
        }
    };
    let _ = n;
    a ^ b ^ c ^ d ^ e ^ f ^ g ^ h ^ i ^ j ^ l ^ m
}

/// ns per instruction of loops of 4, 6 and 12 independent chains of
/// additions (`chains`; 14 instructions a pass, the loop's own two
/// included), each over about `ms` milliseconds: at the clock, the most
/// instructions a cycle the core dispatches and executes. None where the
/// loops cannot be written (not x86-64).
pub fn width_ns(ms: f64) -> Option<Vec<(usize, Sample)>> {
    #[cfg(target_arch = "x86_64")]
    {
        // A pass is 14 instructions: under 2 ns at 3 GHz.
        let passes = ((ms * 1e6 / 2.0) as u64).max(10_000);
        let mut out = Vec::new();
        for k in [4usize, 6, 12] {
            let mut t = Timer::default();
            t.start();
            black_box(chains(black_box(k), black_box(passes)));
            t.stop();
            out.push((k, sample(&t, passes * (CHAIN_ADDS + 2))));
        }
        Some(out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ms;
        None
    }
}

/// `passes` x 16 dependent 64-bit multiplies (`imul`), or with `div`
/// dependent 64-bit divides (`div` of a 62-bit dividend by 3, the
/// quotient's high bit set again by an `or` each time, which the caller
/// subtracts: one cycle).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn long_chain(div: bool, passes: u64) -> u64 {
    let mut x = 0x3000_0000_0000_0001u64;
    let mut n = passes;
    // SAFETY: register arithmetic only (the divisor is 3, never zero; the
    // quotient fits: rdx is zeroed before each divide).
    unsafe {
        if div {
            std::arch::asm!(
                "2:",
                ".rept 16",
                "xor edx, edx", "div {d}", "or rax, {hi}",
                ".endr",
                "dec {n}", "jnz 2b",
                inout("rax") x, out("rdx") _, d = in(reg) 3u64, hi = in(reg) 0x3000_0000_0000_0000u64, n = inout(reg) n,
                options(nomem, nostack)
            );
        } else {
            std::arch::asm!(
                "2:",
                ".rept 16",
                "imul {x}, {x}",
                ".endr",
                "dec {n}", "jnz 2b",
                x = inout(reg) x, n = inout(reg) n,
                options(nomem, nostack)
            );
        }
    }
    let _ = n;
    x
}

/// ns per multiply and per divide of `long_chain`'s chains (the divide's
/// `or` included), over about `ms` milliseconds each.
pub fn long_ops_ns(ms: f64) -> Option<(Sample, Sample)> {
    #[cfg(target_arch = "x86_64")]
    {
        let passes = |ns_pass: f64| ((ms * 1e6 / ns_pass) as u64).max(1000);
        let time = |div: bool, p: u64| {
            let mut t = Timer::default();
            t.start();
            black_box(long_chain(black_box(div), black_box(p)));
            t.stop();
            sample(&t, p * 16)
        };
        // Multiplies about 1 ns each, divides about 5 ns.
        Some((time(false, passes(16.0)), time(true, passes(80.0))))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ms;
        None
    }
}

/// `passes` x 64 branches on the bits of words of `bits` (one word a pass,
/// loaded well before its branches are reached): each tests one bit and
/// skips an addition where it is set. The branches' operand is ready
/// when they dispatch, so a mispredicted one costs the front end's refill.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn bit_branches(bits: &[u64], passes: u64) -> u64 {
    let mut acc = 0u64;
    let mut n = passes;
    let mut p = bits.as_ptr();
    let len = bits.len() as u64;
    let mut left = len;
    // SAFETY: reads `bits[0..len]`, wrapping back to its start; `n`
    // counts down to zero.
    unsafe {
        std::arch::asm!(
            "2:",
            "mov {w}, [{p}]",
            "add {p}, 8",
            "dec {left}",
            "jnz 3f",
            "mov {p}, {base}",
            "mov {left}, {len}",
            "3:",
            ".set k, 0",
            ".rept 64",
            "bt {w}, k",
            "jc 4f",
            "add {acc}, 1",
            "4:",
            ".set k, k+1",
            ".endr",
            "dec {n}", "jnz 2b",
            w = out(reg) _, p = inout(reg) p, left = inout(reg) left, base = in(reg) bits.as_ptr(), len = in(reg) len,
            acc = inout(reg) acc, n = inout(reg) n,
            options(nostack, readonly)
        );
    }
    let _ = (n, p, left);
    acc
}

/// ns a branch of `bit_branches` over random bits, less over bits all
/// clear (always predicted), over about `ms` milliseconds each: half the
/// random ones are mispredicted, so twice it is the penalty.
pub fn mispredict_ns(ms: f64) -> Option<(Sample, Sample)> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut rng = splab_native::Rng::new(0xb1a5);
        // 64 KB of random words: in the first-level cache or the second,
        // ahead of the branches either way; too many for a predictor to
        // learn.
        let random: Vec<u64> = (0..8192).map(|_| rng.next_u64()).collect();
        let zero = vec![0u64; random.len()];
        let passes = ((ms * 1e6 / 100.0) as u64).max(1000);
        let time = |bits: &[u64]| {
            let mut t = Timer::default();
            t.start();
            black_box(bit_branches(black_box(bits), black_box(passes)));
            t.stop();
            sample(&t, passes * 64)
        };
        Some((time(&random), time(&zero)))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ms;
        None
    }
}

fn map_4k(len: usize) -> Result<*mut u8, String> {
    // SAFETY: a fresh anonymous mapping; nothing else refers to it.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap of {len} bytes: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the range was just mapped. A failure only leaves THP
    // possible, which does not change what is measured here.
    unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
    Ok(p.cast())
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: the mapping was made by map_4k with this length.
    unsafe { libc::munmap(p.cast(), len) };
}

/// Bytes of the buffer that the page zeroing and copying probes cycle
/// through: larger than an L2, so pages come from farther out as a fresh
/// page does.
const PAGE_BUF: usize = 32 << 20;

/// ns to zero one 4 KB page (memset) and to copy one (memcpy), each over
/// `rounds` passes through a 32 MB buffer.
pub fn zero_copy_4k(rounds: u32) -> Result<(Sample, Sample), String> {
    let p = map_4k(PAGE_BUF)?;
    let pages = PAGE_BUF / 4096;
    // SAFETY: the buffer is ours and PAGE_BUF long; touch it first so that
    // faults are not timed.
    unsafe { std::ptr::write_bytes(p, 1, PAGE_BUF) };
    let (mut tz, mut tc) = (Timer::default(), Timer::default());
    for _ in 0..rounds {
        tz.start();
        for i in 0..pages {
            // SAFETY: page i lies inside the buffer.
            unsafe { std::ptr::write_bytes(black_box(p.add(i * 4096)), 0, 4096) };
        }
        tz.stop();
        tc.start();
        for i in 0..pages / 2 {
            // SAFETY: pages i and i + pages/2 lie inside the buffer and do
            // not overlap.
            unsafe { std::ptr::copy_nonoverlapping(black_box(p.add(i * 4096)), p.add((i + pages / 2) * 4096), 4096) };
        }
        tc.stop();
    }
    unmap(p, PAGE_BUF);
    Ok((sample(&tz, pages as u64 * rounds as u64), sample(&tc, (pages / 2) as u64 * rounds as u64)))
}

/// ns per line of a sequential copy of `bytes` from `src` to `dst`,
/// counting each line read and each line written (so a copy of B bytes
/// moves 2B/64 lines): the rate one core streams memory at, with the
/// hardware prefetchers running ahead of it. The copy is a loop over the
/// words that the compiler vectorises, as it does STREAM's kernels, each
/// word plus one: a plain copy loop becomes a call to the library's
/// memcpy, whose path for large copies (non-temporal stores that skip the
/// caches) or for 4 KB pieces is not the program's (on an AMD Zen 5 guest
/// 4 KB memcpys streamed 1.92 to 1.95 ns a line, a vectorised loop 1.63
/// to 1.72, and STREAM's Copy 1.68).
///
/// # Safety
/// `src` must be readable and `dst` writable for `bytes` bytes (a
/// multiple of 64), 8-byte aligned, and the two must not overlap.
pub unsafe fn copy_lines(src: *const u8, dst: *mut u8, bytes: usize) -> Sample {
    #[inline(never)]
    fn copy(src: &[u64], dst: &mut [u64]) {
        for (d, s) in dst.chunks_exact_mut(8).zip(src.chunks_exact(8)) {
            for w in 0..8 {
                d[w] = s[w].wrapping_add(1);
            }
        }
    }
    let src = std::slice::from_raw_parts(src as *const u64, bytes / 8);
    let dst = std::slice::from_raw_parts_mut(dst as *mut u64, bytes / 8);
    let mut t = Timer::default();
    t.start();
    copy(black_box(src), dst);
    t.stop();
    black_box(dst);
    sample(&t, 2 * (bytes / 64) as u64)
}

/// `n` byte offsets of random lines (with repeats) among the first
/// `bytes`, from `seed`: where `random_lines` and `window_loop` go.
fn random_line_offsets(bytes: usize, n: usize, seed: u64) -> Vec<u64> {
    let lines = (bytes / 64).max(1) as u64;
    let mut rng = splab_native::Rng::new(seed);
    (0..n).map(|_| rng.below(lines) * 64).collect()
}

/// ns per access of `n` independent accesses to random lines of the
/// `bytes` from `base` (nothing waits for one before the next issues):
/// loads summed, or, with `store`, a store to each. Stores that miss take
/// longer than loads where fewer of them are in flight at once (see
/// `Overlap::store_mlp` in the profile).
///
/// # Safety
/// `base` must be readable and writable for `bytes` bytes, 8-byte
/// aligned, and nothing else may use it meanwhile.
pub unsafe fn random_lines(base: *mut u8, bytes: usize, n: usize, seed: u64, store: bool) -> Sample {
    let at: Vec<*const usize> = random_line_offsets(bytes, n, seed).into_iter().map(|o| base.add(o as usize) as *const usize).collect();
    if !store {
        return time_loads(&at, 1);
    }
    let mut t = Timer::default();
    t.start();
    for (i, &p) in at.iter().enumerate() {
        (p as *mut usize).write(i);
    }
    t.stop();
    black_box(base);
    sample(&t, n as u64)
}

/// The loop shapes `window_loop` times: independent misses to random
/// lines with the loop's other instructions between them, each an exact
/// instruction count (they are written in assembly, so that no compiler
/// changes them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowShape {
    /// A load of the next offset, an add from the line it names (the
    /// miss), `n` nops, and the loop's step, compare and branch: 5 + n
    /// instructions, no stores.
    Nops(u32),
    /// A load of the next offset, an xor into the line it names (the
    /// miss, read and written), `n` stores to one line that stays in the
    /// first-level cache, and the loop's three: 5 + n instructions, 1 + n
    /// stores.
    Stores(u32),
}

impl WindowShape {
    /// The shapes calibrate times: two nop counts for how much room the
    /// window has and what a miss takes of it besides its instructions,
    /// two store counts for what a store takes.
    pub const ALL: [WindowShape; 4] = [WindowShape::Nops(16), WindowShape::Nops(32), WindowShape::Stores(2), WindowShape::Stores(3)];

    /// Instructions an iteration.
    pub fn instructions(self) -> u32 {
        match self {
            WindowShape::Nops(n) | WindowShape::Stores(n) => 5 + n,
        }
    }

    /// Stores an iteration.
    pub fn stores(self) -> u32 {
        match self {
            WindowShape::Nops(_) => 0,
            WindowShape::Stores(n) => 1 + n,
        }
    }

    pub fn name(self) -> String {
        match self {
            WindowShape::Nops(n) => format!("miss+{n} nops"),
            WindowShape::Stores(n) => format!("rmw miss+{n} stores"),
        }
    }
}

/// One pass of `shape` over the byte offsets `offs` from `base` (x86-64
/// only; elsewhere None). Each iteration's miss is independent of the
/// others', so the core overlaps as many as its window holds.
///
/// # Safety
/// `base + off` must be readable and writable for 8 bytes for every
/// offset, 8-aligned, and nothing else may use them meanwhile.
#[cfg(target_arch = "x86_64")]
unsafe fn window_pass(base: *mut u8, offs: &[u64], shape: WindowShape, sink: *mut u64) -> Option<u64> {
    use std::arch::asm;
    // One iteration: the next offset, the miss (`$miss`), `$n` times
    // `$fill`, and the loop's step, compare and branch.
    macro_rules! pass {
        ($miss:literal, $fill:literal, $n:literal, $($operands:tt)*) => {
            asm!(
                "2:",
                "mov {t}, qword ptr [{p}]",
                $miss,
                ".rept {n}",
                $fill,
                ".endr",
                "add {p}, 8",
                "cmp {p}, {e}",
                "jne 2b",
                t = out(reg) _, p = inout(reg) offs.as_ptr() => _, e = in(reg) offs.as_ptr().add(offs.len()),
                b = in(reg) base, n = const $n, $($operands)*
            )
        };
    }
    macro_rules! nops {
        ($n:literal) => {{
            let mut acc = 0u64;
            pass!("add {acc}, qword ptr [{b} + {t}]", "nop", $n, acc = inout(reg) acc, options(nostack));
            acc
        }};
    }
    macro_rules! stores {
        ($n:literal) => {{
            pass!("xor qword ptr [{b} + {t}], {t}", "mov qword ptr [{k}], {t}", $n, k = in(reg) sink, options(nostack));
            0
        }};
    }
    if offs.is_empty() {
        return Some(0);
    }
    Some(match shape {
        WindowShape::Nops(16) => nops!(16),
        WindowShape::Nops(32) => nops!(32),
        WindowShape::Stores(2) => stores!(2),
        WindowShape::Stores(3) => stores!(3),
        _ => return None,
    })
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn window_pass(_: *mut u8, _: &[u64], _: WindowShape, _: *mut u64) -> Option<u64> {
    None
}

/// ns per iteration of `shape` over `n` random lines of the `bytes` from
/// `base` (see `WindowShape`); None for a shape not written out, or off
/// x86-64.
///
/// # Safety
/// `base` must be readable and writable for `bytes` bytes, 8-byte
/// aligned, and nothing else may use it meanwhile.
pub unsafe fn window_loop(base: *mut u8, bytes: usize, n: usize, seed: u64, shape: WindowShape) -> Option<Sample> {
    let offs = random_line_offsets(bytes, n, seed);
    let mut sink = [0u64; 8];
    let mut t = Timer::default();
    t.start();
    let r = window_pass(base, black_box(&offs), shape, sink.as_mut_ptr());
    t.stop();
    black_box((r?, sink));
    Some(sample(&t, n as u64))
}

/// Sums every word of `K` equal parts of `words` words from `base`, a line
/// of each part in turn: `K` sequential read streams at once. Each word of
/// a line has a sum of its own, so that the additions do not wait for one
/// another and the compiler vectorises them. One sum for all was a chain
/// of eight additions a line, one a cycle: 8 cycles a line, about what
/// the memory gives one stream on an AMD Zen 5 guest (2.1 ns at 3.8 GHz),
/// so that the probe could not tell the core's bound from the memory's.
/// With eight sums the loop's own bound is a few cycles a line (there,
/// one stream still read 2.0 to 2.3 ns a line: the memory's).
fn read_k<const K: usize>(base: &[u64]) -> u64 {
    let n = base.len() / K / 8 * 8;
    let parts: [&[u64]; K] = std::array::from_fn(|k| &base[k * n..(k + 1) * n]);
    let mut s = [[0u64; 8]; K];
    for i in (0..n).step_by(8) {
        for k in 0..K {
            let line = &parts[k][i..i + 8];
            for w in 0..8 {
                s[k][w] = s[k][w].wrapping_add(line[w]);
            }
        }
    }
    s.iter().flatten().fold(0, |a, &b| a.wrapping_add(b))
}

/// ns per line read of `k` (1 to 4) sequential read streams at once over
/// `bytes` from `base` (each a k-th of it): how one core's streaming rate
/// grows with the streams its prefetchers follow at once, as each keeps
/// only so many lines in flight. Other k: None.
///
/// # Safety
/// `base` must be readable for `bytes` bytes, 8-byte aligned, and not
/// written by anything else meanwhile.
pub unsafe fn read_streams(base: *const u8, bytes: usize, k: usize) -> Option<Sample> {
    let words = std::slice::from_raw_parts(base as *const u64, bytes / 8);
    let mut t = Timer::default();
    t.start();
    let sum = match k {
        1 => read_k::<1>(black_box(words)),
        2 => read_k::<2>(black_box(words)),
        3 => read_k::<3>(black_box(words)),
        4 => read_k::<4>(black_box(words)),
        _ => return None,
    };
    t.stop();
    black_box(sum);
    Some(sample(&t, (bytes / 64) as u64))
}

/// ns per line of reading whole 4 KB pages from `base`, every word, the
/// pages in the given order (page numbers from `base`): in address order
/// over memory that is physically contiguous, a prefetcher that goes on
/// into the next frame streams across the pages' edges; in a random order
/// every page starts a new stream.
///
/// # Safety
/// `base` must be readable for every page named, 8-byte aligned, and not
/// written by anything else meanwhile.
pub unsafe fn read_pages(base: *const u8, order: &[usize]) -> Sample {
    #[inline(never)]
    fn sum(base: *const u8, order: &[usize]) -> u64 {
        let mut s = 0u64;
        for &p in order {
            // SAFETY: the caller's promise.
            let words = unsafe { std::slice::from_raw_parts(base.add(p << 12) as *const u64, 512) };
            s = words.iter().fold(s, |a, &w| a.wrapping_add(w));
        }
        s
    }
    let mut t = Timer::default();
    t.start();
    let s = sum(black_box(base), order);
    t.stop();
    black_box(s);
    sample(&t, order.len() as u64 * 64)
}

/// How a region's 4 KB pages lie in physical memory (`frame_runs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FrameRuns {
    /// Pages present.
    pub pages: u64,
    /// Pages whose frame is the one after the previous page's.
    pub followed: u64,
    /// Distinct aligned groups of eight frames the pages lie in: the
    /// groups whose 8-byte page-table entries, a host's under nested
    /// paging, share a 64-byte line.
    pub lines: u64,
    /// Distinct aligned 2 MB regions of frames the pages lie in.
    pub regions: u64,
}

impl FrameRuns {
    /// Counts the runs of a region's frames, page by page (None: absent).
    pub fn of(pfns: &[Option<u64>]) -> Option<FrameRuns> {
        let present: Vec<u64> = pfns.iter().flatten().copied().collect();
        if present.is_empty() || present.iter().all(|&p| p == 0) {
            return None;
        }
        let distinct = |shift: u32| present.iter().map(|p| p >> shift).collect::<std::collections::HashSet<_>>().len() as u64;
        Some(FrameRuns {
            pages: present.len() as u64,
            followed: pfns.windows(2).filter(|w| matches!(w, [Some(a), Some(b)] if *b == a + 1)).count() as u64,
            lines: distinct(3),
            regions: distinct(9),
        })
    }
}

/// Physical frames behind `bytes` of 4 KB pages at `base`, as
/// /proc/self/pagemap gives them. None where the file cannot be read or
/// hides the frame numbers (it shows them to root only).
pub fn frame_runs(base: *const u8, bytes: usize) -> Option<FrameRuns> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open("/proc/self/pagemap").ok()?;
    let first = base as u64 / 4096;
    let n = bytes / 4096;
    f.seek(SeekFrom::Start(first * 8)).ok()?;
    let mut raw = vec![0u8; n * 8];
    f.read_exact(&mut raw).ok()?;
    // Bit 63: present; bits 0 to 54: the frame number.
    let pfns: Vec<Option<u64>> = raw
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .map(|e| (e >> 63 == 1).then_some(e & ((1 << 55) - 1)))
        .collect();
    FrameRuns::of(&pfns)
}

/// ns per page of a demand-zero fault round trip: mmap 1 MB of 4 KB
/// pages, write one byte in each, munmap, `rounds` times. This is the
/// kernel's fault path with its page zeroing, plus a share of the two
/// system calls.
pub fn fault_4k(rounds: u32) -> Result<Sample, String> {
    const LEN: usize = 1 << 20;
    let mut t = Timer::default();
    for _ in 0..rounds {
        t.start();
        let p = map_4k(LEN)?;
        for i in 0..LEN / 4096 {
            // SAFETY: inside the fresh mapping.
            unsafe { std::ptr::write_volatile(p.add(i * 4096), 1) };
        }
        unmap(p, LEN);
        t.stop();
    }
    Ok(sample(&t, (LEN / 4096) as u64 * rounds as u64))
}

/// ns per system call that does nothing (getppid), over `calls` calls.
pub fn syscall(calls: u64) -> Sample {
    let mut t = Timer::default();
    t.start();
    for _ in 0..calls {
        // SAFETY: getppid takes no arguments and cannot fail.
        black_box(unsafe { libc::syscall(libc::SYS_getppid) });
    }
    t.stop();
    sample(&t, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_visit_every_element_and_k_chases_agree() {
        let mut buf = vec![0usize; 4096];
        let base = buf.as_mut_ptr().cast::<u8>();
        let offs: Vec<usize> = (0..512).map(|i| i * 64).collect();
        // SAFETY: every offset is inside the 32 KB buffer.
        unsafe {
            let s = link(base, &offs, 7);
            assert_eq!(advance(s, 512), s);
            assert_ne!(advance(s, 1), s);
            let mut starts: Vec<*const usize> = (0..4).map(|k| advance(s, k * 128)).collect();
            let r = time_chases(&mut starts, 10, 1000);
            // 1010 steps of each chase along the 512-element cycle.
            assert_eq!(starts[0], advance(s, 1010));
            assert!(r.ns > 0.0 && r.on_cpu <= 1.0);
        }
        if let Some(g) = clock_ghz(1.0) {
            assert!(g.ns > 0.1 && g.ns < 20.0, "{} GHz", g.ns);
        }
    }

    /// The stream probes read and write every word they are given: the
    /// read streams sum all of them, for every count of streams, and the
    /// copy writes each word plus one.
    #[test]
    fn stream_probes_touch_every_word() {
        let words: Vec<u64> = (0..4096).map(|i| i * i + 7).collect();
        let all = words.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        assert_eq!(read_k::<1>(&words), all);
        assert_eq!(read_k::<2>(&words), all);
        assert_eq!(read_k::<4>(&words), all);
        // Three parts of 1360 words (170 lines): the last 16 words are
        // past them, read by no stream.
        assert_eq!(read_k::<3>(&words), words[..4080].iter().fold(0u64, |a, &b| a.wrapping_add(b)));
        let mut dst = vec![0u64; 4096];
        // SAFETY: both buffers are 32 KB, 8-byte aligned, and apart.
        let s = unsafe { copy_lines(words.as_ptr().cast(), dst.as_mut_ptr().cast(), 32 << 10) };
        assert!(s.ns > 0.0);
        assert!(dst.iter().zip(&words).all(|(d, w)| *d == w + 1));
    }
}
