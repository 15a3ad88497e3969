//! Compiles the C shim (`csrc/shim.c`) against the installed DPDK when
//! `pkg-config` finds `libdpdk` into a shared object (linked against DPDK's
//! libraries), passes its path as `PX_DPDK_SHIM_SO` (embedded and loaded
//! with dlopen at run time by `src/sys.rs`) and sets the cfg `px_dpdk`.
//! Nothing of DPDK is linked into the crate's users. Without libdpdk (or
//! with `PX_DPDK=off`) nothing is compiled: the crate's functions then
//! refuse at run time with what to install ([`NOT_BUILT`](src/lib.rs)).

use std::process::Command;

fn pkg_config(args: &[&str]) -> Option<Vec<String>> {
    let o = Command::new("pkg-config").args(args).arg("libdpdk").output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_owned).collect())
}

fn main() {
    println!("cargo:rustc-check-cfg=cfg(px_dpdk)");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=csrc/px_dpdk.h");
    println!("cargo:rerun-if-env-changed=PX_DPDK");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if std::env::var("PX_DPDK").is_ok_and(|v| v == "off") {
        return;
    }
    let (Some(cflags), Some(libs)) = (pkg_config(&["--cflags"]), pkg_config(&["--libs"])) else {
        println!(
            "cargo:warning=DPDK not found by pkg-config: `px gateway --datapath dpdk` will be refused (install libdpdk-dev and pkg-config)"
        );
        return;
    };
    // A shared object, loaded by `src/sys.rs` with dlopen at the first
    // DPDK call: nothing of DPDK is linked into the binaries, so a px
    // built here starts on a machine without DPDK (AF_PACKET datapath).
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("libpx_dpdk_shim.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let mut cmd = Command::new(&compiler);
    cmd.args(["-shared", "-fPIC", "-O2", "-Wall", "-Icsrc"]);
    // `-include rte_config.h`, `-march=...` and the include paths, as given
    // (`-include` and its header stay one pair, in order).
    cmd.args(&cflags);
    cmd.args(["csrc/shim.c", "-o"]).arg(&out).args(&libs);
    let status = cmd.status().unwrap_or_else(|e| panic!("running the C compiler {compiler:?}: {e}"));
    assert!(status.success(), "{compiler} failed to build the DPDK shim: {cmd:?}");
    println!("cargo:rustc-env=PX_DPDK_SHIM_SO={}", out.display());
    println!("cargo:rustc-cfg=px_dpdk");
}
