//! valgrind lackey text: the log of `valgrind --tool=lackey --trace-mem=yes`.
//!
//! ```text
//! ==4349== Lackey, an example Valgrind tool        valgrind's own lines: skipped
//! I  04001c2e,3                                    instruction fetch, hex address, decimal size
//!  L 1ffefffd68,8                                  load
//!  S 1ffefffd60,8                                  store
//!  M 0403a1d0,4                                    modify (load and store)
//! SYSCALL[4349,1](9) sys_mmap ( 0x0, 8192, 3, 34, 4294967295, 0 ) --> [pre-success] Success(0x4835000)
//! ```
//!
//! The `SYSCALL[` lines are there when valgrind also ran with
//! `--trace-syscalls=yes` (as `splab trace record` runs it); from mmap,
//! munmap, mremap and brk results they give the program's address-space
//! events, and from open/openat results the names of mapped files. Other
//! syscalls, failed calls and lines of a shape this reader does not know
//! are skipped: they are valgrind's diagnostics, not references. `--pid--`
//! lines (valgrind's warnings), ` --> ` lines (the second half of a syscall
//! line valgrind broke) and blank lines are skipped too; any other line is
//! an error naming its number.

use crate::{prot, show_bytes, Event, Format, Kind, Origin, Ref, Region, Source, Step, TraceError};
use std::collections::{HashMap, VecDeque};
use std::io::{self, BufRead};

/// Longest line kept (lackey's are under 40 bytes; syscall lines with
/// paths can be longer). A longer line is an error, so memory stays bounded.
const MAX_LINE: usize = 64 << 10;

/// Most file descriptors whose paths are remembered.
const MAX_FDS: usize = 4096;

pub struct Reader<R: BufRead> {
    r: R,
    line: Vec<u8>,
    lineno: u64,
    sys: Syscalls,
    events: VecDeque<Event>,
    done: bool,
}

impl<R: BufRead> Reader<R> {
    pub fn new(r: R) -> Reader<R> {
        Reader { r, line: Vec::with_capacity(256), lineno: 0, sys: Syscalls::default(), events: VecDeque::new(), done: false }
    }

    /// Reads the next line into `self.line` without its end; false at the end.
    fn next_line(&mut self) -> Result<bool, TraceError> {
        self.line.clear();
        let mut limited = io::Read::take(&mut self.r, MAX_LINE as u64 + 1);
        let n = loop {
            match limited.read_until(b'\n', &mut self.line) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TraceError::at_line(self.lineno + 1, format!("read error: {e}"))),
            }
        };
        if n == 0 {
            return Ok(false);
        }
        self.lineno += 1;
        if self.line.len() > MAX_LINE {
            return Err(TraceError::at_line(self.lineno, format!("line longer than {MAX_LINE} bytes")));
        }
        while matches!(self.line.last(), Some(b'\n' | b'\r')) {
            self.line.pop();
        }
        Ok(true)
    }
}

/// Parses `addr,size` (hex address without 0x, decimal size).
#[inline]
fn addr_size(s: &[u8]) -> Option<(u64, u32)> {
    let comma = s.iter().position(|&c| c == b',')?;
    let (a, z) = (&s[..comma], &s[comma + 1..]);
    if a.is_empty() || a.len() > 16 || z.is_empty() || z.len() > 10 {
        return None;
    }
    let mut addr = 0u64;
    for &c in a {
        let d = (c as char).to_digit(16)?;
        addr = addr << 4 | d as u64;
    }
    let mut size = 0u64;
    for &c in z {
        if !c.is_ascii_digit() {
            return None;
        }
        size = size * 10 + (c - b'0') as u64;
    }
    u32::try_from(size).ok().map(|s| (addr, s))
}

/// What one line is.
enum Line {
    Ref(Ref),
    Skip,
    Syscall,
}

#[inline]
fn classify(l: &[u8]) -> Option<Line> {
    let kind = match l {
        [b'I', b' ', b' ', ..] => Some((Kind::Instr, 3)),
        [b' ', b'L', b' ', ..] => Some((Kind::Load, 3)),
        [b' ', b'S', b' ', ..] => Some((Kind::Store, 3)),
        [b' ', b'M', b' ', ..] => Some((Kind::Modify, 3)),
        _ => None,
    };
    if let Some((kind, skip)) = kind {
        let (addr, size) = addr_size(&l[skip..])?;
        return Some(Line::Ref(Ref { addr, size, kind }));
    }
    // " --> [pre-fail] ..." ends a syscall line valgrind broke in two.
    if l.is_empty() || l.starts_with(b"==") || l.starts_with(b"--") || l.starts_with(b"**") || l.starts_with(b" --> ") {
        return Some(Line::Skip);
    }
    if l.starts_with(b"SYSCALL[") {
        return Some(Line::Syscall);
    }
    None
}

