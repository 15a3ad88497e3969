//! The iMTU advertisement end to end (issue 30, paper §4.2): b-network A
//! and its gateway on an exchange (a 9000-byte bridge with a BIRD 2 route
//! server) with three neighbours:
//!
//! ```text
//!  hA ─9000─ ra ─9000─[gw]═9000═╗ exchange bridge (9000), route server
//!                                ╠═9000═ rb ─9000─ hB   B: (64501, 1, 9000), true
//!                                ╠═9000═ rc ─1500─ crt ─9000─ hC   C: (64502, 1, 9000), a lie
//!                                ╚═1500═ rl ─1500─ hL   L: legacy, no claim
//! ```
//!
//! The gateway runs with `--emtu 1500 --imtu-table 30`: BIRD beside it
//! (a session of A's AS with the route server, import only) writes the
//! claims into kernel table 30, the gateway verifies each one with one
//! F-PMTUD measurement from its own address on the exchange toward the
//! neighbour's `px fpmtud` responder (the prefix's first address), and
//! passes traffic to and from verified prefixes untouched.
//!
//! Shown, with frame sizes counted by observers on the bridge ports (not
//! by the gateway): A↔B bulk TCP in 9000-byte frames; A↔L translated to
//! at most 1500; C's lie caught by the measurement (logged) and A↔C
//! translated, complete; B dropping its community mid-transfer: A falls
//! back to translation without a lost byte. Every transfer sha256-checked.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::bird::Bird;
use super::imtu::{IMTU_TABLE, announce_config, learn_config};
use super::{BothWays, Exact, Scratch};
use crate::{RunError, exp};
use px_netns::gateway::GatewayProcess;
use px_netns::netns::{LabChild, Netns, Offloads};
use px_netns::observe::{FrameObserver, FrameSizes};
use px_netns::topology::{NsId, Topology};
use px_netns::traffic::Pace;

const AS_A: u32 = 64500;
const AS_B: u32 = 64501;
const AS_C: u32 = 64502;
const AS_L: u32 = 64503;
const AS_RS: u32 = 64510;
const RS: &str = "198.51.100.126";
const HOST_A: &str = "198.51.100.129";
const HOST_B: &str = "203.0.113.65";
const HOST_C: &str = "203.0.113.129";
const HOST_L: &str = "203.0.113.193";
const PREFIX_B: &str = "203.0.113.64/26";
const PREFIX_C: &str = "203.0.113.128/26";
const PREFIX_L: &str = "203.0.113.192/26";
const RESPONDER_PORT: u16 = 9999;

/// What to run.
#[derive(Debug, Clone)]
pub struct ExchangeOptions {
    /// The `px` binary (the gateway and the responders).
    pub exe: PathBuf,
    /// Bytes of each bulk transfer (each direction, each neighbour).
    pub bytes: u64,
    /// Seconds of the paced A↔B transfer during which B drops its claim.
    pub withdraw_transfer: Duration,
}

impl Default for ExchangeOptions {
    fn default() -> Self {
        ExchangeOptions { exe: PathBuf::from("px"), bytes: 20 << 20, withdraw_transfer: Duration::from_secs(6) }
    }
}

/// Frame sizes one observer saw, both directions (L3 bytes).
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Frames {
    /// Largest frame toward the neighbour.
    pub to_max: usize,
    /// Largest frame from it.
    pub from_max: usize,
    /// Frames toward it larger than 1500.
    pub to_jumbo: u64,
    /// Frames toward it.
    pub to_frames: u64,
}

impl Frames {
    fn of(s: FrameSizes) -> Frames {
        // The observer sits on the bridge port toward the neighbour: what
        // the bridge sends there (tx) goes to it.
        Frames {
            to_max: s.tx.max_l3,
            from_max: s.rx.max_l3,
            to_jumbo: s.tx.up_to_9000 + s.tx.above_9000,
            to_frames: s.tx.frames,
        }
    }
}

