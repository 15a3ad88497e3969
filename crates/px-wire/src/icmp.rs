//! The ICMP errors that carry a path MTU: ICMPv4 "fragmentation needed"
//! (RFC 792, RFC 1191 §4) and ICMPv6 "packet too big" (RFC 4443 §3.2), with
//! the quoted packet that caused them.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::checksum::{self, Sum};
use crate::error::{Layer, ParseError, need};
use crate::{ipv4, ipv6};

pub const HEADER_LEN: usize = 8;
pub const V4_DEST_UNREACH: u8 = 3;
pub const V4_CODE_FRAG_NEEDED: u8 = 4;
pub const V4_TIME_EXCEEDED: u8 = 11;
pub const V6_PACKET_TOO_BIG: u8 = 2;
pub const V6_TIME_EXCEEDED: u8 = 3;

/// A checked view of an ICMPv4 or ICMPv6 message (the layout of the first
/// 8 bytes is the same for both).
#[derive(Debug, Clone)]
pub struct IcmpMessage<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpMessage<T> {
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        need(Layer::Icmpv4, buffer.as_ref().len(), HEADER_LEN)?;
        Ok(IcmpMessage { buffer })
    }

    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// ICMPv4 fragmentation needed: the next-hop MTU (RFC 1191), or `None`
    /// for other messages.
    pub fn v4_next_hop_mtu(&self) -> Option<u16> {
        let b = self.buffer.as_ref();
        (b[0] == V4_DEST_UNREACH && b[1] == V4_CODE_FRAG_NEEDED).then(|| u16::from_be_bytes([b[6], b[7]]))
    }

    /// ICMPv6 packet too big: the MTU, or `None` for other messages.
    pub fn v6_mtu(&self) -> Option<u32> {
        let b = self.buffer.as_ref();
        (b[0] == V6_PACKET_TOO_BIG).then(|| u32::from_be_bytes([b[4], b[5], b[6], b[7]]))
    }

    /// The quoted (invoking) packet.
    pub fn quoted(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    pub fn verify_checksum(&self, pseudo: Sum) -> bool {
        checksum::fold(pseudo.plus(Sum::of(self.buffer.as_ref()))) == 0xffff
    }
}

/// Whether an ICMPv4 type is an error message (RFC 1812 §4.3.2.7: never
/// answered with another error): destination unreachable, source quench,
/// redirect, time exceeded, parameter problem.
pub fn is_v4_error(icmp_type: u8) -> bool {
    matches!(icmp_type, 3 | 4 | 5 | 11 | 12)
}

/// Whether an ICMPv6 type is an error message (RFC 4443 §2.1: types 0-127).
pub fn is_v6_error(icmp_type: u8) -> bool {
    icmp_type < 128
}

/// What a quoted (invoking) packet tells about the flow it belonged to, as
/// far as the quote reaches (RFC 792 quotes the IP header and 8 bytes;
/// RFC 1812 and RFC 4443 quote more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quoted {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Upper-layer protocol (after IPv6 extension headers in the quote).
    pub protocol: u8,
    /// The quoted packet's own length as it was sent: IPv4 total length,
    /// IPv6 40 + payload length (not how much of it was quoted).
    pub ip_len: usize,
    /// Source and destination ports of TCP or UDP, when the quote holds
    /// them (a first fragment or no fragment, and 4 bytes of transport).
    pub ports: Option<(u16, u16)>,
    /// The TCP sequence number, when the quote holds it.
    pub tcp_seq: Option<u32>,
}

/// Parses a quoted packet, which may be cut short anywhere after its IP
/// header: what is missing is `None`.
pub fn parse_quoted(quoted: &[u8]) -> Result<Quoted, ParseError> {
    match quoted.first().map_or(0, |b| b >> 4) {
        4 => quoted_v4(quoted, false),
        6 => quoted_v6(quoted, false),
        v => Err(ParseError::Malformed { layer: Layer::Icmpv4, field: "quoted version", value: v as u32 }),
    }
}

