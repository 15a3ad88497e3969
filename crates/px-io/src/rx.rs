//! What a receive hands over, whichever way the frames came in (`recvmmsg`
//! into an [`crate::RxBatch`], or the mapped [`crate::RxRing`]): the frame
//! and its metadata ([`RxPacket`]), why a frame cannot be used
//! ([`RxError`]), and [`RxFrames`], the interface both kinds of received
//! batch offer, so a forwarding loop is written once for both.
//!
//! Guarantee: a frame handed out is bounded by its slot, and every problem
//! with a frame is a per-frame [`RxError`], never a panic.

use crate::vnet::{PacketMeta, VnetError};

/// Largest frame a slot must hold: a 64 KB GRO super-packet (IP total
/// length ≤ 65535) plus Ethernet and two VLAN tags.
pub const MAX_FRAME: usize = 65535 + 14 + 8;

/// Why a frame of a received batch cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RxError {
    /// The frame was longer than the slot and was cut.
    #[error("frame of {len} bytes truncated to {cap}")]
    Truncated {
        /// The frame's real length.
        len: usize,
        /// The slot size.
        cap: usize,
    },
    /// Shorter than a virtio-net header: the kernel never does this.
    #[error("{0} bytes: shorter than the virtio-net header")]
    Short(usize),
    /// The virtio-net header is not one we can act on.
    #[error(transparent)]
    Vnet(#[from] VnetError),
    /// Index beyond the frames received in this batch.
    #[error("no frame {0} in this batch")]
    Index(usize),
}

/// Where a received frame was addressed (`sll_pkttype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketType {
    /// To this host's MAC.
    Host,
    /// Broadcast.
    Broadcast,
    /// Multicast.
    Multicast,
    /// To another host (seen because of promiscuous mode, or a veth).
    OtherHost,
    /// Sent by this host (only without `ignore_outgoing`).
    Outgoing,
    /// A type this code does not know.
    Other(u8),
}

impl From<u8> for PacketType {
    fn from(t: u8) -> Self {
        match t {
            0 => PacketType::Host,
            1 => PacketType::Broadcast,
            2 => PacketType::Multicast,
            3 => PacketType::OtherHost,
            4 => PacketType::Outgoing,
            t => PacketType::Other(t),
        }
    }
}

/// A received frame, borrowed from its receive slot (an
/// [`crate::RxBatch`] slot or an [`crate::RxRing`] slot).
#[derive(Debug, Clone, Copy)]
pub struct RxPacket<'a> {
    /// GRO/checksum metadata ([`PacketMeta::PLAIN`] without vnet header).
    pub meta: PacketMeta,
    /// The frame from the Ethernet header on.
    pub frame: &'a [u8],
    /// How the frame was addressed.
    pub pkt_type: PacketType,
}

/// The frames of one received batch, read or rewritten in place by index
/// (`0..len()`, arrival order).
pub trait RxFrames {
    /// Frames in the batch.
    fn len(&self) -> usize;
    /// True if the batch holds no frame.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Frame `i`.
    fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError>;
    /// Frame `i` for in-place rewriting (MSS option, checksums).
    fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_types() {
        assert_eq!(PacketType::from(0), PacketType::Host);
        assert_eq!(PacketType::from(3), PacketType::OtherHost);
        assert_eq!(PacketType::from(4), PacketType::Outgoing);
        assert_eq!(PacketType::from(9), PacketType::Other(9));
    }
}