/// What the exchange run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ExchangeResult {
    /// Largest frame on B's exchange port during A↔B bulk TCP.
    pub to_bnet_max_frame: usize,
    /// Frames on B's port, A↔B.
    pub bnet: Frames,
    /// Largest frame on L's exchange port during A↔L bulk TCP.
    pub to_legacy_max_frame: usize,
    /// Frames on L's port.
    pub legacy: Frames,
    /// The gateway logged C's claim as a lie, and A↔C completed exact with
    /// frames of at most 1500 toward C.
    pub lie_detected: bool,
    /// Frames on C's port, A↔C.
    pub liar: Frames,
    /// Bytes lost over every transfer (sent minus received).
    pub lost_bytes: u64,
    /// Every transfer exact.
    pub transfers_exact: bool,
    /// The transfers.
    pub transfers: Vec<Exact>,
    /// From B's reconfiguration (claim dropped) to the gateway's log line
    /// that it translates B again, ms.
    pub withdraw_fallback_ms: f64,
    /// Frames toward B after the fallback (A→B, split to the eMTU).
    pub after_withdraw: Frames,
    /// From the gateway's start to "verified" for B and "lie" for C, ms.
    pub verify_ms: f64,
    /// The gateway's iMTU log lines.
    pub gateway_log: Vec<String>,
    /// Packets the gateway passed untouched (`imtu_passed`).
    pub imtu_passed: u64,
}

struct Lab {
    topo: Topology,
    host_a: NsId,
    ra: NsId,
    gw: NsId,
    ix: NsId,
    rb: NsId,
    host_b: NsId,
    rc: NsId,
    host_c: NsId,
    rl: NsId,
    host_l: NsId,
}

impl Lab {
    fn build() -> Result<Lab, RunError> {
        let mut t = Topology::new()?;
        let host_a = t.add_ns("bneta")?;
        let ra = t.add_ns("ra")?;
        let gw = t.add_ns("gw")?;
        let ix = t.add_ns("ix")?;
        let rb = t.add_ns("rb")?;
        let host_b = t.add_ns("bnetb")?;
        let rc = t.add_ns("rc")?;
        let crt = t.add_ns("crt")?;
        let host_c = t.add_ns("bnetc")?;
        let rl = t.add_ns("rl")?;
        let host_l = t.add_ns("legacy")?;
        // A: host — router — gateway — exchange.
        t.add_veth((host_a, "eth0"), (ra, "a0"), 9000)?;
        t.add_veth((ra, "x0"), (gw, "gwi"), 9000)?;
        t.add_veth((gw, "gwo"), (ix, "p-a"), 9000)?;
        t.add_veth((rb, "x0"), (ix, "p-b"), 9000)?;
        t.add_veth((rc, "x0"), (ix, "p-c"), 9000)?;
        t.add_veth((rl, "x0"), (ix, "p-l"), 1500)?;
        t.add_veth((rb, "b0"), (host_b, "eth0"), 9000)?;
        t.add_veth((rc, "c0"), (crt, "c1"), 1500)?;
        t.add_veth((crt, "c2"), (host_c, "eth0"), 9000)?;
        t.add_veth((rl, "l0"), (host_l, "eth0"), 1500)?;
        let x = t.ns(ix);
        x.ip(&["link", "add", "br0", "mtu", "9000", "type", "bridge"])?;
        for p in ["p-a", "p-b", "p-c", "p-l"] {
            x.ip(&["link", "set", p, "master", "br0"])?;
        }
        x.ip(&["link", "set", "br0", "mtu", "9000"])?;
        // The bridge's ports segment what they send (no TSO/GSO): the
        // observers on them count wire frames, not super-packets.
        for p in ["p-a", "p-b", "p-c", "p-l"] {
            x.set_offloads(p, Offloads::WIRE_SENDER)?;
        }
        x.link_up("br0")?;
        x.add_addr("br0", &format!("{RS}/25"))?;
        let addr = |ns: NsId, dev: &str, a: &str| t.ns(ns).add_addr(dev, a);
        addr(ra, "x0", "198.51.100.1/25")?;
        addr(gw, "gwo", "198.51.100.2/25")?;
        addr(rb, "x0", "198.51.100.11/25")?;
        addr(rc, "x0", "198.51.100.12/25")?;
        addr(rl, "x0", "198.51.100.13/25")?;
        addr(host_a, "eth0", &format!("{HOST_A}/27"))?;
        addr(ra, "a0", "198.51.100.158/27")?;
        addr(host_b, "eth0", &format!("{HOST_B}/26"))?;
        addr(rb, "b0", "203.0.113.126/26")?;
        addr(rc, "c0", "203.0.113.1/30")?;
        addr(crt, "c1", "203.0.113.2/30")?;
        addr(crt, "c2", "203.0.113.190/26")?;
        addr(host_c, "eth0", &format!("{HOST_C}/26"))?;
        addr(rl, "l0", "203.0.113.254/26")?;
        addr(host_l, "eth0", &format!("{HOST_L}/26"))?;
        let route = |ns: NsId, dst: &str, via: &str| t.ns(ns).add_route(dst, via);
        for (h, via) in [
            (host_a, "198.51.100.158"),
            (host_b, "203.0.113.126"),
            (host_c, "203.0.113.190"),
            (host_l, "203.0.113.254"),
        ] {
            t.ns(h).ip(&["route", "add", "default", "via", via])?;
            t.ns(h).set_offloads("eth0", Offloads::WIRE_SENDER)?;
        }
        t.ns(crt).ip(&["route", "add", "default", "via", "203.0.113.1"])?;
        route(rc, PREFIX_C, "203.0.113.2")?;
        for r in [ra, rb, rc, crt, rl] {
            t.ns(r).enable_forwarding()?;
        }
        // Wire-like senders on the routers' exchange ports too: frames on
        // the bridge are what a wire would carry.
        for r in [ra, rb, rc, rl] {
            t.ns(r).set_offloads("x0", Offloads::WIRE_SENDER)?;
        }
        let _ = crt;
        Ok(Lab { topo: t, host_a, ra, gw, ix, rb, host_b, rc, host_c, rl, host_l })
    }

