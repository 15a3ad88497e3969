//! The F-PMTUD responder (`px fpmtud`'s core), sans-I/O.
//!
//! The socket driver tells the responder what arrived — the UDP payload
//! bytes it has and the IP-level pieces (whole packet, kernel-reassembled
//! with the largest fragment size from `IP_RECVFRAGSIZE`, or every fragment
//! from a packet socket) — and sends what [`Responder::poll_transmit`]
//! returns. It answers legacy `FPMT` probes with the 4-byte legacy reply and
//! extended probes and confirmation probes with an extended report.
//!
//! Guarantees:
//! * **no amplification**: a reply's IP length (payload + configured
//!   overhead) never exceeds the IP bytes received for the probe; fragment
//!   records are truncated to fit, and no reply is sent if even the fixed
//!   part would not fit;
//! * **rate limit**: at most `burst` replies at once and `rate_per_sec` on
//!   average per source address (token bucket on the time passed in); the
//!   table of sources is bounded by `max_sources`, and a new source costs
//!   a bounded amount of work when it is full (a CLOCK hand, `Sources`);
//! * malformed input is ignored, never panics, and every decision is
//!   counted in [`ResponderStats`];
//! * bounded memory: the transmit queue holds at most `max_queued` replies.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::wire::{self, FragmentRecord, Fragments, LEGACY_REPLY_LEN, ProbeKind, ReportRepr, Request};

/// Responder limits and identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderConfig {
    /// MTU of the receiving link, reported to probers (0 = unknown).
    pub link_mtu: u16,
    /// IP + UDP header bytes a reply costs on the wire (28 for IPv4, 48 for IPv6).
    pub reply_overhead: u16,
    /// Average replies per second allowed per source address.
    pub rate_per_sec: u32,
    /// Replies a source may get at once (bucket depth). An F-PMTUD
    /// measurement needs one report for round 1 and up to 9 for round 2;
    /// a parallel-probing one (`px probe`'s `auto`) up to ~25 for round 1
    /// and up to ~70 for each refinement round (see
    /// `session::ParallelSession`). Replies are never larger than probes,
    /// so the bucket bounds effort, not amplification.
    pub burst: u32,
    /// Most source addresses tracked by the rate limiter.
    pub max_sources: usize,
    /// Most replies waiting for `poll_transmit`.
    pub max_queued: usize,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        Self { link_mtu: 0, reply_overhead: 28, rate_per_sec: 100, burst: 160, max_sources: 4096, max_queued: 1024 }
    }
}

/// How the probe arrived at the IP layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pieces<'a> {
    /// In one unfragmented IP packet of this total length.
    Whole {
        /// IP total length of the packet.
        ip_len: u16,
    },
    /// Reassembled by the kernel; only the largest fragment's IP length is
    /// known (`IP_RECVFRAGSIZE`).
    Reassembled {
        /// Largest fragment's IP total length.
        largest_fragment: u16,
    },
    /// Every fragment seen individually (packet socket). `reassembled` says
    /// whether they made up the whole datagram before the driver gave up
    /// waiting.
    Fragments {
        /// The fragments, in arrival order.
        records: &'a [FragmentRecord],
        /// Whether the whole datagram arrived.
        reassembled: bool,
    },
}

/// One received probe, as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival<'a> {
    /// Where it came from; replies go back there.
    pub source: SocketAddr,
    /// The UDP payload bytes available: all of them, or the part the first
    /// fragment carried if the datagram never reassembled (empty if the
    /// first fragment is missing).
    pub payload: &'a [u8],
    /// The IP-level pieces.
    pub pieces: Pieces<'a>,
}

/// A reply to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Destination (the probe's source).
    pub destination: SocketAddr,
    /// UDP payload.
    pub payload: Vec<u8>,
}

