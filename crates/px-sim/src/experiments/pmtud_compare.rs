//! `pmtud_compare`: path MTU discovery methods over thousands of random,
//! Internet-like IPv4 paths.
//!
//! Each path is a chain of 2–16 links whose MTUs are drawn from what is
//! common on the Internet (1500 most of all; PPPoE 1492; tunnels 1480,
//! 1460, 1400, 1380; IPv6-minimum-sized 1280; jumbo 9000), with a round-trip
//! time, random loss on some paths, a share of ICMP black holes (no router
//! sends "fragmentation needed") and a share of fragment-filtering last
//! hops, and a share of IPv6 paths (the sessions' IPv6 configuration: no
//! DF-clear probe, the 1280-byte minimum, 48 bytes of headers; nothing is
//! fragmented on them). Every method runs on every path, each in its own simulation, with
//! `px-pmtud`'s responder at the far end. An answer counts as a success
//! when it is no larger than the true path MTU (a larger one would black-hole
//! traffic) and as exact when it equals it.

use std::time::{Duration, Instant};

use px_pmtud::rtt::{ClassicRtt, INITIAL_RTT};
use px_pmtud::search::SearchStrategy;
use px_pmtud::session::{AutoSession, DplpmtudSession, IcmpSession, SessionConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::{ExperimentError, Progress, percentile};
use crate::datagram::Datagrams;
use crate::link::LinkConfig;
use crate::net::{Network, PathConfig, RouterPolicy};
use crate::probers::{Prober, ResponderEndpoint, SessionProber};
use crate::svg::{self, BarChart};
use crate::time::SimTime;

/// MTUs common on the Internet and their weights in the draw (‰).
pub const MTU_WEIGHTS: [(u32, u32); 8] =
    [(1500, 600), (9000, 150), (1492, 60), (1480, 40), (1460, 40), (1400, 40), (1380, 40), (1280, 30)];

/// A PMTUD method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
pub enum Method {
    /// `px probe`'s `auto`: parallel DF-set probes of several sizes per
    /// round trip, with F-PMTUD's DF-clear probe (its fragment report) as a
    /// hint on IPv4 (`session::ParallelSession`).
    Fpmtud,
    /// RFC 8899 DPLPMTUD as `px probe --method dplpmtud` (validated PTBs
    /// used as hints), lsquic's search (maximum first, bisect to 99 %).
    #[value(name = "lsquic")]
    DplpmtudLsquic,
    /// RFC 8899 DPLPMTUD, bisection to the byte.
    #[value(name = "bisection")]
    DplpmtudBisection,
    /// Classic ICMP-based PMTUD (RFC 1191), as `px probe --method icmp`.
    #[value(name = "icmp")]
    IcmpPmtud,
}

impl Method {
    /// Every method, in table order.
    pub const ALL: [Method; 4] = [Method::Fpmtud, Method::DplpmtudLsquic, Method::DplpmtudBisection, Method::IcmpPmtud];

    /// Label for tables and plots.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Method::Fpmtud => "F-PMTUD",
            Method::DplpmtudLsquic => "DPLPMTUD lsquic",
            Method::DplpmtudBisection => "DPLPMTUD bisection",
            Method::IcmpPmtud => "ICMP PMTUD",
        }
    }
}

