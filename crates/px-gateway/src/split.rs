//! Forwarding TCP, and outbound splitting: a TCP segment larger than the
//! egress allows (the segment-size limit, `Engine::segment_limit`, computed
//! here for every TCP path) is handed to segmentation offload or cut in
//! software the way a correct TSO cuts it. Every piece carries a copy of
//! the headers with its own sequence number, IP length and (IPv4) an IP ID
//! counting up from the original's; FIN and PSH stay on the last piece
//! only, CWR on the first only; both checksums are recomputed, the
//! payload's in the same pass that copies it.

use std::time::Instant;

use px_wire::IpVersion;
use px_wire::checksum::{self, Sum};
use px_wire::ipv4::Ipv4Packet;
use px_wire::ipv6::Ipv6Packet;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::tcp::{TcpSegment, flags};

use crate::buf::{HEADROOM, Transmit, Verdict};
use crate::engine::Engine;
use crate::port::Port;
use crate::segment::Seg;

impl Engine {
    /// The most TCP payload one segment of `seg`'s layout may carry toward
    /// `to`; the one place this is computed, for merges and for forwarding.
    /// Toward the inner port: the inner MSS for this header layout, and no
    /// more than the inner host said it takes (its MSS less the options,
    /// RFC 6691): what a merged segment may carry is also the most any
    /// segment toward the inner host may carry. Toward the outer port: the
    /// path MTU toward the destination, and no more than the outer host said
    /// it takes. `flow` is the segment's flow slot, if it has one.
    pub(crate) fn segment_limit(&self, now: Instant, to: Port, seg: &Seg, flow: Option<u32>) -> usize {
        let headers = seg.payload_start() - seg.info.l3;
        let options = seg.th - px_wire::tcp::MIN_HEADER_LEN;
        let flow = flow.and_then(|i| self.flows.get(i));
        match to {
            Port::Inner => {
                let mut cap = self.cfg.inner_payload_cap(headers);
                if let Some(m) = flow.and_then(|f| f.inner_mss) {
                    cap = cap.min((m as usize).saturating_sub(options));
                }
                cap.min(self.pool.size() - HEADROOM)
            }
            Port::Outer => {
                let mtu = self.egress_mtu(now, Port::Outer, seg.info.dst);
                let mut cap = (mtu as usize).saturating_sub(headers);
                if let Some(m) = flow.and_then(|f| f.outer_mss) {
                    cap = cap.min((m as usize).saturating_sub(options));
                }
                cap
            }
        }
    }

    /// Forwards a TCP segment toward `to` unchanged, or cut to what the
    /// egress allows (by GSO or in software) if it is larger. `flow` is the
    /// segment's flow slot if the caller knows it (it is looked up otherwise).
    pub(crate) fn forward_tcp(
        &mut self,
        now: Instant,
        to: Port,
        frame: &mut [u8],
        seg: &Seg,
        meta: PacketMeta,
        flow: Option<u32>,
    ) -> Verdict {
        let len = seg.payload_len();
        let allowed = self.segment_limit(now, to, seg, flow);
        let mut limit = allowed;
        // A GRO super-packet passed on unchanged goes back to its own sizes.
        if let Some(g) = meta.tcp_gso_size().filter(|g| *g > 0 && len > *g as usize) {
            limit = limit.min(g as usize);
        }
        let limit = limit.max(8);
        let pieces = len.div_ceil(limit).max(1);
        if to == Port::Inner && len > 0 {
            // Toward the inner port, `allowed` is the inner MSS of this flow.
            let cap = allowed;
            self.counters.inner_tcp_data_out += pieces as u64;
            if len <= limit {
                self.counters.inner_tcp_full_out += (len == cap) as u64;
            } else if limit == cap {
                self.counters.inner_tcp_full_out += (len / limit) as u64;
            }
        }
        if len <= limit {
            return self.forward(to, seg.info.end, PacketMeta::PLAIN);
        }
        let gso_ok = match to {
            Port::Inner => self.cfg.inner_gso,
            Port::Outer => self.cfg.outer_gso,
        };
        // Each piece's checksum is computed from its own bytes, which would
        // hide corruption of a segment nobody verified: check it first. A
        // corrupt segment is cut in software with every piece's checksum
        // spoiled, so that the receiver drops them all, as it would have
        // dropped the whole (invariant 1: never deliver corrupted bytes).
        let corrupt = meta.csum == Checksum::Unknown && self.cfg.verify_checksums && !seg.checksum_ok(frame);
        if corrupt {
            self.counters.bad_checksum += 1;
        }
        if gso_ok && !corrupt {
            let g = prepare_gso(frame, seg, limit);
            self.counters.gso_out += 1;
            return self.forward(to, seg.info.end, g);
        }
        self.counters.split_in += 1;
        let mut off = 0;
        let mut i = 0;
        while off < len {
            let n = limit.min(len - off);
            let mut buf = self.pool.get();
            let end = write_piece(frame, seg, i, off, n, off + n == len, &mut buf);
            if corrupt {
                // Off by one in the sum: can never verify.
                buf[seg.info.l4 + 17] ^= 1;
            }
            self.counters.split_out += 1;
            self.queue(Transmit { port: to, buf, start: 0, end, meta: PacketMeta::PLAIN });
            off += n;
            i += 1;
        }
        Verdict::Consumed
    }
}

