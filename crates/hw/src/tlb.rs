//! Translation lookaside buffers.
//!
//! A `Tlb` is one CPU's set of TLB arrays: first-level arrays (on x86, one per
//! page size for data) and second-level arrays (a unified STLB that may hold
//! several page sizes, plus e.g. a separate 1 GB array). Each array is
//! set-associative with true LRU replacement within a set.
//!
//! Entries are tagged with an address-space identifier (PCID / ASID); an
//! entry with `perm::GLOBAL` matches every ASID.
//!
//! Invariant: at most one entry per (array, page size, vpn, asid).

use crate::mmu::{perm, Translation};
use serde::{Deserialize, Serialize};

/// Shape of one TLB array, as a machine profile gives it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlbArrayConfig {
    /// Page sizes held, e.g. ["4K"] or ["4K", "2M"].
    pub sizes: Vec<String>,
    pub entries: usize,
    /// Associativity; equal to `entries` for a fully associative array.
    pub ways: usize,
    /// Which level: 1 (L1 DTLB) or 2 (STLB).
    pub level: u8,
    /// How a page number picks its set (see `TlbIndex`).
    #[serde(default, skip_serializing_if = "TlbIndex::is_modulo")]
    pub index: TlbIndex,
    /// Which accesses the array translates: data (a first level's
    /// default), instruction fetches, or both (a second level's default,
    /// the unified STLB most cores have).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<TlbSide>,
}

/// Which accesses a TLB array translates (`TlbArrayConfig::side`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TlbSide {
    Data,
    Inst,
    Unified,
}

impl TlbArrayConfig {
    /// The side, where the profile names none: data at the first level,
    /// both at the second.
    pub fn side(&self) -> TlbSide {
        self.side.unwrap_or(if self.level == 1 { TlbSide::Data } else { TlbSide::Unified })
    }

    fn serves(&self, fetch: bool) -> bool {
        match self.side() {
            TlbSide::Unified => true,
            TlbSide::Data => !fetch,
            TlbSide::Inst => fetch,
        }
    }
}

/// How an array's set is chosen from a page number.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TlbIndex {
    /// The page number's low bits (modulo the sets): consecutive pages
    /// fill the sets evenly, so a sweep over more pages than the array
    /// holds misses all at once, at its capacity. The textbook array.
    #[default]
    Modulo,
    /// A hash of the page number that spreads pages over the sets as if
    /// at random: some sets overflow before the array is full and some
    /// still have room after, so the misses of a sweep rise gradually
    /// around the capacity. This is not a claim about the hardware's index
    /// function, which is undocumented; it is the simplest array that
    /// reproduces such a curve where one is measured (`splab calibrate`
    /// chooses it when it fits the host's own sweep better).
    Hashed,
}

impl TlbIndex {
    pub fn is_modulo(&self) -> bool {
        *self == TlbIndex::Modulo
    }
}

/// Parses a page-size name such as "4K", "64K", "2M", "1G" into log2 bytes.
pub fn parse_size_shift(s: &str) -> Option<u8> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 10),
        'M' | 'm' => (&s[..s.len() - 1], 20),
        'G' | 'g' => (&s[..s.len() - 1], 30),
        _ => return None,
    };
    let n: u64 = num.parse().ok()?;
    if n == 0 || !n.is_power_of_two() {
        return None;
    }
    Some(n.trailing_zeros() as u8 + mul)
}

/// Formats log2 bytes as a page-size name ("4K", "2M", "1G").
pub fn size_name(shift: u8) -> String {
    match shift {
        s if s >= 30 => format!("{}G", 1u64 << (s - 30)),
        s if s >= 20 => format!("{}M", 1u64 << (s - 20)),
        s => format!("{}K", 1u64 << (s - 10)),
    }
}

/// Key of an entry: its page number, page size and ASID in one word,
/// `vpn << 21 | shift << 16 | asid`, so that a set is searched by comparing
/// words. Page numbers keep their low 43 bits, that is, virtual address
/// bits 0..55: every architecture modelled translates at most 48 bits, and
/// the canonical upper half of amd64 differs from the lower half in bit 47.
/// INVALID (no valid shift is 31) marks an empty way.
const INVALID: u64 = u64::MAX;
/// ASID stored in global entries.
const GLOBAL_ASID: u16 = u16::MAX;

#[inline(always)]
fn key(vpn: u64, sh: u8, asid: u16) -> u64 {
    (vpn << 21) | (sh as u64) << 16 | asid as u64
}

/// The first address of a valid key's page. The key holds address bits
/// 0..55; the rest copy bit 54.
#[inline(always)]
fn key_va(k: u64) -> u64 {
    let sh = (k >> 16) & 0x1f;
    ((((k >> 21) << sh) << 9) as i64 >> 9) as u64
}

/// A 32-bit digest of a key, compared four at a time to find the ways that
/// may hold it; the full key decides.
#[inline(always)]
fn fold(k: u64) -> u32 {
    (k ^ (k >> 32)) as u32
}

/// Bit w set iff d[w] == f, for w < `ways` (at most 16; bits from `ways`
/// to the next multiple of 4 may be set too). `d` must have 16 readable
/// entries. Only the groups of four that hold ways are compared.
#[inline(always)]
fn digest_matches(d: &[u32], f: u32, ways: usize) -> u32 {
    debug_assert!(d.len() >= 16 && ways <= 16);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of the x86-64 baseline; the unaligned loads read
    // at most d[0..16], which the assertion above (and the padding of every
    // digest array) guarantees.
    unsafe {
        use core::arch::x86_64::*;
        let k = _mm_set1_epi32(f as i32);
        let p = d.as_ptr() as *const __m128i;
        let m = |i: usize| _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(_mm_loadu_si128(p.add(i)), k))) as u32;
        let mut r = m(0);
        if ways > 4 {
            r |= m(1) << 4;
            if ways > 8 {
                r |= m(2) << 8 | m(3) << 12;
            }
        }
        r
    }
    #[cfg(not(target_arch = "x86_64"))]
    d[..ways].iter().enumerate().fold(0, |m, (i, &x)| m | ((x == f) as u32) << i)
}

/// One entry's key and translation, in one 16-byte unit so that a hit
/// reads one host cache line: the physical base (page-aligned) with the
/// permission bits in its low byte.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Ent {
    key: u64,
    pa_perm: u64,
}

impl Ent {
    const EMPTY: Ent = Ent { key: INVALID, pa_perm: 0 };
    #[inline(always)]
    fn pa_base(self) -> u64 {
        self.pa_perm & !0xff
    }
    #[inline(always)]
    fn perm(self) -> u8 {
        self.pa_perm as u8
    }
}

/// Sixteen digests on one host cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Digests([u32; 16]);

