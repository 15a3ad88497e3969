//! `mtu_drop`: the "MTU Drop" test of the seed blog "Update QUIC timers once
//! per RTT" — download 1 MB over a 1 Mb/s link with 100 ms of delay each
//! way; the path MTU is 1500 and discovery must have reached it when, 1 s
//! in, it drops to 1394. Run once per RTT estimator (RFC 9002 classic and
//! the blog's three once-per-RTT variants) and compare completion time and
//! losses with the blog's Table 1.
//!
//! Two senders ([`SenderModel`]):
//!
//! - **picoquic model** (default): the sender of the test behind the blog,
//!   `mtu_drop_test` / `mtu_drop_cc_algotest` in picoquic's
//!   `picoquictest/tls_api_test.c`: picoquic's CUBIC, pacing, loss rules
//!   and PMTU reaction (`transport::cubic`, `transport::sender` and its
//!   `picoquic` module, `transport::picoquic_pmtu`, each citing the picoquic
//!   function it follows). The RTT estimator under test sets the smoothed
//!   RTT (pacing, RACK allowance, CUBIC's recovery test) and the
//!   retransmission timer (the timer rules that find the black-holed
//!   packets). The drop is timed from the end of the handshake, as the test
//!   times it from the start of the download.
//! - **picoquic model with BBR** (`--sender bbr`): the same sender with
//!   picoquic's BBRv1 (`transport::bbr`), the controller of the test's BBR
//!   run as the blog's 2023 picoquic had it, and the timer rule of that
//!   time's `picoquic_retransmit_needed_by_packet` (each packet's own send
//!   time plus the estimator's PTO).
//! - **RFC 9002 NewReno** (`--sender newreno`, the default): the simulator's earlier
//!   sender, with `px-pmtud`'s DPLPMTUD (its estimators also drive the
//!   probe timer, its black-hole detector notices the drop); kept so the
//!   earlier results can be produced.
//!
//! The router before the 1 Mb/s link is an ICMP black hole (like the test's
//! simulated link, it just drops what no longer fits).
//!
//! Defaults come from the blog's text and the picoquic test, never fitted
//! to the blog's numbers:
//!
//! | parameter | value | source |
//! |---|---|---|
//! | file, link rate, delay | 1 MB, 1 Mb/s, 100 ms each way | blog; the test's `test_scenario_very_long`, `mtu_drop_latency`, `picosec_1mbps` on both links |
//! | path MTU before / after, time of the drop | 1500 / 1394 B, 1 s | blog; the test waits 1 s after starting the download, then sets (1252 + 1536) / 2 |
//! | largest packet | 1468 B IP = a 1440-byte QUIC packet | blog: "using a packet size of 1,440 bytes"; + 8 UDP + 20 IPv4 |
//! | bottleneck queue | unlimited | the test's links have `queue_delay_max` 0, "no limit" in `picoquictest/sim_link.c` |
//! | what counts as a loss | a data packet declared lost | the blog's "Losses"; PMTU probes are reported apart |
//! | PROBE_TIMER floor (NewReno) | none: the PTO alone | QUIC stacks time their probes with the PTO; RFC 8899's 1 s floor is a flag |
//!
//! What each reproduces and what not: `docs/sim.md` (tests below pin it).
//! In short, none makes Classic lose more than Once 3V: with each, the
//! window at the drop (which sets the losses) comes out of start-up
//! untouched by the estimator. The BBR model alone reproduces the blog's
//! order of completion times for all four variants.

use std::time::{Duration, Instant};

use px_pmtud::dplpmtud::DplpmtudConfig;
use px_pmtud::rtt::{ClassicRtt, OncePerRtt, PtoVariant, RttEstimator};
use px_pmtud::search::SearchStrategy;
use serde::Serialize;

use super::{ExperimentError, Progress};
use crate::dplpmtud::DplpmtudController;
use crate::link::LinkConfig;
use crate::net::{Network, PathConfig, RouterPolicy};
use crate::svg::{self, BarChart, LineChart, Series};
use crate::time::SimTime;
use crate::transport::{BulkReceiver, BulkSender, PicoquicPmtu, PmtuController, SenderModel, TransportConfig};

/// The blog's Table 1: (variant, completion seconds, losses).
pub const BLOG_TABLE: [(&str, f64, u64); 4] =
    [("Classic", 11.3, 79), ("Once 4V", 10.7, 50), ("Once MaxRTT", 11.5, 48), ("Once 3V", 10.5, 48)];

/// Which RTT estimator drives the timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum RttVariant {
    /// RFC 9002 §5, every sample.
    Classic,
    /// Once per RTT, PTO with 4 × rttvar.
    #[value(name = "4v")]
    Once4V,
    /// Once per RTT, PTO from the epoch's maximum RTT.
    #[value(name = "maxrtt")]
    OnceMaxRtt,
    /// Once per RTT, PTO with 3 × rttvar.
    #[value(name = "3v")]
    Once3V,
}

impl RttVariant {
    /// All four, in the blog's table order.
    pub const ALL: [RttVariant; 4] =
        [RttVariant::Classic, RttVariant::Once4V, RttVariant::OnceMaxRtt, RttVariant::Once3V];

