//! `px sim …`: the deterministic simulator's experiments (crate `px-sim`).
//!
//! Each subcommand builds the experiment's parameter struct from flags
//! (defaults = the seed's setting), runs it, and prints a table with the
//! seed's own figures beside the simulated ones, or JSON (`--json`), and
//! optionally writes the plot (`--svg FILE`). Every figure printed was
//! simulated in this run; the same flags and `--seed` give the same output.

use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use px_sim::experiments::{
    Method, MtuBenefitParams, MtuDropParams, PmtudCompareParams, ProgressLine, RttVariant, SearchKind, mtu_benefit_svg,
    mtu_benefit_with_progress, mtu_drop_svg, mtu_drop_with_progress, pmtud_compare_svg, pmtud_compare_with_progress,
};
use px_sim::transport::SenderModel;

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// The "MTU drop" test of the once-per-RTT blog: 1 MB over 1 Mb/s with
    /// 100 ms each way, path MTU 1500 dropping to 1394 after 1 s; completion
    /// time and losses per RTT estimator beside the blog's Table 1.
    MtuDrop(MtuDropArgs),
    /// PMTUD methods (F-PMTUD, DPLPMTUD lsquic / bisection, ICMP PMTUD) over
    /// thousands of random Internet-like paths.
    PmtudCompare(PmtudCompareArgs),
    /// One bulk TCP-like flow over a 10 ms, 0.01 %-loss WAN with MSS 1448 vs
    /// 8948 (the paper's Fig. 1d / sender experiment).
    MtuBenefit(MtuBenefitArgs),
}

/// Flags every experiment has.
#[derive(Debug, Args)]
pub struct Common {
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the plot (SVG) to this file.
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
    /// Seed of every random draw (same seed, same output).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VariantArg {
    /// RFC 9002, every sample.
    Classic,
    /// Once per RTT, PTO with 4 × rttvar.
    #[value(name = "4v")]
    Once4v,
    /// Once per RTT, PTO from the maximum RTT seen.
    #[value(name = "maxrtt")]
    OnceMaxRtt,
    /// Once per RTT, PTO with 3 × rttvar.
    #[value(name = "3v")]
    Once3v,
}

