//! The F-PMTUD prober (`px probe`'s core), sans-I/O.
//!
//! Round 1 sends one DF-clear probe sized to the local link MTU `M`. The
//! report gives `L`, the largest IP length that arrived for it: `M` if it
//! arrived whole (then the path MTU is `M`: done in one round trip), else the
//! largest fragment.
//!
//! Why `PMTU - 7 <= L <= PMTU`: every fragment crossed the rest of the path
//! whole, so `L <= PMTU`. A router with MTU `m` cuts non-final fragments to
//! `20 + 8 * floor((m - 20) / 8)` bytes, at least `m - 7`; by induction over
//! the hops, after the hop with the smallest MTU the largest fragment — and
//! also the first fragment, which carries the header the responder needs to
//! answer at all — is at least `PMTU - 7` (property-tested in
//! [`super::fragment`]).
//!
//! Round 2 removes the slack: DF-set confirmation probes of sizes
//! `min(L + 8, cap)` down to `L + 1`, then a control probe of size `L` (or
//! the largest size already confirmed), sent back to back. The largest size
//! confirmed is the path MTU. The control goes last so that its answer,
//! coming back over the same path, closes the round without waiting for a
//! timeout: every smaller, earlier probe that survived has been answered by
//! then. `L + 8` is one more than the brief's `L + 7`: a sentinel. If it is
//! confirmed, `L` was not within 7 bytes of the path MTU (a router that
//! splits into equal parts, or a kernel that reassembled and reported a
//! small fragment), and the prober hands over to DPLPMTUD with `L + 8` as a
//! known-good lower bound instead of returning a wrong answer.
//!
//! Guarantees:
//! * an `Exact` result is always a size that was delivered with DF set, or
//!   the full link MTU delivered whole, or `L` capped by the responder's own
//!   link MTU;
//! * replies with a wrong nonce, unknown probe ids, duplicates, malformed or
//!   implausible contents never change the state; each is counted;
//! * each round is retried at most `max_attempts` times, after a timeout
//!   derived from the RTT estimator's PTO and doubled per retry, so a
//!   measurement always ends (with a `Fallback` when nothing answers).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::wire::{self, ProbeKind, ProbeRepr, Reply, ReportRepr};
use crate::rtt::{ClassicRtt, RttEstimator, RttSample};

/// Prober settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProberConfig {
    /// MTU of the local outgoing link: the round-1 probe's IP length.
    pub link_mtu: u16,
    /// IP + UDP header bytes in a probe (28 for IPv4 without options).
    pub ip_overhead: u16,
    /// Transmissions per round before giving up (first try included).
    pub max_attempts: u8,
    /// Run the DF-set confirmation round (exact result) or stop at `L`.
    pub refine: bool,
    /// Smallest round timeout, whatever the RTT estimate says.
    pub min_timeout: Duration,
    /// Largest round timeout after backoff.
    pub max_timeout: Duration,
    /// Extra wait after the control probe's answer for reordered answers.
    pub settle: Duration,
    /// Send legacy `FPMT` probes (for the reference responder) instead of
    /// extended ones. Implies `accept_legacy`.
    pub legacy_probes: bool,
    /// Accept 4-byte legacy replies (no nonce: anyone on the path or who
    /// guesses the port can forge them; round 2 still checks the result).
    pub accept_legacy: bool,
}

impl ProberConfig {
    /// Defaults for a link of `link_mtu`: IPv4, 3 attempts per round,
    /// refinement on, timeouts between 10 ms and 10 s, extended format only.
    #[must_use]
    pub fn new(link_mtu: u16) -> Self {
        Self {
            link_mtu,
            ip_overhead: 28,
            max_attempts: 3,
            refine: true,
            min_timeout: Duration::from_millis(10),
            max_timeout: Duration::from_secs(10),
            settle: Duration::ZERO,
            legacy_probes: false,
            accept_legacy: false,
        }
    }

    /// Smallest link MTU that fits a probe: the 68 bytes every IPv4 path
    /// carries, and room for the extended header.
    #[must_use]
    pub fn min_link_mtu(&self) -> u16 {
        let header = u16::try_from(wire::PROBE_MIN_LEN).unwrap_or(u16::MAX);
        self.ip_overhead.saturating_add(header).max(68)
    }
}

/// Why a [`ProberConfig`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProberConfigError {
    /// The link MTU cannot hold a probe.
    #[error("link MTU {link_mtu} is below the smallest probe ({min} bytes)")]
    LinkMtuTooSmall {
        /// Configured link MTU.
        link_mtu: u16,
        /// Smallest usable.
        min: u16,
    },
    /// Zero attempts would never send anything.
    #[error("max_attempts must be at least 1")]
    ZeroAttempts,
}

/// A probe for the driver to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTransmit {
    /// Probe id (also in the payload, for extended probes).
    pub probe_id: u32,
    /// IP total length to send; the UDP payload is `ip_len - ip_overhead`.
    pub ip_len: u16,
    /// Set the IP DF bit (round 2) or clear it (round 1).
    pub dont_fragment: bool,
    /// UDP payload.
    pub payload: Vec<u8>,
}

/// Where the measurement is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Round 1: DF-clear probe of the link MTU.
    Discover,
    /// Round 2: DF-set confirmation probes.
    Confirm,
    /// Finished; see [`Prober::result`].
    Done,
}

/// How an exact answer was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The link-MTU probe arrived whole.
    Unfragmented,
    /// The largest fragment equals the responder's link MTU, which bounds
    /// the path.
    ResponderLinkMtu,
    /// Largest fragment, made exact by DF-set confirmation.
    Refined,
}

/// Why F-PMTUD hands over to DPLPMTUD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    /// No acceptable answer to any round-1 probe (fragments filtered, IPv6,
    /// no responder, all lost).
    NoReply,
    /// Round 1 was answered but no confirmation probe ever was.
    ConfirmationFailed,
    /// Even `L + 8` was confirmed: `L` was not within 7 bytes of the path MTU.
    EstimateTooLow,
}

