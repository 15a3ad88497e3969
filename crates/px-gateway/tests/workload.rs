//! Property tests over random workloads (issue 2, "Tests"): up to ~1000
//! interleaved TCP flows in both directions, IPv4 and IPv6, random segment
//! sizes and option layouts, loss, reordering, duplicates, retransmissions
//! overlapping held data, FIN/RST mid-stream, GRO super-packets, partial
//! checksums, ICMP too-big from outside, UDP of every size, and random timing
//! with extra wake-ups. Checked for every case:
//!
//! - per TCP flow, the ordered history out equals the one in (data
//!   coalesced) and every byte out is the byte in at that sequence number;
//! - every UDP datagram leaves intact exactly once (fragments reassembled)
//!   or is dropped as too big, as a router would;
//! - every frame out parses with etherparse, its checksums verify, and it
//!   (each GSO segment of it) fits the egress MTU or learned path MTU of the
//!   moment it left;
//! - every packet in is accounted for by the counters, drops only by a
//!   router's reasons;
//! - a segment the engine held left within the merge timeout.
//!
//! proptest draws the workload's shape and a seed; the workload itself comes
//! from a ChaCha generator, so a failure prints a reproducible case.

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::*;
use etherparse::{
    Icmpv4Type, Icmpv6Type, PacketBuilder, TcpOptionElement, TransportHeader, icmpv4::DestUnreachableHeader,
};
use proptest::prelude::*;
use px_gateway::{Config, DropReason, Port, Verdict};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The shape of one workload.
#[derive(Debug, Clone)]
pub struct Shape {
    pub seed: u64,
    pub flows: usize,
    pub max_segments: usize,
    pub loss: f64,
    pub reorder: f64,
    pub dup: f64,
    pub v6_share: f64,
    pub max_flows: usize,
    pub max_held_bytes: usize,
    pub merge_timeout_us: u64,
    pub bulk_after: u16,
    pub inner_gso: bool,
    pub outer_gso: bool,
    pub verify_checksums: bool,
}

enum Ev {
    Frame {
        port: Port,
        frame: Vec<u8>,
        meta: PacketMeta,
        tcp: Option<(FlowId, u32, u32)>,
    },
    /// ICMP too-big from outside toward `dst` announcing `mtu`.
    Ptb {
        frame: Vec<u8>,
        dst: IpAddr,
        mtu: u16,
    },
    Udp {
        port: Port,
        frame: Vec<u8>,
        id: u32,
        df: bool,
        v6: bool,
        dst: IpAddr,
    },
}

#[derive(Clone)]
struct Attr {
    opts: Vec<TcpOptionElement>,
    dscp: u8,
    ecn: u8,
    ttl: u8,
    ack: u32,
    window: u16,
}

fn ts_layout(rng: &mut ChaCha8Rng, val: u32, ecr: u32) -> Vec<TcpOptionElement> {
    use TcpOptionElement::*;
    match rng.gen_range(0..4) {
        0 => vec![],
        1 => vec![Noop, Noop, Timestamp(val, ecr)],
        2 => vec![Timestamp(val, ecr), Noop, Noop],
        _ => vec![Noop, Noop, Timestamp(val, ecr), Noop, Noop, Noop, Noop],
    }
}

type MakeSeg = fn(bool, u16, u32, Vec<u8>) -> TcpSpec;
type Frag = (usize, Vec<u8>, bool);

