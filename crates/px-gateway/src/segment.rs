//! A parsed TCP segment inside a frame: the fields the merge and split
//! rules decide on, with offsets that are valid for that frame.

use px_wire::checksum::{self, Sum};
use px_wire::{ipv4, tcp};

use px_wire::ipv6::next_header;
use px_wire::tcp::{TcpOption, TcpSegment, flags};
use px_wire::{FrameInfo, IpVersion};

/// TCP option kinds that sign a segment: TCP-MD5 (RFC 2385) and TCP-AO
/// (RFC 5925).
const TCP_MD5: u8 = 19;
const TCP_AO: u8 = 29;

/// A TCP segment as the engine sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seg<'a> {
    /// Borrowed, not copied: the parse was just written, and copying it
    /// at once would read it back through the store buffer.
    pub info: &'a FrameInfo,
    /// TCP header length (options included).
    pub th: usize,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub src_port: u16,
    pub dst_port: u16,
    /// Offset of the timestamp option's TSval within the TCP header.
    pub tsval_at: Option<usize>,
    /// Options carry SACK blocks, or could not be parsed.
    pub sack_or_bad_options: bool,
    /// Carries a TCP-MD5 (kind 19) or TCP-AO (kind 29) option: the segment
    /// is signed, and passes untouched.
    pub signed: bool,
}

