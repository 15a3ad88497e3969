//! Toward a neighbour b-network whose iMTU the gateway verified (issues 30
//! and 35, `px_gateway::imtu`): packets pass untouched (no MSS clamp, no
//! split, no merge) — but only toward a destination whose own path echoed
//! the size back whole with the probe's mark, and never larger than the
//! outer port sends. Larger than that, unconfirmed, or once the prefix is
//! withdrawn, they are translated as before, and a flow that loses its
//! verification mid-stream keeps every byte.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::*;
use etherparse::TcpOptionElement;
use px_gateway::{Config, Engine, ImtuTable, Port, SharedImtu, SharedPmtu, Verdict};
use px_wire::offload::PacketMeta;

/// The engine's configuration: an outer port that sends 9000.
fn config() -> Config {
    Config { outer_link_mtu: 9000, ..test_config() }
}

/// A harness whose engine follows `shared`.
fn harness(shared: &std::sync::Arc<SharedImtu>) -> Harness {
    harness_with(shared, config())
}

fn harness_with(shared: &std::sync::Arc<SharedImtu>, cfg: Config) -> Harness {
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

/// A small datagram from inner host `n` to outside host `n`.
fn nudge(v6: bool, n: u16) -> Vec<u8> {
    UdpSpec {
        src: inner_addr(v6, n),
        dst: outer_addr(v6, n),
        sport: 5353,
        dport: 53,
        df: false,
        ip_id: 9,
        payload: vec![1; 20],
    }
    .build()
}

/// The echo requests the engine queued toward the outer port since `from`.
fn probes_since(h: &Harness, from: usize) -> Vec<Vec<u8>> {
    h.out[from..]
        .iter()
        .filter(|o| o.port == Port::Outer && !o.forwarded)
        .filter(|o| {
            let ip = &o.frame[14..];
            let (proto, at) = if ip[0] >> 4 == 4 { (ip[9], 20) } else { (ip[6], 40) };
            (proto == 1 && ip[at] == 8) || (proto == 58 && ip[at] == 128)
        })
        .map(|o| o.frame.clone())
        .collect()
}

/// What the probed host sends back: MACs, addresses swapped, the echo
/// type changed and its checksum made again, the data as it came.
fn reply_to(probe: &[u8]) -> Vec<u8> {
    let mut r = probe.to_vec();
    let (d, s) = (r[0..6].to_vec(), r[6..12].to_vec());
    r[0..6].copy_from_slice(&s);
    r[6..12].copy_from_slice(&d);
    let ip = 14;
    let v4 = r[ip] >> 4 == 4;
    let (hl, addrs, n) = if v4 { (20, 12, 4) } else { (40, 8, 16) };
    let src = r[ip + addrs..ip + addrs + n].to_vec();
    let dst = r[ip + addrs + n..ip + addrs + 2 * n].to_vec();
    r[ip + addrs..ip + addrs + n].copy_from_slice(&dst);
    r[ip + addrs + n..ip + addrs + 2 * n].copy_from_slice(&src);
    let l4 = ip + hl;
    r[l4] = if v4 { 0 } else { 129 };
    fix_icmp_checksum(&mut r);
    r
}

/// Recomputes the ICMP (v4) or ICMPv6 checksum of an Ethernet frame.
fn fix_icmp_checksum(r: &mut [u8]) {
    let ip = 14;
    let v4 = r[ip] >> 4 == 4;
    let l4 = ip + if v4 { 20 } else { 40 };
    r[l4 + 2..l4 + 4].fill(0);
    let mut init = 0u32;
    if !v4 {
        for c in r[ip + 8..ip + 40].chunks(2) {
            init += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        init += (r.len() - l4) as u32 + 58;
    }
    let c = !ones_complement(&r[l4..], init);
    r[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
    if v4 {
        r[ip + 10..ip + 12].fill(0);
        let c = !ones_complement(&r[ip..ip + 20], 0);
        r[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    }
}

/// Confirms outside host `n`: an inner packet toward it makes the engine
/// probe; the probe's reply is taken. Returns the probe.
fn confirm(h: &mut Harness, v6: bool, n: u16) -> Vec<u8> {
    let mark = h.out.len();
    let _ = h.feed(Port::Inner, nudge(v6, n), PacketMeta::PLAIN);
    let probes = probes_since(h, mark);
    assert_eq!(probes.len(), 1, "v6 {v6}: one probe toward the unconfirmed destination");
    let before = h.eng.counters().imtu_confirmed;
    let v = h.feed(Port::Outer, reply_to(&probes[0]), PacketMeta::PLAIN);
    assert!(matches!(v, Verdict::Consumed), "v6 {v6}: the reply is the gateway's: {v:?}");
    assert_eq!(h.eng.counters().imtu_confirmed, before + 1);
    probes[0].clone()
}

fn syn_out(v6: bool, n: u16, mss: u16) -> TcpSpec {
    let mut syn = TcpSpec::outbound(v6, n, 100, vec![]).with_opts(vec![TcpOptionElement::MaximumSegmentSize(mss)]);
    syn.flags = Flags { syn: true, ..Flags::default() };
    syn
}

#[test]
fn syns_and_large_segments_to_a_confirmed_destination_pass_untouched() {
    for v6 in [false, true] {
        let shared = SharedImtu::new(16);
        shared.publish(outside_verified(9000));
        let mut h = harness(&shared);
        let probe = confirm(&mut h, v6, 1);
        // The probe: the verified size, DF set, from the inner host to the
        // destination, with the inner packet's own link header.
        let w = check_wire_frame(&probe).unwrap();
        assert_eq!(w.ip_len, 9000);
        assert_eq!(w.src_dst(), (inner_addr(v6, 1), outer_addr(v6, 1)));
        if !v6 {
            assert!(w.v4().unwrap().dont_fragment);
        }
        assert_eq!(probe[..14], nudge(v6, 1)[..14]);
        // The inner host's SYN with its large MSS: not clamped.
        let frame = syn_out(v6, 1, 8940).build();
        assert!(matches!(h.feed(Port::Inner, frame.clone(), PacketMeta::PLAIN), Verdict::Forward { .. }));
        assert_eq!(h.out.last().unwrap().frame, frame, "the SYN left changed");
        // An 8000-byte segment each way: passed as it came.
        let big_out = TcpSpec::outbound(v6, 1, 101, stream_bytes(2, 0, 8000)).build();
        assert!(matches!(h.feed(Port::Inner, big_out.clone(), PacketMeta::PLAIN), Verdict::Forward { .. }));
        assert_eq!(h.out.last().unwrap().frame, big_out);
        let big_in = TcpSpec::inbound(v6, 1, 5000, stream_bytes(1, 0, 8000)).build();
        assert!(matches!(h.feed(Port::Outer, big_in.clone(), PacketMeta::PLAIN), Verdict::Forward { .. }));
        assert_eq!(h.out.last().unwrap().frame, big_in);
        let c = h.eng.counters();
        assert_eq!((c.mss_clamped, c.split_in, c.merged_in, c.imtu_probes), (0, 0, 0, 1), "v6 {v6}: {c:?}");
        assert_eq!(c.imtu_passed, 3, "v6 {v6}: {c:?}");
    }
}

/// Issue 35 item 5: a host of a verified prefix whose own path is smaller
/// (and filters ICMP) must not get a frame its path cannot carry. Until
/// its path echoed the size, it is translated: SYN clamped, segments cut.
#[test]
fn an_unconfirmed_destination_of_a_verified_prefix_is_translated() {
    for v6 in [false, true] {
        let shared = SharedImtu::new(16);
        shared.publish(outside_verified(9000));
        let mut h = harness(&shared);
        let mark = h.out.len();
        let _ = h.feed_tcp(Port::Inner, &syn_out(v6, 2, 8940));
        let probes = probes_since(&h, mark);
        assert_eq!(probes.len(), 1, "the first packet toward it probes its path");
        let syn = h.out.iter().rev().find(|o| o.port == Port::Outer && o.frame != probes[0]).unwrap();
        let want = if v6 { 1440 } else { 1460 };
        assert_eq!(check_wire_frame(&syn.frame).unwrap().mss(), Some(want), "v6 {v6}: the SYN must be clamped");
        h.out.clear();
        let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(v6, 2, 101, stream_bytes(2, 0, 8000)));
        let cut = payloads(&h.out, Port::Outer);
        assert!(cut.len() > 1 && cut.iter().all(|p| *p <= usize::from(want)), "{cut:?}");
        assert_eq!(cut.iter().sum::<usize>(), 8000);
        // No reply (the probe died at the smaller hop): no second probe
        // before the retry time, and still translated after it.
        let mark = h.out.len();
        h.advance(Duration::from_millis(500));
        let _ = h.feed(Port::Inner, nudge(v6, 2), PacketMeta::PLAIN);
        assert!(probes_since(&h, mark).is_empty(), "probes back off");
        h.advance(Duration::from_secs(1));
        let _ = h.feed(Port::Inner, nudge(v6, 2), PacketMeta::PLAIN);
        assert_eq!(probes_since(&h, mark).len(), 1, "and are tried again");
        assert_eq!(h.eng.counters().imtu_passed, 0);
    }
}

/// A reply confirms only if it is whole, marked, fresh and from the
/// destination probed.
#[test]
fn only_a_whole_marked_fresh_reply_from_the_destination_confirms() {
    for v6 in [false, true] {
        let shared = SharedImtu::new(16);
        shared.publish(outside_verified(9000));
        let mut h = harness(&shared);
        let mark = h.out.len();
        let _ = h.feed(Port::Inner, nudge(v6, 3), PacketMeta::PLAIN);
        let probe = probes_since(&h, mark).pop().unwrap();
        let good = reply_to(&probe);
        let ip = 14;
        let l4 = ip + if v6 { 40 } else { 20 };
        let mut forged = Vec::new();
        // Another mark (an off-path guess).
        let mut r = good.clone();
        r[l4 + 8 + 3] ^= 0x40;
        fix_icmp_checksum(&mut r);
        forged.push(("wrong mark", r));
        // Truncated: the host (or a middlebox) sent back less.
        let mut r = good[..good.len() - 100].to_vec();
        if v6 {
            let pl = (r.len() - 14 - 40) as u16;
            r[ip + 4..ip + 6].copy_from_slice(&pl.to_be_bytes());
        } else {
            let tl = (r.len() - 14) as u16;
            r[ip + 2..ip + 4].copy_from_slice(&tl.to_be_bytes());
        }
        fix_icmp_checksum(&mut r);
        forged.push(("truncated", r));
        // From another host of the prefix.
        let mut r = good.clone();
        let other = outer_addr(v6, 4);
        match other {
            IpAddr::V4(a) => r[ip + 12..ip + 16].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => r[ip + 8..ip + 24].copy_from_slice(&a.octets()),
        }
        fix_icmp_checksum(&mut r);
        forged.push(("another source", r));
        if !v6 {
            // Fragmented on its way back: the first fragment is no confirmation.
            let mut r = good[..14 + 1500].to_vec();
            r[ip + 2..ip + 4].copy_from_slice(&1500u16.to_be_bytes());
            r[ip + 6] |= 0x20;
            fix_icmp_checksum(&mut r);
            forged.push(("fragment", r));
        }
        for (what, r) in forged {
            let v = h.feed(Port::Outer, r, PacketMeta::PLAIN);
            assert!(!matches!(v, Verdict::Consumed), "v6 {v6}: {what} was taken");
            assert_eq!(h.eng.counters().imtu_confirmed, 0, "v6 {v6}: {what} confirmed");
        }
        // Too late: 11 s after the probe.
        h.advance(Duration::from_secs(11));
        let v = h.feed(Port::Outer, good.clone(), PacketMeta::PLAIN);
        assert!(!matches!(v, Verdict::Consumed), "v6 {v6}: a stale reply was taken");
        assert_eq!(h.eng.counters().imtu_confirmed, 0);
    }
}

/// Never larger than the outer port sends: a verified 9000 behind a
/// 1500-byte outer port passes nothing untouched (nothing to gain) and
/// sends no probe; behind a 4000-byte one, up to 4000, with the SYN's
/// MSS clamped to it.
#[test]
fn the_outer_port_bounds_what_passes() {
    let shared = SharedImtu::new(16);
    shared.publish(outside_verified(9000));
    let mut h = harness_with(&shared, Config { outer_link_mtu: 1500, ..test_config() });
    let _ = h.feed(Port::Inner, nudge(false, 1), PacketMeta::PLAIN);
    assert!(probes_since(&h, 0).is_empty());
    let _ = h.feed_tcp(Port::Inner, &syn_out(false, 1, 8940));
    assert_eq!(check_wire_frame(&h.out.last().unwrap().frame).unwrap().mss(), Some(1460));
    assert_eq!(h.eng.counters().imtu_passed, 0);

    let mut h = harness_with(&shared, Config { outer_link_mtu: 4000, ..test_config() });
    let probe = confirm(&mut h, false, 1);
    assert_eq!(check_wire_frame(&probe).unwrap().ip_len, 4000);
    let _ = h.feed_tcp(Port::Inner, &syn_out(false, 1, 8940));
    assert_eq!(check_wire_frame(&h.out.last().unwrap().frame).unwrap().mss(), Some(3960), "clamped to what passes");
    h.out.clear();
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 101, stream_bytes(2, 0, 3900)));
    assert_eq!(payloads(&h.out, Port::Outer), vec![3900], "3940 bytes pass whole");
    h.out.clear();
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 4001, stream_bytes(2, 3900, 8000)));
    let cut = payloads(&h.out, Port::Outer);
    assert!(cut.iter().all(|p| *p <= 1460) && cut.iter().sum::<usize>() == 8000, "{cut:?}");
}

