//! PX-caravans in the engine, checked from outside: frames are built and
//! every frame that leaves is parsed and checksummed by etherparse; caravan
//! payloads are read with `px-caravan`, whose own tests pin the format.
//!
//! Invariants: every datagram leaves once, UDP header and payload
//! byte-exact, in its flow's order; caravans never exceed the iMTU; non-
//! capable destinations see the original frames; malformed caravans are
//! dropped whole and counted by reason; nothing waits past the merge timeout.

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::{Checksum, Gso, GsoKind, MAC_INNER, MAC_OUTER, PacketMeta, check_wire_frame, ip_headers, test_config};
use etherparse::{NetHeaders, PacketBuilder, TransportHeader};
use proptest::prelude::*;
use px_caravan::{Builder, Caravan, InnerChecksum, Malformed, Pseudo};
use px_gateway::{Config, DropReason, Engine, Port, Verdict};

const DSCP: u8 = px_caravan::DEFAULT_DSCP;

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cfg() -> Config {
    Config {
        caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap(), "2001:db8:2::/48".parse().unwrap()],
        ..test_config()
    }
}

/// A UDP datagram as a frame; `ttl` and `dscp` for header-mismatch cases.
#[derive(Debug, Clone)]
struct Dg {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    id: u16,
    df: bool,
    ttl: u8,
    dscp: u8,
    payload: Vec<u8>,
}

impl Dg {
    fn new(src: &str, dst: &str, sport: u16, dport: u16, id: u16, payload: Vec<u8>) -> Dg {
        Dg { src: v4(src), dst: v4(dst), sport, dport, id, df: false, ttl: 64, dscp: 0, payload }
    }

    fn frame(&self, dir: Port) -> Vec<u8> {
        let (a, b) = if dir == Port::Outer { (MAC_OUTER, MAC_INNER) } else { (MAC_INNER, MAC_OUTER) };
        let mut v = Vec::new();
        PacketBuilder::ethernet2(a, b)
            .ip(ip_headers(self.src, self.dst, self.dscp, 0, self.ttl, self.df, self.id, 0))
            .udp(self.sport, self.dport)
            .write(&mut v, &self.payload)
            .unwrap();
        v
    }

    /// The UDP datagram (header + payload) as it is on the wire.
    fn udp_bytes(&self) -> Vec<u8> {
        let f = self.frame(Port::Outer);
        let l4 = if self.src.is_ipv4() { 34 } else { 54 };
        f[l4..].to_vec()
    }
}

fn payload(flow: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| (i as u32 ^ seq.wrapping_mul(31)) as u8 ^ flow).collect();
    if len >= 4 {
        p[..4].copy_from_slice(&seq.to_be_bytes());
    }
    p
}

/// Drives one engine the way the I/O layer must: drain, then the verdict.
struct Drive {
    eng: Engine,
    now: Instant,
    /// (port, frame) in the order they left.
    out: Vec<(Port, Vec<u8>)>,
    verdicts: Vec<Verdict>,
    /// The checksum state the I/O layer reports for every frame.
    meta: PacketMeta,
}

impl Drive {
    fn new(cfg: Config) -> Drive {
        Drive {
            eng: Engine::new(cfg).unwrap(),
            now: Instant::now(),
            out: Vec::new(),
            verdicts: Vec::new(),
            meta: PacketMeta::PLAIN,
        }
    }

    fn drain(&mut self) {
        while let Some(t) = self.eng.poll_transmit() {
            self.out.push((t.port, t.frame().to_vec()));
            self.eng.recycle(t.buf);
        }
    }

    fn feed(&mut self, from: Port, mut frame: Vec<u8>) -> Verdict {
        let v = self.eng.handle_packet(self.now, from, &mut frame, self.meta);
        self.drain();
        if let Verdict::Forward { .. } = v {
            self.out.push((from.other(), frame));
        }
        self.verdicts.push(v);
        v
    }

    fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        while let Some(t) = self.eng.poll_timeout().filter(|t| *t <= until) {
            self.now = self.now.max(t);
            self.eng.handle_timeout(self.now);
            self.drain();
        }
        self.now = until;
    }

    fn take(&mut self) -> Vec<(Port, Vec<u8>)> {
        std::mem::take(&mut self.out)
    }
}

