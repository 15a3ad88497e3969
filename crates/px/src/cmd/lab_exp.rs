//! `px lab receiver|wan|gro|parallel|middlebox|report`: the paper's
//! end-host experiments (px-lab's [`px_lab::exp`]); this module parses the
//! flags and prints what each result renders: a table (or `--json`), an
//! SVG plot with `--svg FILE`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use px_lab::exp::{self, Report};

/// Flags every experiment has.
#[derive(Debug, Args)]
pub struct Output {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the plot to this SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// An experiment's own flags (its options derive them) and the output's.
#[derive(Debug, Args)]
pub struct Exp<O: clap::Args> {
    #[command(flatten)]
    o: O,
    #[command(flatten)]
    out: Output,
}

pub type ReceiverArgs = Exp<px_lab::receiver::ReceiverOptions>;
pub type GroArgs = Exp<px_lab::gro::GroOptions>;
pub type MiddleboxArgs = Exp<px_lab::middlebox::MiddleboxOptions>;
pub type ParallelArgs = Exp<px_lab::parallel::ParallelOptions>;

#[derive(Debug, Args)]
pub struct WanArgs {
    /// Time per run (three runs; the paper ran a minute). e.g. 60s (1s..=3600s; a bare number is
    /// seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", default_value = "60s", value_parser = px_units::secs_in(1, 3600))]
    seconds: u64,
    /// One-way delay of the WAN path, each direction, e.g. 10ms (a bare
    /// number is milliseconds; old name --delay-ms).
    #[arg(long = "delay", alias = "delay-ms", default_value = "10ms", value_parser = px_units::millis_u64)]
    delay_ms: u64,
    /// Frame loss of the WAN path, each direction: a fraction (0.0001) or
    /// a percentage (0.01%); a bare number given as --loss-percent (the
    /// old name) is a percentage.
    #[arg(long = "loss", default_value = "0.01%", value_parser = px_units::loss_fraction)]
    loss: Option<f64>,
    /// The old spelling of --loss: a bare number is a percentage.
    #[arg(long = "loss-percent", hide = true, value_parser = px_units::loss_percent_bare, conflicts_with = "loss")]
    loss_percent: Option<f64>,
    /// TCP congestion control of the sender, set per socket (cubic is
    /// Linux's usual default; this machine's namespaces default to bbr,
    /// which does not back off on random loss and so hides the MSS effect).
    #[arg(long, default_value = "cubic")]
    cc: String,
    #[command(flatten)]
    out: Output,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Directory for report.md, report.json and the SVG plots.
    #[arg(long)]
    out: PathBuf,
    /// Parts to skip (comma-separated): receiver, wan, gro, middlebox,
    /// parallel, demo, pmtud.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// Every part at its shortest: checks the report works, measures nothing.
    #[arg(long)]
    quick: bool,
    /// Time per run of `wan` (three runs; the paper ran a minute). e.g. 60s (1s..=3600s; a bare number is
    /// seconds; old name --wan-seconds).
    #[arg(long = "wan-duration", alias = "wan-seconds", default_value = "60s", value_parser = px_units::secs_in(1, 3600))]
    wan_seconds: u64,
    /// TCP congestion control of the hosts.
    #[arg(long, default_value = "cubic")]
    cc: String,
}

pub(crate) fn px_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the px binary: {e}"))
}

/// Progress on stderr unless JSON was asked for.
fn progress(json: bool) -> impl Fn(&str) {
    move |s: &str| {
        if !json {
            eprintln!("{s}");
        }
    }
}

/// Prints the result as a table or JSON and writes its SVG.
fn emit(res: &dyn Report, out: &Output, what: &str, t0: Instant) -> Result<ExitCode, String> {
    if let Some(p) = &out.svg {
        std::fs::write(p, res.svg()).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if out.json {
        println!("{}", res.json());
    } else {
        print!("{}", res.table());
        eprintln!("{what}: done in {:.0} s; namespaces removed.", t0.elapsed().as_secs_f64());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn receiver(a: ReceiverArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab receiver", &["iperf3", "taskset", "ethtool"])?;
    let t0 = Instant::now();
    let o = px_lab::receiver::ReceiverOptions { exe: px_exe()?, ..a.o };
    let res = px_lab::receiver::run(&o, &progress(a.out.json))?;
    emit(&res, &a.out, "px lab receiver", t0)
}

pub fn wan(a: WanArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab wan", &["iperf3", "ethtool"])?;
    let t0 = Instant::now();
    let o = px_lab::wan::WanOptions {
        seconds: a.seconds,
        delay_ms: a.delay_ms,
        loss: a.loss_percent.or(a.loss).unwrap_or(0.0001),
        cc: a.cc,
        ..px_lab::wan::WanOptions::new(px_exe()?)
    };
    let res = px_lab::wan::run(&o, &progress(a.out.json))?;
    emit(&res, &a.out, "px lab wan", t0)
}

pub fn gro(a: GroArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab gro", &["iperf3", "taskset", "ethtool"])?;
    let t0 = Instant::now();
    let res = px_lab::gro::run(&a.o, &progress(a.out.json))?;
    emit(&res, &a.out, "px lab gro", t0)
}

pub fn middlebox(a: MiddleboxArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab middlebox", &["iperf3", "taskset", "ethtool", "nft"])?;
    let t0 = Instant::now();
    let res = px_lab::middlebox::run(&a.o, &progress(a.out.json))?;
    emit(&res, &a.out, "px lab middlebox", t0)
}

pub fn parallel(a: ParallelArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab parallel", &["axel", "taskset", "ethtool"])?;
    let t0 = Instant::now();
    let res = px_lab::parallel::run(&a.o, &progress(a.out.json))?;
    emit(&res, &a.out, "px lab parallel", t0)
}

pub fn report(a: ReportArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab report", &["iperf3", "taskset", "ethtool", "nft", "axel"])?;
    let t0 = Instant::now();
    let o = px_lab::report::ReportOptions {
        exe: px_exe()?,
        out: a.out,
        skip: a.skip,
        quick: a.quick,
        cc: a.cc,
        wan_seconds: a.wan_seconds,
    };
    let r = px_lab::report::run(&o, &progress(false))?;
    println!("{}", r.path.display());
    for (name, err) in &r.failed {
        eprintln!("px lab report: {name} failed: {err}");
    }
    eprintln!("px lab report: {} part(s) in {:.0} s; namespaces removed.", r.ran.len(), t0.elapsed().as_secs_f64());
    Ok(if r.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
