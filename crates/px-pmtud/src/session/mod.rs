//! Probe sessions: one path MTU measurement of each method as a sans-I/O
//! state machine, the policy `px probe` runs on a socket and `px sim
//! pmtud-compare` runs in simulated time.
//!
//! Four methods, each against a `px fpmtud` responder:
//!
//! * [`FpmtudSession`]: F-PMTUD. The DF-clear round-1 probe
//!   ([`Df::Clear`]), DF-set confirmation probes ([`Df::Probe`]). Ends with
//!   the prober's outcome, which may be "fall back to DPLPMTUD"; optionally
//!   with an early fallback when a small DF-set probe is answered but the
//!   fragment report does not come.
//! * [`DplpmtudSession`]: RFC 8899 DPLPMTUD ([`crate::dplpmtud::Dplpmtud`]),
//!   each probe a DF-set confirmation probe; the responder's confirming
//!   report is the probe's acknowledgement. Validated ICMP "too big"
//!   messages only speed the search up (RFC 8899 §4.6); without them the
//!   probe timers decide.
//! * [`IcmpSession`]: classic PMTUD (RFC 1191 / RFC 8201) for comparison:
//!   DF-set probes ([`Df::Do`]), sizes lowered by ICMP "fragmentation
//!   needed" / "packet too big", done when a probe is answered. Fails on a
//!   black hole (no ICMP comes back).
//! * [`ParallelSession`]: several DF-set sizes per round trip (common MTUs
//!   and the bounds, then the interval left), each round closed by a small
//!   control probe; exact in two or three round trips on any path, with
//!   F-PMTUD's fragment report as a hint on IPv4. For a tool and for a
//!   transport's first search; the in-band search keeps RFC 8899's rules
//!   ([`DplpmtudSession`]).
//! * [`ConfirmSession`]: not a search but one question, whether the path
//!   carries one size whole with DF set (every probe of that size, with a
//!   fresh nonce): what a gateway asks before it trusts a claimed iMTU.
//! * [`AutoSession`]: [`ParallelSession`] with the hint on IPv4, without it
//!   on IPv6; with legacy probes, F-PMTUD on IPv4 with an early hand-over
//!   to DPLPMTUD when fragments do not get through, DPLPMTUD on IPv6.
//!
//! Every session has the same loop ([`Session`]): send what
//! `poll_transmit(now)` returns, report what the socket says
//! (`on_datagram`, `on_icmp_too_big`, `on_unreachable`, `on_local_refused`),
//! call `handle_timeout(now)` at `poll_timeout()`, stop when `outcome()` is
//! `Some`. Time is always an argument; the session's clock starts at its
//! construction and every measurement is bounded by
//! [`SessionConfig::timeout`].

mod auto;
mod confirm;
mod dplpmtud;
mod fpmtud;
mod icmp;
mod parallel;
#[cfg(test)]
mod scripted;

pub use auto::AutoSession;
pub use confirm::ConfirmSession;
pub use dplpmtud::DplpmtudSession;
pub use fpmtud::{FpmtudRun, FpmtudSession, PING_SIZE};
pub use icmp::IcmpSession;
pub use parallel::{ALL_SIZES_UP_TO, CANDIDATES, MAX_ROUND_SIZES, ParallelSession};

use std::time::{Duration, Instant};

use crate::dplpmtud::{ConfigError, IPV4_MIN_MTU, MAX_PROBES};
use crate::fpmtud::prober::ProberConfigError;
use crate::fpmtud::wire::{self, ProbeKind, ProbeRepr};
use crate::search::SearchStrategy;

/// IPv6 minimum link MTU (RFC 8200 §5): every IPv6 path carries it.
pub const IPV6_MIN_MTU: u16 = 1280;

/// Note for a measurement ended by ICMP "port unreachable".
pub const REFUSED: &str = "port unreachable: no responder on this port";

/// Note appended when a legacy responder's answer was used.
pub const UNAUTHENTICATED: &str = "legacy responder (4-byte replies, no nonce): answer unauthenticated";

