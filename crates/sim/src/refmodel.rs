//! The reference model `splab check` compares the system with: process
//! memory as plain maps from pages to values, with POSIX semantics and no
//! page tables, reservations or caches. Private pages are shared between
//! forked processes through reference counts and copied on write; shared
//! mappings and files are one store each.
//!
//! Two things POSIX leaves open once pages can be reclaimed, and the model
//! accepts either outcome for, word by word:
//! - after MADV_FREE, a private anonymous page may be discarded by the page
//!   daemon until it is written again: each word reads as its old value or
//!   as zero (once zero has been seen, or the page has been written since,
//!   the word is settled);
//! - the part of a file's last page beyond the end of the file is not
//!   written back: once the page has been reclaimed it reads as zero.

use splab_vm::object::file_word;
use splab_vm::prot;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// The model's unit of memory: 4 KB. A system page of 8 KB (Alpha) is two
/// units, which the model copies together (see `RefProc::units`).
pub const PAGE: u64 = 4096;
pub type Page = [u64; 512];

/// A private page as the model knows it: its words, and which of them may
/// also read as zero ("open"). `frozen`: the page has been written since it
/// was last advised free, so the system can no longer discard it and an
/// open word is settled by the first read.
#[derive(Clone)]
pub struct PrivPage {
    pub data: Page,
    pub open: [u64; 8],
    pub frozen: bool,
}

impl PrivPage {
    fn known(data: Page) -> PrivPage {
        PrivPage { data, open: [0; 8], frozen: true }
    }
    fn is_open(&self, w: usize) -> bool {
        self.open[w / 64] >> (w % 64) & 1 != 0
    }
    fn settle(&mut self, w: usize, v: u64) {
        self.data[w] = v;
        self.open[w / 64] &= !(1 << (w % 64));
    }
    fn expect(&self, w: usize) -> Expect {
        if self.is_open(w) && self.data[w] != 0 {
            Expect::ValueOrZero(self.data[w])
        } else {
            Expect::Value(self.data[w])
        }
    }
    /// Learns from a read of word `w` that returned `got` (one of the
    /// accepted values).
    fn observe(&mut self, w: usize, got: u64) {
        if !self.is_open(w) {
            return;
        }
        if self.frozen || got == 0 {
            // A frozen page is not discarded any more; a zero means the
            // old value is gone for good.
            self.settle(w, got);
        }
    }
}

/// The contents of a shared object or a file.
#[derive(Default)]
pub struct Store {
    pub pages: HashMap<u64, Box<Page>>,
    /// For a file: its id and size in bytes (initial contents come from
    /// `file_word`, zero beyond the end).
    pub file: Option<(u32, u64)>,
}

impl Store {
    fn initial(&self, pg: u64, w: usize) -> u64 {
        match self.file {
            Some((f, size)) => {
                let off = pg * PAGE + w as u64 * 8;
                if off + 8 <= size {
                    file_word(f, off)
                } else {
                    0
                }
            }
            None => 0,
        }
    }
    /// Whether word `w` of page `pg` lies beyond the end of the file.
    fn beyond_eof(&self, pg: u64, w: usize) -> bool {
        self.file.is_some_and(|(_, size)| pg * PAGE + w as u64 * 8 + 8 > size)
    }
    pub fn read(&self, pg: u64, w: usize) -> u64 {
        match self.pages.get(&pg) {
            Some(p) => p[w],
            None => self.initial(pg, w),
        }
    }
    /// What a read must return: the value, or for data beyond the end of a
    /// file, the value or zero.
    pub fn expect(&self, pg: u64, w: usize) -> Expect {
        let v = self.read(pg, w);
        if v != 0 && self.beyond_eof(pg, w) {
            Expect::ValueOrZero(v)
        } else {
            Expect::Value(v)
        }
    }
    /// Learns from a read: data beyond the end of a file that read as zero
    /// has been dropped by a page-out and page-in.
    pub fn observe(&mut self, pg: u64, w: usize, got: u64) {
        if got == 0 && self.beyond_eof(pg, w) && self.read(pg, w) != 0 {
            self.write(pg, w, 0);
        }
    }
    pub fn page(&self, pg: u64) -> Page {
        match self.pages.get(&pg) {
            Some(p) => **p,
            None => std::array::from_fn(|w| self.initial(pg, w)),
        }
    }
    /// A private copy of page `pg`, its words beyond the end of the file
    /// open (the page copied may have been read back without them).
    fn private_copy(&self, pg: u64) -> PrivPage {
        let mut p = PrivPage::known(self.page(pg));
        for w in 0..512 {
            if self.beyond_eof(pg, w) && p.data[w] != 0 {
                p.open[w / 64] |= 1 << (w % 64);
            }
        }
        p
    }
    pub fn write(&mut self, pg: u64, w: usize, v: u64) {
        if !self.pages.contains_key(&pg) {
            let p = self.page(pg);
            self.pages.insert(pg, Box::new(p));
        }
        self.pages.get_mut(&pg).unwrap()[w] = v;
    }
}

