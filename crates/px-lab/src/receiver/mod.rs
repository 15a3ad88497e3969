//! `px lab receiver` — paper Fig. 5c: what a receiver in a b-network gains.
//!
//! Topology: [`LineSpec::gateway_lab`] (legacy host, eMTU 1500 — middle
//! box — b-network host, iMTU 9000). The b-network host's receive
//! processing is confined to one CPU (the last): RPS steers its interface's
//! receive queue there and the receiving application is pinned there;
//! everything else (the legacy sender, the gateway or router, their
//! interfaces' receive queues) runs on CPU 0. See [`px_netns::cpu`] for what
//! that confines and what it does not (GRO itself runs on the sending CPU
//! of a veth).
//!
//! TCP: 100 iperf3 flows legacy → b-network host, once through a Linux
//! router (the receiver gets 1448-byte segments) and once through `px
//! gateway` (8948-byte segments), with the receiver's GRO off and on. LRO
//! does not exist on veth (`large-receive-offload: off [fixed]`), so the
//! paper's LRO bar has no counterpart here.
//!
//! UDP: `px caravan send` (4 flows of 1472-byte datagrams, unpaced) into
//! `px caravan recv` (the end-host library's receiver, which checks every
//! datagram), plain datagrams through the router vs caravans packed by the
//! gateway, the receiver's interface GRO on. `px caravan recv` reads with
//! `recvmmsg` and does not set the `UDP_GRO` socket option, so plain
//! datagrams reach it one by one: `ratio` compares the same receiver
//! code. The paper's baseline had `UDP_GRO` on, so a third run sends the
//! plain datagrams to [`udp_gro`]'s receiver (a socket with `UDP_GRO`,
//! counting only): `ratio_vs_udp_gro`.
//!
//! Reported per case: throughput, the receiver core's busy fraction (near 1:
//! the receiver is the limit) and the receiver's CPU seconds per GB received
//! (its iperf3's time from `/proc/PID/stat` plus its core's softirq and irq
//! time from `/proc/stat`: the figure that shows the benefit when the
//! sender, not the receiver, limits throughput on a 2-core machine).

pub mod udp_gro;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;

use px_netns::gateway::GatewayProcess;
use px_netns::line::{Addressing, Line, LineSpec};
use px_netns::netns::{LabChild, Netns, Offloads};

use crate::exp::iperf::Iperf;
use crate::exp::sink::{self, CpuSplit};
use px_netns::TempFile;
use px_netns::cpu::{self, CpuTimes, REST_CPU};

use crate::exp::{Conditions, ConditionsBuilder, Paper, Placement, Report, ratio};
use udp_gro::UdpGroSummary;

/// What the paper reports.
pub const PAPER_TCP: Paper = Paper {
    figure: "Fig. 5c",
    reports: "RX throughput of one core, 100 flows: 1.5–1.8× with the 9 KB iMTU (no offload, LRO, LRO+GRO)",
};
/// What the paper reports for UDP.
pub const PAPER_UDP: Paper =
    Paper { figure: "§5.2", reports: "PX-caravan with UDP_GRO: 2.4× the 1500-byte baseline's throughput" };

/// What to run: the flags of `px lab receiver`, whose defaults are
/// [`ReceiverOptions::new`]'s.
#[derive(Debug, Clone, clap::Args)]
pub struct ReceiverOptions {
    /// The `px` binary (`px gateway`, `px caravan send|recv`).
    #[arg(skip)]
    pub exe: PathBuf,
    /// Time per TCP run (four runs), e.g. 10s (1s..=600s; a bare number is
    /// seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", value_name = "DURATION", default_value = "10s", value_parser = px_units::secs_in(1, 600))]
    pub seconds: u64,
    /// TCP flows.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=128))]
    pub flows: u64,
    /// Time per UDP run (two runs), e.g. 5s; 0 skips UDP (0s..=600s; a bare
    /// number is seconds; old name --udp-seconds).
    #[arg(long = "udp-duration", alias = "udp-seconds", value_name = "DURATION", default_value = "5s", value_parser = px_units::secs_in(0, 600))]
    pub udp_seconds: u64,
    /// TCP congestion control of the hosts, set per socket (cubic is Linux's
    /// usual default; this machine's namespaces default to bbr, which does
    /// not back off on random loss and so hides the MSS effect of `wan`).
    #[arg(long, default_value = "cubic")]
    pub cc: String,
}

