//! `px lab border` (issue 30): a border of several gateways.
//!
//! - [`ecmp`]: two gateways behind the routers' ECMP, BGP and BFD across
//!   each (BIRD 2), `kill -9` of one during sha256-checked transfers both
//!   ways, and its return.
//! - [`exchange`]: the iMTU advertisement end to end: an exchange with a
//!   route server, a true, a lying and a legacy neighbour, the gateway
//!   verifying each claim before it sends large frames.
//! - [`claims`]: what no iMTU claim may make the gateway do: a host of a
//!   verified prefix behind a smaller hop with ICMP filtered, a lying
//!   responder, a small outer port (issue 35).
//! - [`imtu`]: the BIRD 2 configuration of the advertisement (the large
//!   community `(AS, 1, iMTU)`, its copy into `krt_mtu` of table 30).
//! - [`bird`]: BIRD 2 as a lab process (per-run configuration and control
//!   socket, killed by PID).
//!
//! Every run builds its namespaces through [`px_netns::Topology`] and keeps
//! its files in a [`Scratch`] directory, so namespaces, daemons, gateways
//! and files are removed on every exit path (drop, panic, SIGINT/SIGTERM).

pub mod bird;
pub mod claims;
pub mod ecmp;
pub mod exchange;
pub mod flags;
pub mod imtu;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A per-run directory under the temporary directory (daemon
/// configurations, control sockets, logs), removed on drop and by the
/// signal cleanup.
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// Creates `<tmp>/px-border-<what>-<pid>-<n>`.
    pub fn new(what: &str) -> Result<Scratch, String> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("px-border-{what}-{}-{n}", std::process::id()));
        px_netns::cleanup::register_path(&p);
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(Scratch(p))
    }
}

/// Has BIRD parse `conf` (`bird -p`); Ok when BIRD is not installed
/// (the test then says it skipped).
#[cfg(test)]
pub(crate) fn bird_parses(conf: &str) -> Result<(), String> {
    if !bird::require_or_skip("bird -p") {
        return Ok(());
    }
    let dir = Scratch::new("parse")?;
    let p = dir.0.join("t.conf");
    std::fs::write(&p, conf).map_err(|e| e.to_string())?;
    let out = std::process::Command::new("bird").arg("-p").arg("-c").arg(&p).output().map_err(|e| e.to_string())?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

/// One sha256-checked transfer of a border run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Exact {
    /// `a_to_b`, `b_to_a`, ...
    pub what: String,
    /// Bytes received (0 when it failed).
    pub bytes: u64,
    /// Bytes sent minus bytes received.
    pub lost: u64,
    /// Every byte arrived and the sender's and receiver's digests are equal.
    pub exact: bool,
    /// Why it failed, if it did (a stall, a reset).
    pub error: Option<String>,
}

/// How [`both_ways`] runs its two transfers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BothWays<'a> {
    /// Bytes each way.
    pub bytes: u64,
    /// How the senders write.
    pub pace: px_netns::traffic::Pace,
    /// Longest a transfer may stand still.
    pub stall: std::time::Duration,
    /// The two transfers' names (a → b, b → a).
    pub names: [&'a str; 2],
    /// The ports the two receivers listen on.
    pub ports: [u16; 2],
}

