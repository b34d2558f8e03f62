//! splab's compact binary trace format, version 2 (version 1, the same
//! without the instruction stream's records 0x82 to 0x85, is read too).
//!
//! All multi-byte fixed-width integers are little-endian. A *varint* is
//! unsigned LEB128 (7 bits a byte, low first, high bit set on every byte
//! but the last; at most 10 bytes, the 10th at most 1). A *zigzag* varint
//! holds a signed value v as (v << 1) ^ (v >> 63).
//!
//! ```text
//! header
//!   0   8   magic "SPLTRACE"
//!   8   2   version, 2 (or 1)
//!   10  2   flags, 0 (no flag is defined; a reader rejects others)
//!   12  8   number of references in the body; all ones when the writer
//!           could not seek back to fill it in
//!   20  ... varint n, then n region records (the layout before the first
//!           reference), each as the body's map record without its tag
//! body: records, each starting with a tag byte
//!   0xxxxxxx  a reference
//!             bits 0-1: kind (0 instruction fetch, 1 load, 2 store,
//!                       3 modify: load then store of the same bytes)
//!             bits 2-4: size code c; c < 7: the size is 1 << c bytes,
//!                       c = 7: a varint size follows the address
//!                       (0 = unknown)
//!             bits 5-6: 0
//!             then a zigzag varint: the address minus the previous
//!             address of the same stream (wrapping), where instruction
//!             fetches are one stream and data references the other; both
//!             start at 0
//!             then the varint size when c = 7
//!   0x80      a region mapped: varint start, varint length (> 0, the end
//!             must not pass 2^64), u8 protection (bits READ 1, WRITE 2,
//!             EXEC 4), u8 origin (0 unknown, 1 anonymous, 2 file, 3 brk
//!             heap, 4 stack, 5 program image), varint name length (at most
//!             4096), name bytes (UTF-8, a file's path or empty)
//!   0x81      a region unmapped: varint start, varint length (> 0)
//!   0x82      a block's table (splabtrace's, `block.rs`): varint n (at
//!             most 2^14), then n little-endian 64-bit words
//!   0x83      the instruction stream enters a block: varint its id
//!   0x84      it leaves its block by a side exit: varint the exit
//!   0x85      a reference of the block that did nothing (a guarded
//!             access whose guard was false)
//!   0xff      end of trace; nothing may follow it
//!   other     invalid
//! ```
//!
//! Delta coding against two streams keeps a typical reference to 2 or 3
//! bytes (lackey's text spends about 18). The end marker and the count in
//! the header (of references, not of the instruction stream's marks) make
//! a truncated file an error instead of a shorter trace.

use crate::{show_bytes, Event, Format, Kind, Origin, Ref, Region, Source, Step, TraceError, MAX_NAME};
use crate::window::Window;
use std::io::{self, Read, Seek, SeekFrom, Write};

pub const MAGIC: &[u8; 8] = b"SPLTRACE";
pub const VERSION: u16 = 2;
/// Byte offset of the reference count in the header.
pub const COUNT_OFFSET: u64 = 12;
/// The count of a writer that could not seek back.
pub const UNKNOWN_COUNT: u64 = u64::MAX;
const TAG_MAP: u8 = 0x80;
const TAG_UNMAP: u8 = 0x81;
const TAG_BLOCK: u8 = 0x82;
const TAG_ENTER: u8 = 0x83;
const TAG_EXIT: u8 = 0x84;
const TAG_SKIP: u8 = 0x85;
const TAG_END: u8 = 0xff;
/// Most regions a header may list (a bound, so a corrupt count is caught
/// before a loop over it).
const MAX_HEADER_REGIONS: u64 = 1 << 20;
/// Longest reference record: tag, 10-byte delta, 5-byte size.
const MAX_REF_BYTES: usize = 16;

/// Appends `v` as a varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes a varint at the start of `b`: the value and its length, or
/// `Err(true)` if `b` ends inside it, `Err(false)` if it is too long.
#[inline]
pub fn get_varint(b: &[u8]) -> Result<(u64, usize), bool> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        if i == 9 && byte > 1 {
            return Err(false);
        }
        v |= ((byte & 0x7f) as u64) << (7 * i);
        if byte < 0x80 {
            return Ok((v, i + 1));
        }
    }
    Err(b.len() < 10)
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The size code of a reference's tag (see the module comment).
#[inline]
fn size_code(size: u32) -> u8 {
    if size.is_power_of_two() && size <= 64 {
        size.trailing_zeros() as u8
    } else {
        7
    }
}

