//! One question, not a search: does the path carry exactly `size` bytes,
//! DF set, whole? What a gateway asks before it trusts a neighbour's
//! claimed iMTU (issue 35 item 5, RFC 8899 §4.1: a size is confirmed only
//! when a probe of that size is acknowledged by the remote end).
//!
//! Every datagram of the session is a DF-set confirmation probe of exactly
//! `size` bytes carrying the session's nonce, which the caller draws fresh
//! for each session: the nonce reaches the responder only inside a probe
//! of the full size that the path did not drop, so a responder behind a
//! smaller hop cannot echo it, whatever it is willing to claim (a
//! measurement whose first probe is DF-clear or smaller would hand it the
//! nonce in fragments). A report is taken only if it echoes the nonce and
//! the id of a probe sent, answers a confirmation, says the probe arrived
//! in one piece (not fragmented: a hop that clears DF and fragments is
//! not a path that carries the size) and names `size` as both the probe's
//! length and the largest received. Up to `icmp_tries` probes, a retry
//! timer apart (loss); an ICMP "too big" quoting a probe ends the session
//! at once (the path is smaller, and says so).

use std::time::{Duration, Instant};

use super::{
    Df, Measurement, OneAtATime, ProbeDatagram, REFUSED, Session, SessionConfig, SessionError, TooBig, confirm_probe,
    quotes_our_probe,
};
use crate::fpmtud::wire::{self, Reply};

/// Whether a path carries one size.
#[derive(Debug)]
pub struct ConfirmSession {
    nonce: u64,
    overhead: u16,
    size: u16,
    max_tries: u8,
    timer: Duration,
    start: Instant,
    /// Probes sent; their ids are `1..=sent`.
    sent: u32,
    clock: OneAtATime,
    refused: bool,
    /// Reports that echoed the nonce but could not be true or said the
    /// probe came in pieces.
    refuted: u32,
    done: Option<Measurement>,
}

impl ConfirmSession {
    /// Asks whether the path carries `cfg.link_mtu` bytes; `nonce` must be
    /// fresh (drawn for this session only).
    pub fn new(cfg: &SessionConfig, nonce: u64, now: Instant) -> Result<Self, SessionError> {
        if cfg.link_mtu < cfg.min_mtu() {
            return Err(SessionError::LinkMtuBelowMinimum { link_mtu: cfg.link_mtu, min: cfg.min_mtu() });
        }
        Ok(ConfirmSession {
            nonce,
            overhead: cfg.overhead(),
            size: cfg.link_mtu,
            max_tries: cfg.icmp_tries.max(1),
            timer: (cfg.initial_rtt * 3).max(cfg.probe_timer),
            start: now,
            sent: 0,
            clock: OneAtATime::new(now, cfg.timeout),
            refused: false,
            refuted: 0,
            done: None,
        })
    }

    fn finish(&mut self, now: Instant, carried: bool, note: String) {
        self.clock.next_now();
        let answer = carried.then_some(self.size);
        self.done = Some(Measurement {
            method: "confirm".into(),
            pmtu: answer,
            exact: false,
            pmtu_high: answer,
            round_trips: self.sent,
            probes: self.sent,
            elapsed: now - self.start,
            link_mtu: self.size,
            note,
            authenticated: true,
        });
    }

    fn check_end(&mut self, now: Instant) {
        if self.clock.past_bound(now) {
            self.finish(now, false, "timed out".into());
        } else if self.refused {
            self.finish(now, false, REFUSED.into());
        } else if self.sent >= u32::from(self.max_tries) {
            let mut note = format!("{} DF-set probes of {} bytes not confirmed", self.sent, self.size);
            if self.refuted > 0 {
                note.push_str(&format!(" ({} report(s) that cannot be true refused)", self.refuted));
            }
            self.finish(now, false, note);
        }
    }
}

impl Session for ConfirmSession {
    fn poll_transmit(&mut self, now: Instant) -> Option<ProbeDatagram> {
        if self.done.is_some() || self.clock.waiting() {
            return None;
        }
        self.check_end(now);
        if self.done.is_some() {
            return None;
        }
        self.sent += 1;
        self.clock.sent(now, self.timer);
        Some(confirm_probe(self.nonce, self.sent, self.size, self.overhead, Df::Probe))
    }

    fn on_local_refused(&mut self, now: Instant, _known_pmtu: Option<u16>) {
        if self.done.is_none() {
            self.sent -= 1;
            let note = format!("the local stack refuses {}-byte probes", self.size);
            self.finish(now, false, note);
        }
    }

