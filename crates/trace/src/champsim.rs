//! ChampSim traces: a sequence of 64-byte `input_instr` records, as
//! ChampSim's tracers write them (inc/trace_instruction.h), little-endian:
//!
//! ```text
//! 0   8  ip
//! 8   1  is_branch (0 or 1)
//! 9   1  branch_taken (0 or 1)
//! 10  2  destination_registers[2]
//! 12  4  source_registers[4]
//! 16  16 destination_memory[2]   store addresses, 0 = none
//! 32  32 source_memory[4]        load addresses, 0 = none
//! ```
//!
//! Each record becomes an instruction fetch at ip, then a load for each
//! non-zero source address, then a store for each non-zero destination
//! address, in that order (the order ChampSim executes them). ChampSim
//! records no sizes, so every reference has size 0 (unknown).

use crate::window::Window;
use crate::{Format, Kind, Ref, Source, Step, TraceError};
use std::io::Read;

pub const RECORD: usize = 64;
/// Records read from the input at a time.
const CHUNK: usize = 4096;

pub struct Reader<R: Read> {
    w: Window<R>,
}

impl<R: Read> Reader<R> {
    pub fn new(r: R) -> Reader<R> {
        Reader { w: Window::new(r, RECORD * CHUNK) }
    }
}

#[inline]
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

impl<R: Read> Source for Reader<R> {
    fn format(&self) -> Format {
        Format::ChampSim
    }

    fn read(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<Step, TraceError> {
        let w = &mut self.w;
        loop {
            // One record gives at most 7 references; the first always fits.
            while w.avail() >= RECORD && (out.len() + 7 <= max || out.is_empty()) {
                let at = w.offset();
                let rec = &w.buf[w.pos..w.pos + RECORD];
                if rec[8] > 1 || rec[9] > 1 {
                    return Err(TraceError::at_byte(
                        at + 8,
                        format!(
                            "expected a ChampSim record with is_branch and branch_taken 0 or 1, found {} and {}",
                            rec[8], rec[9]
                        ),
                    ));
                }
                out.push(Ref { addr: u64_at(rec, 0), size: 0, kind: Kind::Instr });
                for i in 0..4 {
                    let a = u64_at(rec, 32 + 8 * i);
                    if a != 0 {
                        out.push(Ref { addr: a, size: 0, kind: Kind::Load });
                    }
                }
                for i in 0..2 {
                    let a = u64_at(rec, 16 + 8 * i);
                    if a != 0 {
                        out.push(Ref { addr: a, size: 0, kind: Kind::Store });
                    }
                }
                w.pos += RECORD;
            }
            if out.len() + 7 > max && !out.is_empty() {
                return Ok(Step::Full);
            }
            if !w.ensure(RECORD)? {
                let left = w.avail();
                if left != 0 {
                    return Err(TraceError::at_byte(w.offset(), format!("the data ends {left} bytes into a {RECORD}-byte ChampSim record")));
                }
                return Ok(Step::End);
            }
        }
    }
}

/// Encodes one record (for tests and for making sample traces).
pub fn encode(ip: u64, is_branch: bool, taken: bool, stores: [u64; 2], loads: [u64; 4]) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    b[..8].copy_from_slice(&ip.to_le_bytes());
    b[8] = is_branch as u8;
    b[9] = taken as u8;
    for (i, a) in stores.iter().enumerate() {
        b[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    for (i, a) in loads.iter().enumerate() {
        b[32 + 8 * i..40 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    b
}
