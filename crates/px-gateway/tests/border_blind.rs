//! The border against off-path senders (issue 27): someone who knows a
//! flow's addresses and ports, but not its sequence numbers, must not be
//! able to change what the gateway knows about the connection: its MSS,
//! its signature, whether it ended, where its stream is, or what the
//! handshake memory keeps. Where an end host needs an exact sequence
//! number (RFC 5961), the gateway needs it too. Frames are built and
//! checked by etherparse.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::*;
use etherparse::{Icmpv4Type, PacketBuilder, icmpv4::DestUnreachableHeader};
use px_gateway::{Config, Port, Verdict};

const ISN: u32 = 0x4000_0000;

/// Inbound data of flow 1 at stream offset `off`, timestamps on.
fn inbound(v6: bool, off: u32, len: usize) -> TcpSpec {
    TcpSpec::inbound(v6, 1, ISN.wrapping_add(off), stream_bytes(1, off, len)).ts(1_000, 77)
}

/// Outbound data of flow 1 at offset `off` of the inner host's stream.
fn outbound(v6: bool, off: u32, len: usize) -> TcpSpec {
    TcpSpec::outbound(v6, 1, (INNER_ISN + 1).wrapping_add(off), stream_bytes(2, off, len)).ts(500, 600)
}

/// A SYN (or, acknowledging `ack`, a SYN-ACK) of flow `n` from outside,
/// with an MSS option.
fn outer_syn_ack(v6: bool, n: u16, seq: u32, mss: u16, ack: Option<u32>) -> TcpSpec {
    let mut s = outer_syn(v6, n, seq, mss);
    s.flags.ack = ack.is_some();
    s.ack = ack.unwrap_or(0);
    s
}

/// Payload sizes of the TCP data frames that left on `port`.
fn sizes(w: &[(Port, Wire)], port: Port) -> Vec<usize> {
    w.iter().filter(|(p, w)| *p == port && !w.payload.is_empty()).map(|(_, w)| w.payload.len()).collect()
}

/// Sends `segments` full-sized inbound segments from stream offset `off`,
/// then flushes; returns the payload sizes that reached the inner host.
fn bulk_in(h: &mut Harness, v6: bool, off: u32, segments: u32) -> Vec<usize> {
    let mss = if v6 { 1428 } else { 1448 };
    for i in 0..segments {
        let _ = h.feed_tcp(Port::Outer, &inbound(v6, off + i * mss, mss as usize));
    }
    h.flush_all();
    sizes(&h.check_outputs().unwrap(), Port::Inner)
}

/// The inner host sends 8000 bytes at `off`: the payload sizes that left
/// on the outer port (full-sized pieces: 1448 with timestamps over IPv4).
fn bulk_out(h: &mut Harness, v6: bool, off: u32) -> Vec<usize> {
    let _ = h.feed_tcp(Port::Inner, &outbound(v6, off, 8000));
    sizes(&h.check_outputs().unwrap(), Port::Outer)
}

fn full_pieces(v6: bool) -> Vec<usize> {
    let m = if v6 { 1428 } else { 1448 };
    let mut v = vec![m; 8000 / m];
    v.push(8000 % m);
    v
}

// ---- item 1: a "too big" with an odd quote ----------------------------------

/// An ICMPv4 "fragmentation needed" from outside, to the inner host, quoting
/// `quote` (an IPv4 packet's bytes as a host's TCP would read them).
fn frag_needed(quote: &[u8], mtu: u16) -> Vec<u8> {
    let to = inner_addr(false, 1);
    let IpAddr::V4(to) = to else { unreachable!() };
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER)
        .ipv4([198, 51, 100, 99], to.octets(), 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: mtu }))
        .write(&mut v, quote)
        .unwrap();
    v
}