/// Parameters of [`pmtud_compare`].
#[derive(Clone, Debug, PartialEq, Serialize, clap::Args)]
pub struct PmtudCompareParams {
    /// Random paths to draw.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub paths: u32,
    /// Seed of the path draw and of every simulation (same seed, same output).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fewest links on a path (at least 2: one router).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub min_hops: u32,
    /// Most links on a path.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub max_hops: u32,
    /// Smallest round-trip propagation delay, e.g. 5ms (a bare number is
    /// milliseconds, old name --min-rtt-ms).
    #[arg(long = "min-rtt", alias = "min-rtt-ms", value_name = "DURATION", default_value = "5ms", value_parser = px_units::millis_f64)]
    pub min_rtt_ms: f64,
    /// Largest round-trip propagation delay, e.g. 300ms (at most 10 s; a
    /// bare number is milliseconds, old name --max-rtt-ms).
    #[arg(long = "max-rtt", alias = "max-rtt-ms", value_name = "DURATION", default_value = "300ms", value_parser = px_units::millis_f64)]
    pub max_rtt_ms: f64,
    /// Share of paths with random loss (0..=1).
    #[arg(long, value_name = "SHARE", default_value_t = 0.3)]
    pub lossy_share: f64,
    /// Largest end-to-end loss rate of a lossy path, each direction: a
    /// fraction (0.02) or a percentage (2%); 0 <= loss < 0.5.
    #[arg(long, value_name = "LOSS", default_value = "0.02", value_parser = px_units::loss_fraction)]
    pub max_loss: f64,
    /// Share of paths on which no router sends ICMP "fragmentation needed" (0..=1).
    #[arg(long, value_name = "SHARE", default_value_t = 0.2)]
    pub black_hole_share: f64,
    /// Share of paths whose last router drops IP fragments (0..=1).
    #[arg(long, value_name = "SHARE", default_value_t = 0.05)]
    pub fragment_filter_share: f64,
    /// Share of probers on a 9000-byte local link, the rest on 1500 (0..=1).
    #[arg(long, value_name = "SHARE", default_value_t = 0.3)]
    pub jumbo_local_share: f64,
    /// Share of IPv6 paths (0..=1).
    #[arg(long, value_name = "SHARE", default_value_t = 0.2)]
    pub ipv6_share: f64,
    /// Floor of DPLPMTUD's PROBE_TIMER, e.g. 1s (RFC 8899: at least 1000
    /// ms; a bare number is milliseconds, old name --probe-timer-floor-ms).
    #[arg(long = "probe-timer-floor", alias = "probe-timer-floor-ms", value_name = "DURATION", default_value = "1000ms", value_parser = px_units::millis_u64)]
    pub dplpmtud_min_probe_timer_ms: u64,
    /// Classic PMTUD: wait per probe before retrying, e.g. 1s (a bare
    /// number is milliseconds, old name --icmp-timeout-ms).
    #[arg(long = "icmp-timeout", alias = "icmp-timeout-ms", value_name = "DURATION", default_value = "1000ms", value_parser = px_units::millis_u64)]
    pub icmp_timeout_ms: u64,
    /// Classic PMTUD: tries per size.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub icmp_retries: u32,
    /// Methods to compare, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fpmtud,lsquic,bisection,icmp")]
    pub methods: Vec<Method>,
    /// Give a method up after this much simulated time on one path, e.g.
    /// 300s (1..=36000 s; a bare number is seconds, old name --deadline-s).
    #[arg(long = "deadline", alias = "deadline-s", value_name = "DURATION", default_value = "300s", value_parser = px_units::secs_f64)]
    pub deadline_s: f64,
    /// Keep every path's outcome in the result.
    #[arg(skip)]
    pub keep_paths: bool,
}

impl Default for PmtudCompareParams {
    fn default() -> Self {
        PmtudCompareParams {
            paths: 10_000,
            seed: 1,
            min_hops: 2,
            max_hops: 16,
            min_rtt_ms: 5.0,
            max_rtt_ms: 300.0,
            lossy_share: 0.3,
            max_loss: 0.02,
            black_hole_share: 0.2,
            fragment_filter_share: 0.05,
            jumbo_local_share: 0.3,
            ipv6_share: 0.2,
            dplpmtud_min_probe_timer_ms: 1000,
            icmp_timeout_ms: 1000,
            icmp_retries: 3,
            methods: Method::ALL.to_vec(),
            deadline_s: 300.0,
            keep_paths: false,
        }
    }
}

/// One method on one path.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MethodOutcome {
    /// The method.
    pub method: Method,
    /// Its answer (`None`: no answer by the deadline, or gave up).
    pub pmtu: Option<u32>,
    /// Seconds from its first probe to its answer.
    pub seconds: f64,
    /// Probes sent.
    pub probes: u64,
    /// IP bytes sent by the prober.
    pub bytes: u64,
    /// The method handed over to another (F-PMTUD to DPLPMTUD).
    pub fell_back: bool,
}

/// One random path and how each method did on it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathOutcome {
    /// The true path MTU.
    pub true_pmtu: u32,
    /// Link MTUs from the prober on.
    pub mtus: Vec<u32>,
    /// Round-trip propagation delay, ms.
    pub rtt_ms: f64,
    /// End-to-end loss rate (each direction).
    pub loss: f64,
    /// No router sends ICMP.
    pub black_hole: bool,
    /// The last router drops fragments.
    pub fragment_filter: bool,
    /// An IPv6 path.
    pub ipv6: bool,
    /// One entry per method.
    pub outcomes: Vec<MethodOutcome>,
}

