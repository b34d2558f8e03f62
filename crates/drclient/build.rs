//! Builds DynamoRIO from source with CMake, once per target directory,
//! and compiles splab's DynamoRIO clients (client/*.c) against it into
//! OUT_DIR. Only for x86-64 Linux, built there.
//!
//! Nothing here may fail the build: splab has to build on a machine with
//! only a Rust toolchain. When something is missing (cmake, make, a C++
//! compiler, the source) or a step fails, the build prints a cargo warning and goes on
//! without the clients; `SPLAB_DR_MISSING` then says why, and
//! `--frontend dynamorio` reports it at run time.
//!
//! The source is DynamoRIO 11.90 as the dynamorio-sys crate (11.90.1)
//! bundles it (its `dynamorio/` directory), taken from the first of:
//! - `SPLAB_DYNAMORIO_SRC`: a DynamoRIO source tree, or a directory with
//!   one in `dynamorio/` (the crate unpacked);
//! - Cargo's registry: the crate unpacked under `registry/src`, or its
//!   `.crate` under `registry/cache`, unpacked here with tar;
//! - `cargo fetch --locked` on `dr-source/Cargo.toml`, a manifest that
//!   depends on the crate and is never built: Cargo downloads the crate,
//!   checks it against the checksum in `dr-source/Cargo.lock`, and
//!   unpacks it into its registry. The crate itself is not a dependency
//!   of splab, since its build script makes Rust bindings with bindgen,
//!   which needs libclang.
//!
//! DynamoRIO is configured as dynamorio-sys's build script configures it
//! (no clients, docs, samples, tests or tools; RelWithDebInfo) in
//! `<target-dir>/dynamorio-11.90.1/build`, so that `cargo clippy`, `cargo
//! test` and `cargo build --release` share one build. A lock file in that
//! directory keeps two cargo runs from building it at once, and the file
//! `built` (the configuration, written last) says the build is complete.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The dynamorio-sys release whose bundled source is built.
const CRATE: &str = "dynamorio-sys-11.90.1";

/// The CMake cache entries: those of dynamorio-sys's build script.
const DEFINES: &[&str] = &[
    "-DBUILD_CLIENTS=NO",
    "-DBUILD_DOCS=NO",
    "-DBUILD_SAMPLES=NO",
    "-DBUILD_TESTS=NO",
    "-DBUILD_TOOLS=NO",
    "-DCMAKE_ASM_COMPILER=/usr/bin/as",
    "-DCMAKE_ASM_FLAGS=",
    "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
];

/// Why the clients were not built: `why` for the warning and the run-time
/// message, and the directories whose change should run this script
/// again (where the missing program would be installed).
struct NotBuilt {
    why: String,
    watch: Vec<PathBuf>,
}

impl From<String> for NotBuilt {
    fn from(why: String) -> NotBuilt {
        NotBuilt { why: format!("{why}; to try again: cargo clean -p splab-drclient, then rebuild"), watch: Vec::new() }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=client");
    // What the valgrind tool shares with the client: the system calls
    // run without a gate, the ring's format, the signals told apart.
    println!("cargo:rerun-if-changed=../../tools/vgtrace/local_syscalls.h");
    println!("cargo:rerun-if-changed=../../tools/vgtrace/ring_format.h");
    println!("cargo:rerun-if-changed=../../tools/vgtrace/block_deps.h");
    println!("cargo:rerun-if-changed=../../tools/vgtrace/signals.h");
    println!("cargo:rerun-if-changed=dr-source/Cargo.lock");
    println!("cargo:rerun-if-env-changed=SPLAB_DYNAMORIO_SRC");
    println!("cargo:rerun-if-env-changed=CXX");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" || host != target {
        println!("cargo:rustc-env=SPLAB_DR_MISSING=the DynamoRIO front end is built on x86-64 Linux for x86-64 Linux only");
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    match dynamorio(&out).and_then(|dr| clients(&out, &dr).map_err(NotBuilt::from).map(|()| dr)) {
        Ok(dr) => {
            println!("cargo:rerun-if-changed={}", dr.with_file_name("built").display());
            println!("cargo:rustc-env=SPLAB_DR_LIBRARY={}", dr.join("lib64/release/libdynamorio.so").display());
            println!("cargo:rustc-env=SPLAB_DR_CLIENTS={}", out.display());
        }
        Err(e) => {
            for d in &e.watch {
                println!("cargo:rerun-if-changed={}", d.display());
            }
            println!("cargo:warning=DynamoRIO client not built: {}", e.why);
            println!("cargo:rustc-env=SPLAB_DR_MISSING=the DynamoRIO client was not built: {}", e.why);
        }
    }
}

/// Whether `program` is in a directory of PATH; `package` is the Debian
/// package that has it. When it is not, those directories are watched,
/// so that installing it runs this script again.
fn on_path(program: &str, package: &str) -> Result<(), NotBuilt> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).filter(|d| d.is_absolute() && d.is_dir()).collect();
    if dirs.iter().any(|d| d.join(program).is_file()) {
        return Ok(());
    }
    Err(NotBuilt { why: format!("{program} is not installed; install it (Debian: apt-get install {package}) and rebuild splab"), watch: dirs })
}

