//! Two gateways behind ECMP (issue 30): b-network A's border router `ra`
//! reaches the exchange router `rx` over two parallel links, each with a
//! `px gateway` as a bump in it; BIRD 2 on both routers speaks eBGP over
//! each link (through the gateway), with BFD on each session, and merges
//! the two equal routes into one kernel multipath route (`merge paths`).
//!
//! ```text
//!  hA ─9000─ ra ═g1═9000═[gw1]═1500═g1═ rx ─1500─ hL
//!               ╚g2═9000═[gw2]═1500═g2═╝
//! ```
//!
//! The run: sha256-checked paced TCP flows in both directions; `kill -9`
//! of gw1; later gw1 started again. Every transfer must complete exact.
//! Measured: the time each flow stood still after the kill, the time the
//! routers' kernel routes lost the dead path, the surviving gateway's
//! yield on the flows it adopted mid-stream, the traffic per link over
//! time, and whether the flow hash is symmetric across the two routers
//! (same `fib_multipath_hash_seed`) and what a differing seed does.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Scratch;
use super::bird::Bird;
use crate::gateway::GatewayProcess;
use crate::netns::{Netns, Offloads};
use crate::topology::{NsId, Topology};
use crate::traffic::{FlowSender, ReceivedFlow, SentFlow, TrafficError, receive_flow, set_accept_timeout};
use crate::{RunError, exp};

/// b-network A's host.
pub const HOST_A: &str = "198.51.100.1";
/// The legacy network's host.
pub const HOST_L: &str = "203.0.113.1";
/// The prefix `ra` announces (b-network A).
pub const PREFIX_A: &str = "198.51.100.0/28";
/// The prefix `rx` announces (the legacy network).
pub const PREFIX_L: &str = "203.0.113.0/28";
/// `ra`'s and `rx`'s addresses on link 1 and link 2 (each a /29 through
/// one gateway).
const LINKS: [(&str, &str, &str); 2] =
    [("198.51.100.17", "198.51.100.18", "29"), ("198.51.100.25", "198.51.100.26", "29")];
/// AS numbers (documentation range, RFC 5398).
const AS_A: u32 = 64500;
const AS_X: u32 = 64510;
/// The multipath hash seed both routers use.
pub const HASH_SEED: u32 = 0x5eed_0030;
/// Port of each gateway's metrics endpoint (its namespace's loopback).
const METRICS_PORT: u16 = 9464;
/// A flow whose bytes stop for this long is counted as stalled.
const STALL: Duration = Duration::from_millis(60);

/// What to run.
#[derive(Debug, Clone)]
pub struct EcmpOptions {
    /// The `px` binary (runs the gateways).
    pub exe: PathBuf,
    /// Flows in each direction.
    pub flows: usize,
    /// Rate of each flow, Mbit/s (paced writes of 64 KiB).
    pub rate_mbps: f64,
    /// From the start of the flows to the kill.
    pub before_kill: Duration,
    /// From the kill to gw1's restart.
    pub down: Duration,
    /// From the restart to the end of the flows.
    pub after_restart: Duration,
    /// 5-tuples tried for the hash symmetry check.
    pub hash_tuples: usize,
    /// Extra arguments for both gateways.
    pub gateway_args: Vec<String>,
    /// BFD transmit and receive interval, ms (detection: 3 of them).
    pub bfd_ms: u32,
    /// `net.ipv4.fib_multipath_hash_policy` on both routers: 1 (L4) or 3
    /// (custom fields: addresses, protocol, ports). See `docs/border.md`:
    /// with 1, Linux reuses a packet's existing L4 hash (a sender socket's
    /// random `txhash`, a NIC's RSS hash), which differs per direction.
    pub hash_policy: u32,
}

impl Default for EcmpOptions {
    fn default() -> Self {
        EcmpOptions {
            exe: PathBuf::from("px"),
            flows: 4,
            rate_mbps: 40.0,
            before_kill: Duration::from_secs(3),
            down: Duration::from_secs(5),
            after_restart: Duration::from_secs(5),
            hash_tuples: 64,
            gateway_args: Vec::new(),
            bfd_ms: 50,
            hash_policy: 3,
        }
    }
}

