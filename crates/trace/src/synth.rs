//! Generated traces in the binary format, for `splab bench` and tests:
//! a STREAM-triad-like streaming pattern and a GUPS-like random one. Both
//! put their arrays in one anonymous region listed in the header.

use crate::binary::{patch_count, Writer};
use crate::{prot, Kind, Origin, Ref, Region};
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

/// Where the generated arrays start (2 MB aligned, as mmap would place a
/// large anonymous mapping).
pub const BASE: u64 = 0x7f00_0000_0000;

fn layout(bytes: u64) -> Vec<Region> {
    vec![Region { start: BASE, len: bytes, prot: prot::READ | prot::WRITE, origin: Origin::Anon, name: String::new() }]
}

fn write(path: &Path, bytes: u64, refs: impl Iterator<Item = Ref>) -> io::Result<u64> {
    let f = File::create(path)?;
    let mut w = Writer::new(BufWriter::with_capacity(1 << 20, f), &layout(bytes))?;
    for r in refs {
        w.write_ref(&r)?;
    }
    let (bw, n) = w.finish()?;
    let mut f = bw.into_inner().map_err(|e| e.into_error())?;
    patch_count(&mut f, n)?;
    Ok(n)
}

/// `a[i] = b[i] + s * c[i]` over three arrays of `array_bytes` each (8-byte
/// elements), repeated until `n` references: load b[i], load c[i], store
/// a[i]. Returns the number of references written.
pub fn triad(path: &Path, n: u64, array_bytes: u64) -> io::Result<u64> {
    let elems = (array_bytes / 8).max(1);
    let stride = elems * 8;
    let (a, b, c) = (BASE, BASE + stride, BASE + 2 * stride);
    let refs = (0..n).map(move |k| {
        let i = (k / 3) % elems;
        match k % 3 {
            0 => Ref { addr: b + 8 * i, size: 8, kind: Kind::Load },
            1 => Ref { addr: c + 8 * i, size: 8, kind: Kind::Load },
            _ => Ref { addr: a + 8 * i, size: 8, kind: Kind::Store },
        }
    });
    write(path, 3 * stride, refs)
}

/// `n` read-modify-writes of random 8-byte words of a `table_bytes` table
/// (xorshift, seeded).
pub fn random(path: &Path, n: u64, table_bytes: u64, seed: u64) -> io::Result<u64> {
    let words = (table_bytes / 8).max(1);
    let mut x = seed | 1;
    let refs = (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        Ref { addr: BASE + 8 * (x % words), size: 8, kind: Kind::Modify }
    });
    write(path, words * 8, refs)
}
