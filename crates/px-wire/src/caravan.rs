//! PX-caravans on the wire (HotNets '25 paper, §4.1 and Fig. 3; the full
//! format is in `docs/caravan.md`).
//!
//! A caravan is an ordinary UDP datagram of one flow whose IP header carries
//! a reserved DSCP and whose payload is a sequence of *records*, each a
//! complete inner UDP datagram:
//!
//! ```text
//! outer IP (DSCP = caravan codepoint) | outer UDP (length = all) |
//!     inner UDP hdr | payload | inner UDP hdr | payload | ...
//! ```
//!
//! [`Caravan::parse`] validates the whole payload before anything is read:
//! a caravan is taken whole or refused whole, with a [`CaravanError`]
//! naming what is wrong. After a successful parse no accessor and no
//! iteration can panic, whatever the bytes. A [`Record`] borrows the
//! received buffer; nothing is copied or allocated. Building caravans is
//! the end-host library's (`px-caravan`) and the gateway's job.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::checksum::{self, Sum};
use crate::udp::{self, HEADER_LEN};

/// The DSCP marking caravans by default: `001011`, from pool 2 of RFC 2474
/// §6 (`xxxx11`), which is reserved for experimental and local use and so
/// never collides with a standard codepoint arriving from outside.
pub const DEFAULT_DSCP: u8 = 0b00_1011;

/// Length of each record's inner UDP header.
pub const RECORD_HEADER_LEN: usize = HEADER_LEN;

/// Largest caravan payload (outer UDP length less its header).
pub const MAX_PAYLOAD: usize = u16::MAX as usize - HEADER_LEN;

/// The IPv4 TOS / IPv6 traffic-class byte of a caravan: the codepoint in the
/// DSCP bits, the ECN bits as given (RFC 2474 §3, RFC 3168 §5).
pub const fn tos(dscp: u8, ecn: u8) -> u8 {
    (dscp << 2) | (ecn & 0b11)
}

/// Whether a received TOS / traffic-class byte marks a caravan.
pub const fn is_caravan_tos(tos: u8, dscp: u8) -> bool {
    tos >> 2 == dscp
}

/// Why a received caravan was refused. One variant per way the records can
/// fail to tile the payload; [`CaravanError::reason`] gives the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CaravanError {
    /// The payload holds no record at all.
    #[error("caravan has no records")]
    Empty,
    /// Fewer than 8 bytes remain where a record header should start.
    #[error("record at byte {offset}: {remaining} bytes left, a record header needs 8")]
    TruncatedHeader { offset: usize, remaining: usize },
    /// A record's UDP length field is below the 8-byte header.
    #[error("record at byte {offset}: length {len} is below 8")]
    BadLength { offset: usize, len: usize },
    /// A record's UDP length runs past the end of the caravan.
    #[error("record at byte {offset}: length {len} runs past the {remaining} bytes left")]
    Overrun { offset: usize, len: usize, remaining: usize },
    /// A record's ports are not the outer datagram's (a caravan carries
    /// one flow).
    #[error("record at byte {offset}: ports {src}->{dst} differ from the caravan's")]
    PortMismatch { offset: usize, src: u16, dst: u16 },
}

/// Why a caravan was malformed, without the details: what counters count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// No records.
    Empty,
    /// A record header cut short.
    Truncated,
    /// A record length below 8.
    BadLength,
    /// A record length past the end.
    Overrun,
    /// A record of another flow.
    PortMismatch,
    /// The outer UDP checksum does not verify (checked by whoever holds the
    /// pseudo-header: the gateway, or a kernel that verified it).
    Checksum,
}

impl Malformed {
    pub const ALL: [Malformed; 6] = [
        Malformed::Empty,
        Malformed::Truncated,
        Malformed::BadLength,
        Malformed::Overrun,
        Malformed::PortMismatch,
        Malformed::Checksum,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Malformed::Empty => "empty",
            Malformed::Truncated => "truncated",
            Malformed::BadLength => "bad_length",
            Malformed::Overrun => "overrun",
            Malformed::PortMismatch => "port_mismatch",
            Malformed::Checksum => "checksum",
        }
    }
}

impl CaravanError {
    pub fn reason(&self) -> Malformed {
        match self {
            CaravanError::Empty => Malformed::Empty,
            CaravanError::TruncatedHeader { .. } => Malformed::Truncated,
            CaravanError::BadLength { .. } => Malformed::BadLength,
            CaravanError::Overrun { .. } => Malformed::Overrun,
            CaravanError::PortMismatch { .. } => Malformed::PortMismatch,
        }
    }
}

/// One datagram of a caravan: its inner UDP header and payload, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    bytes: &'a [u8],
}

impl<'a> Record<'a> {
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.bytes[0], self.bytes[1]])
    }

    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.bytes[2], self.bytes[3]])
    }

    /// The inner UDP checksum as the original sender computed it (zero:
    /// none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.bytes[6], self.bytes[7]])
    }

    /// The application's datagram.
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[RECORD_HEADER_LEN..]
    }

    /// The whole inner UDP datagram (header and payload): exactly the bytes
    /// the original UDP header and payload had on the wire.
    pub fn datagram(&self) -> &'a [u8] {
        self.bytes
    }

    /// Verifies the inner checksum against the flow's pseudo-header; the
    /// inner length is the record's own (RFC 768). A zero checksum is
    /// accepted only when `zero_ok` (IPv4; RFC 8200 §8.1 forbids it on IPv6).
    pub fn verify_checksum(&self, pseudo: &Pseudo, zero_ok: bool) -> bool {
        udp::UdpDatagram::new_unchecked(self.bytes).verify_checksum(pseudo.sum(self.bytes.len()), zero_ok)
    }
}

