//! `px lab pmtud`: the comparison of path MTU discovery tools on px-lab's
//! standard paths ([`px_lab::pmtud::compare`] runs it and renders it; see
//! there for how each tool is measured; its options are the flags). Prints
//! a table (or JSON): the true path MTU, each tool's answer, time, round
//! trips and packets sent.

use std::process::ExitCode;

use clap::Args;
use px_lab::pmtud::compare::{CompareOptions, Row, compare, table};
use px_lab::require_root_or_skip;

#[derive(Debug, Args)]
pub struct LabPmtudArgs {
    #[command(flatten)]
    o: CompareOptions,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn pmtud(a: LabPmtudArgs) -> Result<ExitCode, String> {
    if !require_root_or_skip("px lab pmtud") {
        return Err("px lab pmtud needs root and network namespaces".into());
    }
    let opts = CompareOptions { exe: super::lab_exp::px_exe()?, ..a.o };
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
