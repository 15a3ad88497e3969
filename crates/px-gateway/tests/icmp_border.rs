//! ICMP at a real border (issue 10, items 8, 9 and part of 12): "too big"
//! errors are learned only when they prove they belong to a flow (RFC
//! 5927), from either side, on whichever worker they arrive; the errors the
//! gateway sends follow RFC 1812 §4.3.2.7 / RFC 4443 §2.4; link-local
//! control frames are not bridged; IPv6 routing headers put the final
//! destination in the pseudo-header.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::*;
use etherparse::{
    Icmpv4Type, Icmpv6Type, PacketBuilder, PacketHeaders, TransportHeader, icmpv4::DestUnreachableHeader,
};
use px_gateway::{Config, DropReason, Engine, ICMP_CHECKS_PER_SEC, Port, SharedPmtu, Verdict};

const ISN: u32 = 0x7fff_f000;

/// A router outside (v4/v6) or inside.
fn router(v6: bool, inside: bool) -> IpAddr {
    match (v6, inside) {
        (false, false) => IpAddr::V4([198, 51, 100, 99].into()),
        (false, true) => IpAddr::V4([203, 0, 113, 99].into()),
        (true, false) => "2001:db8:1::99".parse().unwrap(),
        (true, true) => "2001:db8:2::99".parse().unwrap(),
    }
}

/// An ICMP "fragmentation needed" / "packet too big" from `from`, sent by
/// a router on that side to the source of `quoted` (a frame), quoting it.
fn too_big(from: Port, quoted: &[u8], mtu: u32) -> Vec<u8> {
    let h = PacketHeaders::from_ethernet_slice(quoted).unwrap();
    let (v6, to) = match h.net.unwrap() {
        etherparse::NetHeaders::Ipv4(i, _) => (false, IpAddr::V4(i.source.into())),
        etherparse::NetHeaders::Ipv6(i, _) => (true, IpAddr::V6(i.source.into())),
        _ => unreachable!(),
    };
    let q = ip_part(quoted);
    let (dmac, smac) = match from {
        Port::Outer => (MAC_INNER, MAC_OUTER),
        Port::Inner => (MAC_OUTER, MAC_INNER),
    };
    let b = PacketBuilder::ethernet2(smac, dmac);
    let mut v = Vec::new();
    match (router(v6, from == Port::Inner), to) {
        (IpAddr::V4(r), IpAddr::V4(to)) => b
            .ipv4(r.octets(), to.octets(), 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: mtu as u16,
            }))
            .write(&mut v, &q[..q.len().min(548)])
            .unwrap(),
        (IpAddr::V6(r), IpAddr::V6(to)) => b
            .ipv6(r.octets(), to.octets(), 64)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu })
            .write(&mut v, &q[..q.len().min(1232)])
            .unwrap(),
        _ => unreachable!(),
    }
    v
}

fn data_out(v6: bool, seq: u32, len: usize) -> TcpSpec {
    TcpSpec::outbound(v6, 1, seq, stream_bytes(1, seq.wrapping_sub(ISN), len))
}

/// A connection of flow 1 the gateway carries: the outer host's ACK, then
/// one full outbound segment at `ISN` (what a "too big" may quote).
fn connection(h: &mut Harness, v6: bool) -> Vec<u8> {
    assert_ne!(
        h.feed_tcp(Port::Outer, &TcpSpec::inbound(v6, 1, 1, Vec::new())),
        Verdict::Dropped(DropReason::Malformed)
    );
    let seg = data_out(v6, ISN, 1400);
    let _ = h.feed_tcp(Port::Inner, &seg);
    h.check_outputs().unwrap();
    seg.build()
}

/// A router's second error about flow 1: quoting other bytes in flight
/// (the middle of [`connection`]'s segment), which confirms the first.
fn second_too_big(v6: bool, mtu: u32) -> Vec<u8> {
    too_big(Port::Outer, &data_out(v6, ISN + 700, 1400).build(), mtu)
}

/// IP lengths of the TCP data frames sent out of `port` by the next outbound
/// segment of 8000 bytes.
fn next_sizes(h: &mut Harness, v6: bool, seq: u32) -> Vec<usize> {
    let _ = h.feed_tcp(Port::Inner, &data_out(v6, seq, 8000));
    let w = h.check_outputs().unwrap();
    w.iter().filter(|(p, w)| *p == Port::Outer && !w.payload.is_empty()).map(|(_, w)| w.ip_len).collect()
}

