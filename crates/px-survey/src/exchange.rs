//! The survey's conversations with one target, as sans-I/O state machines:
//! packets in ([`TcpExchange::on_tcp`], [`HopTest::on_time_exceeded`]),
//! packets out (`poll_transmit`), a deadline out (`poll_timeout`), time
//! always passed in.
//!
//! [`TcpExchange`] is a minimal TCP client of our own (the kernel's TCP
//! never sends a segment as IP fragments): SYN with MSS 1460, the request
//! whole or cut into IP fragments, in-order receipt with an ACK per
//! segment, the request resent on its own timer (so a lost fragment is a
//! retransmission, not a failed test), RST at the end so the server keeps
//! no state. In PMTUD mode (scamper tbit's PMTUD test) it answers the first
//! full-sized segment with "fragmentation needed" instead of an ACK and
//! watches how that data comes again.
//!
//! [`HopTest`] sends the request's first fragment and the whole request
//! with TTL 1, 2, …; the routers' "time exceeded" answers say how far each
//! got.

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
    /// Give up after this long.
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
    deadline: Duration,
    next_rto: Duration,
    rto: Duration,
    ident: u16,
    tx: VecDeque<Vec<u8>>,
    outcome: Option<TcpOutcome>,
}

impl TcpExchange {
    /// Starts the connection (a SYN is ready to send). `iss` is our
    /// initial sequence number, `ident` the first IP identification to use.
    pub fn new(now: Duration, mode: Mode, cfg: TcpConfig, ends: Ends, iss: u32, ident: u16, request: Vec<u8>) -> Self {
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
            deadline: now + cfg.timeout,
            next_rto: now + cfg.rto,
            rto: cfg.rto,
            ident,
            tx: VecDeque::new(),
            outcome: None,
        };
        x.send_syn();
        x
    }

    pub fn ends(&self) -> Ends {
        self.ends
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

    fn send_syn(&mut self) {
        let p = self.segment(flags::SYN, self.iss, &[], Some(self.cfg.mss));
        self.tx.push_back(p);
    }

    /// Our next sequence number: after the request once it is sent.
    fn snd_nxt(&self) -> u32 {
        let sent = if self.state == State::SynSent { 0 } else { self.request.len() as u32 };
        self.iss.wrapping_add(1).wrapping_add(sent)
    }

    fn send_ack(&mut self) {
        let p = self.segment(flags::ACK, self.snd_nxt(), &[], None);
        self.tx.push_back(p);
    }

    fn send_request(&mut self) {
        let req = std::mem::take(&mut self.request);
        let whole = self.segment(flags::ACK | flags::PSH, self.iss.wrapping_add(1), &req, None);
        self.request = req;
        match self.mode {
            Mode::Fetch { fragments } if fragments >= 2 => self.tx.extend(fragment(&whole, fragments)),
            _ => self.tx.push_back(whole),
        }
    }

    fn send_ptb(&mut self, offending: &[u8], mtu: u16) {
        let ident = self.next_ident();
        self.tx.push_back(frag_needed(self.ends.src, self.ends.dst, mtu, ident, offending));
    }

    fn finish(&mut self, outcome: TcpOutcome, reset: bool) {
        if reset {
            let seq = self.snd_nxt();
            let p = self.segment(flags::RST | flags::ACK, seq, &[], None);
            self.tx.push_back(p);
        }
        self.state = State::Done;
        self.outcome = Some(outcome);
    }

    fn answer_complete(&self) -> bool {
        let Some(end) = header_end(&self.answer) else { return false };
        let head = String::from_utf8_lossy(&self.answer[..end]);
        content_length(&head).is_some_and(|cl| (self.answer.len() - end) as u64 >= cl)
    }

    /// A segment from the target (the caller has matched the ports).
    pub fn on_tcp(&mut self, now: Duration, t: &TcpIn) {
        let e = self.ends;
        if (t.src, t.dst, t.sport, t.dport) != (e.dst, e.src, e.dport, e.sport) || self.state == State::Done {
            return;
        }
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
                    self.send_ack();
                    self.state = State::Open;
                    self.send_request();
                    self.rto = self.cfg.rto;
                    self.next_rto = now + self.rto;
                }
            }
            State::Open => self.on_open(now, t),
            State::AwaitSmaller { seq, ptbs } => {
                let Mode::Pmtud { mtu } = self.mode else { return };
                if t.seq != seq || t.payload.is_empty() {
                    return;
                }
                if t.ip_len <= mtu as usize {
                    self.finish(TcpOutcome::Pmtud(Pmtud::Works, None), true);
                } else if ptbs < self.cfg.max_ptb {
                    // The server's backoff doubles each time: each new
                    // message gets the full timeout to be answered.
                    self.send_ptb(&t.packet, mtu);
                    self.state = State::AwaitSmaller { seq, ptbs: ptbs + 1 };
                    self.deadline = self.deadline.max(now + self.cfg.timeout);
                } else {
                    self.finish(TcpOutcome::Pmtud(Pmtud::Fails, None), true);
                }
            }
            State::Done => {}
        }
    }

    fn on_open(&mut self, now: Duration, t: &TcpIn) {
        if t.flags & flags::SYN != 0 {
            // Our ACK of the SYN-ACK was lost: say it again.
            return self.send_ack();
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
        if t.seq == self.rcv_nxt {
            if let Mode::Pmtud { mtu } = self.mode
                && t.ip_len > mtu as usize
                && !t.payload.is_empty()
            {
                self.send_ptb(&t.packet, mtu);
                self.state = State::AwaitSmaller { seq: t.seq, ptbs: 1 };
                self.deadline = self.deadline.max(now + self.cfg.timeout);
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
        self.send_ack();
    }

    /// Timers: retransmissions and the deadline.
    pub fn on_timeout(&mut self, now: Duration) {
        if self.state == State::Done {
            return;
        }
        if now >= self.deadline {
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
        if now >= self.next_rto {
            match self.state {
                State::SynSent => self.send_syn(),
                State::Open if !self.request_acked => self.send_request(),
                State::Open => self.send_ack(),
                _ => {}
            }
            self.rto = (self.rto * 2).min(Duration::from_secs(4));
            self.next_rto = now + self.rto;
        }
    }

    /// The next packet to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.tx.pop_front()
    }

    /// When to call [`Self::on_timeout`]; `None` once done.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        match self.state {
            State::Done => None,
            State::AwaitSmaller { .. } => Some(self.deadline),
            _ => Some(self.deadline.min(self.next_rto)),
        }
    }

    /// Gives up at once (the survey is stopping): an RST if a connection
    /// may be open, so the server keeps no state. The outcome says why.
    pub fn abort(&mut self) {
        if self.state != State::Done {
            let reset = self.state != State::SynSent || self.tx.is_empty();
            self.finish(TcpOutcome::Failed("stopped".into()), reset);
        }
    }

    /// The outcome, once done (and its last packets sent).
    pub fn outcome(&self) -> Option<&TcpOutcome> {
        if self.tx.is_empty() { self.outcome.as_ref() } else { None }
    }
}

