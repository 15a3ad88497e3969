//! The flow table: O(1) lookup by connection under a keyed hash, a hard
//! bound on entries, and eviction of the least recently used (CLOCK).
//!
//! One entry per TCP connection, keyed the same way for both directions:
//! (outer host, outer port, inner host, inner port). It holds what the
//! connection's segments told (`crate::conntrack`) and the inbound merge
//! state (`crate::merge`).

mod key;

use std::collections::HashMap;
use std::time::Instant;

pub use key::FlowKey;

use crate::conntrack::Conn;
use crate::fast_path::FastState;
use crate::hash::{SeededHash, splitmix};
use crate::merge::decide::MergeState;
use crate::port::Port;

/// What one flow carried, per direction, indexed by the port its segments
/// arrived on (`Port as usize`: outer = inbound): for operators' status,
/// never for a decision. A few adds per received segment, on state the
/// packet touches anyway.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FlowStats {
    /// TCP payload bytes received in user space.
    pub bytes: [u64; 2],
    /// TCP payload bytes the kernel fast path carried in directions since
    /// withdrawn (what it carries now is read from it when asked).
    pub kernel_bytes: [u64; 2],
    /// Times the flow (or a direction of it) came back from the kernel,
    /// and why the last time: a `ReturnReason` name (the kernel handed it
    /// back), or the engine's own (`path_mtu`, `config`, `removed`,
    /// `backlog`).
    pub hand_backs: u32,
    pub last_hand_back: Option<&'static str>,
    /// Frames received (a GRO super-packet counts once).
    pub frames: [u64; 2],
    /// The largest segment size received: a super-packet's segment size,
    /// a plain segment's payload.
    pub largest_segment: [u32; 2],
}

impl FlowStats {
    /// One received segment (or super-packet) of `payload` bytes, made of
    /// segments of `segment` bytes, that arrived on `from`.
    #[inline]
    pub fn record(&mut self, from: Port, payload: usize, segment: usize) {
        let d = from as usize;
        self.bytes[d] += payload as u64;
        self.frames[d] += 1;
        self.largest_segment[d] = self.largest_segment[d].max(segment as u32);
    }

    /// The flow came back from the kernel, for `why`.
    pub fn hand_back(&mut self, why: &'static str) {
        self.hand_backs = self.hand_backs.saturating_add(1);
        self.last_hand_back = Some(why);
    }
}

/// Per-connection state, in named parts: what the connection's segments
/// told (`conn`: handshake, life, sequence windows) and the inbound merge
/// (`merge`: bulk detection, PSH history, the hold).
#[derive(Debug)]
pub(crate) struct Flow {
    pub key: FlowKey,
    /// Unique over the table's life (a reused slot holds a new id).
    #[allow(dead_code)] // identifies a flow in debug output
    pub id: u64,
    pub last_seen: Instant,
    pub conn: Conn,
    pub merge: MergeState,
    /// Where it stands with the kernel fast path.
    pub fast: FastState,
    pub stats: FlowStats,
}

