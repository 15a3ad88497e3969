//! The survey's conversations with one target, as sans-I/O state machines:
//! packets in ([`TcpExchange::on_tcp`], [`TcpExchange::on_unreachable`],
//! [`HopTest::on_time_exceeded`]), packets out (`poll_transmit(now)`), a
//! deadline out (`poll_timeout`), time always passed in.
//!
//! Timers count from when a packet *leaves*, not from when it was made: a
//! packet may wait in the rate limiter's queue behind the same address's
//! other targets, and a test that decided on its own clock while its
//! probes waited would decide on probes that never left (and send them
//! after it decided). So `poll_transmit(now)` is where a timer starts, a
//! retransmission is made only when its timer runs out after the previous
//! copy left, and a test that decides drops what it had not sent yet
//! (`late_probes` counts anything sent after a decision: none).
//!
//! [`TcpExchange`] is a minimal TCP client of our own (the kernel's TCP
//! never sends a segment as IP fragments): SYN with MSS 1460, the request
//! whole or cut into IP fragments, in-order receipt with an ACK per
//! segment, the request resent on its own timer (so a lost fragment is a
//! retransmission, not a failed test), RST at the end so the server keeps
//! no state, and an RST for whatever the server sends after the exchange
//! ended (a SYN-ACK after the deadline). An ICMP "administratively
//! prohibited" (or port or protocol unreachable) is a refusal, not a loss.
//! In PMTUD mode (scamper tbit's PMTUD test) it answers the first
//! full-sized segment with "fragmentation needed" instead of an ACK and
//! watches how that data comes again.
//!
//! [`HopTest`] finds how far fragments get (see its notes).

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

use px_wire::tcp::flags;

use crate::packet::{Seg, TcpIn, frag_needed, fragment, set_ttl, tcp_packet};
use crate::record::{FragmentPath, Pmtud, content_length, header_end};

/// How a [`TcpExchange`] talks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Fetch the answer; the request as one packet (`fragments` < 2) or
    /// cut into that many IP fragments.
    Fetch { fragments: usize },
    /// The ICMP PMTUD test: "fragmentation needed" with this MTU.
    Pmtud { mtu: u16 },
}

/// Timers and limits of a [`TcpExchange`].
#[derive(Clone, Copy, Debug)]
pub struct TcpConfig {
    /// Give up when nothing new of ours has left for this long (the SYN,
    /// the request, an ACK of new data: not a retransmission), and at the
    /// latest [`MAX_TIMEOUTS`] times this after the first SYN left.
    pub timeout: Duration,
    /// First retransmission timeout (SYN, request), doubled on each.
    pub rto: Duration,
    /// Answer bytes kept (the fingerprint needs the header and the first
    /// body bytes; the length comes from `Content-Length`).
    pub max_answer: usize,
    /// Our MSS option.
    pub mss: u16,
    /// "Fragmentation needed" messages sent before the PMTUD test fails.
    pub max_ptb: u32,
}

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig {
            timeout: Duration::from_secs(5),
            rto: Duration::from_secs(1),
            max_answer: 64 << 10,
            mss: 1460,
            max_ptb: 3,
        }
    }
}

/// The longest an exchange lasts, in timeouts from its first SYN.
pub const MAX_TIMEOUTS: u32 = 4;

/// How an exchange ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TcpOutcome {
    /// The answer's bytes (complete, or as far as `max_answer`).
    Answer(Vec<u8>),
    /// No answer: why.
    Failed(String),
    /// The PMTUD test's verdict and, if inconclusive, why.
    Pmtud(Pmtud, Option<String>),
}

/// Addresses and ports of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ends {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    SynSent,
    Open,
    /// PMTUD: "fragmentation needed" sent for the segment at `seq`.
    AwaitSmaller {
        seq: u32,
        ptbs: u32,
    },
    Done,
}

/// What a queued packet is: its timer starts when it leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Syn,
    /// A piece of the request (whole, or one fragment): `last` arms the
    /// retransmission timer.
    Request {
        last: bool,
    },
    Ack,
    Ptb,
    Rst,
}

/// One TCP connection of the survey (see the module notes).
#[derive(Debug)]
pub struct TcpExchange {
    mode: Mode,
    cfg: TcpConfig,
    ends: Ends,
    iss: u32,
    request: Vec<u8>,
    state: State,
    rcv_nxt: u32,
    request_acked: bool,
    answer: Vec<u8>,
    /// A timeout after the last new packet of ours left; extended by the
    /// PMTUD test.
    deadline: Option<Duration>,
    /// When the first SYN left.
    first_sent: Option<Duration>,
    /// Armed when a SYN or the request leaves; `None` while a copy waits.
    next_rto: Option<Duration>,
    rto: Duration,
    ident: u16,
    /// Packets waiting to leave; `true`: a new one (not a retransmission).
    tx: VecDeque<(Vec<u8>, Kind, bool)>,
    outcome: Option<TcpOutcome>,
    server_ttl: Option<u8>,
    sent: u32,
    late: u32,
}

impl TcpExchange {
    /// Starts the connection (a SYN is ready to send; no timer runs until
    /// it leaves). `iss` is our initial sequence number, `ident` the first
    /// IP identification to use.
    pub fn new(_now: Duration, mode: Mode, cfg: TcpConfig, ends: Ends, iss: u32, ident: u16, request: Vec<u8>) -> Self {
        let mut x = TcpExchange {
            mode,
            cfg,
            ends,
            iss,
            request,
            state: State::SynSent,
            rcv_nxt: 0,
            request_acked: false,
            answer: Vec::new(),
            deadline: None,
            first_sent: None,
            next_rto: None,
            rto: cfg.rto,
            ident,
            tx: VecDeque::new(),
            outcome: None,
            server_ttl: None,
            sent: 0,
            late: 0,
        };
        x.send_syn(true);
        x
    }

