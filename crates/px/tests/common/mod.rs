//! The namespace lab the `px gateway` root tests share: the topology of
//! `px lab demo` (legacy host, eMTU 1500 — gateway namespace — b-network
//! host, iMTU 9000, one IPv4 and one IPv6 subnet through the bump in the
//! wire), the real `px` binary run in the gateway namespace and stopped with
//! SIGTERM by its PID, and TCP transfers whose two ends each compute the
//! SHA-256 of what they sent and received.
//!
//! Everything is owned by guards: namespaces (and so links) by the
//! [`Topology`], processes by [`LabChild`], so every exit path tears down.
//! SHA-256 is computed by coreutils' `sha256sum` fed through a pipe (an
//! implementation independent of this code base; no new crate).

#![allow(dead_code)] // each test binary uses a different part

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use px_lab::{ImpairSpec, Impairment, LabChild, Netns, NsId, Offloads, TcpStats, Topology, tcp_stats};

pub const LEGACY_DEV: &str = "px-l0";
pub const GW_OUTER: &str = "px-gwo";
pub const GW_INNER: &str = "px-gwi";
pub const BNET_DEV: &str = "px-b0";
pub const EMTU: u32 = 1500;
pub const IMTU: u32 = 9000;
pub const LEGACY_V4: &str = "198.51.100.1";
pub const BNET_V4: &str = "198.51.100.2";
pub const LEGACY_V6: &str = "2001:db8:1::1";
pub const BNET_V6: &str = "2001:db8:1::2";
/// Source of the ICMP errors the gateway sends (it owns no address).
pub const ICMP_SRC_V4: &str = "198.51.100.254";
pub const ICMP_SRC_V6: &str = "2001:db8:1::fe";

/// Hosts: wire-sized frames in both directions at the observers.
pub const HOST_OFFLOADS: Offloads = Offloads { tso: Some(false), gso: Some(false), gro: Some(false) };
/// Gateway ports: LRO-like receive, wire-sized send.
pub const MIDDLE_OFFLOADS: Offloads = Offloads { tso: Some(false), gso: None, gro: Some(true) };

/// The tests move hundreds of megabits through a gateway on 2 shared
/// cores: one at a time, so their figures and timeouts mean something.
static LAB_LOCK: Mutex<()> = Mutex::new(());

pub fn serialize() -> MutexGuard<'static, ()> {
    LAB_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// legacy — [impairment] — gw — bnet.
pub struct GwLab {
    pub topo: Topology,
    pub legacy: NsId,
    pub gw: NsId,
    pub bnet: NsId,
    /// Loss element between the legacy host and the gateway (its own namespace).
    pub impairment: Option<Impairment>,
}

impl GwLab {
    /// The demo topology; with `loss`, an impairment namespace sits between
    /// the legacy host and the gateway's outer port.
    pub fn build(loss: Option<f64>) -> GwLab {
        let mut topo = Topology::new().expect("topology");
        let legacy = topo.add_ns("legacy").unwrap();
        let gw = topo.add_ns("gw").unwrap();
        let bnet = topo.add_ns("bnet").unwrap();
        let mut impairment = None;
        match loss {
            None => {
                topo.add_veth((legacy, LEGACY_DEV), (gw, GW_OUTER), EMTU).unwrap();
            }
            Some(p) => {
                let imp = topo.add_ns("imp").unwrap();
                topo.add_veth((legacy, LEGACY_DEV), (imp, "im-l"), EMTU).unwrap();
                topo.add_veth((imp, "im-g"), (gw, GW_OUTER), EMTU).unwrap();
                let spec = ImpairSpec { loss: p, seed: 0x5eed_1055, ..ImpairSpec::default() };
                impairment = Some(Impairment::start(topo.ns(imp), "im-l", "im-g", spec).unwrap());
            }
        }
        topo.add_veth((gw, GW_INNER), (bnet, BNET_DEV), IMTU).unwrap();
        topo.ns(legacy).set_offloads(LEGACY_DEV, HOST_OFFLOADS).unwrap();
        topo.ns(bnet).set_offloads(BNET_DEV, HOST_OFFLOADS).unwrap();
        for dev in [GW_OUTER, GW_INNER] {
            topo.ns(gw).set_offloads(dev, MIDDLE_OFFLOADS).unwrap();
        }
        let (l, b) = (topo.ns(legacy), topo.ns(bnet));
        l.add_addr(LEGACY_DEV, &format!("{LEGACY_V4}/24")).unwrap();
        l.add_addr(LEGACY_DEV, &format!("{LEGACY_V6}/64")).unwrap();
        b.add_addr(BNET_DEV, &format!("{BNET_V4}/24")).unwrap();
        b.add_addr(BNET_DEV, &format!("{BNET_V6}/64")).unwrap();
        GwLab { topo, legacy, gw, bnet, impairment }
    }

