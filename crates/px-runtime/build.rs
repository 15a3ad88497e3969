//! Builds the kernel fast path's TC program (`bpf/fast_path.c`) with
//! clang (`-target bpf`) into `$OUT_DIR/fast_path.o`, which the gateway
//! embeds. Without clang or the libbpf headers the object is left empty
//! and the gateway says, when `fast_path = "on"` asks for it, that it was
//! built without the fast path (`./scripts/test` and `./scripts/demo`
//! install both).
//!
//! It also writes the Rust side of the program's contract,
//! `$OUT_DIR/fast_path_contract.rs`, from `bpf/fast_path.h` (see
//! `contract.rs` beside this file): the constants, the reasons and the
//! map structs, with the layout clang gives them checked at compile time.

use std::path::PathBuf;
use std::process::Command;

#[path = "build/contract.rs"]
mod contract;

fn main() {
    let src = "bpf/fast_path.c";
    let header = "bpf/fast_path.h";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed={header}");
    println!("cargo:rerun-if-changed=build/contract.rs");
    println!("cargo:rerun-if-env-changed=PX_CLANG");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = out_dir.join("fast_path.o");
    let clang = std::env::var("PX_CLANG").unwrap_or_else(|_| "clang".into());
    let text = std::fs::read_to_string(header).unwrap_or_else(|e| panic!("{header}: {e}"));
    let c = contract::parse(&text).unwrap_or_else(|e| panic!("{header}: {e}"));
    // The layout clang gives the structs for the BPF target, when clang is
    // here (without it there is no program to agree with).
    let layouts = contract::clang_layouts(&clang, header, &c);
    let rust = contract::rust(&c, layouts.as_ref());
    std::fs::write(out_dir.join("fast_path_contract.rs"), rust).expect("write the contract");
    let multiarch = contract::multiarch();
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
                "cargo:warning=the kernel fast path was not built ({clang} failed: {}); `fast_path = \"on\"` will be refused",
                String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("no message")
            );
            std::fs::write(&out, b"").expect("write an empty object");
        }
        Err(e) => {
            println!(
                "cargo:warning=the kernel fast path was not built ({clang}: {e}; install clang and libbpf-dev); `fast_path = \"on\"` will be refused"
            );
            std::fs::write(&out, b"").expect("write an empty object");
        }
    }
}
