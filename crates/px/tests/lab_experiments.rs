//! Smoke tests of the paper's end-host experiments (`px lab receiver|wan|
//! gro|middlebox|parallel|report`, root; skipped with a message otherwise):
//! each runs at its shortest (a second or two per run), prints JSON with
//! the documented keys and sane values, and leaves no namespace behind.
//! They measure nothing: figures from a loaded machine at these lengths
//! mean little. One at a time, since each confines its parts to CPUs.

use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

const PX: &str = env!("CARGO_BIN_EXE_px");

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn skip(test: &str, tools: &[&str]) -> bool {
    if !px_lab::require_root_or_skip(test) {
        return true;
    }
    for t in tools {
        let found =
            Command::new("sh").args(["-c", &format!("command -v {t}")]).output().is_ok_and(|o| o.status.success());
        if !found {
            eprintln!("SKIPPED {test}: `{t}` is not installed");
            return true;
        }
    }
    false
}

/// Runs `px ARGS`, checks it succeeded and removed its namespaces, and
/// returns its stdout.
fn px(args: &[&str]) -> String {
    let child = Command::new(PX).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "px {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let left: Vec<String> = px_lab::list_px_namespaces()
        .unwrap()
        .into_iter()
        .filter(|n| px_lab::NsName::parse(n).is_some_and(|p| p.pid == pid))
        .collect();
    assert!(left.is_empty(), "px {args:?} left namespaces {left:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = px(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("px {args:?}: {e}: {out}"))
}

fn num(v: &Value, path: &str) -> f64 {
    let mut cur = v;
    for k in path.split('.') {
        cur = match k.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[k],
        };
    }
    cur.as_f64().unwrap_or_else(|| panic!("no number at `{path}` in {v}"))
}

fn positive(v: &Value, paths: &[&str]) {
    for p in paths {
        let x = num(v, p);
        assert!(x.is_finite() && x > 0.0, "`{p}` = {x} in {v}");
    }
}

/// Issue 39 (end-host gain): the receiver's CPU split, with the frames it
/// took in and its receive batches. Through the gateway the frames are
/// larger than through the router (the gateway's merge, read from the
/// receiver's device counters), and the router's runs are paced to the
/// gateway's throughput (both receivers at the same load).
fn check_split(v: &Value, split: &str) {
    for m in ["copy_s_per_gb", "discard_s_per_gb", "rx_frame_bytes", "frames_per_softirq"] {
        positive(v, &[&format!("{split}.{m}.0"), &format!("{split}.{m}.1")]);
    }
    let frame = |p: usize| num(v, &format!("{split}.rx_frame_bytes.{p}"));
    assert!((1400.0..1600.0).contains(&frame(0)), "router frames: {v}");
    assert!(frame(1) > 2.0 * frame(0) && frame(1) <= 9100.0, "gateway frames: {v}");
    for m in 0..2 {
        let (router, gateway) = (num(v, &format!("{split}.gbps.{m}.0")), num(v, &format!("{split}.gbps.{m}.1")));
        assert!(router <= 1.1 * gateway + 0.05, "the router's run {m} was not paced to the gateway's: {v}");
    }
}

#[test]
fn receiver_smoke() {
    if skip("receiver_smoke", &["iperf3", "taskset", "ethtool"]) {
        return;
    }
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let v = json(&["lab", "receiver", "--json", "--seconds", "1", "--flows", "10", "--udp-seconds", "1"]);
    for g in ["gro_off", "gro_on"] {
        positive(&v, &[&format!("tcp.{g}.router_gbps"), &format!("tcp.{g}.gateway_gbps"), &format!("tcp.{g}.ratio")]);
        let want = num(&v, &format!("tcp.{g}.gateway_gbps")) / num(&v, &format!("tcp.{g}.router_gbps"));
        assert!((num(&v, &format!("tcp.{g}.ratio")) - want).abs() < 1e-9, "{v}");
        let busy = num(&v, &format!("tcp.{g}.gateway_rx_core_busy"));
        assert!((0.0..=1.0).contains(&busy), "{v}");
    }
    positive(&v, &["udp.plain_gbps", "udp.caravan_gbps", "udp.ratio", "udp.received.0", "udp.received.1"]);
    assert!(num(&v, "udp.datagrams_per_caravan") > 1.0, "caravans carried one datagram each: {v}");
    assert!(v["congestion_control"].as_str().unwrap().contains("cubic"), "{v}");
    assert!(v["offloads"].as_str().unwrap().contains("LRO"), "{v}");
    check_split(&v, "tcp_split");
    let gro_off = |k: &str| num(&v, &format!("tcp.gro_off.{k}"));
    assert!(gro_off("gateway_rx_frame_bytes") > 2.0 * gro_off("router_rx_frame_bytes"), "{v}");
}

