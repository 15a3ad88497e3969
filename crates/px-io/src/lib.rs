//! `px-io`: the Linux side of the PacketExpress gateway — frames plus GSO
//! metadata in and out of real interfaces, with no knowledge of the engine.
//!
//! - [`af_packet`]: [`PacketSocket`], an AF_PACKET socket with
//!   `PACKET_VNET_HDR` (kernel GRO super-packets in, GSO super-packets out),
//!   batched non-blocking `recvmmsg`/`sendmmsg` into preallocated buffers,
//!   and a [`Poller`] for timer-driven loops.
//! - [`vnet`]: [`PacketMeta`], the typed virtio-net header (GSO kind and
//!   size, partial/valid checksum), and [`vnet::finish_checksum`].
//! - [`iface`]: index, MTU, flags, offloads, and [`IfaceGuard`], which
//!   restores a port on drop.
//! - [`fanout`]: keeping both directions of a flow on one worker
//!   (kernel `PACKET_FANOUT` hash groups, or a software symmetric hash).
//!
//! Everything here needs `CAP_NET_RAW` (sockets) or `CAP_NET_ADMIN`
//! (MTU, offloads) except the pure parsing in [`vnet`] and [`fanout`].

pub mod af_packet;
pub mod fanout;
pub mod iface;
pub mod vnet;

pub use af_packet::{
    MAX_FRAME, OpenError, PacketSocket, PacketType, Poller, RecvError, RxBatch, RxError, RxPacket, SendError,
    SocketConfig, SocketStats, TxBatch, TxFrame,
};
pub use fanout::{Fanout, symmetric_flow_hash, worker_for};
pub use iface::{IfaceCtl, IfaceError, IfaceGuard, Offload, OffloadState};
pub use vnet::{Checksum, Gso, GsoKind, PacketMeta, VnetError};
