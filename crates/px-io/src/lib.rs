//! `px-io`: the Linux side of the PacketExpress gateway — frames plus GSO
//! metadata in and out of real interfaces, with no knowledge of the engine.
//!
//! - [`af_packet`]: [`PacketSocket`], an AF_PACKET socket with
//!   `PACKET_VNET_HDR` (kernel GRO super-packets in, GSO super-packets out),
//!   batched non-blocking `recvmmsg` into preallocated buffers, one way to
//!   send ([`TxQueue`], `sendmmsg` of frames queued in order), and a
//!   [`Poller`] for timer-driven loops.
//! - [`ring`]: [`RxRing`], the memory-mapped `TPACKET_V2` receive ring.
//! - [`rx`]: what either receive path hands over ([`RxPacket`], [`RxError`])
//!   and [`RxFrames`], the interface of both kinds of received batch.
//! - [`vnet`]: the virtio-net header encoding ([`VnetHeader`]) of
//!   [`PacketMeta`] (GSO kind and size, partial/valid checksum; the type is
//!   `px_wire::offload`'s, shared with the engine; a partial checksum is
//!   completed by `px_wire::offload::complete_partial`).
//! - [`iface`]: index, MTU, flags, offloads, and [`IfaceGuard`], which
//!   restores a port on drop.
//! - [`fanout`]: keeping both directions of a flow on one worker
//!   (kernel `PACKET_FANOUT` hash groups, or a software symmetric hash).
//! - [`udp`]: [`UdpSocket`], UDP sockets with DF control, `IP_MTU`,
//!   `IP_RECVFRAGSIZE`, `IP_PKTINFO`, `IP_RECVERR`, TOS, and batched
//!   receives ([`RecvBatch`]) — what F-PMTUD and caravan end hosts need
//!   (unprivileged).
//! - [`ifaddr`]: the MTU of the interface holding an address or index.
//! - [`route_table`]: routes with an MTU from one kernel table, over
//!   rtnetlink (the iMTU follower of issue 30).
//! - [`frag_capture`]: [`FragmentCapture`], every IPv4 fragment from a
//!   packet socket, before the kernel reassembles it.
//! - [`raw_ip`]: [`RawIpSockets`], whole IPv4 packets out as built (marked)
//!   and TCP/ICMP packets in, for `px survey`'s own TCP client.
//!
//! ## Batched calls or a memory-mapped ring?
//!
//! Both are here: `recvmmsg` into an [`RxBatch`] (the default) and a
//! `TPACKET_V2` ring ([`SocketConfig::rx_ring`], [`RxRing`]). Measured with
//! `examples/rx_bench.rs all 2 2` (veth between two namespaces; a
//! `sendmmsg` flood of fixed-size frames, or bulk TCP whose GRO
//! super-packets are read; 2 alternating rounds of 2 s; release build; the
//! shared 2-core machine at a load average of 4–5 from other builds), per
//! received frame, receiving thread / whole process CPU, and frames the
//! socket dropped:
//!
//! | frames        | recvmmsg                          | ring                          |
//! |---------------|-----------------------------------|-------------------------------|
//! | 64 B          | 440–730 ns / 1.0–1.5 µs, 0 drops  | 400–430 ns / 1.1–1.2 µs, 230–380 k |
//! | 1514 B        | 540–570 ns / 1.3–1.4 µs, 490–560 k| 410–420 ns / 1.2 µs, 260 k    |
//! | 9014 B        | 1.3 µs / 3.3–3.4 µs, 510–720 k    | 620–630 ns / 1.9 µs, 2–3 k    |
//! | GRO (≤ 64 KB) | 3.9–5.3 µs / 24–28 µs, 47–72 k    | 1.9–2.2 µs / 14 µs, 0–52      |
//!
//! (An earlier run at load 2.4–2.9 gave the same order, with wider spread.)
//! The ring takes the copy out of the receiving thread (the kernel copies in
//! softirq context) and, for super-packets, does not drop where an 8 MB
//! receive buffer overflows; [`SocketConfig::gateway_port`] therefore
//! comes with a ring. Through the whole gateway, though, `recvmmsg`
//! carried more (`px lab demo`, 4 rounds twice: 8.3–9.7 against 6.4–7.2
//! Gbps; see the README), so `px gateway` receives with `recvmmsg` by
//! default and opens the ring only when asked (`rx_ring`, `--rx-ring`).
//! `recvmmsg` is also the plain [`SocketConfig::default`] (no 70 MB mapping
//! per socket, fine for observers and small frames).
//!
//! Everything here needs `CAP_NET_RAW` (sockets) or `CAP_NET_ADMIN`
//! (MTU, offloads) except the pure parsing in [`vnet`] and [`fanout`].

pub mod af_packet;
pub mod fanout;
pub mod frag_capture;
pub mod iface;
pub mod ifaddr;
pub mod process;
pub mod raw_ip;
pub mod ring;
pub mod route_table;
pub mod rx;
mod sys;
pub mod udp;
pub mod vnet;

pub use af_packet::{
    OpenError, PacketSocket, Poller, Receive, RecvError, RxBatch, SendError, SocketConfig, SocketStats, TxBatch,
    TxQueue,
};
pub use fanout::{Fanout, symmetric_flow_hash, worker_for};
pub use frag_capture::FragmentCapture;
pub use iface::{IfaceCtl, IfaceError, IfaceGuard, Offload, OffloadState, ifindex};
pub use ifaddr::{ifindex_mtu, interface_mtu_of};
pub use raw_ip::RawIpSockets;
pub use ring::{RingBatch, RingError, RingGeometry, RxRing};
pub use rx::{MAX_FRAME, PacketType, RxError, RxFrames, RxPacket};
pub use sys::random_u64;
pub use udp::{DfMode, QueuedError, RecvBatch, RecvMeta, UdpSocket};
pub use vnet::{Checksum, Gso, GsoKind, PacketMeta, VnetError, VnetHeader};
