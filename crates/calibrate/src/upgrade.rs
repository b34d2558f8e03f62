//! A calibrated profile that an older `splab calibrate` wrote, made one
//! that this splab loads. The profile format gained, since calibrate first
//! wrote profiles, the interval core's `[core]` (in place of `[overlap]`),
//! a first-level instruction cache, the instruction side of the TLB and
//! the memory interface's rate. What the old profile's own measurements
//! give is taken from them, by the rules calibrate uses today: the
//! `[overlap]` section's window, data and walk overlap become the core's
//! window, line-fill buffers and walkers, and the sequential copy's line
//! time becomes the interface's rate. The rest comes from a base profile
//! and says so. Every value already in the old profile stays as it was,
//! with its comment.
//!
//! Given the text report of the same calibration, the cache levels and
//! the memory's latency are read again from its latency curve with this
//! calibrate's inference (`infer::hierarchy_of`), since the inference has
//! changed (a shared last level read from the curve's steps).

use crate::cpu::CacheLeaf;
use crate::figures::cycles;
use crate::infer::{self, Hierarchy, Point};
use crate::notes::Notes;
use crate::profile::{measured_level, method, Base};
use serde::Serialize;
use splab_hw::cache::CacheConfig;
use splab_hw::profile::{default_for_arch, Profile};
use splab_hw::tlb::{TlbArrayConfig, TlbSide};
use toml_edit::{DocumentMut, Item, Table};

/// An upgraded profile: its text, the profile it loads as, and what was
/// changed, a line each.
pub struct Upgraded {
    pub text: String,
    pub profile: Profile,
    pub changes: Vec<String>,
}

/// The command that did it, in comments.
const BY: &str = "splab calibrate --upgrade";

