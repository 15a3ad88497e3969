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

/// An RST from outside at exactly the gateway's expected sequence does not
/// end the connection for the gateway (issue 35: a blind sweep can learn
/// that sequence, and it need not be the end host's): a SYN from outside
/// afterwards passes as it came (its MSS not raised) and starts a new
/// connection only when the inner host answers it with a SYN-ACK (the
/// SYN-ACK's MSS is then clamped, and the new stream merges).
#[test]
fn after_an_exact_rst_from_outside_a_syn_is_new_only_when_the_inner_host_answers_it() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, v6, 1, ISN, Some(8960));
        let mss = if v6 { 1428 } else { 1448 };
        let _ = bulk_in(&mut h, v6, 0, 4);
        let mut rst = inbound(v6, 4 * mss, 0);
        rst.flags = Flags { rst: true, ..Flags::default() };
        let _ = h.feed_tcp(Port::Outer, &rst);
        h.take();
        let omss = if v6 { 1440 } else { 1460 };
        let new_isn = 0x1234_5678;
        let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(v6, 1, new_isn, omss, None));
        let w = h.check_outputs().unwrap();
        assert_eq!(w[0].1.mss(), Some(omss), "v6={v6}: passed as it came, not raised");
        assert_eq!(h.eng.counters().syns_ignored, 1);
        // The inner host answers: its old connection is gone.
        let _ = h.feed_tcp(Port::Inner, &inner_syn_ack(v6, 1, 5000, new_isn + 1, Some(if v6 { 8940 } else { 8960 })));
        let w = h.check_outputs().unwrap();
        assert_eq!(w[0].1.mss(), Some(omss), "v6={v6}: the SYN-ACK of a new connection is clamped");
        let mut ack = TcpSpec::inbound(v6, 1, new_isn + 1, vec![]).ts(1, 1);
        ack.ack = 5001;
        let _ = h.feed_tcp(Port::Outer, &ack);
        h.take();
        let merged = bulk_in(&mut h, v6, (new_isn + 1).wrapping_sub(ISN), 12);
        assert!(merged.iter().any(|s| *s > 8000), "v6={v6}: the new stream merges: {merged:?}");
    }
}

// ---- issue 35 item 1: a blind sweep --------------------------------------------

/// The inner host of flow 1 acknowledges the outer host's stream up to
/// offset `off` and allows `win << 7` bytes past it.
fn inner_ack(h: &mut Harness, v6: bool, off: u32, win: u16) {
    let mut a = outbound(v6, 0, 0);
    a.ack = ISN.wrapping_add(off);
    a.window = win;
    let _ = h.feed_tcp(Port::Inner, &a);
}

/// A sender that knows only addresses and ports sends 1-byte segments
/// 256 KiB apart across the whole sequence space (16,384 segments) while
/// the real stream goes on, acknowledged by the inner host with 64 KiB of
/// window. Before issue 35, the byte that landed within 256 KiB of the
/// stream moved the expectation there, the next byte of the sweep was then
/// within 256 KiB of it, and so on: the sweep carried the expectation away,
/// and every real segment was out of order from then on (merging stopped).
/// Now only what the inner host's window allows moves it.
#[test]
fn a_blind_sweep_does_not_stop_merging() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, v6, 1, ISN, Some(8960));
        let mss = if v6 { 1428u32 } else { 1448 };
        inner_ack(&mut h, v6, 0, 512);
        h.take();
        let (mut off, mut merged, mut bursts) = (0u32, 0usize, 0usize);
        for k in 0..(1u32 << 14) {
            // The first byte lands 1000 bytes into the stream's window.
            let _ = h.feed_tcp(Port::Outer, &inbound(v6, 1000u32.wrapping_add(k << 18), 1));
            if k % 256 == 0 {
                let sizes = bulk_in(&mut h, v6, off, 12);
                merged += sizes.iter().filter(|s| **s > 4000).count();
                bursts += 1;
                off += 12 * mss;
                inner_ack(&mut h, v6, off, 512);
            }
            h.take();
        }
        // 12 segments merge into 2 (or 1 and the rest behind a sweep byte).
        assert!(merged >= bursts, "v6={v6}: {merged} merged segments in {bursts} bursts of real data");
    }
}

