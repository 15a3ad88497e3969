//! A minimal reliable transport, enough for the experiments: packet
//! numbers, ACKs with ranges, RFC 9002 loss detection (packet threshold 3,
//! time threshold 9/8 RTT, probe timeout) and NewReno, with the packet size
//! chosen by a PMTU controller and the timers by a `px-pmtud` RTT estimator.
//!
//! One sender ([`BulkSender`]) moves `total_bytes` stream bytes to one
//! receiver ([`BulkReceiver`]). Every data packet has DF set, like QUIC's.

mod bbr;
mod congestion;
mod cubic;
mod newreno;
mod picoquic_pmtu;
mod pmtu;
mod ranges;
mod receiver;
mod sender;

use std::time::Duration;

use px_pmtud::rtt::RttEstimator;
use serde::Serialize;

pub use bbr::{Bbr, BbrState, Pacing};
pub use congestion::{Congestion, LostPacket, SenderModel};
pub use cubic::Cubic;
pub use newreno::NewReno;
pub use picoquic_pmtu::PicoquicPmtu;
pub use pmtu::{FixedPmtu, PmtuController};
pub use ranges::RangeSet;
pub use receiver::{BulkReceiver, ReceiverStats};
pub use sender::{BulkSender, RoundSample, SenderStats};

use crate::net::{NetStats, Network, PathConfig, PathError};
use crate::time::SimTime;

/// Transport parameters shared by both ends.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransportConfig {
    /// Stream bytes to move.
    pub total_bytes: u64,
    /// Per-packet overhead in bytes (IP + UDP/TCP + transport header): a
    /// data packet of IP length `s` carries `s - header_bytes` stream bytes.
    pub header_bytes: u32,
    /// IP length of an ACK-only packet (plus 4 bytes per ACK range).
    pub ack_bytes: u32,
    /// Receiver's maximum ACK delay (RFC 9000 §18.2 default 25 ms).
    pub max_ack_delay: Duration,
    /// Ack-eliciting packets that trigger an immediate ACK (RFC 9000 §13.2.2: 2).
    pub ack_eliciting_threshold: u32,
    /// Record window and progress at the end of each round trip.
    pub record_rounds: bool,
    /// Which sender runs: RFC 9002 NewReno or the picoquic model.
    pub model: SenderModel,
}

impl TransportConfig {
    /// QUIC-like framing over IPv4/UDP: 60 bytes of headers per packet
    /// (IPv4 20, UDP 8, short header with 8-byte connection ID and 4-byte
    /// packet number 13, AEAD tag 16, STREAM frame header 3), so a
    /// 1500-byte datagram carries 1440 stream bytes.
    #[must_use]
    pub fn quic_like(total_bytes: u64) -> Self {
        TransportConfig {
            total_bytes,
            header_bytes: 60,
            ack_bytes: 50,
            max_ack_delay: Duration::from_millis(25),
            ack_eliciting_threshold: 2,
            record_rounds: false,
            model: SenderModel::Rfc9002NewReno,
        }
    }

    /// TCP-like framing: IPv4 20 + TCP 20 + timestamps option 12 = 52
    /// bytes, so MTU 1500 gives MSS 1448 and MTU 9000 gives MSS 8948.
    #[must_use]
    pub fn tcp_like(total_bytes: u64) -> Self {
        TransportConfig {
            total_bytes,
            header_bytes: 52,
            ack_bytes: 52,
            max_ack_delay: Duration::from_millis(25),
            ack_eliciting_threshold: 2,
            record_rounds: false,
            model: SenderModel::Rfc9002NewReno,
        }
    }
}

/// Outcome of one bulk transfer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransferResult {
    /// Seconds until the receiver had every byte (`None`: not within the deadline).
    pub completion_s: Option<f64>,
    /// Sender counters.
    pub sender: SenderStats,
    /// Receiver counters.
    pub receiver: ReceiverStats,
    /// Network counters.
    pub net: NetStats,
    /// Window and progress per round trip (when recorded).
    pub rounds: Vec<RoundSample>,
    /// Trace hash of the run.
    pub trace_hash: u64,
}

