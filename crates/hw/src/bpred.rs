//! Branch prediction: the direction of conditional branches, the targets
//! of indirect jumps and calls, and returns, as a core's front end
//! predicts them. The interval core (`splab_sim::core`) asks at each
//! branch whether it was mispredicted and charges the refill; what the
//! branch really did comes from the instruction stream.
//!
//! The kinds a profile names (`[core.predictor] kind`):
//! - `bimodal`: a table of 2-bit counters indexed by the branch's address
//!   (Smith, 1981);
//! - `gshare`: the counters indexed by the address xored with the global
//!   history of outcomes (McFarling, "Combining branch predictors", DEC
//!   WRL TN-36, 1993);
//! - `tournament`: a local predictor (per-branch histories indexing 3-bit
//!   counters), a global one (history-indexed 2-bit counters) and a
//!   chooser between them, as the Alpha 21264 has (Kessler, IEEE Micro
//!   19(2), 1999);
//! - `tage`: a base bimodal table and tagged tables indexed by geometric
//!   lengths of global history, the longest match providing (Seznec and
//!   Michaud, "A case for (partially) TAgged GEometric history length
//!   branch prediction", JILP 8, 2006), as the cores of the last decade
//!   use in some form.
//!
//! Every kind has a return-address stack, a branch target buffer that
//! gives an indirect branch its last target, and, where the profile has
//! one, an indirect-target table indexed by the branch's address and the
//! path of recent targets.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PredictorKind {
    Bimodal,
    Gshare,
    Tournament,
    Tage,
}

/// `[core.predictor]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PredictorConfig {
    pub kind: PredictorKind,
    /// 2-bit counters of the base table (bimodal, tage), of the pattern
    /// table (gshare), or of the global table (tournament).
    pub entries: u32,
    /// Global history in branches: the bits that index (gshare,
    /// tournament), or the longest tagged table's (tage).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub history: u32,
    /// tage: tagged tables.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tables: u32,
    /// tournament: per-branch local histories (and as many local
    /// counters as those histories have values).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub local: u32,
    /// Branch target buffer entries (0: none; where a core computes
    /// direct targets in fetch, an indirect branch is predicted only by
    /// the indirect-target predictor, or not at all).
    pub btb: u32,
    /// Indirect-target predictor entries (0: an indirect branch is
    /// predicted to go where it went last, from the BTB).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub indirect: u32,
    /// Return-address stack entries.
    pub ras: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl PredictorConfig {
    pub fn validate(&self) -> Result<(), String> {
        let pow2 = |k: &str, v: u32, lo: u32, hi: u32| -> Result<(), String> {
            if !v.is_power_of_two() || !(lo..=hi).contains(&v) {
                return Err(format!("core.predictor.{k} = {v} is not a power of two from {lo} to {hi}"));
            }
            Ok(())
        };
        pow2("entries", self.entries, 16, 1 << 24)?;
        for (k, v) in [("btb", self.btb), ("indirect", self.indirect)] {
            if v > 1 << 24 {
                return Err(format!("core.predictor.{k} = {v} is out of range (0 to 16777216)"));
            }
        }
        if self.ras > 1024 {
            return Err(format!("core.predictor.ras = {} is out of range (0 to 1024)", self.ras));
        }
        match self.kind {
            PredictorKind::Bimodal => {}
            PredictorKind::Gshare => {
                if !(1..=30).contains(&self.history) {
                    return Err(format!("core.predictor.history = {} is out of range for gshare (1 to 30 bits)", self.history));
                }
            }
            PredictorKind::Tournament => {
                pow2("local", self.local, 16, 1 << 20)?;
                if !(1..=30).contains(&self.history) {
                    return Err(format!("core.predictor.history = {} is out of range for tournament (1 to 30 bits)", self.history));
                }
            }
            PredictorKind::Tage => {
                if !(1..=MAX_TABLES as u32).contains(&self.tables) {
                    return Err(format!("core.predictor.tables = {} is out of range for tage (1 to {MAX_TABLES})", self.tables));
                }
                if !(MIN_HISTORY as u32 + 1..=MAX_HISTORY as u32).contains(&self.history) {
                    return Err(format!("core.predictor.history = {} is out of range for tage ({} to {MAX_HISTORY} branches)", self.history, MIN_HISTORY + 1));
                }
            }
        }
        Ok(())
    }
}