    fn ns(&self, id: NsId) -> &Netns {
        self.topo.ns(id)
    }
}

fn rs_config(log: &str) -> String {
    let members = [
        ("a", "198.51.100.1", AS_A),
        ("gw", "198.51.100.2", AS_A),
        ("b", "198.51.100.11", AS_B),
        ("c", "198.51.100.12", AS_C),
        ("l", "198.51.100.13", AS_L),
    ];
    let sessions: String = members
        .iter()
        .map(|(n, a, asn)| format!("protocol bgp m_{n} from rsmember {{ neighbor {a} as {asn}; }}\n"))
        .collect();
    format!(
        r#"log "{log}" all;
router id {RS};
protocol device {{ }}
template bgp rsmember {{
  local {RS} as {AS_RS};
  rs client;
  connect retry time 1;
  ipv4 {{ import all; export all; }};
}}
{sessions}"#
    )
}

fn router_a_config(log: &str) -> String {
    format!(
        r#"log "{log}" all;
router id 198.51.100.1;
protocol device {{ }}
protocol direct {{ ipv4; interface "a0"; }}
protocol kernel {{ ipv4 {{ import none; export where source = RTS_BGP; }}; }}
protocol bgp exchange {{
  local 198.51.100.1 as {AS_A};
  neighbor {RS} as {AS_RS};
  connect retry time 1;
  ipv4 {{ import all; export where source = RTS_DEVICE; }};
}}
"#
    )
}

/// A neighbour's border: announces `prefix` to the route server (with
/// the claim `imtu`) and installs what it learns in its kernel.
fn member_config(log: &str, me: &str, asn: u32, prefix: &str, imtu: Option<u32>) -> String {
    let mut c = announce_config(log, me, asn, (RS, AS_RS), &[prefix], imtu);
    c.push_str("protocol kernel { ipv4 { import none; export where source = RTS_BGP; }; }\n");
    c
}

/// Both directions at once between A and `other`, sha256 on.
fn both_ways(
    lab: &Lab,
    other: NsId,
    other_addr: &str,
    bytes: u64,
    pace: Pace,
    names: [&str; 2],
    progress: &AtomicU64,
) -> Vec<Exact> {
    let w = BothWays { bytes, pace, stall: Duration::from_secs(20), names, ports: [5101, 5102] };
    super::both_ways((lab.ns(lab.host_a), HOST_A), (lab.ns(other), other_addr), w, progress)
}

