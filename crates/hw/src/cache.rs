//! Set-associative caches with LRU replacement, for data lines and for the
//! page-table lines the walker reads. Only tags are kept: timing depends on
//! where a line is, not on its value.
//!
//! Invariant: a line is present at most once in a cache.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    pub size_kb: u64,
    pub ways: usize,
    /// Load-to-use latency of a hit, in core cycles.
    pub latency: u32,
}

/// log2 of the line size every level of a profile's hierarchy shares,
/// unless its `[cache] line_bytes` says otherwise: 64 bytes.
pub const LINE_SHIFT: u32 = 6;

/// Highest line number the model can see (256 GiB of 64-byte lines).
const MAX_LINES: u64 = 1 << 32;

/// One set of at most 16 ways: the tags, and the recency order as sixteen
/// 4-bit way numbers, most recently used in the low nibble. Tags never
/// move; an access rewrites one u64.
#[derive(Clone, Copy)]
#[repr(C)]
struct Set16<T: Copy> {
    tags: [T; 16],
    order: u64,
}

/// The order of a fresh set: way i at position i.
const IDENTITY: u64 = 0xFEDC_BA98_7654_3210;
const NIBBLE_ONES: u64 = 0x1111_1111_1111_1111;
const NIBBLE_HIGHS: u64 = 0x8888_8888_8888_8888;

/// Moves way `w` to the front of a recency order. Each way number appears
/// once among the 16 nibbles, so the first zero nibble of order ^ w is its
/// position (the borrow trick is exact for the lowest zero).
#[inline]
fn touch(order: u64, w: u64) -> u64 {
    let x = order ^ (w * NIBBLE_ONES);
    let z = x.wrapping_sub(NIBBLE_ONES) & !x & NIBBLE_HIGHS;
    // Nibbles 0..=p, and 0..p: z's lowest set bit is bit 4p + 3.
    let through = u64::MAX >> (63 - z.trailing_zeros());
    let below = through >> 4;
    (order & !through) | ((order & below) << 4) | w
}

/// Tags that can be compared 16 at a time.
trait Tag: Copy + PartialEq {
    /// The tag of an empty way (never a line's: see `Cache::new`).
    const EMPTY: Self;
    /// Bit i set iff tags[i] == tag.
    fn match_mask(tags: &[Self; 16], tag: Self) -> u32;
    fn wide(self) -> u64;
}

impl Tag for u16 {
    const EMPTY: u16 = u16::MAX;
    #[inline(always)]
    fn wide(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn match_mask(tags: &[u16; 16], tag: u16) -> u32 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of the x86-64 baseline; the loads read the
        // 32 bytes of `tags` (unaligned loads).
        unsafe {
            use core::arch::x86_64::*;
            let k = _mm_set1_epi16(tag as i16);
            let a = _mm_loadu_si128(tags.as_ptr() as *const __m128i);
            let b = _mm_loadu_si128(tags.as_ptr().add(8) as *const __m128i);
            let m = _mm_packs_epi16(_mm_cmpeq_epi16(a, k), _mm_cmpeq_epi16(b, k));
            _mm_movemask_epi8(m) as u32
        }
        #[cfg(not(target_arch = "x86_64"))]
        tags.iter().enumerate().fold(0, |m, (i, &t)| m | ((t == tag) as u32) << i)
    }
}

impl Tag for u32 {
    const EMPTY: u32 = u32::MAX;
    #[inline(always)]
    fn wide(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn match_mask(tags: &[u32; 16], tag: u32) -> u32 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, over the 64 bytes of `tags`.
        unsafe {
            use core::arch::x86_64::*;
            let k = _mm_set1_epi32(tag as i32);
            let p = tags.as_ptr() as *const __m128i;
            let c0 = _mm_cmpeq_epi32(_mm_loadu_si128(p), k);
            let c1 = _mm_cmpeq_epi32(_mm_loadu_si128(p.add(1)), k);
            let c2 = _mm_cmpeq_epi32(_mm_loadu_si128(p.add(2)), k);
            let c3 = _mm_cmpeq_epi32(_mm_loadu_si128(p.add(3)), k);
            let m = _mm_packs_epi16(_mm_packs_epi32(c0, c1), _mm_packs_epi32(c2, c3));
            _mm_movemask_epi8(m) as u32
        }
        #[cfg(not(target_arch = "x86_64"))]
        tags.iter().enumerate().fold(0, |m, (i, &t)| m | ((t == tag) as u32) << i)
    }
}

