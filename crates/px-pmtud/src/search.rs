//! Search algorithms for DPLPMTUD's SEARCHING state (RFC 8899 §5.3).
//!
//! A [`Search`] keeps the bracket `[lo, hi]`: `lo` is the largest size known
//! to pass (the PLPMTU), `hi` the largest size not yet known to fail. The
//! strategy only chooses the next probed size inside the bracket; the state
//! machine in [`crate::dplpmtud`] owns timers and probe counting.
//!
//! Guarantees: every candidate lies in `(lo, hi]`, so a search never probes a
//! size that is already known to pass or to fail; `lo` only grows and `hi`
//! only shrinks, so each probed size strictly shrinks the bracket and the
//! search ends after at most `ceil(log2(hi - lo + 1)) + 1` sizes. With
//! [`SearchStrategy::Bisection`] and [`SearchStrategy::lsquic_exact`] the
//! search ends with `lo == hi`, i.e. exactly on the path MTU when probes up to
//! it are acknowledged and larger ones are lost.

/// Per-mille threshold of lsquic's stop rule: "This search will end when
/// lsquic has found PLPMTU with at least 99% precision" (seed
/// `lsquic-dplpmtud-blog.txt`).
pub const LSQUIC_STOP_PERMILLE: u16 = 990;

/// How the next probe size is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchStrategy {
    /// Plain bisection of `(lo, hi]` down to the byte.
    Bisection,
    /// lsquic's search (seed `lsquic-dplpmtud-blog.txt`, "Search Mode 1"):
    /// "It then tries to use MAX_PLPMTU first, hoping for the best case that
    /// its initial guess was right. If the probe is acknowledged, then the
    /// maximum packet size is set to MAX_PLPMTU and the search ends. If the
    /// probe is not acknowledged ... lsquic switches to a binary search. The
    /// next probe will be of size that is midway between the current maximum
    /// packet size and MAX_PLPMTU."
    ///
    /// The search stops once `lo >= hi * stop_permille / 1000`: 990 is
    /// lsquic's 99 %, 1000 bisects to the byte.
    Lsquic {
        /// Stop when the PLPMTU reaches this share (in ‰) of the upper bound.
        stop_permille: u16,
    },
}

impl SearchStrategy {
    /// lsquic as published: maximum first, then bisection to 99 %.
    #[must_use]
    pub fn lsquic() -> Self {
        SearchStrategy::Lsquic { stop_permille: LSQUIC_STOP_PERMILLE }
    }

    /// lsquic's maximum-first opening, then bisection to the byte.
    #[must_use]
    pub fn lsquic_exact() -> Self {
        SearchStrategy::Lsquic { stop_permille: 1000 }
    }
}

/// One search over `[lo, hi]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    strategy: SearchStrategy,
    lo: u16,
    hi: u16,
    /// Whether any probe result has come in (lsquic probes the maximum first).
    opened: bool,
    /// A size to probe next regardless of strategy (a validated PTB,
    /// RFC 8899 §4.6.2: "The PL can use the reported PL_PTB_SIZE from the PTB
    /// message as the next search point").
    hint: Option<u16>,
}

impl Search {
    /// A search between `lo` (known to pass) and `hi` (largest size allowed).
    /// `hi` below `lo` is treated as `lo`: nothing left to search.
    #[must_use]
    pub fn new(strategy: SearchStrategy, lo: u16, hi: u16) -> Self {
        Self { strategy, lo, hi: hi.max(lo), opened: false, hint: None }
    }

    /// Largest size known to pass.
    #[must_use]
    pub fn lo(&self) -> u16 {
        self.lo
    }

    /// Largest size not known to fail.
    #[must_use]
    pub fn hi(&self) -> u16 {
        self.hi
    }

    /// Whether the strategy's stop rule holds.
    #[must_use]
    pub fn is_done(&self) -> bool {
        if self.lo >= self.hi {
            return true;
        }
        match self.strategy {
            SearchStrategy::Bisection => false,
            SearchStrategy::Lsquic { stop_permille } => {
                self.opened && u32::from(self.lo) * 1000 >= u32::from(self.hi) * u32::from(stop_permille)
            }
        }
    }

    /// Size to probe next, `None` once the search is done.
    #[must_use]
    pub fn next_candidate(&self) -> Option<u16> {
        if self.is_done() {
            return None;
        }
        if let Some(h) = self.hint.filter(|h| *h > self.lo && *h <= self.hi) {
            return Some(h);
        }
        match self.strategy {
            SearchStrategy::Lsquic { .. } if !self.opened => Some(self.hi),
            _ => {
                // Upper midpoint: always in (lo, hi], so an ack or a loss
                // always shrinks the bracket.
                let (lo, hi) = (u32::from(self.lo), u32::from(self.hi));
                let mid = lo + (hi - lo).div_ceil(2);
                u16::try_from(mid).ok()
            }
        }
    }

    /// A probe of `size` was acknowledged: the path carries it.
    pub fn on_acked(&mut self, size: u16) {
        self.opened = true;
        if self.hint == Some(size) {
            self.hint = None;
        }
        if size > self.lo {
            self.lo = size;
            // An ack above `hi` contradicts an earlier loss (the path may have
            // changed); the ack is the fresher evidence.
            self.hi = self.hi.max(size);
        }
    }

