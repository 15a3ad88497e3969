//! BBR as picoquic ran it when the blog "Update QUIC timers once per RTT"
//! was written (July 2023): the controller of the BBR sender model
//! (`SenderModel::Bbr`).
//!
//! Which BBR: picoquic's MTU-drop test (`picoquictest/tls_api_test.c`,
//! `mtu_drop_bbr_test` → `mtu_drop_cc_algotest(picoquic_bbr_algorithm, …)`)
//! runs `picoquic_bbr_algorithm`. In 2023 that was picoquic's BBRv1; it has
//! since moved to `picoquic/bbr1.c` (`picoquic_bbr1_*`, the file read here)
//! and `picoquic/bbr.c` now holds a BBRv3 (the test's comment: "the time
//! with BBR v1 was 10300000"). On the test's 200 ms path the two differ at
//! once: BBRv1 leaves BBR's own start-up for "start-up long RTT" above a
//! minimum RTT of 50 ms (`BBR1_HYSTART_THRESHOLD_RTT`; older versions used
//! 100 ms), BBRv3 only above 250 ms (`BBRLongRttThreshold`). BBRv3 is not
//! modelled (docs/sim.md says what it would change).
//!
//! What is taken from `picoquic/bbr1.c` (read, not copied; constants are
//! picoquic's), by function:
//!
//! | behaviour | picoquic |
//! |---|---|
//! | start: window 15 360 B, state start-up (pacing and window gain 2/ln 2) | `picoquic_bbr1_reset`, `BBR1EnterStartup` |
//! | minimum RTT over 50 ms: "start-up long RTT", window at least 15 360 × min RTT / 100 ms (≤ 610 ms) | `picoquic_bbr1_notify`, `BBR1EnterStartupLongRTT` |
//! | long-RTT start-up: window + bytes acked, but only while the sender is held back by the window rather than by the pacer; at least half the peak bandwidth × min RTT; paced as picoquic paces a slow start (window / smoothed RTT × 1.25) | `picoquic_bbr1_notify` (acknowledgement), `picoquic_cc_slow_start_increase` (`cnx->cwin_blocked`), `picoquic_update_pacing_data` |
//! | its exit: HyStart's RTT test on raw samples, or a counted loss | `picoquic_cc_hystart_test`, `BBR1ExitStartupLongRtt` |
//! | bottleneck bandwidth: max of the delivery-rate samples over the last 10 rounds | `BBR1UpdateBtlBw`, `picoquic_estimate_path_bandwidth` |
//! | RT_prop: minimum raw RTT, expiring after 10 s | `BBR1UpdateRTprop` |
//! | drain (pacing gain ln 2 / 2) until bytes in flight ≤ BDP + 3 quanta | `BBR1EnterDrain`, `BBR1CheckDrain`, `BBR1Inflight` |
//! | ProbeBW: window gain 2, pacing gains 1,1,1,1,1,1,1.25,0.75 from phase min RTT / 100 ms | `BBR1EnterProbeBW`, `BBR1AdvanceCyclePhase`, `BBR1IsNextCyclePhase` |
//! | window: + bytes acked up to gain × BDP + 3 quanta, at least 4 packets | `BBR1SetCwnd`, `BBR1UpdateTargetCwnd` |
//! | pacing rate gain × bottleneck bandwidth; quantum 1 packet under 150 kB/s, 2 under 3 MB/s | `BBR1SetPacingRateWithGain`, `BBR1SetSendQuantum` |
//! | ProbeRTT: window 4 packets for 200 ms and a round | `BBR1CheckProbeRTT`, `BBR1HandleProbeRTT` |
//! | a loss counts when the smoothed loss rate passes 20 % (a timer loss always), at most once per smoothed RTT; it halves the window, a timer loss sets it to the minimum and "suspends" the path; start-up ends | `picoquic_bbr1_notify` (repeat/timeout), `picoquic_bbr1_notify_congestion` |
//! | a spurious timer loss lets the next ACK restore the window held before the suspension | `picoquic_bbr1_suspension_almost_over`, `picoquic_bbr1_suspension_exit` |
//!
//! Where the smoothed RTT (the estimator under test) reaches this
//! controller: the pacing of the long-RTT start-up (a larger smoothed RTT
//! paces the window out more slowly, so the sender is held by the pacer,
//! not the window, and the window grows less: picoquic grows it only when
//! the window blocked the sender), and the once-per-RTT filter of loss
//! events. Everything else works on raw RTT samples and
//! delivery rates. Left out: the leaky-bucket policer detector
//! (`BBR1ltbwSampling`, needs 20 % loss over 4 rounds with deliveries), the
//! BDP seed (`seed_cwin`, a resumed session), `bandwidth_pause` in the
//! pacer (packet trains in the long-RTT start-up), and app-limited marks (a
//! bulk download never is).

