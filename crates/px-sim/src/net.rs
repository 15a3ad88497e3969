//! The network: a chain of nodes joined by links, two endpoints at the ends,
//! routers in between, driven by one event loop.
//!
//! Node 0 is endpoint A, node `n` is endpoint B, nodes `1..n` are routers.
//! Link `i` joins node `i` and node `i + 1` and exists once per direction
//! with its own queue. Each router has a [`RouterPolicy`]: whether it
//! fragments DF-clear packets that are too big for the next link, whether it
//! answers DF-set ones with ICMP "fragmentation needed" (or silently drops
//! them: an ICMP black hole), and whether it drops every fragment it
//! receives (a fragment-filtering firewall). Endpoints are sans-I/O
//! [`Endpoint`]s: the loop hands them packets and timeouts and drains what
//! they want to send.
//!
//! Determinism: all randomness comes from one `ChaCha8Rng` seeded from the
//! run's seed, events are ordered by (time, sequence), and every processed
//! event is folded into a [`TraceHash`]. The same configuration and seed
//! therefore give the same trace hash, event for event.

use std::mem;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use thiserror::Error;

use crate::link::{Link, LinkConfig, LinkOutcome};
use crate::packet::{Dir, ICMP_PTB_SIZE, Packet, PacketPool, Payload, fragment};
use crate::queue::EventQueue;
use crate::time::SimTime;
use crate::trace::TraceHash;

/// How a router treats packets it cannot or will not forward as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RouterPolicy {
    /// Fragments DF-clear packets larger than the next link's MTU (an IPv4
    /// router does; otherwise they are dropped like DF-set ones).
    pub fragments: bool,
    /// Sends ICMP "fragmentation needed" for packets it drops as too big;
    /// `false` makes the router an ICMP black hole.
    pub sends_ptb: bool,
    /// Drops every IP fragment it receives.
    pub drops_fragments: bool,
}

impl Default for RouterPolicy {
    /// A well-behaved IPv4 router.
    fn default() -> Self {
        RouterPolicy { fragments: true, sends_ptb: true, drops_fragments: false }
    }
}

/// A path: `links[i]` joins node `i` and node `i + 1`; `routers[k]` is the
/// policy of node `k + 1`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathConfig {
    /// One entry per hop, from endpoint A toward endpoint B.
    pub links: Vec<LinkConfig>,
    /// One entry per router (`links.len() - 1` of them).
    pub routers: Vec<RouterPolicy>,
}

impl PathConfig {
    /// Smallest MTU of any link at `now`: the true path MTU.
    #[must_use]
    pub fn path_mtu_at(&self, now: SimTime) -> u32 {
        self.links.iter().map(|l| l.mtu_at(now)).min().unwrap_or(0)
    }
}

/// Why a path configuration was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PathError {
    /// A path needs at least one link.
    #[error("a path needs at least one link")]
    NoLinks,
    /// There must be exactly one router policy between each pair of links.
    #[error("{links} links need {} router policies, got {routers}", links - 1)]
    RouterCount {
        /// Number of links given.
        links: usize,
        /// Number of router policies given.
        routers: usize,
    },
    /// An MTU below the IPv4 minimum of 68 bytes (RFC 791).
    #[error("link {link} has MTU {mtu}, below the IPv4 minimum of 68")]
    MtuTooSmall {
        /// Index of the link.
        link: usize,
        /// The offending MTU.
        mtu: u32,
    },
}

/// Which endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum End {
    /// Node 0.
    A,
    /// The last node.
    B,
}

/// A sans-I/O endpoint driven by the simulator.
pub trait Endpoint {
    /// A packet (or fragment) addressed to this endpoint arrived.
    fn on_packet(&mut self, now: SimTime, pkt: &Packet);
    /// The deadline last returned by [`Endpoint::poll_timeout`] passed.
    fn on_timeout(&mut self, now: SimTime);
    /// Next packet to send now, if any.
    #[must_use]
    fn poll_transmit(&mut self, now: SimTime) -> Option<Packet>;
    /// When the endpoint next wants [`Endpoint::on_timeout`].
    #[must_use]
    fn poll_timeout(&self) -> Option<SimTime>;
}

