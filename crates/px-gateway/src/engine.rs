//! The engine: packets and the current time in, packets and the next
//! deadline out. No I/O, no clock, no allocation in steady state.
//!
//! Contract with the I/O layer:
//! 1. For each received frame call [`Engine::handle_packet`].
//! 2. Drain [`Engine::poll_transmit`] and send those frames, in order.
//! 3. Then act on the [`Verdict`] for the received frame (forward it, or not).
//! 4. Call [`Engine::handle_timeout`] when [`Engine::poll_timeout`] passes,
//!    and drain `poll_transmit` again.
//! 5. Give sent buffers back with [`Engine::recycle`].

use core::net::IpAddr;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use px_wire::checksum::Sum;
use px_wire::ipv4::Ipv4Packet;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::tcp::{TcpSegment, flags};
use px_wire::udp::UdpDatagram;
use px_wire::{FrameInfo, IpVersion, Transport};

use crate::buf::{HEADROOM, Pool, Transmit, Verdict};
use crate::config::{Config, ConfigError, PshPolicy};
use crate::counters::{Counters, DropReason, FlushReason, Port};
use crate::flow::{FlowKey, FlowTable};
use crate::merge::{Held, holdable, split_sum};
use crate::pmtu::PmtuCache;
use crate::router::{self, IcmpLimiter};
use crate::segment::Seg;
use crate::split;

#[path = "caravan.rs"]
pub(crate) mod caravan;

/// How often idle flows are looked for when nothing else wakes the engine.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// Smallest segment that counts as full-sized for bulk detection: the
/// default MSS every IPv4 host may send (RFC 9293 §3.7.1). A flow of smaller
/// segments in a row is interactive, not bulk, and is never held.
const BULK_MIN_PAYLOAD: u32 = 536;

/// The MTU-translating engine for one worker.
#[derive(Debug)]
pub struct Engine {
    cfg: Config,
    flows: FlowTable,
    pmtu: PmtuCache,
    icmp: IcmpLimiter,
    pool: Pool,
    out: VecDeque<Transmit>,
    /// Hold deadlines in the order holds started (all holds wait the same
    /// timeout, so this is also deadline order): (deadline, flow, hold id).
    timers: VecDeque<(Instant, u32, u64)>,
    /// Buffer capacity reserved by live holds, bounded by `max_held_bytes`.
    held_reserved: usize,
    /// Payload bytes in live holds.
    held_bytes: usize,
    next_hold_id: u64,
    /// When idle flows are next looked for (one comparison per packet).
    next_housekeeping: Option<Instant>,
    counters: Counters,
    caravans: caravan::Caravans,
}

