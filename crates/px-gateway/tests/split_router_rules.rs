//! Outbound split, MSS rewriting, learned path MTU, router behaviour for
//! non-TCP packets, and the bounds on state (issue 2), one test per rule.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::*;
use etherparse::{
    Icmpv4Type, Icmpv6Type, IpNumber, PacketBuilder, PacketHeaders, TcpOptionElement, TransportHeader,
    icmpv4::DestUnreachableHeader,
};
use px_gateway::{Config, DropReason, FlushReason, Port, Verdict};

const ISN: u32 = 0x7fff_f000;

fn big_out(v6: bool, n: u16, len: usize) -> TcpSpec {
    TcpSpec::outbound(v6, n, ISN, stream_bytes(n as u32, 0, len)).ts(500, 600)
}

fn split_like_tso(v6: bool) {
    let mut h = Harness::new(test_config());
    let imss = if v6 { 8928 } else { 8948 };
    let omss = if v6 { 1428 } else { 1448 };
    let mut s = big_out(v6, 1, imss);
    s.flags = Flags { ack: true, psh: true, fin: true, cwr: true, ece: true, ..Flags::default() };
    s.ip_id = 0xfffe; // wraps while counting up
    assert_eq!(h.feed_tcp(Port::Inner, &s), Verdict::Consumed);
    let w = h.check_outputs().unwrap();
    h.oracle.verify().unwrap();
    h.check_accounting().unwrap();
    let n = imss.div_ceil(omss);
    assert_eq!(w.len(), n);
    for (i, (port, w)) in w.iter().enumerate() {
        assert_eq!(*port, Port::Outer);
        let t = w.tcp().unwrap();
        assert_eq!(t.sequence_number, ISN.wrapping_add((i * omss) as u32), "piece {i}");
        assert_eq!(w.payload.len(), omss.min(imss - i * omss));
        assert_eq!(t.fin, i == n - 1, "FIN on the last piece only");
        assert_eq!(t.psh, i == n - 1, "PSH on the last piece only");
        assert_eq!(t.cwr, i == 0, "CWR on the first piece only");
        assert!(t.ece && t.ack);
        assert_eq!(w.ts(), Some((500, 600)));
        if let Some(ip) = w.v4() {
            assert_eq!(ip.identification, 0xfffeu16.wrapping_add(i as u16), "IP IDs count up");
            assert!(ip.dont_fragment);
        }
        assert!(w.ip_len <= 1500);
    }
    assert_eq!(h.eng.counters().split_out, n as u64);
}

#[test]
fn split_cuts_like_tso_v4() {
    split_like_tso(false);
}

#[test]
fn split_cuts_like_tso_v6() {
    split_like_tso(true);
}

/// With `outer_gso`, the frame leaves whole with GSO metadata; cut by the
/// rules of virtio GSO it gives exactly the frames the software split gives.
#[test]
fn gso_output_cut_by_virtio_rules_equals_the_software_split() {
    for v6 in [false, true] {
        for vlan in [None, Some(7)] {
            let mut s = big_out(v6, 1, 20_000);
            s.vlan = vlan;
            s.flags = Flags { ack: true, psh: true, cwr: true, ..Flags::default() };
            let mut soft = Harness::new(test_config());
            assert_eq!(soft.feed_tcp(Port::Inner, &s), Verdict::Consumed);
            let mut gso = Harness::new(Config { outer_gso: true, ..test_config() });
            let v = gso.feed_tcp(Port::Inner, &s);
            let Verdict::Forward { meta: g @ PacketMeta { gso: Some(_), .. } } = v else { panic!("{v:?}") };
            assert_eq!(g.gso.map(|g| g.size), Some(if v6 { 1428 } else { 1448 }));
            let cut = soft_gso(&gso.out[0].frame, &g).unwrap();
            let sw: Vec<Vec<u8>> = soft.out.iter().map(|o| o.frame.clone()).collect();
            assert_eq!(cut.len(), sw.len());
            for (i, (a, b)) in cut.iter().zip(&sw).enumerate() {
                assert_eq!(a, b, "v6={v6} vlan={vlan:?} segment {i}");
            }
            gso.check_outputs().unwrap();
            gso.oracle.verify().unwrap();
            gso.check_accounting().unwrap();
            assert_eq!(gso.eng.counters().gso_out, 1);
        }
    }
}

