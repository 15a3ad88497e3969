//! The border rule as a property (issue 27): the same legitimate trace,
//! with and without off-path packets interleaved, gives the same
//! legitimate output.
//!
//! **Off-path**, here: a sender outside the border that knows the flow's
//! addresses, ports and timing, but not its sequence numbers or
//! timestamps. Its TCP segments (data, SYN, SYN-ACK, RST, FIN, URG, with
//! tiny MSS options, TCP-MD5 or TCP-AO signatures, SACK blocks, random
//! timestamps) and its ICMP "too big" errors (quoting the flow, sometimes
//! with an odd quoted header) carry sequence and acknowledgement numbers
//! that miss the connection's by at least 32 MiB: a blind guess. A guess
//! that lands within the window is what RFC 5961 lets through on an end
//! host too; what it can do at the gateway is bounded and tested by hand
//! (`tests/border_blind.rs`, `conntrack.rs`).
//!
//! **Legitimate output**: every frame the engine sends, except an
//! off-path packet passed on as it came. The property, per case:
//! - toward the outside, the legitimate frames are the same, byte for byte
//!   and in order (nothing off-path changes how the inner host's segments
//!   are cut, nor what its SYNs say);
//! - toward the inside, the same payload bytes in the same order, the same
//!   frames without payload (SYN, FIN, ACK), and at most one more data
//!   segment per off-path packet: an off-path packet of the flow may end a
//!   hold early, as it ends the end host's own GRO aggregate, and nothing
//!   more (not the MSS, not the merging, not the stream's position);
//! - no legitimate input is dropped, and no ICMP error goes to a host.
//!
//! **With the kernel fast path** (issue 28; its model, `common/kernel.rs`,
//! takes the packets of offloaded flows before the engine): the same,
//! and the flow moves to the kernel and back at the same moments with and
//! without the off-path packets. And the fast path changes no byte: the
//! same legitimate trace gives the same payload streams both ways with it
//! and without it.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::*;
use etherparse::{Icmpv4Type, Icmpv6Type, PacketBuilder, TcpOptionElement, icmpv4::DestUnreachableHeader};
use proptest::prelude::*;
use px_gateway::{Port, Verdict};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ISN: u32 = 0x4000_0000;
/// Off-path sequence and acknowledgement numbers miss both streams by at
/// least this much.
const MISS: u32 = 32 << 20;

/// One input of a case.
#[derive(Debug, Clone)]
struct Input {
    from: Port,
    frame: Vec<u8>,
    meta: PacketMeta,
    /// Time to let pass (timers fire) before it arrives.
    after: Duration,
    off_path: bool,
}

/// The legitimate trace: a handshake, then inbound and outbound data of
/// random sizes, GRO super-packets, pure ACKs, a retransmission, pauses,
/// and FINs both ways.
fn legit(rng: &mut ChaCha8Rng, v6: bool) -> Vec<Input> {
    legit_with(rng, v6, false)
}

