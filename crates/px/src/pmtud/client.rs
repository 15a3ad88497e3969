//! `px probe`'s socket drivers around px-pmtud's sans-I/O cores.
//!
//! Three methods, each over one connected UDP socket to a `px fpmtud`
//! responder, unprivileged:
//!
//! * [`fpmtud`]: F-PMTUD. The DF-clear round-1 probe goes out with
//!   `IP_PMTUDISC_INTERFACE` (DF clear, the interface MTU, no cached PMTU),
//!   DF-set confirmation probes with `IP_PMTUDISC_PROBE`. Ends with the
//!   prober's outcome, which may be "fall back to DPLPMTUD".
//! * [`dplpmtud`]: RFC 8899 DPLPMTUD ([`Dplpmtud`]), each probe a DF-set
//!   confirmation probe; the responder's confirming report is the probe's
//!   acknowledgement. Validated ICMP "too big" messages only speed the
//!   search up (RFC 8899 §4.6); without them the probe timers decide.
//! * [`icmp`]: classic PMTUD (RFC 1191 / RFC 8201) for comparison: DF-set
//!   probes with `IP_PMTUDISC_DO`, sizes lowered by ICMP "fragmentation
//!   needed" / "packet too big" read from `IP_RECVERR`, done when a probe is
//!   answered. Fails on a black hole (no ICMP comes back).
//! * [`auto`]: F-PMTUD on IPv4 with an early hand-over to DPLPMTUD when
//!   fragments do not get through; DPLPMTUD on IPv6.
//!
//! Time comes from `Instant::now()` here and only here; the cores get it
//! as an argument. The socket is polled with the cores' `poll_timeout` as
//! the timeout, and every measurement is bounded by an overall deadline.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use px_pmtud::dplpmtud::{BASE_PLPMTU, Dplpmtud, DplpmtudConfig, IPV4_MIN_MTU, State};
use px_pmtud::fpmtud::prober::{FallbackReason, Method, Outcome, Phase, Prober, ProberConfig};
use px_pmtud::fpmtud::wire::{self, ProbeKind, ProbeRepr, Reply};
use px_pmtud::rtt::{ClassicRtt, RttEstimator, RttSample};
use px_pmtud::search::SearchStrategy;

use px_io::{DfMode, QueuedError, UdpSocket, interface_mtu_of, random_u64};

/// IPv6 minimum link MTU (RFC 8200 §5): every IPv6 path carries it.
pub const IPV6_MIN_MTU: u16 = 1280;

/// What the caller asks of a measurement.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// The responder.
    pub target: SocketAddr,
    /// Largest size to consider (default: the local link MTU).
    pub max_size: Option<u16>,
    /// Overall bound on the measurement.
    pub timeout: Duration,
    /// Floor of DPLPMTUD's PROBE_TIMER and of the classic method's retry timer.
    pub probe_timer: Duration,
    /// RTT assumed before the first sample.
    pub initial_rtt: Duration,
    /// DPLPMTUD search strategy.
    pub search: SearchStrategy,
    /// Send legacy `FPMT` probes (for the paper authors' reference responder).
    pub legacy: bool,
}

/// Result of one method on one path.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// `fpmtud`, `dplpmtud`, `fpmtud+dplpmtud` or `icmp`.
    pub method: String,
    /// The path MTU found (IP total length), `None` when there was no answer.
    pub pmtu: Option<u16>,
    /// The answer is exact (not a lower bound or an estimate).
    pub exact: bool,
    /// Round trips waited for (each retry and each sequential probe counts).
    pub round_trips: u32,
    /// Probes put on the wire (locally refused ones not counted).
    pub probes: u32,
    /// From the first probe to the answer.
    pub elapsed: Duration,
    /// The local link MTU used as the largest candidate.
    pub link_mtu: u16,
    /// How the answer came about or why there is none.
    pub note: String,
}

/// Why a measurement could not run (as opposed to "no answer").
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A socket operation failed.
    #[error("{step}: {source}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The path cannot be probed with these settings.
    #[error("{0}")]
    Config(String),
}

fn io_err(step: &'static str) -> impl FnOnce(io::Error) -> ProbeError {
    move |source| ProbeError::Io { step, source }
}

/// A connected socket and the local link MTU toward the target.
#[derive(Debug)]
pub struct Path {
    sock: UdpSocket,
    link_mtu: u16,
    /// An ICMP "port unreachable" came back: nothing listens on the port.
    refused: Cell<bool>,
}

