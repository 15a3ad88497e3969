//! UDP sockets with the knobs path MTU discovery needs, over `libc`.
//!
//! What std's `UdpSocket` cannot do and F-PMTUD needs: choose per datagram
//! whether DF is set (`IP_MTU_DISCOVER`), read the route's path MTU
//! (`IP_MTU`), learn the largest fragment of a reassembled datagram
//! (`IP_RECVFRAGSIZE`), the arrival interface and destination address
//! (`IP_PKTINFO`, so replies leave from the address the probe was sent to),
//! and ICMP errors queued for the socket (`IP_RECVERR`). IPv4 and IPv6.
//!
//! Everything here works unprivileged. Every `unsafe` block is a single
//! system call or control-message walk over buffers owned by the caller.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

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
}

/// A UDP socket of one address family.
#[derive(Debug)]
pub struct Sock {
    udp: UdpSocket,
    v6: bool,
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// `sockaddr_storage` for `addr`, and its length.
fn to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in>(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut ss).cast::<libc::sockaddr_in6>(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Control-message buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Cmsg([u8; 256]);

impl Sock {
    /// A socket bound to `addr` (port 0: any). IPv6 sockets are v6-only, so
    /// a v4 and a v6 socket can share a port.
    pub fn bind(addr: SocketAddr) -> io::Result<Sock> {
        let v6 = addr.is_ipv6();
        let domain = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: socket(2) with constant arguments.
        let fd = check(unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let sock = Sock { udp: UdpSocket::from(owned), v6 };
        if v6 {
            sock.set_int(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        }
        let (ss, len) = to_sockaddr(addr);
        // SAFETY: ss holds a valid sockaddr of length len.
        check(unsafe { libc::bind(fd, (&raw const ss).cast(), len) })?;
        Ok(sock)
    }

    /// A socket of `dest`'s family connected to it (only its datagrams are
    /// received; the kernel picks the route and the source address).
    pub fn connect_to(dest: SocketAddr) -> io::Result<Sock> {
        let any: SocketAddr =
            if dest.is_ipv6() { (Ipv6Addr::UNSPECIFIED, 0).into() } else { (Ipv4Addr::UNSPECIFIED, 0).into() };
        let s = Sock::bind(any)?;
        s.udp.connect(dest)?;
        Ok(s)
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
        // SAFETY: an int option value of the right size.
        check(unsafe {
            libc::setsockopt(
                self.udp.as_raw_fd(),
                level,
                name,
                (&raw const v).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    fn get_int(&self, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: v and len are valid for writes of an int option.
        check(unsafe { libc::getsockopt(self.udp.as_raw_fd(), level, name, (&raw mut v).cast(), &raw mut len) })?;
        Ok(v)
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

    /// Queue ICMP errors for [`Sock::recv_error`] (`IP_RECVERR`).
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
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        Ok(Some(r as usize))
    }

    /// Waits until a datagram or a queued error is ready, at most `timeout`
    /// (`None`: forever). `Ok(false)` on timeout or signal.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut p = libc::pollfd { fd: self.udp.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.map_or(-1, |d| {
            // Round up so a sub-millisecond deadline does not spin.
            libc::c_int::try_from(d.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX)
        });
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&raw mut p, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
        }
        Ok(r > 0)
    }

    /// Receives one datagram without blocking, with its arrival details;
    /// `Ok(None)` when nothing is queued.
    pub fn recv_meta(&self, buf: &mut [u8]) -> io::Result<Option<RecvMeta>> {
        // SAFETY: plain old data, zero is valid.
        let mut src: libc::sockaddr_storage = unsafe { zeroed() };
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut ctrl = Cmsg([0; 256]);
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
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        let Some(source) = from_sockaddr(&src) else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "datagram without a source address"));
        };
        let mut meta = RecvMeta {
            len: (r as usize).min(buf.len()),
            truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
            source,
            destination: None,
            ifindex: None,
            largest_fragment: None,
        };
        // SAFETY: walking the control messages the kernel wrote into ctrl,
        // bounded by msg_controllen; each data pointer is read with an
        // unaligned read of the type its (level, type) announces.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::IPPROTO_IP, libc::IP_RECVFRAGSIZE) | (libc::IPPROTO_IPV6, libc::IPV6_RECVFRAGSIZE) => {
                        let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                        meta.largest_fragment = u16::try_from(v).ok();
                    }
                    (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                        let p = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                        meta.ifindex = u32::try_from(p.ipi_ifindex).ok();
                        meta.destination = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr))));
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                        let p = std::ptr::read_unaligned(data.cast::<libc::in6_pktinfo>());
                        meta.ifindex = Some(p.ipi6_ifindex);
                        meta.destination = Some(IpAddr::V6(Ipv6Addr::from(p.ipi6_addr.s6_addr)));
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(&raw const msg, c);
            }
        }
        Ok(Some(meta))
    }

    /// Sends `buf` to `dest` from source address `from` (the address the
    /// request was sent to; `None`: the kernel chooses).
    pub fn send_from(&self, buf: &[u8], dest: SocketAddr, from: Option<IpAddr>) -> io::Result<usize> {
        let (ss, sslen) = to_sockaddr(dest);
        let mut iov = libc::iovec { iov_base: buf.as_ptr().cast_mut().cast(), iov_len: buf.len() };
        let mut ctrl = Cmsg([0; 256]);
        // SAFETY: plain old data, zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = (&raw const ss).cast_mut().cast();
        msg.msg_namelen = sslen;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        match from {
            Some(IpAddr::V4(a)) if !self.v6 => {
                // SAFETY: ctrl has room for one in_pktinfo message (256 bytes);
                // the header and data are written inside it.
                unsafe {
                    let space = libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize;
                    msg.msg_control = ctrl.0.as_mut_ptr().cast();
                    msg.msg_controllen = space as _;
                    let c = libc::CMSG_FIRSTHDR(&raw const msg);
                    (*c).cmsg_level = libc::IPPROTO_IP;
                    (*c).cmsg_type = libc::IP_PKTINFO;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
                    let p = libc::in_pktinfo {
                        ipi_ifindex: 0,
                        ipi_spec_dst: libc::in_addr { s_addr: u32::from(a).to_be() },
                        ipi_addr: libc::in_addr { s_addr: 0 },
                    };
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>(), p);
                }
            }
            Some(IpAddr::V6(a)) if self.v6 => {
                // SAFETY: as above, for in6_pktinfo.
                unsafe {
                    let space = libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize;
                    msg.msg_control = ctrl.0.as_mut_ptr().cast();
                    msg.msg_controllen = space as _;
                    let c = libc::CMSG_FIRSTHDR(&raw const msg);
                    (*c).cmsg_level = libc::IPPROTO_IPV6;
                    (*c).cmsg_type = libc::IPV6_PKTINFO;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
                    let p = libc::in6_pktinfo { ipi6_addr: libc::in6_addr { s6_addr: a.octets() }, ipi6_ifindex: 0 };
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>(), p);
                }
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
        let mut ctrl = Cmsg([0; 256]);
        // SAFETY: plain old data, zero is valid.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.0.as_mut_ptr().cast();
        msg.msg_controllen = ctrl.0.len() as _;
        // SAFETY: msg points at live buffers owned by this frame.
        let r = unsafe { libc::recvmsg(self.udp.as_raw_fd(), &raw mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        let len = (r as usize).min(buf.len());
        // SAFETY: as in recv_meta.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
            while !c.is_null() {
                let ok = matches!(
                    ((*c).cmsg_level, (*c).cmsg_type),
                    (libc::IPPROTO_IP, libc::IP_RECVERR) | (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
                );
                if ok {
                    let e = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::sock_extended_err>());
                    let from_net = matches!(e.ee_origin, libc::SO_EE_ORIGIN_ICMP | libc::SO_EE_ORIGIN_ICMP6);
                    let q = QueuedError {
                        errno: e.ee_errno as i32,
                        icmp: from_net.then_some((e.ee_type, e.ee_code)),
                        info: e.ee_info,
                    };
                    return Ok(Some((q, len)));
                }
                c = libc::CMSG_NXTHDR(&raw const msg, c);
            }
        }
        // A queued error without the extended record: nothing to learn.
        Ok(Some((QueuedError { errno: 0, icmp: None, info: 0 }, len)))
    }

    /// Raw descriptor, for polling several sockets.
    #[must_use]
    pub fn raw_fd(&self) -> libc::c_int {
        self.udp.as_raw_fd()
    }
}

