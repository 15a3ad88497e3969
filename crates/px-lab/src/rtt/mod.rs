//! The experiment of `px lab rtt`: the background study of the seeds
//! (`mtu-1500-vs-9000-rtt-study.txt`, Egan) on this machine. Round-trip
//! time against message size, TCP and UDP, over a link at MTU 1500, a link
//! at MTU 9000, and from a b-network host (9000) to a legacy host (1500)
//! through `px gateway` and through a plain Linux router, in one run.
//!
//! As in the study, one round trip is: the client sends one message of the
//! size (one `send`), the server answers a 4-byte acknowledgement once it
//! has all of it, the client waits for it. TCP twice: as the study's
//! program did (a plain `send`, so Nagle's algorithm is on) and with
//! `TCP_NODELAY`; UDP with a sequence number in each datagram (a lost one
//! counts as lost, not as a long RTT; datagrams above the MTU are IP
//! fragments). Offloads: TSO/GSO off on every sender (frames on the wire
//! are MTU-sized, as on the study's fibre), GRO on the receivers. Client
//! and servers run on one CPU (the last), so that no round trip pays a
//! cross-core wakeup; `px gateway` is a process of
//! its own, wherever the scheduler puts it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::RunError;
use crate::demo::LEGACY_ADDR;
use px_netns::TempFile;
use px_netns::gateway::GatewayProcess;
use px_netns::line::{Addressing, ROUTER_LEFT_V4};
use px_netns::{Netns, Offloads, Veth};

/// What to run.
#[derive(Debug, Clone)]
pub struct RttOptions {
    /// The `px` binary (run as `px gateway`).
    pub exe: PathBuf,
    /// Message sizes in bytes (payload of one `send`).
    pub sizes: Vec<usize>,
    /// Round trips per cell (path × protocol × size) at most …
    pub reps: usize,
    /// … and for at most this long (a cell where Nagle's algorithm meets
    /// delayed ACKs takes 40 ms a round trip).
    pub budget: Duration,
    /// Also the paths through px gateway and a Linux router.
    pub gateway: bool,
}

/// The sizes of the default run: around one 1500 frame, one 9000 frame,
/// and up to the largest UDP datagram.
pub const DEFAULT_SIZES: [usize; 16] =
    [64, 1000, 1448, 1472, 2000, 3000, 4500, 6000, 8948, 8972, 11000, 16000, 24000, 32000, 48000, 65000];

/// One cell.
#[derive(Debug, Clone, Serialize)]
pub struct RttRow {
    /// `1500`, `9000`, `gateway` (9000 → px gateway → 1500), `router`.
    pub path: &'static str,
    /// `tcp` (Nagle on), `tcp_nodelay`, `udp`.
    pub proto: &'static str,
    pub size: usize,
    pub samples: usize,
    /// UDP round trips with no answer within 200 ms.
    pub lost: usize,
    pub p10_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
}

/// Everything `px lab rtt` reports.
#[derive(Debug, Clone, Serialize)]
pub struct RttResult {
    pub rows: Vec<RttRow>,
    pub offloads: &'static str,
    /// Per protocol: median over sizes of p50(9000) / p50(1500), for sizes
    /// above one 1500-byte frame (the study: 1.85 for UDP at 11000 B).
    pub ratio_9000_over_1500: Vec<(String, f64)>,
    /// px gateway's final counters (`counters` of its stats file), when
    /// the gateway path ran: where its drops went.
    pub gateway_counters: serde_json::Value,
}

const OFFLOADS: &str = "tso/gso off on every sender, gro on every receiver (veth); client and servers on one CPU";
const PROTOS: [&str; 3] = ["tcp", "tcp_nodelay", "udp"];
const MAX_UDP: usize = 65507;

/// p10, p50, p90 of a sample (sorted in place).
pub fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.1), at(0.5), at(0.9))
}

/// The servers of one path, stopped on drop.
struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

const PORT_TCP: u16 = 7201;
const PORT_TCP_NODELAY: u16 = 7202;
const PORT_UDP: u16 = 7203;

/// The CPU every client and server thread runs on: one core, so that no
/// round trip pays a cross-core wakeup (on a loaded two-core machine the
/// scheduler otherwise puts a path's two ends on one core or on two, and
/// that alone moves its RTT by 20–30 µs whatever the MTU).
fn cpu() -> usize {
    px_netns::cpu::online_cpus().saturating_sub(1)
}