/// What a caravan-reading host gets from one inner frame: the datagrams
/// (UDP header + payload) and whether it was a caravan.
fn read_inner(frame: &[u8], dscp: u8) -> (bool, Vec<Vec<u8>>) {
    let w = check_wire_frame(frame).unwrap();
    let (tos, ip_len) = match &w.net {
        NetHeaders::Ipv4(h, _) => ((h.dscp.value() << 2) | h.ecn.value(), h.total_len as usize),
        NetHeaders::Ipv6(h, _) => (h.traffic_class, 40 + h.payload_length as usize),
        NetHeaders::Arp(_) => panic!("arp"),
    };
    assert!(ip_len <= 9000, "caravan of {ip_len} bytes exceeds the iMTU");
    let Some(TransportHeader::Udp(u)) = w.transport else { panic!("not UDP") };
    if px_caravan::is_caravan_tos(tos, dscp) {
        let c = Caravan::parse(&w.payload, Some((u.source_port, u.destination_port))).unwrap();
        assert!(c.len() >= 2, "a caravan of one should have left plain");
        (true, c.iter().map(|r| r.datagram().to_vec()).collect())
    } else {
        let mut d = u.to_bytes().to_vec();
        d.extend_from_slice(&w.payload);
        (false, vec![d])
    }
}

#[test]
fn packs_a_flow_into_imtu_caravans_in_order() {
    let mut d = Drive::new(cfg());
    let dgs: Vec<Dg> = (0..20)
        .map(|i| Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, 100 + i as u16, payload(1, i, 1200)))
        .collect();
    for g in &dgs {
        assert_eq!(d.feed(Port::Outer, g.frame(Port::Outer)), Verdict::Consumed);
    }
    // 20 + 8 + 7 * 1208 = 8484 <= 9000: two full caravans left at once.
    let first = d.take();
    assert_eq!(first.len(), 2);
    d.advance(Duration::from_micros(499));
    assert!(d.take().is_empty(), "held less than the merge timeout");
    d.advance(Duration::from_micros(2));
    let last = d.take();
    assert_eq!(last.len(), 1);
    let mut got = Vec::new();
    for (port, f) in first.iter().chain(&last) {
        assert_eq!(*port, Port::Inner);
        let (is_caravan, dgs) = read_inner(f, DSCP);
        assert!(is_caravan);
        got.extend(dgs);
        // Outer IP ID is the first datagram's; TTL kept.
        let w = check_wire_frame(f).unwrap();
        if let NetHeaders::Ipv4(h, _) = &w.net {
            assert_eq!(h.time_to_live, 64);
            assert!(h.identification >= 100 && h.identification < 120);
        }
    }
    let want: Vec<Vec<u8>> = dgs.iter().map(|g| g.udp_bytes()).collect();
    assert_eq!(got, want);
    let c = &d.eng.counters().caravan;
    assert_eq!((c.packed_in, c.built, c.built_full, c.built_datagrams, c.timeouts), (20, 3, 2, 20, 1));
    assert!((c.caravan_yield() - 2.0 / 3.0).abs() < 1e-9);
    assert!((c.datagrams_per_caravan() - 20.0 / 3.0).abs() < 1e-9);
}

#[test]
fn other_destinations_and_ports_pass_unchanged() {
    let mut d = Drive::new(Config { caravan_ports: vec![443], ..cfg() });
    let elsewhere = Dg::new("198.51.100.1", "203.0.114.2", 4000, 443, 1, payload(2, 0, 500));
    let other_port = Dg::new("198.51.100.1", "203.0.113.2", 4000, 53, 2, payload(2, 1, 500));
    for g in [&elsewhere, &other_port, &elsewhere, &other_port] {
        let f = g.frame(Port::Outer);
        assert!(matches!(d.feed(Port::Outer, f.clone()), Verdict::Forward { .. }));
        assert_eq!(d.take(), vec![(Port::Inner, f)]);
    }
    assert_eq!(d.eng.counters().caravan.packed_in, 0);
}

#[test]
fn a_lone_datagram_leaves_as_it_came() {
    let mut d = Drive::new(cfg());
    let g = Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, 9, payload(3, 0, 100));
    assert_eq!(d.feed(Port::Outer, g.frame(Port::Outer)), Verdict::Consumed);
    d.advance(Duration::from_millis(1));
    assert_eq!(d.take(), vec![(Port::Inner, g.frame(Port::Outer))]);
    assert_eq!(d.eng.counters().caravan.singles, 1);
}

