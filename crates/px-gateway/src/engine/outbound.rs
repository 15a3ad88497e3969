//! Outbound TCP (inner → outer), and forwarding TCP either way: the SYN's
//! MSS clamped (`track.rs`), then the segment passed on, or cut to what the
//! egress allows: handed to segmentation offload, or cut in software the
//! way a correct TSO cuts it (`crate::split` writes the pieces). The
//! segment-size limit of every TCP path is computed here, once.

use std::time::Instant;

use px_wire::checksum::{self, Sum};
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::tcp;
use px_wire::tcp::flags;

use super::Engine;
use crate::buf::{Transmit, Verdict};
use crate::conntrack::Track;
use crate::flow::FlowKey;
use crate::port::Port;
use crate::segment::Seg;
use crate::split::{PieceSums, cwr_on_every_piece, prepare_gso, write_piece};

impl Engine {
    /// TCP from the inner port: the SYN's MSS clamped, then forwarded (cut
    /// to the egress if larger). MD5/AO segments and SYNs that start no
    /// connection pass untouched (`crate::mss`).
    pub(crate) fn outbound_tcp(&mut self, now: Instant, frame: &mut [u8], seg: &Seg, meta: PacketMeta) -> Verdict {
        let key = FlowKey::of_segment(seg, frame, Port::Inner);
        let flow = if seg.has(flags::SYN) {
            Some(self.flow_for(key, now))
        } else {
            match self.flows.peek(&key) {
                Some(i) => Some(i),
                // A connection returning after its entry was dropped (idle,
                // evicted): it gets its handshake's MSSs and ECN mode back.
                None if self.handshakes.holds(&key) => Some(self.flow_for(key, now)),
                None => None,
            }
        };
        if let Some(i) = flow
            && self.before_user_space(i, seg, Port::Inner, now)
        {
            return self.forward_tcp(now, Port::Outer, frame, seg, meta, flow);
        }
        let track = match flow {
            Some(i) => self.track(i, frame, seg, Port::Inner, now),
            None if seg.signed => Track::Signed,
            None => Track::Plain,
        };
        if let Some(f) = flow.and_then(|i| self.flows.get_mut(i)) {
            f.stats.record(Port::Inner, seg.payload_len(), meta.tcp_gso_size().map_or(seg.payload_len(), usize::from));
            f.conn.on_synack_ecn(frame, seg);
            if seg.payload_len() > 0 {
                f.merge.psh.on_inner_data();
            }
        }
        if track != Track::Plain {
            return self.route_sized(now, Port::Inner, frame, seg.info);
        }
        if let Some(i) = flow {
            self.count_for_fast_path(i, seg, Port::Inner, meta.tcp_gso_size(), now);
        }
        self.forward_tcp(now, Port::Outer, frame, seg, meta, flow)
    }

    /// Forwards a TCP segment toward `to` unchanged, or cut to what the
    /// egress allows (by GSO or in software) if it is larger. `flow` is the
    /// segment's flow slot; `None` when the caller's lookup found no flow (an
    /// untracked connection: nothing is looked up again here).
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
            // Where the handshake was not seen, it is only the safe size:
            // the yield counts conversion to the inner MSS, so such a
            // flow's segments are never counted full.
            let known = flow.and_then(|i| self.flows.get(i)).is_some_and(|f| f.conn.handshake.inner_mss.is_some());
            let cap = if known { allowed } else { usize::MAX };
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
        // hide corruption of a segment nobody verified: it is verified, and
        // a corrupt segment is cut in software with every piece's checksum
        // spoiled, so that the receiver drops them all, as it would have
        // dropped the whole (invariant 1: never deliver corrupted bytes).
        // The software cut verifies from the pieces' own sums (below), so
        // the payload is read once; GSO is verified first, by a read.
        let verify = meta.csum == Checksum::Unknown && self.cfg.verify_checksums;
        let keep_cwr =
            cwr_on_every_piece(flow.and_then(|i| self.flows.get(i)).is_some_and(|f| f.conn.handshake.accecn));
        // The bytes whose pieces keep CWR: in an AccECN flow, those of the
        // first segment, which is the whole segment unless it is a GRO
        // super-packet. Linux GRO never merges a segment with CWR onto
        // another (`tcp_gro_receive` flushes on it), so only a
        // super-packet's first segment can have carried CWR; its later
        // segments, had they gained it, would report an ACE 2 higher.
        let cwr_span = match meta.tcp_gso_size() {
            _ if !keep_cwr => 0,
            Some(g) if g > 0 && len > g as usize => g as usize,
            _ => len,
        };
        // The virtio header can ask the kernel for CWR on the first piece
        // only (VIRTIO_NET_HDR_GSO_ECN), not on all: AccECN CWR is cut here.
        let gso_ok = gso_ok && !(keep_cwr && seg.has(flags::CWR));
        // SYN, URG and RST pieces need more than GSO does (see the module docs).
        let mut corrupt = false;
        if gso_ok && seg.flags & (flags::SYN | flags::URG | flags::RST) == 0 {
            if !verify || seg.checksum_ok(frame) {
                let g = prepare_gso(frame, seg, limit);
                self.counters.gso_out += 1;
                return self.forward(to, seg.info.end, g);
            }
            corrupt = true;
        }
        self.counters.split_in += 1;
        let first = self.queued();
        let hdr = seg.payload_start();
        checksum::prefetch_lines(&frame[hdr..hdr + len.min(checksum::PREFETCH_AHEAD)]);
        let sums = PieceSums::of(frame, seg);
        let mut payload = Sum::default();
        let mut off = 0;
        let mut i = 0;
        while off < len {
            let n = limit.min(len - off);
            let mut buf = self.pool.get(hdr + n);
            let (end, psum) = write_piece(frame, seg, &sums, i, off, n, off + n == len, cwr_span, &mut buf);
            payload = payload.plus(psum.at_offset(off));
            self.counters.split_out += 1;
            self.queue(Transmit { port: to, buf, start: 0, end, meta: PacketMeta::PLAIN });
            off += n;
            i += 1;
        }
        // The pieces' payload sums add up to the segment's (at their
        // offsets): with the unchanged headers they verify the original
        // checksum without a second read of the payload.
        let corrupt = corrupt || (verify && !seg.checksum_ok_with_payload(frame, payload));
        if corrupt {
            self.counters.bad_checksum += 1;
            for t in self.queued_since(first) {
                // Off by one in the sum: can never verify.
                t.buf[seg.info.l4 + tcp::field::CHECKSUM.end - 1] ^= 1;
            }
        }
        Verdict::Consumed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::test_frames::Tcp;
    use px_wire::FrameInfo;

