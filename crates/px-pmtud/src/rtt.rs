//! Round-trip-time estimators that drive every timer in this crate.
//!
//! Two estimators sit behind one small trait, [`RttEstimator`], so that the
//! DPLPMTUD state machine, the F-PMTUD prober and the simulator's transport
//! can swap them without knowing which one they hold:
//!
//! * [`ClassicRtt`]: RFC 9002 §5, an EWMA updated on every RTT sample.
//! * [`OncePerRtt`]: the "update QUIC timers once per RTT" algorithm of
//!   Christian Huitema's blog (seed `quic-timers-once-per-rtt-blog.txt`),
//!   which aggregates all samples of one RTT epoch and updates the smoothed
//!   values once per epoch, with the three PTO variants the blog compares.
//!
//! Guarantees: no clock is read (samples carry their durations), no
//! arithmetic on a sample can panic (all duration arithmetic saturates), and
//! before the first sample both estimators report RFC 9002's initial values
//! (`kInitialRtt` = 333 ms, rttvar = kInitialRtt / 2).

use std::time::Duration;

/// RFC 9002 §6.2.2: "kInitialRtt ... The RECOMMENDED value is 333 milliseconds".
pub const INITIAL_RTT: Duration = Duration::from_millis(333);

/// RFC 9002 §6.1.2 / Appendix A.2: "kGranularity: Timer granularity. This is a
/// system-dependent value, and RFC 9002 RECOMMENDS a value of 1 ms."
pub const GRANULARITY: Duration = Duration::from_millis(1);

/// One RTT measurement, taken when an acknowledgement newly acknowledges the
/// largest packet number so far (RFC 9002 §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttSample {
    /// Time from sending the acknowledged packet to receiving its ACK.
    pub latest_rtt: Duration,
    /// ACK delay reported by the peer, already limited by the caller to the
    /// peer's `max_ack_delay` where RFC 9002 §5.3 asks for it. Zero when the
    /// protocol carries no ACK delay (e.g. F-PMTUD replies).
    pub ack_delay: Duration,
    /// Packet number of the acknowledged packet that produced the sample.
    /// [`OncePerRtt`] uses it to find the end of an epoch; [`ClassicRtt`]
    /// ignores it.
    pub acked_packet_number: u64,
}

/// Common interface of the RTT estimators.
///
/// Callers report every ack-eliciting packet sent ([`on_packet_sent`]) and
/// every RTT sample ([`on_ack`]); they read the smoothed values and the probe
/// timeout. The trait is object safe so that a state machine can hold or
/// borrow a `&dyn RttEstimator`.
///
/// [`on_packet_sent`]: RttEstimator::on_packet_sent
/// [`on_ack`]: RttEstimator::on_ack
pub trait RttEstimator {
    /// A packet with this number has been sent (numbers increase).
    fn on_packet_sent(&mut self, packet_number: u64);
    /// An RTT sample has been taken.
    fn on_ack(&mut self, sample: RttSample);
    /// The RFC 9002 §5 variables the estimator keeps (the getters below
    /// read them).
    fn state(&self) -> &RttState;
    /// `smoothed_rtt`; [`INITIAL_RTT`] (or the configured initial RTT) before any sample.
    fn smoothed_rtt(&self) -> Duration {
        self.state().smoothed
    }
    /// `rttvar`; half the initial RTT before any sample.
    fn rttvar(&self) -> Duration {
        self.state().var
    }
    /// Smallest RTT seen, `None` before the first sample.
    fn min_rtt(&self) -> Option<Duration> {
        self.state().min
    }
    /// Most recent raw sample, `None` before the first sample.
    fn latest_rtt(&self) -> Option<Duration> {
        self.state().latest
    }
    /// Probe timeout for a path whose peer delays ACKs by up to `max_ack_delay`
    /// (pass zero where no ACK delay applies). Without backoff: callers that
    /// re-arm after an expiry double it themselves (RFC 9002 §6.2.1).
    fn pto(&self, max_ack_delay: Duration) -> Duration;
}

