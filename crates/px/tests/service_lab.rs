//! Root tests of `px gateway` as a systemd `Type=notify` service (issue 38
//! item 3), with a stand-in for systemd's notify socket: `READY=1` comes
//! only once the gateway forwards, the watchdog is fed while it runs, and
//! `STOPPING=1` when it stops.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::*;

/// systemd's side: a datagram socket at a scratch path.
struct NotifySocket {
    _dir: Scratch,
    path: std::path::PathBuf,
    rx: UnixDatagram,
}

impl NotifySocket {
    fn new() -> NotifySocket {
        let dir = Scratch::new("service-notify");
        let path = dir.0.join("notify");
        let rx = UnixDatagram::bind(&path).expect("bind the notify socket");
        NotifySocket { _dir: dir, path, rx }
    }

    /// Fills the socket's queue with datagrams of our own, so that the
    /// gateway's first blocking send (READY=1) waits until we read.
    fn fill(&self) -> usize {
        let tx = UnixDatagram::unbound().unwrap();
        tx.set_nonblocking(true).unwrap();
        let mut n = 0;
        while tx.send_to(b"filler", &self.path).is_ok() {
            n += 1;
            assert!(n < 100_000, "the queue never fills");
        }
        n
    }

    /// The messages received within `t`, the fillers left out.
    fn read_for(&self, t: Duration) -> Vec<String> {
        let end = Instant::now() + t;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Some(left) = end.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
            self.rx.set_read_timeout(Some(left)).unwrap();
            match self.rx.recv(&mut buf) {
                Ok(n) if &buf[..n] == b"filler" => {}
                Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                Err(_) => break,
            }
        }
        out
    }
}

/// While the gateway waits to say READY=1 (the queue full), it already
/// forwards: a ping crosses it, ARP included. Then READY=1 arrives; with a
/// 400 ms watchdog timeout, WATCHDOG=1 every 200 ms or so; STOPPING=1 at
/// SIGTERM.
#[test]
fn ready_only_once_it_forwards_then_the_watchdog_and_stopping() {
    if !px_lab::require_root_or_skip("ready_only_once_it_forwards_then_the_watchdog_and_stopping") {
        return;
    }
    let _serial = serialize();
    let lab = GwLab::build(None);
    let sock = NotifySocket::new();
    let filled = sock.fill();
    let env = ["env", &format!("NOTIFY_SOCKET={}", sock.path.display()), "WATCHDOG_USEC=400000"];
    let gw = Gateway::start_wrapped(&lab, &env, &[]).unwrap_or_else(|log| panic!("gateway did not start: {log}"));
    // Its start line is out; it is now blocked in READY=1, or before it.
    std::thread::sleep(Duration::from_millis(300));
    lab.ns(lab.legacy).ping(BNET_V4, 1).expect("the gateway forwards before it says READY=1");
    lab.ns(lab.legacy).ping(BNET_V6, 1).expect("the gateway forwards before it says READY=1 (IPv6)");
    let got = sock.read_for(Duration::from_millis(1500));
    eprintln!("{filled} fillers; then {got:?}");
    assert!(got.first().is_some_and(|m| m.starts_with("READY=1\nSTATUS=forwarding")), "{got:?}");
    let pings = got.iter().filter(|m| *m == "WATCHDOG=1").count();
    assert!((3..=10).contains(&pings), "{pings} watchdog pings in 1.5 s at a 400 ms timeout: {got:?}");
    gw.stop().assert_clean();
    let got = sock.read_for(Duration::from_millis(200));
    assert!(got.iter().any(|m| m.starts_with("STOPPING=1")), "{got:?}");
}