#[derive(Clone)]
pub enum Kind {
    PrivAnon,
    /// Private mapping of a file at page offset `off`.
    PrivFile { store: Rc<RefCell<Store>>, off: u64 },
    /// Shared anonymous memory or a shared file mapping, at page offset `off`.
    Shared { store: Rc<RefCell<Store>>, off: u64 },
}

#[derive(Clone)]
pub struct Region {
    pub end: u64,
    pub prot: u8,
    pub kind: Kind,
}

/// What the model expects of an access.
#[derive(Debug, PartialEq, Eq)]
pub enum Expect {
    /// The value read (or written).
    Value(u64),
    /// Either this value or zero (see the module comment).
    ValueOrZero(u64),
    /// A private anonymous page never written: must read zero.
    FreshZero,
    Unmapped,
    Protection,
}

impl Expect {
    /// Whether the system's value `got` is what the model allows.
    pub fn accepts(&self, got: u64) -> bool {
        match *self {
            Expect::Value(v) => got == v,
            Expect::ValueOrZero(v) => got == v || got == 0,
            Expect::FreshZero => got == 0,
            Expect::Unmapped | Expect::Protection => false,
        }
    }
}

#[derive(Clone, Default)]
pub struct RefProc {
    pub regions: BTreeMap<u64, Region>,
    pub private: HashMap<u64, Rc<PrivPage>>,
    /// Units in one of the system's pages, less one (0 for 4 KB pages): a
    /// private copy of a file page takes every unit of the system page at
    /// once, as the system's copy-on-write copies the whole page.
    pub unit_mask: u64,
}

impl RefProc {
    /// A process of a system whose pages are `page` bytes.
    pub fn new(page: u64) -> RefProc {
        RefProc { unit_mask: page / PAGE - 1, ..Default::default() }
    }

    pub fn region(&self, va: u64) -> Option<(u64, &Region)> {
        let (&s, r) = self.regions.range(..=va).next_back()?;
        (va < r.end).then_some((s, r))
    }

    /// Splits the region containing `va` so that one starts at `va`.
    fn clip(&mut self, va: u64) {
        let Some((s, r)) = self.region(va) else { return };
        if s == va {
            return;
        }
        let mut tail = r.clone();
        let d = (va - s) / PAGE;
        tail.kind = match tail.kind {
            Kind::PrivAnon => Kind::PrivAnon,
            Kind::PrivFile { store, off } => Kind::PrivFile { store, off: off + d },
            Kind::Shared { store, off } => Kind::Shared { store, off: off + d },
        };
        self.regions.get_mut(&s).unwrap().end = va;
        self.regions.insert(va, tail);
    }

    pub fn unmap(&mut self, start: u64, end: u64) {
        self.clip(start);
        self.clip(end);
        let keys: Vec<u64> = self.regions.range(start..end).map(|(&k, _)| k).collect();
        for k in keys {
            self.regions.remove(&k);
        }
        self.private.retain(|&vpn, _| vpn * PAGE < start || vpn * PAGE >= end);
    }

    pub fn map(&mut self, start: u64, len: u64, p: u8, kind: Kind) {
        self.unmap(start, start + len);
        self.regions.insert(start, Region { end: start + len, prot: p, kind });
    }

    pub fn covered(&self, start: u64, end: u64) -> bool {
        let mut at = start;
        for (&s, r) in self.regions.range(..end) {
            if r.end <= at {
                continue;
            }
            if s > at {
                return false;
            }
            at = r.end;
        }
        at >= end
    }

    pub fn protect(&mut self, start: u64, end: u64, p: u8) {
        self.clip(start);
        self.clip(end);
        for (_, r) in self.regions.range_mut(start..end) {
            r.prot = p;
        }
    }

    /// MADV_FREE over [start, end): every word of the private anonymous
    /// pages there may read as zero until the page is written again.
    pub fn madv_free(&mut self, start: u64, end: u64) {
        let anon: Vec<(u64, u64)> = self
            .regions
            .range(..end)
            .filter(|(_, r)| r.end > start && matches!(r.kind, Kind::PrivAnon))
            .map(|(&s, r)| (s.max(start), r.end.min(end)))
            .collect();
        for (s, e) in anon {
            for vpn in s / PAGE..e / PAGE {
                if let Some(p) = self.private.get_mut(&vpn) {
                    let p = Rc::make_mut(p);
                    p.open = [u64::MAX; 8];
                    p.frozen = false;
                }
            }
        }
    }

    pub fn read(&self, va: u64) -> Expect {
        let Some((s, r)) = self.region(va) else { return Expect::Unmapped };
        if r.prot & prot::READ == 0 {
            return Expect::Protection;
        }
        let vpn = va / PAGE;
        let w = ((va % PAGE) / 8) as usize;
        let pg = (va - s) / PAGE;
        match &r.kind {
            Kind::PrivAnon => match self.private.get(&vpn) {
                Some(p) => p.expect(w),
                None => Expect::FreshZero,
            },
            Kind::PrivFile { store, off } => match self.private.get(&vpn) {
                Some(p) => p.expect(w),
                None => store.borrow().expect(off + pg, w),
            },
            Kind::Shared { store, off } => store.borrow().expect(off + pg, w),
        }
    }

