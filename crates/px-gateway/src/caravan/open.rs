//! The caravans being filled: one open caravan per UDP flow, its buffer
//! laid out as the packet it will become, and the rules for a datagram to
//! join it.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Instant;

use px_wire::checksum::{Sum, copy_and_sum};
use px_wire::udp;
use px_wire::{FrameInfo, IpVersion};

use crate::flow::FlowKey;
use crate::hash::SeededHash;

/// Why an open caravan is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendReason {
    /// Another datagram of the last one's size would not fit.
    Full,
    /// The merge timeout expired.
    Timeout,
    /// A datagram of the flow could not join (headers, ID, size).
    Mismatch,
    /// Held bytes or open caravans reached their bound.
    Pressure,
    /// The engine was asked to flush everything.
    Shutdown,
}

/// A caravan being filled. The buffer holds the first datagram's link and IP
/// headers at `0..l4`, the outer UDP header's room at `l4..l4 + 8`, then the
/// records up to `end`.
#[derive(Debug)]
pub(crate) struct Open {
    pub buf: Vec<u8>,
    pub l3: usize,
    pub l4: usize,
    pub end: usize,
    pub count: u32,
    /// Sum of the record bytes as they sit in the outer UDP payload.
    pub sum: Sum,
    /// Length of the last record: a caravan that cannot take another of
    /// this size is sent at once (full).
    pub last: usize,
    /// IPv4 ID the next datagram must carry to join (incrementing IDs).
    pub next_ident: u16,
    pub id: u64,
    pub since: Instant,
}

/// The engine's caravan state.
#[derive(Debug)]
pub(crate) struct Caravans {
    pub open: HashMap<FlowKey, Open, SeededHash>,
    pub reserved: usize,
    pub next_id: u64,
    /// IPv4 ID source for datagrams rebuilt from caravans (RFC 6864 §4.2:
    /// the gateway is their IP-layer source).
    pub ident: u16,
}

impl Caravans {
    pub(crate) fn new() -> Caravans {
        Caravans {
            // The flow table's hash, seeded at random per engine so that
            // outside senders cannot aim their flows at one bucket.
            open: HashMap::with_hasher(SeededHash(RandomState::new().hash_one(0x5eed_u64))),
            reserved: 0,
            next_id: 1,
            ident: 0x5a5a,
        }
    }
}

/// Appends one record (`sum`: its bytes' sum if already known) and says
/// whether the caravan is now full: another record of this size would not
/// fit `limit` (the largest IP packet).
pub(crate) fn append(o: &mut Open, rec: &[u8], sum: Option<Sum>, ident: u16, limit: usize) -> bool {
    let dst = &mut o.buf[o.end..o.end + rec.len()];
    let sum = match sum {
        Some(s) => {
            dst.copy_from_slice(rec);
            s
        }
        None => copy_and_sum(dst, rec),
    };
    o.sum = o.sum.plus(sum.at_offset(o.end - o.l4 - udp::HEADER_LEN));
    o.end += rec.len();
    o.count += 1;
    o.last = rec.len();
    o.next_ident = ident.wrapping_add(1);
    o.end + o.last > o.l3 + limit
}

/// Whether a datagram (headers `new[..l4]`) may join a caravan whose first
/// datagram had headers `first`: same link header and IP header but for
/// the length, ID and checksum fields, and, over IPv4 without DF, the next
/// ID in sequence (as Linux GRO requires; with DF the datagram is atomic,
/// RFC 6864 §4.1, and its ID carries nothing).
pub(crate) fn same_headers(first: &[u8], new: &[u8], info: &FrameInfo, next_ident: u16, ident: u16) -> bool {
    let l3 = info.l3;
    if first.len() != new.len() || first[..l3] != new[..l3] {
        return false;
    }
    let (a, b) = (&first[l3..], &new[l3..]);
    match info.version {
        // ver/IHL, TOS | flags+offset, TTL, protocol | addresses, options.
        IpVersion::V4 => {
            use px_wire::ipv4::field::{CHECKSUM, FLG_OFF, LEN, SRC};
            a[..LEN.start] == b[..LEN.start]
                && a[FLG_OFF.start..CHECKSUM.start] == b[FLG_OFF.start..CHECKSUM.start]
                && a[SRC.start..] == b[SRC.start..]
                && (info.dont_frag || ident == next_ident)
        }
        // version, class, flow label | next header, hop limit, addresses.
        IpVersion::V6 => {
            use px_wire::ipv6::field::{NEXT_HEADER, PAYLOAD_LEN};
            a[..PAYLOAD_LEN.start] == b[..PAYLOAD_LEN.start] && a[NEXT_HEADER..] == b[NEXT_HEADER..]
        }
    }
}
