//! The merge policy: which inbound segments are held, for how long, and
//! when a hold is sent. Bulk detection (in-order full-sized segments in a
//! row), the flags and events that flush (FIN, PSH for flows that wait after
//! it, control flags, pure ACKs, reordering, a segment that cannot join),
//! the hold deadline and memory pressure (the oldest holds go first) are
//! all here; [`super::held`] is the segment being filled and decides which
//! pieces may join (ECN, flags, options, timestamps).
//!
//! PSH (issue 11; the reasoning and measurements are in docs/merge.md).
//! RFC 1122 §4.2.2.2: PSH is not a record marker, a receiver may merge
//! across it. What the anchors do: Linux GRO merges the PSH segment into
//! the aggregate and then flushes; DPDK GRO 22.11 does not merge PSH
//! segments at all, 24.03+ merges them and flushes at the next timeout;
//! FreeBSD LRO merges across PSH; mlx5 hardware LRO ORs PSH into the
//! aggregate and holds for 32 µs. The gateway is in the LRO class (what it
//! merges is never cut back downstream), so:
//! - the PSH segment always joins the aggregate, and the merged segment
//!   that holds the PSH'd byte (its last) carries PSH;
//! - a flow whose recent PSHs were followed by more data within the merge
//!   timeout (a bulk sender: Linux sets PSH at the end of every write, about
//!   every 64 KB, and the next write follows at once) merges on across PSH,
//!   within the hold bound: flushing there caps the yield near 7/8;
//! - a flow whose PSH was followed by silence, or by data from the inner
//!   host (request/response: the sender waits for an answer; on a short
//!   path the next answer may come well within the timeout, but only after
//!   the inner host asked for it), flushes at the PSH, so an answer never
//!   waits for data that will not come. A flow with no history yet flushes.
//!
//! A PSH that rides waits for more data at most [`PSH_GRACE`] (32 µs, as
//! mlx5 LRO holds), not the whole merge timeout: a bulk sender's next
//! segment is microseconds behind, and an answer whose end was taken for
//! bulk waits no longer than that. A steady bulk sender ([`STEADY_BULK`]:
//! eight PSHs in a row followed by its own data in time, no data from the
//! inner host) waits up to the merge timeout: its write often ends a TSO
//! burst, and the next write comes a burst period later.
//!
//! The evidence is per flow ([`Flow::psh_history`]): whether the last two
//! PSHs were followed by more data within the merge timeout with no data
//! from the inner host since. Two, not one: a sender pushes in the middle
//! of a large write too (Linux forces PSH when half a window is unpushed),
//! so one PSH followed by data may still be inside an answer; two in a row
//! since the last request are a bulk transfer (`px lab rr` measured the
//! difference: with one, every 64 KB answer's end waited the PSH grace). A bulk flow that turns interactive is held at
//! most once more (and at most the timeout); a PSH at the end of a TSO
//! burst followed by a pause costs a bulk flow one early flush, not a wait.
//!
//! [`Flow::psh_history`]: crate::flow::Flow::psh_history

use std::time::Instant;

use px_wire::checksum::Sum;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::tcp::flags;

use super::held::{Held, holdable, set_ip_length, split_sum, ts_values};
use crate::buf::{Transmit, Verdict};
use crate::config::PshPolicy;
use crate::counters::FlushReason;
use crate::engine::Engine;
use crate::flow::FlowKey;
use crate::mss::Track;
use crate::port::Port;
use crate::segment::Seg;
use crate::timer::Timer;

/// Smallest segment that counts as full-sized for bulk detection: the
/// default MSS every IPv4 host may send (RFC 9293 §3.7.1). A flow of smaller
/// segments in a row is interactive, not bulk, and is never held.
const BULK_MIN_PAYLOAD: u32 = 536;

/// Longest a pushed byte waits under adaptive PSH (if the merge timeout is
/// not shorter). A bulk sender's next segment after a PSH is in the same
/// burst, microseconds away, so merging goes on; the end of an answer that
/// the flow's history mistook for bulk (an answer written in two writes:
/// the first PSH was followed by more data) waits no longer than this. It
/// is the hold of mlx5's hardware LRO, which ORs PSH into the aggregate.
pub const PSH_GRACE: std::time::Duration = std::time::Duration::from_micros(32);

/// The PSH history of a steady bulk sender: each of its last eight PSHs was
/// followed by more of its data within the merge timeout, with no data from
/// the inner host since. Its riding PSH waits up to the merge timeout, not
/// [`PSH_GRACE`]: a sender whose writes end at a TSO burst's end sends the
/// next write a burst period later (0.26–0.52 ms at 1–2 Gbps), and cutting
/// there costs a short segment every write. An answer could look like this
/// only after eight pushes inside it (Linux pushes when half the largest
/// window is unsent) with no request since, that is a download of several
/// windows; its end waits at most the merge timeout, once, and the next
/// request from the inner host clears the history.
const STEADY_BULK: u8 = u8::MAX;

