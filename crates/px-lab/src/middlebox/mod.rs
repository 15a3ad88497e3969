//! `px lab middlebox` — paper Fig. 1a: a middle box that works per packet
//! on headers only moves bytes in proportion to the MTU.
//!
//! The paper measures a 5G UPF on one core. Here the header-only function
//! is a Linux router with an nftables forward chain of `rules` rules (each
//! matches the destination address and then misses on the TCP port, so
//! every packet walks the whole chain — the per-packet classification a
//! UPF or firewall does) on one core: RPS steers both of the router's
//! receive queues to the last CPU, whose softirq does the forwarding and
//! the rule walk; the sender and the receiver (and their receive queues)
//! run on CPU 0. The router's ports have GRO off, so it sees every frame,
//! and the sender sends MTU-sized frames (TSO/GSO off). Bulk TCP (iperf3,
//! 4 flows) at MTU 1500, 3000, 6000, 9000 on both links: throughput, the
//! middle box core's busy fraction and packets per second.

use serde::Serialize;

use px_netns::line::{Addressing, Line, LineSpec};
use px_netns::netns::Offloads;

use crate::exp::iperf::Iperf;
use px_netns::TempFile;
use px_netns::cpu::{self, CpuTimes, REST_CPU};

use crate::exp::{Conditions, ConditionsBuilder, Paper, Placement, Report, ratio};

/// What the paper reports.
pub const PAPER: Paper = Paper {
    figure: "Fig. 1a",
    reports: "a 5G UPF on one core: throughput grows almost linearly with the MTU, 5.6× (208 Gbps) at 9 KB over 1500 B",
};

/// What to run: the flags of `px lab middlebox` (their defaults are
/// [`Default`]'s).
#[derive(Debug, Clone, clap::Args)]
pub struct MiddleboxOptions {
    /// Time per MTU, e.g. 10s (1s..=600s; a bare number is seconds; old
    /// name --seconds).
    #[arg(long = "duration", alias = "seconds", value_name = "DURATION", default_value = "10s", value_parser = px_units::secs_in(1, 600))]
    pub seconds: u64,
    /// MTUs of both links, comma-separated (each 1280..=65000).
    #[arg(long, value_delimiter = ',', default_value = "1500,3000,6000,9000", value_parser = clap::value_parser!(u32).range(1280..=65000))]
    pub mtus: Vec<u32>,
    /// nftables rules in the middle box's forward chain.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(0..=20000))]
    pub rules: u32,
    /// TCP flows.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=128))]
    pub flows: u64,
    /// TCP congestion control of the hosts, set per socket (see `px lab wan --help` on why cubic).
    #[arg(long, default_value = "cubic")]
    pub cc: String,
}

crate::exp::defaults_from_flags!(MiddleboxOptions);

/// One MTU.
#[derive(Debug, Clone, Serialize)]
pub struct MiddleboxPoint {
    /// Both links' MTU.
    pub mtu: u32,
    /// Throughput (Gbit/s).
    pub gbps: f64,
    /// Throughput relative to the first MTU.
    pub speedup: f64,
    /// Busy fraction of the middle box's core.
    pub middlebox_core_busy: f64,
    /// Data packets per second through the middle box (throughput / MTU).
    pub kpps: f64,
    /// Sender retransmits.
    pub retransmits: u64,
}

/// The result of `px lab middlebox`.
#[derive(Debug, Clone, Serialize)]
pub struct MiddleboxResult {
    /// One point per MTU.
    pub points: Vec<MiddleboxPoint>,
    /// Rules in the forward chain.
    pub rules: u32,
    /// TCP flows.
    pub flows: u64,
    /// Seconds per MTU.
    pub seconds: u64,
    /// Congestion control, offloads, CPUs, machine.
    #[serde(flatten)]
    pub conditions: Conditions,
    /// What the paper reports.
    pub paper: Paper,
}

const OFFLOADS: &str = "sender: tso/gso off (MTU-sized frames); receiver: gro on; middle box ports: gro off, tso off (it handles every frame)";

/// The nftables ruleset: `rules` rules that match the destination and
/// miss on the port, then accept.
fn ruleset(rules: u32) -> String {
    let mut s =
        String::from("table inet pxmb {\n  chain pxfwd {\n    type filter hook forward priority 0; policy accept;\n");
    for i in 0..rules {
        s.push_str(&format!(
            "    ip daddr {} tcp dport {} counter drop\n",
            px_netns::line::ROUTED_RIGHT_V4,
            20_000 + (i % 40_000)
        ));
    }
    s.push_str("  }\n}\n");
    s
}

