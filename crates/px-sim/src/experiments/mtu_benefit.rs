//! `mtu_benefit`: one bulk TCP-like flow over a WAN path with a small and a
//! large MSS (paper §2.1 and §5.2, Fig. 1d: 9000 vs 1500 MTU with 10 ms of
//! delay and 0.01 % loss gives 2.5×–5.4×).
//!
//! The mechanism the paper names: NewReno grows the window by one MSS per
//! RTT in congestion avoidance and halves it per loss event; with the same
//! per-packet loss rate, a 6× larger MSS regains the window 6× faster. The
//! result reports throughput and the measured window growth per round trip
//! for each MSS, so the ratio can be traced to that growth.

use std::time::Duration;

use px_pmtud::rtt::ClassicRtt;
use serde::Serialize;

use super::{ExperimentError, Progress};
use crate::link::LinkConfig;
use crate::net::{PathConfig, RouterPolicy};
use crate::svg::{LineChart, Series};
use crate::time::SimTime;
use crate::transport::{FixedPmtu, RoundSample, TransportConfig, run_transfer};

/// Parameters of [`mtu_benefit`].
#[derive(Clone, Debug, PartialEq, Serialize, clap::Args)]
pub struct MtuBenefitParams {
    /// One-way propagation delay of the WAN link, e.g. 10ms (the paper's;
    /// 0..=10000 ms; a bare number is milliseconds, old name --delay-ms).
    #[arg(long = "delay", alias = "delay-ms", value_name = "DURATION", default_value = "10ms", value_parser = px_units::millis_f64)]
    pub one_way_delay_ms: f64,
    /// Random loss of the WAN link, each direction: a fraction (0.0001, the
    /// paper's) or a percentage (0.01%); 0 <= loss < 0.5.
    #[arg(long, value_name = "LOSS", default_value = "0.0001", value_parser = px_units::loss_fraction)]
    pub loss: f64,
    /// WAN rate, e.g. 10Gbps (1Mbps..=400Gbps; a bare number is Gb/s, as
    /// the old name --bandwidth-gbps took).
    #[arg(long = "bandwidth", alias = "bandwidth-gbps", value_name = "RATE", default_value = "10Gbps", value_parser = super::rate_bps_u64_gbps)]
    pub bandwidth_bps: u64,
    /// Length of each run, e.g. 60s (the paper: iPerf for a minute;
    /// 0.1..=3600 s; a bare number is seconds, old name --duration-s).
    #[arg(long = "duration", alias = "duration-s", value_name = "DURATION", default_value = "60s", value_parser = px_units::secs_f64)]
    pub duration_s: f64,
    /// MSS values to compare, comma-separated (each 536..=65000; IP MTU = MSS + 52).
    #[arg(long, value_delimiter = ',', default_value = "1448,8948", value_parser = clap::value_parser!(u32).range(536..=65_000))]
    pub mss: Vec<u32>,
    /// Runs per MSS, with seeds seed, seed+1, ...
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// First seed (same seed, same output).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Default for MtuBenefitParams {
    fn default() -> Self {
        MtuBenefitParams {
            one_way_delay_ms: 10.0,
            loss: 0.0001,
            bandwidth_bps: 10_000_000_000,
            duration_s: 60.0,
            mss: vec![1448, 8948],
            runs: 3,
            seed: 1,
        }
    }
}

/// Result for one MSS.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MtuBenefitRun {
    /// The MSS.
    pub mss: u32,
    /// The IP MTU used (MSS + 52).
    pub mtu: u32,
    /// Mean goodput over the runs, Mb/s.
    pub throughput_mbps: f64,
    /// Goodput of each run, Mb/s.
    pub throughput_by_run_mbps: Vec<f64>,
    /// Data packets lost, mean over the runs.
    pub packets_lost: f64,
    /// Congestion events, mean over the runs.
    pub congestion_events: f64,
    /// Median window growth per round trip in congestion avoidance, bytes
    /// (first run).
    pub ca_growth_per_rtt_bytes: f64,
    /// Mean congestion window after slow start, bytes (first run).
    pub mean_cwnd_bytes: f64,
    /// When slow start ended, seconds (first run).
    pub slow_start_exit_s: Option<f64>,
    /// Window per round trip of the first run (at most 1000 samples).
    pub rounds: Vec<RoundSample>,
}

/// Result of [`mtu_benefit`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MtuBenefitResult {
    /// The parameters used.
    pub params: MtuBenefitParams,
    /// One entry per MSS, in the order given.
    pub runs: Vec<MtuBenefitRun>,
    /// Throughput of the last MSS divided by that of the first.
    pub throughput_ratio: f64,
    /// Window growth per RTT of the last MSS divided by that of the first.
    pub growth_ratio: f64,
}

