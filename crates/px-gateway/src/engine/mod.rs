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
//!
//! This file holds the struct, the poll API, the dispatch of each frame to
//! the child that handles its kind, and the flow table's upkeep. Each job
//! is a child module adding to `impl Engine` (the only place that does):
//! - [`inbound`]: TCP from outside, merged into inner-MSS segments;
//!   [`hold`]: the life of a hold under its budget;
//! - [`outbound`]: TCP from inside, and forwarding TCP either way (the
//!   segment-size limit, GSO hand-off or software cut);
//! - [`track`]: applying what a segment tells about its connection
//!   (`crate::conntrack` decides), the SYN's MSS rewrite;
//! - [`size`]: what the egress allows (port MTU, learned path MTU, the
//!   segment-size limit of every TCP path);
//! - [`route`]: everything else, as a router; [`learn`]: path MTUs from
//!   ICMP "too big", validated;
//! - [`tunnel`]: offloaded frames cut back into the frames they were made
//!   of; [`caravan`]: UDP packed into and out of PX-caravans.
//!
//! The leaves they use (`flow`, `conntrack`, `mss`, `merge`, `split`,
//! `router`, `tunnel`, `caravan`, `pmtu`, `timer`, `buf`) never name the
//! engine.

mod caravan;
mod fast_path;
mod hold;
mod imtu;
mod inbound;
mod learn;
mod outbound;
mod route;
mod size;
mod track;
mod tunnel;
mod view;

pub use view::FlowView;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use px_wire::ipv4::Ipv4Packet;
use px_wire::offload::{Checksum, PacketMeta, complete_partial};
use px_wire::tcp;
use px_wire::{FrameInfo, IpVersion};

use crate::buf::{HEADROOM, Pool, Transmit, Verdict};
use crate::caravan::open::{Caravans, SendReason};
use crate::config::{Config, ConfigError};
use crate::conntrack::HandshakeMemory;
use crate::counters::{Counters, DropReason, FlushReason};
use crate::flow::{FlowKey, FlowTable};
use crate::merge::budget::HoldBudget;
use crate::pmtu::{PmtuReplica, SharedPmtu};
use crate::port::Port;
use crate::router::limit::ErrorLimiter;
use crate::segment::Seg;
use crate::timer::{Deadlines, Timer};

/// What an engine's state takes at one moment ([`Engine::footprint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footprint {
    /// Flow entries (at most `Config::max_flows`).
    pub flows: usize,
    /// Buffer capacity reserved by TCP holds (at most `max_held_bytes`).
    pub held_reserved: usize,
    /// Caravans being filled (at most `max_flows`), and the capacity they
    /// reserve (at most `max_held_bytes`).
    pub caravans_open: usize,
    pub caravans_reserved: usize,
    /// Entries in the deadline queue, stale ones included (they leave as
    /// their deadline passes: at most the holds and caravans started
    /// within one merge timeout, and the PSH graces within one grace).
    pub deadlines: usize,
    /// Frames queued for `poll_transmit`.
    pub queued: usize,
    /// Free buffers kept for reuse, all classes (at most 4,096 a class).
    pub pool_free: usize,
    /// Slots of the handshake memory (fixed at start by `max_flows`).
    pub handshake_slots: usize,
    /// Destinations of verified neighbours with a probe schedule (at most
    /// 4,096, `confirm.rs`).
    pub imtu_probing: usize,
}