/// After an ICMP "port unreachable", how long a measurement still waits
/// for a reply: a responder that binds its port only when it has seen the
/// first probe (the reference `mtud_destination`) answers right after the
/// kernel's ICMP error, as soon as its process runs. `since_first` is the
/// time since the first probe went out (about one RTT): two more RTTs, at
/// least 100 ms (a loaded host schedules the responder late; the lab saw
/// more than 10 ms).
#[must_use]
pub fn unreachable_grace(since_first: Duration) -> Duration {
    (since_first * 2).max(Duration::from_millis(100))
}

/// What a measurement is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// The local link MTU (capped by the caller's largest size): the
    /// largest candidate.
    pub link_mtu: u16,
    /// The path is IPv6 (48 bytes of IP + UDP header instead of 28; no
    /// F-PMTUD).
    pub ipv6: bool,
    /// Overall bound on the measurement.
    pub timeout: Duration,
    /// Floor of DPLPMTUD's PROBE_TIMER and of the classic method's retry timer.
    pub probe_timer: Duration,
    /// RTT assumed before the first sample.
    pub initial_rtt: Duration,
    /// DPLPMTUD search strategy.
    pub search: SearchStrategy,
    /// Send legacy `FPMT` probes (for the paper authors' reference
    /// responder), accept its 4-byte replies, and wait out the round after
    /// an ICMP "port unreachable" (that responder binds its port only after
    /// it saw the first probe).
    pub legacy: bool,
    /// Accept a legacy responder's 4-byte replies to extended probes (no
    /// nonce: the answer is then unauthenticated, and says so). `auto`
    /// turns this on.
    pub accept_legacy: bool,
    /// Classic PMTUD: probes of one size without an answer or an ICMP
    /// message before it gives up (black hole).
    pub icmp_tries: u8,
}

impl SessionConfig {
    /// `px probe`'s defaults for a link of `link_mtu`: 10 s overall, 25 ms
    /// probe timer floor, 100 ms initial RTT, lsquic's search to the byte,
    /// extended probes, MAX_PROBES tries per size for classic PMTUD.
    #[must_use]
    pub fn new(link_mtu: u16, ipv6: bool) -> Self {
        SessionConfig {
            link_mtu,
            ipv6,
            timeout: Duration::from_secs(10),
            probe_timer: Duration::from_millis(25),
            initial_rtt: Duration::from_millis(100),
            search: SearchStrategy::lsquic_exact(),
            legacy: false,
            accept_legacy: false,
            icmp_tries: MAX_PROBES,
        }
    }

    /// IP + UDP header bytes in front of a probe's payload.
    #[must_use]
    pub fn overhead(&self) -> u16 {
        if self.ipv6 { 48 } else { 28 }
    }

    /// The minimum MTU of the path's IP version: every path carries it.
    #[must_use]
    pub fn min_mtu(&self) -> u16 {
        if self.ipv6 { IPV6_MIN_MTU } else { IPV4_MIN_MTU }
    }
}

/// Why a session could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// F-PMTUD asked for on an IPv6 path.
    #[error("F-PMTUD needs IPv4: IPv6 routers never fragment")]
    FpmtudNeedsIpv4,
    /// The link MTU is below the minimum MTU of the path's IP version.
    #[error("largest size {link_mtu} is below the minimum MTU {min}")]
    LinkMtuBelowMinimum {
        /// Configured link MTU.
        link_mtu: u16,
        /// The IP version's minimum MTU.
        min: u16,
    },
    /// The F-PMTUD prober refused its configuration.
    #[error(transparent)]
    Prober(#[from] ProberConfigError),
    /// DPLPMTUD refused its configuration.
    #[error(transparent)]
    Dplpmtud(#[from] ConfigError),
}

/// How the driver sets the IP DF bit for one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Df {
    /// DF clear, sized by the interface MTU, any cached path MTU ignored:
    /// the datagram leaves as one packet for routers to fragment.
    Clear,
    /// DF set, any cached path MTU ignored: DPLPMTUD and F-PMTUD
    /// confirmation probes.
    Probe,
    /// DF set and the cached path MTU enforced: classic PMTUD; the local
    /// stack refuses larger sends ([`Session::on_local_refused`]).
    Do,
}

