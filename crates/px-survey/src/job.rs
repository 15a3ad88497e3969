//! One target of the survey, from its first SYN to its record: the
//! per-target job, sans-I/O with time passed in.
//!
//! A [`TargetJob`] runs the target's stages in order (unfragmented fetch,
//! fragmented fetch, the hop test where fragments got no answer, the PMTUD
//! test once per address), retries a fetch that timed out (not one that
//! was refused), and builds the [`Record`] when it is done. Packets in
//! ([`TargetJob::handle_tcp`], [`TargetJob::handle_unreachable`],
//! [`TargetJob::handle_time_exceeded`]), timers
//! ([`TargetJob::handle_timeout`], [`TargetJob::poll_timeout`]), packets
//! out ([`TargetJob::poll_transmit`], which is when a packet leaves and
//! its timers start). What the jobs of one run share (source ports, the
//! random numbers of initial sequence numbers and identifications, which
//! addresses had their PMTUD test and their hop test) is a [`Context`]
//! passed in.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::exchange::{Ends, HopConfig, HopTest, Mode, TcpConfig, TcpExchange, TcpOutcome};
use crate::packet::{TcpIn, hops_from_ttl};
use crate::record::{FetchResult, Fingerprint, FragmentPath, Pmtud, Record, classify};
use crate::target::Target;

/// What every job of a run does the same way.
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// Our TCP's timers and limits.
    pub tcp: TcpConfig,
    /// Extra connections after a fetch that timed out (plain and fragmented).
    pub retries: u32,
    /// IP fragments the request is cut into.
    pub fragments: usize,
    /// The hop test's limits and timers.
    pub hops: HopConfig,
    /// The MTU the PMTUD test announces.
    pub ptb_mtu: u16,
    /// The HTTP request's path.
    pub path: String,
}

/// An address's hop test: under way (by which target) or done.
#[derive(Clone, Debug)]
enum HopState {
    Testing(String),
    Done(FragmentPath, String),
}

/// What the jobs of one run share: their configuration, the source ports
/// in use, the random numbers, and the addresses whose PMTUD test and hop
/// test are taken (by which target).
#[derive(Debug)]
pub struct Context {
    cfg: JobConfig,
    ports: (u16, u16),
    ports_in_use: HashSet<u16>,
    next_port: u16,
    rng: u64,
    exchanges: u32,
    pmtud_claimed: HashMap<Ipv4Addr, String>,
    paths: HashMap<Ipv4Addr, HopState>,
}

/// What a previous run of the same output already measured, per address.
#[derive(Clone, Debug, Default)]
pub struct Prior {
    /// Addresses whose PMTUD test was done, by which target.
    pub pmtud_tested: HashMap<Ipv4Addr, String>,
    /// Addresses whose hop test was done: its result and the target that ran it.
    pub paths: HashMap<Ipv4Addr, (FragmentPath, String)>,
}

impl Context {
    /// `ports`: our source port range; `seed`: the run's random seed
    /// (initial sequence numbers and identifications); `prior`: what a
    /// previous run measured.
    pub fn new(cfg: JobConfig, ports: (u16, u16), seed: u64, prior: Prior) -> Context {
        Context {
            cfg,
            ports,
            ports_in_use: HashSet::new(),
            next_port: ports.0,
            rng: seed | 1,
            exchanges: 0,
            pmtud_claimed: prior.pmtud_tested,
            paths: prior.paths.into_iter().map(|(a, (p, by))| (a, HopState::Done(p, by))).collect(),
        }
    }

    /// The jobs' configuration.
    pub fn config(&self) -> &JobConfig {
        &self.cfg
    }

    /// Whether `port` is one of our source ports.
    pub fn is_ours(&self, port: u16) -> bool {
        (self.ports.0..=self.ports.1).contains(&port)
    }

