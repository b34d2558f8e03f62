//! What the interval core (`core.rs`) knows of an instruction stream: its
//! blocks. A block is a straight run of instructions with one entry and
//! possibly several exits (a superblock, as valgrind translates code, or
//! one iteration of a synthetic workload's loop). Its static description
//! (`BlockSpec`) says, once for every time it runs:
//! - how many instructions it has, and at which instruction each memory
//!   reference, each side exit (a conditional branch out) and its end lie;
//! - what each reference's address (and a store's data), each branch's
//!   condition and each register it writes depend on: registers as the
//!   block found them, values the block loaded, or nothing but the
//!   instruction's own dispatch, each with the operations on the longest
//!   path from that source counted by class (`OP_CLASSES`);
//! - how it ends (a jump, a call, a return, an indirect branch) and the
//!   code lines it is fetched from.
//!
//! The profile turns the operation counts into cycles once, when the
//! block is defined (`Block::compile`); what changes from run to run (the
//! exit taken, the references' latencies) comes with each execution.
//! Register "slots" are the guest state in 8-byte units (valgrind's
//! offsets divided by eight), at most `REGS` of them.

use splab_hw::profile::Latency;

/// Operation classes a path counts (`splab_hw::profile::OP_CLASSES`).
pub const OPS: usize = 6;
/// Register slots a block's dependences name.
pub const REGS: usize = 128;

/// Operations along a dependence path, by class, saturating at 255.
pub type Ops = [u8; OPS];

/// One ALU operation.
pub const ALU: Ops = [1, 0, 0, 0, 0, 0];
/// No operation.
pub const NONE: Ops = [0; OPS];

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// A register slot as the block found it.
    Reg(u8),
    /// The value loaded by the block's reference of this index.
    Ref(u16),
    /// Nothing the block waits for: constants, from its instruction's
    /// dispatch.
    Dispatch,
}

/// A source and the operations on the longest path from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dep {
    pub src: Src,
    pub ops: Ops,
}

impl Dep {
    pub fn new(src: Src, ops: Ops) -> Dep {
        Dep { src, ops }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefKind {
    Load,
    Store,
    /// A load and a store of the same bytes (one reference in the stream).
    Modify,
}

/// A memory reference of the block, in the order the stream has them.
#[derive(Clone, Debug, PartialEq)]
pub struct RefSpec {
    /// The instruction it belongs to (0 the block's first).
    pub insn: u16,
    pub kind: RefKind,
    pub addr: Vec<Dep>,
    /// A store's data.
    pub data: Vec<Dep>,
}

/// A side exit: a conditional branch out of the block (or, where
/// `branch` is false, another way out that no predictor sees).
#[derive(Clone, Debug, PartialEq)]
pub struct ExitSpec {
    /// The branch's instruction.
    pub insn: u16,
    pub pc: u64,
    pub cond: Vec<Dep>,
    pub branch: bool,
}

/// A register the block writes, and what its value depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct PutSpec {
    pub slot: u8,
    pub insn: u16,
    /// Side exits before the write: it is done when the block leaves by
    /// a later exit or runs to its end.
    pub exits: u8,
    pub deps: Vec<Dep>,
}

/// How a block that runs to its end leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Into the next block, or by a direct jump: the target is known.
    Jump,
    /// A direct call (the return address goes on the return stack), or
    /// an indirect one (its target predicted as well).
    Call { ret: u64, indirect: bool },
    /// A return: predicted by the return stack.
    Ret,
    /// An indirect jump: predicted by the indirect-target predictor.
    Indirect,
    /// A synthetic loop's back edge, taken every time: always predicted.
    Loop,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BlockSpec {
    /// The first instruction's address.
    pub pc: u64,
    /// Instructions when it runs to its end.
    pub insns: u16,
    pub refs: Vec<RefSpec>,
    /// Side exits, in order.
    pub exits: Vec<ExitSpec>,
    pub puts: Vec<PutSpec>,
    pub end: End,
    /// The last instruction's address (the branch that ends it).
    pub end_pc: u64,
    /// What the end's target depends on (an indirect jump's or a
    /// return's address).
    pub end_deps: Vec<Dep>,
    /// The code lines it is fetched from, with the first instruction in
    /// each, in order.
    pub lines: Vec<(u64, u16)>,
    /// Loads and stores of the block that the stream does not carry
    /// (first-level hits a synthetic loop leaves out): they hold load- and
    /// store-queue entries.
    pub other_loads: u16,
    pub other_stores: u16,
    /// Direct calls inside the block (valgrind follows a call into its
    /// callee within one superblock): their instructions and return
    /// addresses, which go on the return stack.
    pub calls: Vec<(u16, u64)>,
}

impl BlockSpec {
    /// A block of `insns` instructions at `pc` with nothing in it yet,
    /// ending in a loop's back edge.
    pub fn looped(pc: u64, insns: u16) -> BlockSpec {
        BlockSpec { pc, insns, refs: Vec::new(), exits: Vec::new(), puts: Vec::new(), end: End::Loop, end_pc: pc, end_deps: Vec::new(), lines: Vec::new(), other_loads: 0, other_stores: 0, calls: Vec::new() }
    }