/// Timers of a [`HopTest`].
#[derive(Clone, Copy, Debug)]
pub struct HopConfig {
    /// TTLs 1..=max_hops.
    pub max_hops: u8,
    /// Rounds: the unanswered probes are sent again each round.
    pub rounds: u32,
    /// Time a round waits for answers.
    pub round_wait: Duration,
    /// Fragments the request is cut into (the first one is the probe).
    pub fragments: usize,
}

/// TTL-limited first fragments against TTL-limited whole packets.
#[derive(Debug)]
pub struct HopTest {
    cfg: HopConfig,
    dst: Ipv4Addr,
    whole: Vec<u8>,
    first_fragment: Vec<u8>,
    /// Identification → (is a fragment, TTL).
    probes: HashMap<u16, (bool, u8)>,
    whole_answer: Vec<Option<Ipv4Addr>>,
    fragment_answered: Vec<bool>,
    round: u32,
    next_round: Duration,
    ident: u16,
    tx: VecDeque<Vec<u8>>,
    result: Option<FragmentPath>,
}

impl HopTest {
    /// Builds the probes from the request as a [`TcpExchange`] would send
    /// it (`seq` any number: no connection is open) and sends round one.
    pub fn new(now: Duration, cfg: HopConfig, ends: Ends, seq: u32, ident: u16, request: &[u8]) -> HopTest {
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
        let first_fragment = fragment(&whole, cfg.fragments.max(2)).swap_remove(0);
        let n = cfg.max_hops as usize;
        let mut h = HopTest {
            cfg,
            dst: ends.dst,
            whole,
            first_fragment,
            probes: HashMap::new(),
            whole_answer: vec![None; n + 1],
            fragment_answered: vec![false; n + 1],
            round: 0,
            next_round: now,
            ident,
            tx: VecDeque::new(),
            result: None,
        };
        h.on_timeout(now);
        h
    }

    pub fn dst(&self) -> Ipv4Addr {
        self.dst
    }

    fn farthest_router(&self) -> u8 {
        self.whole_answer.iter().rposition(Option::is_some).unwrap_or(0) as u8
    }