#[test]
fn header_changes_and_id_gaps_start_the_next_caravan() {
    let mut d = Drive::new(cfg());
    let mk = |i: u32, id: u16| Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, id, payload(4, i, 300));
    let mut seq = vec![mk(0, 10), mk(1, 11), mk(2, 13), mk(3, 14)];
    let mut ttl = mk(4, 15);
    ttl.ttl = 63;
    seq.push(ttl);
    seq.push({
        let mut g = mk(5, 16);
        g.ttl = 63;
        g
    });
    // DF set: the ID carries nothing (RFC 6864), a fixed ID still joins.
    let mut df = vec![mk(6, 0), mk(7, 0), mk(8, 0)];
    for g in &mut df {
        g.df = true;
        g.ttl = 63;
    }
    seq.extend(df);
    for g in &seq {
        let _ = d.feed(Port::Outer, g.frame(Port::Outer));
    }
    d.advance(Duration::from_millis(1));
    let out = d.take();
    let sizes: Vec<usize> = out.iter().map(|(_, f)| read_inner(f, DSCP).1.len()).collect();
    // [10 11] gap [13 14] ttl [15 16] DF [0 0 0]
    assert_eq!(sizes, [2, 2, 2, 3]);
    let got: Vec<Vec<u8>> = out.iter().flat_map(|(_, f)| read_inner(f, DSCP).1).collect();
    assert_eq!(got, seq.iter().map(|g| g.udp_bytes()).collect::<Vec<_>>());
    assert_eq!(d.eng.counters().caravan.mismatches, 3);
}

#[test]
fn a_corrupt_datagram_passes_plain_after_its_flow() {
    let mut d = Drive::new(cfg());
    let good: Vec<Dg> =
        (0..2).map(|i| Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, i as u16, payload(9, i, 500))).collect();
    for g in &good {
        let _ = d.feed(Port::Outer, g.frame(Port::Outer));
    }
    let bad = Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, 2, payload(9, 2, 500));
    let mut f = bad.frame(Port::Outer);
    f[100] ^= 1;
    assert!(matches!(d.feed(Port::Outer, f.clone()), Verdict::Forward { .. }));
    let out = d.take();
    assert_eq!(out.len(), 2);
    let (is_caravan, dgs) = read_inner(&out[0].1, DSCP);
    assert!(is_caravan);
    assert_eq!(dgs, good.iter().map(|g| g.udp_bytes()).collect::<Vec<_>>());
    assert_eq!(out[1].1, f, "the corrupt datagram leaves as it came, for its receiver to drop");
    assert_eq!(d.eng.counters().bad_checksum, 1);
}

#[test]
fn udp_gro_batches_are_not_packed_as_one_record() {
    // A batch of five 100-byte datagrams under one header: each is its own
    // record (it used to pass whole, as one 500-byte datagram).
    let mut d = Drive::new(cfg());
    d.meta = PacketMeta {
        gso: Some(Gso { kind: GsoKind::UdpL4, size: 100, ecn: false }),
        csum: Checksum::Valid,
        hdr_len: 0,
    };
    let data = payload(10, 0, 500);
    let g = Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, 1, data.clone());
    assert_eq!(d.feed(Port::Outer, g.frame(Port::Outer)), Verdict::Consumed);
    // One input, cut (every received frame has one outcome in the
    // counters); its datagrams show in the caravan built.
    assert_eq!((d.eng.counters().split_in, d.eng.counters().caravan.packed_in), (1, 0));
    d.advance(Duration::from_millis(10));
    assert_eq!(d.eng.counters().caravan.built_datagrams, 5);
    let out = d.take();
    assert_eq!(out.len(), 1);
    let (is_caravan, dgs) = read_inner(&out[0].1, DSCP);
    assert!(is_caravan);
    let payloads: Vec<&[u8]> = dgs.iter().map(|d| &d[8..]).collect();
    assert_eq!(payloads, data.chunks(100).collect::<Vec<_>>());
}

#[test]
fn a_lone_datagram_with_the_codepoint_is_remarked() {
    let mut d = Drive::new(cfg());
    let mut g = Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, 9, payload(11, 0, 100));
    g.dscp = DSCP;
    let _ = d.feed(Port::Outer, g.frame(Port::Outer));
    d.advance(Duration::from_millis(1));
    let out = d.take();
    let (is_caravan, dgs) = read_inner(&out[0].1, DSCP);
    assert!(!is_caravan);
    assert_eq!(dgs[0], g.udp_bytes());
    assert_eq!(d.eng.counters().caravan.remarked, 1);
}