/// What the responder did with an arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A legacy 4-byte reply was queued.
    RepliedLegacy,
    /// An extended report was queued (possibly with a truncated list).
    RepliedReport,
    /// Not an F-PMTUD probe.
    NotFpmt,
    /// Starts like an F-PMTUD message but is malformed.
    Malformed,
    /// The first fragment (with the header) never arrived: nothing to answer.
    Headless,
    /// The pieces contradict themselves (e.g. no fragments, zero lengths).
    Inconsistent,
    /// The source exceeded its rate.
    RateLimited,
    /// The rate limiter's table is full of active sources.
    TableFull,
    /// Even the smallest reply would be larger than what was received.
    OverBudget,
    /// The transmit queue is full.
    QueueFull,
}

/// Counters for every decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// Arrivals handled.
    pub received: u64,
    /// Legacy probes answered or refused.
    pub legacy_probes: u64,
    /// Extended round-1 probes.
    pub probes: u64,
    /// Extended confirmation probes.
    pub confirms: u64,
    /// Arrivals that were not F-PMTUD.
    pub not_fpmt: u64,
    /// Malformed F-PMTUD messages.
    pub malformed: u64,
    /// Arrivals without the first fragment.
    pub headless: u64,
    /// Arrivals whose pieces contradicted themselves.
    pub inconsistent: u64,
    /// Arrivals that never reassembled (answered from fragments).
    pub partial: u64,
    /// Refused by the per-source rate limit.
    pub rate_limited: u64,
    /// Refused because the source table was full.
    pub table_full: u64,
    /// Sources looked at to find room for a new one in a full table (the
    /// work a flood of new, spoofed sources costs).
    pub eviction_checks: u64,
    /// Refused because no reply fits the received bytes.
    pub over_budget: u64,
    /// Reports whose fragment list was truncated to fit.
    pub truncated: u64,
    /// Refused because the transmit queue was full.
    pub queue_full: u64,
    /// Replies queued.
    pub replies: u64,
    /// UDP payload bytes of those replies.
    pub reply_bytes: u64,
    /// IP bytes received in probes that were answered.
    pub probe_bytes: u64,
}

/// Most sources looked at to find room for a new one.
const EVICTION_SCAN: usize = 16;

/// Token bucket state of one source, in thousandths of a token.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    milli_tokens: u64,
    last: Instant,
}

/// The F-PMTUD responder.
#[derive(Debug, Clone)]
pub struct Responder {
    config: ResponderConfig,
    sources: Sources,
    queue: VecDeque<Transmit>,
    stats: ResponderStats,
}