/// Writes piece `i` of `seg` (payload `[off, off + len)`) into `out`,
/// returning its length. `out` must hold the headers and `len` bytes.
fn write_piece(frame: &[u8], seg: &Seg, i: usize, off: usize, len: usize, last: bool, out: &mut [u8]) -> usize {
    let hdr = seg.payload_start();
    let info = &seg.info;
    out[..hdr].copy_from_slice(&frame[..hdr]);
    let src = &frame[hdr + off..hdr + off + len];
    let psum = checksum::copy_and_sum(&mut out[hdr..hdr + len], src);
    let l4_len = seg.th + len;
    let pseudo = match info.version {
        IpVersion::V4 => {
            let mut ip = Ipv4Packet::new_unchecked(&mut out[info.l3..]);
            ip.set_total_len((info.l4 - info.l3 + l4_len) as u16);
            ip.set_ident(ip.ident().wrapping_add(i as u16));
            ip.fill_checksum();
            checksum::pseudo_v4(ip.src(), ip.dst(), 6, l4_len as u16)
        }
        IpVersion::V6 => {
            let mut ip = Ipv6Packet::new_unchecked(&mut out[info.l3..]);
            ip.set_payload_len((info.l4 - info.l3 - px_wire::ipv6::HEADER_LEN + l4_len) as u16);
            px_wire::checksum::pseudo_v6(ip.src(), ip.dst(), 6, l4_len as u32)
        }
    };
    let mut f = seg.flags;
    if !last {
        f &= !(flags::FIN | flags::PSH);
    }
    if i != 0 {
        f &= !flags::CWR;
    }
    let mut tcp = TcpSegment::new_unchecked(&mut out[info.l4..]);
    tcp.set_seq(seg.seq.wrapping_add(off as u32));
    tcp.set_flags(f);
    tcp.set_checksum(0);
    let c = pseudo.plus(Sum::of(&out[info.l4..hdr])).plus(psum.at_offset(seg.th)).checksum();
    out[info.l4 + 16..info.l4 + 18].copy_from_slice(&c.to_be_bytes());
    hdr + len
}

/// Prepares `frame` in place for segmentation offload: checksum field set to
/// the folded pseudo-header sum (the `CHECKSUM_PARTIAL` convention).
/// Returns the transmit metadata: cut into `mss`-byte pieces, checksum to
/// be completed from the TCP header on.
fn prepare_gso(frame: &mut [u8], seg: &Seg, mss: usize) -> PacketMeta {
    let l4_len = seg.info.end - seg.info.l4;
    let pseudo = seg.pseudo(frame, l4_len);
    let l4 = seg.info.l4;
    frame[l4 + 16..l4 + 18].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
    PacketMeta::tcp_gso(seg.info.version == IpVersion::V6, mss as u16, l4 as u16, seg.payload_start() as u16)
}
