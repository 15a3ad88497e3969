//! Tunnels through the gateway (issue 10 item 6) and UDP GRO batches (item
//! 12): frames shaped as the kernel hands them over after GRO.
//!
//! A GRO'd tunnel super-packet (GRE, IPIP, 6in4, VXLAN, GENEVE) arrives with
//! the GSO type of the *inner* TCP (`VIRTIO_NET_HDR_GSO_TCPV4`/`TCPV6`: the
//! kernel's `virtio_net_hdr_from_skb` drops the `SKB_GSO_UDP_TUNNEL`/`GRE`/
//! `IPXIP4` bits), `csum_start` at the inner TCP header and the inner TCP
//! checksum field holding the pseudo-header sum only. The gateway does not
//! translate tunnels: it must put on the wire what a router with GSO would,
//! the original frames (every header's lengths, IDs and checksums right), and
//! give a piece too big for the egress the router's treatment.
//!
//! Everything here is built and checked by hand (RFC 1071 sums from
//! `common::ones_complement`), independent of the engine's wire layer.

mod common;

use std::net::IpAddr;
use std::time::Instant;

use common::{ones_complement, test_config};
use px_gateway::{Config, DropReason, Engine, Port, Verdict};
use px_wire::offload::{Checksum, Gso, GsoKind, PacketMeta};

const OUT4: [u8; 4] = [198, 51, 100, 7];
const IN4: [u8; 4] = [203, 0, 113, 7];
const TUN_SRC4: [u8; 4] = [198, 51, 100, 1];
const TUN_DST4: [u8; 4] = [203, 0, 113, 1];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gre {
        csum: bool,
        key: bool,
    },
    /// IPv4 in IPv4 (protocol 4).
    IpIp,
    /// IPv6 in IPv4 (protocol 41, "sit").
    SixInFour,
    Vxlan,
    Geneve,
}

const ALL: [Kind; 6] = [
    Kind::Gre { csum: false, key: false },
    Kind::Gre { csum: true, key: true },
    Kind::IpIp,
    Kind::SixInFour,
    Kind::Vxlan,
    Kind::Geneve,
];

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum()
}

fn ipv4(proto: u8, total: usize, id: u16, df: bool, src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0, 0, if df { 0x40 } else { 0 }, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[4..6].copy_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = !ones_complement(&h, 0);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

fn v6addr(last: u8, net: u16) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[4..6].copy_from_slice(&net.to_be_bytes());
    a[15] = last;
    a
}

fn ipv6(next: u8, payload: usize, src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h
}

/// Pseudo-header sum (unfolded) of the IP header `ip` for `proto` and `len`.
fn pseudo(ip: &[u8], proto: u8, len: usize) -> u32 {
    if ip[0] >> 4 == 4 {
        sum16(&ip[12..20]) + proto as u32 + len as u32
    } else {
        sum16(&ip[8..40]) + proto as u32 + (len >> 16) as u32 + (len & 0xffff) as u32
    }
}

/// The inner IP packet of a GRO super-packet: TCP with NOP NOP TS, checksum
/// complete (see `make_inner_partial`).
fn inner_packet(v6: bool, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut tcp = vec![0u8; 32];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 8 << 4;
    tcp[13] = 0x18; // ACK PSH
    tcp[14..16].copy_from_slice(&1000u16.to_be_bytes());
    tcp[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3]);
    tcp.extend_from_slice(payload);
    let ip =
        if v6 { ipv6(6, tcp.len(), v6addr(7, 1), v6addr(7, 2)) } else { ipv4(6, 20 + tcp.len(), 500, true, OUT4, IN4) };
    let c = !ones_complement(&tcp, pseudo(&ip, 6, tcp.len()));
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    let mut p = ip;
    p.extend_from_slice(&tcp);
    p
}

fn eth(ethertype: u16) -> Vec<u8> {
    let mut e = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    e.extend_from_slice(&ethertype.to_be_bytes());
    e
}

