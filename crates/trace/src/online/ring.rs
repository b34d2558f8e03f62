//! The crossing: every real process (the program, each child it forks,
//! each program a process execs, valgrind following them with
//! `--trace-children=yes`) writes its stream of words (`vgraw.rs`
//! documents them) into a ring of its own in shared memory: a file of 32
//! slots of 2 MiB that the tool (or the DynamoRIO client) creates in a private directory, maps, and
//! announces with one line on the FIFO `ctl` there. This module maps each
//! ring as it is announced (and unlinks its file at once, so nothing is
//! left behind however the run ends) and consumes published slots in
//! place: one counter update and at most one futex wake per slot of 256 K
//! references, no copy, no text. The tool fills the next slots meanwhile,
//! so recording and simulating overlap; a full ring makes the tool wait,
//! so the host memory used is bounded by the rings and the model, not by
//! the program's length.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// The ring, as tools/vgtrace/ring_format.h lays it out (RING_* there),
// and the codes of the words that are not references (W_*: those both
// front ends write there, the rest in tools/vgtrace/vt_main.c).
pub(super) const RING_MAGIC: u64 = u64::from_le_bytes(*b"SPLRING2");
pub(super) const R_SLOTS: usize = 1;
pub(super) const R_SLOT_WORDS: usize = 2;
pub(super) const R_PID: usize = 3;
pub(super) const R_PUBLISHED: usize = 4;
pub(super) const R_CONSUMED: usize = 5;
pub(super) const R_TOOL_WAITS: usize = 6;
pub(super) const R_ENDED: usize = 7;
pub(super) const R_GRANTED: usize = 8;
pub(super) const R_GATE: usize = 9;
pub(super) const R_AT_GATE: usize = 10;
pub(super) const R_IN_CALL: usize = 11;
pub(super) const R_LENS: usize = 16;
/// `R_GRANTED` for a process alone: every gate.
pub(super) const ALL_GATES: u64 = u64::MAX;
pub(super) const RING_HEADER: usize = 512;

pub(super) const W_MAP: u8 = 0x80;
pub(super) const W_UNMAP: u8 = 0x81;
pub(super) const W_INSN: u8 = 0x82;
pub(super) const W_FORK: u8 = 0x83;
pub(super) const W_SKIP: u8 = 0x84;
pub(super) const W_MODE: u8 = 0x85;
pub(super) const W_BLOCK: u8 = 0x86;
pub(super) const W_ENTER: u8 = 0x87;
pub(super) const W_EXIT: u8 = 0x88;
pub(super) const W_THREAD: u8 = 0x89;
pub(super) const W_AGAIN: u8 = 0x8a;
pub(super) const W_TIMED: u8 = 0x8b;
/// A signal from outside the process (another process, a timer) was
/// delivered; the signal's number is in bits 8 and up.
pub(super) const W_SIGNAL: u8 = 0x8c;
/// Set in a `W_AGAIN` word the tool wrote in lockstep.
pub(super) const AGAIN_IN_LOCKSTEP: u64 = 1 << 8;
pub(super) const W_END: u8 = 0xfe;
pub(super) const W_NOP: u8 = 0xff;

/// A ring mapped from its file.
pub(super) struct Ring {
    base: *mut u64,
    bytes: usize,
    slots: u64,
    slot_words: usize,
    /// Real pid, as the tool wrote it.
    pub(super) pid: u32,
    /// Slots consumed so far.
    pub(super) next: u64,
    pub(super) ended: bool,
}

impl Ring {
    pub(super) fn open(path: &Path) -> Result<Ring, String> {
        use std::os::fd::AsRawFd;
        let f = OpenOptions::new().read(true).write(true).open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
        let bytes = f.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len() as usize;
        if bytes < RING_HEADER * 8 {
            return Err(format!("ring {}: {bytes} bytes, shorter than its header", path.display()));
        }
        // SAFETY: a shared mapping of the whole file, which stays valid
        // after the file is closed and unlinked; unmapped in Drop.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, f.as_raw_fd(), 0) };
        let _ = std::fs::remove_file(path);
        if p == libc::MAP_FAILED {
            return Err(format!("mmap {}: {}", path.display(), std::io::Error::last_os_error()));
        }
        let mut r = Ring { base: p as *mut u64, bytes, slots: 0, slot_words: 0, pid: 0, next: 0, ended: false };
        if r.word(0) != RING_MAGIC {
            return Err(format!("ring {}: no splabtrace ring magic", path.display()));
        }
        r.slots = r.word(R_SLOTS);
        r.slot_words = r.word(R_SLOT_WORDS) as usize;
        r.pid = r.word(R_PID) as u32;
        if r.slots == 0 || r.slots > (RING_HEADER - R_LENS) as u64 || RING_HEADER + r.slots as usize * r.slot_words > bytes / 8 {
            return Err(format!("ring {}: {} slots of {} words do not fit its {bytes} bytes", path.display(), r.slots, r.slot_words));
        }
        Ok(r)
    }

