//! The packets of the survey, built and parsed without I/O: TCP segments
//! in IPv4 (our own client, so the request can be cut into IP fragments),
//! IP fragmentation, the ICMP "fragmentation needed" of the PMTUD test,
//! and what comes back (TCP segments, ICMP time exceeded).

use std::net::Ipv4Addr;

use px_wire::checksum::pseudo_v4;
use px_wire::icmp::{self, IcmpMessage};
use px_wire::ipv4::{self, Ipv4Packet};
use px_wire::tcp::{TcpSegment, flags};

/// IP protocol numbers.
const PROTO_TCP: u8 = 6;
const PROTO_ICMP: u8 = 1;

/// Everything a TCP segment of ours needs.
#[derive(Clone, Copy, Debug)]
pub struct Seg<'a> {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    /// Our MSS option (SYN only).
    pub mss: Option<u16>,
    pub payload: &'a [u8],
    pub ident: u16,
    pub ttl: u8,
}

/// A whole IPv4 packet carrying the segment (DF set: our own packets are
/// never fragmented by routers; fragments are made by [`fragment`]).
pub fn tcp_packet(s: &Seg<'_>) -> Vec<u8> {
    let opt_len = if s.mss.is_some() { 4 } else { 0 };
    let tcp_len = 20 + opt_len + s.payload.len();
    let total = ipv4::MIN_HEADER_LEN + tcp_len;
    let mut p = vec![0u8; total];
    ipv4::emit_header(&mut p, 0, total as u16, s.ident, true, s.ttl, PROTO_TCP, s.src, s.dst);
    let t = &mut p[ipv4::MIN_HEADER_LEN..];
    t[0..2].copy_from_slice(&s.sport.to_be_bytes());
    t[2..4].copy_from_slice(&s.dport.to_be_bytes());
    t[4..8].copy_from_slice(&s.seq.to_be_bytes());
    t[8..12].copy_from_slice(&(if s.flags & flags::ACK != 0 { s.ack } else { 0 }).to_be_bytes());
    t[12] = (((20 + opt_len) / 4) as u8) << 4;
    t[13] = s.flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    if let Some(m) = s.mss {
        t[20..24].copy_from_slice(&[2, 4, (m >> 8) as u8, m as u8]);
    }
    t[20 + opt_len..].copy_from_slice(s.payload);
    let mut seg = TcpSegment::new_unchecked(&mut t[..]);
    seg.fill_checksum(pseudo_v4(s.src, s.dst, PROTO_TCP, tcp_len as u16));
    p
}

/// Cuts a whole IPv4 packet (20-byte header, no options) into `pieces`
/// fragments of about equal size, 8-byte aligned, DF clear, the same
/// identification; `pieces` is at least 2 and at most what the payload
/// allows (one 8-byte unit per fragment but the last).
pub fn fragment(packet: &[u8], pieces: usize) -> Vec<Vec<u8>> {
    let h = ipv4::MIN_HEADER_LEN;
    let payload = &packet[h..];
    let units = payload.len().div_ceil(8);
    let pieces = pieces.clamp(2, units.max(2));
    let per = units.div_ceil(pieces).max(1) * 8;
    let mut out = Vec::with_capacity(pieces);
    let mut off = 0;
    while off < payload.len() {
        let end = (off + per).min(payload.len());
        let more = end < payload.len();
        let mut f = Vec::with_capacity(h + end - off);
        f.extend_from_slice(&packet[..h]);
        f.extend_from_slice(&payload[off..end]);
        let total = f.len() as u16;
        let mut ip = Ipv4Packet::new_unchecked(&mut f[..]);
        ip.set_frag(false, more, off);
        ip.set_total_len(total);
        ip.fill_checksum();
        out.push(f);
        off = end;
    }
    out
}

/// ICMP "fragmentation needed" (type 3 code 4) announcing `mtu`, quoting
/// the start of `offending` (a packet the server sent to us), sent from
/// our address (as tbit does: any host may say that a packet was too big).
pub fn frag_needed(src: Ipv4Addr, dst: Ipv4Addr, mtu: u16, ident: u16, offending: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 20 + 8 + 576];
    let rest = [0, 0, (mtu >> 8) as u8, mtu as u8];
    let n = icmp::emit_v4_error(
        &mut out,
        ident,
        icmp::V4_DEST_UNREACH,
        icmp::V4_CODE_FRAG_NEEDED,
        rest,
        src,
        dst,
        offending,
        548,
    );
    out.truncate(n);
    out
}

/// A TCP segment that arrived, as far as the survey needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpIn {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: Vec<u8>,
    /// The IP packet's total length (what the PMTUD test compares).
    pub ip_len: usize,
    /// Its TTL as it arrived (the server's distance: see [`hops_from_ttl`]).
    pub ttl: u8,
    /// The whole packet (quoted by the PMTUD test's ICMP).
    pub packet: Vec<u8>,
}