#[test]
fn a_spoofed_too_big_for_a_connection_that_never_existed_lowers_nothing() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        // Quotes flow 1 before it exists (no SYN, no data seen).
        let icmp = too_big(Port::Outer, &data_out(v6, ISN, 1400).build(), if v6 { 1280 } else { 576 });
        assert_eq!(h.feed(Port::Outer, icmp, PacketMeta::PLAIN), Verdict::Consumed);
        assert_eq!(h.eng.counters().pmtu_learned, 0, "v6={v6}");
        assert_eq!(h.eng.counters().pmtu_ignored, 1);
        h.check_outputs().unwrap();
        let _ = connection(&mut h, v6);
        let sizes = next_sizes(&mut h, v6, ISN + 1400);
        assert_eq!(sizes[0], 1500, "v6={v6}: still full-sized: {sizes:?}");
    }
}

/// Whether an output frame is an ICMP or ICMPv6 message.
fn is_icmp(frame: &[u8]) -> bool {
    let h = PacketHeaders::from_ethernet_slice(frame).unwrap();
    matches!(h.transport, Some(TransportHeader::Icmpv4(_) | TransportHeader::Icmpv6(_)))
}

/// A "too big" about TCP is the gateway's own business: it sizes every TCP
/// packet it passes (cutting it, or answering a signed flow's segment with
/// its own error once it learned the path MTU), so the error is learned or
/// not, but never passed to the host it is addressed to. Passed on, one
/// blind guess inside the host's window would be believed by the host at
/// once (RFC 5927 §4.1 asks no more of it) and shrink its segments, which
/// the gateway's second-error rule cannot prevent: the hostile-traffic lab
/// test caught a live flow cut to 576 bytes that way, under load.
#[test]
fn a_too_big_about_tcp_never_reaches_the_host() {
    for v6 in [false, true] {
        let mtu = if v6 { 1280 } else { 576 };
        let mut h = Harness::new(test_config());
        // Before the connection exists, then inside its window.
        let early = too_big(Port::Outer, &data_out(v6, ISN, 1400).build(), mtu);
        assert_eq!(h.feed(Port::Outer, early, PacketMeta::PLAIN), Verdict::Consumed, "v6={v6}");
        let quoted = connection(&mut h, v6);
        let v = h.feed(Port::Outer, too_big(Port::Outer, &quoted, mtu), PacketMeta::PLAIN);
        assert_eq!(v, Verdict::Consumed, "v6={v6}: in the window");
        assert_eq!(h.eng.counters().pmtu_unconfirmed, 1);
        // From a router of the b-network, about a segment toward an inner host.
        let toward_inner = TcpSpec::inbound(v6, 1, 1, stream_bytes(1, 0, 8000)).build();
        let v = h.feed(Port::Inner, too_big(Port::Inner, &toward_inner, 4000), PacketMeta::PLAIN);
        assert_eq!(v, Verdict::Consumed, "v6={v6}: from inside");
        assert!(h.out.iter().all(|o| !is_icmp(&o.frame)), "v6={v6}: an error was passed on");
        assert_eq!(h.eng.counters().pmtu_taken, 3, "v6={v6}");
        h.check_accounting().unwrap();
        // The flow's segments are still full-sized: one error proves nothing.
        assert_eq!(next_sizes(&mut h, v6, ISN + 1400)[0], 1500, "v6={v6}");
    }
}

/// The MTU an ICMP "fragmentation needed" / "packet too big" frame reports.
fn reported_mtu(frame: &[u8]) -> Option<u32> {
    match PacketHeaders::from_ethernet_slice(frame).ok()?.transport? {
        TransportHeader::Icmpv4(i) => match i.icmp_type {
            Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded { next_hop_mtu }) => {
                Some(next_hop_mtu.into())
            }
            _ => None,
        },
        TransportHeader::Icmpv6(i) => match i.icmp_type {
            Icmpv6Type::PacketTooBig { mtu } => Some(mtu),
            _ => None,
        },
        _ => None,
    }
}