/// One sha256-checked transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// `a_to_l` or `l_to_a`.
    pub direction: &'static str,
    /// Flow number.
    pub flow: u64,
    /// Bytes received (each checked against the sender's stream).
    pub bytes: u64,
    /// SHA-256 the sender computed.
    pub sent_sha256: String,
    /// SHA-256 the receiver computed.
    pub received_sha256: String,
    /// Longest time without a received byte after the kill, ms (0: the
    /// flow never stood still: it was on the surviving gateway).
    pub failover_stall_ms: f64,
    /// Longest stall after gw1's restart, ms.
    pub failback_stall_ms: f64,
    /// The receiver's estimate of the segment size it gets at the end
    /// (`TCP_INFO` `rcv_mss`): 8948 for a flow its last gateway merges,
    /// about 1448 for one it passes at the safe size (it never saw the
    /// handshake), 1448 for every A → L flow (legacy side).
    pub receiver_mss: u32,
}

/// Flow hash symmetry between the two routers.
#[derive(Debug, Clone, Serialize)]
pub struct HashSymmetry {
    /// `net.ipv4.fib_multipath_hash_policy` on both routers (1: L4; 3:
    /// custom fields).
    pub policy: u32,
    /// 5-tuples tried.
    pub tuples: usize,
    /// Share of tuples whose two directions take the same gateway with the
    /// same seed on both routers.
    pub same_seed: f64,
    /// ... with different seeds.
    pub different_seeds: f64,
    /// Share of tuples on link 1 (the spread).
    pub on_link1: f64,
    /// Of the real L → A flows, the share whose receiver got merged
    /// (8948-byte) segments just before the kill: their gateway saw both
    /// directions. What the FIB answers above says for a tuple; this says
    /// what the packets did.
    pub flows_merged_before_kill: f64,
}

/// Traffic per gateway at one moment.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since the flows started.
    pub t_s: f64,
    /// Mbit/s through gw1 (both directions, counted at `ra`).
    pub gw1_mbps: f64,
    /// Mbit/s through gw2.
    pub gw2_mbps: f64,
}

/// What the ECMP run measured.
#[derive(Debug, Clone, Serialize)]
pub struct EcmpResult {
    /// Every transfer complete and its digests equal.
    pub transfers_exact: bool,
    /// The transfers.
    pub transfers: Vec<Transfer>,
    /// Flows that stood still after the kill (they were on gw1).
    pub stalled_flows: usize,
    /// Longest time from the kill until a stalled flow moved again, ms.
    pub failover_ms: f64,
    /// Median of it over the stalled flows, ms.
    pub failover_median_ms: f64,
    /// From the kill until `ra`'s kernel route had one next hop, ms.
    pub route_converged_ms: Option<f64>,
    /// Longest stall of any flow after gw1's restart, ms.
    pub failback_ms: f64,
    /// Flows that stood still after the restart.
    pub failback_stalled_flows: usize,
    /// gw2's conversion yield from the start to the kill.
    pub yield_before_failover: Option<f64>,
    /// gw2's conversion yield from the kill to gw1's restart (its own flows
    /// and the ones it adopted without seeing their handshake).
    pub yield_after_failover: Option<f64>,
    /// gw2's TCP data packets to the inner port in that window.
    pub gw2_data_out_after: u64,
    /// Flow hash symmetry.
    pub hash: HashSymmetry,
    /// BFD timers (tx/rx interval ms, multiplier).
    pub bfd: (u32, u32),
    /// BGP sessions that went down on `ra` besides the killed gateway's
    /// (flaps: BFD packets missed on a loaded machine).
    pub bfd_flaps: usize,
    /// `ra`'s BIRD log lines about its sessions.
    pub ra_events: Vec<String>,
    /// When gw1 was killed and restarted (s since start).
    pub kill_at_s: f64,
    /// ... restarted.
    pub restart_at_s: f64,
    /// Traffic per gateway over time (100 ms bins).
    pub samples: Vec<Sample>,
}

/// One sample: seconds since the start, each flow's received bytes, the
/// bytes through each gateway link.
type RawSample = (f64, Vec<u64>, [u64; 2]);

/// BFD detection multiplier.
const BFD_MULTIPLIER: u32 = 3;

