//! The namespace lab the `px gateway` root tests share: the topology of
//! `px lab demo` (px-lab's [`LineSpec::gateway_lab`]: legacy host, eMTU
//! 1500 — gateway namespace — b-network host, iMTU 9000) with one IPv4 and
//! one IPv6 subnet through the bump in the wire, the real `px` binary run in
//! the gateway namespace and stopped with SIGTERM by its PID (px-lab's
//! [`GatewayProcess`]), and px-lab's bulk TCP transfers, every byte checked
//! by the receiver and the SHA-256 of each flow computed at both ends.
//!
//! Everything is owned by guards: namespaces (and so links) by the
//! [`Line`], processes by [`LabChild`](px_lab::LabChild), so every exit
//! path tears down.

#![allow(dead_code, unused_imports)] // each test binary uses a different part

pub mod attacker;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

pub use px_lab::gateway::GatewayExit;
use px_lab::gateway::GatewayProcess;
pub use px_lab::line::{BNET_DEV, EMTU, GW_INNER, GW_OUTER, IMTU, LEGACY_DEV};
use px_lab::line::{LEFT_V4, LEFT_V6, RIGHT_V4, RIGHT_V6};
use px_lab::{Addressing, ImpairSpec, Line, LineImpairment, LineSpec, Netns, NsId};
pub use px_lab::{BulkSpec, FlowResult, FlowSender, Pace, Pattern, receive_flow};

pub const LEGACY_V4: &str = LEFT_V4;
pub const BNET_V4: &str = RIGHT_V4;
pub const LEGACY_V6: &str = LEFT_V6;
pub const BNET_V6: &str = RIGHT_V6;
/// Source of the ICMP errors the gateway sends (it owns no address).
pub const ICMP_SRC_V4: &str = "198.51.100.254";
pub const ICMP_SRC_V6: &str = "2001:db8:1::fe";

/// The tests move hundreds of megabits through a gateway on 2 shared
/// cores: one at a time, so their figures and timeouts mean something.
static LAB_LOCK: Mutex<()> = Mutex::new(());

pub fn serialize() -> MutexGuard<'static, ()> {
    LAB_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets the int socket option `opt` of `level` on `fd`.