fn pin() {
    // Best effort: an unpinned thread only adds noise.
    let _ = px_netns::cpu::pin_current_thread(cpu());
}

fn start_servers(server: &Netns, ip: &str) -> Result<Servers, RunError> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (port, nodelay) in [(PORT_TCP, false), (PORT_TCP_NODELAY, true)] {
        let addr: SocketAddr = format!("{ip}:{port}").parse().map_err(|e| format!("{e}"))?;
        let l = server.run(|| TcpListener::bind(addr))?.map_err(|e| format!("listen {addr}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            pin();
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        let _ = echo_tcp(s, nodelay, &stop);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }));
    }
    let addr: SocketAddr = format!("{ip}:{PORT_UDP}").parse().map_err(|e| format!("{e}"))?;
    let u = server.run(|| UdpSocket::bind(addr))?.map_err(|e| format!("bind {addr}: {e}"))?;
    u.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| e.to_string())?;
    let stop2 = stop.clone();
    threads.push(std::thread::spawn(move || {
        pin();
        let mut buf = vec![0u8; 65536];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = u.recv_from(&mut buf)
                && n >= 4
            {
                let _ = u.send_to(&buf[..4], from);
            }
        }
    }));
    Ok(Servers { stop, threads })
}

fn echo_tcp(mut s: TcpStream, nodelay: bool, stop: &AtomicBool) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_nodelay(nodelay)?;
    s.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut head = [0u8; 4];
    let mut buf = vec![0u8; 1 << 17];
    loop {
        match s.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                continue;
            }
            Err(_) => return Ok(()),
        }
        let n = u32::from_be_bytes(head) as usize;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.read_exact(&mut buf[..n.saturating_sub(4).min(1 << 17)])?;
        s.set_read_timeout(Some(Duration::from_millis(200)))?;
        s.write_all(&head)?;
    }
}

/// One path's connections (made in the client's namespace; a socket stays
/// in the namespace it was made in, whichever thread uses it) and servers.
struct PathConn {
    path: &'static str,
    tcp: TcpStream,
    tcp_nodelay: TcpStream,
    udp: UdpSocket,
    seq: u32,
    _servers: Servers,
}

fn connect(path: &'static str, client: &Netns, server: &Netns, ip: &str) -> Result<PathConn, RunError> {
    let servers = start_servers(server, ip)?;
    let ip: std::net::IpAddr = ip.parse().map_err(|e| format!("{e}"))?;
    let r: Result<PathConn, String> = client.run(|| {
        let tcp = |port, nodelay| -> Result<TcpStream, String> {
            let s = TcpStream::connect_timeout(&SocketAddr::new(ip, port), Duration::from_secs(5))
                .map_err(|e| format!("{path}: connect {ip}:{port}: {e}"))?;
            s.set_nodelay(nodelay).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
            Ok(s)
        };
        let udp = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
        udp.connect(SocketAddr::new(ip, PORT_UDP)).map_err(|e| e.to_string())?;
        udp.set_read_timeout(Some(Duration::from_millis(200))).map_err(|e| e.to_string())?;
        Ok(PathConn {
            path,
            tcp: tcp(PORT_TCP, false)?,
            tcp_nodelay: tcp(PORT_TCP_NODELAY, true)?,
            udp,
            seq: 0,
            _servers: servers,
        })
    })?;
    Ok(r?)
}

/// One round trip; `None` if the UDP answer did not come.
fn round_trip(c: &mut PathConn, proto: &str, msg: &mut [u8]) -> Result<Option<f64>, String> {
    let t0 = Instant::now();
    let s = match proto {
        "tcp" => &mut c.tcp,
        "tcp_nodelay" => &mut c.tcp_nodelay,
        _ => {
            c.seq += 1;
            msg[..4].copy_from_slice(&c.seq.to_be_bytes());
            c.udp.send(msg).map_err(|e| format!("{} udp {} B: {e}", c.path, msg.len()))?;
            let mut ack = [0u8; 16];
            loop {
                match c.udp.recv(&mut ack) {
                    Ok(4) if ack[..4] == c.seq.to_be_bytes() => return Ok(Some(t0.elapsed().as_secs_f64() * 1e6)),
                    Ok(_) => continue,
                    Err(_) => return Ok(None),
                }
            }
        }
    };
    let len = msg.len() as u32;
    msg[..4].copy_from_slice(&len.to_be_bytes());
    let mut ack = [0u8; 4];
    s.write_all(msg).and_then(|()| s.read_exact(&mut ack)).map_err(|e| format!("{} {proto} {} B: {e}", c.path, len))?;
    Ok(Some(t0.elapsed().as_secs_f64() * 1e6))
}