/// One set-associative array. The digests of a set's keys are kept apart
/// from the entries, so that a set of up to 16 ways is searched on one
/// host cache line; LRU stamps are apart too, for the victim search.
struct Array {
    shifts: Vec<u8>,
    sets: usize,
    /// sets - 1 when sets is a power of two and the index is the low bits,
    /// else 0 (a division, of the hash where `hashed`).
    set_mask: usize,
    ways: usize,
    level: u8,
    ent: Vec<Ent>,
    /// fold(ent[i].key), in 64-byte blocks with a block of padding, so that
    /// any set's digests can be read 16 at a time (see `digests`).
    digest_blocks: Vec<Digests>,
    lru: Vec<u32>,
    /// Valid entries per page size, indexed by the size's shift: sizes with
    /// none are not probed.
    valid: [u32; 32],
    /// Valid global entries: only when non-zero are global keys probed.
    globals: u32,
    /// Valid entries of every size: while fewer than the entries, a fill
    /// looks for an empty way first.
    used: u32,
    /// Valid entries of pages smaller than 2 MB, counted by the 2 MB
    /// region of the address space they lie in (`region_bucket`): where a
    /// bucket is empty, a lookup need not probe the array's small sizes.
    /// A lookup in a 2 MB page then skips the 4 KB probe that would miss
    /// (its array holds other regions' 4 KB pages: stack, code).
    small_in: [u32; REGION_BUCKETS],
    /// Sets chosen by `set_hash` (`TlbIndex::Hashed`).
    hashed: bool,
    /// Per entry, the page size (shift) of the page it is a splinter of,
    /// or 0: under nested paging with host pages smaller than the guest's,
    /// an entry holds a host-page-sized piece of a larger guest page
    /// (`Tlb::fill_missed_splintered`).
    span: Vec<u8>,
    /// Entries with a span: only when non-zero do invalidations look for
    /// the splinters of the page they invalidate.
    splintered: u32,
    /// Splintered entries counted by a hash of their guest page
    /// (`splinter_slot`), and the spans seen (bit s for span s): an
    /// invalidation whose page's slot is empty has no pieces to drop and
    /// skips the pass over the array. A slot shared by two pages only
    /// costs a pass.
    splinter_slots: Vec<u32>,
    spans_seen: u64,
}

/// Slots of `Array::splinter_slots`.
const SPLINTER_SLOTS: usize = 1024;

/// The slot of the guest page of span `span` holding `va`.
#[inline(always)]
fn splinter_slot(va: u64, span: u8) -> usize {
    set_hash((va >> span) ^ (span as u64) << 56) as usize & (SPLINTER_SLOTS - 1)
}

/// Buckets of 2 MB regions for `Array::small_in`.
const REGION_BUCKETS: usize = 64;
/// Pages below this size lie inside one 2 MB region.
const REGION_SHIFT: u8 = 21;

/// A mixing hash of a page number (a 64-bit finaliser: each input bit
/// flips about half the output bits), for `TlbIndex::Hashed`.
#[inline(always)]
fn set_hash(vpn: u64) -> u64 {
    let mut x = vpn.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 32)
}

/// The `small_in` bucket of the 2 MB region holding `va`.
#[inline(always)]
fn region_bucket(va: u64) -> usize {
    (va >> REGION_SHIFT) as usize & (REGION_BUCKETS - 1)
}

impl Array {
    #[inline]
    fn set_base(&self, vpn: u64) -> usize {
        // A hashed array has no set_mask, so the common case (a power of
        // two of sets, low bits) costs one test.
        let set = if self.set_mask != 0 || self.sets == 1 {
            vpn as usize & self.set_mask
        } else if self.hashed {
            set_hash(vpn) as usize % self.sets
        } else {
            vpn as usize % self.sets
        };
        set * self.ways
    }

    fn shift_of(&self, i: usize) -> u8 {
        ((self.ent[i].key >> 16) & 0x1f) as u8
    }

    /// The digests, one per entry and 16 more of padding.
    #[inline(always)]
    fn digests(&self) -> &[u32] {
        // SAFETY: Digests is a repr(C) array of 16 u32 with no padding, so
        // the blocks are 16 * len contiguous, initialised u32s.
        unsafe { std::slice::from_raw_parts(self.digest_blocks.as_ptr() as *const u32, self.digest_blocks.len() * 16) }
    }

    /// Empties way `i`, keeping the counts right.
    #[inline]
    fn clear(&mut self, i: usize) {
        if self.ent[i].key != INVALID {
            let sh = self.shift_of(i);
            if sh < REGION_SHIFT {
                self.small_in[region_bucket(key_va(self.ent[i].key))] -= 1;
            }
            self.valid[sh as usize] -= 1;
            self.used -= 1;
            if self.ent[i].perm() & perm::GLOBAL != 0 {
                self.globals -= 1;
            }
            let span = self.span[i];
            if span != 0 {
                self.splinter_slots[splinter_slot(key_va(self.ent[i].key), span)] -= 1;
                self.span[i] = 0;
                self.splintered -= 1;
            }
            self.set_key(i, INVALID);
        }
    }

    fn set_key(&mut self, i: usize, k: u64) {
        self.ent[i].key = k;
        self.digest_blocks[i / 16].0[i % 16] = fold(k);
    }

    /// The first way of the set at `base` whose key is `k`. The ways'
    /// digests are compared 16 at a time (sets of more than 16 ways, such
    /// as POWER's 64-way ERAT, in groups of 16, in way order), then the full
    /// keys of the (almost always single) candidates.
    #[inline(always)]
    fn first(&self, base: usize, k: u64) -> Option<usize> {
        let f = fold(k);
        if self.ways <= 16 {
            let mut m = digest_matches(&self.digests()[base..base + 16], f, self.ways) & ((1u32 << self.ways) - 1);
            while m != 0 {
                let i = base + m.trailing_zeros() as usize;
                if self.ent[i].key == k {
                    return Some(i);
                }
                m &= m - 1;
            }
            return None;
        }
        let mut c = 0;
        while c < self.ways {
            let n = (self.ways - c).min(16);
            let mut m = digest_matches(&self.digests()[base + c..base + c + 16], f, n) & ((1u32 << n) - 1);
            while m != 0 {
                let i = base + c + m.trailing_zeros() as usize;
                if self.ent[i].key == k {
                    return Some(i);
                }
                m &= m - 1;
            }
            c += 16;
        }
        None
    }

    /// The way of the set at `base` a fill replaces: the first empty way,
    /// else the least recently used (the oldest stamp). Ages count back
    /// from `clock`; an empty way counts as older than any, and of equal
    /// ages the first way wins.
    #[inline]
    fn victim(&self, base: usize, clock: u32) -> usize {
        let age = |w: usize| clock.wrapping_sub(self.lru[w]);
        // A full array has no empty way to look for.
        if let Some(e) = if (self.used as usize) < self.ent.len() { self.first(base, INVALID) } else { None } {
            // A valid way before it as old as an empty one (a stamp 2^32 - 1
            // fills back) would come first.
            return (base..e).find(|&w| age(w) == u32::MAX).unwrap_or(e);
        }
        let stamps = &self.lru[base..base + self.ways];
        if self.ways <= 8 {
            // Few ways (first-level arrays, filled on every miss there):
            // one pass, keeping the first of the oldest. (Used for every
            // width, this pass costs `examples/tlbloop` 2 % more
            // instructions than the two below for wide sets.)
            let (mut best, mut way) = (0, 0);
            for (w, &l) in stamps.iter().enumerate() {
                let a = clock.wrapping_sub(l);
                if a > best {
                    (best, way) = (a, w);
                }
            }
            return base + way;
        }
        // The oldest age first, then its first way: two passes the host
        // runs a vector at a time.
        let oldest = stamps.iter().map(|&l| clock.wrapping_sub(l)).fold(0, u32::max);
        if oldest == 0 {
            return base;
        }
        base + stamps.iter().position(|&l| clock.wrapping_sub(l) == oldest).expect("the oldest way")
    }
    /// Finds the way holding (vpn, asid) at page size `sh` in its set.
    #[inline(always)]
    fn find(&self, vpn: u64, asid: u16, sh: u8) -> Option<usize> {
        let base = self.set_base(vpn);
        let f = self.first(base, key(vpn, sh, asid));
        if f.is_none() && self.globals > 0 {
            return self.first(base, key(vpn, sh, GLOBAL_ASID));
        }
        f
    }
}

/// One probe of a lookup: an array and a page size it holds.
#[derive(Clone, Copy)]
struct Probe {
    array: usize,
    shift: u8,
    /// Index of the size in `Tlb::shifts`, for statistics.
    size: usize,
    level: u8,
}

