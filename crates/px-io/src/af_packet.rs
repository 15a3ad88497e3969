//! AF_PACKET sockets bound to one interface, with virtio-net GSO metadata
//! and batched, non-blocking, allocation-free receive and send.
//!
//! One [`PacketSocket`] sees every frame arriving on its interface (after
//! kernel GRO, so with GRO on a frame can be a 64 KB super-packet, described
//! by its [`PacketMeta`]) and can send frames, including super-packets the
//! kernel cuts to `gso.size` (GSO). Guarantees:
//!
//! - frames this socket (or anyone) *sends* on the interface are not read
//!   back (`PACKET_IGNORE_OUTGOING`, and its fan-out flag for a socket in a
//!   fan-out group), so a bump-in-the-wire does not loop;
//! - [`PacketSocket::recv_batch`] and [`TxQueue::send`] make one syscall
//!   per batch (`recvmmsg`/`sendmmsg`) and never allocate: frames land in
//!   the [`RxBatch`]'s preallocated slots and leave from the caller's
//!   buffers, queued in order in a [`TxQueue`] ([`PacketSocket::queue`]:
//!   the one way to send, for frames of any origin, given as metadata plus
//!   bytes; what to do when the kernel will not take them is the caller's
//!   policy);
//! - with a receive ring ([`SocketConfig::rx_ring`]) frames are read in
//!   place from the mapping and can be sent on from there
//!   ([`PacketSocket::recv_ring_batch`]), with no copy in user space;
//! - nothing blocks: receive returns 0 when nothing is queued and
//!   [`Poller`] waits with a sub-millisecond timeout so the caller can run
//!   its timers;
//! - a truncated frame (larger than a slot) or a header the kernel should
//!   never write is reported per frame ([`RxError`]), never as a panic.
//!
//! Batched calls or the `TPACKET_V2` ring ([`SocketConfig::rx_ring`]): see
//! the crate docs for the measurements.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::fanout::Fanout;
use crate::iface::{self, IfaceError};
use crate::ring::{RingBatch, RingError, RingGeometry, RxRing};
use crate::rx::{
    PacketType, RxError, RxFrames, RxPacket, TP_STATUS_VLAN_VALID, VLAN_ROOM, insert_vlan_tag, shift_vnet_for_tag,
};
use crate::sys::{getsockopt, setsockopt};
use crate::vnet::{PacketMeta, VNET_HDR_LEN, VnetHeader};

/// How to open a [`PacketSocket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketConfig {
    /// Exchange a virtio-net header with every frame (GRO/GSO metadata).
    pub vnet_hdr: bool,
    /// Do not receive frames sent on the interface (by anyone on this host).
    pub ignore_outgoing: bool,
    /// Hold the interface in promiscuous mode while the socket is open.
    pub promiscuous: bool,
    /// Join a `PACKET_FANOUT` hash group (one per port; see [`crate::fanout`]).
    pub fanout: Option<Fanout>,
    /// Receive buffer in bytes (forced past `rmem_max` when root); 0 keeps
    /// the default.
    pub rcvbuf: usize,
    /// Send buffer in bytes (forced past `wmem_max` when root); 0 keeps
    /// the default.
    pub sndbuf: usize,
    /// Receive through a memory-mapped ring of this size instead of
    /// `recvmmsg` ([`PacketSocket::recv_ring`]).
    pub rx_ring: Option<RingGeometry>,
    /// Hand frames straight to the driver, skipping the qdisc
    /// (`PACKET_QDISC_BYPASS`): faster, but no queueing discipline applies.
    pub qdisc_bypass: bool,
    /// Which frames the socket receives ([`Receive`]).
    pub receive: Receive,
}

