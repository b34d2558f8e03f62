//! One slot of a process's stream, applied to its simulated process:
//! references become loads and stores, map and unmap words events, as the
//! replay makes them (`replay::Run`, whose comment says how x86-64
//! addresses land in the modelled address space); block tables and
//! instruction counts go to the core model (`Run::define`,
//! `Run::instructions`); a fork word forks the simulated process. With
//! `--sample`, what a slot in detail cost goes to its process's window.

use super::procs::{fail, Proc, State};
use super::ring::*;
use super::sample::Window;
use crate::replay::Failure;
use crate::{vgraw, Event, Kind, Origin, Ref, Region, MAX_NAME};
use splab_sim::timing::CycleBreakdown;
use splab_vm::Pid;

impl State<'_> {
    /// Consumes one slot of `p`'s ring; false when none is published.
    pub(super) fn step(&mut self, p: &mut Proc) -> Result<bool, Failure> {
        if p.done {
            return Ok(false);
        }
        let Some(mut ring) = p.ring.take() else { return Ok(false) };
        let r = match ring.slot() {
            None => Ok(false),
            Some(words) => {
                let n = words.len();
                let r = self.slot(p, ring.pid, words);
                ring.release();
                self.out.batches += 1;
                self.out.stream_bytes += 8 * n as u64;
                r.map(|_| true)
            }
        };
        if ring.word(R_ENDED) != 0 && ring.published() <= ring.next {
            ring.ended = true;
        }
        p.ring = Some(ring);
        r
    }

    pub(super) fn snapshot(&mut self) -> (CycleBreakdown, u64, u64, u64, u64) {
        let b = self.sys.breakdown();
        let hw = self.sys.hw();
        let tlb = self.sys.tlb_report().total_misses;
        let insns = self.sys.core_stats().instructions;
        (b, hw.dram_accesses, tlb, self.total_refs, insns)
    }

    /// One slot: its words, and with `--sample` what they cost when the
    /// slot is in detail (its mode word says which), added to the
    /// process's window; a slot of warming closes that window.
    pub(super) fn slot(&mut self, p: &mut Proc, rpid: u32, w: &[u64]) -> Result<(), Failure> {
        if self.sample.is_none() {
            return self.words(p, rpid, w).and_then(|end| if end { self.finish(p) } else { Ok(()) });
        }
        let warming = w.len() >= 2 && w[0] as u8 == W_MODE && w[1] == 1;
        // Warming's filter leaves references out: their places in their
        // blocks are not the stream's.
        p.run.placing = !warming;
        self.sys.set_functional(warming && self.functional_warming);
        let end = if warming {
            self.close_window(p);
            let before = self.total_refs;
            let end = self.words(p, rpid, w)?;
            self.warming_refs += self.total_refs - before;
            end
        } else {
            let (b0, d0, t0, r0, i0) = self.snapshot();
            let end = self.words(p, rpid, w)?;
            let (b, d, t, r, i) = self.snapshot();
            let first = !p.measured;
            let x = p.window.get_or_insert_with(|| Window { first, ..Default::default() });
            x.data += b.data - b0.data;
            x.translation += b.translation - b0.translation;
            x.kernel += b.kernel - b0.kernel;
            x.core += b.core - b0.core;
            x.branch += b.branch - b0.branch;
            x.fetch += b.fetch - b0.fetch;
            x.dram += d - d0;
            x.tlb_misses += t - t0;
            x.refs += r - r0;
            x.instructions += i - i0;
            end
        };
        if end {
            self.finish(p)?;
        }
        Ok(())
    }

    pub(super) fn close_window(&mut self, p: &mut Proc) {
        if let Some(mut w) = p.window.take() {
            p.measured = true;
            w.cycles = w.data + w.translation + w.kernel + w.core + w.branch + w.fetch;
            self.measured_refs += w.refs;
            self.windows.push(w);
        }
    }

    /// The words of one slot of the stream of real process `rpid`; true
    /// when they end the stream (the accesses are made either way).
    pub(super) fn words(&mut self, p: &mut Proc, rpid: u32, w: &[u64]) -> Result<bool, Failure> {
        let sys = &mut *self.sys;
        sys.run_on(p.run.cpu, p.run.pid).map_err(|e| fail(format!("run: {e}")))?;
        let need = |i: usize, k: usize| -> Result<(), Failure> {
            if i + k >= w.len() {
                Err(Failure { msg: format!("the stream of process {rpid} breaks off inside an event (word {i} of a batch of {})", w.len()), input: true })
            } else {
                Ok(())
            }
        };
        let mut i = 0;
        let mut refs = 0u64;
        let mut ended = false;
        while i < w.len() {
            let word = w[i];
            let tag = word as u8;
            if tag < 0x20 {
                let r = vgraw::decode(word);
                refs += 1;
                i += 1;
                p.run.add_ref(sys, r)?;
                continue;
            }
            match tag {
                W_NOP | W_ENTER | W_EXIT => {
                    let kind = match tag {
                        W_NOP => Kind::Skip,
                        W_ENTER => Kind::Enter,
                        _ => Kind::Exit,
                    };
                    p.run.mark(sys, Ref { addr: word >> 8, size: 0, kind })?;
                    i += 1;
                }
                W_BLOCK => {
                    let n = (word >> 8) as usize;
                    if n > vgraw::MAX_TABLE_WORDS {
                        return Err(Failure { msg: format!("process {rpid}: a block table of {n} words (at most {})", vgraw::MAX_TABLE_WORDS), input: true });
                    }
                    need(i, n)?;
                    p.run.define(sys, &w[i + 1..i + 1 + n])?;
                    i += 1 + n;
                }
                W_INSN => {
                    need(i, 1)?;
                    let n = w[i + 1];
                    p.run.instructions(n);
                    i += 2;
                }
                W_MAP => {
                    need(i, 3)?;
                    let (start, len, info) = (w[i + 1], w[i + 2], w[i + 3]);
                    let nlen = (info >> 16) as usize;
                    if len == 0 || start.checked_add(len).is_none() || nlen > MAX_NAME {
                        return Err(Failure { msg: format!("process {rpid}: a map of {len:#x} bytes at {start:#x} (name of {nlen} bytes)"), input: true });
                    }
                    let words = nlen.div_ceil(8);
                    if words > 0 {
                        need(i, 3 + words)?;
                    }
                    let name: Vec<u8> = w[i + 4..i + 4 + words].iter().flat_map(|x| x.to_le_bytes()).take(nlen).collect();
                    let region = Region {
                        start,
                        len,
                        prot: (info & 7) as u8,
                        origin: Origin::from_u8((info >> 8) as u8).unwrap_or(Origin::Unknown),
                        name: String::from_utf8_lossy(&name).into_owned(),
                    };
                    p.run.event(sys, Event::Map(region))?;
                    i += 4 + words;
                }
                W_UNMAP => {
                    need(i, 2)?;
                    let (start, len) = (w[i + 1], w[i + 2]);
                    if len == 0 || start.checked_add(len).is_none() {
                        return Err(Failure { msg: format!("process {rpid}: an unmap of {len:#x} bytes at {start:#x}"), input: true });
                    }
                    p.run.event(sys, Event::Unmap { start, len })?;
                    i += 3;
                }
                W_FORK => {
                    need(i, 1)?;
                    let child = w[i + 1] as u32;
                    p.run.flush(sys)?;
                    let cpid: Pid = sys.fork(p.run.pid).map_err(|e| fail(format!("fork: {e}")))?;
                    let cpu = self.next_cpu % sys.ncpus();
                    self.next_cpu += 1;
                    self.out.forks += 1;
                    self.out.processes += 1;
                    let cp = Proc {
                        run: p.run.forked(cpid, cpu),
                        rpid: child,
                        ring: self.orphans.remove(&child),
                        execs: self.execs.remove(&child).unwrap_or_default(),
                        refs: 0,
                        clock: p.clock + refs,
                        done: false,
                        window: None,
                        measured: false,
                    };
                    self.procs.insert(child, cp);
                    sys.run_on(p.run.cpu, p.run.pid).map_err(|e| fail(format!("run: {e}")))?;
                    i += 2;
                }
                W_THREAD => {
                    self.out.threads += 1;
                    i += 1;
                }
                W_AGAIN => {
                    self.out.would_block += 1;
                    if word & AGAIN_IN_LOCKSTEP == 0 {
                        self.out.would_block_unordered += 1;
                    }
                    i += 1;
                }
                W_TIMED => {
                    self.out.timed_waits += 1;
                    i += 1;
                }
                W_SIGNAL => {
                    self.out.outside_signals += 1;
                    i += 1;
                }
                W_SKIP => {
                    need(i, 1)?;
                    refs += w[i + 1];
                    self.skipped += w[i + 1];
                    i += 2;
                }
                W_MODE => {
                    need(i, 1)?;
                    i += 2;
                }
                W_END => {
                    ended = true;
                    break;
                }
                _ => return Err(Failure { msg: format!("process {rpid}: expected a splabtrace word, found low byte {tag:#04x}"), input: true }),
            }
        }
        p.refs += refs;
        p.clock += refs;
        self.total_refs += refs;
        p.run.flush(self.sys)?;
        Ok(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::online::ProgramRun;
    use splab_sim::System;
    use std::fs::File;
    use std::path::Path;

    #[test]
    fn a_batch_that_breaks_off_inside_an_event_says_where() {
        use splab_hw::profile::Profile;
        let mut c = splab_sim::Config::new(Profile::load("sapphire-rapids").unwrap());
        c.memory = 64 << 20;
        let mut sys = System::new(c).unwrap();
        let ctl = File::open("/dev/null").unwrap();
        let mut st = State::new(&mut sys, Path::new("/nonexistent"), ctl, ProgramRun::default(), None);
        let Ok(mut p) = st.spawn(77) else { panic!("spawn") };
        // Two references, then a map event that lost its last two words.
        // A reference word: the address above the low byte, an 8-byte size
        // (code 3) and the kind in the low bits (vgraw.rs).
        let load = |a: u64| a << 8 | 3 << 2 | 1;
        let batch = [load(0x1000), load(0x1008), W_MAP as u64, 0x40_0000];
        let Err(e) = st.words(&mut p, 77, &batch) else { panic!("the batch was taken") };
        assert!(e.input && e.msg.contains("process 77") && e.msg.contains("word 2 of a batch of 4"), "{}", e.msg);
        // An instruction count without its count word.
        let Err(e) = st.words(&mut p, 77, &[W_INSN as u64]) else { panic!("the batch was taken") };
        assert!(e.msg.contains("word 0 of a batch of 1"), "{}", e.msg);
    }
}