    pub fn ends(&self) -> Ends {
        self.ends
    }

    /// The TTL of the server's first segment (its distance).
    pub fn server_ttl(&self) -> Option<u8> {
        self.server_ttl
    }

    /// Packets handed out, and of them those handed out after the exchange
    /// decided (its closing RST excepted).
    pub fn sent(&self) -> (u32, u32) {
        (self.sent, self.late)
    }

    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }

    fn segment(&mut self, fl: u8, seq: u32, payload: &[u8], mss: Option<u16>) -> Vec<u8> {
        let ident = self.next_ident();
        let e = self.ends;
        tcp_packet(&Seg {
            src: e.src,
            dst: e.dst,
            sport: e.sport,
            dport: e.dport,
            seq,
            ack: self.rcv_nxt,
            flags: fl,
            mss,
            payload,
            ident,
            ttl: 64,
        })
    }

    fn send_syn(&mut self, fresh: bool) {
        let p = self.segment(flags::SYN, self.iss, &[], Some(self.cfg.mss));
        self.tx.push_back((p, Kind::Syn, fresh));
    }

    /// Our next sequence number: after the request once it is sent.
    fn snd_nxt(&self) -> u32 {
        let sent = if self.state == State::SynSent { 0 } else { self.request.len() as u32 };
        self.iss.wrapping_add(1).wrapping_add(sent)
    }

    fn send_ack(&mut self, fresh: bool) {
        let p = self.segment(flags::ACK, self.snd_nxt(), &[], None);
        self.tx.push_back((p, Kind::Ack, fresh));
    }

    fn send_request(&mut self, fresh: bool) {
        let req = std::mem::take(&mut self.request);
        let whole = self.segment(flags::ACK | flags::PSH, self.iss.wrapping_add(1), &req, None);
        self.request = req;
        let pieces = match self.mode {
            Mode::Fetch { fragments } if fragments >= 2 => fragment(&whole, fragments),
            _ => vec![whole],
        };
        let n = pieces.len();
        self.tx.extend(pieces.into_iter().enumerate().map(|(i, p)| (p, Kind::Request { last: i + 1 == n }, fresh)));
    }

    fn send_ptb(&mut self, offending: &[u8], mtu: u16) {
        let ident = self.next_ident();
        self.tx.push_back((frag_needed(self.ends.src, self.ends.dst, mtu, ident, offending), Kind::Ptb, true));
    }

    /// Decides: what was not sent yet is dropped (it would leave after the
    /// decision), then the closing RST if a connection may be open.
    fn finish(&mut self, outcome: TcpOutcome, reset: bool) {
        self.tx.clear();
        if reset {
            self.push_rst(self.snd_nxt());
        }
        self.state = State::Done;
        self.outcome = Some(outcome);
    }

    fn push_rst(&mut self, seq: u32) {
        let p = self.segment(flags::RST | flags::ACK, seq, &[], None);
        self.tx.push_back((p, Kind::Rst, false));
    }

    fn answer_complete(&self) -> bool {
        let Some(end) = header_end(&self.answer) else { return false };
        let head = String::from_utf8_lossy(&self.answer[..end]);
        content_length(&head).is_some_and(|cl| (self.answer.len() - end) as u64 >= cl)
    }

    /// A segment from the target (the caller has matched the ports).
    pub fn on_tcp(&mut self, now: Duration, t: &TcpIn) {
        let e = self.ends;
        if (t.src, t.dst, t.sport, t.dport) != (e.dst, e.src, e.dport, e.sport) {
            return;
        }
        if self.state == State::Done {
            // The server still thinks a connection is open (a SYN-ACK
            // after our deadline, data after our RST was lost): reset it.
            if t.flags & flags::RST == 0 && t.flags & flags::ACK != 0 {
                self.push_rst(t.ack);
            }
            return;
        }
        self.server_ttl.get_or_insert(t.ttl);
        if t.flags & flags::RST != 0 {
            let why = if self.state == State::SynSent { "refused (RST)" } else { "reset by the server" };
            let out = match self.mode {
                Mode::Pmtud { .. } => TcpOutcome::Pmtud(Pmtud::Inconclusive, Some(why.into())),
                Mode::Fetch { .. } if !self.answer.is_empty() => TcpOutcome::Answer(std::mem::take(&mut self.answer)),
                Mode::Fetch { .. } => TcpOutcome::Failed(why.into()),
            };
            return self.finish(out, false);
        }
        match self.state {
            State::SynSent => {
                if t.flags & (flags::SYN | flags::ACK) == flags::SYN | flags::ACK && t.ack == self.iss.wrapping_add(1) {
                    self.rcv_nxt = t.seq.wrapping_add(1);
                    // A SYN copy still queued is moot now.
                    self.tx.retain(|(_, k, _)| *k != Kind::Syn);
                    self.send_ack(true);
                    self.state = State::Open;
                    self.send_request(true);
                    self.rto = self.cfg.rto;
                    self.next_rto = None;
                }
            }
            State::Open => self.on_open(now, t),
            State::AwaitSmaller { seq, ptbs } => {
                let Mode::Pmtud { mtu } = self.mode else { return };
                if t.seq != seq || t.payload.is_empty() {
                    return;
                }
                if self.tx.iter().any(|(_, k, _)| *k == Kind::Ptb) {
                    // Our message has not left yet: the server could not
                    // have heeded it.
                    return;
                }
                if t.ip_len <= mtu as usize {
                    self.finish(TcpOutcome::Pmtud(Pmtud::Works, None), true);
                } else if ptbs < self.cfg.max_ptb {
                    // The server's backoff doubles each time: each new
                    // message gets the full timeout to be answered.
                    self.send_ptb(&t.packet, mtu);
                    self.state = State::AwaitSmaller { seq, ptbs: ptbs + 1 };
                    self.extend_deadline(now);
                } else {
                    self.finish(TcpOutcome::Pmtud(Pmtud::Fails, None), true);
                }
            }
            State::Done => {}
        }
    }

    fn extend_deadline(&mut self, now: Duration) {
        let d = now + self.cfg.timeout;
        self.deadline = Some(self.deadline.map_or(d, |x| x.max(d)));
    }

    fn on_open(&mut self, now: Duration, t: &TcpIn) {
        if t.flags & flags::SYN != 0 {
            // Our ACK of the SYN-ACK was lost: say it again.
            return self.send_ack(false);
        }
        if t.flags & flags::ACK != 0 {
            let acked = t.ack.wrapping_sub(self.iss.wrapping_add(1));
            if acked as usize >= self.request.len() && acked < 1 << 30 {
                self.request_acked = true;
            }
        }
        let fin = t.flags & flags::FIN != 0;
        if t.payload.is_empty() && !fin {
            return;
        }
        let in_order = t.seq == self.rcv_nxt;
        if in_order {
            if let Mode::Pmtud { mtu } = self.mode
                && t.ip_len > mtu as usize
                && !t.payload.is_empty()
            {
                self.send_ptb(&t.packet, mtu);
                self.state = State::AwaitSmaller { seq: t.seq, ptbs: 1 };
                self.extend_deadline(now);
                return;
            }
            let room = self.cfg.max_answer.saturating_sub(self.answer.len());
            self.answer.extend_from_slice(&t.payload[..t.payload.len().min(room)]);
            self.rcv_nxt = self.rcv_nxt.wrapping_add(t.payload.len() as u32).wrapping_add(fin as u32);
            self.request_acked = true;
            if fin || self.answer_complete() || self.answer.len() >= self.cfg.max_answer {
                let out = match self.mode {
                    Mode::Fetch { .. } => TcpOutcome::Answer(std::mem::take(&mut self.answer)),
                    Mode::Pmtud { mtu } => TcpOutcome::Pmtud(
                        Pmtud::Inconclusive,
                        Some(format!("the answer fits in packets of {mtu} bytes")),
                    ),
                };
                return self.finish(out, true);
            }
        }
        // In order: acknowledge; out of order: repeat what we expect.
        self.send_ack(in_order);
    }

    /// An ICMP destination unreachable quoting one of our segments.
    /// "Administratively prohibited" (codes 9, 10, 13), port and protocol
    /// unreachable refuse the connection at once (no retry); network and
    /// host unreachable are soft errors (RFC 1122 §4.2.3.9): the timers
    /// go on.
    pub fn on_unreachable(&mut self, code: u8) {
        let why = match code {
            9 | 10 | 13 => "refused (ICMP administratively prohibited)",
            3 => "refused (ICMP port unreachable)",
            2 => "refused (ICMP protocol unreachable)",
            _ => return,
        };
        if self.state == State::Done {
            return;
        }
        let out = match self.mode {
            Mode::Pmtud { .. } => TcpOutcome::Pmtud(Pmtud::Inconclusive, Some(why.into())),
            Mode::Fetch { .. } => TcpOutcome::Failed(why.into()),
        };
        let reset = self.state != State::SynSent;
        self.finish(out, reset);
    }

    /// Timers: retransmissions and the deadline.
    pub fn on_timeout(&mut self, now: Duration) {
        if self.state == State::Done {
            return;
        }
        if self.deadline_at().is_some_and(|d| now >= d) {
            let out = match (self.mode, self.state) {
                (Mode::Pmtud { .. }, State::AwaitSmaller { .. }) => {
                    TcpOutcome::Pmtud(Pmtud::Inconclusive, Some("no retransmission after fragmentation needed".into()))
                }
                (Mode::Pmtud { .. }, _) => {
                    TcpOutcome::Pmtud(Pmtud::Inconclusive, Some("timeout before a full-sized segment".into()))
                }
                (_, State::SynSent) => TcpOutcome::Failed("timeout: no SYN-ACK".into()),
                (_, _) if !self.request_acked => TcpOutcome::Failed("timeout: request not acknowledged".into()),
                (_, _) if header_end(&self.answer).is_some() => TcpOutcome::Answer(std::mem::take(&mut self.answer)),
                (_, _) => TcpOutcome::Failed(format!("timeout after {} answer bytes", self.answer.len())),
            };
            let reset = self.state != State::SynSent;
            return self.finish(out, reset);
        }
        if self.next_rto.is_some_and(|t| now >= t) {
            match self.state {
                State::SynSent => self.send_syn(false),
                State::Open if !self.request_acked => self.send_request(false),
                State::Open => self.send_ack(false),
                _ => {}
            }
            self.rto = (self.rto * 2).min(Duration::from_secs(4));
            // Armed again when the copy leaves.
            self.next_rto = None;
        }
    }

    /// Whether a packet is ready to leave.
    pub fn has_packet(&self) -> bool {
        !self.tx.is_empty()
    }

    /// The deadline, unless something new of ours still waits to leave
    /// (then the server has not had its chance to answer yet).
    fn deadline_at(&self) -> Option<Duration> {
        if self.tx.iter().any(|(_, _, fresh)| *fresh) { None } else { self.deadline }
    }

    /// The next packet to send, which leaves `now`: its timers start here.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Duration) -> Option<Vec<u8>> {
        let (p, kind, fresh) = self.tx.pop_front()?;
        self.sent += 1;
        if self.outcome.is_some() && kind != Kind::Rst {
            self.late += 1;
        }
        if fresh {
            // Something new left: the server gets a full timeout to answer.
            let first = *self.first_sent.get_or_insert(now);
            let until = (now + self.cfg.timeout).min(first + self.cfg.timeout * MAX_TIMEOUTS);
            self.deadline = Some(self.deadline.map_or(until, |d| d.max(until)));
        }
        match kind {
            Kind::Syn => self.next_rto = Some(now + self.rto),
            Kind::Request { last: true } if !self.request_acked => self.next_rto = Some(now + self.rto),
            Kind::Ack if self.state == State::Open && self.request_acked => {
                // The answer stalls: our ACK again after a while.
                self.next_rto.get_or_insert(now + self.rto);
            }
            _ => {}
        }
        Some(p)
    }

    /// When to call [`Self::on_timeout`]; `None` once done, and before the
    /// SYN left.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        match self.state {
            State::Done => None,
            State::AwaitSmaller { .. } => self.deadline_at(),
            _ => [self.deadline_at(), self.next_rto].into_iter().flatten().min(),
        }
    }

    /// Gives up at once (the survey is stopping): an RST if a connection
    /// may be open, so the server keeps no state. The outcome says why.
    pub fn abort(&mut self) {
        if self.state != State::Done {
            // A SYN that left may have opened a connection at the server.
            let reset = self.state != State::SynSent || self.first_sent.is_some();
            self.finish(TcpOutcome::Failed("stopped".into()), reset);
        }
    }

    /// The outcome, once done (and its last packets sent).
    pub fn outcome(&self) -> Option<&TcpOutcome> {
        if self.tx.is_empty() { self.outcome.as_ref() } else { None }
    }
}