impl Path {
    /// Connects to `opts.target` and finds the local link MTU: the MTU of
    /// the interface holding the source address the route chose (the route's
    /// `IP_MTU` may already hold a cached, smaller path MTU, which is what
    /// is being measured), capped by `--max-size`.
    pub fn open(opts: &ProbeOptions) -> Result<Path, ProbeError> {
        let sock = UdpSocket::connect_to(opts.target).map_err(io_err("connect"))?;
        let local = sock.local_addr().map_err(io_err("getsockname"))?;
        let iface = interface_mtu_of(local.ip()).map_err(io_err("getifaddrs"))?;
        let mtu = match iface {
            Some(m) => m,
            None => sock.path_mtu().map_err(io_err("IP_MTU"))?,
        };
        let mut link_mtu = u16::try_from(mtu).unwrap_or(u16::MAX);
        if let Some(m) = opts.max_size {
            link_mtu = link_mtu.min(m);
        }
        let floor = if sock.is_v6() { IPV6_MIN_MTU } else { IPV4_MIN_MTU };
        if link_mtu < floor {
            return Err(ProbeError::Config(format!("largest size {link_mtu} is below the minimum MTU {floor}")));
        }
        Ok(Path { sock, link_mtu, refused: Cell::new(false) })
    }

    /// IPv6 path.
    #[must_use]
    pub fn is_v6(&self) -> bool {
        self.sock.is_v6()
    }

    /// Sends one datagram with the given DF handling. `Ok(false)`: the local
    /// stack refused it as too big (`EMSGSIZE`), nothing left the host.
    fn send(&self, mode: DfMode, payload: &[u8]) -> Result<bool, ProbeError> {
        self.sock.set_df(mode).map_err(io_err("IP_MTU_DISCOVER"))?;
        match self.sock.send(payload) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => Ok(false),
            // An ICMP error queued by an earlier probe is reported once on
            // the next send; it is read from the error queue separately.
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(true),
            Err(e) => Err(ProbeError::Io { step: "send", source: e }),
        }
    }

    /// Waits until `deadline` (or `hard`, whichever is first) for input.
    /// Notes a queued error that says nothing listens on the port.
    fn note_error(&self, err: &QueuedError) {
        if err.errno == libc::ECONNREFUSED && err.icmp.is_some() {
            self.refused.set(true);
        }
    }

    fn wait(&self, deadline: Option<Instant>, hard: Instant) -> Result<(), ProbeError> {
        let until = deadline.map_or(hard, |d| d.min(hard));
        let left = until.saturating_duration_since(Instant::now());
        self.sock.wait(Some(left)).map_err(io_err("poll")).map(drop)
    }

    /// Every datagram queued now. Receive errors caused by ICMP are skipped
    /// (the error queue or a timeout handles them); "port unreachable" is
    /// remembered, so a measurement without a responder ends at once.
    fn drain(&self, mut f: impl FnMut(&[u8])) -> Result<(), ProbeError> {
        let mut buf = vec![0u8; 65536];
        loop {
            match self.sock.try_recv(&mut buf) {
                Ok(Some(n)) => f(&buf[..n]),
                Ok(None) => return Ok(()),
                Err(e) if is_icmp_error(&e) => {
                    if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                        self.refused.set(true);
                    }
                }
                Err(e) => return Err(ProbeError::Io { step: "recv", source: e }),
            }
        }
    }
}

/// Whether an ICMP error's quoted payload is one of our probes (RFC 8899
/// §4.6.1: a PTB must be validated against what was sent; the kernel has
/// already matched addresses and ports to this connected socket, the nonce
/// in the quoted probe header shows an off-path sender did not guess them).
fn quotes_our_probe(quoted: &[u8], nonce: u64) -> bool {
    matches!(wire::parse_request(quoted), Ok(wire::Request::Probe(p)) if p.nonce == nonce)
}

fn is_icmp_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EMSGSIZE | libc::EPROTO)
    )
}

/// IP length of the small DF-set probe `auto` sends beside round 1: the
/// IPv4 minimum MTU, which every path carries.
const PING_SIZE: u16 = IPV4_MIN_MTU;

