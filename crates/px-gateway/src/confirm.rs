//! Per-destination confirmation of a verified iMTU (issue 35 item 5).
//!
//! A neighbour's claim is verified once per prefix, toward one responder
//! (`crate::imtu`); another host of the same prefix may sit behind a
//! smaller hop, with ICMP filtered. So a destination's packets pass
//! untouched only after the gateway has seen *that destination's own path*
//! carry the size: an ICMP echo request (`px_wire::echo`) of exactly that
//! size, DF set, sent out of the outer port with the link header and the
//! addresses of the inner host's own packet toward it (so it takes the
//! route the inner router chose for that host, RFC 8899 §4.1), answered by
//! a reply of the same size that arrived whole (not fragmented) and carries
//! the probe's mark. Until then — and for a destination that never answers
//! pings — the destination is translated, which is always safe.
//!
//! The mark is a keyed hash (the engine's SipHash key, `hash.rs`) of the
//! inner host, the destination, the size and the second the probe left: an
//! off-path sender cannot make a reply that confirms anything, and any
//! worker of the gateway can check a reply without state (replies reach
//! whichever worker the fan-out gives them). A reply is taken only within
//! [`ANSWER_WITHIN_S`] seconds of its probe (a fresh nonce per second).
//!
//! Costs, per destination and gateway: one probe (and its reply) the first
//! time an inner host sends toward it, and one every [`CARRIED_FOR`] minus
//! [`RENEW_WITHIN`] while it is in use; the connections that start before
//! the reply (one round trip) are translated for their whole life.
//!
//! This file holds the mark and the per-engine probe schedule; the engine
//! sends and takes the probes (`engine/imtu.rs`), the confirmations are
//! shared between workers through the path-MTU cache (`pmtu.rs`).

use core::hash::{BuildHasher, Hasher};
use core::net::IpAddr;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::hash::SeededHash;

/// How long a destination stays confirmed after a reply.
pub(crate) const CARRIED_FOR: Duration = Duration::from_secs(120);
/// While packets go toward a confirmed destination, it is probed again
/// when less than this is left of its confirmation.
pub(crate) const RENEW_WITHIN: Duration = Duration::from_secs(30);
/// Seconds after its probe left within which a reply is taken.
pub(crate) const ANSWER_WITHIN_S: u16 = 10;
/// Wait before the second probe toward a destination that did not answer;
/// doubled after each one, up to [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(64);
/// Destinations one engine schedules probes for at once.
pub(crate) const PROBING_SLOTS: usize = 4096;
/// Probes one engine sends per second at most (each is up to an iMTU of
/// bytes toward a host that did not ask for it).
pub(crate) const PROBES_PER_SEC: u32 = 50;

/// Separates this hash's key from the flow hash's.
const DOMAIN: u64 = 0x6563_686f_2d69_6d74;

/// What a probe carries: the echo identifier and the mark at both ends of
/// its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tag {
    pub id: u16,
    pub mark: [u8; px_wire::echo::MARK_LEN],
}

fn write_addr(h: &mut impl Hasher, a: IpAddr) {
    match a {
        IpAddr::V4(a) => h.write_u64(u64::from(u32::from(a))),
        IpAddr::V6(a) => {
            let v = u128::from(a);
            h.write_u64((v >> 64) as u64 | 1 << 63);
            h.write_u64(v as u64);
        }
    }
}

/// The tag of a probe of `size` bytes from `inner` to `outside`, sent in
/// second `slot` of the engines' shared epoch.
pub(crate) fn tag(seed: u64, inner: IpAddr, outside: IpAddr, size: u16, slot: u16) -> Tag {
    let half = |part: u64| {
        let mut h = SeededHash(seed ^ DOMAIN).build_hasher();
        h.write_u64(part);
        write_addr(&mut h, inner);
        write_addr(&mut h, outside);
        h.write_u64(u64::from(size) << 16 | u64::from(slot));
        h.finish()
    };
    let (a, b) = (half(1), half(2));
    let mut mark = [0u8; px_wire::echo::MARK_LEN];
    mark[..8].copy_from_slice(&a.to_be_bytes());
    mark[8..].copy_from_slice(&b.to_be_bytes());
    Tag { id: (a >> 48) as u16, mark }
}

/// The second of the epoch `now` falls in (wrapping at 2^16 s, 18 hours:
/// a reply is compared with the present, never with a distant past).
pub(crate) fn slot(epoch: Instant, now: Instant) -> u16 {
    (now.saturating_duration_since(epoch).as_secs() & 0xffff) as u16
}

