//! IPv6 headers (RFC 8200) and the walk over extension headers to the
//! upper-layer header, including the Fragment header.
//!
//! The checked constructor guarantees `40 + payload_len <= buffer length`;
//! [`Ipv6Packet::upper_layer`] walks extension headers with every length
//! checked, so no accessor can index out of bounds.

use core::net::Ipv6Addr;

use crate::checksum::{self, Sum};
use crate::error::{Layer, ParseError, need};

pub const HEADER_LEN: usize = 40;

/// Where each fixed-header field lies, as byte ranges from the header's
/// start (RFC 8200 §3). Public so that code rewriting headers in place
/// names the field it writes instead of an offset.
pub mod field {
    /// A field's bytes within the header.
    pub type Field = core::ops::Range<usize>;
    pub const PAYLOAD_LEN: Field = 4..6;
    /// One byte.
    pub const NEXT_HEADER: usize = 6;
    /// One byte.
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
}

/// Next-header values of extension headers the walk understands.
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT: u8 = 59;
    pub const DEST_OPTS: u8 = 60;
}

/// A checked view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// Where the upper-layer header starts, after the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// The upper-layer protocol (e.g. 6 for TCP), or the extension header
    /// at which the walk stopped (ESP, No Next Header).
    pub protocol: u8,
    /// Offset from the start of the IPv6 header.
    pub offset: usize,
    /// The Fragment header, if the packet had one.
    pub fragment: Option<FragmentInfo>,
    /// The final destination named by a routing header with segments left
    /// (see [`Ipv6Packet::final_dst`]); `None` without one.
    pub final_dst: Option<Ipv6Addr>,
}

/// The fields of an IPv6 Fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentInfo {
    /// Offset of the Fragment header from the start of the IPv6 header.
    pub header_offset: usize,
    /// Fragment offset in bytes.
    pub offset: usize,
    pub more: bool,
    pub ident: u32,
}

impl FragmentInfo {
    pub fn is_fragment(&self) -> bool {
        self.more || self.offset != 0
    }
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checks, for rewriting headers the caller has
    /// already validated (e.g. a copy of a checked packet's headers).
    /// Accessors may panic if the buffer is not a valid packet.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        need(Layer::Ipv6, b.len(), HEADER_LEN)?;
        if b[0] >> 4 != 6 {
            return Err(ParseError::Malformed { layer: Layer::Ipv6, field: "version", value: (b[0] >> 4) as u32 });
        }
        let plen = u16::from_be_bytes([b[4], b[5]]) as usize;
        need(Layer::Ipv6, b.len(), HEADER_LEN + plen)?;
        Ok(Ipv6Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn traffic_class(&self) -> u8 {
        let b = self.b();
        (b[0] << 4) | (b[1] >> 4)
    }

    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    pub fn flow_label(&self) -> u32 {
        let b = self.b();
        u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]])
    }

    pub fn payload_len(&self) -> usize {
        let b = self.b();
        u16::from_be_bytes([b[4], b[5]]) as usize
    }

    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        Ipv6Addr::from(a)
    }

    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        Ipv6Addr::from(a)
    }

    /// Everything after the fixed header, up to the declared payload length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.total_len()]
    }

    /// Walks the extension headers (hop-by-hop, routing, fragment,
    /// destination options, AH) to the upper-layer header.
    pub fn upper_layer(&self) -> Result<UpperLayer, ParseError> {
        walk_extensions(&self.b()[..self.total_len()], self.next_header())
    }

    /// The destination the upper layer's pseudo-header names (RFC 8200
    /// §8.1): the last address of a routing header that still has segments
    /// left, the header's Destination Address otherwise.
    pub fn final_dst(&self) -> Ipv6Addr {
        walk_extensions(&self.b()[..self.total_len()], self.next_header())
            .ok()
            .and_then(|u| u.final_dst)
            .unwrap_or_else(|| self.dst())
    }

    /// Pseudo-header sum for the upper layer (with the final destination).
    pub fn pseudo_sum(&self, next_header: u8, l4_len: u32) -> Sum {
        checksum::pseudo_v6(self.src(), self.final_dst(), next_header, l4_len)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&len.to_be_bytes());
    }

    pub fn set_ecn(&mut self, ecn: u8) {
        let b = self.buffer.as_mut();
        b[1] = (b[1] & !0x30) | ((ecn & 0x03) << 4);
    }

    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[7] = h;
    }

    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[6] = nh;
    }

    pub fn set_src(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[8..24].copy_from_slice(&a.octets());
    }

    pub fn set_dst(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[24..40].copy_from_slice(&a.octets());
    }
}