/// [`legit`]; with `bulk`, the data comes as a bulk flow's does through
/// GRO when the fast path takes it: inbound super-packets of 7 to 16
/// segments, outbound super-packets of inner segments or segments that
/// fit the outside (`engine/fast_path.rs`: flows whose GRO batches are small
/// stay with the engine).
fn legit_with(rng: &mut ChaCha8Rng, v6: bool, bulk: bool) -> Vec<Input> {
    let mut v = Vec::new();
    let mut push =
        |from, spec: &TcpSpec, meta, after| v.push(Input { from, frame: spec.build(), meta, after, off_path: false });
    let omss: u16 = if v6 { 1440 } else { 1460 };
    let seg_in = (omss - 12) as usize;
    push(Port::Outer, &outer_syn(v6, 1, ISN - 1, omss), PacketMeta::PLAIN, Duration::ZERO);
    push(
        Port::Inner,
        &inner_syn_ack(v6, 1, INNER_ISN, ISN, Some(if v6 { 8940 } else { 8960 })),
        PacketMeta::PLAIN,
        Duration::from_micros(50),
    );
    let (mut off_in, mut off_out, mut ts) = (0u32, 0u32, 1_000u32);
    let ack_in = |off_out: u32| (INNER_ISN + 1).wrapping_add(off_out);
    let mut ack = TcpSpec::inbound(v6, 1, ISN, vec![]).ts(ts, 1);
    ack.ack = ack_in(0);
    push(Port::Outer, &ack, PacketMeta::PLAIN, Duration::from_millis(2));
    let mut sent_in: Vec<(u32, usize)> = Vec::new();
    for _ in 0..rng.gen_range(10..60) {
        ts += rng.gen_range(0..3);
        let after = Duration::from_micros(if rng.gen_bool(0.2) { rng.gen_range(0..900) } else { rng.gen_range(0..20) });
        match rng.gen_range(0..10) {
            0..=3 if !bulk => {
                let len = if rng.gen_bool(0.8) { seg_in } else { rng.gen_range(1..=seg_in) };
                let mut s = TcpSpec::inbound(v6, 1, ISN.wrapping_add(off_in), stream_bytes(1, off_in, len)).ts(ts, 7);
                s.ack = ack_in(off_out);
                s.flags.psh = rng.gen_bool(0.1);
                sent_in.push((off_in, len));
                off_in += len as u32;
                push(Port::Outer, &s, PacketMeta::PLAIN, after);
            }
            0..=4 => {
                let n = if bulk { rng.gen_range(7..=16) } else { rng.gen_range(2..=8) };
                let len = n * seg_in;
                let mut s = TcpSpec::inbound(v6, 1, ISN.wrapping_add(off_in), stream_bytes(1, off_in, len)).ts(ts, 7);
                s.ack = ack_in(off_out);
                sent_in.push((off_in, len));
                off_in += len as u32;
                let mut meta = gro_meta(Checksum::Valid, seg_in as u16);
                if v6 && let Some(g) = meta.gso.as_mut() {
                    g.kind = px_wire::offload::GsoKind::TcpV6;
                }
                push(Port::Outer, &s, meta, after);
            }
            5..=7 => {
                let jumbo = if v6 { 8928 } else { 8948 };
                let (len, meta) = match bulk {
                    false => (rng.gen_range(1..=jumbo), PacketMeta::PLAIN),
                    true if rng.gen_bool(0.5) => (rng.gen_range(1..=seg_in), PacketMeta::PLAIN),
                    true => {
                        let mut meta = gro_meta(Checksum::Valid, jumbo as u16);
                        if v6 && let Some(g) = meta.gso.as_mut() {
                            g.kind = px_wire::offload::GsoKind::TcpV6;
                        }
                        (rng.gen_range(2..=4) * jumbo, meta)
                    }
                };
                let mut s =
                    TcpSpec::outbound(v6, 1, (INNER_ISN + 1).wrapping_add(off_out), stream_bytes(2, off_out, len))
                        .ts(500 + ts, ts);
                s.ack = ISN.wrapping_add(off_in);
                off_out += len as u32;
                push(Port::Inner, &s, meta, after);
            }
            8 => {
                let mut a = TcpSpec::outbound(v6, 1, (INNER_ISN + 1).wrapping_add(off_out), vec![]).ts(500 + ts, ts);
                a.ack = ISN.wrapping_add(off_in);
                push(Port::Inner, &a, PacketMeta::PLAIN, after);
            }
            _ => {
                // A retransmission of recent inbound data.
                if let Some(&(o, len)) = sent_in.iter().rev().nth(rng.gen_range(0..3)) {
                    let mut s = TcpSpec::inbound(v6, 1, ISN.wrapping_add(o), stream_bytes(1, o, len)).ts(ts, 7);
                    s.ack = ack_in(off_out);
                    push(Port::Outer, &s, PacketMeta::PLAIN, after);
                }
            }
        }
    }
    let mut fin = TcpSpec::inbound(v6, 1, ISN.wrapping_add(off_in), vec![]).ts(ts, 7);
    fin.ack = ack_in(off_out);
    fin.flags = Flags { fin: true, ack: true, ..Flags::default() };
    push(Port::Outer, &fin, PacketMeta::PLAIN, Duration::from_micros(100));
    let mut fin = TcpSpec::outbound(v6, 1, (INNER_ISN + 1).wrapping_add(off_out), vec![]).ts(600 + ts, ts);
    fin.ack = ISN.wrapping_add(off_in + 1);
    fin.flags = Flags { fin: true, ack: true, ..Flags::default() };
    push(Port::Inner, &fin, PacketMeta::PLAIN, Duration::from_micros(100));
    v
}

