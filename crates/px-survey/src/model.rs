//! A model of the network a survey meets, for tests without sockets: a
//! client, a chain of routers, and servers that speak enough TCP to answer
//! an HTTP request. Deterministic (seeded), time passed in.
//!
//! What a router can do, per destination address: drop fragments before
//! routing (a filter), drop only non-first fragments (iptables `-f`), hold
//! fragments until the whole train is there (connection tracking's
//! defragmentation, as any NAT or stateful firewall does), drop everything,
//! drop a share of packets at random, drop the ICMP "fragmentation needed"
//! toward the server. Routers answer TTL expiry with ICMP "time exceeded",
//! rate-limited as Linux does by default when asked (`icmp_ratelimit`
//! 1000 ms per destination host, a burst of 6; `icmp_msgs_per_sec` 1000, a
//! burst of 50). A server can refuse a port (RST) or refuse it with ICMP
//! "administratively prohibited", answer a SYN late, and can have a
//! reassembly that never completes. The model counts what reached each server and each router.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::Ipv4Addr;
use std::time::Duration;

use px_wire::icmp;
use px_wire::ipv4::Ipv4Packet;
use px_wire::tcp::flags;

use crate::packet::{Incoming, Seg, TcpIn, parse, tcp_packet};

/// The client's address.
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// One way, per hop.
pub const HOP_DELAY: Duration = Duration::from_millis(1);

/// How a router treats the packets toward one address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Treatment {
    /// Drops every fragment before routing (no "time exceeded" for them).
    pub drop_fragments: bool,
    /// Drops fragments with a non-zero offset (iptables `-f`).
    pub drop_non_first: bool,
    /// Drops everything toward the address.
    pub dead: bool,
    /// Drops this share of packets each way, in percent.
    pub loss_percent: u32,
    /// Drops ICMP "fragmentation needed" toward the address.
    pub icmp_blackhole: bool,
}

/// A token bucket on the model's clock.
#[derive(Clone, Debug)]
struct Bucket {
    per_s: f64,
    burst: f64,
    tokens: f64,
    last: Duration,
}

impl Bucket {
    fn new(per_s: f64, burst: f64) -> Bucket {
        Bucket { per_s, burst, tokens: burst, last: Duration::ZERO }
    }

