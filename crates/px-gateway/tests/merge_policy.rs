//! The merge policy of issue 11 and the ECN rules of issue 10 item 7, one
//! test per rule (docs/merge.md): ECN codepoints and the ACE bits (AE, CWR,
//! ECE) equal or no merge; CWR and AE on split pieces; adaptive PSH;
//! merging across timestamp changes.

mod common;

use std::time::Duration;

use common::*;
use px_gateway::{Config, FlushReason, Port, PshPolicy, Verdict};

const MSS_TS: usize = 1448;
const IMSS_TS_V4: usize = 8948;

fn seg(v6: bool, off: u32, len: usize) -> TcpSpec {
    TcpSpec::inbound(v6, 1, 1_000 + off, stream_bytes(1, off, len)).ts(1_000, 77)
}

/// The inner host's MSS (a connection whose handshake the gateway did not
/// see is merged only up to the safe size), then the segments that make the
/// flow bulk; returns the next stream offset.
fn warm(h: &mut Harness, v6: bool) -> u32 {
    announce_inner_mss(h, v6, 1, 1_000);
    for i in 0..2u32 {
        let v = h.feed_tcp(Port::Outer, &seg(v6, i * MSS_TS as u32, MSS_TS));
        assert!(matches!(v, Verdict::Forward { .. }), "warm-up {i}: {v:?}");
    }
    2 * MSS_TS as u32
}

fn finish(h: &mut Harness) -> Vec<Wire> {
    h.flush_all();
    let w = h.check_outputs().unwrap();
    h.oracle.verify().unwrap();
    h.check_accounting().unwrap();
    w.into_iter().filter(|(p, w)| *p == Port::Inner && !w.payload.is_empty()).map(|(_, w)| w).collect()
}

// ---- ECN (issue 10 item 7; DESIGN invariant 6) ---------------------------

/// A CE piece never joins ECT(0) pieces: the bytes that leave CE-marked are
/// exactly the bytes that arrived CE-marked (DCTCP, L4S and AccECN count
/// them). Fails on OR-ing CE over the merged pieces.
#[test]
fn ce_count_stays_exact() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        announce_inner_mss(&mut h, v6, 1, 1_000);
        let mut off = 0;
        for i in 0..6u32 {
            let mut s = seg(v6, off, MSS_TS);
            s.ecn = if i == 4 { 3 } else { 2 };
            let _ = h.feed_tcp(Port::Outer, &s);
            off += MSS_TS as u32;
        }
        let d = finish(&mut h);
        let ce: usize = d.iter().filter(|w| w.ecn() == 3).map(|w| w.payload.len()).sum();
        assert_eq!(ce, MSS_TS, "v6={v6}: CE bytes out = CE bytes in");
        assert!(d.iter().all(|w| w.ecn() == 3 || w.ecn() == 2));
        assert!(h.eng.counters().flushes(FlushReason::Unmergeable) >= 1);
    }
}

/// A CE first piece does not make ECT(0) and ECT(1) compatible.
#[test]
fn ce_first_piece_does_not_bridge_ect0_and_ect1() {
    let mut h = Harness::new(test_config());
    let mut off = warm(&mut h, false);
    for ecn in [3u8, 1, 2] {
        let mut s = seg(false, off, MSS_TS);
        s.ecn = ecn;
        let _ = h.feed_tcp(Port::Outer, &s);
        off += MSS_TS as u32;
    }
    let d = finish(&mut h);
    assert_eq!(d.len(), 5, "{:?}", d.iter().map(|w| (w.ecn(), w.payload.len())).collect::<Vec<_>>());
    assert_eq!(d[2..].iter().map(|w| w.ecn()).collect::<Vec<_>>(), [3, 1, 2]);
}

/// AE (byte 12 bit 0) is compared like ECE and CWR: a piece whose AE differs
/// does not join; pieces with equal AE merge and keep it.
#[test]
fn ae_bit_must_be_equal() {
    let mut h = Harness::new(test_config());
    let off = warm(&mut h, false);
    let _ = h.feed_tcp(Port::Outer, &seg(false, off, MSS_TS));
    let mut s = seg(false, off + MSS_TS as u32, MSS_TS);
    s.flags.ae = true;
    let _ = h.feed_tcp(Port::Outer, &s);
    let mut s = seg(false, off + 2 * MSS_TS as u32, MSS_TS);
    s.flags.ae = true;
    let _ = h.feed_tcp(Port::Outer, &s);
    let d = finish(&mut h);
    let got: Vec<_> = d.iter().map(|w| (w.tcp().unwrap().ns, w.payload.len())).collect();
    assert_eq!(got[2..], [(false, MSS_TS), (true, 2 * MSS_TS)]);
}

