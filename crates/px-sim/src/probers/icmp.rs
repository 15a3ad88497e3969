//! Classic path MTU discovery (RFC 1191) as a measuring tool does it
//! (tracepath, scamper): send a DF-set probe as large as the local link
//! allows; a router that cannot forward it answers ICMP "fragmentation
//! needed" with its next-hop MTU, and the next probe uses that size; the
//! destination's answer ends the search with the size that got through.
//!
//! Honest about its weakness: on an ICMP black hole the too-big probe just
//! vanishes, the tool retries `retries` times after `timeout` each and gives
//! up without an answer. A probe lost to ordinary loss is retried the same
//! way. Probes are extended F-PMTUD confirmation probes so the simulated
//! `px fpmtud` (the real responder) answers them; the answer only says
//! "arrived whole".

use std::collections::HashMap;
use std::time::Duration;

use px_pmtud::fpmtud::wire::{ProbeKind, ProbeRepr, Reply, parse_reply};

use super::{ProbeOutcome, Prober, ProberStats};
use crate::datagram::{Datagrams, UDP_OVERHEAD};
use crate::net::Endpoint;
use crate::packet::{Packet, Payload, QuotedPayload};
use crate::time::SimTime;

/// RFC 1191 §3: "a host MUST never reduce its estimate of the Path MTU below
/// 68 octets"; ICMP reports below it are ignored.
const MIN_MTU: u32 = 68;

/// Classic ICMP PMTUD prober endpoint.
pub struct IcmpProber {
    datagrams: Datagrams,
    nonce: u64,
    timeout: Duration,
    retries: u32,
    size: u32,
    next_id: u32,
    /// Handles of probes sent at the current size → probe id.
    outstanding: HashMap<u32, u32>,
    attempts: u32,
    send_now: bool,
    deadline: Option<SimTime>,
    outcome: Option<ProbeOutcome>,
    stats: ProberStats,
}

impl IcmpProber {
    /// A prober whose first probe is `local_mtu` bytes; each size is tried
    /// `retries` times, `timeout` apart.
    #[must_use]
    pub fn new(local_mtu: u32, datagrams: Datagrams, nonce: u64, timeout: Duration, retries: u32) -> Self {
        IcmpProber {
            datagrams,
            nonce,
            timeout,
            retries: retries.max(1),
            size: local_mtu,
            next_id: 0,
            outstanding: HashMap::new(),
            attempts: 0,
            send_now: true,
            deadline: None,
            outcome: None,
            stats: ProberStats::default(),
        }
    }
}

impl Endpoint for IcmpProber {
    fn on_packet(&mut self, now: SimTime, pkt: &Packet) {
        if self.outcome.is_some() {
            return;
        }
        match pkt.payload {
            Payload::TooBig { mtu, orig: QuotedPayload::Udp(handle), .. } => {
                // Only a report about a probe of ours, smaller than it, and
                // not below the IPv4 minimum (RFC 1191 §3).
                if !self.outstanding.contains_key(&handle) || mtu >= self.size || mtu < MIN_MTU {
                    return;
                }
                self.stats.ptbs += 1;
                self.size = mtu;
                self.outstanding.clear();
                self.attempts = 0;
                self.send_now = true;
            }
            Payload::Udp { handle } => {
                let nonce = self.nonce;
                let answered = self.datagrams.with(handle, |b| match parse_reply(b) {
                    Ok(Reply::Report(r)) if r.nonce == nonce && r.confirm && r.reassembled => Some(r.probe_ip_len),
                    _ => None,
                });
                if answered.is_some_and(|len| u32::from(len) == self.size) {
                    self.stats.replies += 1;
                    self.outcome = Some(ProbeOutcome { pmtu: Some(self.size), at: now });
                    self.deadline = None;
                }
            }
            _ => {}
        }
    }

    fn on_timeout(&mut self, now: SimTime) {
        if self.outcome.is_some() || self.deadline.is_none_or(|d| d > now) {
            return;
        }
        self.deadline = None;
        if self.attempts >= self.retries {
            // Neither an answer nor an ICMP error: a black hole (or a dead
            // path). Classic PMTUD has nothing to go on.
            self.outcome = Some(ProbeOutcome { pmtu: None, at: now });
        } else {
            self.send_now = true;
        }
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Packet> {
        if !self.send_now || self.outcome.is_some() {
            return None;
        }
        self.send_now = false;
        self.attempts += 1;
        self.deadline = Some(now + self.timeout);
        let id = self.next_id;
        self.next_id += 1;
        let ip_len = u16::try_from(self.size).unwrap_or(u16::MAX);
        let mut payload = vec![0u8; (self.size.saturating_sub(UDP_OVERHEAD)) as usize];
        let _ = ProbeRepr { kind: ProbeKind::Confirm, nonce: self.nonce, probe_id: id, ip_len }.emit(&mut payload);
        let handle = self.datagrams.put(payload);
        self.outstanding.insert(handle, id);
        self.stats.probes += 1;
        self.stats.bytes += u64::from(self.size);
        Some(Packet::new(self.size, true, Payload::Udp { handle }))
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        self.deadline
    }
}

impl Prober for IcmpProber {
    fn outcome(&self) -> Option<ProbeOutcome> {
        self.outcome
    }

    fn prober_stats(&self) -> ProberStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn follows_only_plausible_ptbs_about_its_own_probe() {
        let d = Datagrams::new();
        let mut icmp = IcmpProber::new(9000, d, 1, Duration::from_secs(1), 3);
        let first = icmp.poll_transmit(SimTime::ZERO).expect("first probe");
        assert_eq!((first.size, first.df), (9000, true));
        let h = sent_handle(&first);
        // A PTB quoting something else, one not smaller, one below 68: ignored.
        for bad in [ptb(1500, h + 100), ptb(9000, h), ptb(40, h)] {
            icmp.on_packet(SimTime::ZERO, &bad);
            assert!(icmp.poll_transmit(SimTime::ZERO).is_none());
        }
        icmp.on_packet(SimTime::from_millis(5), &ptb(1500, h));
        let second = icmp.poll_transmit(SimTime::from_millis(5)).expect("next size");
        assert_eq!(second.size, 1500);
        assert_eq!(icmp.prober_stats().ptbs, 1);
    }

    #[test]
    fn retries_then_gives_up_without_an_answer() {
        let mut icmp = IcmpProber::new(1500, Datagrams::new(), 1, Duration::from_secs(1), 3);
        let mut now = SimTime::ZERO;
        for _ in 0..3 {
            assert!(icmp.poll_transmit(now).is_some());
            now = icmp.poll_timeout().expect("armed");
            icmp.on_timeout(now);
        }
        assert_eq!(icmp.outcome(), Some(ProbeOutcome { pmtu: None, at: SimTime::from_millis(3000) }));
        assert_eq!(icmp.prober_stats().probes, 3);
    }
}