/// Timers and limits of a [`HopTest`].
#[derive(Clone, Copy, Debug)]
pub struct HopConfig {
    /// The most routers tested (a longer path is tested from here down).
    pub max_hops: u8,
    /// Tries of each probe (a fragment train or a whole packet at one TTL).
    pub rounds: u32,
    /// How long a round waits for answers after its last probe left.
    pub round_wait: Duration,
    /// Fragments the request is cut into (the probe is the whole train).
    pub fragments: usize,
}

/// A probe's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// The request as a fragment train, every fragment with the TTL.
    Train,
    /// The request as one packet (the control: does the router answer?).
    Whole,
}

/// How far fragments get: the request as a TTL-limited fragment train
/// against the same request as a TTL-limited whole packet, from the last
/// router down.
///
/// - The path's length comes from the server's own answers (the TTL of
///   its SYN-ACK, [`crate::packet::hops_from_ttl`]): nothing is sent past
///   the last router.
/// - A probe is the *whole* train, each fragment with the TTL: a router
///   with connection tracking (NAT, a stateful firewall) holds a lone
///   first fragment without a word, and answers the reassembled train.
/// - At TTL `k` the train goes first. Answered: fragments reach router
///   `k`. Not answered: the train again with the whole packet beside it;
///   if the router answers the whole packet and the train stays silent,
///   fragments do not reach it and the test goes on at `k − 1`. If the
///   router never answers (all tries), silence says nothing: the position
///   is unknown.
/// - Each round waits [`HopConfig::round_wait`] after its last probe left;
///   the survey paces probes per TTL so that a router's ICMP rate limit
///   (Linux: one a second after a burst of six) is not exceeded.
/// - A train answered by the last router says that first fragments (or
///   the whole train, at a conntrack router) pass every router; where the
///   rest are lost (a filter of non-first fragments, the server's
///   reassembly) is not observable: the position is unknown.
#[derive(Debug)]
pub struct HopTest {
    cfg: HopConfig,
    dst: Ipv4Addr,
    whole: Vec<u8>,
    train: Vec<Vec<u8>>,
    /// Routers on the path.
    routers: u8,
    /// The TTL under test.
    ttl: u8,
    tries: [u32; 2],
    whole_answer: Vec<Option<Ipv4Addr>>,
    train_answered: Vec<bool>,
    /// Identification → (kind, TTL).
    probes: HashMap<u16, (Probe, u8)>,
    /// Probes of the current round not sent yet, and when the last one left.
    tx: VecDeque<(Vec<u8>, u8)>,
    round_sent: Option<Duration>,
    ident: u16,
    result: Option<FragmentPath>,
    sent: u32,
    late: u32,
}

