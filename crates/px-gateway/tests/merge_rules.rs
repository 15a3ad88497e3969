//! Inbound (outer → inner) merge rules of issue 2, one test per rule, on
//! frames built by etherparse and checked by etherparse.

mod common;

use std::time::Duration;

use common::*;
use etherparse::TcpOptionElement;
use px_gateway::{Config, FlushReason, Port, Verdict};

const ISN: u32 = 0xffff_e000; // the stream crosses the sequence wrap within the first holds
const MSS_TS: usize = 1448; // 1500 - 20 - 32
const IMSS_TS_V4: usize = 8948; // 9000 - 20 - 32
const IMSS_TS_V6: usize = 8928; // 9000 - 40 - 32

/// Inbound data segment of flow `n` at stream offset `off`, timestamps on.
fn seg(v6: bool, n: u16, off: u32, len: usize) -> TcpSpec {
    TcpSpec::inbound(v6, n, ISN.wrapping_add(off), stream_bytes(n as u32, off, len)).ts(1_000, 77)
}

/// The inner MSS, then the segments that make the flow bulk (they pass
/// unchanged); returns the next stream offset.
fn warm(h: &mut Harness, v6: bool, n: u16) -> u32 {
    announce_inner_mss(h, v6, n, ISN);
    for i in 0..2u32 {
        let v = h.feed_tcp(Port::Outer, &seg(v6, n, i * MSS_TS as u32, MSS_TS));
        assert!(matches!(v, Verdict::Forward { meta: PacketMeta::PLAIN }), "warm-up segment {i} must pass: {v:?}");
        h.advance(Duration::from_micros(5));
    }
    2 * MSS_TS as u32
}

fn inner_data(wires: &[(Port, Wire)]) -> Vec<&Wire> {
    wires.iter().filter(|(p, w)| *p == Port::Inner && !w.payload.is_empty()).map(|(_, w)| w).collect()
}

fn finish(h: &mut Harness) -> Vec<(Port, Wire)> {
    h.flush_all();
    let w = h.check_outputs().unwrap();
    h.oracle.verify().unwrap();
    h.check_accounting().unwrap();
    w
}

fn merges_to_exact_inner_mss(v6: bool, imss: usize) {
    let mut h = Harness::new(test_config());
    let mut off = warm(&mut h, v6, 1);
    for _ in 0..13 {
        assert_eq!(h.feed_tcp(Port::Outer, &seg(v6, 1, off, MSS_TS)), Verdict::Consumed);
        off += MSS_TS as u32;
        h.advance(Duration::from_micros(10));
    }
    let w = finish(&mut h);
    let sizes: Vec<usize> = inner_data(&w).iter().map(|w| w.payload.len()).collect();
    // 13 × 1448 = 18824 = 2 × imss + rest.
    let rest = 13 * MSS_TS - 2 * imss;
    assert_eq!(sizes, vec![MSS_TS, MSS_TS, imss, imss, rest]);
    let d = inner_data(&w);
    assert_eq!(d[2].tcp().unwrap().sequence_number, ISN.wrapping_add(2 * MSS_TS as u32));
    assert_eq!(d[3].tcp().unwrap().sequence_number, ISN.wrapping_add((2 * MSS_TS + imss) as u32));
    assert!(d.iter().all(|w| w.ip_len <= 9000));
    assert_eq!(d[2].ip_len, 9000, "a full merged segment fills the iMTU exactly");
    let c = h.eng.counters();
    assert_eq!(c.merged_in, 13);
    assert_eq!(c.merged_out, 3);
    assert_eq!(c.inner_tcp_full_out, 2);
    assert_eq!(c.inner_tcp_data_out, 5, "2 passed, 3 merged");
    assert!((c.conversion_yield() - 0.4).abs() < 1e-9);
}

#[test]
fn merges_contiguous_segments_to_exactly_the_inner_mss_v4() {
    merges_to_exact_inner_mss(false, IMSS_TS_V4);
}

#[test]
fn merges_contiguous_segments_to_exactly_the_inner_mss_v6() {
    merges_to_exact_inner_mss(true, IMSS_TS_V6);
}

