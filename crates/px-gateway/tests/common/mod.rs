//! Shared test machinery for the engine's integration tests.
//!
//! Everything here is independent of `px-wire`: frames are built with
//! `etherparse`'s `PacketBuilder` and everything the engine sends is parsed
//! and checksummed again with `etherparse`, so a bug shared by the engine and
//! its own wire layer cannot hide behind itself.
//!
//! - [`TcpSpec`] / [`UdpSpec`]: frame builders (IPv4 and IPv6, TCP options).
//! - [`Harness`]: feeds an [`Engine`] in simulated time, drains transmits
//!   before acting on the verdict (the engine's contract), records every
//!   frame that leaves per port, and tracks what entered.
//! - [`check_wire_frame`]: parse + checksum verification of one frame.
//! - [`soft_gso`]: cuts a GSO super-packet the way virtio/Linux GSO does.
//! - [`Oracle`]: per-flow streams in and out; byte-exactness and order.
#![allow(dead_code)]

pub mod kernel;
pub mod seq;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use etherparse::{
    IpDscp, IpEcn, IpHeaders, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, NetHeaders, PacketBuilder,
    PacketHeaders, TcpHeader, TcpOptionElement, TransportHeader,
};
use px_gateway::{Config, Engine, Port, Verdict};
pub use px_wire::offload::{Checksum, Gso, GsoKind, PacketMeta};

pub const MAC_OUTER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const MAC_INNER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// An outside host (documentation ranges only).
pub fn outer_addr(v6: bool, n: u16) -> IpAddr {
    if v6 {
        IpAddr::V6(format!("2001:db8:1::{:x}", n + 1).parse().unwrap())
    } else {
        IpAddr::V4([198, 51, 100, (n % 250) as u8 + 1].into())
    }
}

/// An inside host.
pub fn inner_addr(v6: bool, n: u16) -> IpAddr {
    if v6 {
        IpAddr::V6(format!("2001:db8:2::{:x}", n + 1).parse().unwrap())
    } else {
        IpAddr::V4([203, 0, 113, (n % 250) as u8 + 1].into())
    }
}

/// Deterministic, position-dependent stream content (a byte at the wrong
/// offset is caught).
pub fn stream_bytes(flow: u32, off: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| {
            let x = (off.wrapping_add(i)).wrapping_mul(0x9e37_79b1) ^ flow.wrapping_mul(0x85eb_ca6b);
            (x >> 13) as u8 ^ (x >> 24) as u8
        })
        .collect()
}

/// TCP flag set of a segment to build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub syn: bool,
    pub ack: bool,
    pub fin: bool,
    pub rst: bool,
    pub psh: bool,
    pub urg: bool,
    pub ece: bool,
    pub cwr: bool,
    /// AE (the former NS bit, TCP header byte 12 bit 0; AccECN's ACE field
    /// is AE, CWR, ECE).
    pub ae: bool,
}

impl Flags {
    pub fn ack() -> Flags {
        Flags { ack: true, ..Flags::default() }
    }
}

/// Everything needed to build one TCP/IP frame.
#[derive(Debug, Clone)]
pub struct TcpSpec {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub window: u16,
    pub flags: Flags,
    pub urg_ptr: u16,
    pub opts: Vec<TcpOptionElement>,
    pub dscp: u8,
    pub ecn: u8,
    pub ttl: u8,
    pub df: bool,
    pub ip_id: u16,
    pub flow_label: u32,
    pub vlan: Option<u16>,
    /// IPv4 options, or the payload of an IPv6 hop-by-hop header (6 + 8k bytes).
    pub ip_ext: Vec<u8>,
    pub payload: Vec<u8>,
}

impl TcpSpec {
    /// A plain ACK data segment from `src` to `dst`.
    pub fn new(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, seq: u32, payload: Vec<u8>) -> TcpSpec {
        TcpSpec {
            src,
            dst,
            sport,
            dport,
            seq,
            ack: 1_000,
            // The field as a host with window scaling sends it (with the
            // handshake's scale 7, 8 MiB: an inner host allows the outer
            // host that much past its ACK, so that the engine takes the
            // data of these tests as the connection's).
            window: 65_535,
            flags: Flags::ack(),
            urg_ptr: 0,
            opts: Vec::new(),
            dscp: 0,
            ecn: 0,
            ttl: 64,
            df: true,
            ip_id: 100,
            flow_label: 0,
            vlan: None,
            ip_ext: Vec::new(),
            payload,
        }
    }

    /// Inbound (outer → inner) segment of flow `n`.
    pub fn inbound(v6: bool, n: u16, seq: u32, payload: Vec<u8>) -> TcpSpec {
        TcpSpec::new(outer_addr(v6, n), inner_addr(v6, n), 40_000 + n, 80, seq, payload)
    }

    /// Outbound (inner → outer) segment of flow `n`.
    pub fn outbound(v6: bool, n: u16, seq: u32, payload: Vec<u8>) -> TcpSpec {
        TcpSpec::new(inner_addr(v6, n), outer_addr(v6, n), 80, 40_000 + n, seq, payload)
    }

    pub fn ts(mut self, val: u32, ecr: u32) -> TcpSpec {
        self.opts = vec![TcpOptionElement::Noop, TcpOptionElement::Noop, TcpOptionElement::Timestamp(val, ecr)];
        self
    }

    pub fn with_opts(mut self, opts: Vec<TcpOptionElement>) -> TcpSpec {
        self.opts = opts;
        self
    }

    pub fn flags(mut self, f: Flags) -> TcpSpec {
        self.flags = f;
        self
    }

    pub fn is_v6(&self) -> bool {
        self.src.is_ipv6()
    }

    /// Length of the IP and TCP headers this spec builds.
    pub fn ip_tcp_header_len(&self) -> usize {
        let base = if self.is_v6() { 40 } else { 20 };
        let ext = if self.ip_ext.is_empty() { 0 } else { self.ip_ext.len() + 2 * self.is_v6() as usize };
        let ip = base + ext;
        ip + self.tcp_header().header_len()
    }