/// A GRO'd tunnel super-packet over outer IPv4 (or IPv6 for VXLAN when
/// `outer_v6`), inner TCP over IPv4 (IPv6 for 6in4). Returns the frame and
/// its receive metadata, as the kernel reports them.
fn tunnel_frame(kind: Kind, outer_v6: bool, df: bool, mss: u16, payload: &[u8]) -> (Vec<u8>, PacketMeta) {
    let inner_v6 = kind == Kind::SixInFour;
    let inner = inner_packet(inner_v6, 1_000_000, payload);
    let inner_eth = |p: &[u8]| {
        let mut e = eth(if inner_v6 { 0x86dd } else { 0x0800 });
        e.extend_from_slice(p);
        e
    };
    let (proto, mut encap): (u8, Vec<u8>) = match kind {
        Kind::IpIp => (4, Vec::new()),
        Kind::SixInFour => (41, Vec::new()),
        Kind::Gre { csum, key } => {
            let mut g = vec![(csum as u8) << 7 | (key as u8) << 5, 0, 0x08, 0x00];
            if csum {
                g.extend_from_slice(&[0, 0, 0, 0]);
            }
            if key {
                g.extend_from_slice(&[0, 0, 0, 42]);
            }
            (47, g)
        }
        Kind::Vxlan => {
            let mut u = vec![0xc0, 0x01, 0x12, 0xb5, 0, 0, 0, 0];
            u.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 42, 0]);
            (17, u)
        }
        Kind::Geneve => {
            let mut u = vec![0xc0, 0x01, 0x17, 0xc1, 0, 0, 0, 0];
            // One 8-byte option (opt len 2 words), protocol: Ethernet.
            u.extend_from_slice(&[0x02, 0, 0x65, 0x58, 0, 0, 42, 0]);
            u.extend_from_slice(&[0x01, 0x02, 0x03, 0x01, 0xaa, 0xbb, 0xcc, 0xdd]);
            (17, u)
        }
    };
    let body = if matches!(kind, Kind::Vxlan | Kind::Geneve) { inner_eth(&inner) } else { inner };
    encap.extend_from_slice(&body);
    if proto == 17 {
        let n = encap.len() as u16;
        encap[4..6].copy_from_slice(&n.to_be_bytes());
    }
    let outer_ip = if outer_v6 {
        ipv6(proto, encap.len(), v6addr(1, 1), v6addr(1, 2))
    } else {
        ipv4(proto, 20 + encap.len(), 7000, df, TUN_SRC4, TUN_DST4)
    };
    // Outer checksums as local checksum offload (LCO) computes them: over
    // the packet as it will be once the inner checksum is complete.
    if proto == 17 && outer_v6 {
        // IPv6 forbids a zero UDP checksum.
        let c = !ones_complement(&encap, pseudo(&outer_ip, 17, encap.len()));
        encap[6..8].copy_from_slice(&c.to_be_bytes());
    }
    if let Kind::Gre { csum: true, .. } = kind {
        let c = !ones_complement(&encap, 0);
        encap[4..6].copy_from_slice(&c.to_be_bytes());
    }
    let mut f = eth(if outer_v6 { 0x86dd } else { 0x0800 });
    f.extend_from_slice(&outer_ip);
    let inner_at = f.len() + encap.len() - body.len() + if matches!(kind, Kind::Vxlan | Kind::Geneve) { 14 } else { 0 };
    f.extend_from_slice(&encap);
    let inner_l4 = inner_at + if inner_v6 { 40 } else { 20 };
    // CHECKSUM_PARTIAL: the inner TCP checksum field holds the folded
    // pseudo-header sum only.
    let ps = ones_complement(&[], pseudo(&f[inner_at..inner_l4], 6, f.len() - inner_l4));
    f[inner_l4 + 16..inner_l4 + 18].copy_from_slice(&ps.to_be_bytes());
    let meta = PacketMeta {
        gso: Some(Gso { kind: if inner_v6 { GsoKind::TcpV6 } else { GsoKind::TcpV4 }, size: mss, ecn: false }),
        csum: Checksum::Partial { start: inner_l4 as u16, offset: 16 },
        hdr_len: (inner_l4 + 32) as u16,
    };
    (f, meta)
}

