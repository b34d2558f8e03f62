//! The text reports of `sim`, `compare` and `compare --policies`, drawn
//! from the runs' records (`simulate`).

use crate::output::{change, labelled, listed, num, verdict, BUILD};
use crate::simulate::{Comparison, PolicyComparison, SimRun};
use splab_hw::size;
use splab_vm::policy::PolicySpec;
use splab_vm::sysctl::SysctlValue;
use std::collections::BTreeSet;
use std::fmt::Write as _;

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
        "\nSummary: {}, superpages {sp}, {} on {}, {} memory; splab build {BUILD}",
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
    memory_lines(&mut o, r);
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
    for (k, v) in listed(&r.sysctl) {
        let _ = writeln!(o, "{k}: {v}");
    }
    o
}

/// Superpages made in a run: promotions, direct superpage mappings and
/// superpage allocations, over every size.
fn superpages_made(r: &SimRun) -> i64 {
    r.sysctl
        .iter()
        .filter(|(k, _)| {
            let tail = k.rsplit('.').next().unwrap_or("");
            (k.starts_with("vm.pmap.") && ["promotions", "mappings"].contains(&tail)) || k.starts_with("vm.superpages.alloc.") || ["vmstat.thp_fault_alloc", "vmstat.thp_collapse_alloc"].contains(&k.as_str())
        })
        .map(|(_, v)| if let SysctlValue::Int(n) = v { *n } else { 0 })
        .sum()
}

/// When superpages on changed nothing, one line saying why: none was
/// made, because promotion failed or because the memory never fills a
/// reservation; or some were and the TLB misses did not move.
fn unchanged(off: &SimRun, on: &SimRun) -> Option<String> {
    if !on.superpages || off.figure.value != on.figure.value {
        return None;
    }
    let made = superpages_made(on);
    if made > 0 {
        return Some(format!("(superpages changed nothing: {made} were made, yet the TLB misses went from {} to {})", off.tlb.total_misses, on.tlb.total_misses));
    }
    let failures: i64 = on.sysctl.iter().filter(|(k, _)| k.starts_with("vm.pmap.") && k.ends_with(".p_failures")).map(|(_, v)| if let SysctlValue::Int(n) = v { *n } else { 0 }).sum();
    if failures > 0 {
        return Some(format!("(superpages changed nothing: none was made; promotion was tried and failed {failures} times, --all shows the reasons)"));
    }
    let reserv = splab_pmap::arch::lookup(&on.arch).ok().map(|a| a.page_sizes[a.reserv_psind.index()]);
    match reserv {
        Some(r) if on.memory.resident_peak_bytes < r => Some(format!(
            "(superpages changed nothing: none was made; the workload's {} of memory never fills one {} reservation)",
            size::show(on.memory.resident_peak_bytes),
            size::show(r)
        )),
        _ => Some("(superpages changed nothing: none was made; no reservation was ever fully populated)".into()),
    }
}

/// Sysctls that describe how the system was set up rather than what the
/// run did: free-page targets scaled to memory, sizes, modes, tunables.
/// `compare` shows them only where the two runs differ (the superpage
/// tunable) or with `--all`.
fn is_setting(name: &str) -> bool {
    const SETTINGS: &[&str] = &[
        "vm.pageout_wakeup_thresh",
        "vm.stats.vm.v_free_count",
        "vm.stats.vm.v_free_min",
        "vm.stats.vm.v_free_reserved",
        "vm.stats.vm.v_free_severe",
        "vm.stats.vm.v_free_target",
        "vm.stats.vm.v_inactive_target",
        "vm.stats.vm.v_page_count",
        "vm.stats.vm.v_pageout_free_min",
        "vm.swap_total",
        "vm.pmap.mode",
        "splab.pmap.hpt.ptegs",
        "splab.virt.host_page",
    ];
    SETTINGS.contains(&name) || name.ends_with("_enabled") || name.ends_with(".enabled")
}