use std::collections::BTreeMap;
use std::time::Duration;

use super::cubic::{CWIN_INITIAL, CWIN_MINIMUM, LossKind, RttFilter};
use crate::time::SimTime;

/// `BBR1_HIGH_GAIN`: 2 / ln 2.
const HIGH_GAIN: f64 = 2.885_390_081_777_9;
/// `BBR1_HYSTART_THRESHOLD_RTT`: minimum RTT above which start-up is HyStart.
const LONG_RTT_THRESHOLD: Duration = Duration::from_millis(50);
/// `PICOQUIC_TARGET_RENO_RTT`, `PICOQUIC_TARGET_SATELLITE_RTT`.
const TARGET_RENO_RTT: Duration = Duration::from_millis(100);
const TARGET_SATELLITE_RTT: Duration = Duration::from_millis(610);
/// `BBR1_BTL_BW_FILTER_LENGTH` (rounds).
const BTL_BW_FILTER: usize = 10;
/// `bbr1_pacing_gain_cycle`.
const GAIN_CYCLE: [f64; 8] = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.25, 0.75];
/// `BBR1_GAIN_CYCLE_MAX_START`.
const GAIN_CYCLE_MAX_START: usize = 5;
/// `BBR1_PROBE_RTT_INTERVAL`, `BBR1_PROBE_RTT_DURATION`.
const PROBE_RTT_INTERVAL: Duration = Duration::from_secs(10);
const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// `BBR1_PACING_RATE_LOW`, `BBR1_PACING_RATE_MEDIUM` (bytes/s).
const PACING_RATE_LOW: f64 = 150_000.0;
const PACING_RATE_MEDIUM: f64 = 3_000_000.0;
/// The `quantum_ratio` default: a millisecond of sending.
const QUANTUM_RATIO: f64 = 0.001;
/// The loss-rate threshold `picoquic_bbr1_notify` gives the loss filter.
const LOSS_THRESHOLD: f64 = 0.20;
/// `PICOQUIC_BANDWIDTH_TIME_INTERVAL_MIN`: shortest interval a delivery-rate
/// sample may span.
const RATE_INTERVAL_MIN: Duration = Duration::from_millis(1);
/// `PICOQUIC_MAX_PACKET_SIZE`, the unit of `BBR1SetMinimalGain`.
const MAX_PACKET: f64 = 1536.0;

/// picoquic's BBRv1 states (`picoquic_bbr1_alg_state_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BbrState {
    /// BBR start-up: pacing at 2/ln 2 × the bottleneck bandwidth.
    Startup,
    /// HyStart-like start-up on long-RTT paths.
    StartupLongRtt,
    /// Draining the start-up queue.
    Drain,
    /// Steady state: cycling the pacing gain around the bottleneck bandwidth.
    ProbeBw,
    /// Window at 4 packets to measure the minimum RTT again.
    ProbeRtt,
}

/// How the sender's pacer is to be set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pacing {
    /// Not paced (no rate yet).
    Off,
    /// From the window and the smoothed RTT (`picoquic_update_pacing_data`;
    /// × 1.25 in the first slow start, which BBR's long-RTT start-up is).
    Window,
    /// At this rate (bytes/s) with a bucket of `quantum` bytes
    /// (`picoquic_update_pacing_rate`).
    Rate { rate: f64, quantum: f64 },
}

/// The delivery state when a packet left (draft-cheng-iccrg-delivery-rate-estimation's
/// P.delivered, P.delivered_time, P.first_sent_time).
#[derive(Clone, Copy, Debug)]
struct SentState {
    sent: SimTime,
    delivered: u64,
    delivered_time: SimTime,
    first_sent: SimTime,
}

