//! Loss and delay on a link, for a kernel without `netem`.
//!
//! An [`Impairment`] is a small forwarding element: two ports of its own
//! namespace (each a veth end) bridged by a thread through px-io sockets,
//! which drops each frame with a given probability and holds the rest for
//! a fixed one-way delay. Offloads on both ports are turned off first
//! (no GRO, TSO, GSO), so loss applies to frames as they arrive; the hosts
//! on either side should be wire-like senders ([`Offloads::WIRE_SENDER`]),
//! otherwise a veth hands over whole 64 KB TSO super-packets and one loss
//! draw removes 45 segments at once. Frames are forwarded unchanged, ARP and neighbour discovery
//! included, so the element is invisible apart from the impairment; the
//! one change is that a checksum the sender left partial (veth checksum
//! offload) is completed, as it would be on a physical wire.
//!
//! Guarantees: a frame is either forwarded once, byte for byte, or counted
//! as dropped (by the loss draw, or because the delay queue of
//! `queue_frames` slots was full, like a router's tail drop). The queue is
//! preallocated: forwarding allocates nothing per frame.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use px_io::{Checksum, PacketMeta, PacketSocket, Poller, RxBatch, SocketConfig, TxBatch};

use crate::LabError;
use crate::element::{Element, open_port, send_or_drop};
use crate::netns::{Netns, Offloads};

/// What to do to frames, the same in both directions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImpairSpec {
    /// Probability in 0.0..=1.0 that a frame is dropped.
    pub loss: f64,
    /// One-way delay added to every forwarded frame.
    pub delay: Duration,
    /// Frames that may wait in each direction's delay queue.
    pub queue_frames: usize,
    /// Largest frame to carry (Ethernet header included).
    pub max_frame: usize,
    /// Seed of the loss draws.
    pub seed: u64,
}

impl Default for ImpairSpec {
    fn default() -> Self {
        ImpairSpec { loss: 0.0, delay: Duration::ZERO, queue_frames: 4096, max_frame: 9014 + 4, seed: 1 }
    }
}

/// Per-direction counters (`[0]`: port a → b, `[1]`: b → a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImpairStats {
    /// Frames forwarded.
    pub forwarded: [u64; 2],
    /// Frames dropped by the loss draw.
    pub lost: [u64; 2],
    /// Frames dropped because the delay queue was full or the port refused them.
    pub overflow: [u64; 2],
}

/// A running impairment; stopped (and its counters returned) by
/// [`Impairment::stop`] or on drop.
#[derive(Debug)]
pub struct Impairment {
    element: Element<ImpairStats>,
}

impl Impairment {
    /// Bridges ports `a` and `b` of `ns` with `spec` applied.
    pub fn start(ns: &Netns, a: &str, b: &str, spec: ImpairSpec) -> Result<Impairment, LabError> {
        if !(0.0..=1.0).contains(&spec.loss) || spec.queue_frames == 0 {
            return Err(LabError::Observe(format!("impairment: loss {} / queue {}", spec.loss, spec.queue_frames)));
        }
        let off = Offloads { tso: Some(false), gso: Some(false), gro: Some(false) };
        ns.set_offloads(a, off)?;
        ns.set_offloads(b, off)?;
        // The virtio-net header tells which frames carry a partial checksum
        // (the sender's checksum offload): those are completed before they
        // leave, as a real wire would carry them.
        let cfg = SocketConfig { vnet_hdr: true, promiscuous: true, ..SocketConfig::default() };
        let ports = [open_port(ns, a, &cfg)?, open_port(ns, b, &cfg)?];
        let element = Element::spawn("px-impair".into(), move |stop| Bridge::new(spec).run(&ports, stop))?;
        Ok(Impairment { element })
    }

    /// Stops forwarding and returns the counters.
    pub fn stop(mut self) -> ImpairStats {
        self.element.stop()
    }
}

/// xorshift64*: a deterministic loss draw per seed, no crate needed.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One direction's delay line: a FIFO of preallocated frame slots.
struct DelayLine {
    slots: Vec<Vec<u8>>,
    lens: Vec<usize>,
    metas: Vec<PacketMeta>,
    free: Vec<usize>,
    queue: VecDeque<(Instant, usize)>,
}

impl DelayLine {
    fn new(frames: usize, max_frame: usize) -> DelayLine {
        DelayLine {
            slots: vec![vec![0; max_frame]; frames],
            lens: vec![0; frames],
            metas: vec![PacketMeta::PLAIN; frames],
            free: (0..frames).rev().collect(),
            queue: VecDeque::with_capacity(frames),
        }
    }

    /// Copies `frame` in, due at `due`; false if full or too large.
    fn push(&mut self, meta: PacketMeta, frame: &[u8], due: Instant) -> bool {
        let Some(i) = self.free.pop() else { return false };
        let Some(dst) = self.slots[i].get_mut(..frame.len()) else {
            self.free.push(i);
            return false;
        };
        dst.copy_from_slice(frame);
        self.lens[i] = frame.len();
        self.metas[i] = meta;
        self.queue.push_back((due, i));
        true
    }
}

