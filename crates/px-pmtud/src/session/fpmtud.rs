//! F-PMTUD as `px probe --method fpmtud` (and the first half of `auto`)
//! runs it: [`Prober`]'s rounds, the overall timeout, "port unreachable",
//! and the optional early fallback.
//!
//! With early fallback, a small DF-set probe ("ping") goes out beside the
//! round-1 probe. Its answer shows that the responder is reachable and what
//! the RTT is; if the round-1 report has not come `max(2 RTT, 10 ms)` after
//! it, the fragments are taken to be filtered and the run ends with
//! `Fallback` at once, instead of after F-PMTUD's own retries (which must
//! assume an unknown RTT). A lost round-1 probe then costs a DPLPMTUD
//! search, never a wrong answer.

use std::time::{Duration, Instant};

use super::{
    Df, Measurement, ProbeDatagram, REFUSED, Session, SessionConfig, SessionError, TooBig, UNAUTHENTICATED,
    confirm_probe, unreachable_grace,
};
use crate::dplpmtud::IPV4_MIN_MTU;
use crate::fpmtud::prober::{FallbackReason, Method, Outcome, Phase, Prober, ProberConfig};
use crate::fpmtud::wire::{self, Reply};
use crate::rtt::ClassicRtt;

/// IP length of the small DF-set probe sent beside round 1 with early
/// fallback: the IPv4 minimum MTU, which every path carries.
pub const PING_SIZE: u16 = IPV4_MIN_MTU;

/// One F-PMTUD run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FpmtudRun {
    /// What it found.
    pub measurement: Measurement,
    /// The prober's outcome (`None` if the overall timeout cut it short).
    /// On `Fallback` the measurement has no PMTU and the outcome carries
    /// the lower bound to start DPLPMTUD from (if any).
    pub outcome: Option<Outcome>,
    /// RTT of the small probe sent beside round 1, if it was answered.
    pub rtt: Option<Duration>,
}

/// F-PMTUD session.
#[derive(Debug)]
pub struct FpmtudSession {
    prober: Prober<ClassicRtt>,
    link_mtu: u16,
    early_fallback: bool,
    ping_nonce: u64,
    ping_sent: Option<Instant>,
    /// The datagram last returned by `poll_transmit` was the ping.
    last_was_ping: bool,
    rtt: Option<Duration>,
    fallback_at: Option<Instant>,
    start: Instant,
    hard: Instant,
    probes: u32,
    refused: bool,
    /// After "port unreachable": when to give up if nothing answered.
    refused_deadline: Option<Instant>,
    legacy: bool,
    run: Option<FpmtudRun>,
}

impl FpmtudSession {
    /// A measurement starting at `now`; `nonce` is its secret.
    pub fn new(cfg: &SessionConfig, nonce: u64, early_fallback: bool, now: Instant) -> Result<Self, SessionError> {
        if cfg.ipv6 {
            return Err(SessionError::FpmtudNeedsIpv4);
        }
        let mut pc = ProberConfig::new(cfg.link_mtu);
        pc.legacy_probes = cfg.legacy;
        pc.accept_legacy = cfg.legacy || cfg.accept_legacy;
        pc.max_timeout = cfg.timeout;
        let prober = Prober::new(pc, nonce, ClassicRtt::new(cfg.initial_rtt))?;
        Ok(FpmtudSession {
            prober,
            link_mtu: cfg.link_mtu,
            // A legacy responder's answer carries no nonce: the ping could not be told apart.
            early_fallback: early_fallback && !cfg.legacy,
            ping_nonce: nonce ^ 0x5049_4e47, // any value other than the prober's
            ping_sent: None,
            last_was_ping: false,
            rtt: None,
            fallback_at: None,
            start: now,
            hard: now + cfg.timeout,
            probes: 0,
            refused: false,
            refused_deadline: None,
            legacy: cfg.legacy,
            run: None,
        })
    }

    /// The run, once it has ended.
    #[must_use]
    pub fn run(&self) -> Option<&FpmtudRun> {
        self.run.as_ref()
    }

    /// "Port unreachable" was reported.
    #[must_use]
    pub fn refused(&self) -> bool {
        self.refused
    }

    fn end(
        &mut self,
        now: Instant,
        range: Option<(u16, u16)>,
        exact: bool,
        round_trips: u32,
        note: String,
    ) -> Measurement {
        Measurement {
            method: "fpmtud".into(),
            pmtu: range.map(|r| r.0),
            exact,
            pmtu_high: range.map(|r| r.1),
            round_trips,
            probes: self.probes,
            elapsed: now - self.start,
            link_mtu: self.link_mtu,
            note,
            authenticated: true,
        }
    }