/// A "too big" whose quote Linux's `tcp_v4_err` would take (header length
/// at least 20, protocol 6, the live 4-tuple, an in-window sequence) but
/// whose quoted header has a fragment offset or another version never
/// reaches the inner host: it is the gateway's, as a well-formed one is.
#[test]
fn a_too_big_with_an_odd_quote_is_validated_not_passed_on() {
    for odd in ["fragment offset", "version 5", "version 6"] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, false, 1, ISN, Some(8960));
        let seg = outbound(false, 0, 1400);
        let _ = h.feed_tcp(Port::Inner, &seg);
        h.check_outputs().unwrap();
        let mut q = ip_part(&seg.build()).to_vec();
        match odd {
            "fragment offset" => q[6..8].copy_from_slice(&(0x4000u16 | 185).to_be_bytes()),
            "version 5" => q[0] = 0x55,
            _ => q[0] = 0x65,
        }
        let v = h.feed(Port::Outer, frag_needed(&q[..q.len().min(548)], 576), PacketMeta::PLAIN);
        assert_eq!(v, Verdict::Consumed, "{odd}: the error is not passed to the inner host");
        assert!(h.take().is_empty(), "{odd}");
        assert_eq!(h.eng.counters().pmtu_learned, 0, "{odd}: one error is not believed");
        assert_eq!(bulk_out(&mut h, false, 1400), full_pieces(false), "{odd}");
    }
}

// ---- item 2: one spoofed option marks a flow signed ---------------------------

/// A segment far outside the window carrying TCP-MD5 (19) or TCP-AO (29)
/// on a flow whose handshake was seen unsigned passes untouched, and the
/// flow stays translatable: merging goes on, and the inner host's large
/// segments (it was given the raised MSS) are still cut, not dropped.
#[test]
fn a_spoofed_signature_does_not_make_a_live_flow_signed() {
    for kind in [19u8, 29] {
        for v6 in [false, true] {
            let mut h = Harness::new(test_config());
            open_connection(&mut h, v6, 1, ISN, Some(8960));
            // Far from the stream, and within 256 KiB of it (in window,
            // not at the expected sequence).
            for off in [0x7000_0000, 5000] {
                let spoof = with_raw_options(&inbound(v6, off, 100), &signature(kind, None));
                assert_eq!(h.feed(Port::Outer, spoof, PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
            }
            h.take();
            let merged = bulk_in(&mut h, v6, 0, 12);
            assert!(merged.iter().any(|s| *s > 4000), "kind {kind} v6={v6}: still merged: {merged:?}");
            assert_eq!(bulk_out(&mut h, v6, 0), full_pieces(v6), "kind {kind} v6={v6}");
        }
    }
}

/// A connection whose SYN carried a signature is signed from its handshake,
/// whatever comes later.
#[test]
fn a_signed_handshake_makes_a_signed_flow() {
    let mut h = Harness::new(test_config());
    let syn = outer_syn_ack(false, 1, ISN - 1, 1460, None);
    let f = with_raw_options(&syn, &signature(19, Some(1460)));
    assert_eq!(h.feed(Port::Outer, f.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.take()[0].frame, f, "passed untouched: its MSS is not raised");
    let _ = bulk_in(&mut h, false, 0, 6);
    assert_eq!(h.eng.counters().merged_in, 0);
}

// ---- item 3: blind resets --------------------------------------------------------

/// (a) An RST from outside near, but not at, the expected sequence does not
/// end the connection for the gateway (an end host needs the exact number,
/// RFC 5961 §3.2): a spoofed SYN with MSS 1 afterwards changes nothing.
#[test]
fn a_blind_rst_near_the_window_does_not_end_the_connection() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, v6, 1, ISN, Some(8960));
        let _ = bulk_in(&mut h, v6, 0, 4);
        let next: u32 = if v6 { 4 * 1428 } else { 4 * 1448 };
        for delta in [1000u32, 0u32.wrapping_sub(1000), 30_000] {
            let mut rst = inbound(v6, next.wrapping_add(delta), 0);
            rst.flags = Flags { rst: true, ..Flags::default() };
            let _ = h.feed_tcp(Port::Outer, &rst);
        }
        let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(v6, 1, 0x1234_5678, 1, None));
        h.take();
        assert_eq!(bulk_out(&mut h, v6, 0), full_pieces(v6), "v6={v6}");
    }
}

/// An RST from outside at exactly the expected sequence ends the
/// connection: the next SYN on the tuple starts a new one (its MSS raised).
#[test]
fn an_exact_rst_ends_the_connection() {
    let mut h = Harness::new(test_config());
    open_connection(&mut h, false, 1, ISN, Some(8960));
    let _ = bulk_in(&mut h, false, 0, 4);
    let mut rst = inbound(false, 4 * 1448, 0);
    rst.flags = Flags { rst: true, ..Flags::default() };
    let _ = h.feed_tcp(Port::Outer, &rst);
    h.take();
    let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(false, 1, 0x1234_5678, 1460, None));
    let w = h.check_outputs().unwrap();
    assert_eq!(w[0].1.mss(), Some(8960), "a new connection: MSS raised");
}

