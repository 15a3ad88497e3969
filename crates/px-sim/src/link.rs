//! Links: a FIFO drop-tail queue in front of a serializer, then a wire.
//!
//! A packet handed to a link waits behind what is already queued, is
//! serialized at the link's bandwidth, then propagates for the link's
//! delay. The queue holds at most `queue_bytes` bytes and `queue_packets`
//! packets (counting the one being serialized); a packet that would exceed
//! either is dropped at the tail. Random loss hits a packet on the wire: it
//! still occupies the serializer, then vanishes. The MTU can change at given
//! times ([`LinkConfig::mtu_changes`]); the router forwarding onto the link
//! checks the MTU in force when it forwards.

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::time::SimTime;

/// Static description of one link (used for both directions of a hop).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkConfig {
    /// Serialization rate in bits per second; 0 means infinitely fast.
    pub bandwidth_bps: u64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Drop-tail limit in bytes (`None`: unlimited).
    pub queue_bytes: Option<u64>,
    /// Drop-tail limit in packets (`None`: unlimited).
    pub queue_packets: Option<u32>,
    /// Probability that a packet is lost on the wire, in `[0, 1]`.
    pub loss: f64,
    /// MTU (largest IP length) at the start of the run.
    pub mtu: u32,
    /// Later MTU changes: `(time, new MTU)`, in time order.
    pub mtu_changes: Vec<(SimTime, u32)>,
}

impl LinkConfig {
    /// An infinitely fast, lossless, unqueued link with the given MTU and delay.
    #[must_use]
    pub fn ideal(mtu: u32, delay: Duration) -> Self {
        LinkConfig {
            bandwidth_bps: 0,
            delay,
            queue_bytes: None,
            queue_packets: None,
            loss: 0.0,
            mtu,
            mtu_changes: Vec::new(),
        }
    }

    /// MTU in force at `now`.
    #[must_use]
    pub fn mtu_at(&self, now: SimTime) -> u32 {
        self.mtu_changes.iter().take_while(|(t, _)| *t <= now).last().map_or(self.mtu, |&(_, m)| m)
    }

    /// Time to serialize `bytes` bytes (zero on an infinitely fast link).
    #[must_use]
    pub fn serialization(&self, bytes: u32) -> Duration {
        let bit_ns = u64::from(bytes) * 8 * 1_000_000_000;
        Duration::from_nanos(bit_ns.checked_div(self.bandwidth_bps).unwrap_or(0))
    }
}

/// What happened to a packet handed to a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkOutcome {
    /// It will arrive at the far end at this time.
    Arrives(SimTime),
    /// Dropped at the tail of a full queue.
    QueueFull,
    /// Lost on the wire (random loss).
    Lost,
}

/// One direction of a link with its queue state.
#[derive(Debug)]
pub struct Link {
    /// The configuration.
    pub config: LinkConfig,
    /// When the serializer finishes what is already queued.
    busy_until: SimTime,
    /// Departure time and size of every packet not yet fully serialized.
    backlog: VecDeque<(SimTime, u32)>,
    backlog_bytes: u64,
}

impl Link {
    /// A link with an empty queue.
    #[must_use]
    pub fn new(config: LinkConfig) -> Self {
        Link { config, busy_until: SimTime::ZERO, backlog: VecDeque::with_capacity(64), backlog_bytes: 0 }
    }