/// `old` (read from `origin`) with what this splab's profiles need added;
/// `base` names the built-in profile unmeasured values come from (default:
/// the one the old profile's header names, else its architecture's);
/// `report` is the calibration's text report and where it was read from.
pub fn upgrade(old: &str, origin: &str, base: Option<&str>, report: Option<(&str, &str)>) -> Result<Upgraded, String> {
    let mut doc: DocumentMut = old.parse().map_err(|e| format!("{origin}: not a TOML file: {e}"))?;
    if report.is_none() && Profile::parse(old, origin).is_ok() {
        return Err(format!("{origin} already loads as a profile of this splab: nothing to upgrade (give --report to read its cache levels again)"));
    }
    let arch = doc.get("arch").and_then(Item::as_str).ok_or_else(|| format!("{origin}: no `arch`: not a machine profile"))?.to_string();
    let base_name = match base {
        Some(b) => b.to_string(),
        None => header_base(old).or_else(|| default_for_arch(&arch).map(String::from)).ok_or_else(|| format!("{origin}: architecture {arch:?} has no built-in profile to take what is missing from"))?,
    };
    let base = Base::named(&base_name).map_err(|e| format!("--base {base_name:?}: {e}"))?;
    if base.profile.arch != arch {
        return Err(format!("--base {base_name:?} is a profile of {}, and {origin} one of {arch}", base.profile.arch));
    }
    let ghz = number(doc.get("freq_ghz")).filter(|g| *g > 0.0).ok_or_else(|| format!("{origin}: no positive `freq_ghz`"))?;
    let from_base = format!("not measured: from {}.toml ({BY})", base.name);
    let mut changes = Vec::new();

    // [overlap] -> [core].
    let overlap = remove_table(&mut doc, "overlap");
    let ov = |k: &str| overlap.as_ref().and_then(|o| o.get(k)).and_then(|i| number(Some(i)));
    // A [core] of one flat price per instruction (`cycles_per_instruction`)
    // is what the interval core replaced: it goes, with nothing taken from
    // it (two chains of additions measure neither width nor window).
    let flat = doc.get("core").and_then(|c| c.get("cycles_per_instruction")).and_then(|i| number(Some(i)));
    if doc.get("core").is_some_and(|c| c.get("width").is_none()) {
        remove_table(&mut doc, "core");
    }
    if let Some(cpi) = flat {
        changes.push(format!("[core] cycles_per_instruction = {cpi} removed: the interval core prices each instruction by its stream"));
    }
    if doc.get("core").is_none() {
        let mut core = base.profile.core.clone();
        let mut why: Vec<(&str, String)> = Vec::new();
        if let Some(w) = ov("window") {
            core.rob = (w.round() as u32).max(1);
            why.push(("rob", format!("measured: [overlap] window = {w}, instructions one chase's latency holds (loops of independent misses), to the nearest whole ({BY})")));
        }
        if let Some(m) = ov("data_mlp") {
            core.mshrs = (m.round() as u32).max(1);
            why.push(("mshrs", format!("measured: [overlap] data_mlp = {m}, best speedup of k independent chases over memory over one, to the nearest whole ({BY})")));
        }
        if let Some(m) = ov("walk_mlp") {
            // As calibrate takes walkers today: the walks in flight, each
            // holding a walker for a walk alone less the second-level
            // TLB's lookup. The walk alone is what the old profile's
            // `walk` was read from: it less stlb_hit and an L2 hit.
            let cost = |k: &str| doc.get("costs").and_then(|c| c.get(k)).and_then(|i| number(Some(i)));
            let l2 = doc.get("cache").and_then(|c| c.get("l2")).and_then(|c| c.get("latency")).and_then(|i| number(Some(i)));
            let (held, how) = match (cost("walk"), cost("stlb_hit"), l2) {
                (Some(w), Some(s), Some(l2)) if w + s + l2 > s => {
                    let one = w + s + l2;
                    (m * (one - s) / one, format!(", each holding a walker for a walk alone ({one:.0} cycles: [costs] walk + stlb_hit + an L2 hit) less the second-level TLB's lookup ({s:.0}): {:.2} walkers", m * (one - s) / one))
                }
                _ => (m, String::new()),
            };
            core.walkers = (held.round() as u32).max(1);
            why.push(("walkers", format!("measured: [overlap] walk_mlp = {m}, walks in flight{how}, to the nearest whole ({BY})")));
        }
        let t = section(&CoreOnly { core: &core }, |p| why.iter().find(|(k, _)| format!("core.{k}") == p).map_or_else(|| from_base.clone(), |(_, w)| w.clone()))?;
        let item = t.get("core").cloned().ok_or("internal error: no [core] rendered")?;
        doc.insert("core", item);
        let measured: Vec<&str> = why.iter().map(|(k, _)| *k).collect();
        changes.push(if measured.is_empty() {
            format!("[core] added from {}.toml", base.name)
        } else {
            format!("[core] added: {} from the old [overlap], the rest from {}.toml", measured.join(", "), base.name)
        });
    }
    if let Some(o) = &overlap {
        let keys: Vec<String> = o.as_table_like().map(|t| t.iter().map(|(k, _)| k.to_string()).collect()).unwrap_or_default();
        changes.push(format!("[overlap] removed ({}): the interval core derives what it held", keys.join(", ")));
    }

    // [cache.l1i].
    let cache = doc.get_mut("cache").and_then(Item::as_table_mut).ok_or_else(|| format!("{origin}: no [cache] sections"))?;
    if cache.get("l1i").is_none() {
        let t = section(&L1iOnly { cache: L1i { l1i: &base.profile.cache.l1i } }, |_| from_base.clone())?;
        let l1i = t.get("cache").and_then(|c| c.get("l1i")).cloned().ok_or("internal error: no [cache.l1i] rendered")?;
        cache.insert("l1i", l1i);
        changes.push(format!("[cache.l1i] added from {}.toml", base.name));
    }

    // The instruction side of the TLB.
    if let Some(Item::ArrayOfTables(tlbs)) = doc.get_mut("tlb") {
        let has_inst = tlbs.iter().any(|t| t.get("side").and_then(Item::as_str) == Some("inst"));
        if !has_inst {
            let inst: Vec<&TlbArrayConfig> = base.profile.tlb.iter().filter(|t| t.side() == TlbSide::Inst).collect();
            for arr in &inst {
                let t = section(&TlbOnly { tlb: vec![*arr] }, |_| from_base.clone())?;
                if let Some(Item::ArrayOfTables(a)) = t.get("tlb") {
                    for entry in a.iter() {
                        let mut e = entry.clone();
                        e.set_position(None);
                        tlbs.push(e);
                    }
                }
            }
            if !inst.is_empty() {
                changes.push(format!("{} instruction-side [[tlb]] arrays added from {}.toml", inst.len(), base.name));
            }
        }
    }

    // [memory] channel_gbs from the sequential copy.
    let line_cycles = doc.get("prefetch").and_then(|p| p.get("line_cycles")).and_then(|i| number(Some(i)));
    if let (Some(mem), Some(lc)) = (doc.get_mut("memory").and_then(Item::as_table_mut), line_cycles) {
        if mem.get("channel_gbs").is_none() && lc > 0.0 {
            let line_ns = lc / ghz;
            let gbs = round2(64.0 / line_ns);
            insert_after(mem, "dram_latency_ns", "channel_gbs", gbs, format!("measured: [prefetch] line_cycles, a sequential copy by one core, {line_ns:.2} ns a line read or written: what one core moves between its caches and memory ({BY})"));
            changes.push(format!("[memory] channel_gbs = {gbs} from the sequential copy's line time"));
        }
    }

    // The cache levels read again from the report's latency curve.
    if let Some((text, from)) = report {
        let (points, leaves) = read_report(text).map_err(|e| format!("--report {from}: {e}"))?;
        let reported = match leaves.as_slice() {
            [a, b, c] => Some([a.size_bytes as f64, b.size_bytes as f64, c.size_bytes as f64]),
            _ => None,
        };
        let h = infer::hierarchy_of(&points, reported).ok_or_else(|| format!("--report {from}: its latency curve does not fit three cache levels and memory"))?;
        relevel(&mut doc, &h, &leaves, ghz, &mut changes)?;
    }

    let mut text = doc.to_string();
    let mut head = format!("# Upgraded by `{BY}` from {origin}, which an older splab calibrate wrote; what it added says `{BY}`.\n");
    if let Some((_, from)) = report {
        head.push_str(&format!("# The cache levels and the memory's latency read again from its report, {from}.\n"));
    }
    text.insert_str(header_end(&text), &head);
    let profile = Profile::parse(&text, "the upgraded profile").map_err(|e| format!("{origin} cannot be upgraded: {e}"))?;
    if changes.is_empty() {
        changes.push("nothing changed".into());
    }
    Ok(Upgraded { text, profile, changes })
}

