//! What goes in and out of the engine besides frames: transmit
//! descriptors with their offload metadata ([`PacketMeta`], the type the
//! I/O layer reads and writes too), verdicts, and the buffer pool that
//! keeps the hot path free of allocation.

use px_wire::offload::PacketMeta;

use crate::counters::DropReason;
use crate::port::Port;

/// Room reserved in front of held payload for the frame's headers
/// (Ethernet with two VLAN tags, IPv4/IPv6 without options, TCP with 40
/// bytes of options: 22 + 40 + 60 = 122).
pub const HEADROOM: usize = 128;

/// A frame the engine produced, to be sent on `port`.
#[derive(Debug)]
pub struct Transmit {
    pub port: Port,
    /// The frame is `buf[start..end]`; give `buf` back with
    /// [`crate::Engine::recycle`] once sent.
    pub buf: Vec<u8>,
    pub start: usize,
    pub end: usize,
    /// Offload the I/O layer applies when sending: [`PacketMeta::PLAIN`],
    /// or segmentation (virtio-net / `PACKET_VNET_HDR` semantics) with the
    /// TCP checksum field holding the pseudo-header sum.
    pub meta: PacketMeta,
}

impl Transmit {
    pub fn frame(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

/// What the caller does with the frame it passed to `handle_packet`.
///
/// Frames the engine queued meanwhile (flushes of held data, pieces, ICMP
/// errors) are ahead of this frame: drain `poll_transmit` first, then act on
/// the verdict, so that order within a flow is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    /// Send the (possibly rewritten in place) input frame out of the other
    /// port, with this offload metadata ([`PacketMeta::PLAIN`], or
    /// segmentation: the TCP payload cut into `gso.size` pieces, the TCP
    /// checksum field holding the folded pseudo-header sum over the whole
    /// TCP length, to be completed from `csum.start` with the result stored
    /// at `csum.start + csum.offset`).
    Forward { meta: PacketMeta },
    /// Send part of the input frame, `frame[start..end]`, rewritten in place
    /// (the headers moved to `start`), out of the other port, with this
    /// offload metadata (as for `Forward`). Either the rest of the input was
    /// taken by the engine (a GRO super-packet whose inner-MSS multiple is
    /// passed on as one GSO frame while its head completed a hold and its
    /// tail starts the next, the `merge` module), or the input is passed on
    /// without the link-layer padding or trailer after its IP packet
    /// (`start` 0, `end` the packet's end; counted as forwarded).
    ForwardPart { meta: PacketMeta, start: usize, end: usize },
    /// The engine took the bytes (held, merged or cut into queued frames).
    Consumed,
    /// Dropped, and counted under this reason.
    Dropped(DropReason),
}

impl Verdict {
    /// What to send of an input frame of `len` bytes: its metadata and the
    /// range of the (rewritten) frame, the whole of it for `Forward`; `None`
    /// if the engine took or dropped it.
    pub fn forwarded(&self, len: usize) -> Option<(PacketMeta, core::ops::Range<usize>)> {
        match *self {
            Verdict::Forward { meta } => Some((meta, 0..len)),
            Verdict::ForwardPart { meta, start, end } => Some((meta, start..end)),
            Verdict::Consumed | Verdict::Dropped(_) => None,
        }
    }
}

/// Fixed-size buffers, recycled.
#[derive(Debug)]
pub(crate) struct Pool {
    free: Vec<Vec<u8>>,
    size: usize,
    max_free: usize,
}

impl Pool {
    pub fn new(size: usize, max_free: usize) -> Pool {
        Pool { free: Vec::new(), size, max_free }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// A buffer of exactly `size` bytes (contents unspecified).
    pub fn get(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_else(|| vec![0u8; self.size])
    }

    pub fn put(&mut self, buf: Vec<u8>) {
        if buf.len() == self.size && self.free.len() < self.max_free {
            self.free.push(buf);
        }
    }
}