    /// The blog's label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            RttVariant::Classic => "Classic",
            RttVariant::Once4V => PtoVariant::FourVar.label(),
            RttVariant::OnceMaxRtt => PtoVariant::MaxRtt.label(),
            RttVariant::Once3V => PtoVariant::ThreeVar.label(),
        }
    }

    /// A fresh `px-pmtud` estimator of this kind.
    #[must_use]
    pub fn estimator(self) -> Box<dyn RttEstimator> {
        match self {
            RttVariant::Classic => Box::new(ClassicRtt::default()),
            RttVariant::Once4V => Box::new(OncePerRtt::new(PtoVariant::FourVar)),
            RttVariant::OnceMaxRtt => Box::new(OncePerRtt::new(PtoVariant::MaxRtt)),
            RttVariant::Once3V => Box::new(OncePerRtt::new(PtoVariant::ThreeVar)),
        }
    }

    /// The blog's (completion seconds, losses) for this variant.
    #[must_use]
    pub fn blog(self) -> (f64, u64) {
        let i = self as usize;
        (BLOG_TABLE[i].1, BLOG_TABLE[i].2)
    }
}

/// DPLPMTUD search strategy (see `px_pmtud::search`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum SearchKind {
    /// lsquic: the maximum first, then bisection to 99 %.
    Lsquic,
    /// Plain bisection to the byte.
    Bisection,
}

impl SearchKind {
    fn strategy(self) -> SearchStrategy {
        match self {
            SearchKind::Lsquic => SearchStrategy::lsquic(),
            SearchKind::Bisection => SearchStrategy::Bisection,
        }
    }
}

/// Parameters of [`mtu_drop`], and the flags of `px sim mtu-drop` (each
/// field's default is the blog's setting; durations, rates and losses take
/// `px_units`' units).
#[derive(Clone, Debug, PartialEq, Serialize, clap::Args)]
pub struct MtuDropParams {
    /// Bytes to download (blog: 1 MB).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1000..=1_000_000_000))]
    pub file_bytes: u64,
    /// Bottleneck rate, e.g. 1Mbps (blog: 1 Mb/s; 10kbps..=100Gbps; a bare
    /// number is Mb/s, as the old name --bandwidth-mbps took).
    #[arg(long = "bandwidth", alias = "bandwidth-mbps", value_name = "RATE", default_value = "1Mbps", value_parser = super::rate_bps_u64_mbps)]
    pub bandwidth_bps: u64,
    /// One-way delay of the bottleneck, e.g. 100ms (blog; 0..=10000 ms; a
    /// bare number is milliseconds, old name --delay-ms).
    #[arg(long = "delay", alias = "delay-ms", value_name = "DURATION", default_value = "100ms", value_parser = px_units::millis_f64)]
    pub one_way_delay_ms: f64,
    /// Bottleneck drop-tail buffer, bytes (absent: unlimited, as the blog's
    /// simulated link is taken to be; then the only losses are those the
    /// MTU drop causes).
    #[arg(long, value_name = "SIZE", value_parser = super::queue_size)]
    pub queue_bytes: Option<u64>,
    /// Path MTU before the drop (blog: 1500).
    #[arg(long, value_name = "BYTES", default_value_t = 1500, value_parser = clap::value_parser!(u32).range(1280..=9216))]
    pub mtu_before: u32,
    /// Path MTU after the drop (blog: 1394; at least 1200, at most --mtu-before).
    #[arg(long, value_name = "BYTES", default_value_t = 1394, value_parser = clap::value_parser!(u32).range(1200..=9216))]
    pub mtu_after: u32,
    /// Largest datagram the sender may use, IP bytes (DPLPMTUD's
    /// MAX_PLPMTU; absent: the blog's "packet size of 1,440 bytes", a QUIC
    /// packet, which is 1468 bytes of IPv4, or --mtu-before if smaller).
    #[arg(long = "max-packet", value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1200..=9216))]
    pub max_packet_bytes: Option<u32>,
    /// When the MTU drops, e.g. 1s (blog; picoquic and bbr senders: after
    /// the handshake, as in picoquic's test; newreno: from time zero; a
    /// bare number is seconds, old name --drop-at-s).
    #[arg(long = "drop-at", alias = "drop-at-s", value_name = "DURATION", default_value = "1s", value_parser = px_units::secs_f64)]
    pub drop_at_s: f64,
    /// DPLPMTUD search (newreno sender only; picoquic and bbr probe as picoquic does).
    #[arg(long, value_enum, default_value_t = SearchKind::Lsquic)]
    pub search: SearchKind,
    /// Floor of DPLPMTUD's PROBE_TIMER, e.g. 1s. RFC 8899 says at least
    /// 1000 ms; the default 0 lets the estimator's PTO alone set it, as QUIC
    /// stacks such as picoquic do, so the estimator's effect is visible (a
    /// bare number is milliseconds, old name --probe-timer-floor-ms).
    #[arg(long = "probe-timer-floor", alias = "probe-timer-floor-ms", value_name = "DURATION", default_value = "0ms", value_parser = px_units::millis_u64)]
    pub min_probe_timer_ms: u64,
    /// RTT estimators to compare, in order, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "classic,4v,maxrtt,3v")]
    pub variants: Vec<RttVariant>,
    /// Seed of every random draw (same seed, same output; the default path
    /// has no random loss, so it matters only with --loss).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Random loss on the bottleneck, each direction: a fraction (0.0001)
    /// or a percentage (0.01%); 0 <= loss < 0.5.
    #[arg(long, value_name = "LOSS", default_value = "0", value_parser = px_units::loss_fraction)]
    pub loss: f64,
    /// Give up after this much simulated time, e.g. 300s (1..=36000 s; a
    /// bare number is seconds, old name --deadline-s).
    #[arg(long = "deadline", alias = "deadline-s", value_name = "DURATION", default_value = "300s", value_parser = px_units::secs_f64)]
    pub deadline_s: f64,
    /// The sender to simulate.
    #[arg(long, value_enum, default_value_t = SenderModel::Rfc9002NewReno)]
    pub sender: SenderModel,
}