/// Routing header types whose final destination the walk reads (RFC 8200
/// §4.4 layout: type at byte 2, segments left at byte 3).
mod routing_type {
    /// Source route (RFC 5095 deprecates it; the layout is still known).
    pub const TYPE0: u8 = 0;
    /// Mobile IPv6 home address (RFC 6275 §6.4).
    pub const TYPE2: u8 = 2;
    /// RPL source route, compressed addresses (RFC 6554).
    pub const RPL: u8 = 3;
    /// Segment routing header (RFC 8754): the segment list is in reverse.
    pub const SRH: u8 = 4;
}

/// The final destination a routing header names, when it has segments
/// left (`rh` is the whole header; `dst` the IPv6 Destination Address,
/// whose prefix RPL's compressed addresses share). `None` for a type this
/// code does not know or a header too short for what it claims.
fn routing_final_dst(rh: &[u8], dst: &[u8; 16]) -> Option<Ipv6Addr> {
    let (kind, left) = (*rh.get(2)?, *rh.get(3)?);
    if left == 0 {
        return None;
    }
    let addr = |at: usize| -> Option<Ipv6Addr> { <[u8; 16]>::try_from(rh.get(at..at + 16)?).ok().map(Ipv6Addr::from) };
    match kind {
        // Addresses from byte 8; the last is the final destination.
        routing_type::TYPE0 | routing_type::TYPE2 => {
            let n = (rh.len() - 8) / 16;
            addr(8 + n.checked_sub(1)? * 16)
        }
        // Segment List[0], the first in the header, is the last segment.
        routing_type::SRH => addr(8),
        routing_type::RPL => {
            // CmprI (4 bits), CmprE (4 bits), Pad (4 bits): n-1 addresses
            // of 16-CmprI bytes, then the last of 16-CmprE bytes, each with
            // the elided prefix taken from the Destination Address.
            let (cmpr_i, cmpr_e, pad) = ((rh[4] >> 4) as usize, (rh[4] & 0x0f) as usize, (rh[5] >> 4) as usize);
            let body = rh.len().checked_sub(8 + pad)?;
            let n_first = body.checked_sub(16 - cmpr_e)? / (16 - cmpr_i);
            let at = 8 + n_first * (16 - cmpr_i);
            let mut a = *dst;
            a[cmpr_e..].copy_from_slice(rh.get(at..at + 16 - cmpr_e)?);
            Some(Ipv6Addr::from(a))
        }
        _ => None,
    }
}

/// Walks the extension headers of an IPv6 packet `b` (its header and as
/// much of the rest as there is: a quoted packet may be cut short) to the
/// upper-layer header, starting with the header's Next Header `nh`.
pub(crate) fn walk_extensions(b: &[u8], mut nh: u8) -> Result<UpperLayer, ParseError> {
    need(Layer::Ipv6, b.len(), HEADER_LEN)?;
    let mut off = HEADER_LEN;
    let mut fragment = None;
    let mut final_dst = None;
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&b[24..40]);
    // RFC 8200 §4.1 limits the chain in practice; bound the walk anyway.
    for _ in 0..16 {
        match nh {
            next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DEST_OPTS => {
                need(Layer::Ipv6Extension, b.len(), off + 8)?;
                let len = (b[off + 1] as usize + 1) * 8;
                need(Layer::Ipv6Extension, b.len(), off + len)?;
                if nh == next_header::ROUTING {
                    final_dst = routing_final_dst(&b[off..off + len], &dst).or(final_dst);
                }
                nh = b[off];
                off += len;
            }
            next_header::AH => {
                need(Layer::Ipv6Extension, b.len(), off + 8)?;
                let len = (b[off + 1] as usize + 2) * 4;
                need(Layer::Ipv6Extension, b.len(), off + len)?;
                nh = b[off];
                off += len;
            }
            next_header::FRAGMENT => {
                need(Layer::Ipv6Extension, b.len(), off + 8)?;
                let fo = u16::from_be_bytes([b[off + 2], b[off + 3]]);
                fragment = Some(FragmentInfo {
                    header_offset: off,
                    offset: ((fo >> 3) as usize) * 8,
                    more: fo & 1 != 0,
                    ident: u32::from_be_bytes([b[off + 4], b[off + 5], b[off + 6], b[off + 7]]),
                });
                nh = b[off];
                off += 8;
                // A non-first fragment carries no upper-layer header.
                if fragment.is_some_and(|f| f.offset != 0) {
                    return Ok(UpperLayer { protocol: nh, offset: off, fragment, final_dst });
                }
            }
            _ => return Ok(UpperLayer { protocol: nh, offset: off, fragment, final_dst }),
        }
    }
    Err(ParseError::Malformed { layer: Layer::Ipv6Extension, field: "chain length", value: 16 })
}

