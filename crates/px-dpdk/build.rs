//! Compiles the C shim (`csrc/shim.c`) against the installed DPDK when
//! `pkg-config` finds `libdpdk`, links DPDK's libraries and sets the cfg
//! `px_dpdk`. Without it (or with `PX_DPDK=off`) nothing is compiled or
//! linked: the crate's functions then refuse at run time with what to
//! install ([`NOT_BUILT`](src/lib.rs)).

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
    let mut build = cc::Build::new();
    build.file("csrc/shim.c").include("csrc").opt_level(2).warnings(true);
    // `-include rte_config.h`, `-march=...` and the include paths, as given.
    let mut it = cflags.iter();
    while let Some(f) = it.next() {
        if f == "-include" {
            if let Some(h) = it.next() {
                build.flag("-include").flag(h);
            }
        } else {
            build.flag(f);
        }
    }
    build.compile("px_dpdk_shim");
    for l in &libs {
        if let Some(dir) = l.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = l.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
    println!("cargo:rustc-cfg=px_dpdk");
}
