//! The trace readers against random and mutated input (the short, stable
//! form of the fuzz targets in fuzz/, run by `cargo test`): every input
//! gives references or an error, never a panic; valid traces round-trip
//! through the binary writer, lackey text and ChampSim records, plain or
//! compressed; a truncated binary trace is always an error.

use proptest::prelude::*;
use splab_trace::binary::{self, Writer};
use splab_trace::{champsim, lackey, open_reader, read_items, vgraw, Event, Format, Item, Kind, Origin, Ref, Region, Source};
use std::io::{Cursor, Write};

/// Items any reader may produce from an input of `n` bytes, and more:
/// the cap only guards the tests against a reader that loops.
fn cap(n: usize) -> usize {
    64 * n + 64
}

fn binary_items(layout: &[Region], items: &[Item]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), layout).unwrap();
    for i in items {
        match i {
            Item::Ref(r) => w.write_ref(r).unwrap(),
            Item::Event(e) => w.write_event(e).unwrap(),
        }
    }
    let (mut v, n) = w.finish().unwrap();
    let mut c = Cursor::new(&mut v);
    binary::patch_count(&mut c, n).unwrap();
    v
}

fn read_binary(b: &[u8]) -> Result<(Vec<Region>, Vec<Item>), splab_trace::TraceError> {
    let mut r = binary::Reader::new(b)?;
    let items = read_items(&mut r, cap(b.len()))?;
    Ok((r.layout().to_vec(), items))
}

fn read_lackey(b: &[u8]) -> Result<Vec<Item>, splab_trace::TraceError> {
    read_items(&mut lackey::Reader::new(b), cap(b.len()))
}

fn read_champsim(b: &[u8]) -> Result<Vec<Item>, splab_trace::TraceError> {
    read_items(&mut champsim::Reader::new(b), cap(b.len()))
}

/// The splabtrace tool's word stream (what `trace record` reads from its
/// FIFO).
fn read_vgraw(b: &[u8]) -> Result<Vec<Item>, splab_trace::TraceError> {
    read_items(&mut vgraw::Reader::new(b)?, cap(b.len()))
}

fn read_any(b: &[u8]) -> Result<Vec<Item>, splab_trace::TraceError> {
    let mut s = open_reader(Box::new(Cursor::new(b.to_vec())), None)?;
    read_items(&mut s, cap(b.len()).max(1 << 16))
}

/// xorshift64*, for inputs that need no shrinking.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A mutation of `v`: bytes flipped, inserted, deleted, a cut, or a piece
/// repeated, as fuzzers do.
fn mutate(rng: &mut Rng, v: &[u8]) -> Vec<u8> {
    let mut m = v.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(m.len() as u64 + 1) as usize;
        match rng.below(6) {
            0 if at < m.len() => m[at] ^= 1 << rng.below(8),
            1 if at < m.len() => m[at] = rng.next() as u8,
            2 => m.insert(at, rng.next() as u8),
            3 if at < m.len() => {
                m.remove(at);
            }
            4 => m.truncate(at),
            _ => {
                let end = (at + rng.below(32) as usize).min(m.len());
                let piece = m[at..end].to_vec();
                let to = rng.below(m.len() as u64 + 1) as usize;
                m.splice(to..to, piece);
            }
        }
    }
    m
}

fn sample_items(rng: &mut Rng, n: usize) -> Vec<Item> {
    let mut v = Vec::new();
    let mut a = 0x7f00_0000_0000u64;
    for _ in 0..n {
        match rng.below(40) {
            0 => v.push(Item::Event(Event::Map(Region {
                start: rng.below(1 << 40) << 12,
                len: (1 + rng.below(1000)) << 12,
                prot: rng.below(8) as u8,
                origin: Origin::from_u8(rng.below(6) as u8).unwrap(),
                name: if rng.below(2) == 0 { String::new() } else { "/lib/libc.so.6".into() },
            }))),
            1 => v.push(Item::Event(Event::Unmap { start: rng.below(1 << 40) << 12, len: (1 + rng.below(9)) << 12 })),
            _ => {
                a = if rng.below(8) == 0 { rng.next() } else { a.wrapping_add(rng.below(200)).wrapping_sub(100) };
                let size = [0u32, 1, 2, 4, 8, 16, 32, 64, 3, 10, 100_000][rng.below(11) as usize];
                v.push(Item::Ref(Ref { addr: a, size, kind: Kind::from_bits(rng.next() as u8) }));
            }
        }
    }
    v
}