fn put_region(out: &mut Vec<u8>, r: &Region) -> io::Result<()> {
    let bad = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, format!("region {:#x}+{:#x}: {m}", r.start, r.len)));
    if r.len == 0 || r.start.checked_add(r.len).is_none() {
        return bad("empty or past the end of the address space");
    }
    if r.name.len() > MAX_NAME || r.prot > 7 {
        return bad("name too long or bad protection");
    }
    put_varint(out, r.start);
    put_varint(out, r.len);
    out.push(r.prot);
    out.push(r.origin as u8);
    put_varint(out, r.name.len() as u64);
    out.extend_from_slice(r.name.as_bytes());
    Ok(())
}

/// Bytes the writer gathers before handing them to the output.
const WBUF: usize = 1 << 16;

/// Writes a trace in the binary format as references come. Call `finish`
/// at the end (it writes the end marker); then, if the output can seek,
/// `patch_count` fills in the header's count.
pub struct Writer<W: Write> {
    w: W,
    /// `buf[..len]` is pending; the buffer has room for one more reference
    /// record past `WBUF`, so `write_ref` stores without checking first.
    buf: Box<[u8]>,
    len: usize,
    prev: [u64; 2],
    count: u64,
}

impl<W: Write> Writer<W> {
    /// Starts a trace whose initial layout is `layout`.
    pub fn new(mut w: W, layout: &[Region]) -> io::Result<Writer<W>> {
        let mut h = Vec::with_capacity(64);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes());
        h.extend_from_slice(&UNKNOWN_COUNT.to_le_bytes());
        put_varint(&mut h, layout.len() as u64);
        for r in layout {
            put_region(&mut h, r)?;
        }
        w.write_all(&h)?;
        Ok(Writer { w, buf: vec![0u8; WBUF + 2 * MAX_REF_BYTES].into_boxed_slice(), len: 0, prev: [0; 2], count: 0 })
    }

    #[inline]
    fn spill(&mut self) -> io::Result<()> {
        if self.len >= WBUF {
            self.w.write_all(&self.buf[..self.len])?;
            self.len = 0;
        }
        Ok(())
    }

    /// Appends one reference, or a mark of the instruction stream.
    #[inline]
    pub fn write_ref(&mut self, r: &Ref) -> io::Result<()> {
        if r.kind.is_mark() {
            let mut b = Vec::with_capacity(11);
            b.push([TAG_ENTER, TAG_EXIT, TAG_SKIP][r.kind as usize - Kind::Enter as usize]);
            if r.kind != Kind::Skip {
                put_varint(&mut b, r.addr);
            }
            return self.put(&b);
        }
        let stream = (r.kind != Kind::Instr) as usize;
        let code = size_code(r.size);
        let b: &mut [u8; 2 * MAX_REF_BYTES] = (&mut self.buf[self.len..self.len + 2 * MAX_REF_BYTES]).try_into().unwrap();
        b[0] = r.kind as u8 | code << 2;
        let mut v = zigzag(r.addr.wrapping_sub(self.prev[stream]) as i64);
        let mut i = 1;
        while v >= 0x80 {
            b[i] = v as u8 | 0x80;
            v >>= 7;
            i += 1;
        }
        b[i] = v as u8;
        i += 1;
        if code == 7 {
            let mut z = r.size as u64;
            while z >= 0x80 {
                b[i] = z as u8 | 0x80;
                z >>= 7;
                i += 1;
            }
            b[i] = z as u8;
            i += 1;
        }
        self.len += i;
        self.prev[stream] = r.addr;
        self.count += 1;
        self.spill()
    }

    /// Appends bytes built elsewhere (an event, the end marker).
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.len + bytes.len() > WBUF {
            self.w.write_all(&self.buf[..self.len])?;
            self.len = 0;
        }
        if bytes.len() > WBUF {
            return self.w.write_all(bytes);
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        Ok(())
    }

    /// Appends an address-space event.
    pub fn write_event(&mut self, e: &Event) -> io::Result<()> {
        let mut b = Vec::with_capacity(64);
        match e {
            Event::Map(r) => {
                b.push(TAG_MAP);
                put_region(&mut b, r)?;
            }
            Event::Unmap { start, len } => {
                if *len == 0 {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, "unmap of length 0"));
                }
                b.push(TAG_UNMAP);
                put_varint(&mut b, *start);
                put_varint(&mut b, *len);
            }
            Event::Block(words) => {
                b.push(TAG_BLOCK);
                put_varint(&mut b, words.len() as u64);
                for w in words {
                    b.extend_from_slice(&w.to_le_bytes());
                }
            }
        }
        self.put(&b)
    }

    /// References written so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Writes the end marker and flushes; returns the output and the count.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.put(&[TAG_END])?;
        self.w.write_all(&self.buf[..self.len])?;
        self.w.flush()?;
        Ok((self.w, self.count))
    }
}