#[test]
fn small_outbound_segments_pass_unchanged() {
    let mut h = Harness::new(test_config());
    let f = big_out(false, 1, 1448).build();
    assert_eq!(h.feed(Port::Inner, f.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.out[0].frame, f);
}

fn syn(from_outside: bool, v6: bool, mss: Option<u16>, ack: bool) -> TcpSpec {
    let mut s = if from_outside { TcpSpec::inbound(v6, 1, 100, vec![]) } else { TcpSpec::outbound(v6, 1, 100, vec![]) };
    let mut o = vec![];
    if let Some(m) = mss {
        o.push(TcpOptionElement::MaximumSegmentSize(m));
    }
    o.extend([TcpOptionElement::SelectiveAcknowledgementPermitted, TcpOptionElement::WindowScale(7)]);
    o.extend([TcpOptionElement::Noop, TcpOptionElement::Timestamp(1, 0)]);
    s.opts = o;
    s.flags = Flags { syn: true, ack, ..Flags::default() };
    s
}

/// The outer host's SYN (or, when the inner host connects, its SYN-ACK)
/// has its MSS raised; the inner host's SYN-ACK (or SYN) has its MSS
/// clamped. A SYN-ACK from outside answers the inner host's SYN (it
/// acknowledges sequence 100), so the inner host's SYN comes first then.
#[test]
fn mss_raised_inbound_and_clamped_outbound() {
    for v6 in [false, true] {
        for ack in [false, true] {
            let mut h = Harness::new(test_config());
            let (imss, omss) = if v6 { (8940, 1440) } else { (8960, 1460) };
            let mut outer = syn(true, v6, Some(omss), ack);
            outer.ack = 101;
            let inner = syn(false, v6, Some(imss), !ack);
            let mut want = vec![(Port::Inner, Some(imss)), (Port::Outer, Some(omss))];
            if ack {
                let _ = h.feed_tcp(Port::Inner, &inner);
                let _ = h.feed_tcp(Port::Outer, &outer);
                want.reverse();
            } else {
                let _ = h.feed_tcp(Port::Outer, &outer);
                let _ = h.feed_tcp(Port::Inner, &inner);
            }
            // Already large enough / small enough: left alone.
            let mut again = syn(true, v6, Some(9000), ack);
            again.ack = 101;
            let _ = h.feed_tcp(Port::Outer, &again);
            let _ = h.feed_tcp(Port::Inner, &syn(false, v6, Some(1000), !ack));
            let w = h.check_outputs().unwrap();
            let m: Vec<_> = w.iter().map(|(p, w)| (*p, w.mss())).collect();
            want.extend([(Port::Inner, Some(9000)), (Port::Outer, Some(1000))]);
            assert_eq!(m, want, "v6={v6} ack={ack}");
            // Other options survive the rewrite.
            let t = w[0].1.tcp().unwrap();
            assert!(t.options_iterator().any(|o| o == Ok(TcpOptionElement::WindowScale(7))));
            assert!(t.options_iterator().any(|o| o == Ok(TcpOptionElement::SelectiveAcknowledgementPermitted)));
            let c = h.eng.counters();
            assert_eq!((c.mss_raised, c.mss_clamped), (1, 1));
            h.check_accounting().unwrap();
        }
    }
}

#[test]
fn syn_without_mss_is_left_alone_and_counted() {
    let mut h = Harness::new(test_config());
    let a = syn(true, false, None, false).build();
    let b = syn(false, true, None, true).build();
    assert_eq!(h.feed(Port::Outer, a.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.feed(Port::Inner, b.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.out[0].frame, a);
    assert_eq!(h.out[1].frame, b);
    assert_eq!(h.eng.counters().syn_without_mss, 2);
}

#[test]
fn outer_hosts_mss_limits_the_split() {
    let mut h = Harness::new(test_config());
    let _ = h.feed_tcp(Port::Outer, &syn(true, false, Some(1200), false));
    let _ = h.feed_tcp(Port::Inner, &big_out(false, 1, 8000));
    let w = h.check_outputs().unwrap();
    let sizes: Vec<usize> = w.iter().skip(1).map(|(_, w)| w.payload.len()).collect();
    // 1200 less the 12 bytes of timestamp option (RFC 6691).
    assert!(sizes.iter().all(|s| *s <= 1188), "{sizes:?}");
    assert_eq!(sizes[0], 1188);
}

/// ICMP "fragmentation needed" (v4) / "packet too big" (v6) from outside
/// about a packet toward `dst`, quoting the offending packet.
fn too_big_from_outside(v6: bool, dst: IpAddr, mtu: u32) -> Vec<u8> {
    too_big_quoting(v6, dst, mtu, 0)
}

/// The same, quoting the segment at stream offset `off` (a router's next
/// error quotes the next packet it refused).
fn too_big_quoting(v6: bool, dst: IpAddr, mtu: u32, off: u32) -> Vec<u8> {
    let quoted = TcpSpec::outbound(v6, 1, ISN.wrapping_add(off), stream_bytes(1, off, 1400)).ts(500, 600);
    let q = quoted.build();
    let router = if v6 { "2001:db8:1::99".parse().unwrap() } else { IpAddr::V4([198, 51, 100, 99].into()) };
    let mut v = Vec::new();
    let b = PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER);
    match (router, quoted.src, dst) {
        (IpAddr::V4(r), IpAddr::V4(to), _) => b
            .ipv4(r.octets(), to.octets(), 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: mtu as u16,
            }))
            .write(&mut v, &ip_part(&q)[..28])
            .unwrap(),
        (IpAddr::V6(r), IpAddr::V6(to), _) => b
            .ipv6(r.octets(), to.octets(), 64)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu })
            .write(&mut v, &ip_part(&q)[..1000])
            .unwrap(),
        _ => unreachable!(),
    }
    v
}

