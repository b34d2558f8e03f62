//! The block tables of the splabtrace tool (tools/vgtrace/vt_main.c, "the
//! block table"): what each superblock valgrind translated does, for the
//! interval core. The tool writes a table once per translation, before
//! any word that enters the block; `decode` turns its words into the
//! simulator's `BlockSpec`.

use splab_sim::block::{BlockSpec, Dep, End, ExitSpec, PutSpec, RefKind, RefSpec, Src, OPS, REGS};

const FROM_REF: u64 = 0x8000;
const FROM_DISPATCH: u64 = 0xffff;

/// A table's words (after its header word): the tool's id for the block
/// and its description.
pub fn decode(w: &[u64]) -> Result<(u64, BlockSpec), String> {
    let mut at = 0usize;
    let mut next = |what: &str| -> Result<u64, String> {
        let v = *w.get(at).ok_or_else(|| format!("a block table of {} words ends inside {what}", w.len()))?;
        at += 1;
        Ok(v)
    };
    let id = next("its id")?;
    let pc = next("its address")?;
    let counts = next("its counts")?;
    let (insns, nrefs, nexits, nputs) = (counts as u16, (counts >> 16) as u16 as usize, (counts >> 32) as u16 as usize, (counts >> 48) as u16 as usize);
    let more = next("its counts")?;
    let (nlines, ncalls, kind, nend) = (more as u16 as usize, (more >> 16) as u16 as usize, (more >> 32) as u8, (more >> 40) as u8 as usize);
    let end_pc = next("its last address")?;
    let ret = next("its return address")?;
    if insns == 0 {
        return Err(format!("block {id} at {pc:#x} has no instructions"));
    }
    let mut refs = Vec::with_capacity(nrefs);
    let mut ref_counts = Vec::with_capacity(nrefs);
    for _ in 0..nrefs {
        let r = next("a reference")?;
        let kind = match (r >> 16) as u8 {
            1 => RefKind::Load,
            2 => RefKind::Store,
            3 => RefKind::Modify,
            k => return Err(format!("block {id} at {pc:#x}: a reference of kind {k}")),
        };
        refs.push(RefSpec { insn: r as u16, kind, addr: Vec::new(), data: Vec::new() });
        ref_counts.push(((r >> 24) as u8 as usize, (r >> 32) as u8 as usize));
    }
    let mut exits = Vec::with_capacity(nexits);
    let mut exit_counts = Vec::with_capacity(nexits);
    let mut branches = Vec::with_capacity(nexits);
    for _ in 0..nexits {
        let pc = next("an exit's address")?;
        let e = next("an exit")?;
        exits.push(ExitSpec { insn: e as u16, pc, cond: Vec::new(), branch: (e >> 24) & 1 == 1 });
        exit_counts.push((e >> 16) as u8 as usize);
        branches.push((e >> 24) & 1 == 1);
    }
    let mut puts = Vec::with_capacity(nputs);
    let mut put_counts = Vec::with_capacity(nputs);
    for _ in 0..nputs {
        let p = next("a register write")?;
        puts.push(PutSpec { slot: p as u8, insn: (p >> 8) as u16, exits: (p >> 24) as u8, deps: Vec::new() });
        put_counts.push((p >> 32) as u8 as usize);
    }
    let mut calls = Vec::with_capacity(ncalls);
    for _ in 0..ncalls {
        let insn = next("an inner call")?;
        let ret = next("an inner call's return address")?;
        calls.push((insn as u16, ret));
    }
    let mut lines = Vec::with_capacity(nlines);
    for _ in 0..nlines {
        let l = next("a code line")?;
        lines.push(((l >> 16) << 6, l as u16));
    }
    let mut deps = |n: usize| -> Result<Vec<Dep>, String> {
        (0..n)
            .map(|_| {
                let d = next("a source")?;
                let s = d & 0xffff;
                let src = match s {
                    FROM_DISPATCH => Src::Dispatch,
                    s if s >= FROM_REF => Src::Ref((s - FROM_REF) as u16),
                    s if (s as usize) < REGS => Src::Reg(s as u8),
                    s => return Err(format!("a source {s:#x}")),
                };
                let mut ops = [0u8; OPS];
                for (c, o) in ops.iter_mut().enumerate() {
                    *o = (d >> (16 + 8 * c)) as u8;
                }
                Ok(Dep { src, ops })
            })
            .collect()
    };
    for (r, &(a, d)) in refs.iter_mut().zip(&ref_counts) {
        r.addr = deps(a)?;
        r.data = deps(d)?;
    }
    for (e, &n) in exits.iter_mut().zip(&exit_counts) {
        e.cond = deps(n)?;
    }
    for (p, &n) in puts.iter_mut().zip(&put_counts) {
        p.deps = deps(n)?;
    }
    let end_deps = deps(nend)?;
    let end = match kind {
        0 => End::Jump,
        1 => End::Call { ret, indirect: false },
        2 => End::Call { ret, indirect: true },
        3 => End::Ret,
        4 => End::Indirect,
        k => return Err(format!("block {id} at {pc:#x}: an end of kind {k}")),
    };
    if at != w.len() {
        return Err(format!("block {id} at {pc:#x}: its table has {} words, {} read", w.len(), at));
    }
    let _ = branches;
    let spec = BlockSpec { pc, insns, refs, exits, puts, end, end_pc, end_deps, lines, other_loads: 0, other_stores: 0, calls };
    spec.check().map_err(|e| format!("block {id}: {e}; {spec:?}"))?;
    Ok((id, spec))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A table as the tool writes one: a load through a register, a store
    /// of its value plus one, a side exit on it, a register written, two
    /// code lines, ending in a return.
    pub(crate) fn table() -> Vec<u64> {
        let dep = |src: u64, alu: u64| src | alu << 16;
        vec![
            7,
            0x401000,
            5 | 2 << 16 | 1 << 32 | 1 << 48,
            2 | 3 << 32 | 1 << 40,
            0x401010,
            0,
            1 | 1 << 16 | 1 << 24,
            2 | 2 << 16 | 1 << 24 | 1 << 32,
            0x401008,
            3 | 1 << 16 | 1 << 24,
            2 | 4 << 8 | 1 << 24 | 1 << 32,
            (0x401000 >> 6) << 16,
            (0x401040 >> 6) << 16 | 3,
            dep(2, 0),
            dep(2, 0),
            dep(FROM_REF, 1),
            dep(FROM_REF, 1),
            dep(FROM_REF, 2),
            dep(6, 0),
        ]
    }

    #[test]
    fn a_table_decodes_into_its_block() {
        let (id, b) = decode(&table()).unwrap();
        assert_eq!((id, b.pc, b.insns, b.refs.len(), b.exits.len(), b.puts.len()), (7, 0x401000, 5, 2, 1, 1));
        assert_eq!(b.refs[1].kind, RefKind::Store);
        assert_eq!(b.refs[1].data, vec![Dep::new(Src::Ref(0), [1, 0, 0, 0, 0, 0])]);
        assert_eq!(b.exits[0].cond, vec![Dep::new(Src::Ref(0), [1, 0, 0, 0, 0, 0])]);
        assert_eq!(b.puts[0].deps, vec![Dep::new(Src::Ref(0), [2, 0, 0, 0, 0, 0])]);
        assert_eq!((b.end, b.end_deps.clone()), (End::Ret, vec![Dep::new(Src::Reg(6), [0; OPS])]));
        assert_eq!(b.lines, vec![(0x401000, 0), (0x401040, 3)]);
    }

    #[test]
    fn a_bad_table_names_what_is_wrong() {
        let mut t = table();
        t.pop();
        assert!(decode(&t).unwrap_err().contains("ends inside a source"));
        let mut t = table();
        t[6] = 1 | 9 << 16;
        assert!(decode(&t).unwrap_err().contains("a reference of kind 9"));
        let mut t = table();
        t[13] = 200;
        assert!(decode(&t).unwrap_err().contains("a source 0xc8"));
    }
}