    /// A probe of `size` failed (MAX_PROBES times): the path drops it.
    pub fn on_failed(&mut self, size: u16) {
        self.opened = true;
        if self.hint == Some(size) {
            self.hint = None;
        }
        if size > self.lo && size <= self.hi {
            self.hi = size - 1;
        }
    }

    /// A validated PTB reports `size` as the largest that fits: it bounds the
    /// search and becomes the next candidate.
    pub fn on_hint(&mut self, size: u16) {
        if size > self.lo && size <= self.hi {
            self.hi = size;
            self.hint = Some(size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs a search against a path that carries exactly `pmtu`; returns the
    /// result and the list of probed sizes.
    fn run(strategy: SearchStrategy, lo: u16, hi: u16, pmtu: u16) -> (u16, Vec<u16>) {
        let mut s = Search::new(strategy, lo, hi);
        let mut probed = Vec::new();
        while let Some(c) = s.next_candidate() {
            assert!(c > s.lo() && c <= s.hi(), "candidate {c} outside bracket");
            probed.push(c);
            if c <= pmtu {
                s.on_acked(c);
            } else {
                s.on_failed(c);
            }
            assert!(probed.len() < 64, "search does not terminate");
        }
        (s.lo(), probed)
    }

    #[test]
    fn bisection_hand_trace() {
        // [1200, 1500], pmtu 1400, upper midpoints:
        // 1350 ok [1350,1500], 1425 no [1350,1424], 1387 ok [1387,1424],
        // 1406 no [1387,1405], 1396 ok [1396,1405], 1401 no [1396,1400],
        // 1398 ok, 1399 ok, 1400 ok -> lo = hi = 1400.
        let (r, probed) = run(SearchStrategy::Bisection, 1200, 1500, 1400);
        assert_eq!(r, 1400);
        assert_eq!(probed, [1350, 1425, 1387, 1406, 1396, 1401, 1398, 1399, 1400]);
    }

    #[test]
    fn lsquic_tries_max_first_and_stops_there_if_acked() {
        let (r, probed) = run(SearchStrategy::lsquic(), 1200, 1500, 1500);
        assert_eq!((r, probed), (1500, vec![1500]));
    }

    #[test]
    fn lsquic_stops_within_99_percent() {
        // pmtu 1400: 1500 no (hi 1499), 1350 ok, 1425 no (hi 1424),
        // 1387 ok: 1387*1000 = 1_387_000 < 1424*990 = 1_409_760 -> go on,
        // 1406 no (hi 1405), 1396 ok: 1_396_000 >= 1405*990 = 1_390_950 -> stop.
        let (r, probed) = run(SearchStrategy::lsquic(), 1200, 1500, 1400);
        assert_eq!(probed, [1500, 1350, 1425, 1387, 1406, 1396]);
        assert_eq!(r, 1396);
    }

    #[test]
    fn hint_is_probed_next_and_bounds_the_search() {
        let mut s = Search::new(SearchStrategy::Bisection, 1200, 9000);
        s.on_hint(1400);
        assert_eq!(s.hi(), 1400);
        assert_eq!(s.next_candidate(), Some(1400));
        s.on_acked(1400);
        assert!(s.is_done());
        // Hints outside the bracket are ignored.
        let mut s = Search::new(SearchStrategy::Bisection, 1200, 1500);
        s.on_hint(1100);
        s.on_hint(1600);
        assert_eq!((s.lo(), s.hi()), (1200, 1500));
        assert_eq!(s.next_candidate(), Some(1350));
    }

    #[test]
    fn empty_bracket_is_done() {
        let s = Search::new(SearchStrategy::lsquic(), 1500, 1400);
        assert!(s.is_done());
        assert_eq!(s.next_candidate(), None);
    }

    proptest! {
        #[test]
        fn exact_strategies_end_on_the_pmtu(
            lo in 68u16..9000, span in 0u16..9000, off in 0u16..9000,
            lsquic in any::<bool>(),
        ) {
            let hi = lo.saturating_add(span);
            let pmtu = lo + off % (hi - lo + 1);
            let strategy = if lsquic { SearchStrategy::lsquic_exact() } else { SearchStrategy::Bisection };
            let (r, probed) = run(strategy, lo, hi, pmtu);
            prop_assert_eq!(r, pmtu);
            // ceil(log2(span + 1)) halvings, plus lsquic's maximum-first probe.
            let bound = (32 - u32::from(hi - lo).leading_zeros()) as usize + 1;
            prop_assert!(probed.len() <= bound, "{} sizes > {}", probed.len(), bound);
        }

        #[test]
        fn lsquic_99_is_safe_and_within_one_percent(
            lo in 68u16..9000, span in 0u16..9000, off in 0u16..9000,
        ) {
            let hi = lo.saturating_add(span);
            let pmtu = lo + off % (hi - lo + 1);
            let (r, _) = run(SearchStrategy::lsquic(), lo, hi, pmtu);
            prop_assert!(r <= pmtu);
            prop_assert!(u32::from(r) * 1000 >= u32::from(pmtu) * 990);
        }
    }
}
