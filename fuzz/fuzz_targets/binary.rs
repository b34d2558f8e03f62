//! splab's binary format: any bytes read to an error or to items that
//! write back to a trace reading the same items.
#![no_main]
use libfuzzer_sys::fuzz_target;
use splab_trace::binary::{Reader, Writer};
use splab_trace::{read_items, Item, Source};

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = Reader::new(data) else { return };
    let Ok(items) = read_items(&mut r, 64 * data.len() + 64) else { return };
    let layout = r.layout().to_vec();
    let mut w = Writer::new(Vec::new(), &layout).expect("a layout that was read can be written");
    for i in &items {
        match i {
            Item::Ref(x) => w.write_ref(x).unwrap(),
            Item::Event(e) => w.write_event(e).unwrap(),
        }
    }
    let (out, _) = w.finish().unwrap();
    let mut again = Reader::new(&out[..]).expect("written header reads");
    assert_eq!(read_items(&mut again, items.len() + 1).expect("written trace reads"), items);
    assert_eq!(again.layout(), &layout[..]);
});