    /// Ends the run without the prober's result.
    fn cut_short(&mut self, now: Instant, note: &str) {
        let measurement = self.end(now, None, false, 0, note.into());
        self.run = Some(FpmtudRun { measurement, outcome: None, rtt: self.rtt });
    }

    /// Ends the run with the prober's result, if it has one.
    fn conclude(&mut self, now: Instant) {
        if self.run.is_some() {
            return;
        }
        let Some(r) = self.prober.result().copied() else { return };
        let link = self.link_mtu;
        let range = match r.outcome {
            Outcome::Exact { pmtu, .. } => Some((pmtu, pmtu)),
            Outcome::Range { low, high } => Some((low, high)),
            // The largest fragment is within 7 bytes below the path MTU.
            Outcome::Estimate { pmtu } => Some((pmtu, pmtu.saturating_add(7).min(link))),
            Outcome::Fallback { .. } => None,
        };
        let (exact, note) = match r.outcome {
            Outcome::Exact { method: Method::Unfragmented, .. } => (true, "link-MTU probe arrived whole".to_owned()),
            Outcome::Exact { method: Method::ResponderLinkMtu, .. } => {
                (true, format!("largest fragment {} = responder link MTU", r.estimate.unwrap_or(0)))
            }
            Outcome::Exact { method: Method::Refined, .. } => {
                (true, format!("largest fragment {}, refined with DF-set probes", r.estimate.unwrap_or(0)))
            }
            Outcome::Range { low, high } => (
                false,
                format!(
                    "largest fragment {}, DF-set probes confirmed {low}; {} not decided (a probe did not leave the host)",
                    r.estimate.unwrap_or(0),
                    if high > low + 1 { format!("{}..={high}", low + 1) } else { high.to_string() }
                ),
            ),
            Outcome::Estimate { .. } => (false, "largest fragment only".to_owned()),
            Outcome::Fallback { reason, .. } => (
                false,
                match reason {
                    FallbackReason::NoReply => "no fragment report (fragments filtered or no responder)".to_owned(),
                    FallbackReason::ConfirmationFailed => "no confirmation probe answered".to_owned(),
                    FallbackReason::EstimateTooLow => "largest fragment more than 7 bytes low".to_owned(),
                },
            ),
        };
        let mut measurement = self.end(now, range, exact, r.round_trips, note);
        if r.legacy_replies && range.is_some() {
            measurement.authenticated = false;
            measurement.note = format!("{}; {UNAUTHENTICATED}", measurement.note);
        }
        self.run = Some(FpmtudRun { measurement, outcome: Some(r.outcome), rtt: self.rtt });
    }
}

impl Session for FpmtudSession {
    fn poll_transmit(&mut self, now: Instant) -> Option<ProbeDatagram> {
        if self.run.is_some() {
            return None;
        }
        if let Some(tx) = self.prober.poll_transmit(now) {
            self.probes += 1;
            self.last_was_ping = false;
            let df = if tx.dont_fragment { Df::Probe } else { Df::Clear };
            return Some(ProbeDatagram { size: tx.ip_len, df, payload: tx.payload });
        }
        if self.early_fallback && self.ping_sent.is_none() {
            self.ping_sent = Some(now);
            self.last_was_ping = true;
            self.probes += 1;
            return Some(confirm_probe(self.ping_nonce, 0, PING_SIZE, 28, Df::Probe));
        }
        None
    }

    fn on_local_refused(&mut self, _now: Instant, _known_pmtu: Option<u16>) {
        // Nothing left the host: its silence proves nothing (the prober
        // must not count it as too big); the round timer handles the rest.
        self.probes = self.probes.saturating_sub(1);
        if !self.last_was_ping {
            self.prober.on_local_refused();
        }
    }

    fn on_datagram(&mut self, now: Instant, bytes: &[u8]) {
        if self.run.is_some() {
            return;
        }
        let ping_answer = match wire::parse_reply(bytes) {
            Ok(Reply::Report(r)) => r.nonce == self.ping_nonce && r.confirm,
            // A legacy responder answers the ping with its size (no nonce):
            // no round-1 answer is that small.
            Ok(Reply::Legacy(v)) => {
                v == u32::from(PING_SIZE) && self.ping_sent.is_some() && self.prober.config().accept_legacy
            }
            Err(_) => false,
        };
        if ping_answer {
            if let (Some(sent), None) = (self.ping_sent, self.rtt) {
                let sample = now - sent;
                self.rtt = Some(sample);
                self.fallback_at = Some(now + (sample * 2).max(Duration::from_millis(10)));
            }
            return;
        }
        // The verdict is counted in the prober's stats.
        let _ = self.prober.handle_reply(now, bytes);
        self.conclude(now);
    }