/// Aggregate of one method over all paths.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodSummary {
    /// Label.
    pub method: String,
    /// The method.
    pub key: Method,
    /// Share of paths with an answer no larger than the path MTU.
    pub success_rate: f64,
    /// Share of paths answered exactly.
    pub exact_rate: f64,
    /// Share of paths answered with a size larger than the path MTU.
    pub wrong_rate: f64,
    /// Median seconds to a successful answer.
    pub p50_s: Option<f64>,
    /// 99th percentile of seconds to a successful answer.
    pub p99_s: Option<f64>,
    /// Median time to a successful answer in round trips of its path.
    pub p50_rtts: Option<f64>,
    /// 99th percentile of time to a successful answer in round trips.
    pub p99_rtts: Option<f64>,
    /// Mean probes per path.
    pub probes_mean: f64,
    /// Mean IP bytes per path.
    pub bytes_mean: f64,
    /// Success rate on black-hole paths.
    pub black_hole_success_rate: Option<f64>,
    /// Success rate on fragment-filtering paths.
    pub fragment_filter_success_rate: Option<f64>,
    /// Share of paths on which the method handed over to another.
    pub fallback_rate: f64,
    /// Share of loss-free paths answered exactly.
    pub loss_free_exact_rate: Option<f64>,
    /// The same figures per path class, in [`PathClass::ALL`] order.
    pub classes: Vec<ClassSummary>,
}

/// A class of paths for the table's split. A path belongs to every class
/// whose property it has (a lossy black hole counts in both); `Clean` is
/// an IPv4 path with none of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PathClass {
    /// IPv4, no loss, ICMP works, fragments pass.
    Clean,
    /// Random loss.
    Lossy,
    /// No router sends ICMP "too big".
    BlackHole,
    /// The last router drops IPv4 fragments.
    FragmentFilter,
    /// IPv6.
    Ipv6,
}

impl PathClass {
    /// Every class, in table order.
    pub const ALL: [PathClass; 5] =
        [PathClass::Clean, PathClass::Lossy, PathClass::BlackHole, PathClass::FragmentFilter, PathClass::Ipv6];

    /// Label for tables.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            PathClass::Clean => "clean",
            PathClass::Lossy => "lossy",
            PathClass::BlackHole => "black hole",
            PathClass::FragmentFilter => "fragment filter",
            PathClass::Ipv6 => "IPv6",
        }
    }

    /// Whether `p` belongs to the class.
    #[must_use]
    pub fn contains(self, p: &PathOutcome) -> bool {
        match self {
            PathClass::Clean => p.loss == 0.0 && !p.black_hole && !p.fragment_filter && !p.ipv6,
            PathClass::Lossy => p.loss > 0.0,
            PathClass::BlackHole => p.black_hole,
            PathClass::FragmentFilter => p.fragment_filter,
            PathClass::Ipv6 => p.ipv6,
        }
    }
}

/// One method on one class of paths.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassSummary {
    /// The class label.
    pub class: String,
    /// Paths in the class.
    pub paths: usize,
    /// Share answered no larger than the path MTU.
    pub success_rate: Option<f64>,
    /// Share answered exactly.
    pub exact_rate: Option<f64>,
    /// Median time to a successful answer in round trips of its path.
    pub p50_rtts: Option<f64>,
    /// 99th percentile of the same.
    pub p99_rtts: Option<f64>,
}

/// Result of [`pmtud_compare`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PmtudCompareResult {
    /// The parameters used.
    pub params: PmtudCompareParams,
    /// One entry per method, in the order asked.
    pub summaries: Vec<MethodSummary>,
    /// Paths that were black holes.
    pub black_hole_paths: u32,
    /// Paths that filtered fragments.
    pub fragment_filter_paths: u32,
    /// Every path (only with `keep_paths`).
    pub paths: Vec<PathOutcome>,
}

/// A drawn path: its configuration plus what the summary needs.
struct DrawnPath {
    config: PathConfig,
    outcome: PathOutcome,
    seed: u64,
}

fn draw_mtu(rng: &mut ChaCha8Rng) -> u32 {
    let total: u32 = MTU_WEIGHTS.iter().map(|w| w.1).sum();
    let mut x = rng.gen_range(0..total);
    for &(mtu, w) in &MTU_WEIGHTS {
        if x < w {
            return mtu;
        }
        x -= w;
    }
    1500
}