/// One cell: five warm-up round trips, then `reps` (or at least 10 within
/// the budget).
fn cell(c: &mut PathConn, proto: &'static str, size: usize, o: &RttOptions) -> Result<RttRow, String> {
    let mut msg = vec![0x5au8; size.max(4)];
    for _ in 0..5 {
        round_trip(c, proto, &mut msg)?;
    }
    let (mut samples, mut lost) = (Vec::with_capacity(o.reps), 0);
    let start = Instant::now();
    loop {
        match round_trip(c, proto, &mut msg)? {
            Some(us) => samples.push(us),
            None => lost += 1,
        }
        let n = samples.len() + lost;
        if n >= o.reps || (n >= 10 && start.elapsed() >= o.budget) {
            break;
        }
    }
    let (p10_us, p50_us, p90_us) = spread(&mut samples);
    Ok(RttRow { path: c.path, proto, size, samples: samples.len(), lost, p10_us, p50_us, p90_us })
}

/// Two hosts on one link of `mtu`.
fn direct(mtu: u32) -> Result<(Netns, Netns), RunError> {
    let c = Netns::new("rttc")?;
    let s = Netns::new("rtts")?;
    Veth::create(&c, "c0", &s, "s0", mtu)?;
    c.add_addr("c0", "198.51.100.1/24")?;
    s.add_addr("s0", "198.51.100.2/24")?;
    let o = Offloads::WIRE_SENDER.with(Offloads::GRO_RECEIVER);
    c.set_offloads("c0", o)?;
    s.set_offloads("s0", o)?;
    Ok((c, s))
}

/// Median over sizes above one 1500 frame of p50(9000)/p50(1500), per protocol.
pub fn ratios(rows: &[RttRow]) -> Vec<(String, f64)> {
    PROTOS
        .iter()
        .filter_map(|&proto| {
            let p50 = |path: &str, size: usize| {
                rows.iter().find(|r| r.path == path && r.proto == proto && r.size == size).map(|r| r.p50_us)
            };
            let mut v: Vec<f64> = rows
                .iter()
                .filter(|r| r.path == "1500" && r.proto == proto && r.size > 1472)
                .filter_map(|r| Some(p50("9000", r.size)? / r.p50_us))
                .filter(|x| x.is_finite())
                .collect();
            (!v.is_empty()).then(|| (proto.to_string(), spread(&mut v).1))
        })
        .collect()
}

/// Builds every path, then measures them interleaved: for each protocol
/// and size, each path in turn (starting with a different one each time),
/// so that a drift of the machine (other builds, CPU frequency) spreads
/// over all paths instead of biasing the one measured first.
pub fn run(o: &RttOptions, say: &dyn Fn(&str)) -> Result<RttResult, RunError> {
    px_netns::install_signal_cleanup().map_err(px_netns::LabError::Signal)?;
    say("px lab rtt: two hosts on a link at MTU 1500, two at 9000…");
    let (c15, s15) = direct(1500)?;
    let (c90, s90) = direct(9000)?;
    let mut conns = vec![connect("1500", &c15, &s15, "198.51.100.2")?, connect("9000", &c90, &s90, "198.51.100.2")?];
    let mut lines = Vec::new();
    let mut gateway = None;
    let mut gateway_config = None;
    if o.gateway {
        say(
            "px lab rtt: b-network host (9000) → px gateway → legacy host (1500), and the same through a Linux router…",
        );
        let gw_line = crate::demo::build()?;
        gw_line.address(Addressing::Bump).map_err(|e| e.to_string())?;
        // As an operator would configure a bump in the wire (examples/
        // gateway.toml): an address to send "fragmentation needed" from.
        // Without one, a datagram too big for the legacy side is dropped
        // with no ICMP (`icmp_no_source`), and its sender never learns.
        let cfg = TempFile::write(
            "px-lab-rtt-gateway",
            "toml",
            &format!("[engine]\nicmp_source_v4 = \"{ROUTER_LEFT_V4}\"\n"),
        )?;
        let cfg_arg = cfg.0.to_string_lossy().into_owned();
        gateway = Some(GatewayProcess::start(&gw_line, &o.exe, &["--config", &cfg_arg])?);
        gateway_config = Some(cfg);
        let router_line = crate::demo::build()?;
        router_line.address(Addressing::Router).map_err(|e| e.to_string())?;
        conns.push(connect("gateway", gw_line.right_ns(), gw_line.left_ns(), LEGACY_ADDR)?);
        conns.push(connect("router", router_line.right_ns(), router_line.left_ns(), LEGACY_ADDR)?);
        lines.push(gw_line);
        lines.push(router_line);
    }
    say("px lab rtt: measuring tcp, tcp_nodelay, udp, the paths interleaved…");
    let rows: Result<Vec<RttRow>, String> = std::thread::scope(|sc| {
        sc.spawn(|| {
            pin();
            let mut rows = Vec::new();
            let mut turn = 0;
            for proto in PROTOS {
                for &size in &o.sizes {
                    if proto == "udp" && size > MAX_UDP {
                        continue;
                    }
                    turn += 1;
                    let n = conns.len();
                    for k in 0..n {
                        let c = &mut conns[(turn + k) % n];
                        rows.push(cell(c, proto, size, o)?);
                    }
                }
            }
            Ok(rows)
        })
        .join()
        .map_err(|_| "the measuring thread panicked".to_string())?
    });
    let mut rows = rows?;
    drop(conns);
    let mut gateway_counters = serde_json::Value::Null;
    if let Some(gw) = gateway {
        let exit = gw.stop()?;
        if !exit.status.success() {
            return Err(format!("px gateway exited with {}; its log:\n{}", exit.status, exit.log).into());
        }
        gateway_counters = exit.stats["counters"].clone();
    }
    drop(gateway_config);
    drop(lines);
    let order = |p: &str| ["1500", "9000", "gateway", "router"].iter().position(|x| *x == p);
    rows.sort_by_key(|r| (PROTOS.iter().position(|x| *x == r.proto), order(r.path), r.size));
    let ratio_9000_over_1500 = ratios(&rows);
    Ok(RttResult { rows, offloads: OFFLOADS, ratio_9000_over_1500, gateway_counters })
}

