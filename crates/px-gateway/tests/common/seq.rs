//! The stateful engine driver (issue 10, "Fuzzing"): bytes decoded into a
//! sequence of timed events across both ports, every output checked after
//! every call. Shared by the cargo-fuzz target `engine_seq`
//! (`fuzz/fuzz_targets/engine_seq.rs`, which includes this module with
//! `#[path]`) and the stable test `tests/engine_seq.rs` (seeded random
//! bytes), so CI runs the same driver the fuzzer does.
//!
//! Events: advance the clock (the engine woken at each deadline on the way);
//! an extra wake-up; TCP segments of a small pool of flows (IPv4 and IPv6)
//! from either side, with sequence numbers that mostly continue the flow's
//! stream (so merges, holds and cuts happen) and sometimes go back, jump
//! or are random, any flags (SYN with data, FIN, RST, PSH, URG, ECE, CWR),
//! any ECN codepoint, raw option bytes (MSS of any value incl. 0 and 1 at
//! even or odd offsets, timestamps, SACK, window scale, MD5 kind 19, AO kind
//! 29, unknown kinds), optionally 802.1Q-tagged or as a GRO super-packet;
//! ICMP "fragmentation needed" / "packet too big" from either side, quoting
//! a flow's segment or a random one, any MTU; UDP toward the caravan
//! prefixes (with and without the caravan codepoint); caravans from inside,
//! valid or with a byte changed; VXLAN and GRE frames carrying a flow's
//! segment; mutated valid frames and raw bytes. Offload metadata as the
//! kernel hands it over (issue 27): TCP GRO super-packets from either port,
//! partial checksums (`CHECKSUM_PARTIAL`, the field holding the
//! pseudo-header sum) on single segments and super-packets, UDP GRO
//! batches. A second engine shares the path-MTU cache (as a gateway's
//! workers do) and takes half the ICMP errors, so errors about one
//! engine's flows are validated through the other; reloads change the
//! live configuration mid-sequence.
//!
//! Checked after every call (by [`Harness`]): every frame the engine builds
//! parses with etherparse, its checksums verify (GSO super-packets after a
//! software cut), and it fits the egress MTU; a frame passed on untouched
//! that was well-formed still is (malformed input passed on is only checked
//! for size); counters account for every input and agree with the verdicts;
//! nothing is dropped by a wake-up (held data is never lost); what one
//! input made the engine queue is bounded by the input's size, and the
//! engine's state by the configuration ([`Footprint`]: flows, held and
//! caravan bytes, the deadline queue, the buffer pool, the handshake
//! memory). At the end,
//! after `flush_all`: per TCP flow, the ordered history out equals the one
//! in and every byte out is the byte in ([`Oracle::verify`]), except for
//! flows that had a segment dropped or fragmented as a router would, or a
//! malformed frame on their 4-tuple.

use super::*;
use etherparse::{EtherType, Ethernet2Header, Icmpv4Type, Icmpv6Type, icmpv4::DestUnreachableHeader};
use px_caravan::{Builder, InnerChecksum, Pseudo};
use px_gateway::{Footprint, PshPolicy, SharedPmtu};
use std::collections::VecDeque;

/// Reads the input; past its end every read is 0.
pub struct Input<'a> {
    d: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(d: &'a [u8]) -> Input<'a> {
        Input { d }
    }
    pub fn is_empty(&self) -> bool {
        self.d.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        match self.d.split_first() {
            Some((&b, r)) => {
                self.d = r;
                b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.d.len());
        let (a, r) = self.d.split_at(n);
        self.d = r;
        a.to_vec()
    }
}

/// What one run did, for the caller's totals.
#[derive(Debug, Default, Clone, Copy)]
pub struct SeqStats {
    pub events: u64,
    pub frames: u64,
    pub outputs: u64,
    pub flows_checked: u64,
    pub flows_skipped: u64,
}

const FLOWS: usize = 6;
/// At most this many events per input (keeps one run short).
const MAX_EVENTS: usize = 400;

fn flow_v6(i: usize) -> bool {
    i % 3 == 2
}

/// (src, sport, dst, dport) of pool flow `i` in direction `dir` (0: from
/// outside, 1: from inside).
fn flow_id(i: usize, dir: usize) -> FlowId {
    let v6 = flow_v6(i);
    let n = i as u16;
    let (o, inn) = ((outer_addr(v6, n), 40_000 + n), (inner_addr(v6, n), 80));
    if dir == 0 { (o.0, o.1, inn.0, inn.1) } else { (inn.0, inn.1, o.0, o.1) }
}

/// The TCP tuple of a frame that parses as TCP, as the oracle keys it.
fn tcp_tuple(frame: &[u8]) -> Option<FlowId> {
    let p = etherparse::PacketHeaders::from_ethernet_slice(frame).ok()?;
    let (Some(net), Some(etherparse::TransportHeader::Tcp(t))) = (&p.net, &p.transport) else { return None };
    flow_id_of(net, t)
}

fn config(sel: u8) -> Config {
    Config {
        max_flows: [2, 4, 64, 3][usize::from(sel & 3)],
        max_held_bytes: if sel & 4 != 0 { 65_536 } else { 1 << 20 },
        bulk_after: if sel & 8 != 0 { 1 } else { 3 },
        merge_timeout: Duration::from_micros(if sel & 16 != 0 { 50 } else { 200 }),
        inner_gso: sel & 32 != 0,
        outer_gso: sel & 64 != 0,
        caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap(), "2001:db8:2::/48".parse().unwrap()],
        icmp_rate_per_sec: 1000,
        ..test_config()
    }
}