/// A flow the engine began to translate stays translated when its
/// destination is confirmed later (no flow changes hands mid-stream).
#[test]
fn a_translated_flow_stays_translated() {
    let shared = SharedImtu::new(16);
    shared.publish(outside_verified(9000));
    let mut h = harness(&shared);
    let _ = h.feed_tcp(Port::Inner, &syn_out(false, 5, 8940));
    let probe = probes_since(&h, 0).pop().unwrap();
    assert!(matches!(h.feed(Port::Outer, reply_to(&probe), PacketMeta::PLAIN), Verdict::Consumed));
    h.out.clear();
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 5, 101, stream_bytes(2, 0, 8000)));
    let cut = payloads(&h.out, Port::Outer);
    assert!(cut.len() > 1 && cut.iter().sum::<usize>() == 8000, "{cut:?}");
    // A new connection to the same host passes.
    let mut syn = syn_out(false, 5, 8940);
    syn.sport += 1;
    assert!(matches!(h.feed_tcp(Port::Inner, &syn), Verdict::Forward { .. }));
    assert_eq!(h.eng.counters().imtu_passed, 1);
}

/// The reply reaches whichever worker the fan-out gives it: any worker
/// takes it, and the confirmation holds for all.
#[test]
fn any_worker_takes_a_reply_and_all_see_the_confirmation() {
    let shared = SharedImtu::new(16);
    shared.publish(outside_verified(9000));
    let cfg = config();
    let pmtu = SharedPmtu::new(cfg.pmtu_cache_size, cfg.pmtu_lifetime);
    let mk = || {
        let mut e = Engine::with_shared_pmtu(cfg.clone(), pmtu.clone()).unwrap();
        e.follow_imtu(shared.clone());
        Harness::with_engine(cfg.clone(), e)
    };
    let (mut w1, mut w2) = (mk(), mk());
    let _ = w1.feed(Port::Inner, nudge(false, 1), PacketMeta::PLAIN);
    let probe = probes_since(&w1, 0).pop().unwrap();
    w2.now = w1.now;
    assert!(matches!(w2.feed(Port::Outer, reply_to(&probe), PacketMeta::PLAIN), Verdict::Consumed));
    assert!(matches!(w1.feed_tcp(Port::Inner, &syn_out(false, 1, 8940)), Verdict::Forward { .. }));
    assert!(matches!(w2.feed_tcp(Port::Inner, &syn_out(false, 1, 8940)), Verdict::Forward { .. }));
}