/// A signed (TCP-MD5) flow cannot be cut. Once two errors about it taught
/// the gateway the path MTU, its segments too big for that path get the
/// gateway's own error with that MTU: its host still learns the path,
/// from an error the gateway validated.
#[test]
fn a_signed_flow_learns_the_path_mtu_from_the_gateway() {
    for v6 in [false, true] {
        let mtu = if v6 { 1280u16 } else { 576 };
        let mut h = Harness::new(test_config());
        let _ = h.feed_tcp(Port::Outer, &TcpSpec::inbound(v6, 1, 1, Vec::new()));
        let seg = |seq: u32| with_raw_options(&data_out(v6, seq, 1400), &signature(19, None));
        let (first, second) = (seg(ISN), seg(ISN + 1400));
        for f in [&first, &second] {
            let v = h.feed(Port::Inner, f.clone(), PacketMeta::PLAIN);
            assert_eq!(v, Verdict::Forward { meta: PacketMeta::PLAIN }, "v6={v6}: signed, within the eMTU");
        }
        h.check_outputs().unwrap();
        for f in [&first, &second] {
            let v = h.feed(Port::Outer, too_big(Port::Outer, f, mtu.into()), PacketMeta::PLAIN);
            assert_eq!(v, Verdict::Consumed, "v6={v6}");
        }
        assert_eq!(h.eng.counters().pmtu_learned, 1, "v6={v6}");
        h.pmtu.insert(outer_addr(v6, 1), mtu);
        let v = h.feed(Port::Inner, seg(ISN + 2800), PacketMeta::PLAIN);
        let want = if v6 { DropReason::TooBigV6 } else { DropReason::TooBigDf };
        assert_eq!(v, Verdict::Dropped(want), "v6={v6}");
        let last = h.out.last().unwrap();
        assert_eq!(last.port, Port::Inner, "v6={v6}: the error goes back to the host");
        assert_eq!(reported_mtu(&last.frame), Some(mtu.into()), "v6={v6}");
        h.check_outputs().unwrap();
        h.check_accounting().unwrap();
    }
}

#[test]
fn a_valid_too_big_lowers_the_flow() {
    for (v6, mtu) in [(false, 576u16), (true, 1280)] {
        let mut h = Harness::new(test_config());
        let quoted = connection(&mut h, v6);
        let _ = h.feed(Port::Outer, too_big(Port::Outer, &quoted, mtu as u32), PacketMeta::PLAIN);
        // One error in the window is what a blind guess can produce: it
        // waits for the router's next one, about other bytes.
        assert_eq!((h.eng.counters().pmtu_learned, h.eng.counters().pmtu_unconfirmed), (0, 1), "v6={v6}");
        let _ = h.feed(Port::Outer, too_big(Port::Outer, &quoted, mtu as u32), PacketMeta::PLAIN);
        assert_eq!(h.eng.counters().pmtu_learned, 0, "v6={v6}: the same bytes again confirm nothing");
        let _ = h.feed(Port::Outer, second_too_big(v6, mtu as u32), PacketMeta::PLAIN);
        assert_eq!(h.eng.counters().pmtu_learned, 1, "v6={v6}");
        h.pmtu.insert(outer_addr(v6, 1), mtu);
        let sizes = next_sizes(&mut h, v6, ISN + 1400);
        assert_eq!(sizes[0], mtu as usize, "v6={v6}: {sizes:?}");
        assert!(sizes.iter().all(|s| *s <= mtu as usize));
        h.oracle.verify().unwrap();
    }
}

#[test]
fn a_sequence_number_outside_the_window_is_not_believed() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let _ = connection(&mut h, v6);
        let mtu = if v6 { 1280 } else { 576 };
        // Never sent (past SND.NXT), and before the first byte seen.
        for seq in [ISN + 1401, ISN + 100_000, ISN - 1, ISN ^ 0x8000_0000] {
            let icmp = too_big(Port::Outer, &data_out(v6, seq, 1400).build(), mtu);
            let _ = h.feed(Port::Outer, icmp, PacketMeta::PLAIN);
        }
        assert_eq!(h.eng.counters().pmtu_learned, 0, "v6={v6}");
        assert_eq!(h.eng.counters().pmtu_ignored, 4);
        // Acknowledged data (below SND.UNA) is not in flight any more.
        let mut ack = TcpSpec::inbound(v6, 1, 1, Vec::new());
        ack.ack = ISN + 1000;
        let _ = h.feed_tcp(Port::Outer, &ack);
        let _ = h.feed(Port::Outer, too_big(Port::Outer, &data_out(v6, ISN, 1400).build(), mtu), PacketMeta::PLAIN);
        assert_eq!(h.eng.counters().pmtu_learned, 0);
        h.check_outputs().unwrap();
        assert_eq!(next_sizes(&mut h, v6, ISN + 1400)[0], 1500);
        // In flight: believed, once a second error confirms it.
        for seq in [ISN + 1400, ISN + 5000] {
            let icmp = too_big(Port::Outer, &data_out(v6, seq, 1400).build(), mtu);
            let _ = h.feed(Port::Outer, icmp, PacketMeta::PLAIN);
        }
        assert_eq!(h.eng.counters().pmtu_learned, 1);
    }
}