/// One F-PMTUD run.
#[derive(Debug, Clone)]
pub struct FpmtudRun {
    /// What it found.
    pub measurement: Measurement,
    /// The prober's outcome (`None` if the overall timeout cut it short).
    pub outcome: Option<Outcome>,
    /// RTT of the small probe sent beside round 1, if it was answered.
    pub rtt: Option<Duration>,
}

/// Runs F-PMTUD. On `Fallback` the measurement has no PMTU and the outcome
/// carries the lower bound to start DPLPMTUD from (if any).
///
/// With `early_fallback`, a small DF-set probe goes out beside the round-1
/// probe. Its answer shows that the responder is reachable and what the RTT
/// is; if the round-1 report has not come `max(2 RTT, 10 ms)` after it, the
/// fragments are taken to be filtered and the run ends with `Fallback`
/// at once, instead of after F-PMTUD's own retries (which must assume an
/// unknown RTT). A lost round-1 probe then costs a DPLPMTUD search, never
/// a wrong answer.
pub fn fpmtud(path: &Path, opts: &ProbeOptions, early_fallback: bool) -> Result<FpmtudRun, ProbeError> {
    if path.is_v6() {
        return Err(ProbeError::Config("F-PMTUD needs IPv4: IPv6 routers never fragment".into()));
    }
    let nonce = random_u64().map_err(io_err("getrandom"))?;
    let mut cfg = ProberConfig::new(path.link_mtu);
    cfg.legacy_probes = opts.legacy;
    cfg.accept_legacy = opts.legacy;
    cfg.max_timeout = opts.timeout;
    let mut prober =
        Prober::new(cfg, nonce, ClassicRtt::new(opts.initial_rtt)).map_err(|e| ProbeError::Config(e.to_string()))?;
    // A legacy responder's answer carries no nonce: the ping could not be told apart.
    let early_fallback = early_fallback && !opts.legacy;
    let ping_nonce = nonce ^ 0x5049_4e47; // any value other than the prober's
    let mut ping_sent: Option<Instant> = None;
    let mut rtt: Option<Duration> = None;
    let mut fallback_at: Option<Instant> = None;
    let start = Instant::now();
    let hard = start + opts.timeout;
    let mut probes = 0u32;
    let mut timeout_note = "timed out";
    while !prober.is_done() {
        let now = Instant::now();
        if now >= hard {
            break;
        }
        if path.refused.get() && prober.stats().accepted == 0 {
            timeout_note = REFUSED;
            break;
        }
        while let Some(tx) = prober.poll_transmit(now) {
            let mode = if tx.dont_fragment { DfMode::Probe } else { DfMode::Clear };
            if path.send(mode, &tx.payload)? {
                probes += 1;
            }
        }
        if early_fallback && ping_sent.is_none() {
            let mut payload = vec![0u8; usize::from(PING_SIZE - 28)];
            ProbeRepr { kind: ProbeKind::Confirm, nonce: ping_nonce, probe_id: 0, ip_len: PING_SIZE }
                .emit(&mut payload)
                .map_err(|e| ProbeError::Config(format!("ping: {e}")))?;
            if path.send(DfMode::Probe, &payload)? {
                probes += 1;
            }
            ping_sent = Some(Instant::now());
        }
        let deadline = match (prober.poll_timeout(), fallback_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        path.wait(deadline, hard)?;
        path.drain(|b| {
            let now = Instant::now();
            if let Ok(Reply::Report(r)) = wire::parse_reply(b)
                && r.nonce == ping_nonce
                && r.confirm
            {
                if let (Some(sent), None) = (ping_sent, rtt) {
                    let sample = now - sent;
                    rtt = Some(sample);
                    fallback_at = Some(now + (sample * 2).max(Duration::from_millis(10)));
                }
                return;
            }
            let _ = prober.handle_reply(now, b);
        })?;
        let now = Instant::now();
        if prober.poll_timeout().is_some_and(|t| t <= now) {
            prober.handle_timeout(now);
        }
        if fallback_at.is_some_and(|t| t <= now) && prober.phase() == Phase::Discover {
            let m = Measurement {
                method: "fpmtud".into(),
                pmtu: None,
                exact: false,
                round_trips: 1,
                probes,
                elapsed: start.elapsed(),
                link_mtu: path.link_mtu,
                note: format!(
                    "no fragment report, while a {PING_SIZE}-byte DF probe was answered in {:.2} ms (fragments filtered?)",
                    rtt.unwrap_or_default().as_secs_f64() * 1e3
                ),
            };
            let outcome = Outcome::Fallback { reason: FallbackReason::NoReply, lower_bound: None };
            return Ok(FpmtudRun { measurement: m, outcome: Some(outcome), rtt });
        }
    }
    let elapsed = start.elapsed();
    let Some(r) = prober.result().copied() else {
        return Ok(FpmtudRun {
            measurement: Measurement {
                method: "fpmtud".into(),
                pmtu: None,
                exact: false,
                round_trips: 0,
                probes,
                elapsed,
                link_mtu: path.link_mtu,
                note: timeout_note.into(),
            },
            outcome: None,
            rtt,
        });
    };
    let (exact, note) = match r.outcome {
        Outcome::Exact { method: Method::Unfragmented, .. } => (true, "link-MTU probe arrived whole".to_owned()),
        Outcome::Exact { method: Method::ResponderLinkMtu, .. } => {
            (true, format!("largest fragment {} = responder link MTU", r.estimate.unwrap_or(0)))
        }
        Outcome::Exact { method: Method::Refined, .. } => {
            (true, format!("largest fragment {}, refined with DF-set probes", r.estimate.unwrap_or(0)))
        }
        Outcome::Estimate { .. } => (false, "largest fragment only".to_owned()),
        Outcome::Fallback { reason, .. } => (
            false,
            match reason {
                FallbackReason::NoReply => "no fragment report (fragments filtered or no responder)".to_owned(),
                FallbackReason::ConfirmationFailed => "no confirmation probe answered".to_owned(),
                FallbackReason::EstimateTooLow => "largest fragment more than 7 bytes low".to_owned(),
            },
        ),
    };
    let m = Measurement {
        method: "fpmtud".into(),
        pmtu: r.pmtu(),
        exact,
        round_trips: r.round_trips,
        probes,
        elapsed,
        link_mtu: path.link_mtu,
        note,
    };
    Ok(FpmtudRun { measurement: m, outcome: Some(r.outcome), rtt })
}

/// Runs DPLPMTUD from `base` (a size known to pass, or BASE_PLPMTU), with
/// `rtt` as the estimator (F-PMTUD's, when falling back, so the first
/// PROBE_TIMER is already informed).
pub fn dplpmtud(
    path: &Path,
    opts: &ProbeOptions,
    base: Option<u16>,
    mut rtt: ClassicRtt,
) -> Result<Measurement, ProbeError> {
    let overhead = path.sock.overhead();
    let min = if path.is_v6() { IPV6_MIN_MTU } else { IPV4_MIN_MTU };
    let default_base = if path.is_v6() { IPV6_MIN_MTU } else { BASE_PLPMTU };
    let base = base.unwrap_or(default_base).clamp(min, path.link_mtu);
    let mut cfg = DplpmtudConfig::new(path.link_mtu);
    cfg.min_plpmtu = min;
    cfg.base_plpmtu = base;
    cfg.strategy = opts.search;
    // RFC 8899 §5.1.1 wants PROBE_TIMER >= 1 s for a PL carrying traffic;
    // this is a measurement against a responder that answers at once, so
    // the PTO (floored at --probe-timer) bounds a probe's answer.
    cfg.min_probe_timer = opts.probe_timer;
    cfg.validate().map_err(|e| ProbeError::Config(e.to_string()))?;
    let mut d = Dplpmtud::new(cfg).map_err(|e| ProbeError::Config(e.to_string()))?;
    let nonce = random_u64().map_err(io_err("getrandom"))?;
    d.enable();
    let start = Instant::now();
    let hard = start + opts.timeout;
    let mut probes = 0u32;
    let mut rounds = 0u32;
    let mut acked_any = false;
    // (probe id, size, sent at) of the one probe in flight.
    let mut in_flight: Option<(u32, u16, Instant)> = None;
    let mut next_id = 1u32;
    let note: String;
    // RFC 8899 §4.6: a validated PTB may speed the search up; black holes
    // (no PTB) are handled by the probe timers alone.
    path.sock.enable_errors().map_err(io_err("IP_RECVERR"))?;
    let mut quoted = vec![0u8; 2048];
    let mut ptbs = 0u32;
    loop {
        let now = Instant::now();
        if d.state() == State::SearchComplete {
            let st = d.stats();
            note = format!("search complete ({} probes acknowledged, {ptbs} PTB hints)", st.probes_acked);
            break;
        }
        if !acked_any && path.refused.get() {
            note = REFUSED.into();
            break;
        }
        if !acked_any && d.stats().probes_lost >= u64::from(MAX_BASE_TRIES) {
            note = "no answer to BASE_PLPMTU probes (no responder, or path below BASE)".into();
            break;
        }
        if now >= hard {
            note = "timed out".into();
            break;
        }
        if let Some(size) = d.poll_probe(now, &rtt) {
            let id = next_id;
            next_id = next_id.wrapping_add(1);
            let mut payload = vec![0u8; usize::from(size.saturating_sub(overhead))];
            ProbeRepr { kind: ProbeKind::Confirm, nonce, probe_id: id, ip_len: size }
                .emit(&mut payload)
                .map_err(|e| ProbeError::Config(format!("probe of {size} bytes: {e}")))?;
            rounds += 1;
            if path.send(DfMode::Probe, &payload)? {
                probes += 1;
                rtt.on_packet_sent(u64::from(id));
                in_flight = Some((id, size, now));
            } else {
                // Larger than the local interface: lost before the wire.
                d.on_probe_lost(now, size);
                in_flight = None;
                continue;
            }
        }
        path.wait(d.poll_timeout(), hard)?;
        let mut acked: Option<(u16, Instant)> = None;
        path.drain(|b| {
            let Ok(Reply::Report(r)) = wire::parse_reply(b) else { return };
            if let Some((id, size, sent)) = in_flight
                && r.nonce == nonce
                && r.confirm
                && r.probe_id == id
            {
                acked = Some((size, sent));
            }
        })?;
        let now = Instant::now();
        while let Some((err, n)) = path.sock.recv_error(&mut quoted).map_err(io_err("MSG_ERRQUEUE"))? {
            path.note_error(&err);
            let Some(mtu) = err.mtu().filter(|_| err.icmp.is_some() && quotes_our_probe(&quoted[..n], nonce)) else {
                continue;
            };
            ptbs += 1;
            let _ = d.on_packet_too_big(now, u16::try_from(mtu).unwrap_or(u16::MAX));
            if !d.probe_in_flight() {
                in_flight = None;
            }
        }
        if let Some((size, sent)) = acked {
            let pn = u64::from(in_flight.map_or(0, |p| p.0));
            rtt.on_ack(RttSample { latest_rtt: now - sent, ack_delay: Duration::ZERO, acked_packet_number: pn });
            in_flight = None;
            acked_any = true;
            d.on_probe_acked(now, size);
        }
        if d.poll_timeout().is_some_and(|t| t <= now) {
            d.handle_timeout(now);
            if !d.probe_in_flight() {
                in_flight = None;
            }
        }
    }
    let done = d.state() == State::SearchComplete;
    Ok(Measurement {
        method: "dplpmtud".into(),
        pmtu: acked_any.then(|| d.plpmtu()),
        exact: done,
        round_trips: rounds,
        probes,
        elapsed: start.elapsed(),
        link_mtu: path.link_mtu,
        note,
    })
}

/// Note for a measurement ended by ICMP "port unreachable".
const REFUSED: &str = "port unreachable: no responder on this port";

/// BASE probes without any answer after which DPLPMTUD gives up (RFC 8899
/// would stay in ERROR and retry; a measurement tool reports "no answer").
const MAX_BASE_TRIES: u8 = px_pmtud::dplpmtud::MAX_PROBES;

/// Classic PMTUD: DF-set probes, lowered by ICMP "too big", answered by
/// the responder when they fit.
pub fn icmp(path: &Path, opts: &ProbeOptions) -> Result<Measurement, ProbeError> {
    path.sock.enable_errors().map_err(io_err("IP_RECVERR"))?;
    let overhead = path.sock.overhead();
    let nonce = random_u64().map_err(io_err("getrandom"))?;
    let start = Instant::now();
    let hard = start + opts.timeout;
    let mut size = path.link_mtu;
    let mut probes = 0u32;
    let mut rounds = 0u32;
    let mut tries = 0u8;
    let mut id = 0u32;
    let mut ptbs = 0u32;
    let mut answer = None;
    let mut quoted = vec![0u8; 2048];
    let note: String;
    'outer: loop {
        if Instant::now() >= hard {
            note = "timed out".into();
            break;
        }
        if path.refused.get() {
            note = REFUSED.into();
            break;
        }
        if tries >= px_pmtud::dplpmtud::MAX_PROBES {
            note = format!("no answer and no ICMP for {size}-byte probes (black hole?)");
            break;
        }
        id = id.wrapping_add(1);
        let mut payload = vec![0u8; usize::from(size.saturating_sub(overhead))];
        ProbeRepr { kind: ProbeKind::Confirm, nonce, probe_id: id, ip_len: size }
            .emit(&mut payload)
            .map_err(|e| ProbeError::Config(format!("probe of {size} bytes: {e}")))?;
        if !path.send(DfMode::Do, &payload)? {
            // The kernel already knows a smaller path MTU (an earlier ICMP).
            let known = path.sock.path_mtu().map_err(io_err("IP_MTU"))?;
            let known = u16::try_from(known).unwrap_or(u16::MAX);
            if known >= size || known < overhead + wire::PROBE_MIN_LEN as u16 {
                note = format!("local stack refuses {size}-byte probes");
                break;
            }
            size = known;
            continue;
        }
        probes += 1;
        rounds += 1;
        tries += 1;
        let sent = Instant::now();
        let timer = (opts.initial_rtt * 3).max(opts.probe_timer);
        let deadline = sent + timer;
        loop {
            path.wait(Some(deadline), hard)?;
            while let Some((err, n)) = path.sock.recv_error(&mut quoted).map_err(io_err("MSG_ERRQUEUE"))? {
                path.note_error(&err);
                if let Some(mtu) = err.mtu().filter(|_| quotes_our_probe(&quoted[..n], nonce)) {
                    let mtu = u16::try_from(mtu).unwrap_or(u16::MAX);
                    if mtu < size && mtu >= overhead + wire::PROBE_MIN_LEN as u16 {
                        ptbs += 1;
                        size = mtu;
                        tries = 0;
                        continue 'outer;
                    }
                }
            }
            path.drain(|b| {
                if let Ok(Reply::Report(r)) = wire::parse_reply(b)
                    && r.nonce == nonce
                    && r.confirm
                    && r.probe_id == id
                {
                    answer = Some(r.probe_ip_len);
                }
            })?;
            if answer.is_some() {
                note = format!("{ptbs} ICMP too-big message(s)");
                break 'outer;
            }
            if Instant::now() >= deadline.min(hard) {
                break;
            }
        }
    }
    Ok(Measurement {
        method: "icmp".into(),
        pmtu: answer,
        exact: answer.is_some(),
        round_trips: rounds,
        probes,
        elapsed: start.elapsed(),
        link_mtu: path.link_mtu,
        note,
    })
}

