//! valgrind lackey text: any bytes read to references or an error naming
//! a line.
#![no_main]
use libfuzzer_sys::fuzz_target;
use splab_trace::{lackey, read_items, Pos};

fuzz_target!(|data: &[u8]| {
    if let Err(e) = read_items(&mut lackey::Reader::new(data), 64 * data.len() + 64) {
        assert!(matches!(e.pos, Some(Pos::Line(_))) || e.pos.is_none());
    }
});