/// The SYN / SYN-ACK of a connection that negotiates AccECN
/// (draft-ietf-tcpm-accurate-ecn §3.1.1: SYN with AE, CWR and ECE set; a
/// SYN-ACK with one of the AccECN codepoints, here (AE, CWR, ECE) = 010).
fn accecn_handshake(h: &mut Harness, v6: bool) {
    let mss = |m| vec![etherparse::TcpOptionElement::MaximumSegmentSize(m)];
    let mut syn = TcpSpec::outbound(v6, 1, 500, vec![]).with_opts(mss(8960));
    syn.flags = Flags { syn: true, ae: true, cwr: true, ece: true, ..Flags::default() };
    let _ = h.feed_tcp(Port::Inner, &syn);
    let mut sa = TcpSpec::inbound(v6, 1, 999, vec![]).with_opts(mss(1460));
    sa.flags = Flags { syn: true, ack: true, cwr: true, ..Flags::default() };
    // It acknowledges the inner host's SYN, as a real SYN-ACK does.
    sa.ack = 501;
    let _ = h.feed_tcp(Port::Outer, &sa);
}

/// Splitting. Classic ECN (RFC 3168 §6.1.2): CWR is on the first new-data
/// segment only, so pieces after the first lose it (Linux GSO does the
/// same). AccECN: CWR is a bit of the ACE counter, not a signal, and every
/// piece must carry the same ACE (AE, CWR, ECE) or the peer reads a counter
/// jump (Linux keeps CWR with SKB_GSO_TCP_ACCECN).
#[test]
fn split_keeps_the_ace_field_on_every_piece_of_an_accecn_flow() {
    for accecn in [false, true] {
        let mut h = Harness::new(test_config());
        if accecn {
            accecn_handshake(&mut h, false);
        }
        let mut big = TcpSpec::outbound(false, 1, 501, stream_bytes(1, 0, 4000)).ts(1, 2);
        big.flags = Flags { ack: true, cwr: true, ae: true, ece: true, ..Flags::default() };
        let _ = h.feed_tcp(Port::Inner, &big);
        let w = h.check_outputs().unwrap();
        let pieces: Vec<_> = w.iter().filter(|(p, w)| *p == Port::Outer && !w.payload.is_empty()).collect();
        assert_eq!(pieces.len(), 3);
        for (i, (_, p)) in pieces.iter().enumerate() {
            let t = p.tcp().unwrap();
            assert_eq!(t.cwr, accecn || i == 0, "accecn={accecn} piece {i}: CWR");
            assert!(t.ns && t.ece, "accecn={accecn} piece {i}: AE and ECE are copied onto every piece");
        }
        h.oracle.verify().unwrap();
    }
}

/// The ACE rule outlives the flow entry. An AccECN connection whose entry
/// the gateway dropped (idle past `flow_idle_timeout`, or evicted while a
/// flood of new tuples filled the table) must still be cut with CWR on
/// every piece when it sends again: cut as classic ECN, the later pieces'
/// ACE would read 6 more CE marks (mod 8) than the sender counted, and the
/// peer would slow down for congestion that never happened. Fails if only
/// the MSSs are remembered.
#[test]
fn an_accecn_flow_keeps_its_ace_rule_after_its_entry_is_dropped() {
    for evict in [false, true] {
        let mut h = Harness::new(Config { max_flows: 64, ..test_config() });
        accecn_handshake(&mut h, false);
        let ack = TcpSpec::outbound(false, 1, 501, vec![]).ts(1, 2).flags(Flags::ack());
        let _ = h.feed_tcp(Port::Inner, &ack);
        if evict {
            // Spoofed SYNs on fresh tuples: two turns of the clock hand.
            for n in 0..256u16 {
                let syn = TcpSpec::new(outer_addr(false, 100 + n), inner_addr(false, 2), 40_000, 80, 1, vec![])
                    .flags(Flags { syn: true, ..Flags::default() });
                let _ = h.feed_tcp(Port::Outer, &syn);
            }
            assert!(h.eng.counters().flows_evicted >= 128, "the flood evicts");
        } else {
            h.advance(h.cfg.flow_idle_timeout * 2);
            assert!(h.eng.counters().flows_expired >= 1, "the idle flow is forgotten");
        }
        let mut big = TcpSpec::outbound(false, 1, 501, stream_bytes(1, 0, 4000)).ts(3, 4);
        big.flags = Flags { ack: true, cwr: true, ae: true, ece: true, ..Flags::default() };
        let _ = h.feed_tcp(Port::Inner, &big);
        let w = h.check_outputs().unwrap();
        let pieces: Vec<_> = w.iter().filter(|(p, w)| *p == Port::Outer && !w.payload.is_empty()).collect();
        assert_eq!(pieces.len(), 3, "evict={evict}");
        for (i, (_, p)) in pieces.iter().enumerate() {
            let t = p.tcp().unwrap();
            assert!(t.cwr && t.ns && t.ece, "evict={evict} piece {i}: the ACE field (AE, CWR, ECE) on every piece");
        }
        h.oracle.verify().unwrap();
    }
}

