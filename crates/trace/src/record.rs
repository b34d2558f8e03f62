//! `splab trace record`: runs a program under valgrind and writes its
//! references in the binary format as it runs.
//!
//! Two valgrind tools can do it. splabtrace, our own (tools/vgtrace, built
//! by build.rs when valgrind's tool headers and libraries are installed),
//! stores a 64-bit word per reference into a buffer from inline code and
//! writes the buffer into a FIFO (`vgraw.rs`); it reports the initial
//! layout (program image, loader, stack, heap) and every mmap, munmap,
//! mremap and brk through valgrind's memory-tracking hooks. It runs about a
//! hundred times faster than lackey, and records instruction fetches only
//! when asked (the replay skips them). lackey is the fallback:
//!
//! valgrind writes its log (`--trace-mem=yes` references and
//! `--trace-syscalls=yes` syscall lines) into a FIFO; a thread reads it with
//! the lackey reader and writes the binary trace, so the text (gigabytes
//! for a few seconds of a program) never lands on disk or in memory.
//!
//! The layout: when the log starts, valgrind has loaded the program and its
//! ELF interpreter; their file mappings are read from /proc/PID/maps and
//! become the header's layout (valgrind's own files are left out). Every
//! later mmap, munmap, mremap and brk of the program comes from the syscall
//! lines as an event. The stack and anything else valgrind set up for the
//! program are not told apart from valgrind's own memory; the replay maps
//! them from the pages the program touches.

use crate::convert::{convert, ConvertError, Converted};
use crate::info::KindCounts;
use crate::{lackey, vgraw, Format, Origin, Ref, Region, Source, Step, TraceError};
use serde::Serialize;
use std::ffi::{CString, OsString};
use std::fs::{File, OpenOptions};
use std::io::BufReader;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Options {
    /// The binary trace to write.
    pub out: PathBuf,
    /// The program and its arguments.
    pub program: Vec<OsString>,
    /// The valgrind executable.
    pub valgrind: PathBuf,
    /// Where the program's standard output goes (None: /dev/null).
    pub program_stdout: Option<PathBuf>,
    /// The valgrind tool to record with.
    pub tool: Tool,
    /// Record instruction fetches (splabtrace; lackey always does).
    pub ifetch: bool,
}

/// What records: a valgrind tool, or splab's DynamoRIO client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// valgrind's lackey, its text log parsed.
    Lackey,
    /// splab's own tool (tools/vgtrace), a binary stream.
    Splabtrace,
    /// splab's DynamoRIO client (crates/drclient) writing the same binary
    /// stream as splabtrace (`--out`): loads, stores, its block tables
    /// and entry and exit words, counts of instructions; no instruction
    /// fetches and no map events (the replay maps what is touched).
    Dynamorio,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Lackey => "lackey",
            Tool::Splabtrace => "splabtrace",
            Tool::Dynamorio => "dynamorio",
        }
    }

    /// What runs the program: valgrind, or DynamoRIO.
    pub fn runner(self) -> &'static str {
        match self {
            Tool::Lackey | Tool::Splabtrace => "valgrind",
            Tool::Dynamorio => "DynamoRIO",
        }
    }

    pub fn parse(s: &str) -> Result<Tool, String> {
        match s {
            "lackey" => Ok(Tool::Lackey),
            "splabtrace" => Ok(Tool::Splabtrace),
            _ => Err(format!("unknown tool {s:?} (known: splabtrace, lackey)")),
        }
    }

    /// splabtrace when it was built, else lackey.
    pub fn default_available() -> Tool {
        if splabtrace_lib().is_ok() {
            Tool::Splabtrace
        } else {
            Tool::Lackey
        }
    }
}

/// The directory to point VALGRIND_LIB at for splabtrace (the tool and
/// links to valgrind's support files, made by build.rs), or why there is
/// none.
pub fn splabtrace_lib() -> Result<PathBuf, String> {
    let Some(dir) = option_env!("SPLAB_VGTOOL_LIB") else {
        return Err("the splabtrace tool was not built (it needs valgrind's tool headers and libraries at build time: apt-get install valgrind, then rebuild)".into());
    };
    let dir = PathBuf::from(dir);
    if !dir.join("splabtrace-amd64-linux").is_file() {
        return Err(format!("the splabtrace tool is missing from {} (rebuild splab)", dir.display()));
    }
    Ok(dir)
}