    fn atomic(&self, i: usize) -> &AtomicU64 {
        // SAFETY: `i` is inside the header page of the live mapping; u64
        // words are 8-aligned; the tool updates them atomically too.
        unsafe { &*(self.base.add(i) as *const AtomicU64) }
    }

    pub(super) fn word(&self, i: usize) -> u64 {
        self.atomic(i).load(Ordering::Acquire)
    }

    pub(super) fn published(&self) -> u64 {
        self.word(R_PUBLISHED)
    }

    /// The next published slot's words, if there is one.
    pub(super) fn slot(&self) -> Option<&[u64]> {
        if self.published() <= self.next {
            return None;
        }
        let i = (self.next % self.slots) as usize;
        let len = (self.word(R_LENS + i) as usize).min(self.slot_words);
        // SAFETY: the slot lies inside the mapping (checked in `open`);
        // the tool does not write it again until `release` frees it.
        Some(unsafe { std::slice::from_raw_parts(self.base.add(RING_HEADER + i * self.slot_words), len) })
    }

    /// Hands the slot back to the tool.
    pub(super) fn release(&mut self) {
        self.next += 1;
        self.atomic(R_CONSUMED).store(self.next, Ordering::Release);
        if self.atomic(R_TOOL_WAITS).load(Ordering::SeqCst) != 0 {
            // SAFETY: a futex wake on the low half of a shared word.
            unsafe { libc::syscall(libc::SYS_futex, self.base.add(R_CONSUMED), libc::FUTEX_WAKE, i32::MAX, 0, 0, 0) };
        }
    }

    /// Whether the tool waits at a gate it has not been granted (the ring
    /// header's comment in tools/vgtrace/vt_main.c). A process that forked
    /// waits at its gates even while it still holds `ALL_GATES`.
    pub(super) fn at_gate(&self) -> bool {
        if self.word(R_AT_GATE) != 1 {
            return false;
        }
        let granted = self.word(R_GRANTED);
        granted == ALL_GATES || granted <= self.word(R_GATE)
    }

    /// Whether the process is in a system call it passed a gate for (it
    /// may block there on another).
    pub(super) fn in_call(&self) -> bool {
        self.word(R_IN_CALL) == 1
    }

    /// Lets the tool past the gate it waits at (`all`: past every gate,
    /// for a process alone).
    pub(super) fn grant(&self, all: bool) {
        let g = if all { ALL_GATES } else { self.word(R_GATE) + 1 };
        self.atomic(R_GRANTED).store(g, Ordering::SeqCst);
        // SAFETY: a futex wake on the low half of a shared word.
        unsafe { libc::syscall(libc::SYS_futex, self.base.add(R_GRANTED), libc::FUTEX_WAKE, i32::MAX, 0, 0, 0) };
    }

    /// Waits up to `timeout` for the tool to reach a gate (it wakes us
    /// there).
    pub(super) fn wait_gate(&self, timeout: Duration) {
        if self.word(R_AT_GATE) != 0 {
            return;
        }
        let ts = libc::timespec { tv_sec: 0, tv_nsec: timeout.as_nanos().min(999_999_999) as i64 };
        // SAFETY: a futex wait on the low half of a shared word, with a
        // timeout.
        unsafe { libc::syscall(libc::SYS_futex, self.base.add(R_AT_GATE), libc::FUTEX_WAIT, 0u32, &ts as *const libc::timespec, 0, 0) };
    }

    /// Waits up to `timeout` for the tool to publish a slot.
    pub(super) fn wait(&self, timeout: Duration) {
        let seen = self.published();
        if seen > self.next {
            return;
        }
        let ts = libc::timespec { tv_sec: 0, tv_nsec: timeout.as_nanos().min(999_999_999) as i64 };
        // SAFETY: a futex wait on the low half of a shared word, with a
        // timeout; the tool never wakes it (it does not know we wait), so
        // the timeout bounds the wait.
        unsafe { libc::syscall(libc::SYS_futex, self.base.add(R_PUBLISHED), libc::FUTEX_WAIT, seen as u32, &ts as *const libc::timespec, 0, 0) };
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, not used after this.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.bytes) };
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A ring file as the tool leaves it: `slots` published, and ended.
    pub(in crate::online) fn ring_file(path: &Path, pid: u32, slots: &[&[u64]]) -> Ring {
        const W: usize = 16;
        let mut words = vec![0u64; RING_HEADER + slots.len() * W];
        words[0] = RING_MAGIC;
        words[R_SLOTS] = slots.len() as u64;
        words[R_SLOT_WORDS] = W as u64;
        words[R_PID] = pid as u64;
        words[R_PUBLISHED] = slots.len() as u64;
        words[R_ENDED] = 1;
        for (i, s) in slots.iter().enumerate() {
            words[R_LENS + i] = s.len() as u64;
            words[RING_HEADER + i * W..RING_HEADER + i * W + s.len()].copy_from_slice(s);
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(path, bytes).unwrap();
        Ring::open(path).unwrap()
    }
}
