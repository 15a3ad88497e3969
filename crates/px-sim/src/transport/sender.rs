//! The bulk sender: packet numbers, loss detection and probe timeout as
//! RFC 9002 §6 specifies them, NewReno, and a PMTU controller choosing the
//! packet size; or, with [`SenderModel::Picoquic`] and [`SenderModel::Bbr`],
//! picoquic's sender (see `picoquic` below) with CUBIC or BBR.
//!
//! Guarantees: every stream byte is (re)sent until acknowledged; a byte
//! range is retransmitted only after the packet carrying it was declared
//! lost (or as a PTO probe), and never once it is known acknowledged;
//! the window limits in-flight bytes except for PTO probes (RFC 9002
//! §7.5). The RTT estimator is `px-pmtud`'s, behind its trait, so the same
//! sender runs with the classic or any once-per-RTT estimator.

use std::collections::VecDeque;
use std::time::Duration;

use px_pmtud::rtt::{GRANULARITY, RttEstimator, RttSample};
use serde::Serialize;

use super::TransportConfig;
use super::congestion::{Congestion, LostPacket, SenderModel};
use super::pmtu::PmtuController;
use super::ranges::RangeSet;
use crate::net::Endpoint;
use crate::packet::{AckRanges, Packet, Payload, QuotedPayload};
use crate::time::SimTime;

/// RFC 9002 §6.1.1: "kPacketThreshold ... RECOMMENDED initial value ... is 3".
const PACKET_THRESHOLD: u64 = 3;
/// RFC 9002 §7.6.1: "kPersistentCongestionThreshold ... 3".
const PERSISTENT_CONGESTION_THRESHOLD: u32 = 3;
/// Largest PTO backoff exponent (keeps the shift in range).
const MAX_PTO_BACKOFF: u32 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Outstanding,
    Acked,
    Lost,
}

#[derive(Clone, Copy, Debug)]
struct SentPacket {
    time_sent: SimTime,
    size: u32,
    offset: u64,
    len: u32,
    probe: bool,
    state: State,
}

/// Counters of one transfer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SenderStats {
    /// Packets sent (data, retransmissions, probes).
    pub packets_sent: u64,
    /// IP bytes sent.
    pub bytes_sent: u64,
    /// Data packets declared lost.
    pub packets_lost: u64,
    /// DPLPMTUD probes sent.
    pub probes_sent: u64,
    /// DPLPMTUD probes declared lost.
    pub probes_lost: u64,
    /// Probe timeouts that fired.
    pub ptos: u64,
    /// Congestion events (window reductions).
    pub congestion_events: u64,
    /// Persistent-congestion collapses.
    pub persistent_congestion: u64,
    /// When every stream byte was acknowledged.
    pub completed_at: Option<SimTime>,
    /// When slow start ended.
    pub slow_start_exit: Option<SimTime>,
    /// smoothed RTT when slow start ended.
    pub srtt_at_slow_start_exit: Option<Duration>,
    /// When the handshake round trip ended and data could flow (picoquic
    /// model; the RFC 9002 model sends data from time zero).
    pub handshake_done: Option<SimTime>,
}

/// Sender state at the end of one round trip (an ACK of a packet sent after
/// the previous round ended).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RoundSample {
    /// Time the round ended, seconds.
    pub t_s: f64,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Stream bytes acknowledged so far.
    pub acked_bytes: u64,
    /// PLPMTU in force.
    pub plpmtu: u32,
    /// smoothed RTT, seconds.
    pub srtt_s: f64,
}

/// The sending endpoint of a bulk transfer.
pub struct BulkSender {
    cfg: TransportConfig,
    rtt: Box<dyn RttEstimator>,
    pmtu: Box<dyn PmtuController>,
    cc: Congestion,
    /// picoquic's leaky-bucket pacer (unused by the RFC 9002 model).
    pacer: picoquic::Pacer,
    /// When the largest acknowledged packet was sent, and when its ACK came.
    largest_acked_sent: SimTime,
    largest_acked_at: SimTime,
    /// Send time of the newest timer-declared loss event (picoquic counts
    /// consecutive timer events to back its timer off).
    last_timer_event: Option<SimTime>,
    next_pn: u64,
    /// Packets from `sent_base` on; earlier ones are settled.
    sent: VecDeque<SentPacket>,
    sent_base: u64,
    outstanding: u64,
    next_offset: u64,
    retransmit: VecDeque<(u64, u32)>,
    /// picoquic model: lost ranges to repeat at once, with the packet size
    /// in force when each loss was found.
    repeat_now: VecDeque<(u64, u32, u32)>,
    acked: RangeSet,
    largest_acked: Option<u64>,
    loss_time: Option<SimTime>,
    last_ack_eliciting: Option<SimTime>,
    first_rtt_sample: Option<SimTime>,
    pto_count: u32,
    pto_probes: u8,
    round_end: u64,
    rounds: Vec<RoundSample>,
    stats: SenderStats,
}