    fn tcp_header(&self) -> TcpHeader {
        let mut t = TcpHeader::new(self.sport, self.dport, self.seq, self.window);
        t.acknowledgment_number = self.ack;
        let f = self.flags;
        (t.syn, t.ack, t.fin, t.rst, t.psh, t.urg, t.ece, t.cwr) =
            (f.syn, f.ack, f.fin, f.rst, f.psh, f.urg, f.ece, f.cwr);
        t.ns = f.ae;
        t.urgent_pointer = self.urg_ptr;
        t.set_options(&self.opts).expect("options fit in 40 bytes");
        t
    }

    fn ip_headers(&self) -> IpHeaders {
        let mut h = ip_headers(self.src, self.dst, self.dscp, self.ecn, self.ttl, self.df, self.ip_id, self.flow_label);
        if !self.ip_ext.is_empty() {
            match &mut h {
                IpHeaders::Ipv4(h, _) => h.options = self.ip_ext[..].try_into().expect("IPv4 options"),
                IpHeaders::Ipv6(_, e) => {
                    e.hop_by_hop_options =
                        Some(etherparse::Ipv6RawExtHeader::new_raw(IpNumber::TCP, &self.ip_ext).expect("hop-by-hop"))
                }
            }
        }
        h
    }

    /// The Ethernet frame, checksums computed by etherparse.
    pub fn build(&self) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER);
        let mut v = Vec::new();
        match self.vlan {
            Some(id) => b
                .single_vlan(id.try_into().unwrap())
                .ip(self.ip_headers())
                .tcp_header(self.tcp_header())
                .write(&mut v, &self.payload)
                .unwrap(),
            None => b.ip(self.ip_headers()).tcp_header(self.tcp_header()).write(&mut v, &self.payload).unwrap(),
        }
        v
    }
}

#[allow(clippy::too_many_arguments)]
pub fn ip_headers(src: IpAddr, dst: IpAddr, dscp: u8, ecn: u8, ttl: u8, df: bool, id: u16, fl: u32) -> IpHeaders {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = Ipv4Header {
                dscp: IpDscp::try_new(dscp).unwrap(),
                ecn: IpEcn::try_new(ecn).unwrap(),
                identification: id,
                dont_fragment: df,
                time_to_live: ttl,
                protocol: IpNumber::TCP,
                source: s.octets(),
                destination: d.octets(),
                ..Ipv4Header::default()
            };
            IpHeaders::Ipv4(h, Default::default())
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = Ipv6Header {
                traffic_class: (dscp << 2) | ecn,
                flow_label: Ipv6FlowLabel::try_new(fl).unwrap(),
                payload_length: 0,
                next_header: IpNumber::TCP,
                hop_limit: ttl,
                source: s.octets(),
                destination: d.octets(),
            };
            IpHeaders::Ipv6(h, Default::default())
        }
        _ => panic!("mixed address families"),
    }
}

/// A UDP datagram to build.
#[derive(Debug, Clone)]
pub struct UdpSpec {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub df: bool,
    pub ip_id: u16,
    pub payload: Vec<u8>,
}

impl UdpSpec {
    pub fn build(&self) -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER)
            .ip(ip_headers(self.src, self.dst, 0, 0, 64, self.df, self.ip_id, 0))
            .udp(self.sport, self.dport)
            .write(&mut v, &self.payload)
            .unwrap();
        v
    }
}

/// The IP packet an Ethernet frame carries (the quoted part of an ICMP error).
pub fn ip_part(frame: &[u8]) -> &[u8] {
    &frame[14..]
}

// ---- checking what leaves -------------------------------------------------

/// An output frame parsed by etherparse, checksums verified.
#[derive(Debug, Clone)]
pub struct Wire {
    pub net: NetHeaders,
    pub transport: Option<TransportHeader>,
    pub payload: Vec<u8>,
    /// IP packet length (header + payload), what an MTU bounds.
    pub ip_len: usize,
}

impl Wire {
    pub fn tcp(&self) -> Option<&TcpHeader> {
        match &self.transport {
            Some(TransportHeader::Tcp(t)) => Some(t),
            _ => None,
        }
    }

    pub fn src_dst(&self) -> (IpAddr, IpAddr) {
        match &self.net {
            NetHeaders::Ipv4(h, _) => (IpAddr::V4(h.source.into()), IpAddr::V4(h.destination.into())),
            NetHeaders::Ipv6(h, _) => (IpAddr::V6(h.source.into()), IpAddr::V6(h.destination.into())),
            NetHeaders::Arp(_) => panic!("arp"),
        }
    }

    pub fn v4(&self) -> Option<&Ipv4Header> {
        match &self.net {
            NetHeaders::Ipv4(h, _) => Some(h),
            _ => None,
        }
    }

    pub fn ecn(&self) -> u8 {
        match &self.net {
            NetHeaders::Ipv4(h, _) => h.ecn.value(),
            NetHeaders::Ipv6(h, _) => h.traffic_class & 3,
            NetHeaders::Arp(_) => 0,
        }
    }

    pub fn is_fragment(&self) -> bool {
        match &self.net {
            NetHeaders::Ipv4(h, _) => h.more_fragments || h.fragment_offset.value() != 0,
            _ => false,
        }
    }

    /// Timestamp option values, if any.
    pub fn ts(&self) -> Option<(u32, u32)> {
        self.tcp()?.options_iterator().find_map(|o| match o {
            Ok(TcpOptionElement::Timestamp(a, b)) => Some((a, b)),
            _ => None,
        })
    }

    pub fn mss(&self) -> Option<u16> {
        self.tcp()?.options_iterator().find_map(|o| match o {
            Ok(TcpOptionElement::MaximumSegmentSize(m)) => Some(m),
            _ => None,
        })
    }
}