impl Responder {
    /// A responder with the given limits.
    #[must_use]
    pub fn new(config: ResponderConfig) -> Self {
        Self { config, sources: Sources::default(), queue: VecDeque::new(), stats: ResponderStats::default() }
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> &ResponderStats {
        &self.stats
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &ResponderConfig {
        &self.config
    }

    /// Next reply to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.queue.pop_front()
    }

    /// Handles one received probe (or anything else that reached the port).
    pub fn handle_arrival(&mut self, now: Instant, arrival: &Arrival<'_>) -> Verdict {
        self.stats.received += 1;
        let verdict = self.answer(now, arrival);
        let counter = match verdict {
            Verdict::RepliedLegacy | Verdict::RepliedReport => None,
            Verdict::NotFpmt => Some(&mut self.stats.not_fpmt),
            Verdict::Malformed => Some(&mut self.stats.malformed),
            Verdict::Headless => Some(&mut self.stats.headless),
            Verdict::Inconsistent => Some(&mut self.stats.inconsistent),
            Verdict::RateLimited => Some(&mut self.stats.rate_limited),
            Verdict::TableFull => Some(&mut self.stats.table_full),
            Verdict::OverBudget => Some(&mut self.stats.over_budget),
            Verdict::QueueFull => Some(&mut self.stats.queue_full),
        };
        if let Some(c) = counter {
            *c += 1;
        }
        verdict
    }

    fn answer(&mut self, now: Instant, a: &Arrival<'_>) -> Verdict {
        if a.payload.is_empty() {
            return Verdict::Headless;
        }
        let request = match wire::parse_request(a.payload) {
            Ok(r) => r,
            Err(wire::ParseError::NotFpmt) => return Verdict::NotFpmt,
            Err(wire::ParseError::TooShort { got, .. }) if got < wire::MAGIC.len() => {
                return Verdict::NotFpmt;
            }
            Err(_) => return Verdict::Malformed,
        };
        let Some(seen) = Seen::of(a) else {
            return Verdict::Inconsistent;
        };
        match request {
            Request::Legacy => self.stats.legacy_probes += 1,
            Request::Probe(p) if p.kind == ProbeKind::Probe => self.stats.probes += 1,
            Request::Probe(_) => self.stats.confirms += 1,
        }
        // The amplification budget, in reply payload bytes.
        let budget = seen
            .received_ip_bytes(a.payload.len(), self.config.reply_overhead)
            .saturating_sub(u64::from(self.config.reply_overhead));
        let payload = match request {
            Request::Legacy => {
                if budget < LEGACY_REPLY_LEN as u64 {
                    return Verdict::OverBudget;
                }
                wire::emit_legacy_reply(u32::from(seen.largest)).to_vec()
            }
            Request::Probe(p) => {
                let fixed = ReportRepr::len_with(0) as u64;
                if budget < fixed {
                    return Verdict::OverBudget;
                }
                let fit = usize::try_from((budget - fixed) / wire::FRAGMENT_RECORD_LEN as u64)
                    .unwrap_or(usize::MAX)
                    .min(wire::MAX_FRAGMENT_RECORDS);
                let records = seen.records;
                let n = records.len().min(fit);
                let report = ReportRepr {
                    nonce: p.nonce,
                    probe_id: p.probe_id,
                    confirm: p.kind == ProbeKind::Confirm,
                    reassembled: seen.reassembled,
                    fragmented: seen.fragmented,
                    truncated: n < records.len(),
                    link_mtu: self.config.link_mtu,
                    probe_ip_len: p.ip_len,
                    largest_ip_len: seen.largest,
                    fragments: Fragments::Records(&records[..n]),
                };
                let mut buf = vec![0u8; report.buffer_len()];
                if report.emit(&mut buf).is_err() {
                    // Cannot happen: the buffer has exactly buffer_len()
                    // bytes and n <= MAX_FRAGMENT_RECORDS; refuse rather than panic.
                    return Verdict::OverBudget;
                }
                if report.truncated {
                    self.stats.truncated += 1;
                }
                buf
            }
        };
        if self.queue.len() >= self.config.max_queued {
            return Verdict::QueueFull;
        }
        if let Some(refused) = self.take_token(now, a.source.ip()) {
            return refused;
        }
        if !seen.reassembled {
            self.stats.partial += 1;
        }
        self.stats.replies += 1;
        self.stats.reply_bytes += payload.len() as u64;
        self.stats.probe_bytes += seen.received_ip_bytes(a.payload.len(), self.config.reply_overhead);
        self.queue.push_back(Transmit { destination: a.source, payload });
        match request {
            Request::Legacy => Verdict::RepliedLegacy,
            Request::Probe(_) => Verdict::RepliedReport,
        }
    }

    /// Takes one token from `ip`'s bucket; `Some(verdict)` when refused.
    fn take_token(&mut self, now: Instant, ip: IpAddr) -> Option<Verdict> {
        let (rate, cap) = (self.config.rate_per_sec, u64::from(self.config.burst).saturating_mul(1000));
        let s = &mut self.sources;
        let i = match s.index.get(&ip) {
            Some(&i) => i,
            None if s.slots.len() < self.config.max_sources => {
                s.slots.push((ip, Bucket { milli_tokens: cap, last: now }));
                s.index.insert(ip, s.slots.len() - 1);
                s.slots.len() - 1
            }
            None => match s.reclaim(now, ip, rate, cap, &mut self.stats.eviction_checks) {
                Some(i) => i,
                None => return Some(Verdict::TableFull),
            },
        };
        let bucket = &mut s.slots[i].1;
        refill(bucket, now, rate, cap);
        if bucket.milli_tokens < 1000 {
            return Some(Verdict::RateLimited);
        }
        bucket.milli_tokens -= 1000;
        None
    }
}

/// The sources the rate limiter knows, a slot each, at most
/// `max_sources`. A full table makes room with a CLOCK hand: it looks at
/// no more than [`EVICTION_SCAN`] slots per new source, from where it
/// stopped last time, and gives the first idle one (its bucket refilled
/// completely: a fresh bucket would be identical) to the newcomer. So a
/// flood of new, spoofed sources costs a constant amount of work each,
/// not a sweep of the table, and an idle source anywhere in the table is
/// reached within `max_sources / EVICTION_SCAN` newcomers.
#[derive(Debug, Clone, Default)]
struct Sources {
    index: HashMap<IpAddr, usize>,
    slots: Vec<(IpAddr, Bucket)>,
    hand: usize,
}

impl Sources {
    /// The slot of an idle source, now `ip`'s with a full bucket; `None`
    /// if the slots looked at are all in use. `checks` counts the slots
    /// looked at.
    fn reclaim(&mut self, now: Instant, ip: IpAddr, rate: u32, cap: u64, checks: &mut u64) -> Option<usize> {
        for _ in 0..EVICTION_SCAN.min(self.slots.len()) {
            let i = self.hand % self.slots.len();
            self.hand = i + 1;
            *checks += 1;
            let (old, bucket) = &mut self.slots[i];
            refill(bucket, now, rate, cap);
            if bucket.milli_tokens >= cap {
                self.index.remove(old);
                self.slots[i] = (ip, Bucket { milli_tokens: cap, last: now });
                self.index.insert(ip, i);
                return Some(i);
            }
        }
        None
    }
}

fn refill(bucket: &mut Bucket, now: Instant, rate_per_sec: u32, cap: u64) {
    let elapsed = now.saturating_duration_since(bucket.last);
    // rate tokens/s = rate milli-tokens/ms.
    let add = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX).saturating_mul(u64::from(rate_per_sec));
    if add > 0 {
        bucket.milli_tokens = bucket.milli_tokens.saturating_add(add).min(cap);
        bucket.last = now;
    }
}

