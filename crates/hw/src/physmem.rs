//! Modelled physical memory: the contents of frames.
//!
//! Page-table pages are always stored, because the hardware walker reads the
//! descriptors from here. Data frames are stored only when content tracking
//! is on (`splab check`, `--track-contents`): a 16 GiB footprint must be
//! simulable in a fraction of that much host memory, and timing does not
//! depend on values.
//!
//! A frame is one base page of the machine's architecture: 4 KB on every
//! architecture but the Alpha, whose pages are 8 KB. The size is a property
//! of each `PhysMem` (several machines of different architectures may exist
//! in one process), and `Pfn`s given to it count frames of that size.
//!
//! Storage is sparse: a directory with one entry per 512 frames, each
//! pointing at a lazily allocated table of 512 slot numbers, each naming a
//! frame-sized buffer in a slab. A frame with no buffer reads as zero.
//!
//! Invariant: a slot number is referenced by at most one frame; freed buffers
//! are kept on `free` for reuse and are zero-filled before reuse.

use crate::addr::{Pfn, PhysAddr, PAGE_SHIFT_4K};

/// Slot numbers per directory table.
const WORDS: usize = 512;
const NONE: u32 = u32::MAX;

pub struct PhysMem {
    npages: u64,
    /// log2 of the frame size (the architecture's base page).
    page_shift: u32,
    /// 64-bit words in a frame, minus one: masks a word's index.
    word_mask: usize,
    dir: Vec<Option<Box<[u32; WORDS]>>>,
    slab: Vec<Box<[u64]>>,
    free: Vec<u32>,
    /// Whether data (non page-table) stores are kept.
    track_data: bool,
    /// Per frame, a bit each: the program has accessed it, and written it,
    /// since it was last initialised (zeroed, copied into or read in).
    /// What the model knows of memory a program really used, for bloat
    /// (resident but never touched) and for policies that look for
    /// zero-filled pages (a page never written since its zero fill).
    touched: Vec<u64>,
    written: Vec<u64>,
    touched_frames: u64,
}

impl PhysMem {
    /// `npages` frames of 4 KB.
    pub fn new(npages: u64, track_data: bool) -> PhysMem {
        PhysMem::with_page_shift(npages, PAGE_SHIFT_4K, track_data)
    }

    /// `npages` frames of 2^page_shift bytes (12 or 13).
    pub fn with_page_shift(npages: u64, page_shift: u32, track_data: bool) -> PhysMem {
        assert!((12..=16).contains(&page_shift), "page shift {page_shift}");
        let dirs = npages.div_ceil(WORDS as u64) as usize;
        let mut dir = Vec::with_capacity(dirs);
        dir.resize_with(dirs, || None);
        let word_mask = (1usize << (page_shift - 3)) - 1;
        let words = npages.div_ceil(64) as usize;
        PhysMem {
            npages,
            page_shift,
            word_mask,
            dir,
            slab: Vec::new(),
            free: Vec::new(),
            track_data,
            touched: vec![0; words],
            written: vec![0; words],
            touched_frames: 0,
        }
    }

    /// Notes a program's access to `pa` (a store when `write`).
    #[inline(always)]
    pub fn note_access(&mut self, pa: u64, write: bool) {
        let f = (pa >> self.page_shift) as usize;
        let (w, bit) = (f / 64, 1u64 << (f % 64));
        if self.touched[w] & bit == 0 {
            self.touched[w] |= bit;
            self.touched_frames += 1;
        }
        // Without a branch: loads and stores come mixed.
        self.written[w] |= bit & 0u64.wrapping_sub(u64::from(write));
    }

    /// Notes a program's store to `pa` whose frame is already touched.
    #[inline(always)]
    pub fn note_write(&mut self, pa: u64) {
        let f = (pa >> self.page_shift) as usize;
        self.written[f / 64] |= 1 << (f % 64);
    }

    /// Forgets what the program did to frame `m`: it was freed, or its
    /// contents were replaced.
    pub fn forget(&mut self, m: Pfn) {
        let (w, bit) = (m.idx() / 64, 1u64 << (m.idx() % 64));
        if self.touched[w] & bit != 0 {
            self.touched_frames -= 1;
        }
        self.touched[w] &= !bit;
        self.written[w] &= !bit;
    }

    /// Frames the program accessed since they were initialised.
    pub fn touched_frames(&self) -> u64 {
        self.touched_frames
    }

    /// Whether the program accessed frame `m` since it was initialised.
    pub fn touched(&self, m: Pfn) -> bool {
        self.touched[m.idx() / 64] & (1 << (m.idx() % 64)) != 0
    }