#[test]
fn remainder_is_held_until_the_merge_timeout_then_flushed() {
    let cfg = test_config();
    let mut h = Harness::new(cfg.clone());
    let off = warm(&mut h, false, 1);
    let arrival = h.now;
    assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, off, MSS_TS)), Verdict::Consumed);
    assert_eq!(h.eng.held_bytes(), MSS_TS);
    assert_eq!(h.eng.poll_timeout(), Some(arrival + cfg.merge_timeout), "deadline = first byte's arrival + timeout");
    // A second piece joins; the deadline stays the first byte's.
    h.advance(Duration::from_micros(50));
    assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, off + MSS_TS as u32, MSS_TS)), Verdict::Consumed);
    assert_eq!(h.eng.poll_timeout(), Some(arrival + cfg.merge_timeout));
    let before = h.out.len();
    h.advance_to(arrival + cfg.merge_timeout - Duration::from_nanos(1));
    assert_eq!(h.out.len(), before, "nothing leaves before the deadline");
    h.advance_to(arrival + cfg.merge_timeout);
    assert_eq!(h.out.len(), before + 1, "the hold leaves at the deadline");
    assert_eq!(h.out.last().unwrap().at, arrival + cfg.merge_timeout);
    assert_eq!(h.eng.held_bytes(), 0);
    assert_eq!(h.eng.counters().flushes(FlushReason::Timeout), 1);
    let w = finish(&mut h);
    assert_eq!(inner_data(&w).last().unwrap().payload.len(), 2 * MSS_TS);
}

fn psh_or_fin_ends_merge(fin: bool) {
    let mut h = Harness::new(test_config());
    let off = warm(&mut h, false, 1);
    assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, off, MSS_TS)), Verdict::Consumed);
    let mut last = seg(false, 1, off + MSS_TS as u32, 700);
    last.flags = Flags { psh: !fin, fin, ..Flags::ack() };
    assert_eq!(h.feed_tcp(Port::Outer, &last), Verdict::Consumed);
    assert_eq!(h.eng.held_bytes(), 0, "flushed at once, no timer");
    assert_eq!(h.out.len(), 3);
    let w = finish(&mut h);
    let d = inner_data(&w);
    let m = d.last().unwrap();
    assert_eq!(m.payload.len(), MSS_TS + 700, "the PSH/FIN segment is merged as the last piece");
    let t = m.tcp().unwrap();
    assert_eq!((t.psh, t.fin), (!fin, fin));
    assert_eq!(h.eng.counters().flushes(FlushReason::PshFin), 1);
}

#[test]
fn psh_is_merged_as_the_last_piece_and_flushed_at_once() {
    psh_or_fin_ends_merge(false);
}

#[test]
fn fin_is_merged_as_the_last_piece_and_flushed_at_once() {
    psh_or_fin_ends_merge(true);
}

/// The opt-in `psh = hold` policy: a PSH segment does not end the merge;
/// the merged segment carries PSH, fills up, and never waits longer than
/// the merge timeout. FIN still flushes at once.
#[test]
fn psh_hold_policy_lets_psh_ride_within_the_timeout() {
    let cfg = Config { psh: px_gateway::PshPolicy::Hold, ..test_config() };
    let mut h = Harness::new(cfg.clone());
    let off = warm(&mut h, false, 1);
    let mut p = seg(false, 1, off, MSS_TS);
    p.flags = Flags { psh: true, ..Flags::ack() };
    assert_eq!(h.feed_tcp(Port::Outer, &p), Verdict::Consumed);
    assert_eq!(h.eng.held_bytes(), MSS_TS, "PSH does not flush under the hold policy");
    // Fill the segment: it leaves full, with PSH set.
    let mut at = off + MSS_TS as u32;
    while h.eng.held_bytes() != 0 {
        let n = MSS_TS.min(IMSS_TS_V4 - h.eng.held_bytes());
        assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, at, n)), Verdict::Consumed);
        at += n as u32;
    }
    let full = h.out.last().unwrap().frame.clone();
    let w = check_wire_frame(&full).unwrap();
    assert_eq!(w.payload.len(), IMSS_TS_V4);
    assert!(w.tcp().unwrap().psh, "the merged segment carries the PSH");
    // A held PSH piece still leaves by the merge timeout.
    let mut q = seg(false, 1, at, 500);
    q.flags = Flags { psh: true, ..Flags::ack() };
    let arrival = h.now;
    assert_eq!(h.feed_tcp(Port::Outer, &q), Verdict::Consumed);
    h.advance_to(arrival + cfg.merge_timeout);
    assert_eq!(h.eng.held_bytes(), 0);
    let w = check_wire_frame(&h.out.last().unwrap().frame).unwrap();
    assert!(w.tcp().unwrap().psh && w.payload.len() == 500);
    assert_eq!(h.eng.counters().flushes(FlushReason::PshFin), 0);
    finish(&mut h);
}