#[test]
fn plain_datagram_with_the_codepoint_is_remarked_inbound() {
    let mut d = Drive::new(cfg());
    // Too big for a caravan (IP 8998 + 8 > 9000): passes plain, DSCP cleared.
    let mut g = Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, 1, payload(5, 0, 8970));
    g.dscp = DSCP;
    assert!(matches!(d.feed(Port::Outer, g.frame(Port::Outer)), Verdict::Forward { .. }));
    let out = d.take();
    let (is_caravan, dgs) = read_inner(&out[0].1, DSCP);
    assert!(!is_caravan);
    assert_eq!(dgs[0], g.udp_bytes());
    assert_eq!(d.eng.counters().caravan.remarked, 1);
}

/// No outside packet may pose as a caravan: UDP from outside with the
/// codepoint is remarked (RFC 2474: DSCP 0, IPv4 checksum fixed) whatever
/// its destination, fragments included, not only toward caravan readers.
#[test]
fn outside_udp_with_the_codepoint_is_remarked_for_every_destination() {
    for dst in ["198.51.100.200", "2001:db8:3::1", "203.0.113.2"] {
        let mut d = Drive::new(cfg());
        let src = if dst.contains(':') { "2001:db8:1::1" } else { "198.51.100.1" };
        let mut g = Dg::new(src, dst, 4000, 443, 5, payload(12, 0, 8000));
        g.dscp = DSCP;
        let _ = d.feed(Port::Outer, g.frame(Port::Outer));
        d.advance(Duration::from_millis(1));
        let out = d.take();
        assert!(!out.is_empty(), "{dst}");
        for (port, f) in &out {
            assert_eq!(*port, Port::Inner);
            let w = check_wire_frame(f).unwrap();
            let dscp = match &w.net {
                NetHeaders::Ipv4(h, _) => h.dscp.value(),
                NetHeaders::Ipv6(h, _) => h.traffic_class >> 2,
                NetHeaders::Arp(_) => unreachable!(),
            };
            assert_eq!(dscp, 0, "{dst}: the codepoint left the gateway toward the inside");
        }
        assert!(d.eng.counters().caravan.remarked >= 1, "{dst}");
    }
    // A non-first fragment carries no UDP header; it is UDP all the same.
    let mut d = Drive::new(cfg());
    let mut g = Dg::new("198.51.100.1", "203.0.113.2", 4000, 443, 5, payload(12, 0, 100));
    g.dscp = DSCP;
    let mut f = g.frame(Port::Outer);
    f[20..22].copy_from_slice(&0x0010u16.to_be_bytes()); // offset 128 bytes
    f[24..26].copy_from_slice(&[0, 0]);
    let c = !common::ones_complement(&f[14..34], 0);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let _ = d.feed(Port::Outer, f);
    let out = d.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1[15] >> 2, 0, "fragment remarked");
    assert_eq!(common::ones_complement(&out[0].1[14..34], 0), 0xffff, "IPv4 header checksum fixed");
}

/// A caravan larger than the iMTU (an `imtu` set below the link MTU, or an
/// I/O path that reassembles) whose record does not fit a pool
/// buffer used to panic the worker. It is dropped whole and counted.
#[test]
fn a_record_larger_than_a_buffer_is_dropped_not_a_panic() {
    for imtu in [9000u16, 1500] {
        let mut d = Drive::new(Config { imtu, ..cfg() });
        let ps = vec![payload(13, 0, 100), payload(13, 1, 12_000), payload(13, 2, 100)];
        let f = caravan_frame("203.0.113.2", "198.51.100.1", 443, 4000, &ps, false);
        let v = d.feed(Port::Inner, f);
        assert_eq!(v, Verdict::Dropped(DropReason::TooBigUncuttable), "imtu {imtu}");
        assert!(d.take().is_empty(), "never forwarded in part");
    }
}