    fn random(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 16) as u32
    }

    /// A source port no other exchange uses, if one is free.
    fn take_port(&mut self) -> Option<u16> {
        let (lo, hi) = self.ports;
        for _ in lo..=hi {
            let p = self.next_port;
            self.next_port = if p >= hi { lo } else { p + 1 };
            if self.ports_in_use.insert(p) {
                return Some(p);
            }
        }
        None
    }

    fn free_port(&mut self, p: u16) {
        self.ports_in_use.remove(&p);
    }

    /// The first IP identification of a new exchange: exchanges 256 apart,
    /// a random low part.
    fn ident(&mut self) -> u16 {
        self.exchanges = self.exchanges.wrapping_add(1);
        (self.exchanges as u16).wrapping_mul(256).wrapping_add(self.random() as u16 & 0x3f)
    }

    /// Claims the PMTUD test of `addr` for `target`, or names the target
    /// that has it.
    fn claim_pmtud(&mut self, addr: Ipv4Addr, target: &str) -> Result<(), String> {
        match self.pmtud_claimed.get(&addr) {
            Some(other) => Err(other.clone()),
            None => {
                self.pmtud_claimed.insert(addr, target.to_owned());
                Ok(())
            }
        }
    }

    fn request(&self, t: &Target) -> Vec<u8> {
        format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: px-survey/{} (fragment-delivery survey)\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n",
            self.cfg.path,
            t.host_header(),
            env!("CARGO_PKG_VERSION")
        )
        .into_bytes()
    }
}

/// The stages of a target, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Plain,
    Fragmented,
    Hops,
    Pmtud,
}

/// The conversation in progress.
#[derive(Debug)]
enum Current {
    Tcp(TcpExchange),
    Hops(HopTest),
    /// Another target of the address is running its hop test: look again
    /// at this time.
    AwaitPath(Duration),
    None,
}

/// How often a job waiting for its address's hop test looks again.
const PATH_RECHECK: Duration = Duration::from_millis(200);

/// The key that matches a packet to the exchange in progress: the
/// target's address, the port its segments come from (0 for a hop test,
/// whose answers quote our port), our source port.
pub type ConnKey = (Ipv4Addr, u16, u16);

/// What the next packet of a job needs before it may leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ready {
    /// Its destination (the per-destination rate).
    pub dst: Ipv4Addr,
    /// A hop test's probe: its TTL (the routers' ICMP budget is paced per TTL).
    pub hop: Option<u8>,
}

/// One target in progress (see the module notes).
#[derive(Debug)]
pub struct TargetJob {
    target: Target,
    src: Ipv4Addr,
    request: Vec<u8>,
    started: Duration,
    stage: Stage,
    attempt: u32,
    stage_started: Duration,
    plain: Option<FetchResult>,
    fragmented: Option<FetchResult>,
    path: Option<FragmentPath>,
    /// Routers to the server, from the TTL of its answers.
    routers: Option<u8>,
    pmtud: (Pmtud, Option<String>),
    current: Current,
    sport: u16,
    finished: bool,
    probes: u32,
    late_probes: u32,
}

