//! Path MTUs learned from ICMP "fragmentation needed" (RFC 1191) and
//! "packet too big" (RFC 8201), per direction: toward destinations outside
//! (ICMP from the outer port) and toward inner hosts (ICMP from routers of
//! the b-network, arriving on the inner port). Entries expire (RFC 1191
//! §6.3: after about 10 minutes an estimate should be raised again, here by
//! forgetting it) and the cache is bounded.
//!
//! One [`SharedPmtu`] serves every worker of a gateway: an ICMP error reaches
//! whichever worker the fan-out gives it (its hash is the error's addresses,
//! not the quoted flow's), and must apply to the flow on all of them. Each
//! engine reads its own replica ([`PmtuReplica`]) without a lock; one atomic
//! load per packet tells whether the shared cache changed, and then the
//! replica applies the changes since it last looked (a bounded log), or
//! copies the whole cache if it fell behind the log. The same log carries
//! [`Candidate`]s: errors quoting a flow the receiving worker does not
//! carry, for the worker that does to validate (and learn) when it next
//! looks, i.e. before it sends the flow's next packet.
//!
//! What may be learned is decided by the engine (`engine/learn.rs`, RFC
//! 5927 validation, against the per-flow sequence windows that
//! `crate::conntrack` keeps); this file only keeps what was learned.
//!
//! The same log carries the other direction of knowledge: sizes a
//! destination's path was *seen to carry* (an echo of that size came back
//! whole, `crate::confirm`), which let packets toward a verified neighbour
//! pass untouched. Those are kept apart ([`PmtuReplica::carried`]), with
//! their own expiry, and may go up as well as down.

use core::net::IpAddr;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::flow::FlowKey;
use crate::port::Port;

/// Changes kept for replicas to catch up with one by one.
const LOG_LEN: usize = 256;
/// Candidates one engine may hand to the others per second.
const PROPOSALS_PER_SEC: u32 = 1000;
/// How long an in-window error waits for a second one to confirm it.
const CONFIRM_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);
/// Errors waiting for confirmation, per engine (the oldest is forgotten).
const CONFIRM_SLOTS: usize = 64;

/// A "too big" error that quotes TCP of a flow the worker it reached does
/// not carry: valid if another worker carries the flow with `seq` in its
/// window toward `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub to: Port,
    pub key: FlowKey,
    pub seq: u32,
    pub dst: IpAddr,
    /// Already clamped to the floor.
    pub mtu: u16,
}

#[derive(Debug, Clone, Copy)]
enum Change {
    Learned { to: Port, dst: IpAddr, mtu: u16, expiry: Instant },
    Proposed(Candidate),
    Carried { dst: IpAddr, size: u16, expiry: Instant },
}

#[derive(Debug, Clone)]
pub(crate) struct PmtuCache {
    /// Destination → (MTU, expiry, insertion number).
    map: HashMap<IpAddr, (u16, Instant, u64)>,
    /// Insertion order; entries whose number no longer matches the map's
    /// were superseded and are skipped.
    order: VecDeque<(IpAddr, u64)>,
    max: usize,
    lifetime: Duration,
    next: u64,
}

impl PmtuCache {
    pub fn new(max: usize, lifetime: Duration) -> PmtuCache {
        PmtuCache { map: HashMap::new(), order: VecDeque::new(), max, lifetime, next: 0 }
    }

    /// The learned MTU toward `dst`, if any and not expired. Nothing to
    /// hash while nothing was learned (the common case on the hot path).
    #[inline]
    pub fn get(&self, dst: IpAddr, now: Instant) -> Option<u16> {
        self.get_until(dst, now).map(|(m, _)| m)
    }

    /// [`PmtuCache::get`], with the entry's expiry.
    #[inline]
    pub fn get_until(&self, dst: IpAddr, now: Instant) -> Option<(u16, Instant)> {
        if self.map.is_empty() {
            return None;
        }
        self.map.get(&dst).filter(|(_, exp, _)| *exp > now).map(|(m, exp, _)| (*m, *exp))
    }