/// A confirmation is renewed while in use, and lapses without a reply:
/// the destination is then translated again.
#[test]
fn a_confirmation_is_renewed_in_use_and_lapses_without_a_reply() {
    let shared = SharedImtu::new(16);
    shared.publish(outside_verified(9000));
    let mut h = harness(&shared);
    confirm(&mut h, false, 1);
    let big = |seq| TcpSpec::outbound(false, 1, seq, stream_bytes(2, 0, 8000));
    h.advance(Duration::from_secs(80));
    let mark = h.out.len();
    assert!(matches!(h.feed_tcp(Port::Inner, &big(101)), Verdict::Forward { .. }), "still confirmed");
    assert!(probes_since(&h, mark).is_empty(), "no renewal while far from expiry");
    h.advance(Duration::from_secs(15));
    let mark = h.out.len();
    assert!(matches!(h.feed_tcp(Port::Inner, &big(8101)), Verdict::Forward { .. }));
    let renewal = probes_since(&h, mark);
    assert_eq!(renewal.len(), 1, "renewed in the last 30 s");
    // Answered: confirmed for another 120 s.
    assert!(matches!(h.feed(Port::Outer, reply_to(&renewal[0]), PacketMeta::PLAIN), Verdict::Consumed));
    h.advance(Duration::from_secs(100));
    assert!(matches!(h.feed_tcp(Port::Inner, &big(16_101)), Verdict::Forward { .. }));
    // Not answered: lapses at 120 s, translated.
    h.advance(Duration::from_secs(21));
    let v = h.feed_tcp(Port::Inner, &big(24_101));
    assert!(!matches!(v, Verdict::Forward { .. }), "{v:?}");
}