/// How often idle flows are looked for when nothing else wakes the engine.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// The MTU-translating engine for one worker. Its behaviour lives by job in
/// this module's children (module docs).
#[derive(Debug)]
pub struct Engine {
    pub(crate) cfg: Config,
    pub(crate) flows: FlowTable,
    pub(crate) pmtu: PmtuReplica,
    /// What handshakes said, past their flow entries (`crate::conntrack`).
    pub(crate) handshakes: HandshakeMemory,
    pub(crate) icmp: ErrorLimiter,
    /// IP identification of the next ICMPv4 error the engine sends.
    pub(crate) icmp_ident: u16,
    pub(crate) pool: Pool,
    out: VecDeque<Transmit>,
    /// Deadlines of TCP holds and open caravans, in deadline order.
    pub(crate) deadlines: Deadlines,
    /// What live holds take, bounded by `max_held_bytes`.
    pub(crate) holds: HoldBudget,
    /// When idle flows are next looked for (one comparison per packet).
    next_housekeeping: Option<Instant>,
    pub(crate) counters: Counters,
    pub(crate) caravans: Caravans,
    /// The kernel fast path, if one is attached (`fast_path.rs`).
    datapath: Option<Box<dyn crate::fast_path::Datapath>>,
    /// Flows that qualified for the fast path since the last quiet moment
    /// (slot and id; at most one entry per flow).
    fast_path_queue: Vec<(u32, u64)>,
    /// Flows the fast path carries now.
    in_kernel: usize,
    /// Neighbour b-networks with a verified iMTU (issue 30, [`imtu`]).
    pub(crate) imtu: crate::imtu::ImtuReplica,
    /// When each of their destinations may be probed next (`crate::confirm`).
    pub(crate) imtu_schedule: crate::confirm::Schedule,
    /// Bounds the probes sent per second.
    pub(crate) imtu_probe_rate: crate::router::limit::IcmpLimiter,
}

impl Engine {
    /// An engine with a path MTU cache of its own (one worker).
    pub fn new(cfg: Config) -> Result<Engine, ConfigError> {
        let pmtu = SharedPmtu::new(cfg.pmtu_cache_size, cfg.pmtu_lifetime);
        Engine::with_shared_pmtu(cfg, pmtu)
    }

    /// An engine that learns path MTUs into, and reads them from, a cache
    /// shared with the other workers of the gateway (see `pmtu.rs`).
    pub fn with_shared_pmtu(cfg: Config, pmtu: Arc<SharedPmtu>) -> Result<Engine, ConfigError> {
        cfg.validate()?;
        // Room for a full inner frame behind the headroom (link headers of
        // up to 22 bytes included).
        let buf_size = HEADROOM + cfg.imtu as usize + 32;
        let pmtu = PmtuReplica::new(pmtu);
        Ok(Engine {
            flows: FlowTable::new(cfg.max_flows, cfg.hash_seed),
            handshakes: HandshakeMemory::new(cfg.max_flows, cfg.hash_seed),
            icmp_ident: crate::router::first_icmp_ident(cfg.hash_seed, pmtu.engine),
            pmtu,
            icmp: ErrorLimiter::new(cfg.icmp_rate_per_sec, cfg.hash_seed),
            pool: Pool::new(buf_size, 4096),
            out: VecDeque::new(),
            deadlines: Deadlines::default(),
            holds: HoldBudget::default(),
            next_housekeeping: None,
            counters: Counters::default(),
            caravans: Caravans::new(),
            datapath: None,
            fast_path_queue: Vec::new(),
            in_kernel: 0,
            imtu: crate::imtu::ImtuReplica::default(),
            imtu_schedule: crate::confirm::Schedule::default(),
            imtu_probe_rate: crate::router::limit::IcmpLimiter::new(crate::confirm::PROBES_PER_SEC),
            cfg,
        })
    }