impl BulkSender {
    /// A sender of `cfg.total_bytes` bytes using `rtt` for its timers and
    /// `pmtu` for its packet size.
    #[must_use]
    pub fn new(cfg: TransportConfig, rtt: Box<dyn RttEstimator>, pmtu: Box<dyn PmtuController>) -> Self {
        let cc = Congestion::for_model(cfg.model, pmtu.plpmtu());
        BulkSender {
            cfg,
            rtt,
            pmtu,
            cc,
            pacer: picoquic::Pacer::default(),
            largest_acked_sent: SimTime::ZERO,
            largest_acked_at: SimTime::ZERO,
            last_timer_event: None,
            next_pn: 0,
            sent: VecDeque::with_capacity(256),
            sent_base: 0,
            outstanding: 0,
            next_offset: 0,
            retransmit: VecDeque::new(),
            repeat_now: VecDeque::new(),
            acked: RangeSet::new(),
            largest_acked: None,
            loss_time: None,
            last_ack_eliciting: None,
            first_rtt_sample: None,
            pto_count: 0,
            pto_probes: 0,
            round_end: 0,
            rounds: Vec::new(),
            stats: SenderStats::default(),
        }
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// Window, PLPMTU and progress at the end of each round trip.
    #[must_use]
    pub fn rounds(&self) -> &[RoundSample] {
        &self.rounds
    }

    /// The RTT estimator.
    #[must_use]
    pub fn rtt(&self) -> &dyn RttEstimator {
        self.rtt.as_ref()
    }

    /// The congestion controller.
    #[must_use]
    pub fn congestion(&self) -> &Congestion {
        &self.cc
    }

    /// The PMTU controller.
    #[must_use]
    pub fn pmtu(&self) -> &dyn PmtuController {
        self.pmtu.as_ref()
    }

    /// True once every byte is acknowledged.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.stats.completed_at.is_some()
    }

    fn capacity(&self, size: u32) -> u32 {
        size.saturating_sub(self.cfg.header_bytes).max(1)
    }

    /// Next stream range to send in a packet of `size` bytes: lost ranges
    /// first (minus what is known acked), then new data.
    fn next_chunk(&mut self, size: u32) -> Option<(u64, u32)> {
        let cap = self.capacity(size);
        while let Some((off, len)) = self.retransmit.pop_front() {
            let end = off + u64::from(len);
            // Skip the part already acknowledged (a spurious loss).
            let start = self.acked.first_gap_from(off);
            if start >= end {
                continue;
            }
            // Stop at the next acknowledged byte, so none is resent.
            let stop_here = end.min(start + u64::from(cap)).min(self.acked.next_start_after(start).unwrap_or(u64::MAX));
            if stop_here < end {
                self.retransmit.push_front((stop_here, (end - stop_here) as u32));
            }
            return Some((start, (stop_here - start) as u32));
        }
        if self.next_offset < self.cfg.total_bytes {
            let len = (self.cfg.total_bytes - self.next_offset).min(u64::from(cap)) as u32;
            let off = self.next_offset;
            self.next_offset += u64::from(len);
            return Some((off, len));
        }
        None
    }

    fn record_sent(&mut self, now: SimTime, pkt: SentPacket) -> u64 {
        let pn = self.next_pn;
        self.next_pn += 1;
        self.sent.push_back(pkt);
        self.outstanding += 1;
        self.cc.on_sent(now, pn, pkt.size);
        self.rtt.on_packet_sent(pn);
        self.last_ack_eliciting = Some(now);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += u64::from(pkt.size);
        pn
    }

    fn data_packet(&mut self, now: SimTime, off: u64, len: u32) -> Packet {
        let size = len + self.cfg.header_bytes;
        let pn = self.record_sent(
            now,
            SentPacket { time_sent: now, size, offset: off, len, probe: false, state: State::Outstanding },
        );
        Packet::new(size, true, Payload::Data { pn, offset: off, len })
    }

    fn padding_packet(&mut self, now: SimTime, size: u32, probe: bool) -> Packet {
        let pn = self
            .record_sent(now, SentPacket { time_sent: now, size, offset: 0, len: 0, probe, state: State::Outstanding });
        Packet::new(size, true, Payload::Padding { pn })
    }

    /// RFC 9002 §6.2.4: a PTO probe carries new data if there is any,
    /// otherwise retransmits the oldest unacknowledged data.
    fn pto_probe(&mut self, now: SimTime, size: u32) -> Packet {
        if self.retransmit.is_empty() && self.next_offset >= self.cfg.total_bytes {
            let oldest =
                self.sent.iter().find(|p| p.state == State::Outstanding && p.len > 0).map(|p| (p.offset, p.len));
            if let Some(r) = oldest {
                self.retransmit.push_front(r);
            }
        }
        match self.next_chunk(size) {
            Some((off, len)) => self.data_packet(now, off, len),
            None => self.padding_packet(now, self.cfg.header_bytes + 1, false),
        }
    }

