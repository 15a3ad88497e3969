//! Builds the kernel fast path's TC program (`bpf/fast_path.c`) with
//! clang (`-target bpf`) into `$OUT_DIR/fast_path.o`, which the gateway
//! embeds. Without clang or the libbpf headers the object is left empty
//! and the gateway says, when `offload = "on"` asks for it, that it was
//! built without the fast path (`./scripts/test` and `./scripts/demo`
//! install both).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/fast_path.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed=bpf/fast_path.h");
    println!("cargo:rerun-if-env-changed=PX_CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("fast_path.o");
    let clang = std::env::var("PX_CLANG").unwrap_or_else(|_| "clang".into());
    // Debian keeps <asm/types.h> under the multiarch directory, which
    // clang does not search for the bpf target.
    let multiarch = Command::new("gcc")
        .arg("-dumpmachine")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| format!("{}-linux-gnu", std::env::consts::ARCH));
    let result = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I/usr/include/{multiarch}"))
        .args(["-c", src, "-o"])
        .arg(&out)
        .output();
    match result {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "cargo:warning=the kernel fast path was not built ({clang} failed: {}); `offload = \"on\"` will be refused",
                String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("no message")
            );
            std::fs::write(&out, b"").expect("write an empty object");
        }
        Err(e) => {
            println!(
                "cargo:warning=the kernel fast path was not built ({clang}: {e}; install clang and libbpf-dev); `offload = \"on\"` will be refused"
            );
            std::fs::write(&out, b"").expect("write an empty object");
        }
    }
}
