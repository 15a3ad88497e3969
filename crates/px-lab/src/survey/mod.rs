//! The lab "Internet" of `px lab survey`: a client, three routers and two
//! server namespaces answering for hundreds of addresses, each address
//! with a known behaviour; `px survey` runs in the client namespace
//! against thousands of targets (address × port) and its classification is
//! compared, target by target, with the ground truth.
//!
//! ```text
//!  client ── r1 ── r2 ── r3 ─┬─ srv   203.0.113.0/24 and 198.51.100.128/25 (local routes), HTTP on 6 ports
//!  .1      .2 .5  .6 .9 .10  └─ poor  the addresses of the poor-reassembly class (/32 routes from r3)
//! ```
//!
//! Behaviours, by destination address (nftables sets in the routers):
//! - `ok`: plain path.
//! - `lossy`: r1 drops a share of packets each way at random (`numgen random`).
//! - `icmp_blackhole`: r2 drops ICMP destination-unreachable toward it (PMTUD fails).
//! - `frag_filter_last_hop`: r3 drops fragments toward it before routing.
//! - `frag_filter_in_path`: r2 does.
//! - `poor_reassembly`: served by `poor`, whose fragment memory
//!   (`ipfrag_high_thresh`) holds less than one fragment.
//! - `dead`: r3 drops everything toward it.
//! - `closed`: no server listens on its ports (RST).
//!
//! Only documentation addresses (the IPv4 ranges hold 512, so targets are
//! address × port pairs); routers answer TTL expiry without rate limit
//! (`icmp_ratelimit` 0, a large `icmp_msgs_per_sec` and `icmp_msgs_burst`;
//! a real router's limit is what the hop test's rounds are for). In `srv`
//! each address answers through its own routing table (`ip rule from A`,
//! `src A`): a host's path MTU cache is per route, so without this the first
//! PMTUD test would lower the MTU of every address's path to the client.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_survey::record::{Class, Pmtud, Record, Resume, Stop};
use px_survey::report::Summary;
use serde::Serialize;

use crate::RunError;
use px_netns::TempFile;
use px_netns::{Netns, NetnsGuard, Offloads, Veth};

/// The ports the servers listen on.
pub const PORTS: [u16; 6] = [80, 8080, 8000, 8008, 8888, 8081];
/// Ports of the `closed` addresses (nothing listens).
const CLOSED_PORTS: [u16; 6] = [9, 13, 19, 21, 23, 25];
/// Body bytes of every answer (more than one 1500-byte packet, for PMTUD).
pub const BODY: usize = 6000;

/// A target's behaviour in the lab: its ground truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Truth {
    Ok,
    Lossy,
    IcmpBlackhole,
    FragFilterLastHop,
    FragFilterInPath,
    PoorReassembly,
    Dead,
    Closed,
}

impl Truth {
    /// Shares of the addresses, in percent (the rest is `Ok`).
    pub const MIX: [(Truth, u32); 7] = [
        (Truth::Lossy, 8),
        (Truth::IcmpBlackhole, 8),
        (Truth::FragFilterLastHop, 4),
        (Truth::FragFilterInPath, 3),
        (Truth::PoorReassembly, 3),
        (Truth::Dead, 2),
        (Truth::Closed, 2),
    ];

    /// The class the survey must give.
    pub fn class(self) -> Class {
        match self {
            Truth::Ok | Truth::Lossy | Truth::IcmpBlackhole => Class::FragmentsOk,
            Truth::FragFilterLastHop => Class::FilteredLastHop,
            Truth::FragFilterInPath => Class::FilteredInPath,
            Truth::PoorReassembly => Class::DroppedAtDestination,
            Truth::Dead | Truth::Closed => Class::Unresponsive,
        }
    }

    /// The PMTUD verdict the address's one test must give.
    pub fn pmtud(self) -> Pmtud {
        match self {
            Truth::IcmpBlackhole => Pmtud::Fails,
            Truth::Dead | Truth::Closed => Pmtud::NotTested,
            _ => Pmtud::Works,
        }
    }

    /// Where fragments stop (hop number), for the filtering classes.
    fn stop_hop(self) -> Option<u8> {
        match self {
            Truth::FragFilterLastHop => Some(3),
            Truth::FragFilterInPath => Some(2),
            _ => None,
        }
    }
}

