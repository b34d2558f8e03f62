//! A database's read-only index lookups, after `pgbench -S` on PostgreSQL,
//! natively: the same shapes as the simulated `index`, but built for real
//! in the region and searched by reading it.
//!
//! The region holds, as PostgreSQL's shared memory does, the buffer-mapping
//! partition locks (128, a cache line each), the buffer descriptors (64
//! bytes: pin count and tag), the buffer-mapping hash table (a bucket array
//! of chain heads and one 32-byte entry per buffer: tag, buffer, next) and
//! the buffers, 8 KB pages. Block b of the database sits in buffer b.
//! Block 0 is the index's metapage (root block and height); the leaves
//! follow, filled to 90% as a bottom-up build leaves them, then each inner
//! level (70%), the root last; then the heap, 61 pgbench_accounts rows per
//! page. Pages have PostgreSQL's layout: a 24-byte header (pd_lower at
//! offset 12), 4-byte line pointers (lp_off in the low 15 bits) growing up,
//! tuples growing down, 16 bytes of B-tree special space on index pages.
//! Index tuples are 16 bytes: heap block or downlink (u32), offset (u16),
//! then the int4 key at +8; pages other than the rightmost of their level
//! begin with a high key.
//!
//! A lookup of a random aid descends from the root: at each page, the
//! mapping lookup under its partition lock (lock, bucket, chain of entries
//! compared by tag, unlock), the pin (descriptor read-modify-write), the
//! binary search (line pointer, then the key it points to), the downlink,
//! the unpin; then the heap fetch (line pointer, tuple header, aid,
//! abalance). The row found must be the one asked for. One client; only the
//! lookups are timed; the figure is lookups (transactions) per second.

use crate::region::Region;
use crate::{Figure, Native, Outcome, Rng, Timer};
use std::fmt::Write as _;

pub use splab_defs::index::{Layout, Level, BLCKSZ};
use splab_defs::index::{BT_SPECIAL, DESC, HASH_ENTRY, PARTITIONS, HEAP_PER_PAGE, HEAP_TUPLE, INDEX_TUPLE, ITEM_ID, PAGE_HEADER, PD_LOWER};

/// The layout with its offsets as indices into the region.
#[derive(Clone, Debug)]
struct Db {
    rows: u64,
    levels: Vec<Level>,
    heap_first_block: u64,
    heap_pages: u64,
    nbuffers: u64,
    nbuckets: u64,
    locks: usize,
    descs: usize,
    buckets: usize,
    entries: usize,
    blocks: usize,
    segment: u64,
}

impl Db {
    fn new(scale: u64) -> Db {
        let l = Layout::new(scale);
        Db {
            rows: l.rows,
            levels: l.levels,
            heap_first_block: l.heap_first_block,
            heap_pages: l.heap_pages,
            nbuffers: l.nbuffers,
            nbuckets: l.nbuckets,
            locks: l.locks as usize,
            descs: l.descs as usize,
            buckets: l.buckets as usize,
            entries: l.entries as usize,
            blocks: l.blocks as usize,
            segment: l.segment,
        }
    }

    fn hash(block: u64) -> u64 {
        Layout::hash(block)
    }
}

