//! An independent observer of frame sizes on a link, for lab results that
//! do not rely on what the gateway says about itself.
//!
//! A [`FrameObserver`] opens a plain AF_PACKET socket (no virtio-net
//! header, outgoing frames included) on one interface inside a namespace
//! and counts, on a background thread, every frame in each direction by
//! its L3 size. What it sees is what the kernel hands to packet taps on
//! that interface: outgoing frames after GSO (so wire-sized when TSO is
//! off), incoming frames after GRO — turn GRO off on an observed
//! interface to count wire frames in the receive direction.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use px_io::{PacketSocket, PacketType, Poller, RxBatch, SocketConfig};

use crate::LabError;
use crate::element::{Element, open_port};
use crate::netns::Netns;

/// Counts of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SizeCounts {
    /// Frames seen.
    pub frames: u64,
    /// Largest L3 packet (frame minus the 14-byte Ethernet header).
    pub max_l3: usize,
    /// Frames with L3 size ≤ 1500.
    pub up_to_1500: u64,
    /// Frames with L3 size in 1501..=9000.
    pub up_to_9000: u64,
    /// Frames with L3 size above 9000 (only GRO/GSO super-packets).
    pub above_9000: u64,
    /// L3 bytes of the frames in `up_to_1500`.
    pub bytes_up_to_1500: u64,
    /// L3 bytes of the frames in `up_to_9000`.
    pub bytes_up_to_9000: u64,
}

impl SizeCounts {
    fn add(&mut self, frame_len: usize) {
        let l3 = frame_len.saturating_sub(14);
        self.frames += 1;
        self.max_l3 = self.max_l3.max(l3);
        match l3 {
            0..=1500 => {
                self.up_to_1500 += 1;
                self.bytes_up_to_1500 += l3 as u64;
            }
            1501..=9000 => {
                self.up_to_9000 += 1;
                self.bytes_up_to_9000 += l3 as u64;
            }
            _ => self.above_9000 += 1,
        }
    }
}

/// What an observer counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameSizes {
    /// Frames arriving on the interface.
    pub rx: SizeCounts,
    /// Frames leaving through the interface.
    pub tx: SizeCounts,
}

/// Counts frames on one interface until [`FrameObserver::stop`] (or drop).
#[derive(Debug)]
pub struct FrameObserver {
    element: Element<FrameSizes>,
}

impl FrameObserver {
    /// Starts observing `dev` in `ns`.
    pub fn start(ns: &Netns, dev: &str) -> Result<FrameObserver, LabError> {
        let cfg = SocketConfig { vnet_hdr: false, ignore_outgoing: false, ..SocketConfig::default() };
        let sock = open_port(ns, dev, &cfg)?;
        let element = Element::spawn(format!("px-observe-{dev}"), move |stop| count(&sock, stop))?;
        Ok(FrameObserver { element })
    }

    /// Stops and returns the counts (after reading what is still queued).
    pub fn stop(mut self) -> FrameSizes {
        self.element.stop()
    }
}

fn count(sock: &PacketSocket, stop: &AtomicBool) -> FrameSizes {
    let mut sizes = FrameSizes::default();
    // Slots large enough for anything GRO can build.
    let mut batch = RxBatch::new(32, px_io::MAX_FRAME);
    let mut poller = Poller::new();
    poller.add(sock.as_fd());
    loop {
        let last = stop.load(Ordering::Relaxed);
        let _ = poller.wait(Some(Duration::from_millis(20)));
        while sock.recv_batch(&mut batch).is_ok_and(|n| n > 0) {
            for p in batch.iter().flatten() {
                let dir = if p.pkt_type == PacketType::Outgoing { &mut sizes.tx } else { &mut sizes.rx };
                dir.add(p.frame.len());
            }
        }
        if last {
            return sizes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_by_l3_size() {
        let mut c = SizeCounts::default();
        for len in [60, 1514, 1515, 9014, 9015, 65000] {
            c.add(len);
        }
        assert_eq!((c.up_to_1500, c.up_to_9000, c.above_9000), (2, 2, 2));
        assert_eq!(c.frames, 6);
        assert_eq!((c.bytes_up_to_1500, c.bytes_up_to_9000), (46 + 1500, 1501 + 9000));
        assert_eq!(c.max_l3, 65000 - 14);
    }
}