#[test]
fn rst_syn_urg_cwr_flush_then_pass_unchanged() {
    type Mk = fn(&mut TcpSpec);
    let cases: [(&str, Mk); 4] = [
        ("rst", |s| s.flags.rst = true),
        ("syn", |s| s.flags.syn = true),
        ("urg", |s| {
            s.flags.urg = true;
            s.urg_ptr = 10;
        }),
        ("cwr", |s| s.flags.cwr = true),
    ];
    for (name, mk) in cases {
        let mut h = Harness::new(test_config());
        let off = warm(&mut h, false, 1);
        assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, off, MSS_TS)), Verdict::Consumed);
        let mut s = seg(false, 1, off + MSS_TS as u32, 500);
        mk(&mut s);
        let frame = s.build();
        let v = h.feed(Port::Outer, frame.clone(), PacketMeta::PLAIN);
        assert!(matches!(v, Verdict::Forward { .. }), "{name}: {v:?}");
        let n = h.out.len();
        assert!(h.out[n - 2].port == Port::Inner && !h.out[n - 2].forwarded, "{name}: the hold goes first");
        if name != "syn" {
            assert_eq!(h.out[n - 1].frame, frame, "{name}: passes byte for byte");
        }
        assert_eq!(h.eng.counters().flushes(FlushReason::ControlFlag), 1, "{name}");
        let w = h.check_outputs().unwrap();
        h.oracle.verify().unwrap();
        h.check_accounting().unwrap();
        assert_eq!(inner_data(&w).len(), 4, "{name}");
    }
}

#[test]
fn out_of_order_and_retransmission_flush_then_pass_unchanged() {
    let mut h = Harness::new(test_config());
    let off = warm(&mut h, false, 1);
    assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, off, MSS_TS)), Verdict::Consumed);
    // A gap: the segment after a lost one.
    let gap = seg(false, 1, off + 2 * MSS_TS as u32, MSS_TS).build();
    assert_eq!(h.feed(Port::Outer, gap.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.out.last().unwrap().frame, gap);
    assert_eq!(h.eng.counters().flushes(FlushReason::OutOfOrder), 1);
    // The retransmission filling the hole also passes unchanged.
    let rtx = seg(false, 1, off + MSS_TS as u32, MSS_TS).build();
    assert_eq!(h.feed(Port::Outer, rtx.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    // An old retransmission (already sent) passes unchanged too.
    let old = seg(false, 1, 0, MSS_TS).build();
    assert_eq!(h.feed(Port::Outer, old, PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    finish(&mut h);
}

#[test]
fn retransmission_overlapping_held_data_keeps_order() {
    let mut h = Harness::new(test_config());
    let off = warm(&mut h, false, 1);
    for i in 0..3 {
        assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, off + i * MSS_TS as u32, MSS_TS)), Verdict::Consumed);
    }
    // Overlaps the middle of what is held.
    let v = h.feed_tcp(Port::Outer, &seg(false, 1, off + 1000, 2000));
    assert!(matches!(v, Verdict::Forward { .. }));
    finish(&mut h);
}

#[test]
fn sack_carrying_segments_are_not_merged() {
    let mut h = Harness::new(test_config());
    let off = warm(&mut h, false, 1);
    assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, off, MSS_TS)), Verdict::Consumed);
    let s = seg(false, 1, off + MSS_TS as u32, 1000).with_opts(vec![
        TcpOptionElement::Noop,
        TcpOptionElement::Noop,
        TcpOptionElement::SelectiveAcknowledgement((5_000, 6_000), [None, None, None]),
        TcpOptionElement::Noop,
        TcpOptionElement::Noop,
        TcpOptionElement::Timestamp(1_000, 77),
    ]);
    let f = s.build();
    assert_eq!(h.feed(Port::Outer, f.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.out.last().unwrap().frame, f);
    finish(&mut h);
}

