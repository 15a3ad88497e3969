//! The ICMP errors that carry a path MTU: ICMPv4 "fragmentation needed"
//! (RFC 792, RFC 1191 §4) and ICMPv6 "packet too big" (RFC 4443 §3.2), with
//! the quoted packet that caused them.

use core::net::{Ipv4Addr, Ipv6Addr};

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

/// The destination of a quoted IPv4 header, which may be cut short after
/// its first 8 payload bytes (RFC 792), so only the fixed header is needed.
pub fn quoted_v4_dst(quoted: &[u8]) -> Result<Ipv4Addr, ParseError> {
    need(Layer::Icmpv4, quoted.len(), ipv4::MIN_HEADER_LEN)?;
    if quoted[0] >> 4 != 4 {
        return Err(ParseError::Malformed {
            layer: Layer::Icmpv4,
            field: "quoted version",
            value: (quoted[0] >> 4) as u32,
        });
    }
    Ok(Ipv4Addr::new(quoted[16], quoted[17], quoted[18], quoted[19]))
}

/// The destination of a quoted IPv6 header.
pub fn quoted_v6_dst(quoted: &[u8]) -> Result<Ipv6Addr, ParseError> {
    need(Layer::Icmpv6, quoted.len(), ipv6::HEADER_LEN)?;
    if quoted[0] >> 4 != 6 {
        return Err(ParseError::Malformed {
            layer: Layer::Icmpv6,
            field: "quoted version",
            value: (quoted[0] >> 4) as u32,
        });
    }
    let mut a = [0u8; 16];
    a.copy_from_slice(&quoted[24..40]);
    Ok(Ipv6Addr::from(a))
}

/// Builds an IPv4 packet carrying ICMPv4 type/code with `rest` (bytes 4..8)
/// quoting the start of `offending` (its header plus up to `max_quote`
/// bytes in all, RFC 1812 §4.3.2.3). Returns the length written to `out`.
#[allow(clippy::too_many_arguments)]
pub fn emit_v4_error(
    out: &mut [u8],
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
    ipv4::emit_header(out, 0xc0, total as u16, 0, false, 64, 1, src, dst);
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
        let m = IcmpMessage::new_checked(ip.payload()).unwrap();
        assert_eq!(m.v4_next_hop_mtu(), Some(1500));
        assert!(m.verify_checksum(Sum(0)));
        assert_eq!(quoted_v4_dst(m.quoted()).unwrap(), Ipv4Addr::new(203, 0, 113, 7));
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
}