/// Packets dropped in the network, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DropCounts {
    /// Tail-dropped by a full queue.
    pub queue_full: u64,
    /// Lost on a wire (random loss).
    pub wire_loss: u64,
    /// DF set (or router does not fragment) and larger than the next link.
    pub too_big: u64,
    /// Dropped by a fragment-filtering router.
    pub fragment_filtered: u64,
    /// An endpoint tried to send a DF-set packet larger than its own link.
    pub local_too_big: u64,
}

/// Counters of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NetStats {
    /// Events processed.
    pub events: u64,
    /// Packets sent by endpoint A / B.
    pub sent: [u64; 2],
    /// Bytes (IP lengths) sent by endpoint A / B.
    pub sent_bytes: [u64; 2],
    /// Packets delivered to endpoint A / B.
    pub delivered: [u64; 2],
    /// Drops by reason.
    pub drops: DropCounts,
    /// ICMP "fragmentation needed" messages generated.
    pub ptb_sent: u64,
    /// Fragments created by routers and hosts.
    pub fragments_created: u64,
}

#[derive(Clone, Copy)]
enum Event {
    /// A packet (pool handle) reaches `node`.
    Arrive { node: u32, pkt: u32 },
    /// Endpoint timer; stale unless `generation` is the endpoint's current one.
    Timer { end: End, generation: u64 },
}

#[derive(Clone, Copy, Default)]
struct TimerSlot {
    at: Option<SimTime>,
    generation: u64,
}

/// Trace kinds, folded into the hash with each event's facts.
mod tag {
    pub const ARRIVE: u8 = 1;
    pub const DROP: u8 = 2;
    pub const TIMER: u8 = 3;
    pub const SEND: u8 = 4;
}

/// A running simulation of one path between endpoints `A` and `B`.
pub struct Network<A, B> {
    now: SimTime,
    queue: EventQueue<Event>,
    pool: PacketPool,
    fwd: Vec<Link>,
    rev: Vec<Link>,
    routers: Vec<RouterPolicy>,
    rng: ChaCha8Rng,
    trace: TraceHash,
    stats: NetStats,
    timers: [TimerSlot; 2],
    next_ip_id: u32,
    started: bool,
    scratch: Vec<Packet>,
    /// Endpoint A (node 0).
    pub a: A,
    /// Endpoint B (last node).
    pub b: B,
}

impl<A: Endpoint, B: Endpoint> Network<A, B> {
    /// Builds the network; `seed` drives every random draw of the run.
    pub fn new(path: PathConfig, seed: u64, a: A, b: B) -> Result<Self, PathError> {
        if path.links.is_empty() {
            return Err(PathError::NoLinks);
        }
        if path.routers.len() + 1 != path.links.len() {
            return Err(PathError::RouterCount { links: path.links.len(), routers: path.routers.len() });
        }
        for (i, l) in path.links.iter().enumerate() {
            let smallest = l.mtu_changes.iter().map(|c| c.1).fold(l.mtu, u32::min);
            if smallest < 68 {
                return Err(PathError::MtuTooSmall { link: i, mtu: smallest });
            }
        }
        Ok(Network {
            now: SimTime::ZERO,
            queue: EventQueue::new(),
            pool: PacketPool::default(),
            fwd: path.links.iter().cloned().map(Link::new).collect(),
            rev: path.links.into_iter().map(Link::new).collect(),
            routers: path.routers,
            rng: ChaCha8Rng::seed_from_u64(seed),
            trace: TraceHash::new(),
            stats: NetStats::default(),
            timers: [TimerSlot::default(); 2],
            next_ip_id: 0,
            started: false,
            scratch: Vec::with_capacity(16),
            a,
            b,
        })
    }

