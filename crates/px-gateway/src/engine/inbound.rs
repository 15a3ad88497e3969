//! Inbound TCP (outer → inner): the segment's connection is tracked
//! (`track.rs`), the merge decides (`crate::merge::decide`: join or pass,
//! and why), and the engine carries it out here: a passing segment goes on
//! after whatever the flow holds; a joining one is copied into the flow's
//! hold (`hold.rs`), or, when nothing is held, the whole inner-MSS pieces
//! of a GRO super-packet go on as one GSO frame rewritten in place
//! (`docs/merge.md`).

use std::time::Instant;

use px_wire::checksum::Sum;
use px_wire::offload::PacketMeta;
use px_wire::tcp::{TcpSegment, flags};

use super::Engine;
use crate::buf::Verdict;
use crate::config::PshPolicy;
use crate::conntrack::Track;
use crate::counters::FlushReason;
use crate::flow::FlowKey;
use crate::merge::decide::{PSH_GRACE, Pass, Plan, decide};
use crate::merge::held::{set_ip_length, split_sum, ts_values};
use crate::port::Port;
use crate::segment::Seg;
use crate::timer::Timer;

/// How one segment joins its flow's holds: what [`Plan`] decided, with
/// what the filling loop reads of the segment.
struct Join<'s, 'i> {
    seg: &'s Seg<'i>,
    /// The most payload one inner segment may carry.
    cap: usize,
    /// TSval and TSecr, if the segment has timestamps.
    ts: Option<(u32, u32)>,
    /// The flags that end the merge on the segment's last byte.
    ends: u8,
}

