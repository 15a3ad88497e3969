//! Rate limit of generated ICMP errors (RFC 1812 §4.3.2.8, RFC 4443
//! §2.4(f)): a token bucket.

use std::time::Instant;

/// Token bucket for generated ICMP errors.
#[derive(Debug)]
pub(crate) struct IcmpLimiter {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl IcmpLimiter {
    pub fn new(rate_per_sec: u32) -> IcmpLimiter {
        let burst = (rate_per_sec / 10 + 1) as f64;
        IcmpLimiter { rate: rate_per_sec as f64, burst, tokens: burst, last: None }
    }

    pub fn allow(&mut self, now: Instant) -> bool {
        if self.rate == 0.0 {
            return false;
        }
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
