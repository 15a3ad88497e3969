//! Internet checksum (RFC 1071) arithmetic: full sums, pseudo-headers and
//! incremental updates (RFC 1624).
//!
//! Sums are carried unfolded in a `u64` so that long buffers and many pieces
//! can be added without folding after every step; [`fold`] reduces to 16 bits.
//! A piece that starts at an odd byte offset of the checksummed data must be
//! byte-swapped before it is added ([`Sum::at_offset`]); this is what lets the
//! gateway combine the sums of payload pieces it never re-reads.

use core::net::{Ipv4Addr, Ipv6Addr};

/// An unfolded ones'-complement accumulator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum(pub u64);

impl Sum {
    /// The sum of `data`, as if it started at an even offset.
    #[inline]
    pub fn of(data: &[u8]) -> Sum {
        Sum(raw_sum(data))
    }

    /// Adds another sum.
    #[inline]
    #[must_use]
    pub fn plus(self, other: Sum) -> Sum {
        let (s, carry) = self.0.overflowing_add(other.0);
        Sum(s + carry as u64)
    }

    /// Adds one 16-bit word.
    #[inline]
    #[must_use]
    pub fn add_u16(self, w: u16) -> Sum {
        self.plus(Sum(w as u64))
    }

    /// The ones'-complement negation of the folded sum, as a sum: adding
    /// `x.negate()` to a sum containing `x` removes `x`.
    #[inline]
    #[must_use]
    pub fn negate(self) -> Sum {
        Sum(!fold(self) as u64)
    }

    /// The sum as it counts when its data starts at byte `offset` of the
    /// checksummed range: an odd offset swaps the bytes of every word.
    #[inline]
    #[must_use]
    pub fn at_offset(self, offset: usize) -> Sum {
        if offset % 2 == 1 { Sum(fold(self).swap_bytes() as u64) } else { self }
    }

    /// The 16-bit checksum field value for data whose total sum is `self`.
    #[inline]
    pub fn checksum(self) -> u16 {
        !fold(self)
    }
}

/// Folds an unfolded sum to 16 bits (end-around carry).
#[inline]
pub fn fold(sum: Sum) -> u16 {
    let mut s = sum.0;
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Sum of big-endian 16-bit words of `data`, a trailing odd byte padded with
/// zero. Eight bytes at a time with native-endian loads, the carries kept in
/// the upper half of the `u64`; the byte order is fixed once at the end,
/// which is valid because ones'-complement addition commutes with byte
/// swapping (RFC 1071 §2(B)). One fold for the whole buffer.
#[inline]
fn raw_sum(data: &[u8]) -> u64 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        acc += (w & 0xffff_ffff) + (w >> 32);
    }
    // A byte loop, not `copy_from_slice`: for 0..7 bytes a `memcpy` call
    // costs more than the bytes.
    let mut tail = [0u8; 8];
    for (t, b) in tail.iter_mut().zip(chunks.remainder()) {
        *t = *b;
    }
    let w = u64::from_ne_bytes(tail);
    acc += (w & 0xffff_ffff) + (w >> 32);
    u16::from_be(fold(Sum(acc))) as u64
}

/// Copies `src` into `dst` (same length) and returns the sum of the bytes.
/// One pass over memory: used where the gateway must both move and sum.
#[inline]
pub fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> Sum {
    debug_assert_eq!(dst.len(), src.len());
    dst.copy_from_slice(src);
    Sum::of(dst)
}

