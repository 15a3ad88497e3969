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
use px_wire::tcp::SeqNumber;
use px_wire::tcp::{TcpSegment, flags};
use px_wire::{FrameInfo, IpVersion};
use px_wire::{at, ipv4, ipv6, tcp};

use crate::buf::HEADROOM;
use crate::segment::Seg;

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
    /// Which header bits a joining segment must share with the template,
    /// by 8-byte word from the header's start ([`header_mask`]).
    mask: [u64; MASK_WORDS],
}

/// Words of [`Held::mask`]: the whole headroom.
const MASK_WORDS: usize = HEADROOM / 8;

/// The bits of a segment's headers (`hdr_len` bytes, parsed as `seg`) that
/// every piece of one merged segment must share, as 8-byte words from the
/// frame's start; the rest differ from piece to piece and the merged
/// segment gets them from [`Held::finish`]. Shared: the link header; the
/// IP version, DSCP, ECN codepoint, TTL or hop limit, protocol,
/// addresses, and the DF bit (IPv4) or flow label (IPv6); the ports, the
/// TCP data offset and AE bit, the flags but PSH and FIN, and the options
/// but the timestamp values. Free: the IP length, identification and
/// header checksum, the sequence and ACK numbers, window, TCP checksum and
/// urgent pointer (URG is never merged), TSval and TSecr (ordered by
/// [`Held::accepts`]).
///
/// ECN codepoints merge only when equal, as in Linux GRO. CE is never
/// OR-ed over pieces: DCTCP, L4S and AccECN react to the share of
/// CE-marked bytes or packets, so a merged segment is CE exactly when all
/// of its bytes arrived CE (DESIGN invariant 6); and a CE piece can not
/// bridge ECT(0) and ECT(1), which L4S tells apart.
fn header_mask(seg: &Seg, hdr_len: usize) -> [u64; MASK_WORDS] {
    let mut m = [0u8; HEADROOM];
    m[..hdr_len].fill(0xff);
    let (l3, l4) = (seg.info.l3, seg.info.l4);
    let mut free = |r: core::ops::Range<usize>| m[r].fill(0);
    match seg.info.version {
        IpVersion::V4 => {
            free(at(l3, ipv4::field::LEN));
            free(at(l3, ipv4::field::IDENT));
            free(at(l3, ipv4::field::FLG_OFF));
            free(at(l3, ipv4::field::CHECKSUM));
        }
        IpVersion::V6 => free(at(l3, ipv6::field::PAYLOAD_LEN)),
    }
    free(at(l4, tcp::field::SEQ));
    free(at(l4, tcp::field::ACK));
    free(at(l4, tcp::field::WINDOW));
    free(at(l4, tcp::field::CHECKSUM));
    free(at(l4, tcp::field::URGENT));
    if let Some(ts) = seg.tsval_at {
        free(l4 + ts..l4 + ts + 8);
    }
    if seg.info.version == IpVersion::V4 {
        // Of the fragment word, DF: a held segment is no fragment (MF and
        // the offset are zero), and the reserved bit is not compared.
        m[l3 + ipv4::field::FLG_OFF.start] = (ipv4::FLAG_DF >> 8) as u8;
    }
    m[l4 + tcp::field::FLAGS] = !(flags::PSH | flags::FIN);
    let mut words = [0u64; MASK_WORDS];
    for (w, c) in words.iter_mut().zip(m.chunks_exact(8)) {
        *w = u64::from_ne_bytes(c.try_into().expect("8-byte chunk"));
    }
    words
}

