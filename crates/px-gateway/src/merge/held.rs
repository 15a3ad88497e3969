//! A held segment: one inner segment being filled from contiguous inbound
//! segments of a bulk flow.
//!
//! A [`Held`] is one inner segment being filled. Its buffer is laid out as
//! the frame it will become: the headers of the segment that contributed its
//! first byte sit just before `HEADROOM`, payload follows. Each payload byte
//! is copied once, from the received frame into its final place; finishing a
//! segment rewrites headers only. The TCP checksum is assembled from the
//! pieces' sums, which are derived from the pieces' own checksums where those
//! are complete (header-only work), so the payload is never read twice.

use std::time::Instant;

use px_wire::checksum::Sum;
use px_wire::ipv4::Ipv4Packet;
use px_wire::ipv6::Ipv6Packet;
use px_wire::tcp::{TcpSegment, flags};
use px_wire::{FrameInfo, IpVersion};

use crate::buf::HEADROOM;
use crate::segment::{Seg, ecn_compatible};

/// One inner-sized segment being filled.
#[derive(Debug)]
pub(crate) struct Held {
    pub buf: Vec<u8>,
    /// Frame header length (link + IP + TCP), sitting at `HEADROOM - hdr_len`.
    pub hdr_len: usize,
    /// The template's parse, with offsets relative to the header's start.
    pub info: FrameInfo,
    pub th: usize,
    pub tsval_at: Option<usize>,
    /// Flags of the template without PSH/FIN (they may only end a merge).
    pub flags: u8,
    /// Payload bytes held, and the most this segment may carry.
    pub len: usize,
    pub cap: usize,
    pub seq: u32,
    pub ack: u32,
    pub window: u16,
    /// TSval of the newest piece (the next may not be lower) and the newest
    /// TSecr (carried by the merged segment); the header keeps the first
    /// TSval.
    pub tsval: u32,
    pub tsecr: u32,
    /// Sum of the payload held, as positioned in the segment.
    pub psum: Sum,
    /// Arrival of the first byte (the hold timer runs from here).
    pub since: Instant,
    /// Identifies this hold in the timer queue.
    pub id: u64,
    pub pieces: u32,
    /// A piece carried PSH and the policy lets it ride: the segment carries it.
    pub psh: bool,
}

/// The segment's (TSval, TSecr), if it has the option.
pub(crate) fn ts_values(frame: &[u8], seg: &Seg) -> Option<(u32, u32)> {
    let at = seg.info.l4 + seg.tsval_at?;
    let w = frame.get(at..at + 8)?;
    Some((u32::from_be_bytes([w[0], w[1], w[2], w[3]]), u32::from_be_bytes([w[4], w[5], w[6], w[7]])))
}

/// Whether a segment may start a held segment at all (what a careful GRO
/// would merge): plain ACK data (PSH or FIN may end it: the segment is then
/// merged as the last piece; CWR only in an AccECN flow, where it is a bit
/// of the ACE counter, checked by the caller), no IP options or extension headers, no SACK
/// blocks, parseable options, headers that fit the headroom.
pub(crate) fn holdable(seg: &Seg) -> bool {
    let f = seg.flags & !(flags::PSH | flags::FIN | flags::ECE | flags::CWR);
    f == flags::ACK
        && seg.payload_len() > 0
        && !seg.info.ip_options
        && !seg.info.fragment
        && !seg.sack_or_bad_options
        && seg.payload_start() <= HEADROOM
}

impl Held {
    /// Starts a held segment from `frame`'s headers at sequence `seq`.
    pub fn start(buf: Vec<u8>, frame: &[u8], seg: &Seg, seq: u32, cap: usize, since: Instant, id: u64) -> Held {
        let hdr_len = seg.payload_start();
        let mut buf = buf;
        buf[HEADROOM - hdr_len..HEADROOM].copy_from_slice(&frame[..hdr_len]);
        let (tsval, tsecr) = ts_values(frame, seg).unwrap_or((0, 0));
        Held {
            buf,
            hdr_len,
            info: *seg.info,
            th: seg.th,
            tsval_at: seg.tsval_at,
            flags: seg.flags & !(flags::PSH | flags::FIN),
            len: 0,
            cap,
            seq,
            ack: seg.ack,
            window: seg.window,
            tsval,
            tsecr,
            psum: Sum(0),
            since,
            id,
            pieces: 0,
            psh: false,
        }
    }