pub fn set_sock_int(fd: libc::c_int, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid socket and a pointer to an int of the given length.
    let r =
        unsafe { libc::setsockopt(fd, level, opt, (&raw const v).cast(), size_of::<libc::c_int>() as libc::socklen_t) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// For root test `name`: the lab with `px gateway` started (default
/// options) and both hosts answering, and the guard that keeps the lab
/// tests one at a time (dropped last: the bindings of one pattern drop in
/// reverse). `None`, after the skip message, where the test cannot run.
pub fn lab_with_gateway(name: &str) -> Option<(MutexGuard<'static, ()>, GwLab, Gateway)> {
    if !px_lab::require_root_or_skip(name) {
        return None;
    }
    let serial = serialize();
    let lab = GwLab::build(None);
    let gw = Gateway::start(&lab, &[]);
    lab.ping_both();
    Some((serial, lab, gw))
}

/// legacy — [impairment] — gw — bnet.
pub struct GwLab {
    /// The line; its `impairment` is the loss element between the legacy
    /// host and the gateway (its own namespace), if any.
    pub line: Line,
    pub legacy: NsId,
    pub gw: NsId,
    pub bnet: NsId,
}

impl GwLab {
    /// The demo topology, IPv4 and IPv6 on one subnet; with `loss`, an
    /// impairment namespace sits between the legacy host and the gateway's
    /// outer port.
    pub fn build(loss: Option<f64>) -> GwLab {
        let impairment =
            loss.map(|p| LineImpairment::LeftLink(ImpairSpec { loss: p, seed: 0x5eed_1055, ..ImpairSpec::default() }));
        let spec = LineSpec { ipv6: true, addressing: Some(Addressing::Bump), impairment, ..LineSpec::gateway_lab() };
        let line = Line::build(spec).expect("gateway lab");
        let lab = GwLab { legacy: line.left, gw: line.middle, bnet: line.right, line };
        if dpdk_datapath() {
            // DPDK's AF_PACKET driver reads frames without the virtio-net
            // header that says a checksum is partial (a veth sender's
            // checksum offload): the hosts finish their checksums
            // themselves, as behind a real wire.
            for (ns, dev) in [(lab.legacy, LEGACY_DEV), (lab.bnet, BNET_DEV)] {
                let (ok, out) = run_in(lab.ns(ns), "ethtool", &["-K", dev, "tx", "off"]);
                assert!(ok, "ethtool -K {dev} tx off: {out}");
            }
        }
        lab
    }

    pub fn ns(&self, id: NsId) -> &Netns {
        self.line.topo.ns(id)
    }

    /// Joins the gateway's two ports with a Linux bridge (a plain layer-2
    /// forwarder, no MSS change, no merging) until [`GwLab::unbridge`].
    pub fn bridge(&self) {
        self.line.bridge().expect("bridge");
    }

    pub fn unbridge(&self) {
        self.line.unbridge().expect("unbridge");
    }

    /// GRO off on both gateway ports, so that a gateway turning it on (and
    /// back off at exit) shows.
    pub fn gateway_ports_gro_off(&self) {
        let off = px_lab::Offloads { gro: Some(false), ..Default::default() };
        for dev in [GW_OUTER, GW_INNER] {
            self.ns(self.gw).set_offloads(dev, off).unwrap();
        }
    }

    /// The state of the gateway's ports: outer, inner.
    pub fn gateway_ports(&self) -> [PortState; 2] {
        [port_state(self.ns(self.gw), GW_OUTER), port_state(self.ns(self.gw), GW_INNER)]
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

/// The kernel's packet and byte counts of `dev` in the gateway's
/// namespace: rx packets, rx bytes, tx packets, tx bytes.
pub fn kernel_counts(lab: &GwLab, dev: &str) -> [u64; 4] {
    let json = lab.ns(lab.gw).ip(&["-s", "-j", "link", "show", "dev", dev]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("ip -s -j link: {e}: {json}"));
    let st = &v[0]["stats64"];
    let n = |dir: &str, what: &str| st[dir][what].as_u64().unwrap_or_else(|| panic!("no {dir}.{what} in {json}"));
    [n("rx", "packets"), n("rx", "bytes"), n("tx", "packets"), n("tx", "bytes")]
}

/// `px status` run in the gateway's namespace with `args`: its exit code,
/// stdout and stderr.
pub fn px_status(lab: &GwLab, args: &[&str]) -> (Option<i32>, String, String) {
    let out = lab.ns(lab.gw).command(env!("CARGO_BIN_EXE_px")).arg("status").args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `px status --json` of the running gateway.
pub fn px_status_json(lab: &GwLab) -> serde_json::Value {
    let (code, json, err) = px_status(lab, &["--json"]);
    assert_eq!(code, Some(0), "px status --json: {json}{err}");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// `px gateway` running in the gateway namespace.
pub struct Gateway {
    process: GatewayProcess,
    pub pid: u32,
}

impl Gateway {
    /// Starts `px gateway --inner px-gwi --outer px-gwo ARGS` and waits for
    /// its first log line (ports opened).
    /// `PX_TEST_OFFLOAD=on` in the environment runs every such gateway with
    /// the kernel fast path (`--offload on`), to run the gateway's lab tests
    /// (hostile traffic, the border tests) through it.
    /// `PX_TEST_DATAPATH=dpdk` runs it on the DPDK datapath (DPDK's
    /// AF_PACKET driver on the same interfaces, `--datapath dpdk`).
    pub fn start(lab: &GwLab, args: &[&str]) -> Gateway {
        let mut args = args.to_vec();
        let offload = std::env::var("PX_TEST_OFFLOAD").ok();
        if let Some(m) = offload.as_deref() {
            args.extend_from_slice(&["--offload", m]);
        }
        if dpdk_datapath() {
            args.extend_from_slice(&["--datapath", "dpdk"]);
        }
        let process = GatewayProcess::start(&lab.line, Path::new(env!("CARGO_BIN_EXE_px")), &args)
            .unwrap_or_else(|e| panic!("{e}"));
        Gateway { pid: process.pid, process }
    }

    /// As [`Gateway::start`], run by `wrapper` (which execs px, e.g.
    /// `setpriv … --`); an `Err` is the gateway's refusal to start (its log).
    pub fn start_wrapped(lab: &GwLab, wrapper: &[&str], args: &[&str]) -> Result<Gateway, String> {
        let process = GatewayProcess::start_wrapped(&lab.line, wrapper, Path::new(env!("CARGO_BIN_EXE_px")), args)?;
        Ok(Gateway { pid: process.pid, process })
    }

    /// SIGTERM, then wait (at most 10 s) for the exit and read the stats.
    pub fn stop(self) -> GatewayExit {
        self.process.stop().unwrap_or_else(|e| panic!("{e}"))
    }

    /// SIGHUP: reload the configuration.
    pub fn reload(&self) {
        self.process.reload().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits (up to 5 s) for `text` in the log; returns the log.
    pub fn wait_log(&self, text: &str) -> String {
        self.process.wait_log(text, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Whether the lab tests run the gateway on the DPDK datapath
/// (`PX_TEST_DATAPATH=dpdk`).
pub fn dpdk_datapath() -> bool {
    std::env::var("PX_TEST_DATAPATH").is_ok_and(|v| v == "dpdk")
}

/// `GET /metrics` from inside the gateway's namespace.
pub fn metrics(lab: &GwLab, addr: &str) -> String {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    lab.ns(lab.gw)
        .run(|| {
            let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: px\r\n\r\n")?;
            let mut body = String::new();
            s.read_to_string(&mut body)?;
            Ok::<_, std::io::Error>(body)
        })
        .unwrap()
        .expect("metrics endpoint")
}

/// The value of the sample `name_and_labels` in Prometheus text.
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name_and_labels}"))
}

/// What the tests check of a gateway's exit.
pub trait ExitChecks {
    /// `counters.flush[i]` (index = px_gateway::FlushReason as usize).
    fn flushes(&self, reason: px_gateway::FlushReason) -> u64;
    fn assert_clean(&self);
}

impl ExitChecks for GatewayExit {
    fn flushes(&self, reason: px_gateway::FlushReason) -> u64 {
        self.flush_counts().get(reason as usize).copied().unwrap_or(0)
    }

    fn assert_clean(&self) {
        assert!(self.status.success(), "px gateway exited with {}; log:\n{}", self.status, self.log);
        assert!(self.log.contains("stopped; flushed everything held"), "{}", self.log);
        assert_eq!(self.stats["held_bytes"].as_u64(), Some(0), "bytes still held at exit: {}", self.stats);
        assert_eq!(self.stats["send_errors"].as_u64(), Some(0), "send errors: {}", self.stats);
    }
}

/// Runs `t.flows` TCP connections from `client` to a listener in `server`
/// (px-lab's bulk generator: every byte checked by the receiver; the
/// SHA-256 of each flow computed at both ends when `t.sha256`); bytes
/// received so far (all flows) are counted in `progress`.
pub fn transfer(client: &Netns, server: &Netns, t: BulkSpec, progress: &AtomicU64) -> Vec<FlowResult> {
    px_lab::bulk_tcp_counted(client, server, &t, progress)
        .unwrap_or_else(|e| panic!("transfer to {}: {e}", t.server))
        .flows
}

/// Both directions, one flow and 32 parallel flows, with SHA-256 computed
/// at each end of every flow.
pub fn transfers_both_ways(lab: &GwLab, legacy_addr: &str, bnet_addr: &str, base_port: u16) {
    let cases = [(1usize, 8u64 << 20), (32, 512 << 10)];
    for (k, (flows, bytes)) in cases.into_iter().enumerate() {
        exact_both_ways(lab, legacy_addr, bnet_addr, base_port + 2 * k as u16, flows, bytes);
    }
}

/// `flows` flows of `bytes` each from the legacy host to `bnet_addr:port`,
/// then from the b-network host to `legacy_addr:port + 1`, at full pace
/// with SHA-256 at both ends, each direction checked exact: the flows'
/// results, inbound and outbound.
pub fn exact_both_ways(
    lab: &GwLab,
    legacy_addr: &str,
    bnet_addr: &str,
    port: u16,
    flows: usize,
    bytes: u64,
) -> (Vec<FlowResult>, Vec<FlowResult>) {
    let progress = AtomicU64::new(0);
    let inbound = BulkSpec {
        server: sock(bnet_addr, port),
        flows,
        bytes_per_flow: bytes,
        pace: Pace::FULL,
        stall_timeout: Duration::from_secs(10),
        sha256: true,
    };
    let ends_in = transfer(lab.ns(lab.legacy), lab.ns(lab.bnet), inbound, &progress);
    assert_exact(&ends_in, bytes);
    let outbound = BulkSpec { server: sock(legacy_addr, port + 1), ..inbound };
    let ends_out = transfer(lab.ns(lab.bnet), lab.ns(lab.legacy), outbound, &progress);
    assert_exact(&ends_out, bytes);
    (ends_in, ends_out)
}

/// Every flow delivered every byte, and both ends computed the same SHA-256.
pub fn assert_exact(ends: &[FlowResult], bytes_per_flow: u64) {
    for (i, e) in ends.iter().enumerate() {
        assert_eq!(e.bytes, bytes_per_flow, "flow {i}: received {} of {bytes_per_flow}", e.bytes);
        let sent = e.sent_sha256.as_deref().unwrap_or_default();
        assert_eq!(sent.len(), 64, "flow {i}: no digest");
        assert_eq!(e.sent_sha256, e.received_sha256, "flow {i}: sha256 differs");
    }
}

/// Of the data frames that reached the b-network host (an observer on its
/// link, GRO off there), the share that were merged (larger than a
/// 1500-byte frame).
pub fn merged_share(s: &px_lab::observe::FrameSizes) -> f64 {
    s.rx.up_to_9000 as f64 / (s.rx.up_to_9000 + s.rx.up_to_1500).max(1) as f64
}

/// The share of the bytes arriving at an observer that came in merged
/// frames (L3 size 1501..=9000), of those up to 9000: unlike
/// [`merged_share`], a burst of small frames (a sender's loss recovery, a
/// handover's few unmerged segments) weighs by its bytes, not by its count.
pub fn merged_byte_share(s: &px_lab::observe::FrameSizes) -> f64 {
    s.rx.bytes_up_to_9000 as f64 / (s.rx.bytes_up_to_9000 + s.rx.bytes_up_to_1500).max(1) as f64
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

/// The MAC address of `dev` in `ns`.
pub fn mac_of(ns: &Netns, dev: &str) -> String {
    let link = ns.ip(&["-o", "link", "show", "dev", dev]).unwrap();
    let mut w = link.split_whitespace();
    w.find(|t| *t == "link/ether").and_then(|_| w.next()).expect("MAC").to_string()
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

/// A scratch directory removed on drop.
/// Unique per process and call, so that tests running in parallel with the
/// same tag do not share one.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(what: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("px-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