    fn take(&mut self, now: Duration) -> bool {
        if now > self.last {
            self.tokens = (self.tokens + (now - self.last).as_secs_f64() * self.per_s).min(self.burst);
            self.last = now;
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One router of the chain.
#[derive(Debug)]
pub struct Router {
    pub addr: Ipv4Addr,
    /// Linux's default ICMP rate limits, or none.
    pub rate_limited: bool,
    /// Holds fragments until the train is whole (connection tracking).
    pub conntrack: bool,
    /// Never sends ICMP.
    pub silent: bool,
    pub treat: HashMap<Ipv4Addr, Treatment>,
    per_host: HashMap<Ipv4Addr, Bucket>,
    global: Bucket,
    held: HashMap<(Ipv4Addr, u16), Vec<Vec<u8>>>,
    /// "Time exceeded" messages sent and refused by the rate limit.
    pub icmp_sent: u64,
    pub icmp_limited: u64,
}

impl Router {
    pub fn new(addr: Ipv4Addr) -> Router {
        Router {
            addr,
            rate_limited: false,
            conntrack: false,
            silent: false,
            treat: HashMap::new(),
            per_host: HashMap::new(),
            global: Bucket::new(1000.0, 50.0),
            held: HashMap::new(),
            icmp_sent: 0,
            icmp_limited: 0,
        }
    }

    fn may_answer(&mut self, now: Duration, to: Ipv4Addr) -> bool {
        if self.silent {
            return false;
        }
        if !self.rate_limited {
            return true;
        }
        // icmp_ratelimit 1000 ms per destination host (burst 6), then the
        // global icmp_msgs_per_sec 1000 (burst 50).
        let host = self.per_host.entry(to).or_insert_with(|| Bucket::new(1.0, 6.0)).take(now);
        host && self.global.take(now)
    }
}

/// How a server answers on one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// HTTP on every port.
    Http,
    /// Nothing listens: RST.
    Closed,
    /// A filter answers every SYN with ICMP "administratively prohibited".
    Prohibited,
}

/// A server address.
#[derive(Clone, Copy, Debug)]
pub struct ServerSpec {
    pub service: Service,
    /// Fragments are never reassembled (its reassembly memory is too small).
    pub poor_reassembly: bool,
    /// Answer body bytes.
    pub body: usize,
    /// The SYN-ACK leaves this much later (a slow server or a long queue).
    pub syn_ack_delay: Duration,
}

impl Default for ServerSpec {
    fn default() -> ServerSpec {
        ServerSpec { service: Service::Http, poor_reassembly: false, body: 6000, syn_ack_delay: Duration::ZERO }
    }
}

/// One connection at a server.
#[derive(Debug)]
struct Conn {
    iss: u32,
    /// The client's next sequence number once the request is in.
    request_end: Option<u32>,
    answer: Vec<u8>,
    /// Bytes of `answer` the client acknowledged.
    una: usize,
    mss: usize,
    rto: Duration,
    next_rto: Option<Duration>,
}

/// A server address's state.
#[derive(Debug)]
struct Server {
    spec: ServerSpec,
    conns: HashMap<(u16, u16), Conn>,
    frags: HashMap<u16, Vec<Vec<u8>>>,
    /// Packets that reached it (whole or fragments).
    received: u64,
}

/// What the model counts per target address.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Packets the client sent toward the address, and when.
    pub sent: u64,
    pub sent_at: Vec<Duration>,
    /// Of them, delivered to the server itself.
    pub at_server: u64,
    /// Of those, TCP segments that were neither a SYN nor part of a
    /// connection the server had (the hop test's probes that went past
    /// the last router).
    pub strays_at_server: u64,
    /// SYNs sent, and the least time between two copies of one SYN
    /// (same source port and sequence number).
    pub syns: u64,
    pub min_syn_gap: Option<Duration>,
}

/// The network (see the module notes).
#[derive(Debug)]
pub struct Net {
    pub routers: Vec<Router>,
    servers: HashMap<Ipv4Addr, Server>,
    in_flight: BinaryHeap<Reverse<(Duration, u64, Vec<u8>)>>,
    seq: u64,
    rng: u64,
    pub counts: HashMap<Ipv4Addr, Counts>,
    last_syn: HashMap<(Ipv4Addr, u16, u32), Duration>,
}

impl Net {
    /// `routers` routers (198.51.100.2, .3, …) between the client and the
    /// servers.
    pub fn new(routers: usize, seed: u64) -> Net {
        Net {
            routers: (0..routers).map(|i| Router::new(Ipv4Addr::new(198, 51, 100, 2 + i as u8))).collect(),
            servers: HashMap::new(),
            in_flight: BinaryHeap::new(),
            seq: 0,
            rng: seed | 1,
            counts: HashMap::new(),
            last_syn: HashMap::new(),
        }
    }

    pub fn add_server(&mut self, addr: Ipv4Addr, spec: ServerSpec) {
        self.servers.insert(addr, Server { spec, conns: HashMap::new(), frags: HashMap::new(), received: 0 });
    }

    /// Sets how router `hop` (1-based) treats packets toward `addr`.
    pub fn treat(&mut self, hop: usize, addr: Ipv4Addr, t: Treatment) {
        self.routers[hop - 1].treat.insert(addr, t);
    }

    /// Connections a server still holds (half-open or open: the client
    /// never reset them).
    pub fn open_connections(&self) -> usize {
        self.servers.values().map(|s| s.conns.len()).sum()
    }

    /// The addresses and port pairs of those connections.
    pub fn open_connection_list(&self) -> Vec<(Ipv4Addr, (u16, u16))> {
        self.servers.iter().flat_map(|(a, s)| s.conns.keys().map(move |k| (*a, *k))).collect()
    }

    fn random_percent(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % 100) as u32
    }

    fn deliver(&mut self, at: Duration, p: Vec<u8>) {
        self.seq += 1;
        self.in_flight.push(Reverse((at, self.seq, p)));
    }

