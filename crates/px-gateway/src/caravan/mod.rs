//! PX-caravans in the engine (format: `docs/caravan.md`; wire view:
//! `px_wire::caravan`; end-host library: `px-caravan`).
//!
//! - [`prefix`]: which destinations take caravans.
//! - [`pack`] and [`open`]: packing inbound datagrams into open caravans.
//! - [`unpack`]: opening outbound caravans.
//! - [`ip`]: the IP-header work both need.
//!
//! Open caravans wait in the engine's one deadline queue
//! (`crate::timer`), beside the TCP holds.
//!
//! Inbound (outer → inner), UDP toward a caravan-capable destination
//! (`Config::caravan_prefixes` / `caravan_ports`): datagrams of one flow are
//! packed, in arrival order, into one caravan of at most the iMTU, held at
//! most the merge timeout. A datagram that does not fit, or whose headers
//! differ (TTL, TOS, DF, link header, an IPv4 ID out of sequence), sends the
//! open caravan and starts the next. A caravan that ends up with a single
//! datagram leaves as that plain datagram.
//!
//! Inbound UDP that carries the caravan DSCP is remarked to DSCP 0 at the
//! boundary (RFC 2474 §2, the header checksum fixed), whatever its
//! destination, fragments included, whether or not caravans are configured:
//! no outside packet can pose as a caravan to a host that reads them.
//!
//! Outbound (inner → outer), UDP marked with the caravan DSCP: the caravan is
//! validated whole, then unpacked into its datagrams with IP headers rebuilt
//! (length, DSCP 0, a fresh IPv4 ID, header checksum) and the records' own
//! UDP checksums kept; a datagram larger than the egress gets the router
//! treatment (fragments, or ICMP "too big").
//!
//! Guarantees (tests in `tests/caravan*.rs`): every datagram leaves once, its
//! UDP header and payload byte-exact, in the order of its flow; nothing is
//! held longer than the merge timeout; held buffers are bounded by
//! `max_flows` caravans and `max_held_bytes`; every malformed caravan is
//! dropped and counted by reason, never forwarded in part.

mod ip;
pub(crate) mod open;
mod pack;
pub(crate) mod prefix;
mod unpack;

use std::time::Instant;

use px_wire::offload::PacketMeta;
use px_wire::{FrameInfo, Transport};

use self::ip::set_ip_header;
use self::open::SendReason;
use self::prefix::capable;
use crate::buf::Verdict;
use crate::engine::Engine;
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
                let key = FlowKey::new(info.src, info.dst, src_port, dst_port);
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