/// Which received frames a packet socket gets. The kernel hands frames to
/// sockets bound to every protocol *before* TC ingress runs, and to
/// sockets bound to one protocol *after* it: a TC program that redirects a
/// frame (the gateway's kernel fast path) hides it from the second kind
/// only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Receive {
    /// Every frame (`ETH_P_ALL`), before TC.
    #[default]
    All,
    /// IPv4 frames only (`ETH_P_IP`), after TC.
    Ipv4,
    /// IPv6 frames only (`ETH_P_IPV6`), after TC.
    Ipv6,
    /// Every frame that is neither IPv4 nor IPv6, and every frame that
    /// carried a VLAN tag (`ETH_P_ALL` with a socket filter), before TC:
    /// with an [`Receive::Ipv4`] and an [`Receive::Ipv6`] socket, every
    /// untagged frame exactly once. (The kernel clears a tag no VLAN device
    /// took before it serves protocol-bound sockets, so tagged frames must
    /// come through here; whoever pairs this socket with those must keep
    /// tagged frames from reaching them, as the gateway's TC program does.)
    NotIp,
    /// Nothing: a socket that only sends. Its frames' protocol is read
    /// from their Ethernet header, as for an `All` socket.
    Nothing,
}

impl Receive {
    /// The protocol the socket is bound to (network byte order is the
    /// caller's), 0 for none.
    fn protocol(self) -> u16 {
        match self {
            Receive::All | Receive::NotIp => libc::ETH_P_ALL as u16,
            Receive::Ipv4 => libc::ETH_P_IP as u16,
            Receive::Ipv6 => libc::ETH_P_IPV6 as u16,
            Receive::Nothing => 0,
        }
    }
}

impl SocketConfig {
    /// A gateway port: GRO super-packets through a ring of 1024 64-KB slots
    /// (measured cheaper than `recvmmsg` per super-packet, and it does not
    /// drop where an 8 MB receive buffer does: see the crate docs),
    /// promiscuous, in fan-out group `group` (if any). `px gateway` takes
    /// the ring off (`rx_ring: None`) unless configured with `rx_ring`,
    /// because through the whole gateway `recvmmsg` carried more.
    pub fn gateway_port(fanout: Option<Fanout>) -> SocketConfig {
        SocketConfig {
            promiscuous: true,
            fanout,
            rx_ring: Some(RingGeometry::SUPER_PACKETS),
            ..SocketConfig::default()
        }
    }
}

impl Default for SocketConfig {
    /// Vnet header on, outgoing ignored, 8 MB buffers, `recvmmsg` (no ring:
    /// cheap to open, for tools, observers and tests).
    fn default() -> Self {
        SocketConfig {
            vnet_hdr: true,
            ignore_outgoing: true,
            promiscuous: false,
            fanout: None,
            rcvbuf: 8 << 20,
            sndbuf: 8 << 20,
            qdisc_bypass: false,
            rx_ring: None,
            receive: Receive::All,
        }
    }
}

/// Why a socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The interface name is invalid or does not exist.
    #[error(transparent)]
    Iface(#[from] IfaceError),
    /// The receive ring could not be set up.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// A step of the socket setup failed (`socket`, `bind`, a socket option).
    #[error("{step} on {iface}: {source}")]
    Socket {
        /// The failing step, e.g. `PACKET_FANOUT`.
        step: &'static str,
        /// The interface.
        iface: String,
        /// The OS error.
        source: io::Error,
    },
}

/// Why a batch receive failed as a whole (per-frame problems are [`RxError`]).
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// `recvmmsg` failed with something other than "nothing queued".
    #[error("recvmmsg: {0}")]
    Os(io::Error),
}

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The send buffer is full; wait until writable and retry.
    #[error("send buffer full")]
    WouldBlock,
    /// The kernel refused frame `sent` (a batch's first `sent` frames left).
    #[error("frame {sent}: {source}")]
    Refused {
        /// Frames of the batch sent before the refused one.
        sent: usize,
        /// The OS error (`EMSGSIZE` too large, `EINVAL` bad GSO header,
        /// `ENOBUFS` dropped by the device...).
        source: io::Error,
    },
}

/// Counters the kernel keeps per packet socket (`PACKET_STATISTICS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketStats {
    /// Frames queued to the socket since the last read.
    pub packets: u32,
    /// Frames dropped because the receive buffer was full.
    pub drops: u32,
}

/// An AF_PACKET raw socket bound to one interface, non-blocking.
#[derive(Debug)]
pub struct PacketSocket {
    // Field order: the ring is unmapped before the socket closes.
    ring: Option<RxRing>,
    fd: OwnedFd,
    ifindex: u32,
    iface: String,
    vnet_hdr: bool,
}

