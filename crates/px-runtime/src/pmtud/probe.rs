//! `px probe`'s socket driver around px-pmtud's probe sessions
//! ([`px_pmtud::session`]): the policy of every method (F-PMTUD with its DF
//! refinement and early fallback, DPLPMTUD, classic ICMP PMTUD, `auto`;
//! probe ids and nonces, PTB validation, give-up rules) is the sessions';
//! this file owns one connected UDP socket to a `px fpmtud` responder,
//! unprivileged, and the clock.
//!
//! DF handling per datagram ([`Df`]): DF clear with `IP_PMTUDISC_INTERFACE`
//! (F-PMTUD's round 1), DF set with `IP_PMTUDISC_PROBE` (confirmation and
//! DPLPMTUD probes), DF set with `IP_PMTUDISC_DO` (classic PMTUD, whose
//! larger sends the kernel refuses once it learned a smaller path MTU).
//! ICMP "too big" messages are read from `IP_RECVERR` when the session asks
//! for them.
//!
//! Time comes from `Instant::now()` here and only here; the sessions get
//! it as an argument. The socket is polled with the session's
//! `poll_timeout` as the timeout; the session bounds every measurement by
//! its overall timeout.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use px_pmtud::dplpmtud::IPV4_MIN_MTU;
use px_pmtud::rtt::ClassicRtt;
use px_pmtud::search::SearchStrategy;
pub use px_pmtud::session::Measurement;
use px_pmtud::session::{
    AutoSession, ConfirmSession, Df, DplpmtudSession, FpmtudSession, IPV6_MIN_MTU, IcmpSession, ParallelSession,
    Session, SessionConfig, SessionError, TooBig,
};

use px_io::{DfMode, UdpSocket, interface_mtu_of, random_u64};

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
    /// The interface's own MTU, before `--max-size`.
    iface_mtu: u16,
    /// The socket's current DF mode (set only when it changes: parallel
    /// probing sends dozens of datagrams back to back).
    df: std::cell::Cell<Option<Df>>,
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
        let iface_mtu = u16::try_from(mtu).unwrap_or(u16::MAX);
        let mut link_mtu = iface_mtu;
        if let Some(m) = opts.max_size {
            link_mtu = link_mtu.min(m);
        }
        let floor = if sock.is_v6() { IPV6_MIN_MTU } else { IPV4_MIN_MTU };
        if link_mtu < floor {
            return Err(ProbeError::Config(format!("largest size {link_mtu} is below the minimum MTU {floor}")));
        }
        Ok(Path { sock, link_mtu, iface_mtu, df: std::cell::Cell::new(None) })
    }

    /// The local interface's MTU toward the target, before `--max-size`.
    pub fn iface_mtu(&self) -> u16 {
        self.iface_mtu
    }

    /// IPv6 path.
    #[must_use]
    pub fn is_v6(&self) -> bool {
        self.sock.is_v6()
    }

    /// What a session on this path is asked to do.
    #[must_use]
    pub fn session_config(&self, opts: &ProbeOptions) -> SessionConfig {
        SessionConfig {
            timeout: opts.timeout,
            probe_timer: opts.probe_timer,
            initial_rtt: opts.initial_rtt,
            search: opts.search,
            legacy: opts.legacy,
            ..SessionConfig::new(self.link_mtu, self.is_v6())
        }
    }

    /// Sends one datagram with the given DF handling.
    ///
    /// A connected UDP socket keeps the ICMP error an earlier datagram drew
    /// ("fragmentation needed" for a DF probe, "port unreachable") as a
    /// pending error, and the next `send` fails with it *without sending*.
    /// Taken for the local stack's own refusal, that once cost F-PMTUD its
    /// `L + 7` confirmation probe on `1500 -> 1499 -> 1500` (the 1500-byte
    /// probe's ICMP came back before 1499 was sent: answer 1498, "exact").
    /// So the pending error is cleared before each burst of sends
    /// ([`drive`], `SO_ERROR`), and a send that still fails with an ICMP
    /// error (one that arrived during the burst) is tried once more; only a
    /// repeated `EMSGSIZE` is the local stack's refusal.
    fn send(&self, df: Df, payload: &[u8]) -> Result<Sent, ProbeError> {
        if self.df.get() != Some(df) {
            let mode = match df {
                Df::Clear => DfMode::Clear,
                Df::Probe => DfMode::Probe,
                Df::Do => DfMode::Do,
            };
            self.sock.set_df(mode).map_err(io_err("IP_MTU_DISCOVER"))?;
            self.df.set(Some(df));
        }
        let mut unreachable = false;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.sock.send(payload) {
                Ok(_) => return Ok(Sent { sent: true, unreachable }),
                Err(e) if is_icmp_error(&e) && tries == 1 => {
                    unreachable |= e.raw_os_error() == Some(libc::ECONNREFUSED);
                }
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => return Ok(Sent { sent: false, unreachable }),
                Err(e) => return Err(ProbeError::Io { step: "send", source: e }),
            }
        }
    }

    /// Clears the socket's pending error; whether it was "port unreachable".
    fn take_unreachable(&self) -> Result<bool, ProbeError> {
        let e = self.sock.take_error().map_err(io_err("SO_ERROR"))?;
        Ok(e.is_some_and(|e| e.raw_os_error() == Some(libc::ECONNREFUSED)))
    }

    /// Waits until `deadline` for input (the session always has one while
    /// it runs).
    fn wait(&self, deadline: Option<Instant>) -> Result<(), ProbeError> {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        self.sock.wait(left).map_err(io_err("poll")).map(drop)
    }

    /// Every queued ICMP error: "too big" and "port unreachable" go to the
    /// session with the quoted start of the datagram they are about.
    fn drain_errors(&self, session: &mut dyn Session, quoted: &mut [u8]) -> Result<(), ProbeError> {
        while let Some((err, n)) = self.sock.recv_error(quoted).map_err(io_err("MSG_ERRQUEUE"))? {
            let now = Instant::now();
            if err.errno == libc::ECONNREFUSED && err.icmp.is_some() {
                session.on_unreachable(now);
            }
            if let Some(mtu) = err.mtu() {
                session.on_icmp_too_big(now, TooBig { mtu, from_network: err.icmp.is_some(), quoted: &quoted[..n] });
            }
        }
        Ok(())
    }

    /// Every datagram queued now. Receive errors caused by ICMP are skipped
    /// (the error queue or a timeout handles them); "port unreachable" is
    /// reported, so a measurement without a responder ends at once.
    fn drain(&self, session: &mut dyn Session, buf: &mut [u8]) -> Result<(), ProbeError> {
        loop {
            match self.sock.try_recv(buf) {
                Ok(Some(n)) => session.on_datagram(Instant::now(), &buf[..n]),
                Ok(None) => return Ok(()),
                Err(e) if is_icmp_error(&e) => {
                    if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                        session.on_unreachable(Instant::now());
                    }
                }
                Err(e) => return Err(ProbeError::Io { step: "recv", source: e }),
            }
        }
    }

    /// Everything queued now, without waiting: the ICMP errors first (when
    /// the socket reads them), then the datagrams.
    fn read_all(
        &self,
        session: &mut dyn Session,
        errors: bool,
        quoted: &mut [u8],
        buf: &mut [u8],
    ) -> Result<(), ProbeError> {
        if errors {
            self.drain_errors(session, quoted)?;
        }
        self.drain(session, buf)
    }
}