/// What the predictor got right and wrong, by kind of branch.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PredictorStats {
    pub conditional: u64,
    pub conditional_missed: u64,
    pub indirect: u64,
    pub indirect_missed: u64,
    pub returns: u64,
    pub returns_missed: u64,
}

impl PredictorStats {
    pub fn add(&mut self, o: &PredictorStats) {
        self.conditional += o.conditional;
        self.conditional_missed += o.conditional_missed;
        self.indirect += o.indirect;
        self.indirect_missed += o.indirect_missed;
        self.returns += o.returns;
        self.returns_missed += o.returns_missed;
    }

    pub fn mispredicted(&self) -> u64 {
        self.conditional_missed + self.indirect_missed + self.returns_missed
    }
}

const MAX_TABLES: usize = 16;
const MIN_HISTORY: usize = 4;
const MAX_HISTORY: usize = 2048;
/// Tag bits of tage's tagged entries.
const TAG_BITS: u32 = 11;
/// Updates between the halvings of tage's usefulness counters.
const U_RESET: u64 = 1 << 18;

/// A 2-bit saturating counter: taken when 2 or 3.
#[inline(always)]
fn bump2(c: &mut u8, taken: bool) {
    if taken {
        *c = (*c + 1).min(3);
    } else {
        *c = c.saturating_sub(1);
    }
}

#[inline(always)]
fn hash_pc(pc: u64) -> u64 {
    // Instructions are at least byte-aligned; fold the high bits in.
    pc ^ (pc >> 13) ^ (pc >> 27)
}

/// A history folded into `bits` bits (Seznec's folded history): the
/// last `len` outcomes, updated in constant time as one comes in and the
/// oldest goes out.
#[derive(Clone, Copy)]
struct Folded {
    value: u32,
    len: usize,
    bits: u32,
    out_at: u32,
}

impl Folded {
    fn new(len: usize, bits: u32) -> Folded {
        Folded { value: 0, len, bits, out_at: (len as u32) % bits }
    }

    /// The newest outcome comes in, the one `len` ago goes out.
    #[inline(always)]
    fn update(&mut self, incoming: u32, outgoing: u32) {
        let mut v = (self.value << 1) | incoming;
        v ^= outgoing << self.out_at;
        v ^= v >> self.bits;
        self.value = v & ((1 << self.bits) - 1);
    }
}

/// Global history of conditional outcomes, a byte each, newest at 0.
struct History {
    bits: Vec<u8>,
    head: usize,
    mask: usize,
}

impl History {
    fn new(len: usize) -> History {
        let n = (len + 2).next_power_of_two();
        History { bits: vec![0; n], head: 0, mask: n - 1 }
    }

    /// The outcome `age` branches ago.
    #[inline(always)]
    fn bit(&self, age: usize) -> bool {
        self.bits[self.head.wrapping_sub(age) & self.mask] != 0
    }

    #[inline(always)]
    fn push(&mut self, taken: bool) {
        self.head = (self.head + 1) & self.mask;
        self.bits[self.head] = taken as u8;
    }
}

#[derive(Clone, Copy, Default)]
struct TageEntry {
    ctr: i8,
    tag: u16,
    u: u8,
}

struct Tage {
    base: Vec<u8>,
    tables: Vec<Vec<TageEntry>>,
    lg: u32,
    idx: Vec<Folded>,
    tag1: Vec<Folded>,
    tag2: Vec<Folded>,
    use_alt: i8,
    updates: u64,
    /// Chooses among candidate tables when allocating (deterministic).
    seed: u32,
}