impl MtuDropParams {
    /// The largest datagram the sender uses (see [`MtuDropParams::max_packet_bytes`]).
    pub fn max_packet(&self) -> u32 {
        self.max_packet_bytes.unwrap_or(1468.min(self.mtu_before))
    }
}

impl Default for MtuDropParams {
    fn default() -> Self {
        MtuDropParams {
            file_bytes: 1_000_000,
            bandwidth_bps: 1_000_000,
            one_way_delay_ms: 100.0,
            queue_bytes: None,
            mtu_before: 1500,
            mtu_after: 1394,
            max_packet_bytes: None,
            drop_at_s: 1.0,
            search: SearchKind::Lsquic,
            min_probe_timer_ms: 0,
            variants: RttVariant::ALL.to_vec(),
            seed: 1,
            loss: 0.0,
            deadline_s: 300.0,
            sender: SenderModel::Rfc9002NewReno,
        }
    }
}

/// IPv4 (20) + UDP (8) header bytes: a QUIC packet of n bytes is n + 28 of IP.
const UDP_IPV4_OVERHEAD: u32 = 28;

/// How often the timeline looks at the sender.
const TIMELINE_STEP: Duration = Duration::from_millis(20);

/// The sender's state at one instant of the run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TimelinePoint {
    /// Simulated time, seconds.
    pub t_s: f64,
    /// smoothed RTT, seconds.
    pub srtt_s: f64,
    /// Latest raw RTT sample, seconds (`None` before the first).
    pub rtt_s: Option<f64>,
    /// PTO in force (without backoff), seconds.
    pub pto_s: f64,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// PLPMTU, IP bytes.
    pub plpmtu: u32,
}

impl TimelinePoint {
    fn of(s: &BulkSender, t: SimTime, max_ack_delay: Duration) -> Self {
        let rtt = s.rtt();
        TimelinePoint {
            t_s: t.as_secs_f64(),
            srtt_s: rtt.smoothed_rtt().as_secs_f64(),
            rtt_s: rtt.latest_rtt().map(|d| d.as_secs_f64()),
            pto_s: rtt.pto(max_ack_delay).as_secs_f64(),
            cwnd: s.congestion().window(),
            plpmtu: s.pmtu().plpmtu(),
        }
    }
}

/// One row of the result table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MtuDropRow {
    /// Blog label ("Classic", "Once 4V", ...).
    pub variant: String,
    /// Seconds until the client had the whole file (`None`: not by the deadline).
    pub completion_s: Option<f64>,
    /// Data packets declared lost.
    pub losses: u64,
    /// The blog's completion time for this variant.
    pub blog_completion_s: f64,
    /// The blog's loss count for this variant.
    pub blog_losses: u64,
    /// PLPMTU in use when the MTU dropped (discovery must have reached the
    /// path MTU by then).
    pub plpmtu_at_drop: u32,
    /// PLPMTU at the end.
    pub final_plpmtu: u32,
    /// smoothed RTT when the MTU dropped, seconds.
    pub srtt_at_drop_s: f64,
    /// Latest raw RTT sample when the MTU dropped, seconds (what the path
    /// actually takes then, queueing included).
    pub latest_rtt_at_drop_s: f64,
    /// Congestion window when the MTU dropped, bytes.
    pub cwnd_at_drop_bytes: u64,
    /// Bytes in flight when the MTU dropped (mostly queued at the bottleneck).
    pub in_flight_at_drop_bytes: u64,
    /// Whether slow start was still running when the MTU dropped.
    pub slow_start_at_drop: bool,
    /// smoothed RTT just before the drop was detected (10 ms resolution), s.
    pub srtt_before_detection_s: f64,
    /// PTO in force just before the drop was detected: the timer that had
    /// to expire once the ACKs of the pre-drop queue stopped, s.
    pub pto_before_detection_s: f64,
    /// Latest raw RTT sample just before the drop was detected, s.
    pub latest_rtt_before_detection_s: f64,
    /// PTO in force when the MTU dropped, seconds.
    pub pto_at_drop_s: f64,
    /// When slow start ended (first congestion event), seconds.
    pub slow_start_exit_s: Option<f64>,
    /// smoothed RTT at that moment, seconds.
    pub srtt_at_slow_start_exit_s: Option<f64>,
    /// First time after the drop that the PLPMTU fell, seconds (to the
    /// timeline's 20 ms resolution).
    pub black_hole_detected_s: Option<f64>,
    /// The sender every 20 ms, for the plot.
    pub timeline: Vec<TimelinePoint>,
    /// Probe timeouts.
    pub ptos: u64,
    /// DPLPMTUD probes sent / lost.
    pub probes_sent: u64,
    /// DPLPMTUD probes declared lost.
    pub probes_lost: u64,
    /// Black holes DPLPMTUD acted on.
    pub black_holes: u64,
    /// Trace hash of the run.
    pub trace_hash: u64,
}

/// Result of [`mtu_drop`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MtuDropResult {
    /// The parameters used.
    pub params: MtuDropParams,
    /// One row per variant, in the order asked.
    pub rows: Vec<MtuDropRow>,
}

