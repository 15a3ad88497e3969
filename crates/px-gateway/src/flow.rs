//! The flow table: O(1) lookup by connection under a keyed hash, a hard
//! bound on entries, and eviction of the least recently used (CLOCK).
//!
//! One entry per TCP connection, keyed the same way for both directions:
//! (outer host, outer port, inner host, inner port). It holds the inbound
//! merge state and what the handshake told about both ends.

use core::hash::{BuildHasher, Hasher};
use core::net::IpAddr;
use std::collections::HashMap;
use std::time::Instant;

use px_wire::IpVersion;

use crate::merge::held::Held;
use crate::pmtu::{CheckBudget, SeqWindow};
use crate::port::Port;
use crate::segment::Seg;

/// A connection as the gateway sees it: (outer host, outer port, inner
/// host, inner port), packed into words so that comparing and hashing a key
/// is a handful of word operations. IPv4 keys use the first two words only.
#[derive(Debug, Clone, Copy, Eq)]
pub struct FlowKey {
    words: [u64; 5],
}

impl PartialEq for FlowKey {
    /// Word by word with an early exit (array equality calls `bcmp`).
    #[inline]
    fn eq(&self, o: &FlowKey) -> bool {
        let (a, b) = (&self.words, &o.words);
        a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4]
    }
}

impl FlowKey {
    pub fn new(outer_addr: IpAddr, inner_addr: IpAddr, outer_port: u16, inner_port: u16) -> FlowKey {
        let ports = (outer_port as u64) << 16 | inner_port as u64;
        match (outer_addr, inner_addr) {
            (IpAddr::V4(o), IpAddr::V4(i)) => FlowKey::from_v4(u32::from(o), u32::from(i), outer_port, inner_port),
            (o, i) => {
                let wide = |a: IpAddr| match a {
                    IpAddr::V4(v) => u128::from(v.to_ipv6_mapped()),
                    IpAddr::V6(v) => u128::from(v),
                };
                let (o, i) = (wide(o), wide(i));
                // Bit 32 of the ports word marks IPv6, so a v6 key never
                // equals a v4 one.
                FlowKey { words: [(o >> 64) as u64, ports | 1 << 32, o as u64, (i >> 64) as u64, i as u64] }
            }
        }
    }

    /// An IPv4 key from the addresses as host-order words.
    #[inline]
    pub fn from_v4(outer_addr: u32, inner_addr: u32, outer_port: u16, inner_port: u16) -> FlowKey {
        let ports = (outer_port as u64) << 16 | inner_port as u64;
        FlowKey { words: [(outer_addr as u64) << 32 | inner_addr as u64, ports, 0, 0, 0] }
    }

    /// The connection's flow key, for a segment that arrived on `from`.
    /// IPv4 keys are read as words straight from the frame.
    pub(crate) fn of_segment(seg: &Seg, frame: &[u8], from: Port) -> FlowKey {
        let (outer_port, inner_port) = match from {
            Port::Outer => (seg.src_port, seg.dst_port),
            Port::Inner => (seg.dst_port, seg.src_port),
        };
        if seg.info.version == IpVersion::V4 {
            // One bounds check for both addresses.
            let a = seg.info.l3 + 12;
            let w = frame.get(a..a + 8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map_or(0, u64::from_be_bytes);
            let (src, dst) = ((w >> 32) as u32, w as u32);
            let (outer, inner) = if from == Port::Outer { (src, dst) } else { (dst, src) };
            return FlowKey::from_v4(outer, inner, outer_port, inner_port);
        }
        match from {
            Port::Outer => FlowKey::new(seg.info.src, seg.info.dst, outer_port, inner_port),
            Port::Inner => FlowKey::new(seg.info.dst, seg.info.src, outer_port, inner_port),
        }
    }

    fn is_v6(&self) -> bool {
        self.words[1] & 1 << 32 != 0
    }
}

impl core::hash::Hash for FlowKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.words[0]);
        h.write_u64(self.words[1]);
        if self.is_v6() {
            h.write_u64(self.words[2]);
            h.write_u64(self.words[3]);
            h.write_u64(self.words[4]);
        }
    }
}

/// Per-connection state.
#[derive(Debug)]
pub(crate) struct Flow {
    pub key: FlowKey,
    /// Unique over the table's life (a reused slot holds a new id).
    #[allow(dead_code)] // identifies a flow in debug output
    pub id: u64,
    pub last_seen: Instant,
    /// Next inbound sequence number expected (end of the last inbound
    /// segment that advanced the stream).
    pub next_seq: Option<u32>,
    /// Largest inbound payload seen, and in-order segments of that size in a row.
    pub max_payload: u32,
    pub full_run: u16,
    pub bulk: bool,
    /// MSS the inner host advertised (before the gateway clamped it).
    pub inner_mss: Option<u16>,
    /// MSS the outer host advertised (before the gateway raised it).
    pub outer_mss: Option<u16>,
    /// What the segments' flags and options told about the connection.
    pub conn: Conn,
    pub held: Option<Held>,
    /// Sequence space of the data sent toward the outer port (the inner
    /// host's) and toward the inner port, for validating ICMP errors that
    /// quote this flow (RFC 5927; `router/learn.rs`).
    pub seq_out: SeqWindow,
    pub seq_in: SeqWindow,
    /// Errors quoting this flow checked against those windows this second.
    pub icmp_checks: CheckBudget,
    /// What the flow's PSHs were followed by (adaptive PSH, docs/merge.md):
    /// arrival of the last PSH not yet followed by data, and one bit per
    /// earlier PSH, newest in bit 0: 1 if more data came within the merge
    /// timeout.
    pub psh_at: Option<Instant>,
    pub psh_history: u8,
    /// The handshake negotiated AccECN: CWR is a bit of the ACE counter.
    pub accecn: bool,
}