    /// A packet the client's next delivery is due, if one is by `now`.
    pub fn poll_deliver(&mut self, now: Duration) -> Option<Vec<u8>> {
        if self.in_flight.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
            return self.in_flight.pop().map(|Reverse((_, _, p))| p);
        }
        None
    }

    /// The next time something happens in the network (a delivery, a
    /// server's retransmission).
    pub fn next_event(&self) -> Option<Duration> {
        let d = self.in_flight.peek().map(|Reverse((at, _, _))| *at);
        let r = self.servers.values().flat_map(|s| s.conns.values()).filter_map(|c| c.next_rto);
        d.into_iter().chain(r).min()
    }

    /// A packet from the client at `now`.
    pub fn send(&mut self, now: Duration, p: Vec<u8>) {
        let Ok(ip) = Ipv4Packet::new_checked(&p[..]) else { return };
        let dst = ip.dst();
        let c = self.counts.entry(dst).or_default();
        c.sent += 1;
        c.sent_at.push(now);
        if let Incoming::Tcp(t) = parse(&p)
            && t.flags == flags::SYN
        {
            c.syns += 1;
            let key = (dst, t.sport, t.seq);
            if let Some(prev) = self.last_syn.insert(key, now) {
                let gap = now - prev;
                c.min_syn_gap = Some(c.min_syn_gap.map_or(gap, |g: Duration| g.min(gap)));
            }
        }
        self.forward(now, p, 1);
    }

    /// Carries a client packet from router `from_hop` on.
    fn forward(&mut self, now: Duration, mut p: Vec<u8>, from_hop: usize) {
        for hop in from_hop..=self.routers.len() {
            let at = now + HOP_DELAY * hop as u32;
            let ip = Ipv4Packet::new_checked(&p[..]).expect("a packet we built");
            let (dst, ttl, is_frag, first, ident) =
                (ip.dst(), ip.ttl(), ip.is_fragment(), ip.frag_offset() == 0, ip.ident());
            let t = self.routers[hop - 1].treat.get(&dst).copied().unwrap_or_default();
            if t.dead || (is_frag && t.drop_fragments) || (is_frag && !first && t.drop_non_first) {
                return;
            }
            if t.loss_percent > 0 && self.random_percent() < t.loss_percent {
                return;
            }
            if t.icmp_blackhole && ip.protocol() == 1 {
                return;
            }
            if is_frag && self.routers[hop - 1].conntrack {
                // Held until the whole train is there; then the train goes
                // on (Linux refragments to the sizes it came in), and a
                // TTL that runs out is one "time exceeded" for the
                // reassembled packet.
                let r = &mut self.routers[hop - 1];
                let train = r.held.entry((dst, ident)).or_default();
                train.push(p);
                let Some(whole) = reassemble(train) else { return };
                let train = r.held.remove(&(dst, ident)).unwrap_or_default();
                if ttl <= 1 {
                    self.time_exceeded(at, hop, &whole);
                    return;
                }
                for mut f in train {
                    decrement_ttl(&mut f);
                    self.forward(now, f, hop + 1);
                }
                return;
            }
            if ttl <= 1 {
                if !is_frag || first {
                    self.time_exceeded(at, hop, &p);
                }
                return;
            }
            decrement_ttl(&mut p);
        }
        let at = now + HOP_DELAY * (self.routers.len() as u32 + 1);
        self.at_server(at, p);
    }

    fn time_exceeded(&mut self, at: Duration, hop: usize, quoted: &[u8]) {
        let r = &mut self.routers[hop - 1];
        if !r.may_answer(at, CLIENT) {
            r.icmp_limited += 1;
            return;
        }
        r.icmp_sent += 1;
        let mut out = vec![0u8; 128];
        let n = icmp::emit_v4_error(&mut out, 1, icmp::V4_TIME_EXCEEDED, 0, [0; 4], r.addr, CLIENT, quoted, 28);
        out.truncate(n);
        self.back(at, hop, out, None);
    }

    /// Carries a packet back to the client from hop `hop` (the server is
    /// hop `routers + 1`), through the routers' loss toward `about`.
    fn back(&mut self, at: Duration, hop: usize, mut p: Vec<u8>, about: Option<Ipv4Addr>) {
        if let Some(a) = about {
            for h in 1..hop.min(self.routers.len() + 1) {
                let t = self.routers[h - 1].treat.get(&a).copied().unwrap_or_default();
                if t.dead || (t.loss_percent > 0 && self.random_percent() < t.loss_percent) {
                    return;
                }
            }
        }
        // Each router on the way back takes one off the TTL.
        for _ in 1..hop {
            decrement_ttl(&mut p);
        }
        self.deliver(at + HOP_DELAY * hop as u32, p);
    }

    fn at_server(&mut self, at: Duration, p: Vec<u8>) {
        let ip = Ipv4Packet::new_checked(&p[..]).expect("a packet we built");
        let dst = ip.dst();
        let Some(s) = self.servers.get_mut(&dst) else { return };
        s.received += 1;
        self.counts.entry(dst).or_default().at_server += 1;
        let whole = if ip.is_fragment() {
            if s.spec.poor_reassembly {
                return;
            }
            let train = s.frags.entry(ip.ident()).or_default();
            train.push(p.clone());
            let Some(w) = reassemble(train) else { return };
            s.frags.remove(&ip.ident());
            w
        } else {
            p
        };
        let Incoming::Tcp(t) = parse(&whole) else { return self.server_icmp(at, dst, &whole) };
        self.server_tcp(at, dst, &t);
    }

    /// A "fragmentation needed" for one of the server's segments: the
    /// server sends what is unacknowledged again in segments that fit.
    fn server_icmp(&mut self, at: Duration, dst: Ipv4Addr, p: &[u8]) {
        let Ok(ip) = Ipv4Packet::new_checked(p) else { return };
        let Ok(m) = icmp::IcmpMessage::new_checked(ip.payload()) else { return };
        let (Some(mtu), q) = (m.v4_next_hop_mtu(), m.quoted()) else { return };
        if q.len() < 28 {
            return;
        }
        let (sport, dport) = (u16::from_be_bytes([q[20], q[21]]), u16::from_be_bytes([q[22], q[23]]));
        let Some(c) = self.servers.get_mut(&dst).and_then(|s| s.conns.get_mut(&(sport, dport))) else { return };
        c.mss = c.mss.min(mtu as usize - 40);
        self.server_send(at, dst, (sport, dport));
    }

    fn server_tcp(&mut self, at: Duration, dst: Ipv4Addr, t: &TcpIn) {
        let key = (t.dport, t.sport);
        let hops = self.routers.len() + 1;
        let s = self.servers.get_mut(&dst).expect("checked");
        let seg = |s: &Seg<'_>| tcp_packet(s);
        let reply = |seq: u32, ack: u32, fl: u8, payload: &[u8]| {
            seg(&Seg {
                src: dst,
                dst: t.src,
                sport: t.dport,
                dport: t.sport,
                seq,
                ack,
                flags: fl,
                mss: (fl & flags::SYN != 0).then_some(1460),
                payload,
                ident: 0,
                ttl: 64,
            })
        };
        if t.flags & flags::RST != 0 {
            s.conns.remove(&key);
            return;
        }
        match s.spec.service {
            Service::Closed => {
                if t.flags & flags::SYN != 0 {
                    let p = reply(0, t.seq.wrapping_add(1), flags::RST | flags::ACK, &[]);
                    self.back(at, hops, p, Some(dst));
                }
                return;
            }
            Service::Prohibited => {
                let mut out = vec![0u8; 128];
                let n = icmp::emit_v4_error(&mut out, 1, icmp::V4_DEST_UNREACH, 13, [0; 4], dst, t.src, &t.packet, 28);
                out.truncate(n);
                self.back(at, hops, out, Some(dst));
                return;
            }
            Service::Http => {}
        }
        if t.flags & flags::SYN != 0 {
            let iss = 7_000_000;
            s.conns.entry(key).or_insert(Conn {
                iss,
                request_end: None,
                answer: Vec::new(),
                una: 0,
                mss: 1460,
                rto: Duration::from_millis(200),
                next_rto: None,
            });
            let p = reply(iss, t.seq.wrapping_add(1), flags::SYN | flags::ACK, &[]);
            let delay = s.spec.syn_ack_delay;
            return self.back(at + delay, hops, p, Some(dst));
        }
        let Some(c) = s.conns.get_mut(&key) else {
            self.counts.entry(dst).or_default().strays_at_server += 1;
            // No connection: RST, as a real stack answers.
            let p = reply(t.ack, 0, flags::RST, &[]);
            return self.back(at, hops, p, Some(dst));
        };
        if t.flags & flags::ACK != 0 {
            let acked = t.ack.wrapping_sub(c.iss.wrapping_add(1)) as usize;
            if acked <= c.answer.len() + 1 {
                c.una = c.una.max(acked.min(c.answer.len()));
            }
        }
        if !t.payload.is_empty() && c.request_end.is_none() && t.payload.windows(4).any(|w| w == b"\r\n\r\n") {
            c.request_end = Some(t.seq.wrapping_add(t.payload.len() as u32));
            let body: Vec<u8> = b"model server\n".iter().copied().cycle().take(s.spec.body).collect();
            c.answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
            c.answer.extend_from_slice(&body);
            self.server_send(at, dst, key);
        }
    }

    /// Sends what the client has not acknowledged, in segments of the
    /// connection's MSS, FIN on the last; arms the retransmission timer.
    fn server_send(&mut self, at: Duration, dst: Ipv4Addr, key: (u16, u16)) {
        let hops = self.routers.len() + 1;
        let Some(c) = self.servers.get_mut(&dst).and_then(|s| s.conns.get_mut(&key)) else { return };
        let Some(ack) = c.request_end else { return };
        let mut out = Vec::new();
        let mut off = c.una;
        while off < c.answer.len() {
            let end = (off + c.mss).min(c.answer.len());
            let fl = if end == c.answer.len() { flags::ACK | flags::FIN } else { flags::ACK };
            out.push(tcp_packet(&Seg {
                src: dst,
                dst: CLIENT,
                sport: key.0,
                dport: key.1,
                seq: c.iss.wrapping_add(1).wrapping_add(off as u32),
                ack,
                flags: fl,
                mss: None,
                payload: &c.answer[off..end],
                ident: 0,
                ttl: 64,
            }));
            off = end;
        }
        c.next_rto = (!out.is_empty()).then_some(at + c.rto);
        for p in out {
            self.back(at, hops, p, Some(dst));
        }
    }

    /// Runs the servers' retransmission timers due by `now`.
    pub fn advance(&mut self, now: Duration) {
        let due: Vec<(Ipv4Addr, (u16, u16))> = self
            .servers
            .iter()
            .flat_map(|(a, s)| s.conns.iter().map(move |(k, c)| (*a, *k, c.next_rto)))
            .filter(|(_, _, t)| t.is_some_and(|t| t <= now))
            .map(|(a, k, _)| (a, k))
            .collect();
        for (a, k) in due {
            if let Some(c) = self.servers.get_mut(&a).and_then(|s| s.conns.get_mut(&k)) {
                c.rto = (c.rto * 2).min(Duration::from_secs(2));
                if c.una >= c.answer.len() {
                    c.next_rto = None;
                    continue;
                }
            }
            self.server_send(now, a, k);
        }
    }
}

