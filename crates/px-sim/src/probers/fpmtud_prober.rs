//! F-PMTUD as `px probe --method auto` runs it: `px-pmtud`'s prober (one
//! DF-clear probe sized to the local link, then DF-set refinement to the
//! byte), and, when it reports `Fallback` (fragments filtered, nothing
//! answered), `px-pmtud`'s DPLPMTUD over the same responder. This file only
//! moves bytes and converts time; every decision is `px-pmtud`'s.

use std::time::Instant;

use px_pmtud::dplpmtud::{ConfigError, DplpmtudConfig};
use px_pmtud::fpmtud::prober::{Outcome, Prober as FpProber, ProberConfig, ProberConfigError};
use px_pmtud::rtt::ClassicRtt;

use super::{DplpmtudProber, ProbeOutcome, Prober, ProberStats};
use crate::datagram::Datagrams;
use crate::net::Endpoint;
use crate::packet::{Packet, Payload};
use crate::time::SimTime;

/// Why the F-PMTUD endpoint could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FpmtudSetupError {
    /// The F-PMTUD prober refused its configuration.
    #[error("F-PMTUD prober: {0}")]
    Prober(#[from] ProberConfigError),
    /// The fallback DPLPMTUD refused its configuration.
    #[error("DPLPMTUD fallback: {0}")]
    Fallback(#[from] ConfigError),
}

/// F-PMTUD prober endpoint with DPLPMTUD fallback.
pub struct FpmtudProber {
    prober: FpProber<ClassicRtt>,
    fallback: DplpmtudProber,
    fell_back: bool,
    datagrams: Datagrams,
    base: Instant,
    outcome: Option<ProbeOutcome>,
    stats: ProberStats,
}

impl FpmtudProber {
    /// A measurement with `config`; `fallback` configures the DPLPMTUD run
    /// used if F-PMTUD cannot answer.
    pub fn new(
        config: ProberConfig,
        fallback: DplpmtudConfig,
        datagrams: Datagrams,
        base: Instant,
        nonce: u64,
    ) -> Result<Self, FpmtudSetupError> {
        let prober = FpProber::new(config, nonce, ClassicRtt::default())?;
        let fallback = DplpmtudProber::new(fallback, datagrams.clone(), base, nonce.wrapping_add(1))?;
        Ok(FpmtudProber {
            prober,
            fallback,
            fell_back: false,
            datagrams,
            base,
            outcome: None,
            stats: ProberStats::default(),
        })
    }

    /// Whether F-PMTUD handed over to DPLPMTUD.
    #[must_use]
    pub fn fell_back(&self) -> bool {
        self.fell_back
    }

    fn check_done(&mut self, now: SimTime) {
        if self.outcome.is_some() {
            return;
        }
        if self.fell_back {
            self.outcome = self.fallback.outcome();
            return;
        }
        let Some(result) = self.prober.result() else { return };
        match result.outcome {
            Outcome::Exact { pmtu, .. } | Outcome::Estimate { pmtu } => {
                self.outcome = Some(ProbeOutcome { pmtu: Some(u32::from(pmtu)), at: now });
            }
            Outcome::Fallback { .. } => self.fell_back = true,
        }
    }
}

impl Endpoint for FpmtudProber {
    fn on_packet(&mut self, now: SimTime, pkt: &Packet) {
        if self.outcome.is_some() {
            return;
        }
        if self.fell_back {
            self.fallback.on_packet(now, pkt);
        } else if let Payload::Udp { handle } = pkt.payload {
            let at = now.to_instant(self.base);
            let prober = &mut self.prober;
            // The verdict is counted in the prober's stats.
            let _ = self.datagrams.with(handle, |bytes| prober.handle_reply(at, bytes));
        }
        self.check_done(now);
    }

    fn on_timeout(&mut self, now: SimTime) {
        if self.fell_back {
            self.fallback.on_timeout(now);
        } else {
            self.prober.handle_timeout(now.to_instant(self.base));
        }
        self.check_done(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Packet> {
        if self.outcome.is_some() {
            return None;
        }
        if self.fell_back {
            return self.fallback.poll_transmit(now);
        }
        let t = self.prober.poll_transmit(now.to_instant(self.base))?;
        self.stats.probes += 1;
        self.stats.bytes += u64::from(t.ip_len);
        let handle = self.datagrams.put(t.payload);
        Some(Packet::new(u32::from(t.ip_len), t.dont_fragment, Payload::Udp { handle }))
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        if self.outcome.is_some() {
            return None;
        }
        if self.fell_back {
            return self.fallback.poll_timeout();
        }
        self.prober.poll_timeout().map(|t| SimTime::from_instant(t, self.base))
    }
}

impl Prober for FpmtudProber {
    fn outcome(&self) -> Option<ProbeOutcome> {
        self.outcome
    }

    fn prober_stats(&self) -> ProberStats {
        let f = self.fallback.prober_stats();
        ProberStats {
            probes: self.stats.probes + f.probes,
            bytes: self.stats.bytes + f.bytes,
            replies: self.prober.stats().accepted + f.replies,
            ptbs: f.ptbs,
        }
    }

    fn fell_back(&self) -> bool {
        self.fell_back
    }
}