impl HopTest {
    /// Builds the probes from the request as a [`TcpExchange`] would send
    /// it (`seq` any number: no connection is open) toward a server
    /// `routers` routers away (from its TTL), and queues the first round.
    pub fn new(cfg: HopConfig, ends: Ends, routers: u8, seq: u32, ident: u16, request: &[u8]) -> HopTest {
        let whole = tcp_packet(&Seg {
            src: ends.src,
            dst: ends.dst,
            sport: ends.sport,
            dport: ends.dport,
            seq,
            ack: 0,
            flags: flags::ACK | flags::PSH,
            mss: None,
            payload: request,
            ident: 0,
            ttl: 1,
        });
        let train = fragment(&whole, cfg.fragments.max(2));
        let routers = routers.min(cfg.max_hops);
        let n = routers as usize + 1;
        let mut h = HopTest {
            cfg,
            dst: ends.dst,
            whole,
            train,
            routers,
            ttl: routers,
            tries: [0; 2],
            whole_answer: vec![None; n],
            train_answered: vec![false; n],
            probes: HashMap::new(),
            tx: VecDeque::new(),
            round_sent: None,
            ident,
            result: None,
            sent: 0,
            late: 0,
        };
        if routers == 0 {
            h.decide(None);
        } else {
            h.queue_round();
        }
        h
    }

    pub fn dst(&self) -> Ipv4Addr {
        self.dst
    }

    /// The TTL of the next probe to send (for pacing per router), if one waits.
    pub fn next_ttl(&self) -> Option<u8> {
        self.tx.front().map(|(_, ttl)| *ttl)
    }

    /// Packets handed out, and of them those handed out after the test decided.
    pub fn sent(&self) -> (u32, u32) {
        (self.sent, self.late)
    }