/// Both directions at once between `a` (at address `a_addr`) and `b` (at
/// `b_addr`), sha256 on, every received byte added to `progress`; a
/// direction that fails is a result (`exact: false`, its error), not an
/// error of the run.
pub(crate) fn both_ways(
    (a, a_addr): (&px_netns::Netns, &str),
    (b, b_addr): (&px_netns::Netns, &str),
    w: BothWays<'_>,
    progress: &std::sync::atomic::AtomicU64,
) -> Vec<Exact> {
    use px_netns::traffic::{BulkSpec, bulk_tcp_counted};
    let spec = |server: &str, port| {
        let ip = server.parse().unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        let mut s = BulkSpec::new(std::net::SocketAddr::new(ip, port), 1, w.bytes);
        s.sha256 = true;
        s.pace = w.pace;
        s.stall_timeout = w.stall;
        s
    };
    let (to, back) = (spec(b_addr, w.ports[0]), spec(a_addr, w.ports[1]));
    let (r1, r2) = std::thread::scope(|sc| {
        let h = sc.spawn(|| bulk_tcp_counted(a, b, &to, progress));
        let r2 = bulk_tcp_counted(b, a, &back, progress);
        (h.join(), r2)
    });
    let r1 = r1.map_err(|_| "transfer thread panicked".to_string()).and_then(|r| r.map_err(|e| e.to_string()));
    let one = |what: &str, r: Result<px_netns::traffic::BulkResult, String>| {
        let (bytes, exact, error) = match r {
            Ok(r) => {
                let bytes: u64 = r.flows.iter().map(|f| f.bytes).sum();
                let exact = bytes == w.bytes
                    && r.flows.iter().all(|f| f.sent_sha256.is_some() && f.sent_sha256 == f.received_sha256);
                (bytes, exact, None)
            }
            Err(e) => (0, false, Some(e)),
        };
        Exact { what: what.into(), bytes, lost: w.bytes.saturating_sub(bytes), exact, error }
    };
    vec![one(w.names[0], r1), one(w.names[1], r2.map_err(|e| e.to_string()))]
}

/// Reads counter families from a gateway's Prometheus endpoint `addr`
/// (`127.0.0.1:PORT`) from inside its namespace `ns`, each summed over its
/// label sets (workers, ports).
pub(crate) fn scrape(ns: &crate::Netns, addr: &str, families: &[&str]) -> Result<Vec<u64>, crate::RunError> {
    use std::io::{Read as _, Write as _};
    let body = ns
        .run(|| -> std::io::Result<String> {
            let mut s = std::net::TcpStream::connect(addr)?;
            s.set_read_timeout(Some(std::time::Duration::from_secs(2)))?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        })?
        .map_err(|e| format!("{}: metrics: {e}", ns.name()))?;
    Ok(families
        .iter()
        .map(|family| {
            body.lines()
                .filter(|l| l.split(['{', ' ']).next() == Some(*family))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        })
        .collect())
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        px_netns::cleanup::unregister_path(&self.0);
    }
}

/// Which parts `px lab border` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Parts {
    /// Both.
    All,
    /// The ECMP failover only.
    Ecmp,
    /// The iMTU advertisement only.
    Imtu,
}

/// What `px lab border` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BorderResult {
    /// The machine and its load at the start.
    pub machine: px_netns::Machine,
    /// The ECMP failover run.
    pub ecmp: Option<ecmp::EcmpResult>,
    /// The iMTU advertisement run.
    pub imtu: Option<exchange::ExchangeResult>,
}

impl BorderResult {
    /// Everything the runs require held: exact transfers, and for the
    /// advertisement the expected frame sizes and the lie caught.
    pub fn passed(&self) -> bool {
        let ecmp = self.ecmp.as_ref().is_none_or(|e| e.transfers_exact);
        let imtu = self.imtu.as_ref().is_none_or(|i| {
            i.transfers_exact
                && i.lost_bytes == 0
                && i.lie_detected
                && i.to_bnet_max_frame > 1500
                && i.to_legacy_max_frame <= 1500
                && i.after_withdraw.to_max <= 1500
        });
        ecmp && imtu
    }
}

