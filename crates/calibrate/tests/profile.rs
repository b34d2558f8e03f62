//! The profile written for real calibrations: each fixture in
//! tests/fixtures/profiles holds a calibration (a quick one of a KVM guest,
//! and variants of it that take the writer's other branches) and the text
//! a plain line-by-line writer gave for it (tests/fixtures/README.md). The
//! serde writer's text must read back as the same profile, keep every
//! comment that text had, and give every key a comment (its own, or its
//! table header's): each number says where it came from.

use splab_calibrate::measure::Calibration;
use splab_calibrate::profile::{write, Base};
use splab_hw::profile::Profile;
use std::collections::BTreeMap;
use toml_edit::{DocumentMut, Item, Table};

struct Case {
    name: String,
    calibration: Calibration,
    base: Base,
    profile_name: String,
    virt_section: bool,
    text: String,
}

fn cases() -> Vec<Case> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/profiles");
    let mut v: Vec<Case> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let s = |k: &str| j[k].as_str().unwrap_or_else(|| panic!("{}: no {k}", p.display())).to_string();
            Case {
                name: p.file_stem().unwrap().to_string_lossy().into(),
                calibration: serde_json::from_value(j["calibration"].clone()).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
                base: Base::named(&s("base")).unwrap(),
                profile_name: s("name"),
                virt_section: j["virt_section"].as_bool().unwrap(),
                text: s("profile"),
            }
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(v.len() >= 5, "fixtures missing from {dir}");
    v
}

/// The comment at the end of a line, from its decor.
fn comment(suffix: Option<&toml_edit::RawString>) -> Option<String> {
    let s = suffix?.as_str()?;
    s.find('#').map(|i| s[i + 1..].trim().to_string())
}

/// Every key of a document by dotted path (arrays of tables by index),
/// with its comment, or else its table header's.
fn keys(text: &str) -> BTreeMap<String, Option<String>> {
    fn walk(t: &Table, path: &str, header: Option<String>, out: &mut BTreeMap<String, Option<String>>) {
        for (k, item) in t.iter() {
            let p = if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
            match item {
                Item::Value(v) => {
                    out.insert(p, comment(v.decor().suffix()).or(header.clone()));
                }
                Item::Table(t) => walk(t, &p, comment(t.decor().suffix()), out),
                Item::ArrayOfTables(a) => {
                    for (i, t) in a.iter().enumerate() {
                        walk(t, &format!("{p}.{i}"), comment(t.decor().suffix()), out);
                    }
                }
                Item::None => {}
            }
        }
    }
    let doc: DocumentMut = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut out = BTreeMap::new();
    walk(doc.as_table(), "", None, &mut out);
    out
}

/// With SPLAB_WRITE_FIXTURES=1, the test writes the writer's text into
/// each fixture instead of comparing (after a change of the profile's
/// schema; the diff of the fixtures shows what changed).
#[test]
fn the_serde_profile_reads_back_as_the_plain_one_with_every_comment() {
    let rewrite = std::env::var_os("SPLAB_WRITE_FIXTURES").is_some();
    for c in cases() {
        let w = write(&c.calibration, &c.base, &c.profile_name, c.virt_section).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        if rewrite {
            let path = format!("{}/tests/fixtures/profiles/{}.json", env!("CARGO_MANIFEST_DIR"), c.name);
            let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            j["profile"] = serde_json::Value::String(w.text.clone());
            std::fs::write(&path, serde_json::to_string_pretty(&j).unwrap() + "\n").unwrap();
            continue;
        }
        let (new, old) = (&w.text, &c.text);
        let want = Profile::parse(old, &c.name).unwrap();
        assert_eq!(Profile::parse(new, &c.name).unwrap(), want, "{}:\n{new}", c.name);
        assert_eq!(w.profile, want, "{}", c.name);
        let (nk, ok) = (keys(new), keys(old));
        for (path, was) in &ok {
            if let Some(was) = was {
                assert_eq!(nk.get(path).and_then(|x| x.as_ref()), Some(was), "{}: {path}\n{new}", c.name);
            }
        }
        for l in old.lines().filter(|l| l.starts_with('#')) {
            assert!(new.lines().any(|n| n == l), "{}: lost the line {l:?}\n{new}", c.name);
        }
        let bare: Vec<&String> = nk.iter().filter(|(_, c)| c.is_none()).map(|(p, _)| p).collect();
        assert!(bare.is_empty(), "{}: keys without a comment: {bare:?}\n{new}", c.name);
    }
}