fn decrement_ttl(p: &mut [u8]) {
    let mut ip = Ipv4Packet::new_unchecked(p);
    let ttl = ip.ttl();
    ip.set_ttl(ttl - 1);
    ip.fill_checksum();
}

/// The whole packet of a fragment train, if every piece is there.
fn reassemble(train: &[Vec<u8>]) -> Option<Vec<u8>> {
    let mut pieces: Vec<(usize, bool, &[u8])> = train
        .iter()
        .filter_map(|f| {
            let ip = Ipv4Packet::new_checked(&f[..]).ok()?;
            Some((ip.frag_offset(), ip.more_frags(), &f[ip.header_len()..ip.total_len()]))
        })
        .collect();
    pieces.sort_by_key(|p| p.0);
    pieces.dedup_by_key(|p| p.0);
    let mut payload = Vec::new();
    for (off, _, data) in &pieces {
        if *off != payload.len() {
            return None;
        }
        payload.extend_from_slice(data);
    }
    if pieces.last().is_none_or(|p| p.1) {
        return None;
    }
    let head = &train.iter().find(|f| Ipv4Packet::new_checked(&f[..]).is_ok_and(|ip| ip.frag_offset() == 0))?[..20];
    let mut whole = head.to_vec();
    whole.extend_from_slice(&payload);
    let total = whole.len() as u16;
    let mut ip = Ipv4Packet::new_unchecked(&mut whole[..]);
    ip.set_frag(false, false, 0);
    ip.set_total_len(total);
    ip.fill_checksum();
    Some(whole)
}

