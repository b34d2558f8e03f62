//! Compiles splab's DynamoRIO clients (client/*.c) against the DynamoRIO
//! that the dynamorio-sys build-dependency built with CMake from its
//! bundled source. That crate names no `links`, so its build directory
//! is found beside this crate's: `target/<profile>/build/dynamorio-sys-*/
//! out/build` (the newest, when several builds left one),
//! or `DRIO_BUILD_DIR` (the variable dynamorio-sys itself reads) when
//! set. Only on x86-64 Linux; elsewhere splab runs programs under
//! valgrind only.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=client");
    println!("cargo:rerun-if-env-changed=DRIO_BUILD_DIR");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" {
        println!("cargo:rustc-env=SPLAB_DR_MISSING=the DynamoRIO front end runs on x86-64 Linux only");
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    match build(&out) {
        Ok(dr) => {
            println!("cargo:rustc-env=SPLAB_DR_LIBRARY={}", dr.join("lib64/release/libdynamorio.so").display());
            println!("cargo:rustc-env=SPLAB_DR_CLIENTS={}", out.display());
        }
        Err(e) => {
            println!("cargo:warning=DynamoRIO client not built: {e}");
            println!("cargo:rustc-env=SPLAB_DR_MISSING=the DynamoRIO client was not built ({e})");
        }
    }
}

/// The newest DynamoRIO build directory under `build` (the directory of
/// every package's build output for this profile).
fn find_build_dir(build: &Path) -> Option<PathBuf> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for e in std::fs::read_dir(build).ok()?.flatten() {
        if !e.file_name().to_string_lossy().starts_with("dynamorio-sys-") {
            continue;
        }
        let dir = e.path().join("out/build");
        let Ok(m) = std::fs::metadata(dir.join("lib64/release/libdynamorio.so")).and_then(|m| m.modified()) else { continue };
        if best.as_ref().is_none_or(|(t, _)| m > *t) {
            best = Some((m, dir));
        }
    }
    best.map(|(_, d)| d)
}

fn build(out: &Path) -> Result<PathBuf, String> {
    let dr = match std::env::var_os("DRIO_BUILD_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            // OUT_DIR is target/<profile>/build/splab-drclient-HASH/out.
            let build = out.parent().and_then(Path::parent).ok_or("OUT_DIR has no build directory above it")?;
            find_build_dir(build).ok_or_else(|| format!("no DynamoRIO build under {}", build.display()))?
        }
    };
    let inc = dr.join("include");
    let ext_inc = dr.join("ext/include");
    let lib = dr.join("lib64/release");
    let ext = dr.join("ext/lib64/release");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    for (src, name, exts) in [
        ("ring.c", "libsplabdr.so", &["drx", "drmgr", "drreg", "drutil"][..]),
        ("null.c", "libsplabdr_null.so", &[][..]),
        ("count.c", "libsplabdr_count.so", &["drx", "drmgr", "drreg"][..]),
    ] {
        let mut cmd = std::process::Command::new(&cc);
        cmd.args(["-O2", "-g", "-Wall", "-shared", "-fPIC", "-DLINUX", "-DX86_64"])
            .arg(format!("-I{}", inc.display()))
            .arg(format!("-I{}", ext_inc.display()))
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
    Ok(dr)
}
