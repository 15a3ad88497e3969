//! DPLPMTUD as `px probe --method dplpmtud` (and the second half of
//! `auto`) runs it against a `px fpmtud` responder: [`Dplpmtud`] chooses
//! the sizes, each probe is a DF-set confirmation probe and the
//! responder's confirming report is its acknowledgement; RTT samples from
//! the reports feed the PROBE_TIMER.
//!
//! The session ends at SEARCH_COMPLETE (answer: the PLPMTU, exact), when
//! MAX_PROBES BASE probes went unanswered (RFC 8899 would stay in ERROR
//! and retry; a measurement tool reports "no answer"), on "port
//! unreachable" before any answer, or at the overall timeout (answer: the
//! largest size acknowledged, if any, not exact).

use std::time::{Duration, Instant};

use super::{
    Df, IPV6_MIN_MTU, Measurement, ProbeDatagram, REFUSED, Session, SessionConfig, SessionError, TooBig, confirm_probe,
    quotes_our_probe,
};
use crate::dplpmtud::{BASE_PLPMTU, Dplpmtud, DplpmtudConfig, MAX_PROBES, State};
use crate::fpmtud::wire::{self, Reply};
use crate::rtt::{ClassicRtt, RttEstimator, RttSample};

/// BASE probes without any answer after which the session gives up.
const MAX_BASE_TRIES: u8 = MAX_PROBES;

/// DPLPMTUD session.
#[derive(Debug)]
pub struct DplpmtudSession {
    d: Dplpmtud,
    rtt: ClassicRtt,
    nonce: u64,
    overhead: u16,
    link_mtu: u16,
    start: Instant,
    hard: Instant,
    probes: u32,
    rounds: u32,
    acked_any: bool,
    /// (probe id, size, sent at) of the one probe in flight.
    in_flight: Option<(u32, u16, Instant)>,
    next_id: u32,
    ptbs: u32,
    refused: bool,
    done: Option<Measurement>,
}

impl DplpmtudSession {
    /// A search starting at `now` from `base` (a size known to pass, or
    /// BASE_PLPMTU), with `rtt` as the estimator (F-PMTUD's, when falling
    /// back, so the first PROBE_TIMER is already informed); `nonce` is its
    /// secret.
    pub fn new(
        cfg: &SessionConfig,
        nonce: u64,
        base: Option<u16>,
        rtt: ClassicRtt,
        now: Instant,
    ) -> Result<Self, SessionError> {
        let min = cfg.min_mtu();
        let default_base = if cfg.ipv6 { IPV6_MIN_MTU } else { BASE_PLPMTU };
        // Not `clamp`: a link MTU below the minimum is refused by `validate`.
        let base = base.unwrap_or(default_base).max(min).min(cfg.link_mtu);
        let mut dc = DplpmtudConfig::new(cfg.link_mtu);
        dc.min_plpmtu = min;
        dc.base_plpmtu = base;
        dc.strategy = cfg.search;
        // RFC 8899 §5.1.1 wants PROBE_TIMER >= 1 s for a PL carrying traffic;
        // this is a measurement against a responder that answers at once, so
        // the PTO (floored at --probe-timer) bounds a probe's answer.
        dc.min_probe_timer = cfg.probe_timer;
        dc.validate()?;
        let mut d = Dplpmtud::new(dc)?;
        d.enable();
        Ok(DplpmtudSession {
            d,
            rtt,
            nonce,
            overhead: cfg.overhead(),
            link_mtu: cfg.link_mtu,
            start: now,
            hard: now + cfg.timeout,
            probes: 0,
            rounds: 0,
            acked_any: false,
            in_flight: None,
            next_id: 1,
            ptbs: 0,
            refused: false,
            done: None,
        })
    }

    /// The state machine.
    #[must_use]
    pub fn machine(&self) -> &Dplpmtud {
        &self.d
    }

