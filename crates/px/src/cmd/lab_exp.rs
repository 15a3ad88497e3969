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
    /// TCP congestion control of the hosts, set per socket (cubic is Linux's
    /// usual default; this machine's namespaces default to bbr, which does
    /// not back off on random loss and so hides the MSS effect of `wan`).
    #[arg(long, default_value = "cubic")]
    cc: String,
}

#[derive(Debug, Args)]
pub struct ReceiverArgs {
    /// Time per TCP run (four runs). e.g. 10s (1s..=600s; a bare number is
    /// seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", default_value = "10s", value_parser = super::lab_demo::secs_in(1, 600))]
    seconds: u64,
    /// TCP flows.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=128))]
    flows: u64,
    /// Time per UDP run (two runs); 0 skips UDP. e.g. 5s (0s..=600s; a bare number is
    /// seconds; old name --udp-seconds).
    #[arg(long = "udp-duration", alias = "udp-seconds", default_value = "5s", value_parser = super::lab_demo::secs_in(0, 600))]
    udp_seconds: u64,
    #[command(flatten)]
    out: Output,
}

#[derive(Debug, Args)]
pub struct WanArgs {
    /// Time per run (three runs; the paper ran a minute). e.g. 60s (1s..=3600s; a bare number is
    /// seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", default_value = "60s", value_parser = super::lab_demo::secs_in(1, 3600))]
    seconds: u64,
    /// One-way delay of the WAN path, each direction, e.g. 10ms (a bare
    /// number is milliseconds; old name --delay-ms).
    #[arg(long = "delay", alias = "delay-ms", default_value = "10ms", value_parser = super::units::millis_u64)]
    delay_ms: u64,
    /// Frame loss of the WAN path, each direction: a fraction (0.0001) or
    /// a percentage (0.01%); a bare number given as --loss-percent (the
    /// old name) is a percentage.
    #[arg(long = "loss", default_value = "0.01%", value_parser = super::units::loss_fraction)]
    loss: Option<f64>,
    /// The old spelling of --loss: a bare number is a percentage.
    #[arg(long = "loss-percent", hide = true, value_parser = super::units::loss_percent_bare, conflicts_with = "loss")]
    loss_percent: Option<f64>,
    #[command(flatten)]
    out: Output,
}

#[derive(Debug, Args)]
pub struct GroArgs {
    /// Time per run (16 runs by default). e.g. 5s (1s..=600s; a bare number is
    /// seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", default_value = "5s", value_parser = super::lab_demo::secs_in(1, 600))]
    seconds: u64,
    /// Concurrent flow counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    flows: Vec<u64>,
    /// MTUs (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1500,9000")]
    mtus: Vec<u32>,
    #[command(flatten)]
    out: Output,
}

#[derive(Debug, Args)]
pub struct MiddleboxArgs {
    /// Time per MTU. e.g. 10s (1s..=600s; a bare number is
    /// seconds; old name --seconds).
    #[arg(long = "duration", alias = "seconds", default_value = "10s", value_parser = super::lab_demo::secs_in(1, 600))]
    seconds: u64,
    /// MTUs of both links (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1500,3000,6000,9000")]
    mtus: Vec<u32>,
    /// nftables rules in the middle box's forward chain.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(0..=20000))]
    rules: u32,
    /// TCP flows.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=128))]
    flows: u64,
    #[command(flatten)]
    out: Output,
}

#[derive(Debug, Args)]
pub struct ParallelArgs {
    /// Concurrent download sessions (comma-separated; the paper's 1, 10,
    /// 100 scaled to a 2-core machine).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    sessions: Vec<u64>,
    /// Size of the file each session downloads (MB).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    file_mb: u64,
    /// Connections of a parallel session (axel -n).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(2..=32))]
    connections: u64,
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
    #[arg(long = "wan-duration", alias = "wan-seconds", default_value = "60s", value_parser = super::lab_demo::secs_in(1, 3600))]
    wan_seconds: u64,
    /// TCP congestion control of the hosts.
    #[arg(long, default_value = "cubic")]
    cc: String,
}

fn px_exe() -> Result<PathBuf, String> {
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
    let o = px_lab::receiver::ReceiverOptions {
        seconds: a.seconds,
        flows: a.flows,
        udp_seconds: a.udp_seconds,
        cc: a.out.cc.clone(),
        ..px_lab::receiver::ReceiverOptions::new(px_exe()?)
    };
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
        cc: a.out.cc.clone(),
        ..px_lab::wan::WanOptions::new(px_exe()?)
    };
    let res = px_lab::wan::run(&o, &progress(a.out.json))?;
    emit(&res, &a.out, "px lab wan", t0)
}

pub fn gro(a: GroArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab gro", &["iperf3", "taskset", "ethtool"])?;
    if a.flows.iter().any(|&f| !(1..=128).contains(&f)) || a.mtus.iter().any(|&m| !(1280..=65000).contains(&m)) {
        return Err("--flows must be 1..=128 and --mtus 1280..=65000".into());
    }
    let t0 = Instant::now();
    let o = px_lab::gro::GroOptions { seconds: a.seconds, flows: a.flows, mtus: a.mtus, cc: a.out.cc.clone() };
    let res = px_lab::gro::run(&o, &progress(a.out.json))?;
    emit(&res, &a.out, "px lab gro", t0)
}

pub fn middlebox(a: MiddleboxArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab middlebox", &["iperf3", "taskset", "ethtool", "nft"])?;
    if a.mtus.iter().any(|&m| !(1280..=65000).contains(&m)) {
        return Err("--mtus must be 1280..=65000".into());
    }
    let t0 = Instant::now();
    let o = px_lab::middlebox::MiddleboxOptions {
        seconds: a.seconds,
        mtus: a.mtus,
        rules: a.rules,
        flows: a.flows,
        cc: a.out.cc.clone(),
    };
    let res = px_lab::middlebox::run(&o, &progress(a.out.json))?;
    emit(&res, &a.out, "px lab middlebox", t0)
}

pub fn parallel(a: ParallelArgs) -> Result<ExitCode, String> {
    exp::check_prerequisites("px lab parallel", &["axel", "taskset", "ethtool"])?;
    if a.sessions.iter().any(|&n| !(1..=256).contains(&n)) {
        return Err("--sessions must be 1..=256".into());
    }
    let t0 = Instant::now();
    let o = px_lab::parallel::ParallelOptions {
        sessions: a.sessions,
        file_mb: a.file_mb,
        connections: a.connections,
        cc: a.out.cc.clone(),
    };
    let res = px_lab::parallel::run(&o, &progress(a.out.json))?;
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
