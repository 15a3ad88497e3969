//! ICMP echo request and reply (RFC 792; RFC 4443 §4.1-4.2), as a
//! path-MTU probe: the gateway asks a destination, with DF set, to send
//! back a packet of exactly the size it wants confirmed, carrying a mark
//! that only the asker can make (RFC 8899 §4.1: a probe is confirmed only
//! by its acknowledgement, and `px-gateway`'s `confirm.rs` keys the mark).
//!
//! Guarantees: [`emit_request`] writes only inside `out` and refuses sizes
//! that cannot hold the header and two marks; [`parse`] never panics nor
//! reads out of bounds whatever the bytes, and reads a message only if its
//! checksum is right (property-tested with the emitter).

use core::net::IpAddr;

use crate::checksum::{self, Sum};
use crate::{icmp, ipv4, ipv6};

pub const V4_REQUEST: u8 = 8;
pub const V4_REPLY: u8 = 0;
pub const V6_REQUEST: u8 = 128;
pub const V6_REPLY: u8 = 129;
/// Bytes of the mark a probe carries at the start and at the end of its
/// data.
pub const MARK_LEN: usize = 16;

/// The IP header length of an echo of the address family of `a` (no
/// options, no extension headers).
pub fn ip_header_len(a: IpAddr) -> usize {
    if a.is_ipv4() { ipv4::MIN_HEADER_LEN } else { ipv6::HEADER_LEN }
}

/// The smallest probe: headers and the mark at each end.
pub fn min_probe_len(a: IpAddr) -> usize {
    ip_header_len(a) + icmp::HEADER_LEN + 2 * MARK_LEN
}

/// Why a probe could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// Source and destination of different families.
    #[error("source and destination are of different address families")]
    Families,
    /// The size cannot hold the headers and both marks, or `out` cannot hold it.
    #[error("probe of {size} bytes: needs {min}..={room}")]
    Size {
        /// Asked.
        size: usize,
        /// Smallest possible.
        min: usize,
        /// What the buffer holds.
        room: usize,
    },
}

/// Writes into `out` an IP packet of total length `size` from `src` to
/// `dst`: an echo request with identifier `id`, sequence `seq`, and data
/// of zeros with `mark` at its start and at its end. IPv4: DF set, TTL
/// 64, identification `ip_ident`; IPv6: hop limit 64. Returns `size`.
#[allow(clippy::too_many_arguments)]
pub fn emit_request(
    out: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    ip_ident: u16,
    id: u16,
    seq: u16,
    size: usize,
    mark: &[u8; MARK_LEN],
) -> Result<usize, EmitError> {
    let min = min_probe_len(dst);
    let max = if dst.is_ipv4() { usize::from(u16::MAX) } else { ipv6::HEADER_LEN + usize::from(u16::MAX) };
    if size < min || size > out.len() || size > max {
        return Err(EmitError::Size { size, min, room: out.len().min(max) });
    }
    let hl = ip_header_len(dst);
    let m = &mut out[hl..size];
    m[0] = if dst.is_ipv4() { V4_REQUEST } else { V6_REQUEST };
    m[1] = 0;
    m[2..4].fill(0);
    m[4..6].copy_from_slice(&id.to_be_bytes());
    m[6..8].copy_from_slice(&seq.to_be_bytes());
    let data = &mut m[icmp::HEADER_LEN..];
    let n = data.len();
    data.fill(0);
    data[..MARK_LEN].copy_from_slice(mark);
    data[n - MARK_LEN..].copy_from_slice(mark);
    let l4 = size - hl;
    let sum = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            ipv4::emit_header(out, 0, size as u16, ip_ident, true, 64, 1, s, d);
            Sum::of(&out[hl..size])
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            ipv6::emit_header(out, 0, l4 as u16, ipv6::next_header::ICMPV6, 64, s, d);
            checksum::pseudo_v6(s, d, ipv6::next_header::ICMPV6, l4 as u32).plus(Sum::of(&out[hl..size]))
        }
        _ => return Err(EmitError::Families),
    };
    let c = sum.checksum();
    out[hl + 2..hl + 4].copy_from_slice(&c.to_be_bytes());
    Ok(size)
}

