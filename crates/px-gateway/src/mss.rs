//! MSS rewriting in SYN and SYN-ACK segments.
//!
//! Inbound (outer → inner) the outer host's MSS option is raised to the
//! inner MSS, so that the inner host sends segments of the iMTU (the engine
//! cuts them on the way out); outbound (inner → outer) the inner host's MSS
//! is clamped to the outer MSS, so that outside hosts send what the eMTU
//! carries (the engine merges them on the way in). What each host announced
//! before the rewrite is kept in the flow: no segment toward a host is ever
//! larger than it said it takes (RFC 6691).

use std::time::Instant;

use px_wire::IpVersion;
use px_wire::tcp::TcpSegment;

use crate::engine::Engine;
use crate::segment::Seg;

/// Which way a SYN's MSS option may be rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rewrite {
    /// Up to the target, never down.
    Raise,
    /// Down to the target, never up.
    Clamp,
}

/// The MSS of a host behind a link of `mtu` with option-less IP and TCP
/// headers.
fn mss_for(mtu: u16, version: IpVersion) -> u16 {
    mtu - if version == IpVersion::V4 { 40 } else { 60 }
}

/// What a peer that sent no MSS option may be sent (RFC 9293 §3.7.1: 536;
/// RFC 8200 §8.3: 1220 for IPv6).
fn default_mss(version: IpVersion) -> u16 {
    if version == IpVersion::V4 { 536 } else { 1220 }
}

impl Engine {
    /// An inbound SYN: raises the outer host's MSS option to the inner MSS
    /// and remembers what the outer host announced.
    pub(crate) fn raise_mss(&mut self, idx: u32, frame: &mut [u8], seg: &Seg) {
        let orig = self.rewrite_mss(frame, seg, mss_for(self.cfg.imtu, seg.info.version), Rewrite::Raise);
        if let Some(f) = self.flows.get_mut(idx) {
            // A new handshake resets what was learned about the stream.
            // RFC 9293 §3.7.1 / RFC 8200 §5: what a peer that said nothing
            // may send.
            f.outer_mss = orig.or(Some(default_mss(seg.info.version)));
            f.bulk = false;
            f.full_run = 0;
            f.max_payload = 0;
        }
    }

    /// An outbound SYN: clamps the inner host's MSS option to the outer MSS
    /// and remembers what the inner host announced.
    pub(crate) fn clamp_mss(&mut self, idx: u32, frame: &mut [u8], seg: &Seg, now: Instant) {
        let orig = self.rewrite_mss(frame, seg, mss_for(self.cfg.emtu, seg.info.version), Rewrite::Clamp);
        // No MSS option: the inner host takes only the default MSS, and
        // merged segments must respect it as split ones do outward.
        if let Some(f) = self.flows.get_mut(idx) {
            f.inner_mss = orig.or(Some(default_mss(seg.info.version)));
            f.last_seen = now;
        }
    }

    /// Rewrites the segment's MSS option to `target` if `how` allows, and
    /// returns the MSS the host announced (`None`: no option).
    fn rewrite_mss(&mut self, frame: &mut [u8], seg: &Seg, target: u16, how: Rewrite) -> Option<u16> {
        let mut tcp = TcpSegment::new_unchecked(&mut frame[seg.info.l4..seg.info.end]);
        match tcp.mss() {
            Some((m, _)) if (how == Rewrite::Raise && m < target) || (how == Rewrite::Clamp && m > target) => {
                let _ = tcp.rewrite_mss(target);
                match how {
                    Rewrite::Raise => self.counters.mss_raised += 1,
                    Rewrite::Clamp => self.counters.mss_clamped += 1,
                }
                Some(m)
            }
            Some((m, _)) => Some(m),
            None => {
                self.counters.syn_without_mss += 1;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::port::Port;
    use crate::test_frames::{Tcp, l4_checksum_ok};
    use px_wire::FrameInfo;
    use px_wire::offload::PacketMeta;
    use px_wire::tcp::flags;

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

    #[test]
    fn mss_follows_the_mtu_and_the_rfcs() {
        assert_eq!(mss_for(1500, IpVersion::V4), 1460);
        assert_eq!(mss_for(1500, IpVersion::V6), 1440);
        assert_eq!(mss_for(9000, IpVersion::V4), 8960);
        assert_eq!(default_mss(IpVersion::V4), 536);
        assert_eq!(default_mss(IpVersion::V6), 1220);
    }
}