/// Parses `frame` with etherparse and verifies every checksum it carries
/// (IPv4 header, TCP, UDP, ICMPv4, ICMPv6) against etherparse's own sums.
pub fn check_wire_frame(frame: &[u8]) -> Result<Wire, String> {
    let p = PacketHeaders::from_ethernet_slice(frame).map_err(|e| format!("etherparse: {e}"))?;
    let net = p.net.clone().ok_or("no network header")?;
    let payload = p.payload.slice().to_vec();
    let ip_len = match &net {
        NetHeaders::Ipv4(h, _) => {
            if h.header_checksum != h.calc_header_checksum() {
                return Err(format!("bad IPv4 header checksum {:#x}", h.header_checksum));
            }
            h.total_len as usize
        }
        NetHeaders::Ipv6(h, _) => 40 + h.payload_length as usize,
        NetHeaders::Arp(_) => return Err("arp".into()),
    };
    let frag = match &net {
        NetHeaders::Ipv4(h, _) => h.more_fragments || h.fragment_offset.value() != 0,
        _ => false,
    };
    if !frag {
        let bad = |what: &str, have: u16, want: u16| Err(format!("bad {what} checksum {have:#x}, want {want:#x}"));
        match (&net, &p.transport) {
            (NetHeaders::Ipv4(h, _), Some(TransportHeader::Tcp(t))) => {
                let c = t.calc_checksum_ipv4(h, &payload).unwrap();
                if c != t.checksum {
                    return bad("TCP", t.checksum, c);
                }
            }
            (NetHeaders::Ipv6(h, _), Some(TransportHeader::Tcp(t))) => {
                let c = t.calc_checksum_ipv6(h, &payload).unwrap();
                if c != t.checksum {
                    return bad("TCP", t.checksum, c);
                }
            }
            (NetHeaders::Ipv4(h, _), Some(TransportHeader::Udp(u))) if u.checksum != 0 => {
                let c = u.calc_checksum_ipv4(h, &payload).unwrap();
                if c != u.checksum {
                    return bad("UDP", u.checksum, c);
                }
            }
            (NetHeaders::Ipv6(h, _), Some(TransportHeader::Udp(u))) => {
                let c = u.calc_checksum_ipv6(h, &payload).unwrap();
                if c != u.checksum {
                    return bad("UDP", u.checksum, c);
                }
            }
            (NetHeaders::Ipv4(_, _), Some(TransportHeader::Icmpv4(i))) => {
                let c = i.icmp_type.calc_checksum(&payload);
                if c != i.checksum {
                    return bad("ICMPv4", i.checksum, c);
                }
            }
            (NetHeaders::Ipv6(h, _), Some(TransportHeader::Icmpv6(i))) => {
                let c = i.icmp_type.calc_checksum(h.source, h.destination, &payload).unwrap();
                if c != i.checksum {
                    return bad("ICMPv6", i.checksum, c);
                }
            }
            _ => {}
        }
    }
    Ok(Wire { net, transport: p.transport, payload, ip_len })
}

/// Cuts a frame carrying GSO metadata the way virtio-net / Linux GSO does
/// (`tcp_gso_segment`): headers copied, payload cut at `gso.size`, TCP
/// sequence advanced, IPv4 ID incremented per segment, IP lengths set, CWR
/// kept on the first segment only, FIN/PSH on the last only, and each
/// segment's checksum completed from the partial (pseudo-header) sum the
/// engine left in the field, adjusted for the segment's length. The results
/// are then checked like any other frame, so a wrong partial sum shows.
pub fn soft_gso(frame: &[u8], g: &PacketMeta) -> Result<Vec<Vec<u8>>, String> {
    let (Some(gso), Checksum::Partial { start, offset }) = (g.gso, g.csum) else {
        return Err(format!("bad GSO metadata {g:?}: no segment size or no partial checksum"));
    };
    let hl = g.hdr_len as usize;
    let cs = start as usize;
    let co = offset as usize;
    let mss = gso.size as usize;
    if mss == 0 || hl > frame.len() || cs + 20 > hl || co != 16 || gso.kind == GsoKind::UdpL4 {
        return Err(format!("bad GSO metadata {g:?} for a {}-byte frame", frame.len()));
    }
    // The network header: Ethernet (+VLAN) before csum_start.
    let p = PacketHeaders::from_ethernet_slice(frame).map_err(|e| format!("gso frame: {e}"))?;
    let t = match &p.transport {
        Some(TransportHeader::Tcp(t)) => t.clone(),
        _ => return Err("GSO frame is not TCP".into()),
    };
    let l3 = frame.len() - p.payload.slice().len() - t.header_len() - ip_header_len(&p.net);
    if cs != l3 + ip_header_len(&p.net) || hl != cs + t.header_len() {
        return Err(format!("GSO offsets {g:?} disagree with the frame (l3 {l3})"));
    }
    let payload = p.payload.slice();
    if payload.len() <= mss {
        // virtio_net_hdr_to_skb takes it for no GSO frame at all, and the
        // send is refused (measured: ENOMEM from a packet socket).
        return Err(format!("GSO frame of {} payload bytes, not more than one {mss}-byte segment", payload.len()));
    }
    let total_l4 = (t.header_len() + payload.len()) as u32;
    let partial = u16::from_be_bytes([frame[cs + 16], frame[cs + 17]]);
    let n = payload.len().div_ceil(mss).max(1);
    let mut out = Vec::new();
    for i in 0..n {
        let off = i * mss;
        let len = mss.min(payload.len() - off);
        let mut s = frame[..hl].to_vec();
        s.extend_from_slice(&payload[off..off + len]);
        let l4_len = (t.header_len() + len) as u32;
        match &p.net {
            Some(NetHeaders::Ipv4(h, _)) => {
                let ip = &mut s[l3..];
                let tl = (ip_header_len(&p.net) as u32 + l4_len) as u16;
                ip[2..4].copy_from_slice(&tl.to_be_bytes());
                ip[4..6].copy_from_slice(&h.identification.wrapping_add(i as u16).to_be_bytes());
                ip[10..12].copy_from_slice(&[0, 0]);
                let c = ones_complement(&ip[..ip_header_len(&p.net)], 0);
                ip[10..12].copy_from_slice(&(!c).to_be_bytes());
            }
            Some(NetHeaders::Ipv6(_, _)) => {
                let pl = (l4_len + (cs - l3 - 40) as u32) as u16;
                s[l3 + 4..l3 + 6].copy_from_slice(&pl.to_be_bytes());
            }
            _ => return Err("GSO frame without IP".into()),
        }
        let tcp = &mut s[cs..];
        tcp[4..8].copy_from_slice(&t.sequence_number.wrapping_add(off as u32).to_be_bytes());
        let mut fl = tcp[13];
        if i != 0 {
            fl &= !0x80; // CWR
        }
        if i != n - 1 {
            fl &= !(0x01 | 0x08); // FIN, PSH
        }
        tcp[13] = fl;
        // Pseudo-header sum adjusted from the whole length to this one's,
        // as `tcp_gso_segment` does.
        let adj = add16(add16(partial, !(total_l4 as u16)), l4_len as u16);
        tcp[16..18].copy_from_slice(&adj.to_be_bytes());
        let c = !ones_complement(&s[cs..], 0);
        s[cs + 16..cs + 18].copy_from_slice(&c.to_be_bytes());
        out.push(s);
    }
    Ok(out)
}