fn bird_config(log: &str, me: usize, bfd_ms: u32) -> String {
    let (router_id, my_as, peer_as, lan_dev, peers) = if me == 0 {
        (LINKS[0].0, AS_A, AS_X, "a0", [LINKS[0].1, LINKS[1].1])
    } else {
        (LINKS[0].1, AS_X, AS_A, "l0", [LINKS[0].0, LINKS[1].0])
    };
    let (iv, mult) = (bfd_ms, BFD_MULTIPLIER);
    format!(
        r#"log "{log}" all;
debug protocols {{ states }};
router id {router_id};
protocol device {{ scan time 10; }}
protocol direct {{ ipv4; interface "{lan_dev}"; }}
protocol kernel {{
  ipv4 {{ import none; export where source = RTS_BGP; }};
  merge paths on;
}}
protocol bfd {{
  interface "g*" {{ min rx interval {iv} ms; min tx interval {iv} ms; multiplier {mult}; }};
}}
template bgp gwlink {{
  local as {my_as};
  connect retry time 1;
  error wait time 1, 4;
  hold time 3;
  keepalive time 1;
  bfd on;
  ipv4 {{ import all; export where source = RTS_DEVICE; }};
}}
protocol bgp via1 from gwlink {{ neighbor {} as {peer_as}; }}
protocol bgp via2 from gwlink {{ neighbor {} as {peer_as}; }}
"#,
        peers[0], peers[1]
    )
}

/// The namespaces and links of the run.
struct Lab {
    topo: Topology,
    host_a: NsId,
    ra: NsId,
    gws: [NsId; 2],
    rx: NsId,
    host_l: NsId,
}

impl Lab {
    fn build(hash_policy: u32) -> Result<Lab, RunError> {
        let mut topo = Topology::new()?;
        let host_a = topo.add_ns("bneta")?;
        let ra = topo.add_ns("ra")?;
        let gws = [topo.add_ns("gw1")?, topo.add_ns("gw2")?];
        let rx = topo.add_ns("rx")?;
        let host_l = topo.add_ns("legacy")?;
        topo.add_veth((host_a, "eth0"), (ra, "a0"), 9000)?;
        topo.add_veth((rx, "l0"), (host_l, "eth0"), 1500)?;
        for (i, gw) in gws.iter().enumerate() {
            let dev = format!("g{}", i + 1);
            topo.add_veth((ra, &dev), (*gw, "gwi"), 9000)?;
            topo.add_veth((*gw, "gwo"), (rx, &dev), 1500)?;
            topo.ns(*gw).set_offloads("gwi", Offloads::GRO_RECEIVER)?;
            topo.ns(*gw).set_offloads("gwo", Offloads::GRO_RECEIVER)?;
            let (a, x, len) = LINKS[i];
            topo.ns(ra).add_addr(&dev, &format!("{a}/{len}"))?;
            topo.ns(rx).add_addr(&dev, &format!("{x}/{len}"))?;
        }
        topo.ns(host_a).add_addr("eth0", &format!("{HOST_A}/28"))?;
        topo.ns(ra).add_addr("a0", "198.51.100.14/28")?;
        topo.ns(host_a).add_route(PREFIX_L, "198.51.100.14")?;
        topo.ns(host_l).add_addr("eth0", &format!("{HOST_L}/28"))?;
        topo.ns(rx).add_addr("l0", "203.0.113.14/28")?;
        topo.ns(host_l).add_route(PREFIX_A, "203.0.113.14")?;
        for h in [host_a, host_l] {
            topo.ns(h).set_offloads("eth0", Offloads::WIRE_SENDER)?;
        }
        for r in [ra, rx] {
            let ns = topo.ns(r);
            ns.enable_forwarding()?;
            ns.set_sysctl("net.ipv4.fib_multipath_hash_policy", &hash_policy.to_string())?;
            // Policy 3's fields: source and destination address, protocol,
            // source and destination port.
            ns.set_sysctl("net.ipv4.fib_multipath_hash_fields", "0x0037")?;
            ns.set_sysctl("net.ipv4.fib_multipath_hash_seed", &HASH_SEED.to_string())?;
        }
        Ok(Lab { topo, host_a, ra, gws, rx, host_l })
    }

    fn ns(&self, id: NsId) -> &Netns {
        self.topo.ns(id)
    }

    fn start_gateway(&self, i: usize, o: &EcmpOptions) -> Result<GatewayProcess, RunError> {
        let mut args: Vec<String> = vec!["--metrics".into(), format!("127.0.0.1:{METRICS_PORT}")];
        args.extend(o.gateway_args.iter().cloned());
        Ok(GatewayProcess::start_in(self.ns(self.gws[i]), "gwi", "gwo", &[], &o.exe, &args)?)
    }
}

