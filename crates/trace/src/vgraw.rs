//! The stream of the splabtrace valgrind tool (tools/vgtrace/vt_main.c),
//! which `splab trace record` reads from a FIFO and writes as a binary
//! trace. Little-endian 64-bit words, chosen so the tool writes each
//! reference with one inline store and no arithmetic beyond a shift:
//!
//! ```text
//! "SPLVT001"                       the first word
//! reference   low byte t < 0x20: kind t & 3 (0 fetch, 1 load, 2 store,
//!             3 modify), size code c = (t >> 2) & 7;
//!             c < 7: size 1 << c, address = word >> 8 (arithmetic shift)
//!             c = 7: size ((word >> 8) & 0xff) + 1, address = word >> 16
//!             (arithmetic shift; canonical amd64 addresses survive both);
//!             after a system call returns, the lines the kernel read
//!             and wrote in the program's memory during it, a 64-byte
//!             load or store each, outside any block
//! 0x80        a region mapped: start, length, then prot | origin << 8 |
//!             name length << 16, then the name in ceil(length / 8) words
//!             (zero-padded); origins as `Origin`
//! 0x81        a region unmapped: start, length
//! 0x82        instructions: the number executed since the last such word
//! 0x83        a fork (online runs only): the child's pid
//! 0x84        references left out (online sampled runs only): how many
//!             since the last such word
//! 0x85        the slot's mode (online sampled runs only): 0 detail, 1
//!             warming
//! 0x86        a block's table: the word's bits 8.. say how many words
//!             follow (the tool's "block table" comment documents them;
//!             `block.rs` decodes them)
//! 0x87        the stream enters the block of id word >> 8
//! 0x88        the stream leaves its block by side exit word >> 8
//! 0x89        a thread created (online runs only)
//! 0x8a        a read or write that would have blocked, EAGAIN (online
//!             runs only; bit 8 set when the process ran in lockstep)
//! 0x8b        a wait a timer ended (online runs in lockstep only)
//! 0xff        nothing (a guarded access that did not happen: its place
//!             among the block's references is kept, as a `Skip` mark)
//! 0xfe        the end: the program exited; nothing follows
//! ```
//!
//! The maps before the first reference are valgrind's initial layout of
//! the program (image, loader, stack, heap) and become the trace's layout;
//! where two of them overlap, the later stays.
//! A reference wider than 256 bytes (xsave and the like) comes as several
//! of at most 256.

use crate::window::Window;
use crate::{Event, Format, Kind, Origin, Ref, Region, Source, Step, TraceError, MAX_NAME};
use std::io::Read;

pub const MAGIC: &[u8; 8] = b"SPLVT001";
const W_MAP: u8 = 0x80;
const W_UNMAP: u8 = 0x81;
const W_INSN: u8 = 0x82;
const W_BLOCK: u8 = 0x86;
const W_ENTER: u8 = 0x87;
const W_EXIT: u8 = 0x88;
/// Most words a block table may have.
pub const MAX_TABLE_WORDS: usize = 1 << 14;
const W_END: u8 = 0xfe;
const W_NOP: u8 = 0xff;
const BUF: usize = 1 << 20;

pub struct Reader<R: Read> {
    w: Window<R>,
    layout: Vec<Region>,
    done: bool,
    /// Guest instructions counted so far (the 0x82 words).
    pub instructions: u64,
}

/// Decodes a reference word (its low byte below 0x20).
#[inline]
pub(crate) fn decode(word: u64) -> Ref {
    let tag = word as u8;
    let kind = Kind::from_bits(tag);
    let code = (tag >> 2) & 7;
    if code < 7 {
        Ref { addr: ((word as i64) >> 8) as u64, size: 1 << code, kind }
    } else {
        Ref { addr: ((word as i64) >> 16) as u64, size: ((word >> 8) & 0xff) as u32 + 1, kind }
    }
}

impl<R: Read> Reader<R> {
    /// Checks the magic and reads the initial layout (the maps before the
    /// first reference).
    pub fn new(r: R) -> Result<Reader<R>, TraceError> {
        let mut rd = Reader { w: Window::new(r, BUF), layout: Vec::new(), done: false, instructions: 0 };
        rd.w.ensure(8)?;
        let first = &rd.w.buf[rd.w.pos..rd.w.end.min(rd.w.pos + 8)];
        if first != MAGIC {
            return Err(TraceError::at_byte(0, format!("expected the splabtrace magic \"SPLVT001\", found {}", crate::show_bytes(first))));
        }
        rd.w.pos += 8;
        while rd.w.ensure(8)? && rd.w.buf[rd.w.pos] == W_MAP {
            rd.w.pos += 8;
            let r = rd.region()?;
            // A later announcement of the same memory (valgrind reports
            // the first page of the brk heap twice) replaces the earlier.
            rd.layout.retain(|o| o.end() <= r.start || r.end() <= o.start);
            rd.layout.push(r);
        }
        Ok(rd)
    }

    fn err(&self, msg: impl Into<String>) -> TraceError {
        TraceError::at_byte(self.w.offset(), msg)
    }

    fn word(&mut self, what: &str) -> Result<u64, TraceError> {
        if !self.w.ensure(8)? {
            return Err(self.err(format!("the stream ends inside {what}")));
        }
        let v = u64::from_le_bytes(self.w.buf[self.w.pos..self.w.pos + 8].try_into().unwrap());
        self.w.pos += 8;
        Ok(v)
    }