/// Raw TCP option bytes from a selector: timestamps, MSS (at an odd offset
/// behind a NOP if asked), SACK, window scale, MD5, AO, an unknown kind.
fn options(inp: &mut Input, tsval: u32, tsecr: u32, may_sign: bool) -> Vec<u8> {
    let sel = inp.u8();
    let mut o: Vec<u8> = Vec::new();
    let add = |o: &mut Vec<u8>, opt: &[u8]| {
        if o.len() + opt.len() <= 40 {
            o.extend_from_slice(opt);
        }
    };
    if sel & 64 != 0 {
        add(&mut o, &[1]);
    }
    if sel & 2 != 0 {
        let mss = match inp.u8() % 6 {
            0 => 0,
            1 => 1,
            2 => 536,
            3 => 1460,
            4 => 8960,
            _ => inp.u16(),
        };
        let m = mss.to_be_bytes();
        add(&mut o, &[2, 4, m[0], m[1]]);
    }
    if sel & 1 != 0 {
        let (a, b) = (tsval.to_be_bytes(), tsecr.to_be_bytes());
        add(&mut o, &[1, 1, 8, 10, a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]);
    }
    if sel & 32 != 0 {
        add(&mut o, &[3, 3, 7]);
    }
    if sel & 16 != 0 {
        add(&mut o, &[4, 2]);
    }
    // A flow seen signed passes untouched for good (and too big, gets the
    // router's treatment): only some flows sign, so that the others stay
    // mergeable.
    let sig = if may_sign && sel & 0x0c != 0 { inp.u8() % 4 } else { 7 };
    if sig == 0 {
        let mut md5 = vec![19, 18];
        md5.extend((0..16).map(|i| i * 7 + 19));
        add(&mut o, &md5);
    }
    if sig == 1 {
        let mut ao = vec![29, 16, 1, 2];
        ao.extend((0..12).map(|i| i * 5 + 29));
        add(&mut o, &ao);
    }
    if sel & 128 != 0 {
        add(&mut o, &[253, 4, 0xab, 0xcd]);
    }
    while o.len() % 4 != 0 {
        o.push(0);
    }
    o
}

/// A TCP frame of `s` with raw option bytes (etherparse has no MD5/AO
/// elements), VLAN tag kept.
fn tcp_frame(s: &TcpSpec, raw: &[u8]) -> Vec<u8> {
    let mut t = TcpHeader::new(s.sport, s.dport, s.seq, s.window);
    t.acknowledgment_number = s.ack;
    let f = s.flags;
    (t.syn, t.ack, t.fin, t.rst, t.psh, t.urg, t.ece, t.cwr) = (f.syn, f.ack, f.fin, f.rst, f.psh, f.urg, f.ece, f.cwr);
    t.urgent_pointer = s.urg_ptr;
    t.set_options_raw(raw).expect("options fit");
    let ip = ip_headers(s.src, s.dst, s.dscp, s.ecn, s.ttl, s.df, s.ip_id, s.flow_label);
    let b = PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER);
    let mut v = Vec::new();
    match s.vlan {
        Some(id) => b.single_vlan(id.try_into().unwrap()).ip(ip).tcp_header(t).write(&mut v, &s.payload).unwrap(),
        None => b.ip(ip).tcp_header(t).write(&mut v, &s.payload).unwrap(),
    }
    v
}

fn udp_frame(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, dscp: u8, df: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER)
        .ip(ip_headers(src, dst, dscp, 0, 64, df, 4321, 0))
        .udp(sport, dport)
        .write(&mut v, payload)
        .unwrap();
    v
}