/// An echo request or reply, as read from its ICMP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo<'a> {
    /// A reply (`false`: a request).
    pub reply: bool,
    pub id: u16,
    pub seq: u16,
    /// Everything after the 8-byte header.
    pub data: &'a [u8],
}

impl Echo<'_> {
    /// The mark at the start of the data and the one at its end, when the
    /// data holds two.
    pub fn marks(&self) -> Option<(&[u8], &[u8])> {
        let n = self.data.len();
        (n >= 2 * MARK_LEN).then(|| (&self.data[..MARK_LEN], &self.data[n - MARK_LEN..]))
    }
}

/// Reads an ICMP message (`icmp`, from its type byte to the end of the IP
/// packet) sent from `src` to `dst` as an echo request or reply; `None`
/// for anything else, a short message or a wrong checksum.
pub fn parse(icmp: &[u8], src: IpAddr, dst: IpAddr) -> Option<Echo<'_>> {
    if icmp.len() < icmp::HEADER_LEN {
        return None;
    }
    let (reply, sum) = match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => {
            let reply = match icmp[0] {
                V4_REPLY => true,
                V4_REQUEST => false,
                _ => return None,
            };
            (reply, Sum::of(icmp))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let reply = match icmp[0] {
                V6_REPLY => true,
                V6_REQUEST => false,
                _ => return None,
            };
            let len = u32::try_from(icmp.len()).ok()?;
            (reply, checksum::pseudo_v6(s, d, ipv6::next_header::ICMPV6, len).plus(Sum::of(icmp)))
        }
        _ => return None,
    };
    if icmp[1] != 0 || sum.checksum() != 0 {
        return None;
    }
    Some(Echo {
        reply,
        id: u16::from_be_bytes([icmp[4], icmp[5]]),
        seq: u16::from_be_bytes([icmp[6], icmp[7]]),
        data: &icmp[icmp::HEADER_LEN..],
    })
}

