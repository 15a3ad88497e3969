//! The verified-iMTU prefix table (issue 30, paper §4.2): which
//! destinations sit in a neighbouring b-network whose advertised iMTU the
//! gateway has *verified*, and how large a packet may go there untouched.
//!
//! The engine owns the table and asks it per packet ([`ImtuTable::lookup`],
//! longest-prefix match, IPv4 and IPv6); the runtime updates it from
//! outside (routes learned over BGP, each verified by one path-MTU
//! measurement) with [`ImtuTable::insert`] / [`ImtuTable::remove`]. No I/O,
//! no clock.
//!
//! A prefix may also be *excluded* ([`ImtuTable::exclude`]): a route more
//! specific than a verified prefix that the forwarding table sends
//! elsewhere (through a legacy path) must not inherit the covering
//! prefix's iMTU; its destinations are translated.
//!
//! Guarantees: a lookup returns the entry of the longest prefix that
//! contains the address, `None` if that entry is an exclusion
//! (property-tested against a linear scan); an address of the other family
//! never matches; entries are bounded by the caller's `capacity` (an
//! update beyond it is refused, never silently dropped); [`verdict`]
//! trusts an advertisement only at a size a DF-set probe carried whole, so
//! a lie can lower the table's size but never raise it.
//!
//! Lookup cost: one hash probe per distinct prefix length present in that
//! family (a border learns a handful: /24, /48...), longest first.

use core::net::IpAddr;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::caravan::prefix::Prefix;

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImtuError {
    /// The table holds `capacity` prefixes already.
    #[error("the iMTU table is full ({0} prefixes)")]
    Full(usize),
    /// An iMTU below the IPv6 minimum link MTU (1280) or above 65535.
    #[error("iMTU {0} is outside 1280..=65535")]
    Mtu(u32),
}

/// One family's prefixes, by length: the masked address bits → iMTU.
#[derive(Debug, Clone, Default)]
struct Family<K> {
    by_len: Vec<HashMap<K, u16>>,
    /// Lengths with at least one entry, longest first.
    lens: Vec<u8>,
}

impl<K: Copy + Eq + std::hash::Hash> Family<K> {
    fn new(width: usize) -> Self {
        Family { by_len: vec![HashMap::new(); width + 1], lens: Vec::new() }
    }

    fn insert(&mut self, len: u8, key: K, mtu: u16) -> Option<u16> {
        let old = self.by_len[usize::from(len)].insert(key, mtu);
        if !self.lens.contains(&len) {
            self.lens.push(len);
            self.lens.sort_unstable_by(|a, b| b.cmp(a));
        }
        old
    }

    fn remove(&mut self, len: u8, key: K) -> Option<u16> {
        let old = self.by_len[usize::from(len)].remove(&key);
        if self.by_len[usize::from(len)].is_empty() {
            self.lens.retain(|l| *l != len);
        }
        old
    }

    fn lookup(&self, masked: impl Fn(u8) -> K) -> Option<(u8, u16)> {
        self.lens.iter().find_map(|&len| self.by_len[usize::from(len)].get(&masked(len)).map(|m| (len, *m)))
    }

    /// Over the lengths in use only: the engine asks per packet whether
    /// the table is empty, and a family has up to 129 lengths.
    fn len(&self) -> usize {
        self.lens.iter().map(|&l| self.by_len[usize::from(l)].len()).sum()
    }

    fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }
}

