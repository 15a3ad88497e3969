//! The flow table: O(1) lookup by connection, a hard bound on entries, and
//! eviction of the oldest entry first.
//!
//! One entry per TCP connection, keyed the same way for both directions:
//! (outer host, outer port, inner host, inner port). It holds the inbound
//! merge state and what the handshake told about both ends.

use core::hash::{BuildHasher, Hasher};
use core::net::IpAddr;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use px_wire::IpVersion;

use crate::merge::held::Held;
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
    /// Unique over the table's life: the age order refers to a flow by slot
    /// and id, so that a reused slot is not taken for the flow it held before.
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
    pub held: Option<Held>,
    /// What the flow's PSHs were followed by (adaptive PSH, docs/merge.md):
    /// arrival of the last PSH not yet followed by data, and one bit per
    /// earlier PSH, newest in bit 0: 1 if more data came within the merge
    /// timeout.
    pub psh_at: Option<Instant>,
    pub psh_history: u8,
    /// The handshake negotiated AccECN: CWR is a bit of the ACE counter.
    pub accecn: bool,
}

/// Seeded multiply-xor hasher: flow keys are attacker-chosen, so the seed
/// is random in production; it is fast because keys are short.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeededHash(pub u64);

pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let m = (self.0 ^ v) as u128 * 0x9e37_79b9_7f4a_7c15u128;
        self.0 = (m as u64) ^ ((m >> 64) as u64);
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

    fn finish(&self) -> u64 {
        let m = self.0 as u128 * 0xff51_afd7_ed55_8ccdu128;
        (m as u64) ^ ((m >> 64) as u64)
    }
}

impl BuildHasher for SeededHash {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.0)
    }
}

/// Bounded table of flows.
#[derive(Debug)]
pub(crate) struct FlowTable {
    map: HashMap<FlowKey, u32, SeededHash>,
    slots: Vec<Option<Flow>>,
    free: Vec<u32>,
    /// Slots in creation order (with the flow id, to skip reused slots):
    /// the front is the oldest flow.
    order: VecDeque<(u32, u64)>,
    max: usize,
    next_id: u64,
    /// Direct-mapped front cache: slot + 1 by a cheap hash of the key (0:
    /// empty). A hit is checked against the slot's own key, so stale
    /// entries are harmless; a miss falls back to the hash map.
    front: Vec<u32>,
}

impl FlowTable {
    pub fn new(max: usize, seed: u64) -> FlowTable {
        FlowTable {
            map: HashMap::with_capacity_and_hasher(max.min(1 << 16), SeededHash(seed)),
            slots: Vec::new(),
            free: Vec::new(),
            order: VecDeque::new(),
            max,
            next_id: 1,
            front: vec![0; (2 * max).next_power_of_two().clamp(64, 1 << 16)],
        }
    }

    #[inline]
    fn front_index(&self, key: &FlowKey) -> usize {
        let w = key.words;
        let h = (w[0] ^ w[1].rotate_left(29) ^ w[2] ^ w[3].rotate_left(17) ^ w[4]).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 40) as usize & (self.front.len() - 1)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn lookup(&mut self, key: &FlowKey) -> Option<u32> {
        let f = self.front_index(key);
        if let Some(i) = self.front[f].checked_sub(1)
            && self.get(i).is_some_and(|fl| fl.key == *key)
        {
            return Some(i);
        }
        let i = self.map.get(key).copied();
        if let Some(i) = i {
            self.front[f] = i + 1;
        }
        i
    }

    /// Lookup without updating the front cache.
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

    /// Inserts a new flow; the caller makes room first (see [`Self::oldest`]).
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
            held: None,
            psh_at: None,
            psh_history: 0,
            accecn: false,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(flow);
                i
            }
            None => {
                self.slots.push(Some(flow));
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(key, idx);
        self.order.push_back((idx, id));
        idx
    }

    /// The oldest live flow, dropping stale order entries on the way.
    pub fn oldest(&mut self) -> Option<u32> {
        while let Some(&(idx, id)) = self.order.front() {
            if self.get(idx).is_some_and(|f| f.id == id) {
                return Some(idx);
            }
            self.order.pop_front();
        }
        None
    }

    /// Moves the oldest flow to the back (it was seen recently: second chance).
    pub fn requeue_oldest(&mut self) {
        if let Some(e) = self.order.pop_front() {
            self.order.push_back(e);
        }
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
        assert_eq!(t.oldest(), Some(a));
        t.remove(a).unwrap();
        assert_eq!(t.lookup(&key(1)), None);
        assert_eq!(t.oldest(), Some(b));
        let c = t.insert(key(3), now);
        assert_eq!(c, a, "slot reused");
        t.remove(b);
        assert_eq!(t.oldest(), Some(c));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn hasher_depends_on_seed_and_key() {
        let h = |seed, k: &FlowKey| SeededHash(seed).hash_one(k);
        assert_ne!(h(1, &key(1)), h(1, &key(2)));
        assert_ne!(h(1, &key(1)), h(2, &key(1)));
    }
}