impl<'a> Seg<'a> {
    /// Parses the TCP header at `info.l4`; `None` if `info` is not TCP.
    #[inline]
    pub fn parse(frame: &[u8], info: &'a FrameInfo) -> Option<Seg<'a>> {
        if info.protocol != next_header::TCP || info.fragment {
            return None;
        }
        let t = TcpSegment::new_checked(&frame[info.l4..info.end]).ok()?;
        let mut tsval_at = None;
        let mut sack_or_bad_options = false;
        let mut signed = false;
        match t.options_bytes() {
            // The layout nearly every bulk segment has (Linux, BSD, Windows):
            // NOP NOP TS, or none at all; skip the general walk.
            [1, 1, 8, 10, _, _, _, _, _, _, _, _] => tsval_at = Some(px_wire::tcp::MIN_HEADER_LEN + 4),
            [] => {}
            _ => {
                for o in t.options() {
                    match o {
                        Ok((at, TcpOption::Timestamps { .. })) => {
                            tsval_at = Some(px_wire::tcp::MIN_HEADER_LEN + at + 2)
                        }
                        Ok((_, TcpOption::Sack(_))) | Err(_) => sack_or_bad_options = true,
                        Ok((_, TcpOption::Unknown { kind: TCP_MD5 | TCP_AO, .. })) => signed = true,
                        Ok(_) => {}
                    }
                }
            }
        }
        Some(Seg {
            info,
            th: t.header_len(),
            seq: t.seq(),
            ack: t.ack(),
            flags: t.flags(),
            window: t.window(),
            src_port: t.src_port(),
            dst_port: t.dst_port(),
            tsval_at,
            sack_or_bad_options,
            signed,
        })
    }

    /// Offset of the TCP payload in the frame.
    pub fn payload_start(&self) -> usize {
        self.info.l4 + self.th
    }

    pub fn payload_len(&self) -> usize {
        self.info.end - self.payload_start()
    }

    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// Sequence space the segment occupies (data, SYN, FIN).
    pub fn seq_len(&self) -> u32 {
        self.payload_len() as u32 + self.has(flags::SYN) as u32 + self.has(flags::FIN) as u32
    }

    /// Pseudo-header sum for a TCP length of `l4_len`: the address words are
    /// summed straight from the frame (native order, fixed up once).
    pub fn pseudo(&self, frame: &[u8], l4_len: usize) -> Sum {
        if self.info.version == IpVersion::V6 && self.info.ip_options {
            // Extension headers: a routing header may name another final
            // destination (RFC 8200 §8.1).
            return self.info.pseudo_header(frame, next_header::TCP, l4_len);
        }
        let at = self.info.l3 + if self.info.version == IpVersion::V4 { 12 } else { 8 };
        let n = if self.info.version == IpVersion::V4 { 8 } else { 32 };
        let addrs = Sum::of(&frame[at..at + n]);
        let rest = match self.info.version {
            IpVersion::V4 => next_header::TCP as u64 + l4_len as u64,
            IpVersion::V6 => next_header::TCP as u64 + (l4_len as u64 >> 16) + (l4_len as u64 & 0xffff),
        };
        addrs.plus(Sum(rest))
    }

    /// Sum of the TCP header with its checksum field included.
    pub fn header_sum(&self, frame: &[u8]) -> Sum {
        Sum::of(&frame[self.info.l4..self.payload_start()])
    }

    /// The payload's sum derived from a complete checksum field without
    /// reading the payload: pseudo + header + payload ≡ 0 (RFC 1071), so
    /// payload ≡ −(pseudo + header). A corrupt segment yields a sum that makes
    /// the merged segment's checksum fail too: corruption is never masked.
    #[inline]
    pub fn payload_sum_from_checksum(&self, frame: &[u8]) -> Sum {
        let l4_len = self.info.end - self.info.l4;
        if self.info.version == IpVersion::V4 && self.info.l4 == self.info.l3 + ipv4::MIN_HEADER_LEN {
            // Without IPv4 options the addresses and the TCP header are
            // adjacent: one pass over both.
            let both = Sum::of(&frame[self.info.l3 + ipv4::field::SRC.start..self.payload_start()]);
            return both.plus(Sum(next_header::TCP as u64 + l4_len as u64)).negate();
        }
        self.payload_sum_from_pseudo(frame, l4_len)
    }

    /// [`Seg::payload_sum_from_checksum`] for IPv6, and IPv4 with options.
    #[inline(never)]
    fn payload_sum_from_pseudo(&self, frame: &[u8], l4_len: usize) -> Sum {
        self.pseudo(frame, l4_len).plus(self.header_sum(frame)).negate()
    }

    /// True when the complete checksum of the segment verifies.
    pub fn checksum_ok(&self, frame: &[u8]) -> bool {
        self.checksum_ok_with_payload(frame, Sum::of(&frame[self.payload_start()..self.info.end]))
    }

    /// True when the checksum verifies given `payload`, the payload's sum
    /// computed elsewhere (e.g. piece by piece while copying it): the
    /// payload is not read again.
    pub fn checksum_ok_with_payload(&self, frame: &[u8], payload: Sum) -> bool {
        let s = self.pseudo(frame, self.info.end - self.info.l4).plus(self.header_sum(frame));
        checksum::fold(s.plus(payload.at_offset(self.th))) == 0xffff
    }
}

/// TCP header byte 12: data offset, reserved bits and AE (bit 0, the former
/// NS bit, RFC 3540 now historic). AE is the top bit of AccECN's ACE field
/// (AE, CWR, ECE; draft-ietf-tcpm-accurate-ecn §3.2.2): pieces merge only
/// with equal byte 12, like equal flags.
pub(crate) const AE: u8 = 0x01;

pub(crate) fn offset_byte(frame: &[u8], seg: &Seg) -> u8 {
    frame[seg.info.l4 + tcp::field::OFF]
}

/// Whether a SYN-ACK answers an AccECN request: (AE, CWR, ECE) is one of
/// 010, 011, 100, 110 (draft-ietf-tcpm-accurate-ecn §3.1.1, Table 2; 001 is
/// classic ECN, 000 none, 101 and 111 are broken or legacy responses). Only
/// a SYN that asked for AccECN (AE, CWR and ECE all set) gets such an
/// answer, so the SYN-ACK alone says the connection uses AccECN.
pub(crate) fn is_accecn_synack(frame: &[u8], seg: &Seg) -> bool {
    if seg.flags & (flags::SYN | flags::ACK) != flags::SYN | flags::ACK {
        return false;
    }
    let ae = (offset_byte(frame, seg) & AE) << 2;
    let ace = ae | ((seg.flags & flags::CWR != 0) as u8) << 1 | (seg.flags & flags::ECE != 0) as u8;
    matches!(ace, 0b010 | 0b011 | 0b100 | 0b110)
}

/// The header layout of a TCP segment, all the engine's `segment_limit`
/// reads of it besides its destination: IP and TCP header bytes together,
/// and TCP option bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    pub headers: u16,
    pub options: u8,
}

