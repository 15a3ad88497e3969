//! `px-io`: the Linux side of the PacketExpress gateway — frames plus GSO
//! metadata in and out of real interfaces, with no knowledge of the engine.
//!
//! - [`af_packet`]: [`PacketSocket`], an AF_PACKET socket with
//!   `PACKET_VNET_HDR` (kernel GRO super-packets in, GSO super-packets out),
//!   batched non-blocking `recvmmsg`/`sendmmsg` into preallocated buffers,
//!   and a [`Poller`] for timer-driven loops.
//! - [`ring`]: [`RxRing`], the memory-mapped `TPACKET_V2` receive ring.
//! - [`vnet`]: [`PacketMeta`], the typed virtio-net header (GSO kind and
//!   size, partial/valid checksum), and [`vnet::finish_checksum`].
//! - [`iface`]: index, MTU, flags, offloads, and [`IfaceGuard`], which
//!   restores a port on drop.
//! - [`fanout`]: keeping both directions of a flow on one worker
//!   (kernel `PACKET_FANOUT` hash groups, or a software symmetric hash).
//!
//! ## Batched calls or a memory-mapped ring?
//!
//! Both are here: `recvmmsg` into an [`RxBatch`] (the default) and a
//! `TPACKET_V2` ring ([`SocketConfig::rx_ring`], [`RxRing`]). Measured with
//! `examples/rx_bench.rs` (veth between two namespaces, a `sendmmsg` flood,
//! 3 alternating rounds of 2 s, release build, on the shared 2-core machine
//! with a load average of 2.4–2.9 from other builds), per received frame:
//!
//! | frame  | recvmmsg: rx thread / all CPU | ring: rx thread / all CPU |
//! |--------|-------------------------------|---------------------------|
//! | 64 B   | 690–1100 ns / 1620–2250 ns    | 440–710 ns / 1260–2060 ns |
//! | 1514 B | 670–1450 ns / 1570–2910 ns    | 720–990 ns / 2170–2880 ns |
//! | 9014 B | 1330–2180 ns / 3380–4570 ns   | 630–1360 ns / 2130–4070 ns|
//!
//! The ring takes the copy out of the receiving thread (the kernel copies
//! in softirq context), so that thread spends 30–50 % less per frame, and
//! the whole process 10–35 % less on 9 KB frames; on small frames the
//! rounds overlap and `recvmmsg` delivered more frames per second
//! (0.8 M/s against 0.6–0.8 M/s). Neither wins clearly within this
//! machine's noise, so `recvmmsg` stays the default (no 70 MB mapping per
//! socket for 64 KB slots, nothing to get wrong at setup) and the ring is
//! one option away for the gateway to measure under its own load.
//!
//! Everything here needs `CAP_NET_RAW` (sockets) or `CAP_NET_ADMIN`
//! (MTU, offloads) except the pure parsing in [`vnet`] and [`fanout`].

pub mod af_packet;
pub mod fanout;
pub mod iface;
pub mod ring;
pub mod vnet;

pub use af_packet::{
    MAX_FRAME, OpenError, PacketSocket, PacketType, Poller, RecvError, RxBatch, RxError, RxPacket, SendError,
    SendOutcome, SocketConfig, SocketStats, TxBatch, TxFrame,
};
pub use fanout::{Fanout, symmetric_flow_hash, worker_for};
pub use iface::{IfaceCtl, IfaceError, IfaceGuard, Offload, OffloadState};
pub use ring::{RingError, RingGeometry, RxRing};
pub use vnet::{Checksum, Gso, GsoKind, PacketMeta, VnetError};