impl ReceiverOptions {
    /// The defaults of the command line: 10 s per run, 100 flows, 5 s UDP, cubic.
    pub fn new(exe: PathBuf) -> ReceiverOptions {
        ReceiverOptions { exe, ..crate::exp::flag_defaults() }
    }
}

/// One receiver configuration, router vs gateway.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Case {
    /// RX throughput via the router (1500-byte segments).
    pub router_gbps: f64,
    /// RX throughput via the gateway (9000-byte segments).
    pub gateway_gbps: f64,
    /// gateway / router.
    pub ratio: f64,
    /// Busy fraction of the receiver's core via the router.
    pub router_rx_core_busy: f64,
    /// Busy fraction of the receiver's core via the gateway.
    pub gateway_rx_core_busy: f64,
    /// CPU seconds of the receiver per GB received, via the router: its
    /// iperf3's CPU time plus its core's softirq and irq time.
    pub router_rx_core_s_per_gb: f64,
    /// Same via the gateway.
    pub gateway_rx_core_s_per_gb: f64,
    /// router / gateway CPU per GB (how much less the receiver works per byte).
    pub cpu_ratio: f64,
    /// Bytes per frame the receiver took in through the router and the
    /// gateway (how much the gateway merged: its per-packet saving).
    pub router_rx_frame_bytes: f64,
    pub gateway_rx_frame_bytes: f64,
}

/// TCP, GRO off and on.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TcpCases {
    /// Receiver GRO off.
    pub gro_off: Case,
    /// Receiver GRO on.
    pub gro_on: Case,
}

/// UDP: plain vs caravans.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UdpCase {
    /// Payload throughput of plain datagrams via the router.
    pub plain_gbps: f64,
    /// Payload throughput of caravans via the gateway.
    pub caravan_gbps: f64,
    /// caravan / plain.
    pub ratio: f64,
    /// Datagrams per CPU second of the receiving process, plain.
    pub plain_datagrams_per_cpu_s: f64,
    /// Same for caravans.
    pub caravan_datagrams_per_cpu_s: f64,
    /// caravan / plain datagrams per receiver CPU second: the receiver's
    /// gain whichever side limited the throughput.
    pub cpu_ratio: f64,
    /// Whether the receiver lost datagrams (received < 98 % of sent), i.e.
    /// limited the throughput, plain / caravan runs; where it did not, the
    /// sender side (sender + router or gateway on CPU 0) did, and only
    /// `cpu_ratio` speaks for the receiver.
    pub receiver_limited: [bool; 2],
    /// Datagrams the senders sent, plain / caravan runs.
    pub sent: [u64; 2],
    /// Datagrams received, plain / caravan runs.
    pub received: [u64; 2],
    /// Mean datagrams per caravan at the receiver.
    pub datagrams_per_caravan: f64,
    /// Payload throughput of plain datagrams via the router into a socket
    /// with `UDP_GRO` (px-lab's counting receiver, [`udp_gro`]).
    pub plain_udp_gro_gbps: f64,
    /// caravan / plain with `UDP_GRO`.
    pub ratio_vs_udp_gro: f64,
    /// The `UDP_GRO` receiver's own summary.
    pub plain_udp_gro: UdpGroSummary,
}

/// The result of `px lab receiver`.
#[derive(Debug, Clone, Serialize)]
pub struct ReceiverResult {
    /// TCP cases.
    pub tcp: TcpCases,
    /// The receiver's CPU per GB split into its per-packet and per-byte
    /// parts (px-lab's own receiver reading with a copy and with
    /// `MSG_TRUNC`, receiver GRO off), through the router and the gateway.
    pub tcp_split: CpuSplit,
    /// UDP, unless skipped.
    pub udp: Option<UdpCase>,
    /// TCP flows.
    pub flows: u64,
    /// Seconds per TCP run.
    pub seconds: u64,
    /// Seconds per UDP run.
    pub udp_seconds: u64,
    /// Congestion control, offloads, CPUs, machine.
    #[serde(flatten)]
    pub conditions: Conditions,
    /// What the paper reports.
    pub paper: [Paper; 2],
}

const OFFLOADS: &str = "legacy sender: tso/gso off (1500-byte frames on the wire); b-network receiver: gro off/on as \
                        stated, LRO does not exist on veth; middle box ports: gro on, tso off";

fn gb(gbps: f64, seconds: f64) -> f64 {
    gbps * seconds / 8.0
}