/// Runs the exchange experiment; `say` gets progress lines.
pub fn run(o: &ExchangeOptions, say: &dyn Fn(&str)) -> Result<ExchangeResult, RunError> {
    exp::require(
        "px lab border",
        &["bird", "birdc", "sha256sum", "ethtool"],
        1,
        "apt-get install bird2 (scripts/lib.sh)",
    )?;
    let lab = Lab::build()?;
    let scratch = Scratch::new("exchange")?;
    let log = |n: &str| Bird::log_path(&scratch.0, n).to_string_lossy().into_owned();
    let bird_err = |e: super::bird::BirdError| RunError::Step(e.to_string());
    // Responders first (the gateway measures as soon as it learns).
    let mut responders: Vec<LabChild> = Vec::new();
    for (h, a) in [(lab.host_b, HOST_B), (lab.host_c, HOST_C)] {
        let exe = o.exe.to_string_lossy().into_owned();
        responders.push(lab.ns(h).spawn(&exe, &["fpmtud", "--port", &RESPONDER_PORT.to_string(), "--bind", a])?);
    }
    let started = Instant::now();
    let gw = GatewayProcess::start_in(
        lab.ns(lab.gw),
        "gwi",
        "gwo",
        &[],
        &o.exe,
        &["--emtu", "1500", "--imtu-table", &IMTU_TABLE.to_string(), "--metrics", "127.0.0.1:9464"],
    )?;
    say(
        "exchange: gateway up (eMTU 1500, following table 30); starting BIRD: route server, A, B, C, L, the gateway's learner",
    );
    let _rs = Bird::start(lab.ns(lab.ix), &scratch.0, "rs", &rs_config(&log("rs"))).map_err(bird_err)?;
    let _ra = Bird::start(lab.ns(lab.ra), &scratch.0, "ra", &router_a_config(&log("ra"))).map_err(bird_err)?;
    let conf_b = |imtu| member_config(&log("rb"), "198.51.100.11", AS_B, PREFIX_B, imtu);
    let rb = Bird::start(lab.ns(lab.rb), &scratch.0, "rb", &conf_b(Some(9000))).map_err(bird_err)?;
    let _rc = Bird::start(
        lab.ns(lab.rc),
        &scratch.0,
        "rc",
        &member_config(&log("rc"), "198.51.100.12", AS_C, PREFIX_C, Some(9000)),
    )
    .map_err(bird_err)?;
    let _rl = Bird::start(
        lab.ns(lab.rl),
        &scratch.0,
        "rl",
        &member_config(&log("rl"), "198.51.100.13", AS_L, PREFIX_L, None),
    )
    .map_err(bird_err)?;
    let _gwb = Bird::start(
        lab.ns(lab.gw),
        &scratch.0,
        "gwbird",
        &learn_config(&log("gwbird"), "198.51.100.2", AS_A, (RS, AS_RS), &[AS_B, AS_C, AS_L], true),
    )
    .map_err(bird_err)?;
    _rs.wait_established(&["m_a", "m_gw", "m_b", "m_c", "m_l"], Duration::from_secs(40)).map_err(bird_err)?;
    say("exchange: all sessions with the route server established; waiting for the gateway's verdicts");
    gw.wait_log(&format!("{PREFIX_B} advertises 9000, path to {HOST_B} carries"), Duration::from_secs(30))?;
    gw.wait_log(&format!("{PREFIX_C} advertises 9000"), Duration::from_secs(30))?;
    let verify_ms = started.elapsed().as_secs_f64() * 1e3;
    // Routes in every router before traffic.
    for (ns, dst) in [
        (lab.ra, PREFIX_B),
        (lab.ra, PREFIX_C),
        (lab.ra, PREFIX_L),
        (lab.rb, "198.51.100.128/27"),
        (lab.rc, "198.51.100.128/27"),
        (lab.rl, "198.51.100.128/27"),
    ] {
        wait_route(lab.ns(ns), dst)?;
    }
    for h in [HOST_B, HOST_C, HOST_L] {
        lab.ns(lab.host_a).ping(h, 3)?;
    }
    let full = Pace::FULL;
    let progress = AtomicU64::new(0);
    let mut transfers = Vec::new();

    say("exchange: A <-> B (verified 9000)");
    let obs = FrameObserver::start(lab.ns(lab.ix), "p-b")?;
    transfers.extend(both_ways(&lab, lab.host_b, HOST_B, o.bytes, full, ["a_to_b", "b_to_a"], &progress));
    let bnet = Frames::of(obs.stop());

    say("exchange: A <-> L (legacy, translated)");
    let obs = FrameObserver::start(lab.ns(lab.ix), "p-l")?;
    transfers.extend(both_ways(&lab, lab.host_l, HOST_L, o.bytes, full, ["a_to_l", "l_to_a"], &progress));
    let legacy = Frames::of(obs.stop());

    say("exchange: A <-> C (claims 9000 behind a 1500 hop)");
    let obs = FrameObserver::start(lab.ns(lab.ix), "p-c")?;
    let liar_runs = both_ways(&lab, lab.host_c, HOST_C, o.bytes, full, ["a_to_c", "c_to_a"], &progress);
    let liar = Frames::of(obs.stop());
    transfers.extend(liar_runs.iter().cloned());

    say("exchange: A <-> B while B drops its claim");
    // Paced so the transfer spans the withdrawal: 64 KiB every 5 ms.
    let pace = Pace { chunk: 64 * 1024, gap: Duration::from_millis(5) };
    let bytes = (o.withdraw_transfer.as_secs_f64() / 0.005) as u64 * 64 * 1024;
    let mut fallback_ms = f64::NAN;
    let mut after = FrameSizes::default();
    let runs = std::thread::scope(|sc| -> Result<_, RunError> {
        let h = sc.spawn(|| {
            both_ways(&lab, lab.host_b, HOST_B, bytes, pace, ["a_to_b_withdrawn", "b_to_a_withdrawn"], &progress)
        });
        std::thread::sleep(o.withdraw_transfer / 3);
        let t = Instant::now();
        rb.reconfigure(&conf_b(None)).map_err(bird_err)?;
        gw.wait_log(&format!("{PREFIX_B} withdrawn"), Duration::from_secs(20))?;
        fallback_ms = t.elapsed().as_secs_f64() * 1e3;
        let obs = FrameObserver::start(lab.ns(lab.ix), "p-b")?;
        let r = h.join().map_err(|_| RunError::Step("transfer thread panicked".into()))?;
        after = obs.stop();
        Ok(r)
    })?;
    transfers.extend(runs);

    let exit = gw.stop()?;
    let gateway_log: Vec<String> = exit.log.lines().filter(|l| l.contains("imtu:")).map(str::to_owned).collect();
    let lie_logged = gateway_log.iter().any(|l| l.contains(PREFIX_C) && l.contains("lie detected"));
    let lost_bytes = transfers.iter().map(|t| t.lost).sum();
    let transfers_exact = transfers.iter().all(|t| t.exact);
    drop(responders);
    Ok(ExchangeResult {
        to_bnet_max_frame: bnet.to_max.max(bnet.from_max),
        bnet,
        to_legacy_max_frame: legacy.to_max.max(legacy.from_max),
        legacy,
        lie_detected: lie_logged && liar_runs.iter().all(|t| t.exact) && liar.to_max <= 1500,
        liar,
        lost_bytes,
        transfers_exact,
        transfers,
        withdraw_fallback_ms: fallback_ms,
        after_withdraw: Frames::of(after),
        verify_ms,
        gateway_log,
        imtu_passed: exit.counter("imtu_passed"),
    })
}