/// The same sweep with no real data in between: its byte inside the
/// window moves the gateway's expectation to just after it, which the
/// sender can then hit with an RST after each byte it sent. Before issue 35
/// that RST ended the connection for the gateway, and a SYN with MSS 48
/// became the flow's outer MSS: the inner host's segments left cut into
/// 36-byte pieces. Now an RST from outside alone ends nothing, the SYN
/// passes as it came (the inner host answers an established connection's
/// SYN with an ACK, not a SYN-ACK), and the flow keeps its sizes and merges
/// as soon as its stream passes the byte.
#[test]
fn a_blind_sweep_then_an_rst_and_a_syn_with_mss_48_do_not_shrink_the_flow() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, v6, 1, ISN, Some(8960));
        let mss = if v6 { 1428u32 } else { 1448 };
        inner_ack(&mut h, v6, 0, 512);
        let _ = bulk_in(&mut h, v6, 0, 12);
        let off = 12 * mss;
        inner_ack(&mut h, v6, off, 512);
        h.take();
        // A sweep whose byte lands 5000 bytes ahead of the stream.
        let base = off + 5000;
        for k in 0..(1u32 << 14) {
            let _ = h.feed_tcp(Port::Outer, &inbound(v6, base.wrapping_add(k << 18), 1));
        }
        for k in 0..(1u32 << 14) {
            let mut rst = inbound(v6, base.wrapping_add(k << 18).wrapping_add(1), 0);
            rst.flags = Flags { rst: true, ..Flags::default() };
            let _ = h.feed_tcp(Port::Outer, &rst);
        }
        let _ = h.feed_tcp(Port::Outer, &outer_syn_ack(v6, 1, 0x1234_5678, 48, None));
        h.take();
        assert_eq!(bulk_out(&mut h, v6, 0), full_pieces(v6), "v6={v6}: the outer MSS is the handshake's");
        let merged = bulk_in(&mut h, v6, off, 24);
        assert!(merged.iter().any(|s| *s > 8000), "v6={v6}: merged once past the byte: {merged:?}");
    }
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

// ---- issue 35 items 1, 3, 4: with the kernel fast path (its model) ----------

/// A harness with the kernel fast path's model, flow 1 open, its inner
/// host allowing 64 KiB past its ACK, and the flow carried by the kernel
/// after a few GRO super-packets. Returns the stream offset reached.
fn offloaded(v6: bool) -> (Harness, common::kernel::KernelModel, u32) {
    let mut h = Harness::new(Config { fast_path: true, fast_path_after: 4, ..test_config() });
    let k = h.attach_kernel();
    open_connection(&mut h, v6, 1, ISN, Some(8960));
    inner_ack(&mut h, v6, 0, 512);
    let mut off = 0;
    for _ in 0..3 {
        off = super_packet(&mut h, v6, off);
        inner_ack(&mut h, v6, off, 512);
        h.quiet();
    }
    h.take();
    assert_eq!(h.eng.flows_in_kernel(), 1, "v6={v6}: the flow went to the kernel");
    (h, k, off)
}

/// A GRO super-packet of 10 segments of flow 1 from outside at `off`;
/// returns the offset after it.
fn super_packet(h: &mut Harness, v6: bool, off: u32) -> u32 {
    let mss = if v6 { 1428 } else { 1448 };
    let mut meta = gro_meta(Checksum::Valid, mss as u16);
    if v6 && let Some(g) = meta.gso.as_mut() {
        g.kind = GsoKind::TcpV6;
    }
    let v = h.feed(Port::Outer, inbound(v6, off, 10 * mss as usize).build(), meta);
    assert!(!matches!(v, Verdict::Dropped(_)), "{v:?}");
    off + 10 * mss
}

/// Whether the kernel (its model) took the last input: the engine did not
/// see it.
fn kernel_took(h: &Harness, fed_before: u64) -> bool {
    h.tally.fed == fed_before
}