/// A number at least [`MISS`] away from `base`, either way.
fn miss(rng: &mut ChaCha8Rng, base: u32) -> u32 {
    base.wrapping_add(rng.gen_range(MISS..=u32::MAX - MISS))
}

/// An off-path packet: it knows flow 1's addresses and ports (or picks
/// another port of the same hosts), not its sequence numbers.
fn off_path(rng: &mut ChaCha8Rng, v6: bool) -> Input {
    let mut s = TcpSpec::inbound(v6, 1, miss(rng, ISN), stream_bytes(9, 0, rng.gen_range(0..1400)));
    s.ack = miss(rng, INNER_ISN);
    s.flags = Flags {
        ack: rng.gen_bool(0.7),
        psh: rng.gen_bool(0.3),
        fin: rng.gen_bool(0.2),
        urg: rng.gen_bool(0.1),
        rst: rng.gen_bool(0.2),
        ece: rng.gen_bool(0.2),
        cwr: rng.gen_bool(0.2),
        ..Flags::default()
    };
    s.urg_ptr = rng.r#gen();
    if rng.gen_bool(0.1) {
        s.sport = rng.gen_range(1024..65535);
    }
    let kind = rng.gen_range(0..10);
    match kind {
        0 | 1 => {
            // A SYN (or SYN-ACK) with a tiny or random MSS.
            s.payload.clear();
            s.flags =
                Flags { syn: true, ack: kind == 1, ece: rng.gen_bool(0.3), cwr: rng.gen_bool(0.3), ..Flags::default() };
            let mss = if rng.gen_bool(0.5) { rng.gen_range(0..64) } else { rng.r#gen() };
            s.opts = vec![TcpOptionElement::MaximumSegmentSize(mss), TcpOptionElement::Noop, TcpOptionElement::Noop];
        }
        2 => {
            s.opts = vec![
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(rng.r#gen(), rng.r#gen()),
            ]
        }
        3 => {
            let l = miss(rng, ISN);
            s.opts = vec![
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::SelectiveAcknowledgement((l, l.wrapping_add(1000)), [None; 3]),
            ];
        }
        4 => {
            let sig = signature(if rng.gen_bool(0.5) { 19 } else { 29 }, None);
            return Input {
                from: Port::Outer,
                frame: with_raw_options(&s, &sig),
                meta: PacketMeta::PLAIN,
                after: Duration::ZERO,
                off_path: true,
            };
        }
        5 => return too_big(rng, v6),
        _ => {}
    }
    Input { from: Port::Outer, frame: s.build(), meta: PacketMeta::PLAIN, after: Duration::ZERO, off_path: true }
}

/// An ICMP "too big" from outside, to the inner host, quoting a segment of
/// flow 1 at a sequence number that misses, sometimes with an odd quoted
/// header (a fragment offset, another version).
fn too_big(rng: &mut ChaCha8Rng, v6: bool) -> Input {
    let seg = TcpSpec::outbound(v6, 1, miss(rng, INNER_ISN), stream_bytes(8, 0, 1400)).build();
    let mut q = ip_part(&seg).to_vec();
    if !v6 {
        match rng.gen_range(0..4) {
            0 => q[6..8].copy_from_slice(&(0x4000u16 | rng.gen_range(1..0x1fff)).to_be_bytes()),
            1 => q[0] = 0x55,
            _ => {}
        }
    }
    let mtu: u32 = rng.gen_range(68..1500);
    let b = PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER);
    let mut v = Vec::new();
    match inner_addr(v6, 1) {
        IpAddr::V4(to) => b
            .ipv4([198, 51, 100, 99], to.octets(), 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: mtu as u16,
            }))
            .write(&mut v, &q[..q.len().min(548)])
            .unwrap(),
        IpAddr::V6(to) => b
            .ipv6("2001:db8:1::99".parse::<std::net::Ipv6Addr>().unwrap().octets(), to.octets(), 64)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu })
            .write(&mut v, &q[..q.len().min(1232)])
            .unwrap(),
    }
    Input { from: Port::Outer, frame: v, meta: PacketMeta::PLAIN, after: Duration::ZERO, off_path: true }
}

