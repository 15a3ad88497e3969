//! `px lab border`: a border of several gateways (issue 30; px-lab's
//! [`px_lab::border`]): the iMTU advertisement over BGP with its
//! verification, and two gateways behind ECMP across a kill -9. Prints a
//! table (or `--json` with the `imtu.*` and `ecmp.*` keys) and writes the
//! traffic per gateway over time and the frame sizes per neighbour with
//! `--svg FILE`; exits 1 if a transfer was not exact or a frame size or
//! the lie check came out wrong.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use px_lab::border::{self, flags::BorderFlags};
use px_lab::exp::Report;

#[derive(Debug, Args)]
pub struct BorderArgs {
    #[command(flatten)]
    o: BorderFlags,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write an SVG: traffic per gateway over time across the
    /// failover, and the largest frame per neighbour on the exchange.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

pub fn border(a: BorderArgs) -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))?;
    let o = a.o.options(exe)?;
    let r = border::run(&o, &|line| eprintln!("{line}"))?;
    if let Some(p) = &a.svg {
        std::fs::write(p, r.svg()).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if a.json {
        println!("{}", r.json());
    } else {
        print!("{}", r.table());
    }
    Ok(if r.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