/// picoquic's BBRv1.
#[derive(Clone, Debug)]
pub struct Bbr {
    mss: u64,
    window: u64,
    bytes_in_flight: u64,
    state: BbrState,
    // Delivery-rate sampling (`picoquic_estimate_path_bandwidth`).
    sent: BTreeMap<u64, SentState>,
    delivered: u64,
    delivered_time: SimTime,
    first_sent: SimTime,
    /// Send time of the packet behind the last rate sample.
    rate_sample_sent: Option<SimTime>,
    /// `delivered` when that packet left (`delivered_last_packet`).
    rate_sample_delivered_prior: u64,
    bandwidth: u64,
    peak_bandwidth: u64,
    /// Bytes acknowledged since the last ACK frame was processed.
    bytes_delivered: u64,
    /// The sender's last attempt was stopped by the window (`cwin_blocked`).
    window_blocked: bool,
    // Model.
    btl_bw: u64,
    btl_bw_filter: [u64; BTL_BW_FILTER],
    btl_bw_increased: bool,
    rt_prop: Option<Duration>,
    rt_prop_stamp: SimTime,
    rt_prop_expired: bool,
    next_round_delivered: u64,
    round_start: bool,
    full_bw: u64,
    full_bw_count: u32,
    filled_pipe: bool,
    pacing_gain: f64,
    cwnd_gain: f64,
    pacing_rate: f64,
    send_quantum: u64,
    cycle_index: usize,
    cycle_start: usize,
    cycle_stamp: SimTime,
    cycle_on_loss: bool,
    prior_in_flight: u64,
    prior_cwnd: u64,
    probe_rtt_done: Option<SimTime>,
    probe_rtt_round_done: bool,
    filter: RttFilter,
    // Loss reaction.
    loss_interval_start: SimTime,
    last_loss_was_timeout: bool,
    congestion_sequence: u64,
    suspended: bool,
    suspension_nearly_over: bool,
    window_before_suspension: u64,
    /// Congestion events so far (window reductions on loss).
    pub congestion_events: u64,
    /// When start-up ended (either kind).
    pub slow_start_exit: Option<SimTime>,
}

impl Bbr {
    /// A controller whose segment is `max_datagram` bytes.
    #[must_use]
    pub fn new(max_datagram: u32) -> Self {
        Bbr {
            mss: u64::from(max_datagram),
            window: CWIN_INITIAL,
            bytes_in_flight: 0,
            state: BbrState::Startup,
            sent: BTreeMap::new(),
            delivered: 0,
            delivered_time: SimTime::ZERO,
            first_sent: SimTime::ZERO,
            rate_sample_sent: None,
            rate_sample_delivered_prior: 0,
            bandwidth: 0,
            peak_bandwidth: 0,
            bytes_delivered: 0,
            window_blocked: false,
            btl_bw: 0,
            btl_bw_filter: [0; BTL_BW_FILTER],
            btl_bw_increased: false,
            rt_prop: None,
            rt_prop_stamp: SimTime::ZERO,
            rt_prop_expired: false,
            next_round_delivered: 0,
            round_start: false,
            full_bw: 0,
            full_bw_count: 0,
            filled_pipe: false,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            pacing_rate: 0.0,
            send_quantum: u64::from(max_datagram),
            cycle_index: 0,
            cycle_start: 0,
            cycle_stamp: SimTime::ZERO,
            cycle_on_loss: false,
            prior_in_flight: 0,
            prior_cwnd: 0,
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            filter: RttFilter::default(),
            loss_interval_start: SimTime::ZERO,
            last_loss_was_timeout: false,
            congestion_sequence: 0,
            suspended: false,
            suspension_nearly_over: false,
            window_before_suspension: 0,
            congestion_events: 0,
            slow_start_exit: None,
        }
    }

    /// The congestion window in bytes.
    #[must_use]
    pub fn window(&self) -> u64 {
        self.window
    }

    /// `u64::MAX` during start-up, the window afterwards (BBR has no
    /// slow-start threshold; this keeps the sender's "first slow start" test).
    #[must_use]
    pub fn ssthresh(&self) -> u64 {
        if self.in_slow_start() { u64::MAX } else { self.window }
    }

    /// True in either start-up.
    #[must_use]
    pub fn in_slow_start(&self) -> bool {
        matches!(self.state, BbrState::Startup | BbrState::StartupLongRtt)
    }

    /// The state machine's state.
    #[must_use]
    pub fn state(&self) -> BbrState {
        self.state
    }

    /// The bottleneck bandwidth estimate, bytes/s.
    #[must_use]
    pub fn btl_bw(&self) -> u64 {
        self.btl_bw
    }

    /// Bytes sent and neither acknowledged nor declared lost.
    #[must_use]
    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    /// How the pacer is to be set now.
    #[must_use]
    pub fn pacing(&self) -> Pacing {
        if self.state == BbrState::StartupLongRtt {
            Pacing::Window
        } else if self.pacing_rate > 0.0 {
            Pacing::Rate { rate: self.pacing_rate, quantum: self.send_quantum as f64 }
        } else {
            Pacing::Off
        }
    }

    /// The datagram size changed.
    pub fn set_max_datagram(&mut self, size: u32) {
        self.mss = u64::from(size);
    }

    /// Whether the sender's last attempt to send was stopped by the window.
    pub fn set_window_blocked(&mut self, blocked: bool) {
        self.window_blocked = blocked;
    }

