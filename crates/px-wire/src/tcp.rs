//! TCP headers (RFC 9293) and their options.
//!
//! The checked constructor guarantees `20 <= data_offset <= buffer length`.
//! The option iterator checks every length, yields unknown kinds as they are,
//! and stops with an error item on a malformed option, so that a gateway can
//! treat such a segment as "not mergeable" instead of failing.

use crate::checksum::Sum;
use crate::error::{Layer, ParseError, need};

pub const MIN_HEADER_LEN: usize = 20;

/// TCP flag bits (in the 13th byte).
pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// Option kinds.
pub mod kind {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

/// A number in TCP's 32-bit wrapping space: sequence and acknowledgement
/// numbers (RFC 9293 §3.4: "all arithmetic dealing with sequence numbers
/// must be performed modulo 2**32"), and timestamps, which RFC 7323 §5.2
/// compares the same way. One number is *after* another when the distance
/// from it to the other, read as a signed 32-bit value, is negative: the
/// comparison is meaningful for numbers less than 2^31 apart, as TCP's are.
/// Not `Ord`: the order is not transitive across the whole space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

impl core::ops::Add<u32> for SeqNumber {
    type Output = SeqNumber;

    /// `self + n`, wrapping.
    #[inline]
    fn add(self, n: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(n))
    }
}

impl SeqNumber {
    /// Signed distance from `other` to `self` (positive: `self` is after).
    #[inline]
    pub fn since(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// Strictly after `other`.
    #[inline]
    pub fn is_after(self, other: SeqNumber) -> bool {
        self.since(other) > 0
    }

    /// After `other`, or equal to it.
    #[inline]
    pub fn is_at_or_after(self, other: SeqNumber) -> bool {
        self.since(other) >= 0
    }

    /// Strictly before `other`.
    #[inline]
    pub fn is_before(self, other: SeqNumber) -> bool {
        self.since(other) < 0
    }
}

/// Where each header field lies, as byte ranges from the header's start
/// (RFC 9293 §3.1). Public so that code rewriting headers in place names the
/// field it writes instead of an offset.
pub mod field {
    /// A field's bytes within the header.
    pub type Field = core::ops::Range<usize>;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ: Field = 4..8;
    pub const ACK: Field = 8..12;
    pub const WINDOW: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
    /// One byte.
    pub const OFF: usize = 12;
    /// One byte.
    pub const FLAGS: usize = 13;
}

/// One TCP option, borrowed from the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    EndOfList,
    Nop,
    Mss(u16),
    WindowScale(u8),
    SackPermitted,
    /// SACK blocks as raw bytes (a multiple of 8: left/right edges).
    Sack(&'a [u8]),
    Timestamps {
        tsval: u32,
        tsecr: u32,
    },
    Unknown {
        kind: u8,
        data: &'a [u8],
    },
}

/// Iterator over the options of a header, with each option's offset.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Options<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Options { bytes, pos: 0, done: false }
    }
}

impl<'a> Iterator for Options<'a> {
    /// `(offset within the options, option)` or the error that ended the walk.
    type Item = Result<(usize, TcpOption<'a>), ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.bytes.len() {
            return None;
        }
        let at = self.pos;
        let b = &self.bytes[at..];
        let k = b[0];
        if k == kind::EOL {
            self.done = true;
            return Some(Ok((at, TcpOption::EndOfList)));
        }
        if k == kind::NOP {
            self.pos += 1;
            return Some(Ok((at, TcpOption::Nop)));
        }
        let bad = |field, value| Some(Err(ParseError::Malformed { layer: Layer::TcpOption, field, value }));
        let Some(&len) = b.get(1) else {
            self.done = true;
            return bad("length", 0);
        };
        let len = len as usize;
        if len < 2 || len > b.len() {
            self.done = true;
            return bad("length", len as u32);
        }
        let data = &b[2..len];
        let opt = match (k, len) {
            (kind::MSS, 4) => TcpOption::Mss(u16::from_be_bytes([data[0], data[1]])),
            (kind::WINDOW_SCALE, 3) => TcpOption::WindowScale(data[0]),
            (kind::SACK_PERMITTED, 2) => TcpOption::SackPermitted,
            (kind::SACK, l) if l >= 10 && (l - 2) % 8 == 0 => TcpOption::Sack(data),
            (kind::TIMESTAMPS, 10) => TcpOption::Timestamps {
                tsval: u32::from_be_bytes([data[0], data[1], data[2], data[3]]),
                tsecr: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
            },
            (kind::MSS | kind::WINDOW_SCALE | kind::SACK_PERMITTED | kind::SACK | kind::TIMESTAMPS, l) => {
                self.done = true;
                return bad("length", l as u32);
            }
            (k, _) => TcpOption::Unknown { kind: k, data },
        };
        self.pos += len;
        Some(Ok((at, opt)))
    }
}

