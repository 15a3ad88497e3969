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
//!
//! A veth has no serialisation delay. With link rates
//! ([`RttOptions::link_rates`]) every egress of every path is shaped to the
//! rate with a one-frame burst ([`px_netns::shape`]), and the direct paths
//! go through a switch (a Linux bridge in a namespace of its own), so that
//! a message crosses two store-and-forward hops each way as on the study's
//! gigabit switch; the paths are measured at each rate in turn. The table
//! and the plot are in `table.rs`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

pub mod model;
mod table;

pub use table::{svg, table};

use crate::RunError;
use crate::demo::LEGACY_ADDR;
use px_netns::TempFile;
use px_netns::gateway::GatewayProcess;
use px_netns::line::{Addressing, ROUTER_LEFT_V4};
use px_netns::{LinkRate, Netns, Offloads, Veth};

/// What to run.
#[derive(Debug, Clone, clap::Args)]
pub struct RttOptions {
    /// The `px` binary (run as `px gateway`).
    #[arg(skip)]
    pub exe: PathBuf,
    /// Message sizes in bytes (payload of one `send`), comma-separated
    /// (each 4..=1048576); UDP skips those above 65507.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SIZES, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(4..=1 << 20), |v| v as usize))]
    pub sizes: Vec<usize>,
    /// Round trips per cell (path × protocol × size) at most …
    #[arg(long, default_value_t = 200, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(10..=100_000), |v| v as usize))]
    pub reps: usize,
    /// … and for at most this long, e.g. 1s (a cell where Nagle's algorithm
    /// meets delayed ACKs takes 40 ms a round trip).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = px_units::duration)]
    pub budget: Duration,
    /// Also the paths through px gateway and a Linux router (`--no-gateway`:
    /// only the two direct links).
    #[arg(long = "no-gateway", action = clap::ArgAction::SetFalse)]
    pub gateway: bool,
    /// Link rates to measure at, in turn, comma-separated (`none`: the
    /// unshaped veth), e.g. `none,1gbit,10gbit`: every egress of every path
    /// shaped to the rate with a one-frame burst (tbf), the direct hosts
    /// through a switch.
    #[arg(long = "link-rate", value_name = "RATE", value_delimiter = ',', value_parser = parse_link_rate)]
    pub link_rates: Vec<Option<LinkRate>>,
}

/// `--link-rate`'s values (`none`, or tc's units).
fn parse_link_rate(s: &str) -> Result<Option<LinkRate>, String> {
    LinkRate::parse(s).map_err(|e| e.to_string())
}

/// The sizes of the default run: around one 1500 frame, one 9000 frame,
/// and up to the largest UDP datagram.
pub const DEFAULT_SIZES: [usize; 16] =
    [64, 1000, 1448, 1472, 2000, 3000, 4500, 6000, 8948, 8972, 11000, 16000, 24000, 32000, 48000, 65000];

/// One cell.
#[derive(Debug, Clone, Serialize)]
pub struct RttRow {
    /// The link rate of every hop, bits per second (`null`: unshaped veth).
    pub link_rate_bps: Option<u64>,
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
    /// With a link rate, on the direct paths: what a real store-and-forward
    /// path (two hops each way, the switch) adds to the round trip by
    /// arithmetic ([`model::wire_us`]), to set beside the measured p50 less
    /// the unshaped one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_wire_us: Option<f64>,
}

/// p50(9000) / p50(1500) of one protocol at one link rate.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub link_rate_bps: Option<u64>,
    pub proto: String,
    /// Median over sizes above one 1500-byte frame.
    pub median: f64,
    /// At 11000 B (the study's example: 1.85 for UDP), if measured.
    pub at_11000: Option<f64>,
}

/// Everything `px lab rtt` reports.
#[derive(Debug, Clone, Serialize)]
pub struct RttResult {
    pub rows: Vec<RttRow>,
    pub offloads: &'static str,
    /// How the links were shaped.
    pub shaping: &'static str,
    /// Per protocol: median over sizes of p50(9000) / p50(1500), for sizes
    /// above one 1500-byte frame (the study: 1.85 for UDP at 11000 B), at
    /// the first link rate of the run.
    pub ratio_9000_over_1500: Vec<(String, f64)>,
    /// The same per link rate and protocol, with the ratio at 11000 B.
    pub ratios: Vec<Ratio>,
    /// px gateway's final counters (`counters` of its stats file), when
    /// the gateway path ran: where its drops went.
    pub gateway_counters: serde_json::Value,
}

const OFFLOADS: &str = "tso/gso off on every sender, gro on every receiver (veth); client and servers on one CPU";
const SHAPING: &str = "with a link rate: tbf on every egress of every path (rate, burst of one frame); the direct paths \
                       through a Linux bridge (two store-and-forward hops each way)";