/// What the pieces say, normalised.
struct Seen<'a> {
    largest: u16,
    reassembled: bool,
    fragmented: bool,
    records: &'a [FragmentRecord],
    fragment_bytes: Option<u64>,
    whole_len: Option<u16>,
}

impl<'a> Seen<'a> {
    fn of(a: &Arrival<'a>) -> Option<Self> {
        match a.pieces {
            Pieces::Whole { ip_len } => (ip_len > 0).then_some(Seen {
                largest: ip_len,
                reassembled: true,
                fragmented: false,
                records: &[],
                fragment_bytes: None,
                whole_len: Some(ip_len),
            }),
            Pieces::Reassembled { largest_fragment } => (largest_fragment > 0).then_some(Seen {
                largest: largest_fragment,
                reassembled: true,
                fragmented: true,
                records: &[],
                fragment_bytes: None,
                whole_len: None,
            }),
            Pieces::Fragments { records, reassembled } => {
                // An IPv4 fragment carries a 20-byte header and some data;
                // anything shorter is a driver bug or forged metadata.
                if records.iter().any(|r| r.ip_len <= 20) {
                    return None;
                }
                let largest = records.iter().map(|r| r.ip_len).max()?;
                let single_whole = records.len() == 1 && records[0].offset == 0 && !records[0].more_fragments;
                Some(Seen {
                    largest,
                    reassembled: reassembled || single_whole,
                    fragmented: !single_whole,
                    records,
                    fragment_bytes: Some(records.iter().map(|r| u64::from(r.ip_len)).sum()),
                    whole_len: None,
                })
            }
        }
    }