fn mask4(a: u32, len: u8) -> u32 {
    a & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask6(a: u128, len: u8) -> u128 {
    a & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// The value an excluded prefix holds (no iMTU is below 1280).
const EXCLUDED: u16 = 0;

/// Destinations toward which the gateway sends packets up to a verified
/// iMTU without translating them.
#[derive(Debug, Clone)]
pub struct ImtuTable {
    v4: Family<u32>,
    v6: Family<u128>,
    capacity: usize,
}

impl ImtuTable {
    /// An empty table that holds at most `capacity` prefixes.
    pub fn new(capacity: usize) -> ImtuTable {
        ImtuTable { v4: Family::new(32), v6: Family::new(128), capacity }
    }

    /// Sets the verified iMTU of `prefix` (its host bits are ignored);
    /// returns the previous value (0: it was excluded).
    pub fn insert(&mut self, prefix: Prefix, mtu: u16) -> Result<Option<u16>, ImtuError> {
        if mtu < 1280 {
            return Err(ImtuError::Mtu(u32::from(mtu)));
        }
        self.set(prefix, mtu)
    }

    /// Makes `prefix` translated whatever covers it (a more-specific route
    /// that the forwarding table sends elsewhere).
    pub fn exclude(&mut self, prefix: Prefix) -> Result<Option<u16>, ImtuError> {
        self.set(prefix, EXCLUDED)
    }

    fn set(&mut self, prefix: Prefix, mtu: u16) -> Result<Option<u16>, ImtuError> {
        if self.get(prefix).is_none() && self.len() >= self.capacity {
            return Err(ImtuError::Full(self.capacity));
        }
        Ok(match prefix.addr {
            IpAddr::V4(a) => self.v4.insert(prefix.len, mask4(a.into(), prefix.len), mtu),
            IpAddr::V6(a) => self.v6.insert(prefix.len, mask6(a.into(), prefix.len), mtu),
        })
    }

    /// Forgets `prefix` (a withdrawn route, a failed verification);
    /// returns what it had.
    pub fn remove(&mut self, prefix: Prefix) -> Option<u16> {
        match prefix.addr {
            IpAddr::V4(a) => self.v4.remove(prefix.len, mask4(a.into(), prefix.len)),
            IpAddr::V6(a) => self.v6.remove(prefix.len, mask6(a.into(), prefix.len)),
        }
    }

    /// The entry of exactly `prefix` (0: excluded).
    pub fn get(&self, prefix: Prefix) -> Option<u16> {
        match prefix.addr {
            IpAddr::V4(a) => self.v4.by_len[usize::from(prefix.len)].get(&mask4(a.into(), prefix.len)).copied(),
            IpAddr::V6(a) => self.v6.by_len[usize::from(prefix.len)].get(&mask6(a.into(), prefix.len)).copied(),
        }
    }

    /// The verified iMTU toward `dst`: the longest prefix containing it,
    /// with that prefix's length; `None` for a destination to translate
    /// (none contains it, or the longest is excluded).
    pub fn lookup(&self, dst: IpAddr) -> Option<(u8, u16)> {
        let found = match dst {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4.lookup(|len| mask4(a, len))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6.lookup(|len| mask6(a, len))
            }
        };
        found.filter(|(_, m)| *m != EXCLUDED)
    }

    /// Prefixes held.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

/// The table as the runtime publishes it to every worker's engine: one
/// writer (the runtime's route follower) replaces the table and bumps the
/// generation; each engine keeps an [`ImtuReplica`] and copies the table
/// only when the generation moved (one atomic load per packet, no lock on
/// the packet path).
#[derive(Debug)]
pub struct SharedImtu {
    generation: AtomicU64,
    table: Mutex<ImtuTable>,
}

impl SharedImtu {
    /// An empty shared table of at most `capacity` prefixes.
    pub fn new(capacity: usize) -> Arc<SharedImtu> {
        Arc::new(SharedImtu { generation: AtomicU64::new(0), table: Mutex::new(ImtuTable::new(capacity)) })
    }

    /// Replaces the whole table (what the runtime verified now).
    pub fn publish(&self, table: ImtuTable) {
        *self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = table;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// A copy of the table now.
    pub fn snapshot(&self) -> ImtuTable {
        self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// One engine's copy of a [`SharedImtu`].
#[derive(Debug, Clone)]
pub struct ImtuReplica {
    shared: Option<Arc<SharedImtu>>,
    generation: u64,
    table: ImtuTable,
}

impl Default for ImtuReplica {
    /// Follows nothing: every lookup misses (translate everything).
    fn default() -> Self {
        ImtuReplica { shared: None, generation: 0, table: ImtuTable::new(0) }
    }
}

impl ImtuReplica {
    /// A replica of `shared` (taken at the next [`ImtuReplica::sync`]).
    pub fn new(shared: Arc<SharedImtu>) -> ImtuReplica {
        ImtuReplica { shared: Some(shared), generation: u64::MAX, table: ImtuTable::new(0) }
    }

    /// Takes the shared table if it changed since the last call.
    #[inline]
    pub fn sync(&mut self) {
        if let Some(s) = &self.shared {
            let g = s.generation();
            if g != self.generation {
                self.table = s.snapshot();
                self.generation = g;
            }
        }
    }

    /// Whether any prefix is verified (one test per packet when none is).
    #[inline]
    pub fn any(&self) -> bool {
        !self.table.is_empty()
    }

    /// The verified iMTU toward `dst` (see [`ImtuTable::lookup`]).
    #[inline]
    pub fn lookup(&self, dst: IpAddr) -> Option<u16> {
        if self.table.is_empty() {
            return None;
        }
        self.table.lookup(dst).map(|(_, m)| m)
    }
}

/// What the gateway makes of an advertised iMTU once it has probed the
/// path toward the neighbour's responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// A DF-set probe of this size, with a fresh nonce, arrived whole: use
    /// it (the advertised size, or less when the gateway's outer port or
    /// the path carries less, see [`verdict`]).
    Verified(u16),
    /// The path carries less than advertised (a hop with a smaller MTU
    /// between here and the neighbour): the advertisement is not trusted,
    /// the destination is translated as any legacy one.
    Lie {
        /// What the neighbour claimed.
        advertised: u16,
        /// What the path carried.
        measured: u16,
    },
    /// The responder reports that the size arrived, but no DF-set probe of
    /// that size with a fresh nonce was confirmed whole: its report (made
    /// from a probe that arrived in fragments, or invented) is not
    /// believed; translated.
    NotBelieved {
        /// What the neighbour claimed.
        advertised: u16,
        /// What its responder reported.
        reported: u16,
    },
    /// Not measured (no answer): translated until a measurement succeeds.
    Unverified,
}

/// What was found on the path toward a neighbour's responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evidence {
    /// The largest size a DF-set probe with a fresh nonce of its own was
    /// confirmed at, whole (`None`: none was).
    pub confirmed: Option<u16>,
    /// What a path-MTU measurement toward the responder reported
    /// (`None`: no answer). Tells a lie from silence; never trusted alone.
    pub measured: Option<u16>,
}

/// The verdict on an `advertised` iMTU, asked at `target` (the advertised
/// size within what the gateway's outer port sends), from the evidence.
/// Trusted only at a size a fresh DF-set probe carried whole: at most
/// `target`, and no less than `target - tolerance` (F-PMTUD's 8-byte
/// fragment alignment: a path a few bytes short still verifies, at what
/// it carried, never more).
pub fn verdict(advertised: u16, target: u16, e: Evidence, tolerance: u16) -> Trust {
    match (e.confirmed, e.measured) {
        (Some(c), _) if c <= target && target - c <= tolerance && c >= 1280 => Trust::Verified(c),
        (_, Some(m)) if m < target => Trust::Lie { advertised, measured: m },
        (_, Some(m)) => Trust::NotBelieved { advertised, reported: m },
        (_, None) => Trust::Unverified,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_wins_per_family() {
        let mut t = ImtuTable::new(16);
        t.insert(p("198.51.100.0/24"), 9000).unwrap();
        t.insert(p("198.51.100.128/25"), 4000).unwrap();
        t.insert(p("2001:db8::/32"), 9000).unwrap();
        t.insert(p("2001:db8:2::/48"), 1500).unwrap();
        assert_eq!(t.lookup("198.51.100.1".parse().unwrap()), Some((24, 9000)));
        assert_eq!(t.lookup("198.51.100.200".parse().unwrap()), Some((25, 4000)));
        assert_eq!(t.lookup("203.0.113.1".parse().unwrap()), None);
        assert_eq!(t.lookup("2001:db8:2::9".parse().unwrap()), Some((48, 1500)));
        assert_eq!(t.lookup("2001:db8:3::9".parse().unwrap()), Some((32, 9000)));
        assert_eq!(t.remove(p("198.51.100.128/25")), Some(4000));
        assert_eq!(t.lookup("198.51.100.200".parse().unwrap()), Some((24, 9000)));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn host_bits_are_ignored_and_default_routes_match_everything_of_their_family() {
        let mut t = ImtuTable::new(4);
        t.insert(p("198.51.100.77/24"), 9000).unwrap();
        assert_eq!(t.get(p("198.51.100.0/24")), Some(9000));
        t.insert(p("0.0.0.0/0"), 1500).unwrap();
        assert_eq!(t.lookup("203.0.113.9".parse().unwrap()), Some((0, 1500)));
        assert_eq!(t.lookup("2001:db8::1".parse().unwrap()), None);
    }

    #[test]
    fn capacity_and_mtu_are_enforced() {
        let mut t = ImtuTable::new(1);
        t.insert(p("198.51.100.0/24"), 9000).unwrap();
        // Updating the one entry is fine; a second is refused.
        assert_eq!(t.insert(p("198.51.100.0/24"), 8000), Ok(Some(9000)));
        assert_eq!(t.insert(p("203.0.113.0/24"), 9000), Err(ImtuError::Full(1)));
        assert_eq!(t.insert(p("198.51.100.0/24"), 576), Err(ImtuError::Mtu(576)));
    }

    #[test]
    fn replicas_follow_what_is_published() {
        let shared = SharedImtu::new(8);
        let mut r = ImtuReplica::new(shared.clone());
        r.sync();
        assert_eq!(r.lookup("203.0.113.65".parse().unwrap()), None);
        let mut t = ImtuTable::new(8);
        t.insert(p("203.0.113.64/26"), 9000).unwrap();
        shared.publish(t);
        assert_eq!(r.lookup("203.0.113.65".parse().unwrap()), None, "not before sync");
        r.sync();
        assert_eq!(r.lookup("203.0.113.65".parse().unwrap()), Some(9000));
        shared.publish(ImtuTable::new(8));
        r.sync();
        assert_eq!(r.lookup("203.0.113.65".parse().unwrap()), None, "withdrawn");
        assert_eq!(ImtuReplica::default().lookup("203.0.113.65".parse().unwrap()), None);
    }

    #[test]
    fn a_claim_is_trusted_only_at_a_size_a_fresh_df_probe_carried() {
        let e = |confirmed, measured| Evidence { confirmed, measured };
        assert_eq!(verdict(9000, 9000, e(Some(9000), None), 8), Trust::Verified(9000));
        assert_eq!(verdict(9000, 9000, e(Some(8996), Some(8996)), 8), Trust::Verified(8996));
        assert_eq!(verdict(9000, 9000, e(None, Some(1500)), 8), Trust::Lie { advertised: 9000, measured: 1500 });
        // The responder says 9000 arrived, no DF-set 9000 was confirmed:
        // a report made from fragments (or invented) is not believed.
        assert_eq!(
            verdict(9000, 9000, e(None, Some(9000)), 8),
            Trust::NotBelieved { advertised: 9000, reported: 9000 }
        );
        assert_eq!(verdict(9000, 9000, e(None, None), 8), Trust::Unverified);
        // Bounded by the outer port: asked and trusted at 4000.
        assert_eq!(verdict(9000, 4000, e(Some(4000), None), 8), Trust::Verified(4000));
        // A confirmation above the target, or far below it, is no verdict.
        assert_eq!(verdict(9000, 4000, e(Some(9000), None), 8), Trust::Unverified);
        assert_eq!(verdict(9000, 9000, e(Some(4000), Some(4000)), 8), Trust::Lie { advertised: 9000, measured: 4000 });
    }

    #[test]
    fn an_excluded_more_specific_prefix_is_translated() {
        let mut t = ImtuTable::new(8);
        t.insert(p("203.0.113.0/24"), 9000).unwrap();
        t.exclude(p("203.0.113.192/26")).unwrap();
        assert_eq!(t.lookup("203.0.113.65".parse().unwrap()), Some((24, 9000)));
        assert_eq!(t.lookup("203.0.113.193".parse().unwrap()), None);
        // A verified more-specific inside the exclusion wins again.
        t.insert(p("203.0.113.240/28"), 4000).unwrap();
        assert_eq!(t.lookup("203.0.113.241".parse().unwrap()), Some((28, 4000)));
        assert_eq!(t.len(), 3);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Prefix, u16),
        Exclude(Prefix),
        Remove(Prefix),
    }

    fn prefix() -> impl Strategy<Value = Prefix> {
        // Few distinct bits so that prefixes nest and collide often.
        prop_oneof![
            (0u32..16, 0u8..=32).prop_map(|(a, len)| Prefix { addr: IpAddr::V4((0xc633_6400 | (a << 4)).into()), len }),
            (0u128..16, 0u8..=128)
                .prop_map(|(a, len)| Prefix { addr: IpAddr::V6(((0x2001_0db8u128 << 96) | (a << 60)).into()), len }),
        ]
    }

    fn addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            (0u32..512).prop_map(|a| IpAddr::V4((0xc633_6400 | (a << 2)).into())),
            (0u128..512).prop_map(|a| IpAddr::V6(((0x2001_0db8u128 << 96) | (a << 58)).into())),
        ]
    }

    proptest! {
        /// The table answers as a linear scan of the same updates would:
        /// the longest containing prefix, its iMTU.
        #[test]
        fn lookup_equals_a_naive_scan(
            ops in proptest::collection::vec(
                prop_oneof![
                    (prefix(), 1280u16..=9000).prop_map(|(p, m)| Op::Insert(p, m)),
                    prefix().prop_map(Op::Exclude),
                    prefix().prop_map(Op::Remove),
                ],
                0..60,
            ),
            probes in proptest::collection::vec(addr(), 1..40),
        ) {
            let mut t = ImtuTable::new(usize::MAX);
            let mut naive: Vec<(Prefix, u16)> = Vec::new();
            let same = |a: &Prefix, b: &Prefix| a.len == b.len && a.contains(b.addr) && b.contains(a.addr);
            for op in ops {
                match op {
                    Op::Insert(p, m) => {
                        t.insert(p, m).unwrap();
                        naive.retain(|(q, _)| !same(q, &p));
                        naive.push((p, m));
                    }
                    Op::Exclude(p) => {
                        t.exclude(p).unwrap();
                        naive.retain(|(q, _)| !same(q, &p));
                        naive.push((p, 0));
                    }
                    Op::Remove(p) => {
                        let had = naive.iter().find(|(q, _)| same(q, &p)).map(|e| e.1);
                        prop_assert_eq!(t.remove(p), had);
                        naive.retain(|(q, _)| !same(q, &p));
                    }
                }
                prop_assert_eq!(t.len(), naive.len());
                prop_assert_eq!(t.is_empty(), naive.is_empty());
            }
            for a in probes {
                let want = naive
                    .iter()
                    .filter(|(p, _)| p.contains(a))
                    .max_by_key(|(p, _)| p.len)
                    .map(|(p, m)| (p.len, *m))
                    .filter(|(_, m)| *m != 0);
                prop_assert_eq!(t.lookup(a), want);
            }
        }
    }
}