impl<R: BufRead> Source for Reader<R> {
    fn format(&self) -> Format {
        Format::Lackey
    }

    fn read(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<Step, TraceError> {
        loop {
            if let Some(e) = self.events.pop_front() {
                return Ok(Step::Event(e));
            }
            if self.done {
                return Ok(Step::End);
            }
            if out.len() >= max {
                return Ok(Step::Full);
            }
            if !self.next_line()? {
                self.done = true;
                continue;
            }
            match classify(&self.line) {
                Some(Line::Ref(r)) => out.push(r),
                Some(Line::Skip) => {}
                Some(Line::Syscall) => {
                    let text = String::from_utf8_lossy(&self.line).into_owned();
                    self.sys.line(&text, &mut self.events);
                }
                None => {
                    return Err(TraceError::at_line(
                        self.lineno,
                        format!(
                            "expected a lackey line (\"I  addr,size\", \" L|S|M addr,size\" with a hex address and decimal size, \"==pid== ...\" or \"SYSCALL[...\"), found {}",
                            show_bytes(&self.line)
                        ),
                    ))
                }
            }
        }
    }
}

/// The state needed to turn valgrind's syscall lines into events: calls
/// whose result comes on a later line, the brk heap, and open files.
#[derive(Default)]
struct Syscalls {
    /// (thread, syscall number) to (name, arguments) of calls in progress.
    pending: HashMap<(String, u64), (String, Vec<String>)>,
    /// Start and current end of the brk heap.
    brk: Option<(u64, u64)>,
    /// Paths of open file descriptors.
    fds: HashMap<u64, String>,
}

/// Parses a syscall argument or result as valgrind prints them: decimal, or
/// hex with 0x (a path may follow in parentheses).
fn number(s: &str) -> Option<u64> {
    let s = s.trim_start();
    let s = &s[..s.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(s.len())];
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The path in an argument like `0x4835540(/lib/libc.so.6)`.
fn path_arg(s: &str) -> Option<String> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    (close > open + 1).then(|| s[open + 1..close].to_string())
}

const PAGE: u64 = 4096;

fn page_up(v: u64) -> Option<u64> {
    v.checked_add(PAGE - 1).map(|x| x & !(PAGE - 1))
}

/// A region from `start` for `len` bytes rounded to pages, if it is one.
fn region(start: u64, len: u64, prot: u8, origin: Origin, name: String) -> Option<Region> {
    let start = start & !(PAGE - 1);
    let len = page_up(len)?;
    (len > 0 && start.checked_add(len).is_some()).then_some(Region { start, len, prot, origin, name })
}

impl Syscalls {
    /// Handles one `SYSCALL[pid,tid](num) ...` line, queueing the events it
    /// completes.
    fn line(&mut self, l: &str, out: &mut VecDeque<Event>) {
        let Some(rest) = l.strip_prefix("SYSCALL[") else { return };
        let Some((thread, rest)) = rest.split_once("](") else { return };
        let Some((num, rest)) = rest.split_once(')') else { return };
        let Ok(num) = num.trim().parse::<u64>() else { return };
        let key = (thread.to_string(), num);
        let rest = rest.trim_start();
        let result = rest.rfind("Success(").and_then(|i| number(&rest[i + 8..]));
        if let Some(after) = rest.strip_prefix("...") {
            // The second half of a call that blocked: "... [async] --> Success(0x4)".
            if after.contains("-->") {
                if let (Some((name, args)), Some(res)) = (self.pending.remove(&key), result) {
                    self.done(&name, &args, res, out);
                }
            }
            return;
        }
        let Some((name, rest)) = rest.split_once(' ') else { return };
        let Some(open) = rest.find('(') else { return };
        let Some(close) = rest.find(" )").or_else(|| rest.find(')')) else { return };
        if close < open {
            return;
        }
        let args: Vec<String> = rest[open + 1..close].split(", ").map(|a| a.trim().to_string()).collect();
        let name = name.trim_start_matches("sys_").to_string();
        if let Some(res) = result {
            self.done(&name, &args, res, out);
        } else if rest.contains("[async]") && !rest.contains("Failure") {
            if self.pending.len() >= MAX_FDS {
                self.pending.clear();
            }
            self.pending.insert(key, (name, args));
        }
    }

