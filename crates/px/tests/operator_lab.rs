//! Root tests of what an operator reads from a running gateway: the wire
//! counters against the kernel's own (`ip -s link`), and `px status` over
//! the control socket. Topology and helpers as in `gateway_lab.rs` (the
//! `common` module); each test skips with a message when not root.

mod common;

use std::time::Duration;

use common::*;
use px_lab::require_root_or_skip;

/// The kernel's packet and byte counts of `dev` in the gateway's
/// namespace: rx packets, rx bytes, tx packets, tx bytes.
fn kernel_counts(lab: &GwLab, dev: &str) -> [u64; 4] {
    let json = lab.ns(lab.gw).ip(&["-s", "-j", "link", "show", "dev", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("ip -s -j link: {e}: {json}"));
    let st = &v[0]["stats64"];
    let n = |dir: &str, what: &str| st[dir][what].as_u64().unwrap_or_else(|| panic!("no {dir}.{what} in {json}"));
    [n("rx", "packets"), n("rx", "bytes"), n("tx", "packets"), n("tx", "bytes")]
}

/// The gateway's wire counts of `port` from its metrics (all workers; one here).
fn gateway_counts(text: &str, port: &str) -> [u64; 4] {
    let m = |fam: &str, dir: &str| {
        metric(text, &format!("{fam}{{worker=\"0\",port=\"{port}\",direction=\"{dir}\"}}")) as u64
    };
    [
        m("px_gateway_packets_total", "rx"),
        m("px_gateway_bytes_total", "rx"),
        m("px_gateway_packets_total", "tx"),
        m("px_gateway_bytes_total", "tx"),
    ]
}

const COUNTERS_METRICS: &str = "127.0.0.1:9467";

/// Bulk TCP both ways through GRO on both ports (so the gateway receives
/// super-packets and hands GSO frames back): over the transfers, the
/// gateway's `px_gateway_packets_total` and `px_gateway_bytes_total` of
/// each port and direction agree with the kernel's `ip -s link` counts of
/// the same port within 1 %, while its super-packet counts are far fewer
/// (what the old metric showed).
#[test]
fn wire_counters_agree_with_ip_link_within_one_percent() {
    if !require_root_or_skip("wire_counters_agree_with_ip_link_within_one_percent") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &["--metrics", COUNTERS_METRICS]);
    lab.ping_both();
    // Workers publish every 200 ms: a quiet moment for the baseline.
    std::thread::sleep(Duration::from_millis(500));
    let before_gw = metrics(&lab, COUNTERS_METRICS);
    let before_k = [kernel_counts(&lab, GW_OUTER), kernel_counts(&lab, GW_INNER)];
    exact_both_ways(&lab, LEGACY_V4, BNET_V4, 5471, 2, 24 << 20);
    std::thread::sleep(Duration::from_millis(500));
    let after_gw = metrics(&lab, COUNTERS_METRICS);
    let after_k = [kernel_counts(&lab, GW_OUTER), kernel_counts(&lab, GW_INNER)];
    let names = ["rx packets", "rx bytes", "tx packets", "tx bytes"];
    let mut report = String::new();
    for (k, port) in ["outer", "inner"].into_iter().enumerate() {
        let (g0, g1) = (gateway_counts(&before_gw, port), gateway_counts(&after_gw, port));
        for j in 0..4 {
            let gw_delta = g1[j] - g0[j];
            let mut k_delta = after_k[k][j] - before_k[k][j];
            if j == 1 {
                // veth in NAPI mode (GRO on) counts a received frame's
                // bytes after the Ethernet header is pulled (`veth_xdp_rcv`),
                // its sent bytes with it; a NIC counts both with it.
                k_delta += 14 * (after_k[k][0] - before_k[k][0]);
            }
            let off = (gw_delta as f64 - k_delta as f64).abs() / k_delta.max(1) as f64;
            report.push_str(&format!(
                "{port} {}: gateway {gw_delta}, ip -s link {k_delta}, {:.3} %\n",
                names[j],
                off * 100.0
            ));
            assert!(k_delta > 1_000 || j % 2 == 1, "too little traffic to compare:\n{report}");
        }
    }
    eprintln!("{report}");
    for line in report.lines() {
        let pct: f64 = line.rsplit(", ").next().unwrap().trim_end_matches(" %").parse().unwrap();
        assert!(pct <= 1.0, "more than 1 % apart:\n{report}");
    }
    // GRO did merge on the way in: the sockets saw fewer frames than the wire.
    let sp = |t: &str| metric(t, "px_gateway_super_packets_total{worker=\"0\",port=\"outer\",direction=\"rx\"}");
    let wire = |t: &str| metric(t, "px_gateway_packets_total{worker=\"0\",port=\"outer\",direction=\"rx\"}");
    let (sp_d, wire_d) = (sp(&after_gw) - sp(&before_gw), wire(&after_gw) - wire(&before_gw));
    eprintln!("outer rx: {wire_d} wire frames in {sp_d} super-packets");
    assert!(sp_d < wire_d, "no super-packets: GRO off? {sp_d} >= {wire_d}");
    let exit = gw.stop();
    exit.assert_clean();
    assert!(exit.stats["wire"]["outer"]["rx_packets"].as_u64().unwrap() > 0, "{}", exit.stats);
}
