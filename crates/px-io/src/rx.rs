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

/// Room a receive slot keeps in front of a frame for the VLAN tag the
/// kernel took out of it (see [`insert_vlan_tag`]).
pub(crate) const VLAN_ROOM: usize = 4;

/// `tp_status` bits of `PACKET_AUXDATA` and of the ring's slot header: the
/// kernel took the frame's outer VLAN tag out (`skb_vlan_untag`, done on
/// receive whether or not a VLAN device exists) and reports it aside.
pub(crate) const TP_STATUS_VLAN_VALID: u32 = 0x10;
pub(crate) const TP_STATUS_VLAN_TPID_VALID: u32 = 0x40;

/// Puts a VLAN tag the kernel moved into the packet's metadata back into
/// the frame: `buf[at + VLAN_ROOM..]` holds the frame without it; the two
/// MAC addresses move `VLAN_ROOM` bytes down and the tag (TPID 0x8100 unless
/// the kernel gave one) goes after them, so the frame (from `at`) is the
/// one that was on the wire and leaves tagged when forwarded. `false` (the
/// frame untouched) if it is too short to carry MAC addresses.
pub(crate) fn insert_vlan_tag(buf: &mut [u8], at: usize, len: usize, status: u32, tci: u16, tpid: u16) -> bool {
    if len < 12 || buf.len() < at + VLAN_ROOM + len {
        return false;
    }
    let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 && tpid != 0 { tpid } else { 0x8100 };
    buf.copy_within(at + VLAN_ROOM..at + VLAN_ROOM + 12, at);
    buf[at + 12..at + 14].copy_from_slice(&tpid.to_be_bytes());
    buf[at + 14..at + 16].copy_from_slice(&tci.to_be_bytes());
    true
}

/// The virtio-net header of a frame that got its VLAN tag back: the offsets
/// into the frame (`csum_start` with `NEEDS_CSUM`, and `hdr_len`) move with
/// the headers they point at.
pub(crate) fn shift_vnet_for_tag(h: &mut [u8; crate::vnet::VNET_HDR_LEN]) {
    let add = |b: &mut [u8]| {
        let v = u16::from_ne_bytes([b[0], b[1]]);
        if v != 0 {
            b.copy_from_slice(&v.saturating_add(VLAN_ROOM as u16).to_ne_bytes());
        }
    };
    if h[0] & 1 != 0 {
        add(&mut h[6..8]);
    }
    add(&mut h[2..4]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_goes_back_after_the_mac_addresses() {
        let frame: Vec<u8> = (1..=20).collect();
        let mut buf = vec![0u8; VLAN_ROOM];
        buf.extend_from_slice(&frame);
        assert!(insert_vlan_tag(&mut buf, 0, frame.len(), TP_STATUS_VLAN_VALID, 0x2064, 0));
        assert_eq!(&buf[..12], &frame[..12]);
        assert_eq!(&buf[12..16], &[0x81, 0x00, 0x20, 0x64]);
        assert_eq!(&buf[16..], &frame[12..]);
        let mut qinq = vec![0u8; VLAN_ROOM];
        qinq.extend_from_slice(&frame);
        assert!(insert_vlan_tag(&mut qinq, 0, 20, TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID, 7, 0x88a8));
        assert_eq!(&qinq[12..16], &[0x88, 0xa8, 0, 7]);
        assert!(!insert_vlan_tag(&mut [0u8; 10], 0, 6, TP_STATUS_VLAN_VALID, 1, 0));
        assert!(!insert_vlan_tag(&mut [0u8; 20], 0, 20, TP_STATUS_VLAN_VALID, 1, 0), "no room");
    }

    #[test]
    fn vnet_offsets_move_with_the_tag() {
        let mut h = [0u8; 10];
        h[0] = 1;
        h[2..4].copy_from_slice(&66u16.to_ne_bytes());
        h[6..8].copy_from_slice(&34u16.to_ne_bytes());
        h[8..10].copy_from_slice(&16u16.to_ne_bytes());
        shift_vnet_for_tag(&mut h);
        assert_eq!(u16::from_ne_bytes([h[2], h[3]]), 70);
        assert_eq!(u16::from_ne_bytes([h[6], h[7]]), 38);
        assert_eq!(u16::from_ne_bytes([h[8], h[9]]), 16, "csum_offset is relative to the start");
        let mut plain = [0u8; 10];
        shift_vnet_for_tag(&mut plain);
        assert_eq!(plain, [0; 10]);
    }

    #[test]
    fn packet_types() {
        assert_eq!(PacketType::from(0), PacketType::Host);
        assert_eq!(PacketType::from(3), PacketType::OtherHost);
        assert_eq!(PacketType::from(4), PacketType::Outgoing);
        assert_eq!(PacketType::from(9), PacketType::Other(9));
    }
}