    /// Packet `pn` of `size` bytes left at `now`.
    pub fn on_sent(&mut self, now: SimTime, pn: u64, size: u32) {
        if self.bytes_in_flight == 0 {
            // Nothing in flight: a new flight starts (the draft's rule).
            self.delivered_time = now;
            self.first_sent = now;
        }
        self.bytes_in_flight += u64::from(size);
        let state = SentState {
            sent: now,
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            first_sent: self.first_sent,
        };
        self.sent.insert(pn, state);
    }

    /// Packet `pn` left flight without congestion meaning (a lost PMTU probe).
    pub fn on_discarded(&mut self, pn: u64, size: u32) {
        self.sent.remove(&pn);
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(u64::from(size));
    }

    /// Packet `pn` of `size` bytes was acknowledged at `now`: delivered
    /// counts, and one delivery-rate sample per round of packets
    /// (`picoquic_estimate_path_bandwidth`: the bytes delivered since the
    /// packet left, over the longer of the send and the receive interval).
    pub fn on_acked(&mut self, now: SimTime, pn: u64, size: u32) {
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(u64::from(size));
        self.delivered += u64::from(size);
        self.bytes_delivered += u64::from(size);
        self.delivered_time = now;
        let Some(p) = self.sent.remove(&pn) else { return };
        self.first_sent = p.sent;
        match self.rate_sample_sent {
            None => self.rate_sample_sent = Some(p.sent),
            Some(last) if p.sent >= last => {
                let receive = now.saturating_since(p.delivered_time);
                if receive > RATE_INTERVAL_MIN {
                    let interval = receive.max(p.sent.saturating_since(p.first_sent));
                    let bytes = self.delivered - p.delivered;
                    self.bandwidth = (bytes as f64 / interval.as_secs_f64()) as u64;
                    self.peak_bandwidth = self.peak_bandwidth.max(self.bandwidth);
                    self.rate_sample_sent = Some(p.sent);
                    self.rate_sample_delivered_prior = p.delivered;
                }
            }
            Some(_) => {}
        }
    }

    /// A packet declared lost was acknowledged after all
    /// (`picoquic_bbr1_suspension_almost_over`).
    pub fn on_spurious_loss(&mut self, pn: u64) {
        if self.suspended
            && self.window_before_suspension > 0
            && !self.suspension_nearly_over
            && self.congestion_sequence >= pn
        {
            self.suspension_nearly_over = true;
        }
    }

    /// The end of an ACK frame's processing (picoquic's "acknowledgement"
    /// notification): `rtt` is the frame's raw RTT sample if it gave one,
    /// `min_rtt` the path's minimum.
    pub fn on_ack_frame(&mut self, now: SimTime, rtt: Option<Duration>, min_rtt: Option<Duration>) {
        if self.suspended {
            if self.suspension_nearly_over {
                self.window = self.window_before_suspension;
            }
            self.suspended = false;
            self.suspension_nearly_over = false;
        }
        if self.state == BbrState::Startup && min_rtt.is_some_and(|m| m > LONG_RTT_THRESHOLD) {
            self.enter_startup_long_rtt(min_rtt.unwrap_or_default());
        }
        if self.state == BbrState::StartupLongRtt && rtt.is_some_and(|r| self.filter.rtt_rose(now, r)) {
            self.exit_startup_long_rtt(now);
        }
        if self.state == BbrState::StartupLongRtt {
            self.update_btl_bw();
            if let Some(r) = rtt {
                if self.rt_prop.is_none_or(|p| r <= p) {
                    self.rt_prop = Some(r);
                    self.rt_prop_stamp = now;
                }
            }
            if self.window_blocked {
                self.window += self.bytes_delivered;
            }
            self.bytes_delivered = 0;
            let rt_prop = self.rt_prop.unwrap_or_default().as_secs_f64();
            let min_window = (self.peak_bandwidth as f64 * rt_prop) as u64 / 2;
            self.window = self.window.max(min_window);
        } else {
            self.update_model_and_state(now, rtt);
            self.update_control_parameters();
            self.prior_in_flight = self.bytes_in_flight;
            self.bytes_delivered = 0;
        }
    }

    /// Data packet `pn` of `size` bytes was declared lost (`kind` says how);
    /// `next_pn` is the next packet number the sender will use.
    pub fn on_packet_lost(&mut self, now: SimTime, pn: u64, size: u32, kind: LossKind, srtt: Duration, next_pn: u64) {
        self.sent.remove(&pn);
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(u64::from(size));
        if pn >= self.congestion_sequence && self.filter.loss_counts(pn, kind, LOSS_THRESHOLD) {
            self.notify_congestion(now, kind == LossKind::Timer, srtt, next_pn);
        }
    }