/// The lab's options.
#[derive(Clone, Debug)]
pub struct SurveyLabOptions {
    /// The `px` binary (runs `px survey` in the client namespace).
    pub exe: PathBuf,
    pub targets: usize,
    /// Seeds which address gets which behaviour.
    pub seed: u64,
    /// Percent of packets r1 drops each way toward `lossy` addresses.
    pub loss_percent: u32,
    /// Keep the survey's output here (default: a temporary file).
    pub output: Option<PathBuf>,
    /// Interrupt a first run with SIGINT after this long, then resume it
    /// with a second run (what a user's Ctrl-C and rerun do).
    pub interrupt_after: Option<Duration>,
}

/// The interrupted first run of [`SurveyLabOptions::interrupt_after`].
#[derive(Clone, Debug, Serialize)]
pub struct InterruptedRun {
    /// `px survey`'s exit status (130: interrupted).
    pub exit_code: Option<i32>,
    /// Records in the output after it.
    pub records: usize,
    /// The output ended with a whole line.
    pub whole_lines: bool,
}

/// One target the survey got wrong.
#[derive(Clone, Debug, Serialize)]
pub struct Mismatch {
    pub target: String,
    pub truth: Truth,
    pub got: String,
}

/// The result of `px lab survey`.
#[derive(Clone, Debug, Serialize)]
pub struct SurveyLabResult {
    pub targets: usize,
    pub addresses: usize,
    pub truth: BTreeMap<String, usize>,
    pub exact_classification: bool,
    pub mismatches: Vec<Mismatch>,
    pub frag_ok_fraction: f64,
    pub icmp_pmtud_ok_fraction: f64,
    pub last_hop_filters: usize,
    pub targets_per_second: f64,
    pub seconds: f64,
    pub loss_percent: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_run: Option<InterruptedRun>,
    pub summary: Summary,
    #[serde(skip)]
    pub table: String,
}

/// The target addresses of the lab, in order.
pub fn addresses() -> Vec<Ipv4Addr> {
    let a = (1..=254).map(|i| Ipv4Addr::new(203, 0, 113, i));
    let b = (129..=254).map(|i| Ipv4Addr::new(198, 51, 100, i));
    a.chain(b).collect()
}

/// Gives each address a behaviour (seeded shuffle, the mix of
/// [`Truth::MIX`], at least one address of each when there are enough).
pub fn assign(addrs: &[Ipv4Addr], seed: u64) -> Vec<(Ipv4Addr, Truth)> {
    let mut order: Vec<usize> = (0..addrs.len()).collect();
    let mut s = seed | 1;
    for i in (1..order.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let mut truth = vec![Truth::Ok; addrs.len()];
    let mut k = 0;
    for (t, pct) in Truth::MIX {
        let n = ((addrs.len() as u32 * pct).div_ceil(100) as usize).max(usize::from(addrs.len() >= 16));
        for _ in 0..n {
            if k < order.len() {
                truth[order[k]] = t;
                k += 1;
            }
        }
    }
    addrs.iter().copied().zip(truth).collect()
}

/// The targets: address × port, round robin over the addresses, `n` in all.
pub fn targets(assigned: &[(Ipv4Addr, Truth)], n: usize) -> Vec<(Ipv4Addr, u16, Truth)> {
    let mut out = Vec::with_capacity(n);
    for round in 0.. {
        for &(a, t) in assigned {
            if out.len() == n {
                return out;
            }
            let ports = if t == Truth::Closed { CLOSED_PORTS } else { PORTS };
            out.push((a, ports[round % ports.len()], t));
        }
        if round + 1 >= PORTS.len() {
            break;
        }
    }
    out
}

/// Compares the survey's records with the truth: every target must have
/// its class, the filtered ones their stop hop, every answering address
/// exactly one PMTUD test with its verdict.
pub fn compare(records: &[Record], truth: &HashMap<String, Truth>) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let mut tested: HashMap<Ipv4Addr, usize> = HashMap::new();
    let mut bad = |target: &str, t: Truth, got: String| out.push(Mismatch { target: target.into(), truth: t, got });
    for r in records {
        let Some(&t) = truth.get(&r.target) else {
            bad(&r.target, Truth::Ok, "a target the lab did not list".into());
            continue;
        };
        if r.class != t.class() {
            bad(&r.target, t, format!("class {}", r.class.name()));
        }
        if let Some(hop) = t.stop_hop()
            && r.fragment_path.as_ref().and_then(|p| p.stop_hop) != Some(hop)
        {
            bad(
                &r.target,
                t,
                format!("fragments stop at {:?}", r.fragment_path.as_ref().map(|p| (p.stop, p.stop_hop))),
            );
        }
        if t == Truth::PoorReassembly && r.fragment_path.as_ref().map(|p| p.stop) != Some(Stop::Destination) {
            bad(&r.target, t, "fragments not seen reaching the server".into());
        }
        match r.icmp_pmtud {
            Pmtud::SameAddress => {}
            v => {
                *tested.entry(r.addr).or_default() += usize::from(v != Pmtud::NotTested);
                if v != t.pmtud() {
                    bad(&r.target, t, format!("icmp_pmtud {v:?} ({})", r.pmtud_note.as_deref().unwrap_or("")));
                }
            }
        }
    }
    for r in records {
        let t = truth.get(&r.target).copied().unwrap_or(Truth::Ok);
        let n = tested.get(&r.addr).copied().unwrap_or(0);
        if t.pmtud() != Pmtud::NotTested && n != 1 {
            out.push(Mismatch { target: r.target.clone(), truth: t, got: format!("{n} PMTUD tests for its address") });
        }
    }
    if records.len() != truth.len() {
        out.push(Mismatch {
            target: "(all)".into(),
            truth: Truth::Ok,
            got: format!("{} records for {} targets", records.len(), truth.len()),
        });
    }
    out
}