/// Whether a reply to a probe sent in `sent` is still taken in `now`.
pub(crate) fn fresh(sent: u16, now: u16) -> bool {
    now.wrapping_sub(sent) <= ANSWER_WITHIN_S
}

/// When each destination may be probed next, per engine: the first probe
/// at once, then after 1, 2, 4 ... 64 s while no reply comes. Bounded by
/// [`PROBING_SLOTS`]: when full, schedules whose wait is long over are
/// dropped, and if none is, the new destination is not probed (it stays
/// translated).
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    next: HashMap<IpAddr, (Instant, u8)>,
}

impl Schedule {
    /// Whether a probe toward `dst` may leave at `now`; if so, the next
    /// one waits longer.
    pub fn take(&mut self, dst: IpAddr, now: Instant) -> bool {
        if let Some((at, tries)) = self.next.get_mut(&dst) {
            if now < *at {
                return false;
            }
            *tries = tries.saturating_add(1);
            *at = now + FIRST_RETRY.saturating_mul(1 << (*tries).min(6)).min(LAST_RETRY);
            return true;
        }
        if self.next.len() >= PROBING_SLOTS {
            self.next.retain(|_, (at, _)| now.saturating_duration_since(*at) < LAST_RETRY);
            if self.next.len() >= PROBING_SLOTS {
                return false;
            }
        }
        self.next.insert(dst, (now + FIRST_RETRY, 0));
        true
    }

    /// `dst` answered: its next probe (a renewal) is due when the engine
    /// asks.
    pub fn answered(&mut self, dst: IpAddr) {
        self.next.remove(&dst);
    }

    pub fn len(&self) -> usize {
        self.next.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_tag_depends_on_every_input_and_the_key() {
        let base = tag(1, a("198.51.100.1"), a("203.0.113.9"), 9000, 5);
        assert_eq!(base, tag(1, a("198.51.100.1"), a("203.0.113.9"), 9000, 5));
        for other in [
            tag(2, a("198.51.100.1"), a("203.0.113.9"), 9000, 5),
            tag(1, a("198.51.100.2"), a("203.0.113.9"), 9000, 5),
            tag(1, a("198.51.100.1"), a("203.0.113.8"), 9000, 5),
            tag(1, a("198.51.100.1"), a("203.0.113.9"), 8999, 5),
            tag(1, a("198.51.100.1"), a("203.0.113.9"), 9000, 6),
            tag(1, a("2001:db8::1"), a("2001:db8:1::9"), 9000, 5),
        ] {
            assert_ne!(base.mark, other.mark);
        }
        assert_ne!(base.mark[..8], base.mark[8..], "two independent halves");
    }

    #[test]
    fn replies_are_taken_within_their_window_only() {
        let t0 = Instant::now();
        assert_eq!(slot(t0, t0 + Duration::from_millis(2500)), 2);
        assert!(fresh(2, 2) && fresh(2, 2 + ANSWER_WITHIN_S));
        assert!(!fresh(2, 3 + ANSWER_WITHIN_S), "too late");
        assert!(!fresh(3, 2), "from the future");
        assert!(fresh(u16::MAX, 3), "across the wrap");
    }

    #[test]
    fn probes_back_off_until_answered_and_the_schedule_is_bounded() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        let d = a("203.0.113.9");
        assert!(s.take(d, t0));
        assert!(!s.take(d, t0 + Duration::from_millis(999)));
        assert!(s.take(d, t0 + Duration::from_secs(1)));
        // Next after 2 s, then 4 s ...
        assert!(!s.take(d, t0 + Duration::from_millis(2999)));
        assert!(s.take(d, t0 + Duration::from_secs(3)));
        assert!(!s.take(d, t0 + Duration::from_millis(6999)));
        assert!(s.take(d, t0 + Duration::from_secs(7)));
        // ... never more than 64 s.
        let mut t = t0 + Duration::from_secs(7);
        for _ in 0..20 {
            t += LAST_RETRY;
            assert!(s.take(d, t));
        }
        s.answered(d);
        assert!(s.take(d, t), "a renewal leaves at once");
        // Bounded: a full schedule drops only waits long over.
        let mut s = Schedule::default();
        for i in 0..PROBING_SLOTS as u32 {
            assert!(s.take(IpAddr::V4((0xcb00_7100 + i).into()), t0));
        }
        assert!(!s.take(a("2001:db8::1"), t0 + Duration::from_secs(1)), "full: not probed, stays translated");
        assert!(s.take(a("2001:db8::1"), t0 + FIRST_RETRY + LAST_RETRY));
        assert_eq!(s.len(), 1);
    }
}