/// The built DynamoRIO tree (`include/`, `lib64/release/`, `ext/`),
/// building it first unless it is there.
fn dynamorio(out: &Path) -> Result<PathBuf, NotBuilt> {
    on_path("cmake", "cmake")?;
    on_path("make", "make")?;
    // DynamoRIO's CMake project is C and C++.
    if std::env::var_os("CXX").is_none() {
        on_path("c++", "g++")?;
    }
    // OUT_DIR is <target-dir>/[<triple>/]<profile>/build/splab-drclient-<hash>/out.
    let top = out.ancestors().nth(4).ok_or_else(|| format!("OUT_DIR {} has no target directory above it", out.display()))?;
    let home = top.join("dynamorio-11.90.1");
    std::fs::create_dir_all(&home).map_err(|e| format!("mkdir {}: {e}", home.display()))?;
    let lock = File::create(home.join("lock")).map_err(|e| format!("{}: {e}", home.join("lock").display()))?;
    // Held until this returns: another cargo run that needs the same
    // build waits here, then finds it built.
    lock.lock().map_err(|e| format!("lock {}: {e}", home.join("lock").display()))?;
    let build = home.join("build");
    let built = home.join("built");
    let config = format!("{}\n{}\n", what_source(), DEFINES.join("\n"));
    if std::fs::read_to_string(&built).is_ok_and(|c| c == config) && build.join("lib64/release/libdynamorio.so").is_file() {
        return Ok(build);
    }
    let src = source(&home)?;
    let _ = std::fs::remove_file(&built);
    // A build left unfinished (stopped) from the same source goes on;
    // any other is started again.
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).unwrap_or_default();
    if !cache.lines().any(|l| l.strip_prefix("CMAKE_HOME_DIRECTORY:INTERNAL=") == Some(&*src.to_string_lossy())) {
        let _ = std::fs::remove_dir_all(&build);
    }
    let log = home.join("build.log");
    let _ = std::fs::remove_file(&log);
    let mut configure = Command::new("cmake");
    configure.args(["-G", "Unix Makefiles", "-S"]).arg(&src).arg("-B").arg(&build).args(DEFINES);
    run(&mut configure, &log, "configure")?;
    let mut make = Command::new("cmake");
    make.arg("--build").arg(&build).args(["--target", "all"]);
    // make takes its jobs from cargo's jobserver, as the cmake crate
    // arranges it.
    match std::env::var_os("CARGO_MAKEFLAGS") {
        Some(f) => {
            make.env("MAKEFLAGS", f);
        }
        None => {
            make.arg("--parallel").arg(std::env::var("NUM_JOBS").unwrap_or_else(|_| "1".into()));
        }
    }
    run(&mut make, &log, "build")?;
    std::fs::write(&built, &config).map_err(|e| format!("{}: {e}", built.display()))?;
    // Set back to long ago: cargo watches the file to see it vanish, and
    // would take its writing during this run for a change.
    File::options()
        .write(true)
        .open(&built)
        .and_then(|f| f.set_modified(std::time::UNIX_EPOCH))
        .map_err(|e| format!("{}: {e}", built.display()))?;
    let _ = std::fs::remove_dir_all(home.join("src"));
    Ok(build)
}

/// Runs `cmd`, its output appended to `log`; on failure, the error names
/// the step and the log's last lines.
fn run(cmd: &mut Command, log: &Path, step: &str) -> Result<(), NotBuilt> {
    let f = File::options().create(true).append(true).open(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let f2 = f.try_clone().map_err(|e| format!("{}: {e}", log.display()))?;
    let status = cmd.stdout(f).stderr(f2).status().map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!("DynamoRIO's CMake {step} failed ({status}; {}: {})", log.display(), tail.join(" / ")).into());
    }
    Ok(())
}

/// Cargo's home: where its registry keeps downloaded crates.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
}

/// `dir/*/name` for every registry directory under `dir`.
fn in_registries(dir: &Path, name: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    rd.flatten().map(|e| e.path().join(name)).filter(|p| p.exists()).collect()
}

