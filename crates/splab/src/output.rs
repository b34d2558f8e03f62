//! Human-readable tables and JSON. Every function here builds a string;
//! `emit` writes it, so that a closed pipe (`splab ... | head`) ends the
//! output quietly instead of panicking inside `println!`.

use serde::Serialize;
use splab_vm::sysctl::Sysctls;
use std::fmt::Write as _;
use std::io::Write as _;

/// The build: the git commit splab was built from, `-dirty` when its
/// files differed from it (build.rs).
pub const BUILD: &str = env!("SPLAB_BUILD");

/// `splab -V`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (build ", env!("SPLAB_BUILD"), ")");

/// Writes text to stdout, ignoring a closed pipe.
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}

/// The arguments `cli::run` was given, when it was (from Python, the
/// process's own are the interpreter's).
static ARGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Sets the arguments `command_line` names (the program's name left out).
pub fn set_command_line(args: Vec<String>) {
    let _ = ARGS.set(args);
}

/// The arguments of the command being run: `cli::run`'s, else the
/// process's.
pub fn args() -> Vec<String> {
    ARGS.get().cloned().unwrap_or_else(|| std::env::args().skip(1).collect())
}

/// The command line this process was started with, as a shell would take
/// it back (`splab` for the program, words with spaces or quotes quoted).
pub fn command_line() -> String {
    let words: Vec<String> = args().iter().map(|a| shell_word(a)).collect();
    std::iter::once("splab".to_string()).chain(words).collect::<Vec<_>>().join(" ")
}

pub fn shell_word(a: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c);
    if !a.is_empty() && a.chars().all(plain) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// A command's document: the command line that made it first (so that
/// `splab report` can title its plots with it), the build that made it,
/// then the document's own fields.
#[derive(Serialize)]
pub struct Document<'a, T: Serialize> {
    pub command: String,
    pub build: &'static str,
    #[serde(flatten)]
    pub body: &'a T,
}

impl<'a, T: Serialize> Document<'a, T> {
    pub fn new(body: &'a T) -> Document<'a, T> {
        Document { command: command_line(), build: BUILD, body }
    }
}

/// A text report with the build named at the end of its first line (its
/// header).
pub fn with_build(mut text: String) -> String {
    let at = text.find('\n').unwrap_or(text.len());
    text.insert_str(at, &format!("; splab build {BUILD}"));
    text
}

/// One pretty-printed JSON document, the only thing `--json` puts on
/// stdout, with the command line that made it (`Document`).
pub fn json<T: Serialize>(v: &T) -> String {
    plain_json(&Document::new(v))
}

/// A pretty-printed JSON value as it is (`splab sysctl --json`, whose keys
/// are sysctl names).
pub fn plain_json<T: Serialize>(v: &T) -> String {
    match serde_json::to_string_pretty(v) {
        Ok(s) => s + "\n",
        // Our records hold only maps with string keys, numbers and text,
        // which always serialise; say so rather than print half a document.
        Err(e) => format!("{{\"error\": {:?}}}\n", e.to_string()),
    }
}

pub use splab_hw::size::num;

/// The change from `off` to `on` as people read it in a comparison.
pub fn change(off: f64, on: f64) -> String {
    match (off == 0.0, on == 0.0) {
        (true, true) => "-".into(),
        (true, false) => "new".into(),
        _ => format!("{:+.1}%", (on - off) / off * 100.0),
    }
}

/// "better" or "worse" for a change of a figure, None when it did not move.
pub fn verdict(off: f64, on: f64, higher_is_better: bool) -> Option<&'static str> {
    if off == on || !off.is_finite() || !on.is_finite() {
        return None;
    }
    Some(if (on > off) == higher_is_better { "better" } else { "worse" })
}

/// A figure's name with its unit, unless the name already says it
/// ("GUP/s", "tps (s)" never doubled into "GUP/s (GUP/s)").
pub fn labelled(name: &str, unit: &str) -> String {
    if unit.is_empty() || name.split_whitespace().any(|w| w == unit) || name.contains(&format!("({unit})")) {
        name.to_string()
    } else {
        format!("{name} ({unit})")
    }
}

/// Sysctls in the order they are listed: the real system's names (FreeBSD's
/// `vm.*`, Linux's `transparent_hugepage.*` and `vmstat.*`) first, then
/// splab's own (`splab.*`), each group by name.
pub fn listed<V>(m: &std::collections::BTreeMap<String, V>) -> Vec<(&String, &V)> {
    let (own, real): (Vec<_>, Vec<_>) = m.iter().partition(|(k, _)| k.starts_with("splab."));
    real.into_iter().chain(own).collect()
}

/// A map serialised in a given order of its entries.
struct Ordered<'a, V>(Vec<(&'a String, V)>);

impl<V: Serialize> Serialize for Ordered<'_, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// `splab sysctl`: `name: value` lines; with `describe`, each followed by
/// its one-line description, indented, so multi-line values stay readable.
pub fn sysctls(s: &Sysctls, describe: bool) -> String {
    let mut o = String::new();
    for (k, v) in listed(&s.values) {
        let _ = writeln!(o, "{k}: {v}");
        if describe {
            let _ = writeln!(o, "\t{}", s.descr.get(k).copied().unwrap_or(""));
        }
    }
    o
}

/// `splab sysctl --json`: keyed by name; with `describe`, each value
/// becomes `{"value": ..., "description": ...}`.
pub fn sysctls_json(s: &Sysctls, describe: bool) -> String {
    let m = listed(&s.values)
        .into_iter()
        .map(|(k, v)| {
            let v = if describe { serde_json::json!({ "value": v, "description": s.descr.get(k).copied().unwrap_or("") }) } else { serde_json::json!(v) };
            (k, v)
        })
        .collect();
    json(&Ordered(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes() {
        assert_eq!(change(0.0, 0.0), "-");
        assert_eq!(change(0.0, 3.0), "new");
        assert_eq!(change(2.0, 3.0), "+50.0%");
        assert_eq!(change(4.0, 1.0), "-75.0%");
    }

    #[test]
    fn verdicts_follow_the_direction_of_the_figure() {
        assert_eq!(verdict(1.0, 2.0, true), Some("better"));
        assert_eq!(verdict(1.0, 2.0, false), Some("worse"));
        assert_eq!(verdict(2.0, 1.0, false), Some("better"));
        assert_eq!(verdict(1.0, 1.0, true), None);
    }
}