fn lackey_text(items: &[Item]) -> String {
    let mut s = String::from("==1== Lackey, an example Valgrind tool\n");
    for i in items {
        if let Item::Ref(r) = i {
            match r.kind {
                Kind::Instr => s.push_str(&format!("I  {:08x},{}\n", r.addr, r.size)),
                k => s.push_str(&format!(" {} {:08x},{}\n", k.letter(), r.addr, r.size)),
            }
        }
    }
    s.push_str("==1== \n");
    s
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for i in 0..20_000 {
        let n = rng.below(if i % 10 == 0 { 2000 } else { 200 }) as usize;
        let mut b: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        // Give some inputs a plausible start so the readers get past it.
        let start: &[u8] = match i % 5 {
            1 => b"SPLTRACE\x01\0\0\0",
            2 => b" L ",
            3 => vgraw::MAGIC,
            _ => b"",
        };
        b.splice(0..0, start.iter().copied());
        let _ = read_binary(&b);
        let _ = read_lackey(&b);
        let _ = read_champsim(&b);
        let _ = read_vgraw(&b);
        let _ = read_any(&b);
    }
}

#[test]
fn mutated_valid_traces_never_panic() {
    let mut rng = Rng(42);
    let items = sample_items(&mut rng, 300);
    let layout = vec![Region { start: 0x400000, len: 0x1000, prot: 5, origin: Origin::Image, name: "/bin/x".into() }];
    let bin = binary_items(&layout, &items);
    let text = lackey_text(&items).into_bytes();
    let cs: Vec<u8> = (0..40).flat_map(|i| champsim::encode(0x400000 + i, i % 3 == 0, i % 6 == 0, [i * 64, 0], [i * 8, 0, 0, 1])).collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&bin).unwrap();
    let gz = gz.finish().unwrap();
    for _ in 0..10_000 {
        let _ = read_binary(&mutate(&mut rng, &bin));
        let _ = read_lackey(&mutate(&mut rng, &text));
        let _ = read_champsim(&mutate(&mut rng, &cs));
        let _ = read_any(&mutate(&mut rng, &gz));
    }
}

#[test]
fn every_truncation_of_a_binary_trace_is_an_error() {
    let mut rng = Rng(7);
    let items = sample_items(&mut rng, 200);
    let bin = binary_items(&[], &items);
    assert_eq!(read_binary(&bin).unwrap().1, items);
    for cut in 0..bin.len() {
        let e = read_binary(&bin[..cut]).expect_err("a truncated trace must not read as a shorter one");
        assert!(e.to_string().starts_with("byte "), "{e}");
    }
}

#[test]
fn errors_name_the_offset_and_what_was_expected() {
    let items = vec![Item::Ref(Ref { addr: 0x1000, size: 8, kind: Kind::Load }); 3];
    let mut bin = binary_items(&[], &items);
    let at = bin.len() - 3; // the last reference's tag
    bin[at] = 0x90;
    assert_eq!(read_binary(&bin).unwrap_err().to_string(), format!("byte {at}: expected a record tag (0x00-0x7f reference, 0x80 map, 0x81 unmap, 0x82 block, 0x83 enter, 0x84 exit, 0x85 skip, 0xff end), found 0x90"));
    let e = read_binary(b"SPLTRACX\x01\0\0\0").unwrap_err();
    assert!(e.to_string().starts_with("byte 0: expected the magic"), "{e}");
    let e = read_champsim(&[0u8; 100]).unwrap_err();
    assert_eq!(e.to_string(), "byte 64: the data ends 36 bytes into a 64-byte ChampSim record");
    let mut rec = champsim::encode(1, false, false, [0; 2], [0; 4]);
    rec[9] = 7;
    let e = read_champsim(&rec).unwrap_err();
    assert!(e.to_string().starts_with("byte 8: expected a ChampSim record with is_branch"), "{e}");
}

