//! The datapath seam: what a worker asks of its two ports, whatever
//! carries their frames.
//!
//! A worker ([`super::worker`]) knows the engine, the capture, the metrics
//! and the order frames must leave in; it knows nothing of sockets or
//! devices. Its ports are one [`Ports`]: wait for frames (or not: a polling
//! datapath never sleeps), receive a [`Batch`] from one receive queue,
//! rewrite its frames in place, and hand back, per port, the ordered list
//! of [`Frame`]s to send — engine-made or received frames passed on. This
//! is the shape of DPDK's `rte_eth_rx_burst`/`rte_eth_tx_burst` and of
//! VPP's device-input nodes: a batch of frames with their offload metadata
//! in, a batch out.
//!
//! Implementations: [`af_packet`] (packet sockets with `PACKET_VNET_HDR`,
//! the default) and, in builds with DPDK, `dpdk` (poll-mode ports).

pub mod af_packet;
pub mod dpdk;
pub mod keys;

use std::time::Duration;

use px_gateway::{Port, Transmit};
use px_io::{PacketMeta, RecvError, RxFrames};

/// A frame to send on one port: one the engine made (kept until sent, then
/// its buffer goes back to the engine), or a received frame passed on from
/// its slot of the current receive batch.
#[derive(Debug)]
pub enum Frame {
    Made(Transmit),
    /// A received frame passed on: the `range` of it the engine's verdict
    /// names (the whole frame, or the part a merge rewrote in place).
    Forward {
        slot: usize,
        meta: PacketMeta,
        range: core::ops::Range<usize>,
    },
}

impl Frame {
    /// Metadata and bytes to send; `None` for a forward without the batch
    /// it came from, or from a slot the batch no longer yields (not seen:
    /// it was readable when the engine took it).
    pub fn bytes<'a>(&'a self, rx: Option<&'a dyn RxFrames>) -> Option<(PacketMeta, &'a [u8])> {
        match self {
            Frame::Made(t) => Some((t.meta, t.frame())),
            Frame::Forward { slot, meta, range } => {
                rx?.get(*slot).ok().and_then(|p| p.frame.get(range.clone())).map(|f| (*meta, f))
            }
        }
    }
}

/// Where a port's frames go.
pub trait Sink {
    /// The received frames that [`Frame::Forward`]s name (none for a sink
    /// of the engine's own frames).
    fn received(&self) -> Option<&dyn RxFrames>;

    /// Sends `frames` out of `port` in the order given; returns how many
    /// could not be sent (each counted as a send error). The caller gives
    /// the engine's buffers back afterwards, except those the sink took
    /// (lent to a port without a copy: see [`Ports::reclaim`]).
    fn send(&mut self, port: Port, frames: &mut [Frame]) -> u64;
}

/// A worker's two ports.
///
/// Receive queues are numbered `0..queues()` and served in that order
/// each round; each belongs to one port. A batch borrows the ports until it
/// is dropped; it can send out of the *other* port (what the engine passes
/// on), and the worker sends what goes back out of the receiving port (the
/// engine's own frames, ICMP errors) through [`Ports`] itself once the
/// batch is gone.
pub trait Ports: Sink {
    /// A received batch.
    type Batch<'a>: Batch
    where
        Self: 'a;

    /// Waits up to `timeout` until a receive queue may have frames
    /// (a polling datapath returns at once). `false`: the wait failed
    /// (look at the stop flag and try again).
    fn wait(&mut self, timeout: Duration) -> bool;

    /// How many receive queues there are.
    fn queues(&self) -> usize;

    /// Receives a batch from queue `q`: `Ok(None)` if it has nothing (or
    /// was not ready at the last [`Ports::wait`]).
    fn recv(&mut self, q: usize) -> Result<Option<Self::Batch<'_>>, RecvError>;

    /// Whether every receive queue is empty now, looked at without
    /// waiting (`false` where it cannot be known).
    fn idle(&mut self) -> bool;

    /// Frames the ports dropped on receive since the last call (a full
    /// socket buffer; a full receive ring).
    fn take_drops(&mut self) -> u64;

    /// Gives the engine's buffers that were lent to a port and that the
    /// port is done with to `give` (none where nothing is lent).
    fn reclaim(&mut self, _give: &mut dyn FnMut(Vec<u8>)) {}
}

/// One received batch: its frames in arrival order, rewritable in place,
/// and the way out of the other port.
pub trait Batch: RxFrames + Sink {
    /// The port it was received on.
    fn port(&self) -> Port;

    /// Whether it holds as many frames as one receive takes (more may be
    /// waiting).
    fn is_full(&self) -> bool;
}
