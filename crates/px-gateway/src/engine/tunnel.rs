//! The engine's side of offloaded frames it does not translate (tunnel
//! super-packets, inner partial checksums, UDP GRO batches): each is cut
//! back into the frames it was made of, and each piece is routed as the
//! received frame would have been. What the frames look like and how a
//! piece is written is `crate::tunnel`'s.

use std::time::Instant;

use px_wire::checksum::{self, Sum};
use px_wire::offload::{Checksum, Gso, GsoKind, PacketMeta, complete_partial};
use px_wire::{FrameInfo, IpVersion, Transport};
use px_wire::{at, udp};

use super::Engine;
use crate::buf::{Transmit, Verdict};
use crate::counters::DropReason;
use crate::port::Port;
use crate::tunnel::{Encap, Piece, out_headers, set_ip_lengths, write_tunnel_piece};
impl Engine {
    /// A frame [`is_offloaded`]: cut into the frames it was made of (tunnel
    /// super-packets, UDP GRO batches), or its inner checksum completed,
    /// then routed as any other frame.
    pub(crate) fn route_offloaded(
        &mut self,
        now: Instant,
        from: Port,
        frame: &mut [u8],
        info: &FrameInfo,
        mut meta: PacketMeta,
    ) -> Verdict {
        if let Some(g) = meta.gso {
            if g.size == 0 {
                // Segments of no bytes: no cut ends. Linux refuses such a
                // header (`virtio_net_hdr_to_skb`: -EINVAL), and so does
                // px-io; the engine, which takes any metadata, drops it.
                return self.drop(DropReason::Malformed);
            }
            match (g.kind, info.transport) {
                (GsoKind::UdpL4, Transport::Udp { .. }) if !info.fragment => {
                    return self.split_udp_batch(now, from, frame, info, g);
                }
                (GsoKind::TcpV4 | GsoKind::TcpV6, _) => {
                    if let Some(e) = Encap::parse(frame, info) {
                        return self.segment_tunnel(now, from, frame, info, &e, g);
                    }
                }
                _ => {}
            }
            // GSO of a kind the engine cannot cut: whole if it fits, as one
            // IP packet (fragments) if a router may cut it so; never an ICMP
            // error about a size the sender never sent.
            let mtu = self.egress_mtu(now, from.other(), info.dst) as usize;
            if info.ip_len() > mtu && (info.dont_frag || info.version == IpVersion::V6) {
                return self.drop(DropReason::TooBigUncuttable);
            }
            meta.gso = None;
        }
        if let Checksum::Partial { start, .. } = meta.csum
            && start as usize > info.l4
        {
            // The inner checksum, over the packet without a trailer; a
            // field past the packet is left as it came.
            let _ = complete_partial(&mut frame[..info.end], meta.csum);
            meta.csum = Checksum::Unknown;
        }
        self.route_non_tcp(now, from, frame, info, meta)
    }

    /// Cuts a tunnel super-packet into the frames it was made of.
    fn segment_tunnel(
        &mut self,
        now: Instant,
        from: Port,
        frame: &[u8],
        info: &FrameInfo,
        e: &Encap,
        g: Gso,
    ) -> Verdict {
        let hdr = e.inner_l4 + e.th;
        let len = info.end - hdr;
        // Never more than a pool buffer holds (cutting smaller is valid TSO).
        let size = (g.size as usize).min(self.pool.size().saturating_sub(hdr));
        if size == 0 {
            return self.drop(DropReason::TooBigUncuttable);
        }
        let zero_udp =
            info.version == IpVersion::V4 && e.udp.is_some_and(|u| frame[at(u, udp::field::CHECKSUM)] == [0, 0]);
        let before = Outcomes::of(self);
        let (mut off, mut i) = (0, 0);
        while off < len {
            let n = size.min(len - off);
            let mut buf = self.pool.get(hdr + n);
            let end =
                write_tunnel_piece(frame, info, e, Piece { i, off, len: n, last: off + n == len }, zero_udp, &mut buf);
            self.counters.split_out += 1;
            self.route_piece(now, from, buf, end);
            off += n;
            i += 1;
        }
        before.one_input(self)
    }