    fn queue(&mut self, kind: Probe) {
        self.ident = self.ident.wrapping_add(1);
        let ttl = self.ttl;
        let pieces: Vec<Vec<u8>> = match kind {
            Probe::Whole => vec![self.whole.clone()],
            Probe::Train => self.train.clone(),
        };
        for mut p in pieces {
            p[4..6].copy_from_slice(&self.ident.to_be_bytes());
            set_ttl(&mut p, ttl);
            self.tx.push_back((p, ttl));
        }
        self.probes.insert(self.ident, (kind, ttl));
        self.tries[kind as usize] += 1;
    }

    /// The probes of a round at the current TTL: the train, and from the
    /// second round on the whole packet until the router answered it.
    fn queue_round(&mut self) {
        let k = self.ttl as usize;
        let whole_known = self.whole_answer[k].is_some();
        if self.tries[Probe::Train as usize] > 0 && !whole_known && self.tries[Probe::Whole as usize] < self.cfg.rounds
        {
            self.queue(Probe::Whole);
        }
        if self.tries[Probe::Train as usize] < self.cfg.rounds {
            self.queue(Probe::Train);
        }
        self.round_sent = None;
        if self.tx.is_empty() {
            // Nothing left to ask at this TTL.
            self.decide(None);
        }
    }

    /// A "time exceeded" quoting a packet to our destination.
    pub fn on_time_exceeded(&mut self, from: Ipv4Addr, quoted_dst: Ipv4Addr, quoted_ident: u16) {
        if quoted_dst != self.dst || self.result.is_some() {
            return;
        }
        match self.probes.get(&quoted_ident) {
            Some(&(Probe::Train, ttl)) => self.train_answered[ttl as usize] = true,
            Some(&(Probe::Whole, ttl)) => self.whole_answer[ttl as usize] = Some(from),
            None => {}
        }
    }

    /// After a round's wait: decides, goes one TTL down, or tries again.
    pub fn on_timeout(&mut self, now: Duration) {
        if self.result.is_some() || self.round_sent.is_none_or(|t| now < t + self.cfg.round_wait) {
            return;
        }
        let k = self.ttl as usize;
        if self.train_answered[k] {
            return self.decide(Some(self.ttl));
        }
        let [train_tries, whole_tries] = self.tries;
        let router_answers = self.whole_answer[k].is_some();
        if router_answers && train_tries >= 2.min(self.cfg.rounds) {
            // The router answers, fragments do not reach it.
            if self.ttl == 1 {
                return self.decide(Some(0));
            }
            self.ttl -= 1;
            self.tries = [0; 2];
            return self.queue_round();
        }
        if !router_answers && whole_tries >= self.cfg.rounds {
            // A router that never answered: its silence says nothing.
            return self.decide(None);
        }
        self.queue_round();
    }

    fn decide(&mut self, reach: Option<u8>) {
        let hops =
            self.whole_answer[1..].iter().map(|a| a.map_or_else(|| "*".to_string(), |a| a.to_string())).collect();
        self.tx.clear();
        self.result = Some(FragmentPath::decide(self.routers, reach, hops));
    }

    #[must_use]
    pub fn poll_transmit(&mut self, now: Duration) -> Option<Vec<u8>> {
        let (p, _) = self.tx.pop_front()?;
        self.sent += 1;
        if self.result.is_some() {
            self.late += 1;
        }
        if self.tx.is_empty() {
            self.round_sent = Some(now);
        }
        Some(p)
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.result.is_some() {
            return None;
        }
        self.round_sent.map(|t| t + self.cfg.round_wait)
    }

    pub fn result(&self) -> Option<&FragmentPath> {
        if self.tx.is_empty() { self.result.as_ref() } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Incoming, parse};
    use crate::record::Stop;
    use px_wire::ipv4::Ipv4Packet;