/// The identifier and sequence number of an echo request quoted by an
/// ICMP error (`quoted`: the offending packet from its IP header, as much
/// as was quoted); `None` if it is not an echo request or too little of it
/// is there.
pub fn quoted_request(quoted: &[u8]) -> Option<(u16, u16)> {
    let (at, ty) = match quoted.first()? >> 4 {
        4 => {
            let ihl = usize::from(quoted[0] & 0x0f) * 4;
            // A first fragment (or none) of ICMP.
            let first = quoted.get(6..8).is_some_and(|f| u16::from_be_bytes([f[0], f[1]]) & 0x1fff == 0);
            if ihl < ipv4::MIN_HEADER_LEN || *quoted.get(9)? != 1 || !first {
                return None;
            }
            (ihl, V4_REQUEST)
        }
        6 if *quoted.get(6)? == ipv6::next_header::ICMPV6 => (ipv6::HEADER_LEN, V6_REQUEST),
        _ => return None,
    };
    let h = quoted.get(at..at + icmp::HEADER_LEN)?;
    (h[0] == ty && h[1] == 0).then(|| (u16::from_be_bytes([h[4], h[5]]), u16::from_be_bytes([h[6], h[7]])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The reply a host makes of a request: addresses swapped, type
    /// changed, checksum adjusted, data echoed.
    fn reply_of(req: &[u8]) -> Vec<u8> {
        let mut r = req.to_vec();
        let (hl, rtype) = if r[0] >> 4 == 4 { (20, V4_REPLY) } else { (40, V6_REPLY) };
        if hl == 20 {
            let (s, d) = (r[12..16].to_vec(), r[16..20].to_vec());
            r[12..16].copy_from_slice(&d);
            r[16..20].copy_from_slice(&s);
        } else {
            let (s, d) = (r[8..24].to_vec(), r[24..40].to_vec());
            r[8..24].copy_from_slice(&d);
            r[24..40].copy_from_slice(&s);
        }
        r[hl] = rtype;
        r[hl + 2..hl + 4].fill(0);
        let sum = if hl == 20 {
            Sum::of(&r[hl..])
        } else {
            let s: std::net::Ipv6Addr = <[u8; 16]>::try_from(&r[8..24]).unwrap().into();
            let d: std::net::Ipv6Addr = <[u8; 16]>::try_from(&r[24..40]).unwrap().into();
            checksum::pseudo_v6(s, d, 58, (r.len() - hl) as u32).plus(Sum::of(&r[hl..]))
        };
        let c = sum.checksum();
        r[hl + 2..hl + 4].copy_from_slice(&c.to_be_bytes());
        r
    }

    #[test]
    fn a_request_is_df_set_of_the_size_asked_with_its_marks_at_both_ends() {
        for (s, d) in [(v4("198.51.100.1"), v4("203.0.113.9")), (v4("2001:db8::1"), v4("2001:db8:1::9"))] {
            let mut out = vec![0u8; 9000];
            let mark = [0xa5; MARK_LEN];
            assert_eq!(emit_request(&mut out, s, d, 7, 0x1234, 42, 9000, &mark), Ok(9000));
            let hl = ip_header_len(d);
            if d.is_ipv4() {
                let ip = ipv4::Ipv4Packet::new_checked(&out[..]).unwrap();
                assert!(ip.dont_frag() && ip.verify_checksum());
                assert_eq!(ip.total_len(), 9000usize);
            } else {
                assert_eq!(u16::from_be_bytes([out[4], out[5]]), 9000 - 40);
            }
            let e = parse(&out[hl..], s, d).unwrap();
            assert_eq!((e.reply, e.id, e.seq, e.data.len()), (false, 0x1234, 42, 9000 - hl - 8));
            assert_eq!(e.marks(), Some((&mark[..], &mark[..])));
            let r = reply_of(&out);
            let e = parse(&r[hl..], d, s).unwrap();
            assert!(e.reply);
            // A wrong checksum, another family pair, a short message: nothing.
            let mut bad = r.clone();
            bad[hl + 100] ^= 1;
            assert_eq!(parse(&bad[hl..], d, s), None);
            assert_eq!(parse(&r[hl..hl + 7], d, s), None);
            // The quote of the request in an error names it.
            assert_eq!(quoted_request(&out[..hl + 8]), Some((0x1234, 42)));
            assert_eq!(quoted_request(&r[..hl + 8]), None, "a reply is no request");
        }
        let mut out = [0u8; 60];
        assert!(matches!(
            emit_request(&mut out, v4("198.51.100.1"), v4("203.0.113.9"), 0, 0, 0, 59, &[0; 16]),
            Err(EmitError::Size { .. })
        ));
        assert!(emit_request(&mut out, v4("198.51.100.1"), v4("203.0.113.9"), 0, 0, 0, 61, &[0; 16]).is_err());
        assert_eq!(
            emit_request(&mut out, v4("198.51.100.1"), v4("2001:db8::1"), 0, 0, 0, 60, &[0; 16]),
            Err(EmitError::Size { size: 60, min: 80, room: 60 })
        );
        let mut out = [0u8; 100];
        assert_eq!(
            emit_request(&mut out, v4("198.51.100.1"), v4("2001:db8::1"), 0, 0, 0, 100, &[0; 16]),
            Err(EmitError::Families)
        );
    }

    proptest! {
        #[test]
        fn parsing_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), v6 in any::<bool>()) {
            let (s, d) = if v6 { (v4("2001:db8::1"), v4("2001:db8::2")) } else { (v4("198.51.100.1"), v4("198.51.100.2")) };
            if let Some(e) = parse(&bytes, s, d) {
                prop_assert_eq!(e.data.len() + 8, bytes.len());
                let _ = e.marks();
            }
            let _ = quoted_request(&bytes);
        }

        #[test]
        fn every_emitted_request_parses_back(size in 60usize..2000, id in any::<u16>(), seq in any::<u16>(), m in any::<[u8; 16]>(), v6 in any::<bool>()) {
            let (s, d) = if v6 { (v4("2001:db8::1"), v4("2001:db8::2")) } else { (v4("198.51.100.1"), v4("198.51.100.2")) };
            let mut out = vec![0u8; 2000];
            match emit_request(&mut out, s, d, 1, id, seq, size, &m) {
                Ok(n) => {
                    let hl = ip_header_len(d);
                    let e = parse(&out[hl..n], s, d).unwrap();
                    prop_assert_eq!((e.id, e.seq), (id, seq));
                    prop_assert_eq!(e.marks(), Some((&m[..], &m[..])));
                }
                Err(_) => prop_assert!(size < min_probe_len(d)),
            }
        }
    }
}
