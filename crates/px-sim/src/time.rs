//! Simulated time.
//!
//! The simulator keeps time as whole nanoseconds since the start of a run
//! ([`SimTime`]). Integer time makes every run bit-for-bit reproducible (no
//! floating-point drift in event order) and lets the event queue compare
//! times with one integer comparison. Components that speak
//! `std::time::Instant` (the sans-I/O protocol crates) are driven through
//! [`SimTime::to_instant`] / [`SimTime::from_instant`] against one arbitrary
//! base instant per run; only differences between instants ever matter, so
//! the base does not affect results.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::{Duration, Instant};

/// A point in simulated time: nanoseconds since the start of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct SimTime(u64);

impl SimTime {
    /// The start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// Later than any event a run can schedule.
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// `n` nanoseconds after the start.
    #[must_use]
    pub const fn from_nanos(n: u64) -> Self {
        SimTime(n)
    }

    /// `ms` milliseconds after the start.
    #[must_use]
    pub const fn from_millis(ms: u64) -> Self {
        SimTime(ms * 1_000_000)
    }

    /// `s` seconds after the start (saturating, rounded to the nanosecond).
    #[must_use]
    pub fn from_secs_f64(s: f64) -> Self {
        SimTime((s.max(0.0) * 1e9).round() as u64)
    }

    /// Nanoseconds since the start.
    #[must_use]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the start.
    #[must_use]
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later.
    #[must_use]
    pub fn saturating_since(self, earlier: SimTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The wall-clock-typed instant for this time, `base` being the start.
    #[must_use]
    pub fn to_instant(self, base: Instant) -> Instant {
        base + Duration::from_nanos(self.0)
    }

    /// The simulated time of `at`, `base` being the start (instants before
    /// the base map to the start).
    #[must_use]
    pub fn from_instant(at: Instant, base: Instant) -> Self {
        SimTime(duration_nanos(at.saturating_duration_since(base)))
    }
}

/// Whole nanoseconds of `d`, saturating at `u64::MAX` (about 584 years).
#[must_use]
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for SimTime {
    type Output = SimTime;
    fn add(self, d: Duration) -> SimTime {
        SimTime(self.0.saturating_add(duration_nanos(d)))
    }
}

impl AddAssign<Duration> for SimTime {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub for SimTime {
    type Output = Duration;
    /// Saturating: a later minus an earlier time, zero otherwise.
    fn sub(self, rhs: SimTime) -> Duration {
        self.saturating_since(rhs)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_round_trip() {
        let base = Instant::now();
        let t = SimTime::from_millis(1234) + Duration::from_nanos(7);
        assert_eq!(SimTime::from_instant(t.to_instant(base), base), t);
    }

    #[test]
    fn arithmetic_saturates() {
        let a = SimTime::from_millis(5);
        let b = SimTime::from_millis(7);
        assert_eq!(b - a, Duration::from_millis(2));
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(SimTime::MAX + Duration::from_secs(1), SimTime::MAX);
        assert_eq!(SimTime::from_secs_f64(1.5).as_nanos(), 1_500_000_000);
    }
}