impl PacketSocket {
    /// Opens a socket on `iface` (in the calling thread's namespace).
    pub fn open(iface: &str, cfg: &SocketConfig) -> Result<PacketSocket, OpenError> {
        let ifindex = iface::ifindex(iface)?;
        let err = |step| {
            let iface = iface.to_owned();
            move |source| OpenError::Socket { step, iface, source }
        };
        // Protocol 0: receive nothing until bound to this interface below,
        // so no frame of another interface slips in.
        let ty = libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: socket(2) with constant arguments.
        let raw = unsafe { libc::socket(libc::AF_PACKET, ty, 0) };
        if raw < 0 {
            return Err(err("socket")(io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        let sol = libc::SOL_PACKET;
        if cfg.vnet_hdr {
            setsockopt(&fd, sol, libc::PACKET_VNET_HDR, &one).map_err(err("PACKET_VNET_HDR"))?;
        }
        if cfg.ignore_outgoing {
            setsockopt(&fd, sol, libc::PACKET_IGNORE_OUTGOING, &one).map_err(err("PACKET_IGNORE_OUTGOING"))?;
        }
        // VLAN tags the kernel takes out of received frames come back as a
        // control message (`recvmmsg`; the ring has them in its slot header).
        setsockopt(&fd, sol, libc::PACKET_AUXDATA, &one).map_err(err("PACKET_AUXDATA"))?;
        if cfg.qdisc_bypass {
            setsockopt(&fd, sol, libc::PACKET_QDISC_BYPASS, &one).map_err(err("PACKET_QDISC_BYPASS"))?;
        }
        set_buf(&fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, cfg.rcvbuf).map_err(err("SO_RCVBUF"))?;
        set_buf(&fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, cfg.sndbuf).map_err(err("SO_SNDBUF"))?;
        // The ring goes on before bind, while no frame can reach the socket.
        let ring = cfg.rx_ring.map(|g| RxRing::attach(&fd, cfg.vnet_hdr, g)).transpose()?;
        if cfg.receive == Receive::NotIp {
            // Before bind too: no IP frame reaches it, ever.
            attach_not_ip_filter(&fd).map_err(err("SO_ATTACH_FILTER"))?;
        }
        bind(&fd, ifindex, cfg.receive.protocol()).map_err(err("bind"))?;
        if cfg.promiscuous {
            // SAFETY: packet_mreq is plain old data; zero is valid.
            let mut mr: libc::packet_mreq = unsafe { zeroed() };
            mr.mr_ifindex = ifindex as libc::c_int;
            mr.mr_type = libc::PACKET_MR_PROMISC as libc::c_ushort;
            setsockopt(&fd, sol, libc::PACKET_ADD_MEMBERSHIP, &mr).map_err(err("PACKET_MR_PROMISC"))?;
        }
        if let Some(f) = cfg.fanout {
            let v = f.option_value(cfg.ignore_outgoing) as libc::c_int;
            setsockopt(&fd, sol, libc::PACKET_FANOUT, &v).map_err(err("PACKET_FANOUT"))?;
        }
        Ok(PacketSocket { ring, fd, ifindex, iface: iface.to_owned(), vnet_hdr: cfg.vnet_hdr })
    }

    /// The interface index it is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface name it is bound to.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Whether frames carry a virtio-net header ([`SocketConfig::vnet_hdr`]).
    pub fn has_vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }

    /// Receives up to `batch.capacity()` frames without blocking; returns
    /// how many (0 when nothing is queued). Read them with [`RxBatch::get`].
    pub fn recv_batch(&self, batch: &mut RxBatch) -> Result<usize, RecvError> {
        batch.prepare(self.vnet_hdr);
        let n = recvmmsg(self.fd.as_fd(), &mut batch.msgs);
        match n {
            Ok(n) => {
                batch.count = n;
                batch.restore_tags();
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                batch.count = 0;
                Ok(0)
            }
            Err(e) => {
                batch.count = 0;
                Err(RecvError::Os(e))
            }
        }
    }

    /// Hands up to `max` frames from the receive ring to `f` (see
    /// [`RxRing::recv`]); returns how many. Always 0 for a socket opened
    /// without [`SocketConfig::rx_ring`].
    pub fn recv_ring<F: FnMut(Result<RxPacket<'_>, RxError>)>(&mut self, max: usize, f: F) -> usize {
        self.ring.as_mut().map_or(0, |r| r.recv(max, f))
    }

    /// Borrows up to `max` ready frames from the receive ring (see
    /// [`RxRing::batch`]); `None` for a socket without a ring.
    pub fn recv_ring_batch(&mut self, max: usize) -> Option<RingBatch<'_>> {
        self.ring.as_mut().map(|r| r.batch(max))
    }

    /// Whether the socket receives through a ring.
    pub fn has_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// An empty send queue on this socket, using `batch` as its scratch:
    /// push frames in the order they must leave, then send (see
    /// [`TxQueue`]).
    pub fn queue<'a>(&'a self, batch: &'a mut TxBatch) -> TxQueue<'a> {
        TxQueue { sock: self, batch, queued: 0, sent: 0 }
    }

    /// Reads and resets the kernel's per-socket counters.
    pub fn take_stats(&self) -> io::Result<SocketStats> {
        let st: libc::tpacket_stats = getsockopt(&self.fd, libc::SOL_PACKET, libc::PACKET_STATISTICS)?;
        Ok(SocketStats { packets: st.tp_packets, drops: st.tp_drops })
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn set_buf(fd: &OwnedFd, force: libc::c_int, plain: libc::c_int, bytes: usize) -> io::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let v = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX / 2);
    // The kernel doubles the value; FORCE needs CAP_NET_ADMIN, else fall back.
    setsockopt(fd, libc::SOL_SOCKET, force, &v).or_else(|_| setsockopt(fd, libc::SOL_SOCKET, plain, &v))
}

/// A classic socket filter that takes every frame that carried a VLAN tag,
/// and every frame whose protocol (as the kernel dispatches it,
/// `skb->protocol`) is neither IPv4 nor IPv6.
fn attach_not_ip_filter(fd: &OwnedFd) -> io::Result<()> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let prog = [
        // A = whether a VLAN tag was taken out of the frame: keep it.
        op(LD_W_ABS, 0, 0, (libc::SKF_AD_OFF + libc::SKF_AD_VLAN_TAG_PRESENT) as u32),
        op(JEQ_K, 0, 3, 0),
        // A = skb->protocol, host order.
        op(LD_W_ABS, 0, 0, (libc::SKF_AD_OFF + libc::SKF_AD_PROTOCOL) as u32),
        op(JEQ_K, 2, 0, libc::ETH_P_IP as u32),
        op(JEQ_K, 1, 0, libc::ETH_P_IPV6 as u32),
        op(RET_K, 0, 0, u32::MAX),
        op(RET_K, 0, 0, 0),
    ];
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr().cast_mut() };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

