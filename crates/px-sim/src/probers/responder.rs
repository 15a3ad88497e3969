//! `px-pmtud`'s F-PMTUD responder as a simulated endpoint.
//!
//! The simulator plays the socket driver: it collects the fragments of each
//! datagram as a packet socket would see them, hands the responder the
//! fragment list when the datagram is complete (or, after
//! `reassembly_timeout`, whatever arrived), and sends the responder's
//! replies back as UDP datagrams. All protocol decisions — what to answer,
//! rate limits, the no-amplification budget — are the responder's.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use px_pmtud::fpmtud::responder::{Arrival, Pieces, Responder, ResponderConfig, ResponderStats};
use px_pmtud::fpmtud::wire::FragmentRecord;

use crate::datagram::{Datagrams, UDP_OVERHEAD, first_fragment_payload};
use crate::net::Endpoint;
use crate::packet::{IPV4_HEADER, Packet, Payload};
use crate::time::SimTime;

/// The prober's address as the responder sees it (documentation range).
pub const PROBER_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)), 40_000);

struct Partial {
    handle: u32,
    records: Vec<FragmentRecord>,
    /// IP payload bytes received so far (sum over fragments).
    received: u32,
    /// IP payload length of the whole datagram, once the last fragment came.
    total: Option<u32>,
    /// UDP payload bytes the first fragment carried, if it came.
    first: Option<usize>,
    deadline: SimTime,
}

/// A simulated host running `px fpmtud`.
pub struct ResponderEndpoint {
    responder: Responder,
    datagrams: Datagrams,
    base: Instant,
    reassembly_timeout: Duration,
    partial: HashMap<u32, Partial>,
}

fn u16_len(v: u32) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

impl ResponderEndpoint {
    /// A responder on a link of `link_mtu` bytes. `base` stands for
    /// simulated time zero at the `px-pmtud` boundary.
    #[must_use]
    pub fn new(link_mtu: u32, datagrams: Datagrams, base: Instant, reassembly_timeout: Duration) -> Self {
        let config = ResponderConfig { link_mtu: u16_len(link_mtu), ..ResponderConfig::default() };
        ResponderEndpoint {
            responder: Responder::new(config),
            datagrams,
            base,
            reassembly_timeout,
            partial: HashMap::new(),
        }
    }

    /// The responder's counters.
    #[must_use]
    pub fn stats(&self) -> &ResponderStats {
        self.responder.stats()
    }

    fn deliver(&mut self, now: SimTime, handle: u32, pieces: Pieces<'_>, payload_len: Option<usize>) {
        let at = now.to_instant(self.base);
        let responder = &mut self.responder;
        self.datagrams.with(handle, |bytes| {
            let payload = match payload_len {
                Some(n) => &bytes[..n.min(bytes.len())],
                None => bytes,
            };
            // The verdict is counted in the responder's stats.
            let _ = responder.handle_arrival(at, &Arrival { source: PROBER_ADDR, payload, pieces });
        });
    }

    fn expire(&mut self, now: SimTime) {
        let due: Vec<u32> = self.partial.iter().filter(|(_, p)| p.deadline <= now).map(|(id, _)| *id).collect();
        for id in due {
            if let Some(p) = self.partial.remove(&id) {
                let pieces = Pieces::Fragments { records: &p.records, reassembled: false };
                self.deliver(now, p.handle, pieces, Some(p.first.unwrap_or(0)));
            }
        }
    }
}

impl Endpoint for ResponderEndpoint {
    fn on_packet(&mut self, now: SimTime, pkt: &Packet) {
        let Payload::Udp { handle } = pkt.payload else { return };
        if !pkt.frag.is_fragment() {
            self.deliver(now, handle, Pieces::Whole { ip_len: u16_len(pkt.size) }, None);
            return;
        }
        let data = pkt.size.saturating_sub(IPV4_HEADER);
        let deadline = now + self.reassembly_timeout;
        let p = self.partial.entry(pkt.ip_id).or_insert_with(|| Partial {
            handle,
            records: Vec::new(),
            received: 0,
            total: None,
            first: None,
            deadline,
        });
        p.records.push(FragmentRecord {
            offset: u16_len(pkt.frag.offset),
            ip_len: u16_len(pkt.size),
            more_fragments: pkt.frag.more,
        });
        p.received += data;
        if pkt.frag.offset == 0 {
            p.first = Some(first_fragment_payload(pkt));
        }
        if !pkt.frag.more {
            p.total = Some(pkt.frag.offset + data);
        }
        // Complete when the last fragment fixed the length and the bytes
        // add up (the simulator never duplicates or overlaps fragments).
        if p.total == Some(p.received) {
            if let Some(p) = self.partial.remove(&pkt.ip_id) {
                let pieces = Pieces::Fragments { records: &p.records, reassembled: true };
                self.deliver(now, p.handle, pieces, None);
            }
        }
    }