fn ip_header_len(net: &Option<NetHeaders>) -> usize {
    match net {
        Some(NetHeaders::Ipv4(h, _)) => h.header_len(),
        Some(NetHeaders::Ipv6(_, e)) => 40 + e.header_len(),
        _ => 0,
    }
}

fn add16(a: u16, b: u16) -> u16 {
    let s = a as u32 + b as u32;
    ((s & 0xffff) + (s >> 16)) as u16
}

/// RFC 1071 one's-complement sum, folded (not complemented).
pub fn ones_complement(data: &[u8], init: u32) -> u16 {
    let mut s: u64 = init as u64;
    for c in data.chunks(2) {
        let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], 0]) };
        s += w as u64;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// A UDP frame's checksum field set to the folded pseudo-header sum over
/// its whole length (`CHECKSUM_PARTIAL`, as the kernel hands a UDP GRO
/// batch or a locally sent datagram to a packet socket).
pub fn make_partial_udp(frame: &mut [u8]) {
    let p = PacketHeaders::from_ethernet_slice(frame).unwrap();
    let Some(TransportHeader::Udp(u)) = &p.transport else { panic!("not UDP") };
    let l4 = u.length as u32;
    let addrs: Vec<u8> = match &p.net {
        Some(NetHeaders::Ipv4(h, _)) => [h.source, h.destination].concat(),
        Some(NetHeaders::Ipv6(h, _)) => [h.source, h.destination].concat(),
        _ => panic!("not IP"),
    };
    let mut s = 17 + (l4 >> 16) + (l4 & 0xffff);
    for w in addrs.chunks(2) {
        s += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    let cs = frame.len() - p.payload.slice().len() - 8;
    frame[cs + 6..cs + 8].copy_from_slice(&ones_complement(&[], s).to_be_bytes());
}

/// Replaces a frame's TCP checksum with the folded pseudo-header sum, as a
/// `CHECKSUM_PARTIAL` frame (GRO, or a local sender with offload) carries it.
pub fn make_partial(frame: &mut [u8]) {
    let p = PacketHeaders::from_ethernet_slice(frame).unwrap();
    let (pseudo, cs) = match (&p.net, &p.transport) {
        (Some(NetHeaders::Ipv4(h, _)), Some(TransportHeader::Tcp(t))) => {
            let l4 = (t.header_len() + p.payload.slice().len()) as u32;
            let mut s = 0u32;
            for w in h.source.chunks(2).chain(h.destination.chunks(2)) {
                s += u16::from_be_bytes([w[0], w[1]]) as u32;
            }
            (s + 6 + l4, frame.len() - p.payload.slice().len() - t.header_len())
        }
        (Some(NetHeaders::Ipv6(h, _)), Some(TransportHeader::Tcp(t))) => {
            let l4 = (t.header_len() + p.payload.slice().len()) as u32;
            let mut s = 0u32;
            for w in h.source.chunks(2).chain(h.destination.chunks(2)) {
                s += u16::from_be_bytes([w[0], w[1]]) as u32;
            }
            (s + 6 + (l4 >> 16) + (l4 & 0xffff), frame.len() - p.payload.slice().len() - t.header_len())
        }
        _ => panic!("not TCP"),
    };
    let folded = ones_complement(&[], pseudo);
    frame[cs + 16..cs + 18].copy_from_slice(&folded.to_be_bytes());
}

/// A partial checksum as kernel GRO reports it. The engine finds the
/// checksum field from the frame's own headers, so the offsets are not read.
pub const PARTIAL: Checksum = Checksum::Partial { start: 0, offset: 0 };

/// Receive metadata with this checksum state, no GSO.
pub fn rx_meta(csum: Checksum) -> PacketMeta {
    PacketMeta { csum, ..PacketMeta::PLAIN }
}

/// Receive metadata of a TCP GRO super-packet made of `size`-byte segments.
pub fn gro_meta(csum: Checksum, size: u16) -> PacketMeta {
    PacketMeta { gso: Some(Gso { kind: GsoKind::TcpV4, size, ecn: false }), csum, hdr_len: 0 }
}

// ---- the harness -------------------------------------------------------------

/// One frame the engine made leave, as the I/O layer would send it.
#[derive(Debug, Clone)]
pub struct Out {
    pub port: Port,
    pub frame: Vec<u8>,
    /// Offload metadata it leaves with (a GSO super-packet is cut by
    /// [`soft_gso`] before it is checked).
    pub meta: PacketMeta,
    pub at: Instant,
    /// The input frame itself (a `Forward` verdict), not a queued transmit.
    pub forwarded: bool,
}

/// Verdict tallies, to check against the engine's own counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    pub fed: u64,
    pub forward: u64,
    pub consumed: u64,
    pub dropped: u64,
}

/// Drives an engine the way the I/O layer must (see `Engine`'s contract).
pub struct Harness {
    pub eng: Engine,
    pub cfg: Config,
    pub t0: Instant,
    pub now: Instant,
    pub out: Vec<Out>,
    /// Frames already checked.
    pub sent: Vec<Out>,
    pub tally: Tally,
    pub oracle: Oracle,
    /// Learned path MTUs the test told the engine about (for MTU checks).
    pub pmtu: HashMap<IpAddr, u16>,
    /// The frame being fed may be malformed: if the engine passes it on
    /// and it does not parse, only its size is checked (a router passes
    /// what it does not understand).
    pub untrusted_input: bool,
    /// Buffer bytes of the frames the engine queued since the last
    /// [`Harness::feed`] began (what one input made it hold to send).
    pub queued_buffer_bytes: usize,
    /// The kernel fast path's model, if attached ([`Harness::attach_kernel`]):
    /// it takes the packets of offloaded flows before the engine.
    pub kernel: Option<kernel::KernelModel>,
}

