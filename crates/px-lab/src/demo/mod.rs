//! The experiment of `px lab demo|up|down`: the namespace lab in which
//! 1500-byte traffic becomes 9000-byte traffic and back, measured against a
//! plain Linux router on the same hosts, links and MTUs in the same run.
//!
//! Topology: [`LineSpec::gateway_lab`], `legacy` (eMTU 1500) — `gw` (two
//! ports) — `bnet` (iMTU 9000), wire-like hosts (see there), so the frame
//! observers in the hosts' namespaces count what crosses each link. Each
//! round runs bulk TCP (iperf3) both ways through `px gateway`, then both
//! ways through a Linux router on the same links; throughput is the mean of
//! the rounds, measured with no observer on the path (an observer's packet
//! tap costs the hosts' CPU a copy of every frame and halved what was
//! measured). Two passes follow the rounds:
//! - the *observed* pass counts frame sizes with the observers on (and
//!   reports the throughput it got, so the observers' cost is shown once);
//! - the *CPU* pass confines the b-network host to one CPU (the last: RPS
//!   steers its interface's receive queue there and its iperf3 is pinned
//!   there; everything else, the legacy host, the gateway or router and
//!   their receive queues, runs on CPU 0) and accounts the b-network
//!   host's CPU per GB as that CPU's busy time (`/proc/stat`: its process
//!   time and the softirq work of its receive queue) divided by the bytes
//!   moved. Other load on the machine on that CPU is counted too.
//!
//! The CLI parses the arguments and prints [`DemoResult`].

mod table;
mod up;

use std::path::PathBuf;

use serde::Serialize;

use crate::exp::iperf::Iperf;
use crate::exp::sink::{self, CpuSplit};
use px_netns::gateway::GatewayProcess;
use px_netns::line::{Addressing, LEFT_V4, Line, LineSpec};
use px_netns::observe::{FrameObserver, FrameSizes};
use px_netns::topology::NsId;

pub use px_netns::line::{EMTU, IMTU};
pub use up::{UP_METRICS, UpReport, check_name, default_name, down, labs_up, state_file, up};

/// The legacy host's address.
pub const LEGACY_ADDR: &str = LEFT_V4;
/// The b-network host's address on the gateway's shared subnet.
pub const BNET_ADDR_GW: &str = px_netns::line::RIGHT_V4;
/// What the result says about offloads.
pub const OFFLOADS_NOTE: &str = "hosts: tso/gso/gro off (observers see wire frames); middle box ports: gro on, tso off";

/// What to run.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The `px` binary (run as `px gateway` in the gateway namespace).
    pub exe: PathBuf,
    /// Seconds of bulk TCP per direction and per middle box.
    pub seconds: u64,
    /// Rounds, each running the gateway and then the router.
    pub rounds: u64,
    /// Parallel TCP flows per direction.
    pub flows: u64,
    /// Gateway worker threads.
    pub workers: u64,
    /// Extra arguments for `px gateway`.
    pub gateway_args: Vec<String>,
    /// Run the gateway with the kernel fast path (`--fast-path on`).
    pub fast_path: bool,
}

/// What was measured in one direction.
#[derive(Debug, Clone, Serialize)]
pub struct Direction {
    /// Mean throughput through the gateway.
    pub gateway_gbps: f64,
    /// Mean throughput through the router.
    pub router_gbps: f64,
    /// Gateway / router.
    pub ratio: f64,
    /// Gateway's conversion yield over the whole run (its own counter).
    pub r#yield: Option<f64>,
    /// Largest IP packet the independent observers saw on the inner and the
    /// outer link through the gateway (observed pass).
    pub max_frame_inner: usize,
    /// See `max_frame_inner`.
    pub max_frame_outer: usize,
    /// MSS of the b-network host's socket (`ss -ti`): send and receive.
    pub mss_seen: Option<u32>,
    /// See `mss_seen`.
    pub rcvmss_seen: Option<u32>,
    /// MSS of the legacy host's socket.
    pub legacy_mss: Option<u32>,
    /// Same through the router, for comparison.
    pub router_max_frame_inner: usize,
    /// See `router_max_frame_inner`.
    pub router_mss_seen: Option<u32>,
    /// Throughput through the gateway in the observed pass (frame
    /// observers on both links): the observers' cost is the difference.
    pub gateway_gbps_observed: f64,
    /// Same through the router.
    pub router_gbps_observed: f64,
    /// CPU seconds the b-network host spent per GB moved via the gateway
    /// (the CPU pass; see `DemoResult::bnet_cpu_accounting`).
    pub bnet_cpu_s_per_gb_gateway: f64,
    /// Same via the router.
    pub bnet_cpu_s_per_gb_router: f64,
    /// gateway / router of the two.
    pub bnet_cpu_ratio: f64,
    /// Throughput of the CPU pass via the gateway and via the router.
    pub cpu_pass_gbps: [f64; 2],
    /// Sender retransmits through the gateway, all rounds.
    pub gateway_retransmits: u64,
    /// Sender retransmits through the router, all rounds.
    pub router_retransmits: u64,
    /// Gateway / router ratio of each round (the spread behind `ratio`).
    pub round_ratios: Vec<f64>,
}

