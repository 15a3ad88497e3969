//! The experiment of `px lab rr`: request/response latency through
//! `px gateway` and through a plain Linux router, on the same hosts, links
//! and MTUs in the same run (issue 11: the merge must not make interactive
//! flows wait).
//!
//! Topology: [`LineSpec::gateway_lab`](px_netns::line::LineSpec::gateway_lab) (see [`crate::demo`]). A client in
//! the b-network host sends a 64-byte request to a server on the legacy
//! host, which answers with one write of the requested size (1 KB, 16 KB,
//! 64 KB by default), so the answer crosses the gateway on its merge path
//! (outer → inner) and ends with the sender's PSH; the client waits for the
//! whole answer before the next request (one transaction at a time,
//! `TCP_NODELAY` on both ends). Transaction time is measured by the client
//! from the request's write to the answer's last byte. The gateway's own
//! CPU is reported idle (before the first transaction) and during them: a
//! worker that polls or spins for latency pays for it there.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::demo::{LEGACY_ADDR, OFFLOADS_NOTE};
use px_netns::gateway::GatewayProcess;
use px_netns::line::{Addressing, Line};

/// Request size (bytes): the first 4 carry the answer's size.
pub const REQUEST: usize = 64;

/// What to run: the flags of `px lab rr`.
#[derive(Debug, Clone, clap::Args)]
pub struct RrOptions {
    /// The `px` binary (run as `px gateway` in the gateway namespace).
    #[arg(skip)]
    pub exe: PathBuf,
    /// Answer sizes in bytes, comma-separated (each 1..=16777216); requests are 64 bytes.
    #[arg(long, value_delimiter = ',', default_value = "1024,16384,65536", value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..=16 << 20), |v| v as usize))]
    pub sizes: Vec<usize>,
    /// Transactions per size and per middle box, one at a time (after a few warm-up ones).
    #[arg(long, default_value_t = 5000, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(10..=1_000_000), |v| v as usize))]
    pub transactions: usize,
    /// Extra arguments for `px gateway` (repeatable), e.g. `--gateway-arg=--psh=flush`.
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    pub gateway_args: Vec<String>,
}

/// Latency for one answer size.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    pub response_bytes: usize,
    pub transactions: usize,
    pub gateway_p50_us: f64,
    pub gateway_p99_us: f64,
    pub router_p50_us: f64,
    pub router_p99_us: f64,
    /// Issue 11's target: gateway p99 within max(50 µs, 10 %) of the router's.
    pub within_target: bool,
}

/// Everything `px lab rr` reports.
#[derive(Debug, Clone, Serialize)]
pub struct RrResult {
    pub sizes: Vec<SizeResult>,
    pub request_bytes: usize,
    pub offloads: &'static str,
    /// The gateway's conversion yield over the run (its own counter).
    pub gateway_yield: Option<f64>,
    /// The gateway's early flushes (`counters.flush`, in the order of
    /// `px_gateway::FlushReason::ALL`): a timeout flush is data that waited
    /// the whole merge timeout (or, after a riding PSH, the PSH grace).
    pub gateway_flushes: Vec<u64>,
    /// The gateway process's CPU time over wall time while no traffic
    /// flows ([`IDLE_WINDOW`] after its start): what a polling or spinning
    /// worker costs an idle machine (1.0 = one core).
    pub gateway_idle_cpu: Option<f64>,
    /// The same during the transactions (every size).
    pub gateway_busy_cpu: Option<f64>,
    /// How many times the gateway's workers went to sleep during the
    /// transactions, per transaction ([`px_netns::cpu::thread_sleeps`]): a
    /// worker waiting in `poll` sleeps between frames, a spinning one not
    /// at all, whatever the machine's load (the CPU share depends on it).
    pub gateway_busy_sleeps: Option<f64>,
}

/// How long the gateway's idle CPU is measured, once it has started.
pub const IDLE_WINDOW: Duration = Duration::from_secs(2);

/// The CPU share of process `pid` over `wall`, from a reading `before`.
fn cpu_share(pid: u32, before: Option<f64>, wall: Duration) -> Option<f64> {
    let used = px_netns::cpu::process_cpu_seconds(pid)? - before?;
    Some(used / wall.as_secs_f64().max(1e-9))
}

/// p50 and p99 of `v` (µs), sorting it.
pub fn percentiles(v: &mut [f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (at(0.5), at(0.99))
}

/// Whether the gateway's p99 is within issue 11's target of the router's.
pub fn within_target(gateway_p99: f64, router_p99: f64) -> bool {
    gateway_p99 <= router_p99 + (router_p99 * 0.1).max(50.0)
}

/// How long the server waits for the client's connection: a middle box
/// that passes nothing must end the run with an error, not hang it.
const ACCEPT_WAIT: Duration = Duration::from_secs(15);

/// The server: for each request, one write of the size it names.
fn serve(listener: TcpListener) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let t0 = Instant::now();
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && t0.elapsed() < ACCEPT_WAIT => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    };
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    let mut req = [0u8; REQUEST];
    let mut answer = Vec::new();
    loop {
        match s.read_exact(&mut req) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let n = u32::from_be_bytes([req[0], req[1], req[2], req[3]]) as usize;
        answer.resize(n, 0x5a);
        s.write_all(&answer)?;
    }
}

