//! `px-caravan`: the end-host side of PacketExpress PX-caravans.
//!
//! Inside a b-network the gateway carries many UDP datagrams of one flow in
//! one large packet, a *PX-caravan* (HotNets '25 paper, §4.1 and Fig. 3).
//! The caravan is an ordinary UDP datagram of the flow itself (same
//! addresses, same ports) whose IP header carries a reserved DSCP and whose
//! payload is a sequence of *records*, each a complete inner UDP datagram:
//!
//! ```text
//! outer IP (DSCP = caravan codepoint) | outer UDP (length = all) |
//!     inner UDP hdr | payload | inner UDP hdr | payload | ...
//! ```
//!
//! A UDP socket therefore receives a caravan as one datagram, the way it
//! receives a `UDP_GRO` batch; this crate turns that datagram back into the
//! datagrams it carries ([`Caravan`]) and builds caravans to send
//! ([`Builder`]). The full format, with byte diagrams and the meaning of
//! every header field, is in `docs/caravan.md`.
//!
//! Guarantees:
//! - [`Caravan::parse`] validates the whole caravan before anything is
//!   delivered: a caravan is taken whole or refused whole, with a
//!   [`CaravanError`] naming what is wrong. After a successful parse no
//!   accessor and no iteration can panic, whatever the bytes.
//! - Nothing is copied when reading: a [`Record`] borrows the received
//!   buffer. Nothing allocates.
//! - The same code serves C and C++ through the functions in [`ffi`] and the
//!   header `include/px_caravan.h`.
//!
//! ```
//! use px_caravan::{Builder, Counts, InnerChecksum, Pseudo};
//!
//! // Sender: pack datagrams of the flow 40000 -> 4433 up to a 9000-byte IPv4 packet.
//! let pseudo = Pseudo::V4 { src: [198, 51, 100, 1].into(), dst: [203, 0, 113, 2].into() };
//! let mut b = Builder::new(vec![0u8; 9000], 40000, 4433).with_mtu(9000, 20);
//! for d in [&b"first"[..], b"second", b"third"] {
//!     b.push(d, InnerChecksum::Compute(pseudo)).unwrap();
//! }
//! // ... send b.as_bytes() on a UDP socket with IP_TOS = px_caravan::tos(DEFAULT_DSCP, 0).
//!
//! // Receiver: a datagram whose TOS carries the codepoint is opened whole.
//! let mut counts = Counts::default();
//! let caravan = counts.open(b.as_bytes(), Some((40000, 4433))).unwrap();
//! let got: Vec<&[u8]> = caravan.iter().map(|r| r.payload()).collect();
//! assert_eq!(got, [&b"first"[..], b"second", b"third"]);
//! assert!(caravan.iter().all(|r| r.verify_checksum(&pseudo, false)));
//! ```

use px_wire::udp::{self, HEADER_LEN};

pub mod ffi;

/// The caravan wire format (the view over received bytes, its errors and
/// constants) is `px_wire::caravan`'s, shared with the gateway; re-exported
/// here so that this crate's API (and the C ABI built on it) is unchanged.
pub use px_wire::caravan::{
    Caravan, CaravanError, DEFAULT_DSCP, Iter, MAX_PAYLOAD, Malformed, Pseudo, RECORD_HEADER_LEN, Record,
    is_caravan_tos, tos,
};

/// What an end host counts about the caravans it receives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Caravans parsed and delivered.
    pub opened: u64,
    /// Datagrams delivered from them.
    pub datagrams: u64,
    /// Caravans refused, by [`Malformed`] reason (indexed `as usize`).
    pub malformed: [u64; 6],
}

impl Counts {
    /// Parses a received caravan and counts the outcome.
    pub fn open<'a>(&mut self, payload: &'a [u8], ports: Option<(u16, u16)>) -> Result<Caravan<'a>, CaravanError> {
        match Caravan::parse(payload, ports) {
            Ok(c) => {
                self.opened += 1;
                self.datagrams += c.len() as u64;
                Ok(c)
            }
            Err(e) => {
                self.malformed[e.reason() as usize] += 1;
                Err(e)
            }
        }
    }

    pub fn total_malformed(&self) -> u64 {
        self.malformed.iter().sum()
    }
}