    pub fn ns(&self, id: NsId) -> &Netns {
        self.topo.ns(id)
    }

    /// Joins the gateway's two ports with a Linux bridge (a plain layer-2
    /// forwarder, no MSS change, no merging) until [`GwLab::unbridge`].
    pub fn bridge(&self) {
        let g = self.ns(self.gw);
        g.ip(&["link", "add", "px-br", "type", "bridge"]).unwrap();
        for dev in [GW_OUTER, GW_INNER] {
            g.ip(&["link", "set", dev, "master", "px-br"]).unwrap();
        }
        g.ip(&["link", "set", "px-br", "up"]).unwrap();
        // A fresh bridge learns and forwards at once (no STP), but its
        // ports pass through "learning"/"forwarding" only once up.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            let s = g.exec("bridge", &["link", "show"]).unwrap_or_default();
            if s.matches("state forwarding").count() >= 2 {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("bridge ports never reached forwarding");
    }

    pub fn unbridge(&self) {
        let g = self.ns(self.gw);
        for dev in [GW_OUTER, GW_INNER] {
            g.ip(&["link", "set", dev, "nomaster"]).unwrap();
        }
        g.ip(&["link", "del", "px-br"]).unwrap();
    }

    /// Waits until both hosts resolve each other (ARP and NDP through
    /// whatever joins them), so the first data packets are not queued
    /// behind resolution.
    pub fn ping_both(&self) {
        self.ns(self.legacy).ping(BNET_V4, 1).expect("ping v4 through the gateway");
        self.ns(self.legacy).ping(BNET_V6, 1).expect("ping v6 through the gateway");
    }
}

/// The state of a port that the gateway changes and must put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    pub tx_csum: Option<bool>,
    pub tso: Option<bool>,
    pub gso: Option<bool>,
    pub gro: Option<bool>,
    /// `promiscuity` of `ip -d link` (a count: 0 = not promiscuous).
    pub promiscuity: Option<u32>,
    pub mtu: Option<u32>,
}

pub fn port_state(ns: &Netns, dev: &str) -> PortState {
    let link = ns.ip(&["-d", "link", "show", "dev", dev]).unwrap();
    let after = |key: &str| {
        let mut w = link.split_whitespace();
        while let Some(x) = w.next() {
            if x == key {
                return w.next().and_then(|v| v.parse::<u32>().ok());
            }
        }
        None
    };
    PortState {
        tx_csum: ns.offload(dev, "tx-checksumming").unwrap(),
        tso: ns.offload(dev, "tcp-segmentation-offload").unwrap(),
        gso: ns.offload(dev, "generic-segmentation-offload").unwrap(),
        gro: ns.offload(dev, "generic-receive-offload").unwrap(),
        promiscuity: after("promiscuity"),
        mtu: after("mtu"),
    }
}

/// `px gateway` running in the gateway namespace.
pub struct Gateway {
    child: Option<LabChild>,
    pub pid: u32,
    log: PathBuf,
    stats: PathBuf,
}

/// How the gateway ended.
pub struct GatewayExit {
    pub status: ExitStatus,
    /// The `--stats-file` JSON (final counters, written after the flush).
    pub stats: serde_json::Value,
    pub log: String,
    /// From SIGTERM to exit.
    pub stop_time: Duration,
}

