//! A reproducible synthetic trace of TCP bulk traffic as a NIC would deliver
//! it to the gateway: many flows, each sending TSO-sized bursts of
//! back-to-back segments at its own rate, interleaved by arrival time, plus
//! a share of small flows.
//!
//! The model follows what a Linux sender does: segments of one size
//! (1448 B with timestamps at MTU 1500), PSH on the last segment of each
//! application write (iperf3 writes 128 KiB by default), a burst size from
//! TSO autosizing (about 1 ms of data at the flow's rate, at most 64 KB),
//! TSval on a 1 ms clock, and TSecr that changes about once a millisecond as
//! the reverse path's ACKs arrive. Same seed, same trace, byte for byte.

use core::net::Ipv4Addr;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use px_wire::checksum::{Sum, pseudo_v4};
use px_wire::ipv4;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Which way the trace goes through the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Legacy network → b-network: small segments to merge.
    Inbound,
    /// b-network → legacy network: large segments to split.
    Outbound,
}

/// Parameters of a trace.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TraceConfig {
    pub direction: Direction,
    pub flows: usize,
    /// Each bulk flow's rate is drawn uniformly from this range (Gbps).
    pub rate_gbps: (f64, f64),
    /// TCP payload per segment.
    pub segment: usize,
    /// Application write size: PSH ends each write.
    pub write_size: usize,
    /// Share of packets that belong to small flows (1–4 segments of 40–1000 B).
    pub small_share: f64,
    /// Speed of the wire that spaces the segments of one burst.
    pub wire_gbps: f64,
    pub seed: u64,
}

impl TraceConfig {
    /// The paper's workload, inbound: 800 flows at up to 2 Gbps each.
    pub fn inbound_default() -> TraceConfig {
        TraceConfig {
            direction: Direction::Inbound,
            flows: 800,
            rate_gbps: (1.0, 2.0),
            segment: 1448,
            write_size: 128 * 1024,
            small_share: 0.005,
            wire_gbps: 100.0,
            seed: 1,
        }
    }

    /// The reverse direction: 8948-byte segments from the b-network.
    pub fn outbound_default() -> TraceConfig {
        TraceConfig {
            direction: Direction::Outbound,
            segment: 8948,
            small_share: 0.0,
            ..TraceConfig::inbound_default()
        }
    }
}

/// Frames of a piece of trace, stored back to back.
#[derive(Debug, Default)]
pub struct Chunk {
    pub data: Vec<u8>,
    pub frames: Vec<FrameRef>,
    /// TCP payload bytes in the chunk.
    pub payload_bytes: u64,
}

/// One frame of a [`Chunk`].
#[derive(Debug, Clone, Copy)]
pub struct FrameRef {
    pub offset: usize,
    pub len: usize,
    /// Arrival time since the start of the trace.
    pub t_ns: u64,
    /// Index of the flow (bulk flows first, then small flows), for baselines.
    pub flow: u32,
    /// Where the TCP payload starts in the frame.
    pub payload_at: u16,
}

impl Chunk {
    pub fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        let f = self.frames[i];
        &mut self.data[f.offset..f.offset + f.len]
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.frames.clear();
        self.payload_bytes = 0;
    }
}

#[derive(Debug)]
struct BulkFlow {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    /// The sequence numbers the flow started with (its SYN's and SYN-ACK's).
    isn: u32,
    irs: u32,
    write_left: usize,
    ts_offset: u32,
    tsecr: u32,
    next_tsecr_ns: u64,
    burst: usize,
    in_burst: usize,
    period_ns: f64,
    burst_start_ns: f64,
    ident: u16,
}

#[derive(Debug)]
struct SmallFlow {
    sport: u16,
    src: Ipv4Addr,
    seq: u32,
    left: u32,
}

/// What the trace makes possible at best: with PSH flushing at once, each
/// write of W bytes becomes ⌊W/iMSS⌋ full segments and one partial one.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Ceiling {
    pub full: u64,
    pub packets: u64,
}

impl Ceiling {
    pub fn yield_bound(&self) -> f64 {
        if self.packets == 0 { 0.0 } else { self.full as f64 / self.packets as f64 }
    }
}

