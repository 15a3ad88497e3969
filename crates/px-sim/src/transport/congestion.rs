//! The sender's congestion controller: NewReno (RFC 9002, the sender the
//! simulator always had), CUBIC with HyStart (the picoquic sender model) or
//! picoquic's BBR (the BBR sender model). One enum so the sender stays a
//! single code path whichever runs.

use std::time::Duration;

use serde::Serialize;

use super::bbr::{Bbr, Pacing};
use super::cubic::{Cubic, LossContext, LossKind};
use super::newreno::NewReno;
use crate::time::SimTime;

/// Which sender the transport models.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum SenderModel {
    /// RFC 9002 as written: NewReno, slow start until the first loss, no
    /// pacing, losses only by packet or time threshold after an ACK, PTO.
    #[default]
    #[value(name = "newreno")]
    Rfc9002NewReno,
    /// The sender of picoquic's MTU-drop test: picoquic's CUBIC with its
    /// delay-based slow-start exit, its pacing, its RACK and timer loss
    /// rules, and its reaction to full-size losses (see `transport::sender`,
    /// `transport::cubic`, `transport::picoquic_pmtu`).
    Picoquic,
    /// The same picoquic sender (pacing, loss rules, handshake, PMTU
    /// reaction) with picoquic's BBR instead of CUBIC (`transport::bbr`).
    Bbr,
}

impl SenderModel {
    /// Short label for tables.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            SenderModel::Rfc9002NewReno => "RFC 9002 NewReno",
            SenderModel::Picoquic => "picoquic model (CUBIC)",
            SenderModel::Bbr => "picoquic model (BBR)",
        }
    }

    /// True for the senders built on picoquic's loss rules, pacer and PMTU
    /// reaction (CUBIC or BBR).
    #[must_use]
    pub fn is_picoquic(self) -> bool {
        matches!(self, SenderModel::Picoquic | SenderModel::Bbr)
    }
}

/// A data packet declared lost, as the controller hears of it.
#[derive(Clone, Copy, Debug)]
pub struct LostPacket {
    /// Its packet number.
    pub pn: u64,
    /// Its IP size.
    pub size: u32,
    /// When it was sent.
    pub sent: SimTime,
    /// Detected by the timer rather than by later packets being acked.
    pub by_timer: bool,
}

impl LostPacket {
    /// How picoquic notifies this loss.
    fn kind(&self) -> LossKind {
        if self.by_timer { LossKind::Timer } else { LossKind::Repeat }
    }
}

/// The controller in use.
#[derive(Clone, Debug)]
pub enum Congestion {
    /// RFC 9002 NewReno.
    NewReno(NewReno),
    /// picoquic's CUBIC (boxed: it carries its RTT filter).
    Cubic(Box<Cubic>),
    /// picoquic's BBR (boxed: it carries its filters and rate samples).
    Bbr(Box<Bbr>),
}

macro_rules! each {
    ($self:expr, $cc:ident => $body:expr) => {
        match $self {
            Congestion::NewReno($cc) => $body,
            Congestion::Cubic($cc) => $body,
            Congestion::Bbr($cc) => $body,
        }
    };
}

impl Congestion {
    /// The controller `model` uses, for datagrams of `max_datagram` bytes.
    #[must_use]
    pub fn for_model(model: SenderModel, max_datagram: u32) -> Self {
        match model {
            SenderModel::Rfc9002NewReno => Congestion::NewReno(NewReno::new(max_datagram)),
            SenderModel::Picoquic => Congestion::Cubic(Box::new(Cubic::new(max_datagram))),
            SenderModel::Bbr => Congestion::Bbr(Box::new(Bbr::new(max_datagram))),
        }
    }

    /// The congestion window in bytes.
    #[must_use]
    pub fn window(&self) -> u64 {
        each!(self, c => c.window())
    }

    /// The slow-start threshold (`u64::MAX` while in slow start).
    #[must_use]
    pub fn ssthresh(&self) -> u64 {
        each!(self, c => c.ssthresh())
    }

    /// Bytes sent and neither acknowledged nor declared lost.
    #[must_use]
    pub fn bytes_in_flight(&self) -> u64 {
        each!(self, c => c.bytes_in_flight())
    }

    /// True while in slow start.
    #[must_use]
    pub fn in_slow_start(&self) -> bool {
        match self {
            Congestion::NewReno(c) => c.window() < c.ssthresh(),
            Congestion::Cubic(c) => c.in_slow_start(),
            Congestion::Bbr(c) => c.in_slow_start(),
        }
    }

    /// True in the first slow start (before any exit).
    #[must_use]
    pub fn in_initial_slow_start(&self) -> bool {
        self.ssthresh() == u64::MAX && self.in_slow_start()
    }