/// The pmap's superpage events, which `compare` always shows: promotions,
/// promotion failures and demotions, of every size the architecture has.
fn is_superpage_event(name: &str) -> bool {
    name.starts_with("vm.pmap.") && [".promotions", ".p_failures", ".demotions"].iter().any(|e| name.ends_with(e))
}

/// Whether a table sysctl (`vm.reserv.partpopq`) is empty: every row's
/// last number, the count, is 0.
fn table_is_empty(text: &str) -> bool {
    text.lines()
        .filter(|l| l.trim_start().split(':').next().is_some_and(|lvl| !lvl.is_empty() && lvl.chars().all(|c| c.is_ascii_digit())))
        .all(|l| l.rsplit(',').next().and_then(|n| n.trim().parse::<i64>().ok()) == Some(0))
}

/// `splab compare`: the runs side by side, then the sysctls that say what
/// happened: every counter that differs between the runs or is non-zero
/// in either, the superpage events, and tables that are not empty. With
/// `all`, every sysctl.
pub fn compare(c: &Comparison, all: bool) -> String {
    let (off, on) = (&c.off, &c.on);
    let mut o = String::new();
    let _ = writeln!(o, "{} on {} ({}), {} memory; splab build {BUILD}", off.workload_detail, off.machine, off.arch, size::show(off.memory_bytes));
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
        if all || off.tlb.misses[i] + b > 0 {
            row(&mut o, &format!("  {s} misses"), off.tlb.misses[i] as f64, b as f64);
        }
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
    if let Some(why) = unchanged(off, on) {
        let _ = writeln!(o, "{why}");
    }

    // The integer sysctls worth reading; a name missing from one run
    // counts as 0 there.
    let int = |r: &SimRun, k: &str| match r.sysctl.get(k) {
        Some(SysctlValue::Int(v)) => Some(*v),
        _ => None,
    };
    let names: BTreeSet<&String> = off.sysctl.keys().chain(on.sysctl.keys()).collect();
    let ints: Vec<&String> = names.iter().copied().filter(|k| int(off, k).is_some() || int(on, k).is_some()).collect();
    let shown: Vec<&String> = ints
        .iter()
        .copied()
        .filter(|k| {
            let (a, b) = (int(off, k).unwrap_or(0), int(on, k).unwrap_or(0));
            all || a != b || is_superpage_event(k) || (!is_setting(k) && (a != 0 || b != 0))
        })
        .collect();
    // The real system's names first, then splab's own.
    let (own, real): (Vec<&String>, Vec<&String>) = shown.into_iter().partition(|k| k.starts_with("splab."));
    let shown: Vec<&String> = real.into_iter().chain(own).collect();
    let w = shown.iter().map(|k| k.len()).max().unwrap_or(0).max(6) + 2;
    let _ = writeln!(o, "\n{:<w$}{:>14}{:>14}{:>10}", "sysctl", "off", "on", "change");
    for k in &shown {
        let (a, b) = (int(off, k).unwrap_or(0), int(on, k).unwrap_or(0));
        let _ = writeln!(o, "{k:<w$}{a:>14}{b:>14}{:>10}", change(a as f64, b as f64));
    }
    let hidden = ints.len() - shown.len();
    if hidden > 0 {
        let _ = writeln!(o, "({hidden} more sysctls, 0 in both runs or settings alike in both: --all shows every one)");
    }
    for k in names.iter().filter(|k| !ints.contains(k)) {
        let text = |r: &SimRun| r.sysctl.get(*k).map(|v| v.to_string().trim_end().to_string()).unwrap_or_default();
        let (a, b) = (text(off), text(on));
        if !all && table_is_empty(&a) && table_is_empty(&b) {
            continue;
        }
        if a == b {
            let _ = writeln!(o, "\n{k} (both runs): {a}");
        } else {
            let _ = writeln!(o, "\n{k} (superpages off): {a}\n\n{k} (superpages on): {b}");
        }
    }
    o
}

