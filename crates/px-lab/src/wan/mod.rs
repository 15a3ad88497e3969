//! `px lab wan` — paper §5.2 "sender in a b-network" and Fig. 1d: one TCP
//! flow from a b-network host to a legacy host over a WAN path.
//!
//! Topology: [`LineSpec::gateway_lab`] with the project's own delay/loss
//! element ([`px_netns::Impairment`], in a namespace of its own on the legacy
//! link: this kernel has no `netem`) adding `delay` each way (RTT 2 ×
//! delay) and dropping each frame with probability `loss`, both
//! directions. Three runs of one iperf3 flow, b-network host → legacy host:
//! through a Linux router (the sender's MSS is 1448, the legacy host's),
//! through `px gateway` (the sender uses 8948; the gateway splits to
//! 1448), and through the router with 9000 on every link (the upper
//! bound, 9000 end to end). The congestion control is set on the sockets
//! (iperf3 `-C`) and reported as iperf3 saw it on both hosts.
//!
//! Why the gateway helps (the paper's argument): in congestion avoidance
//! the window grows by one MSS per RTT and shrinks by a fraction per loss,
//! so with the same loss rate a sender with a 6× larger MSS reaches a
//! larger window; the gateway splitting the segments on the way does not
//! undo that as long as the path has the bandwidth.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use px_netns::gateway::GatewayProcess;
use px_netns::impair::ImpairSpec;
use px_netns::line::{Addressing, IMTU, LEFT_V4, Line, LineImpairment, LineSpec};

use crate::exp::iperf::{Iperf, IperfRun};

use crate::exp::{Conditions, ConditionsBuilder, Paper, Placement, Report, ratio};

/// What the paper reports.
pub const PAPER: Paper = Paper {
    figure: "§5.2, Fig. 1d",
    reports: "one flow, 60 s, 10 ms delay, 0.01 % loss: 2.5× through the gateway (9 KB iMTU), 5.4× with 9 KB end to end",
};

/// What to run.
#[derive(Debug, Clone)]
pub struct WanOptions {
    /// The `px` binary.
    pub exe: PathBuf,
    /// Seconds per run (three runs).
    pub seconds: u64,
    /// One-way delay, each direction.
    pub delay_ms: u64,
    /// Frame loss probability, each direction (0.0001 = 0.01 %).
    pub loss: f64,
    /// Congestion control of the sender (`iperf3 -C`).
    pub cc: String,
}

impl WanOptions {
    /// The paper's setting: 60 s, 10 ms, 0.01 %, cubic.
    pub fn new(exe: PathBuf) -> WanOptions {
        WanOptions { exe, seconds: 60, delay_ms: 10, loss: 0.0001, cc: "cubic".into() }
    }
}

/// One run's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WanRun {
    /// Throughput (Mbit/s).
    pub mbps: f64,
    /// Sender retransmits.
    pub retransmits: u64,
    /// The sender's MSS.
    pub sender_mss: Option<u32>,
}

impl From<&IperfRun> for WanRun {
    fn from(r: &IperfRun) -> WanRun {
        WanRun { mbps: r.gbps * 1000.0, retransmits: r.retransmits, sender_mss: r.sender_mss }
    }
}

/// The result of `px lab wan`.
#[derive(Debug, Clone, Serialize)]
pub struct WanResult {
    /// Through the router, MTU 1500 on the legacy side.
    pub router_mbps: f64,
    /// Through px gateway (sender MSS 8948).
    pub gateway_mbps: f64,
    /// 9000 end to end.
    pub jumbo_mbps: f64,
    /// gateway / router.
    pub ratio: f64,
    /// jumbo / router.
    pub jumbo_ratio: f64,
    /// Seconds per run.
    pub seconds: u64,
    /// Loss probability per frame, each direction.
    pub loss: f64,
    /// One-way delay, each direction.
    pub delay_ms: u64,
    /// The three runs: router, gateway, jumbo.
    pub runs: [WanRun; 3],
    /// Congestion control, offloads, CPUs, machine.
    #[serde(flatten)]
    pub conditions: Conditions,
    /// What the paper reports.
    pub paper: Paper,
}

const OFFLOADS: &str = "hosts: tso/gso/gro off (wire-sized frames, so each loss draw removes one frame); delay/loss \
                        element ports: all off; middle box ports: gro on, tso off";

fn spec(o: &WanOptions, mtus: [u32; 2]) -> LineSpec {
    let imp = ImpairSpec {
        loss: o.loss,
        delay: Duration::from_millis(o.delay_ms),
        queue_frames: 16_384,
        seed: 0x3a11_0d1d,
        ..ImpairSpec::default()
    };
    LineSpec { mtus, impairment: Some(LineImpairment::LeftLink(imp)), ..LineSpec::gateway_lab() }
}

fn flow(line: &Line, o: &WanOptions, to: &str, port: u16) -> Result<IperfRun, String> {
    Iperf {
        server: line.left_ns(),
        client: line.right_ns(),
        addr: to,
        port,
        seconds: o.seconds,
        flows: 1,
        server_cpu: None,
        client_cpu: None,
        mss: None,
        cc: Some(&o.cc),
    }
    .run()
}

