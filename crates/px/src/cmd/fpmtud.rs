//! `px fpmtud`: the F-PMTUD responder daemon (unprivileged). Answers legacy
//! `FPMT` probes with the 4-byte largest IP length and extended probes and
//! DF-set confirmation probes with a report; prints its counters and exits
//! 0 on SIGINT/SIGTERM.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use px_pmtud::fpmtud::wire::DEFAULT_PORT;

use px_runtime::pmtud::late_bind::LateBindResponder;
use px_runtime::pmtud::responder::{Daemon, DaemonConfig};

#[derive(Debug, Args)]
pub struct FpmtudArgs {
    /// UDP port to answer on.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Address to listen on (repeatable; default: every IPv4 and IPv6 address).
    #[arg(long)]
    bind: Vec<IpAddr>,
    /// Replies per second per source address (token bucket).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    rate: u32,
    /// Replies a source may get at once (bucket depth; one F-PMTUD
    /// measurement needs up to 10, one parallel-probing measurement up to ~160).
    #[arg(long, default_value_t = 160, value_parser = clap::value_parser!(u32).range(1..))]
    burst: u32,
    /// Also record every IPv4 fragment from a packet socket (needs root or
    /// CAP_NET_RAW), so reports list each fragment's offset and length.
    #[arg(long)]
    packet_socket: bool,
    /// Print the counters at exit as one JSON object instead of text.
    #[arg(long)]
    json_stats: bool,
    /// Test mode (root, IPv4): behave on the wire like the paper authors'
    /// reference destination (`mtud_destination`): bind the port only after
    /// a packet socket saw the first probe, and answer every probe with the
    /// legacy 4-byte reply (no nonce).
    #[arg(long, hide = true)]
    legacy_late_bind: bool,
}

pub fn run(a: FpmtudArgs) -> Result<ExitCode, String> {
    if a.legacy_late_bind {
        return run_late_bind(&a);
    }
    let bind: Vec<SocketAddr> = if a.bind.is_empty() {
        vec![(Ipv4Addr::UNSPECIFIED, a.port).into(), SocketAddr::from((Ipv6Addr::UNSPECIFIED, a.port))]
    } else {
        a.bind.iter().map(|ip| SocketAddr::new(*ip, a.port)).collect()
    };
    let cfg = DaemonConfig { bind, rate_per_sec: a.rate, burst: a.burst, packet_socket: a.packet_socket };
    // Opened before anything is printed: a failure never follows "listening".
    let mut daemon = Daemon::open(&cfg).map_err(|e| format!("cannot listen: {e}"))?;
    stop_on_signal(daemon.stop_handle());
    let addrs: Vec<String> = daemon.local_addrs().iter().map(ToString::to_string).collect();
    eprintln!("px fpmtud: listening on {}", addrs.join(", "));
    daemon.run().map_err(|e| format!("responder: {e}"))?;
    let counters = daemon.counters();
    if a.json_stats {
        let obj: serde_json::Map<String, serde_json::Value> =
            counters.iter().map(|(k, v)| ((*k).to_owned(), serde_json::json!(v))).collect();
        println!("{}", serde_json::Value::Object(obj));
    } else {
        println!("px fpmtud: stopped");
        for (k, v) in counters {
            println!("  {k:<20} {v}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// SIGINT/SIGTERM set `stop` (the loops wake every 100 ms to look at it).
fn stop_on_signal(stop: Arc<AtomicBool>) {
    crate::signals::install();
    std::thread::spawn(move || {
        while !crate::signals::stopped() {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
}

fn run_late_bind(a: &FpmtudArgs) -> Result<ExitCode, String> {
    let mut r = LateBindResponder::new(a.port);
    stop_on_signal(r.stop_handle());
    eprintln!("px fpmtud: legacy late-bind test mode on port {} (binds after the first probe)", a.port);
    r.run().map_err(|e| format!("responder: {e}"))?;
    if a.json_stats {
        println!("{}", serde_json::json!({ "replies": r.replies }));
    } else {
        println!("px fpmtud: stopped\n  replies              {}", r.replies);
    }
    Ok(ExitCode::SUCCESS)
}
