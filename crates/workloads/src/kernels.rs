//! The instruction streams of the synthetic workloads' loops, stated for
//! the interval core (`splab_sim::core`): one iteration of each as a block
//! (`BlockSpec`): its instructions, where its references fall among them,
//! and what each reference's address and data depend on. They are the
//! loops as an optimising compiler makes them for x86-64 (gcc or rustc at
//! -O2); on other architectures the same stream stands in, counted in
//! x86-64 instructions. Register slots here only name the loop's own
//! registers (an induction pointer, an accumulator, a chased pointer).
//!
//! A workload runs its references with `Kernel::set` in force: each
//! independent reference outside any block is the loop's next, in turn,
//! so a loop's references must be issued in the order its block lists
//! them (every workload here issues whole iterations). A dependent
//! reference (`System::access` with `dependent`: a pointer chase, a
//! B-tree's descent) is its own instruction, its address the value the
//! reference before it loaded.

use splab_sim::block::{BlockSpec, Dep, RefKind, Src, ALU, NONE};
use splab_sim::System;

/// The loop's induction pointer and accumulator.
const PTR: u8 = 5;
const SUM: u8 = 6;

/// The loops the workloads run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// A loop that touches memory a reference at a time, independently
    /// (filling, zeroing, touching pages, a program's first use of fresh
    /// memory): the reference, the pointer's step, and a compare and branch
    /// that fuse into one.
    Sweep,
    /// HPCC RandomAccess's update loop as `splab_native::gups::update_n`
    /// compiles for x86-64 (rustc 1.95, release), unrolled twice: each
    /// update loads its stream's word (a first-level hit the stream does
    /// not carry), steps it (lea, sar, and, xor), stores it back, masks a
    /// copy (mov, and) and xors it into the table word (one instruction
    /// that loads and stores: the reference pair); a step, a compare and
    /// a branch every two updates. 21 instructions for two updates.
    Gups,
    /// lmbench bw_mem `rd`: `sum += p[0] + p[4] + ... + p[124]` over ints,
    /// 32 loads of a 512-byte step (each an add from memory into a chain
    /// of additions), then the pointer's step, a compare and a branch.
    BwRead,
    /// lmbench bw_mem `wr`: `p[0] = 1; p[4] = 1; ...`, 32 stores a step.
    BwWrite,
    /// lmbench bw_mem `rdwr`: each of the 32 words read into the sum and
    /// written back, a load and a store.
    BwReadWrite,
    /// A library memcpy's loop a 64-byte line at a time: a vector load
    /// and a vector store of it, four lines an iteration and the loop's
    /// pointer step, compare and branch.
    CopyLine,
    /// A hand-written copy word by word: a load and a store of it, eight
    /// words an iteration and the loop's step, compare and branch.
    CopyWord,
    /// A transpose's inner loop, `b[j][i] = a[i][j]`: a load, a store, two
    /// index steps, a compare and branch.
    Transpose,
    /// STREAM's kernels over AVX-512 lines of eight doubles: Copy (load,
    /// store), Scale (load, multiply, store), Add (two loads, add, store),
    /// Triad (two loads, fused multiply-add, store), each with the
    /// index's step, compare and branch.
    StreamCopy,
    StreamScale,
    StreamAdd,
    StreamTriad,
}

fn ptr() -> Dep {
    Dep::new(Src::Reg(PTR), NONE)
}

fn ops(alu: u8, mul: u8, fp_add: u8, fp_mul: u8) -> [u8; 6] {
    [alu, mul, 0, fp_add, fp_mul, 0]
}

/// `refs` independent references through the induction pointer at the
/// instructions `at`, `insns` instructions an iteration; stores' data from
/// `data` (None: a constant).
fn strided(pc: u64, insns: u16, refs: &[(u16, RefKind, Option<Dep>)]) -> BlockSpec {
    let mut b = BlockSpec::looped(pc, insns);
    for &(at, kind, data) in refs {
        b.reference(at, kind, &[ptr()], data.as_slice());
    }
    b.put(PTR, insns - 2, &[Dep::new(Src::Reg(PTR), ALU)]);
    b
}