/// `auto`: F-PMTUD on IPv4, DPLPMTUD where it falls back and on IPv6.
pub fn auto(path: &Path, opts: &ProbeOptions) -> Result<Measurement, ProbeError> {
    if path.is_v6() {
        let mut m = dplpmtud(path, opts, None, ClassicRtt::new(opts.initial_rtt))?;
        m.note = format!("IPv6: {}", m.note);
        return Ok(m);
    }
    let run = fpmtud(path, opts, true)?;
    let f = run.measurement;
    let lower = match run.outcome {
        Some(Outcome::Fallback { lower_bound, .. }) => lower_bound,
        _ => return Ok(f),
    };
    let left = opts.timeout.saturating_sub(f.elapsed);
    let rest = ProbeOptions { timeout: left, ..opts.clone() };
    // The small probe's RTT, when answered, informs the first PROBE_TIMER.
    let rtt = match run.rtt {
        Some(sample) => {
            let mut r = ClassicRtt::new(sample);
            r.on_ack(RttSample { latest_rtt: sample, ack_delay: Duration::ZERO, acked_packet_number: 0 });
            r
        }
        None => ClassicRtt::new(opts.initial_rtt),
    };
    let d = dplpmtud(path, &rest, lower, rtt)?;
    Ok(Measurement {
        method: "fpmtud+dplpmtud".into(),
        pmtu: d.pmtu,
        exact: d.exact,
        round_trips: f.round_trips + d.round_trips,
        probes: f.probes + d.probes,
        elapsed: f.elapsed + d.elapsed,
        link_mtu: path.link_mtu,
        note: format!("F-PMTUD: {}; DPLPMTUD: {}", f.note, d.note),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use px_runtime::pmtud::responder::{Daemon, DaemonConfig};

    fn opts(target: SocketAddr) -> ProbeOptions {
        ProbeOptions {
            target,
            max_size: Some(1500),
            timeout: Duration::from_secs(5),
            probe_timer: Duration::from_millis(20),
            initial_rtt: Duration::from_millis(10),
            search: SearchStrategy::Bisection,
            legacy: false,
        }
    }

    /// A responder on loopback in a thread, stopped when dropped.
    fn with_responder<R>(f: impl FnOnce(SocketAddr) -> R) -> R {
        let cfg = DaemonConfig { bind: vec!["127.0.0.1:0".parse().unwrap()], ..DaemonConfig::default() };
        let mut daemon = Daemon::open(&cfg).unwrap();
        let addr = daemon.local_addrs()[0];
        let stop = daemon.stop_handle();
        let t = std::thread::spawn(move || {
            daemon.run().unwrap();
            daemon
        });
        let r = f(addr);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let d = t.join().unwrap();
        let c: std::collections::HashMap<_, _> = d.counters().into_iter().collect();
        assert!(c["ip_bytes_sent"] <= c["ip_bytes_received"], "{c:?}");
        r
    }

    // Loopback does not fragment below its 65536-byte MTU, so every method
    // must see the capped size (--max-size 1500) delivered whole.
    #[test]
    fn every_method_finds_the_capped_size_on_loopback() {
        with_responder(|addr| {
            let o = opts(addr);
            let path = Path::open(&o).unwrap();
            assert_eq!(path.link_mtu, 1500);
            let f = fpmtud(&path, &o, false).unwrap().measurement;
            assert_eq!((f.pmtu, f.exact, f.round_trips, f.probes), (Some(1500), true, 1, 1), "{f:?}");
            let d = dplpmtud(&path, &o, None, ClassicRtt::new(o.initial_rtt)).unwrap();
            assert_eq!((d.pmtu, d.exact), (Some(1500), true), "{d:?}");
            let i = icmp(&path, &o).unwrap();
            assert_eq!((i.pmtu, i.probes), (Some(1500), 1), "{i:?}");
            let a = auto(&path, &o).unwrap();
            // Beside the round-1 probe, auto sends one small DF-set probe.
            assert_eq!((a.pmtu, a.method.as_str(), a.probes), (Some(1500), "fpmtud", 2), "{a:?}");
        });
    }

    #[test]
    fn legacy_probes_get_legacy_answers() {
        with_responder(|addr| {
            let o = ProbeOptions { legacy: true, ..opts(addr) };
            let path = Path::open(&o).unwrap();
            let f = fpmtud(&path, &o, true).unwrap().measurement;
            assert_eq!(f.pmtu, Some(1500), "{f:?}");
        });
    }

    #[test]
    fn only_icmp_errors_quoting_our_nonce_count() {
        let mut probe = vec![0u8; 100];
        ProbeRepr { kind: ProbeKind::Confirm, nonce: 99, probe_id: 3, ip_len: 128 }.emit(&mut probe).unwrap();
        assert!(quotes_our_probe(&probe, 99));
        // An ICMP message quotes at least the probe header (24 bytes).
        assert!(quotes_our_probe(&probe[..wire::PROBE_MIN_LEN], 99));
        assert!(!quotes_our_probe(&probe, 98), "another measurement's (or a forged) nonce");
        assert!(!quotes_our_probe(&probe[..8], 99), "too little quoted to check");
        assert!(!quotes_our_probe(b"FPMT", 99), "legacy probes carry no nonce");
        assert!(!quotes_our_probe(&[], 99));
    }

    #[test]
    fn no_responder_means_no_answer() {
        // Nothing listens on this port: every method ends without a PMTU.
        let s = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = s.local_addr().unwrap();
        drop(s);
        let o = ProbeOptions { timeout: Duration::from_secs(2), ..opts(addr) };
        // The port-unreachable answer ends each method long before the
        // timeout (a fresh socket for each: the flag is per path).
        type Method = fn(&Path, &ProbeOptions) -> Result<Measurement, ProbeError>;
        let methods: [Method; 3] = [auto, icmp, |p, o| dplpmtud(p, o, None, ClassicRtt::new(o.initial_rtt))];
        for method in methods {
            let path = Path::open(&o).unwrap();
            let m = method(&path, &o).unwrap();
            assert_eq!((m.pmtu, m.note.as_str()), (None, REFUSED), "{m:?}");
            assert!(m.elapsed < Duration::from_millis(500), "{m:?}");
        }
    }
}