/// The run's memory report: resident against touched, zeroing and
/// copying, fault latency, background work.
fn memory_lines(o: &mut String, r: &SimRun) {
    let m = &r.memory;
    let _ = writeln!(
        o,
        "  {:<22}{} at the end, {} at most; {} never touched ({} at most)",
        "resident",
        size::show(m.resident_bytes),
        size::show(m.resident_peak_bytes),
        size::show(m.bloat_bytes),
        size::show(m.bloat_peak_bytes)
    );
    let _ = writeln!(o, "  {:<22}{} zeroed, {} copied", "kernel zero/copy", size::show(m.zeroed_bytes), size::show(m.copied_bytes));
    let _ = writeln!(o, "  {:<22}p50 {} ns, p99 {} ns, max {} ns", "fault latency", num(m.fault_p50_ns), num(m.fault_p99_ns), num(m.fault_max_ns));
    if m.background_seconds > 0.0 {
        let _ = writeln!(o, "  {:<22}{} s", "background (khugepaged)", num(m.background_seconds));
    }
    if r.spec.system.policy != PolicySpec::DEFAULT {
        let _ = writeln!(o, "  {:<22}{}", "policy", r.policy);
    }
    for p in &r.procfs {
        for line in p.lines() {
            let _ = writeln!(o, "    {line}");
        }
    }
}

/// The sum of the integer sysctls `vm.pmap.*.<what>` (every superpage size
/// and level of the architecture), 1 GB explicit mappings left out.
fn pmap_sum(r: &SimRun, what: &str) -> i64 {
    r.sysctl
        .iter()
        .filter(|(k, _)| k.starts_with("vm.pmap.") && k.ends_with(what) && !k.contains("pdpe") && !k.contains(".l1."))
        .filter_map(|(_, v)| if let SysctlValue::Int(i) = v { Some(*i) } else { None })
        .sum()
}

/// Whether a sysctl is a policy's own counter (Linux's vmstat and THP
/// statistics, Shimizu's per-size counts).
fn is_policy_counter(name: &str) -> bool {
    name.starts_with("vmstat.")
        || name.starts_with("vm.superpages.alloc.")
        || name.starts_with("vm.superpages.fallback.")
        || (name.starts_with("transparent_hugepage.") && (name.contains(".stats.") || name.ends_with(".full_scans") || name.ends_with(".pages_collapsed")))
}