fn ecmp_table(s: &mut String, e: &ecmp::EcmpResult) {
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "Two gateways behind ECMP (BIRD 2 eBGP + BFD {} ms x {}), kill -9 of gw1, then its restart\n",
        e.bfd.0, e.bfd.1
    );
    let _ = writeln!(
        s,
        "  {:<8} {:>5} {:>12} {:>10} {:>8}  {:<8}",
        "dir", "flow", "bytes", "stall ms", "rcv mss", "sha256"
    );
    for t in &e.transfers {
        let ok = if t.sent_sha256 == t.received_sha256 && !t.sent_sha256.is_empty() { "equal" } else { "DIFFER" };
        let _ = writeln!(
            s,
            "  {:<8} {:>5} {:>12} {:>10.0} {:>8}  {:<8}",
            t.direction, t.flow, t.bytes, t.failover_stall_ms, t.receiver_mss, ok
        );
    }
    let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
    let _ = writeln!(s);
    let _ = writeln!(s, "  ecmp.transfers_exact        {}", e.transfers_exact);
    let _ = writeln!(
        s,
        "  ecmp.failover_ms            {:.0} (median {:.0}, {} flows stood still; the kernel route lost the dead path after {} ms)",
        e.failover_ms,
        e.failover_median_ms,
        e.stalled_flows,
        opt(e.route_converged_ms, 0)
    );
    let _ = writeln!(
        s,
        "  ecmp.yield_after_failover   {} (surviving gateway, kill → restart; before the kill {})",
        opt(e.yield_after_failover, 3),
        opt(e.yield_before_failover, 3)
    );
    let _ = writeln!(
        s,
        "  ecmp.failback_ms            {:.0} ({} flows stood still after the restart)",
        e.failback_ms, e.failback_stalled_flows
    );
    let _ = writeln!(
        s,
        "  flow hash (policy {}, {} tuples asked of the FIBs): both directions on one gateway {:.0} % with equal seeds, {:.0} % with different seeds; {:.0} % on gw1",
        e.hash.policy,
        e.hash.tuples,
        e.hash.same_seed * 100.0,
        e.hash.different_seeds * 100.0,
        e.hash.on_link1 * 100.0
    );
    let _ = writeln!(
        s,
        "  real L → A flows merged just before the kill (both directions on one gateway): {:.0} %",
        e.hash.flows_merged_before_kill * 100.0
    );
    let _ = writeln!(
        s,
        "  BGP sessions down besides the killed gateway's: {} (BFD flaps: packets missed on a loaded machine)",
        e.bfd_flaps
    );
}

fn imtu_table(s: &mut String, i: &exchange::ExchangeResult) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "iMTU carried by BGP (large community (AS, 1, iMTU)), verified by F-PMTUD before use\n");
    let _ =
        writeln!(s, "  {:<28} {:>9} {:>9} {:>12}", "neighbour (exchange port)", "to max", "from max", "jumbo / all");
    for (name, f) in [
        ("B claims 9000 (verified)", &i.bnet),
        ("L legacy (no claim)", &i.legacy),
        ("C claims 9000 (a lie)", &i.liar),
        ("B after dropping its claim", &i.after_withdraw),
    ] {
        let _ = writeln!(
            s,
            "  {:<28} {:>9} {:>9} {:>12}",
            name,
            f.to_max,
            f.from_max,
            format!("{}/{}", f.to_jumbo, f.to_frames)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "  imtu.to_bnet_max_frame      {}", i.to_bnet_max_frame);
    let _ = writeln!(s, "  imtu.to_legacy_max_frame    {}", i.to_legacy_max_frame);
    let _ = writeln!(s, "  imtu.lie_detected           {}", i.lie_detected);
    let _ = writeln!(
        s,
        "  imtu.lost_bytes             {} ({} sha256-checked transfers, all exact: {})",
        i.lost_bytes,
        i.transfers.len(),
        i.transfers_exact
    );
    let _ = writeln!(
        s,
        "  claim dropped → translation {:.0} ms (BIRD → route server → table 30 → gateway)",
        i.withdraw_fallback_ms
    );
    let _ = writeln!(s, "  packets passed untouched    {}", i.imtu_passed);
    for l in &i.gateway_log {
        let _ = writeln!(s, "  gateway: {}", l.split("imtu: ").nth(1).unwrap_or(l));
    }
}