/// One TCP flow's events in the order its sender emits them.
#[allow(clippy::too_many_arguments)]
fn tcp_flow(rng: &mut ChaCha8Rng, s: &Shape, n: u16, v6: bool, inbound: bool) -> Vec<Ev> {
    let mut evs = Vec::new();
    // Often just before the sequence wrap, so holds and pieces straddle it.
    let isn: u32 = if rng.gen_bool(0.3) { 0u32.wrapping_sub(rng.gen_range(0..20_000)) } else { rng.r#gen() };
    let (port, mk): (Port, MakeSeg) =
        if inbound { (Port::Outer, TcpSpec::inbound) } else { (Port::Inner, TcpSpec::outbound) };
    let ip_hdr = if v6 { 40 } else { 20 };
    let layout = ts_layout(rng, 1, 1);
    let opt_len = opts_len(&layout);
    let mtu = if inbound { 1500 } else { 9000 };
    let mss = mtu - ip_hdr - 20 - opt_len;
    let id = |spec: &TcpSpec| (spec.src, spec.sport, spec.dst, spec.dport);
    // Handshake, sometimes (teaches the engine both MSSs).
    if rng.gen_bool(0.4) {
        let (omss, imss) = if v6 { (1440, 8940) } else { (1460, 8960) };
        let mut syn = mk(v6, n, isn.wrapping_sub(1), vec![]);
        syn.flags = Flags { syn: true, ..Flags::default() };
        syn.opts = vec![TcpOptionElement::MaximumSegmentSize(if inbound { omss } else { imss })];
        let f = syn.build();
        evs.push(Ev::Frame { port, frame: f, meta: PacketMeta::PLAIN, tcp: Some((id(&syn), 0, 0)) });
        let mut sa = if inbound { TcpSpec::outbound(v6, n, 7, vec![]) } else { TcpSpec::inbound(v6, n, 7, vec![]) };
        sa.flags = Flags { syn: true, ack: true, ..Flags::default() };
        sa.opts = vec![TcpOptionElement::MaximumSegmentSize(if inbound { imss } else { omss })];
        sa.ack = isn;
        let f = sa.build();
        evs.push(Ev::Frame { port: port.other(), frame: f, meta: PacketMeta::PLAIN, tcp: Some((id(&sa), 0, 0)) });
    }
    // The sender's segments: (offset, len, flags, attributes).
    let mut segs: Vec<(u32, usize, Flags, Attr)> = Vec::new();
    let nseg = rng.gen_range(1..=s.max_segments);
    let mut off = 0u32;
    let mut tsval = rng.r#gen::<u32>();
    let mut attr = Attr {
        opts: layout.clone(),
        dscp: 0,
        ecn: if rng.gen_bool(0.5) { 2 } else { 0 },
        ttl: 64,
        ack: rng.r#gen(),
        window: 1000,
    };
    let set_ts = |opts: &mut Vec<TcpOptionElement>, v: u32, e: Option<u32>| {
        for o in opts.iter_mut() {
            if let TcpOptionElement::Timestamp(a, b) = o {
                *a = v;
                if let Some(e) = e {
                    *b = e;
                }
            }
        }
    };
    for i in 0..nseg {
        let mut a = attr.clone();
        if rng.gen_bool(0.3) {
            tsval = tsval.wrapping_add(1);
        }
        set_ts(&mut a.opts, tsval, rng.gen_bool(0.05).then(|| rng.r#gen()));
        if rng.gen_bool(0.03) {
            a.dscp = rng.gen_range(0..64);
        }
        if rng.gen_bool(0.03) {
            a.ttl = 63;
        }
        if a.ecn != 0 && rng.gen_bool(0.05) {
            a.ecn = 3;
        }
        if rng.gen_bool(0.2) {
            attr.ack = attr.ack.wrapping_add(rng.gen_range(1..5000));
            a.ack = attr.ack;
            attr.window = rng.r#gen();
            a.window = attr.window;
        }
        if rng.gen_bool(0.03) {
            a.ack = attr.ack.wrapping_sub(100);
        }
        let mut len = if rng.gen_bool(0.8) { mss } else { rng.gen_range(1..=mss) };
        if !inbound && rng.gen_bool(0.1) {
            len = rng.gen_range(1..=20_000);
        }
        if rng.gen_bool(0.03) && !a.opts.is_empty() {
            // SACK blocks (a receiver that also sends): not merged.
            a.opts = vec![
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::SelectiveAcknowledgement((rng.r#gen(), rng.r#gen()), [None, None, None]),
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(tsval, 1),
            ];
            len = len.min(mss - 12);
        }
        let mut f = Flags { psh: rng.gen_bool(0.1), ..Flags::ack() };
        if rng.gen_bool(0.02) {
            f.urg = true;
        }
        if rng.gen_bool(0.02) {
            f.cwr = true;
        }
        let last = i + 1 == nseg;
        if last && rng.gen_bool(0.3) {
            f.fin = true;
        }
        segs.push((off, len, f, a.clone()));
        off += len as u32;
        if rng.gen_bool(0.05) {
            // A pure ACK in between.
            segs.push((off, 0, Flags::ack(), a.clone()));
        }
        if !last && rng.gen_bool(0.01) {
            segs.push((off, 0, Flags { rst: true, ..Flags::ack() }, a));
            break;
        }
    }
    let sent_end = off;
    // Loss (retransmitted later, sometimes as a larger, overlapping
    // segment), duplicates, reordering.
    let mut order: Vec<(u32, usize, Flags, Attr)> = Vec::new();
    let mut later: Vec<(usize, (u32, usize, Flags, Attr))> = Vec::new();
    for (i, sg) in segs.into_iter().enumerate() {
        if let Some(p) = later.iter().position(|(at, _)| *at <= i) {
            let (_, r) = later.remove(p);
            order.push(r);
        }
        if sg.1 > 0 && rng.gen_bool(s.loss) {
            let mut r = sg.clone();
            if rng.gen_bool(0.5) {
                // Overlapping retransmission: reaches back and/or forward.
                let back = rng.gen_range(0..=r.0.min(2000));
                let fwd = rng.gen_range(0..=2000u32).min(sent_end - r.0 - r.1 as u32);
                let maxlen = if inbound { mss + opt_len - opts_len(&r.3.opts) } else { 60_000 };
                let newlen = ((r.1 as u32 + back + fwd) as usize).min(maxlen);
                r.0 -= back;
                r.1 = newlen;
                r.2.fin = r.2.fin && r.0 as usize + r.1 == sent_end as usize;
            }
            later.push((i + rng.gen_range(1..6), r));
            continue;
        }
        order.push(sg.clone());
        if rng.gen_bool(s.dup) {
            later.push((i + rng.gen_range(0..4), sg));
        }
    }
    order.extend(later.into_iter().map(|(_, r)| r));
    for i in 1..order.len() {
        if rng.gen_bool(s.reorder) {
            order.swap(i - 1, i);
        }
    }
    // Frames; inbound runs of full segments sometimes as one GRO super-packet.
    let gro = inbound && rng.gen_bool(0.2);
    let vlan = rng.gen_bool(0.1).then(|| rng.gen_range(1..4095));
    let mut i = 0;
    while i < order.len() {
        let (o, len, f, a) = order[i].clone();
        let mut total = len;
        let mut j = i + 1;
        if gro && len == mss && !f.fin && !f.psh && !f.urg && !f.cwr && !f.rst {
            while j < order.len()
                && j - i < 40
                && order[j].0 == o + total as u32
                && order[j].1 == mss
                && order[j].2 == f
                && order[j].3.opts == a.opts
                && (order[j].3.dscp, order[j].3.ecn, order[j].3.ttl) == (a.dscp, a.ecn, a.ttl)
                && (total + mss + 80) < 65_535
            {
                total += mss;
                j += 1;
            }
        }
        let payload = stream_bytes(n as u32 + if inbound { 0 } else { 1 << 20 }, o, total);
        let mut spec = mk(v6, n, isn.wrapping_add(o), payload);
        spec.flags = f;
        if f.urg {
            spec.urg_ptr = 1;
        }
        spec.opts = a.opts.clone();
        (spec.dscp, spec.ecn, spec.ttl, spec.ack, spec.window) = (a.dscp, a.ecn, a.ttl, a.ack, a.window);
        spec.ip_id = rng.r#gen();
        spec.flow_label = n as u32;
        spec.vlan = vlan;
        let mut frame = spec.build();
        let mut meta = PacketMeta::PLAIN;
        if j > i + 1 {
            meta.gso = Some(Gso { kind: GsoKind::TcpV4, size: mss as u16, ecn: false });
        }
        if !inbound && total > mss {
            // Larger than the inner MTU only as a GRO super-packet.
            meta.gso = Some(Gso { kind: GsoKind::TcpV4, size: mss as u16, ecn: false });
        }
        match rng.gen_range(0..10) {
            0 => {
                make_partial(&mut frame);
                meta.csum = PARTIAL;
            }
            1..=3 => meta.csum = Checksum::Valid,
            _ => {}
        }
        let s0 = isn.wrapping_add(o);
        evs.push(Ev::Frame { port, frame, meta, tcp: Some((id(&spec), s0, s0.wrapping_add(total as u32))) });
        i = j;
    }
    // Outbound: too-big messages from a router outside, sometimes, each
    // quoting one of the flow's segments after it left (believed only if
    // the flow is tracked then, RFC 5927, and once a second one quoting
    // other bytes confirms it), or, once in four, a sequence number the
    // flow never sent (never believed).
    if !inbound && !evs.is_empty() && rng.gen_bool(0.1) {
        let dst = outer_addr(v6, n);
        let mtu = if v6 { rng.gen_range(1280..1480) } else { rng.gen_range(600..1480) };
        for _ in 0..2 {
            let k = rng.gen_range(0..evs.len());
            let seq = match &evs[k] {
                Ev::Frame { tcp: Some((_, s0, _)), .. } if rng.gen_bool(0.75) => *s0,
                _ => isn.wrapping_add(1 << 31),
            };
            let at = rng.gen_range(k + 1..=evs.len());
            evs.insert(at, Ev::Ptb { frame: too_big(v6, n, mtu, seq), dst, mtu });
        }
    }
    evs
}

fn opts_len(o: &[TcpOptionElement]) -> usize {
    let mut t = etherparse::TcpHeader::new(1, 2, 3, 4);
    t.set_options(o).unwrap();
    t.header_len() - 20
}

fn too_big(v6: bool, n: u16, mtu: u16, seq: u32) -> Vec<u8> {
    // 1480 bytes of IP packet, above every MTU drawn.
    let q = TcpSpec::outbound(v6, n, seq, vec![0; if v6 { 1420 } else { 1440 }]).build();
    let mut v = Vec::new();
    let b = PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER);
    match (outer_addr(v6, 200), inner_addr(v6, n)) {
        (IpAddr::V4(r), IpAddr::V4(to)) => b
            .ipv4(r.octets(), to.octets(), 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: mtu,
            }))
            .write(&mut v, &ip_part(&q)[..28])
            .unwrap(),
        (IpAddr::V6(r), IpAddr::V6(to)) => b
            .ipv6(r.octets(), to.octets(), 64)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu: mtu as u32 })
            .write(&mut v, &ip_part(&q)[..1000])
            .unwrap(),
        _ => unreachable!(),
    }
    v
}

