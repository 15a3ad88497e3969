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
        let b = &self.b()[..self.total_len()];
        let mut nh = self.next_header();
        let mut off = HEADER_LEN;
        let mut fragment = None;
        // RFC 8200 §4.1 limits the chain in practice; bound the walk anyway.
        for _ in 0..16 {
            match nh {
                next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DEST_OPTS => {
                    need(Layer::Ipv6Extension, b.len(), off + 8)?;
                    let len = (b[off + 1] as usize + 1) * 8;
                    need(Layer::Ipv6Extension, b.len(), off + len)?;
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
                        return Ok(UpperLayer { protocol: nh, offset: off, fragment });
                    }
                }
                _ => return Ok(UpperLayer { protocol: nh, offset: off, fragment }),
            }
        }
        Err(ParseError::Malformed { layer: Layer::Ipv6Extension, field: "chain length", value: 16 })
    }

    pub fn pseudo_sum(&self, next_header: u8, l4_len: u32) -> Sum {
        checksum::pseudo_v6(self.src(), self.dst(), next_header, l4_len)
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
}
