//! `px lab gro` — paper Fig. 1b/1c: how much GRO buys a receiver, and how
//! fast that fades with concurrent flows, at MTU 1500 and 9000.
//!
//! Topology: two namespaces joined by one veth (sender, receiver). The
//! sender is wire-like (TSO/GSO off: MTU-sized frames, as a NIC puts them
//! on the wire) and pinned to CPU 0; the receiver's receive queue is
//! steered (RPS) to the last CPU and its iperf3 server pinned there (see
//! [`px_netns::cpu`], including the caveat that a veth runs GRO itself on the
//! sending CPU). For MTU 1500 and 9000, receiver GRO off and on, and 1, 2,
//! 4, 8 iperf3 flows: the aggregate throughput, the receiver core's busy
//! fraction and the drop from one flow to four.

use serde::Serialize;

use px_netns::netns::Offloads;
use px_netns::topology::Topology;

use crate::exp::iperf::Iperf;
use px_netns::cpu::{self, CpuTimes, REST_CPU};

use crate::exp::{Conditions, ConditionsBuilder, Paper, Placement, Report, ratio};

/// What the paper reports.
pub const PAPER: Paper = Paper {
    figure: "Fig. 1b/1c",
    reports: "G/LRO lift one 1500-byte flow to 50.1 Gbps; with 4 concurrent flows aggregate throughput drops 31 % at 1500, \
              7 % at 9000",
};

/// What to run: the flags of `px lab gro` (their defaults are [`Default`]'s).
#[derive(Debug, Clone, clap::Args)]
pub struct GroOptions {
    /// Time per run (16 runs by default), e.g. 5s (1s..=600s; a bare number
    /// is seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", value_name = "DURATION", default_value = "5s", value_parser = px_units::secs_in(1, 600))]
    pub seconds: u64,
    /// Concurrent flow counts, comma-separated (each 1..=128).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8", value_parser = clap::value_parser!(u64).range(1..=128))]
    pub flows: Vec<u64>,
    /// MTUs, comma-separated (each 1280..=65000).
    #[arg(long, value_delimiter = ',', default_value = "1500,9000", value_parser = clap::value_parser!(u32).range(1280..=65000))]
    pub mtus: Vec<u32>,
    /// TCP congestion control of the hosts, set per socket (see `px lab wan --help` on why cubic).
    #[arg(long, default_value = "cubic")]
    pub cc: String,
}

crate::exp::defaults_from_flags!(GroOptions);

/// One MTU and GRO setting over all flow counts.
#[derive(Debug, Clone, Serialize)]
pub struct GroSeries {
    /// Link MTU.
    pub mtu: u32,
    /// Receiver GRO.
    pub gro: bool,
    /// Aggregate throughput per flow count (Gbit/s), in the order of `flows`.
    pub gbps: Vec<f64>,
    /// Receiver core busy fraction per flow count.
    pub rx_core_busy: Vec<f64>,
    /// Receiver CPU seconds per GB per flow count (its iperf3's time plus
    /// its core's softirq and irq time).
    pub rx_core_s_per_gb: Vec<f64>,
    /// 1 − throughput(4 flows) / throughput(1 flow), if both were run.
    pub drop_at_4_flows: Option<f64>,
}

/// The result of `px lab gro`.
#[derive(Debug, Clone, Serialize)]
pub struct GroResult {
    /// Flow counts.
    pub flows: Vec<u64>,
    /// One series per MTU and GRO setting.
    pub series: Vec<GroSeries>,
    /// Seconds per run.
    pub seconds: u64,
    /// Congestion control, offloads, CPUs, machine.
    #[serde(flatten)]
    pub conditions: Conditions,
    /// What the paper reports.
    pub paper: Paper,
}

const OFFLOADS: &str =
    "sender: tso/gso off (MTU-sized frames); receiver: gro off/on as stated, LRO does not exist on veth";
const SND: &str = "px-gs0";
const RCV: &str = "px-gr0";