/// Parses a quoted packet as the receiving host's stack reads it: Linux's
/// `icmp_socket_deliver` / `tcp_v4_err` take the quote of an ICMPv4 error
/// as an IPv4 header whatever its version nibble, with the transport header
/// at its header length (at least 20) whatever its fragment offset, and
/// `icmpv6_notify` / `tcp_v6_err` read an ICMPv6 error's quote as IPv6 the
/// same way. A quote that [`parse_quoted`] rejects or reads as carrying no
/// ports may still be one a host acts on; whoever guards a host must judge
/// it by what the host will read. `ipv6`: the error is ICMPv6.
pub fn parse_quoted_as_host(quoted: &[u8], ipv6: bool) -> Result<Quoted, ParseError> {
    if ipv6 { quoted_v6(quoted, true) } else { quoted_v4(quoted, true) }
}

/// An IPv4 quote; `lax`: as a host reads it (no fragment offset check).
fn quoted_v4(quoted: &[u8], lax: bool) -> Result<Quoted, ParseError> {
    need(Layer::Icmpv4, quoted.len(), ipv4::MIN_HEADER_LEN)?;
    let ihl = (quoted[0] & 0x0f) as usize * 4;
    if ihl < ipv4::MIN_HEADER_LEN {
        return Err(ParseError::Malformed { layer: Layer::Icmpv4, field: "quoted IHL", value: ihl as u32 });
    }
    let src = Ipv4Addr::new(quoted[12], quoted[13], quoted[14], quoted[15]);
    let dst = Ipv4Addr::new(quoted[16], quoted[17], quoted[18], quoted[19]);
    let frag_off = u16::from_be_bytes([quoted[6], quoted[7]]) & 0x1fff;
    let total = u16::from_be_bytes([quoted[2], quoted[3]]) as usize;
    // A non-first fragment quotes no transport header (a host reads one
    // there all the same).
    let l4 = (lax || frag_off == 0).then_some(ihl);
    Ok(transport(quoted, IpAddr::V4(src), IpAddr::V4(dst), quoted[9], total, l4))
}

/// An IPv6 quote; `lax`: as a host reads it (no fragment offset check).
fn quoted_v6(quoted: &[u8], lax: bool) -> Result<Quoted, ParseError> {
    need(Layer::Icmpv6, quoted.len(), ipv6::HEADER_LEN)?;
    let p = ipv6::Ipv6Packet::new_unchecked(quoted);
    let ip_len = ipv6::HEADER_LEN + p.payload_len();
    // The walk stops where the quote does: no transport then.
    let up = ipv6::walk_extensions(quoted, p.next_header()).ok();
    let protocol = up.map_or(p.next_header(), |u| u.protocol);
    let l4 = up.filter(|u| lax || u.fragment.is_none_or(|f| f.offset == 0)).map(|u| u.offset);
    Ok(transport(quoted, IpAddr::V6(p.src()), IpAddr::V6(p.dst()), protocol, ip_len, l4))
}

/// The ports and TCP sequence number at `l4`, as far as the quote reaches.
fn transport(quoted: &[u8], src: IpAddr, dst: IpAddr, protocol: u8, ip_len: usize, l4: Option<usize>) -> Quoted {
    let t = l4.and_then(|at| quoted.get(at..));
    let ports = t.filter(|_| matches!(protocol, ipv6::next_header::TCP | ipv6::next_header::UDP)).and_then(|t| {
        Some((u16::from_be_bytes([*t.first()?, *t.get(1)?]), u16::from_be_bytes([*t.get(2)?, *t.get(3)?])))
    });
    let tcp_seq = t
        .filter(|_| protocol == ipv6::next_header::TCP)
        .and_then(|t| t.get(4..8))
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    Quoted { src, dst, protocol, ip_len, ports, tcp_seq }
}

