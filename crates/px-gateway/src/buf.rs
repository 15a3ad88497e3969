//! What goes in and out of the engine besides frames: receive metadata,
//! transmit descriptors with optional segmentation offload, and the buffer
//! pool that keeps the hot path free of allocation.

use px_wire::IpVersion;

use crate::counters::{DropReason, Port};

/// Room reserved in front of held payload for the frame's headers
/// (Ethernet with two VLAN tags, IPv4/IPv6 without options, TCP with 40
/// bytes of options: 22 + 40 + 60 = 122).
pub const HEADROOM: usize = 128;

/// How far the I/O layer vouches for the L4 checksum of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxCsum {
    /// The checksum field is complete but nobody checked it.
    #[default]
    Unverified,
    /// The checksum field is complete and the NIC/kernel verified it.
    Verified,
    /// The field holds only the pseudo-header sum (`CHECKSUM_PARTIAL`, as
    /// after kernel GRO); the data was verified on the way in.
    Partial,
}

/// Metadata the I/O layer passes with each received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxMeta {
    pub csum: RxCsum,
    /// For a TCP super-packet built by GRO: the size of the segments it was
    /// made of (the wire MSS), so that it can be cut back if it must pass
    /// unchanged.
    pub gso_size: Option<u16>,
}

/// Segmentation the I/O layer must apply to a frame it sends (virtio-net /
/// `PACKET_VNET_HDR` semantics): cut the TCP payload into `segment_size`
/// pieces. The frame's TCP checksum field then holds the folded pseudo-header
/// sum over the whole TCP length, and the checksum is to be completed from
/// `csum_start` with the result stored at `csum_start + csum_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gso {
    pub version: IpVersion,
    pub segment_size: u16,
    /// Length of all headers up to the TCP payload.
    pub header_len: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

/// A frame the engine produced, to be sent on `port`.
#[derive(Debug)]
pub struct Transmit {
    pub port: Port,
    /// The frame is `buf[start..end]`; give `buf` back with
    /// [`crate::Engine::recycle`] once sent.
    pub buf: Vec<u8>,
    pub start: usize,
    pub end: usize,
    pub gso: Option<Gso>,
}

impl Transmit {
    pub fn frame(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

/// What the caller does with the frame it passed to `handle_packet`.
///
/// Frames the engine queued meanwhile (flushes of held data, pieces, ICMP
/// errors) are ahead of this frame: drain `poll_transmit` first, then act on
/// the verdict, so that order within a flow is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    /// Send the (possibly rewritten in place) input frame out of the other
    /// port, with segmentation offload if `gso` is set.
    Forward { gso: Option<Gso> },
    /// The engine took the bytes (held, merged or cut into queued frames).
    Consumed,
    /// Dropped, and counted under this reason.
    Dropped(DropReason),
}

/// Fixed-size buffers, recycled.
#[derive(Debug)]
pub(crate) struct Pool {
    free: Vec<Vec<u8>>,
    size: usize,
    max_free: usize,
}

impl Pool {
    pub fn new(size: usize, max_free: usize) -> Pool {
        Pool { free: Vec::new(), size, max_free }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// A buffer of exactly `size` bytes (contents unspecified).
    pub fn get(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_else(|| vec![0u8; self.size])
    }

    pub fn put(&mut self, buf: Vec<u8>) {
        if buf.len() == self.size && self.free.len() < self.max_free {
            self.free.push(buf);
        }
    }
}
