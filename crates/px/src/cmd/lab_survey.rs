//! `px lab survey`: `px survey` against the lab "Internet" of
//! [`px_lab::survey`] (ground truth known), with the paper's table beside
//! its figures. Prints the table, or JSON with `targets`,
//! `exact_classification`, `frag_ok_fraction`, `icmp_pmtud_ok_fraction`,
//! `last_hop_filters`, `targets_per_second`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use px_lab::require_root_or_skip;
use px_lab::survey::{SurveyLabOptions, run};

#[derive(Debug, Args)]
pub struct LabSurveyArgs {
    /// Targets (address × port; the lab has 380 addresses and 6 ports).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(8..=2280))]
    targets: u64,
    /// Seed of which address gets which behaviour.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Percent of packets dropped each way toward the `lossy` addresses.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=20))]
    loss: u32,
    /// Keep the survey's JSON lines in this file.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Interrupt a first run with SIGINT after this long (e.g. 2s), then
    /// resume it: checks that Ctrl-C leaves a valid, resumable output.
    #[arg(long, value_parser = crate::cmd::probe::parse_duration)]
    interrupt_after: Option<std::time::Duration>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn survey(a: LabSurveyArgs) -> Result<ExitCode, String> {
    if !require_root_or_skip("px lab survey") {
        return Err("px lab survey needs root and network namespaces".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))?;
    let opts = SurveyLabOptions {
        exe,
        targets: a.targets as usize,
        seed: a.seed,
        loss_percent: a.loss,
        output: a.output,
        interrupt_after: a.interrupt_after,
    };
    let json = a.json;
    let r = run(&opts, &|line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    if json {
        println!("{}", serde_json::to_value(&r).map_err(|e| e.to_string())?);
    } else {
        println!(
            "px lab survey — {} targets on {} addresses, {:.1} s ({:.1} targets/s), {} % loss on the lossy paths\n",
            r.targets, r.addresses, r.seconds, r.targets_per_second, r.loss_percent
        );
        println!("  ground truth: {}", r.truth.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "));
        println!(
            "  classification: {}\n",
            if r.exact_classification {
                "exact for every target".to_string()
            } else {
                format!("{} mismatches", r.mismatches.len())
            }
        );
        if let Some(i) = &r.interrupted_run {
            println!(
                "  interrupted first run: exit {:?}, {} records, {}; the second run resumed from them\n",
                i.exit_code,
                i.records,
                if i.whole_lines { "whole lines only" } else { "a CUT LINE" }
            );
        }
        for m in r.mismatches.iter().take(10) {
            println!("    {} ({:?}): {}", m.target, m.truth, m.got);
        }
        print!("{}", r.table);
        println!(
            "\n  A lab, not the Internet: the shares above are the mix the lab was built with; what the run\n  \
             shows is that the survey recovers each target's behaviour exactly. The paper's figures are from\n  \
             389,428 real web servers (§5.3); ICMP PMTUD's 51 % is Custura et al.'s 2018 figure."
        );
    }
    Ok(if r.exact_classification { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
