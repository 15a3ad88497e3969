//! `px survey`: the fragment-delivery survey of the paper's §5.3 toward the
//! targets of a file ([`px_survey`] does the work), and `px survey report`,
//! the paper's table from its output.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use px_survey::exchange::{HopConfig, TcpConfig};
use px_survey::record::Resume;
use px_survey::report::Summary;
use px_survey::run::{Options, Progress, run};

use crate::cmd::probe::parse_duration;

/// `px survey` (its help text is on the subcommand in `main.rs`).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SurveyArgs {
    #[command(subcommand)]
    command: Option<SurveyCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum SurveyCommand {
    /// The paper's table (§5.3) from a survey's JSON lines.
    Report(ReportArgs),
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// The survey's output (JSON lines).
    file: PathBuf,
    /// Print the counts as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The target file.
    #[arg(required = true)]
    targets: Option<PathBuf>,
    /// The output (JSON lines), appended to and resumed from.
    #[arg(short, long, required = true)]
    output: Option<PathBuf>,
    /// Targets in progress at once.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
    /// Packets per second, all targets together (bursts of a tenth of a second).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rate: u32,
    /// Packets per second toward one address (bursts of 20).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    per_destination_rate: u32,
    /// Give up on a connection when nothing new of ours has left for this
    /// long (time in the rate limiter's queue does not count; at most 4×
    /// this after its first SYN left).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
    /// First retransmission timeout of our TCP (SYN, request), doubled on each.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    rto: Duration,
    /// New connections after one that timed out (unfragmented and fragmented
    /// fetch); a refusal (RST, ICMP administratively prohibited) is not retried.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10))]
    retries: u32,
    /// IP fragments the request is cut into.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(2..=8))]
    fragments: u16,
    /// Hop test: the most routers tested (the path's length comes from the
    /// server's own answers; nothing is sent past the last router).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u8).range(1..=64))]
    max_hops: u8,
    /// Hop test: tries of each probe (the fragment train, the whole packet)
    /// at one TTL; routers rate-limit their ICMP, so silence is asked again.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10))]
    hop_rounds: u32,
    /// Hop test: how long a round waits for answers after its last probe left.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    hop_wait: Duration,
    /// MTU announced by the PMTUD test's "fragmentation needed".
    #[arg(long, default_value_t = 1280, value_parser = clap::value_parser!(u16).range(576..=1400))]
    ptb_mtu: u16,
    /// Source ports of our TCP, outside the kernel's ephemeral range.
    #[arg(long, default_value = "61000-65000", value_parser = parse_ports)]
    ports: (u16, u16),
    /// The HTTP request's path.
    #[arg(long, default_value = "/")]
    path: String,
    /// Allow sending from the host's network namespace (surveying the real
    /// Internet: be sure of your targets and your rates).
    #[arg(long)]
    allow_host_namespace: bool,
    /// No progress line (there is none when stderr is not a terminal).
    #[arg(short, long)]
    quiet: bool,
    /// At the end, print the report as one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

fn parse_ports(s: &str) -> Result<(u16, u16), String> {
    let (a, b) = s.split_once('-').ok_or_else(|| format!("`{s}`: expected LOW-HIGH, e.g. 61000-65000"))?;
    let (a, b) = (a.trim().parse::<u16>(), b.trim().parse::<u16>());
    match (a, b) {
        (Ok(a), Ok(b)) if 1024 <= a && a + 63 <= b => Ok((a, b)),
        _ => Err(format!("`{s}`: two ports, 1024 or above, at least 64 apart")),
    }
}

pub fn run_cmd(a: SurveyArgs) -> Result<ExitCode, String> {
    match a.command {
        Some(SurveyCommand::Report(r)) => report(r),
        None => survey(a.run),
    }
}

fn report(a: ReportArgs) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(&a.file).map_err(|e| format!("{}: {e}", a.file.display()))?;
    let r = Resume::read(&text).map_err(|e| format!("{}: {e}", a.file.display()))?;
    print_summary(&Summary::of(&r.records), a.json);
    Ok(ExitCode::SUCCESS)
}

fn print_summary(s: &Summary, json: bool) {
    if json {
        let mut v = serde_json::to_value(s).expect("a summary serialises");
        v["frag_ok_fraction"] = s.frag_ok_fraction().into();
        v["icmp_pmtud_ok_fraction"] = s.icmp_pmtud_ok_fraction().into();
        println!("{v}");
    } else {
        print!("{}", s.table());
    }
}

fn survey(a: RunArgs) -> Result<ExitCode, String> {
    let (Some(targets_path), Some(output)) = (a.targets, a.output) else {
        return Err("px survey TARGETS --output FILE (see --help)".into());
    };
    let text = std::fs::read_to_string(&targets_path).map_err(|e| format!("{}: {e}", targets_path.display()))?;
    let targets = px_survey::parse_targets(&text).map_err(|e| format!("{}: {e}", targets_path.display()))?;
    if targets.is_empty() {
        return Err(format!("{}: no targets", targets_path.display()));
    }
    let opts = Options {
        concurrency: a.concurrency as usize,
        rate: (a.rate as f64, (a.rate as f64 / 10.0).max(10.0)),
        per_destination: (a.per_destination_rate as f64, 20.0),
        tcp: TcpConfig { timeout: a.timeout, rto: a.rto, ..TcpConfig::default() },
        retries: a.retries,
        fragments: a.fragments as usize,
        hops: HopConfig {
            max_hops: a.max_hops,
            rounds: a.hop_rounds,
            round_wait: a.hop_wait,
            fragments: a.fragments as usize,
        },
        ptb_mtu: a.ptb_mtu,
        ports: a.ports,
        path: a.path,
        allow_host_namespace: a.allow_host_namespace,
    };
    if !opts.path.starts_with('/') || opts.path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("--path `{}`: an absolute path without spaces", opts.path));
    }
    let stop = crate::signals::install();
    let bar = !a.quiet && std::io::stderr().is_terminal();
    let mut show = |p: Progress| {
        if bar {
            let secs = p.elapsed.as_secs_f64().max(1e-3);
            let rate = p.done as f64 / secs;
            let eta = if rate > 0.0 { (p.total - p.done) as f64 / rate } else { f64::NAN };
            eprint!("\r  {}/{} targets  {rate:.1}/s  ETA {eta:.0} s   ", p.done, p.total);
        }
    };
    let r = run(&targets, &output, &opts, &stop, &mut show).map_err(|e| e.to_string())?;
    if bar {
        eprintln!();
    }
    eprintln!(
        "px survey: {} targets in {:.1} s ({:.1}/s, {} packets){}{}",
        r.surveyed,
        r.elapsed.as_secs_f64(),
        r.surveyed as f64 / r.elapsed.as_secs_f64().max(1e-3),
        r.packets,
        if r.skipped > 0 { format!(", {} already in {}", r.skipped, output.display()) } else { String::new() },
        if r.interrupted { "; interrupted: run again to resume" } else { "" },
    );
    let text = std::fs::read_to_string(&output).map_err(|e| format!("{}: {e}", output.display()))?;
    let all = Resume::read(&text).map_err(|e| format!("{}: {e}", output.display()))?;
    print_summary(&Summary::of(&all.records), a.json);
    Ok(if r.interrupted { ExitCode::from(130) } else { ExitCode::SUCCESS })
}
