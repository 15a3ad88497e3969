//! DPLPMTUD over UDP against `px fpmtud`, as `px probe --method dplpmtud`
//! does: `px-pmtud`'s RFC 8899 state machine chooses probe sizes; each probe
//! is an extended F-PMTUD *confirmation* (DF set, padded to the probed
//! size); the responder's report acknowledges it. RTT samples from the
//! reports feed `px-pmtud`'s RFC 9002 estimator, which sets the
//! PROBE_TIMER. ICMP is ignored (lsquic's behaviour: the search must work on
//! black-hole paths).
//!
//! The search ends at SEARCH_COMPLETE (answer: the PLPMTU) or in the ERROR
//! state (no answer: not even BASE_PLPMTU gets through).

use std::collections::HashMap;
use std::time::Instant;

use px_pmtud::dplpmtud::{ConfigError, Dplpmtud, DplpmtudConfig, State};
use px_pmtud::fpmtud::wire::{ProbeKind, ProbeRepr, Reply, parse_reply};
use px_pmtud::rtt::{ClassicRtt, RttEstimator, RttSample};

use super::{ProbeOutcome, Prober, ProberStats};
use crate::datagram::{Datagrams, UDP_OVERHEAD};
use crate::net::Endpoint;
use crate::packet::{Packet, Payload};
use crate::time::SimTime;

/// DPLPMTUD prober endpoint.
pub struct DplpmtudProber {
    machine: Dplpmtud,
    rtt: ClassicRtt,
    datagrams: Datagrams,
    base: Instant,
    nonce: u64,
    next_id: u32,
    /// probe id → (IP size, sent at).
    sent: HashMap<u32, (u16, SimTime)>,
    outcome: Option<ProbeOutcome>,
    stats: ProberStats,
}

impl DplpmtudProber {
    /// A prober with `config` (its `max_plpmtu` is the local link MTU);
    /// `nonce` is the measurement's secret.
    pub fn new(config: DplpmtudConfig, datagrams: Datagrams, base: Instant, nonce: u64) -> Result<Self, ConfigError> {
        let mut machine = Dplpmtud::new(config)?;
        machine.enable();
        Ok(DplpmtudProber {
            machine,
            rtt: ClassicRtt::default(),
            datagrams,
            base,
            nonce,
            next_id: 0,
            sent: HashMap::new(),
            outcome: None,
            stats: ProberStats::default(),
        })
    }

    /// The state machine.
    #[must_use]
    pub fn machine(&self) -> &Dplpmtud {
        &self.machine
    }

    fn check_done(&mut self, now: SimTime) {
        if self.outcome.is_some() {
            return;
        }
        let pmtu = match self.machine.state() {
            State::SearchComplete => Some(u32::from(self.machine.plpmtu())),
            State::Error => None,
            _ => return,
        };
        self.outcome = Some(ProbeOutcome { pmtu, at: now });
    }
}

impl Endpoint for DplpmtudProber {
    fn on_packet(&mut self, now: SimTime, pkt: &Packet) {
        let Payload::Udp { handle } = pkt.payload else { return };
        let nonce = self.nonce;
        let acked = self.datagrams.with(handle, |bytes| match parse_reply(bytes) {
            Ok(Reply::Report(r)) if r.nonce == nonce && r.confirm => Some(r.probe_id),
            _ => None,
        });
        let Some(id) = acked else { return };
        let Some((size, sent_at)) = self.sent.remove(&id) else { return };
        self.stats.replies += 1;
        self.rtt.on_ack(RttSample {
            latest_rtt: now - sent_at,
            ack_delay: std::time::Duration::ZERO,
            acked_packet_number: u64::from(id),
        });
        self.machine.on_probe_acked(now.to_instant(self.base), size);
        self.check_done(now);
    }

    fn on_timeout(&mut self, now: SimTime) {
        self.machine.handle_timeout(now.to_instant(self.base));
        self.check_done(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Packet> {
        if self.outcome.is_some() {
            return None;
        }
        let size = self.machine.poll_probe(now.to_instant(self.base), &self.rtt)?;
        let id = self.next_id;
        self.next_id += 1;
        self.rtt.on_packet_sent(u64::from(id));
        let payload_len = usize::from(size).saturating_sub(UDP_OVERHEAD as usize);
        let mut payload = vec![0u8; payload_len];
        let repr = ProbeRepr { kind: ProbeKind::Confirm, nonce: self.nonce, probe_id: id, ip_len: size };
        // A size below the probe header cannot happen (BASE_PLPMTU >= 68);
        // if it did, the responder would just see a malformed probe.
        let _ = repr.emit(&mut payload);
        self.sent.insert(id, (size, now));
        self.stats.probes += 1;
        self.stats.bytes += u64::from(size);
        let handle = self.datagrams.put(payload);
        Some(Packet::new(u32::from(size), true, Payload::Udp { handle }))
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        if self.outcome.is_some() {
            return None;
        }
        self.machine.poll_timeout().map(|t| SimTime::from_instant(t, self.base))
    }
}

impl Prober for DplpmtudProber {
    fn outcome(&self) -> Option<ProbeOutcome> {
        self.outcome
    }

    fn prober_stats(&self) -> ProberStats {
        self.stats
    }
}