    fn farthest_fragment(&self) -> u8 {
        self.fragment_answered.iter().rposition(|&a| a).unwrap_or(0) as u8
    }

    fn send_round(&mut self) {
        // Every round to the full TTL range: an answer lost in one round
        // (routers rate-limit their ICMP) must not hide the hops beyond it.
        let limit = self.cfg.max_hops;
        for ttl in 1..=limit {
            for frag in [false, true] {
                let answered =
                    if frag { self.fragment_answered[ttl as usize] } else { self.whole_answer[ttl as usize].is_some() };
                if answered {
                    continue;
                }
                self.ident = self.ident.wrapping_add(1);
                let mut p = if frag { self.first_fragment.clone() } else { self.whole.clone() };
                p[4..6].copy_from_slice(&self.ident.to_be_bytes());
                set_ttl(&mut p, ttl);
                self.probes.insert(self.ident, (frag, ttl));
                self.tx.push_back(p);
            }
        }
        self.round += 1;
    }

    /// A "time exceeded" quoting a packet to our destination.
    pub fn on_time_exceeded(&mut self, from: Ipv4Addr, quoted_dst: Ipv4Addr, quoted_ident: u16) {
        if quoted_dst != self.dst || self.result.is_some() {
            return;
        }
        match self.probes.get(&quoted_ident) {
            Some(&(true, ttl)) => self.fragment_answered[ttl as usize] = true,
            Some(&(false, ttl)) => self.whole_answer[ttl as usize] = Some(from),
            None => {}
        }
    }