    /// A call that succeeded with result `res`.
    fn done(&mut self, name: &str, args: &[String], res: u64, out: &mut VecDeque<Event>) {
        let arg = |i: usize| args.get(i).and_then(|a| number(a));
        match name {
            "mmap" | "mmap2" => {
                let (Some(len), Some(p), Some(flags)) = (arg(1), arg(2), arg(3)) else { return };
                const MAP_ANONYMOUS: u64 = 0x20;
                let fd = arg(4).unwrap_or(u64::MAX);
                let (origin, name) = if flags & MAP_ANONYMOUS != 0 {
                    (Origin::Anon, String::new())
                } else {
                    (Origin::File, self.fds.get(&fd).cloned().unwrap_or_default())
                };
                let p = (p & 7) as u8;
                if let Some(r) = region(res, len, p, origin, name) {
                    out.push_back(Event::Map(r));
                }
            }
            "munmap" => {
                if let (Some(start), Some(len)) = (arg(0), arg(1)) {
                    if let Some(Region { start, len, .. }) = region(start, len, 0, Origin::Unknown, String::new()) {
                        out.push_back(Event::Unmap { start, len });
                    }
                }
            }
            "mremap" => {
                let (Some(old), Some(old_len), Some(new_len)) = (arg(0), arg(1), arg(2)) else { return };
                if let Some(Region { start, len, .. }) = region(old, old_len, 0, Origin::Unknown, String::new()) {
                    out.push_back(Event::Unmap { start, len });
                }
                if let Some(r) = region(res, new_len, prot::READ | prot::WRITE, Origin::Anon, String::new()) {
                    out.push_back(Event::Map(r));
                }
            }
            "brk" => match self.brk {
                None => self.brk = Some((res, res)),
                Some((base, cur)) => {
                    let (cur_p, res_p) = (page_up(cur).unwrap_or(cur), page_up(res).unwrap_or(res));
                    if res_p > cur_p && res >= base {
                        if let Some(r) = region(cur_p, res_p - cur_p, prot::READ | prot::WRITE, Origin::Brk, "[heap]".into()) {
                            out.push_back(Event::Map(r));
                        }
                    } else if res_p < cur_p && res >= base {
                        out.push_back(Event::Unmap { start: res_p, len: cur_p - res_p });
                    }
                    self.brk = Some((base, res));
                }
            },
            "open" | "openat" => {
                let path_at = if name == "open" { 0 } else { 1 };
                if let Some(p) = args.get(path_at).and_then(|a| path_arg(a)) {
                    if self.fds.len() >= MAX_FDS {
                        self.fds.clear();
                    }
                    self.fds.insert(res, p);
                }
            }
            "close" => {
                if let Some(fd) = arg(0) {
                    self.fds.remove(&fd);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str) -> Result<(Vec<Ref>, Vec<Event>), TraceError> {
        let mut r = Reader::new(text.as_bytes());
        let (mut refs, mut evs) = (Vec::new(), Vec::new());
        loop {
            match r.read(&mut refs, 1000)? {
                Step::End => return Ok((refs, evs)),
                Step::Event(e) => evs.push(e),
                Step::Full => {}
            }
        }
    }

    #[test]
    fn parses_lines_and_syscalls() {
        let t = "==1== Lackey\nI  04001c2e,3\n L 1ffefffd68,8\n S 1ffefffd60,8\r\n M 0403a1d0,4\n--1-- warning\n\n\
SYSCALL[1,1](12) sys_brk ( 0x0 ) --> [pre-success] Success(0x4035000) \n\
SYSCALL[1,1](257) sys_openat ( 4294967196, 0x4834bb0(/lib/libc.so.6), 524288 ) --> [async] ... \n\
SYSCALL[1,1](257) ... [async] --> Success(0x4) \n\
SYSCALL[1,1](9) sys_mmap ( 0x0, 16400, 1, 2050, 4, 0 ) --> [pre-success] Success(0x4837000) \n\
SYSCALL[1,1](12) sys_brk ( 0x4056000 ) --> [pre-success] Success(0x4056000) \n\
SYSCALL[1,1](11) sys_munmap ( 0x4837000, 16400 )[sync] --> Success(0x0) \n\
I  0400000,15\n";
        let (refs, evs) = read_all(t).unwrap();
        assert_eq!(refs.len(), 5);
        assert_eq!(refs[1], Ref { addr: 0x1ffefffd68, size: 8, kind: Kind::Load });
        assert_eq!(refs[3].kind, Kind::Modify);
        assert_eq!(evs.len(), 3, "{evs:?}");
        assert_eq!(
            evs[0],
            Event::Map(Region { start: 0x4837000, len: 0x5000, prot: 1, origin: Origin::File, name: "/lib/libc.so.6".into() })
        );
        assert_eq!(evs[1], Event::Map(Region { start: 0x4035000, len: 0x21000, prot: 3, origin: Origin::Brk, name: "[heap]".into() }));
        assert_eq!(evs[2], Event::Unmap { start: 0x4837000, len: 0x5000 });
    }

    #[test]
    fn errors_name_the_line() {
        let e = read_all("I  0400,3\n L zz,8\n").unwrap_err();
        assert_eq!(e.pos, Some(crate::Pos::Line(2)));
        assert!(e.to_string().starts_with("line 2: expected a lackey line"), "{e}");
        assert!(read_all(" L 12345678901234567,8\n").is_err());
        assert!(read_all(" L 1234,99999999999\n").is_err());
    }
}