    /// Follows the verified-iMTU table the runtime publishes (issue 30):
    /// packets to and from its prefixes pass untouched (`engine/imtu.rs`).
    pub fn follow_imtu(&mut self, shared: Arc<crate::imtu::SharedImtu>) {
        self.imtu = crate::imtu::ImtuReplica::new(shared);
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
        // `flush_all` took every flow back from the kernel: they go again,
        // under the new values, once they qualify again.
        if new.icmp_rate_per_sec != self.cfg.icmp_rate_per_sec {
            self.icmp = ErrorLimiter::new(new.icmp_rate_per_sec, self.cfg.hash_seed);
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
        self.holds.bytes
    }

    /// What the engine's state takes now, each part against the bound the
    /// configuration sets (for tests, the fuzzer and operators' status).
    pub fn footprint(&self) -> Footprint {
        Footprint {
            flows: self.flows.len(),
            held_reserved: self.holds.reserved,
            caravans_open: self.caravans.open.len(),
            caravans_reserved: self.caravans.reserved,
            deadlines: self.deadlines.len(),
            queued: self.out.len(),
            pool_free: self.pool.free_buffers(),
            handshake_slots: self.handshakes.slots(),
            imtu_probing: self.imtu_schedule.len(),
        }
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
        self.reclaim_all(now, fast_path::Reclaim::Config);
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
        self.counters.count_rx(from, frame.len());
        if self.next_housekeeping.is_none_or(|t| now >= t) {
            self.housekeeping(now);
        }
        self.sync_pmtu(now);
        if crate::router::link_local_control(frame) {
            return self.drop(DropReason::LinkLocal);
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
        if let Some(v) = self.verified_passthrough(now, from, frame, info, meta) {
            return without_trailer(v, info.end, frame.len());
        }
        // By reference again, for the same reason.
        let seg = Seg::parse(frame, info);
        let v = match &seg {
            Some(seg) => {
                if matches!(meta.csum, Checksum::Partial { .. }) {
                    // At the TCP header's own field, whatever the metadata says.
                    let at = Checksum::Partial { start: info.l4 as u16, offset: tcp::field::CHECKSUM.start as u16 };
                    let _ = complete_partial(&mut frame[..info.end], at);
                }
                match from {
                    Port::Outer => self.inbound_tcp(now, frame, seg, meta),
                    Port::Inner => self.outbound_tcp(now, frame, seg, meta),
                }
            }
            // Tunnel super-packets, inner partial checksums, UDP GRO batches.
            None if crate::tunnel::is_offloaded(info, &meta) => self.route_offloaded(now, from, frame, info, meta),
            None => self.route_non_tcp(now, from, frame, info, meta),
        };
        without_trailer(v, info.end, frame.len())
    }

    /// A frame the I/O layer saw addressed to the gateway host's own MAC
    /// (`PACKET_HOST` on a port): the host's own stack takes it; a bump in
    /// the wire does not pass it on. Counted as received and dropped.
    pub fn handle_for_host(&mut self, from: Port, len: usize) -> Verdict {
        self.counters.count_rx(from, len);
        self.drop(DropReason::ForHost)
    }

    // ---- flows -------------------------------------------------------------

    /// The flow entry of `key`, made if the table has none.
    #[inline]
    pub(crate) fn flow_for(&mut self, key: FlowKey, now: Instant) -> u32 {
        match self.flows.lookup(&key) {
            Some(i) => i,
            None => self.new_flow(key, now),
        }
    }

    /// A flow entry for a key the table does not hold (evicting one if it
    /// is full).
    #[cold]
    #[inline(never)]
    fn new_flow(&mut self, key: FlowKey, now: Instant) -> u32 {
        if self.flows.is_full()
            && let Some(old) = self.flows.victim()
        {
            self.flush_flow(old, FlushReason::Evicted, now);
            self.remove_flow(old);
            self.counters.flows_evicted += 1;
        }
        self.counters.flows_created += 1;
        let idx = self.flows.insert(key, now);
        self.recall_handshake(idx);
        idx
    }

    fn housekeeping(&mut self, now: Instant) {
        self.next_housekeeping = Some(now + HOUSEKEEPING);
        for _ in 0..64.min(self.flows.len()) {
            let Some(idx) = self.flows.next_for_idle_scan() else { break };
            let idle = self
                .flows
                .get(idx)
                .is_some_and(|f| now.saturating_duration_since(f.last_seen) >= self.cfg.flow_idle_timeout);
            // Idle here, perhaps busy in the kernel.
            if idle && !self.busy_in_kernel(idx, now) {
                self.flush_flow(idx, FlushReason::Evicted, now);
                self.remove_flow(idx);
                self.counters.flows_expired += 1;
            }
        }
    }

    // ---- bookkeeping ------------------------------------------------------

    pub(crate) fn queue(&mut self, t: Transmit) {
        self.counters.count_tx(t.port, t.end - t.start);
        self.out.push_back(t);
    }

    /// How many frames wait to be transmitted: a mark for [`Engine::queued_since`].
    pub(crate) fn queued(&self) -> usize {
        self.out.len()
    }

    /// The frames queued after the mark `first` (from [`Engine::queued`]).
    pub(crate) fn queued_since(&mut self, first: usize) -> impl Iterator<Item = &mut Transmit> {
        self.out.range_mut(first..)
    }

    /// Queues a frame the engine built and [`Engine::forward`] already counted.
    pub(crate) fn queue_forwarded(&mut self, t: Transmit) {
        self.out.push_back(t);
    }

    pub(crate) fn forward(&mut self, to: Port, len: usize, meta: PacketMeta) -> Verdict {
        self.counters.forwarded += 1;
        self.counters.count_tx(to, len);
        Verdict::Forward { meta }
    }

    pub(crate) fn drop(&mut self, r: DropReason) -> Verdict {
        self.counters.drop[r as usize] += 1;
        Verdict::Dropped(r)
    }
}

/// A router forwards the IP packet, not what the link layer left behind it
/// (Ethernet padding, a trailer): Linux trims every received packet to its
/// IP length (`ip_rcv`, `ipv6_rcv`). Every size check is on the IP length,
/// so a frame passed on whole could exceed the egress MTU by its trailer
/// and be refused by the port. A frame with bytes past its IP packet
/// (`ip_end`) is therefore passed on as `frame[..ip_end]`.
#[inline]
fn without_trailer(v: Verdict, ip_end: usize, frame_len: usize) -> Verdict {
    match v {
        Verdict::Forward { meta } if ip_end < frame_len => Verdict::ForwardPart { meta, start: 0, end: ip_end },
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_frames::{L2, Tcp, l4_checksum_ok, udp};
    use px_wire::checksum;
    use px_wire::tcp::flags;

    const MSS: usize = 1448;

    fn engine(cfg: Config) -> Engine {
        Engine::new(cfg).unwrap()
    }

    fn sent(e: &mut Engine) -> Vec<(Port, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(t) = e.poll_transmit() {
            v.push((t.port, t.frame().to_vec()));
            e.recycle(t.buf);
        }
        v
    }

    /// The inner host's SYN-ACK (MSS 8960), then three in-order full
    /// segments: the third makes the flow bulk and is held.
    fn start_a_hold(e: &mut Engine, now: Instant) {
        let mut sa = Tcp::data(false, Port::Inner, 0, 0);
        sa.flags = flags::SYN | flags::ACK;
        sa.opts = vec![2, 4, 0x23, 0x00];
        let v = e.handle_packet(now, Port::Inner, &mut sa.build(), PacketMeta::PLAIN);
        assert_eq!(v, Verdict::Forward { meta: PacketMeta::PLAIN });
        for i in 0..3u32 {
            let mut f = Tcp::data(false, Port::Outer, 1 + i * MSS as u32, MSS).build();
            let v = e.handle_packet(now, Port::Outer, &mut f, PacketMeta::PLAIN);
            let want = if i < 2 { Verdict::Forward { meta: PacketMeta::PLAIN } } else { Verdict::Consumed };
            assert_eq!(v, want, "segment {i}");
        }
        assert_eq!(e.held_bytes(), MSS);
    }

    #[test]
    fn frames_that_are_not_ip_pass_unless_too_big() {
        let now = Instant::now();
        let mut e = engine(Config::default());
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            e.handle_packet(now, Port::Outer, &mut arp, PacketMeta::PLAIN),
            Verdict::Forward { meta: PacketMeta::PLAIN }
        );
        let mut big = vec![0u8; L2 + 1501];
        big[12..14].copy_from_slice(&[0x88, 0xb5]);
        assert_eq!(
            e.handle_packet(now, Port::Inner, &mut big, PacketMeta::PLAIN),
            Verdict::Dropped(DropReason::TooBigUncuttable)
        );
        assert_eq!(e.counters().non_ip, 2);
        assert_eq!(e.counters().port(Port::Outer).rx_packets, 1);
        assert_eq!(e.counters().port(Port::Inner).tx_packets, 1);
    }

    #[test]
    fn a_bad_ipv4_header_checksum_is_malformed() {
        let mut f = Tcp::data(false, Port::Outer, 1, 100).build();
        f[L2 + 8] ^= 1; // TTL changed, checksum not
        let mut e = engine(Config::default());
        assert_eq!(
            e.handle_packet(Instant::now(), Port::Outer, &mut f, PacketMeta::PLAIN),
            Verdict::Dropped(DropReason::Malformed)
        );
        assert_eq!(e.counters().drops(DropReason::Malformed), 1);
    }

    #[test]
    fn a_partial_tcp_checksum_is_completed_before_the_segment_leaves() {
        for v6 in [false, true] {
            let mut f = Tcp::data(v6, Port::Outer, 1, 200).build();
            let info = FrameInfo::parse(&f).unwrap().unwrap();
            // CHECKSUM_PARTIAL: the field holds the pseudo-header sum only.
            let ps = crate::test_frames::pseudo(v6, Port::Outer, 6, info.end - info.l4);
            f[info.l4 + 16..info.l4 + 18].copy_from_slice(&checksum::fold(ps).to_be_bytes());
            assert!(!l4_checksum_ok(&f, v6, Port::Outer, 6));
            let meta =
                PacketMeta { csum: Checksum::Partial { start: info.l4 as u16, offset: 16 }, ..PacketMeta::PLAIN };
            let mut e = engine(Config::default());
            assert_eq!(
                e.handle_packet(Instant::now(), Port::Outer, &mut f, meta),
                Verdict::Forward { meta: PacketMeta::PLAIN }
            );
            assert!(l4_checksum_ok(&f, v6, Port::Outer, 6), "v6={v6}");
        }
    }

    #[test]
    fn a_hold_leaves_at_its_deadline_not_before() {
        let now = Instant::now();
        let cfg = Config::default();
        let deadline = now + cfg.merge_timeout;
        let mut e = engine(cfg);
        start_a_hold(&mut e, now);
        assert_eq!(sent(&mut e).len(), 0);
        assert_eq!(e.poll_timeout(), Some(deadline));
        e.handle_timeout(deadline - Duration::from_micros(1));
        assert!(sent(&mut e).is_empty());
        e.handle_timeout(deadline);
        let out = sent(&mut e);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, Port::Inner);
        assert_eq!(out[0].1.len(), L2 + 20 + 32 + MSS);
        assert_eq!(e.counters().flushes(FlushReason::Timeout), 1);
        assert_eq!(e.held_bytes(), 0);
        // Only housekeeping is left to wake for (it ran at the timeout).
        assert_eq!(e.poll_timeout(), Some(deadline + HOUSEKEEPING));
    }

    #[test]
    fn holds_and_caravans_share_one_deadline_queue() {
        let now = Instant::now();
        let cfg = Config { caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap()], ..Config::default() };
        let timeout = cfg.merge_timeout;
        let mut e = engine(cfg);
        start_a_hold(&mut e, now);
        let later = now + Duration::from_micros(100);
        let mut d = udp(false, Port::Outer, b"one");
        assert_eq!(e.handle_packet(later, Port::Outer, &mut d, PacketMeta::PLAIN), Verdict::Consumed);
        assert_eq!(e.poll_timeout(), Some(now + timeout));
        e.handle_timeout(now + timeout);
        assert_eq!(sent(&mut e).len(), 1, "the hold");
        assert_eq!(e.poll_timeout(), Some(later + timeout), "then the caravan");
        e.handle_timeout(later + timeout);
        let out = sent(&mut e);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1, d, "a caravan of one datagram leaves as that datagram");
        assert_eq!(e.counters().caravan.timeouts, 1);
    }

    #[test]
    fn flush_all_sends_every_hold_and_caravan() {
        let now = Instant::now();
        let cfg = Config { caravan_prefixes: vec!["203.0.113.0/24".parse().unwrap()], ..Config::default() };
        let mut e = engine(cfg);
        start_a_hold(&mut e, now);
        for p in [&b"a"[..], b"b"] {
            let mut d = udp(false, Port::Outer, p);
            assert_eq!(e.handle_packet(now, Port::Outer, &mut d, PacketMeta::PLAIN), Verdict::Consumed);
        }
        e.flush_all(now);
        let out = sent(&mut e);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(p, _)| *p == Port::Inner));
        assert_eq!(e.counters().flushes(FlushReason::Shutdown), 1);
        assert_eq!(e.counters().caravan.built, 1);
        assert_eq!(e.held_bytes(), 0);
        assert_eq!(e.poll_timeout(), Some(now + HOUSEKEEPING));
    }

    #[test]
    fn udp_from_inside_goes_the_router_path() {
        let mut e = engine(Config::default());
        let mut d = udp(true, Port::Inner, &[7u8; 2000]);
        // IPv6 and larger than the eMTU: dropped (no ICMP source configured).
        assert_eq!(
            e.handle_packet(Instant::now(), Port::Inner, &mut d, PacketMeta::PLAIN),
            Verdict::Dropped(DropReason::TooBigV6)
        );
        assert_eq!(e.counters().icmp_no_source, 1);
    }
}
