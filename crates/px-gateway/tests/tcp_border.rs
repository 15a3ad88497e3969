//! TCP at a real border (issue 10, items 2–5 and 12): tiny and spoofed MSS,
//! SYNs on live connections, TCP-MD5 / TCP-AO, SYN with data, flows whose
//! SYN the gateway did not see, held data never overtaken, urgent pointer
//! and IP ID of split pieces. Frames are built and checked by etherparse.

mod common;

use std::time::Duration;

use common::*;
use etherparse::TcpOptionElement;
use px_gateway::{Config, DropReason, Port, Verdict};

const ISN: u32 = 0x1000_0000;
/// Outer MSS less the 12 bytes of timestamps, per IP version.
fn omss_ts(v6: bool) -> usize {
    if v6 { 1428 } else { 1448 }
}

/// A SYN (or SYN-ACK) of flow 1 from outside or inside, with an MSS option.
fn syn(from_outside: bool, v6: bool, seq: u32, mss: u16, ack: bool) -> TcpSpec {
    let mut s = if from_outside { TcpSpec::inbound(v6, 1, seq, vec![]) } else { TcpSpec::outbound(v6, 1, seq, vec![]) };
    s.opts = vec![TcpOptionElement::MaximumSegmentSize(mss), TcpOptionElement::Noop, TcpOptionElement::Noop];
    s.flags = Flags { syn: true, ack, ..Flags::default() };
    s
}

/// Inbound data of flow 1 at stream offset `off`, timestamps on.
fn inbound(v6: bool, off: u32, len: usize) -> TcpSpec {
    TcpSpec::inbound(v6, 1, ISN.wrapping_add(off), stream_bytes(1, off, len)).ts(1_000, 77)
}

/// Outbound data of flow 1 at offset `off` of the inner host's stream.
fn outbound(v6: bool, off: u32, len: usize) -> TcpSpec {
    TcpSpec::outbound(v6, 1, (INNER_ISN + 1).wrapping_add(off), stream_bytes(2, off, len)).ts(500, 600)
}

/// The inner host resets flow 1 (IPv4).
fn reset_from_inside(h: &mut Harness) {
    let mut r = outbound(false, 0, 0);
    r.flags = Flags { rst: true, ack: true, ..Flags::default() };
    let _ = h.feed_tcp(Port::Inner, &r);
}

/// Payload sizes of the TCP data frames that left on `port`.
fn sizes(w: &[(Port, Wire)], port: Port) -> Vec<usize> {
    w.iter().filter(|(p, w)| *p == port && !w.payload.is_empty()).map(|(_, w)| w.payload.len()).collect()
}

// ---- item 2: tiny or spoofed MSS ----------------------------------------------

/// A spoofed SYN with MSS 1 on the 4-tuple of a running connection changes
/// nothing: it passes untouched (the end host answers it with a challenge
/// ACK, RFC 5961 §4) and the flow's outbound pieces stay full-sized.
#[test]
fn spoofed_syn_with_mss_1_leaves_a_live_flows_split_size_unchanged() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, v6, 1, ISN, Some(8960));
        let _ = h.feed_tcp(Port::Inner, &outbound(v6, 0, 8000));
        assert!(sizes(&h.check_outputs().unwrap(), Port::Outer).iter().all(|s| *s == omss_ts(v6) || *s < 1400));
        let spoof = syn(true, v6, 0x5555_0000, 1, false).build();
        let v = h.feed(Port::Outer, spoof.clone(), PacketMeta::PLAIN);
        assert_eq!(v, Verdict::Forward { meta: PacketMeta::PLAIN });
        assert_eq!(h.out.last().unwrap().frame, spoof, "v6={v6}: the spoofed SYN passes byte for byte");
        assert_eq!(h.eng.counters().syns_ignored, 1);
        let _ = h.feed_tcp(Port::Inner, &outbound(v6, 8000, 8000));
        let s = sizes(&h.check_outputs().unwrap(), Port::Outer);
        assert_eq!(s[0], omss_ts(v6), "v6={v6}: {s:?}");
        assert_eq!(s.len(), 8000usize.div_ceil(omss_ts(v6)), "v6={v6}: {s:?}");
        h.check_accounting().unwrap();
    }
}