/// A GRO super-packet is several segments, and only its first can have
/// carried CWR: Linux GRO never merges a segment with CWR onto another
/// (`tcp_gro_receive` flushes on it), so the super-packet's CWR is its
/// first segment's. Cut to the outer MSS in an AccECN flow, the pieces of
/// that first segment keep CWR (one segment, one ACE); the pieces of the
/// later segments, which had CWR clear, must not gain it (their ACE would
/// read 2 higher, mod 8: CE marks that never happened).
#[test]
fn an_accecn_gro_super_packet_keeps_cwr_on_its_first_segment_only() {
    let mut h = Harness::new(test_config());
    accecn_handshake(&mut h, false);
    let g = 8948usize; // the inner host's segment size (9000 less IPv4, TCP and timestamps)
    let mut big = TcpSpec::outbound(false, 1, 501, stream_bytes(1, 0, 3 * g)).ts(1, 2);
    big.flags = Flags { ack: true, cwr: true, ece: true, ..Flags::default() };
    assert_eq!(h.feed(Port::Inner, big.build(), gro_meta(Checksum::Valid, g as u16)), Verdict::Consumed);
    let w = h.check_outputs().unwrap();
    let pieces: Vec<_> = w.iter().filter(|(p, w)| *p == Port::Outer && !w.payload.is_empty()).collect();
    assert_eq!(pieces.iter().map(|(_, w)| w.payload.len()).sum::<usize>(), 3 * g);
    for (_, p) in &pieces {
        let t = p.tcp().unwrap();
        // Where the piece starts in the super-packet's stream.
        let off = t.sequence_number.wrapping_sub(501) as usize;
        assert_eq!(t.cwr, off < g, "piece at offset {off}: CWR only on the first segment's pieces");
        assert!(t.ece, "piece at offset {off}: ECE on every piece");
    }
    h.oracle.verify().unwrap();
    h.check_accounting().unwrap();
}

/// Handed to GSO, a segment carrying CWR says so (VIRTIO_NET_HDR_GSO_ECN:
/// the kernel then keeps CWR on the first segment only). An AccECN
/// segment with CWR is cut in software, as the virtio header cannot ask the
/// kernel to keep CWR on every piece.
#[test]
fn gso_hand_off_of_cwr_sets_the_ecn_flag() {
    for accecn in [false, true] {
        let mut h = Harness::new(Config { outer_gso: true, ..test_config() });
        if accecn {
            accecn_handshake(&mut h, false);
        }
        let mut big = TcpSpec::outbound(false, 1, 501, stream_bytes(1, 0, 4000)).ts(1, 2);
        big.flags = Flags { ack: true, cwr: true, ..Flags::default() };
        let v = h.feed_tcp(Port::Inner, &big);
        if accecn {
            assert_eq!(v, Verdict::Consumed, "cut in software");
            let w = h.check_outputs().unwrap();
            assert!(
                w.iter().filter(|(p, w)| *p == Port::Outer && !w.payload.is_empty()).all(|(_, w)| w.tcp().unwrap().cwr)
            );
        } else {
            let Verdict::Forward { meta } = v else { panic!("{v:?}") };
            assert!(meta.gso.is_some_and(|g| g.ecn), "{meta:?}");
        }
        // Without CWR the flag stays clear.
        let mut plain = TcpSpec::outbound(false, 1, 4501, stream_bytes(1, 4000, 4000)).ts(1, 2);
        plain.flags = Flags::ack();
        let Verdict::Forward { meta } = h.feed_tcp(Port::Inner, &plain) else { panic!() };
        assert!(meta.gso.is_some_and(|g| !g.ecn));
    }
}

