//! Root lab test of `px gateway` with a real VXLAN tunnel across it (issue
//! 10 item 6): the legacy host and the b-network host each have a `vxlan`
//! device (VNI 42, UDP 4789) over their link to the gateway, with overlay
//! addresses 203.0.113.101 / .102 (MTU 1450 on both ends). SHA-256-checked
//! bulk TCP crosses the tunnel both ways, first with wire-like senders (the
//! line's default: TSO/GSO off on the hosts' links, so each VXLAN frame is
//! MTU-sized, its inner TCP checksum possibly left partial by veth checksum
//! offload), then with TSO/GSO and tunnel segmentation on the hosts' links,
//! so VXLAN GSO super-packets reach the gateway's ports whole. A second
//! packet socket in the gateway's namespace records the virtio-net headers
//! the kernel gives for the VXLAN frames on each port (printed: run with
//! `--nocapture` to read them).
//!
//! Offloads: GRO on the gateway's ports (px gateway sets it); hosts as said.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use common::*;
use px_io::{Checksum, MAX_FRAME, PacketSocket, RxBatch, SocketConfig};
use px_lab::{Netns, require_root_or_skip};

const LEGACY_OVERLAY: &str = "203.0.113.101";
const BNET_OVERLAY: &str = "203.0.113.102";

/// What the kernel reported for VXLAN frames on one port: (gso type, gso
/// size, csum start/offset, hdr_len) → (frames, largest frame).
type Headers = BTreeMap<String, (u64, usize)>;

fn watch(ns: &Netns, dev: &'static str, stop: Arc<AtomicBool>) -> JoinHandle<Headers> {
    let sock = ns.run(|| PacketSocket::open(dev, &SocketConfig::default())).unwrap().unwrap();
    std::thread::spawn(move || {
        let mut seen = Headers::new();
        let mut batch = RxBatch::new(32, MAX_FRAME);
        while !stop.load(Ordering::Relaxed) {
            if sock.recv_batch(&mut batch).unwrap_or(0) == 0 {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            for p in batch.iter().flatten() {
                let f = p.frame;
                let vxlan = f.len() > 42 && f[12..14] == [8, 0] && f[23] == 17 && f[36..38] == 4789u16.to_be_bytes();
                if !vxlan {
                    continue;
                }
                let m = p.meta;
                let csum = match m.csum {
                    Checksum::Partial { start, offset } => format!("partial start={start} offset={offset}"),
                    c => format!("{c:?}"),
                };
                let gso = m.gso.map_or("none".to_string(), |g| format!("{:?} size={} ecn={}", g.kind, g.size, g.ecn));
                let key = format!("{dev}: gso={gso} csum={csum} hdr_len={}", m.hdr_len);
                let e = seen.entry(key).or_default();
                e.0 += 1;
                e.1 = e.1.max(f.len());
            }
        }
        seen
    })
}

fn vxlan(ns: &Netns, dev: &str, local: &str, remote: &str, overlay: &str) {
    ns.ip(&[
        "link", "add", "px-vx0", "type", "vxlan", "id", "42", "local", local, "remote", remote, "dstport", "4789",
        "dev", dev,
    ])
    .expect("vxlan device");
    ns.ip(&["link", "set", "px-vx0", "mtu", "1450", "up"]).unwrap();
    ns.ip(&["addr", "add", &format!("{overlay}/24"), "dev", "px-vx0"]).unwrap();
}

/// Both ways through the tunnel, every byte and the SHA-256 checked.
fn both_ways(lab: &GwLab, port: u16, bytes: u64) {
    let progress = AtomicU64::new(0);
    let spec = BulkSpec {
        server: sock(BNET_OVERLAY, port),
        flows: 1,
        bytes_per_flow: bytes,
        pace: Pace::FULL,
        stall_timeout: Duration::from_secs(10),
        sha256: true,
    };
    assert_exact(&transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), spec, &progress), bytes);
    let back = BulkSpec { server: sock(LEGACY_OVERLAY, port + 1), ..spec };
    assert_exact(&transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), back, &progress), bytes);
}

#[test]
fn a_vxlan_tunnel_across_the_gateway_carries_sha256_exact_bulk_both_ways() {
    if !require_root_or_skip("a_vxlan_tunnel_across_the_gateway_carries_sha256_exact_bulk_both_ways") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    vxlan(lab.ns(lab.legacy), LEGACY_DEV, LEGACY_V4, BNET_V4, LEGACY_OVERLAY);
    vxlan(lab.ns(lab.bnet), BNET_DEV, BNET_V4, LEGACY_V4, BNET_OVERLAY);
    let stop = Arc::new(AtomicBool::new(false));
    let watchers = [watch(lab.ns(lab.gw), GW_OUTER, stop.clone()), watch(lab.ns(lab.gw), GW_INNER, stop.clone())];
    lab.ns(lab.legacy).ping(BNET_OVERLAY, 1).expect("ping through the tunnel");

    // Wire-like senders (the line's offloads).
    both_ways(&lab, 5401, 16 << 20);
    // Super-packets: TSO/GSO back on the hosts' links.
    for (ns, dev) in [(lab.ns(lab.legacy), LEGACY_DEV), (lab.ns(lab.bnet), BNET_DEV)] {
        let (ok, out) = run_in(ns, "ethtool", &["-K", dev, "tso", "on", "gso", "on", "tx-udp_tnl-segmentation", "on"]);
        assert!(ok, "ethtool: {out}");
    }
    both_ways(&lab, 5411, 16 << 20);

    stop.store(true, Ordering::Relaxed);
    let mut seen = Headers::new();
    for w in watchers {
        seen.extend(w.join().unwrap());
    }
    eprintln!("virtio-net headers of the VXLAN frames the gateway's ports received:");
    for (k, (n, max)) in &seen {
        eprintln!("  {k}: {n} frames, largest {max} bytes");
    }
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!("gateway counters: {}", exit.stats["counters"]);
    assert!(!seen.is_empty(), "no VXLAN frame seen on the gateway's ports");
}