/// Builds an IPv4 packet carrying ICMPv4 type/code with `rest` (bytes 4..8)
/// quoting the start of `offending` (its header plus up to `max_quote`
/// bytes in all, RFC 1812 §4.3.2.3). The IP header has identification
/// `ident`, DF clear and TTL 64 (as Linux sends its ICMP errors). Returns
/// the length written to `out`.
#[allow(clippy::too_many_arguments)]
pub fn emit_v4_error(
    out: &mut [u8],
    ident: u16,
    icmp_type: u8,
    code: u8,
    rest: [u8; 4],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    offending: &[u8],
    max_quote: usize,
) -> usize {
    let room = out.len().saturating_sub(ipv4::MIN_HEADER_LEN + HEADER_LEN);
    let q = offending.len().min(max_quote).min(room);
    let total = ipv4::MIN_HEADER_LEN + HEADER_LEN + q;
    ipv4::emit_header(out, 0xc0, total as u16, ident, false, 64, 1, src, dst);
    let m = &mut out[ipv4::MIN_HEADER_LEN..total];
    m[0] = icmp_type;
    m[1] = code;
    m[2..4].copy_from_slice(&[0, 0]);
    m[4..8].copy_from_slice(&rest);
    m[8..].copy_from_slice(&offending[..q]);
    let c = Sum::of(m).checksum();
    m[2..4].copy_from_slice(&c.to_be_bytes());
    total
}