    fn pto_duration(&self) -> Duration {
        self.rtt.pto(self.cfg.max_ack_delay)
    }

    /// RFC 9002 §A.8 SetLossDetectionTimer (picoquic: its own deadlines).
    fn loss_timer(&self) -> Option<SimTime> {
        if self.cfg.model.is_picoquic() {
            return self.picoquic_loss_deadline();
        }
        if let Some(t) = self.loss_time {
            return Some(t);
        }
        if self.outstanding == 0 {
            return None;
        }
        let backoff = 1u32 << self.pto_count.min(MAX_PTO_BACKOFF);
        self.last_ack_eliciting.map(|t| t + self.pto_duration().saturating_mul(backoff))
    }

    /// RFC 9002 §A.7 OnAckReceived.
    fn on_ack(&mut self, now: SimTime, ack_delay: Duration, ranges: &AckRanges) {
        let Some(largest) = ranges.largest() else { return };
        if largest >= self.next_pn {
            return; // acknowledges a packet never sent: ignore the frame
        }
        let mut largest_newly_acked: Option<(u64, SimTime)> = None;
        for &(lo, hi) in ranges.as_slice() {
            let lo = lo.max(self.sent_base);
            if lo > hi {
                continue;
            }
            for pn in lo..=hi {
                let idx = (pn - self.sent_base) as usize;
                let Some(p) = self.sent.get_mut(idx) else { continue };
                if p.state == State::Acked {
                    continue;
                }
                let was_lost = p.state == State::Lost;
                p.state = State::Acked;
                let p = *p;
                if largest_newly_acked.is_none_or(|(l, _)| pn > l) {
                    largest_newly_acked = Some((pn, p.time_sent));
                }
                if was_lost {
                    // Acked after being declared lost: already out of flight.
                    self.cc.on_spurious_loss(pn);
                    self.mark_acked_bytes(now, &p);
                    continue;
                }
                self.outstanding -= 1;
                self.cc.on_acked(now, pn, p.time_sent, p.size);
                if p.probe {
                    self.pmtu.on_probe_acked(now, p.size);
                } else {
                    self.pmtu.on_packet_acked(now, p.size);
                }
                self.mark_acked_bytes(now, &p);
                if pn >= self.round_end {
                    self.end_round(now);
                }
            }
        }
        let Some((newest, sent_at)) = largest_newly_acked else { return };
        if self.largest_acked.is_none_or(|l| newest > l) {
            self.largest_acked_sent = sent_at;
            self.largest_acked_at = now;
        }
        self.largest_acked = Some(self.largest_acked.map_or(largest, |l| l.max(largest)));
        // RFC 9002 §5.1: a sample only when the largest acked is newly acked.
        let sample = (newest == largest).then(|| now - sent_at);
        if let Some(latest_rtt) = sample {
            let ack_delay =
                if self.first_rtt_sample.is_some() { ack_delay.min(self.cfg.max_ack_delay) } else { ack_delay };
            self.rtt.on_ack(RttSample { latest_rtt, ack_delay, acked_packet_number: largest });
            self.first_rtt_sample.get_or_insert(now);
            self.cc.on_rtt_sample(now, latest_rtt);
        }
        self.cc.on_ack_frame(now, sample, self.rtt.min_rtt());
        self.detect_lost(now);
        self.pto_count = 0;
        self.settle_front();
    }

    fn mark_acked_bytes(&mut self, now: SimTime, p: &SentPacket) {
        if p.len == 0 {
            return;
        }
        self.acked.insert(p.offset, p.offset + u64::from(p.len));
        if self.stats.completed_at.is_none() && self.acked.prefix_end() >= self.cfg.total_bytes {
            self.stats.completed_at = Some(now);
        }
    }

    fn end_round(&mut self, now: SimTime) {
        self.round_end = self.next_pn;
        if self.cfg.record_rounds {
            self.rounds.push(RoundSample {
                t_s: now.as_secs_f64(),
                cwnd: self.cc.window(),
                acked_bytes: self.acked.prefix_end(),
                plpmtu: self.pmtu.plpmtu(),
                srtt_s: self.rtt.smoothed_rtt().as_secs_f64(),
            });
        }
    }

    fn settle_front(&mut self) {
        while self.sent.front().is_some_and(|p| p.state != State::Outstanding) {
            self.sent.pop_front();
            self.sent_base += 1;
        }
    }

    /// Declares lost what the model's rules say is lost.
    fn detect_lost(&mut self, now: SimTime) {
        match self.cfg.model {
            SenderModel::Rfc9002NewReno => self.detect_lost_rfc9002(now),
            SenderModel::Picoquic | SenderModel::Bbr => self.detect_lost_picoquic(now),
        }
    }