/// In an AccECN flow CWR is part of the ACE counter: pieces with the same
/// ACE merge (a flush on every CWR would stop half its segments merging);
/// a change of ACE ends the merge.
#[test]
fn accecn_pieces_with_equal_ace_merge_across_cwr() {
    let mut h = Harness::new(test_config());
    accecn_handshake(&mut h, false);
    let ack = |s: &mut TcpSpec| s.ack = 501;
    let mut off = 0;
    for i in 0..5u32 {
        let mut s = seg(false, off, MSS_TS);
        s.seq = 1_000 + off;
        ack(&mut s);
        s.flags.cwr = i >= 2;
        let _ = h.feed_tcp(Port::Outer, &s);
        off += MSS_TS as u32;
    }
    let d = finish(&mut h);
    let got: Vec<_> = d.iter().map(|w| (w.tcp().unwrap().cwr, w.payload.len())).collect();
    assert_eq!(got, [(false, MSS_TS), (false, MSS_TS), (true, 3 * MSS_TS)]);
}

// ---- PSH (issue 11) ------------------------------------------------------

fn psh(mut s: TcpSpec) -> TcpSpec {
    s.flags.psh = true;
    s
}

/// A bulk flow whose PSHs are followed by more data at once: PSH rides in
/// the aggregate (adaptive, the default), and the merged segment that holds
/// the PSH'd byte carries PSH.
#[test]
fn adaptive_psh_rides_for_a_flow_whose_data_keeps_coming() {
    let cfg = test_config();
    assert_eq!(cfg.psh, PshPolicy::Adaptive, "adaptive is the default");
    let mut h = Harness::new(cfg);
    let mut off = warm(&mut h, false);
    // Two writes whose PSH is followed at once by more data: shown bulk.
    pushes_followed_by_data(&mut h, &mut off, 2);
    let held_before = h.eng.held_bytes();
    let _ = h.feed_tcp(Port::Outer, &psh(seg(false, off, MSS_TS)));
    off += MSS_TS as u32;
    assert_eq!(h.eng.held_bytes(), held_before + MSS_TS, "the PSH piece rides");
    while h.eng.held_bytes() != 0 {
        let n = MSS_TS.min(IMSS_TS_V4 - h.eng.held_bytes());
        let _ = h.feed_tcp(Port::Outer, &seg(false, off, n));
        off += n as u32;
    }
    let d = finish(&mut h);
    let last = d.last().unwrap();
    assert_eq!(last.payload.len(), IMSS_TS_V4);
    assert!(last.tcp().unwrap().psh, "carries the PSH of a byte it holds");
}

/// Writes of one segment each, whose PSH is followed 10 µs later by the
/// next write: evidence that the flow is bulk.
fn pushes_followed_by_data(h: &mut Harness, off: &mut u32, n: usize) {
    for _ in 0..n {
        let _ = h.feed_tcp(Port::Outer, &psh(seg(false, *off, MSS_TS)));
        *off += MSS_TS as u32;
        h.advance(Duration::from_micros(10));
        let _ = h.feed_tcp(Port::Outer, &seg(false, *off, MSS_TS));
        *off += MSS_TS as u32;
        h.advance(Duration::from_micros(10));
    }
}

/// A riding PSH waits for the next write only the 32 µs grace while the
/// flow's evidence is young (two PSHs followed by data), and up to the
/// merge timeout once the flow is a steady bulk sender (eight in a row, no
/// data from the inner host): a write that ends a TSO burst is followed by
/// the next one a burst period later. A request from the inner host makes
/// the next PSH flush at once again. Fails if every riding PSH waits only
/// the grace, or if a young history waits longer.
#[test]
fn a_steady_bulk_senders_psh_waits_for_the_next_write() {
    let cfg = test_config();
    let timeout = cfg.merge_timeout;
    assert!(timeout > Duration::from_micros(100));
    let mut h = Harness::new(cfg);
    let mut off = warm(&mut h, false);
    pushes_followed_by_data(&mut h, &mut off, 2);
    let _ = h.feed_tcp(Port::Outer, &psh(seg(false, off, MSS_TS)));
    off += MSS_TS as u32;
    assert!(h.eng.held_bytes() > 0, "young evidence: the PSH rides");
    h.advance(Duration::from_micros(40));
    assert_eq!(h.eng.held_bytes(), 0, "young evidence: sent after the 32 µs grace");
    pushes_followed_by_data(&mut h, &mut off, 8);
    let _ = h.feed_tcp(Port::Outer, &psh(seg(false, off, MSS_TS)));
    off += MSS_TS as u32;
    h.advance(Duration::from_micros(40));
    assert!(h.eng.held_bytes() > 0, "steady bulk: still waiting for the next write after the grace");
    h.advance(timeout);
    assert_eq!(h.eng.held_bytes(), 0, "steady bulk: never past the merge timeout");
    // The inner host asks for something: the next PSH is an answer's end.
    let mut req_seq = 1u32;
    request(&mut h, &mut req_seq);
    let _ = h.feed_tcp(Port::Outer, &seg(false, off, MSS_TS));
    off += MSS_TS as u32;
    let _ = h.feed_tcp(Port::Outer, &psh(seg(false, off, MSS_TS)));
    assert_eq!(h.eng.held_bytes(), 0, "after a request the PSH flushes at once");
    finish(&mut h);
}