/// The way is the matching one or else the LRU one. Only a miss stores
/// its tag: a narrow store into the tags that the next probe of the set
/// reads 16 bytes at a time cannot be forwarded to those loads, which
/// then wait for it to reach the host's cache (consecutive probes of one
/// set, as interleaved streams make, stalled on every hit). Returns
/// whether it hit and, if `evict` and a miss evicted a line, that line's
/// tag (`evict` is a constant where it is inlined: without it, nothing is
/// read that was not before).
#[inline]
fn probe16<T: Tag>(s: &mut Set16<T>, ways: usize, tag: T, evict: bool) -> (bool, Option<u64>) {
    let mask = T::match_mask(&s.tags, tag);
    let hit = mask != 0;
    let victim = (s.order >> (4 * (ways - 1))) & 0xF;
    let w = if hit { (mask.trailing_zeros() & 15) as u64 } else { victim };
    let old = if evict { s.tags[w as usize] } else { T::EMPTY };
    if !hit {
        s.tags[w as usize] = tag;
    }
    s.order = touch(s.order, w);
    (hit, (evict && !hit && old != T::EMPTY).then(|| old.wide()))
}

/// Where a cache's evicted lines are reported: nowhere (`()`, for the
/// caches whose victims nothing asks about, at no cost), the last one
/// (`Option`), or every one with the index of the access that evicted it
/// (a batch's `Vec`).
pub trait Evictions {
    /// Whether anything is reported (false: victims are not even read).
    const ON: bool = true;
    fn evicted(&mut self, access: u32, line: u64);
}

impl Evictions for () {
    const ON: bool = false;
    #[inline(always)]
    fn evicted(&mut self, _: u32, _: u64) {}
}

impl Evictions for Option<u64> {
    #[inline(always)]
    fn evicted(&mut self, _: u32, line: u64) {
        *self = Some(line);
    }
}

impl Evictions for Vec<(u32, u64)> {
    #[inline(always)]
    fn evicted(&mut self, access: u32, line: u64) {
        self.push((access, line));
    }
}

/// The tag store. Tags are 16 bits when the cache has enough sets that
/// line / sets always fits (a 100 MB last-level cache does), else 32: a
/// smaller store keeps the model's own lookups in the host's caches and
/// TLB. Sets of more than 16 ways keep their tags in recency order.
enum Tags {
    U16(HugeBuf<Set16<u16>>),
    U32(HugeBuf<Set16<u32>>),
    Wide(HugeBuf<u32>),
}

/// Which set a line falls in and its tag there: set = line mod sets,
/// tag = line / sets (a shift and mask when sets is a power of two, else
/// Lemire's multiply-high division, exact for every line below 2^32).
#[derive(Clone, Copy, Debug)]
struct SetMap {
    sets: u64,
    /// log2(sets) when sets is a power of two.
    shift: Option<u32>,
    /// floor(2^64 / sets) + 1.
    magic: u64,
}

impl SetMap {
    fn new(sets: u64) -> SetMap {
        SetMap { sets, shift: sets.is_power_of_two().then(|| sets.trailing_zeros()), magic: (u64::MAX / sets).wrapping_add(1) }
    }

    /// (set, tag) of a line.
    #[inline(always)]
    fn split(&self, line: u64) -> (usize, u64) {
        match self.shift {
            Some(sh) => ((line & (self.sets - 1)) as usize, line >> sh),
            None => {
                let q = ((line as u128 * self.magic as u128) >> 64) as u64;
                ((line - q * self.sets) as usize, q)
            }
        }
    }
}

/// The tag store of a set-associative cache with true LRU replacement.
/// The set of a line is line mod sets and its tag line / sets.
pub struct Cache {
    map: SetMap,
    ways: usize,
    tags: Tags,
    /// log2 of the line size in bytes.
    shift: u32,
    pub latency: u32,
    pub hits: u64,
    pub misses: u64,
    /// The line of the last access: it is the most recently used line of
    /// its set, so accessing it again is a hit that changes nothing.
    last: u64,
}

