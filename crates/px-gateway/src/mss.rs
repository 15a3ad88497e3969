//! MSS arithmetic and the SYN's MSS option rewrite.
//!
//! Inbound (outer → inner) the outer host's MSS option is raised to the
//! inner MSS, so that the inner host sends segments of the iMTU (the engine
//! cuts them on the way out); outbound (inner → outer) the inner host's MSS
//! is clamped to the outer MSS, so that outside hosts send what the eMTU
//! carries (the engine merges them on the way in). What each host announced
//! before the rewrite is kept in the flow's handshake (`crate::conntrack`):
//! no segment toward a host is ever larger than it said it takes (RFC 6691).

use px_wire::IpVersion;
use px_wire::tcp::{TcpOption, TcpSegment};

use crate::segment::Seg;

/// Which way a SYN's MSS option may be rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rewrite {
    /// Up to the target, never down, and never from below the default MSS
    /// ([`default_mss`]): a peer that asks for tiny segments (MSS 1 counts
    /// as 48 at Linux's floor) would have every 8948-byte segment of the
    /// inner host cut into some 250 pieces by the gateway, 250 times the
    /// packet rate of a direct path, on the gateway and the outer link
    /// (issue 27 item 4). Not raised, its MSS reaches the inner host as
    /// announced, and the inner host sends what the peer asked for itself,
    /// as on a direct path. The default MSS is what every host must take,
    /// so a peer at or above it has asked for nothing unusual.
    Raise,
    /// Down to the target, never up.
    Clamp,
}

/// What [`rewrite_mss`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rewritten {
    /// The MSS the host announced (`None`: no option).
    pub announced: Option<u16>,
    /// Whether the option now says the target.
    pub changed: bool,
}

/// What a peer that sent no MSS option may be sent (RFC 9293 §3.7.1: 536;
/// RFC 8200 §8.3: 1220 for IPv6). Also the floor of a raise: an announced
/// MSS below it is not raised (see [`Rewrite::Raise`]).
pub(crate) fn default_mss(version: IpVersion) -> u16 {
    if version == IpVersion::V4 { 536 } else { 1220 }
}

/// The MSS of a host behind a link of `mtu` with option-less IP and TCP
/// headers.
pub(crate) fn mss_for(mtu: u16, version: IpVersion) -> u16 {
    mtu - if version == IpVersion::V4 { 40 } else { 60 }
}

/// The window scale option of a SYN (RFC 7323 §2.2): its shift, `None`
/// when the SYN carries no such option.
pub(crate) fn announced_scale(frame: &[u8], seg: &Seg) -> Option<u8> {
    let t = TcpSegment::new_unchecked(&frame[seg.info.l4..seg.info.end]);
    t.options().find_map(|o| match o {
        Ok((_, TcpOption::WindowScale(s))) => Some(s),
        _ => None,
    })
}

/// The MSS option of a SYN, as announced (`None`: no option).
pub(crate) fn announced_mss(frame: &[u8], seg: &Seg) -> Option<u16> {
    TcpSegment::new_unchecked(&frame[seg.info.l4..seg.info.end]).mss().map(|(m, _)| m)
}

/// Rewrites the segment's MSS option to `target` if `how` allows (the
/// checksum follows, RFC 1624), and says what the host announced.
pub(crate) fn rewrite_mss(frame: &mut [u8], seg: &Seg, target: u16, how: Rewrite) -> Rewritten {
    let mut tcp = TcpSegment::new_unchecked(&mut frame[seg.info.l4..seg.info.end]);
    let floor = default_mss(seg.info.version);
    match tcp.mss() {
        Some((m, _))
            if (how == Rewrite::Raise && m < target && m >= floor) || (how == Rewrite::Clamp && m > target) =>
        {
            let _ = tcp.rewrite_mss(target);
            Rewritten { announced: Some(m), changed: true }
        }
        announced => Rewritten { announced: announced.map(|(m, _)| m), changed: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::Port;
    use crate::test_frames::{Tcp, l4_checksum_ok};
    use px_wire::FrameInfo;
    use px_wire::tcp::flags;

    #[test]
    fn mss_follows_the_mtu() {
        assert_eq!(mss_for(1500, IpVersion::V4), 1460);
        assert_eq!(mss_for(1500, IpVersion::V6), 1440);
        assert_eq!(mss_for(9000, IpVersion::V4), 8960);
        assert_eq!(default_mss(IpVersion::V4), 536);
        assert_eq!(default_mss(IpVersion::V6), 1220);
    }

    #[test]
    fn the_option_moves_only_the_allowed_way_and_the_checksum_follows() {
        for (how, announced, target, want) in [
            (Rewrite::Raise, 1460, 8960, 8960),
            (Rewrite::Raise, 536, 8960, 8960),
            (Rewrite::Raise, 535, 8960, 535),
            (Rewrite::Raise, 1, 8960, 1),
            (Rewrite::Raise, 9000, 8960, 9000),
            (Rewrite::Clamp, 8960, 1460, 1460),
            (Rewrite::Clamp, 1200, 1460, 1200),
        ] {
            let mut syn = Tcp::data(false, Port::Outer, 0, 0);
            syn.flags = flags::SYN;
            syn.opts = [[2, 4], u16::to_be_bytes(announced)].concat();
            let mut f = syn.build();
            let info = FrameInfo::parse(&f).unwrap().unwrap();
            let seg = Seg::parse(&f, &info).unwrap();
            let r = rewrite_mss(&mut f, &seg, target, how);
            assert_eq!(r, Rewritten { announced: Some(announced), changed: want != announced });
            let info = FrameInfo::parse(&f).unwrap().unwrap();
            let seg = Seg::parse(&f, &info).unwrap();
            assert_eq!(announced_mss(&f, &seg), Some(want), "{how:?} {announced} -> {target}");
            assert!(l4_checksum_ok(&f, false, Port::Outer, 6));
        }
        let mut syn = Tcp::data(false, Port::Outer, 0, 0);
        syn.flags = flags::SYN;
        let mut f = syn.build();
        let info = FrameInfo::parse(&f).unwrap().unwrap();
        let seg = Seg::parse(&f, &info).unwrap();
        assert_eq!(rewrite_mss(&mut f, &seg, 8960, Rewrite::Raise), Rewritten { announced: None, changed: false });
    }
}