/// The demo's result (the CLI prints it as a table or JSON).
#[derive(Debug, Clone, Serialize)]
pub struct DemoResult {
    /// legacy → bnet.
    pub inbound: Direction,
    /// bnet → legacy.
    pub outbound: Direction,
    /// CPU the gateway process used, in cores (over its whole run).
    pub gateway_cpu_cores: f64,
    /// The gateway's early flushes over all rounds (holds sent before they
    /// were full), in the order of `px_gateway::FlushReason::ALL`: what
    /// keeps `yield` below 1.
    pub gateway_flushes: Vec<u64>,
    /// Offload settings, as text.
    pub offloads: &'static str,
    /// The gateway ran with the kernel fast path.
    pub fast_path: bool,
    /// Of the TCP payload through the gateway (both directions, all
    /// rounds, as iperf3 counted it), the share the kernel fast path
    /// carried.
    pub kernel_share: f64,
    /// Seconds of each iperf3 run.
    pub seconds_per_run: u64,
    /// Rounds.
    pub rounds: u64,
    /// Flows per direction.
    pub flows: u64,
    /// How `bnet_cpu_s_per_gb_*` are accounted.
    pub bnet_cpu_accounting: String,
    /// The b-network host's CPU per GB inbound, split into its per-packet
    /// and per-byte parts: px-lab's receiver reading with a copy and with
    /// `MSG_TRUNC`, through the router and through the gateway.
    pub bnet_cpu_split: CpuSplit,
}

/// How the CPU pass accounts the b-network host's CPU.
pub const BNET_CPU_ACCOUNTING: &str = "the b-network host confined to the last CPU (RPS steers its receive queue there, \
     its iperf3 is pinned there; everything else runs on CPU 0): its iperf3's CPU time (/proc/PID/stat as server, \
     iperf3's own getrusage as client) plus that CPU's softirq + irq time (/proc/stat), per GB moved; other softirq \
     work on that CPU would count too";

/// The demo's topology, not addressed yet (each round addresses it for the
/// gateway, then for the router).
pub fn build() -> Result<Line, crate::RunError> {
    px_netns::install_signal_cleanup().map_err(px_netns::LabError::Signal)?;
    Ok(Line::build(LineSpec::gateway_lab())?)
}

/// Gateway statistics of one round.
struct GatewayOutcome {
    yield_: Option<f64>,
    /// TCP payload bytes the kernel fast path carried.
    kernel_bytes: u64,
    cpu_cores: f64,
    /// `counters.flush` of its final stats, in the engine's reason order.
    flushes: Vec<u64>,
}

fn stop_gateway(g: GatewayProcess) -> Result<GatewayOutcome, String> {
    let exit = g.stop()?;
    if !exit.status.success() {
        return Err(format!("px gateway exited with {}; its log:\n{}", exit.status, exit.log));
    }
    Ok(GatewayOutcome {
        yield_: exit.stats["yield"].as_f64(),
        kernel_bytes: exit.stats["counters"]["fast_path"]["kernel_bytes"].as_u64().unwrap_or(0),
        cpu_cores: exit.cpu_cores,
        flushes: exit.flush_counts(),
    })
}

/// One round: both directions through the gateway, then through the router.
struct Round {
    gin: Run,
    gout: Run,
    gstats: GatewayOutcome,
    rin: Run,
    rout: Run,
}

/// One iperf3 run and what the observers and `ss` saw.
struct Run {
    gbps: f64,
    retransmits: u64,
    legacy_link: FrameSizes,
    bnet_link: FrameSizes,
    sender_mss: Option<u32>,
    bnet_mss: Option<(u32, u32)>,
}

