//! `px lab rtt`: the 1500-vs-9000 RTT study of the seeds on this machine
//! ([`px_lab::rtt`] runs it): round-trip time against message size for
//! TCP (Nagle on, as the study's program), TCP_NODELAY and UDP, at MTU
//! 1500, at 9000, and 9000 → px gateway / Linux router → 1500. A table per
//! protocol (p50 with p10–p90), `--json` (one row per path × protocol ×
//! size), `--svg`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use px_lab::require_root_or_skip;
use px_lab::rtt::{RttOptions, run, svg, table};

#[derive(Debug, Args)]
pub struct RttArgs {
    #[command(flatten)]
    o: RttOptions,
    /// Write the plot here.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
}

pub fn rtt(a: RttArgs) -> Result<ExitCode, String> {
    if !require_root_or_skip("px lab rtt") {
        return Err("px lab rtt needs root and network namespaces".into());
    }
    let o = RttOptions { exe: super::lab_exp::px_exe()?, ..a.o };
    let json = a.json;
    let r = run(&o, &|line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    if let Some(p) = &a.svg {
        std::fs::write(p, svg(&r)).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if json {
        println!("{}", serde_json::to_value(&r).map_err(|e| e.to_string())?);
    } else {
        print!("{}", table(&r));
    }
    Ok(ExitCode::SUCCESS)
}