/// Fills in the reference count of a finished trace written to `f`.
pub fn patch_count<F: Write + Seek>(f: &mut F, count: u64) -> io::Result<()> {
    f.seek(SeekFrom::Start(COUNT_OFFSET))?;
    f.write_all(&count.to_le_bytes())?;
    f.flush()
}

/// Reads the binary format. Holds one buffer of input (256 KiB) however
/// long the trace.
pub struct Reader<R: Read> {
    w: Window<R>,
    prev: [u64; 2],
    layout: Vec<Region>,
    count: Option<u64>,
    seen: u64,
    done: bool,
}

const BUF: usize = 1 << 18;

impl<R: Read> Reader<R> {
    /// Reads and checks the header.
    pub fn new(r: R) -> Result<Reader<R>, TraceError> {
        let mut rd = Reader {
            w: Window::new(r, BUF),
            prev: [0; 2],
            layout: Vec::new(),
            count: None,
            seen: 0,
            done: false,
        };
        rd.header()?;
        Ok(rd)
    }

    fn offset(&self) -> u64 {
        self.w.offset()
    }

    fn err(&self, msg: impl Into<String>) -> TraceError {
        TraceError::at_byte(self.offset(), msg)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], TraceError> {
        if !self.w.ensure(n)? {
            return Err(self.err(format!("the data ends inside {what} ({n} bytes expected, {} there)", self.w.end - self.w.pos)));
        }
        let s = &self.w.buf[self.w.pos..self.w.pos + n];
        self.w.pos += n;
        Ok(s)
    }

    fn varint(&mut self, what: &str) -> Result<u64, TraceError> {
        self.w.ensure(10)?;
        match get_varint(&self.w.buf[self.w.pos..self.w.end]) {
            Ok((v, n)) => {
                self.w.pos += n;
                Ok(v)
            }
            Err(true) => Err(self.err(format!("the data ends inside {what} (a varint)"))),
            Err(false) => Err(self.err(format!("{what}: varint longer than 10 bytes or above 2^64"))),
        }
    }

    fn header(&mut self) -> Result<(), TraceError> {
        self.w.ensure(20)?;
        let first = &self.w.buf[self.w.pos..self.w.end.min(self.w.pos + 8)];
        if first != MAGIC {
            return Err(TraceError::at_byte(0, format!("expected the magic \"SPLTRACE\", found {}", show_bytes(first))));
        }
        let h = self.take(20, "the header")?;
        let version = u16::from_le_bytes([h[8], h[9]]);
        let flags = u16::from_le_bytes([h[10], h[11]]);
        let count = u64::from_le_bytes(h[12..20].try_into().unwrap());
        if version != VERSION && version != 1 {
            return Err(TraceError::at_byte(8, format!("expected format version 1 or {VERSION}, found {version}")));
        }
        if flags != 0 {
            return Err(TraceError::at_byte(10, format!("expected flags 0, found {flags:#x}")));
        }
        self.count = (count != UNKNOWN_COUNT).then_some(count);
        let at = self.offset();
        let n = self.varint("the number of layout regions")?;
        if n > MAX_HEADER_REGIONS {
            return Err(TraceError::at_byte(at, format!("expected at most {MAX_HEADER_REGIONS} layout regions, found {n}")));
        }
        for _ in 0..n {
            let r = self.region()?;
            self.layout.push(r);
        }
        Ok(())
    }