/// Runs the experiment; `say` gets a line of progress at each step.
pub fn run(o: &WanOptions, say: &dyn Fn(&str)) -> Result<WanResult, crate::RunError> {
    px_netns::install_signal_cleanup().map_err(|e| e.to_string())?;
    let mut conditions = ConditionsBuilder::start(&o.cc, OFFLOADS);
    let path = format!("{} ms each way, {} % loss", o.delay_ms, o.loss * 100.0);
    say(&format!("px lab wan: building bnet (9000) — middle box — [{path}] — legacy (1500)…"));
    let line = Line::build(spec(o, px_netns::line::LineSpec::gateway_lab().mtus)).map_err(|e| e.to_string())?;
    line.address(Addressing::Bump).map_err(|e| e.to_string())?;
    let gw = GatewayProcess::start(&line, &o.exe, &["--workers", "1"])?;
    say(&format!("px lab wan: one flow through px gateway, {} s…", o.seconds));
    let gateway = flow(&line, o, LEFT_V4, 5301)?;
    let exit = gw.stop()?;
    if !exit.status.success() {
        return Err(format!("px gateway exited with {}: {}", exit.status, exit.log).into());
    }
    line.address(Addressing::Router).map_err(|e| e.to_string())?;
    say(&format!("px lab wan: one flow through a Linux router, {} s…", o.seconds));
    let router = flow(&line, o, LEFT_V4, 5302)?;
    drop(line);
    say(&format!("px lab wan: 9000 end to end (router), {} s…", o.seconds));
    let jumbo_line = Line::build(LineSpec { addressing: Some(Addressing::Router), ..spec(o, [IMTU, IMTU]) })
        .map_err(|e| e.to_string())?;
    let jumbo = flow(&jumbo_line, o, LEFT_V4, 5303)?;
    drop(jumbo_line);
    let mbps = |r: &IperfRun| r.gbps * 1000.0;
    Ok(WanResult {
        router_mbps: mbps(&router),
        gateway_mbps: mbps(&gateway),
        jumbo_mbps: mbps(&jumbo),
        ratio: ratio(gateway.gbps, router.gbps),
        jumbo_ratio: ratio(jumbo.gbps, router.gbps),
        seconds: o.seconds,
        loss: o.loss,
        delay_ms: o.delay_ms,
        runs: [(&router).into(), (&gateway).into(), (&jumbo).into()],
        conditions: {
            conditions.saw(&router.congestion);
            conditions
                .finish(Placement::Free("one flow, limited by the path (sender b-network host, receiver legacy host)"))
        },
        paper: PAPER,
    })
}

impl Report for WanResult {
    fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "px lab wan — {} ({})", PAPER.figure, PAPER.reports);
        s.push_str(&self.conditions.lines());
        let _ = writeln!(
            s,
            "path: {} ms each way (RTT {} ms), {} % frame loss each way, own delay/loss element (no netem); {} s per run",
            self.delay_ms,
            2 * self.delay_ms,
            self.loss * 100.0,
            self.seconds
        );
        s.push('\n');
        let _ = writeln!(s, "{:<34} {:>10} {:>8} {:>8} {:>9}  paper", "", "Mbit/s", "MSS", "retrans", "× router");
        let paper = ["1×", "2.5×", "5.4×"];
        let labels = ["via Linux router (1500)", "via px gateway (bnet 9000)", "9000 end to end (router)"];
        for ((l, r), p) in labels.iter().zip(&self.runs).zip(paper) {
            let _ = writeln!(
                s,
                "{l:<34} {:>10.1} {:>8} {:>8} {:>8.2}×  {p}",
                r.mbps,
                r.sender_mss.map_or("-".into(), |m| m.to_string()),
                r.retransmits,
                ratio(r.mbps, self.router_mbps)
            );
        }
        s
    }

    fn svg(&self) -> String {
        use px_sim::svg::{BarChart, stack};
        let cats: Vec<String> =
            ["router (1500)", "px gateway (9000 inside)", "9000 end to end"].iter().map(|c| c.to_string()).collect();
        let tput = BarChart {
            title: format!(
                "One flow over {} ms each way, {} % loss ({} s)",
                self.delay_ms,
                self.loss * 100.0,
                self.seconds
            ),
            y_label: "Mbit/s".into(),
            categories: cats.clone(),
            series: vec![("this lab".into(), self.runs.iter().map(|r| r.mbps).collect())],
            note: Some(self.conditions.note()),
        };
        let ratios = BarChart {
            title: "Throughput relative to the router: ours vs the paper (§5.2, Fig. 1d)".into(),
            y_label: "× router".into(),
            categories: cats,
            series: vec![
                ("this lab".into(), vec![1.0, self.ratio, self.jumbo_ratio]),
                ("paper".into(), vec![1.0, 2.5, 5.4]),
            ],
            note: Some("paper: netem on a Linux software router, iPerf one flow for a minute".into()),
        };
        stack(&[tput.to_svg(), ratios.to_svg()])
    }

    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