static GW_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Gateway {
    /// Starts `px gateway --inner px-gwi --outer px-gwo ARGS` and waits for
    /// its first log line (ports opened).
    pub fn start(lab: &GwLab, args: &[&str]) -> Gateway {
        let tag = format!("{}-{}", std::process::id(), GW_COUNTER.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir();
        let log = dir.join(format!("px-gwlab-{tag}.log"));
        let stats = dir.join(format!("px-gwlab-{tag}.json"));
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = lab.ns(lab.gw).command(env!("CARGO_BIN_EXE_px"));
        cmd.args(["gateway", "--inner", GW_INNER, "--outer", GW_OUTER, "--log-interval", "0", "--stats-file"])
            .arg(&stats)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf);
        // `ip netns exec` execs the program: the PID is px's own.
        let child = LabChild::spawn(&mut cmd).unwrap();
        let pid = child.id().unwrap();
        let g = Gateway { child: Some(child), pid, log, stats };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let text = std::fs::read_to_string(&g.log).unwrap_or_default();
            if text.contains("px gateway: inner") {
                return g;
            }
            assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "px gateway died: {text}");
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("px gateway did not start: {}", std::fs::read_to_string(&g.log).unwrap_or_default());
    }

    /// SIGTERM, then wait (at most 10 s) for the exit and read the stats.
    pub fn stop(mut self) -> GatewayExit {
        let child = self.child.take().unwrap();
        let t0 = Instant::now();
        // SAFETY: kill(2) on the PID of the child this test started and has
        // not reaped yet (its LabChild guard is still alive).
        assert_eq!(unsafe { libc::kill(self.pid as i32, libc::SIGTERM) }, 0);
        let waiter = std::thread::spawn(move || {
            let out = child.wait_with_output();
            (out, t0.elapsed())
        });
        let start = Instant::now();
        while !waiter.is_finished() {
            if start.elapsed() > Duration::from_secs(10) {
                // SAFETY: as above; the guard reaps it when dropped.
                unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
                panic!("px gateway did not exit within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let (out, stop_time) = waiter.join().unwrap();
        let status = out.unwrap().status;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let stats = std::fs::read_to_string(&self.stats)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(serde_json::Value::Null);
        GatewayExit { status, stats, log, stop_time }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // A failing test drops the LabChild, which SIGKILLs and reaps it.
        drop(self.child.take());
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.stats);
    }
}

impl GatewayExit {
    /// A counter of the final stats (`counters.<name>`), 0 if absent.
    pub fn counter(&self, name: &str) -> u64 {
        self.stats["counters"][name].as_u64().unwrap_or(0)
    }

    /// `counters.flush[i]` (index = px_gateway::FlushReason as usize).
    pub fn flushes(&self, reason: px_gateway::FlushReason) -> u64 {
        self.stats["counters"]["flush"][reason as usize].as_u64().unwrap_or(0)
    }

    pub fn assert_clean(&self) {
        assert!(self.status.success(), "px gateway exited with {}; log:\n{}", self.status, self.log);
        assert!(self.log.contains("stopped; flushed everything held"), "{}", self.log);
        assert_eq!(self.stats["held_bytes"].as_u64(), Some(0), "bytes still held at exit: {}", self.stats);
        assert_eq!(self.stats["send_errors"].as_u64(), Some(0), "send errors: {}", self.stats);
    }
}

/// SHA-256 by coreutils' `sha256sum`, fed through a pipe.
pub struct Sha256 {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Sha256 {
    pub fn new() -> Sha256 {
        let mut child = Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sha256sum (coreutils)");
        let stdin = child.stdin.take();
        Sha256 { child, stdin }
    }

    pub fn update(&mut self, b: &[u8]) {
        self.stdin.as_mut().unwrap().write_all(b).unwrap();
    }

    /// The hex digest.
    pub fn finish(mut self) -> String {
        drop(self.stdin.take());
        let mut out = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        self.child.wait().unwrap();
        out.split_whitespace().next().unwrap_or_default().to_string()
    }
}

impl Drop for Sha256 {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deterministic, incompressible-looking bytes per flow (xorshift64).
pub struct Pattern(u64);

impl Pattern {
    pub fn new(flow: u64, salt: u64) -> Pattern {
        Pattern((0x9e37_79b9_7f4a_7c15 ^ flow.wrapping_mul(0xff51_afd7_ed55_8ccd) ^ salt) | 1)
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            c.copy_from_slice(&self.0.to_le_bytes()[..c.len()]);
        }
    }
}

/// How a sender writes.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Bytes per write.
    pub chunk: usize,
    /// Pause after each write.
    pub gap: Duration,
}

impl Pace {
    pub const FULL: Pace = Pace { chunk: 1 << 16, gap: Duration::ZERO };
}

/// What one flow's two ends saw.
#[derive(Debug, Clone)]
pub struct FlowEnds {
    pub sent_sha: String,
    pub received_sha: String,
    pub sent: u64,
    pub received: u64,
    pub sender: TcpStats,
    pub receiver: TcpStats,
}

/// A transfer's settings.
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    pub server: SocketAddr,
    pub flows: usize,
    pub bytes_per_flow: u64,
    pub pace: Pace,
    /// Longest a single read/write/connect may stall.
    pub stall: Duration,
}