    fn region(&mut self) -> Result<Region, TraceError> {
        let at = self.offset();
        let start = self.varint("a region's start")?;
        let len = self.varint("a region's length")?;
        if len == 0 || start.checked_add(len).is_none() {
            return Err(TraceError::at_byte(at, format!("expected a region of non-zero length within 2^64, found start {start:#x} length {len:#x}")));
        }
        let at = self.offset();
        let b = self.take(2, "a region's protection and origin")?;
        let (prot, origin) = (b[0], b[1]);
        if prot > 7 {
            return Err(TraceError::at_byte(at, format!("expected protection bits 0 to 7, found {prot}")));
        }
        let Some(origin) = Origin::from_u8(origin) else {
            return Err(TraceError::at_byte(at + 1, format!("expected a region origin 0 to 5, found {origin}")));
        };
        let at = self.offset();
        let n = self.varint("a region's name length")?;
        if n > MAX_NAME as u64 {
            return Err(TraceError::at_byte(at, format!("expected a name of at most {MAX_NAME} bytes, found length {n}")));
        }
        let at = self.offset();
        let name = self.take(n as usize, "a region's name")?;
        let name = std::str::from_utf8(name).map_err(|_| TraceError::at_byte(at, "expected a UTF-8 region name"))?.to_string();
        Ok(Region { start, len, prot, origin, name })
    }

    /// Decodes one reference at `pos`, which has at least `MAX_REF_BYTES`
    /// bytes after it or is the end of the data.
    #[inline]
    fn decode_ref(&mut self, tag: u8) -> Result<Ref, TraceError> {
        if tag & 0x60 != 0 {
            return Err(self.err(format!("reference tag {tag:#04x}: expected bits 5-6 zero")));
        }
        let kind = Kind::from_bits(tag);
        let code = (tag >> 2) & 7;
        let b = &self.w.buf[self.w.pos + 1..self.w.end];
        let (d, n) = match get_varint(b) {
            Ok(x) => x,
            Err(true) => return Err(self.err("the data ends inside a reference's address")),
            Err(false) => return Err(self.err("a reference's address delta is longer than 10 bytes or above 2^64")),
        };
        let mut used = 1 + n;
        let size = if code == 7 {
            match get_varint(&b[n..]) {
                Ok((s, m)) if s <= u32::MAX as u64 => {
                    used += m;
                    s as u32
                }
                Ok(_) => return Err(self.err("expected a reference size below 2^32")),
                Err(_) => return Err(self.err("the data ends inside a reference's size, or it is malformed")),
            }
        } else {
            1 << code
        };
        let stream = (kind != Kind::Instr) as usize;
        let addr = self.prev[stream].wrapping_add(unzigzag(d) as u64);
        self.prev[stream] = addr;
        self.w.pos += used;
        Ok(Ref { addr, size, kind })
    }

    /// The hot loop: decodes plain references with a size code below 7
    /// while a whole record is buffered, and stops at anything else (an
    /// event, an explicit size, a malformed record) for `read`'s general
    /// path to handle and, if need be, report.
    #[inline]
    fn fast(&mut self, out: &mut Vec<Ref>, max: usize) {
        let (mut pos, end) = (self.w.pos, self.w.end);
        let mut prev = self.prev;
        let start = out.len();
        'refs: while out.len() < max && end - pos >= MAX_REF_BYTES {
            let b: &[u8; MAX_REF_BYTES] = self.w.buf[pos..pos + MAX_REF_BYTES].try_into().unwrap();
            let tag = b[0];
            if tag & 0xe0 != 0 || (tag >> 2) & 7 == 7 {
                break;
            }
            let mut v = 0u64;
            let mut n = 0;
            for i in 0..10 {
                let byte = b[1 + i];
                v |= ((byte & 0x7f) as u64) << (7 * i);
                if byte < 0x80 {
                    n = i + 1;
                    break;
                }
            }
            if n == 0 || (n == 10 && b[10] > 1) {
                break 'refs;
            }
            let kind = Kind::from_bits(tag);
            let stream = (tag & 3 != Kind::Instr as u8) as usize;
            let addr = prev[stream].wrapping_add(unzigzag(v) as u64);
            prev[stream] = addr;
            out.push(Ref { addr, size: 1 << ((tag >> 2) & 7), kind });
            pos += 1 + n;
        }
        self.seen += (out.len() - start) as u64;
        self.w.pos = pos;
        self.prev = prev;
    }

    fn end_of_trace(&mut self) -> Result<Step, TraceError> {
        self.w.pos += 1;
        if self.w.ensure(1)? {
            return Err(self.err(format!("expected nothing after the end marker, found {} or more bytes", self.w.end - self.w.pos)));
        }
        if let Some(c) = self.count {
            if c != self.seen {
                return Err(self.err(format!("the header says {c} references, the body has {}", self.seen)));
            }
        }
        self.done = true;
        Ok(Step::End)
    }
}