/// The crate's copy in Cargo's registry: unpacked in `registry/src` (a
/// complete unpacking has `.cargo-ok`) or unpacked here into `home/src`
/// from `registry/cache`.
fn from_registry(home: &Path) -> Result<Option<PathBuf>, NotBuilt> {
    let Some(cargo) = cargo_home() else { return Ok(None) };
    let registry = cargo.join("registry");
    if let Some(d) = in_registries(&registry.join("src"), CRATE).into_iter().find(|d| d.join(".cargo-ok").is_file()) {
        return Ok(Some(d.join("dynamorio")));
    }
    let Some(archive) = in_registries(&registry.join("cache"), &format!("{CRATE}.crate")).into_iter().next() else { return Ok(None) };
    let dir = home.join("src");
    let tree = dir.join(CRATE).join("dynamorio");
    if tree.join("CMakeLists.txt").is_file() {
        return Ok(Some(tree));
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let o = Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&dir)
        .output()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    if !o.status.success() {
        return Err(format!("tar xzf {} failed: {}", archive.display(), String::from_utf8_lossy(&o.stderr).trim()).into());
    }
    Ok(Some(tree))
}

/// What DynamoRIO is built from, for the `built` file.
fn what_source() -> String {
    match std::env::var_os("SPLAB_DYNAMORIO_SRC") {
        Some(d) => format!("SPLAB_DYNAMORIO_SRC {}", d.to_string_lossy()),
        None => CRATE.to_string(),
    }
}

/// DynamoRIO's source tree.
fn source(home: &Path) -> Result<PathBuf, NotBuilt> {
    if let Some(d) = std::env::var_os("SPLAB_DYNAMORIO_SRC") {
        let d = PathBuf::from(d);
        let tree = if d.join("dynamorio/CMakeLists.txt").is_file() { d.join("dynamorio") } else { d.clone() };
        if !tree.join("CMakeLists.txt").is_file() {
            return Err(format!("SPLAB_DYNAMORIO_SRC={}: no CMakeLists.txt there or in its dynamorio/", d.display()).into());
        }
        return Ok(tree);
    }
    if let Some(tree) = from_registry(home)? {
        return Ok(tree);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("dr-source/Cargo.toml");
    let target = std::env::var("TARGET").unwrap_or_default();
    let o = Command::new(&cargo)
        .args(["fetch", "--locked", "--target", &target, "--manifest-path"])
        .arg(&manifest)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cargo.to_string_lossy()))?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(format!("cargo fetch of {CRATE} (DynamoRIO's source) failed: {}", err.lines().rev().take(3).collect::<Vec<_>>().join(" / ")).into());
    }
    match from_registry(home)? {
        Some(tree) => Ok(tree),
        None => Err(format!("cargo fetch left no {CRATE} in {}", cargo_home().unwrap_or_default().join("registry").display()).into()),
    }
}

/// Compiles the clients into `out` against the DynamoRIO tree `dr`.
fn clients(out: &Path, dr: &Path) -> Result<(), String> {
    let inc = dr.join("include");
    let ext_inc = dr.join("ext/include");
    let lib = dr.join("lib64/release");
    let ext = dr.join("ext/lib64/release");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    for (src, name, exts) in [
        ("ring.c", "libsplabdr.so", &["drbbdup", "drx", "drmgr", "drreg", "drutil"][..]),
        ("null.c", "libsplabdr_null.so", &[][..]),
        ("count.c", "libsplabdr_count.so", &["drx", "drmgr", "drreg"][..]),
    ] {
        let mut cmd = Command::new(&cc);
        cmd.args(["-O2", "-g", "-Wall", "-shared", "-fPIC", "-DLINUX", "-DX86_64"])
            .arg(format!("-I{}", inc.display()))
            .arg(format!("-I{}", ext_inc.display()))
            .arg(format!("-I{}", manifest.join("../../tools/vgtrace").display()))
            .arg(manifest.join("client").join(src))
            .arg("-o")
            .arg(out.join(name));
        for e in exts {
            cmd.arg(ext.join(format!("lib{e}_static.a")));
        }
        cmd.arg(ext.join("libdrcontainers.a"))
            .arg(format!("-L{}", lib.display()))
            .arg("-ldynamorio")
            .arg(format!("-Wl,-rpath,{}", lib.display()));
        let o = cmd.output().map_err(|e| format!("cannot run {cc}: {e}"))?;
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            return Err(format!("{cc} {src} failed: {}", err.lines().take(5).collect::<Vec<_>>().join(" / ")));
        }
    }
    Ok(())
}