/// Checks one piece that left the gateway, returns (inner TCP seq, payload).
fn check_piece(kind: Kind, outer_v6: bool, i: u16, f: &[u8]) -> (u32, Vec<u8>) {
    let ctx = format!("{kind:?} piece {i}");
    let l3 = 14;
    let (proto, l4) = if outer_v6 {
        assert_eq!(u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) as usize, f.len() - l3 - 40, "{ctx}: outer v6 length");
        (f[l3 + 6], l3 + 40)
    } else {
        let ip = &f[l3..l3 + 20];
        assert_eq!(ones_complement(ip, 0), 0xffff, "{ctx}: outer IPv4 checksum");
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, f.len() - l3, "{ctx}: outer IPv4 length");
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 7000 + i, "{ctx}: outer IPv4 ID counts up");
        (ip[9], l3 + 20)
    };
    let outer_ip = &f[l3..l4];
    let inner_l3 = match kind {
        Kind::IpIp | Kind::SixInFour => l4,
        Kind::Gre { csum, key } => {
            if csum {
                assert_eq!(ones_complement(&f[l4..], 0), 0xffff, "{ctx}: GRE checksum");
            }
            l4 + 4 + 4 * csum as usize + 4 * key as usize
        }
        Kind::Vxlan | Kind::Geneve => {
            assert_eq!(proto, 17);
            assert_eq!(u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]) as usize, f.len() - l4, "{ctx}: UDP length");
            let c = u16::from_be_bytes([f[l4 + 6], f[l4 + 7]]);
            if outer_v6 {
                assert_eq!(ones_complement(&f[l4..], pseudo(outer_ip, 17, f.len() - l4)), 0xffff, "{ctx}: UDP csum");
            } else {
                assert_eq!(c, 0, "{ctx}: a zero outer UDP checksum stays zero over IPv4");
            }
            l4 + if kind == Kind::Vxlan { 16 } else { 24 } + 14
        }
    };
    let inner_v6 = f[inner_l3] >> 4 == 6;
    let inner_l4 = if inner_v6 {
        assert_eq!(u16::from_be_bytes([f[inner_l3 + 4], f[inner_l3 + 5]]) as usize, f.len() - inner_l3 - 40);
        inner_l3 + 40
    } else {
        let ip = &f[inner_l3..inner_l3 + 20];
        assert_eq!(ones_complement(ip, 0), 0xffff, "{ctx}: inner IPv4 checksum");
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, f.len() - inner_l3, "{ctx}: inner length");
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 500 + i, "{ctx}: inner IPv4 ID counts up");
        inner_l3 + 20
    };
    let tcp = &f[inner_l4..];
    let ps = pseudo(&f[inner_l3..inner_l4], 6, tcp.len());
    assert_eq!(ones_complement(tcp, ps), 0xffff, "{ctx}: inner TCP checksum");
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    (seq, tcp[32..].to_vec())
}