/// How a record's inner checksum is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InnerChecksum {
    /// Zero: "no checksum", allowed only over IPv4 (RFC 768; the outer
    /// checksum still covers the bytes inside the b-network, but the
    /// datagram leaves the gateway unprotected).
    None,
    /// Computed with the flow's pseudo-header, as the sender's stack would.
    Compute(Pseudo),
}

/// Why a datagram could not be added to a caravan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The record does not fit in what is left of the buffer or of the
    /// size limit: send the caravan and start the next one.
    #[error("record of {need} bytes does not fit in the {room} bytes left")]
    NoRoom { need: usize, room: usize },
}

/// Writes one record (inner header, payload, checksum) at `buf[at..]` and
/// returns the offset after it. Shared by [`Builder`] and the C ABI.
pub fn write_record(
    buf: &mut [u8],
    at: usize,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
    csum: InnerChecksum,
) -> Result<usize, BuildError> {
    let need = RECORD_HEADER_LEN + payload.len();
    let room = buf.len().saturating_sub(at).min(MAX_PAYLOAD.saturating_sub(at));
    if need > room {
        return Err(BuildError::NoRoom { need, room });
    }
    let rec = &mut buf[at..at + need];
    udp::emit_header(rec, src_port, dst_port, need as u16);
    rec[RECORD_HEADER_LEN..].copy_from_slice(payload);
    if let InnerChecksum::Compute(p) = csum {
        udp::UdpDatagram::new_unchecked(&mut rec[..]).fill_checksum(p.sum(need));
    }
    Ok(at + need)
}

/// Builds a caravan payload (the bytes to hand to a UDP socket sending with
/// the caravan TOS) in a caller's buffer.
#[derive(Debug)]
pub struct Builder<B: AsMut<[u8]> + AsRef<[u8]>> {
    buf: B,
    len: usize,
    limit: usize,
    count: usize,
    src_port: u16,
    dst_port: u16,
}

impl<B: AsMut<[u8]> + AsRef<[u8]>> Builder<B> {
    /// A builder for the flow `src_port -> dst_port` writing into `buf`.
    /// The caravan never grows past `buf`'s length or [`MAX_PAYLOAD`].
    pub fn new(buf: B, src_port: u16, dst_port: u16) -> Self {
        let limit = buf.as_ref().len().min(MAX_PAYLOAD);
        Builder { buf, len: 0, limit, count: 0, src_port, dst_port }
    }

    /// Limits the payload so that the whole IP packet fits `mtu` with an IP
    /// header of `ip_header_len` bytes (20 for IPv4, 40 for IPv6).
    pub fn with_mtu(mut self, mtu: usize, ip_header_len: usize) -> Self {
        self.limit = self.limit.min(mtu.saturating_sub(ip_header_len + HEADER_LEN));
        self
    }

    /// Appends one datagram.
    pub fn push(&mut self, payload: &[u8], csum: InnerChecksum) -> Result<(), BuildError> {
        let limit = self.limit;
        let b = &mut self.buf.as_mut()[..limit];
        self.len = write_record(b, self.len, self.src_port, self.dst_port, payload, csum)?;
        self.count += 1;
        Ok(())
    }

    /// Whether a datagram of `payload_len` bytes still fits.
    pub fn fits(&self, payload_len: usize) -> bool {
        self.len + RECORD_HEADER_LEN + payload_len <= self.limit
    }

