//! The libc calls px-io's modules share, each wrapped once with its
//! safety argument: socket options, the `-1`/`errno` convention, socket
//! addresses, control-message buffers, and the kernel's random bytes.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

/// `setsockopt` for plain-old-data option values.
pub(crate) fn setsockopt<T: Copy>(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` points to a live, initialised `T` of the given size; every
    // caller passes the type the option expects (int, packet_mreq,
    // tpacket_req).
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), level, name, (v as *const T).cast(), size_of::<T>() as libc::socklen_t)
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// `getsockopt` of a plain-old-data option value (`int`, `tpacket_stats`).
pub(crate) fn getsockopt<T: Copy>(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> io::Result<T> {
    // SAFETY: every caller asks for a plain C type (int, tpacket_stats) for
    // which all-zero bytes are a valid value.
    let mut v: T = unsafe { zeroed() };
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live and valid for writes of a `T`; the
    // kernel writes at most `len` bytes.
    check(unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, (&raw mut v).cast(), &raw mut len) })?;
    Ok(v)
}

/// The result of a call that returns a count or -1 and `errno`.
pub(crate) fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// `Ok(None)` for "nothing queued" (`EAGAIN`), the error otherwise.
pub(crate) fn would_block<T>(e: io::Error) -> io::Result<Option<T>> {
    if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) }
}

/// `sockaddr_storage` for `addr`, and its length (for the socket calls that
/// take one: `bind`, `connect`, `sendto`).
pub fn to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
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

/// The address in `ss` (AF_INET or AF_INET6; `None` for any other family).
pub(crate) fn from_sockaddr(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
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
#[derive(Clone, Copy)]
pub(crate) struct Cmsg<const N: usize>(pub(crate) [u8; N]);

/// Writes one control message holding `value` at the start of `buf` and
/// points `msg` at it.
pub(crate) fn put_cmsg<T: Copy, const N: usize>(
    msg: &mut libc::msghdr,
    buf: &mut Cmsg<N>,
    level: i32,
    ty: i32,
    value: T,
) {
    // SAFETY: CMSG_SPACE of T fits N for every caller (asserted); the
    // header and data are written inside `buf`, which outlives the send.
    unsafe {
        let space = libc::CMSG_SPACE(size_of::<T>() as u32) as usize;
        assert!(space <= N, "control buffer too small");
        msg.msg_control = buf.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(msg);
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<T>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<T>(), value);
    }
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
    fn random_nonces_differ() {
        assert_ne!(random_u64().unwrap(), random_u64().unwrap());
    }
}