fn drain(e: &mut Engine) -> Vec<(Port, Vec<u8>)> {
    let mut v = Vec::new();
    while let Some(t) = e.poll_transmit() {
        v.push((t.port, t.frame().to_vec()));
        e.recycle(t.buf);
    }
    v
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn gro_tunnel_super_packets_leave_as_the_original_frames() {
    for kind in ALL {
        for outer_v6 in [false, true] {
            if outer_v6 && kind != Kind::Vxlan {
                continue;
            }
            let data = payload(5 * 1398 + 300);
            let (mut f, meta) = tunnel_frame(kind, outer_v6, true, 1398, &data);
            let mut e = Engine::new(test_config()).unwrap();
            let v = e.handle_packet(Instant::now(), Port::Outer, &mut f, meta);
            let mut out = drain(&mut e);
            if let Verdict::Forward { meta } = v {
                // Only acceptable if the frame itself is a complete, wire-ready frame.
                assert!(meta.gso.is_none(), "{kind:?}: a tunnel super-packet cannot be handed to GSO as TCP");
                out.push((Port::Inner, f.clone()));
            }
            assert_eq!(out.len(), 6, "{kind:?} outer_v6={outer_v6}: six frames, as they were sent");
            let mut got = Vec::new();
            for (i, (port, p)) in out.iter().enumerate() {
                assert_eq!(*port, Port::Inner);
                let (seq, pl) = check_piece(kind, outer_v6, i as u16, p);
                assert_eq!(seq, 1_000_000 + got.len() as u32, "{kind:?} piece {i} seq");
                assert_eq!(pl.len(), if i < 5 { 1398 } else { 300 }, "{kind:?} piece {i} size");
                let flags = p[p.len() - pl.len() - 32 + 13];
                assert_eq!(flags, if i < 5 { 0x10 } else { 0x18 }, "{kind:?}: PSH on the last piece only");
                got.extend_from_slice(&pl);
            }
            assert_eq!(got, data, "{kind:?}: byte-exact");
            assert_eq!(e.counters().drop.iter().sum::<u64>(), 0);
        }
    }
}

#[test]
fn a_partial_inner_checksum_of_a_plain_tunnel_frame_is_completed() {
    for kind in ALL {
        let data = payload(1000);
        let (mut f, mut meta) = tunnel_frame(kind, false, true, 1398, &data);
        meta.gso = None;
        let mut e = Engine::new(test_config()).unwrap();
        let v = e.handle_packet(Instant::now(), Port::Outer, &mut f, meta);
        let mut out = drain(&mut e);
        if let Verdict::Forward { meta } = v {
            assert_eq!(meta, PacketMeta::PLAIN, "{kind:?}");
            out.push((Port::Inner, f.clone()));
        }
        assert_eq!(out.len(), 1, "{kind:?}");
        let (_, pl) = check_piece(kind, false, 0, &out[0].1);
        assert_eq!(pl, data);
    }
}

#[test]
fn tunnel_pieces_too_big_for_the_egress_get_the_router_treatment() {
    let cfg = Config { icmp_source_v4: Some("198.51.100.254".parse().unwrap()), ..test_config() };
    for kind in [Kind::Vxlan, Kind::IpIp, Kind::Gre { csum: true, key: false }] {
        for df in [true, false] {
            // From the b-network (9000-byte frames) toward the 1500-byte side.
            let data = payload(3 * 8000);
            let (mut f, meta) = tunnel_frame(kind, false, df, 8000, &data);
            let mut e = Engine::new(cfg.clone()).unwrap();
            let v = e.handle_packet(Instant::now(), Port::Inner, &mut f, meta);
            assert!(!matches!(v, Verdict::Forward { .. }), "{kind:?} df={df}: {v:?}");
            let out = drain(&mut e);
            let to_outer: Vec<_> = out.iter().filter(|(p, _)| *p == Port::Outer).collect();
            assert!(to_outer.iter().all(|(_, p)| p.len() <= 14 + 1500), "{kind:?}: nothing above the eMTU");
            if df {
                // One frame in, one outcome: dropped (each piece met the
                // router's rule; the ICMP errors are rate-limited).
                assert_eq!(e.counters().drops(DropReason::TooBigDf), 1, "{kind:?}");
                assert_eq!(e.counters().icmp_sent, 3, "{kind:?}: one per piece, as a router");
                assert!(to_outer.is_empty());
                let icmp: Vec<_> = out.iter().filter(|(p, _)| *p == Port::Inner).collect();
                assert!(!icmp.is_empty(), "{kind:?}: fragmentation needed, back toward the tunnel source");
                let mtu = u16::from_be_bytes([icmp[0].1[14 + 20 + 6], icmp[0].1[14 + 20 + 7]]);
                assert_eq!(mtu, 1500);
            } else {
                // Fragments of each piece, which the tunnel endpoint reassembles.
                assert!(to_outer.len() >= 6, "{kind:?}: {}", to_outer.len());
                assert_eq!(e.counters().drop.iter().sum::<u64>(), 0);
            }
        }
    }
}

/// A UDP GRO batch (`rx-udp-gro-forwarding`): datagrams of `gso_size`
/// payload under one header. Each must leave as its own datagram.
fn udp_batch(v6: bool, size: u16, data: &[u8]) -> (Vec<u8>, PacketMeta) {
    let mut udp = vec![0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 0];
    udp[4..6].copy_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    udp.extend_from_slice(data);
    let ip = if v6 {
        ipv6(17, udp.len(), v6addr(7, 1), v6addr(7, 2))
    } else {
        ipv4(17, 20 + udp.len(), 300, false, OUT4, IN4)
    };
    let ps = ones_complement(&[], pseudo(&ip, 17, udp.len()));
    udp[6..8].copy_from_slice(&ps.to_be_bytes());
    let mut f = eth(if v6 { 0x86dd } else { 0x0800 });
    f.extend_from_slice(&ip);
    let l4 = f.len();
    f.extend_from_slice(&udp);
    let meta = PacketMeta {
        gso: Some(Gso { kind: GsoKind::UdpL4, size, ecn: false }),
        csum: Checksum::Partial { start: l4 as u16, offset: 6 },
        hdr_len: (l4 + 8) as u16,
    };
    (f, meta)
}

#[test]
fn udp_gro_batches_keep_their_datagram_boundaries() {
    for v6 in [false, true] {
        for caravans in [false, true] {
            let data = payload(3 * 1200 + 77);
            let (mut f, meta) = udp_batch(v6, 1200, &data);
            let mut cfg = test_config();
            if caravans {
                cfg.caravan_prefixes = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
            }
            let mut e = Engine::new(cfg).unwrap();
            let now = Instant::now();
            let v = e.handle_packet(now, Port::Outer, &mut f, meta);
            let mut out = drain(&mut e);
            if let Verdict::Forward { meta } = v {
                assert!(meta.gso.is_some_and(|g| g.kind == GsoKind::UdpL4 && g.size == 1200), "{meta:?}");
            }
            e.flush_all(now);
            out.extend(drain(&mut e));
            let l4 = 14 + if v6 { 40 } else { 20 };
            let mut datagrams = Vec::new();
            for (port, p) in &out {
                assert_eq!(*port, Port::Inner);
                let udp = &p[l4..];
                let ulen = u16::from_be_bytes([udp[4], udp[5]]) as usize;
                assert_eq!(ulen, udp.len(), "v6={v6}: UDP length");
                assert_eq!(ones_complement(udp, pseudo(&p[14..l4], 17, udp.len())), 0xffff, "v6={v6}: checksum");
                if !v6 {
                    assert_eq!(ones_complement(&p[14..34], 0), 0xffff);
                }
                if caravans && u16::from_be_bytes([udp[8], udp[9]]) == 40000 {
                    // A caravan: records, each a datagram of the batch.
                    let mut r = &udp[8..];
                    while !r.is_empty() {
                        let n = u16::from_be_bytes([r[4], r[5]]) as usize;
                        datagrams.push(r[8..n].to_vec());
                        r = &r[n..];
                    }
                } else {
                    datagrams.push(udp[8..].to_vec());
                }
            }
            let want: Vec<Vec<u8>> = data.chunks(1200).map(|c| c.to_vec()).collect();
            assert_eq!(datagrams, want, "v6={v6} caravans={caravans}: one datagram per segment");
        }
    }
}

#[test]
fn outer_addresses_of_the_tests_are_documentation_ranges() {
    for a in [OUT4, IN4, TUN_SRC4, TUN_DST4] {
        let a = IpAddr::from(a);
        assert!(a.to_string().starts_with("198.51.100.") || a.to_string().starts_with("203.0.113."));
    }
}

/// Runs `f` on its own thread and fails if it has not returned within a
/// second: an engine call that loops would otherwise hang the test run.
fn returns_within_a_second<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(1)).unwrap_or_else(|_| panic!("{what}: no return within 1 s"))
}