/// A "fragmentation needed" about the gateway's own probe (a smaller hop
/// on the destination's path) is taken: the inner host whose address the
/// probe bore never sent it and must not cache a path MTU for it.
#[test]
fn an_error_about_a_probe_is_taken_not_passed_to_the_host() {
    use etherparse::{Icmpv4Type, PacketBuilder, icmpv4::DestUnreachableHeader};
    let shared = SharedImtu::new(16);
    shared.publish(outside_verified(9000));
    let mut h = harness(&shared);
    let _ = h.feed(Port::Inner, nudge(false, 1), PacketMeta::PLAIN);
    let probe = probes_since(&h, 0).pop().unwrap();
    let mut err = Vec::new();
    PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER)
        .ipv4([198, 51, 100, 99], [203, 0, 113, 2], 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1500 }))
        .write(&mut err, &ip_part(&probe)[..548])
        .unwrap();
    let v = h.feed(Port::Outer, err, PacketMeta::PLAIN);
    assert!(matches!(v, Verdict::Consumed), "{v:?}");
    assert_eq!((h.eng.counters().imtu_probe_errors, h.eng.counters().imtu_confirmed), (1, 0));
}

#[test]
fn larger_than_verified_or_withdrawn_is_translated_without_losing_a_byte() {
    let shared = SharedImtu::new(16);
    shared.publish(outside_verified(4000));
    let mut h = harness(&shared);
    confirm(&mut h, false, 1);
    // 8000 bytes do not fit the verified 4000: cut to the outer MTU.
    let data = stream_bytes(2, 0, 8000);
    h.out.clear();
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 101, data.clone()));
    let first = payloads(&h.out, Port::Outer);
    assert!(first.len() > 1 && first.iter().all(|p| *p <= 1460), "{first:?}");
    assert_eq!(first.iter().sum::<usize>(), 8000);
    h.out.clear();
    // Verified at 9000: confirmed again at 9000, the next segment passes
    // whole; withdrawn: cut again.
    shared.publish(outside_verified(9000));
    let mark = h.out.len();
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 8101, stream_bytes(2, 8000, 8000)));
    let probe = probes_since(&h, mark).pop().expect("a larger size is probed again");
    assert!(matches!(h.feed(Port::Outer, reply_to(&probe), PacketMeta::PLAIN), Verdict::Consumed));
    h.out.clear();
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 16_101, stream_bytes(2, 16_000, 8000)));
    assert_eq!(payloads(&h.out, Port::Outer), vec![8000]);
    h.out.clear();
    shared.publish(ImtuTable::new(16));
    let _ = h.feed_tcp(Port::Inner, &TcpSpec::outbound(false, 1, 24_101, stream_bytes(2, 24_000, 8000)));
    let after = payloads(&h.out, Port::Outer);
    assert!(after.len() > 1 && after.iter().all(|p| *p <= 1460), "{after:?}");
    assert_eq!(after.iter().sum::<usize>(), 8000, "bytes lost at the withdrawal");
}

