//! Compiles `examples/roundtrip.c` against `include/px_caravan.h`, links the
//! static library cargo built for this test, and runs it: the C ABI builds a
//! caravan of sequence-numbered datagrams and reads every one back.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The staticlib cargo produced beside this test binary (target/<profile>/).
fn staticlib() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    for dir in [deps.parent()?, deps] {
        let p = dir.join("libpx_caravan.a");
        if p.exists() {
            return Some(p);
        }
    }
    None
}

/// Compiles the example with `compiler` (as C, or as C++ with `cxx`), runs
/// it and checks its summary; `false` if the compiler is not installed.
fn build_and_run(compiler: &str, cxx: bool) -> bool {
    if Command::new(compiler).arg("--version").output().is_err() {
        eprintln!("SKIP: no `{compiler}` on this machine");
        return false;
    }
    let lib = staticlib().expect("libpx_caravan.a next to the test binary (crate-type staticlib)");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("px_caravan_roundtrip_{compiler}"));
    let mut cmd = Command::new(compiler);
    cmd.args(["-Wall", "-Wextra", "-Werror", "-I"]).arg(root.join("include"));
    if cxx {
        cmd.args(["-std=c++17", "-x", "c++"]);
    } else {
        cmd.arg("-std=c11");
    }
    cmd.arg(root.join("examples/roundtrip.c")).args(["-x", "none"]).arg(&lib);
    let cc = cmd.args(["-lpthread", "-ldl", "-lm", "-o"]).arg(&out).output().unwrap();
    assert!(cc.status.success(), "{compiler} failed: {}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(&out).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "example exited {:?}: {stdout} {}", run.status, String::from_utf8_lossy(&run.stderr));
    // 9000-byte MTU, 20-byte IP header, 1200-byte datagrams: 7 fit.
    assert!(stdout.contains("7 datagrams pushed, 7 read back"), "{stdout}");
    true
}

#[test]
fn c_example_round_trips_a_caravan() {
    build_and_run("cc", false);
}

#[test]
fn the_header_works_from_cplusplus() {
    build_and_run("c++", true);
}
