//! Converting any readable trace to the binary format: the layout goes to
//! the header, references and events are copied in order.

use crate::binary::{patch_count, Writer};
use crate::info::KindCounts;
use crate::{Event, Source, Step, TraceError};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};

#[derive(Clone, Debug, Default, Serialize)]
pub struct Converted {
    pub refs: u64,
    pub by_kind: KindCounts,
    pub layout_regions: u64,
    pub maps: u64,
    pub unmaps: u64,
    /// Block tables of the instruction stream (splabtrace's).
    #[serde(skip_serializing_if = "is_zero")]
    pub block_tables: u64,
    /// Size of the binary trace written.
    pub bytes: u64,
}

/// Why a conversion failed: the input is malformed, or the output could
/// not be written.
#[derive(Debug)]
pub enum ConvertError {
    Trace(TraceError),
    Write(std::io::Error),
}

impl From<TraceError> for ConvertError {
    fn from(e: TraceError) -> Self {
        ConvertError::Trace(e)
    }
}

impl From<std::io::Error> for ConvertError {
    fn from(e: std::io::Error) -> Self {
        ConvertError::Write(e)
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Writes everything `src` holds to `out` in the binary format, with the
/// reference count filled in. `progress` gets the references so far.
pub fn convert<W: Write + Seek>(src: &mut dyn Source, out: W, progress: &mut dyn FnMut(u64)) -> Result<Converted, ConvertError> {
    let layout = src.layout().to_vec();
    let mut w = Writer::new(BufWriter::with_capacity(1 << 20, out), &layout)?;
    let mut c = Converted { layout_regions: layout.len() as u64, ..Default::default() };
    let mut refs = Vec::with_capacity(8192);
    loop {
        refs.clear();
        let step = src.read(&mut refs, 8192)?;
        for r in &refs {
            c.by_kind.count(r.kind);
            w.write_ref(r)?;
        }
        progress(w.count());
        match step {
            Step::Full => {}
            Step::Event(e) => {
                w.write_event(&e)?;
                match e {
                    Event::Map(_) => c.maps += 1,
                    Event::Unmap { .. } => c.unmaps += 1,
                    Event::Block(_) => c.block_tables += 1,
                }
            }
            Step::End => break,
        }
    }
    let (bw, n) = w.finish()?;
    let mut f = bw.into_inner().map_err(|e| e.into_error())?;
    patch_count(&mut f, n)?;
    c.refs = n;
    c.bytes = f.seek(SeekFrom::End(0))?;
    Ok(c)
}

/// `convert` into a new file.
pub fn convert_file(src: &mut dyn Source, out: &std::path::Path, progress: &mut dyn FnMut(u64)) -> Result<Converted, ConvertError> {
    let f = File::create(out)?;
    convert(src, f, progress)
}
