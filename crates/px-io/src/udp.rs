//! UDP sockets with the knobs path MTU discovery and caravans need, over
//! `libc`: the one home of PacketExpress's UDP platform code, the way
//! `quinn-udp` is quinn's.
//!
//! What std's `UdpSocket` cannot do and F-PMTUD needs: choose per datagram
//! whether DF is set (`IP_MTU_DISCOVER`), read the route's path MTU
//! (`IP_MTU`), learn the largest fragment of a reassembled datagram
//! (`IP_RECVFRAGSIZE`), the arrival interface and destination address
//! (`IP_PKTINFO`, so replies leave from the address the probe was sent to),
//! and ICMP errors queued for the socket (`IP_RECVERR`). What the caravan
//! end host needs: the TOS / traffic class of each datagram
//! (`IP_RECVTOS` / `IPV6_RECVTCLASS`) over a batched `recvmmsg`
//! ([`RecvBatch`]). IPv4 and IPv6.
//!
//! All control messages are read by one walker (`Ancillary::parse`), so
//! every receive path reports the same fields the same way.
//!
//! Everything here works unprivileged. Every `unsafe` block is a single
//! system call or control-message walk over buffers owned by the caller.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::af_packet::Poller;
pub use crate::sys::to_sockaddr;
use crate::sys::{Cmsg, check, from_sockaddr, getsockopt, put_cmsg, setsockopt, would_block};

/// How the kernel treats DF and cached path MTUs for a socket's datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DfMode {
    /// DF clear, sized by the interface MTU, the cached path MTU ignored
    /// (`IP_PMTUDISC_INTERFACE`): a datagram of exactly the link MTU leaves
    /// as one packet for routers to fragment, even if an earlier ICMP taught
    /// the route a smaller MTU (with `IP_PMTUDISC_DONT` the local stack would
    /// fragment it to that cached size and the measurement would only
    /// repeat the cache).
    Clear,
    /// DF set, the cached path MTU ignored (`IP_PMTUDISC_PROBE`): what
    /// DPLPMTUD and F-PMTUD confirmation probes need.
    Probe,
    /// DF set and the cached path MTU enforced (`IP_PMTUDISC_DO`): classic
    /// PMTUD; larger sends fail with `EMSGSIZE`.
    Do,
}

/// An ICMP error (or local error) the kernel queued for the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedError {
    /// `errno` of the error (`EMSGSIZE` for "too big").
    pub errno: i32,
    /// ICMP / ICMPv6 type and code, when it came from the network.
    pub icmp: Option<(u8, u8)>,
    /// `ee_info`: the next-hop MTU for "fragmentation needed" / "packet too big".
    pub info: u32,
}

impl QueuedError {
    /// The MTU this error announces, if it is an MTU error.
    #[must_use]
    pub fn mtu(&self) -> Option<u32> {
        (self.errno == libc::EMSGSIZE && self.info > 0).then_some(self.info)
    }
}

/// What `recvmsg` told about one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// Payload bytes written to the buffer.
    pub len: usize,
    /// The payload did not fit the buffer.
    pub truncated: bool,
    /// Sender.
    pub source: SocketAddr,
    /// Address the datagram was sent to (`IP_PKTINFO`).
    pub destination: Option<IpAddr>,
    /// Interface it arrived on.
    pub ifindex: Option<u32>,
    /// Largest fragment's IP length when it arrived fragmented (`IP_RECVFRAGSIZE`).
    pub largest_fragment: Option<u16>,
    /// TOS byte / IPv6 traffic class (`IP_RECVTOS` / `IPV6_RECVTCLASS`).
    pub tos: Option<u8>,
}

/// What the control messages of one received message said; fields stay
/// `None` for messages the socket did not ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Ancillary {
    /// Address the datagram was sent to (`IP_PKTINFO` / `IPV6_PKTINFO`).
    pub destination: Option<IpAddr>,
    /// Interface it arrived on (the same messages).
    pub ifindex: Option<u32>,
    /// Largest fragment's IP length (`IP_RECVFRAGSIZE` / `IPV6_RECVFRAGSIZE`).
    pub largest_fragment: Option<u16>,
    /// TOS byte / traffic class (`IP_TOS` / `IPV6_TCLASS`).
    pub tos: Option<u8>,
    /// The extended error record of a `MSG_ERRQUEUE` read (`IP_RECVERR` /
    /// `IPV6_RECVERR`); the first one if several.
    pub error: Option<QueuedError>,
}

