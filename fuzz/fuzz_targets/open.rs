//! Format and compression detection, then whichever reader: gzip and xz
//! streams included.
#![no_main]
use libfuzzer_sys::fuzz_target;
use splab_trace::{open_reader, read_items};

fuzz_target!(|data: &[u8]| {
    if let Ok(mut s) = open_reader(Box::new(std::io::Cursor::new(data.to_vec())), None) {
        let _ = read_items(&mut s, 1 << 20);
    }
});