/// A blind attacker's chance grows with its guesses: while a stalled flow
/// has megabytes in flight, thousands of spoofed errors put two of them in
/// the window (the hostile-traffic lab test caught the gateway learning 552
/// that way). So a flow's window is checked for at most
/// `ICMP_CHECKS_PER_SEC` errors a second; the rest are not believed. A
/// router's own errors (Linux: a burst of 6, then one a second) fit.
#[test]
fn a_flood_of_guesses_spends_the_flows_checks() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let _ = connection(&mut h, v6);
        let mtu = if v6 { 1280 } else { 576 };
        let err = |seq: u32| too_big(Port::Outer, &data_out(v6, seq, 1400).build(), mtu);
        for k in 0..ICMP_CHECKS_PER_SEC {
            let _ = h.feed(Port::Outer, err(ISN ^ 0x8000_0000 ^ k), PacketMeta::PLAIN);
        }
        // Two in the window, but past this second's checks.
        for seq in [ISN, ISN + 700] {
            assert_eq!(h.feed(Port::Outer, err(seq), PacketMeta::PLAIN), Verdict::Consumed);
        }
        let c = h.eng.counters();
        assert_eq!((c.pmtu_learned, c.pmtu_unconfirmed), (0, 0), "v6={v6}: {c:?}");
        assert_eq!(c.pmtu_ignored, u64::from(ICMP_CHECKS_PER_SEC) + 2, "v6={v6}");
        h.check_outputs().unwrap();
        assert_eq!(next_sizes(&mut h, v6, ISN + 1400)[0], 1500, "v6={v6}");
        // A second later the flow's window is checked again.
        h.advance(Duration::from_secs(1));
        for seq in [ISN + 1400, ISN + 5000] {
            let _ = h.feed(Port::Outer, err(seq), PacketMeta::PLAIN);
        }
        assert_eq!(h.eng.counters().pmtu_learned, 1, "v6={v6}");
    }
}

#[test]
fn an_mtu_not_below_the_quoted_packet_is_not_believed() {
    let mut h = Harness::new(test_config());
    let _ = connection(&mut h, false);
    // The quoted packet was 20 + 32 + 500 = 552 bytes: a router that passed
    // nothing bigger than 1000 did not refuse it.
    let small = data_out(false, ISN, 500).build();
    let _ = h.feed(Port::Outer, too_big(Port::Outer, &small, 1000), PacketMeta::PLAIN);
    assert_eq!(h.eng.counters().pmtu_learned, 0);
    assert_eq!(h.eng.counters().pmtu_ignored, 1);
}

#[test]
fn mtus_below_the_floor_are_clamped() {
    for (v6, told, floor) in [(false, 68u32, 552usize), (false, 0, 552), (true, 600, 1280)] {
        let mut h = Harness::new(test_config());
        let quoted = connection(&mut h, v6);
        let _ = h.feed(Port::Outer, too_big(Port::Outer, &quoted, told), PacketMeta::PLAIN);
        let _ = h.feed(Port::Outer, second_too_big(v6, told), PacketMeta::PLAIN);
        assert_eq!(h.eng.counters().pmtu_learned, 1, "v6={v6} told {told}");
        h.pmtu.insert(outer_addr(v6, 1), floor as u16);
        let sizes = next_sizes(&mut h, v6, ISN + 1400);
        assert_eq!(sizes[0], floor, "v6={v6} told {told}: {sizes:?}");
    }
}