/// A segment that differs from the held one in one attribute does not join:
/// the hold leaves alone, unchanged in that attribute.
#[test]
fn differing_tsecr_options_dscp_ect_ttl_df_are_not_merged() {
    type Mk = fn(&mut TcpSpec);
    let cases: [(&str, Mk); 8] = [
        // TSecr may rise within a merge (issue 11), never fall.
        ("older tsecr", |s| {
            s.opts = vec![TcpOptionElement::Noop, TcpOptionElement::Noop, TcpOptionElement::Timestamp(1_000, 76)]
        }),
        ("no options", |s| s.opts.clear()),
        ("other option layout", |s| {
            s.opts = vec![TcpOptionElement::Timestamp(1_000, 77), TcpOptionElement::Noop, TcpOptionElement::Noop]
        }),
        ("dscp", |s| s.dscp = 10),
        ("ect", |s| s.ecn = 2),
        ("ttl", |s| s.ttl = 63),
        ("df", |s| s.df = false),
        ("older ack", |s| s.ack = 999),
    ];
    for v6 in [false, true] {
        for (name, mk) in cases {
            if v6 && name == "df" {
                continue;
            }
            let mut h = Harness::new(test_config());
            let off = warm(&mut h, v6, 1);
            assert_eq!(h.feed_tcp(Port::Outer, &seg(v6, 1, off, MSS_TS)), Verdict::Consumed);
            let mut s = seg(v6, 1, off + MSS_TS as u32, MSS_TS);
            mk(&mut s);
            // Keep the frame within the eMTU whatever the options became.
            s.payload.truncate(1500 - s.ip_tcp_header_len());
            let _ = h.feed_tcp(Port::Outer, &s);
            let w = finish(&mut h);
            let d = inner_data(&w);
            assert_eq!(d.len(), 4, "{name} v6={v6}: {:?}", d.iter().map(|w| w.payload.len()).collect::<Vec<_>>());
            assert_eq!(d[2].payload.len(), MSS_TS, "{name} v6={v6}: the held segment left alone");
            assert!(h.eng.counters().flushes(FlushReason::Unmergeable) >= 1, "{name} v6={v6}");
        }
    }
}

#[test]
fn first_tsval_kept_newest_ack_and_window_win() {
    let mut h = Harness::new(test_config());
    let off = warm(&mut h, false, 1);
    for i in 0..3u32 {
        let mut s = seg(false, 1, off + i * MSS_TS as u32, MSS_TS).ts(2_000 + i, 77);
        s.ack = 5_000 + i * 100;
        s.window = 600 + i as u16;
        assert_eq!(h.feed_tcp(Port::Outer, &s), Verdict::Consumed);
    }
    let w = finish(&mut h);
    let m = *inner_data(&w).last().unwrap();
    assert_eq!(m.payload.len(), 3 * MSS_TS);
    assert_eq!(m.ts(), Some((2_000, 77)), "TSval of the first piece");
    let t = m.tcp().unwrap();
    assert_eq!(t.acknowledgment_number, 5_200);
    assert_eq!(t.window_size, 602);
}

/// Issue 10 item 7: a CE piece is not OR-ed into an ECT merge (the CE count
/// stays exact); it leaves in its own segment with its mark, and so do
/// pieces after it until the codepoint settles.
#[test]
fn ce_piece_leaves_alone_with_its_mark() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        announce_inner_mss(&mut h, v6, 1, ISN);
        let mut off = 0;
        for i in 0..6u32 {
            let mut s = seg(v6, 1, off, MSS_TS);
            s.ecn = if i == 4 { 3 } else { 2 };
            let _ = h.feed_tcp(Port::Outer, &s);
            off += MSS_TS as u32;
        }
        let w = finish(&mut h);
        let d = inner_data(&w);
        let got: Vec<_> = d.iter().map(|w| (w.ecn(), w.payload.len())).collect();
        assert_eq!(got, [(2, MSS_TS), (2, MSS_TS), (2, 2 * MSS_TS), (3, MSS_TS), (2, MSS_TS)], "v6={v6}");
    }
}

