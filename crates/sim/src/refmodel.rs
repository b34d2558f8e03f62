//! The reference model `splab check` compares the system with: process
//! memory as plain maps from pages to values, with POSIX semantics and no
//! page tables, reservations or caches. Private pages are shared between
//! forked processes through reference counts and copied on write; shared
//! mappings and files are one store each.

use splab_vm::object::file_word;
use splab_vm::prot;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

pub const PAGE: u64 = 4096;
pub type Page = [u64; 512];

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
    pub fn read(&self, pg: u64, w: usize) -> u64 {
        match self.pages.get(&pg) {
            Some(p) => p[w],
            None => self.initial(pg, w),
        }
    }
    pub fn page(&self, pg: u64) -> Page {
        match self.pages.get(&pg) {
            Some(p) => **p,
            None => std::array::from_fn(|w| self.initial(pg, w)),
        }
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
    /// A private anonymous page never written: must read zero.
    FreshZero,
    Unmapped,
    Protection,
}

#[derive(Clone, Default)]
pub struct RefProc {
    pub regions: BTreeMap<u64, Region>,
    pub private: HashMap<u64, Rc<Page>>,
}

impl RefProc {
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
                Some(p) => Expect::Value(p[w]),
                None => Expect::FreshZero,
            },
            Kind::PrivFile { store, off } => match self.private.get(&vpn) {
                Some(p) => Expect::Value(p[w]),
                None => Expect::Value(store.borrow().read(off + pg, w)),
            },
            Kind::Shared { store, off } => Expect::Value(store.borrow().read(off + pg, w)),
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
                let p = self.private.entry(vpn).or_insert_with(|| Rc::new([0; 512]));
                Rc::make_mut(p)[w] = v;
            }
            Kind::PrivFile { store, off } => {
                let p = self.private.entry(vpn).or_insert_with(|| Rc::new(store.borrow().page(off + pg)));
                Rc::make_mut(p)[w] = v;
            }
            Kind::Shared { store, off } => store.borrow_mut().write(off + pg, w, v),
        }
        Expect::Value(v)
    }
}