fn draw_path(p: &PmtudCompareParams, rng: &mut ChaCha8Rng) -> DrawnPath {
    let hops = rng.gen_range(p.min_hops..=p.max_hops) as usize;
    let local = if rng.gen_bool(p.jumbo_local_share) { 9000 } else { 1500 };
    let mut mtus = vec![local];
    for _ in 1..hops {
        mtus.push(draw_mtu(rng));
    }
    let rtt_ms = rng.gen_range(p.min_rtt_ms..=p.max_rtt_ms);
    let loss = if rng.gen_bool(p.lossy_share) { rng.gen_range(0.0..=p.max_loss) } else { 0.0 };
    let black_hole = rng.gen_bool(p.black_hole_share);
    let ipv6 = rng.gen_bool(p.ipv6_share);
    // Nothing is fragmented on an IPv6 path: no fragment filter to meet.
    let fragment_filter = !ipv6 && rng.gen_bool(p.fragment_filter_share);
    let seed = rng.r#gen::<u64>();
    let one_way = Duration::from_secs_f64(rtt_ms / 2000.0 / hops as f64);
    // Spread the end-to-end loss over the links: 1 - (1 - l)^hops = loss.
    let per_link_loss = 1.0 - nth_root(1.0 - loss, u32::try_from(hops).unwrap_or(u32::MAX));
    let links = mtus
        .iter()
        .map(|&mtu| {
            let mut l = LinkConfig::ideal(mtu, one_way);
            l.bandwidth_bps = 1_000_000_000;
            l.loss = per_link_loss;
            l
        })
        .collect();
    let mut routers = vec![RouterPolicy { sends_ptb: !black_hole, ..RouterPolicy::default() }; hops - 1];
    if fragment_filter {
        if let Some(last) = routers.last_mut() {
            last.drops_fragments = true;
        }
    }
    let true_pmtu = mtus.iter().copied().min().unwrap_or(0);
    DrawnPath {
        config: PathConfig { links, routers },
        outcome: PathOutcome { true_pmtu, mtus, rtt_ms, loss, black_hole, fragment_filter, ipv6, outcomes: Vec::new() },
        seed,
    }
}

fn run_prober<P: Prober>(
    path: &DrawnPath,
    prober: P,
    datagrams: Datagrams,
    base: Instant,
    deadline: SimTime,
) -> Result<(Option<u32>, f64, u64, u64, bool), ExperimentError> {
    let responder_mtu = path.outcome.mtus.last().copied().unwrap_or(1500);
    let responder = ResponderEndpoint::new(responder_mtu, datagrams, base, Duration::from_secs(2));
    let mut net = Network::new(path.config.clone(), path.seed, prober, responder)?;
    net.run(deadline, |a, _| a.outcome().is_some());
    let stats = net.a.prober_stats();
    let (pmtu, at) = match net.a.outcome() {
        Some(o) => (o.pmtu, o.at),
        None => (None, net.now()),
    };
    Ok((pmtu, at.as_secs_f64(), stats.probes, stats.bytes, net.a.fell_back()))
}

fn run_method(
    p: &PmtudCompareParams,
    path: &DrawnPath,
    method: Method,
    base: Instant,
) -> Result<MethodOutcome, ExperimentError> {
    let datagrams = Datagrams::new();
    let deadline = SimTime::from_secs_f64(p.deadline_s);
    let local = u16::try_from(path.outcome.mtus[0]).unwrap_or(u16::MAX);
    let nonce = path.seed ^ 0x5eed_f00d_0000_0000 ^ method as u64;
    // `px probe`'s sessions, bounded by the deadline as by `--timeout`;
    // RFC 9002's initial RTT before the first sample.
    let mut cfg = SessionConfig::new(local, path.outcome.ipv6);
    cfg.timeout = Duration::from_secs_f64(p.deadline_s);
    cfg.initial_rtt = INITIAL_RTT;
    cfg.probe_timer = Duration::from_millis(p.dplpmtud_min_probe_timer_ms);
    let (pmtu, seconds, probes, bytes, fell_back) = match method {
        Method::Fpmtud => {
            cfg.search = SearchStrategy::lsquic();
            let s = AutoSession::new(&cfg, nonce, base)
                .map_err(|_| ExperimentError::InvalidParam("F-PMTUD configuration"))?;
            run_prober(path, SessionProber::new(s, datagrams.clone(), base), datagrams, base, deadline)?
        }
        Method::DplpmtudLsquic | Method::DplpmtudBisection => {
            cfg.search =
                if method == Method::DplpmtudLsquic { SearchStrategy::lsquic() } else { SearchStrategy::Bisection };
            let s = DplpmtudSession::new(&cfg, nonce, None, ClassicRtt::new(cfg.initial_rtt), base)
                .map_err(|_| ExperimentError::InvalidParam("DPLPMTUD configuration"))?;
            run_prober(path, SessionProber::new(s, datagrams.clone(), base), datagrams, base, deadline)?
        }
        Method::IcmpPmtud => {
            // The retry timer is max(3 x initial RTT, probe timer): exactly
            // the configured wait.
            let wait = Duration::from_millis(p.icmp_timeout_ms);
            cfg.probe_timer = wait;
            cfg.initial_rtt = wait / 3;
            cfg.icmp_tries = u8::try_from(p.icmp_retries.max(1)).unwrap_or(u8::MAX);
            let s = IcmpSession::new(&cfg, nonce, base)
                .map_err(|_| ExperimentError::InvalidParam("ICMP PMTUD configuration"))?;
            run_prober(path, SessionProber::new(s, datagrams.clone(), base), datagrams, base, deadline)?
        }
    };
    Ok(MethodOutcome { method, pmtu, seconds, probes, bytes, fell_back })
}