impl TargetJob {
    /// A job for `target`, sent from `src` (the route's source address),
    /// or a finished one if there is no route (`src` says why).
    pub fn new(now: Duration, target: Target, src: Result<Ipv4Addr, String>, ctx: &mut Context) -> TargetJob {
        let request = ctx.request(&target);
        let mut job = TargetJob {
            target,
            src: Ipv4Addr::UNSPECIFIED,
            request,
            started: now,
            stage: Stage::Plain,
            attempt: 0,
            stage_started: now,
            plain: None,
            fragmented: None,
            path: None,
            routers: None,
            pmtud: (Pmtud::NotTested, None),
            current: Current::None,
            sport: 0,
            finished: false,
            probes: 0,
            late_probes: 0,
        };
        match src {
            Ok(src) => {
                job.src = src;
                job.start(now, ctx);
            }
            Err(why) => {
                job.plain = Some(FetchResult {
                    fingerprint: None,
                    failure: Some(format!("no route: {why}")),
                    attempts: 0,
                    ms: 0.0,
                });
                job.finished = true;
            }
        }
        job
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The key of the exchange in progress, if one is.
    pub fn conn_key(&self) -> Option<ConnKey> {
        match self.current {
            Current::Tcp(_) => Some((self.target.addr, self.target.port, self.sport)),
            Current::Hops(_) => Some((self.target.addr, 0, self.sport)),
            Current::AwaitPath(_) | Current::None => None,
        }
    }

    /// A TCP segment matched to this job's connection.
    pub fn handle_tcp(&mut self, now: Duration, seg: &TcpIn) {
        if let Current::Tcp(x) = &mut self.current {
            x.on_tcp(now, seg);
        }
    }

    /// An ICMP destination unreachable quoting this job's connection.
    pub fn handle_unreachable(&mut self, code: u8) {
        if let Current::Tcp(x) = &mut self.current {
            x.on_unreachable(code);
        }
    }

    /// A "time exceeded" quoting a probe of this job's hop test.
    pub fn handle_time_exceeded(&mut self, from: Ipv4Addr, quoted_dst: Ipv4Addr, quoted_ident: u16) {
        if let Current::Hops(h) = &mut self.current {
            h.on_time_exceeded(from, quoted_dst, quoted_ident);
        }
    }

    /// Runs the timers of the exchange in progress, and moves on to the
    /// next stage when it is done.
    pub fn handle_timeout(&mut self, now: Duration, ctx: &mut Context) {
        if self.sport == 0 && !self.finished && !matches!(self.current, Current::AwaitPath(_)) {
            // Waiting for a free port.
            self.start(now, ctx);
        }
        match &mut self.current {
            Current::Tcp(x) if x.poll_timeout().is_some_and(|t| t <= now) => x.on_timeout(now),
            Current::Hops(h) if h.poll_timeout().is_some_and(|t| t <= now) => h.on_timeout(now),
            Current::AwaitPath(t) if *t <= now => self.enter_hops(now, ctx),
            _ => {}
        }
        self.settle(now, ctx);
    }

    /// Moves on while the exchange in progress is done and has sent
    /// everything.
    fn settle(&mut self, now: Duration, ctx: &mut Context) {
        while self.exchange_done() {
            self.advance(now, ctx);
        }
    }

    fn exchange_done(&self) -> bool {
        match &self.current {
            Current::Tcp(x) => x.outcome().is_some(),
            Current::Hops(h) => h.result().is_some(),
            Current::AwaitPath(_) | Current::None => false,
        }
    }

    /// When [`Self::handle_timeout`] has work to do next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Duration> {
        match &self.current {
            Current::Tcp(x) => x.poll_timeout(),
            Current::Hops(h) => h.poll_timeout(),
            Current::AwaitPath(t) => Some(*t),
            Current::None => None,
        }
    }

    /// What the next packet needs before it may leave, if one is ready.
    pub fn ready(&self) -> Option<Ready> {
        let dst = self.target.addr;
        match &self.current {
            Current::Tcp(x) if x.has_packet() => Some(Ready { dst, hop: None }),
            Current::Hops(h) => h.next_ttl().map(|ttl| Ready { dst, hop: Some(ttl) }),
            _ => None,
        }
    }

