//! A set of half-open `u64` ranges, kept sorted and merged.
//!
//! Used for received packet numbers, received and acknowledged stream
//! bytes. Inserting at the end (the common, in-order case) is O(1).

/// Sorted, disjoint, non-adjacent half-open ranges `[start, end)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<(u64, u64)>,
}

impl RangeSet {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `[start, end)`; returns how many values were not yet present.
    pub fn insert(&mut self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        // Fast path: appending past (or touching) the last range.
        if let Some(last) = self.ranges.last_mut() {
            if start >= last.1 {
                if start == last.1 {
                    last.1 = end;
                } else {
                    self.ranges.push((start, end));
                }
                return end - start;
            }
        } else {
            self.ranges.push((start, end));
            return end - start;
        }
        // General case: merge every range that overlaps or touches.
        let first = self.ranges.partition_point(|r| r.1 < start);
        let mut last = first;
        let mut covered = 0;
        let (mut lo, mut hi) = (start, end);
        while last < self.ranges.len() && self.ranges[last].0 <= end {
            let (a, b) = self.ranges[last];
            covered += b.min(end).saturating_sub(a.max(start));
            lo = lo.min(a);
            hi = hi.max(b);
            last += 1;
        }
        self.ranges.splice(first..last, std::iter::once((lo, hi)));
        (end - start) - covered
    }

    /// True when `v` is in the set.
    #[must_use]
    pub fn contains(&self, v: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.1 <= v);
        self.ranges.get(i).is_some_and(|r| r.0 <= v)
    }

    /// True when all of `[start, end)` is in the set.
    #[must_use]
    pub fn contains_range(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        let i = self.ranges.partition_point(|r| r.1 <= start);
        self.ranges.get(i).is_some_and(|r| r.0 <= start && end <= r.1)
    }

    /// End of the range starting at 0 (0 if 0 is missing): the in-order prefix.
    #[must_use]
    pub fn prefix_end(&self) -> u64 {
        match self.ranges.first() {
            Some(&(0, e)) => e,
            _ => 0,
        }
    }

    /// First value at or after `from` that is not in the set.
    #[must_use]
    pub fn first_gap_from(&self, from: u64) -> u64 {
        let i = self.ranges.partition_point(|r| r.1 <= from);
        match self.ranges.get(i) {
            Some(r) if r.0 <= from => r.1,
            _ => from,
        }
    }

    /// Start of the first range that begins after `v`.
    #[must_use]
    pub fn next_start_after(&self, v: u64) -> Option<u64> {
        let i = self.ranges.partition_point(|r| r.0 <= v);
        self.ranges.get(i).map(|r| r.0)
    }

    /// The ranges, ascending.
    #[must_use]
    pub fn as_slice(&self) -> &[(u64, u64)] {
        &self.ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn merges_and_counts_new_values() {
        let mut s = RangeSet::new();
        assert_eq!(s.insert(10, 20), 10);
        assert_eq!(s.insert(30, 40), 10);
        assert_eq!(s.insert(15, 35), 10);
        assert_eq!(s.as_slice(), &[(10, 40)]);
        assert_eq!(s.insert(0, 10), 10);
        assert_eq!(s.prefix_end(), 40);
        assert_eq!(s.insert(5, 6), 0);
        assert!(s.contains_range(0, 40) && !s.contains(40));
        assert_eq!(s.first_gap_from(3), 40);
        assert_eq!(s.first_gap_from(50), 50);
        s.insert(60, 70);
        assert_eq!(s.next_start_after(45), Some(60));
        assert_eq!(s.next_start_after(60), None);
    }

    proptest! {
        #[test]
        fn matches_a_bitmap(ops in proptest::collection::vec((0u64..200, 0u64..30), 0..60)) {
            let mut s = RangeSet::new();
            let mut bits = [false; 256];
            for (start, len) in ops {
                let end = start + len;
                let fresh = (start..end).filter(|&v| !bits[v as usize]).count() as u64;
                prop_assert_eq!(s.insert(start, end), fresh);
                for v in start..end { bits[v as usize] = true; }
            }
            for v in 0..256u64 {
                prop_assert_eq!(s.contains(v), bits[v as usize]);
            }
            for w in s.as_slice().windows(2) {
                prop_assert!(w[0].1 < w[1].0, "disjoint and not touching");
            }
        }
    }
}