impl Tage {
    fn new(c: &PredictorConfig) -> Tage {
        let n = c.tables as usize;
        let lg = (c.entries.trailing_zeros()).saturating_sub(1).max(6);
        let lens: Vec<usize> = (0..n)
            .map(|i| {
                if n == 1 {
                    c.history as usize
                } else {
                    let r = (c.history as f64 / MIN_HISTORY as f64).powf(i as f64 / (n - 1) as f64);
                    (MIN_HISTORY as f64 * r).round() as usize
                }
            })
            .collect();
        Tage {
            base: vec![2; c.entries as usize],
            tables: vec![vec![TageEntry::default(); 1 << lg]; n],
            lg,
            idx: lens.iter().map(|&l| Folded::new(l, lg)).collect(),
            tag1: lens.iter().map(|&l| Folded::new(l, TAG_BITS)).collect(),
            tag2: lens.iter().map(|&l| Folded::new(l, TAG_BITS - 1)).collect(),
            use_alt: 0,
            updates: 0,
            seed: 0x2545_f491,
        }
    }

    #[inline(always)]
    fn index(&self, t: usize, pc: u64) -> usize {
        let h = hash_pc(pc);
        ((h ^ (h >> (self.lg as u64 - t as u64 % self.lg as u64)) ^ self.idx[t].value as u64) & ((1 << self.lg) - 1)) as usize
    }

    #[inline(always)]
    fn tag(&self, t: usize, pc: u64) -> u16 {
        ((hash_pc(pc) ^ self.tag1[t].value as u64 ^ ((self.tag2[t].value as u64) << 1)) & ((1 << TAG_BITS) - 1)) as u16
    }

    /// Predicts and updates; true if the prediction was taken.
    fn predict_update(&mut self, pc: u64, taken: bool) -> bool {
        let n = self.tables.len();
        let mut idx = [0usize; MAX_TABLES];
        let mut tag = [0u16; MAX_TABLES];
        let (mut provider, mut alt) = (None, None);
        for t in (0..n).rev() {
            idx[t] = self.index(t, pc);
            tag[t] = self.tag(t, pc);
            if self.tables[t][idx[t]].tag == tag[t] {
                if provider.is_none() {
                    provider = Some(t);
                } else if alt.is_none() {
                    alt = Some(t);
                }
            }
        }
        let bi = (hash_pc(pc) as usize) & (self.base.len() - 1);
        let base_pred = self.base[bi] >= 2;
        let alt_pred = alt.map_or(base_pred, |a| self.tables[a][idx[a]].ctr >= 0);
        let pred = match provider {
            None => base_pred,
            Some(p) => {
                let e = self.tables[p][idx[p]];
                let weak_new = (e.ctr == 0 || e.ctr == -1) && e.u == 0;
                let prov_pred = e.ctr >= 0;
                if weak_new && prov_pred != alt_pred {
                    self.use_alt = if alt_pred == taken { (self.use_alt + 1).min(7) } else { (self.use_alt - 1).max(-8) };
                }
                if weak_new && self.use_alt >= 0 {
                    alt_pred
                } else {
                    prov_pred
                }
            }
        };
        // Allocate on a misprediction in a longer table.
        let start = provider.map_or(0, |p| p + 1);
        if pred != taken && start < n {
            let mut free = [0usize; MAX_TABLES];
            let mut nfree = 0;
            for (t, &i) in idx.iter().enumerate().take(n).skip(start) {
                if self.tables[t][i].u == 0 {
                    free[nfree] = t;
                    nfree += 1;
                }
            }
            let free = &free[..nfree];
            if free.is_empty() {
                for (t, &i) in idx.iter().enumerate().take(n).skip(start) {
                    let e = &mut self.tables[t][i];
                    e.u = e.u.saturating_sub(1);
                }
            } else {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 17;
                self.seed ^= self.seed << 5;
                // Mostly the shortest free table, sometimes the next.
                let k = if free.len() > 1 && self.seed & 3 == 0 { 1 } else { 0 };
                let t = free[k];
                self.tables[t][idx[t]] = TageEntry { ctr: if taken { 0 } else { -1 }, tag: tag[t], u: 0 };
            }
        }
        match provider {
            Some(p) => {
                let prov_pred = self.tables[p][idx[p]].ctr >= 0;
                let e = &mut self.tables[p][idx[p]];
                e.ctr = if taken { (e.ctr + 1).min(3) } else { (e.ctr - 1).max(-4) };
                if prov_pred != alt_pred {
                    e.u = if prov_pred == taken { (e.u + 1).min(3) } else { e.u.saturating_sub(1) };
                }
                if alt.is_none() && e.u == 0 {
                    bump2(&mut self.base[bi], taken);
                }
            }
            None => bump2(&mut self.base[bi], taken),
        }
        self.updates += 1;
        if self.updates.is_multiple_of(U_RESET) {
            for t in self.tables.iter_mut() {
                for e in t.iter_mut() {
                    e.u >>= 1;
                }
            }
        }
        pred
    }