/// The ranges, each said with its flag (the fields are `px sim
/// pmtud-compare`'s flags).
fn validate(p: &PmtudCompareParams) -> Result<(), ExperimentError> {
    let share = |v: f64| (0.0..=1.0).contains(&v);
    let bad = |what| Err(ExperimentError::InvalidParam(what));
    if p.paths == 0 || p.paths > 1_000_000 {
        return bad("--paths in 1..=1000000");
    }
    if p.min_hops < 2 || p.max_hops < p.min_hops || p.max_hops > 64 {
        return bad("2 <= --min-hops <= --max-hops <= 64");
    }
    if !(p.min_rtt_ms >= 0.0 && p.max_rtt_ms >= p.min_rtt_ms && p.max_rtt_ms <= 10_000.0) {
        return bad("0 <= --min-rtt <= --max-rtt <= 10000ms");
    }
    if ![p.lossy_share, p.black_hole_share, p.fragment_filter_share, p.jumbo_local_share, p.ipv6_share]
        .into_iter()
        .all(share)
        || !(0.0..0.5).contains(&p.max_loss)
    {
        return bad(
            "--lossy-share, --black-hole-share, --fragment-filter-share, --jumbo-local-share, --ipv6-share in [0, 1], --max-loss in [0, 0.5)",
        );
    }
    if p.methods.is_empty() || !(p.deadline_s >= 1.0 && p.deadline_s <= 36_000.0) {
        return bad("--methods: at least one; --deadline in 1s..=36000s");
    }
    Ok(())
}

fn summarize(method: Method, paths: &[PathOutcome], idx: usize) -> MethodSummary {
    let n = paths.len().max(1) as f64;
    let mut ok = 0usize;
    let mut exact = 0usize;
    let mut wrong = 0usize;
    let mut times = Vec::new();
    let mut rtts = Vec::new();
    let (mut probes, mut bytes) = (0u64, 0u64);
    let (mut bh, mut bh_ok, mut ff, mut ff_ok) = (0usize, 0usize, 0usize, 0usize);
    let mut fell_back = 0usize;
    for path in paths {
        let o = &path.outcomes[idx];
        probes += o.probes;
        bytes += o.bytes;
        fell_back += usize::from(o.fell_back);
        let success = o.pmtu.is_some_and(|m| m <= path.true_pmtu);
        if success {
            ok += 1;
            times.push(o.seconds);
            if path.rtt_ms > 0.0 {
                rtts.push(o.seconds * 1000.0 / path.rtt_ms);
            }
        }
        if o.pmtu == Some(path.true_pmtu) {
            exact += 1;
        }
        if o.pmtu.is_some_and(|m| m > path.true_pmtu) {
            wrong += 1;
        }
        if path.black_hole {
            bh += 1;
            bh_ok += usize::from(success);
        }
        if path.fragment_filter {
            ff += 1;
            ff_ok += usize::from(success);
        }
    }
    times.sort_by(f64::total_cmp);
    rtts.sort_by(f64::total_cmp);
    let rate = |num: usize, den: usize| (den > 0).then(|| num as f64 / den as f64);
    let loss_free: Vec<&PathOutcome> = paths.iter().filter(|p| p.loss == 0.0).collect();
    let loss_free_exact = loss_free.iter().filter(|p| p.outcomes[idx].pmtu == Some(p.true_pmtu)).count();
    let classes = PathClass::ALL.iter().map(|&c| summarize_class(c, paths, idx)).collect();
    MethodSummary {
        method: method.label().to_string(),
        key: method,
        success_rate: ok as f64 / n,
        exact_rate: exact as f64 / n,
        wrong_rate: wrong as f64 / n,
        p50_s: percentile(&times, 50.0),
        p99_s: percentile(&times, 99.0),
        p50_rtts: percentile(&rtts, 50.0),
        p99_rtts: percentile(&rtts, 99.0),
        probes_mean: probes as f64 / n,
        bytes_mean: bytes as f64 / n,
        black_hole_success_rate: rate(bh_ok, bh),
        fragment_filter_success_rate: rate(ff_ok, ff),
        fallback_rate: fell_back as f64 / n,
        loss_free_exact_rate: rate(loss_free_exact, loss_free.len()),
        classes,
    }
}

