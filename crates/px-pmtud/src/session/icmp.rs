//! Classic PMTUD (RFC 1191 / RFC 8201) as a measuring tool does it
//! (tracepath, scamper) and `px probe --method icmp` runs it: a DF-set
//! probe as large as the local link allows; a router that cannot forward it
//! answers ICMP "fragmentation needed" / "packet too big" with its next-hop
//! MTU, and the next probe uses that size; the responder's answer ends the
//! search with the size that got through.
//!
//! Honest about its weakness: on an ICMP black hole the too-big probe just
//! vanishes, the tool retries `icmp_tries` times, a retry timer apart, and
//! gives up without an answer. A probe lost to ordinary loss is retried the
//! same way.

use std::time::{Duration, Instant};

use super::{
    Df, Measurement, OneAtATime, ProbeDatagram, REFUSED, Session, SessionConfig, SessionError, TooBig, confirm_probe,
    quotes_our_probe,
};
use crate::fpmtud::wire::{self, Reply};

/// Classic PMTUD session.
#[derive(Debug)]
pub struct IcmpSession {
    nonce: u64,
    overhead: u16,
    link_mtu: u16,
    max_tries: u8,
    /// Wait for an answer before retrying.
    timer: Duration,
    start: Instant,
    size: u16,
    probes: u32,
    rounds: u32,
    tries: u8,
    /// Id of the latest probe; only its answer counts.
    id: u32,
    ptbs: u32,
    clock: OneAtATime,
    refused: bool,
    done: Option<Measurement>,
}

impl IcmpSession {
    /// A measurement starting at `now` with a probe of the link MTU;
    /// `nonce` is its secret.
    pub fn new(cfg: &SessionConfig, nonce: u64, now: Instant) -> Result<Self, SessionError> {
        if cfg.link_mtu < cfg.min_mtu() {
            return Err(SessionError::LinkMtuBelowMinimum { link_mtu: cfg.link_mtu, min: cfg.min_mtu() });
        }
        Ok(IcmpSession {
            nonce,
            overhead: cfg.overhead(),
            link_mtu: cfg.link_mtu,
            max_tries: cfg.icmp_tries,
            timer: (cfg.initial_rtt * 3).max(cfg.probe_timer),
            start: now,
            size: cfg.link_mtu,
            probes: 0,
            rounds: 0,
            tries: 0,
            id: 0,
            ptbs: 0,
            clock: OneAtATime::new(now, cfg.timeout),
            refused: false,
            done: None,
        })
    }

    /// The smallest size worth probing: room for the probe header.
    fn min_size(&self) -> u16 {
        self.overhead + wire::PROBE_MIN_LEN as u16
    }

    fn finish(&mut self, now: Instant, answer: Option<u16>, note: String) {
        self.clock.next_now();
        self.done = Some(Measurement {
            method: "icmp".into(),
            pmtu: answer,
            exact: answer.is_some(),
            pmtu_high: answer,
            round_trips: self.rounds,
            probes: self.probes,
            elapsed: now - self.start,
            link_mtu: self.link_mtu,
            note,
            authenticated: true,
        });
    }

    /// The give-up rules, checked before each probe.
    fn check_end(&mut self, now: Instant) {
        if self.clock.past_bound(now) {
            self.finish(now, None, "timed out".into());
        } else if self.refused {
            self.finish(now, None, REFUSED.into());
        } else if self.tries >= self.max_tries {
            let note = format!("no answer and no ICMP for {}-byte probes (black hole?)", self.size);
            self.finish(now, None, note);
        }
    }
}

impl Session for IcmpSession {
    fn poll_transmit(&mut self, now: Instant) -> Option<ProbeDatagram> {
        if self.done.is_some() || self.clock.waiting() {
            return None;
        }
        self.check_end(now);
        if self.done.is_some() {
            return None;
        }
        self.id = self.id.wrapping_add(1);
        self.probes += 1;
        self.rounds += 1;
        self.tries += 1;
        self.clock.sent(now, self.timer);
        Some(confirm_probe(self.nonce, self.id, self.size, self.overhead, Df::Do))
    }

    /// The local stack already knows a smaller path MTU (an earlier ICMP).
    fn on_local_refused(&mut self, now: Instant, known_pmtu: Option<u16>) {
        if self.done.is_some() {
            return;
        }
        self.probes -= 1;
        self.rounds -= 1;
        self.tries -= 1;
        self.clock.next_now();
        match known_pmtu {
            Some(known) if known < self.size && known >= self.min_size() => self.size = known,
            _ => {
                let note = format!("local stack refuses {}-byte probes", self.size);
                self.finish(now, None, note);
            }
        }
    }

    fn on_datagram(&mut self, now: Instant, bytes: &[u8]) {
        if self.done.is_some() || !self.clock.waiting() {
            return;
        }
        if let Ok(Reply::Report(r)) = wire::parse_reply(bytes)
            && r.nonce == self.nonce
            && r.confirm
            && r.probe_id == self.id
        {
            let note = format!("{} ICMP too-big message(s)", self.ptbs);
            self.finish(now, Some(r.probe_ip_len), note);
        }
    }

