//! The simulated packet: an IPv4-like datagram with just the facts the
//! experiments need (size, DF, fragment position, what it carries).
//!
//! `size` is always the IP total length in bytes (header included), the
//! quantity a link MTU limits. Packets are `Copy` and live in the
//! simulator's [`PacketPool`], so forwarding one never allocates.

use serde::Serialize;

/// IPv4 header length assumed for every packet and fragment.
pub const IPV4_HEADER: u32 = 20;
/// Size of an ICMP "fragmentation needed" message: IP + ICMP header + the
/// quoted IP header and 8 bytes (RFC 792).
pub const ICMP_PTB_SIZE: u32 = IPV4_HEADER + 8 + IPV4_HEADER + 8;
/// Most ACK ranges one ACK frame carries (the most recent ones).
pub const MAX_ACK_RANGES: usize = 8;

/// Direction of travel along the simulated path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Dir {
    /// From endpoint A (node 0) toward endpoint B (the last node).
    Forward,
    /// From endpoint B toward endpoint A.
    Reverse,
}

impl Dir {
    /// The opposite direction.
    #[must_use]
    pub fn reverse(self) -> Dir {
        match self {
            Dir::Forward => Dir::Reverse,
            Dir::Reverse => Dir::Forward,
        }
    }
}

/// Position of a fragment inside its original datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragInfo {
    /// Offset of this piece's payload in the original payload, in bytes
    /// (always a multiple of 8, as in IPv4).
    pub offset: u32,
    /// More-fragments flag.
    pub more: bool,
}

impl FragInfo {
    /// True when the packet is a fragment (not a whole datagram).
    #[must_use]
    pub fn is_fragment(&self) -> bool {
        self.offset != 0 || self.more
    }
}

/// Packet-number ranges of an ACK frame, largest range first, inline so an
/// ACK never allocates. Each range is inclusive `(low, high)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckRanges {
    len: u8,
    ranges: [(u64, u64); MAX_ACK_RANGES],
}

impl AckRanges {
    /// Appends a range below the ones already present; returns false (and
    /// drops it) when the frame is full.
    pub fn push(&mut self, low: u64, high: u64) -> bool {
        let i = usize::from(self.len);
        if i >= MAX_ACK_RANGES {
            return false;
        }
        self.ranges[i] = (low, high);
        self.len += 1;
        true
    }

    /// The ranges, largest first.
    #[must_use]
    pub fn as_slice(&self) -> &[(u64, u64)] {
        &self.ranges[..usize::from(self.len)]
    }

    /// Largest acknowledged packet number.
    #[must_use]
    pub fn largest(&self) -> Option<u64> {
        self.as_slice().first().map(|r| r.1)
    }

    /// True when `pn` is inside one of the ranges.
    #[must_use]
    pub fn contains(&self, pn: u64) -> bool {
        self.as_slice().iter().any(|&(lo, hi)| lo <= pn && pn <= hi)
    }
}

/// What a packet carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// A transport packet carrying stream bytes `[offset, offset + len)`.
    Data {
        /// Transport packet number.
        pn: u64,
        /// Stream offset of the first byte.
        offset: u64,
        /// Number of stream bytes.
        len: u32,
    },
    /// A transport packet that is only padding: a DPLPMTUD probe
    /// (RFC 8899 §4.1: probes need not carry application data).
    Padding {
        /// Transport packet number.
        pn: u64,
    },
    /// A transport acknowledgement.
    Ack {
        /// Packet number of the ACK packet itself (ACKs are not acked).
        pn: u64,
        /// Delay between receiving the largest acked and sending this ACK, µs.
        ack_delay_us: u64,
        /// Acknowledged ranges.
        ranges: AckRanges,
    },
    /// A UDP path-MTU probe (F-PMTUD or classic PMTUD).
    Probe {
        /// Identifies the probe to the prober.
        id: u64,
    },
    /// A responder's answer to a probe.
    ProbeReply {
        /// The probe answered.
        id: u64,
        /// Largest IP length received for the probe (whole packet or
        /// largest fragment).
        largest: u32,
        /// Fragments received (1 when unfragmented).
        fragments: u32,
    },
    /// A UDP datagram whose payload bytes live in a [`crate::datagram::Datagrams`]
    /// store shared by the two endpoints (the packet itself stays `Copy`).
    Udp {
        /// Index of the payload in the store.
        handle: u32,
    },
    /// ICMP "fragmentation needed" / "packet too big" (RFC 1191).
    TooBig {
        /// Next-hop MTU reported by the router.
        mtu: u32,
        /// IP length of the packet that did not fit.
        orig_size: u32,
        /// Payload of the offending packet (what the quoted header reveals).
        orig: QuotedPayload,
    },
}

/// The part of a dropped packet an ICMP error quotes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotedPayload {
    /// A transport packet with this packet number.
    Transport(u64),
    /// A UDP probe with this id.
    Probe(u64),
    /// A UDP datagram (its IP and UDP headers identify it to the sender).
    Udp(u32),
    /// Something else.
    Other,
}

impl Payload {
    /// What an ICMP error about a packet with this payload quotes.
    #[must_use]
    pub fn quoted(&self) -> QuotedPayload {
        match *self {
            Payload::Data { pn, .. } | Payload::Padding { pn } | Payload::Ack { pn, .. } => {
                QuotedPayload::Transport(pn)
            }
            Payload::Probe { id } => QuotedPayload::Probe(id),
            Payload::Udp { handle } => QuotedPayload::Udp(handle),
            _ => QuotedPayload::Other,
        }
    }

