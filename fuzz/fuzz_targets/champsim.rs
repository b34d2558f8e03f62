//! ChampSim records: any bytes read to references or an error naming a
//! byte offset.
#![no_main]
use libfuzzer_sys::fuzz_target;
use splab_trace::{champsim, read_items, Pos};

fuzz_target!(|data: &[u8]| {
    match read_items(&mut champsim::Reader::new(data), 8 * data.len() + 64) {
        Ok(items) => assert!(items.len() <= 7 * (data.len() / 64)),
        Err(e) => assert!(matches!(e.pos, Some(Pos::Byte(b)) if b <= data.len() as u64)),
    }
});