    /// Learns from a read of `va` that returned `got`, which `read`
    /// accepted: settles words that could have read two ways.
    pub fn observe(&mut self, va: u64, got: u64) {
        let Some((s, r)) = self.region(va) else { return };
        let vpn = va / PAGE;
        let w = ((va % PAGE) / 8) as usize;
        let pg = (va - s) / PAGE;
        match r.kind.clone() {
            Kind::PrivAnon | Kind::PrivFile { .. } if self.private.contains_key(&vpn) => {
                let p = self.private.get_mut(&vpn).unwrap();
                if p.is_open(w) {
                    Rc::make_mut(p).observe(w, got);
                }
            }
            Kind::PrivFile { store, off } | Kind::Shared { store, off } => store.borrow_mut().observe(off + pg, w, got),
            Kind::PrivAnon => {}
        }
    }

    /// The value word `va` would read as before a write, for undoing a
    /// write the system did not make: Some(page, word, value) of a shared
    /// store.
    pub fn shared_word(&self, va: u64) -> Option<(Rc<RefCell<Store>>, u64, usize, u64)> {
        let (s, r) = self.region(va)?;
        match &r.kind {
            Kind::Shared { store, off } => {
                let pg = off + (va - s) / PAGE;
                let w = ((va % PAGE) / 8) as usize;
                let v = store.borrow().read(pg, w);
                Some((store.clone(), pg, w, v))
            }
            _ => None,
        }
    }

    /// Applies a write; returns what the system must do.
    pub fn write(&mut self, va: u64, v: u64) -> Expect {
        let Some((s, r)) = self.region(va) else { return Expect::Unmapped };
        if r.prot & prot::WRITE == 0 {
            return Expect::Protection;
        }
        let vpn = va / PAGE;
        let w = ((va % PAGE) / 8) as usize;
        let pg = (va - s) / PAGE;
        match r.kind.clone() {
            Kind::PrivAnon => {
                let p = self.private.entry(vpn).or_insert_with(|| Rc::new(PrivPage::known([0; 512])));
                let p = Rc::make_mut(p);
                p.settle(w, v);
                p.frozen = true;
            }
            Kind::PrivFile { store, off } => {
                // The other units of the system's page are copied now too.
                for u in (vpn & !self.unit_mask)..=(vpn | self.unit_mask) {
                    if u != vpn && !self.private.contains_key(&u) {
                        let upg = (off + pg + u).wrapping_sub(vpn);
                        self.private.insert(u, Rc::new(store.borrow().private_copy(upg)));
                    }
                }
                let p = self.private.entry(vpn).or_insert_with(|| Rc::new(store.borrow().private_copy(off + pg)));
                let p = Rc::make_mut(p);
                p.settle(w, v);
                p.frozen = true;
            }
            Kind::Shared { store, off } => store.borrow_mut().write(off + pg, w, v),
        }
        Expect::Value(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_words_read_old_or_zero_until_settled() {
        let mut p = RefProc::default();
        p.map(0x10000, 2 * PAGE, prot::RW, Kind::PrivAnon);
        p.write(0x10008, 7);
        p.write(0x10010, 9);
        p.madv_free(0x10000, 0x11000);
        assert_eq!(p.read(0x10008), Expect::ValueOrZero(7));
        p.observe(0x10008, 7);
        assert_eq!(p.read(0x10008), Expect::ValueOrZero(7), "not discarded yet, but may still be");
        p.observe(0x10008, 0);
        assert_eq!(p.read(0x10008), Expect::Value(0), "a zero is final");
        // A write freezes the page: the next read of an open word settles it.
        p.write(0x10018, 5);
        assert_eq!(p.read(0x10010), Expect::ValueOrZero(9));
        p.observe(0x10010, 9);
        assert_eq!(p.read(0x10010), Expect::Value(9));
        assert!(!Expect::ValueOrZero(3).accepts(4) && Expect::ValueOrZero(3).accepts(0));
    }

    #[test]
    fn file_data_beyond_the_end_may_vanish() {
        let store = Rc::new(RefCell::new(Store { file: Some((1, 100)), ..Default::default() }));
        let mut p = RefProc::default();
        p.map(0x20000, PAGE, prot::RW, Kind::Shared { store: store.clone(), off: 0 });
        assert_eq!(p.read(0x20000), Expect::Value(file_word(1, 0)));
        p.write(0x20000 + 800, 3);
        assert_eq!(p.read(0x20000 + 800), Expect::ValueOrZero(3));
        p.observe(0x20000 + 800, 0);
        assert_eq!(p.read(0x20000 + 800), Expect::Value(0));
    }
}
