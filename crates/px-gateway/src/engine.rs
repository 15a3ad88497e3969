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

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use px_wire::checksum::Sum;
use px_wire::ipv4::Ipv4Packet;
use px_wire::offload::{Checksum, PacketMeta};
use px_wire::tcp::flags;
use px_wire::{FrameInfo, IpVersion};

use crate::buf::{HEADROOM, Pool, Transmit, Verdict};
use crate::caravan::open::{Caravans, SendReason};
use crate::config::{Config, ConfigError};
use crate::counters::{Counters, DropReason, FlushReason};
use crate::flow::{FlowKey, FlowTable};
use crate::pmtu::PmtuCache;
use crate::port::Port;
use crate::router::limit::IcmpLimiter;
use crate::segment::Seg;
use crate::timer::{Deadlines, Timer};

/// How often idle flows are looked for when nothing else wakes the engine.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// The MTU-translating engine for one worker. Its behaviour lives by job in
/// the modules beside it (`merge`, `split`, `mss`, `caravan`, `router`);
/// this file holds the dispatch and the poll API.
#[derive(Debug)]
pub struct Engine {
    pub(crate) cfg: Config,
    pub(crate) flows: FlowTable,
    pub(crate) pmtu: PmtuCache,
    pub(crate) icmp: IcmpLimiter,
    pub(crate) pool: Pool,
    out: VecDeque<Transmit>,
    /// Deadlines of TCP holds and open caravans, in deadline order.
    pub(crate) deadlines: Deadlines,
    /// Buffer capacity reserved by live holds, bounded by `max_held_bytes`.
    pub(crate) held_reserved: usize,
    /// Payload bytes in live holds.
    pub(crate) held_bytes: usize,
    pub(crate) next_hold_id: u64,
    /// When idle flows are next looked for (one comparison per packet).
    next_housekeeping: Option<Instant>,
    pub(crate) counters: Counters,
    pub(crate) caravans: Caravans,
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
            deadlines: Deadlines::default(),
            held_reserved: 0,
            held_bytes: 0,
            next_hold_id: 1,
            next_housekeeping: None,
            counters: Counters::default(),
            caravans: Caravans::new(),
            cfg,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
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
        let hold = self.deadlines.next();
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

    /// Sends the holds and caravans whose deadline passed and forgets idle
    /// flows.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some((deadline, t)) = self.deadlines.front() {
            if !self.is_live(t) {
                self.deadlines.pop();
                continue;
            }
            if deadline > now {
                break;
            }
            self.deadlines.pop();
            match t {
                Timer::Hold { flow, .. } => self.flush_flow(flow, FlushReason::Timeout, now),
                Timer::Caravan { key, .. } => self.send_open(key, SendReason::Timeout, now),
            }
        }
        self.housekeeping(now);
    }

    /// Whether a deadline still belongs to a hold or caravan that waits.
    fn is_live(&self, t: Timer) -> bool {
        match t {
            Timer::Hold { flow, id } => self.hold_is(flow, id),
            Timer::Caravan { key, id } => self.caravan_is(key, id),
        }
    }

    /// Sends everything held (e.g. on shutdown).
    pub fn flush_all(&mut self, now: Instant) {
        let idxs: Vec<u32> = self.flows.indices().collect();
        for idx in idxs {
            self.flush_flow(idx, FlushReason::Shutdown, now);
        }
        while let Some((_, t)) = self.deadlines.pop() {
            if let Timer::Caravan { key, .. } = t {
                self.send_open(key, SendReason::Shutdown, now);
            }
        }
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
            None => self.route_non_tcp(now, from, frame, info, meta),
        }
    }

    /// TCP from the inner port: the SYN's MSS clamped, then forwarded (cut
    /// to the egress if larger).
    fn outbound_tcp(&mut self, now: Instant, frame: &mut [u8], seg: &Seg, meta: PacketMeta) -> Verdict {
        let key = FlowKey::of_segment(seg, frame, Port::Inner);
        let flow = if seg.has(flags::SYN) {
            let i = self.flow_for(key, now);
            self.clamp_mss(i, frame, seg, now);
            Some(i)
        } else {
            self.flows.peek(&key)
        };
        self.forward_tcp(now, Port::Outer, frame, seg, meta, flow)
    }

    // ---- flows -------------------------------------------------------------

    pub(crate) fn flow_for(&mut self, key: FlowKey, now: Instant) -> u32 {
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

    // ---- bookkeeping ------------------------------------------------------

    pub(crate) fn queue(&mut self, t: Transmit) {
        let pc = self.counters.port_mut(t.port);
        pc.tx_packets += 1;
        pc.tx_bytes += (t.end - t.start) as u64;
        self.out.push_back(t);
    }

    pub(crate) fn forward(&mut self, to: Port, len: usize, meta: PacketMeta) -> Verdict {
        self.counters.forwarded += 1;
        let pc = self.counters.port_mut(to);
        pc.tx_packets += 1;
        pc.tx_bytes += len as u64;
        Verdict::Forward { meta }
    }

    pub(crate) fn drop(&mut self, r: DropReason) -> Verdict {
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
