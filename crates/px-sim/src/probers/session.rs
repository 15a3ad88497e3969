//! A `px-pmtud` probe session ([`Session`]) as a simulated endpoint: the
//! methods `px probe` runs — F-PMTUD with its early fallback to DPLPMTUD
//! (`auto`), DPLPMTUD, classic ICMP PMTUD — with the same policy (probe
//! ids and nonces, PTB validation, retries, give-up rules). This file only
//! moves bytes and converts time (simulated nanoseconds ↔ `Instant`) at the
//! boundary; every decision is the session's.

use std::time::Instant;

use px_pmtud::session::{Df, Session, TooBig};

use super::{ProbeOutcome, Prober, ProberStats};
use crate::datagram::Datagrams;
use crate::net::Endpoint;
use crate::packet::{Packet, Payload, QuotedPayload};
use crate::time::SimTime;

/// A prober endpoint driving session `S`.
pub struct SessionProber<S> {
    session: S,
    datagrams: Datagrams,
    base: Instant,
    outcome: Option<ProbeOutcome>,
    stats: ProberStats,
}

impl<S: Session> SessionProber<S> {
    /// An endpoint for `session`, which must have been built at `base`,
    /// the instant standing for simulated time zero.
    pub fn new(session: S, datagrams: Datagrams, base: Instant) -> Self {
        SessionProber { session, datagrams, base, outcome: None, stats: ProberStats::default() }
    }

    /// The session.
    #[must_use]
    pub fn session(&self) -> &S {
        &self.session
    }

    fn check_done(&mut self, now: SimTime) {
        if self.outcome.is_none()
            && let Some(m) = self.session.outcome()
        {
            self.outcome = Some(ProbeOutcome { pmtu: m.pmtu.map(u32::from), at: now });
        }
    }
}

impl<S: Session> Endpoint for SessionProber<S> {
    fn on_packet(&mut self, now: SimTime, pkt: &Packet) {
        if self.outcome.is_some() {
            return;
        }
        let at = now.to_instant(self.base);
        let session = &mut self.session;
        match pkt.payload {
            Payload::Udp { handle } => self.datagrams.with(handle, |bytes| session.on_datagram(at, bytes)),
            // What IP_RECVERR delivers: the MTU and the quoted datagram
            // (the simulated routers quote all of it, as Linux does up to
            // 576 bytes, which covers the probe header).
            Payload::TooBig { mtu, orig: QuotedPayload::Udp(handle), .. } if session.reads_icmp() => {
                self.datagrams.with(handle, |quoted| {
                    session.on_icmp_too_big(at, TooBig { mtu, from_network: true, quoted });
                });
            }
            _ => {}
        }
        self.check_done(now);
    }