    pub fn on_timeout(&mut self, now: Duration) {
        if self.result.is_some() || now < self.next_round {
            return;
        }
        let routers = self.farthest_router();
        let settled = self.round > 0 && routers > 0 && self.farthest_fragment() >= routers;
        if self.round >= self.cfg.rounds || settled {
            let hops = self.whole_answer[1..=routers as usize]
                .iter()
                .map(|a| a.map_or_else(|| "*".to_string(), |a| a.to_string()))
                .collect();
            self.result = Some(FragmentPath::decide(routers, self.farthest_fragment(), hops));
            return;
        }
        self.send_round();
        self.next_round = now + self.cfg.round_wait;
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.tx.pop_front()
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.result.is_none().then_some(self.next_round)
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

    fn drain(x: &mut TcpExchange) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| x.poll_transmit()).collect()
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
        let syn = tcp(&drain(x)[0]);
        assert_eq!(syn.flags, flags::SYN);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let mut sent = drain(x);
        let mut seq = 5001;
        for (i, s) in segments.iter().enumerate() {
            let fl = if i + 1 == segments.len() { flags::ACK | flags::FIN } else { flags::ACK };
            x.on_tcp(ms(2), &from_server(seq, syn.seq + 1 + REQ.len() as u32, fl, s, 2 + i as u16));
            seq += s.len() as u32;
            sent.extend(drain(x));
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
        let syn = tcp(&drain(&mut x)[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        assert_eq!(drain(&mut x).len(), 3, "ACK and two fragments");
        assert_eq!(x.poll_timeout(), Some(ms(501)));
        x.on_timeout(ms(501));
        assert_eq!(drain(&mut x).len(), 2, "the request again, as fragments");
        x.on_timeout(ms(1501));
        assert_eq!(drain(&mut x).len(), 2);
        x.on_timeout(ms(3000));
        assert_eq!(x.outcome(), None, "its RST is still to be sent");
        assert_eq!(tcp(&drain(&mut x)[0]).flags, flags::RST | flags::ACK);
        assert_eq!(x.outcome(), Some(&TcpOutcome::Failed("timeout: request not acknowledged".into())));
    }

    #[test]
    fn an_abort_resets_an_open_connection() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 0 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let syn = tcp(&drain(&mut x)[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let _ = drain(&mut x);
        x.abort();
        let rst = tcp(&drain(&mut x)[0]);
        assert_eq!((rst.flags, rst.seq), (flags::RST | flags::ACK, 101 + REQ.len() as u32));
        assert_eq!(x.outcome(), Some(&TcpOutcome::Failed("stopped".into())));
        x.abort();
        assert!(x.poll_transmit().is_none(), "once");
    }

    #[test]
    fn a_refused_connection_fails_at_once() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Fetch { fragments: 0 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let _ = drain(&mut x);
        x.on_tcp(ms(1), &from_server(0, 101, flags::RST | flags::ACK, &[], 1));
        assert_eq!(x.outcome(), Some(&TcpOutcome::Failed("refused (RST)".into())));
    }

    fn pmtud_until_big(x: &mut TcpExchange) -> (TcpIn, u32) {
        let syn = tcp(&drain(x)[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let _ = drain(x);
        let big = from_server(5001, syn.seq + 1 + REQ.len() as u32, flags::ACK, &[b'x'; 1460], 2);
        x.on_tcp(ms(2), &big);
        (big, syn.seq)
    }

    #[test]
    fn pmtud_works_when_the_data_comes_again_smaller() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Pmtud { mtu: 1280 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let (big, iss) = pmtud_until_big(&mut x);
        let ptb = drain(&mut x);
        assert_eq!(ptb.len(), 1, "no ACK for the big segment, only the ICMP");
        let ip = Ipv4Packet::new_checked(&ptb[0][..]).unwrap();
        assert_eq!((ip.protocol(), ip.payload()[0], ip.payload()[1]), (1, 3, 4));
        assert_eq!(&ip.payload()[8..36], &big.packet[..28]);
        x.on_tcp(ms(3), &from_server(5001, iss + 1 + REQ.len() as u32, flags::ACK, &[b'x'; 1240], 3));
        assert_eq!(tcp(&drain(&mut x)[0]).flags, flags::RST | flags::ACK);
        assert_eq!(x.outcome(), Some(&TcpOutcome::Pmtud(Pmtud::Works, None)));
    }

    #[test]
    fn pmtud_fails_when_full_sized_segments_keep_coming() {
        let mut x =
            TcpExchange::new(ms(0), Mode::Pmtud { mtu: 1280 }, TcpConfig::default(), ENDS, 100, 7, REQ.to_vec());
        let (big, _) = pmtud_until_big(&mut x);
        for n in 2..=3 {
            assert_eq!(drain(&mut x).len(), 1);
            x.on_tcp(ms(100 * n), &big);
            assert_eq!(x.outcome(), None);
        }
        let _ = drain(&mut x);
        x.on_tcp(ms(900), &big);
        let _ = drain(&mut x);
        assert_eq!(x.outcome(), Some(&TcpOutcome::Pmtud(Pmtud::Fails, None)));
    }

    #[test]
    fn each_fragmentation_needed_gets_the_full_timeout() {
        let cfg = TcpConfig { timeout: ms(3000), ..TcpConfig::default() };
        let mut x = TcpExchange::new(ms(0), Mode::Pmtud { mtu: 1280 }, cfg, ENDS, 100, 7, REQ.to_vec());
        let syn = tcp(&drain(&mut x)[0]);
        x.on_tcp(ms(1), &from_server(5000, syn.seq + 1, flags::SYN | flags::ACK, &[], 1));
        let _ = drain(&mut x);
        let big = from_server(5001, syn.seq + 1 + REQ.len() as u32, flags::ACK, &[b'x'; 1460], 2);
        // A slow start (lost SYN-ACKs, say): the big segment at 2.5 s.
        x.on_tcp(ms(2500), &big);
        assert_eq!(x.poll_timeout(), Some(ms(5500)));
        x.on_tcp(ms(4000), &big);
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

    #[test]
    fn the_hop_test_finds_where_fragments_stop() {
        let cfg = HopConfig { max_hops: 8, rounds: 2, round_wait: ms(500), fragments: 2 };
        // Three routers; fragments pass the first two.
        for (passes, stop) in [(2u8, Stop::LastHop), (1, Stop::InPath), (3, Stop::Destination)] {
            let mut h = HopTest::new(ms(0), cfg, ENDS, 1, 100, REQ);
            let probes: Vec<_> = std::iter::from_fn(|| h.poll_transmit()).collect();
            assert_eq!(probes.len(), 16);
            for p in &probes {
                let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
                assert!(ip.verify_checksum());
                let ttl = ip.ttl();
                let reaches = if ip.is_fragment() { passes } else { 3 };
                if ttl <= reaches && ttl <= 3 {
                    h.on_time_exceeded(Ipv4Addr::new(198, 51, 100, ttl), S, ip.ident());
                }
            }
            h.on_timeout(ms(500));
            let again: Vec<_> = std::iter::from_fn(|| h.poll_transmit()).collect();
            let unanswered = 16 - 3 - passes.min(3) as usize;
            assert_eq!(
                again.len(),
                if stop == Stop::Destination { 0 } else { unanswered },
                "round two: the unanswered probes"
            );
            h.on_timeout(ms(1000));
            let r = h.result().unwrap();
            assert_eq!((r.routers, r.fragments_reach, r.stop), (3, passes, stop));
            assert_eq!(r.hops, vec!["198.51.100.1", "198.51.100.2", "198.51.100.3"]);
        }
    }
}