fn udp_flow(rng: &mut ChaCha8Rng, n: u16, v6: bool, next_id: &mut u32) -> Vec<Ev> {
    let mut evs = Vec::new();
    let from_inside = rng.gen_bool(0.5);
    for _ in 0..rng.gen_range(1..6) {
        let id = *next_id;
        *next_id += 1;
        let max = if from_inside { 8952 } else { 1452 };
        let len = if rng.gen_bool(0.5) { rng.gen_range(0..=max) } else { rng.gen_range(0..=1400) };
        let df = v6 || rng.gen_bool(0.5);
        let (src, dst) =
            if from_inside { (inner_addr(v6, n), outer_addr(v6, n)) } else { (outer_addr(v6, n), inner_addr(v6, n)) };
        // The datagram's id rides in its first payload bytes.
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend(stream_bytes(id, 0, len));
        let spec = UdpSpec { src, dst, sport: 7000 + n, dport: 53, df, ip_id: id as u16, payload };
        let frame = spec.build();
        let port = if from_inside { Port::Inner } else { Port::Outer };
        evs.push(Ev::Udp { port, frame, id, df, v6, dst });
    }
    evs
}

#[derive(Debug, Default)]
pub struct Stats {
    pub frames_in: u64,
    pub wires_out: u64,
    pub merged_out: u64,
    pub flows: usize,
    pub pmtu_learned: u64,
}

