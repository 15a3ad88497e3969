//! `auto`, `px probe`'s default: parallel probing ([`ParallelSession`]),
//! with F-PMTUD's DF-clear probe as a hint on IPv4, so that every path
//! (IPv6, ICMP black holes and fragment filters included) takes two or
//! three round trips. With `--legacy` (the reference responder's own
//! probes): F-PMTUD with early fallback on IPv4, and DPLPMTUD where it
//! falls back (from F-PMTUD's lower bound, with the RTT its small probe
//! measured) and on IPv6, as before parallel probing.

use std::time::{Duration, Instant};

use super::{
    DplpmtudSession, FpmtudSession, Measurement, ParallelSession, ProbeDatagram, Session, SessionConfig, SessionError,
    TooBig,
};
use crate::fpmtud::prober::Outcome;
use crate::rtt::{ClassicRtt, RttEstimator, RttSample};

/// Where an `auto` measurement is.
#[derive(Debug)]
enum Stage {
    /// Parallel probing (with the fragment hint on IPv4).
    Parallel(ParallelSession),
    /// IPv6 with `--legacy`: DPLPMTUD only.
    V6(DplpmtudSession),
    /// F-PMTUD, possibly handing over.
    Fpmtud(FpmtudSession),
    /// DPLPMTUD after F-PMTUD's `Fallback`.
    Fallback { f: Measurement, d: DplpmtudSession },
}

/// `auto` session.
#[derive(Debug)]
pub struct AutoSession {
    cfg: SessionConfig,
    nonce: u64,
    stage: Stage,
    done: Option<Measurement>,
}

impl AutoSession {
    /// A measurement starting at `now`; `nonce` is its secret (the
    /// DPLPMTUD stage uses `nonce + 1`).
    pub fn new(cfg: &SessionConfig, nonce: u64, now: Instant) -> Result<Self, SessionError> {
        // A legacy responder's answer is better than none (and says so).
        let cfg = &SessionConfig { accept_legacy: true, ..cfg.clone() };
        let stage = if !cfg.legacy {
            Stage::Parallel(ParallelSession::new(cfg, nonce, !cfg.ipv6, None, now)?)
        } else if cfg.ipv6 {
            Stage::V6(DplpmtudSession::new(cfg, nonce, None, ClassicRtt::new(cfg.initial_rtt), now)?)
        } else {
            Stage::Fpmtud(FpmtudSession::new(cfg, nonce, true, now)?)
        };
        Ok(AutoSession { cfg: cfg.clone(), nonce, stage, done: None })
    }

    fn current(&mut self) -> &mut dyn Session {
        match &mut self.stage {
            Stage::Parallel(p) => p,
            Stage::V6(d) | Stage::Fallback { d, .. } => d,
            Stage::Fpmtud(f) => f,
        }
    }

    /// Moves on when the current stage has ended.
    fn advance(&mut self, now: Instant) {
        if self.done.is_some() {
            return;
        }
        match &self.stage {
            Stage::Parallel(p) => self.done = p.outcome().cloned(),
            Stage::V6(d) => {
                if let Some(m) = d.outcome() {
                    self.done = Some(Measurement { note: format!("IPv6: {}", m.note), ..m.clone() });
                }
            }
            Stage::Fpmtud(f) => {
                let Some(run) = f.run() else { return };
                let Some(Outcome::Fallback { lower_bound, .. }) = run.outcome else {
                    self.done = Some(run.measurement.clone());
                    return;
                };
                let cfg = SessionConfig {
                    timeout: self.cfg.timeout.saturating_sub(run.measurement.elapsed),
                    ..self.cfg.clone()
                };
                // The small probe's RTT, when answered, informs the first PROBE_TIMER.
                let rtt = match run.rtt {
                    Some(sample) => {
                        let mut r = ClassicRtt::new(sample);
                        r.on_ack(RttSample { latest_rtt: sample, ack_delay: Duration::ZERO, acked_packet_number: 0 });
                        r
                    }
                    None => ClassicRtt::new(self.cfg.initial_rtt),
                };
                let refused = f.refused();
                let f = run.measurement.clone();
                match DplpmtudSession::new(&cfg, self.nonce.wrapping_add(1), lower_bound, rtt, now) {
                    Ok(mut d) => {
                        if refused {
                            d.on_unreachable(now);
                        }
                        self.stage = Stage::Fallback { f, d };
                        self.advance(now);
                    }
                    // Cannot happen for a configuration F-PMTUD accepted; end with F-PMTUD's answer.
                    Err(e) => self.done = Some(Measurement { note: format!("{}; DPLPMTUD: {e}", f.note), ..f }),
                }
            }
            Stage::Fallback { f, d } => {
                let Some(m) = d.outcome() else { return };
                self.done = Some(Measurement {
                    method: "fpmtud+dplpmtud".into(),
                    pmtu: m.pmtu,
                    exact: m.exact,
                    pmtu_high: m.pmtu_high,
                    round_trips: f.round_trips + m.round_trips,
                    probes: f.probes + m.probes,
                    elapsed: f.elapsed + m.elapsed,
                    link_mtu: self.cfg.link_mtu,
                    note: format!("F-PMTUD: {}; DPLPMTUD: {}", f.note, m.note),
                    authenticated: m.authenticated,
                });
            }
        }
    }
}

