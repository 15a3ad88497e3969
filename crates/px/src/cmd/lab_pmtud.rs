//! `px lab pmtud`: the comparison of path MTU discovery tools on px-lab's
//! standard paths ([`px_lab::pmtud::compare`] runs it and renders it; see
//! there for how each tool is measured). Prints a table (or JSON): the true
//! path MTU, each tool's answer, time, round trips and packets sent.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use px_lab::pmtud::compare::{CompareOptions, Row, compare, table};
use px_lab::require_root_or_skip;

use crate::cmd::probe::parse_duration;

#[derive(Debug, Args)]
pub struct LabPmtudArgs {
    /// Only the topologies whose name contains this text.
    #[arg(long)]
    only: Option<String>,
    /// Bound on each tracepath run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    tracepath_timeout: Duration,
    /// Bound on each scamper run.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    scamper_timeout: Duration,
    /// Runs of each tool on each path, reported by the median wall time
    /// (a run without an answer is not repeated; differing answers are
    /// reported as inexact)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    repeat: u32,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn pmtud(a: LabPmtudArgs) -> Result<ExitCode, String> {
    if !require_root_or_skip("px lab pmtud") {
        return Err("px lab pmtud needs root and network namespaces".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))?;
    let opts = CompareOptions {
        exe,
        only: a.only,
        tracepath_timeout: a.tracepath_timeout,
        scamper_timeout: a.scamper_timeout,
        repeat: a.repeat,
    };
    let json = a.json;
    let rows = compare(&opts, &|line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    if a.json {
        println!("{}", serde_json::Value::Array(rows.iter().map(Row::json).collect()));
    } else {
        print!("{}", table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}
