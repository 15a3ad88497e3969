//! What the egress allows, computed in one place for every path: a port's
//! MTU, the smaller path MTU learned toward a destination
//! (`crate::pmtu`), and the most TCP payload one segment may carry toward
//! a port, which also bounds what a merge may build.

use core::net::IpAddr;
use std::time::Instant;

use super::Engine;
use crate::buf::HEADROOM;
use crate::port::Port;
use crate::segment::{Layout, Seg};

impl Engine {
    /// The most TCP payload one segment of `seg`'s layout may carry toward
    /// `to`; the one place this is computed, for merges and for forwarding.
    /// Toward the inner port: the inner MSS for this header layout, and no
    /// more than the inner host said it takes (its MSS less the options,
    /// RFC 6691): what a merged segment may carry is also the most any
    /// segment toward the inner host may carry; when the inner host's MSS
    /// is unknown, an outer-sized segment (the safe size). Toward the outer port: the
    /// path MTU toward the destination, and no more than the outer host said
    /// it takes. `flow` is the segment's flow slot, if it has one.
    pub(crate) fn segment_limit(&self, now: Instant, to: Port, seg: &Seg, flow: Option<u32>) -> usize {
        let layout = Layout::of(seg);
        self.segment_limit_for(now, to, &layout, seg.info.dst, flow)
    }

    /// [`Engine::segment_limit`] for a header layout and destination
    /// rather than a segment in hand (the fast path computes it for a
    /// flow's later segments).
    pub(crate) fn segment_limit_for(
        &self,
        now: Instant,
        to: Port,
        layout: &Layout,
        dst: IpAddr,
        flow: Option<u32>,
    ) -> usize {
        let (headers, options) = (layout.headers as usize, layout.options as usize);
        let flow = flow.and_then(|i| self.flows.get(i));
        match to {
            Port::Inner => {
                let mut cap = match flow.and_then(|f| f.conn.handshake.inner_mss) {
                    Some(m) => self.cfg.inner_payload_cap(headers).min((m as usize).saturating_sub(options)),
                    // Nothing known of what the inner host takes (its SYN
                    // was not seen): the safe size, one outer-sized segment,
                    // which it takes if it takes anything from outside.
                    // Such connections (older than the gateway, or lost from
                    // `HandshakeMemory`) pass at the yield of no gateway rather
                    // than risk segments their receiver drops.
                    None => (self.cfg.emtu as usize).saturating_sub(headers),
                };
                if let Some(m) = self.pmtu.get(Port::Inner, dst, now) {
                    // A path MTU learned from the b-network's routers.
                    cap = cap.min((m as usize).saturating_sub(headers));
                }
                cap.min(self.pool.size() - HEADROOM)
            }
            Port::Outer => {
                let mtu = self.egress_mtu(now, Port::Outer, dst);
                let mut cap = (mtu as usize).saturating_sub(headers);
                if let Some(m) = flow.and_then(|f| f.conn.handshake.outer_mss) {
                    cap = cap.min((m as usize).saturating_sub(options));
                }
                cap
            }
        }
    }

    /// The configured MTU of a port (without learned path MTUs).
    pub(crate) fn egress_limit(&self, to: Port) -> u16 {
        match to {
            Port::Inner => self.cfg.imtu,
            Port::Outer => self.cfg.emtu,
        }
    }

    /// The MTU toward `dst` through `to`: the port's, or a smaller path MTU
    /// learned for that direction.
    #[inline]
    pub(crate) fn egress_mtu(&self, now: Instant, to: Port, dst: IpAddr) -> u16 {
        let limit = self.egress_limit(to);
        self.pmtu.get(to, dst, now).map_or(limit, |m| m.min(limit))
    }
}