fn lab_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One iperf3 run ([`Iperf`]); with `observe`, frame observers count what
/// crosses both links (and cost the hosts a copy of every frame).
#[allow(clippy::too_many_arguments)]
fn iperf(
    lab: &Line,
    from: NsId,
    to: NsId,
    to_addr: &str,
    port: u16,
    seconds: u64,
    flows: u64,
    observe: bool,
) -> Result<Run, String> {
    let bnet = lab.right_ns();
    let [legacy_dev, _, _, bnet_dev] = lab.spec.devs;
    let run = Iperf {
        server: lab.topo.ns(to),
        client: lab.topo.ns(from),
        addr: to_addr,
        port,
        seconds,
        flows,
        server_cpu: None,
        client_cpu: None,
        mss: None,
        cc: None,
    };
    let observers = || -> Result<_, String> {
        if !observe {
            return Ok(None);
        }
        let legacy = FrameObserver::start(lab.left_ns(), legacy_dev).map_err(lab_err)?;
        Ok(Some((legacy, FrameObserver::start(bnet, bnet_dev).map_err(lab_err)?)))
    };
    let ss = || bnet.exec("ss", &["-tinH", "state", "established"]).unwrap_or_default();
    let (r, observers, ss) = run.run_with(observers, ss)?;
    let (legacy_link, bnet_link) = observers.map(|(l, b)| (l.stop(), b.stop())).unwrap_or_default();
    let bnet_mss = parse_ss_mss(&ss, &port.to_string());
    Ok(Run { gbps: r.gbps, retransmits: r.retransmits, legacy_link, bnet_link, sender_mss: r.sender_mss, bnet_mss })
}

/// `mss:` and `rcvmss:` of the data connection on `port` in `ss -tinH`
/// output: the one with the largest sum, to skip iperf3's control connection
/// (which carries no bulk data, so its rcvmss stays at 536).
fn parse_ss_mss(ss: &str, port: &str) -> Option<(u32, u32)> {
    let mut best: Option<(u32, u32)> = None;
    let mut lines = ss.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.contains(&format!(":{port}")) {
            continue;
        }
        let info = if line.contains("mss:") { line } else { lines.peek().copied().unwrap_or("") };
        let field =
            |name: &str| info.split_whitespace().find_map(|w| w.strip_prefix(name)).and_then(|v| v.parse::<u32>().ok());
        if let (Some(m), Some(r)) = (field("mss:"), field("rcvmss:"))
            && best.is_none_or(|(bm, br)| m + r > bm + br)
        {
            best = Some((m, r));
        }
    }
    best
}

/// Checks that the demo can run here: root, namespaces, and the tools.
pub fn check_prerequisites(what: &str) -> Result<(), crate::RunError> {
    crate::exp::require(what, &["iperf3", "ss", "ip"], 1, "./scripts/demo installs it as root")
}

/// Runs the demo; `say` gets a line of progress at each step.
pub fn run(o: &DemoOptions, say: &dyn Fn(&str)) -> Result<DemoResult, crate::RunError> {
    say("px lab demo: building legacy (1500) — gw — bnet (9000) in fresh namespaces…");
    let lab = build()?;
    let secs = o.seconds;
    let mut gw_args = vec!["--workers".to_string(), o.workers.to_string()];
    if o.fast_path {
        gw_args.extend(["--fast-path".to_string(), "on".to_string()]);
    }
    gw_args.extend(o.gateway_args.iter().cloned());
    let mut rounds = Vec::new();
    for r in 0..o.rounds {
        let port = 5201 + 10 * r as u16;
        let what = format!("round {}/{}", r + 1, o.rounds);
        rounds.push(round(&lab, o, &gw_args, port, &what, false, say)?);
    }
    let port = 5201 + 10 * o.rounds as u16;
    let observed = round(&lab, o, &gw_args, port, "observed pass (frame sizes)", true, say)?;
    say(&format!("px lab demo: CPU pass: b-network host confined to one CPU, {secs} s per direction and middle box…"));
    let cpu = cpu_pass(&lab, o, &gw_args, port + 10)?;
    drop(lab);
    Ok(summarize(&rounds, &observed, &cpu, o))
}

