//! Writes the STREAM-triad binary trace `splab bench` replays, for
//! profiling the replay on its own: `mktriad FILE [REFS]`.
fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: mktriad FILE [REFS]");
    let refs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(48_000_000);
    splab_trace::synth::triad(std::path::Path::new(&path), refs, 64 << 20).expect("writing the trace");
}
