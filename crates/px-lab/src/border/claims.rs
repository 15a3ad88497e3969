//! What no iMTU claim may make the gateway do (issue 35 item 5), with real
//! packets: **no claim, true or false, makes the gateway send a frame that
//! a destination's path cannot carry without the flow recovering by
//! itself, ICMP filtered or not** (`docs/border.md`).
//!
//! ```text
//!                                  ┌─9000─ hB   203.0.113.65  B's responder (px fpmtud)
//!  hA ─9000─ [gw] ─outer─ rb ──────┤
//!  198.51.100.10     (9000 or 1500)└─1500─ r2 ─9000─ hB2 203.0.113.97   B's prefix, behind a 1500 hop
//!                                              └9000─ hC  203.0.113.129  C's "responder": a liar
//! ```
//!
//! The claims are written into the gateway's kernel table 30 as a routing
//! daemon would (`203.0.113.64/26 mtu 9000`, `203.0.113.128/26 mtu
//! 9000`, both via rb): this lab is about the gateway's checks, not BGP
//! (`exchange.rs` runs the BGP part). rb and r2 drop the ICMP
//! "fragmentation needed" they would send (nftables, output hook): an
//! ordinary neighbour whose hosts sit behind a smaller hop, with ICMP
//! filtered on its side.
//!
//! Three runs ([`Case`]):
//! - [`Case::Filtered`]: hA ↔ hB2 sha256-checked both ways. B's claim is
//!   true toward its responder, false toward hB2.
//! - [`Case::Liar`]: hC answers every F-PMTUD probe it receives, even one
//!   that arrived in fragments, with "arrived whole at its full size".
//! - [`Case::OuterPort`]: the outer port is 1500 bytes and the gateway
//!   host's own address sits on a second, 9000-byte port into rb (so its
//!   own probes leave by a path the gateway's frames do not take); hA ↔ hB.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{BothWays, Exact};
use crate::{RunError, exp};
use px_netns::gateway::GatewayProcess;
use px_netns::netns::{Netns, Offloads};
use px_netns::observe::{FrameObserver, FrameSizes};
use px_netns::topology::{NsId, Topology};
use px_netns::traffic::{BulkSpec, Pace, bulk_tcp};

const HOST_A: &str = "198.51.100.10";
const HOST_B: &str = "203.0.113.65";
const HOST_B2: &str = "203.0.113.97";
const HOST_C: &str = "203.0.113.129";
const PREFIX_B: &str = "203.0.113.64/26";
const PREFIX_C: &str = "203.0.113.128/26";
const RESPONDER_PORT: u16 = 9999;
const METRICS: &str = "127.0.0.1:9465";

/// Which claim is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    /// A host of a verified prefix behind a 1500-byte hop, ICMP filtered.
    Filtered,
    /// A responder behind a 1500-byte hop that says everything arrived whole.
    Liar,
    /// A 1500-byte outer port, the gateway host's own probes leaving by a
    /// 9000-byte port.
    OuterPort,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ClaimsOptions {
    /// The `px` binary.
    pub exe: std::path::PathBuf,
    /// Bytes each way.
    pub bytes: u64,
    /// Longest a transfer may stand still before it counts as failed.
    pub stall: Duration,
}

/// What one run showed.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimsResult {
    /// The case.
    pub case: Case,
    /// The transfers.
    pub transfers: Vec<Exact>,
    /// Every transfer complete and exact.
    pub exact: bool,
    /// Frames that left the gateway's outer port (an observer there, wire
    /// frames; the gateway host's own probes included): the largest IP
    /// length.
    pub outer_max_frame: usize,
    /// ... and how many were larger than 1500.
    pub outer_jumbo_frames: u64,
    /// The gateway's iMTU log lines.
    pub gateway_log: Vec<String>,
    /// The gateway's counters at the end.
    pub imtu_passed: u64,
    /// Echo probes it sent, replies that confirmed a destination, errors
    /// about its probes it took.
    pub imtu_probes: u64,
    /// See `imtu_probes`.
    pub imtu_confirmed: u64,
    /// Frames the gateway's ports refused (`px_gateway_send_errors_total`:
    /// a frame larger than the port sends).
    pub send_errors: u64,
    /// The claim the case tries was trusted by the follower ("verified"
    /// in its log).
    pub claim_trusted: bool,
    /// Case `Liar`: probes the liar answered with "arrived whole" (it did
    /// lie: its reports reached the gateway).
    pub liar_answered: u64,
    /// Case `Filtered`: time to the first large frame toward a destination
    /// seen for the first time (hB, the verified responder's host): from
    /// hA's first connection to it to the end of the first connection whose
    /// data arrived in segments larger than 1500 (the receiver's
    /// `rcv_mss`), with a new 64 KiB connection after each, ms.
    pub time_to_large_ms: Option<f64>,
    /// ... and the connections before it (translated: 1500 outside).
    pub connections_before_large: u32,
    /// Case `Filtered`: frames larger than 1500 toward hB in a transfer
    /// started after the confirmation (the protection does not cost the
    /// verified destinations their large frames).
    pub jumbo_after_confirm: Option<u64>,
}

