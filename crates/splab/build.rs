//! Names the build: the git commit the workspace was built from and
//! whether its files differed from it (`SPLAB_BUILD`, e.g. `51c797b` or
//! `51c797b-dirty`), which `splab -V` and every report print so that a
//! figure can be matched to the docs' "build X". Outside a git checkout
//! (a source tarball, git missing) it is `SPLAB_BUILD` from the
//! environment if set, else `unknown`.
//!
//! Cargo runs this again when HEAD, the index or any top-level entry of
//! the workspace but `target` changes, so a file edited after the last
//! commit marks the build dirty.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=SPLAB_BUILD");
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("../..");
    let build = match git(&root, &["rev-parse", "--short=7", "HEAD"]) {
        Some(commit) => {
            for p in ["HEAD", "index", "packed-refs"] {
                if let Some(path) = git(&root, &["rev-parse", "--git-path", p]) {
                    println!("cargo:rerun-if-changed={}", root.join(path).display());
                }
            }
            if let Some(r) = git(&root, &["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&root, &["rev-parse", "--git-path", &r])) {
                println!("cargo:rerun-if-changed={}", root.join(r).display());
            }
            if let Ok(rd) = std::fs::read_dir(&root) {
                for e in rd.flatten() {
                    if !matches!(e.file_name().to_str(), Some("target" | ".git")) {
                        println!("cargo:rerun-if-changed={}", e.path().display());
                    }
                }
            }
            match git(&root, &["--no-optional-locks", "status", "--porcelain"]) {
                Some(s) if s.is_empty() => commit,
                Some(_) => format!("{commit}-dirty"),
                None => format!("{commit}-unknown-state"),
            }
        }
        None => std::env::var("SPLAB_BUILD").unwrap_or_else(|_| "unknown".into()),
    };
    println!("cargo:rustc-env=SPLAB_BUILD={build}");
}