/// Request/response: every PSH is followed by silence (the sender waits
/// for an answer): PSH flushes at once, even after the flow was bulk.
#[test]
fn adaptive_psh_flushes_at_once_for_request_response() {
    let mut h = Harness::new(test_config());
    let mut off = warm(&mut h, false);
    for k in 0..4 {
        // A 3-segment response; the last carries PSH; then silence.
        for i in 0..3 {
            let s = seg(false, off, MSS_TS);
            let s = if i == 2 { psh(s) } else { s };
            let _ = h.feed_tcp(Port::Outer, &s);
            off += MSS_TS as u32;
        }
        assert_eq!(h.eng.held_bytes(), 0, "response {k}: flushed with its PSH, no wait");
        h.advance(Duration::from_millis(5));
    }
    finish(&mut h);
}

/// A 64-byte request from the inner host (flow 1) at `seq`.
fn request(h: &mut Harness, seq: &mut u32) {
    let mut req = TcpSpec::outbound(false, 1, *seq, vec![7; 64]).ts(5, 1_000);
    req.flags = Flags { psh: true, ..Flags::ack() };
    let _ = h.feed_tcp(Port::Inner, &req);
    *seq += 64;
}

/// Request/response on a short path: the next answer comes well within
/// the merge timeout, but only after the inner host asked for it (data the
/// other way). That PSH was followed by a wait for the inner host: PSH
/// flushes at once. (Timing alone would call this flow bulk.)
#[test]
fn adaptive_psh_flushes_when_the_inner_host_answers_in_between() {
    let mut h = Harness::new(test_config());
    let mut off = warm(&mut h, false);
    let mut req_seq = 1u32;
    for k in 0..6 {
        for i in 0..3 {
            let s = seg(false, off, MSS_TS);
            let s = if i == 2 { psh(s) } else { s };
            let _ = h.feed_tcp(Port::Outer, &s);
            off += MSS_TS as u32;
            h.advance(Duration::from_micros(2));
        }
        assert_eq!(h.eng.held_bytes(), 0, "answer {k}: flushed with its PSH, no wait");
        // The inner host reads it and sends the next 64-byte request at once.
        h.advance(Duration::from_micros(20));
        request(&mut h, &mut req_seq);
        h.advance(Duration::from_micros(20));
    }
    finish(&mut h);
}

/// An answer with a PSH in its middle (Linux forces one when half a
/// window is unpushed): that PSH is followed by more data, yet the answer's
/// last PSH flushes at once. One PSH followed by data since the inner
/// host's request is not yet a bulk flow.
#[test]
fn adaptive_psh_is_not_fooled_by_a_push_inside_an_answer() {
    let mut h = Harness::new(test_config());
    let mut off = warm(&mut h, false);
    let mut req_seq = 1u32;
    for k in 0..4 {
        request(&mut h, &mut req_seq);
        h.advance(Duration::from_micros(30));
        for i in 0..8 {
            let s = seg(false, off, MSS_TS);
            let s = if i == 3 || i == 7 { psh(s) } else { s };
            let _ = h.feed_tcp(Port::Outer, &s);
            off += MSS_TS as u32;
            h.advance(Duration::from_micros(1));
        }
        assert_eq!(h.eng.held_bytes(), 0, "answer {k}: its last PSH flushed at once");
        h.advance(Duration::from_micros(30));
    }
    finish(&mut h);
}