    /// IP bytes that arrived for this probe (a lower bound when only the
    /// reassembled payload is known: one header plus the payload).
    fn received_ip_bytes(&self, payload_len: usize, overhead: u16) -> u64 {
        if let Some(l) = self.whole_len {
            return u64::from(l);
        }
        if let Some(b) = self.fragment_bytes {
            return b;
        }
        payload_len as u64 + u64::from(overhead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fpmtud::wire::{ProbeRepr, Reply, parse_reply};
    use std::net::Ipv6Addr;
    use std::time::Duration;

    fn src(last: u8) -> SocketAddr {
        SocketAddr::from(([198, 51, 100, last], 40000))
    }

    fn probe(kind: ProbeKind, ip_len: u16) -> Vec<u8> {
        let mut buf = vec![0u8; usize::from(ip_len - 28)];
        ProbeRepr { kind, nonce: 0xABCD, probe_id: 9, ip_len }.emit(&mut buf).expect("fits");
        buf
    }

    /// A 1500-byte IPv4 probe split by a 1400-byte link into two fragments.
    const SPLIT_1500_AT_1400: [FragmentRecord; 2] = [
        FragmentRecord { offset: 0, ip_len: 1396, more_fragments: true },
        FragmentRecord { offset: 1376, ip_len: 124, more_fragments: false },
    ];

    fn report(t: &Transmit) -> ReportRepr<'_> {
        match parse_reply(&t.payload) {
            Ok(Reply::Report(r)) => r,
            other => panic!("expected report, got {other:?}"),
        }
    }

    #[test]
    fn answers_legacy_whole_and_fragmented() {
        let mut r = Responder::new(ResponderConfig::default());
        let now = Instant::now();
        let payload = b"FPMT and some padding".to_vec();
        let a = Arrival { source: src(1), payload: &payload, pieces: Pieces::Whole { ip_len: 1500 } };
        assert_eq!(r.handle_arrival(now, &a), Verdict::RepliedLegacy);
        let t = r.poll_transmit().expect("reply");
        assert_eq!(t.destination, src(1));
        assert_eq!(t.payload, 1500u32.to_be_bytes());
        let recs = SPLIT_1500_AT_1400;
        let a = Arrival {
            source: src(1),
            payload: &payload,
            pieces: Pieces::Fragments { records: &recs, reassembled: true },
        };
        assert_eq!(r.handle_arrival(now, &a), Verdict::RepliedLegacy);
        assert_eq!(r.poll_transmit().expect("reply").payload, 1396u32.to_be_bytes());
        assert_eq!(r.stats().legacy_probes, 2);
        assert_eq!(r.stats().replies, 2);
    }

    #[test]
    fn answers_extended_probe_with_fragment_list() {
        let mut r = Responder::new(ResponderConfig { link_mtu: 1400, ..ResponderConfig::default() });
        let payload = probe(ProbeKind::Probe, 1500);
        let recs = SPLIT_1500_AT_1400;
        let a = Arrival {
            source: src(2),
            payload: &payload,
            pieces: Pieces::Fragments { records: &recs, reassembled: true },
        };
        assert_eq!(r.handle_arrival(Instant::now(), &a), Verdict::RepliedReport);
        let t = r.poll_transmit().expect("reply");
        let rep = report(&t);
        assert_eq!((rep.nonce, rep.probe_id), (0xABCD, 9));
        assert!(rep.reassembled && rep.fragmented && !rep.confirm && !rep.truncated);
        assert_eq!((rep.link_mtu, rep.probe_ip_len, rep.largest_ip_len), (1400, 1500, 1396));
        assert_eq!(rep.fragments.iter().collect::<Vec<_>>(), recs);
    }

    #[test]
    fn answers_confirm_and_kernel_reassembled() {
        let mut r = Responder::new(ResponderConfig::default());
        let now = Instant::now();
        let payload = probe(ProbeKind::Confirm, 1400);
        let a = Arrival { source: src(3), payload: &payload, pieces: Pieces::Whole { ip_len: 1400 } };
        assert_eq!(r.handle_arrival(now, &a), Verdict::RepliedReport);
        let t = r.poll_transmit().expect("reply");
        let rep = report(&t);
        assert!(rep.confirm && rep.reassembled && !rep.fragmented);
        assert_eq!(rep.largest_ip_len, 1400);
        let payload = probe(ProbeKind::Probe, 9000);
        let a = Arrival { source: src(3), payload: &payload, pieces: Pieces::Reassembled { largest_fragment: 1476 } };
        assert_eq!(r.handle_arrival(now, &a), Verdict::RepliedReport);
        let t = r.poll_transmit().expect("reply");
        let rep = report(&t);
        assert!(rep.fragmented && rep.reassembled && rep.fragments.is_empty());
        assert_eq!(rep.largest_ip_len, 1476);
        assert_eq!(r.stats().confirms, 1);
        assert_eq!(r.stats().probes, 1);
    }

    #[test]
    fn partial_datagram_is_reported_from_first_fragment() {
        let mut r = Responder::new(ResponderConfig::default());
        let full = probe(ProbeKind::Probe, 1500);
        // Only the first fragment arrived: its payload part is 1376 - 8 bytes.
        let first = &full[..1368];
        let recs = [FragmentRecord { offset: 0, ip_len: 1396, more_fragments: true }];
        let a = Arrival {
            source: src(4),
            payload: first,
            pieces: Pieces::Fragments { records: &recs, reassembled: false },
        };
        assert_eq!(r.handle_arrival(Instant::now(), &a), Verdict::RepliedReport);
        let t = r.poll_transmit().expect("reply");
        let rep = report(&t);
        assert!(!rep.reassembled && rep.fragmented);
        assert_eq!(rep.largest_ip_len, 1396);
        assert_eq!(r.stats().partial, 1);
        // Without the first fragment there is no header to answer.
        let a =
            Arrival { source: src(4), payload: &[], pieces: Pieces::Fragments { records: &recs, reassembled: false } };
        assert_eq!(r.handle_arrival(Instant::now(), &a), Verdict::Headless);
    }

    #[test]
    fn never_replies_with_more_bytes_than_received() {
        let mut r = Responder::new(ResponderConfig::default());
        let now = Instant::now();
        // A tiny probe (24-byte payload, 52 IP bytes) cannot pay for a 32-byte
        // report (60 IP bytes): no reply.
        let payload = probe(ProbeKind::Probe, 52);
        let a = Arrival { source: src(5), payload: &payload, pieces: Pieces::Whole { ip_len: 52 } };
        assert_eq!(r.handle_arrival(now, &a), Verdict::OverBudget);
        assert_eq!(r.poll_transmit(), None);
        // Every legal fragment (>= 28 bytes) pays for its 6-byte record, so
        // truncation needs a costly reply path: 2700 bytes of overhead
        // leaves (2800 - 2700 - 32) / 6 = 11 of 100 records.
        let mut r2 = Responder::new(ResponderConfig { reply_overhead: 2700, ..ResponderConfig::default() });
        let recs: Vec<FragmentRecord> =
            (0..100).map(|i| FragmentRecord { offset: i * 8, ip_len: 28, more_fragments: i < 99 }).collect();
        let payload = probe(ProbeKind::Probe, 828);
        let a = Arrival {
            source: src(5),
            payload: &payload,
            pieces: Pieces::Fragments { records: &recs, reassembled: true },
        };
        assert_eq!(r2.handle_arrival(now, &a), Verdict::RepliedReport);
        let t = r2.poll_transmit().expect("reply");
        assert!(t.payload.len() + 2700 <= 2800);
        let rep = report(&t);
        assert!(rep.truncated);
        assert_eq!(rep.fragments.len(), 11);
        assert_eq!(r2.stats().truncated, 1);
        // Without truncation pressure the full list goes out.
        assert_eq!(r.handle_arrival(now, &a), Verdict::RepliedReport);
        let t = r.poll_transmit().expect("reply");
        assert!(t.payload.len() + 28 <= 2800);
        assert_eq!(report(&t).fragments.len(), 100);
        assert_eq!(r.stats().over_budget, 1);
    }

    #[test]
    fn rate_limit_per_source() {
        let mut r = Responder::new(ResponderConfig { rate_per_sec: 10, burst: 3, ..ResponderConfig::default() });
        let now = Instant::now();
        let payload = b"FPMT".to_vec();
        let arrive = |r: &mut Responder, at: Instant, who: u8| {
            r.handle_arrival(
                at,
                &Arrival { source: src(who), payload: &payload, pieces: Pieces::Whole { ip_len: 100 } },
            )
        };
        for _ in 0..3 {
            assert_eq!(arrive(&mut r, now, 6), Verdict::RepliedLegacy);
        }
        assert_eq!(arrive(&mut r, now, 6), Verdict::RateLimited);
        // Another source has its own bucket.
        assert_eq!(arrive(&mut r, now, 7), Verdict::RepliedLegacy);
        // 10/s: one token every 100 ms.
        assert_eq!(arrive(&mut r, now + Duration::from_millis(99), 6), Verdict::RateLimited);
        assert_eq!(arrive(&mut r, now + Duration::from_millis(100), 6), Verdict::RepliedLegacy);
        assert_eq!(r.stats().rate_limited, 2);
    }

    #[test]
    fn source_table_is_bounded() {
        let mut r =
            Responder::new(ResponderConfig { max_sources: 2, burst: 2, rate_per_sec: 1, ..ResponderConfig::default() });
        let now = Instant::now();
        let payload = b"FPMT".to_vec();
        let arrive = |r: &mut Responder, at: Instant, who: u8| {
            r.handle_arrival(
                at,
                &Arrival { source: src(who), payload: &payload, pieces: Pieces::Whole { ip_len: 100 } },
            )
        };
        assert_eq!(arrive(&mut r, now, 1), Verdict::RepliedLegacy);
        assert_eq!(arrive(&mut r, now, 2), Verdict::RepliedLegacy);
        assert_eq!(arrive(&mut r, now, 3), Verdict::TableFull);
        // Once the others are idle (buckets refilled), they are evicted.
        assert_eq!(arrive(&mut r, now + Duration::from_secs(2), 3), Verdict::RepliedLegacy);
        assert_eq!(r.stats().table_full, 1);
    }

    /// Issue 27, "likely" (a), confirmed: a flood of new sources
    /// (spoofed, one probe each) into a full table costs a bounded number
    /// of sources looked at per arrival, not the whole table each time;
    /// and an idle source is still found and replaced.
    #[test]
    fn a_full_table_costs_bounded_work_per_new_source() {
        let mut r = Responder::new(ResponderConfig::default());
        let now = Instant::now();
        let max = r.config().max_sources;
        let arrive = |r: &mut Responder, at: Instant, n: u32| {
            let source = SocketAddr::from((Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(n)), 9));
            let v = r.handle_arrival(at, &Arrival { source, payload: b"FPMT", pieces: Pieces::Whole { ip_len: 100 } });
            while r.poll_transmit().is_some() {}
            v
        };
        for n in 0..max as u32 {
            assert_eq!(arrive(&mut r, now, n), Verdict::RepliedLegacy);
        }
        assert_eq!(r.stats().eviction_checks, 0);
        // 20,000 new sources while every known one is active.
        let flood = 20_000u32;
        for n in 0..flood {
            assert_eq!(arrive(&mut r, now, max as u32 + n), Verdict::TableFull);
        }
        let checks = r.stats().eviction_checks;
        assert!(checks <= u64::from(flood) * EVICTION_SCAN as u64, "{checks} sources looked at for {flood} arrivals");
        // Once the table's sources are idle, new ones take their places,
        // still at a bounded cost each.
        let later = now + Duration::from_secs(2);
        let before = r.stats().eviction_checks;
        for n in 0..max as u32 {
            assert_eq!(arrive(&mut r, later, 100_000 + n), Verdict::RepliedLegacy, "new source {n}");
        }
        assert_eq!(arrive(&mut r, later, 200_000), Verdict::TableFull, "the newcomers are active");
        let checks = r.stats().eviction_checks - before;
        assert!(checks <= (max as u64 + 1) * EVICTION_SCAN as u64, "{checks} sources looked at");
        // One idle source among active ones is found within one sweep.
        let mut r = Responder::new(ResponderConfig {
            max_sources: 64,
            rate_per_sec: 100,
            burst: 2,
            ..ResponderConfig::default()
        });
        assert_eq!(arrive(&mut r, now, 0), Verdict::RepliedLegacy);
        let t = now + Duration::from_millis(100);
        for n in 1..64 {
            assert_eq!(arrive(&mut r, t, n), Verdict::RepliedLegacy);
        }
        let refused = (0..64).take_while(|&n| arrive(&mut r, t, 1000 + n) == Verdict::TableFull).count();
        assert!(refused < 64 / EVICTION_SCAN + 1, "source 0 was idle; {refused} refusals before it was found");
    }

