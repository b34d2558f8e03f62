//! What a trace holds (`splab trace info`): references by kind, the
//! footprint in 4 KB pages and 2 MB blocks, the address range, the layout
//! and the address-space events. One pass; memory grows with the
//! footprint (a 64-byte bitmap per 2 MB block touched), not the length.

use crate::{Event, Format, Kind, Region, Source, Step, TraceError};
use serde::Serialize;
use std::collections::HashMap;

/// Pages touched, as a bitmap per 2 MB block.
#[derive(Default)]
pub struct Footprint {
    blocks: HashMap<u64, [u64; 8]>,
    last: Option<(u64, [u64; 8])>,
}

impl Footprint {
    #[inline]
    pub fn touch(&mut self, addr: u64) {
        let (block, page) = (addr >> 21, (addr >> 12) & 511);
        match &mut self.last {
            Some((b, bits)) if *b == block => bits[(page >> 6) as usize] |= 1 << (page & 63),
            _ => {
                if let Some((b, bits)) = self.last.take() {
                    self.blocks.insert(b, bits);
                }
                let mut bits = self.blocks.remove(&block).unwrap_or([0; 8]);
                bits[(page >> 6) as usize] |= 1 << (page & 63);
                self.last = Some((block, bits));
            }
        }
    }

    fn all(&self) -> impl Iterator<Item = (&u64, &[u64; 8])> {
        self.blocks.iter().chain(self.last.iter().map(|(b, bits)| (b, bits)))
    }

    /// Distinct 4 KB pages touched.
    pub fn pages(&self) -> u64 {
        self.all().map(|(_, bits)| bits.iter().map(|w| w.count_ones() as u64).sum::<u64>()).sum()
    }

    /// 2 MB blocks with at least one page touched.
    pub fn blocks(&self) -> u64 {
        self.all().count() as u64
    }

    /// 2 MB blocks with every page touched: where a superpage can pay off.
    pub fn full_blocks(&self) -> u64 {
        self.all().filter(|(_, bits)| bits.iter().all(|&w| w == u64::MAX)).count() as u64
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct KindCounts {
    pub instr: u64,
    pub load: u64,
    pub store: u64,
    pub modify: u64,
    /// Blocks of the instruction stream entered (splabtrace's blocks).
    #[serde(skip_serializing_if = "is_zero")]
    pub blocks: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl KindCounts {
    #[inline]
    pub fn count(&mut self, k: Kind) {
        match k {
            Kind::Instr => self.instr += 1,
            Kind::Load => self.load += 1,
            Kind::Store => self.store += 1,
            Kind::Modify => self.modify += 1,
            Kind::Enter => self.blocks += 1,
            Kind::Exit | Kind::Skip => {}
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Info {
    pub format: Format,
    pub compression: crate::Compression,
    /// The count the header gives, if any.
    pub header_refs: Option<u64>,
    pub refs: u64,
    pub by_kind: KindCounts,
    /// Data references (loads, stores, modifies).
    pub data_pages_4k: u64,
    pub data_blocks_2m: u64,
    pub data_full_blocks_2m: u64,
    pub instr_pages_4k: u64,
    /// Lowest and highest data address, if there is data.
    pub data_range: Option<(u64, u64)>,
    /// The layout the trace starts with.
    pub layout: Vec<Region>,
    pub maps: u64,
    pub unmaps: u64,
    /// Block tables of the instruction stream (splabtrace's).
    #[serde(skip_serializing_if = "is_zero")]
    pub block_tables: u64,
    /// The first mapped regions of the events (up to 64).
    pub mapped: Vec<Region>,
}

/// Reads the whole trace; `progress` gets the references read so far.
pub fn scan(src: &mut crate::Opened, progress: &mut dyn FnMut(u64)) -> Result<Info, TraceError> {
    let mut info = Info {
        format: src.format(),
        compression: src.compression,
        header_refs: src.ref_count(),
        refs: 0,
        by_kind: KindCounts::default(),
        data_pages_4k: 0,
        data_blocks_2m: 0,
        data_full_blocks_2m: 0,
        instr_pages_4k: 0,
        data_range: None,
        layout: src.layout().to_vec(),
        maps: 0,
        unmaps: 0,
        block_tables: 0,
        mapped: Vec::new(),
    };
    let (mut data, mut code) = (Footprint::default(), Footprint::default());
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    let mut refs = Vec::with_capacity(8192);
    loop {
        refs.clear();
        let step = src.read(&mut refs, 8192)?;
        let mut marks = 0;
        for r in &refs {
            info.by_kind.count(r.kind);
            if r.kind.is_mark() {
                marks += 1;
            } else if r.kind == Kind::Instr {
                code.touch(r.addr);
            } else {
                data.touch(r.addr);
                lo = lo.min(r.addr);
                hi = hi.max(r.addr);
            }
        }
        info.refs += (refs.len() - marks) as u64;
        progress(info.refs);
        match step {
            Step::Full => {}
            Step::End => break,
            Step::Event(Event::Map(r)) => {
                info.maps += 1;
                if info.mapped.len() < 64 {
                    info.mapped.push(r);
                }
            }
            Step::Event(Event::Unmap { .. }) => info.unmaps += 1,
            Step::Event(Event::Block(_)) => info.block_tables += 1,
        }
    }
    info.data_pages_4k = data.pages();
    info.data_blocks_2m = data.blocks();
    info.data_full_blocks_2m = data.full_blocks();
    info.instr_pages_4k = code.pages();
    info.data_range = (lo <= hi).then_some((lo, hi));
    Ok(info)
}