/// Hit and miss counts, by level and page size.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TlbStats {
    /// Indexed like `Tlb::shifts()`.
    pub l1_hits: Vec<u64>,
    pub l2_hits: Vec<u64>,
    /// Misses in every array (a walk follows); by the size the walk found.
    pub misses: Vec<u64>,
    pub lookups: u64,
    pub invalidations: u64,
    pub flushes: u64,
}

/// Where a lookup hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlbHit {
    L1,
    L2,
}

/// A recent first-level hit: its page number at its own page size, ASID,
/// translation, and where the entry is.
#[derive(Clone, Copy)]
struct Memo {
    /// The page's first address (`va & mask` for the addresses in it).
    base: u64,
    mask: u64,
    asid: u16,
    t: Translation,
    size: usize,
    array: u32,
    way: u32,
    /// The clock of the entry's latest hit, which the entry's own stamp
    /// gets when the memo is settled (`Tlb::settle`).
    stamp: u32,
}

const NO_MEMO: Memo = Memo { base: INVALID, mask: 0, asid: 0, t: Translation { pa_base: 0, shift: 0, perm: 0 }, size: 0, array: 0, way: 0, stamp: 0 };

impl Memo {
    #[inline(always)]
    fn new(va: u64, asid: u16, t: Translation, size: usize, array: usize, way: usize, stamp: u32) -> Memo {
        let mask = !((1u64 << t.shift) - 1);
        Memo { base: va & mask, mask, asid, t, size, array: array as u32, way: way as u32, stamp }
    }
}

/// Recent first-level hits remembered.
const MEMOS: usize = 8;

pub struct Tlb {
    /// Recent first-level hits. Until the next fill or invalidation (which
    /// forget them all), a lookup in one of their pages ends at the same
    /// entry: the plan probes sizes in a fixed order, and no larger page
    /// can have appeared. A hit through a memo does what the lookup would
    /// have done, stamping the entry most recently used, without the probes.
    /// The stamp is kept in the memo until something compares stamps (a
    /// first-level fill's choice of victim, which forgets the memos) or the
    /// memo is replaced: the entry's most recent use is the memo's.
    memos: [Memo; MEMOS],
    /// Bit j set iff memo j is valid (its base is not INVALID): the
    /// memos a comparison or a fill goes through.
    live_memos: u8,
    next_memo: usize,
    /// The memo of the latest first-level hit (through a memo, or the one
    /// a lookup or fill just made), and for each memo the one whose hit
    /// followed its last (where a stream that cycles through a few pages
    /// goes next).
    last_memo: usize,
    memo_after: [u8; MEMOS],
    arrays: Vec<Array>,
    /// The lookup order: first-level arrays, then second-level ones, and
    /// within a level the largest page size first. (When entries of two
    /// sizes translate the same address, which happens after a promotion
    /// until the 4 KB entries age out, the hardware may use either; splab
    /// uses the larger.)
    plan: Vec<Probe>,
    /// Bit k set iff `plan[k]`'s array holds valid entries of its size:
    /// the probes a lookup makes.
    live: u64,
    /// For each level (1, 2) and page shift, the array that holds that size.
    fill_target: [[Option<usize>; 32]; 2],
    /// The instruction side's probes, live probes and fill targets (as
    /// `plan`, `live` and `fill_target` are the data side's): its own
    /// first-level arrays, and the second level it shares with data where
    /// that is unified.
    iplan: Vec<Probe>,
    ilive: u64,
    ifill_target: [[Option<usize>; 32]; 2],
    /// The instruction side's latest hit (as `memos` are the data side's),
    /// forgotten at every first-level fill of that side and invalidation.
    fetch_memo: Memo,
    /// The instruction side's hits and misses.
    pub istats: TlbStats,
    /// All page sizes any array holds, ascending.
    shifts: Vec<u8>,
    clock: u32,
    pub stats: TlbStats,
}

impl Tlb {
    /// Builds the arrays. `arch_shifts` are the page sizes the architecture
    /// has; an array naming a size the architecture lacks is ignored.
    pub fn new(cfgs: &[TlbArrayConfig], arch_shifts: &[u8]) -> Result<Tlb, String> {
        let mut arrays = Vec::new();
        let mut sides = Vec::new();
        for c in cfgs {
            let mut shifts = Vec::new();
            for s in &c.sizes {
                let sh = parse_size_shift(s).ok_or_else(|| format!("bad TLB page size {s:?}"))?;
                if arch_shifts.contains(&sh) {
                    shifts.push(sh);
                }
            }
            if shifts.is_empty() {
                continue;
            }
            if c.ways == 0 || c.entries == 0 || c.entries % c.ways != 0 {
                return Err(format!("TLB array with {} entries and {} ways", c.entries, c.ways));
            }
            if c.level != 1 && c.level != 2 {
                return Err(format!("TLB array level {} (must be 1 or 2)", c.level));
            }
            shifts.sort_unstable();
            sides.push((c.level, c.serves(false), c.serves(true)));
            let sets = c.entries / c.ways;
            arrays.push(Array {
                shifts,
                sets,
                set_mask: if sets.is_power_of_two() && c.index == TlbIndex::Modulo { sets - 1 } else { 0 },
                ways: c.ways,
                level: c.level,
                ent: vec![Ent::EMPTY; c.entries],
                digest_blocks: vec![Digests([fold(INVALID); 16]); c.entries.div_ceil(16) + 1],
                lru: vec![0; c.entries],
                valid: [0; 32],
                globals: 0,
                used: 0,
                small_in: [0; REGION_BUCKETS],
                hashed: c.index == TlbIndex::Hashed,
                span: vec![0; c.entries],
                splintered: 0,
                splinter_slots: vec![0; SPLINTER_SLOTS],
                spans_seen: 0,
            });
        }
        // First-level arrays first, so lookups probe them first.
        let mut order: Vec<usize> = (0..arrays.len()).collect();
        order.sort_by_key(|&i| arrays[i].level);
        let mut taken: Vec<Option<Array>> = arrays.into_iter().map(Some).collect();
        let arrays: Vec<Array> = order.iter().map(|&i| taken[i].take().expect("each array once")).collect();
        let sides: Vec<(u8, bool, bool)> = order.iter().map(|&i| sides[i]).collect();
        let mut shifts: Vec<u8> = arch_shifts.to_vec();
        shifts.sort_unstable();
        shifts.dedup();
        let n = shifts.len();
        // The probes and fill targets of each side: the data side's
        // arrays, and the instruction side's (which share the unified
        // second level).
        let plan_of = |fetch: bool| -> Vec<Probe> {
            let mut plan = Vec::new();
            for (ai, a) in arrays.iter().enumerate() {
                if !(if fetch { sides[ai].2 } else { sides[ai].1 }) {
                    continue;
                }
                for &sh in &a.shifts {
                    let size = shifts.iter().position(|&s| s == sh).unwrap_or(0);
                    plan.push(Probe { array: ai, shift: sh, size, level: a.level });
                }
            }
            plan.sort_by_key(|p| (p.level, std::cmp::Reverse(p.shift)));
            plan
        };
        let target = |level: u8, fetch: bool| -> [Option<usize>; 32] {
            std::array::from_fn(|sh| {
                arrays.iter().enumerate().position(|(ai, a)| a.level == level && a.shifts.contains(&(sh as u8)) && if fetch { sides[ai].2 } else { sides[ai].1 })
            })
        };
        let (plan, iplan) = (plan_of(false), plan_of(true));
        let fill_target = [target(1, false), target(2, false)];
        let ifill_target = [target(1, true), target(2, true)];
        assert!(plan.len() <= 64 && iplan.len() <= 64, "at most 64 (array, size) probes a side");
        Ok(Tlb {
            live: 0,
            plan,
            fill_target,
            ilive: 0,
            iplan,
            ifill_target,
            fetch_memo: NO_MEMO,
            istats: TlbStats { l1_hits: vec![0; n], l2_hits: vec![0; n], misses: vec![0; n], ..Default::default() },
            memos: [NO_MEMO; MEMOS],
            live_memos: 0,
            last_memo: 0,
            memo_after: [0; MEMOS],
            next_memo: 0,
            arrays,
            shifts,
            clock: 0,
            stats: TlbStats { l1_hits: vec![0; n], l2_hits: vec![0; n], misses: vec![0; n], ..Default::default() },
        })
    }

