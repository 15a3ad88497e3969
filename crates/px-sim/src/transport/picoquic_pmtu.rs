//! Path-MTU discovery as picoquic does it, for the picoquic sender model:
//! the reaction to the MTU drop that the blog's losses count.
//!
//! Rules (read in `picoquic/sender.c`, `picoquic_next_mtu_probe_length` and
//! `picoquic_is_mtu_probe_needed`; `picoquic/loss_recovery.c`,
//! `picoquic_retransmit_needed_packet`; `picoquic/quicctx.c`,
//! `picoquic_reset_path_mtu`; and the ACK handling in `picoquic/frames.c`):
//!
//! - Start at the initial size (1252-byte QUIC packets) and probe once at
//!   the peer's maximum packet size; an acknowledged probe becomes the
//!   sending size.
//! - A lost probe is remembered as the largest size tried. The next probe
//!   is 1500 if that was above 1500, 1400 if above 1400, otherwise halfway
//!   between the sending size and it; picoquic only probes again while the
//!   largest size tried is unset or above 1400.
//! - Every data packet of exactly the sending size that is declared lost
//!   counts; an acknowledged one resets the count. When the count passes
//!   `PICOQUIC_MTU_LOSS_THRESHOLD` (10), the sending size returns to the
//!   initial size and discovery starts over.
//!
//! Sizes at this boundary are IP lengths; picoquic's are QUIC packet
//! (UDP payload) lengths, so `overhead` (28 for IPv4 + UDP) converts.

use px_pmtud::rtt::RttEstimator;

use super::pmtu::PmtuController;
use crate::time::SimTime;

/// `PICOQUIC_MTU_LOSS_THRESHOLD`.
const MTU_LOSS_THRESHOLD: u32 = 10;
/// picoquic's initial QUIC packet size over IPv4 (`PICOQUIC_INITIAL_MTU_IPV4`).
pub const INITIAL_QUIC_PACKET: u32 = 1252;

/// picoquic's PMTU behaviour behind [`PmtuController`].
#[derive(Clone, Debug)]
pub struct PicoquicPmtu {
    overhead: u32,
    initial: u32,
    max: u32,
    send_mtu: u32,
    max_tried: Option<u32>,
    probe_in_flight: bool,
    mtu_losses: u32,
    resets: u64,
}

impl PicoquicPmtu {
    /// Starts at the initial size; `max_quic_packet` is the peer's
    /// max_packet_size (QUIC bytes), `overhead` the IP + UDP header bytes.
    #[must_use]
    pub fn new(max_quic_packet: u32, overhead: u32) -> Self {
        let initial = INITIAL_QUIC_PACKET.min(max_quic_packet);
        PicoquicPmtu {
            overhead,
            initial,
            max: max_quic_packet,
            send_mtu: initial,
            max_tried: None,
            probe_in_flight: false,
            mtu_losses: 0,
            resets: 0,
        }
    }

    /// Times the sending size was reset after repeated full-size losses.
    #[must_use]
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// The next probe size, QUIC bytes, if picoquic would probe now.
    fn next_probe(&self) -> Option<u32> {
        if self.probe_in_flight {
            return None;
        }
        let size = match self.max_tried {
            None => self.max,
            Some(t) if t > 1500 => 1500,
            Some(t) if t > 1400 => 1400,
            Some(_) => return None,
        };
        (size > self.send_mtu).then_some(size)
    }
}

impl PmtuController for PicoquicPmtu {
    fn plpmtu(&self) -> u32 {
        self.send_mtu + self.overhead
    }

    fn probe_due(&self) -> Option<u32> {
        self.next_probe().map(|s| s + self.overhead)
    }

    fn poll_probe(&mut self, _now: SimTime, _rtt: &dyn RttEstimator) -> Option<u32> {
        let size = self.next_probe()?;
        self.probe_in_flight = true;
        Some(size + self.overhead)
    }

    fn base_size(&self) -> u32 {
        self.initial + self.overhead
    }

    fn on_probe_acked(&mut self, _now: SimTime, size: u32) {
        self.probe_in_flight = false;
        let quic = size.saturating_sub(self.overhead);
        if quic > self.send_mtu {
            self.send_mtu = quic;
            self.mtu_losses = 0;
        }
    }

    fn on_probe_lost(&mut self, _now: SimTime, size: u32) {
        self.probe_in_flight = false;
        self.max_tried = Some(size.saturating_sub(self.overhead));
    }

    fn on_packet_acked(&mut self, _now: SimTime, size: u32) {
        if size == self.plpmtu() {
            self.mtu_losses = 0;
        }
    }

    fn on_packet_lost(&mut self, _now: SimTime, size: u32) {
        if size != self.plpmtu() {
            return;
        }
        self.mtu_losses += 1;
        if self.mtu_losses > MTU_LOSS_THRESHOLD {
            self.send_mtu = self.initial;
            self.max_tried = None;
            self.probe_in_flight = false;
            self.mtu_losses = 0;
            self.resets += 1;
        }
    }

    fn on_pto(&mut self, _now: SimTime, _largest_outstanding: u32) {}

    fn black_holes(&self) -> u64 {
        self.resets
    }

    fn poll_timeout(&self) -> Option<SimTime> {
        None
    }

    fn on_timeout(&mut self, _now: SimTime) {}
}

#[cfg(test)]
mod tests {
    use px_pmtud::rtt::ClassicRtt;

    use super::*;

    const T: SimTime = SimTime::ZERO;

    #[test]
    fn probes_the_peer_maximum_then_uses_it() {
        let mut p = PicoquicPmtu::new(1440, 28);
        assert_eq!(p.plpmtu(), 1280);
        assert_eq!(p.probe_due(), Some(1468));
        assert_eq!(p.poll_probe(T, &ClassicRtt::default()), Some(1468));
        assert_eq!(p.probe_due(), None, "one probe at a time");
        p.on_probe_acked(T, 1468);
        assert_eq!((p.plpmtu(), p.probe_due()), (1468, None));
    }

    #[test]
    fn eleven_full_size_losses_reset_then_1440_and_1400_fail_and_it_stays_at_1252() {
        let mut p = PicoquicPmtu::new(1440, 28);
        let _ = p.poll_probe(T, &ClassicRtt::default());
        p.on_probe_acked(T, 1468);
        for _ in 0..10 {
            p.on_packet_lost(T, 1468);
        }
        p.on_packet_lost(T, 1280); // not full size: does not count
        assert_eq!(p.plpmtu(), 1468);
        p.on_packet_acked(T, 1468); // an acknowledged full-size packet clears the count
        for _ in 0..10 {
            p.on_packet_lost(T, 1468);
        }
        assert_eq!((p.plpmtu(), p.black_holes()), (1468, 0));
        p.on_packet_lost(T, 1468);
        assert_eq!((p.plpmtu(), p.black_holes()), (1280, 1));
        // Discovery starts over: 1440 lost, then 1400 lost, then no more probes.
        assert_eq!(p.poll_probe(T, &ClassicRtt::default()), Some(1468));
        p.on_probe_lost(T, 1468);
        assert_eq!(p.poll_probe(T, &ClassicRtt::default()), Some(1428));
        p.on_probe_lost(T, 1428);
        assert_eq!(p.probe_due(), None);
        assert_eq!(p.plpmtu(), 1280);
    }
}
