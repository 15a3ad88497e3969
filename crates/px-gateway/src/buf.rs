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

/// Buffers in three fixed sizes, recycled: what one frame takes is the
/// smallest size that holds it, so that a piece of a few dozen bytes does
/// not take a buffer of a whole inner frame. That bounds what one input can
/// make the engine queue by the input's own size (issue 27 item 9): a 64 KB
/// GRO super-packet of 40-byte segments, cut back into its 1,600 segments,
/// takes 1,600 small buffers (400 KB), not 1,600 full ones (15 MB); a
/// caravan of empty records, its ~1,100 datagrams in small buffers (280 KB).
/// Holds and caravans being filled take full buffers, bounded by
/// `max_held_bytes`.
#[derive(Debug)]
pub(crate) struct Pool {
    /// Free buffers of each class, smallest first.
    free: [Vec<Vec<u8>>; 3],
    /// Each class's buffer size; the last is the full size.
    sizes: [usize; 3],
    max_free: usize,
}

/// The small buffer class: headers and up to a few dozen bytes of payload.
pub(crate) const SMALL: usize = 256;
/// The middle class: any frame of a 1500-byte link (with two VLAN tags).
pub(crate) const MEDIUM: usize = 2048;

impl Pool {
    /// A pool whose largest buffers hold `size` bytes (at least [`MEDIUM`]).
    pub fn new(size: usize, max_free: usize) -> Pool {
        Pool { free: Default::default(), sizes: [SMALL, MEDIUM, size.max(MEDIUM)], max_free }
    }

    /// The largest buffer size: what a full inner frame (with headroom) takes.
    pub fn size(&self) -> usize {
        self.sizes[2]
    }

    /// A buffer of at least `len` bytes (at most [`Pool::size`]): the
    /// smallest class that holds it (contents unspecified).
    pub fn get(&mut self, len: usize) -> Vec<u8> {
        let c = self.sizes.iter().position(|s| len <= *s).unwrap_or(2);
        self.free[c].pop().unwrap_or_else(|| vec![0u8; self.sizes[c]])
    }

    /// A buffer of the full size.
    pub fn get_full(&mut self) -> Vec<u8> {
        self.get(self.sizes[2])
    }

    /// Free buffers kept, all classes.
    pub fn free_buffers(&self) -> usize {
        self.free.iter().map(Vec::len).sum()
    }

    /// Takes a buffer back into its class (one of another size is let go).
    pub fn put(&mut self, buf: Vec<u8>) {
        if let Some(c) = self.sizes.iter().position(|s| buf.len() == *s)
            && self.free[c].len() < self.max_free
        {
            self.free[c].push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_takes_the_smallest_buffer_that_holds_it() {
        let mut p = Pool::new(9160, 4);
        assert_eq!(p.get(1).len(), SMALL);
        assert_eq!(p.get(SMALL).len(), SMALL);
        assert_eq!(p.get(SMALL + 1).len(), MEDIUM);
        assert_eq!(p.get(1518).len(), MEDIUM);
        assert_eq!(p.get(MEDIUM + 1).len(), 9160);
        assert_eq!(p.get_full().len(), 9160);
        // Given back, each goes to its own class and comes out again.
        let small = p.get(10);
        p.put(small);
        assert_eq!(p.free[0].len(), 1);
        assert_eq!(p.get(100).len(), SMALL);
        assert!(p.free[0].is_empty());
        p.put(vec![0; 777]);
        assert!(p.free.iter().all(Vec::is_empty), "a foreign size is let go");
    }
}