#[test]
fn flows_not_yet_bulk_are_never_held() {
    let mut h = Harness::new(test_config());
    // First segment of a flow, and a second smaller one: not bulk.
    for (off, len) in [(0u32, MSS_TS), (MSS_TS as u32, 600)] {
        let v = h.feed_tcp(Port::Outer, &seg(false, 1, off, len));
        assert_eq!(v, Verdict::Forward { meta: PacketMeta::PLAIN });
        assert_eq!(h.eng.held_bytes(), 0);
    }
    finish(&mut h);
}

/// An interactive flow (small segments in a row, no PSH) has not shown bulk
/// behaviour: its segments must not wait for the merge timeout.
#[test]
fn small_segments_in_a_row_are_not_bulk() {
    let mut h = Harness::new(test_config());
    for i in 0..20u32 {
        let v = h.feed_tcp(Port::Outer, &seg(false, 1, i * 200, 200));
        assert_eq!(v, Verdict::Forward { meta: PacketMeta::PLAIN }, "segment {i} of a 200-byte stream");
        h.advance(Duration::from_millis(1));
    }
    finish(&mut h);
}

#[test]
fn pure_ack_flushes_the_hold_first() {
    let mut h = Harness::new(test_config());
    let off = warm(&mut h, false, 1);
    assert_eq!(h.feed_tcp(Port::Outer, &seg(false, 1, off, MSS_TS)), Verdict::Consumed);
    let ack = seg(false, 1, off + MSS_TS as u32, 0);
    assert_eq!(h.feed_tcp(Port::Outer, &ack), Verdict::Forward { meta: PacketMeta::PLAIN });
    assert_eq!(h.eng.counters().flushes(FlushReason::PureAck), 1);
    finish(&mut h);
}

#[test]
fn partial_checksum_inputs_leave_with_valid_checksums() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let meta = rx_meta(PARTIAL);
        let mut off = 0;
        for _ in 0..9 {
            let mut f = seg(v6, 1, off, MSS_TS).build();
            make_partial(&mut f);
            assert!(check_wire_frame(&f).is_err(), "the input checksum is really partial");
            let _ = h.feed(Port::Outer, f, meta);
            off += MSS_TS as u32;
        }
        // Outbound too (passes, and split).
        let mut f = TcpSpec::outbound(v6, 1, 5, stream_bytes(9, 0, 1000)).build();
        make_partial(&mut f);
        assert_eq!(h.feed(Port::Inner, f, meta), Verdict::Forward { meta: PacketMeta::PLAIN });
        let mut f = TcpSpec::outbound(v6, 1, 1005, stream_bytes(9, 1000, 5000)).build();
        make_partial(&mut f);
        assert_eq!(h.feed(Port::Inner, f, meta), Verdict::Consumed);
        let w = finish(&mut h);
        assert!(w.len() >= 2 + 2 + 1 + 4, "v6={v6}: {} frames", w.len());
    }
}

/// A GRO super-packet (64 KB of 1448-byte segments) on a bulk flow is merged
/// into inner-MSS segments; on a flow that is not bulk yet it passes and is
/// cut back to the segment size it was made of.
#[test]
fn gro_super_packets_are_merged_or_cut_back() {
    let n = 45usize;
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        announce_inner_mss(&mut h, v6, 1, ISN);
        let meta = gro_meta(Checksum::Valid, MSS_TS as u16);
        let first = seg(v6, 1, 0, n * MSS_TS);
        assert_eq!(h.feed(Port::Outer, first.build(), meta), Verdict::Consumed, "cut in software");
        let w = h.check_outputs().unwrap();
        assert_eq!(w.len(), n);
        assert!(w.iter().all(|(p, w)| *p == Port::Inner && w.payload.len() == MSS_TS));
        h.out.clear();
        let second = seg(v6, 1, (n * MSS_TS) as u32, n * MSS_TS);
        assert_eq!(h.feed(Port::Outer, second.build(), meta), Verdict::Consumed);
        let imss = if v6 { IMSS_TS_V6 } else { IMSS_TS_V4 };
        let w = h.check_outputs().unwrap();
        assert_eq!(w.len(), n * MSS_TS / imss, "v6={v6}");
        assert!(w.iter().all(|(_, w)| w.payload.len() == imss));
        h.out.clear();
        h.flush_all();
        let w = h.check_outputs().unwrap();
        assert_eq!(w[0].1.payload.len(), n * MSS_TS % imss);
        h.oracle.verify().unwrap();
        h.check_accounting().unwrap();
    }
}