/// Both directions through the gateway, then through the router.
fn round(
    lab: &Line,
    o: &DemoOptions,
    gw_args: &[String],
    port: u16,
    what: &str,
    observe: bool,
    say: &dyn Fn(&str),
) -> Result<Round, String> {
    let (legacy, bnet, secs) = (lab.left, lab.right, o.seconds);
    lab.address(Addressing::Bump).map_err(lab_err)?;
    say(&format!("px lab demo: {what}: through px gateway, {secs} s per direction…"));
    let gw = GatewayProcess::start(lab, &o.exe, gw_args)?;
    let bnet_addr = Addressing::Bump.right_addr(false);
    let gin = iperf(lab, legacy, bnet, bnet_addr, port, secs, o.flows, observe)?;
    let gout = iperf(lab, bnet, legacy, LEGACY_ADDR, port + 1, secs, o.flows, observe)?;
    let gstats = stop_gateway(gw)?;
    lab.address(Addressing::Router).map_err(lab_err)?;
    say(&format!("px lab demo: {what}: through a plain Linux router, {secs} s per direction…"));
    let bnet_addr = Addressing::Router.right_addr(false);
    let rin = iperf(lab, legacy, bnet, bnet_addr, port + 2, secs, o.flows, observe)?;
    let rout = iperf(lab, bnet, legacy, LEGACY_ADDR, port + 3, secs, o.flows, observe)?;
    Ok(Round { gin, gout, gstats, rin, rout })
}

/// The CPU pass: `[inbound, outbound]` × `[gateway, router]` of
/// (Gbit/s, b-network host CPU seconds per GB), and the inbound split of
/// the b-network host's CPU.
struct CpuPass {
    iperf: [[(f64, f64); 2]; 2],
    split: CpuSplit,
}

fn cpu_pass(lab: &Line, o: &DemoOptions, gw_args: &[String], port: u16) -> Result<CpuPass, String> {
    use px_netns::cpu::{self, CpuTimes, REST_CPU};
    let bcpu = cpu::confine_right_host(lab)?;
    let one = |inbound: bool, addr: &str, port: u16| -> Result<(f64, f64), String> {
        let (legacy, bnet) = (lab.left_ns(), lab.right_ns());
        let (server, client, server_cpu, client_cpu, to) =
            if inbound { (bnet, legacy, bcpu, REST_CPU, addr) } else { (legacy, bnet, REST_CPU, bcpu, LEGACY_ADDR) };
        let t0 = CpuTimes::now();
        let run = Iperf {
            server,
            client,
            addr: to,
            port,
            seconds: o.seconds,
            flows: o.flows,
            server_cpu: Some(server_cpu),
            client_cpu: Some(client_cpu),
            mss: None,
            cc: None,
        }
        .run()?;
        let bnet_process_s = if inbound { run.server_cpu_s } else { run.client_cpu_s };
        let host_s = t0.since(bcpu).host_seconds(bnet_process_s);
        Ok((run.gbps, crate::exp::ratio(host_s, run.gbps * o.seconds as f64 / 8.0)))
    };
    // px-lab's receiver, inbound: [copy, discard] through the gateway,
    // then through the router at the gateway's throughput.
    let ends = sink::Ends {
        client: lab.left_ns(),
        server: lab.right_ns(),
        rx_dev: lab.spec.devs[3],
        rx_cpu: bcpu,
        tx_cpu: REST_CPU,
    };
    let mut out = [[(0.0, 0.0); 2]; 2];
    lab.address(Addressing::Bump).map_err(lab_err)?;
    let gw = GatewayProcess::start(lab, &o.exe, gw_args)?;
    cpu::pin_process(gw.pid, REST_CPU)?;
    let bnet_addr = Addressing::Bump.right_addr(false);
    out[0][0] = one(true, bnet_addr, port)?;
    out[1][0] = one(false, bnet_addr, port + 1)?;
    let split_gw = sink::path_runs(ends, bnet_addr, port + 4, o.flows as usize, o.seconds, None)?;
    stop_gateway(gw)?;
    lab.address(Addressing::Router).map_err(lab_err)?;
    let bnet_addr = Addressing::Router.right_addr(false);
    out[0][1] = one(true, bnet_addr, port + 2)?;
    out[1][1] = one(false, bnet_addr, port + 3)?;
    let pace = [split_gw[0].gbps, split_gw[1].gbps];
    let split_router = sink::path_runs(ends, bnet_addr, port + 6, o.flows as usize, o.seconds, Some(pace))?;
    Ok(CpuPass { iperf: out, split: CpuSplit::of_paths(&split_router, &split_gw) })
}