/// What every estimator keeps (RFC 9002 §5): the smoothed RTT and its
/// variation, the smallest and the latest sample. The estimators differ in
/// when they update them, not in what they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RttState {
    /// `smoothed_rtt`.
    pub smoothed: Duration,
    /// `rttvar`.
    pub var: Duration,
    /// `min_rtt`, `None` before the first sample.
    pub min: Option<Duration>,
    /// `latest_rtt`, `None` before the first sample.
    pub latest: Option<Duration>,
}

impl RttState {
    /// Before any sample: RFC 9002 §6.2.2's `smoothed_rtt = kInitialRtt,
    /// rttvar = kInitialRtt / 2`.
    fn initial(initial_rtt: Duration) -> Self {
        Self { smoothed: initial_rtt, var: initial_rtt / 2, min: None, latest: None }
    }

    /// RFC 9002 §5.3 on the first sample: "min_rtt = latest_rtt;
    /// smoothed_rtt = latest_rtt; rttvar = latest_rtt / 2".
    fn first_sample(&mut self, latest: Duration) {
        self.min = Some(latest);
        self.smoothed = latest;
        self.var = latest / 2;
    }

    /// "rttvar = 3/4 * rttvar + 1/4 * rttvar_sample; smoothed_rtt = 7/8 *
    /// smoothed_rtt + 1/8 * sample".
    fn smooth(&mut self, var_sample: Duration, sample: Duration) {
        self.var = self.var * 3 / 4 + var_sample / 4;
        self.smoothed = self.smoothed * 7 / 8 + sample / 8;
    }
}

/// RFC 9002 §5.3: `latest` less the peer's ACK delay, unless that would take
/// it below `min` (then `latest` as is).
fn adjusted_rtt(latest: Duration, min: Duration, ack_delay: Duration) -> Duration {
    if latest >= min.saturating_add(ack_delay) { latest - ack_delay } else { latest }
}

/// RFC 9002 §6.2.1's PTO, `base + max(var_term, kGranularity) +
/// max_ack_delay`, saturating; the RFC's `base` is smoothed_rtt and its
/// `var_term` 4*rttvar, the [`PtoVariant`]s change them.
fn pto_from(base: Duration, var_term: Duration, max_ack_delay: Duration) -> Duration {
    base.saturating_add(var_term.max(GRANULARITY)).saturating_add(max_ack_delay)
}

/// RFC 9002 §5 estimator: every sample updates `smoothed_rtt` and `rttvar`.
#[derive(Debug, Clone)]
pub struct ClassicRtt {
    initial_rtt: Duration,
    s: RttState,
}

impl Default for ClassicRtt {
    fn default() -> Self {
        Self::new(INITIAL_RTT)
    }
}

impl ClassicRtt {
    /// An estimator that assumes `initial_rtt` until the first sample
    /// (RFC 9002 §6.2.2 allows a value from a previous connection).
    #[must_use]
    pub fn new(initial_rtt: Duration) -> Self {
        Self { initial_rtt, s: RttState::initial(initial_rtt) }
    }

    /// The initial RTT this estimator was built with.
    #[must_use]
    pub fn initial_rtt(&self) -> Duration {
        self.initial_rtt
    }
}

impl RttEstimator for ClassicRtt {
    fn on_packet_sent(&mut self, _packet_number: u64) {}

    fn on_ack(&mut self, sample: RttSample) {
        let latest = sample.latest_rtt;
        self.s.latest = Some(latest);
        let Some(min) = self.s.min else {
            self.s.first_sample(latest);
            return;
        };
        // RFC 9002 §5.2: min_rtt is taken over raw samples, without ACK delay.
        let min = min.min(latest);
        self.s.min = Some(min);
        // RFC 9002 §5.3: "if (latest_rtt >= min_rtt + ack_delay):
        //   adjusted_rtt = latest_rtt - ack_delay" — never below min_rtt.
        let adjusted = adjusted_rtt(latest, min, sample.ack_delay);
        // "rttvar_sample = abs(smoothed_rtt - adjusted_rtt)", then the
        // smoothing with adjusted_rtt.
        let var_sample = self.s.smoothed.abs_diff(adjusted);
        self.s.smooth(var_sample, adjusted);
    }

    fn state(&self) -> &RttState {
        &self.s
    }