#[test]
fn too_big_about_udp_is_passed_on_and_not_learned() {
    let mut h = Harness::new(test_config());
    let _ = connection(&mut h, false);
    let udp = UdpSpec {
        src: inner_addr(false, 1),
        dst: outer_addr(false, 1),
        sport: 443,
        dport: 40_001,
        df: true,
        ip_id: 1,
        payload: vec![0; 1400],
    };
    let v = h.feed(Port::Outer, too_big(Port::Outer, &udp.build(), 576), PacketMeta::PLAIN);
    assert_eq!(v, Verdict::Forward { meta: PacketMeta::PLAIN }, "the sender's stack judges it");
    assert_eq!(h.eng.counters().pmtu_learned, 0);
}

#[test]
fn too_big_from_the_inner_side_limits_merges_toward_that_host() {
    let mut h = Harness::new(Config { bulk_after: 0, ..test_config() });
    announce_inner_mss(&mut h, false, 1, 1);
    let seg = |i: u32| TcpSpec::inbound(false, 1, 1 + i * 1448, stream_bytes(1, i * 1448, 1448));
    for i in 0..6 {
        let _ = h.feed_tcp(Port::Outer, &seg(i));
    }
    h.flush_all();
    let merged: Vec<_> = h.check_outputs().unwrap().into_iter().filter(|(p, _)| *p == Port::Inner).collect();
    assert!(merged.iter().any(|(_, w)| w.ip_len > 4000), "merging to the iMTU first");
    // A router of the b-network refuses a merged segment: MTU 4000 toward
    // the inner host, quoting it (src outer host, dst inner host).
    let quoted = TcpSpec::inbound(false, 1, 1, stream_bytes(1, 0, 8000)).build();
    let _ = h.feed(Port::Inner, too_big(Port::Inner, &quoted, 4000), PacketMeta::PLAIN);
    let again = TcpSpec::inbound(false, 1, 1 + 1448, stream_bytes(1, 1448, 7000)).build();
    let _ = h.feed(Port::Inner, too_big(Port::Inner, &again, 4000), PacketMeta::PLAIN);
    assert_eq!(h.eng.counters().pmtu_learned, 1);
    for i in 6..20 {
        let _ = h.feed_tcp(Port::Outer, &seg(i));
    }
    h.flush_all();
    let sizes: Vec<usize> =
        h.check_outputs().unwrap().iter().filter(|(p, _)| *p == Port::Inner).map(|(_, w)| w.ip_len).collect();
    assert!(sizes.iter().all(|s| *s <= 4000), "{sizes:?}");
    assert!(sizes.iter().any(|s| *s > 1500), "still merged: {sizes:?}");
    h.oracle.verify().unwrap();
    // Toward the outside nothing changed.
    let _ = h.feed_tcp(Port::Inner, &data_out(false, ISN, 1400));
    assert!(h.check_outputs().unwrap().iter().any(|(p, w)| *p == Port::Outer && w.ip_len > 1400));
}

#[test]
fn two_workers_share_what_either_learned() {
    let cfg = test_config();
    let shared = SharedPmtu::new(cfg.pmtu_cache_size, cfg.pmtu_lifetime);
    // Worker B carries the flow; the errors reach worker A.
    let mut b = Harness::new(cfg.clone());
    b.eng = Engine::with_shared_pmtu(cfg.clone(), shared.clone()).unwrap();
    let mut a = Engine::with_shared_pmtu(cfg, shared).unwrap();
    let quoted = connection(&mut b, false);
    let now = b.now;
    let feed_a = |a: &mut Engine, mut f: Vec<u8>| {
        let v = a.handle_packet(now, Port::Outer, &mut f, PacketMeta::PLAIN);
        assert_eq!(v, Verdict::Consumed, "validated by B or not, never passed to the host");
        assert!(a.poll_transmit().is_none());
    };
    // Spoofed: a sequence number B never sent.
    feed_a(&mut a, too_big(Port::Outer, &data_out(false, ISN + 50_000, 1400).build(), 576));
    assert_eq!(next_sizes(&mut b, false, ISN + 1400)[0], 1500, "not believed by either");
    assert_eq!(a.counters().pmtu_passed_on, 1);
    assert_eq!(a.counters().pmtu_learned + b.eng.counters().pmtu_learned, 0);
    // Valid: B validates both errors before its next segment leaves.
    feed_a(&mut a, too_big(Port::Outer, &quoted, 576));
    feed_a(&mut a, second_too_big(false, 576));
    b.pmtu.insert(outer_addr(false, 1), 576);
    let sizes = next_sizes(&mut b, false, ISN + 9400);
    assert_eq!(sizes[0], 576, "{sizes:?}");
    assert_eq!(b.eng.counters().pmtu_learned, 1);
    b.oracle.verify().unwrap();
}