    /// The give-up rules, in the order they are checked.
    fn check_end(&mut self, now: Instant) {
        if self.done.is_some() {
            return;
        }
        let note = if self.d.state() == State::SearchComplete {
            let st = self.d.stats();
            format!("search complete ({} probes acknowledged, {} PTB hints)", st.probes_acked, self.ptbs)
        } else if !self.acked_any && self.refused {
            REFUSED.into()
        } else if !self.acked_any && self.d.stats().probes_lost >= u64::from(MAX_BASE_TRIES) {
            "no answer to BASE_PLPMTU probes (no responder, or path below BASE)".into()
        } else if now >= self.hard {
            "timed out".into()
        } else {
            return;
        };
        let exact = self.d.state() == State::SearchComplete;
        let pmtu = self.acked_any.then(|| self.d.plpmtu());
        // Not exact: the search had not closed; what is left of its bracket.
        let high =
            if exact { pmtu } else { pmtu.map(|p| self.d.search_bracket().map_or(self.link_mtu, |b| b.1).max(p)) };
        self.done = Some(Measurement {
            method: "dplpmtud".into(),
            pmtu,
            exact,
            pmtu_high: high,
            round_trips: self.rounds,
            probes: self.probes,
            elapsed: now - self.start,
            link_mtu: self.link_mtu,
            note,
            authenticated: true,
        });
    }

    fn forget_lost_probe(&mut self) {
        if !self.d.probe_in_flight() {
            self.in_flight = None;
        }
    }
}

impl Session for DplpmtudSession {
    fn poll_transmit(&mut self, now: Instant) -> Option<ProbeDatagram> {
        self.check_end(now);
        if self.done.is_some() {
            return None;
        }
        let size = self.d.poll_probe(now, &self.rtt)?;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.rounds += 1;
        self.probes += 1;
        self.rtt.on_packet_sent(u64::from(id));
        self.in_flight = Some((id, size, now));
        Some(confirm_probe(self.nonce, id, size, self.overhead, Df::Probe))
    }

    fn on_local_refused(&mut self, now: Instant, _known_pmtu: Option<u16>) {
        // Larger than the local interface: lost before the wire.
        if let Some((_, size, _)) = self.in_flight.take() {
            self.probes = self.probes.saturating_sub(1);
            self.d.on_probe_lost(now, size);
        }
    }

    fn on_datagram(&mut self, now: Instant, bytes: &[u8]) {
        if self.done.is_some() {
            return;
        }
        let Ok(Reply::Report(r)) = wire::parse_reply(bytes) else { return };
        let Some((id, size, sent)) = self.in_flight else { return };
        if r.nonce != self.nonce || !r.confirm || r.probe_id != id {
            return;
        }
        self.rtt.on_ack(RttSample {
            latest_rtt: now - sent,
            ack_delay: Duration::ZERO,
            acked_packet_number: u64::from(id),
        });
        self.in_flight = None;
        self.acked_any = true;
        self.d.on_probe_acked(now, size);
        self.check_end(now);
    }

    /// RFC 8899 §4.6: a validated PTB may speed the search up; black holes
    /// (no PTB) are handled by the probe timers alone.
    fn on_icmp_too_big(&mut self, now: Instant, ptb: TooBig<'_>) {
        if self.done.is_some() || !ptb.from_network || !quotes_our_probe(ptb.quoted, self.nonce) {
            return;
        }
        self.ptbs += 1;
        let _ = self.d.on_packet_too_big(now, u16::try_from(ptb.mtu).unwrap_or(u16::MAX));
        self.forget_lost_probe();
    }

    fn on_unreachable(&mut self, now: Instant) {
        self.refused = true;
        self.check_end(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done.is_some() {
            return None;
        }
        Some(self.d.poll_timeout().map_or(self.hard, |t| t.min(self.hard)))
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done.is_some() {
            return;
        }
        if self.d.poll_timeout().is_some_and(|t| t <= now) {
            self.d.handle_timeout(now);
            self.forget_lost_probe();
        }
        self.check_end(now);
    }

    fn outcome(&self) -> Option<&Measurement> {
        self.done.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::super::scripted::ScriptedPath;
    use super::*;
    use crate::search::SearchStrategy;

    fn session(path: &ScriptedPath, link_mtu: u16, search: SearchStrategy) -> DplpmtudSession {
        let mut cfg = SessionConfig::new(link_mtu, false);
        cfg.search = search;
        cfg.probe_timer = Duration::from_millis(25);
        DplpmtudSession::new(&cfg, 5, None, ClassicRtt::new(cfg.initial_rtt), path.now).unwrap()
    }

    #[test]
    fn finds_the_mtu_on_a_black_hole_by_timers_alone() {
        let mut path = ScriptedPath::new(&[1500, 1500, 1400, 1500]);
        path.black_hole = true;
        let mut s = session(&path, 1500, SearchStrategy::Bisection);
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.method.as_str()), (Some(1400), true, "dplpmtud"), "{m:?}");
        assert!(m.note.contains("0 PTB hints"), "{m:?}");
        assert!(path.sent.iter().all(|&(_, df)| df == Df::Probe));
    }

