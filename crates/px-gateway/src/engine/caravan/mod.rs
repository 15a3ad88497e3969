//! The engine's side of PX-caravans (what they are and guarantee:
//! `crate::caravan`): which UDP datagrams the caravans take, packing
//! inbound ([`pack`]) and unpacking outbound ([`unpack`]).

mod pack;
mod unpack;

use std::time::Instant;

use px_wire::offload::PacketMeta;
use px_wire::{FrameInfo, Transport};

use super::Engine;
use crate::buf::Verdict;
use crate::caravan::ip::set_ip_header;
use crate::caravan::open::SendReason;
use crate::caravan::prefix::capable;
use crate::flow::FlowKey;
use crate::port::Port;

impl Engine {
    /// The caravan branch of UDP handling. `None`: not the caravans' business,
    /// the caller treats the frame as any other UDP.
    pub(crate) fn caravan_udp(
        &mut self,
        now: Instant,
        from: Port,
        frame: &mut [u8],
        info: &FrameInfo,
        meta: PacketMeta,
    ) -> Option<Verdict> {
        if from == Port::Outer && info.protocol == px_wire::ipv6::next_header::UDP && info.dscp == self.cfg.caravan_dscp
        {
            // At the boundary, for every destination (fragments too): no
            // outside packet may pose as a caravan.
            set_ip_header(&mut frame[info.l3..info.l4], 0, info.ip_len(), None);
            self.counters.caravan.remarked += 1;
        }
        if self.cfg.caravan_prefixes.is_empty() {
            return None;
        }
        let Transport::Udp { src_port, dst_port } = info.transport else { return None };
        match from {
            Port::Outer if capable(&self.cfg, info.dst, dst_port) => {
                let key = FlowKey::of_direction(Port::Outer, info.src, info.dst, src_port, dst_port);
                let packable = !info.fragment && !info.ip_options;
                if packable && let Some(v) = self.pack(now, key, frame, info, meta) {
                    return Some(v);
                }
                // Passing plain: whatever the flow holds goes first.
                self.send_open(key, SendReason::Mismatch, now);
                None
            }
            Port::Inner if info.dscp == self.cfg.caravan_dscp && !info.fragment => {
                Some(self.unpack(now, frame, info, meta, src_port, dst_port))
            }
            _ => None,
        }
    }
}