fn summarize_class(class: PathClass, paths: &[PathOutcome], idx: usize) -> ClassSummary {
    let members: Vec<&PathOutcome> = paths.iter().filter(|p| class.contains(p)).collect();
    let n = members.len();
    let rate = |num: usize| (n > 0).then(|| num as f64 / n as f64);
    let success = |p: &&&PathOutcome| p.outcomes[idx].pmtu.is_some_and(|m| m <= p.true_pmtu);
    let ok = members.iter().filter(success).count();
    let exact = members.iter().filter(|p| p.outcomes[idx].pmtu == Some(p.true_pmtu)).count();
    let mut rtts: Vec<f64> = members
        .iter()
        .filter(success)
        .filter(|p| p.rtt_ms > 0.0)
        .map(|p| p.outcomes[idx].seconds * 1000.0 / p.rtt_ms)
        .collect();
    rtts.sort_by(f64::total_cmp);
    ClassSummary {
        class: class.label().to_string(),
        paths: n,
        success_rate: rate(ok),
        exact_rate: rate(exact),
        p50_rtts: percentile(&rtts, 50.0),
        p99_rtts: percentile(&rtts, 99.0),
    }
}

/// Runs the experiment.
pub fn pmtud_compare(p: &PmtudCompareParams) -> Result<PmtudCompareResult, ExperimentError> {
    pmtud_compare_with_progress(p, &mut |_, _| {})
}

/// [`pmtud_compare`], reporting progress after each path.
pub fn pmtud_compare_with_progress(
    p: &PmtudCompareParams,
    progress: Progress<'_>,
) -> Result<PmtudCompareResult, ExperimentError> {
    validate(p)?;
    // Stands for simulated time zero at the px-pmtud boundary; results do
    // not depend on it.
    let base = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let mut paths = Vec::with_capacity(p.paths as usize);
    for i in 0..p.paths {
        let mut drawn = draw_path(p, &mut rng);
        for &m in &p.methods {
            let o = run_method(p, &drawn, m, base)?;
            drawn.outcome.outcomes.push(o);
        }
        paths.push(drawn.outcome);
        progress(u64::from(i) + 1, u64::from(p.paths));
    }
    let summaries = p.methods.iter().enumerate().map(|(i, &m)| summarize(m, &paths, i)).collect();
    let black_hole_paths = paths.iter().filter(|x| x.black_hole).count() as u32;
    let fragment_filter_paths = paths.iter().filter(|x| x.fragment_filter).count() as u32;
    Ok(PmtudCompareResult {
        params: p.clone(),
        summaries,
        black_hole_paths,
        fragment_filter_paths,
        paths: if p.keep_paths { paths } else { Vec::new() },
    })
}