/// The gateway's configuration: the b-network host is caravan-capable on
/// port [`CARAVAN_PORT`].
fn caravan_config() -> Result<TempFile, String> {
    let text = format!(
        "[engine]\ncaravan_prefixes = [\"{}/32\"]\ncaravan_ports = [{CARAVAN_PORT}]\nicmp_source_v4 = \"{}\"\n",
        px_netns::line::RIGHT_V4,
        px_netns::line::ROUTER_LEFT_V4
    );
    TempFile::write("px-lab-receiver", "toml", &text)
}

/// The UDP port of the caravan-capable receiver.
pub const CARAVAN_PORT: u16 = 4433;

/// One TCP run's receiver-side figures.
#[derive(Debug, Clone, Default)]
struct TcpRun {
    gbps: f64,
    busy: f64,
    s_per_gb: f64,
    cc: (String, String),
    frame_bytes: f64,
}

fn tcp_run(line: &Line, addr: &str, port: u16, o: &ReceiverOptions) -> Result<TcpRun, String> {
    let rx = cpu::rx_cpu();
    let dev = line.spec.devs[3];
    let before = line.right_ns().dev_counters(dev).map_err(|e| e.to_string())?;
    let t0 = CpuTimes::now();
    let run = Iperf {
        server: line.right_ns(),
        client: line.left_ns(),
        addr,
        port,
        seconds: o.seconds,
        flows: o.flows,
        server_cpu: Some(rx),
        client_cpu: Some(REST_CPU),
        mss: None,
        cc: Some(&o.cc),
    }
    .run()?;
    let u = t0.since(rx);
    let frames = line.right_ns().dev_counters(dev).map_err(|e| e.to_string())?.since(&before);
    Ok(TcpRun {
        frame_bytes: ratio(frames.rx_bytes as f64, frames.rx_packets as f64),
        gbps: run.gbps,
        busy: u.busy(),
        s_per_gb: ratio(u.host_seconds(run.server_cpu_s), gb(run.gbps, o.seconds as f64)),
        cc: run.congestion,
    })
}

fn case(router: &TcpRun, gateway: &TcpRun) -> Case {
    Case {
        router_gbps: router.gbps,
        gateway_gbps: gateway.gbps,
        ratio: ratio(gateway.gbps, router.gbps),
        router_rx_core_busy: router.busy,
        gateway_rx_core_busy: gateway.busy,
        router_rx_core_s_per_gb: router.s_per_gb,
        gateway_rx_core_s_per_gb: gateway.s_per_gb,
        cpu_ratio: ratio(router.s_per_gb, gateway.s_per_gb),
        router_rx_frame_bytes: router.frame_bytes,
        gateway_rx_frame_bytes: gateway.frame_bytes,
    }
}

fn pinned_px(ns: &Netns, cpu: usize, exe: &str) -> std::process::Command {
    let mut c = ns.command("taskset");
    c.args(["-c", &cpu.to_string(), exe]);
    c
}

/// `px caravan send` on CPU 0 from the legacy host to `to` for the UDP
/// seconds; returns the datagrams sent.
fn udp_send(line: &Line, o: &ReceiverOptions, to: &str) -> Result<u64, String> {
    let mut tx = pinned_px(line.left_ns(), REST_CPU, &o.exe.to_string_lossy());
    tx.args(["caravan", "send", "--json", "--to", to, "--flows", "4", "--count", "0"])
        .args(["--duration", &o.udp_seconds.to_string(), "--size", "1472", "--rate", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = LabChild::spawn(&mut tx).and_then(LabChild::wait_with_output).map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("px caravan send: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let sent: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("px caravan send: {e}"))?;
    Ok(sent["datagrams"].as_u64().unwrap_or(0))
}

/// `px caravan recv` on the receiver's core; returns (sent, receiver summary).
fn udp_run(line: &Line, o: &ReceiverOptions, to: &str) -> Result<(u64, serde_json::Value), String> {
    let mut rx = pinned_px(line.right_ns(), cpu::rx_cpu(), &o.exe.to_string_lossy());
    rx.args(["caravan", "recv", "--json", "--port", &CARAVAN_PORT.to_string(), "--idle-ms", "1000"])
        .args(["--rcvbuf", "33554432", "--duration", &(o.udp_seconds + 5).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let rx = LabChild::spawn(&mut rx).map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(300));
    let sent = udp_send(line, o, to)?;
    let got = rx.wait_with_output().map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_slice(&got.stdout)
        .map_err(|e| format!("px caravan recv: {e}: {}", String::from_utf8_lossy(&got.stderr)))?;
    Ok((sent, v))
}

/// Plain datagrams into a `UDP_GRO` socket on the receiver's core.
fn udp_gro_run(line: &Line, o: &ReceiverOptions, to: &str) -> Result<UdpGroSummary, String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let limit = Duration::from_secs(o.udp_seconds + 5);
            udp_gro::receive(line.right_ns(), CARAVAN_PORT, cpu::rx_cpu(), limit, Duration::from_secs(1), move || {
                let _ = ready_tx.send(());
            })
        });
        if ready_rx.recv_timeout(Duration::from_secs(5)).is_err() {
            return rx.join().map_err(|_| "UDP_GRO receiver panicked".to_string())?.map(|_| UdpGroSummary::default());
        }
        let sent = udp_send(line, o, to);
        let got = rx.join().map_err(|_| "UDP_GRO receiver panicked".to_string())??;
        sent.map(|_| got)
    })
}