/// Issue 27, item 10: a GSO size of 0 cuts nothing. px-io refuses it (as
/// Linux's `virtio_net_hdr_to_skb` does), but the engine's API takes any
/// metadata: a UDP batch or a tunnel super-packet with size 0 must return
/// at once, dropped and counted, never loop.
#[test]
fn a_gso_size_of_zero_is_dropped_not_looped_on() {
    for v6 in [false, true] {
        for kind in [GsoKind::UdpL4, GsoKind::TcpV4, GsoKind::TcpV6] {
            for from in [Port::Outer, Port::Inner] {
                let (mut f, mut meta) = udp_batch(v6, 1200, &payload(3 * 1200 + 77));
                meta.gso = Some(Gso { kind, size: 0, ecn: false });
                let (v, malformed) = returns_within_a_second("UDP batch of GSO size 0", move || {
                    let mut e = Engine::new(test_config()).unwrap();
                    let v = e.handle_packet(Instant::now(), from, &mut f, meta);
                    (v, e.counters().drops(DropReason::Malformed))
                });
                assert_eq!(v, Verdict::Dropped(DropReason::Malformed), "v6={v6} {kind:?} {from:?}");
                assert_eq!(malformed, 1);
            }
        }
        // TCP super-packets of size 0 take the TCP paths, which treat the
        // size as unknown: whatever the verdict, it comes back.
        for from in [Port::Outer, Port::Inner] {
            let s = if from == Port::Outer {
                common::TcpSpec::inbound(v6, 1, 1000, payload(3000))
            } else {
                common::TcpSpec::outbound(v6, 1, 1000, payload(3000))
            };
            let mut f = s.build();
            let kind = if v6 { GsoKind::TcpV6 } else { GsoKind::TcpV4 };
            let meta = PacketMeta { gso: Some(Gso { kind, size: 0, ecn: false }), ..PacketMeta::PLAIN };
            let _ = returns_within_a_second("TCP super-packet of GSO size 0", move || {
                let mut e = Engine::new(test_config()).unwrap();
                e.handle_packet(Instant::now(), from, &mut f, meta)
            });
        }
    }
}