/// The HTTP servers of one namespace: a thread per port, a thread per
/// connection; stopped and joined on drop.
struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Servers {
    fn start(ns: &Netns) -> Result<Servers, RunError> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for port in PORTS {
            let listener = ns
                .run(|| {
                    let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))?;
                    l.set_nonblocking(true)?;
                    Ok::<_, std::io::Error>(l)
                })?
                .map_err(|e| format!("HTTP server on port {port}: {e}"))?;
            let (stop, name) = (stop.clone(), ns.name().to_string());
            threads.push(std::thread::spawn(move || {
                // Connections' threads are created from here: they must be
                // in the namespace too (setns is per thread, inherited).
                let Ok(_g) = NetnsGuard::enter(&name) else { return };
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            std::thread::spawn(move || answer(s));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }));
        }
        Ok(Servers { stop, threads })
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The answer of a lab server: its address and port in every line of a
/// 6000-byte body (so that every target's fingerprint differs).
pub fn body_for(local: SocketAddr) -> Vec<u8> {
    let line = format!("px lab survey: this is {local}\n");
    line.bytes().cycle().take(BODY).collect()
}

fn answer(mut s: TcpStream) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut req = Vec::new();
    let mut buf = [0u8; 2048];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 << 10 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let Ok(local) = s.local_addr() else { return };
    let body = body_for(local);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(&body));
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Until the client's RST or FIN.
    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
}