/// Runs the ECMP failover experiment; `say` gets progress lines.
pub fn run(o: &EcmpOptions, say: &dyn Fn(&str)) -> Result<EcmpResult, RunError> {
    exp::require(
        "px lab border",
        &["bird", "birdc", "sha256sum", "ethtool"],
        1,
        "apt-get install bird2 (scripts/lib.sh)",
    )?;
    if o.flows == 0 || o.rate_mbps <= 0.0 {
        return Err(RunError::Step("ecmp: need at least one flow per direction and a positive rate".into()));
    }
    if ![1, 3].contains(&o.hash_policy) {
        return Err(RunError::Step(format!("ecmp: hash policy {} (1 or 3)", o.hash_policy)));
    }
    let lab = Lab::build(o.hash_policy)?;
    let scratch = Scratch::new("ecmp")?;
    let mut gws = [Some(lab.start_gateway(0, o)?), Some(lab.start_gateway(1, o)?)];
    say(&format!(
        "ecmp: two gateways up; starting BIRD (eBGP over each gateway, BFD {} ms x {BFD_MULTIPLIER})",
        o.bfd_ms
    ));
    let birds = [lab.ra, lab.rx]
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let name = ["ra", "rx"][i];
            let log = Bird::log_path(&scratch.0, name);
            Bird::start(lab.ns(*ns), &scratch.0, name, &bird_config(&log.to_string_lossy(), i, o.bfd_ms))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RunError::Step(e.to_string()))?;
    for b in &birds {
        b.wait_established(&["via1", "via2"], Duration::from_secs(30)).map_err(|e| RunError::Step(e.to_string()))?;
    }
    // BFD up on both links on both routers: otherwise a dead gateway is
    // found only by the BGP hold timer.
    for b in &birds {
        b.wait_for("BFD sessions up on both links", Duration::from_secs(20), |b| {
            let out = b.birdc(&["show", "bfd", "sessions"])?;
            Ok((out.lines().filter(|l| l.contains(" Up ")).count() >= 2, out))
        })
        .map_err(|e| RunError::Step(e.to_string()))?;
    }
    wait_multipath(lab.ns(lab.ra), PREFIX_L, 2, Duration::from_secs(10))?;
    wait_multipath(lab.ns(lab.rx), PREFIX_A, 2, Duration::from_secs(10))?;
    lab.ns(lab.host_a).ping(HOST_L, 3)?;
    say("ecmp: BGP established on both links, multipath routes installed; checking the flow hash");
    let hash = hash_symmetry(&lab, o.hash_tuples, o.hash_policy)?;
    say(&format!(
        "ecmp: hash symmetric for {:.0} % of tuples with equal seeds, {:.0} % with different seeds",
        hash.same_seed * 100.0,
        hash.different_seeds * 100.0
    ));

    // The transfers: flows 0..n from A to L, n..2n from L to A.
    let n = o.flows;
    let progress: Vec<AtomicU64> = (0..2 * n).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let srv_l: SocketAddr = format!("{HOST_L}:5001").parse().map_err(|e| format!("{e}"))?;
    let srv_a: SocketAddr = format!("{HOST_A}:5002").parse().map_err(|e| format!("{e}"))?;
    let stall_timeout = Duration::from_secs(30);
    let listen = |ns: &Netns, at: SocketAddr| -> Result<TcpListener, RunError> {
        let l = ns.run(|| TcpListener::bind(at))?.map_err(|e| format!("bind {at}: {e}"))?;
        set_accept_timeout(&l, Duration::from_secs(10)).map_err(|e| format!("accept timeout: {e}"))?;
        Ok(l)
    };
    let (l_l, l_a) = (listen(lab.ns(lab.host_l), srv_l)?, listen(lab.ns(lab.host_a), srv_a)?);
    let chunk = 64 * 1024;
    let gap = Duration::from_secs_f64(chunk as f64 * 8.0 / (o.rate_mbps * 1e6));
    let t0 = Instant::now();
    let mut samples_raw: Vec<RawSample> = Vec::new();
    let mut route_converged_ms = None;
    let (mut yield_before, mut yield_after, mut data_after) = (None, None, 0);
    let outcome = std::thread::scope(|sc| -> Result<_, RunError> {
        let (progress, stop) = (&progress, &stop);
        // Whatever way this closure leaves, the senders and the sampler stop
        // (the scope joins them before it returns).
        let _stop = StopOnDrop(stop);
        let recv = |l: &TcpListener, base: usize| {
            let l = l.try_clone().map_err(|e| TrafficError::Io { what: "listener".into(), source: e })?;
            Ok::<_, TrafficError>(sc.spawn(move || -> Result<Vec<ReceivedFlow>, TrafficError> {
                std::thread::scope(|inner| {
                    let mut hs = Vec::new();
                    for i in 0..n {
                        let (s, _) = l.accept().map_err(|e| TrafficError::Io { what: "accept".into(), source: e })?;
                        let p = &progress[base + i];
                        hs.push(inner.spawn(move || receive_flow(s, stall_timeout, p, true)));
                    }
                    hs.into_iter()
                        .map(|h| h.join().map_err(|_| crate::LabError::Panicked("receiver".into()))?)
                        .collect()
                })
            }))
        };
        let r_l = recv(&l_l, 0).map_err(|e| e.to_string())?;
        let r_a = recv(&l_a, n).map_err(|e| e.to_string())?;
        let plan: Vec<(&Netns, SocketAddr, u64)> = (0..n as u64)
            .map(|f| (lab.ns(lab.host_a), srv_l, f))
            .chain((0..n as u64).map(|f| (lab.ns(lab.host_l), srv_a, 100 + f)))
            .collect();
        let mut senders = Vec::new();
        for (client, server, flow) in plan {
            senders.push(sc.spawn(move || -> Result<SentFlow, TrafficError> {
                client.run(|| {
                    let mut s = FlowSender::connect(server, flow, None, stall_timeout, true)?;
                    while !stop.load(Ordering::Relaxed) {
                        s.send(chunk)?;
                        std::thread::sleep(gap);
                    }
                    s.finish()
                })?
            }));
        }
        // Sample until the end; kill and restart on the way.
        let ra_ns = lab.ns(lab.ra);
        let sampler = sc.spawn(move || -> Result<Vec<RawSample>, RunError> {
            let _in = ra_ns.enter()?;
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let links = link_bytes(&["g1", "g2"]);
                let p = progress.iter().map(|p| p.load(Ordering::Relaxed)).collect();
                out.push((t0.elapsed().as_secs_f64(), p, links));
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(out)
        });
        std::thread::sleep(o.before_kill);
        let merged = merged_share(lab.ns(lab.host_a), srv_a.port());
        let m0 = scrape(lab.ns(lab.gws[1]));
        let gw1 = gws[0].take().ok_or("gw1 gone")?;
        let k = Instant::now();
        gw1.kill()?;
        let kill_at = t0.elapsed().as_secs_f64();
        say(&format!("ecmp: kill -9 gw1 at {kill_at:.2} s"));
        let m1 = scrape(lab.ns(lab.gws[1]));
        route_converged_ms = wait_multipath(lab.ns(lab.ra), PREFIX_L, 1, Duration::from_secs(5))
            .ok()
            .map(|()| k.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(o.down.saturating_sub(k.elapsed()));
        let m2 = scrape(lab.ns(lab.gws[1]));
        gws[0] = Some(lab.start_gateway(0, o)?);
        let restart_at = t0.elapsed().as_secs_f64();
        say(&format!("ecmp: gw1 started again at {restart_at:.2} s"));
        if let (Ok(m0), Ok(m1), Ok(m2)) = (&m0, &m1, &m2) {
            yield_before = m1.yield_since(&GwMetrics::default());
            yield_after = m2.yield_since(m1);
            data_after = m2.data_out.saturating_sub(m1.data_out);
            let _ = m0;
        }
        // BGP over gw1 comes back after BFD and the error wait.
        let back = birds[0].wait_established(&["via1"], Duration::from_secs(20));
        std::thread::sleep(o.after_restart);
        stop.store(true, Ordering::Relaxed);
        back.map_err(|e| RunError::Step(format!("BGP over the restarted gw1: {e}")))?;
        let sent: Vec<Result<SentFlow, TrafficError>> = senders
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(crate::LabError::Panicked("sender".into()).into())))
            .collect();
        let got_l = r_l.join().map_err(|_| "receiver panicked")?;
        let got_a = r_a.join().map_err(|_| "receiver panicked")?;
        samples_raw = sampler.join().map_err(|_| "sampler panicked")??;
        Ok((sent, got_l, got_a, kill_at, restart_at, merged))
    })?;
    let (sent, got_l, got_a, kill_at, restart_at, merged) = outcome;
    let mut hash = hash;
    hash.flows_merged_before_kill = merged;
    // One BFD session goes down for the kill; any other is a flap.
    let ra_log = std::fs::read_to_string(Bird::log_path(&scratch.0, "ra")).unwrap_or_default();
    let ra_events = routing_events(&ra_log);
    let bfd_flaps = bgp_downs(&ra_events).saturating_sub(1);
    let mut received = got_l.map_err(|e| format!("A to L: {e}"))?;
    received.extend(got_a.map_err(|e| format!("L to A: {e}"))?);
    // Match each sender with its receiver by flow number.
    let mut transfers = Vec::new();
    let mut exact = true;
    for (i, s) in sent.into_iter().enumerate() {
        let flow = if i < n { i as u64 } else { 100 + (i - n) as u64 };
        let s = s.map_err(|e| format!("flow {flow}: {e}"))?;
        let r = received.iter().find(|r| r.flow == flow).ok_or(format!("flow {flow}: not received"))?;
        let (ss, rs) = (s.sha256.clone().unwrap_or_default(), r.sha256.clone().unwrap_or_default());
        exact &= s.bytes == r.bytes && !ss.is_empty() && ss == rs;
        transfers.push(Transfer {
            direction: if i < n { "a_to_l" } else { "l_to_a" },
            flow,
            bytes: r.bytes,
            sent_sha256: ss,
            received_sha256: rs,
            failover_stall_ms: 0.0,
            failback_stall_ms: 0.0,
            receiver_mss: r.stats.rcv_mss,
        });
    }
    // Stalls per flow, from the progress samples (receivers were accepted
    // in any order: index `k` of the progress is the k-th accepted flow of
    // that direction, so stalls are matched to a direction, not a flow).
    let times: Vec<f64> = samples_raw.iter().map(|s| s.0).collect();
    let mut fail = Vec::new();
    let mut back = Vec::new();
    for k in 0..2 * n {
        let p: Vec<u64> = samples_raw.iter().map(|s| s.1[k]).collect();
        fail.push(stall_after(&times, &p, kill_at, STALL.as_secs_f64()));
        back.push(stall_after(&times, &p, restart_at, STALL.as_secs_f64()));
    }
    for (i, t) in transfers.iter_mut().enumerate() {
        t.failover_stall_ms = fail[i] * 1e3;
        t.failback_stall_ms = back[i] * 1e3;
    }
    let mut stalled: Vec<f64> = fail.iter().copied().filter(|s| *s > 0.0).map(|s| s * 1e3).collect();
    stalled.sort_by(f64::total_cmp);
    let failback_ms = back.iter().copied().fold(0.0, f64::max) * 1e3;
    Ok(EcmpResult {
        transfers_exact: exact,
        stalled_flows: stalled.len(),
        failover_ms: stalled.last().copied().unwrap_or(0.0),
        failover_median_ms: stalled.get(stalled.len() / 2).copied().unwrap_or(0.0),
        route_converged_ms,
        failback_ms,
        failback_stalled_flows: back.iter().filter(|s| **s > 0.0).count(),
        yield_before_failover: yield_before,
        yield_after_failover: yield_after,
        gw2_data_out_after: data_after,
        transfers,
        hash,
        bfd: (o.bfd_ms, BFD_MULTIPLIER),
        bfd_flaps,
        ra_events,
        kill_at_s: kill_at,
        restart_at_s: restart_at,
        samples: bin_samples(&samples_raw, 0.1),
    })
}