/// The blind sweep against a flow in the kernel: the kernel takes nothing
/// beyond the inner host's window as the connection's (the same rule as
/// the engine, with the window it keeps from the inner host's packets), so
/// it keeps re-cutting the real super-packets, and the real FIN hands the
/// flow back. Before issue 35 the sweep carried the kernel's expected
/// sequence away: every real segment was "foreign", forwarded as it came,
/// and the FIN passed without handing the flow back.
#[test]
fn with_the_fast_path_a_blind_sweep_neither_stops_the_kernel_nor_lets_the_fin_pass() {
    for v6 in [false, true] {
        let (mut h, k, mut off) = offloaded(v6);
        let (mut carried, mut real) = (0, 0);
        for j in 0..(1u32 << 14) {
            let fed = h.tally.fed;
            let _ = h.feed(Port::Outer, inbound(v6, 1000u32.wrapping_add(j << 18), 1).build(), PacketMeta::PLAIN);
            let _ = kernel_took(&h, fed);
            if j % 512 == 0 {
                let fed = h.tally.fed;
                off = super_packet(&mut h, v6, off);
                carried += kernel_took(&h, fed) as u32;
                real += 1;
                inner_ack(&mut h, v6, off, 512);
            }
        }
        assert_eq!(carried, real, "v6={v6}: the kernel carried every real super-packet");
        assert_eq!(h.eng.flows_in_kernel(), 1, "v6={v6}: the sweep handed nothing back");
        let mut fin = inbound(v6, off, 0);
        fin.flags = Flags { fin: true, ack: true, ..Flags::default() };
        let fed = h.tally.fed;
        let _ = h.feed_tcp(Port::Outer, &fin);
        assert!(!kernel_took(&h, fed), "v6={v6}: the FIN went to the engine");
        assert_eq!((h.eng.flows_in_kernel(), k.entries()), (0, 0), "v6={v6}: and took the flow back");
    }
}

/// Issue 35 item 3: frames carrying the flow's outbound addresses (inner
/// host → outer host) that arrive on the outer port (anyone on the outer
/// layer-2 segment can send them) are not the flow's: the kernel leaves
/// them to the engine, nothing is sent back out of the outer port by the
/// kernel, and a hundred RSTs this way do not make the flow flap.
#[test]
fn frames_with_the_flows_outbound_addresses_on_the_outer_port_are_no_flow() {
    for v6 in [false, true] {
        let (mut h, k, off) = offloaded(v6);
        let installs = k.log.lock().unwrap().len();
        for j in 0..100u32 {
            let mut s = outbound(v6, 0, if j % 2 == 0 { 100 } else { 0 });
            s.ack = ISN.wrapping_add(off);
            s.flags = if j % 2 == 0 { Flags::ack() } else { Flags { rst: true, ack: true, ..Flags::default() } };
            let fed = h.tally.fed;
            let _ = h.feed_tcp(Port::Outer, &s);
            assert!(!kernel_took(&h, fed), "v6={v6}: the kernel took a frame from the wrong port");
        }
        assert_eq!(k.log.lock().unwrap().len(), installs, "v6={v6}: the flow moved");
        assert_eq!(h.eng.flows_in_kernel(), 1, "v6={v6}");
        let fed = h.tally.fed;
        super_packet(&mut h, v6, off);
        assert!(kernel_took(&h, fed), "v6={v6}: the flow is still the kernel's");
    }
}

/// Issue 35 item 4: IPv4 frames of an offloaded flow that the engine drops
/// as malformed (a bad header checksum; a total length of 0 on a packet
/// that is not a GRO super-packet) are not forwarded by the kernel either:
/// they go to the engine, which drops them, and nothing reaches the inner
/// host.
#[test]
fn malformed_ipv4_frames_of_an_offloaded_flow_never_reach_the_inner_host() {
    let (mut h, k, off) = offloaded(false);
    let good = inbound(false, off, 1448).build();
    let mut bad_sum = good.clone();
    bad_sum[14 + 8] ^= 1; // TTL changed, checksum not
    let mut zero_len = good.clone();
    zero_len[14 + 2..14 + 4].copy_from_slice(&[0, 0]);
    let c = u16::from_be_bytes([zero_len[24], zero_len[25]]).wrapping_add(u16::from_be_bytes([good[16], good[17]]));
    zero_len[24..26].copy_from_slice(&c.to_be_bytes()); // the header checksum kept right
    for (what, f) in [("bad checksum", bad_sum), ("total length 0", zero_len)] {
        for _ in 0..200 {
            let fed = h.tally.fed;
            let v = h.feed(Port::Outer, f.clone(), PacketMeta::PLAIN);
            assert!(!kernel_took(&h, fed), "{what}: the kernel forwarded it");
            assert_eq!(v, Verdict::Dropped(px_gateway::DropReason::Malformed), "{what}");
        }
        assert!(h.take().is_empty(), "{what}: something reached a host");
    }
    assert_eq!(h.eng.counters().drops(px_gateway::DropReason::Malformed), 400);
    assert_eq!((h.eng.flows_in_kernel(), k.entries()), (1, 1), "the flow stays in the kernel");
}
