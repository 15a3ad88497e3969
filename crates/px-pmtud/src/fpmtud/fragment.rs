//! IPv4 fragmentation arithmetic (RFC 791 §3.2, as Linux's `ip_fragment`
//! does it): the reference model of what routers do to an F-PMTUD probe.
//!
//! The prober's claim rests on this arithmetic: a router with MTU `m` cuts a
//! packet into fragments whose data, except the last, is the largest
//! multiple of 8 that fits, so every non-final fragment it makes has IP
//! length `20 + 8 * floor((m - 20) / 8)`, i.e. between `m - 7` and `m`. The
//! unit and end-to-end tests, and the simulator, use these functions to build
//! the fragments a path would deliver.
//!
//! Guarantees: pure functions, no panics for any input (a hop whose MTU
//! cannot carry 8 bytes of data drops the packet, as a router would have
//! to), headers are 20 bytes (no IP options).

use super::wire::FragmentRecord;

/// IPv4 header length assumed for probes (no options).
pub const IPV4_HEADER_LEN: u16 = 20;

/// Largest IP length of a non-final fragment a hop of `mtu` produces.
#[must_use]
pub fn max_fragment_len(mtu: u16) -> u16 {
    IPV4_HEADER_LEN + (mtu.saturating_sub(IPV4_HEADER_LEN) / 8) * 8
}

/// Splits one packet or fragment at a hop of `mtu`. A piece that fits is
/// returned unchanged; one that cannot be split (data per fragment would be
/// 0) yields nothing.
#[must_use]
pub fn split(piece: FragmentRecord, mtu: u16) -> Vec<FragmentRecord> {
    if piece.ip_len <= mtu {
        return vec![piece];
    }
    let per = max_fragment_len(mtu).saturating_sub(IPV4_HEADER_LEN);
    if per == 0 {
        return Vec::new();
    }
    let mut data = piece.ip_len.saturating_sub(IPV4_HEADER_LEN);
    let mut offset = piece.offset;
    let mut out = Vec::with_capacity(usize::from(data / per) + 1);
    while data > 0 {
        let take = data.min(per);
        data -= take;
        out.push(FragmentRecord {
            offset,
            ip_len: IPV4_HEADER_LEN + take,
            // Only the last piece inherits MF; the others always have it.
            more_fragments: data > 0 || piece.more_fragments,
        });
        offset = offset.saturating_add(take);
    }
    out
}

/// The fragments a packet of `ip_len` arrives as after crossing hops with
/// the given MTUs, in order. `None` when a hop drops it: DF set and too big
/// (the router would send a PTB), or a hop too small to fragment into.
#[must_use]
pub fn traverse(ip_len: u16, dont_fragment: bool, hop_mtus: &[u16]) -> Option<Vec<FragmentRecord>> {
    let mut pieces = vec![FragmentRecord { offset: 0, ip_len, more_fragments: false }];
    for &mtu in hop_mtus {
        if dont_fragment && pieces.iter().any(|p| p.ip_len > mtu) {
            return None;
        }
        let mut next = Vec::with_capacity(pieces.len());
        for p in pieces {
            let parts = split(p, mtu);
            if parts.is_empty() {
                return None;
            }
            next.extend(parts);
        }
        pieces = next;
    }
    Some(pieces)
}

/// Whether `records` make up a whole datagram: they cover offsets `0..end`
/// without a gap and the piece ending at `end` has MF clear.
#[must_use]
pub fn is_complete(records: &[FragmentRecord]) -> bool {
    let mut sorted: Vec<_> = records.to_vec();
    sorted.sort_unstable();
    let mut covered: u32 = 0;
    for r in &sorted {
        let start = u32::from(r.offset);
        let end = start + u32::from(r.ip_len.saturating_sub(IPV4_HEADER_LEN));
        if start > covered {
            return false;
        }
        covered = covered.max(end);
        if !r.more_fragments && end == covered {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(offset: u16, ip_len: u16, mf: bool) -> FragmentRecord {
        FragmentRecord { offset, ip_len, more_fragments: mf }
    }

    #[test]
    fn fragment_lengths_are_8_aligned() {
        assert_eq!(max_fragment_len(1500), 1500);
        assert_eq!(max_fragment_len(1492), 1492);
        assert_eq!(max_fragment_len(1400), 1396);
        assert_eq!(max_fragment_len(1280), 1276);
        assert_eq!(max_fragment_len(27), 20);
    }

    #[test]
    fn hand_computed_two_hops() {
        // 9000 -> 4000 -> 1280: the 4000-hop makes 3996-byte fragments
        // (3976 data), the 1280-hop re-cuts them into 1276-byte pieces.
        let out = traverse(9000, false, &[9000, 4000, 1280]).expect("forwarded");
        assert_eq!(out.iter().map(|r| r.ip_len).max(), Some(1276));
        assert!(is_complete(&out));
        let first = split(rec(0, 3996, true), 1280);
        assert_eq!(first, [rec(0, 1276, true), rec(1256, 1276, true), rec(2512, 1276, true), rec(3768, 228, true)]);
        assert_eq!(traverse(1500, true, &[1500, 1400]), None);
        assert_eq!(traverse(1400, true, &[1500, 1400]), Some(vec![rec(0, 1400, false)]));
        assert_eq!(traverse(100, false, &[20]), None);
    }

    #[test]
    fn completeness() {
        assert!(is_complete(&[rec(0, 1500, false)]));
        assert!(is_complete(&[rec(1480, 40, false), rec(0, 1500, true)]));
        assert!(!is_complete(&[rec(0, 1500, true)]));
        assert!(!is_complete(&[rec(1480, 40, false)]));
        assert!(!is_complete(&[rec(0, 100, true), rec(160, 40, false)]));
        assert!(!is_complete(&[]));
    }

    proptest! {
        /// The property F-PMTUD relies on: the largest fragment, and the
        /// first fragment, are within 7 bytes of the path MTU.
        #[test]
        fn largest_and_first_fragment_within_7(
            link in 576u16..=9000,
            hops in proptest::collection::vec(576u16..=9000, 1..6),
        ) {
            let mut path = vec![link];
            path.extend(hops);
            let pmtu = *path.iter().min().expect("non-empty");
            let out = traverse(link, false, &path).expect("DF clear, MTUs >= 576");
            prop_assert!(is_complete(&out));
            let largest = out.iter().map(|r| r.ip_len).max().expect("some");
            let first = out.iter().find(|r| r.offset == 0).expect("first").ip_len;
            prop_assert!(largest <= pmtu && largest + 7 >= pmtu, "largest {} pmtu {}", largest, pmtu);
            prop_assert!(first <= pmtu && first + 7 >= pmtu, "first {} pmtu {}", first, pmtu);
            let data: u32 = out.iter().map(|r| u32::from(r.ip_len - 20)).sum();
            prop_assert_eq!(data, u32::from(link - 20));
        }
    }
}