impl Ancillary {
    /// Walks the control messages the kernel wrote for `msg`.
    ///
    /// `msg` must be a header a successful `recvmsg`/`recvmmsg` filled in
    /// (or one whose control buffer holds well-formed messages and whose
    /// `msg_controllen` bounds them), with the control buffer still alive.
    #[must_use]
    pub(crate) fn parse(msg: &libc::msghdr) -> Ancillary {
        let mut a = Ancillary::default();
        if msg.msg_control.is_null() {
            return a;
        }
        // SAFETY: walking the control messages the kernel wrote into the
        // caller's buffer, bounded by msg_controllen (CMSG_FIRSTHDR and
        // CMSG_NXTHDR check it); each data pointer is read with an unaligned
        // read of the type its (level, type) announces.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(msg);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::IPPROTO_IP, libc::IP_RECVFRAGSIZE) | (libc::IPPROTO_IPV6, libc::IPV6_RECVFRAGSIZE) => {
                        let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                        a.largest_fragment = u16::try_from(v).ok();
                    }
                    (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                        let p = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                        a.ifindex = u32::try_from(p.ipi_ifindex).ok();
                        a.destination = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr))));
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                        let p = std::ptr::read_unaligned(data.cast::<libc::in6_pktinfo>());
                        a.ifindex = Some(p.ipi6_ifindex);
                        a.destination = Some(IpAddr::V6(Ipv6Addr::from(p.ipi6_addr.s6_addr)));
                    }
                    // IP_TOS comes as one byte, IPV6_TCLASS as an int.
                    (libc::IPPROTO_IP, libc::IP_TOS) => a.tos = Some(*data),
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                        let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                        a.tos = Some(v as u8);
                    }
                    (libc::IPPROTO_IP, libc::IP_RECVERR) | (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
                        if a.error.is_none() =>
                    {
                        let e = std::ptr::read_unaligned(data.cast::<libc::sock_extended_err>());
                        let from_net = matches!(e.ee_origin, libc::SO_EE_ORIGIN_ICMP | libc::SO_EE_ORIGIN_ICMP6);
                        a.error = Some(QueuedError {
                            errno: e.ee_errno as i32,
                            icmp: from_net.then_some((e.ee_type, e.ee_code)),
                            info: e.ee_info,
                        });
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(msg, c);
            }
        }
        a
    }
}

/// Room for the control messages of one received datagram.
type RecvCmsg = Cmsg<256>;

/// A UDP socket of one address family.
#[derive(Debug)]
pub struct UdpSocket {
    udp: std::net::UdpSocket,
    v6: bool,
}