/// An outbound caravan frame from an inner host, built with the library.
fn caravan_frame(src: &str, dst: &str, sp: u16, dp: u16, payloads: &[Vec<u8>], df: bool) -> Vec<u8> {
    let (s, t) = (v4(src), v4(dst));
    let pseudo = match (s, t) {
        (IpAddr::V4(s), IpAddr::V4(t)) => Pseudo::V4 { src: s, dst: t },
        (IpAddr::V6(s), IpAddr::V6(t)) => Pseudo::V6 { src: s, dst: t },
        _ => unreachable!(),
    };
    let mut b = Builder::new(vec![0u8; 65_000], sp, dp);
    for p in payloads {
        b.push(p, InnerChecksum::Compute(pseudo)).unwrap();
    }
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_INNER, MAC_OUTER)
        .ip(ip_headers(s, t, DSCP, 2, 64, df, 777, 0))
        .udp(sp, dp)
        .write(&mut v, b.as_bytes())
        .unwrap();
    v
}

#[test]
fn outbound_caravans_are_unpacked_with_valid_headers() {
    for (src, dst) in [("203.0.113.2", "198.51.100.1"), ("2001:db8:2::2", "2001:db8:1::1")] {
        let mut d = Drive::new(cfg());
        let ps: Vec<Vec<u8>> = (0..6).map(|i| payload(6, i, 1400)).collect();
        assert_eq!(d.feed(Port::Inner, caravan_frame(src, dst, 443, 4000, &ps, true)), Verdict::Consumed);
        let out = d.take();
        assert_eq!(out.len(), 6);
        for ((port, f), p) in out.iter().zip(&ps) {
            assert_eq!(*port, Port::Outer);
            let w = check_wire_frame(f).unwrap();
            assert_eq!(&w.payload, p);
            match &w.net {
                NetHeaders::Ipv4(h, _) => {
                    assert_eq!((h.dscp.value(), h.ecn.value(), h.time_to_live), (0, 2, 64));
                    assert!(h.dont_fragment);
                    assert_eq!(h.total_len as usize, 28 + 1400);
                }
                NetHeaders::Ipv6(h, _) => assert_eq!((h.traffic_class, h.payload_length), (2, 1408)),
                NetHeaders::Arp(_) => unreachable!(),
            }
            let Some(TransportHeader::Udp(u)) = &w.transport else { panic!() };
            assert_eq!((u.source_port, u.destination_port), (443, 4000));
        }
        let c = &d.eng.counters().caravan;
        assert_eq!((c.opened, c.opened_datagrams), (1, 6));
    }
}

#[test]
fn a_zero_inner_checksum_is_filled_in_over_ipv6() {
    let mut d = Drive::new(cfg());
    let mut b = Builder::new(vec![0u8; 4096], 443, 4000);
    b.push(b"no checksum here", InnerChecksum::None).unwrap();
    b.push(b"nor here", InnerChecksum::None).unwrap();
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_INNER, MAC_OUTER)
        .ip(ip_headers(v4("2001:db8:2::2"), v4("2001:db8:1::1"), DSCP, 0, 64, true, 0, 0))
        .udp(443, 4000)
        .write(&mut v, b.as_bytes())
        .unwrap();
    assert_eq!(d.feed(Port::Inner, v), Verdict::Consumed);
    let out = d.take();
    assert_eq!(out.len(), 2);
    for (_, f) in &out {
        // etherparse verifies IPv6 UDP checksums unconditionally.
        let w = check_wire_frame(f).unwrap();
        let Some(TransportHeader::Udp(u)) = w.transport else { panic!() };
        assert_ne!(u.checksum, 0);
    }
}

#[test]
fn unpacked_datagrams_too_big_for_the_outside_get_router_treatment() {
    let mut d = Drive::new(cfg());
    let big = vec![payload(7, 0, 3000), payload(7, 1, 100)];
    // DF clear: fragmented to the eMTU.
    let _ = d.feed(Port::Inner, caravan_frame("203.0.113.2", "198.51.100.1", 443, 4000, &big, false));
    let out = d.take();
    assert_eq!(out.len(), 3 + 1);
    assert!(out.iter().all(|(p, f)| *p == Port::Outer && f.len() - 14 <= 1500));
    // DF set, or IPv6: dropped, ICMP "fragmentation needed" / ICMPv6
    // "packet too big" back inside.
    for (src, dst) in [("203.0.113.2", "198.51.100.1"), ("2001:db8:2::2", "2001:db8:1::1")] {
        let _ = d.feed(Port::Inner, caravan_frame(src, dst, 443, 4000, &big, true));
        let out = d.take();
        assert_eq!(out.len(), 2, "{src}");
        assert_eq!((out[0].0, out[1].0), (Port::Inner, Port::Outer), "{src}");
        let icmp = check_wire_frame(&out[0].1).unwrap().transport;
        let right_family = match icmp {
            Some(TransportHeader::Icmpv4(_)) => src.contains('.'),
            Some(TransportHeader::Icmpv6(_)) => src.contains(':'),
            _ => false,
        };
        assert!(right_family, "{src}: {icmp:?}");
    }
}