fn get16(m: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([m[at], m[at + 1]])
}
fn get32(m: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(m[at..at + 4].try_into().unwrap_or([0; 4]))
}
fn get64(m: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(m[at..at + 8].try_into().unwrap_or([0; 8]))
}
fn put16(m: &mut [u8], at: usize, v: u16) {
    m[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(m: &mut [u8], at: usize, v: u32) {
    m[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(m: &mut [u8], at: usize, v: u64) {
    m[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Offset of tuple `off` (1-based) of an index page.
fn index_tuple(off: usize) -> usize {
    BLCKSZ - BT_SPECIAL - INDEX_TUPLE * off
}

/// Writes an index page: `items` (target block, target offset, key), with
/// a high key first unless it is the rightmost page.
fn write_index_page(p: &mut [u8], high_key: Option<u32>, items: impl Iterator<Item = (u32, u16, u32)>) {
    let mut off = 0;
    let mut add = |p: &mut [u8], block: u32, toff: u16, key: u32| {
        off += 1;
        let t = index_tuple(off);
        put32(p, PAGE_HEADER + (off - 1) * ITEM_ID, t as u32 & 0x7fff);
        put32(p, t, block);
        put16(p, t + 4, toff);
        put32(p, t + 8, key);
    };
    if let Some(h) = high_key {
        add(p, 0, 0, h);
    }
    for (b, o, k) in items {
        add(p, b, o, k);
    }
    put16(p, PD_LOWER, (PAGE_HEADER + off * ITEM_ID) as u16);
}

impl Db {
    /// Loads the database into `m` (pgbench -i, then an index build).
    fn load(&self, m: &mut [u8]) {
        // Heap: rows in aid order, 61 to a page.
        for hp in 0..self.heap_pages {
            let base = self.blocks + (self.heap_first_block + hp) as usize * BLCKSZ;
            let p = &mut m[base..base + BLCKSZ];
            let first = hp * HEAP_PER_PAGE;
            let n = (self.rows - first).min(HEAP_PER_PAGE) as usize;
            for off in 1..=n {
                let t = BLCKSZ - HEAP_TUPLE * off;
                put32(p, PAGE_HEADER + (off - 1) * ITEM_ID, t as u32 & 0x7fff);
                put32(p, t, 1); // t_xmin: a committed transaction
                put32(p, t + 24, (first + off as u64) as u32); // aid
                put32(p, t + 32, 0); // abalance
            }
            put16(p, PD_LOWER, (PAGE_HEADER + n * ITEM_ID) as u16);
        }
        // Index levels, bottom up.
        for (lv, l) in self.levels.iter().enumerate() {
            for page in 0..l.pages {
                let base = self.blocks + (l.first_block + page) as usize * BLCKSZ;
                let rightmost = page + 1 == l.pages;
                let first_key = page * l.span;
                let high = (!rightmost).then(|| ((page + 1) * l.span) as u32);
                if lv == 0 {
                    let n = (self.rows - first_key).min(l.per);
                    let items = (0..n).map(|j| {
                        let key = first_key + j;
                        ((self.heap_first_block + key / HEAP_PER_PAGE) as u32, (key % HEAP_PER_PAGE + 1) as u16, key as u32)
                    });
                    write_index_page(&mut m[base..base + BLCKSZ], high, items);
                } else {
                    let below = &self.levels[lv - 1];
                    let n = (below.pages - page * l.per).min(l.per);
                    let items = (0..n).map(|j| {
                        let child = page * l.per + j;
                        ((below.first_block + child) as u32, 1, (child * below.span) as u32)
                    });
                    write_index_page(&mut m[base..base + BLCKSZ], high, items);
                }
            }
        }
        // Metapage: root block and height.
        let root = self.levels[self.levels.len() - 1].first_block;
        put32(m, self.blocks + PAGE_HEADER, root as u32);
        put32(m, self.blocks + PAGE_HEADER + 4, self.levels.len() as u32);
        // Buffer descriptors and the mapping hash table.
        for buf in 0..self.nbuffers {
            put64(m, self.descs + buf as usize * DESC + 8, buf);
            let h = (Db::hash(buf) & (self.nbuckets - 1)) as usize;
            let e = self.entries + buf as usize * HASH_ENTRY;
            let head = get64(m, self.buckets + h * 8);
            put64(m, e, buf);
            put64(m, e + 8, buf);
            put64(m, e + 16, head);
            put64(m, self.buckets + h * 8, buf + 1);
        }
    }

    /// ReadBuffer for a cached block: returns its buffer, pinned.
    #[inline]
    fn pin(&self, m: &mut [u8], block: u64) -> Result<usize, String> {
        let h = Db::hash(block);
        let lock = self.locks + (h % PARTITIONS) as usize * 64;
        let l = get64(m, lock);
        put64(m, lock, l + 1);
        let mut e = get64(m, self.buckets + (h & (self.nbuckets - 1)) as usize * 8);
        let buf = loop {
            if e == 0 {
                return Err(format!("block {block} is not in the buffer mapping table"));
            }
            let at = self.entries + (e - 1) as usize * HASH_ENTRY;
            if get64(m, at) == block {
                break get64(m, at + 8) as usize;
            }
            e = get64(m, at + 16);
        };
        put64(m, lock, l);
        let d = self.descs + buf * DESC;
        let pins = get64(m, d);
        put64(m, d, pins + 1);
        Ok(buf)
    }

    fn unpin(&self, m: &mut [u8], buf: usize) {
        let d = self.descs + buf * DESC;
        let pins = get64(m, d);
        put64(m, d, pins.wrapping_sub(1));
    }

    /// One select-only transaction: the balance of account `aid`.
    fn lookup(&self, m: &mut [u8], root: u64, height: usize, aid: u64) -> Result<u32, String> {
        let key = (aid - 1) as u32;
        let mut block = root;
        for lv in (0..height).rev() {
            let buf = self.pin(m, block)?;
            let p = self.blocks + buf * BLCKSZ;
            let nitems = (get16(m, p + PD_LOWER) as usize - PAGE_HEADER) / ITEM_ID;
            let first = self.first_data_item(lv, block);
            let key_at = |m: &[u8], off: usize| {
                let lp = get32(m, p + PAGE_HEADER + (off - 1) * ITEM_ID) as usize & 0x7fff;
                get32(m, p + lp + 8)
            };
            // Leaves: the first item with key >= the key sought; inner
            // pages: the last with key <= it (the first data item of an
            // inner page is minus infinity and never compared).
            let n = nitems + 1 - first;
            let (mut low, mut high) = (if lv == 0 { 0 } else { 1 }, n);
            while low < high {
                let mid = low + (high - low) / 2;
                let k = key_at(m, first + mid);
                let past = if lv == 0 { k >= key } else { k > key };
                if past {
                    high = mid;
                } else {
                    low = mid + 1;
                }
            }
            let j = if lv == 0 { low } else { low - 1 };
            if j >= n {
                return Err(format!("aid {aid}: not found on leaf block {block}"));
            }
            let lp = get32(m, p + PAGE_HEADER + (first + j - 1) * ITEM_ID) as usize & 0x7fff;
            let t = p + lp;
            let (target, toff) = (get32(m, t) as u64, get16(m, t + 4) as usize);
            self.unpin(m, buf);
            if lv > 0 {
                block = target;
                continue;
            }
            // The heap fetch.
            let hbuf = self.pin(m, target)?;
            let hp = self.blocks + hbuf * BLCKSZ;
            let lp = get32(m, hp + PAGE_HEADER + (toff - 1) * ITEM_ID) as usize & 0x7fff;
            let tuple = hp + lp;
            let visible = get32(m, tuple) == 1;
            let found = get32(m, tuple + 24) as u64;
            let balance = get32(m, tuple + 32);
            self.unpin(m, hbuf);
            if !visible || found != aid {
                return Err(format!("aid {aid}: the index led to row {found} (heap block {target}, item {toff})"));
            }
            return Ok(balance);
        }
        Err(format!("aid {aid}: the tree has no levels"))
    }

    /// The first data item (1-based) of index block `block` on level `lv`:
    /// 2 after a high key, 1 on the rightmost page of a level.
    fn first_data_item(&self, lv: usize, block: u64) -> usize {
        let l = &self.levels[lv];
        if block + 1 == l.first_block + l.pages {
            1
        } else {
            2
        }
    }
}

pub struct Index {
    pub scale: u64,
    pub transactions: u64,
}

impl Index {
    pub fn new(scale: u64, transactions: u64) -> Result<Index, String> {
        if !(1..=10_000).contains(&scale) {
            return Err(format!("--scale {scale} is out of range (1 to 10000)"));
        }
        if !(1..=10_000_000_000).contains(&transactions) {
            return Err(format!("--transactions {transactions} is out of range (1 to 10000000000)"));
        }
        Ok(Index { scale, transactions })
    }
}

impl Native for Index {
    fn name(&self) -> String {
        format!("index(scale {}, 1 client)", self.scale)
    }

    fn bytes(&self) -> u64 {
        Db::new(self.scale).segment
    }

    fn run(&self, mem: &mut Region) -> Result<Outcome, String> {
        let db = Db::new(self.scale);
        let m = mem.bytes();
        let m = m.get_mut(..db.segment as usize).ok_or("the region is smaller than the shared buffers")?;
        db.load(m);
        let root = get32(m, db.blocks + PAGE_HEADER) as u64;
        let height = get32(m, db.blocks + PAGE_HEADER + 4) as usize;
        let mut rng = Rng::new(0xB7EE);
        let mut sum = 0u64;
        let mut timer = Timer::default();
        timer.start();
        for _ in 0..self.transactions {
            let aid = 1 + rng.below(db.rows);
            sum += db.lookup(m, root, height, aid)? as u64;
        }
        let secs = timer.stop();
        std::hint::black_box(sum);
        let total = self.transactions;
        let tps = total as f64 / secs;
        let mut r = String::new();
        let _ = writeln!(r, "transaction type: <builtin: select only>");
        let _ = writeln!(r, "scaling factor: {}", self.scale);
        let _ = writeln!(r, "query mode: simple");
        let _ = writeln!(r, "number of clients: 1");
        let _ = writeln!(r, "number of threads: 1");
        let _ = writeln!(r, "number of transactions per client: {total}");
        let _ = writeln!(r, "number of transactions actually processed: {total}/{total}");
        let _ = writeln!(r, "number of failed transactions: 0 (0.000%)");
        let _ = writeln!(r, "latency average = {:.6} ms", secs / total as f64 * 1e3);
        let _ = writeln!(r, "tps = {tps:.6} (without initial connection time)");
        let _ = writeln!(
            r,
            "# native: {} rows in {} heap blocks; index height {}, {} leaf blocks; {} buffers of 8 KB in {:.1} MiB; every row found was the one asked for; only the lookups are timed",
            db.rows,
            db.heap_pages,
            db.levels.len(),
            db.levels[0].pages,
            db.nbuffers,
            db.segment as f64 / (1u64 << 20) as f64
        );
        Ok(Outcome { seconds: secs, cpu_seconds: timer.cpu, figures: vec![Figure::new("tps", tps, "transactions/s", true)], report: r })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shape_matches_the_simulated_index() {
        let db = Db::new(1);
        assert_eq!(splab_defs::index::per_page(90), 366);
        assert_eq!(db.levels[0].pages, 274);
        assert_eq!(db.levels.len(), 2);
        assert_eq!(db.heap_pages, 1640);
        assert_eq!(Db::new(100).levels.len(), 3);
    }

    #[test]
    fn every_key_is_found_in_a_small_database() {
        let db = Db::new(1);
        let mut m = vec![0u8; db.segment as usize];
        db.load(&mut m);
        let root = get32(&m, db.blocks + PAGE_HEADER) as u64;
        for aid in (1..=db.rows).step_by(7).chain([1, db.rows]) {
            assert_eq!(db.lookup(&mut m, root, 2, aid), Ok(0), "aid {aid}");
        }
        // Every pin was undone and every lock released.
        for buf in 0..db.nbuffers as usize {
            assert_eq!(get64(&m, db.descs + buf * DESC), 0);
        }
    }
}
