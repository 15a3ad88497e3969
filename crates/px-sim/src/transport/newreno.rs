//! NewReno congestion control as RFC 9002 §7 and Appendix B specify it.
//!
//! Slow start grows the window by the bytes acknowledged; congestion
//! avoidance by one maximum datagram per window acknowledged; a congestion
//! event (loss of a packet sent after the current recovery period began)
//! halves the window once per round trip; persistent congestion collapses it
//! to the minimum. Loss of a PMTU probe is not congestion (RFC 9000 §14.4)
//! and the caller does not report it here.

use crate::time::SimTime;

/// RFC 9002 §7.7: "kLossReductionFactor ... 0.5".
const LOSS_REDUCTION_NUM: u64 = 1;
const LOSS_REDUCTION_DEN: u64 = 2;

/// NewReno state.
#[derive(Clone, Debug)]
pub struct NewReno {
    max_datagram: u64,
    window: u64,
    ssthresh: u64,
    bytes_in_flight: u64,
    recovery_start: Option<SimTime>,
    /// Bytes acknowledged in congestion avoidance since the last increase.
    ca_acked: u64,
    /// Congestion events so far.
    pub congestion_events: u64,
    /// Times slow start ended (first congestion event).
    pub slow_start_exit: Option<SimTime>,
}

impl NewReno {
    /// A controller for datagrams of `max_datagram` bytes.
    #[must_use]
    pub fn new(max_datagram: u32) -> Self {
        let md = u64::from(max_datagram);
        NewReno {
            max_datagram: md,
            window: Self::initial_window(md),
            ssthresh: u64::MAX,
            bytes_in_flight: 0,
            recovery_start: None,
            ca_acked: 0,
            congestion_events: 0,
            slow_start_exit: None,
        }
    }

    /// RFC 9002 §7.2: "min(10 * max_datagram_size, max(14720, 2 * max_datagram_size))".
    fn initial_window(md: u64) -> u64 {
        (10 * md).min(14_720.max(2 * md))
    }

    /// RFC 9002 §7.2: "kMinimumWindow: 2 * max_datagram_size".
    fn minimum_window(&self) -> u64 {
        2 * self.max_datagram
    }

    /// The congestion window in bytes.
    #[must_use]
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The slow-start threshold (`u64::MAX` until the first congestion event).
    #[must_use]
    pub fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    /// Bytes sent and neither acknowledged nor declared lost.
    #[must_use]
    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    /// True when a packet of `size` bytes fits in the window now.
    #[must_use]
    pub fn can_send(&self, size: u32) -> bool {
        self.bytes_in_flight + u64::from(size) <= self.window
    }

    /// The path's datagram size changed (DPLPMTUD): RFC 9002 §7.2 bases
    /// the windows on the current max_datagram_size.
    pub fn set_max_datagram(&mut self, size: u32) {
        self.max_datagram = u64::from(size);
        self.window = self.window.max(self.minimum_window());
    }

    /// An in-flight packet of `size` bytes was sent.
    pub fn on_sent(&mut self, size: u32) {
        self.bytes_in_flight += u64::from(size);
    }

    /// An in-flight packet is no longer in flight without being acked or
    /// counted as congestion (a lost PMTU probe).
    pub fn on_discarded(&mut self, size: u32) {
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(u64::from(size));
    }

