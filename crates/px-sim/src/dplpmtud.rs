//! The transport's PMTU controller backed by `px-pmtud`'s RFC 8899 state
//! machine: the simulator's packets are the probes, its loss detection
//! reports their fate, and `px-pmtud`'s black-hole detector watches the data
//! packets. Nothing of DPLPMTUD is reimplemented here; this file only
//! converts time (simulated nanoseconds ↔ `Instant`) and sizes (u32 ↔ u16,
//! IP total lengths) at the boundary.

use std::time::Instant;

use px_pmtud::dplpmtud::{ConfigError, Dplpmtud, DplpmtudConfig, DplpmtudStats, State};
use px_pmtud::rtt::RttEstimator;

use crate::time::SimTime;
use crate::transport::PmtuController;

/// [`PmtuController`] over [`Dplpmtud`].
#[derive(Debug, Clone)]
pub struct DplpmtudController {
    machine: Dplpmtud,
    base: Instant,
}

fn to_u16(size: u32) -> u16 {
    u16::try_from(size).unwrap_or(u16::MAX)
}

impl DplpmtudController {
    /// A controller enabled at once (the simulated connection exists from
    /// the start). `base` is the instant standing for simulated time zero.
    pub fn new(config: DplpmtudConfig, base: Instant) -> Result<Self, ConfigError> {
        let mut machine = Dplpmtud::new(config)?;
        machine.enable();
        Ok(DplpmtudController { machine, base })
    }

    /// The state machine.
    #[must_use]
    pub fn machine(&self) -> &Dplpmtud {
        &self.machine
    }

    /// Its counters.
    #[must_use]
    pub fn stats(&self) -> DplpmtudStats {
        self.machine.stats()
    }

    fn at(&self, now: SimTime) -> Instant {
        now.to_instant(self.base)
    }
}

impl PmtuController for DplpmtudController {
    fn plpmtu(&self) -> u32 {
        u32::from(self.machine.plpmtu())
    }

    fn probe_due(&self) -> Option<u32> {
        let probing = matches!(self.machine.state(), State::Base | State::Searching | State::Error);
        if !probing || self.machine.probe_in_flight() {
            return None;
        }
        self.machine.probed_size().map(u32::from)
    }

    fn poll_probe(&mut self, now: SimTime, rtt: &dyn RttEstimator) -> Option<u32> {
        let at = self.at(now);
        self.machine.poll_probe(at, rtt).map(u32::from)
    }

    fn base_size(&self) -> u32 {
        u32::from(self.machine.config().base_plpmtu)
    }

    fn on_probe_acked(&mut self, now: SimTime, size: u32) {
        let at = self.at(now);
        self.machine.on_probe_acked(at, to_u16(size));
    }

    fn on_probe_lost(&mut self, now: SimTime, size: u32) {
        let at = self.at(now);
        self.machine.on_probe_lost(at, to_u16(size));
    }

    fn on_packet_acked(&mut self, _now: SimTime, size: u32) {
        self.machine.on_data_acked(to_u16(size));
    }

    fn on_packet_lost(&mut self, _now: SimTime, size: u32) {
        // Late losses of packets sent before a black hole are px-pmtud's to
        // ignore (`stale_data_losses`); the return value (black hole acted
        // on) shows in the stats.
        let _ = self.machine.on_data_lost(to_u16(size));
    }

    fn on_pto(&mut self, _now: SimTime, _largest_outstanding: u32) {}

    fn on_packet_too_big(&mut self, now: SimTime, mtu: u32) {
        let at = self.at(now);
        let _ = self.machine.on_packet_too_big(at, to_u16(mtu));
    }

    fn black_holes(&self) -> u64 {
        self.machine.stats().black_holes
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        self.machine.poll_timeout().map(|t| SimTime::from_instant(t, self.base))
    }

    fn on_timeout(&mut self, now: SimTime) {
        let at = self.at(now);
        self.machine.handle_timeout(at);
    }
}