    fn push_history(&mut self, hist: &History) {
        let incoming = hist.bit(0) as u32;
        for t in 0..self.tables.len() {
            let outgoing = hist.bit(self.idx[t].len) as u32;
            self.idx[t].update(incoming, outgoing);
            self.tag1[t].update(incoming, outgoing);
            self.tag2[t].update(incoming, outgoing);
        }
    }
}

enum Direction {
    Bimodal(Vec<u8>),
    Gshare { table: Vec<u8>, bits: u32 },
    Tournament { local_hist: Vec<u16>, local_ctr: Vec<u8>, global: Vec<u8>, choice: Vec<u8>, lbits: u32, gbits: u32 },
    Tage(Box<Tage>),
}

/// One core's branch predictor.
pub struct Predictor {
    dir: Direction,
    hist: History,
    /// The last outcomes as bits, newest lowest (gshare, tournament, and
    /// the indirect table's index).
    recent: u64,
    /// Recent targets of indirect branches, folded.
    path: u64,
    btb: Vec<(u64, u64)>,
    indirect: Vec<(u64, u64)>,
    ras: Vec<u64>,
    ras_top: usize,
    ras_depth: usize,
    pub stats: PredictorStats,
}

impl Predictor {
    pub fn new(c: &PredictorConfig) -> Predictor {
        let dir = match c.kind {
            PredictorKind::Bimodal => Direction::Bimodal(vec![2; c.entries as usize]),
            PredictorKind::Gshare => Direction::Gshare { table: vec![2; c.entries as usize], bits: c.history },
            PredictorKind::Tournament => {
                let lbits = c.local.trailing_zeros();
                Direction::Tournament {
                    local_hist: vec![0; c.local as usize],
                    local_ctr: vec![4; 1 << lbits],
                    global: vec![2; c.entries as usize],
                    choice: vec![2; c.entries as usize],
                    lbits,
                    gbits: c.history,
                }
            }
            PredictorKind::Tage => Direction::Tage(Box::new(Tage::new(c))),
        };
        let len = if c.kind == PredictorKind::Tage { c.history as usize } else { 64 };
        Predictor {
            dir,
            hist: History::new(len),
            recent: 0,
            path: 0,
            btb: vec![(u64::MAX, 0); c.btb as usize],
            indirect: vec![(u64::MAX, 0); c.indirect as usize],
            ras: vec![0; c.ras as usize],
            ras_top: 0,
            ras_depth: 0,
            stats: PredictorStats::default(),
        }
    }