/// The client: `count` transactions of `size`, returning each one's time (µs).
fn transactions(s: &mut TcpStream, size: usize, count: usize) -> std::io::Result<Vec<f64>> {
    let mut req = [0u8; REQUEST];
    req[..4].copy_from_slice(&(size as u32).to_be_bytes());
    let mut buf = vec![0u8; size];
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let t0 = Instant::now();
        s.write_all(&req)?;
        s.read_exact(&mut buf)?;
        out.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(out)
}

/// One middle box: every size, one connection, returns per-size samples.
fn measure(lab: &Line, server_ip: &str, port: u16, o: &RrOptions) -> Result<Vec<Vec<f64>>, String> {
    let addr: SocketAddr = format!("{server_ip}:{port}").parse().map_err(|e| format!("{e}"))?;
    let listener =
        lab.left_ns().run(|| TcpListener::bind(addr)).map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    std::thread::scope(|sc| {
        let server = sc.spawn(move || serve(listener));
        let mut stream = None;
        let t0 = Instant::now();
        while stream.is_none() {
            match lab.right_ns().run(|| TcpStream::connect_timeout(&addr, Duration::from_secs(1))) {
                Ok(Ok(s)) => stream = Some(s),
                _ if t0.elapsed() < Duration::from_secs(10) => std::thread::sleep(Duration::from_millis(50)),
                Ok(Err(e)) => return Err(format!("connect {addr}: {e}")),
                Err(e) => return Err(e.to_string()),
            }
        }
        let mut s = stream.ok_or("no connection")?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        let mut all = Vec::new();
        for &size in &o.sizes {
            transactions(&mut s, size, 20).map_err(|e| format!("warm-up, {size} B: {e}"))?;
            all.push(transactions(&mut s, size, o.transactions).map_err(|e| format!("{size} B answers: {e}"))?);
        }
        drop(s);
        server.join().map_err(|_| "server panicked".to_string())?.map_err(|e| format!("server: {e}"))?;
        Ok(all)
    })
}

/// Whether the gateway's arguments put it on the DPDK datapath.
fn dpdk_datapath(args: &[String]) -> bool {
    args.iter().any(|a| a == "--datapath=dpdk" || a == "--set=datapath=dpdk")
        || args
            .windows(2)
            .any(|w| (w[0] == "--datapath" && w[1] == "dpdk") || (w[0] == "--set" && w[1] == "datapath=dpdk"))
}

/// Runs the gateway round, then the router round, on one fresh line.
pub fn run(o: &RrOptions, say: &dyn Fn(&str)) -> Result<RrResult, crate::RunError> {
    say("px lab rr: building legacy (1500) — gw — bnet (9000) in fresh namespaces…");
    let lab = crate::demo::build()?;
    lab.address(Addressing::Bump).map_err(|e| e.to_string())?;
    if dpdk_datapath(&o.gateway_args) {
        // DPDK's AF_PACKET driver reads frames without the virtio-net
        // header that says a checksum is partial (a veth sender's checksum
        // offload): the hosts finish their checksums, as behind a wire.
        let [left, .., right] = lab.spec.devs;
        for (ns, dev) in [(lab.left_ns(), left), (lab.right_ns(), right)] {
            ns.exec("ethtool", &["-K", dev, "tx", "off"]).map_err(|e| e.to_string())?;
        }
    }
    say(&format!("px lab rr: through px gateway, {} transactions per size…", o.transactions));
    let gw = GatewayProcess::start(&lab, &o.exe, &o.gateway_args)?;
    let (idle0, t0) = (px_netns::cpu::process_cpu_seconds(gw.pid), Instant::now());
    std::thread::sleep(IDLE_WINDOW);
    let gateway_idle_cpu = cpu_share(gw.pid, idle0, t0.elapsed());
    let (busy0, t0) = (px_netns::cpu::process_cpu_seconds(gw.pid), Instant::now());
    let sleeps0 = px_netns::cpu::thread_sleeps(gw.pid, "px-worker");
    let through_gw = measure(&lab, LEGACY_ADDR, 7001, o);
    let gateway_busy_cpu = cpu_share(gw.pid, busy0, t0.elapsed());
    let transactions = (o.transactions * o.sizes.len()).max(1) as f64;
    let gateway_busy_sleeps = sleeps0
        .zip(px_netns::cpu::thread_sleeps(gw.pid, "px-worker"))
        .map(|(a, b)| b.saturating_sub(a) as f64 / transactions);
    let exit = gw.stop()?;
    let through_gw = through_gw?;
    if !exit.status.success() {
        return Err(format!("px gateway exited with {}; its log:\n{}", exit.status, exit.log).into());
    }
    lab.address(Addressing::Router).map_err(|e| e.to_string())?;
    say("px lab rr: through a plain Linux router…");
    let through_router = measure(&lab, LEGACY_ADDR, 7002, o)?;
    drop(lab);
    let sizes = o
        .sizes
        .iter()
        .zip(through_gw.into_iter().zip(through_router))
        .map(|(&size, (mut g, mut r))| {
            let (gateway_p50_us, gateway_p99_us) = percentiles(&mut g);
            let (router_p50_us, router_p99_us) = percentiles(&mut r);
            SizeResult {
                response_bytes: size,
                transactions: g.len(),
                gateway_p50_us,
                gateway_p99_us,
                router_p50_us,
                router_p99_us,
                within_target: within_target(gateway_p99_us, router_p99_us),
            }
        })
        .collect();
    let gateway_flushes = exit.flush_counts();
    Ok(RrResult {
        sizes,
        request_bytes: REQUEST,
        offloads: OFFLOADS_NOTE,
        gateway_yield: exit.stats["yield"].as_f64(),
        gateway_flushes,
        gateway_idle_cpu,
        gateway_busy_cpu,
        gateway_busy_sleeps,
    })
}