impl Harness {
    pub fn new(cfg: Config) -> Harness {
        let eng = Engine::new(cfg.clone()).expect("valid config");
        Harness::with_engine(cfg, eng)
    }

    /// A harness around an engine made elsewhere (e.g. one sharing a
    /// path-MTU cache with another, as a gateway's workers do).
    pub fn with_engine(cfg: Config, eng: Engine) -> Harness {
        let t0 = Instant::now();
        Harness {
            eng,
            cfg,
            t0,
            now: t0,
            out: Vec::new(),
            sent: Vec::new(),
            tally: Tally::default(),
            oracle: Oracle::default(),
            pmtu: HashMap::new(),
            untrusted_input: false,
            queued_buffer_bytes: 0,
            kernel: None,
        }
    }

    /// Gives the engine a model of the kernel fast path; every later
    /// input is offered to it first, and each [`Harness::quiet`] lets
    /// the engine install flows.
    pub fn attach_kernel(&mut self) -> kernel::KernelModel {
        let k = kernel::KernelModel::default();
        self.eng.set_datapath(Some(Box::new(k.clone())), self.now);
        self.kernel = Some(k.clone());
        k
    }

    /// A quiet moment of the I/O loop: what flows about to move hold is
    /// sent, then they move to the kernel.
    pub fn quiet(&mut self) {
        self.eng.fast_path_prepare(self.now);
        self.drain();
        self.eng.fast_path_sync(self.now);
    }

    /// Time since the start, for messages.
    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    fn drain(&mut self) {
        while let Some(t) = self.eng.poll_transmit() {
            self.queued_buffer_bytes += t.buf.len();
            self.out.push(Out {
                port: t.port,
                frame: t.frame().to_vec(),
                meta: t.meta,
                at: self.now,
                forwarded: false,
            });
            self.eng.recycle(t.buf);
        }
    }

    /// Feeds one frame at the current time; drains what the engine queued,
    /// then applies the verdict.
    pub fn feed(&mut self, from: Port, mut frame: Vec<u8>, meta: PacketMeta) -> Verdict {
        self.oracle.record_in(from, &frame, matches!(meta.csum, Checksum::Partial { .. }));
        if let Some(kernel::Taken::Kernel(meta)) = self.kernel.as_ref().map(|k| k.offer(&frame, &meta, from)) {
            // The fast path carried it: the engine never sees it.
            let meta = kernel::as_partial(&mut frame, meta);
            self.out.push(Out { port: from.other(), frame, meta, at: self.now, forwarded: true });
            return Verdict::Forward { meta };
        }
        self.tally.fed += 1;
        self.queued_buffer_bytes = 0;
        let len = frame.len();
        let merged_in = self.eng.counters().merged_in;
        let v = self.eng.handle_packet(self.now, from, &mut frame, meta);
        self.drain();
        match v {
            Verdict::Forward { meta } => {
                self.tally.forward += 1;
                self.out.push(Out { port: from.other(), frame, meta, at: self.now, forwarded: true });
            }
            // A GRO super-packet's whole pieces passed on while the rest was
            // merged (the input counts as merged), or the input passed on
            // without the link-layer trailer after its IP packet.
            Verdict::ForwardPart { meta, start, end } if self.eng.counters().merged_in > merged_in => {
                self.tally.consumed += 1;
                let frame = frame[start..end].to_vec();
                self.out.push(Out { port: from.other(), frame, meta, at: self.now, forwarded: false });
            }
            Verdict::ForwardPart { meta, start, end } => {
                assert!(start == 0 && end < len, "a trimmed frame is the head of the input: {start}..{end} of {len}");
                self.tally.forward += 1;
                let frame = frame[..end].to_vec();
                self.out.push(Out { port: from.other(), frame, meta, at: self.now, forwarded: true });
            }
            Verdict::Consumed => self.tally.consumed += 1,
            Verdict::Dropped(_) => self.tally.dropped += 1,
        }
        v
    }

    pub fn feed_tcp(&mut self, from: Port, s: &TcpSpec) -> Verdict {
        self.feed(from, s.build(), PacketMeta::PLAIN)
    }

    /// Moves time to `t`, waking the engine exactly at each deadline on the
    /// way (a punctual I/O loop).
    pub fn advance_to(&mut self, t: Instant) {
        while let Some(d) = self.eng.poll_timeout() {
            if d > t {
                break;
            }
            self.now = self.now.max(d);
            self.eng.handle_timeout(self.now);
            self.drain();
            if self.eng.poll_timeout().is_some_and(|d2| d2 <= d) {
                // The engine asked for a wake-up it did not consume: do not spin.
                break;
            }
        }
        self.now = self.now.max(t);
    }

    pub fn advance(&mut self, d: Duration) {
        let t = self.now + d;
        self.advance_to(t);
    }

    /// An extra, early or arbitrary wake-up (allowed by the contract).
    pub fn poke(&mut self) {
        self.eng.handle_timeout(self.now);
        self.drain();
    }

    pub fn flush_all(&mut self) {
        self.eng.flush_all(self.now);
        self.drain();
    }

    /// A reload: the engine takes `cfg` now (what it held leaves first, in
    /// order); refused if `cfg` changes what is fixed at start.
    pub fn reload(&mut self, cfg: Config) -> Result<(), px_gateway::ConfigError> {
        self.eng.set_config(self.now, cfg.clone())?;
        self.cfg = cfg;
        self.drain();
        Ok(())
    }

    /// Frames sent on `port` since the last [`Self::take`].
    pub fn take(&mut self) -> Vec<Out> {
        std::mem::take(&mut self.out)
    }

    /// MTU of the egress toward `dst` through `port`.
    pub fn egress_mtu(&self, port: Port, dst: IpAddr) -> usize {
        match port {
            Port::Inner => self.cfg.imtu as usize,
            Port::Outer => self.pmtu.get(&dst).map_or(self.cfg.emtu, |m| (*m).min(self.cfg.emtu)) as usize,
        }
    }

    /// Checks every frame recorded since the last check (GSO ones after a
    /// software cut): parses, checksums, size against the egress MTU known
    /// now. Feeds the oracle, then moves the frames to [`Self::sent`].
    /// Returns the wire frames with their port, in order.
    pub fn check_outputs(&mut self) -> Result<Vec<(Port, Wire)>, String> {
        Ok(self.check_pending()?.into_iter().map(|(p, _, w)| (p, w)).collect())
    }

