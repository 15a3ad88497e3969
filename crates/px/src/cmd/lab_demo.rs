//! `px lab demo|up|down`: the namespace lab in which 1500-byte traffic
//! becomes 9000-byte traffic and back, measured against a plain Linux router
//! on the same hosts, links and MTUs in the same run.
//!
//! Topology: `legacy` (eMTU 1500) — `gw` (two ports) — `bnet` (iMTU 9000).
//! Links are made wire-like: the hosts send with TSO/GSO off and receive
//! with GRO off, so the frame observers in the *hosts'* namespaces count
//! the frames that really cross each link; the middle box's ports have GRO
//! on (the NIC's LRO) and TSO off (they send wire-sized frames).

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use px_lab::{FrameObserver, FrameSizes, LabChild, Netns, NsId, Offloads, Topology};
use serde::Serialize;

const LEGACY_DEV: &str = "px-l0";
const GW_OUTER: &str = "px-gwo";
const GW_INNER: &str = "px-gwi";
const BNET_DEV: &str = "px-b0";
const EMTU: u32 = 1500;
const IMTU: u32 = 9000;
const LEGACY_ADDR: &str = "198.51.100.1";
const BNET_ADDR_GW: &str = "198.51.100.2";
const BNET_ADDR_ROUTER: &str = "203.0.113.2";

/// Offloads on the hosts: wire-sized frames both ways at the observers.
const HOST_OFFLOADS: Offloads = Offloads { tso: Some(false), gso: Some(false), gro: Some(false) };
/// Offloads on the middle box's ports: LRO-like receive, wire-sized send.
const MIDDLE_OFFLOADS: Offloads = Offloads { tso: Some(false), gso: None, gro: Some(true) };
const OFFLOADS_NOTE: &str = "hosts: tso/gso/gro off (observers see wire frames); middle box ports: gro on, tso off";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Seconds of bulk TCP per direction and per middle box.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    seconds: u64,
    /// Rounds, each running the gateway and then the router, so that both
    /// see the same drift of a shared machine; figures are the mean.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=20))]
    rounds: u64,
    /// Parallel TCP flows per direction.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=128))]
    flows: u64,
    /// Gateway worker threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Extra arguments for `px gateway` (repeatable), e.g. `--gateway-arg=--rx-ring`.
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    gateway_args: Vec<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Do not start `px gateway` in the gateway namespace.
    #[arg(long)]
    no_gateway: bool,
}

#[derive(Debug, Args)]
pub struct DownArgs {}