/// MTU of the local interface that holds `addr` (the source address the
/// kernel chose for a route), found with `getifaddrs` and `SIOCGIFMTU`.
/// `Ok(None)` if no interface holds it.
pub fn interface_mtu_of(addr: IpAddr) -> io::Result<Option<u32>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below.
    check(unsafe { libc::getifaddrs(&raw mut head) })?;
    let mut name: Option<Vec<u8>> = None;
    let mut cur = head;
    // SAFETY: walking the list getifaddrs returned; ifa_addr may be null.
    unsafe {
        while !cur.is_null() {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null() {
                let fam = libc::c_int::from((*ifa.ifa_addr).sa_family);
                let matches = match (fam, addr) {
                    (libc::AF_INET, IpAddr::V4(a)) => {
                        let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                        u32::from_be(sin.sin_addr.s_addr) == u32::from(a)
                    }
                    (libc::AF_INET6, IpAddr::V6(a)) => {
                        let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                        sin6.sin6_addr.s6_addr == a.octets()
                    }
                    _ => false,
                };
                if matches {
                    name = Some(std::ffi::CStr::from_ptr(ifa.ifa_name).to_bytes().to_vec());
                    break;
                }
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
    }
    match name {
        Some(n) => ifname_mtu(&n).map(Some),
        None => Ok(None),
    }
}

/// MTU of interface `ifindex` (`if_indextoname` + `SIOCGIFMTU`).
pub fn ifindex_mtu(ifindex: u32) -> io::Result<u32> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: name has IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) };
    if p.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into `name`.
    let n = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_bytes().to_vec();
    ifname_mtu(&n)
}