/// (b) A spoofed SYN between the inner host's SYN-ACK and the client's ACK
/// (one WAN round trip) does not restart the handshake.
#[test]
fn a_spoofed_syn_during_the_handshake_is_ignored() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let omss = if v6 { 1440 } else { 1460 };
        let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(v6, 1, ISN - 1, omss, None));
        let _ = h.feed_tcp(Port::Inner, &inner_syn_ack(v6, 1, INNER_ISN, ISN, Some(8960)));
        let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(v6, 1, 0x0bad_0000, 1, None));
        let mut ack = TcpSpec::inbound(v6, 1, ISN, vec![]).ts(1, 1);
        ack.ack = INNER_ISN + 1;
        let _ = h.feed_tcp(Port::Outer, &ack);
        h.take();
        assert_eq!(h.eng.counters().syns_ignored, 1, "v6={v6}");
        assert_eq!(bulk_out(&mut h, v6, 0), full_pieces(v6), "v6={v6}");
    }
}

/// (c) After the flow entry expired and came back from the handshake
/// memory, the expected sequence is unknown: an RST from outside is then
/// not enough to end the connection.
#[test]
fn after_a_recall_an_rst_from_outside_needs_the_sequence_too() {
    let cfg = Config { flow_idle_timeout: Duration::from_secs(5), ..test_config() };
    let mut h = Harness::new(cfg);
    open_connection(&mut h, false, 1, ISN, Some(8960));
    let _ = bulk_in(&mut h, false, 0, 4);
    h.advance(Duration::from_secs(7));
    h.poke();
    assert_eq!(h.eng.flow_count(), 0, "expired");
    let _ = bulk_out(&mut h, false, 0);
    let mut rst = inbound(false, 0x2222_0000, 0);
    rst.flags = Flags { rst: true, ..Flags::default() };
    let _ = h.feed_tcp(Port::Outer, &rst);
    let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(false, 1, 0x1234_5678, 1, None));
    h.take();
    assert_eq!(bulk_out(&mut h, false, 8000), full_pieces(false));
}

/// A FIN from outside counts only at the expected sequence: a spoofed FIN
/// plus the inner host's real one do not end the connection, and a spoofed
/// SYN afterwards does not reset the outer host's stream (which still
/// sends: a half-close) nor what the handshake said.
#[test]
fn a_spoofed_fin_does_not_end_the_connection() {
    let mut h = Harness::new(test_config());
    open_connection(&mut h, false, 1, ISN, Some(8960));
    let _ = bulk_in(&mut h, false, 0, 4);
    let mut fin = inbound(false, 0x0300_0000, 0);
    fin.flags = Flags { fin: true, ack: true, ..Flags::default() };
    let _ = h.feed_tcp(Port::Outer, &fin);
    let mut inner_fin = outbound(false, 0, 0);
    inner_fin.flags = Flags { fin: true, ack: true, ..Flags::default() };
    let _ = h.feed_tcp(Port::Inner, &inner_fin);
    let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(false, 1, 0x1234_5678, 1, None));
    h.take();
    assert_eq!(h.eng.counters().syns_ignored, 1);
    let merged = bulk_in(&mut h, false, 4 * 1448, 12);
    assert!(merged.iter().any(|s| *s > 8000), "the outer host's stream still merges: {merged:?}");
}

// ---- item 4: a tiny announced MSS --------------------------------------------------