/// An MSS below Linux's `tcp_min_snd_mss` (48), zero included, counts as 48
/// (`tcp_sync_mss`): pieces carry 48 less the options, not 8 bytes.
#[test]
fn a_tiny_announced_mss_is_floored_like_linux() {
    for mss in [0u16, 1, 47] {
        let mut h = Harness::new(test_config());
        let _ = h.feed_tcp(Port::Outer, &syn(true, false, ISN.wrapping_sub(1), mss, false));
        let mut sa = syn(false, false, INNER_ISN, 8960, true);
        sa.ack = ISN;
        let _ = h.feed_tcp(Port::Inner, &sa);
        let _ = h.feed_tcp(Port::Inner, &outbound(false, 0, 720));
        let s = sizes(&h.check_outputs().unwrap(), Port::Outer);
        assert_eq!(s, vec![36; 20], "MSS {mss}: 48 less 12 bytes of timestamps");
        h.oracle.verify().unwrap();
    }
}

/// Once the connection ended (RST from inside, or FIN both ways), a SYN on
/// its tuple is a new connection and teaches its MSS. A blind RST from
/// outside, far from the expected sequence, ends nothing.
#[test]
fn a_syn_after_the_connection_ended_starts_a_new_one() {
    for end in ["rst-inside", "fin-both", "blind-rst"] {
        let mut h = Harness::new(test_config());
        open_connection(&mut h, false, 1, ISN, Some(8960));
        match end {
            "rst-inside" => {
                reset_from_inside(&mut h);
            }
            "fin-both" => {
                let mut a = outbound(false, 0, 0);
                a.flags = Flags { fin: true, ack: true, ..Flags::default() };
                let _ = h.feed_tcp(Port::Inner, &a);
                let mut b = inbound(false, 0, 0);
                b.flags = Flags { fin: true, ack: true, ..Flags::default() };
                let _ = h.feed_tcp(Port::Outer, &b);
            }
            _ => {
                let mut r = inbound(false, 0x4000_0000, 0);
                r.flags = Flags { rst: true, ..Flags::default() };
                let _ = h.feed_tcp(Port::Outer, &r);
            }
        }
        let _ = h.feed_tcp(Port::Outer, &syn(true, false, 0x9000_0000, 1200, false));
        let _ = h.feed_tcp(Port::Inner, &outbound(false, 100, 4000));
        let s = sizes(&h.check_outputs().unwrap(), Port::Outer);
        let want = if end == "blind-rst" { 1448 } else { 1188 };
        assert_eq!(s[0], want, "{end}: {s:?}");
    }
}

// ---- item 12: a SYN resets the expected sequence; nothing overtakes a hold ----

/// A new connection on a tuple whose old stream ended far "ahead" in
/// sequence space merges again: the SYN reset the expected sequence.
#[test]
fn a_new_connection_resets_the_expected_sequence() {
    let mut h = Harness::new(test_config());
    open_connection(&mut h, false, 1, ISN, Some(8960));
    for i in 0..8u32 {
        let _ = h.feed_tcp(Port::Outer, &inbound(false, i * 1448, 1448));
    }
    reset_from_inside(&mut h);
    h.flush_all();
    h.check_outputs().unwrap();
    // The new connection's ISN lies just behind the old stream's end.
    let isn2 = ISN.wrapping_add(8 * 1448).wrapping_sub(100_000);
    let _ = h.feed_tcp(Port::Outer, &syn(true, false, isn2.wrapping_sub(1), 1460, false));
    let mut sa = syn(false, false, 5_000, 8960, true);
    sa.ack = isn2;
    let _ = h.feed_tcp(Port::Inner, &sa);
    for i in 0..12u32 {
        let s = TcpSpec::inbound(false, 1, isn2.wrapping_add(i * 1448), stream_bytes(9, i * 1448, 1448)).ts(5, 6);
        let _ = h.feed_tcp(Port::Outer, &s);
    }
    h.flush_all();
    let s = sizes(&h.check_outputs().unwrap(), Port::Inner);
    assert!(s.contains(&8948), "the new connection merges: {s:?}");
    h.oracle.verify().unwrap();
    h.check_accounting().unwrap();
}