/// Runs the experiment; `say` gets a line of progress at each step.
pub fn run(o: &ReceiverOptions, say: &dyn Fn(&str)) -> Result<ReceiverResult, crate::RunError> {
    px_netns::install_signal_cleanup().map_err(|e| e.to_string())?;
    let mut conditions = ConditionsBuilder::start(&o.cc, OFFLOADS);
    say("px lab receiver: building legacy (1500) — middle box — bnet (9000) in fresh namespaces…");
    let line = Line::build(LineSpec::gateway_lab()).map_err(|e| e.to_string())?;
    let r_dev = line.spec.devs[3];
    let rx = cpu::confine_right_host(&line)?;
    let set_gro = |on: bool| line.right_ns().set_offloads(r_dev, Offloads { gro: Some(on), ..Offloads::default() });
    let mut runs: [[TcpRun; 2]; 2] = Default::default(); // [gro][router, gateway]
    let mut udp_runs: [Option<(u64, serde_json::Value)>; 2] = [None, None];
    let mut udp_gro_run_result = None;
    // px-lab's receiver, GRO off: [copy, discard] through the gateway,
    // then through the router at the gateway's throughput.
    let ends = sink::Ends {
        client: line.left_ns(),
        server: line.right_ns(),
        rx_dev: r_dev,
        rx_cpu: cpu::rx_cpu(),
        tx_cpu: REST_CPU,
    };

    // Gateway phase: TCP with GRO off and on, then UDP caravans.
    line.address(Addressing::Bump).map_err(|e| e.to_string())?;
    let cfg = caravan_config()?;
    let cfg_arg = cfg.0.to_string_lossy().into_owned();
    let gw = GatewayProcess::start(&line, &o.exe, &["--workers", "1", "--config", &cfg_arg])?;
    cpu::pin_process(gw.pid, REST_CPU)?;
    let bnet = Addressing::Bump.right_addr(false);
    for (g, on) in [false, true].into_iter().enumerate() {
        set_gro(on).map_err(|e| e.to_string())?;
        say(&format!("px lab receiver: {} TCP flows via px gateway, receiver GRO {}…", o.flows, onoff(on)));
        runs[g][1] = tcp_run(&line, bnet, 5201 + g as u16, o)?;
    }
    say("px lab receiver: px-lab's receiver via px gateway, reading with a copy and with MSG_TRUNC…");
    set_gro(false).map_err(|e| e.to_string())?;
    let split_gw = sink::path_runs(ends, bnet, 5221, o.flows as usize, o.seconds, None)?;
    if o.udp_seconds > 0 {
        say("px lab receiver: UDP via px gateway (caravans)…");
        udp_runs[1] = Some(udp_run(&line, o, &format!("{bnet}:{CARAVAN_PORT}"))?);
    }
    let exit = gw.stop()?;
    if !exit.status.success() {
        return Err(format!("px gateway exited with {}: {}", exit.status, exit.log).into());
    }

    // Router phase.
    line.address(Addressing::Router).map_err(|e| e.to_string())?;
    let bnet = Addressing::Router.right_addr(false);
    for (g, on) in [false, true].into_iter().enumerate() {
        set_gro(on).map_err(|e| e.to_string())?;
        say(&format!("px lab receiver: {} TCP flows via a Linux router, receiver GRO {}…", o.flows, onoff(on)));
        runs[g][0] = tcp_run(&line, bnet, 5211 + g as u16, o)?;
    }
    say("px lab receiver: px-lab's receiver via a Linux router at the gateway's throughput, a copy and MSG_TRUNC…");
    set_gro(false).map_err(|e| e.to_string())?;
    let pace = [split_gw[0].gbps, split_gw[1].gbps];
    let split_router = sink::path_runs(ends, bnet, 5231, o.flows as usize, o.seconds, Some(pace))?;
    if o.udp_seconds > 0 {
        say("px lab receiver: UDP via a Linux router (plain datagrams)…");
        udp_runs[0] = Some(udp_run(&line, o, &format!("{bnet}:{CARAVAN_PORT}"))?);
        say("px lab receiver: UDP via a Linux router (plain datagrams into a UDP_GRO socket)…");
        udp_gro_run_result = Some(udp_gro_run(&line, o, &format!("{bnet}:{CARAVAN_PORT}"))?);
    }
    drop(line);
    drop(cfg);

    let udp = match udp_runs {
        [Some((ps, p)), Some((cs, c))] => {
            let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
            Some(UdpCase {
                plain_gbps: f(&p, "gbit_per_s"),
                caravan_gbps: f(&c, "gbit_per_s"),
                ratio: ratio(f(&c, "gbit_per_s"), f(&p, "gbit_per_s")),
                plain_datagrams_per_cpu_s: f(&p, "datagrams_per_cpu_s"),
                caravan_datagrams_per_cpu_s: f(&c, "datagrams_per_cpu_s"),
                cpu_ratio: ratio(f(&c, "datagrams_per_cpu_s"), f(&p, "datagrams_per_cpu_s")),
                receiver_limited: [(&p, ps), (&c, cs)]
                    .map(|(v, sent)| (v["datagrams"].as_u64().unwrap_or(0) as f64) < 0.98 * sent as f64),
                sent: [ps, cs],
                received: [p["datagrams"].as_u64().unwrap_or(0), c["datagrams"].as_u64().unwrap_or(0)],
                datagrams_per_caravan: f(&c, "mean_datagrams_per_caravan"),
                plain_udp_gro_gbps: udp_gro_run_result.as_ref().map_or(0.0, |g| g.gbit_per_s),
                ratio_vs_udp_gro: ratio(f(&c, "gbit_per_s"), udp_gro_run_result.as_ref().map_or(0.0, |g| g.gbit_per_s)),
                plain_udp_gro: udp_gro_run_result.clone().unwrap_or_default(),
            })
        }
        _ => None,
    };
    Ok(ReceiverResult {
        tcp: TcpCases { gro_off: case(&runs[0][0], &runs[0][1]), gro_on: case(&runs[1][0], &runs[1][1]) },
        tcp_split: CpuSplit::of_paths(&split_router, &split_gw),
        udp,
        flows: o.flows,
        seconds: o.seconds,
        udp_seconds: o.udp_seconds,
        conditions: {
            conditions.saw(&runs[0][0].cc);
            conditions.finish(Placement::Confined {
                part: "receiver (RPS of its rx queue + the application)",
                cpu: rx,
                rest: "sender, middle box and their rx queues",
                gro_caveat: true,
            })
        },
        paper: [PAPER_TCP, PAPER_UDP],
    })
}