    /// Datagrams added so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes of caravan payload so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The caravan payload built so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf.as_ref()[..self.len]
    }

    /// Starts over (after the caravan was sent), keeping the buffer.
    pub fn clear(&mut self) {
        self.len = 0;
        self.count = 0;
    }

    pub fn into_inner(self) -> B {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn build(payloads: &[&[u8]]) -> Vec<u8> {
        let mut b = Builder::new(vec![0u8; 9000], 4000, 443);
        for p in payloads {
            b.push(p, InnerChecksum::None).unwrap();
        }
        let n = b.len();
        let mut v = b.into_inner();
        v.truncate(n);
        v
    }

    #[test]
    fn layout_is_the_documented_one() {
        let c = build(&[b"ab", b"xyz"]);
        assert_eq!(
            c,
            [
                0x0f, 0xa0, 0x01, 0xbb, 0x00, 0x0a, 0, 0, b'a', b'b', //
                0x0f, 0xa0, 0x01, 0xbb, 0x00, 0x0b, 0, 0, b'x', b'y', b'z'
            ]
        );
        let p = Caravan::parse(&c, Some((4000, 443))).unwrap();
        assert_eq!(p.len(), 2);
        let got: Vec<&[u8]> = p.iter().map(|r| r.payload()).collect();
        assert_eq!(got, [&b"ab"[..], &b"xyz"[..]]);
    }

    #[test]
    fn each_error_is_reported_where_it_is() {
        assert_eq!(Caravan::parse(&[], None), Err(CaravanError::Empty));
        let mut c = build(&[b"ab", b"xyz"]);
        assert_eq!(Caravan::parse(&c[..13], None), Err(CaravanError::TruncatedHeader { offset: 10, remaining: 3 }));
        assert_eq!(Caravan::parse(&c[..20], None), Err(CaravanError::Overrun { offset: 10, len: 11, remaining: 10 }));
        assert_eq!(
            Caravan::parse(&c, Some((4000, 444))),
            Err(CaravanError::PortMismatch { offset: 0, src: 4000, dst: 443 })
        );
        c[15] = 7;
        assert_eq!(Caravan::parse(&c, None), Err(CaravanError::BadLength { offset: 10, len: 7 }));
        assert_eq!(CaravanError::BadLength { offset: 0, len: 0 }.reason(), Malformed::BadLength);
    }

    #[test]
    fn inner_checksum_is_the_plain_datagrams() {
        let (s, d) = (Ipv4Addr::new(198, 51, 100, 1), Ipv4Addr::new(203, 0, 113, 2));
        let p = Pseudo::V4 { src: s, dst: d };
        let mut b = Builder::new([0u8; 100], 4000, 443);
        b.push(b"hello", InnerChecksum::Compute(p)).unwrap();
        let c = Caravan::parse(b.as_bytes(), None).unwrap();
        let r = c.iter().next().unwrap();
        assert!(r.verify_checksum(&p, false));
        // Oracle: the checksum etherparse gives the same datagram sent plainly.
        let h = etherparse::UdpHeader::with_ipv4_checksum(
            4000,
            443,
            &etherparse::Ipv4Header::new(13, 64, etherparse::IpNumber::UDP, s.octets(), d.octets()).unwrap(),
            b"hello",
        )
        .unwrap();
        assert_eq!(h.checksum, r.checksum());
    }

    #[test]
    fn builder_stops_at_mtu() {
        let mut b = Builder::new(vec![0u8; 65_536], 1, 2).with_mtu(9000, 20);
        let mut n = 0;
        while b.push(&[0u8; 1200], InnerChecksum::None).is_ok() {
            n += 1;
        }
        // 28 + 7 * 1208 = 8484 <= 9000 < 28 + 8 * 1208.
        assert_eq!(n, 7);
        assert!(!b.fits(1200));
        assert_eq!(
            b.push(&[0u8; 1200], InnerChecksum::None),
            Err(BuildError::NoRoom { need: 1208, room: 8972 - 8456 })
        );
    }

    #[test]
    fn counts_count() {
        let mut k = Counts::default();
        let c = build(&[b"a", b"b", b"c"]);
        assert_eq!(k.open(&c, None).unwrap().len(), 3);
        assert!(k.open(&c[..5], None).is_err());
        assert_eq!((k.opened, k.datagrams, k.total_malformed()), (1, 3, 1));
        assert_eq!(k.malformed[Malformed::Truncated as usize], 1);
    }

    #[test]
    fn tos_marks() {
        assert_eq!(tos(DEFAULT_DSCP, 0b10), 0b0010_1110);
        assert!(is_caravan_tos(0b0010_1111, DEFAULT_DSCP));
        assert!(!is_caravan_tos(0, DEFAULT_DSCP));
    }
}