/// Runs the experiment; `say` gets a line of progress at each step.
pub fn run(o: &MiddleboxOptions, say: &dyn Fn(&str)) -> Result<MiddleboxResult, crate::RunError> {
    px_netns::install_signal_cleanup().map_err(|e| e.to_string())?;
    let mut conditions = ConditionsBuilder::start(&o.cc, OFFLOADS);
    let e = |e: px_netns::LabError| e.to_string();
    say(&format!("px lab middlebox: building sender — router with {} nftables rules — receiver…", o.rules));
    let spec = LineSpec {
        roles: ["msnd", "mbox", "mrcv"],
        host_offloads: Offloads { tso: Some(false), gso: Some(false), gro: Some(false) },
        middle_offloads: Offloads { tso: Some(false), gso: None, gro: Some(false) },
        addressing: Some(Addressing::Router),
        ..LineSpec::gateway_lab()
    };
    let line = Line::build(spec).map_err(e)?;
    let [l_dev, ml_dev, mr_dev, r_dev] = line.spec.devs;
    line.right_ns().set_offloads(r_dev, Offloads { gro: Some(true), ..Offloads::default() }).map_err(e)?;
    let mb = cpu::rx_cpu();
    for d in [ml_dev, mr_dev] {
        cpu::steer_rx(line.middle_ns(), d, mb)?;
    }
    cpu::steer_rx(line.left_ns(), l_dev, REST_CPU)?;
    cpu::steer_rx(line.right_ns(), r_dev, REST_CPU)?;
    let rules = TempFile::write("px-lab-middlebox", "nft", &ruleset(o.rules))?;
    line.middle_ns().exec("nft", &["-f", &rules.0.to_string_lossy()]).map_err(e)?;
    let mut points: Vec<MiddleboxPoint> = Vec::new();
    for (i, &mtu) in o.mtus.iter().enumerate() {
        for (ns, d) in
            [(line.left_ns(), l_dev), (line.middle_ns(), ml_dev), (line.middle_ns(), mr_dev), (line.right_ns(), r_dev)]
        {
            ns.set_mtu(d, mtu).map_err(e)?;
        }
        say(&format!("px lab middlebox: MTU {mtu}, {} flows, {} s…", o.flows, o.seconds));
        let t0 = CpuTimes::now();
        let run = Iperf {
            server: line.right_ns(),
            client: line.left_ns(),
            addr: Addressing::Router.right_addr(false),
            port: 5501 + i as u16,
            seconds: o.seconds,
            flows: o.flows,
            server_cpu: Some(REST_CPU),
            client_cpu: Some(REST_CPU),
            mss: None,
            cc: Some(&o.cc),
        }
        .run()?;
        let u = t0.since(mb);
        conditions.saw(&run.congestion);
        let first = points.first().map_or(run.gbps, |p| p.gbps);
        points.push(MiddleboxPoint {
            mtu,
            gbps: run.gbps,
            speedup: ratio(run.gbps, first),
            middlebox_core_busy: u.busy(),
            kpps: run.gbps * 1e9 / 8.0 / f64::from(mtu) / 1e3,
            retransmits: run.retransmits,
        });
    }
    drop(line);
    Ok(MiddleboxResult {
        points,
        rules: o.rules,
        flows: o.flows,
        seconds: o.seconds,
        conditions: conditions.finish(Placement::Confined {
            part: "middle box (RPS of both its receive queues: forwarding + nftables in softirq)",
            cpu: mb,
            rest: "sender and receiver",
            gro_caveat: false,
        }),
        paper: PAPER,
    })
}

impl Report for MiddleboxResult {
    fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "px lab middlebox — {} ({})", PAPER.figure, PAPER.reports);
        s.push_str(&self.conditions.lines());
        let _ = writeln!(
            s,
            "middle box: Linux router + nftables forward chain of {} rules, one core; {} flows, {} s per MTU",
            self.rules, self.flows, self.seconds
        );
        s.push('\n');
        let _ = writeln!(
            s,
            "{:>6} {:>9} {:>9} {:>10} {:>10} {:>8}  paper",
            "MTU", "Gbit/s", "× first", "kpps", "mb busy", "retrans"
        );
        for p in &self.points {
            let paper = match p.mtu {
                1500 => "1×",
                9000 => "5.6×",
                _ => "",
            };
            let _ = writeln!(
                s,
                "{:>6} {:>9.2} {:>8.2}× {:>10.0} {:>9.0} % {:>8}  {paper}",
                p.mtu,
                p.gbps,
                p.speedup,
                p.kpps,
                100.0 * p.middlebox_core_busy,
                p.retransmits
            );
        }
        s
    }

    fn svg(&self) -> String {
        use px_sim::svg::{LineChart, Series, stack};
        let pts = |f: &dyn Fn(&MiddleboxPoint) -> f64| self.points.iter().map(|p| (f64::from(p.mtu), f(p))).collect();
        let tput = LineChart {
            title: format!("Header-only middle box on one core ({} nftables rules)", self.rules),
            x_label: "MTU (bytes)".into(),
            y_label: "Gbit/s".into(),
            series: vec![Series { name: "this lab".into(), points: pts(&|p| p.gbps) }],
            note: Some(self.conditions.note()),
            ..LineChart::default()
        };
        let rel = LineChart {
            title: "Throughput relative to MTU 1500: ours vs the paper (Fig. 1a, 5G UPF)".into(),
            x_label: "MTU (bytes)".into(),
            y_label: "× MTU 1500".into(),
            series: vec![
                Series { name: "this lab".into(), points: pts(&|p| p.speedup) },
                Series { name: "paper (UPF)".into(), points: vec![(1500.0, 1.0), (9000.0, 5.6)] },
            ],
            note: Some("paper: DPDK UPF, ConnectX-7; here: Linux forwarding + nftables on veth".into()),
            ..LineChart::default()
        };
        // The paper gives two values (1500 and 9000): points, not a line that
        // would suggest measurements in between.
        stack(&[tput.to_svg(), rel.to_svg_with(&["paper (UPF)"])])
    }

    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ruleset_has_the_rules_and_only_documentation_addresses() {
        let r = ruleset(3);
        assert_eq!(r.matches("counter drop").count(), 3);
        assert!(r.contains("policy accept"));
        assert!(r.lines().filter(|l| l.contains("daddr")).all(|l| l.contains("203.0.113.")));
    }
}