fn bind(fd: &OwnedFd, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; zero is valid.
    let mut sa: libc::sockaddr_ll = unsafe { zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = protocol.to_be();
    sa.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `sa` is a valid sockaddr_ll and its true size is passed.
    let r = unsafe {
        libc::bind(fd.as_raw_fd(), (&raw const sa).cast(), size_of::<libc::sockaddr_ll>() as libc::socklen_t)
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The `PACKET_AUXDATA` control message of a received message, if any.
fn auxdata(m: &libc::msghdr) -> Option<libc::tpacket_auxdata> {
    if m.msg_control.is_null() || m.msg_controllen < size_of::<libc::cmsghdr>() {
        return None;
    }
    // SAFETY: the kernel wrote `msg_controllen` bytes of well-formed control
    // messages into the buffer `msg_control` points to (the RxBatch's own,
    // alive); CMSG_FIRSTHDR/NXTHDR stay within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            let h = &*c;
            let need = libc::CMSG_LEN(size_of::<libc::tpacket_auxdata>() as u32) as usize;
            if h.cmsg_level == libc::SOL_PACKET && h.cmsg_type == libc::PACKET_AUXDATA && h.cmsg_len as usize >= need {
                return Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::tpacket_auxdata>()));
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    None
}

fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec { iov_base: b.as_ptr() as *mut libc::c_void, iov_len: b.len() }
}

fn recvmmsg(fd: BorrowedFd<'_>, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    let flags = libc::MSG_DONTWAIT | libc::MSG_TRUNC;
    // SAFETY: every mmsghdr points to buffers owned by the RxBatch that
    // `msgs` belongs to, set up by `RxBatch::prepare` for this call; the
    // kernel writes at most `iov_len` bytes into each.
    let r =
        unsafe { libc::recvmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, flags, std::ptr::null_mut()) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r as usize) }
}