/// Completes a partial checksum (`CHECKSUM_PARTIAL`) in place, as the
/// kernel's `skb_checksum_help` does: the field at `start + offset` already
/// holds the pseudo-header sum, so the one's complement sum over
/// `data[start..]` (field included) is folded, complemented and stored
/// (RFC 1071). For a UDP field (`offset` 6) a computed zero is stored as
/// all ones (RFC 768: zero means "no checksum"). False, and nothing
/// written, if the field lies outside `data`.
pub fn finish_partial(data: &mut [u8], start: usize, offset: usize) -> bool {
    let field = start + offset;
    if field + 2 > data.len() {
        return false;
    }
    let mut c = Sum::of(&data[start..]).checksum();
    if c == 0 && offset == 6 {
        c = 0xffff;
    }
    data[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// Sum of the IPv4 pseudo-header (RFC 793 §3.1).
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len: u16) -> Sum {
    let (s, d) = (u32::from(src) as u64, u32::from(dst) as u64);
    Sum((s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + protocol as u64 + l4_len as u64)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1).
#[inline]
pub fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, l4_len: u32) -> Sum {
    let mut acc: u64 = 0;
    for w in src.segments().iter().chain(dst.segments().iter()) {
        acc += *w as u64;
    }
    acc += (l4_len >> 16) as u64 + (l4_len & 0xffff) as u64 + next_header as u64;
    Sum(acc)
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit word of the covered data
/// changes from `old` to `new`.
#[inline]
pub fn update_u16(checksum: u16, old: u16, new: u16) -> u16 {
    // HC' = ~(~HC + ~m + m')
    !fold(Sum(!checksum as u64 + !old as u64 + new as u64))
}

/// RFC 1624 for a 32-bit field (two words).
#[inline]
pub fn update_u32(checksum: u16, old: u32, new: u32) -> u16 {
    let c = update_u16(checksum, (old >> 16) as u16, (new >> 16) as u16);
    update_u16(c, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Straightforward reference: 16-bit big-endian words, fold at the end.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], 0]) };
            s += w as u64;
        }
        fold(Sum(s))
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(Sum::of(&d)), 0xddf2);
    }

    #[test]
    fn ipv4_header_checksum_known_value() {
        // A real IPv4 header with checksum 0xb861 (Wikipedia example).
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
            0x00, 0xc7,
        ];
        assert_eq!(Sum::of(&h).checksum(), 0xb861);
    }

    proptest! {
        #[test]
        fn matches_reference(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            prop_assert_eq!(fold(Sum::of(&data)), reference(&data));
        }

        #[test]
        fn pieces_combine_at_any_split(data in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..600) {
            let cut = cut.min(data.len());
            let whole = fold(Sum::of(&data));
            let parts = Sum::of(&data[..cut]).plus(Sum::of(&data[cut..]).at_offset(cut));
            prop_assert_eq!(fold(parts), whole);
        }

        #[test]
        fn negate_removes(a in proptest::collection::vec(any::<u8>(), 2..200), b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut a = a; if a.len() % 2 == 1 { a.pop(); }
            let mut ab = a.clone(); ab.extend_from_slice(&b);
            let total = Sum::of(&ab);
            let only_b = total.plus(Sum::of(&a).negate());
            // Equal as ones'-complement numbers (0 and 0xffff are the same value).
            let x = fold(only_b); let y = fold(Sum::of(&b));
            prop_assert!(x == y || (x == 0xffff && y == 0) || (x == 0 && y == 0xffff));
        }

        #[test]
        fn incremental_equals_recompute(mut data in proptest::collection::vec(any::<u8>(), 4..100), idx in 0usize..50, new in any::<u16>()) {
            if data.len() % 2 == 1 { data.push(0); }
            let i = (idx * 2) % data.len();
            let before = Sum::of(&data).checksum();
            let old = u16::from_be_bytes([data[i], data[i + 1]]);
            data[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let after = Sum::of(&data).checksum();
            let inc = update_u16(before, old, new);
            // RFC 1624: equal up to the +0/-0 ambiguity.
            prop_assert!(inc == after || (inc ^ after) == 0xffff && (inc == 0 || after == 0));
        }

        #[test]
        fn copy_and_sum_copies(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let mut dst = vec![0u8; data.len()];
            let s = copy_and_sum(&mut dst, &data);
            prop_assert_eq!(&dst, &data);
            prop_assert_eq!(fold(s), reference(&data));
        }

        /// A finished partial checksum verifies: with the field holding a
        /// pseudo-header sum P, P plus the covered bytes afterwards sum to
        /// all ones. A field outside the data is refused, nothing written.
        #[test]
        fn finish_partial_verifies(mut data in proptest::collection::vec(any::<u8>(), 9..600), start in 0usize..2, p in any::<u16>()) {
            let field = start + 6;
            data[field..field + 2].copy_from_slice(&p.to_be_bytes());
            prop_assert!(finish_partial(&mut data, start, 6));
            prop_assert_eq!(fold(Sum::of(&data[start..]).add_u16(p)), 0xffff);
            let (len, copy) = (data.len(), data.clone());
            prop_assert!(!finish_partial(&mut data, len - 1, 0));
            prop_assert_eq!(data, copy);
        }
    }
}
