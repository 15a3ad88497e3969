//! The picoquic sender model's loss rules and pacer (`SenderModel::Picoquic`
//! and `SenderModel::Bbr`).
//!
//! Loss rules, after `picoquic_retransmit_needed_by_packet` in
//! `picoquic/loss_recovery.c` (read, not copied). For an outstanding packet
//! `p`, with `delta` = largest acknowledged packet number − `p`'s number:
//!
//! - `delta >= 3`: lost now (three later packets acknowledged);
//! - `0 < delta < 3`: lost at the earlier of its send time plus the
//!   retransmission timer, and the time the largest acknowledged packet's
//!   ACK arrived plus min(srtt / 4, 5 ms) plus the peer's max_ack_delay,
//!   minus how much later than `p` that packet was sent (picoquic's RACK);
//! - `delta <= 0` (nothing later acknowledged): lost by timer at the earlier
//!   of the newest packet's send time plus the backed-off retransmission
//!   timer and `p`'s send time plus twice that timer.
//!
//! The retransmission timer is the RTT estimator's PTO (smoothed RTT +
//! k × rttvar + max_ack_delay, or the MaxRTT form): that is the timer the
//! blog varies, and through these rules it decides when the packets sent
//! into the MTU black hole are declared lost. A timer loss of a packet sent
//! after the previous timer event doubles the timer until an ACK arrives
//! (picoquic's `nb_retransmit`). The BBR model replaces the last rule by the
//! one of the 2023 sender it pairs with (`timer_deadline_2023`).
//!
//! Pacing, after `picoquic_update_pacing_window` in `picoquic/pacing.c`: a
//! leaky bucket filled at the window over the smoothed RTT (× 1.25 in the
//! first slow start); its depth is a quarter window, at least two packets,
//! at most 16 packets, except in the first slow start on a path of more
//! than 60 ms smoothed RTT, where it is at least 32 KiB or 15 ms of sending;
//! windows under 8 packets are not paced. The smoothed RTT here is the
//! estimator's, so the estimator also sets the pace.

use std::time::Duration;

use super::{BulkSender, State};
use crate::time::SimTime;
use crate::transport::SenderModel;
use crate::transport::bbr::Pacing;
use crate::transport::congestion::LostPacket;

/// Packets of the server's handshake flight (Initial + Handshake with the
/// test certificate), sent at the initial size before any data.
const HANDSHAKE_PACKETS: u64 = 3;

/// picoquic's `PICOQUIC_RACK_DELAY` / 2: the cap on the RACK reordering allowance.
const RACK_DELAY_MAX: Duration = Duration::from_millis(5);
/// `PICOQUIC_LARGE_RETRANSMIT_TIMER`: the 2023 timer rule's cap.
const LARGE_RTO: Duration = Duration::from_secs(2);
/// `PICOQUIC_MAX_BANDWIDTH_TIME_INTERVAL_MAX`: 15 ms.
const BURST_INTERVAL: f64 = 0.015;
/// The first-slow-start bucket floor (`quantum_min` = 0x8000).
const SLOW_START_QUANTUM_MIN: f64 = 32_768.0;

/// Leaky-bucket pacer state.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pacer {
    /// Sending credit, seconds.
    bucket: f64,
    evaluated: Option<SimTime>,
    /// When a blocked send may go (what the sender's timer waits for).
    blocked_until: Option<SimTime>,
}

impl BulkSender {
    /// The estimator's retransmission timer, backed off after consecutive
    /// timer events.
    fn picoquic_rto(&self, backed_off: bool) -> Duration {
        let rto = self.rtt.pto(self.cfg.max_ack_delay);
        if backed_off { rto.saturating_mul(1u32 << self.pto_count.min(16)) } else { rto }
    }