    /// Hands a packet of `size` bytes to the link at `now`.
    pub fn send(&mut self, now: SimTime, size: u32, rng: &mut ChaCha8Rng) -> LinkOutcome {
        while let Some(&(done, bytes)) = self.backlog.front() {
            if done > now {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= u64::from(bytes);
        }
        let over_bytes = self.config.queue_bytes.is_some_and(|limit| self.backlog_bytes + u64::from(size) > limit);
        let over_packets = self.config.queue_packets.is_some_and(|limit| self.backlog.len() >= limit as usize);
        if over_bytes || over_packets {
            return LinkOutcome::QueueFull;
        }
        let start = self.busy_until.max(now);
        let done = start + self.config.serialization(size);
        self.busy_until = done;
        if self.config.bandwidth_bps != 0 {
            self.backlog.push_back((done, size));
            self.backlog_bytes += u64::from(size);
        }
        // Draw only on lossy links, so adding a lossless hop does not shift
        // the random stream seen by the others.
        if self.config.loss > 0.0 && rng.random_bool_compat(self.config.loss) {
            return LinkOutcome::Lost;
        }
        LinkOutcome::Arrives(done + self.config.delay)
    }

    /// Bytes queued or being serialized, as of the last `send`.
    #[must_use]
    pub fn backlog_bytes(&self) -> u64 {
        self.backlog_bytes
    }
}

/// `gen_bool` that accepts any probability (clamped), so a bad config
/// cannot panic the run.
trait BoolCompat {
    fn random_bool_compat(&mut self, p: f64) -> bool;
}

impl BoolCompat for ChaCha8Rng {
    fn random_bool_compat(&mut self, p: f64) -> bool {
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        self.gen_bool(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(1)
    }

    #[test]
    fn serialization_and_propagation() {
        let mut cfg = LinkConfig::ideal(1500, Duration::from_millis(100));
        cfg.bandwidth_bps = 1_000_000;
        let mut link = Link::new(cfg);
        let mut r = rng();
        // 1250 bytes at 1 Mb/s = 10 ms; the second waits behind the first.
        assert_eq!(link.send(SimTime::ZERO, 1250, &mut r), LinkOutcome::Arrives(SimTime::from_millis(110)));
        assert_eq!(link.send(SimTime::ZERO, 1250, &mut r), LinkOutcome::Arrives(SimTime::from_millis(120)));
        // After the queue drained the serializer starts at once.
        assert_eq!(link.send(SimTime::from_millis(50), 1250, &mut r), LinkOutcome::Arrives(SimTime::from_millis(160)));
    }

    #[test]
    fn drop_tail_by_packets_and_bytes() {
        let mut cfg = LinkConfig::ideal(1500, Duration::ZERO);
        cfg.bandwidth_bps = 8_000; // 1 byte per ms
        cfg.queue_packets = Some(2);
        let mut link = Link::new(cfg.clone());
        let mut r = rng();
        assert!(matches!(link.send(SimTime::ZERO, 100, &mut r), LinkOutcome::Arrives(_)));
        assert!(matches!(link.send(SimTime::ZERO, 100, &mut r), LinkOutcome::Arrives(_)));
        assert_eq!(link.send(SimTime::ZERO, 100, &mut r), LinkOutcome::QueueFull);
        // The first has left after 100 ms: room for one more.
        assert!(matches!(link.send(SimTime::from_millis(100), 100, &mut r), LinkOutcome::Arrives(_)));

        cfg.queue_packets = None;
        cfg.queue_bytes = Some(250);
        let mut link = Link::new(cfg);
        assert!(matches!(link.send(SimTime::ZERO, 200, &mut r), LinkOutcome::Arrives(_)));
        assert_eq!(link.send(SimTime::ZERO, 100, &mut r), LinkOutcome::QueueFull);
        assert!(matches!(link.send(SimTime::ZERO, 50, &mut r), LinkOutcome::Arrives(_)));
        assert_eq!(link.backlog_bytes(), 250);
    }

    #[test]
    fn random_loss_rate_is_respected() {
        let mut cfg = LinkConfig::ideal(1500, Duration::ZERO);
        cfg.loss = 0.1;
        let mut link = Link::new(cfg);
        let mut r = rng();
        let lost = (0..20_000).filter(|_| link.send(SimTime::ZERO, 100, &mut r) == LinkOutcome::Lost).count();
        assert!((1_800..2_200).contains(&lost), "lost {lost} of 20000 at 10 %");
    }

    #[test]
    fn mtu_changes_at_given_time() {
        let mut cfg = LinkConfig::ideal(1500, Duration::ZERO);
        cfg.mtu_changes = vec![(SimTime::from_millis(1000), 1394), (SimTime::from_millis(2000), 9000)];
        assert_eq!(cfg.mtu_at(SimTime::from_millis(999)), 1500);
        assert_eq!(cfg.mtu_at(SimTime::from_millis(1000)), 1394);
        assert_eq!(cfg.mtu_at(SimTime::from_millis(5000)), 9000);
    }
}