/// What arrived on the survey's raw sockets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    Tcp(TcpIn),
    /// ICMP time exceeded in transit (code 0) for one of our packets.
    TimeExceeded {
        /// The router that sent it.
        from: Ipv4Addr,
        /// The quoted packet's destination, identification and (TCP or
        /// UDP) source port, which tells which of our tests sent it.
        quoted_dst: Ipv4Addr,
        quoted_ident: u16,
        quoted_sport: Option<u16>,
    },
    /// ICMP destination unreachable for one of our TCP segments: which
    /// connection (the quoted destination and ports) and the code.
    Unreachable {
        /// Who sent it.
        from: Ipv4Addr,
        code: u8,
        quoted_dst: Ipv4Addr,
        quoted_sport: u16,
        quoted_dport: u16,
    },
    /// Anything else (ignored).
    Other,
}

/// Routers between us and a host whose packet arrived with `ttl`: the
/// host's initial TTL is taken as the smallest of the usual ones (32, 64,
/// 128, 255) that is not below what arrived.
pub fn hops_from_ttl(ttl: u8) -> u8 {
    let initial = [32u8, 64, 128, 255].into_iter().find(|&i| i >= ttl).unwrap_or(255);
    initial - ttl
}

/// Parses an IPv4 packet from a raw socket; fragments (the kernel
/// reassembles before raw delivery) and what cannot be parsed count as
/// [`Incoming::Other`]. The TCP checksum is not checked: a raw socket gets
/// segments before TCP verifies them, and from a sender on the same host
/// (veth, loopback) their checksum is still partial (offloaded).
pub fn parse(packet: &[u8]) -> Incoming {
    let Ok(ip) = Ipv4Packet::new_checked(packet) else { return Incoming::Other };
    if ip.is_fragment() {
        return Incoming::Other;
    }
    let (src, dst) = (ip.src(), ip.dst());
    match ip.protocol() {
        PROTO_TCP => {
            let Ok(t) = TcpSegment::new_checked(ip.payload()) else { return Incoming::Other };
            Incoming::Tcp(TcpIn {
                src,
                dst,
                sport: t.src_port(),
                dport: t.dst_port(),
                seq: t.seq(),
                ack: t.ack(),
                flags: t.flags(),
                payload: t.payload().to_vec(),
                ip_len: ip.total_len(),
                ttl: ip.ttl(),
                packet: packet[..ip.total_len()].to_vec(),
            })
        }
        PROTO_ICMP => {
            let Ok(m) = IcmpMessage::new_checked(ip.payload()) else { return Incoming::Other };
            let q = m.quoted();
            if q.len() < 20 || q[0] >> 4 != 4 {
                return Incoming::Other;
            }
            let ihl = (q[0] & 0x0f) as usize * 4;
            let quoted_dst = Ipv4Addr::new(q[16], q[17], q[18], q[19]);
            if m.msg_type() == icmp::V4_DEST_UNREACH && q[9] == PROTO_TCP {
                let Some(p) = q.get(ihl..ihl + 4) else { return Incoming::Other };
                return Incoming::Unreachable {
                    from: src,
                    code: m.code(),
                    quoted_dst,
                    quoted_sport: u16::from_be_bytes([p[0], p[1]]),
                    quoted_dport: u16::from_be_bytes([p[2], p[3]]),
                };
            }
            if m.msg_type() != icmp::V4_TIME_EXCEEDED || m.code() != 0 {
                return Incoming::Other;
            }
            Incoming::TimeExceeded {
                from: src,
                quoted_dst,
                quoted_ident: u16::from_be_bytes([q[4], q[5]]),
                quoted_sport: q.get(ihl..ihl + 2).map(|p| u16::from_be_bytes([p[0], p[1]])),
            }
        }
        _ => Incoming::Other,
    }
}