#[test]
fn wan_smoke() {
    if skip("wan_smoke", &["iperf3", "ethtool"]) {
        return;
    }
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let v = json(&["lab", "wan", "--json", "--seconds", "1"]);
    positive(&v, &["router_mbps", "gateway_mbps", "jumbo_mbps", "ratio"]);
    assert_eq!(num(&v, "seconds"), 1.0);
    assert_eq!(num(&v, "delay_ms"), 10.0);
    assert!((num(&v, "loss") - 0.0001).abs() < 1e-12, "{v}");
    // The point of the experiment: the b-network sender uses the large MSS
    // through the gateway, the legacy one through the router.
    assert_eq!(num(&v, "runs.0.sender_mss"), 1448.0, "{v}");
    assert_eq!(num(&v, "runs.1.sender_mss"), 8948.0, "{v}");
    assert_eq!(num(&v, "runs.2.sender_mss"), 8948.0, "{v}");
}

#[test]
fn gro_smoke() {
    if skip("gro_smoke", &["iperf3", "taskset", "ethtool"]) {
        return;
    }
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let v = json(&["lab", "gro", "--json", "--seconds", "1", "--flows", "1,4", "--mtus", "1500,9000"]);
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), 4, "{v}");
    for s in series {
        positive(s, &["gbps.0", "gbps.1"]);
        assert!(s["drop_at_4_flows"].is_number(), "{s}");
    }
}

#[test]
fn middlebox_smoke() {
    if skip("middlebox_smoke", &["iperf3", "taskset", "ethtool", "nft"]) {
        return;
    }
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let v = json(&["lab", "middlebox", "--json", "--seconds", "1", "--mtus", "1500,9000", "--rules", "50"]);
    assert_eq!(v["rules"], 50);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{v}");
    for p in points {
        positive(p, &["gbps", "kpps", "speedup"]);
    }
    assert_eq!(num(&v, "points.1.mtu"), 9000.0);
}

#[test]
fn parallel_smoke() {
    if skip("parallel_smoke", &["axel", "taskset", "ethtool"]) {
        return;
    }
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let v = json(&["lab", "parallel", "--json", "--sessions", "1,2", "--file-mb", "8"]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        positive(
            r,
            &["single_9000.gbps", "single_9000.server_cpu_s_per_gb", "parallel_1500.server_cpu_s_per_gb", "cpu_ratio"],
        );
        assert_eq!(num(r, "single_9000.failed_sessions") + num(r, "parallel_1500.failed_sessions"), 0.0, "{r}");
        assert_eq!(num(r, "parallel_1500.connections"), 6.0);
    }
}

#[test]
fn report_smoke() {
    if skip("report_smoke", &["iperf3", "taskset", "ethtool", "nft", "axel"]) {
        return;
    }
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!("px-lab-report-test-{}", std::process::id()));
    let out = px(&[
        "lab",
        "report",
        "--quick",
        "--skip",
        "receiver,wan,gro,parallel,demo,pmtud",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.trim().ends_with("report.md"), "{out}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## middlebox") && md.contains("5.6×") && md.contains("![middlebox](middlebox.svg)"), "{md}");
    let svg = std::fs::read_to_string(dir.join("middlebox.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("paper"), "{svg}");
    let j: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert!(j["middlebox"]["points"].is_array(), "{j}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn demo_smoke_has_bnet_cpu_and_observer_figures() {
    if skip("demo_smoke_has_bnet_cpu_and_observer_figures", &["iperf3", "taskset", "ethtool", "ss"]) {
        return;
    }
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let v = json(&["lab", "demo", "--json", "--seconds", "1", "--rounds", "1"]);
    for dir in ["inbound", "outbound"] {
        positive(
            &v,
            &[
                &format!("{dir}.gateway_gbps"),
                &format!("{dir}.router_gbps"),
                &format!("{dir}.gateway_gbps_observed"),
                &format!("{dir}.router_gbps_observed"),
                &format!("{dir}.bnet_cpu_s_per_gb_gateway"),
                &format!("{dir}.bnet_cpu_s_per_gb_router"),
            ],
        );
        // Frame sizes still come from the observed pass.
        assert_eq!(num(&v, &format!("{dir}.max_frame_inner")), 9000.0, "{v}");
        assert_eq!(num(&v, &format!("{dir}.router_max_frame_inner")), 1500.0, "{v}");
    }
    assert!(v["bnet_cpu_accounting"].as_str().unwrap().contains("/proc/stat"), "{v}");
    check_split(&v, "bnet_cpu_split");
}