// ---- ICMP errors the gateway sends -----------------------------------------

/// A DF frame too big for the outer port, from inside, with the given
/// addresses, destination MAC and IP payload (protocol `proto`).
fn too_big_frame(src: IpAddr, dst: IpAddr, dmac: [u8; 6]) -> Vec<u8> {
    let mut f = UdpSpec { src, dst, sport: 1, dport: 2, df: true, ip_id: 9, payload: vec![0; 3000] }.build();
    f[..6].copy_from_slice(&dmac);
    f
}

/// The ICMP errors sent back by one frame fed from inside.
fn errors_for(h: &mut Harness, f: Vec<u8>) -> Vec<Out> {
    let v = h.feed(Port::Inner, f, PacketMeta::PLAIN);
    assert!(matches!(v, Verdict::Dropped(DropReason::TooBigDf | DropReason::TooBigV6)), "{v:?}");
    h.take().into_iter().filter(|o| o.port == Port::Inner).collect()
}

#[test]
fn errors_are_never_about_multicast_broadcast_or_non_unicast_sources() {
    let uni4 = inner_addr(false, 1);
    let out4 = outer_addr(false, 1);
    let v4 = |s: &str| -> IpAddr { s.parse().unwrap() };
    let none = [
        (uni4, v4("224.0.0.5"), MAC_OUTER),
        (uni4, v4("239.1.2.3"), MAC_OUTER),
        (uni4, v4("240.0.0.1"), MAC_OUTER),
        (uni4, v4("255.255.255.255"), MAC_OUTER),
        (uni4, out4, [0xff; 6]),
        (uni4, out4, [0x01, 0x00, 0x5e, 0, 0, 5]),
        (v4("0.0.0.0"), out4, MAC_OUTER),
        (v4("127.0.0.1"), out4, MAC_OUTER),
        (v4("224.1.1.1"), out4, MAC_OUTER),
        (v4("240.0.0.1"), out4, MAC_OUTER),
        (v4("::"), outer_addr(true, 1), MAC_OUTER),
        (v4("ff02::1"), outer_addr(true, 1), MAC_OUTER),
        (v4("::1"), outer_addr(true, 1), MAC_OUTER),
    ];
    let mut h = Harness::new(test_config());
    for (i, (s, d, mac)) in none.iter().enumerate() {
        assert!(errors_for(&mut h, too_big_frame(*s, *d, *mac)).is_empty(), "{s} -> {d} via {mac:02x?}");
        assert_eq!(h.eng.counters().icmp_suppressed, i as u64 + 1);
    }
    // Unicast to unicast is answered; so is IPv6 to multicast (RFC 4443
    // §2.4(e.2): "packet too big" is the exception).
    assert_eq!(errors_for(&mut h, too_big_frame(uni4, out4, MAC_OUTER)).len(), 1);
    let to_group = too_big_frame(inner_addr(true, 1), v4("ff0e::1:3"), [0x33, 0x33, 0, 1, 0, 3]);
    assert_eq!(errors_for(&mut h, to_group).len(), 1);
    assert_eq!(h.eng.counters().icmp_sent, 2);
}