/// Whether `a` and `b` agree on the bits `mask` selects (whole words,
/// a fixed count, so that the compiler unrolls it into vector operations).
#[inline]
fn masked_eq(a: &[u8; HEADROOM], b: &[u8; HEADROOM], mask: &[u64; MASK_WORDS]) -> bool {
    let mut diff = 0;
    for ((x, y), m) in a.chunks_exact(8).zip(b.chunks_exact(8)).zip(mask) {
        let x = u64::from_ne_bytes(x.try_into().expect("8-byte chunk"));
        let y = u64::from_ne_bytes(y.try_into().expect("8-byte chunk"));
        diff |= (x ^ y) & m;
    }
    diff == 0
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
            mask: header_mask(seg, hdr_len),
        }
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
        if seg.payload_start() != self.hdr_len || SeqNumber(seg.ack).is_before(SeqNumber(self.ack)) {
            return false;
        }
        // Equal shared bits imply an equal parse: the same link header, IP
        // header length, TCP data offset and option layout (so the same
        // `l3`, `l4`, `th` and `tsval_at`). Both sides are compared over the
        // whole headroom's length, past the header into the payload, where
        // the mask is zero.
        let start = HEADROOM - self.hdr_len;
        // Pool buffers hold the headroom and an inner MTU (at least 1280
        // bytes) after it; a shorter one joins nothing rather than panic.
        let Some(template) = self.buf.get(start..start + HEADROOM).and_then(|t| <&[u8; HEADROOM]>::try_from(t).ok())
        else {
            return false;
        };
        let same = match frame.first_chunk::<HEADROOM>() {
            Some(f) => masked_eq(f, template, &self.mask),
            None => {
                // A frame shorter than the headroom.
                let mut padded = [0u8; HEADROOM];
                padded[..frame.len()].copy_from_slice(frame);
                masked_eq(&padded, template, &self.mask)
            }
        };
        if !same {
            return false;
        }
        match ts_values(frame, seg) {
            Some((tsval, tsecr)) => {
                SeqNumber(tsval).is_at_or_after(SeqNumber(self.tsval))
                    && SeqNumber(tsecr).is_at_or_after(SeqNumber(self.tsecr))
            }
            None => true,
        }
    }

    /// Appends payload whose sum (as if at an even offset) is `sum`; the
    /// newest ACK, window and TSecr win (`ts`: the piece's TSval and TSecr).
    pub fn append(&mut self, payload: &[u8], sum: Sum, seg: &Seg, ts: Option<(u32, u32)>) {
        let at = HEADROOM + self.len;
        self.buf[at..at + payload.len()].copy_from_slice(payload);
        self.psum = self.psum.plus(sum.at_offset(self.len));
        self.len += payload.len();
        if SeqNumber(seg.ack).is_at_or_after(SeqNumber(self.ack)) {
            self.ack = seg.ack;
            self.window = seg.window;
        }
        if let Some((tsval, tsecr)) = ts {
            self.tsval = tsval;
            if SeqNumber(tsecr).is_at_or_after(SeqNumber(self.tsecr)) {
                self.tsecr = tsecr;
            }
        }
        self.pieces += 1;
    }

    /// Finishes the segment in place: lengths, newest ACK, window and TSecr,
    /// `last_flags` (PSH/FIN of the last piece), both checksums. Returns the
    /// buffer, taken out of the hold (which is spent: the caller drops it),
    /// and the frame's range in it.
    pub fn finish(&mut self, last_flags: u8) -> (Vec<u8>, usize, usize) {
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
        frame[at(info.l4, tcp::field::CHECKSUM)].copy_from_slice(&c.to_be_bytes());
        (std::mem::take(&mut self.buf), start, end)
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
mod tests {
    use std::time::Instant;

    use proptest::prelude::*;
    use px_wire::FrameInfo;

    use super::{Held, ts_values};
    use crate::buf::HEADROOM;
    use crate::port::Port;
    use crate::segment::Seg;
    use crate::test_frames::{TS, Tcp};
    use px_wire::tcp::SeqNumber;

    /// The rule [`Held::accepts`] implements, field by field from the
    /// parses (the engine's rule before the masked compare): the oracle.
    fn accepts_by_fields(h: &Held, template: &[u8], frame: &[u8], seg: &Seg) -> bool {
        let (a, b) = (seg.info, &h.info);
        if seg.payload_start() != h.hdr_len
            || a.l3 != b.l3
            || a.version != b.version
            || a.dscp != b.dscp
            || a.ttl != b.ttl
            || a.dont_frag != b.dont_frag
            || a.ecn != b.ecn
            || seg.th != h.th
            || frame[a.l4 + 12] != template[a.l4 + 12]
            || (seg.flags & !(flags::PSH | flags::FIN)) != h.flags
            || SeqNumber(seg.ack).is_before(SeqNumber(h.ack))
            || seg.tsval_at != h.tsval_at
            || frame[..a.l3] != template[..a.l3]
            || (seg.src_port, seg.dst_port)
                != (
                    u16::from_be_bytes([template[a.l4], template[a.l4 + 1]]),
                    u16::from_be_bytes([template[a.l4 + 2], template[a.l4 + 3]]),
                )
            || a.src != b.src
            || a.dst != b.dst
        {
            return false;
        }
        if a.version == px_wire::IpVersion::V6
            && (frame[a.l3 + 1] & 0x0f, &frame[a.l3 + 2..a.l3 + 4])
                != (template[a.l3 + 1] & 0x0f, &template[a.l3 + 2..a.l3 + 4])
        {
            return false;
        }
        let opts = a.l4 + px_wire::tcp::MIN_HEADER_LEN..seg.payload_start();
        match h.tsval_at {
            Some(ts) => {
                let Some((tsval, tsecr)) = ts_values(frame, seg) else { return false };
                let ts = a.l4 + ts;
                SeqNumber(tsval).is_at_or_after(SeqNumber(h.tsval))
                    && SeqNumber(tsecr).is_at_or_after(SeqNumber(h.tsecr))
                    && frame[opts.start..ts] == template[opts.start..ts]
                    && frame[ts + 8..opts.end] == template[ts + 8..opts.end]
            }
            None => frame[opts.clone()] == template[opts],
        }
    }

    use px_wire::tcp::flags;

    proptest! {
        /// A candidate made from the template by changing bytes of its
        /// headers (any of them: fixed fields, lengths, sequence numbers,
        /// options, timestamps) is accepted exactly when the field-by-field
        /// rule accepts it, whether or not it still parses as the same
        /// layout; short payloads take the padded compare.
        #[test]
        fn the_masked_compare_is_the_field_rule(
            v6 in any::<bool>(),
            ts in any::<bool>(),
            payload in prop::sample::select(vec![1usize, 3, 7, 100, 1448]),
            edits in prop::collection::vec((0usize..80, any::<u8>(), 0u8..5), 0..4),
        ) {
            let mut t = Tcp::data(v6, Port::Outer, 1000, 1448);
            if !ts {
                t.opts.clear();
            }
            let template = t.build();
            let info = FrameInfo::parse(&template).unwrap().unwrap();
            let seg = Seg::parse(&template, &info).unwrap();
            let h = Held::start(vec![0u8; HEADROOM + 9000], &template, &seg, 1000, 8948, Instant::now(), 1);
            let hdr = seg.payload_start();
            let mut c = Tcp::data(v6, Port::Outer, 2448, payload);
            if !ts {
                c.opts.clear();
            }
            let mut frame = c.build();
            for (at, value, how) in edits {
                let at = at % hdr;
                let l4 = 14 + if v6 { 40 } else { 20 };
                match how {
                    0 => frame[at] = value,
                    1 => frame[at] ^= 1 << (value % 8),
                    // The flags: ACK with some of those that end or
                    // forbid a merge.
                    2 => frame[l4 + 13] = flags::ACK | value & (flags::PSH | flags::FIN | flags::ECE | flags::CWR),
                    // Move the timestamps (the fields ordered by value).
                    _ if ts => {
                        let at = l4 + 24 + (value as usize % 8);
                        frame[at] = frame[at].wrapping_add(if how == 3 { 1 } else { 0xff });
                    }
                    _ => frame[at] = value,
                }
            }
            let Ok(Some(info)) = FrameInfo::parse(&frame) else { return Ok(()) };
            let Some(seg) = Seg::parse(&frame, &info) else { return Ok(()) };
            let tmpl = &h.buf[HEADROOM - h.hdr_len..HEADROOM];
            prop_assert_eq!(h.accepts(&frame, &seg), accepts_by_fields(&h, tmpl, &frame, &seg));
        }
    }

    #[test]
    fn the_next_segment_is_accepted_and_a_changed_field_is_not() {
        for v6 in [false, true] {
            let template = Tcp::data(v6, Port::Outer, 1000, 1448).build();
            let info = FrameInfo::parse(&template).unwrap().unwrap();
            let seg = Seg::parse(&template, &info).unwrap();
            let h = Held::start(vec![0u8; HEADROOM + 9000], &template, &seg, 1000, 8948, Instant::now(), 1);
            let mut next = Tcp::data(v6, Port::Outer, 2448, 1448);
            next.ack = 5;
            next.window = 7;
            next.ident = 9;
            next.opts = TS.to_vec();
            next.opts[7] = 3; // a newer TSval
            let f = next.build();
            let i = FrameInfo::parse(&f).unwrap().unwrap();
            assert!(h.accepts(&f, &Seg::parse(&f, &i).unwrap()), "v6={v6}");
            let mut ttl = f.clone();
            ttl[14 + if v6 { 7 } else { 8 }] ^= 1;
            let i = FrameInfo::parse(&ttl).unwrap().unwrap();
            assert!(!h.accepts(&ttl, &Seg::parse(&ttl, &i).unwrap()), "v6={v6}: TTL");
        }
    }
}