/// The window shift of the legitimate trace's inner host (its SYN-ACK and
/// the outer SYN carry [`WINDOW_SCALE`]).
const SHIFT: u32 = WINDOW_SCALE as u32;

/// A blind sweep (issue 35) interleaved with `clean`: 1-byte segments,
/// RSTs and SYNs with MSS 48, 256 KiB apart, from just beyond what the
/// inner host allows at that point of the trace (its highest ACK plus its
/// window) or from just behind its largest window before the stream, on
/// around the sequence space, but never inside that window: what a blind
/// sender lands almost always. Before issue 35, a byte within 256 KiB of
/// the stream moved it, and the sweep carried it away.
fn with_sweep(rng: &mut ChaCha8Rng, v6: bool, clean: &[Input], packets: usize) -> Vec<Input> {
    let (mut allowed, mut max_win, mut next) = (None::<u32>, 0u32, ISN);
    let mut out = Vec::with_capacity(clean.len() + packets);
    let per_input = packets.div_ceil(clean.len().max(1));
    for i in clean {
        out.push(i.clone());
        let h = etherparse::PacketHeaders::from_ethernet_slice(&i.frame).unwrap();
        let Some(etherparse::TransportHeader::Tcp(t)) = h.transport else { continue };
        let len = h.payload.slice().len() as u32 + t.syn as u32 + t.fin as u32;
        match i.from {
            Port::Inner if t.ack && !t.rst => {
                let win = (t.window_size as u32) << if t.syn { 0 } else { SHIFT };
                let end = t.acknowledgment_number.wrapping_add(win);
                allowed = Some(allowed.map_or(end, |a| if (end.wrapping_sub(a) as i32) > 0 { end } else { a }));
                max_win = max_win.max(win);
            }
            Port::Outer => {
                let end = t.sequence_number.wrapping_add(len);
                if (end.wrapping_sub(next) as i32) > 0 {
                    next = end;
                }
            }
            _ => {}
        }
        // Nothing before the inner host's window is known: the sweep waits.
        let Some(allowed) = allowed else { continue };
        let behind = next.wrapping_sub(max_win).wrapping_sub(1);
        // The sequence numbers outside the window, from just beyond it to
        // just behind it (the window wraps the other way round).
        let outside = behind.wrapping_sub(allowed).wrapping_sub(1);
        for _ in 0..per_input {
            let k = rng.gen_range(0..=outside / (256 << 10));
            let seq = if rng.gen_bool(0.5) {
                allowed.wrapping_add(1).wrapping_add(k << 18)
            } else {
                // Ends at or before `behind`.
                behind.wrapping_sub(k << 18).wrapping_sub(1)
            };
            let mut s = TcpSpec::inbound(v6, 1, seq, vec![]);
            s.ack = miss(rng, INNER_ISN);
            match rng.gen_range(0..3) {
                0 => s.payload = vec![0x5a],
                1 => s.flags = Flags { rst: true, ..Flags::default() },
                _ => {
                    s = outer_syn(v6, 1, seq, 48);
                }
            }
            out.push(Input {
                from: Port::Outer,
                frame: s.build(),
                meta: PacketMeta::PLAIN,
                after: Duration::ZERO,
                off_path: true,
            });
        }
    }
    out
}