impl Kernel {
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Sweep => "sweep",
            Kernel::Gups => "gups-update",
            Kernel::BwRead => "bw-rd",
            Kernel::BwWrite => "bw-wr",
            Kernel::BwReadWrite => "bw-rdwr",
            Kernel::CopyLine => "copy-line",
            Kernel::CopyWord => "copy-word",
            Kernel::Transpose => "transpose",
            Kernel::StreamCopy => "stream-copy",
            Kernel::StreamScale => "stream-scale",
            Kernel::StreamAdd => "stream-add",
            Kernel::StreamTriad => "stream-triad",
        }
    }

    /// The loop's iteration as a block.
    pub fn spec(&self) -> BlockSpec {
        let pc = 0x40_0000 + 0x1000 * *self as u64;
        use RefKind::{Load, Store};
        match self {
            Kernel::Sweep => strided(pc, 3, &[(0, Load, None)]),
            Kernel::Gups => {
                let mut b = BlockSpec::looped(pc, 21);
                // The table word's address: the stream's word (loaded from
                // the first level), stepped and masked, from its
                // instruction's dispatch.
                for (k, at) in [(0u16, 8u16), (2, 17)] {
                    let addr = Dep::new(Src::Dispatch, ops(6, 0, 0, 0));
                    let l = b.reference(at, Load, &[addr], &[]);
                    debug_assert_eq!(l, k);
                    b.reference(at, Store, &[addr], &[Dep::new(Src::Ref(l), ALU)]);
                }
                b.other_loads = 2;
                b.other_stores = 2;
                b
            }
            Kernel::BwRead | Kernel::BwWrite => {
                let store = *self == Kernel::BwWrite;
                let mut b = BlockSpec::looped(pc, 35);
                let mut sum = vec![Dep::new(Src::Reg(SUM), [32, 0, 0, 0, 0, 0])];
                for i in 0..32u16 {
                    let r = b.reference(i, if store { Store } else { Load }, &[ptr()], &[]);
                    if !store {
                        sum.push(Dep::new(Src::Ref(r), [(32 - i) as u8, 0, 0, 0, 0, 0]));
                    }
                }
                if !store {
                    b.put(SUM, 31, &sum);
                }
                b.put(PTR, 32, &[Dep::new(Src::Reg(PTR), ALU)]);
                b
            }
            Kernel::BwReadWrite => {
                let mut b = BlockSpec::looped(pc, 67);
                let mut sum = vec![Dep::new(Src::Reg(SUM), [32, 0, 0, 0, 0, 0])];
                for i in 0..32u16 {
                    let r = b.reference(2 * i, Load, &[ptr()], &[]);
                    b.reference(2 * i + 1, Store, &[ptr()], &[]);
                    sum.push(Dep::new(Src::Ref(r), [(32 - i) as u8, 0, 0, 0, 0, 0]));
                }
                b.put(SUM, 63, &sum);
                b.put(PTR, 64, &[Dep::new(Src::Reg(PTR), ALU)]);
                b
            }
            Kernel::CopyLine | Kernel::CopyWord => {
                let (n, insns) = if *self == Kernel::CopyLine { (4u16, 11u16) } else { (8, 19) };
                let mut b = BlockSpec::looped(pc, insns);
                for i in 0..n {
                    let l = b.reference(2 * i, Load, &[ptr()], &[]);
                    b.reference(2 * i + 1, Store, &[ptr()], &[Dep::new(Src::Ref(l), NONE)]);
                }
                b.put(PTR, insns - 2, &[Dep::new(Src::Reg(PTR), ALU)]);
                b
            }
            Kernel::Transpose => {
                let mut b = strided(pc, 5, &[(0, Load, None)]);
                b.refs.push(splab_sim::block::RefSpec { insn: 1, kind: Store, addr: vec![ptr()], data: vec![Dep::new(Src::Ref(0), NONE)] });
                b
            }
            Kernel::StreamCopy => {
                let mut b = strided(pc, 4, &[(0, Load, None)]);
                b.refs.push(splab_sim::block::RefSpec { insn: 1, kind: Store, addr: vec![ptr()], data: vec![Dep::new(Src::Ref(0), NONE)] });
                b
            }
            Kernel::StreamScale | Kernel::StreamAdd | Kernel::StreamTriad => {
                let (loads, op, insns) = match self {
                    Kernel::StreamScale => (1u16, ops(0, 0, 0, 1), 5u16),
                    Kernel::StreamAdd => (2, ops(0, 0, 1, 0), 6),
                    _ => (2, ops(0, 0, 1, 1), 6),
                };
                let mut b = BlockSpec::looped(pc, insns);
                let mut data = Vec::new();
                for i in 0..loads {
                    let l = b.reference(i, Load, &[ptr()], &[]);
                    data.push(Dep::new(Src::Ref(l), op));
                }
                b.reference(loads + 1, Store, &[ptr()], &data);
                b.put(PTR, insns - 2, &[Dep::new(Src::Reg(PTR), ALU)]);
                b
            }
        }
    }

    /// Makes this loop the one `cpu` runs (defining its block once per
    /// system).
    pub fn set(&self, sys: &mut System, cpu: usize) {
        let id = sys.named_block(self.name(), || self.spec()).expect("every kernel's block is valid (tested below)");
        sys.set_loop(cpu, Some(id));
    }
}

/// Every kernel, for tests.
pub const ALL: [Kernel; 12] = [
    Kernel::Sweep,
    Kernel::Gups,
    Kernel::BwRead,
    Kernel::BwWrite,
    Kernel::BwReadWrite,
    Kernel::CopyLine,
    Kernel::CopyWord,
    Kernel::Transpose,
    Kernel::StreamCopy,
    Kernel::StreamScale,
    Kernel::StreamAdd,
    Kernel::StreamTriad,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_a_valid_block() {
        for k in ALL {
            k.spec().check().unwrap_or_else(|e| panic!("{}: {e}", k.name()));
        }
    }
}