    /// When packet `pn` is to be declared lost, and whether by the timer.
    fn picoquic_deadline(&self, pn: u64, sent: SimTime) -> (SimTime, bool) {
        let delta = self.largest_acked.map_or(0, |l| l.saturating_sub(pn));
        if delta >= 3 {
            return (sent, false);
        }
        if delta > 0 {
            let rack_delay = (self.rtt.smoothed_rtt() / 4).min(RACK_DELAY_MAX);
            let later_by = self.largest_acked_sent.saturating_since(sent);
            // (ACK arrival + allowance) − how much later the acked one left.
            let rack = SimTime::ZERO
                + (self.largest_acked_at + rack_delay + self.cfg.max_ack_delay)
                    .saturating_since(SimTime::ZERO + later_by);
            return ((sent + self.picoquic_rto(false)).min(rack), false);
        }
        if self.cfg.model == SenderModel::Bbr {
            return (self.timer_deadline_2023(sent), true);
        }
        let rto = self.picoquic_rto(true);
        let last = self.last_ack_eliciting.unwrap_or(sent);
        ((last + rto).min(sent + rto.saturating_mul(2)), true)
    }

    /// The timer rule of the 2023 sender (`picoquic_retransmit_needed_by_packet`
    /// in `picoquic/sender.c` before loss recovery moved to
    /// `loss_recovery.c`), which the BBR model pairs with the BBR of that
    /// time: a packet with nothing later acknowledged is lost at the later of
    /// its own send time plus the retransmission timer (doubled per timer
    /// event, at most twice, and capped at 2 s, `PICOQUIC_LARGE_RETRANSMIT_TIMER`:
    /// `picoquic_current_retransmit_timer`) and the
    /// newest ACK's arrival plus a quarter smoothed RTT plus how much later
    /// than the newest acknowledged packet it left. Each packet thus has its
    /// own timer: one whose RTT exceeds the estimator's PTO is declared lost
    /// (spuriously, if the RTT merely grew).
    fn timer_deadline_2023(&self, sent: SimTime) -> SimTime {
        let rto = self.rtt.pto(self.cfg.max_ack_delay).saturating_mul(1 << self.pto_count.min(2)).min(LARGE_RTO);
        let own = sent + rto;
        if self.largest_acked.is_none() {
            return own;
        }
        let alt = self.largest_acked_at + self.rtt.smoothed_rtt() / 4 + sent.saturating_since(self.largest_acked_sent);
        own.max(alt)
    }

    /// The earliest deadline of any outstanding packet.
    pub(super) fn picoquic_loss_deadline(&self) -> Option<SimTime> {
        let base = self.sent_base;
        self.sent
            .iter()
            .enumerate()
            .filter(|(_, p)| p.state == State::Outstanding)
            .map(|(i, p)| self.picoquic_deadline(base + i as u64, p.time_sent).0)
            .min()
    }

    pub(super) fn detect_lost_picoquic(&mut self, now: SimTime) {
        let mut lost = Vec::new();
        let mut timer_event = false;
        for i in 0..self.sent.len() {
            let p = self.sent[i];
            if p.state != State::Outstanding {
                continue;
            }
            let pn = self.sent_base + i as u64;
            let (at, by_timer) = self.picoquic_deadline(pn, p.time_sent);
            if at > now {
                continue;
            }
            if by_timer && self.last_timer_event.is_none_or(|t| p.time_sent > t) {
                timer_event = true;
            }
            if self.mark_lost(now, i) {
                lost.push(LostPacket { pn, size: p.size, sent: p.time_sent, by_timer });
            }
        }
        if timer_event {
            self.pto_count += 1;
            self.stats.ptos += 1;
            self.last_timer_event = Some(now);
        }
        self.report_lost(now, &lost);
        self.settle_front();
    }

    /// (rate in bytes/s, bucket depth in s), or `None` when not paced.
    /// picoquic's BBR sets the rate and quantum itself
    /// (`picoquic_update_pacing_rate`); otherwise they come from the window.
    fn pacing_params(&self) -> Option<(f64, f64)> {
        match self.cc.pacing() {
            Pacing::Off => return None,
            Pacing::Rate { rate, quantum } => return Some((rate, quantum / rate)),
            Pacing::Window => {}
        }
        let mss = f64::from(self.pmtu.plpmtu());
        let cwnd = self.cc.window() as f64;
        let srtt = self.rtt.smoothed_rtt().as_secs_f64();
        if cwnd < 8.0 * mss || srtt <= 0.001 {
            return None;
        }
        let mut rate = cwnd / srtt;
        let slow_start = self.cc.in_initial_slow_start();
        let mut quantum = cwnd / 4.0;
        if quantum < 2.0 * mss {
            quantum = 2.0 * mss;
        } else if slow_start && srtt > 4.0 * BURST_INTERVAL {
            quantum = if quantum < SLOW_START_QUANTUM_MIN {
                SLOW_START_QUANTUM_MIN
            } else {
                quantum.max(rate * BURST_INTERVAL)
            };
        } else if quantum > 16.0 * mss {
            quantum = 16.0 * mss;
        }
        if slow_start {
            rate *= 1.25;
        }
        Some((rate, quantum / rate))
    }