    fn parsed(f: &[u8]) -> FrameInfo {
        FrameInfo::parse(f).unwrap().unwrap()
    }

    #[test]
    fn segment_limit_is_the_path_and_what_each_host_announced() {
        let now = Instant::now();
        let mut e = Engine::new(Config::default()).unwrap();
        for v6 in [false, true] {
            let f = Tcp::data(v6, Port::Inner, 1, 10).build();
            let info = parsed(&f);
            let seg = Seg::parse(&f, &info).unwrap();
            // 32 bytes of TCP header with timestamps.
            let ip = if v6 { 40 } else { 20 };
            assert_eq!(e.segment_limit(now, Port::Outer, &seg, None), 1500 - ip - 32);
            // No handshake seen: the safe size, an outer-sized segment.
            assert_eq!(e.segment_limit(now, Port::Inner, &seg, None), 1500 - ip - 32);
        }
        // The inner host announces MSS 1000 in its SYN: segments toward it
        // carry at most 1000 less the 12 bytes of options.
        let mut syn = Tcp::data(false, Port::Inner, 0, 0);
        syn.flags = flags::SYN;
        syn.opts = vec![2, 4, 0x03, 0xe8];
        let _ = e.handle_packet(now, Port::Inner, &mut syn.build(), PacketMeta::PLAIN);
        let f = Tcp::data(false, Port::Outer, 1, 10).build();
        let info = parsed(&f);
        let seg = Seg::parse(&f, &info).unwrap();
        let flow = e.flows.peek(&FlowKey::of_segment(&seg, &f, Port::Outer));
        assert!(flow.is_some());
        assert_eq!(e.segment_limit(now, Port::Inner, &seg, flow), 1000 - 12);
    }

    #[test]
    fn forwarding_cuts_in_software_or_hands_off_to_gso() {
        let now = Instant::now();
        for gso in [false, true] {
            let mut e = Engine::new(Config { outer_gso: gso, ..Config::default() }).unwrap();
            let mut f = Tcp::data(false, Port::Inner, 1, 3000).build();
            let info = parsed(&f);
            let seg = Seg::parse(&f, &info).unwrap();
            let hdr = seg.payload_start();
            let v = e.forward_tcp(now, Port::Outer, &mut f, &seg, PacketMeta::PLAIN, None);
            let mut sizes = Vec::new();
            while let Some(t) = e.poll_transmit() {
                assert_eq!(t.port, Port::Outer);
                sizes.push(t.frame().len() - hdr);
            }
            if gso {
                assert_eq!(v, Verdict::Forward { meta: PacketMeta::tcp_gso(false, 1448, 34, hdr as u16) });
                assert!(sizes.is_empty());
                assert_eq!(e.counters.gso_out, 1);
            } else {
                assert_eq!(v, Verdict::Consumed);
                assert_eq!(sizes, [1448, 1448, 104]);
                assert_eq!((e.counters.split_in, e.counters.split_out), (1, 3));
            }
        }
    }
}