/// The answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The exact path MTU.
    Exact {
        /// Path MTU (IP total length).
        pmtu: u16,
        /// How it was found.
        method: Method,
    },
    /// Round 2 ended without deciding every size: the path carries `low`
    /// (delivered with DF set) and no more than `high`, but the size just
    /// above `low` never left the host (the local stack refused it) or was
    /// never probed, so `low` is only a lower bound.
    Range {
        /// Largest size confirmed with DF set.
        low: u16,
        /// Largest size the path may carry.
        high: u16,
    },
    /// Largest fragment only (refinement disabled): `pmtu - 7 <= pmtu' <= pmtu`.
    Estimate {
        /// The largest fragment's IP length.
        pmtu: u16,
    },
    /// Run DPLPMTUD instead, from `lower_bound` if known (a size the path
    /// is known to carry).
    Fallback {
        /// Why.
        reason: FallbackReason,
        /// A size known to pass, if any.
        lower_bound: Option<u16>,
    },
}

/// Result of a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FpmtudResult {
    /// The answer.
    pub outcome: Outcome,
    /// `L`, the largest IP length reported in round 1.
    pub estimate: Option<u16>,
    /// Rounds transmitted (each attempt of each round is one round trip).
    pub round_trips: u32,
    /// Probes sent.
    pub probes_sent: u32,
    /// IP bytes of those probes.
    pub bytes_sent: u64,
    /// From the first probe to the decision.
    pub elapsed: Duration,
    /// Some answer came in the legacy format.
    pub legacy_replies: bool,
}

impl FpmtudResult {
    /// The path MTU for `Exact` and `Estimate` outcomes, the lower bound
    /// of a `Range`.
    #[must_use]
    pub fn pmtu(&self) -> Option<u16> {
        match self.outcome {
            Outcome::Exact { pmtu, .. } | Outcome::Estimate { pmtu } | Outcome::Range { low: pmtu, .. } => Some(pmtu),
            Outcome::Fallback { .. } => None,
        }
    }
}

/// What [`Prober::handle_reply`] did with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyVerdict {
    /// Used.
    Accepted,
    /// Not a reply in any format.
    Malformed,
    /// Extended report whose nonce is not ours (blind or spoofed).
    WrongNonce,
    /// Report for a probe id we never sent.
    UnknownProbe,
    /// Second answer for the same probe.
    Duplicate,
    /// Contents that cannot be true (larger than the probe, wrong kind,
    /// confirmation that arrived fragmented).
    Implausible,
    /// Legacy reply while legacy replies are not accepted.
    LegacyRefused,
    /// A valid answer that came after its round was over; recorded only.
    Late,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProberStats {
    /// Datagrams handed to `handle_reply`.
    pub replies: u64,
    /// Answers used.
    pub accepted: u64,
    /// Malformed datagrams.
    pub malformed: u64,
    /// Reports with a wrong nonce.
    pub wrong_nonce: u64,
    /// Reports for unknown probe ids.
    pub unknown_probe: u64,
    /// Duplicate answers.
    pub duplicates: u64,
    /// Implausible answers.
    pub implausible: u64,
    /// Legacy replies refused.
    pub legacy_refused: u64,
    /// Answers after their round ended.
    pub late: u64,
    /// Round-1 answers whose `L` differed from an earlier one.
    pub disagreements: u64,
}

#[derive(Debug, Clone, Copy)]
struct SentProbe {
    id: u32,
    ip_len: u16,
    kind: ProbeKind,
    sent_at: Instant,
    answered: bool,
    /// The local stack refused it: it never left the host.
    refused: bool,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u32,
    ip_len: u16,
    kind: ProbeKind,
}

/// One F-PMTUD measurement toward one responder.
#[derive(Debug, Clone)]
pub struct Prober<R: RttEstimator = ClassicRtt> {
    config: ProberConfig,
    nonce: u64,
    rtt: R,
    phase: Phase,
    started: Option<Instant>,
    pending: VecDeque<Pending>,
    sent: Vec<SentProbe>,
    next_id: u32,
    /// Transmissions of the current round so far.
    attempt: u8,
    rounds: u32,
    bytes_sent: u64,
    deadline: Option<Instant>,
    settle_deadline: Option<Instant>,
    estimate: Option<u16>,
    responder_mtu: Option<u16>,
    /// Largest size round 2 probes.
    top: u16,
    confirmed: Option<u16>,
    /// Probe id of the current round-2 attempt's control probe.
    control_id: Option<u32>,
    legacy_replies: bool,
    result: Option<FpmtudResult>,
    stats: ProberStats,
}

impl<R: RttEstimator> Prober<R> {
    /// A measurement with secret `nonce` (take it from a CSPRNG in real use,
    /// from a seeded RNG in simulation) whose timeouts come from `rtt`.
    pub fn new(config: ProberConfig, nonce: u64, rtt: R) -> Result<Self, ProberConfigError> {
        let min = config.min_link_mtu();
        if config.link_mtu < min {
            return Err(ProberConfigError::LinkMtuTooSmall { link_mtu: config.link_mtu, min });
        }
        if config.max_attempts == 0 {
            return Err(ProberConfigError::ZeroAttempts);
        }
        Ok(Self {
            top: config.link_mtu,
            config,
            nonce,
            rtt,
            phase: Phase::Discover,
            started: None,
            pending: VecDeque::new(),
            sent: Vec::new(),
            next_id: 1,
            attempt: 0,
            rounds: 0,
            bytes_sent: 0,
            deadline: None,
            settle_deadline: None,
            estimate: None,
            responder_mtu: None,
            confirmed: None,
            control_id: None,
            legacy_replies: false,
            result: None,
            stats: ProberStats::default(),
        })
    }