    /// Current simulated time.
    #[must_use]
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Fingerprint of everything processed so far.
    #[must_use]
    pub fn trace_hash(&self) -> u64 {
        self.trace.value()
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// Number of hops.
    #[must_use]
    pub fn hops(&self) -> usize {
        self.fwd.len()
    }

    /// From `at` on, link `link` (both directions) carries at most `mtu`
    /// bytes: for an experiment whose MTU change is timed from an event of
    /// the run (the picoquic MTU-drop test drops it 1 s after the handshake).
    /// Earlier changes stay; `at` must not lie in the past.
    pub fn schedule_mtu_change(&mut self, link: usize, at: SimTime, mtu: u32) -> Result<(), PathError> {
        if mtu < 68 {
            return Err(PathError::MtuTooSmall { link, mtu });
        }
        for links in [&mut self.fwd, &mut self.rev] {
            if let Some(l) = links.get_mut(link) {
                let changes = &mut l.config.mtu_changes;
                changes.push((at.max(self.now), mtu));
                changes.sort_by_key(|c| c.0);
            }
        }
        Ok(())
    }

    /// Runs until `stop` returns true (checked after every event), no event
    /// is left, or the next event would be later than `deadline`. Returns
    /// the time reached. Can be called again to continue.
    pub fn run(&mut self, deadline: SimTime, mut stop: impl FnMut(&A, &B) -> bool) -> SimTime {
        if !self.started {
            self.started = true;
            self.service(End::A);
            self.service(End::B);
        }
        while !stop(&self.a, &self.b) {
            match self.queue.peek_time() {
                Some(t) if t <= deadline => {}
                _ => break,
            }
            let Some((at, event)) = self.queue.pop() else {
                break;
            };
            self.now = at;
            self.stats.events += 1;
            match event {
                Event::Arrive { node, pkt } => {
                    let pkt = self.pool.take(pkt);
                    self.arrive(node as usize, pkt);
                }
                Event::Timer { end, generation } => {
                    let slot = &mut self.timers[end as usize];
                    if slot.generation != generation {
                        continue;
                    }
                    slot.at = None;
                    self.trace.event(tag::TIMER, &[at.as_nanos(), end as u64]);
                    match end {
                        End::A => self.a.on_timeout(at),
                        End::B => self.b.on_timeout(at),
                    }
                    self.service(end);
                }
            }
        }
        self.now
    }

    fn arrive(&mut self, node: usize, pkt: Packet) {
        self.trace.event(
            tag::ARRIVE,
            &[
                self.now.as_nanos(),
                node as u64,
                u64::from(pkt.size),
                u64::from(pkt.ip_id),
                u64::from(pkt.frag.offset) << 1 | u64::from(pkt.frag.more),
                u64::from(pkt.payload.kind()),
            ],
        );
        let last = self.fwd.len();
        match (node, pkt.dir) {
            (n, Dir::Forward) if n == last => {
                self.stats.delivered[End::B as usize] += 1;
                self.b.on_packet(self.now, &pkt);
                self.service(End::B);
            }
            (0, Dir::Reverse) => {
                self.stats.delivered[End::A as usize] += 1;
                self.a.on_packet(self.now, &pkt);
                self.service(End::A);
            }
            (n, _) => {
                let policy = self.routers[n - 1];
                if policy.drops_fragments && pkt.frag.is_fragment() {
                    self.stats.drops.fragment_filtered += 1;
                    self.drop_trace(n, 1, &pkt);
                    return;
                }
                self.forward(n, pkt, Some(policy));
            }
        }
    }

    /// Sends `pkt` from `node` onto the next link in its direction.
    /// `policy` is `None` for an endpoint's own stack.
    fn forward(&mut self, node: usize, pkt: Packet, policy: Option<RouterPolicy>) {
        let link = match pkt.dir {
            Dir::Forward => node,
            Dir::Reverse => node - 1,
        };
        let mtu = self.links(pkt.dir)[link].config.mtu_at(self.now);
        if pkt.size <= mtu {
            self.transmit(node, link, pkt);
            return;
        }
        // Too big for the next link.
        let may_fragment = !pkt.df && policy.is_none_or(|p| p.fragments);
        if may_fragment {
            let mut pieces = mem::take(&mut self.scratch);
            pieces.clear();
            fragment(&pkt, mtu, |p| pieces.push(p));
            self.stats.fragments_created += pieces.len() as u64;
            for p in pieces.drain(..) {
                self.transmit(node, link, p);
            }
            self.scratch = pieces;
            return;
        }
        match policy {
            None => {
                self.stats.drops.local_too_big += 1;
                self.drop_trace(node, 2, &pkt);
            }
            Some(p) => {
                self.stats.drops.too_big += 1;
                self.drop_trace(node, 3, &pkt);
                // RFC 1191 §4: the router reports the next-hop MTU, quoting
                // the offending header. Never about an ICMP error itself.
                if p.sends_ptb && !matches!(pkt.payload, Payload::TooBig { .. }) {
                    self.stats.ptb_sent += 1;
                    let mut ptb = Packet::new(
                        ICMP_PTB_SIZE,
                        false,
                        Payload::TooBig { mtu, orig_size: pkt.size, orig: pkt.payload.quoted() },
                    );
                    ptb.dir = pkt.dir.reverse();
                    ptb.ip_id = self.alloc_ip_id();
                    self.forward(node, ptb, Some(p));
                }
            }
        }
    }

    fn transmit(&mut self, node: usize, link: usize, pkt: Packet) {
        let now = self.now;
        let outcome = match pkt.dir {
            Dir::Forward => self.fwd[link].send(now, pkt.size, &mut self.rng),
            Dir::Reverse => self.rev[link].send(now, pkt.size, &mut self.rng),
        };
        match outcome {
            LinkOutcome::Arrives(at) => {
                let next = match pkt.dir {
                    Dir::Forward => link + 1,
                    Dir::Reverse => link,
                };
                let handle = self.pool.insert(pkt);
                self.queue.push(at, Event::Arrive { node: next as u32, pkt: handle });
            }
            LinkOutcome::QueueFull => {
                self.stats.drops.queue_full += 1;
                self.drop_trace(node, 4, &pkt);
            }
            LinkOutcome::Lost => {
                self.stats.drops.wire_loss += 1;
                self.drop_trace(node, 5, &pkt);
            }
        }
    }

    fn links(&self, dir: Dir) -> &[Link] {
        match dir {
            Dir::Forward => &self.fwd,
            Dir::Reverse => &self.rev,
        }
    }

    fn drop_trace(&mut self, node: usize, reason: u64, pkt: &Packet) {
        self.trace.event(tag::DROP, &[self.now.as_nanos(), node as u64, reason, u64::from(pkt.ip_id)]);
    }

    fn alloc_ip_id(&mut self) -> u32 {
        self.next_ip_id = self.next_ip_id.wrapping_add(1);
        self.next_ip_id
    }

    /// Drains an endpoint's transmissions and re-arms its timer.
    fn service(&mut self, end: End) {
        loop {
            let out = match end {
                End::A => self.a.poll_transmit(self.now),
                End::B => self.b.poll_transmit(self.now),
            };
            let Some(mut pkt) = out else { break };
            pkt.ip_id = self.alloc_ip_id();
            let node = match end {
                End::A => {
                    pkt.dir = Dir::Forward;
                    0
                }
                End::B => {
                    pkt.dir = Dir::Reverse;
                    self.fwd.len()
                }
            };
            self.stats.sent[end as usize] += 1;
            self.stats.sent_bytes[end as usize] += u64::from(pkt.size);
            self.trace.event(
                tag::SEND,
                &[self.now.as_nanos(), end as u64, u64::from(pkt.size), u64::from(pkt.payload.kind())],
            );
            self.forward(node, pkt, None);
        }
        let want = match end {
            End::A => self.a.poll_timeout(),
            End::B => self.b.poll_timeout(),
        };
        let slot = &mut self.timers[end as usize];
        if want != slot.at {
            slot.generation += 1;
            slot.at = want;
            if let Some(at) = want {
                // A deadline in the past fires now, never back in time.
                let generation = slot.generation;
                self.queue.push(at.max(self.now), Event::Timer { end, generation });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Sends a scripted list of packets at given times; records arrivals.
    #[derive(Default)]
    struct Script {
        to_send: Vec<(SimTime, Packet)>,
        got: Vec<(SimTime, Packet)>,
    }

    impl Endpoint for Script {
        fn on_packet(&mut self, now: SimTime, pkt: &Packet) {
            self.got.push((now, *pkt));
        }
        fn on_timeout(&mut self, _now: SimTime) {}
        fn poll_transmit(&mut self, now: SimTime) -> Option<Packet> {
            match self.to_send.first() {
                Some(&(t, p)) if t <= now => {
                    self.to_send.remove(0);
                    Some(p)
                }
                _ => None,
            }
        }
        fn poll_timeout(&self) -> Option<SimTime> {
            self.to_send.first().map(|s| s.0)
        }
    }

    fn probe(size: u32, df: bool) -> Packet {
        Packet::new(size, df, Payload::Probe { id: u64::from(size) })
    }

    fn chain(mtus: &[u32], policy: RouterPolicy) -> PathConfig {
        PathConfig {
            links: mtus.iter().map(|&m| LinkConfig::ideal(m, Duration::from_millis(5))).collect(),
            routers: vec![policy; mtus.len() - 1],
        }
    }

    fn run_one(path: PathConfig, pkts: Vec<Packet>) -> Network<Script, Script> {
        let a = Script { to_send: pkts.into_iter().map(|p| (SimTime::ZERO, p)).collect(), got: Vec::new() };
        let mut net = Network::new(path, 1, a, Script::default()).expect("valid path");
        net.run(SimTime::from_millis(10_000), |_, _| false);
        net
    }

    #[test]
    fn refuses_bad_paths() {
        let mut p = chain(&[1500, 1500], RouterPolicy::default());
        p.routers.clear();
        assert_eq!(
            Network::new(p, 0, Script::default(), Script::default()).err(),
            Some(PathError::RouterCount { links: 2, routers: 0 })
        );
        let p = chain(&[1500, 40], RouterPolicy::default());
        assert!(matches!(
            Network::new(p, 0, Script::default(), Script::default()),
            Err(PathError::MtuTooSmall { link: 1, mtu: 40 })
        ));
    }

    #[test]
    fn fragmenting_router_splits_df_clear() {
        let net = run_one(chain(&[9000, 1400, 1500], RouterPolicy::default()), vec![probe(3000, false)]);
        let sizes: Vec<u32> = net.b.got.iter().map(|g| g.1.size).collect();
        assert_eq!(sizes, vec![1396, 1396, 248]);
        assert_eq!(net.b.got[0].0, SimTime::from_millis(15));
        assert_eq!(net.stats().fragments_created, 3);
    }

    #[test]
    fn ptb_router_answers_df_set() {
        let net = run_one(chain(&[9000, 1400, 1500], RouterPolicy::default()), vec![probe(3000, true)]);
        assert!(net.b.got.is_empty());
        assert_eq!(net.a.got.len(), 1);
        let (t, ptb) = net.a.got[0];
        // Dropped at node 1 after 5 ms, ICMP back over link 0: 10 ms.
        assert_eq!(t, SimTime::from_millis(10));
        assert_eq!(
            ptb.payload,
            Payload::TooBig { mtu: 1400, orig_size: 3000, orig: crate::packet::QuotedPayload::Probe(3000) }
        );
        assert_eq!(net.stats().drops.too_big, 1);
    }

    #[test]
    fn black_hole_drops_silently() {
        let policy = RouterPolicy { sends_ptb: false, ..RouterPolicy::default() };
        let net = run_one(chain(&[9000, 1400, 1500], policy), vec![probe(3000, true), probe(1400, true)]);
        assert!(net.a.got.is_empty());
        assert_eq!(net.b.got.len(), 1);
        assert_eq!(net.b.got[0].1.size, 1400);
        assert_eq!(net.stats().ptb_sent, 0);
        assert_eq!(net.stats().drops.too_big, 1);
    }

    #[test]
    fn non_fragmenting_router_drops_df_clear() {
        let policy = RouterPolicy { fragments: false, ..RouterPolicy::default() };
        let net = run_one(chain(&[9000, 1400], policy), vec![probe(3000, false)]);
        assert!(net.b.got.is_empty());
        assert_eq!(net.a.got.len(), 1, "still reports too big");
    }

    #[test]
    fn fragment_filter_drops_fragments_only() {
        // Node 1 fragments, node 2 filters fragments.
        let mut p = chain(&[9000, 1400, 1500], RouterPolicy::default());
        p.routers[1].drops_fragments = true;
        let net = run_one(p, vec![probe(3000, false), probe(1300, false)]);
        assert_eq!(net.b.got.len(), 1);
        assert_eq!(net.b.got[0].1.size, 1300);
        assert_eq!(net.stats().drops.fragment_filtered, 3);
    }

    #[test]
    fn host_fragments_its_own_df_clear_and_refuses_df_set() {
        let net = run_one(chain(&[1500], RouterPolicy::default()), vec![probe(2000, false), probe(2000, true)]);
        assert_eq!(net.b.got.len(), 2);
        assert_eq!(net.stats().drops.local_too_big, 1);
    }

    #[test]
    fn mtu_change_applies_from_its_time() {
        let mut p = chain(&[1500, 1500], RouterPolicy::default());
        p.links[1].mtu_changes = vec![(SimTime::from_millis(100), 1394)];
        let a = Script {
            to_send: vec![(SimTime::ZERO, probe(1500, true)), (SimTime::from_millis(200), probe(1500, true))],
            got: Vec::new(),
        };
        let mut net = Network::new(p, 1, a, Script::default()).expect("valid");
        net.run(SimTime::from_millis(1000), |_, _| false);
        assert_eq!(net.b.got.len(), 1);
        assert_eq!(net.a.got.len(), 1);
        assert!(matches!(net.a.got[0].1.payload, Payload::TooBig { mtu: 1394, .. }));
    }

    fn lossy_run(seed: u64) -> (u64, usize) {
        let mut p = chain(&[1500, 1500], RouterPolicy::default());
        for l in &mut p.links {
            l.loss = 0.2;
            l.bandwidth_bps = 10_000_000;
            l.queue_packets = Some(20);
        }
        let a = Script {
            to_send: (0..200).map(|i| (SimTime::from_nanos(i * 1_000_000), probe(1000, true))).collect(),
            got: Vec::new(),
        };
        let mut net = Network::new(p, seed, a, Script::default()).expect("valid");
        net.run(SimTime::MAX, |_, _| false);
        (net.trace_hash(), net.b.got.len())
    }

    #[test]
    fn same_seed_same_trace_different_seed_different() {
        let (h1, n1) = lossy_run(7);
        let (h2, n2) = lossy_run(7);
        let (h3, _) = lossy_run(8);
        assert_eq!((h1, n1), (h2, n2));
        assert_ne!(h1, h3);
        // 20 % loss on each of two links: about 64 % arrive.
        assert!((100..160).contains(&n1), "{n1}");
    }
}