/// What a flow's segments told about its connection: whether a SYN may
/// still start one (see `crate::mss`), and whether it is signed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Conn {
    /// A segment without SYN went by (the handshake is over, or the
    /// gateway joined the connection after it): from now on a SYN is not a
    /// new connection unless the old one ended.
    pub established: bool,
    /// FIN seen from the outer host, and from the inner host.
    pub fin_outer: bool,
    pub fin_inner: bool,
    /// A plausible RST (from the inner host, or from outside at the
    /// expected sequence).
    pub reset: bool,
    /// TCP-MD5 (RFC 2385) or TCP-AO (RFC 5925): passed untouched.
    pub signed: bool,
    /// Sequence numbers of the SYNs taken from each side: the same SYN
    /// again is a retransmission, not a new connection.
    pub syn_outer: Option<u32>,
    pub syn_inner: Option<u32>,
}

impl Conn {
    /// Whether the connection is over, so that a SYN on its tuple may
    /// start the next one.
    pub fn ended(&self) -> bool {
        self.reset || (self.fin_outer && self.fin_inner)
    }
}

/// Keyed hash of flow keys: SipHash-1-3 (the hash of std's `HashMap`), with
/// a 128-bit key derived from `Config::hash_seed`, which the runtime draws
/// from the OS random source. Flow keys are chosen by outside senders; with
/// an unkeyed or weakly keyed hash they could aim a flood at one bucket
/// (hash flooding); SipHash is a PRF, so without the key they cannot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeededHash(pub u64);

/// SipHash-1-3 over the 64-bit words a key writes (keys are short: 2 or 5
/// words, so this is a handful of rounds per lookup).
pub(crate) struct KeyHasher {
    v: [u64; 4],
    len: u64,
}

#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// SplitMix64: spreads one seed over the two key words.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u64(&mut self, m: u64) {
        self.v[3] ^= m;
        sip_round(&mut self.v);
        self.v[0] ^= m;
        self.len += 8;
    }

    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64);
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        let mut v = self.v;
        let b = (self.len & 0xff) << 56;
        v[3] ^= b;
        sip_round(&mut v);
        v[0] ^= b;
        v[2] ^= 0xff;
        sip_round(&mut v);
        sip_round(&mut v);
        sip_round(&mut v);
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

impl BuildHasher for SeededHash {
    type Hasher = KeyHasher;
    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        let (k0, k1) = (splitmix(self.0), splitmix(self.0 ^ 0x6a09_e667_f3bc_c908));
        KeyHasher {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            len: 0,
        }
    }
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
            next_seq: None,
            max_payload: 0,
            full_run: 0,
            bulk: false,
            inner_mss: None,
            outer_mss: None,
            conn: Conn::default(),
            held: None,
            seq_out: SeqWindow::default(),
            icmp_checks: CheckBudget::default(),
            seq_in: SeqWindow::default(),
            psh_at: None,
            psh_history: 0,
            accecn: false,
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
    use core::net::Ipv4Addr;

    fn key(n: u16) -> FlowKey {
        FlowKey::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)), IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)), n, 80)
    }

    #[test]
    fn v4_and_v6_keys_differ() {
        let v4 = key(1);
        let v6 = FlowKey::new(
            IpAddr::V6(Ipv4Addr::new(198, 51, 100, 1).to_ipv6_mapped()),
            IpAddr::V6(Ipv4Addr::new(203, 0, 113, 1).to_ipv6_mapped()),
            1,
            80,
        );
        assert_ne!(v4, v6);
        assert!(v6.is_v6() && !v4.is_v6());
        assert_ne!(key(1), key(2));
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

    /// SipHash-c-d of one 8-byte word by the rounds and constants used here.
    fn sip(c: usize, d: usize, k0: u64, k1: u64, m: u64) -> u64 {
        let mut v = [
            k0 ^ 0x736f_6d65_7073_6575,
            k1 ^ 0x646f_7261_6e64_6f6d,
            k0 ^ 0x6c79_6765_6e65_7261,
            k1 ^ 0x7465_6462_7974_6573,
        ];
        for (w, rounds) in [(m, c), (8u64 << 56, c)] {
            v[3] ^= w;
            (0..rounds).for_each(|_| sip_round(&mut v));
            v[0] ^= w;
        }
        v[2] ^= 0xff;
        (0..d).for_each(|_| sip_round(&mut v));
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }

    #[test]
    fn the_hash_is_siphash() {
        // The round function and constants give std's SipHash-2-4 (the one
        // std exposes with explicit keys) with 2 and 4 rounds ...
        let (k0, k1, m) = (0x0706_0504_0302_0100u64, 0x0f0e_0d0c_0b0a_0908u64, 0x1122_3344_5566_7788u64);
        #[allow(deprecated)]
        let mut std24 = std::hash::SipHasher::new_with_keys(k0, k1);
        std24.write_u64(m);
        assert_eq!(sip(2, 4, k0, k1, m), std24.finish());
        // ... and the hasher is the same construction with 1 and 3.
        let mut h = SeededHash(5).build_hasher();
        let (hk0, hk1) = (splitmix(5), splitmix(5 ^ 0x6a09_e667_f3bc_c908));
        h.write_u64(m);
        assert_eq!(h.finish(), sip(1, 3, hk0, hk1, m));
    }
}