#[test]
fn compressed_traces_read_as_plain_ones() {
    let mut rng = Rng(99);
    let items = sample_items(&mut rng, 5000);
    let bin = binary_items(&[], &items);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bin).unwrap();
    let gz = gz.finish().unwrap();
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 1);
    xz.write_all(&bin).unwrap();
    let xz = xz.finish().unwrap();
    for data in [&bin, &gz, &xz] {
        assert_eq!(read_any(data).unwrap(), items);
    }
    // A corrupt gzip stream is an error that says the offset is of the
    // decompressed data.
    let mut bad = gz.clone();
    let n = bad.len();
    bad.truncate(n / 2);
    let e = read_any(&bad).unwrap_err();
    assert!(e.to_string().contains("decompressed"), "{e}");
    // Lackey text and ChampSim records are told apart from the first bytes.
    let text = lackey_text(&items);
    let mut s = open_reader(Box::new(Cursor::new(text.into_bytes())), None).unwrap();
    assert_eq!(s.format(), Format::Lackey);
    let refs: Vec<Item> = items.iter().filter(|i| matches!(i, Item::Ref(_))).cloned().collect();
    assert_eq!(read_items(&mut s, 1 << 20).unwrap(), refs);
    let cs = champsim::encode(0x401000, true, true, [0x7000, 0], [0x8000, 0x9000, 0, 0]);
    let mut s = open_reader(Box::new(Cursor::new(cs.to_vec())), None).unwrap();
    assert_eq!(s.format(), Format::ChampSim);
    let got = read_items(&mut s, 100).unwrap();
    let want: Vec<Item> = [(0x401000, Kind::Instr), (0x8000, Kind::Load), (0x9000, Kind::Load), (0x7000, Kind::Store)]
        .iter()
        .map(|&(addr, kind)| Item::Ref(Ref { addr, size: 0, kind }))
        .collect();
    assert_eq!(got, want);
}

fn arb_ref() -> impl Strategy<Value = Ref> {
    (any::<u64>(), prop_oneof![Just(0u32), 1u32..=64, any::<u32>()], 0u8..4).prop_map(|(addr, size, k)| Ref { addr, size, kind: Kind::from_bits(k) })
}

fn arb_region() -> impl Strategy<Value = Region> {
    (0u64..1 << 47, 1u64..1 << 30, 0u8..8, 0u8..6, "[a-z/.]{0,20}").prop_map(|(start, len, prot, o, name)| Region {
        start,
        len,
        prot,
        origin: Origin::from_u8(o).unwrap(),
        name,
    })
}

fn arb_item() -> impl Strategy<Value = Item> {
    prop_oneof![
        20 => arb_ref().prop_map(Item::Ref),
        1 => arb_region().prop_map(|r| Item::Event(Event::Map(r))),
        1 => (0u64..1 << 47, 1u64..1 << 30).prop_map(|(start, len)| Item::Event(Event::Unmap { start, len })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn binary_round_trip(layout in prop::collection::vec(arb_region(), 0..4), items in prop::collection::vec(arb_item(), 0..300)) {
        let bin = binary_items(&layout, &items);
        let (l, got) = read_binary(&bin).unwrap();
        prop_assert_eq!(l, layout);
        prop_assert_eq!(got, items);
    }

    #[test]
    fn lackey_round_trip(refs in prop::collection::vec(arb_ref(), 0..300)) {
        let items: Vec<Item> = refs.into_iter().map(Item::Ref).collect();
        prop_assert_eq!(read_lackey(lackey_text(&items).as_bytes()).unwrap(), items);
    }
}

/// The instruction stream's records (a block's table, entries, exits, a
/// reference that did nothing) go through the binary format in order with
/// the references, and count as none of them.
#[test]
fn block_records_round_trip_and_are_not_references() {
    let table: Vec<u64> = (0..40).map(|i| i * 0x0101_0101_0101).collect();
    let items = vec![
        Item::Event(Event::Block(table)),
        Item::Ref(Ref { addr: 7, size: 0, kind: Kind::Enter }),
        Item::Ref(Ref { addr: 0x1000, size: 8, kind: Kind::Load }),
        Item::Ref(Ref { addr: 0, size: 0, kind: Kind::Skip }),
        Item::Ref(Ref { addr: 2, size: 0, kind: Kind::Exit }),
        Item::Ref(Ref { addr: 0x2000, size: 4, kind: Kind::Store }),
    ];
    let bin = binary_items(&[], &items);
    let (_, back) = read_binary(&bin).unwrap();
    assert_eq!(back, items);
    // The header counts the two references only.
    assert_eq!(binary::Reader::new(&bin[..]).unwrap().ref_count(), Some(2));
    for cut in 0..bin.len() {
        assert!(read_binary(&bin[..cut]).is_err(), "cut at {cut}");
    }
}
