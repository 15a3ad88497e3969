//! UDP headers (RFC 768).
//!
//! The checked constructor guarantees `8 <= length <= buffer length`.

use crate::checksum::{self, Sum};
use crate::error::{Layer, ParseError, need};

pub const HEADER_LEN: usize = 8;

/// Where each header field lies, as byte ranges from the header's start
/// (RFC 768). Public so that code rewriting headers in place names the
/// field it writes instead of an offset.
pub mod field {
    /// A field's bytes within the header.
    pub type Field = core::ops::Range<usize>;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LEN: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// A checked view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpDatagram<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpDatagram<T> {
    /// Wraps a buffer without checks, for rewriting headers the caller has
    /// already validated (e.g. a copy of a checked packet's headers).
    /// Accessors may panic if the buffer is not a valid packet.
    pub fn new_unchecked(buffer: T) -> Self {
        UdpDatagram { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        need(Layer::Udp, b.len(), HEADER_LEN)?;
        let len = u16::from_be_bytes([b[4], b[5]]) as usize;
        if len < HEADER_LEN {
            return Err(ParseError::Malformed { layer: Layer::Udp, field: "length", value: len as u32 });
        }
        need(Layer::Udp, b.len(), len)?;
        Ok(UdpDatagram { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.b()[0], self.b()[1]])
    }

    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }

    pub fn len(&self) -> usize {
        u16::from_be_bytes([self.b()[4], self.b()[5]]) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }

    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.b()[6], self.b()[7]])
    }

    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.len()]
    }

    /// Verifies against the pseudo-header sum; a zero checksum means "none"
    /// over IPv4 (RFC 768) and is accepted when `zero_ok`.
    pub fn verify_checksum(&self, pseudo: Sum, zero_ok: bool) -> bool {
        if self.checksum() == 0 {
            return zero_ok;
        }
        checksum::fold(pseudo.plus(Sum::of(&self.b()[..self.len()]))) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpDatagram<T> {
    /// Recomputes the checksum; a result of zero is sent as 0xffff.
    pub fn fill_checksum(&mut self, pseudo: Sum) {
        let len = self.len();
        let b = self.buffer.as_mut();
        b[6..8].copy_from_slice(&[0, 0]);
        let mut c = pseudo.plus(Sum::of(&b[..len])).checksum();
        if c == 0 {
            c = 0xffff;
        }
        b[6..8].copy_from_slice(&c.to_be_bytes());
    }
}

/// Writes a UDP header (checksum zero) into `buf[..8]`.
pub fn emit_header(buf: &mut [u8], src_port: u16, dst_port: u16, len: u16) {
    buf[0..2].copy_from_slice(&src_port.to_be_bytes());
    buf[2..4].copy_from_slice(&dst_port.to_be_bytes());
    buf[4..6].copy_from_slice(&len.to_be_bytes());
    buf[6..8].copy_from_slice(&[0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    #[test]
    fn checksum_matches_etherparse() {
        let mut d = vec![0u8; 13];
        emit_header(&mut d, 1234, 9999, 13);
        d[8..].copy_from_slice(b"FPMTx");
        let (s, t) = (Ipv4Addr::new(198, 51, 100, 1), Ipv4Addr::new(203, 0, 113, 2));
        let mut u = UdpDatagram::new_checked(&mut d[..]).unwrap();
        u.fill_checksum(checksum::pseudo_v4(s, t, 17, 13));
        assert!(u.verify_checksum(checksum::pseudo_v4(s, t, 17, 13), false));
        let h = etherparse::UdpHeaderSlice::from_slice(&d).unwrap().to_header();
        assert_eq!(
            h.calc_checksum_ipv4_raw(s.octets(), t.octets(), &d[8..]).unwrap(),
            u16::from_be_bytes([d[6], d[7]])
        );
    }

    #[test]
    fn length_checks() {
        let mut d = [0u8; 8];
        d[5] = 7;
        assert!(UdpDatagram::new_checked(&d[..]).is_err());
        d[5] = 9;
        assert!(UdpDatagram::new_checked(&d[..]).is_err());
        d[5] = 8;
        assert!(UdpDatagram::new_checked(&d[..]).unwrap().is_empty());
    }
}
