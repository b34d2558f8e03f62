//! `splab trace record|convert|info`: making traces of real programs,
//! converting traces from other tools to splab's binary format, and
//! describing a trace. Replaying one is `splab sim trace:FILE`.

use crate::error::Fail;
use crate::output::{emit, json, num};
use crate::progress::Progress;
use splab_hw::size;
use clap::Subcommand;
use splab_trace::convert::{convert_file, ConvertError};
use splab_trace::record::{self, RecordError};
use splab_trace::{info, open, Format, Region, Source};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum TraceCmd {
    /// Run a program under valgrind (splab's splabtrace tool, or lackey)
    /// or DynamoRIO (`--frontend dynamorio`) and write its memory
    /// references, with its mmap layout (valgrind), as a binary trace.
    Record {
        /// The trace to write [default: PROG.trace in this directory].
        #[arg(long, short = 'o', value_name = "FILE")]
        out: Option<PathBuf>,
        /// The valgrind to run.
        #[arg(long, value_name = "PATH", default_value = "valgrind")]
        valgrind: PathBuf,
        /// Where the program's standard output goes [default: /dev/null].
        #[arg(long, value_name = "FILE")]
        program_stdout: Option<PathBuf>,
        /// The valgrind tool: splabtrace (splab's own, about 100 times
        /// faster) or lackey [default: splabtrace when it was built].
        #[arg(long, value_name = "TOOL")]
        tool: Option<String>,
        /// Record instruction fetches too (splabtrace; lackey always
        /// records them; the replay counts and skips them).
        #[arg(long)]
        ifetch: bool,
        /// What runs the program: valgrind (with --tool) or splab's
        /// DynamoRIO client (loads, stores and block tables; no fetches,
        /// no map events).
        #[arg(long, value_name = "valgrind|dynamorio", default_value = "valgrind", env = "SPLAB_FRONTEND", value_parser = splab_trace::online::Frontend::parse)]
        frontend: splab_trace::online::Frontend,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "PROG ARGS")]
        program: Vec<OsString>,
    },
    /// Convert a trace (lackey text, ChampSim, splab; gzip or xz) to
    /// splab's binary format.
    Convert {
        input: PathBuf,
        output: PathBuf,
        /// The input's format (splab, lackey, champsim) [default: from its first bytes].
        #[arg(long, value_name = "FORMAT")]
        from: Option<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print what a trace holds: references by kind, footprint, layout.
    Info {
        file: PathBuf,
        /// The trace's format (splab, lackey, champsim) [default: from its first bytes].
        #[arg(long, value_name = "FORMAT")]
        from: Option<String>,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn cmd(c: TraceCmd) -> Result<i32, Fail> {
    match c {
        TraceCmd::Record { out, valgrind, program_stdout, tool, ifetch, frontend, json, program } => {
            let tool = match (frontend, tool) {
                (splab_trace::online::Frontend::DynamoRio, Some(t)) => return Err(Fail::Input(format!("--tool {t}: a valgrind tool; --frontend dynamorio records with splab's DynamoRIO client"))),
                (splab_trace::online::Frontend::DynamoRio, None) => record::Tool::Dynamorio,
                (_, Some(t)) => record::Tool::parse(&t).map_err(|e| Fail::Input(format!("--tool: {e}")))?,
                (_, None) => record::Tool::default_available(),
            };
            record_cmd(record::Options { out: out.unwrap_or_default(), program, valgrind, program_stdout, tool, ifetch }, json)
        }
        TraceCmd::Convert { input, output, from, json } => convert_cmd(&input, &output, from.as_deref(), json),
        TraceCmd::Info { file, from, json } => info_cmd(&file, from.as_deref(), json),
    }
}

fn format_opt(from: Option<&str>) -> Result<Option<Format>, Fail> {
    from.map(Format::parse).transpose().map_err(|e| Fail::Input(format!("--from: {e}")))
}

fn record_cmd(mut o: record::Options, as_json: bool) -> Result<i32, Fail> {
    if o.out.as_os_str().is_empty() {
        let base = o.program.first().and_then(|p| Path::new(p).file_name()).map(|f| f.to_os_string()).unwrap_or_else(|| "prog".into());
        let mut name = base;
        name.push(".trace");
        o.out = PathBuf::from(name);
    }
    let mut bar = Progress::new(0, "recording", "refs", as_json);
    let r = record::record(&o, &mut |n| bar.update(n));
    bar.finish();
    let r = r.map_err(|e| match e {
        RecordError::Input(m) => Fail::Input(m),
        RecordError::Run(m) => Fail::Run(m),
    })?;
    if as_json {
        emit(&json(&r));
        return Ok(0);
    }
    let mut s = String::new();
    let k = &r.by_kind;
    let fetches = if r.ifetch { "with instruction fetches" } else { "without instruction fetches" };
    let _ = writeln!(s, "recorded {} with {}, tool {} ({fetches})", r.out.display(), r.valgrind, r.tool.name());
    let _ = writeln!(
        s,
        "  references  {} ({} instruction fetches, {} loads, {} stores, {} modifies)",
        r.refs, k.instr, k.load, k.store, k.modify
    );
    let _ = writeln!(s, "  layout      {} regions in the header, {} map and {} unmap events", r.layout_regions, r.maps, r.unmaps);
    let _ = writeln!(s, "  trace       {} ({} bytes a reference)", size::show(r.trace_bytes), num(r.trace_bytes as f64 / r.refs.max(1) as f64));
    let status = r.exit_status.map(|c| c.to_string()).unwrap_or_else(|| "killed by a signal".into());
    let _ = writeln!(s, "  program     exit status {status}, {} s under {}", num(r.host_seconds), r.tool.runner());
    emit(&s);
    Ok(0)
}

fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

fn convert_cmd(input: &Path, output: &Path, from: Option<&str>, as_json: bool) -> Result<i32, Fail> {
    let format = format_opt(from)?;
    if same_file(input, output) {
        return Err(Fail::Input(format!("{} is both the input and the output", input.display())));
    }
    let mut src = open(input, format).map_err(|e| Fail::Input(format!("{}: {e}", input.display())))?;
    let mut bar = Progress::new(src.ref_count().unwrap_or(0), "converting", "refs", as_json);
    let r = convert_file(&mut src, output, &mut |n| bar.update(n));
    bar.finish();
    let c = match r {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(output);
            return Err(match e {
                ConvertError::Trace(e) => Fail::Input(format!("{}: {e}", input.display())),
                ConvertError::Write(e) => Fail::Run(format!("writing {}: {e}", output.display())),
            });
        }
    };
    if as_json {
        emit(&json(&serde_json::json!({
            "input": input, "output": output, "format": src.format(), "compression": src.compression, "converted": c,
        })));
        return Ok(0);
    }
    let mut s = String::new();
    let _ = writeln!(s, "converted {} ({}, compression {}) to {}", input.display(), src.format().name(), src.compression.name(), output.display());
    let k = &c.by_kind;
    let _ = writeln!(
        s,
        "  references  {} ({} instruction fetches, {} loads, {} stores, {} modifies)",
        c.refs, k.instr, k.load, k.store, k.modify
    );
    let _ = writeln!(s, "  layout      {} regions in the header, {} map and {} unmap events", c.layout_regions, c.maps, c.unmaps);
    let _ = writeln!(s, "  written     {} ({} bytes a reference)", size::show(c.bytes), num(c.bytes as f64 / c.refs.max(1) as f64));
    emit(&s);
    Ok(0)
}

fn region_line(r: &Region) -> String {
    let p = |bit: u8, c: char| if r.prot & bit != 0 { c } else { '-' };
    format!(
        "    {:#014x}-{:#014x} {}{}{} {:<7} {:>10}  {}",
        r.start,
        r.end(),
        p(1, 'r'),
        p(2, 'w'),
        p(4, 'x'),
        r.origin.name(),
        size::show(r.len),
        r.name
    )
}

fn info_cmd(file: &Path, from: Option<&str>, as_json: bool) -> Result<i32, Fail> {
    let format = format_opt(from)?;
    let mut src = open(file, format).map_err(|e| Fail::Input(format!("{}: {e}", file.display())))?;
    let mut bar = Progress::new(src.ref_count().unwrap_or(0), "reading", "refs", as_json);
    let r = info::scan(&mut src, &mut |n| bar.update(n));
    bar.finish();
    let i = r.map_err(|e| Fail::Input(format!("{}: {e}", file.display())))?;
    if as_json {
        emit(&json(&i));
        return Ok(0);
    }
    let mut s = String::new();
    let _ = writeln!(s, "trace             {}", file.display());
    let _ = writeln!(s, "format            {} (compression {})", i.format.name(), i.compression.name());
    let k = &i.by_kind;
    let _ = writeln!(s, "references        {}", i.refs);
    let _ = writeln!(s, "  by kind         {} instruction fetches, {} loads, {} stores, {} modifies", k.instr, k.load, k.store, k.modify);
    let _ = writeln!(
        s,
        "data footprint    {} pages of 4 KB ({}) in {} blocks of 2 MB, {} of them touched on every page",
        i.data_pages_4k,
        size::show(i.data_pages_4k * 4096),
        i.data_blocks_2m,
        i.data_full_blocks_2m
    );
    let _ = writeln!(s, "code footprint    {} pages of 4 KB", i.instr_pages_4k);
    if let Some((lo, hi)) = i.data_range {
        let _ = writeln!(s, "data addresses    {lo:#x} to {hi:#x}");
    }
    let _ = writeln!(s, "layout            {} regions in the header", i.layout.len());
    for r in &i.layout {
        let _ = writeln!(s, "{}", region_line(r));
    }
    let _ = writeln!(s, "events            {} maps, {} unmaps", i.maps, i.unmaps);
    if !i.mapped.is_empty() {
        let _ = writeln!(s, "  first maps");
        for r in &i.mapped {
            let _ = writeln!(s, "{}", region_line(r));
        }
    }
    emit(&s);
    Ok(0)
}