/// A datagram for the driver to send to the responder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeDatagram {
    /// IP total length it makes (`payload` plus the IP and UDP headers).
    pub size: u16,
    /// DF handling.
    pub df: Df,
    /// UDP payload.
    pub payload: Vec<u8>,
}

/// An ICMP "fragmentation needed" / "packet too big" (or the local stack's
/// own "message too long") about a datagram this measurement sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooBig<'a> {
    /// The MTU it announces.
    pub mtu: u32,
    /// It came from the network (an ICMP message), not the local stack.
    pub from_network: bool,
    /// The start of the UDP payload of the datagram it is about, as much
    /// as the message quoted.
    pub quoted: &'a [u8],
}

/// Result of one method on one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measurement {
    /// `fpmtud`, `dplpmtud`, `fpmtud+dplpmtud` or `icmp`.
    pub method: String,
    /// The path MTU found (IP total length), `None` when there was no answer.
    pub pmtu: Option<u16>,
    /// The answer is exact: a probe of exactly `pmtu` was acknowledged and
    /// one byte more cannot pass (refused, found too big, or above the
    /// largest size the link or the responder's link allows).
    pub exact: bool,
    /// The largest size the path may carry as far as the measurement knows
    /// (`pmtu` when exact; with `pmtu` the range the path MTU lies in when
    /// not; `None` without an answer).
    pub pmtu_high: Option<u16>,
    /// Round trips waited for (each retry and each sequential probe counts).
    pub round_trips: u32,
    /// Probes put on the wire (locally refused ones not counted).
    pub probes: u32,
    /// From the first probe to the answer.
    pub elapsed: Duration,
    /// The local link MTU used as the largest candidate.
    pub link_mtu: u16,
    /// How the answer came about or why there is none.
    pub note: String,
    /// The answer rests only on replies that echoed this measurement's
    /// secret nonce. `false`: a legacy responder's 4-byte replies (no
    /// nonce; anyone who guesses the port could forge them) were used.
    pub authenticated: bool,
}

/// One measurement as a sans-I/O state machine.
pub trait Session {
    /// Next datagram to send now. Call until `None` after building the
    /// session and after every other call.
    #[must_use]
    fn poll_transmit(&mut self, now: Instant) -> Option<ProbeDatagram>;
    /// The local stack refused the datagram last returned by
    /// `poll_transmit` as too big (`EMSGSIZE`): nothing left the host.
    /// `known_pmtu`: the path MTU the local stack holds for the path.
    fn on_local_refused(&mut self, now: Instant, known_pmtu: Option<u16>);
    /// A UDP payload arrived from the responder.
    fn on_datagram(&mut self, now: Instant, bytes: &[u8]);
    /// A "too big" message about one of our datagrams (only reported when
    /// [`Session::reads_icmp`]).
    fn on_icmp_too_big(&mut self, now: Instant, ptb: TooBig<'_>);
    /// ICMP "port unreachable": nothing listens on the responder's port.
    fn on_unreachable(&mut self, now: Instant);
    /// When `handle_timeout` has work; `None` once there is an outcome.
    #[must_use]
    fn poll_timeout(&self) -> Option<Instant>;
    /// Fires whatever is due at `now` (retries, give-up rules, the overall
    /// timeout). Does nothing when nothing is due.
    fn handle_timeout(&mut self, now: Instant);
    /// The result, once the measurement has ended.
    fn outcome(&self) -> Option<&Measurement>;
    /// Whether the session wants ICMP "too big" messages now (the driver
    /// enables reading them, e.g. `IP_RECVERR`, when this turns true):
    /// every method but F-PMTUD's own fragment report reads them.
    fn reads_icmp(&self) -> bool {
        true
    }
    /// Whether the method handed over to another (F-PMTUD to DPLPMTUD).
    fn fell_back(&self) -> bool {
        false
    }
}

/// Whether an ICMP error's quoted payload is one of our probes (RFC 8899
/// §4.6.1: a PTB must be validated against what was sent; the kernel has
/// already matched addresses and ports to this connected socket, the nonce
/// in the quoted probe header shows an off-path sender did not guess them).
#[must_use]
pub fn quotes_our_probe(quoted: &[u8], nonce: u64) -> bool {
    matches!(wire::parse_request(quoted), Ok(wire::Request::Probe(p)) if p.nonce == nonce)
}

/// An extended DF-set confirmation probe of IP length `size`: what
/// DPLPMTUD, classic PMTUD and the `auto` ping send. Sizes are at least the
/// path's minimum MTU (68 or 1280 bytes), which leaves room for the probe
/// header; were one smaller, the responder would see a malformed probe.
fn confirm_probe(nonce: u64, probe_id: u32, size: u16, overhead: u16, df: Df) -> ProbeDatagram {
    let mut payload = vec![0u8; usize::from(size.saturating_sub(overhead))];
    let _ = ProbeRepr { kind: ProbeKind::Confirm, nonce, probe_id, ip_len: size }.emit(&mut payload);
    ProbeDatagram { size, df, payload }
}

/// The clock of a session that has one probe out at a time (classic
/// PMTUD, a confirmation): the wait for the probe's answer, within the
/// measurement's hard bound.
#[derive(Debug, Clone, Copy)]
struct OneAtATime {
    /// When the probe out is given up on; `None` when the next is due.
    deadline: Option<Instant>,
    hard: Instant,
}

impl OneAtATime {
    fn new(now: Instant, timeout: Duration) -> OneAtATime {
        OneAtATime { deadline: None, hard: now + timeout }
    }