impl From<VariantArg> for RttVariant {
    fn from(v: VariantArg) -> Self {
        match v {
            VariantArg::Classic => RttVariant::Classic,
            VariantArg::Once4v => RttVariant::Once4V,
            VariantArg::OnceMaxRtt => RttVariant::OnceMaxRtt,
            VariantArg::Once3v => RttVariant::Once3V,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SenderArg {
    /// picoquic's sender as its MTU-drop test runs it: CUBIC with its delay
    /// exit from slow start, its pacer, RACK and timer losses, MTU reset to
    /// 1252 after 11 full-size losses (docs/sim.md).
    Picoquic,
    /// The earlier sender: RFC 9002 NewReno with px-pmtud's DPLPMTUD.
    Newreno,
    /// The picoquic sender with picoquic's BBR (v1, as the blog's 2023 test
    /// ran it) instead of CUBIC, and the 2023 per-packet timer rule
    /// (docs/sim.md).
    Bbr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SearchArg {
    /// lsquic: the maximum first, then bisection to 99 %.
    Lsquic,
    /// Bisection to the byte.
    Bisection,
}

#[derive(Debug, Args)]
pub struct MtuDropArgs {
    #[command(flatten)]
    common: Common,
    /// Bytes to download.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1000..=1_000_000_000))]
    file_bytes: u64,
    /// Bottleneck rate, Mb/s (0.01 to 100 000).
    #[arg(long, default_value_t = 1.0)]
    bandwidth_mbps: f64,
    /// One-way delay of the bottleneck, ms (0 to 10 000).
    /// A duration such as 10ms; a bare number is milliseconds (old name --delay-ms).
    #[arg(long = "delay", alias = "delay-ms", default_value = "100ms", value_parser = super::units::millis_f64)]
    delay_ms: f64,
    /// Bottleneck drop-tail buffer, bytes (default: unlimited, as in the blog's test).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1500..=1_000_000_000))]
    queue_bytes: Option<u64>,
    /// Path MTU before the drop.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(1280..=9216))]
    mtu_before: u32,
    /// Path MTU after the drop (at least 1200, at most --mtu-before).
    #[arg(long, default_value_t = 1394, value_parser = clap::value_parser!(u32).range(1200..=9216))]
    mtu_after: u32,
    /// Largest datagram, IP bytes (DPLPMTUD's MAX_PLPMTU; default the blog's 1440-byte QUIC
    /// packet, 1468 B of IPv4, or --mtu-before if that is smaller).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1200..=9216))]
    max_packet: Option<u32>,
    /// When the MTU drops, seconds (picoquic and bbr senders: after the
    /// handshake, as in picoquic's test; newreno: from time zero).
    /// A duration such as 1s; a bare number is seconds (old name --drop-at-s).
    #[arg(long = "drop-at", alias = "drop-at-s", default_value = "1s", value_parser = super::units::secs_f64)]
    drop_at_s: f64,
    /// The sender to simulate.
    #[arg(long, value_enum, default_value_t = SenderArg::Newreno)]
    sender: SenderArg,
    /// DPLPMTUD search (newreno sender only; picoquic and bbr probe as picoquic does).
    #[arg(long, value_enum, default_value_t = SearchArg::Lsquic)]
    search: SearchArg,
    /// Floor of DPLPMTUD's PROBE_TIMER, ms (RFC 8899 says 1000; 0 = the PTO alone, as QUIC stacks do).
    /// A duration such as 1s; a bare number is milliseconds (old name --probe-timer-floor-ms).
    #[arg(long = "probe-timer-floor", alias = "probe-timer-floor-ms", default_value = "0ms", value_parser = super::units::millis_u64)]
    probe_timer_floor_ms: u64,
    /// RTT estimators to compare, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "classic,4v,maxrtt,3v")]
    variants: Vec<VariantArg>,
    /// Random loss on the bottleneck, each direction (0 <= loss < 0.5).
    /// A fraction (0.0001) or a percentage (0.01%).
    #[arg(long = "loss", default_value = "0", value_parser = super::units::loss_fraction)]
    loss: f64,
    /// Give up after this many simulated seconds.
    /// A duration such as 300s; a bare number is seconds (old name --deadline-s).
    #[arg(long = "deadline", alias = "deadline-s", default_value = "300s", value_parser = super::units::secs_f64)]
    deadline_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// F-PMTUD with DF-set refinement (DPLPMTUD fallback).
    Fpmtud,
    /// DPLPMTUD, lsquic search.
    Lsquic,
    /// DPLPMTUD, bisection.
    Bisection,
    /// Classic ICMP PMTUD (RFC 1191).
    Icmp,
}

impl From<MethodArg> for Method {
    fn from(m: MethodArg) -> Self {
        match m {
            MethodArg::Fpmtud => Method::Fpmtud,
            MethodArg::Lsquic => Method::DplpmtudLsquic,
            MethodArg::Bisection => Method::DplpmtudBisection,
            MethodArg::Icmp => Method::IcmpPmtud,
        }
    }
}

#[derive(Debug, Args)]
pub struct PmtudCompareArgs {
    #[command(flatten)]
    common: Common,
    /// Random paths to draw.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    paths: u32,
    /// Fewest links on a path (a path of 2 links has one router).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=64))]
    min_hops: u32,
    /// Most links on a path.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=64))]
    max_hops: u32,
    /// Smallest round-trip time, ms.
    /// A duration such as 5ms; a bare number is milliseconds (old name --min-rtt-ms).
    #[arg(long = "min-rtt", alias = "min-rtt-ms", default_value = "5ms", value_parser = super::units::millis_f64)]
    min_rtt_ms: f64,
    /// Largest round-trip time, ms (at most 10 000).
    /// A duration such as 300ms; a bare number is milliseconds (old name --max-rtt-ms).
    #[arg(long = "max-rtt", alias = "max-rtt-ms", default_value = "300ms", value_parser = super::units::millis_f64)]
    max_rtt_ms: f64,
    /// Share of paths with random loss (0..1).
    #[arg(long, default_value_t = 0.3)]
    lossy_share: f64,
    /// Largest loss rate of a lossy path, each direction (0 <= loss < 0.5).
    /// A fraction (0.02) or a percentage (2%).
    #[arg(long = "max-loss", default_value = "0.02", value_parser = super::units::loss_fraction)]
    max_loss: f64,
    /// Share of paths where no router sends ICMP "fragmentation needed" (0..1).
    #[arg(long, default_value_t = 0.2)]
    black_hole_share: f64,
    /// Share of paths whose last router drops fragments (0..1).
    #[arg(long, default_value_t = 0.05)]
    fragment_filter_share: f64,
    /// Share of probers on a 9000-byte local link (0..1).
    #[arg(long, default_value_t = 0.3)]
    jumbo_local_share: f64,
    /// Share of IPv6 paths (0..1).
    #[arg(long, default_value_t = 0.2)]
    ipv6_share: f64,
    /// Floor of DPLPMTUD's PROBE_TIMER, ms (RFC 8899: 1000).
    /// A duration such as 1s; a bare number is milliseconds (old name --probe-timer-floor-ms).
    #[arg(long = "probe-timer-floor", alias = "probe-timer-floor-ms", default_value = "1000ms", value_parser = super::units::millis_u64)]
    probe_timer_floor_ms: u64,
    /// Classic PMTUD: wait per probe before retrying, ms.
    /// A duration such as 1s; a bare number is milliseconds (old name --icmp-timeout-ms).
    #[arg(long = "icmp-timeout", alias = "icmp-timeout-ms", default_value = "1000ms", value_parser = super::units::millis_u64)]
    icmp_timeout_ms: u64,
    /// Classic PMTUD: tries per size.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    icmp_retries: u32,
    /// Methods to compare, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fpmtud,lsquic,bisection,icmp")]
    methods: Vec<MethodArg>,
    /// Give a method up after this many simulated seconds on one path.
    /// A duration such as 300s; a bare number is seconds (old name --deadline-s).
    #[arg(long = "deadline", alias = "deadline-s", default_value = "300s", value_parser = super::units::secs_f64)]
    deadline_s: f64,
}

#[derive(Debug, Args)]
pub struct MtuBenefitArgs {
    #[command(flatten)]
    common: Common,
    /// One-way delay of the WAN link, ms (the paper: 10).
    /// A duration such as 10ms; a bare number is milliseconds (old name --delay-ms).
    #[arg(long = "delay", alias = "delay-ms", default_value = "10ms", value_parser = super::units::millis_f64)]
    delay_ms: f64,
    /// Random loss of the WAN link, each direction (the paper: 0.0001 = 0.01 %).
    /// A fraction (0.0001) or a percentage (0.01%).
    #[arg(long = "loss", default_value = "0.0001", value_parser = super::units::loss_fraction)]
    loss: f64,
    /// WAN rate, Gb/s.
    #[arg(long, default_value_t = 10.0)]
    bandwidth_gbps: f64,
    /// Length of each run, simulated seconds (the paper: iPerf for a minute).
    /// A duration such as 60s; a bare number is seconds (old name --duration-s).
    #[arg(long = "duration", alias = "duration-s", default_value = "60s", value_parser = super::units::secs_f64)]
    duration_s: f64,
    /// MSS values to compare, comma-separated (each 536..=65000).
    #[arg(long, value_delimiter = ',', default_value = "1448,8948", value_parser = clap::value_parser!(u32).range(536..=65_000))]
    mss: Vec<u32>,
    /// Runs per MSS (seeds seed, seed+1, …).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

pub fn run(cmd: SimCommand) -> Result<ExitCode, String> {
    match cmd {
        SimCommand::MtuDrop(a) => mtu_drop(a),
        SimCommand::PmtudCompare(a) => pmtud_compare(a),
        SimCommand::MtuBenefit(a) => mtu_benefit(a),
    }
}

/// `value` must lie in `[lo, hi]` (and be a number).
fn in_range(flag: &str, value: f64, lo: f64, hi: f64) -> Result<f64, String> {
    if value.is_finite() && (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{flag} {value}: allowed {lo} to {hi}"))
    }
}

/// `value` must lie in `[lo, hi)`.
fn in_range_open(flag: &str, value: f64, lo: f64, hi: f64) -> Result<f64, String> {
    if value.is_finite() && value >= lo && value < hi {
        Ok(value)
    } else {
        Err(format!("{flag} {value}: allowed {lo} <= value < {hi}"))
    }
}

fn write_svg(path: Option<&std::path::Path>, svg: impl FnOnce() -> String) -> Result<(), String> {
    if let Some(path) = path {
        std::fs::write(path, svg()).map_err(|e| format!("--svg {}: {e}", path.display()))?;
    }
    Ok(())
}

fn print_json<T: serde::Serialize>(value: &T) -> Result<(), String> {
    println!("{}", serde_json::to_string_pretty(value).map_err(|e| e.to_string())?);
    Ok(())
}

fn mtu_drop(a: MtuDropArgs) -> Result<ExitCode, String> {
    let bandwidth = in_range("--bandwidth-mbps", a.bandwidth_mbps, 0.01, 100_000.0)?;
    let delay = in_range("--delay", a.delay_ms, 0.0, 10_000.0)?;
    let loss = in_range_open("--loss", a.loss, 0.0, 0.5)?;
    let deadline = in_range("--deadline", a.deadline_s, 1.0, 36_000.0)?;
    let drop_at = in_range_open("--drop-at", a.drop_at_s, 0.0, deadline)?;
    if a.mtu_after > a.mtu_before {
        return Err(format!(
            "--mtu-after {} is above --mtu-before {}: the path MTU must drop",
            a.mtu_after, a.mtu_before
        ));
    }
    let max_packet = a.max_packet.unwrap_or(MtuDropParams::default().max_packet_bytes.min(a.mtu_before));
    if max_packet > a.mtu_before {
        return Err(format!("--max-packet {max_packet} is above --mtu-before {}", a.mtu_before));
    }
    if a.variants.is_empty() {
        return Err("--variants: name at least one of classic, 4v, maxrtt, 3v".into());
    }
    let p = MtuDropParams {
        file_bytes: a.file_bytes,
        bandwidth_bps: (bandwidth * 1e6).round() as u64,
        one_way_delay_ms: delay,
        queue_bytes: a.queue_bytes,
        mtu_before: a.mtu_before,
        mtu_after: a.mtu_after,
        max_packet_bytes: max_packet,
        drop_at_s: drop_at,
        search: match a.search {
            SearchArg::Lsquic => SearchKind::Lsquic,
            SearchArg::Bisection => SearchKind::Bisection,
        },
        min_probe_timer_ms: a.probe_timer_floor_ms,
        variants: a.variants.iter().map(|&v| v.into()).collect(),
        seed: a.common.seed,
        loss,
        deadline_s: deadline,
        sender: match a.sender {
            SenderArg::Picoquic => SenderModel::Picoquic,
            SenderArg::Newreno => SenderModel::Rfc9002NewReno,
            SenderArg::Bbr => SenderModel::Bbr,
        },
    };
    let t = Instant::now();
    let mut progress = ProgressLine::new("px sim mtu-drop", "variants");
    let r = mtu_drop_with_progress(&p, &mut |d, n| progress.update(d, n)).map_err(|e| e.to_string())?;
    progress.finish();
    let elapsed = t.elapsed();
    write_svg(a.common.svg.as_deref(), || mtu_drop_svg(&r))?;
    if a.common.json {
        print_json(&r.rows)?;
    } else {
        print!("{}", r.table(elapsed));
    }
    Ok(ExitCode::SUCCESS)
}

fn pmtud_compare(a: PmtudCompareArgs) -> Result<ExitCode, String> {
    if a.min_hops > a.max_hops {
        return Err(format!("--min-hops {} is above --max-hops {}", a.min_hops, a.max_hops));
    }
    let max_rtt = in_range("--max-rtt-ms", a.max_rtt_ms, 0.0, 10_000.0)?;
    let min_rtt = in_range("--min-rtt-ms", a.min_rtt_ms, 0.0, max_rtt)?;
    let share = |flag: &str, v: f64| in_range(flag, v, 0.0, 1.0);
    if a.methods.is_empty() {
        return Err("--methods: name at least one of fpmtud, lsquic, bisection, icmp".into());
    }
    let p = PmtudCompareParams {
        paths: a.paths,
        seed: a.common.seed,
        min_hops: a.min_hops,
        max_hops: a.max_hops,
        min_rtt_ms: min_rtt,
        max_rtt_ms: max_rtt,
        lossy_share: share("--lossy-share", a.lossy_share)?,
        max_loss: in_range_open("--max-loss", a.max_loss, 0.0, 0.5)?,
        black_hole_share: share("--black-hole-share", a.black_hole_share)?,
        fragment_filter_share: share("--fragment-filter-share", a.fragment_filter_share)?,
        jumbo_local_share: share("--jumbo-local-share", a.jumbo_local_share)?,
        ipv6_share: share("--ipv6-share", a.ipv6_share)?,
        dplpmtud_min_probe_timer_ms: a.probe_timer_floor_ms,
        icmp_timeout_ms: a.icmp_timeout_ms,
        icmp_retries: a.icmp_retries,
        methods: a.methods.iter().map(|&m| m.into()).collect(),
        deadline_s: in_range("--deadline", a.deadline_s, 1.0, 36_000.0)?,
        keep_paths: false,
    };
    let t = Instant::now();
    let mut progress = ProgressLine::new("px sim pmtud-compare", "paths");
    let r = pmtud_compare_with_progress(&p, &mut |d, n| progress.update(d, n)).map_err(|e| e.to_string())?;
    progress.finish();
    let elapsed = t.elapsed();
    write_svg(a.common.svg.as_deref(), || pmtud_compare_svg(&r))?;
    if a.common.json {
        print_json(&r.summaries)?;
    } else {
        print!("{}", r.table(elapsed));
    }
    Ok(ExitCode::SUCCESS)
}

fn mtu_benefit(a: MtuBenefitArgs) -> Result<ExitCode, String> {
    let delay = in_range("--delay", a.delay_ms, 0.0, 10_000.0)?;
    let loss = in_range_open("--loss", a.loss, 0.0, 0.5)?;
    let gbps = in_range("--bandwidth-gbps", a.bandwidth_gbps, 0.001, 400.0)?;
    let duration = in_range("--duration", a.duration_s, 0.1, 3600.0)?;
    if a.mss.is_empty() {
        return Err("--mss: give at least one value".into());
    }
    let p = MtuBenefitParams {
        one_way_delay_ms: delay,
        loss,
        bandwidth_bps: (gbps * 1e9).round() as u64,
        duration_s: duration,
        mss: a.mss.clone(),
        runs: a.runs,
        seed: a.common.seed,
    };
    let t = Instant::now();
    let mut progress = ProgressLine::new("px sim mtu-benefit", "runs");
    let r = mtu_benefit_with_progress(&p, &mut |d, n| progress.update(d, n)).map_err(|e| e.to_string())?;
    progress.finish();
    let elapsed = t.elapsed();
    write_svg(a.common.svg.as_deref(), || mtu_benefit_svg(&r))?;
    if a.common.json {
        print_json(&r)?;
    } else {
        print!("{}", r.table(elapsed));
    }
    Ok(ExitCode::SUCCESS)
}
