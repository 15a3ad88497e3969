//! `px caravan send|recv`: an example sender and receiver of PX-caravans
//! (`docs/caravan.md`) for the lab; the logic is
//! [`px_runtime::caravan`], this module parses the flags and prints the
//! summaries.
//!
//! `send` sends sequence-numbered UDP datagrams on one socket per flow,
//! plain or (with `--caravan`) packed into caravans sent with the caravan
//! DSCP. `recv` checks every datagram: its flow's next sequence number, its
//! bytes. It prints the counts and exits 1 if any datagram was corrupt,
//! duplicated or out of order (or, with `--expect`, missing).

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use px_runtime::caravan::{self, RecvConfig, SendConfig};

#[derive(Debug, Subcommand)]
pub enum CaravanCommand {
    /// Send sequence-numbered UDP datagrams, plain or packed in caravans.
    Send(SendArgs),
    /// Receive datagrams and caravans, check every sequence number and byte.
    Recv(RecvArgs),
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// Destination address and port.
    #[arg(long)]
    to: SocketAddr,
    /// Flows (one socket and source port each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    flows: u32,
    /// Datagrams per flow (0: until --duration or a signal).
    #[arg(long, default_value_t = 1000)]
    count: u64,
    /// Stop after this many seconds (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    duration: f64,
    /// UDP payload bytes per datagram (16..=65507).
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u16).range(16..=65507))]
    size: u16,
    /// Datagrams per second over all flows (0: as fast as the socket takes them).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Pack the datagrams into caravans (the sender is a caravan-capable host).
    #[arg(long)]
    caravan: bool,
    /// Largest caravan IP packet (the b-network's iMTU).
    #[arg(long, default_value_t = 9000)]
    mtu: usize,
    /// DSCP marking caravans.
    #[arg(long, default_value_t = px_caravan::DEFAULT_DSCP)]
    dscp: u8,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RecvArgs {
    /// UDP port to receive on.
    #[arg(long)]
    port: u16,
    /// Address to bind (default 0.0.0.0; `::` for IPv6).
    #[arg(long, default_value = "0.0.0.0")]
    bind: IpAddr,
    /// Stop after this long, e.g. 10s (0: no limit; a bare number is seconds).
    #[arg(long, default_value = "0s", value_parser = px_units::secs_f64)]
    duration: f64,
    /// Stop once nothing arrived for this long after the first datagram,
    /// e.g. 1s (0: never; a bare number is milliseconds; old name --idle-ms).
    #[arg(long = "idle", alias = "idle-ms", default_value = "1000ms", value_parser = px_units::millis_u64)]
    idle_ms: u64,
    /// Datagrams expected in total: fewer is a failure.
    #[arg(long)]
    expect: Option<u64>,
    /// DSCP marking caravans.
    #[arg(long, default_value_t = px_caravan::DEFAULT_DSCP)]
    dscp: u8,
    /// Socket receive buffer (bytes).
    #[arg(long, default_value_t = 8 << 20)]
    rcvbuf: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(c: CaravanCommand) -> Result<ExitCode, String> {
    crate::signals::install();
    match c {
        CaravanCommand::Send(a) => send(&a),
        CaravanCommand::Recv(a) => recv(&a),
    }
}

fn send(a: &SendArgs) -> Result<ExitCode, String> {
    let cfg = SendConfig {
        to: a.to,
        flows: a.flows,
        count: a.count,
        duration: a.duration,
        size: a.size,
        rate: a.rate,
        caravan: a.caravan,
        mtu: a.mtu,
        dscp: a.dscp,
    };
    let sum = caravan::send(&cfg, crate::signals::stopped).map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", serde_json::to_string(&sum).map_err(|e| e.to_string())?);
    } else {
        println!(
            "px caravan send: {} datagrams of {} B on {} flows in {} {} ({:.3} s, {} send errors)",
            sum.datagrams,
            a.size,
            sum.flows,
            if a.caravan { sum.caravans } else { sum.datagrams },
            if a.caravan { "caravans" } else { "packets" },
            sum.seconds,
            sum.send_errors
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn recv(a: &RecvArgs) -> Result<ExitCode, String> {
    let cfg = RecvConfig {
        port: a.port,
        bind: a.bind,
        duration: a.duration,
        idle_ms: a.idle_ms,
        expect: a.expect,
        dscp: a.dscp,
        rcvbuf: a.rcvbuf,
    };
    let sum = caravan::recv(&cfg, crate::signals::stopped).map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", serde_json::to_string(&sum).map_err(|e| e.to_string())?);
    } else {
        println!(
            "px caravan recv: {} datagrams ({} caravans, {} plain) on {} flows in {:.3} s: {:.0} datagrams/s, {:.3} Gbit/s payload, {:.0} datagrams per CPU second",
            sum.datagrams,
            sum.caravans,
            sum.plain,
            sum.flows,
            sum.seconds,
            sum.datagrams_per_s,
            sum.gbit_per_s,
            sum.datagrams_per_cpu_s
        );
        println!(
            "  corrupt {} reordered or duplicate {} missing {} malformed caravans {}",
            sum.corrupt, sum.reordered, sum.missing, sum.malformed
        );
    }
    Ok(if sum.failed(&cfg) { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