#[test]
fn a_super_packet_passes_only_if_each_segment_fits() {
    let shared = SharedImtu::new(16);
    shared.publish(table(&[("198.51.100.0/24", 9000)]));
    let mut h = harness(&shared);
    confirm(&mut h, false, 1);
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
    let _ = h.feed_tcp(Port::Inner, &syn_out(false, 1, 8960));
    let w = check_wire_frame(&h.out.last().unwrap().frame).unwrap();
    assert_eq!(w.mss(), Some(1460), "the SYN toward a legacy destination must be clamped");
    assert_eq!((h.eng.counters().imtu_passed, h.eng.counters().imtu_probes), (0, 0));
}

/// A router outside (not in any verified prefix) reports "too big" about
/// an 8000-byte segment that went untouched to a confirmed host: the error
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
        confirm(&mut h, v6, 0);
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
        let v = h.feed(Port::Outer, err.clone(), PacketMeta::PLAIN);
        assert!(matches!(v, Verdict::Forward { .. }), "v6 {v6}: {v:?}");
        assert_eq!(h.out.last().unwrap().frame, err);
        // Withdrawn: the same error is the gateway's business again.
        shared.publish(ImtuTable::new(16));
        let v = h.feed(Port::Outer, err, PacketMeta::PLAIN);
        assert!(!matches!(v, Verdict::Forward { .. }), "v6 {v6}: {v:?}");
    }
}

