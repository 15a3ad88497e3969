//! A scripted path for the session tests: a chain of link MTUs in front of
//! `px fpmtud`'s responder ([`Responder`]), in simulated time, with the
//! faults the sessions must survive: ICMP black holes, a last hop that
//! drops fragments, lost datagrams, no responder. It plays the driver and
//! the local stack too (it refuses DF-set sends above the link MTU, and
//! `Df::Do` sends above the path MTU an ICMP message taught it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{Df, Measurement, ProbeDatagram, Session, TooBig};
use crate::fpmtud::fragment::traverse;
use crate::fpmtud::responder::{Arrival, Pieces, Responder, ResponderConfig};

/// What reaches the prober.
enum Event {
    Datagram(Vec<u8>),
    TooBig { mtu: u32, quoted: Vec<u8> },
    Unreachable,
}

/// A path from the prober (whose link is `hops[0]`) to the responder.
pub struct ScriptedPath {
    hops: Vec<u16>,
    /// Round-trip time (ICMP messages come back after half of it).
    pub rtt: Duration,
    /// No router sends ICMP "too big".
    pub black_hole: bool,
    /// The last router drops IP fragments.
    pub fragment_filter: bool,
    /// Every n-th datagram the prober sends is lost (`Some(1)`: all).
    pub loss_every: Option<u32>,
    /// The first n datagrams the prober sends are lost.
    pub lose_first: usize,
    /// Nothing listens on the responder's port: ICMP "port unreachable".
    pub no_responder: bool,
    /// An ICMP "too big" comes back before the prober's next send and, as
    /// a connected UDP socket's pending error, makes that send fail
    /// (`EMSGSIZE`) without sending: what `px probe` once took for a
    /// local refusal.
    pub pending_error_eats_a_send: bool,
    pending_error: bool,
    /// The responder behaves like the paper authors' `mtud_destination`:
    /// it binds its port only after it saw the first probe (which draws an
    /// ICMP "port unreachable" that arrives just before its answer), and
    /// answers everything the legacy way (4 bytes: the largest IP length
    /// that arrived, no nonce).
    pub legacy_late_bind: bool,
    bound: bool,
    /// Time one send takes. With it, what came back meanwhile is handed to
    /// the session between sends, as `px probe`'s driver does (zero: a
    /// round leaves at one instant).
    pub send_gap: Duration,
    /// Simulated time.
    pub now: Instant,
    /// Datagrams put on the wire.
    pub sent: Vec<(u16, Df)>,
    learned_pmtu: Option<u16>,
    responder: Responder,
    events: BTreeMap<(Instant, u64), Event>,
    seq: u64,
}

impl ScriptedPath {
    /// A loss-free path over links of these MTUs, 20 ms RTT.
    pub fn new(hops: &[u16]) -> Self {
        let last = hops.last().copied().unwrap_or(0);
        let config = ResponderConfig { link_mtu: last, ..ResponderConfig::default() };
        ScriptedPath {
            hops: hops.to_vec(),
            rtt: Duration::from_millis(20),
            black_hole: false,
            fragment_filter: false,
            loss_every: None,
            lose_first: 0,
            no_responder: false,
            pending_error_eats_a_send: false,
            pending_error: false,
            legacy_late_bind: false,
            bound: false,
            send_gap: Duration::ZERO,
            now: Instant::now(),
            sent: Vec::new(),
            learned_pmtu: None,
            responder: Responder::new(config),
            events: BTreeMap::new(),
            seq: 0,
        }
    }

    fn schedule(&mut self, after: Duration, e: Event) {
        self.seq += 1;
        self.events.insert((self.now + after, self.seq), e);
    }

    fn send(&mut self, s: &mut dyn Session, d: ProbeDatagram) {
        let local = self.hops[0];
        let learned = self.learned_pmtu.unwrap_or(local);
        let pending = std::mem::take(&mut self.pending_error);
        if pending || (d.df != Df::Clear && d.size > local) || (d.df == Df::Do && d.size > learned) {
            s.on_local_refused(self.now, Some(learned));
            return;
        }
        self.sent.push((d.size, d.df));
        let n = self.sent.len();
        if n <= self.lose_first || self.loss_every.is_some_and(|every| n % every as usize == 0) {
            return;
        }
        let df = d.df != Df::Clear;
        let Some(frags) = traverse(d.size, df, &self.hops) else {
            let mtu = self.hops.iter().copied().find(|&m| m < d.size).unwrap_or(0);
            if !self.black_hole && df {
                self.pending_error = self.pending_error_eats_a_send;
                if d.df == Df::Do {
                    self.learned_pmtu = Some(mtu);
                }
                let quoted = d.payload[..d.payload.len().min(548)].to_vec();
                self.schedule(self.rtt / 2, Event::TooBig { mtu: u32::from(mtu), quoted });
            }
            return;
        };
        if frags.len() > 1 && self.fragment_filter {
            return;
        }
        if self.no_responder {
            self.schedule(self.rtt, Event::Unreachable);
            return;
        }
        let pieces = if frags.len() == 1 {
            Pieces::Whole { ip_len: d.size }
        } else {
            Pieces::Fragments { records: &frags, reassembled: true }
        };
        if self.legacy_late_bind {
            let largest = frags.iter().map(|f| f.ip_len).max().unwrap_or(d.size);
            let reply = u32::from(largest).to_be_bytes().to_vec();
            if self.bound {
                self.schedule(self.rtt, Event::Datagram(reply));
            } else {
                self.bound = true;
                self.schedule(self.rtt, Event::Unreachable);
                self.schedule(self.rtt + Duration::from_millis(1), Event::Datagram(reply));
            }
            return;
        }
        let source: SocketAddr = "198.51.100.1:40000".parse().expect("address");
        let _ = self.responder.handle_arrival(self.now, &Arrival { source, payload: &d.payload, pieces });
        while let Some(t) = self.responder.poll_transmit() {
            self.schedule(self.rtt, Event::Datagram(t.payload));
        }
    }

    /// Runs `s` to its outcome (panics if it never ends).
    pub fn drive(&mut self, s: &mut dyn Session) -> Measurement {
        for _ in 0..100_000 {
            s.handle_timeout(self.now);
            if let Some(m) = s.outcome() {
                return m.clone();
            }
            while let Some(d) = s.poll_transmit(self.now) {
                self.send(s, d);
                if !self.send_gap.is_zero() {
                    self.now += self.send_gap;
                    self.deliver(s);
                }
            }
            if let Some(m) = s.outcome() {
                return m.clone();
            }
            let next = self.events.keys().next().map(|k| k.0);
            let t = super::earliest(next, s.poll_timeout()).expect("a session waits for something");
            self.now = self.now.max(t);
            self.deliver(s);
        }
        panic!("the session never ended");
    }

    /// Hands `s` every event due by now.
    fn deliver(&mut self, s: &mut dyn Session) {
        while let Some(entry) = self.events.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            match entry.remove() {
                Event::Datagram(b) => s.on_datagram(self.now, &b),
                Event::TooBig { mtu, quoted } => {
                    if s.reads_icmp() {
                        s.on_icmp_too_big(self.now, TooBig { mtu, from_network: true, quoted: &quoted });
                    }
                }
                Event::Unreachable => s.on_unreachable(self.now),
            }
        }
    }
}