/// Runs one transfer from endpoint A (sender) to B (receiver) until the
/// sender has every byte acknowledged or `deadline` passes.
pub fn run_transfer(
    path: PathConfig,
    seed: u64,
    cfg: TransportConfig,
    rtt: Box<dyn RttEstimator>,
    pmtu: Box<dyn PmtuController>,
    deadline: SimTime,
) -> Result<TransferResult, PathError> {
    let sender = BulkSender::new(cfg.clone(), rtt, pmtu);
    let receiver = BulkReceiver::new(cfg);
    let mut net = Network::new(path, seed, sender, receiver)?;
    net.run(deadline, |s, _| s.is_complete());
    Ok(TransferResult {
        completion_s: net.b.stats().completed_at.map(SimTime::as_secs_f64),
        sender: net.a.stats().clone(),
        receiver: net.b.stats().clone(),
        net: *net.stats(),
        rounds: net.a.rounds().to_vec(),
        trace_hash: net.trace_hash(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::LinkConfig;
    use crate::net::RouterPolicy;
    use proptest::prelude::*;
    use px_pmtud::rtt::ClassicRtt;

    fn path(bw: u64, delay_ms: u64, loss: f64, queue: Option<u64>) -> PathConfig {
        let mut l = LinkConfig::ideal(1500, Duration::from_millis(delay_ms));
        l.bandwidth_bps = bw;
        l.loss = loss;
        l.queue_bytes = queue;
        PathConfig { links: vec![l.clone(), l], routers: vec![RouterPolicy::default()] }
    }

    fn transfer(p: PathConfig, seed: u64, bytes: u64) -> TransferResult {
        let mut cfg = TransportConfig::quic_like(bytes);
        cfg.record_rounds = true;
        run_transfer(
            p,
            seed,
            cfg,
            Box::new(ClassicRtt::default()),
            Box::new(FixedPmtu(1500)),
            SimTime::from_millis(600_000),
        )
        .expect("valid path")
    }

    #[test]
    fn lossless_transfer_is_exact_and_fast() {
        let r = transfer(path(10_000_000, 10, 0.0, None), 1, 1_000_000);
        assert_eq!(r.receiver.delivered_bytes, 1_000_000);
        assert_eq!(r.receiver.duplicate_bytes, 0);
        assert_eq!(r.sender.packets_lost, 0);
        // 1 MB at 10 Mb/s is 0.8 s plus slow start over a 40 ms RTT.
        let t = r.completion_s.expect("completes");
        assert!((0.8..1.3).contains(&t), "{t}");
    }

    #[test]
    fn slow_start_doubles_the_window_each_round() {
        let r = transfer(path(0, 10, 0.0, None), 1, 3_000_000);
        // Each round the window grows by what the previous round delivered,
        // so the per-round growth doubles.
        let w: Vec<u64> = r.rounds.iter().map(|s| s.cwnd).take(6).collect();
        assert!(w.len() >= 5, "{w:?}");
        let growth: Vec<u64> = w.windows(2).map(|p| p[1] - p[0]).collect();
        for g in growth.windows(2).skip(1) {
            assert_eq!(g[1], 2 * g[0], "{w:?}");
        }
    }

    #[test]
    fn bottleneck_queue_overflow_halves_window() {
        // 2 Mb/s, 20 ms each way, 20 kB queue: slow start overshoots.
        let r = transfer(path(2_000_000, 20, 0.0, Some(20_000)), 1, 2_000_000);
        assert!(r.net.drops.queue_full > 0);
        assert!(r.sender.congestion_events >= 1);
        assert!(r.sender.slow_start_exit.is_some());
        assert_eq!(r.receiver.delivered_bytes, 2_000_000);
        // After the first loss the window is well below its peak.
        let peak = r.rounds.iter().map(|s| s.cwnd).max().unwrap_or(0);
        let last = r.rounds.last().map_or(0, |s| s.cwnd);
        assert!(last < peak, "peak {peak} last {last}");
        // Goodput stays near the link rate: at least 70 % of 2 Mb/s.
        let t = r.completion_s.expect("completes");
        assert!(t < 2_000_000.0 * 8.0 / 2_000_000.0 / 0.7, "{t}");
    }

    #[test]
    fn same_seed_same_trace() {
        let a = transfer(path(5_000_000, 5, 0.02, Some(30_000)), 9, 300_000);
        let b = transfer(path(5_000_000, 5, 0.02, Some(30_000)), 9, 300_000);
        let c = transfer(path(5_000_000, 5, 0.02, Some(30_000)), 10, 300_000);
        assert_eq!(a, b);
        assert_ne!(a.trace_hash, c.trace_hash);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        // With px-pmtud's DPLPMTUD choosing the size and the path MTU
        // changing under it (down and up, behind a black-hole router), the
        // transfer still completes with every byte delivered once.
        #[test]
        fn dplpmtud_transfer_survives_mtu_changes(
            seed in 0u64..1000,
            changes in proptest::collection::vec((1u64..8000, 1280u32..=1500), 0..4),
            loss in 0.0f64..0.03,
        ) {
            use std::time::Instant;
            use px_pmtud::dplpmtud::DplpmtudConfig;
            use crate::dplpmtud::DplpmtudController;
            let mut p = path(5_000_000, 20, loss, Some(100_000));
            let mut changes: Vec<(SimTime, u32)> =
                changes.into_iter().map(|(ms, m)| (SimTime::from_millis(ms), m)).collect();
            changes.sort();
            p.links[1].mtu_changes = changes;
            p.routers[0].sends_ptb = false;
            let mut dcfg = DplpmtudConfig::new(1500);
            dcfg.min_probe_timer = Duration::ZERO;
            let pmtu = DplpmtudController::new(dcfg, Instant::now()).expect("valid config");
            let r = run_transfer(
                p,
                seed,
                TransportConfig::quic_like(2_000_000),
                Box::new(ClassicRtt::default()),
                Box::new(pmtu),
                SimTime::from_millis(600_000),
            ).expect("valid path");
            prop_assert!(r.completion_s.is_some(), "{:?}", r.sender);
            prop_assert_eq!(r.receiver.delivered_bytes, 2_000_000);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        // Under random loss in both directions every byte arrives, once.
        #[test]
        fn every_byte_delivered_exactly_once(seed in 0u64..1000, loss in 0.0f64..0.15, kb in 1u64..200) {
            let bytes = kb * 1000 + seed % 997;
            let r = transfer(path(20_000_000, 5, loss, Some(60_000)), seed, bytes);
            prop_assert!(r.completion_s.is_some());
            prop_assert_eq!(r.receiver.delivered_bytes, bytes);
            prop_assert!(r.sender.completed_at.is_some());
        }
    }
}