    fn pto(&self, max_ack_delay: Duration) -> Duration {
        // RFC 9002 §6.2.1: "PTO = smoothed_rtt + max(4*rttvar, kGranularity)
        // + max_ack_delay".
        pto_from(self.s.smoothed, self.s.var.saturating_mul(4), max_ack_delay)
    }
}

/// How [`OncePerRtt`] turns its smoothed values into a probe timeout: the
/// three "once per RTT" rows of the blog's Table 1 (the fourth row,
/// "Classic", is [`ClassicRtt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtoVariant {
    /// "Once 4V, in which the retransmission timer is computed as specified
    /// in RFC 9002, adding four times 'RTT_VAR' and the ACK delay to the
    /// smoothed RTT value."
    FourVar,
    /// "Once 3V, which is the same as Once 4V, but only adding three times
    /// 'RTT_VAR' instead of four."
    ThreeVar,
    /// "Once MaxRTT, in which the retransmission timer is set to the MaxRTT
    /// plus RTT_VAR plus the ACK delay." MaxRTT is the *maximum observed
    /// RTT* of the connection: the blog explains the variant's slow recovery
    /// by "the maximum observed RTT happens at the end of the start-up,
    /// before stabilizing to lower values. The retransmission timer set from
    /// Max RTT is too large" — a maximum that outlives the epoch it was seen
    /// in. Before the first sample, the smoothed (initial) RTT stands in.
    MaxRtt,
}

impl PtoVariant {
    /// The label the blog's Table 1 uses for this variant.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            PtoVariant::FourVar => "Once 4V",
            PtoVariant::ThreeVar => "Once 3V",
            PtoVariant::MaxRtt => "Once MaxRTT",
        }
    }
}

/// Per-epoch statistics ("rtt_epoch_*" in the blog).
#[derive(Debug, Clone, Copy)]
struct Epoch {
    /// "rtt_epoch_pn = last_packet_number_sent + 1"
    first_pn: u64,
    nb_samples: u32,
    sum: Duration,
    max: Duration,
    min: Duration,
}

impl Epoch {
    fn starting_at(first_pn: u64) -> Self {
        // "rtt_epoch_sample_max = 0, rtt_epoch_sample_min = UINT64_MAX"
        Self { first_pn, nb_samples: 0, sum: Duration::ZERO, max: Duration::ZERO, min: Duration::MAX }
    }
}

/// The "once per RTT" estimator (seed `quic-timers-once-per-rtt-blog.txt`).
///
/// The blog's algorithm, step by step, as implemented here:
///
/// 1. "Initialize smoothed_rtt and rttvar as specified in RFC 9002.
///    smoothed_rtt = kInitialRtt rttvar = kInitialRtt / 2"
/// 2. "Remember the packet number of the first packet sent in an RTT
///    measurement epoch ... rtt_epoch_pn = last_packet_number_sent + 1"
/// 3. On the first sample: "smoothed_rtt = latest_rtt rttvar = latest_rtt / 2
///    min_rtt = latest_rtt". Otherwise: "adjusted_rtt = latest_rtt if
///    (latest_rtt >= min_rtt + ack_delay): adjusted_rtt = latest_rtt -
///    ack_delay", and the sample joins the epoch's count, sum, max and min;
///    "min_rtt = min(min_rtt, adjusted_rtt)".
/// 4. "If the acknowledged packet number is greater than the first packet
///    number sent in the epoch, update the RTT variables":
///    "rttvar_sample = max(abs(rtt_epoch_sample_max - smoothed_rtt),
///    abs(rtt_epoch_sample_min - smoothed_rtt)); rttvar = 3/4 * rttvar + 1/4 *
///    rttvar_sample; rtt_epoch_estimate = rtt_epoch_sum_samples /
///    rtt_epoch_nb_samples; smoothed_rtt = 7/8 * smoothed_rtt + 1/8 *
///    rtt_epoch_estimate", then "reinitialize the per-epoch variables".
///
/// Choices where the blog is silent or loose, each deliberate:
/// * The end-of-epoch test is the blog's strict "greater than". (Issue 5
///   paraphrases it as "the first packet sent in the epoch is acknowledged";
///   the strict form cannot close the empty epoch that the very first ACK,
///   of packet `rtt_epoch_pn` itself, would otherwise close.) An epoch with no
///   samples is never closed: its mean is undefined.
/// * The PTO keeps RFC 9002's `kGranularity` floor on the variance term, so a
///   perfectly constant RTT (common in simulation) cannot produce a timer that
///   fires exactly when the ACK is due.
#[derive(Debug, Clone)]
pub struct OncePerRtt {
    variant: PtoVariant,
    s: RttState,
    last_sent: Option<u64>,
    epoch: Epoch,
    /// Largest RTT sample seen on the connection (for [`PtoVariant::MaxRtt`]).
    max: Option<Duration>,
    epochs_completed: u64,
}