impl Engine {
    pub fn new(cfg: Config) -> Result<Engine, ConfigError> {
        cfg.validate()?;
        // Room for a full inner frame behind the headroom (link headers of
        // up to 22 bytes included).
        let buf_size = HEADROOM + cfg.imtu as usize + 32;
        Ok(Engine {
            flows: FlowTable::new(cfg.max_flows, cfg.hash_seed),
            pmtu: PmtuCache::new(cfg.pmtu_cache_size, cfg.pmtu_lifetime),
            icmp: IcmpLimiter::new(cfg.icmp_rate_per_sec),
            pool: Pool::new(buf_size, 4096),
            out: VecDeque::new(),
            timers: VecDeque::new(),
            held_reserved: 0,
            held_bytes: 0,
            next_hold_id: 1,
            next_housekeeping: None,
            counters: Counters::default(),
            caravans: caravan::Caravans::new(),
            cfg,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Takes a new configuration while running (a reload), between two
    /// packets. Refused, with the field named, if it is invalid or changes
    /// what is fixed at start ([`Config::live_change`]). Otherwise, if
    /// anything differs, everything held is flushed first (queued for
    /// [`Engine::poll_transmit`], in order, counted as
    /// [`FlushReason::Shutdown`]): held data is sent, never dropped or
    /// reordered, and no hold waits under the old timeout or caravan
    /// rules. Then the new values apply to the next packet.
    pub fn set_config(&mut self, now: Instant, new: Config) -> Result<(), ConfigError> {
        self.cfg.live_change(&new)?;
        if new == self.cfg {
            return Ok(());
        }
        self.flush_all(now);
        if new.icmp_rate_per_sec != self.cfg.icmp_rate_per_sec {
            self.icmp = IcmpLimiter::new(new.icmp_rate_per_sec);
        }
        self.cfg = new;
        Ok(())
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Flows tracked now.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// Payload bytes held now.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// The next frame to send, in order.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// When [`Engine::handle_timeout`] should next be called. May be early
    /// (a hold that already left), never late.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let hold = self.timers.front().map(|t| t.0);
        let hold = match (hold, self.caravans.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let house = (self.flows.len() > 0).then_some(self.next_housekeeping).flatten();
        match (hold, house) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Gives back a buffer from a sent [`Transmit`].
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.put(buf);
    }

    /// Flushes holds whose deadline passed and forgets idle flows.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(deadline, idx, id)) = self.timers.front() {
            if !self.hold_is(idx, id) {
                self.timers.pop_front();
                continue;
            }
            if deadline > now {
                break;
            }
            self.timers.pop_front();
            self.flush_flow(idx, FlushReason::Timeout, now);
        }
        self.caravan_timeout(now);
        self.housekeeping(now);
    }

    /// Sends everything held (e.g. on shutdown).
    pub fn flush_all(&mut self, now: Instant) {
        let idxs: Vec<u32> = self.flows.indices().collect();
        for idx in idxs {
            self.flush_flow(idx, FlushReason::Shutdown, now);
        }
        self.timers.clear();
        self.caravan_flush_all(now);
    }

    /// Handles one frame received on `from`. See the module docs for the
    /// order in which the caller acts on the result.
    pub fn handle_packet(&mut self, now: Instant, from: Port, frame: &mut [u8], meta: PacketMeta) -> Verdict {
        let pc = self.counters.port_mut(from);
        pc.rx_packets += 1;
        pc.rx_bytes += frame.len() as u64;
        if self.next_housekeeping.is_none_or(|t| now >= t) {
            self.housekeeping(now);
        }
        let to = from.other();
        // Matched by reference: moving the parse out of the `Result` would
        // read its freshly stored fields straight back (a store-forwarding
        // stall measured as the hottest spot of the merge path).
        let parsed = FrameInfo::parse(frame);
        let info = match &parsed {
            Ok(Some(i)) => i,
            Ok(None) => {
                self.counters.non_ip += 1;
                // Not ours to translate, but no bigger than the egress takes.
                let l2 = px_wire::ethernet::EthernetFrame::new_checked(&*frame).map_or(14, |e| e.header_len());
                if frame.len().saturating_sub(l2) > self.egress_limit(to) as usize {
                    return self.drop(DropReason::TooBigUncuttable);
                }
                return self.forward(to, frame.len(), PacketMeta::PLAIN);
            }
            Err(_) => return self.drop(DropReason::Malformed),
        };
        if info.version == IpVersion::V4 && !Ipv4Packet::new_unchecked(&frame[info.l3..info.l4]).verify_checksum() {
            return self.drop(DropReason::Malformed);
        }
        // By reference again, for the same reason.
        let seg = Seg::parse(frame, info);
        match &seg {
            Some(seg) => {
                let known_sum = complete_partial_checksum(frame, seg, meta.csum);
                match from {
                    Port::Outer => self.inbound_tcp(now, frame, seg, meta, known_sum),
                    Port::Inner => self.outbound_tcp(now, frame, seg, meta),
                }
            }
            None => self.other(now, from, frame, info, meta),
        }
    }

    // ---- TCP, outer → inner: merge ------------------------------------

    fn inbound_tcp(
        &mut self,
        now: Instant,
        frame: &mut [u8],
        seg: &Seg,
        meta: PacketMeta,
        known: Option<Sum>,
    ) -> Verdict {
        let key = seg.key(frame, Port::Outer);
        let idx = self.flow_for(key, now);
        if let Some(f) = self.flows.get_mut(idx) {
            f.last_seen = now;
        }
        if seg.has(flags::SYN) {
            self.inbound_syn(idx, frame, seg);
        }
        let end = seg.seq.wrapping_add(seg.seq_len());
        let Some(flow) = self.flows.get_mut(idx) else { return self.pass(now, Port::Inner, frame, seg, meta) };
        let in_order = flow.next_seq == Some(seg.seq);
        if flow.next_seq.is_none_or(|n| (end.wrapping_sub(n) as i32) > 0) {
            flow.next_seq = Some(end);
        }
        if seg.flags & (flags::SYN | flags::RST | flags::URG | flags::CWR) != 0 {
            self.flush_flow(idx, FlushReason::ControlFlag, now);
            return self.pass(now, Port::Inner, frame, seg, meta);
        }
        let len = seg.payload_len();
        if len == 0 {
            if flow.held.is_some() {
                self.flush_flow(idx, FlushReason::PureAck, now);
            }
            return self.pass(now, Port::Inner, frame, seg, meta);
        }
        // Bulk detection: in-order segments of the flow's largest size in a
        // row (a GRO super-packet counts as the segments it was made of).
        let unit = meta.tcp_gso_size().map(|g| g as usize).filter(|g| *g > 0).unwrap_or(len).min(len) as u32;
        if in_order && unit >= flow.max_payload && unit >= BULK_MIN_PAYLOAD {
            if unit > flow.max_payload {
                flow.max_payload = unit;
                flow.full_run = 0;
            }
            flow.full_run = flow.full_run.saturating_add((len as u32 / unit).max(1) as u16);
            if flow.full_run >= self.cfg.bulk_after {
                flow.bulk = true;
            }
        } else if !in_order {
            flow.full_run = 0;
        }
        if !in_order {
            self.flush_flow(idx, FlushReason::OutOfOrder, now);
            return self.pass(now, Port::Inner, frame, seg, meta);
        }
        if !flow.bulk || !holdable(seg) {
            self.flush_flow(idx, FlushReason::Unmergeable, now);
            return self.pass(now, Port::Inner, frame, seg, meta);
        }
        let whole = match (known, meta.csum) {
            (Some(s), _) => s,
            (None, Checksum::Unknown) if self.cfg.verify_checksums => {
                if !seg.checksum_ok(frame) {
                    self.counters.bad_checksum += 1;
                    self.flush_flow(idx, FlushReason::Unmergeable, now);
                    return self.pass(now, Port::Inner, frame, seg, meta);
                }
                seg.payload_sum_from_checksum(frame)
            }
            (None, _) => seg.payload_sum_from_checksum(frame),
        };
        let accepts = self.flows.get(idx).and_then(|f| f.held.as_ref()).is_none_or(|h| h.accepts(frame, seg));
        if !accepts {
            self.flush_flow(idx, FlushReason::Unmergeable, now);
        }
        let cap = self.merge_cap(idx, seg);
        if cap < len.min(64) {
            return self.pass(now, Port::Inner, frame, seg, meta);
        }
        self.counters.merged_in += 1;
        // The flags that end a merge: FIN always, PSH unless configured to ride.
        let ends = match self.cfg.psh {
            PshPolicy::Flush => flags::PSH | flags::FIN,
            PshPolicy::Hold => flags::FIN,
        };
        let payload_at = seg.payload_start();
        let mut off = 0;
        let mut rest = whole;
        while off < len {
            if self.flows.get(idx).is_some_and(|f| f.held.is_none()) {
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
            h.append(piece, sum, seg);
            h.psh |= ends & flags::PSH == 0 && seg.has(flags::PSH);
            self.held_bytes += n;
            rest = after;
            off += n;
            if h.room() == 0 {
                let extra = if off == len { seg.flags & ends } else { 0 };
                self.emit_hold(idx, extra, None, now);
            }
        }
        if seg.flags & ends != 0 && self.flows.get(idx).is_some_and(|f| f.held.is_some()) {
            self.emit_hold(idx, seg.flags & ends, Some(FlushReason::PshFin), now);
        }
        Verdict::Consumed
    }

    /// Largest payload a merged segment of this flow may carry: the inner
    /// MSS for this header layout, and no more than the inner host said it
    /// takes (its MSS less the options, RFC 6691).
    fn merge_cap(&self, idx: u32, seg: &Seg) -> usize {
        let mut cap = self.cfg.inner_payload_cap(seg.payload_start() - seg.info.l3);
        if let Some(m) = self.flows.get(idx).and_then(|f| f.inner_mss) {
            cap = cap.min((m as usize).saturating_sub(seg.th - px_wire::tcp::MIN_HEADER_LEN));
        }
        cap.min(self.pool.size() - HEADROOM)
    }

    fn inbound_syn(&mut self, idx: u32, frame: &mut [u8], seg: &Seg) {
        let imss = self.cfg.imtu - if seg.info.version == IpVersion::V4 { 40 } else { 60 };
        let mut tcp = TcpSegment::new_unchecked(&mut frame[seg.info.l4..seg.info.end]);
        let orig = match tcp.mss() {
            Some((m, _)) if m < imss => {
                let _ = tcp.rewrite_mss(imss);
                self.counters.mss_raised += 1;
                Some(m)
            }
            Some((m, _)) => Some(m),
            None => {
                self.counters.syn_without_mss += 1;
                None
            }
        };
        if let Some(f) = self.flows.get_mut(idx) {
            // A new handshake resets what was learned about the stream.
            // RFC 9293 §3.7.1 / RFC 8200 §5: what a peer that said nothing
            // may send.
            f.outer_mss = orig.or(Some(if seg.info.version == IpVersion::V4 { 536 } else { 1220 }));
            f.bulk = false;
            f.full_run = 0;
            f.max_payload = 0;
        }
    }

    fn start_hold(&mut self, idx: u32, frame: &[u8], seg: &Seg, seq: u32, cap: usize, now: Instant) {
        while self.held_reserved + cap > self.cfg.max_held_bytes {
            let Some(&(_, i, id)) = self.timers.front() else { break };
            self.timers.pop_front();
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
            self.timers.push_back((now + self.cfg.merge_timeout, idx, id));
        }
    }

    fn hold_is(&self, idx: u32, id: u64) -> bool {
        self.flows.get(idx).and_then(|f| f.held.as_ref()).is_some_and(|h| h.id == id)
    }

    fn flush_flow(&mut self, idx: u32, reason: FlushReason, now: Instant) {
        if self.flows.get(idx).is_some_and(|f| f.held.is_some()) {
            self.emit_hold(idx, 0, Some(reason), now);
        }
    }

    /// Sends the flow's hold (full, or flushed early for `reason`).
    fn emit_hold(&mut self, idx: u32, extra: u8, reason: Option<FlushReason>, now: Instant) {
        let Some(h) = self.flows.get_mut(idx).and_then(|f| f.held.take()) else { return };
        self.held_reserved -= h.cap;
        self.held_bytes -= h.len;
        let full = h.len == h.cap;
        self.counters.hold.record(now.saturating_duration_since(h.since).as_micros() as u64);
        if let Some(r) = reason {
            self.counters.flush[r as usize] += 1;
        }
        self.counters.merged_out += 1;
        self.counters.inner_tcp_data_out += 1;
        self.counters.inner_tcp_full_out += full as u64;
        let (buf, start, end) = h.finish(extra);
        self.queue(Transmit { port: Port::Inner, buf, start, end, meta: PacketMeta::PLAIN });
    }

    fn flow_for(&mut self, key: FlowKey, now: Instant) -> u32 {
        if let Some(i) = self.flows.lookup(&key) {
            return i;
        }
        if self.flows.is_full()
            && let Some(old) = self.flows.oldest()
        {
            self.flush_flow(old, FlushReason::Evicted, now);
            self.flows.remove(old);
            self.counters.flows_evicted += 1;
        }
        self.counters.flows_created += 1;
        self.flows.insert(key, now)
    }

    fn housekeeping(&mut self, now: Instant) {
        self.next_housekeeping = Some(now + HOUSEKEEPING);
        for _ in 0..64 {
            let Some(idx) = self.flows.oldest() else { break };
            let idle = self
                .flows
                .get(idx)
                .is_some_and(|f| now.saturating_duration_since(f.last_seen) >= self.cfg.flow_idle_timeout);
            if idle {
                self.flush_flow(idx, FlushReason::Evicted, now);
                self.flows.remove(idx);
                self.counters.flows_expired += 1;
            } else {
                self.flows.requeue_oldest();
            }
        }
    }

    // ---- TCP, inner → outer: split -------------------------------------

    fn outbound_tcp(&mut self, now: Instant, frame: &mut [u8], seg: &Seg, meta: PacketMeta) -> Verdict {
        let key = seg.key(frame, Port::Inner);
        if seg.has(flags::SYN) {
            let i = self.flow_for(key, now);
            let omss = self.cfg.emtu - if seg.info.version == IpVersion::V4 { 40 } else { 60 };
            let mut tcp = TcpSegment::new_unchecked(&mut frame[seg.info.l4..seg.info.end]);
            let orig = match tcp.mss() {
                Some((m, _)) if m > omss => {
                    let _ = tcp.rewrite_mss(omss);
                    self.counters.mss_clamped += 1;
                    Some(m)
                }
                Some((m, _)) => Some(m),
                None => {
                    self.counters.syn_without_mss += 1;
                    None
                }
            };
            // No MSS option: the inner host takes only the default MSS
            // (RFC 9293 §3.7.1: 536; RFC 8200 §8.3: 1220 for IPv6), and
            // merged segments must respect it as split ones do outward.
            let default = if seg.info.version == IpVersion::V4 { 536 } else { 1220 };
            if let Some(f) = self.flows.get_mut(i) {
                f.inner_mss = orig.or(Some(default));
                f.last_seen = now;
            }
        }
        self.pass(now, Port::Outer, frame, seg, meta)
    }

    // ---- sending TCP on ---------------------------------------------------

    /// Largest TCP payload allowed toward `to` for this segment.
    fn tcp_limit(&self, now: Instant, to: Port, seg: &Seg) -> usize {
        match to {
            // What a merged segment may carry is also the most any segment
            // toward the inner host may carry.
            Port::Inner => self.merge_cap_for_pass(seg),
            Port::Outer => {
                let mtu = self.egress_mtu(now, Port::Outer, seg.info.dst);
                let mut cap = (mtu as usize).saturating_sub(seg.payload_start() - seg.info.l3);
                let k = FlowKey::new(seg.info.dst, seg.info.src, seg.dst_port, seg.src_port);
                if let Some(m) = self.flows.peek(&k).and_then(|i| self.flows.get(i)).and_then(|f| f.outer_mss) {
                    cap = cap.min((m as usize).saturating_sub(seg.th - 20));
                }
                cap
            }
        }
    }

    /// Passes a TCP segment on toward `to` unchanged, cut to what the egress
    /// allows (by GSO or in software) if it is larger.
    fn pass(&mut self, now: Instant, to: Port, frame: &mut [u8], seg: &Seg, meta: PacketMeta) -> Verdict {
        let len = seg.payload_len();
        let allowed = self.tcp_limit(now, to, seg);
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
            let g = split::prepare_gso(frame, seg, limit);
            self.counters.gso_out += 1;
            return self.forward(to, seg.info.end, g);
        }
        self.counters.split_in += 1;
        let mut off = 0;
        let mut i = 0;
        while off < len {
            let n = limit.min(len - off);
            let mut buf = self.pool.get();
            let end = split::write_piece(frame, seg, i, off, n, off + n == len, &mut buf);
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

    fn merge_cap_for_pass(&self, seg: &Seg) -> usize {
        let k = FlowKey::new(seg.info.src, seg.info.dst, seg.src_port, seg.dst_port);
        match self.flows.peek(&k) {
            Some(i) => self.merge_cap(i, seg),
            None => self.cfg.inner_payload_cap(seg.payload_start() - seg.info.l3),
        }
    }

    // ---- everything that is not TCP ---------------------------------------

    fn other(&mut self, now: Instant, from: Port, frame: &mut [u8], info: &FrameInfo, meta: PacketMeta) -> Verdict {
        let to = from.other();
        if from == Port::Outer && info.transport == Transport::Icmp {
            self.learn_pmtu(now, frame, info);
        }
        if matches!(meta.csum, Checksum::Partial { .. }) {
            complete_partial_udp(frame, info);
        }
        if let Some(v) = self.caravan_udp(now, from, frame, info, meta) {
            return v;
        }
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
    fn egress_limit(&self, to: Port) -> u16 {
        match to {
            Port::Inner => self.cfg.imtu,
            Port::Outer => self.cfg.emtu,
        }
    }

    fn egress_mtu(&self, now: Instant, to: Port, dst: IpAddr) -> u16 {
        match to {
            Port::Inner => self.egress_limit(Port::Inner),
            Port::Outer => self.pmtu.get(dst, now).map_or(self.cfg.emtu, |m| m.min(self.cfg.emtu)),
        }
    }

    fn fragment(&mut self, to: Port, frame: &[u8], info: &FrameInfo, mtu: usize) -> Verdict {
        let mut later = [0u8; 40];
        let later_len = router::later_options(frame, info, &mut later);
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
            let end = router::write_fragment(frame, info, off, n, off + n == data_len, &later[..later_len], &mut buf);
            self.counters.fragments_out += 1;
            self.queue(Transmit { port: to, buf, start: 0, end, meta: PacketMeta::PLAIN });
            off += n;
        }
        Verdict::Consumed
    }

    fn too_big(&mut self, now: Instant, from: Port, frame: &[u8], info: &FrameInfo, mtu: u16) {
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
            router::write_too_big(frame, info, mtu, self.cfg.icmp_source_v4, self.cfg.icmp_source_v6, &mut buf)
        {
            self.counters.icmp_sent += 1;
            self.queue(Transmit { port: from, buf, start: 0, end, meta: PacketMeta::PLAIN });
        }
    }

    // ---- bookkeeping ------------------------------------------------------

    fn queue(&mut self, t: Transmit) {
        let pc = self.counters.port_mut(t.port);
        pc.tx_packets += 1;
        pc.tx_bytes += (t.end - t.start) as u64;
        self.out.push_back(t);
    }

    fn forward(&mut self, to: Port, len: usize, meta: PacketMeta) -> Verdict {
        self.counters.forwarded += 1;
        let pc = self.counters.port_mut(to);
        pc.tx_packets += 1;
        pc.tx_bytes += len as u64;
        Verdict::Forward { meta }
    }

    fn drop(&mut self, r: DropReason) -> Verdict {
        self.counters.drop[r as usize] += 1;
        Verdict::Dropped(r)
    }
}

/// A TCP segment whose checksum field holds only the pseudo-header sum
/// (`CHECKSUM_PARTIAL`) is completed in place, so that whatever leaves the
/// engine carries a valid checksum. Returns the payload's sum when computed.
fn complete_partial_checksum(frame: &mut [u8], seg: &Seg, csum: Checksum) -> Option<Sum> {
    if !matches!(csum, Checksum::Partial { .. }) {
        return None;
    }
    let payload = Sum::of(&frame[seg.payload_start()..seg.info.end]);
    let l4 = seg.info.l4;
    frame[l4 + 16..l4 + 18].copy_from_slice(&[0, 0]);
    let c = seg.pseudo(frame, seg.info.end - l4).plus(seg.header_sum(frame)).plus(payload).checksum();
    frame[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    Some(payload)
}

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