impl Layout {
    pub fn of(seg: &Seg) -> Layout {
        Layout {
            headers: (seg.payload_start() - seg.info.l3) as u16,
            options: (seg.th - px_wire::tcp::MIN_HEADER_LEN) as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::Port;
    use crate::test_frames::{L2, TS, Tcp, udp};

    fn parsed(f: &[u8]) -> FrameInfo {
        FrameInfo::parse(f).unwrap().unwrap()
    }

    #[test]
    fn parse_reads_the_fields_the_rules_need() {
        for v6 in [false, true] {
            let mut t = Tcp::data(v6, Port::Outer, 1000, 100);
            t.flags = flags::ACK | flags::PSH | flags::FIN;
            let f = t.build();
            let info = parsed(&f);
            let s = Seg::parse(&f, &info).unwrap();
            let l4 = L2 + if v6 { 40 } else { 20 };
            assert_eq!((s.th, s.seq, s.ack, s.window), (32, 1000, 1, 65_535));
            assert_eq!((s.src_port, s.dst_port), (40000, 80));
            assert_eq!(s.flags, flags::ACK | flags::PSH | flags::FIN);
            assert_eq!(s.tsval_at, Some(24), "NOP NOP TS: TSval at 20 + 4");
            assert!(!s.sack_or_bad_options);
            assert_eq!((s.payload_start(), s.payload_len()), (l4 + 32, 100));
            assert_eq!(s.seq_len(), 101, "FIN takes one sequence number");
            assert!(s.has(flags::PSH) && !s.has(flags::SYN));
        }
    }

    #[test]
    fn options_are_walked_when_not_the_usual_layout() {
        // MSS, then TS at offset 4 (no NOPs), then EOL padding.
        let mut t = Tcp::data(false, Port::Outer, 1, 10);
        t.opts = vec![2, 4, 0x05, 0xb4, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0];
        let f = t.build();
        let info = parsed(&f);
        let s = Seg::parse(&f, &info).unwrap();
        assert_eq!(s.tsval_at, Some(20 + 4 + 2));
        assert!(!s.sack_or_bad_options);
        // A SACK block marks the segment.
        t.opts = [&[1u8, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 9][..], &TS].concat();
        let f = t.build();
        let info = parsed(&f);
        assert!(Seg::parse(&f, &info).unwrap().sack_or_bad_options);
        // So does an option whose length runs past the header.
        t.opts = vec![1, 1, 8, 40];
        let f = t.build();
        let info = parsed(&f);
        let s = Seg::parse(&f, &info).unwrap();
        assert!(s.sack_or_bad_options);
        assert_eq!(s.tsval_at, None);
    }

    #[test]
    fn only_tcp_is_a_segment() {
        let f = udp(false, Port::Outer, b"hello");
        let info = parsed(&f);
        assert!(Seg::parse(&f, &info).is_none());
    }

    #[test]
    fn checksums_are_verified_and_derived_without_the_payload() {
        for v6 in [false, true] {
            let mut f = Tcp::data(v6, Port::Inner, 7, 301).build();
            let info = parsed(&f);
            let s = Seg::parse(&f, &info).unwrap();
            assert!(s.checksum_ok(&f));
            let payload = Sum::of(&f[s.payload_start()..]);
            assert_eq!(checksum::fold(s.payload_sum_from_checksum(&f)), checksum::fold(payload), "v6={v6}");
            let l4_len = info.end - info.l4;
            let want = crate::test_frames::pseudo(v6, Port::Inner, 6, l4_len);
            assert_eq!(checksum::fold(s.pseudo(&f, l4_len)), checksum::fold(want));
            let last = f.len() - 1;
            f[last] ^= 0x40;
            assert!(!s.checksum_ok(&f), "v6={v6}: a flipped payload bit must not verify");
        }
    }

    #[test]
    fn accecn_synack_codepoints() {
        for ace in 0u8..8 {
            let mut t = Tcp::data(false, Port::Outer, 1, 0);
            t.flags = flags::SYN
                | flags::ACK
                | if ace & 2 != 0 { flags::CWR } else { 0 }
                | if ace & 1 != 0 { flags::ECE } else { 0 };
            let mut f = t.build();
            let info = parsed(&f);
            f[info.l4 + 12] |= ace >> 2;
            let s = Seg::parse(&f, &info).unwrap();
            assert_eq!(is_accecn_synack(&f, &s), matches!(ace, 2 | 3 | 4 | 6), "ACE {ace:03b}");
        }
    }
}