#[test]
fn icmp_too_big_from_outside_lowers_the_split_size() {
    for (v6, mtu) in [(false, 1400u16), (true, 1280)] {
        let mut h = Harness::new(test_config());
        let dst = outer_addr(v6, 1);
        // The quoted packet must be of a flow the gateway carries, inside
        // its window (RFC 5927): the connection, then the quoted segment.
        let _ = h.feed_tcp(Port::Outer, &TcpSpec::inbound(v6, 1, 1, Vec::new()));
        let _ = h.feed_tcp(Port::Inner, &big_out(v6, 1, 1400));
        h.check_outputs().unwrap();
        // Taken by the gateway, which cuts the flow itself: not passed on.
        let icmp = too_big_from_outside(v6, dst, mtu as u32);
        assert_eq!(h.feed(Port::Outer, icmp, PacketMeta::PLAIN), Verdict::Consumed);
        assert_eq!(h.eng.counters().pmtu_learned, 0, "one error waits for a second");
        let icmp = too_big_quoting(v6, dst, mtu as u32, 700);
        assert_eq!(h.feed(Port::Outer, icmp, PacketMeta::PLAIN), Verdict::Consumed);
        assert_eq!(h.eng.counters().pmtu_learned, 1);
        h.pmtu.insert(dst, mtu);
        let _ = h.feed_tcp(Port::Inner, &big_out(v6, 1, 8000));
        let w = h.check_outputs().unwrap();
        let data: Vec<_> = w.iter().filter(|(p, _)| *p == Port::Outer).collect();
        assert!(data.iter().all(|(_, w)| w.ip_len <= mtu as usize));
        assert_eq!(data[0].1.ip_len, mtu as usize, "pieces fill the learned MTU");
        h.oracle.verify().unwrap();
        // Another destination is not affected.
        h.out.clear();
        let mut other = big_out(v6, 2, 3000);
        other.dst = outer_addr(v6, 2);
        let _ = h.feed_tcp(Port::Inner, &other);
        let w = h.check_outputs().unwrap();
        assert_eq!(w[0].1.ip_len, 1500);
        // RFC 1191 §6.3: the estimate is forgotten after 10 minutes.
        h.out.clear();
        h.advance(Duration::from_secs(601));
        h.pmtu.clear();
        let _ = h.feed_tcp(Port::Inner, &big_out(v6, 1, 3000));
        let w = h.check_outputs().unwrap();
        assert_eq!(w[0].1.ip_len, 1500, "v6={v6}: expired");
    }
}