/// A streaming generator of one trace.
#[derive(Debug)]
pub struct Trace {
    cfg: TraceConfig,
    rng: ChaCha8Rng,
    bulk: Vec<BulkFlow>,
    small: Vec<SmallFlow>,
    next_small_port: u16,
    /// (next packet time, flow index).
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    pattern: Vec<u8>,
    now_ns: u64,
    inner_mss: usize,
    pub ceiling: Ceiling,
}

impl Trace {
    /// `inner_mss` is only used to compute the yield ceiling.
    pub fn new(cfg: TraceConfig, inner_mss: usize) -> Trace {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut heap = BinaryHeap::new();
        let mut bulk = Vec::with_capacity(cfg.flows);
        let (outer_net, inner_net) = ([198, 51, 100], [203, 0, 113]);
        for i in 0..cfg.flows {
            let outer = Ipv4Addr::new(outer_net[0], outer_net[1], outer_net[2], 1 + (i % 200) as u8);
            let inner = Ipv4Addr::new(inner_net[0], inner_net[1], inner_net[2], 1 + (i % 50) as u8);
            let (src, dst) = match cfg.direction {
                Direction::Inbound => (outer, inner),
                Direction::Outbound => (inner, outer),
            };
            let rate = rng.gen_range(cfg.rate_gbps.0..=cfg.rate_gbps.1) * 1e9;
            // TSO autosizing: about 1 ms of data per burst, at most 64 KB.
            let burst =
                ((rate / 8.0 * 1e-3) / cfg.segment as f64).clamp(1.0, (65_536 / cfg.segment).max(1) as f64) as usize;
            let period_ns = (burst * cfg.segment) as f64 * 8.0 / rate * 1e9;
            let start = rng.gen_range(0.0..period_ns);
            let (seq, ack): (u32, u32) = (rng.r#gen(), rng.r#gen());
            bulk.push(BulkFlow {
                src,
                dst,
                sport: 10_000 + (i / 200) as u16 * 256 + (i % 256) as u16,
                dport: 5201,
                seq,
                ack,
                isn: seq.wrapping_sub(1),
                irs: ack.wrapping_sub(1),
                write_left: cfg.write_size,
                ts_offset: rng.r#gen(),
                tsecr: rng.r#gen(),
                next_tsecr_ns: rng.gen_range(0..1_000_000),
                burst,
                in_burst: 0,
                period_ns,
                burst_start_ns: start,
                ident: rng.r#gen(),
            });
            heap.push(Reverse((start as u64, i as u32)));
        }
        let mut pattern = vec![0u8; 128 * 1024];
        rng.fill(&mut pattern[..]);
        Trace {
            cfg,
            rng,
            bulk,
            small: Vec::new(),
            next_small_port: 40_000,
            heap,
            pattern,
            now_ns: 0,
            inner_mss,
            ceiling: Ceiling::default(),
        }
    }

    pub fn config(&self) -> &TraceConfig {
        &self.cfg
    }

    /// The opening handshake of every bulk flow: `[0]` the senders' SYNs
    /// announcing `sender_mss`, `[1]` the receivers' SYN-ACKs announcing
    /// `receiver_mss`, both at time 0. A gateway merges toward an inner host
    /// only once it has seen that host's MSS, so a run that measures merging
    /// hands these to it first (untimed). Small flows have none (they are
    /// never merged anyway).
    pub fn handshakes(&self, sender_mss: u16, receiver_mss: u16) -> [Chunk; 2] {
        let (mut syns, mut synacks) = (Chunk::default(), Chunk::default());
        for (i, f) in self.bulk.iter().enumerate() {
            let syn = Tcp { sport: f.sport, dport: f.dport, seq: f.isn, ack: 0, flags: 0x02 };
            write_syn(&mut syns, (f.src, f.dst), &syn, sender_mss, (f.ts_offset, 0), i as u32);
            let synack = Tcp { sport: f.dport, dport: f.sport, seq: f.irs, ack: f.isn.wrapping_add(1), flags: 0x12 };
            write_syn(&mut synacks, (f.dst, f.src), &synack, receiver_mss, (f.tsecr, f.ts_offset), i as u32);
        }
        [syns, synacks]
    }

    /// Appends up to `max_packets` frames, or until `max_bytes` of frames.
    pub fn fill(&mut self, chunk: &mut Chunk, max_packets: usize, max_bytes: usize) {
        chunk.clear();
        while chunk.frames.len() < max_packets && chunk.data.len() < max_bytes {
            if self.cfg.small_share > 0.0 && self.rng.gen_bool(self.cfg.small_share) {
                self.small_packet(chunk);
            } else {
                self.bulk_packet(chunk);
            }
        }
    }

    fn bulk_packet(&mut self, chunk: &mut Chunk) {
        let Some(Reverse((t, i))) = self.heap.pop() else { return };
        self.now_ns = t;
        let cfg_seg = self.cfg.segment;
        let wire_gap = ((cfg_seg + 66) as f64 * 8.0 / self.cfg.wire_gbps) as u64;
        let f = &mut self.bulk[i as usize];
        while t >= f.next_tsecr_ns {
            f.tsecr = f.tsecr.wrapping_add(1);
            f.next_tsecr_ns += 1_000_000;
        }
        let len = cfg_seg.min(f.write_left);
        f.write_left -= len;
        let psh = f.write_left == 0;
        let (src, dst, sport, dport, seq, ack, ident) = (f.src, f.dst, f.sport, f.dport, f.seq, f.ack, f.ident);
        let tsval = f.ts_offset.wrapping_add((t / 1_000_000) as u32);
        let tsecr = f.tsecr;
        f.seq = f.seq.wrapping_add(len as u32);
        f.ident = f.ident.wrapping_add(1);
        if psh {
            f.write_left = self.cfg.write_size;
            let w = self.cfg.write_size;
            self.ceiling.full += (w / self.inner_mss) as u64;
            self.ceiling.packets += w.div_ceil(self.inner_mss) as u64;
        }
        f.in_burst += 1;
        let next = if f.in_burst >= f.burst {
            f.in_burst = 0;
            f.burst_start_ns += f.period_ns;
            (f.burst_start_ns as u64).max(t + wire_gap)
        } else {
            t + wire_gap
        };
        self.heap.push(Reverse((next, i)));
        let off = (seq as usize) % (self.pattern.len() - cfg_seg);
        write_frame(
            chunk,
            Hdr { src, dst, sport, dport, seq, ack, ident, tsval, tsecr, psh },
            off,
            len,
            &self.pattern,
            t,
            i,
        );
    }

    fn small_packet(&mut self, chunk: &mut Chunk) {
        if self.small.len() < 256 {
            let port = self.next_small_port;
            self.next_small_port = self.next_small_port.wrapping_add(1).max(40_000);
            let src = Ipv4Addr::new(198, 51, 100, 201 + self.rng.gen_range(0..50));
            self.small.push(SmallFlow { sport: port, src, seq: self.rng.r#gen(), left: self.rng.gen_range(1..=4) });
        }
        let k = self.rng.gen_range(0..self.small.len());
        let len = self.rng.gen_range(40..=1000usize);
        let s = &mut self.small[k];
        let (sport, src, seq) = (s.sport, s.src, s.seq);
        s.seq = s.seq.wrapping_add(len as u32);
        s.left -= 1;
        let last = s.left == 0;
        if last {
            self.small.swap_remove(k);
        }
        self.ceiling.packets += 1;
        let dst = Ipv4Addr::new(203, 0, 113, 200);
        let (src, dst) = match self.cfg.direction {
            Direction::Inbound => (src, dst),
            Direction::Outbound => (dst, src),
        };
        let flow = self.cfg.flows as u32 + k as u32;
        let h = Hdr { src, dst, sport, dport: 443, seq, ack: 1, ident: 0, tsval: 1, tsecr: 1, psh: last };
        write_frame(chunk, h, (seq as usize) % 4096, len, &self.pattern, self.now_ns, flow);
    }
}

struct Hdr {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    ident: u16,
    tsval: u32,
    tsecr: u32,
    psh: bool,
}

/// Ethernet + IPv4 (DF) + TCP with NOP NOP timestamps, checksums complete.
fn write_frame(chunk: &mut Chunk, h: Hdr, pat_off: usize, len: usize, pattern: &[u8], t_ns: u64, flow: u32) {
    const HDR: usize = 14 + 20 + 32;
    let offset = chunk.data.len();
    chunk.data.resize(offset + HDR + len, 0);
    let f = &mut chunk.data[offset..];
    let tcp =
        Tcp { sport: h.sport, dport: h.dport, seq: h.seq, ack: h.ack, flags: 0x10 | if h.psh { 0x08 } else { 0 } };
    emit_headers(f, h.src, h.dst, h.ident, &tcp, 32, len, 512);
    let t = &mut f[34..66];
    t[20..24].copy_from_slice(&[1, 1, 8, 10]);
    t[24..28].copy_from_slice(&h.tsval.to_be_bytes());
    t[28..32].copy_from_slice(&h.tsecr.to_be_bytes());
    f[HDR..HDR + len].copy_from_slice(&pattern[pat_off..pat_off + len]);
    let c = pseudo_v4(h.src, h.dst, 6, (32 + len) as u16).plus(Sum::of(&f[34..HDR + len])).checksum();
    f[50..52].copy_from_slice(&c.to_be_bytes());
    chunk.frames.push(FrameRef { offset, len: HDR + len, t_ns, flow, payload_at: HDR as u16 });
    chunk.payload_bytes += len as u64;
}

/// The TCP fields every frame of the trace sets.
struct Tcp {
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
}

/// Ethernet, IPv4 (DF, TTL 64) and the first 20 bytes of a TCP header of
/// `th` bytes carrying `len` payload bytes; the checksum field zero.
#[allow(clippy::too_many_arguments)]
fn emit_headers(f: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr, ident: u16, h: &Tcp, th: usize, len: usize, window: u16) {
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    ipv4::emit_header(&mut f[14..34], 0, (20 + th + len) as u16, ident, true, 64, 6, src, dst);
    let t = &mut f[34..54];
    t[0..2].copy_from_slice(&h.sport.to_be_bytes());
    t[2..4].copy_from_slice(&h.dport.to_be_bytes());
    t[4..8].copy_from_slice(&h.seq.to_be_bytes());
    t[8..12].copy_from_slice(&h.ack.to_be_bytes());
    t[12] = ((th / 4) as u8) << 4;
    t[13] = h.flags;
    t[14..16].copy_from_slice(&window.to_be_bytes());
    t[16..20].copy_from_slice(&[0, 0, 0, 0]);
}

/// The window scale both ends of the trace's flows announce: the largest
/// (RFC 7323 §2.3), so that one window of the receivers' (65,535 << 14,
/// 1 GiB) covers what a benchmark sends between two of their ACKs.
pub const WINDOW_SHIFT: u8 = 14;

/// Ethernet + IPv4 (DF) + a TCP SYN or SYN-ACK (`tcp`) with MSS, NOP NOP
/// timestamps (`ts`: TSval, TSecr), NOP and window scale [`WINDOW_SHIFT`];
/// checksums complete.
fn write_syn(chunk: &mut Chunk, (src, dst): (Ipv4Addr, Ipv4Addr), tcp: &Tcp, mss: u16, ts: (u32, u32), flow: u32) {
    const HDR: usize = 14 + 20 + 40;
    let offset = chunk.data.len();
    chunk.data.resize(offset + HDR, 0);
    let f = &mut chunk.data[offset..];
    emit_headers(f, src, dst, 0, tcp, 40, 0, 65_535);
    let t = &mut f[34..74];
    t[20..22].copy_from_slice(&[2, 4]);
    t[22..24].copy_from_slice(&mss.to_be_bytes());
    t[24..28].copy_from_slice(&[1, 1, 8, 10]);
    t[28..32].copy_from_slice(&ts.0.to_be_bytes());
    t[32..36].copy_from_slice(&ts.1.to_be_bytes());
    t[36..40].copy_from_slice(&[1, 3, 3, WINDOW_SHIFT]);
    let c = pseudo_v4(src, dst, 6, 40).plus(Sum::of(&f[34..HDR])).checksum();
    f[50..52].copy_from_slice(&c.to_be_bytes());
    chunk.frames.push(FrameRef { offset, len: HDR, t_ns: 0, flow, payload_at: HDR as u16 });
}

impl Chunk {
    /// Appends `other`'s frames (and their payload count) after this
    /// chunk's.
    pub fn append(&mut self, other: &Chunk) {
        let base = self.data.len();
        self.data.extend_from_slice(&other.data);
        self.frames.extend(other.frames.iter().map(|f| FrameRef { offset: base + f.offset, ..*f }));
        self.payload_bytes += other.payload_bytes;
    }

    /// What the receivers of this chunk's flows send before it arrives, at
    /// the time of its first frame: for each TCP/IPv4 flow, in the order
    /// its first frame comes, an ACK of everything before that frame with
    /// the largest window (65,535 << [`WINDOW_SHIFT`]). A trace carries one
    /// direction only; a gateway takes data from outside as the
    /// connection's only inside what the receiver allows (its ACK plus its
    /// window, as Linux's conntrack does), so a benchmark hands it these
    /// first, untimed.
    pub fn receiver_acks(&self) -> Chunk {
        let mut acks = Chunk::default();
        let t_ns = self.frames.first().map_or(0, |f| f.t_ns);
        let mut seen = std::collections::HashSet::new();
        for fr in &self.frames {
            let f = &self.data[fr.offset..fr.offset + fr.len];
            let Some((key, _)) = crate::replay::tcp4(f) else { continue };
            if !seen.insert(key) {
                continue;
            }
            let th = 14 + (f[14] & 0x0f) as usize * 4;
            let be32 = |at: usize| u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]]);
            let be16 = |at: usize| u16::from_be_bytes([f[at], f[at + 1]]);
            let (src, dst): (Ipv4Addr, Ipv4Addr) = (be32(30).into(), be32(26).into());
            let tcp = Tcp { sport: be16(th + 2), dport: be16(th), seq: be32(th + 8), ack: be32(th + 4), flags: 0x10 };
            const HDR: usize = 14 + 20 + 20;
            let offset = acks.data.len();
            acks.data.resize(offset + HDR, 0);
            let a = &mut acks.data[offset..];
            emit_headers(a, src, dst, 0, &tcp, 20, 0, 65_535);
            a[0..12].copy_from_slice(&[&f[6..12], &f[0..6]].concat());
            let c = pseudo_v4(src, dst, 6, 20).plus(Sum::of(&a[34..HDR])).checksum();
            a[50..52].copy_from_slice(&c.to_be_bytes());
            acks.frames.push(FrameRef { offset, len: HDR, t_ns, flow: fr.flow, payload_at: HDR as u16 });
        }
        acks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_valid() {
        let mut a = Trace::new(TraceConfig { flows: 20, ..TraceConfig::inbound_default() }, 8948);
        let mut b = Trace::new(TraceConfig { flows: 20, ..TraceConfig::inbound_default() }, 8948);
        let (mut ca, mut cb) = (Chunk::default(), Chunk::default());
        a.fill(&mut ca, 2000, usize::MAX);
        b.fill(&mut cb, 2000, usize::MAX);
        assert_eq!(ca.data, cb.data);
        let mut last_t = 0;
        for (i, f) in ca.frames.iter().enumerate() {
            assert!(f.t_ns >= last_t, "frames in arrival order");
            last_t = f.t_ns;
            let frame = &ca.data[f.offset..f.offset + f.len];
            let p = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
            let Some(etherparse::NetSlice::Ipv4(ip)) = p.net else { panic!("frame {i} not ipv4") };
            let Some(etherparse::TransportSlice::Tcp(tcp)) = p.transport else { panic!("not tcp") };
            let want = tcp.to_header().calc_checksum_ipv4(&ip.header().to_header(), tcp.payload()).unwrap();
            assert_eq!(tcp.checksum(), want, "frame {i} checksum");
        }
    }

    #[test]
    fn psh_once_per_write_and_bursts_contiguous() {
        let cfg = TraceConfig { flows: 1, small_share: 0.0, write_size: 10 * 1448, ..TraceConfig::inbound_default() };
        let mut t = Trace::new(cfg, 8948);
        let mut c = Chunk::default();
        t.fill(&mut c, 30, usize::MAX);
        let mut psh = 0;
        let mut last_seq: Option<u32> = None;
        for f in &c.frames {
            let frame = &c.data[f.offset..f.offset + f.len];
            let tcp = etherparse::TcpSlice::from_slice(&frame[34..]).unwrap();
            if let Some(s) = last_seq {
                assert_eq!(tcp.sequence_number(), s, "one flow is contiguous");
            }
            last_seq = Some(tcp.sequence_number().wrapping_add(tcp.payload().len() as u32));
            psh += tcp.psh() as usize;
        }
        assert_eq!(psh, 3);
        assert_eq!(t.ceiling.packets, 3 * 2);
        assert_eq!(t.ceiling.full, 3);
    }

    #[test]
    fn receivers_acknowledge_each_flow_up_to_its_first_frame_with_the_largest_window() {
        let cfg = TraceConfig { flows: 5, small_share: 0.0, ..TraceConfig::inbound_default() };
        let mut t = Trace::new(cfg, 8948);
        let mut c = Chunk::default();
        t.fill(&mut c, 200, usize::MAX);
        let acks = c.receiver_acks();
        assert_eq!(acks.frames.len(), 5, "one per flow");
        for a in &acks.frames {
            let frame = &acks.data[a.offset..a.offset + a.len];
            let p = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
            let Some(etherparse::NetSlice::Ipv4(ip)) = p.net else { panic!("not ipv4") };
            let Some(etherparse::TransportSlice::Tcp(ack)) = p.transport else { panic!("not tcp") };
            let want = ack.to_header().calc_checksum_ipv4(&ip.header().to_header(), ack.payload()).unwrap();
            assert_eq!(ack.checksum(), want);
            assert!(ack.ack() && !ack.syn() && ack.payload().is_empty() && ack.window_size() == 65_535);
            // The flow's first data frame: the ACK answers it, the other way.
            let first = c.frames.iter().find(|f| f.flow == a.flow).unwrap();
            let d = etherparse::SlicedPacket::from_ethernet(&c.data[first.offset..first.offset + first.len]).unwrap();
            let Some(etherparse::TransportSlice::Tcp(data)) = d.transport else { panic!("not tcp") };
            assert_eq!((ack.source_port(), ack.destination_port()), (data.destination_port(), data.source_port()));
            assert_eq!(ack.acknowledgment_number(), data.sequence_number());
            assert_eq!(ack.sequence_number(), data.acknowledgment_number());
        }
    }

    #[test]
    fn an_appended_chunk_keeps_its_frames_and_payload() {
        let cfg = TraceConfig { flows: 3, ..TraceConfig::inbound_default() };
        let mut t = Trace::new(cfg, 8948);
        let (mut a, mut b) = (Chunk::default(), Chunk::default());
        t.fill(&mut a, 10, usize::MAX);
        t.fill(&mut b, 10, usize::MAX);
        let mut joined = Chunk::default();
        joined.append(&a);
        joined.append(&b);
        assert_eq!(joined.frames.len(), 20);
        assert_eq!(joined.payload_bytes, a.payload_bytes + b.payload_bytes);
        for (i, f) in b.frames.iter().enumerate() {
            let g = joined.frames[10 + i];
            assert_eq!(&joined.data[g.offset..g.offset + g.len], &b.data[f.offset..f.offset + f.len]);
        }
    }

    #[test]
    fn handshakes_announce_each_sides_mss() {
        let cfg = TraceConfig { flows: 3, ..TraceConfig::inbound_default() };
        let mut t = Trace::new(cfg, 8948);
        let [syns, synacks] = t.handshakes(1460, 8960);
        let mut c = Chunk::default();
        t.fill(&mut c, 50, usize::MAX);
        for (chunk, syn_ack, mss) in [(&syns, false, 1460), (&synacks, true, 8960)] {
            assert_eq!(chunk.frames.len(), 3);
            for f in &chunk.frames {
                let frame = &chunk.data[f.offset..f.offset + f.len];
                let p = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
                let Some(etherparse::NetSlice::Ipv4(ip)) = p.net else { panic!("not ipv4") };
                let Some(etherparse::TransportSlice::Tcp(tcp)) = p.transport else { panic!("not tcp") };
                let want = tcp.to_header().calc_checksum_ipv4(&ip.header().to_header(), tcp.payload()).unwrap();
                assert_eq!(tcp.checksum(), want);
                assert!(tcp.syn() && tcp.ack() == syn_ack && tcp.payload().is_empty());
                let opts: Vec<_> = tcp.options_iterator().filter_map(Result::ok).collect();
                assert!(opts.contains(&etherparse::TcpOptionElement::MaximumSegmentSize(mss)), "{opts:?}");
                assert!(opts.contains(&etherparse::TcpOptionElement::WindowScale(WINDOW_SHIFT)), "{opts:?}");
            }
        }
        // The data continues the handshake: first data seq = SYN seq + 1.
        let data = &c.data[c.frames[0].offset..];
        let first = etherparse::TcpSlice::from_slice(&data[34..c.frames[0].len]).unwrap();
        let i = c.frames[0].flow as usize;
        let syn = etherparse::TcpSlice::from_slice(&syns.data[syns.frames[i].offset + 34..][..40]).unwrap();
        assert_eq!(first.sequence_number(), syn.sequence_number().wrapping_add(1));
    }
}