/// Success and exact rates per method, then median / p99 time to the
/// answer in seconds and in round trips of each path.
#[must_use]
pub fn pmtud_compare_svg(r: &PmtudCompareResult) -> String {
    let cats: Vec<String> = r.summaries.iter().map(|s| s.method.clone()).collect();
    let pick = |f: fn(&MethodSummary) -> f64| r.summaries.iter().map(f).collect::<Vec<f64>>();
    let p = &r.params;
    let rates = BarChart {
        title: format!("PMTUD over {} random paths: answers", p.paths),
        y_label: "% of paths".into(),
        categories: cats.clone(),
        series: vec![
            ("success (<= path MTU)".into(), pick(|s| s.success_rate * 100.0)),
            ("exact (= path MTU)".into(), pick(|s| s.exact_rate * 100.0)),
            ("success on black holes".into(), pick(|s| s.black_hole_success_rate.map_or(f64::NAN, |v| v * 100.0))),
        ],
        note: Some(format!(
            "{} of {} paths are ICMP black holes, {} filter fragments; {}-{} links, RTT {}-{} ms",
            r.black_hole_paths, p.paths, r.fragment_filter_paths, p.min_hops, p.max_hops, p.min_rtt_ms, p.max_rtt_ms
        )),
    };
    let times = BarChart {
        title: "Time to the answer (successful paths)".into(),
        y_label: "seconds".into(),
        categories: cats.clone(),
        series: vec![
            ("median".into(), pick(|s| s.p50_s.unwrap_or(f64::NAN))),
            ("99th percentile".into(), pick(|s| s.p99_s.unwrap_or(f64::NAN))),
        ],
        note: Some(format!(
            "DPLPMTUD: RFC 8899 PROBE_TIMER floor {} ms x MAX_PROBES per size that fails",
            p.dplpmtud_min_probe_timer_ms
        )),
    };
    let rtts = BarChart {
        title: "Time to the answer in round trips of each path".into(),
        y_label: "round trips".into(),
        categories: cats,
        series: vec![
            ("median".into(), pick(|s| s.p50_rtts.unwrap_or(f64::NAN))),
            ("99th percentile".into(), pick(|s| s.p99_rtts.unwrap_or(f64::NAN))),
        ],
        note: Some("the paper's claim for F-PMTUD: one round trip (+1 for the DF-set refinement to the byte)".into()),
    };
    // Times span decades (0.17 s medians beside 27 s tails): log axes.
    svg::stack(&[rates.to_svg(), times.to_svg_log(), rtts.to_svg_log()])
}