impl<R: Read> Source for Reader<R> {
    fn format(&self) -> Format {
        Format::Splab
    }
    fn layout(&self) -> &[Region] {
        &self.layout
    }
    fn ref_count(&self) -> Option<u64> {
        self.count
    }

    fn read(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<Step, TraceError> {
        if self.done {
            return Ok(Step::End);
        }
        loop {
            self.fast(out, max);
            if out.len() >= max {
                return Ok(Step::Full);
            }
            self.w.ensure(MAX_REF_BYTES)?;
            if self.w.pos == self.w.end {
                return Err(self.err("the data ends without the end marker (0xff): the trace is truncated"));
            }
            let tag = self.w.buf[self.w.pos];
            match tag {
                0..=0x7f => {
                    let r = self.decode_ref(tag)?;
                    out.push(r);
                    self.seen += 1;
                }
                TAG_MAP => {
                    self.w.pos += 1;
                    let r = self.region()?;
                    return Ok(Step::Event(Event::Map(r)));
                }
                TAG_UNMAP => {
                    let at = self.offset();
                    self.w.pos += 1;
                    let start = self.varint("an unmap's start")?;
                    let len = self.varint("an unmap's length")?;
                    if len == 0 || start.checked_add(len).is_none() {
                        return Err(TraceError::at_byte(at, format!("expected an unmap of non-zero length within 2^64, found start {start:#x} length {len:#x}")));
                    }
                    return Ok(Step::Event(Event::Unmap { start, len }));
                }
                TAG_BLOCK => {
                    let at = self.offset();
                    self.w.pos += 1;
                    let n = self.varint("a block table's length")?;
                    if n > crate::vgraw::MAX_TABLE_WORDS as u64 {
                        return Err(TraceError::at_byte(at, format!("expected a block table of at most {} words, found {n}", crate::vgraw::MAX_TABLE_WORDS)));
                    }
                    let b = self.take(8 * n as usize, "a block table")?;
                    let words = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
                    return Ok(Step::Event(Event::Block(words)));
                }
                TAG_ENTER | TAG_EXIT => {
                    self.w.pos += 1;
                    let v = self.varint("a block mark")?;
                    out.push(Ref { addr: v, size: 0, kind: if tag == TAG_ENTER { Kind::Enter } else { Kind::Exit } });
                }
                TAG_SKIP => {
                    self.w.pos += 1;
                    out.push(Ref { addr: 0, size: 0, kind: Kind::Skip });
                }
                TAG_END => return self.end_of_trace(),
                _ => return Err(self.err(format!("expected a record tag (0x00-0x7f reference, 0x80 map, 0x81 unmap, 0x82 block, 0x83 enter, 0x84 exit, 0x85 skip, 0xff end), found {tag:#04x}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path decodes references as the general path does, for
    /// varints of every length (1 to 10 bytes).
    #[test]
    fn fast_references_decode_like_the_general_path() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut refs = Vec::new();
        for i in 0..5000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Deltas of every varint length, 1 to 10 bytes.
            let addr = x >> (x % 64);
            let kind = [Kind::Instr, Kind::Load, Kind::Store, Kind::Modify][(i % 4) as usize];
            refs.push(Ref { addr, size: 1 << (i % 4), kind });
        }
        let mut buf = Vec::new();
        {
            let mut w = Writer::new(std::io::Cursor::new(&mut buf), &[]).unwrap();
            for r in &refs {
                w.write_ref(r).unwrap();
            }
            w.finish().unwrap();
        }
        let mut r = Reader::new(&buf[..]).unwrap();
        let (mut got, mut part) = (Vec::new(), Vec::new());
        loop {
            part.clear();
            let step = r.read(&mut part, 1000).unwrap();
            got.extend_from_slice(&part);
            if !matches!(step, Step::Full) {
                break;
            }
        }
        assert_eq!(got, refs);
    }

    #[test]
    fn varints() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(get_varint(&b), Ok((v, b.len())));
            assert_eq!(get_varint(&b[..b.len() - 1]), Err(true), "a cut varint is a truncation");
        }
        assert_eq!(get_varint(&[0xff; 10]), Err(false));
        assert_eq!(get_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]), Err(false));
        for v in [0i64, 1, -1, i64::MAX, i64::MIN, 4096, -4096] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