/// Sets the TTL of a built packet (and fixes its header checksum).
pub fn set_ttl(packet: &mut [u8], ttl: u8) {
    let mut ip = Ipv4Packet::new_unchecked(packet);
    ip.set_ttl(ttl);
    ip.fill_checksum();
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use px_wire::checksum::Sum;

    const C: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const S: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);

    fn seg(payload: &[u8]) -> Seg<'_> {
        Seg {
            src: C,
            dst: S,
            sport: 61000,
            dport: 80,
            seq: 7,
            ack: 9,
            flags: flags::ACK | flags::PSH,
            mss: None,
            payload,
            ident: 0x1234,
            ttl: 64,
        }
    }

    #[test]
    fn a_built_segment_parses_back_with_valid_checksums() {
        let p = tcp_packet(&Seg { mss: Some(1460), flags: flags::SYN, ..seg(b"") });
        assert!(Ipv4Packet::new_checked(&p[..]).unwrap().verify_checksum());
        let Incoming::Tcp(t) = parse(&p) else { panic!("not parsed") };
        assert_eq!((t.sport, t.dport, t.seq, t.ack, t.flags), (61000, 80, 7, 0, flags::SYN));
        let whole = tcp_packet(&seg(b"GET /"));
        assert_eq!(parse(&whole[..30]), Incoming::Other, "a cut segment is not taken");
        assert_eq!(parse(&fragment(&whole, 2)[0]), Incoming::Other, "nor a fragment");
    }

    #[test]
    fn time_exceeded_names_the_router_and_the_quoted_packet() {
        let probe = tcp_packet(&seg(b"GET / HTTP/1.1\r\n"));
        let mut out = [0u8; 200];
        let r = Ipv4Addr::new(198, 51, 100, 2);
        let n = icmp::emit_v4_error(&mut out, 1, icmp::V4_TIME_EXCEEDED, 0, [0; 4], r, C, &probe, 28);
        assert_eq!(
            parse(&out[..n]),
            Incoming::TimeExceeded { from: r, quoted_dst: S, quoted_ident: 0x1234, quoted_sport: Some(61000) }
        );
        let n = icmp::emit_v4_error(&mut out, 1, icmp::V4_TIME_EXCEEDED, 0, [0; 4], r, C, &probe, 20);
        assert!(matches!(parse(&out[..n]), Incoming::TimeExceeded { quoted_sport: None, .. }), "header only");
        let n = icmp::emit_v4_error(&mut out, 1, icmp::V4_TIME_EXCEEDED, 1, [0; 4], r, C, &probe, 28);
        assert_eq!(parse(&out[..n]), Incoming::Other, "reassembly time exceeded is not a hop answer");
    }

    #[test]
    fn unreachable_names_the_connection_and_the_code() {
        let syn = tcp_packet(&Seg { mss: Some(1460), flags: flags::SYN, ..seg(b"") });
        let mut out = [0u8; 200];
        let n = icmp::emit_v4_error(&mut out, 1, icmp::V4_DEST_UNREACH, 13, [0; 4], S, C, &syn, 28);
        assert_eq!(
            parse(&out[..n]),
            Incoming::Unreachable { from: S, code: 13, quoted_dst: S, quoted_sport: 61000, quoted_dport: 80 }
        );
        let n = icmp::emit_v4_error(&mut out, 1, icmp::V4_DEST_UNREACH, 13, [0; 4], S, C, &syn, 22);
        assert_eq!(parse(&out[..n]), Incoming::Other, "ports cut off");
    }

    #[test]
    fn the_distance_comes_from_the_usual_initial_ttls() {
        assert_eq!(hops_from_ttl(61), 3);
        assert_eq!(hops_from_ttl(64), 0);
        assert_eq!(hops_from_ttl(117), 11);
        assert_eq!(hops_from_ttl(250), 5);
        assert_eq!(hops_from_ttl(30), 2);
    }

    #[test]
    fn frag_needed_carries_the_mtu() {
        let big = tcp_packet(&seg(&[0u8; 1460]));
        let p = frag_needed(C, S, 1280, 5, &big);
        let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
        let m = IcmpMessage::new_checked(ip.payload()).unwrap();
        assert_eq!(m.v4_next_hop_mtu(), Some(1280));
        assert!(m.verify_checksum(Sum(0)));
        assert_eq!(&m.quoted()[..28], &big[..28]);
    }

    proptest! {
        /// Fragments reassemble to the original payload; all but the last
        /// have MF and a multiple of 8 bytes; DF is clear; one identification.
        #[test]
        fn fragments_reassemble_to_the_packet(len in 16usize..3000, pieces in 2usize..6, ttl in 1u8..) {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut whole = tcp_packet(&seg(&payload));
            set_ttl(&mut whole, ttl);
            let frags = fragment(&whole, pieces);
            prop_assert!(frags.len() >= 2 && frags.len() <= pieces);
            let mut joined = Vec::new();
            for (i, f) in frags.iter().enumerate() {
                let ip = Ipv4Packet::new_checked(&f[..]).unwrap();
                prop_assert!(ip.verify_checksum());
                prop_assert_eq!(ip.ident(), 0x1234);
                prop_assert_eq!(ip.ttl(), ttl);
                prop_assert!(!ip.dont_frag());
                prop_assert_eq!(ip.frag_offset(), joined.len());
                let last = i == frags.len() - 1;
                prop_assert_eq!(ip.more_frags(), !last);
                if !last { prop_assert_eq!(ip.payload().len() % 8, 0); }
                joined.extend_from_slice(ip.payload());
            }
            prop_assert_eq!(&joined[..], &whole[20..]);
        }
    }
}
