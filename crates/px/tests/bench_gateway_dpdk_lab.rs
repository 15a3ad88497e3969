//! `px bench gateway --datapath dpdk` (root, DPDK): a smoke run of seconds
//! — every forwarder on every trace, once, on memif ports. Checks the
//! report's keys (the issue's, with values where the round ran) and that
//! every round moved every byte (per flow, bytes out = bytes in, no frame
//! corrupt, oversize or out of the wrong port); the figures themselves
//! are not asserted (a debug build on a shared machine). Skips with a
//! message where it cannot run (not root, DPDK not installed).

use std::process::{Command, Stdio};

#[test]
fn every_round_moves_every_byte_and_the_report_has_the_issues_keys() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: px bench gateway --datapath dpdk needs root (network namespaces)");
        return;
    }
    let child = Command::new(env!("CARGO_BIN_EXE_px"))
        .args(["bench", "gateway", "--datapath", "dpdk", "--json", "--duration", "0.3", "--repeats", "1"])
        .args(["--flows", "40", "--packets", "6000", "--split-packets", "600", "--bulk-flows", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("px runs");
    // The EAL runtime directories of this run are named after its PID
    // (another benchmark may run on the machine at the same time).
    let ours = format!("px-dpdkb-{}-", child.id());
    let out = child.wait_with_output().expect("px runs");
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        eprintln!("skipped: {}", err.trim());
        return;
    }
    assert!(out.status.success(), "px bench gateway: {} (a signal if no code); stderr: {err}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let absent: Vec<&str> = v["absent"].as_array().unwrap().iter().filter_map(|a| a["forwarder"].as_str()).collect();
    // The ceiling and the baseline always run; px's round needs px gateway
    // --datapath dpdk, which says why when it cannot.
    assert!(!absent.contains(&"limit") && !absent.contains(&"baseline"), "{}", v["absent"]);
    if absent.contains(&"px") {
        eprintln!("note: the px round did not run: {}", v["absent"]);
    }
    for t in ["inbound", "outbound", "mixed"] {
        for f in ["limit", "px", "baseline"] {
            let gbps = &v[format!("{f}_{t}_gbps")];
            let yield_ = &v[format!("{f}_{t}_yield")];
            assert!(v.get(format!("{f}_{t}_gbps")).is_some() && v.get(format!("{f}_{t}_yield")).is_some(), "{t} {f}");
            if !absent.contains(&f) {
                assert!(gbps.as_f64().is_some_and(|x| x > 0.0), "{f}_{t}_gbps: {gbps}");
                assert!(yield_.as_f64().is_some_and(|x| (0.0..=1.0).contains(&x)), "{f}_{t}_yield: {yield_}");
            }
        }
    }
    assert!(v.get("px_bulk_yield").is_some(), "px_bulk_yield");
    assert!(v["load_average"].as_f64().is_some_and(|x| x >= 0.0), "{}", v["load_average"]);
    let rounds = v["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 4 * (3 - absent.len()), "every trace with every forwarder that ran: {rounds:?}");
    for r in rounds {
        let g = &r["generator"];
        let name = format!("{} on {}", r["forwarder"], r["trace"]);
        assert_eq!(g["ok"], true, "{name}: {}", g["failures"]);
        assert!(g["flows"].as_u64().unwrap() > 0 && g["flows_exact"] == g["flows"], "{name}: {g}");
        assert_eq!(g["payload_out"], g["payload_in"], "{name}: every payload byte came out");
        for p in g["ports"].as_array().unwrap() {
            for k in ["bad_csum", "oversize", "unknown_flow", "misrouted"] {
                assert_eq!(p[k].as_u64(), Some(0), "{name}: {k} on the {} side", p["side"]);
            }
        }
    }
    assert_eq!(v["all_rounds_moved_every_byte"], true);
    // Merging rounds make full inner segments; plain forwarding never does.
    assert!(v["baseline_inbound_yield"].as_f64().unwrap() > 0.3, "{}", v["baseline_inbound_yield"]);
    assert_eq!(v["limit_inbound_yield"].as_f64(), Some(0.0));
    // Nothing left behind: no EAL runtime directory of this run.
    let left: Vec<String> = std::fs::read_dir("/var/run/dpdk")
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!left.iter().any(|n| n.starts_with(&ours)), "left in /var/run/dpdk by this run ({ours}*): {left:?}");
}