    fn in_recovery(&self, sent: SimTime) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }

    /// RFC 9002 §B.5: an in-flight packet sent at `sent` of `size` bytes was acked.
    pub fn on_acked(&mut self, sent: SimTime, size: u32) {
        let size = u64::from(size);
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(size);
        // "Do not increase congestion_window in recovery period."
        if self.in_recovery(sent) {
            return;
        }
        if self.window < self.ssthresh {
            // "Slow start."
            self.window += size;
        } else {
            // "Congestion avoidance": one max_datagram_size per window acked.
            self.ca_acked += size;
            if self.ca_acked >= self.window {
                self.ca_acked -= self.window;
                self.window += self.max_datagram;
            }
        }
    }

    /// RFC 9002 §B.6: in-flight packets totalling `bytes` were declared
    /// lost, the newest of which was sent at `newest_sent`.
    pub fn on_lost(&mut self, now: SimTime, bytes: u64, newest_sent: SimTime) {
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(bytes);
        // "No reaction if already in a recovery period."
        if self.in_recovery(newest_sent) {
            return;
        }
        self.congestion_events += 1;
        if self.slow_start_exit.is_none() {
            self.slow_start_exit = Some(now);
        }
        self.recovery_start = Some(now);
        self.ssthresh = (self.window * LOSS_REDUCTION_NUM / LOSS_REDUCTION_DEN).max(self.minimum_window());
        self.window = self.ssthresh;
        self.ca_acked = 0;
    }

    /// RFC 9002 §7.6.2: "the congestion window MUST be reduced to the minimum".
    pub fn on_persistent_congestion(&mut self) {
        self.window = self.minimum_window();
        self.recovery_start = None;
        self.ca_acked = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MD: u32 = 1200;

    #[test]
    fn initial_window_follows_rfc9002() {
        assert_eq!(NewReno::new(1200).window(), 12_000);
        assert_eq!(NewReno::new(1500).window(), 14_720);
        assert_eq!(NewReno::new(9000).window(), 18_000);
    }

    #[test]
    fn slow_start_doubles_per_round_trip() {
        let mut cc = NewReno::new(MD);
        let start = cc.window();
        let n = start / u64::from(MD);
        for _ in 0..n {
            cc.on_sent(MD);
        }
        for _ in 0..n {
            cc.on_acked(SimTime::ZERO, MD);
        }
        assert_eq!(cc.window(), 2 * start);
        assert_eq!(cc.bytes_in_flight(), 0);
    }

    #[test]
    fn loss_halves_once_per_recovery_period() {
        let mut cc = NewReno::new(MD);
        for _ in 0..20 {
            cc.on_sent(MD);
        }
        let w = cc.window();
        cc.on_lost(SimTime::from_millis(100), u64::from(MD), SimTime::from_millis(50));
        assert_eq!(cc.window(), w / 2);
        // A second loss of a packet sent before recovery began: no reaction.
        cc.on_lost(SimTime::from_millis(110), u64::from(MD), SimTime::from_millis(60));
        assert_eq!(cc.window(), w / 2);
        // Acks of packets sent before recovery do not grow the window.
        cc.on_acked(SimTime::from_millis(90), MD);
        assert_eq!(cc.window(), w / 2);
        // A loss of a packet sent after recovery began halves again.
        cc.on_lost(SimTime::from_millis(300), u64::from(MD), SimTime::from_millis(200));
        assert_eq!(cc.window(), w / 4);
        assert_eq!(cc.congestion_events, 2);
    }

    #[test]
    fn congestion_avoidance_adds_one_datagram_per_window() {
        let mut cc = NewReno::new(MD);
        cc.on_lost(SimTime::from_millis(1), 0, SimTime::from_millis(1));
        let w = cc.window();
        assert_eq!(cc.ssthresh(), w);
        let after = SimTime::from_millis(2);
        let per_window = w / u64::from(MD);
        for _ in 0..per_window {
            cc.on_sent(MD);
            cc.on_acked(after, MD);
        }
        assert_eq!(cc.window(), w + u64::from(MD));
    }

    #[test]
    fn persistent_congestion_collapses_and_window_has_a_floor() {
        let mut cc = NewReno::new(MD);
        cc.on_persistent_congestion();
        assert_eq!(cc.window(), 2 * u64::from(MD));
        cc.on_lost(SimTime::from_millis(5), 0, SimTime::from_millis(5));
        assert_eq!(cc.window(), 2 * u64::from(MD));
    }
}