/// The addresses of the flow, for inner checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pseudo {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

impl Pseudo {
    /// Pseudo-header sum for a UDP datagram of `len` bytes.
    pub fn sum(&self, len: usize) -> Sum {
        match *self {
            Pseudo::V4 { src, dst } => checksum::pseudo_v4(src, dst, 17, len as u16),
            Pseudo::V6 { src, dst } => checksum::pseudo_v6(src, dst, 17, len as u32),
        }
    }
}

/// A validated caravan payload (what a UDP socket returns for a caravan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caravan<'a> {
    payload: &'a [u8],
    count: usize,
}

impl<'a> Caravan<'a> {
    /// Checks that records tile `payload` exactly, and, if `ports` is given
    /// (the outer source and destination port), that every record belongs
    /// to that flow.
    pub fn parse(payload: &'a [u8], ports: Option<(u16, u16)>) -> Result<Caravan<'a>, CaravanError> {
        let mut off = 0;
        let mut count = 0;
        while off < payload.len() {
            let rest = &payload[off..];
            if rest.len() < RECORD_HEADER_LEN {
                return Err(CaravanError::TruncatedHeader { offset: off, remaining: rest.len() });
            }
            let len = u16::from_be_bytes([rest[4], rest[5]]) as usize;
            if len < RECORD_HEADER_LEN {
                return Err(CaravanError::BadLength { offset: off, len });
            }
            if len > rest.len() {
                return Err(CaravanError::Overrun { offset: off, len, remaining: rest.len() });
            }
            if let Some((s, d)) = ports {
                let (rs, rd) = (u16::from_be_bytes([rest[0], rest[1]]), u16::from_be_bytes([rest[2], rest[3]]));
                if (rs, rd) != (s, d) {
                    return Err(CaravanError::PortMismatch { offset: off, src: rs, dst: rd });
                }
            }
            off += len;
            count += 1;
        }
        if count == 0 {
            return Err(CaravanError::Empty);
        }
        Ok(Caravan { payload, count })
    }

    /// Number of datagrams carried.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Always false: a parsed caravan has at least one record.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The datagrams, in the order they were packed.
    pub fn iter(&self) -> Iter<'a> {
        Iter { rest: self.payload }
    }

    /// The bytes parsed.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.payload
    }
}

impl<'a> IntoIterator for Caravan<'a> {
    type Item = Record<'a>;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Iterator over the records of a [`Caravan`].
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Iter<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        // Parse checked every length, so these reads stay in bounds; the
        // checks are repeated (cheaply) so that not even a logic error here
        // can index out of range.
        if self.rest.len() < RECORD_HEADER_LEN {
            return None;
        }
        let len = u16::from_be_bytes([self.rest[4], self.rest[5]]) as usize;
        if len < RECORD_HEADER_LEN || len > self.rest.len() {
            return None;
        }
        let (bytes, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(Record { bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two records of the flow 4000 -> 443, "ab" and "xyz", no checksums
    /// (the layout `docs/caravan.md` draws).
    const TWO: [u8; 21] = [
        0x0f, 0xa0, 0x01, 0xbb, 0x00, 0x0a, 0, 0, b'a', b'b', //
        0x0f, 0xa0, 0x01, 0xbb, 0x00, 0x0b, 0, 0, b'x', b'y', b'z',
    ];

    #[test]
    fn records_tile_the_payload() {
        let c = Caravan::parse(&TWO, Some((4000, 443))).unwrap();
        assert_eq!(c.len(), 2);
        assert!(!c.is_empty());
        let r: Vec<Record> = c.iter().collect();
        assert_eq!((r[0].src_port(), r[0].dst_port(), r[0].checksum()), (4000, 443, 0));
        assert_eq!(r[0].payload(), b"ab");
        assert_eq!(r[1].datagram(), &TWO[10..]);
        assert_eq!(c.as_bytes(), &TWO[..]);
    }

    #[test]
    fn each_refusal_names_its_place() {
        assert_eq!(Caravan::parse(&[], None), Err(CaravanError::Empty));
        assert_eq!(Caravan::parse(&TWO[..13], None), Err(CaravanError::TruncatedHeader { offset: 10, remaining: 3 }));
        assert_eq!(Caravan::parse(&TWO[..20], None), Err(CaravanError::Overrun { offset: 10, len: 11, remaining: 10 }));
        let mut bad = TWO;
        bad[5] = 7;
        assert_eq!(Caravan::parse(&bad, None), Err(CaravanError::BadLength { offset: 0, len: 7 }));
        assert_eq!(
            Caravan::parse(&TWO, Some((4000, 80))),
            Err(CaravanError::PortMismatch { offset: 0, src: 4000, dst: 443 })
        );
        assert_eq!(CaravanError::Overrun { offset: 0, len: 9, remaining: 8 }.reason(), Malformed::Overrun);
        assert_eq!(Malformed::ALL.map(|m| m as usize), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn record_checksum_verifies_against_the_flow() {
        let p = Pseudo::V4 { src: [198, 51, 100, 1].into(), dst: [203, 0, 113, 2].into() };
        let mut rec = [0x0f, 0xa0, 0x01, 0xbb, 0x00, 0x0a, 0, 0, b'a', b'b'];
        udp::UdpDatagram::new_unchecked(&mut rec[..]).fill_checksum(p.sum(10));
        let c = Caravan::parse(&rec, None).unwrap();
        let r = c.iter().next().unwrap();
        assert!(r.verify_checksum(&p, false));
        rec[9] ^= 1;
        let c = Caravan::parse(&rec, None).unwrap();
        assert!(!c.iter().next().unwrap().verify_checksum(&p, false));
    }
}