    /// True if the pacer lets `size` bytes go now (always in the RFC 9002
    /// model); otherwise records when it will.
    pub(super) fn pacing_allows(&mut self, now: SimTime, size: u32) -> bool {
        if !self.cfg.model.is_picoquic() {
            return true;
        }
        let Some((rate, depth)) = self.pacing_params() else {
            self.pacer.blocked_until = None;
            return true;
        };
        let elapsed = self.pacer.evaluated.map_or(depth, |t| now.saturating_since(t).as_secs_f64());
        self.pacer.bucket = (self.pacer.bucket + elapsed).min(depth);
        self.pacer.evaluated = Some(now);
        let need = f64::from(size) / rate;
        if self.pacer.bucket >= need {
            self.pacer.blocked_until = None;
            true
        } else {
            let wait = Duration::from_secs_f64(need - self.pacer.bucket) + Duration::from_micros(1);
            self.pacer.blocked_until = Some(now + wait);
            false
        }
    }

    /// A packet of `size` bytes left: it spends its share of the bucket.
    pub(super) fn on_paced_send(&mut self, _now: SimTime, size: u32) {
        if !self.cfg.model.is_picoquic() {
            return;
        }
        if let Some((rate, _)) = self.pacing_params() {
            self.pacer.bucket -= f64::from(size) / rate;
        }
    }

    /// The handshake: picoquic's test opens the connection
    /// (`tls_api_connection_loop`) before the download starts, so the sender's
    /// estimator and the slow-start filter have seen the unloaded path's RTT
    /// before the first data flight. Modelled as one round trip: a flight of
    /// `HANDSHAKE_PACKETS` packets at the initial size, then data once the
    /// first ACK has come back. A flight lost entirely (the timer rules
    /// declare it lost) is sent again.
    pub(super) fn handshake_flight(&mut self, now: SimTime) -> Option<crate::packet::Packet> {
        if self.largest_acked.is_some() {
            self.stats.handshake_done = Some(now);
            return crate::net::Endpoint::poll_transmit(self, now);
        }
        let first_flight = self.next_pn < HANDSHAKE_PACKETS;
        if !first_flight && self.outstanding > 0 {
            return None;
        }
        let size = self.pmtu.base_size();
        Some(self.padding_packet(now, size, false))
    }

    /// picoquic finds a loss while preparing a packet and puts the lost
    /// frames in that very packet (`picoquic_retransmit_needed_packet`), so
    /// a repeat leaves at once, at the size in force when its loss was found,
    /// in the lost packet's place in the window. A range that no longer
    /// fits that size (the size was reset by an earlier loss of the same
    /// batch) or is partly acknowledged joins the ordinary retransmission
    /// queue, which splits it to the current size.
    pub(super) fn repeat_lost(&mut self, now: SimTime) -> Option<crate::packet::Packet> {
        while let Some((off, len, size)) = self.repeat_now.pop_front() {
            let end = off + u64::from(len);
            if self.acked.first_gap_from(off) >= end {
                continue;
            }
            let whole = self.acked.first_gap_from(off) == off
                && self.acked.next_start_after(off).is_none_or(|n| n >= end)
                && len + self.cfg.header_bytes <= size;
            if whole {
                return Some(self.data_packet(now, off, len));
            }
            self.retransmit.push_front((off, len));
        }
        None
    }

    /// When a send the pacer held back may go.
    pub(super) fn pacing_deadline(&self) -> Option<SimTime> {
        self.pacer.blocked_until
    }
}
