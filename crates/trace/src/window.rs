//! A window onto a byte stream, shared by the binary readers: the unread
//! bytes are `buf[pos..end]`, `base` is the stream offset of `buf[0]`, and a
//! refill moves the unread rest to the front and reads until the buffer is
//! full or the stream ends. The buffer starts small (a short input costs
//! little to read, which fuzzing and tests care about) and doubles, up to a
//! bound, while refills keep filling it; that bound is the reader's memory.

use crate::TraceError;
use std::io::{self, Read};

pub(crate) struct Window<R: Read> {
    r: R,
    pub buf: Box<[u8]>,
    pub pos: usize,
    pub end: usize,
    base: u64,
    pub eof: bool,
    /// The largest the buffer may grow.
    max: usize,
    /// The last refill filled the buffer.
    full: bool,
}

const FIRST: usize = 4096;

impl<R: Read> Window<R> {
    /// A window whose buffer grows to at most `max` bytes.
    pub fn new(r: R, max: usize) -> Window<R> {
        Window { r, buf: vec![0u8; FIRST.min(max)].into_boxed_slice(), pos: 0, end: 0, base: 0, eof: false, max, full: false }
    }

    /// Stream offset of the first unread byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Unread bytes buffered.
    pub fn avail(&self) -> usize {
        self.end - self.pos
    }

    /// Refills until at least `n` bytes (at most the bound) are unread or
    /// the stream ends; returns whether `n` are there.
    pub fn ensure(&mut self, n: usize) -> Result<bool, TraceError> {
        debug_assert!(n <= self.max);
        if self.avail() >= n {
            return Ok(true);
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        if (self.full || n > self.buf.len()) && self.buf.len() < self.max {
            let size = (2 * self.buf.len()).max(n.next_power_of_two()).min(self.max);
            let mut bigger = vec![0u8; size].into_boxed_slice();
            bigger[..self.end].copy_from_slice(&self.buf[..self.end]);
            self.buf = bigger;
        }
        while self.end < self.buf.len() && !self.eof {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TraceError::at_byte(self.base + self.end as u64, format!("read error: {e}"))),
            }
        }
        self.full = self.end == self.buf.len();
        Ok(self.avail() >= n)
    }
}
