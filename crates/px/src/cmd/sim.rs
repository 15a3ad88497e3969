//! `px sim …`: the deterministic simulator's experiments (crate `px-sim`).
//!
//! Each experiment's parameter struct is its flags (it derives them, with
//! the seed's settings as defaults, and checks its own ranges); this module
//! runs it with a progress line and prints what its result renders: the
//! table with the seed's own figures beside the simulated ones, or JSON
//! (`--json`), and the plot with `--svg FILE`. Every figure printed was
//! simulated in this run; the same flags and `--seed` give the same output.

use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Subcommand};
use px_sim::experiments::{
    MtuBenefitParams, MtuDropParams, PmtudCompareParams, ProgressLine, mtu_benefit_svg, mtu_benefit_with_progress,
    mtu_drop_svg, mtu_drop_with_progress, pmtud_compare_svg, pmtud_compare_with_progress,
};

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// The "MTU drop" test of the once-per-RTT blog: 1 MB over 1 Mb/s with
    /// 100 ms each way, path MTU 1500 dropping to 1394 after 1 s; completion
    /// time and losses per RTT estimator beside the blog's Table 1.
    MtuDrop {
        #[command(flatten)]
        p: MtuDropParams,
        #[command(flatten)]
        out: Output,
    },
    /// PMTUD methods (F-PMTUD, DPLPMTUD lsquic / bisection, ICMP PMTUD) over
    /// thousands of random Internet-like paths.
    PmtudCompare {
        #[command(flatten)]
        p: PmtudCompareParams,
        #[command(flatten)]
        out: Output,
    },
    /// One bulk TCP-like flow over a 10 ms, 0.01 %-loss WAN with MSS 1448 vs
    /// 8948 (the paper's Fig. 1d / sender experiment).
    MtuBenefit {
        #[command(flatten)]
        p: MtuBenefitParams,
        #[command(flatten)]
        out: Output,
    },
}

/// What every experiment can print besides its table.
#[derive(Debug, Args)]
pub struct Output {
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the plot (SVG) to this file.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

pub fn run(cmd: SimCommand) -> Result<ExitCode, String> {
    let t = Instant::now();
    match cmd {
        SimCommand::MtuDrop { p, out } => {
            let mut progress = ProgressLine::new("px sim mtu-drop", "variants");
            let r = mtu_drop_with_progress(&p, &mut |d, n| progress.update(d, n)).map_err(|e| e.to_string())?;
            progress.finish();
            emit(&out, || mtu_drop_svg(&r), &r.rows, || r.table(t.elapsed()))
        }
        SimCommand::PmtudCompare { p, out } => {
            let mut progress = ProgressLine::new("px sim pmtud-compare", "paths");
            let r = pmtud_compare_with_progress(&p, &mut |d, n| progress.update(d, n)).map_err(|e| e.to_string())?;
            progress.finish();
            emit(&out, || pmtud_compare_svg(&r), &r.summaries, || r.table(t.elapsed()))
        }
        SimCommand::MtuBenefit { p, out } => {
            let mut progress = ProgressLine::new("px sim mtu-benefit", "runs");
            let r = mtu_benefit_with_progress(&p, &mut |d, n| progress.update(d, n)).map_err(|e| e.to_string())?;
            progress.finish();
            emit(&out, || mtu_benefit_svg(&r), &r, || r.table(t.elapsed()))
        }
    }
}

/// Writes the plot if asked, then prints the JSON or the table.
fn emit<T: serde::Serialize>(
    out: &Output,
    svg: impl FnOnce() -> String,
    json: &T,
    table: impl FnOnce() -> String,
) -> Result<ExitCode, String> {
    if let Some(path) = &out.svg {
        std::fs::write(path, svg()).map_err(|e| format!("--svg {}: {e}", path.display()))?;
    }
    if out.json {
        println!("{}", serde_json::to_string_pretty(json).map_err(|e| e.to_string())?);
    } else {
        print!("{}", table());
    }
    Ok(ExitCode::SUCCESS)
}