    /// Takes packet `i` (outstanding) out of flight as lost; true if it
    /// was a data packet (a lost PMTU probe is not congestion, RFC 9000 §14.4).
    fn mark_lost(&mut self, now: SimTime, i: usize) -> bool {
        let p = self.sent[i];
        self.sent[i].state = State::Lost;
        self.outstanding -= 1;
        if p.probe {
            self.stats.probes_lost += 1;
            self.cc.on_discarded(self.sent_base + i as u64, p.size);
            self.pmtu.on_probe_lost(now, p.size);
            return false;
        }
        self.stats.packets_lost += 1;
        let size_in_force = self.pmtu.plpmtu();
        self.pmtu.on_packet_lost(now, p.size);
        if p.len > 0 {
            match self.cfg.model {
                SenderModel::Rfc9002NewReno => self.retransmit.push_back((p.offset, p.len)),
                SenderModel::Picoquic | SenderModel::Bbr => self.repeat_now.push_back((p.offset, p.len, size_in_force)),
            }
        }
        true
    }

    /// Tells the controller about `lost` and records a slow-start exit.
    fn report_lost(&mut self, now: SimTime, lost: &[LostPacket]) {
        if !lost.is_empty() {
            let largest = self.largest_acked.unwrap_or(0);
            self.cc.on_lost(now, lost, self.next_pn, largest, self.rtt.smoothed_rtt());
        }
        self.note_congestion_state();
    }

    /// Records when (and at which smoothed RTT) slow start first ended,
    /// whether a loss or a delay signal ended it.
    fn note_congestion_state(&mut self) {
        if self.stats.slow_start_exit.is_none() {
            if let Some(at) = self.cc.slow_start_exit() {
                self.stats.slow_start_exit = Some(at);
                self.stats.srtt_at_slow_start_exit = Some(self.rtt.smoothed_rtt());
            }
        }
        self.stats.congestion_events = self.cc.congestion_events();
    }

    /// RFC 9002 §A.10 DetectAndRemoveLostPackets.
    fn detect_lost_rfc9002(&mut self, now: SimTime) {
        let Some(largest_acked) = self.largest_acked else { return };
        self.loss_time = None;
        let srtt = self.rtt.smoothed_rtt();
        let latest = self.rtt.latest_rtt().unwrap_or(srtt);
        // "loss_delay = kTimeThreshold * max(latest_rtt, smoothed_rtt)",
        // kTimeThreshold = 9/8, "at least kGranularity".
        let loss_delay = (latest.max(srtt) * 9 / 8).max(GRANULARITY);
        let pc_duration = self.pto_duration().saturating_mul(PERSISTENT_CONGESTION_THRESHOLD);

        let mut lost = Vec::new();
        // Persistent congestion: the longest run of lost packets with no
        // acknowledged packet between them (RFC 9002 §7.6.2).
        let mut run_start: Option<SimTime> = None;
        let mut persistent = false;
        for i in 0..self.sent.len() {
            let pn = self.sent_base + i as u64;
            if pn > largest_acked {
                break;
            }
            let p = self.sent[i];
            match p.state {
                State::Acked => {
                    run_start = None;
                    continue;
                }
                State::Lost => continue,
                State::Outstanding => {}
            }
            let by_time = p.time_sent + loss_delay <= now;
            let by_count = largest_acked >= pn + PACKET_THRESHOLD;
            if !(by_time || by_count) {
                let at = p.time_sent + loss_delay;
                self.loss_time = Some(self.loss_time.map_or(at, |t| t.min(at)));
                run_start = None;
                continue;
            }
            if !self.mark_lost(now, i) {
                continue;
            }
            lost.push(LostPacket { pn, size: p.size, sent: p.time_sent, by_timer: false });
            let start = *run_start.get_or_insert(p.time_sent);
            if self.first_rtt_sample.is_some_and(|f| f < start) && p.time_sent - start > pc_duration {
                persistent = true;
            }
        }
        self.report_lost(now, &lost);
        if persistent {
            self.stats.persistent_congestion += 1;
            self.cc.on_persistent_congestion();
        }
        self.settle_front();
    }

    /// RFC 9002 §A.9 OnLossDetectionTimeout.
    fn on_loss_timeout(&mut self, now: SimTime) {
        if self.cfg.model.is_picoquic() {
            // picoquic has no separate PTO probe here: its timer declares
            // the packets lost and they are sent again.
            self.detect_lost(now);
            return;
        }
        if self.loss_time.is_some() {
            self.detect_lost(now);
            return;
        }
        self.stats.ptos += 1;
        let largest = self.sent.iter().filter(|p| p.state == State::Outstanding).map(|p| p.size).max().unwrap_or(0);
        self.pmtu.on_pto(now, largest);
        self.pto_count += 1;
        // "send one or two ack-eliciting packets": two, as RFC 9002 §6.2.4 allows.
        self.pto_probes = 2;
    }
}

