//! A program's processes, and their anonymous mappings, as /proc shows
//! them.
//!
//! The processes of a run are the descendants of splab itself: splab is a
//! child subreaper (PR_SET_CHILD_SUBREAPER), so a process whose parent
//! exits is handed to splab rather than to init, and stays in the tree.
//! Children are read from /proc/PID/task/TID/children (every thread's, as
//! any thread may fork); where the kernel has no such file, /proc is
//! scanned for parent links.

use std::collections::{BTreeSet, HashMap};
use std::fs;

/// The children of `pid`, from its threads' `children` files; None when
/// the kernel has none of them.
fn children_files(pid: i32) -> Option<Vec<i32>> {
    let rd = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out = Vec::new();
    let mut any = false;
    for t in rd.flatten() {
        let Ok(text) = fs::read_to_string(t.path().join("children")) else { continue };
        any = true;
        out.extend(text.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
    }
    any.then_some(out)
}

/// Parent of every process, from /proc/PID/stat.
fn parents() -> HashMap<i32, i32> {
    let mut m = HashMap::new();
    let Ok(rd) = fs::read_dir("/proc") else { return m };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(t) = fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(k) = t.rfind(')') else { continue };
        if let Some(pp) = t[k + 2..].split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
            m.insert(pid, pp);
        }
    }
    m
}

/// Every descendant of `root` (not `root` itself), parents before their
/// children.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut todo = vec![root];
    let mut fallback: Option<HashMap<i32, i32>> = None;
    while let Some(p) = todo.pop() {
        let kids = match children_files(p) {
            Some(k) => k,
            None if p == root || fallback.is_some() => {
                let m = fallback.get_or_insert_with(parents);
                m.iter().filter(|&(_, &pp)| pp == p).map(|(&c, _)| c).collect()
            }
            // A process that vanished between two reads.
            None => Vec::new(),
        };
        for k in kids {
            if seen.insert(k) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// A mapping of a process, as far as promotion cares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
}

/// The private, writable, anonymous mappings in /proc/PID/maps text:
/// no file behind them (inode 0), a name that is empty or one of
/// `[heap]`, `[stack]` or `[anon:...]`.
pub fn anon_vmas(maps: &str) -> Vec<Vma> {
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) = (f.next(), f.next(), f.next(), f.next(), f.next()) else { continue };
        let name = f.next().unwrap_or("");
        if inode != "0" || !perms.starts_with("rw") || perms.as_bytes().get(3) != Some(&b'p') {
            continue;
        }
        if !(name.is_empty() || name == "[heap]" || name == "[stack]" || name.starts_with("[anon:")) {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
        out.push(Vma { start, end });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_private_writable_only() {
        let maps = "\
55e7c0a00000-55e7c0a02000 r--p 00000000 08:01 1234 /usr/bin/xz
55e7c0c00000-55e7c0e00000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0040000000 rw-p 00000000 00:00 0 
7f0040000000-7f0040200000 rw-s 00000000 00:01 99 /dev/zero (deleted)
7f0050000000-7f0050200000 rw-p 00001000 08:01 555 /usr/lib/libc.so.6
7f0060000000-7f0060200000 ---p 00000000 00:00 0 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r--p 00000000 00:00 0 [vvar]
";
        let v = anon_vmas(maps);
        assert_eq!(
            v,
            vec![
                Vma { start: 0x55e7c0c00000, end: 0x55e7c0e00000 },
                Vma { start: 0x7f0000000000, end: 0x7f0040000000 },
                Vma { start: 0x7ffd00000000, end: 0x7ffd00021000 }
            ]
        );
    }

    #[test]
    fn a_child_is_a_descendant() {
        let mut c = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let me = std::process::id() as i32;
        let d = descendants(me);
        let pid = c.id() as i32;
        let _ = c.kill();
        let _ = c.wait();
        assert!(d.contains(&pid), "{d:?} lacks {pid}");
    }
}