/// The driver's state across events.
struct Driver<'a> {
    h: Harness,
    /// A second engine sharing `h`'s path-MTU cache.
    peer: Harness,
    /// When the last inputs arrived (for the deadline queue's bound).
    recent: VecDeque<Instant>,
    inp: Input<'a>,
    /// Next sequence number per pool flow and direction.
    next: [[u32; 2]; FLOWS],
    /// Flows left out of the final byte-exactness check, and why.
    skip: HashMap<FlowId, &'static str>,
    stats: SeqStats,
}

impl Driver<'_> {
    fn tsval(&self) -> u32 {
        (self.h.elapsed().as_micros() / 1000) as u32 + 1
    }

    /// A segment of pool flow `i` in direction `dir`; returns the spec,
    /// raw options and whether its length needs GRO metadata.
    fn segment(&mut self) -> (usize, usize, TcpSpec, Vec<u8>) {
        let b0 = self.inp.u8();
        let i = usize::from(b0) % FLOWS;
        let dir = usize::from(b0 >> 3 & 1);
        let b1 = self.inp.u8();
        let flags = Flags {
            syn: b1 & 0x83 == 0x01,
            ack: b1 & 0x80 == 0 || b1 & 1 == 0,
            fin: b1 & 2 != 0 && b1 & 0x40 != 0,
            rst: b1 & 0x44 == 0x04,
            psh: b1 & 8 != 0,
            urg: b1 & 0x10 != 0 && b1 & 0x20 != 0,
            ece: b1 & 0x20 != 0 && b1 & 0x10 == 0,
            cwr: b1 & 0x30 == 0x30 && b1 & 0x40 != 0,
            // AccECN's AE bit (the former NS), so the ECN merge and split
            // rules meet it too.
            ae: b1 & 0x90 == 0x90,
        };
        let tsval = self.tsval();
        let raw = options(&mut self.inp, tsval, 7, i >= 4);
        let v6 = flow_v6(i);
        let hdr = if v6 { 40 } else { 20 } + 20 + raw.len();
        let cap = if dir == 0 { 1500 } else { 9000 } - hdr;
        let len = match self.inp.u8() % 16 {
            0..=3 => 0,
            4 => 1,
            5 => 100,
            6 => 536,
            7 | 8 => 1448.min(cap),
            9 => cap,
            10 => 2 * 1448,
            11 => 4000,
            12 => 8948,
            _ => usize::from(self.inp.u16()) % 9000,
        };
        // An RST carries no data here: one too big for the egress is cut as
        // Linux GSO cuts it, RST on every piece, and the receiver reads no
        // further than the first (the engine's choice, not a loss).
        let len = if flags.rst { 0 } else { len };
        // From outside, a segment larger than the port's MTU can only be a
        // GRO super-packet; from inside, the inner MTU bounds it.
        let len = if dir == 1 && self.inp.u8() > 32 { len.min(cap) } else { len.min(65_000 - hdr) };
        let mode = self.inp.u8();
        let next = self.next[i][dir];
        let seq = match mode % 16 {
            0..=11 => next.wrapping_sub(flags.syn as u32),
            12 | 13 => next.wrapping_sub(u32::from(self.inp.u16())),
            14 => next.wrapping_add(u32::from(self.inp.u16())),
            _ => self.inp.u32(),
        };
        let data_seq = seq.wrapping_add(flags.syn as u32);
        let end = data_seq.wrapping_add(len as u32).wrapping_add(flags.fin as u32);
        if mode % 16 < 12 || (end.wrapping_sub(next) as i32) > 0 {
            self.next[i][dir] = end;
        }
        let (src, sport, dst, dport) = flow_id(i, dir);
        let mut s = TcpSpec::new(src, dst, sport, dport, seq, stream_bytes((i * 2 + dir) as u32, data_seq, len));
        s.flags = flags;
        s.ack = self.next[i][1 - dir];
        s.urg_ptr = if flags.urg { self.inp.u16() } else { 0 };
        let b5 = self.inp.u8();
        s.ecn = b5 & 3;
        s.df = b5 & 6 != 0;
        s.ip_id = u16::from(b5);
        s.vlan = (b5 & 0xf8 == 0xf8).then_some(5);
        (i, dir, s, raw)
    }

    fn feed(
        &mut self,
        port: Port,
        frame: Vec<u8>,
        meta: PacketMeta,
        flow: Option<usize>,
        trusted: bool,
    ) -> Result<(), String> {
        let before = self.h.eng.counters().clone();
        self.h.untrusted_input = !trusted;
        if !trusted && let Some(i) = flow {
            self.skip.insert(flow_id(i, 0), "malformed frame on its tuple");
            self.skip.insert(flow_id(i, 1), "malformed frame on its tuple");
        }
        // A changed byte may have moved the frame to another tuple, one that
        // still parses (and whose checksum the changes happened to keep):
        // that tuple's history is not checked either.
        if !trusted && let Some((a, ap, b, bp)) = tcp_tuple(&frame) {
            self.skip.insert((a, ap, b, bp), "malformed frame on its tuple");
            self.skip.insert((b, bp, a, ap), "malformed frame on its tuple");
        }
        let trace = std::env::var_os("PX_SEQ_TRACE").is_some().then(|| format!("{port:?} {meta:?} {:02x?}", &frame));
        let input_len = frame.len();
        let v = self.h.feed(port, frame, meta);
        // What one input may make the engine hold to send (issue 27 item
        // 9): its pieces in buffers of their own size class, at most 32
        // buffer bytes per input byte (an 8-byte caravan record in a
        // 256-byte buffer), plus the holds and caravans it sent early,
        // which `max_held_bytes` bounds, and one ICMP error.
        let full = self.h.eng.config().imtu as usize + 160;
        let bound = 32 * input_len + 2 * self.h.eng.config().max_held_bytes + 4 * full;
        if self.h.queued_buffer_bytes > bound {
            return Err(format!(
                "one {input_len}-byte input queued {} buffer bytes (bound {bound})",
                self.h.queued_buffer_bytes
            ));
        }
        self.stats.frames += 1;
        if let Some(t) = trace {
            eprintln!("{t}\n  -> {v:?}, {} out", self.h.out.len());
        }
        let after = self.h.eng.counters();
        // Every input is accounted for exactly once: forwarded, merged, cut,
        // fragmented, dropped, packed into a caravan or opened as one (an
        // opened caravan's datagrams too big for the outside count as
        // datagrams, in `caravan.too_big_*`, not as received packets).
        let d = after.received_accounted() - before.received_accounted();
        let fwd = after.forwarded - before.forwarded;
        let ok = match v {
            Verdict::Forward { .. } => d == 1 && fwd == 1,
            Verdict::Dropped(r) => d == 1 && after.drops(r) == before.drops(r) + 1,
            Verdict::Consumed => d == 1 && fwd == 0,
            // Whole pieces of a super-packet passed on, the rest merged; or
            // the packet passed on without the link layer's trailer.
            Verdict::ForwardPart { start, .. } => {
                d == 1 && (fwd == 0 && after.merged_in == before.merged_in + 1 || fwd == 1 && start == 0)
            }
        };
        if !ok || after.inner.rx_packets + after.outer.rx_packets != self.h.tally.fed {
            return Err(format!("input not accounted once: verdict {v:?}, +{d}, {after:?}"));
        }
        let (fragmented, drops_now) = (after.fragmented_in != before.fragmented_in, after.total_drops());
        self.recent.push_back(self.h.now);
        self.bounded()?;
        if let Some(i) = flow {
            let why = if fragmented {
                Some("fragmented as a router would")
            } else if let Verdict::Dropped(r) = v {
                Some(r.name())
            } else if drops_now != before.total_drops() {
                Some("dropped as a router would")
            } else {
                None
            };
            if let Some(why) = why {
                self.skip.insert(flow_id(i, 0), why);
                self.skip.insert(flow_id(i, 1), why);
            }
        }
        self.check()
    }

    /// The engine's state within what the configuration allows. Stale
    /// deadlines leave as their time passes: at most the holds and caravans
    /// started within one merge timeout, each input starting at most one
    /// per inner segment it fills (45 for a 64 KB super-packet).
    fn bounded(&mut self) -> Result<(), String> {
        let cfg = self.h.eng.config().clone();
        let window = cfg.merge_timeout + Duration::from_millis(1);
        while self.recent.front().is_some_and(|t| self.h.now.saturating_duration_since(*t) > window) {
            self.recent.pop_front();
        }
        let f: Footprint = self.h.eng.footprint();
        let full = cfg.imtu as usize + 160;
        let ok = f.flows <= cfg.max_flows
            && f.held_reserved <= cfg.max_held_bytes.max(full)
            && f.caravans_open <= cfg.max_flows
            && f.caravans_reserved <= cfg.max_held_bytes.max(full)
            && f.deadlines <= 64 * (self.recent.len() + 1) + 2 * cfg.max_flows
            && f.pool_free <= 3 * 4096
            && f.handshake_slots == self.peer.eng.footprint().handshake_slots
            && f.imtu_probing <= 4096;
        if !ok {
            return Err(format!("footprint beyond the configuration: {f:?}, {} recent inputs", self.recent.len()));
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), String> {
        let outs = self.h.check_outputs().map_err(|e| format!("at {:?}: {e}", self.h.elapsed()))?;
        self.stats.outputs += outs.len() as u64;
        self.peer.now = self.h.now;
        let peer = self.peer.check_outputs().map_err(|e| format!("peer at {:?}: {e}", self.h.elapsed()))?;
        self.stats.outputs += peer.len() as u64;
        self.h.untrusted_input = false;
        Ok(())
    }

    fn timed<F: FnOnce(&mut Harness)>(&mut self, f: F) -> Result<(), String> {
        let drops = self.h.eng.counters().total_drops();
        f(&mut self.h);
        let c = self.h.eng.counters();
        if c.total_drops() != drops {
            return Err(format!("a wake-up dropped {} packet(s): {c:?}", c.total_drops() - drops));
        }
        self.check()
    }

    fn event(&mut self) -> Result<(), String> {
        self.stats.events += 1;
        match self.inp.u8() % 20 {
            0..=2 => {
                let d = u64::from(self.inp.u16()) << (self.inp.u8() % 8);
                self.timed(|h| h.advance(Duration::from_micros(d)))
            }
            3 if self.inp.u8() < 200 => self.timed(|h| h.poke()),
            3 => self.reload(),
            4..=10 | 16 | 17 => {
                let (i, dir, s, raw) = self.segment();
                let frame = tcp_frame(&s, &raw);
                let port = if dir == 0 { Port::Outer } else { Port::Inner };
                let plen = s.payload.len();
                let ip_len = if s.is_v6() { 40 } else { 20 } + 20 + raw.len() + plen;
                let mtu = if dir == 0 { 1500 } else { 9000 };
                let mut frame = frame;
                // The kernel's offload state: a super-packet (larger than
                // its port's MTU) is GRO'd; its checksum, and sometimes a
                // single segment's, arrives partial (the field holding the
                // pseudo-header sum) or verified.
                let partial = self.inp.u8() < 96;
                let csum = if partial {
                    make_partial(&mut frame);
                    // The TCP header starts before its options and the payload.
                    let l4 = frame.len() - plen - 20 - raw.len();
                    Checksum::Partial { start: l4 as u16, offset: 16 }
                } else if ip_len > mtu || self.inp.u8() < 64 {
                    Checksum::Valid
                } else {
                    Checksum::Unknown
                };
                let meta = if ip_len > mtu {
                    // A GRO super-packet of `mss`-byte segments.
                    let mss = (mtu - (ip_len - plen)) as u16;
                    let kind = if s.is_v6() { GsoKind::TcpV6 } else { GsoKind::TcpV4 };
                    PacketMeta { gso: Some(Gso { kind, size: mss, ecn: false }), csum, hdr_len: 0 }
                } else {
                    PacketMeta { csum, ..PacketMeta::PLAIN }
                };
                self.feed(port, frame, meta, Some(i), true)
            }
            11 => self.icmp(),
            12 => self.udp(),
            13 => self.caravan(),
            14 if self.inp.u8() < 40 => self.sctp(),
            14 => self.tunnel(),
            15 if self.inp.u8() < 64 => {
                // A valid segment with some bytes changed.
                let (i, dir, s, raw) = self.segment();
                let mut frame = tcp_frame(&s, &raw);
                for _ in 0..=self.inp.u8() % 3 {
                    let at = usize::from(self.inp.u16()) % frame.len();
                    frame[at] ^= self.inp.u8() | 1;
                }
                let cut = usize::from(self.inp.u8());
                if cut > 200 {
                    frame.truncate(frame.len().saturating_sub(cut - 200));
                }
                let port = if dir == 0 { Port::Outer } else { Port::Inner };
                self.feed(port, frame, PacketMeta::PLAIN, Some(i), false)
            }
            _ => {
                let port = if self.inp.u8() & 1 == 0 { Port::Outer } else { Port::Inner };
                let max = if port == Port::Outer { 1518 } else { 9018 };
                let len = match self.inp.u8() {
                    0..=15 => usize::from(self.inp.u16()) % max,
                    n => usize::from(n) / 2,
                };
                let frame = self.inp.bytes(len);
                self.feed(port, frame, PacketMeta::PLAIN, None, false)
            }
        }
    }

    /// ICMP too-big from either side quoting a pool flow's segment (near
    /// its sequence, or anywhere) or a random tuple.
    fn icmp(&mut self) -> Result<(), String> {
        let b = self.inp.u8();
        let i = usize::from(b) % FLOWS;
        let from_inside = b & 0x10 != 0;
        let v6 = flow_v6(i);
        // The quoted packet went the other way: from inside for an ICMP
        // from outside.
        let qdir = if from_inside { 0 } else { 1 };
        let (mut src, mut sport, mut dst, mut dport) = flow_id(i, qdir);
        if b & 0x20 != 0 {
            // A tuple the gateway never carried.
            let r = self.inp.u16();
            if qdir == 1 {
                src = inner_addr(v6, r % 200);
                dst = outer_addr(v6, r >> 8);
            } else {
                src = outer_addr(v6, r % 200);
                dst = inner_addr(v6, r >> 8);
            }
            (sport, dport) = (r, r.rotate_left(3));
        }
        let next = self.next[i][qdir];
        let seq = if b & 0x40 != 0 { self.inp.u32() } else { next.wrapping_sub(u32::from(self.inp.u8()) * 100) };
        let qlen = [1448usize, 8948, 1400, 100, 0][usize::from(self.inp.u8() % 5)];
        let q = TcpSpec::new(src, dst, sport, dport, seq, stream_bytes(0, 0, qlen)).build();
        let quoted = &q[14..(14 + if v6 { 1232 } else { 548 }).min(q.len())];
        let mtu = [0u16, 68, 552, 576, 1000, 1280, 1400, 1480, 1499, 1500, 9000][usize::from(self.inp.u8() % 11)];
        let router = if from_inside { inner_addr(v6, 249) } else { outer_addr(v6, 249) };
        let mut v = Vec::new();
        match (router, src) {
            (IpAddr::V4(r), IpAddr::V4(s)) => PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER)
                .ipv4(r.octets(), s.octets(), 64)
                .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: mtu,
                }))
                .write(&mut v, quoted)
                .unwrap(),
            (IpAddr::V6(r), IpAddr::V6(s)) => PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER)
                .ipv6(r.octets(), s.octets(), 64)
                .icmpv6(Icmpv6Type::PacketTooBig { mtu: u32::from(mtu) })
                .write(&mut v, quoted)
                .unwrap(),
            _ => unreachable!(),
        }
        let port = if from_inside { Port::Inner } else { Port::Outer };
        if self.inp.u8() & 1 == 0 {
            // Through the other worker: it validates what it carries and
            // passes the rest on through the shared cache.
            self.peer.now = self.h.now;
            let _ = self.peer.feed(port, v, PacketMeta::PLAIN);
            return self.check();
        }
        self.feed(port, v, PacketMeta::PLAIN, None, true)
    }

    /// An SCTP packet whose CRC32c the sender left to offload
    /// (`CHECKSUM_PARTIAL` at offset 8 of the SCTP header, as veth hands it
    /// over): it leaves with its checksum finished, checked here with
    /// px-wire's CRC32c (whose own tests compare it with scapy's).
    fn sctp(&mut self) -> Result<(), String> {
        let b = self.inp.u8();
        let v6 = b & 1 != 0;
        let n = u16::from(b >> 1 & 3);
        let from_inside = b & 8 != 0;
        let mut sctp = vec![0x13, 0x88, 0x13, 0x89];
        sctp.extend(self.inp.u32().to_be_bytes());
        sctp.extend([0xde, 0xad, 0xbe, 0xef]);
        let data = stream_bytes(u32::from(b), 0, usize::from(self.inp.u8()) * 4);
        // A DATA chunk: type 0, flags, length, TSN, stream, sequence, PPID.
        sctp.extend([0, 3]);
        sctp.extend(((16 + data.len()) as u16).to_be_bytes());
        sctp.extend([0u8; 12]);
        sctp.extend(&data);
        let (src, dst, port) = if from_inside {
            (inner_addr(v6, n), outer_addr(v6, n), Port::Inner)
        } else {
            (outer_addr(v6, n), inner_addr(v6, n), Port::Outer)
        };
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER)
            .ip(ip_headers(src, dst, 0, 0, 64, true, 99, 0))
            .write(&mut frame, etherparse::IpNumber(132), &sctp)
            .unwrap();
        let l4 = frame.len() - sctp.len();
        let meta = PacketMeta { csum: Checksum::Partial { start: l4 as u16, offset: 8 }, ..PacketMeta::PLAIN };
        let before = self.h.sent.len();
        self.feed(port, frame, meta, None, true)?;
        for o in &self.h.sent[before..] {
            let Ok(Some(info)) = px_wire::FrameInfo::parse(&o.frame) else { continue };
            if info.protocol != 132 || info.fragment {
                continue;
            }
            let mut p = o.frame[info.l4..info.end].to_vec();
            let stored = u32::from_le_bytes([p[8], p[9], p[10], p[11]]);
            p[8..12].fill(0);
            if px_wire::crc32c::crc32c(&p) != stored {
                return Err(format!("an SCTP packet left with a wrong CRC32c: {:02x?}", &o.frame));
            }
        }
        Ok(())
    }

    /// A reload: the live part of the configuration changes (the merge
    /// timeout, PSH policy, bulk detection, the hold budget, ICMP rate);
    /// what was held leaves first, in order.
    fn reload(&mut self) -> Result<(), String> {
        let b = self.inp.u8();
        let old = self.h.eng.config().clone();
        let new = Config {
            merge_timeout: Duration::from_micros([50, 200, 500, 2_000][usize::from(b & 3)]),
            psh: [PshPolicy::Adaptive, PshPolicy::Flush, PshPolicy::Hold][usize::from(b >> 2 & 3) % 3],
            bulk_after: [1, 3, 8][usize::from(b >> 4 & 3) % 3],
            max_held_bytes: if b & 0x40 != 0 { 65_536 } else { 1 << 20 },
            icmp_rate_per_sec: if b & 0x80 != 0 { 1000 } else { 10 },
            ..old.clone()
        };
        let drops = self.h.eng.counters().total_drops();
        // An unchanged configuration changes nothing (what is held stays).
        let changed = new != old;
        self.h.reload(new).map_err(|e| format!("a live change refused: {e}"))?;
        if self.h.eng.counters().total_drops() != drops || (changed && self.h.eng.held_bytes() != 0) {
            return Err("a reload dropped or kept held data".into());
        }
        self.check()
    }

    /// UDP from outside toward the caravan prefixes (packed inbound), with
    /// or without the caravan codepoint, or from inside.
    fn udp(&mut self) -> Result<(), String> {
        let b = self.inp.u8();
        let v6 = b & 1 != 0;
        let n = u16::from(b >> 1 & 3);
        let len = [0usize, 8, 100, 1200, 1400, 1472, 3000][usize::from(self.inp.u8() % 7)];
        let dscp = if b & 0x20 != 0 { px_caravan::DEFAULT_DSCP } else { 0 };
        let df = b & 0x40 != 0;
        let payload = stream_bytes(u32::from(b), 0, len);
        let (port, frame) = if b & 0x80 == 0 {
            let hdr = if v6 { 48 } else { 28 };
            let len = len.min(1500 - hdr);
            (Port::Outer, udp_frame(outer_addr(v6, n), inner_addr(v6, n), 5000 + n, 443, dscp, df, &payload[..len]))
        } else {
            (Port::Inner, udp_frame(inner_addr(v6, n), outer_addr(v6, n), 443, 5000 + n, dscp, df, &payload))
        };
        let batch = self.inp.u8();
        if batch < 48 {
            // A UDP GRO batch (`rx-udp-gro-forwarding`): up to 64 datagrams
            // of `size` bytes (the last shorter), the checksum partial.
            let size = [1usize, 8, 100, 1200, 1472][usize::from(batch % 5)];
            let count = 1 + usize::from(self.inp.u8() % 64);
            let total = (size * count - usize::from(batch & 1) * size / 2).min(65_000);
            let payload = stream_bytes(u32::from(b), 0, total);
            let (src, dst, sp, dp) = if port == Port::Outer {
                (outer_addr(v6, n), inner_addr(v6, n), 5000 + n, 443)
            } else {
                (inner_addr(v6, n), outer_addr(v6, n), 443, 5000 + n)
            };
            let mut frame = udp_frame(src, dst, sp, dp, dscp, df, &payload);
            make_partial_udp(&mut frame);
            let l4 = frame.len() - total - 8;
            let meta = PacketMeta {
                gso: Some(Gso { kind: GsoKind::UdpL4, size: size as u16, ecn: false }),
                csum: Checksum::Partial { start: l4 as u16, offset: 6 },
                hdr_len: (l4 + 8) as u16,
            };
            return self.feed(port, frame, meta, None, true);
        }
        self.feed(port, frame, PacketMeta::PLAIN, None, true)
    }

    /// A caravan from inside (unpacked outbound), valid or with bytes changed.
    fn caravan(&mut self) -> Result<(), String> {
        let b = self.inp.u8();
        let v6 = b & 1 != 0;
        let (s, d) = (inner_addr(v6, 1), outer_addr(v6, 1));
        let pseudo = match (s, d) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Pseudo::V4 { src: s, dst: d },
            (IpAddr::V6(s), IpAddr::V6(d)) => Pseudo::V6 { src: s, dst: d },
            _ => unreachable!(),
        };
        let mut bld = Builder::new(vec![0u8; 9000], 443, 4000);
        for k in 0..=(b >> 1) % 8 {
            let len = [0usize, 1, 100, 1200, 1472, 1500][usize::from(self.inp.u8() % 6)];
            if bld.push(&stream_bytes(9, u32::from(k) * 3000, len), InnerChecksum::Compute(pseudo)).is_err() {
                break;
            }
        }
        let mut payload = bld.as_bytes().to_vec();
        let hdr = if v6 { 48 } else { 28 };
        payload.truncate(9000 - hdr);
        let trusted = b & 0x80 == 0;
        if !trusted && !payload.is_empty() {
            let at = usize::from(self.inp.u16()) % payload.len();
            payload[at] ^= self.inp.u8() | 1;
        }
        let mut v = Vec::new();
        PacketBuilder::ethernet2(MAC_INNER, MAC_OUTER)
            .ip(ip_headers(s, d, px_caravan::DEFAULT_DSCP, 2, 64, b & 0x40 != 0, 777, 0))
            .udp(443, 4000)
            .write(&mut v, &payload)
            .unwrap();
        // A changed byte leaves the outer UDP checksum valid: the caravan
        // inside, or a datagram's own (end-to-end) checksum, is not.
        self.feed(Port::Inner, v, PacketMeta::PLAIN, None, trusted)
    }

    /// VXLAN (UDP 4789) or GRE carrying a pool flow's segment.
    fn tunnel(&mut self) -> Result<(), String> {
        let (_, dir, s, raw) = self.segment();
        let inner = tcp_frame(&TcpSpec { vlan: None, ..s.clone() }, &raw);
        let b = self.inp.u8();
        let port = if dir == 0 { Port::Outer } else { Port::Inner };
        let (ts, td) = match port {
            Port::Outer => (outer_addr(false, 200), inner_addr(false, 200)),
            Port::Inner => (inner_addr(false, 200), outer_addr(false, 200)),
        };
        let max = if port == Port::Outer { 1500 } else { 9000 };
        let frame = if b & 1 == 0 {
            let mut p = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
            p.extend_from_slice(&inner);
            p.truncate(max - 28);
            udp_frame(ts, td, 5555, 4789, 0, true, &p)
        } else {
            if s.is_v6() {
                return Ok(());
            }
            let mut p = vec![0, 0, 0x08, 0];
            p.extend_from_slice(&inner[14..]);
            p.truncate(max - 20);
            let (IpAddr::V4(a), IpAddr::V4(c)) = (ts, td) else { unreachable!() };
            let mut ip = Ipv4Header::new(p.len() as u16, 64, IpNumber::GRE, a.octets(), c.octets()).unwrap();
            ip.dont_fragment = true;
            ip.header_checksum = ip.calc_header_checksum();
            let mut v = Vec::new();
            Ethernet2Header { source: MAC_OUTER, destination: MAC_INNER, ether_type: EtherType::IPV4 }
                .write(&mut v)
                .unwrap();
            ip.write(&mut v).unwrap();
            v.extend_from_slice(&p);
            v
        };
        self.feed(port, frame, PacketMeta::PLAIN, None, true)
    }
}

