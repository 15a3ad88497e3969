//! The transport's boundary to path-MTU discovery.
//!
//! The sender asks a [`PmtuController`] which datagram size data may use
//! and whether a probe is due, and reports what happened to probes and to
//! ordinary packets (for black-hole detection). The controller that does
//! real discovery wraps `px-pmtud`'s RFC 8899 state machine (see
//! [`crate::dplpmtud`]); [`FixedPmtu`] is the no-discovery case (a
//! configured packet size, as a TCP sender with a fixed MSS).

use crate::time::SimTime;

/// What the transport needs from path-MTU discovery. Sizes are IP lengths.
pub trait PmtuController {
    /// Largest datagram data packets may use now (the PLPMTU).
    fn plpmtu(&self) -> u32;
    /// Size of a probe the search wants sent now, if any.
    fn probe_wanted(&self, now: SimTime) -> Option<u32>;
    /// A probe of `size` bytes was sent.
    fn on_probe_sent(&mut self, now: SimTime, size: u32);
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
    fn probe_wanted(&self, _now: SimTime) -> Option<u32> {
        None
    }
    fn on_probe_sent(&mut self, _now: SimTime, _size: u32) {}
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