#[test]
fn implausible_or_corrupt_icmp_teaches_nothing() {
    let mut h = Harness::new(test_config());
    let dst = outer_addr(false, 1);
    let _ = h.feed(Port::Outer, too_big_from_outside(false, dst, 500), PacketMeta::PLAIN);
    let _ = h.feed(Port::Outer, too_big_from_outside(true, outer_addr(true, 1), 1200), PacketMeta::PLAIN);
    let mut bad = too_big_from_outside(false, dst, 1400);
    let n = bad.len();
    bad[n - 1] ^= 0x40; // breaks the ICMP checksum
    assert_eq!(
        h.feed(Port::Outer, bad, PacketMeta::PLAIN),
        Verdict::Forward { meta: PacketMeta::PLAIN },
        "passed on as a router would"
    );
    assert_eq!(h.eng.counters().pmtu_learned, 0);
    h.out.clear();
    let _ = h.feed_tcp(Port::Inner, &big_out(false, 1, 3000));
    assert!(h.check_outputs().unwrap().iter().any(|(_, w)| w.ip_len == 1500));
}

fn udp(v6: bool, from_inside: bool, len: usize, df: bool) -> UdpSpec {
    let (src, dst) =
        if from_inside { (inner_addr(v6, 3), outer_addr(v6, 3)) } else { (outer_addr(v6, 3), inner_addr(v6, 3)) };
    UdpSpec { src, dst, sport: 5000, dport: 6000, df, ip_id: 0x4242, payload: stream_bytes(3, 0, len) }
}

#[test]
fn ipv4_without_df_is_fragmented_and_reassembles() {
    for len in [1473usize, 4000, 8972] {
        let mut h = Harness::new(test_config());
        let frame = udp(false, true, len, false).build();
        let original = ip_part(&frame)[20..].to_vec();
        assert_eq!(h.feed(Port::Inner, frame, PacketMeta::PLAIN), Verdict::Consumed);
        let w = h.check_outputs().unwrap();
        let mut data = vec![None; original.len()];
        let mut last_seen = false;
        for (p, w) in &w {
            assert_eq!(*p, Port::Outer);
            assert!(w.ip_len <= 1500);
            let ip = w.v4().unwrap();
            assert_eq!(ip.identification, 0x4242);
            assert!(!ip.dont_fragment);
            assert_eq!(ip.protocol, IpNumber::UDP);
            let off = ip.fragment_offset.byte_offset() as usize;
            if ip.more_fragments {
                assert_eq!(w.payload.len() % 8, 0, "non-last fragments carry multiples of 8");
            } else {
                last_seen = true;
            }
            let payload = fragment_payload(w);
            for (i, b) in payload.iter().enumerate() {
                assert!(data[off + i].is_none(), "overlapping fragments");
                data[off + i] = Some(*b);
            }
        }
        assert!(last_seen);
        let got: Vec<u8> = data.into_iter().map(|b| b.expect("hole in the reassembly")).collect();
        assert_eq!(got, original, "len {len}");
        let c = h.eng.counters();
        assert_eq!((c.fragmented_in, c.fragments_out), (1, w.len() as u64));
        h.check_accounting().unwrap();
    }
}

/// The IP payload of a fragment as etherparse sees it.
fn fragment_payload(w: &Wire) -> Vec<u8> {
    // A first fragment of UDP may be parsed with a UDP header by etherparse;
    // rebuild the IP payload from what it reports.
    match &w.transport {
        Some(TransportHeader::Udp(u)) => [&u.to_bytes()[..], &w.payload].concat(),
        _ => w.payload.clone(),
    }
}

#[test]
fn too_big_with_df_or_ipv6_is_dropped_with_an_icmp_error() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let frame = udp(v6, true, 3000, true).build();
        let v = h.feed(Port::Inner, frame.clone(), PacketMeta::PLAIN);
        let want = if v6 { DropReason::TooBigV6 } else { DropReason::TooBigDf };
        assert_eq!(v, Verdict::Dropped(want));
        assert_eq!(h.eng.counters().drops(want), 1);
        let w = h.check_outputs().unwrap();
        assert_eq!(w.len(), 1);
        let (port, e) = &w[0];
        assert_eq!(*port, Port::Inner, "the error goes back where the packet came from");
        let (src, dst) = e.src_dst();
        assert_eq!(dst, inner_addr(v6, 3));
        match (&e.transport, src) {
            (Some(TransportHeader::Icmpv4(i)), IpAddr::V4(s)) => {
                assert_eq!(s, h.cfg.icmp_source_v4.unwrap());
                assert_eq!(
                    i.icmp_type,
                    Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                        next_hop_mtu: 1500
                    })
                );
                assert!(e.ip_len <= 576);
            }
            (Some(TransportHeader::Icmpv6(i)), IpAddr::V6(s)) => {
                assert_eq!(s, h.cfg.icmp_source_v6.unwrap());
                assert_eq!(i.icmp_type, Icmpv6Type::PacketTooBig { mtu: 1500 });
                assert!(e.ip_len <= 1280);
            }
            t => panic!("{t:?}"),
        }
        assert_eq!(&e.payload[..40.min(e.payload.len())], &ip_part(&frame)[..40], "quotes the offending packet");
        assert_eq!(h.eng.counters().icmp_sent, 1);
    }
}

