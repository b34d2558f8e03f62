//! Comments on a TOML document that serde writes: a value is serialised
//! as it is (`toml_edit::ser`), and what a reader should know of each of
//! its entries (where a number came from) is attached afterwards as
//! toml_edit decor, so that the text parses back to the same value with
//! every comment in place.
//!
//! Entries are named by dotted paths from the root: `freq_ghz`,
//! `cache.l1d.size_kb`, `tlb.0.entries` (an array of tables takes an
//! index), `reference` (a table: its comment goes on its header line).

use serde::Serialize;
use toml_edit::{DocumentMut, Item, Table, Value};

/// The comments of one document, by path.
#[derive(Default)]
pub struct Notes {
    /// Whole lines before the first entry.
    header: Vec<String>,
    /// The comment at the end of an entry's line (a key's value, or a
    /// table's header).
    notes: Vec<(String, String)>,
    /// Whole lines (each `# ...`, or empty) right after a key's line.
    after: Vec<(String, Vec<String>)>,
    /// Keys written with this value though serde leaves them out (where
    /// the value is the default, and a comment says it was measured).
    keep: Vec<(String, Value)>,
}

/// Between a value and its comment.
const GAP: &str = "   # ";

impl Notes {
    /// A comment line at the top of the document (without the `#`).
    pub fn header(&mut self, line: impl Into<String>) {
        self.header.push(line.into());
    }

    /// The comment at the end of the line of the entry at `path`.
    pub fn note(&mut self, path: &str, comment: impl Into<String>) {
        self.notes.push((path.to_string(), comment.into()));
    }

    /// Whole comment lines (each starting `#`, or empty) after the line of
    /// the key at `path`.
    pub fn lines_after(&mut self, path: &str, lines: Vec<String>) {
        self.after.push((path.to_string(), lines));
    }

    /// Writes the key at `path` with `value` even where serde leaves it
    /// out.
    pub fn keep(&mut self, path: &str, value: impl Into<Value>) {
        self.keep.push((path.to_string(), value.into()));
    }

    /// `value` as TOML with these comments. Tables and arrays of tables
    /// are written as sections (`[memory]`, `[[tlb]]`), the rest inline. A
    /// path that names no entry of the document is an error, naming it.
    pub fn render(&self, value: &impl Serialize) -> Result<String, String> {
        let doc = toml_edit::ser::to_document(value).map_err(|e| format!("cannot write the document as TOML: {e}"))?;
        let mut root = doc.into_table();
        for (_, item) in root.iter_mut() {
            sections(item);
        }
        for (path, v) in &self.keep {
            let (parent, key) = split(path);
            let t = table_at(&mut root, parent).ok_or_else(|| missing(path))?;
            if !t.contains_key(key) {
                t.insert(key, Item::Value(v.clone()));
            }
        }
        for (path, comment) in &self.notes {
            let d = decor_at(&mut root, path).ok_or_else(|| missing(path))?;
            d.set_suffix(format!("{GAP}{comment}"));
        }
        for (path, lines) in &self.after {
            let (parent, key) = split(path);
            let v = table_at(&mut root, parent).and_then(|t| t.get_mut(key)).and_then(Item::as_value_mut).ok_or_else(|| missing(path))?;
            let mut suffix = v.decor().suffix().and_then(|s| s.as_str()).unwrap_or("").to_string();
            for l in lines {
                suffix.push('\n');
                suffix.push_str(l);
            }
            v.decor_mut().set_suffix(suffix);
        }
        let head: String = self.header.iter().map(|l| format!("# {l}\n")).collect();
        root.decor_mut().set_prefix(head);
        Ok(DocumentMut::from(root).to_string())
    }
}

fn missing(path: &str) -> String {
    format!("internal error: a comment for {path}, which the document does not have")
}

/// A path's parent and its last segment.
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('.').unwrap_or(("", path))
}

/// Inline tables become tables, arrays of them arrays of tables, all the
/// way down; a table that holds only tables is left implicit (no header
/// of its own, as `[cache]` above `[cache.l1d]`).
fn sections(item: &mut Item) {
    let it = std::mem::take(item);
    *item = match it.into_table() {
        Ok(mut t) => {
            for (_, i) in t.iter_mut() {
                sections(i);
            }
            t.set_implicit(true);
            Item::Table(t)
        }
        Err(it) => match it.into_array_of_tables() {
            Ok(mut a) => {
                for t in a.iter_mut() {
                    for (_, i) in t.iter_mut() {
                        sections(i);
                    }
                }
                Item::ArrayOfTables(a)
            }
            Err(it) => it,
        },
    };
}

/// The table at `path` (empty: the root).
fn table_at<'a>(root: &'a mut Table, path: &str) -> Option<&'a mut Table> {
    let mut t = root;
    let mut segs = path.split('.').filter(|s| !s.is_empty()).peekable();
    while let Some(seg) = segs.next() {
        t = match t.get_mut(seg)? {
            Item::Table(inner) => inner,
            Item::ArrayOfTables(a) => a.get_mut(segs.next()?.parse().ok()?)?,
            _ => return None,
        };
    }
    Some(t)
}

/// The decor whose suffix ends the line of the entry at `path`: a value's,
/// or a table header's.
fn decor_at<'a>(root: &'a mut Table, path: &str) -> Option<&'a mut toml_edit::Decor> {
    let (parent, key) = split(path);
    if key.parse::<usize>().is_ok() {
        return table_at(root, path).map(|t| t.decor_mut());
    }
    match table_at(root, parent)?.get_mut(key)? {
        Item::Value(v) => Some(v.decor_mut()),
        Item::Table(t) => Some(t.decor_mut()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Doc {
        name: String,
        level: Vec<Level>,
        inner: Inner,
        outer: Outer,
    }
    #[derive(Serialize)]
    struct Level {
        size: u32,
    }
    #[derive(Serialize)]
    struct Inner {
        x: f64,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        flag: bool,
    }
    #[derive(Serialize)]
    struct Outer {
        a: Inner,
    }

    /// Comments land on keys, table headers and between lines; a key serde
    /// left out is written where asked; a table of tables has no header.
    #[test]
    fn comments_go_where_their_paths_say() {
        let d = Doc { name: "n".into(), level: vec![Level { size: 1 }, Level { size: 2 }], inner: Inner { x: 1.5, flag: false }, outer: Outer { a: Inner { x: 0.25, flag: true } } };
        let mut n = Notes::default();
        n.header("first line");
        n.note("name", "given");
        n.note("level.1", "the second");
        n.note("level.1.size", "two");
        n.note("inner", "a table");
        n.keep("inner.flag", false);
        n.note("inner.flag", "measured false");
        n.lines_after("inner.x", vec!["".into(), "# after x".into()]);
        n.note("outer.a.x", "deep");
        let text = n.render(&d).unwrap();
        let want = "# first line\nname = \"n\"   # given\n\n[[level]]\nsize = 1\n\n[[level]]   # the second\nsize = 2   # two\n\n[inner]   # a table\nx = 1.5\n\n# after x\nflag = false   # measured false\n\n[outer.a]\nx = 0.25   # deep\nflag = true\n";
        assert_eq!(text, want);
        for bad in ["nothing", "level.2", "inner.x.y", "outer.b"] {
            let mut n = Notes::default();
            n.note(bad, "x");
            let e = n.render(&d).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }
}