/// What was measured in one direction.
#[derive(Debug, Clone, Serialize)]
pub struct Direction {
    pub gateway_gbps: f64,
    pub router_gbps: f64,
    pub ratio: f64,
    /// Gateway's conversion yield over the whole run (its own counter).
    pub r#yield: Option<f64>,
    /// Largest IP packet the independent observers saw on the inner and the
    /// outer link through the gateway.
    pub max_frame_inner: usize,
    pub max_frame_outer: usize,
    /// MSS of the b-network host's socket (`ss -ti`): send and receive.
    pub mss_seen: Option<u32>,
    pub rcvmss_seen: Option<u32>,
    /// MSS of the legacy host's socket.
    pub legacy_mss: Option<u32>,
    /// Same through the router, for comparison.
    pub router_max_frame_inner: usize,
    pub router_mss_seen: Option<u32>,
    pub gateway_retransmits: u64,
    pub router_retransmits: u64,
    /// Gateway / router ratio of each round (the spread behind `ratio`).
    pub round_ratios: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DemoResult {
    pub inbound: Direction,
    pub outbound: Direction,
    /// CPU the gateway process used, in cores (over its whole run).
    pub gateway_cpu_cores: f64,
    pub offloads: &'static str,
    pub seconds_per_run: u64,
    pub rounds: u64,
    pub flows: u64,
}

struct Lab {
    topo: Topology,
    legacy: NsId,
    gw: NsId,
    bnet: NsId,
}

fn lab_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn build() -> Result<Lab, String> {
    px_lab::install_signal_cleanup().map_err(lab_err)?;
    let mut topo = Topology::new().map_err(lab_err)?;
    let legacy = topo.add_ns("legacy").map_err(lab_err)?;
    let gw = topo.add_ns("gw").map_err(lab_err)?;
    let bnet = topo.add_ns("bnet").map_err(lab_err)?;
    topo.add_veth((legacy, LEGACY_DEV), (gw, GW_OUTER), EMTU).map_err(lab_err)?;
    topo.add_veth((gw, GW_INNER), (bnet, BNET_DEV), IMTU).map_err(lab_err)?;
    topo.ns(legacy).set_offloads(LEGACY_DEV, HOST_OFFLOADS).map_err(lab_err)?;
    topo.ns(bnet).set_offloads(BNET_DEV, HOST_OFFLOADS).map_err(lab_err)?;
    for dev in [GW_OUTER, GW_INNER] {
        topo.ns(gw).set_offloads(dev, MIDDLE_OFFLOADS).map_err(lab_err)?;
    }
    Ok(Lab { topo, legacy, gw, bnet })
}

fn flush_addrs(ns: &Netns, dev: &str) -> Result<(), String> {
    ns.ip(&["addr", "flush", "dev", dev]).map_err(lab_err)?;
    Ok(())
}

/// Bump in the wire: both hosts on 198.51.100.0/24, the gateway bridges.
fn gateway_mode(lab: &Lab) -> Result<(), String> {
    let (l, g, b) = (lab.topo.ns(lab.legacy), lab.topo.ns(lab.gw), lab.topo.ns(lab.bnet));
    for (ns, dev) in [(l, LEGACY_DEV), (b, BNET_DEV), (g, GW_OUTER), (g, GW_INNER)] {
        flush_addrs(ns, dev)?;
    }
    g.set_sysctl("net.ipv4.ip_forward", "0").map_err(lab_err)?;
    l.add_addr(LEGACY_DEV, &format!("{LEGACY_ADDR}/24")).map_err(lab_err)?;
    b.add_addr(BNET_DEV, &format!("{BNET_ADDR_GW}/24")).map_err(lab_err)?;
    Ok(())
}

/// Plain Linux router: two subnets, forwarding on.
fn router_mode(lab: &Lab) -> Result<(), String> {
    let (l, g, b) = (lab.topo.ns(lab.legacy), lab.topo.ns(lab.gw), lab.topo.ns(lab.bnet));
    for (ns, dev) in [(l, LEGACY_DEV), (b, BNET_DEV), (g, GW_OUTER), (g, GW_INNER)] {
        flush_addrs(ns, dev)?;
    }
    l.add_addr(LEGACY_DEV, &format!("{LEGACY_ADDR}/24")).map_err(lab_err)?;
    g.add_addr(GW_OUTER, "198.51.100.254/24").map_err(lab_err)?;
    g.add_addr(GW_INNER, "203.0.113.254/24").map_err(lab_err)?;
    b.add_addr(BNET_DEV, &format!("{BNET_ADDR_ROUTER}/24")).map_err(lab_err)?;
    g.enable_forwarding().map_err(lab_err)?;
    l.add_route("203.0.113.0/24", "198.51.100.254").map_err(lab_err)?;
    b.add_route("198.51.100.0/24", "203.0.113.254").map_err(lab_err)?;
    Ok(())
}

fn px_exe() -> Result<String, String> {
    std::env::current_exe().map(|p| p.display().to_string()).map_err(|e| format!("cannot find the px binary: {e}"))
}

/// `px gateway` running in the gateway namespace, stopped with SIGTERM.
struct GatewayProc {
    child: LabChild,
    stats: PathBuf,
    log: PathBuf,
    started: Instant,
}

fn start_gateway(lab: &Lab, workers: u64, extra: &[String]) -> Result<GatewayProc, String> {
    let dir = std::env::temp_dir();
    let tag = format!("{}-{}", std::process::id(), lab.topo.ns(lab.gw).name());
    let stats = dir.join(format!("px-lab-gw-{tag}.json"));
    let log = dir.join(format!("px-lab-gw-{tag}.log"));
    let logf = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = lab.topo.ns(lab.gw).command(&px_exe()?);
    cmd.args(["gateway", "--inner", GW_INNER, "--outer", GW_OUTER, "--log-interval", "0", "--workers"])
        .arg(workers.to_string())
        .arg("--stats-file")
        .arg(&stats)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(logf);
    let child = LabChild::spawn(&mut cmd).map_err(lab_err)?;
    let g = GatewayProc { child, stats, log, started: Instant::now() };
    // Wait until it has opened its ports (it logs a first line).
    for _ in 0..100 {
        if std::fs::read_to_string(&g.log).is_ok_and(|s| s.contains("px gateway:")) {
            return Ok(g);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("px gateway did not start; its log: {}", std::fs::read_to_string(&g.log).unwrap_or_default()))
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz.max(1.0))
}

struct GatewayOutcome {
    yield_: Option<f64>,
    cpu_cores: f64,
}

fn stop_gateway(g: GatewayProc) -> Result<GatewayOutcome, String> {
    let pid = g.child.id().ok_or("gateway process already gone")?;
    let cpu = cpu_seconds(pid).unwrap_or(0.0);
    let wall = g.started.elapsed().as_secs_f64();
    // SAFETY: kill(2) on the PID of the child this process started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let out = g.child.wait_with_output().map_err(lab_err)?;
    let stats = std::fs::read_to_string(&g.stats).ok();
    let log = std::fs::read_to_string(&g.log).unwrap_or_default();
    let _ = std::fs::remove_file(&g.stats);
    let _ = std::fs::remove_file(&g.log);
    if !out.status.success() {
        return Err(format!("px gateway exited with {}; its log:\n{log}", out.status));
    }
    let yield_ =
        stats.and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok()).and_then(|v| v["yield"].as_f64());
    Ok(GatewayOutcome { yield_, cpu_cores: cpu / wall.max(1e-9) })
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

fn iperf(lab: &Lab, from: NsId, to: NsId, to_addr: &str, port: u16, seconds: u64, flows: u64) -> Result<Run, String> {
    let (server_ns, client_ns, bnet) = (lab.topo.ns(to), lab.topo.ns(from), lab.topo.ns(lab.bnet));
    let p = port.to_string();
    let mut server = server_ns.command("iperf3");
    server.args(["-s", "-1", "-p", &p]).stdout(Stdio::null()).stderr(Stdio::null());
    let server = LabChild::spawn(&mut server).map_err(lab_err)?;
    std::thread::sleep(Duration::from_millis(300));
    let obs_l = FrameObserver::start(lab.topo.ns(lab.legacy), LEGACY_DEV).map_err(lab_err)?;
    let obs_b = FrameObserver::start(bnet, BNET_DEV).map_err(lab_err)?;
    let mut client = client_ns.command("iperf3");
    client
        .args(["-c", to_addr, "-p", &p, "-J", "-t", &seconds.to_string(), "-P", &flows.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let client = LabChild::spawn(&mut client).map_err(lab_err)?;
    std::thread::sleep(Duration::from_millis(seconds * 500));
    let ss = bnet.exec("ss", &["-tinH", "state", "established"]).unwrap_or_default();
    let out = client.wait_with_output().map_err(lab_err)?;
    let (legacy_link, bnet_link) = (obs_l.stop(), obs_b.stop());
    drop(server);
    let text = String::from_utf8_lossy(&out.stdout);
    let (gbps, retransmits, sender_mss) = parse_iperf3(&text)
        .ok_or_else(|| format!("iperf3 gave no result: {}", String::from_utf8_lossy(&out.stderr)))?;
    Ok(Run { gbps, retransmits, legacy_link, bnet_link, sender_mss, bnet_mss: parse_ss_mss(&ss, &p) })
}

/// Received throughput (Gbps), sender retransmits and the sender's MSS from
/// `iperf3 -J` output.
fn parse_iperf3(json: &str) -> Option<(f64, u64, Option<u32>)> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let bps = v["end"]["sum_received"]["bits_per_second"].as_f64()?;
    let retr = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    let mss = v["start"]["tcp_mss_default"].as_u64().map(|m| m as u32);
    Some((bps / 1e9, retr, mss))
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

pub fn demo(a: DemoArgs) -> Result<ExitCode, String> {
    if let Some(why) = px_lab::root_unavailable_reason() {
        return Err(format!("px lab demo needs root and network namespaces: {why}"));
    }
    for tool in ["iperf3", "ss", "ip"] {
        if Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map_or(true, |o| !o.status.success())
        {
            return Err(format!("`{tool}` is not installed (./scripts/demo installs it as root)"));
        }
    }
    let say = |s: &str| {
        if !a.json {
            eprintln!("{s}");
        }
    };
    let t0 = Instant::now();
    say("px lab demo: building legacy (1500) — gw — bnet (9000) in fresh namespaces…");
    let lab = build()?;
    let secs = a.seconds;
    let mut rounds = Vec::new();
    for r in 0..a.rounds {
        let port = 5201 + 10 * r as u16;
        gateway_mode(&lab)?;
        say(&format!("px lab demo: round {}/{}: through px gateway, {secs} s per direction…", r + 1, a.rounds));
        let gw = start_gateway(&lab, a.workers, &a.gateway_args)?;
        let gin = iperf(&lab, lab.legacy, lab.bnet, BNET_ADDR_GW, port, secs, a.flows)?;
        let gout = iperf(&lab, lab.bnet, lab.legacy, LEGACY_ADDR, port + 1, secs, a.flows)?;
        let gstats = stop_gateway(gw)?;
        router_mode(&lab)?;
        say(&format!(
            "px lab demo: round {}/{}: through a plain Linux router, {secs} s per direction…",
            r + 1,
            a.rounds
        ));
        let rin = iperf(&lab, lab.legacy, lab.bnet, BNET_ADDR_ROUTER, port + 2, secs, a.flows)?;
        let rout = iperf(&lab, lab.bnet, lab.legacy, LEGACY_ADDR, port + 3, secs, a.flows)?;
        rounds.push(Round { gin, gout, gstats, rin, rout });
    }
    drop(lab);
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
        let gateway_gbps = mean(&|r| pick_dir(r, inbound).0.gbps);
        let router_gbps = mean(&|r| pick_dir(r, inbound).1.gbps);
        let yields: Vec<f64> = rounds.iter().filter_map(|r| r.gstats.yield_).collect();
        Direction {
            gateway_gbps,
            router_gbps,
            ratio: gateway_gbps / router_gbps.max(1e-9),
            r#yield: (!yields.is_empty()).then(|| yields.iter().sum::<f64>() / yields.len() as f64),
            max_frame_inner: rounds.iter().map(|r| inner(pick_dir(r, inbound).0).max_l3).max().unwrap_or(0),
            max_frame_outer: rounds.iter().map(|r| outer(pick_dir(r, inbound).0).max_l3).max().unwrap_or(0),
            mss_seen: last.and_then(|(g, _)| g.bnet_mss.map(|m| m.0)),
            rcvmss_seen: last.and_then(|(g, _)| g.bnet_mss.map(|m| m.1)),
            legacy_mss: if inbound { last.and_then(|(g, _)| g.sender_mss) } else { None },
            router_max_frame_inner: rounds.iter().map(|r| inner(pick_dir(r, inbound).1).max_l3).max().unwrap_or(0),
            router_mss_seen: last.and_then(|(_, r)| r.bnet_mss.map(|m| m.0)),
            gateway_retransmits: rounds.iter().map(|r| pick_dir(r, inbound).0.retransmits).sum(),
            router_retransmits: rounds.iter().map(|r| pick_dir(r, inbound).1.retransmits).sum(),
            round_ratios: rounds
                .iter()
                .map(|r| pick_dir(r, inbound).0.gbps / pick_dir(r, inbound).1.gbps.max(1e-9))
                .collect(),
        }
    };
    let res = DemoResult {
        inbound: dir(true),
        outbound: dir(false),
        gateway_cpu_cores: mean(&|r| r.gstats.cpu_cores),
        offloads: OFFLOADS_NOTE,
        seconds_per_run: secs,
        rounds: a.rounds,
        flows: a.flows,
    };
    if a.json {
        println!("{}", serde_json::to_string(&res).map_err(lab_err)?);
    } else {
        print_table(&res);
        eprintln!("px lab demo: done in {:.0} s; namespaces removed.", t0.elapsed().as_secs_f64());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(r: &DemoResult) {
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |m| m.to_string());
    println!(
        "\nlegacy host (MTU {EMTU}) — middle box — b-network host (MTU {IMTU}); {} flow(s), {} s per run",
        r.flows, r.seconds_per_run
    );
    println!("offloads: {}\n", r.offloads);
    println!("{:<44} {:>14} {:>14}", "", "inbound", "outbound");
    println!("{:<44} {:>14} {:>14}", "", "legacy→bnet", "bnet→legacy");
    let row = |label: &str, a: String, b: String| println!("{label:<44} {a:>14} {b:>14}");
    let (i, o) = (&r.inbound, &r.outbound);
    row("throughput via px gateway (Gbps)", format!("{:.2}", i.gateway_gbps), format!("{:.2}", o.gateway_gbps));
    row("throughput via Linux router (Gbps)", format!("{:.2}", i.router_gbps), format!("{:.2}", o.router_gbps));
    row("gateway / router (mean of rounds)", format!("{:.2}", i.ratio), format!("{:.2}", o.ratio));
    let each = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ");
    row("  ... each round", each(&i.round_ratios), each(&o.round_ratios));
    row("largest IP packet on inner link (observer)", i.max_frame_inner.to_string(), o.max_frame_inner.to_string());
    row("largest IP packet on outer link (observer)", i.max_frame_outer.to_string(), o.max_frame_outer.to_string());
    row("  ... inner link via router", i.router_max_frame_inner.to_string(), o.router_max_frame_inner.to_string());
    row(
        "b-network host socket mss / rcvmss",
        format!("{}/{}", opt(i.mss_seen), opt(i.rcvmss_seen)),
        format!("{}/{}", opt(o.mss_seen), opt(o.rcvmss_seen)),
    );
    row("  ... via router", opt(i.router_mss_seen), opt(o.router_mss_seen));
    row(
        "conversion yield (gateway counter, whole run)",
        i.r#yield.map_or("-".into(), |y| format!("{y:.3}")),
        "".into(),
    );
    row(
        "retransmits via gateway / router",
        format!("{}/{}", i.gateway_retransmits, i.router_retransmits),
        format!("{}/{}", o.gateway_retransmits, o.router_retransmits),
    );
    println!("{:<44} {:>14.2}", "gateway CPU (cores, whole run)", r.gateway_cpu_cores);
}

/// Where `px lab up` records what `px lab down` removes.
fn state_file() -> PathBuf {
    std::env::temp_dir().join("px-lab-up.json")
}

pub fn up(a: UpArgs) -> Result<ExitCode, String> {
    if let Some(why) = px_lab::root_unavailable_reason() {
        return Err(format!("px lab up needs root and network namespaces: {why}"));
    }
    if state_file().exists() {
        return Err(format!("a lab is already up ({}); run `px lab down` first", state_file().display()));
    }
    let lab = build()?;
    gateway_mode(&lab)?;
    let gw_ns = lab.topo.ns(lab.gw).name().to_string();
    let description = lab.topo.describe().map_err(lab_err)?;
    let mut pid = None;
    let log = std::env::temp_dir().join(format!("px-lab-up-gateway-{gw_ns}.log"));
    if !a.no_gateway {
        let logf = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        // Started with `ip netns exec` directly (not as a lab child) so it
        // outlives this command; `px lab down` stops it by PID.
        let child = Command::new("ip")
            .args(["netns", "exec", &gw_ns, &px_exe()?, "gateway", "--inner", GW_INNER, "--outer", GW_OUTER])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .map_err(|e| format!("cannot start px gateway: {e}"))?;
        pid = Some(child.id());
        println!("px gateway running in {gw_ns} (pid {}), log: {}", child.id(), log.display());
    }
    let names = lab.topo.persist();
    let state = serde_json::json!({ "namespaces": names, "gateway_pid": pid, "gateway_log": log });
    std::fs::write(state_file(), state.to_string()).map_err(|e| format!("{}: {e}", state_file().display()))?;
    println!("{description}");
    println!(
        "legacy host {LEGACY_ADDR} (MTU {EMTU}) <-> b-network host {BNET_ADDR_GW} (MTU {IMTU}), same subnet through the gateway."
    );
    println!("try:  ip netns exec {} iperf3 -s &   ip netns exec {} iperf3 -c {BNET_ADDR_GW}", names[2], names[0]);
    println!("then: px lab down");
    Ok(ExitCode::SUCCESS)
}

pub fn down(_: DownArgs) -> Result<ExitCode, String> {
    let path = state_file();
    let text = std::fs::read_to_string(&path).map_err(|_| format!("no lab is up ({} not found)", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(pid) = v["gateway_pid"].as_u64() {
        // Only the process `px lab up` started: check it is still px gateway.
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains("gateway") {
            // SAFETY: kill(2) on the PID recorded by `px lab up`.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            for _ in 0..100 {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    for n in v["namespaces"].as_array().into_iter().flatten().filter_map(|n| n.as_str()) {
        if n.starts_with("px-") {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
            println!("removed {n}");
        }
    }
    if let Some(log) = v["gateway_log"].as_str().filter(|l| l.contains("px-lab-up-gateway-")) {
        let _ = std::fs::remove_file(log);
    }
    std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_json() {
        let j = r#"{"start":{"tcp_mss_default":1448},"end":{"sum_sent":{"retransmits":3},"sum_received":{"bits_per_second":7.5e9}}}"#;
        assert_eq!(parse_iperf3(j), Some((7.5, 3, Some(1448))));
        assert_eq!(parse_iperf3("{}"), None);
    }

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
