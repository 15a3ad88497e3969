//! The router's treatment, for everything the engine does not translate
//! (what `crate::router` describes): learned path MTUs first, then the
//! caravans' turn, then the packet forwarded as it is if the egress takes
//! it, fragmented (IPv4 without DF), or dropped with an ICMP error. The
//! frames themselves are written by `crate::router::frames`.

use std::time::Instant;

use px_wire::offload::{Checksum, PacketMeta, complete_partial};
use px_wire::udp;
use px_wire::{FrameInfo, IpVersion, Transport};

use super::Engine;
use crate::buf::{MEDIUM, Transmit, Verdict};
use crate::counters::DropReason;
use crate::port::Port;
use crate::router::{answer, frames};
impl Engine {
    /// Everything that is not TCP: learns path MTUs from ICMP, hands UDP to
    /// the caravans, and forwards the rest as a router would (fragments, or
    /// an ICMP error and a drop when too big).
    pub(crate) fn route_non_tcp(
        &mut self,
        now: Instant,
        from: Port,
        frame: &mut [u8],
        info: &FrameInfo,
        meta: PacketMeta,
    ) -> Verdict {
        if info.transport == Transport::Icmp && self.learn_pmtu(now, from, frame, info) {
            // A "too big" about TCP: the gateway's own (`learn`).
            return Verdict::Consumed;
        }
        if let Checksum::Partial { start, offset } = meta.csum
            && !info.fragment
        {
            // Finished for every protocol, as Linux does before a device
            // that cannot (`skb_checksum_help`; SCTP's CRC32c is told by
            // `complete_partial`). UDP's at its own field, whatever the
            // metadata says; any other only at the packet's own L4 header.
            let at = match info.transport {
                Transport::Udp { .. } => Some(udp::field::CHECKSUM.start as u16),
                _ => (usize::from(start) == info.l4).then_some(offset),
            };
            if let Some(offset) = at {
                let _ = complete_partial(&mut frame[..info.end], Checksum::Partial { start: info.l4 as u16, offset });
            }
        }
        if let Some(v) = self.caravan_udp(now, from, frame, info, meta) {
            return v;
        }
        self.route_sized(now, from, frame, info)
    }

    /// Forwards a packet from `from` as it is if the egress takes it;
    /// otherwise as a router would: IPv4 without DF fragmented, anything
    /// else dropped with an ICMP error back to its source.
    pub(crate) fn route_sized(&mut self, now: Instant, from: Port, frame: &mut [u8], info: &FrameInfo) -> Verdict {
        let to = from.other();
        let mtu = self.egress_mtu(now, to, info.dst) as usize;
        if info.ip_len() <= mtu {
            return self.forward(to, info.end, PacketMeta::PLAIN);
        }
        match info.version {
            IpVersion::V4 if !info.dont_frag => self.fragment(to, frame, info, mtu),
            IpVersion::V4 => {
                self.too_big(now, from, frame, info, mtu as u16);
                self.drop(DropReason::TooBigDf)
            }
            IpVersion::V6 => {
                self.too_big(now, from, frame, info, mtu as u16);
                self.drop(DropReason::TooBigV6)
            }
        }
    }

    /// Fragments a received packet to `mtu` toward `to` (RFC 791 §3.2), or
    /// drops it if no fragment could carry data.
    pub(crate) fn fragment(&mut self, to: Port, frame: &[u8], info: &FrameInfo, mtu: usize) -> Verdict {
        if !self.write_fragments(to, frame, info, mtu) {
            return self.drop(DropReason::TooBigUncuttable);
        }
        self.counters.fragmented_in += 1;
        Verdict::Consumed
    }

    /// Queues the fragments of `frame` for `mtu` toward `to`, counted in
    /// `fragments_out`. False, and nothing queued, if `mtu` leaves no room
    /// for data after the headers.
    pub(crate) fn write_fragments(&mut self, to: Port, frame: &[u8], info: &FrameInfo, mtu: usize) -> bool {
        let mut later = [0u8; 40];
        let later_len = frames::later_options(frame, info, &mut later);
        let data_len = info.end - info.l4;
        let first_room = (mtu - info.ip_header_len()) / 8 * 8;
        let later_room = (mtu - 20 - later_len) / 8 * 8;
        if first_room == 0 || later_room == 0 {
            return false;
        }
        let mut off = 0;
        while off < data_len {
            let room = if off == 0 { first_room } else { later_room };
            let n = room.min(data_len - off);
            let mut buf = self.pool.get(info.l4 + n + later_len.max(info.ip_header_len()));
            let end = frames::write_fragment(frame, info, off, n, off + n == data_len, &later[..later_len], &mut buf);
            self.counters.fragments_out += 1;
            self.queue(Transmit { port: to, buf, start: 0, end, meta: PacketMeta::PLAIN });
            off += n;
        }
        true
    }

    pub(crate) fn too_big(&mut self, now: Instant, from: Port, frame: &[u8], info: &FrameInfo, mtu: u16) {
        let have_source = match info.version {
            IpVersion::V4 => self.cfg.icmp_source_v4.is_some(),
            IpVersion::V6 => self.cfg.icmp_source_v6.is_some(),
        };
        if !have_source {
            self.counters.icmp_no_source += 1;
            return;
        }
        if !answer::may_answer_too_big(frame, info) {
            self.counters.icmp_suppressed += 1;
            return;
        }
        if !self.icmp.allow(now, info.src) {
            self.counters.icmp_rate_limited += 1;
            return;
        }
        let mut buf = self.pool.get(MEDIUM);
        let ident = self.icmp_ident;
        if let Some(end) =
            frames::write_too_big(frame, info, mtu, ident, self.cfg.icmp_source_v4, self.cfg.icmp_source_v6, &mut buf)
        {
            // Counting up and never zero (RFC 6864 §4.1: unique while it
            // may be fragmented, DF being clear).
            self.icmp_ident = ident.checked_add(1).unwrap_or(1);
            self.counters.icmp_sent += 1;
            self.queue(Transmit { port: from, buf, start: 0, end, meta: PacketMeta::PLAIN });
        }
    }
}