    pub fn shifts(&self) -> &[u8] {
        &self.shifts
    }

    /// Recomputes `live` after entries were removed or a size appeared.
    fn refresh_live(&mut self) {
        let live = |plan: &[Probe], arrays: &[Array]| -> u64 {
            plan.iter().enumerate().filter(|(_, p)| arrays[p.array].valid[p.shift as usize] != 0).fold(0, |m, (k, _)| m | 1 << k)
        };
        self.live = live(&self.plan, &self.arrays);
        self.ilive = live(&self.iplan, &self.arrays);
    }

    fn size_idx(&self, shift: u8) -> usize {
        self.shifts.iter().position(|&s| s == shift).unwrap_or(0)
    }

    /// Looks `va` up in every array; on a second-level hit the entry is also
    /// filled into the first level. Counts hits; the caller counts misses
    /// with `count_miss` once the walk tells the page size.
    #[inline]
    pub fn lookup(&mut self, va: u64, asid: u16) -> Option<(Translation, TlbHit)> {
        if let Some((t, m)) = self.memo(va, asid) {
            self.count_memo_hit(m);
            return Some((t, TlbHit::L1));
        }
        self.stats.lookups += 1;
        self.lookup_arrays(va, asid)
    }

    /// `lookup` for an address `memo` has just answered None for: the
    /// arrays are probed without looking at the recent hits again.
    #[inline]
    pub fn lookup_past_memos(&mut self, va: u64, asid: u16) -> Option<(Translation, TlbHit)> {
        debug_assert!(self.memo(va, asid).is_none());
        self.stats.lookups += 1;
        self.lookup_arrays(va, asid)
    }

    fn lookup_arrays(&mut self, va: u64, asid: u16) -> Option<(Translation, TlbHit)> {
        self.clock = self.clock.wrapping_add(1);
        // The probes of the plan whose array holds entries of their size,
        // in plan order.
        let mut live = self.live;
        let region = region_bucket(va);
        while live != 0 {
            let p = self.plan[live.trailing_zeros() as usize];
            live &= live - 1;
            let a = &mut self.arrays[p.array];
            if p.shift < REGION_SHIFT && a.small_in[region] == 0 {
                continue;
            }
            let Some(i) = a.find(va >> p.shift, asid, p.shift) else { continue };
            a.lru[i] = self.clock;
            let e = a.ent[i];
            let t = Translation { pa_base: e.pa_base(), shift: p.shift, perm: e.perm() };
            if p.level == 1 {
                self.stats.l1_hits[p.size] += 1;
                // Until the next fill or invalidation, this page's lookups
                // end at this same entry.
                let m = Memo::new(va, asid, t, p.size, p.array, i, self.clock);
                let slot = match self.live_memo_where(|x| x.array == m.array && x.way == m.way) {
                    Some(j) => j,
                    None => {
                        let j = self.next_memo;
                        self.next_memo = (j + 1) % MEMOS;
                        self.settle(j);
                        j
                    }
                };
                self.memos[slot] = m;
                self.live_memos |= 1 << slot;
                // The access that follows in the page (a modify's store)
                // finds it first.
                self.last_memo = slot;
                return Some((t, TlbHit::L1));
            }
            self.stats.l2_hits[p.size] += 1;
            // The first level was probed for every size and missed.
            let span = a.span[i];
            let at = self.fill_level(1, va, asid, t, true, span);
            self.remember_fill(va, asid, t, p.size, at);
            return Some((t, TlbHit::L2));
        }
        None
    }

    /// What a lookup of `va` would return if it is in the page of a recent
    /// first-level hit (see `memos`), with which one; counts nothing.
    #[inline(always)]
    pub fn memo(&self, va: u64, asid: u16) -> Option<(Translation, usize)> {
        // At most one memo matches (a lookup answers with the largest
        // page, and a fill forgets them all). Most often it is the one
        // that answered last; else every memo is compared, without a
        // branch on which one matches (an address stream moves between
        // pages unpredictably).
        let m = &self.memos[self.last_memo];
        if va & m.mask == m.base && m.asid == asid {
            return Some((m.t, self.last_memo));
        }
        let j = self.memo_after[self.last_memo] as usize & (MEMOS - 1);
        let m = &self.memos[j];
        if va & m.mask == m.base && m.asid == asid {
            debug_assert_eq!(self.memos.iter().filter(|m| va & m.mask == m.base && m.asid == asid).count(), 1);
            return Some((m.t, j));
        }
        self.live_memo_where(|m| va & m.mask == m.base && m.asid == asid).map(|j| (self.memos[j].t, j))
    }

    /// The first valid memo (in slot order) that `pred` holds for.
    #[inline(always)]
    fn live_memo_where(&self, pred: impl Fn(&Memo) -> bool) -> Option<usize> {
        let mut live = self.live_memos;
        while live != 0 {
            let j = live.trailing_zeros() as usize;
            if pred(&self.memos[j]) {
                return Some(j);
            }
            live &= live - 1;
        }
        None
    }

    /// Counts a lookup answered by `memo` (a first-level hit) and marks
    /// its entry most recently used, as the lookup would have.
    #[inline(always)]
    pub fn count_memo_hit(&mut self, m: usize) {
        self.stats.lookups += 1;
        self.stats.l1_hits[self.memos[m].size] += 1;
        self.clock = self.clock.wrapping_add(1);
        self.memos[m].stamp = self.clock;
        self.memo_after[self.last_memo] = m as u8;
        self.last_memo = m;
    }

    /// Gives memo `j`'s entry the stamp of its latest hit.
    #[inline(always)]
    fn settle(&mut self, j: usize) {
        let m = &self.memos[j];
        if m.base != INVALID {
            self.arrays[m.array as usize].lru[m.way as usize] = m.stamp;
        }
    }

    /// Forgets the recent hits (after a fill or an invalidation): a base
    /// of INVALID matches no address, whatever the mask (a masked address
    /// has its low bits clear).
    #[inline(always)]
    fn forget(&mut self) {
        let mut live = self.live_memos;
        while live != 0 {
            let j = live.trailing_zeros() as usize;
            self.settle(j);
            self.memos[j].base = INVALID;
            live &= live - 1;
        }
        self.live_memos = 0;
        self.forget_fetch();
    }

    pub fn count_miss(&mut self, shift: u8) {
        let i = self.size_idx(shift);
        self.stats.misses[i] += 1;
    }

    /// Enters `t` for `va` in the level's array for its page size.
    /// `absent` says the caller knows no entry for the page is there (a
    /// lookup just missed it), which spares the search for one.
    ///
    /// A first-level fill forgets the recent hits (it may evict one's entry,
    /// or put a larger page in front of it); a second-level fill leaves
    /// them, since a lookup that hits the first level never reaches the
    /// second.
    ///
    /// Returns the array and way filled. `span` is the shift of the page
    /// `t` is a splinter of, or 0.
    #[inline]
    fn fill_level(&mut self, level: u8, va: u64, asid: u16, t: Translation, absent: bool, span: u8) -> Option<(usize, usize)> {
        self.fill_side(level, false, va, asid, t, absent, span)
    }