#[test]
fn gro_super_packet_passed_with_inner_gso_keeps_its_segment_size() {
    let cfg = Config { inner_gso: true, ..test_config() };
    let mut h = Harness::new(cfg);
    let meta = gro_meta(Checksum::Valid, MSS_TS as u16);
    let v = h.feed(Port::Outer, seg(false, 1, 0, 20 * MSS_TS).build(), meta);
    match v {
        Verdict::Forward { meta: PacketMeta { gso: Some(g), .. } } => assert_eq!(g.size as usize, MSS_TS),
        v => panic!("{v:?}"),
    }
    finish(&mut h);
}

/// With inner GSO, a GRO super-packet on a bulk flow with nothing held is
/// passed on, rewritten in place, as one GSO frame of inner-MSS pieces (its
/// payload never copied); only its tail is held. The next super-packet
/// first completes that hold (sent before it), then passes on its own
/// whole pieces from where the hold ended. A super-packet that ends the
/// merge (PSH here) goes whole, its last piece shorter and pushed.
#[test]
fn gro_super_packets_go_on_as_gso_frames_of_inner_mss_pieces() {
    let n = 45usize;
    for v6 in [false, true] {
        let imss = if v6 { IMSS_TS_V6 } else { IMSS_TS_V4 };
        let mut h = Harness::new(Config { inner_gso: true, ..test_config() });
        let mut off = warm(&mut h, v6, 1);
        h.check_outputs().unwrap();
        let meta = gro_meta(Checksum::Valid, MSS_TS as u16);
        let total = n * MSS_TS;
        let whole = total / imss * imss;
        // 1: nothing held.
        let v = h.feed(Port::Outer, seg(v6, 1, off, total).build(), meta);
        let Verdict::ForwardPart { meta: m, start, end } = v else { panic!("v6={v6}: {v:?}") };
        assert_eq!((start, m.gso.map(|g| g.size as usize)), (0, Some(imss)), "v6={v6}");
        assert_eq!(end - start - m.hdr_len as usize, whole);
        let w = h.check_outputs().unwrap();
        let d = inner_data(&w);
        assert_eq!(d.len(), whole / imss);
        assert!(d.iter().all(|w| w.payload.len() == imss && !w.tcp().unwrap().psh));
        assert_eq!(d[0].tcp().unwrap().sequence_number, ISN.wrapping_add(off));
        off += total as u32;
        // The inner host acknowledges 1's pieces: the window opens for 2.
        inner_acks(&mut h, v6, 1, ISN.wrapping_add(off - (total - whole) as u32));
        // 2: the tail of 1 is held; this one completes it first.
        let held = total - whole;
        let mut s = seg(v6, 1, off, total);
        s.flags = Flags { psh: true, ..Flags::ack() };
        let v = h.feed(Port::Outer, s.build(), meta);
        let Verdict::ForwardPart { meta: m, start, end } = v else { panic!("v6={v6}: {v:?}") };
        let head = imss - held;
        assert_eq!(start, head, "the headers move up to the first byte not held");
        assert_eq!(end - start - m.hdr_len as usize, total - head, "PSH: all the rest goes, the last piece short");
        let w = h.check_outputs().unwrap();
        let d = inner_data(&w);
        let rest = total - head;
        assert_eq!(d.len(), 1 + rest.div_ceil(imss));
        assert_eq!(d[0].payload.len(), imss, "the completed hold, sent before the GSO frame");
        assert_eq!(d[0].tcp().unwrap().sequence_number, ISN.wrapping_add(off - held as u32));
        assert_eq!(d[1].tcp().unwrap().sequence_number, ISN.wrapping_add(off + head as u32));
        let last = d.last().unwrap();
        assert_eq!(last.payload.len(), rest % imss);
        assert!(last.tcp().unwrap().psh && d[..d.len() - 1].iter().all(|w| !w.tcp().unwrap().psh));
        let c = h.eng.counters().clone();
        assert_eq!(c.merged_gso_out, 2);
        assert_eq!(c.merged_in, 2);
        assert_eq!(c.merged_out as usize, whole / imss + 1 + rest.div_ceil(imss));
        assert_eq!(c.inner_tcp_full_out as usize, whole / imss + 1 + rest / imss);
        assert_eq!(
            c.inner_tcp_data_out as usize,
            2 + whole / imss + 1 + rest.div_ceil(imss),
            "2 warm-up segments passed"
        );
        finish(&mut h);
    }
}