/// A caravan whose datagram is too big for the outside is one received
/// packet, counted once (in `caravan.opened`); the datagram's router
/// treatment has counters of its own and is not counted again as a
/// fragmented or dropped received packet.
#[test]
fn an_opened_caravan_with_a_datagram_too_big_is_counted_once() {
    let big = vec![payload(7, 0, 3000), payload(7, 1, 100)];
    for (src, dst, df) in [
        ("203.0.113.2", "198.51.100.1", false),
        ("203.0.113.2", "198.51.100.1", true),
        ("2001:db8:2::2", "2001:db8:1::1", true),
    ] {
        let mut d = Drive::new(cfg());
        assert_eq!(d.feed(Port::Inner, caravan_frame(src, dst, 443, 4000, &big, df)), Verdict::Consumed);
        let c = d.eng.counters();
        let case = format!("{src} df={df}");
        assert_eq!((c.caravan.opened, c.caravan.opened_datagrams), (1, 2), "{case}");
        assert_eq!((c.fragmented_in, c.total_drops()), (0, 0), "{case}: counted again as a received packet");
        assert_eq!(c.received_accounted(), c.inner.rx_packets + c.outer.rx_packets, "{case}: {c:?}");
        let (fragmented, dropped) = if df { (0, 1) } else { (1, 0) };
        assert_eq!((c.caravan.too_big_fragmented, c.caravan.too_big_dropped), (fragmented, dropped), "{case}");
        assert_eq!(c.fragments_out, 3 * fragmented, "{case}");
        assert_eq!(c.icmp_sent, dropped, "{case}");
    }
}

#[test]
fn malformed_caravans_are_dropped_whole_and_counted() {
    let mut d = Drive::new(cfg());
    let ps = vec![payload(8, 0, 50), payload(8, 1, 60)];
    let good = caravan_frame("203.0.113.2", "198.51.100.1", 443, 4000, &ps, true);
    // Record length past the end (outer checksum fixed up by re-building).
    let mut body = good[42..].to_vec();
    body[4..6].copy_from_slice(&200u16.to_be_bytes());
    let mut bad_len = Vec::new();
    PacketBuilder::ethernet2(MAC_INNER, MAC_OUTER)
        .ip(ip_headers(v4("203.0.113.2"), v4("198.51.100.1"), DSCP, 0, 64, true, 1, 0))
        .udp(443, 4000)
        .write(&mut bad_len, &body)
        .unwrap();
    assert_eq!(d.feed(Port::Inner, bad_len), Verdict::Dropped(DropReason::Malformed));
    // A flipped payload bit: the outer checksum fails.
    let mut flipped = good.clone();
    flipped[60] ^= 4;
    assert_eq!(d.feed(Port::Inner, flipped), Verdict::Dropped(DropReason::Malformed));
    assert!(d.take().is_empty());
    let c = &d.eng.counters().caravan;
    assert_eq!((c.malformed(Malformed::Overrun), c.malformed(Malformed::Checksum), c.opened), (1, 1, 0));
    assert_eq!(d.eng.counters().drops(DropReason::Malformed), 2);
}

