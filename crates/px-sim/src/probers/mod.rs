//! Path-MTU probers and the responder as simulated endpoints, for
//! [`crate::experiments::pmtud_compare`].
//!
//! Each prober sits at endpoint A, the F-PMTUD responder (`px-pmtud`'s) at
//! endpoint B. Every prober is a `px-pmtud` probe session
//! (`px_pmtud::session`: F-PMTUD / `auto`, DPLPMTUD, classic ICMP PMTUD),
//! the code `px probe` runs, driven through one adapter
//! ([`SessionProber`]).

mod responder;
mod session;

pub use responder::{PROBER_ADDR, ResponderEndpoint};
pub use session::SessionProber;

use serde::Serialize;

use crate::net::Endpoint;
use crate::time::SimTime;

/// What a prober concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeOutcome {
    /// The path MTU it settled on; `None` when it gave up.
    pub pmtu: Option<u32>,
    /// When it concluded.
    pub at: SimTime,
}

/// Counters every prober keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProberStats {
    /// Probe packets sent.
    pub probes: u64,
    /// IP bytes sent (fragments count once, as the prober sent them).
    pub bytes: u64,
}

/// A prober endpoint.
pub trait Prober: Endpoint {
    /// The conclusion, once there is one.
    fn outcome(&self) -> Option<ProbeOutcome>;
    /// Counters.
    fn prober_stats(&self) -> ProberStats;
    /// Whether the method handed over to another one (F-PMTUD → DPLPMTUD).
    fn fell_back(&self) -> bool {
        false
    }
}