fn summarize(rounds: &[Round], observed: &Round, cpu: &CpuPass, o: &DemoOptions) -> DemoResult {
    let n = rounds.len() as f64;
    let mean = |f: &dyn Fn(&Round) -> f64| rounds.iter().map(f).sum::<f64>() / n;
    let dir = |inbound: bool| {
        fn pick_dir(r: &Round, inbound: bool) -> (&Run, &Run) {
            if inbound { (&r.gin, &r.rin) } else { (&r.gout, &r.rout) }
        }
        // The inner link is observed at the b-network host: what it receives
        // inbound, what it sends outbound.
        let inner = |run: &Run| if inbound { run.bnet_link.rx } else { run.bnet_link.tx };
        let outer = |run: &Run| if inbound { run.legacy_link.tx } else { run.legacy_link.rx };
        let last = rounds.last().map(|r| pick_dir(r, inbound));
        let (obs_g, obs_r) = pick_dir(observed, inbound);
        let [(_, cpu_g), (_, cpu_r)] = cpu.iperf[usize::from(!inbound)];
        let gateway_gbps = mean(&|r| pick_dir(r, inbound).0.gbps);
        let router_gbps = mean(&|r| pick_dir(r, inbound).1.gbps);
        let yields: Vec<f64> = rounds.iter().filter_map(|r| r.gstats.yield_).collect();
        Direction {
            gateway_gbps,
            router_gbps,
            ratio: gateway_gbps / router_gbps.max(1e-9),
            r#yield: (!yields.is_empty()).then(|| yields.iter().sum::<f64>() / yields.len() as f64),
            max_frame_inner: inner(obs_g).max_l3,
            max_frame_outer: outer(obs_g).max_l3,
            mss_seen: last.and_then(|(g, _)| g.bnet_mss.map(|m| m.0)),
            rcvmss_seen: last.and_then(|(g, _)| g.bnet_mss.map(|m| m.1)),
            legacy_mss: if inbound { last.and_then(|(g, _)| g.sender_mss) } else { None },
            router_max_frame_inner: inner(obs_r).max_l3,
            router_mss_seen: last.and_then(|(_, r)| r.bnet_mss.map(|m| m.0)),
            gateway_gbps_observed: obs_g.gbps,
            router_gbps_observed: obs_r.gbps,
            bnet_cpu_s_per_gb_gateway: cpu_g,
            bnet_cpu_s_per_gb_router: cpu_r,
            bnet_cpu_ratio: crate::exp::ratio(cpu_g, cpu_r),
            cpu_pass_gbps: [cpu.iperf[usize::from(!inbound)][0].0, cpu.iperf[usize::from(!inbound)][1].0],
            gateway_retransmits: rounds.iter().map(|r| pick_dir(r, inbound).0.retransmits).sum(),
            router_retransmits: rounds.iter().map(|r| pick_dir(r, inbound).1.retransmits).sum(),
            round_ratios: rounds
                .iter()
                .map(|r| pick_dir(r, inbound).0.gbps / pick_dir(r, inbound).1.gbps.max(1e-9))
                .collect(),
        }
    };
    DemoResult {
        inbound: dir(true),
        outbound: dir(false),
        gateway_cpu_cores: mean(&|r| r.gstats.cpu_cores),
        gateway_flushes: (0..rounds.iter().map(|r| r.gstats.flushes.len()).max().unwrap_or(0))
            .map(|i| rounds.iter().filter_map(|r| r.gstats.flushes.get(i)).sum())
            .collect(),
        offloads: OFFLOADS_NOTE,
        fast_path: o.fast_path,
        kernel_share: {
            let carried: u64 = rounds.iter().map(|r| r.gstats.kernel_bytes).sum();
            // iperf3's receiver rate over each run's seconds.
            let total: f64 = rounds.iter().map(|r| (r.gin.gbps + r.gout.gbps) * 1e9 / 8.0 * o.seconds as f64).sum();
            if total > 0.0 { (carried as f64 / total).min(1.0) } else { 0.0 }
        },
        seconds_per_run: o.seconds,
        rounds: o.rounds,
        flows: o.flows,
        bnet_cpu_accounting: BNET_CPU_ACCOUNTING.into(),
        bnet_cpu_split: cpu.split,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ss_mss_picks_data_connection() {
        let ss = "0 0 198.51.100.2:5201 198.51.100.1:40000\n\t cubic wscale:7,7 rto:201 mss:1448 pmtu:9000 rcvmss:536 advmss:8948\n\
                  0 0 198.51.100.2:5201 198.51.100.1:40002\n\t cubic wscale:7,7 rto:201 mss:8948 pmtu:9000 rcvmss:8948 advmss:8948\n";
        assert_eq!(parse_ss_mss(ss, "5201"), Some((8948, 8948)));
        assert_eq!(parse_ss_mss(ss, "5202"), None);
        let tie = "0 0 198.51.100.2:5201 198.51.100.1:40000\n\t mss:8948 rcvmss:536\n\
                   0 0 198.51.100.2:5201 198.51.100.1:40002\n\t mss:8948 rcvmss:8948\n";
        assert_eq!(parse_ss_mss(tie, "5201"), Some((8948, 8948)));
    }
}
