//! IPv4 headers (RFC 791) with options and fragmentation fields.
//!
//! The checked constructor guarantees `20 <= header_len <= total_len <=
//! buffer length`, so every accessor below is infallible; bytes after
//! `total_len` (Ethernet padding) are not part of the packet.

use core::net::Ipv4Addr;

use crate::checksum::{self, Sum};
use crate::error::{Layer, ParseError, need};

pub const MIN_HEADER_LEN: usize = 20;
pub const FLAG_DF: u16 = 0x4000;
pub const FLAG_MF: u16 = 0x2000;

/// Where each header field lies, as byte ranges from the header's start
/// (RFC 791 §3.1). Public so that code rewriting headers in place names the
/// field it writes instead of an offset.
pub mod field {
    /// A field's bytes within the header.
    pub type Field = core::ops::Range<usize>;
    pub const LEN: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
    /// One byte.
    pub const VER_IHL: usize = 0;
    /// One byte.
    pub const TOS: usize = 1;
    /// One byte.
    pub const TTL: usize = 8;
    /// One byte.
    pub const PROTOCOL: usize = 9;
}

/// A checked view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checks, for rewriting headers the caller has
    /// already validated (e.g. a copy of a checked packet's headers).
    /// Accessors may panic if the buffer is not a valid packet.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        need(Layer::Ipv4, b.len(), MIN_HEADER_LEN)?;
        let version = b[0] >> 4;
        if version != 4 {
            return Err(ParseError::Malformed { layer: Layer::Ipv4, field: "version", value: version as u32 });
        }
        let hl = ((b[0] & 0x0f) as usize) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(ParseError::Malformed { layer: Layer::Ipv4, field: "ihl", value: hl as u32 / 4 });
        }
        need(Layer::Ipv4, b.len(), hl)?;
        let total = be16(b, field::LEN.start) as usize;
        if total < hl {
            return Err(ParseError::Malformed { layer: Layer::Ipv4, field: "total length", value: total as u32 });
        }
        need(Layer::Ipv4, b.len(), total)?;
        Ok(Ipv4Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    #[inline]
    pub fn header_len(&self) -> usize {
        ((self.b()[field::VER_IHL] & 0x0f) as usize) * 4
    }

    pub fn dscp(&self) -> u8 {
        self.b()[field::TOS] >> 2
    }

    pub fn ecn(&self) -> u8 {
        self.b()[field::TOS] & 0x03
    }

    pub fn total_len(&self) -> usize {
        be16(self.b(), field::LEN.start) as usize
    }

    pub fn ident(&self) -> u16 {
        be16(self.b(), field::IDENT.start)
    }

    pub fn dont_frag(&self) -> bool {
        be16(self.b(), field::FLG_OFF.start) & FLAG_DF != 0
    }

    pub fn more_frags(&self) -> bool {
        be16(self.b(), field::FLG_OFF.start) & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> usize {
        ((be16(self.b(), field::FLG_OFF.start) & 0x1fff) as usize) * 8
    }

    /// True for any fragment (first, middle or last).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }

    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }

    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM.start)
    }

    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }

    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }

    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len()]
    }

    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }

    #[inline]
    pub fn verify_checksum(&self) -> bool {
        match <&[u8; 20]>::try_from(self.header()) {
            // The usual option-less header: five words, no loop.
            Ok(h) => {
                let w = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u64;
                checksum::fold(Sum(w(0) + w(4) + w(8) + w(12) + w(16))) == 0xffff
            }
            Err(_) => self.verify_checksum_with_options(),
        }
    }

    #[inline(never)]
    fn verify_checksum_with_options(&self) -> bool {
        checksum::fold(Sum::of(self.header())) == 0xffff
    }

    /// Pseudo-header sum for the upper-layer checksum of this packet.
    pub fn pseudo_sum(&self, l4_len: u16) -> Sum {
        checksum::pseudo_v4(self.src(), self.dst(), self.protocol(), l4_len)
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    fn put16(&mut self, at: usize, v: u16) {
        self.bm()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// The whole underlying buffer, for rewrites no setter covers.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the header length (IHL) in bytes, a multiple of 4 from 20 to 60.
    pub fn set_header_len(&mut self, len: usize) {
        self.bm()[field::VER_IHL] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the total length. The caller keeps it within the buffer.
    pub fn set_total_len(&mut self, len: u16) {
        self.put16(field::LEN.start, len);
    }

    pub fn set_ident(&mut self, id: u16) {
        self.put16(field::IDENT.start, id);
    }

    pub fn set_ecn(&mut self, ecn: u8) {
        let b = self.bm();
        b[field::TOS] = (b[field::TOS] & !0x03) | (ecn & 0x03);
    }

    pub fn set_dscp(&mut self, dscp: u8) {
        let b = self.bm();
        b[field::TOS] = (b[field::TOS] & 0x03) | (dscp << 2);
    }

    /// Sets DF, MF and the fragment offset (in bytes, a multiple of 8).
    pub fn set_frag(&mut self, df: bool, mf: bool, offset: usize) {
        let v = (if df { FLAG_DF } else { 0 }) | (if mf { FLAG_MF } else { 0 }) | ((offset / 8) as u16 & 0x1fff);
        self.put16(field::FLG_OFF.start, v);
    }

    pub fn set_ttl(&mut self, ttl: u8) {
        self.bm()[field::TTL] = ttl;
    }

    pub fn set_protocol(&mut self, p: u8) {
        self.bm()[field::PROTOCOL] = p;
    }

    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.bm()[field::SRC].copy_from_slice(&a.octets());
    }

    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.bm()[field::DST].copy_from_slice(&a.octets());
    }

    /// Recomputes the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.put16(field::CHECKSUM.start, 0);
        let c = Sum::of(self.header()).checksum();
        self.put16(field::CHECKSUM.start, c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), self.total_len());
        &mut self.bm()[h..t]
    }
}