#[test]
fn bounded_by_max_flows() {
    let mut d = Drive::new(Config { max_flows: 4, ..cfg() });
    let mut sent: HashMap<u16, Vec<Vec<u8>>> = HashMap::new();
    for round in 0..3u32 {
        for f in 0..10u16 {
            let g = Dg::new("198.51.100.1", "203.0.113.2", 5000 + f, 443, round as u16, payload(f as u8, round, 200));
            sent.entry(f).or_default().push(g.udp_bytes());
            let _ = d.feed(Port::Outer, g.frame(Port::Outer));
        }
    }
    d.advance(Duration::from_millis(1));
    let mut got: HashMap<u16, Vec<Vec<u8>>> = HashMap::new();
    for (_, f) in d.take() {
        for dg in read_inner(&f, DSCP).1 {
            got.entry(u16::from_be_bytes([dg[0], dg[1]]) - 5000).or_default().push(dg);
        }
    }
    assert_eq!(got, sent);
    assert!(d.eng.counters().caravan.pressure > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any interleaving of datagrams of a few flows, any sizes, any gaps in
    /// time: packed by one engine and unpacked by a second one (the path
    /// back out of the b-network), every datagram arrives once, byte-exact,
    /// in order per flow, and nothing was held past the timeout.
    #[test]
    fn pack_then_unpack_round_trips(
        ops in prop::collection::vec((0u8..4, 0usize..3000, 0u64..400, any::<bool>()), 1..120),
        v6 in any::<bool>(),
        verified in any::<bool>(),
    ) {
        let mut inbound = Drive::new(cfg());
        // Checksums vouched for by the I/O layer take the path that derives
        // each record's sum instead of reading it; etherparse checks the
        // resulting outer checksum either way.
        if verified {
            inbound.meta = PacketMeta { csum: Checksum::Valid, ..PacketMeta::PLAIN };
        }
        let mut outbound = Drive::new(Config { emtu: 9000, ..cfg() });
        let mut want: HashMap<u8, Vec<Vec<u8>>> = HashMap::new();
        let mut ids = [0u16; 4];
        for (flow, len, gap, df) in ops {
            let (s, t) = if v6 { ("2001:db8:1::1", "2001:db8:2::2") } else { ("198.51.100.1", "203.0.113.2") };
            let seq = want.get(&flow).map_or(0, |v| v.len()) as u32;
            let mut g = Dg::new(s, t, 4000 + flow as u16, 443, ids[flow as usize], payload(flow, seq, len.max(4)));
            g.df = df;
            ids[flow as usize] = ids[flow as usize].wrapping_add(1);
            want.entry(flow).or_default().push(g.udp_bytes());
            let _ = inbound.feed(Port::Outer, g.frame(Port::Outer));
            inbound.advance(Duration::from_micros(gap));
        }
        inbound.advance(Duration::from_millis(1));
        prop_assert!(inbound.eng.counters().hold.quantile_upper_us(1.0) <= 520);
        let mut got: HashMap<u8, Vec<Vec<u8>>> = HashMap::new();
        for (port, f) in inbound.take() {
            prop_assert_eq!(port, Port::Inner);
            // Turn the caravan around: as if the inner host sent it back out.
            let mut back = f.clone();
            let (a, b) = (back[0..6].to_vec(), back[6..12].to_vec());
            back[0..6].copy_from_slice(&b);
            back[6..12].copy_from_slice(&a);
            let _ = outbound.feed(Port::Inner, back);
            for (p2, out) in outbound.take() {
                prop_assert_eq!(p2, Port::Outer);
                let (_, dgs) = read_inner(&out, DSCP);
                for dg in dgs {
                    got.entry((u16::from_be_bytes([dg[0], dg[1]]) - 4000) as u8).or_default().push(dg);
                }
            }
        }
        prop_assert_eq!(got, want);
        prop_assert_eq!(outbound.eng.counters().total_drops(), 0);
    }

    /// Whatever bytes an inner host sends marked as a caravan, the engine
    /// never panics, and either forwards every record or drops it counted.
    #[test]
    fn arbitrary_caravan_bytes(body in prop::collection::vec(any::<u8>(), 0..600), fix_len in any::<bool>()) {
        let mut body = body;
        if fix_len && body.len() >= 8 {
            let n = body.len() as u16;
            body[4..6].copy_from_slice(&n.to_be_bytes());
            body[0..2].copy_from_slice(&443u16.to_be_bytes());
            body[2..4].copy_from_slice(&4000u16.to_be_bytes());
        }
        let mut v = Vec::new();
        PacketBuilder::ethernet2(MAC_INNER, MAC_OUTER)
            .ip(ip_headers(v4("203.0.113.2"), v4("198.51.100.1"), DSCP, 0, 64, true, 1, 0))
            .udp(443, 4000)
            .write(&mut v, &body)
            .unwrap();
        let mut d = Drive::new(cfg());
        match d.feed(Port::Inner, v) {
            Verdict::Consumed => {
                let c = d.eng.counters().caravan.clone();
                prop_assert_eq!(c.opened, 1);
                prop_assert_eq!(d.take().len() as u64, c.opened_datagrams);
            }
            Verdict::Dropped(DropReason::Malformed) => {
                prop_assert_eq!(d.eng.counters().caravan.malformed.iter().sum::<u64>(), 1);
            }
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}