    fn region(&mut self) -> Result<Region, TraceError> {
        let at = self.w.offset();
        let start = self.word("a map's start")?;
        let len = self.word("a map's length")?;
        let info = self.word("a map's protection")?;
        if len == 0 || start.checked_add(len).is_none() {
            return Err(TraceError::at_byte(at, format!("a map of {len:#x} bytes at {start:#x}: empty or past 2^64")));
        }
        let prot = (info & 7) as u8;
        let origin = Origin::from_u8((info >> 8) as u8).unwrap_or(Origin::Unknown);
        let nlen = (info >> 16) as usize;
        if nlen > MAX_NAME {
            return Err(self.err(format!("a map's name of {nlen} bytes (at most {MAX_NAME})")));
        }
        let words = nlen.div_ceil(8);
        if !self.w.ensure(words * 8)? {
            return Err(self.err("the stream ends inside a map's name"));
        }
        let name = String::from_utf8_lossy(&self.w.buf[self.w.pos..self.w.pos + nlen]).into_owned();
        self.w.pos += words * 8;
        Ok(Region { start, len, prot, origin, name })
    }
}

impl<R: Read> Source for Reader<R> {
    fn format(&self) -> Format {
        Format::Splab
    }
    fn layout(&self) -> &[Region] {
        &self.layout
    }

    fn read(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<Step, TraceError> {
        if self.done {
            return Ok(Step::End);
        }
        loop {
            // The hot loop: whole reference words.
            let (mut pos, end) = (self.w.pos, self.w.end);
            while out.len() < max && end - pos >= 8 {
                let word = u64::from_le_bytes(self.w.buf[pos..pos + 8].try_into().unwrap());
                let tag = word as u8;
                if tag >= 0x20 {
                    let kind = match tag {
                        W_NOP => Kind::Skip,
                        W_ENTER => Kind::Enter,
                        W_EXIT => Kind::Exit,
                        _ => break,
                    };
                    out.push(Ref { addr: word >> 8, size: 0, kind });
                    pos += 8;
                    continue;
                }
                out.push(decode(word));
                pos += 8;
            }
            self.w.pos = pos;
            if out.len() >= max {
                return Ok(Step::Full);
            }
            if !self.w.ensure(8)? {
                return Err(self.err("the stream ends without its end word: valgrind or the tool stopped early"));
            }
            let tag = self.w.buf[self.w.pos];
            match tag {
                0..=0x1f | W_NOP | W_ENTER | W_EXIT => {}
                W_BLOCK => {
                    let n = (self.word("a block table's header")? >> 8) as usize;
                    if n > MAX_TABLE_WORDS {
                        return Err(self.err(format!("a block table of {n} words (at most {MAX_TABLE_WORDS})")));
                    }
                    let table = (0..n).map(|_| self.word("a block table")).collect::<Result<Vec<u64>, _>>()?;
                    return Ok(Step::Event(Event::Block(table)));
                }
                W_INSN => {
                    self.w.pos += 8;
                    self.instructions += self.word("an instruction count")?;
                }
                W_MAP => {
                    self.w.pos += 8;
                    return Ok(Step::Event(Event::Map(self.region()?)));
                }
                W_UNMAP => {
                    self.w.pos += 8;
                    let at = self.w.offset();
                    let start = self.word("an unmap's start")?;
                    let len = self.word("an unmap's length")?;
                    if len == 0 || start.checked_add(len).is_none() {
                        return Err(TraceError::at_byte(at, format!("an unmap of {len:#x} bytes at {start:#x}")));
                    }
                    return Ok(Step::Event(Event::Unmap { start, len }));
                }
                W_END => {
                    self.done = true;
                    return Ok(Step::End);
                }
                _ => return Err(self.err(format!("expected a splabtrace word, found low byte {tag:#04x}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u64]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for w in ws {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    }

    #[test]
    fn decodes_words() {
        let name = u64::from_le_bytes(*b"/bin/ls\0");
        let b = words(&[
            0x80,
            0x400000,
            0x1000,
            5 | 5 << 8 | 7 << 16,
            name,
            0x7fff_1234_5678 << 8 | 1 | 3 << 2,
            0xffff_ffff_ff60_0000 << 16 | 2 << 8 | 7 << 2,
            0xff,
            0x82,
            1234,
            0x86 | 2 << 8,
            11,
            12,
            0x87 | 5 << 8,
            0x88 | 1 << 8,
            0x81,
            0x7000,
            0x2000,
            0x1000 << 16 | 99 << 8 | 7 << 2 | 3,
            0xfe,
        ]);
        let mut r = Reader::new(&b[..]).unwrap();
        assert_eq!(r.instructions, 0);
        assert_eq!(r.layout(), &[Region { start: 0x400000, len: 0x1000, prot: 5, origin: Origin::Image, name: "/bin/ls".into() }]);
        let items = crate::read_items(&mut r, 100).unwrap();
        assert_eq!(r.instructions, 1234);
        use crate::Item;
        assert_eq!(
            items,
            vec![
                Item::Ref(Ref { addr: 0x7fff_1234_5678, size: 8, kind: Kind::Load }),
                Item::Ref(Ref { addr: 0xffff_ffff_ff60_0000, size: 3, kind: Kind::Instr }),
                Item::Ref(Ref { addr: 0, size: 0, kind: Kind::Skip }),
                Item::Event(Event::Block(vec![11, 12])),
                Item::Ref(Ref { addr: 5, size: 0, kind: Kind::Enter }),
                Item::Ref(Ref { addr: 1, size: 0, kind: Kind::Exit }),
                Item::Event(Event::Unmap { start: 0x7000, len: 0x2000 }),
                Item::Ref(Ref { addr: 0x1000, size: 100, kind: Kind::Modify }),
            ]
        );
        // Cut before the end word: an error, not a shorter trace.
        let mut r = Reader::new(&b[..b.len() - 8]).unwrap();
        assert!(crate::read_items(&mut r, 100).unwrap_err().msg.contains("without its end word"));
        assert!(Reader::new(&b"SPLTRACE"[..]).is_err());
    }
}
