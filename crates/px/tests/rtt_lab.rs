//! Root smoke test of `px lab rtt` (the 1500-vs-9000 RTT study): every
//! path (MTU 1500, MTU 9000, through px gateway, through a Linux router)
//! × protocol × size has its row, the direct links lose nothing, and a
//! message of one 1500 frame costs no more than one that needs eight.
//! The figures themselves are measured on a shared machine: see
//! docs/rtt-study.md for a full run.

use std::process::Command;

use px_lab::require_root_or_skip;

#[test]
fn lab_rtt_has_a_row_per_path_protocol_and_size() {
    if !require_root_or_skip("lab_rtt_has_a_row_per_path_protocol_and_size") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_px"))
        .args(["lab", "rtt", "--json", "--reps", "20", "--budget", "200ms", "--sizes", "64,2000,12000"])
        .output()
        .expect("px runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "px lab rtt failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3 * 4 * 3, "{v}");
    let p50 = |path: &str, proto: &str, size: u64| {
        let r = rows
            .iter()
            .find(|r| r["path"] == path && r["proto"] == proto && r["size"].as_u64() == Some(size))
            .unwrap_or_else(|| panic!("no row {path} {proto} {size}"));
        (r["p50_us"].as_f64(), r["lost"].as_u64().unwrap_or(99), r["samples"].as_u64().unwrap_or(0))
    };
    for path in ["1500", "9000"] {
        for proto in ["tcp", "tcp_nodelay", "udp"] {
            for size in [64, 2000, 12000] {
                let (p, lost, n) = p50(path, proto, size);
                assert!(p.is_some_and(|p| p > 0.0) && lost == 0 && n >= 10, "{path} {proto} {size}: {p:?} {lost} {n}");
            }
        }
    }
    for path in ["gateway", "router"] {
        let (p, _, _) = p50(path, "tcp_nodelay", 12000);
        assert!(p.is_some_and(|p| p > 0.0), "{path}: {p:?}");
    }
    // Loose, against a broken measurement (not the study's question):
    // 12000 B at MTU 1500 is nine frames each way, 64 B one.
    let small = p50("1500", "udp", 64).0.unwrap_or(f64::NAN);
    let big = p50("1500", "udp", 12000).0.unwrap_or(f64::NAN);
    assert!(big > small, "udp at 1500: 12000 B {big} µs vs 64 B {small} µs");
    assert!(v["ratio_9000_over_1500"].as_array().is_some_and(|a| a.len() == 3), "{v}");
}