    /// Cuts a UDP GRO batch into its datagrams (`g.size` payload bytes each,
    /// the last shorter), each routed as any single datagram.
    fn split_udp_batch(&mut self, now: Instant, from: Port, frame: &[u8], info: &FrameInfo, g: Gso) -> Verdict {
        let hdr = info.l4 + udp::HEADER_LEN;
        let len = info.end - hdr;
        let size = g.size as usize;
        if size == 0 || hdr + size > self.pool.size() {
            return self.drop(DropReason::TooBigUncuttable);
        }
        let before = Outcomes::of(self);
        let (mut off, mut i) = (0, 0);
        while off < len || (len == 0 && i == 0) {
            let n = size.min(len - off);
            let mut buf = self.pool.get(hdr + n);
            out_headers(&mut buf, frame, hdr);
            let psum = checksum::copy_and_sum_in(&mut buf[hdr..hdr + n], frame, hdr + off..hdr + off + n);
            let end = hdr + n;
            let l4_len = end - info.l4;
            let pseudo = set_ip_lengths(&mut buf, info.l3, info.version, end, i);
            let u = &mut buf[info.l4..end];
            u[udp::field::LEN].copy_from_slice(&(l4_len as u16).to_be_bytes());
            u[udp::field::CHECKSUM].copy_from_slice(&[0, 0]);
            let mut c = pseudo.plus(Sum(17 + l4_len as u64)).plus(Sum::of(&u[..8])).plus(psum.at_offset(8)).checksum();
            if c == 0 {
                c = 0xffff;
            }
            u[udp::field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
            self.route_piece(now, from, buf, end);
            off += n;
            i += 1;
        }
        before.one_input(self)
    }

    /// Routes a frame the engine built from a received one (a piece of a
    /// super-packet) as the received frame would have been.
    fn route_piece(&mut self, now: Instant, from: Port, mut buf: Vec<u8>, end: usize) {
        let info = match FrameInfo::parse(&buf[..end]) {
            Ok(Some(i)) => i,
            // Cannot happen for a frame cut from a parsed one; counted
            // rather than trusted.
            _ => {
                let _ = self.drop(DropReason::Malformed);
                self.pool.put(buf);
                return;
            }
        };
        match self.route_non_tcp(now, from, &mut buf[..end], &info, PacketMeta::PLAIN) {
            Verdict::Forward { meta } => {
                self.queue_forwarded(Transmit { port: from.other(), buf, start: 0, end, meta });
            }
            // Never for a non-TCP piece; as taken if it ever were.
            Verdict::ForwardPart { .. } | Verdict::Consumed | Verdict::Dropped(_) => self.pool.put(buf),
        }
    }
}

/// The counters that say what became of a received frame, before its
/// pieces were routed. Every received frame has one outcome in the
/// counters (forwarded, merged, cut, fragmented, or dropped by reason):
/// a super-packet cut here counts once, as cut (`split_in`), or, if a piece
/// of it was dropped, as dropped under that piece's reason. What became of
/// the pieces shows in the transmit, fragment and ICMP counters.
struct Outcomes {
    forwarded: u64,
    fragmented_in: u64,
    /// Datagrams of a UDP batch packed into caravans: the batch is one
    /// input (cut), its datagrams show in the caravans' `built_datagrams`.
    packed_in: u64,
    drop: [u64; DropReason::ALL.len()],
}

impl Outcomes {
    fn of(e: &Engine) -> Outcomes {
        let c = &e.counters;
        Outcomes {
            forwarded: c.forwarded,
            fragmented_in: c.fragmented_in,
            packed_in: c.caravan.packed_in,
            drop: c.drop,
        }
    }

    fn one_input(self, e: &mut Engine) -> Verdict {
        let c = &mut e.counters;
        let dropped = c.drop.iter().zip(&self.drop).position(|(now, then)| now != then);
        (c.forwarded, c.fragmented_in, c.caravan.packed_in, c.drop) =
            (self.forwarded, self.fragmented_in, self.packed_in, self.drop);
        match dropped {
            Some(r) => e.drop(DropReason::ALL[r]),
            None => {
                c.split_in += 1;
                Verdict::Consumed
            }
        }
    }
}