    const C: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const S: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
    const ENDS: Ends = Ends { src: C, dst: S, sport: 61000, dport: 80 };
    const REQ: &[u8] = b"GET / HTTP/1.1\r\nHost: 203.0.113.9\r\nConnection: close\r\n\r\n";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// What the exchange sends at `now`.
    fn drain(x: &mut TcpExchange, now: Duration) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| x.poll_transmit(now)).collect()
    }

    fn tcp(p: &[u8]) -> TcpIn {
        match parse(p) {
            Incoming::Tcp(t) => t,
            other => panic!("not TCP: {other:?}"),
        }
    }

    /// A segment from the server to us.
    fn from_server(seq: u32, ack: u32, fl: u8, payload: &[u8], ident: u16) -> TcpIn {
        tcp(&tcp_packet(&Seg {
            src: S,
            dst: C,
            sport: 80,
            dport: 61000,
            seq,
            ack,
            flags: fl,
            mss: None,
            payload,
            ident,
            ttl: 60,
        }))
    }

    /// Plays the server: handshake, then the answer in `segments`.
    fn serve(x: &mut TcpExchange, segments: &[&[u8]]) -> Vec<Vec<u8>> {
        let syn = tcp(&drain(x, ms(0))[0]);
        assert_eq!(syn.flags, flags::SYN);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let mut sent = drain(x, ms(1));
        let mut seq = 5001;
        for (i, s) in segments.iter().enumerate() {
            let fl = if i + 1 == segments.len() { flags::ACK | flags::FIN } else { flags::ACK };
            x.on_tcp(ms(2), &from_server(seq, syn.seq + 1 + REQ.len() as u32, fl, s, 2 + i as u16));
            seq += s.len() as u32;
            sent.extend(drain(x, ms(2)));
        }
        sent
    }

    #[test]
    fn a_fetch_sends_the_request_as_fragments_and_keeps_the_answer() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 3 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let sent = serve(&mut x, &[b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", b"body"]);
        // ACK, three fragments, then ACKs and the closing RST.
        let frags: Vec<_> =
            sent.iter().map(|p| Ipv4Packet::new_checked(&p[..]).unwrap()).filter(|ip| ip.is_fragment()).collect();
        assert_eq!(frags.len(), 3);
        assert!(frags.iter().all(|f| f.ident() == frags[0].ident()));
        let mut joined = Vec::new();
        for f in &frags {
            joined.extend_from_slice(f.payload());
        }
        assert_eq!(&joined[20..], REQ, "the fragments carry the request");
        let last = tcp(sent.last().unwrap());
        assert_eq!(last.flags, flags::RST | flags::ACK);
        let acks: Vec<_> = sent
            .iter()
            .filter_map(|p| match parse(p) {
                Incoming::Tcp(t) if t.flags == flags::ACK => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(acks[0].seq, 101, "the handshake's ACK is before the request");
        assert!(acks[1..].iter().all(|a| a.seq == 101 + REQ.len() as u32), "later ACKs are after it");
        assert_eq!(last.seq, 101 + REQ.len() as u32);
        assert_eq!(
            x.outcome(),
            Some(&TcpOutcome::Answer(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody".to_vec()))
        );
        assert_eq!(x.poll_timeout(), None);
    }

    #[test]
    fn a_lost_request_is_sent_again_then_the_fetch_gives_up() {
        let cfg = TcpConfig { timeout: ms(3000), rto: ms(500), ..TcpConfig::default() };
        let mut x = TcpExchange::new(ms(0), Mode::Fetch { fragments: 2 }, cfg, ENDS, 100, 7, REQ.to_vec());
        let syn = tcp(&drain(&mut x, ms(0))[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        assert_eq!(drain(&mut x, ms(1)).len(), 3, "ACK and two fragments");
        assert_eq!(x.poll_timeout(), Some(ms(501)));
        x.on_timeout(ms(501));
        assert_eq!(drain(&mut x, ms(501)).len(), 2, "the request again, as fragments");
        x.on_timeout(ms(1501));
        assert_eq!(drain(&mut x, ms(1501)).len(), 2);
        x.on_timeout(ms(3000));
        assert_eq!(x.outcome(), None, "3 s after the request first left, not after the SYN");
        x.on_timeout(ms(3001));
        assert_eq!(x.outcome(), None, "its RST is still to be sent");
        assert_eq!(tcp(&drain(&mut x, ms(3001))[0]).flags, flags::RST | flags::ACK);
        assert_eq!(x.outcome(), Some(&TcpOutcome::Failed("timeout: request not acknowledged".into())));
    }

    #[test]
    fn an_abort_resets_an_open_connection() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 0 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let syn = tcp(&drain(&mut x, ms(0))[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let _ = drain(&mut x, ms(1));
        x.abort();
        let rst = tcp(&drain(&mut x, ms(2))[0]);
        assert_eq!((rst.flags, rst.seq), (flags::RST | flags::ACK, 101 + REQ.len() as u32));
        assert_eq!(x.outcome(), Some(&TcpOutcome::Failed("stopped".into())));
        x.abort();
        assert!(x.poll_transmit(ms(3)).is_none(), "once");
    }

    #[test]
    fn a_refused_connection_fails_at_once() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 0 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let _ = drain(&mut x, ms(0));
        x.on_tcp(ms(1), &from_server(0, 101, flags::RST | flags::ACK, &[], 1));
        assert_eq!(x.outcome(), Some(&TcpOutcome::Failed("refused (RST)".into())));
    }

    fn pmtud_until_big(x: &mut TcpExchange) -> (TcpIn, u32) {
        let syn = tcp(&drain(x, ms(0))[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let _ = drain(x, ms(1));
        let big = from_server(5001, syn.seq + 1 + REQ.len() as u32, flags::ACK, &[b'x'; 1460], 2);
        x.on_tcp(ms(2), &big);
        (big, syn.seq)
    }

    #[test]
    fn pmtud_works_when_the_data_comes_again_smaller() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Pmtud { mtu: 1280 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let (big, iss) = pmtud_until_big(&mut x);
        let ptb = drain(&mut x, ms(2));
        assert_eq!(ptb.len(), 1, "no ACK for the big segment, only the ICMP");
        let ip = Ipv4Packet::new_checked(&ptb[0][..]).unwrap();
        assert_eq!((ip.protocol(), ip.payload()[0], ip.payload()[1]), (1, 3, 4));
        assert_eq!(&ip.payload()[8..36], &big.packet[..28]);
        x.on_tcp(ms(3), &from_server(5001, iss + 1 + REQ.len() as u32, flags::ACK, &[b'x'; 1240], 3));
        assert_eq!(tcp(&drain(&mut x, ms(3))[0]).flags, flags::RST | flags::ACK);
        assert_eq!(x.outcome(), Some(&TcpOutcome::Pmtud(Pmtud::Works, None)));
    }

    #[test]
    fn pmtud_fails_when_full_sized_segments_keep_coming() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Pmtud { mtu: 1280 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let (big, _) = pmtud_until_big(&mut x);
        for n in 2..=3 {
            assert_eq!(drain(&mut x, ms(100 * n - 50)).len(), 1);
            x.on_tcp(ms(100 * n), &big);
            assert_eq!(x.outcome(), None);
        }
        let _ = drain(&mut x, ms(850));
        x.on_tcp(ms(900), &big);
        let _ = drain(&mut x, ms(900));
        assert_eq!(x.outcome(), Some(&TcpOutcome::Pmtud(Pmtud::Fails, None)));
    }

    /// Item 2: the server's copies that come while our "fragmentation
    /// needed" still waits in the queue say nothing about the server.
    #[test]
    fn pmtud_waits_for_its_message_to_leave() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Pmtud { mtu: 1280 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let (big, iss) = pmtud_until_big(&mut x);
        for n in 3..10 {
            x.on_tcp(ms(n * 100), &big);
        }
        assert_eq!(x.outcome(), None, "not a failure: the server never got our message");
        assert_eq!(drain(&mut x, ms(1000)).len(), 1, "one message");
        x.on_tcp(ms(1100), &from_server(5001, iss + 1 + REQ.len() as u32, flags::ACK, &[b'x'; 1240], 3));
        let _ = drain(&mut x, ms(1100));
        assert_eq!(x.outcome(), Some(&TcpOutcome::Pmtud(Pmtud::Works, None)));
    }

    #[test]
    fn each_fragmentation_needed_gets_the_full_timeout() {
        let cfg = TcpConfig { timeout: ms(3000), ..TcpConfig::default() };
        let mut x = TcpExchange::new(ms(0), Mode::Pmtud { mtu: 1280 }, cfg, ENDS, 100, 7, REQ.to_vec());
        let syn = tcp(&drain(&mut x, ms(0))[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let _ = drain(&mut x, ms(1));
        let big = from_server(5001, syn.seq + 1 + REQ.len() as u32, flags::ACK, &[b'x'; 1460], 2);
        // A slow start (lost SYN-ACKs, say): the big segment at 2.5 s.
        x.on_tcp(ms(2500), &big);
        assert_eq!(x.poll_timeout(), None, "the message waits in the queue");
        let _ = drain(&mut x, ms(2500));
        assert_eq!(x.poll_timeout(), Some(ms(5500)));
        x.on_tcp(ms(4000), &big);
        let _ = drain(&mut x, ms(4000));
        assert_eq!(x.poll_timeout(), Some(ms(7000)), "the second message's own timeout");
        x.on_timeout(ms(6999));
        assert_eq!(x.outcome(), None);
    }

    #[test]
    fn pmtud_is_inconclusive_for_a_small_answer() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Pmtud { mtu: 1280 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let _ = serve(&mut x, &[b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"]);
        assert!(matches!(x.outcome(), Some(TcpOutcome::Pmtud(Pmtud::Inconclusive, Some(_)))));
    }

    /// Item 2 and 5: a SYN's timers start when it leaves, not when it was
    /// made; a retransmission is made once, when its timer runs out after
    /// the previous copy left.
    #[test]
    fn timers_start_when_the_syn_leaves() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 0 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        assert_eq!(x.poll_timeout(), None, "nothing runs while the SYN waits in the queue");
        x.on_timeout(ms(9000));
        assert_eq!(x.outcome(), None);
        assert_eq!(drain(&mut x, ms(9000)).len(), 1, "one SYN");
        assert_eq!(x.poll_timeout(), Some(ms(10_000)), "its RTO from when it left");
        x.on_timeout(ms(10_000));
        assert_eq!(x.poll_timeout(), Some(ms(14_000)), "while the copy waits, only the deadline runs");
        x.on_timeout(ms(12_000));
        assert_eq!(drain(&mut x, ms(12_000)).len(), 1, "one copy, however long it waited");
        assert_eq!(x.poll_timeout(), Some(ms(14_000)), "the deadline: 5 s after the first SYN left");
        x.on_timeout(ms(14_000));
        assert_eq!(x.outcome(), Some(&TcpOutcome::Failed("timeout: no SYN-ACK".into())));
        assert_eq!(x.sent(), (2, 0));
    }

    /// Item 2: a decision drops what was not sent yet.
    #[test]
    fn a_decision_drops_what_was_not_sent() {
        let cfg = TcpConfig { timeout: ms(3000), rto: ms(500), ..TcpConfig::default() };
        let mut x = TcpExchange::new(ms(0), Mode::Fetch { fragments: 2 }, cfg, ENDS, 100, 7, REQ.to_vec());
        let syn = tcp(&drain(&mut x, ms(0))[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let _ = drain(&mut x, ms(1));
        x.on_timeout(ms(501));
        // The retransmission waits in the queue past the deadline.
        x.on_timeout(ms(3001));
        let after = drain(&mut x, ms(3500));
        assert_eq!(after.len(), 1, "only the RST");
        assert_eq!(tcp(&after[0]).flags, flags::RST | flags::ACK);
        assert_eq!(x.sent().1, 0, "nothing late");
    }

    /// Item 5: a SYN-ACK after the deadline gets an RST (no half-open
    /// connection left at the server).
    #[test]
    fn a_syn_ack_after_the_deadline_gets_an_rst() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 0 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let _ = drain(&mut x, ms(0));
        x.on_timeout(ms(5000));
        assert!(drain(&mut x, ms(5000)).is_empty(), "no connection, no RST");
        x.on_tcp(ms(6000), &from_server(5000, 101, flags::SYN | flags::ACK, &[], 1));
        let rst = drain(&mut x, ms(6000));
        assert_eq!(rst.len(), 1);
        let r = tcp(&rst[0]);
        assert_eq!((r.flags & flags::RST, r.seq), (flags::RST, 101));
        x.on_tcp(ms(6001), &from_server(0, 101, flags::RST, &[], 2));
        assert!(drain(&mut x, ms(6001)).is_empty(), "an RST gets none");
    }

    /// Item 5: "administratively prohibited" refuses at once; a host
    /// unreachable is a soft error.
    #[test]
    fn administratively_prohibited_refuses_at_once() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 0 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let _ = drain(&mut x, ms(0));
        x.on_unreachable(1);
        assert_eq!(x.outcome(), None, "host unreachable: the timers go on");
        x.on_unreachable(13);
        assert_eq!(x.outcome(), Some(&TcpOutcome::Failed("refused (ICMP administratively prohibited)".into())));
        assert!(drain(&mut x, ms(1)).is_empty(), "no connection, no RST");
    }

    #[test]
    fn the_server_ttl_is_kept() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 0 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let _ = serve(&mut x, &[b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"]);
        assert_eq!(x.server_ttl(), Some(60));
    }

    /// A path of `routers` routers for the hop test: fragments (the first
    /// one, or the whole train at a conntrack router) pass `passes` of
    /// them; `silent` routers never answer. Returns the result and every
    /// probe sent (TTL, fragment or not).
    fn hop_path(
        routers: u8,
        passes: u8,
        silent: &[u8],
        conntrack: &[u8],
        rounds: u32,
    ) -> (FragmentPath, Vec<(u8, bool)>) {
        let cfg = HopConfig { max_hops: 20, rounds, round_wait: ms(1000), fragments: 2 };
        let mut h = HopTest::new(cfg, ENDS, routers, 1, 100, REQ);
        let mut sent = Vec::new();
        let mut t = ms(0);
        while h.result().is_none() {
            let probes: Vec<_> = std::iter::from_fn(|| h.poll_transmit(t)).collect();
            // A conntrack router answers a train only once it is whole.
            let mut trains: HashMap<u16, usize> = HashMap::new();
            for p in &probes {
                let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
                assert!(ip.verify_checksum());
                let (ttl, frag, first) = (ip.ttl(), ip.is_fragment(), ip.frag_offset() == 0);
                sent.push((ttl, frag));
                assert!(ttl <= routers, "a probe past the last router");
                let reaches = if frag { passes } else { routers };
                if ttl > reaches || silent.contains(&ttl) {
                    continue;
                }
                let answered = if frag && conntrack.contains(&ttl) {
                    let n = trains.entry(ip.ident()).or_default();
                    *n += 1;
                    *n == 2
                } else {
                    !frag || first
                };
                if answered {
                    h.on_time_exceeded(Ipv4Addr::new(198, 51, 100, ttl), S, ip.ident());
                }
            }
            assert!(!probes.is_empty() || h.poll_timeout().is_some(), "a test that waits for nothing");
            t = h.poll_timeout().unwrap_or(t);
            h.on_timeout(t);
            assert!(t < ms(60_000), "the test ends");
        }
        (h.result().cloned().unwrap(), sent)
    }

    /// Where fragments stop is where a router answers the whole packet and
    /// not the train; the test starts at the last router (known from the
    /// server's TTL) and sends nothing past it (item 5).
    #[test]
    fn the_hop_test_finds_where_fragments_stop() {
        for (passes, stop, hop) in
            [(2u8, Stop::LastHop, Some(3)), (1, Stop::InPath, Some(2)), (0, Stop::InPath, Some(1))]
        {
            let (r, sent) = hop_path(3, passes, &[], &[], 3);
            assert_eq!((r.routers, r.fragments_reach, r.stop, r.stop_hop), (3, passes, stop, hop));
            // Per TTL above: the train, then the whole packet and the train
            // again (a fragment train is two packets); at the last: the train.
            let want = 5 * (3 - passes as usize) + if passes > 0 { 2 } else { 0 };
            assert_eq!(sent.len(), want, "{passes}: {sent:?}");
        }
        let (r, sent) = hop_path(3, 3, &[], &[], 3);
        assert_eq!((r.stop, r.stop_hop, r.fragments_reach), (Stop::Unknown, None, 3), "never a position: {r:?}");
        assert_eq!(sent, vec![(3, true), (3, true)], "one train at the last router");
    }

    /// Item 1: a router that never answers is no evidence either way.
    #[test]
    fn a_silent_router_gives_no_position() {
        let (r, _) = hop_path(3, 2, &[3], &[], 3);
        assert_eq!((r.stop, r.stop_hop), (Stop::Unknown, None), "{r:?}");
        assert!(r.note.is_some());
    }

    /// Item 1: a lost answer (a rate limit) is asked again; the train's
    /// silence counts only once the router answered the whole packet.
    #[test]
    fn the_train_is_asked_again_before_going_down() {
        let (_, sent) = hop_path(3, 2, &[], &[], 3);
        let trains_at_3 = sent.iter().filter(|(ttl, frag)| *ttl == 3 && *frag).count() / 2;
        let wholes_at_3 = sent.iter().filter(|(ttl, frag)| *ttl == 3 && !*frag).count();
        assert_eq!((trains_at_3, wholes_at_3), (2, 1));
    }

    /// Item 3: the probe is the whole train, so a conntrack router (which
    /// holds a lone first fragment) answers it.
    #[test]
    fn a_conntrack_router_answers_the_train() {
        let (r, sent) = hop_path(3, 3, &[], &[3], 3);
        assert_eq!((r.fragments_reach, r.stop), (3, Stop::Unknown), "{r:?}");
        assert_eq!(sent.iter().filter(|(_, frag)| *frag).count(), 2, "both fragments of the train");
        let (r, _) = hop_path(3, 2, &[], &[2], 3);
        assert_eq!((r.stop, r.stop_hop), (Stop::LastHop, Some(3)), "{r:?}");
    }

    /// Item 2: a round waits from when its last probe left.
    #[test]
    fn a_round_waits_from_when_its_probes_left() {
        let cfg = HopConfig { max_hops: 20, rounds: 3, round_wait: ms(1000), fragments: 2 };
        let mut h = HopTest::new(cfg, ENDS, 3, 1, 100, REQ);
        assert_eq!(h.poll_timeout(), None, "its probes wait in the queue");
        h.on_timeout(ms(10_000));
        assert!(h.result().is_none());
        assert_eq!(h.next_ttl(), Some(3));
        let _ = h.poll_transmit(ms(20_000));
        assert_eq!(h.poll_timeout(), None, "one fragment still waits");
        let _ = h.poll_transmit(ms(20_500));
        assert_eq!(h.poll_timeout(), Some(ms(21_500)));
    }

    /// A server next to us: no router to ask.
    #[test]
    fn no_router_no_probe() {
        let cfg = HopConfig { max_hops: 20, rounds: 3, round_wait: ms(1000), fragments: 2 };
        let h = HopTest::new(cfg, ENDS, 0, 1, 100, REQ);
        assert_eq!(h.result().map(|r| r.stop), Some(Stop::Unknown));
        assert_eq!(h.next_ttl(), None);
    }
}