impl OncePerRtt {
    /// A once-per-RTT estimator with RFC 9002's initial RTT.
    #[must_use]
    pub fn new(variant: PtoVariant) -> Self {
        Self::with_initial_rtt(variant, INITIAL_RTT)
    }

    /// A once-per-RTT estimator that assumes `initial_rtt` until the first sample.
    #[must_use]
    pub fn with_initial_rtt(variant: PtoVariant, initial_rtt: Duration) -> Self {
        Self {
            variant,
            s: RttState::initial(initial_rtt),
            last_sent: None,
            epoch: Epoch::starting_at(0),
            max: None,
            epochs_completed: 0,
        }
    }

    /// The PTO variant in use.
    #[must_use]
    pub fn variant(&self) -> PtoVariant {
        self.variant
    }

    /// Number of epochs closed so far (each closed epoch is one update).
    #[must_use]
    pub fn epochs_completed(&self) -> u64 {
        self.epochs_completed
    }

    /// Largest RTT sample seen so far (ACK delay removed as for the epoch
    /// statistics), `None` before the first sample. [`PtoVariant::MaxRtt`]
    /// builds its PTO on it.
    #[must_use]
    pub fn max_rtt(&self) -> Option<Duration> {
        self.max
    }

    /// Packet number that started the current epoch.
    #[must_use]
    pub fn epoch_first_packet(&self) -> u64 {
        self.epoch.first_pn
    }

    fn next_epoch_start(&self) -> u64 {
        self.last_sent.map_or(0, |pn| pn.saturating_add(1))
    }

    fn close_epoch(&mut self) {
        let e = self.epoch;
        let var_sample = e.max.abs_diff(self.s.smoothed).max(e.min.abs_diff(self.s.smoothed));
        self.s.smooth(var_sample, e.sum / e.nb_samples);
        self.epochs_completed += 1;
        self.epoch = Epoch::starting_at(self.next_epoch_start());
    }
}

impl RttEstimator for OncePerRtt {
    fn on_packet_sent(&mut self, packet_number: u64) {
        self.last_sent = Some(self.last_sent.map_or(packet_number, |pn| pn.max(packet_number)));
    }

    fn on_ack(&mut self, sample: RttSample) {
        let latest = sample.latest_rtt;
        self.s.latest = Some(latest);
        match self.s.min {
            None => {
                self.s.first_sample(latest);
                self.max = Some(latest);
            }
            Some(min) => {
                let adjusted = adjusted_rtt(latest, min, sample.ack_delay);
                let e = &mut self.epoch;
                e.nb_samples = e.nb_samples.saturating_add(1);
                e.sum = e.sum.saturating_add(adjusted);
                e.max = e.max.max(adjusted);
                e.min = e.min.min(adjusted);
                self.s.min = Some(min.min(adjusted));
                // The ACK delay is removed here as for the epoch statistics:
                // the PTO adds max_ack_delay itself, so counting it in MaxRTT
                // too would add it twice.
                self.max = Some(self.max.map_or(adjusted, |m| m.max(adjusted)));
            }
        }
        if sample.acked_packet_number > self.epoch.first_pn && self.epoch.nb_samples > 0 {
            self.close_epoch();
        }
    }

    fn state(&self) -> &RttState {
        &self.s
    }