impl Endpoint for BulkSender {
    fn on_packet(&mut self, now: SimTime, pkt: &Packet) {
        match pkt.payload {
            Payload::Ack { ack_delay_us, ranges, .. } => self.on_ack(now, Duration::from_micros(ack_delay_us), &ranges),
            Payload::TooBig { mtu, orig: QuotedPayload::Transport(pn), .. } => {
                // RFC 8899 §4.6.1: use a PTB only if it quotes a packet we
                // sent and have not yet seen acknowledged.
                let outstanding = pn
                    .checked_sub(self.sent_base)
                    .and_then(|i| self.sent.get(i as usize))
                    .is_some_and(|p| p.state == State::Outstanding);
                if outstanding {
                    self.pmtu.on_packet_too_big(now, mtu);
                }
            }
            _ => {}
        }
    }

    fn on_timeout(&mut self, now: SimTime) {
        if self.pmtu.poll_timeout().is_some_and(|t| t <= now) {
            self.pmtu.on_timeout(now);
        }
        if self.loss_timer().is_some_and(|t| t <= now) {
            self.on_loss_timeout(now);
        }
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Packet> {
        if self.is_complete() {
            return None;
        }
        if self.cfg.model.is_picoquic() {
            if self.stats.handshake_done.is_none() {
                return self.handshake_flight(now);
            }
            if let Some(p) = self.repeat_lost(now) {
                return Some(p);
            }
        }
        let size = self.pmtu.plpmtu();
        self.cc.set_max_datagram(size);
        if self.pto_probes > 0 {
            self.pto_probes -= 1;
            // The second probe is no larger than the base size: if the path
            // shrank below the PLPMTU, that one still gets through and tells
            // black-hole detection (RFC 8899 §4.3) that small packets pass.
            let probe_size = if self.pto_probes == 0 { size.min(self.pmtu.base_size()) } else { size };
            return Some(self.pto_probe(now, probe_size));
        }
        if !self.pacing_allows(now, size) {
            self.cc.set_window_blocked(false);
            return None;
        }
        if let Some(probe) = self.pmtu.probe_due() {
            if self.cc.can_send(probe) {
                if let Some(probe) = self.pmtu.poll_probe(now, self.rtt.as_ref()) {
                    self.stats.probes_sent += 1;
                    self.on_paced_send(now, probe);
                    return Some(self.padding_packet(now, probe, true));
                }
            }
        }
        let blocked = !self.cc.can_send(size);
        self.cc.set_window_blocked(blocked);
        if blocked {
            return None;
        }
        let (off, len) = self.next_chunk(size)?;
        self.on_paced_send(now, size);
        Some(self.data_packet(now, off, len))
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        if self.is_complete() {
            return None;
        }
        [self.loss_timer(), self.pmtu.poll_timeout(), self.pacing_deadline()].into_iter().flatten().min()
    }
}

mod picoquic;

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use px_pmtud::rtt::ClassicRtt;

    use super::*;