/// What left the engine, legitimate frames only, cut to wire frames.
#[derive(Debug, Default, PartialEq)]
struct Legit {
    /// Toward the outside: every frame, and their payload bytes in order.
    outer: Vec<Vec<u8>>,
    outer_bytes: Vec<u8>,
    /// Toward the inside: the payload bytes in order, the frames without
    /// payload, and how many data frames carried them.
    inner_bytes: Vec<u8>,
    inner_control: Vec<Vec<u8>>,
    inner_data_frames: usize,
    dropped: usize,
    icmp: usize,
    /// With the fast path: every install and withdrawal, in order, and
    /// how many inputs the kernel carried.
    moves: Vec<(bool, px_gateway::FlowKey, Port)>,
    in_kernel: usize,
}

fn run(inputs: &[Input]) -> Legit {
    run_with(inputs, false)
}

/// [`run`], with the kernel fast path's model if `fast` (a quiet moment
/// after every input: flows move as soon as they qualify).
fn run_with(inputs: &[Input], fast: bool) -> Legit {
    let cfg = px_gateway::Config { fast_path: fast, fast_path_after: 4, ..test_config() };
    let mut h = Harness::new(cfg);
    let kernel = fast.then(|| h.attach_kernel());
    let mut got = Legit::default();
    for i in inputs {
        h.advance(i.after);
        let before = h.out.len();
        let fed = h.tally.fed;
        let v = h.feed(i.from, i.frame.clone(), i.meta);
        got.in_kernel += (h.tally.fed == fed) as usize;
        if fast {
            h.quiet();
        }
        if !i.off_path && matches!(v, Verdict::Dropped(_)) {
            got.dropped += 1;
        }
        // The off-path packet itself, passed on as it came, is not legitimate output.
        if i.off_path {
            let mut n = before;
            while n < h.out.len() {
                if h.out[n].forwarded {
                    h.out.remove(n);
                } else {
                    n += 1;
                }
            }
        }
    }
    h.advance(Duration::from_secs(1));
    h.flush_all();
    for o in h.take() {
        let frames = if o.meta.gso.is_some() { soft_gso(&o.frame, &o.meta).unwrap() } else { vec![o.frame] };
        for f in frames {
            let w = check_wire_frame(&f).unwrap();
            if w.tcp().is_none() {
                got.icmp += 1;
                continue;
            }
            match o.port {
                Port::Outer => {
                    got.outer_bytes.extend_from_slice(&w.payload);
                    got.outer.push(f);
                }
                Port::Inner if w.payload.is_empty() => got.inner_control.push(f),
                Port::Inner => {
                    got.inner_bytes.extend_from_slice(&w.payload);
                    got.inner_data_frames += 1;
                }
            }
        }
    }
    if let Some(k) = kernel {
        got.moves = k.log.lock().unwrap().clone();
    }
    got
}