    fn on_timeout(&mut self, now: SimTime) {
        self.expire(now);
    }

    fn poll_transmit(&mut self, _now: SimTime) -> Option<Packet> {
        let t = self.responder.poll_transmit()?;
        let size = UDP_OVERHEAD + u32::try_from(t.payload.len()).unwrap_or(u32::MAX);
        let handle = self.datagrams.put(t.payload);
        Some(Packet::new(size, false, Payload::Udp { handle }))
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        self.partial.values().map(|p| p.deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::fragment;
    use px_pmtud::fpmtud::wire::{ProbeKind, ProbeRepr, Reply, parse_reply};

    fn probe(d: &Datagrams, size: u32, kind: ProbeKind) -> Packet {
        let mut payload = vec![0u8; (size - UDP_OVERHEAD) as usize];
        let repr = ProbeRepr { kind, nonce: 42, probe_id: 7, ip_len: u16_len(size) };
        repr.emit(&mut payload).expect("room for the header");
        let handle = d.put(payload);
        let mut p = Packet::new(size, kind == ProbeKind::Confirm, Payload::Udp { handle });
        p.ip_id = 9;
        p
    }

    fn reply(d: &Datagrams, r: &mut ResponderEndpoint) -> (u16, bool, bool, usize) {
        let pkt = r.poll_transmit(SimTime::ZERO).expect("a reply");
        assert!(r.poll_transmit(SimTime::ZERO).is_none());
        let Payload::Udp { handle } = pkt.payload else { panic!("not UDP") };
        d.with(handle, |b| match parse_reply(b) {
            Ok(Reply::Report(rep)) => {
                assert_eq!((rep.nonce, rep.probe_id), (42, 7));
                (rep.largest_ip_len, rep.reassembled, rep.fragmented, rep.fragments.len())
            }
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn reports_the_largest_fragment_of_a_reassembled_probe() {
        let d = Datagrams::new();
        let mut r = ResponderEndpoint::new(1500, d.clone(), Instant::now(), Duration::from_secs(1));
        let mut pieces = Vec::new();
        fragment(&probe(&d, 9000, ProbeKind::Probe), 1400, |p| pieces.push(p));
        // Arrival order must not matter.
        pieces.reverse();
        for p in &pieces {
            r.on_packet(SimTime::ZERO, p);
        }
        assert_eq!(reply(&d, &mut r), (1396, true, true, pieces.len()));
        assert!(r.poll_timeout().is_none(), "nothing left waiting");
    }

    #[test]
    fn answers_whole_confirmations_and_incomplete_probes_after_the_timeout() {
        let d = Datagrams::new();
        let mut r = ResponderEndpoint::new(1500, d.clone(), Instant::now(), Duration::from_secs(1));
        r.on_packet(SimTime::ZERO, &probe(&d, 1400, ProbeKind::Confirm));
        assert_eq!(reply(&d, &mut r), (1400, true, false, 0), "no fragment list for a whole packet");

        let mut pieces = Vec::new();
        fragment(&probe(&d, 4000, ProbeKind::Probe), 1500, |p| pieces.push(p));
        pieces.pop(); // the last fragment is lost
        for p in &pieces {
            r.on_packet(SimTime::ZERO, p);
        }
        assert!(r.poll_transmit(SimTime::ZERO).is_none(), "waits for the rest");
        assert_eq!(r.poll_timeout(), Some(SimTime::from_millis(1000)));
        r.on_timeout(SimTime::from_millis(1000));
        assert_eq!(reply(&d, &mut r), (1500, false, true, 2));
    }
}
