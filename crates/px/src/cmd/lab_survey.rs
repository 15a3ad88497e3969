//! `px lab survey`: `px survey` against the lab "Internet" of
//! [`px_lab::survey`] (ground truth known), with the paper's table beside
//! its figures. Prints the table, or JSON with `targets`,
//! `exact_classification`, `frag_ok_fraction`, `icmp_pmtud_ok_fraction`,
//! `last_hop_filters`, `probes_per_target`, `late_probes`,
//! `targets_per_second` (routers at Linux's ICMP rate limits) and
//! `targets_per_second_unlimited_routers`.

use std::process::ExitCode;

use clap::Args;
use px_lab::require_root_or_skip;
use px_lab::survey::{SurveyLabOptions, run};

#[derive(Debug, Args)]
pub struct LabSurveyArgs {
    #[command(flatten)]
    o: SurveyLabOptions,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn survey(a: LabSurveyArgs) -> Result<ExitCode, String> {
    if !require_root_or_skip("px lab survey") {
        return Err("px lab survey needs root and network namespaces".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))?;
    let opts = SurveyLabOptions { exe, ..a.o };
    let json = a.json;
    let r = run(&opts, &|line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    if json {
        println!("{}", serde_json::to_value(&r).map_err(|e| e.to_string())?);
    } else {
        print!("{}", r.report());
    }
    Ok(if r.exact_classification { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