/// Writes a 20-byte option-less IPv4 header into `buf[..20]`.
#[allow(clippy::too_many_arguments)]
pub fn emit_header(
    buf: &mut [u8],
    tos: u8,
    total_len: u16,
    ident: u16,
    df: bool,
    ttl: u8,
    protocol: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
) {
    buf[0] = 0x45;
    buf[1] = tos;
    buf[2..4].copy_from_slice(&total_len.to_be_bytes());
    buf[4..6].copy_from_slice(&ident.to_be_bytes());
    buf[6..8].copy_from_slice(&(if df { FLAG_DF } else { 0 }).to_be_bytes());
    buf[8] = ttl;
    buf[9] = protocol;
    buf[10..12].copy_from_slice(&[0, 0]);
    buf[12..16].copy_from_slice(&src.octets());
    buf[16..20].copy_from_slice(&dst.octets());
    let c = Sum::of(&buf[..20]).checksum();
    buf[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Length of the options that RFC 791 says must be copied into every
/// fragment (copied flag set), laid out as they would be in a non-first
/// fragment's header. Returns the bytes to use, padded to 4.
pub fn options_for_fragments(options: &[u8], out: &mut [u8; 40]) -> usize {
    let mut i = 0;
    let mut n = 0;
    while i < options.len() {
        let kind = options[i];
        match kind {
            0 => break,
            1 => {
                i += 1;
                continue;
            }
            _ => {
                let Some(&len) = options.get(i + 1) else { break };
                let len = len as usize;
                if len < 2 || i + len > options.len() {
                    break;
                }
                if kind & 0x80 != 0 && n + len <= out.len() {
                    out[n..n + len].copy_from_slice(&options[i..i + len]);
                    n += len;
                }
                i += len;
            }
        }
    }
    while n % 4 != 0 {
        out[n] = 0;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut b = vec![0u8; 28];
        emit_header(
            &mut b,
            0x02,
            28,
            0x1234,
            true,
            64,
            17,
            Ipv4Addr::new(198, 51, 100, 1),
            Ipv4Addr::new(203, 0, 113, 9),
        );
        b
    }

    #[test]
    fn emit_parse_roundtrip() {
        let b = sample();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0x1234);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.ecn(), 2);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.src(), Ipv4Addr::new(198, 51, 100, 1));
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 8);
        let e = etherparse::Ipv4HeaderSlice::from_slice(&b).unwrap();
        assert_eq!(e.header_checksum(), p.checksum());
        assert_eq!(e.to_header().calc_header_checksum(), p.checksum());
    }

    #[test]
    fn setters_keep_checksum_valid_after_fill() {
        let mut b = sample();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_frag(false, true, 1480);
        p.set_ecn(3);
        p.set_dscp(10);
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert!(p.more_frags());
        assert_eq!(p.frag_offset(), 1480);
        assert_eq!(p.dscp(), 10);
        assert_eq!(p.ecn(), 3);
    }

    #[test]
    fn rejects_bad_lengths() {
        let mut b = sample();
        b[0] = 0x44;
        assert!(Ipv4Packet::new_checked(&b[..]).is_err());
        let mut b = sample();
        b[3] = 19;
        assert!(Ipv4Packet::new_checked(&b[..]).is_err());
        let mut b = sample();
        b[3] = 29;
        assert!(matches!(Ipv4Packet::new_checked(&b[..]), Err(ParseError::Truncated { .. })));
        let mut b = sample();
        b[0] = 0x65;
        assert!(Ipv4Packet::new_checked(&b[..]).is_err());
    }

    #[test]
    fn fragment_options_keep_only_copied() {
        // NOP, record route (not copied, kind 7 len 7), loose source route (copied, kind 131 len 7)
        let opts = [1, 7, 7, 4, 0, 0, 0, 0, 131, 7, 4, 1, 2, 3, 4, 0];
        let mut out = [0u8; 40];
        let n = options_for_fragments(&opts, &mut out);
        assert_eq!(n, 8);
        assert_eq!(&out[..7], &[131, 7, 4, 1, 2, 3, 4]);
    }
}
