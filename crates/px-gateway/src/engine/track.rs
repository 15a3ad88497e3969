//! The engine's side of connection tracking (`crate::conntrack` decides):
//! it applies what a segment tells about its connection, rewrites a taken
//! SYN's MSS option (`crate::mss`), restarts the merge of a new stream,
//! counts, and moves handshakes in and out of the handshake memory as flow
//! entries come and go.

use std::time::Instant;

use px_wire::tcp::flags;

use super::Engine;
use crate::conntrack::{Scale, Syn, Track};
use crate::counters::FlushReason;
use crate::mss::{Rewrite, announced_mss, announced_scale, mss_for, rewrite_mss};
use crate::port::Port;
use crate::segment::Seg;

impl Engine {
    /// Reads what a TCP segment arriving on `from` tells about its flow
    /// (slot `idx`): sequence windows, connection state, SYNs (MSS rewrite,
    /// new connections), MD5/AO. Returns how the segment is to be handled.
    /// A segment from outside that cannot be the connection's changes
    /// nothing ([`Track::Foreign`]).
    #[inline(always)]
    pub(crate) fn track(&mut self, idx: u32, frame: &mut [u8], seg: &Seg, from: Port, now: Instant) -> Track {
        let Some(f) = self.flows.get_mut(idx) else { return Track::Plain };
        if from == Port::Outer && !seg.has(flags::SYN) && f.conn.is_foreign(seg) {
            // Beyond what the engine knows the inner host to allow; the
            // kernel may know more, if it carries the inner host's packets.
            let foreign =
                !self.window_from_kernel(idx, now) || self.flows.get(idx).is_none_or(|f| f.conn.is_foreign(seg));
            if foreign {
                // Nothing of it is believed, not even its ACK.
                self.counters.signed_passed += seg.signed as u64;
                return Track::Foreign;
            }
        }
        let Some(f) = self.flows.get_mut(idx) else { return Track::Plain };
        f.conn.on_sequence(from, seg);
        if seg.has(flags::SYN) {
            return self.track_syn(idx, frame, seg, from, now);
        }
        let t = f.conn.on_segment(seg, from);
        if t == Track::Signed || (t == Track::Foreign && seg.signed) {
            self.counters.signed_passed += 1;
        }
        t
    }

    /// [`Engine::track`] for a SYN: a new connection on the tuple, the MSS
    /// rewrite, or a SYN that starts none.
    #[inline(never)]
    fn track_syn(&mut self, idx: u32, frame: &mut [u8], seg: &Seg, from: Port, now: Instant) -> Track {
        let Some(f) = self.flows.get_mut(idx) else { return Track::Plain };
        match f.conn.on_syn(
            seg,
            from,
            announced_mss(frame, seg),
            announced_scale(frame, seg).map_or(Scale::Absent, Scale::Shift),
        ) {
            Syn::Ignored => {
                self.counters.syns_ignored += 1;
                return Track::IgnoredSyn;
            }
            Syn::Taken { restart } => {
                if restart {
                    f.merge.restart();
                }
            }
        }
        let signed = f.conn.life.signed;
        // What the old connection left held goes first.
        self.flush_flow(idx, FlushReason::ControlFlag, now);
        let announced = if signed {
            self.counters.signed_passed += 1;
            announced_mss(frame, seg)
        } else {
            let (target, how) = match from {
                Port::Outer => (mss_for(self.cfg.imtu, seg.info.version), Rewrite::Raise),
                Port::Inner => (mss_for(self.cfg.emtu, seg.info.version), Rewrite::Clamp),
            };
            let r = rewrite_mss(frame, seg, target, how);
            match (r.changed, how) {
                (true, Rewrite::Raise) => self.counters.mss_raised += 1,
                (true, Rewrite::Clamp) => self.counters.mss_clamped += 1,
                _ => {}
            }
            self.counters.syn_without_mss += r.announced.is_none() as u64;
            r.announced
        };
        if let Some(f) = self.flows.get_mut(idx) {
            f.conn.on_announced_mss(from, announced, seg.info.version);
            if from == Port::Inner {
                f.last_seen = now;
                let small = self.cfg.untranslatable_inner_mss(f.conn.handshake.inner_mss, seg.info.version);
                self.counters.inner_mss_small += (small.is_some() && !signed) as u64;
            }
        }
        if signed { Track::Signed } else { Track::Plain }
    }

    /// Removes a flow from the table, keeping what its handshake said if
    /// its connection is still alive.
    pub(crate) fn remove_flow(&mut self, idx: u32) {
        // The kernel must not carry a flow the engine forgot.
        if self.flows.get(idx).is_some_and(|f| f.fast.in_kernel()) {
            let now = self.flows.get(idx).map_or_else(Instant::now, |f| f.last_seen);
            self.reclaim(idx, now, super::fast_path::Reclaim::Removed);
        }
        if let Some(f) = self.flows.remove(idx)
            && let Some(h) = f.conn.worth_keeping()
        {
            self.handshakes.keep(&f.key, h);
        }
    }

    /// A new flow entry gets back what its connection's handshake said, if
    /// it was kept; it is then an established connection.
    pub(crate) fn recall_handshake(&mut self, idx: u32) {
        let Some(f) = self.flows.get_mut(idx) else { return };
        if let Some(h) = self.handshakes.recall(&f.key) {
            f.conn.resume(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::test_frames::{Tcp, l4_checksum_ok};
    use px_wire::FrameInfo;
    use px_wire::offload::PacketMeta;
    use px_wire::tcp::TcpSegment;

    /// The MSS option of a SYN after the engine saw it, and whether its
    /// checksum still verifies.
    fn through(e: &mut crate::Engine, from: Port, mss: u16) -> (u16, bool) {
        let mut syn = Tcp::data(false, from, 0, 0);
        syn.flags = flags::SYN;
        syn.opts = [[2, 4], mss.to_be_bytes()].concat();
        let mut f = syn.build();
        let _ = e.handle_packet(Instant::now(), from, &mut f, PacketMeta::PLAIN);
        let info = FrameInfo::parse(&f).unwrap().unwrap();
        let m = TcpSegment::new_checked(&f[info.l4..]).unwrap().mss().unwrap().0;
        (m, l4_checksum_ok(&f, false, from, 6))
    }

    #[test]
    fn syns_are_raised_inbound_and_clamped_outbound() {
        let mut e = crate::Engine::new(Config::default()).unwrap();
        assert_eq!(through(&mut e, Port::Outer, 1460), (8960, true));
        assert_eq!(through(&mut e, Port::Inner, 8960), (1460, true));
        assert_eq!(through(&mut e, Port::Inner, 1200), (1200, true), "never raised outbound");
        assert_eq!(through(&mut e, Port::Outer, 9000), (9000, true), "never lowered inbound");
        let c = e.counters();
        assert_eq!((c.mss_raised, c.mss_clamped, c.syn_without_mss), (1, 1, 0));
    }
}