#[test]
fn errors_are_never_about_icmp_errors_or_later_fragments() {
    let mut h = Harness::new(test_config());
    let (s, d) = (inner_addr(false, 1), outer_addr(false, 1));
    let icmp = |t: Icmpv4Type| {
        let mut v = Vec::new();
        let mut ip =
            etherparse::Ipv4Header::new(0, 64, etherparse::IpNumber::ICMP, [203, 0, 113, 2], [198, 51, 100, 2])
                .unwrap();
        ip.dont_fragment = true;
        PacketBuilder::ethernet2(MAC_INNER, MAC_OUTER)
            .ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
            .icmpv4(t)
            .write(&mut v, &[0u8; 3000])
            .unwrap();
        v
    };
    let unreachable = icmp(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Host));
    assert!(errors_for(&mut h, unreachable).is_empty(), "about an ICMP error");
    let echo = icmp(Icmpv4Type::EchoRequest(etherparse::IcmpEchoHeader { id: 1, seq: 1 }));
    assert_eq!(errors_for(&mut h, echo).len(), 1, "an echo request is answered");
    // A later IPv4 fragment with DF (odd, but possible).
    let mut frag = too_big_frame(s, d, MAC_OUTER);
    frag[14 + 6..14 + 8].copy_from_slice(&(0x4000u16 | 185).to_be_bytes());
    frag[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
    let c = !ones_complement(&frag[14..34], 0);
    frag[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
    assert!(errors_for(&mut h, frag).is_empty(), "a non-first fragment");
    // A later IPv6 fragment (Fragment header, offset 1480).
    let (s6, d6) = (inner_addr(true, 1), outer_addr(true, 1));
    let mut f6 = too_big_frame(s6, d6, MAC_OUTER);
    // Offset 185 × 8 bytes in the top 13 bits, M clear.
    let o = (185u16 << 3).to_be_bytes();
    let frag_hdr = [17u8, 0, o[0], o[1], 0, 0, 0, 7];
    f6[14 + 6] = 44;
    f6.splice(14 + 40..14 + 40, frag_hdr);
    let plen = u16::from_be_bytes([f6[18], f6[19]]) + 8;
    f6[18..20].copy_from_slice(&plen.to_be_bytes());
    assert!(errors_for(&mut h, f6).is_empty(), "a non-first IPv6 fragment");
    assert_eq!(h.eng.counters().icmp_suppressed, 3);
}

#[test]
fn errors_count_their_ip_id_up_with_df_clear_and_ttl_64() {
    let mut h = Harness::new(test_config());
    let mut ids = Vec::new();
    for _ in 0..3 {
        let e = errors_for(&mut h, too_big_frame(inner_addr(false, 1), outer_addr(false, 1), MAC_OUTER));
        let p = PacketHeaders::from_ethernet_slice(&e[0].frame).unwrap();
        let Some(etherparse::NetHeaders::Ipv4(ip, _)) = p.net else { panic!() };
        assert!(!ip.dont_fragment, "RFC 1812: DF clear, as Linux sends its ICMP errors");
        assert_eq!(ip.time_to_live, 64);
        assert!(matches!(p.transport, Some(TransportHeader::Icmpv4(_))));
        ids.push(ip.identification);
    }
    assert_ne!(ids[0], 0);
    assert_eq!([ids[1], ids[2]], [ids[0].wrapping_add(1), ids[0].wrapping_add(2)], "{ids:?}");
    // The workers of one gateway (one seed, one source address) start apart.
    let shared = SharedPmtu::new(16, std::time::Duration::from_secs(600));
    let firsts: Vec<u16> = (0..2)
        .map(|_| {
            let mut h = Harness::new(test_config());
            h.eng = Engine::with_shared_pmtu(test_config(), shared.clone()).unwrap();
            let e = errors_for(&mut h, too_big_frame(inner_addr(false, 1), outer_addr(false, 1), MAC_OUTER));
            u16::from_be_bytes([e[0].frame[14 + 4], e[0].frame[14 + 5]])
        })
        .collect();
    assert!(firsts[0] != firsts[1] && !firsts.contains(&0), "{firsts:?}");
}

// ---- not bridged -------------------------------------------------------------

#[test]
fn link_local_control_frames_are_not_bridged() {
    let mut h = Harness::new(test_config());
    for (last, ethertype, port) in [
        (0x00u8, 0x0026u16, Port::Outer),
        (0x02, 0x8809, Port::Inner),
        (0x0e, 0x88cc, Port::Outer),
        (0x03, 0x888e, Port::Inner),
    ] {
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(&[0x01, 0x80, 0xc2, 0, 0, last]);
        f[6..12].copy_from_slice(&MAC_OUTER);
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        assert_eq!(
            h.feed(port, f, PacketMeta::PLAIN),
            Verdict::Dropped(DropReason::LinkLocal),
            "01:80:c2:00:00:{last:02x}"
        );
    }
    assert_eq!(h.eng.counters().drops(DropReason::LinkLocal), 4);
    // 01:80:C2:00:00:10 and up are not reserved: passed on as any non-IP frame.
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&[0x01, 0x80, 0xc2, 0, 0, 0x10]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    assert_eq!(h.feed(Port::Outer, f, PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    // Frames the I/O layer saw addressed to this host.
    assert_eq!(h.eng.handle_for_host(Port::Outer, 60), Verdict::Dropped(DropReason::ForHost));
    assert_eq!(DropReason::ForHost.name(), "for_host");
}

// ---- IPv6 routing headers ----------------------------------------------------

#[test]
fn a_split_segment_with_a_routing_header_sums_over_the_final_destination() {
    // Outbound TCP/IPv6 with a segment routing header (segments left 1,
    // final destination outer host 2) too big for the outer port.
    let (src, via, fin) = match (inner_addr(true, 1), outer_addr(true, 1), outer_addr(true, 2)) {
        (IpAddr::V6(a), IpAddr::V6(b), IpAddr::V6(c)) => (a, b, c),
        _ => unreachable!(),
    };
    let payload = stream_bytes(1, 0, 4000);
    let mut tcp = etherparse::TcpHeader::new(80, 40_001, ISN, 1000);
    tcp.ack = true;
    tcp.acknowledgment_number = 1;
    tcp.checksum = tcp.calc_checksum_ipv6_raw(src.octets(), fin.octets(), &payload).unwrap();
    let mut srh = vec![6u8, 4, 4, 1, 1, 0, 0, 0];
    srh.extend(fin.octets());
    srh.extend(via.octets());
    let plen = (srh.len() + tcp.header_len() + payload.len()) as u16;
    let mut f = Vec::new();
    f.extend(MAC_OUTER);
    f.extend(MAC_INNER);
    f.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend(plen.to_be_bytes());
    f.extend([43, 64]);
    f.extend(src.octets());
    f.extend(via.octets());
    f.extend(&srh);
    f.extend(tcp.to_bytes());
    f.extend(&payload);
    let mut h = Harness::new(Config { outer_gso: false, ..test_config() });
    assert_eq!(h.feed(Port::Inner, f, PacketMeta::PLAIN), Verdict::Consumed);
    let out = h.take();
    assert!(out.len() >= 3);
    let mut got = Vec::new();
    for o in &out {
        let l4 = 14 + 40 + srh.len();
        let seg = &o.frame[l4..];
        assert!(o.frame.len() - 14 <= 1500);
        // Verified over the final destination, as the receiver will.
        let mut ps = 0u32;
        for w in src.octets().chunks(2).chain(fin.octets().chunks(2)) {
            ps += u16::from_be_bytes([w[0], w[1]]) as u32;
        }
        ps += 6 + seg.len() as u32;
        assert_eq!(ones_complement(seg, ps), 0xffff, "piece checksum over the final destination");
        got.extend_from_slice(&seg[20..]);
    }
    assert_eq!(got, payload);
}

/// Issue 27, "likely" (c): the "too big" errors one inner host causes
/// come out of its own bucket, beside the engine's bucket for all (as
/// Linux keeps one per destination, `inet_peer`, beside the global
/// `icmp_msgs_per_sec`), so one host flooding oversized DF packets cannot
/// use up the errors another host's path MTU discovery depends on. (A
/// host whose source hashes to the flooder's slot of the fixed table
/// shares its bucket: one in 256; so of eight others, seven at least.)
#[test]
fn one_flooding_host_cannot_starve_another_of_errors() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let dst = outer_addr(v6, 1);
        let flood = |h: &mut Harness, host: u16| {
            for _ in 0..500 {
                let _ = errors_for(h, too_big_frame(inner_addr(v6, host), dst, MAC_OUTER));
            }
        };
        let answered = |h: &mut Harness, hosts: std::ops::Range<u16>| {
            hosts.filter(|&n| errors_for(h, too_big_frame(inner_addr(v6, n), dst, MAC_OUTER)).len() == 1).count()
        };
        flood(&mut h, 1);
        assert!(h.eng.counters().icmp_rate_limited > 0, "v6={v6}: the flooder is limited");
        assert!(answered(&mut h, 10..18) >= 7, "v6={v6}: {:?}", h.eng.counters());
        // Nor can two flooders together: each spends its own share only.
        let mut h = Harness::new(test_config());
        flood(&mut h, 2);
        flood(&mut h, 3);
        assert!(answered(&mut h, 20..28) >= 7, "v6={v6}: {:?}", h.eng.counters());
    }
}
