//! Rate limit of generated ICMP errors (RFC 1812 §4.3.2.8, RFC 4443
//! §2.4(f)): token buckets, one per source in a fixed table beside one for
//! all.
//!
//! Linux limits its ICMP errors per destination (an `inet_peer` bucket,
//! `icmp_ratelimit`) and for the host as a whole (`icmp_msgs_per_sec`,
//! `icmp_msgs_burst`). The gateway's errors go back to the source of the
//! offending packet, so [`ErrorLimiter`] keeps a bucket per source: one
//! inner host flooding oversized DF packets spends its own bucket, and the
//! errors other hosts' path MTU discovery depends on still leave. The table
//! has a fixed number of slots found by the seeded hash
//! ([`crate::hash::SeededHash`]): it never grows, and an outside sender,
//! not knowing the seed, cannot aim its sources at another host's slot
//! (sources that share a slot share its bucket).

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::time::Instant;

use crate::hash::SeededHash;

/// Token bucket for generated ICMP errors.
#[derive(Debug, Clone)]
pub(crate) struct IcmpLimiter {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl IcmpLimiter {
    pub fn new(rate_per_sec: u32) -> IcmpLimiter {
        IcmpLimiter::times(rate_per_sec, 1)
    }

    /// `n` buckets' worth of [`IcmpLimiter::new`] in one: `n` times the
    /// rate and `n` times the burst.
    fn times(rate_per_sec: u32, n: u32) -> IcmpLimiter {
        let burst = f64::from(rate_per_sec / 10 + 1) * f64::from(n);
        IcmpLimiter { rate: f64::from(rate_per_sec) * f64::from(n), burst, tokens: burst, last: None }
    }

    pub fn allow(&mut self, now: Instant) -> bool {
        let ready = self.ready(now);
        if ready {
            self.tokens -= 1.0;
        }
        ready
    }

    /// Refills to `now`; whether a token is there to take.
    fn ready(&mut self, now: Instant) -> bool {
        if self.rate == 0.0 {
            return false;
        }
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        }
        self.last = Some(now);
        self.tokens >= 1.0
    }
}

/// Slots of the per-source table.
const SOURCE_SLOTS: usize = 256;

/// How many sources' worth of errors all sources together may have: the
/// engine-wide bucket is this many times a source's.
const SOURCES_AT_ONCE: u32 = 4;

/// Generated ICMP errors: a bucket per source of the offending packet
/// (`icmp_rate_per_sec`, burst a tenth of it plus one), and one for all
/// ([`SOURCES_AT_ONCE`] times that), so that no one source can spend what
/// others need, and the total stays bounded.
#[derive(Debug)]
pub(crate) struct ErrorLimiter {
    all: IcmpLimiter,
    sources: Box<[IcmpLimiter]>,
    hash: SeededHash,
}

impl ErrorLimiter {
    pub fn new(rate_per_sec: u32, seed: u64) -> ErrorLimiter {
        ErrorLimiter {
            all: IcmpLimiter::times(rate_per_sec, SOURCES_AT_ONCE),
            sources: vec![IcmpLimiter::new(rate_per_sec); SOURCE_SLOTS].into_boxed_slice(),
            hash: SeededHash(seed.rotate_left(29) ^ 0x6963_6d70_5f6c_696d),
        }
    }

    /// Whether an error about a packet from `source` may be sent now; if
    /// so, its token is taken from both buckets (a refusal by either takes
    /// nothing from the other).
    pub fn allow(&mut self, now: Instant, source: IpAddr) -> bool {
        let slot = (self.hash.hash_one(source) % SOURCE_SLOTS as u64) as usize;
        let own = &mut self.sources[slot];
        if !own.ready(now) || !self.all.ready(now) {
            return false;
        }
        own.tokens -= 1.0;
        self.all.tokens -= 1.0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn limiter_bursts_then_refills() {
        let t0 = Instant::now();
        let mut l = IcmpLimiter::new(100);
        let burst = (0..100).filter(|_| l.allow(t0)).count();
        assert_eq!(burst, 11);
        assert!(!l.allow(t0));
        assert!(l.allow(t0 + std::time::Duration::from_millis(20)));
        let mut z = IcmpLimiter::new(0);
        assert!(!z.allow(t0));
    }

    /// One source gets a source's burst; the others still get theirs
    /// until the engine-wide bucket is spent; nothing at rate 0.
    #[test]
    fn each_source_has_its_own_bucket_within_one_for_all() {
        let t0 = Instant::now();
        let src = |n: u8| IpAddr::from([203, 0, 113, n]);
        let mut l = ErrorLimiter::new(100, 7);
        assert_eq!((0..100).filter(|_| l.allow(t0, src(1))).count(), 11);
        // Sources in other slots (the seed is fixed here) get theirs.
        let others: Vec<u8> = (2..=255).filter(|&n| l.slot(src(n)) != l.slot(src(1))).take(3).collect();
        let got: Vec<usize> = others.iter().map(|&n| (0..100).filter(|_| l.allow(t0, src(n))).count()).collect();
        // 4 x 11 = 44 for all: 11 + 11 + 11 + 11.
        assert_eq!(got, [11, 11, 11]);
        let fifth = (2..=255).find(|&n| !others.contains(&n) && l.slot(src(n)) != l.slot(src(1))).unwrap();
        assert!(!l.allow(t0, src(fifth)), "the bucket for all is spent");
        assert!(l.allow(t0 + Duration::from_millis(20), src(fifth)));
        let mut z = ErrorLimiter::new(0, 7);
        assert!(!z.allow(t0, src(1)));
    }

    impl ErrorLimiter {
        pub(super) fn slot(&self, source: IpAddr) -> u64 {
            self.hash.hash_one(source) % SOURCE_SLOTS as u64
        }
    }
}