    /// Whether the program wrote frame `m` since it was initialised (a
    /// zero-filled frame never written still reads as all zeros).
    pub fn written(&self, m: Pfn) -> bool {
        self.written[m.idx() / 64] & (1 << (m.idx() % 64)) != 0
    }

    pub fn npages(&self) -> u64 {
        self.npages
    }

    /// log2 of the frame size.
    #[inline]
    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// The frame holding `pa`.
    #[inline]
    pub fn pfn(&self, pa: PhysAddr) -> Pfn {
        Pfn((pa.0 >> self.page_shift) as u32)
    }

    /// The first byte of frame `m`.
    #[inline]
    pub fn addr(&self, m: Pfn) -> PhysAddr {
        PhysAddr((m.0 as u64) << self.page_shift)
    }

    pub fn tracks_data(&self) -> bool {
        self.track_data
    }

    #[inline]
    fn slot(&self, pfn: u32) -> u32 {
        match &self.dir[(pfn as usize) / WORDS] {
            Some(t) => t[(pfn as usize) % WORDS],
            None => NONE,
        }
    }

    fn slot_or_alloc(&mut self, pfn: u32) -> u32 {
        let s = self.slot(pfn);
        if s != NONE {
            return s;
        }
        let s = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize].fill(0);
                s
            }
            None => {
                self.slab.push(vec![0; self.word_mask + 1].into_boxed_slice());
                (self.slab.len() - 1) as u32
            }
        };
        let t = self.dir[(pfn as usize) / WORDS].get_or_insert_with(|| Box::new([NONE; WORDS]));
        t[(pfn as usize) % WORDS] = s;
        s
    }

    /// Reads the 64-bit word at `pa` (8-byte aligned); unstored frames read 0.
    #[inline]
    pub fn read_u64(&self, pa: PhysAddr) -> u64 {
        debug_assert!(pa.0 & 7 == 0, "unaligned read {pa:?}");
        let s = self.slot((pa.0 >> self.page_shift) as u32);
        if s == NONE {
            0
        } else {
            self.slab[s as usize][(pa.0 >> 3) as usize & self.word_mask]
        }
    }

    /// Reads the 32-bit word at `pa` (4-byte aligned), little-endian.
    #[inline]
    pub fn read_u32(&self, pa: PhysAddr) -> u32 {
        let w = self.read_u64(PhysAddr(pa.0 & !7));
        (w >> ((pa.0 & 4) * 8)) as u32
    }

    /// Writes a word that must be kept whatever the tracking mode: page-table
    /// descriptors and other structures the hardware reads.
    #[inline]
    pub fn write_u64(&mut self, pa: PhysAddr, v: u64) {
        debug_assert!(pa.0 & 7 == 0, "unaligned write {pa:?}");
        let pfn = (pa.0 >> self.page_shift) as u32;
        if v == 0 && self.slot(pfn) == NONE {
            return;
        }
        let s = self.slot_or_alloc(pfn);
        self.slab[s as usize][(pa.0 >> 3) as usize & self.word_mask] = v;
    }

    /// Writes a 32-bit word (little-endian within its 64-bit word).
    pub fn write_u32(&mut self, pa: PhysAddr, v: u32) {
        let a = PhysAddr(pa.0 & !7);
        let shift = (pa.0 & 4) * 8;
        let w = self.read_u64(a);
        let w = (w & !(0xffff_ffffu64 << shift)) | ((v as u64) << shift);
        self.write_u64(a, w);
    }

    /// A program's store: kept only when data tracking is on.
    #[inline]
    pub fn store_data(&mut self, pa: PhysAddr, v: u64) {
        if self.track_data {
            self.write_u64(PhysAddr(pa.0 & !7), v);
        }
    }

    /// Fills a frame with zeros (pmap_zero_page): its buffer is released.
    pub fn zero_frame(&mut self, pfn: Pfn) {
        self.forget(pfn);
        if let Some(t) = &mut self.dir[pfn.idx() / WORDS] {
            let s = t[pfn.idx() % WORDS];
            if s != NONE {
                t[pfn.idx() % WORDS] = NONE;
                self.free.push(s);
            }
        }
    }

    /// Copies one frame to another (pmap_copy_page).
    pub fn copy_frame(&mut self, dst: Pfn, src: Pfn) {
        self.forget(dst);
        let s = self.slot(src.0);
        if s == NONE {
            self.zero_frame(dst);
            return;
        }
        let d = self.slot_or_alloc(dst.0);
        let (s, d) = (s as usize, d as usize);
        let (src, dst) = if s < d {
            let (a, b) = self.slab.split_at_mut(d);
            (&a[s], &mut b[0])
        } else {
            let (a, b) = self.slab.split_at_mut(s);
            (&b[0], &mut a[d])
        };
        dst.copy_from_slice(src);
    }

    /// The frame's contents as stored, or None when it reads as all zeros
    /// (nothing stored): what a page-out writes.
    pub fn frame(&self, pfn: Pfn) -> Option<&[u64]> {
        let s = self.slot(pfn.0);
        (s != NONE).then(|| &*self.slab[s as usize])
    }

    /// Replaces a frame's contents (a page-in's read), whatever the
    /// tracking mode.
    pub fn set_frame(&mut self, pfn: Pfn, data: &[u64]) {
        self.forget(pfn);
        let d = self.slot_or_alloc(pfn.0);
        self.slab[d as usize].copy_from_slice(data);
    }

    /// Whether any word of the frame is non-zero.
    pub fn frame_is_zero(&self, pfn: Pfn) -> bool {
        let s = self.slot(pfn.0);
        s == NONE || self.slab[s as usize].iter().all(|&w| w == 0)
    }

    /// Host bytes held for frame contents.
    pub fn host_bytes(&self) -> u64 {
        let tables = self.dir.iter().filter(|d| d.is_some()).count() as u64 * (WORDS as u64 * 4);
        let bitmaps = (self.touched.len() + self.written.len()) as u64 * 8;
        self.dir.len() as u64 * 8 + tables + ((self.slab.len() as u64) << self.page_shift) + bitmaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unstored_reads_zero_and_writes_stick() {
        let mut m = PhysMem::new(1024, false);
        assert_eq!(m.read_u64(PhysAddr(0x5008)), 0);
        m.write_u64(PhysAddr(0x5008), 42);
        assert_eq!(m.read_u64(PhysAddr(0x5008)), 42);
        m.store_data(PhysAddr(0x6000), 7);
        assert_eq!(m.read_u64(PhysAddr(0x6000)), 0, "data not tracked");
        m.zero_frame(Pfn(5));
        assert_eq!(m.read_u64(PhysAddr(0x5008)), 0);
        m.write_u64(PhysAddr(0x7010), 9);
        assert_eq!(m.read_u64(PhysAddr(0x7010)), 9, "reused buffer is clean");
        assert_eq!(m.read_u64(PhysAddr(0x7008)), 0);
    }

    #[test]
    fn u32_access_and_copy() {
        let mut m = PhysMem::new(1024, true);
        m.write_u32(PhysAddr(0x1004), 0xdead_beef);
        m.write_u32(PhysAddr(0x1000), 0x1234);
        assert_eq!(m.read_u64(PhysAddr(0x1000)), 0xdead_beef_0000_1234);
        assert_eq!(m.read_u32(PhysAddr(0x1004)), 0xdead_beef);
        m.copy_frame(Pfn(3), Pfn(1));
        assert_eq!(m.read_u64(PhysAddr(0x3000)), 0xdead_beef_0000_1234);
        assert!(!m.frame_is_zero(Pfn(3)));
        m.copy_frame(Pfn(3), Pfn(2));
        assert!(m.frame_is_zero(Pfn(3)));
        assert!(m.frame(Pfn(3)).is_none());
        let saved = m.frame(Pfn(1)).unwrap().to_vec();
        m.set_frame(Pfn(9), &saved);
        assert_eq!(m.read_u32(PhysAddr(0x9004)), 0xdead_beef);
    }

    /// With 8 KB frames (Alpha), a frame covers two 4 KB ranges.
    #[test]
    fn eight_kb_frames() {
        let mut m = PhysMem::with_page_shift(64, 13, true);
        m.write_u64(PhysAddr(0x2ff8), 5);
        assert_eq!((m.pfn(PhysAddr(0x2ff8)), m.addr(Pfn(1))), (Pfn(1), PhysAddr(0x2000)));
        assert_eq!(m.frame(Pfn(1)).unwrap().len(), 1024);
        m.copy_frame(Pfn(4), Pfn(1));
        assert_eq!(m.read_u64(PhysAddr(0x8ff8)), 5);
        m.zero_frame(Pfn(1));
        assert!(m.frame_is_zero(Pfn(1)) && !m.frame_is_zero(Pfn(4)));
        assert_eq!(m.host_bytes(), 8 + 512 * 4 + 2 * 8192 + 16);
    }
}