fn onoff(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

impl Report for ReceiverResult {
    fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "px lab receiver — {} ({})", PAPER_TCP.figure, PAPER_TCP.reports);
        s.push_str(&self.conditions.lines());
        let _ = writeln!(s, "{} TCP flows, {} s per run\n", self.flows, self.seconds);
        let _ = writeln!(
            s,
            "{:<22} {:>12} {:>12} {:>9} {:>10} {:>10} {:>9}  paper",
            "", "router Gbps", "gateway Gbps", "ratio", "rx busy r/g", "rx s/GB r", "s/GB g"
        );
        for (label, c) in [("TCP, receiver GRO off", &self.tcp.gro_off), ("TCP, receiver GRO on", &self.tcp.gro_on)] {
            let _ = writeln!(
                s,
                "{label:<22} {:>12.2} {:>12.2} {:>8.2}× {:>4.0}/{:<4.0}% {:>10.3} {:>9.3}  1.5–1.8×",
                c.router_gbps,
                c.gateway_gbps,
                c.ratio,
                100.0 * c.router_rx_core_busy,
                100.0 * c.gateway_rx_core_busy,
                c.router_rx_core_s_per_gb,
                c.gateway_rx_core_s_per_gb
            );
        }
        for (label, c) in [("GRO off", &self.tcp.gro_off), ("GRO on", &self.tcp.gro_on)] {
            let _ = writeln!(
                s,
                "receiver core CPU per GB, router / gateway ({label}): {:.2}× ({:.0} / {:.0} bytes per frame received)",
                c.cpu_ratio, c.router_rx_frame_bytes, c.gateway_rx_frame_bytes
            );
        }
        let _ =
            writeln!(s, "\nWhere the receiver's CPU goes ({} flows, receiver GRO off, px-lab's receiver):", self.flows);
        s.push_str(&self.tcp_split.lines());
        if let Some(u) = &self.udp {
            let _ = writeln!(
                s,
                "\nUDP ({} s, 1472-byte datagrams, receiver GRO on, px caravan recv sets no UDP_GRO)",
                self.udp_seconds
            );
            let _ = writeln!(s, "{:<22} {:>12} {:>12} {:>9}  paper", "", "plain Gbps", "caravan Gbps", "ratio");
            let _ = writeln!(
                s,
                "{:<22} {:>12.3} {:>12.3} {:>8.2}×  2.4×",
                "payload throughput", u.plain_gbps, u.caravan_gbps, u.ratio
            );
            let _ = writeln!(
                s,
                "{:<22} {:>12.3} {:>12.3} {:>8.2}×  2.4× (plain into a UDP_GRO socket, {:.1} datagrams per read)",
                "  ... vs UDP_GRO",
                u.plain_udp_gro_gbps,
                u.caravan_gbps,
                u.ratio_vs_udp_gro,
                ratio(u.plain_udp_gro.datagrams as f64, u.plain_udp_gro.reads as f64)
            );
            let _ = writeln!(
                s,
                "datagrams per receiver CPU second: plain {:.0}, caravan {:.0} ({:.2}×); received {}/{} and {}/{} \
                 sent (receiver the limit: {:?}); {:.1} datagrams per caravan",
                u.plain_datagrams_per_cpu_s,
                u.caravan_datagrams_per_cpu_s,
                u.cpu_ratio,
                u.received[0],
                u.sent[0],
                u.received[1],
                u.sent[1],
                u.receiver_limited,
                u.datagrams_per_caravan
            );
        }
        s
    }

    fn svg(&self) -> String {
        use px_sim::svg::{BarChart, stack};
        let mut cats = vec!["TCP GRO off".to_string(), "TCP GRO on".to_string()];
        let mut router = vec![self.tcp.gro_off.router_gbps, self.tcp.gro_on.router_gbps];
        let mut gateway = vec![self.tcp.gro_off.gateway_gbps, self.tcp.gro_on.gateway_gbps];
        let mut ours = vec![self.tcp.gro_off.ratio, self.tcp.gro_on.ratio];
        let mut paper = vec![1.5, 1.5];
        if let Some(u) = &self.udp {
            cats.push("UDP plain vs caravan".into());
            router.push(u.plain_gbps);
            gateway.push(u.caravan_gbps);
            ours.push(u.ratio);
            paper.push(2.4);
            cats.push("UDP plain (UDP_GRO) vs caravan".into());
            router.push(u.plain_udp_gro_gbps);
            gateway.push(u.caravan_gbps);
            ours.push(u.ratio_vs_udp_gro);
            paper.push(2.4);
        }
        let tput = BarChart {
            title: format!("Receiver on one core: RX throughput ({} TCP flows)", self.flows),
            y_label: "Gbit/s".into(),
            categories: cats.clone(),
            series: vec![("via router (1500)".into(), router), ("via px gateway (9000)".into(), gateway)],
            note: Some(self.conditions.note()),
        };
        let ratios = BarChart {
            title: "Gateway / router: ours vs the paper (Fig. 5c, §5.2)".into(),
            y_label: "ratio".into(),
            categories: cats,
            series: vec![("this lab".into(), ours), ("paper (TCP: 1.5–1.8, UDP: 2.4)".into(), paper)],
            note: Some("paper: 100 flows, one core, ConnectX-7; here: veth on a shared 2-core VM".into()),
        };
        stack(&[tput.to_svg(), ratios.to_svg()])
    }

    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
