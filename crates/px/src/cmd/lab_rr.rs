//! `px lab rr`: request/response latency through px gateway and through a
//! plain Linux router in the same run ([`px_lab::rr`] runs it). Prints p50
//! and p99 transaction time per answer size (or JSON with, per size,
//! `gateway_p50_us`, `gateway_p99_us`, `router_p50_us`, `router_p99_us`).

use std::process::ExitCode;

use clap::Args;
use px_lab::require_root_or_skip;
use px_lab::rr::{RrOptions, run};

#[derive(Debug, Args)]
pub struct RrArgs {
    /// Answer sizes in bytes (comma-separated); requests are 64 bytes.
    #[arg(long, value_delimiter = ',', default_value = "1024,16384,65536")]
    sizes: Vec<usize>,
    /// Transactions per size and per middle box, one at a time.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    transactions: u64,
    /// Extra arguments for `px gateway` (repeatable), e.g. `--gateway-arg=--psh=flush`.
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    gateway_args: Vec<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn rr(a: RrArgs) -> Result<ExitCode, String> {
    if !require_root_or_skip("px lab rr") {
        return Err("px lab rr needs root and network namespaces".into());
    }
    if a.sizes.is_empty() || a.sizes.iter().any(|s| !(1..=16 << 20).contains(s)) {
        return Err("--sizes: each between 1 and 16777216 bytes".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))?;
    let opts = RrOptions { exe, sizes: a.sizes, transactions: a.transactions as usize, gateway_args: a.gateway_args };
    let json = a.json;
    let r = run(&opts, &|line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    if json {
        println!("{}", r.json(opts.transactions));
    } else {
        print!("{}", r.table(opts.transactions));
    }
    Ok(ExitCode::SUCCESS)
}