    /// `fill_level` on the data side or, with `fetch`, the instruction
    /// side.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn fill_side(&mut self, level: u8, fetch: bool, va: u64, asid: u16, t: Translation, absent: bool, span: u8) -> Option<(usize, usize)> {
        if level == 1 {
            self.forget();
        }
        self.clock = self.clock.wrapping_add(1);
        let clock = self.clock;
        let global = t.perm & perm::GLOBAL != 0;
        let tag_asid = if global { GLOBAL_ASID } else { asid };
        let ai = if fetch { self.ifill_target[level as usize - 1][t.shift as usize]? } else { self.fill_target[level as usize - 1][t.shift as usize]? };
        let a = &mut self.arrays[ai];
        let vpn = va >> t.shift;
        let base = a.set_base(vpn);
        // Replace an existing entry for the same page, else the first
        // empty way, else the least recently used (the oldest stamp; an
        // empty way counts as older than any).
        let k = key(vpn, t.shift, tag_asid);
        let i = match if absent { None } else { a.first(base, k) } {
            Some(i) => i,
            None => a.victim(base, clock),
        };
        let old_shift = (a.ent[i].key != INVALID).then(|| a.shift_of(i));
        a.clear(i);
        a.set_key(i, k);
        debug_assert_eq!(t.pa_base & 0xff, 0, "a page's physical base");
        a.ent[i].pa_perm = t.pa_base | t.perm as u64;
        a.lru[i] = clock;
        if span != 0 {
            a.span[i] = span;
            a.splintered += 1;
            a.splinter_slots[splinter_slot(va, span)] += 1;
            a.spans_seen |= 1 << span;
        }
        a.valid[t.shift as usize] += 1;
        if t.shift < REGION_SHIFT {
            a.small_in[region_bucket(va)] += 1;
        }
        a.used += 1;
        if global {
            a.globals += 1;
        }
        // A size this array had none of, or one it no longer has.
        if a.valid[t.shift as usize] == 1 || old_shift.is_some_and(|sh| a.valid[sh as usize] == 0) {
            self.refresh_live();
        }
        Some((ai, i))
    }

    /// Installs a translation the walker produced, in both levels.
    pub fn fill(&mut self, va: u64, asid: u16, t: Translation) {
        self.fill_level(1, va, asid, t, false, 0);
        self.fill_level(2, va, asid, t, false, 0);
    }

    /// `fill` where the caller knows that no first-level entry of any size
    /// translates `va` (a lookup just missed it, or it was just
    /// invalidated). Then the next lookup in the page will end at the new
    /// first-level entry, and it is remembered as a recent hit: the
    /// access that follows a walk (the store of a read-modify-write) finds
    /// it without probing the arrays.
    pub fn fill_missed(&mut self, va: u64, asid: u16, t: Translation) {
        self.fill_missed_splintered(va, asid, t, t.shift);
    }

    /// `fill_missed` under nested paging, where the host maps the guest
    /// with pages of `host_shift` bits: a guest page larger than that is
    /// entered as the one host-page-sized piece of it that holds `va` (a
    /// splintered entry), since the translation the walk ends with holds
    /// only over the smaller of the two pages. This is what AMD's APM
    /// calls a splintered page and Intel's SDM leaves implied by "the
    /// smaller of the two page sizes" in the TLB's caching of combined
    /// translations. The piece remembers the guest page it came from, so
    /// that invalidating any address of that page drops it (the SDM's
    /// INVLPG: "invalidates all of them" where a larger page has several
    /// entries). Where the TLB holds no size at or below `host_shift`, `t`
    /// is entered whole.
    pub fn fill_missed_splintered(&mut self, va: u64, asid: u16, t: Translation, host_shift: u8) {
        let (t, span) = self.splinter(va, t, host_shift);
        let at = self.fill_level(1, va, asid, t, false, span);
        self.fill_level(2, va, asid, t, false, span);
        let size = self.size_idx(t.shift);
        self.remember_fill(va, asid, t, size, at);
    }

    /// The piece of `t` holding `va` that the TLB holds under host pages
    /// of `host_shift` bits, and the span it is a splinter of (0: whole).
    fn splinter(&self, va: u64, t: Translation, host_shift: u8) -> (Translation, u8) {
        let piece = if host_shift < t.shift { self.shifts.iter().copied().filter(|&s| s <= host_shift).max() } else { None };
        match piece {
            Some(sh) => {
                let mask = (1u64 << sh) - 1;
                (Translation { pa_base: t.pa_base + (va & ((1u64 << t.shift) - 1) & !mask), shift: sh, perm: t.perm }, t.shift)
            }
            None => (t, 0),
        }
    }

    /// Clears the splintered entries of `asid` (and global ones) whose
    /// guest page holds `va`. An array is passed over only where a guest
    /// page of some span holding `va` has pieces counted in its slot.
    fn clear_splinters(&mut self, va: u64, asid: u16) -> bool {
        let mut cleared = false;
        for a in &mut self.arrays {
            if a.splintered == 0 {
                continue;
            }
            let mut spans = a.spans_seen;
            let mut any = false;
            while spans != 0 && !any {
                let span = spans.trailing_zeros() as u8;
                spans &= spans - 1;
                any = a.splinter_slots[splinter_slot(va, span)] != 0;
            }
            if !any {
                continue;
            }
            for i in 0..a.ent.len() {
                let span = a.span[i];
                if span == 0 {
                    continue;
                }
                let k = a.ent[i].key;
                if (k & 0xffff) as u16 != asid && a.ent[i].perm() & perm::GLOBAL == 0 {
                    continue;
                }
                if key_va(k) >> span == va >> span {
                    a.clear(i);
                    cleared = true;
                }
            }
        }
        cleared
    }

    /// After a first-level fill of `t` for `va` with nothing of any size in
    /// front of it: remembers the new entry as a recent hit.
    #[inline]
    fn remember_fill(&mut self, va: u64, asid: u16, t: Translation, size: usize, at: Option<(usize, usize)>) {
        let Some((ai, way)) = at else { return };
        debug_assert!(self.memos.iter().all(|m| m.base == INVALID), "a first-level fill forgets the memos");
        self.memos[0] = Memo::new(va, asid, t, size, ai, way, self.arrays[ai].lru[way]);
        self.live_memos = 1;
        self.next_memo = 1;
        self.last_memo = 0;
    }

    /// Looks an instruction fetch's `va` up in the instruction side's
    /// arrays (its first level, then the second level it shares with
    /// data where that is unified), as `lookup` does the data side's; a
    /// second-level hit fills the instruction side's first level. Counts
    /// in `istats`; the caller counts a miss with `count_fetch_miss`.
    #[inline]
    pub fn lookup_fetch(&mut self, va: u64, asid: u16) -> Option<(Translation, TlbHit)> {
        self.istats.lookups += 1;
        let m = &self.fetch_memo;
        if va & m.mask == m.base && m.asid == asid {
            let (t, size, a, w) = (m.t, m.size, m.array as usize, m.way as usize);
            self.clock = self.clock.wrapping_add(1);
            self.arrays[a].lru[w] = self.clock;
            self.istats.l1_hits[size] += 1;
            return Some((t, TlbHit::L1));
        }
        self.clock = self.clock.wrapping_add(1);
        let mut live = self.ilive;
        let region = region_bucket(va);
        while live != 0 {
            let p = self.iplan[live.trailing_zeros() as usize];
            live &= live - 1;
            let a = &mut self.arrays[p.array];
            if p.shift < REGION_SHIFT && a.small_in[region] == 0 {
                continue;
            }
            let Some(i) = a.find(va >> p.shift, asid, p.shift) else { continue };
            a.lru[i] = self.clock;
            let e = a.ent[i];
            let t = Translation { pa_base: e.pa_base(), shift: p.shift, perm: e.perm() };
            if p.level == 1 {
                self.istats.l1_hits[p.size] += 1;
                self.fetch_memo = Memo::new(va, asid, t, p.size, p.array, i, self.clock);
                return Some((t, TlbHit::L1));
            }
            self.istats.l2_hits[p.size] += 1;
            let span = a.span[i];
            if let Some((ai, way)) = self.fill_side(1, true, va, asid, t, true, span) {
                self.fetch_memo = Memo::new(va, asid, t, p.size, ai, way, self.clock);
            }
            return Some((t, TlbHit::L2));
        }
        None
    }

    /// Counts an instruction-side miss of a page of `shift` bits.
    pub fn count_fetch_miss(&mut self, shift: u8) {
        let i = self.size_idx(shift);
        self.istats.misses[i] += 1;
    }

    /// `fill_missed_splintered` for an instruction fetch: the translation
    /// goes into the instruction side's first level and the second level
    /// it uses.
    pub fn fill_fetch_missed_splintered(&mut self, va: u64, asid: u16, t: Translation, host_shift: u8) {
        let (t, span) = self.splinter(va, t, host_shift);
        let at = self.fill_side(1, true, va, asid, t, false, span);
        self.fill_side(2, true, va, asid, t, false, span);
        if let Some((ai, way)) = at {
            let size = self.size_idx(t.shift);
            self.fetch_memo = Memo::new(va, asid, t, size, ai, way, self.arrays[ai].lru[way]);
        }
    }

    /// Whether the instruction side has arrays of its own or shared.
    pub fn has_fetch_side(&self) -> bool {
        !self.iplan.is_empty()
    }

    #[inline(always)]
    fn forget_fetch(&mut self) {
        self.fetch_memo.base = INVALID;
    }

    /// Invalidates every entry of any size that translates `va` in `asid`
    /// (and global ones): the effect of INVLPG / TLBI VAE1 / SFENCE.VMA va.
    pub fn invalidate_page(&mut self, va: u64, asid: u16) {
        self.forget();
        self.stats.invalidations += 1;
        let mut cleared = false;
        for a in &mut self.arrays {
            for si in 0..a.shifts.len() {
                let sh = a.shifts[si];
                if a.valid[sh as usize] == 0 {
                    continue;
                }
                let vpn = va >> sh;
                while let Some(i) = a.find(vpn, asid, sh) {
                    a.clear(i);
                    cleared = true;
                }
            }
        }
        // The other pieces of a splintered page.
        cleared |= self.clear_splinters(va, asid);
        if cleared {
            self.refresh_live();
        }
    }

    /// Invalidates every entry of any size that translates some address in
    /// [start, end) in `asid` (and global ones): a TLBI VAE1 for each 4 KB
    /// page of the range. Short ranges are done page by page; long ones
    /// by one pass over every entry.
    pub fn invalidate_range(&mut self, start: u64, end: u64, asid: u16) {
        const PAGE: u64 = 1 << 12;
        let pages = end.saturating_sub(start).div_ceil(PAGE);
        if pages <= 64 {
            for i in 0..pages {
                self.invalidate_page(start + i * PAGE, asid);
            }
            return;
        }
        self.forget();
        self.stats.invalidations += pages;
        for a in &mut self.arrays {
            for i in 0..a.ent.len() {
                let k = a.ent[i].key;
                if k == INVALID {
                    continue;
                }
                let tag = (k & 0xffff) as u16;
                if tag != asid && a.ent[i].perm() & perm::GLOBAL == 0 {
                    continue;
                }
                // A splinter stands for its whole guest page.
                let sh = a.shift_of(i).max(a.span[i]);
                let base = key_va(k) & !((1u64 << sh) - 1);
                if base < end && start < base.wrapping_add(1 << sh) {
                    a.clear(i);
                }
            }
        }
        self.refresh_live();
    }

    /// Invalidates every non-global entry of one address space.
    pub fn invalidate_asid(&mut self, asid: u16) {
        self.forget();
        self.stats.flushes += 1;
        for a in &mut self.arrays {
            if a.valid.iter().all(|&v| v == 0) {
                continue;
            }
            for i in 0..a.ent.len() {
                let e = a.ent[i];
                if e.key != INVALID && (e.key & 0xffff) as u16 == asid && e.perm() & perm::GLOBAL == 0 {
                    a.clear(i);
                }
            }
        }
        self.refresh_live();
    }

    /// Invalidates everything.
    pub fn invalidate_all(&mut self) {
        self.forget();
        self.stats.flushes += 1;
        for a in &mut self.arrays {
            for i in 0..a.ent.len() {
                a.clear(i);
            }
        }
        self.refresh_live();
    }

    /// Every valid entry as (va base, asid, translation): for the checker.
    pub fn entries(&self) -> Vec<(u64, u16, Translation)> {
        let mut v = Vec::new();
        for a in &self.arrays {
            for i in (0..a.ent.len()).filter(|&i| a.ent[i].key != INVALID) {
                let t = Translation { pa_base: a.ent[i].pa_base(), shift: a.shift_of(i), perm: a.ent[i].perm() };
                v.push((key_va(a.ent[i].key), (a.ent[i].key & 0xffff) as u16, t));
            }
        }
        v
    }
}

