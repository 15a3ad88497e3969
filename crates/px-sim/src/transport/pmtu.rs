//! The transport's boundary to path-MTU discovery.
//!
//! The sender asks a [`PmtuController`] which datagram size data may use
//! and whether a probe is due, and reports what happened to probes and to
//! ordinary packets (for black-hole detection). The controller that does
//! real discovery wraps `px-pmtud`'s RFC 8899 state machine (see
//! [`crate::dplpmtud`]); [`FixedPmtu`] is the no-discovery case (a
//! configured packet size, as a TCP sender with a fixed MSS).

use px_pmtud::rtt::RttEstimator;

use crate::time::SimTime;

/// What the transport needs from path-MTU discovery. Sizes are IP lengths.
pub trait PmtuController {
    /// Largest datagram data packets may use now (the PLPMTU).
    fn plpmtu(&self) -> u32;
    /// Size a probe would have if one were taken now (no side effect), so
    /// the sender can check its window first.
    fn probe_due(&self) -> Option<u32>;
    /// Takes the due probe: the caller sends exactly one probe of the
    /// returned size now. `rtt` sets the probe timer.
    fn poll_probe(&mut self, now: SimTime, rtt: &dyn RttEstimator) -> Option<u32>;
    /// Size that the path is expected to carry even after it shrank (the
    /// sender limits one PTO probe to it, so black-hole detection sees a
    /// small packet delivered).
    fn base_size(&self) -> u32;
    /// A probe of `size` bytes was acknowledged.
    fn on_probe_acked(&mut self, now: SimTime, size: u32);
    /// A probe of `size` bytes was declared lost.
    fn on_probe_lost(&mut self, now: SimTime, size: u32);
    /// An ordinary packet of `size` bytes was acknowledged.
    fn on_packet_acked(&mut self, now: SimTime, size: u32);
    /// An ordinary packet of `size` bytes was declared lost.
    fn on_packet_lost(&mut self, now: SimTime, size: u32);
    /// The probe timeout expired with ack-eliciting packets outstanding, the
    /// largest of which had `largest_outstanding` bytes.
    fn on_pto(&mut self, now: SimTime, largest_outstanding: u32);
    /// A validated ICMP "packet too big" reported `mtu` (RFC 8899 §4.6).
    fn on_packet_too_big(&mut self, _now: SimTime, _mtu: u32) {}
    /// Black holes acted on so far.
    fn black_holes(&self) -> u64 {
        0
    }
    /// When the controller's own timer (probe timer, raise timer) fires.
    fn poll_timeout(&self) -> Option<SimTime>;
    /// The controller's timer fired.
    fn on_timeout(&mut self, now: SimTime);
}

/// A fixed packet size: no discovery, no probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedPmtu(pub u32);

impl PmtuController for FixedPmtu {
    fn plpmtu(&self) -> u32 {
        self.0
    }
    fn probe_due(&self) -> Option<u32> {
        None
    }
    fn poll_probe(&mut self, _now: SimTime, _rtt: &dyn RttEstimator) -> Option<u32> {
        None
    }
    fn base_size(&self) -> u32 {
        self.0
    }
    fn on_probe_acked(&mut self, _now: SimTime, _size: u32) {}
    fn on_probe_lost(&mut self, _now: SimTime, _size: u32) {}
    fn on_packet_acked(&mut self, _now: SimTime, _size: u32) {}
    fn on_packet_lost(&mut self, _now: SimTime, _size: u32) {}
    fn on_pto(&mut self, _now: SimTime, _largest_outstanding: u32) {}
    fn poll_timeout(&self) -> Option<SimTime> {
        None
    }
    fn on_timeout(&mut self, _now: SimTime) {}
}