    fn on_timeout(&mut self, now: SimTime) {
        self.session.handle_timeout(now.to_instant(self.base));
        self.check_done(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Packet> {
        if self.outcome.is_some() {
            return None;
        }
        let d = self.session.poll_transmit(now.to_instant(self.base));
        self.check_done(now);
        let d = d?;
        self.stats.probes += 1;
        self.stats.bytes += u64::from(d.size);
        let handle = self.datagrams.put(d.payload);
        Some(Packet::new(u32::from(d.size), d.df != Df::Clear, Payload::Udp { handle }))
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        if self.outcome.is_some() {
            return None;
        }
        self.session.poll_timeout().map(|t| SimTime::from_instant(t, self.base))
    }
}

impl<S: Session> Prober for SessionProber<S> {
    fn outcome(&self) -> Option<ProbeOutcome> {
        self.outcome
    }

    fn prober_stats(&self) -> ProberStats {
        self.stats
    }

    fn fell_back(&self) -> bool {
        self.session.fell_back()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use px_pmtud::fpmtud::wire::parse_reply;
    use px_pmtud::session::{AutoSession, IcmpSession, SessionConfig};

    use super::*;

    fn ptb(mtu: u32, handle: u32) -> Packet {
        Packet::new(56, false, Payload::TooBig { mtu, orig_size: 9000, orig: QuotedPayload::Udp(handle) })
    }

    fn sent_handle(p: &Packet) -> u32 {
        match p.payload {
            Payload::Udp { handle } => handle,
            _ => u32::MAX,
        }
    }

    fn icmp(base: Instant) -> (SessionProber<IcmpSession>, Datagrams) {
        let mut cfg = SessionConfig::new(9000, false);
        cfg.probe_timer = Duration::from_secs(1);
        cfg.initial_rtt = Duration::from_millis(333);
        let d = Datagrams::new();
        (SessionProber::new(IcmpSession::new(&cfg, 1, base).expect("session"), d.clone(), base), d)
    }

    #[test]
    fn probes_carry_the_session_s_size_df_and_bytes() {
        let base = Instant::now();
        let (mut p, d) = icmp(base);
        let first = p.poll_transmit(SimTime::ZERO).expect("first probe");
        assert_eq!((first.size, first.df), (9000, true));
        assert_eq!(d.with(sent_handle(&first), <[u8]>::len), 9000 - 28);
        assert!(p.poll_transmit(SimTime::ZERO).is_none(), "one probe at a time");
        assert_eq!(p.prober_stats(), ProberStats { probes: 1, bytes: 9000 });
        assert_eq!(p.poll_timeout(), Some(SimTime::from_millis(1000)));
    }

    #[test]
    fn icmp_too_big_reaches_the_session_with_the_quoted_probe() {
        let base = Instant::now();
        let (mut p, _) = icmp(base);
        let first = p.poll_transmit(SimTime::ZERO).expect("first probe");
        // A PTB quoting a datagram that is not ours: ignored.
        p.on_packet(SimTime::from_millis(5), &ptb(1500, sent_handle(&first) + 100));
        assert!(p.poll_transmit(SimTime::from_millis(5)).is_none());
        p.on_packet(SimTime::from_millis(5), &ptb(1500, sent_handle(&first)));
        let second = p.poll_transmit(SimTime::from_millis(5)).expect("next size");
        assert_eq!(second.size, 1500);
    }

    #[test]
    fn the_outcome_is_stamped_with_simulated_time() {
        let base = Instant::now();
        let (mut p, _) = icmp(base);
        let mut now = SimTime::ZERO;
        for _ in 0..3 {
            assert!(p.poll_transmit(now).is_some());
            now = p.poll_timeout().expect("armed");
            p.on_timeout(now);
        }
        assert!(p.poll_transmit(now).is_none());
        assert_eq!(p.outcome(), Some(ProbeOutcome { pmtu: None, at: SimTime::from_millis(3000) }));
        assert_eq!(p.prober_stats().probes, 3);
        assert!(p.poll_timeout().is_none(), "nothing left to do");
    }

    #[test]
    fn auto_sends_the_f_pmtud_probe_then_parallel_df_probes_and_a_control() {
        let base = Instant::now();
        let d = Datagrams::new();
        let s = AutoSession::new(&SessionConfig::new(9000, false), 1, base).expect("session");
        let mut p = SessionProber::new(s, d.clone(), base);
        let round1: Vec<Packet> = std::iter::from_fn(|| p.poll_transmit(SimTime::ZERO)).collect();
        let first = &round1[0];
        assert_eq!((first.size, first.df), (9000, false), "the F-PMTUD probe first");
        assert!(d.with(sent_handle(first), |b| parse_reply(b).is_err()), "a probe, not a reply");
        let df: Vec<u32> = round1[1..].iter().inspect(|x| assert!(x.df)).map(|x| x.size).collect();
        assert_eq!((df[0], df[df.len() - 1]), (9000, 68), "largest first, the control last: {df:?}");
        assert!(df.windows(2).all(|w| w[0] > w[1]), "{df:?}");
        // A PTB about the DF-clear probe says nothing; the round waits.
        p.on_packet(SimTime::from_millis(1), &ptb(1500, sent_handle(first)));
        assert!(p.poll_transmit(SimTime::from_millis(1)).is_none());
        assert!(!p.fell_back());
    }
}