impl Engine {
    /// TCP from the outer port: merged into held inner-MSS segments if the
    /// flow is bulk and the segment may join, otherwise passed on (after
    /// whatever the flow holds).
    pub(crate) fn inbound_tcp(
        &mut self,
        now: Instant,
        frame: &mut [u8],
        seg: &Seg,
        meta: PacketMeta,
        known: Option<Sum>,
    ) -> Verdict {
        let key = FlowKey::of_segment(seg, frame, Port::Outer);
        let idx = self.flow_for(key, now);
        if let Some(f) = self.flows.get_mut(idx) {
            f.last_seen = now;
        }
        self.track_seq(idx, Port::Outer, seg);
        // SYNs, connection state, MD5/AO (`crate::mss`): what is not ours
        // to translate passes untouched, after what the flow holds.
        if self.track_tcp(idx, frame, seg, Port::Outer, now) != Track::Plain {
            self.flush_flow(idx, FlushReason::ControlFlag, now);
            return self.route_sized(now, Port::Outer, frame, seg.info);
        }
        self.learn_ecn_mode(idx, frame, seg);
        let end = seg.seq.wrapping_add(seg.seq_len());
        let Some(flow) = self.flows.get_mut(idx) else {
            return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
        };
        let in_order = flow.next_seq == Some(seg.seq);
        if flow.next_seq.is_none_or(|n| (end.wrapping_sub(n) as i32) > 0) {
            flow.next_seq = Some(end);
        }
        // CWR ends a merge in a classic ECN flow (RFC 3168: a signal on one
        // segment, as Linux GRO flushes on it); in an AccECN flow it is a
        // bit of the ACE counter and pieces with equal ACE merge.
        let cwr = if flow.accecn { 0 } else { flags::CWR };
        if seg.flags & (flags::SYN | flags::RST | flags::URG | cwr) != 0 {
            self.flush_flow(idx, FlushReason::ControlFlag, now);
            return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
        }
        let len = seg.payload_len();
        // Adaptive PSH: what followed the flow's last PSH, then whether this
        // PSH may ride (the last two were followed by data in time, and the
        // inner host sent nothing since).
        if len > 0 {
            if let Some(t) = flow.psh_at.take() {
                let kept_coming = now.saturating_duration_since(t) <= self.cfg.merge_timeout;
                flow.psh_history = flow.psh_history << 1 | kept_coming as u8;
            }
            if seg.has(flags::PSH) {
                flow.psh_at = Some(now);
            }
        }
        let psh_rides = match self.cfg.psh {
            PshPolicy::Flush => false,
            PshPolicy::Hold => true,
            PshPolicy::Adaptive => flow.psh_history & 0b11 == 0b11,
        };
        if len == 0 {
            if flow.held.is_some() {
                self.flush_flow(idx, FlushReason::PureAck, now);
            }
            return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
        }
        // Bulk detection: in-order segments of the flow's largest size in a
        // row (a GRO super-packet counts as the segments it was made of).
        let unit = meta.tcp_gso_size().map(|g| g as usize).filter(|g| *g > 0).unwrap_or(len).min(len) as u32;
        if in_order && unit >= flow.max_payload && unit >= BULK_MIN_PAYLOAD {
            if unit > flow.max_payload {
                flow.max_payload = unit;
                flow.full_run = 0;
            }
            // A plain segment is one of its own size: no division (a
            // dozen cycles) on every segment.
            let segments = if len as u32 == unit { 1 } else { (len as u32 / unit).max(1) };
            flow.full_run = flow.full_run.saturating_add(segments as u16);
            if flow.full_run >= self.cfg.bulk_after {
                flow.bulk = true;
            }
        } else if !in_order {
            flow.full_run = 0;
        }
        if !in_order {
            self.flush_flow(idx, FlushReason::OutOfOrder, now);
            return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
        }
        if !flow.bulk || !holdable(seg) {
            self.flush_flow(idx, FlushReason::Unmergeable, now);
            return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
        }
        let whole = match (known, meta.csum) {
            (Some(s), _) => s,
            (None, Checksum::Unknown) if self.cfg.verify_checksums => {
                if !seg.checksum_ok(frame) {
                    self.counters.bad_checksum += 1;
                    self.flush_flow(idx, FlushReason::Unmergeable, now);
                    return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
                }
                seg.payload_sum_from_checksum(frame)
            }
            (None, _) => seg.payload_sum_from_checksum(frame),
        };
        let accepts = self.flows.get(idx).and_then(|f| f.held.as_ref()).is_none_or(|h| h.accepts(frame, seg));
        if !accepts {
            self.flush_flow(idx, FlushReason::Unmergeable, now);
        }
        let cap = self.segment_limit(now, Port::Inner, seg, Some(idx));
        if cap < len.min(64) || cap <= unit as usize {
            // Nothing to gain: one segment fills what the flow may receive
            // (the safe size of a flow whose SYN was not seen, or an inner
            // MSS no larger than the outer one). Passed on, never ahead of
            // what the flow holds, whatever the MSS.
            self.flush_flow(idx, FlushReason::Unmergeable, now);
            return self.forward_tcp(now, Port::Inner, frame, seg, meta, Some(idx));
        }
        self.counters.merged_in += 1;
        // The flags that end a merge: FIN always, PSH unless it rides.
        let ends = if psh_rides { flags::FIN } else { flags::PSH | flags::FIN };
        let payload_at = seg.payload_start();
        let ts = ts_values(frame, seg);
        let mut off = 0;
        let mut rest = whole;
        let mut part = None;
        while off < len {
            let nothing_held = self.flows.get(idx).is_some_and(|f| f.held.is_none());
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
                    part = Some(self.pass_on_whole_pieces(idx, frame, seg, off, gso_bytes, cap, rest, ts, ends, now));
                    break;
                }
            }
            if nothing_held {
                self.start_hold(idx, frame, seg, seg.seq.wrapping_add(off as u32), cap, now);
            }
            let Some(h) = self.flows.get_mut(idx).and_then(|f| f.held.as_mut()) else { break };
            let n = h.room().min(len - off);
            let piece = &frame[payload_at + off..payload_at + off + n];
            let (sum, after) = if off + n == len {
                (rest, Sum(0))
            } else {
                split_sum(&frame[payload_at + off..payload_at + len], n, rest)
            };
            h.append(piece, sum, seg, ts);
            // A riding PSH marks the segment that gets the pushed (last) byte.
            h.psh |= ends & flags::PSH == 0 && seg.has(flags::PSH) && off + n == len;
            self.held_bytes += n;
            rest = after;
            off += n;
            if h.room() == 0 {
                let last_flags = if off == len { seg.flags & ends } else { 0 };
                self.emit_hold(idx, last_flags, None, now);
            }
        }
        if seg.flags & ends != 0 && self.flows.get(idx).is_some_and(|f| f.held.is_some()) {
            self.emit_hold(idx, seg.flags & ends, Some(FlushReason::PshFin), now);
        } else if self.cfg.psh == PshPolicy::Adaptive && seg.has(flags::PSH) {
            // A riding PSH waits for more data only briefly (see PSH_GRACE),
            // unless the flow has shown itself a steady bulk sender (see
            // STEADY_BULK): then the hold deadline alone bounds the wait.
            if let Some(f) = self.flows.get(idx)
                && let Some(id) = f.held.as_ref().map(|h| h.id)
                && f.psh_history != STEADY_BULK
            {
                let grace = PSH_GRACE.min(self.cfg.merge_timeout);
                self.deadlines.push_grace(now + grace, Timer::Hold { flow: idx, id });
            }
        }
        part.unwrap_or(Verdict::Consumed)
    }

    /// Passes on `whole` bytes of `frame`'s payload from `off` as a GSO frame
    /// of `cap`-byte pieces (whole pieces; or all of the rest, the last
    /// piece shorter, if the segment ends the merge), rewritten in place: the
    /// headers move up to just before that payload, with the pieces' total
    /// length, the sequence number of `off` and a partial checksum. The
    /// tail after the last whole piece (if any) starts a hold first, from
    /// the untouched headers; PSH and FIN stay with the last byte, so the
    /// GSO frame keeps them only if there is no tail (Linux GSO then puts
    /// them on its last piece). `rest` is the sum of the payload from
    /// `off`. The input counts as merged (`merged_in`), each piece as a
    /// full merged segment.
    #[allow(clippy::too_many_arguments)]
    fn pass_on_whole_pieces(
        &mut self,
        idx: u32,
        frame: &mut [u8],
        seg: &Seg,
        off: usize,
        whole: usize,
        cap: usize,
        rest: Sum,
        ts: Option<(u32, u32)>,
        ends: u8,
        now: Instant,
    ) -> Verdict {
        let len = seg.payload_len();
        let at = seg.payload_start();
        let tail = len - off - whole;
        if tail > 0 {
            let (_, t) = split_sum(&frame[at + off..at + len], whole, rest);
            self.start_hold(idx, frame, seg, seg.seq.wrapping_add((off + whole) as u32), cap, now);
            if let Some(h) = self.flows.get_mut(idx).and_then(|f| f.held.as_mut()) {
                h.append(&frame[at + off + whole..at + len], t, seg, ts);
                h.psh |= ends & flags::PSH == 0 && seg.has(flags::PSH);
                self.held_bytes += tail;
            }
        }
        let start = off;
        let end = off + at + whole;
        frame.copy_within(..at, start);
        let g = &mut frame[start..end];
        let info = &seg.info;
        let pseudo = set_ip_length(g, info, seg.th + whole);
        let mut tcp = px_wire::tcp::TcpSegment::new_unchecked(&mut g[info.l4..]);
        tcp.set_seq(seg.seq.wrapping_add(off as u32));
        if tail > 0 {
            tcp.set_flags(seg.flags & !(flags::PSH | flags::FIN));
        }
        g[info.l4 + 16..info.l4 + 18].copy_from_slice(&px_wire::checksum::fold(pseudo).to_be_bytes());
        let meta = PacketMeta::tcp_gso(info.version == px_wire::IpVersion::V6, cap as u16, info.l4 as u16, at as u16);
        let pieces = whole.div_ceil(cap) as u64;
        self.counters.merged_gso_out += 1;
        self.counters.merged_out += pieces;
        self.counters.inner_tcp_data_out += pieces;
        self.counters.inner_tcp_full_out += (whole / cap) as u64;
        self.counters.count_tx(Port::Inner, end - start);
        Verdict::ForwardPart { meta, start, end }
    }

    /// Data from the inner host on a flow: the conversation goes both ways
    /// (a request, an answer), so the outer sender's next PSH may well be
    /// the end of the answer it waits for: it flushes (see the module docs).
    /// If the last PSH was still unanswered by more data, the inner host
    /// answered it first: that outcome is recorded as "followed by a wait".
    pub(crate) fn note_inner_data(&mut self, idx: u32) {
        if let Some(f) = self.flows.get_mut(idx) {
            if f.psh_at.take().is_some() {
                f.psh_history <<= 1;
            }
            f.psh_history &= !0b11;
        }
    }

    fn start_hold(&mut self, idx: u32, frame: &[u8], seg: &Seg, seq: u32, cap: usize, now: Instant) {
        while self.held_reserved + cap > self.cfg.max_held_bytes {
            let Some((i, id)) = self.deadlines.oldest_hold() else { break };
            if self.hold_is(i, id) {
                self.flush_flow(i, FlushReason::MemoryPressure, now);
            }
        }
        let buf = self.pool.get();
        let id = self.next_hold_id;
        self.next_hold_id += 1;
        let held = Held::start(buf, frame, seg, seq, cap, now, id);
        if let Some(f) = self.flows.get_mut(idx) {
            f.held = Some(held);
            self.held_reserved += cap;
            self.deadlines.push(now + self.cfg.merge_timeout, Timer::Hold { flow: idx, id });
        }
    }

    pub(crate) fn hold_is(&self, idx: u32, id: u64) -> bool {
        self.flows.get(idx).and_then(|f| f.held.as_ref()).is_some_and(|h| h.id == id)
    }

    pub(crate) fn flush_flow(&mut self, idx: u32, reason: FlushReason, now: Instant) {
        if self.flows.get(idx).is_some_and(|f| f.held.is_some()) {
            self.emit_hold(idx, 0, Some(reason), now);
        }
    }

    /// Sends the flow's hold (full, or flushed early for `reason`), with
    /// `last_flags` (PSH/FIN of the piece that ended it) set.
    fn emit_hold(&mut self, idx: u32, last_flags: u8, reason: Option<FlushReason>, now: Instant) {
        // Finished in place and then dropped (its buffer taken): the hold
        // is not moved out of the flow entry first.
        let Some(f) = self.flows.get_mut(idx) else { return };
        let Some(h) = f.held.as_mut() else { return };
        let (cap, len, since) = (h.cap, h.len, h.since);
        let (buf, start, end) = h.finish(last_flags);
        f.held = None;
        self.held_reserved -= cap;
        self.held_bytes -= len;
        self.counters.hold.record(now.saturating_duration_since(since).as_micros() as u64);
        if let Some(r) = reason {
            self.counters.flush[r as usize] += 1;
        }
        self.counters.merged_out += 1;
        self.counters.inner_tcp_data_out += 1;
        self.counters.inner_tcp_full_out += (len == cap) as u64;
        self.queue(Transmit { port: Port::Inner, buf, start, end, meta: PacketMeta::PLAIN });
    }
}
