//! The arithmetic of the tables: median and range of repeated runs, and
//! "% faster than" a baseline the way the lsquic blog computes it
//! (19.9 s → 17.7 s is 11 % faster: the time saved over the baseline's).

/// Median, minimum and maximum of some runs (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The fastest run.
    pub min: f64,
    /// The slowest run.
    pub max: f64,
}

impl Spread {
    /// The spread of `runs`; `None` when there are none or one is not a number.
    #[must_use]
    pub fn of(runs: &[f64]) -> Option<Spread> {
        if runs.is_empty() || runs.iter().any(|r| r.is_nan()) {
            return None;
        }
        let mut v = runs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { median, min: v[0], max: v[n - 1] })
    }
}

/// How much less time `t` took than `base`, in % of `base` (negative when
/// slower); 0 for a baseline that is not positive.
#[must_use]
pub fn faster_pct(base: f64, t: f64) -> f64 {
    if base > 0.0 { (base - t) / base * 100.0 } else { 0.0 }
}

/// quinn stops its PMTUD search once the interval left is smaller than
/// its `minimum_change` (20 bytes by default), so "full size" is reached
/// within that of the largest payload the path carries.
#[must_use]
pub fn is_full_size(current: u16, path_payload: u16, minimum_change: u16) -> bool {
    u32::from(current) + u32::from(minimum_change) > u32::from(path_payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_odd_and_even_counts() {
        assert_eq!(Spread::of(&[3.0, 1.0, 2.0]), Some(Spread { median: 2.0, min: 1.0, max: 3.0 }));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).map(|s| s.median), Some(2.5));
        assert_eq!(Spread::of(&[5.0]).map(|s| (s.min, s.max)), Some((5.0, 5.0)));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn faster_pct_matches_the_blog() {
        assert_eq!(faster_pct(19.9, 17.7).round(), 11.0);
        assert_eq!(faster_pct(19.9, 13.0).round(), 35.0);
        assert_eq!(faster_pct(19.9, 19.9), 0.0);
        assert!(faster_pct(10.0, 12.0) < 0.0);
        assert_eq!(faster_pct(0.0, 1.0), 0.0);
    }

    #[test]
    fn full_size_within_the_search_precision() {
        assert!(is_full_size(8972, 8972, 20));
        assert!(is_full_size(8953, 8972, 20));
        assert!(!is_full_size(8952, 8972, 20));
        assert!(!is_full_size(1200, 8972, 20));
        assert!(is_full_size(u16::MAX, u16::MAX, u16::MAX));
    }
}
