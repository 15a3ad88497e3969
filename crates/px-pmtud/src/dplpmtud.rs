//! DPLPMTUD: the RFC 8899 state machine, sans-I/O.
//!
//! [`Dplpmtud`] decides which probe sizes to send and what the current
//! PLPMTU is. It reads no clock and sends nothing: the caller passes `now`,
//! asks [`Dplpmtud::poll_probe`] for a probe size, sends a probe of exactly
//! that size by whatever means it has (a QUIC PING+PADDING packet, a UDP
//! datagram to `px fpmtud`, a simulated packet), and reports what happened
//! with the `on_*` methods and [`Dplpmtud::handle_timeout`]. The PROBE_TIMER
//! comes from an [`RttEstimator`]'s PTO, never below
//! [`DplpmtudConfig::min_probe_timer`].
//!
//! Sizes are in whatever unit the caller's PL counts (RFC 8899's PLPMTU is
//! the PL packet size); `px probe` uses IP total lengths so the answer is the
//! path MTU itself.
//!
//! Guarantees:
//! * at most one probe is outstanding at a time;
//! * the PLPMTU only takes values that were acknowledged as probes, or
//!   BASE_PLPMTU / MIN_PLPMTU as RFC 8899 §5.2 prescribes, and never exceeds
//!   MAX_PLPMTU;
//! * a PTB never sets the PLPMTU directly (RFC 8899 §4.6.2: "MUST NOT be used
//!   directly to set the PLPMTU");
//! * with an exact search strategy, when probes up to the path MTU are
//!   acknowledged and larger ones lost, SEARCH_COMPLETE is reached with the
//!   PLPMTU equal to the path MTU (property-tested below).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::blackhole::BlackHoleDetector;
use crate::rtt::RttEstimator;
use crate::search::{Search, SearchStrategy};

/// RFC 8899 §5.1.2: "The default value of MAX_PROBES is 3."
pub const MAX_PROBES: u8 = 3;

/// RFC 8899 §5.1.2: "When using IPv4, there is no currently equivalent size
/// specified, and a default BASE_PLPMTU of 1200 bytes is RECOMMENDED." (QUIC
/// uses the same 1200 on IPv6.)
pub const BASE_PLPMTU: u16 = 1200;

/// RFC 8899 §5.1.1: "This timer has a period of 600 seconds, as recommended
/// by PLPMTUD \[RFC4821\]."
pub const PMTU_RAISE_TIMER: Duration = Duration::from_secs(600);

/// RFC 8899 §5.1.1: the PROBE_TIMER "MUST NOT be smaller than 1 second".
pub const MIN_PROBE_TIMER: Duration = Duration::from_secs(1);

/// Smallest IPv4 packet every router forwards unfragmented (RFC 791), the
/// lowest MIN_PLPMTU RFC 8899 §5.1.2 allows on IPv4.
pub const IPV4_MIN_MTU: u16 = 68;

/// The states of RFC 8899 §5.2, Figure 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// "the initial state before probing has started"; also entered when the
    /// PL indicates loss of connectivity.
    Disabled,
    /// Confirming that BASE_PLPMTU works.
    Base,
    /// "the main probing state".
    Searching,
    /// "the normal maintenance state, where the PL is not probing".
    SearchComplete,
    /// The path is not known to carry BASE_PLPMTU; the PLPMTU is MIN_PLPMTU
    /// and BASE_PLPMTU is re-probed every PROBE_TIMER.
    Error,
}

/// Configuration: RFC 8899 §5.1 constants plus the search strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DplpmtudConfig {
    /// MIN_PLPMTU: used in the ERROR state.
    pub min_plpmtu: u16,
    /// BASE_PLPMTU: confirmed first; the PLPMTU after a black hole.
    pub base_plpmtu: u16,
    /// MAX_PLPMTU: the largest size ever probed (local link MTU, peer limit).
    pub max_plpmtu: u16,
    /// MAX_PROBES: consecutive unacknowledged probes of one size before it is
    /// declared too big.
    pub max_probes: u8,
    /// Floor of the PROBE_TIMER. RFC 8899 §5.1.1 says it "MUST NOT be smaller
    /// than 1 second"; tools that own the path (the lab, the simulator's
    /// what-ifs) may lower it and must say so in their results.
    pub min_probe_timer: Duration,
    /// Peer's maximum ACK delay, added to the PTO (zero for `px fpmtud`,
    /// which answers at once).
    pub max_ack_delay: Duration,
    /// PMTU_RAISE_TIMER: time in SEARCH_COMPLETE before searching again.
    pub pmtu_raise_timer: Duration,
    /// How candidate sizes are chosen.
    pub strategy: SearchStrategy,
    /// Large-packet losses that, with small packets delivered, mean a black
    /// hole (see [`BlackHoleDetector`]).
    pub black_hole_threshold: u32,
}