    #[test]
    fn malformed_and_foreign_input_is_ignored_and_counted() {
        let mut r = Responder::new(ResponderConfig::default());
        let now = Instant::now();
        let cases: [(&[u8], Verdict); 5] = [
            (b"GET / HTTP/1.1", Verdict::NotFpmt),
            (b"FP", Verdict::NotFpmt),
            (b"FPMTPX\x01\x01short", Verdict::Malformed),
            (b"FPMTPX\x01\x03xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", Verdict::Malformed),
            (b"FPMTPX\x01\x07xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", Verdict::Malformed),
        ];
        for (bytes, want) in cases {
            let a = Arrival { source: src(8), payload: bytes, pieces: Pieces::Whole { ip_len: 100 } };
            assert_eq!(r.handle_arrival(now, &a), want, "{bytes:?}");
        }
        let bogus = [FragmentRecord { offset: 0, ip_len: 12, more_fragments: false }];
        for records in [&[][..], &bogus[..]] {
            let a =
                Arrival { source: src(8), payload: b"FPMT", pieces: Pieces::Fragments { records, reassembled: true } };
            assert_eq!(r.handle_arrival(now, &a), Verdict::Inconsistent);
        }
        let s = r.stats();
        assert_eq!((s.not_fpmt, s.malformed, s.inconsistent, s.replies), (2, 3, 2, 0));
        assert_eq!(s.received, 7);
        assert_eq!(r.poll_transmit(), None);
    }