/// Runs the events `data` decodes into; `Err` describes the first broken
/// invariant (the fuzz target panics with it).
pub fn run(data: &[u8]) -> Result<SeqStats, String> {
    let mut inp = Input::new(data);
    let cfg = config(inp.u8());
    let mut next = [[0u32; 2]; FLOWS];
    for (i, n) in next.iter_mut().enumerate() {
        *n = [1_000_000 * (i as u32 + 1), 0xffff_0000u32.wrapping_add(77_777 * i as u32)];
    }
    let shared = SharedPmtu::new(cfg.pmtu_cache_size, cfg.pmtu_lifetime);
    let eng = Engine::with_shared_pmtu(cfg.clone(), shared.clone()).map_err(|e| e.to_string())?;
    let peer = Engine::with_shared_pmtu(cfg.clone(), shared).map_err(|e| e.to_string())?;
    let mut d = Driver {
        h: Harness::with_engine(cfg.clone(), eng),
        peer: Harness::with_engine(cfg, peer),
        recent: VecDeque::new(),
        inp,
        next,
        skip: HashMap::new(),
        stats: SeqStats::default(),
    };
    let mut n = 0;
    while !d.inp.is_empty() && n < MAX_EVENTS {
        d.event()?;
        n += 1;
    }
    d.timed(|h| h.advance(Duration::from_millis(5)))?;
    d.h.flush_all();
    d.check()?;
    if std::env::var_os("PX_SEQ_SKIPS").is_some() {
        for r in d.skip.values() {
            eprintln!("skip: {r}");
        }
    }
    d.h.oracle.skip = d.skip.keys().copied().collect();
    d.h.oracle.verify()?;
    let total = d.h.oracle.toks_in.len() as u64;
    d.stats.flows_skipped = d.h.oracle.toks_in.keys().filter(|k| d.h.oracle.skip.contains(k)).count() as u64;
    d.stats.flows_checked = total - d.stats.flows_skipped;
    Ok(d.stats)
}