fn sendmmsg(fd: BorrowedFd<'_>, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    // SAFETY: every mmsghdr points to the TxBatch's own headers and to frames
    // loaded by `TxQueue::push` from slices that outlive the queue (its
    // lifetime bounds them); the kernel only reads them and writes `msg_len`.
    let r = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, libc::MSG_DONTWAIT) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r as usize) }
}

/// Points one message at an address buffer (`name`, `namelen` bytes; null
/// for none) and at a header+frame iovec pair, clearing the outputs.
fn point(m: &mut libc::mmsghdr, name: *mut libc::c_void, namelen: usize, iov: &mut [libc::iovec; 2]) {
    m.msg_hdr.msg_name = name;
    m.msg_hdr.msg_namelen = namelen as libc::socklen_t;
    m.msg_hdr.msg_iov = iov.as_mut_ptr();
    m.msg_hdr.msg_iovlen = iov.len();
    m.msg_hdr.msg_control = std::ptr::null_mut();
    m.msg_hdr.msg_controllen = 0;
    m.msg_hdr.msg_flags = 0;
    m.msg_len = 0;
}

/// Preallocated receive slots for [`PacketSocket::recv_batch`]; reused for
/// every call, so the receive path does not allocate.
pub struct RxBatch {
    slot: usize,
    bufs: Vec<u8>,
    hdrs: Vec<[u8; VNET_HDR_LEN]>,
    /// Control messages (`PACKET_AUXDATA`), 8-byte aligned.
    ctrls: Vec<[u64; 8]>,
    /// Whether frame `i` got its VLAN tag back (it then starts at the slot
    /// start; otherwise `VLAN_ROOM` bytes in).
    tagged: Vec<bool>,
    addrs: Vec<libc::sockaddr_ll>,
    iovs: Vec<[libc::iovec; 2]>,
    msgs: Vec<libc::mmsghdr>,
    count: usize,
    vnet: bool,
}

// SAFETY: the raw pointers inside `iovs`/`msgs` point only into this
// struct's own heap buffers, which move with it; nothing is shared.
unsafe impl Send for RxBatch {}

impl std::fmt::Debug for RxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxBatch")
            .field("capacity", &self.msgs.len())
            .field("slot", &self.slot)
            .field("count", &self.count)
            .finish()
    }
}

impl RxBatch {
    /// `capacity` slots of `slot` bytes each ([`crate::MAX_FRAME`] holds any GRO
    /// super-packet; a smaller slot reports larger frames as truncated). The
    /// first 4 bytes of a slot are kept for a VLAN tag the kernel took out.
    pub fn new(capacity: usize, slot: usize) -> RxBatch {
        let capacity = capacity.max(1);
        RxBatch {
            slot,
            bufs: vec![0; capacity * slot],
            hdrs: vec![[0; VNET_HDR_LEN]; capacity],
            ctrls: vec![[0; 8]; capacity],
            tagged: vec![false; capacity],
            // SAFETY: these C structs are plain old data; zero is valid.
            addrs: vec![unsafe { zeroed() }; capacity],
            iovs: vec![[iovec(&[]), iovec(&[])]; capacity],
            // SAFETY: as above.
            msgs: vec![unsafe { zeroed() }; capacity],
            count: 0,
            vnet: false,
        }
    }

