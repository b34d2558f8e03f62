//! The splabtrace tool's word stream: any bytes read to references or an
//! error naming a byte offset.
#![no_main]
use libfuzzer_sys::fuzz_target;
use splab_trace::{read_items, vgraw, Pos};

fuzz_target!(|data: &[u8]| {
    let r = vgraw::Reader::new(data).and_then(|mut r| read_items(&mut r, 64 * data.len() + 64));
    if let Err(e) = r {
        assert!(matches!(e.pos, Some(Pos::Byte(_))) || e.pos.is_none());
    }
});
