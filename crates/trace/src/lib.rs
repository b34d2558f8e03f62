//! Memory-reference traces of real programs, and their replay on the
//! simulated system.
//!
//! A trace is a stream of references (instruction fetches, loads, stores,
//! modifies, each with an address and a size) interleaved with address-space
//! events (a region mapped or unmapped), plus an optional initial layout.
//! Three formats are read, each streaming in constant memory:
//!
//! - valgrind lackey text (`lackey.rs`), with the layout taken from
//!   valgrind's `--trace-syscalls=yes` lines when the log has them;
//! - ChampSim's 64-byte `input_instr` records (`champsim.rs`);
//! - splab's own compact binary format (`binary.rs`, which documents it).
//!
//! Any of them may be gzip- or xz-compressed; `open` tells the compression
//! and the format from the first bytes. `record.rs` runs a program under
//! valgrind (our splabtrace tool, whose stream `vgraw.rs` reads, or
//! lackey) and writes the binary format as the program runs; `replay.rs`
//! (feature `replay`) is the workload `splab sim trace:FILE` runs.
//!
//! What is always true of a reader: it never panics and never holds more
//! than a bounded buffer of the input, whatever the bytes; malformed input
//! is a `TraceError` naming the byte offset (binary formats) or line (text)
//! and what was expected there.

pub mod binary;
#[cfg(feature = "replay")]
pub mod block;
pub mod champsim;
pub mod convert;
pub mod fold;
pub mod info;
pub mod input;
pub mod lackey;
pub mod record;
#[cfg(feature = "replay")]
pub mod online;
#[cfg(feature = "replay")]
pub mod replay;
pub mod synth;
pub mod vgraw;
mod window;

use serde::Serialize;
use std::fmt;

pub use input::{open, open_reader, Compression, Opened};

/// What a reference does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[repr(u8)]
pub enum Kind {
    /// An instruction fetch.
    Instr = 0,
    Load = 1,
    Store = 2,
    /// A read-modify-write of one location (x86 `add [m], r`): a load then a
    /// store of the same bytes.
    Modify = 3,
    /// Not references but marks of the instruction stream (splabtrace's
    /// blocks, `block.rs`), in order among them: the stream enters block
    /// `addr` (the tool's id of it), leaves the current block by side exit
    /// `addr`, or has a reference of the block that did nothing (a
    /// guarded access whose guard was false) where `Skip` stands.
    Enter = 4,
    Exit = 5,
    Skip = 6,
}

impl Kind {
    /// The kinds of memory reference.
    pub const ALL: [Kind; 4] = [Kind::Instr, Kind::Load, Kind::Store, Kind::Modify];

    /// A mark of the instruction stream, not a reference.
    pub fn is_mark(self) -> bool {
        self as u8 >= Kind::Enter as u8
    }

    pub fn from_bits(b: u8) -> Kind {
        Kind::ALL[(b & 3) as usize]
    }

    /// The letter lackey uses (a mark's own letter for marks, which
    /// lackey does not have).
    pub fn letter(self) -> char {
        ['I', 'L', 'S', 'M', 'E', 'X', '-'][self as usize]
    }
}

/// One memory reference. `size` is in bytes; 0 means the source does not
/// say (ChampSim records no sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ref {
    pub addr: u64,
    pub size: u32,
    pub kind: Kind,
}

/// Protection bits of a region, as mmap's PROT_* values.
pub mod prot {
    pub const READ: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const EXEC: u8 = 4;
}

/// Where a region of the layout came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[repr(u8)]
pub enum Origin {
    /// The source did not say.
    Unknown = 0,
    /// An anonymous mmap.
    Anon = 1,
    /// A mmap of a file.
    File = 2,
    /// The heap grown by brk.
    Brk = 3,
    /// A stack.
    Stack = 4,
    /// The program image or its loader.
    Image = 5,
}

impl Origin {
    pub fn from_u8(b: u8) -> Option<Origin> {
        Some(match b {
            0 => Origin::Unknown,
            1 => Origin::Anon,
            2 => Origin::File,
            3 => Origin::Brk,
            4 => Origin::Stack,
            5 => Origin::Image,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Origin::Unknown => "unknown",
            Origin::Anon => "anon",
            Origin::File => "file",
            Origin::Brk => "brk",
            Origin::Stack => "stack",
            Origin::Image => "image",
        }
    }
}

/// Longest region name the formats carry (a path).
pub const MAX_NAME: usize = 4096;

/// A mapped range of the program's address space. Always `len > 0` and
/// `start + len` does not overflow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Region {
    pub start: u64,
    pub len: u64,
    /// `prot::*` bits.
    pub prot: u8,
    pub origin: Origin,
    /// A file's path, or empty.
    pub name: String,
}

