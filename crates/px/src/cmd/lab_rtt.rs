//! `px lab rtt`: the 1500-vs-9000 RTT study of the seeds on this machine
//! ([`px_lab::rtt`] runs it): round-trip time against message size for
//! TCP (Nagle on, as the study's program), TCP_NODELAY and UDP, at MTU
//! 1500, at 9000, and 9000 → px gateway / Linux router → 1500. A table per
//! protocol (p50 with p10–p90), `--json` (one row per path × protocol ×
//! size), `--svg`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use px_lab::LinkRate;
use px_lab::require_root_or_skip;
use px_lab::rtt::{DEFAULT_SIZES, RttOptions, run, svg, table};

use crate::cmd::probe::parse_duration;

#[derive(Debug, Args)]
pub struct RttArgs {
    /// Message sizes in bytes (comma-separated); UDP skips those above 65507.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SIZES)]
    sizes: Vec<usize>,
    /// Round trips per path, protocol and size …
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(10..=100_000))]
    reps: u64,
    /// … or as many as fit in this time (at least 10).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    budget: Duration,
    /// Only the two direct links (no px gateway, no router).
    #[arg(long)]
    no_gateway: bool,
    /// Link rates to measure at, in turn (comma-separated; `none`: the
    /// unshaped veth), e.g. `none,1gbit,10gbit`: every egress of every path
    /// shaped to the rate with a one-frame burst (tbf), the direct hosts
    /// through a switch.
    #[arg(long, value_delimiter = ',', value_parser = parse_rate)]
    link_rate: Vec<Option<LinkRate>>,
    /// Write the plot here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
}

pub fn rtt(a: RttArgs) -> Result<ExitCode, String> {
    if !require_root_or_skip("px lab rtt") {
        return Err("px lab rtt needs root and network namespaces".into());
    }
    if a.sizes.is_empty() || a.sizes.iter().any(|s| !(4..=1 << 20).contains(s)) {
        return Err("--sizes: each between 4 and 1048576 bytes".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))?;
    let o = RttOptions {
        exe,
        sizes: a.sizes,
        reps: a.reps as usize,
        budget: a.budget,
        gateway: !a.no_gateway,
        link_rates: a.link_rate,
    };
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

fn parse_rate(s: &str) -> Result<Option<LinkRate>, String> {
    LinkRate::parse(s).map_err(|e| e.to_string())
}