/// A checked view of a TCP segment (header and payload).
#[derive(Debug, Clone)]
pub struct TcpSegment<T: AsRef<[u8]>> {
    buffer: T,
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// `buffer` is exactly the TCP segment (IP payload), header and data.
    /// Wraps a buffer without checks, for rewriting headers the caller has
    /// already validated (e.g. a copy of a checked packet's headers).
    /// Accessors may panic if the buffer is not a valid packet.
    pub fn new_unchecked(buffer: T) -> Self {
        TcpSegment { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        need(Layer::Tcp, b.len(), MIN_HEADER_LEN)?;
        let off = ((b[field::OFF] >> 4) as usize) * 4;
        if off < MIN_HEADER_LEN {
            return Err(ParseError::Malformed { layer: Layer::Tcp, field: "data offset", value: off as u32 / 4 });
        }
        need(Layer::Tcp, b.len(), off)?;
        Ok(TcpSegment { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn src_port(&self) -> u16 {
        be16(self.b(), field::SRC_PORT.start)
    }

    pub fn dst_port(&self) -> u16 {
        be16(self.b(), field::DST_PORT.start)
    }

    pub fn seq(&self) -> u32 {
        be32(self.b(), field::SEQ.start)
    }

    pub fn ack(&self) -> u32 {
        be32(self.b(), field::ACK.start)
    }

    pub fn header_len(&self) -> usize {
        ((self.b()[field::OFF] >> 4) as usize) * 4
    }

    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }

    pub fn window(&self) -> u16 {
        be16(self.b(), field::WINDOW.start)
    }

    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM.start)
    }

    pub fn urgent(&self) -> u16 {
        be16(self.b(), field::URGENT.start)
    }

    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len()]
    }

    pub fn options_bytes(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }

    pub fn options(&self) -> Options<'_> {
        Options::new(self.options_bytes())
    }

    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }

    /// Segment length in sequence space (data plus SYN and FIN).
    pub fn seq_len(&self) -> u32 {
        let f = self.flags();
        self.payload().len() as u32 + (f & flags::SYN != 0) as u32 + (f & flags::FIN != 0) as u32
    }

    /// The MSS option's value and its offset within the segment, if present.
    pub fn mss(&self) -> Option<(u16, usize)> {
        self.options().map_while(Result::ok).find_map(|(at, o)| match o {
            TcpOption::Mss(v) => Some((v, MIN_HEADER_LEN + at)),
            _ => None,
        })
    }

    /// True when the checksum verifies against `pseudo` (the pseudo-header sum).
    pub fn verify_checksum(&self, pseudo: Sum) -> bool {
        crate::checksum::fold(pseudo.plus(Sum::of(self.b()))) == 0xffff
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpSegment<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    pub fn set_seq(&mut self, v: u32) {
        self.bm()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_ack(&mut self, v: u32) {
        self.bm()[field::ACK].copy_from_slice(&v.to_be_bytes());
    }

    pub fn set_flags(&mut self, f: u8) {
        self.bm()[field::FLAGS] = f;
    }

    pub fn set_window(&mut self, w: u16) {
        self.bm()[field::WINDOW].copy_from_slice(&w.to_be_bytes());
    }

    pub fn set_checksum(&mut self, c: u16) {
        self.bm()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Recomputes the checksum over the whole segment with `pseudo`.
    pub fn fill_checksum(&mut self, pseudo: Sum) {
        self.set_checksum(0);
        let c = pseudo.plus(Sum::of(self.b())).checksum();
        self.set_checksum(c);
    }

    /// Rewrites the MSS option in place with an incremental checksum update
    /// (RFC 1624). Returns the old value, or `None` without an MSS option.
    ///
    /// The option may start at any byte (`NOP, MSS, …` puts its value at an
    /// odd offset). A 16-bit value at an odd offset straddles two words of
    /// the one's complement sum, high byte in the low half of one and low
    /// byte in the high half of the next; by RFC 1071's byte-order
    /// independence that adds the byte-swapped value, so the update uses
    /// both values swapped.
    pub fn rewrite_mss(&mut self, new: u16) -> Option<u16> {
        let (old, at) = self.mss()?;
        if old != new {
            let value_at = at + 2;
            let (o, n) = if value_at % 2 == 0 { (old, new) } else { (old.swap_bytes(), new.swap_bytes()) };
            let c = crate::checksum::update_u16(self.checksum(), o, n);
            self.bm()[at + 2..at + 4].copy_from_slice(&new.to_be_bytes());
            self.set_checksum(c);
        }
        Some(old)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        use super::SeqNumber as S;
        assert!(S(5).is_after(S(u32::MAX - 5)));
        assert!(S(u32::MAX - 5).is_before(S(5)));
        assert!(S(7).is_at_or_after(S(7)) && !S(7).is_after(S(7)) && !S(7).is_before(S(7)));
        assert_eq!(S(u32::MAX) + 2, S(1));
        assert_eq!(S(1).since(S(u32::MAX)), 2);
        // Half the space away: after in neither order.
        assert!(!S(1 << 31).is_after(S(0)) || !S(0).is_after(S(1 << 31)));
    }

    use super::*;
    use crate::checksum::pseudo_v4;
    use core::net::Ipv4Addr;

    /// A SYN with MSS 1460, SACK-permitted, timestamps, NOP, window scale 7.
    fn syn() -> Vec<u8> {
        let mut s = vec![0u8; 40];
        s[0..2].copy_from_slice(&40000u16.to_be_bytes());
        s[2..4].copy_from_slice(&5201u16.to_be_bytes());
        s[4..8].copy_from_slice(&1000u32.to_be_bytes());
        s[12] = 10 << 4;
        s[13] = flags::SYN;
        s[14..16].copy_from_slice(&64240u16.to_be_bytes());
        s[20..40].copy_from_slice(&[2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7]);
        s
    }

    fn pseudo(len: usize) -> Sum {
        pseudo_v4(Ipv4Addr::new(198, 51, 100, 1), Ipv4Addr::new(203, 0, 113, 2), 6, len as u16)
    }

    #[test]
    fn options_parse() {
        let s = syn();
        let t = TcpSegment::new_checked(&s[..]).unwrap();
        let opts: Vec<_> = t.options().map(|o| o.unwrap().1).collect();
        assert_eq!(
            opts,
            vec![
                TcpOption::Mss(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps { tsval: 1, tsecr: 0 },
                TcpOption::Nop,
                TcpOption::WindowScale(7),
            ]
        );
        assert_eq!(t.mss(), Some((1460, 20)));
        assert_eq!(t.seq_len(), 1);
    }

    #[test]
    fn unknown_kept_and_malformed_stops() {
        let opts = [30, 4, 0xaa, 0xbb, 2, 3, 0];
        let v: Vec<_> = Options::new(&opts).collect();
        assert_eq!(v[0], Ok((0, TcpOption::Unknown { kind: 30, data: &[0xaa, 0xbb] })));
        assert!(v[1].is_err());
        assert_eq!(v.len(), 2);
        let zero_len = [99, 0, 0, 0];
        assert!(Options::new(&zero_len).next().unwrap().is_err());
    }

    #[test]
    fn rewrite_mss_keeps_checksum_valid() {
        let mut s = syn();
        let mut t = TcpSegment::new_checked(&mut s[..]).unwrap();
        t.fill_checksum(pseudo(40));
        assert!(t.verify_checksum(pseudo(40)));
        assert_eq!(t.rewrite_mss(8960), Some(1460));
        assert!(t.verify_checksum(pseudo(40)));
        assert_eq!(t.mss(), Some((8960, 20)));
        // Cross-check with etherparse's own checksum computation.
        let e = etherparse::TcpHeaderSlice::from_slice(&s).unwrap().to_header();
        let want = e.calc_checksum_ipv4_raw([198, 51, 100, 1], [203, 0, 113, 2], &[]).unwrap();
        assert_eq!(TcpSegment::new_checked(&s[..]).unwrap().checksum(), want);
    }

    /// A SYN whose options start with NOP, so the MSS value sits at an odd
    /// byte offset and straddles two 16-bit words of the checksum: options
    /// NOP, MSS 1460, NOP, window scale 7, SACK-permitted, padding.
    fn syn_odd_mss() -> Vec<u8> {
        let mut s = syn()[..20].to_vec();
        s[12] = 8 << 4;
        s.extend_from_slice(&[1, 2, 4, 0x05, 0xb4, 1, 3, 3, 7, 4, 2, 0]);
        s
    }

    #[test]
    fn rewrite_mss_at_odd_offset_keeps_checksum_valid() {
        for new in [8948u16, 1220, 536, 0xffff, 0x0101] {
            let mut s = syn_odd_mss();
            let mut t = TcpSegment::new_checked(&mut s[..]).unwrap();
            t.fill_checksum(pseudo(32));
            assert_eq!(t.mss(), Some((1460, 21)));
            assert_eq!(t.rewrite_mss(new), Some(1460));
            assert!(t.verify_checksum(pseudo(32)), "MSS {new} at offset 21");
            assert_eq!(t.mss(), Some((new, 21)));
            let e = etherparse::TcpHeaderSlice::from_slice(&s).unwrap().to_header();
            let want = e.calc_checksum_ipv4_raw([198, 51, 100, 1], [203, 0, 113, 2], &[]).unwrap();
            assert_eq!(TcpSegment::new_checked(&s[..]).unwrap().checksum(), want, "MSS {new}");
        }
    }

    proptest::proptest! {
        /// Any option layout: the MSS option after `pad` NOPs, rewritten to
        /// any value, leaves a checksum that etherparse agrees with.
        #[test]
        fn rewrite_mss_any_layout(pad in 0usize..4, old in 1u16.., new in 1u16.., payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..7)) {
            let mut s = syn()[..20].to_vec();
            s.extend(std::iter::repeat_n(1u8, pad));
            s.extend_from_slice(&[2, 4]);
            s.extend_from_slice(&old.to_be_bytes());
            while s.len() % 4 != 0 {
                s.push(0);
            }
            s[12] = ((s.len() / 4) as u8) << 4;
            s.extend_from_slice(&payload);
            let len = s.len();
            let mut t = TcpSegment::new_checked(&mut s[..]).unwrap();
            t.fill_checksum(pseudo(len));
            proptest::prop_assert_eq!(t.rewrite_mss(new), Some(old));
            proptest::prop_assert!(t.verify_checksum(pseudo(len)));
        }
    }

    #[test]
    fn rejects_short_offset() {
        let mut s = syn();
        s[12] = 4 << 4;
        assert!(TcpSegment::new_checked(&s[..]).is_err());
        let mut s = syn();
        s[12] = 15 << 4;
        assert!(matches!(TcpSegment::new_checked(&s[..]), Err(ParseError::Truncated { .. })));
    }
}