/// What [`Path::send`] did.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// The datagram left (`false`: the local stack refused it as too big).
    sent: bool,
    /// A pending "port unreachable" was cleared on the way.
    unreachable: bool,
}

fn is_icmp_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EMSGSIZE | libc::EPROTO)
    )
}

/// A `px probe` method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Parallel probing with the F-PMTUD hint on IPv4 (with legacy probes:
    /// F-PMTUD with an early hand-over to DPLPMTUD; DPLPMTUD on IPv6).
    Auto,
    /// Parallel DF-set probes only.
    Parallel,
    /// F-PMTUD only (IPv4).
    Fpmtud,
    /// RFC 8899 DPLPMTUD.
    Dplpmtud,
    /// Classic PMTUD.
    Icmp,
}

/// Measures the path MTU with `method`.
pub fn measure(path: &Path, opts: &ProbeOptions, method: Method) -> Result<Measurement, ProbeError> {
    let cfg = path.session_config(opts);
    let nonce = random_u64().map_err(io_err("getrandom"))?;
    let config = |e: SessionError| ProbeError::Config(e.to_string());
    let now = Instant::now();
    match method {
        Method::Auto => drive(path, &mut AutoSession::new(&cfg, nonce, now).map_err(config)?),
        Method::Fpmtud => drive(path, &mut FpmtudSession::new(&cfg, nonce, false, now).map_err(config)?),
        Method::Parallel => drive(path, &mut ParallelSession::new(&cfg, nonce, false, None, now).map_err(config)?),
        Method::Dplpmtud => {
            let rtt = ClassicRtt::new(cfg.initial_rtt);
            drive(path, &mut DplpmtudSession::new(&cfg, nonce, None, rtt, now).map_err(config)?)
        }
        Method::Icmp => drive(path, &mut IcmpSession::new(&cfg, nonce, now).map_err(config)?),
    }
}

