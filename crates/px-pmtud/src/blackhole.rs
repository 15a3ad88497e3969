//! Black-hole detection from ordinary traffic (RFC 8899 §4.3, third
//! indicator: "A PL can utilize an event that indicates the network path no
//! longer sustains the sender's PLPMTU size ... detect excessive loss of data
//! sent with a specific packet size").
//!
//! The signal is the one the PacketExpress design names: *full-sized packets
//! are lost while smaller ones get through*. Packets larger than BASE_PLPMTU
//! count as "large". The detector fires when, since the last acknowledged
//! large packet, at least `threshold` large packets were declared lost and at
//! least one small packet was acknowledged. A path that delivers nothing at
//! all is a connectivity loss, not a black hole, and never fires it.
//!
//! Guarantees: constant memory; fires at most once per window (it resets
//! itself when it fires).

/// Loss-pattern detector for packets too large for the current path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlackHoleDetector {
    base: u16,
    threshold: u32,
    large_lost: u32,
    small_acked: bool,
}

impl BlackHoleDetector {
    /// A detector for which packets larger than `base` are "large".
    /// A `threshold` of 0 is treated as 1.
    #[must_use]
    pub fn new(base: u16, threshold: u32) -> Self {
        Self { base, threshold: threshold.max(1), large_lost: 0, small_acked: false }
    }

    /// A data packet of `size` was acknowledged.
    pub fn on_acked(&mut self, size: u16) {
        if size > self.base {
            // A large packet got through: whatever was lost, it was not the size.
            self.large_lost = 0;
            self.small_acked = false;
        } else {
            self.small_acked = true;
        }
    }

    /// A data packet of `size` was declared lost. Returns `true` when this
    /// loss completes the black-hole pattern.
    pub fn on_lost(&mut self, size: u16) -> bool {
        if size <= self.base {
            return false;
        }
        self.large_lost = self.large_lost.saturating_add(1);
        if self.large_lost >= self.threshold && self.small_acked {
            self.reset();
            return true;
        }
        false
    }

    /// Whether the pattern is complete without waiting for another loss
    /// (the small ACK may arrive after the losses were declared).
    pub fn poll_detected(&mut self) -> bool {
        if self.large_lost >= self.threshold && self.small_acked {
            self.reset();
            return true;
        }
        false
    }

    /// Forget the current window.
    pub fn reset(&mut self) {
        self.large_lost = 0;
        self.small_acked = false;
    }

    /// Large packets lost since the last large ACK.
    #[must_use]
    pub fn large_lost(&self) -> u32 {
        self.large_lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_when_large_lost_and_small_delivered() {
        let mut d = BlackHoleDetector::new(1200, 3);
        d.on_acked(1500);
        d.on_acked(100);
        assert!(!d.on_lost(1500));
        assert!(!d.on_lost(1500));
        assert!(d.on_lost(1500));
        // Reset after firing.
        assert_eq!(d.large_lost(), 0);
        assert!(!d.on_lost(1500));
    }

    #[test]
    fn small_ack_after_losses_completes_pattern() {
        let mut d = BlackHoleDetector::new(1200, 2);
        assert!(!d.on_lost(1500));
        assert!(!d.on_lost(1500));
        assert!(!d.poll_detected());
        d.on_acked(1200);
        assert!(d.poll_detected());
    }

    #[test]
    fn total_outage_is_not_a_black_hole() {
        let mut d = BlackHoleDetector::new(1200, 3);
        for _ in 0..10 {
            assert!(!d.on_lost(1500));
            assert!(!d.on_lost(1000));
        }
    }

    #[test]
    fn large_ack_clears_the_window() {
        let mut d = BlackHoleDetector::new(1200, 3);
        d.on_acked(500);
        d.on_lost(1500);
        d.on_lost(1500);
        d.on_acked(1500);
        assert!(!d.on_lost(1500));
        assert!(!d.poll_detected());
    }
}