/// `x^(1/n)` for `x` in `[0, 1]`: Newton's method on `y^n = x` from 1,
/// which decreases to the root (`y^n` is convex). Written out because
/// `powf` was one of the two reasons the `px` binary loaded libm, which
/// every `px probe` start paid for (docs/probe.md).
fn nth_root(x: f64, n: u32) -> f64 {
    if x <= 0.0 || n <= 1 {
        return x.max(0.0);
    }
    let k = i32::try_from(n).unwrap_or(i32::MAX);
    let mut y = 1.0f64;
    loop {
        let below = y.powi(k - 1);
        let next = y - (below * y - x) / (f64::from(n) * below);
        if next >= y || next.is_nan() {
            return y;
        }
        y = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_root_inverts_integer_powers() {
        for n in 1..=16u32 {
            assert_eq!(nth_root(1.0, n), 1.0, "loss-free links stay loss-free");
            assert_eq!(nth_root(0.0, n), 0.0);
            for x in [0.5, 0.9, 0.99, 0.999_9, 1e-6] {
                let y = nth_root(x, n);
                let back = y.powi(n as i32);
                assert!(
                    (back - x).abs() <= 4.0 * f64::EPSILON * x.max(1e-300) * f64::from(n),
                    "{x}^(1/{n}) = {y}: {back}"
                );
            }
        }
    }

    fn small(paths: u32) -> PmtudCompareParams {
        PmtudCompareParams { paths, keep_paths: true, ..PmtudCompareParams::default() }
    }

    fn one_path(mtus: &[u32], black_hole: bool, fragment_filter: bool, method: Method) -> MethodOutcome {
        let p = PmtudCompareParams::default();
        let links = mtus.iter().map(|&m| LinkConfig::ideal(m, Duration::from_millis(10))).collect();
        let mut routers = vec![RouterPolicy { sends_ptb: !black_hole, ..RouterPolicy::default() }; mtus.len() - 1];
        if let Some(last) = routers.last_mut() {
            last.drops_fragments = fragment_filter;
        }
        let drawn = DrawnPath {
            config: PathConfig { links, routers },
            outcome: PathOutcome {
                true_pmtu: mtus.iter().copied().min().unwrap_or(0),
                mtus: mtus.to_vec(),
                rtt_ms: 20.0 * mtus.len() as f64,
                loss: 0.0,
                black_hole,
                fragment_filter,
                ipv6: false,
                outcomes: Vec::new(),
            },
            seed: 7,
        };
        run_method(&p, &drawn, method, Instant::now()).expect("runs")
    }

    #[test]
    fn icmp_pmtud_follows_ptbs_and_fails_on_a_black_hole() {
        let ok = one_path(&[9000, 1500, 1400, 1500], false, false, Method::IcmpPmtud);
        assert_eq!(ok.pmtu, Some(1400));
        assert_eq!(ok.probes, 3, "9000 -> PTB 1500 -> PTB 1400 -> answer");
        // Three round trips of 80 ms at most.
        assert!(ok.seconds < 0.25, "{ok:?}");
        let bh = one_path(&[9000, 1500, 1400, 1500], true, false, Method::IcmpPmtud);
        assert_eq!(bh.pmtu, None);
    }

    #[test]
    fn fpmtud_is_exact_in_two_round_trips_and_survives_black_holes() {
        let mtus = [9000, 1500, 1400, 1500];
        let rtt_s = 0.080;
        for black_hole in [false, true] {
            let f = one_path(&mtus, black_hole, false, Method::Fpmtud);
            assert_eq!(f.pmtu, Some(1400), "{f:?}");
            assert!(!f.fell_back);
            // Two round trips (plus serialization, nothing at these rates).
            assert!(f.seconds <= 2.0 * rtt_s + 0.001, "{f:?}");
        }
        // Where ICMP PMTUD has nothing to go on, F-PMTUD still answers.
        assert_eq!(one_path(&mtus, true, false, Method::IcmpPmtud).pmtu, None);
    }

    #[test]
    fn auto_is_exact_behind_a_fragment_filter_and_on_odd_mtus() {
        // Issue 14's odd path and its relatives, with and without ICMP and
        // fragments: exact in at most three round trips of 20 ms per link.
        for mtus in [&[9000, 1500, 1400, 1500][..], &[1500, 1499, 1500], &[1500, 1497, 1500], &[1500, 1432, 1364, 1296]]
        {
            for (black_hole, filter) in [(false, false), (true, false), (true, true)] {
                let f = one_path(mtus, black_hole, filter, Method::Fpmtud);
                let rtt_s = 0.020 * mtus.len() as f64;
                assert_eq!(f.pmtu, mtus.iter().copied().min(), "{mtus:?} {black_hole} {filter}: {f:?}");
                assert!(f.seconds <= 3.0 * rtt_s + 0.002, "{mtus:?}: {f:?}");
            }
        }
    }

    #[test]
    fn dplpmtud_finds_the_mtu_on_a_black_hole() {
        let b = one_path(&[1500, 1500, 1400, 1500], true, false, Method::DplpmtudBisection);
        assert_eq!(b.pmtu, Some(1400));
        let l = one_path(&[1500, 1500, 1400, 1500], true, false, Method::DplpmtudLsquic);
        let got = l.pmtu.expect("answer");
        assert!((1386..=1400).contains(&got), "lsquic stops within 99 %: {l:?}");
        // Failed sizes cost MAX_PROBES probe timers of at least 1 s each.
        assert!(b.seconds > 3.0, "{b:?}");
    }

    #[test]
    fn summary_rates_are_consistent_and_deterministic() {
        let r = pmtud_compare(&small(60)).expect("runs");
        assert_eq!(r.paths.len(), 60);
        for s in &r.summaries {
            assert!(s.exact_rate <= s.success_rate + 1e-12, "{s:?}");
            assert!(s.success_rate <= 1.0 && s.probes_mean >= 1.0, "{s:?}");
            assert_eq!(s.wrong_rate, 0.0, "no method may overshoot: {s:?}");
        }
        // Classic PMTUD never answers on a black-hole path whose MTU is
        // below the local link's.
        for path in &r.paths {
            let icmp = path.outcomes.iter().find(|o| o.method == Method::IcmpPmtud).expect("ran");
            if path.black_hole && path.true_pmtu < path.mtus[0] {
                assert_eq!(icmp.pmtu, None, "{path:?}");
            }
        }
        // auto: exact within three round trips wherever nothing is lost,
        // fragment filters, black holes and IPv6 included (plus
        // serialization: at most ~2 ms on these paths).
        let mut checked = 0;
        for path in r.paths.iter().filter(|p| p.loss == 0.0) {
            let f = path.outcomes.iter().find(|o| o.method == Method::Fpmtud).expect("ran");
            assert_eq!(f.pmtu, Some(path.true_pmtu), "{path:?}");
            assert!(f.seconds <= 3.0 * path.rtt_ms / 1000.0 + 0.005, "{path:?}");
            checked += 1;
        }
        assert!(checked > 20, "{checked}");
        let auto = &r.summaries[0];
        assert_eq!(auto.loss_free_exact_rate, Some(1.0), "{auto:?}");
        assert_eq!(auto.classes.len(), PathClass::ALL.len());
        let in_classes: usize = auto.classes.iter().map(|c| c.paths).sum();
        assert!(in_classes >= 60, "every path is in at least one class: {auto:?}");
        assert_eq!(pmtud_compare(&small(60)), Ok(r));
    }
}