fn path(p: &MtuDropParams) -> PathConfig {
    let delay = Duration::from_secs_f64(p.one_way_delay_ms / 1000.0);
    // Server's own link: fast, short, never the bottleneck.
    let mut access = LinkConfig::ideal(p.mtu_before, Duration::from_micros(100));
    access.bandwidth_bps = 1_000_000_000;
    let mut bottleneck = LinkConfig::ideal(p.mtu_before, delay);
    bottleneck.bandwidth_bps = p.bandwidth_bps;
    bottleneck.queue_bytes = p.queue_bytes;
    bottleneck.loss = p.loss;
    if p.sender == SenderModel::Rfc9002NewReno {
        bottleneck.mtu_changes = vec![(SimTime::from_secs_f64(p.drop_at_s), p.mtu_after)];
    }
    PathConfig {
        links: vec![access, bottleneck],
        routers: vec![RouterPolicy { sends_ptb: false, ..RouterPolicy::default() }],
    }
}

/// The ranges, each said with its flag (the fields are `px sim
/// mtu-drop`'s flags).
fn validate(p: &MtuDropParams) -> Result<(), ExperimentError> {
    let bad = |what| Err(ExperimentError::InvalidParam(what));
    if p.file_bytes == 0 || !(10_000..=100_000_000_000).contains(&p.bandwidth_bps) {
        return bad("--file-bytes > 0, --bandwidth in 10kbps..=100Gbps");
    }
    if !(1280..=9216).contains(&p.mtu_before) || !(1200..=p.mtu_before).contains(&p.mtu_after) {
        return bad("--mtu-before in 1280..=9216, --mtu-after in 1200..=--mtu-before (the path MTU must drop)");
    }
    if !(1200..=p.mtu_before).contains(&p.max_packet()) {
        return bad("--max-packet in 1200..=--mtu-before");
    }
    if !(p.deadline_s >= 1.0 && p.deadline_s <= 36_000.0) {
        return bad("--deadline in 1s..=36000s");
    }
    if !(p.drop_at_s >= 0.0 && p.deadline_s > p.drop_at_s) {
        return bad("0 <= --drop-at < --deadline");
    }
    if !(0.0..=10_000.0).contains(&p.one_way_delay_ms) || !(0.0..0.5).contains(&p.loss) {
        return bad("--delay in 0..=10000ms, --loss in [0, 0.5)");
    }
    if p.variants.is_empty() {
        return bad("--variants: name at least one of classic, 4v, maxrtt, 3v");
    }
    Ok(())
}