/// UDP from a confirmed verified neighbour toward an inner prefix that
/// reads caravans is not packed into caravans (it passes as it came); from
/// any other outside host it is packed as before.
#[test]
fn udp_from_a_verified_neighbour_is_not_packed_into_caravans() {
    let shared = SharedImtu::new(16);
    shared.publish(table(&[("198.51.100.0/25", 9000)]));
    let cfg = Config { caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap()], ..config() };
    let mut eng = Engine::new(cfg.clone()).unwrap();
    eng.follow_imtu(shared.clone());
    let mut h = Harness::with_engine(cfg, eng);
    let neighbour: IpAddr = "198.51.100.9".parse().unwrap();
    // Confirm it: a probe toward it from an inner host, answered.
    let nudge = UdpSpec {
        src: inner_addr(false, 1),
        dst: neighbour,
        sport: 1,
        dport: 2,
        df: false,
        ip_id: 1,
        payload: vec![0; 8],
    };
    let _ = h.feed(Port::Inner, nudge.build(), PacketMeta::PLAIN);
    let probe = probes_since(&h, 0).pop().unwrap();
    assert!(matches!(h.feed(Port::Outer, reply_to(&probe), PacketMeta::PLAIN), Verdict::Consumed));
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
    assert!(matches!(h.feed(Port::Outer, verified.clone(), PacketMeta::PLAIN), Verdict::Forward { .. }));
    assert_eq!(h.out.last().unwrap().frame, verified);
    assert_eq!(h.eng.counters().caravan.packed_in, 0);
    // From outside the verified /25: packed (held in a caravan).
    let v = h.feed(Port::Outer, dg("198.51.100.200").build(), PacketMeta::PLAIN);
    assert!(!matches!(v, Verdict::Forward { .. }), "{v:?}");
    assert_eq!(h.eng.counters().caravan.packed_in, 1);
}