    /// Like [`Self::check_outputs`], with the time each frame left. Call it
    /// after every event to check sizes against the path MTU of the moment.
    pub fn check_pending(&mut self) -> Result<Vec<(Port, Instant, Wire)>, String> {
        let outs = std::mem::take(&mut self.out);
        let r = self.check(&outs);
        self.sent.extend(outs);
        r
    }

    fn check(&mut self, outs: &[Out]) -> Result<Vec<(Port, Instant, Wire)>, String> {
        let mut wires = Vec::new();
        for (i, o) in outs.iter().enumerate() {
            if o.forwarded && self.untrusted_input && (o.meta.gso.is_some() || check_wire_frame(&o.frame).is_err()) {
                let link = if o.frame.get(12..14) == Some(&[0x81, 0]) { 18 } else { 14 };
                let mtu = match o.port {
                    Port::Inner => self.cfg.imtu,
                    Port::Outer => self.cfg.emtu,
                } as usize;
                if o.meta.gso.is_none() && o.frame.len() > mtu + link {
                    return Err(format!(
                        "output {i} on {:?}: {}-byte frame passed on > MTU {mtu}",
                        o.port,
                        o.frame.len()
                    ));
                }
                continue;
            }
            let frames = match o.meta.gso {
                Some(_) => soft_gso(&o.frame, &o.meta).map_err(|e| format!("output {i}: {e}"))?,
                None => vec![o.frame.clone()],
            };
            for f in frames {
                let w = match check_wire_frame(&f) {
                    Ok(w) => w,
                    // Garbage in an end-to-end checksum (a corrupt datagram
                    // in a caravan) passes on as it came, as a router's would.
                    Err(e) if self.untrusted_input && (e.starts_with("bad UDP") || e.starts_with("bad TCP")) => {
                        let mtu =
                            self.egress_mtu(o.port, self.cfg.icmp_source_v4.unwrap_or([0, 0, 0, 0].into()).into());
                        if f.len() > mtu + 18 {
                            return Err(format!("output {i} on {:?}: {}-byte frame > MTU {mtu}", o.port, f.len()));
                        }
                        continue;
                    }
                    Err(e) => return Err(format!("output {i} on {:?}: {e}", o.port)),
                };
                let (_, dst) = w.src_dst();
                let mtu = self.egress_mtu(o.port, dst);
                if w.ip_len > mtu {
                    return Err(format!("output {i} on {:?}: IP length {} > MTU {mtu}", o.port, w.ip_len));
                }
                self.oracle.record_out(o.port, &w);
                wires.push((o.port, o.at, w));
            }
        }
        Ok(wires)
    }

    /// Every input packet is accounted for by the engine's counters, and the
    /// counters agree with the verdicts the harness saw.
    pub fn check_accounting(&self) -> Result<(), String> {
        let c = self.eng.counters();
        let rx = c.inner.rx_packets + c.outer.rx_packets;
        let acc = c.received_accounted();
        if rx != self.tally.fed || rx != acc {
            return Err(format!("rx {rx}, fed {}, accounted for {acc}: {c:?}", self.tally.fed));
        }
        if c.forwarded != self.tally.forward || c.total_drops() != self.tally.dropped {
            return Err(format!("counters {c:?} disagree with verdicts {:?}", self.tally));
        }
        let consumed =
            c.merged_in + c.split_in + c.fragmented_in + c.caravan.packed_in + c.caravan.opened + c.pmtu_taken;
        if consumed != self.tally.consumed {
            return Err(format!(
                "consumed {} != merged_in + split_in + fragmented_in + caravans packed and opened + ICMP taken ({c:?})",
                self.tally.consumed
            ));
        }
        Ok(())
    }
}

// ---- the stream oracle ---------------------------------------------------------

/// A TCP flow in one direction: (src, sport, dst, dport).
pub type FlowId = (IpAddr, u16, IpAddr, u16);

/// What a TCP segment contributes to its flow's ordered history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tok {
    /// Payload bytes `[start, end)` in sequence space (wrapping).
    Data(u32, u32),
    Syn,
    Fin,
    Rst,
    /// A segment without data or SYN/FIN/RST, with its ACK number.
    PureAck(u32),
}

/// Bytes offered at sequence offsets; any two offers of the same offset must
/// agree.
#[derive(Debug, Default, Clone)]
pub struct Stream {
    base: Option<u32>,
    /// Offset (relative to `base`, shifted to stay positive) → bytes.
    chunks: BTreeMap<u64, Vec<u8>>,
    pub conflicts: Vec<String>,
}

impl Stream {
    fn offset(&mut self, seq: u32) -> u64 {
        let base = *self.base.get_or_insert(seq.wrapping_sub(1 << 30));
        seq.wrapping_sub(base) as u64
    }

    /// Offers `data` at `seq`; records a conflict if an overlapping earlier
    /// offer disagrees.
    pub fn offer(&mut self, seq: u32, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let start = self.offset(seq);
        let end = start + data.len() as u64;
        for (&s, c) in self.chunks.range(start.saturating_sub(1 << 17)..end) {
            let e = s + c.len() as u64;
            let (lo, hi) = (s.max(start), e.min(end));
            if lo < hi && c[(lo - s) as usize..(hi - s) as usize] != data[(lo - start) as usize..(hi - start) as usize]
            {
                self.conflicts.push(format!("bytes at seq {:#x}+{} differ", seq, lo - start));
            }
        }
        let slot = self.chunks.entry(start).or_default();
        if slot.len() < data.len() {
            *slot = data.to_vec();
        }
    }

    /// The union of offered ranges, as sorted disjoint intervals.
    pub fn coverage(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for (&s, c) in &self.chunks {
            let e = s + c.len() as u64;
            match v.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => v.push((s, e)),
            }
        }
        v
    }
}