impl Cache {
    /// A cache of `c`'s size and ways with lines of `1 << shift` bytes.
    pub fn new(c: &CacheConfig, shift: u32) -> Result<Cache, String> {
        let lines = (c.size_kb * 1024) >> shift;
        if c.ways == 0 || lines == 0 || !lines.is_multiple_of(c.ways as u64) {
            return Err(format!("cache of {} KB with {} ways", c.size_kb, c.ways));
        }
        let sets = lines / c.ways as u64;
        let n = sets as usize;
        let tags = if c.ways > 16 {
            Tags::Wide(HugeBuf::new(lines as usize, u32::MAX))
        } else if MAX_LINES / sets < u16::MAX as u64 {
            Tags::U16(HugeBuf::new(n, Set16 { tags: [u16::MAX; 16], order: IDENTITY }))
        } else {
            Tags::U32(HugeBuf::new(n, Set16 { tags: [u32::MAX; 16], order: IDENTITY }))
        };
        Ok(Cache {
            map: SetMap::new(sets),
            ways: c.ways,
            tags,
            shift,
            latency: c.latency,
            hits: 0,
            misses: 0,
            last: u64::MAX,
        })
    }

    /// Looks up the line holding physical address `pa`; on a miss the line
    /// is filled, evicting the set's least recently used line. Returns
    /// whether it hit.
    #[inline(always)]
    pub fn access(&mut self, pa: u64) -> bool {
        let line = pa >> self.shift;
        if line == self.last {
            self.hits += 1;
            return true;
        }
        self.access_set(line)
    }

    /// Where the tag sets live, for prefetching them (see `pass`).
    fn prefetcher(&self) -> Prefetcher {
        let (base, stride) = match &self.tags {
            Tags::U16(t) => (t.as_ptr() as usize, std::mem::size_of::<Set16<u16>>()),
            Tags::U32(t) => (t.as_ptr() as usize, std::mem::size_of::<Set16<u32>>()),
            Tags::Wide(t) => (t.as_ptr() as usize, 4 * self.ways),
        };
        Prefetcher { base, stride, map: self.map, shift: self.shift }
    }

    /// log2 of the line size in bytes.
    #[inline(always)]
    pub fn line_shift(&self) -> u32 {
        self.shift
    }

    /// Whether `pa` is on the line of the last access (a certain hit).
    #[inline(always)]
    pub fn is_last(&self, pa: u64) -> bool {
        pa >> self.shift == self.last
    }

    /// Asks the host to start loading the tag set `pa` maps to, so that a
    /// later access finds it in the host's caches. Changes nothing.
    #[inline]
    pub fn prefetch(&self, pa: u64) {
        self.prefetcher().prefetch(pa);
    }

    /// `access`, and the line it evicted, if it did.
    #[inline]
    pub fn access_evicting(&mut self, pa: u64) -> (bool, Option<u64>) {
        let line = pa >> self.shift;
        if line == self.last {
            self.hits += 1;
            return (true, None);
        }
        let mut ev = None;
        (self.lookup(line, &mut ev), ev)
    }

    #[inline(never)]
    fn access_set(&mut self, line: u64) -> bool {
        self.lookup(line, &mut ())
    }

    #[inline(always)]
    fn lookup<E: Evictions>(&mut self, line: u64, ev: &mut E) -> bool {
        self.last = line;
        debug_assert!(line < MAX_LINES);
        let (set, tag) = self.map.split(line);
        let (hit, old) = match &mut self.tags {
            Tags::U16(t) => probe16(&mut t[set], self.ways, tag as u16, E::ON),
            Tags::U32(t) => probe16(&mut t[set], self.ways, tag as u32, E::ON),
            Tags::Wide(t) => probe(&mut t[set * self.ways..(set + 1) * self.ways], tag as u32, E::ON),
        };
        note((hit, old), set, 0, self.map.sets, ev);
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        hit
    }

