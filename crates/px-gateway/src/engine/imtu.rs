//! Toward a neighbour b-network with a verified iMTU (`crate::imtu`,
//! issue 30): packets pass untouched. Both ends use their large MSS (the
//! SYNs are not rewritten), segments are neither merged nor split,
//! caravans are not opened, large packets from the neighbour pass as they
//! came. Only a packet that fits the verified size on the wire (each
//! segment of a super-packet) takes this path; anything larger, and every
//! packet once the prefix is withdrawn, gets the translation as before —
//! a flow that loses its verification mid-stream is one whose handshake
//! the engine did not see: passed at the safe size, no byte lost.
//!
//! ICMP errors about such a flow (a "too big" from a router whose path
//! shrank after the measurement) are passed to the host they are
//! addressed to, as a router passes them: the gateway neither tracks nor
//! sizes these flows, so only the host can act on the error (taken by the
//! gateway instead, as errors about translated TCP are, it would black-hole
//! the flow until the next re-verification). The host validates the
//! error against its own socket (RFC 5927).

use px_wire::icmp;
use px_wire::offload::PacketMeta;
use px_wire::{FrameInfo, IpVersion, Transport};

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
        frame: &[u8],
        info: &FrameInfo,
        meta: PacketMeta,
    ) -> Option<Verdict> {
        let frame_len = frame.len();
        self.imtu.sync();
        // The address outside the b-network: where it goes, or where it
        // came from.
        let outside = match from {
            Port::Inner => info.dst,
            Port::Outer => info.src,
        };
        let mtu = match self.imtu.lookup(outside) {
            Some(m) => m,
            None => return self.verified_icmp_error(from, frame, info, meta),
        };
        if wire_size(info, &meta) > usize::from(mtu) {
            return None;
        }
        self.counters.imtu_passed += 1;
        Some(self.forward(from.other(), frame_len, meta))
    }

    /// An ICMP error whose quoted packet went to (from outside: its
    /// destination) or came from (from inside: its source) a verified
    /// prefix: passed on untouched; `None` for anything else.
    fn verified_icmp_error(&mut self, from: Port, frame: &[u8], info: &FrameInfo, meta: PacketMeta) -> Option<Verdict> {
        if !matches!(info.transport, Transport::Icmp) || info.fragment {
            return None;
        }
        let icmp = frame.get(info.l4..info.end)?;
        let ty = *icmp.first()?;
        let v6 = info.version == IpVersion::V6;
        let error = if v6 { icmp::is_v6_error(ty) } else { icmp::is_v4_error(ty) };
        if !error {
            return None;
        }
        let quoted = icmp::parse_quoted(icmp.get(icmp::HEADER_LEN..)?).ok()?;
        let outside = match from {
            Port::Outer => quoted.dst,
            Port::Inner => quoted.src,
        };
        self.imtu.lookup(outside)?;
        self.counters.imtu_passed += 1;
        Some(self.forward(from.other(), frame.len(), meta))
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