#[test]
fn icmp_errors_are_rate_limited_and_need_a_source() {
    let mut h = Harness::new(test_config());
    for _ in 0..50 {
        let _ = h.feed(Port::Inner, udp(false, true, 3000, true).build(), PacketMeta::PLAIN);
    }
    let c = h.eng.counters().clone();
    assert_eq!(c.drops(DropReason::TooBigDf), 50, "every drop counted");
    assert_eq!(c.icmp_sent, 11, "burst of rate/10 + 1");
    assert_eq!(c.icmp_rate_limited, 39);
    h.advance(Duration::from_millis(100));
    let _ = h.feed(Port::Inner, udp(false, true, 3000, true).build(), PacketMeta::PLAIN);
    assert_eq!(h.eng.counters().icmp_sent, 12, "refilled");
    h.check_outputs().unwrap();

    let mut h = Harness::new(Config { icmp_source_v4: None, icmp_source_v6: None, ..test_config() });
    let _ = h.feed(Port::Inner, udp(true, true, 3000, true).build(), PacketMeta::PLAIN);
    assert!(h.out.is_empty());
    assert_eq!(h.eng.counters().icmp_no_source, 1);
    assert_eq!(h.eng.counters().drops(DropReason::TooBigV6), 1);
}

#[test]
fn udp_that_fits_passes_intact() {
    let mut h = Harness::new(test_config());
    let a = udp(false, false, 1472, true).build();
    let b = udp(true, true, 1452, false).build();
    assert_eq!(h.feed(Port::Outer, a.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.feed(Port::Inner, b.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!((&h.out[0].frame, &h.out[1].frame), (&a, &b));
    h.check_outputs().unwrap();
}

/// Makes flow `n` bulk and leaves one segment held in it (after the inner
/// host's SYN-ACK: flows whose MSS is unknown merge only to the safe size).
fn hold_one(h: &mut Harness, n: u16) {
    let mut sa = TcpSpec::outbound(false, n, 9, vec![]).with_opts(vec![TcpOptionElement::MaximumSegmentSize(8960)]);
    sa.flags = Flags { syn: true, ack: true, ..Flags::default() };
    sa.ack = 1;
    let _ = h.feed_tcp(Port::Inner, &sa);
    for i in 0..3u32 {
        let s = TcpSpec::inbound(false, n, 1 + i * 1448, stream_bytes(n as u32, i * 1448, 1448)).ts(1, 2);
        let _ = h.feed_tcp(Port::Outer, &s);
    }
}

#[test]
fn a_flood_of_new_flows_evicts_the_oldest_and_flushes_what_they_hold() {
    let cfg = Config { max_flows: 16, ..test_config() };
    let mut h = Harness::new(cfg);
    for n in 0..16 {
        hold_one(&mut h, n);
    }
    assert_eq!(h.eng.held_bytes(), 16 * 1448);
    let before = h.out.len();
    hold_one(&mut h, 16);
    assert_eq!(h.eng.flow_count(), 16);
    assert_eq!(h.eng.counters().flows_evicted, 1);
    assert_eq!(h.eng.counters().flushes(FlushReason::Evicted), 1);
    let flushed = &h.out[before];
    let w = check_wire_frame(&flushed.frame).unwrap();
    assert_eq!(w.tcp().unwrap().source_port, 40_000, "the oldest flow's hold was sent");
    // A flood: 1000 more flows, each with a hold.
    for n in 17..1017 {
        hold_one(&mut h, n);
        assert!(h.eng.flow_count() <= 16);
        assert!(h.eng.held_bytes() <= 16 * 1448);
    }
    h.flush_all();
    h.check_outputs().unwrap();
    h.oracle.verify().unwrap();
    h.check_accounting().unwrap();
}

#[test]
fn held_bytes_are_bounded() {
    let cfg = Config { max_held_bytes: 65_536, ..test_config() };
    let mut h = Harness::new(cfg);
    for n in 0..40 {
        hold_one(&mut h, n);
        assert!(h.eng.held_bytes() <= 65_536);
    }
    assert!(h.eng.counters().flushes(FlushReason::MemoryPressure) > 0);
    assert!(h.eng.held_bytes() > 0);
    h.flush_all();
    h.check_outputs().unwrap();
    h.oracle.verify().unwrap();
    h.check_accounting().unwrap();
}

#[test]
fn idle_flows_are_forgotten() {
    let cfg = Config { flow_idle_timeout: Duration::from_millis(10), ..test_config() };
    let mut h = Harness::new(cfg);
    for n in 0..5 {
        hold_one(&mut h, n);
    }
    assert_eq!(h.eng.flow_count(), 5);
    h.advance(Duration::from_secs(3));
    assert_eq!(h.eng.flow_count(), 0);
    assert_eq!(h.eng.counters().flows_expired, 5);
    assert_eq!(h.eng.held_bytes(), 0);
    assert_eq!(h.eng.poll_timeout(), None, "nothing left to wake up for");
    h.check_outputs().unwrap();
    h.oracle.verify().unwrap();
}

#[test]
fn non_ip_frames_pass_and_garbage_ip_is_dropped_as_malformed() {
    let mut h = Harness::new(test_config());
    let mut arp = vec![0xffu8; 12];
    arp.extend([0x08, 0x06]);
    arp.extend([0u8; 28]);
    assert_eq!(h.feed(Port::Outer, arp, PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    let mut bad = udp(false, false, 100, true).build();
    bad[14 + 10] ^= 1; // IPv4 header checksum
    assert_eq!(h.feed(Port::Outer, bad, PacketMeta::PLAIN), Verdict::Dropped(DropReason::Malformed));
    let mut short = udp(false, false, 100, true).build();
    short.truncate(30);
    assert_eq!(h.feed(Port::Outer, short, PacketMeta::PLAIN), Verdict::Dropped(DropReason::Malformed));
    h.check_accounting().unwrap();
    // etherparse agrees the truncated frame is not a valid IPv4 packet.
    let mut short = udp(false, false, 100, true).build();
    short.truncate(30);
    assert!(PacketHeaders::from_ethernet_slice(&short).is_err());
}

/// An IPv4 packet from inside, built raw by etherparse: `opts` IP options,
/// `frag` = (offset in 8-byte units, more fragments) for an existing fragment.
/// A first fragment or whole packet is built as UDP, a later fragment raw.
fn raw_v4(opts: &[u8], frag: (u16, bool), payload: &[u8]) -> Vec<u8> {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (inner_addr(false, 4), outer_addr(false, 4)) else { unreachable!() };
    let h = etherparse::Ipv4Header {
        identification: 0x1234,
        dont_fragment: false,
        more_fragments: frag.1,
        fragment_offset: etherparse::IpFragOffset::try_new(frag.0).unwrap(),
        time_to_live: 64,
        protocol: IpNumber::UDP,
        source: s.octets(),
        destination: d.octets(),
        options: etherparse::Ipv4Options::try_from(opts).unwrap(),
        ..Default::default()
    };
    let mut v = Vec::new();
    let b = PacketBuilder::ethernet2(MAC_INNER, MAC_OUTER).ip(etherparse::IpHeaders::Ipv4(h, Default::default()));
    if frag.0 == 0 {
        b.udp(1, 2).write(&mut v, payload).unwrap();
    } else {
        b.write(&mut v, IpNumber::UDP, payload).unwrap();
    }
    v
}

/// Fragments as etherparse parses them: (offset in bytes, MF, options, data).
fn parsed_fragments(w: &[(Port, Wire)]) -> Vec<(usize, bool, Vec<u8>, Vec<u8>)> {
    w.iter()
        .map(|(p, w)| {
            assert_eq!(*p, Port::Outer);
            assert!(w.ip_len <= 1500);
            let ip = w.v4().unwrap();
            assert_eq!(ip.identification, 0x1234);
            (ip.fragment_offset.byte_offset() as usize, ip.more_fragments, ip.options.to_vec(), fragment_payload(w))
        })
        .collect()
}

#[test]
fn fragmentation_copies_only_copied_options_to_later_fragments() {
    // Router Alert (copied flag set), then Record Route (not copied), EOL.
    let ra = [0x94, 0x04, 0x00, 0x00];
    let mut opts = ra.to_vec();
    opts.extend([0x07, 0x07, 0x04, 0, 0, 0, 0, 0x00]);
    let payload = stream_bytes(4, 0, 4000);
    let mut h = Harness::new(test_config());
    assert_eq!(h.feed(Port::Inner, raw_v4(&opts, (0, false), &payload), PacketMeta::PLAIN), Verdict::Consumed);
    let w = h.check_outputs().unwrap();
    let f = parsed_fragments(&w);
    assert_eq!(f[0].2, opts, "the first fragment keeps every option");
    for x in &f[1..] {
        assert_eq!(&x.2[..4], &ra, "later fragments keep the copied option");
        assert!(x.2.len() <= 8 && x.2[4..].iter().all(|b| *b == 0), "and only it: {:x?}", x.2);
    }
    let mut data = Vec::new();
    for (off, mf, _, d) in &f {
        assert_eq!(*off, data.len());
        assert_eq!(*mf, off + d.len() < payload.len() + 8);
        data.extend_from_slice(d);
    }
    assert_eq!(data[8..], payload[..], "the UDP payload reassembles");
}

#[test]
fn a_fragment_too_big_is_fragmented_again_at_its_offset() {
    let payload = stream_bytes(5, 0, 3000);
    for last in [false, true] {
        let mut h = Harness::new(test_config());
        // Offset 1480 bytes (185 units); more fragments follow unless `last`.
        let v = h.feed(Port::Inner, raw_v4(&[], (185, !last), &payload), PacketMeta::PLAIN);
        assert_eq!(v, Verdict::Consumed);
        let w = h.check_outputs().unwrap();
        let f = parsed_fragments(&w);
        let mut at = 1480;
        for (i, (off, mf, _, d)) in f.iter().enumerate() {
            assert_eq!(*off, at);
            assert_eq!(*mf, !last || i + 1 < f.len(), "MF kept when the original had it");
            at += d.len();
        }
        let data: Vec<u8> = f.iter().flat_map(|x| x.3.clone()).collect();
        assert_eq!(data, payload);
    }
}

/// A segment corrupted on the inner link (checksum no longer matches) must
/// not be laundered by the split: recomputing each piece's checksum from the
/// corrupt bytes would hand the receiver bad data with good checksums. Every
/// piece leaves with a checksum that fails, as the whole segment would have.
#[test]
fn split_does_not_launder_a_corrupt_segment() {
    for outer_gso in [false, true] {
        for v6 in [false, true] {
            let mut h = Harness::new(Config { outer_gso, ..test_config() });
            let mut f = big_out(v6, 1, 8000).build();
            let n = f.len();
            f[n - 3000] ^= 0x10;
            let _ = h.feed(Port::Inner, f, PacketMeta::PLAIN);
            let outs = std::mem::take(&mut h.out);
            let mut pieces = Vec::new();
            for o in &outs {
                match o.meta.gso {
                    Some(_) => pieces.extend(soft_gso(&o.frame, &o.meta).unwrap()),
                    None => pieces.push(o.frame.clone()),
                }
            }
            assert!(pieces.len() > 1);
            for (i, p) in pieces.iter().enumerate() {
                assert!(check_wire_frame(p).is_err(), "gso={outer_gso} v6={v6}: piece {i} verifies");
            }
            assert_eq!(h.eng.counters().bad_checksum, 1);
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// The software cut verifies the original checksum from the pieces'
    /// own sums (no second read): a flip of any bit in the payload or the
    /// sequence, acknowledgement or window fields, at even or odd offsets, in any piece, still
    /// leaves every piece failing; and an intact segment's pieces all verify.
    #[test]
    fn the_software_cut_catches_a_flip_anywhere(v6 in proptest::bool::ANY, len in 1449usize..9000, at in 0.0f64..1.0, bit in 0u8..8, flip in proptest::bool::ANY) {
        let mut h = Harness::new(Config { outer_gso: false, ..test_config() });
        let mut f = big_out(v6, 1, len).build();
        let n = f.len();
        let l4 = n - len - 32;
        // Any payload byte, or a byte of the sequence, acknowledgement or
        // window fields (a flip elsewhere in the header changes what the
        // segment is, not only whether it verifies).
        let header = [4usize, 5, 6, 7, 8, 9, 10, 11, 14, 15];
        let pos = if at < 0.1 { l4 + header[(at * 100.0) as usize % header.len()] } else { l4 + 32 + ((len - 1) as f64 * at) as usize };
        if flip {
            f[pos] ^= 1 << bit;
        }
        let _ = h.feed(Port::Inner, f, PacketMeta::PLAIN);
        let outs = std::mem::take(&mut h.out);
        proptest::prop_assert!(outs.len() > 1);
        for (i, o) in outs.iter().enumerate() {
            proptest::prop_assert_eq!(check_wire_frame(&o.frame).is_err(), flip, "piece {} of {}, byte {}", i, outs.len(), pos);
        }
        proptest::prop_assert_eq!(h.eng.counters().bad_checksum, flip as u64);
    }
}

/// UDP with a partial checksum (`CHECKSUM_PARTIAL` from a local sender)
/// leaves with a complete one, whole or fragmented.
#[test]
fn partial_udp_checksums_are_completed_before_sending_or_fragmenting() {
    for len in [100usize, 4000] {
        let spec = udp(false, true, len, false);
        let good = spec.build();
        let mut f = good.clone();
        // The field holds the folded pseudo-header sum (addresses, 17, length).
        let udp_len = (len + 8) as u32;
        let mut s = 17 + udp_len;
        for w in f[26..34].chunks(2) {
            s += u16::from_be_bytes([w[0], w[1]]) as u32;
        }
        let partial = ones_complement(&[], s);
        f[40..42].copy_from_slice(&partial.to_be_bytes());
        assert_ne!(f, good);
        let mut h = Harness::new(test_config());
        let _ = h.feed(Port::Inner, f, rx_meta(PARTIAL));
        let w = h.check_outputs().unwrap();
        // Reassemble and compare with the frame etherparse built.
        let mut ip_payload = Vec::new();
        for (_, w) in &w {
            ip_payload.extend(fragment_payload(w));
        }
        assert_eq!(ip_payload, good[34..], "len {len}: checksum completed exactly as etherparse computes it");
    }
}

/// A frame that is not IP passes unchanged, but never larger than the
/// egress MTU: counted as a drop a router would make, not forwarded.
#[test]
fn non_ip_frames_pass_but_not_beyond_the_egress_mtu() {
    let frame = |payload: usize| {
        let mut f = vec![0u8; 14 + payload];
        f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // IEEE local experimental
        f
    };
    let mut h = Harness::new(test_config());
    assert_eq!(h.feed(Port::Inner, frame(1500), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.feed(Port::Inner, frame(1501), PacketMeta::PLAIN), Verdict::Dropped(DropReason::TooBigUncuttable));
    assert_eq!(h.feed(Port::Outer, frame(1501), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.eng.counters().non_ip, 3);
    assert_eq!(h.eng.counters().drops(DropReason::TooBigUncuttable), 1);
}

/// A router forwards the IP packet, not what the link layer left behind it
/// (Ethernet padding, a trailer): Linux trims every received packet to its
/// IP length. A trailer that makes the frame larger than the egress MTU,
/// while the packet itself fits, must not cost the packet (a port refuses
/// the oversized frame). Found by the long event-sequence fuzzer (seed
/// 4295023156: a 1558-byte frame passed on toward a 1500-byte MTU).
#[test]
fn a_link_layer_trailer_is_left_behind() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let tcp = TcpSpec::outbound(v6, 1, ISN, stream_bytes(1, 0, 1300)).ts(500, 600).build();
        let ack = TcpSpec::inbound(v6, 2, ISN, vec![]).flags(Flags::ack()).build();
        let dgram = udp(v6, true, 1200, true).build();
        for (from, frame, trailer) in [(Port::Inner, tcp, 160), (Port::Outer, ack, 6), (Port::Inner, dgram, 400)] {
            let ip_end = frame.len();
            let mut f = frame.clone();
            f.extend(std::iter::repeat_n(0xa5, trailer));
            let len = f.len();
            let v = h.feed(from, f, PacketMeta::PLAIN);
            let (_, range) = v.forwarded(len).unwrap_or_else(|| panic!("v6={v6}: {v:?}"));
            assert_eq!(range, 0..ip_end, "v6={v6} {trailer}-byte trailer: only the packet leaves");
            let out = h.out.last().unwrap();
            assert_eq!(out.frame, frame, "v6={v6}: the packet unchanged");
            h.check_outputs().unwrap();
        }
        h.check_accounting().unwrap();
        assert_eq!(h.eng.counters().forwarded, 3);
    }
}