/// Bounded table of flows, with CLOCK (second-chance) eviction: an
/// approximation of least-recently-used that costs one byte store per
/// packet.
///
/// Every lookup sets the flow's reference mark. When the table is full, the
/// clock hand sweeps the slots: a marked flow loses its mark and is passed
/// over, the first unmarked one is the victim, and the hand moves past it.
/// A flow is evicted only if no packet of it was looked up during a whole
/// turn of the hand, i.e. while `max` other flows were created: a flood of
/// spoofed tuples evicts its own entries, not the established flows that
/// keep sending. New flows start unmarked, so a one-packet flow (a spoofed
/// SYN) is the first to go.
///
/// Why not an exact LRU list: moving a flow to the front of an intrusive
/// doubly linked list on every packet writes its two neighbours' links
/// (two more cache lines per packet, on the merge hot path); the mark is
/// one store next to state the packet touches anyway. Eviction is amortised
/// O(1): each step of the hand clears a mark that a lookup set, so the
/// hand moves at most once per lookup plus once per eviction (and at most
/// one full turn, `2 * max` steps, for a single eviction).
#[derive(Debug)]
pub(crate) struct FlowTable {
    map: HashMap<FlowKey, u32, SeededHash>,
    slots: Vec<Option<Flow>>,
    free: Vec<u32>,
    /// Reference marks, by slot (CLOCK).
    marks: Vec<bool>,
    /// The clock hand: the next slot eviction looks at.
    hand: usize,
    /// The next slot the idle scan looks at.
    idle_hand: usize,
    max: usize,
    next_id: u64,
    /// Seed mixed into the front cache's index.
    seed: u64,
    /// Direct-mapped front cache: slot + 1 by a cheap hash of the key (0:
    /// empty). A hit is checked against the slot's own key, so stale
    /// entries are harmless; a miss falls back to the hash map (keys aimed
    /// at one cache entry only make lookups take the keyed map).
    front: Vec<u32>,
}

impl FlowTable {
    pub fn new(max: usize, seed: u64) -> FlowTable {
        FlowTable {
            map: HashMap::with_capacity_and_hasher(max.min(1 << 16), SeededHash(seed)),
            slots: Vec::new(),
            free: Vec::new(),
            marks: Vec::new(),
            hand: 0,
            idle_hand: 0,
            max,
            next_id: 1,
            seed: splitmix(seed),
            front: vec![0; (2 * max).next_power_of_two().clamp(64, 1 << 16)],
        }
    }

    #[inline]
    fn front_index(&self, key: &FlowKey) -> usize {
        let w = key.words;
        let h = (w[0] ^ w[1].rotate_left(29) ^ w[2] ^ w[3].rotate_left(17) ^ w[4] ^ self.seed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 40) as usize & (self.front.len() - 1)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Finds a flow and marks it used (see the CLOCK note on the type).
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey) -> Option<u32> {
        let f = self.front_index(key);
        if let Some(i) = self.front[f].checked_sub(1)
            && self.get(i).is_some_and(|fl| fl.key == *key)
        {
            self.marks[i as usize] = true;
            return Some(i);
        }
        let i = self.map.get(key).copied();
        if let Some(i) = i {
            self.front[f] = i + 1;
            self.marks[i as usize] = true;
        }
        i
    }

    /// Lookup without updating the front cache or the mark.
    pub fn peek(&self, key: &FlowKey) -> Option<u32> {
        match self.front[self.front_index(key)].checked_sub(1) {
            Some(i) if self.get(i).is_some_and(|fl| fl.key == *key) => Some(i),
            _ => self.map.get(key).copied(),
        }
    }

    pub fn get_mut(&mut self, idx: u32) -> Option<&mut Flow> {
        self.slots.get_mut(idx as usize).and_then(Option::as_mut)
    }

    pub fn get(&self, idx: u32) -> Option<&Flow> {
        self.slots.get(idx as usize).and_then(Option::as_ref)
    }

    pub fn is_full(&self) -> bool {
        self.map.len() >= self.max
    }

    /// Inserts a new flow, unmarked; the caller makes room first (see
    /// [`Self::victim`]).
    pub fn insert(&mut self, key: FlowKey, now: Instant) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        let flow = Flow {
            key,
            id,
            last_seen: now,
            conn: Conn::default(),
            merge: MergeState::default(),
            fast: FastState::default(),
            stats: FlowStats::default(),
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(flow);
                self.marks[i as usize] = false;
                i
            }
            None => {
                self.slots.push(Some(flow));
                self.marks.push(false);
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(key, idx);
        idx
    }

    /// The flow to evict to make room (CLOCK: the first unmarked flow from
    /// the hand on, clearing marks on the way); the hand moves past it.
    pub fn victim(&mut self) -> Option<u32> {
        let n = self.slots.len();
        if self.map.is_empty() {
            return None;
        }
        // Two turns at most: after one, every mark is clear.
        for _ in 0..2 * n + 1 {
            let i = self.hand % n;
            self.hand = (i + 1) % n;
            if self.slots[i].is_none() {
                continue;
            }
            if self.marks[i] {
                self.marks[i] = false;
            } else {
                return Some(i as u32);
            }
        }
        None
    }

