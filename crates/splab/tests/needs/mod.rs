//! What a test needs from the host, checked before it runs: a need that is
//! missing fails the test with what is missing and how to get it, so a
//! test never passes without having run. `.ci/run` installs every one of
//! them.
#![allow(dead_code)] // each test file uses some

use std::process::Command;

/// Fails unless `program` runs (`program --version`); `package` is the
/// Debian package that has it.
pub fn program(program: &str, package: &str) {
    if Command::new(program).arg("--version").output().is_err() {
        panic!("this test needs {program}, which is not installed here (apt-get install {package}; .ci/run installs it)");
    }
}

/// Fails unless valgrind is installed and splab's valgrind tool was built
/// with splab (crates/trace/build.rs builds it where valgrind's headers
/// were there at build time).
pub fn online() {
    program("valgrind", "valgrind");
    let out = Command::new(env!("CARGO_BIN_EXE_splab")).args(["sim", "--memory", "256M", "--", "true"]).output().expect("run splab");
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("was not built") || err.contains("is missing from") {
        panic!("this test needs splab's valgrind tool, which was not built: install valgrind before building splab ({})", err.trim());
    }
}

/// The system's THP mode; fails on a kernel without THP.
pub fn thp() -> String {
    let path = "/sys/kernel/mm/transparent_hugepage/enabled";
    let t = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("this test needs a kernel with transparent huge pages ({path}: {e})"));
    let (a, b) = (t.find('[').unwrap(), t.find(']').unwrap());
    t[a + 1..b].to_string()
}

/// Fails unless this is root with a THP kernel: the test changes system
/// THP settings (and puts them back).
pub fn root_and_thp() {
    root("changes system THP settings");
    thp();
}

/// Fails unless this is root: the test `does` what only root may.
pub fn root(does: &str) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test {does} and needs root (CI runs as root)");
    }
}

/// The Python (`python3`) that can import `module`; fails saying how to
/// install it otherwise.
pub fn python_with(module: &str) -> std::path::PathBuf {
    let ok = Command::new("python3").args(["-c", &format!("import {module}")]).output().is_ok_and(|o| o.status.success());
    if !ok {
        panic!("this test needs the Python module {module} in python3 (pip install {module}; .ci/run installs it)");
    }
    "python3".into()
}

/// Fails unless python3 has Ray and its `ray` command runs.
pub fn ray() {
    python_with("ray");
    ray_command();
}

/// Ray's command-line tool: `ray` on PATH, else beside python3.
pub fn ray_command() -> std::path::PathBuf {
    if Command::new("ray").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return "ray".into();
    }
    let out = Command::new("python3").args(["-c", "import os, sys; print(os.path.join(os.path.dirname(sys.executable), 'ray'))"]).output().expect("run python3");
    let p = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !p.is_file() {
        panic!("this test needs Ray's `ray` command (pip install 'ray[default]'; .ci/run installs it)");
    }
    p
}

/// Fails unless PostgreSQL's server and initdb are installed where
/// Debian puts them (/usr/lib/postgresql/VERSION/bin).
pub fn postgres() {
    let found = std::fs::read_dir("/usr/lib/postgresql").into_iter().flatten().flatten().any(|e| e.path().join("bin/postgres").is_file() && e.path().join("bin/initdb").is_file());
    if !found {
        panic!("this test needs PostgreSQL's server, /usr/lib/postgresql/VERSION/bin/postgres, which is not installed here (apt-get install postgresql; .ci/run installs it)");
    }
}