/// What runs a program under `--frontend dynamorio`, as reports name it.
pub const DYNAMORIO_VERSION: &str = "DynamoRIO 11.90 (dynamorio-sys)";

/// `program` under DynamoRIO with splab's client and its arguments
/// `client_args`: `libdynamorio.so` is executed in the program's place,
/// with the program's own arguments (its name as argv[0]) and its path in
/// `DYNAMORIO_EXE_PATH`, and loads it (DynamoRIO's early injection, what
/// its `drrun` does); the options, the client among them, come from
/// `DYNAMORIO_OPTIONS`, which DynamoRIO passes on to every process it
/// follows into: forks, and execs unless `follow_execs` is false
/// (`-no_follow_children`). The program sees that environment and
/// the kernel's layout, so the layout's randomisation is turned off and
/// the caller keeps the arguments' lengths fixed: a rerun then gives the
/// same stream, as under valgrind, whose own address-space manager
/// places the program.
#[cfg(feature = "replay")]
pub(crate) fn dynamorio_command(program: &[OsString], client_args: &[String], follow_execs: bool) -> Result<Command, String> {
    use std::os::unix::process::CommandExt;
    let dr = splab_drclient::dynamorio()?;
    let prog = program.first().ok_or("no program")?;
    let exe = which(Path::new(prog)).ok_or_else(|| format!("program {prog:?} not found"))?;
    let client = dr.ring_client();
    let client_text = client.to_string_lossy().into_owned();
    for p in std::iter::once(&client_text).chain(client_args) {
        if p.contains(['\'', ';', ' ']) {
            return Err(format!("{p}: a path DynamoRIO's options cannot carry (a quote, semicolon or space)"));
        }
    }
    let follow = if follow_execs { "" } else { " -no_follow_children" };
    // No traces: DynamoRIO then runs every block as built, never joining
    // hot ones into a trace. On this project's host sqlite3's queries ran
    // under DynamoRIO with no client in 0.94 s instead of 1.33 (native
    // 0.26), and a sampled run (`--sample 100k:10M`) in 3.2 s instead of
    // 5.3; the streams of full detail are the same word for word
    // (docs/real-programs.md, "How it runs").
    let options = format!("-code_api -disable_traces{follow} -client_lib '{client_text};0;{}'", client_args.join(" "));
    let mut cmd = Command::new(&dr.library);
    cmd.arg0(prog).args(&program[1..]).env("DYNAMORIO_OPTIONS", options).env("DYNAMORIO_EXE_PATH", exe);
    shell_underscore(&mut cmd, program);
    // SAFETY: personality(2) is async-signal-safe; nothing else runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let cur = libc::personality(0xffff_ffff);
            if cur != -1 {
                libc::personality((cur | libc::ADDR_NO_RANDOMIZE) as libc::c_ulong);
            }
            Ok(())
        });
    }
    Ok(cmd)
}

/// Without the `replay` feature (the fuzz targets' build) splab has no
/// DynamoRIO: `record --frontend dynamorio` says so.
#[cfg(not(feature = "replay"))]
pub(crate) fn dynamorio_command(_: &[OsString], _: &[String], _: bool) -> Result<Command, String> {
    Err("this build has no DynamoRIO (splab-trace without its replay feature)".into())
}

#[derive(Serialize, Debug)]
pub struct Recorded {
    pub out: PathBuf,
    pub refs: u64,
    pub by_kind: KindCounts,
    /// Regions in the header (the program image and its loader).
    pub layout_regions: u64,
    pub maps: u64,
    pub unmaps: u64,
    /// The program's exit status as valgrind or DynamoRIO passed it on.
    pub exit_status: Option<i32>,
    pub trace_bytes: u64,
    pub host_seconds: f64,
    /// The version of what ran the program (valgrind's, or DynamoRIO's
    /// under `--frontend dynamorio`).
    pub valgrind: String,
    /// The tool that recorded.
    pub tool: Tool,
    /// Whether instruction fetches were recorded.
    pub ifetch: bool,
}