/// Where the loads of a sweep hit: shares of the first level, the second
/// level, and misses (walks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SweepShares {
    pub l1: f64,
    pub l2: f64,
    pub miss: f64,
}

/// What the TLB of `cfgs` does with the 4 KB-page probe of `splab
/// calibrate`: one load in each of `pages` consecutive 4 KB pages, visited
/// again and again in one random cyclic order (fixed by `seed`). Returns
/// the shares of the loads of the later passes, once the TLB has settled.
pub fn sweep(cfgs: &[TlbArrayConfig], pages: u64, seed: u64) -> Result<SweepShares, String> {
    const WARM: usize = 4;
    const TIMED: usize = 4;
    let mut tlb = Tlb::new(cfgs, &[12, 21, 30])?;
    let mut order: Vec<u64> = (0..pages).collect();
    let mut rng = crate::rng::Rng::new(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    // Anywhere in a user address space; the low 21 bits of the base are
    // not zero, as a mapping's need not be.
    let base = 0x7f3a_1c25_3000u64;
    let mut n = [0u64; 3];
    for pass in 0..WARM + TIMED {
        for &pg in &order {
            let va = base + (pg << 12);
            let at = match tlb.lookup(va, 1) {
                Some((_, TlbHit::L1)) => 0,
                Some((_, TlbHit::L2)) => 1,
                None => {
                    tlb.fill_missed(va, 1, Translation { pa_base: va, shift: 12, perm: perm::READ });
                    2
                }
            };
            if pass >= WARM {
                n[at] += 1;
            }
        }
    }
    let all = (n[0] + n[1] + n[2]).max(1) as f64;
    Ok(SweepShares { l1: n[0] as f64 / all, l2: n[1] as f64 / all, miss: n[2] as f64 / all })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Vec<TlbArrayConfig> {
        vec![
            TlbArrayConfig { sizes: vec!["4K".into()], entries: 8, ways: 2, level: 1, index: TlbIndex::Modulo, side: None },
            TlbArrayConfig { sizes: vec!["2M".into()], entries: 4, ways: 4, level: 1, index: TlbIndex::Modulo, side: None },
            TlbArrayConfig { sizes: vec!["4K".into(), "2M".into()], entries: 32, ways: 4, level: 2, index: TlbIndex::Modulo, side: None },
        ]
    }

    fn t(pa: u64, shift: u8) -> Translation {
        Translation { pa_base: pa, shift, perm: perm::READ | perm::WRITE | perm::USER }
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size_shift("4K"), Some(12));
        assert_eq!(parse_size_shift("2M"), Some(21));
        assert_eq!(parse_size_shift("1G"), Some(30));
        assert_eq!(parse_size_shift("64K"), Some(16));
        assert_eq!(parse_size_shift("3K"), None);
        assert_eq!(size_name(21), "2M");
    }

    /// Under 4 KB host pages a guest 2 MB page is entered 4 KB at a time:
    /// each piece translates its own 4 KB, a lookup elsewhere in the 2 MB
    /// page misses, and invalidating any address of the 2 MB page drops
    /// every piece (the SDM's INVLPG), while other 4 KB entries stay.
    #[test]
    fn splintered_pieces_cover_a_host_page_and_leave_with_their_guest_page() {
        let mut tlb = Tlb::new(&cfg(), &[12, 21]).unwrap();
        let (gva, gpa) = (0x40_0000u64, 0x80_0000u64);
        tlb.fill_missed_splintered(gva + 0x1_2345, 1, t(gpa, 21), 12);
        let (tr, lvl) = tlb.lookup(gva + 0x1_2000, 1).unwrap();
        assert_eq!((tr.pa_base, tr.shift, lvl), (gpa + 0x1_2000, 12, TlbHit::L1));
        assert!(tlb.lookup(gva + 0x1_3000, 1).is_none(), "a piece covers 4 KB, not the guest page");
        tlb.fill_missed_splintered(gva + 0x7_0000, 1, t(gpa, 21), 12);
        tlb.fill_missed_splintered(0x9000, 1, t(0x5000, 12), 12);
        tlb.fill(gva + 0x20_0000, 1, t(0x3000, 12));
        assert_eq!(tlb.lookup(gva + 0x7_0fff, 1).unwrap().0.pa_base, gpa + 0x7_0000);
        // A host page as large as the guest's leaves the entry whole.
        tlb.fill_missed_splintered(0x80_0000, 1, t(0x100_0000, 21), 21);
        assert_eq!(tlb.lookup(0x9f_ffff, 1).unwrap().0.shift, 21);
        tlb.invalidate_page(gva + 0x1f_f000, 1);
        assert!(tlb.lookup(gva + 0x1_2000, 1).is_none() && tlb.lookup(gva + 0x7_0000, 1).is_none(), "every piece of the guest page");
        assert!(tlb.lookup(0x9000, 1).is_some() && tlb.lookup(gva + 0x20_0000, 1).is_some() && tlb.lookup(0x80_0000, 1).is_some());
        // A long range's pass over every entry drops a piece whose guest
        // page overlaps the range though the piece itself lies outside it.
        tlb.fill_missed_splintered(gva + 0x1_0000, 1, t(gpa, 21), 12);
        tlb.invalidate_range(gva + 0x10_0000, gva + 0x20_0000, 1);
        assert!(tlb.lookup(gva + 0x1_0000, 1).is_none());
        assert!(tlb.lookup(gva + 0x20_0000, 1).is_some(), "past the range");
        // Other address spaces' pieces stay.
        tlb.fill_missed_splintered(gva, 2, t(gpa, 21), 12);
        tlb.invalidate_page(gva + 0x1000, 1);
        assert!(tlb.lookup(gva, 2).is_some());
    }

    #[test]
    fn fill_lookup_and_invalidate() {
        let mut tlb = Tlb::new(&cfg(), &[12, 21]).unwrap();
        assert!(tlb.lookup(0x1234, 1).is_none());
        tlb.fill(0x1234, 1, t(0x9000, 12));
        let (tr, lvl) = tlb.lookup(0x1ff8, 1).unwrap();
        assert_eq!((tr.pa_base, lvl), (0x9000, TlbHit::L1));
        assert!(tlb.lookup(0x1ff8, 2).is_none(), "asid tagged");
        tlb.fill(0x40_0000, 1, t(0x20_0000, 21));
        assert_eq!(tlb.lookup(0x5f_ffff, 1).unwrap().0.shift, 21);
        tlb.invalidate_page(0x45_0000, 1);
        assert!(tlb.lookup(0x40_0000, 1).is_none(), "2M entry covering va removed");
        tlb.invalidate_asid(1);
        assert!(tlb.lookup(0x1000, 1).is_none());
    }

    #[test]
    fn upper_half_addresses_are_kept_whole() {
        let mut tlb = Tlb::new(&cfg(), &[12, 21]).unwrap();
        let va = 0xffff_8000_0020_0000u64;
        tlb.fill(va, 1, t(0x40_0000, 21));
        assert!(tlb.lookup(va & 0x0000_ffff_ffff_ffff, 1).is_none(), "the lower-half alias does not match");
        assert_eq!(tlb.lookup(va + 0x1234, 1).unwrap().0.pa_base, 0x40_0000);
        let e = tlb.entries();
        assert!(e.iter().any(|&(a, asid, tr)| a == va && asid == 1 && tr.shift == 21), "{e:x?}");
    }

    #[test]
    fn global_entries_match_every_asid() {
        let mut tlb = Tlb::new(&cfg(), &[12, 21]).unwrap();
        let g = Translation { pa_base: 0x5000, shift: 12, perm: perm::READ | perm::GLOBAL };
        tlb.fill(0x7000, 1, g);
        assert_eq!(tlb.lookup(0x7010, 2).unwrap().0.pa_base, 0x5000);
        tlb.invalidate_asid(1);
        assert!(tlb.lookup(0x7010, 3).is_some(), "a PCID flush keeps global entries");
        tlb.invalidate_page(0x7000, 3);
        assert!(tlb.lookup(0x7010, 1).is_none(), "INVLPG removes global entries too");
    }

    #[test]
    fn sizes_with_the_same_tag_do_not_alias() {
        let mut tlb = Tlb::new(&cfg(), &[12, 21]).unwrap();
        // vpn 1 at 4 KB (va 0x1000) and vpn 1 at 2 MB (va 0x200000).
        tlb.fill(0x1000, 1, t(0xa000, 12));
        tlb.fill(0x20_0000, 1, t(0x60_0000, 21));
        assert_eq!(tlb.lookup(0x1000, 1).unwrap().0.pa_base, 0xa000);
        assert_eq!(tlb.lookup(0x20_1000, 1).unwrap().0.pa_base, 0x60_0000);
        tlb.invalidate_page(0x1000, 1);
        assert_eq!(tlb.lookup(0x20_1000, 1).unwrap().0.shift, 21);
    }

    #[test]
    fn range_invalidation_removes_overlapping_entries_of_every_size() {
        let cfgs = vec![
            TlbArrayConfig { sizes: vec!["4K".into(), "64K".into(), "2M".into()], entries: 48, ways: 48, level: 1, index: TlbIndex::Modulo, side: None },
            TlbArrayConfig { sizes: vec!["4K".into(), "64K".into(), "2M".into()], entries: 1280, ways: 5, level: 2, index: TlbIndex::Modulo, side: None },
        ];
        for long in [false, true] {
            let mut tlb = Tlb::new(&cfgs, &[12, 16, 21]).unwrap();
            tlb.fill(0x40_0000, 1, t(0x20_0000, 21));
            tlb.fill(0x1_0000, 1, t(0x9_0000, 16));
            tlb.fill(0x3_0000, 1, t(0x7000, 12));
            tlb.fill(0x3_0000, 2, t(0x8000, 12));
            let (start, end) = if long { (0x2_0000, 0x41_0000) } else { (0x2_0000, 0x3_1000) };
            tlb.invalidate_range(start, end, 1);
            assert_eq!(tlb.lookup(0x1_0000, 1).unwrap().0.shift, 16, "the 64K page ends below the range");
            assert!(tlb.lookup(0x3_0000, 1).is_none());
            assert!(tlb.lookup(0x3_0000, 2).is_some(), "other address spaces keep theirs");
            assert_eq!(tlb.lookup(0x40_0000, 1).is_some(), !long, "the 2M page overlaps only the long range");
        }
    }

    /// The per-region counts of small entries stay equal to the entries
    /// there through fills, evictions and every kind of invalidation, and
    /// lookups still find every small page among large ones.
    #[test]
    fn small_page_region_counts_follow_the_entries() {
        for index in [TlbIndex::Modulo, TlbIndex::Hashed] {
            let cfgs: Vec<TlbArrayConfig> = cfg().into_iter().map(|c| TlbArrayConfig { index, ..c }).collect();
            region_counts_follow_the_entries(&cfgs);
        }
    }

    fn region_counts_follow_the_entries(cfgs: &[TlbArrayConfig]) {
        let mut tlb = Tlb::new(cfgs, &[12, 21]).unwrap();
        let counts = |tlb: &Tlb| -> Vec<[u32; REGION_BUCKETS]> {
            tlb.arrays
                .iter()
                .map(|a| {
                    let mut c = [0u32; REGION_BUCKETS];
                    for i in (0..a.ent.len()).filter(|&i| a.ent[i].key != INVALID && a.shift_of(i) < REGION_SHIFT) {
                        c[region_bucket(key_va(a.ent[i].key))] += 1;
                    }
                    c
                })
                .collect()
        };
        let mut x = 7u64;
        for step in 0..20000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // 2 MB pages in even regions, 4 KB pages in odd ones.
            let region = x % 200;
            let huge = region.is_multiple_of(2);
            let va = (region << 21) + if huge { x % (1 << 21) } else { (x >> 9) % 512 * 4096 };
            let sh = if huge { 21 } else { 12 };
            let asid = (x >> 40) as u16 % 3;
            match step % 97 {
                0 => tlb.invalidate_page(va, asid),
                1 => tlb.invalidate_range(va, va + (x % 300) * 4096, asid),
                2 => tlb.invalidate_asid(asid),
                3 if step % 3 == 0 => tlb.invalidate_all(),
                _ => match tlb.lookup(va, asid) {
                    Some((got, _)) => assert_eq!(got.shift, sh),
                    None => tlb.fill_missed(va, asid, t(va & !((1 << sh) - 1), sh)),
                },
            }
            if step % 101 == 0 {
                let want = counts(&tlb);
                for (a, w) in tlb.arrays.iter().zip(&want) {
                    assert_eq!(&a.small_in, w, "step {step}");
                }
            }
            // What was just filled or found is found again.
            if step % 97 > 3 {
                assert!(tlb.lookup(va, asid).is_some(), "step {step}");
            }
        }
        assert!(tlb.stats.l1_hits.iter().sum::<u64>() > 0 && tlb.stats.l2_hits.iter().sum::<u64>() > 0);
    }

    /// The calibrate probe on a 2048-entry, 16-way second level: with the
    /// modulo index every set holds its share until the array is full and
    /// overflows at once past it; with the hashed one some sets overflow
    /// early and some late, so the misses rise gradually around it.
    #[test]
    fn a_sweep_steps_at_the_capacity_or_rises_around_it() {
        let shares = |index: TlbIndex, pages: u64| {
            let cfgs = [
                TlbArrayConfig { sizes: vec!["4K".into()], entries: 64, ways: 4, level: 1, index: TlbIndex::Modulo, side: None },
                TlbArrayConfig { sizes: vec!["4K".into(), "2M".into()], entries: 2048, ways: 16, level: 2, index, side: None },
            ];
            sweep(&cfgs, pages, 42).unwrap()
        };
        let m = |pages| shares(TlbIndex::Modulo, pages);
        assert_eq!((m(1024).miss, m(2048).miss, m(2112).miss, m(2304).miss), (0.0, 0.0, 64.0 * 17.0 / 2112.0, 1.0));
        assert!(m(32).l1 == 1.0 && m(1024).l2 > 0.9, "{:?} {:?}", m(32), m(1024));
        let h = |pages| shares(TlbIndex::Hashed, pages).miss;
        let (a, b, c, d) = (h(1024), h(1536), h(2048), h(3072));
        assert!(a < 0.02 && b > 0.02 && b < c && c > 0.2 && c < 0.8 && d > 0.85 && d < 1.0, "{a} {b} {c} {d}");
        let s = shares(TlbIndex::Hashed, 2048);
        assert!((s.l1 + s.l2 + s.miss - 1.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn lru_eviction_and_stlb_refill() {
        let mut tlb = Tlb::new(&cfg(), &[12, 21]).unwrap();
        // Pages 0, 4, 8 share L1 set 0 (4 sets of 2 ways); 0 is evicted from L1.
        for p in [0u64, 4, 8] {
            tlb.fill(p << 12, 1, t(p << 12, 12));
        }
        let (_, lvl) = tlb.lookup(0, 1).unwrap();
        assert_eq!(lvl, TlbHit::L2);
        let (_, lvl) = tlb.lookup(0, 1).unwrap();
        assert_eq!(lvl, TlbHit::L1, "refilled from the STLB");
        assert_eq!(tlb.stats.l2_hits[0], 1);
        assert_eq!(tlb.entries().len(), 3 + 2);
    }

    /// Sets of more than 16 ways (a 64-way ERAT, a 20-way set), and the
    /// narrow and 16-way ones the victim search treats apart, find keys
    /// and pick victims exactly as a plain scan of every way does.
    #[test]
    fn wide_sets_search_and_replace_like_a_linear_scan() {
        for (entries, ways) in [(64, 64), (40, 20), (24, 24), (16, 4), (32, 8), (64, 16)] {
            let cfgs = [TlbArrayConfig { sizes: vec!["4K".into(), "16M".into()], entries, ways, level: 1, index: TlbIndex::Modulo, side: None }];
            let mut tlb = Tlb::new(&cfgs, &[12, 24]).unwrap();
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for n in 0..20_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (va, asid) = ((x % 200) << 12, (x >> 40) as u16 % 3);
                let a = &tlb.arrays[0];
                let base = a.set_base(va >> 12);
                let k = key(va >> 12, 12, asid);
                assert_eq!(a.first(base, k), a.ent[base..base + ways].iter().position(|y| y.key == k).map(|w| base + w));
                let clock = tlb.clock.wrapping_add(1);
                let linear = (base..base + ways)
                    .map(|w| (w, if a.ent[w].key == INVALID { u32::MAX } else { clock.wrapping_sub(a.lru[w]) }))
                    .fold((base, 0), |(b, age), (w, x)| if x > age { (w, x) } else { (b, age) })
                    .0;
                assert_eq!(a.victim(base, clock), linear);
                match n % 5 {
                    0 => tlb.invalidate_page(va, asid),
                    1 | 2 => tlb.fill(va, asid, t(va + 0x100_0000, 12)),
                    _ => {
                        tlb.lookup(va, asid);
                    }
                }
                // The probes a lookup makes are those of the sizes held.
                let live = tlb.live;
                tlb.refresh_live();
                assert_eq!(live, tlb.live);
            }
        }
    }
}
