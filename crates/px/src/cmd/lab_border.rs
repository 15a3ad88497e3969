//! `px lab border`: a border of several gateways (issue 30; px-lab's
//! [`px_lab::border`]): the iMTU advertisement over BGP with its
//! verification, and two gateways behind ECMP across a kill -9. Prints a
//! table (or `--json` with the `imtu.*` and `ecmp.*` keys) and writes the
//! traffic per gateway over time and the frame sizes per neighbour with
//! `--svg FILE`; exits 1 if a transfer was not exact or a frame size or
//! the lie check came out wrong.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use px_lab::border::exchange::ExchangeOptions;
use px_lab::border::{self, BorderOptions, Parts, ecmp::EcmpOptions};
use px_lab::exp::Report;

#[derive(Debug, Args)]
pub struct BorderArgs {
    /// Which part to run: the iMTU advertisement (`imtu`), the ECMP
    /// failover (`ecmp`) or both.
    #[arg(long, value_parser = ["all", "imtu", "ecmp"], default_value = "all")]
    part: String,
    /// Bytes of each bulk transfer of the advertisement part (each
    /// direction, each neighbour), MiB.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=4096))]
    imtu_mib: u64,
    /// sha256-checked TCP flows in each direction.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=32))]
    flows: u64,
    /// Rate of each flow in Mbit/s (paced 64 KiB writes).
    #[arg(long, default_value_t = 40.0)]
    rate_mbps: f64,
    /// Seconds of traffic before gw1 is killed.
    #[arg(long, default_value_t = 3.0)]
    before_kill_s: f64,
    /// Seconds gw1 stays dead.
    #[arg(long, default_value_t = 5.0)]
    down_s: f64,
    /// Seconds of traffic after gw1's restart.
    #[arg(long, default_value_t = 5.0)]
    after_restart_s: f64,
    /// 5-tuples asked of both routers' FIBs for the hash symmetry check.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    hash_tuples: u64,
    /// BFD interval in ms on both routers (detection after 3 missed).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(10..=1000))]
    bfd_ms: u32,
    /// The routers' `fib_multipath_hash_policy`: 3 (addresses, protocol,
    /// ports: symmetric) or 1 (L4, which reuses a packet's own hash: see
    /// docs/border.md).
    #[arg(long, default_value = "3", value_parser = ["1", "3"])]
    hash_policy: String,
    /// Extra arguments for both `px gateway`s (repeatable).
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    gateway_args: Vec<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write an SVG: traffic per gateway over time across the
    /// failover, and the largest frame per neighbour on the exchange.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

fn secs(name: &str, v: f64) -> Result<Duration, String> {
    if !(0.5..=600.0).contains(&v) {
        return Err(format!("--{name}: {v} is outside 0.5..=600 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

pub fn border(a: BorderArgs) -> Result<ExitCode, String> {
    if !(0.1..=10_000.0).contains(&a.rate_mbps) {
        return Err(format!("--rate-mbps: {} is outside 0.1..=10000", a.rate_mbps));
    }
    let o = EcmpOptions {
        exe: std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))?,
        flows: a.flows as usize,
        rate_mbps: a.rate_mbps,
        before_kill: secs("before-kill-s", a.before_kill_s)?,
        down: secs("down-s", a.down_s)?,
        after_restart: secs("after-restart-s", a.after_restart_s)?,
        hash_tuples: a.hash_tuples as usize,
        gateway_args: a.gateway_args,
        bfd_ms: a.bfd_ms,
        hash_policy: if a.hash_policy == "1" { 1 } else { 3 },
    };
    let parts = match a.part.as_str() {
        "imtu" => Parts::Imtu,
        "ecmp" => Parts::Ecmp,
        _ => Parts::All,
    };
    let exchange = ExchangeOptions { exe: o.exe.clone(), bytes: a.imtu_mib << 20, ..ExchangeOptions::default() };
    let json = a.json;
    let r = border::run(&BorderOptions { parts, ecmp: o, exchange }, &|line| eprintln!("{line}"))?;
    if let Some(p) = &a.svg {
        std::fs::write(p, r.svg()).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if json {
        println!("{}", r.json());
    } else {
        print!("{}", r.table());
    }
    Ok(if r.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