/// A flow that was bulk and turns to request/response: within two
/// silent PSHs it flushes at once again; each held PSH never waits longer
/// than the merge timeout.
#[test]
fn adaptive_psh_follows_the_flow_when_it_changes() {
    let cfg = test_config();
    let mut h = Harness::new(cfg.clone());
    let mut off = warm(&mut h, false);
    for _ in 0..4 {
        let _ = h.feed_tcp(Port::Outer, &psh(seg(false, off, MSS_TS)));
        off += MSS_TS as u32;
        let _ = h.feed_tcp(Port::Outer, &seg(false, off, MSS_TS));
        off += MSS_TS as u32;
    }
    let mut flushed_at_once = 0;
    for _ in 0..4 {
        let _ = h.feed_tcp(Port::Outer, &psh(seg(false, off, MSS_TS)));
        off += MSS_TS as u32;
        flushed_at_once += (h.eng.held_bytes() == 0) as u32;
        let t = h.now;
        h.advance(Duration::from_millis(5));
        assert!(h.sent.iter().chain(&h.out).all(|o| o.at <= t + cfg.merge_timeout));
    }
    assert!(flushed_at_once >= 2, "{flushed_at_once}");
    finish(&mut h);
}

/// Under `psh = hold`, a PSH segment cut across two merged segments: only
/// the one holding its last (PSH'd) byte carries PSH.
#[test]
fn psh_is_on_the_segment_that_holds_the_pushed_byte() {
    let mut h = Harness::new(Config { psh: PshPolicy::Hold, ..test_config() });
    let mut off = warm(&mut h, false);
    // 6 pieces (8688 B), then a PSH piece that straddles the 8948 boundary.
    for _ in 0..6 {
        let _ = h.feed_tcp(Port::Outer, &seg(false, off, MSS_TS));
        off += MSS_TS as u32;
    }
    let _ = h.feed_tcp(Port::Outer, &psh(seg(false, off, MSS_TS)));
    let d = finish(&mut h);
    let got: Vec<_> = d[2..].iter().map(|w| (w.payload.len(), w.tcp().unwrap().psh)).collect();
    assert_eq!(got, [(IMSS_TS_V4, false), (7 * MSS_TS - IMSS_TS_V4, true)]);
}

/// `psh = flush` keeps the old rule: PSH flushes at once, whatever the flow.
#[test]
fn flush_policy_flushes_every_psh() {
    let mut h = Harness::new(Config { psh: PshPolicy::Flush, ..test_config() });
    let mut off = warm(&mut h, false);
    for _ in 0..4 {
        let _ = h.feed_tcp(Port::Outer, &psh(seg(false, off, MSS_TS)));
        off += MSS_TS as u32;
        assert_eq!(h.eng.held_bytes(), 0);
        let _ = h.feed_tcp(Port::Outer, &seg(false, off, MSS_TS));
        off += MSS_TS as u32;
    }
    finish(&mut h);
}

// ---- Timestamps (issue 11) -----------------------------------------------

/// TSval rising and TSecr rising do not end a merge: the merged segment
/// carries the first TSval (RFC 7323 §4.3) and the newest TSecr, ACK and
/// window.
#[test]
fn merges_across_rising_tsval_and_tsecr() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let off = warm(&mut h, v6);
        for i in 0..4u32 {
            let mut s = seg(v6, off + i * MSS_TS as u32, MSS_TS).ts(1_000 + i / 2, 77 + i);
            s.ack = 10 + i;
            s.window = 700 + i as u16;
            assert_eq!(h.feed_tcp(Port::Outer, &s), Verdict::Consumed);
        }
        let d = finish(&mut h);
        let m = d.last().unwrap();
        assert_eq!(m.payload.len(), 4 * MSS_TS, "v6={v6}");
        assert_eq!(m.ts(), Some((1_000, 80)), "v6={v6}: first TSval, newest TSecr");
        let t = m.tcp().unwrap();
        assert_eq!((t.acknowledgment_number, t.window_size), (13, 703));
    }
}

/// A TSval or TSecr that goes back ends the merge (PAWS, RFC 7323 §5): the
/// piece leaves in its own segment.
#[test]
fn falling_tsval_or_tsecr_does_not_merge() {
    for (name, ts) in [("tsval", (999u32, 77u32)), ("tsecr", (1_000, 76))] {
        let mut h = Harness::new(test_config());
        let off = warm(&mut h, false);
        let _ = h.feed_tcp(Port::Outer, &seg(false, off, MSS_TS));
        let s = seg(false, off + MSS_TS as u32, MSS_TS).ts(ts.0, ts.1);
        let _ = h.feed_tcp(Port::Outer, &s);
        let d = finish(&mut h);
        assert_eq!(d.len(), 4, "{name}");
        assert_eq!(d[3].ts(), Some(ts), "{name}");
    }
}