impl RrResult {
    /// `px lab rr --json`: one object, the sizes keyed by answer size.
    pub fn json(&self, transactions: usize) -> serde_json::Value {
        let sizes: serde_json::Map<String, serde_json::Value> = self
            .sizes
            .iter()
            .map(|s| (s.response_bytes.to_string(), serde_json::to_value(s).unwrap_or_default()))
            .collect();
        serde_json::json!({
            "sizes": sizes, "request_bytes": self.request_bytes, "offloads": self.offloads,
            "gateway_yield": self.gateway_yield, "gateway_flushes": crate::exp::flushes_json(&self.gateway_flushes),
            "transactions": transactions,
            "gateway_idle_cpu": self.gateway_idle_cpu, "gateway_busy_cpu": self.gateway_busy_cpu,
            "gateway_busy_sleeps": self.gateway_busy_sleeps,
        })
    }

    /// The table `px lab rr` prints.
    pub fn table(&self, transactions: usize) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "px lab rr — {} B requests, one transaction at a time, {transactions} per size; offloads: {}\n",
            self.request_bytes, self.offloads
        );
        let _ = writeln!(
            out,
            "  {:>9}  {:>14}  {:>14}  {:>14}  {:>14}  target",
            "answer", "gw p50 µs", "gw p99 µs", "router p50 µs", "router p99 µs"
        );
        for s in &self.sizes {
            let _ = writeln!(
                out,
                "  {:>9}  {:>14.1}  {:>14.1}  {:>14.1}  {:>14.1}  {}",
                s.response_bytes,
                s.gateway_p50_us,
                s.gateway_p99_us,
                s.router_p50_us,
                s.router_p99_us,
                if s.within_target { "met" } else { "NOT met" }
            );
        }
        let _ = writeln!(out, "\n  target: gateway p99 within max(50 µs, 10 %) of the router's p99");
        let _ = writeln!(out, "  gateway early flushes: {}", crate::exp::flushes_text(&self.gateway_flushes));
        let share = |c: Option<f64>| c.map_or("unknown".to_string(), |c| format!("{:.1} % of a core", c * 100.0));
        let _ = writeln!(
            out,
            "  gateway CPU: {} idle ({} s after start), {} during the transactions ({} sleeps per transaction)",
            share(self.gateway_idle_cpu),
            IDLE_WINDOW.as_secs(),
            share(self.gateway_busy_cpu),
            self.gateway_busy_sleeps.map_or("unknown".to_string(), |s| format!("{s:.2}"))
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_sample() {
        let mut v: Vec<f64> = (1..=100).rev().map(|x| x as f64).collect();
        assert_eq!(percentiles(&mut v), (51.0, 100.0));
        assert_eq!(percentiles(&mut []), (0.0, 0.0));
    }

    #[test]
    fn the_dpdk_datapath_is_seen_in_any_spelling() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for a in [&["--datapath=dpdk"][..], &["--datapath", "dpdk"], &["--psh=flush", "--set", "datapath=dpdk"]] {
            assert!(dpdk_datapath(&args(a)), "{a:?}");
        }
        for a in [&[][..], &["--datapath", "af_packet"], &["--set", "busy_poll_us=50"]] {
            assert!(!dpdk_datapath(&args(a)), "{a:?}");
        }
    }

    #[test]
    fn target_is_50_us_or_10_percent() {
        assert!(within_target(149.0, 100.0) && !within_target(151.0, 100.0));
        assert!(within_target(1099.0, 1000.0) && !within_target(1101.0, 1000.0));
    }
}