    /// Slots in the batch.
    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// Frames received by the last [`PacketSocket::recv_batch`].
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if the last receive got nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Points every message at its slot. Runs before each receive: cheap
    /// (no syscall, no allocation), and it keeps the pointers right even
    /// though the struct may have moved since the last call.
    fn prepare(&mut self, vnet: bool) {
        self.vnet = vnet;
        let hlen = if vnet { VNET_HDR_LEN } else { 0 };
        let bufs = self.bufs.as_mut_ptr();
        for i in 0..self.msgs.len() {
            self.iovs[i] = [
                libc::iovec { iov_base: self.hdrs[i].as_mut_ptr().cast(), iov_len: hlen },
                // SAFETY: slot i lies inside `bufs` (capacity * slot bytes);
                // the frame goes VLAN_ROOM bytes in (a slot is at least that).
                libc::iovec {
                    iov_base: unsafe { bufs.add(i * self.slot + VLAN_ROOM.min(self.slot)) }.cast(),
                    iov_len: self.slot.saturating_sub(VLAN_ROOM),
                },
            ];
            let name = (&raw mut self.addrs[i]).cast();
            point(&mut self.msgs[i], name, size_of::<libc::sockaddr_ll>(), &mut self.iovs[i]);
            self.msgs[i].msg_hdr.msg_control = self.ctrls[i].as_mut_ptr().cast();
            self.msgs[i].msg_hdr.msg_controllen = size_of::<[u64; 8]>() as _;
            self.tagged[i] = false;
        }
    }

    /// Puts back the VLAN tags the kernel took out of the received frames
    /// (reported in `PACKET_AUXDATA`), moving the virtio-net offsets with
    /// them, so each frame reads and forwards as it was on the wire.
    fn restore_tags(&mut self) {
        let hlen = if self.vnet { VNET_HDR_LEN } else { 0 };
        for i in 0..self.count {
            let Some(aux) = auxdata(&self.msgs[i].msg_hdr) else { continue };
            if aux.tp_status & TP_STATUS_VLAN_VALID == 0 || self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                continue;
            }
            let Some(len) = (self.msgs[i].msg_len as usize).checked_sub(hlen) else { continue };
            let slot = &mut self.bufs[i * self.slot..(i + 1) * self.slot];
            if insert_vlan_tag(slot, 0, len, aux.tp_status, aux.tp_vlan_tci, aux.tp_vlan_tpid) {
                self.tagged[i] = true;
                if self.vnet {
                    shift_vnet_for_tag(&mut self.hdrs[i]);
                }
            }
        }
    }

    /// Where frame `i` starts in `bufs`.
    fn start(&self, i: usize) -> usize {
        i * self.slot + if self.tagged[i] { 0 } else { VLAN_ROOM.min(self.slot) }
    }

    /// Frame length (without vnet header) and validity of frame `i`.
    fn frame_len(&self, i: usize) -> Result<usize, RxError> {
        if i >= self.count {
            return Err(RxError::Index(i));
        }
        let total = self.msgs[i].msg_len as usize;
        let hlen = if self.vnet { VNET_HDR_LEN } else { 0 };
        let len = total.checked_sub(hlen).ok_or(RxError::Short(total))?;
        let cap = self.slot.saturating_sub(VLAN_ROOM);
        if len > cap || self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(RxError::Truncated { len, cap });
        }
        Ok(len + if self.tagged[i] { VLAN_ROOM } else { 0 })
    }

    fn meta(&self, i: usize) -> Result<PacketMeta, RxError> {
        if self.vnet { Ok(PacketMeta::parse(&self.hdrs[i])?) } else { Ok(PacketMeta::PLAIN) }
    }

    /// Frame `i` of the last receive.
    pub fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError> {
        let len = self.frame_len(i)?;
        let meta = self.meta(i)?;
        let start = self.start(i);
        Ok(RxPacket {
            meta,
            frame: &self.bufs[start..start + len],
            pkt_type: PacketType::from(self.addrs[i].sll_pkttype),
        })
    }

    /// Frame `i` for in-place rewriting (MSS option, checksums).
    pub fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
        let len = self.frame_len(i)?;
        let meta = self.meta(i)?;
        let start = self.start(i);
        Ok((meta, &mut self.bufs[start..start + len]))
    }

    /// All frames of the last receive, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = Result<RxPacket<'_>, RxError>> {
        (0..self.count).map(|i| self.get(i))
    }
}

impl RxFrames for RxBatch {
    fn len(&self) -> usize {
        RxBatch::len(self)
    }
    fn get(&self, i: usize) -> Result<RxPacket<'_>, RxError> {
        RxBatch::get(self, i)
    }
    fn get_mut(&mut self, i: usize) -> Result<(PacketMeta, &mut [u8]), RxError> {
        RxBatch::get_mut(self, i)
    }
}