impl UdpSocket {
    /// A socket bound to `addr` (port 0: any). IPv6 sockets are v6-only, so
    /// a v4 and a v6 socket can share a port.
    pub fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
        Self::bind_inner(addr, true)
    }

    /// A socket bound to `addr` that, for IPv6, keeps the system's
    /// `IPV6_V6ONLY` default (dual-stack on Linux unless
    /// `net.ipv6.bindv6only` is set), as std's `UdpSocket::bind` does: `::`
    /// then also receives IPv4 datagrams as v4-mapped addresses.
    pub fn bind_dual_stack(addr: SocketAddr) -> io::Result<UdpSocket> {
        Self::bind_inner(addr, false)
    }

    fn bind_inner(addr: SocketAddr, v6only: bool) -> io::Result<UdpSocket> {
        let v6 = addr.is_ipv6();
        let domain = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: socket(2) with constant arguments.
        let fd = check(unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let sock = UdpSocket { udp: std::net::UdpSocket::from(owned), v6 };
        if v6 && v6only {
            sock.set_int(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        }
        let (ss, len) = to_sockaddr(addr);
        // SAFETY: ss holds a valid sockaddr of length len.
        check(unsafe { libc::bind(fd, (&raw const ss).cast(), len) })?;
        Ok(sock)
    }

    /// A socket of `dest`'s family connected to it (only its datagrams are
    /// received; the kernel picks the route and the source address).
    pub fn connect_to(dest: SocketAddr) -> io::Result<UdpSocket> {
        let any: SocketAddr =
            if dest.is_ipv6() { (Ipv6Addr::UNSPECIFIED, 0).into() } else { (Ipv4Addr::UNSPECIFIED, 0).into() };
        let s = UdpSocket::bind(any)?;
        s.connect(dest)?;
        Ok(s)
    }

    /// Connects to `dest`: sends go there, only its datagrams are received.
    pub fn connect(&self, dest: SocketAddr) -> io::Result<()> {
        self.udp.connect(dest)
    }

    /// IPv6 socket.
    #[must_use]
    pub fn is_v6(&self) -> bool {
        self.v6
    }

    /// IP + UDP header bytes of this family's datagrams (no options).
    #[must_use]
    pub fn overhead(&self) -> u16 {
        if self.v6 { 48 } else { 28 }
    }

    /// The bound local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.udp.local_addr()
    }

    fn set_int(&self, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
        setsockopt(&self.udp, level, name, &v)
    }

    fn get_int(&self, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        getsockopt(&self.udp, level, name)
    }

    /// Chooses DF handling for the next datagrams.
    pub fn set_df(&self, mode: DfMode) -> io::Result<()> {
        let (level, name) = if self.v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER)
        } else {
            (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)
        };
        let v = match (mode, self.v6) {
            (DfMode::Clear, false) => libc::IP_PMTUDISC_INTERFACE,
            (DfMode::Clear, true) => libc::IPV6_PMTUDISC_INTERFACE,
            (DfMode::Probe, false) => libc::IP_PMTUDISC_PROBE,
            (DfMode::Probe, true) => libc::IPV6_PMTUDISC_PROBE,
            (DfMode::Do, false) => libc::IP_PMTUDISC_DO,
            (DfMode::Do, true) => libc::IPV6_PMTUDISC_DO,
        };
        self.set_int(level, name, v)
    }

    /// The route's current path MTU (`IP_MTU`; connected sockets only).
    pub fn path_mtu(&self) -> io::Result<u32> {
        let (level, name) =
            if self.v6 { (libc::IPPROTO_IPV6, libc::IPV6_MTU) } else { (libc::IPPROTO_IP, libc::IP_MTU) };
        self.get_int(level, name).map(|v| v.max(0) as u32)
    }

    /// Queue ICMP errors for [`UdpSocket::recv_error`] (`IP_RECVERR`).
    pub fn enable_errors(&self) -> io::Result<()> {
        if self.v6 {
            self.set_int(libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)
        } else {
            self.set_int(libc::IPPROTO_IP, libc::IP_RECVERR, 1)
        }
    }

    /// Report fragment sizes and arrival interface/address with each
    /// datagram (`IP_RECVFRAGSIZE`, `IP_PKTINFO`).
    pub fn enable_arrival_info(&self) -> io::Result<()> {
        if self.v6 {
            self.set_int(libc::IPPROTO_IPV6, libc::IPV6_RECVFRAGSIZE, 1)?;
            self.set_int(libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)
        } else {
            self.set_int(libc::IPPROTO_IP, libc::IP_RECVFRAGSIZE, 1)?;
            self.set_int(libc::IPPROTO_IP, libc::IP_PKTINFO, 1)
        }
    }

    /// Report each datagram's TOS / traffic class ([`RecvMeta::tos`]):
    /// `IP_RECVTOS`, or `IPV6_RECVTCLASS` on an IPv6 socket, which also
    /// tries `IP_RECVTOS` so that IPv4 datagrams of a dual-stack socket
    /// report their TOS too (that second option's failure is ignored).
    pub fn enable_recv_tos(&self) -> io::Result<()> {
        if self.v6 {
            self.set_int(libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
            let _ = self.set_int(libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
            Ok(())
        } else {
            self.set_int(libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
        }
    }

    /// The TOS byte / traffic class of the datagrams this socket sends
    /// (`IP_TOS` / `IPV6_TCLASS`).
    pub fn set_tos(&self, tos: u8) -> io::Result<()> {
        let (level, opt) =
            if self.v6 { (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) } else { (libc::IPPROTO_IP, libc::IP_TOS) };
        self.set_int(level, opt, libc::c_int::from(tos))
    }

    /// `SO_SNDBUF` (the kernel doubles the value).
    pub fn set_send_buffer(&self, bytes: usize) -> io::Result<()> {
        self.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, bytes.min(i32::MAX as usize) as i32)
    }

    /// `SO_RCVBUF`, then `SO_RCVBUFFORCE` (needs `CAP_NET_ADMIN`; lifts the
    /// `rmem_max` cap) with the same value; the kernel doubles it. Fails
    /// only if both fail.
    pub fn set_recv_buffer(&self, bytes: usize) -> io::Result<()> {
        let v = bytes.min(i32::MAX as usize) as i32;
        let plain = self.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, v);
        let force = self.set_int(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v);
        force.or(plain)
    }

    /// How long a blocking receive ([`UdpSocket::recv_batch`]) waits.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.udp.set_read_timeout(timeout)
    }

    /// Reads and clears the socket's pending error (`SO_ERROR`): on a
    /// connected socket an ICMP error an earlier datagram drew ("port
    /// unreachable", "fragmentation needed") is held here and would
    /// otherwise make the next `send` fail without sending.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.udp.take_error()
    }

    /// Sends on a connected socket.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.udp.send(buf)
    }

    /// Receives on a connected socket without blocking; `Ok(None)` when
    /// nothing is queued.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: buf is valid for writes of buf.len() bytes.
        let r = unsafe { libc::recv(self.udp.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if r < 0 {
            return would_block(io::Error::last_os_error());
        }
        Ok(Some(r as usize))
    }

    /// Waits until a datagram or a queued error is ready, at most `timeout`
    /// (`None`: forever). `Ok(false)` on timeout or signal.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut p = Poller::new();
        p.add(self.as_fd());
        Ok(p.wait(timeout)? > 0)
    }

    /// Receives one datagram without blocking, with its arrival details;
    /// `Ok(None)` when nothing is queued.
    pub fn recv_meta(&self, buf: &mut [u8]) -> io::Result<Option<RecvMeta>> {
        // SAFETY: plain old data, zero is valid.
        let mut src: libc::sockaddr_storage = unsafe { zeroed() };
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut ctrl: RecvCmsg = Cmsg([0; 256]);
        // SAFETY: plain old data, zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = (&raw mut src).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.0.as_mut_ptr().cast();
        msg.msg_controllen = ctrl.0.len() as _;
        // SAFETY: msg points at live buffers owned by this frame.
        let r = unsafe { libc::recvmsg(self.udp.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
        if r < 0 {
            return would_block(io::Error::last_os_error());
        }
        let Some(meta) = RecvMeta::from_msg(&msg, &src, r as usize, buf.len()) else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "datagram without a source address"));
        };
        Ok(Some(meta))
    }

    /// Sends `buf` to `dest` from source address `from` (the address the
    /// request was sent to; `None`: the kernel chooses).
    pub fn send_from(&self, buf: &[u8], dest: SocketAddr, from: Option<IpAddr>) -> io::Result<usize> {
        let (ss, sslen) = to_sockaddr(dest);
        let mut iov = libc::iovec { iov_base: buf.as_ptr().cast_mut().cast(), iov_len: buf.len() };
        let mut ctrl = Cmsg([0u8; 64]);
        // SAFETY: plain old data, zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = (&raw const ss).cast_mut().cast();
        msg.msg_namelen = sslen;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        match from {
            Some(IpAddr::V4(a)) if !self.v6 => {
                let p = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr { s_addr: u32::from(a).to_be() },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                put_cmsg(&mut msg, &mut ctrl, libc::IPPROTO_IP, libc::IP_PKTINFO, p);
            }
            Some(IpAddr::V6(a)) if self.v6 => {
                let p = libc::in6_pktinfo { ipi6_addr: libc::in6_addr { s6_addr: a.octets() }, ipi6_ifindex: 0 };
                put_cmsg(&mut msg, &mut ctrl, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, p);
            }
            _ => {}
        }
        // SAFETY: msg points at live buffers owned by this frame.
        let r = unsafe { libc::sendmsg(self.udp.as_raw_fd(), &raw const msg, libc::MSG_DONTWAIT) };
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r as usize) }
    }

    /// Takes one queued error (`MSG_ERRQUEUE`); `Ok(None)` when none is
    /// queued. `quoted` receives the start of the UDP payload of the datagram
    /// the error is about (as much as the ICMP message quoted), so the
    /// caller can check it was really its own; the length is returned.
    pub fn recv_error(&self, quoted: &mut [u8]) -> io::Result<Option<(QueuedError, usize)>> {
        let buf = quoted;
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut ctrl: RecvCmsg = Cmsg([0; 256]);
        // SAFETY: plain old data, zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.0.as_mut_ptr().cast();
        msg.msg_controllen = ctrl.0.len() as _;
        // SAFETY: msg points at live buffers owned by this frame.
        let r = unsafe { libc::recvmsg(self.udp.as_raw_fd(), &raw mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            return would_block(io::Error::last_os_error());
        }
        let len = (r as usize).min(buf.len());
        // A queued error without the extended record: nothing to learn.
        let q = Ancillary::parse(&msg).error.unwrap_or(QueuedError { errno: 0, icmp: None, info: 0 });
        Ok(Some((q, len)))
    }

    /// Receives up to a batch of datagrams with one `recvmmsg`: blocks (up
    /// to the read timeout) for the first, then takes what is queued
    /// (`MSG_WAITFORONE`). Returns how many; 0 on timeout or signal.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.prepare();
        // SAFETY: every message points at live buffers owned by `batch`,
        // set up by `prepare` for this call.
        let r = unsafe {
            libc::recvmmsg(
                self.udp.as_raw_fd(),
                batch.msgs.as_mut_ptr(),
                batch.msgs.len() as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            batch.filled = 0;
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        batch.filled = r as usize;
        Ok(batch.filled)
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.udp.as_fd()
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.udp.as_raw_fd()
    }
}

impl RecvMeta {
    /// The meta of a message `recvmsg` received: `n` bytes into a buffer of
    /// `cap`, from `src`. `None` if the kernel gave no source address.
    fn from_msg(msg: &libc::msghdr, src: &libc::sockaddr_storage, n: usize, cap: usize) -> Option<RecvMeta> {
        let source = from_sockaddr(src)?;
        let a = Ancillary::parse(msg);
        Some(RecvMeta {
            len: n.min(cap),
            truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
            source,
            destination: a.destination,
            ifindex: a.ifindex,
            largest_fragment: a.largest_fragment,
            tos: a.tos,
        })
    }
}

/// Preallocated buffers for [`UdpSocket::recv_batch`]: one payload buffer,
/// source address and control-message buffer per datagram, so a receive
/// allocates nothing.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<Cmsg<64>>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    filled: usize,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch").field("capacity", &self.msgs.len()).field("filled", &self.filled).finish()
    }
}

