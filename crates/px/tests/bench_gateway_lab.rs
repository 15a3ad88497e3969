//! `px bench gateway` (root): a short paced run of the three rounds (px
//! gateway, with the kernel fast path when this build has it, then a Linux
//! router) on px-lab's gateway line. Checks the report's keys
//! and that every flow arrived byte for byte within each link's MTU; the
//! figures themselves are not asserted (a debug build on a shared machine).
//! Skips with a message where it cannot run (not root).

use std::process::Command;

#[test]
fn gateway_and_router_rounds_deliver_every_flow_exactly() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: px bench gateway needs root (network namespaces)");
        return;
    }
    let fast = px_runtime::fast_path::FastPath::built();
    let out = Command::new(env!("CARGO_BIN_EXE_px"))
        .args(["bench", "gateway", "--json", "--seconds", "1.5", "--packets", "4000", "--split-packets", "400"])
        .args(["--flows", "40", "--rate-gbps", "0.15"])
        .args(if fast { &["--offload"][..] } else { &[] })
        .output()
        .expect("px runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let keys = ["gateway_gbps", "router_gbps", "gateway_cpu_s_per_gb", "router_cpu_s_per_gb", "gateway_yield"];
    for k in keys.iter().chain(&["gateway_own_cpu_s_per_gb", "router_own_cpu_s_per_gb"]) {
        assert!(v[k].as_f64().is_some_and(|x| x.is_finite() && x >= 0.0), "{k}: {v}");
    }
    let rounds: &[(&str, u64)] = if fast {
        &[("gateway", 9000), ("offload", 9000), ("router", 1500)]
    } else {
        &[("gateway", 9000), ("router", 1500)]
    };
    if fast {
        for k in ["offload_gbps", "offload_cpu_s_per_gb", "offload_yield"] {
            assert!(v[k].as_f64().is_some_and(|x| x.is_finite() && x >= 0.0), "{k}: {v}");
        }
        let installed = v["offload"]["stats"]["counters"]["fast_path"]["installed"].as_u64().unwrap_or(0);
        assert!(installed > 0, "no flow went to the kernel: {}", v["offload"]["stats"]);
    }
    for &(round, bnet_mtu) in rounds {
        let r = &v[round];
        let flows = r["flows"].as_u64().unwrap();
        assert!(flows >= 40, "{round}: {r}");
        assert_eq!(r["flows_exact"].as_u64(), Some(flows), "{round}: every flow's bytes arrive: {r}");
        assert_eq!(r["payload_sent"], r["payload_delivered"], "{round}: {r}");
        assert_eq!(r["oversize_frames"].as_u64(), Some(0), "{round}: {r}");
        assert!(r["largest_frame_out_legacy"].as_u64().unwrap() <= 1514, "{round}: {r}");
        assert!(r["largest_frame_out_bnet"].as_u64().unwrap() <= bnet_mtu + 14, "{round}: {r}");
        assert!(r["gbps"].as_f64().unwrap() > 0.0 && r["mpps_out"].as_f64().unwrap() > 0.0, "{round}: {r}");
    }
    // Linux keeps the eMTU's segments inward; the gateway merges them.
    assert_eq!(v["router"]["yield"].as_f64(), Some(0.0), "{v}");
    // The generator loops over the trace many times in this run; each pass
    // must continue every flow's byte stream (a pass sent again is a
    // retransmission, which the gateway rightly passes unmerged: the
    // yield was 0.02 when the replay did that). 0.71 measured here.
    let y = v["gateway_yield"].as_f64().unwrap_or(0.0);
    assert!(y >= 0.5, "the gateway merged the replayed trace: yield {y}");
}