struct Lab {
    topo: Topology,
    host_a: NsId,
    gw: NsId,
    host_b: NsId,
    host_b2: NsId,
    host_c: NsId,
}

impl Lab {
    fn build(case: Case) -> Result<Lab, RunError> {
        let mut t = Topology::new()?;
        let host_a = t.add_ns("clma")?;
        let gw = t.add_ns("clmgw")?;
        let rb = t.add_ns("clmrb")?;
        let r2 = t.add_ns("clmr2")?;
        let host_b = t.add_ns("clmb")?;
        let host_b2 = t.add_ns("clmb2")?;
        let host_c = t.add_ns("clmc")?;
        let outer_mtu = if case == Case::OuterPort { 1500 } else { 9000 };
        t.add_veth((host_a, "eth0"), (gw, "gwi"), 9000)?;
        t.add_veth((gw, "gwo"), (rb, "x0"), outer_mtu)?;
        t.add_veth((rb, "b0"), (host_b, "eth0"), 9000)?;
        t.add_veth((rb, "r0"), (r2, "r0"), 1500)?;
        t.add_veth((r2, "b1"), (host_b2, "eth0"), 9000)?;
        t.add_veth((r2, "c1"), (host_c, "eth0"), 9000)?;
        let ns = |id| t.ns(id);
        ns(host_a).add_addr("eth0", &format!("{HOST_A}/25"))?;
        ns(rb).add_addr("x0", "198.51.100.1/25")?;
        ns(rb).add_addr("b0", "203.0.113.94/27")?;
        ns(host_b).add_addr("eth0", &format!("{HOST_B}/27"))?;
        ns(rb).add_addr("r0", "203.0.113.1/30")?;
        ns(r2).add_addr("r0", "203.0.113.2/30")?;
        ns(r2).add_addr("b1", "203.0.113.126/27")?;
        ns(host_b2).add_addr("eth0", &format!("{HOST_B2}/27"))?;
        ns(r2).add_addr("c1", "203.0.113.190/26")?;
        ns(host_c).add_addr("eth0", &format!("{HOST_C}/26"))?;
        ns(host_a).ip(&["route", "add", "default", "via", "198.51.100.1"])?;
        ns(host_b).ip(&["route", "add", "default", "via", "203.0.113.94"])?;
        ns(host_b2).ip(&["route", "add", "default", "via", "203.0.113.126"])?;
        ns(host_c).ip(&["route", "add", "default", "via", "203.0.113.190"])?;
        ns(rb).add_route("203.0.113.96/27", "203.0.113.2")?;
        ns(rb).add_route(PREFIX_C, "203.0.113.2")?;
        ns(r2).ip(&["route", "add", "default", "via", "203.0.113.1"])?;
        // The gateway host's own address and its route toward B and C:
        // on the outer port, or on a second port of its own.
        let via = if case == Case::OuterPort {
            t.add_veth((gw, "gwm"), (rb, "m0"), 9000)?;
            t.ns(rb).add_addr("m0", "198.51.100.129/25")?;
            t.ns(gw).add_addr("gwm", "198.51.100.130/25")?;
            ("198.51.100.129", "gwm")
        } else {
            t.ns(gw).add_addr("gwo", "198.51.100.2/25")?;
            ("198.51.100.1", "gwo")
        };
        let g = t.ns(gw);
        g.ip(&["route", "add", "203.0.113.0/24", "via", via.0, "dev", via.1])?;
        // The claims, as BIRD's krt_mtu would write them.
        for p in [PREFIX_B, PREFIX_C] {
            g.ip(&["route", "add", p, "via", via.0, "dev", via.1, "table", "30", "mtu", "9000"])?;
        }
        for r in [rb, r2] {
            t.ns(r).enable_forwarding()?;
            filter_frag_needed(t.ns(r))?;
        }
        // Wire-like senders; on the gateway's outer port too, so that the
        // observer there counts wire frames (GSO done before the tap).
        for (h, dev) in
            [(host_a, "eth0"), (host_b, "eth0"), (host_b2, "eth0"), (host_c, "eth0"), (rb, "x0"), (gw, "gwo")]
        {
            t.ns(h).set_offloads(dev, Offloads::WIRE_SENDER)?;
        }
        Ok(Lab { topo: t, host_a, gw, host_b, host_b2, host_c })
    }