pub fn run(s: &Shape) -> Result<Stats, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(s.seed);
    let cfg = Config {
        max_flows: s.max_flows,
        max_held_bytes: s.max_held_bytes,
        merge_timeout: Duration::from_micros(s.merge_timeout_us),
        bulk_after: s.bulk_after,
        inner_gso: s.inner_gso,
        outer_gso: s.outer_gso,
        verify_checksums: s.verify_checksums,
        ..test_config()
    };
    let timeout = cfg.merge_timeout;
    let mut h = Harness::new(cfg);
    // Every flow's events, then interleaved as a NIC would deliver them.
    let mut queues: Vec<std::collections::VecDeque<Ev>> = Vec::new();
    let mut udp_id = 0;
    for n in 0..s.flows {
        let n = n as u16;
        let v6 = rng.gen_bool(s.v6_share);
        let evs = if rng.gen_bool(0.1) {
            udp_flow(&mut rng, n, v6, &mut udp_id)
        } else {
            let inbound = rng.gen_bool(0.7);
            if rng.gen_bool(0.2) {
                // Data both ways on one connection (one flow entry for both).
                queues.push(tcp_flow(&mut rng, s, n, v6, !inbound).into());
            }
            tcp_flow(&mut rng, s, n, v6, inbound)
        };
        queues.push(evs.into());
    }
    let mut udp_expect: HashMap<u32, (Vec<u8>, Option<DropReason>)> = HashMap::new();
    let mut udp_verdict: HashMap<u32, (Port, Verdict)> = HashMap::new();
    let mut udp_seen: HashMap<u32, u32> = HashMap::new();
    // (source, IP ID) → (offset, bytes, more fragments).
    let mut frags: HashMap<(IpAddr, u16), Vec<Frag>> = HashMap::new();
    // Destination → MTU of the "too big" error waiting for its confirmation.
    let mut ptb_pending: HashMap<IpAddr, u16> = HashMap::new();
    let mut expected_drops = [0u64; DropReason::ALL.len()];
    // (flow, start, end, arrival) of each held (consumed) TCP input.
    let mut consumed: Vec<(FlowId, u32, u32, Instant)> = Vec::new();
    let mut out_ranges: HashMap<FlowId, Vec<(u32, u32, Instant)>> = HashMap::new();
    let mut stats = Stats { flows: s.flows, ..Stats::default() };
    let mut live: Vec<usize> = (0..queues.len()).collect();
    while !live.is_empty() {
        let k = rng.gen_range(0..live.len());
        let q = live[k];
        let Some(ev) = queues[q].pop_front() else {
            live.swap_remove(k);
            continue;
        };
        // Time: mostly line-rate gaps, sometimes long enough for timeouts.
        let gap = match rng.gen_range(0..100) {
            0..=79 => rng.gen_range(0..5),
            80..=97 => rng.gen_range(5..300),
            _ => rng.gen_range(300..3000),
        };
        h.advance(Duration::from_micros(gap));
        if rng.gen_bool(0.02) {
            h.poke();
        }
        stats.frames_in += 1;
        match ev {
            Ev::Frame { port, frame, meta, tcp } => {
                let v = h.feed(port, frame, meta);
                if let (Verdict::Consumed, Some((id, a, b))) = (v, tcp)
                    && a != b
                    && port == Port::Outer
                {
                    consumed.push((id, a, b, h.now));
                }
                if let Verdict::Dropped(r) = v {
                    return Err(format!("TCP frame dropped ({r:?}) at {:?}", h.elapsed()));
                }
            }
            Ev::Ptb { frame, dst, mtu } => {
                // Believed only if it quotes a packet of a live flow's window
                // (RFC 5927), and learned only when a second such error
                // toward the same destination confirms the first: then the
                // larger of the two MTUs. The sizes are checked against
                // what was learned.
                let (learned, unconfirmed) = (h.eng.counters().pmtu_learned, h.eng.counters().pmtu_unconfirmed);
                let _ = h.feed(Port::Outer, frame, PacketMeta::PLAIN);
                if h.eng.counters().pmtu_unconfirmed > unconfirmed {
                    ptb_pending.insert(dst, mtu);
                }
                if h.eng.counters().pmtu_learned > learned {
                    let mtu = ptb_pending.remove(&dst).map_or(mtu, |first| first.max(mtu));
                    let e = h.pmtu.entry(dst).or_insert(mtu);
                    *e = (*e).min(mtu);
                }
            }
            Ev::Udp { port, frame, id, df, v6, dst } => {
                // Too big for the egress, or for the path MTU learned so far.
                let too_big = (frame.len() - 14 > h.egress_mtu(port.other(), dst) && df).then_some(if v6 {
                    DropReason::TooBigV6
                } else {
                    DropReason::TooBigDf
                });
                udp_expect.insert(id, (frame[14..].to_vec(), too_big));
                let v = h.feed(port, frame, PacketMeta::PLAIN);
                udp_verdict.insert(id, (port, v));
                if let Some(r) = too_big {
                    expected_drops[r as usize] += 1;
                    if v != Verdict::Dropped(r) {
                        return Err(format!("UDP {id} should be dropped as {r:?}, got {v:?}"));
                    }
                }
            }
        }
        let wires = h.check_pending()?;
        for (p, at, w) in wires {
            stats.wires_out += 1;
            if let Some(t) = w.tcp() {
                if p == Port::Inner && !w.payload.is_empty() {
                    let (s, d) = w.src_dst();
                    let id = (s, t.source_port, d, t.destination_port);
                    let a = t.sequence_number.wrapping_add(t.syn as u32);
                    out_ranges.entry(id).or_default().push((a, a.wrapping_add(w.payload.len() as u32), at));
                }
                continue;
            }
            match (&w.transport, w.is_fragment()) {
                (_, true) => {
                    let ip = w.v4().unwrap();
                    let body = match &w.transport {
                        Some(TransportHeader::Udp(u)) => [&u.to_bytes()[..], &w.payload].concat(),
                        _ => w.payload.clone(),
                    };
                    frags.entry((w.src_dst().0, ip.identification)).or_default().push((
                        ip.fragment_offset.byte_offset() as usize,
                        body,
                        ip.more_fragments,
                    ));
                }
                (Some(TransportHeader::Udp(_)), false) => {
                    let id = u32::from_be_bytes(w.payload[..4].try_into().unwrap());
                    *udp_seen.entry(id).or_default() += 1;
                    let (orig, _) = &udp_expect[&id];
                    let hl = if w.v4().is_some() { 20 } else { 40 };
                    if orig[hl + 8..] != w.payload[..] {
                        return Err(format!("UDP {id} changed"));
                    }
                }
                _ => {}
            }
        }
    }
    // Drain: punctual timers until nothing is held, then shutdown.
    h.advance(Duration::from_millis(20));
    h.flush_all();
    for (_, at, w) in h.check_pending()? {
        if let (Some(t), true) = (w.tcp(), !w.payload.is_empty()) {
            let (s, d) = w.src_dst();
            let id = (s, t.source_port, d, t.destination_port);
            let a = t.sequence_number;
            out_ranges.entry(id).or_default().push((a, a.wrapping_add(w.payload.len() as u32), at));
        }
    }
    if h.eng.held_bytes() != 0 {
        return Err("bytes still held after flush_all".into());
    }
    h.oracle.verify()?;
    h.check_accounting()?;
    // UDP: fragments reassemble; every datagram left once, or was dropped.
    for (key, mut fs) in frags {
        fs.sort_by_key(|f| f.0);
        let mut data = Vec::new();
        for (off, body, _) in &fs {
            if *off != data.len() {
                return Err(format!("fragments of {key:?} leave a hole or overlap at {off}"));
            }
            data.extend_from_slice(body);
        }
        if fs.last().unwrap().2 {
            return Err(format!("fragments of {key:?}: last has MF"));
        }
        let id = u32::from_be_bytes(data[8..12].try_into().unwrap());
        *udp_seen.entry(id).or_default() += 1;
        if udp_expect[&id].0[20..] != data[..] {
            return Err(format!("UDP {id} reassembles differently"));
        }
    }
    for (id, (_, drop)) in &udp_expect {
        let want = if drop.is_some() { 0 } else { 1 };
        if udp_seen.get(id).copied().unwrap_or(0) != want {
            let (orig, _) = &udp_expect[id];
            return Err(format!(
                "UDP {id} left {:?} times, want {want} (IP length {}, verdict {:?})",
                udp_seen.get(id),
                orig.len(),
                udp_verdict.get(id)
            ));
        }
    }
    let c = h.eng.counters();
    if c.drop != expected_drops {
        return Err(format!("drops {:?} != expected {expected_drops:?}", c.drop));
    }
    // Latency: every held input left within the merge timeout.
    for (id, a, b, t) in &consumed {
        let rel = |x: u32| x.wrapping_sub(*a) as i32 as i64;
        let mut cover: Vec<(i64, i64)> = out_ranges
            .get(id)
            .map(|v| {
                v.iter()
                    .filter(|(_, _, at)| *at >= *t && *at <= *t + timeout)
                    .map(|(x, y, _)| (rel(*x), rel(*y)))
                    .collect()
            })
            .unwrap_or_default();
        cover.sort_unstable();
        let mut reached = 0i64;
        for (x, y) in cover {
            if x <= reached && y > reached {
                reached = y;
            }
        }
        if reached < rel(*b) {
            return Err(format!(
                "held bytes {a:#x}..{b:#x} of {id:?} (arrived {:?}) not all sent within {timeout:?}",
                *t - h.t0
            ));
        }
    }
    stats.merged_out = c.merged_out;
    stats.pmtu_learned = c.pmtu_learned;
    Ok(stats)
}