/// Of the established connections to `port` in `ns` (the receivers of
/// L → A), the share whose receive MSS estimate is above 8000: they get
/// merged segments. Read with `ss -ti` (`rcvmss:`).
fn merged_share(ns: &Netns, port: u16) -> f64 {
    let filter = format!("( sport = :{port} )");
    let out = ns.exec("ss", &["-tinH", "state", "established", &filter]).unwrap_or_default();
    let mss: Vec<u32> =
        out.split_whitespace().filter_map(|w| w.strip_prefix("rcvmss:").and_then(|v| v.parse().ok())).collect();
    if mss.is_empty() {
        return 0.0;
    }
    mss.iter().filter(|m| **m > 8000).count() as f64 / mss.len() as f64
}

/// The routing events of a BIRD log (`debug protocols { states }`): the
/// state changes of the BGP and BFD protocols.
fn routing_events(log: &str) -> Vec<String> {
    log.lines().filter(|l| l.contains("State changed to")).map(str::to_owned).collect()
}

/// BGP sessions that went down, from [`routing_events`].
fn bgp_downs(events: &[String]) -> usize {
    events.iter().filter(|l| l.contains("State changed to down")).count()
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The longest time a counter stood still, counted from `event`: among
/// the stretches without progress that began no later than 0.3 s after
/// `event` and last at least `min` seconds, the latest end, minus
/// `event`. 0 if the flow never stood still that long.
pub fn stall_after(times: &[f64], progress: &[u64], event: f64, min: f64) -> f64 {
    let changes: Vec<f64> =
        (1..times.len().min(progress.len())).filter(|&i| progress[i] > progress[i - 1]).map(|i| times[i]).collect();
    let mut worst: f64 = 0.0;
    for w in changes.windows(2) {
        let (from, to) = (w[0], w[1]);
        if to > event && from <= event + 0.3 && to - from >= min {
            worst = worst.max(to - event);
        }
    }
    worst
}

/// Mbit/s per gateway link in bins of `bin` seconds.
fn bin_samples(raw: &[RawSample], bin: f64) -> Vec<Sample> {
    let mut out = Vec::new();
    let Some(first) = raw.first() else { return out };
    let (mut t_prev, mut prev) = (first.0, first.2);
    for (t, _, links) in raw {
        if t - t_prev >= bin {
            let dt = t - t_prev;
            let mbps = |i: usize| links[i].saturating_sub(prev[i]) as f64 * 8.0 / dt / 1e6;
            out.push(Sample { t_s: *t, gw1_mbps: mbps(0), gw2_mbps: mbps(1) });
            (t_prev, prev) = (*t, *links);
        }
    }
    out
}

/// Bytes received plus sent on each of `devs`, from the calling thread's
/// namespace (`/proc/thread-self/net/dev`).
fn link_bytes(devs: &[&str; 2]) -> [u64; 2] {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    let mut out = [0u64; 2];
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else { continue };
        if let Some(i) = devs.iter().position(|d| *d == name.trim()) {
            let f: Vec<u64> = rest.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            out[i] = f.first().copied().unwrap_or(0) + f.get(8).copied().unwrap_or(0);
        }
    }
    out
}