/// Why recording failed: a bad request (exit 2) or a run that went wrong.
#[derive(Debug)]
pub enum RecordError {
    Input(String),
    Run(String),
}

/// valgrind's version line, or why it cannot be run.
pub fn valgrind_version(valgrind: &Path) -> Result<String, String> {
    let out = Command::new(valgrind)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {} ({e}); install valgrind (Debian: apt-get install valgrind)", valgrind.display()))?;
    if !out.status.success() {
        return Err(format!("{} --version failed ({})", valgrind.display(), out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether `prog` names an executable file, directly or on PATH.
pub(crate) fn find_program(prog: &Path) -> bool {
    which(prog).is_some()
}

/// The file `prog` names, directly (with a slash) or on PATH.
pub(crate) fn which(prog: &Path) -> Option<PathBuf> {
    if prog.as_os_str().as_bytes().contains(&b'/') {
        return prog.is_file().then(|| prog.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(prog)).find(|p| p.is_file())
}

/// The environment's `_` as a shell sets it for `program`: the path of
/// the program it runs. splab's own `_`, which a shell set to splab's
/// path, would otherwise reach the program and put its stack (and every
/// address on it) where splab's install path says: the same program gave
/// other references from a copy of splab at a path of another length.
pub(crate) fn shell_underscore(cmd: &mut Command, program: &[OsString]) {
    if let Some(p) = program.first() {
        let path = which(Path::new(p)).unwrap_or_else(|| PathBuf::from(p));
        cmd.env("_", path);
    }
}

/// Valgrind's option that puts its gdbserver FIFOs and shared-memory
/// file in the run's own directory (`dir`), which is removed after the
/// run: by default they go to $TMPDIR, where a valgrind that is killed
/// leaves them. Their names keep "vgdb-pipe", which `image_regions` leaves
/// out of the program's image.
pub(crate) fn vgdb_prefix(dir: &Path) -> OsString {
    let mut a = OsString::from("--vgdb-prefix=");
    a.push(dir.join("vgdb-pipe"));
    a
}

/// The program image and loader mappings in `/proc/PID/maps` of the
/// valgrind process: file mappings that are not valgrind's own.
pub fn image_regions(maps: &str) -> Vec<Region> {
    let mut v: Vec<Region> = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let path = f.nth(3).unwrap_or("");
        if !path.starts_with('/') || path.contains("/valgrind/") || path.contains("vgdb-pipe") {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
        if end <= start {
            continue;
        }
        let pb = perms.as_bytes();
        let prot = (pb.first() == Some(&b'r')) as u8 | ((pb.get(1) == Some(&b'w')) as u8) << 1 | ((pb.get(2) == Some(&b'x')) as u8) << 2;
        v.push(Region { start, len: end - start, prot, origin: Origin::Image, name: path.to_string() });
    }
    v
}

pub(crate) fn mkfifo(path: &Path) -> Result<(), String> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("bad path {}", path.display()))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    if r != 0 {
        return Err(format!("mkfifo {}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The lackey reader with its first read done: by then valgrind has
/// mapped the program and its loader, and `/proc/PID/maps` gives them as
/// the layout.
struct Started<R: std::io::BufRead> {
    src: lackey::Reader<R>,
    first: Option<(Vec<Ref>, Step)>,
    layout: Vec<Region>,
}

impl<R: std::io::BufRead> Source for Started<R> {
    fn format(&self) -> Format {
        Format::Lackey
    }
    fn layout(&self) -> &[Region] {
        &self.layout
    }
    fn ref_count(&self) -> Option<u64> {
        None
    }
    fn read(&mut self, out: &mut Vec<Ref>, max: usize) -> Result<Step, TraceError> {
        match self.first.take() {
            Some((refs, step)) => {
                out.extend_from_slice(&refs);
                Ok(step)
            }
            None => self.src.read(out, max),
        }
    }
}

/// The FIFO, read in large gulps. valgrind writes its log one line (one
/// reference) per write call; a reader that woke for each would cost a
/// context switch per reference. After a read that did not fill the
/// buffer it waits a little, so the pipe (enlarged to 1 MiB where the host
/// allows) fills in the meantime.
struct Gulps {
    f: File,
    short: bool,
}

impl Gulps {
    fn new(f: File) -> Gulps {
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor this File owns; a failure (an older
        // kernel, a lower pipe-max-size) leaves the default size.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
        Gulps { f, short: false }
    }
}

impl std::io::Read for Gulps {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.short {
            std::thread::sleep(Duration::from_millis(1));
        }
        let n = self.f.read(buf)?;
        self.short = n < buf.len().min(32 << 10);
        Ok(n)
    }
}

/// The reading thread: lackey text from the FIFO to the binary trace.
fn copy(fifo: &Path, out: &Path, pid: u32, count: &AtomicU64) -> Result<Converted, String> {
    let f = File::open(fifo).map_err(|e| format!("open {}: {e}", fifo.display()))?;
    let mut src = lackey::Reader::new(BufReader::with_capacity(1 << 20, Gulps::new(f)));
    let mut refs = Vec::with_capacity(8192);
    let step = src.read(&mut refs, 8192).map_err(|e| format!("valgrind's log, {e}"))?;
    let layout = std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|m| image_regions(&m)).unwrap_or_default();
    let mut started = Started { src, first: Some((refs, step)), layout };
    let file = File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    convert(&mut started, file, &mut |n| count.store(n, Ordering::Relaxed)).map_err(|e| match e {
        ConvertError::Trace(e) => format!("valgrind's log, {e}"),
        ConvertError::Write(e) => format!("write {}: {e}", out.display()),
    })
}

/// Records `o.program` (see the module comment). `progress` is called now
/// and then with the references written so far.
pub fn record(o: &Options, progress: &mut dyn FnMut(u64)) -> Result<Recorded, RecordError> {
    let Some(prog) = o.program.first() else {
        return Err(RecordError::Input("no program to record (usage: splab trace record [--out FILE] -- PROG ARGS)".into()));
    };
    if !find_program(Path::new(prog)) {
        return Err(RecordError::Input(format!("program {:?} not found", prog)));
    }
    let version = match o.tool {
        Tool::Dynamorio => {
            #[cfg(feature = "replay")]
            splab_drclient::dynamorio().map_err(|e| RecordError::Input(format!("--frontend dynamorio: {e}")))?;
            if o.ifetch {
                return Err(RecordError::Input("--ifetch: the DynamoRIO client records no instruction fetches (use --frontend valgrind)".into()));
            }
            DYNAMORIO_VERSION.to_string()
        }
        Tool::Splabtrace | Tool::Lackey => valgrind_version(&o.valgrind).map_err(RecordError::Input)?,
    };
    if o.tool == Tool::Splabtrace {
        splabtrace_lib().map_err(|e| RecordError::Input(format!("--tool splabtrace: {e}")))?;
    }
    if let Some(dir) = o.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            return Err(RecordError::Input(format!("--out {}: directory {} does not exist", o.out.display(), dir.display())));
        }
    }
    let stdout = match &o.program_stdout {
        Some(p) => Stdio::from(File::create(p).map_err(|e| RecordError::Input(format!("--program-stdout {}: {e}", p.display())))?),
        None => Stdio::null(),
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("splab-record-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| RecordError::Run(format!("cannot create {}: {e}", dir.display())))?;
    let result = run(o, &dir, stdout, version, progress);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The splabtrace reading thread: the tool's words from the FIFO to the
/// binary trace.
fn copy_raw(fifo: &Path, out: &Path, count: &AtomicU64) -> Result<Converted, String> {
    use std::os::fd::AsRawFd;
    let f = File::open(fifo).map_err(|e| format!("open {}: {e}", fifo.display()))?;
    // SAFETY: fcntl on a descriptor this File owns; a failure leaves the
    // default pipe size.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
    let mut src = vgraw::Reader::new(f).map_err(|e| format!("splabtrace's stream, {e}"))?;
    let file = File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    convert(&mut src, file, &mut |n| count.store(n, Ordering::Relaxed)).map_err(|e| match e {
        ConvertError::Trace(e) => format!("splabtrace's stream, {e}"),
        ConvertError::Write(e) => format!("write {}: {e}", out.display()),
    })
}

fn run(o: &Options, dir: &Path, stdout: Stdio, version: String, progress: &mut dyn FnMut(u64)) -> Result<Recorded, RecordError> {
    let fifo = dir.join(format!("{}.fifo", o.tool.name()));
    mkfifo(&fifo).map_err(RecordError::Run)?;
    let t0 = Instant::now();
    let mut cmd = match o.tool {
        Tool::Dynamorio => dynamorio_command(&o.program, &[format!("--out={}", fifo.display())], false).map_err(RecordError::Input)?,
        Tool::Splabtrace | Tool::Lackey => {
            let mut c = Command::new(&o.valgrind);
            shell_underscore(&mut c, &o.program);
            c
        }
    };
    match o.tool {
        Tool::Dynamorio => {}
        Tool::Lackey => {
            let mut log_arg = OsString::from("--log-file=");
            log_arg.push(&fifo);
            cmd.args(["--tool=lackey", "--trace-mem=yes", "--trace-syscalls=yes"]).arg(vgdb_prefix(dir)).arg(log_arg);
        }
        Tool::Splabtrace => {
            let lib = splabtrace_lib().map_err(RecordError::Input)?;
            let mut out_arg = OsString::from("--out=");
            out_arg.push(&fifo);
            cmd.env("VALGRIND_LIB", lib)
                .args(["--tool=splabtrace", "-q"])
                .arg(vgdb_prefix(dir))
                .arg(out_arg)
                .arg(if o.ifetch { "--ifetch=yes" } else { "--ifetch=no" });
        }
    }
    if o.tool != Tool::Dynamorio {
        cmd.arg("--").args(&o.program);
    }
    let mut child = cmd.stdout(stdout).spawn().map_err(|e| RecordError::Run(format!("cannot start {}: {e}", cmd.get_program().to_string_lossy())))?;
    let count = Arc::new(AtomicU64::new(0));
    let reader = {
        let (fifo, out, count, pid, tool) = (fifo.clone(), o.out.clone(), count.clone(), child.id(), o.tool);
        std::thread::spawn(move || match tool {
            Tool::Lackey => copy(&fifo, &out, pid, &count),
            Tool::Splabtrace | Tool::Dynamorio => copy_raw(&fifo, &out, &count),
        })
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {
                progress(count.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(RecordError::Run(format!("waiting for {}: {e}", o.tool.runner()))),
        }
    };
    // If valgrind never opened the log (it failed at start), the reader is
    // still waiting in open; a writer that comes and goes lets it see the
    // end. O_NONBLOCK: with no reader at all the open fails at once.
    let _ = OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&fifo);
    let copied = reader.join().map_err(|_| RecordError::Run("the trace writer thread panicked".into()))?;
    let copied = copied.map_err(RecordError::Run)?;
    let refs = copied.refs;
    progress(refs);
    if refs == 0 {
        let _ = std::fs::remove_file(&o.out);
        return Err(RecordError::Run(format!("{} exited ({status}) without recording any reference", o.tool.runner())));
    }
    Ok(Recorded {
        out: o.out.clone(),
        refs,
        by_kind: copied.by_kind,
        layout_regions: copied.layout_regions,
        maps: copied.maps,
        unmaps: copied.unmaps,
        exit_status: status.code(),
        trace_bytes: copied.bytes,
        host_seconds: t0.elapsed().as_secs_f64(),
        valgrind: version,
        tool: o.tool,
        ifetch: o.ifetch || o.tool == Tool::Lackey,
    })
}
