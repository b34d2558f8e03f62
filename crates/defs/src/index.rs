//! Where a pgbench database's shared memory puts everything, as
//! PostgreSQL lays it out: the native `index` builds it for real and the
//! simulated one touches the same offsets.

pub const BLCKSZ: usize = 8192;
pub const PAGE_HEADER: usize = 24;
pub const PD_LOWER: usize = 12;
pub const ITEM_ID: usize = 4;
pub const BT_SPECIAL: usize = 16;
pub const INDEX_TUPLE: usize = 16;
pub const HEAP_TUPLE: usize = 128;
pub const HEAP_PER_PAGE: u64 = 61;
pub const ROWS_PER_SCALE: u64 = 100_000;
pub const PARTITIONS: u64 = 128;
pub const DESC: usize = 64;
pub const HASH_ENTRY: usize = 32;

/// Index entries per page at a fill factor (percent).
pub fn per_page(fill: u64) -> u64 {
    (BLCKSZ - PAGE_HEADER - BT_SPECIAL) as u64 * fill / 100 / (INDEX_TUPLE + ITEM_ID) as u64
}

/// One level of the B-tree; level 0 is the leaves.
#[derive(Clone, Debug)]
pub struct Level {
    pub first_block: u64,
    pub pages: u64,
    /// Data items per full page.
    pub per: u64,
    /// Keys under one page of this level.
    pub span: u64,
}

/// Where everything of a pgbench database of `scale` is, as byte offsets
/// into its shared segment: the index levels (block 0 is the metapage, the
/// leaves follow, then each level above, the root last), the heap, the
/// buffer-mapping locks, descriptors, hash buckets and entries, and the
/// buffer blocks. The simulated index (`splab_workloads::index`) lays its
/// segment out from this same computation, so that native and simulated
/// runs touch the same offsets.
#[derive(Clone, Debug)]
pub struct Layout {
    pub rows: u64,
    pub levels: Vec<Level>,
    pub heap_first_block: u64,
    pub heap_pages: u64,
    pub nbuffers: u64,
    pub nbuckets: u64,
    pub locks: u64,
    pub descs: u64,
    pub buckets: u64,
    pub entries: u64,
    pub blocks: u64,
    pub segment: u64,
}

impl Layout {
    pub fn new(scale: u64) -> Layout {
        let rows = scale * ROWS_PER_SCALE;
        let (leaf, inner) = (per_page(90), per_page(70));
        let mut levels = Vec::new();
        let mut block = 1;
        let mut pages = rows.div_ceil(leaf);
        let (mut per, mut span) = (leaf, leaf);
        loop {
            levels.push(Level { first_block: block, pages, per, span });
            block += pages;
            if pages == 1 {
                break;
            }
            pages = pages.div_ceil(inner);
            per = inner;
            span *= inner;
        }
        let heap_pages = rows.div_ceil(HEAP_PER_PAGE);
        let nbuffers = block + heap_pages;
        let nbuckets = nbuffers.next_power_of_two();
        let locks = 0;
        let descs = locks + PARTITIONS * 64;
        let buckets = descs + nbuffers * DESC as u64;
        let entries = buckets + nbuckets * 8;
        let blocks = (entries + nbuffers * HASH_ENTRY as u64).div_ceil(4096) * 4096;
        let segment = blocks + nbuffers * BLCKSZ as u64;
        Layout { rows, levels, heap_first_block: block, heap_pages, nbuffers, nbuckets, locks, descs, buckets, entries, blocks, segment }
    }

    /// The buffer-mapping hash of a block (relation 0 is the index, 1 the
    /// heap; every block of both sits in the buffer of the same number).
    pub fn hash(block: u64) -> u64 {
        let mut z = block.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z ^= z >> 31;
        z
    }
}