    /// The next packet, which leaves `now` (the caller's rate limits
    /// allowed it): its timers start here.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Duration, ctx: &mut Context) -> Option<Vec<u8>> {
        let p = match &mut self.current {
            Current::Tcp(x) => x.poll_transmit(now),
            Current::Hops(h) => h.poll_transmit(now),
            Current::AwaitPath(_) | Current::None => None,
        }?;
        self.settle(now, ctx);
        Some(p)
    }

    /// Gives up at once (the survey is stopping): an RST for a connection
    /// that may be open, and nothing else of what was waiting.
    pub fn abort(&mut self, now: Duration) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if let Current::Tcp(x) = &mut self.current {
            x.abort();
            out.extend(std::iter::from_fn(|| x.poll_transmit(now)));
        }
        out
    }

    /// Whether the job is done and has sent everything.
    pub fn is_done(&self) -> bool {
        self.finished
    }

    /// Gives the job's source port back (once it is done).
    pub fn release(&mut self, ctx: &mut Context) {
        if self.sport != 0 {
            ctx.free_port(self.sport);
            self.sport = 0;
        }
        self.count_sent();
        self.current = Current::None;
    }

    /// Adds the exchange in progress's packets to the job's count.
    fn count_sent(&mut self) {
        let (sent, late) = match &self.current {
            Current::Tcp(x) => x.sent(),
            Current::Hops(h) => h.sent(),
            Current::AwaitPath(_) | Current::None => (0, 0),
        };
        self.probes += sent;
        self.late_probes += late;
    }

    /// Starts the next connection or hop test.
    fn start(&mut self, now: Duration, ctx: &mut Context) {
        self.release(ctx);
        let Some(sport) = ctx.take_port() else {
            // Every port busy: try again on the next timeout.
            return;
        };
        self.sport = sport;
        self.stage_started = now;
        let ends = Ends { src: self.src, dst: self.target.addr, sport, dport: self.target.port };
        let req = self.request.clone();
        let (iss, ident) = (ctx.random(), ctx.ident());
        let cfg = ctx.config();
        let tcp = |mode| Current::Tcp(TcpExchange::new(now, mode, cfg.tcp, ends, iss, ident, req.clone()));
        self.current = match self.stage {
            Stage::Plain => tcp(Mode::Fetch { fragments: 0 }),
            Stage::Fragmented => tcp(Mode::Fetch { fragments: cfg.fragments }),
            Stage::Pmtud => tcp(Mode::Pmtud { mtu: cfg.ptb_mtu }),
            Stage::Hops => {
                let routers = self.routers.unwrap_or(cfg.hops.max_hops);
                Current::Hops(HopTest::new(cfg.hops, ends, routers, iss, ident, &req))
            }
        };
    }

    /// Moves the job on after its current exchange finished.
    fn advance(&mut self, now: Duration, ctx: &mut Context) {
        let ms = (now - self.stage_started).as_secs_f64() * 1e3;
        let tcp_outcome = match &self.current {
            Current::Tcp(x) => {
                if self.routers.is_none() {
                    self.routers = x.server_ttl().map(hops_from_ttl);
                }
                x.outcome().cloned()
            }
            Current::Hops(h) => {
                let path = h.result().cloned();
                if let Some(p) = &path {
                    ctx.paths.insert(self.target.addr, HopState::Done(p.clone(), self.target.key()));
                }
                self.path = path;
                None
            }
            Current::AwaitPath(_) | Current::None => None,
        };
        let retries = ctx.config().retries;
        match (self.stage, tcp_outcome) {
            (stage @ (Stage::Plain | Stage::Fragmented), Some(o)) => {
                let r = fetch_result(&o, self.attempt, ms);
                if retry(&r, self.attempt, retries) {
                    self.attempt += 1;
                } else {
                    let answered = r.answered();
                    self.attempt = 0;
                    match (stage, answered) {
                        (Stage::Plain, true) => self.stage = Stage::Fragmented,
                        (Stage::Plain, false) => self.pmtud = (Pmtud::NotTested, None),
                        (_, true) => self.begin_pmtud(ctx),
                        (_, false) => self.stage = Stage::Hops,
                    }
                    if stage == Stage::Plain {
                        self.plain = Some(r);
                        if !answered {
                            return self.finish(ctx);
                        }
                    } else {
                        self.fragmented = Some(r);
                    }
                }
            }
            (Stage::Hops, None) => self.begin_pmtud(ctx),
            (Stage::Pmtud, Some(TcpOutcome::Pmtud(v, note))) => {
                self.pmtud = (v, note);
                return self.finish(ctx);
            }
            _ => unreachable!("stage and exchange agree"),
        }
        if self.finished {
            return self.release(ctx);
        }
        if self.stage == Stage::Hops {
            return self.enter_hops(now, ctx);
        }
        self.start(now, ctx);
    }

    /// The hop test, once per address: this job runs it, waits for
    /// another target's, or takes its result.
    fn enter_hops(&mut self, now: Duration, ctx: &mut Context) {
        let key = self.target.key();
        match ctx.paths.get(&self.target.addr) {
            Some(HopState::Done(p, by)) => {
                let mut p = p.clone();
                p.tested_on = (*by != key).then(|| by.clone());
                self.release(ctx);
                self.path = Some(p);
                self.begin_pmtud(ctx);
                if self.finished {
                    return self.release(ctx);
                }
                self.start(now, ctx);
            }
            Some(HopState::Testing(other)) if *other != key => {
                self.release(ctx);
                self.current = Current::AwaitPath(now + PATH_RECHECK);
            }
            _ => {
                ctx.paths.insert(self.target.addr, HopState::Testing(key));
                self.start(now, ctx);
            }
        }
    }

    fn begin_pmtud(&mut self, ctx: &mut Context) {
        match ctx.claim_pmtud(self.target.addr, &self.target.key()) {
            Err(other) => {
                self.pmtud = (Pmtud::SameAddress, Some(format!("tested on {other}")));
                self.finish(ctx);
            }
            Ok(()) => self.stage = Stage::Pmtud,
        }
    }

    fn finish(&mut self, ctx: &mut Context) {
        self.finished = true;
        self.release(ctx);
    }

    /// The target's output line (call once [`Self::is_done`]).
    pub fn record(&self, now: Duration, fragments: usize) -> Record {
        let plain = self.plain.clone().unwrap_or(FetchResult {
            fingerprint: None,
            failure: Some("no route".into()),
            attempts: 0,
            ms: 0.0,
        });
        let identical = match (&plain.fingerprint, self.fragmented.as_ref().and_then(|f| f.fingerprint.as_ref())) {
            (Some(p), Some(f)) => Some(p == f),
            (Some(_), None) if self.fragmented.is_some() => Some(false),
            _ => None,
        };
        Record {
            target: self.target.key(),
            addr: self.target.addr,
            port: self.target.port,
            host: self.target.host.clone(),
            class: classify(&plain, self.fragmented.as_ref(), self.path.as_ref()),
            plain,
            fragmented: self.fragmented.clone(),
            fragments,
            identical,
            fragment_path: self.path.clone(),
            icmp_pmtud: self.pmtud.0,
            pmtud_note: self.pmtud.1.clone(),
            ms: (now - self.started).as_secs_f64() * 1e3,
            probes: self.probes,
            late_probes: self.late_probes,
        }
    }
}

/// A fetch's result from its exchange's outcome.
fn fetch_result(o: &TcpOutcome, attempt: u32, ms: f64) -> FetchResult {
    match o {
        TcpOutcome::Answer(bytes) => match Fingerprint::of(bytes) {
            Ok(fp) => FetchResult { fingerprint: Some(fp), failure: None, attempts: attempt + 1, ms },
            Err(why) => FetchResult { fingerprint: None, failure: Some(why), attempts: attempt + 1, ms },
        },
        TcpOutcome::Failed(why) => {
            FetchResult { fingerprint: None, failure: Some(why.clone()), attempts: attempt + 1, ms }
        }
        TcpOutcome::Pmtud(..) => unreachable!("a fetch has no PMTUD verdict"),
    }
}

/// A fetch that timed out is tried again, `retries` times; a refusal is
/// an answer and is not.
fn retry(r: &FetchResult, attempt: u32, retries: u32) -> bool {
    r.fingerprint.is_none() && attempt < retries && r.failure.as_deref().is_some_and(|f| f.starts_with("timeout"))
}