    #[test]
    fn queue_is_bounded() {
        let mut r = Responder::new(ResponderConfig { max_queued: 1, ..ResponderConfig::default() });
        let a = Arrival { source: src(9), payload: b"FPMT", pieces: Pieces::Whole { ip_len: 100 } };
        assert_eq!(r.handle_arrival(Instant::now(), &a), Verdict::RepliedLegacy);
        assert_eq!(r.handle_arrival(Instant::now(), &a), Verdict::QueueFull);
        assert!(r.poll_transmit().is_some());
        assert_eq!(r.stats().queue_full, 1);
    }

    proptest::proptest! {
        #[test]
        fn no_amplification_and_no_panic(
            valid_header in proptest::bool::ANY,
            kind in 0u8..3,
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..120),
            whole_len in proptest::num::u16::ANY,
            recs in proptest::collection::vec((proptest::num::u16::ANY, proptest::num::u16::ANY, proptest::bool::ANY), 0..60),
            reassembled in proptest::bool::ANY,
        ) {
            let mut payload = Vec::new();
            if valid_header {
                payload.extend_from_slice(b"FPMTPX\x01");
                payload.push(kind);
            }
            payload.extend_from_slice(&tail);
            let records: Vec<FragmentRecord> = recs
                .iter()
                .map(|&(offset, ip_len, mf)| FragmentRecord { offset, ip_len, more_fragments: mf })
                .collect();
            let mut r = Responder::new(ResponderConfig::default());
            let now = Instant::now();
            let variants = [
                (Pieces::Whole { ip_len: whole_len }, u64::from(whole_len)),
                (
                    Pieces::Reassembled { largest_fragment: whole_len },
                    payload.len() as u64 + 28,
                ),
                (
                    Pieces::Fragments { records: &records, reassembled },
                    records.iter().map(|f| u64::from(f.ip_len)).sum(),
                ),
            ];
            for (pieces, received) in variants {
                let a = Arrival { source: src(1), payload: &payload, pieces };
                let _ = r.handle_arrival(now, &a);
                while let Some(t) = r.poll_transmit() {
                    proptest::prop_assert!(t.payload.len() as u64 + 28 <= received,
                        "reply {} + 28 > received {}", t.payload.len(), received);
                }
            }
        }
    }
}