/// Writes a 40-byte IPv6 header into `buf[..40]`.
pub fn emit_header(
    buf: &mut [u8],
    traffic_class: u8,
    payload_len: u16,
    next_header: u8,
    hop_limit: u8,
    src: Ipv6Addr,
    dst: Ipv6Addr,
) {
    buf[0] = 0x60 | (traffic_class >> 4);
    buf[1] = traffic_class << 4;
    buf[2] = 0;
    buf[3] = 0;
    buf[4..6].copy_from_slice(&payload_len.to_be_bytes());
    buf[6] = next_header;
    buf[7] = hop_limit;
    buf[8..24].copy_from_slice(&src.octets());
    buf[24..40].copy_from_slice(&dst.octets());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(n: u16) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, n)
    }

    #[test]
    fn plain_tcp() {
        let mut b = vec![0u8; 60];
        emit_header(&mut b, 0xb9, 20, next_header::TCP, 64, addr(1), addr(2));
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.traffic_class(), 0xb9);
        assert_eq!(p.ecn(), 1);
        assert_eq!(p.dscp(), 0xb9 >> 2);
        assert_eq!(p.src(), addr(1));
        assert_eq!(p.dst(), addr(2));
        let u = p.upper_layer().unwrap();
        assert_eq!((u.protocol, u.offset, u.fragment), (next_header::TCP, 40, None));
        let e = etherparse::Ipv6HeaderSlice::from_slice(&b).unwrap();
        assert_eq!(e.traffic_class(), 0xb9);
        assert_eq!(e.payload_length(), 20);
    }

    #[test]
    fn walks_hop_by_hop_and_fragment() {
        let mut b = vec![0u8; 40 + 8 + 8 + 8];
        emit_header(&mut b, 0, 24, next_header::HOP_BY_HOP, 64, addr(1), addr(2));
        b[40] = next_header::FRAGMENT;
        b[41] = 0;
        b[48] = next_header::UDP;
        b[50..52].copy_from_slice(&1u16.to_be_bytes()); // offset 0, more fragments
        b[52..56].copy_from_slice(&0xdeadbeefu32.to_be_bytes());
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        let u = p.upper_layer().unwrap();
        assert_eq!(u.protocol, next_header::UDP);
        assert_eq!(u.offset, 56);
        let f = u.fragment.unwrap();
        assert!(f.more && f.offset == 0 && f.ident == 0xdeadbeef && f.is_fragment());
    }

    #[test]
    fn truncated_extension_is_an_error() {
        let mut b = vec![0u8; 44];
        emit_header(&mut b, 0, 4, next_header::DEST_OPTS, 64, addr(1), addr(2));
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert!(p.upper_layer().is_err());
    }

    #[test]
    fn final_destination_of_type2_and_rpl_routing_headers() {
        // Type 2 (Mobile IPv6): one address, the home address.
        let mut b = vec![0u8; 40 + 24 + 8];
        emit_header(&mut b, 0, 32, next_header::ROUTING, 64, addr(1), addr(2));
        b[40..44].copy_from_slice(&[next_header::UDP, 2, 2, 1]);
        b[48..64].copy_from_slice(&addr(9).octets());
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.final_dst(), addr(9));
        assert_eq!(p.upper_layer().unwrap().offset, 64);
        assert_eq!(p.pseudo_sum(17, 8), checksum::pseudo_v6(addr(1), addr(9), 17, 8));
        // RPL (type 3): two addresses sharing 14 bytes with the destination
        // (CmprI = CmprE = 14), 2 bytes each, padded to 8.
        let mut b = vec![0u8; 40 + 16 + 8];
        emit_header(&mut b, 0, 24, next_header::ROUTING, 64, addr(1), addr(2));
        b[40..46].copy_from_slice(&[next_header::UDP, 1, 3, 2, 0xee, 0x40]);
        b[48..52].copy_from_slice(&[0, 7, 0, 8]);
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().final_dst(), addr(8));
        // Unknown routing type, or no segments left: the header's destination.
        b[42] = 200;
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().final_dst(), addr(2));
        b[42] = 3;
        b[43] = 0;
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap().final_dst(), addr(2));
    }
}