    /// A small integer naming the variant, for the trace hash.
    #[must_use]
    pub fn kind(&self) -> u8 {
        match self {
            Payload::Data { .. } => 1,
            Payload::Padding { .. } => 2,
            Payload::Ack { .. } => 3,
            Payload::Probe { .. } => 4,
            Payload::ProbeReply { .. } => 5,
            Payload::TooBig { .. } => 6,
            Payload::Udp { .. } => 7,
        }
    }
}

/// A simulated IPv4 datagram or fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// IP total length in bytes, header included.
    pub size: u32,
    /// Don't Fragment.
    pub df: bool,
    /// Identification, assigned by the simulator when an endpoint sends;
    /// fragments keep their datagram's id.
    pub ip_id: u32,
    /// Fragment position (zero/false for a whole datagram).
    pub frag: FragInfo,
    /// Direction of travel.
    pub dir: Dir,
    /// What it carries (every fragment carries a copy, so a receiver can
    /// tell which datagram a fragment belongs to without reassembly).
    pub payload: Payload,
}

impl Packet {
    /// A whole datagram of `size` bytes; the simulator fills in `ip_id`
    /// and `dir` when it is sent.
    #[must_use]
    pub fn new(size: u32, df: bool, payload: Payload) -> Self {
        Packet { size, df, ip_id: 0, frag: FragInfo::default(), dir: Dir::Forward, payload }
    }
}

/// Splits `pkt` for a link of `mtu` bytes as an IPv4 router does (RFC 791):
/// every piece but the last carries a multiple of 8 payload bytes, as many
/// as fit. Calls `emit` per piece, in offset order. Returns the number of
/// pieces, 0 when `mtu` is too small to carry any payload (a real router
/// never has such an MTU: IPv4 requires 68).
pub fn fragment(pkt: &Packet, mtu: u32, mut emit: impl FnMut(Packet)) -> u32 {
    let payload = pkt.size.saturating_sub(IPV4_HEADER);
    let chunk = mtu.saturating_sub(IPV4_HEADER) / 8 * 8;
    if chunk == 0 {
        return 0;
    }
    let mut done = 0;
    let mut pieces = 0;
    while done < payload {
        let len = chunk.min(payload - done);
        let last = done + len == payload;
        emit(Packet {
            size: len + IPV4_HEADER,
            frag: FragInfo { offset: pkt.frag.offset + done, more: !last || pkt.frag.more },
            ..*pkt
        });
        done += len;
        pieces += 1;
    }
    pieces
}

/// A slab of packets addressed by `u32` handles, reusing freed slots so a
/// steady-state run allocates nothing per packet.
#[derive(Default)]
pub struct PacketPool {
    slots: Vec<Packet>,
    free: Vec<u32>,
}

impl PacketPool {
    /// Stores `pkt` and returns its handle.
    pub fn insert(&mut self, pkt: Packet) -> u32 {
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = pkt;
            i
        } else {
            self.slots.push(pkt);
            u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
        }
    }

    /// Removes and returns the packet behind `handle`.
    pub fn take(&mut self, handle: u32) -> Packet {
        self.free.push(handle);
        self.slots[handle as usize]
    }

    /// Number of packets currently stored.
    #[must_use]
    pub fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn probe(size: u32) -> Packet {
        Packet::new(size, false, Payload::Probe { id: 1 })
    }

    #[test]
    fn fragments_1500_over_1400() {
        let mut out = Vec::new();
        let n = fragment(&probe(1500), 1400, |p| out.push(p));
        assert_eq!(n, 2);
        // 1380 payload bytes fit in 1400 and 1380 is a multiple of 4 but not 8: 1376.
        assert_eq!(out[0].size, 1396);
        assert_eq!(out[0].frag, FragInfo { offset: 0, more: true });
        assert_eq!(out[1].size, 1480 - 1376 + 20);
        assert_eq!(out[1].frag, FragInfo { offset: 1376, more: false });
    }

    #[test]
    fn ack_ranges_are_bounded() {
        let mut r = AckRanges::default();
        for i in 0..MAX_ACK_RANGES as u64 {
            assert!(r.push(100 - 10 * i, 105 - 10 * i));
        }
        assert!(!r.push(0, 1));
        assert_eq!(r.largest(), Some(105));
        assert!(r.contains(95) && !r.contains(99));
    }

    proptest! {
        // Refragmenting pieces keeps the payload exactly covered, offsets
        // 8-aligned and every piece within the MTU.
        #[test]
        fn fragmentation_covers_payload(size in 68u32..9000, m1 in 68u32..9000, m2 in 68u32..9000) {
            let mut first = Vec::new();
            fragment(&probe(size), m1, |p| first.push(p));
            let mut pieces = Vec::new();
            for p in &first {
                if p.size > m2 { fragment(p, m2, |q| pieces.push(q)); } else { pieces.push(*p); }
            }
            let mut expect = 0;
            for (i, p) in pieces.iter().enumerate() {
                prop_assert!(p.size <= m1 && p.size <= m2);
                prop_assert_eq!(p.frag.offset, expect);
                prop_assert_eq!(p.frag.offset % 8, 0);
                prop_assert_eq!(p.frag.more, i + 1 < pieces.len());
                expect += p.size - IPV4_HEADER;
            }
            prop_assert_eq!(expect, size - IPV4_HEADER);
        }
    }
}