    /// Records `mtu` toward `dst` (only ever lowers a live entry). Returns
    /// the expiry of the new entry if anything changed.
    pub fn learn(&mut self, dst: IpAddr, mtu: u16, now: Instant) -> Option<Instant> {
        if self.get(dst, now).is_some_and(|m| m <= mtu) {
            return None;
        }
        let expiry = now + self.lifetime;
        self.set(dst, mtu, expiry);
        Some(expiry)
    }

    /// Stores an entry as it is (a replica applying the shared cache's change).
    fn set(&mut self, dst: IpAddr, mtu: u16, expiry: Instant) {
        while self.map.len() >= self.max && !self.map.contains_key(&dst) {
            let Some((old, n)) = self.order.pop_front() else { break };
            if self.map.get(&old).is_some_and(|e| e.2 == n) {
                self.map.remove(&old);
            }
        }
        let n = self.next;
        self.next += 1;
        self.map.insert(dst, (mtu, expiry, n));
        self.order.push_back((dst, n));
        if self.order.len() > 2 * self.max {
            let map = &self.map;
            self.order.retain(|(a, n)| map.get(a).is_some_and(|e| e.2 == *n));
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// The caches of both directions, indexed by the port toward which the
/// path lies (`Port as usize`).
type Caches = [PmtuCache; 2];

#[derive(Debug)]
struct Learned {
    caches: Caches,
    /// Sizes destinations' paths were seen to carry (`crate::confirm`).
    carried: PmtuCache,
    /// The latest changes, each with its generation.
    log: VecDeque<(u64, Change)>,
}

/// Path MTUs learned by any worker of a gateway: bounded (`max` entries per
/// direction), behind a mutex taken only to learn and to catch up.
#[derive(Debug)]
pub struct SharedPmtu {
    learned: Mutex<Learned>,
    /// Bumped after every change, read by replicas on every packet.
    generation: AtomicU64,
    /// Replicas made so far: numbers the engines of a gateway.
    replicas: AtomicU64,
    /// The moment the engines count probe seconds from (`crate::confirm`):
    /// the time the first of them asked.
    epoch: OnceLock<Instant>,
}

impl SharedPmtu {
    /// A cache for one gateway, bounded by `max` destinations per direction.
    pub fn new(max: usize, lifetime: Duration) -> Arc<SharedPmtu> {
        let cache = PmtuCache::new(max, lifetime);
        let carried = PmtuCache::new(max, crate::confirm::CARRIED_FOR);
        Arc::new(SharedPmtu {
            learned: Mutex::new(Learned { caches: [cache.clone(), cache], carried, log: VecDeque::new() }),
            generation: AtomicU64::new(0),
            replicas: AtomicU64::new(0),
            epoch: OnceLock::new(),
        })
    }

    /// Records that the path toward `dst` carried `size` (until `expiry`).
    pub(crate) fn carry(&self, dst: IpAddr, size: u16, expiry: Instant) {
        let mut l = self.lock();
        l.carried.set(dst, size, expiry);
        self.log(&mut l, Change::Carried { dst, size, expiry });
    }

    /// Every destination whose path was seen to carry a size, with that
    /// size and how long it stays (for `px status`).
    pub fn carried(&self, now: Instant) -> Vec<(IpAddr, u16, Duration)> {
        let l = self.lock();
        let mut out: Vec<_> = l
            .carried
            .map
            .iter()
            .filter(|(_, (_, expiry, _))| *expiry > now)
            .map(|(dst, (size, expiry, _))| (*dst, *size, expiry.saturating_duration_since(now)))
            .collect();
        out.sort_by_key(|e| e.0);
        out
    }

    /// Learns `mtu` toward `dst` through `to`; whether it changed anything.
    pub(crate) fn learn(&self, to: Port, dst: IpAddr, mtu: u16, now: Instant) -> bool {
        let mut l = self.lock();
        let Some(expiry) = l.caches[to as usize].learn(dst, mtu, now) else { return false };
        self.log(&mut l, Change::Learned { to, dst, mtu, expiry });
        true
    }

    /// Hands a candidate to the other workers.
    pub(crate) fn propose(&self, c: Candidate) {
        let mut l = self.lock();
        self.log(&mut l, Change::Proposed(c));
    }

    /// Every live learned path MTU: the port toward which the path lies,
    /// the destination, the MTU and how long it stays (for `px status`;
    /// takes the lock once).
    pub fn learned(&self, now: Instant) -> Vec<(Port, IpAddr, u16, Duration)> {
        let l = self.lock();
        let mut out = Vec::new();
        for port in [Port::Inner, Port::Outer] {
            for (dst, (mtu, expiry, _)) in &l.caches[port as usize].map {
                if *expiry > now {
                    out.push((port, *dst, *mtu, expiry.saturating_duration_since(now)));
                }
            }
        }
        out.sort_by_key(|e| (e.0 as u8, e.1));
        out
    }

    /// Whether other engines share this cache.
    pub(crate) fn has_peers(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) > 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn log(&self, l: &mut Learned, c: Change) {
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        if l.log.len() == LOG_LEN {
            l.log.pop_front();
        }
        l.log.push_back((generation, c));
        self.generation.store(generation, Ordering::Release);
    }
}

/// One engine's lock-free view of a [`SharedPmtu`].
#[derive(Debug)]
pub(crate) struct PmtuReplica {
    shared: Arc<SharedPmtu>,
    caches: Caches,
    carried: PmtuCache,
    generation: u64,
    /// This engine's number among those sharing the cache (0, 1, ...).
    pub engine: u64,
    /// Scratch for the candidates of one catch-up (no allocation after the first).
    pub candidates: Vec<Candidate>,
    /// Bounds the candidates this engine hands to the others, so that a
    /// flood of spoofed errors costs the other workers little.
    pub proposals: crate::router::limit::IcmpLimiter,
    /// In-window errors not yet confirmed (see [`PmtuReplica::confirm`]).
    pending: VecDeque<(Candidate, Instant)>,
}

impl PmtuReplica {
    pub fn new(shared: Arc<SharedPmtu>) -> PmtuReplica {
        let (caches, carried) = {
            let l = shared.lock();
            (l.caches.clone(), l.carried.clone())
        };
        PmtuReplica {
            carried,
            generation: shared.generation.load(Ordering::Acquire),
            engine: shared.replicas.fetch_add(1, Ordering::Relaxed),
            shared,
            caches,
            candidates: Vec::new(),
            proposals: crate::router::limit::IcmpLimiter::new(PROPOSALS_PER_SEC),
            pending: VecDeque::new(),
        }
    }

    /// The MTU to learn once two errors agree, or `None` while `c` waits.
    ///
    /// RFC 5927 §4.1's check (the quoted sequence number inside the flow's
    /// window) is all that a blind attacker must pass, and while a flow
    /// has a window of W bytes in flight one guess in 2^32 / W passes it
    /// (during a stall of a fast flow, a few thousand guesses suffice). A
    /// router that refuses a flow's packets refuses the next ones too and
    /// says so again, quoting other bytes: so a path MTU is lowered only
    /// when a second in-window error toward the same destination, quoting
    /// another sequence number, arrives within [`CONFIRM_WITHIN`]. A blind
    /// attacker then needs two independent hits. The larger of the two
    /// MTUs is learned (the smaller reduction), and a real router's second
    /// error costs one more refused packet.
    pub fn confirm(&mut self, c: &Candidate, now: Instant) -> Option<u16> {
        self.pending.retain(|(_, at)| now.saturating_duration_since(*at) <= CONFIRM_WITHIN);
        let same = |p: &Candidate| p.to == c.to && p.dst == c.dst;
        if let Some(i) = self.pending.iter().position(|(p, _)| same(p) && p.seq != c.seq) {
            let (p, _) = self.pending.remove(i).expect("position found it");
            return Some(p.mtu.max(c.mtu));
        }
        self.pending.retain(|(p, _)| !same(p));
        if self.pending.len() >= CONFIRM_SLOTS {
            self.pending.pop_front();
        }
        self.pending.push_back((*c, now));
        None
    }

    /// Whether the shared cache changed since this replica last caught up:
    /// one atomic load.
    #[inline]
    pub fn behind(&self) -> bool {
        self.shared.generation.load(Ordering::Acquire) != self.generation
    }

    /// Applies the shared cache's changes; the candidates proposed since
    /// the last look are added to `candidates` for the engine to validate.
    #[cold]
    pub fn catch_up(&mut self, candidates: &mut Vec<Candidate>) {
        let l = self.shared.lock();
        let newest = self.shared.generation.load(Ordering::Acquire);
        match l.log.front() {
            Some((first, _)) if *first <= self.generation + 1 => {
                for &(g, c) in &l.log {
                    match c {
                        _ if g <= self.generation => {}
                        Change::Learned { to, dst, mtu, expiry } => self.caches[to as usize].set(dst, mtu, expiry),
                        Change::Proposed(c) => candidates.push(c),
                        Change::Carried { dst, size, expiry } => self.carried.set(dst, size, expiry),
                    }
                }
            }
            // Fell behind the log: candidates missed are lost (the router
            // sends its error again when the sender retransmits).
            _ => {
                self.caches = l.caches.clone();
                self.carried = l.carried.clone();
            }
        }
        self.generation = newest;
    }

    /// Learns through the shared cache (and at once in this replica).
    pub fn learn(&mut self, to: Port, dst: IpAddr, mtu: u16, now: Instant) -> bool {
        let changed = self.shared.learn(to, dst, mtu, now);
        if changed {
            self.caches[to as usize].learn(dst, mtu, now);
        }
        changed
    }

    pub fn shared(&self) -> &Arc<SharedPmtu> {
        &self.shared
    }

    #[inline]
    pub fn get(&self, to: Port, dst: IpAddr, now: Instant) -> Option<u16> {
        self.caches[to as usize].get(dst, now)
    }

    /// The size the path toward `dst` was seen to carry, and until when.
    #[inline]
    pub fn carried(&self, dst: IpAddr, now: Instant) -> Option<(u16, Instant)> {
        self.carried.get_until(dst, now)
    }

    /// Records through the shared cache (and at once in this replica) that
    /// the path toward `dst` carried `size`.
    pub fn carry(&mut self, dst: IpAddr, size: u16, now: Instant) {
        let expiry = now + crate::confirm::CARRIED_FOR;
        self.shared.carry(dst, size, expiry);
        self.carried.set(dst, size, expiry);
    }

    /// The engines' shared epoch for probe seconds: `now` if none asked
    /// before.
    pub fn epoch(&self, now: Instant) -> Instant {
        *self.shared.epoch.get_or_init(|| now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_lists_live_entries_by_port() {
        let now = Instant::now();
        let sh = SharedPmtu::new(8, Duration::from_secs(600));
        let a: IpAddr = "203.0.113.9".parse().unwrap();
        let b: IpAddr = "2001:db8::9".parse().unwrap();
        assert!(sh.learn(Port::Outer, a, 1280, now));
        assert!(sh.learn(Port::Inner, b, 4000, now));
        let l = sh.learned(now + Duration::from_secs(100));
        assert_eq!(
            l,
            vec![(Port::Inner, b, 4000, Duration::from_secs(500)), (Port::Outer, a, 1280, Duration::from_secs(500))]
        );
        assert!(sh.learned(now + Duration::from_secs(600)).is_empty(), "expired entries are not listed");
    }
    use core::net::Ipv4Addr;

    fn a(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 51, 100, n))
    }

    #[test]
    fn lowers_only_expires_and_bounds() {
        let t0 = Instant::now();
        let mut c = PmtuCache::new(2, Duration::from_secs(600));
        assert!(c.learn(a(1), 1400, t0).is_some());
        assert!(c.learn(a(1), 1450, t0).is_none());
        assert!(c.learn(a(1), 1300, t0).is_some());
        assert_eq!(c.get(a(1), t0), Some(1300));
        assert_eq!(c.get(a(1), t0 + Duration::from_secs(601)), None);
        c.learn(a(2), 1280, t0);
        c.learn(a(3), 1280, t0 + Duration::from_secs(1));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(a(1), t0), None, "oldest evicted");
        assert_eq!(c.get(a(3), t0 + Duration::from_secs(1)), Some(1280));
        for i in 0..100 {
            c.learn(a(3), 1279 - i, t0);
        }
        assert!(c.order.len() <= 4);
    }

    #[test]
    fn an_error_is_believed_only_when_another_about_other_bytes_confirms_it() {
        let shared = SharedPmtu::new(4, Duration::from_secs(600));
        let mut r = PmtuReplica::new(shared);
        let t0 = Instant::now();
        let c = |dst: u8, seq: u32, mtu: u16| Candidate {
            to: Port::Outer,
            key: FlowKey::new(a(dst), a(200), 1, 2),
            seq,
            dst: a(dst),
            mtu,
        };
        assert_eq!(r.confirm(&c(1, 7, 576), t0), None, "one error waits");
        assert_eq!(r.confirm(&c(1, 7, 576), t0), None, "the same bytes again confirm nothing");
        assert_eq!(r.confirm(&c(2, 9, 576), t0), None, "another destination confirms nothing");
        assert_eq!(r.confirm(&c(1, 9, 1000), t0), Some(1000), "other bytes: the larger MTU is learned");
        assert_eq!(r.confirm(&c(1, 11, 576), t0), None, "a confirmation is used once");
        // Too late: the first one is forgotten, the second one waits.
        let late = t0 + CONFIRM_WITHIN + Duration::from_millis(1);
        assert_eq!(r.confirm(&c(1, 13, 576), late), None);
        assert_eq!(r.confirm(&c(1, 15, 576), late), Some(576));
        // Bounded: a flood of errors toward many destinations keeps the
        // newest CONFIRM_SLOTS; the oldest cannot be confirmed any more.
        for d in 0..=CONFIRM_SLOTS as u32 {
            assert_eq!(r.confirm(&c((d % 250) as u8, d, 576), late), None);
        }
        assert!(r.pending.len() <= CONFIRM_SLOTS);
        assert_eq!(r.confirm(&c(0, 1 << 20, 576), late), None, "the first was evicted");
        assert_eq!(r.confirm(&c(CONFIRM_SLOTS as u8, 1 << 20, 576), late), Some(576));
    }

    #[test]
    fn replicas_see_what_any_of_them_learned_per_direction() {
        let t0 = Instant::now();
        let shared = SharedPmtu::new(4, Duration::from_secs(600));
        let (mut r1, mut r2) = (PmtuReplica::new(shared.clone()), PmtuReplica::new(shared.clone()));
        let mut cands = Vec::new();
        assert!(r1.learn(Port::Outer, a(1), 1400, t0));
        assert_eq!(r2.get(Port::Outer, a(1), t0), None, "not before it looks");
        assert!(r2.behind());
        r2.catch_up(&mut cands);
        assert!(!r2.behind());
        assert_eq!(r2.get(Port::Outer, a(1), t0), Some(1400));
        assert_eq!(r2.get(Port::Inner, a(1), t0), None, "the other direction is apart");
        // A replica that fell behind the log copies the whole cache.
        let c = Candidate { to: Port::Outer, key: FlowKey::new(a(1), a(2), 1, 2), seq: 7, dst: a(1), mtu: 576 };
        shared.propose(c);
        r2.catch_up(&mut cands);
        assert_eq!(cands, [c]);
        for i in 0..(LOG_LEN as u16 + 10) {
            r1.learn(Port::Inner, a((i % 3) as u8 + 10), 9000 - i, t0);
        }
        r2.catch_up(&mut cands);
        for n in 10..13 {
            assert_eq!(r2.get(Port::Inner, a(n), t0), r1.get(Port::Inner, a(n), t0));
        }
        assert!(!r2.learn(Port::Outer, a(1), 1450, t0), "never raised");
    }
}