/// Runs the experiment; `say` gets a line of progress at each step.
pub fn run(o: &GroOptions, say: &dyn Fn(&str)) -> Result<GroResult, crate::RunError> {
    px_netns::install_signal_cleanup().map_err(|e| e.to_string())?;
    let mut conditions = ConditionsBuilder::start(&o.cc, OFFLOADS);
    let e = |e: px_netns::LabError| e.to_string();
    say("px lab gro: building sender — receiver in fresh namespaces…");
    let mut topo = Topology::new().map_err(e)?;
    let snd = topo.add_ns("gsnd").map_err(e)?;
    let rcv = topo.add_ns("grcv").map_err(e)?;
    topo.add_veth((snd, SND), (rcv, RCV), 1500).map_err(e)?;
    let (s, r) = (topo.ns(snd), topo.ns(rcv));
    s.set_offloads(SND, Offloads { tso: Some(false), gso: Some(false), gro: Some(false) }).map_err(e)?;
    r.set_offloads(RCV, Offloads { tso: Some(false), gso: Some(false), gro: None }).map_err(e)?;
    s.add_addr(SND, &format!("{}/24", px_netns::line::LEFT_V4)).map_err(e)?;
    r.add_addr(RCV, &format!("{}/24", px_netns::line::RIGHT_V4)).map_err(e)?;
    let rx = cpu::rx_cpu();
    cpu::steer_rx(r, RCV, rx)?;
    cpu::steer_rx(s, SND, REST_CPU)?;
    let mut series = Vec::new();
    let mut port = 5401;
    for &mtu in &o.mtus {
        s.set_mtu(SND, mtu).map_err(e)?;
        r.set_mtu(RCV, mtu).map_err(e)?;
        for gro in [false, true] {
            r.set_offloads(RCV, Offloads { gro: Some(gro), ..Offloads::default() }).map_err(e)?;
            let mut ser = GroSeries {
                mtu,
                gro,
                gbps: vec![],
                rx_core_busy: vec![],
                rx_core_s_per_gb: vec![],
                drop_at_4_flows: None,
            };
            for &n in &o.flows {
                say(&format!("px lab gro: MTU {mtu}, receiver GRO {}, {n} flow(s)…", if gro { "on" } else { "off" }));
                let t0 = CpuTimes::now();
                let run = Iperf {
                    server: r,
                    client: s,
                    addr: px_netns::line::RIGHT_V4,
                    port,
                    seconds: o.seconds,
                    flows: n,
                    server_cpu: Some(rx),
                    client_cpu: Some(REST_CPU),
                    mss: None,
                    cc: Some(&o.cc),
                }
                .run()?;
                port += 1;
                let u = t0.since(rx);
                ser.gbps.push(run.gbps);
                ser.rx_core_busy.push(u.busy());
                ser.rx_core_s_per_gb.push(ratio(u.host_seconds(run.server_cpu_s), run.gbps * o.seconds as f64 / 8.0));
                conditions.saw(&run.congestion);
            }
            let at = |k: u64| o.flows.iter().position(|&f| f == k).map(|i| ser.gbps[i]);
            ser.drop_at_4_flows = at(1).zip(at(4)).map(|(one, four)| 1.0 - ratio(four, one));
            series.push(ser);
        }
    }
    drop(topo);
    Ok(GroResult {
        flows: o.flows.clone(),
        series,
        seconds: o.seconds,
        conditions: conditions.finish(Placement::Confined {
            part: "receiver (RPS + iperf3 server)",
            cpu: rx,
            rest: "sender",
            gro_caveat: true,
        }),
        paper: PAPER,
    })
}

fn paper_drop(mtu: u32, gro: bool) -> &'static str {
    match (mtu, gro) {
        (1500, true) => "−31 %",
        (9000, true) => "−7 %",
        _ => "-",
    }
}

impl Report for GroResult {
    fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "px lab gro — {} ({})", PAPER.figure, PAPER.reports);
        s.push_str(&self.conditions.lines());
        let _ = writeln!(s, "{} s per run; aggregate Gbit/s (receiver core busy %)\n", self.seconds);
        let mut head = format!("{:<18}", "");
        for f in &self.flows {
            let _ = write!(head, " {:>14}", format!("{f} flow(s)"));
        }
        let _ = writeln!(s, "{head} {:>10}  paper", "drop at 4");
        for ser in &self.series {
            let mut row = format!("{:<18}", format!("MTU {} GRO {}", ser.mtu, if ser.gro { "on" } else { "off" }));
            for (g, b) in ser.gbps.iter().zip(&ser.rx_core_busy) {
                let _ = write!(row, " {:>14}", format!("{g:.2} ({:.0} %)", 100.0 * b));
            }
            let d = ser.drop_at_4_flows.map_or("-".into(), |d| format!("{:+.0} %", -100.0 * d));
            let _ = writeln!(s, "{row} {d:>10}  {}", paper_drop(ser.mtu, ser.gro));
        }
        s
    }

    fn svg(&self) -> String {
        use px_sim::svg::{BarChart, LineChart, Series, stack};
        let lines = LineChart {
            title: "Aggregate throughput vs concurrent flows (receiver on one core)".into(),
            x_label: "concurrent flows".into(),
            y_label: "Gbit/s".into(),
            series: self
                .series
                .iter()
                .map(|ser| Series {
                    name: format!("MTU {} GRO {}", ser.mtu, if ser.gro { "on" } else { "off" }),
                    points: self.flows.iter().map(|&f| f as f64).zip(ser.gbps.iter().copied()).collect(),
                })
                .collect(),
            note: Some(self.conditions.note()),
            ..LineChart::default()
        };
        let with_gro: Vec<&GroSeries> = self.series.iter().filter(|s| s.gro).collect();
        let drops = BarChart {
            title: "Throughput drop from 1 to 4 flows, GRO on: ours vs the paper (Fig. 1c)".into(),
            y_label: "drop (%)".into(),
            categories: with_gro.iter().map(|s| format!("MTU {}", s.mtu)).collect(),
            series: vec![
                ("this lab".into(), with_gro.iter().map(|s| 100.0 * s.drop_at_4_flows.unwrap_or(f64::NAN)).collect()),
                (
                    "paper".into(),
                    with_gro
                        .iter()
                        .map(|s| {
                            if s.mtu == 1500 {
                                31.0
                            } else if s.mtu == 9000 {
                                7.0
                            } else {
                                f64::NAN
                            }
                        })
                        .collect(),
                ),
            ],
            note: Some("paper: ConnectX-7 with LRO and GRO; here: veth, GRO only".into()),
        };
        stack(&[lines.to_svg(), drops.to_svg()])
    }

    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
