//! Router behaviour for packets the gateway does not translate (everything
//! but TCP, and UDP the caravans do not take): IPv4 without DF is
//! fragmented (RFC 791 §3.2), anything else too big is dropped with an ICMP
//! error back to its source (RFC 1191 "fragmentation needed" with the
//! next-hop MTU, RFC 4443 "packet too big"), rate-limited (RFC 1812
//! §4.3.2.8, RFC 4443 §2.4(f)). ICMP errors from outside teach the engine
//! path MTUs (`learn_pmtu`, kept in `crate::pmtu`).
//!
//! - [`frames`]: writing fragments and ICMP errors.
//! - [`limit`]: the ICMP rate limit.

mod frames;
pub(crate) mod limit;

use core::net::IpAddr;
use std::time::Instant;

use px_wire::checksum::Sum;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::udp::UdpDatagram;
use px_wire::{FrameInfo, IpVersion, Transport};

use crate::buf::{Transmit, Verdict};
use crate::counters::DropReason;
use crate::engine::Engine;
use crate::port::Port;

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
        if from == Port::Outer && info.transport == Transport::Icmp {
            self.learn_pmtu(now, frame, info);
        }
        if matches!(meta.csum, Checksum::Partial { .. }) {
            complete_partial_udp(frame, info);
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

    /// ICMP "fragmentation needed" / "packet too big" from outside about a
    /// packet toward `dst` lowers the size the engine cuts to for `dst`.
    fn learn_pmtu(&mut self, now: Instant, frame: &[u8], info: &FrameInfo) {
        let Ok(m) = px_wire::icmp::IcmpMessage::new_checked(&frame[info.l4..info.end]) else { return };
        let (dst, mtu) = match info.version {
            IpVersion::V4 => match (m.v4_next_hop_mtu(), px_wire::icmp::quoted_v4_dst(m.quoted())) {
                (Some(mtu), Ok(d)) if m.verify_checksum(Sum(0)) => (IpAddr::V4(d), mtu),
                _ => return,
            },
            IpVersion::V6 => {
                let pseudo = px_wire::checksum::pseudo_v6(
                    match info.src {
                        IpAddr::V6(a) => a,
                        IpAddr::V4(_) => return,
                    },
                    match info.dst {
                        IpAddr::V6(a) => a,
                        IpAddr::V4(_) => return,
                    },
                    58,
                    (info.end - info.l4) as u32,
                );
                match (m.v6_mtu(), px_wire::icmp::quoted_v6_dst(m.quoted())) {
                    (Some(mtu), Ok(d)) if m.verify_checksum(pseudo) => (IpAddr::V6(d), mtu.min(65_535) as u16),
                    _ => return,
                }
            }
        };
        // RFC 8201 §4 / RFC 1191 §3: ignore values below the minimum link
        // MTU, and values that would raise the estimate.
        let floor = if info.version == IpVersion::V4 { 552 } else { 1280 };
        if mtu >= floor && mtu < self.cfg.emtu && self.pmtu.learn(dst, mtu, now) {
            self.counters.pmtu_learned += 1;
        }
    }

    /// The configured MTU of a port (without learned path MTUs).
    pub(crate) fn egress_limit(&self, to: Port) -> u16 {
        match to {
            Port::Inner => self.cfg.imtu,
            Port::Outer => self.cfg.emtu,
        }
    }

    pub(crate) fn egress_mtu(&self, now: Instant, to: Port, dst: IpAddr) -> u16 {
        match to {
            Port::Inner => self.egress_limit(Port::Inner),
            Port::Outer => self.pmtu.get(dst, now).map_or(self.cfg.emtu, |m| m.min(self.cfg.emtu)),
        }
    }

    pub(crate) fn fragment(&mut self, to: Port, frame: &[u8], info: &FrameInfo, mtu: usize) -> Verdict {
        let mut later = [0u8; 40];
        let later_len = frames::later_options(frame, info, &mut later);
        let data_len = info.end - info.l4;
        let first_room = (mtu - info.ip_header_len()) / 8 * 8;
        let later_room = (mtu - 20 - later_len) / 8 * 8;
        if first_room == 0 || later_room == 0 {
            return self.drop(DropReason::TooBigUncuttable);
        }
        self.counters.fragmented_in += 1;
        let mut off = 0;
        while off < data_len {
            let room = if off == 0 { first_room } else { later_room };
            let n = room.min(data_len - off);
            let mut buf = self.pool.get();
            let end = frames::write_fragment(frame, info, off, n, off + n == data_len, &later[..later_len], &mut buf);
            self.counters.fragments_out += 1;
            self.queue(Transmit { port: to, buf, start: 0, end, meta: PacketMeta::PLAIN });
            off += n;
        }
        Verdict::Consumed
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
        if !self.icmp.allow(now) {
            self.counters.icmp_rate_limited += 1;
            return;
        }
        let mut buf = self.pool.get();
        if let Some(end) =
            frames::write_too_big(frame, info, mtu, self.cfg.icmp_source_v4, self.cfg.icmp_source_v6, &mut buf)
        {
            self.counters.icmp_sent += 1;
            self.queue(Transmit { port: from, buf, start: 0, end, meta: PacketMeta::PLAIN });
        }
    }
}

/// A UDP datagram whose checksum field holds only the pseudo-header sum
/// (`CHECKSUM_PARTIAL`) is completed in place.
fn complete_partial_udp(frame: &mut [u8], info: &FrameInfo) {
    if info.fragment || !matches!(info.transport, Transport::Udp { .. }) {
        return;
    }
    let l4_len = info.end - info.l4;
    let pseudo = match (info.src, info.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => px_wire::checksum::pseudo_v4(s, d, 17, l4_len as u16),
        (IpAddr::V6(s), IpAddr::V6(d)) => px_wire::checksum::pseudo_v6(s, d, 17, l4_len as u32),
        _ => return,
    };
    if let Ok(mut u) = UdpDatagram::new_checked(&mut frame[info.l4..info.end]) {
        u.fill_checksum(pseudo);
    }
}