/// Whether the path carries exactly `path`'s link MTU (`opts.max_size`)
/// whole with DF set: three DF-set probes of that size at most, one fresh
/// nonce drawn for this question only
/// ([`px_pmtud::session::ConfirmSession`]).
pub fn confirm(path: &Path, opts: &ProbeOptions) -> Result<Measurement, ProbeError> {
    let cfg = SessionConfig { icmp_tries: 3, ..path.session_config(opts) };
    let nonce = random_u64().map_err(io_err("getrandom"))?;
    let mut s = ConfirmSession::new(&cfg, nonce, Instant::now()).map_err(|e| ProbeError::Config(e.to_string()))?;
    drive(path, &mut s)
}

/// Runs `session` on `path` until it has an outcome.
pub fn drive(path: &Path, session: &mut dyn Session) -> Result<Measurement, ProbeError> {
    let mut buf = vec![0u8; 65536];
    let mut quoted = vec![0u8; 2048];
    let mut reading_errors = false;
    loop {
        let now = Instant::now();
        session.handle_timeout(now);
        // A pending ICMP error must not fail (and so drop) the next send.
        if path.take_unreachable()? && !reading_errors {
            session.on_unreachable(now);
        }
        loop {
            let now = Instant::now();
            let Some(d) = session.poll_transmit(now) else { break };
            // Before the first probe that may draw an ICMP answer (auto
            // turns to DPLPMTUD inside poll_transmit).
            if !reading_errors && session.reads_icmp() {
                path.sock.enable_errors().map_err(io_err("IP_RECVERR"))?;
                reading_errors = true;
            }
            let sent = path.send(d.df, &d.payload)?;
            // With IP_RECVERR the error queue reports it too.
            if sent.unreachable && !reading_errors {
                session.on_unreachable(now);
            }
            if !sent.sent {
                let known = path.sock.path_mtu().map_err(io_err("IP_MTU"))?;
                session.on_local_refused(now, Some(u16::try_from(known).unwrap_or(u16::MAX)));
            }
            // Read what already came back before the next send: a "too big"
            // from a near router or an answer at the cap makes the rest of a
            // parallel round pointless (the session drops those sizes). On a
            // real path nothing is back yet and this costs two syscalls.
            path.read_all(session, reading_errors, &mut quoted, &mut buf)?;
        }
        if let Some(m) = session.outcome() {
            return Ok(m.clone());
        }
        path.wait(session.poll_timeout())?;
        path.read_all(session, reading_errors, &mut quoted, &mut buf)?;
    }
}

/// `px probe --json`: one object.
pub fn report_json(target: SocketAddr, m: &Measurement, max_size: Option<u16>) -> serde_json::Value {
    serde_json::json!({
        "target": target.to_string(),
        "method": m.method,
        "pmtu": m.pmtu,
        "exact": m.exact,
        "pmtu_low": m.pmtu,
        "pmtu_high": m.pmtu_high,
        "round_trips": m.round_trips,
        "probes": m.probes,
        "seconds": m.elapsed.as_secs_f64(),
        "link_mtu": m.link_mtu,
        "max_size": max_size,
        "note": m.note,
        "authenticated": m.authenticated,
    })
}

/// What `px probe` prints.
pub fn report_text(target: SocketAddr, m: &Measurement, max_size: Option<u16>) -> String {
    let head = match m.pmtu {
        Some(p) if m.exact => format!("path MTU {p} to {target}\n"),
        Some(p) if max_size.is_some_and(|c| p >= c) => {
            format!("path MTU at least {p} to {target} (--max-size {p}: larger sizes were not tried)\n")
        }
        Some(p) => match m.pmtu_high {
            Some(h) if h > p => format!("path MTU between {p} and {h} to {target} (not exact)\n"),
            _ => format!("path MTU at least {p} to {target} (not exact)\n"),
        },
        None => format!("no answer from {target}\n"),
    };
    format!(
        "{head}  method       {}\n  round trips  {}\n  probes       {}\n  elapsed      {:.3} ms\n  link MTU     {}\n  note         {}\n",
        m.method,
        m.round_trips,
        m.probes,
        m.elapsed.as_secs_f64() * 1e3,
        m.link_mtu,
        m.note
    )
}