/// Finishes every partial checksum of the batch in place.
fn complete_checksums(rx: &mut RxBatch) {
    for i in 0..rx.len() {
        if let Ok((meta, frame)) = rx.get_mut(i) {
            // A frame too short for its own checksum field is forwarded as
            // is; the receiver will drop it, as it would from a wire.
            let _ = px_wire::offload::complete_partial(frame, meta.csum);
        }
    }
}

/// The metadata to send a received frame with: its checksum is complete
/// now (or was never partial), segmentation requests are kept.
fn wire_meta(m: PacketMeta) -> PacketMeta {
    PacketMeta { csum: Checksum::Unknown, ..m }
}

struct Bridge {
    spec: ImpairSpec,
    rng: Rng,
    lines: [DelayLine; 2],
    stats: ImpairStats,
}

impl Bridge {
    fn new(spec: ImpairSpec) -> Bridge {
        let line = || DelayLine::new(spec.queue_frames, spec.max_frame);
        Bridge { spec, rng: Rng(spec.seed | 1), lines: [line(), line()], stats: ImpairStats::default() }
    }

    fn run(mut self, ports: &[PacketSocket; 2], stop: &AtomicBool) -> ImpairStats {
        let mut rx = RxBatch::new(64, self.spec.max_frame.max(2048));
        let mut tx = TxBatch::new(64);
        let mut poller = Poller::new();
        let ids = [poller.add(ports[0].as_fd()), poller.add(ports[1].as_fd())];
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let next_due = self.lines.iter().filter_map(|l| l.queue.front().map(|q| q.0)).min();
            let wait = next_due.map_or(Duration::from_millis(10), |d| d.saturating_duration_since(now));
            let _ = poller.wait(Some(wait.min(Duration::from_millis(10))));
            for (dir, &id) in ids.iter().enumerate() {
                if poller.is_ready(id) {
                    self.receive(dir, ports, &mut rx, &mut tx);
                }
            }
            self.release(ports, &mut tx);
        }
        self.stats
    }

    /// Takes frames arriving on port `dir` and drops, forwards or queues them.
    fn receive(&mut self, dir: usize, ports: &[PacketSocket; 2], rx: &mut RxBatch, tx: &mut TxBatch) {
        let (from, to) = (&ports[dir], &ports[1 - dir]);
        while from.recv_batch(rx).is_ok_and(|n| n > 0) {
            complete_checksums(rx);
            let now = Instant::now();
            if self.spec.delay.is_zero() {
                let (spec_loss, rng, stats) = (self.spec.loss, &mut self.rng, &mut self.stats);
                let kept = rx.iter().flatten().filter(|_| {
                    let lose = rng.unit() < spec_loss;
                    stats.lost[dir] += u64::from(lose);
                    !lose
                });
                let (sent, dropped) = send_or_drop(to, tx, kept.map(|p| (wire_meta(p.meta), p.frame)));
                self.stats.forwarded[dir] += sent as u64;
                self.stats.overflow[dir] += dropped as u64;
                continue;
            }
            for p in rx.iter().flatten() {
                if self.rng.unit() < self.spec.loss {
                    self.stats.lost[dir] += 1;
                } else if !self.lines[dir].push(wire_meta(p.meta), p.frame, now + self.spec.delay) {
                    self.stats.overflow[dir] += 1;
                }
            }
        }
    }

    /// Sends every queued frame whose time has come.
    fn release(&mut self, ports: &[PacketSocket; 2], tx: &mut TxBatch) {
        let now = Instant::now();
        for dir in 0..2 {
            let line = &mut self.lines[dir];
            let due = line.queue.iter().take_while(|q| q.0 <= now).count();
            if due == 0 {
                continue;
            }
            let (slots, lens, metas) = (&line.slots, &line.lens, &line.metas);
            let frames = line.queue.iter().take(due).map(|&(_, i)| (metas[i], &slots[i][..lens[i]]));
            let (sent, dropped) = send_or_drop(&ports[1 - dir], tx, frames);
            self.stats.forwarded[dir] += sent as u64;
            self.stats.overflow[dir] += dropped as u64;
            for (_, i) in line.queue.drain(..due) {
                line.free.push(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_draws_match_the_probability() {
        let mut r = Rng(42);
        let n = 100_000;
        let lost = (0..n).filter(|_| r.unit() < 0.05).count();
        assert!((4_500..5_500).contains(&lost), "{lost}");
        let mut r = Rng(7);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.unit())));
    }

    #[test]
    fn delay_line_is_bounded_and_fifo() {
        let mut l = DelayLine::new(2, 100);
        let t = Instant::now();
        let m = PacketMeta::PLAIN;
        assert!(l.push(m, &[1; 60], t));
        assert!(l.push(m, &[2; 60], t));
        assert!(!l.push(m, &[3; 60], t), "full queue drops");
        assert!(!DelayLine::new(1, 10).push(m, &[0; 11], t), "oversized frame drops");
        let (_, first) = l.queue[0];
        assert_eq!(l.slots[first][..l.lens[first]], [1; 60]);
    }
}