fn run_variant(p: &MtuDropParams, variant: RttVariant, base: Instant) -> Result<MtuDropRow, ExperimentError> {
    let mut cfg = DplpmtudConfig::new(u16::try_from(p.max_packet()).unwrap_or(u16::MAX));
    cfg.strategy = p.search.strategy();
    cfg.min_probe_timer = Duration::from_millis(p.min_probe_timer_ms);
    let mut tcfg = TransportConfig::quic_like(p.file_bytes);
    tcfg.model = p.sender;
    let max_ack_delay = tcfg.max_ack_delay;
    cfg.max_ack_delay = max_ack_delay;
    let pmtu: Box<dyn PmtuController> = match p.sender {
        // picoquic's own discovery and black-hole reaction; the peer's
        // max_packet_size is the largest packet, as a QUIC packet.
        SenderModel::Picoquic | SenderModel::Bbr => {
            Box::new(PicoquicPmtu::new(p.max_packet() - UDP_IPV4_OVERHEAD, UDP_IPV4_OVERHEAD))
        }
        SenderModel::Rfc9002NewReno => {
            Box::new(DplpmtudController::new(cfg, base).map_err(|_| ExperimentError::InvalidParam("DPLPMTUD config"))?)
        }
    };
    let sender = BulkSender::new(tcfg.clone(), variant.estimator(), pmtu);
    let receiver = BulkReceiver::new(tcfg);
    let mut net = Network::new(path(p), p.seed, sender, receiver)?;
    let drop_at = match p.sender {
        // picoquic's test waits 1 s after the connection is up and the
        // download has started (`tls_api_wait_for_timeout` after
        // `test_api_init_send_recv_scenario`), then lowers the path MTU.
        SenderModel::Picoquic | SenderModel::Bbr => {
            net.run(SimTime::from_secs_f64(p.deadline_s), |s, _| s.stats().handshake_done.is_some());
            let start =
                net.a.stats().handshake_done.ok_or(ExperimentError::InvalidParam("handshake never completed"))?;
            let at = start + Duration::from_secs_f64(p.drop_at_s);
            net.schedule_mtu_change(1, at, p.mtu_after)?;
            at
        }
        SenderModel::Rfc9002NewReno => SimTime::from_secs_f64(p.drop_at_s),
    };
    let deadline = SimTime::from_secs_f64(p.deadline_s);
    let done = |s: &BulkSender, r: &BulkReceiver| s.is_complete() && r.is_complete();

    // Step through time in TIMELINE_STEP slices (the simulation itself is
    // event-driven; stepping only decides when we look at the sender).
    let mut timeline = Vec::new();
    let mut t = SimTime::ZERO;
    while t < drop_at && !done(&net.a, &net.b) {
        t = (t + TIMELINE_STEP).min(drop_at);
        net.run(t, done);
        timeline.push(TimelinePoint::of(&net.a, t, max_ack_delay));
    }
    let plpmtu_at_drop = net.a.pmtu().plpmtu();
    let srtt_at_drop = net.a.rtt().smoothed_rtt();
    let pto_at_drop = net.a.rtt().pto(max_ack_delay);
    let latest_at_drop = net.a.rtt().latest_rtt().unwrap_or_default();
    let cc = net.a.congestion();
    let (cwnd_at_drop, in_flight_at_drop, slow_start_at_drop) = (cc.window(), cc.bytes_in_flight(), cc.in_slow_start());
    // Until the PLPMTU falls below its pre-drop value the black hole is not
    // yet detected; then run to the end.
    let mut detected = None;
    // The estimator as it stood just before detection: no ACK arrives while
    // the sender waits for its timer, so this is the PTO that fired.
    let mut before = (srtt_at_drop, pto_at_drop, latest_at_drop);
    while t < deadline && !done(&net.a, &net.b) {
        t = (t + TIMELINE_STEP).min(deadline);
        net.run(t, done);
        timeline.push(TimelinePoint::of(&net.a, t, max_ack_delay));
        if detected.is_none() {
            if net.a.pmtu().plpmtu() < plpmtu_at_drop {
                detected = Some(t.as_secs_f64());
            } else {
                let rtt = net.a.rtt();
                before = (rtt.smoothed_rtt(), rtt.pto(max_ack_delay), rtt.latest_rtt().unwrap_or_default());
            }
        }
    }
    let s = net.a.stats().clone();
    let (blog_completion_s, blog_losses) = variant.blog();
    Ok(MtuDropRow {
        variant: variant.label().to_string(),
        completion_s: net.b.stats().completed_at.map(SimTime::as_secs_f64),
        losses: s.packets_lost,
        blog_completion_s,
        blog_losses,
        plpmtu_at_drop,
        final_plpmtu: net.a.pmtu().plpmtu(),
        srtt_at_drop_s: srtt_at_drop.as_secs_f64(),
        latest_rtt_at_drop_s: latest_at_drop.as_secs_f64(),
        srtt_before_detection_s: before.0.as_secs_f64(),
        pto_before_detection_s: before.1.as_secs_f64(),
        latest_rtt_before_detection_s: before.2.as_secs_f64(),
        cwnd_at_drop_bytes: cwnd_at_drop,
        in_flight_at_drop_bytes: in_flight_at_drop,
        slow_start_at_drop,
        pto_at_drop_s: pto_at_drop.as_secs_f64(),
        slow_start_exit_s: s.slow_start_exit.map(SimTime::as_secs_f64),
        srtt_at_slow_start_exit_s: s.srtt_at_slow_start_exit.map(|d| d.as_secs_f64()),
        black_hole_detected_s: detected,
        timeline,
        ptos: s.ptos,
        probes_sent: s.probes_sent,
        probes_lost: s.probes_lost,
        black_holes: net.a.pmtu().black_holes(),
        trace_hash: net.trace_hash(),
    })
}

/// Runs the experiment.
pub fn mtu_drop(p: &MtuDropParams) -> Result<MtuDropResult, ExperimentError> {
    mtu_drop_with_progress(p, &mut |_, _| {})
}

/// [`mtu_drop`], reporting progress after each variant.
pub fn mtu_drop_with_progress(p: &MtuDropParams, progress: Progress<'_>) -> Result<MtuDropResult, ExperimentError> {
    validate(p)?;
    // Stands for simulated time zero at the px-pmtud boundary; only
    // differences between instants matter, so results do not depend on it.
    let base = Instant::now();
    let total = p.variants.len() as u64;
    let mut rows = Vec::with_capacity(p.variants.len());
    for (i, &v) in p.variants.iter().enumerate() {
        rows.push(run_variant(p, v, base)?);
        progress(i as u64 + 1, total);
    }
    Ok(MtuDropResult { params: p.clone(), rows })
}