/// Builds an IPv6 packet carrying an ICMPv6 error (RFC 4443 §2.4: as much of
/// the offending packet as fits in the minimum MTU of 1280).
#[allow(clippy::too_many_arguments)]
pub fn emit_v6_error(
    out: &mut [u8],
    icmp_type: u8,
    code: u8,
    rest: [u8; 4],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    offending: &[u8],
) -> usize {
    let room = out.len().saturating_sub(ipv6::HEADER_LEN + HEADER_LEN).min(1280 - ipv6::HEADER_LEN - HEADER_LEN);
    let q = offending.len().min(room);
    let plen = HEADER_LEN + q;
    ipv6::emit_header(out, 0xc0, plen as u16, ipv6::next_header::ICMPV6, 64, src, dst);
    let m = &mut out[ipv6::HEADER_LEN..ipv6::HEADER_LEN + plen];
    m[0] = icmp_type;
    m[1] = code;
    m[2..4].copy_from_slice(&[0, 0]);
    m[4..8].copy_from_slice(&rest);
    m[8..].copy_from_slice(&offending[..q]);
    let c = checksum::pseudo_v6(src, dst, ipv6::next_header::ICMPV6, plen as u32).plus(Sum::of(m)).checksum();
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ipv6::HEADER_LEN + plen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_reads_any_quote_with_a_header_length_as_its_own() {
        // An IPv4 TCP header quote: ports 1000 -> 80, sequence 7.
        let mut q = [0u8; 28];
        q[0] = 0x45;
        q[2..4].copy_from_slice(&1500u16.to_be_bytes());
        q[9] = 6;
        q[12..16].copy_from_slice(&[198, 51, 100, 1]);
        q[16..20].copy_from_slice(&[203, 0, 113, 1]);
        q[20..28].copy_from_slice(&[0x03, 0xe8, 0, 80, 0, 0, 0, 7]);
        let whole = parse_quoted(&q).unwrap();
        assert_eq!((whole.ports, whole.tcp_seq), (Some((1000, 80)), Some(7)));
        // A fragment offset: no transport for the strict parse, the same
        // ports and sequence for a host.
        q[6..8].copy_from_slice(&185u16.to_be_bytes());
        assert_eq!(parse_quoted(&q).unwrap().ports, None);
        assert_eq!(parse_quoted_as_host(&q, false).unwrap(), whole);
        // Another version nibble: refused by the strict parse, read by a host.
        q[6..8].copy_from_slice(&[0, 0]);
        q[0] = 0x55;
        assert!(parse_quoted(&q).is_err());
        assert_eq!(parse_quoted_as_host(&q, false).unwrap(), whole);
        q[0] = 0x54;
        assert!(parse_quoted_as_host(&q, false).is_err(), "a header length below 20 is refused by hosts too");
    }

    #[test]
    fn v4_frag_needed_roundtrip_and_oracle() {
        let mut off = vec![0u8; 1500];
        ipv4::emit_header(
            &mut off,
            0,
            1500,
            7,
            true,
            63,
            17,
            Ipv4Addr::new(198, 51, 100, 2),
            Ipv4Addr::new(203, 0, 113, 7),
        );
        let mut out = [0u8; 600];
        let n = emit_v4_error(
            &mut out,
            0x1234,
            V4_DEST_UNREACH,
            V4_CODE_FRAG_NEEDED,
            [0, 0, 0x05, 0xdc],
            Ipv4Addr::new(198, 51, 100, 254),
            Ipv4Addr::new(198, 51, 100, 2),
            &off,
            576 - 28,
        );
        assert_eq!(n, 576);
        let ip = ipv4::Ipv4Packet::new_checked(&out[..n]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.ident(), ip.dont_frag(), ip.ttl()), (0x1234, false, 64));
        let q = parse_quoted(IcmpMessage::new_checked(ip.payload()).unwrap().quoted()).unwrap();
        assert_eq!(q.ip_len, 1500, "the quoted packet's own length");
        assert_eq!((q.protocol, q.dst), (17, IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))));
        let m = IcmpMessage::new_checked(ip.payload()).unwrap();
        assert_eq!(m.v4_next_hop_mtu(), Some(1500));
        assert!(m.verify_checksum(Sum(0)));
        let (_, rest) = etherparse::Ipv4Header::from_slice(&out[..n]).unwrap();
        let icmp = etherparse::Icmpv4Slice::from_slice(rest).unwrap();
        assert!(matches!(
            icmp.icmp_type(),
            etherparse::Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1500 }
            )
        ));
    }

    #[test]
    fn v6_too_big_checksum_and_quote_limit() {
        let a = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
        let b = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);
        let off = vec![0x60u8; 9000];
        let mut out = [0u8; 2000];
        let n = emit_v6_error(&mut out, V6_PACKET_TOO_BIG, 0, 1500u32.to_be_bytes(), a, b, &off);
        assert_eq!(n, 1280);
        let ip = ipv6::Ipv6Packet::new_checked(&out[..n]).unwrap();
        let m = IcmpMessage::new_checked(ip.payload()).unwrap();
        assert_eq!(m.v6_mtu(), Some(1500));
        assert!(m.verify_checksum(checksum::pseudo_v6(a, b, 58, (n - 40) as u32)));
        let s = etherparse::SlicedPacket::from_ip(&out[..n]).unwrap();
        match s.net {
            Some(etherparse::NetSlice::Ipv6(_)) => {}
            _ => panic!("not ipv6"),
        }
    }

    #[test]
    fn quoted_tcp_packets_give_ports_and_sequence_as_far_as_quoted() {
        let v4 =
            etherparse::PacketBuilder::ipv4([198, 51, 100, 2], [203, 0, 113, 7], 64).tcp(40000, 80, 0xdead_beef, 9);
        let mut q = Vec::new();
        v4.write(&mut q, &[0u8; 1400]).unwrap();
        let p = parse_quoted(&q[..28]).unwrap();
        assert_eq!(p.ip_len, 20 + 20 + 1400);
        assert_eq!((p.protocol, p.ports, p.tcp_seq), (6, Some((40000, 80)), Some(0xdead_beef)));
        assert_eq!(p.src, IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)));
        // Cut inside the TCP header: ports only, then nothing.
        assert_eq!(parse_quoted(&q[..26]).unwrap().tcp_seq, None);
        assert_eq!(parse_quoted(&q[..24]).unwrap().ports, Some((40000, 80)));
        assert_eq!(parse_quoted(&q[..22]).unwrap().ports, None);
        assert!(parse_quoted(&q[..19]).is_err());
        // A non-first fragment quotes no transport header.
        q[6] = 0x00;
        q[7] = 0xb9;
        assert_eq!(parse_quoted(&q[..28]).unwrap().ports, None);
        let a = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
        let b = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);
        let v6 = etherparse::PacketBuilder::ipv6(a.octets(), b.octets(), 64).tcp(443, 50000, 77, 9);
        let mut q = Vec::new();
        v6.write(&mut q, &[0u8; 8000]).unwrap();
        let p = parse_quoted(&q[..1232]).unwrap();
        assert_eq!(
            (p.ip_len, p.dst, p.ports, p.tcp_seq),
            (40 + 20 + 8000, IpAddr::V6(b), Some((443, 50000)), Some(77))
        );
        assert!(parse_quoted(&[0x50; 40]).is_err());
    }

    #[test]
    fn error_types() {
        assert!(is_v4_error(3) && is_v4_error(11) && !is_v4_error(0) && !is_v4_error(8));
        assert!(is_v6_error(2) && !is_v6_error(128) && !is_v6_error(135));
    }
}