    /// Current phase.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether the measurement has ended.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The result, once done.
    #[must_use]
    pub fn result(&self) -> Option<&FpmtudResult> {
        self.result.as_ref()
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> &ProberStats {
        &self.stats
    }

    /// `L` so far.
    #[must_use]
    pub fn estimate(&self) -> Option<u16> {
        self.estimate
    }

    /// The RTT estimator (fed with one sample per first answer).
    #[must_use]
    pub fn rtt(&self) -> &R {
        &self.rtt
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ProberConfig {
        &self.config
    }

    /// Next probe to send. Call until `None` after creating the prober and
    /// after every `handle_reply`/`handle_timeout`; the first call starts
    /// the measurement's clock.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<ProbeTransmit> {
        if self.phase == Phase::Done {
            return None;
        }
        if self.started.is_none() {
            self.started = Some(now);
            self.queue_round();
        }
        // Every queued size is at least min_link_mtu() (new() checks the link
        // MTU, answers below it are implausible), so emit cannot fail; if it
        // ever did, the probe is skipped rather than sent truncated, and the
        // round timer is still armed below.
        let (p, payload) = loop {
            let Some(p) = self.pending.pop_front() else {
                if self.deadline.is_none() && !self.sent.is_empty() {
                    self.deadline = Some(now + self.round_timeout());
                }
                return None;
            };
            if let Some(payload) = self.build_payload(p) {
                break (p, payload);
            }
        };
        self.sent.push(SentProbe {
            id: p.id,
            ip_len: p.ip_len,
            kind: p.kind,
            sent_at: now,
            answered: false,
            refused: false,
        });
        self.rtt.on_packet_sent(u64::from(p.id));
        self.bytes_sent += u64::from(p.ip_len);
        if self.pending.is_empty() {
            self.deadline = Some(now + self.round_timeout());
        }
        Some(ProbeTransmit { probe_id: p.id, ip_len: p.ip_len, dont_fragment: p.kind == ProbeKind::Confirm, payload })
    }

    /// The probe last returned by `poll_transmit` never left the host (the
    /// local stack refused it, e.g. `EMSGSIZE`): it proves nothing about
    /// the path, so no answer can be concluded from its silence.
    pub fn on_local_refused(&mut self) {
        if let Some(last) = self.sent.last_mut()
            && !last.refused
        {
            last.refused = true;
            self.bytes_sent = self.bytes_sent.saturating_sub(u64::from(last.ip_len));
        }
    }

    fn build_payload(&self, p: Pending) -> Option<Vec<u8>> {
        let len = usize::from(p.ip_len.saturating_sub(self.config.ip_overhead));
        let mut payload = vec![0u8; len];
        let written = if self.config.legacy_probes {
            wire::emit_legacy_probe(&mut payload)
        } else {
            ProbeRepr { kind: p.kind, nonce: self.nonce, probe_id: p.id, ip_len: p.ip_len }.emit(&mut payload)
        };
        written.ok().map(|_| payload)
    }

    /// Earliest instant at which `handle_timeout` has work.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.deadline, self.settle_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires the round timeout (retry or give up) and the settle timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.settle_deadline.is_some_and(|d| d <= now) {
            self.settle_deadline = None;
            self.conclude_confirm(now);
            return;
        }
        if self.deadline.is_none_or(|d| d > now) {
            return;
        }
        self.deadline = None;
        match self.phase {
            Phase::Discover if self.attempt < self.config.max_attempts => self.queue_round(),
            Phase::Discover => {
                self.finish(now, Outcome::Fallback { reason: FallbackReason::NoReply, lower_bound: None })
            }
            Phase::Confirm if self.attempt < self.config.max_attempts => {
                if self.confirm_floor() >= self.top {
                    self.conclude_confirm(now);
                } else {
                    self.queue_round();
                }
            }
            Phase::Confirm => self.conclude_confirm(now),
            Phase::Done => {}
        }
    }

    /// Handles one UDP payload received from the responder's address.
    pub fn handle_reply(&mut self, now: Instant, payload: &[u8]) -> ReplyVerdict {
        self.stats.replies += 1;
        let verdict = match wire::parse_reply(payload) {
            Err(_) => ReplyVerdict::Malformed,
            Ok(Reply::Legacy(v)) => {
                if self.config.accept_legacy || self.config.legacy_probes {
                    self.on_legacy(now, v)
                } else {
                    ReplyVerdict::LegacyRefused
                }
            }
            Ok(Reply::Report(r)) => self.on_report(now, &r),
        };
        let c = match verdict {
            ReplyVerdict::Accepted => &mut self.stats.accepted,
            ReplyVerdict::Malformed => &mut self.stats.malformed,
            ReplyVerdict::WrongNonce => &mut self.stats.wrong_nonce,
            ReplyVerdict::UnknownProbe => &mut self.stats.unknown_probe,
            ReplyVerdict::Duplicate => &mut self.stats.duplicates,
            ReplyVerdict::Implausible => &mut self.stats.implausible,
            ReplyVerdict::LegacyRefused => &mut self.stats.legacy_refused,
            ReplyVerdict::Late => &mut self.stats.late,
        };
        *c += 1;
        verdict
    }

    fn on_report(&mut self, now: Instant, r: &ReportRepr<'_>) -> ReplyVerdict {
        if r.nonce != self.nonce {
            return ReplyVerdict::WrongNonce;
        }
        let Some(idx) = self.sent.iter().position(|s| s.id == r.probe_id) else {
            return ReplyVerdict::UnknownProbe;
        };
        let sent = self.sent[idx];
        if sent.answered {
            return ReplyVerdict::Duplicate;
        }
        let largest = r.fragments.iter().map(|f| f.ip_len).chain([r.largest_ip_len]).max().unwrap_or(r.largest_ip_len);
        let plausible = r.confirm == (sent.kind == ProbeKind::Confirm)
            && r.probe_ip_len == sent.ip_len
            && largest <= sent.ip_len
            && largest >= self.config.min_link_mtu();
        if !plausible {
            return ReplyVerdict::Implausible;
        }
        self.mark_answered(now, idx);
        if r.link_mtu >= 68 {
            self.responder_mtu = Some(r.link_mtu);
        }
        match sent.kind {
            ProbeKind::Probe => self.on_discover_answer(now, largest),
            ProbeKind::Confirm => {
                let whole = r.reassembled && !r.fragmented && largest == sent.ip_len;
                if !whole {
                    // DF was ignored or cleared on the way: not a confirmation.
                    return ReplyVerdict::Implausible;
                }
                self.on_confirm_answer(now, sent)
            }
        }
    }

    fn on_legacy(&mut self, now: Instant, v: u32) -> ReplyVerdict {
        self.legacy_replies = true;
        let Ok(v) = u16::try_from(v) else {
            return ReplyVerdict::Implausible;
        };
        // Every IPv4 path carries 68 bytes, so no honest answer is smaller
        // than the smallest probe.
        if v < self.config.min_link_mtu() {
            return ReplyVerdict::Implausible;
        }
        match self.phase {
            Phase::Discover => {
                // No probe id: it answers the latest round-1 probe.
                let Some(idx) = self.sent.iter().rposition(|s| s.kind == ProbeKind::Probe && !s.answered) else {
                    return ReplyVerdict::Duplicate;
                };
                if v > self.sent[idx].ip_len {
                    return ReplyVerdict::Implausible;
                }
                self.mark_answered(now, idx);
                self.on_discover_answer(now, v)
            }
            Phase::Confirm => {
                // A confirmation probe arrived whole: the value is its size.
                let Some(idx) =
                    self.sent.iter().rposition(|s| s.kind == ProbeKind::Confirm && !s.answered && s.ip_len == v)
                else {
                    return ReplyVerdict::Late;
                };
                self.mark_answered(now, idx);
                let sent = self.sent[idx];
                self.on_confirm_answer(now, sent)
            }
            Phase::Done => ReplyVerdict::Late,
        }
    }

    fn mark_answered(&mut self, now: Instant, idx: usize) {
        let s = &mut self.sent[idx];
        s.answered = true;
        self.rtt.on_ack(RttSample {
            latest_rtt: now.saturating_duration_since(s.sent_at),
            ack_delay: Duration::ZERO,
            acked_packet_number: u64::from(s.id),
        });
    }

    fn on_discover_answer(&mut self, now: Instant, l: u16) -> ReplyVerdict {
        if let Some(prev) = self.estimate
            && prev != l
        {
            self.stats.disagreements += 1;
        }
        // Every reported size crossed the path, so the largest is the best
        // evidence.
        let l = self.estimate.map_or(l, |prev| prev.max(l));
        self.estimate = Some(l);
        if self.phase != Phase::Discover {
            return ReplyVerdict::Late;
        }
        let cap = self.cap();
        if l >= self.config.link_mtu {
            self.finish(now, Outcome::Exact { pmtu: self.config.link_mtu, method: Method::Unfragmented });
        } else if l >= cap {
            self.finish(now, Outcome::Exact { pmtu: cap, method: Method::ResponderLinkMtu });
        } else if !self.config.refine {
            self.finish(now, Outcome::Estimate { pmtu: l });
        } else {
            self.phase = Phase::Confirm;
            self.attempt = 0;
            self.deadline = None;
            self.pending.clear();
            self.top = l.saturating_add(8).min(cap);
            self.queue_round();
        }
        ReplyVerdict::Accepted
    }

    fn on_confirm_answer(&mut self, now: Instant, sent: SentProbe) -> ReplyVerdict {
        self.confirmed = Some(self.confirmed.map_or(sent.ip_len, |c| c.max(sent.ip_len)));
        if self.phase != Phase::Confirm {
            return ReplyVerdict::Late;
        }
        if self.confirmed == Some(self.top) {
            self.conclude_confirm(now);
        } else if self.control_id == Some(sent.id) {
            if self.config.settle.is_zero() {
                self.conclude_confirm(now);
            } else {
                self.settle_deadline = Some(now + self.config.settle);
            }
        }
        ReplyVerdict::Accepted
    }

    /// Largest size known to pass in round 2: `L`, or a confirmed size.
    fn confirm_floor(&self) -> u16 {
        let l = self.estimate.unwrap_or(0);
        self.confirmed.map_or(l, |c| c.max(l))
    }

    /// Upper bound on the path MTU: the link MTU, and the responder's link
    /// MTU when it is consistent with what arrived.
    fn cap(&self) -> u16 {
        let l = self.estimate.unwrap_or(0);
        match self.responder_mtu {
            Some(m) if m >= l => m.min(self.config.link_mtu),
            _ => self.config.link_mtu,
        }
    }

    fn conclude_confirm(&mut self, now: Instant) {
        if self.phase != Phase::Confirm {
            return;
        }
        let outcome = match self.confirmed {
            Some(c) if c >= self.top && self.top < self.cap() => {
                Outcome::Fallback { reason: FallbackReason::EstimateTooLow, lower_bound: Some(c) }
            }
            Some(c) => self.refined(c),
            None => Outcome::Fallback { reason: FallbackReason::ConfirmationFailed, lower_bound: self.estimate },
        };
        self.finish(now, outcome);
    }

    /// The answer of round 2 when `c` is the largest size confirmed: exact
    /// only when nothing larger can pass (the cap) or a DF-set probe of
    /// `c + 1` left the host and went unanswered while a smaller one that
    /// followed it came back; otherwise the range up to the smallest size
    /// that went unanswered.
    fn refined(&self, c: u16) -> Outcome {
        let cap = self.cap();
        let too_big = |size: u16| {
            self.sent.iter().any(|s| s.kind == ProbeKind::Confirm && s.ip_len == size && !s.refused && !s.answered)
        };
        if c >= cap || too_big(c + 1) {
            return Outcome::Exact { pmtu: c, method: Method::Refined };
        }
        let high = self
            .sent
            .iter()
            .filter(|s| s.kind == ProbeKind::Confirm && s.ip_len > c && !s.refused && !s.answered)
            .map(|s| s.ip_len - 1)
            .min()
            .unwrap_or(cap)
            .min(cap);
        Outcome::Range { low: c, high }
    }

    fn queue_round(&mut self) {
        self.attempt = self.attempt.saturating_add(1);
        self.rounds += 1;
        match self.phase {
            Phase::Discover => {
                let id = self.take_id();
                self.pending.push_back(Pending { id, ip_len: self.config.link_mtu, kind: ProbeKind::Probe });
            }
            Phase::Confirm => {
                let floor = self.confirm_floor();
                let mut size = self.top;
                while size > floor {
                    let id = self.take_id();
                    self.pending.push_back(Pending { id, ip_len: size, kind: ProbeKind::Confirm });
                    size -= 1;
                }
                // The control goes last: its answer closes the round.
                let id = self.take_id();
                self.control_id = Some(id);
                self.pending.push_back(Pending { id, ip_len: floor, kind: ProbeKind::Confirm });
            }
            Phase::Done => {}
        }
    }

    fn take_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    /// PTO of the estimator (no ACK delay: the responder answers at once),
    /// within the configured bounds, doubled per retry (RFC 9002 §6.2.1
    /// backoff).
    fn round_timeout(&self) -> Duration {
        let base = self.rtt.pto(Duration::ZERO).max(self.config.min_timeout);
        let shift = u32::from(self.attempt.saturating_sub(1)).min(16);
        base.saturating_mul(1 << shift).min(self.config.max_timeout)
    }

    fn finish(&mut self, now: Instant, outcome: Outcome) {
        self.phase = Phase::Done;
        self.deadline = None;
        self.settle_deadline = None;
        self.pending.clear();
        self.result = Some(FpmtudResult {
            outcome,
            estimate: self.estimate,
            round_trips: self.rounds,
            probes_sent: u32::try_from(self.sent.iter().filter(|s| !s.refused).count()).unwrap_or(u32::MAX),
            bytes_sent: self.bytes_sent,
            elapsed: self.started.map_or(Duration::ZERO, |s| now.saturating_duration_since(s)),
            legacy_replies: self.legacy_replies,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fpmtud::wire::{FragmentRecord, Fragments, Request, parse_request};

    const NONCE: u64 = 0x5EED_0000_1234_5678;
    const RTT: Duration = Duration::from_millis(20);

    fn prober(link: u16) -> Prober {
        Prober::new(ProberConfig::new(link), NONCE, ClassicRtt::default()).expect("valid")
    }

    #[allow(clippy::too_many_arguments)]
    fn report(
        nonce: u64,
        id: u32,
        confirm: bool,
        reassembled: bool,
        fragmented: bool,
        probe_ip_len: u16,
        largest: u16,
        link_mtu: u16,
        recs: &[FragmentRecord],
    ) -> Vec<u8> {
        let r = ReportRepr {
            nonce,
            probe_id: id,
            confirm,
            reassembled,
            fragmented,
            truncated: false,
            link_mtu,
            probe_ip_len,
            largest_ip_len: largest,
            fragments: Fragments::Records(recs),
        };
        let mut buf = vec![0; r.buffer_len()];
        r.emit(&mut buf).expect("fits");
        buf
    }

    /// Answer to a round-1 probe that arrived as fragments, largest `l`.
    fn fragmented(t: &ProbeTransmit, l: u16) -> Vec<u8> {
        report(NONCE, t.probe_id, false, true, true, t.ip_len, l, 0, &[])
    }

    /// Answer to a confirmation probe that arrived whole.
    fn confirmed(t: &ProbeTransmit) -> Vec<u8> {
        report(NONCE, t.probe_id, true, true, false, t.ip_len, t.ip_len, 0, &[])
    }

    fn drain(p: &mut Prober, now: Instant) -> Vec<ProbeTransmit> {
        std::iter::from_fn(|| p.poll_transmit(now)).collect()
    }

    /// Runs round 1 with answer `l` at t0 + RTT; returns round-2 probes.
    fn to_round_two(p: &mut Prober, t0: Instant, l: u16) -> Vec<ProbeTransmit> {
        let r1 = drain(p, t0);
        assert_eq!(r1.len(), 1);
        assert_eq!(p.handle_reply(t0 + RTT, &fragmented(&r1[0], l)), ReplyVerdict::Accepted);
        assert_eq!(p.phase(), Phase::Confirm);
        drain(p, t0 + RTT)
    }

    fn outcome(p: &Prober) -> Outcome {
        p.result().expect("done").outcome
    }

    #[test]
    fn config_validation() {
        let e = Prober::new(ProberConfig::new(60), 1, ClassicRtt::default()).err();
        assert_eq!(e, Some(ProberConfigError::LinkMtuTooSmall { link_mtu: 60, min: 68 }));
        let mut c = ProberConfig::new(1500);
        c.max_attempts = 0;
        assert_eq!(Prober::new(c, 1, ClassicRtt::default()).err(), Some(ProberConfigError::ZeroAttempts));
    }

    #[test]
    fn unfragmented_probe_is_exact_in_one_round_trip() {
        let mut p = prober(1500);
        let t0 = Instant::now();
        let probes = drain(&mut p, t0);
        assert_eq!(probes.len(), 1);
        let t = &probes[0];
        assert_eq!((t.ip_len, t.dont_fragment, t.payload.len()), (1500, false, 1472));
        assert_eq!(
            parse_request(&t.payload),
            Ok(Request::Probe(ProbeRepr { kind: ProbeKind::Probe, nonce: NONCE, probe_id: t.probe_id, ip_len: 1500 }))
        );
        // Timeout: PTO of the initial RTT, 333 + 4 * 166.5 = 999 ms.
        assert_eq!(p.poll_timeout(), Some(t0 + Duration::from_millis(999)));
        let whole = report(NONCE, t.probe_id, false, true, false, 1500, 1500, 9000, &[]);
        assert_eq!(p.handle_reply(t0 + RTT, &whole), ReplyVerdict::Accepted);
        let r = p.result().expect("done");
        assert_eq!(r.outcome, Outcome::Exact { pmtu: 1500, method: Method::Unfragmented });
        assert_eq!((r.round_trips, r.probes_sent, r.bytes_sent), (1, 1, 1500));
        assert_eq!(r.elapsed, RTT);
        assert_eq!(p.poll_transmit(t0 + RTT), None);
        assert_eq!(p.poll_timeout(), None);
    }

    #[test]
    fn refinement_removes_the_alignment_slack() {
        // True path MTU 1403: a 1403-MTU hop makes 1396-byte fragments.
        let mut p = prober(1500);
        let t0 = Instant::now();
        let r2 = to_round_two(&mut p, t0, 1396);
        let sizes: Vec<u16> = r2.iter().map(|t| t.ip_len).collect();
        assert_eq!(sizes, [1404, 1403, 1402, 1401, 1400, 1399, 1398, 1397, 1396]);
        assert!(r2.iter().all(|t| t.dont_fragment));
        // Round-2 timeout follows the measured RTT: PTO = 20 + 4 * 10 = 60 ms.
        assert_eq!(p.poll_timeout(), Some(t0 + RTT + Duration::from_millis(60)));
        // The path drops 1404; the others come back in order, control last.
        let t1 = t0 + RTT * 2;
        for t in &r2[1..] {
            assert_eq!(p.handle_reply(t1, &confirmed(t)), ReplyVerdict::Accepted);
        }
        let r = p.result().expect("done");
        assert_eq!(r.outcome, Outcome::Exact { pmtu: 1403, method: Method::Refined });
        assert_eq!((r.round_trips, r.probes_sent), (2, 10));
        assert_eq!(r.estimate, Some(1396));
        assert_eq!(r.elapsed, RTT * 2);
    }

    #[test]
    fn a_size_that_never_left_the_host_leaves_a_range_not_an_exact_answer() {
        // 1500 -> 1499 -> 1500: L = 1492, round 2 probes 1500 .. 1493 and
        // the control 1492. The ICMP "fragmentation needed" drawn by 1500
        // made the local stack refuse the next send (1499): it never left.
        let mut p = prober(1500);
        let t0 = Instant::now();
        let r1 = drain(&mut p, t0);
        p.handle_reply(t0 + RTT, &fragmented(&r1[0], 1492));
        let mut r2 = Vec::new();
        while let Some(t) = p.poll_transmit(t0 + RTT) {
            if t.ip_len == 1499 {
                p.on_local_refused();
            } else {
                r2.push(t);
            }
        }
        for t in r2.iter().filter(|t| t.ip_len <= 1499) {
            p.handle_reply(t0 + RTT * 2, &confirmed(t));
        }
        let r = p.result().expect("done");
        assert_eq!(r.outcome, Outcome::Range { low: 1498, high: 1499 });
        assert_eq!((r.pmtu(), r.probes_sent), (Some(1498), 9));
    }

    #[test]
    fn aligned_fragment_is_confirmed_as_exact() {
        let mut p = prober(9000);
        let t0 = Instant::now();
        let r2 = to_round_two(&mut p, t0, 1396);
        // Only the control (1396) fits.
        let control = r2.last().expect("control");
        assert_eq!(control.ip_len, 1396);
        assert_eq!(p.handle_reply(t0 + RTT * 2, &confirmed(control)), ReplyVerdict::Accepted);
        assert_eq!(outcome(&p), Outcome::Exact { pmtu: 1396, method: Method::Refined });
    }

    #[test]
    fn sentinel_catches_an_estimate_that_is_too_low() {
        // A router that splits 1500 into two equal 760-byte halves: L = 760,
        // but the path carries 1400.
        let mut p = prober(1500);
        let t0 = Instant::now();
        let r2 = to_round_two(&mut p, t0, 760);
        assert_eq!(r2[0].ip_len, 768);
        assert_eq!(p.handle_reply(t0 + RTT * 2, &confirmed(&r2[0])), ReplyVerdict::Accepted);
        assert_eq!(outcome(&p), Outcome::Fallback { reason: FallbackReason::EstimateTooLow, lower_bound: Some(768) });
    }

    #[test]
    fn responder_link_mtu_bounds_the_window() {
        let mut p = prober(9000);
        let t0 = Instant::now();
        let r1 = drain(&mut p, t0);
        let rep = report(NONCE, r1[0].probe_id, false, true, true, 9000, 1396, 1400, &[]);
        assert_eq!(p.handle_reply(t0 + RTT, &rep), ReplyVerdict::Accepted);
        let r2 = drain(&mut p, t0 + RTT);
        let sizes: Vec<u16> = r2.iter().map(|t| t.ip_len).collect();
        assert_eq!(sizes, [1400, 1399, 1398, 1397, 1396]);
        // The top of a capped window is exact, not "too low".
        assert_eq!(p.handle_reply(t0 + RTT * 2, &confirmed(&r2[0])), ReplyVerdict::Accepted);
        assert_eq!(outcome(&p), Outcome::Exact { pmtu: 1400, method: Method::Refined });
        // A fragment as large as the responder's link: exact without round 2.
        let mut p = prober(9000);
        let r1 = drain(&mut p, t0);
        let rep = report(NONCE, r1[0].probe_id, false, true, true, 9000, 1500, 1500, &[]);
        p.handle_reply(t0 + RTT, &rep);
        assert_eq!(outcome(&p), Outcome::Exact { pmtu: 1500, method: Method::ResponderLinkMtu });
        assert_eq!(p.result().expect("done").round_trips, 1);
    }

    #[test]
    fn spoofed_nonce_and_unknown_ids_are_ignored() {
        let mut p = prober(1500);
        let t0 = Instant::now();
        let r1 = drain(&mut p, t0);
        let id = r1[0].probe_id;
        let spoof = report(NONCE ^ 1, id, false, true, false, 1500, 1500, 0, &[]);
        assert_eq!(p.handle_reply(t0, &spoof), ReplyVerdict::WrongNonce);
        let unknown = report(NONCE, id + 100, false, true, false, 1500, 1500, 0, &[]);
        assert_eq!(p.handle_reply(t0, &unknown), ReplyVerdict::UnknownProbe);
        assert_eq!(p.handle_reply(t0, b"junk"), ReplyVerdict::LegacyRefused);
        assert_eq!(p.handle_reply(t0, b"not a reply at all"), ReplyVerdict::Malformed);
        assert_eq!(p.phase(), Phase::Discover);
        assert_eq!(p.estimate(), None);
        let s = *p.stats();
        assert_eq!((s.wrong_nonce, s.unknown_probe, s.legacy_refused, s.malformed), (1, 1, 1, 1));
        assert_eq!(p.handle_reply(t0 + RTT, &fragmented(&r1[0], 1396)), ReplyVerdict::Accepted);
    }

    #[test]
    fn duplicate_replies_are_counted_once_used() {
        let mut p = prober(1500);
        let t0 = Instant::now();
        let r2 = to_round_two(&mut p, t0, 1396);
        let a = confirmed(&r2[3]); // 1401
        assert_eq!(p.handle_reply(t0 + RTT * 2, &a), ReplyVerdict::Accepted);
        assert_eq!(p.handle_reply(t0 + RTT * 2, &a), ReplyVerdict::Duplicate);
        assert_eq!(p.stats().duplicates, 1);
        assert_eq!(p.phase(), Phase::Confirm);
    }

    #[test]
    fn disagreeing_reports_are_counted_and_the_largest_wins() {
        let mut p = prober(1500);
        let t0 = Instant::now();
        let first = drain(&mut p, t0);
        // Round-1 reply lost: retry after the timeout.
        let t1 = p.poll_timeout().expect("timer");
        p.handle_timeout(t1);
        let retry = drain(&mut p, t1);
        assert_eq!(retry.len(), 1);
        assert_ne!(retry[0].probe_id, first[0].probe_id);
        // Backoff: the second timeout is twice the first.
        assert_eq!(p.poll_timeout(), Some(t1 + (t1 - t0) * 2));
        // The retry's report arrives first, then the original's, disagreeing.
        assert_eq!(p.handle_reply(t1 + RTT, &fragmented(&retry[0], 1388)), ReplyVerdict::Accepted);
        assert_eq!(p.handle_reply(t1 + RTT, &fragmented(&first[0], 1396)), ReplyVerdict::Late);
        assert_eq!(p.stats().disagreements, 1);
        assert_eq!(p.estimate(), Some(1396));
        assert_eq!(p.result(), None);
    }

    #[test]
    fn partial_report_from_lost_fragments_still_refines() {
        // Only the first fragment arrived; the datagram never reassembled.
        let mut p = prober(1500);
        let t0 = Instant::now();
        let r1 = drain(&mut p, t0);
        let recs = [FragmentRecord { offset: 0, ip_len: 1396, more_fragments: true }];
        let rep = report(NONCE, r1[0].probe_id, false, false, true, 1500, 1396, 0, &recs);
        assert_eq!(p.handle_reply(t0 + RTT, &rep), ReplyVerdict::Accepted);
        assert_eq!(p.estimate(), Some(1396));
        let r2 = drain(&mut p, t0 + RTT);
        for t in r2.iter().filter(|t| t.ip_len <= 1400) {
            p.handle_reply(t0 + RTT * 2, &confirmed(t));
        }
        assert_eq!(p.result().and_then(FpmtudResult::pmtu), Some(1400));
    }

    #[test]
    fn no_reply_at_all_falls_back_after_bounded_retries() {
        let mut p = prober(1500);
        let t0 = Instant::now();
        let mut now = t0;
        let mut sent = 0;
        while !p.is_done() {
            sent += drain(&mut p, now).len();
            now = p.poll_timeout().expect("timer while not done");
            p.handle_timeout(now);
            assert!(sent <= 3);
        }
        let r = p.result().expect("done");
        assert_eq!(r.outcome, Outcome::Fallback { reason: FallbackReason::NoReply, lower_bound: None });
        assert_eq!((r.round_trips, r.probes_sent), (3, 3));
        // 999 + 1998 + 3996 ms.
        assert_eq!(r.elapsed, Duration::from_millis(6993));
    }

    #[test]
    fn lost_control_retries_round_two_from_what_was_confirmed() {
        let mut p = prober(1500);
        let t0 = Instant::now();
        let r2 = to_round_two(&mut p, t0, 1396);
        // Only 1401 comes back; the control is lost.
        p.handle_reply(t0 + RTT * 2, &confirmed(&r2[3]));
        let t1 = p.poll_timeout().expect("timer");
        p.handle_timeout(t1);
        let again = drain(&mut p, t1);
        let sizes: Vec<u16> = again.iter().map(|t| t.ip_len).collect();
        assert_eq!(sizes, [1404, 1403, 1402, 1401]);
        for t in &again[1..] {
            p.handle_reply(t1 + RTT, &confirmed(t));
        }
        let r = p.result().expect("done");
        assert_eq!(r.pmtu(), Some(1403));
        assert_eq!(r.round_trips, 3);
    }

    #[test]
    fn unconfirmed_estimate_falls_back_with_lower_bound() {
        let mut p = prober(1500);
        let t0 = Instant::now();
        to_round_two(&mut p, t0, 1396);
        let mut now = t0;
        while !p.is_done() {
            let _ = drain(&mut p, now);
            now = p.poll_timeout().expect("timer");
            p.handle_timeout(now);
        }
        let r = p.result().expect("done");
        assert_eq!(
            r.outcome,
            Outcome::Fallback { reason: FallbackReason::ConfirmationFailed, lower_bound: Some(1396) }
        );
        assert_eq!(r.round_trips, 4);
    }

    #[test]
    fn implausible_reports_are_ignored() {
        let mut p = prober(1500);
        let t0 = Instant::now();
        let r1 = drain(&mut p, t0);
        let id = r1[0].probe_id;
        // Larger than the probe.
        let big = report(NONCE, id, false, true, true, 1500, 1600, 0, &[]);
        // A fragment record larger than the probe.
        let rec = [FragmentRecord { offset: 0, ip_len: 2000, more_fragments: true }];
        let big_rec = report(NONCE, id, false, true, true, 1500, 1396, 0, &rec);
        // Claims to answer a confirmation.
        let kind = report(NONCE, id, true, true, true, 1500, 1396, 0, &[]);
        // Echoes another size.
        let echo = report(NONCE, id, false, true, true, 1400, 1396, 0, &[]);
        // Smaller than any path carries (would make confirmation probes
        // smaller than their own header).
        let tiny = report(NONCE, id, false, true, true, 1500, 30, 0, &[]);
        for bad in [big, big_rec, kind, echo, tiny] {
            assert_eq!(p.handle_reply(t0 + RTT, &bad), ReplyVerdict::Implausible);
        }
        assert_eq!(p.stats().implausible, 5);
        assert_eq!(p.phase(), Phase::Discover);
        // A confirmation that arrived fragmented confirms nothing.
        assert_eq!(p.handle_reply(t0 + RTT, &fragmented(&r1[0], 1396)), ReplyVerdict::Accepted);
        let r2 = drain(&mut p, t0 + RTT);
        let t = &r2[0];
        let frag = report(NONCE, t.probe_id, true, true, true, t.ip_len, 1396, 0, &[]);
        assert_eq!(p.handle_reply(t0 + RTT * 2, &frag), ReplyVerdict::Implausible);
        assert_eq!(p.phase(), Phase::Confirm);
    }

    #[test]
    fn legacy_responder_interop() {
        let mut c = ProberConfig::new(1500);
        c.legacy_probes = true;
        let mut p = Prober::new(c, NONCE, ClassicRtt::default()).expect("valid");
        let t0 = Instant::now();
        let r1 = drain(&mut p, t0);
        assert_eq!(&r1[0].payload[..4], b"FPMT");
        assert!(r1[0].payload[4..].iter().all(|b| *b == 0));
        assert_eq!(p.handle_reply(t0 + RTT, &1396u32.to_be_bytes()), ReplyVerdict::Accepted);
        let r2 = drain(&mut p, t0 + RTT);
        assert_eq!(r2.len(), 9);
        // The legacy responder answers each confirmation that arrived with
        // its size: 1403 down to the control, 1396.
        for t in r2.iter().filter(|t| t.ip_len <= 1403) {
            assert_eq!(p.handle_reply(t0 + RTT * 2, &u32::from(t.ip_len).to_be_bytes()), ReplyVerdict::Accepted);
        }
        let r = p.result().expect("done");
        assert_eq!(r.pmtu(), Some(1403));
        assert!(r.legacy_replies);
        // A legacy value larger than the probe is implausible.
        let mut c = ProberConfig::new(1500);
        c.accept_legacy = true;
        let mut p = Prober::new(c, NONCE, ClassicRtt::default()).expect("valid");
        let _ = drain(&mut p, t0);
        assert_eq!(p.handle_reply(t0, &9000u32.to_be_bytes()), ReplyVerdict::Implausible);
        assert_eq!(p.handle_reply(t0, &30u32.to_be_bytes()), ReplyVerdict::Implausible);
        assert_eq!(p.phase(), Phase::Discover);
    }

    #[test]
    fn refinement_disabled_returns_the_estimate() {
        let mut c = ProberConfig::new(1500);
        c.refine = false;
        let mut p = Prober::new(c, NONCE, ClassicRtt::default()).expect("valid");
        let t0 = Instant::now();
        let r1 = drain(&mut p, t0);
        p.handle_reply(t0 + RTT, &fragmented(&r1[0], 1396));
        assert_eq!(outcome(&p), Outcome::Estimate { pmtu: 1396 });
        assert_eq!(p.result().expect("done").round_trips, 1);
    }

    #[test]
    fn settle_time_admits_reordered_answers() {
        let mut c = ProberConfig::new(1500);
        c.settle = Duration::from_millis(5);
        let mut p = Prober::new(c, NONCE, ClassicRtt::default()).expect("valid");
        let t0 = Instant::now();
        let r2 = to_round_two(&mut p, t0, 1396);
        let t1 = t0 + RTT * 2;
        // The control overtakes 1403's answer.
        p.handle_reply(t1, &confirmed(r2.last().expect("control")));
        assert_eq!(p.poll_timeout(), Some(t1 + Duration::from_millis(5)));
        p.handle_reply(t1 + Duration::from_millis(1), &confirmed(&r2[1]));
        p.handle_timeout(t1 + Duration::from_millis(5));
        assert_eq!(p.result().and_then(FpmtudResult::pmtu), Some(1403));
    }

    proptest::proptest! {
        /// Whatever comes back — garbage, forged reports with our nonce,
        /// legacy values — the prober neither panics nor claims more than
        /// its link carries, and it always ends.
        #[test]
        fn arbitrary_replies_are_safe(
            replies in proptest::collection::vec(
                (proptest::num::u32::ANY, proptest::num::u16::ANY, proptest::num::u8::ANY,
                 proptest::collection::vec(proptest::num::u8::ANY, 0..8)),
                0..30),
        ) {
            let mut c = ProberConfig::new(1500);
            c.accept_legacy = true;
            let mut p = Prober::new(c, NONCE, ClassicRtt::default()).expect("valid");
            let mut now = Instant::now();
            for (id, largest, flags, junk) in replies {
                let _ = drain(&mut p, now);
                let bytes = match flags % 4 {
                    0 => junk,
                    1 => largest.to_be_bytes().iter().chain(&junk).copied().collect(),
                    _ => report(NONCE, id % 16, flags & 4 != 0, flags & 8 != 0, flags & 16 != 0,
                                u16::from(flags) * 8, largest, u16::from(flags) << 4, &[]),
                };
                now += Duration::from_millis(5);
                let _ = p.handle_reply(now, &bytes);
                if flags & 32 != 0 {
                    if let Some(t) = p.poll_timeout() {
                        now = now.max(t);
                        p.handle_timeout(now);
                    }
                }
            }
            let mut steps = 0;
            while !p.is_done() {
                let _ = drain(&mut p, now);
                now = p.poll_timeout().expect("a timer while not done");
                p.handle_timeout(now);
                steps += 1;
                proptest::prop_assert!(steps < 20);
            }
            if let Some(pmtu) = p.result().and_then(FpmtudResult::pmtu) {
                proptest::prop_assert!(pmtu <= 1500);
            }
        }
    }
}