    /// `picoquic_bbr1_notify_congestion`.
    fn notify_congestion(&mut self, now: SimTime, is_timeout: bool, srtt: Duration, next_pn: u64) {
        let recent = self.cycle_on_loss || now < self.loss_interval_start + srtt;
        if recent && (!is_timeout || self.last_loss_was_timeout) {
            return;
        }
        if is_timeout || self.window < CWIN_MINIMUM {
            if !self.suspended {
                self.suspended = true;
                self.window_before_suspension = self.window;
            }
            self.window = CWIN_MINIMUM;
        } else {
            self.window /= 2;
        }
        self.congestion_events += 1;
        self.loss_interval_start = now;
        self.last_loss_was_timeout = is_timeout;
        self.congestion_sequence = next_pn;
        match self.state {
            BbrState::StartupLongRtt => self.exit_startup_long_rtt(now),
            BbrState::Startup => {
                self.filled_pipe = true;
                self.enter_drain(now);
            }
            _ => self.cycle_on_loss = true,
        }
    }

    /// Persistent congestion: picoquic's BBR has no separate rule.
    pub fn on_persistent_congestion(&mut self) {}

    /// Bytes in flight at `gain` × BDP plus three quanta (`BBR1Inflight`).
    fn inflight(&self, gain: f64) -> u64 {
        match self.rt_prop {
            None => CWIN_INITIAL,
            Some(rt) => (gain * self.btl_bw as f64 * rt.as_secs_f64()) as u64 + 3 * self.send_quantum,
        }
    }

    fn enter_startup_long_rtt(&mut self, min_rtt: Duration) {
        self.state = BbrState::StartupLongRtt;
        let mut window = CWIN_INITIAL;
        if min_rtt > TARGET_RENO_RTT {
            let rtt = min_rtt.min(TARGET_SATELLITE_RTT);
            window = (CWIN_INITIAL as f64 * rtt.as_secs_f64() / TARGET_RENO_RTT.as_secs_f64()) as u64;
        }
        self.window = self.window.max(window);
    }