/// Waits until `ns` has a kernel route to `dst`.
fn wait_route(ns: &Netns, dst: &str) -> Result<(), RunError> {
    let t0 = Instant::now();
    loop {
        let out = ns.ip(&["-4", "route", "show", dst])?;
        if out.contains(" via ") || out.contains("nexthop") {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(20) {
            return Err(RunError::Step(format!("{}: no route to {dst}", ns.name())));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_server_config_has_every_member_as_rs_client() {
        let c = rs_config("/l");
        assert_eq!(c.matches("from rsmember").count(), 5);
        assert!(c.contains("rs client"));
        super::super::bird_parses(&c).unwrap();
        super::super::bird_parses(&router_a_config("/l")).unwrap();
        super::super::bird_parses(&member_config("/l", "198.51.100.11", AS_B, PREFIX_B, Some(9000))).unwrap();
    }

    #[test]
    fn observer_directions_map_to_and_from_the_neighbour() {
        let mut s = FrameSizes::default();
        s.tx.max_l3 = 9000;
        s.tx.up_to_9000 = 3;
        s.tx.frames = 5;
        s.rx.max_l3 = 1500;
        let f = Frames::of(s);
        assert_eq!((f.to_max, f.from_max, f.to_jumbo, f.to_frames), (9000, 1500, 3, 5));
    }
}