    type Log = Rc<RefCell<Vec<(&'static str, u32)>>>;

    /// A PMTU controller with a fixed size and at most one probe, which
    /// records what the sender reports.
    struct Recorder {
        size: u32,
        probe: Option<u32>,
        log: Log,
    }

    impl Recorder {
        fn note(&self, what: &'static str, size: u32) {
            self.log.borrow_mut().push((what, size));
        }
    }

    impl PmtuController for Recorder {
        fn plpmtu(&self) -> u32 {
            self.size
        }
        fn probe_due(&self) -> Option<u32> {
            self.probe
        }
        fn poll_probe(&mut self, _now: SimTime, _rtt: &dyn RttEstimator) -> Option<u32> {
            self.probe.take()
        }
        fn base_size(&self) -> u32 {
            1200
        }
        fn on_probe_acked(&mut self, _now: SimTime, size: u32) {
            self.note("probe acked", size);
        }
        fn on_probe_lost(&mut self, _now: SimTime, size: u32) {
            self.note("probe lost", size);
        }
        fn on_packet_acked(&mut self, _now: SimTime, size: u32) {
            self.note("acked", size);
        }
        fn on_packet_lost(&mut self, _now: SimTime, size: u32) {
            self.note("lost", size);
        }
        fn on_pto(&mut self, _now: SimTime, largest_outstanding: u32) {
            self.note("pto", largest_outstanding);
        }
        fn on_packet_too_big(&mut self, _now: SimTime, mtu: u32) {
            self.note("ptb", mtu);
        }
        fn poll_timeout(&self) -> Option<SimTime> {
            None
        }
        fn on_timeout(&mut self, _now: SimTime) {}
    }

    /// A QUIC-like sender of `total` bytes in 1500-byte packets (1440
    /// stream bytes each).
    fn sender(total: u64, probe: Option<u32>) -> (BulkSender, Log) {
        let log = Log::default();
        let pmtu = Recorder { size: 1500, probe, log: Rc::clone(&log) };
        let s = BulkSender::new(TransportConfig::quic_like(total), Box::new(ClassicRtt::default()), Box::new(pmtu));
        (s, log)
    }

    fn flush(s: &mut BulkSender, now: SimTime) -> Vec<Packet> {
        std::iter::from_fn(|| s.poll_transmit(now)).collect()
    }

    /// (packet number, stream offset, stream length) of a sent packet.
    fn data(p: &Packet) -> (u64, u64, u32) {
        match p.payload {
            Payload::Data { pn, offset, len } => (pn, offset, len),
            Payload::Padding { pn } => (pn, 0, 0),
            other => panic!("not a transport packet: {other:?}"),
        }
    }

    fn ack(ranges: &[(u64, u64)]) -> Packet {
        let mut r = AckRanges::default();
        for &(lo, hi) in ranges {
            assert!(r.push(lo, hi));
        }
        Packet::new(50, false, Payload::Ack { pn: 0, ack_delay_us: 0, ranges: r })
    }

    fn ptb(mtu: u32, pn: u64) -> Packet {
        Packet::new(56, false, Payload::TooBig { mtu, orig_size: 1500, orig: QuotedPayload::Transport(pn) })
    }

    #[test]
    fn the_initial_window_limits_the_first_flight_of_plpmtu_sized_packets() {
        let (mut s, _) = sender(100_000, None);
        let sent = flush(&mut s, SimTime::ZERO);
        // RFC 9002 §7.2: min(10 x 1500, max(14720, 3000)) = 14720 bytes: 9 packets.
        assert_eq!(sent.len(), 9);
        for (i, p) in sent.iter().enumerate() {
            assert_eq!((p.size, p.df), (1500, true));
            assert_eq!(data(p), (i as u64, i as u64 * 1440, 1440));
        }
        assert_eq!((s.stats().packets_sent, s.stats().bytes_sent), (9, 9 * 1500));
    }

    #[test]
    fn acknowledging_every_byte_completes_the_transfer() {
        let (mut s, log) = sender(3 * 1440, None);
        let sent = flush(&mut s, SimTime::ZERO);
        assert_eq!(sent.len(), 3);
        assert!(s.poll_timeout().is_some(), "the PTO is armed");
        let t = SimTime::from_millis(100);
        s.on_packet(t, &ack(&[(0, 2)]));
        assert!(s.is_complete());
        assert_eq!(s.stats().completed_at, Some(t));
        assert_eq!(s.rtt().smoothed_rtt(), Duration::from_millis(100));
        assert!(s.poll_transmit(t).is_none() && s.poll_timeout().is_none());
        assert_eq!(*log.borrow(), vec![("acked", 1500); 3]);
    }

    #[test]
    fn packet_threshold_losses_are_retransmitted_before_new_data() {
        let (mut s, log) = sender(100_000, None);
        let first = flush(&mut s, SimTime::ZERO);
        assert_eq!(first.len(), 9);
        // Packets 0-2 missing, 3-8 acknowledged: 8 >= pn + 3 for each.
        let t = SimTime::from_millis(100);
        s.on_packet(t, &ack(&[(3, 8)]));
        assert_eq!((s.stats().packets_lost, s.stats().congestion_events), (3, 1));
        assert_eq!(log.borrow().iter().filter(|e| e.0 == "lost").count(), 3);
        let next = flush(&mut s, t);
        let offsets: Vec<u64> = next.iter().take(4).map(|p| data(p).1).collect();
        assert_eq!(offsets, [0, 1440, 2880, 9 * 1440], "lost ranges first, then new data");
        assert_eq!(data(&next[0]).0, 9, "a retransmission gets a new packet number");
    }

    #[test]
    fn a_pto_sends_two_probes_the_second_no_larger_than_the_base_size() {
        let (mut s, log) = sender(100_000, None);
        let _ = flush(&mut s, SimTime::ZERO);
        let t = s.poll_timeout().expect("PTO armed");
        // ClassicRtt before any sample: 333 ms + 4 x 166.5 ms + 25 ms max ACK delay.
        assert_eq!(t, SimTime::from_millis(1024));
        s.on_timeout(t);
        let probes = flush(&mut s, t);
        assert_eq!(probes.len(), 2, "PTO probes ignore the full window, data does not");
        assert_eq!((probes[0].size, probes[1].size), (1500, 1200));
        assert_eq!((data(&probes[0]).1, data(&probes[1]).2), (9 * 1440, 1200 - 60));
        assert_eq!(s.stats().ptos, 1);
        assert_eq!(log.borrow().last(), Some(&("pto", 1500)));
        // The next PTO backs off: twice the period after the newest probe.
        assert_eq!(s.poll_timeout(), Some(t + (t - SimTime::ZERO) * 2));
    }

    #[test]
    fn only_ptbs_quoting_an_outstanding_packet_reach_the_controller() {
        let (mut s, log) = sender(100_000, None);
        let _ = flush(&mut s, SimTime::ZERO);
        s.on_packet(SimTime::from_millis(50), &ack(&[(0, 0)]));
        s.on_packet(SimTime::from_millis(50), &ptb(1400, 0)); // already acknowledged
        s.on_packet(SimTime::from_millis(50), &ptb(1400, 99)); // never sent
        s.on_packet(SimTime::from_millis(50), &ptb(1400, 1));
        let ptbs: Vec<_> = log.borrow().iter().filter(|e| e.0 == "ptb").copied().collect();
        assert_eq!(ptbs, [("ptb", 1400)]);
    }

    #[test]
    fn a_lost_probe_is_reported_to_the_controller_and_is_not_congestion() {
        let (mut s, log) = sender(100_000, Some(4000));
        let sent = flush(&mut s, SimTime::ZERO);
        assert_eq!((sent[0].size, data(&sent[0])), (4000, (0, 0, 0)), "the probe goes first, as padding");
        assert_eq!(s.stats().probes_sent, 1);
        s.on_packet(SimTime::from_millis(100), &ack(&[(1, 5)]));
        assert_eq!((s.stats().probes_lost, s.stats().packets_lost, s.stats().congestion_events), (1, 0, 0));
        assert!(log.borrow().contains(&("probe lost", 4000)));
    }

    /// The picoquic model over the same recorder: 1500-byte packets, base 1200.
    fn pico_sender(total: u64) -> (BulkSender, Log) {
        let log = Log::default();
        let pmtu = Recorder { size: 1500, probe: None, log: Rc::clone(&log) };
        let mut cfg = TransportConfig::quic_like(total);
        cfg.model = SenderModel::Picoquic;
        (BulkSender::new(cfg, Box::new(ClassicRtt::default()), Box::new(pmtu)), log)
    }

    /// Handshake acknowledged at 100 ms, then the first data flight.
    fn pico_started(total: u64) -> (BulkSender, Log, Vec<Packet>) {
        let (mut s, log) = pico_sender(total);
        let _ = flush(&mut s, SimTime::ZERO);
        s.on_packet(SimTime::from_millis(100), &ack(&[(0, 2)]));
        let flight = flush(&mut s, SimTime::from_millis(100));
        (s, log, flight)
    }

    #[test]
    fn picoquic_model_sends_a_handshake_flight_and_data_only_after_its_ack() {
        let (mut s, _) = pico_sender(100_000);
        let hs = flush(&mut s, SimTime::ZERO);
        assert_eq!(hs.len(), 3);
        assert!(hs.iter().all(|p| p.size == 1200 && data(p).2 == 0), "padding at the base size");
        assert!(flush(&mut s, SimTime::from_millis(50)).is_empty(), "no data before the ACK");
        s.on_packet(SimTime::from_millis(100), &ack(&[(0, 2)]));
        let flight = flush(&mut s, SimTime::from_millis(100));
        assert_eq!(s.stats().handshake_done, Some(SimTime::from_millis(100)));
        // picoquic's initial window 15 360 B + the 3 600 B of handshake acked in
        // slow start = 18 960 B: twelve 1500-byte packets.
        assert_eq!(flight.len(), 12);
        assert_eq!(data(&flight[0]), (3, 0, 1440));
    }

    #[test]
    fn picoquic_model_sends_the_handshake_again_when_it_is_lost() {
        let (mut s, _) = pico_sender(100_000);
        assert_eq!(flush(&mut s, SimTime::ZERO).len(), 3);
        // No ACK: the timer declares the flight lost, and it goes again.
        let t = s.poll_timeout().expect("timer armed");
        s.on_timeout(t);
        let again = flush(&mut s, t);
        assert!(!again.is_empty() && again.iter().all(|p| p.size == 1200 && data(p).2 == 0), "{again:?}");
        let pn = data(&again[0]).0;
        s.on_packet(t + Duration::from_millis(100), &ack(&[(pn, pn)]));
        assert!(flush(&mut s, t + Duration::from_millis(100)).iter().any(|p| data(p).2 > 0), "data after the ACK");
    }

    #[test]
    fn picoquic_model_finds_losses_by_three_later_acks_and_repeats_them_at_once() {
        let (mut s, log, flight) = pico_started(100_000);
        assert_eq!(flight.len(), 12);
        // pn 3, 4, 5 missing; 6..14 acknowledged: three or more later packets.
        s.on_packet(SimTime::from_millis(200), &ack(&[(6, 14), (0, 2)]));
        assert_eq!((s.stats().packets_lost, s.stats().ptos), (3, 0));
        assert_eq!(log.borrow().iter().filter(|e| e.0 == "lost").count(), 3);
        // The third loss in a row lifts the smoothed loss rate over 0.15.
        assert_eq!(s.stats().congestion_events, 1);
        let repeats: Vec<u64> = flush(&mut s, SimTime::from_millis(200)).iter().take(3).map(|p| data(p).1).collect();
        assert_eq!(repeats, [0, 1440, 2880]);
    }

    #[test]
    fn picoquic_model_timer_losses_drop_the_window_and_repeat_at_the_size_in_force() {
        let (mut s, log, flight) = pico_started(100_000);
        let rto = s.rtt().pto(Duration::from_millis(25));
        // Nothing later acknowledged: lost at the newest send + RTO.
        let deadline = SimTime::from_millis(100) + rto;
        assert_eq!(s.poll_timeout(), Some(deadline));
        s.on_timeout(deadline);
        assert_eq!((s.stats().packets_lost, s.stats().ptos), (12, 1));
        assert_eq!(s.congestion().window(), crate::transport::cubic::CWIN_MINIMUM);
        assert!(log.borrow().contains(&("lost", 1500)));
        // All twelve go again at once at 1500 bytes, though the window is now
        // two packets: each repeat takes its lost packet's place.
        let repeats = flush(&mut s, deadline);
        assert_eq!(repeats.len(), 12);
        for (p, orig) in repeats.iter().zip(&flight) {
            assert_eq!((p.size, data(p).1), (orig.size, data(orig).1));
        }
        // The next timer event is backed off: twice the RTO after the repeats.
        assert_eq!(s.poll_timeout(), Some(deadline + rto * 2));
    }

    #[test]
    fn bbr_model_uses_the_2023_timer_rule_backed_off_and_capped_at_two_seconds() {
        let log = Log::default();
        let pmtu = Recorder { size: 1500, probe: None, log: Rc::clone(&log) };
        let mut cfg = TransportConfig::quic_like(100_000);
        cfg.model = SenderModel::Bbr;
        let mut s = BulkSender::new(cfg, Box::new(ClassicRtt::default()), Box::new(pmtu));
        assert_eq!(flush(&mut s, SimTime::ZERO).len(), 3, "the handshake flight");
        // No ACK yet: own send + RTO, ClassicRtt's initial 333 + 4 x 166.5 + 25 ms.
        let t = s.poll_timeout().expect("timer armed");
        assert_eq!(t, SimTime::from_millis(1024));
        s.on_timeout(t);
        assert_eq!(s.stats().ptos, 1);
        assert!(!flush(&mut s, t).is_empty(), "the flight goes again");
        // Backed off once: 2048 ms, capped at PICOQUIC_LARGE_RETRANSMIT_TIMER
        // (the current rule, the CUBIC model's, would wait 2048 ms).
        assert_eq!(s.poll_timeout(), Some(t + Duration::from_secs(2)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]
        // Under random loss both ways, with picoquic's PMTU reaction and an
        // MTU that drops and comes back, every byte arrives, once, with
        // picoquic's CUBIC or its BBR.
        #[test]
        fn picoquic_model_delivers_every_byte_once(
            seed in 0u64..1000,
            loss in 0.0f64..0.08,
            drop in 1u64..4000,
            model in proptest::prop_oneof![proptest::strategy::Just(SenderModel::Picoquic), proptest::strategy::Just(SenderModel::Bbr)],
        ) {
            use crate::link::LinkConfig;
            use crate::net::{PathConfig, RouterPolicy};
            use crate::transport::{run_transfer, PicoquicPmtu};
            let mut l = LinkConfig::ideal(1500, Duration::from_millis(20));
            l.bandwidth_bps = 5_000_000;
            l.loss = loss;
            l.queue_bytes = Some(80_000);
            let mut b = l.clone();
            b.mtu_changes = vec![(SimTime::from_millis(drop), 1394), (SimTime::from_millis(drop + 3000), 1500)];
            let path = PathConfig { links: vec![l, b], routers: vec![RouterPolicy { sends_ptb: false, ..RouterPolicy::default() }] };
            let mut cfg = TransportConfig::quic_like(600_000);
            cfg.model = model;
            let r = run_transfer(
                path,
                seed,
                cfg,
                Box::new(ClassicRtt::default()),
                Box::new(PicoquicPmtu::new(1440, 28)),
                SimTime::from_millis(600_000),
            ).expect("valid path");
            proptest::prop_assert!(r.completion_s.is_some(), "{:?}", r.sender);
            proptest::prop_assert_eq!(r.receiver.delivered_bytes, 600_000);
        }
    }
}