    /// Congestion events (window reductions on loss) so far.
    #[must_use]
    pub fn congestion_events(&self) -> u64 {
        each!(self, c => c.congestion_events)
    }

    /// When slow start ended (loss, or HyStart's RTT rise).
    #[must_use]
    pub fn slow_start_exit(&self) -> Option<SimTime> {
        each!(self, c => c.slow_start_exit)
    }

    /// True when a packet of `size` bytes fits in the window now.
    #[must_use]
    pub fn can_send(&self, size: u32) -> bool {
        self.bytes_in_flight() + u64::from(size) <= self.window()
    }

    /// The datagram size changed.
    pub fn set_max_datagram(&mut self, size: u32) {
        each!(self, c => c.set_max_datagram(size));
    }

    /// In-flight packet `pn` of `size` bytes was sent at `now`.
    pub fn on_sent(&mut self, now: SimTime, pn: u64, size: u32) {
        match self {
            Congestion::NewReno(c) => c.on_sent(size),
            Congestion::Cubic(c) => c.on_sent(size),
            Congestion::Bbr(c) => c.on_sent(now, pn, size),
        }
    }

    /// In-flight packet `pn` left flight without congestion meaning.
    pub fn on_discarded(&mut self, pn: u64, size: u32) {
        match self {
            Congestion::NewReno(c) => c.on_discarded(size),
            Congestion::Cubic(c) => c.on_discarded(size),
            Congestion::Bbr(c) => c.on_discarded(pn, size),
        }
    }

    /// In-flight packet `pn`, sent at `sent`, was acknowledged at `now`.
    pub fn on_acked(&mut self, now: SimTime, pn: u64, sent: SimTime, size: u32) {
        match self {
            Congestion::NewReno(c) => c.on_acked(sent, size),
            Congestion::Cubic(c) => c.on_acked(now, size),
            Congestion::Bbr(c) => c.on_acked(now, pn, size),
        }
    }

    /// Packet `pn`, declared lost, was acknowledged after all (only picoquic's
    /// BBR reacts: it may end a "suspension").
    pub fn on_spurious_loss(&mut self, pn: u64) {
        if let Congestion::Bbr(c) = self {
            c.on_spurious_loss(pn);
        }
    }

    /// A raw RTT sample (only HyStart uses it).
    pub fn on_rtt_sample(&mut self, now: SimTime, rtt: Duration) {
        if let Congestion::Cubic(c) = self {
            c.on_rtt_sample(now, rtt);
        }
    }

    /// An ACK frame was processed: `rtt` is its raw RTT sample if it gave
    /// one, `min_rtt` the path's minimum (only BBR runs per frame).
    pub fn on_ack_frame(&mut self, now: SimTime, rtt: Option<Duration>, min_rtt: Option<Duration>) {
        if let Congestion::Bbr(c) = self {
            c.on_ack_frame(now, rtt, min_rtt);
        }
    }

    /// Whether the sender's last attempt to send was stopped by the window
    /// (picoquic's `cnx->cwin_blocked`; only BBR's start-up reads it).
    pub fn set_window_blocked(&mut self, blocked: bool) {
        if let Congestion::Bbr(c) = self {
            c.set_window_blocked(blocked);
        }
    }

    /// How picoquic's pacer is set: BBR sets a rate itself; the other
    /// controllers (and BBR's long-RTT start-up) leave it to the window and
    /// the smoothed RTT.
    #[must_use]
    pub fn pacing(&self) -> Pacing {
        match self {
            Congestion::Bbr(c) => c.pacing(),
            _ => Pacing::Window,
        }
    }

    /// Data packets were declared lost at `now` (in packet-number order).
    /// NewReno takes them as one congestion event (RFC 9002 §B.6); picoquic's
    /// CUBIC hears of each (`next_pn`, `largest_acked`, `srtt` feed its
    /// recovery rules).
    pub fn on_lost(&mut self, now: SimTime, lost: &[LostPacket], next_pn: u64, largest_acked: u64, srtt: Duration) {
        match self {
            Congestion::NewReno(c) => {
                let bytes = lost.iter().map(|p| u64::from(p.size)).sum();
                if let Some(newest) = lost.iter().map(|p| p.sent).max() {
                    c.on_lost(now, bytes, newest);
                }
            }
            Congestion::Cubic(c) => {
                let cx = LossContext { next_pn, largest_acked, srtt };
                for p in lost {
                    c.on_packet_lost(now, p.pn, p.size, p.kind(), cx);
                }
            }
            Congestion::Bbr(c) => {
                for p in lost {
                    c.on_packet_lost(now, p.pn, p.size, p.kind(), srtt, next_pn);
                }
            }
        }
    }

    /// Persistent congestion.
    pub fn on_persistent_congestion(&mut self) {
        each!(self, c => c.on_persistent_congestion());
    }
}
