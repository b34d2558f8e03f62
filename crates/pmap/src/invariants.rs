//! Invariant checks every pmap's checker makes the same way: page-table
//! pages and their counts, 4 KB mappings against frames and PV lists,
//! stashed page-table pages.

use crate::pv::PvTable;
use splab_hw::{Pfn, PhysAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::{PmapEnv, PmapId};

/// The table at `table` must be an in-use page-table page whose count is
/// its number of valid entries, `valid`.
pub fn page_table(env: &PmapEnv, table: u64, valid: usize, what: &str) -> Result<(), String> {
    let m = env.phys.pages.get(PhysAddr(table).pfn());
    if !m.has(pflags::PTPAGE) || !m.has(pflags::INUSE) {
        return Err(format!("{what} at {table:#x} is not an in-use page-table page"));
    }
    if m.ref_count as usize != valid {
        return Err(format!("{what} at {table:#x}: ref_count {} but {valid} valid entries", m.ref_count));
    }
    Ok(())
}

/// A valid 4 KB mapping (pm, va) -> frame `m` must map a frame in use,
/// and, if managed, be on the frame's PV list.
pub fn page_mapping(env: &PmapEnv, pv: &PvTable, pm: PmapId, va: u64, m: Pfn, managed: bool) -> Result<(), String> {
    let pg = env.phys.pages.get(m);
    if !pg.has(pflags::INUSE) || env.phys.buddy.is_free(m) {
        return Err(format!("pmap {pm}: {va:#x} maps free frame {m:?}"));
    }
    if managed && !pv.contains(env, m, pm, va) {
        return Err(format!("pmap {pm}: {va:#x} -> {m:?} has no PV entry"));
    }
    Ok(())
}

/// A page-table page stashed for the superpage at `va` must still be a
/// page-table page, and the superpage must still be mapped.
pub fn stashed(env: &PmapEnv, pm: PmapId, va: u64, ptp: Pfn, superpage_mapped: bool) -> Result<(), String> {
    if !superpage_mapped {
        return Err(format!("pmap {pm}: stash for {va:#x} but no superpage mapped there"));
    }
    if !env.phys.pages.get(ptp).has(pflags::PTPAGE) {
        return Err(format!("pmap {pm}: stashed page {ptp:?} is not a page-table page"));
    }
    Ok(())
}

/// What an address space was found to map: the base pages (its resident
/// count) and the PV entries its managed mappings must have.
#[derive(Debug, Default)]
pub struct Seen {
    pub resident: u64,
    pub pv: u64,
}

/// The PV lists must hold exactly one entry per managed mapping found,
/// `seen` in all.
pub fn pv_entries(pv: &PvTable, seen: u64) -> Result<(), String> {
    if seen != pv.live() {
        return Err(format!("{} PV entries in use but {seen} managed mappings", pv.live()));
    }
    Ok(())
}

/// An address space's resident count must be what its tables map.
pub fn resident(pm: PmapId, counted: u64, seen: &Seen) -> Result<(), String> {
    if counted != seen.resident {
        return Err(format!("pmap {pm}: resident count {counted} but {} pages mapped", seen.resident));
    }
    Ok(())
}
