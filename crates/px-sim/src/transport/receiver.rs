//! The bulk receiver: acknowledges packets (RFC 9000 §13.2 policy) and
//! reassembles the stream, counting every byte delivered exactly once.
//!
//! Guarantees: a stream byte is delivered to the application once, the
//! first time it arrives; later copies count as duplicates. ACK frames carry
//! the most recent [`MAX_ACK_RANGES`] packet-number ranges.

use std::time::Duration;

use serde::Serialize;

use super::TransportConfig;
use super::ranges::RangeSet;
use crate::net::Endpoint;
use crate::packet::{AckRanges, MAX_ACK_RANGES, Packet, Payload};
use crate::time::SimTime;

/// Counters of the receiving side.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReceiverStats {
    /// Packets received.
    pub packets: u64,
    /// Stream bytes delivered (each byte once).
    pub delivered_bytes: u64,
    /// Stream bytes that arrived again after being delivered.
    pub duplicate_bytes: u64,
    /// ACK packets sent.
    pub acks_sent: u64,
    /// When the last missing byte arrived.
    pub completed_at: Option<SimTime>,
}

/// The receiving endpoint of a bulk transfer.
pub struct BulkReceiver {
    cfg: TransportConfig,
    pns: RangeSet,
    stream: RangeSet,
    largest: Option<u64>,
    largest_at: SimTime,
    unacked: u32,
    ack_now: bool,
    ack_deadline: Option<SimTime>,
    next_pn: u64,
    stats: ReceiverStats,
}

impl BulkReceiver {
    /// A receiver expecting `cfg.total_bytes` bytes.
    #[must_use]
    pub fn new(cfg: TransportConfig) -> Self {
        BulkReceiver {
            cfg,
            pns: RangeSet::new(),
            stream: RangeSet::new(),
            largest: None,
            largest_at: SimTime::ZERO,
            unacked: 0,
            ack_now: false,
            ack_deadline: None,
            next_pn: 0,
            stats: ReceiverStats::default(),
        }
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }

    /// The stream bytes received, as ranges.
    #[must_use]
    pub fn received(&self) -> &[(u64, u64)] {
        self.stream.as_slice()
    }

    /// True once every byte has arrived.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.stats.completed_at.is_some()
    }

    fn on_ack_eliciting(&mut self, now: SimTime, pn: u64) {
        if self.pns.contains(pn) {
            // A duplicate packet: acknowledge at once so the sender stops.
            self.ack_now = true;
            return;
        }
        // RFC 9000 §13.2.1: acknowledge immediately when a packet arrives
        // out of order (a gap before it, or it fills one).
        let in_order = self.largest.map_or(pn == 0, |l| pn == l + 1);
        if !in_order {
            self.ack_now = true;
        }
        self.pns.insert(pn, pn + 1);
        if self.largest.is_none_or(|l| pn > l) {
            self.largest = Some(pn);
            self.largest_at = now;
        }
        self.unacked += 1;
        // "A receiver SHOULD send an ACK frame after receiving at least two
        // ack-eliciting packets"; otherwise within max_ack_delay.
        if self.unacked >= self.cfg.ack_eliciting_threshold {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + self.cfg.max_ack_delay);
        }
    }

    fn build_ack(&mut self, now: SimTime) -> Packet {
        let mut ranges = AckRanges::default();
        for &(lo, hi) in self.pns.as_slice().iter().rev().take(MAX_ACK_RANGES) {
            ranges.push(lo, hi - 1);
        }
        let delay: Duration = now - self.largest_at;
        let pn = self.next_pn;
        self.next_pn += 1;
        self.unacked = 0;
        self.ack_now = false;
        self.ack_deadline = None;
        self.stats.acks_sent += 1;
        let size = self.cfg.ack_bytes + 4 * u32::from(ranges.as_slice().len() as u8);
        Packet::new(
            size,
            true,
            Payload::Ack { pn, ack_delay_us: u64::try_from(delay.as_micros()).unwrap_or(u64::MAX), ranges },
        )
    }
}

impl Endpoint for BulkReceiver {
    fn on_packet(&mut self, now: SimTime, pkt: &Packet) {
        match pkt.payload {
            Payload::Data { pn, offset, len } => {
                self.stats.packets += 1;
                self.on_ack_eliciting(now, pn);
                let end = offset + u64::from(len);
                let fresh = self.stream.insert(offset, end);
                self.stats.delivered_bytes += fresh;
                self.stats.duplicate_bytes += u64::from(len) - fresh;
                if self.stats.completed_at.is_none() && self.stream.prefix_end() >= self.cfg.total_bytes {
                    self.stats.completed_at = Some(now);
                }
            }
            Payload::Padding { pn } => {
                self.stats.packets += 1;
                self.on_ack_eliciting(now, pn);
            }
            _ => {}
        }
    }

    fn on_timeout(&mut self, now: SimTime) {
        if self.ack_deadline.is_some_and(|t| t <= now) {
            self.ack_now = true;
        }
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Packet> {
        if self.ack_now && self.largest.is_some() {
            return Some(self.build_ack(now));
        }
        None
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        self.ack_deadline
    }
}