/// Runs `t.flows` TCP connections from `client` to a listener in `server`.
/// Each sender hashes what it writes, each receiver what it reads; bytes
/// received so far (all flows) are counted in `progress`.
pub fn transfer(client: &Netns, server: &Netns, t: Transfer, progress: &AtomicU64) -> Vec<FlowEnds> {
    let listener = server.run(|| TcpListener::bind(t.server)).unwrap().expect("bind");
    set_accept_timeout(&listener, t.stall);
    let salt = t.server.port() as u64;
    std::thread::scope(|sc| {
        let receivers = sc.spawn(|| {
            let mut hs = Vec::new();
            for _ in 0..t.flows {
                let (s, _) = listener.accept().expect("accept");
                hs.push(sc.spawn(move || receive(s, t.stall, progress)));
            }
            hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        });
        let senders: Vec<_> = (0..t.flows as u64)
            .map(|flow| {
                sc.spawn(move || {
                    let _in_ns = client.enter().unwrap();
                    send(flow, salt, &t)
                })
            })
            .collect();
        let sent: Vec<_> = senders.into_iter().map(|h| h.join().unwrap()).collect();
        let mut received = receivers.join().unwrap();
        received.sort_by_key(|r| r.0);
        sent.into_iter()
            .zip(received)
            .map(|((sent, sent_sha, sender), (_, received, received_sha, receiver))| FlowEnds {
                sent_sha,
                received_sha,
                sent,
                received,
                sender,
                receiver,
            })
            .collect()
    })
}

fn send(flow: u64, salt: u64, t: &Transfer) -> (u64, String, TcpStats) {
    let mut s = TcpStream::connect_timeout(&t.server, t.stall).unwrap_or_else(|e| panic!("connect {}: {e}", t.server));
    s.set_write_timeout(Some(t.stall)).unwrap();
    s.set_read_timeout(Some(t.stall)).unwrap();
    s.write_all(&flow.to_be_bytes()).unwrap();
    let (mut pat, mut sha, mut buf) = (Pattern::new(flow, salt), Sha256::new(), vec![0u8; t.pace.chunk]);
    let mut left = t.bytes_per_flow;
    while left > 0 {
        let n = (t.pace.chunk as u64).min(left) as usize;
        pat.fill(&mut buf[..n]);
        s.write_all(&buf[..n]).unwrap_or_else(|e| panic!("flow {flow}: write with {left} bytes left: {e}"));
        sha.update(&buf[..n]);
        left -= n as u64;
        if !t.pace.gap.is_zero() {
            std::thread::sleep(t.pace.gap);
        }
    }
    s.shutdown(Shutdown::Write).unwrap();
    // The receiver closes after reading everything.
    let mut one = [0u8; 1];
    let _ = s.read(&mut one).unwrap_or_else(|e| panic!("flow {flow}: waiting for the receiver to close: {e}"));
    let st = tcp_stats(&s).unwrap();
    (t.bytes_per_flow, sha.finish(), st)
}

pub fn receive(mut s: TcpStream, stall: Duration, progress: &AtomicU64) -> (u64, u64, String, TcpStats) {
    s.set_read_timeout(Some(stall)).unwrap();
    let mut id = [0u8; 8];
    s.read_exact(&mut id).unwrap();
    let flow = u64::from_be_bytes(id);
    let (mut sha, mut buf, mut got) = (Sha256::new(), vec![0u8; 1 << 16], 0u64);
    loop {
        let n = s.read(&mut buf).unwrap_or_else(|e| panic!("flow {flow}: read after {got} bytes: {e}"));
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        got += n as u64;
        progress.fetch_add(n as u64, Ordering::Relaxed);
    }
    let st = tcp_stats(&s).unwrap();
    (flow, got, sha.finish(), st)
}

/// Every flow delivered every byte, and both ends computed the same SHA-256.
pub fn assert_exact(ends: &[FlowEnds], bytes_per_flow: u64) {
    for (i, e) in ends.iter().enumerate() {
        assert_eq!(e.sent, bytes_per_flow, "flow {i}");
        assert_eq!(e.received, bytes_per_flow, "flow {i}: received {} of {bytes_per_flow}", e.received);
        assert_eq!(e.sent_sha.len(), 64, "flow {i}: no digest");
        assert_eq!(e.sent_sha, e.received_sha, "flow {i}: sha256 differs");
    }
}

/// `accept` on `l` gives up after `t` (SO_RCVTIMEO), so a sender that
/// never connects fails the test instead of hanging it.
pub fn set_accept_timeout(l: &TcpListener, t: Duration) {
    let r = px_lab::traffic::set_accept_timeout(l, t);
    assert!(r.is_ok(), "SO_RCVTIMEO: {r:?}");
}

pub fn sock(addr: &str, port: u16) -> SocketAddr {
    SocketAddr::new(addr.parse::<IpAddr>().unwrap(), port)
}

/// Runs `program args` in `ns`, returning (success, stdout + stderr).
pub fn run_in(ns: &Netns, program: &str, args: &[&str]) -> (bool, String) {
    let out = ns.command(program).args(args).output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

pub fn io_ok<T>(r: io::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}