/// The legitimate output of `b` (the run with `extra` hostile packets) is
/// that of `a` (without them): nothing legitimate dropped, no ICMP error
/// more, the same frames toward the outside, the same bytes and control
/// frames toward the inside, and at most one more data frame there per
/// hostile packet. `what` starts each failure's message.
fn same_output(a: &Legit, b: &Legit, extra: usize, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(b.dropped, 0, "{}a legitimate input was dropped", what);
    prop_assert_eq!(b.icmp, a.icmp, "{}an ICMP error reached a host", what);
    prop_assert!(a.outer == b.outer, "{what}toward the outside, the legitimate frames differ");
    prop_assert!(a.inner_bytes == b.inner_bytes, "{what}toward the inside, the payload differs");
    prop_assert!(a.inner_control == b.inner_control, "{what}toward the inside, the frames without payload differ");
    prop_assert!(
        b.inner_data_frames <= a.inner_data_frames + extra,
        "{what}{} data frames with {extra} hostile packets, {} without",
        b.inner_data_frames,
        a.inner_data_frames
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn off_path_packets_do_not_change_the_legitimate_output(seed: u64, v6: bool, spoofs in 1usize..40) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let clean = legit(&mut rng, v6);
        let mut mixed = clean.clone();
        for _ in 0..spoofs {
            // After the client's first SYN: what comes before it races the
            // connection's start, at the end host as at the gateway
            // (`conntrack.rs`).
            let at = rng.gen_range(1..=mixed.len());
            let p = off_path(&mut rng, v6);
            mixed.insert(at, p);
        }
        let a = run(&clean);
        let b = run(&mixed);
        prop_assert_eq!(a.dropped, 0);
        same_output(&a, &b, spoofs, "")?;
    }

    #[test]
    fn off_path_packets_do_not_steer_the_fast_path(seed: u64, v6: bool, spoofs in 1usize..40) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let clean = legit_with(&mut rng, v6, true);
        let mut mixed = clean.clone();
        for _ in 0..spoofs {
            let at = rng.gen_range(1..=mixed.len());
            let p = off_path(&mut rng, v6);
            mixed.insert(at, p);
        }
        let a = run_with(&clean, true);
        let b = run_with(&mixed, true);
        prop_assert_eq!(b.dropped, 0, "a legitimate input was dropped");
        prop_assert_eq!(b.icmp, a.icmp, "an ICMP error reached a host");
        prop_assert!(a.moves == b.moves, "the flow moved differently: {:?} against {:?}", a.moves, b.moves);
        prop_assert!(a.outer_bytes == b.outer_bytes, "toward the outside, the payload differs");
        prop_assert!(a.inner_bytes == b.inner_bytes, "toward the inside, the payload differs");
        prop_assert!(a.inner_control == b.inner_control, "toward the inside, the frames without payload differ");
    }

    /// A blind sweep changes neither the legitimate output (toward the
    /// outside the same frames; toward the inside the same bytes, at most
    /// one more data segment per sweep packet) nor, with the kernel fast
    /// path, when the flow moves to the kernel and back.
    #[test]
    fn a_blind_sweep_changes_neither_the_output_nor_the_moves(seed: u64, v6: bool, packets in 1usize..200) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for fast in [false, true] {
            let clean = legit_with(&mut rng, v6, fast);
            let mixed = with_sweep(&mut rng, v6, &clean, packets);
            let swept = mixed.len() - clean.len();
            let a = run_with(&clean, fast);
            let b = run_with(&mixed, fast);
            prop_assert!(a.moves == b.moves, "fast={}: the flow moved differently: {:?} against {:?}", fast, a.moves, b.moves);
            same_output(&a, &b, swept, &format!("fast={fast}: "))?;
        }
    }

    #[test]
    fn the_fast_path_changes_no_byte(seed: u64, v6: bool) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let trace = legit_with(&mut rng, v6, true);
        let user = run_with(&trace, false);
        let fast = run_with(&trace, true);
        prop_assert_eq!(fast.dropped, 0);
        prop_assert!(!fast.moves.is_empty(), "the flow never moved to the kernel");
        prop_assert!(fast.in_kernel > 0, "the kernel carried nothing");
        prop_assert!(user.outer_bytes == fast.outer_bytes, "toward the outside, the payload differs");
        prop_assert!(user.inner_bytes == fast.inner_bytes, "toward the inside, the payload differs");
        prop_assert_eq!(user.icmp, fast.icmp);
    }
}