/// The SVG: one chart per protocol, p50 RTT against message size, a line per path.
pub fn svg(r: &RttResult) -> String {
    use px_sim::svg::{LineChart, Series, stack};
    let mut paths: Vec<&str> = Vec::new();
    for row in &r.rows {
        if !paths.contains(&row.path) {
            paths.push(row.path);
        }
    }
    let charts: Vec<String> = PROTOS
        .iter()
        .map(|&proto| {
            let series = paths
                .iter()
                .map(|&path| Series {
                    name: match path {
                        "1500" | "9000" => format!("MTU {path}"),
                        p => format!("9000 → {p} → 1500"),
                    },
                    points: r
                        .rows
                        .iter()
                        .filter(|x| x.path == path && x.proto == proto)
                        .map(|x| (x.size as f64, x.p50_us))
                        .collect(),
                })
                .collect();
            LineChart {
                title: format!("{proto}: round-trip time (p50) against message size"),
                x_label: "message size (bytes, one send)".into(),
                y_label: "RTT p50 (µs)".into(),
                series,
                y_max: None,
                markers: vec![(1472.0, "1500".into()), (8972.0, "9000".into())],
                note: Some(
                    "px lab rtt (veth, TSO/GSO off); dashed: largest one-frame message at MTU 1500, 9000".into(),
                ),
            }
            .to_svg()
        })
        .collect();
    stack(&charts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_a_sample() {
        let mut v: Vec<f64> = (1..=11).rev().map(f64::from).collect();
        assert_eq!(spread(&mut v), (2.0, 6.0, 10.0));
        assert!(spread(&mut []).1.is_nan());
    }

    #[test]
    fn ratios_are_medians_above_one_frame() {
        let row = |path, size, p50_us| RttRow {
            path,
            proto: "udp",
            size,
            samples: 1,
            lost: 0,
            p10_us: 0.0,
            p50_us,
            p90_us: 0.0,
        };
        let rows = vec![
            row("1500", 1000, 10.0),
            row("9000", 1000, 100.0),
            row("1500", 2000, 10.0),
            row("9000", 2000, 20.0),
            row("1500", 4000, 10.0),
            row("9000", 4000, 5.0),
            row("1500", 8000, 10.0),
            row("9000", 8000, 30.0),
        ];
        assert_eq!(ratios(&rows), vec![("udp".to_string(), 2.0)]);
        let r = RttResult {
            rows,
            offloads: OFFLOADS,
            ratio_9000_over_1500: vec![],
            gateway_counters: serde_json::Value::Null,
        };
        assert!(svg(&r).starts_with("<svg"));
    }
}
