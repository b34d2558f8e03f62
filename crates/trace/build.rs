//! Builds the splabtrace valgrind tool (tools/vgtrace/vt_main.c) when the
//! installed valgrind's tool headers and libraries are there (Debian's
//! `valgrind` package ships them) and the target is amd64 Linux: the tool
//! executable and symlinks to valgrind's own support files go in
//! OUT_DIR/vglib, which `splab trace record` points VALGRIND_LIB at. When
//! anything is missing the build goes on without it and recording uses
//! valgrind's lackey tool. SPLAB_NO_VGTOOL=1 skips the tool.

use std::path::{Path, PathBuf};
use std::process::Command;

const INC: &str = "/usr/include/valgrind";
const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu/valgrind";
const EXECDIR: &str = "/usr/libexec/valgrind";

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let src = manifest.join("../../tools/vgtrace/vt_main.c");
    println!("cargo:rerun-if-changed={}", src.display());
    for h in ["local_syscalls.h", "ring_format.h", "block_deps.h", "signals.h"] {
        println!("cargo:rerun-if-changed={}", manifest.join("../../tools/vgtrace").join(h).display());
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SPLAB_NO_VGTOOL");
    println!("cargo:rerun-if-changed={INC}/pub_tool_basics.h");
    println!("cargo:rerun-if-changed={LIBDIR}/libcoregrind-amd64-linux.a");
    let target = std::env::var("TARGET").unwrap_or_default();
    if std::env::var_os("SPLAB_NO_VGTOOL").is_some() || target != "x86_64-unknown-linux-gnu" {
        return;
    }
    let needed = [
        format!("{INC}/pub_tool_basics.h"),
        format!("{LIBDIR}/libcoregrind-amd64-linux.a"),
        format!("{LIBDIR}/libvex-amd64-linux.a"),
        format!("{LIBDIR}/libgcc-sup-amd64-linux.a"),
        format!("{EXECDIR}/vgpreload_core-amd64-linux.so"),
    ];
    if let Some(m) = needed.iter().find(|p| !Path::new(p).exists()) {
        println!("cargo:warning=splabtrace valgrind tool not built ({m} missing; Debian: apt-get install valgrind); trace record will use lackey");
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("vglib");
    match build(&src, &out) {
        Ok(()) => println!("cargo:rustc-env=SPLAB_VGTOOL_LIB={}", out.display()),
        Err(e) => println!("cargo:warning=splabtrace valgrind tool not built ({e}); trace record will use lackey"),
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let o = cmd.output().map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(format!("{:?} failed: {}", cmd.get_program(), err.lines().take(5).collect::<Vec<_>>().join(" / ")));
    }
    Ok(())
}

fn build(src: &Path, out: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).map_err(|e| format!("mkdir {}: {e}", out.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("vt_main.o");
    run(Command::new(&cc)
        .args(["-O2", "-g", "-m64", "-std=gnu99", "-Wall", "-Wno-unused-parameter", "-fno-strict-aliasing"])
        .args(["-fno-builtin", "-fno-stack-protector", "-fno-pie", "-fomit-frame-pointer"])
        .args(["-DVGA_amd64=1", "-DVGO_linux=1", "-DVGP_amd64_linux=1", "-DVGPV_amd64_linux_vanilla=1"])
        .arg(format!("-I{INC}"))
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(&obj))?;
    let exe = out.join("splabtrace-amd64-linux");
    run(Command::new(&cc)
        .args(["-m64", "-static", "-nodefaultlibs", "-nostartfiles", "-u", "_start", "-Wl,--build-id=none", "-Wl,-Ttext-segment=0x58000000"])
        .arg("-o")
        .arg(&exe)
        .arg(&obj)
        .arg(format!("{LIBDIR}/libcoregrind-amd64-linux.a"))
        .arg(format!("{LIBDIR}/libvex-amd64-linux.a"))
        .arg("-lgcc")
        .arg(format!("{LIBDIR}/libgcc-sup-amd64-linux.a")))?;
    let _ = std::fs::remove_file(&obj);
    // valgrind looks for its preload objects, suppressions and gdbserver
    // descriptions beside the tool: link them all, but not its own tools.
    let entries = std::fs::read_dir(EXECDIR).map_err(|e| format!("read {EXECDIR}: {e}"))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let s = name.to_string_lossy();
        if s.ends_with("-linux") {
            continue;
        }
        std::os::unix::fs::symlink(e.path(), out.join(&name)).map_err(|err| format!("symlink {s}: {err}"))?;
    }
    Ok(())
}
