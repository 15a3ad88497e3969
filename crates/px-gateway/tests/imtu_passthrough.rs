//! Toward a neighbour b-network whose iMTU the gateway verified (issue 30,
//! `px_gateway::imtu`): packets pass untouched (no MSS clamp, no split, no
//! merge); larger than the verified size, or once the prefix is withdrawn,
//! they are translated as before, and a flow that loses its verification
//! mid-stream keeps every byte.

mod common;

use common::*;
use etherparse::TcpOptionElement;
use px_gateway::{Engine, ImtuTable, Port, SharedImtu, Verdict};

/// A harness whose engine follows `shared`.
fn harness(shared: &std::sync::Arc<SharedImtu>) -> Harness {
    let cfg = test_config();
    let mut eng = Engine::new(cfg.clone()).unwrap();
    eng.follow_imtu(shared.clone());
    Harness::with_engine(cfg, eng)
}

fn table(entries: &[(&str, u16)]) -> ImtuTable {
    let mut t = ImtuTable::new(16);
    for (p, m) in entries {
        t.insert(p.parse().unwrap(), *m).unwrap();
    }
    t
}

/// The outside hosts of the harness live in 198.51.100.0/24 and
/// 2001:db8:1::/64.
fn outside_verified(mtu: u16) -> ImtuTable {
    table(&[("198.51.100.0/24", mtu), ("2001:db8:1::/64", mtu)])
}

fn payloads(out: &[Out], port: Port) -> Vec<usize> {
    out.iter()
        .filter(|o| o.port == port)
        .filter_map(|o| check_wire_frame(&o.frame).ok())
        .filter(|w| !w.payload.is_empty())
        .map(|w| w.payload.len())
        .collect()
}

#[test]
fn syns_and_large_segments_to_a_verified_neighbour_pass_untouched() {
    for v6 in [false, true] {
        let shared = SharedImtu::new(16);
        shared.publish(outside_verified(9000));
        let mut h = harness(&shared);
        // The inner host's SYN with its large MSS: not clamped.
        let mut syn = TcpSpec::outbound(v6, 1, 100, vec![]).with_opts(vec![TcpOptionElement::MaximumSegmentSize(8940)]);
        syn.flags = Flags { syn: true, ..Flags::default() };
        let frame = syn.build();
        assert!(matches!(
            h.feed(Port::Inner, frame.clone(), px_wire::offload::PacketMeta::PLAIN),
            Verdict::Forward { .. }
        ));
        assert_eq!(h.out.last().unwrap().frame, frame, "the SYN left changed");
        // An 8000-byte segment each way: passed as it came.
        let big_out = TcpSpec::outbound(v6, 1, 101, stream_bytes(2, 0, 8000)).build();
        assert!(matches!(
            h.feed(Port::Inner, big_out.clone(), px_wire::offload::PacketMeta::PLAIN),
            Verdict::Forward { .. }
        ));
        assert_eq!(h.out.last().unwrap().frame, big_out);
        let big_in = TcpSpec::inbound(v6, 1, 5000, stream_bytes(1, 0, 8000)).build();
        assert!(matches!(
            h.feed(Port::Outer, big_in.clone(), px_wire::offload::PacketMeta::PLAIN),
            Verdict::Forward { .. }
        ));
        assert_eq!(h.out.last().unwrap().frame, big_in);
        let c = h.eng.counters();
        assert_eq!((c.imtu_passed, c.mss_clamped, c.split_in, c.merged_in), (3, 0, 0, 0), "v6 {v6}: {c:?}");
    }
}

#[test]
fn larger_than_verified_or_withdrawn_is_translated_without_losing_a_byte() {
    let shared = SharedImtu::new(16);
    shared.publish(outside_verified(4000));
    let mut h = harness(&shared);
    // 8000 bytes do not fit the verified 4000: cut to the outer MTU.
    let data = stream_bytes(2, 0, 8000);
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 101, data.clone()));
    let first = payloads(&h.out, Port::Outer);
    assert!(first.len() > 1 && first.iter().all(|p| *p <= 1460), "{first:?}");
    assert_eq!(first.iter().sum::<usize>(), 8000);
    h.out.clear();
    // Verified at 9000: the next segment passes whole; withdrawn: cut again.
    shared.publish(outside_verified(9000));
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 8101, stream_bytes(2, 8000, 8000)));
    assert_eq!(payloads(&h.out, Port::Outer), vec![8000]);
    h.out.clear();
    shared.publish(ImtuTable::new(16));
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 16_101, stream_bytes(2, 16_000, 8000)));
    let after = payloads(&h.out, Port::Outer);
    assert!(after.len() > 1 && after.iter().all(|p| *p <= 1460), "{after:?}");
    assert_eq!(after.iter().sum::<usize>(), 8000, "bytes lost at the withdrawal");
    assert_eq!(h.eng.counters().imtu_passed, 1);
}