    /// A conditional branch at `pc` went `taken` (or not): whether the
    /// predictor had it wrong. The predictor learns the outcome.
    pub fn conditional(&mut self, pc: u64, taken: bool) -> bool {
        let h = hash_pc(pc);
        let pred = match &mut self.dir {
            Direction::Bimodal(t) => {
                let n = t.len();
                let c = &mut t[(h as usize) & (n - 1)];
                let p = *c >= 2;
                bump2(c, taken);
                p
            }
            Direction::Gshare { table, bits } => {
                let i = ((h ^ (self.recent & ((1 << *bits) - 1))) as usize) & (table.len() - 1);
                let c = &mut table[i];
                let p = *c >= 2;
                bump2(c, taken);
                p
            }
            Direction::Tournament { local_hist, local_ctr, global, choice, lbits, gbits } => {
                let li = (h as usize) & (local_hist.len() - 1);
                let lh = local_hist[li] as usize & ((1 << *lbits) - 1);
                let lc = &mut local_ctr[lh];
                let lp = *lc >= 4;
                let gi = (self.recent as usize & ((1 << *gbits) - 1)) & (global.len() - 1);
                let gp = global[gi] >= 2;
                let use_global = choice[gi] >= 2;
                let p = if use_global { gp } else { lp };
                if lp != gp {
                    bump2(&mut choice[gi], gp == taken);
                }
                *lc = if taken { (*lc + 1).min(7) } else { lc.saturating_sub(1) };
                bump2(&mut global[gi], taken);
                local_hist[li] = ((local_hist[li] << 1) | taken as u16) & ((1 << *lbits) - 1) as u16;
                p
            }
            Direction::Tage(t) => t.predict_update(pc, taken),
        };
        self.hist.push(taken);
        if let Direction::Tage(t) = &mut self.dir {
            t.push_history(&self.hist);
        }
        self.recent = (self.recent << 1) | taken as u64;
        self.stats.conditional += 1;
        let missed = pred != taken;
        self.stats.conditional_missed += missed as u64;
        missed
    }

    /// An indirect jump or call at `pc` went to `target`: whether the
    /// predicted target was another.
    pub fn indirect(&mut self, pc: u64, target: u64) -> bool {
        let h = hash_pc(pc);
        let b = if self.btb.is_empty() { 0 } else { (h % self.btb.len() as u64) as usize };
        let mut pred = self.btb.get(b).filter(|e| e.0 == pc).map(|e| e.1);
        if !self.indirect.is_empty() {
            let i = ((h ^ self.path ^ (self.recent & 0xff) << 3) % self.indirect.len() as u64) as usize;
            if self.indirect[i].0 == pc {
                pred = Some(self.indirect[i].1);
            }
            self.indirect[i] = (pc, target);
        }
        if let Some(e) = self.btb.get_mut(b) {
            *e = (pc, target);
        }
        self.path = (self.path << 3) ^ (target >> 2) ^ (target >> 9);
        self.path &= 0xffff;
        self.stats.indirect += 1;
        let missed = pred != Some(target);
        self.stats.indirect_missed += missed as u64;
        missed
    }

    /// A call whose return address is `ret`: pushed on the return stack.
    pub fn call(&mut self, ret: u64) {
        if self.ras.is_empty() {
            return;
        }
        self.ras_top = (self.ras_top + 1) % self.ras.len();
        self.ras[self.ras_top] = ret;
        self.ras_depth = (self.ras_depth + 1).min(self.ras.len());
    }

    /// A return to `target`: whether the return stack had another address
    /// (or none) on top.
    pub fn ret(&mut self, target: u64) -> bool {
        self.stats.returns += 1;
        let pred = if self.ras_depth > 0 {
            let p = self.ras[self.ras_top];
            self.ras_top = (self.ras_top + self.ras.len() - 1) % self.ras.len();
            self.ras_depth -= 1;
            Some(p)
        } else {
            None
        };
        let missed = pred != Some(target);
        self.stats.returns_missed += missed as u64;
        missed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: PredictorKind) -> PredictorConfig {
        PredictorConfig { kind, entries: 4096, history: if kind == PredictorKind::Tage { 200 } else { 12 }, tables: 8, local: 1024, btb: 1024, indirect: 256, ras: 16 }
    }

    fn misses(p: &mut Predictor, outcomes: impl Iterator<Item = (u64, bool)>) -> u64 {
        outcomes.map(|(pc, t)| p.conditional(pc, t) as u64).sum()
    }

    /// A branch that always goes one way is learnt by every kind within a
    /// few executions.
    #[test]
    fn a_biased_branch_is_learnt() {
        for k in [PredictorKind::Bimodal, PredictorKind::Gshare, PredictorKind::Tournament, PredictorKind::Tage] {
            let mut p = Predictor::new(&cfg(k));
            let m = misses(&mut p, (0..1000).map(|_| (0x401000, true)));
            assert!(m <= 20, "{k:?}: {m}");
        }
    }