    fn pto(&self, max_ack_delay: Duration) -> Duration {
        let RttState { smoothed, var, .. } = self.s;
        let (base, var_term) = match self.variant {
            PtoVariant::FourVar => (smoothed, var.saturating_mul(4)),
            PtoVariant::ThreeVar => (smoothed, var.saturating_mul(3)),
            PtoVariant::MaxRtt => (self.max.unwrap_or(smoothed), var),
        };
        pto_from(base, var_term, max_ack_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn sample(rtt: u64, delay: u64, pn: u64) -> RttSample {
        RttSample { latest_rtt: ms(rtt), ack_delay: ms(delay), acked_packet_number: pn }
    }

    #[test]
    fn classic_initial_values_and_pto() {
        let r = ClassicRtt::default();
        assert_eq!(r.smoothed_rtt(), ms(333));
        assert_eq!(r.rttvar(), Duration::from_micros(166_500));
        assert_eq!(r.min_rtt(), None);
        // 333 + 4 * 166.5 + 25 = 1024 ms
        assert_eq!(r.pto(ms(25)), ms(1024));
    }

    #[test]
    fn classic_hand_computed_sequence() {
        let mut r = ClassicRtt::default();
        r.on_ack(sample(100, 0, 0));
        assert_eq!((r.smoothed_rtt(), r.rttvar()), (ms(100), ms(50)));
        assert_eq!(r.pto(ms(0)), ms(300));
        // 180 ms with 20 ms ack delay: 180 >= 100 + 20, adjusted = 160.
        // rttvar = 3/4*50 + 1/4*|100-160| = 37.5 + 15 = 52.5
        // srtt   = 7/8*100 + 1/8*160 = 87.5 + 20 = 107.5
        r.on_ack(sample(180, 20, 1));
        assert_eq!(r.rttvar(), Duration::from_micros(52_500));
        assert_eq!(r.smoothed_rtt(), Duration::from_micros(107_500));
        assert_eq!(r.min_rtt(), Some(ms(100)));
        // 110 ms with 30 ms ack delay: 110 < 100 + 30, so the delay is not
        // subtracted (would go below min_rtt). adjusted = 110.
        // rttvar = 3/4*52.5 + 1/4*2.5 = 39.375 + 0.625 = 40
        // srtt   = 7/8*107.5 + 1/8*110 = 94.0625 + 13.75 = 107.8125
        r.on_ack(sample(110, 30, 2));
        assert_eq!(r.rttvar(), ms(40));
        assert_eq!(r.smoothed_rtt(), Duration::from_nanos(107_812_500));
        // PTO = 107.8125 + 4*40 + 25
        assert_eq!(r.pto(ms(25)), Duration::from_nanos(292_812_500));
        // A smaller raw sample lowers min_rtt.
        r.on_ack(sample(90, 0, 3));
        assert_eq!(r.min_rtt(), Some(ms(90)));
        assert_eq!(r.latest_rtt(), Some(ms(90)));
    }

    #[test]
    fn classic_pto_granularity_floor() {
        let mut r = ClassicRtt::default();
        r.on_ack(sample(10, 0, 0));
        for pn in 1..200 {
            r.on_ack(sample(10, 0, pn));
        }
        // rttvar has decayed to (almost) zero: the floor of 1 ms applies.
        assert!(r.rttvar() < Duration::from_micros(1));
        assert_eq!(r.pto(Duration::ZERO), ms(10) + GRANULARITY);
    }

    #[test]
    fn once_first_sample_initialises_like_rfc() {
        let mut r = OncePerRtt::new(PtoVariant::FourVar);
        assert_eq!(r.smoothed_rtt(), ms(333));
        r.on_packet_sent(0);
        r.on_ack(sample(200, 0, 0));
        assert_eq!((r.smoothed_rtt(), r.rttvar()), (ms(200), ms(100)));
        // The ACK of the epoch's first packet alone closes nothing.
        assert_eq!(r.epochs_completed(), 0);
        assert_eq!(r.pto(ms(0)), ms(600));
    }

    /// Hand-computed: one epoch of three samples (each with a different ACK
    /// delay), closed by the ACK of a packet after the epoch's first packet.
    #[test]
    fn once_epoch_hand_computed() {
        let mut r = OncePerRtt::new(PtoVariant::ThreeVar);
        r.on_packet_sent(0);
        r.on_ack(sample(100, 0, 0)); // srtt 100, rttvar 50, min 100
        // Epoch began at init with first_pn = 0; restart it deliberately by
        // checking the state after sending more packets.
        for pn in 1..=4 {
            r.on_packet_sent(pn);
        }
        assert_eq!(r.epoch_first_packet(), 0);
        // pn 1: 140 ms, delay 10 -> 130 (adjusted). Closes the epoch at once
        // (1 > 0) with one sample: max = min = 130.
        // rttvar = 3/4*50 + 1/4*30 = 45; srtt = 7/8*100 + 1/8*130 = 103.75
        r.on_ack(sample(140, 10, 1));
        assert_eq!(r.epochs_completed(), 1);
        assert_eq!(r.rttvar(), ms(45));
        assert_eq!(r.smoothed_rtt(), Duration::from_micros(103_750));
        // New epoch starts at last sent + 1 = 5.
        assert_eq!(r.epoch_first_packet(), 5);
        // Samples for pn 2..4 accumulate without changing srtt/rttvar.
        r.on_ack(sample(120, 0, 2)); // adjusted 120
        r.on_ack(sample(160, 20, 3)); // 160 >= 100+20 -> 140
        r.on_ack(sample(105, 10, 4)); // 105 < 100+10 -> 105 (no subtraction)
        assert_eq!(r.epochs_completed(), 1);
        assert_eq!(r.smoothed_rtt(), Duration::from_micros(103_750));
        assert_eq!(r.rttvar(), ms(45));
        r.on_packet_sent(5);
        r.on_packet_sent(6);
        // ACK of pn 5 (== epoch first packet) is not "greater than": still open.
        r.on_ack(sample(115, 0, 5)); // adjusted 115
        assert_eq!(r.epochs_completed(), 1);
        // ACK of pn 6 closes it. Samples: 120, 140, 105, 115, 125 (pn 6).
        // sum 605, n 5, mean 121; max 140, min 105.
        // rttvar_sample = max(|140-103.75|, |105-103.75|) = 36.25
        // rttvar = 3/4*45 + 1/4*36.25 = 33.75 + 9.0625 = 42.8125
        // srtt = 7/8*103.75 + 1/8*121 = 90.78125 + 15.125 = 105.90625
        r.on_ack(sample(125, 0, 6));
        assert_eq!(r.epochs_completed(), 2);
        assert_eq!(r.rttvar(), Duration::from_nanos(42_812_500));
        assert_eq!(r.smoothed_rtt(), Duration::from_nanos(105_906_250));
        assert_eq!(r.min_rtt(), Some(ms(100)));
        // 3V: 105.90625 + 3*42.8125 + 25 = 259.34375
        assert_eq!(r.pto(ms(25)), Duration::from_nanos(259_343_750));
    }

    #[test]
    fn once_variants_differ_only_in_pto() {
        let feed = |r: &mut OncePerRtt| {
            for pn in 0..=3 {
                r.on_packet_sent(pn);
            }
            r.on_ack(sample(100, 0, 0));
            r.on_ack(sample(200, 0, 1)); // closes epoch 0: max 200
        };
        let mut four = OncePerRtt::new(PtoVariant::FourVar);
        let mut three = OncePerRtt::new(PtoVariant::ThreeVar);
        let mut max = OncePerRtt::new(PtoVariant::MaxRtt);
        feed(&mut four);
        feed(&mut three);
        feed(&mut max);
        // rttvar = 3/4*50 + 1/4*100 = 62.5; srtt = 87.5 + 25 = 112.5
        for r in [&four, &three, &max] {
            assert_eq!(r.rttvar(), Duration::from_micros(62_500));
            assert_eq!(r.smoothed_rtt(), Duration::from_micros(112_500));
        }
        assert_eq!(four.pto(ms(0)), ms(362) + Duration::from_micros(500));
        assert_eq!(three.pto(ms(0)), ms(300));
        // MaxRTT: the largest sample so far (200) + 62.5
        assert_eq!(max.pto(ms(0)), ms(262) + Duration::from_micros(500));
        assert_eq!(PtoVariant::MaxRtt.label(), "Once MaxRTT");
    }

    /// Hand-computed from the blog's definition: MaxRTT is the maximum RTT
    /// observed on the connection, so a peak at the end of start-up keeps the
    /// timer large after the RTT has come back down.
    #[test]
    fn once_max_rtt_remembers_the_connection_maximum() {
        let mut r = OncePerRtt::new(PtoVariant::MaxRtt);
        // Before any sample: initial srtt 333 + rttvar 166.5 = 499.5 ms.
        assert_eq!(r.max_rtt(), None);
        assert_eq!(r.pto(ms(0)), Duration::from_micros(499_500));
        r.on_packet_sent(0);
        r.on_packet_sent(1);
        r.on_ack(sample(100, 0, 0)); // first: srtt 100, rttvar 50, max 100
        assert_eq!(r.max_rtt(), Some(ms(100)));
        // pn 1: 300 ms (the queue peak) closes the epoch started at pn 0.
        // rttvar_sample = |300 - 100| = 200; rttvar = 37.5 + 50 = 87.5
        // srtt = 87.5 + 37.5 = 125
        r.on_ack(sample(300, 0, 1));
        assert_eq!(r.epochs_completed(), 1);
        assert_eq!(r.rttvar(), Duration::from_micros(87_500));
        assert_eq!(r.smoothed_rtt(), ms(125));
        assert_eq!(r.max_rtt(), Some(ms(300)));
        // PTO = 300 + 87.5 = 387.5
        assert_eq!(r.pto(ms(0)), Duration::from_micros(387_500));
        // The RTT settles at 100 ms: the next epoch (first pn 2) sees 100, 100.
        r.on_packet_sent(2);
        r.on_packet_sent(3);
        r.on_ack(sample(100, 0, 2));
        r.on_ack(sample(100, 0, 3));
        // rttvar_sample = |100 - 125| = 25; rttvar = 65.625 + 6.25 = 71.875
        // srtt = 109.375 + 12.5 = 121.875
        assert_eq!(r.epochs_completed(), 2);
        assert_eq!(r.rttvar(), Duration::from_micros(71_875));
        assert_eq!(r.smoothed_rtt(), Duration::from_micros(121_875));
        // MaxRTT still 300: PTO = 300 + 71.875 + 25 = 396.875 ms, where the
        // last epoch's maximum (100) would have given 196.875 ms and 4V gives
        // 121.875 + 4 * 71.875 + 25 = 434.375 ms.
        assert_eq!(r.max_rtt(), Some(ms(300)));
        assert_eq!(r.pto(ms(25)), Duration::from_micros(396_875));
        // ACK delay is removed before the maximum is taken: 420 ms with 25 ms
        // of delay counts as 395.
        r.on_ack(sample(420, 25, 3));
        assert_eq!(r.max_rtt(), Some(ms(395)));
    }

    #[test]
    fn once_min_rtt_tracks_adjusted_samples() {
        // Unlike RFC 9002, the blog takes min_rtt over *adjusted* samples.
        let mut r = OncePerRtt::new(PtoVariant::FourVar);
        r.on_ack(sample(100, 0, 0));
        r.on_ack(sample(150, 60, 0)); // 150 < 100 + 60: adjusted stays 150
        assert_eq!(r.min_rtt(), Some(ms(100)));
        r.on_ack(sample(195, 100, 0)); // 195 >= 100 + 100? no: 195
        assert_eq!(r.min_rtt(), Some(ms(100)));
        r.on_ack(sample(290, 200, 0)); // 290 >= 100 + 200? no: 290
        r.on_ack(sample(300, 205, 0)); // 300 >= 305? no
        assert_eq!(r.min_rtt(), Some(ms(100)));
        r.on_ack(sample(300, 200, 0)); // 300 >= 300: adjusted 100
        assert_eq!(r.min_rtt(), Some(ms(100)));
        r.on_ack(sample(90, 0, 0));
        assert_eq!(r.min_rtt(), Some(ms(90)));
        let mut c = ClassicRtt::default();
        c.on_ack(sample(100, 0, 0));
        c.on_ack(sample(300, 200, 0));
        // Classic keeps the raw minimum.
        assert_eq!(c.min_rtt(), Some(ms(100)));
    }

    #[test]
    fn trait_objects_are_usable() {
        let estimators: Vec<Box<dyn RttEstimator>> =
            vec![Box::new(ClassicRtt::default()), Box::new(OncePerRtt::new(PtoVariant::FourVar))];
        for e in &estimators {
            assert_eq!(e.pto(Duration::ZERO), ms(999));
        }
    }
}