impl Session for AutoSession {
    fn poll_transmit(&mut self, now: Instant) -> Option<ProbeDatagram> {
        if self.done.is_some() {
            return None;
        }
        let d = self.current().poll_transmit(now);
        self.advance(now);
        match d {
            Some(d) => Some(d),
            // The DPLPMTUD stage may have begun: its first probe is due now.
            None if self.done.is_none() => self.current().poll_transmit(now),
            None => None,
        }
    }

    fn on_local_refused(&mut self, now: Instant, known_pmtu: Option<u16>) {
        self.current().on_local_refused(now, known_pmtu);
        self.advance(now);
    }

    fn on_datagram(&mut self, now: Instant, bytes: &[u8]) {
        self.current().on_datagram(now, bytes);
        self.advance(now);
    }

    fn on_icmp_too_big(&mut self, now: Instant, ptb: TooBig<'_>) {
        self.current().on_icmp_too_big(now, ptb);
        self.advance(now);
    }

    fn on_unreachable(&mut self, now: Instant) {
        self.current().on_unreachable(now);
        self.advance(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done.is_some() {
            return None;
        }
        match &self.stage {
            Stage::Parallel(p) => p.poll_timeout(),
            Stage::V6(d) | Stage::Fallback { d, .. } => d.poll_timeout(),
            Stage::Fpmtud(f) => f.poll_timeout(),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done.is_some() {
            return;
        }
        self.current().handle_timeout(now);
        self.advance(now);
    }

    fn outcome(&self) -> Option<&Measurement> {
        self.done.as_ref()
    }

    fn reads_icmp(&self) -> bool {
        !matches!(self.stage, Stage::Fpmtud(_))
    }

    fn fell_back(&self) -> bool {
        matches!(self.stage, Stage::Fallback { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::super::scripted::ScriptedPath;
    use super::super::{Df, REFUSED, UNAUTHENTICATED};
    use super::*;

    fn cfg(link_mtu: u16) -> SessionConfig {
        SessionConfig::new(link_mtu, false)
    }

    #[test]
    fn the_fragment_hint_and_parallel_probes_answer_where_fragments_pass() {
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        path.black_hole = true;
        let mut s = AutoSession::new(&cfg(9000), 3, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.method.as_str()), (Some(1400), true, "fpmtud+parallel"), "{m:?}");
        assert_eq!(m.round_trips, 2, "{m:?}");
        assert!(!s.fell_back());
        // The F-PMTUD probe first, then the DF-set candidates, largest first.
        assert_eq!(path.sent[..2], [(9000, Df::Clear), (9000, Df::Probe)]);
    }

    #[test]
    fn filtered_fragments_cost_nothing_but_the_hint() {
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        path.fragment_filter = true;
        path.black_hole = true;
        let mut s = AutoSession::new(&cfg(9000), 3, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.method.as_str()), (Some(1400), true, "parallel"), "{m:?}");
        assert_eq!(m.elapsed, path.rtt * m.round_trips, "no timer: {m:?}");
        let round1 = path.sent.iter().filter(|&&(size, df)| size == 9000 && df == Df::Clear).count();
        assert_eq!(round1, 1, "{:?}", path.sent);
    }

    #[test]
    fn a_legacy_responder_is_used_and_marked_unauthenticated() {
        // Without --legacy: extended probes, but the reference responder
        // answers them the legacy way (and binds late).
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        path.legacy_late_bind = true;
        let mut s = AutoSession::new(&cfg(9000), 3, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact), (Some(1400), true), "{m:?}");
        assert!(!m.authenticated && m.note.contains(UNAUTHENTICATED), "{m:?}");
        // The same path, nonce-checked: authenticated.
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        let mut s = AutoSession::new(&cfg(9000), 3, path.now).unwrap();
        assert!(path.drive(&mut s).authenticated);
    }

    #[test]
    fn with_legacy_probes_auto_is_f_pmtud_then_dplpmtud() {
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        path.legacy_late_bind = true;
        let c = SessionConfig { legacy: true, ..cfg(9000) };
        let mut s = AutoSession::new(&c, 3, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.method.as_str()), (Some(1400), true, "fpmtud"), "{m:?}");
        assert!(!m.authenticated, "{m:?}");
        // IPv6 with legacy probes: DPLPMTUD.
        let now = Instant::now();
        let mut s =
            AutoSession::new(&SessionConfig { legacy: true, ..SessionConfig::new(1500, true) }, 3, now).unwrap();
        assert!(s.reads_icmp());
        let p = s.poll_transmit(now).unwrap();
        assert_eq!((p.size, p.df), (1280, Df::Probe));
        s.on_unreachable(now);
        assert_eq!(s.outcome().unwrap().note, format!("IPv6: {REFUSED}"));
    }

    #[test]
    fn ipv6_probes_in_parallel() {
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        let mut s = AutoSession::new(&SessionConfig::new(9000, true), 3, path.now).unwrap();
        assert!(s.reads_icmp());
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.method.as_str()), (Some(1400), true, "parallel"), "{m:?}");
        assert!(path.sent.iter().all(|&(_, df)| df == Df::Probe));
    }

    #[test]
    fn no_responder_means_no_answer() {
        let mut path = ScriptedPath::new(&[1500, 1500]);
        path.no_responder = true;
        let mut s = AutoSession::new(&cfg(1500), 3, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.note.as_str(), m.method.as_str()), (None, REFUSED, "parallel"), "{m:?}");
    }
}