#[derive(Serialize)]
struct CoreOnly<'a> {
    core: &'a splab_hw::profile::Core,
}

#[derive(Serialize)]
struct L1iOnly<'a> {
    cache: L1i<'a>,
}

#[derive(Serialize)]
struct L1i<'a> {
    l1i: &'a CacheConfig,
}

#[derive(Serialize)]
struct TlbOnly<'a> {
    tlb: Vec<&'a TlbArrayConfig>,
}

/// Removes the table `key` from the root; the comment lines above its
/// header (which belong to what precedes it, as calibrate writes them)
/// go after the last value of the table before it.
fn remove_table(doc: &mut DocumentMut, key: &str) -> Option<Item> {
    let item = doc.remove(key)?;
    let Some(t) = item.as_table() else { return Some(item) };
    let lines: String = t.decor().prefix().and_then(|p| p.as_str()).unwrap_or("").lines().filter(|l| l.trim_start().starts_with('#')).map(|l| format!("\n{}", l.trim_end())).collect();
    if lines.is_empty() {
        return Some(item);
    }
    let at = t.position().unwrap_or(isize::MAX);
    // The table placed last before `at`, and its last value.
    let mut best: Option<(isize, Vec<String>)> = None;
    let mut stack: Vec<(Vec<String>, &Table)> = vec![(Vec::new(), doc.as_table())];
    while let Some((path, table)) = stack.pop() {
        if let Some(p) = table.position().filter(|p| *p < at) {
            if best.as_ref().is_none_or(|(b, _)| p > *b) && table.iter().any(|(_, i)| i.is_value()) {
                best = Some((p, path.clone()));
            }
        }
        for (k, i) in table.iter() {
            if let Item::Table(inner) = i {
                let mut p = path.clone();
                p.push(k.to_string());
                stack.push((p, inner));
            }
        }
    }
    let Some((_, path)) = best else { return Some(item) };
    let mut table = doc.as_table_mut();
    for k in &path {
        table = table.get_mut(k).and_then(Item::as_table_mut)?;
    }
    let last = table.iter().filter(|(_, i)| i.is_value()).map(|(k, _)| k.to_string()).last()?;
    let v = table.get_mut(&last).and_then(Item::as_value_mut)?;
    let suffix = format!("{}{lines}", v.decor().suffix().and_then(|s| s.as_str()).unwrap_or(""));
    v.decor_mut().set_suffix(suffix);
    Some(item)
}