    #[test]
    fn validated_ptbs_speed_the_search_up() {
        let mut bh = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        bh.black_hole = true;
        let slow = bh.drive(&mut session(&bh, 9000, SearchStrategy::lsquic_exact()));
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        let fast = path.drive(&mut session(&path, 9000, SearchStrategy::lsquic_exact()));
        assert_eq!((slow.pmtu, fast.pmtu), (Some(1400), Some(1400)));
        assert!(!fast.note.contains(" 0 PTB hints"), "{fast:?}");
        assert!(fast.elapsed < slow.elapsed, "{fast:?} vs {slow:?}");
    }

    #[test]
    fn ptbs_not_quoting_our_nonce_are_ignored() {
        let path = ScriptedPath::new(&[9000, 1500]);
        let mut s = session(&path, 9000, SearchStrategy::lsquic_exact());
        let now = path.now;
        let first = s.poll_transmit(now).expect("BASE probe");
        assert_eq!((first.size, first.df), (BASE_PLPMTU, Df::Probe));
        let forged = confirm_probe(6, 1, 1200, 28, Df::Probe);
        s.on_icmp_too_big(now, TooBig { mtu: 1300, from_network: true, quoted: &forged.payload });
        s.on_icmp_too_big(now, TooBig { mtu: 1300, from_network: false, quoted: &first.payload });
        let st = s.machine().stats();
        assert_eq!(st.ptb_used + st.ptb_ignored, 0, "{st:?}");
    }

    #[test]
    fn losses_only_cost_time() {
        let mut path = ScriptedPath::new(&[1500, 1500, 1400, 1500]);
        path.loss_every = Some(4);
        let mut s = session(&path, 1500, SearchStrategy::Bisection);
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact), (Some(1400), true), "{m:?}");
    }

    #[test]
    fn gives_up_after_max_probes_base_probes_or_on_port_unreachable() {
        let mut dead = ScriptedPath::new(&[1500, 1500]);
        dead.loss_every = Some(1);
        let m = dead.drive(&mut session(&dead, 1500, SearchStrategy::Bisection));
        assert_eq!((m.pmtu, m.probes), (None, u32::from(MAX_PROBES)), "{m:?}");
        assert!(m.note.starts_with("no answer to BASE_PLPMTU"), "{m:?}");

        let mut closed = ScriptedPath::new(&[1500, 1500]);
        closed.no_responder = true;
        let m = closed.drive(&mut session(&closed, 1500, SearchStrategy::Bisection));
        assert_eq!((m.pmtu, m.note.as_str(), m.elapsed), (None, REFUSED, closed.rtt), "{m:?}");
    }

    #[test]
    fn the_timeout_reports_the_largest_acknowledged_size_as_not_exact() {
        let mut path = ScriptedPath::new(&[9000, 9000, 1400, 9000]);
        path.black_hole = true;
        let mut cfg = SessionConfig::new(9000, false);
        cfg.timeout = Duration::from_millis(100);
        cfg.search = SearchStrategy::Bisection;
        let mut s = DplpmtudSession::new(&cfg, 5, None, ClassicRtt::new(cfg.initial_rtt), path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.note.as_str()), (Some(BASE_PLPMTU), false, "timed out"), "{m:?}");
    }

    #[test]
    fn ipv6_starts_at_the_ipv6_minimum() {
        let now = Instant::now();
        let cfg = SessionConfig::new(1500, true);
        let mut s = DplpmtudSession::new(&cfg, 5, None, ClassicRtt::default(), now).unwrap();
        let p = s.poll_transmit(now).unwrap();
        assert_eq!((p.size, p.payload.len()), (IPV6_MIN_MTU, usize::from(IPV6_MIN_MTU - 48)));
    }
}