impl RecvBatch {
    /// Room for `n` datagrams of up to `size` bytes each.
    #[must_use]
    pub fn new(n: usize, size: usize) -> RecvBatch {
        // SAFETY: plain C structs; all-zero is a valid value for each.
        let zero_addr: libc::sockaddr_storage = unsafe { zeroed() };
        let mut b = RecvBatch {
            bufs: vec![vec![0u8; size]; n],
            addrs: vec![zero_addr; n],
            ctrl: vec![Cmsg([0u8; 64]); n],
            iov: Vec::with_capacity(n),
            msgs: Vec::with_capacity(n),
            filled: 0,
        };
        for i in 0..n {
            b.iov.push(libc::iovec { iov_base: b.bufs[i].as_mut_ptr().cast(), iov_len: size });
        }
        for i in 0..n {
            // SAFETY: as above.
            let mut m: libc::mmsghdr = unsafe { zeroed() };
            m.msg_hdr.msg_iov = &raw mut b.iov[i];
            m.msg_hdr.msg_iovlen = 1;
            b.msgs.push(m);
        }
        b
    }

    /// Points every message at its buffers and resets the outputs.
    fn prepare(&mut self) {
        for i in 0..self.msgs.len() {
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_name = (&raw mut self.addrs[i]).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_control = self.ctrl[i].0.as_mut_ptr().cast();
            h.msg_controllen = self.ctrl[i].0.len() as _;
            h.msg_flags = 0;
        }
    }