#[test]
fn merge_respects_the_inner_hosts_mss() {
    let mut h = Harness::new(test_config());
    // The inner host advertises MSS 4000.
    open_connection(&mut h, false, 1, ISN, Some(4000));
    let mut off = 0;
    for _ in 0..10 {
        let _ = h.feed_tcp(Port::Outer, &seg(false, 1, off, MSS_TS));
        off += MSS_TS as u32;
    }
    let w = finish(&mut h);
    let d = inner_data(&w);
    // 4000 less the 12 bytes of timestamp option (RFC 6691).
    assert!(d.iter().all(|w| w.payload.len() <= 3988), "{:?}", d.iter().map(|w| w.payload.len()).collect::<Vec<_>>());
    assert!(d.iter().any(|w| w.payload.len() == 3988));
}

/// IPv4 options and IPv6 extension headers: never merged (a careful GRO
/// does not), passed unchanged; outbound, cut with the headers in every piece.
#[test]
fn ip_options_and_extension_headers_are_not_merged_and_survive_a_split() {
    for v6 in [false, true] {
        // IPv4: Router Alert; IPv6: hop-by-hop with a PadN option.
        let ext = if v6 { vec![1, 4, 0, 0, 0, 0] } else { vec![0x94, 0x04, 0, 0] };
        let mut h = Harness::new(test_config());
        let off = warm(&mut h, v6, 1);
        let mut s = seg(v6, 1, off, 1000);
        s.ip_ext = ext.clone();
        let f = s.build();
        assert_eq!(
            h.feed(Port::Outer, f.clone(), PacketMeta::PLAIN),
            Verdict::Forward { meta: PacketMeta::PLAIN },
            "v6={v6}"
        );
        assert_eq!(h.out.last().unwrap().frame, f);
        let mut big = TcpSpec::outbound(v6, 1, 5, stream_bytes(7, 0, 8000)).ts(1, 2);
        big.ip_ext = ext.clone();
        assert_eq!(h.feed_tcp(Port::Inner, &big), Verdict::Consumed);
        let w = finish(&mut h);
        let pieces: Vec<_> = w.iter().filter(|(p, _)| *p == Port::Outer).collect();
        assert!(pieces.len() > 1);
        for (_, p) in pieces {
            assert!(p.ip_len <= 1500);
            match &p.net {
                etherparse::NetHeaders::Ipv4(ip, _) => assert_eq!(ip.options.as_slice(), &ext[..]),
                etherparse::NetHeaders::Ipv6(_, e) => assert!(e.hop_by_hop_options.is_some()),
                _ => unreachable!(),
            }
        }
    }
}

/// An inner host whose SYN carried no MSS option takes only the default MSS
/// (RFC 9293 §3.7.1: 536 for IPv4; RFC 8200 §8.3: 1220 for IPv6): merged
/// segments toward it must not be larger, as they already are not toward an
/// outer host that sent no MSS.
#[test]
fn inner_host_without_mss_gets_the_default_mss() {
    for (v6, default) in [(false, 536usize), (true, 1220)] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, v6, 1, ISN, None);
        // IPv4 without options (536 bytes make a flow bulk), IPv6 with
        // timestamps (the MSS less the option, RFC 6691).
        let piece = if v6 { default - 12 } else { default };
        let mut off = 0;
        for _ in 0..12 {
            let mut s = seg(v6, 1, off, piece);
            if !v6 {
                s.opts.clear();
            }
            let _ = h.feed_tcp(Port::Outer, &s);
            off += piece as u32;
        }
        let w = finish(&mut h);
        let sizes: Vec<usize> = inner_data(&w).iter().map(|w| w.payload.len()).collect();
        assert!(sizes.iter().all(|s| *s <= piece), "v6={v6}: {sizes:?}");
    }
}