impl Engine {
    /// TCP from the outer port: merged into held inner-MSS segments if the
    /// flow is bulk and the segment may join, otherwise passed on (after
    /// whatever the flow holds).
    pub(crate) fn inbound_tcp(&mut self, now: Instant, frame: &mut [u8], seg: &Seg, meta: PacketMeta) -> Verdict {
        let key = FlowKey::of_segment(seg, frame, Port::Outer);
        let idx = self.flow_for(key, now);
        if self.before_user_space(idx, seg, Port::Outer, now) {
            return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
        }
        if let Some(f) = self.flows.get_mut(idx) {
            f.last_seen = now;
            f.stats.record(Port::Outer, seg.payload_len(), meta.tcp_gso_size().map_or(seg.payload_len(), usize::from));
        }
        // SYNs, connection state, MD5/AO: what is not ours to translate, or
        // cannot be this connection's (a SYN that starts nothing, a segment
        // far from the stream, a signature the connection never had),
        // passes untouched and changes nothing, after what the flow holds
        // (as Linux GRO flushes on any segment of the flow that does not
        // join: a blind sender can end a hold early here, one per packet,
        // as it can end the end host's own GRO aggregate).
        match self.track(idx, frame, seg, Port::Outer, now) {
            Track::Plain => {}
            Track::Signed | Track::IgnoredSyn => {
                self.flush_flow(idx, FlushReason::ControlFlag, now);
                return self.route_sized(now, Port::Outer, frame, seg.info);
            }
            Track::Foreign => {
                let control = seg.flags & (flags::SYN | flags::RST | flags::URG) != 0 || seg.signed;
                let why = if control { FlushReason::ControlFlag } else { FlushReason::OutOfOrder };
                self.flush_flow(idx, why, now);
                if seg.signed {
                    return self.route_sized(now, Port::Outer, frame, seg.info);
                }
                return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
            }
        }
        self.count_for_fast_path(idx, seg, Port::Outer, meta.tcp_gso_size(), now);
        let cap = self.segment_limit(now, Port::Inner, seg, Some(idx));
        let decision = match self.flows.get_mut(idx) {
            Some(f) => {
                f.conn.on_synack_ecn(frame, seg);
                let in_order = f.conn.advance_inbound(seg);
                let accecn = f.conn.handshake.accecn;
                decide(&mut f.merge, &self.cfg, now, frame, seg, meta, in_order, accecn, cap)
            }
            None => Err(Pass::Control),
        };
        match decision {
            Ok(plan) => self.join(idx, frame, seg, plan, cap, now),
            Err(pass) => {
                if pass == Pass::BadChecksum {
                    self.counters.bad_checksum += 1;
                }
                self.flush_flow(idx, pass.flush_reason(), now);
                self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx))
            }
        }
    }

    /// Carries out a [`Plan`]: the segment's payload fills the flow's holds
    /// (each sent when full), or its whole pieces go on as one GSO frame.
    fn join(&mut self, idx: u32, frame: &mut [u8], seg: &Seg, plan: Plan, cap: usize, now: Instant) -> Verdict {
        if plan.flush_first {
            self.flush_flow(idx, FlushReason::Unmergeable, now);
        }
        self.counters.merged_in += 1;
        let j = Join { seg, cap, ts: ts_values(frame, seg), ends: plan.ends };
        let ends = j.ends;
        let len = seg.payload_len();
        let payload_at = seg.payload_start();
        let mut off = 0;
        let mut rest = plan.whole;
        let mut part = None;
        while off < len {
            let nothing_held = self.flows.get(idx).is_some_and(|f| f.merge.held.is_none());
            if nothing_held && self.cfg.inner_gso && !seg.has(flags::CWR) {
                // A segment that ends the merge (FIN, or a PSH that does not
                // ride) would send its tail at once, and a queued frame
                // leaves before the verdict's: then the tail goes as the GSO
                // frame's last, shorter piece, so the bytes stay in order.
                let gso_bytes = if seg.flags & ends != 0 { len - off } else { (len - off) / cap * cap };
                // More than one piece: a GSO frame of one segment's length
                // is not a GSO frame to the kernel (virtio_net_hdr_to_skb),
                // and is refused.
                if gso_bytes > cap {
                    // A GRO super-packet with more than one inner MSS left
                    // and nothing held: those pieces go on as one GSO frame,
                    // their payload never copied (what a Linux router does
                    // with a super-packet, at the larger size); only the
                    // tail starts a hold.
                    part = Some(self.pass_on_whole_pieces(idx, frame, &j, off..off + gso_bytes, rest, now));
                    break;
                }
            }
            if nothing_held {
                self.start_hold(idx, frame, seg, seg.seq.wrapping_add(off as u32), cap, now);
            }
            let Some(h) = self.flows.get_mut(idx).and_then(|f| f.merge.held.as_mut()) else { break };
            let n = h.room().min(len - off);
            let piece = &frame[payload_at + off..payload_at + off + n];
            let (sum, after) = if off + n == len {
                (rest, Sum(0))
            } else {
                split_sum(&frame[payload_at + off..payload_at + len], n, rest)
            };
            h.append(piece, sum, seg, j.ts);
            // A riding PSH marks the segment that gets the pushed (last) byte.
            h.psh |= ends & flags::PSH == 0 && seg.has(flags::PSH) && off + n == len;
            self.holds.bytes += n;
            rest = after;
            off += n;
            if h.room() == 0 {
                let last_flags = if off == len { seg.flags & ends } else { 0 };
                self.emit_hold(idx, last_flags, None, now);
            }
        }
        if seg.flags & ends != 0 && self.flows.get(idx).is_some_and(|f| f.merge.held.is_some()) {
            self.emit_hold(idx, seg.flags & ends, Some(FlushReason::PshFin), now);
        } else if self.cfg.psh == PshPolicy::Adaptive && seg.has(flags::PSH) {
            // A riding PSH waits for more data only briefly (PSH_GRACE),
            // unless the flow has shown itself a steady bulk sender: then
            // the hold deadline alone bounds the wait.
            if let Some(f) = self.flows.get(idx)
                && let Some(id) = f.merge.held.as_ref().map(|h| h.id)
                && !f.merge.psh.steady_bulk()
            {
                let grace = PSH_GRACE.min(self.cfg.merge_timeout);
                self.deadlines.push_grace(now + grace, Timer::Hold { flow: idx, id });
            }
        }
        part.unwrap_or(Verdict::Consumed)
    }

    /// Passes on the payload bytes `pieces` (from `off`, `whole` bytes) of
    /// `frame` as a GSO frame
    /// of `cap`-byte pieces (whole pieces; or all of the rest, the last
    /// piece shorter, if the segment ends the merge), rewritten in place: the
    /// headers move up to just before that payload, with the pieces' total
    /// length, the sequence number of `off` and a partial checksum. The
    /// tail after the last whole piece (if any) starts a hold first, from
    /// the untouched headers; PSH and FIN stay with the last byte, so the
    /// GSO frame keeps them only if there is no tail (Linux GSO then puts
    /// them on its last piece). `rest` is the sum of the payload from
    /// `off`; `j` says how the segment joins. The input counts as merged (`merged_in`), each piece as a
    /// full merged segment.
    fn pass_on_whole_pieces(
        &mut self,
        idx: u32,
        frame: &mut [u8],
        j: &Join,
        pieces: core::ops::Range<usize>,
        rest: Sum,
        now: Instant,
    ) -> Verdict {
        let (seg, cap, ts, ends) = (j.seg, j.cap, j.ts, j.ends);
        let (off, whole) = (pieces.start, pieces.len());
        let len = seg.payload_len();
        let at = seg.payload_start();
        let tail = len - off - whole;
        if tail > 0 {
            let (_, t) = split_sum(&frame[at + off..at + len], whole, rest);
            self.start_hold(idx, frame, seg, seg.seq.wrapping_add((off + whole) as u32), cap, now);
            if let Some(h) = self.flows.get_mut(idx).and_then(|f| f.merge.held.as_mut()) {
                h.append(&frame[at + off + whole..at + len], t, seg, ts);
                h.psh |= ends & flags::PSH == 0 && seg.has(flags::PSH);
                self.holds.bytes += tail;
            }
        }
        let start = off;
        let end = off + at + whole;
        frame.copy_within(..at, start);
        let g = &mut frame[start..end];
        let info = &seg.info;
        let pseudo = set_ip_length(g, info, seg.th + whole);
        let mut tcp = TcpSegment::new_unchecked(&mut g[info.l4..]);
        tcp.set_seq(seg.seq.wrapping_add(off as u32));
        if tail > 0 {
            tcp.set_flags(seg.flags & !(flags::PSH | flags::FIN));
        }
        // The CHECKSUM_PARTIAL convention: the pseudo-header sum, folded.
        tcp.set_checksum(px_wire::checksum::fold(pseudo));
        let meta = PacketMeta::tcp_gso(info.version == px_wire::IpVersion::V6, cap as u16, info.l4 as u16, at as u16);
        let pieces = whole.div_ceil(cap) as u64;
        self.counters.merged_gso_out += 1;
        self.counters.merged_out += pieces;
        self.counters.inner_tcp_data_out += pieces;
        self.counters.inner_tcp_full_out += (whole / cap) as u64;
        self.counters.count_tx(Port::Inner, end - start);
        Verdict::ForwardPart { meta, start, end }
    }
}