    /// Datagrams the last receive filled in.
    #[must_use]
    pub fn len(&self) -> usize {
        self.filled
    }

    /// The last receive filled in nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// Datagram `i` of the last receive: its bytes and what the kernel said
    /// about it (sender, TOS, ...). `None` past the batch or if the kernel
    /// gave no source address.
    #[must_use]
    pub fn get(&self, i: usize) -> Option<(&[u8], RecvMeta)> {
        if i >= self.filled {
            return None;
        }
        let m = &self.msgs[i];
        let meta = RecvMeta::from_msg(&m.msg_hdr, &self.addrs[i], m.msg_len as usize, self.bufs[i].len())?;
        Some((&self.bufs[i][..meta.len], meta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ifaddr::{ifindex_mtu, interface_mtu_of};

    /// A header over `buf` holding the given messages, as the kernel would
    /// have written them.
    fn msg_with(buf: &mut Cmsg<256>, msgs: &[(i32, i32, &[u8])]) -> libc::msghdr {
        // SAFETY: plain old data, zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_control = buf.0.as_mut_ptr().cast();
        msg.msg_controllen = buf.0.len() as _;
        let mut used = 0;
        // SAFETY: each message is written inside `buf` (CMSG_NXTHDR keeps
        // within msg_controllen, the whole buffer while writing).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
            for (level, ty, data) in msgs {
                assert!(!c.is_null());
                (*c).cmsg_level = *level;
                (*c).cmsg_type = *ty;
                (*c).cmsg_len = libc::CMSG_LEN(data.len() as u32) as _;
                std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(c), data.len());
                used += libc::CMSG_SPACE(data.len() as u32) as usize;
                c = libc::CMSG_NXTHDR(&raw const msg, c);
            }
        }
        msg.msg_controllen = used as _;
        msg
    }

    fn bytes<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a plain-old-data value.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    #[test]
    fn cmsg_walk_reads_every_kind_we_ask_for() {
        let mut buf = Cmsg([0u8; 256]);
        let pktinfo = libc::in_pktinfo {
            ipi_ifindex: 7,
            ipi_spec_dst: libc::in_addr { s_addr: 0 },
            ipi_addr: libc::in_addr { s_addr: u32::from(Ipv4Addr::new(198, 51, 100, 34)).to_be() },
        };
        let frag: libc::c_int = 1280;
        let msg = msg_with(
            &mut buf,
            &[
                (libc::IPPROTO_IP, libc::IP_PKTINFO, &bytes(&pktinfo)),
                (libc::IPPROTO_IP, libc::IP_RECVFRAGSIZE, &bytes(&frag)),
                (libc::IPPROTO_IP, libc::IP_TOS, &[0xb8]),
                (libc::SOL_SOCKET, libc::SO_TIMESTAMP, &[0u8; 16]),
            ],
        );
        let a = Ancillary::parse(&msg);
        assert_eq!(
            a,
            Ancillary {
                destination: Some(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 34))),
                ifindex: Some(7),
                largest_fragment: Some(1280),
                tos: Some(0xb8),
                error: None,
            }
        );
    }

    #[test]
    fn cmsg_walk_reads_ipv6_and_queued_errors() {
        let mut buf = Cmsg([0u8; 256]);
        let addr: Ipv6Addr = "2001:db8::22".parse().unwrap();
        let pktinfo = libc::in6_pktinfo { ipi6_addr: libc::in6_addr { s6_addr: addr.octets() }, ipi6_ifindex: 3 };
        let tclass: libc::c_int = 0x2e;
        // SAFETY: plain old data, zero is valid.
        let mut ee: libc::sock_extended_err = unsafe { zeroed() };
        ee.ee_errno = libc::EMSGSIZE as u32;
        ee.ee_origin = libc::SO_EE_ORIGIN_ICMP6;
        ee.ee_type = 2;
        ee.ee_info = 1400;
        let msg = msg_with(
            &mut buf,
            &[
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &bytes(&pktinfo)),
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &bytes(&tclass)),
                (libc::IPPROTO_IPV6, libc::IPV6_RECVERR, &bytes(&ee)),
            ],
        );
        let a = Ancillary::parse(&msg);
        assert_eq!(a.destination, Some(IpAddr::V6(addr)));
        assert_eq!((a.ifindex, a.tos, a.largest_fragment), (Some(3), Some(0x2e), None));
        let e = a.error.unwrap();
        assert_eq!((e.errno, e.icmp, e.info, e.mtu()), (libc::EMSGSIZE, Some((2, 0)), 1400, Some(1400)));
        // A local error (no ICMP origin) carries no type/code.
        ee.ee_origin = libc::SO_EE_ORIGIN_LOCAL;
        let msg = msg_with(&mut buf, &[(libc::IPPROTO_IP, libc::IP_RECVERR, &bytes(&ee))]);
        assert_eq!(Ancillary::parse(&msg).error.unwrap().icmp, None);
        // No control buffer at all.
        // SAFETY: plain old data, zero is valid.
        let empty: libc::msghdr = unsafe { zeroed() };
        assert_eq!(Ancillary::parse(&empty), Ancillary::default());
    }

    #[test]
    fn loopback_datagram_carries_arrival_info() {
        let server = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        server.enable_arrival_info().unwrap();
        let dest = server.local_addr().unwrap();
        let client = UdpSocket::connect_to(dest).unwrap();
        client.set_df(DfMode::Probe).unwrap();
        client.send(&[7u8; 100]).unwrap();
        assert!(server.wait(Some(Duration::from_secs(2))).unwrap());
        let mut buf = [0u8; 2048];
        let m = server.recv_meta(&mut buf).unwrap().unwrap();
        assert_eq!(m.len, 100);
        assert!(!m.truncated);
        assert_eq!(m.destination, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(m.largest_fragment, None, "an unfragmented datagram has no fragment size");
        assert!(m.ifindex.is_some());
        assert_eq!(m.source, client.local_addr().unwrap());
        // Reply from the address the request was sent to.
        server.send_from(b"pong", m.source, m.destination).unwrap();
        assert!(client.wait(Some(Duration::from_secs(2))).unwrap());
        assert_eq!(client.try_recv(&mut buf).unwrap(), Some(4));
        assert_eq!(client.try_recv(&mut buf).unwrap(), None);
        // The loopback interface's MTU bounds what the route reports (the
        // route caps it at the largest IP datagram, 65535).
        let lo = interface_mtu_of(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap().unwrap();
        let route = client.path_mtu().unwrap();
        assert!(route <= lo && route >= 1280, "route {route}, loopback {lo}");
        assert_eq!(ifindex_mtu(m.ifindex.unwrap()).unwrap(), lo);
    }

    #[test]
    fn loopback_batch_reports_tos_and_sender() {
        let server = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        server.enable_recv_tos().unwrap();
        server.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let client = UdpSocket::connect_to(server.local_addr().unwrap()).unwrap();
        client.set_tos(0xb8).unwrap();
        for i in 0..3u8 {
            client.send(&[i; 10]).unwrap();
        }
        let mut batch = RecvBatch::new(8, 2048);
        let mut got = Vec::new();
        for _ in 0..20 {
            let n = server.recv_batch(&mut batch).unwrap();
            assert_eq!(n, batch.len());
            for i in 0..n {
                let (data, meta) = batch.get(i).unwrap();
                assert_eq!(meta.source, client.local_addr().unwrap());
                assert_eq!(meta.tos, Some(0xb8));
                got.push(data.to_vec());
            }
            assert!(batch.get(n).is_none());
            if got.len() == 3 {
                break;
            }
        }
        assert_eq!(got, vec![vec![0u8; 10], vec![1u8; 10], vec![2u8; 10]]);
        // Nothing queued: the read timeout ends the wait with 0.
        assert_eq!(server.recv_batch(&mut batch).unwrap(), 0);
        assert!(batch.is_empty());
    }
}