/// Reusable `sendmmsg` scratch space (headers and message vectors) for a
/// [`TxQueue`]; the frames themselves are not copied.
pub struct TxBatch {
    hdrs: Vec<[u8; VNET_HDR_LEN]>,
    iovs: Vec<[libc::iovec; 2]>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers are rewritten by `load` before every use and
// point at nothing between calls that another thread could observe.
unsafe impl Send for TxBatch {}

impl std::fmt::Debug for TxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxBatch").field("capacity", &self.msgs.len()).finish()
    }
}

impl TxBatch {
    /// Scratch for up to `capacity` frames per `sendmmsg`.
    pub fn new(capacity: usize) -> TxBatch {
        let capacity = capacity.max(1);
        TxBatch {
            hdrs: vec![[0; VNET_HDR_LEN]; capacity],
            iovs: vec![[iovec(&[]), iovec(&[])]; capacity],
            // SAFETY: mmsghdr is plain old data; zero is valid.
            msgs: vec![unsafe { zeroed() }; capacity],
        }
    }

    /// Frames per `sendmmsg`.
    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// Points message `i` at `frame` (which must stay alive until sent).
    fn load_one(&mut self, i: usize, vnet: bool, meta: &PacketMeta, frame: &[u8]) {
        let hlen = if vnet { VNET_HDR_LEN } else { 0 };
        self.hdrs[i] = meta.to_bytes();
        self.iovs[i] = [libc::iovec { iov_base: self.hdrs[i].as_mut_ptr().cast(), iov_len: hlen }, iovec(frame)];
        point(&mut self.msgs[i], std::ptr::null_mut(), 0, &mut self.iovs[i]);
    }
}

/// Frames queued in order for one socket's next `sendmmsg`, borrowed (not
/// copied) until sent: engine buffers and received slots alike, each given
/// as metadata plus bytes. Filled incrementally with [`TxQueue::push`] (or
/// [`TxQueue::fill`]) up to the [`TxBatch`]'s capacity and handed to the
/// kernel with [`TxQueue::send`]; nothing allocates. Frames leave in the
/// order they were pushed; a frame the kernel refuses is dropped from the
/// queue (reported once), so the frames behind it are not held up.
#[derive(Debug)]
pub struct TxQueue<'a> {
    sock: &'a PacketSocket,
    batch: &'a mut TxBatch,
    /// Messages loaded, `0..queued`.
    queued: usize,
    /// Of them, handed to the kernel (or refused), `0..sent`.
    sent: usize,
}

impl<'a> TxQueue<'a> {
    /// Appends a frame, which must stay alive until sent; `false` (and
    /// nothing queued) when the queue is full: send first.
    pub fn push(&mut self, meta: &PacketMeta, frame: &'a [u8]) -> bool {
        if self.is_full() {
            return false;
        }
        self.batch.load_one(self.queued, self.sock.vnet_hdr, meta, frame);
        self.queued += 1;
        true
    }

    /// Pushes frames from `frames` until the queue is full or they run
    /// out; returns how many frames are now waiting to be sent.
    pub fn fill<'f: 'a, I: Iterator<Item = (PacketMeta, &'f [u8])>>(&mut self, frames: &mut I) -> usize {
        while !self.is_full() {
            let Some((meta, frame)) = frames.next() else { break };
            self.push(&meta, frame);
        }
        self.pending()
    }

    /// Frames pushed and not sent yet.
    pub fn pending(&self) -> usize {
        self.queued - self.sent
    }

    /// True if no frame waits.
    pub fn is_empty(&self) -> bool {
        self.pending() == 0
    }

    /// True if [`TxQueue::push`] would refuse: send first. (Slots free up
    /// only once everything queued has left.)
    pub fn is_full(&self) -> bool {
        self.queued == self.batch.capacity()
    }

