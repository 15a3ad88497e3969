//! Politeness: a global packet rate and a per-destination packet rate,
//! both token buckets, with time passed in (a [`Duration`] since the start
//! of the run). Every packet the survey sends asks [`RateLimiter::try_send`]
//! first; a refusal says how long to wait.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

/// A token bucket: at most `burst` packets at once, `rate` per second on
/// average.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    /// A full bucket. `rate` > 0 and `burst` >= 1 (the caller validates).
    pub fn new(rate: f64, burst: f64) -> TokenBucket {
        TokenBucket { rate, burst, tokens: burst, last: Duration::ZERO }
    }

    fn refill(&mut self, now: Duration) {
        if now > self.last {
            self.tokens = (self.tokens + (now - self.last).as_secs_f64() * self.rate).min(self.burst);
            self.last = now;
        }
    }

    /// Time until one token is available (zero if one is).
    pub fn wait(&mut self, now: Duration) -> Duration {
        self.refill(now);
        if self.tokens >= 1.0 { Duration::ZERO } else { Duration::from_secs_f64((1.0 - self.tokens) / self.rate) }
    }

    fn take_one(&mut self) {
        self.tokens -= 1.0;
    }

    /// A full bucket whose clock starts at `now`.
    pub fn starting(rate: f64, burst: f64, now: Duration) -> TokenBucket {
        TokenBucket { rate, burst, tokens: burst, last: now }
    }

    /// Time until one token is available, without taking it.
    pub fn peek_wait(&self, now: Duration) -> Duration {
        let tokens = (self.tokens + now.saturating_sub(self.last).as_secs_f64() * self.rate).min(self.burst);
        if tokens >= 1.0 { Duration::ZERO } else { Duration::from_secs_f64((1.0 - tokens) / self.rate) }
    }

    /// Takes a token (the caller saw [`Self::peek_wait`] say zero).
    pub fn take(&mut self, now: Duration) {
        self.refill(now);
        self.take_one();
    }

    fn is_full(&mut self, now: Duration) -> bool {
        self.refill(now);
        self.tokens >= self.burst
    }
}

/// The global bucket and one bucket per destination address.
#[derive(Debug)]
pub struct RateLimiter {
    global: TokenBucket,
    per_dest: (f64, f64),
    dests: HashMap<Ipv4Addr, TokenBucket>,
}

impl RateLimiter {
    /// `global` and `per_destination` as (packets per second, burst).
    pub fn new(global: (f64, f64), per_destination: (f64, f64)) -> RateLimiter {
        RateLimiter { global: TokenBucket::new(global.0, global.1), per_dest: per_destination, dests: HashMap::new() }
    }

    /// Takes a token from both buckets, or says how long to wait (taking
    /// none).
    pub fn try_send(&mut self, now: Duration, dst: Ipv4Addr) -> Result<(), Duration> {
        let (r, b) = self.per_dest;
        let d = self.dests.entry(dst).or_insert_with(|| {
            let mut t = TokenBucket::new(r, b);
            t.last = now;
            t
        });
        let wait = self.global.wait(now).max(d.wait(now));
        if wait > Duration::ZERO {
            return Err(wait);
        }
        self.global.take_one();
        d.take_one();
        Ok(())
    }

    /// Forgets destinations whose bucket has refilled (bounded memory on
    /// long runs; a full bucket is what a new one would be).
    pub fn forget_idle(&mut self, now: Duration) {
        self.dests.retain(|_, b| !b.is_full(now));
    }

    /// Destinations currently remembered.
    pub fn tracked(&self) -> usize {
        self.dests.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
    const B: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);

    #[test]
    fn a_burst_then_the_rate() {
        let mut l = RateLimiter::new((1000.0, 1000.0), (10.0, 3.0));
        let t = Duration::ZERO;
        assert!(l.try_send(t, A).is_ok());
        assert!(l.try_send(t, A).is_ok());
        assert!(l.try_send(t, A).is_ok());
        let w = l.try_send(t, A).unwrap_err();
        assert!((w.as_secs_f64() - 0.1).abs() < 1e-9, "{w:?}");
        assert!(l.try_send(t, B).is_ok(), "another destination has its own bucket");
        assert!(l.try_send(Duration::from_millis(100), A).is_ok());
        assert!(l.try_send(Duration::from_millis(100), A).is_err());
    }

    #[test]
    fn the_global_bucket_binds_across_destinations() {
        let mut l = RateLimiter::new((2.0, 2.0), (100.0, 100.0));
        assert!(l.try_send(Duration::ZERO, A).is_ok());
        assert!(l.try_send(Duration::ZERO, B).is_ok());
        let w = l.try_send(Duration::ZERO, Ipv4Addr::new(203, 0, 113, 3)).unwrap_err();
        assert_eq!(w, Duration::from_millis(500));
    }

    #[test]
    fn idle_destinations_are_forgotten() {
        let mut l = RateLimiter::new((1000.0, 1000.0), (10.0, 2.0));
        l.try_send(Duration::ZERO, A).unwrap();
        l.try_send(Duration::ZERO, B).unwrap();
        l.forget_idle(Duration::from_millis(50));
        assert_eq!(l.tracked(), 2);
        l.forget_idle(Duration::from_millis(100));
        assert_eq!(l.tracked(), 0);
    }

    proptest! {
        /// Whatever the request times and destinations: in every window of
        /// length T, at most burst + rate·T packets are granted, globally
        /// and per destination.
        #[test]
        fn never_more_than_burst_plus_rate_times_window(
            steps in proptest::collection::vec((0u64..20_000, 0u8..3), 1..400),
            grate in 1u32..500, gburst in 1u32..20, drate in 1u32..200, dburst in 1u32..10,
        ) {
            let mut l = RateLimiter::new((grate as f64, gburst as f64), (drate as f64, dburst as f64));
            let mut now = Duration::ZERO;
            let mut granted: Vec<(Duration, u8)> = Vec::new();
            for (dt, d) in steps {
                now += Duration::from_micros(dt);
                if l.try_send(now, Ipv4Addr::new(203, 0, 113, d)).is_ok() {
                    granted.push((now, d));
                }
                if dt % 7 == 0 { l.forget_idle(now); }
            }
            // Granted times are in order: the packets in [t_i, t_j] are i..=j.
            let check = |times: &[Duration], rate: u32, burst: u32| -> Result<(), TestCaseError> {
                for i in 0..times.len() {
                    for j in i..times.len() {
                        let w = (times[j] - times[i]).as_secs_f64();
                        let n = (j - i + 1) as f64;
                        prop_assert!(n <= burst as f64 + rate as f64 * w + 1e-6, "{n} packets in {w}s");
                    }
                }
                Ok(())
            };
            check(&granted.iter().map(|g| g.0).collect::<Vec<_>>(), grate, gburst)?;
            for d in 0..3u8 {
                check(&granted.iter().filter(|g| g.1 == d).map(|g| g.0).collect::<Vec<_>>(), drate, dburst)?;
            }
        }
    }
}