    fn ns(&self, id: NsId) -> &Netns {
        self.topo.ns(id)
    }
}

/// Drops the ICMP "fragmentation needed" a router sends (its own output).
fn filter_frag_needed(ns: &Netns) -> Result<(), RunError> {
    let script = "table ip px_filter {\n  chain out {\n    type filter hook output priority 0;\n    \
                  icmp type destination-unreachable icmp code frag-needed drop\n  }\n}\n";
    let mut c = ns.command("nft");
    c.args(["-f", "-"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::null());
    let mut child = c.spawn().map_err(|e| RunError::Step(format!("nft: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin.write_all(script.as_bytes()).map_err(|e| RunError::Step(format!("nft: {e}")))?;
    }
    let status = child.wait().map_err(|e| RunError::Step(format!("nft: {e}")))?;
    if !status.success() {
        return Err(RunError::Step(format!("{}: nft -f refused the ICMP filter", ns.name())));
    }
    Ok(())
}

/// A responder that lies: it answers every F-PMTUD probe it receives
/// (the kernel reassembles fragments) with "arrived whole, unfragmented,
/// at the size the probe says", echoing its nonce and id. Runs in a thread
/// inside `ns` until dropped.
struct Liar {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Probes answered.
    answered: Arc<AtomicU64>,
}

impl Liar {
    fn start(ns: &Netns, bind: SocketAddr) -> Result<Liar, RunError> {
        let sock = ns.run(|| UdpSocket::bind(bind))?.map_err(|e| RunError::Step(format!("liar bind {bind}: {e}")))?;
        sock.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| RunError::Step(e.to_string()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let (s, a) = (stop.clone(), answered.clone());
        let thread = std::thread::Builder::new()
            .name("px-lab-liar".into())
            .spawn(move || lie(&sock, &s, &a))
            .map_err(|e| RunError::Step(e.to_string()))?;
        Ok(Liar { stop, thread: Some(thread), answered })
    }
}

fn lie(sock: &UdpSocket, stop: &AtomicBool, answered: &AtomicU64) {
    use px_pmtud::fpmtud::wire::{Fragments, ProbeKind, ReportRepr, Request, parse_request};
    let mut buf = vec![0u8; 65536];
    let mut out = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
        let Ok(Request::Probe(p)) = parse_request(&buf[..n]) else { continue };
        let r = ReportRepr {
            nonce: p.nonce,
            probe_id: p.probe_id,
            confirm: p.kind == ProbeKind::Confirm,
            reassembled: true,
            fragmented: false,
            truncated: false,
            link_mtu: 9000,
            probe_ip_len: p.ip_len,
            largest_ip_len: p.ip_len,
            fragments: Fragments::none(),
        };
        if let Ok(len) = r.emit(&mut out)
            && sock.send_to(&out[..len], from).is_ok()
        {
            answered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Liar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Both directions at once between hA and `other`, sha256 on; a failure
/// is a result, not an error.
fn both_ways(lab: &Lab, other: NsId, other_addr: &str, o: &ClaimsOptions, names: [&str; 2]) -> Vec<Exact> {
    let w = BothWays { bytes: o.bytes, pace: Pace::FULL, stall: o.stall, names, ports: [5201, 5202] };
    super::both_ways((lab.ns(lab.host_a), HOST_A), (lab.ns(other), other_addr), w, &AtomicU64::new(0))
}

/// Reads one counter family (summed over workers) from the gateway's
/// metrics endpoint, from inside its namespace.
fn scrape(ns: &Netns, family: &str) -> Result<u64, RunError> {
    Ok(super::scrape(ns, METRICS, &[family])?[0])
}

/// Runs one case; `say` gets progress lines.
pub fn run(case: Case, o: &ClaimsOptions, say: &dyn Fn(&str)) -> Result<ClaimsResult, RunError> {
    exp::require("the iMTU claims lab", &["nft", "sha256sum", "ethtool"], 1, "apt-get install nftables")?;
    let lab = Lab::build(case)?;
    let exe = o.exe.to_string_lossy().into_owned();
    let fpmtud =
        lab.ns(lab.host_b).spawn(&exe, &["fpmtud", "--port", &RESPONDER_PORT.to_string(), "--bind", HOST_B])?;
    let liar =
        Liar::start(lab.ns(lab.host_c), SocketAddr::new(HOST_C.parse().expect("a lab address"), RESPONDER_PORT))?;
    let gw = GatewayProcess::start_in(
        lab.ns(lab.gw),
        "gwi",
        "gwo",
        &[],
        &o.exe,
        &["--emtu", "1500", "--imtu-table", "30", "--metrics", METRICS],
    )?;
    let (prefix, responder) = match case {
        Case::Liar => (PREFIX_C, HOST_C),
        _ => (PREFIX_B, HOST_B),
    };
    say(&format!("claims/{case:?}: gateway up; waiting for its verdict on {prefix}"));
    gw.wait_log(&format!("{prefix} advertises 9000"), Duration::from_secs(20))?;
    // Both claims are judged in one pass; give the second its turn.
    gw.wait_log(
        &format!("{} advertises 9000", if case == Case::Liar { PREFIX_B } else { PREFIX_C }),
        Duration::from_secs(20),
    )?;
    let obs = FrameObserver::start(lab.ns(lab.gw), "gwo")?;
    let mut transfers = Vec::new();
    let mut time_to_large_ms = None;
    let mut connections_before_large = 0;
    let mut jumbo_after_confirm = None;
    match case {
        Case::Filtered => {
            say("claims: hA <-> hB2 (B's prefix, behind a 1500 hop, ICMP filtered)");
            transfers.extend(both_ways(&lab, lab.host_b2, HOST_B2, o, ["a_to_b2", "b2_to_a"]));
            say("claims: hA -> hB (B's responder host), new connections until one passes untouched");
            let t0 = Instant::now();
            let spec = BulkSpec::new(SocketAddr::new(HOST_B.parse().expect("a lab address"), 5203), 1, 64 << 10);
            while t0.elapsed() < Duration::from_secs(5) {
                let r = bulk_tcp(lab.ns(lab.host_a), lab.ns(lab.host_b), &spec)
                    .map_err(|e| RunError::Step(e.to_string()))?;
                if r.flows.first().is_some_and(|f| f.receiver.rcv_mss > 1500) {
                    time_to_large_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                connections_before_large += 1;
            }
            let o2 = FrameObserver::start(lab.ns(lab.gw), "gwo")?;
            transfers.extend(both_ways(&lab, lab.host_b, HOST_B, o, ["a_to_b", "b_to_a"]));
            let s = o2.stop();
            jumbo_after_confirm = Some(s.tx.up_to_9000 + s.tx.above_9000);
        }
        Case::Liar => {
            say("claims: hA <-> hC (C's responder lies)");
            transfers.extend(both_ways(&lab, lab.host_c, HOST_C, o, ["a_to_c", "c_to_a"]));
        }
        Case::OuterPort => {
            say("claims: hA <-> hB through a 1500-byte outer port");
            transfers.extend(both_ways(&lab, lab.host_b, HOST_B, o, ["a_to_b", "b_to_a"]));
        }
    }
    let seen: FrameSizes = obs.stop();
    let send_errors = scrape(lab.ns(lab.gw), "px_gateway_send_errors_total")?;
    let exit = gw.stop()?;
    let liar_answered = liar.answered.load(Ordering::Relaxed);
    drop(liar);
    drop(fpmtud);
    let gateway_log: Vec<String> = exit.log.lines().filter(|l| l.contains("imtu:")).map(str::to_owned).collect();
    let claim_trusted =
        gateway_log.iter().any(|l| l.contains(prefix) && l.contains(responder) && l.contains("verified at"));
    Ok(ClaimsResult {
        case,
        exact: transfers.iter().all(|t| t.exact),
        transfers,
        outer_max_frame: seen.tx.max_l3,
        outer_jumbo_frames: seen.tx.up_to_9000 + seen.tx.above_9000,
        gateway_log,
        imtu_passed: exit.counter("imtu_passed"),
        imtu_probes: exit.counter("imtu_probes"),
        imtu_confirmed: exit.counter("imtu_confirmed"),
        send_errors,
        claim_trusted,
        liar_answered,
        time_to_large_ms,
        connections_before_large,
        jumbo_after_confirm,
    })
}