/// Completion time and losses, simulated beside the blog's figures, then
/// the estimators at work: smoothed RTT and PTO of each variant over time,
/// against the raw RTT the path actually had.
#[must_use]
pub fn mtu_drop_svg(r: &MtuDropResult) -> String {
    let cats: Vec<String> = r.rows.iter().map(|row| row.variant.clone()).collect();
    let col = |f: fn(&MtuDropRow) -> f64| r.rows.iter().map(f).collect::<Vec<f64>>();
    let p = &r.params;
    let setting = format!(
        "{} Mb/s, {} ms each way, MTU {} -> {} at {} s",
        p.bandwidth_bps as f64 / 1e6,
        p.one_way_delay_ms,
        p.mtu_before,
        p.mtu_after,
        p.drop_at_s
    );
    let completion = BarChart {
        title: format!("MTU drop: completion time, {} kB download", p.file_bytes / 1000),
        y_label: "completion time (s)".into(),
        categories: cats.clone(),
        series: vec![
            ("simulated".into(), col(|row| row.completion_s.unwrap_or(f64::NAN))),
            ("blog, Table 1".into(), col(|row| row.blog_completion_s)),
        ],
        note: Some(format!("{setting}; blog: \"Update QUIC timers once per RTT\", Table 1")),
    };
    let losses = BarChart {
        title: "MTU drop: data packets declared lost".into(),
        y_label: "packets lost".into(),
        categories: cats,
        series: vec![
            ("simulated".into(), col(|row| row.losses as f64)),
            ("blog, Table 1".into(), col(|row| row.blog_losses as f64)),
        ],
        note: Some(format!("simulated: {}, unlimited queue; PMTU probes are not counted", p.sender.label())),
    };
    let drop = vec![(p.drop_at_s, format!("MTU drop ({} s)", p.drop_at_s))];
    let end = r.rows.iter().filter_map(|row| row.completion_s).fold(0.0, f64::max);
    let horizon = (p.drop_at_s + 3.0).min(end.max(p.drop_at_s + 0.5));
    let within = |pts: Vec<(f64, f64)>| pts.into_iter().filter(|pt| pt.0 <= horizon).collect::<Vec<_>>();
    let mut rtt_series: Vec<Series> = r
        .rows
        .iter()
        .map(|row| Series {
            name: format!("{} srtt", row.variant),
            points: within(row.timeline.iter().map(|x| (x.t_s, x.srtt_s * 1000.0)).collect()),
        })
        .collect();
    if let Some(first) = r.rows.first() {
        rtt_series.push(Series {
            name: "latest RTT sample".into(),
            points: within(first.timeline.iter().filter_map(|x| Some((x.t_s, x.rtt_s? * 1000.0))).collect()),
        });
    }
    let srtt = LineChart {
        title: "Smoothed RTT of each estimator vs the path's raw RTT".into(),
        x_label: "time (s)".into(),
        y_label: "RTT (ms)".into(),
        series: rtt_series,
        y_max: None,
        markers: drop.clone(),
        note: Some("latest sample of the first variant's run (the same path in every run until the drop)".into()),
        x_log: false,
    };
    let pto = LineChart {
        title: "PTO in force: the timer that must expire before the drop is noticed".into(),
        x_label: "time (s)".into(),
        y_label: "PTO (ms)".into(),
        series: r
            .rows
            .iter()
            .map(|row| Series {
                name: row.variant.clone(),
                points: within(row.timeline.iter().map(|x| (x.t_s, x.pto_s * 1000.0)).collect()),
            })
            .collect(),
        y_max: None,
        markers: drop,
        note: Some(
            "PTO = srtt + 4 rttvar (Classic, 4V) / 3 rttvar (3V), or max RTT + rttvar (MaxRTT), + 25 ms max_ack_delay"
                .into(),
        ),
        x_log: false,
    };
    svg::stack(&[completion.to_svg(), losses.to_svg(), srtt.to_svg(), pto.to_svg()])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulator's earlier sender: RFC 9002 NewReno with px-pmtud's DPLPMTUD.
    fn newreno() -> MtuDropParams {
        MtuDropParams { sender: SenderModel::Rfc9002NewReno, ..MtuDropParams::default() }
    }

    /// The picoquic sender model (`--sender picoquic`).
    fn picoquic() -> MtuDropParams {
        MtuDropParams { sender: SenderModel::Picoquic, ..MtuDropParams::default() }
    }

    /// The completion times in the blog's table order, after checking the
    /// blog's order among three of them: Once 3V before Once 4V before Classic.
    fn assert_3v_before_4v_before_classic(r: &MtuDropResult) -> [f64; 4] {
        let t: Vec<f64> = r.rows.iter().map(|row| row.completion_s.expect("completes")).collect();
        let t: [f64; 4] = t.try_into().expect("four variants");
        assert!(t[3] < t[1], "3V {} vs 4V {}", t[3], t[1]);
        assert!(t[1] < t[0], "4V {} vs Classic {}", t[1], t[0]);
        t
    }

    /// The picoquic sender with picoquic's BBR (`--sender bbr`).
    fn bbr() -> MtuDropParams {
        MtuDropParams { sender: SenderModel::Bbr, ..MtuDropParams::default() }
    }

    #[test]
    fn bbr_model_discovers_1440_resets_to_1252_after_the_drop_and_completes() {
        let r = mtu_drop(&bbr()).expect("runs");
        for row in &r.rows {
            assert_eq!((row.plpmtu_at_drop, row.final_plpmtu), (1468, 1280), "{row:?}");
            assert_eq!(row.black_holes, 1, "{row:?}");
            let t = row.completion_s.expect("completes");
            assert!(t > 8.0 && t < 20.0, "{row:?}");
            assert!(row.losses > 10, "{row:?}");
        }
    }

    /// What the BBR model shows (traced in docs/sim.md): picoquic's BBRv1
    /// runs its long-RTT start-up (HyStart on raw RTT samples) on this
    /// 200 ms path; the pacer (window / smoothed RTT × 1.25) runs faster than
    /// the 1 Mb/s link whichever estimator feeds it, so the sender is always
    /// held by the window, which grows the same in every run, and no timer
    /// fires before the drop. Start-up ends at the same instant, the same
    /// bytes are in flight at the drop, and the same packets are lost; the
    /// estimator moves only the completion times.
    #[test]
    fn bbr_model_start_up_and_losses_do_not_depend_on_the_estimator() {
        let r = mtu_drop(&bbr()).expect("runs");
        let first = &r.rows[0];
        let exit = first.slow_start_exit_s.expect("start-up ends");
        for row in &r.rows {
            assert_eq!(row.slow_start_exit_s, Some(exit), "{row:?}");
            assert_eq!(row.in_flight_at_drop_bytes, first.in_flight_at_drop_bytes, "{row:?}");
            assert_eq!(row.losses, first.losses, "{row:?}");
        }
        // Classic's smoothed RTT follows the start-up queue, once-per-RTT's does not.
        let srtt_exit = |i: usize| r.rows[i].srtt_at_slow_start_exit_s.expect("recorded");
        assert!(srtt_exit(0) > 1.5 * srtt_exit(3), "{} vs {}", srtt_exit(0), srtt_exit(3));
        let t: Vec<f64> = r.rows.iter().map(|row| row.completion_s.expect("completes")).collect();
        assert!(t.iter().any(|&x| (x - t[0]).abs() > 0.1), "{t:?}");
    }

    /// The BBR model reproduces the blog's order of completion times:
    /// Once 3V first, then Once 4V, then Classic, and Once MaxRTT no faster
    /// than Classic (both reach the 2-s cap of the backed-off timer). Not the
    /// losses (the test above), so the target is half met.
    #[test]
    fn bbr_model_reproduces_the_blogs_order_of_completion_times() {
        let r = mtu_drop(&bbr()).expect("runs");
        let t = assert_3v_before_4v_before_classic(&r);
        assert!(t[2] >= t[0], "MaxRTT {} vs Classic {}", t[2], t[0]);
        // The blog's reason: Classic's smoothed RTT followed the queue, so
        // its timer is the longest and it notices the drop last with MaxRTT.
        let detect = |i: usize| r.rows[i].black_hole_detected_s.expect("detected");
        assert!(detect(3) < detect(1) && detect(1) < detect(0), "{:?}", (detect(0), detect(1), detect(3)));
        assert!(r.rows[0].pto_before_detection_s > r.rows[3].pto_before_detection_s);
    }

    #[test]
    fn bbr_model_runs_are_deterministic() {
        let p = MtuDropParams { variants: vec![RttVariant::Classic], file_bytes: 300_000, loss: 0.01, ..bbr() };
        assert_eq!(mtu_drop(&p).expect("runs"), mtu_drop(&p).expect("runs"));
    }

    /// NewReno stays the default: it reproduces the blog's order of
    /// completion times; the picoquic models (CUBIC, BBR) neither the order
    /// nor the loss differences (docs/sim.md).
    #[test]
    fn the_newreno_sender_is_the_default() {
        assert_eq!(MtuDropParams::default().sender, SenderModel::Rfc9002NewReno);
    }

    #[test]
    fn picoquic_model_discovers_1440_resets_to_1252_after_the_drop_and_completes() {
        let r = mtu_drop(&picoquic()).expect("runs");
        assert_eq!(r.rows.len(), 4);
        for row in &r.rows {
            // The test checks the 1440-byte QUIC packet (1468 B of IPv4) before the drop.
            assert_eq!(row.plpmtu_at_drop, 1468, "{row:?}");
            // picoquic's probes at 1440 and 1400 both exceed 1394: it stays at 1252.
            assert_eq!(row.final_plpmtu, 1280, "{row:?}");
            assert_eq!((row.black_holes, row.probes_sent, row.probes_lost), (1, 3, 2), "{row:?}");
            let t = row.completion_s.expect("completes");
            assert!(t > 8.0 && t < 16.0, "{row:?}");
            // At least the eleven full-size losses that trigger the reset.
            assert!(row.losses > 10, "{row:?}");
            let detected = row.black_hole_detected_s.expect("reset happened");
            assert!(detected > 1.0 + 0.2, "{row:?}");
        }
    }

    #[test]
    fn picoquic_model_runs_are_deterministic_and_seed_sensitive_under_loss() {
        let p = MtuDropParams { variants: vec![RttVariant::Once3V], file_bytes: 300_000, ..picoquic() };
        assert_eq!(mtu_drop(&p).expect("runs"), mtu_drop(&p).expect("runs"));
        let lossy = |seed| MtuDropParams { loss: 0.01, seed, ..p.clone() };
        let (a, b) = (mtu_drop(&lossy(1)).expect("runs"), mtu_drop(&lossy(2)).expect("runs"));
        assert_eq!(a, mtu_drop(&lossy(1)).expect("runs"));
        assert_ne!(a.rows[0].trace_hash, b.rows[0].trace_hash);
        assert!(a.rows[0].completion_s.is_some() && b.rows[0].completion_s.is_some());
    }

    /// What the picoquic model shows about the estimator: it sets the
    /// timers that find the black-holed packets, so the completion times
    /// differ, but not the window at the drop. picoquic's CUBIC leaves slow
    /// start on raw RTT samples, and its pacer (window / smoothed RTT × 1.25)
    /// runs faster than the 1 Mb/s link whichever estimator feeds it, so every
    /// variant meets the drop with the same bytes in flight and loses the same
    /// packets. The blog's loss differences are not reproduced (docs/sim.md).
    #[test]
    fn picoquic_model_estimator_moves_the_times_not_the_window_at_the_drop() {
        let r = mtu_drop(&picoquic()).expect("runs");
        let first = &r.rows[0];
        for row in &r.rows {
            assert_eq!(row.cwnd_at_drop_bytes, first.cwnd_at_drop_bytes, "{row:?}");
            assert_eq!(row.in_flight_at_drop_bytes, first.in_flight_at_drop_bytes, "{row:?}");
            assert_eq!(row.losses, first.losses, "{row:?}");
        }
        // The estimators differ where the blog says: Classic's smoothed RTT
        // follows the queue, the once-per-RTT ones stay near the path's RTT.
        assert!(
            r.rows[0].srtt_at_drop_s > r.rows[3].srtt_at_drop_s,
            "{:?}",
            (r.rows[0].srtt_at_drop_s, r.rows[3].srtt_at_drop_s)
        );
        // And so do the times: not all four finish together.
        let t: Vec<f64> = r.rows.iter().map(|row| row.completion_s.expect("completes")).collect();
        assert!(t.iter().any(|&x| (x - t[0]).abs() > 0.1), "{t:?}");
    }

    #[test]
    fn newreno_discovery_reaches_the_1440_byte_packet_then_recovers_below_1394() {
        let r = mtu_drop(&newreno()).expect("runs");
        assert_eq!(r.rows.len(), 4);
        for row in &r.rows {
            // The blog: "using a packet size of 1,440 bytes" (QUIC), 1468 B of IPv4.
            assert_eq!(row.plpmtu_at_drop, 1468, "{row:?}");
            // lsquic's search stops within 99 % of the new path MTU.
            assert!((1380..=1394).contains(&row.final_plpmtu), "{row:?}");
            let detected = row.black_hole_detected_s.expect("black hole detected");
            assert!(detected > 1.0 && detected < 4.0, "{row:?}");
            assert_eq!(row.black_holes, 1, "{row:?}");
            // 1 MB at 1 Mb/s is 8 s of serialization at least.
            let t = row.completion_s.expect("completes");
            assert!(t > 8.0 && t < 15.0, "{row:?}");
            assert!(row.losses > 0);
        }
    }

    #[test]
    fn newreno_once_per_rtt_keeps_a_smaller_srtt_than_classic() {
        // The blog: at the drop, Classic's smoothed RTT was 407 ms and
        // Once 3V's 217 ms; with a queue building up, per-sample EWMA
        // tracks the latest, inflated samples.
        let r = mtu_drop(&MtuDropParams { file_bytes: 400_000, ..newreno() }).expect("runs");
        let classic = &r.rows[0];
        let three_v = &r.rows[3];
        assert!(classic.srtt_at_drop_s > three_v.srtt_at_drop_s, "{classic:?} {three_v:?}");
    }

    #[test]
    fn newreno_reproduces_the_blogs_time_ordering_among_classic_4v_and_3v() {
        // Blog Table 1: Once 3V (10.5 s) < Once 4V (10.7 s) < Classic (11.3 s),
        // and Once MaxRTT (11.5 s) slower than both once-per-RTT variants.
        let r = mtu_drop(&newreno()).expect("runs");
        let t = assert_3v_before_4v_before_classic(&r);
        assert!(t[2] > t[1] && t[2] > t[3], "MaxRTT {} vs 4V {} / 3V {}", t[2], t[1], t[3]);
        // The mechanism the blog names: Classic's smoothed RTT has followed
        // the queue up, so its PTO is the longest and it notices the drop last.
        let detect = |i: usize| r.rows[i].black_hole_detected_s.expect("detected");
        assert!(detect(0) > detect(1) && detect(0) > detect(2) && detect(0) > detect(3));
        let pto = |i: usize| r.rows[i].pto_before_detection_s;
        assert!(pto(0) > pto(2) && pto(2) > pto(1) && pto(1) > pto(3), "{:?}", (pto(0), pto(1), pto(2), pto(3)));
        assert!(r.rows[0].srtt_before_detection_s > 2.0 * r.rows[3].srtt_before_detection_s);
    }

    /// Why NewReno does not reproduce the blog's loss counts: RFC 9002
    /// NewReno leaves slow start only on a loss, and with the blog's
    /// unlimited queue there is none before the drop; no timer fires either
    /// (ACKs keep coming), so the estimator cannot change the window. Every
    /// variant meets the drop in slow start with the same window and the
    /// same bytes queued, and loses the same packets.
    #[test]
    fn under_newreno_the_losses_do_not_depend_on_the_estimator() {
        let r = mtu_drop(&newreno()).expect("runs");
        let first = &r.rows[0];
        assert!(first.slow_start_at_drop && first.slow_start_exit_s.is_some_and(|t| t > 1.0), "{first:?}");
        // Far more than a bandwidth-delay product (25 kB) is in flight.
        assert!(first.in_flight_at_drop_bytes > 3 * 25_000, "{first:?}");
        for row in &r.rows {
            assert_eq!(row.cwnd_at_drop_bytes, first.cwnd_at_drop_bytes, "{row:?}");
            assert_eq!(row.in_flight_at_drop_bytes, first.in_flight_at_drop_bytes, "{row:?}");
            assert_eq!(row.losses, first.losses, "{row:?}");
            assert_eq!(row.ptos, 1, "{row:?}");
        }
    }

    #[test]
    fn newreno_bisection_finds_the_exact_new_mtu_and_runs_are_deterministic() {
        // Long enough for the byte-exact search to finish: every size that
        // fails costs MAX_PROBES probe timers.
        let p = MtuDropParams {
            search: SearchKind::Bisection,
            variants: vec![RttVariant::Once3V],
            file_bytes: 3_000_000,
            ..newreno()
        };
        let a = mtu_drop(&p).expect("runs");
        assert_eq!(a.rows[0].final_plpmtu, 1394);
        let b = mtu_drop(&p).expect("runs");
        assert_eq!(a, b);
        assert!(mtu_drop_svg(&a).contains("Once 3V"));
    }

    #[test]
    fn rejects_bad_parameters() {
        let p = MtuDropParams { mtu_after: 1600, ..MtuDropParams::default() };
        assert!(matches!(mtu_drop(&p), Err(ExperimentError::InvalidParam(_))));
    }
}