impl Region {
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// A change of the address space at a point of the reference stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Event {
    Map(Region),
    Unmap { start: u64, len: u64 },
    /// The table of a block of the instruction stream, as the splabtrace
    /// tool writes it (its words; `block.rs` decodes them), before any
    /// mark enters the block.
    Block(Vec<u64>),
}

/// Why `Source::read` returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `out` reached the requested number of references.
    Full,
    /// The next item of the trace is this event; the references already in
    /// `out` come before it.
    Event(Event),
    /// The trace is over; `out` holds its last references.
    End,
}

/// The trace formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Format {
    /// splab's compact binary format.
    Splab,
    /// valgrind `--tool=lackey --trace-mem=yes` text.
    Lackey,
    /// ChampSim `input_instr` records.
    ChampSim,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Splab => "splab",
            Format::Lackey => "lackey",
            Format::ChampSim => "champsim",
        }
    }

    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "splab" | "binary" => Ok(Format::Splab),
            "lackey" => Ok(Format::Lackey),
            "champsim" => Ok(Format::ChampSim),
            _ => Err(format!("unknown trace format {s:?} (known: splab, lackey, champsim)")),
        }
    }
}

/// Where in the input something went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pos {
    /// Byte offset (of the decompressed data, for compressed input).
    Byte(u64),
    /// Line number, from 1.
    Line(u64),
}

/// A malformed trace or an input that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    pub pos: Option<Pos>,
    pub msg: String,
    /// Offsets are of decompressed data (said in the message).
    pub decompressed: bool,
}

impl TraceError {
    pub fn at_byte(off: u64, msg: impl Into<String>) -> TraceError {
        TraceError { pos: Some(Pos::Byte(off)), msg: msg.into(), decompressed: false }
    }
    pub fn at_line(line: u64, msg: impl Into<String>) -> TraceError {
        TraceError { pos: Some(Pos::Line(line)), msg: msg.into(), decompressed: false }
    }
    pub fn other(msg: impl Into<String>) -> TraceError {
        TraceError { pos: None, msg: msg.into(), decompressed: false }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pos {
            Some(Pos::Byte(b)) if self.decompressed => write!(f, "byte {b} (of the decompressed data): {}", self.msg),
            Some(Pos::Byte(b)) => write!(f, "byte {b}: {}", self.msg),
            Some(Pos::Line(l)) => write!(f, "line {l}: {}", self.msg),
            None => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for TraceError {}

/// A trace being read.
pub trait Source {
    fn format(&self) -> Format;
    /// The layout the trace starts with (its header's), before any reference.
    fn layout(&self) -> &[Region] {
        &[]
    }
    /// How many references the trace holds, where its header says.
    fn ref_count(&self) -> Option<u64> {
        None
    }
    /// Appends references to `out` until it holds `max` of them (a reader
    /// may go over by the few references of one source record), the next
    /// item is an event, or the trace ends.
    fn read(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<Step, TraceError>;
}

/// Printable form of a few bytes of bad input, for messages.
pub(crate) fn show_bytes(b: &[u8]) -> String {
    let cut = &b[..b.len().min(40)];
    let mut s = String::from_utf8_lossy(cut).escape_debug().to_string();
    if b.len() > cut.len() {
        s.push_str("...");
    }
    format!("\"{s}\"")
}

/// One item of a trace, for tests and fuzzing (`read_items`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Ref(Ref),
    Event(Event),
}

/// Reads a whole trace into memory, stopping with an error after
/// `max_items` items: for tests and fuzz targets, never for real traces.
pub fn read_items(src: &mut dyn Source, max_items: usize) -> Result<Vec<Item>, TraceError> {
    let mut items = Vec::new();
    let mut refs = Vec::new();
    loop {
        refs.clear();
        let step = src.read(&mut refs, 1024)?;
        items.extend(refs.iter().map(|&r| Item::Ref(r)));
        match step {
            Step::Full => {}
            Step::Event(e) => items.push(Item::Event(e)),
            Step::End => return Ok(items),
        }
        if items.len() > max_items {
            return Err(TraceError::other(format!("more than {max_items} items")));
        }
    }
}