    fn header(&self) -> &[u8] {
        &self.buf[HEADROOM - self.hdr_len..HEADROOM]
    }

    pub fn room(&self) -> usize {
        self.cap - self.len
    }

    /// Whether `seg` (the next in sequence) may join: same link header, same
    /// IP fields (DSCP, ECN codepoint, TTL, DF, flow label), same TCP header
    /// layout, AE bit and options but for the timestamp values, same flags
    /// but PSH/FIN (so equal ECE and CWR), an ACK as new or newer, and
    /// timestamps that do not go back.
    ///
    /// Timestamps (issue 11, docs/merge.md): a piece joins when its TSval is
    /// not below the newest piece's (PAWS, RFC 7323 §5, would drop a segment
    /// whose TSval went back, so the pieces must not hide one) and its
    /// TSecr is not below the newest TSecr. The merged segment keeps the
    /// first piece's TSval: RFC 7323 §4.3 has a receiver that ACKs several
    /// segments at once echo the TSval of the earliest unacknowledged one,
    /// which is what the inner host then echoes, so the sender's RTT sample
    /// covers the delay the merge added. It carries the newest TSecr, ACK
    /// and window: they are the sender's latest view of the reverse path,
    /// as FreeBSD's LRO emits them. Linux GRO instead ends a merge on any
    /// option byte change, which at 1 ms TSval clocks ends most merges.
    pub fn accepts(&self, frame: &[u8], seg: &Seg) -> bool {
        let (a, b) = (seg.info, &self.info);
        if seg.payload_start() != self.hdr_len
            || a.l3 != b.l3
            || a.version != b.version
            || a.dscp != b.dscp
            || a.ttl != b.ttl
            || a.dont_frag != b.dont_frag
            || !ecn_compatible(a.ecn, b.ecn)
            || seg.th != self.th
            || frame[a.l4 + 12] != self.header()[a.l4 + 12]
            || (seg.flags & !(flags::PSH | flags::FIN)) != self.flags
            || (seg.ack.wrapping_sub(self.ack) as i32) < 0
            || seg.tsval_at != self.tsval_at
        {
            return false;
        }
        let h = self.header();
        if !eq_bytes(&frame[..a.l3], &h[..a.l3]) {
            return false;
        }
        if a.version == IpVersion::V6
            && (frame[a.l3 + 1] & 0x0f, &frame[a.l3 + 2..a.l3 + 4]) != (h[a.l3 + 1] & 0x0f, &h[a.l3 + 2..a.l3 + 4])
        {
            return false;
        }
        let opts = a.l4 + px_wire::tcp::MIN_HEADER_LEN..seg.payload_start();
        match self.tsval_at {
            Some(ts) => {
                let Some((tsval, tsecr)) = ts_values(frame, seg) else { return false };
                let ts = a.l4 + ts;
                (tsval.wrapping_sub(self.tsval) as i32) >= 0
                    && (tsecr.wrapping_sub(self.tsecr) as i32) >= 0
                    && eq_bytes(&frame[opts.start..ts], &h[opts.start..ts])
                    && eq_bytes(&frame[ts + 8..opts.end], &h[ts + 8..opts.end])
            }
            None => eq_bytes(&frame[opts.clone()], &h[opts]),
        }
    }

    /// Appends payload whose sum (as if at an even offset) is `sum`; the
    /// newest ACK, window and TSecr win (`ts`: the piece's TSval and TSecr).
    pub fn append(&mut self, payload: &[u8], sum: Sum, seg: &Seg, ts: Option<(u32, u32)>) {
        let at = HEADROOM + self.len;
        self.buf[at..at + payload.len()].copy_from_slice(payload);
        self.psum = self.psum.plus(sum.at_offset(self.len));
        self.len += payload.len();
        if (seg.ack.wrapping_sub(self.ack) as i32) >= 0 {
            self.ack = seg.ack;
            self.window = seg.window;
        }
        if let Some((tsval, tsecr)) = ts {
            self.tsval = tsval;
            if (tsecr.wrapping_sub(self.tsecr) as i32) >= 0 {
                self.tsecr = tsecr;
            }
        }
        self.pieces += 1;
    }

