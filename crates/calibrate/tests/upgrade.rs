//! `splab calibrate --upgrade`: a profile an older calibrate wrote
//! (tests/fixtures/older: an Emerald Rapids guest's, from before the
//! interval core) made one this splab loads. Every value the old profile
//! had stays, with its comment; what was added says where it came from;
//! the old profile's measurements give the core's window, line-fill
//! buffers and walkers and the memory interface's rate; with the report,
//! the cache levels are read again from its latency curve.

use splab_calibrate::upgrade::upgrade;
use splab_hw::profile::Profile;
use toml_edit::{DocumentMut, Item, Table};

const OLD: &str = include_str!("fixtures/older/emerald-rapids.toml");
const REPORT: &str = include_str!("fixtures/older/emerald-rapids.txt");

/// Every value under `t`, by dotted path, with its text and comment.
fn values(t: &Table, at: &str, out: &mut Vec<(String, String, String)>) {
    for (k, item) in t.iter() {
        let p = if at.is_empty() { k.to_string() } else { format!("{at}.{k}") };
        match item {
            Item::Value(v) => {
                let comment = v.decor().suffix().and_then(|s| s.as_str()).unwrap_or("").to_string();
                out.push((p, v.clone().decorated("", "").to_string(), comment));
            }
            Item::Table(inner) => values(inner, &p, out),
            Item::ArrayOfTables(a) => a.iter().enumerate().for_each(|(i, inner)| values(inner, &format!("{p}.{i}"), out)),
            Item::None => {}
        }
    }
}

fn all(text: &str) -> Vec<(String, String, String)> {
    let doc: DocumentMut = text.parse().unwrap();
    let mut v = Vec::new();
    values(doc.as_table(), "", &mut v);
    v
}

#[test]
fn the_older_profile_does_not_load_and_says_how_to_upgrade_it() {
    let e = Profile::parse(OLD, "old.toml").unwrap_err();
    assert!(e.contains("splab calibrate --upgrade old.toml"), "{e}");
}

#[test]
fn an_upgraded_profile_loads_keeps_every_old_value_and_marks_what_it_added() {
    let u = upgrade(OLD, "old.toml", None, None).unwrap();
    let p = Profile::parse(&u.text, "new").unwrap();
    assert_eq!(p, u.profile);
    // From the old [overlap]: window 409.2, data_mlp 22.01, walk_mlp 2.16
    // (each walk holding a walker for 38 of its cycles less the 7 of the
    // second-level lookup: 1.76).
    assert_eq!((p.core.rob, p.core.mshrs, p.core.walkers), (409, 22, 2));
    // From the sequential copy: 14.9 cycles at 2.39 GHz a line.
    assert_eq!(p.memory.channel_gbs, Some(10.27));
    // The rest of the core and the instruction side from the base the
    // header names.
    let base = Profile::load("sapphire-rapids").unwrap();
    assert_eq!((p.core.width, p.core.predictor.clone()), (base.core.width, base.core.predictor.clone()));
    assert_eq!(p.cache.l1i, base.cache.l1i);
    assert_eq!(p.tlb.iter().filter(|t| t.side == Some(splab_hw::tlb::TlbSide::Inst)).count(), 2);
    // Every old value and comment is kept, but the two sections the
    // interval core replaced.
    let new = all(&u.text);
    for (path, v, c) in all(OLD) {
        if path.starts_with("overlap.") || path.starts_with("core.") {
            assert!(!new.iter().any(|(p, ..)| *p == path), "{path} kept");
            continue;
        }
        let got = new.iter().find(|(p, ..)| *p == path).unwrap_or_else(|| panic!("{path} lost"));
        assert_eq!((&got.1, &got.2), (&v, &c), "{path}");
    }
    // What is new says who added it.
    let old_paths: Vec<String> = all(OLD).into_iter().map(|(p, ..)| p).collect();
    for (path, _, c) in &new {
        if !old_paths.contains(path) {
            assert!(c.contains("splab calibrate --upgrade"), "{path}: {c}");
        }
    }
    // The comment lines between sections stay.
    assert!(u.text.contains("\n# aged: none; measured:"), "{}", u.text);
    assert!(u.changes.iter().any(|c| c.contains("cycles_per_instruction")), "{:?}", u.changes);
}

#[test]
fn with_its_report_the_cache_levels_are_read_again_from_the_latency_curve() {
    let u = upgrade(OLD, "old.toml", Some("intel-emerald-rapids"), Some((REPORT, "old.txt"))).unwrap();
    let p = &u.profile;
    // The curve leaves the 300 MB last level CPUID reports at about 9.5
    // MB (a guest's share of a shared cache): that is the level, and past
    // it memory.
    assert!((9000..10500).contains(&p.cache.l3.size_kb), "{:?}", p.cache.l3);
    assert_eq!(p.cache.l3.latency, 126);
    assert_eq!(p.memory.dram_latency_ns, 145.5);
    assert_eq!((p.cache.l1d.size_kb, p.cache.l2.size_kb), (48, 2048));
    let base = Profile::load("intel-emerald-rapids").unwrap();
    assert_eq!(p.core.width, base.core.width);
    assert!(u.text.contains("read again from its report, old.txt"), "{}", u.text);
}

#[test]
fn what_cannot_be_upgraded_is_named() {
    let current = splab_hw::profile::BUILTIN[0].1;
    let e = upgrade(current, "new.toml", None, None).err().unwrap();
    assert!(e.contains("nothing to upgrade"), "{e}");
    let e = upgrade(OLD, "old.toml", Some("power9"), None).err().unwrap();
    assert!(e.contains("power9") && e.contains("amd64"), "{e}");
    let e = upgrade(OLD, "old.toml", Some("no-such"), None).err().unwrap();
    assert!(e.contains("no-such"), "{e}");
    let e = upgrade("a = [", "bad.toml", None, None).err().unwrap();
    assert!(e.contains("bad.toml"), "{e}");
    let e = upgrade(OLD, "old.toml", None, Some(("no latency here", "r.txt"))).err().unwrap();
    assert!(e.contains("r.txt"), "{e}");
}