    /// One level of a batch: looks up `acc[i].0` (a physical address) for
    /// each i of `sel`, or of all of `acc` when `sel` is None, in that
    /// order, exactly as `access` would one by one. A hit sets `acc[i].1`
    /// to this cache's latency; a miss appends i to `misses`. A non-zero
    /// `ahead` has the tag sets fetched into the host's caches that many
    /// accesses early, for tag stores larger than the host's caches.
    pub fn pass(&mut self, acc: &mut [(u64, u32)], sel: Option<&[u32]>, misses: &mut Vec<u32>, ahead: usize) {
        self.pass_evicting(acc, sel, misses, ahead, &mut ());
    }

    /// `pass`, reporting each line a miss evicted with the index in `acc`
    /// of the access that evicted it, in order.
    pub fn pass_evicting<E: Evictions>(&mut self, acc: &mut [(u64, u32)], sel: Option<&[u32]>, misses: &mut Vec<u32>, ahead: usize, ev: &mut E) {
        let before = misses.len();
        let n = sel.map_or(acc.len(), |s| s.len());
        // Every access writes its index to the next free slot, and only a
        // miss advances past it: the slots are written in place, without
        // being zeroed first.
        misses.reserve(n);
        let out = &mut misses.spare_capacity_mut()[..n];
        let p = PassArgs { map: self.map, ways: self.ways, lat: self.latency, ahead, pf: self.prefetcher() };
        let sets = self.map.sets;
        let mut last = self.last;
        // The tag kind and the selection are resolved once per pass.
        let k = match (&mut self.tags, sel) {
            (Tags::U16(t), None) => run_pass(&p, &mut last, acc, n, |j| j, out, |set, tag, i| note(probe16(&mut t[set], p.ways, tag as u16, E::ON), set, i, sets, ev)),
            (Tags::U16(t), Some(s)) => run_pass(&p, &mut last, acc, n, |j| s[j] as usize, out, |set, tag, i| note(probe16(&mut t[set], p.ways, tag as u16, E::ON), set, i, sets, ev)),
            (Tags::U32(t), None) => run_pass(&p, &mut last, acc, n, |j| j, out, |set, tag, i| note(probe16(&mut t[set], p.ways, tag as u32, E::ON), set, i, sets, ev)),
            (Tags::U32(t), Some(s)) => run_pass(&p, &mut last, acc, n, |j| s[j] as usize, out, |set, tag, i| note(probe16(&mut t[set], p.ways, tag as u32, E::ON), set, i, sets, ev)),
            (Tags::Wide(t), sel) => {
                let ways = p.ways;
                let probe_wide = |set: usize, tag: u64, i: usize| note(probe(&mut t[set * ways..(set + 1) * ways], tag as u32, E::ON), set, i, sets, ev);
                match sel {
                    None => run_pass(&p, &mut last, acc, n, |j| j, out, probe_wide),
                    Some(s) => run_pass(&p, &mut last, acc, n, |j| s[j] as usize, out, probe_wide),
                }
            }
        };
        // SAFETY: run_pass wrote out[0..k] (slots before + 0..k), and the
        // capacity holds them (reserved above).
        unsafe { misses.set_len(before + k) };
        self.last = last;
        self.misses += k as u64;
        self.hits += (n - k) as u64;
    }

    /// Host bytes of the tag store.
    pub fn host_bytes(&self) -> u64 {
        match &self.tags {
            Tags::U16(t) => (t.len() * std::mem::size_of::<Set16<u16>>()) as u64,
            Tags::U32(t) => (t.len() * std::mem::size_of::<Set16<u32>>()) as u64,
            Tags::Wide(t) => t.len() as u64 * 4,
        }
    }
}

/// What a pass needs of its cache besides the tags.
struct PassArgs {
    map: SetMap,
    ways: usize,
    lat: u32,
    ahead: usize,
    pf: Prefetcher,
}

/// Reports what a probe of `set` for access `i` evicted to `ev`, and
/// returns whether it hit.
#[inline(always)]
fn note<E: Evictions>((hit, old): (bool, Option<u64>), set: usize, i: usize, sets: u64, ev: &mut E) -> bool {
    if let (true, Some(old)) = (E::ON, old) {
        ev.evicted(i as u32, old * sets + set as u64);
    }
    hit
}