/// A segment passed on unmerged never leaves before the data its flow
/// holds, whatever the MSS: here a new connection from inside (after the
/// old one was reset) announces a tiny MSS while the flow holds data.
#[test]
fn held_data_is_never_overtaken_whatever_the_mss() {
    let mut h = Harness::new(test_config());
    open_connection(&mut h, false, 1, ISN, Some(8960));
    for i in 0..3u32 {
        let _ = h.feed_tcp(Port::Outer, &inbound(false, i * 1448, 1448));
    }
    assert!(h.eng.held_bytes() > 0);
    reset_from_inside(&mut h);
    let _ = h.feed_tcp(Port::Inner, &syn(false, false, 9_000, 60, false));
    let _ = h.feed_tcp(Port::Outer, &inbound(false, 3 * 1448, 1448));
    h.flush_all();
    let w = h.check_outputs().unwrap();
    let seqs: Vec<u32> = w
        .iter()
        .filter(|(p, w)| *p == Port::Inner && !w.payload.is_empty())
        .map(|(_, w)| w.tcp().unwrap().sequence_number.wrapping_sub(ISN))
        .collect();
    let mut sorted = seqs.clone();
    sorted.sort();
    assert_eq!(seqs, sorted, "inner data in stream order");
    assert_eq!(h.eng.held_bytes(), 0);
    h.oracle.verify().unwrap();
}

// ---- item 3: TCP-MD5 and TCP-AO ------------------------------------------------

