//! `px lab survey`: `px survey` against the lab "Internet" of
//! [`px_lab::survey`] (ground truth known), with the paper's table beside
//! its figures. Prints the table, or JSON with `targets`,
//! `exact_classification`, `frag_ok_fraction`, `icmp_pmtud_ok_fraction`,
//! `last_hop_filters`, `probes_per_target`, `late_probes`,
//! `targets_per_second` (routers at Linux's ICMP rate limits) and
//! `targets_per_second_unlimited_routers`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use px_lab::require_root_or_skip;
use px_lab::survey::{RouterLimits, SurveyLabOptions, run};

/// `--router-rate-limits`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Limits {
    /// Linux's defaults: one ICMP "time exceeded" a second after a burst of six.
    Linux,
    /// None: the routers answer every expiry.
    Off,
    /// Linux's defaults, then a second pass without (both checked).
    Both,
}

#[derive(Debug, Args)]
pub struct LabSurveyArgs {
    /// Targets (address × port; the lab has 380 addresses and 6 ports).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(8..=2280))]
    targets: u64,
    /// Spread the targets over this many addresses (default: one per
    /// target, up to 380; then several ports of each). Fewer addresses put
    /// more targets behind each address's queue and hop test.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=380))]
    addresses: Option<u64>,
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
    /// The routers' ICMP rate limits.
    #[arg(long, value_enum, default_value = "both")]
    router_rate_limits: Limits,
    /// Run `px survey` with the fast settings of earlier rounds (short
    /// timers, high rates) instead of its defaults.
    #[arg(long)]
    fast: bool,
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
        addresses: a.addresses.map(|n| n as usize),
        seed: a.seed,
        loss_percent: a.loss,
        output: a.output,
        interrupt_after: a.interrupt_after,
        router_limits: match a.router_rate_limits {
            Limits::Linux => RouterLimits::Linux,
            Limits::Off => RouterLimits::Off,
            Limits::Both => RouterLimits::Both,
        },
        fast: a.fast,
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
        println!("  px survey: {}; routers' ICMP rate limits: {}", r.survey_settings, r.router_rate_limits);
        if let Some(u) = r.targets_per_second_unlimited_routers {
            println!("  without router rate limits: {u:.1} targets/s");
        }
        println!(
            "  packets per target: {:.1} on average, {} at most; {} sent after their test decided",
            r.probes_per_target.mean, r.probes_per_target.max, r.late_probes
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