impl DplpmtudConfig {
    /// RFC defaults (BASE = MIN = 1200, MAX_PROBES 3, PROBE_TIMER >= 1 s,
    /// PMTU_RAISE_TIMER 600 s), exact bisection, up to `max_plpmtu`.
    #[must_use]
    pub fn new(max_plpmtu: u16) -> Self {
        Self {
            min_plpmtu: BASE_PLPMTU,
            base_plpmtu: BASE_PLPMTU,
            max_plpmtu,
            max_probes: MAX_PROBES,
            min_probe_timer: MIN_PROBE_TIMER,
            max_ack_delay: Duration::ZERO,
            pmtu_raise_timer: PMTU_RAISE_TIMER,
            strategy: SearchStrategy::Bisection,
            black_hole_threshold: u32::from(MAX_PROBES),
        }
    }

    /// Checks the ordering RFC 8899 §5.1.2 requires.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.min_plpmtu < IPV4_MIN_MTU {
            return Err(ConfigError::MinTooSmall { min: self.min_plpmtu });
        }
        if self.base_plpmtu < self.min_plpmtu {
            return Err(ConfigError::BaseBelowMin { base: self.base_plpmtu, min: self.min_plpmtu });
        }
        if self.max_plpmtu < self.base_plpmtu {
            return Err(ConfigError::MaxBelowBase { max: self.max_plpmtu, base: self.base_plpmtu });
        }
        if self.max_probes == 0 {
            return Err(ConfigError::ZeroMaxProbes);
        }
        Ok(())
    }
}

/// Why a [`DplpmtudConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// MIN_PLPMTU is below the 68 bytes every IPv4 path carries.
    #[error("MIN_PLPMTU {min} is below 68 bytes")]
    MinTooSmall {
        /// The configured MIN_PLPMTU.
        min: u16,
    },
    /// BASE_PLPMTU must be at least MIN_PLPMTU (RFC 8899 §5.1.2).
    #[error("BASE_PLPMTU {base} is below MIN_PLPMTU {min}")]
    BaseBelowMin {
        /// The configured BASE_PLPMTU.
        base: u16,
        /// The configured MIN_PLPMTU.
        min: u16,
    },
    /// MAX_PLPMTU must be at least BASE_PLPMTU.
    #[error("MAX_PLPMTU {max} is below BASE_PLPMTU {base}")]
    MaxBelowBase {
        /// The configured MAX_PLPMTU.
        max: u16,
        /// The configured BASE_PLPMTU.
        base: u16,
    },
    /// MAX_PROBES of zero would never send a probe.
    #[error("MAX_PROBES must be at least 1")]
    ZeroMaxProbes,
}

/// Something the caller may want to log or act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DplpmtudEvent {
    /// The state machine moved between states.
    StateChanged {
        /// Previous state.
        from: State,
        /// New state.
        to: State,
    },
    /// The PLPMTU (the size the PL may use for data) changed.
    PlpmtuChanged {
        /// Previous PLPMTU.
        from: u16,
        /// New PLPMTU.
        to: u16,
    },
}

/// What [`Dplpmtud::on_packet_too_big`] did with a PTB (RFC 8899 §4.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtbVerdict {
    /// "PL_PTB_SIZE < MIN_PLPMTU ... ought to be discarded".
    IgnoredBelowMin,
    /// "PL_PTB_SIZE >= PROBED_SIZE: Inconsistent network signal" (also any
    /// PTB while nothing that large was sent, or while DISABLED).
    IgnoredInconsistent,
    /// "MIN_PLPMTU < PL_PTB_SIZE < BASE_PLPMTU: A robust PL MAY enter an
    /// error state" — done.
    EnteredError,
    /// "BASE_PLPMTU <= PL_PTB_SIZE < PLPMTU: This could be an indication of a
    /// black hole": back to BASE, the size seeds the next search.
    BlackHole,
    /// "PLPMTU < PL_PTB_SIZE < PROBED_SIZE": the probe is known lost; the
    /// size is the next search point.
    NextSearchPoint,
    /// "PL_PTB_SIZE = PLPMTU" while searching: the search is complete.
    SearchCompleted,
}

/// Counters, for results tables and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DplpmtudStats {
    /// Probes handed out by `poll_probe`.
    pub probes_sent: u64,
    /// Bytes in those probes (sum of sizes).
    pub probe_bytes: u64,
    /// Probes acknowledged.
    pub probes_acked: u64,
    /// Probes declared lost (timer or caller).
    pub probes_lost: u64,
    /// ACKs or losses for a size that is not the current probe.
    pub stale_reports: u64,
    /// Data losses ignored because the packet was larger than the PLPMTU in
    /// force: sent before the PLPMTU was last lowered, already accounted for.
    pub stale_data_losses: u64,
    /// Black holes acted on (detector, caller or PTB).
    pub black_holes: u64,
    /// PTBs that changed something.
    pub ptb_used: u64,
    /// PTBs discarded.
    pub ptb_ignored: u64,
    /// Searches that reached SEARCH_COMPLETE.
    pub searches_completed: u64,
}

/// The RFC 8899 DPLPMTUD state machine for one path.
#[derive(Debug, Clone)]
pub struct Dplpmtud {
    config: DplpmtudConfig,
    state: State,
    plpmtu: u16,
    /// PROBED_SIZE: the size being confirmed (outstanding or to be re-sent).
    probed_size: Option<u16>,
    /// PROBE_COUNT: unacknowledged probes of `probed_size` so far.
    probe_count: u8,
    in_flight: bool,
    probe_deadline: Option<Instant>,
    raise_deadline: Option<Instant>,
    search: Option<Search>,
    /// A validated PTB size that seeds the next search (RFC 8899 §4.6.2).
    search_hint: Option<u16>,
    detector: BlackHoleDetector,
    events: VecDeque<DplpmtudEvent>,
    stats: DplpmtudStats,
}