/// TCP/IP header bytes per segment (IPv4 20 + TCP 20 + timestamps 12).
const TCP_HEADERS: u32 = 52;

fn path(p: &MtuBenefitParams, mtu: u32) -> PathConfig {
    let delay = Duration::from_secs_f64(p.one_way_delay_ms / 1000.0);
    // Bottleneck buffer of one bandwidth-delay product.
    let bdp = (p.bandwidth_bps as f64 / 8.0 * 2.0 * delay.as_secs_f64()) as u64;
    let access = LinkConfig::ideal(mtu, Duration::ZERO);
    let mut wan = LinkConfig::ideal(mtu, delay);
    wan.bandwidth_bps = p.bandwidth_bps;
    wan.loss = p.loss;
    wan.queue_bytes = Some(bdp.max(u64::from(mtu) * 4));
    PathConfig { links: vec![access, wan], routers: vec![RouterPolicy::default()] }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the experiment.
pub fn mtu_benefit(p: &MtuBenefitParams) -> Result<MtuBenefitResult, ExperimentError> {
    mtu_benefit_with_progress(p, &mut |_, _| {})
}

/// [`mtu_benefit`], reporting progress after each run of each MSS.
pub fn mtu_benefit_with_progress(
    p: &MtuBenefitParams,
    progress: Progress<'_>,
) -> Result<MtuBenefitResult, ExperimentError> {
    // Each range said with its flag (the fields are `px sim
    // mtu-benefit`'s flags).
    if p.mss.is_empty() || p.mss.iter().any(|&m| !(536..=65_000).contains(&m)) {
        return Err(ExperimentError::InvalidParam("--mss: at least one value, each in 536..=65000"));
    }
    if !(p.duration_s >= 0.1 && p.duration_s <= 3600.0) {
        return Err(ExperimentError::InvalidParam("--duration in 0.1s..=3600s"));
    }
    if !(0.0..0.5).contains(&p.loss) {
        return Err(ExperimentError::InvalidParam("--loss in [0, 0.5)"));
    }
    if p.runs == 0 || !(1_000_000..=400_000_000_000).contains(&p.bandwidth_bps) {
        return Err(ExperimentError::InvalidParam("--runs > 0, --bandwidth in 1Mbps..=400Gbps"));
    }
    if !(0.0..=10_000.0).contains(&p.one_way_delay_ms) {
        return Err(ExperimentError::InvalidParam("--delay in 0..=10000ms"));
    }
    let deadline = SimTime::from_secs_f64(p.duration_s);
    let mut runs = Vec::with_capacity(p.mss.len());
    let total = p.mss.len() as u64 * u64::from(p.runs);
    let mut done = 0u64;
    for &mss in &p.mss {
        let mtu = mss + TCP_HEADERS;
        let mut tput = Vec::new();
        let mut lost = 0.0;
        let mut events = 0.0;
        let mut first = None;
        for i in 0..p.runs {
            let mut cfg = TransportConfig::tcp_like(u64::MAX / 2);
            cfg.record_rounds = i == 0;
            let r = run_transfer(
                path(p, mtu),
                p.seed + u64::from(i),
                cfg,
                Box::new(ClassicRtt::default()),
                Box::new(FixedPmtu(mtu)),
                deadline,
            )?;
            tput.push(r.receiver.delivered_bytes as f64 * 8.0 / p.duration_s / 1e6);
            lost += r.sender.packets_lost as f64;
            events += r.sender.congestion_events as f64;
            if first.is_none() {
                first = Some(r);
            }
            done += 1;
            progress(done, total);
        }
        let first = first.ok_or(ExperimentError::InvalidParam("runs"))?;
        let exit = first.sender.slow_start_exit.map(SimTime::as_secs_f64);
        let after: Vec<&RoundSample> = first.rounds.iter().filter(|s| exit.is_some_and(|e| s.t_s > e)).collect();
        let growth: Vec<f64> =
            after.windows(2).map(|w| w[1].cwnd as f64 - w[0].cwnd as f64).filter(|d| *d > 0.0).collect();
        let mean_cwnd =
            if after.is_empty() { 0.0 } else { after.iter().map(|s| s.cwnd as f64).sum::<f64>() / after.len() as f64 };
        let stride = first.rounds.len().div_ceil(1000).max(1);
        let n = f64::from(p.runs);
        runs.push(MtuBenefitRun {
            mss,
            mtu,
            throughput_mbps: tput.iter().sum::<f64>() / n,
            throughput_by_run_mbps: tput,
            packets_lost: lost / n,
            congestion_events: events / n,
            ca_growth_per_rtt_bytes: median(growth),
            mean_cwnd_bytes: mean_cwnd,
            slow_start_exit_s: exit,
            rounds: first.rounds.iter().step_by(stride).copied().collect(),
        });
    }
    let ratio = |f: fn(&MtuBenefitRun) -> f64| {
        let a = runs.first().map_or(0.0, f);
        let b = runs.last().map_or(0.0, f);
        if a > 0.0 { b / a } else { 0.0 }
    };
    Ok(MtuBenefitResult {
        params: p.clone(),
        throughput_ratio: ratio(|r| r.throughput_mbps),
        growth_ratio: ratio(|r| r.ca_growth_per_rtt_bytes),
        runs,
    })
}

/// Congestion window over time for each MSS. The y axis stops a little
/// above the largest window after slow start, so the congestion-avoidance
/// sawtooth (where the gain comes from) stays readable; the slow-start
/// overshoot is clipped at the top edge.
#[must_use]
pub fn mtu_benefit_svg(r: &MtuBenefitResult) -> String {
    let after_ss = r
        .runs
        .iter()
        .flat_map(|run| {
            let exit = run.slow_start_exit_s.unwrap_or(0.0);
            run.rounds.iter().filter(move |s| s.t_s > exit + 0.5).map(|s| s.cwnd as f64 / 1000.0)
        })
        .fold(0.0, f64::max);
    let peak = r.runs.iter().flat_map(|run| run.rounds.iter().map(|s| s.cwnd as f64 / 1000.0)).fold(0.0, f64::max);
    let y_max = (after_ss > 0.0 && peak > after_ss * 1.3).then_some(after_ss * 1.3);
    LineChart {
        title: format!(
            "Congestion window, {} ms one-way, {} % loss: {:.2}x throughput",
            r.params.one_way_delay_ms,
            r.params.loss * 100.0,
            r.throughput_ratio
        ),
        x_label: "time (s)".into(),
        y_label: "cwnd (kB)".into(),
        series: r
            .runs
            .iter()
            .map(|run| Series {
                name: format!("MSS {} ({:.0} Mb/s)", run.mss, run.throughput_mbps),
                points: run.rounds.iter().map(|s| (s.t_s, s.cwnd as f64 / 1000.0)).collect(),
            })
            .collect(),
        y_max,
        markers: Vec::new(),
        note: Some(format!(
            "paper: 2.5x (sender, §5.2), 5.4x (Fig. 1d); growth per RTT here {:.1}x{}",
            r.growth_ratio,
            if y_max.is_some() { format!("; slow-start peak {peak:.0} kB clipped") } else { String::new() }
        )),
        x_log: false,
    }
    .to_svg()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> MtuBenefitParams {
        MtuBenefitParams {
            one_way_delay_ms: 10.0,
            loss: 0.001,
            bandwidth_bps: 2_000_000_000,
            duration_s: 8.0,
            mss: vec![1448, 8948],
            runs: 2,
            seed: 3,
        }
    }

    #[test]
    fn large_mss_wins_through_faster_window_growth() {
        let r = mtu_benefit(&small()).expect("runs");
        let (a, b) = (&r.runs[0], &r.runs[1]);
        assert!(a.congestion_events > 0.0 && b.congestion_events > 0.0);
        // Growth per RTT in congestion avoidance is one datagram.
        assert!((a.ca_growth_per_rtt_bytes - 1500.0).abs() < 1.0, "{}", a.ca_growth_per_rtt_bytes);
        assert!((b.ca_growth_per_rtt_bytes - 9000.0).abs() < 1.0, "{}", b.ca_growth_per_rtt_bytes);
        assert!((r.growth_ratio - 6.0).abs() < 0.01);
        // Loss-limited, so the throughput ratio is large but below the MSS ratio
        // of 6.2 plus noise.
        assert!(r.throughput_ratio > 2.5 && r.throughput_ratio < 8.0, "{}", r.throughput_ratio);
        let svg = mtu_benefit_svg(&r);
        assert_eq!(svg.matches("<polyline").count(), 2);
    }

    #[test]
    fn deterministic_and_validated() {
        let mut p = small();
        p.duration_s = 2.0;
        p.runs = 1;
        assert_eq!(mtu_benefit(&p), mtu_benefit(&p));
        p.mss.clear();
        assert!(matches!(mtu_benefit(&p), Err(ExperimentError::InvalidParam(_))));
    }
}
