//! Opening a trace: the compression is told by the first bytes (gzip 1f 8b,
//! xz fd 37 7a 58 5a 00), then the format by the first decompressed bytes
//! (splab's magic `SPLTRACE`; text starting as lackey's log does; anything
//! else is taken for ChampSim's binary records, whose reader checks them),
//! unless the caller names the format.

use crate::{binary, champsim, lackey, Format, Ref, Region, Source, Step, TraceError};
use serde::Serialize;
use std::fs::File;
use std::io::{self, BufReader, Cursor, Read};
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Compression {
    None,
    Gzip,
    Xz,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
        }
    }
}

/// An open trace: its reader, and what it was found to be.
pub struct Opened {
    pub source: Box<dyn Source>,
    pub compression: Compression,
}

impl Source for Opened {
    fn format(&self) -> Format {
        self.source.format()
    }
    fn layout(&self) -> &[Region] {
        self.source.layout()
    }
    fn ref_count(&self) -> Option<u64> {
        self.source.ref_count()
    }
    fn read(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<Step, TraceError> {
        let compressed = self.compression != Compression::None;
        self.source.read(out, max).map_err(|mut e| {
            e.decompressed = compressed;
            e
        })
    }
}

/// Reads up to `n` bytes (fewer only at the end of the input).
fn peek(r: &mut dyn Read, n: usize) -> io::Result<Vec<u8>> {
    let mut v = Vec::with_capacity(n);
    r.take(n as u64).read_to_end(&mut v)?;
    Ok(v)
}

/// Whether `b` starts the way a lackey log does.
fn looks_like_lackey(b: &[u8]) -> bool {
    [&b"=="[..], b"--", b"I  ", b" L ", b" S ", b" M ", b"SYSCALL["].iter().any(|p| b.starts_with(p) || (b.len() < p.len() && p.starts_with(b) && !b.is_empty()))
}

/// Opens the trace in `path` (see the module comment).
pub fn open(path: &Path, format: Option<Format>) -> Result<Opened, TraceError> {
    let f = File::open(path).map_err(|e| TraceError::other(format!("cannot open {}: {e}", path.display())))?;
    if f.metadata().map(|m| m.is_dir()).unwrap_or(false) {
        return Err(TraceError::other(format!("{} is a directory, not a trace", path.display())));
    }
    open_reader(Box::new(f), format)
}

/// Opens a trace from any byte stream (see the module comment).
pub fn open_reader(mut r: Box<dyn Read>, format: Option<Format>) -> Result<Opened, TraceError> {
    let io_err = |e: io::Error| TraceError::at_byte(0, format!("read error: {e}"));
    let head = peek(&mut r, 6).map_err(io_err)?;
    let compression = if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Compression::Xz
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return Err(TraceError::at_byte(0, "zstd-compressed data is not read; decompress it first (zstd -d)"));
    } else if head.starts_with(b"BZh") {
        return Err(TraceError::at_byte(0, "bzip2-compressed data is not read; decompress it first (bunzip2)"));
    } else {
        Compression::None
    };
    let raw: Box<dyn Read> = Box::new(Cursor::new(head).chain(r));
    let mut data: Box<dyn Read> = match compression {
        Compression::None => raw,
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 16, raw))),
        Compression::Xz => {
            let stream = liblzma::stream::Stream::new_stream_decoder(u64::MAX, liblzma::stream::CONCATENATED)
                .map_err(|e| TraceError::other(format!("cannot start the xz decoder: {e}")))?;
            Box::new(liblzma::read::XzDecoder::new_stream(BufReader::with_capacity(1 << 16, raw), stream))
        }
    };
    let first = peek(&mut data, 8).map_err(|e| {
        let mut t = TraceError::at_byte(0, format!("read error: {e}"));
        t.decompressed = compression != Compression::None;
        t
    })?;
    if first.is_empty() {
        return Err(TraceError::other("the trace is empty"));
    }
    let format = format.unwrap_or(if first.starts_with(binary::MAGIC) {
        Format::Splab
    } else if looks_like_lackey(&first) {
        Format::Lackey
    } else {
        Format::ChampSim
    });
    let data: Box<dyn Read> = Box::new(Cursor::new(first).chain(data));
    let decompressed = compression != Compression::None;
    let source: Box<dyn Source> = match format {
        Format::Splab => Box::new(binary::Reader::new(data).map_err(|mut e| {
            e.decompressed = decompressed;
            e
        })?),
        Format::Lackey => Box::new(lackey::Reader::new(BufReader::with_capacity(1 << 20, data))),
        Format::ChampSim => Box::new(champsim::Reader::new(data)),
    };
    Ok(Opened { source, compression })
}