/// Runs a scheduler against the model until every target is done (or
/// `limit` of model time passes); returns the records and the time taken.
pub fn drive(
    sched: &mut crate::scheduler::Scheduler,
    net: &mut Net,
    limit: Duration,
) -> (Vec<crate::Record>, Duration) {
    drive_on(sched, net, limit, Duration::ZERO)
}

/// [`drive`], then `grace` more of model time with the scheduler still
/// answering what arrives (late answers to finished targets); the time
/// returned is when the last target finished.
pub fn drive_on(
    sched: &mut crate::scheduler::Scheduler,
    net: &mut Net,
    limit: Duration,
    grace: Duration,
) -> (Vec<crate::Record>, Duration) {
    let mut now = Duration::ZERO;
    let mut records = Vec::new();
    let mut finished: Option<Duration> = None;
    while now < limit && finished.is_none_or(|f| now < f + grace) {
        while let Some(p) = net.poll_deliver(now) {
            sched.handle_packet(now, &p);
        }
        sched.handle_timeout(now, &mut |_| Ok(CLIENT));
        while let Some(p) = sched.poll_transmit(now) {
            net.send(now, p);
        }
        records.extend(std::iter::from_fn(|| sched.poll_record()));
        if sched.is_done() && finished.is_none() {
            finished = Some(now);
            if grace.is_zero() {
                break;
            }
        }
        net.advance(now);
        let next = [sched.poll_timeout(), net.next_event(), Some(now + Duration::from_millis(50))]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(limit);
        now = next.max(now + Duration::from_micros(100));
    }
    (records, finished.unwrap_or(now))
}