pub(crate) const PROTOS: [&str; 3] = ["tcp", "tcp_nodelay", "udp"];
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
    /// The link rate it is shaped to now.
    rate: Option<LinkRate>,
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
            rate: None,
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
    Ok(RttRow {
        link_rate_bps: c.rate.map(|r| r.0),
        path: c.path,
        proto,
        size,
        samples: samples.len(),
        lost,
        p10_us,
        p50_us,
        p90_us,
        model_wire_us: match (c.rate, c.path) {
            (Some(r), "1500") => Some(model::wire_us(proto, size, 1500, r, 2)),
            (Some(r), "9000") => Some(model::wire_us(proto, size, 9000, r, 2)),
            _ => None,
        },
    })
}

/// A direct path: two hosts on one link of `mtu`, or through a switch
/// (a bridge in a namespace of its own, `sw`).
struct Direct {
    c: Netns,
    s: Netns,
    sw: Option<Netns>,
    mtu: u32,
}

impl Direct {
    fn build(mtu: u32, switch: bool) -> Result<Direct, RunError> {
        let c = Netns::new("rttc")?;
        let s = Netns::new("rtts")?;
        let o = Offloads::WIRE_SENDER.with(Offloads::GRO_RECEIVER);
        let sw = if switch {
            let sw = Netns::new("rttsw")?;
            Veth::create(&c, "c0", &sw, "p0", mtu)?;
            Veth::create(&sw, "p1", &s, "s0", mtu)?;
            sw.ip(&["link", "add", "br0", "type", "bridge"])?;
            sw.ip(&["link", "set", "br0", "mtu", &mtu.to_string()])?;
            // A switch forwards frame by frame: no GRO on its ports.
            let port = Offloads::WIRE_SENDER.with(Offloads { gro: Some(false), ..Offloads::default() });
            for p in ["p0", "p1"] {
                sw.ip(&["link", "set", p, "master", "br0"])?;
                sw.set_offloads(p, port)?;
            }
            sw.link_up("br0")?;
            Some(sw)
        } else {
            Veth::create(&c, "c0", &s, "s0", mtu)?;
            None
        };
        c.add_addr("c0", "198.51.100.1/24")?;
        s.add_addr("s0", "198.51.100.2/24")?;
        c.set_offloads("c0", o)?;
        s.set_offloads("s0", o)?;
        Ok(Direct { c, s, sw, mtu })
    }

    /// Every egress of the path: (namespace, device, its link's MTU).
    fn egresses(&self) -> Vec<(&Netns, &'static str, u32)> {
        let mut v = vec![(&self.c, "c0", self.mtu), (&self.s, "s0", self.mtu)];
        if let Some(sw) = &self.sw {
            v.extend([(sw, "p0", self.mtu), (sw, "p1", self.mtu)]);
        }
        v
    }
}

/// Shapes (or, with `None`, unshapes) every egress in `egresses`.
fn shape_all(egresses: &[(&Netns, &str, u32)], rate: Option<LinkRate>) -> Result<(), RunError> {
    for (ns, dev, mtu) in egresses {
        match rate {
            Some(r) => ns.shape(dev, r, *mtu)?,
            None => ns.unshape(dev)?,
        }
    }
    Ok(())
}

/// p50(9000)/p50(1500) per link rate and protocol: the median over sizes
/// above one 1500 frame, and the ratio at 11000 B.
pub fn ratios(rows: &[RttRow]) -> Vec<Ratio> {
    let mut rates: Vec<Option<u64>> = Vec::new();
    for r in rows {
        if !rates.contains(&r.link_rate_bps) {
            rates.push(r.link_rate_bps);
        }
    }
    let mut out = Vec::new();
    for rate in rates {
        for &proto in &PROTOS {
            let p50 = |path: &str, size: usize| {
                rows.iter()
                    .find(|r| r.link_rate_bps == rate && r.path == path && r.proto == proto && r.size == size)
                    .map(|r| r.p50_us)
            };
            let mut v: Vec<f64> = rows
                .iter()
                .filter(|r| r.link_rate_bps == rate && r.path == "1500" && r.proto == proto && r.size > 1472)
                .filter_map(|r| Some(p50("9000", r.size)? / r.p50_us))
                .filter(|x| x.is_finite())
                .collect();
            if v.is_empty() {
                continue;
            }
            let at_11000 = p50("9000", 11000).zip(p50("1500", 11000)).map(|(a, b)| a / b).filter(|x| x.is_finite());
            out.push(Ratio { link_rate_bps: rate, proto: proto.to_string(), median: spread(&mut v).1, at_11000 });
        }
    }
    out
}