/// An outer MSS below the default MSS (536 over IPv4, 1220 over IPv6) is
/// not raised: the inner host then sends segments the outer host takes,
/// instead of 8948-byte segments the gateway would cut into ~250 pieces.
/// The default MSS and anything above it are raised.
#[test]
fn a_tiny_outer_mss_is_not_raised() {
    for v6 in [false, true] {
        let floor = if v6 { 1220 } else { 536 };
        for (mss, raised) in [(1u16, false), (48, false), (floor - 1, false), (floor, true), (1460, true)] {
            let mut h = Harness::new(test_config());
            let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(v6, 1, ISN - 1, mss, None));
            let w = h.check_outputs().unwrap();
            let want = if raised { if v6 { 8940 } else { 8960 } } else { mss };
            assert_eq!(w[0].1.mss(), Some(want), "v6={v6} mss {mss}");
        }
        // A SYN-ACK from outside (the inner host connects) too.
        let mut h = Harness::new(test_config());
        let mut s = TcpSpec::outbound(v6, 1, 500, vec![])
            .with_opts(vec![etherparse::TcpOptionElement::MaximumSegmentSize(8960)]);
        s.flags = Flags { syn: true, ..Flags::default() };
        let _ = h.feed_tcp(Port::Inner, &s);
        h.take();
        let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(v6, 1, ISN - 1, 100, Some(501)));
        let w = h.check_outputs().unwrap();
        assert_eq!(w[0].1.mss(), Some(100), "v6={v6}");
    }
}

// ---- item 5: one spoofed segment far ahead ---------------------------------------

/// A segment at the expected sequence + 2^31 − x does not move the stream's
/// expected position: the real segments after it still merge.
#[test]
fn a_segment_far_ahead_does_not_stop_merging() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, v6, 1, ISN, Some(8960));
        let mss = if v6 { 1428 } else { 1448 };
        let _ = bulk_in(&mut h, v6, 0, 6);
        let _ = h.feed_tcp(Port::Outer, &inbound(v6, (6 * mss as u32).wrapping_add((1 << 31) - 5000), 100));
        h.take();
        let merged = bulk_in(&mut h, v6, 6 * mss as u32, 12);
        assert!(merged.iter().any(|s| *s > 8000), "v6={v6}: {merged:?}");
    }
}

// ---- item 6: the handshake memory -------------------------------------------------

/// Spoofed SYN-ACKs from outside (with AccECN codepoints) plus ACKs on
/// thousands of tuples never count as established connections: their
/// flow entries' end writes nothing into the handshake memory, so a real
/// idle connection's MSS survives them.
#[test]
fn spoofed_handshakes_do_not_wash_out_the_handshake_memory() {
    let cfg = Config { max_flows: 64, flow_idle_timeout: Duration::from_secs(5), ..test_config() };
    let mut h = Harness::new(cfg);
    open_connection(&mut h, false, 1, ISN, Some(8960));
    let _ = bulk_in(&mut h, false, 0, 4);
    h.advance(Duration::from_secs(7));
    h.poke();
    for n in 2..6000u16 {
        let mut sa = outer_syn_ack(false, n, 1000, 1460, Some(1));
        sa.sport = n;
        // AE, CWR, ECE = 0, 1, 0: a SYN-ACK that chose AccECN.
        sa.flags.cwr = true;
        let _ = h.feed_tcp(Port::Outer, &sa);
        let mut ack = TcpSpec::inbound(false, n, 1001, vec![]);
        ack.sport = n;
        let _ = h.feed_tcp(Port::Outer, &ack);
        h.take();
    }
    h.advance(Duration::from_secs(7));
    h.poke();
    let merged = bulk_in(&mut h, false, 4 * 1448, 12);
    assert!(merged.iter().any(|s| *s > 8000), "the real connection's MSS was kept: {merged:?}");
}

// ---- item 9: what one input may make the engine hold -------------------------

/// A 64 KB GRO super-packet of 40-byte segments from the inner host, cut
/// back in software into its ~1,600 segments, takes buffers of its pieces'
/// size, not a full inner frame's each: about 400 KB, not 15 MB.
#[test]
fn tiny_pieces_take_small_buffers() {
    let mut h = Harness::new(Config { outer_gso: false, ..test_config() });
    open_connection(&mut h, false, 1, ISN, Some(8960));
    let mut s = outbound(false, 0, 40 * 1600);
    s.opts.clear();
    let v = h.feed(Port::Inner, s.build(), gro_meta(Checksum::Valid, 40));
    assert_eq!(v, Verdict::Consumed);
    let pieces = sizes(&h.check_outputs().unwrap(), Port::Outer);
    assert_eq!(pieces.len(), 1600);
    assert!(pieces.iter().all(|p| *p == 40));
    assert!(h.queued_buffer_bytes <= 1600 * 256, "{} buffer bytes", h.queued_buffer_bytes);
}
