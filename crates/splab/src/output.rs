//! Human-readable tables and JSON. Every function here builds a string;
//! `emit` writes it, so that a closed pipe (`splab ... | head`) ends the
//! output quietly instead of panicking inside `println!`.

use crate::run::{Comparison, SimRun};
use crate::size;
use serde::Serialize;
use splab_vm::sysctl::{SysctlValue, Sysctls};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;

/// Writes text to stdout, ignoring a closed pipe.
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
}

/// One pretty-printed JSON document, the only thing `--json` puts on stdout.
pub fn json<T: Serialize>(v: &T) -> String {
    match serde_json::to_string_pretty(v) {
        Ok(s) => s + "\n",
        // Our records hold only maps with string keys, numbers and text,
        // which always serialise; say so rather than print half a document.
        Err(e) => format!("{{\"error\": {:?}}}\n", e.to_string()),
    }
}

/// A number for a table: whole numbers as they are, others to about four
/// significant digits.
pub fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    format!("{v:.digits$}")
}

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

fn tlb_table(out: &mut String, r: &SimRun) {
    let t = &r.tlb;
    let _ = writeln!(out, "  {:<22}{:>14}{:>14}{:>14}", "TLB (page size)", "L1 hits", "L2 hits", "misses");
    for (i, s) in t.sizes.iter().enumerate() {
        let _ = writeln!(out, "  {:<22}{:>14}{:>14}{:>14}", format!("  {s}"), t.l1_hits[i], t.l2_hits[i], t.misses[i]);
    }
    let total = |v: &[u64]| v.iter().sum::<u64>();
    let _ = writeln!(out, "  {:<22}{:>14}{:>14}{:>14}", "  total", total(&t.l1_hits), total(&t.l2_hits), t.total_misses);
}

/// `splab sim`: the workload's report, a summary, then every sysctl.
pub fn sim(r: &SimRun) -> String {
    let mut o = String::new();
    o.push_str(&r.report);
    let sp = if r.superpages { "on" } else { "off" };
    let _ = writeln!(
        o,
        "\nSummary: {}, superpages {sp}, {} on {}, {} memory",
        r.workload_detail,
        r.arch,
        r.machine,
        size::show(r.memory_bytes)
    );
    let _ = writeln!(o, "  {:<22}{} s timed, {} s in all", "simulated time", num(r.sim_seconds), num(r.sim_seconds_total));
    let _ = writeln!(o, "  {:<22}{} ({} loads, {} stores)", "memory references", r.refs, r.hw.loads, r.hw.stores);
    let _ = writeln!(
        o,
        "  {:<22}{} s (setup {} s), {} refs/s",
        "host time",
        num(r.host_seconds),
        num(r.host_setup_seconds),
        num(r.refs_per_second().round())
    );
    tlb_table(&mut o, r);
    let per_walk = r.hw.walk_mem_refs as f64 / r.hw.walks.max(1) as f64;
    let _ = writeln!(o, "  {:<22}{} ({} memory refs, {} per walk)", "page walks", r.hw.walks, r.hw.walk_mem_refs, num(per_walk));
    if r.hw.nested_refs > 0 {
        let host = r.hw.nested_refs as f64 / r.hw.walks.max(1) as f64;
        let _ = writeln!(o, "  {:<22}{} host table refs ({} per walk)", "  nested", r.hw.nested_refs, num(host));
    }
    if r.hw.prefetched > 0 {
        let _ = writeln!(o, "  {:<22}{} L2 misses covered by the stream prefetcher", "prefetched", r.hw.prefetched);
    }
    if r.hw.writebacks > 0 {
        let _ = writeln!(o, "  {:<22}{} dirty lines written back to memory", "writebacks", r.hw.writebacks);
    }
    let _ = writeln!(o, "  {:<22}{}", "page faults", r.events.faults);
    if let Some(l) = &r.layout {
        let _ = writeln!(o, "  {:<22}{}", "page layout", l.line());
    }
    let _ = writeln!(o, "  {:<22}{}", "model host memory", size::show(r.host_model_bytes));
    if r.swap_bytes > 0 {
        let i = |k: &str| r.sysctl.get(k).map(|v| v.to_string()).unwrap_or_default();
        let _ = writeln!(
            o,
            "  {:<22}{} swap, {} pages out, {} pages in",
            "paging",
            size::show(r.swap_bytes),
            i("vm.stats.vm.v_swappgsout"),
            i("vm.stats.vm.v_swappgsin")
        );
    }
    for k in &r.oom_kills {
        let _ = writeln!(o, "  {:<22}{k}", "killed (OOM)");
    }
    if let Some(s) = &r.stale_samples {
        let _ = writeln!(o, "  {:<22}{}", "stale translations", r.hw.stale_translations);
        for line in s {
            let _ = writeln!(o, "    {line}");
        }
    }
    o.push('\n');
    let all = Sysctls { values: r.sysctl.clone(), ..Default::default() };
    o.push_str(&all.render());
    o
}