impl Dplpmtud {
    /// A machine in the DISABLED state; call [`Dplpmtud::enable`] once the PL
    /// has connectivity.
    pub fn new(config: DplpmtudConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            state: State::Disabled,
            plpmtu: config.base_plpmtu,
            probed_size: None,
            probe_count: 0,
            in_flight: false,
            probe_deadline: None,
            raise_deadline: None,
            search: None,
            search_hint: None,
            detector: BlackHoleDetector::new(config.base_plpmtu, config.black_hole_threshold),
            events: VecDeque::new(),
            stats: DplpmtudStats::default(),
            config,
        })
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &DplpmtudConfig {
        &self.config
    }

    /// Current state.
    #[must_use]
    pub fn state(&self) -> State {
        self.state
    }

    /// Current PLPMTU: the largest size the PL may send data with.
    #[must_use]
    pub fn plpmtu(&self) -> u16 {
        self.plpmtu
    }

    /// PROBED_SIZE, when a probe is outstanding or due.
    #[must_use]
    pub fn probed_size(&self) -> Option<u16> {
        self.probed_size
    }

    /// Whether a probe is outstanding.
    #[must_use]
    pub fn probe_in_flight(&self) -> bool {
        self.in_flight
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> DplpmtudStats {
        self.stats
    }

    /// The current search bracket `(lo, hi)`, while SEARCHING.
    #[must_use]
    pub fn search_bracket(&self) -> Option<(u16, u16)> {
        self.search.as_ref().map(|s| (s.lo(), s.hi()))
    }

    /// Next event for the caller's log, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<DplpmtudEvent> {
        self.events.pop_front()
    }

    /// RFC 8899 §5.2, DISABLED: "This state is left once the PL indicates
    /// connectivity to the remote PL. When transitioning to the BASE state, a
    /// probe packet of size BASE_PLPMTU can be sent immediately."
    pub fn enable(&mut self) {
        if self.state == State::Disabled {
            self.enter_base();
        }
    }

    /// RFC 8899 §5.2: DISABLED "is also entered from any other state, when
    /// the PL indicates loss of connectivity".
    pub fn disable(&mut self) {
        self.clear_probe();
        self.search = None;
        self.raise_deadline = None;
        self.set_plpmtu(self.config.base_plpmtu);
        self.set_state(State::Disabled);
    }

    /// The size of the probe to send now, if one is due. The caller must send
    /// exactly one probe of that size; the PROBE_TIMER starts now
    /// (RFC 8899 §5.2 BASE: "Each time a probe packet is sent, the
    /// PROBE_TIMER is started").
    #[must_use]
    pub fn poll_probe(&mut self, now: Instant, rtt: &dyn RttEstimator) -> Option<u16> {
        if self.in_flight {
            return None;
        }
        if !matches!(self.state, State::Base | State::Searching | State::Error) {
            return None;
        }
        let size = self.probed_size?;
        self.in_flight = true;
        self.probe_deadline = Some(now + self.probe_timer(rtt));
        self.stats.probes_sent += 1;
        self.stats.probe_bytes += u64::from(size);
        Some(size)
    }

    /// The PROBE_TIMER period: the PTO of `rtt`, at least `min_probe_timer`.
    #[must_use]
    pub fn probe_timer(&self, rtt: &dyn RttEstimator) -> Duration {
        rtt.pto(self.config.max_ack_delay).max(self.config.min_probe_timer)
    }

    /// Earliest instant at which [`Dplpmtud::handle_timeout`] has work.
    /// A probe that is *due* is not a timer: call `poll_probe` after every
    /// event.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.probe_deadline, self.raise_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires expired timers: PROBE_TIMER (the probe is lost) and
    /// PMTU_RAISE_TIMER (search again).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.probe_deadline.is_some_and(|d| d <= now) {
            self.probe_deadline = None;
            self.on_probe_failed(now);
        }
        if self.raise_deadline.is_some_and(|d| d <= now) {
            self.raise_deadline = None;
            if self.state == State::SearchComplete {
                // RFC 8899 §5.2 Figure 5: SEARCH_COMPLETE --PMTU_RAISE_TIMER
                // expiry--> SEARCHING.
                self.start_search(now);
            }
        }
    }

    /// The probe of `size` was acknowledged.
    pub fn on_probe_acked(&mut self, now: Instant, size: u16) {
        if self.probed_size != Some(size) {
            // An ACK for a size we no longer probe (late, or duplicated): the
            // bracket already moved past it.
            self.stats.stale_reports += 1;
            return;
        }
        self.stats.probes_acked += 1;
        self.clear_probe();
        match self.state {
            // RFC 8899 §5.2 BASE: "The state is exited when the probe packet
            // is acknowledged, and the PL sender enters the SEARCHING state."
            // ERROR: "The state is exited when packet probes no longer detect
            // the error. The PL sender then enters the SEARCHING state."
            State::Base | State::Error => {
                self.set_plpmtu(self.config.base_plpmtu);
                self.start_search(now);
            }
            // RFC 8899 §5.2 SEARCHING: "Each time a probe packet is
            // acknowledged, the PROBE_COUNT is set to zero, the PLPMTU is set
            // to the PROBED_SIZE, and then the PROBED_SIZE is increased using
            // the search algorithm".
            State::Searching => {
                self.set_plpmtu(size);
                if let Some(search) = self.search.as_mut() {
                    search.on_acked(size);
                }
                self.next_search_step(now);
            }
            State::Disabled | State::SearchComplete => {}
        }
    }

    /// The caller's loss detection declared the probe of `size` lost before
    /// the PROBE_TIMER expired (e.g. by packet threshold).
    pub fn on_probe_lost(&mut self, now: Instant, size: u16) {
        if self.probed_size != Some(size) || !self.in_flight {
            self.stats.stale_reports += 1;
            return;
        }
        self.probe_deadline = None;
        self.on_probe_failed(now);
    }

    /// A validated PTB reported `pl_ptb_size` (already converted to the PL's
    /// unit, RFC 8899 §4.6.2). The caller MUST have validated the quoted
    /// packet (addresses, ports, and a value an off-path attacker cannot
    /// guess) as §4.6.1 requires; this method applies the size rules.
    pub fn on_packet_too_big(&mut self, now: Instant, pl_ptb_size: u16) -> PtbVerdict {
        let verdict = self.classify_ptb(now, pl_ptb_size);
        match verdict {
            PtbVerdict::IgnoredBelowMin | PtbVerdict::IgnoredInconsistent => {
                self.stats.ptb_ignored += 1;
            }
            _ => self.stats.ptb_used += 1,
        }
        verdict
    }

    fn classify_ptb(&mut self, now: Instant, ptb: u16) -> PtbVerdict {
        if ptb < self.config.min_plpmtu {
            return PtbVerdict::IgnoredBelowMin;
        }
        if self.state == State::Disabled {
            return PtbVerdict::IgnoredInconsistent;
        }
        // The largest size we may have sent: the probe, or the PLPMTU.
        let sent_max = match (self.in_flight, self.probed_size) {
            (true, Some(p)) => p.max(self.plpmtu),
            _ => self.plpmtu,
        };
        if ptb >= sent_max && !(ptb == self.plpmtu && self.state == State::Searching) {
            return PtbVerdict::IgnoredInconsistent;
        }
        if ptb < self.config.base_plpmtu {
            if self.state == State::Error {
                return PtbVerdict::IgnoredInconsistent;
            }
            self.enter_error();
            return PtbVerdict::EnteredError;
        }
        if ptb < self.plpmtu {
            self.search_hint = Some(ptb);
            self.black_hole();
            return PtbVerdict::BlackHole;
        }
        if self.state != State::Searching {
            return PtbVerdict::IgnoredInconsistent;
        }
        // From here: state SEARCHING and PLPMTU <= ptb < PROBED_SIZE.
        self.clear_probe();
        if ptb == self.plpmtu {
            // RFC 8899 §5.2 SEARCHING: exit to SEARCH_COMPLETE when "a
            // validated PTB is received that corresponds to the last
            // successfully probed size (PL_PTB_SIZE = PLPMTU)".
            self.complete_search(now);
            return PtbVerdict::SearchCompleted;
        }
        if let Some(search) = self.search.as_mut() {
            search.on_hint(ptb);
        }
        self.next_search_step(now);
        PtbVerdict::NextSearchPoint
    }

    /// The PL concluded that the path no longer carries the PLPMTU (RFC 8899
    /// §4.3). Back to BASE; search again once BASE_PLPMTU is confirmed.
    pub fn on_black_hole(&mut self) {
        self.black_hole();
    }

    /// A data packet (not a probe) of `size` was acknowledged.
    pub fn on_data_acked(&mut self, size: u16) {
        self.detector.on_acked(size);
        if self.detector.poll_detected() {
            self.black_hole();
        }
    }

    /// A data packet (not a probe) of `size` was declared lost. Returns `true`
    /// when this completed the black-hole pattern and the machine went back
    /// to BASE.
    ///
    /// A packet larger than the current PLPMTU can only have been sent before
    /// the PLPMTU was last lowered (data never exceeds the PLPMTU in force,
    /// and the PLPMTU only falls on a black hole, a PTB or ERROR): its loss
    /// is the cause of that decision, not news about the path as it is now.
    /// Such losses are counted in [`DplpmtudStats::stale_data_losses`] and
    /// otherwise ignored, so one black hole is never acted on twice (RFC 8899
    /// §4.3 asks the PL to detect that the path "no longer sustains the
    /// sender's PLPMTU size": the size in force, not a size already given up).
    pub fn on_data_lost(&mut self, size: u16) -> bool {
        if size > self.plpmtu {
            self.stats.stale_data_losses += 1;
            return false;
        }
        if self.detector.on_lost(size) {
            self.black_hole();
            return true;
        }
        false
    }

    fn black_hole(&mut self) {
        if matches!(self.state, State::Disabled | State::Error) {
            return;
        }
        self.stats.black_holes += 1;
        self.enter_base();
    }

    /// PROBE_TIMER expiry or caller-declared loss of the outstanding probe.
    fn on_probe_failed(&mut self, now: Instant) {
        if !self.in_flight {
            return;
        }
        self.in_flight = false;
        self.stats.probes_lost += 1;
        // RFC 8899 §5.2 SEARCHING: "When a probe packet is sent and not
        // acknowledged within the period of the PROBE_TIMER, the PROBE_COUNT
        // is incremented, and a new probe packet is transmitted."
        self.probe_count = self.probe_count.saturating_add(1);
        if self.probe_count < self.config.max_probes {
            return;
        }
        self.probe_count = 0;
        let Some(size) = self.probed_size else {
            return;
        };
        match self.state {
            // RFC 8899 §5.2 BASE: "The state is also left when the
            // PROBE_COUNT reaches MAX_PROBES ... This causes the PL sender to
            // enter the ERROR state."
            State::Base => self.enter_error(),
            // ERROR keeps re-probing BASE_PLPMTU, one probe per PROBE_TIMER.
            State::Error => {}
            // RFC 8899 §5.2 SEARCHING: MAX_PROBES failures mark the size as
            // too big; the search algorithm picks the next size or ends.
            State::Searching => {
                if let Some(search) = self.search.as_mut() {
                    search.on_failed(size);
                }
                self.next_search_step(now);
            }
            State::Disabled | State::SearchComplete => {}
        }
    }

    fn enter_base(&mut self) {
        // RFC 8899 §5.2 BASE: "On entry, the PROBED_SIZE is set to the
        // BASE_PLPMTU size, and the PROBE_COUNT is set to zero."
        self.clear_probe();
        self.search = None;
        self.raise_deadline = None;
        self.detector.reset();
        self.set_plpmtu(self.config.base_plpmtu);
        self.probed_size = Some(self.config.base_plpmtu);
        self.set_state(State::Base);
    }

    fn enter_error(&mut self) {
        // RFC 8899 §5.2 ERROR: "It signals a conservative value of the MPS to
        // the higher layer": MIN_PLPMTU. BASE_PLPMTU stays the probed size.
        self.clear_probe();
        self.search = None;
        self.raise_deadline = None;
        self.set_plpmtu(self.config.min_plpmtu);
        self.probed_size = Some(self.config.base_plpmtu);
        self.set_state(State::Error);
    }

    fn start_search(&mut self, now: Instant) {
        self.clear_probe();
        let mut search = Search::new(self.config.strategy, self.plpmtu, self.config.max_plpmtu);
        if let Some(hint) = self.search_hint.take() {
            search.on_hint(hint);
        }
        self.search = Some(search);
        self.set_state(State::Searching);
        self.next_search_step(now);
    }

    fn next_search_step(&mut self, now: Instant) {
        match self.search.as_ref().and_then(Search::next_candidate) {
            Some(c) => {
                self.probed_size = Some(c);
                self.probe_count = 0;
            }
            None => self.complete_search(now),
        }
    }

    fn complete_search(&mut self, now: Instant) {
        self.clear_probe();
        self.search = None;
        self.stats.searches_completed += 1;
        self.raise_deadline = Some(now + self.config.pmtu_raise_timer);
        self.set_state(State::SearchComplete);
    }

    fn clear_probe(&mut self) {
        self.in_flight = false;
        self.probe_deadline = None;
        self.probed_size = None;
        self.probe_count = 0;
    }

    fn set_state(&mut self, to: State) {
        if self.state != to {
            self.events.push_back(DplpmtudEvent::StateChanged { from: self.state, to });
            self.state = to;
        }
    }

    fn set_plpmtu(&mut self, to: u16) {
        if self.plpmtu != to {
            self.events.push_back(DplpmtudEvent::PlpmtuChanged { from: self.plpmtu, to });
            self.plpmtu = to;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtt::{ClassicRtt, RttSample};
    use proptest::prelude::*;

    const RTT: Duration = Duration::from_millis(20);

    fn rtt() -> ClassicRtt {
        let mut r = ClassicRtt::default();
        r.on_ack(RttSample { latest_rtt: RTT, ack_delay: Duration::ZERO, acked_packet_number: 0 });
        r
    }

    fn machine(max: u16, strategy: SearchStrategy) -> Dplpmtud {
        let mut c = DplpmtudConfig::new(max);
        c.strategy = strategy;
        let mut m = Dplpmtud::new(c).expect("valid config");
        m.enable();
        m
    }

    /// Drives `m` against a path that carries sizes <= `pmtu` (ACK after one
    /// RTT) and silently drops larger ones (loss found by PROBE_TIMER), until
    /// the machine stops asking for probes. Returns (time taken, probes).
    fn drive(m: &mut Dplpmtud, now: &mut Instant, pmtu: u16) -> u64 {
        let r = rtt();
        let before = m.stats().probes_sent;
        for _ in 0..10_000 {
            if let Some(size) = m.poll_probe(*now, &r) {
                if size <= pmtu {
                    *now += RTT;
                    m.on_probe_acked(*now, size);
                } else {
                    *now = m.poll_timeout().expect("probe timer armed");
                    m.handle_timeout(*now);
                }
                continue;
            }
            if matches!(m.state(), State::SearchComplete | State::Disabled) {
                break;
            }
            if m.state() == State::Error && m.stats().probes_sent - before > 20 {
                break;
            }
            *now = m.poll_timeout().expect("a timer is armed");
            m.handle_timeout(*now);
        }
        m.stats().probes_sent - before
    }

    #[test]
    fn config_validation() {
        let mut c = DplpmtudConfig::new(1500);
        assert!(c.validate().is_ok());
        c.min_plpmtu = 60;
        assert_eq!(c.validate(), Err(ConfigError::MinTooSmall { min: 60 }));
        c.min_plpmtu = 1280;
        assert!(matches!(c.validate(), Err(ConfigError::BaseBelowMin { .. })));
        let mut c = DplpmtudConfig::new(1000);
        assert!(matches!(c.validate(), Err(ConfigError::MaxBelowBase { .. })));
        c.max_plpmtu = 1500;
        c.max_probes = 0;
        assert_eq!(Dplpmtud::new(c).err(), Some(ConfigError::ZeroMaxProbes));
    }

    #[test]
    fn disabled_sends_nothing_until_enabled() {
        let mut m = Dplpmtud::new(DplpmtudConfig::new(1500)).expect("valid");
        let now = Instant::now();
        assert_eq!(m.state(), State::Disabled);
        assert_eq!(m.poll_probe(now, &rtt()), None);
        assert_eq!(m.poll_timeout(), None);
        m.enable();
        assert_eq!(m.state(), State::Base);
        assert_eq!(m.poll_probe(now, &rtt()), Some(BASE_PLPMTU));
        // One probe at a time.
        assert_eq!(m.poll_probe(now, &rtt()), None);
        assert_eq!(m.poll_event(), Some(DplpmtudEvent::StateChanged { from: State::Disabled, to: State::Base }));
    }

    #[test]
    fn base_acked_enters_searching() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let now = Instant::now();
        assert_eq!(m.poll_probe(now, &rtt()), Some(1200));
        m.on_probe_acked(now + RTT, 1200);
        assert_eq!(m.state(), State::Searching);
        assert_eq!(m.plpmtu(), 1200);
        assert_eq!(m.search_bracket(), Some((1200, 1500)));
        assert_eq!(m.probed_size(), Some(1350));
    }

    #[test]
    fn base_lost_max_probes_enters_error_then_recovers() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let mut now = Instant::now();
        for i in 0..MAX_PROBES {
            assert_eq!(m.poll_probe(now, &rtt()), Some(1200), "probe {i}");
            // PROBE_TIMER: max(1 s, PTO(20 ms)) = 1 s.
            assert_eq!(m.poll_timeout(), Some(now + MIN_PROBE_TIMER));
            now += MIN_PROBE_TIMER;
            m.handle_timeout(now);
        }
        assert_eq!(m.state(), State::Error);
        assert_eq!(m.plpmtu(), m.config().min_plpmtu);
        // ERROR keeps probing BASE_PLPMTU, one probe per PROBE_TIMER, and
        // stays in ERROR while they fail.
        for _ in 0..2 * MAX_PROBES {
            assert_eq!(m.poll_probe(now, &rtt()), Some(1200));
            assert_eq!(m.poll_probe(now, &rtt()), None);
            now += MIN_PROBE_TIMER;
            m.handle_timeout(now);
            assert_eq!(m.state(), State::Error);
        }
        // An ACK leaves it for SEARCHING.
        assert_eq!(m.poll_probe(now, &rtt()), Some(1200));
        m.on_probe_acked(now + RTT, 1200);
        assert_eq!(m.state(), State::Searching);
        assert_eq!(m.plpmtu(), 1200);
    }

    #[test]
    fn search_probe_retried_until_max_probes() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let mut now = Instant::now();
        assert_eq!(m.poll_probe(now, &rtt()), Some(1200));
        m.on_probe_acked(now, 1200);
        for _ in 0..MAX_PROBES - 1 {
            assert_eq!(m.poll_probe(now, &rtt()), Some(1350));
            now += MIN_PROBE_TIMER;
            m.handle_timeout(now);
            assert_eq!(m.search_bracket(), Some((1200, 1500)));
        }
        assert_eq!(m.poll_probe(now, &rtt()), Some(1350));
        // The caller's own loss detection may declare it lost early.
        m.on_probe_lost(now, 1350);
        assert_eq!(m.search_bracket(), Some((1200, 1349)));
        assert_eq!(m.probed_size(), Some(1275));
        assert_eq!(m.stats().probes_lost, 3);
    }

    #[test]
    fn probe_timer_follows_pto_above_floor() {
        let mut c = DplpmtudConfig::new(1500);
        c.min_probe_timer = Duration::from_millis(1);
        let m = Dplpmtud::new(c).expect("valid");
        let r = rtt(); // srtt 20, rttvar 10: PTO = 20 + 40 = 60 ms
        assert_eq!(m.probe_timer(&r), Duration::from_millis(60));
        let m = machine(1500, SearchStrategy::Bisection);
        assert_eq!(m.probe_timer(&r), MIN_PROBE_TIMER);
        // Without samples the PTO is 999 ms, still under the 1 s floor.
        assert_eq!(m.probe_timer(&ClassicRtt::default()), MIN_PROBE_TIMER);
    }

    #[test]
    fn search_completes_and_raise_timer_searches_again() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let mut now = Instant::now();
        drive(&mut m, &mut now, 1400);
        assert_eq!(m.state(), State::SearchComplete);
        assert_eq!(m.plpmtu(), 1400);
        assert_eq!(m.stats().searches_completed, 1);
        let raise = m.poll_timeout().expect("raise timer");
        assert_eq!(raise, now + PMTU_RAISE_TIMER);
        // Nothing to send while complete.
        assert_eq!(m.poll_probe(now, &rtt()), None);
        m.handle_timeout(raise - Duration::from_millis(1));
        assert_eq!(m.state(), State::SearchComplete);
        m.handle_timeout(raise);
        assert_eq!(m.state(), State::Searching);
        assert_eq!(m.search_bracket(), Some((1400, 1500)));
        // The path MTU grew meanwhile: the new search finds it.
        now = raise;
        drive(&mut m, &mut now, 1500);
        assert_eq!(m.plpmtu(), 1500);
        assert_eq!(m.state(), State::SearchComplete);
    }

    #[test]
    fn max_plpmtu_acked_completes_at_once_with_lsquic() {
        let mut m = machine(9000, SearchStrategy::lsquic());
        let mut now = Instant::now();
        let probes = drive(&mut m, &mut now, 9000);
        assert_eq!(m.plpmtu(), 9000);
        assert_eq!(probes, 2, "BASE, then MAX_PLPMTU");
    }

    #[test]
    fn black_hole_recovery() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let mut now = Instant::now();
        drive(&mut m, &mut now, 1500);
        assert_eq!(m.plpmtu(), 1500);
        while m.poll_event().is_some() {}
        // The path MTU drops to 1400: full-sized data is lost, small gets through.
        m.on_data_acked(200);
        assert!(!m.on_data_lost(1500));
        assert!(!m.on_data_lost(1500));
        assert!(m.on_data_lost(1500));
        assert_eq!(m.state(), State::Base);
        assert_eq!(m.plpmtu(), BASE_PLPMTU);
        assert_eq!(m.stats().black_holes, 1);
        assert_eq!(m.poll_event(), Some(DplpmtudEvent::PlpmtuChanged { from: 1500, to: 1200 }));
        drive(&mut m, &mut now, 1400);
        assert_eq!(m.state(), State::SearchComplete);
        assert_eq!(m.plpmtu(), 1400);
    }

    /// Losses of full-sized packets sent before the black hole was declared
    /// keep arriving for up to a round trip afterwards; they must not count
    /// the same black hole again (which would restart the new search).
    #[test]
    fn late_losses_of_packets_sent_before_a_black_hole_are_ignored() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let mut now = Instant::now();
        drive(&mut m, &mut now, 1500);
        m.on_data_acked(200);
        for _ in 0..MAX_PROBES {
            let _ = m.on_data_lost(1500);
        }
        assert_eq!((m.state(), m.plpmtu(), m.stats().black_holes), (State::Base, 1200, 1));
        // BASE confirmed, search under way with PLPMTU 1200.
        assert_eq!(m.poll_probe(now, &rtt()), Some(1200));
        m.on_probe_acked(now, 1200);
        assert_eq!(m.state(), State::Searching);
        m.on_data_acked(1200);
        // The rest of the old flight is declared lost now.
        for _ in 0..10 {
            assert!(!m.on_data_lost(1500));
        }
        assert_eq!(m.state(), State::Searching);
        assert_eq!(m.stats().black_holes, 1);
        assert_eq!(m.stats().stale_data_losses, 10);
        drive(&mut m, &mut now, 1400);
        assert_eq!((m.state(), m.plpmtu()), (State::SearchComplete, 1400));
        // Still stale above the new PLPMTU ...
        assert!(!m.on_data_lost(1500));
        assert_eq!(m.stats().black_holes, 1);
        // ... while losses at the PLPMTU in force are news: a second drop
        // (to 1300) is detected.
        m.on_data_acked(200);
        let detected = (0..MAX_PROBES).map(|_| m.on_data_lost(1400)).filter(|&d| d).count();
        assert_eq!(detected, 1);
        assert_eq!((m.state(), m.stats().black_holes), (State::Base, 2));
    }

    #[test]
    fn explicit_black_hole_from_searching() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let now = Instant::now();
        let _ = m.poll_probe(now, &rtt());
        m.on_probe_acked(now, 1200);
        let _ = m.poll_probe(now, &rtt());
        m.on_probe_acked(now, 1350);
        assert_eq!(m.plpmtu(), 1350);
        m.on_black_hole();
        assert_eq!((m.state(), m.plpmtu()), (State::Base, 1200));
        assert_eq!(m.probed_size(), Some(1200));
        assert!(!m.probe_in_flight());
    }

    #[test]
    fn disable_from_any_state() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let mut now = Instant::now();
        drive(&mut m, &mut now, 1450);
        m.disable();
        assert_eq!(m.state(), State::Disabled);
        assert_eq!(m.poll_timeout(), None);
        assert_eq!(m.poll_probe(now, &rtt()), None);
        m.on_black_hole();
        assert_eq!(m.state(), State::Disabled);
    }

    #[test]
    fn stale_acks_are_counted_not_used() {
        let mut m = machine(1500, SearchStrategy::Bisection);
        let now = Instant::now();
        let _ = m.poll_probe(now, &rtt());
        m.on_probe_acked(now, 1500);
        m.on_probe_lost(now, 1400);
        assert_eq!(m.state(), State::Base);
        assert_eq!(m.stats().stale_reports, 2);
    }

    #[test]
    fn ptb_rules_of_rfc8899_4_6_2() {
        let mut m = machine(9000, SearchStrategy::Bisection);
        let now = Instant::now();
        // Below MIN_PLPMTU: discarded.
        assert_eq!(m.on_packet_too_big(now, 500), PtbVerdict::IgnoredBelowMin);
        let _ = m.poll_probe(now, &rtt());
        m.on_probe_acked(now, 1200);
        assert_eq!(m.poll_probe(now, &rtt()), Some(5100));
        // >= PROBED_SIZE: inconsistent.
        assert_eq!(m.on_packet_too_big(now, 5100), PtbVerdict::IgnoredInconsistent);
        // PLPMTU < PTB < PROBED_SIZE: next search point, probe it at once.
        assert_eq!(m.on_packet_too_big(now, 1500), PtbVerdict::NextSearchPoint);
        assert_eq!(m.search_bracket(), Some((1200, 1500)));
        assert_eq!(m.poll_probe(now, &rtt()), Some(1500));
        m.on_probe_acked(now, 1500);
        assert_eq!(m.state(), State::SearchComplete);
        assert_eq!(m.plpmtu(), 1500);
        // BASE <= PTB < PLPMTU: black hole, back to BASE, PTB seeds the search.
        assert_eq!(m.on_packet_too_big(now, 1400), PtbVerdict::BlackHole);
        assert_eq!(m.state(), State::Base);
        let _ = m.poll_probe(now, &rtt());
        m.on_probe_acked(now, 1200);
        assert_eq!(m.search_bracket(), Some((1200, 1400)));
        assert_eq!(m.poll_probe(now, &rtt()), Some(1400));
        // PTB == PLPMTU while searching (no probe out): complete.
        m.on_probe_lost(now, 1400);
        let _ = m.poll_probe(now, &rtt());
        m.on_probe_lost(now, 1400);
        let _ = m.poll_probe(now, &rtt());
        m.on_probe_lost(now, 1400);
        assert_eq!(m.search_bracket(), Some((1200, 1399)));
        assert_eq!(m.on_packet_too_big(now, 1200), PtbVerdict::SearchCompleted);
        assert_eq!((m.state(), m.plpmtu()), (State::SearchComplete, 1200));
        // MIN <= PTB < BASE (with MIN < BASE): ERROR.
        let mut c = DplpmtudConfig::new(1500);
        c.min_plpmtu = 576;
        let mut m = Dplpmtud::new(c).expect("valid");
        assert_eq!(m.on_packet_too_big(now, 1000), PtbVerdict::IgnoredInconsistent);
        m.enable();
        let _ = m.poll_probe(now, &rtt());
        assert_eq!(m.on_packet_too_big(now, 1000), PtbVerdict::EnteredError);
        assert_eq!((m.state(), m.plpmtu()), (State::Error, 576));
        assert_eq!(m.on_packet_too_big(now, 1000), PtbVerdict::IgnoredInconsistent);
        assert_eq!(m.stats().ptb_used, 1);
        assert_eq!(m.stats().ptb_ignored, 2);
    }

    proptest! {
        #[test]
        fn exact_search_ends_on_every_pmtu(
            pmtu in BASE_PLPMTU..=9000u16,
            lsquic in any::<bool>(),
        ) {
            let strategy = if lsquic { SearchStrategy::lsquic_exact() } else { SearchStrategy::Bisection };
            let mut m = machine(9000, strategy);
            let mut now = Instant::now();
            let probes = drive(&mut m, &mut now, pmtu);
            prop_assert_eq!(m.state(), State::SearchComplete);
            prop_assert_eq!(m.plpmtu(), pmtu);
            // BASE + (13 sizes for a 7800-byte bracket + lsquic's max) * MAX_PROBES.
            prop_assert!(probes <= 1 + 14 * u64::from(MAX_PROBES), "{} probes", probes);
        }

        #[test]
        fn lsquic_search_is_safe_and_within_99_percent(pmtu in BASE_PLPMTU..=9000u16) {
            let mut m = machine(9000, SearchStrategy::lsquic());
            let mut now = Instant::now();
            drive(&mut m, &mut now, pmtu);
            prop_assert_eq!(m.state(), State::SearchComplete);
            prop_assert!(m.plpmtu() <= pmtu);
            prop_assert!(u32::from(m.plpmtu()) * 1000 >= u32::from(pmtu) * 990);
        }
    }
}