/// Per-flow record of what entered and left the engine.
#[derive(Debug, Default)]
pub struct Oracle {
    pub toks_in: HashMap<FlowId, Vec<Tok>>,
    pub toks_out: HashMap<FlowId, Vec<Tok>>,
    pub bytes_in: HashMap<FlowId, Stream>,
    pub bytes_out: HashMap<FlowId, Stream>,
    /// (port the flow left by, flow) of every flow seen on input.
    pub flow_port: HashMap<FlowId, Port>,
    /// Flows [`Self::verify`] leaves out.
    pub skip: std::collections::HashSet<FlowId>,
}

fn toks_of(t: &TcpHeader, payload_len: usize) -> Vec<Tok> {
    let mut v = Vec::new();
    if t.syn {
        v.push(Tok::Syn);
    }
    let data_seq = t.sequence_number.wrapping_add(t.syn as u32);
    if payload_len > 0 {
        v.push(Tok::Data(data_seq, data_seq.wrapping_add(payload_len as u32)));
    }
    if t.fin {
        v.push(Tok::Fin);
    }
    if t.rst {
        v.push(Tok::Rst);
    }
    if v.is_empty() {
        v.push(Tok::PureAck(t.acknowledgment_number));
    }
    v
}

impl Oracle {
    /// Records an input frame (parsed by etherparse; frames it rejects are
    /// not TCP data as far as the oracle is concerned).
    pub fn record_in(&mut self, from: Port, frame: &[u8], partial: bool) {
        let Ok(p) = PacketHeaders::from_ethernet_slice(frame) else { return };
        let (Some(net), Some(TransportHeader::Tcp(t))) = (&p.net, &p.transport) else { return };
        if !partial && check_wire_frame(frame).is_err() {
            return;
        }
        let Some(id) = flow_id_of(net, t) else { return };
        let payload = p.payload.slice();
        self.toks_in.entry(id).or_default().extend(toks_of(t, payload.len()));
        self.bytes_in.entry(id).or_default().offer(t.sequence_number.wrapping_add(t.syn as u32), payload);
        self.flow_port.insert(id, from.other());
    }

    fn record_out(&mut self, port: Port, w: &Wire) {
        let Some(t) = w.tcp() else { return };
        let (s, d) = w.src_dst();
        let id = (s, t.source_port, d, t.destination_port);
        if self.flow_port.get(&id).is_some_and(|p| *p != port) {
            self.bytes_out.entry(id).or_default().conflicts.push(format!("left by the wrong port {port:?}"));
        }
        self.toks_out.entry(id).or_default().extend(toks_of(t, w.payload.len()));
        self.bytes_out.entry(id).or_default().offer(t.sequence_number.wrapping_add(t.syn as u32), &w.payload);
    }

    /// Byte-exactness and order for every flow: the ordered history out
    /// (adjacent data coalesced) equals the one in, and every byte out equals
    /// the byte in at that sequence number.
    pub fn verify(&self) -> Result<(), String> {
        let mut ids: Vec<&FlowId> = self.toks_in.keys().chain(self.toks_out.keys()).collect();
        ids.sort();
        ids.dedup();
        for id in ids.into_iter().filter(|id| !self.skip.contains(*id)) {
            let a = coalesce(self.toks_in.get(id).map_or(&[][..], |v| v));
            let b = coalesce(self.toks_out.get(id).map_or(&[][..], |v| v));
            if a != b {
                let k = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
                return Err(format!(
                    "flow {id:?}: history differs at item {k}: in {:?} / out {:?} (in {} items, out {})",
                    &a[k.saturating_sub(2)..(k + 3).min(a.len())],
                    &b[k.saturating_sub(2)..(k + 3).min(b.len())],
                    a.len(),
                    b.len()
                ));
            }
            let si = self.bytes_in.get(id).cloned().unwrap_or_default();
            if !si.conflicts.is_empty() {
                return Err(format!("flow {id:?}: the input itself conflicts: {:?}", si.conflicts));
            }
            let so = self.bytes_out.get(id).cloned().unwrap_or_default();
            if !so.conflicts.is_empty() {
                return Err(format!("flow {id:?}: output conflicts: {:?}", &so.conflicts[..so.conflicts.len().min(3)]));
            }
            // Every byte out must be the byte in at that offset.
            let mut both = si.clone();
            for (&s, c) in &so.chunks {
                let seq = (s as u32).wrapping_add(so.base.unwrap_or(0));
                both.offer(seq, c);
            }
            if !both.conflicts.is_empty() {
                return Err(format!("flow {id:?}: output bytes differ from input: {:?}", &both.conflicts[..1]));
            }
            let cin: Vec<(u32, u32)> = cov_seq(&si);
            let cout: Vec<(u32, u32)> = cov_seq(&so);
            if cin != cout {
                return Err(format!("flow {id:?}: coverage in {cin:x?} != out {cout:x?}"));
            }
        }
        Ok(())
    }
}

/// The oracle's key of a TCP segment: (source, source port, destination,
/// destination port).
pub fn flow_id_of(net: &NetHeaders, t: &TcpHeader) -> Option<FlowId> {
    let (s, d) = match net {
        NetHeaders::Ipv4(h, _) => (IpAddr::V4(h.source.into()), IpAddr::V4(h.destination.into())),
        NetHeaders::Ipv6(h, _) => (IpAddr::V6(h.source.into()), IpAddr::V6(h.destination.into())),
        NetHeaders::Arp(_) => return None,
    };
    Some((s, t.source_port, d, t.destination_port))
}

/// The sequence ranges a stream covers, in a form that does not depend on
/// its base: sorted by first sequence number, touching ranges joined (also
/// across the end of the list, the sequence space being a circle). Each
/// stream's offsets wrap at its own base (its first sequence number less
/// 2^30), so a range that straddles one stream's base is two ranges there
/// and one in a stream that began elsewhere (the input and the output of a
/// flow whose data spans more than 2^31 of sequence space).
fn cov_seq(s: &Stream) -> Vec<(u32, u32)> {
    let b = s.base.unwrap_or(0);
    let mut v: Vec<(u32, u32)> =
        s.coverage().into_iter().map(|(x, y)| ((x as u32).wrapping_add(b), (y as u32).wrapping_add(b))).collect();
    v.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if last.1 == r.0 => last.1 = r.1,
            _ => out.push(r),
        }
    }
    if out.len() > 1 && out[out.len() - 1].1 == out[0].0 {
        let last = out.pop().expect("more than one");
        out[0].0 = last.0;
        out.sort_unstable();
    }
    out
}