    fn exit_startup_long_rtt(&mut self, now: SimTime) {
        self.next_round_delivered = self.delivered;
        self.round_start = true;
        self.full_bw = self.btl_bw;
        self.full_bw_count = 3;
        self.filled_pipe = true;
        self.enter_drain(now);
        if self.bytes_in_flight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }
    }

    fn enter_drain(&mut self, now: SimTime) {
        self.state = BbrState::Drain;
        self.pacing_gain = 1.0 / HIGH_GAIN;
        self.cwnd_gain = HIGH_GAIN;
        self.slow_start_exit.get_or_insert(now);
    }

    fn enter_probe_bw(&mut self, now: SimTime) {
        self.state = BbrState::ProbeBw;
        self.pacing_gain = 1.0;
        self.cwnd_gain = 2.0;
        let rt = self.rt_prop.unwrap_or_default();
        let start = if rt > TARGET_RENO_RTT {
            let rt = rt.min(TARGET_SATELLITE_RTT);
            ((rt.as_micros() / TARGET_RENO_RTT.as_micros()) as usize).min(GAIN_CYCLE_MAX_START)
        } else {
            2
        };
        self.cycle_index = start;
        self.cycle_start = start;
        self.btl_bw_increased = true;
        self.advance_cycle_phase(now);
    }

    /// `BBR1UpdateBtlBw`: a round ends when the packet behind the latest
    /// rate sample left after the round began.
    fn update_btl_bw(&mut self) {
        let mut bw = self.bandwidth;
        if self.state == BbrState::Startup {
            bw = bw.max(self.peak_bandwidth / 2);
        }
        if let Some(rt) = self.rt_prop.filter(|r| !r.is_zero()) {
            bw = bw.max((CWIN_MINIMUM as f64 / rt.as_secs_f64()) as u64);
        }
        self.round_start = self.rate_sample_delivered_prior >= self.next_round_delivered;
        if self.round_start {
            self.next_round_delivered = self.delivered;
            self.btl_bw_filter.copy_within(0..BTL_BW_FILTER - 1, 1);
            self.btl_bw = self.btl_bw_filter[1..].iter().copied().max().unwrap_or(0);
            self.btl_bw_increased |= bw > self.btl_bw_filter[1];
            self.btl_bw_filter[0] = bw;
            self.btl_bw = self.btl_bw.max(bw);
        } else if bw > self.btl_bw_filter[0] {
            self.btl_bw_filter[0] = bw;
            if bw > self.btl_bw {
                self.btl_bw = bw;
                self.btl_bw_increased = true;
            }
        }
    }

    fn update_model_and_state(&mut self, now: SimTime, rtt: Option<Duration>) {
        self.update_btl_bw();
        if self.state == BbrState::ProbeBw && self.is_next_cycle_phase(now) {
            self.advance_cycle_phase(now);
        }
        // BBR1CheckFullPipe.
        if !self.filled_pipe && self.round_start {
            if self.btl_bw as f64 >= self.full_bw as f64 * 1.25 {
                self.full_bw = self.btl_bw;
                self.full_bw_count = 0;
            } else {
                self.full_bw_count += 1;
                self.filled_pipe = self.full_bw_count >= 3;
            }
        }
        // BBR1CheckDrain.
        if self.state == BbrState::Startup && self.filled_pipe {
            self.enter_drain(now);
        }
        if self.state == BbrState::Drain && self.bytes_in_flight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }
        if let Some(r) = rtt {
            self.update_rt_prop(now, r);
        }
        self.check_probe_rtt(now);
    }

    /// `BBR1UpdateRTprop`.
    fn update_rt_prop(&mut self, now: SimTime, rtt: Duration) {
        let Some(rt) = self.rt_prop else {
            self.rt_prop = Some(rtt);
            self.rt_prop_stamp = now;
            return;
        };
        self.rt_prop_expired = now > self.rt_prop_stamp + PROBE_RTT_INTERVAL && now > self.rt_prop_stamp + rt * 20;
        if rtt <= rt || self.rt_prop_expired {
            self.rt_prop = Some(rtt);
            self.rt_prop_stamp = now;
        } else if (rtt - rt) * 20 < rt {
            self.rt_prop_stamp = now;
        }
    }

    /// `BBR1IsNextCyclePhase` (picoquic passes no losses here).
    fn is_next_cycle_phase(&self, now: SimTime) -> bool {
        let mut full = self.cycle_on_loss || now.saturating_since(self.cycle_stamp) > self.rt_prop.unwrap_or_default();
        if self.pacing_gain > 1.0 {
            full &= self.prior_in_flight >= self.inflight(self.pacing_gain);
        } else if self.pacing_gain < 1.0 {
            full &= self.prior_in_flight <= self.inflight(1.0);
        }
        full
    }

    /// `BBR1AdvanceCyclePhase` and `BBR1SetMinimalGain`.
    fn advance_cycle_phase(&mut self, now: SimTime) {
        self.cycle_on_loss = false;
        self.cycle_stamp = now;
        self.cycle_index += 1;
        if self.cycle_index >= GAIN_CYCLE.len() {
            let mut start = self.cycle_start;
            if self.btl_bw_increased {
                self.btl_bw_increased = false;
                start = (start + 1).min(GAIN_CYCLE_MAX_START);
            } else {
                start = start.saturating_sub(1);
            }
            self.cycle_index = start;
            self.cycle_start = start;
        }
        self.pacing_gain = GAIN_CYCLE[self.cycle_index];
        if let Some(rt) = self.rt_prop.filter(|_| self.pacing_gain > 1.0) {
            let bdp = rt.as_secs_f64() * self.btl_bw as f64;
            if bdp > 0.0 && bdp < 4.0 * MAX_PACKET {
                self.pacing_gain = self.pacing_gain.max(4.0 * MAX_PACKET / bdp);
            }
        }
    }

    /// `BBR1CheckProbeRTT` and `BBR1HandleProbeRTT`.
    fn check_probe_rtt(&mut self, now: SimTime) {
        if self.state != BbrState::ProbeRtt && self.rt_prop_expired {
            // BBR1SaveCwnd: in ProbeBW keep the larger of the window and the saved one.
            self.prior_cwnd =
                if self.state == BbrState::ProbeBw { self.window.max(self.prior_cwnd) } else { self.window };
            self.state = BbrState::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.probe_rtt_done = None;
        }
        if self.state != BbrState::ProbeRtt {
            return;
        }
        match self.probe_rtt_done {
            None if self.bytes_in_flight <= 4 * self.mss => {
                self.probe_rtt_done = Some(now + PROBE_RTT_DURATION);
                self.probe_rtt_round_done = false;
                self.next_round_delivered = self.delivered;
            }
            None => {}
            Some(done) => {
                self.probe_rtt_round_done |= self.round_start;
                if self.probe_rtt_round_done && now > done {
                    self.rt_prop_stamp = now;
                    self.rt_prop_expired = false;
                    self.window = self.window.max(self.prior_cwnd);
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.state = BbrState::Startup;
                        self.pacing_gain = HIGH_GAIN;
                        self.cwnd_gain = HIGH_GAIN;
                    }
                }
            }
        }
    }

    /// `BBR1SetPacingRate`, `BBR1SetSendQuantum`, `BBR1SetCwnd`.
    fn update_control_parameters(&mut self) {
        let rate = self.pacing_gain * self.btl_bw as f64;
        if self.filled_pipe || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
        self.send_quantum = if self.pacing_rate < PACING_RATE_LOW {
            self.mss
        } else if self.pacing_rate < PACING_RATE_MEDIUM {
            2 * self.mss
        } else {
            ((self.pacing_rate * QUANTUM_RATIO) as u64).min(0x10000)
        };
        let target = self.inflight(self.cwnd_gain);
        if self.filled_pipe {
            self.window = (self.window + self.bytes_delivered).min(target);
        } else if self.window < target || self.delivered < CWIN_INITIAL {
            self.window += self.bytes_delivered;
        }
        self.window = self.window.max(4 * self.mss);
        if self.state == BbrState::ProbeRtt {
            self.window = self.window.min(4 * self.mss);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::cubic::tests::{MD, at, ms};

    /// Sends `n` packets from `pn` at `t`, acknowledges them all at `t + rtt`
    /// (one ACK frame), and returns the next packet number.
    fn round(cc: &mut Bbr, pn: u64, n: u64, t: u64, rtt: u64) -> u64 {
        cc.set_window_blocked(true);
        for i in 0..n {
            cc.on_sent(at(t), pn + i, MD);
        }
        for i in 0..n {
            cc.on_acked(at(t + rtt), pn + i, MD);
        }
        cc.on_ack_frame(at(t + rtt), Some(ms(rtt)), Some(ms(rtt)));
        pn + n
    }

    #[test]
    fn a_long_rtt_path_starts_with_hystart_and_a_window_scaled_to_the_rtt() {
        let mut cc = Bbr::new(MD);
        assert_eq!((cc.window(), cc.state()), (CWIN_INITIAL, BbrState::Startup));
        round(&mut cc, 0, 3, 0, 200);
        assert_eq!(cc.state(), BbrState::StartupLongRtt);
        // 15 360 × 200 / 100, plus the 3 packets acknowledged.
        assert_eq!(cc.window(), 2 * CWIN_INITIAL + 3 * u64::from(MD));
        assert_eq!(cc.pacing(), Pacing::Window);
        assert!(cc.in_slow_start() && cc.ssthresh() == u64::MAX);
        // Held back by the pacer rather than the window: acknowledged bytes
        // do not grow the window (picoquic_cc_slow_start_increase).
        let w = cc.window();
        cc.set_window_blocked(false);
        cc.on_sent(at(400), 3, MD);
        cc.on_acked(at(600), 3, MD);
        cc.on_ack_frame(at(600), Some(ms(200)), Some(ms(200)));
        assert_eq!(cc.window(), w);
        cc.set_window_blocked(true);
        cc.on_sent(at(600), 4, MD);
        cc.on_acked(at(800), 4, MD);
        cc.on_ack_frame(at(800), Some(ms(200)), Some(ms(200)));
        assert_eq!(cc.window(), w + u64::from(MD));
    }

    #[test]
    fn a_short_rtt_path_keeps_bbr_startup_and_paces_at_the_high_gain() {
        let mut cc = Bbr::new(MD);
        let mut pn = 0;
        for r in 0..3 {
            pn = round(&mut cc, pn, 10, 100 * r, 20);
        }
        assert_eq!(cc.state(), BbrState::Startup);
        let Pacing::Rate { rate, .. } = cc.pacing() else { panic!("paced by rate: {:?}", cc.pacing()) };
        assert!((rate / cc.btl_bw() as f64 - HIGH_GAIN).abs() < 1e-9, "{rate} {}", cc.btl_bw());
    }

    /// Packets `pn0..pn0 + n` leave every `spacing` ms from `t0`; packet `i`
    /// is acknowledged (one ACK frame each) `rtt(i)` ms after it left.
    /// Events run in time order. Returns the next packet number and time.
    fn paced(cc: &mut Bbr, pn0: u64, n: u64, t0: u64, spacing: u64, rtt: impl Fn(u64) -> u64) -> (u64, u64) {
        cc.set_window_blocked(true);
        let mut events: Vec<(u64, bool, u64)> = Vec::new();
        for i in 0..n {
            let t = t0 + i * spacing;
            events.push((t, false, i));
            events.push((t + rtt(i), true, i));
        }
        events.sort_unstable();
        for (t, is_ack, i) in events {
            if is_ack {
                cc.on_acked(at(t), pn0 + i, MD);
                cc.on_ack_frame(at(t), Some(ms(rtt(i))), Some(ms(200)));
            } else {
                cc.on_sent(at(t), pn0 + i, MD);
            }
        }
        (pn0 + n, t0 + n * spacing)
    }

    #[test]
    fn the_rtt_rise_ends_the_long_rtt_startup_then_drain_then_probe_bw_at_the_path_rate() {
        let mut cc = Bbr::new(MD);
        let pn = round(&mut cc, 0, 3, 0, 200);
        // 1 Mb/s: a 1468-byte packet every 11.744 ms. First 20 packets at
        // the unloaded 200 ms, then a queue growing 10 ms per packet.
        let (pn, t) = paced(&mut cc, pn, 60, 200, 12, |i| if i < 20 { 200 } else { 200 + 10 * (i - 19) });
        let exit = cc.slow_start_exit.expect("the RTT rise ended start-up");
        // The window of 7 samples first lies wholly over 250 ms (a quarter
        // above the minimum) at packet 31 (packets 25..=31); seven such
        // windows in a row end at packet 37, acknowledged after 380 ms.
        assert_eq!(exit, at(200 + 37 * 12 + 380));
        assert!(matches!(cc.state(), BbrState::Drain | BbrState::ProbeBw), "{:?}", cc.state());
        // A steady clock at the path rate with no queue: ProbeBW, paced near
        // the delivery rate it measured.
        let _ = paced(&mut cc, pn, 300, t + 800, 12, |_| 200);
        assert_eq!(cc.state(), BbrState::ProbeBw);
        let Pacing::Rate { rate, quantum } = cc.pacing() else { panic!("{:?}", cc.pacing()) };
        let path = f64::from(MD) / 0.012;
        assert!(rate > 0.7 * path && rate < 1.3 * path, "{rate} vs {path}");
        let packets = if rate < PACING_RATE_LOW { 1.0 } else { 2.0 };
        assert_eq!(quantum, packets * f64::from(MD), "one packet under 150 kB/s, else two ({rate})");
        // Window: 2 × BDP + 3 quanta, the BDP being btl_bw × 200 ms.
        let bdp = cc.btl_bw() as f64 * 0.2;
        assert_eq!(cc.window(), (2.0 * bdp) as u64 + 3 * quantum as u64);
    }

    #[test]
    fn a_timer_loss_sets_the_minimum_window_once_and_a_spurious_one_restores_it() {
        let mut cc = Bbr::new(MD);
        let mut pn = round(&mut cc, 0, 3, 0, 200);
        pn = round(&mut cc, pn, 20, 200, 200);
        let before = cc.window();
        for i in 0..5 {
            cc.on_sent(at(400), pn + i, MD);
        }
        cc.on_packet_lost(at(900), pn, MD, LossKind::Timer, ms(200), pn + 5);
        assert_eq!((cc.window(), cc.congestion_events), (CWIN_MINIMUM, 1));
        assert!(!cc.in_slow_start(), "a counted loss ends start-up");
        // Losses of packets sent before the event change nothing more.
        cc.on_packet_lost(at(901), pn + 1, MD, LossKind::Timer, ms(200), pn + 5);
        assert_eq!(cc.congestion_events, 1);
        // The first one is acknowledged after all: the next ACK restores the window.
        cc.on_spurious_loss(pn);
        cc.on_acked(at(950), pn + 2, MD);
        cc.on_ack_frame(at(950), Some(ms(550)), Some(ms(200)));
        assert!(cc.window() >= before.min(cc.inflight(cc.cwnd_gain)), "{} vs {before}", cc.window());
    }

    #[test]
    fn isolated_packet_number_losses_are_ignored_a_run_halves_the_window() {
        let mut cc = Bbr::new(MD);
        let mut pn = round(&mut cc, 0, 3, 0, 200);
        pn = round(&mut cc, pn, 20, 200, 200);
        for i in 0..20 {
            cc.on_sent(at(400), pn + i, MD);
        }
        let w = cc.window();
        cc.on_packet_lost(at(500), pn, MD, LossKind::Repeat, ms(200), pn + 20);
        assert_eq!((cc.window(), cc.congestion_events), (w, 0), "1/16 < 20 %");
        let mut lost = pn + 1;
        while cc.congestion_events == 0 {
            cc.on_packet_lost(at(500), lost, MD, LossKind::Repeat, ms(200), pn + 20);
            lost += 1;
            assert!(lost < pn + 20, "a run passes 20 %");
        }
        assert_eq!(cc.window(), w / 2);
        assert_eq!(cc.bytes_in_flight(), (20 - (lost - pn)) * u64::from(MD));
    }
}
