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
    #[command(flatten)]
    o: RrOptions,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn rr(a: RrArgs) -> Result<ExitCode, String> {
    if !require_root_or_skip("px lab rr") {
        return Err("px lab rr needs root and network namespaces".into());
    }
    let opts = RrOptions { exe: super::lab_exp::px_exe()?, ..a.o };
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