/// `splab compare`: the runs side by side, then every integer sysctl.
pub fn compare(c: &Comparison) -> String {
    let (off, on) = (&c.off, &c.on);
    let mut o = String::new();
    let _ = writeln!(o, "{} on {} ({}), {} memory", off.workload_detail, off.machine, off.arch, size::show(off.memory_bytes));
    if let Some(l) = &on.layout {
        // The off run has no superpages whatever the layout; the on run's
        // layout is the one asked for.
        let _ = writeln!(o, "superpages on: {}", l.line());
    }
    o.push('\n');
    let row = |o: &mut String, name: &str, a: f64, b: f64| {
        let _ = writeln!(o, "{name:<34}{:>16}{:>16}{:>10}", num(a), num(b), change(a, b));
    };
    let _ = writeln!(o, "{:<34}{:>16}{:>16}{:>10}", "", "superpages off", "superpages on", "change");
    // The workload's own figure, with whether the change is for the better
    // (a time or latency that falls is an improvement, a rate that falls is
    // not).
    row(&mut o, &off.figure.name, off.figure.value, on.figure.value);
    if let Some(v) = verdict(off.figure.value, on.figure.value, off.figure.higher_is_better) {
        o.pop();
        let _ = writeln!(o, " {v}");
    }
    row(&mut o, "simulated seconds (timed)", off.sim_seconds, on.sim_seconds);
    row(&mut o, "memory references", off.refs as f64, on.refs as f64);
    row(&mut o, "TLB misses", off.tlb.total_misses as f64, on.tlb.total_misses as f64);
    for (i, s) in off.tlb.sizes.iter().enumerate() {
        let b = on.tlb.misses.get(i).copied().unwrap_or(0);
        row(&mut o, &format!("  {s} misses"), off.tlb.misses[i] as f64, b as f64);
    }
    row(&mut o, "page walks", off.hw.walks as f64, on.hw.walks as f64);
    row(&mut o, "walk memory refs", off.hw.walk_mem_refs as f64, on.hw.walk_mem_refs as f64);
    if off.hw.nested_refs + on.hw.nested_refs > 0 {
        row(&mut o, "  of them host table refs", off.hw.nested_refs as f64, on.hw.nested_refs as f64);
        let per = |r: &SimRun| r.hw.walk_mem_refs as f64 / r.hw.walks.max(1) as f64;
        row(&mut o, "walk memory refs per walk", per(off), per(on));
    }
    if off.hw.prefetched + on.hw.prefetched > 0 {
        row(&mut o, "prefetched L2 misses", off.hw.prefetched as f64, on.hw.prefetched as f64);
    }
    if off.hw.writebacks + on.hw.writebacks > 0 {
        row(&mut o, "writebacks", off.hw.writebacks as f64, on.hw.writebacks as f64);
    }
    row(&mut o, "host seconds", off.host_seconds, on.host_seconds);

    // Every sysctl that is an integer in either run; a name missing from
    // one run counts as 0 there.
    let int = |r: &SimRun, k: &str| match r.sysctl.get(k) {
        Some(SysctlValue::Int(v)) => Some(*v),
        _ => None,
    };
    let names: BTreeSet<&String> = off.sysctl.keys().chain(on.sysctl.keys()).collect();
    let ints: Vec<&String> = names.iter().copied().filter(|k| int(off, k).is_some() || int(on, k).is_some()).collect();
    let w = ints.iter().map(|k| k.len()).max().unwrap_or(0).max(6) + 2;
    let _ = writeln!(o, "\n{:<w$}{:>14}{:>14}{:>10}", "sysctl", "off", "on", "change");
    for k in &ints {
        let (a, b) = (int(off, k).unwrap_or(0), int(on, k).unwrap_or(0));
        let _ = writeln!(o, "{k:<w$}{a:>14}{b:>14}{:>10}", change(a as f64, b as f64));
    }
    for k in names.iter().filter(|k| !ints.contains(k)) {
        for (label, r) in [("off", off), ("on", on)] {
            let v = r.sysctl.get(*k).map(|v| v.to_string().trim_end().to_string()).unwrap_or_default();
            let _ = writeln!(o, "\n{k} (superpages {label}): {v}");
        }
    }
    o
}

/// `splab sysctl`: `name: value` lines; with `describe`, each followed by
/// its one-line description, indented, so multi-line values stay readable.
pub fn sysctls(s: &Sysctls, describe: bool) -> String {
    if !describe {
        return s.render();
    }
    let mut o = String::new();
    for (k, v) in &s.values {
        let d = s.descr.get(k).copied().unwrap_or("");
        let _ = writeln!(o, "{k}: {v}\n\t{d}");
    }
    o
}

/// `splab sysctl --json`: keyed by name; with `describe`, each value
/// becomes `{"value": ..., "description": ...}`.
pub fn sysctls_json(s: &Sysctls, describe: bool) -> String {
    if !describe {
        return json(&s.values);
    }
    let m: serde_json::Map<String, serde_json::Value> = s
        .values
        .iter()
        .map(|(k, v)| {
            let d = s.descr.get(k).copied().unwrap_or("");
            (k.clone(), serde_json::json!({ "value": v, "description": d }))
        })
        .collect();
    json(&m)
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

    #[test]
    fn numbers() {
        assert_eq!(num(12.0), "12");
        assert_eq!(num(0.012345), "0.01235");
        assert_eq!(num(1234.5678), "1235");
        assert_eq!(num(1.23456), "1.235");
    }
}