    fn on_icmp_too_big(&mut self, _now: Instant, _ptb: TooBig<'_>) {
        // F-PMTUD does not need ICMP: the fragment report says it all.
    }

    fn on_unreachable(&mut self, now: Instant) {
        self.refused = true;
        if self.run.is_some() || self.prober.stats().accepted > 0 || self.refused_deadline.is_some() {
            return;
        }
        // Not the end yet: a responder that binds late answers after the
        // kernel's ICMP error. With --legacy (that responder's own
        // protocol) the round's timeout decides; otherwise a short grace.
        self.refused_deadline = Some(if self.legacy {
            self.prober.poll_timeout().unwrap_or(now)
        } else {
            now + unreachable_grace(now - self.start)
        });
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.run.is_some() {
            return None;
        }
        let t = super::earliest(self.prober.poll_timeout(), self.fallback_at);
        let t = super::earliest(t, self.refused_deadline);
        Some(t.map_or(self.hard, |t| t.min(self.hard)))
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.run.is_some() {
            return;
        }
        if self.refused_deadline.is_some_and(|t| t <= now) {
            self.refused_deadline = None;
            if self.prober.stats().accepted == 0 {
                self.cut_short(now, REFUSED);
                return;
            }
        }
        if self.prober.poll_timeout().is_some_and(|t| t <= now) {
            self.prober.handle_timeout(now);
        }
        if self.fallback_at.is_some_and(|t| t <= now) {
            self.fallback_at = None;
            if self.prober.phase() == Phase::Discover {
                let note = format!(
                    "no fragment report, while a {PING_SIZE}-byte DF probe was answered in {:.2} ms (fragments filtered?)",
                    self.rtt.unwrap_or_default().as_secs_f64() * 1e3
                );
                let measurement = self.end(now, None, false, 1, note);
                let outcome = Outcome::Fallback { reason: FallbackReason::NoReply, lower_bound: None };
                self.run = Some(FpmtudRun { measurement, outcome: Some(outcome), rtt: self.rtt });
                return;
            }
        }
        self.conclude(now);
        if self.run.is_none() && now >= self.hard {
            self.cut_short(now, "timed out");
        }
    }

    fn outcome(&self) -> Option<&Measurement> {
        self.run.as_ref().map(|r| &r.measurement)
    }

    fn reads_icmp(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::scripted::ScriptedPath;
    use super::*;

    fn cfg(link_mtu: u16) -> SessionConfig {
        SessionConfig::new(link_mtu, false)
    }

    #[test]
    fn exact_in_two_round_trips_over_an_mtu_chain_even_without_icmp() {
        for black_hole in [false, true] {
            let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
            path.black_hole = black_hole;
            let mut s = FpmtudSession::new(&cfg(9000), 1, false, path.now).unwrap();
            let m = path.drive(&mut s);
            assert_eq!((m.pmtu, m.exact, m.round_trips), (Some(1400), true, 2), "{m:?}");
            assert!(m.note.contains("refined"), "{m:?}");
            assert_eq!(m.elapsed, 2 * path.rtt, "{m:?}");
        }
    }

    #[test]
    fn odd_mtus_between_routers_are_exact() {
        // The reported path: 1500 -> 1499 -> 1500 (the responder one hop
        // beyond the odd link), and its relatives.
        for hops in
            [&[1500, 1499, 1500][..], &[1500, 1499], &[1500, 1497, 1500], &[9000, 1499, 1500], &[1500, 1281, 1500]]
        {
            let mut path = ScriptedPath::new(hops);
            let mut s = FpmtudSession::new(&cfg(hops[0]), 1, false, path.now).unwrap();
            let m = path.drive(&mut s);
            let want = hops.iter().copied().min();
            assert_eq!((m.pmtu, m.exact, m.pmtu_high), (want, true, want), "{hops:?}: {m:?}");
        }
    }

    #[test]
    fn a_confirmation_probe_that_never_left_leaves_a_range() {
        // The bug behind "1498, exact" on 1500 -> 1499 -> 1500: the ICMP
        // drawn by the 1500-byte DF probe made the socket refuse the next
        // send (1499). Without evidence about 1499, 1498 is not exact.
        let mut path = ScriptedPath::new(&[1500, 1499, 1500]);
        path.pending_error_eats_a_send = true;
        let mut s = FpmtudSession::new(&cfg(1500), 1, false, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.pmtu_high), (Some(1498), false, Some(1499)), "{m:?}");
        assert!(m.note.contains("1499 not decided"), "{m:?}");
    }