fn ifname_mtu(name: &[u8]) -> io::Result<u32> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interface name too long"));
    }
    // SAFETY: ifreq is plain old data; zero is valid.
    let mut req: libc::ifreq = unsafe { zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket(2) with constant arguments; closed by OwnedFd.
    let fd = check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd is fresh and owned here.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: SIOCGIFMTU reads the name and writes ifru_mtu in req.
    check(unsafe { libc::ioctl(owned.as_raw_fd(), libc::SIOCGIFMTU as _, &raw mut req) })?;
    // SAFETY: SIOCGIFMTU filled the mtu member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as u32)
}

/// Eight random bytes from the kernel (`getrandom`), for nonces.
pub fn random_u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    // SAFETY: b is valid for 8 bytes of writes.
    let r = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if r != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for a in ["198.51.100.7:9999", "[2001:db8::1]:40000"] {
            let addr: SocketAddr = a.parse().unwrap();
            let (ss, len) = to_sockaddr(addr);
            assert!(len as usize <= size_of::<libc::sockaddr_storage>());
            assert_eq!(from_sockaddr(&ss), Some(addr));
        }
    }

    #[test]
    fn loopback_datagram_carries_arrival_info() {
        let server = Sock::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        server.enable_arrival_info().unwrap();
        let dest = server.local_addr().unwrap();
        let client = Sock::connect_to(dest).unwrap();
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
    fn random_nonces_differ() {
        assert_ne!(random_u64().unwrap(), random_u64().unwrap());
    }
}
