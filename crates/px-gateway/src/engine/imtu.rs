//! Toward a neighbour b-network with a verified iMTU (`crate::imtu`,
//! issue 30): packets pass untouched. Both ends use their large MSS (the
//! SYNs are not rewritten), segments are neither merged nor split,
//! caravans are not opened, large packets from the neighbour pass as they
//! came. Only a packet that fits the verified size on the wire (each
//! segment of a super-packet) takes this path; anything larger, and every
//! packet once the prefix is withdrawn, gets the translation as before —
//! a flow that loses its verification mid-stream is one whose handshake
//! the engine did not see: passed at the safe size, no byte lost.

use px_wire::offload::PacketMeta;
use px_wire::{FrameInfo, Transport};

use super::Engine;
use crate::buf::Verdict;
use crate::port::Port;

impl Engine {
    /// `Some(verdict)` when the frame goes to or comes from a verified
    /// prefix and fits its iMTU; `None`: translate as usual.
    #[inline]
    pub(super) fn verified_passthrough(
        &mut self,
        from: Port,
        frame_len: usize,
        info: &FrameInfo,
        meta: PacketMeta,
    ) -> Option<Verdict> {
        self.imtu.sync();
        // The address outside the b-network: where it goes, or where it
        // came from.
        let outside = match from {
            Port::Inner => info.dst,
            Port::Outer => info.src,
        };
        let mtu = self.imtu.lookup(outside)?;
        if wire_size(info, &meta) > usize::from(mtu) {
            return None;
        }
        self.counters.imtu_passed += 1;
        Some(self.forward(from.other(), frame_len, meta))
    }
}

/// The largest IP packet this frame puts on the wire: the packet itself,
/// or for a super-packet its headers plus one segment.
fn wire_size(info: &FrameInfo, meta: &PacketMeta) -> usize {
    let ip_len = info.end - info.l3;
    let Some(gso) = meta.gso else { return ip_len };
    let l4_hdr = match info.transport {
        Transport::Tcp { header_len, .. } => header_len,
        Transport::Udp { .. } => 8,
        _ => return ip_len,
    };
    ip_len.min(info.l4 - info.l3 + l4_hdr + usize::from(gso.size))
}