/// Builds every path, then, at each link rate in turn, measures them
/// interleaved: for each protocol and size, each path in turn (starting
/// with a different one each time), so that a drift of the machine (other
/// builds, CPU frequency) spreads over all paths instead of biasing the one
/// measured first.
pub fn run(o: &RttOptions, say: &dyn Fn(&str)) -> Result<RttResult, RunError> {
    px_netns::install_signal_cleanup().map_err(px_netns::LabError::Signal)?;
    let rates = if o.link_rates.is_empty() { vec![None] } else { o.link_rates.clone() };
    let switch = rates.iter().any(Option::is_some);
    say(if switch {
        "px lab rtt: two hosts through a switch at MTU 1500, two at 9000…"
    } else {
        "px lab rtt: two hosts on a link at MTU 1500, two at 9000…"
    });
    let d15 = Direct::build(1500, switch)?;
    let d90 = Direct::build(9000, switch)?;
    let mut conns =
        vec![connect("1500", &d15.c, &d15.s, "198.51.100.2")?, connect("9000", &d90.c, &d90.s, "198.51.100.2")?];
    let mut egresses: Vec<(&Netns, &str, u32)> = d15.egresses();
    egresses.extend(d90.egresses());
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
    for l in &lines {
        let [ld, mld, mrd, rd] = l.spec.devs;
        let [lm, rm] = l.spec.mtus;
        egresses.extend([
            (l.left_ns(), ld, lm),
            (l.middle_ns(), mld, lm),
            (l.middle_ns(), mrd, rm),
            (l.right_ns(), rd, rm),
        ]);
    }
    let mut rows = Vec::new();
    for rate in rates {
        say(&match rate {
            Some(r) => format!("px lab rtt: every hop at {r}; measuring tcp, tcp_nodelay, udp, the paths interleaved…"),
            None => "px lab rtt: unshaped; measuring tcp, tcp_nodelay, udp, the paths interleaved…".to_string(),
        });
        shape_all(&egresses, rate)?;
        for c in &mut conns {
            c.rate = rate;
        }
        rows.extend(measure(&mut conns, o)?);
    }
    drop(egresses);
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
    drop((d15, d90));
    let order = |p: &str| ["1500", "9000", "gateway", "router"].iter().position(|x| *x == p);
    let rate_order = |r: Option<u64>| r.unwrap_or(0);
    rows.sort_by_key(|r| {
        (rate_order(r.link_rate_bps), PROTOS.iter().position(|x| *x == r.proto), order(r.path), r.size)
    });
    let ratios = ratios(&rows);
    let first = rows.first().map(|r| r.link_rate_bps);
    let ratio_9000_over_1500 =
        ratios.iter().filter(|x| Some(x.link_rate_bps) == first).map(|x| (x.proto.clone(), x.median)).collect();
    Ok(RttResult { rows, offloads: OFFLOADS, shaping: SHAPING, ratio_9000_over_1500, ratios, gateway_counters })
}

/// Every cell of every path at the current link rate, on the measuring CPU.
fn measure(conns: &mut [PathConn], o: &RttOptions) -> Result<Vec<RttRow>, RunError> {
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
    Ok(rows?)
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

    fn row(rate: Option<u64>, path: &'static str, size: usize, p50_us: f64) -> RttRow {
        RttRow {
            link_rate_bps: rate,
            path,
            proto: "udp",
            size,
            samples: 1,
            lost: 0,
            p10_us: 0.0,
            p50_us,
            p90_us: 0.0,
            model_wire_us: None,
        }
    }

    #[test]
    fn ratios_are_medians_above_one_frame_per_rate() {
        let g = Some(1_000_000_000);
        let rows = vec![
            row(None, "1500", 1000, 10.0),
            row(None, "9000", 1000, 100.0),
            row(None, "1500", 2000, 10.0),
            row(None, "9000", 2000, 20.0),
            row(None, "1500", 4000, 10.0),
            row(None, "9000", 4000, 5.0),
            row(None, "1500", 8000, 10.0),
            row(None, "9000", 8000, 30.0),
            row(g, "1500", 11000, 100.0),
            row(g, "9000", 11000, 180.0),
        ];
        let r = ratios(&rows);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].link_rate_bps, r[0].median, r[0].at_11000), (None, 2.0, None));
        assert_eq!((r[1].link_rate_bps, r[1].median, r[1].at_11000), (g, 1.8, Some(1.8)));
        let res = RttResult {
            rows,
            offloads: OFFLOADS,
            shaping: SHAPING,
            ratio_9000_over_1500: vec![],
            ratios: r,
            gateway_counters: serde_json::Value::Null,
        };
        let plot = svg(&res);
        assert!(plot.starts_with("<svg") && plot.contains("MTU 9000, 1 Gb/s") && plot.contains("(log scale)"));
        let t = table(&res);
        assert!(t.contains("every hop at 1 Gb/s") && t.contains("unshaped veth") && t.contains("[1.80]"), "{t}");
    }
}
