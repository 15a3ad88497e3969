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
use px_io::{Checksum, MAX_FRAME, PacketMeta, PacketSocket, RxBatch, SocketConfig};
use px_lab::{Netns, send_frame};

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
    let Some((_serial, lab, gw)) =
        lab_with_gateway("a_vxlan_tunnel_across_the_gateway_carries_sha256_exact_bulk_both_ways")
    else {
        return;
    };
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

/// RFC 1071 sum, folded, not complemented.
fn fold(data: &[u8], init: u32) -> u16 {
    let mut s: u64 = init as u64;
    for c in data.chunks(2) {
        s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u64;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn pseudo(ip: &[u8], proto: u8, len: usize) -> u32 {
    let words = |b: &[u8]| b.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum::<u32>();
    if ip[0] >> 4 == 4 {
        words(&ip[12..20]) + proto as u32 + len as u32
    } else {
        words(&ip[8..40]) + proto as u32 + len as u32
    }
}

fn mac_of(ns: &Netns, dev: &str) -> [u8; 6] {
    let (ok, s) = run_in(ns, "cat", &[&format!("/sys/class/net/{dev}/address")]);
    assert!(ok);
    let mut mac = [0u8; 6];
    for (m, h) in mac.iter_mut().zip(s.trim().split(':')) {
        *m = u8::from_str_radix(h, 16).unwrap();
    }
    mac
}

/// An inner TCP/IP packet (v4 or v6) with a marker payload, checksum complete.
fn inner_tcp(v6: bool, marker: u8) -> Vec<u8> {
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&(1000 + marker as u32).to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18; // ACK PSH
    tcp[14..16].copy_from_slice(&500u16.to_be_bytes());
    tcp.extend((0..1000u32).map(|i| (i as u8) ^ marker));
    let mut ip = if v6 {
        let mut h = vec![0x60, 0, 0, 0, 0, 0, 6, 64];
        h[4..6].copy_from_slice(&(tcp.len() as u16).to_be_bytes());
        h.extend_from_slice(&"2001:db8:5::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        h.extend_from_slice(&"2001:db8:5::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        h
    } else {
        let mut h = vec![0x45, 0, 0, 0, 0, 7, 0x40, 0, 64, 6, 0, 0, 203, 0, 113, 101, 203, 0, 113, 102];
        h[2..4].copy_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        let c = !fold(&h, 0);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    };
    let c = !fold(&tcp, pseudo(&ip, 6, tcp.len()));
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&tcp);
    ip
}

/// `eth` (14 bytes, or 18 tagged) + outer IPv4 `proto` + `encap` + `inner`.
fn outer_v4(eth: &[u8], proto: u8, encap: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2];
    let total = (20 + encap.len() + inner.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = !fold(&ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = eth.to_vec();
    f.extend_from_slice(&ip);
    f.extend_from_slice(encap);
    f.extend_from_slice(inner);
    f
}

/// Tunnel frames crafted on a packet socket in the legacy host's namespace
/// (this kernel has no gre, ipip, sit or 8021q modules): IPIP, GRE and 6in4
/// with the inner TCP checksum left partial (as a sender with checksum
/// offload hands them over), and an 802.1Q-tagged one. Captured in the
/// b-network host's namespace, each must be the frame that was meant: tag
/// in place, inner checksum complete, everything else byte for byte.
#[test]
fn crafted_tagged_gre_ipip_and_6in4_frames_cross_the_gateway_intact() {
    let Some((_serial, lab, gw)) = lab_with_gateway("crafted_tagged_gre_ipip_and_6in4_frames_cross_the_gateway_intact")
    else {
        return;
    };
    let (src, dst) = (mac_of(lab.ns(lab.legacy), LEGACY_DEV), mac_of(lab.ns(lab.bnet), BNET_DEV));
    let eth = |tag: Option<u16>| {
        let mut e = dst.to_vec();
        e.extend_from_slice(&src);
        if let Some(tci) = tag {
            e.extend_from_slice(&[0x81, 0x00]);
            e.extend_from_slice(&tci.to_be_bytes());
        }
        e.extend_from_slice(&[0x08, 0x00]);
        e
    };
    // (name, the frame as it must arrive, inner TCP offset if sent partial)
    let cases: Vec<(&str, Vec<u8>, Option<usize>)> = vec![
        ("ipip", outer_v4(&eth(None), 4, &[], &inner_tcp(false, 1)), Some(14 + 20 + 20)),
        ("gre", outer_v4(&eth(None), 47, &[0, 0, 0x08, 0x00], &inner_tcp(false, 2)), Some(14 + 24 + 20)),
        ("6in4", outer_v4(&eth(None), 41, &[], &inner_tcp(true, 3)), Some(14 + 20 + 40)),
        ("802.1Q ipip", outer_v4(&eth(Some(0x2064)), 4, &[], &inner_tcp(false, 4)), None),
        (
            "802.1Q gre partial",
            outer_v4(&eth(Some(0x0064)), 47, &[0, 0, 0x08, 0x00], &inner_tcp(false, 5)),
            Some(18 + 24 + 20),
        ),
    ];

    let tx = lab.ns(lab.legacy).run(|| PacketSocket::open(LEGACY_DEV, &SocketConfig::default())).unwrap().unwrap();
    let rx = lab.ns(lab.bnet).run(|| PacketSocket::open(BNET_DEV, &SocketConfig::default())).unwrap().unwrap();
    for (name, want, partial) in &cases {
        let mut f = want.clone();
        let meta = match partial {
            Some(l4) => {
                let l3 = l4 - if *name == "6in4" { 40 } else { 20 };
                let ps = fold(&[], pseudo(&f[l3..*l4], 6, f.len() - l4));
                f[l4 + 16..l4 + 18].copy_from_slice(&ps.to_be_bytes());
                PacketMeta { csum: Checksum::Partial { start: *l4 as u16, offset: 16 }, ..PacketMeta::PLAIN }
            }
            None => PacketMeta::PLAIN,
        };
        send_frame(&tx, &meta, &f).unwrap_or_else(|e| panic!("{name}: send: {e}"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut batch = RxBatch::new(16, MAX_FRAME);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while got.len() < cases.len() && std::time::Instant::now() < deadline {
        rx.recv_batch(&mut batch).unwrap();
        for p in batch.iter().flatten() {
            if p.frame.get(6..12) != Some(&src[..]) || p.frame.len() < 1000 {
                continue;
            }
            let mut f = p.frame.to_vec();
            if let Checksum::Partial { start, offset } = p.meta.csum {
                // Left partial by the gateway: finish it here, so the
                // comparison below shows whether it was right.
                px_wire::offload::complete_partial(&mut f, px_wire::offload::Checksum::Partial { start, offset })
                    .unwrap();
            }
            got.push(f);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let exit = gw.stop();
    exit.assert_clean();
    eprintln!("gateway counters: {}", exit.stats["counters"]);
    assert_eq!(got.len(), cases.len(), "frames through the gateway");
    for ((name, want, _), g) in cases.iter().zip(&got) {
        assert_eq!(g, want, "{name}: the frame, tag and complete inner checksum included");
    }
}