/// The loop of `Cache::pass`: `index(j)` is the j-th access's slot in
/// `acc`; `probe(set, tag, i)` looks up access i; misses are written to
/// `out` in order and counted. Returns the number of misses.
#[inline(always)]
fn run_pass(
    p: &PassArgs,
    last: &mut u64,
    acc: &mut [(u64, u32)],
    n: usize,
    index: impl Fn(usize) -> usize,
    out: &mut [std::mem::MaybeUninit<u32>],
    mut probe: impl FnMut(usize, u64, usize) -> bool,
) -> usize {
    let mut l = *last;
    let mut k = 0;
    if p.ahead > 0 {
        for j in 0..n.min(p.ahead) {
            p.pf.prefetch(acc[index(j)].0);
        }
    }
    for j in 0..n {
        if p.ahead > 0 && j + p.ahead < n {
            p.pf.prefetch(acc[index(j + p.ahead)].0);
        }
        let i = index(j);
        let line = acc[i].0 >> p.pf.shift;
        debug_assert!(line < MAX_LINES);
        let hit = line == l || {
            l = line;
            let (set, tag) = p.map.split(line);
            probe(set, tag, i)
        };
        if hit {
            acc[i].1 = p.lat;
        }
        out[k].write(i as u32);
        k += !hit as usize;
    }
    *last = l;
    k
}

/// A fixed-size buffer of `n` copies of `v`, 2 MB-aligned, whose memory
/// the host kernel is asked to back with transparent huge pages before it
/// is first touched: the model's big tag stores are read at random, and on
/// a virtual machine each host TLB miss costs a two-dimensional walk.
struct HugeBuf<T: Copy> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: HugeBuf owns its memory like a Vec<T>.
unsafe impl<T: Copy + Send> Send for HugeBuf<T> {}
unsafe impl<T: Copy + Sync> Sync for HugeBuf<T> {}

const HUGE: usize = 2 << 20;

impl<T: Copy> HugeBuf<T> {
    fn new(n: usize, v: T) -> HugeBuf<T> {
        let bytes = (n * std::mem::size_of::<T>()).max(1);
        let align = if bytes >= HUGE { HUGE } else { std::mem::align_of::<T>().max(64) };
        let size = bytes.next_multiple_of(align);
        let layout = std::alloc::Layout::from_size_align(size, align).expect("tag store layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) } as *mut T;
        let ptr = std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        #[cfg(target_os = "linux")]
        if align == HUGE {
            // SAFETY: the range is the allocation just made; madvise only
            // changes how the kernel backs it, and failure is harmless.
            unsafe {
                libc::madvise(raw as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
            }
        }
        for i in 0..n {
            // SAFETY: i < n, inside the allocation, properly aligned.
            unsafe { raw.add(i).write(v) };
        }
        HugeBuf { ptr, len: n, layout }
    }
}

impl<T: Copy> std::ops::Deref for HugeBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr..ptr+len was initialised in new().
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> std::ops::DerefMut for HugeBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for HugeBuf<T> {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout; T is Copy (no drop).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, self.layout) };
    }
}

#[inline(always)]
fn host_prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// See `Cache::prefetcher`: computes where a line's tag set lives and asks
/// the host to fetch it; prefetching reads nothing.
#[derive(Clone, Copy, Debug)]
struct Prefetcher {
    base: usize,
    stride: usize,
    map: SetMap,
    shift: u32,
}

impl Prefetcher {
    #[inline]
    fn prefetch(&self, pa: u64) {
        let (set, _) = self.map.split(pa >> self.shift);
        let at = self.base + set * self.stride;
        // A set need not sit within one host cache line (a 16-way set of
        // 16-bit tags is 40 bytes): fetch its first and last bytes' lines.
        host_prefetch(at as *const u8);
        host_prefetch((at + self.stride - 1) as *const u8);
    }
}