/// `splab compare --policies`: one column per policy.
pub fn policies(c: &PolicyComparison, all: bool) -> String {
    let mut o = String::new();
    let first = &c.runs[0];
    let _ = writeln!(o, "{} on {} ({}), {} memory; splab build {BUILD}", first.workload_detail, first.machine, first.arch, size::show(first.memory_bytes));
    // An entry with settings of its own is headed by its policy and a
    // number, spelled out under the title.
    let mut heads = Vec::new();
    let mut legend = String::new();
    for (i, entry) in c.policies.iter().enumerate() {
        match entry.split_once('/') {
            Some((spec, _)) => {
                let head = format!("{spec}+{}", i + 1);
                let _ = writeln!(legend, "  {head} = {entry}");
                heads.push(head);
            }
            None => heads.push(entry.clone()),
        }
    }
    o.push_str(&legend);
    o.push('\n');
    let w = heads.iter().map(|h| h.len()).max().unwrap_or(0).max(14) + 2;
    let figure = |f: &splab_workloads::Figure| labelled(&f.name, &f.unit);
    let names: BTreeSet<&String> = c.runs.iter().flat_map(|r| r.sysctl.keys()).filter(|k| is_policy_counter(k)).collect();
    let int = |r: &SimRun, k: &str| match r.sysctl.get(k) {
        Some(SysctlValue::Int(v)) => Some(*v),
        _ => None,
    };
    let shown: Vec<&&String> = names.iter().filter(|k| all || c.runs.iter().any(|r| int(r, k).unwrap_or(0) != 0)).collect();
    let lw = shown.iter().map(|k| k.len() + 2).chain(first.details.iter().map(|d| figure(d).len() + 2)).chain([figure(&first.figure).len(), 34]).max().unwrap_or(34) + 1;
    let _ = write!(o, "{:<lw$}", "");
    for h in &heads {
        let _ = write!(o, "{h:>w$}");
    }
    o.push('\n');
    let row = |o: &mut String, name: &str, f: &dyn Fn(&SimRun) -> String| {
        let _ = write!(o, "{name:<lw$}");
        for r in &c.runs {
            let _ = write!(o, "{:>w$}", f(r));
        }
        o.push('\n');
    };
    row(&mut o, &figure(&first.figure), &|r| num(r.figure.value));
    for (i, d) in first.details.iter().enumerate() {
        row(&mut o, &format!("  {}", figure(d)), &|r| r.details.get(i).map_or("-".into(), |d| num(d.value)));
    }
    row(&mut o, "simulated seconds (timed)", &|r| num(r.sim_seconds));
    row(&mut o, "TLB misses", &|r| r.tlb.total_misses.to_string());
    row(&mut o, "page walks", &|r| r.hw.walks.to_string());
    row(&mut o, "page faults", &|r| r.events.faults.to_string());
    row(&mut o, "resident at most", &|r| size::show(r.memory.resident_peak_bytes));
    row(&mut o, "resident at the end", &|r| size::show(r.memory.resident_bytes));
    row(&mut o, "bloat (never touched) at most", &|r| size::show(r.memory.bloat_peak_bytes));
    row(&mut o, "bloat at the end", &|r| size::show(r.memory.bloat_bytes));
    row(&mut o, "fault latency p50 (ns)", &|r| num(r.memory.fault_p50_ns));
    row(&mut o, "fault latency p99 (ns)", &|r| num(r.memory.fault_p99_ns));
    row(&mut o, "fault latency max (ns)", &|r| num(r.memory.fault_max_ns));
    row(&mut o, "zeroed", &|r| size::show(r.memory.zeroed_bytes));
    row(&mut o, "copied", &|r| size::show(r.memory.copied_bytes));
    row(&mut o, "background seconds (khugepaged)", &|r| num(r.memory.background_seconds));
    row(&mut o, "superpage promotions", &|r| pmap_sum(r, ".promotions").to_string());
    row(&mut o, "superpage mappings (direct)", &|r| pmap_sum(r, ".mappings").to_string());
    row(&mut o, "superpage demotions (splits)", &|r| pmap_sum(r, ".demotions").to_string());
    if !shown.is_empty() {
        let _ = writeln!(o, "
policy counters");
        for k in shown {
            row(&mut o, &format!("  {k}"), &|r| int(r, k).map_or("-".into(), |v| v.to_string()));
        }
    }
    for (i, r) in c.runs.iter().enumerate() {
        for p in &r.procfs {
            let _ = writeln!(o, "
{} ({}):", p.lines().next().unwrap_or(""), heads[i]);
            for line in p.lines().skip(1) {
                let _ = writeln!(o, "  {line}");
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_tables_and_settings_are_told_apart() {
        let empty = "\nLEVEL     SIZE  NUMBER\n\n   0:        0K,      0\n";
        let some = "\nLEVEL     SIZE  NUMBER\n\n   0:     1024K,      3\n";
        assert!(table_is_empty(empty));
        assert!(!table_is_empty(some));
        assert!(is_setting("vm.pmap.pg_ps_enabled") && is_setting("vm.pmap.gh.64k.enabled") && is_setting("vm.stats.vm.v_free_min"));
        assert!(!is_setting("vm.stats.vm.v_zfod"));
        assert!(is_superpage_event("vm.pmap.l3c.p_failures") && is_superpage_event("vm.pmap.gh.4m.demotions"));
        assert!(!is_superpage_event("splab.pmap.pde.p_failures.attributes") && !is_superpage_event("vm.pmap.pde.mappings"));
    }
}
