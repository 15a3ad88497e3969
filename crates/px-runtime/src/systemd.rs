//! The service manager's side channel (`sd_notify(3)`), spoken without
//! libsystemd: one datagram per message to the socket `NOTIFY_SOCKET`
//! names. The gateway says `READY=1` once it forwards (its ports open and
//! its workers running), `WATCHDOG=1` while every worker makes progress
//! ([`Watchdog`]), `STATUS=` with its short summary, and `STOPPING=1`.
//!
//! Outside systemd (no `NOTIFY_SOCKET`) nothing is sent. `READY=1` waits
//! for room in the manager's queue, as libsystemd's `sd_notify` does; the
//! rest never blocks (a watchdog ping that finds the queue full is dropped:
//! the next comes half a timeout later).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// Where the notifications go, and the watchdog timeout systemd asked for.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
    watchdog: Option<Duration>,
}

/// Why `NOTIFY_SOCKET` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("NOTIFY_SOCKET={0:?}: not a path nor an abstract socket (@name)")]
    Address(String),
    #[error("NOTIFY_SOCKET={addr:?}: {source}")]
    Socket { addr: String, source: io::Error },
}

impl Notifier {
    /// From the environment: `None` outside a `Type=notify` service.
    /// `WATCHDOG_USEC` gives the watchdog timeout, which applies to this
    /// process only when `WATCHDOG_PID` is unset or names it.
    pub fn from_env() -> Result<Option<Notifier>, NotifyError> {
        let Some(addr) = std::env::var_os("NOTIFY_SOCKET") else { return Ok(None) };
        let addr = addr.to_string_lossy().into_owned();
        let pid_ok = std::env::var("WATCHDOG_PID").map_or(true, |p| p.trim() == std::process::id().to_string());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0 && pid_ok)
            .map(Duration::from_micros);
        Notifier::new(&addr, watchdog).map(Some)
    }

    /// To the socket `addr` (`/path` or `@abstract`), with the watchdog
    /// timeout `watchdog`.
    pub fn new(addr: &str, watchdog: Option<Duration>) -> Result<Notifier, NotifyError> {
        let fail = |source| NotifyError::Socket { addr: addr.to_owned(), source };
        let to = match addr.as_bytes() {
            [b'@', name @ ..] => SocketAddr::from_abstract_name(name).map_err(fail)?,
            [b'/', ..] => SocketAddr::from_pathname(addr).map_err(fail)?,
            _ => return Err(NotifyError::Address(addr.to_owned())),
        };
        let socket = UnixDatagram::unbound().map_err(fail)?;
        Ok(Notifier { socket, to, watchdog })
    }

    /// The watchdog timeout systemd asked for (`WatchdogSec=`), if any.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// `READY=1` (with a status line): waits for room in the manager's
    /// queue.
    pub fn ready(&self, status: &str) -> io::Result<()> {
        self.socket.set_nonblocking(false)?;
        self.socket.send_to_addr(format!("READY=1\nSTATUS={status}").as_bytes(), &self.to).map(drop)
    }

    /// Any other message (`WATCHDOG=1`, `STATUS=...`, `STOPPING=1`);
    /// dropped when the manager's queue is full.
    pub fn send(&self, msg: &str) -> io::Result<()> {
        self.socket.set_nonblocking(true)?;
        match self.socket.send_to_addr(msg.as_bytes(), &self.to) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// When to ping the watchdog: every half timeout, and only once every
/// worker has moved since the last ping (each bumps a beat count at least
/// every few hundred milliseconds, busy or idle). A worker stuck in a loop
/// or a dead one stops the pings, and systemd restarts the gateway after
/// the timeout; so does a stuck supervisor, which is what pings.
#[derive(Debug)]
pub struct Watchdog {
    every: Duration,
    last: Instant,
    beats: Vec<u64>,
}

impl Watchdog {
    /// For a timeout of `timeout`, the workers' beats at `now`.
    pub fn new(timeout: Duration, now: Instant, beats: Vec<u64>) -> Watchdog {
        Watchdog { every: timeout / 2, last: now, beats }
    }

    /// Whether to ping at `now`, given the workers' beats.
    pub fn poll(&mut self, now: Instant, beats: &[u64]) -> bool {
        if now.saturating_duration_since(self.last) < self.every || beats.len() != self.beats.len() {
            return false;
        }
        if beats.iter().zip(&self.beats).any(|(now, then)| now == then) {
            return false;
        }
        self.beats.copy_from_slice(beats);
        self.last = now;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_every_half_timeout_while_every_worker_moves() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut w = Watchdog::new(Duration::from_secs(2), t0, vec![0, 0]);
        assert!(!w.poll(at(999), &[5, 5]), "before half the timeout");
        assert!(w.poll(at(1000), &[5, 5]));
        assert!(!w.poll(at(1500), &[9, 9]), "half a timeout since the last ping");
        // Worker 1 stuck: no ping, however long.
        for ms in (2000..10_000).step_by(5) {
            assert!(!w.poll(at(ms), &[10 + ms, 5]), "pinged at {ms} ms with a worker stuck");
        }
        // It moves again: the next look pings.
        assert!(w.poll(at(10_005), &[20_000, 6]));
        // A worker gone (fewer beats than workers): no ping.
        assert!(!w.poll(at(20_000), &[30_000]));
    }

    /// The datagrams as systemd's socket receives them; an abstract
    /// address too; no socket, no notifier.
    #[test]
    fn messages_reach_the_socket() {
        let dir = std::env::temp_dir().join(format!("px-notify-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::new(path.to_str().unwrap(), Some(Duration::from_secs(4))).unwrap();
        assert_eq!(n.watchdog(), Some(Duration::from_secs(4)));
        n.ready("forwarding").unwrap();
        n.send("WATCHDOG=1").unwrap();
        let mut buf = [0u8; 256];
        let got = |rx: &UnixDatagram, buf: &mut [u8]| {
            let n = rx.recv(buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        };
        assert_eq!(got(&rx, &mut buf), "READY=1\nSTATUS=forwarding");
        assert_eq!(got(&rx, &mut buf), "WATCHDOG=1");
        let name = format!("px-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        Notifier::new(&format!("@{name}"), None).unwrap().send("STOPPING=1").unwrap();
        assert_eq!(got(&rx, &mut buf), "STOPPING=1");
        assert!(matches!(Notifier::new("vsock:2:9", None), Err(NotifyError::Address(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