#[test]
fn a_super_packet_passes_only_if_each_segment_fits() {
    let shared = SharedImtu::new(16);
    shared.publish(table(&[("198.51.100.0/24", 9000)]));
    let mut h = harness(&shared);
    // Three 8948-byte segments merged by GRO: each is a 9000-byte packet.
    let sp = TcpSpec::outbound(false, 1, 101, stream_bytes(2, 0, 3 * 8948)).build();
    let v = h.feed(Port::Inner, sp.clone(), gro_meta(px_wire::offload::Checksum::Unknown, 8948));
    assert!(matches!(v, Verdict::Forward { meta } if meta.gso.is_some_and(|g| g.size == 8948)), "{v:?}");
    // With 8000 verified, the same super-packet is translated.
    shared.publish(table(&[("198.51.100.0/24", 8000)]));
    let before = h.eng.counters().imtu_passed;
    let sp = TcpSpec::outbound(false, 1, 101 + 3 * 8948, stream_bytes(2, 3 * 8948, 3 * 8948)).build();
    let _ = h.feed(Port::Inner, sp, gro_meta(px_wire::offload::Checksum::Unknown, 8948));
    assert_eq!(h.eng.counters().imtu_passed, before);
}

#[test]
fn other_destinations_are_translated_as_before() {
    let shared = SharedImtu::new(16);
    shared.publish(table(&[("192.0.2.0/24", 9000)]));
    let mut h = harness(&shared);
    let mut syn = TcpSpec::outbound(false, 1, 100, vec![]).with_opts(vec![TcpOptionElement::MaximumSegmentSize(8960)]);
    syn.flags = Flags { syn: true, ..Flags::default() };
    let _ = h.feed_tcp(Port::Inner, &syn);
    let w = check_wire_frame(&h.out.last().unwrap().frame).unwrap();
    assert_eq!(w.mss(), Some(1460), "the SYN toward a legacy destination must be clamped");
    assert_eq!(h.eng.counters().imtu_passed, 0);
}

/// A router outside (not in any verified prefix) reports "too big" about
/// an 8000-byte segment that went untouched to a verified host: the error
/// reaches the inner host (only it can shrink the flow); the same error
/// about a translated flow is the gateway's own and is not passed on.
#[test]
fn a_too_big_about_a_passed_flow_reaches_the_host() {
    use etherparse::{Icmpv4Type, Icmpv6Type, PacketBuilder, icmpv4::DestUnreachableHeader};
    for v6 in [false, true] {
        let shared = SharedImtu::new(16);
        let host = if v6 { "2001:db8:1::1/128" } else { "198.51.100.1/32" };
        shared.publish(table(&[(host, 9000)]));
        let mut h = harness(&shared);
        let seg = TcpSpec::outbound(v6, 0, 101, stream_bytes(2, 0, 8000)).build();
        let quoted = ip_part(&seg).to_vec();
        let (router, inner): (std::net::IpAddr, std::net::IpAddr) = if v6 {
            ("2001:db8:1::99".parse().unwrap(), inner_addr(true, 0))
        } else {
            ("198.51.100.99".parse().unwrap(), inner_addr(false, 0))
        };
        let b = PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER);
        let mut err = Vec::new();
        match (router, inner) {
            (std::net::IpAddr::V4(r), std::net::IpAddr::V4(i)) => b
                .ipv4(r.octets(), i.octets(), 64)
                .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: 1500,
                }))
                .write(&mut err, &quoted[..548])
                .unwrap(),
            (std::net::IpAddr::V6(r), std::net::IpAddr::V6(i)) => b
                .ipv6(r.octets(), i.octets(), 64)
                .icmpv6(Icmpv6Type::PacketTooBig { mtu: 1500 })
                .write(&mut err, &quoted[..1232])
                .unwrap(),
            _ => unreachable!(),
        }
        let v = h.feed(Port::Outer, err.clone(), px_wire::offload::PacketMeta::PLAIN);
        assert!(matches!(v, Verdict::Forward { .. }), "v6 {v6}: {v:?}");
        assert_eq!(h.out.last().unwrap().frame, err);
        // Withdrawn: the same error is the gateway's business again.
        shared.publish(ImtuTable::new(16));
        let v = h.feed(Port::Outer, err, px_wire::offload::PacketMeta::PLAIN);
        assert!(!matches!(v, Verdict::Forward { .. }), "v6 {v6}: {v:?}");
    }
}

/// UDP from a verified neighbour toward an inner prefix that reads
/// caravans is not packed into caravans (it passes as it came); from any
/// other outside host it is packed as before.
#[test]
fn udp_from_a_verified_neighbour_is_not_packed_into_caravans() {
    let shared = SharedImtu::new(16);
    shared.publish(table(&[("198.51.100.0/25", 9000)]));
    let cfg = px_gateway::Config { caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap()], ..test_config() };
    let mut eng = Engine::new(cfg.clone()).unwrap();
    eng.follow_imtu(shared.clone());
    let mut h = Harness::with_engine(cfg, eng);
    let dg = |src: &str| UdpSpec {
        src: src.parse().unwrap(),
        dst: "203.0.113.7".parse().unwrap(),
        sport: 4000,
        dport: 4433,
        df: false,
        ip_id: 1,
        payload: vec![7; 1200],
    };
    let verified = dg("198.51.100.9").build();
    assert!(matches!(
        h.feed(Port::Outer, verified.clone(), px_wire::offload::PacketMeta::PLAIN),
        Verdict::Forward { .. }
    ));
    assert_eq!(h.out.last().unwrap().frame, verified);
    assert_eq!(h.eng.counters().caravan.packed_in, 0);
    // From outside the verified /25: packed (held in a caravan).
    let v = h.feed(Port::Outer, dg("198.51.100.200").build(), px_wire::offload::PacketMeta::PLAIN);
    assert!(!matches!(v, Verdict::Forward { .. }), "{v:?}");
    assert_eq!(h.eng.counters().caravan.packed_in, 1);
}