    /// The next live flow for the idle scan (round robin over the slots,
    /// at most one turn per call).
    pub fn next_for_idle_scan(&mut self) -> Option<u32> {
        let n = self.slots.len();
        for _ in 0..n {
            let i = self.idle_hand % n;
            self.idle_hand = (i + 1) % n;
            if self.slots[i].is_some() {
                return Some(i as u32);
            }
        }
        None
    }

    /// Removes a flow and returns it (its held data is the caller's to flush).
    pub fn remove(&mut self, idx: u32) -> Option<Flow> {
        let flow = self.slots.get_mut(idx as usize)?.take()?;
        self.map.remove(&flow.key);
        self.free.push(idx);
        Some(flow)
    }

    /// Indices of all live flows.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().enumerate().filter(|(_, s)| s.is_some()).map(|(i, _)| i as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::BuildHasher;
    use core::net::{IpAddr, Ipv4Addr};

    fn key(n: u16) -> FlowKey {
        FlowKey::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)), IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)), n, 80)
    }

    #[test]
    fn insert_lookup_remove_reuse() {
        let now = Instant::now();
        let mut t = FlowTable::new(2, 7);
        let a = t.insert(key(1), now);
        let b = t.insert(key(2), now);
        assert!(t.is_full());
        assert_eq!(t.lookup(&key(1)), Some(a));
        // `a` was used since it was created, `b` was not.
        assert_eq!(t.victim(), Some(b));
        t.remove(a).unwrap();
        assert_eq!(t.lookup(&key(1)), None);
        let c = t.insert(key(3), now);
        assert_eq!(c, a, "slot reused");
        assert_eq!(t.lookup(&key(3)), Some(c));
        t.remove(b);
        assert_eq!(t.victim(), Some(c), "the only flow, marked or not");
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_flood_of_new_flows_evicts_itself_not_the_flows_in_use() {
        let now = Instant::now();
        let max = 1000;
        let mut t = FlowTable::new(max, 99);
        let live: Vec<FlowKey> = (0..10).map(key).collect();
        for k in &live {
            t.insert(*k, now);
        }
        // 100 000 one-packet flows; each live flow sends once per 500 of them.
        for n in 0..100_000u32 {
            let k = FlowKey::from_v4(0xc633_6400 | (n >> 16), 0xcb00_7100 | (n & 0xff), n as u16, 443);
            if t.is_full() {
                let v = t.victim().unwrap();
                t.remove(v);
            }
            t.insert(k, now);
            if n % 50 == 0 {
                let k = live[(n / 50) as usize % live.len()];
                assert!(t.lookup(&k).is_some(), "live flow {k:?} evicted after {n} new flows");
            }
            assert!(t.len() <= max);
        }
        assert!(t.slots.len() <= max && t.marks.len() <= max);
    }

    #[test]
    fn victims_are_found_in_bounded_steps_when_every_flow_is_marked() {
        let now = Instant::now();
        let mut t = FlowTable::new(64, 1);
        for n in 0..64 {
            let i = t.insert(key(n), now);
            assert_eq!(t.lookup(&key(n)), Some(i));
        }
        assert!(t.victim().is_some());
        let mut seen = std::collections::HashSet::new();
        for _ in 0..64 {
            seen.insert(t.next_for_idle_scan().unwrap());
        }
        assert_eq!(seen.len(), 64, "the idle scan visits every flow in one turn");
    }

    #[test]
    fn hasher_depends_on_seed_and_key() {
        let h = |seed, k: &FlowKey| SeededHash(seed).hash_one(k);
        assert_ne!(h(1, &key(1)), h(1, &key(2)));
        assert_ne!(h(1, &key(1)), h(2, &key(1)));
    }
}