fn nft(ns: &Netns, script: &str) -> Result<(), RunError> {
    let mut c = ns.command("nft");
    c.args(["-f", "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("nft in {}: {e}", ns.name()))?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(script.as_bytes()).map_err(|e| format!("nft: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if !out.status.success() {
        return Err(format!("nft in {}: {}\n{script}", ns.name(), String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}

fn ip_batch(ns: &Netns, lines: &str) -> Result<(), RunError> {
    let mut c = std::process::Command::new("ip");
    c.args(["-n", ns.name(), "-batch", "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("ip -batch: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(lines.as_bytes()).map_err(|e| format!("ip -batch: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("ip -batch: {e}"))?;
    if !out.status.success() {
        return Err(format!("ip -batch in {}: {}", ns.name(), String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}

fn set_of(assigned: &[(Ipv4Addr, Truth)], t: Truth) -> String {
    let v: Vec<String> = assigned.iter().filter(|(_, x)| *x == t).map(|(a, _)| a.to_string()).collect();
    // nftables does not accept an empty element list.
    // (203.0.113.255 is never a target.)
    if v.is_empty() { "203.0.113.255".into() } else { v.join(", ") }
}

/// The namespaces of the lab, removed on drop.
struct Internet {
    client: Netns,
    _routers: [Netns; 3],
    _srv: Netns,
    _poor: Netns,
    _servers: [Servers; 2],
}

fn build(assigned: &[(Ipv4Addr, Truth)], loss_percent: u32) -> Result<Internet, RunError> {
    let client = Netns::new("svc")?;
    let r1 = Netns::new("svr1")?;
    let r2 = Netns::new("svr2")?;
    let r3 = Netns::new("svr3")?;
    let srv = Netns::new("svsrv")?;
    let poor = Netns::new("svpoor")?;
    let links = [
        (&client, "c0", &r1, "r1a", "198.51.100.1/30", "198.51.100.2/30"),
        (&r1, "r1b", &r2, "r2a", "198.51.100.5/30", "198.51.100.6/30"),
        (&r2, "r2b", &r3, "r3a", "198.51.100.9/30", "198.51.100.10/30"),
        (&r3, "r3b", &srv, "s0", "198.51.100.13/30", "198.51.100.14/30"),
        (&r3, "r3c", &poor, "p0", "198.51.100.17/30", "198.51.100.18/30"),
    ];
    let wire = Offloads::WIRE_SENDER.with(Offloads { tso: None, gso: None, gro: Some(false) });
    for (a, ad, b, bd, aa, ba) in links {
        Veth::create(a, ad, b, bd, 1500)?;
        a.add_addr(ad, aa)?;
        b.add_addr(bd, ba)?;
        a.set_offloads(ad, wire)?;
        b.set_offloads(bd, wire)?;
    }
    let targets_v4 = ["203.0.113.0/24", "198.51.100.128/25"];
    for r in [&r1, &r2, &r3] {
        r.enable_forwarding()?;
        r.set_sysctl("net.ipv4.icmp_ratelimit", "0")?;
        r.set_sysctl("net.ipv4.icmp_msgs_per_sec", "1000000")?;
        // The global bucket refills per jiffy: without a large burst, a
        // router answers at most 50 expiries in one.
        r.set_sysctl("net.ipv4.icmp_msgs_burst", "1000000")?;
    }
    for p in targets_v4 {
        client.add_route(p, "198.51.100.2")?;
        r1.add_route(p, "198.51.100.6")?;
        r2.add_route(p, "198.51.100.10")?;
        r3.add_route(p, "198.51.100.14")?;
    }
    for (via, r) in [("198.51.100.5", &r2), ("198.51.100.9", &r3)] {
        r.add_route("198.51.100.0/30", via)?;
    }
    r3.add_route("198.51.100.4/30", "198.51.100.9")?;
    // srv answers for every target address, poor for its own: each address
    // answers through its own routing table (see the module notes).
    let per_address = |mine: &dyn Fn(Truth) -> bool, gw: &str| {
        let mut batch = String::new();
        for (i, (a, t)) in assigned.iter().enumerate() {
            if mine(*t) {
                let table = 1000 + i;
                batch += &format!("rule add from {a} lookup {table} pref {table}\n");
                batch += &format!("route add 198.51.100.0/30 via {gw} src {a} table {table}\n");
            }
        }
        batch + &format!("route add 198.51.100.0/30 via {gw}\n")
    };
    let mut batch: String = targets_v4.iter().map(|p| format!("route add local {p} dev lo table local\n")).collect();
    batch += &per_address(&|_| true, "198.51.100.13");
    ip_batch(&srv, &batch)?;
    let mut batch = String::new();
    for (a, t) in assigned {
        if *t == Truth::PoorReassembly {
            batch += &format!("route add local {a}/32 dev lo table local\n");
        }
    }
    batch += &per_address(&|t| t == Truth::PoorReassembly, "198.51.100.17");
    ip_batch(&poor, &batch)?;
    let mut batch = String::new();
    for (a, t) in assigned {
        if *t == Truth::PoorReassembly {
            batch += &format!("route add {a}/32 via 198.51.100.18\n");
        }
    }
    if !batch.is_empty() {
        ip_batch(&r3, &batch)?;
    }
    poor.set_sysctl("net.ipv4.ipfrag_low_thresh", "0")?;
    poor.set_sysctl("net.ipv4.ipfrag_high_thresh", "256")?;
    poor.set_sysctl("net.ipv4.ipfrag_time", "1")?;
    // The routers' behaviours.
    let frag = "ip frag-off & 0x3fff != 0";
    nft(
        &r1,
        &format!(
            "table ip px_lab {{ set lossy {{ type ipv4_addr; elements = {{ {} }} }}\n\
             chain transit {{ type filter hook forward priority 0; policy accept;\n\
               ip daddr @lossy numgen random mod 100 < {loss_percent} drop\n\
               ip saddr @lossy numgen random mod 100 < {loss_percent} drop\n }}\n}}\n",
            set_of(assigned, Truth::Lossy)
        ),
    )?;
    nft(
        &r2,
        &format!(
            "table ip px_lab {{ set fragmid {{ type ipv4_addr; elements = {{ {} }} }}\n\
             set icmpbh {{ type ipv4_addr; elements = {{ {} }} }}\n\
             chain pre {{ type filter hook prerouting priority -300; policy accept; ip daddr @fragmid {frag} drop\n }}\n\
             chain transit {{ type filter hook forward priority 0; policy accept; ip daddr @icmpbh icmp type destination-unreachable drop\n }}\n}}\n",
            set_of(assigned, Truth::FragFilterInPath),
            set_of(assigned, Truth::IcmpBlackhole)
        ),
    )?;
    nft(
        &r3,
        &format!(
            "table ip px_lab {{ set fraglast {{ type ipv4_addr; elements = {{ {} }} }}\n\
             set dead {{ type ipv4_addr; elements = {{ {} }} }}\n\
             chain pre {{ type filter hook prerouting priority -300; policy accept; ip daddr @fraglast {frag} drop\n }}\n\
             chain transit {{ type filter hook forward priority 0; policy accept; ip daddr @dead drop\n }}\n}}\n",
            set_of(assigned, Truth::FragFilterLastHop),
            set_of(assigned, Truth::Dead)
        ),
    )?;
    let servers = [Servers::start(&srv)?, Servers::start(&poor)?];
    Ok(Internet { client, _routers: [r1, r2, r3], _srv: srv, _poor: poor, _servers: servers })
}

/// Builds the lab, runs `px survey` in its client namespace, compares.
pub fn run(o: &SurveyLabOptions, say: &dyn Fn(&str)) -> Result<SurveyLabResult, RunError> {
    crate::exp::check_prerequisites("px lab survey", &["nft", "ip"])?;
    let all = addresses();
    let used = &all[..all.len().min(o.targets)];
    let assigned = assign(used, o.seed);
    let list = targets(&assigned, o.targets);
    if list.len() < o.targets {
        return Err(RunError::Step(format!(
            "at most {} targets ({} addresses × {} ports)",
            all.len() * PORTS.len(),
            all.len(),
            PORTS.len()
        )));
    }
    say(&format!("px lab survey: {} targets on {} addresses; building the lab…", list.len(), assigned.len()));
    let lab = build(&assigned, o.loss_percent)?;
    let text: String = list.iter().map(|(a, p, _)| format!("{a} {p}\n")).collect();
    let targets_file = TempFile::write("px-lab-survey-targets", "txt", &text)?;
    let tmp_out;
    let out_path = match &o.output {
        Some(p) => {
            let _ = std::fs::remove_file(p);
            p.clone()
        }
        None => {
            tmp_out = TempFile::write("px-lab-survey-out", "jsonl", "")?;
            tmp_out.0.clone()
        }
    };
    let exe = o.exe.to_string_lossy().to_string();
    let survey = || {
        let mut c = lab.client.command(&exe);
        c.args(["survey", &targets_file.0.to_string_lossy(), "-o", &out_path.to_string_lossy()])
            .args(["--concurrency", "128", "--rate", "20000", "--per-destination-rate", "1000"])
            .args(["--timeout", "3s", "--rto", "250ms", "--retries", "2", "--max-hops", "6", "--hop-wait", "300ms"])
            .args(["--quiet", "--json"]);
        c
    };
    let t0 = Instant::now();
    let mut interrupted_run = None;
    if let Some(after) = o.interrupt_after {
        say(&format!("px lab survey: a first run, interrupted after {after:?}…"));
        let mut c = survey();
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let child = px_netns::LabChild::spawn(&mut c)?;
        std::thread::sleep(after);
        // `ip netns exec` execs px: the child's pid is px's.
        let pid = child.id().ok_or("the survey process is gone")? as i32;
        // SAFETY: kill(2) on the pid of our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let status = child.wait_with_output()?.status;
        let text = std::fs::read_to_string(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
        let records = Resume::read(&text).map_err(|e| format!("after the interrupt: {e}"))?.records.len();
        interrupted_run = Some(InterruptedRun {
            exit_code: status.code(),
            records,
            whole_lines: text.is_empty() || text.ends_with('\n'),
        });
    }
    say("px lab survey: running px survey in the client namespace…");
    let out = survey().output().map_err(|e| format!("{exe} survey: {e}"))?;
    let seconds = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!("px survey failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)).into());
    }
    let text = std::fs::read_to_string(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let records = Resume::read(&text).map_err(|e| format!("{}: {e}", out_path.display()))?.records;
    drop(lab);
    let truth: HashMap<String, Truth> = list.iter().map(|(a, p, t)| (format!("{a}:{p}"), *t)).collect();
    let mismatches = compare(&records, &truth);
    let summary = Summary::of(&records);
    let mut by_truth = BTreeMap::new();
    for (_, _, t) in &list {
        *by_truth
            .entry(serde_json::to_value(t).map_or_else(|_| String::new(), |v| v.as_str().unwrap_or("").to_string()))
            .or_default() += 1;
    }
    Ok(SurveyLabResult {
        targets: list.len(),
        addresses: assigned.len(),
        truth: by_truth,
        exact_classification: mismatches.is_empty(),
        mismatches,
        frag_ok_fraction: summary.frag_ok_fraction(),
        icmp_pmtud_ok_fraction: summary.icmp_pmtud_ok_fraction(),
        last_hop_filters: summary.filtered_last_hop,
        targets_per_second: records.len() as f64 / seconds,
        seconds,
        loss_percent: o.loss_percent,
        interrupted_run,
        table: summary.table(),
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_behaviour_gets_addresses_and_targets_are_unique() {
        let a = assign(&addresses(), 7);
        assert_eq!(a.len(), 380);
        for (t, pct) in Truth::MIX {
            let n = a.iter().filter(|(_, x)| *x == t).count();
            assert_eq!(n, (380 * pct as usize).div_ceil(100), "{t:?}");
        }
        assert_ne!(assign(&addresses(), 7), assign(&addresses(), 8), "the seed matters");
        let ts = targets(&a, 2280);
        assert_eq!(ts.len(), 2280);
        let keys: std::collections::HashSet<_> = ts.iter().map(|(a, p, _)| (*a, *p)).collect();
        assert_eq!(keys.len(), 2280);
        assert_eq!(targets(&a, 5000).len(), 2280, "no more than address × port");
        let small = assign(&addresses()[..20], 1);
        assert!(Truth::MIX.iter().all(|(t, _)| small.iter().any(|(_, x)| x == t)), "each behaviour at least once");
    }

    #[test]
    fn the_comparison_catches_a_wrong_class_and_a_missing_pmtud_test() {
        use px_survey::record::{FetchResult, Fingerprint};
        let fp = Some(Fingerprint { status: 200, length: 1, hash: "0".into() });
        let ok = FetchResult { fingerprint: fp, failure: None, attempts: 1, ms: 0.0 };
        let rec = |target: &str, class, pmtud| Record {
            target: target.into(),
            addr: target.split(':').next().unwrap().parse().unwrap(),
            port: 80,
            host: None,
            class,
            plain: ok.clone(),
            fragmented: Some(ok.clone()),
            fragments: 2,
            identical: Some(true),
            fragment_path: None,
            icmp_pmtud: pmtud,
            pmtud_note: None,
            ms: 0.0,
        };
        let truth: HashMap<String, Truth> =
            [("203.0.113.1:80".to_string(), Truth::Ok), ("203.0.113.1:8080".to_string(), Truth::Ok)].into();
        let good = [
            rec("203.0.113.1:80", Class::FragmentsOk, Pmtud::Works),
            rec("203.0.113.1:8080", Class::FragmentsOk, Pmtud::SameAddress),
        ];
        assert!(compare(&good, &truth).is_empty());
        let wrong = [
            rec("203.0.113.1:80", Class::FragmentsOk, Pmtud::Works),
            rec("203.0.113.1:8080", Class::FilteredInPath, Pmtud::SameAddress),
        ];
        assert_eq!(compare(&wrong, &truth).len(), 1);
        let untested = [
            rec("203.0.113.1:80", Class::FragmentsOk, Pmtud::SameAddress),
            rec("203.0.113.1:8080", Class::FragmentsOk, Pmtud::SameAddress),
        ];
        assert_eq!(compare(&untested, &truth).len(), 2, "no PMTUD test for the address");
        assert_eq!(compare(&good[..1], &truth).len(), 1, "a missing record");
    }

    #[test]
    fn bodies_name_their_target() {
        let b = body_for("203.0.113.5:8080".parse().unwrap());
        assert_eq!(b.len(), BODY);
        assert!(b.starts_with(b"px lab survey: this is 203.0.113.5:8080\n"));
    }
}