/// Waits until `ns`'s route to `prefix` has `paths` next hops.
fn wait_multipath(ns: &Netns, prefix: &str, paths: usize, timeout: Duration) -> Result<(), RunError> {
    let t0 = Instant::now();
    loop {
        let out = ns.ip(&["-4", "route", "show", prefix])?;
        let hops = out.matches("nexthop").count();
        let have = if hops == 0 && out.contains(" via ") { 1 } else { hops };
        if have == paths {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            return Err(RunError::Step(format!(
                "{}: route {prefix} has {have} next hops, not {paths}: {out}",
                ns.name()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Which gateway link (`g1` → 0, `g2` → 1) a router's FIB picks for a
/// forwarded TCP packet.
fn fib_choice(ns: &Netns, dst: &str, src: &str, iif: &str, sport: u16, dport: u16) -> Result<usize, RunError> {
    let (sp, dp) = (sport.to_string(), dport.to_string());
    let out = ns.ip(&["route", "get", dst, "from", src, "iif", iif, "ipproto", "tcp", "sport", &sp, "dport", &dp])?;
    if out.contains("dev g1") {
        Ok(0)
    } else if out.contains("dev g2") {
        Ok(1)
    } else {
        Err(RunError::Step(format!("{}: no gateway link in `{}`", ns.name(), out.trim())))
    }
}

/// Asks both routers' FIBs which link each direction of `tuples` 5-tuples
/// takes, with equal seeds and then with `rx`'s seed changed (restored
/// afterwards).
fn hash_symmetry(lab: &Lab, tuples: usize, policy: u32) -> Result<HashSymmetry, RunError> {
    let ports: Vec<(u16, u16)> = (0..tuples as u32)
        .map(|i| {
            let x = i.wrapping_mul(0x9e37_79b9) ^ 0x5bd1_e995;
            (32768 + (x % 28000) as u16, [5001, 443, 80, 179][(x >> 20) as usize % 4])
        })
        .collect();
    let measure = || -> Result<(f64, f64), RunError> {
        let (mut same, mut on1) = (0usize, 0usize);
        for &(sp, dp) in &ports {
            let fwd = fib_choice(lab.ns(lab.ra), HOST_L, HOST_A, "a0", sp, dp)?;
            let rev = fib_choice(lab.ns(lab.rx), HOST_A, HOST_L, "l0", dp, sp)?;
            same += usize::from(fwd == rev);
            on1 += usize::from(fwd == 0);
        }
        let n = ports.len().max(1) as f64;
        Ok((same as f64 / n, on1 as f64 / n))
    };
    let (same_seed, on_link1) = measure()?;
    let rx = lab.ns(lab.rx);
    rx.set_sysctl("net.ipv4.fib_multipath_hash_seed", &(HASH_SEED ^ 0x00ff_ff00).to_string())?;
    let different = measure();
    rx.set_sysctl("net.ipv4.fib_multipath_hash_seed", &HASH_SEED.to_string())?;
    Ok(HashSymmetry {
        policy,
        tuples: ports.len(),
        same_seed,
        different_seeds: different?.0,
        on_link1,
        flows_merged_before_kill: 0.0,
    })
}

/// The counters of a gateway's metrics endpoint the run needs.
#[derive(Debug, Clone, Copy, Default)]
struct GwMetrics {
    data_out: u64,
    full_out: u64,
}

impl GwMetrics {
    fn yield_since(&self, before: &GwMetrics) -> Option<f64> {
        let d = self.data_out.checked_sub(before.data_out)?;
        let f = self.full_out.checked_sub(before.full_out)?;
        (d > 0).then(|| f as f64 / d as f64)
    }
}

/// Reads a gateway's Prometheus endpoint from inside its namespace.
fn scrape(ns: &Netns) -> Result<GwMetrics, RunError> {
    let m = super::scrape(
        ns,
        &format!("127.0.0.1:{METRICS_PORT}"),
        &["px_gateway_inner_tcp_data_out_total", "px_gateway_inner_tcp_full_out_total"],
    )?;
    Ok(GwMetrics { data_out: m[0], full_out: m[1] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_that_stops_and_resumes_has_its_stall_measured_from_the_event() {
        let times: Vec<f64> = (0..100).map(|i| f64::from(i) * 0.01).collect();
        // Progress every sample except 0.30..0.55.
        let p: Vec<u64> = times
            .iter()
            .scan(0u64, |acc, t| {
                if !(0.30..0.55).contains(t) {
                    *acc += 10;
                }
                Some(*acc)
            })
            .collect();
        let s = stall_after(&times, &p, 0.32, 0.06);
        assert!((s - (0.55 - 0.32)).abs() < 0.011, "{s}");
        // A flow that never stops: 0.
        let steady: Vec<u64> = (0..100).collect();
        assert_eq!(stall_after(&times, &steady, 0.32, 0.06), 0.0);
        // A stall long before the event does not count.
        assert_eq!(stall_after(&times, &p, 0.9, 0.06), 0.0);
    }

    #[test]
    fn bird_configs_name_both_sessions_bfd_and_merging() {
        let c = bird_config("/tmp/x.log", 0, 20);
        for want in ["merge paths on", "bfd on", "neighbor 198.51.100.18 as 64510", "neighbor 198.51.100.26 as 64510"] {
            assert!(c.contains(want), "{want}: {c}");
        }
        let c = bird_config("/tmp/x.log", 1, 20);
        super::super::bird_parses(&c).unwrap();
        assert!(c.contains("neighbor 198.51.100.17 as 64500") && c.contains("interface \"l0\""), "{c}");
    }

    #[test]
    fn flaps_are_the_downs_besides_the_kill() {
        let log = "2026-11-27 13:05:35.726 <TRACE> bfd1: State changed to up\n\
                   2026-11-27 13:05:40.185 <TRACE> via1: State changed to up\n\
                   2026-11-27 13:05:41.000 <INFO> something else\n\
                   2026-11-27 13:05:44.672 <TRACE> via1: State changed to down\n\
                   2026-11-27 13:05:46.672 <TRACE> via2: State changed to down\n";
        let ev = routing_events(log);
        assert_eq!(ev.len(), 4);
        assert_eq!(bgp_downs(&ev).saturating_sub(1), 1);
    }

    #[test]
    fn bins_turn_byte_counters_into_rates() {
        let raw: Vec<RawSample> =
            (0..=20u32).map(|i| (f64::from(i) * 0.01, vec![], [u64::from(i) * 12_500, 0])).collect();
        let s = bin_samples(&raw, 0.1);
        assert_eq!(s.len(), 2);
        assert!((s[0].gw1_mbps - 10.0).abs() < 1e-6, "{:?}", s[0]);
        assert_eq!(s[0].gw2_mbps, 0.0);
    }
}