    /// A probe left at `now`; its answer is waited for `wait`.
    fn sent(&mut self, now: Instant, wait: Duration) {
        self.deadline = Some(now + wait);
    }

    /// Whether a probe is out and waited for.
    fn waiting(&self) -> bool {
        self.deadline.is_some()
    }

    /// The next probe is due now (an answer or an ICMP message came).
    fn next_now(&mut self) {
        self.deadline = None;
    }

    fn past_bound(&self, now: Instant) -> bool {
        now >= self.hard
    }

    fn poll_timeout(&self) -> Instant {
        self.deadline.map_or(self.hard, |d| d.min(self.hard))
    }

    /// At `now`: whether the give-up rules are due (the probe's wait or
    /// the hard bound ended).
    fn expire(&mut self, now: Instant) -> bool {
        if self.deadline.is_some_and(|d| d <= now) {
            self.deadline = None;
        }
        self.deadline.is_none() || now >= self.hard
    }
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_icmp_errors_quoting_our_nonce_count() {
        let mut probe = vec![0u8; 100];
        ProbeRepr { kind: ProbeKind::Confirm, nonce: 99, probe_id: 3, ip_len: 128 }.emit(&mut probe).unwrap();
        assert!(quotes_our_probe(&probe, 99));
        // An ICMP message quotes at least the probe header (24 bytes).
        assert!(quotes_our_probe(&probe[..wire::PROBE_MIN_LEN], 99));
        assert!(!quotes_our_probe(&probe, 98), "another measurement's (or a forged) nonce");
        assert!(!quotes_our_probe(&probe[..8], 99), "too little quoted to check");
        assert!(!quotes_our_probe(b"FPMT", 99), "legacy probes carry no nonce");
        assert!(!quotes_our_probe(&[], 99));
    }

    #[test]
    fn confirm_probes_carry_their_size_and_nonce() {
        let d = confirm_probe(7, 2, 1400, 28, Df::Probe);
        assert_eq!((d.size, d.df, d.payload.len()), (1400, Df::Probe, 1372));
        assert!(quotes_our_probe(&d.payload, 7));
        let v6 = SessionConfig::new(1500, true);
        assert_eq!((v6.overhead(), v6.min_mtu()), (48, IPV6_MIN_MTU));
    }
}