/// An integer or a float.
fn number(i: Option<&Item>) -> Option<f64> {
    let v = i?.as_value()?;
    v.as_float().or_else(|| v.as_integer().map(|n| n as f64))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `value` rendered as sections, every entry with the comment `why` gives
/// its path; the tables carry no place of their own, so that inserted
/// into another document they follow what precedes them there.
fn section(value: &impl Serialize, why: impl Fn(&str) -> String) -> Result<Table, String> {
    let plain: DocumentMut = Notes::default().render(value)?.parse().map_err(|e| format!("internal error: {e}"))?;
    let mut paths = Vec::new();
    leaves(plain.as_table(), "", &mut paths);
    let mut n = Notes::default();
    for p in &paths {
        n.note(p, why(p));
    }
    let mut doc: DocumentMut = n.render(value)?.parse().map_err(|e| format!("internal error: {e}"))?;
    unplace(doc.as_table_mut());
    Ok(doc.as_table().clone())
}

/// The dotted paths of every value under `t`.
fn leaves(t: &Table, at: &str, out: &mut Vec<String>) {
    for (k, item) in t.iter() {
        let p = if at.is_empty() { k.to_string() } else { format!("{at}.{k}") };
        match item {
            Item::Value(_) => out.push(p),
            Item::Table(inner) => leaves(inner, &p, out),
            Item::ArrayOfTables(a) => {
                for (i, inner) in a.iter().enumerate() {
                    leaves(inner, &format!("{p}.{i}"), out);
                }
            }
            Item::None => {}
        }
    }
}

fn unplace(t: &mut Table) {
    t.set_position(None);
    t.decor_mut().set_prefix("\n");
    for (_, item) in t.iter_mut() {
        match item {
            Item::Table(inner) => unplace(inner),
            Item::ArrayOfTables(a) => a.iter_mut().for_each(unplace),
            _ => {}
        }
    }
}

/// Inserts `key = value   # why` into `t` right after `after` (at the end
/// where `t` has no `after`).
fn insert_after(t: &mut Table, after: &str, key: &str, value: f64, why: String) {
    let mut v = toml_edit::Value::from(value);
    v.decor_mut().set_suffix(format!("   # {why}"));
    let rest: Vec<(String, Item)> = match t.get(after) {
        Some(_) => {
            let keys: Vec<String> = t.iter().map(|(k, _)| k.to_string()).collect();
            let i = keys.iter().position(|k| k == after).map_or(keys.len(), |i| i + 1);
            keys[i..].iter().filter_map(|k| t.remove(k).map(|it| (k.clone(), it))).collect()
        }
        None => Vec::new(),
    };
    t.insert(key, Item::Value(v));
    for (k, it) in rest {
        t.insert(&k, it);
    }
}

/// The built-in profile a calibrated profile's header names as its base
/// (`... come from NAME.toml ...`).
fn header_base(text: &str) -> Option<String> {
    let line = text.lines().take_while(|l| l.starts_with('#')).find(|l| l.contains("come from "))?;
    let rest = &line[line.find("come from ")? + "come from ".len()..];
    let name = &rest[..rest.find(".toml")?];
    splab_hw::profile::BUILTIN.iter().any(|(n, _)| *n == name).then(|| name.to_string())
}

/// Where the header's comment lines end (the byte after them).
fn header_end(text: &str) -> usize {
    let mut at = 0;
    for l in text.split_inclusive('\n') {
        if !l.starts_with('#') {
            break;
        }
        at += l.len();
    }
    at
}

/// The latency curve (bytes, ns) and CPUID's data and unified caches, as
/// calibrate's text report prints them.
pub fn read_report(text: &str) -> Result<(Vec<Point>, Vec<CacheLeaf>), String> {
    let mut lines = text.lines().skip_while(|l| !l.trim_start().starts_with("latency "));
    if lines.next().is_none() {
        return Err("no `latency` lines: not a splab calibrate report".into());
    }
    let mut points = Vec::new();
    for l in lines.take_while(|l| l.starts_with("                ")) {
        for tok in l.split("  ").map(str::trim).filter(|t| !t.is_empty()) {
            let (size, ns) = tok.split_once(':').ok_or_else(|| format!("{tok:?} in the latency lines is not SIZE:NS"))?;
            let ns: f64 = ns.parse().map_err(|_| format!("{tok:?}: {ns:?} is not a number"))?;
            points.push(Point::new(bytes(size).ok_or_else(|| format!("{tok:?}: {size:?} is not a size"))?, ns));
        }
    }
    if points.len() < 8 {
        return Err(format!("{} points in the latency curve: too few to read cache levels from", points.len()));
    }
    let mut leaves = Vec::new();
    if let Some(l) = text.lines().find_map(|l| l.trim_start().strip_prefix("CPUID caches")) {
        for part in l.split(',').map(str::trim) {
            // "L2 2 MiB 16-way"
            let w: Vec<&str> = part.split_whitespace().collect();
            let bad = || format!("CPUID caches: {part:?} is not `Ln SIZE UNIT W-way`");
            let [lv, n, unit, ways] = w[..] else { return Err(bad()) };
            let level: u8 = lv.strip_prefix('L').and_then(|x| x.parse().ok()).ok_or_else(bad)?;
            let size = bytes(&format!("{n} {unit}")).ok_or_else(bad)? as u64;
            let ways: u32 = ways.strip_suffix("-way").and_then(|x| x.parse().ok()).ok_or_else(bad)?;
            leaves.push(CacheLeaf { level, kind: if level == 1 { "data".into() } else { "unified".into() }, size_bytes: size, ways, line: 64 });
        }
    }
    Ok((points, leaves))
}

/// "4.8 KiB" as bytes.
fn bytes(s: &str) -> Option<f64> {
    let (n, unit) = s.trim().split_once(' ')?;
    let n: f64 = n.parse().ok()?;
    let shift = match unit {
        "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => return None,
    };
    Some(n * (1u64 << shift) as f64)
}

/// The three cache levels and the memory's latency set from `h`, as
/// calibrate writes them from a calibration's hierarchy.
fn relevel(doc: &mut DocumentMut, h: &Hierarchy, leaves: &[CacheLeaf], ghz: f64, changes: &mut Vec<String>) -> Result<(), String> {
    let cache = doc.get_mut("cache").and_then(Item::as_table_mut).ok_or("no [cache] sections")?;
    for (k, name) in ["l1d", "l2", "l3"].iter().enumerate() {
        let t = cache.get_mut(name).and_then(Item::as_table_mut).ok_or_else(|| format!("no [cache.{name}]"))?;
        let old_ways = number(t.get("ways")).unwrap_or(1.0) as usize;
        let leaf = leaves.iter().find(|l| l.level as usize == k + 1);
        let ways = match leaf {
            Some(l) if l.ways <= 64 => (l.ways as usize, "CPUID leaf 4 (in the report)".to_string()),
            _ => (old_ways, "as the old profile had it".to_string()),
        };
        let (level, notes) = measured_level(h, k, leaf, ways, ghz);
        let before = (number(t.get("size_kb")), number(t.get("latency")));
        for ((key, v), note) in [("size_kb", level.size_kb as i64), ("ways", level.ways as i64), ("latency", level.latency as i64)].into_iter().zip(notes) {
            let mut val = toml_edit::Value::from(v);
            val.decor_mut().set_suffix(format!("   # {note} (read again from the report: {BY})"));
            t.insert(key, Item::Value(val));
        }
        if before != (Some(level.size_kb as f64), Some(level.latency as f64)) {
            changes.push(format!(
                "[cache.{name}] {} KB, {} cycles -> {} KB, {} cycles ({})",
                before.0.map_or("?".into(), |x| format!("{x}")),
                before.1.map_or("?".into(), |x| format!("{x}")),
                level.size_kb,
                level.latency,
                h.method
            ));
        }
    }
    let mem = doc.get_mut("memory").and_then(Item::as_table_mut).ok_or("no [memory] section")?;
    let before = number(mem.get("dram_latency_ns"));
    let ns = (h.memory_ns * 10.0).round() / 10.0;
    let mut val = toml_edit::Value::from(ns);
    val.decor_mut().set_suffix(format!("   # measured: latency curve ({}; {:.1}% rms from the points) (read again from the report: {BY})", method(h, true), 100.0 * h.rms_rel_error));
    mem.insert("dram_latency_ns", Item::Value(val));
    if before != Some(ns) {
        changes.push(format!("[memory] dram_latency_ns {} -> {ns} ({} cycles)", before.map_or("?".into(), |x| format!("{x}")), cycles(ns, ghz)));
    }
    Ok(())
}