/// MD5 and AO flows pass untouched: no MSS rewrite in either direction,
/// never merged, never split; too big for the egress gets the router's
/// treatment (DF: ICMP and a counted drop; IPv4 without DF: fragments).
#[test]
fn md5_and_ao_flows_pass_untouched() {
    for kind in [19u8, 29] {
        for v6 in [false, true] {
            let mut h = Harness::new(test_config());
            let omss = if v6 { 1440 } else { 1460 };
            let s = syn(true, v6, ISN.wrapping_sub(1), omss, false);
            let f = with_raw_options(&s, &signature(kind, Some(omss)));
            assert_eq!(h.feed(Port::Outer, f.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
            assert_eq!(h.out.last().unwrap().frame, f, "kind {kind} v6={v6}: SYN not raised");
            let mut sa = syn(false, v6, INNER_ISN, 8960, true);
            sa.ack = ISN;
            let f = with_raw_options(&sa, &signature(kind, Some(8960)));
            assert_eq!(h.feed(Port::Inner, f.clone(), PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
            assert_eq!(h.out.last().unwrap().frame, f, "kind {kind} v6={v6}: SYN-ACK not clamped");
            // Bulk data in: never held.
            for i in 0..8u32 {
                let f = with_raw_options(&inbound(v6, i * 1440, 1400), &signature(kind, None));
                let v = h.feed(Port::Outer, f.clone(), PacketMeta::PLAIN);
                assert_eq!(v, Verdict::Forward { meta: PacketMeta::PLAIN }, "kind {kind} v6={v6} segment {i}");
                assert_eq!(h.out.last().unwrap().frame, f);
            }
            // Too big out, DF set (IPv6: always): ICMP back, counted drop.
            let big = with_raw_options(&outbound(v6, 0, 4000), &signature(kind, None));
            let v = h.feed(Port::Inner, big, PacketMeta::PLAIN);
            let want = if v6 { DropReason::TooBigV6 } else { DropReason::TooBigDf };
            assert_eq!(v, Verdict::Dropped(want), "kind {kind} v6={v6}");
            assert_eq!(h.out.last().unwrap().port, Port::Inner, "the ICMP error goes back inside");
            if !v6 {
                let mut s = outbound(v6, 0, 4000);
                s.df = false;
                let v = h.feed(Port::Inner, with_raw_options(&s, &signature(kind, None)), PacketMeta::PLAIN);
                assert_eq!(v, Verdict::Consumed);
                assert!(h.out.iter().rev().take(3).all(|o| o.port == Port::Outer));
                assert_eq!(h.eng.counters().fragmented_in, 1);
            }
            assert_eq!(h.eng.counters().merged_in, 0);
            assert_eq!(h.eng.counters().split_in, 0);
            let c = h.eng.counters();
            assert_eq!((c.mss_raised, c.mss_clamped), (0, 0));
            h.check_outputs().unwrap();
            h.check_accounting().unwrap();
        }
    }
}

/// A flow whose SYN the gateway missed is known as MD5 from its first
/// signed segment: from then on it is never merged.
#[test]
fn md5_seen_mid_flow_stops_merging() {
    let mut h = Harness::new(test_config());
    for i in 0..10u32 {
        let f = with_raw_options(&inbound(false, i * 1440, 1440), &signature(19, None));
        assert_eq!(h.feed(Port::Outer, f, PacketMeta::PLAIN), Verdict::Forward { meta: PacketMeta::PLAIN });
    }
    assert_eq!(h.eng.counters().merged_in, 0);
    assert_eq!(h.eng.counters().signed_passed, 10);
}

// ---- item 4: SYN with data (TCP Fast Open) ----------------------------------

/// A SYN carrying more data than the egress takes is cut with SYN on the
/// first piece only; the SYN's sequence slot counts, so piece 2 starts at
/// ISN + 1 + the first piece's data. Never handed to GSO (which would copy
/// SYN onto every piece).
#[test]
fn syn_with_data_is_split_with_the_syn_on_the_first_piece() {
    for gso in [false, true] {
        for v6 in [false, true] {
            let mut h = Harness::new(Config { outer_gso: gso, ..test_config() });
            let data = stream_bytes(3, 0, 4000);
            let mut s = TcpSpec::outbound(v6, 1, ISN, data.clone());
            s.opts = vec![TcpOptionElement::MaximumSegmentSize(8960), TcpOptionElement::Noop, TcpOptionElement::Noop];
            s.flags = Flags { syn: true, ..Flags::default() };
            assert_eq!(h.feed_tcp(Port::Inner, &s), Verdict::Consumed, "gso={gso} v6={v6}");
            let w = h.check_outputs().unwrap();
            let mut got = Vec::new();
            let mut want_seq = ISN;
            for (i, (p, w)) in w.iter().enumerate() {
                assert_eq!(*p, Port::Outer);
                let t = w.tcp().unwrap();
                assert_eq!(t.syn, i == 0, "gso={gso} v6={v6}: SYN on piece 0 only");
                assert_eq!(t.sequence_number, want_seq, "gso={gso} v6={v6} piece {i}");
                want_seq = want_seq.wrapping_add(w.payload.len() as u32 + t.syn as u32);
                got.extend_from_slice(&w.payload);
            }
            assert!(w.len() > 1);
            assert_eq!(got, data);
            h.check_accounting().unwrap();
        }
    }
}

// ---- item 12: urgent pointer and IP ID of split pieces ----------------------

/// The urgent pointer is relative to each segment: pieces before the
/// urgent point carry URG with the pointer less their offset, pieces after
/// it neither. Cut in software even when GSO is on.
#[test]
fn urgent_pointer_follows_each_piece() {
    for gso in [false, true] {
        for (ptr, want) in
            [(2000u16, vec![Some(2000u16), Some(552), None]), (5000, vec![Some(5000), Some(3552), Some(2104)])]
        {
            let mut h = Harness::new(Config { outer_gso: gso, ..test_config() });
            let mut s = outbound(false, 0, 4000);
            s.flags.urg = true;
            s.urg_ptr = ptr;
            assert_eq!(h.feed_tcp(Port::Inner, &s), Verdict::Consumed, "gso={gso}");
            let w = h.check_outputs().unwrap();
            let got: Vec<Option<u16>> = w
                .iter()
                .map(|(_, w)| {
                    let t = w.tcp().unwrap();
                    if t.urg { Some(t.urgent_pointer) } else { None }
                })
                .collect();
            assert_eq!(got, want, "gso={gso} ptr={ptr}");
            assert!(w.iter().all(|(_, w)| w.tcp().unwrap().urg || w.tcp().unwrap().urgent_pointer == 0));
        }
    }
}

/// An RST carrying more data than the egress takes (the inner host aborts
/// with diagnostic data) is cut with RST on the last piece only, like FIN:
/// an RST on an earlier piece would reset the connection before the rest
/// of the data arrived. ACK and ECE stay on every piece, CWR on the first,
/// PSH on the last (Linux `tcp_gso_segment`). Never handed to GSO, which
/// would copy RST onto every piece.
#[test]
fn rst_with_data_is_split_with_the_rst_on_the_last_piece() {
    for gso in [false, true] {
        for v6 in [false, true] {
            let mut h = Harness::new(Config { outer_gso: gso, ..test_config() });
            let mut s = outbound(v6, 0, 4000);
            s.flags = Flags { rst: true, ack: true, psh: true, ece: true, cwr: true, ..Flags::default() };
            assert_eq!(h.feed_tcp(Port::Inner, &s), Verdict::Consumed, "gso={gso} v6={v6}");
            let w = h.check_outputs().unwrap();
            let n = 4000usize.div_ceil(omss_ts(v6));
            assert_eq!(w.len(), n, "gso={gso} v6={v6}");
            let mut got = Vec::new();
            for (i, (p, w)) in w.iter().enumerate() {
                assert_eq!(*p, Port::Outer);
                let t = w.tcp().unwrap();
                let last = i == n - 1;
                assert_eq!(t.rst, last, "gso={gso} v6={v6}: RST on the last piece only (piece {i})");
                assert_eq!(t.psh, last, "gso={gso} v6={v6}: PSH on the last piece only (piece {i})");
                assert_eq!(t.cwr, i == 0, "gso={gso} v6={v6}: CWR on the first piece only (piece {i})");
                assert!(t.ack && t.ece && !t.fin && !t.syn, "gso={gso} v6={v6} piece {i}");
                assert_eq!(
                    t.sequence_number,
                    (INNER_ISN + 1).wrapping_add(got.len() as u32),
                    "gso={gso} v6={v6} piece {i}"
                );
                got.extend_from_slice(&w.payload);
            }
            assert_eq!(got, stream_bytes(2, 0, 4000), "gso={gso} v6={v6}");
            h.oracle.verify().unwrap();
            h.check_accounting().unwrap();
            assert_eq!(h.eng.counters().split_in, 1, "gso={gso} v6={v6}: cut in software");
        }
    }
}

/// IPv4 IDs count up by one per piece from the original's, with or without
/// DF, as Linux GSO counts them (no fixed-ID flag travels in a virtio
/// header), so a software cut equals a GSO hand-off.
#[test]
fn ip_ids_count_up_per_piece_like_linux_gso() {
    for df in [true, false] {
        let mut h = Harness::new(test_config());
        let mut s = outbound(false, 0, 5000);
        s.df = df;
        s.ip_id = 0xfffe;
        let _ = h.feed_tcp(Port::Inner, &s);
        let w = h.check_outputs().unwrap();
        let ids: Vec<u16> = w.iter().map(|(_, w)| w.v4().unwrap().identification).collect();
        assert_eq!(ids, vec![0xfffe, 0xffff, 0, 1], "df={df}");
        assert!(w.iter().all(|(_, w)| w.v4().unwrap().dont_fragment == df));
    }
}

// ---- item 5: flows whose SYN the gateway did not see ------------------------

/// A flow whose SYN the gateway never saw is merged only up to the safe
/// size (one outer-sized segment's payload): the inner host may have
/// announced no more than that.
#[test]
fn a_flow_without_syn_is_never_merged_beyond_the_safe_size() {
    for v6 in [false, true] {
        let mut h = Harness::new(test_config());
        let mss = omss_ts(v6);
        for i in 0..20u32 {
            let _ = h.feed_tcp(Port::Outer, &inbound(v6, i * mss as u32, mss));
        }
        // A GRO super-packet too.
        let s = inbound(v6, 20 * mss as u32, 10 * mss);
        let _ = h.feed(Port::Outer, s.build(), gro_meta(Checksum::Valid, mss as u16));
        h.flush_all();
        let s = sizes(&h.check_outputs().unwrap(), Port::Inner);
        assert!(s.iter().all(|s| *s <= mss), "v6={v6}: {s:?}");
        h.oracle.verify().unwrap();
        h.check_accounting().unwrap();
    }
}

/// What the SYN said outlives the flow entry: after the flow expired
/// (idle), after it was evicted (table full), and after a flood of spoofed
/// SYNs evicted it, merges still respect the inner host's MSS, and still
/// reach it.
#[test]
fn the_handshakes_mss_outlives_the_flow_entry() {
    for how in ["expired", "evicted", "syn-flood"] {
        let cfg = Config { max_flows: 4, flow_idle_timeout: Duration::from_secs(5), ..test_config() };
        let mut h = Harness::new(cfg);
        open_connection(&mut h, false, 1, ISN, Some(4000));
        let mut off = 0u32;
        for _ in 0..6 {
            let _ = h.feed_tcp(Port::Outer, &inbound(false, off, 1448));
            off += 1448;
        }
        h.flush_all();
        h.check_outputs().unwrap();
        match how {
            "expired" => h.advance(Duration::from_secs(7)),
            "syn-flood" => {
                // Spoofed SYNs never establish: they evict, but are not kept.
                for n in 2..2000u16 {
                    let mut s = TcpSpec::inbound(false, n, 1, vec![]);
                    s.sport = n;
                    s.flags = Flags { syn: true, ..Flags::default() };
                    let _ = h.feed_tcp(Port::Outer, &s);
                }
            }
            _ => {
                for n in 2..10u16 {
                    let _ = h.feed_tcp(Port::Outer, &TcpSpec::inbound(false, n, 1, vec![1; 10]));
                }
            }
        }
        assert!(h.eng.counters().flows_expired + h.eng.counters().flows_evicted > 0, "{how}");
        h.check_outputs().unwrap();
        for _ in 0..12 {
            let _ = h.feed_tcp(Port::Outer, &inbound(false, off, 1448));
            off += 1448;
        }
        h.flush_all();
        let s = sizes(&h.check_outputs().unwrap(), Port::Inner);
        assert!(s.iter().all(|s| *s <= 3988), "{how}: {s:?}");
        assert!(s.contains(&3988), "{how}: merges reach the inner MSS: {s:?}");
    }
}

/// The same for the outer host's MSS, when the connection returns with
/// outbound data only (an inner server answering after a pause): the
/// pieces still fit what the outer host announced, after its entry
/// expired or was evicted. Fails if only inbound segments bring an entry
/// back (the pieces would be cut to the egress MTU, larger than the outer
/// host takes).
#[test]
fn the_outer_hosts_mss_outlives_the_flow_entry() {
    for how in ["expired", "evicted"] {
        let cfg = Config { max_flows: 4, flow_idle_timeout: Duration::from_secs(5), ..test_config() };
        let mut h = Harness::new(cfg);
        let _ = h.feed_tcp(Port::Outer, &syn(true, false, ISN.wrapping_sub(1), 1200, false));
        let _ = h.feed_tcp(Port::Inner, &inner_syn_ack(false, 1, INNER_ISN, ISN, Some(8960)));
        let mut ack = TcpSpec::inbound(false, 1, ISN, vec![]).ts(1, 1);
        ack.ack = INNER_ISN.wrapping_add(1);
        let _ = h.feed_tcp(Port::Outer, &ack);
        let _ = h.feed_tcp(Port::Inner, &outbound(false, 0, 4000));
        let before = sizes(&h.check_outputs().unwrap(), Port::Outer);
        assert_eq!(before, [1188, 1188, 1188, 436], "{how}: the outer MSS less the timestamps");
        match how {
            "expired" => h.advance(Duration::from_secs(7)),
            _ => {
                for n in 2..10u16 {
                    let _ = h.feed_tcp(Port::Outer, &TcpSpec::inbound(false, n, 1, vec![1; 10]));
                }
            }
        }
        assert!(h.eng.counters().flows_expired + h.eng.counters().flows_evicted > 0, "{how}");
        h.check_outputs().unwrap();
        let _ = h.feed_tcp(Port::Inner, &outbound(false, 4000, 4000));
        let after = sizes(&h.check_outputs().unwrap(), Port::Outer);
        assert_eq!(after, before, "{how}: the returning flow's pieces");
        h.oracle.verify().unwrap();
        h.check_accounting().unwrap();
    }
}