fn shape(max_flows_in_workload: usize, max_segments: usize) -> impl Strategy<Value = Shape> {
    (
        any::<u64>(),
        1..=max_flows_in_workload,
        1..=max_segments,
        (0.0..0.15f64, 0.0..0.1f64, 0.0..0.05f64, 0.0..1.0f64),
        prop_oneof![Just(65_536usize), Just(1 << 20), Just(64 << 20)],
        prop_oneof![Just(8usize), Just(100), Just(65_536)],
        (20u64..1000, 0u16..4, any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(|(seed, flows, max_segments, (loss, reorder, dup, v6_share), held, table, t)| Shape {
            seed,
            flows,
            max_segments,
            loss,
            reorder,
            dup,
            v6_share,
            max_flows: table,
            max_held_bytes: held,
            merge_timeout_us: t.0,
            bulk_after: t.1,
            inner_gso: t.2,
            outer_gso: t.3,
            verify_checksums: t.4,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_workloads_keep_every_invariant(s in shape(1000, 12)) {
        run(&s).map_err(|e| TestCaseError::fail(format!("{e}\n{s:?}")))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, max_shrink_iters: 256, ..ProptestConfig::default() })]

    /// The long version: `cargo test --release -- --ignored`.
    #[test]
    #[ignore]
    fn random_workloads_keep_every_invariant_long(s in shape(3000, 40)) {
        run(&s).map_err(|e| TestCaseError::fail(format!("{e}\n{s:?}")))?;
    }
}

/// A fixed, large case that always runs: 1000 flows, both directions.
#[test]
fn thousand_flows_fixed_seed() {
    let s = Shape {
        seed: 42,
        flows: 1000,
        max_segments: 16,
        loss: 0.05,
        reorder: 0.03,
        dup: 0.02,
        v6_share: 0.5,
        max_flows: 65_536,
        max_held_bytes: 64 << 20,
        merge_timeout_us: 200,
        bulk_after: 2,
        inner_gso: false,
        outer_gso: false,
        verify_checksums: true,
    };
    let st = run(&s).unwrap();
    assert!(st.merged_out > 100, "the workload exercises merging: {st:?}");
    assert!(st.pmtu_learned > 0, "and learned path MTUs: {st:?}");
}

/// Found by the property test (a test bug then): UDP toward an outer host
/// whose path MTU was learned from a TCP flow's ICMP is dropped as too big.
#[test]
fn udp_respects_a_path_mtu_learned_for_another_flow() {
    let s = Shape {
        seed: 7514984038802976758,
        flows: 915,
        max_segments: 1,
        loss: 0.11855015902059159,
        reorder: 0.07290511544336385,
        dup: 0.012242471994810582,
        v6_share: 0.03255974686271756,
        max_flows: 8,
        max_held_bytes: 1048576,
        merge_timeout_us: 812,
        bulk_after: 0,
        inner_gso: true,
        outer_gso: false,
        verify_checksums: false,
    };
    run(&s).unwrap();
}