    /// Forgets the frames not sent yet; returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.pending();
        (self.queued, self.sent) = (0, 0);
        n
    }

    /// One `sendmmsg` of the waiting frames. `Ok(n)`: the kernel took the
    /// first `n` (fewer than waiting: call again, the next call says why);
    /// `Ok(0)` when nothing waits. [`SendError::WouldBlock`]: the send
    /// buffer is full and nothing left; retry when writable.
    /// [`SendError::Refused`] (with `sent: 0`): the kernel refused the
    /// first waiting frame, which is dropped from the queue.
    pub fn send(&mut self) -> Result<usize, SendError> {
        if self.is_empty() {
            return Ok(0);
        }
        let r = match sendmmsg(self.sock.fd.as_fd(), &mut self.batch.msgs[self.sent..self.queued]) {
            Ok(n) => {
                self.sent += n;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(SendError::WouldBlock),
            Err(source) => {
                self.sent += 1;
                Err(SendError::Refused { sent: 0, source })
            }
        };
        if self.is_empty() {
            self.clear();
        }
        r
    }
}

/// Waits until any of a set of descriptors is readable, with a timeout of
/// nanosecond resolution (`ppoll`), so merge timers well under a
/// millisecond can be honoured. The descriptor list is built once.
#[derive(Debug)]
pub struct Poller {
    fds: Vec<libc::pollfd>,
}

impl Poller {
    /// An empty set.
    pub fn new() -> Poller {
        Poller { fds: Vec::new() }
    }

    /// Adds a descriptor to watch for readability; returns its index. The
    /// caller keeps the descriptor open while the poller is used.
    pub fn add(&mut self, fd: BorrowedFd<'_>) -> usize {
        self.fds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        self.fds.len() - 1
    }

    /// Waits up to `timeout` (`None`: forever); returns how many are ready.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
        });
        let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `fds` is a live array of pollfd of the given length; `tsp`
        // is null or points to `ts`, alive for the call; no signal mask.
        let r = unsafe { libc::ppoll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, tsp, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // A signal (e.g. SIGINT for a clean stop) is a normal wake-up.
            return if e.kind() == io::ErrorKind::Interrupted { Ok(0) } else { Err(e) };
        }
        Ok(r as usize)
    }

    /// Whether descriptor `i` was readable (or in error) at the last wait.
    pub fn is_ready(&self, i: usize) -> bool {
        self.fds.get(i).is_some_and(|p| p.revents != 0)
    }
}

impl Default for Poller {
    fn default() -> Self {
        Poller::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_batch_reports_index_errors() {
        let b = RxBatch::new(4, 2048);
        assert_eq!(b.capacity(), 4);
        assert!(b.is_empty());
        assert_eq!(b.get(0).unwrap_err(), RxError::Index(0));
        assert_eq!(b.iter().count(), 0);
    }

    #[test]
    fn tx_load_points_at_caller_frames() {
        let frames = [(PacketMeta::PLAIN, &[1u8, 2, 3][..]), (PacketMeta::PLAIN, &[4u8; 60][..])];
        let mut t = TxBatch::new(8);
        let load = |t: &mut TxBatch, vnet| frames.iter().enumerate().for_each(|(i, f)| t.load_one(i, vnet, &f.0, f.1));
        load(&mut t, true);
        assert_eq!(t.iovs[1][1].iov_len, 60);
        assert_eq!(t.iovs[0][0].iov_len, VNET_HDR_LEN);
        assert_eq!(t.iovs[0][1].iov_base as *const u8, frames[0].1.as_ptr());
        load(&mut t, false);
        assert_eq!(t.iovs[0][0].iov_len, 0);
    }

    #[test]
    fn poller_times_out_and_sees_readable() {
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let mut p = Poller::new();
        let i = p.add(b.as_fd());
        let t0 = std::time::Instant::now();
        assert_eq!(p.wait(Some(Duration::from_micros(300))).unwrap(), 0);
        assert!(t0.elapsed() >= Duration::from_micros(300));
        assert!(!p.is_ready(i));
        a.send(b"x").unwrap();
        assert_eq!(p.wait(Some(Duration::from_secs(1))).unwrap(), 1);
        assert!(p.is_ready(i));
    }

    #[test]
    fn open_fails_cleanly_on_a_missing_interface() {
        let e = PacketSocket::open("px-nonexist0", &SocketConfig::default()).unwrap_err();
        assert!(matches!(e, OpenError::Iface(_)));
    }
}