    /// Appends a reference; returns its index.
    pub fn reference(&mut self, insn: u16, kind: RefKind, addr: &[Dep], data: &[Dep]) -> u16 {
        self.refs.push(RefSpec { insn, kind, addr: addr.to_vec(), data: data.to_vec() });
        (self.refs.len() - 1) as u16
    }

    pub fn put(&mut self, slot: u8, insn: u16, deps: &[Dep]) {
        self.puts.push(PutSpec { slot, insn, exits: self.exits.len() as u8, deps: deps.to_vec() });
    }

    /// Checks what the core relies on: instructions in order and within
    /// the block, sources that exist, slots in range.
    pub fn check(&self) -> Result<(), String> {
        let bad = |what: String| Err(format!("block at {:#x}: {what}", self.pc));
        if self.insns == 0 {
            return bad("no instructions".into());
        }
        if self.refs.len() > MAX_REFS {
            return bad(format!("{} references (at most {MAX_REFS})", self.refs.len()));
        }
        let deps_ok = |deps: &[Dep], before: usize| {
            deps.iter().all(|d| match d.src {
                Src::Reg(r) => (r as usize) < REGS,
                Src::Ref(i) => (i as usize) < before && self.refs[i as usize].kind != RefKind::Store,
                Src::Dispatch => true,
            })
        };
        let mut last = 0;
        for (i, r) in self.refs.iter().enumerate() {
            if r.insn < last || r.insn >= self.insns {
                return bad(format!("reference {i} at instruction {} (after {last}, of {})", r.insn, self.insns));
            }
            last = r.insn;
            // A modify's store may use what its own load read.
            let data_before = if r.kind == RefKind::Modify { i + 1 } else { i };
            if !deps_ok(&r.addr, i) || !deps_ok(&r.data, data_before) {
                return bad(format!("reference {i} depends on a value not loaded before it"));
            }
        }
        let mut last = 0;
        for (i, e) in self.exits.iter().enumerate() {
            if e.insn < last || e.insn >= self.insns {
                return bad(format!("exit {i} at instruction {} (after {last}, of {})", e.insn, self.insns));
            }
            last = e.insn;
            if !deps_ok(&e.cond, self.refs.len()) {
                return bad(format!("exit {i} depends on a value the block does not load"));
            }
        }
        for p in &self.puts {
            if p.insn >= self.insns || p.exits as usize > self.exits.len() || (p.slot as usize) >= REGS || !deps_ok(&p.deps, self.refs.len()) {
                return bad(format!("a write of slot {} at instruction {}", p.slot, p.insn));
            }
        }
        if !deps_ok(&self.end_deps, self.refs.len()) {
            return bad("its end depends on a value the block does not load".into());
        }
        if self.lines.iter().any(|l| l.1 >= self.insns) {
            return bad("a code line starts past its last instruction".into());
        }
        Ok(())
    }
}

/// Where a compiled dependence comes from, as an index into the core's
/// table of value times (`CoreState::vals`): `FROM_REG` + a register
/// slot, `FROM_REF` + a reference's index in its block (0 is unused: a
/// dependence on the instruction's own dispatch is kept apart, as its
/// list's `Span::dispatch`).
pub(crate) const FROM_REG: u16 = 1;
pub(crate) const FROM_REF: u16 = FROM_REG + REGS as u16;
/// References a block may have (their sources are `FROM_REF` + index).
pub const MAX_REFS: usize = (u16::MAX - FROM_REF) as usize;

/// A dependence with its path in cycles.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CDep {
    pub src: u16,
    pub lat: f32,
}