#[cfg(test)]
mod tests {
    use super::super::responder::{Daemon, DaemonConfig};
    use super::*;
    use px_pmtud::session::REFUSED;

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
            let f = measure(&path, &o, Method::Fpmtud).unwrap();
            assert_eq!((f.pmtu, f.exact, f.round_trips, f.probes), (Some(1500), true, 1, 1), "{f:?}");
            let d = measure(&path, &o, Method::Dplpmtud).unwrap();
            assert_eq!((d.pmtu, d.exact), (Some(1500), true), "{d:?}");
            let i = measure(&path, &o, Method::Icmp).unwrap();
            assert_eq!((i.pmtu, i.probes), (Some(1500), 1), "{i:?}");
            let a = measure(&path, &o, Method::Auto).unwrap();
            // One round: the link-MTU probes arrive whole.
            assert_eq!((a.pmtu, a.exact, a.round_trips), (Some(1500), true, 1), "{a:?}");
            assert!(a.method.ends_with("parallel"), "{a:?}");
            let p = measure(&path, &o, Method::Parallel).unwrap();
            assert_eq!((p.pmtu, p.exact, p.round_trips, p.method.as_str()), (Some(1500), true, 1, "parallel"), "{p:?}");
            let c = confirm(&path, &o).unwrap();
            assert_eq!((c.pmtu, c.probes, c.method.as_str()), (Some(1500), 1, "confirm"), "{c:?}");
        });
    }

    #[test]
    fn legacy_probes_get_legacy_answers() {
        with_responder(|addr| {
            let o = ProbeOptions { legacy: true, ..opts(addr) };
            let path = Path::open(&o).unwrap();
            // auto: the early fallback is off for legacy probes.
            let f = measure(&path, &o, Method::Auto).unwrap();
            assert_eq!(f.pmtu, Some(1500), "{f:?}");
        });
    }

    #[test]
    fn a_pending_icmp_error_does_not_eat_the_next_datagram() {
        // The ICMP error a datagram drew is held by the connected socket
        // and fails the next send without sending it. "Port unreachable" on
        // loopback shows it; a "fragmentation needed" does the same on a
        // real path (1500 -> 1499 -> 1500, see Path::send).
        let s = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = s.local_addr().unwrap();
        drop(s);
        let path = Path::open(&opts(addr)).unwrap();
        assert!(path.send(Df::Probe, b"first").unwrap().sent);
        std::thread::sleep(Duration::from_millis(50));
        // A responder that binds late (as the reference destination does).
        let late = std::net::UdpSocket::bind(addr).unwrap();
        late.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let sent = path.send(Df::Probe, b"second").unwrap();
        assert!(sent.sent && sent.unreachable, "{sent:?}");
        let mut buf = [0u8; 16];
        let n = late.recv(&mut buf).expect("the second datagram left the host");
        assert_eq!(&buf[..n], b"second");
    }

    #[test]
    fn no_responder_means_no_answer() {
        // Nothing listens on this port: every method ends without a PMTU.
        let s = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = s.local_addr().unwrap();
        drop(s);
        let o = ProbeOptions { timeout: Duration::from_secs(2), ..opts(addr) };
        // The port-unreachable answer ends each method long before the
        // timeout (a fresh socket for each).
        for method in [Method::Auto, Method::Parallel, Method::Icmp, Method::Dplpmtud] {
            let path = Path::open(&o).unwrap();
            let m = measure(&path, &o, method).unwrap();
            assert_eq!((m.pmtu, m.note.as_str()), (None, REFUSED), "{m:?}");
            assert!(m.elapsed < Duration::from_millis(500), "{m:?}");
        }
    }

    #[test]
    fn text_and_json_show_the_answer() {
        let m = Measurement {
            method: "fpmtud".into(),
            pmtu: Some(1400),
            exact: true,
            pmtu_high: Some(1400),
            round_trips: 2,
            probes: 9,
            elapsed: Duration::from_micros(1500),
            link_mtu: 9000,
            note: "x".into(),
            authenticated: true,
        };
        let t: SocketAddr = "198.51.100.50:9999".parse().unwrap();
        let text = report_text(t, &m, None);
        assert!(text.starts_with("path MTU 1400 to 198.51.100.50:9999\n"), "{text}");
        assert!(text.contains("1.500 ms"), "{text}");
        let j = report_json(t, &m, None);
        assert_eq!(j["pmtu"], 1400);
        assert_eq!(j["probes"], 9);
        assert_eq!((j["pmtu_low"].as_u64(), j["pmtu_high"].as_u64()), (Some(1400), Some(1400)));
        let range = Measurement { pmtu: Some(1398), exact: false, pmtu_high: Some(1399), ..m.clone() };
        assert!(
            report_text(t, &range, None).starts_with("path MTU between 1398 and 1399"),
            "{}",
            report_text(t, &range, None)
        );
        let none = Measurement { pmtu: None, exact: false, pmtu_high: None, ..m };
        assert!(report_text(t, &none, None).starts_with("no answer"));
        assert!(report_json(t, &none, None)["pmtu"].is_null());
    }
}