    fn on_icmp_too_big(&mut self, _now: Instant, ptb: TooBig<'_>) {
        if self.done.is_some() || !quotes_our_probe(ptb.quoted, self.nonce) {
            return;
        }
        let mtu = u16::try_from(ptb.mtu).unwrap_or(u16::MAX);
        if mtu < self.size && mtu >= self.min_size() {
            self.ptbs += 1;
            self.size = mtu;
            self.tries = 0;
            self.clock.next_now();
        }
    }

    fn on_unreachable(&mut self, _now: Instant) {
        // Acted on before the next probe, like every give-up rule.
        self.refused = true;
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.done.is_some() {
            return None;
        }
        Some(self.clock.poll_timeout())
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.done.is_some() {
            return;
        }
        if self.clock.expire(now) {
            self.check_end(now);
        }
    }

    fn outcome(&self) -> Option<&Measurement> {
        self.done.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::super::scripted::ScriptedPath;
    use super::*;

    fn cfg(link_mtu: u16) -> SessionConfig {
        let mut c = SessionConfig::new(link_mtu, false);
        c.probe_timer = Duration::from_secs(1);
        c
    }

    #[test]
    fn follows_ptbs_down_the_mtu_chain() {
        let mut path = ScriptedPath::new(&[9000, 1500, 1400, 1500]);
        let mut s = IcmpSession::new(&cfg(9000), 1, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.exact, m.probes), (Some(1400), true, 3), "9000 -> PTB 1500 -> PTB 1400 -> answer: {m:?}");
        assert_eq!(m.note, "2 ICMP too-big message(s)");
        assert!(path.sent.iter().all(|&(_, df)| df == Df::Do));
        assert_eq!(m.elapsed, 2 * path.rtt, "two half-RTT PTBs and one round trip");
    }

    #[test]
    fn follows_only_plausible_ptbs_about_its_own_probe() {
        let now = Instant::now();
        let mut s = IcmpSession::new(&cfg(9000), 1, now).unwrap();
        let first = s.poll_transmit(now).expect("first probe");
        assert_eq!((first.size, first.df), (9000, Df::Do));
        let other = confirm_probe(2, 1, 9000, 28, Df::Do);
        // A PTB quoting something else, one not smaller, one below the probe header: ignored.
        for (mtu, quoted) in [(1500, &other.payload), (9000, &first.payload), (40, &first.payload)] {
            s.on_icmp_too_big(now, TooBig { mtu, from_network: true, quoted });
            assert!(s.poll_transmit(now).is_none());
        }
        s.on_icmp_too_big(now, TooBig { mtu: 1500, from_network: true, quoted: &first.payload });
        let second = s.poll_transmit(now).expect("next size");
        assert_eq!(second.size, 1500);
        assert_eq!(s.ptbs, 1);
    }

    #[test]
    fn retries_then_gives_up_on_a_black_hole() {
        let mut path = ScriptedPath::new(&[1500, 1400, 1500]);
        path.black_hole = true;
        let mut s = IcmpSession::new(&cfg(1500), 1, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.probes, m.elapsed), (None, 3, Duration::from_secs(3)), "{m:?}");
        assert!(m.note.contains("black hole?"), "{m:?}");
    }

    #[test]
    fn a_lost_probe_is_retried() {
        let mut path = ScriptedPath::new(&[1500, 1500]);
        path.lose_first = 1;
        let mut s = IcmpSession::new(&cfg(1500), 1, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.probes, m.round_trips), (Some(1500), 2, 2), "{m:?}");
        assert_eq!(m.elapsed, Duration::from_secs(1) + path.rtt, "{m:?}");
    }

    #[test]
    fn a_locally_known_smaller_mtu_is_used_at_once() {
        let now = Instant::now();
        let mut s = IcmpSession::new(&cfg(9000), 1, now).unwrap();
        let _ = s.poll_transmit(now).unwrap();
        s.on_local_refused(now, Some(1500));
        let next = s.poll_transmit(now).unwrap();
        assert_eq!(next.size, 1500);
        s.on_local_refused(now, Some(1500));
        let m = s.outcome().expect("nothing smaller known");
        assert_eq!((m.pmtu, m.probes, m.note.as_str()), (None, 0, "local stack refuses 1500-byte probes"));
    }

    #[test]
    fn a_link_below_the_minimum_mtu_is_refused() {
        let e = IcmpSession::new(&SessionConfig::new(1200, true), 1, Instant::now()).unwrap_err();
        assert_eq!(e.to_string(), "largest size 1200 is below the minimum MTU 1280");
    }

    #[test]
    fn port_unreachable_ends_before_the_next_probe() {
        let mut path = ScriptedPath::new(&[1500, 1500]);
        path.no_responder = true;
        let mut s = IcmpSession::new(&cfg(1500), 1, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.note.as_str(), m.probes), (None, REFUSED, 1), "{m:?}");
    }
}