    /// A loop branch taken 7 times then not: bimodal misses every exit;
    /// the history-based kinds learn the pattern.
    #[test]
    fn a_loop_exit_is_learnt_by_history() {
        let pattern = |n: usize| (0..n).map(|i| (0x402000u64, i % 8 != 7));
        for (k, most) in [(PredictorKind::Bimodal, 1300), (PredictorKind::Gshare, 100), (PredictorKind::Tournament, 100), (PredictorKind::Tage, 100)] {
            let mut p = Predictor::new(&cfg(k));
            let m = misses(&mut p, pattern(8000));
            assert!(m <= most, "{k:?}: {m}");
            if k == PredictorKind::Bimodal {
                assert!(m >= 900, "{m}");
            }
        }
    }

    /// Random outcomes are missed about half the time by every kind.
    #[test]
    fn random_outcomes_are_missed_half_the_time() {
        for k in [PredictorKind::Bimodal, PredictorKind::Gshare, PredictorKind::Tournament, PredictorKind::Tage] {
            let mut p = Predictor::new(&cfg(k));
            let mut x = 88172645463325252u64;
            let m = misses(
                &mut p,
                (0..20000).map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (0x403000, x & 1 == 1)
                }),
            );
            assert!((8000..12000).contains(&m), "{k:?}: {m}");
        }
    }

    /// A branch correlated with one 40 branches earlier is beyond gshare's
    /// 12 bits of history but within tage's.
    #[test]
    fn tage_reaches_long_correlations() {
        let run = |k: PredictorKind| {
            let mut p = Predictor::new(&cfg(k));
            let mut x = 88172645463325252u64;
            let mut m = 0;
            for i in 0..40000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let first = x & 1 == 1;
                p.conditional(0x404000, first);
                for j in 0..40 {
                    p.conditional(0x405000 + j * 16, true);
                }
                let missed = p.conditional(0x406000, first);
                if i >= 20000 {
                    m += missed as u64;
                }
            }
            m
        };
        let (g, t) = (run(PredictorKind::Gshare), run(PredictorKind::Tage));
        assert!(g > 7000, "gshare {g}");
        assert!(t < 2000, "tage {t}");
    }

    /// Returns come from the stack; an indirect branch that alternates
    /// with its path is learnt by the indirect table, not by the BTB.
    #[test]
    fn returns_and_indirect_targets() {
        let mut p = Predictor::new(&cfg(PredictorKind::Tage));
        p.call(0x1005);
        p.call(0x2005);
        assert!(!p.ret(0x2005));
        assert!(!p.ret(0x1005));
        assert!(p.ret(0x3000), "empty stack");
        assert_eq!((p.stats.returns, p.stats.returns_missed), (3, 1));
        let run = |indirect: u32| {
            let mut c = cfg(PredictorKind::Tage);
            c.indirect = indirect;
            let mut p = Predictor::new(&c);
            let mut m = 0;
            for i in 0..2000u64 {
                let t = if i % 2 == 0 { 0x7000 } else { 0x8000 };
                // The path to the branch says which way it goes.
                p.indirect(0x500000 + (i % 2) * 64, 0x600000 + (i % 2) * 64);
                m += p.indirect(0x501000, t) as u64;
            }
            m
        };
        assert!(run(256) < 50, "{}", run(256));
        assert!(run(0) > 1900, "{}", run(0));
    }

    #[test]
    fn configs_out_of_range_are_named() {
        let mut c = cfg(PredictorKind::Tage);
        c.entries = 1000;
        assert!(c.validate().unwrap_err().contains("core.predictor.entries = 1000"));
        let mut c = cfg(PredictorKind::Tage);
        c.tables = 40;
        assert!(c.validate().unwrap_err().contains("core.predictor.tables = 40"));
        let mut c = cfg(PredictorKind::Gshare);
        c.history = 0;
        assert!(c.validate().unwrap_err().contains("core.predictor.history = 0"));
        assert!(cfg(PredictorKind::Tournament).validate().is_ok());
    }
}