/// Finds `tag` in a set kept in recency order and moves it to the front;
/// on a miss, inserts it at the front and drops the last (LRU) way, whose
/// tag it returns if `evict` and the way held a line.
#[inline]
fn probe<T: Tag>(t: &mut [T], tag: T, evict: bool) -> (bool, Option<u64>) {
    if t[0] == tag {
        return (true, None);
    }
    let (hit, w) = match t.iter().position(|&x| x == tag) {
        Some(w) => (true, w),
        None => (false, t.len() - 1),
    };
    let old = if evict { t[w] } else { T::EMPTY };
    let mut i = w;
    while i > 0 {
        t[i] = t[i - 1];
        i -= 1;
    }
    t[0] = tag;
    (hit, (evict && !hit && old != T::EMPTY).then(|| old.wide()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_caches_use_16_bit_tags_without_aliasing() {
        let mut c = Cache::new(&CacheConfig { size_kb: 107520, ways: 15, latency: 70 }, LINE_SHIFT).unwrap();
        assert_eq!(c.host_bytes(), 107520 * 1024 / 64 / 15 * 40);
        // Two lines in the same set with different tags both fit.
        let sets = 107520 * 1024 / 64 / 15;
        let a = 5u64 << 6;
        let b = (5 + sets) << 6;
        assert!(!c.access(a));
        assert!(!c.access(b));
        assert!(c.access(a) && c.access(b));
        // The highest line the model allows still has a distinct tag.
        let top = ((1u64 << 32) - 1) << 6;
        assert!(!c.access(top));
        assert!(c.access(top));
    }

    /// The packed recency order agrees with a list kept in LRU order.
    #[test]
    fn recency_order_matches_a_list() {
        for ways in [1usize, 2, 4, 8, 12, 15, 16, 20] {
            // ways KB = 16 sets of `ways` lines.
            let mut c = Cache::new(&CacheConfig { size_kb: ways as u64, ways, latency: 1 }, LINE_SHIFT).unwrap();
            let sets = c.map.sets;
            assert_eq!(sets, 16);
            let mut model: Vec<u64> = Vec::new();
            let mut x = 7u64;
            for _ in 0..5000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Lines of set 0 only, from a pool a little larger than the set.
                let line = (x % (ways as u64 + 3)) * sets;
                let want = model.contains(&line);
                if want {
                    model.retain(|&l| l != line);
                } else if model.len() == ways {
                    model.pop();
                }
                model.insert(0, line);
                c.last = u64::MAX;
                assert_eq!(c.access(line << LINE_SHIFT), want, "ways {ways}");
            }
        }
    }

    #[test]
    fn fast_division_is_exact() {
        for sets in [3u64, 7, 15, 114_688, 122_880, 1 << 17, 999_983] {
            let map = SetMap::new(sets);
            for line in [0u64, 1, sets - 1, sets, sets + 1, 123_456_789, (1 << 32) - 1, (1 << 32) - sets] {
                assert_eq!(map.split(line), ((line % sets) as usize, line / sets), "{line} / {sets}");
            }
        }
    }

    #[test]
    fn touch_moves_a_way_to_the_front() {
        assert_eq!(touch(IDENTITY, 0), IDENTITY);
        assert_eq!(touch(IDENTITY, 3), 0xFEDC_BA98_7654_2103);
        assert_eq!(touch(IDENTITY, 15), 0xEDCB_A987_6543_210F);
    }

    #[test]
    fn hits_after_fill_and_lru_eviction() {
        // 2 sets x 2 ways of 64-byte lines.
        let mut c = Cache::new(&CacheConfig { size_kb: 0, ways: 2, latency: 4 }, LINE_SHIFT).err();
        assert!(c.take().is_some(), "zero-sized cache refused");
        let mut c = Cache::new(&CacheConfig { size_kb: 1, ways: 2, latency: 4 }, LINE_SHIFT).unwrap();
        assert!(!c.access(0));
        assert!(c.access(8));
        let sets = 8u64; // 1 KB / 64 / 2
        let a = 0;
        let b = sets * 64;
        let d = 2 * sets * 64;
        assert!(!c.access(b));
        assert!(c.access(a)); // a is now MRU
        assert!(!c.access(d)); // evicts b
        assert!(c.access(a));
        assert!(!c.access(b));
    }
}