    #[test]
    fn a_path_at_the_link_mtu_takes_one_probe() {
        let mut path = ScriptedPath::new(&[1500, 1500]);
        let mut s = FpmtudSession::new(&cfg(1500), 1, false, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.round_trips, m.probes), (Some(1500), true, 1, 1), "{m:?}");
        assert_eq!(m.note, "link-MTU probe arrived whole");
    }

    #[test]
    fn filtered_fragments_fall_back_after_the_retries_or_early_with_the_ping() {
        let mut path = ScriptedPath::new(&[9000, 1500, 1400]);
        path.fragment_filter = true;
        let mut slow = FpmtudSession::new(&cfg(9000), 1, false, path.now).unwrap();
        let m = path.drive(&mut slow);
        let run = slow.run().unwrap();
        assert!(matches!(run.outcome, Some(Outcome::Fallback { reason: FallbackReason::NoReply, .. })), "{run:?}");
        assert_eq!((m.pmtu, m.probes), (None, 3), "three round-1 tries: {m:?}");
        let slow_elapsed = m.elapsed;

        let mut path = ScriptedPath::new(&[9000, 1500, 1400]);
        path.fragment_filter = true;
        let mut fast = FpmtudSession::new(&cfg(9000), 1, true, path.now).unwrap();
        let m = path.drive(&mut fast);
        let run = fast.run().unwrap();
        assert!(matches!(run.outcome, Some(Outcome::Fallback { lower_bound: None, .. })), "{run:?}");
        assert_eq!(run.rtt, Some(path.rtt));
        // The ping is answered after one RTT; the report is given up on two
        // RTTs later (10 ms floor).
        assert_eq!(m.elapsed, path.rtt + (2 * path.rtt).max(Duration::from_millis(10)), "{m:?}");
        assert!(m.elapsed < slow_elapsed);
        assert!(m.note.contains("fragments filtered?"), "{m:?}");
        assert_eq!((m.probes, m.round_trips), (2, 1), "{m:?}");
    }

    #[test]
    fn the_ping_does_not_delay_an_answer() {
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        let mut s = FpmtudSession::new(&cfg(9000), 1, true, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact), (Some(1400), true), "{m:?}");
        assert_eq!(s.run().unwrap().rtt, Some(path.rtt));
    }

    #[test]
    fn port_unreachable_ends_the_run_at_once() {
        let mut path = ScriptedPath::new(&[1500, 1500]);
        path.no_responder = true;
        let mut s = FpmtudSession::new(&cfg(1500), 1, false, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.note.as_str()), (None, REFUSED), "{m:?}");
        // A short grace for a responder that binds late.
        assert_eq!(m.elapsed, path.rtt + super::super::unreachable_grace(path.rtt));
    }

    #[test]
    fn legacy_mode_waits_out_the_round_for_a_responder_that_binds_late() {
        // mtud_destination: "port unreachable" first, its 4-byte answer
        // right after. `px probe --legacy` once ended on the ICMP error.
        for hops in [&[9000, 1500, 1400][..], &[1500, 1500]] {
            let mut path = ScriptedPath::new(hops);
            path.legacy_late_bind = true;
            let mut c = cfg(hops[0]);
            c.legacy = true;
            let mut s = FpmtudSession::new(&c, 1, false, path.now).unwrap();
            let m = path.drive(&mut s);
            let want = hops.iter().copied().min();
            assert_eq!((m.pmtu, m.exact, m.authenticated), (want, true, false), "{hops:?}: {m:?}");
            assert!(m.note.ends_with(UNAUTHENTICATED), "{m:?}");
        }
    }

    #[test]
    fn the_overall_timeout_bounds_the_run() {
        let mut path = ScriptedPath::new(&[9000, 1500]);
        path.loss_every = Some(1); // everything is lost
        let mut c = cfg(9000);
        c.timeout = Duration::from_millis(50);
        let mut s = FpmtudSession::new(&c, 1, false, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.note.as_str(), m.elapsed), (None, "timed out", c.timeout), "{m:?}");
    }

    #[test]
    fn ipv6_is_refused() {
        let now = Instant::now();
        let e = FpmtudSession::new(&SessionConfig::new(1500, true), 1, false, now).unwrap_err();
        assert_eq!(e.to_string(), "F-PMTUD needs IPv4: IPv6 routers never fragment");
    }
}