    /// Finishes the segment in place: lengths, newest ACK, window and TSecr,
    /// `last_flags` (PSH/FIN of the last piece), both checksums. Returns the
    /// buffer and the frame's range in it.
    pub fn finish(mut self, last_flags: u8) -> (Vec<u8>, usize, usize) {
        let start = HEADROOM - self.hdr_len;
        let end = HEADROOM + self.len;
        let info = self.info;
        let l4_len = self.th + self.len;
        let frame = &mut self.buf[start..end];
        let pseudo = set_ip_length(frame, &info, l4_len);
        let mut tcp = TcpSegment::new_unchecked(&mut frame[info.l4..]);
        tcp.set_seq(self.seq);
        tcp.set_ack(self.ack);
        tcp.set_window(self.window);
        tcp.set_flags(self.flags | last_flags | if self.psh { flags::PSH } else { 0 });
        tcp.set_checksum(0);
        if let Some(ts) = self.tsval_at {
            frame[info.l4 + ts + 4..info.l4 + ts + 8].copy_from_slice(&self.tsecr.to_be_bytes());
        }
        let hsum = Sum::of(&frame[info.l4..info.l4 + self.th]);
        let c = pseudo.plus(hsum).plus(self.psum.at_offset(self.th)).checksum();
        frame[info.l4 + 16..info.l4 + 18].copy_from_slice(&c.to_be_bytes());
        (self.buf, start, end)
    }
}

/// Sets the IP length of `frame`, a TCP segment of `l4_len` bytes from
/// `info.l4` on (for IPv4 with the header checksum), and returns its TCP
/// pseudo-header sum. For segments without IP options or extension headers,
/// which is what the merge holds ([`holdable`]).
pub(crate) fn set_ip_length(frame: &mut [u8], info: &FrameInfo, l4_len: usize) -> Sum {
    match info.version {
        IpVersion::V4 => {
            let mut ip = Ipv4Packet::new_unchecked(&mut frame[info.l3..]);
            ip.set_total_len((info.l4 - info.l3 + l4_len) as u16);
            ip.fill_checksum();
            px_wire::checksum::pseudo_v4(ip.src(), ip.dst(), 6, l4_len as u16)
        }
        IpVersion::V6 => {
            let mut ip = Ipv6Packet::new_unchecked(&mut frame[info.l3..]);
            ip.set_payload_len((info.l4 - info.l3 - px_wire::ipv6::HEADER_LEN + l4_len) as u16);
            px_wire::checksum::pseudo_v6(ip.src(), ip.dst(), 6, l4_len as u32)
        }
    }
}

/// Equality of two short header pieces. The lengths that occur on every
/// segment (4 bytes around a TSval, 8–16 for a link header) are compared as
/// one or two words, the last overlapping, instead of calling `memcmp`.
#[inline]
fn eq_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let w4 = |x: &[u8], i: usize| x.get(i..i + 4).and_then(|s| <[u8; 4]>::try_from(s).ok()).map(u32::from_ne_bytes);
    let w8 = |x: &[u8], i: usize| x.get(i..i + 8).and_then(|s| <[u8; 8]>::try_from(s).ok()).map(u64::from_ne_bytes);
    match n {
        0 => true,
        4 => w4(a, 0) == w4(b, 0),
        8..=16 => w8(a, 0) == w8(b, 0) && w8(a, n - 8) == w8(b, n - 8),
        _ => a == b,
    }
}

/// Sums of the two parts of `payload` cut at `n`, given the whole's sum:
/// the shorter part is read, the longer derived.
pub(crate) fn split_sum(payload: &[u8], n: usize, whole: Sum) -> (Sum, Sum) {
    if n <= payload.len() / 2 {
        let first = Sum::of(&payload[..n]);
        let rest = whole.plus(first.negate()).at_offset(n);
        (first, rest)
    } else {
        let rest = Sum::of(&payload[n..]);
        let first = whole.plus(rest.at_offset(n).negate());
        (first, rest)
    }
}

#[cfg(test)]
mod eq_tests {
    use super::eq_bytes;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn eq_bytes_is_slice_equality(a in proptest::collection::vec(0u8..3, 0..40), flip in any::<prop::sample::Index>()) {
            let mut b = a.clone();
            prop_assert!(eq_bytes(&a, &b));
            if !b.is_empty() {
                let i = flip.index(b.len());
                b[i] ^= 1;
                prop_assert_eq!(eq_bytes(&a, &b), a == b);
            }
            prop_assert!(!eq_bytes(&a, &a[..a.len().saturating_sub(1)]) || a.is_empty());
        }
    }
}