    fn on_datagram(&mut self, now: Instant, bytes: &[u8]) {
        if self.done.is_some() {
            return;
        }
        let Ok(Reply::Report(r)) = wire::parse_reply(bytes) else { return };
        if r.nonce != self.nonce || r.probe_id == 0 || r.probe_id > self.sent {
            return;
        }
        if !r.confirm || r.fragmented || r.probe_ip_len != self.size || r.largest_ip_len != self.size {
            self.refuted += 1;
            return;
        }
        self.finish(now, true, format!("{} bytes arrived whole with DF set", self.size));
    }

    fn on_icmp_too_big(&mut self, now: Instant, ptb: TooBig<'_>) {
        if self.done.is_some() || !ptb.from_network || !quotes_our_probe(ptb.quoted, self.nonce) {
            return;
        }
        if ptb.mtu < u32::from(self.size) {
            let note = format!("a hop of MTU {} refused {}-byte probes", ptb.mtu, self.size);
            self.finish(now, false, note);
        }
    }

    fn on_unreachable(&mut self, _now: Instant) {
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
    use crate::fpmtud::wire::{Fragments, ReportRepr};

    fn cfg(size: u16) -> SessionConfig {
        let mut c = SessionConfig::new(size, false);
        c.probe_timer = Duration::from_secs(1);
        c.icmp_tries = 3;
        c
    }

    #[test]
    fn a_path_that_carries_the_size_confirms_it_in_one_round_trip() {
        let mut path = ScriptedPath::new(&[9000, 9000, 9000]);
        let mut s = ConfirmSession::new(&cfg(9000), 7, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.probes, m.elapsed), (Some(9000), 1, path.rtt), "{m:?}");
        assert!(path.sent.iter().all(|&(size, df)| size == 9000 && df == Df::Probe), "{:?}", path.sent);
    }

    #[test]
    fn a_smaller_hop_refutes_it_with_icmp_or_without() {
        let mut path = ScriptedPath::new(&[9000, 1500, 9000]);
        let mut s = ConfirmSession::new(&cfg(9000), 7, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.probes), (None, 1), "the hop's ICMP ends it: {m:?}");
        assert!(m.note.contains("MTU 1500"), "{m:?}");
        let mut path = ScriptedPath::new(&[9000, 1500, 9000]);
        path.black_hole = true;
        let mut s = ConfirmSession::new(&cfg(9000), 7, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.probes, m.elapsed), (None, 3, Duration::from_secs(3)), "{m:?}");
        // Every probe was of the full size: nothing smaller could hand a
        // responder the nonce.
        assert!(path.sent.iter().all(|&(size, _)| size == 9000));
    }

    #[test]
    fn a_lost_probe_is_retried() {
        let mut path = ScriptedPath::new(&[9000, 9000]);
        path.lose_first = 2;
        let mut s = ConfirmSession::new(&cfg(9000), 7, path.now).unwrap();
        let m = path.drive(&mut s);
        assert_eq!((m.pmtu, m.probes), (Some(9000), 3), "{m:?}");
    }

    /// A responder that knows the nonce (a hop cleared DF and fragmented
    /// the probe) but reports pieces, or reports sizes that are not the
    /// probe's, or a report with another nonce or id: none confirms.
    #[test]
    fn only_a_report_of_the_whole_probe_with_its_nonce_confirms() {
        let now = Instant::now();
        let mut s = ConfirmSession::new(&cfg(9000), 7, now).unwrap();
        let p = s.poll_transmit(now).unwrap();
        assert_eq!((p.size, p.df), (9000, Df::Probe));
        let report = |nonce, probe_id, confirm, fragmented, probe_ip_len, largest_ip_len| {
            let r = ReportRepr {
                nonce,
                probe_id,
                confirm,
                reassembled: true,
                fragmented,
                truncated: false,
                link_mtu: 9000,
                probe_ip_len,
                largest_ip_len,
                fragments: Fragments::none(),
            };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b).unwrap();
            b
        };
        for bad in [
            report(8, 1, true, false, 9000, 9000),
            report(7, 2, true, false, 9000, 9000),
            report(7, 1, false, false, 9000, 9000),
            report(7, 1, true, true, 9000, 1500),
            report(7, 1, true, false, 9000, 1500),
            report(7, 1, true, false, 1500, 1500),
        ] {
            s.on_datagram(now, &bad);
            assert!(s.outcome().is_none());
        }
        assert_eq!(s.refuted, 4);
        s.on_datagram(now, &report(7, 1, true, false, 9000, 9000));
        assert_eq!(s.outcome().unwrap().pmtu, Some(9000));
    }
}