impl crate::exp::Report for BorderResult {
    fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "px lab border — {}\n", self.machine.line());
        if let Some(e) = &self.ecmp {
            ecmp_table(&mut s, e);
            let _ = writeln!(s);
        }
        if let Some(i) = &self.imtu {
            imtu_table(&mut s, i);
        }
        s
    }

    fn svg(&self) -> String {
        use px_sim::svg::{BarChart, LineChart, Series, stack};
        let mut parts = Vec::new();
        if let Some(e) = &self.ecmp {
            let series = |name: &str, f: fn(&ecmp::Sample) -> f64| Series {
                name: name.into(),
                points: e.samples.iter().map(|p| (p.t_s, f(p))).collect(),
            };
            parts.push(
                LineChart {
                    title: "Traffic per gateway across a kill -9 and a restart".into(),
                    x_label: "seconds".into(),
                    y_label: "Mbit/s (both directions, at the border router)".into(),
                    series: vec![series("gw1", |p| p.gw1_mbps), series("gw2", |p| p.gw2_mbps)],
                    y_max: None,
                    markers: vec![(e.kill_at_s, "kill -9 gw1".into()), (e.restart_at_s, "gw1 restarted".into())],
                    note: Some(format!(
                        "{} flows each way, BFD {} ms x {}; failover {:.0} ms; {}",
                        e.transfers.len() / 2,
                        e.bfd.0,
                        e.bfd.1,
                        e.failover_ms,
                        self.machine.line()
                    )),
                    x_log: false,
                }
                .to_svg(),
            );
        }
        if let Some(i) = &self.imtu {
            let f = [&i.bnet, &i.legacy, &i.liar, &i.after_withdraw];
            parts.push(
                BarChart {
                    title: "Largest frame on the exchange, per neighbour".into(),
                    y_label: "bytes (IP)".into(),
                    categories: vec![
                        "B (verified 9000)".into(),
                        "L (legacy)".into(),
                        "C (lie: 1500 hop)".into(),
                        "B, claim dropped".into(),
                    ],
                    series: vec![
                        ("toward it".into(), f.iter().map(|x| x.to_max as f64).collect()),
                        ("from it".into(), f.iter().map(|x| x.from_max as f64).collect()),
                    ],
                    note: Some(format!(
                        "observers on the bridge ports; {} bytes lost; {}",
                        i.lost_bytes,
                        self.machine.line()
                    )),
                }
                .to_svg(),
            );
        }
        stack(&parts)
    }

    fn json(&self) -> serde_json::Value {
        let mut out = serde_json::json!({ "machine": self.machine });
        if let Some(e) = &self.ecmp {
            out["ecmp"] = serde_json::json!({
                "transfers_exact": e.transfers_exact,
                "failover_ms": e.failover_ms,
                "failover_median_ms": e.failover_median_ms,
                "stalled_flows": e.stalled_flows,
                "route_converged_ms": e.route_converged_ms,
                "yield_after_failover": e.yield_after_failover,
                "yield_before_failover": e.yield_before_failover,
                "failback_ms": e.failback_ms,
                "failback_stalled_flows": e.failback_stalled_flows,
                "hash": e.hash,
                "bfd_interval_ms": e.bfd.0,
                "bfd_multiplier": e.bfd.1,
                "bfd_flaps": e.bfd_flaps,
                "ra_events": e.ra_events,
                "kill_at_s": e.kill_at_s,
                "restart_at_s": e.restart_at_s,
                "transfers": e.transfers,
                "samples": e.samples,
            });
        }
        if let Some(i) = &self.imtu {
            out["imtu"] = serde_json::to_value(i).unwrap_or_default();
        }
        out
    }
}

/// What `px lab border` runs.
#[derive(Debug, Clone)]
pub struct BorderOptions {
    /// Which parts.
    pub parts: Parts,
    /// The ECMP part.
    pub ecmp: ecmp::EcmpOptions,
    /// The advertisement part.
    pub exchange: exchange::ExchangeOptions,
}

/// Runs `px lab border`.
pub fn run(o: &BorderOptions, say: &dyn Fn(&str)) -> Result<BorderResult, crate::RunError> {
    let machine = px_netns::Machine::current();
    let imtu = match o.parts {
        Parts::All | Parts::Imtu => Some(exchange::run(&o.exchange, say)?),
        Parts::Ecmp => None,
    };
    let ecmp = match o.parts {
        Parts::All | Parts::Ecmp => Some(ecmp::run(&o.ecmp, say)?),
        Parts::Imtu => None,
    };
    Ok(BorderResult { machine, ecmp, imtu })
}