fn coalesce(t: &[Tok]) -> Vec<Tok> {
    let mut v: Vec<Tok> = Vec::with_capacity(t.len());
    for &x in t {
        if let (Some(Tok::Data(_, e)), Tok::Data(s2, e2)) = (v.last_mut(), x)
            && *e == s2
        {
            *e = e2;
            continue;
        }
        v.push(x);
    }
    v
}

/// A default config for tests: fixed hash seed, ICMP sources set.
pub fn test_config() -> Config {
    Config {
        icmp_source_v4: Some([203, 0, 113, 254].into()),
        icmp_source_v6: Some("2001:db8:2::fe".parse().unwrap()),
        hash_seed: 7,
        ..Config::default()
    }
}

/// The inner host's initial sequence number in [`open_connection`]: its
/// first data byte is `INNER_ISN + 1`.
pub const INNER_ISN: u32 = 77;

/// The inner host's SYN-ACK of flow `n` (sequence `seq`) acknowledging
/// `ack`, announcing `mss` (no MSS option with `None`).
pub fn inner_syn_ack(v6: bool, n: u16, seq: u32, ack: u32, mss: Option<u16>) -> TcpSpec {
    let mut opts = mss.map_or(vec![], |m| vec![TcpOptionElement::MaximumSegmentSize(m)]);
    opts.extend([TcpOptionElement::Noop, TcpOptionElement::WindowScale(WINDOW_SCALE)]);
    let mut sa = TcpSpec::outbound(v6, n, seq, vec![]).with_opts(opts);
    sa.flags = Flags { syn: true, ack: true, ..Flags::default() };
    sa.ack = ack;
    sa
}

/// Opens connection `n` through the gateway, as its three segments cross
/// it: the outside host's SYN (sequence `isn - 1`, so its data starts at
/// `isn`; MSS 1460 over IPv4, 1440 over IPv6), the inner host's SYN-ACK
/// (sequence [`INNER_ISN`], announcing `inner_mss`, or no MSS option with
/// `None`), and the outside host's ACK (timestamps on). The frames are
/// checked and left out of what the test sees next.
pub fn open_connection(h: &mut Harness, v6: bool, n: u16, isn: u32, inner_mss: Option<u16>) {
    let omss = if v6 { 1440 } else { 1460 };
    let _ = h.feed_tcp(Port::Outer, &outer_syn(v6, n, isn.wrapping_sub(1), omss));
    let _ = h.feed_tcp(Port::Inner, &inner_syn_ack(v6, n, INNER_ISN, isn, inner_mss));
    let mut ack = TcpSpec::inbound(v6, n, isn, vec![]).ts(1, 1);
    ack.ack = INNER_ISN.wrapping_add(1);
    let _ = h.feed_tcp(Port::Outer, &ack);
    h.check_outputs().unwrap();
}

/// The window scale both hosts announce in their SYNs (Linux's with its
/// default buffers).
pub const WINDOW_SCALE: u8 = 7;

/// A SYN of flow `n` from the outside host, sequence `seq`, announcing
/// `mss` and window scale [`WINDOW_SCALE`].
pub fn outer_syn(v6: bool, n: u16, seq: u32, mss: u16) -> TcpSpec {
    let mut s = TcpSpec::inbound(v6, n, seq, vec![]).with_opts(vec![
        TcpOptionElement::MaximumSegmentSize(mss),
        TcpOptionElement::Noop,
        TcpOptionElement::WindowScale(WINDOW_SCALE),
    ]);
    s.flags = Flags { syn: true, ..Flags::default() };
    s
}

/// The inner host of flow `n` acknowledges the outer host's stream up to
/// `ack` with a full window: what it allows the outer host to send moves on
/// (the engine takes nothing beyond it as the connection's). The frame is
/// checked and left out of what the test sees.
pub fn inner_acks(h: &mut Harness, v6: bool, n: u16, ack: u32) {
    let mut a = TcpSpec::outbound(v6, n, INNER_ISN.wrapping_add(1), vec![]);
    a.ack = ack;
    let _ = h.feed_tcp(Port::Inner, &a);
    h.check_outputs().unwrap();
}

/// The inner host's SYN-ACK of flow `n` acknowledging `isn`, announcing the
/// inner MSS, without the rest of the handshake: a flow whose handshake the
/// gateway did not see is merged only up to the safe size
/// (`docs/gateway-tcp.md`). Its frame is checked and left out of what the
/// test sees.
pub fn announce_inner_mss(h: &mut Harness, v6: bool, n: u16, isn: u32) {
    let imss = if v6 { 8940 } else { 8960 };
    let _ = h.feed_tcp(Port::Inner, &inner_syn_ack(v6, n, 9, isn, Some(imss)));
    h.check_outputs().unwrap();
}

/// The frame of `s` with `raw` as its TCP options (etherparse has no
/// element for MD5 or AO).
pub fn with_raw_options(s: &TcpSpec, raw: &[u8]) -> Vec<u8> {
    let mut t = TcpHeader::new(s.sport, s.dport, s.seq, s.window);
    t.acknowledgment_number = s.ack;
    let f = s.flags;
    (t.syn, t.ack, t.fin, t.rst, t.psh, t.urg) = (f.syn, f.ack, f.fin, f.rst, f.psh, f.urg);
    t.set_options_raw(raw).unwrap();
    let ip = ip_headers(s.src, s.dst, s.dscp, s.ecn, s.ttl, s.df, s.ip_id, s.flow_label);
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_OUTER, MAC_INNER).ip(ip).tcp_header(t).write(&mut v, &s.payload).unwrap();
    v
}

/// An MD5 (kind 19, RFC 2385) or AO (kind 29, RFC 5925) option, padded.
pub fn signature(kind: u8, mss: Option<u16>) -> Vec<u8> {
    let mut o = Vec::new();
    if let Some(m) = mss {
        o.extend([2, 4]);
        o.extend(m.to_be_bytes());
    }
    let len = if kind == 19 { 18 } else { 16 };
    o.extend([kind, len]);
    o.extend((0..len - 2).map(|i| i * 7 + kind));
    while o.len() % 4 != 0 {
        o.push(1);
    }
    o
}