/// A compiled dependence list: the values it waits for (`deps[start..end]`
/// of its block) and the longest path from the instruction's own dispatch
/// (0 where there is none: a list is ready no earlier than its dispatch).
/// The dispatch's paths are one maximum, taken once, because the time a
/// list is ready is the latest of its sources' and the dispatch is the
/// same for them all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub start: u32,
    pub end: u32,
    pub dispatch: f32,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct CRef {
    pub insn: u32,
    pub addr: Span,
    pub data: Span,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct CExit {
    pub insn: u32,
    pub pc: u64,
    pub cond: Span,
    pub branch: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct CPut {
    pub slot: u8,
    pub insn: u32,
    pub exits: u8,
    pub deps: Span,
}

/// A block compiled for a profile: its dependences in cycles.
#[derive(Debug)]
pub struct Block {
    pub pc: u64,
    pub insns: u32,
    pub(crate) refs: Vec<CRef>,
    pub(crate) exits: Vec<CExit>,
    pub(crate) puts: Vec<CPut>,
    pub end: End,
    pub(crate) end_pc: u64,
    pub(crate) end_deps: Span,
    pub(crate) deps: Vec<CDep>,
    /// Code lines, with the first instruction in each.
    pub lines: Vec<(u64, u32)>,
    pub(crate) other_loads: u32,
    pub(crate) other_stores: u32,
    pub(crate) calls: Vec<(u32, u64)>,
    /// A loop's iteration with no side exits and no inner calls, ending
    /// in its back edge: the core goes from one iteration to the next
    /// without a transfer to check (`CoreState::next_iteration`).
    pub(crate) straight_loop: bool,
    /// No register write reads a register an earlier write of the block
    /// set: the writes can be made as they are computed rather than all
    /// from the entry values at once (`CoreState::write_registers`).
    pub(crate) puts_in_place: bool,
}

impl Block {
    /// `spec` with its paths priced by `lat`.
    pub fn compile(spec: &BlockSpec, lat: &Latency) -> Result<Block, String> {
        spec.check()?;
        let by = lat.by_class();
        let mut deps = Vec::new();
        let mut span = |ds: &[Dep]| -> Span {
            let start = deps.len() as u32;
            let mut dispatch = 0.0f32;
            for d in ds {
                let cycles: f64 = d.ops.iter().zip(by).map(|(&n, l)| n as f64 * l).sum();
                let src = match d.src {
                    Src::Reg(r) => FROM_REG + r as u16,
                    Src::Ref(i) => FROM_REF + i,
                    Src::Dispatch => {
                        dispatch = dispatch.max(cycles as f32);
                        continue;
                    }
                };
                deps.push(CDep { src, lat: cycles as f32 });
            }
            Span { start, end: deps.len() as u32, dispatch }
        };
        let refs = spec
            .refs
            .iter()
            .map(|r| CRef { insn: r.insn as u32, addr: span(&r.addr), data: span(&r.data) })
            .collect();
        let exits = spec.exits.iter().map(|e| CExit { insn: e.insn as u32, pc: e.pc, cond: span(&e.cond), branch: e.branch }).collect();
        let puts = spec.puts.iter().map(|p| CPut { slot: p.slot, insn: p.insn as u32, exits: p.exits, deps: span(&p.deps) }).collect();
        let end_deps = span(&spec.end_deps);
        Ok(Block {
            pc: spec.pc,
            insns: spec.insns as u32,
            refs,
            exits,
            puts,
            end: spec.end,
            end_pc: spec.end_pc,
            end_deps,
            deps,
            lines: spec.lines.iter().map(|&(a, i)| (a, i as u32)).collect(),
            other_loads: spec.other_loads as u32,
            other_stores: spec.other_stores as u32,
            calls: spec.calls.iter().map(|&(i, r)| (i as u32, r)).collect(),
            straight_loop: spec.exits.is_empty() && spec.calls.is_empty() && spec.end == End::Loop,
            puts_in_place: spec.puts.iter().enumerate().all(|(j, p)| p.deps.iter().all(|d| !matches!(d.src, Src::Reg(r) if spec.puts[..j].iter().any(|q| q.slot == r)))),
        })
    }

    /// Instructions when the block leaves by side exit `exit` (its
    /// branch included), or runs to its end (`exit` = the number of side
    /// exits).
    pub fn insns_to(&self, exit: usize) -> u32 {
        self.exits.get(exit).map_or(self.insns, |e| e.insn + 1)
    }

    pub fn refs(&self) -> usize {
        self.refs.len()
    }

    pub fn side_exits(&self) -> usize {
        self.exits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat() -> Latency {
        Latency { alu: 1.0, mul: 3.0, div: 20.0, fp_add: 4.0, fp_mul: 4.0, fp_div: 15.0 }
    }

    /// A pointer chase's block: its load's address is the register it
    /// writes, and the paths are priced by class.
    #[test]
    fn a_block_compiles_with_its_paths_priced() {
        let mut b = BlockSpec::looped(0x1000, 3);
        let l = b.reference(0, RefKind::Load, &[Dep::new(Src::Reg(2), NONE)], &[]);
        b.put(2, 0, &[Dep::new(Src::Ref(l), NONE)]);
        b.put(3, 1, &[Dep::new(Src::Reg(3), [1, 1, 0, 0, 0, 0])]);
        let c = Block::compile(&b, &lat()).unwrap();
        assert_eq!((c.insns, c.refs.len(), c.puts.len()), (3, 1, 2));
        assert_eq!(c.deps[c.puts[1].deps.start as usize].lat, 4.0);
        assert_eq!(c.deps[c.puts[0].deps.start as usize].src, FROM_REF);
        assert_eq!(c.insns_to(0), 3);
        // Paths from the instruction's own dispatch are one maximum.
        let mut b = BlockSpec::looped(0x1000, 1);
        b.reference(0, RefKind::Load, &[Dep::new(Src::Dispatch, [2, 0, 0, 0, 0, 0]), Dep::new(Src::Reg(1), NONE), Dep::new(Src::Dispatch, [0, 1, 0, 0, 0, 0])], &[]);
        let c = Block::compile(&b, &lat()).unwrap();
        let a = c.refs[0].addr;
        assert_eq!((a.end - a.start, a.dispatch, c.deps[a.start as usize].src), (1, 3.0, FROM_REG + 1));
    }

    /// Register writes that read no register an earlier write set are
    /// made in place; a swap is not.
    #[test]
    fn writes_are_made_in_place_where_no_later_one_reads_an_earlier() {
        let mut b = BlockSpec::looped(0x1000, 3);
        b.put(2, 0, &[Dep::new(Src::Reg(2), NONE), Dep::new(Src::Reg(4), NONE)]);
        b.put(3, 1, &[Dep::new(Src::Reg(3), NONE), Dep::new(Src::Reg(4), NONE)]);
        assert!(Block::compile(&b, &lat()).unwrap().puts_in_place);
        let mut swap = BlockSpec::looped(0x1000, 3);
        swap.put(2, 0, &[Dep::new(Src::Reg(3), NONE)]);
        swap.put(3, 1, &[Dep::new(Src::Reg(2), NONE)]);
        assert!(!Block::compile(&swap, &lat()).unwrap().puts_in_place);
    }

    /// What the core relies on is checked, naming the block.
    #[test]
    fn bad_blocks_are_refused() {
        let mut b = BlockSpec::looped(0x2000, 2);
        b.reference(1, RefKind::Load, &[Dep::new(Src::Ref(0), NONE)], &[]);
        assert!(b.check().unwrap_err().contains("0x2000: reference 0 depends"));
        let mut b = BlockSpec::looped(0x2000, 2);
        b.reference(2, RefKind::Load, &[], &[]);
        assert!(b.check().unwrap_err().contains("reference 0 at instruction 2"));
        let mut b = BlockSpec::looped(0x2000, 2);
        let s = b.reference(0, RefKind::Store, &[], &[]);
        b.reference(1, RefKind::Load, &[Dep::new(Src::Ref(s), NONE)], &[]);
        assert!(b.check().is_err(), "a store's value is not loaded");
    }
}
